//! A report as the JSON document `iperf3 -J` prints, for scripts written against it:
//! `start`, `intervals`, and `end` with `streams`, `sum_sent`, `sum_received` and
//! `cpu_utilization_percent`. Stream numbers are iperf3's ids (1, 3, 4, ...); the
//! figures are linerate's (receiver figures from the receiver, over the window).

use crate::model::{Direction, Report};
use serde_json::{json, Map, Value};

/// iperf3's id for the stream created `index`-th from 0 (it skips 2).
fn stream_id(index: u32) -> u32 {
    if index == 0 {
        1
    } else {
        index + 2
    }
}

fn host_port(addr: &str) -> (String, u16) {
    match addr.parse::<std::net::SocketAddr>() {
        Ok(a) => (a.ip().to_string(), a.port()),
        Err(_) => (addr.to_string(), 0),
    }
}

fn span(start: f64, end: f64, bytes: u64, bps: f64) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("start".into(), start.into());
    m.insert("end".into(), end.into());
    m.insert("seconds".into(), (end - start).into());
    m.insert("bytes".into(), bytes.into());
    m.insert("bits_per_second".into(), bps.into());
    m
}

/// Renders `report` (of a test this host ran as the client) in `iperf3 -J`'s shape, with
/// the server's output (`server_output_text` or `server_output_json`) when it sent one.
pub fn render(report: &Report, server_output: Option<(&str, Value)>) -> Value {
    let config = &report.config;
    let tcp = config.protocol == "tcp";
    let mut doc = json!({
        "start": {
            "connected": connected(report),
            "version": report.tool,
            "system_info": format!("{} {}", report.host.local.hostname, report.host.local.kernel),
            "timestamp": { "timesecs": report.started_at as i64 },
            "connecting_to": { "host": config.target, "port": config.port },
            "test_start": {
                "protocol": if tcp { "TCP" } else { "UDP" },
                "num_streams": config.parallel,
                "blksize": config.length,
                "omit": config.omit_s,
                "duration": config.time_s,
                "reverse": u8::from(config.direction == Direction::Reverse),
                "bidir": u8::from(config.direction == Direction::Bidir),
            },
        },
        "intervals": intervals(report),
        "end": end(report),
    });
    if let Some((key, output)) = server_output {
        doc[key] = output;
    }
    doc
}

/// `start.connected`: each stream's addresses.
fn connected(report: &Report) -> Vec<Value> {
    report
        .flows
        .iter()
        .map(|f| {
            let (local_host, local_port) = host_port(&f.client.local_addr);
            let (remote_host, remote_port) = host_port(&f.client.remote_addr);
            json!({
                "socket": stream_id(f.id),
                "local_host": local_host,
                "local_port": local_port,
                "remote_host": remote_host,
                "remote_port": remote_port,
            })
        })
        .collect()
}

/// `intervals`: per interval, each stream's figures and their sum.
fn intervals(report: &Report) -> Vec<Value> {
    let config = &report.config;
    let tcp = config.protocol == "tcp";
    let client_sends = |id: u32| config.flow_direction(id) != Direction::Reverse;
    report
        .intervals
        .iter()
        .map(|i| {
            let streams: Vec<Value> = i
                .flows
                .iter()
                .flatten()
                .map(|f| {
                    // This side counted one of the two; the other is zero.
                    let mut m = span(
                        i.start,
                        i.end,
                        f.sender_bytes + f.receiver_bytes,
                        f.sender_bps + f.receiver_bps,
                    );
                    m.insert("socket".into(), stream_id(f.id).into());
                    if tcp && client_sends(f.id) {
                        m.insert("retransmits".into(), f.retransmits.into());
                    }
                    m.insert("omitted".into(), i.omitted.into());
                    m.insert("sender".into(), client_sends(f.id).into());
                    Value::Object(m)
                })
                .collect();
            let mut sum = span(
                i.start,
                i.end,
                i.sender_bytes + i.receiver_bytes,
                i.sender_bps + i.receiver_bps,
            );
            if tcp {
                sum.insert("retransmits".into(), i.retransmits.into());
            }
            sum.insert("omitted".into(), i.omitted.into());
            sum.insert(
                "sender".into(),
                (config.direction != Direction::Reverse).into(),
            );
            json!({ "streams": streams, "sum": sum })
        })
        .collect()
}

