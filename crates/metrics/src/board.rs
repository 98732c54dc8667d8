//! The board: the newest figures of every {mesh, src, dst, test, direction, protocol}, the
//! counts of every test's outcomes, each pair's recent history and its baseline, as the
//! mesh (or a server) measured them. Sans-IO: rows and documents go in, a scrape, the grid
//! and the alerts read it out. A scrape never starts a test.

use linerate_model::clock::UnixTime;
use linerate_model::mesh_row::{MeshRow, Outcome};
use linerate_report::document::Document;
use linerate_report::stamp::DELAY_BOUNDS_US;
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};

/// Upper bounds (seconds) of the round-trip histogram's buckets: 100 us to 1 s, about
/// two to a decade, enough to tell a LAN probe from a continental and an intercontinental
/// one. Few, because every bucket is a line per pair in a scrape (docs/metrics.md).
pub const RTT_BUCKETS: [f64; 9] = [0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.1, 1.0];

/// A pair's history the board keeps (the grid's plot, the baseline).
pub const HISTORY: usize = 240;

/// The most series a board holds (a server's clients come and go; a mesh of 100 hosts and
/// 4 tests has 39,600).
pub const MAX_SERIES: usize = 100_000;

/// What one series is about: the labels every figure of a result carries.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Key {
    pub mesh: String,
    pub src: String,
    pub dst: String,
    pub test: String,
    pub direction: String,
    pub protocol: String,
}

impl Key {
    pub fn of(row: &MeshRow) -> Key {
        Key {
            mesh: row.mesh.clone(),
            src: row.src.clone(),
            dst: row.dst.clone(),
            test: row.test.clone(),
            direction: row.direction.clone(),
            protocol: row.protocol.clone(),
        }
    }
}

pub use linerate_model::measure::Measure;

/// Round-trip quantiles of one run, seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Quantiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
}

/// The newest result of a series.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Latest {
    /// How the job ended: the readers match on it (the grid's cell, the assessment, the
    /// families that show a figure only where it was measured).
    #[serde(skip)]
    pub outcome: Outcome,
    pub cycle: u64,
    pub started_at: f64,
    pub ended_at: f64,
    pub run_id: Option<i64>,
    /// The headline: goodput (bit/s) or the median transaction time (s).
    pub value: Option<f64>,
    pub text: String,
    pub goodput_bps: Option<f64>,
    /// Datagrams' bytes lost on the way: 1 - received / sent (UDP streams).
    pub loss_ratio: Option<f64>,
    pub rtt: Option<Quantiles>,
    pub duration_s: Option<f64>,
    pub retransmits: Option<u64>,
    pub cpu_s_per_gbit: Option<f64>,
    pub responsiveness: Option<Responsiveness>,
    /// STAMP: the delay this way.
    pub one_way: Option<OneWayDelay>,
    /// A trace: its distance to the destination (where a flow reached it).
    pub traced: bool,
    /// A call: this way's mean opinion score.
    pub mos: Option<f64>,
    /// A video or a call: its way's Quality of Outcome score (draft-ietf-ippm-qoo-09), 0
    /// to 100.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qoo: Option<f64>,
}

impl Latest {
    /// Whether the newest job measured: a figure is shown only then.
    pub fn measured(&self) -> bool {
        self.outcome.is_ok()
    }
}

/// An RPM test's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Responsiveness {
    /// Round trips a minute under load, the lower of the two directions.
    pub rpm: Option<f64>,
    /// Goodput each way, counted where it arrived (bits per second).
    pub download_bps: f64,
    pub upload_bps: f64,
    /// A new connection's handshake on the idle path, seconds.
    pub idle_latency_s: f64,
    /// What the load added to it, seconds (the grade's figure).
    pub added_latency_s: Option<f64>,
}

/// A STAMP window's delay one way, seconds: the one-way delay where the clocks could
/// vouch for it, and always the delay above the way's minimum in the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct OneWayDelay {
    pub p50_s: Option<f64>,
    pub p99_s: Option<f64>,
    pub added_p50_s: f64,
    pub added_p99_s: f64,
}

