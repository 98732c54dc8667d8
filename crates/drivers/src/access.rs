//! Who may connect to a server, how many connections each may hold, and the operator's
//! log of refusals (docs/security.md).
//!
//! The acceptor asks [`Gate::admit`] for every new connection. A connection counts from
//! its accept until its session ends (control, agent and iperf3 connections) or until it
//! is handed to its test (data connections, which `--max-flows` bounds per test). At the
//! cap, a connection from an address that holds fewer connections than the largest holder
//! takes the place of that holder's oldest connection still in its preface, so one host
//! that floods the server does not lock others out.

// A log message is one line: control characters a peer may have put in it (a newline
// that forges a second line, a terminal escape) written as escapes, and at most 2,000
// characters.
use ipnet::IpNet;
use linerate_proto::text::printable;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Limits on who connects and how much each holds.
#[derive(Debug, Clone, PartialEq)]
pub struct AccessPolicy {
    /// When not empty, only these ranges may connect.
    pub allow: Vec<IpNet>,
    /// These ranges may not connect (checked after `allow`).
    pub deny: Vec<IpNet>,
    /// Connections held at once (in their preface, or in a session).
    pub max_connections: usize,
    /// Connections one address may hold at once; 0: no limit of its own.
    pub max_per_ip: usize,
    /// IPv6 clients are counted by this prefix (`--ipv6-client-prefix`, 64): one host
    /// is given a /64 to draw addresses from, so counting single addresses binds nothing.
    pub v6_prefix: u8,
}

impl Default for AccessPolicy {
    fn default() -> AccessPolicy {
        AccessPolicy {
            allow: Vec::new(),
            deny: Vec::new(),
            max_connections: 10_000,
            max_per_ip: 0,
            v6_prefix: 64,
        }
    }
}

impl AccessPolicy {
    /// Whether `ip` may connect at all; `Err` names the rule that refuses it.
    pub fn permits(&self, ip: IpAddr) -> Result<(), &'static str> {
        let ip = canonical(ip);
        if !self.allow.is_empty() && !self.allow.iter().any(|net| net.contains(&ip)) {
            return Err("not in an --allow range");
        }
        if self.deny.iter().any(|net| net.contains(&ip)) {
            return Err("in a --deny range");
        }
        Ok(())
    }
}

impl AccessPolicy {
    /// The client `ip` counts as: its IPv4 address, or its IPv6 prefix.
    pub fn client(&self, ip: IpAddr) -> IpAddr {
        // One rule for every listener: the HTTP ones count clients the same way.
        linerate_http::ClientKey::of(ip, self.v6_prefix).ip()
    }
}

/// An IPv4 client seen on a dual-stack socket is its IPv4 address.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// What the gate decides for a new connection.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    /// Take it.
    Admit,
    /// Take it, and close the pending connection with this key to make room.
    AdmitEvicting(usize),
    /// Take it: a session of this client, unauthenticated or idle, was closed to make
    /// room.
    AdmitClosedSession(IpAddr),
    /// Close it at once, for this reason.
    Refuse(&'static str),
}

/// Connections held per address, shared by the acceptor and the sessions.
#[derive(Debug, Default)]
pub struct Holdings {
    per_ip: HashMap<IpAddr, usize>,
    total: usize,
}

impl Holdings {
    pub fn total(&self) -> usize {
        self.total
    }

    pub fn of(&self, ip: IpAddr) -> usize {
        self.per_ip.get(&ip).copied().unwrap_or(0)
    }

    fn add(&mut self, ip: IpAddr) {
        *self.per_ip.entry(ip).or_default() += 1;
        self.total += 1;
    }

    fn remove(&mut self, ip: IpAddr) {
        if let Some(count) = self.per_ip.get_mut(&ip) {
            *count -= 1;
            if *count == 0 {
                self.per_ip.remove(&ip);
            }
            self.total -= 1;
        }
    }
}

