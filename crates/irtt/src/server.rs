//! What an irtt server does with each packet, sans IO: an open gets a token and the
//! parameters it will be served with (bounded here), an echo request gets its answer,
//! a close ends its session.
//!
//! Safe to leave open: an answer to an echo is the request's own length and goes only to
//! the address the session was opened from, once the request proves it holds the token
//! (64 random bits that only a receiver of the open's answer knows). The one answer to an
//! unproven address is an open's, at most [`OPEN_ANSWER_GROWTH`] bytes longer than the open
//! (the token, and the parameters as granted), and opens are taken through a rate per
//! source and one for all. Sessions are bounded in number, in
//! all and per source, in duration and in rate (irtt's own rules: an interval of at least
//! 10 ms, bursts of 5), and end after a minute without a request.

use crate::wire::{self, flag, HmacKey, Layout, Params, Stamp, WireError};
use linerate_stamp::reflector::{answerable, source_of, Bucket};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

/// The server's bounds.
#[derive(Debug, Clone)]
pub struct Config {
    /// irtt's `--hmac` key: every packet must carry its HMAC-MD5.
    pub key: Option<HmacKey>,
    pub max_sessions: usize,
    pub max_sessions_per_source: usize,
    /// The longest test; a longer one asked for is granted this, and a session still
    /// sending 2 s after it is closed.
    pub max_duration_ns: i64,
    /// The shortest interval between requests (a session may burst `burst` at once).
    pub min_interval_ns: i64,
    pub burst: u32,
    /// A session without a request this long is ended.
    pub idle_ns: i64,
    /// Opens answered a second from one source, and from all.
    pub opens_per_source_pps: u32,
    pub opens_pps: u32,
    pub ipv6_source_prefix: u8,
    /// The longest packet served; a longer test length is granted this.
    pub max_length: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            key: None,
            max_sessions: 1_024,
            max_sessions_per_source: 16,
            max_duration_ns: 3_600 * 1_000_000_000,
            min_interval_ns: 10_000_000,
            burst: 5,
            idle_ns: 60 * 1_000_000_000,
            opens_per_source_pps: 10,
            opens_pps: 1_000,
            ipv6_source_prefix: 64,
            max_length: MAX_LENGTH,
        }
    }
}

/// The longest packet the server reads: a 9,000-byte MTU's UDP payload over IPv4.
pub const MAX_LENGTH: usize = 8_972;
/// The most an open's answer is longer than the open: its token (8 bytes) and the
/// parameters raised to the server's bounds (an interval the open left out, 5 bytes; the
/// protocol version, 2; a fill name the server does not allow replaced by its own, at
/// most 15 more).
pub const OPEN_ANSWER_GROWTH: usize = 32;
/// Sources whose open rate is kept at once; past it, idle ones make room.
const MAX_SOURCES: usize = 65_536;
/// How long past its duration a session may go on sending before it is closed.
const DURATION_GRACE_NS: i64 = 2_000_000_000;

/// Why a packet got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The server's --allow/--deny refuse its source.
    Denied,
    /// Its source cannot be answered (port 0, multicast, broadcast, unspecified).
    Unanswerable,
    Malformed(WireError),
    /// A reply, or a packet longer than the server reads.
    NotARequest,
    UnknownToken,
    /// A token from another address than the session's.
    WrongAddress,
    /// Faster than the session's interval allows.
    TooSoon,
    OpenRate,
    /// The session table is full (the open is answered with a close).
    Full,
    /// The source holds its share of sessions (the open is answered with a close).
    SourceFull,
}

