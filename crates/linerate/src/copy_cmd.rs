//! `linerate copy` and `linerate disk`: flags to options, the progress bar, the summary
//! with its diagnosis, and the result document.

use std::cell::RefCell;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{anyhow, Context};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use linerate_report::document::Document;
use linerate_report::text;
use linerate_report::units::Scale;
use linerate_transfer::client::{self, CopyEvents, CopyOptions, CopySummary, Direction, Endpoint};
use linerate_transfer::diagnosis::{diagnose, Diagnosis};
use linerate_transfer::rate::RateConfig;
use linerate_transfer::transport::{Progress, TransferError};

use crate::cli::{CopyArgs, DiskArgs};
use crate::failure::{Failure, Outcome};
use crate::keep;

fn usage(message: String) -> anyhow::Error {
    Failure::Usage(message).into()
}

fn options(args: &CopyArgs) -> Result<CopyOptions, anyhow::Error> {
    let key = crate::user_key().ok_or_else(|| {
        usage("'linerate copy' needs '--key FILE' (or LINERATE_KEY): the key the server was started with".into())
    })?;
    let rate = match (args.rate, args.max_rate) {
        (Some(bps), _) => RateConfig::Fixed { bps },
        (None, max_bps) => RateConfig::Adaptive { max_bps },
    };
    Ok(CopyOptions {
        key,
        port: args.port,
        rate,
        chunk: args.chunk,
        window_chunks: args.window,
        null: args.null,
        recursive: args.recursive,
        block_cap: args.block,
        no_checksum: args.no_udp_checksum,
        encrypt: args.encrypt,
    })
}

/// The progress bar of the file being copied.
struct Bar {
    bar: ProgressBar,
}

impl Bar {
    fn new(hidden: bool) -> Bar {
        let bar = ProgressBar::with_draw_target(
            Some(0),
            if hidden {
                ProgressDrawTarget::hidden()
            } else {
                ProgressDrawTarget::stderr_with_hz(10)
            },
        );
        bar.set_style(
            ProgressStyle::with_template(
                "{msg:24!} {bar:30} {bytes:>10}/{total_bytes:<10} {binary_bytes_per_sec:>12} ETA {eta:>4} {prefix}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        Bar { bar }
    }

    fn start(&self, name: &str, total: u64) {
        self.bar.reset();
        self.bar.set_length(total);
        self.bar.set_position(0);
        self.bar.set_message(name.to_string());
    }

    fn update(&self, progress: Progress) {
        self.bar.set_position(progress.done.min(progress.total));
        if progress.sent > 0 {
            self.bar.set_prefix(format!(
                "resent {:.2} %",
                progress.resent as f64 * 100.0 / progress.sent as f64
            ));
        }
    }
}

pub fn copy(args: &CopyArgs, storage: &keep::Storage) -> Outcome {
    let options = options(args)?;
    let source = client::parse_endpoint(&args.source);
    let destination = client::parse_endpoint(&args.destination);
    match (&source, &destination) {
        (Endpoint::Local(_), Endpoint::Local(_)) => {
            return Err(usage(format!(
                "invalid value '{}' for 'DESTINATION': one of SOURCE and DESTINATION must be HOST:PATH",
                args.destination
            )))
        }
        (Endpoint::Remote { .. }, Endpoint::Remote { .. }) => {
            return Err(usage(format!(
                "invalid value '{}' for 'DESTINATION': one of SOURCE and DESTINATION must be a local path",
                args.destination
            )))
        }
        (Endpoint::Local(path), _) if !path.exists() => {
            return Err(usage(format!(
                "invalid value '{}' for 'SOURCE': no such file or directory",
                args.source
            )))
        }
        (Endpoint::Local(path), _) if path.is_dir() && !args.recursive => {
            return Err(usage(format!(
                "invalid value '{}' for 'SOURCE': a directory (copy it with -r)",
                args.source
            )))
        }
        _ => {}
    }
    let store = storage.open_for_run()?;
    let cancel = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, cancel.clone())
            .context("installing a signal handler")?;
    }
    let bar = Bar::new(args.quiet || args.json);
    let notes = RefCell::new(Vec::<String>::new());
    let note = |line: &str| {
        bar.bar.suspend(|| eprintln!("linerate: {line}"));
        notes.borrow_mut().push(line.to_string());
    };
    let started = |name: &str, total: u64| bar.start(name, total);
    let progress = |p: Progress| bar.update(p);
    let events = CopyEvents {
        file_started: &started,
        progress: &progress,
        note: &note,
    };
    let started_at = std::time::SystemTime::now();
    let result = client::copy(&source, &destination, &options, &events, &cancel);
    bar.bar.finish_and_clear();
    let summary = match result {
        Ok(summary) => summary,
        Err(TransferError::Interrupted) => return Err(Failure::Status(130).into()),
        Err(e) => return Err(anyhow!("copy failed: {e}")),
    };
    let fixed = matches!(options.rate, RateConfig::Fixed { .. });
    let diagnosis = overall(&summary, fixed);
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let document = crate::copy_report::document(&summary, &diagnosis, started_at, &command);
    if args.json {
        println!("{}", document.to_json().map_err(|e| anyhow!(e))?);
    } else {
        print_summary(&summary, &document, &diagnosis, args.diagnose);
    }
    if let Some(mut store) = store {
        let json = document.to_json().map_err(|e| anyhow!(e))?;
        let id = store
            .insert(&document, &json, &command)
            .map_err(|e| anyhow!(e))?;
        if !args.json {
            eprintln!("linerate: stored as run {id} in {}", store.path());
        }
    }
    Ok(())
}