impl OneWayDelay {
    fn of(way: &linerate_report::stamp::OneWay) -> OneWayDelay {
        OneWayDelay {
            p50_s: way.delay_us.as_ref().map(|d| d.p50 / 1e6),
            p99_s: way.delay_us.as_ref().map(|d| d.p99 / 1e6),
            added_p50_s: way.added_us.p50 / 1e6,
            added_p99_s: way.added_us.p99 / 1e6,
        }
    }
}

/// What a series has added up over every result the board saw.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    pub ok: u64,
    pub failed: u64,
    pub skipped: u64,
    /// Transactions per round-trip bucket ([`RTT_BUCKETS`], then +Inf), not cumulative.
    pub rtt_buckets: [u64; RTT_BUCKETS.len() + 1],
    pub rtt_count: u64,
    pub rtt_sum_s: f64,
    /// STAMP's one-way delays per bucket ([`RTT_BUCKETS`], then +Inf), where told.
    pub one_way_buckets: [u64; RTT_BUCKETS.len() + 1],
    pub one_way_count: u64,
    pub one_way_sum_s: f64,
    /// TCP retransmits of every result that counted them.
    pub retransmits: u64,
    /// A trace series: the traces that ran, and the times one went another way than the
    /// one before it.
    pub traces: u64,
    pub path_changes: u64,
}

/// One point of a pair's history.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Point {
    pub at: f64,
    /// `None`: the test failed or was skipped.
    pub value: Option<f64>,
}

/// A series' baseline: the median and spread of its recent successful values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Baseline {
    pub median: f64,
    /// Median absolute deviation from the median.
    pub mad: f64,
    pub samples: usize,
}

#[derive(Debug, Clone, Default)]
pub struct Series {
    /// Changes with every result (the board's count of results then): an encoder that
    /// cached the series' text knows when it is stale.
    pub revision: u64,
    pub measure: Option<Measure>,
    pub latest: Latest,
    pub totals: Totals,
    pub history: VecDeque<Point>,
    /// A trace series: the way its newest trace went, which the next is compared with.
    pub route: Option<linerate_report::trace::Route>,
}

/// A pair's path changed: a trace went another way than the pair's trace before it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathMark {
    /// The trace test that saw it, and its way (from `src` to `dst`).
    pub test: String,
    pub src: String,
    pub dst: String,
    /// The change happened after the trace before ended (`since`) and before the one that
    /// saw it ended (`at`), Unix seconds.
    pub since: f64,
    pub at: f64,
    /// "hop 2: 10.0.2.2 -> 10.0.3.2 (1 of 4 flows); was ..., now ...".
    pub words: String,
}

impl PathMark {
    /// "the path a -> b changed between 12:00:01 and 12:00:31 (trace 'path': hop 2: ...)".
    pub fn describe(&self) -> String {
        let time = |unix: f64| {
            let at = UnixTime::from_seconds(unix).system();
            humantime::format_rfc3339_seconds(at).to_string()
        };
        format!(
            "the path {} -> {} changed between {} and {} (trace '{}': {})",
            self.src,
            self.dst,
            time(self.since),
            time(self.at),
            self.test,
            self.words
        )
    }
}

/// The path changes a board keeps of each pair (the grid's marks, the alerts' windows).
pub const MARKS: usize = 16;

