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

use crate::frame::{FrameDecoder, FrameError, MAX_CLIENT_FRAME, MAX_SERVER_FRAME};
use crate::message::{encode, ClientMessage, Limits, RefuseCode, ServerMessage};
use crate::preface::{self, Preface, Token, PROTOCOL_VERSION};
use linerate_report::{HostFacts, SideResult, TestConfig, Workload};
use std::collections::VecDeque;
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
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            handshake: Duration::from_secs(10),
            flows: Duration::from_secs(30),
            results_grace: Duration::from_secs(20),
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
}

/// Things a server session asks its driver to do, or tells it.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerEvent {
    /// A client asks for this test (already checked against the limits). Answer with
    /// [`ServerSession::accept`] or [`ServerSession::refuse`].
    TestRequested(Box<TestConfig>),
    /// Start moving data now.
    Start,
    /// The session is over: free everything of this test. `Ok` after a completed test.
    Closed(Result<(), SessionError>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerState {
    AwaitPreface,
    AwaitHello,
    AwaitSpec,
    Deciding,
    AwaitFlows,
    AwaitStart,
    Running,
    AwaitDone,
    Closed,
}

impl ServerState {
    fn waiting_for(self) -> &'static str {
        match self {
            ServerState::AwaitPreface => "waiting for the client's preface",
            ServerState::AwaitHello => "waiting for the client's hello",
            ServerState::AwaitSpec => "waiting for the test specification",
            ServerState::Deciding => "deciding on the test",
            ServerState::AwaitFlows => "waiting for data connections",
            ServerState::AwaitStart => "waiting for start",
            ServerState::Running => "running the test",
            ServerState::AwaitDone => "waiting for the client's done",
            ServerState::Closed => "closed",
        }
    }
}