/// One held connection; dropping it gives its place back.
#[derive(Debug)]
pub struct Held {
    holdings: Arc<Mutex<Holdings>>,
    ip: IpAddr,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.holdings.lock().expect("holdings lock").remove(self.ip);
    }
}

/// The acceptor's gate: the policy and the shared holdings.
#[derive(Debug, Clone)]
pub struct Gate {
    pub policy: AccessPolicy,
    holdings: Arc<Mutex<Holdings>>,
    sessions: Arc<Mutex<HashMap<u64, HeldSession>>>,
    next_session: Arc<AtomicU64>,
}

/// How far a session is: the order in which sessions are closed to make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// Still proving itself: closed first.
    Unauthenticated = 0,
    /// Proved, holding no work (an agent connection between runs).
    Idle = 1,
    /// Running a test or a profile: never closed to make room.
    Busy = 2,
}

#[derive(Debug)]
struct HeldSession {
    client: IpAddr,
    stage: Arc<AtomicU8>,
    stream: std::net::TcpStream,
}

/// A session's entry among the ones the gate may close; dropping it removes the entry.
#[derive(Debug)]
pub struct SessionMark {
    sessions: Arc<Mutex<HashMap<u64, HeldSession>>>,
    id: u64,
    stage: Arc<AtomicU8>,
}

impl SessionMark {
    pub fn set(&self, stage: Stage) {
        self.stage.store(stage as u8, Ordering::Relaxed);
    }
}

impl Drop for SessionMark {
    fn drop(&mut self) {
        self.sessions
            .lock()
            .expect("sessions lock")
            .remove(&self.id);
    }
}

