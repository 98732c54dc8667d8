//! The agent side of profile runs, inside `linerate serve`: one thread per agent
//! connection, which either runs groups for a controller or runs a group's mirror for the
//! group's host (docs/protocol.md 7).

use super::group::{self, DialPolicy, Mirror, PreparedGroup, WakeLatencyHold};
use super::link::{random_nonce, unix_ns};
use super::rendezvous::Rendezvous;
use crate::shared::Shared;
use linerate_proto::agent::{AgentReply, AgentRequest, MirrorSpec};
use linerate_proto::agent_session::{AgentEvent, AgentSession, AgentTimeouts};
use linerate_report::profile::GroupResult;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a running agent tells its controller it is alive.
const HEARTBEAT: Duration = Duration::from_millis(500);
/// How long after the start the CPUs stay held awake: every thread is released by then.
const START_HOLD: Duration = Duration::from_millis(100);
/// How long a mirror's threads get to end on their own after the group host finished,
/// counted from the last thread that ended: thousands of threads draining what their
/// sockets still hold can take longer than that in all, but each takes milliseconds.
const MIRROR_DRAIN: Duration = Duration::from_secs(5);

enum RunEvent {
    Released(u64),
    Done(Vec<GroupResult>),
}

struct MirrorState {
    mirror: Mirror,
    spec: MirrorSpec,
    token: linerate_proto::Token,
}

/// An agent connection: its socket and the sans-IO session (linerate-proto's
/// `agent_session`) that holds its handshake, key check and deadlines. Every byte in or out
/// goes through the session.
struct AgentConnection {
    stream: TcpStream,
    session: AgentSession,
}

impl AgentConnection {
    /// Sends what the session has queued; a write failure shows as the next read's.
    fn flush(&mut self) {
        while let Some(bytes) = self.session.poll_transmit() {
            if self.stream.write_all(&bytes).is_err() {
                break;
            }
        }
    }

    fn reply(&mut self, reply: &AgentReply) {
        self.session.reply(reply);
        self.flush();
    }

    /// The next request, waiting at most `wait`: `Ok(None)` when none came in time,
    /// `Err` with the reason when the connection is over.
    fn recv(&mut self, wait: Duration) -> Result<Option<AgentRequest>, String> {
        let deadline = Instant::now() + wait;
        let mut buf = [0u8; 16 * 1024];
        loop {
            match self.session.poll_event() {
                Some(AgentEvent::Request(request)) => return Ok(Some(request)),
                Some(AgentEvent::Closed(outcome)) => {
                    self.flush();
                    return Err(outcome
                        .err()
                        .unwrap_or_else(|| "the connection closed".into()));
                }
                None => {}
            }
            let now = Instant::now();
            self.session.handle_timeout(now);
            self.flush();
            if self.session.is_closed() {
                continue;
            }
            let left = deadline.saturating_duration_since(now);
            if left.is_zero() {
                return Ok(None);
            }
            let _ = self
                .stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))));
            match self.stream.read(&mut buf) {
                Ok(0) => self.session.handle_eof(Instant::now()),
                Ok(n) => self.session.handle_input(Instant::now(), &buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(format!("connection ended: {e}")),
            }
            self.flush();
        }
    }
}

/// One place among the server's running tests, given back on drop.
pub(crate) struct TestSlot(Arc<Shared>);

impl TestSlot {
    /// Takes a place, or says why the server is full.
    pub(crate) fn take(shared: &Arc<Shared>) -> Result<TestSlot, String> {
        let running = shared.running.fetch_add(1, Ordering::Relaxed);
        let slot = TestSlot(shared.clone());
        if running >= shared.config.limits.max_tests as usize {
            return Err(format!(
                "the server is running {running} tests, its limit (--max-tests)"
            ));
        }
        Ok(slot)
    }
}

