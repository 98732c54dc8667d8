//! Every metric family linerate exports, defined once: its name, its help, its kind and
//! how a series' samples are read from the board. A scrape (`openmetrics`) and remote
//! write (`remote_write`) both encode from this table, so they send the same series with
//! the same values; a test holds them equal series by series, and the Grafana test checks
//! the dashboard against the names here.
//!
//! Each family's series carry the labels {mesh, src, dst, test, direction, protocol} and,
//! where a family has one, one more (`stat`, `result`, `leg`).

use crate::board::{Latest, ProcessCounts, Responsiveness, Totals};

/// How a family is typed in the exposition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    /// Written with `_total` after its name.
    Counter,
    /// Written as `_bucket{le}` (cumulative), `_sum` and `_count`, over
    /// [`crate::board::RTT_BUCKETS`].
    Histogram,
}

/// One sample of a family for one series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    Gauge(f64),
    Counter(u64),
    /// The count in each bucket (not cumulative; the last is +Inf), their sum and count.
    Histogram {
        buckets: &'a [u64],
        sum: f64,
        count: u64,
    },
}

/// A sample and the one label it adds to the series' own, if any.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample<'a> {
    pub label: Option<(&'static str, &'static str)>,
    pub value: Value<'a>,
}

/// A family: what a scrape's `# HELP` and `# TYPE` say, and its samples for a series.
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub read: for<'a> fn(&'a Latest, &'a Totals) -> Vec<Sample<'a>>,
}

fn gauge(value: Option<f64>) -> Vec<Sample<'static>> {
    value
        .map(|v| Sample {
            label: None,
            value: Value::Gauge(v),
        })
        .into_iter()
        .collect()
}

/// A histogram's one sample, when it has counted anything.
fn histogram(buckets: &[u64], sum: f64, count: u64) -> Vec<Sample<'_>> {
    if count == 0 {
        return Vec::new();
    }
    vec![Sample {
        label: None,
        value: Value::Histogram {
            buckets,
            sum,
            count,
        },
    }]
}

/// An RPM test's figures, when it succeeded.
fn rpm(latest: &Latest) -> Option<Responsiveness> {
    latest.responsiveness.filter(|_| latest.measured())
}

