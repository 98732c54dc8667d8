//! A report as the JSON document `iperf3 -J` prints (iperf3 3.12's keys, with the later
//! `sender_tcp_congestion` and `receiver_tcp_congestion`), for scripts written against it:
//! `start`, `intervals` with each stream and their sum, and `end` with `streams`,
//! `sum_sent`, `sum_received` (and `sum` for UDP) and `cpu_utilization_percent`. Stream
//! numbers are iperf3's ids (1, 3, 4, ...); the figures are linerate's (receiver figures
//! from the receiver, over the window). docs/iperf3.md lists every key and where it comes
//! from. [`start_line`], [`interval_line`] and [`end_lines`] give it as `--json-stream` lines.

use crate::model::{
    Direction, FlowIntervalReport, FlowReport, HostFacts, IntervalReport, Report, SideInterval,
    TestConfig,
};
use linerate_model::clock::UnixTime;
use serde_json::{json, Map, Value};

/// What iperf3 -J's `start` says that a report does not hold: the client's own facts of
/// the run, as its driver knows them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Iperf3Start {
    /// The test's cookie.
    pub cookie: String,
    /// The control connection's MSS.
    pub tcp_mss_default: u64,
    /// Bytes (`-n`) and blocks (`-k`) asked for; 0 when the test is timed.
    pub bytes: u64,
    pub blocks: u64,
    /// The rate asked per stream (`-b`), bit/s; 0 for unlimited.
    pub target_bitrate: u64,
}

/// The facts of a run's streams that `start` shows: each stream's local and remote address,
/// and the first stream's socket buffers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamFacts {
    pub connected: Vec<(String, String)>,
    pub sndbuf: u64,
    pub rcvbuf: u64,
}

impl StreamFacts {
    fn of(report: &Report) -> StreamFacts {
        StreamFacts {
            connected: report
                .flows
                .iter()
                .map(|f| (f.client.local_addr.clone(), f.client.remote_addr.clone()))
                .collect(),
            sndbuf: report.flows.first().map_or(0, |f| f.client.sndbuf),
            rcvbuf: report.flows.first().map_or(0, |f| f.client.rcvbuf),
        }
    }
}

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

/// The time as iperf3 writes `start.timestamp.time`: "Mon, 23 Nov 2026 09:12:29 GMT".
fn http_date(unix_s: f64) -> String {
    let at = UnixTime::from_seconds(unix_s.trunc());
    let (secs, time) = (at.whole_seconds(), at.system());
    let text = humantime::format_rfc3339_seconds(time).to_string();
    // 2026-11-23T09:12:29Z
    let (date, clock) = text.split_once('T').unwrap_or((&text, "00:00:00Z"));
    let mut parts = date.split('-').map(|p| p.parse::<u64>().unwrap_or(0));
    let (year, month, day) = (
        parts.next().unwrap_or(1970),
        parts.next().unwrap_or(1),
        parts.next().unwrap_or(1),
    );
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let weekday = DAYS[((secs / 86_400) % 7) as usize];
    let month = MONTHS[(month.clamp(1, 12) - 1) as usize];
    format!(
        "{weekday}, {day:02} {month} {year} {} GMT",
        clock.trim_end_matches('Z')
    )
}

/// Renders `report` (of a test this host ran as the client) in `iperf3 -J`'s shape, with
/// the server's output (`server_output_text` or `server_output_json`) when it sent one.
pub fn render(report: &Report, start: &Iperf3Start, server_output: Option<(&str, Value)>) -> Value {
    let mut doc = json!({
        "start": start_of(report, start),
        "intervals": report
            .intervals
            .iter()
            .map(|i| interval(&report.config, i))
            .collect::<Vec<_>>(),
        "end": end(report),
    });
    if let Some((key, output)) = server_output {
        doc[key] = output;
    }
    doc
}

/// iperf3 3.17's `--json-stream` lines, each `{"event", "data"}`: the `start` line as the
/// streams open ([`start_line`]), an `interval` line as each interval ends
/// ([`interval_line`]), and at the end these: `end`, and the server's output when it sent
/// one.
pub fn end_lines(report: &Report, server_output: Option<(&str, Value)>) -> Vec<Value> {
    let mut lines = vec![json!({"event": "end", "data": end(report)})];
    if let Some((key, output)) = server_output {
        lines.push(json!({"event": key, "data": output}));
    }
    lines
}