impl Refusal {
    pub const ALL: [Refusal; 16] = [
        Refusal::Denied,
        Refusal::Unanswerable,
        Refusal::Malformed(WireError::Short),
        Refusal::Malformed(WireError::Magic),
        Refusal::Malformed(WireError::Flags),
        Refusal::Malformed(WireError::NoHmac),
        Refusal::Malformed(WireError::BadHmac),
        Refusal::Malformed(WireError::UnexpectedHmac),
        Refusal::Malformed(WireError::Params),
        Refusal::NotARequest,
        Refusal::UnknownToken,
        Refusal::WrongAddress,
        Refusal::TooSoon,
        Refusal::OpenRate,
        Refusal::Full,
        Refusal::SourceFull,
    ];

    /// The reason as a metric label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Denied => "denied",
            Refusal::Unanswerable => "unanswerable_source",
            Refusal::Malformed(WireError::Short) => "short",
            Refusal::Malformed(WireError::Magic) => "magic",
            Refusal::Malformed(WireError::Flags) => "flags",
            Refusal::Malformed(WireError::NoHmac) => "unauthenticated",
            Refusal::Malformed(WireError::BadHmac) => "hmac",
            Refusal::Malformed(WireError::UnexpectedHmac) => "unexpected_hmac",
            Refusal::Malformed(WireError::Params) => "params",
            Refusal::NotARequest => "not_a_request",
            Refusal::UnknownToken => "unknown_token",
            Refusal::WrongAddress => "wrong_address",
            Refusal::TooSoon => "interval",
            Refusal::OpenRate => "open_rate",
            Refusal::Full => "sessions_full",
            Refusal::SourceFull => "source_sessions",
        }
    }

    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Denied => "denied by --allow/--deny",
            Refusal::Unanswerable => "a source that cannot be answered",
            Refusal::Malformed(e) => e.reason(),
            Refusal::NotARequest => "not a request",
            Refusal::UnknownToken => "no session has its token",
            Refusal::WrongAddress => "a session's token from another address",
            Refusal::TooSoon => "faster than the interval allows",
            Refusal::OpenRate => "opens over the rate",
            Refusal::Full => "the session table is full",
            Refusal::SourceFull => "the source holds its share of sessions",
        }
    }
}

/// A packet as it arrived, with the server's clocks at its arrival and now.
#[derive(Debug, Clone, Copy)]
pub struct Arrival<'a> {
    pub from: SocketAddr,
    pub bytes: &'a [u8],
    pub received: Stamp,
    /// When the answer leaves; its monotonic part is the rules' clock too.
    pub now: Stamp,
}

/// An answer written into the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub len: usize,
    /// The TOS byte the session asked for.
    pub tos: u8,
}

/// What one packet came to: an answer, a refusal, or (an open turned away) both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Decision {
    pub answer: Option<Answer>,
    pub refused: Option<Refusal>,
}

impl Decision {
    fn answer(answer: Answer) -> Decision {
        Decision {
            answer: Some(answer),
            refused: None,
        }
    }
    pub fn refused(refusal: Refusal) -> Decision {
        Decision {
            answer: None,
            refused: Some(refusal),
        }
    }
}

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// The client closed it.
    Closed,
    /// Past its duration and the grace: answered with a close.
    Duration,
    /// No request for the idle bound.
    Idle,
}

/// A session's record, when it ends.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    pub from: SocketAddr,
    pub params: Params,
    /// Requests received and answers sent.
    pub received: u64,
    pub answered: u64,
    /// From its first request to its last.
    pub active_ns: i64,
    pub why: EndReason,
}

/// Where the tokens come from: unpredictable in a server (they prove an address),
/// anything in a test.
pub type Tokens = Box<dyn FnMut() -> u64 + Send>;

#[derive(Debug)]
struct Session {
    from: SocketAddr,
    source: IpAddr,
    params: Params,
    layout: Layout,
    tos: u8,
    first_ns: Option<i64>,
    last_ns: i64,
    bucket: f64,
    last_seqno: u32,
    received_count: u32,
    window: u64,
    window_valid: bool,
    received: u64,
    answered: u64,
}