impl Gate {
    pub fn new(policy: AccessPolicy) -> Gate {
        Gate {
            policy,
            holdings: Arc::new(Mutex::new(Holdings::default())),
            sessions: Arc::new(Mutex::new(HashMap::new())),
            next_session: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Lists a session the gate may close to make room, through a clone of its socket;
    /// `None` when the socket cannot be cloned (the session then is never closed).
    pub fn mark_session(&self, peer: IpAddr, stream: &std::net::TcpStream) -> Option<SessionMark> {
        let stream = stream.try_clone().ok()?;
        let id = self.next_session.fetch_add(1, Ordering::Relaxed);
        let stage = Arc::new(AtomicU8::new(Stage::Unauthenticated as u8));
        self.sessions.lock().expect("sessions lock").insert(
            id,
            HeldSession {
                client: self.policy.client(peer),
                stage: stage.clone(),
                stream,
            },
        );
        Some(SessionMark {
            sessions: self.sessions.clone(),
            id,
            stage,
        })
    }

    /// Closes the session that is least along (unauthenticated, then idle) of the
    /// largest holder, if that holder holds more than `newcomer` would; its client.
    fn close_a_session(&self, newcomer: IpAddr, holdings: &Holdings) -> Option<IpAddr> {
        let mine = holdings.of(newcomer);
        let sessions = self.sessions.lock().expect("sessions lock");
        let chosen = sessions
            .values()
            .filter(|s| s.stage.load(Ordering::Relaxed) < Stage::Busy as u8)
            .filter(|s| s.client != newcomer && holdings.of(s.client) > mine + 1)
            .min_by_key(|s| {
                (
                    s.stage.load(Ordering::Relaxed),
                    std::cmp::Reverse(holdings.of(s.client)),
                )
            })?;
        let _ = chosen.stream.shutdown(std::net::Shutdown::Both);
        // Marked busy so that the next newcomer picks another while this one ends.
        chosen.stage.store(Stage::Busy as u8, Ordering::Relaxed);
        Some(chosen.client)
    }

    /// Decides for a connection from `ip`. `pending` lists the connections still in their
    /// preface, oldest first, as (key, address), for the choice of one to evict.
    pub fn admit(&self, ip: IpAddr, pending: &[(usize, IpAddr)]) -> Admission {
        let ip = self.policy.client(ip);
        if let Err(rule) = self.policy.permits(ip) {
            return Admission::Refuse(rule);
        }
        let holdings = self.holdings.lock().expect("holdings lock");
        let mine = holdings.of(ip);
        if self.policy.max_per_ip > 0 && mine >= self.policy.max_per_ip {
            return Admission::Refuse("over --max-clients-per-ip");
        }
        if holdings.total() < self.policy.max_connections {
            return Admission::Admit;
        }
        // At the cap: the largest holder with a connection in its preface gives one up,
        // if it holds more than the newcomer would.
        let largest = pending
            .iter()
            .map(|&(_, owner)| owner)
            .max_by_key(|owner| holdings.of(*owner));
        match largest {
            Some(owner) if owner != ip && holdings.of(owner) > mine + 1 => {
                let key = pending
                    .iter()
                    .find(|(_, o)| *o == owner)
                    .map(|(k, _)| *k)
                    .expect("owner came from pending");
                Admission::AdmitEvicting(key)
            }
            _ => match self.close_a_session(ip, &holdings) {
                Some(client) => Admission::AdmitClosedSession(client),
                None => Admission::Refuse("over --max-connections"),
            },
        }
    }

    /// Counts a connection from `ip` until the returned value is dropped.
    pub fn hold(&self, ip: IpAddr) -> Held {
        let ip = self.policy.client(ip);
        self.holdings.lock().expect("holdings lock").add(ip);
        Held {
            holdings: self.holdings.clone(),
            ip,
        }
    }

    pub fn held(&self) -> usize {
        self.holdings.lock().expect("holdings lock").total()
    }
}

/// Failed proofs (a key, iperf3 credentials) per client: past [`MAX_FAILURES`] within
/// [`FAILURE_WINDOW`], the client is refused at once until its window passes, so guesses
/// online come at a few a minute, and an RSA oracle gets too few queries to time.
#[derive(Debug, Default)]
pub struct Failures {
    per_client: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

/// Failures a client may have within [`FAILURE_WINDOW`].
pub const MAX_FAILURES: u32 = 10;
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);

impl Failures {
    pub fn record(&self, client: IpAddr, now: Instant) {
        let mut map = self.per_client.lock().expect("failures lock");
        if map.len() >= 100_000 {
            map.retain(|_, (since, _)| now.duration_since(*since) < FAILURE_WINDOW);
        }
        let entry = map.entry(client).or_insert((now, 0));
        if now.duration_since(entry.0) >= FAILURE_WINDOW {
            *entry = (now, 0);
        }
        entry.1 = entry.1.saturating_add(1);
    }

    /// Whether `client` is refused for its failures, and for how long yet.
    pub fn blocked(&self, client: IpAddr, now: Instant) -> Option<Duration> {
        let map = self.per_client.lock().expect("failures lock");
        let (since, count) = map.get(&client)?;
        let left = FAILURE_WINDOW.saturating_sub(now.duration_since(*since));
        (*count >= MAX_FAILURES && !left.is_zero()).then_some(left)
    }
}

/// Copy handshakes under way (a hello taken, the key not yet proven): each holds a
/// thread, a UDP socket and two descriptors for up to the handshake timeout, before the
/// client has proven anything, so they are few: at most [`COPY_HANDSHAKES_PER_CLIENT`]
/// from one client (an IPv4 address, an IPv6 prefix) and [`COPY_HANDSHAKES`] together.
/// Once the key is proven the session's place is the listener's as every other.
#[derive(Debug, Default)]
pub struct Handshakes {
    under_way: Mutex<(HashMap<IpAddr, u32>, u32)>,
}

pub const COPY_HANDSHAKES_PER_CLIENT: u32 = 8;
pub const COPY_HANDSHAKES: u32 = 256;

impl Handshakes {
    /// A place for one handshake of `client`, or the limit that refuses it.
    pub fn take(self: &Arc<Self>, client: IpAddr) -> Result<HandshakeSlot, &'static str> {
        let mut guard = self.under_way.lock().unwrap_or_else(|p| p.into_inner());
        let (per_client, total) = &mut *guard;
        if *total >= COPY_HANDSHAKES {
            return Err("copy handshakes under way at the server's limit");
        }
        let mine = per_client.entry(client).or_insert(0);
        if *mine >= COPY_HANDSHAKES_PER_CLIENT {
            return Err("copy handshakes under way at the client's limit");
        }
        *mine += 1;
        *total += 1;
        Ok(HandshakeSlot {
            handshakes: self.clone(),
            client,
            released: AtomicBool::new(false),
        })
    }

    /// Handshakes under way: (from `client`, in all).
    pub fn under_way(&self, client: IpAddr) -> (u32, u32) {
        let guard = self.under_way.lock().unwrap_or_else(|p| p.into_inner());
        (guard.0.get(&client).copied().unwrap_or(0), guard.1)
    }
}

/// One handshake's place, given back when the key is proven or the handshake ends.
#[derive(Debug)]
pub struct HandshakeSlot {
    handshakes: Arc<Handshakes>,
    client: IpAddr,
    released: AtomicBool,
}

impl HandshakeSlot {
    pub fn release(&self) {
        if self.released.swap(true, Ordering::Relaxed) {
            return;
        }
        let mut guard = self
            .handshakes
            .under_way
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let (per_client, total) = &mut *guard;
        *total = total.saturating_sub(1);
        if let Some(mine) = per_client.get_mut(&self.client) {
            *mine -= 1;
            if *mine == 0 {
                per_client.remove(&self.client);
            }
        }
    }
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        self.release();
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// "2026-11-23T08:00:00Z message"
    #[default]
    Text,
    /// One JSON object per line: time, event, peer (where one is named), message.
    Json,
}

/// The operator's log: every line through one writer, refusals limited to a few lines a
/// second (a flood of them is summed up in one line, not written line by line).
#[derive(Debug)]
pub struct OperatorLog {
    pub enabled: bool,
    pub format: LogFormat,
    refusals: Mutex<RefusalWindow>,
}

#[derive(Debug)]
struct RefusalWindow {
    started: Option<Instant>,
    written: u32,
    suppressed: u64,
}

/// Refusal lines written per second before the rest are only counted.
const REFUSAL_LINES_PER_SECOND: u32 = 5;

impl OperatorLog {
    pub fn new(enabled: bool, format: LogFormat) -> OperatorLog {
        OperatorLog {
            enabled,
            format,
            refusals: Mutex::new(RefusalWindow {
                started: None,
                written: 0,
                suppressed: 0,
            }),
        }
    }

