//! `linerate impair`'s foreground: starts the bridge, prints a line per direction every
//! second (or writes them to a status file), and a summary when it stops.

// A driver: the clock and sleeping are its job (the core modules stay sans-IO).
#![allow(clippy::disallowed_methods)]

use crate::bridge::{Bridge, BridgeError, DirectionStatus, Ports};
use crate::frame_log::FrameLog;
use crate::spec::LinkSpec;
use linerate_model::clock::UnixTime;
use linerate_model::PathFacts;
use serde::{Deserialize, Serialize};
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What `linerate impair` was asked to do.
pub struct RunOptions {
    pub interfaces: [String; 2],
    pub path: PathFacts,
    pub forward: LinkSpec,
    pub reverse: LinkSpec,
    /// Stop after this long; `None`: until SIGINT or SIGTERM.
    pub duration: Option<Duration>,
    /// No per-second lines on standard output.
    pub quiet: bool,
    /// Rewritten every second and at the end with a [`Status`].
    pub status_file: Option<PathBuf>,
    /// A line for every frame (crate::frame_log), at most its limit a direction.
    pub frame_log: Option<PathBuf>,
}

/// The emulator's state as written to the status file: what a lab or a test reads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    pub running: bool,
    pub elapsed_s: f64,
    pub interfaces: [String; 2],
    pub path: PathFacts,
    /// First interface to second, then back.
    pub directions: [DirectionStatus; 2],
}

pub const HEADER: &str =
    "    time  direction                passed    Mbit/s    lost  q-drop  dup  corrupt  reorder   queued  delay ms";

fn line(
    elapsed: f64,
    name: &str,
    now: &DirectionStatus,
    before: &DirectionStatus,
    seconds: f64,
) -> String {
    let c = &now.counters;
    let b = &before.counters;
    let passed = c.passed - b.passed;
    let bits = (c.passed_bytes - b.passed_bytes) as f64 * 8.0;
    let delay_ms = if passed > 0 {
        (c.delay_sum_ns - b.delay_sum_ns) as f64 / passed as f64 / 1e6
    } else {
        0.0
    };
    format!(
        "{elapsed:7.1}s  {name:<22} {passed:>8} {:>9.1} {:>7} {:>7} {:>4} {:>8} {:>8} {:>8} {delay_ms:>9.3}",
        bits / seconds.max(1e-9) / 1e6,
        c.lost - b.lost,
        (c.queue_drops + c.aqm_drops + c.limit_drops + now.oversize + now.refused + now.ring_drops)
            - (b.queue_drops
                + b.aqm_drops
                + b.limit_drops
                + before.oversize
                + before.refused
                + before.ring_drops),
        c.duplicated - b.duplicated,
        c.corrupted - b.corrupted,
        c.reordered - b.reordered,
        human_bytes(now.queued_bytes),
    )
}

fn human_bytes(bytes: u64) -> String {
    match bytes {
        b if b >= 10_000_000 => format!("{:.0} MB", b as f64 / 1e6),
        b if b >= 1_000_000 => format!("{:.1} MB", b as f64 / 1e6),
        b if b >= 1000 => format!("{:.0} kB", b as f64 / 1e3),
        b => format!("{b} B"),
    }
}

fn write_status(path: &PathBuf, status: &Status) -> io::Result<()> {
    // Written aside and renamed, so a reader never sees half a file.
    let temporary = path.with_extension("tmp");
    std::fs::write(
        &temporary,
        serde_json::to_vec_pretty(status).map_err(io::Error::other)?,
    )?;
    std::fs::rename(temporary, path)
}

/// The frame log asked for (`--frame-log`), its header written; the wall clock it gives
/// is read a moment before the bridge's clock starts (within microseconds).
fn open_frame_log(options: &RunOptions) -> Result<Option<FrameLog>, BridgeError> {
    options
        .frame_log
        .as_ref()
        .map(|file| {
            FrameLog::create(file, &options.interfaces, UnixTime::now().nanos())
                .map_err(|error| frame_log_error(file, error))
        })
        .transpose()
}

fn frame_log_error(file: &std::path::Path, error: io::Error) -> BridgeError {
    BridgeError::FrameLog {
        path: file.display().to_string(),
        error,
    }
}

/// What `linerate impair` prints as it starts: the path, how tests record it, and the
/// per-second lines' header.
fn opening(path: &PathFacts) -> String {
    format!(
        "{}\nTests across this path record it when run with {}='{}'\n{HEADER}",
        path.summary(),
        linerate_model::PATH_ENV,
        serde_json::to_string(path).unwrap_or_default()
    )
}

