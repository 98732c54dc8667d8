//! Client and server control sessions as sans-IO state machines (docs/protocol.md 4).
//!
//! The whole exchange, client on the left:
//!
//! ```text
//! preface "LINERATE" v1, hello ->
//!                                <- welcome (version, host, limits)  | refuse
//! spec (resolved config)      ->
//!                                <- accepted (test id, token)        | refuse
//! [client opens N data connections, each "LINEDATA" token flow]
//!                                <- flows_ready                      | error
//! start                       ->
//! [both ends move data on their own clocks for omit + time]
//!                                <- results (the server's side)      | error
//! done                        ->
//! ```
//!
//! Either end may close at any time; the other end then ends the test and frees its
//! resources. Every wait has a deadline, so no state can hang.
//!
//! Calling order for both machines: feed input with `handle_input(now, bytes)`,
//! `handle_eof(now)` and, when `poll_timeout()` has passed, `handle_timeout(now)`; call the
//! driver actions (`accept`, `start`, ...) when an event asks for them; after every call,
//! drain `poll_transmit()` to the socket and `poll_event()` to the driver. Time is only ever
//! an argument.

use crate::auth::{
    encode_with, open_with, AuthError, ClientAuth, ControlSeal, Key, Nonce, Role, ServerAuth,
};
use crate::frame::{FrameDecoder, FrameError, MAX_CLIENT_FRAME, MAX_SERVER_FRAME};
use crate::machine::{Machine, Outbox};
use crate::message::{encode, ClientMessage, Limits, RefuseCode, ServerMessage};
use crate::preface::{self, Preface, Token, PROTOCOL_VERSION};
use linerate_model::{HostFacts, SideResult, TestConfig, Workload};
use std::time::{Duration, Instant};
use thiserror::Error;

/// How long each side waits for the other at each step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timeouts {
    /// For a handshake message (preface, hello, welcome, spec, accepted, start).
    pub handshake: Duration,
    /// For all data connections to arrive.
    pub flows: Duration,
    /// Beyond `omit + time`, for the results (the receiver's drain and the server's work).
    pub results_grace: Duration,
    /// How long an agent connection with nothing running may stay silent.
    pub idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            handshake: Duration::from_secs(10),
            flows: Duration::from_secs(30),
            results_grace: Duration::from_secs(20),
            idle: Duration::from_secs(120),
        }
    }
}

/// Why a test ended badly, as either end sees it.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum SessionError {
    #[error("server refused the test ({code:?}): {reason}")]
    Refused { code: RefuseCode, reason: String },
    #[error("protocol version mismatch: this end speaks {ours}, the peer {theirs}")]
    VersionMismatch { ours: u32, theirs: u32 },
    #[error("server error: {0}")]
    ServerError(String),
    #[error("client aborted the test: {0}")]
    ClientAborted(String),
    #[error("peer closed the control connection while {0}")]
    PeerClosed(&'static str),
    #[error("timed out after {seconds:.0} s while {waiting}")]
    Timeout { waiting: &'static str, seconds: f64 },
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("protocol error: {0}")]
    Frame(#[from] FrameError),
    #[error("authentication failed: {0}")]
    Auth(AuthError),
}

/// Things a server session asks its driver to do, or tells it.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerEvent {
    /// A client asks for this test (already checked against the limits). Answer with
    /// [`ServerSession::accept`] or [`ServerSession::refuse`].
    TestRequested(Box<TestConfig>),
    /// Start moving data now: the test accepted.
    Start(Box<TestConfig>),
    /// The client ended the running test early: end this side now; its results go as
    /// usual through [`ServerSession::finish`].
    EndRequested,
    /// The session is over: free everything of this test. `Ok` after a completed test.
    Closed(Result<(), SessionError>),
}

/// Where a server session is; from the specification on, the states carry the test they
/// are about, so that no step needs to look for it elsewhere.
#[derive(Debug, Clone, PartialEq)]
enum ServerState {
    AwaitPreface,
    AwaitHello,
    AwaitAuth,
    AwaitSpec,
    Deciding(Box<TestConfig>),
    AwaitFlows(Box<TestConfig>),
    AwaitStart(Box<TestConfig>),
    Running(Box<TestConfig>),
    AwaitDone,
    Closed,
}

impl ServerState {
    fn waiting_for(&self) -> &'static str {
        match self {
            ServerState::AwaitPreface => "waiting for the client's preface",
            ServerState::AwaitHello => "waiting for the client's hello",
            ServerState::AwaitAuth => "waiting for the client's proof of the key",
            ServerState::AwaitSpec => "waiting for the test specification",
            ServerState::Deciding(_) => "deciding on the test",
            ServerState::AwaitFlows(_) => "waiting for data connections",
            ServerState::AwaitStart(_) => "waiting for start",
            ServerState::Running(_) => "running the test",
            ServerState::AwaitDone => "waiting for the client's done",
            ServerState::Closed => "closed",
        }
    }

    /// The test this state is about, from its specification until its results.
    fn config(&self) -> Option<&TestConfig> {
        match self {
            ServerState::Deciding(config)
            | ServerState::AwaitFlows(config)
            | ServerState::AwaitStart(config)
            | ServerState::Running(config) => Some(config),
            ServerState::AwaitPreface
            | ServerState::AwaitHello
            | ServerState::AwaitAuth
            | ServerState::AwaitSpec
            | ServerState::AwaitDone
            | ServerState::Closed => None,
        }
    }
}

/// The server's half of one control connection.
/// What the server tells a client of its accepted test's data connections, beyond the
/// token.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Offer {
    /// UDP tests: the server's port for each flow.
    pub udp_ports: Vec<u16>,
    /// crr tests: the port of the test's listener.
    pub crr_port: Option<u16>,
    /// TLS and QUIC tests: the certificate's SHA-256 fingerprint (hex).
    pub tls_fingerprint: Option<String>,
    /// QUIC tests: the server's UDP port for each of its QUIC workers (one, or as many
    /// as the client asked for and the server runs).
    pub quic_ports: Vec<u16>,
}

