//! The agent's half of an agent connection as a sans-IO state machine (docs/protocol.md 8):
//! the hello and its deadline, the key's proof, then requests until the connection closes,
//! with an idle deadline while nothing runs.
//!
//! ```text
//! preface "LINEAGNT" v2       ->
//! hello {nonce?}              ->   (within the handshake deadline)
//!                             <-   welcome {version, host, auth?} | error
//! [auth {proof}               ->   when the welcome carried a challenge]
//! requests                    ->   events for the driver, which answers with `reply`
//! ```
//!
//! Calling order: feed bytes with `handle_input(now, bytes)`, `handle_eof(now)` and, when
//! `poll_timeout()` has passed, `handle_timeout(now)`; tell it `set_busy(now, ..)` when
//! work starts or ends (a running group or mirror keeps a silent connection open); after
//! every call, drain `poll_transmit()` to the socket and `poll_event()` to the driver.
//! Time is only ever an argument.

use crate::agent::{AgentReply, AgentRequest, AGENT_VERSION};
use crate::auth::{encode_with, open_with, ClientAuth, ControlSeal, Key, Nonce, Role, ServerAuth};
use crate::frame::FrameDecoder;
use crate::machine::{Machine, Outbox};
use linerate_model::HostFacts;
use std::time::{Duration, Instant};

/// The largest frame before the dialer has said hello and proved the key: a hello or a
/// proof is well under a kilobyte, so an unauthenticated peer cannot make the agent buffer
/// more than this.
pub const MAX_HANDSHAKE_FRAME: usize = 64 * 1024;
/// The largest request after the handshake (a profile's groups, a mirror's spec): the
/// most a request may ask (`linerate_profile::budget`) is well under 100 KB of JSON.
pub const MAX_REQUEST_FRAME: usize = 1 << 20;

/// How long an agent connection may take and stay silent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AgentTimeouts {
    /// For the hello, and for the proof of the key.
    pub handshake: Duration,
    /// With nothing running, between two requests.
    pub idle: Duration,
}

/// What the session tells its driver.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentEvent {
    /// A request to serve (answer with [`AgentSession::reply`]).
    Request(AgentRequest),
    /// The connection is over: `Ok` when the dialer closed it after its handshake, `Err`
    /// with the reason when it was refused or timed out (an `error` reply is queued).
    Closed(Result<(), String>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    AwaitHello,
    AwaitProof,
    Serving,
    Closed,
}

/// The agent's half of one agent connection.
#[derive(Debug)]
pub struct AgentSession {
    state: State,
    decoder: FrameDecoder,
    deadline: Option<Instant>,
    timeouts: AgentTimeouts,
    busy: bool,
    /// The dialer said hello (and proved the key, where one is held).
    handshake_done: bool,
    host: HostFacts,
    auth: Option<ServerAuth>,
    /// The dialer failed to prove the key.
    proof_failed: bool,
    /// Every frame after a keyed handshake is sealed (crate::auth).
    seal: Option<ControlSeal>,
    outbox: Outbox<AgentEvent>,
}

impl AgentSession {
    /// A session for a connection whose preface named `version`; another version than
    /// this build's is refused at once.
    pub fn new(now: Instant, version: u32, host: HostFacts, timeouts: AgentTimeouts) -> Self {
        let mut session = AgentSession {
            state: State::AwaitHello,
            decoder: FrameDecoder::new(MAX_HANDSHAKE_FRAME),
            deadline: Some(now + timeouts.handshake),
            timeouts,
            busy: false,
            handshake_done: false,
            host,
            auth: None,
            proof_failed: false,
            seal: None,
            outbox: Outbox::new(),
        };
        if version != AGENT_VERSION {
            session.refuse(format!(
                "agent protocol version {version} is not spoken here (this agent speaks {AGENT_VERSION})"
            ));
        }
        session
    }

    /// Requires the dialer to prove it holds `key`; `nonce` is fresh random bytes from
    /// the driver.
    pub fn with_key(mut self, key: Key, nonce: Nonce) -> Self {
        self.auth = Some(ServerAuth::new(key, nonce));
        self
    }

    pub fn poll_event(&mut self) -> Option<AgentEvent> {
        self.outbox.poll_event()
    }

    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// Whether the dialer got through the handshake (a refusal before it is the dialer's
    /// fault; an end after it is the connection's life ending).
    pub fn handshake_done(&self) -> bool {
        self.handshake_done
    }