/// The server's half of one control connection.
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
    config: Option<TestConfig>,
    transmit: VecDeque<Vec<u8>>,
    events: VecDeque<ServerEvent>,
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
            config: None,
            transmit: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.transmit.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.events.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    pub fn is_closed(&self) -> bool {
        self.state == ServerState::Closed
    }

    /// The accepted test's configuration.
    pub fn config(&self) -> Option<&TestConfig> {
        self.config.as_ref()
    }

    fn close(&mut self, outcome: Result<(), SessionError>) {
        if self.state != ServerState::Closed {
            self.state = ServerState::Closed;
            self.deadline = None;
            self.events.push_back(ServerEvent::Closed(outcome));
        }
    }

    fn fail(&mut self, error: SessionError) {
        // Tell the client why, best effort, then close.
        self.transmit.push_back(encode(&ServerMessage::Error {
            reason: error.to_string(),
        }));
        self.close(Err(error));
    }

    fn refuse_and_close(&mut self, code: RefuseCode, reason: String) {
        self.transmit.push_back(encode(&ServerMessage::Refuse {
            code,
            reason: reason.clone(),
        }));
        let error = match code {
            RefuseCode::VersionMismatch => SessionError::Protocol(reason),
            _ => SessionError::Refused { code, reason },
        };
        self.close(Err(error));
    }

    pub fn handle_input(&mut self, now: Instant, mut bytes: &[u8]) {
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

    fn handle_message(&mut self, now: Instant, message: ClientMessage) {
        match (self.state, message) {
            (_, ClientMessage::Abort { reason }) => {
                self.close(Err(SessionError::ClientAborted(reason)))
            }
            (ServerState::AwaitHello, ClientMessage::Hello { .. }) => {
                self.transmit.push_back(encode(&ServerMessage::Welcome {
                    version: PROTOCOL_VERSION,
                    software: self.software.clone(),
                    host: self.host.clone(),
                    limits: self.limits.clone(),
                }));
                self.state = ServerState::AwaitSpec;
                self.deadline = Some(now + self.timeouts.handshake);
            }
            (ServerState::AwaitSpec, ClientMessage::Spec { config }) => {
                match validate(&config, &self.limits) {
                    Ok(()) => {
                        self.state = ServerState::Deciding;
                        self.deadline = None;
                        self.config = Some(config.clone());
                        self.events
                            .push_back(ServerEvent::TestRequested(Box::new(config)));
                    }
                    Err((code, reason)) => self.refuse_and_close(code, reason),
                }
            }
            (ServerState::AwaitStart, ClientMessage::Start) => {
                self.state = ServerState::Running;
                let config = self
                    .config
                    .as_ref()
                    .expect("config is set before AwaitStart");
                let run = Duration::from_secs_f64(config.omit_s + config.time_s);
                self.deadline = Some(now + run + self.timeouts.results_grace);
                self.events.push_back(ServerEvent::Start);
            }
            (ServerState::AwaitDone, ClientMessage::Done) => self.close(Ok(())),
            (state, message) => self.fail(SessionError::Protocol(format!(
                "unexpected {} while {}",
                message_name(&message),
                state.waiting_for()
            ))),
        }
    }

    /// The client closed its end of the control connection.
    pub fn handle_eof(&mut self, _now: Instant) {
        let during = self.state.waiting_for();
        if self.state == ServerState::AwaitDone {
            // The results were sent; a client that closes instead of saying done is fine.
            self.close(Ok(()));
        } else {
            self.close(Err(SessionError::PeerClosed(during)));
        }
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(deadline) = self.deadline {
            if now >= deadline {
                let waited = match self.state {
                    ServerState::AwaitFlows => self.timeouts.flows,
                    _ => self.timeouts.handshake,
                };
                self.fail(SessionError::Timeout {
                    waiting: self.state.waiting_for(),
                    seconds: waited.as_secs_f64(),
                });
            }
        }
    }

    /// Accepts the requested test; data connections must present `token`.
    pub fn accept(&mut self, now: Instant, test_id: u64, token: Token) {
        self.accept_udp(now, test_id, token, Vec::new());
    }

    /// Accepts a UDP test whose flows go to `udp_ports`, one per flow.
    pub fn accept_udp(&mut self, now: Instant, test_id: u64, token: Token, udp_ports: Vec<u16>) {
        self.accept_with(now, test_id, token, udp_ports, None);
    }

    /// Accepts a crr test whose connections go to `crr_port`.
    pub fn accept_crr(&mut self, now: Instant, test_id: u64, token: Token, crr_port: u16) {
        self.accept_with(now, test_id, token, Vec::new(), Some(crr_port));
    }

    fn accept_with(
        &mut self,
        now: Instant,
        test_id: u64,
        token: Token,
        udp_ports: Vec<u16>,
        crr_port: Option<u16>,
    ) {
        if self.state != ServerState::Deciding {
            return;
        }
        self.transmit.push_back(encode(&ServerMessage::Accepted {
            test_id,
            token: token.to_hex(),
            udp_ports,
            crr_port,
        }));
        self.state = ServerState::AwaitFlows;
        self.deadline = Some(now + self.timeouts.flows);
    }

    /// Refuses the requested test (for example: the server is busy).
    pub fn refuse(&mut self, code: RefuseCode, reason: String) {
        self.refuse_and_close(code, reason);
    }

    /// Every data connection has arrived.
    pub fn flows_ready(&mut self, now: Instant) {
        if self.state != ServerState::AwaitFlows {
            return;
        }
        self.transmit.push_back(encode(&ServerMessage::FlowsReady));
        self.state = ServerState::AwaitStart;
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
        if self.state != ServerState::Running {
            return;
        }
        self.transmit.push_back(encode(&ServerMessage::Results {
            result: Box::new(result),
        }));
        self.state = ServerState::AwaitDone;
        self.deadline = Some(now + self.timeouts.handshake);
    }
}

fn message_name(message: &ClientMessage) -> &'static str {
    match message {
        ClientMessage::Hello { .. } => "hello",
        ClientMessage::Spec { .. } => "spec",
        ClientMessage::Start => "start",
        ClientMessage::Done => "done",
        ClientMessage::Abort { .. } => "abort",
    }
}

