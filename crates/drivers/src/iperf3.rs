//! What both iperf3 drivers share: a test's config from iperf3 parameters, one side's
//! figures as iperf3 results and back, and the server output text iperf3 clients ask for.

use linerate_model::{Environment, StreamRequest, StreamTransport, TestKind, TestRequest};
use linerate_proto::iperf3::{stream_id, Params, Results, StreamResults, Transport};
use linerate_report::units::{format_bytes, format_rate, Scale};
use linerate_report::{
    CpuUsage, Direction, FlowSide, HostFacts, Role, SideResult, TestConfig, UdpCounts,
};
use std::fmt::Write as _;
use std::time::Duration;

/// The test an iperf3 parameters document describes, as linerate runs it, resolved as
/// every test is (linerate-model's `TestConfig::resolve`). A test that ends on a byte or
/// block count runs up to `counted_run` on the clock; its client ends it sooner. `Err`
/// names a value linerate cannot run (parameters a server took are always runnable).
pub fn config_of(
    params: &Params,
    target: &str,
    port: u16,
    counted_run: Duration,
) -> Result<TestConfig, String> {
    let time_s = if params.time > 0 {
        params.time as f64
    } else {
        counted_run.as_secs_f64()
    };
    let length = Some(u64::from(params.len));
    let transport = match params.transport {
        Transport::Tcp => StreamTransport::Tcp {
            length,
            mss: params.mss,
            nodelay: params.nodelay,
        },
        Transport::Udp => StreamTransport::Udp {
            length,
            pps: None,
            gso: false,
            gro: false,
        },
    };
    let request = TestRequest {
        tls: None,
        target: Some(target.to_string()),
        port,
        parallel: params.parallel,
        threads: None,
        time_s,
        omit_s: params.omit as f64,
        interval_s: 1.0,
        window: params.window,
        congestion: params.congestion.clone(),
        per_flow: true,
        connect_timeout_s: 10.0,
        // An iperf3 peer's results have no place for the host's counters.
        observe: false,
        source: None,
        marks: None,
        kind: TestKind::Stream(StreamRequest {
            direction: if params.bidirectional {
                Direction::Bidir
            } else if params.reverse {
                Direction::Reverse
            } else {
                Direction::Forward
            },
            // iperf3's 0 is unlimited, for TCP and UDP alike.
            rate_bps: Some(params.bandwidth),
            transport,
        }),
    };
    let environment = Environment {
        cpus: linerate_engine::sys::cpus(),
        udp_length: None,
    };
    TestConfig::resolve(&request, &environment)
}

/// The bytes each flow of a byte- or block-count test moves, and which flows count
/// (iperf3 counts what the client sends, or in reverse what it receives), as a
/// per-flow share of the total.
pub fn budget_of(params: &Params) -> Option<(Role, u64)> {
    let total = if params.num > 0 {
        params.num
    } else {
        params.blockcount.checked_mul(u64::from(params.len))?
    };
    if params.time > 0 || total == 0 {
        return None;
    }
    let role = if params.reverse && !params.bidirectional {
        Role::Receive
    } else {
        Role::Send
    };
    Some((role, total.div_ceil(u64::from(params.parallel.max(1)))))
}

/// One side's figures as iperf3's results exchange carries them: per stream, the bytes
/// (and UDP counts) of the measurement window, which ends at `end_time`.
pub fn results_of(side: &SideResult, transport: Transport, output: Option<String>) -> Results {
    let tcp = transport == Transport::Tcp;
    let sends = side.flows.iter().any(|f| f.role == Role::Send);
    let total = side.cpu.process_pct;
    let user = side.cpu.process_user_pct.min(total);
    let mut flows: Vec<&FlowSide> = side.flows.iter().collect();
    flows.sort_by_key(|f| f.id);
    Results {
        cpu_util_total: total,
        cpu_util_user: user,
        cpu_util_system: total - user,
        sender_has_retransmits: match (sends, tcp) {
            (false, _) => -1,
            (true, true) => 1,
            (true, false) => 0,
        },
        congestion_used: side
            .flows
            .iter()
            .map(|f| f.congestion.clone())
            .find(|c| tcp && !c.is_empty()),
        server_output_text: output,
        server_output_json: None,
        streams: flows
            .iter()
            .map(|f| {
                let udp = f.udp.unwrap_or_default();
                let receives = f.role != Role::Send;
                StreamResults {
                    id: stream_id(f.id as usize),
                    bytes: f.window_bytes,
                    retransmits: if tcp && !receives {
                        f.retransmits as i64
                    } else {
                        -1
                    },
                    jitter: if receives {
                        udp.jitter_ms / 1000.0
                    } else {
                        0.0
                    },
                    errors: if receives { udp.lost as i64 } else { 0 },
                    omitted_errors: None,
                    packets: match (tcp, receives) {
                        (true, _) => 0,
                        // The highest packet number seen: what the sender must have sent.
                        (false, true) => udp.received + udp.lost,
                        (false, false) => udp.sent,
                    },
                    omitted_packets: None,
                    start_time: 0.0,
                    end_time: f.window_s,
                }
            })
            .collect(),
    }
}