/// What `start` is written from: a finished report, or a run whose streams just opened.
pub struct StartOf<'a> {
    pub config: &'a TestConfig,
    /// This build, as `version` shows it.
    pub tool: &'a str,
    pub host: &'a HostFacts,
    pub started_at: f64,
    pub streams: &'a StreamFacts,
}

/// The `--json-stream` start line, written when the streams are open.
pub fn start_line(run: &StartOf, start: &Iperf3Start) -> Value {
    json!({"event": "start", "data": start_value(run, start)})
}

/// A `--json-stream` interval line, from this side's figures as the interval ends.
pub fn interval_line(config: &TestConfig, side: &SideInterval) -> Value {
    let merged = crate::assemble::one_side(side);
    json!({"event": "interval", "data": interval(config, &merged)})
}

/// `start`: the connection, the test as asked, the sockets.
pub fn start_of(report: &Report, start: &Iperf3Start) -> Value {
    let streams = StreamFacts::of(report);
    let run = StartOf {
        config: &report.config,
        tool: &report.tool,
        host: &report.host.local,
        started_at: report.started_at,
        streams: &streams,
    };
    start_value(&run, start)
}

fn start_value(run: &StartOf, start: &Iperf3Start) -> Value {
    let StartOf {
        config,
        tool,
        host,
        started_at,
        streams,
    } = *run;
    let tcp = config.protocol.traits().kernel_tcp;
    let connected: Vec<Value> = streams
        .connected
        .iter()
        .enumerate()
        .map(|(index, (local, remote))| {
            let (local_host, local_port) = host_port(local);
            let (remote_host, remote_port) = host_port(remote);
            json!({
                "socket": stream_id(index as u32),
                "local_host": local_host,
                "local_port": local_port,
                "remote_host": remote_host,
                "remote_port": remote_port,
            })
        })
        .collect();
    let mut out = json!({
        "connected": connected,
        "version": tool,
        "system_info": format!("{} {}", host.hostname, host.kernel),
        "timestamp": {
            "time": http_date(started_at),
            "timesecs": started_at as i64,
        },
        "connecting_to": { "host": config.target, "port": config.port },
        "cookie": start.cookie,
        "target_bitrate": start.target_bitrate,
        "sock_bufsize": config.window.unwrap_or(0),
        "sndbuf_actual": streams.sndbuf,
        "rcvbuf_actual": streams.rcvbuf,
        "test_start": {
            "protocol": if tcp { "TCP" } else { "UDP" },
            "num_streams": config.parallel,
            "blksize": config.length,
            "omit": config.omit_s,
            "duration": config.time_s,
            "bytes": start.bytes,
            "blocks": start.blocks,
            "reverse": u8::from(config.direction == Direction::Reverse),
            // linerate sets no IP TOS: the field's true value.
            "tos": 0,
            "target_bitrate": start.target_bitrate,
        },
    });
    if tcp {
        out["tcp_mss_default"] = start.tcp_mss_default.into();
    }
    out
}

