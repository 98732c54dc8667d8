//! The agent side of profile runs, inside `linerate serve`: one thread per agent
//! connection, which either runs groups for a controller or runs a group's mirror for the
//! group's host (docs/protocol.md 7).

use super::group::{self, Mirror, PreparedGroup, WakeLatencyHold};
use super::link::{unix_ns, Link};
use super::rendezvous::Rendezvous;
use crate::server::Shared;
use linerate_proto::agent::{AgentReply, AgentRequest, MirrorSpec, AGENT_VERSION};
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
        shared.log(&format!(
            "agent connection from {peer}: refused: protocol version {version}"
        ));
        return;
    }
    group::reply(
        &mut link,
        &AgentReply::Welcome {
            version: AGENT_VERSION,
            host: shared.host.clone(),
        },
    );
    let stop = Arc::new(AtomicBool::new(false));
    let mut prepared: Vec<PreparedGroup> = Vec::new();
    let mut limit_s = 3600.0;
    let mut run: Option<Receiver<RunEvent>> = None;
    let mut mirror: Option<MirrorState> = None;
    let mut last_beat = Instant::now();
    let why = loop {
        if shared.shutdown.load(Ordering::Relaxed) {
            stop.store(true, Ordering::Relaxed);
            break "the server is shutting down".to_string();
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
        match message {
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
                limit_s = limit;
                let names: Vec<String> = parts.iter().map(|p| p.group.name.clone()).collect();
                let mut failed = None;
                for part in parts {
                    match group::prepare(part, own, limit, stop.clone()) {
                        Ok(group) => prepared.push(group),
                        Err(e) => {
                            failed = Some(e.to_string());
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
                    Some(reason) => {
                        shared.log(&format!(
                            "profile run from {peer}: cannot prepare: {reason}"
                        ));
                        group::reply(&mut link, &AgentReply::Error { reason });
                    }
                }
            }
            AgentRequest::Start { at_unix_ns } => {
                let groups = std::mem::take(&mut prepared);
                let (sender, receiver) = channel();
                run = Some(receiver);
                let now = unix_ns();
                let start = Instant::now() + Duration::from_nanos(at_unix_ns.saturating_sub(now));
                let limit = start + Duration::from_secs_f64(limit_s.clamp(1.0, 86_400.0 * 7.0));
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
            AgentRequest::Mirror { spec } => match start_mirror(shared, &spec, peer, own, &stop) {
                Ok(state) => {
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
                    shared.log(&format!("mirror for {peer}: refused: {reason}"));
                    group::reply(&mut link, &AgentReply::Error { reason });
                }
            },
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
    if threads == 0
        || threads > linerate_profile::MAX_THREADS
        || threads > shared.config.limits.max_flows.max(1) * 4
    {
        return Err(format!("{threads} threads is over this agent's limit"));
    }
    if !spec.limit_s.is_finite() || spec.limit_s > f64::from(u32::MAX) {
        return Err(format!("run limit {} s is not acceptable", spec.limit_s));
    }
    let token = crate::server::random_token().map_err(|e| e.to_string())?;
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