    /// Queues a reply to the dialer.
    pub fn reply(&mut self, reply: &AgentReply) {
        if self.state != State::Closed {
            self.outbox.send(encode_with(&mut self.seal, reply));
        }
    }

    /// Work started (`true`) or ended (`false`) on this connection. While busy the
    /// connection may stay silent; once idle, the idle deadline counts from `now`.
    pub fn set_busy(&mut self, now: Instant, busy: bool) {
        self.busy = busy;
        if self.state == State::Serving {
            self.deadline = (!busy).then(|| now + self.timeouts.idle);
        }
    }

    fn close(&mut self, outcome: Result<(), String>) {
        if self.state != State::Closed {
            self.state = State::Closed;
            self.deadline = None;
            self.outbox.emit(AgentEvent::Closed(outcome));
        }
    }

    /// Refuses a failed proof of the key (or none where one is required): counted apart,
    /// so the driver can bound guesses per client.
    fn refuse_auth(&mut self, reason: String) {
        self.proof_failed = true;
        self.refuse(format!("authentication failed: {reason}"));
    }

    /// Whether the dialer failed to prove the key (refused, or hung up instead).
    pub fn proof_failed(&self) -> bool {
        self.proof_failed
    }

    /// Tells the dialer why, then closes.
    fn refuse(&mut self, reason: String) {
        self.outbox.send(encode_with(
            &mut self.seal,
            &AgentReply::Error {
                reason: reason.as_str().into(),
                unreachable: None,
            },
        ));
        self.close(Err(reason));
    }

    fn handle_request(&mut self, now: Instant, request: AgentRequest) {
        match (self.state, request) {
            (State::AwaitHello, AgentRequest::Hello { nonce, pake }) => {
                let challenge = match self
                    .auth
                    .as_mut()
                    .map(|a| a.handle_hello(nonce.as_deref(), pake.as_deref(), &bound()))
                {
                    Some(Err(e)) => return self.refuse_auth(e.to_string()),
                    Some(Ok(challenge)) => Some(challenge),
                    None => None,
                };
                let keyed = challenge.is_some();
                // A keyed agent tells nothing of its host before the dialer proves the
                // key: a second welcome, sealed, carries the facts.
                let host = if keyed {
                    self.host.software_only()
                } else {
                    self.host.clone()
                };
                self.outbox.send(encode_with(
                    &mut self.seal,
                    &AgentReply::Welcome {
                        version: AGENT_VERSION,
                        host,
                        auth: challenge,
                    },
                ));
                if keyed {
                    self.state = State::AwaitProof;
                    self.deadline = Some(now + self.timeouts.handshake);
                } else {
                    self.serve(now);
                }
            }
            (State::AwaitHello, _) => self.refuse("did not open with a hello".into()),
            (State::AwaitProof, AgentRequest::Auth { proof }) => {
                let verdict = self.auth.as_ref().map(|a| a.handle_proof(&proof));
                match verdict {
                    Some(Ok(keys)) => {
                        self.seal = Some(keys.seal_for(Role::Server));
                        self.outbox.send(encode_with(
                            &mut self.seal,
                            &AgentReply::Welcome {
                                version: AGENT_VERSION,
                                host: self.host.clone(),
                                auth: None,
                            },
                        ));
                        self.serve(now);
                    }
                    Some(Err(e)) => self.refuse_auth(e.to_string()),
                    None => self.refuse_auth("no key".into()),
                }
            }
            (State::AwaitProof, _) => self.refuse_auth("no proof of the key".into()),
            (State::Serving, AgentRequest::Hello { .. } | AgentRequest::Auth { .. }) => {
                self.refuse("a second hello or proof".into())
            }
            (State::Serving, request) => {
                if !self.busy {
                    self.deadline = Some(now + self.timeouts.idle);
                }
                self.outbox.emit(AgentEvent::Request(request));
            }
            (State::Closed, _) => {}
        }
    }

    /// The handshake is done: requests may be large now, and the idle deadline counts.
    fn serve(&mut self, now: Instant) {
        self.state = State::Serving;
        self.handshake_done = true;
        let rest = self.decoder.take_rest();
        self.decoder = FrameDecoder::new(MAX_REQUEST_FRAME);
        self.decoder.push(&rest);
        self.deadline = (!self.busy).then(|| now + self.timeouts.idle);
    }
}