/// The families, in the order a scrape writes them (after `linerate_build_info`).
pub const FAMILIES: [Family; 20] = [
    Family {
        name: "linerate_goodput_bytes_per_second",
        help: "A stream's newest goodput, counted at the destination",
        kind: Kind::Gauge,
        read: |l, _| gauge(l.goodput_bps.filter(|_| l.measured()).map(|bps| bps / 8.0)),
    },
    Family {
        name: "linerate_loss_ratio",
        help: "A UDP stream's newest share of bytes sent and not received",
        kind: Kind::Gauge,
        read: |l, _| gauge(l.loss_ratio.filter(|_| l.measured())),
    },
    Family {
        name: "linerate_last_rtt_seconds",
        help: "The newest rr or crr run's transaction time at a percentile (stat)",
        kind: Kind::Gauge,
        read: |l, _| match l.rtt.filter(|_| l.measured()) {
            Some(q) => [
                ("p50", q.p50),
                ("p90", q.p90),
                ("p99", q.p99),
                ("p999", q.p999),
            ]
            .into_iter()
            .map(|(stat, v)| Sample {
                label: Some(("stat", stat)),
                value: Value::Gauge(v),
            })
            .collect(),
            None => Vec::new(),
        },
    },
    Family {
        name: "linerate_rtt_seconds",
        help: "Every rr or crr transaction's time since this process started",
        kind: Kind::Histogram,
        read: |_, t| histogram(&t.rtt_buckets, t.rtt_sum_s, t.rtt_count),
    },
    Family {
        name: "linerate_cpu_seconds_per_gigabit",
        help: "CPU seconds the measuring host spent per gigabit its newest test moved",
        kind: Kind::Gauge,
        read: |l, _| gauge(l.cpu_s_per_gbit.filter(|_| l.measured())),
    },
    Family {
        name: "linerate_last_result_ok",
        help: "1 when the newest test of the series succeeded, 0 when it failed or was skipped",
        kind: Kind::Gauge,
        read: |l, _| gauge(Some(if l.measured() { 1.0 } else { 0.0 })),
    },
    Family {
        name: "linerate_last_result_timestamp_seconds",
        help: "When the newest test of the series ended, Unix time",
        kind: Kind::Gauge,
        read: |l, _| gauge(Some(l.ended_at)),
    },
    Family {
        name: "linerate_tests",
        help: "Tests of the series since this process started, by result",
        kind: Kind::Counter,
        // A result seen at least once (a counter's absence is its zero).
        read: |_, t| {
            [("ok", t.ok), ("failed", t.failed), ("skipped", t.skipped)]
                .into_iter()
                .filter(|&(_, n)| n > 0)
                .map(|(result, n)| Sample {
                    label: Some(("result", result)),
                    value: Value::Counter(n),
                })
                .collect()
        },
    },
    Family {
        name: "linerate_retransmits",
        help: "TCP segments the sender retransmitted in the series' tests since this process started (TCP_INFO)",
        kind: Kind::Counter,
        // Where the measuring end counted them at least once.
        read: |l, t| {
            if l.retransmits.is_none() && t.retransmits == 0 {
                return Vec::new();
            }
            vec![Sample {
                label: None,
                value: Value::Counter(t.retransmits),
            }]
        },
    },
    Family {
        name: "linerate_responsiveness_rpm",
        help: "An RPM test's newest responsiveness: round trips a minute under working conditions",
        kind: Kind::Gauge,
        read: |l, _| gauge(rpm(l).and_then(|r| r.rpm)),
    },
    Family {
        name: "linerate_capacity_bytes_per_second",
        help: "An RPM test's newest goodput each way (leg), counted where it arrived",
        kind: Kind::Gauge,
        read: |l, _| match rpm(l) {
            Some(r) => [("download", r.download_bps), ("upload", r.upload_bps)]
                .into_iter()
                .map(|(leg, bps)| Sample {
                    label: Some(("leg", leg)),
                    value: Value::Gauge(bps / 8.0),
                })
                .collect(),
            None => Vec::new(),
        },
    },
    Family {
        name: "linerate_idle_latency_seconds",
        help: "An RPM test's newest idle latency: a new connection's handshake on the quiet path",
        kind: Kind::Gauge,
        read: |l, _| gauge(rpm(l).map(|r| r.idle_latency_s)),
    },
    Family {
        name: "linerate_added_latency_seconds",
        help: "What the newest RPM test's load added to the idle latency (the bufferbloat grade's figure)",
        kind: Kind::Gauge,
        read: |l, _| gauge(rpm(l).and_then(|r| r.added_latency_s)),
    },
    Family {
        name: "linerate_one_way_delay_seconds",
        help: "Every STAMP probe's one-way delay this way since this process started, where both clocks vouch for it",
        kind: Kind::Histogram,
        read: |_, t| histogram(&t.one_way_buckets, t.one_way_sum_s, t.one_way_count),
    },
    Family {
        name: "linerate_last_one_way_delay_seconds",
        help: "A STAMP window's one-way delay this way at a percentile (stat), where both clocks could vouch for it",
        kind: Kind::Gauge,
        read: |l, _| match l.one_way.filter(|_| l.measured()) {
            Some(d) => [("p50", d.p50_s), ("p99", d.p99_s)]
                .into_iter()
                .filter_map(|(stat, v)| {
                    v.map(|v| Sample {
                        label: Some(("stat", stat)),
                        value: Value::Gauge(v),
                    })
                })
                .collect(),
            None => Vec::new(),
        },
    },
    Family {
        name: "linerate_last_one_way_added_delay_seconds",
        help: "A STAMP window's delay this way above its minimum in the window, at a percentile (stat): needs no synchronised clocks",
        kind: Kind::Gauge,
        read: |l, _| match l.one_way.filter(|_| l.measured()) {
            Some(d) => [("p50", d.added_p50_s), ("p99", d.added_p99_s)]
                .into_iter()
                .map(|(stat, v)| Sample {
                    label: Some(("stat", stat)),
                    value: Value::Gauge(v),
                })
                .collect(),
            None => Vec::new(),
        },
    },
    Family {
        name: "linerate_path_hops",
        help: "A trace's newest distance to the destination, in hops, where a flow reached it",
        kind: Kind::Gauge,
        read: |l, _| gauge(l.value.filter(|_| l.measured() && l.traced)),
    },
    Family {
        name: "linerate_path_changes",
        help: "Traces of the series that went another way than the trace before them, since this process started",
        kind: Kind::Counter,
        // Every trace series has one, zero until its path changes: a rate over it is 0, not absent.
        read: |_, t| {
            if t.traces == 0 {
                return Vec::new();
            }
            vec![Sample {
                label: None,
                value: Value::Counter(t.path_changes),
            }]
        },
    },
    Family {
        name: "linerate_call_mos",
        help: "A call's newest mean opinion score this way (ITU-T G.107's E-model, 1 to 4.5)",
        kind: Kind::Gauge,
        read: |l, _| gauge(l.mos.filter(|_| l.measured())),
    },
    Family {
        name: "linerate_qoo_score",
        help: "A video's or a call's newest Quality of Outcome score this way (draft-ietf-ippm-qoo-09: its frames' or datagrams' latency and those not shown or played in time against its requirement, 0 to 100)",
        kind: Kind::Gauge,
        read: |l, _| gauge(l.qoo.filter(|_| l.measured())),
    },
];