/// An iperf3 peer's results as the remote side of a linerate report: its streams as
/// flows (matched to ours by iperf3's stream ids), its CPU as iperf3 measures it (the
/// process alone; no system-wide figures, so `cores` is 0).
pub fn side_from_results(
    theirs: &Results,
    ours: &SideResult,
    transport: Transport,
    software: &str,
) -> SideResult {
    let flows = ours
        .flows
        .iter()
        .filter_map(|mine| {
            let stream = theirs
                .streams
                .iter()
                .find(|s| s.id == stream_id(mine.id as usize))?;
            let role = if mine.role == Role::Send {
                Role::Receive
            } else {
                Role::Send
            };
            let udp = (transport == Transport::Udp).then(|| {
                if role == Role::Receive {
                    let lost = stream.errors.max(0) as u64;
                    UdpCounts {
                        received: stream.packets.saturating_sub(lost),
                        lost,
                        jitter_ms: stream.jitter * 1000.0,
                        ..Default::default()
                    }
                } else {
                    UdpCounts {
                        sent: stream.packets,
                        ..Default::default()
                    }
                }
            });
            Some(FlowSide {
                id: mine.id,
                direction: mine.direction,
                role,
                local_addr: mine.remote_addr.clone(),
                remote_addr: mine.local_addr.clone(),
                window_bytes: stream.bytes,
                window_s: stream.end_time - stream.start_time,
                bytes_total: stream.bytes,
                retransmits: stream.retransmits.max(0) as u64,
                sndbuf: 0,
                rcvbuf: 0,
                mss: 0,
                rtt_us: 0,
                congestion: theirs.congestion_used.clone().unwrap_or_default(),
                error: None,
                udp,
                datagrams_total: udp.map_or(0, |u| u.sent + u.received),
                transactions: 0,
                transactions_total: 0,
                classes: None,
                frames: None,
                one_way_delay_us: None,
                ecn: false,
                mptcp: None,
            })
        })
        .collect();
    SideResult {
        crypto: None,
        host: HostFacts {
            software: software.to_string(),
            ..Default::default()
        },
        cpu: CpuUsage {
            process_pct: theirs.cpu_util_total,
            process_user_pct: theirs.cpu_util_user,
            ..Default::default()
        },
        intervals: Vec::new(),
        flows,
        warnings: Vec::new(),
        udp_kernel: None,
        observe: None,
        rr: None,
    }
}