impl Drop for TestSlot {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves one agent connection until it closes or the server shuts down.
pub(crate) fn serve(shared: &Arc<Shared>, stream: TcpStream, version: u32, peer: SocketAddr) {
    let own = match stream.local_addr() {
        Ok(addr) => addr,
        Err(_) => return,
    };
    if stream.set_nodelay(true).is_err() {
        return;
    }
    let timeouts = AgentTimeouts {
        handshake: shared.config.timeouts.handshake,
        idle: shared.config.timeouts.idle,
    };
    let mut session = AgentSession::new(Instant::now(), version, shared.host.clone(), timeouts);
    if let Some(key) = &shared.config.key {
        match random_nonce() {
            Ok(nonce) => session = session.with_key(key.clone(), nonce),
            Err(e) => {
                shared.log(&format!(
                    "agent connection from {peer}: no randomness for a nonce: {e}"
                ));
                return;
            }
        }
    }
    let mut link = AgentConnection { stream, session };
    let limits = &shared.config.limits;
    let stop = Arc::new(AtomicBool::new(false));
    let mut prepared: Vec<PreparedGroup> = Vec::new();
    let mut limit_s = limits.max_duration_s;
    let mut run: Option<Receiver<RunEvent>> = None;
    let mut mirror: Option<MirrorState> = None;
    // Held while groups are prepared or run, or a mirror runs: agent work counts toward
    // --max-tests as a test does.
    let mut slot: Option<TestSlot> = None;
    let mut last_beat = Instant::now();
    let why = loop {
        if shared.shutdown.load(Ordering::Relaxed) {
            stop.store(true, Ordering::Relaxed);
            break "the server is shutting down".to_string();
        }
        let busy = run.is_some() || mirror.is_some();
        link.session.set_busy(Instant::now(), busy);
        if !busy && prepared.is_empty() {
            slot = None;
        }
        if let Some(events) = &run {
            match events.try_recv() {
                Ok(RunEvent::Released(at)) => link.reply(&AgentReply::Started { at_unix_ns: at }),
                Ok(RunEvent::Done(groups)) => {
                    let count = groups.len();
                    link.reply(&AgentReply::PartResult { groups });
                    shared.log(&format!(
                        "profile run from {peer}: {count} group(s) finished"
                    ));
                    run = None;
                }
                Err(TryRecvError::Empty) => {
                    if last_beat.elapsed() >= HEARTBEAT {
                        link.reply(&AgentReply::Heartbeat);
                        last_beat = Instant::now();
                    }
                }
                Err(TryRecvError::Disconnected) => run = None,
            }
        }
        let message = match link.recv(Duration::from_millis(50)) {
            Ok(Some(message)) => message,
            Ok(None) => continue,
            Err(why) => break why,
        };
        match message {
            // The session takes these itself; they never reach here.
            AgentRequest::Hello { .. } | AgentRequest::Auth { .. } => {}
            AgentRequest::Ping { seq } => link.reply(&AgentReply::Pong {
                seq,
                unix_ns: unix_ns(),
            }),
            AgentRequest::Prepare {
                parts,
                limit_s: limit,
            } => {
                let threads: u64 = parts.iter().map(|p| u64::from(p.group.threads)).sum();
                let over = if !limit.is_finite() || limit <= 0.0 || limit > limits.max_duration_s {
                    Some(format!(
                        "a run limit of {limit} s is outside this server's 0 to {} s (--max-duration)",
                        limits.max_duration_s
                    ))
                } else if threads > u64::from(limits.max_flows) {
                    Some(format!(
                        "{threads} threads asked, this server allows {} (--max-flows)",
                        limits.max_flows
                    ))
                } else if run.is_some() || !prepared.is_empty() {
                    Some("groups are already prepared or running on this connection".into())
                } else {
                    None
                };
                if let Some(reason) = over {
                    shared.refused(peer, &format!("profile run: {reason}"));
                    link.reply(&AgentReply::Error { reason });
                    continue;
                }
                if slot.is_none() && !parts.is_empty() {
                    match TestSlot::take(shared) {
                        Ok(taken) => slot = Some(taken),
                        Err(reason) => {
                            shared.refused(peer, &format!("profile run: {reason}"));
                            link.reply(&AgentReply::Error { reason });
                            continue;
                        }
                    }
                }
                limit_s = limit;
                let names: Vec<String> = parts.iter().map(|p| p.group.name.clone()).collect();
                let policy = DialPolicy {
                    own,
                    requester: peer.ip(),
                    key: shared.config.key.as_ref(),
                };
                let mut failed = None;
                for part in parts {
                    match group::prepare(part, &policy, limit, stop.clone()) {
                        Ok(group) => prepared.push(group),
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                    }
                }
                match failed {
                    None => {
                        shared.log(&format!(
                            "profile run from {peer}: prepared group(s) {}",
                            names.join(", ")
                        ));
                        link.reply(&AgentReply::Prepared);
                    }
                    Some(e) => {
                        shared.refused(
                            peer,
                            &format!("profile run: cannot prepare: {}", e.detail()),
                        );
                        prepared.clear();
                        link.reply(&AgentReply::Error { reason: e.public() });
                    }
                }
            }
            AgentRequest::Start { at_unix_ns } => {
                let groups = std::mem::take(&mut prepared);
                let (sender, receiver) = channel();
                run = Some(receiver);
                let now = unix_ns();
                let start = Instant::now() + Duration::from_nanos(at_unix_ns.saturating_sub(now));
                let limit = start
                    + Duration::from_secs_f64(limit_s.clamp(1.0, limits.max_duration_s.max(1.0)));
                let hold = (!groups.is_empty()).then(WakeLatencyHold::acquire);
                let awake = match &hold {
                    Some(hold) if !hold.held() => {
                        " (CPUs not held awake for the start: /dev/cpu_dma_latency needs root)"
                    }
                    _ => "",
                };
                shared.log(&format!(
                    "profile run from {peer}: starting {} group(s){awake}",
                    groups.len()
                ));
                let spawned = std::thread::Builder::new()
                    .name("linerate-part".into())
                    .spawn(move || {
                        let runners: Vec<_> = groups
                            .into_iter()
                            .map(|g| std::thread::spawn(move || group::run(g, start, limit)))
                            .collect();
                        if let Some(hold) = hold {
                            std::thread::sleep(
                                (start + START_HOLD).saturating_duration_since(Instant::now()),
                            );
                            drop(hold);
                        }
                        let mut results = Vec::new();
                        let mut released = Vec::new();
                        for runner in runners {
                            if let Ok((result, at)) = runner.join() {
                                results.push(result);
                                released.extend(at);
                            }
                        }
                        if let Some(first) = released.iter().min() {
                            let _ = sender.send(RunEvent::Released(*first));
                        }
                        let _ = sender.send(RunEvent::Done(results));
                    });
                if let Err(e) = spawned {
                    link.reply(&AgentReply::Error {
                        reason: format!("cannot start: {e}"),
                    });
                }
            }
            AgentRequest::Abort { reason } => {
                shared.log(&format!("profile run from {peer}: aborted: {reason}"));
                stop.store(true, Ordering::Relaxed);
            }
            AgentRequest::Mirror { spec } => {
                match (if mirror.is_some() || run.is_some() || !prepared.is_empty() {
                    Err("this connection already has work".to_string())
                } else {
                    TestSlot::take(shared)
                })
                .and_then(|taken| Ok((start_mirror(shared, &spec, peer, own, &stop)?, taken)))
                {
                    Ok((state, taken)) => {
                        slot = Some(taken);
                        shared.log(&format!(
                            "mirror of group '{}' for {peer}: {} thread(s)",
                            spec.group.name, spec.group.threads
                        ));
                        link.reply(&AgentReply::MirrorReady {
                            token: state.token.to_hex(),
                            udp_port: state.udp_port,
                        });
                        mirror = Some(state.state);
                    }
                    Err(reason) => {
                        shared.refused(peer, &format!("mirror: {reason}"));
                        link.reply(&AgentReply::Error { reason });
                    }
                }
            }
            AgentRequest::TransactionDone {
                thread,
                transaction,
                iterations,
            } => {
                if let Some(state) = &mirror {
                    state.mirror.set_count(thread, transaction, iterations);
                }
            }
            AgentRequest::Finish => {
                if let Some(state) = mirror.take() {
                    let mut ended = (state.mirror.finished_threads(), Instant::now());
                    while !state.mirror.is_finished() && ended.1.elapsed() < MIRROR_DRAIN {
                        std::thread::sleep(Duration::from_millis(10));
                        let now_ended = state.mirror.finished_threads();
                        if now_ended > ended.0 {
                            ended = (now_ended, Instant::now());
                        }
                        // The group host waits for the figures a bounded time per message.
                        if last_beat.elapsed() >= HEARTBEAT {
                            link.reply(&AgentReply::Heartbeat);
                            last_beat = Instant::now();
                        }
                    }
                    stop.store(true, Ordering::Relaxed);
                    shared.unregister_flows(&state.token);
                    let figures = state.mirror.finish(&state.spec.group);
                    link.reply(&AgentReply::MirrorResult { figures });
                    shared.log(&format!(
                        "mirror of group '{}' for {peer}: ended",
                        state.spec.group.name
                    ));
                }
            }
        }
    };
    if !link.session.handshake_done() {
        shared.refused(peer, &format!("agent connection: {why}"));
    } else if run.is_none() && mirror.is_none() && why.contains("idle") {
        shared.log(&format!("agent connection from {peer}: {why}"));
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(state) = mirror.take() {
        shared.unregister_flows(&state.token);
        let _ = state.mirror.finish(&state.spec.group);
        shared.log(&format!(
            "mirror of group '{}' for {peer}: ended early: {why}",
            state.spec.group.name
        ));
    }
    if run.is_some() {
        shared.log(&format!("profile run from {peer}: stopped: {why}"));
    }
}

struct Started {
    state: MirrorState,
    token: linerate_proto::Token,
    udp_port: u16,
}

fn start_mirror(
    shared: &Arc<Shared>,
    spec: &MirrorSpec,
    peer: SocketAddr,
    own: SocketAddr,
    stop: &Arc<AtomicBool>,
) -> Result<Started, String> {
    let threads = spec.group.threads;
    let limits = &shared.config.limits;
    if threads == 0 || threads > linerate_profile::MAX_THREADS || threads > limits.max_flows {
        return Err(format!(
            "{threads} threads asked, this server allows {} (--max-flows)",
            limits.max_flows.min(linerate_profile::MAX_THREADS)
        ));
    }
    if !spec.limit_s.is_finite() || spec.limit_s <= 0.0 || spec.limit_s > limits.max_duration_s {
        return Err(format!(
            "a run limit of {} s is outside this server's 0 to {} s (--max-duration)",
            spec.limit_s, limits.max_duration_s
        ));
    }
    let token = crate::shared::random_token().map_err(|e| e.to_string())?;
    let incoming = shared.register_flows(token);
    let rendezvous = Rendezvous::open(own.ip(), token, stop.clone())
        .map_err(|e| format!("cannot open a UDP socket: {e}"))?;
    rendezvous.feed(incoming);
    let udp_port = rendezvous.udp_port;
    let mirror = Mirror::start(spec, rendezvous, peer.ip(), stop.clone()).map_err(|e| {
        shared.unregister_flows(&token);
        format!("cannot start the mirror threads: {e}")
    })?;
    Ok(Started {
        state: MirrorState {
            mirror,
            spec: spec.clone(),
            token,
        },
        token,
        udp_port,
    })
}
