//! The board as OpenMetrics text, through the prometheus-client crate's encoder (a
//! collector over one series at a time, kept between scrapes by [`Exposition`]: nothing
//! is measured by a scrape).
//!
//! Series, each labelled {mesh, src, dst, test, direction, protocol}:
//! - `linerate_goodput_bytes_per_second` (gauge): a stream's newest goodput, counted at
//!   the destination (bytes, Prometheus' base unit: `* 8` in a query gives bits);
//! - `linerate_loss_ratio` (gauge): a UDP stream's newest share of bytes lost;
//! - `linerate_rtt_seconds` (histogram): every transaction of rr and crr tests so far, in
//!   classic buckets (rate() and histogram_quantile() work on it);
//! - `linerate_last_rtt_seconds{stat="p50|p90|p99"}` (gauge): the newest run's
//!   percentiles (`quantile` is a summary's label; these are a run's figures);
//! - `linerate_last_result_ok` (gauge, 1 or 0), `linerate_last_result_timestamp_seconds`
//!   (gauge);
//! - `linerate_tests_total{result="ok|failed|skipped"}` (counter; a result never seen has
//!   no line);
//! - `linerate_retransmits_total` (counter) and `linerate_cpu_seconds_per_gigabit`
//!   (gauge), where the measuring end counted them (a server's TCP tests);
//! - for RPM tests: `linerate_responsiveness_rpm` (gauge: round trips a minute under
//!   load), `linerate_capacity_bytes_per_second{leg="download|upload"}`,
//!   `linerate_idle_latency_seconds` and `linerate_added_latency_seconds` (gauges);
//!
//! and `linerate_build_info{version}` (1).

use crate::board::{Board, Key, Latest, Series, Totals, RTT_BUCKETS};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabel, EncodeLabelSet, EncodeLabelValue, LabelSetEncoder,
    LabelValueEncoder,
};
use prometheus_client::metrics::exemplar::Exemplar;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};

/// A label value with OpenMetrics' escapes (backslash, double quote, newline): names come
/// from mesh files and DNS, and the encoder writes values as they are.
#[derive(Debug, Clone, Copy)]
struct Escaped<'a>(&'a str);