/// The text a server sends when the client asks for its output: its intervals and
/// window per stream and in sum, as an iperf3 user reads them.
pub fn output_text(side: &SideResult, title: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{title}");
    let _ = writeln!(out, "[ ID] Interval           Transfer     Bitrate");
    let line = |out: &mut String, id: &str, start: f64, end: f64, bytes: u64, note: &str| {
        let seconds = end - start;
        let bps = if seconds > 0.0 {
            bytes as f64 * 8.0 / seconds
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "[{id:>3}] {start:6.2}-{end:<6.2} sec  {:>12}  {:>15}  {note}",
            format_bytes(bytes as f64, Scale::Adaptive),
            format_rate(bps, Scale::Adaptive)
        );
    };
    for interval in &side.intervals {
        let bytes = interval.received_bytes + interval.sent_bytes;
        let note = if interval.omitted { "(omitted)" } else { "" };
        line(&mut out, "SUM", interval.start, interval.end, bytes, note);
    }
    let _ = writeln!(out, "- - - - - - - - - - - - - - - - - - - - - - - - -");
    for flow in &side.flows {
        let verb = if flow.role == Role::Send {
            "sender"
        } else {
            "receiver"
        };
        let id = stream_id(flow.id as usize).to_string();
        line(&mut out, &id, 0.0, flow.window_s, flow.window_bytes, verb);
    }
    let _ = writeln!(
        out,
        "CPU: linerate {:.1}% of a core (user {:.1}, system {:.1}); host {:.1}% of {} cores",
        side.cpu.process_pct,
        side.cpu.process_user_pct,
        side.cpu.process_pct - side.cpu.process_user_pct,
        side.cpu.busy_pct,
        side.cpu.cores
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(id: u32, role: Role, bytes: u64, udp: Option<UdpCounts>) -> FlowSide {
        FlowSide {
            id,
            direction: Direction::Forward,
            role,
            local_addr: "127.0.0.1:5201".into(),
            remote_addr: "127.0.0.1:40000".into(),
            window_bytes: bytes,
            window_s: 5.0,
            bytes_total: bytes + 10,
            retransmits: 3,
            sndbuf: 0,
            rcvbuf: 0,
            mss: 0,
            rtt_us: 0,
            congestion: "cubic".into(),
            error: None,
            udp,
            datagrams_total: 0,
            transactions: 0,
            transactions_total: 0,
            classes: None,
            frames: None,
            one_way_delay_us: None,
            ecn: false,
            mptcp: None,
        }
    }

    fn side(flows: Vec<FlowSide>) -> SideResult {
        SideResult {
            crypto: None,
            host: HostFacts::default(),
            cpu: CpuUsage {
                process_pct: 40.0,
                process_user_pct: 10.0,
                ..Default::default()
            },
            intervals: Vec::new(),
            flows,
            warnings: Vec::new(),
            udp_kernel: None,
            observe: None,
            rr: None,
        }
    }

    #[test]
    fn a_receiving_udp_side_reports_loss_jitter_and_the_highest_packet() {
        let udp = UdpCounts {
            received: 990,
            lost: 10,
            jitter_ms: 0.5,
            ..Default::default()
        };
        let r = results_of(
            &side(vec![flow(0, Role::Receive, 1_000_000, Some(udp))]),
            Transport::Udp,
            None,
        );
        assert_eq!(r.sender_has_retransmits, -1);
        let s = &r.streams[0];
        assert_eq!(
            (s.id, s.bytes, s.errors, s.packets, s.retransmits),
            (1, 1_000_000, 10, 1000, -1)
        );
        assert!((s.jitter - 0.0005).abs() < 1e-12);
        assert_eq!(
            (r.cpu_util_total, r.cpu_util_user, r.cpu_util_system),
            (40.0, 10.0, 30.0)
        );
    }

    #[test]
    fn results_come_back_as_the_peer_side_matched_by_stream_id() {
        let ours = side(vec![
            flow(0, Role::Send, 500, None),
            flow(1, Role::Send, 700, None),
        ]);
        let mut theirs = results_of(&ours, Transport::Tcp, None);
        theirs.streams.reverse();
        theirs.streams[0].bytes = 699;
        let peer = side_from_results(&theirs, &ours, Transport::Tcp, "iperf3");
        assert_eq!(peer.flows.len(), 2);
        assert_eq!(
            (
                peer.flows[1].id,
                peer.flows[1].role,
                peer.flows[1].window_bytes
            ),
            (1, Role::Receive, 699)
        );
        assert_eq!(peer.cpu.cores, 0);
    }

    #[test]
    fn byte_counts_split_over_the_streams_that_count() {
        let params = Params {
            time: 0,
            num: 1000,
            parallel: 3,
            reverse: true,
            ..Params::default()
        };
        assert_eq!(budget_of(&params), Some((Role::Receive, 334)));
        let blocks = Params {
            time: 0,
            blockcount: 4,
            len: 100,
            ..Params::default()
        };
        assert_eq!(budget_of(&blocks), Some((Role::Send, 400)));
        assert_eq!(budget_of(&Params::default()), None);
    }
}