impl Series {
    /// The baseline from up to `window` successful results before the newest, once there
    /// are at least `at_least`.
    pub fn baseline(&self, window: usize, at_least: usize) -> Option<Baseline> {
        let mut values: Vec<f64> = self
            .history
            .iter()
            .rev()
            .skip(1)
            .filter_map(|p| p.value)
            .take(window)
            .collect();
        if values.len() < at_least.max(1) {
            return None;
        }
        let middle = median(&mut values);
        let mut deviations: Vec<f64> = values.iter().map(|v| (v - middle).abs()).collect();
        Some(Baseline {
            median: middle,
            mad: median(&mut deviations),
            samples: values.len(),
        })
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return 0.0;
    }
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Every series, by key; and the order hosts and tests were first seen (the grid's).
#[derive(Debug, Default)]
pub struct Board {
    pub series: BTreeMap<Key, Series>,
    pub hosts: Vec<String>,
    pub tests: Vec<String>,
    /// What each test's headline is, as declared.
    pub measures: BTreeMap<String, Measure>,
    /// Results recorded so far (each series' revision is this count at its newest).
    pub results: u64,
    /// The answering services' counts, read at each scrape: a STAMP reflector (`serve
    /// --stamp`), an irtt server (`serve --irtt`).
    pub reflectors: Vec<(Reflector, ReflectorSource)>,
    /// The coordinator's own queues (its store writer, remote write, alerts), read at
    /// each scrape.
    pub process: Option<ProcessSource>,
    /// Each pair's recent path changes, by (mesh, src, dst) as its traces went, newest
    /// last, at most [`MARKS`] a pair.
    pub path_marks: BTreeMap<(String, String, String), VecDeque<PathMark>>,
    /// Each new series takes room for its whole history at once. A mesh's series each
    /// get a result every interval and fill their history in hours; reserved up front,
    /// a coordinator's memory is what it will be once its series exist, and a growth after
    /// that is a leak, not a history filling. A server's board, whose clients may each
    /// leave one result, grows as it goes.
    pub reserve_history: bool,
}

pub use linerate_model::mesh_row::StoreCounts;

/// What a coordinator's queues hold and lost, for the coordinator's own metric families
/// (`PROCESS_FAMILIES`); `None` where the queue is not there.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessCounts {
    pub store: Option<StoreCounts>,
    /// Remote-write requests dropped (the queue full, or refused for good).
    pub remote_write_dropped: Option<u64>,
    /// Alert notifications dropped likewise.
    pub notifications_dropped: Option<u64>,
}

/// Reads a coordinator's queue counts when asked.
#[derive(Clone)]
pub struct ProcessSource(pub std::sync::Arc<dyn Fn() -> ProcessCounts + Send + Sync>);

impl std::fmt::Debug for ProcessSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProcessSource(..)")
    }
}

/// A service that answers test packets, as its metric families are named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reflector {
    Stamp,
    Irtt,
}

impl Reflector {
    /// The families' prefix, after `linerate_`, and the packets' name in their help.
    pub fn names(self) -> (&'static str, &'static str) {
        match self {
            Reflector::Stamp => ("stamp", "STAMP test packets"),
            Reflector::Irtt => ("irtt", "irtt requests (opens and echoes)"),
        }
    }
}

/// What a reflector did since it started.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReflectorCounts {
    pub answered: u64,
    /// (reason, count) for every reason a test packet is refused.
    pub refused: Vec<(&'static str, u64)>,
    /// Sessions kept now.
    pub sessions: u64,
}

/// Reads a reflector's counts when asked.
#[derive(Clone)]
pub struct ReflectorSource(pub std::sync::Arc<dyn Fn() -> ReflectorCounts + Send + Sync>);

impl std::fmt::Debug for ReflectorSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReflectorSource(..)")
    }
}

/// A run's transaction times: its percentiles, its histogram (upper bound in seconds,
/// count), how many and their sum.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Transactions {
    pub quantiles: Quantiles,
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    pub sum_s: f64,
}

impl Quantiles {
    /// A latency summary's percentiles (microseconds) in seconds.
    fn of_us(latency: &linerate_model::latency::LatencySummary) -> Quantiles {
        Quantiles {
            p50: latency.p50 / 1e6,
            p90: latency.p90 / 1e6,
            p99: latency.p99 / 1e6,
            p999: latency.p999 / 1e6,
        }
    }
}

impl Transactions {
    /// A timed transaction's latency (microseconds) as the series keeps it (seconds).
    pub fn of(latency: &linerate_model::latency::LatencySummary) -> Transactions {
        let l = latency;
        Transactions {
            quantiles: Quantiles::of_us(l),
            buckets: l
                .histogram
                .iter()
                .map(|b| (b.le_us / 1e6, b.count))
                .collect(),
            count: l.count,
            sum_s: l.mean / 1e6 * l.count as f64,
        }
    }
}

