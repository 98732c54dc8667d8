//! The board as OpenMetrics text, through the prometheus-client crate's encoder (a
//! collector over one series at a time, kept between scrapes by [`Exposition`]: nothing
//! is measured by a scrape). The families are defined once, in [`crate::families`].
//!
//! Series, each labelled {mesh, src, dst, test, direction, protocol}:
//! - `linerate_goodput_bytes_per_second` (gauge): a stream's newest goodput, counted at
//!   the destination (bytes, Prometheus' base unit: `* 8` in a query gives bits);
//! - `linerate_loss_ratio` (gauge): a UDP stream's newest share of bytes lost;
//! - `linerate_rtt_seconds` (histogram): every transaction of rr and crr tests so far, in
//!   classic buckets (rate() and histogram_quantile() work on it);
//! - `linerate_last_rtt_seconds{stat="p50|p90|p99|p999"}` (gauge): the newest run's
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
use crate::families::{Kind, Sample, Value, FAMILIES};
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

/// Every family of `rows` with a sample, in [`FAMILIES`]' order.
fn families(encoder: &mut DescriptorEncoder, rows: &[Row]) -> Result<(), std::fmt::Error> {
    let mut buckets: Vec<(f64, u64)> = Vec::with_capacity(RTT_BUCKETS.len() + 1);
    for family in &FAMILIES {
        let samples: Vec<(&Key, Vec<Sample>)> = rows
            .iter()
            .map(|&(key, latest, totals)| (key, (family.read)(latest, totals)))
            .filter(|(_, samples)| !samples.is_empty())
            .collect();
        if samples.is_empty() {
            continue;
        }
        let kind = match family.kind {
            Kind::Gauge => MetricType::Gauge,
            Kind::Counter => MetricType::Counter,
            Kind::Histogram => MetricType::Histogram,
        };
        let mut metric = encoder.encode_descriptor(family.name, family.help, None, kind)?;
        for (key, samples) in samples {
            for sample in samples {
                let labels = Labels {
                    key,
                    extra: sample.label,
                };
                let mut encoder = metric.encode_family(&labels)?;
                match sample.value {
                    Value::Gauge(v) => encoder.encode_gauge(&v)?,
                    Value::Counter(n) => encoder
                        .encode_counter::<Vec<(String, String)>, u64, f64>(
                            &n,
                            None::<&NoExemplar>,
                        )?,
                    Value::Histogram {
                        buckets: counts,
                        sum,
                        count,
                    } => {
                        buckets.clear();
                        let bounds = RTT_BUCKETS.iter().copied().chain([f64::MAX]);
                        buckets.extend(bounds.zip(counts.iter().copied()));
                        encoder
                            .encode_histogram::<Vec<(String, String)>>(sum, count, &buckets, None)?
                    }
                }
            }
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

/// A STAMP reflector's families, OpenMetrics text without `# EOF`: the test packets it
/// answered, those it refused by reason, and the sessions it keeps.
pub fn reflector_families(
    reflector: crate::board::Reflector,
    counts: &crate::board::ReflectorCounts,
) -> String {
    let (name, packets) = reflector.names();
    let mut out = String::new();
    out.push_str(&format!(
        "# HELP linerate_{name}_answered_packets {packets} answered\n"
    ));
    out.push_str(&format!(
        "# TYPE linerate_{name}_answered_packets counter\n"
    ));
    out.push_str(&format!(
        "linerate_{name}_answered_packets_total {}\n",
        counts.answered
    ));
    out.push_str(&format!(
        "# HELP linerate_{name}_refused_packets {packets} refused, by reason\n"
    ));
    out.push_str(&format!("# TYPE linerate_{name}_refused_packets counter\n"));
    for (reason, count) in &counts.refused {
        out.push_str(&format!(
            "linerate_{name}_refused_packets_total{{reason=\"{reason}\"}} {count}\n"
        ));
    }
    out.push_str(&format!(
        "# HELP linerate_{name}_sessions {name} sessions kept now\n"
    ));
    out.push_str(&format!("# TYPE linerate_{name}_sessions gauge\n"));
    out.push_str(&format!("linerate_{name}_sessions {}\n", counts.sessions));
    out
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
        let (reflector, process) = {
            let shared = self.board.clone();
            let board = shared.lock().unwrap_or_else(|e| e.into_inner());
            self.refresh(&board);
            (board.reflectors.clone(), board.process.clone())
        };
        let mut size = 0;
        let mut put = |text: &str| {
            size += text.len();
            sink.write_all(text.as_bytes())
        };
        match format {
            Format::OpenMetrics => put(&self.build_info)?,
            Format::Classic => put(&classic(&self.build_info))?,
        }
        for (which, source) in reflector {
            let text = reflector_families(which, &(source.0)());
            match format {
                Format::OpenMetrics => put(&text)?,
                Format::Classic => put(&classic(&text))?,
            }
        }
        if let Some(source) = process {
            let text = crate::families::process_families(&(source.0)());
            match format {
                Format::OpenMetrics => put(&text)?,
                Format::Classic => put(&classic(&text))?,
            }
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
                family = FAMILIES.iter().position(|f| f.name == name);
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
