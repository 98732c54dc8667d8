//! One profile thread: the group's transactions in order, on the group's host (the
//! runner) or as their mirror image on the peer (the mirror).
//!
//! A timed transaction ends on the runner at its deadline; the runner then tells each
//! mirror how many iterations it completed, and the mirror stops at the same count, so
//! the two sides leave every transaction together and a message is never read by the
//! wrong one. A mirror that reads datagrams stops waiting for lost ones once the count is
//! known and nothing has come for [`UDP_IDLE`].

use super::conn::{self, Conn, OpError};
use super::files;
use super::rendezvous::{flow, Rendezvous};
use linerate_model::clock::UnixTime;
use linerate_profile::{Action, Endpoint, Group, Protocol, Repeat, Size};
use linerate_proto::preface::data_preface;
use linerate_proto::Token;
use linerate_report::latency::LatencyHistogram;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a mirror waits for a datagram after the runner's count is known.
const UDP_IDLE: Duration = Duration::from_secs(1);
/// How long a mirror whose connection closed waits for the runner's count to arrive.
const COUNT_GRACE: Duration = Duration::from_secs(2);
/// Latency samples a thread keeps before adding them to the group's histogram.
const BATCH: usize = 64;
/// The largest buffer a thread allocates; longer messages move in chunks of it.
const MAX_BUFFER: u64 = 256 * 1024;

/// The group host's way to one peer.
pub(crate) struct RemoteLink {
    pub addr: SocketAddr,
    pub udp: SocketAddr,
    pub token: Token,
    /// The certificate the peer's `ssl` connections present (SHA-256, hex).
    pub fingerprint: Option<String>,
    /// Where the group host hears connections this peer dials back (its accepts).
    pub back: Option<Arc<Rendezvous>>,
    /// The agent connection to the peer, for transaction counts.
    pub control: super::link::LinkWriter,
}

/// How a thread reaches its peers.
pub(crate) enum Side {
    Runner {
        /// By the endpoint's `remote` (`None`: the group host's own server).
        remotes: HashMap<Option<String>, Arc<RemoteLink>>,
    },
    Mirror {
        rendezvous: Arc<Rendezvous>,
        /// The group host's listener and UDP rendezvous, for the mirror's connects, and
        /// the certificate its `ssl` accepts present.
        dial_back: Option<(SocketAddr, SocketAddr, Token, Option<String>)>,
        /// Iterations each runner thread completed per transaction (`u64::MAX`: not yet
        /// known), `[thread * transactions + transaction]`.
        counts: Arc<Vec<AtomicU64>>,
    },
}

/// Latency histograms of one group, added to by its threads in batches. Each is made
/// when its first sample comes (about 230 KB): a `nop` or a transaction never run costs
/// nothing.
pub(crate) struct GroupLatency {
    /// `[transaction]`: time per iteration; `[transaction][op]`: time per execution.
    pub transactions: Vec<Mutex<Option<LatencyHistogram>>>,
    pub ops: Vec<Vec<Mutex<Option<LatencyHistogram>>>>,
}