/// What one result says, beside its row: the figures a series shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// Counted at the receiver.
    pub goodput_bps: Option<f64>,
    pub loss_ratio: Option<f64>,
    pub rtt: Option<Transactions>,
    /// TCP segments the sender retransmitted (TCP_INFO), when this end sent.
    pub retransmits: Option<u64>,
    /// CPU seconds this end's host spent per gigabit moved.
    pub cpu_s_per_gbit: Option<f64>,
    pub responsiveness: Option<Responsiveness>,
    /// STAMP: the delay this way, and every probe's in buckets where the clocks tell it.
    pub one_way: Option<OneWayDelay>,
    pub one_way_histogram: Option<Transactions>,
    pub duration_s: f64,
    /// A trace (its figure is the row's headline, the distance).
    pub traced: bool,
    /// A call: this way's mean opinion score (the E-model's).
    pub mos: Option<f64>,
    /// A video or a call: its way's Quality of Outcome score, 0 to 100.
    pub qoo: Option<f64>,
}

/// Reads a mesh job's document: goodput for a stream, the timed transaction's latency for
/// rr and crr (the transaction with the most iterations), loss for datagrams, the
/// responsiveness and capacities of an RPM test.
pub fn figures_of(protocol: &str, document: &Document) -> Option<Figures> {
    if let Document::Stamp(report) = document {
        return Some(stamp_figures(report).0);
    }
    if let Document::Trace(_) = document {
        return Some(Figures {
            traced: true,
            ..Figures::default()
        });
    }
    // A multicast receiver's row: the share of the source's datagrams it never got.
    if let Document::Multicast(report) = document {
        let (share, ..) = report.lost_share()?;
        return Some(Figures {
            loss_ratio: Some(share),
            duration_s: report.sent.as_ref().map_or(0.0, |s| s.duration_s),
            ..Figures::default()
        });
    }
    if let Document::Rpm(report) = document {
        let legs = [&report.download, &report.upload];
        return Some(Figures {
            responsiveness: Some(Responsiveness {
                rpm: report.rpm,
                download_bps: report.download.capacity_bps,
                upload_bps: report.upload.capacity_bps,
                idle_latency_s: report.idle_connect_s,
                added_latency_s: report.added_latency_s,
            }),
            duration_s: legs
                .iter()
                .filter_map(|leg| leg.intervals.last())
                .map(|i| i.end_s)
                .sum(),
            ..Figures::default()
        });
    }
    // A client test an agent ran (a stream): its goodput, counted at its receivers.
    if let Document::Test(report) = document {
        if let Some(way) = report.summary.video.as_ref().and_then(|v| v.ways.first()) {
            return Some(video_figures(report, way));
        }
        let stream = report.config.workload == linerate_report::model::Workload::Stream
            && report.summary.call.is_none();
        return stream.then(|| Figures {
            goodput_bps: Some(report.summary.receiver_bps),
            duration_s: report.summary.duration_s,
            ..Figures::default()
        });
    }
    let Document::Profile(report) = document else {
        return None;
    };
    let group = report.groups.first()?;
    let timed = group
        .transactions
        .iter()
        .filter(|t| t.latency_us.count > 0)
        .max_by_key(|t| t.iterations);
    let transactional = timed.is_some_and(|t| t.ops.len() >= 2);
    let rtt = timed
        .filter(|_| transactional)
        .map(|t| Transactions::of(&t.latency_us));
    let s = &report.summary;
    let loss_ratio = (protocol == "udp" && s.sent_bytes > 0)
        .then(|| (1.0 - s.received_bytes as f64 / s.sent_bytes as f64).max(0.0));
    Some(Figures {
        goodput_bps: (!transactional).then_some(s.received_bps),
        loss_ratio,
        rtt,
        duration_s: s.duration_s,
        ..Figures::default()
    })
}

/// A STAMP window's figures each way: out (the row's own direction, source to
/// destination) and back. Each way's loss is its share of the probes sent, where the
/// reflector let the directions be told apart; else both carry the round trip's.
/// Adds counts with upper bounds (seconds) into the slots of [`RTT_BUCKETS`] (then +Inf):
/// each into the first slot whose bound is at least its own.
fn add_buckets(slots: &mut [u64; RTT_BUCKETS.len() + 1], buckets: &[(f64, u64)]) {
    for &(le, n) in buckets {
        let slot = RTT_BUCKETS
            .iter()
            .position(|&bound| le <= bound * (1.0 + 1e-9))
            .unwrap_or(RTT_BUCKETS.len());
        slots[slot] += n;
    }
}