/// The QUIC ports a server's acceptance offers for `config`: its `quic_port`, or, from a
/// server running several QUIC workers, `quic_ports` (the first of which is `quic_port`),
/// at least one and no more than the workers the config asked for.
fn quic_ports_offered(
    config: &linerate_model::TestConfig,
    quic_port: Option<u16>,
    quic_ports: Vec<u16>,
) -> Result<Vec<u16>, String> {
    if config.protocol != linerate_model::Protocol::Quic {
        return Ok(Vec::new());
    }
    let asked = config.quic.as_ref().map_or(1, |q| q.workers.max(1)) as usize;
    let ports = if quic_ports.is_empty() {
        quic_port.into_iter().collect()
    } else {
        quic_ports
    };
    if ports.is_empty() {
        return Err("the server accepted a QUIC test without a port for it".into());
    }
    if ports.len() > asked {
        return Err(format!(
            "the server offered {} QUIC ports for {asked} QUIC workers",
            ports.len()
        ));
    }
    if quic_port.is_some_and(|first| first != ports[0]) || ports.contains(&0) {
        return Err("the server's QUIC ports disagree with its QUIC port".into());
    }
    Ok(ports)
}

#[derive(Debug)]
pub struct ServerSession {
    state: ServerState,
    preface: Vec<u8>,
    decoder: FrameDecoder,
    deadline: Option<Instant>,
    timeouts: Timeouts,
    limits: Limits,
    software: String,
    host: HostFacts,
    /// Present when the server holds a key: every client must prove it holds it too.
    auth: Option<ServerAuth>,
    /// Every frame after a keyed handshake is sealed (crate::auth).
    seal: Option<ControlSeal>,
    outbox: Outbox<ServerEvent>,
}

impl ServerSession {
    pub fn new(
        now: Instant,
        limits: Limits,
        software: String,
        host: HostFacts,
        timeouts: Timeouts,
    ) -> ServerSession {
        ServerSession {
            state: ServerState::AwaitPreface,
            preface: Vec::new(),
            decoder: FrameDecoder::new(MAX_CLIENT_FRAME),
            deadline: Some(now + timeouts.handshake),
            timeouts,
            limits,
            software,
            host,
            auth: None,
            seal: None,
            outbox: Outbox::new(),
        }
    }

