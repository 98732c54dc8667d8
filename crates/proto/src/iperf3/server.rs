//! The server's half of an iperf3 test, sans-IO.
//!
//! ```text
//! client                          server (this machine)
//! cookie (read by the acceptor) ->
//!                                <- PARAM_EXCHANGE
//! parameters JSON             ->      Event::Params        -> accept | refuse | busy
//!                                <- CREATE_STREAMS
//! [data streams: TCP connections with the cookie, or UDP connect datagrams]
//!                                     streams_ready()
//!                                <- TEST_START, TEST_RUNNING
//! TEST_END                    ->      Event::EndRequested  -> finish(results)
//!                                <- EXCHANGE_RESULTS
//! client results JSON         ->      Event::ClientResults
//!                                <- server results JSON, DISPLAY_RESULTS
//! IPERF_DONE (or close)       ->      Event::Closed(Ok)
//! ```
//!
//! Every wait has a deadline (iperf3 3.15 and later give up on a silent peer after 10 s
//! per read; a running test gets its duration, its warm-up and 40 s more, as iperf3's
//! server does), so a broken client never holds a test open.

use super::{code, state, Params, Results, MAX_CLIENT_RESULTS_JSON, MAX_PARAMS_JSON};
use crate::frame::{encode, FrameDecoder};
use crate::machine::{Machine, Outbox};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long each read of the control connection may wait outside a running test.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a running test may go past its duration and warm-up before the server ends it.
pub const RUN_GRACE: Duration = Duration::from_secs(40);
/// The longest a byte- or block-count test may run on this server.
pub const MAX_COUNTED_RUN: Duration = Duration::from_secs(3600);

/// What the session tells its driver.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The client's parameters, read and checked: answer with `accept`, `refuse` or `busy`.
    Params(Params),
    /// The client ended the test: stop counting, then `finish` with this side's results.
    EndRequested,
    /// The client's own results arrived.
    ClientResults(Results),
    /// The session is over; the error says why when it ended badly.
    Closed(Result<(), String>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    AwaitParams,
    Deciding,
    CreatingStreams,
    Running,
    Ending,
    AwaitClientResults,
    AwaitDone,
    Closed,
}

/// One iperf3 test's control connection, server side.
pub struct Iperf3Server {
    phase: Phase,
    decoder: FrameDecoder,
    /// Bytes that are not JSON: the single state bytes.
    raw: VecDeque<u8>,
    outbox: Outbox<Event>,
    deadline: Option<Instant>,
    waiting: &'static str,
    params: Option<Params>,
    ours: Option<Results>,
}

impl Iperf3Server {
    /// A session whose cookie has been read: it asks for the parameters at once.
    pub fn new(now: Instant) -> Iperf3Server {
        let mut session = Iperf3Server {
            phase: Phase::AwaitParams,
            decoder: FrameDecoder::new(MAX_PARAMS_JSON),
            raw: VecDeque::new(),
            outbox: Outbox::new(),
            deadline: None,
            waiting: "",
            params: None,
            ours: None,
        };
        session.send_state(state::PARAM_EXCHANGE);
        session.wait(now, READ_TIMEOUT, "waiting for the test parameters");
        session
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.outbox.poll_event()
    }

    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// The test's parameters, once read.
    pub fn params(&self) -> Option<&Params> {
        self.params.as_ref()
    }

    /// The test is moving data (between TEST_RUNNING and TEST_END).
    pub fn is_running(&self) -> bool {
        self.phase == Phase::Running
    }

    fn send_state(&mut self, byte: u8) {
        self.outbox.send(vec![byte]);
    }

    fn wait(&mut self, now: Instant, limit: Duration, what: &'static str) {
        self.deadline = Some(now + limit);
        self.waiting = what;
    }

    fn close(&mut self, result: Result<(), String>) {
        if self.phase != Phase::Closed {
            self.phase = Phase::Closed;
            self.deadline = None;
            self.outbox.emit(Event::Closed(result));
        }
    }

    /// Sends SERVER_ERROR with an iperf3 error code, and ends the session.
    fn fail(&mut self, error_code: i32, why: String) {
        let mut bytes = vec![state::SERVER_ERROR];
        bytes.extend_from_slice(&error_code.to_be_bytes());
        bytes.extend_from_slice(&0i32.to_be_bytes());
        self.outbox.send(bytes);
        self.close(Err(why));
    }

    fn process(&mut self, now: Instant) {
        loop {
            match self.phase {
                Phase::AwaitParams => {
                    let body = match self.decoder.next_frame() {
                        Ok(Some(body)) => body,
                        Ok(None) => return,
                        Err(e) => {
                            return self.fail(code::RECV_PARAMS, format!("parameters refused: {e}"))
                        }
                    };
                    match Params::from_json(&body) {
                        Ok(params) => {
                            self.phase = Phase::Deciding;
                            self.deadline = None;
                            self.params = Some(params.clone());
                            self.outbox.emit(Event::Params(params));
                        }
                        Err(e) => {
                            return self.fail(e.code, format!("parameters refused: {}", e.message))
                        }
                    }
                }
                Phase::AwaitClientResults => {
                    let body = match self.decoder.next_frame() {
                        Ok(Some(body)) => body,
                        Ok(None) => return,
                        Err(e) => return self.close(Err(format!("client results refused: {e}"))),
                    };
                    match Results::from_json(&body) {
                        Ok(theirs) => {
                            self.outbox.emit(Event::ClientResults(theirs));
                            let ours = self.ours.take().expect("finish stored our results");
                            self.outbox.send(encode(&ours.to_json()));
                            self.send_state(state::DISPLAY_RESULTS);
                            self.phase = Phase::AwaitDone;
                            self.wait(now, READ_TIMEOUT, "waiting for the client to finish");
                        }
                        Err(e) => return self.close(Err(format!("client results refused: {e}"))),
                    }
                }
                Phase::Closed => return,
                // A state byte from the client: the end, its done, or its termination.
                Phase::Deciding
                | Phase::CreatingStreams
                | Phase::Running
                | Phase::Ending
                | Phase::AwaitDone => {
                    let Some(byte) = self.raw.pop_front() else {
                        return;
                    };
                    match (self.phase, byte) {
                        (Phase::CreatingStreams | Phase::Running, state::TEST_END) => {
                            self.phase = Phase::Ending;
                            self.deadline = None;
                            self.outbox.emit(Event::EndRequested);
                        }
                        (Phase::AwaitDone, state::IPERF_DONE) => self.close(Ok(())),
                        (_, state::CLIENT_TERMINATE) => {
                            self.close(Err("the client terminated the test".into()))
                        }
                        (_, other) => {
                            return self.close(Err(format!(
                                "unexpected state byte {} from the client while {}",
                                other as i8,
                                self.describe()
                            )))
                        }
                    }
                }
            }
        }
    }