/// One interval: each stream (its bytes, and for a TCP sender its TCP_INFO figures; for
/// UDP its datagrams) and their sum per direction.
fn interval(config: &TestConfig, i: &IntervalReport) -> Value {
    let tcp = config.protocol.traits().kernel_tcp;
    let client_sends = |id: u32| config.flow_direction(id) != Direction::Reverse;
    let flows: Vec<&FlowIntervalReport> = i.flows.iter().flatten().collect();
    let streams: Vec<Value> = flows
        .iter()
        .map(|f| {
            let sends = client_sends(f.id);
            // This side counted one of the two; the other is zero.
            let mut m = span(
                i.start,
                i.end,
                f.sender_bytes + f.receiver_bytes,
                f.sender_bps + f.receiver_bps,
            );
            m.insert("socket".into(), stream_id(f.id).into());
            if tcp && sends {
                let info = f.tcp.unwrap_or_default();
                m.insert("retransmits".into(), f.retransmits.into());
                m.insert("snd_cwnd".into(), info.snd_cwnd_bytes.into());
                m.insert("snd_wnd".into(), info.snd_wnd_bytes.into());
                m.insert("rtt".into(), info.rtt_us.into());
                m.insert("rttvar".into(), info.rttvar_us.into());
                m.insert("pmtu".into(), info.pmtu.into());
            }
            if !tcp {
                udp_interval_keys(&mut m, f.sender_datagrams, f, sends);
            }
            m.insert("omitted".into(), i.omitted.into());
            m.insert("sender".into(), sends.into());
            Value::Object(m)
        })
        .collect();
    let sum_of = |forward: bool| {
        let chosen: Vec<&&FlowIntervalReport> = flows
            .iter()
            .filter(|f| client_sends(f.id) == forward)
            .collect();
        let bytes: u64 = chosen
            .iter()
            .map(|f| f.sender_bytes + f.receiver_bytes)
            .sum();
        let bps: f64 = chosen.iter().map(|f| f.sender_bps + f.receiver_bps).sum();
        let mut sum = span(i.start, i.end, bytes, bps);
        if tcp && forward {
            let retransmits: u64 = chosen.iter().map(|f| f.retransmits).sum();
            sum.insert("retransmits".into(), retransmits.into());
        }
        if !tcp {
            let total = FlowIntervalReport {
                receiver_datagrams: chosen.iter().map(|f| f.receiver_datagrams).sum(),
                lost_datagrams: chosen.iter().map(|f| f.lost_datagrams).sum(),
                jitter_ms: chosen.iter().map(|f| f.jitter_ms).sum::<f64>()
                    / chosen.len().max(1) as f64,
                ..Default::default()
            };
            let sent: u64 = chosen.iter().map(|f| f.sender_datagrams).sum();
            udp_interval_keys(&mut sum, sent, &total, forward);
        }
        sum.insert("omitted".into(), i.omitted.into());
        sum.insert("sender".into(), forward.into());
        Value::Object(sum)
    };
    let mut out = json!({ "streams": streams });
    match config.direction {
        Direction::Bidir => {
            out["sum"] = sum_of(true);
            out["sum_bidir_reverse"] = sum_of(false);
        }
        direction => out["sum"] = sum_of(direction != Direction::Reverse),
    }
    out
}

/// A UDP stream's datagrams in an interval: a sender's count, or what the receiver made
/// of them (received plus lost, the loss and the jitter), as iperf3 writes them.
fn udp_interval_keys(m: &mut Map<String, Value>, sent: u64, f: &FlowIntervalReport, sends: bool) {
    if sends {
        m.insert("packets".into(), sent.into());
        return;
    }
    let packets = f.receiver_datagrams + f.lost_datagrams;
    m.insert("jitter_ms".into(), f.jitter_ms.into());
    m.insert("lost_packets".into(), f.lost_datagrams.into());
    m.insert("packets".into(), packets.into());
    let percent = if packets > 0 {
        f.lost_datagrams as f64 * 100.0 / packets as f64
    } else {
        0.0
    };
    m.insert("lost_percent".into(), percent.into());
}

/// A TCP stream's extremes over the intervals, as iperf3 keeps them.
fn tcp_extremes(report: &Report, id: u32) -> Option<Map<String, Value>> {
    let samples: Vec<_> = report
        .intervals
        .iter()
        .flat_map(|i| i.flows.iter().flatten())
        .filter(|f| f.id == id)
        .filter_map(|f| f.tcp)
        .collect();
    if samples.is_empty() {
        return None;
    }
    let rtts: Vec<u64> = samples.iter().map(|s| u64::from(s.rtt_us)).collect();
    let mut m = Map::new();
    m.insert(
        "max_snd_cwnd".into(),
        samples
            .iter()
            .map(|s| s.snd_cwnd_bytes)
            .max()
            .unwrap_or(0)
            .into(),
    );
    m.insert(
        "max_snd_wnd".into(),
        samples
            .iter()
            .map(|s| s.snd_wnd_bytes)
            .max()
            .unwrap_or(0)
            .into(),
    );
    m.insert(
        "max_rtt".into(),
        rtts.iter().max().copied().unwrap_or(0).into(),
    );
    m.insert(
        "min_rtt".into(),
        rtts.iter().min().copied().unwrap_or(0).into(),
    );
    m.insert(
        "mean_rtt".into(),
        (rtts.iter().sum::<u64>() / rtts.len() as u64).into(),
    );
    Some(m)
}