/// The whole copy's diagnosis: its files' figures summed, as one transfer.
pub fn overall(summary: &CopySummary, fixed_rate: bool) -> Diagnosis {
    let mut total = linerate_transfer::transport::FileOutcome::default();
    for file in &summary.files {
        let o = &file.outcome;
        total.bytes += o.bytes;
        total.resumed_bytes += o.resumed_bytes;
        total.wall_s += o.wall_s;
        total.payload_bytes += o.payload_bytes;
        total.resent_bytes += o.resent_bytes;
        for (sum, part) in [(&mut total.local, &o.local), (&mut total.remote, &o.remote)] {
            sum.disk_busy_s += part.disk_busy_s;
            sum.cpu_s += part.cpu_s;
            sum.wall_s += part.wall_s;
        }
        total.waits.pacing_s += o.waits.pacing_s;
        total.waits.window_s += o.waits.window_s;
        total.waits.receiver_s += o.waits.receiver_s;
        total.waits.reader_s += o.waits.reader_s;
        total.waits.tail_s += o.waits.tail_s;
        total.bottleneck_bps = o.bottleneck_bps.or(total.bottleneck_bps);
        total.random_loss = o.random_loss.or(total.random_loss);
    }
    // The whole copy's wall time, set-up included.
    total.wall_s = summary.wall_s.max(total.wall_s);
    diagnose(&total, summary.direction == Direction::Push, fixed_rate)
}

fn print_summary(summary: &CopySummary, document: &Document, diagnosis: &Diagnosis, detail: bool) {
    let bytes: u64 = summary.files.iter().map(|f| f.outcome.bytes).sum();
    let resumed: u64 = summary.files.iter().map(|f| f.outcome.resumed_bytes).sum();
    if summary.files.len() > 1 {
        for file in &summary.files {
            println!(
                "{} -> {}  {} bytes in {:.2} s",
                file.source, file.destination, file.outcome.bytes, file.outcome.wall_s
            );
        }
    }
    if let Document::Test(report) = document {
        if let Some(copy) = &report.copy {
            print!("{}", text::render_copy(copy, Scale::Adaptive));
        }
    }
    if detail {
        let wall = diagnosis.wall_s.max(1e-9);
        let share = |s: f64| s * 100.0 / wall;
        println!("Where the sender's time went ({:.2} s):", diagnosis.wall_s);
        println!(
            "  held by the network (pacing, window) {:>8.2} s {:>5.1} %",
            diagnosis.network_s,
            share(diagnosis.network_s)
        );
        println!(
            "    of which the window was full       {:>8.2} s {:>5.1} %",
            diagnosis.window_s,
            share(diagnosis.window_s)
        );
        println!(
            "  waiting for the receiver's window    {:>8.2} s {:>5.1} %",
            diagnosis.receiver_s,
            share(diagnosis.receiver_s)
        );
        println!(
            "  waiting for its own disk reads       {:>8.2} s {:>5.1} %",
            diagnosis.sender_disk_s,
            share(diagnosis.sender_disk_s)
        );
        println!(
            "  waiting for the last ACKs            {:>8.2} s {:>5.1} %",
            diagnosis.tail_s,
            share(diagnosis.tail_s)
        );
        println!(
            "  working (set-up, CPU)                {:>8.2} s {:>5.1} %",
            diagnosis.busy_s,
            share(diagnosis.busy_s)
        );
        println!(
            "  disk busy: sender {:.2} s read, receiver {:.2} s write and sync",
            diagnosis.sender_disk_busy_s, diagnosis.receiver_disk_busy_s
        );
        println!(
            "  CPU: sender {:.2} s, receiver {:.2} s ({:.2} and {:.2} s per GB moved)",
            diagnosis.sender_cpu_s,
            diagnosis.receiver_cpu_s,
            diagnosis.sender_cpu_s * 1e9 / (bytes - resumed).max(1) as f64,
            diagnosis.receiver_cpu_s * 1e9 / (bytes - resumed).max(1) as f64
        );
    }
}

fn rate_text(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2} Gbit/s", bps / 1e9)
    } else {
        format!("{:.1} Mbit/s", bps / 1e6)
    }
}

pub fn disk(args: &DiskArgs) -> Outcome {
    if !args.path.is_dir() {
        return Err(usage(format!(
            "invalid value '{}' for 'PATH': not a directory",
            args.path.display()
        )));
    }
    let bar = Bar::new(args.json);
    bar.start("write", args.size);
    let progress = |phase: &str, at: u64| {
        if bar.bar.message() != phase {
            bar.start(phase, args.size);
        }
        bar.bar.set_position(at);
    };
    let rates = linerate_transfer::disk::measure(&args.path, args.size, &progress)
        .with_context(|| format!("measuring {}", args.path.display()))?;
    bar.bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rates)?);
    } else {
        println!(
            "{}: {} bytes written at {:.0} MB/s (synced), read back at {:.0} MB/s (uncached)",
            args.path.display(),
            rates.bytes,
            rates.write_bps / 1e6,
            rates.read_bps / 1e6
        );
        println!(
            "A copy into it can go at most {} (write), out of it {} (read)",
            rate_text(rates.write_bps * 8.0),
            rate_text(rates.read_bps * 8.0)
        );
    }
    Ok(())
}