impl EncodeLabelValue for Escaped<'_> {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        // Most values need nothing: written whole (a scrape writes hundreds of thousands).
        if !self.0.bytes().any(|b| matches!(b, b'\\' | b'"' | b'\n')) {
            return encoder.write_str(self.0);
        }
        for c in self.0.chars() {
            match c {
                '\\' => encoder.write_str("\\\\")?,
                '"' => encoder.write_str("\\\"")?,
                '\n' => encoder.write_str("\\n")?,
                c => encoder.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// A series' labels, with one more (`result`, `quantile`) where a family has it.
#[derive(Debug)]
struct Labels<'a> {
    key: &'a Key,
    extra: Option<(&'static str, &'a str)>,
}

impl EncodeLabelSet for Labels<'_> {
    fn encode(&self, mut encoder: LabelSetEncoder) -> Result<(), std::fmt::Error> {
        let k = self.key;
        let pairs = [
            ("mesh", k.mesh.as_str()),
            ("src", &k.src),
            ("dst", &k.dst),
            ("test", &k.test),
            ("direction", &k.direction),
            ("protocol", &k.protocol),
        ];
        for (name, value) in pairs.into_iter().chain(self.extra) {
            (name, Escaped(value)).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

type NoExemplar = Exemplar<Vec<(String, String)>, f64>;

/// What the families read of one series.
type Row<'a> = (&'a Key, &'a Latest, &'a Totals);

/// The families, in the order a scrape writes them (after `linerate_build_info`).
const FAMILIES: [&str; 13] = [
    "linerate_goodput_bytes_per_second",
    "linerate_loss_ratio",
    "linerate_last_rtt_seconds",
    "linerate_rtt_seconds",
    "linerate_cpu_seconds_per_gigabit",
    "linerate_last_result_ok",
    "linerate_last_result_timestamp_seconds",
    "linerate_tests",
    "linerate_retransmits",
    "linerate_responsiveness_rpm",
    "linerate_capacity_bytes_per_second",
    "linerate_idle_latency_seconds",
    "linerate_added_latency_seconds",
];

/// One gauge family over the rows that have a value for it.
fn gauges(
    encoder: &mut DescriptorEncoder,
    rows: &[Row],
    name: &str,
    help: &str,
    value: impl Fn(&Latest) -> Option<f64>,
) -> Result<(), std::fmt::Error> {
    if !rows.iter().any(|(_, latest, _)| value(latest).is_some()) {
        return Ok(());
    }
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for &(key, latest, _) in rows {
        if let Some(v) = value(latest) {
            let labels = Labels { key, extra: None };
            metric.encode_family(&labels)?.encode_gauge(&v)?;
        }
    }
    Ok(())
}

/// Every family of `rows`, in [`FAMILIES`]' order.
fn families(encoder: &mut DescriptorEncoder, rows: &[Row]) -> Result<(), std::fmt::Error> {
    gauges(
        encoder,
        rows,
        FAMILIES[0],
        "A stream's newest goodput, counted at the destination",
        |l| l.goodput_bps.filter(|_| l.ok).map(|bps| bps / 8.0),
    )?;
    gauges(
        encoder,
        rows,
        FAMILIES[1],
        "A UDP stream's newest share of bytes sent and not received",
        |l| l.loss_ratio.filter(|_| l.ok),
    )?;
    rtt(encoder, rows)?;
    gauges(
        encoder,
        rows,
        FAMILIES[4],
        "CPU seconds the measuring host spent per gigabit its newest test moved",
        |l| l.cpu_s_per_gbit.filter(|_| l.ok),
    )?;
    gauges(
        encoder,
        rows,
        FAMILIES[5],
        "1 when the newest test of the series succeeded, 0 when it failed or was skipped",
        |l| Some(if l.ok { 1.0 } else { 0.0 }),
    )?;
    gauges(
        encoder,
        rows,
        FAMILIES[6],
        "When the newest test of the series ended, Unix time",
        |l| Some(l.ended_at),
    )?;
    counters(encoder, rows)?;
    responsiveness(encoder, rows)
}

/// An RPM test's figures: its responsiveness, the capacity each way, the idle latency
/// and what the load added to it.
fn responsiveness(encoder: &mut DescriptorEncoder, rows: &[Row]) -> Result<(), std::fmt::Error> {
    let of = |l: &Latest| l.responsiveness.filter(|_| l.ok);
    gauges(
        encoder,
        rows,
        FAMILIES[9],
        "An RPM test's newest responsiveness: round trips a minute under working conditions",
        |l| of(l).and_then(|r| r.rpm),
    )?;
    if rows.iter().any(|(_, l, _)| of(l).is_some()) {
        let mut metric = encoder.encode_descriptor(
            FAMILIES[10],
            "An RPM test's newest goodput each way (leg), counted where it arrived",
            None,
            MetricType::Gauge,
        )?;
        for &(key, latest, _) in rows {
            let Some(r) = of(latest) else { continue };
            for (leg, bps) in [("download", r.download_bps), ("upload", r.upload_bps)] {
                let labels = Labels {
                    key,
                    extra: Some(("leg", leg)),
                };
                metric.encode_family(&labels)?.encode_gauge(&(bps / 8.0))?;
            }
        }
    }
    gauges(
        encoder,
        rows,
        FAMILIES[11],
        "An RPM test's newest idle latency: a new connection's handshake on the quiet path",
        |l| of(l).map(|r| r.idle_latency_s),
    )?;
    gauges(
        encoder,
        rows,
        FAMILIES[12],
        "What the newest RPM test's load added to the idle latency (the bufferbloat grade's figure)",
        |l| of(l).and_then(|r| r.added_latency_s),
    )
}

/// The transaction times: the newest run's percentiles and the histogram of them all.
fn rtt(encoder: &mut DescriptorEncoder, rows: &[Row]) -> Result<(), std::fmt::Error> {
    if rows.iter().any(|(_, latest, _)| latest.rtt.is_some()) {
        let mut metric = encoder.encode_descriptor(
            FAMILIES[2],
            "The newest rr or crr run's transaction time at a percentile (stat)",
            None,
            MetricType::Gauge,
        )?;
        for &(key, latest, _) in rows {
            let Some(q) = latest.rtt.filter(|_| latest.ok) else {
                continue;
            };
            for (quantile, v) in [("p50", q.p50), ("p90", q.p90), ("p99", q.p99)] {
                let labels = Labels {
                    key,
                    extra: Some(("stat", quantile)),
                };
                metric.encode_family(&labels)?.encode_gauge(&v)?;
            }
        }
    }
    if rows.iter().any(|(_, _, totals)| totals.rtt_count > 0) {
        let mut metric = encoder.encode_descriptor(
            FAMILIES[3],
            "Every rr or crr transaction's time since this process started",
            None,
            MetricType::Histogram,
        )?;
        let mut buckets: Vec<(f64, u64)> = Vec::with_capacity(RTT_BUCKETS.len() + 1);
        for &(key, _, t) in rows {
            if t.rtt_count == 0 {
                continue;
            }
            buckets.clear();
            let bounds = RTT_BUCKETS.iter().copied().chain([f64::MAX]);
            buckets.extend(bounds.zip(t.rtt_buckets.iter().copied()));
            let labels = Labels { key, extra: None };
            metric
                .encode_family(&labels)?
                .encode_histogram::<Vec<(String, String)>>(
                    t.rtt_sum_s,
                    t.rtt_count,
                    &buckets,
                    None,
                )?;
        }
    }
    Ok(())
}

/// The counters: tests by result, and retransmits where the measuring end counted them.
fn counters(encoder: &mut DescriptorEncoder, rows: &[Row]) -> Result<(), std::fmt::Error> {
    if !rows.is_empty() {
        let mut metric = encoder.encode_descriptor(
            FAMILIES[7],
            "Tests of the series since this process started, by result",
            None,
            MetricType::Counter,
        )?;
        for &(key, _, t) in rows {
            // A result seen at least once (a counter's absence is its zero).
            for (result, n) in [("ok", t.ok), ("failed", t.failed), ("skipped", t.skipped)]
                .into_iter()
                .filter(|&(_, n)| n > 0)
            {
                let labels = Labels {
                    key,
                    extra: Some(("result", result)),
                };
                metric
                    .encode_family(&labels)?
                    .encode_counter::<Vec<(String, String)>, u64, f64>(&n, None::<&NoExemplar>)?;
            }
        }
    }
    let counted =
        |latest: &Latest, totals: &Totals| latest.retransmits.is_some() || totals.retransmits > 0;
    if rows.iter().any(|&(_, l, t)| counted(l, t)) {
        let mut metric = encoder.encode_descriptor(
            FAMILIES[8],
            "TCP segments the sender retransmitted in the series' tests since this process started (TCP_INFO)",
            None,
            MetricType::Counter,
        )?;
        for &(key, latest, totals) in rows {
            if !counted(latest, totals) {
                continue;
            }
            let labels = Labels { key, extra: None };
            metric
                .encode_family(&labels)?
                .encode_counter::<Vec<(String, String)>, u64, f64>(
                    &totals.retransmits,
                    None::<&NoExemplar>,
                )?;
        }
    }
    Ok(())
}

/// One series, owned: what a registry encodes when the series' text is stale.
#[derive(Debug)]
struct SeriesCollector {
    key: Key,
    latest: Latest,
    totals: Totals,
}

impl Collector for SeriesCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        families(&mut encoder, &[(&self.key, &self.latest, &self.totals)])
    }
}