/// `end.streams`: each stream's sender and receiver figures (and UDP counts).
fn end_streams(report: &Report) -> Vec<Value> {
    let config = &report.config;
    let tcp = config.protocol.traits().kernel_tcp;
    let duration = report.summary.duration_s;
    report
        .flows
        .iter()
        .map(|f| {
            let sends = config.flow_direction(f.id) != Direction::Reverse;
            let mut stream = Map::new();
            if let Some(udp) = udp_stream(f, duration, sends) {
                // iperf3 writes a UDP stream's end as its `udp` block alone.
                stream.insert("udp".into(), udp);
                return Value::Object(stream);
            }
            let mut sender = span(0.0, duration, f.sender_bytes, f.sender_bps);
            sender.insert("socket".into(), stream_id(f.id).into());
            if tcp {
                sender.insert("retransmits".into(), f.retransmits.into());
                if let Some(extremes) = tcp_extremes(report, f.id) {
                    sender.extend(extremes);
                }
            }
            sender.insert("sender".into(), sends.into());
            let mut receiver = span(0.0, duration, f.receiver_bytes, f.receiver_bps);
            receiver.insert("socket".into(), stream_id(f.id).into());
            receiver.insert("sender".into(), sends.into());
            stream.insert("sender".into(), Value::Object(sender));
            stream.insert("receiver".into(), Value::Object(receiver));
            Value::Object(stream)
        })
        .collect()
}

fn udp_stream(f: &FlowReport, duration: f64, sends: bool) -> Option<Value> {
    let udp = f.udp.as_ref()?;
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
    Some(Value::Object(u))
}

/// `end`: the sums, the streams, CPU, and the congestion control on each end, key by
/// key in iperf3's own order.
fn end(report: &Report) -> Map<String, Value> {
    let config = &report.config;
    let tcp = config.protocol.traits().kernel_tcp;
    let duration = report.summary.duration_s;
    let s = &report.summary;
    let udp = s.udp.as_ref();
    // UDP: what was sent, and what the receiver made of it (iperf3 3.12 puts both in
    // sum_sent and sum_received, with the receiver's loss and jitter in the latter).
    let udp_keys = |m: &mut Map<String, Value>, received: bool| {
        if let Some(udp) = udp {
            let packets = udp.received + udp.lost;
            let (jitter, lost, percent) = if received {
                (udp.jitter_ms, udp.lost, udp.loss_pct)
            } else {
                (0.0, 0, 0.0)
            };
            m.insert("jitter_ms".into(), jitter.into());
            m.insert("lost_packets".into(), lost.into());
            m.insert("packets".into(), packets.into());
            m.insert("lost_percent".into(), percent.into());
        }
    };
    let sums = |sent: (u64, f64, u64), received: (u64, f64), client_sends: bool| {
        let mut sum_sent = span(0.0, duration, sent.0, sent.1);
        if tcp {
            sum_sent.insert("retransmits".into(), sent.2.into());
        }
        udp_keys(&mut sum_sent, false);
        sum_sent.insert("sender".into(), client_sends.into());
        let mut sum_received = span(0.0, duration, received.0, received.1);
        udp_keys(&mut sum_received, true);
        sum_received.insert("sender".into(), (client_sends && tcp).into());
        (Value::Object(sum_sent), Value::Object(sum_received))
    };
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
    end_totals(report, &mut end);
    end
}

/// `end`'s keys after the streams: the UDP sum, CPU and each end's congestion control.
fn end_totals(report: &Report, end: &mut Map<String, Value>) {
    let config = &report.config;
    let tcp = config.protocol.traits().kernel_tcp;
    let s = &report.summary;
    let (duration, udp, cpu) = (s.duration_s, s.udp.as_ref(), &s.cpu);
    if let Some(udp) = udp {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_read_as_iperf3_writes_them() {
        // 2026-11-23 09:12:29 UTC was a Monday.
        assert_eq!(http_date(1_795_425_149.0), "Mon, 23 Nov 2026 09:12:29 GMT");
        assert_eq!(http_date(0.0), "Thu, 01 Jan 1970 00:00:00 GMT");
    }
}
