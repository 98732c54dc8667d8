//! `serve --irtt`: an irtt server on its own thread. One socket, one loop: datagrams in
//! a batch with the kernel's arrival times, the access rules asked, the server's
//! decisions, the answers out together with the TOS each session asked for. Refusals are
//! counted by reason and logged at most once per reason every ten seconds; each session
//! is logged once, as it ends.

// A socket loop reads the clock; the sans-IO parts (wire, server) take it.
#![allow(clippy::disallowed_methods)]

use crate::server::{Arrival, Config, Decision, EndReason, Ended, Refusal, Server};
use crate::wire::Stamp;
use linerate_stamp::listener::{send_answers, Reasons, RefusalLog, UnsentLog};
use linerate_stamp::sys;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Who may be answered, and where the operator's log lines go: as the STAMP reflector's.
pub use linerate_stamp::listener::{LogLine, Permits};
/// Datagrams read, and answers sent, per system call.
const BATCH: usize = 64;

/// What the server did, since it started.
pub type Counters = linerate_stamp::listener::Counters<Refusal>;

impl Reasons for Refusal {
    const EVERY: &'static [Refusal] = &Refusal::ALL;
    fn reason(self) -> &'static str {
        Refusal::reason(self)
    }
    fn label(self) -> &'static str {
        Refusal::label(self)
    }
}

/// A running server.
pub type Listener = linerate_stamp::listener::Running<Counters>;

/// Binds `addr` (every IPv6 address falls back to every IPv4 one on a host without
/// IPv6) and serves irtt clients there until dropped; `log_sessions`: a line for each
/// session as it ends (refusals are logged whatever it says).
pub fn start(
    addr: SocketAddr,
    config: Config,
    permits: Permits,
    log: LogLine,
    log_sessions: bool,
) -> io::Result<Listener> {
    let logs = Logs {
        line: log.clone(),
        sessions: log_sessions,
    };
    linerate_stamp::listener::run_udp(
        addr,
        "irtt-server",
        log,
        Box::new(move |socket, v6, counters, stop| {
            serve(socket, v6, config, &permits, &logs, counters, stop)
        }),
    )
}

/// Tokens from the system's randomness: a session's token proves its client receives at
/// its address, so it must not be guessable.
fn random_token() -> u64 {
    let mut bytes = [0u8; 8];
    let _ = getrandom::getrandom(&mut bytes);
    u64::from_le_bytes(bytes)
}

fn unix_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// The server's two clocks now: the wall clock, and nanoseconds since it started (never
/// 0: irtt reads a 0 stamp as none).
fn stamp_now(epoch: Instant) -> Stamp {
    Stamp {
        wall: unix_ns(),
        mono: epoch.elapsed().as_nanos() as i64 + 1,
    }
}

/// A session's line as it ends.
pub fn ended_line(ended: &Ended) -> String {
    let why = match ended.why {
        EndReason::Closed => "closed by the client",
        EndReason::Duration => "past its duration, closed",
        EndReason::Idle => "idle, ended",
    };
    format!(
        "irtt: session from {} {why}: {} of {} requests answered over {:.1} s (interval {:.1} ms, {} bytes)",
        ended.from,
        ended.answered,
        ended.received,
        ended.active_ns as f64 / 1e9,
        ended.params.interval_ns as f64 / 1e6,
        ended.params.length,
    )
}

/// Where the loop's lines go, and whether sessions are told as they end.
struct Logs {
    line: LogLine,
    sessions: bool,
}

/// The kernel's arrival time of a datagram, on both clocks (the monotonic one by how
/// long ago that was).
fn arrived(meta: sys::Meta, now: Stamp) -> Stamp {
    let wall = meta.kernel_unix_ns.map_or(now.wall, |ns| ns as i64);
    Stamp {
        wall,
        mono: (now.mono - (now.wall - wall).max(0)).max(1),
    }
}

/// Counts (and logs, where asked) the sessions that ended, and those live.
fn tell_ended(server: &mut Server, counters: &Counters, logs: &Logs) {
    // Counted before any line is written: a reader of the line finds the count with it.
    counters
        .sessions
        .store(server.sessions() as u64, Ordering::Relaxed);
    for ended in server.take_ended() {
        counters.ended.fetch_add(1, Ordering::Relaxed);
        if logs.sessions {
            (logs.line)(&ended_line(&ended));
        }
    }
}

fn serve(
    socket: &UdpSocket,
    v6: bool,
    config: Config,
    permits: &Permits,
    logs: &Logs,
    counters: &Counters,
    stop: &AtomicBool,
) -> io::Result<()> {
    let epoch = Instant::now();
    let max_length = config.max_length;
    let mut server = Server::new(config, Box::new(random_token), stamp_now(epoch).mono);
    let mut inbox = sys::ReceiveBatch::new(BATCH, max_length + 1);
    let mut outbox = sys::SendBatch::new(BATCH, max_length, v6, false);
    let mut refusals = RefusalLog::new("irtt");
    let mut unsent = UnsentLog::new("irtt");
    let mut swept = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if swept.elapsed() >= Duration::from_secs(1) {
            server.sweep(stamp_now(epoch).mono);
            swept = Instant::now();
        }
        tell_ended(&mut server, counters, logs);
        if !sys::wait_readable(socket, Duration::from_millis(200))? {
            continue;
        }
        loop {
            let received = inbox.recv_waiting(socket)?;
            if received == 0 {
                break;
            }
            for i in 0..received {
                let Some((bytes, truncated, from, meta)) = inbox.datagram(i) else {
                    continue;
                };
                let answer = outbox.next_buffer().expect("a slot per datagram received");
                let decision = if truncated {
                    Decision::refused(Refusal::NotARequest)
                } else if permits(from.ip()).is_err() {
                    Decision::refused(Refusal::Denied)
                } else {
                    let now = stamp_now(epoch);
                    let arrival = Arrival {
                        from,
                        bytes,
                        received: arrived(meta, now),
                        now,
                    };
                    server.handle(&arrival, answer)
                };
                if let Some(reply) = decision.answer {
                    outbox.push(reply.len, from, (reply.tos != 0).then_some(reply.tos));
                }
                if let Some(refusal) = decision.refused {
                    counters.refuse(refusal);
                    refusals.note(refusal, from, &logs.line);
                }
            }
            send_answers(&mut outbox, socket, counters, &mut unsent, &logs.line);
            if received < BATCH {
                break;
            }
        }
    }
    Ok(())
}
