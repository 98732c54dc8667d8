//! The agent side of profile runs, inside `linerate serve`: one thread per agent
//! connection, which either runs groups for a controller or runs a group's mirror for the
//! group's host (docs/protocol.md 7).

use super::group::{self, DialPolicy, Mirror, PreparedGroup, WakeLatencyHold};
use super::link::{random_nonce, unix_ns, Link};
use super::rendezvous::Rendezvous;
use crate::shared::Shared;
use linerate_proto::agent::{AgentReply, AgentRequest, MirrorSpec, AGENT_VERSION};
use linerate_proto::auth::ServerAuth;
use linerate_report::profile::GroupResult;
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

/// The first exchange on an agent connection: the dialer's hello within the handshake
/// deadline, the welcome, and, when this server holds a key, the dialer's proof.
fn handshake(shared: &Shared, link: &mut Link) -> Result<(), String> {
    let wait = shared.config.timeouts.handshake;
    let nonce = match link.recv::<AgentRequest>(wait) {
        Ok(Some(AgentRequest::Hello { nonce })) => nonce,
        Ok(Some(_)) => return Err("did not open with a hello".into()),
        Ok(None) => {
            return Err(format!(
                "sent no hello within {:.0} s (the handshake deadline)",
                wait.as_secs_f64()
            ))
        }
        Err(e) => return Err(format!("failed during its hello: {e}")),
    };
    let mut auth = match &shared.config.key {
        Some(key) => Some(ServerAuth::new(
            key.clone(),
            random_nonce().map_err(|e| e.to_string())?,
        )),
        None => None,
    };
    let challenge = match auth.as_mut().map(|a| a.handle_hello(nonce.as_deref())) {
        Some(Err(e)) => return Err(format!("authentication failed: {e}")),
        Some(Ok(challenge)) => Some(challenge),
        None => None,
    };
    group::reply(
        link,
        &AgentReply::Welcome {
            version: AGENT_VERSION,
            host: shared.host.clone(),
            auth: challenge,
        },
    );
    let Some(auth) = auth else {
        return Ok(());
    };
    match link.recv::<AgentRequest>(wait) {
        Ok(Some(AgentRequest::Auth { proof })) => auth
            .handle_proof(&proof)
            .map_err(|e| format!("authentication failed: {e}")),
        Ok(Some(_)) => Err("authentication failed: no proof of the key".into()),
        Ok(None) => Err(format!(
            "sent no proof of the key within {:.0} s",
            wait.as_secs_f64()
        )),
        Err(e) => Err(format!("failed during authentication: {e}")),
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
    let mut link = match Link::new(stream) {
        Ok(link) => link,
        Err(_) => return,
    };
    if version != AGENT_VERSION {
        group::reply(&mut link, &AgentReply::Error { reason: format!("agent protocol version {version} is not spoken here (this agent speaks {AGENT_VERSION})") });
        shared.refused(peer, &format!("agent protocol version {version}"));
        return;
    }
    if let Err(why) = handshake(shared, &mut link) {
        group::reply(
            &mut link,
            &AgentReply::Error {
                reason: why.clone(),
            },
        );
        shared.refused(peer, &format!("agent connection: {why}"));
        return;
    }
    let limits = &shared.config.limits;
    let idle = shared.config.timeouts.idle;
    let stop = Arc::new(AtomicBool::new(false));
    let mut prepared: Vec<PreparedGroup> = Vec::new();
    let mut limit_s = limits.max_duration_s;
    let mut run: Option<Receiver<RunEvent>> = None;
    let mut mirror: Option<MirrorState> = None;
    // Held while groups are prepared or run, or a mirror runs: agent work counts toward
    // --max-tests as a test does.
    let mut slot: Option<TestSlot> = None;
    let mut last_beat = Instant::now();
    let mut last_heard = Instant::now();
    let why = loop {
        if shared.shutdown.load(Ordering::Relaxed) {
            stop.store(true, Ordering::Relaxed);
            break "the server is shutting down".to_string();
        }
        let busy = run.is_some() || mirror.is_some();
        if !busy && last_heard.elapsed() >= idle {
            break format!(
                "idle for {:.0} s (the idle deadline); closed",
                idle.as_secs_f64()
            );
        }
        if !busy && prepared.is_empty() {
            slot = None;
        }
        if let Some(events) = &run {
            match events.try_recv() {
                Ok(RunEvent::Released(at)) => {
                    group::reply(&mut link, &AgentReply::Started { at_unix_ns: at })
                }
                Ok(RunEvent::Done(groups)) => {
                    let count = groups.len();
                    group::reply(&mut link, &AgentReply::PartResult { groups });
                    shared.log(&format!(
                        "profile run from {peer}: {count} group(s) finished"
                    ));
                    run = None;
                }
                Err(TryRecvError::Empty) => {
                    if last_beat.elapsed() >= HEARTBEAT {
                        group::reply(&mut link, &AgentReply::Heartbeat);
                        last_beat = Instant::now();
                    }
                }
                Err(TryRecvError::Disconnected) => run = None,
            }
        }
        let message = match link.recv::<AgentRequest>(Duration::from_millis(50)) {
            Ok(Some(message)) => message,
            Ok(None) => continue,
            Err(e) => break format!("connection ended: {e}"),
        };
        last_heard = Instant::now();
        match message {
            AgentRequest::Hello { .. } | AgentRequest::Auth { .. } => {
                break "a second hello or proof; closed".to_string()
            }
            AgentRequest::Ping { seq } => group::reply(
                &mut link,
                &AgentReply::Pong {
                    seq,
                    unix_ns: unix_ns(),
                },
            ),
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
                    group::reply(&mut link, &AgentReply::Error { reason });
                    continue;
                }
                if slot.is_none() && !parts.is_empty() {
                    match TestSlot::take(shared) {
                        Ok(taken) => slot = Some(taken),
                        Err(reason) => {
                            shared.refused(peer, &format!("profile run: {reason}"));
                            group::reply(&mut link, &AgentReply::Error { reason });
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
                        group::reply(&mut link, &AgentReply::Prepared);
                    }
                    Some(e) => {
                        shared.refused(
                            peer,
                            &format!("profile run: cannot prepare: {}", e.detail()),
                        );
                        prepared.clear();
                        group::reply(&mut link, &AgentReply::Error { reason: e.public() });
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
                    group::reply(
                        &mut link,
                        &AgentReply::Error {
                            reason: format!("cannot start: {e}"),
                        },
                    );
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
                        group::reply(
                            &mut link,
                            &AgentReply::MirrorReady {
                                token: state.token.to_hex(),
                                udp_port: state.udp_port,
                            },
                        );
                        mirror = Some(state.state);
                    }
                    Err(reason) => {
                        shared.refused(peer, &format!("mirror: {reason}"));
                        group::reply(&mut link, &AgentReply::Error { reason });
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
                            group::reply(&mut link, &AgentReply::Heartbeat);
                            last_beat = Instant::now();
                        }
                    }
                    stop.store(true, Ordering::Relaxed);
                    shared.unregister_flows(&state.token);
                    let figures = state.mirror.finish(&state.spec.group);
                    group::reply(&mut link, &AgentReply::MirrorResult { figures });
                    shared.log(&format!(
                        "mirror of group '{}' for {peer}: ended",
                        state.spec.group.name
                    ));
                }
            }
        }
    };
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