    /// A line about the server or one test.
    pub fn line(&self, message: &str) {
        self.write("log", None, message);
    }

    /// A line this server wrote whole from its own figures (an iperf 2 histogram, bounded
    /// by the operator's bins): printable already, and not cut at a peer text's bound,
    /// which would leave it unreadable to the tools that parse it.
    pub fn own_line(&self, message: &str) {
        if message.chars().any(char::is_control) {
            return self.line(message);
        }
        self.write_whole("log", message);
    }

    /// A refused or limited client, with the reason.
    pub fn refused(&self, peer: SocketAddr, reason: &str) {
        self.refused_at(Instant::now(), peer, reason);
    }

    fn refused_at(&self, now: Instant, peer: SocketAddr, reason: &str) {
        if !self.enabled {
            return;
        }
        let summary = {
            let mut window = self.refusals.lock().expect("log lock");
            let fresh = !matches!(window.started,
                Some(t) if now.duration_since(t) < Duration::from_secs(1));
            let summary = if fresh {
                let summary = (window.suppressed > 0).then_some(window.suppressed);
                *window = RefusalWindow {
                    started: Some(now),
                    written: 0,
                    suppressed: 0,
                };
                summary
            } else {
                None
            };
            if window.written >= REFUSAL_LINES_PER_SECOND {
                window.suppressed += 1;
                return;
            }
            window.written += 1;
            summary
        };
        if let Some(count) = summary {
            self.write(
                "refused",
                None,
                &format!("{count} more refusals in the last second were not written"),
            );
        }
        self.write("refused", Some(peer), reason);
    }

