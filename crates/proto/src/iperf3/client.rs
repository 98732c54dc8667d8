//! The client's half of an iperf3 test, sans-IO: what `linerate iperf3 -c` speaks to a
//! real iperf3 server.
//!
//! ```text
//! client (this machine)           iperf3 server
//! cookie                      ->
//!                                <- PARAM_EXCHANGE | ACCESS_DENIED (busy)
//! parameters JSON             ->
//!                                <- CREATE_STREAMS | SERVER_ERROR code errno
//! [the driver opens the streams]
//!                                <- TEST_START, TEST_RUNNING
//! [the driver runs the test, then end_test(results)]
//! TEST_END                    ->
//!                                <- EXCHANGE_RESULTS
//! client results JSON         ->
//!                                <- server results JSON, DISPLAY_RESULTS
//! IPERF_DONE                  ->
//! ```

use super::{describe_code, state, Params, Results, COOKIE_LEN, MAX_RESULTS_JSON};
use crate::frame::{encode, FrameDecoder};
use crate::machine::{Machine, Outbox};
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use thiserror::Error;

/// How long the client waits for each answer outside the running test (iperf3's own
/// control read timeout).
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How an iperf3 test ended badly, as an iperf3 user knows it.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum Iperf3Error {
    #[error("the server is busy running a test; try again later")]
    Busy,
    #[error("server error {code} ({text}){}", errno_text(*.errno))]
    Server {
        code: i32,
        errno: Option<i32>,
        text: &'static str,
    },
    #[error("the server terminated the test")]
    ServerTerminated,
    #[error("the server closed the control connection while {0}")]
    PeerGone(&'static str),
    #[error("timed out after {seconds:.0} s while {waiting}")]
    Timeout { waiting: &'static str, seconds: f64 },
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("the test was aborted: {0}")]
    Aborted(String),
}

fn errno_text(errno: Option<i32>) -> String {
    match errno {
        Some(e) if e != 0 => format!(": {}", std::io::Error::from_raw_os_error(e)),
        _ => String::new(),
    }
}

/// What the session tells its driver.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Open the streams now.
    CreateStreams,
    /// The server has every stream: start the clock.
    TestStart,
    /// Move data.
    TestRunning,
    /// The server's results arrived.
    ServerResults(Results),
    /// Over; the error says why when it ended badly.
    Closed(Result<(), Iperf3Error>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    AwaitParamExchange,
    AwaitCreateStreams,
    CreatingStreams,
    Running,
    AwaitExchange,
    AwaitServerResults,
    AwaitDisplay,
    /// SERVER_ERROR seen: reading its code and errno.
    ServerError,
    Closed,
}

/// One iperf3 test's control connection, client side.
pub struct Iperf3Client {
    phase: Phase,
    params: Params,
    raw: VecDeque<u8>,
    decoder: FrameDecoder,
    outbox: Outbox<Event>,
    deadline: Option<Instant>,
    waiting: &'static str,
    ours: Option<Results>,
}

impl Iperf3Client {
    /// A session that opens with `cookie` and will ask for `params`.
    pub fn new(now: Instant, cookie: [u8; COOKIE_LEN], params: Params) -> Iperf3Client {
        let mut session = Iperf3Client {
            phase: Phase::AwaitParamExchange,
            params,
            raw: VecDeque::new(),
            decoder: FrameDecoder::new(MAX_RESULTS_JSON),
            outbox: Outbox::new(),
            deadline: None,
            waiting: "",
            ours: None,
        };
        session.outbox.send(cookie.to_vec());
        session.wait(now, "waiting for the server to ask for parameters");
        session
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.outbox.poll_event()
    }

    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    fn wait(&mut self, now: Instant, what: &'static str) {
        self.deadline = Some(now + READ_TIMEOUT);
        self.waiting = what;
    }

    fn close(&mut self, result: Result<(), Iperf3Error>) {
        if self.phase != Phase::Closed {
            self.phase = Phase::Closed;
            self.deadline = None;
            self.outbox.emit(Event::Closed(result));
        }
    }

    fn process(&mut self, now: Instant) {
        loop {
            match self.phase {
                Phase::Closed => return,
                Phase::AwaitServerResults => {
                    let body = match self.decoder.next_frame() {
                        Ok(Some(body)) => body,
                        Ok(None) => return,
                        Err(e) => return self.close(Err(Iperf3Error::Protocol(e.to_string()))),
                    };
                    match Results::from_json(&body) {
                        Ok(results) => {
                            self.outbox.emit(Event::ServerResults(results));
                            self.phase = Phase::AwaitDisplay;
                            self.wait(now, "waiting for the server to finish");
                            let rest = self.decoder.take_rest();
                            self.raw.extend(rest);
                        }
                        Err(e) => return self.close(Err(Iperf3Error::Protocol(e))),
                    }
                }
                Phase::ServerError => {
                    if self.raw.len() < 8 {
                        return;
                    }
                    let code = self.take_i32();
                    let errno = self.take_i32();
                    return self.server_error(code, Some(errno));
                }
                // A state byte from the server moves every other phase on.
                Phase::AwaitParamExchange
                | Phase::AwaitCreateStreams
                | Phase::CreatingStreams
                | Phase::Running
                | Phase::AwaitExchange
                | Phase::AwaitDisplay => {
                    let Some(byte) = self.raw.pop_front() else {
                        return;
                    };
                    self.on_state(now, byte);
                }
            }
        }
    }

    fn take_i32(&mut self) -> i32 {
        let bytes: Vec<u8> = self.raw.drain(..4).collect();
        i32::from_be_bytes(bytes.try_into().expect("four bytes"))
    }

    fn server_error(&mut self, code: i32, errno: Option<i32>) {
        self.close(Err(Iperf3Error::Server {
            code,
            errno,
            text: describe_code(code),
        }));
    }

    fn on_state(&mut self, now: Instant, byte: u8) {
        match (self.phase, byte) {
            (_, state::ACCESS_DENIED) => self.close(Err(Iperf3Error::Busy)),
            (_, state::SERVER_ERROR) => self.phase = Phase::ServerError,
            (_, state::SERVER_TERMINATE) => self.close(Err(Iperf3Error::ServerTerminated)),
            (Phase::AwaitParamExchange, state::PARAM_EXCHANGE) => {
                self.outbox.send(encode(&self.params.to_json()));
                self.phase = Phase::AwaitCreateStreams;
                self.wait(now, "waiting for the server to accept the parameters");
            }
            (Phase::AwaitCreateStreams, state::CREATE_STREAMS) => {
                self.phase = Phase::CreatingStreams;
                self.wait(now, "waiting for the server to take the streams");
                self.outbox.emit(Event::CreateStreams);
            }
            (Phase::CreatingStreams, state::TEST_START) => {
                self.deadline = None;
                self.outbox.emit(Event::TestStart);
            }
            (Phase::CreatingStreams, state::TEST_RUNNING) => {
                self.phase = Phase::Running;
                self.deadline = None;
                self.outbox.emit(Event::TestRunning);
            }
            (Phase::AwaitExchange, state::EXCHANGE_RESULTS) => {
                let ours = self.ours.take().expect("end_test stored our results");
                self.outbox.send(encode(&ours.to_json()));
                self.phase = Phase::AwaitServerResults;
                self.wait(now, "waiting for the server's results");
                let rest: Vec<u8> = self.raw.drain(..).collect();
                self.decoder.push(&rest);
            }
            (Phase::AwaitDisplay, state::DISPLAY_RESULTS) => {
                self.outbox.send(vec![state::IPERF_DONE]);
                self.close(Ok(()));
            }
            (phase, other) => self.close(Err(Iperf3Error::Protocol(format!(
                "unexpected state byte {} from the server while {}",
                other as i8,
                describe(phase)
            )))),
        }
    }

    /// This side has stopped sending and counted its figures: TEST_END goes out, and
    /// `ours` answers the server's EXCHANGE_RESULTS.
    pub fn end_test(&mut self, now: Instant, ours: Results) {
        if self.phase != Phase::Running {
            return;
        }
        self.ours = Some(ours);
        self.outbox.send(vec![state::TEST_END]);
        self.phase = Phase::AwaitExchange;
        self.wait(now, "waiting for the server to exchange results");
        self.process(now);
    }

    /// Ends the test from this side (interrupted, or the streams failed to open).
    pub fn terminate(&mut self, why: String) {
        if self.phase != Phase::Closed {
            self.outbox.send(vec![state::CLIENT_TERMINATE]);
            self.close(Err(Iperf3Error::Aborted(why)));
        }
    }
}

impl Machine for Iperf3Client {
    fn handle_input(&mut self, now: Instant, bytes: &[u8]) {
        match self.phase {
            Phase::AwaitServerResults => self.decoder.push(bytes),
            Phase::Closed => return,
            Phase::AwaitParamExchange
            | Phase::AwaitCreateStreams
            | Phase::CreatingStreams
            | Phase::Running
            | Phase::AwaitExchange
            | Phase::AwaitDisplay
            | Phase::ServerError => self.raw.extend(bytes),
        }
        self.process(now);
    }
    fn handle_eof(&mut self, _now: Instant) {
        match self.phase {
            Phase::Closed => {}
            // An auth failure sends one code and closes: tolerate EOF for the errno.
            Phase::ServerError if self.raw.len() >= 4 => {
                let code = self.take_i32();
                self.server_error(code, None);
            }
            phase => self.close(Err(Iperf3Error::PeerGone(describe(phase)))),
        }
    }
    fn handle_timeout(&mut self, now: Instant) {
        if self.deadline.is_some_and(|d| now >= d) {
            let waiting = self.waiting;
            self.close(Err(Iperf3Error::Timeout {
                waiting,
                seconds: READ_TIMEOUT.as_secs_f64(),
            }));
        }
    }
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.outbox.poll_transmit()
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }
}

fn describe(phase: Phase) -> &'static str {
    match phase {
        Phase::AwaitParamExchange => "waiting to send the parameters",
        Phase::AwaitCreateStreams => "waiting for the parameters to be accepted",
        Phase::CreatingStreams => "creating streams",
        Phase::Running => "running the test",
        Phase::AwaitExchange => "waiting to exchange results",
        Phase::AwaitServerResults => "reading the server's results",
        Phase::AwaitDisplay => "finishing",
        Phase::ServerError => "reading a server error",
        Phase::Closed => "closed",
    }
}