impl GroupLatency {
    pub fn new(group: &Group) -> GroupLatency {
        GroupLatency {
            transactions: group
                .transactions
                .iter()
                .map(|_| Mutex::default())
                .collect(),
            ops: group
                .transactions
                .iter()
                .map(|t| t.ops.iter().map(|_| Mutex::default()).collect())
                .collect(),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct OpCounts {
    pub count: u64,
    pub bytes: u64,
    pub errors: u64,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct TxnCounts {
    pub iterations: u64,
    pub first_start: Option<Instant>,
    pub last_end: Option<Instant>,
    pub ops: Vec<OpCounts>,
}

/// What one thread did.
#[derive(Debug, Default)]
pub(crate) struct ThreadOutcome {
    pub transactions: Vec<TxnCounts>,
    /// Bytes this thread's reads received.
    pub received: u64,
    pub errors: u64,
    pub started: Option<Instant>,
    /// `started` as Unix time, read at that moment (the wall clock and the monotonic one
    /// may run at different rates, so one is never derived from the other later).
    pub started_unix_ns: u64,
    pub ended: Option<Instant>,
    pub failure: Option<String>,
}

pub(crate) struct Thread<'a> {
    pub index: u32,
    pub group: &'a Group,
    pub side: &'a Side,
    pub stop: &'a AtomicBool,
    /// No thread runs past this, whatever its transactions say.
    pub limit: Instant,
    pub latency: Option<&'a GroupLatency>,
}

/// Samples waiting to be added to the group's histograms.
struct Batches {
    pending: HashMap<(usize, Option<usize>), Vec<u64>>,
}

impl Batches {
    fn record(&mut self, latency: Option<&GroupLatency>, key: (usize, Option<usize>), ns: u64) {
        let Some(latency) = latency else {
            return;
        };
        let samples = self.pending.entry(key).or_default();
        samples.push(ns);
        if samples.len() >= BATCH {
            flush(latency, key, samples);
        }
    }

    fn flush_all(&mut self, latency: Option<&GroupLatency>) {
        if let Some(latency) = latency {
            for (key, samples) in &mut self.pending {
                flush(latency, *key, samples);
            }
        }
    }
}

fn flush(latency: &GroupLatency, key: (usize, Option<usize>), samples: &mut Vec<u64>) {
    let slot = match key.1 {
        None => &latency.transactions[key.0],
        Some(op) => &latency.ops[key.0][op],
    };
    let mut slot = slot.lock().expect("latency lock");
    let histogram = slot.get_or_insert_with(LatencyHistogram::new);
    for ns in samples.drain(..) {
        histogram.record(ns);
    }
}

struct Buffers {
    out: Vec<u8>,
    input: Vec<u8>,
}

fn buffers(group: &Group) -> Buffers {
    let largest = group
        .transactions
        .iter()
        .flat_map(|t| &t.ops)
        .filter_map(|op| match &op.action {
            // Files move in pieces of a full buffer (through TLS, or into the reader).
            Action::Sendfile(_) | Action::ReceiveFiles(_) => Some(MAX_BUFFER),
            action => action.transfer().map(|(t, _)| t.size.max()),
        })
        .max()
        .unwrap_or(0)
        .clamp(1, MAX_BUFFER) as usize;
    Buffers {
        // A recognisable pattern rather than zeros, which links might compress.
        out: (0..largest).map(|i| (i % 251) as u8).collect(),
        input: vec![0; largest],
    }
}

/// A random message size in `min..=max`, from a per-thread xorshift.
fn draw(state: &mut u64, min: u64, max: u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    min + *state % (max - min + 1)
}

impl Thread<'_> {
    pub fn run(&self) -> ThreadOutcome {
        let mut outcome = ThreadOutcome {
            transactions: self
                .group
                .transactions
                .iter()
                .map(|t| TxnCounts {
                    ops: vec![OpCounts::default(); t.ops.len()],
                    ..TxnCounts::default()
                })
                .collect(),
            started: Some(Instant::now()),
            started_unix_ns: UnixTime::now().nanos(),
            ..ThreadOutcome::default()
        };
        let mut state = State {
            conns: HashMap::new(),
            ordinals: HashMap::new(),
            buffers: buffers(self.group),
            random: 0x9e37_79b9_7f4a_7c15
                ^ (u64::from(self.index) + 1).wrapping_mul(0x2545_f491_4f6c_dd1d),
            batches: Batches {
                pending: HashMap::new(),
            },
        };
        for ti in 0..self.group.transactions.len() {
            if let Err(failure) = self.transaction(ti, &mut state, &mut outcome) {
                outcome.failure = Some(failure);
                break;
            }
        }
        state.batches.flush_all(self.latency);
        for (_, conn) in state.conns.drain() {
            conn.close();
        }
        outcome.ended = Some(Instant::now());
        outcome
    }

    fn mirror_count(&self, ti: usize) -> Option<u64> {
        match self.side {
            Side::Mirror { counts, .. } => {
                let slot = self.index as usize * self.group.transactions.len() + ti;
                let n = counts.get(slot)?.load(Ordering::Acquire);
                (n != u64::MAX).then_some(n)
            }
            Side::Runner { .. } => None,
        }
    }

    fn transaction(
        &self,
        ti: usize,
        state: &mut State,
        outcome: &mut ThreadOutcome,
    ) -> Result<(), String> {
        let txn = &self.group.transactions[ti];
        let mirror = matches!(self.side, Side::Mirror { .. });
        if mirror && txn.ops.iter().all(|op| op.action == Action::Nop) {
            return Ok(());
        }
        let start = Instant::now();
        outcome.transactions[ti].first_start = Some(start);
        let deadline = match txn.repeat {
            Repeat::Duration(s) if !mirror => Some(start + Duration::from_secs_f64(s)),
            _ => None,
        };
        let fixed = match txn.repeat {
            Repeat::Iterations(n) => Some(n),
            Repeat::Duration(_) => None,
        };
        let mut done = 0u64;
        let result = loop {
            let bound = if mirror {
                fixed.or_else(|| self.mirror_count(ti))
            } else {
                fixed
            };
            if bound.is_some_and(|n| done >= n) || deadline.is_some_and(|d| Instant::now() >= d) {
                break Ok(());
            }
            if self.stop.load(Ordering::Relaxed) || Instant::now() >= self.limit {
                break Err("stopped before the end of its transactions".to_string());
            }
            if let (Some(rate), false) = (txn.rate, mirror) {
                let at = start + Duration::from_secs_f64(done as f64 / rate);
                let mut give_up = || {
                    self.stop.load(Ordering::Relaxed)
                        || deadline.is_some_and(|d| Instant::now() >= d)
                };
                if !conn::pause_until(at, false, &mut give_up) {
                    continue;
                }
            }
            let began = Instant::now();
            match self.iteration(ti, done, deadline, state, outcome) {
                Ok(()) => {
                    done += 1;
                    state.batches.record(
                        self.latency,
                        (ti, None),
                        began.elapsed().as_nanos() as u64,
                    );
                }
                // The runner's deadline, or the mirror reached the runner's count.
                Err(OpError::GaveUp)
                    if deadline.is_some() || (mirror && self.mirror_count(ti).is_some()) =>
                {
                    break Ok(())
                }
                Err(e) if mirror => {
                    // The runner may have ended the transaction and closed the connection
                    // before its count reached us: wait for the count a little.
                    let waited = Instant::now();
                    while self.mirror_count(ti).is_none()
                        && waited.elapsed() < COUNT_GRACE
                        && !self.stop.load(Ordering::Relaxed)
                    {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    match fixed.or_else(|| self.mirror_count(ti)) {
                        Some(n) if done >= n || self.mirror_count(ti).is_some() => break Ok(()),
                        _ => break Err(format!("transaction {}: {e}", ti + 1)),
                    }
                }
                Err(e) => break Err(format!("transaction {}: {e}", ti + 1)),
            }
        };
        let counts = &mut outcome.transactions[ti];
        counts.iterations += done;
        counts.last_end = Some(Instant::now());
        // The mirror keeps step while the transaction moves data or opens connections
        // (each iteration's connect is an accept there): it stops at this count.
        let mirrored = txn
            .ops
            .iter()
            .any(|op| op.action.sends().is_some() || matches!(op.action, Action::Connect(_)));
        if !mirror && mirrored {
            self.report_count(ti, done);
        }
        result
    }

    /// Tells every peer how many iterations this thread completed.
    fn report_count(&self, ti: usize, iterations: u64) {
        if let Side::Runner { remotes } = self.side {
            let message = linerate_proto::agent::AgentRequest::TransactionDone {
                thread: self.index,
                transaction: ti as u32,
                iterations,
            };
            for link in remotes.values() {
                let _ = link.control.send(&message);
            }
        }
    }

    fn iteration(
        &self,
        ti: usize,
        done: u64,
        deadline: Option<Instant>,
        state: &mut State,
        outcome: &mut ThreadOutcome,
    ) -> Result<(), OpError> {
        let txn = &self.group.transactions[ti];
        for (oi, op) in txn.ops.iter().enumerate() {
            let began = Instant::now();
            let mut moved = 0u64;
            let at = (ti, oi, done);
            let result = self.op(at, &op.conn, &op.action, deadline, state, &mut moved);
            let counts = &mut outcome.transactions[ti].ops[oi];
            counts.bytes += moved;
            if op.action.sends() == Some(false) {
                outcome.received += moved;
            }
            match result {
                Ok(()) => {
                    counts.count += 1;
                    state.batches.record(
                        self.latency,
                        (ti, Some(oi)),
                        began.elapsed().as_nanos() as u64,
                    );
                }
                Err(OpError::GaveUp) => return Err(OpError::GaveUp),
                Err(e) => {
                    counts.errors += 1;
                    outcome.errors += 1;
                    if !op.action.canfail() {
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }

    /// Runs one operation; `at` is its transaction, its place there and the iteration.
    // Long: one match over a profile's operation kinds.
    fn op(
        &self,
        at: (usize, usize, u64),
        name: &Option<String>,
        action: &Action,
        deadline: Option<Instant>,
        state: &mut State,
        moved: &mut u64,
    ) -> Result<(), OpError> {
        let (ti, oi, done) = at;
        let mirror_bound = || match self.group.transactions[ti].repeat {
            Repeat::Iterations(n) => Some(n).filter(|_| self.mirror_count(ti).is_some()),
            Repeat::Duration(_) => self.mirror_count(ti),
        };
        let idle_since = std::cell::Cell::new(Instant::now());
        let udp = state.conns.get(name).is_some_and(Conn::is_udp);
        let mut give_up = || {
            if self.stop.load(Ordering::Relaxed) || Instant::now() >= self.limit {
                return true;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return true;
            }
            match mirror_bound() {
                Some(n) if done >= n => true,
                Some(_) if udp => idle_since.get().elapsed() >= UDP_IDLE,
                _ => false,
            }
        };
        match action {
            Action::Connect(endpoint) | Action::Accept(endpoint) => {
                let dial = matches!(action, Action::Connect(_));
                let conn = self
                    .open(dial, endpoint, state, &mut give_up)
                    .map_err(OpError::Io)?;
                if let Some(old) = state.conns.insert(name.clone(), conn) {
                    old.close();
                }
                Ok(())
            }
            Action::Disconnect => {
                if let Some(conn) = state.conns.remove(name) {
                    conn.close();
                }
                Ok(())
            }
            Action::Think(think) => {
                let at = Instant::now() + Duration::from_secs_f64(think.seconds);
                if conn::pause_until(at, think.busy, &mut give_up) {
                    Ok(())
                } else {
                    Err(OpError::GaveUp)
                }
            }
            Action::Nop => Ok(()),
            Action::Sendfile(f) | Action::ReceiveFiles(f) => {
                let sending = matches!(action, Action::Sendfile(_));
                let conn = open_conn(&mut state.conns, name, action)?;
                let seed = files::seed(self.index, ti, oi);
                for k in 0..f.count {
                    let execution = done.wrapping_mul(f.count).wrapping_add(k);
                    let before = *moved;
                    if sending {
                        let buf = &mut state.buffers.input;
                        files::send(conn, f, seed, execution, buf, moved, &mut give_up)?;
                    } else {
                        let bytes = files::bytes_of(f, seed, execution);
                        let buf = &mut state.buffers.input;
                        recv_message(conn, buf, bytes, true, moved, &mut give_up)?;
                    }
                    if *moved > before {
                        idle_since.set(Instant::now());
                    }
                }
                Ok(())
            }
            Action::Write(t) | Action::Sendto(t) | Action::Read(t) | Action::Recv(t) => {
                let sending = matches!(action, Action::Write(_) | Action::Sendto(_));
                let conn = open_conn(&mut state.conns, name, action)?;
                let start = Instant::now();
                for k in 0..t.count {
                    if let Some(rate) = t.rate {
                        let at = start + Duration::from_secs_f64(k as f64 / rate);
                        if !conn::pause_until(at, false, &mut give_up) {
                            return Err(OpError::GaveUp);
                        }
                    }
                    let before = *moved;
                    if sending {
                        let size = match t.size {
                            Size::Fixed(_) => t.fixed_size_of(k).unwrap_or(0),
                            Size::Random { min, max } => draw(&mut state.random, min, max),
                        };
                        send_message(conn, &state.buffers.out, size, moved, &mut give_up)?;
                    } else {
                        let (size, exact) = match t.size {
                            Size::Fixed(_) => (t.fixed_size_of(k).unwrap_or(0), true),
                            Size::Random { max, .. } => (max, false),
                        };
                        recv_message(
                            conn,
                            &mut state.buffers.input,
                            size,
                            exact,
                            moved,
                            &mut give_up,
                        )?;
                    }
                    if *moved > before {
                        idle_since.set(Instant::now());
                    }
                }
                Ok(())
            }
        }
    }

    /// Opens a connection: dials the peer (`dial`) or takes the one the peer dialed.
    fn open(
        &self,
        dial: bool,
        endpoint: &Endpoint,
        state: &mut State,
        give_up: &mut dyn FnMut() -> bool,
    ) -> std::io::Result<Conn> {
        let remote_key = match self.side {
            Side::Runner { .. } => endpoint.remote.clone(),
            Side::Mirror { .. } => None,
        };
        let ordinal = state.ordinals.entry(remote_key.clone()).or_insert(0);
        let this = flow(self.index, *ordinal);
        *ordinal = ordinal.wrapping_add(1);
        let (addr, udp, token, fingerprint, incoming) = match self.side {
            Side::Runner { remotes } => {
                let link = remotes.get(&remote_key).ok_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::NotFound, "no link to the peer")
                })?;
                (
                    link.addr,
                    link.udp,
                    link.token,
                    link.fingerprint.clone(),
                    link.back.clone(),
                )
            }
            Side::Mirror {
                rendezvous,
                dial_back,
                ..
            } => match dial_back {
                Some((addr, udp, token, fingerprint)) => (
                    *addr,
                    *udp,
                    *token,
                    fingerprint.clone(),
                    Some(rendezvous.clone()),
                ),
                None => (
                    rendezvous_addr(),
                    rendezvous_addr(),
                    rendezvous.token,
                    None,
                    Some(rendezvous.clone()),
                ),
            },
        };
        let conn = if dial {
            let preface = data_preface(token, this);
            match endpoint.protocol {
                Protocol::Tcp => conn::dial_tcp(addr, endpoint, &preface)?,
                Protocol::Udp => conn::dial_udp(udp, endpoint, &preface, this, give_up)?,
                Protocol::Ssl => {
                    let Conn::Tcp(stream) = conn::dial_tcp(addr, endpoint, &preface)? else {
                        unreachable!("dial_tcp gives a TCP connection")
                    };
                    let tls = crate::secure::profile_connect(stream, endpoint, fingerprint)
                        .map_err(std::io::Error::other)?;
                    Conn::tls(tls)?
                }
            }
        } else {
            let rendezvous = incoming.ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::NotFound, "no listener for accepts")
            })?;
            let conn = rendezvous.take(this, give_up)?;
            match conn {
                Conn::Tcp(stream) => {
                    conn::tcp_options(&socket2::SockRef::from(&stream), endpoint)?;
                    if endpoint.protocol == Protocol::Ssl {
                        let tls =
                            crate::secure::profile_accept(stream).map_err(std::io::Error::other)?;
                        Conn::tls(tls)?
                    } else {
                        Conn::Tcp(stream)
                    }
                }
                Conn::Udp(socket) => {
                    // The answers of a UDP exchange carry the marks too.
                    if let Some(marks) = endpoint.marks {
                        linerate_engine::sys::set_marks(&socket, marks)?;
                    }
                    Conn::Udp(socket)
                }
                other => other,
            }
        };
        Ok(conn)
    }
}

fn rendezvous_addr() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 0))
}