    /// Requires every client to prove it holds `key`; `nonce` is this connection's own,
    /// fresh random bytes from the driver.
    pub fn with_key(mut self, key: Key, nonce: Nonce) -> ServerSession {
        self.auth = Some(ServerAuth::new(key, nonce));
        self
    }

    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.outbox.poll_event()
    }

    pub fn is_closed(&self) -> bool {
        self.state == ServerState::Closed
    }

    /// The test asked for, from its specification until its results are sent.
    pub fn config(&self) -> Option<&TestConfig> {
        self.state.config()
    }

    /// Takes the state out to move it on (its test with it); `Closed` until put back.
    fn take_state(&mut self) -> ServerState {
        std::mem::replace(&mut self.state, ServerState::Closed)
    }

    fn close(&mut self, outcome: Result<(), SessionError>) {
        if self.state != ServerState::Closed {
            self.state = ServerState::Closed;
            self.deadline = None;
            self.outbox.emit(ServerEvent::Closed(outcome));
        }
    }

    fn fail(&mut self, error: SessionError) {
        // Tell the client why, best effort, then close. The client says "server error:"
        // itself: the reason of the server's own failure goes bare.
        let reason = match &error {
            SessionError::ServerError(reason) => reason.clone(),
            other => other.to_string(),
        };
        self.outbox.send(encode_with(
            &mut self.seal,
            &ServerMessage::Error {
                reason: reason.into(),
            },
        ));
        self.close(Err(error));
    }

    fn refuse_and_close(&mut self, code: RefuseCode, reason: String) {
        self.outbox.send(encode_with(
            &mut self.seal,
            &ServerMessage::Refuse {
                code,
                reason: reason.as_str().into(),
            },
        ));
        let error = match code {
            RefuseCode::VersionMismatch => SessionError::Protocol(reason),
            _ => SessionError::Refused { code, reason },
        };
        self.close(Err(error));
    }

    fn handle_message(&mut self, now: Instant, message: ClientMessage) {
        match (&self.state, message) {
            (_, ClientMessage::Abort { reason }) => {
                self.close(Err(SessionError::ClientAborted(reason.into())))
            }
            (ServerState::AwaitHello, ClientMessage::Hello { nonce, pake, .. }) => {
                let challenge = match self.auth.as_mut().map(|a| {
                    a.handle_hello(nonce.as_deref(), pake.as_deref(), &bound(PROTOCOL_VERSION))
                }) {
                    None => None,
                    Some(Ok(challenge)) => Some(challenge),
                    Some(Err(e)) => {
                        return self.refuse_and_close(RefuseCode::Unauthorized, e.to_string())
                    }
                };
                self.state = if challenge.is_some() {
                    ServerState::AwaitAuth
                } else {
                    ServerState::AwaitSpec
                };
                // A keyed server tells nothing of its host before the client proves the
                // key: the facts follow, sealed, in `accepted`.
                let host = if challenge.is_some() {
                    self.host.software_only()
                } else {
                    self.host.clone()
                };
                self.outbox.send(encode_with(
                    &mut self.seal,
                    &ServerMessage::Welcome {
                        version: PROTOCOL_VERSION,
                        software: self.software.clone(),
                        host,
                        limits: self.limits.clone(),
                        auth: challenge,
                    },
                ));
                self.deadline = Some(now + self.timeouts.handshake);
            }
            (ServerState::AwaitAuth, ClientMessage::Auth { proof }) => {
                let verdict = self
                    .auth
                    .as_ref()
                    .map_or(Err(AuthError::Malformed), |a| a.handle_proof(&proof));
                match verdict {
                    Ok(keys) => {
                        self.seal = Some(keys.seal_for(Role::Server));
                        self.state = ServerState::AwaitSpec;
                        self.deadline = Some(now + self.timeouts.handshake);
                    }
                    Err(e) => self.refuse_and_close(RefuseCode::Unauthorized, e.to_string()),
                }
            }
            (ServerState::AwaitSpec, ClientMessage::Spec { config }) => {
                match validate(&config, &self.limits) {
                    Ok(()) => {
                        self.state = ServerState::Deciding(config.clone());
                        self.deadline = None;
                        self.outbox.emit(ServerEvent::TestRequested(config));
                    }
                    Err((code, reason)) => self.refuse_and_close(code, reason),
                }
            }
            (ServerState::AwaitStart(config), ClientMessage::Start) => {
                let config = config.clone();
                let run = Duration::from_secs_f64(config.omit_s + config.time_s);
                self.deadline = Some(now + run + self.timeouts.results_grace);
                self.state = ServerState::Running(config.clone());
                self.outbox.emit(ServerEvent::Start(config));
            }
            (ServerState::Running(_), ClientMessage::End) => {
                self.outbox.emit(ServerEvent::EndRequested)
            }
            // The results crossed the client's end on the way: nothing left to end.
            (ServerState::AwaitDone, ClientMessage::End) => {}
            (ServerState::AwaitDone, ClientMessage::Done) => self.close(Ok(())),
            (state, message) => self.fail(SessionError::Protocol(format!(
                "unexpected {} while {}",
                message_name(&message),
                state.waiting_for()
            ))),
        }
    }

    /// Accepts the requested test; data connections must present `token`.
    /// (A plain TCP stream or rr test: nothing more to offer.)
    pub fn accept(&mut self, now: Instant, test_id: u64, token: Token) {
        self.accept_udp(now, test_id, token, Vec::new());
    }

    /// Accepts a UDP test whose flows go to `udp_ports`, one per flow.
    pub fn accept_udp(&mut self, now: Instant, test_id: u64, token: Token, udp_ports: Vec<u16>) {
        let offer = Offer {
            udp_ports,
            ..Offer::default()
        };
        self.accept_offer(now, test_id, token, offer);
    }

    /// Accepts a crr test whose connections go to `crr_port`.
    pub fn accept_crr(&mut self, now: Instant, test_id: u64, token: Token, crr_port: u16) {
        let offer = Offer {
            crr_port: Some(crr_port),
            ..Offer::default()
        };
        self.accept_offer(now, test_id, token, offer);
    }

    /// Accepts the test with what its data connections need to know.
    pub fn accept_offer(&mut self, now: Instant, test_id: u64, token: Token, offer: Offer) {
        let config = match self.take_state() {
            ServerState::Deciding(config) => config,
            // Not deciding: the acceptance is late (the session failed meanwhile) and
            // changes nothing.
            other @ (ServerState::AwaitPreface
            | ServerState::AwaitHello
            | ServerState::AwaitAuth
            | ServerState::AwaitSpec
            | ServerState::AwaitFlows(_)
            | ServerState::AwaitStart(_)
            | ServerState::Running(_)
            | ServerState::AwaitDone
            | ServerState::Closed) => {
                self.state = other;
                return;
            }
        };
        let Offer {
            udp_ports,
            crr_port,
            tls_fingerprint,
            quic_ports,
        } = offer;
        self.outbox.send(encode_with(
            &mut self.seal,
            &ServerMessage::Accepted {
                host: self.auth.is_some().then(|| Box::new(self.host.clone())),
                test_id,
                token: token.to_hex(),
                udp_ports,
                crr_port,
                tls_fingerprint,
                quic_port: quic_ports.first().copied(),
                // One worker's port says it all, as it did before there were workers.
                quic_ports: if quic_ports.len() > 1 {
                    quic_ports
                } else {
                    Vec::new()
                },
            },
        ));
        self.state = ServerState::AwaitFlows(config);
        self.deadline = Some(now + self.timeouts.flows);
    }

    /// Refuses the requested test (for example: the server is busy).
    pub fn refuse(&mut self, code: RefuseCode, reason: String) {
        self.refuse_and_close(code, reason);
    }

    /// Every data connection has arrived.
    pub fn flows_ready(&mut self, now: Instant) {
        let config = match self.take_state() {
            ServerState::AwaitFlows(config) => config,
            // Not waiting for flows: the news is late and changes nothing.
            other @ (ServerState::AwaitPreface
            | ServerState::AwaitHello
            | ServerState::AwaitAuth
            | ServerState::AwaitSpec
            | ServerState::Deciding(_)
            | ServerState::AwaitStart(_)
            | ServerState::Running(_)
            | ServerState::AwaitDone
            | ServerState::Closed) => {
                self.state = other;
                return;
            }
        };
        self.outbox
            .send(encode_with(&mut self.seal, &ServerMessage::FlowsReady));
        self.state = ServerState::AwaitStart(config);
        self.deadline = Some(now + self.timeouts.handshake);
    }

    /// The test cannot go on on the server's side (a local failure).
    pub fn abort(&mut self, reason: String) {
        if self.state != ServerState::Closed {
            self.fail(SessionError::ServerError(reason));
        }
    }

    /// The server's side of the test is done; send its results.
    pub fn finish(&mut self, now: Instant, result: SideResult) {
        if !matches!(self.state, ServerState::Running(_)) {
            return;
        }
        self.outbox.send(encode_with(
            &mut self.seal,
            &ServerMessage::Results {
                result: Box::new(result),
            },
        ));
        self.state = ServerState::AwaitDone;
        self.deadline = Some(now + self.timeouts.handshake);
    }
}

