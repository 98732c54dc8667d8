//! The Session-Reflector's decisions, without I/O (RFC 8762 §4.3, stateful): what an
//! arriving datagram gets, an answer or a refusal with its reason.
//!
//! Safe to leave open (docs/security.md): an answer is never longer than the test packet
//! (it is the same size: the base, and the TLVs in place), so nobody can use the
//! reflector to multiply traffic towards a forged source; a datagram is counted against
//! a total rate and its source's rate (an IPv6 source by its /64) before any HMAC is
//! computed or any state is made; the session table and the table of sources are bounded,
//! and a full table refuses new sessions rather than evicting live ones, so a flood of
//! forged sources cannot take a measuring sender's counters away. Every refusal has a
//! reason that the listener counts and logs.

use crate::wire::{self, tlv, ErrorEstimate, Key, Mode, Reflected, Timestamp, WireError};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

/// The reflector's limits and keys.
#[derive(Debug, Clone)]
pub struct Config {
    /// With a key, authenticated test packets (whose HMAC checks) are answered in kind.
    pub key: Option<Key>,
    /// Refuse open (unauthenticated) test packets.
    pub authenticated_only: bool,
    /// Sessions (source address and port, SSID) kept at once.
    pub max_sessions: usize,
    /// Sessions one source (an IPv4 address, an IPv6 /64) may hold at once: far below
    /// `max_sessions`, so that no one source can fill the table and lock new senders out.
    pub max_sessions_per_source: usize,
    /// A session not heard from for this long may give its place to a new one.
    pub session_idle_ns: u64,
    /// Test packets a second from one source (an IPv4 address, an IPv6 prefix).
    pub per_source_pps: u32,
    /// The prefix length an IPv6 source is counted by (`serve --ipv6-client-prefix`).
    pub ipv6_source_prefix: u8,
    /// Test packets a second from everybody.
    pub total_pps: u32,
    /// Answer TWAMP-light test packets shorter than STAMP's base (14 to 43 octets, open
    /// mode) with RFC 5357's 41-octet reply, at most this many a second in all. Off
    /// (`None`) by default: the reply is up to 2.9 times the probe, so it is the one
    /// answer that amplifies, and it is bounded on its own (`--stamp-twamp-light`).
    pub twamp_light_pps: Option<u32>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            key: None,
            authenticated_only: false,
            max_sessions: 4_096,
            max_sessions_per_source: 64,
            session_idle_ns: 60_000_000_000,
            per_source_pps: 10_000,
            ipv6_source_prefix: 64,
            total_pps: 500_000,
            twamp_light_pps: None,
        }
    }
}

/// Why a datagram got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    Malformed(WireError),
    /// An open test packet where only authenticated ones are answered.
    Unauthenticated,
    /// Over the source's rate.
    SourceRate,
    /// Over the total rate.
    TotalRate,
    /// The session table (or the table of sources) is full of live entries.
    Full,
    /// The source already holds its share of the session table, all live.
    SourceSessions,
    /// A source no answer can go to: port 0, an unspecified, multicast or broadcast
    /// address (answering fails, or reaches others than the sender).
    Unanswerable,
    /// Refused by `--allow`/`--deny` (the listener decides; counted here).
    Denied,
}

impl Refusal {
    /// The `reason` label of the refused counter, and the log's word.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Malformed(e) => e.reason(),
            Refusal::Unauthenticated => "unauthenticated",
            Refusal::SourceRate => "source_rate",
            Refusal::TotalRate => "total_rate",
            Refusal::Full => "sessions_full",
            Refusal::SourceSessions => "source_sessions",
            Refusal::Unanswerable => "unanswerable_source",
            Refusal::Denied => "denied",
        }
    }

    /// Every reason, in the order counters list them.
    pub const ALL: [Refusal; 10] = [
        Refusal::Malformed(WireError::Short),
        Refusal::Malformed(WireError::Long),
        Refusal::Malformed(WireError::Integrity),
        Refusal::Unauthenticated,
        Refusal::SourceRate,
        Refusal::TotalRate,
        Refusal::Full,
        Refusal::SourceSessions,
        Refusal::Unanswerable,
        Refusal::Denied,
    ];
}

