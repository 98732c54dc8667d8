//! Prometheus remote-write 1.0: each finished job's series pushed to a receiver
//! (Prometheus with its receiver on, Mimir, Thanos, VictoriaMetrics) for deployments where
//! nothing scrapes. The wire: a protobuf `WriteRequest` (the messages below, as
//! prometheus/prompb/remote.proto and types.proto define them), snappy's block format,
//! POSTed with the protocol's headers, one request per finished job, through a
//! [`Poster`] (a bounded queue, retries of 5xx with backoff, 4xx dropped, as the
//! specification says).

use crate::board::{Board, Key, RTT_BUCKETS};
use crate::post::{Poster, Request, Target};
use anyhow::Result;

#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    /// Sorted by name, `__name__` first.
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Milliseconds since the Unix epoch.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

fn series(
    name: &str,
    key: &Key,
    extra: Option<(&str, &str)>,
    value: f64,
    at_ms: i64,
) -> TimeSeries {
    let mut labels = vec![
        Label {
            name: "__name__".into(),
            value: name.into(),
        },
        Label {
            name: "direction".into(),
            value: key.direction.clone(),
        },
        Label {
            name: "dst".into(),
            value: key.dst.clone(),
        },
        Label {
            name: "mesh".into(),
            value: key.mesh.clone(),
        },
        Label {
            name: "protocol".into(),
            value: key.protocol.clone(),
        },
        Label {
            name: "src".into(),
            value: key.src.clone(),
        },
        Label {
            name: "test".into(),
            value: key.test.clone(),
        },
    ];
    if let Some((n, v)) = extra {
        labels.push(Label {
            name: n.into(),
            value: v.into(),
        });
    }
    labels[1..].sort_by(|a, b| a.name.cmp(&b.name));
    TimeSeries {
        labels,
        samples: vec![Sample {
            value,
            timestamp: at_ms,
        }],
    }
}

/// The series of `key` as the board holds them now, stamped with its newest result's end:
/// the same names and values a scrape gives.
pub fn batch_of(board: &Board, key: &Key) -> Vec<TimeSeries> {
    let Some(s) = board.series.get(key) else {
        return Vec::new();
    };
    let l = &s.latest;
    let at = (l.ended_at * 1000.0) as i64;
    let mut out = Vec::new();
    if l.ok {
        if let Some(bps) = l.goodput_bps {
            out.push(series(
                "linerate_goodput_bytes_per_second",
                key,
                None,
                bps / 8.0,
                at,
            ));
        }
        if let Some(loss) = l.loss_ratio {
            out.push(series("linerate_loss_ratio", key, None, loss, at));
        }
        if let Some(q) = l.rtt {
            for (stat, v) in [
                ("p50", q.p50),
                ("p90", q.p90),
                ("p99", q.p99),
                ("p999", q.p999),
            ] {
                out.push(series(
                    "linerate_last_rtt_seconds",
                    key,
                    Some(("stat", stat)),
                    v,
                    at,
                ));
            }
        }
    }
    let ok = if l.ok { 1.0 } else { 0.0 };
    out.push(series("linerate_last_result_ok", key, None, ok, at));
    out.push(series(
        "linerate_last_result_timestamp_seconds",
        key,
        None,
        l.ended_at,
        at,
    ));
    if let Some(cpu) = l.cpu_s_per_gbit.filter(|_| l.ok) {
        out.push(series(
            "linerate_cpu_seconds_per_gigabit",
            key,
            None,
            cpu,
            at,
        ));
    }
    let t = &s.totals;
    if l.retransmits.is_some() {
        out.push(series(
            "linerate_retransmits_total",
            key,
            None,
            t.retransmits as f64,
            at,
        ));
    }
    for (result, n) in [("ok", t.ok), ("failed", t.failed), ("skipped", t.skipped)]
        .into_iter()
        .filter(|&(_, n)| n > 0)
    {
        out.push(series(
            "linerate_tests_total",
            key,
            Some(("result", result)),
            n as f64,
            at,
        ));
    }
    if t.rtt_count > 0 {
        out.push(series(
            "linerate_rtt_seconds_sum",
            key,
            None,
            t.rtt_sum_s,
            at,
        ));
        out.push(series(
            "linerate_rtt_seconds_count",
            key,
            None,
            t.rtt_count as f64,
            at,
        ));
        let mut cumulative = 0;
        for (i, n) in t.rtt_buckets.iter().enumerate() {
            cumulative += n;
            let le = RTT_BUCKETS
                .get(i)
                .map_or("+Inf".to_string(), |b| b.to_string());
            out.push(series(
                "linerate_rtt_seconds_bucket",
                key,
                Some(("le", &le)),
                cumulative as f64,
                at,
            ));
        }
    }
    out
}

/// The request's body: the protobuf, snappy-compressed (the block format, not framed).
pub fn encode(timeseries: Vec<TimeSeries>) -> Vec<u8> {
    use prost::Message;
    let request = WriteRequest { timeseries };
    snap::raw::Encoder::new()
        .compress_vec(&request.encode_to_vec())
        .expect("snappy compresses any input")
}

/// Sends each job's series to a remote-write receiver.
pub struct RemoteWriter {
    target: Target,
    pub poster: Poster,
}

impl RemoteWriter {
    /// `url`: the receiver's endpoint (Prometheus: http://HOST:9090/api/v1/write).
    pub fn start(url: &str) -> Result<RemoteWriter> {
        Ok(RemoteWriter {
            target: crate::post::target(url)?,
            poster: Poster::start("remote-write")?,
        })
    }

    /// Queues the series of `key` as the board holds them now.
    pub fn push(&self, board: &Board, key: &Key) {
        let series = batch_of(board, key);
        if series.is_empty() {
            return;
        }
        self.poster.push(Request {
            target: self.target.clone(),
            content_type: "application/x-protobuf",
            headers: vec![
                ("content-encoding", "snappy".into()),
                ("x-prometheus-remote-write-version", "0.1.0".into()),
            ],
            body: encode(series).into(),
        });
    }
}