impl Machine for ServerSession {
    fn handle_input(&mut self, now: Instant, mut bytes: &[u8]) {
        if self.state == ServerState::AwaitPreface {
            loop {
                match preface::classify(&self.preface) {
                    Preface::NeedBytes(n) => {
                        if bytes.is_empty() {
                            return;
                        }
                        let take = (n - self.preface.len()).min(bytes.len());
                        self.preface.extend_from_slice(&bytes[..take]);
                        bytes = &bytes[take..];
                    }
                    Preface::Control { version } if version == PROTOCOL_VERSION => {
                        self.state = ServerState::AwaitHello;
                        self.deadline = Some(now + self.timeouts.handshake);
                        break;
                    }
                    Preface::Control { version } => {
                        // docs/protocol.md 1: a refusal frame is understood by every version.
                        self.refuse_and_close(
                            RefuseCode::VersionMismatch,
                            format!("protocol version mismatch: server speaks {PROTOCOL_VERSION}, client {version}"),
                        );
                        return;
                    }
                    _ => {
                        self.close(Err(SessionError::Protocol(
                            "not a linerate control preface".into(),
                        )));
                        return;
                    }
                }
            }
        }
        if self.state == ServerState::Closed {
            return;
        }
        self.decoder.push(bytes);
        loop {
            let frame = match self.decoder.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => return,
                Err(error) => {
                    self.fail(error.into());
                    return;
                }
            };
            let frame = match open_with(&mut self.seal, frame) {
                Ok(frame) => frame,
                Err(error) => return self.fail(SessionError::Protocol(error.to_string())),
            };
            let message: ClientMessage = match serde_json::from_slice(&frame) {
                Ok(message) => message,
                Err(error) => {
                    self.fail(SessionError::Protocol(format!(
                        "malformed client message: {error}"
                    )));
                    return;
                }
            };
            self.handle_message(now, message);
            if self.state == ServerState::Closed {
                return;
            }
        }
    }
    /// The client closed its end of the control connection.
    fn handle_eof(&mut self, _now: Instant) {
        let during = self.state.waiting_for();
        if self.state == ServerState::AwaitDone {
            // The results were sent; a client that closes instead of saying done is fine.
            self.close(Ok(()));
        } else if self.state == ServerState::AwaitAuth {
            self.close(Err(SessionError::Auth(AuthError::Abandoned)));
        } else {
            self.close(Err(SessionError::PeerClosed(during)));
        }
    }
    fn handle_timeout(&mut self, now: Instant) {
        if let Some(deadline) = self.deadline {
            if now >= deadline {
                let waited = match self.state {
                    ServerState::AwaitFlows(_) => self.timeouts.flows,
                    ServerState::AwaitPreface
                    | ServerState::AwaitHello
                    | ServerState::AwaitAuth
                    | ServerState::AwaitSpec
                    | ServerState::Deciding(_)
                    | ServerState::AwaitStart(_)
                    | ServerState::Running(_)
                    | ServerState::AwaitDone
                    | ServerState::Closed => self.timeouts.handshake,
                };
                self.fail(SessionError::Timeout {
                    waiting: self.state.waiting_for(),
                    seconds: waited.as_secs_f64(),
                });
            }
        }
    }
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.outbox.poll_transmit()
    }
    /// When [`handle_timeout`](Self::handle_timeout) must be called next.
    fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }
}

fn message_name(message: &ClientMessage) -> &'static str {
    match message {
        ClientMessage::Hello { .. } => "hello",
        ClientMessage::Auth { .. } => "auth",
        ClientMessage::Spec { .. } => "spec",
        ClientMessage::Start => "start",
        ClientMessage::End => "end",
        ClientMessage::Done => "done",
        ClientMessage::Abort { .. } => "abort",
    }
}

/// The congestion controllers a QUIC test may ask for (quinn's).
pub const QUIC_CONGESTION: [&str; 4] = ["cubic", "bbr", "newreno", "reno"];

/// Checks a test specification against the server's limits and for consistency.
pub fn validate(config: &TestConfig, limits: &Limits) -> Result<(), (RefuseCode, String)> {
    let invalid = |reason: String| Err((RefuseCode::Invalid, reason));
    validate_protocol(config)?;
    if config.parallel == 0 {
        return invalid("parallel must be at least 1".into());
    }
    if let Some(tls) = &config.tls {
        if !linerate_model::CIPHERS.contains(&tls.cipher.as_str()) {
            return invalid(format!(
                "unknown cipher '{}' (one of: {})",
                tls.cipher.chars().take(40).collect::<String>(),
                linerate_model::CIPHERS.join(", ")
            ));
        }
    }
    if config.connections() > limits.max_flows {
        return Err((
            RefuseCode::OverLimit,
            format!(
                "{} connections asked, the server allows {}",
                config.connections(),
                limits.max_flows
            ),
        ));
    }
    validate_time(config, limits)?;
    if config.length == 0 || config.length > MAX_LENGTH {
        return invalid(format!(
            "write length {} is outside 1 byte to {} MiB",
            config.length,
            MAX_LENGTH >> 20
        ));
    }
    if config.window.is_some_and(|w| w == 0 || w > 1 << 30) {
        return invalid("window must be between 1 byte and 1 GiB".into());
    }
    if config.target.len() > MAX_NAME {
        return invalid(format!("target name over {MAX_NAME} bytes"));
    }
    if config.congestion.as_ref().is_some_and(|c| {
        c.is_empty() || c.len() > MAX_CONGESTION_NAME || !c.bytes().all(|b| b.is_ascii_graphic())
    }) {
        return invalid(format!(
            "congestion control name must be 1 to {MAX_CONGESTION_NAME} printable characters"
        ));
    }
    if let Some(marks) = config.marks {
        if marks.dscp > 63 {
            return invalid(format!("DSCP {} is over 63", marks.dscp));
        }
    }
    if let Some(call) = config.call {
        if config.protocol != linerate_model::Protocol::Udp {
            return invalid("a call is a UDP test".into());
        }
        linerate_model::call::CallSettings::checked(call.codec, call.buffer())
            .map_err(|why| (RefuseCode::Invalid, why))?;
    }
    for video in [config.video, config.video_back].into_iter().flatten() {
        if config.protocol != linerate_model::Protocol::Udp {
            return invalid("video frames are a UDP test".into());
        }
        if config.length < crate::video::VIDEO_HEADER as u64 {
            return invalid(format!(
                "a video datagram of {} bytes cannot carry its {}-byte header",
                config.length,
                crate::video::VIDEO_HEADER
            ));
        }
        video
            .checked()
            .map_err(|why| (RefuseCode::Invalid, format!("video frames: {why}")))?;
    }
    // A client's own requirement is scored by both ends: held to its bounds (at most six
    // latency bounds, finite values, a name of at most 64 bytes) where it is read.
    if let Some(qoo) = &config.qoo {
        if qoo.name.len() > 64 {
            return invalid("a Quality of Outcome requirement's name of over 64 bytes".into());
        }
        qoo.clone()
            .checked()
            .map_err(|why| (RefuseCode::Invalid, format!("--qoo: {why}")))?;
    }
    if !config.connect_timeout_s.is_finite() || config.connect_timeout_s < 0.0 {
        return invalid("connect timeout must be finite and not negative".into());
    }
    validate_rr(config)?;
    if let Some(most) = limits.max_rate_bps {
        check_rate(config, most)?;
    }
    Ok(())
}

