//! A group on its host (its threads and its links to the peers that mirror it), and the
//! mirror of a group on a peer.

use super::exec::{GroupLatency, RemoteLink, Side, Thread, ThreadOutcome};
use super::link::Link;
use super::rendezvous::Rendezvous;
use linerate_profile::{Action, Group, Op};
use linerate_proto::agent::{
    AgentReply, AgentRequest, DialBack, GroupPart, MirrorFigures, MirrorSpec, Seconds,
};
use linerate_proto::auth::Key;
use linerate_proto::Token;
use linerate_report::profile::{GroupResult, OpFigures, ThreadFigures, TransactionFigures};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A profile thread's stack: its frames are shallow and thousands may run.
const STACK: usize = 256 * 1024;
/// How long a peer may take to answer a mirror request or report its figures.
const PEER_WAIT: Duration = Duration::from_secs(15);

/// The remotes a group's connect and accept operations name, in order of first use.
pub(crate) fn remotes_of(group: &Group) -> Vec<Option<String>> {
    let mut out: Vec<Option<String>> = Vec::new();
    for op in group.transactions.iter().flat_map(|t| &t.ops) {
        if let Action::Connect(e) | Action::Accept(e) = &op.action {
            if !out.contains(&e.remote) {
                out.push(e.remote.clone());
            }
        }
    }
    out
}

/// The group as the peer `remote` runs it: every operation on a connection to that peer
/// mirrored, every other one a `nop` (so positions stay the same).
pub(crate) fn mirror_of(group: &Group, remote: &Option<String>) -> Group {
    let mut owner: HashMap<Option<String>, Option<String>> = HashMap::new();
    let mut mirrored = group.clone();
    for txn in &mut mirrored.transactions {
        for op in &mut txn.ops {
            let ours = match &op.action {
                Action::Connect(e) | Action::Accept(e) => {
                    owner.insert(op.conn.clone(), e.remote.clone());
                    e.remote == *remote
                }
                Action::Think(_) | Action::Nop => false,
                _ => owner.get(&op.conn) == Some(remote),
            };
            *op = if ours {
                Op {
                    conn: op.conn.clone(),
                    action: op.action.mirror(),
                }
            } else {
                Op {
                    conn: None,
                    action: Action::Nop,
                }
            };
        }
    }
    mirrored
}

fn has_accepts_to(group: &Group, remote: &Option<String>) -> bool {
    group
        .transactions
        .iter()
        .flat_map(|t| &t.ops)
        .any(|op| matches!(&op.action, Action::Accept(e) if e.remote == *remote))
}

/// A histogram's summary; one that never got a sample has none.
fn summary(
    slot: &std::sync::Mutex<Option<linerate_report::latency::LatencyHistogram>>,
    with_buckets: bool,
) -> linerate_report::latency::LatencySummary {
    slot.lock()
        .expect("latency lock")
        .as_ref()
        .map(|h| h.summary(with_buckets))
        .unwrap_or_default()
}

/// Sleeps until `start`. Threads sleep rather than spin: on a machine with fewer CPUs
/// than waiting threads, spinners crowd out the threads whose time has come, which then
/// wait for the next scheduler tick. Prompt wake-ups come from [`WakeLatencyHold`].
/// The sleep is cut into slices that check `stop`, so a run stopped before its start
/// (its connection closed) leaves no thread asleep.
pub(crate) fn wait_for(start: Instant, stop: &AtomicBool) {
    loop {
        let left = start.saturating_duration_since(Instant::now());
        if left.is_zero() || stop.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        std::thread::sleep(left.min(super::SLICE));
    }
}

/// Keeps this machine's CPUs out of their idle states while it lives, through a PM QoS
/// request of 0 µs on `/dev/cpu_dma_latency` (dropped when the file closes). An idle CPU,
/// a halted virtual CPU above all, can take milliseconds to wake for a timer, and that
/// wait would be start skew. Held only around the start, so the figures of the run are
/// taken with the CPUs as configured. Needs root; without it nothing is held.
pub(crate) struct WakeLatencyHold(Option<std::fs::File>);

impl WakeLatencyHold {
    pub(crate) fn acquire() -> WakeLatencyHold {
        use std::io::Write;
        let request = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/cpu_dma_latency")
            .and_then(|mut file| file.write_all(&0i32.to_ne_bytes()).map(|()| file));
        WakeLatencyHold(request.ok())
    }

    pub(crate) fn held(&self) -> bool {
        self.0.is_some()
    }
}