/// The build's info: a gauge of 1 with the version as its label, as Prometheus' own
/// `*_build_info` are (the OpenMetrics info type is not read by the Prometheus text
/// format's parsers). OpenMetrics text without `# EOF`.
fn build_info() -> String {
    let mut registry = Registry::default();
    let build =
        prometheus_client::metrics::family::Family::<Vec<(String, String)>, Gauge>::default();
    build
        .get_or_create(&vec![(
            "version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        )])
        .set(1);
    registry.register(
        "linerate_build_info",
        "The linerate build that measured",
        build,
    );
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)
        .expect("writing to a String does not fail");
    text.replace("# EOF\n", "")
}

/// The exposition formats a scraper may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text (Prometheus asks for it).
    OpenMetrics,
    /// Prometheus' classic text format 0.0.4 (promtool, older servers, curl).
    Classic,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => CONTENT_TYPE,
            Format::Classic => CLASSIC_CONTENT_TYPE,
        }
    }
}

/// One series' sample lines, as of its revision: one text, family after family
/// ([`FAMILIES`]' order), and where each family's lines end in it.
#[derive(Debug)]
struct Fragments {
    text: String,
    ends: [usize; FAMILIES.len()],
}

impl Fragments {
    fn family(&self, index: usize) -> &str {
        let start = if index == 0 { 0 } else { self.ends[index - 1] };
        &self.text[start..self.ends[index]]
    }
}

/// The board's exposition, kept as text per series and family: a scrape re-encodes only
/// the series whose results changed since the one before (through prometheus-client,
/// one series at a time) and joins the rest as they were. A 100-host mesh has 39,600
/// series and a result every few seconds; encoding them all at every scrape took 200 ms.
#[derive(Debug)]
pub struct Exposition {
    board: Arc<Mutex<Board>>,
    cache: BTreeMap<Key, Fragments>,
    /// The board's count of results when the cache was last brought up to date: a series
    /// whose revision is above it has news.
    seen: u64,
    /// Each family's `# HELP` and `# TYPE` lines, OpenMetrics and classic, once seen.
    headers: [Option<(String, String)>; FAMILIES.len()],
    build_info: String,
    last_size: usize,
}

impl Exposition {
    pub fn new(board: Arc<Mutex<Board>>) -> Exposition {
        Exposition {
            board,
            cache: BTreeMap::new(),
            seen: 0,
            headers: Default::default(),
            build_info: build_info(),
            last_size: 0,
        }
    }