    fn describe(&self) -> &'static str {
        match self.phase {
            Phase::AwaitParams => "waiting for parameters",
            Phase::Deciding => "deciding on the test",
            Phase::CreatingStreams => "creating streams",
            Phase::Running => "running",
            Phase::Ending => "ending",
            Phase::AwaitClientResults => "exchanging results",
            Phase::AwaitDone => "finishing",
            Phase::Closed => "closed",
        }
    }

    /// Serves the test: the client may open its streams.
    pub fn accept(&mut self, now: Instant) {
        if self.phase != Phase::Deciding {
            return;
        }
        self.phase = Phase::CreatingStreams;
        self.send_state(state::CREATE_STREAMS);
        self.wait(now, READ_TIMEOUT * 3, "waiting for the data streams");
    }

    /// Refuses the test with an iperf3 error code.
    pub fn refuse(&mut self, error_code: i32, why: String) {
        if self.phase != Phase::Closed {
            self.fail(error_code, why);
        }
    }

    /// Refuses a client whose authentication failed, as iperf3 does: SERVER_ERROR and
    /// its auth error code alone (no errno), then close.
    pub fn refuse_auth(&mut self, why: String) {
        if self.phase != Phase::Closed {
            let mut bytes = vec![state::SERVER_ERROR];
            bytes.extend_from_slice(&super::code::AUTH.to_be_bytes());
            self.outbox.send(bytes);
            self.close(Err(why));
        }
    }

    /// Refuses the test as a busy iperf3 server does.
    pub fn busy(&mut self, why: String) {
        if self.phase != Phase::Closed {
            self.outbox.send(vec![state::ACCESS_DENIED]);
            self.close(Err(why));
        }
    }

    /// Ends the test from this side (shutdown, a failed data plane): the client hears that
    /// the server terminated.
    pub fn terminate(&mut self, why: String) {
        if self.phase != Phase::Closed {
            self.send_state(state::SERVER_TERMINATE);
            self.close(Err(why));
        }
    }

    /// Every stream has arrived: the test starts now.
    pub fn streams_ready(&mut self, now: Instant) {
        if self.phase != Phase::CreatingStreams {
            return;
        }
        self.phase = Phase::Running;
        self.send_state(state::TEST_START);
        self.send_state(state::TEST_RUNNING);
        let params = self
            .params
            .as_ref()
            .expect("accepted tests have parameters");
        let run = if params.time > 0 {
            Duration::from_secs(params.time + params.omit)
        } else {
            MAX_COUNTED_RUN
        };
        self.wait(
            now,
            run + RUN_GRACE,
            "waiting for the client to end the test",
        );
        // TEST_END may already be queued behind the streams.
        self.process(now);
    }

    /// This side's results, once it has stopped counting after TEST_END.
    pub fn finish(&mut self, now: Instant, ours: Results) {
        if self.phase != Phase::Ending {
            return;
        }
        self.ours = Some(ours);
        self.phase = Phase::AwaitClientResults;
        self.decoder = FrameDecoder::new(MAX_CLIENT_RESULTS_JSON);
        // Bytes after TEST_END belong to the results document.
        let early: Vec<u8> = self.raw.drain(..).collect();
        self.decoder.push(&early);
        self.send_state(state::EXCHANGE_RESULTS);
        self.wait(now, READ_TIMEOUT, "waiting for the client's results");
        self.process(now);
    }
}

impl Machine for Iperf3Server {
    fn handle_input(&mut self, now: Instant, bytes: &[u8]) {
        match self.phase {
            Phase::AwaitParams | Phase::AwaitClientResults => self.decoder.push(bytes),
            Phase::Closed => return,
            Phase::Deciding
            | Phase::CreatingStreams
            | Phase::Running
            | Phase::Ending
            | Phase::AwaitDone => self.raw.extend(bytes),
        }
        self.process(now);
    }
    fn handle_eof(&mut self, _now: Instant) {
        match self.phase {
            // iperf3's server ends a test on IPERF_DONE or on the client's close alike.
            Phase::AwaitDone => self.close(Ok(())),
            Phase::Closed => {}
            Phase::AwaitParams
            | Phase::Deciding
            | Phase::CreatingStreams
            | Phase::Running
            | Phase::Ending
            | Phase::AwaitClientResults => {
                let why = format!(
                    "the client closed the control connection while {}",
                    self.describe()
                );
                self.close(Err(why));
            }
        }
    }
    fn handle_timeout(&mut self, now: Instant) {
        if self.deadline.is_some_and(|d| now >= d) {
            let why = format!("timed out {}", self.waiting);
            self.close(Err(why));
        }
    }
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.outbox.poll_transmit()
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }
}