/// A datagram as it arrived.
#[derive(Debug, Clone, Copy)]
pub struct Arrival<'a> {
    pub from: SocketAddr,
    pub bytes: &'a [u8],
    /// When it arrived, wall clock (T2), from the kernel where it can say.
    pub received: Timestamp,
    /// When the answer is made, wall clock (T3).
    pub now: Timestamp,
    /// Monotonic nanoseconds, for the rates and the sessions' ages.
    pub now_ns: u64,
    /// The IP header's TOS (DSCP and ECN) and TTL (hop limit) as it arrived.
    pub tos: u8,
    pub ttl: u8,
}

/// What to send back: `len` octets of the buffer, with this TOS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub len: usize,
    pub tos: u8,
    pub mode: Mode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct SessionKey {
    from: SocketAddr,
    ssid: u16,
}

#[derive(Debug, Clone, Copy)]
struct Session {
    /// The reflector's sequence number for the next answer.
    next_seq: u32,
    received: u32,
    sent: u32,
    last_ns: u64,
}

/// A token bucket of one second's packets (irtt's server takes its opens through one).
#[derive(Debug, Clone, Copy)]
pub struct Bucket {
    tokens: f64,
    last_ns: u64,
}

impl Bucket {
    pub fn full(rate: u32, now_ns: u64) -> Bucket {
        Bucket {
            tokens: f64::from(rate),
            last_ns: now_ns,
        }
    }

    pub fn take(&mut self, rate: u32, now_ns: u64) -> bool {
        let elapsed = now_ns.saturating_sub(self.last_ns) as f64 / 1e9;
        self.last_ns = now_ns;
        self.tokens = (self.tokens + elapsed * f64::from(rate)).min(f64::from(rate));
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Refilled to the brim: as good as new, so its place may go to another source.
    pub fn idle(&self, rate: u32, now_ns: u64) -> bool {
        self.tokens + now_ns.saturating_sub(self.last_ns) as f64 / 1e9 * f64::from(rate)
            >= f64::from(rate)
    }
}

/// The reflector: its configuration, its sessions and its rate buckets.
#[derive(Debug)]
pub struct Reflector {
    config: Config,
    clock: ErrorEstimate,
    sessions: HashMap<SessionKey, Session>,
    /// Live sessions of each source that holds any.
    sessions_of: HashMap<IpAddr, usize>,
    /// When a source at its session cap last had the idle sessions swept (at most one
    /// sweep a second, so a source knocking at its cap costs no table walk a packet).
    last_source_sweep_ns: Option<u64>,
    sources: HashMap<IpAddr, Bucket>,
    total: Bucket,
    /// The TWAMP-light answers' own rate, where they are answered.
    twamp_light: Bucket,
}

/// Whether an answer to `from` can reach the sender and only it: port 0 cannot be sent
/// to (the send fails), and an unspecified, multicast or broadcast source is not one
/// sender (an answer would go to others, or nowhere).
pub fn answerable(from: SocketAddr) -> bool {
    if from.port() == 0 {
        return false;
    }
    match from.ip() {
        IpAddr::V4(v4) => !(v4.is_unspecified() || v4.is_multicast() || v4.is_broadcast()),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => answerable(SocketAddr::new(IpAddr::V4(v4), from.port())),
            None => !(v6.is_unspecified() || v6.is_multicast()),
        },
    }
}

/// The source a rate and a session share are counted against: an IPv4 address (also
/// when it arrives mapped into IPv6), an IPv6 address's first `prefix` bits.
pub fn source_of(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let bits = u128::from(v6);
                let mask = match prefix.min(128) {
                    0 => 0,
                    n => u128::MAX << (128 - u32::from(n)),
                };
                IpAddr::V6((bits & mask).into())
            }
        },
        v4 => v4,
    }
}