/// Video frames: each frame's latency as a timed transaction's, the frames not shown in
/// time (never whole, or whole after their turn) as the loss, the goodput beside.
fn video_figures(
    report: &linerate_report::Report,
    way: &linerate_report::model::VideoWay,
) -> Figures {
    let c = &way.counts;
    Figures {
        goodput_bps: Some(report.summary.receiver_bps),
        loss_ratio: (c.sent > 0 && !way.unseen)
            .then(|| ((way.lost + c.partial + c.late) as f64 / c.sent as f64).min(1.0)),
        rtt: (c.latency_us.count > 0).then(|| Transactions::of(&c.latency_us)),
        duration_s: report.summary.duration_s,
        qoo: way.qoo.as_ref().map(|q| q.score),
        ..Figures::default()
    }
}

/// A call's figures each way: out (the row's own direction, the source's to the
/// destination) and back; `None` for a test that is not a call.
pub fn call_figures(report: &linerate_report::Report) -> Option<(Figures, Figures)> {
    let call = report.summary.call.as_ref()?;
    let way = |direction: linerate_model::Direction| {
        let way = call.ways.iter().find(|w| w.direction == direction)?;
        let sent = way.received + way.lost;
        Some(Figures {
            mos: way.score.mos,
            loss_ratio: (sent > 0).then(|| way.lost as f64 / sent as f64),
            duration_s: report.summary.duration_s,
            qoo: way.qoo.as_ref().map(|q| q.score),
            ..Figures::default()
        })
    };
    Some((
        way(linerate_model::Direction::Forward)?,
        way(linerate_model::Direction::Reverse)?,
    ))
}

pub fn stamp_figures(report: &linerate_report::stamp::StampReport) -> (Figures, Figures) {
    let sent = report.sent.max(1) as f64;
    let round_trip = report.loss.round_trip as f64 / sent;
    let (out, back) = match (report.loss.forward, report.loss.reverse) {
        (Some(f), Some(r)) => (f as f64 / sent, r as f64 / sent),
        _ => (round_trip, round_trip),
    };
    // The report's buckets, upper bounds in seconds (the last: past every bound).
    let bucketed = |counts: &[u64]| -> Vec<(f64, u64)> {
        let bounds = DELAY_BOUNDS_US.iter().map(|us| us / 1e6);
        bounds
            .chain([f64::INFINITY])
            .zip(counts.iter().copied())
            .collect()
    };
    let rtt = (report.rtt_us.count > 0).then(|| {
        let r = &report.rtt_us;
        // An older document without buckets adds none, and no count, to the histogram.
        let told = report.rtt_histogram.len() == DELAY_BOUNDS_US.len() + 1;
        Transactions {
            quantiles: Quantiles::of_us(r),
            buckets: bucketed(&report.rtt_histogram),
            count: if told { r.count } else { 0 },
            sum_s: if told {
                r.mean / 1e6 * r.count as f64
            } else {
                0.0
            },
        }
    });
    let one_way_histogram = |way: &linerate_report::stamp::OneWay| {
        (way.histogram.len() == DELAY_BOUNDS_US.len() + 1).then(|| Transactions {
            buckets: bucketed(&way.histogram),
            count: way.histogram.iter().sum(),
            sum_s: way.sum_us / 1e6,
            ..Transactions::default()
        })
    };
    let answered = report.answered > 0;
    let forward = Figures {
        loss_ratio: Some(out),
        rtt,
        one_way: answered.then(|| OneWayDelay::of(&report.forward)),
        one_way_histogram: one_way_histogram(&report.forward),
        duration_s: report.duration_s,
        ..Figures::default()
    };
    let reverse = Figures {
        loss_ratio: Some(back),
        one_way: answered.then(|| OneWayDelay::of(&report.reverse)),
        one_way_histogram: one_way_histogram(&report.reverse),
        duration_s: report.duration_s,
        ..Figures::default()
    };
    (forward, reverse)
}