/// Runs the bridge until the duration passes or `stop` is set; returns the final status.
pub fn run(
    options: &RunOptions,
    stop: Arc<AtomicBool>,
    out: &mut dyn Write,
) -> Result<Status, BridgeError> {
    let [a, b] = &options.interfaces;
    let threads = options.path.threads.max(1) as usize;
    let ports = Ports::open(a, b, options.path.offloads, threads)?;
    let names = [format!("{a} -> {b}"), format!("{b} -> {a}")];
    let bridge_stop = Arc::new(AtomicBool::new(false));
    let frame_log = open_frame_log(options)?;
    let bridge = Bridge::start(
        ports,
        options.forward,
        options.reverse,
        options.path.seed,
        bridge_stop,
        frame_log.as_ref().map(FrameLog::sender),
    );
    let status_of = |bridge: &Bridge, running: bool, directions| Status {
        running,
        elapsed_s: bridge.elapsed().as_secs_f64(),
        interfaces: options.interfaces.clone(),
        path: options.path.clone(),
        directions,
    };
    let io_error = |error| BridgeError::Io {
        name: format!("{a}/{b}"),
        error,
    };
    if let Some(file) = &options.status_file {
        write_status(file, &status_of(&bridge, true, bridge.status())).map_err(io_error)?;
    }
    if !options.quiet {
        let _ = writeln!(out, "{}", opening(&options.path));
    }
    let mut before = bridge.status();
    let mut last_second = 0.0;
    let mut next = Duration::from_secs(1);
    loop {
        let elapsed = bridge.elapsed();
        let ending = stop.load(Ordering::Relaxed)
            || options.duration.is_some_and(|d| elapsed >= d)
            || bridge.finished();
        if ending {
            break;
        }
        if elapsed >= next {
            let now = bridge.status();
            let seconds = elapsed.as_secs_f64() - last_second;
            if !options.quiet {
                for k in 0..2 {
                    let _ = writeln!(
                        out,
                        "{}",
                        line(
                            elapsed.as_secs_f64(),
                            &names[k],
                            &now[k],
                            &before[k],
                            seconds
                        )
                    );
                }
            }
            if let Some(file) = &options.status_file {
                let _ = write_status(file, &status_of(&bridge, true, now.clone()));
            }
            before = now;
            last_second = elapsed.as_secs_f64();
            next += Duration::from_secs(1);
        }
        let wait = next.saturating_sub(bridge.elapsed());
        std::thread::sleep(wait.min(Duration::from_millis(50)));
    }
    let elapsed = bridge.elapsed().as_secs_f64();
    let final_status = bridge.stop().map_err(io_error)?;
    if let (Some(log), Some(file)) = (frame_log, &options.frame_log) {
        log.finish().map_err(|error| frame_log_error(file, error))?;
    }
    let status = Status {
        running: false,
        elapsed_s: elapsed,
        interfaces: options.interfaces.clone(),
        path: options.path.clone(),
        directions: final_status,
    };
    if let Some(file) = &options.status_file {
        write_status(file, &status).map_err(io_error)?;
    }
    if !options.quiet {
        let _ = writeln!(out, "{}", summary(&status));
    }
    Ok(status)
}

/// The whole run, a few lines per direction.
pub fn summary(status: &Status) -> String {
    let [a, b] = &status.interfaces;
    let names = [format!("{a} -> {b}"), format!("{b} -> {a}")];
    let mut text = format!("Summary over {:.1} s:\n", status.elapsed_s);
    let impairments = [&status.path.forward, &status.path.reverse];
    for ((name, d), impairment) in names.iter().zip(&status.directions).zip(impairments) {
        let c = &d.counters;
        if let Some(aqm) = impairment.aqm {
            text.push_str(&format!(
                "  {name}: {} dropped {}, marked CE {}\n",
                aqm.kind.name(),
                c.aqm_drops,
                c.ce_marked
            ));
        }
        if let (Some(p50), Some(p99)) = (c.sojourns.quantile_ms(0.5), c.sojourns.quantile_ms(0.99))
        {
            text.push_str(&format!(
                "  {name}: waited in the queue before the bottleneck {p50:.2} ms at the median, {p99:.2} ms at the 99th percentile\n"
            ));
        }
        text.push_str(&format!(
            "  {name}: {} frames in, {} passed{} ({:.1} Mbit/s), lost {}, queue drops {}, \
             memory drops {}, oversize {}, refused {}, dropped by a full receive ring {}, duplicated {}, corrupted {}, reordered {}, re-marked {}, \
             mean delay {:.3} ms, max {:.3} ms, {} frames left in the line; \
             released late by {:.3} ms on average, at most {:.3} ms, {} frames over {} us; \
             read {:.3} ms after the kernel took them on average, at most {:.3} ms; \
             woken {:.0} us ahead of due frames (this machine's timer overshoot) and spun \
             the rest\n",
            c.arrived,
            c.passed,
            // Offloaded segments leave as more frames than came in.
            if c.passed_wire_frames > c.passed {
                format!(" as {} frames", c.passed_wire_frames)
            } else {
                String::new()
            },
            c.passed_bytes as f64 * 8.0 / status.elapsed_s.max(1e-9) / 1e6,
            c.lost,
            c.queue_drops,
            c.limit_drops,
            d.oversize,
            d.refused,
            d.ring_drops,
            c.duplicated,
            c.corrupted,
            c.reordered,
            c.remarked,
            c.mean_delay_ms(),
            c.delay_max_ns as f64 / 1e6,
            d.queued_frames,
            c.mean_lateness_ms(),
            c.late_max_ns as f64 / 1e6,
            c.late_frames,
            crate::link::LATE_NS / 1000,
            d.pickup_sum_ns as f64 / c.arrived.max(1) as f64 / 1e6,
            d.pickup_max_ns as f64 / 1e6,
            d.wake_early_ns as f64 / 1e3,
        ));
    }
    text.pop();
    text
}