impl Reflector {
    pub fn new(config: Config, now_ns: u64) -> Reflector {
        let total = Bucket::full(config.total_pps, now_ns);
        let twamp_light = Bucket::full(config.twamp_light_pps.unwrap_or(0), now_ns);
        Reflector {
            twamp_light,
            config,
            clock: ErrorEstimate::new(false, false, 1.0),
            sessions: HashMap::new(),
            sessions_of: HashMap::new(),
            last_source_sweep_ns: None,
            sources: HashMap::new(),
            total,
        }
    }

    /// The reflector's clock as its answers declare it (read from the host's clock
    /// discipline by the listener).
    pub fn set_clock(&mut self, clock: ErrorEstimate) {
        self.clock = clock;
    }

    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Answers `arrival` into `out` (made the answer's length), or says why not.
    pub fn reflect(&mut self, arrival: &Arrival, out: &mut Vec<u8>) -> Result<Answer, Refusal> {
        let bytes = arrival.bytes;
        if bytes.len() < wire::OPEN_BASE {
            return match self.config.twamp_light_pps {
                Some(rate) if bytes.len() >= wire::TWAMP_LIGHT_TEST => {
                    self.reflect_twamp_light(arrival, rate, out)
                }
                _ => Err(Refusal::Malformed(WireError::Short)),
            };
        }
        if bytes.len() > wire::MAX_PACKET {
            return Err(Refusal::Malformed(WireError::Long));
        }
        if !answerable(arrival.from) {
            return Err(Refusal::Unanswerable);
        }
        // Rates first: nothing below (an HMAC, a session) is spent on a flood. The
        // source's first, so that one source over its rate takes nothing of the total
        // that others share.
        self.take_source(
            source_of(arrival.from.ip(), self.config.ipv6_source_prefix),
            arrival.now_ns,
        )?;
        if !self.total.take(self.config.total_pps, arrival.now_ns) {
            return Err(Refusal::TotalRate);
        }
        let mode = self.mode_of(bytes)?;
        let authenticated = mode == Mode::Authenticated;
        let test = wire::decode_test(
            bytes,
            mode,
            self.config.key.as_ref().filter(|_| authenticated),
        )
        .map_err(Refusal::Malformed)?;
        let session_key = SessionKey {
            from: arrival.from,
            ssid: test.ssid,
        };
        let session = self.session(session_key, arrival.now_ns)?;
        session.received = session.received.wrapping_add(1);
        session.sent = session.sent.wrapping_add(1);
        session.last_ns = arrival.now_ns;
        let seq = session.next_seq;
        session.next_seq = session.next_seq.wrapping_add(1);
        let (received, sent) = (session.received, session.sent);

        let base = mode.base_len();
        let signed = test_tlvs_check(bytes, base, self.config.key.as_ref());
        out.clear();
        out.extend_from_slice(bytes);
        let tos = reflect_tlvs(
            &mut out[base..],
            self.config.key.as_ref(),
            arrival.tos,
            received,
            sent,
        );
        let answer = Reflected {
            seq,
            timestamp: arrival.now,
            error: self.clock,
            ssid: test.ssid,
            receive: arrival.received,
            sender_seq: test.seq,
            sender_timestamp: test.timestamp,
            sender_error: test.error,
            sender_ttl: arrival.ttl,
        };
        let key = self.config.key.as_ref().filter(|_| authenticated);
        wire::encode_reflected(&answer, mode, key, &mut out[..]);
        sign_tlvs(out, base, self.config.key.as_ref(), signed);
        Ok(Answer {
            len: out.len(),
            tos,
            mode,
        })
    }

    /// A TWAMP-light probe (14 to 43 octets, `--stamp-twamp-light`): answered with RFC
    /// 5357's reflected packet, 41 octets or the probe's length if longer, under the
    /// source's and the total rate and a rate of its own; a session keyed as STAMP's with
    /// SSID 0 (TWAMP-light has none). Only open mode: TWAMP's authenticated modes need a
    /// control session.
    fn reflect_twamp_light(
        &mut self,
        arrival: &Arrival,
        rate: u32,
        out: &mut Vec<u8>,
    ) -> Result<Answer, Refusal> {
        if !answerable(arrival.from) {
            return Err(Refusal::Unanswerable);
        }
        if self.config.authenticated_only {
            return Err(Refusal::Unauthenticated);
        }
        self.take_source(
            source_of(arrival.from.ip(), self.config.ipv6_source_prefix),
            arrival.now_ns,
        )?;
        if !self.total.take(self.config.total_pps, arrival.now_ns)
            || !self.twamp_light.take(rate, arrival.now_ns)
        {
            return Err(Refusal::TotalRate);
        }
        let bytes = arrival.bytes;
        let session = self.session(
            SessionKey {
                from: arrival.from,
                ssid: 0,
            },
            arrival.now_ns,
        )?;
        session.last_ns = arrival.now_ns;
        let seq = session.next_seq;
        session.next_seq = session.next_seq.wrapping_add(1);
        let answer = Reflected {
            seq,
            timestamp: arrival.now,
            error: self.clock,
            ssid: 0,
            receive: arrival.received,
            sender_seq: u32::from_be_bytes(bytes[..4].try_into().expect("4 octets")),
            sender_timestamp: Timestamp(u64::from_be_bytes(
                bytes[4..12].try_into().expect("8 octets"),
            )),
            sender_error: ErrorEstimate(u16::from_be_bytes(
                bytes[12..14].try_into().expect("2 octets"),
            )),
            sender_ttl: arrival.ttl,
        };
        out.clear();
        out.resize(wire::OPEN_BASE, 0);
        wire::encode_reflected(&answer, Mode::Open, None, &mut out[..]);
        out.truncate(bytes.len().max(wire::TWAMP_LIGHT_REFLECTED));
        Ok(Answer {
            len: out.len(),
            tos: 0,
            mode: Mode::Open,
        })
    }

    /// Authenticated when a key is held and the packet's HMAC checks; else open, unless
    /// only authenticated packets are answered.
    fn mode_of(&self, bytes: &[u8]) -> Result<Mode, Refusal> {
        if let Some(key) = &self.config.key {
            if wire::decode_test(bytes, Mode::Authenticated, Some(key)).is_ok() {
                return Ok(Mode::Authenticated);
            }
            if self.config.authenticated_only {
                return Err(if bytes.len() < wire::AUTH_BASE {
                    Refusal::Unauthenticated
                } else {
                    Refusal::Malformed(WireError::Integrity)
                });
            }
        }
        Ok(Mode::Open)
    }

    fn take_source(&mut self, source: IpAddr, now_ns: u64) -> Result<(), Refusal> {
        let rate = self.config.per_source_pps;
        if !self.sources.contains_key(&source) && self.sources.len() >= self.config.max_sessions {
            self.sources.retain(|_, b| !b.idle(rate, now_ns));
            if self.sources.len() >= self.config.max_sessions {
                return Err(Refusal::Full);
            }
        }
        let bucket = self
            .sources
            .entry(source)
            .or_insert_with(|| Bucket::full(rate, now_ns));
        if bucket.take(rate, now_ns) {
            Ok(())
        } else {
            Err(Refusal::SourceRate)
        }
    }

    /// Drops the sessions not heard from for the idle time.
    fn sweep(&mut self, now_ns: u64) {
        let idle = self.config.session_idle_ns;
        let prefix = self.config.ipv6_source_prefix;
        let sessions_of = &mut self.sessions_of;
        self.sessions.retain(|key, s| {
            let source = source_of(key.from.ip(), prefix);
            let live = now_ns.saturating_sub(s.last_ns) < idle;
            if !live {
                if let Some(n) = sessions_of.get_mut(&source) {
                    *n -= 1;
                    if *n == 0 {
                        sessions_of.remove(&source);
                    }
                }
            }
            live
        });
    }

    fn session(&mut self, key: SessionKey, now_ns: u64) -> Result<&mut Session, Refusal> {
        if !self.sessions.contains_key(&key) {
            let prefix = self.config.ipv6_source_prefix;
            let source = source_of(key.from.ip(), prefix);
            let held = |r: &Reflector| r.sessions_of.get(&source).copied().unwrap_or(0);
            if held(self) >= self.config.max_sessions_per_source {
                let due = self
                    .last_source_sweep_ns
                    .map_or(true, |t| now_ns.saturating_sub(t) >= 1_000_000_000);
                if due {
                    self.last_source_sweep_ns = Some(now_ns);
                    self.sweep(now_ns);
                }
                if held(self) >= self.config.max_sessions_per_source {
                    return Err(Refusal::SourceSessions);
                }
            }
            if self.sessions.len() >= self.config.max_sessions {
                self.sweep(now_ns);
                if self.sessions.len() >= self.config.max_sessions {
                    return Err(Refusal::Full);
                }
            }
            *self.sessions_of.entry(source).or_insert(0) += 1;
        }
        Ok(self.sessions.entry(key).or_insert(Session {
            next_seq: 0,
            received: 0,
            sent: 0,
            last_ns: now_ns,
        }))
    }
}

/// Fills in the answer's TLVs in place (RFC 8972 §4): Class of Service gets the DSCP
/// and ECN the packet arrived with, Direct Measurement the session's counts, an unknown
/// type the U flag, a TLV of the wrong length or one that overruns the packet the M
/// flag, an HMAC TLV that fails the I flag. Returns the TOS to answer with: the DSCP the
/// sender asked in a Class of Service TLV, else none (0).
fn reflect_tlvs(area: &mut [u8], key: Option<&Key>, tos: u8, received: u32, sent: u32) -> u8 {
    let (found, malformed_at) = tlv::parse(area);
    let mut answer_tos = 0;
    for t in &found {
        // The sender's flags mean nothing to the reflector: each is set afresh.
        area[t.at] = 0;
        let length_ok = match t.kind {
            tlv::EXTRA_PADDING => true,
            tlv::CLASS_OF_SERVICE => t.value.len() == 4,
            tlv::DIRECT_MEASUREMENT => t.value.len() == 12,
            tlv::HMAC => t.value.len() == wire::HMAC_LEN,
            _ => {
                area[t.at] = tlv::U;
                continue;
            }
        };
        if !length_ok {
            area[t.at] = tlv::M;
            continue;
        }
        let value = &mut area[t.value.clone()];
        match t.kind {
            tlv::CLASS_OF_SERVICE => {
                let asked = value[0] >> 2;
                answer_tos = asked << 2;
                tlv::ClassOfService::fill(value, tos, true);
            }
            tlv::DIRECT_MEASUREMENT => {
                value[4..8].copy_from_slice(&received.to_be_bytes());
                value[8..12].copy_from_slice(&sent.to_be_bytes());
            }
            tlv::HMAC if key.is_none() => area[t.at] = tlv::U,
            _ => {}
        }
    }
    if let Some(at) = malformed_at {
        if area.len() - at >= tlv::HEADER {
            area[at] = tlv::M;
        }
    }
    answer_tos
}

/// Whether a test packet's HMAC TLV, if it has one and a key is held, covers its
/// sequence number and the TLVs before it (RFC 8972 §4.8).
fn test_tlvs_check(packet: &[u8], base: usize, key: Option<&Key>) -> bool {
    let Some(key) = key else { return true };
    let area = &packet[base..];
    let (found, _) = tlv::parse(area);
    found
        .iter()
        .find(|t| t.kind == tlv::HMAC)
        .map_or(true, |t| {
            key.verify(&[&packet[..4], &area[..t.at]], &area[t.value.clone()])
        })
}

/// Signs the answer's HMAC TLV (over the answer's sequence number and the TLVs before
/// it, as filled in), flagging it I when the test packet's did not check.
fn sign_tlvs(packet: &mut [u8], base: usize, key: Option<&Key>, test_signed: bool) {
    let Some(key) = key else { return };
    let (found, _) = tlv::parse(&packet[base..]);
    let Some(hmac) = found
        .iter()
        .find(|t| t.kind == tlv::HMAC && packet[base + t.at] & (tlv::U | tlv::M) == 0)
    else {
        return;
    };
    if !test_signed {
        packet[base + hmac.at] = tlv::I;
    }
    let tag = key.sign(&[&packet[..4], &packet[base..base + hmac.at]]);
    packet[base + hmac.value.start..base + hmac.value.end].copy_from_slice(&tag);
}