/// What the test's protocol allows: its workloads, its encryption, its congestion
/// controls, its datagram sizes.
fn validate_protocol(config: &TestConfig) -> Result<(), (RefuseCode, String)> {
    let invalid = |reason: String| Err((RefuseCode::Invalid, reason));
    if !config.protocol.runs(config.workload) {
        return invalid(format!(
            "a {} test does not run {}",
            config.protocol,
            config.workload.name()
        ));
    }
    let traits = config.protocol.traits();
    if traits.always_encrypted && config.tls.is_none() {
        return invalid(format!(
            "a {} test is encrypted: it needs TLS settings",
            config.protocol
        ));
    }
    if config.protocol == linerate_model::Protocol::Quic {
        if config.quic.is_none() {
            return invalid("a QUIC test is a stream with TLS and QUIC settings".into());
        }
        let congestion = config.congestion.as_deref().unwrap_or("cubic");
        if !QUIC_CONGESTION.contains(&congestion) {
            return invalid(format!(
                "QUIC has no congestion control '{}' (one of: cubic, bbr, newreno)",
                congestion.chars().take(40).collect::<String>()
            ));
        }
    }
    let datagram = crate::datagram::MIN_DATAGRAM as u64..=crate::datagram::MAX_DATAGRAM as u64;
    if traits.datagrams && config.workload == Workload::Stream && !datagram.contains(&config.length)
    {
        return invalid(format!(
            "datagram length {} is outside {} to {} bytes",
            config.length,
            datagram.start(),
            datagram.end()
        ));
    }
    Ok(())
}

/// The test's times: finite, within the server's longest, and with no more interval
/// readings than a result may hold.
fn validate_time(config: &TestConfig, limits: &Limits) -> Result<(), (RefuseCode, String)> {
    let invalid = |reason: String| Err((RefuseCode::Invalid, reason));
    let seconds = [config.time_s, config.omit_s, config.interval_s];
    if seconds.iter().any(|s| !s.is_finite() || *s < 0.0) || config.time_s <= 0.0 {
        return invalid("time, omit and interval must be finite, time above zero".into());
    }
    if config.interval_s != 0.0 && !(MIN_INTERVAL_S..=MAX_INTERVAL_S).contains(&config.interval_s) {
        return invalid(format!(
            "interval {} s is outside {MIN_INTERVAL_S} to {MAX_INTERVAL_S} s (0 turns intervals off)",
            config.interval_s
        ));
    }
    if config.time_s + config.omit_s > limits.max_duration_s {
        return Err((
            RefuseCode::OverLimit,
            format!(
                "{} s asked, the server allows {} s",
                config.time_s + config.omit_s,
                limits.max_duration_s
            ),
        ));
    }
    let cells = interval_cells(config);
    if cells > MAX_INTERVAL_CELLS {
        return Err((
            RefuseCode::OverLimit,
            format!(
                "{:.0} s in {} s intervals over {} connections is {cells} interval readings, over the bound of {MAX_INTERVAL_CELLS}: use a longer interval",
                config.time_s + config.omit_s,
                config.interval_s,
                config.connections()
            ),
        ));
    }
    Ok(())
}

/// The longest interval a rate-limited server accepts: it checks the rate a client
/// sends at every interval, and ends a test that goes over.
pub const MAX_WATCHED_INTERVAL_S: f64 = 10.0;
/// Bytes a closed-loop request/response flow may keep in flight on a rate-limited
/// server (its rate is then bounded by the round trip, which the server cannot know).
pub const MAX_RATE_LIMITED_IN_FLIGHT: u64 = 1 << 20;

/// The rate a test asks for, all flows together, in bits per second: `None` when it is
/// not bounded by what the test asks (an unpaced stream, a closed-loop transaction test).
pub fn asked_rate_bps(config: &TestConfig) -> Option<f64> {
    let flows = f64::from(config.connections());
    match (config.workload, &config.rr) {
        (Workload::Stream, _) => config.rate_bps.map(|r| r as f64 * flows),
        (_, Some(rr)) => rr
            .rate_tps
            .map(|tps| tps * (rr.request + rr.response) as f64 * 8.0 * flows),
        (_, None) => None,
    }
}