/// A group ready to start: every peer runs its mirror.
pub(crate) struct PreparedGroup {
    pub part: GroupPart,
    side: Arc<Side>,
    links: Vec<(String, Link)>,
    stop: Arc<AtomicBool>,
}

/// Why a group could not be prepared.
#[derive(Debug)]
pub(crate) enum PrepareError {
    /// A peer could not be dialed, was not one this agent may dial, or did not run the
    /// mirror. What went wrong stays in `detail`, for this server's log: the requester
    /// hears [`PrepareError::public`], the same whatever the cause, so that an agent
    /// cannot be used to tell open ports from closed ones (docs/security.md).
    Peer { label: String, detail: String },
    /// A failure on this host.
    Local(io::Error),
}

impl PrepareError {
    /// What the requester is told.
    pub(crate) fn public(&self) -> String {
        match self {
            PrepareError::Peer { label, .. } => format!(
                "peer {label} is not a linerate agent this agent may dial (one that holds this agent's key; without --key, only the requesting host)"
            ),
            PrepareError::Local(e) => e.to_string(),
        }
    }

    /// The peer (as the request named it) that could not be used, when that is the cause.
    pub(crate) fn peer(&self) -> Option<&str> {
        match self {
            PrepareError::Peer { label, .. } => Some(label),
            PrepareError::Local(_) => None,
        }
    }

    /// What this server logs.
    pub(crate) fn detail(&self) -> String {
        match self {
            PrepareError::Peer { label, detail } => format!("peer {label}: {detail}"),
            PrepareError::Local(e) => e.to_string(),
        }
    }
}

impl From<io::Error> for PrepareError {
    fn from(e: io::Error) -> PrepareError {
        PrepareError::Local(e)
    }
}

/// Whom an agent may dial for the groups of one request.
pub(crate) struct DialPolicy<'a> {
    /// This host's own server, the peer of connections without a remote.
    pub own: SocketAddr,
    /// The host that asked for the groups.
    pub requester: IpAddr,
    /// This agent's key: with it, any host that proves the same key; without it, only
    /// the requester's own address.
    pub key: Option<&'a Key>,
}

/// Whether an agent may dial `addr` for a host that asked it to: with a key, any (the
/// dialed host must prove the same key); without one, only the requester's own address.
pub(crate) fn may_dial(addr: SocketAddr, requester: IpAddr, keyed: bool) -> Result<(), String> {
    if keyed || addr.ip() == requester {
        Ok(())
    } else {
        Err(format!(
            "{addr} is not the requesting host {requester} and this agent holds no key; not dialed"
        ))
    }
}

/// Asks each peer of the group to run its mirror, dialing only what `policy` allows.
pub(crate) fn prepare(
    part: GroupPart,
    policy: &DialPolicy,
    limit_s: f64,
    stop: Arc<AtomicBool>,
) -> Result<PreparedGroup, PrepareError> {
    let mut remotes = HashMap::new();
    let mut links = Vec::new();
    for remote in remotes_of(&part.group) {
        let label = remote.clone().unwrap_or_else(|| "local".into());
        let peer_error = |detail: String| PrepareError::Peer {
            label: label.clone(),
            detail,
        };
        let addr = match &remote {
            Some(host) => super::resolve(host).map_err(|e| peer_error(e.to_string()))?,
            None => policy.own,
        };
        if remote.is_some() {
            may_dial(addr, policy.requester, policy.key.is_some()).map_err(peer_error)?;
        }
        let (mut link, _) = Link::dial(addr, Duration::from_secs(5), policy.key)
            .map_err(|e| peer_error(format!("{addr}: {e}")))?;
        let back = if has_accepts_to(&part.group, &remote) {
            let ip = link.stream.local_addr()?.ip();
            let listener = std::net::TcpListener::bind(SocketAddr::new(ip, 0))?;
            let port = listener.local_addr()?.port();
            // Only the agent dialed here connects back.
            let rendezvous = Rendezvous::open(
                ip,
                crate::server_state::random_token()?,
                addr.ip(),
                stop.clone(),
            )?;
            rendezvous.listen(listener)?;
            Some((port, rendezvous))
        } else {
            None
        };
        let spec = MirrorSpec {
            group: mirror_of(&part.group, &remote),
            dial_back: back.as_ref().map(|(port, r)| DialBack {
                port: *port,
                udp_port: r.udp_port,
                token: r.token.to_hex(),
                tls_fingerprint: ssl_fingerprint(&part.group),
            }),
            limit_s: Seconds::clamped(limit_s),
        };
        // The peer proved itself a linerate agent (with this key, or it is the requester
        // itself), so what it answers from here on may be told as it is.
        let answered = |detail: String| io::Error::other(format!("peer {label}: {detail}"));
        link.send(&AgentRequest::Mirror {
            spec: Box::new(spec),
        })
        .map_err(|e| answered(e.to_string()))?;
        let (token, udp_port, fingerprint) = match link.recv::<AgentReply>(PEER_WAIT) {
            Ok(Some(AgentReply::MirrorReady {
                token,
                udp_port,
                tls_fingerprint,
            })) => (token, udp_port, tls_fingerprint),
            Ok(Some(AgentReply::Error { reason, .. })) => {
                return Err(answered(format!("refused the mirror: {reason}")).into())
            }
            Ok(Some(other)) => return Err(answered(format!("unexpected {other:?}")).into()),
            Ok(None) => return Err(answered("did not answer".into()).into()),
            Err(e) => return Err(answered(e.to_string()).into()),
        };
        let token = Token::from_hex(&token).ok_or_else(|| answered("bad token".into()))?;
        remotes.insert(
            remote.clone(),
            Arc::new(RemoteLink {
                addr,
                udp: SocketAddr::new(addr.ip(), udp_port),
                token,
                fingerprint,
                back: back.map(|(_, r)| r),
                control: link.writer()?,
            }),
        );
        links.push((label, link));
    }
    Ok(PreparedGroup {
        part,
        side: Arc::new(Side::Runner { remotes }),
        links,
        stop,
    })
}