impl Board {
    /// Adds a finished (or skipped) job: its row, and its document when it ran. Returns
    /// the series it changed: the row's, and for a STAMP window or a call its way back
    /// too (the row's labels with `direction="reverse"`).
    pub fn record(&mut self, row: &MeshRow, document: Option<&Document>) -> Vec<Key> {
        // A job the operator's stop cut short says nothing of its pair: its last result,
        // its baseline and its alerts stay as they were.
        if row.outcome.is_interrupted() {
            return Vec::new();
        }
        let ways = match document {
            Some(Document::Stamp(report)) => {
                let (out, back) = stamp_figures(report);
                Some((out.loss_ratio, back.loss_ratio, out, back))
            }
            Some(Document::Test(report)) => {
                call_figures(report).map(|(out, back)| (out.mos, back.mos, out, back))
            }
            _ => None,
        };
        if let Some((out_figure, back_figure, out, back)) = ways {
            let mut forward = row.clone();
            forward.headline = out_figure.filter(|_| row.outcome.is_ok());
            let mut reverse = row.clone();
            reverse.direction = "reverse".into();
            reverse.headline = back_figure.filter(|_| row.outcome.is_ok());
            self.record_figures(&forward, Some(&out));
            self.record_figures(&reverse, Some(&back));
            return vec![Key::of(&forward), Key::of(&reverse)];
        }
        let figures = document.and_then(|d| figures_of(&row.protocol, d));
        let key = Key::of(row);
        let since = self.series.get(&key).map(|s| s.latest.ended_at);
        self.record_figures(row, figures.as_ref());
        if let Some(Document::Trace(report)) = document {
            self.follow_route(&key, report, since.unwrap_or(row.started_at), row.ended_at);
        }
        vec![key]
    }

    /// A trace's way, against the way its pair's trace before went: a change is counted
    /// and marked. Returns the mark.
    fn follow_route(
        &mut self,
        key: &Key,
        report: &linerate_report::trace::TraceReport,
        since: f64,
        at: f64,
    ) -> Option<PathMark> {
        let route = report.route();
        let series = self.series.get_mut(key)?;
        series.totals.traces += 1;
        let change = series
            .route
            .as_ref()
            .and_then(|before| route.change_from(before));
        series.route = Some(route);
        let change = change?;
        series.totals.path_changes += 1;
        let mark = PathMark {
            test: key.test.clone(),
            src: key.src.clone(),
            dst: key.dst.clone(),
            since,
            at,
            words: change.words(report.paths.len()),
        };
        let marks = self
            .path_marks
            .entry((key.mesh.clone(), key.src.clone(), key.dst.clone()))
            .or_default();
        marks.push_back(mark.clone());
        while marks.len() > MARKS {
            marks.pop_front();
        }
        Some(mark)
    }

    /// A restarted coordinator's knowledge of a pair's way: its last stored trace, which
    /// the next is compared with (nothing counted or marked).
    pub fn learn_route(&mut self, row: &MeshRow, report: &linerate_report::trace::TraceReport) {
        if let Some(series) = self.series.get_mut(&Key::of(row)) {
            series.route = Some(report.route());
        }
    }

    /// The path changes of `key`'s pair (either way) that may have happened between
    /// `since` and `until`: those whose own span overlaps it.
    pub fn path_changes_between(&self, key: &Key, since: f64, until: f64) -> Vec<&PathMark> {
        let ways = [
            (key.mesh.clone(), key.src.clone(), key.dst.clone()),
            (key.mesh.clone(), key.dst.clone(), key.src.clone()),
        ];
        ways.iter()
            .filter_map(|way| self.path_marks.get(way))
            .flatten()
            .filter(|m| m.since < until && m.at > since)
            .collect()
    }

