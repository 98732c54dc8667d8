//! `linerate copy` and `linerate disk` as the user runs them: the ends checked, the
//! progress bar, the summary with its diagnosis, and the result document.

use crate::failure::{usage, Failure};
use crate::sink::{self, Finished, Sink};
use crate::storage::Storage;
use crate::{cancel, copy};
use anyhow::{anyhow, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use linerate_report::document::Document;
use linerate_report::text;
use linerate_report::units::Scale;
use linerate_transfer::client::{self, CopyEvents, CopyOptions, CopySummary, Endpoint};
use linerate_transfer::diagnosis::Diagnosis;
use linerate_transfer::error::TransferError;
use linerate_transfer::outcome::TransferProgress;
use linerate_transfer::rate::RateConfig;
use std::cell::RefCell;
use std::path::Path;

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

    fn update(&self, progress: TransferProgress) {
        self.bar.set_position(progress.done.min(progress.total));
        if progress.sent > 0 {
            self.bar.set_prefix(format!(
                "resent {:.2} %",
                progress.resent as f64 * 100.0 / progress.sent as f64
            ));
        }
    }
}

/// What `linerate copy` is asked besides its options.
#[derive(Debug, Clone, Copy)]
pub struct CopyAsk<'a> {
    pub source: &'a str,
    pub destination: &'a str,
    pub recursive: bool,
    /// No progress bar.
    pub quiet: bool,
    pub json: bool,
    /// Where the sender's time went, after the summary.
    pub diagnose: bool,
}

/// `linerate copy`: checks the two ends, copies with a progress bar (notes above it),
/// and keeps and prints the result; an interrupted copy says how to resume it.
pub fn run(ask: &CopyAsk, options: &CopyOptions, storage: &Storage) -> Result<()> {
    let source = client::parse_endpoint(ask.source);
    let destination = client::parse_endpoint(ask.destination);
    match (&source, &destination) {
        (Endpoint::Local(_), Endpoint::Local(_)) => {
            return Err(usage(format!(
                "invalid value '{}' for 'DESTINATION': one of SOURCE and DESTINATION must be HOST:PATH",
                ask.destination
            )))
        }
        (Endpoint::Remote { .. }, Endpoint::Remote { .. }) => {
            return Err(usage(format!(
                "invalid value '{}' for 'DESTINATION': one of SOURCE and DESTINATION must be a local path",
                ask.destination
            )))
        }
        (Endpoint::Local(path), _) if !path.exists() => {
            return Err(usage(format!(
                "invalid value '{}' for 'SOURCE': no such file or directory",
                ask.source
            )))
        }
        (Endpoint::Local(path), _) if path.is_dir() && !ask.recursive => {
            return Err(usage(format!(
                "invalid value '{}' for 'SOURCE': a directory (copy it with -r)",
                ask.source
            )))
        }
        _ => {}
    }
    let store = storage.open_for_run()?;
    let cancel = cancel::on_signals()?;
    let bar = Bar::new(ask.quiet || ask.json);
    let notes = RefCell::new(Vec::<String>::new());
    let note = |line: &str| {
        bar.bar.suspend(|| eprintln!("linerate: {line}"));
        notes.borrow_mut().push(line.to_string());
    };
    let current = RefCell::new(None::<String>);
    let started = |name: &str, total: u64| {
        *current.borrow_mut() = Some(name.to_string());
        bar.start(name, total)
    };
    let progress = |p: TransferProgress| bar.update(p);
    let events = CopyEvents {
        file_started: &started,
        progress: &progress,
        note: &note,
    };
    let started_at = std::time::SystemTime::now();
    let result = client::copy(&source, &destination, options, &events, &cancel);
    bar.bar.finish_and_clear();
    let summary = match result {
        Ok(summary) => summary,
        Err(TransferError::Interrupted) => {
            let push = matches!(source, Endpoint::Local(_));
            eprintln!(
                "linerate: {}",
                interrupted_note(current.borrow().as_deref(), push)
            );
            return Err(Failure::Status(130).into());
        }
        Err(e) => return Err(anyhow!("copy failed: {e}")),
    };
    let fixed = matches!(options.rate, RateConfig::Fixed { .. });
    let diagnosis = copy::overall(&summary, fixed);
    let host = match (&source, &destination) {
        (Endpoint::Remote { host, .. }, _) | (_, Endpoint::Remote { host, .. }) => host.clone(),
        _ => summary.server.clone(),
    };
    let document = copy::document(&summary, &host, &diagnosis, started_at);
    let text = CopyText {
        summary: &summary,
        diagnosis: &diagnosis,
        detail: ask.diagnose,
    };
    let mut sinks = sink::standard(ask.json, text, store);
    sinks.finish_document(&document)
}

/// A copy's summary in text: each file when there are several, the copy's figures, and
/// where the sender's time went with `--diagnose`.
struct CopyText<'a> {
    summary: &'a CopySummary,
    diagnosis: &'a Diagnosis,
    detail: bool,
}

impl Sink for CopyText<'_> {
    fn finish(&mut self, run: &Finished<'_>) -> Result<()> {
        print_summary(self.summary, run.document, self.diagnosis, self.detail);
        Ok(())
    }
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
        print!("{}", diagnosis.render_detail(bytes - resumed));
    }
}

fn rate_text(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2} Gbit/s", bps / 1e9)
    } else {
        format!("{:.1} Mbit/s", bps / 1e6)
    }
}

/// `linerate disk`: the sequential write (synced) and read rates of a file system, and the
/// copy rates they allow.
pub fn disk(path: &Path, size: u64, json: bool) -> Result<()> {
    if !path.is_dir() {
        return Err(usage(format!(
            "invalid value '{}' for 'PATH': not a directory",
            path.display()
        )));
    }
    let bar = Bar::new(json);
    bar.start("write", size);
    let progress = |phase: &str, at: u64| {
        if bar.bar.message() != phase {
            bar.start(phase, size);
        }
        bar.bar.set_position(at);
    };
    let rates = match linerate_transfer::disk::measure(path, size, &progress) {
        Ok(rates) => rates,
        Err(e) if e.kind() == std::io::ErrorKind::StorageFull => {
            return Err(usage(format!(
                "invalid value '{}' for 'PATH': {e}; a smaller --size fits",
                path.display()
            )))
        }
        Err(e) => return Err(anyhow!("measuring {}: {e}", path.display())),
    };
    bar.bar.finish_and_clear();
    if json {
        println!("{}", serde_json::to_string_pretty(&rates)?);
    } else {
        println!(
            "{}: {} bytes written at {:.0} MB/s (synced), read back at {:.0} MB/s ({})",
            path.display(),
            rates.bytes,
            rates.write_bps / 1e6,
            rates.read_bps / 1e6,
            if rates.memory_backed {
                "from memory: the file system is kept in memory, with no device to read from"
            } else {
                "uncached"
            }
        );
        println!(
            "A copy into it can go at most {} (write), out of it {} (read)",
            rate_text(rates.write_bps * 8.0),
            rate_text(rates.read_bps * 8.0)
        );
    }
    Ok(())
}

/// What an interrupted copy kept and how to go on: the file in progress is kept as a
/// `.part` with its journal (on the server for a push), and the same command resumes it.
fn interrupted_note(file: Option<&str>, push: bool) -> String {
    let command = crate::storage::command_line();
    match file {
        None => {
            format!("interrupted before any file began; run the same command to copy: {command}")
        }
        Some(name) => format!(
            "interrupted: what arrived of {name} is kept {}as {name}.part with its journal; \
             run the same command to resume: {command}",
            if push { "on the server " } else { "" }
        ),
    }
}