/// Checks a test specification against the server's limits and for consistency.
pub fn validate(config: &TestConfig, limits: &Limits) -> Result<(), (RefuseCode, String)> {
    let invalid = |reason: String| Err((RefuseCode::Invalid, reason));
    if config.protocol != "tcp" && config.protocol != "udp" {
        return invalid(format!("unsupported protocol '{}'", config.protocol));
    }
    let datagram = crate::datagram::MIN_DATAGRAM as u64..=crate::datagram::MAX_DATAGRAM as u64;
    if config.protocol == "udp"
        && config.workload == Workload::Stream
        && !datagram.contains(&config.length)
    {
        return invalid(format!(
            "datagram length {} is outside {} to {} bytes",
            config.length,
            datagram.start(),
            datagram.end()
        ));
    }
    if config.parallel == 0 {
        return invalid("parallel must be at least 1".into());
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
    let seconds = [config.time_s, config.omit_s, config.interval_s];
    if seconds.iter().any(|s| !s.is_finite() || *s < 0.0) || config.time_s <= 0.0 {
        return invalid("time, omit and interval must be finite, time above zero".into());
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
    if config.length == 0 || config.length > 1 << 30 {
        return invalid(format!(
            "write length {} is outside 1 byte to 1 GiB",
            config.length
        ));
    }
    if config.window.is_some_and(|w| w == 0 || w > 1 << 30) {
        return invalid("window must be between 1 byte and 1 GiB".into());
    }
    validate_rr(config)
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
    if config.workload == Workload::Crr && config.protocol != "tcp" {
        return invalid("crr runs over TCP only".into());
    }
    let largest = if config.protocol == "udp" {
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
    if rr.outstanding == 0 {
        return invalid("outstanding must be at least 1".into());
    }
    if rr.rate_tps.is_some_and(|r| !r.is_finite() || r <= 0.0) {
        return invalid("the transaction rate must be above zero".into());
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
    },
    /// Every data connection arrived at the server; call [`ClientSession::start`].
    FlowsReady,
    /// The server's side of the results; call [`ClientSession::done`].
    Results(Box<SideResult>),
    /// The session ended without results.
    Failed(SessionError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientState {
    AwaitWelcome,
    AwaitAccepted,
    AwaitFlowsReady,
    ReadyToStart,
    Running,
    HaveResults,
    Closed,
}

impl ClientState {
    fn waiting_for(self) -> &'static str {
        match self {
            ClientState::AwaitWelcome => "waiting for the server's welcome",
            ClientState::AwaitAccepted => "waiting for the server to accept the test",
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
    transmit: VecDeque<Vec<u8>>,
    events: VecDeque<ClientEvent>,
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
        let mut opening = preface::control_preface(version).to_vec();
        opening.extend(encode(&ClientMessage::Hello {
            software: host.software.clone(),
            host,
        }));
        ClientSession {
            state: ClientState::AwaitWelcome,
            decoder: FrameDecoder::new(MAX_SERVER_FRAME),
            deadline: Some(now + timeouts.handshake),
            timeouts,
            config,
            transmit: VecDeque::from([opening]),
            events: VecDeque::new(),
        }
    }

    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.transmit.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    pub fn is_closed(&self) -> bool {
        self.state == ClientState::Closed
    }

    fn fail(&mut self, error: SessionError) {
        if self.state != ClientState::Closed {
            self.state = ClientState::Closed;
            self.deadline = None;
            self.events.push_back(ClientEvent::Failed(error));
        }
    }

    pub fn handle_input(&mut self, now: Instant, bytes: &[u8]) {
        if self.state == ClientState::Closed {
            return;
        }
        self.decoder.push(bytes);
        loop {
            let frame = match self.decoder.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => return,
                Err(error) => return self.fail(error.into()),
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
            if self.state == ClientState::Closed {
                return;
            }
        }
    }

    fn handle_message(&mut self, now: Instant, message: ServerMessage) {
        match (self.state, message) {
            (_, ServerMessage::Refuse { code, reason }) => {
                let error = if code == RefuseCode::VersionMismatch {
                    SessionError::Protocol(reason)
                } else {
                    SessionError::Refused { code, reason }
                };
                self.fail(error);
            }
            (_, ServerMessage::Error { reason }) => self.fail(SessionError::ServerError(reason)),
            (
                ClientState::AwaitWelcome,
                ServerMessage::Welcome {
                    version,
                    software,
                    host,
                    limits,
                },
            ) => {
                if version != PROTOCOL_VERSION {
                    return self.fail(SessionError::VersionMismatch {
                        ours: PROTOCOL_VERSION,
                        theirs: version,
                    });
                }
                self.events.push_back(ClientEvent::Welcomed {
                    software,
                    host: Box::new(host),
                    limits,
                });
                self.transmit.push_back(encode(&ClientMessage::Spec {
                    config: self.config.clone(),
                }));
                self.state = ClientState::AwaitAccepted;
                self.deadline = Some(now + self.timeouts.handshake);
            }
            (
                ClientState::AwaitAccepted,
                ServerMessage::Accepted {
                    test_id,
                    token,
                    udp_ports,
                    crr_port,
                },
            ) => {
                let Some(token) = Token::from_hex(&token) else {
                    return self.fail(SessionError::Protocol(format!("bad token '{token}'")));
                };
                let udp = self.config.protocol == "udp";
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
                self.events.push_back(ClientEvent::Accepted {
                    test_id,
                    token,
                    udp_ports,
                    crr_port,
                });
                self.state = ClientState::AwaitFlowsReady;
                self.deadline = Some(now + self.timeouts.flows);
            }
            (ClientState::AwaitFlowsReady, ServerMessage::FlowsReady) => {
                self.events.push_back(ClientEvent::FlowsReady);
                self.state = ClientState::ReadyToStart;
                self.deadline = None;
            }
            (ClientState::Running, ServerMessage::Results { result }) => {
                self.events.push_back(ClientEvent::Results(result));
                self.state = ClientState::HaveResults;
                self.deadline = None;
            }
            (state, message) => self.fail(SessionError::Protocol(format!(
                "unexpected {} while {}",
                server_message_name(&message),
                state.waiting_for()
            ))),
        }
    }

    pub fn handle_eof(&mut self, _now: Instant) {
        let during = self.state.waiting_for();
        if self.state == ClientState::HaveResults {
            self.state = ClientState::Closed;
        } else {
            self.fail(SessionError::PeerClosed(during));
        }
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        if self.deadline.is_some_and(|d| now >= d) {
            let seconds = match self.state {
                ClientState::AwaitFlowsReady => self.timeouts.flows,
                ClientState::Running => self.timeouts.results_grace,
                _ => self.timeouts.handshake,
            };
            self.fail(SessionError::Timeout {
                waiting: self.state.waiting_for(),
                seconds: seconds.as_secs_f64(),
            });
        }
    }

    /// Tells the server to start; the client starts its own clock at the same `now`.
    pub fn start(&mut self, now: Instant) {
        if self.state != ClientState::ReadyToStart {
            return;
        }
        self.transmit.push_back(encode(&ClientMessage::Start));
        self.state = ClientState::Running;
        let run = Duration::from_secs_f64(self.config.omit_s + self.config.time_s);
        self.deadline = Some(now + run + self.timeouts.results_grace);
    }

    /// Acknowledges the results; the session is over.
    pub fn done(&mut self) {
        if self.state == ClientState::HaveResults {
            self.transmit.push_back(encode(&ClientMessage::Done));
            self.state = ClientState::Closed;
        }
    }

    /// Gives up (for example on Ctrl-C); the server frees the test.
    pub fn abort(&mut self, reason: &str) {
        if self.state != ClientState::Closed {
            self.transmit.push_back(encode(&ClientMessage::Abort {
                reason: reason.to_string(),
            }));
            self.fail(SessionError::ClientAborted(reason.to_string()));
        }
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