    /// The scrape's body in `format` (OpenMetrics ends with `# EOF`).
    pub fn render(&mut self, format: Format) -> String {
        // Sized by the scrape before: a large mesh's text is tens of megabytes, and
        // growing it costs copies.
        let mut out = Vec::with_capacity(self.last_size + self.last_size / 16 + 1024);
        self.write(format, &mut out)
            .expect("writing to a Vec does not fail");
        String::from_utf8(out).expect("the encoder writes UTF-8")
    }

    /// The scrape's body in `format` to `sink`, a series' text at a time (a gzip
    /// encoder takes it without the whole text ever being held).
    pub fn write(&mut self, format: Format, sink: &mut impl std::io::Write) -> std::io::Result<()> {
        {
            let shared = self.board.clone();
            let board = shared.lock().unwrap_or_else(|e| e.into_inner());
            self.refresh(&board);
        }
        let mut size = 0;
        let mut put = |text: &str| {
            size += text.len();
            sink.write_all(text.as_bytes())
        };
        match format {
            Format::OpenMetrics => put(&self.build_info)?,
            Format::Classic => put(&classic(&self.build_info))?,
        }
        for (index, header) in self.headers.iter().enumerate() {
            let Some((openmetrics, classic)) = header else {
                continue;
            };
            // A family no series has now (its last series gave way) is left out.
            if self.cache.values().all(|f| f.family(index).is_empty()) {
                continue;
            }
            put(match format {
                Format::OpenMetrics => openmetrics,
                Format::Classic => classic,
            })?;
            for fragments in self.cache.values() {
                put(fragments.family(index))?;
            }
        }
        if format == Format::OpenMetrics {
            put("# EOF\n")?;
        }
        self.last_size = size;
        Ok(())
    }

    /// Re-encodes the series whose revision moved, adds new ones and forgets the gone (a
    /// series goes only as another comes, or by hand: either way the counts differ).
    fn refresh(&mut self, board: &Board) {
        for (key, series) in &board.series {
            if series.revision > self.seen {
                let fragments = self.encode_series(key, series);
                self.cache.insert(key.clone(), fragments);
            }
        }
        if self.cache.len() != board.series.len() {
            self.cache.retain(|key, _| board.series.contains_key(key));
        }
        self.seen = board.results;
    }

    /// One series through prometheus-client's encoder, split by family.
    fn encode_series(&mut self, key: &Key, series: &Series) -> Fragments {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(SeriesCollector {
            key: key.clone(),
            latest: series.latest.clone(),
            totals: series.totals.clone(),
        }));
        let mut text = String::with_capacity(2048);
        prometheus_client::encoding::text::encode(&mut text, &registry)
            .expect("writing to a String does not fail");
        let mut samples: [String; FAMILIES.len()] = Default::default();
        let mut family = None;
        let mut header = String::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap_or("");
                family = FAMILIES.iter().position(|&f| f == name);
                debug_assert!(family.is_some(), "a family missing from FAMILIES: {name}");
                header.clear();
            }
            let Some(index) = family else { continue };
            if line.starts_with('#') {
                if line != "# EOF" {
                    header.push_str(line);
                    header.push('\n');
                }
                if line.starts_with("# TYPE ") && self.headers[index].is_none() {
                    self.headers[index] = Some((header.clone(), classic(&header)));
                }
                continue;
            }
            samples[index].push_str(line);
            samples[index].push('\n');
        }
        let mut joined = Fragments {
            text: String::with_capacity(samples.iter().map(String::len).sum()),
            ends: [0; FAMILIES.len()],
        };
        for (index, family) in samples.iter().enumerate() {
            joined.text.push_str(family);
            joined.ends[index] = joined.text.len();
        }
        joined
    }
}

/// The board's whole exposition, encoded afresh (tests, one-off use).
pub fn encode(board: Arc<Mutex<Board>>, format: Format) -> String {
    Exposition::new(board).render(format)
}

/// The media type of [`encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The media type of [`classic`]'s text.
pub const CLASSIC_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// OpenMetrics text as Prometheus' classic text format (0.0.4), for a scraper that does
/// not ask for OpenMetrics (promtool, older servers, curl): a counter's HELP and TYPE
/// name its samples' `_total` name, and there is no `# UNIT` or `# EOF`. The samples are
/// the same lines.
pub fn classic(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len() + 4096);
    let mut help: Option<&str> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest);
            continue;
        }
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let total = if kind == "counter" { "_total" } else { "" };
            if let Some(help) = help.take() {
                let text = help.split_once(' ').map_or("", |(_, text)| text);
                out.push_str(&format!("# HELP {name}{total} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name}{total} {kind}\n"));
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}