fn check_rate(config: &TestConfig, most: u64) -> Result<(), (RefuseCode, String)> {
    let over = |reason: String| Err((RefuseCode::OverLimit, reason));
    let limit =
        linerate_model::units::format_rate(most as f64, linerate_model::units::Scale::Adaptive);
    if config.interval_s <= 0.0 || config.interval_s > MAX_WATCHED_INTERVAL_S {
        return over(format!(
            "this server allows at most {limit} per test and watches it every interval: use an interval of up to {MAX_WATCHED_INTERVAL_S} s"
        ));
    }
    match asked_rate_bps(config) {
        Some(rate) if rate <= most as f64 => Ok(()),
        Some(rate) => over(format!(
            "{} asked, this server allows at most {limit} per test (all flows together)",
            linerate_model::units::format_rate(rate, linerate_model::units::Scale::Adaptive)
        )),
        None if config.workload == Workload::Stream => over(format!(
            "an unpaced test asked; this server allows at most {limit} per test: ask for a rate per flow (-b)"
        )),
        // rr and crr without a rate: bounded by what they keep in flight. Their
        // parameters are checked here too, not trusted to an earlier call.
        None => {
            let Some(rr) = config.rr.as_ref() else {
                return Err((
                    RefuseCode::Invalid,
                    "an rr or crr test without its request and response sizes".into(),
                ));
            };
            let in_flight = (rr.request + rr.response).saturating_mul(u64::from(rr.outstanding));
            if in_flight <= MAX_RATE_LIMITED_IN_FLIGHT {
                Ok(())
            } else {
                over(format!(
                    "{in_flight} bytes in flight per flow; a server limited to {limit} takes at most {MAX_RATE_LIMITED_IN_FLIGHT} without a transaction rate (-b)"
                ))
            }
        }
    }
}

/// The shortest interval between reports (docs/security.md): shorter ones cost a reading
/// per worker and connection each time, and the readings are kept to the end.
pub const MIN_INTERVAL_S: f64 = 0.01;
/// The longest interval between reports.
pub const MAX_INTERVAL_S: f64 = 86_400.0;
/// The most interval readings (intervals times connections) one test may keep: each is
/// some 100 bytes on the server until the test ends, so this bounds a test's readings to
/// about 200 MB whatever its duration, interval and flow count.
pub const MAX_INTERVAL_CELLS: u64 = 2_000_000;
/// The longest write (and read) per call: each worker holds one buffer of this size.
pub const MAX_LENGTH: u64 = 16 << 20;
/// The longest host name or target label a client may send.
pub const MAX_NAME: usize = 255;
/// Linux's TCP_CA_NAME_MAX less its terminating NUL.
pub const MAX_CONGESTION_NAME: usize = 15;
/// The most transactions a request/response flow keeps in flight.
pub const MAX_OUTSTANDING: u32 = 1_000_000;
/// The most CPUs a client may name for its workers.
pub const MAX_CPUS: usize = 4096;

/// Interval readings a test keeps: one per interval boundary (the warm-up's end and the
/// test's end included) per connection.
pub fn interval_cells(config: &TestConfig) -> u64 {
    let run = config.time_s + config.omit_s;
    let boundaries = if config.interval_s > 0.0 {
        (run / config.interval_s).ceil().min(1e15) as u64 + 3
    } else {
        3
    };
    boundaries.saturating_mul(u64::from(config.connections().max(1)))
}

/// The largest request or response over TCP.
pub const MAX_MESSAGE: u64 = 64 << 20;

fn validate_rr(config: &TestConfig) -> Result<(), (RefuseCode, String)> {
    let invalid = |reason: String| Err((RefuseCode::Invalid, reason));
    let rr = match (config.workload, &config.rr) {
        (Workload::Stream, _) => return Ok(()),
        (_, None) => return invalid("a request/response test needs its parameters".into()),
        (_, Some(rr)) => rr,
    };
    let largest = if config.protocol.traits().datagrams {
        crate::datagram::MAX_DATAGRAM as u64
    } else {
        MAX_MESSAGE
    };
    for (name, size) in [("request", rr.request), ("response", rr.response)] {
        if size == 0 || size > largest {
            return invalid(format!(
                "{name} size {size} is outside 1 to {largest} bytes"
            ));
        }
    }
    if rr.outstanding == 0 || rr.outstanding > MAX_OUTSTANDING {
        return invalid(format!("outstanding must be 1 to {MAX_OUTSTANDING}"));
    }
    if rr
        .rate_tps
        .is_some_and(|r| !r.is_finite() || r <= 0.0 || r > 1e9)
    {
        return invalid("the transaction rate must be above zero and at most 1e9/s".into());
    }
    if rr.busy_poll_us.is_some_and(|us| us > 1_000_000) || rr.cpus.len() > MAX_CPUS {
        return invalid("busy poll is at most 1 s, and at most 4096 CPUs are named".into());
    }
    if rr.load > 4096 {
        return invalid("at most 4096 load flows".into());
    }
    Ok(())
}

/// Things a client session tells its driver.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientEvent {
    /// The server speaks our version; the spec is on its way.
    Welcomed {
        software: String,
        host: Box<HostFacts>,
        limits: Limits,
    },
    /// The test is accepted: open the data connections with this token, then wait for
    /// `FlowsReady`.
    Accepted {
        test_id: u64,
        token: Token,
        udp_ports: Vec<u16>,
        /// crr tests: where each transaction's connection goes.
        crr_port: Option<u16>,
        /// TLS and QUIC tests: the certificate to trust (SHA-256, hex).
        tls_fingerprint: Option<String>,
        /// QUIC tests: the server's UDP port for each QUIC worker, at least one and no
        /// more than the test's config asked for.
        quic_ports: Vec<u16>,
    },
    /// Every data connection arrived at the server; call [`ClientSession::start`].
    FlowsReady,
    /// The server's side of the results; call [`ClientSession::done`].
    Results(Box<SideResult>),
    /// The session ended without results.
    Failed(SessionError),
}

/// A keyed server's welcome, held until its acceptance brings the host's facts (a
/// keyed server names only its software before the key is proven).
#[derive(Debug)]
struct HeldWelcome {
    software: String,
    host: Box<HostFacts>,
    limits: Limits,
}

#[derive(Debug)]
enum ClientState {
    AwaitWelcome,
    /// The spec is sent; a keyed server's welcome waits here to be told with the
    /// acceptance.
    AwaitAccepted {
        held: Option<HeldWelcome>,
    },
    AwaitFlowsReady,
    ReadyToStart,
    Running,
    HaveResults,
    Closed,
}