/// `end.streams`: each stream's sender and receiver figures (and UDP counts).
fn end_streams(report: &Report) -> Vec<Value> {
    let config = &report.config;
    let tcp = config.protocol == "tcp";
    let client_sends = |id: u32| config.flow_direction(id) != Direction::Reverse;
    let duration = report.summary.duration_s;
    report
        .flows
        .iter()
        .map(|f| {
            let sends = client_sends(f.id);
            let mut sender = span(0.0, duration, f.sender_bytes, f.sender_bps);
            sender.insert("socket".into(), stream_id(f.id).into());
            if tcp {
                sender.insert("retransmits".into(), f.retransmits.into());
            }
            sender.insert("sender".into(), sends.into());
            let mut receiver = span(0.0, duration, f.receiver_bytes, f.receiver_bps);
            receiver.insert("socket".into(), stream_id(f.id).into());
            receiver.insert("sender".into(), sends.into());
            let mut stream = Map::new();
            stream.insert("sender".into(), Value::Object(sender));
            stream.insert("receiver".into(), Value::Object(receiver));
            if let Some(udp) = &f.udp {
                let mut u = span(0.0, duration, f.receiver_bytes, f.receiver_bps);
                u.insert("socket".into(), stream_id(f.id).into());
                u.insert("jitter_ms".into(), udp.counts.jitter_ms.into());
                u.insert("lost_packets".into(), udp.counts.lost.into());
                u.insert(
                    "packets".into(),
                    (udp.counts.received + udp.counts.lost).into(),
                );
                u.insert("lost_percent".into(), udp.loss_pct.into());
                u.insert("out_of_order".into(), udp.counts.out_of_order.into());
                u.insert("sender".into(), sends.into());
                stream.insert("udp".into(), Value::Object(u));
            }
            Value::Object(stream)
        })
        .collect()
}

/// `end`: the sums, the streams, CPU, and the congestion control on each end.
fn end(report: &Report) -> Map<String, Value> {
    let config = &report.config;
    let tcp = config.protocol == "tcp";
    let duration = report.summary.duration_s;
    let s = &report.summary;
    let sums = |sent: (u64, f64, u64), received: (u64, f64), client_sends: bool| {
        let mut sum_sent = span(0.0, duration, sent.0, sent.1);
        if tcp {
            sum_sent.insert("retransmits".into(), sent.2.into());
        }
        sum_sent.insert("sender".into(), client_sends.into());
        let mut sum_received = span(0.0, duration, received.0, received.1);
        sum_received.insert("sender".into(), client_sends.into());
        (Value::Object(sum_sent), Value::Object(sum_received))
    };
    let cpu = &s.cpu;
    let mut end = Map::new();
    // Bidir: iperf3 keeps the client's sending direction in sum_sent and sum_received and
    // the other in the *_bidir_reverse pair.
    let by_direction = |wanted: Direction| {
        s.directions
            .iter()
            .flatten()
            .find(|d| d.direction == Some(wanted))
    };
    match (
        config.direction,
        by_direction(Direction::Forward),
        by_direction(Direction::Reverse),
    ) {
        (Direction::Bidir, Some(forward), Some(reverse)) => {
            let (sent, received) = sums(
                (
                    forward.sender_bytes,
                    forward.sender_bps,
                    forward.retransmits,
                ),
                (forward.receiver_bytes, forward.receiver_bps),
                true,
            );
            end.insert("sum_sent".into(), sent);
            end.insert("sum_received".into(), received);
            let (sent, received) = sums(
                (
                    reverse.sender_bytes,
                    reverse.sender_bps,
                    reverse.retransmits,
                ),
                (reverse.receiver_bytes, reverse.receiver_bps),
                false,
            );
            end.insert("sum_sent_bidir_reverse".into(), sent);
            end.insert("sum_received_bidir_reverse".into(), received);
        }
        _ => {
            let (sent, received) = sums(
                (s.sender_bytes, s.sender_bps, s.retransmits),
                (s.receiver_bytes, s.receiver_bps),
                config.direction != Direction::Reverse,
            );
            end.insert("sum_sent".into(), sent);
            end.insert("sum_received".into(), received);
        }
    }
    end.insert("streams".into(), end_streams(report).into());
    if let Some(udp) = &s.udp {
        let mut sum = span(0.0, duration, s.receiver_bytes, s.receiver_bps);
        sum.insert("jitter_ms".into(), udp.jitter_ms.into());
        sum.insert("lost_packets".into(), udp.lost.into());
        sum.insert("packets".into(), (udp.received + udp.lost).into());
        sum.insert("lost_percent".into(), udp.loss_pct.into());
        sum.insert("sender".into(), true.into());
        end.insert("sum".into(), Value::Object(sum));
    }
    end.insert(
        "cpu_utilization_percent".into(),
        json!({
            "host_total": cpu.local.process_pct,
            "host_user": cpu.local.process_user_pct,
            "host_system": cpu.local.process_pct - cpu.local.process_user_pct,
            "remote_total": cpu.remote.process_pct,
            "remote_user": cpu.remote.process_user_pct,
            "remote_system": cpu.remote.process_pct - cpu.remote.process_user_pct,
        }),
    );
    let congestion = |facts: Option<&crate::model::SocketFacts>| {
        facts.map(|f| f.congestion.clone()).unwrap_or_default()
    };
    if tcp {
        let first = report.flows.first();
        let (sender, receiver) = if config.direction == Direction::Reverse {
            (
                congestion(first.map(|f| &f.server)),
                congestion(first.map(|f| &f.client)),
            )
        } else {
            (
                congestion(first.map(|f| &f.client)),
                congestion(first.map(|f| &f.server)),
            )
        };
        end.insert("sender_tcp_congestion".into(), sender.into());
        end.insert("receiver_tcp_congestion".into(), receiver.into());
    }
    end
}