/// Runs the group's threads from `start` (an instant), collects the peers' figures and
/// returns the group's result and when its first thread was released (Unix ns).
pub(crate) fn run(
    prepared: PreparedGroup,
    start: Instant,
    limit: Instant,
) -> (GroupResult, Option<u64>) {
    let PreparedGroup {
        part,
        side,
        mut links,
        stop,
    } = prepared;
    let group = Arc::new(part.group.clone());
    let latency = Arc::new(GroupLatency::new(&group));
    let mut handles = Vec::new();
    let mut failures = Vec::new();
    for index in 0..group.threads {
        let (group, side, thread_stop, latency) =
            (group.clone(), side.clone(), stop.clone(), latency.clone());
        let spawned = std::thread::Builder::new()
            .name("linerate-profile".into())
            .stack_size(STACK)
            .spawn(move || {
                wait_for(start, &thread_stop);
                let thread = Thread {
                    index,
                    group: &group,
                    side: &side,
                    stop: &thread_stop,
                    limit,
                    latency: Some(&latency),
                };
                thread.run()
            });
        match spawned {
            Ok(handle) => handles.push(handle),
            Err(e) => {
                failures.push(format!("thread {index} could not start: {e}"));
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
    let outcomes: Vec<ThreadOutcome> = handles
        .into_iter()
        .map(|h| {
            h.join().unwrap_or_else(|_| ThreadOutcome {
                failure: Some("the thread panicked".into()),
                ..ThreadOutcome::default()
            })
        })
        .collect();
    let mut mirrors = Vec::new();
    for (label, link) in &mut links {
        let figures = link.send(&AgentRequest::Finish).and_then(|()| loop {
            match link.recv::<AgentReply>(PEER_WAIT)? {
                Some(AgentReply::MirrorResult { figures }) => break Ok(figures),
                Some(AgentReply::Heartbeat) => continue,
                Some(other) => break Err(io::Error::other(format!("unexpected {other:?}"))),
                None => {
                    break Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no figures in time",
                    ))
                }
            }
        });
        match figures {
            Ok(figures) => mirrors.push(figures),
            Err(e) => failures.push(format!("peer {label}: {e}")),
        }
    }
    let mut wakes: Vec<u64> = outcomes
        .iter()
        .filter(|o| o.started.is_some())
        .map(|o| o.started_unix_ns)
        .collect();
    wakes.sort();
    let released = wakes.first().copied();
    let result = merge(
        &part, &group, start, &outcomes, &latency, &mirrors, failures,
    );
    (result, released)
}

/// Transaction `ti`'s span over every thread: its first start to its last end, seconds.
fn transaction_span_s(outcomes: &[ThreadOutcome], ti: usize) -> f64 {
    let first = outcomes
        .iter()
        .filter_map(|o| o.transactions.get(ti)?.first_start)
        .min();
    let last = outcomes
        .iter()
        .filter_map(|o| o.transactions.get(ti)?.last_end)
        .max();
    match (first, last) {
        (Some(a), Some(b)) => b.saturating_duration_since(a).as_secs_f64(),
        _ => 0.0,
    }
}

/// Operation `oi` of transaction `ti`: its counts summed over the threads.
fn count_op(figures: &mut OpFigures, outcomes: &[ThreadOutcome], ti: usize, oi: usize) {
    for outcome in outcomes {
        if let Some(counts) = outcome.transactions.get(ti).and_then(|t| t.ops.get(oi)) {
            figures.count += counts.count;
            figures.bytes += counts.bytes;
            figures.errors += counts.errors;
        }
    }
}

/// Each thread's figures, with what the mirrors received from it.
fn thread_figures(outcomes: &[ThreadOutcome], mirrors: &[MirrorFigures]) -> Vec<ThreadFigures> {
    let secs = |from: Instant, to: Instant| to.saturating_duration_since(from).as_secs_f64();
    outcomes
        .iter()
        .enumerate()
        .map(|(t, o)| {
            let peer: u64 = mirrors
                .iter()
                .map(|m| m.received_per_thread.get(t).copied().unwrap_or(0))
                .sum();
            ThreadFigures {
                thread: t as u32,
                iterations: o.transactions.iter().map(|x| x.iterations).sum(),
                received_bytes: o.received + peer,
                errors: o.errors,
                elapsed_s: match (o.started, o.ended) {
                    (Some(a), Some(b)) => secs(a, b),
                    _ => 0.0,
                },
                failure: o.failure.clone(),
            }
        })
        .collect()
}

/// A group's figures merged from its threads and its mirror, operation by operation.
fn merge(
    part: &GroupPart,
    group: &Group,
    start: Instant,
    outcomes: &[ThreadOutcome],
    latency: &GroupLatency,
    mirrors: &[MirrorFigures],
    failures: Vec<String>,
) -> GroupResult {
    let peer_bytes = |ti: usize, oi: usize| -> u64 {
        mirrors
            .iter()
            .map(|m| {
                m.bytes
                    .get(ti)
                    .and_then(|t| t.get(oi))
                    .copied()
                    .unwrap_or(0)
            })
            .sum()
    };
    let secs = |from: Instant, to: Instant| to.saturating_duration_since(from).as_secs_f64();
    let mut transactions = Vec::new();
    let mut sent = 0u64;
    for (ti, txn) in group.transactions.iter().enumerate() {
        let elapsed = transaction_span_s(outcomes, ti);
        let mut received = 0u64;
        let mut ops = Vec::new();
        let mut errors = 0;
        for (oi, op) in txn.ops.iter().enumerate() {
            let mut figures = OpFigures {
                op: op.action.name().to_string(),
                conn: op.conn.clone(),
                peer_bytes: peer_bytes(ti, oi),
                latency_us: summary(&latency.ops[ti][oi], false),
                ..OpFigures::default()
            };
            count_op(&mut figures, outcomes, ti, oi);
            match op.action.sends() {
                Some(true) => {
                    received += figures.peer_bytes;
                    sent += figures.bytes;
                }
                Some(false) => {
                    received += figures.bytes;
                    sent += figures.peer_bytes;
                }
                None => {}
            }
            errors += figures.errors;
            ops.push(figures);
        }
        let iterations: u64 = outcomes
            .iter()
            .filter_map(|o| o.transactions.get(ti))
            .map(|t| t.iterations)
            .sum();
        let per_s = |n: f64| if elapsed > 0.0 { n / elapsed } else { 0.0 };
        transactions.push(TransactionFigures {
            iterations,
            received_bytes: received,
            errors,
            elapsed_s: elapsed,
            iterations_per_s: per_s(iterations as f64),
            received_bps: per_s(received as f64 * 8.0),
            latency_us: summary(&latency.transactions[ti], true),
            ops,
        });
    }
    let per_thread = thread_figures(outcomes, mirrors);
    let ended = outcomes
        .iter()
        .filter_map(|o| o.ended)
        .max()
        .unwrap_or(start);
    GroupResult {
        name: group.name.clone(),
        host: part.host_label.clone(),
        threads: group.threads,
        received_bytes: transactions.iter().map(|t| t.received_bytes).sum(),
        sent_bytes: sent,
        iterations: transactions.iter().map(|t| t.iterations).sum(),
        errors: transactions.iter().map(|t| t.errors).sum(),
        elapsed_s: secs(start, ended),
        transactions,
        per_thread,
        failures: failures
            .into_iter()
            .chain(mirrors.iter().flat_map(|m| m.failures.clone()))
            .collect(),
    }
}

/// A group's mirror on this host: its threads, and the counts the group host reports.
pub(crate) struct Mirror {
    pub counts: Arc<Vec<AtomicU64>>,
    transactions: usize,
    handles: Vec<std::thread::JoinHandle<ThreadOutcome>>,
}

impl Mirror {
    /// Starts the mirror threads; they wait for their peers' connections.
    pub fn start(
        spec: &MirrorSpec,
        rendezvous: Arc<Rendezvous>,
        peer_ip: std::net::IpAddr,
        stop: Arc<AtomicBool>,
    ) -> io::Result<Mirror> {
        let group = Arc::new(spec.group.clone());
        let transactions = group.transactions.len();
        let counts: Arc<Vec<AtomicU64>> = Arc::new(
            (0..group.threads as usize * transactions)
                .map(|_| AtomicU64::new(u64::MAX))
                .collect(),
        );
        let dial_back = match &spec.dial_back {
            Some(back) => Some((
                SocketAddr::new(peer_ip, back.port),
                SocketAddr::new(peer_ip, back.udp_port),
                Token::from_hex(&back.token)
                    .ok_or_else(|| io::Error::other("bad dial-back token"))?,
                back.tls_fingerprint.clone(),
            )),
            None => None,
        };
        let side = Arc::new(Side::Mirror {
            rendezvous,
            dial_back,
            counts: counts.clone(),
        });
        let limit = Instant::now() + spec.limit_s.duration().max(Duration::from_secs(1));
        let mut handles = Vec::new();
        for index in 0..group.threads {
            let (group, side, thread_stop) = (group.clone(), side.clone(), stop.clone());
            let handle = std::thread::Builder::new()
                .name("linerate-mirror".into())
                .stack_size(STACK)
                .spawn(move || {
                    Thread {
                        index,
                        group: &group,
                        side: &side,
                        stop: &thread_stop,
                        limit,
                        latency: None,
                    }
                    .run()
                });
            match handle {
                Ok(h) => handles.push(h),
                Err(e) => {
                    stop.store(true, std::sync::atomic::Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        Ok(Mirror {
            counts,
            transactions,
            handles,
        })
    }

    pub fn set_count(&self, thread: u32, transaction: u32, iterations: u64) {
        if transaction as usize >= self.transactions {
            return;
        }
        let slot = thread as usize * self.transactions + transaction as usize;
        if let Some(count) = self.counts.get(slot) {
            count.store(iterations, std::sync::atomic::Ordering::Release);
        }
    }

    pub fn finished_threads(&self) -> usize {
        self.handles.iter().filter(|h| h.is_finished()).count()
    }

    pub fn is_finished(&self) -> bool {
        self.handles
            .iter()
            .all(std::thread::JoinHandle::is_finished)
    }

    /// Waits for the threads (the caller sets the stop flag to hurry them) and sums them.
    pub fn finish(self, group: &Group) -> MirrorFigures {
        let outcomes: Vec<ThreadOutcome> = self
            .handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect();
        MirrorFigures {
            bytes: group
                .transactions
                .iter()
                .enumerate()
                .map(|(ti, t)| {
                    (0..t.ops.len())
                        .map(|oi| {
                            outcomes
                                .iter()
                                .filter_map(|o| Some(o.transactions.get(ti)?.ops.get(oi)?.bytes))
                                .sum()
                        })
                        .collect()
                })
                .collect(),
            received_per_thread: outcomes.iter().map(|o| o.received).collect(),
            failures: outcomes
                .iter()
                .enumerate()
                .filter_map(|(t, o)| {
                    o.failure
                        .as_ref()
                        .map(|f| format!("mirror thread {t}: {f}"))
                })
                .take(8)
                .collect(),
        }
    }
}

/// The fingerprint of this process's certificate for `ssl` connections, when `group` has
/// any (made on first use).
pub(crate) fn ssl_fingerprint(group: &linerate_profile::Group) -> Option<String> {
    let ssl = group.transactions.iter().flat_map(|t| &t.ops).any(|op| {
        matches!(
            &op.action,
            linerate_profile::Action::Connect(e) | linerate_profile::Action::Accept(e)
                if e.protocol == linerate_profile::Protocol::Ssl
        )
    });
    ssl.then(|| {
        crate::secure::profile_identity()
            .ok()
            .map(|t| t.fingerprint.clone())
    })
    .flatten()
}
