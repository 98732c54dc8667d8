//! The board as OpenMetrics text, through the prometheus-client crate's encoder (a
//! collector that reads the board at each scrape: nothing is measured by a scrape).
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
//!
//! and `linerate_build_info{version}` (1).

use crate::board::{Board, Key, Series, RTT_BUCKETS};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabel, EncodeLabelSet, EncodeLabelValue, LabelSetEncoder,
    LabelValueEncoder,
};
use prometheus_client::metrics::exemplar::Exemplar;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
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

/// Reads the board at every scrape.
#[derive(Debug)]
struct BoardCollector {
    board: Arc<Mutex<Board>>,
}

/// One gauge family over the series that have a value for it.
fn gauges(
    encoder: &mut DescriptorEncoder,
    board: &Board,
    name: &str,
    help: &str,
    value: impl Fn(&Series) -> Option<f64>,
) -> Result<(), std::fmt::Error> {
    if !board.series.values().any(|s| value(s).is_some()) {
        return Ok(());
    }
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (key, series) in &board.series {
        if let Some(v) = value(series) {
            let labels = Labels { key, extra: None };
            metric.encode_family(&labels)?.encode_gauge(&v)?;
        }
    }
    Ok(())
}

impl Collector for BoardCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let board = self.board.lock().unwrap_or_else(|e| e.into_inner());
        gauges(
            &mut encoder,
            &board,
            "linerate_goodput_bytes_per_second",
            "A stream's newest goodput, counted at the destination",
            |s| {
                s.latest
                    .goodput_bps
                    .filter(|_| s.latest.ok)
                    .map(|bps| bps / 8.0)
            },
        )?;
        gauges(
            &mut encoder,
            &board,
            "linerate_loss_ratio",
            "A UDP stream's newest share of bytes sent and not received",
            |s| s.latest.loss_ratio.filter(|_| s.latest.ok),
        )?;
        rtt(&mut encoder, &board)?;
        gauges(
            &mut encoder,
            &board,
            "linerate_cpu_seconds_per_gigabit",
            "CPU seconds the measuring host spent per gigabit its newest test moved",
            |s| s.latest.cpu_s_per_gbit.filter(|_| s.latest.ok),
        )?;
        gauges(
            &mut encoder,
            &board,
            "linerate_last_result_ok",
            "1 when the newest test of the series succeeded, 0 when it failed or was skipped",
            |s| Some(if s.latest.ok { 1.0 } else { 0.0 }),
        )?;
        gauges(
            &mut encoder,
            &board,
            "linerate_last_result_timestamp_seconds",
            "When the newest test of the series ended, Unix time",
            |s| Some(s.latest.ended_at),
        )?;
        counters(&mut encoder, &board)?;
        Ok(())
    }
}

/// The transaction times: the newest run's percentiles and the histogram of them all.
fn rtt(encoder: &mut DescriptorEncoder, board: &Board) -> Result<(), std::fmt::Error> {
    if board.series.values().any(|s| s.latest.rtt.is_some()) {
        let mut metric = encoder.encode_descriptor(
            "linerate_last_rtt_seconds",
            "The newest rr or crr run's transaction time at a percentile (stat)",
            None,
            MetricType::Gauge,
        )?;
        for (key, series) in &board.series {
            let Some(q) = series.latest.rtt.filter(|_| series.latest.ok) else {
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
    if board.series.values().any(|s| s.totals.rtt_count > 0) {
        let mut metric = encoder.encode_descriptor(
            "linerate_rtt_seconds",
            "Every rr or crr transaction's time since this process started",
            None,
            MetricType::Histogram,
        )?;
        let mut buckets: Vec<(f64, u64)> = Vec::with_capacity(RTT_BUCKETS.len() + 1);
        for (key, series) in &board.series {
            let t = &series.totals;
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
fn counters(encoder: &mut DescriptorEncoder, board: &Board) -> Result<(), std::fmt::Error> {
    if !board.series.is_empty() {
        let mut metric = encoder.encode_descriptor(
            "linerate_tests",
            "Tests of the series since this process started, by result",
            None,
            MetricType::Counter,
        )?;
        for (key, series) in &board.series {
            let t = &series.totals;
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
    if board
        .series
        .values()
        .any(|s| s.latest.retransmits.is_some())
    {
        let mut metric = encoder.encode_descriptor(
            "linerate_retransmits",
            "TCP segments the sender retransmitted in the series' tests since this process started (TCP_INFO)",
            None,
            MetricType::Counter,
        )?;
        for (key, series) in &board.series {
            if series.latest.retransmits.is_none() && series.totals.retransmits == 0 {
                continue;
            }
            let labels = Labels { key, extra: None };
            metric
                .encode_family(&labels)?
                .encode_counter::<Vec<(String, String)>, u64, f64>(
                    &series.totals.retransmits,
                    None::<&NoExemplar>,
                )?;
        }
    }
    Ok(())
}

/// The registry a scrape encodes: the board's series and the build's info.
pub fn registry(board: Arc<Mutex<Board>>) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(BoardCollector { board }));
    // A gauge of 1 with the version as its label, as Prometheus' own *_build_info are
    // (the OpenMetrics info type is not read by the Prometheus text format's parsers).
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
    registry
}

/// The scrape's body: OpenMetrics text, `# EOF` last.
pub fn encode(registry: &Registry) -> String {
    encode_sized(registry, 0)
}

/// [`encode`] into a buffer of `hint` bytes to begin with (the last scrape's size: a
/// large mesh's text is tens of megabytes, and growing it costs copies).
pub fn encode_sized(registry: &Registry, hint: usize) -> String {
    let mut out = String::with_capacity(hint + hint / 8);
    prometheus_client::encoding::text::encode(&mut out, registry)
        .expect("writing to a String does not fail");
    out
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