    /// Adds a result: its row and what it measured. Past [`MAX_SERIES`], the series whose
    /// newest result is oldest makes room.
    pub fn record_figures(&mut self, row: &MeshRow, figures: Option<&Figures>) {
        self.results += 1;
        let revision = self.results;
        for host in [&row.src, &row.dst] {
            if !self.hosts.contains(host) {
                self.hosts.push(host.clone());
            }
        }
        if !self.tests.contains(&row.test) {
            self.tests.push(row.test.clone());
        }
        let declared = self.measures.get(&row.test).copied();
        let key = Key::of(row);
        if !self.series.contains_key(&key) && self.series.len() >= MAX_SERIES {
            let oldest = self
                .series
                .iter()
                .min_by(|a, b| a.1.latest.ended_at.total_cmp(&b.1.latest.ended_at))
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.series.remove(&oldest);
            }
        }
        let reserve = self.reserve_history;
        let series = self.series.entry(key).or_insert_with(|| Series {
            // One more than kept: a result is pushed before the oldest goes.
            history: VecDeque::with_capacity(if reserve { HISTORY + 1 } else { 0 }),
            ..Series::default()
        });
        if series.measure.is_none() {
            series.measure = declared;
        }
        let ok = row.outcome.is_ok();
        let mut latest = Latest {
            outcome: row.outcome.clone(),
            cycle: row.cycle,
            started_at: row.started_at,
            ended_at: row.ended_at,
            run_id: row.run_id,
            value: row.headline.filter(|_| ok),
            text: row.headline_text.clone(),
            ..Latest::default()
        };
        if let Some(f) = figures {
            latest.goodput_bps = f.goodput_bps;
            latest.retransmits = f.retransmits;
            latest.cpu_s_per_gbit = f.cpu_s_per_gbit;
            series.totals.retransmits += f.retransmits.unwrap_or(0);
            latest.loss_ratio = f.loss_ratio;
            latest.rtt = f.rtt.as_ref().map(|r| r.quantiles);
            latest.duration_s = Some(f.duration_s);
            latest.responsiveness = f.responsiveness;
            latest.one_way = f.one_way;
            latest.traced = f.traced;
            latest.mos = f.mos;
            latest.qoo = f.qoo;
            if series.measure.is_none() {
                series.measure = Some(if f.traced {
                    Measure::Hops
                } else if f.mos.is_some() {
                    Measure::Mos
                } else if f.responsiveness.is_some() {
                    Measure::Responsiveness
                } else if f.rtt.is_some() {
                    Measure::Latency
                } else {
                    Measure::Goodput
                });
            }
            let totals = &mut series.totals;
            if let Some(rtt) = &f.rtt {
                add_buckets(&mut totals.rtt_buckets, &rtt.buckets);
                totals.rtt_count += rtt.count;
                totals.rtt_sum_s += rtt.sum_s;
            }
            if let Some(delay) = &f.one_way_histogram {
                add_buckets(&mut totals.one_way_buckets, &delay.buckets);
                totals.one_way_count += delay.count;
                totals.one_way_sum_s += delay.sum_s;
            }
        }
        match row.outcome {
            Outcome::Ok => series.totals.ok += 1,
            Outcome::Skipped { .. } => series.totals.skipped += 1,
            Outcome::Failed { .. } => series.totals.failed += 1,
            Outcome::Interrupted { .. } => {}
        }
        series.history.push_back(Point {
            at: row.ended_at,
            value: latest.value,
        });
        while series.history.len() > HISTORY {
            series.history.pop_front();
        }
        series.latest = latest;
        series.revision = revision;
    }

    /// Names a host before its results arrive, so that the grid keeps the mesh's order.
    pub fn declare_host(&mut self, host: &str) {
        if !self.hosts.iter().any(|h| h == host) {
            self.hosts.push(host.to_string());
        }
    }

    /// Says what a test's headline is (the mesh file knows; a document may not say).
    pub fn declare(&mut self, test: &str, measure: Measure) {
        self.measures.insert(test.to_string(), measure);
        if !self.tests.iter().any(|t| t == test) {
            self.tests.push(test.to_string());
        }
    }

    /// Adds what a store holds (oldest first), so that a restarted coordinator shows the
    /// history and baselines it had. Counts start again: they count this process's tests.
    pub fn seed(&mut self, rows: &[MeshRow]) {
        let mut sorted: Vec<&MeshRow> = rows.iter().collect();
        sorted.sort_by(|a, b| a.ended_at.total_cmp(&b.ended_at));
        for row in sorted {
            self.record(row, None);
            let series = self.series.get_mut(&Key::of(row)).expect("just recorded");
            series.totals = Totals::default();
        }
    }
}