/// One message of `size` bytes, in chunks of the buffer.
/// The connection an operation uses, which a connect or accept before it opened.
fn open_conn<'a>(
    conns: &'a mut HashMap<Option<String>, Conn>,
    name: &Option<String>,
    action: &Action,
) -> Result<&'a mut Conn, OpError> {
    conns.get_mut(name).ok_or_else(|| {
        OpError::Io(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            format!(
                "{} on {} with no open connection",
                action.name(),
                name.as_deref().unwrap_or("the anonymous connection")
            ),
        ))
    })
}

fn send_message(
    conn: &mut Conn,
    buf: &[u8],
    size: u64,
    moved: &mut u64,
    give_up: &mut dyn FnMut() -> bool,
) -> Result<(), OpError> {
    let mut left = size;
    while left > 0 {
        let chunk = left.min(buf.len() as u64) as usize;
        conn.send(&buf[..chunk], moved, give_up)?;
        left -= chunk as u64;
        if matches!(conn, Conn::Udp(_)) {
            break;
        }
    }
    Ok(())
}

fn recv_message(
    conn: &mut Conn,
    buf: &mut [u8],
    size: u64,
    exact: bool,
    moved: &mut u64,
    give_up: &mut dyn FnMut() -> bool,
) -> Result<(), OpError> {
    conn.recv(
        buf,
        usize::try_from(size).unwrap_or(usize::MAX),
        exact,
        moved,
        give_up,
    )
}

struct State {
    conns: HashMap<Option<String>, Conn>,
    ordinals: HashMap<Option<String>, u32>,
    buffers: Buffers,
    random: u64,
    batches: Batches,
}