/// The names a family's series take in an exposition: the name itself (gauges), with
/// `_total` (counters), or `_bucket`, `_sum` and `_count` (histograms).
pub fn series_names(family: &Family) -> Vec<String> {
    match family.kind {
        Kind::Gauge => vec![family.name.to_string()],
        Kind::Counter => vec![format!("{}_total", family.name)],
        Kind::Histogram => ["_bucket", "_sum", "_count"]
            .iter()
            .map(|suffix| format!("{}{suffix}", family.name))
            .collect(),
    }
}

/// A family of the coordinator's own (not a series'): its name, help, kind and value,
/// where the queue it reads is there.
pub struct ProcessFamily {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub read: fn(&ProcessCounts) -> Option<f64>,
}

/// The coordinator's own families, after the series' (no labels).
pub const PROCESS_FAMILIES: [ProcessFamily; 10] = [
    ProcessFamily {
        name: "linerate_store_writing",
        help: "1 while the store takes the mesh's results, 0 while they wait in the spool",
        kind: Kind::Gauge,
        read: |c| c.store.map(|s| f64::from(u8::from(s.writing))),
    },
    ProcessFamily {
        name: "linerate_store_waiting_results",
        help: "Results waiting in the spool for the store to take them",
        kind: Kind::Gauge,
        read: |c| c.store.map(|s| s.waiting as f64),
    },
    ProcessFamily {
        name: "linerate_store_waiting_bytes",
        help: "Bytes the spool holds",
        kind: Kind::Gauge,
        read: |c| c.store.map(|s| s.waiting_bytes as f64),
    },
    ProcessFamily {
        name: "linerate_store_oldest_waiting_seconds",
        help: "How long the oldest result in the spool has waited (0 when none waits)",
        kind: Kind::Gauge,
        read: |c| c.store.map(|s| s.oldest_waiting_s),
    },
    ProcessFamily {
        name: "linerate_store_write_failures",
        help: "Writes the store refused or failed, each try counted",
        kind: Kind::Counter,
        read: |c| c.store.map(|s| s.write_failures as f64),
    },
    ProcessFamily {
        name: "linerate_store_replayed_results",
        help: "Results written from the spool once the store took writes again",
        kind: Kind::Counter,
        read: |c| c.store.map(|s| s.replayed as f64),
    },
    ProcessFamily {
        name: "linerate_store_dropped_documents",
        help: "Result documents let go at the spool's bound (their rows kept)",
        kind: Kind::Counter,
        read: |c| c.store.map(|s| s.dropped_documents as f64),
    },
    ProcessFamily {
        name: "linerate_store_dropped_results",
        help: "Results let go whole: at the spool's bound with no document left to let go, or while the store hung",
        kind: Kind::Counter,
        read: |c| c.store.map(|s| s.dropped_results as f64),
    },
    ProcessFamily {
        name: "linerate_remote_write_dropped_requests",
        help: "Remote-write requests dropped: the queue full, or refused for good",
        kind: Kind::Counter,
        read: |c| c.remote_write_dropped.map(|n| n as f64),
    },
    ProcessFamily {
        name: "linerate_alert_notifications_dropped",
        help: "Alert notifications dropped: the queue full, or refused for good",
        kind: Kind::Counter,
        read: |c| c.notifications_dropped.map(|n| n as f64),
    },
];

/// The coordinator's families as OpenMetrics text without `# EOF`.
pub fn process_families(counts: &ProcessCounts) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for family in &PROCESS_FAMILIES {
        let Some(value) = (family.read)(counts) else {
            continue;
        };
        let (kind, suffix) = match family.kind {
            Kind::Counter => ("counter", "_total"),
            _ => ("gauge", ""),
        };
        let _ = write!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{suffix} {value}\n",
            name = family.name,
            help = family.help
        );
    }
    out
}
