//! Prometheus remote-write 1.0: each finished job's series pushed to a receiver
//! (Prometheus with its receiver on, Mimir, Thanos, VictoriaMetrics) for deployments where
//! nothing scrapes. The wire: a protobuf `WriteRequest` (the messages below, as
//! prometheus/prompb/remote.proto and types.proto define them), snappy's block format,
//! POSTed with the protocol's headers, one request per finished job, through a
//! [`Poster`] (a bounded queue, retries of 5xx with backoff, 4xx dropped, as the
//! specification says).

use crate::board::{Board, Key, RTT_BUCKETS};
use crate::families::{Value, FAMILIES};
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
/// the same names and values a scrape gives, from the same table ([`FAMILIES`]).
pub fn batch_of(board: &Board, key: &Key) -> Vec<TimeSeries> {
    let Some(s) = board.series.get(key) else {
        return Vec::new();
    };
    let at = (s.latest.ended_at * 1000.0) as i64;
    let mut out = Vec::new();
    for family in &FAMILIES {
        for sample in (family.read)(&s.latest, &s.totals) {
            match sample.value {
                Value::Gauge(v) => out.push(series(family.name, key, sample.label, v, at)),
                Value::Counter(n) => {
                    let name = format!("{}_total", family.name);
                    out.push(series(&name, key, sample.label, n as f64, at));
                }
                Value::Histogram {
                    buckets,
                    sum,
                    count,
                } => {
                    let name = |suffix: &str| format!("{}{suffix}", family.name);
                    let mut cumulative = 0;
                    for (i, n) in buckets.iter().enumerate() {
                        cumulative += n;
                        let le = RTT_BUCKETS
                            .get(i)
                            .map_or("+Inf".to_string(), |b| b.to_string());
                        out.push(series(
                            &name("_bucket"),
                            key,
                            Some(("le", &le)),
                            cumulative as f64,
                            at,
                        ));
                    }
                    out.push(series(&name("_sum"), key, sample.label, sum, at));
                    out.push(series(&name("_count"), key, sample.label, count as f64, at));
                }
            }
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