impl Machine for AgentSession {
    fn handle_input(&mut self, now: Instant, bytes: &[u8]) {
        if self.state == State::Closed {
            return;
        }
        self.decoder.push(bytes);
        loop {
            let frame = match self.decoder.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => return,
                Err(e) => return self.refuse(format!("bad frame: {e}")),
            };
            let frame = match open_with(&mut self.seal, frame) {
                Ok(frame) => frame,
                Err(e) => return self.refuse(e.to_string()),
            };
            let request: AgentRequest = match serde_json::from_slice(&frame) {
                Ok(request) => request,
                Err(e) => return self.refuse(format!("bad message: {e}")),
            };
            self.handle_request(now, request);
            if self.state == State::Closed {
                return;
            }
        }
    }
    /// The dialer closed its end.
    fn handle_eof(&mut self, _now: Instant) {
        match self.state {
            State::Serving => self.close(Ok(())),
            State::AwaitHello => self.close(Err("closed before its hello".into())),
            State::AwaitProof => {
                self.proof_failed = true;
                self.close(Err(crate::auth::AuthError::Abandoned.to_string()));
            }
            State::Closed => {}
        }
    }
    fn handle_timeout(&mut self, now: Instant) {
        let Some(deadline) = self.deadline else {
            return;
        };
        if now < deadline {
            return;
        }
        let reason = match self.state {
            State::AwaitHello => format!(
                "sent no hello within {:.0} s (the handshake deadline)",
                self.timeouts.handshake.as_secs_f64()
            ),
            State::AwaitProof => format!(
                "sent no proof of the key within {:.0} s",
                self.timeouts.handshake.as_secs_f64()
            ),
            State::Serving => format!(
                "idle for {:.0} s (the idle deadline); closed",
                self.timeouts.idle.as_secs_f64()
            ),
            State::Closed => return,
        };
        self.refuse(reason);
    }
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.outbox.poll_transmit()
    }
    /// When [`handle_timeout`](Self::handle_timeout) must be called next.
    fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }
}

/// What an agent connection's proofs bind: the protocol and its version.
fn bound() -> Vec<u8> {
    format!("linerate agent v{AGENT_VERSION}").into_bytes()
}

/// The dialer's half of the handshake (a controller or a group host): its hello, and its
/// answer to the agent's welcome. A dialer that holds a key requires the agent to prove
/// it; one without a key cannot answer an agent that holds one.
#[derive(Debug)]
pub struct DialerHandshake {
    auth: Option<ClientAuth>,
}

impl DialerHandshake {
    /// `key` with this connection's fresh random bytes, from the driver.
    pub fn new(key: Option<(Key, Nonce)>) -> DialerHandshake {
        DialerHandshake {
            auth: key.map(|(key, random)| ClientAuth::new(&key, &random)),
        }
    }

    /// The first message on the connection.
    pub fn hello(&self) -> AgentRequest {
        AgentRequest::Hello {
            nonce: self.auth.as_ref().map(ClientAuth::nonce_hex),
            pake: self.auth.as_ref().map(ClientAuth::pake_hex),
        }
    }