impl ClientState {
    fn waiting_for(&self) -> &'static str {
        match self {
            ClientState::AwaitWelcome => "waiting for the server's welcome",
            ClientState::AwaitAccepted { .. } => "waiting for the server to accept the test",
            ClientState::AwaitFlowsReady => "waiting for the server to see every data connection",
            ClientState::ReadyToStart => "about to start",
            ClientState::Running => "waiting for the server's results",
            ClientState::HaveResults => "finishing",
            ClientState::Closed => "closed",
        }
    }
}

/// The client's half of one control connection.
#[derive(Debug)]
pub struct ClientSession {
    state: ClientState,
    decoder: FrameDecoder,
    deadline: Option<Instant>,
    timeouts: Timeouts,
    config: TestConfig,
    version: u32,
    host: HostFacts,
    /// The key this client proves, in its exchange for this connection.
    key: Option<ClientAuth>,
    /// Every frame after a keyed handshake is sealed (crate::auth).
    seal: Option<ControlSeal>,
    outbox: Outbox<ClientEvent>,
}

/// What a native control connection's proofs bind: the protocol and its version.
fn bound(version: u32) -> Vec<u8> {
    format!("linerate control v{version}").into_bytes()
}

/// The preface and hello a client opens with.
fn opening(version: u32, host: &HostFacts, auth: Option<&ClientAuth>) -> Vec<u8> {
    let mut opening = preface::control_preface(version).to_vec();
    opening.extend(encode(&ClientMessage::Hello {
        software: host.software.clone(),
        host: host.clone(),
        nonce: auth.map(ClientAuth::nonce_hex),
        pake: auth.map(ClientAuth::pake_hex),
    }));
    opening
}

impl ClientSession {
    /// Starts a session that will ask for `config`; the preface and hello are queued.
    pub fn new(
        now: Instant,
        version: u32,
        host: HostFacts,
        config: TestConfig,
        timeouts: Timeouts,
    ) -> ClientSession {
        let opening = opening(version, &host, None);
        ClientSession {
            state: ClientState::AwaitWelcome,
            decoder: FrameDecoder::new(MAX_SERVER_FRAME),
            deadline: Some(now + timeouts.handshake),
            timeouts,
            config,
            version,
            host,
            key: None,
            seal: None,
            outbox: {
                let mut outbox = Outbox::new();
                outbox.send(opening);
                outbox
            },
        }
    }

    /// Proves to the server that this client holds `key`, and requires the server to
    /// prove it too; `nonce` is fresh random bytes from the driver. Call before the first
    /// `poll_transmit`.
    pub fn with_key(mut self, key: Key, nonce: Nonce) -> ClientSession {
        let auth = ClientAuth::new(&key, &nonce);
        self.outbox
            .send_only(opening(self.version, &self.host, Some(&auth)));
        self.key = Some(auth);
        self
    }

    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.outbox.poll_event()
    }

    pub fn is_closed(&self) -> bool {
        matches!(self.state, ClientState::Closed)
    }

    fn fail(&mut self, error: SessionError) {
        if !matches!(self.state, ClientState::Closed) {
            self.state = ClientState::Closed;
            self.deadline = None;
            self.outbox.emit(ClientEvent::Failed(error));
        }
    }

    // Long: one match over (state, message), every pair the protocol allows in one place.
    fn handle_message(&mut self, now: Instant, message: ServerMessage) {
        match (&mut self.state, message) {
            (_, ServerMessage::Refuse { code, reason }) => {
                let reason = reason.into_string();
                let error = if code == RefuseCode::VersionMismatch {
                    SessionError::Protocol(reason)
                } else {
                    SessionError::Refused { code, reason }
                };
                self.fail(error);
            }
            (_, ServerMessage::Error { reason }) => {
                self.fail(SessionError::ServerError(reason.into()))
            }
            (
                ClientState::AwaitWelcome,
                ServerMessage::Welcome {
                    version,
                    software,
                    host,
                    limits,
                    auth,
                },
            ) => {
                if version != PROTOCOL_VERSION {
                    return self.fail(SessionError::VersionMismatch {
                        ours: PROTOCOL_VERSION,
                        theirs: version,
                    });
                }
                match (self.key.as_mut(), auth) {
                    (None, None) => {}
                    (None, Some(_)) => {
                        return self.fail(SessionError::Auth(AuthError::KeyRequired))
                    }
                    (Some(_), None) => {
                        return self.fail(SessionError::Auth(AuthError::ServerKeyless))
                    }
                    (Some(auth), Some(challenge)) => {
                        match auth.answer(&challenge, &bound(self.version)) {
                            Ok((proof, keys)) => {
                                self.outbox.send(encode(&ClientMessage::Auth { proof }));
                                self.seal = Some(keys.seal_for(Role::Client));
                            }
                            Err(e) => return self.fail(SessionError::Auth(e)),
                        }
                    }
                }
                // A keyed server's facts come with its acceptance.
                let held = if self.seal.is_some() {
                    Some(HeldWelcome {
                        software,
                        host: Box::new(host),
                        limits,
                    })
                } else {
                    self.outbox.emit(ClientEvent::Welcomed {
                        software,
                        host: Box::new(host),
                        limits,
                    });
                    None
                };
                self.outbox.send(encode_with(
                    &mut self.seal,
                    &ClientMessage::Spec {
                        config: Box::new(self.config.clone()),
                    },
                ));
                self.state = ClientState::AwaitAccepted { held };
                self.deadline = Some(now + self.timeouts.handshake);
            }
            (
                ClientState::AwaitAccepted { held },
                ServerMessage::Accepted {
                    host: accepted_host,
                    test_id,
                    token,
                    udp_ports,
                    crr_port,
                    tls_fingerprint,
                    quic_port,
                    quic_ports,
                },
            ) => {
                if let Some(HeldWelcome {
                    software,
                    host,
                    limits,
                }) = held.take()
                {
                    self.outbox.emit(ClientEvent::Welcomed {
                        software,
                        host: accepted_host.unwrap_or(host),
                        limits,
                    });
                }
                let Some(token) = Token::from_hex(&token) else {
                    return self.fail(SessionError::Protocol(format!("bad token '{token}'")));
                };
                let udp = self.config.protocol == linerate_model::Protocol::Udp;
                if udp && udp_ports.len() != self.config.connections() as usize {
                    return self.fail(SessionError::Protocol(format!(
                        "the server offered {} UDP ports for {} flows",
                        udp_ports.len(),
                        self.config.connections()
                    )));
                }
                if self.config.workload == Workload::Crr && crr_port.is_none() {
                    return self.fail(SessionError::Protocol(
                        "the server accepted a crr test without a port for its connections".into(),
                    ));
                }
                if self.config.tls.is_some() {
                    match &tls_fingerprint {
                        Some(f) if f.len() == 64 && f.bytes().all(|b| b.is_ascii_hexdigit()) => {}
                        Some(f) => {
                            return self.fail(SessionError::Protocol(format!(
                                "bad certificate fingerprint '{}'",
                                f.chars().take(80).collect::<String>()
                            )))
                        }
                        None => {
                            return self.fail(SessionError::Protocol(
                                "the server did not agree to encrypt the test (an older linerate, or one started with --no-tls)".into(),
                            ))
                        }
                    }
                }
                let quic_ports = match quic_ports_offered(&self.config, quic_port, quic_ports) {
                    Ok(ports) => ports,
                    Err(why) => return self.fail(SessionError::Protocol(why)),
                };
                self.outbox.emit(ClientEvent::Accepted {
                    test_id,
                    token,
                    udp_ports,
                    crr_port,
                    tls_fingerprint,
                    quic_ports,
                });
                self.state = ClientState::AwaitFlowsReady;
                self.deadline = Some(now + self.timeouts.flows);
            }
            (ClientState::AwaitFlowsReady, ServerMessage::FlowsReady) => {
                self.outbox.emit(ClientEvent::FlowsReady);
                self.state = ClientState::ReadyToStart;
                self.deadline = None;
            }
            (ClientState::Running, ServerMessage::Results { result }) => {
                self.outbox.emit(ClientEvent::Results(result));
                self.state = ClientState::HaveResults;
                self.deadline = None;
            }
            (state, message) => {
                let waiting = state.waiting_for();
                self.fail(SessionError::Protocol(format!(
                    "unexpected {} while {waiting}",
                    server_message_name(&message),
                )))
            }
        }
    }

    /// Tells the server to start; the client starts its own clock at the same `now`.
    pub fn start(&mut self, now: Instant) {
        if !matches!(self.state, ClientState::ReadyToStart) {
            return;
        }
        self.outbox
            .send(encode_with(&mut self.seal, &ClientMessage::Start));
        self.state = ClientState::Running;
        let run = Duration::from_secs_f64(self.config.omit_s + self.config.time_s);
        self.deadline = Some(now + run + self.timeouts.results_grace);
    }

    /// Ends the running test now, ahead of its schedule (the user interrupted it): the
    /// server ends its side and its results come as usual.
    pub fn end(&mut self) {
        if matches!(self.state, ClientState::Running) {
            self.outbox
                .send(encode_with(&mut self.seal, &ClientMessage::End));
        }
    }

    /// Acknowledges the results; the session is over.
    pub fn done(&mut self) {
        if matches!(self.state, ClientState::HaveResults) {
            self.outbox
                .send(encode_with(&mut self.seal, &ClientMessage::Done));
            self.state = ClientState::Closed;
        }
    }

    /// Gives up (for example on Ctrl-C); the server frees the test.
    pub fn abort(&mut self, reason: &str) {
        if !matches!(self.state, ClientState::Closed) {
            self.outbox.send(encode_with(
                &mut self.seal,
                &ClientMessage::Abort {
                    reason: reason.into(),
                },
            ));
            self.fail(SessionError::ClientAborted(reason.to_string()));
        }
    }
}