    fn write(&self, event: &str, peer: Option<SocketAddr>, message: &str) {
        self.write_as(event, peer, &printable(message));
    }

    fn write_whole(&self, event: &str, message: &str) {
        self.write_as(event, None, message);
    }

    /// Writes `message`, already printable, as a line of the log's format.
    fn write_as(&self, event: &str, peer: Option<SocketAddr>, message: &str) {
        if !self.enabled {
            return;
        }
        let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
        match self.format {
            LogFormat::Text => match peer {
                Some(peer) => eprintln!("{now} refused {peer}: {message}"),
                None => eprintln!("{now} {message}"),
            },
            LogFormat::Json => {
                let mut line = serde_json::json!({
                    "time": now.to_string(),
                    "event": event,
                    "message": message,
                });
                if let Some(peer) = peer {
                    line["peer"] = peer.to_string().into();
                }
                eprintln!("{line}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_cannot_forge_log_lines_or_flood_one() {
        assert_eq!(
            printable("user 'x'\n2026-01-01T00:00:00Z refused 10.0.0.1: forged\u{1b}[2J"),
            "user 'x'\\n2026-01-01T00:00:00Z refused 10.0.0.1: forged\\u{1b}[2J"
        );
        assert_eq!(
            printable(&"é".repeat(5000)).chars().count(),
            linerate_proto::text::MOST_PEER_CHARS + 3
        );
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn allow_and_deny_ranges() {
        let policy = AccessPolicy {
            allow: vec!["10.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()],
            deny: vec!["10.9.0.0/16".parse().unwrap()],
            ..AccessPolicy::default()
        };
        assert_eq!(policy.permits(ip("10.1.2.3")), Ok(()));
        assert_eq!(policy.permits(ip("::ffff:10.1.2.3")), Ok(()));
        assert_eq!(policy.permits(ip("10.9.1.1")), Err("in a --deny range"));
        assert_eq!(
            policy.permits(ip("192.0.2.1")),
            Err("not in an --allow range")
        );
        assert_eq!(policy.permits(ip("::1")), Ok(()));
    }

    #[test]
    fn the_cap_evicts_the_largest_holder_not_the_newcomer() {
        let gate = Gate::new(AccessPolicy {
            max_connections: 3,
            max_per_ip: 0,
            ..AccessPolicy::default()
        });
        let flooder = ip("127.0.0.1");
        let held: Vec<Held> = (0..3).map(|_| gate.hold(flooder)).collect();
        let pending = [(7, flooder), (8, flooder), (9, flooder)];
        // The flooder itself is refused at the cap ...
        assert_eq!(
            gate.admit(flooder, &pending),
            Admission::Refuse("over --max-connections")
        );
        // ... another host takes the place of the flooder's oldest pending connection.
        assert_eq!(
            gate.admit(ip("127.0.0.2"), &pending),
            Admission::AdmitEvicting(7)
        );
        // With nothing pending to give up, the newcomer is refused.
        assert_eq!(
            gate.admit(ip("127.0.0.2"), &[]),
            Admission::Refuse("over --max-connections")
        );
        drop(held);
        assert_eq!(gate.held(), 0);
        assert_eq!(gate.admit(flooder, &[]), Admission::Admit);
    }

    #[test]
    fn ipv6_clients_count_by_their_prefix() {
        let gate = Gate::new(AccessPolicy {
            max_per_ip: 2,
            ..AccessPolicy::default()
        });
        let _held = [
            gate.hold(ip("2001:db8:1:2::1")),
            gate.hold(ip("2001:db8:1:2::2")),
        ];
        // A third address of the same /64 is the same client; another /64 is not.
        assert_eq!(
            gate.admit(ip("2001:db8:1:2:ffff::9"), &[]),
            Admission::Refuse("over --max-clients-per-ip")
        );
        assert_eq!(gate.admit(ip("2001:db8:1:3::1"), &[]), Admission::Admit);
        let exact = AccessPolicy {
            v6_prefix: 128,
            ..AccessPolicy::default()
        };
        assert_eq!(exact.client(ip("2001:db8::5")), ip("2001:db8::5"));
        assert_eq!(exact.client(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
    }

    #[test]
    fn at_the_cap_an_idle_or_unproven_session_makes_room_never_a_busy_one() {
        let gate = Gate::new(AccessPolicy {
            max_connections: 3,
            ..AccessPolicy::default()
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let flooder = ip("127.0.0.9");
        let mut clients = Vec::new();
        let mut marks = Vec::new();
        let _held: Vec<Held> = (0..3).map(|_| gate.hold(flooder)).collect();
        for stage in [Stage::Busy, Stage::Idle, Stage::Unauthenticated] {
            clients.push(std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap());
            let (served, _) = listener.accept().unwrap();
            let mark = gate.mark_session(flooder, &served).unwrap();
            mark.set(stage);
            marks.push((mark, served));
        }
        let newcomer = ip("127.0.0.2");
        // The unauthenticated one goes first, then the idle one, never the busy one.
        for expected_closed in [2, 1] {
            assert_eq!(
                gate.admit(newcomer, &[]),
                Admission::AdmitClosedSession(flooder)
            );
            let mut byte = [0u8; 1];
            use std::io::Read;
            assert_eq!(marks[expected_closed].1.read(&mut byte).unwrap(), 0);
        }
        assert_eq!(
            gate.admit(newcomer, &[]),
            Admission::Refuse("over --max-connections")
        );
    }

    #[test]
    fn failures_past_the_limit_block_a_client_for_the_rest_of_its_window() {
        let failures = Failures::default();
        let (client, t0) = (ip("192.0.2.5"), Instant::now());
        for _ in 0..MAX_FAILURES - 1 {
            failures.record(client, t0);
        }
        assert_eq!(failures.blocked(client, t0), None);
        failures.record(client, t0);
        assert_eq!(
            failures.blocked(client, t0 + Duration::from_secs(20)),
            Some(Duration::from_secs(40))
        );
        assert_eq!(failures.blocked(ip("192.0.2.6"), t0), None);
        assert_eq!(failures.blocked(client, t0 + FAILURE_WINDOW), None);
        failures.record(client, t0 + FAILURE_WINDOW);
        assert_eq!(failures.blocked(client, t0 + FAILURE_WINDOW), None);
    }

    #[test]
    fn per_address_limit() {
        let gate = Gate::new(AccessPolicy {
            max_per_ip: 2,
            ..AccessPolicy::default()
        });
        let a = ip("192.0.2.1");
        let _held = [gate.hold(a), gate.hold(a)];
        assert_eq!(
            gate.admit(a, &[]),
            Admission::Refuse("over --max-clients-per-ip")
        );
        assert_eq!(gate.admit(ip("192.0.2.2"), &[]), Admission::Admit);
    }

    #[test]
    fn refusals_are_limited_per_second() {
        let log = OperatorLog::new(true, LogFormat::Text);
        let t0 = Instant::now();
        let peer: SocketAddr = "192.0.2.1:5".parse().unwrap();
        for _ in 0..1000 {
            log.refused_at(t0, peer, "test");
        }
        {
            let window = log.refusals.lock().unwrap();
            assert_eq!(window.written, REFUSAL_LINES_PER_SECOND);
            assert_eq!(
                window.suppressed,
                1000 - u64::from(REFUSAL_LINES_PER_SECOND)
            );
        }
        log.refused_at(t0 + Duration::from_secs(1), peer, "test");
        let window = log.refusals.lock().unwrap();
        assert_eq!((window.written, window.suppressed), (1, 0));
    }
}

/// The rates the running tests of each client address asked for, against
/// `--max-rate-per-ip`.
#[derive(Debug, Default)]
pub struct RateBook {
    per_ip: Mutex<HashMap<IpAddr, f64>>,
}

/// One test's share of its address's rate; dropping it gives the share back.
#[derive(Debug)]
pub struct RateShare {
    book: Arc<RateBook>,
    ip: IpAddr,
    rate: f64,
}

impl RateBook {
    /// Reserves `rate` bits/s for a test from `ip`, if its address stays within `most`.
    pub fn reserve(
        book: &Arc<RateBook>,
        ip: IpAddr,
        rate: f64,
        most: u64,
    ) -> Result<RateShare, String> {
        let ip = canonical(ip);
        let mut per_ip = book.per_ip.lock().expect("rate book lock");
        let running = per_ip.get(&ip).copied().unwrap_or(0.0);
        if running + rate > most as f64 {
            return Err(format!(
                "this address's tests would ask for {:.0} bit/s together, over --max-rate-per-ip {most}",
                running + rate
            ));
        }
        *per_ip.entry(ip).or_default() += rate;
        Ok(RateShare {
            book: book.clone(),
            ip,
            rate,
        })
    }
}

impl RateShare {
    /// The bits per second granted.
    pub fn rate(&self) -> f64 {
        self.rate
    }
}

impl Drop for RateShare {
    fn drop(&mut self) {
        let mut per_ip = self.book.per_ip.lock().expect("rate book lock");
        if let Some(running) = per_ip.get_mut(&self.ip) {
            *running -= self.rate;
            if *running <= 0.5 {
                per_ip.remove(&self.ip);
            }
        }
    }
}

/// Whether an interval's figures break a test's rate limit: what moved, both ways, over
/// the limit by more than a quarter plus a burst (100 ms of the rate and 64 KiB). Pacing
/// lets a flow run ahead briefly, and on a busy host a starved sender catches up and a
/// starved receiver reads a backlog at once; a short interval (a test's last) holds such
/// a burst in little time. 6.28 Mbit/s in an interval of a test paced at 5 once ended it
/// beside two busy loops.
pub fn over_rate(moved_bytes: u64, seconds: f64, most: u64) -> bool {
    const ALLOWANCE: f64 = 1.25;
    const BURST_SECONDS: f64 = 0.1;
    const BURST_BYTES: f64 = 64.0 * 1024.0;
    let most_bytes_per_s = most as f64 / 8.0;
    let allowed = most_bytes_per_s * (seconds.max(0.0) * ALLOWANCE + BURST_SECONDS) + BURST_BYTES;
    moved_bytes as f64 > allowed
}

#[cfg(test)]
mod rate_tests {
    use super::*;

    #[test]
    fn an_address_shares_its_rate_among_its_tests() {
        let book = Arc::new(RateBook::default());
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let first = RateBook::reserve(&book, a, 200e6, 300_000_000).unwrap();
        assert!(RateBook::reserve(&book, a, 200e6, 300_000_000).is_err());
        // Another address has its own share.
        let _other =
            RateBook::reserve(&book, "192.0.2.2".parse().unwrap(), 200e6, 300_000_000).unwrap();
        drop(first);
        assert!(RateBook::reserve(&book, a, 200e6, 300_000_000).is_ok());
    }

    #[test]
    fn an_interval_over_the_limit_by_more_than_the_allowance() {
        // 100 Mbit/s for 1 s: 12.5 MB; a quarter over and a burst of 100 ms allowed.
        assert!(!over_rate(110_000_000 / 8, 1.0, 100_000_000));
        assert!(!over_rate(120_000_000 / 8, 1.0, 100_000_000));
        assert!(over_rate(150_000_000 / 8, 1.0, 100_000_000));
        // A last interval of 50 ms that holds a catch-up burst: not over.
        assert!(!over_rate(40_000, 0.05, 5_000_000));
        // A relay's rewritten rate, 200 Mbit/s against 5: over.
        assert!(over_rate(200_000_000 / 8, 1.0, 5_000_000));
    }
}