    /// The agent's welcome carried `challenge`: the proof to send next and the seal for
    /// every frame after it (`None` when no key is in play), or why the agent is not to be
    /// trusted.
    pub fn handle_welcome(
        &mut self,
        challenge: Option<&crate::auth::Challenge>,
    ) -> Result<Option<(AgentRequest, ControlSeal)>, crate::auth::AuthError> {
        use crate::auth::AuthError;
        match (self.auth.as_mut(), challenge) {
            (None, None) => Ok(None),
            (None, Some(_)) => Err(AuthError::KeyRequired),
            (Some(_), None) => Err(AuthError::ServerKeyless),
            (Some(auth), Some(challenge)) => {
                let (proof, keys) = auth.answer(challenge, &bound())?;
                Ok(Some((
                    AgentRequest::Auth { proof },
                    keys.seal_for(Role::Client),
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Challenge;
    use crate::message::encode;

    const TIMEOUTS: AgentTimeouts = AgentTimeouts {
        handshake: Duration::from_secs(10),
        idle: Duration::from_secs(120),
    };

    #[allow(clippy::disallowed_methods)] // the virtual clock's origin; only offsets matter
    fn origin() -> Instant {
        Instant::now()
    }

    fn frame(request: &AgentRequest) -> Vec<u8> {
        encode(request)
    }

    fn replies(session: &mut AgentSession) -> Vec<AgentReply> {
        let mut out = Vec::new();
        while let Some(bytes) = session.poll_transmit() {
            let mut decoder = FrameDecoder::new(MAX_REQUEST_FRAME);
            decoder.push(&bytes);
            while let Ok(Some(body)) = decoder.next_frame() {
                out.push(serde_json::from_slice(&body).unwrap());
            }
        }
        out
    }

    fn closed(session: &mut AgentSession) -> Option<Result<(), String>> {
        std::iter::from_fn(|| session.poll_event()).find_map(|e| match e {
            AgentEvent::Closed(outcome) => Some(outcome),
            AgentEvent::Request(_) => None,
        })
    }

    #[test]
    fn a_silent_dialer_is_closed_at_the_handshake_deadline() {
        let t0 = origin();
        let mut s = AgentSession::new(t0, AGENT_VERSION, HostFacts::default(), TIMEOUTS);
        assert_eq!(s.poll_timeout(), Some(t0 + TIMEOUTS.handshake));
        s.handle_timeout(t0 + Duration::from_secs(9));
        assert!(!s.is_closed());
        s.handle_timeout(t0 + TIMEOUTS.handshake);
        assert!(s.is_closed());
        assert!(closed(&mut s)
            .unwrap()
            .unwrap_err()
            .contains("sent no hello"));
        assert!(matches!(replies(&mut s)[..], [AgentReply::Error { .. }]));
    }

    #[test]
    fn the_idle_deadline_waits_while_work_runs() {
        let t0 = origin();
        let mut s = AgentSession::new(t0, AGENT_VERSION, HostFacts::default(), TIMEOUTS);
        s.handle_input(
            t0,
            &frame(&AgentRequest::Hello {
                nonce: None,
                pake: None,
            }),
        );
        assert!(matches!(
            replies(&mut s)[..],
            [AgentReply::Welcome { auth: None, .. }]
        ));
        assert_eq!(s.poll_timeout(), Some(t0 + TIMEOUTS.idle));
        // A request restarts the idle deadline and reaches the driver.
        let t1 = t0 + Duration::from_secs(100);
        s.handle_input(t1, &frame(&AgentRequest::Ping { seq: 1 }));
        assert_eq!(
            s.poll_event(),
            Some(AgentEvent::Request(AgentRequest::Ping { seq: 1 }))
        );
        assert_eq!(s.poll_timeout(), Some(t1 + TIMEOUTS.idle));
        // Busy for an hour: no deadline; idle again: it counts from then.
        s.set_busy(t1, true);
        assert_eq!(s.poll_timeout(), None);
        let t2 = t1 + Duration::from_secs(3600);
        s.handle_timeout(t2);
        assert!(!s.is_closed());
        s.set_busy(t2, false);
        s.handle_timeout(t2 + TIMEOUTS.idle);
        assert!(closed(&mut s)
            .unwrap()
            .unwrap_err()
            .contains("idle for 120 s"));
    }

    #[test]
    fn a_keyed_agent_needs_the_proof_in_time() {
        let key = Key::from_file_contents(b"the agents' key, at least 16 bytes").unwrap();
        let nonce = Nonce([4; 32]);
        let t0 = origin();
        let keyed = || {
            AgentSession::new(t0, AGENT_VERSION, HostFacts::default(), TIMEOUTS)
                .with_key(key.clone(), Nonce([8; 32]))
        };
        // The right proof: serving, every frame after it sealed.
        let mut s = keyed();
        let mut dialer = DialerHandshake::new(Some((key.clone(), nonce)));
        s.handle_input(t0, &frame(&dialer.hello()));
        let [AgentReply::Welcome {
            auth: Some(challenge),
            ..
        }] = &replies(&mut s)[..]
        else {
            panic!("a welcome with a challenge");
        };
        let challenge: Challenge = challenge.clone();
        let (proof, seal) = dialer.handle_welcome(Some(&challenge)).unwrap().unwrap();
        let mut seal = Some(seal);
        s.handle_input(t0, &frame(&proof));
        s.handle_input(
            t0,
            &crate::auth::encode_with(&mut seal, &AgentRequest::Ping { seq: 7 }),
        );
        assert_eq!(
            s.poll_event(),
            Some(AgentEvent::Request(AgentRequest::Ping { seq: 7 }))
        );
        // Replies are sealed too: only the dialer's seal opens them. The first is the
        // agent's host facts, which its open welcome did not tell.
        let facts = s.poll_transmit().unwrap();
        let opened = crate::auth::open_with(&mut seal, facts[4..].to_vec()).unwrap();
        assert!(matches!(
            serde_json::from_slice::<AgentReply>(&opened).unwrap(),
            AgentReply::Welcome { auth: None, .. }
        ));
        s.reply(&AgentReply::Heartbeat);
        let sent = s.poll_transmit().unwrap();
        assert!(serde_json::from_slice::<AgentReply>(&sent[4..]).is_err());
        let opened = crate::auth::open_with(&mut seal, sent[4..].to_vec()).unwrap();
        assert_eq!(
            serde_json::from_slice::<AgentReply>(&opened).unwrap(),
            AgentReply::Heartbeat
        );
        // A request injected in the clear after the handshake: refused, never served.
        s.handle_input(t0, &frame(&AgentRequest::Ping { seq: 8 }));
        assert!(closed(&mut s)
            .unwrap()
            .unwrap_err()
            .contains("did not open"));
        // No nonce (a keyless dialer): refused at its hello.
        let mut s = keyed();
        s.handle_input(
            t0,
            &frame(&AgentRequest::Hello {
                nonce: None,
                pake: None,
            }),
        );
        assert!(closed(&mut s)
            .unwrap()
            .unwrap_err()
            .contains("requires a key"));
        // A request instead of the proof: refused, and nothing reaches the driver.
        let mut s = keyed();
        s.handle_input(
            t0,
            &frame(&DialerHandshake::new(Some((key.clone(), nonce))).hello()),
        );
        s.handle_input(t0, &frame(&AgentRequest::Ping { seq: 1 }));
        assert!(closed(&mut s).unwrap().unwrap_err().contains("no proof"));
        // No proof in time.
        let mut s = keyed();
        s.handle_input(
            t0,
            &frame(&DialerHandshake::new(Some((key.clone(), nonce))).hello()),
        );
        s.handle_timeout(t0 + TIMEOUTS.handshake);
        assert!(closed(&mut s)
            .unwrap()
            .unwrap_err()
            .contains("no proof of the key within"));
    }

    #[test]
    fn a_dialer_and_an_agent_agree_only_on_the_same_key() {
        let key = Key::from_file_contents(b"the agents' key, at least 16 bytes").unwrap();
        let other = Key::from_file_contents(b"another key, also 16 bytes long").unwrap();
        let t0 = origin();
        for (dialer_key, agent_key, serves) in [
            (Some(&key), Some(&key), true),
            (Some(&other), Some(&key), false),
            (None, Some(&key), false),
            (Some(&key), None, false),
            (None, None, true),
        ] {
            let mut dialer = DialerHandshake::new(dialer_key.map(|k| (k.clone(), Nonce([3; 32]))));
            let mut agent = AgentSession::new(t0, AGENT_VERSION, HostFacts::default(), TIMEOUTS);
            if let Some(k) = agent_key {
                agent = agent.with_key(k.clone(), Nonce([9; 32]));
            }
            agent.handle_input(t0, &frame(&dialer.hello()));
            let answer = match replies(&mut agent).first() {
                Some(AgentReply::Welcome { auth, .. }) => dialer.handle_welcome(auth.as_ref()),
                _ => Err(crate::auth::AuthError::KeyRequired),
            };
            let answered = answer.is_ok();
            let mut seal = None;
            if let Ok(Some((proof, sealed))) = answer {
                agent.handle_input(t0, &frame(&proof));
                seal = Some(sealed);
            }
            agent.handle_input(
                t0,
                &crate::auth::encode_with(&mut seal, &AgentRequest::Ping { seq: 1 }),
            );
            let served =
                agent.poll_event() == Some(AgentEvent::Request(AgentRequest::Ping { seq: 1 }));
            assert_eq!(served && answered, serves, "{dialer_key:?} {agent_key:?}");
        }
    }

    #[test]
    fn before_the_handshake_frames_are_small() {
        let t0 = origin();
        let mut s = AgentSession::new(t0, AGENT_VERSION, HostFacts::default(), TIMEOUTS);
        s.handle_input(t0, &((MAX_HANDSHAKE_FRAME + 1) as u32).to_be_bytes());
        assert!(closed(&mut s).unwrap().unwrap_err().contains("bad frame"));
        // Another version: refused at once.
        let mut s = AgentSession::new(t0, 1, HostFacts::default(), TIMEOUTS);
        assert!(s.is_closed());
        assert!(closed(&mut s).unwrap().unwrap_err().contains("version 1"));
    }
}
