//! The one way results leave a run. A command builds its sinks (text or JSON on stdout,
//! the results database, a progress bar) and every campaign sends its live [`Event`]s and
//! its finished document through them; a metrics exporter or a central archive is one
//! more [`Sink`], not a seventh copy of the printing code.
//!
//! The finished document is encoded to JSON once ([`Finished`]), so what is printed with
//! `--json` and what is kept are the same bytes.

use anyhow::{anyhow, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use linerate_model::{Direction, TestConfig, Workload};
use linerate_report::document::Document;
use linerate_report::live::TestUpdate;
use linerate_report::sweep::{SweepPoint, SweepTable};
use linerate_report::text::{self, TRIAL_HEADER};
use linerate_report::units::Scale;
use linerate_report::{Headline, RateTrial, Report};
use linerate_store::Store;
use std::io::Write;
use std::time::Duration;

/// Something that happened while a run was under way.
#[derive(Debug)]
pub enum Event<'a> {
    /// A line for a reader (what is about to be measured, a baseline's figures).
    Note(&'a str),
    /// A live event of the test running now.
    Test(&'a TestUpdate),
    /// An iteration of a repeated test ended, with its headline value.
    Iteration {
        index: u32,
        report: &'a Report,
        value: f64,
    },
    /// A rate-search trial ended (its number from 1).
    Trial { number: usize, trial: &'a RateTrial },
    /// A sweep point is about to run (`index` from 0 of `of`), with the time the rest
    /// of the sweep is expected to take.
    PointStarting {
        index: usize,
        of: usize,
        left_s: f64,
    },
    /// A sweep point ended, with its result or why it failed.
    Point(&'a SweepPoint),
}

/// A finished run: its document, and that document's JSON text, encoded once.
pub struct Finished<'a> {
    pub document: &'a Document,
    pub json: &'a str,
}

/// Where a run's events and its finished document go.
pub trait Sink {
    /// Hears an event while the run is under way.
    fn event(&mut self, _event: &Event<'_>) {}
    /// Takes the finished run; an error fails the command after the result was shown.
    fn finish(&mut self, _run: &Finished<'_>) -> Result<()> {
        Ok(())
    }
}

/// A sink that drops everything: for a test inside a campaign whose own events are
/// what a reader follows (a sweep point's iterations).
pub struct Discard;

impl Sink for Discard {}

/// Several sinks, each hearing every event and the finished run, in order.
#[derive(Default)]
pub struct Sinks<'a>(pub Vec<Box<dyn Sink + 'a>>);

impl<'a> Sinks<'a> {
    pub fn new() -> Sinks<'a> {
        Sinks(Vec::new())
    }

    pub fn with(mut self, sink: impl Sink + 'a) -> Sinks<'a> {
        self.0.push(Box::new(sink));
        self
    }

    /// These sinks, then `others`.
    pub fn append(mut self, others: Sinks<'a>) -> Sinks<'a> {
        self.0.extend(others.0);
        self
    }

    /// Encodes `document` once and hands it to every sink.
    pub fn finish_document(&mut self, document: &Document) -> Result<()> {
        let json = document.to_json().context("cannot encode the result")?;
        self.finish(&Finished {
            document,
            json: &json,
        })
    }
}

impl Sink for Sinks<'_> {
    fn event(&mut self, event: &Event<'_>) {
        for sink in &mut self.0 {
            sink.event(event);
        }
    }

    fn finish(&mut self, run: &Finished<'_>) -> Result<()> {
        for sink in &mut self.0 {
            sink.finish(run)?;
        }
        Ok(())
    }
}

/// How a test's live intervals look in text.
#[derive(Debug)]
struct IntervalView {
    config: TestConfig,
    per_flow: bool,
    /// Printed live; a repeated test prints one line per iteration instead.
    live: bool,
}

/// Text for a reader: notes, the live intervals, each iteration, trial or sweep row as it
/// ends, and at the end what the live lines have not shown yet.
pub struct TextSink<W: Write> {
    out: W,
    scale: Scale,
    intervals: Option<IntervalView>,
    table: Option<SweepTable>,
    /// Lines are written around this bar so it is not torn.
    bar: Option<ProgressBar>,
}

impl<W: Write> TextSink<W> {
    pub fn new(out: W, scale: Scale) -> TextSink<W> {
        TextSink {
            out,
            scale,
            intervals: None,
            table: None,
            bar: None,
        }
    }

    /// Shows `config`'s intervals as they arrive (when `live`) with every flow's lines
    /// (`per_flow`).
    pub fn intervals(mut self, config: &TestConfig, per_flow: bool, live: bool) -> Self {
        self.intervals = Some(IntervalView {
            config: config.clone(),
            per_flow,
            live,
        });
        self
    }

    /// Shows sweep points as rows of `table`.
    pub fn table(mut self, table: SweepTable) -> Self {
        self.table = Some(table);
        self
    }

    /// Writes around `bar` (a progress bar on the same terminal).
    pub fn around(mut self, bar: &ProgressBar) -> Self {
        self.bar = Some(bar.clone());
        self
    }

    /// The sink's output, for a caller that wrote into memory.
    pub fn into_inner(self) -> W {
        self.out
    }

    fn line(&mut self, line: &str) {
        let out = &mut self.out;
        match &self.bar {
            Some(bar) => bar.suspend(|| {
                let _ = writeln!(out, "{line}");
            }),
            None => {
                let _ = writeln!(out, "{line}");
            }
        }
    }

    fn test_event(&mut self, event: &TestUpdate) {
        for line in self.test_lines(event) {
            self.line(&line);
        }
    }

    /// The lines a test's live event shows (none without an interval view).
    fn test_lines(&self, event: &TestUpdate) -> Vec<String> {
        let Some(view) = &self.intervals else {
            return Vec::new();
        };
        match event {
            TestUpdate::Connected { server } => vec![format!(
                "Server: {} on {} (kernel {}, {} x {})",
                server.software, server.hostname, server.kernel, server.cores, server.cpu_model
            )],
            TestUpdate::Started if view.live && view.config.interval_s > 0.0 => {
                let header = match view.config.workload {
                    Workload::Stream => {
                        text::interval_header(view.config.protocol == linerate_model::Protocol::Udp)
                    }
                    Workload::Rr | Workload::Crr => linerate_report::rr::RR_INTERVAL_HEADER,
                };
                vec![header.to_string()]
            }
            TestUpdate::Interval(interval) if view.live => {
                interval_lines(view, interval, self.scale)
            }
            _ => Vec::new(),
        }
    }
}

/// The lines of one live interval.
fn interval_lines(
    view: &IntervalView,
    interval: &linerate_model::SideInterval,
    scale: Scale,
) -> Vec<String> {
    let config = &view.config;
    match config.workload {
        Workload::Stream => {
            let flows: Vec<u32> = (0..config.connections()).collect();
            let sends = |id: u32| config.flow_direction(id) != Direction::Reverse;
            text::side_interval_lines(interval, &sends, &flows, scale, view.per_flow)
        }
        Workload::Rr | Workload::Crr => linerate_report::rr::rr_interval_line("SUM", interval)
            .into_iter()
            .collect(),
    }
}

impl<W: Write> Sink for TextSink<W> {
    fn event(&mut self, event: &Event<'_>) {
        match event {
            Event::Note(line) => self.line(line),
            Event::Test(progress) => self.test_event(progress),
            Event::Iteration {
                index,
                report,
                value,
            } => {
                let line = format!(
                    "Iteration {}: {}",
                    index + 1,
                    Headline::of(&report.config).format(*value, self.scale)
                );
                self.line(&line);
            }
            Event::Trial { number, trial } => {
                if *number == 1 {
                    self.line(TRIAL_HEADER);
                }
                let line = text::trial_line(*number, trial, self.scale);
                self.line(&line);
            }
            Event::PointStarting { index: 0, .. } => {
                if let Some(header) = self.table.as_ref().map(SweepTable::header) {
                    self.line(&header);
                }
            }
            Event::PointStarting { .. } => {}
            Event::Point(point) => {
                if let Some(row) = self.table.as_ref().map(|t| t.row(point)) {
                    self.line(&row);
                }
            }
        }
    }

    fn finish(&mut self, run: &Finished<'_>) -> Result<()> {
        let text = run.document.render_text_after_live(self.scale);
        let out = &mut self.out;
        match &self.bar {
            Some(bar) => bar.suspend(|| write!(out, "{text}")),
            None => write!(out, "{text}"),
        }
        .context("cannot write the result")?;
        out.flush().context("cannot write the result")
    }
}

/// The finished document as JSON, alone on its output (`--json`).
pub struct JsonSink<W: Write>(pub W);

impl<W: Write> Sink for JsonSink<W> {
    fn finish(&mut self, run: &Finished<'_>) -> Result<()> {
        writeln!(self.0, "{}", run.json).context("cannot write the result")?;
        self.0.flush().context("cannot write the result")
    }
}

/// Keeps the finished run in the results database and says where, on `notes` (stdout
/// after text; stderr after JSON, so that stdout stays one document).
pub struct StoreSink<W: Write> {
    store: Store,
    command: String,
    notes: W,
}

impl<W: Write> StoreSink<W> {
    /// Keeps runs in `store`, recorded as run by `command`.
    pub fn new(store: Store, command: String, notes: W) -> StoreSink<W> {
        StoreSink {
            store,
            command,
            notes,
        }
    }
}

impl<W: Write> Sink for StoreSink<W> {
    fn finish(&mut self, run: &Finished<'_>) -> Result<()> {
        let id = self
            .store
            .insert(run.document, run.json, &self.command)
            .map_err(|e| anyhow!(e))
            .context("the result above was not stored")?;
        // One write, so that a writer that prefixes each write sees the whole line.
        let note = format!(
            "Stored as run {id} in {} ('linerate show {id}')\n",
            self.store.path()
        );
        self.notes
            .write_all(note.as_bytes())
            .and_then(|()| self.notes.flush())
            .context("cannot write the result")
    }
}

/// A bar with the sweep points done and the time left, on stderr when it is a terminal.
pub struct SweepBar {
    bar: ProgressBar,
}

impl SweepBar {
    /// A bar for `points` points; hidden when `hidden`.
    pub fn new(points: u64, hidden: bool) -> SweepBar {
        let target = if hidden {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        };
        let bar = ProgressBar::with_draw_target(Some(points), target);
        if let Ok(style) =
            ProgressStyle::with_template("[{elapsed_precise}] {bar:30} {pos}/{len} points, {msg}")
        {
            bar.set_style(style);
        }
        if !hidden {
            bar.enable_steady_tick(Duration::from_millis(500));
        }
        SweepBar { bar }
    }

    /// The bar itself, for a text sink to write around.
    pub fn bar(&self) -> &ProgressBar {
        &self.bar
    }
}

impl Sink for SweepBar {
    fn event(&mut self, event: &Event<'_>) {
        match event {
            Event::PointStarting { left_s, .. } => self
                .bar
                .set_message(format!("about {} left", short_duration(*left_s))),
            Event::Point(_) => self.bar.inc(1),
            _ => {}
        }
    }

    fn finish(&mut self, _run: &Finished<'_>) -> Result<()> {
        self.bar.finish_and_clear();
        Ok(())
    }
}

impl Drop for SweepBar {
    fn drop(&mut self) {
        // A sweep that failed before its end leaves no bar behind on the terminal.
        self.bar.finish_and_clear();
    }
}

/// A duration as a person would say it: "40 s", "7 min", "2.5 h".
pub fn short_duration(seconds: f64) -> String {
    let seconds = seconds.max(0.0).round() as u64;
    match seconds {
        0..=99 => format!("{seconds} s"),
        100..=5999 => format!("{} min", seconds.div_ceil(60)),
        _ => format!("{:.1} h", seconds as f64 / 3600.0),
    }
}

/// The sinks of an ordinary command: text on stdout (or the JSON document with `json`),
/// then the store when there is one, its note after the text or on stderr after JSON.
pub fn standard<'a>(json: bool, text: impl Sink + 'a, store: Option<Store>) -> Sinks<'a> {
    let mut sinks = if json {
        Sinks::new().with(JsonSink(std::io::stdout()))
    } else {
        Sinks::new().with(text)
    };
    if let Some(store) = store {
        let command = crate::storage::command_line();
        sinks = if json {
            sinks.with(StoreSink::new(store, command, std::io::stderr()))
        } else {
            sinks.with(StoreSink::new(store, command, std::io::stdout()))
        };
    }
    sinks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn text_of(sink: TextSink<Vec<u8>>) -> String {
        String::from_utf8(sink.into_inner()).unwrap()
    }

    #[test]
    fn live_intervals_are_printed_only_when_live() {
        let report = fixtures::report_of(fixtures::stream_config(), 1e9);
        let interval = fixtures::sent_interval(0.0, 1.0, 125_000_000);
        for live in [true, false] {
            let mut sink =
                TextSink::new(Vec::new(), Scale::Adaptive).intervals(&report.config, false, live);
            sink.event(&Event::Test(&TestUpdate::Started));
            sink.event(&Event::Test(&TestUpdate::Interval(Box::new(
                interval.clone(),
            ))));
            let out = text_of(sink);
            assert_eq!(out.contains(text::INTERVAL_HEADER), live, "{out}");
            assert_eq!(out.contains("1.00 Gbits/sec"), live, "{out}");
        }
    }

    #[test]
    fn the_json_sink_and_the_store_get_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("r.db")).unwrap();
        let document = Document::Test(Box::new(fixtures::report_of(
            fixtures::stream_config(),
            1e9,
        )));
        let mut printed = Vec::new();
        let mut notes = Vec::new();
        {
            let mut sinks = Sinks::new()
                .with(JsonSink(&mut printed))
                .with(StoreSink::new(store, "linerate stream".into(), &mut notes));
            sinks.finish_document(&document).unwrap();
        }
        let printed = String::from_utf8(printed).unwrap();
        let notes = String::from_utf8(notes).unwrap();
        assert!(notes.starts_with("Stored as run 1 in "), "{notes}");
        let store = Store::open(&dir.path().join("r.db")).unwrap();
        let kept = store.get(1).unwrap();
        assert_eq!(kept.json.trim_end(), printed.trim_end());
        assert_eq!(kept.row.command, "linerate stream");
    }

    #[test]
    fn an_iteration_line_uses_the_tests_headline() {
        let report = fixtures::report_of(fixtures::stream_config(), 1e9);
        let mut sink = TextSink::new(Vec::new(), Scale::Adaptive);
        sink.event(&Event::Iteration {
            index: 2,
            report: &report,
            value: 2e9,
        });
        assert_eq!(text_of(sink), "Iteration 3: 2.00 Gbits/sec\n");
    }

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(short_duration(40.4), "40 s");
        assert_eq!(short_duration(401.0), "7 min");
        assert_eq!(short_duration(9000.0), "2.5 h");
        assert_eq!(short_duration(-3.0), "0 s");
    }
}