impl Machine for ClientSession {
    fn handle_input(&mut self, now: Instant, bytes: &[u8]) {
        if matches!(self.state, ClientState::Closed) {
            return;
        }
        self.decoder.push(bytes);
        loop {
            let frame = match self.decoder.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => return,
                Err(error) => return self.fail(error.into()),
            };
            let frame = match open_with(&mut self.seal, frame) {
                Ok(frame) => frame,
                Err(error) => return self.fail(SessionError::Protocol(error.to_string())),
            };
            let message: ServerMessage = match serde_json::from_slice(&frame) {
                Ok(message) => message,
                Err(error) => {
                    return self.fail(SessionError::Protocol(format!(
                        "malformed server message: {error}"
                    )));
                }
            };
            self.handle_message(now, message);
            if matches!(self.state, ClientState::Closed) {
                return;
            }
        }
    }
    fn handle_eof(&mut self, _now: Instant) {
        let during = self.state.waiting_for();
        if matches!(self.state, ClientState::HaveResults) {
            self.state = ClientState::Closed;
        } else {
            self.fail(SessionError::PeerClosed(during));
        }
    }
    fn handle_timeout(&mut self, now: Instant) {
        if self.deadline.is_some_and(|d| now >= d) {
            let seconds = match self.state {
                ClientState::AwaitFlowsReady => self.timeouts.flows,
                ClientState::Running => self.timeouts.results_grace,
                ClientState::AwaitWelcome
                | ClientState::AwaitAccepted { .. }
                | ClientState::ReadyToStart
                | ClientState::HaveResults
                | ClientState::Closed => self.timeouts.handshake,
            };
            self.fail(SessionError::Timeout {
                waiting: self.state.waiting_for(),
                seconds: seconds.as_secs_f64(),
            });
        }
    }
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.outbox.poll_transmit()
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }
}

fn server_message_name(message: &ServerMessage) -> &'static str {
    match message {
        ServerMessage::Welcome { .. } => "welcome",
        ServerMessage::Refuse { .. } => "refuse",
        ServerMessage::Accepted { .. } => "accepted",
        ServerMessage::FlowsReady => "flows_ready",
        ServerMessage::Results { .. } => "results",
        ServerMessage::Error { .. } => "error",
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