/// The server's sessions and buckets.
pub struct Server {
    config: Config,
    tokens: Tokens,
    sessions: HashMap<u64, Session>,
    sessions_of: HashMap<IpAddr, usize>,
    opens_of: HashMap<IpAddr, Bucket>,
    opens: Bucket,
    last_sweep_ns: i64,
    ended: Vec<Ended>,
    /// The state of the "rand" fill (xorshift: a payload, not a secret).
    fill_state: u64,
}

impl Server {
    pub fn new(config: Config, mut tokens: Tokens, now_ns: i64) -> Server {
        let opens = Bucket::full(config.opens_pps, now_ns.max(0) as u64);
        let fill_state = tokens() | 1;
        Server {
            config,
            tokens,
            sessions: HashMap::new(),
            sessions_of: HashMap::new(),
            opens_of: HashMap::new(),
            opens,
            last_sweep_ns: now_ns,
            ended: Vec::new(),
            fill_state,
        }
    }

    fn key(&self) -> Option<&[u8]> {
        self.config.key.as_ref().map(|k| k.0.as_slice())
    }

    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// The sessions that ended since the last call.
    pub fn take_ended(&mut self) -> Vec<Ended> {
        std::mem::take(&mut self.ended)
    }

    /// Ends the sessions idle past the bound (and its 5 s grace, as irtt's).
    pub fn sweep(&mut self, now_ns: i64) {
        self.last_sweep_ns = now_ns;
        let bound = self.config.idle_ns + 5_000_000_000;
        let idle: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, s)| now_ns - s.last_ns > bound)
            .map(|(token, _)| *token)
            .collect();
        for token in idle {
            self.end(token, EndReason::Idle);
        }
    }

    /// What `arrival` gets; an answer is written into `out`.
    pub fn handle(&mut self, arrival: &Arrival, out: &mut Vec<u8>) -> Decision {
        let now_ns = arrival.now.mono;
        if now_ns - self.last_sweep_ns >= 1_000_000_000 {
            self.sweep(now_ns);
        }
        if !answerable(arrival.from) {
            return Decision::refused(Refusal::Unanswerable);
        }
        if arrival.bytes.len() > self.config.max_length {
            return Decision::refused(Refusal::NotARequest);
        }
        let head = match wire::header(arrival.bytes, self.key()) {
            Ok(head) => head,
            Err(e) => return Decision::refused(Refusal::Malformed(e)),
        };
        if head.has(flag::REPLY) {
            return Decision::refused(Refusal::NotARequest);
        }
        if head.has(flag::OPEN) {
            return self.open(arrival, head, out);
        }
        let bytes = arrival.bytes;
        if bytes.len() < head.body + 8 {
            return Decision::refused(Refusal::Malformed(WireError::Short));
        }
        let token = wire::le_u64(bytes, head.body);
        let Some(session) = self.sessions.get(&token) else {
            return Decision::refused(Refusal::UnknownToken);
        };
        if session.from != arrival.from {
            return Decision::refused(Refusal::WrongAddress);
        }
        if head.has(flag::CLOSE) {
            self.end(token, EndReason::Closed);
            return Decision::default();
        }
        self.echo(token, arrival, out)
    }

    fn open(&mut self, arrival: &Arrival, head: wire::Header, out: &mut Vec<u8>) -> Decision {
        let now_ns = arrival.now.mono.max(0) as u64;
        let source = source_of(arrival.from.ip(), self.config.ipv6_source_prefix);
        if !self.take_open(source, now_ns) {
            return Decision::refused(Refusal::OpenRate);
        }
        let asked = match Params::parse(&arrival.bytes[head.body..]) {
            Ok(params) => params,
            Err(e) => return Decision::refused(Refusal::Malformed(e)),
        };
        let granted = self.grant(&asked);
        let tos = u8::try_from(granted.dscp).unwrap_or(0);
        let key = self.config.key.clone();
        let key = key.as_ref().map(|k| k.0.as_slice());
        let mut answer_flags = flag::OPEN | flag::REPLY;
        let mut refused = None;
        if asked.protocol_version != wire::PROTOCOL_VERSION || head.has(flag::CLOSE) {
            // Another version, or a client asking only whether the server answers.
            answer_flags |= flag::CLOSE;
        } else if self.sessions.len() >= self.config.max_sessions {
            answer_flags |= flag::CLOSE;
            refused = Some(Refusal::Full);
        } else if self.sessions_of.get(&source).copied().unwrap_or(0)
            >= self.config.max_sessions_per_source
        {
            answer_flags |= flag::CLOSE;
            refused = Some(Refusal::SourceFull);
        }
        let token = if answer_flags & flag::CLOSE == 0 {
            self.new_token()
        } else {
            0
        };
        wire::put_open(out, answer_flags, Some(token), &granted, key);
        if out.len() > arrival.bytes.len() + OPEN_ANSWER_GROWTH {
            // Not reached (see the bound's reasons); kept so that no change of the
            // granting rules can make an open an amplifier unseen.
            return Decision::refused(Refusal::Malformed(WireError::Params));
        }
        if token != 0 {
            let session = Session {
                from: arrival.from,
                source,
                layout: granted.layout(key.is_some()),
                params: granted,
                tos,
                first_ns: None,
                last_ns: arrival.now.mono,
                bucket: f64::from(self.config.burst),
                last_seqno: u32::MAX,
                received_count: 0,
                window: 0,
                window_valid: false,
                received: 0,
                answered: 0,
            };
            self.sessions.insert(token, session);
            *self.sessions_of.entry(source).or_insert(0) += 1;
        }
        Decision {
            answer: Some(Answer {
                len: out.len(),
                tos,
            }),
            refused,
        }
    }

    /// The parameters a session is served with: the asked ones within the server's
    /// bounds (irtt's server restricts them so, and its client takes what it is given).
    fn grant(&self, asked: &Params) -> Params {
        let c = &self.config;
        let mut p = asked.clone();
        p.protocol_version = wire::PROTOCOL_VERSION;
        if p.duration_ns > c.max_duration_ns {
            p.duration_ns = c.max_duration_ns;
        }
        if p.interval_ns < c.min_interval_ns {
            p.interval_ns = c.min_interval_ns;
        }
        // Four intervals fit in the idle bound, so a session that sends is never idle.
        p.interval_ns = p.interval_ns.min(c.idle_ns / 4);
        p.length = p.length.clamp(0, c.max_length as i64);
        if !(0..=255).contains(&p.dscp) {
            p.dscp = 0;
        }
        if !p.server_fill.is_empty() && p.server_fill != "rand" {
            p.server_fill = wire::DEFAULT_FILL.into();
        }
        p
    }

    fn take_open(&mut self, source: IpAddr, now_ns: u64) -> bool {
        let rate = self.config.opens_per_source_pps;
        if !self.opens_of.contains_key(&source) && self.opens_of.len() >= MAX_SOURCES {
            self.opens_of.retain(|_, b| !b.idle(rate, now_ns));
            if self.opens_of.len() >= MAX_SOURCES {
                return false;
            }
        }
        let bucket = self
            .opens_of
            .entry(source)
            .or_insert_with(|| Bucket::full(rate, now_ns));
        bucket.take(rate, now_ns) && self.opens.take(self.config.opens_pps, now_ns)
    }

    fn new_token(&mut self) -> u64 {
        loop {
            let token = (self.tokens)();
            if token != 0 && !self.sessions.contains_key(&token) {
                return token;
            }
        }
    }

    fn echo(&mut self, token: u64, arrival: &Arrival, out: &mut Vec<u8>) -> Decision {
        let now_ns = arrival.now.mono;
        let (min_interval, burst, limit) = (
            self.config.min_interval_ns.max(1) as f64,
            f64::from(self.config.burst),
            self.config.max_duration_ns + DURATION_GRACE_NS,
        );
        let Some(session) = self.sessions.get_mut(&token) else {
            return Decision::refused(Refusal::UnknownToken);
        };
        let layout = session.layout;
        let bytes = arrival.bytes;
        if bytes.len() < layout.end {
            return Decision::refused(Refusal::Malformed(WireError::Short));
        }
        // A request earns the session an interval's worth since its last (refused ones
        // too, as irtt's server counts them), up to a burst.
        let earned = (now_ns - session.last_ns).max(0) as f64 / min_interval;
        session.bucket = (session.bucket + earned).min(burst);
        session.last_ns = now_ns;
        if session.bucket < 1.0 {
            return Decision::refused(Refusal::TooSoon);
        }
        session.bucket -= 1.0;
        let first = *session.first_ns.get_or_insert(now_ns);
        session.received += 1;
        session.received_count = session.received_count.wrapping_add(1);
        let seqno = wire::le_u32(bytes, layout.seqno);
        slide_window(session, seqno);
        let closing = now_ns - first > limit;

        out.clear();
        out.extend_from_slice(bytes);
        out[3] = flag::REPLY | if closing { flag::CLOSE } else { 0 } | (out[3] & flag::HMAC);
        if let Some(at) = layout.count {
            out[at..at + 4].copy_from_slice(&session.received_count.to_le_bytes());
        }
        if let Some(at) = layout.window {
            let window = if session.window_valid {
                session.window
            } else {
                0
            };
            out[at..at + 8].copy_from_slice(&window.to_le_bytes());
        }
        let at = session.params.stamp_at;
        if at.midpoint() {
            Layout::put_stamp(out, layout.midpoint, arrival.received.midpoint(arrival.now));
        }
        Layout::put_stamp(out, layout.receive, arrival.received);
        Layout::put_stamp(out, layout.send, arrival.now);
        let rand = session.params.server_fill == "rand";
        session.answered += 1;
        let tos = session.tos;
        fill(&mut out[layout.end..], rand, &mut self.fill_state);
        if let Some(key) = &self.config.key {
            wire::sign(out, &key.0);
        }
        if closing {
            self.end(token, EndReason::Duration);
        }
        Decision::answer(Answer {
            len: out.len(),
            tos,
        })
    }

    fn end(&mut self, token: u64, why: EndReason) {
        let Some(session) = self.sessions.remove(&token) else {
            return;
        };
        if let Some(n) = self.sessions_of.get_mut(&session.source) {
            *n -= 1;
            if *n == 0 {
                self.sessions_of.remove(&session.source);
            }
        }
        self.ended.push(Ended {
            from: session.from,
            active_ns: session.first_ns.map_or(0, |first| session.last_ns - first),
            params: session.params,
            received: session.received,
            answered: session.answered,
            why,
        });
    }
}

/// The window of the last 64 sequence numbers received, bit 0 the latest. A request
/// older than the latest sets its bit and makes the window unreliable until the next new
/// one (answers say 0, "not known", meanwhile), as irtt's server means it to.
fn slide_window(session: &mut Session, seqno: u32) {
    let ahead = seqno.wrapping_sub(session.last_seqno);
    if ahead < 1 << 31 {
        session.window = if ahead >= 64 {
            0
        } else {
            session.window << ahead
        };
        session.window |= 1;
        session.window_valid = true;
        session.last_seqno = seqno;
    } else {
        let behind = session.last_seqno.wrapping_sub(seqno);
        if behind < 64 {
            session.window |= 1 << behind;
        }
        session.window_valid = false;
    }
}

/// An answer's padding: irtt's pattern, or pseudo-random bytes where the client asked
/// for "rand" (irtt's servers allow it).
fn fill(payload: &mut [u8], rand: bool, state: &mut u64) {
    if rand {
        for chunk in payload.chunks_mut(8) {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
        }
    } else {
        for (i, b) in payload.iter_mut().enumerate() {
            *b = b"irtt"[i % 4];
        }
    }
}

#[cfg(test)]
mod tests;
