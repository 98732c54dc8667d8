//! The plain-text renderer: iperf3-style interval lines and a summary.

use crate::model::*;
use crate::units::{format_bytes, format_rate, Scale};
use std::fmt::Write;

/// The column header printed above interval lines.
pub const INTERVAL_HEADER: &str = "[ ID] Interval           Transfer     Bitrate         Retr";
/// The same for UDP, which retransmits nothing: its lines end with their datagram counts
/// where TCP's have retransmits, and a "Retr" above those counts would misname them.
pub const UDP_INTERVAL_HEADER: &str = "[ ID] Interval           Transfer     Bitrate";

/// The interval header for a test: UDP's has no retransmit column.
pub fn interval_header(udp: bool) -> &'static str {
    if udp {
        UDP_INTERVAL_HEADER
    } else {
        INTERVAL_HEADER
    }
}

/// One iperf3-style line: `[SUM]   0.00-1.00   sec  3.51 GBytes  30.1 Gbits/sec    0  sender`.
pub fn interval_line(
    label: &str,
    (start, end): (f64, f64),
    bytes: u64,
    bps: f64,
    retransmits: Option<u64>,
    note: &str,
    scale: Scale,
) -> String {
    let span = format!("{start:.2}-{end:.2}");
    let retr = retransmits.map_or(String::new(), |r| r.to_string());
    format!(
        "[{label:>3}] {span:>12} sec  {:>12}  {:>15}  {retr:>4}  {note}",
        format_bytes(bytes as f64, scale),
        format_rate(bps, scale),
    )
    .trim_end()
    .to_string()
}

/// A kept stream run's intervals as the client printed them live: its sending side's
/// line (forward), its receiving side's (reverse), or both (bidir), under their header
/// (`show` reprints a run with them). UDP lines carry no datagram note: the merged report
/// keeps both ends' counts, not the one end's a live line showed.
pub fn kept_interval_lines(report: &Report, scale: Scale) -> String {
    let udp = report.config.protocol == linerate_model::Protocol::Udp;
    let (sends, receives) = match report.config.direction {
        Direction::Forward => (true, false),
        Direction::Reverse => (false, true),
        Direction::Bidir => (true, true),
    };
    let mut out = format!("{}\n", interval_header(udp));
    for interval in &report.intervals {
        let note = |role: &str| {
            if interval.omitted {
                format!("{role} (omitted)")
            } else {
                role.to_string()
            }
        };
        if sends {
            let line = interval_line(
                "SUM",
                (interval.start, interval.end),
                interval.sender_bytes,
                interval.sender_bps,
                (!udp).then_some(interval.retransmits),
                &note("sender"),
                scale,
            );
            let _ = writeln!(out, "{line}");
        }
        if receives {
            let line = interval_line(
                "SUM",
                (interval.start, interval.end),
                interval.receiver_bytes,
                interval.receiver_bps,
                None,
                &note("receiver"),
                scale,
            );
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

/// Lines for one interval of one side's own figures, as shown live while a test runs.
/// `sends(id)` tells whether this side sends on flow `id` (else it receives on it).
pub fn side_interval_lines(
    interval: &SideInterval,
    sends: &dyn Fn(u32) -> bool,
    flows: &[u32],
    scale: Scale,
    per_flow: bool,
) -> Vec<String> {
    let note = |role: &str| {
        let mut note = role.to_string();
        if let Some(udp) = &interval.udp {
            note.push_str(&udp_note(role == "sender", udp));
        }
        if interval.omitted {
            note.push_str(" (omitted)");
        }
        note
    };
    let tcp = interval.udp.is_none();
    let line = |label: &str, bytes, bps, retransmits, role: &str| {
        interval_line(
            label,
            (interval.start, interval.end),
            bytes,
            bps,
            retransmits,
            &note(role),
            scale,
        )
    };
    let mut lines = Vec::new();
    if per_flow {
        for flow in interval.flows.iter().flatten() {
            let label = flow.id.to_string();
            lines.push(if sends(flow.id) {
                line(
                    &label,
                    flow.sent_bytes,
                    flow.sent_bps,
                    tcp.then_some(flow.retransmits),
                    "sender",
                )
            } else {
                line(
                    &label,
                    flow.received_bytes,
                    flow.received_bps,
                    None,
                    "receiver",
                )
            });
        }
    }
    if flows.iter().any(|&id| sends(id)) {
        lines.push(line(
            "SUM",
            interval.sent_bytes,
            interval.sent_bps,
            tcp.then_some(interval.retransmits),
            "sender",
        ));
    }
    if flows.iter().any(|&id| !sends(id)) {
        lines.push(line(
            "SUM",
            interval.received_bytes,
            interval.received_bps,
            None,
            "receiver",
        ));
    }
    lines
}

/// The datagram part of a UDP line: what the sender handed over, or what arrived.
fn udp_note(sender: bool, udp: &UdpCounts) -> String {
    if sender {
        let mut errors = String::new();
        if udp.send_errors > 0 {
            errors += &format!(", {} send errors", udp.send_errors);
        }
        if udp.qdisc_drops > 0 {
            errors += &format!(", {} dropped by this host's qdisc", udp.qdisc_drops);
        }
        format!("  {} datagrams{errors}", udp.sent)
    } else {
        format!(
            "  lost {}/{} ({:.2}%)  jitter {:.3} ms",
            udp.lost,
            udp.received + udp.lost,
            udp.loss_pct(),
            udp.jitter_ms
        )
    }
}

fn kernel_words(k: &UdpCounters) -> String {
    format!(
        "RcvbufErrors {}, InErrors {}, SndbufErrors {}, NoPorts {}",
        k.rcvbuf_errors, k.in_errors, k.sndbuf_errors, k.no_ports
    )
}

fn direction_words(direction: Option<Direction>) -> &'static str {
    match direction {
        Some(Direction::Forward) => "client -> server",
        Some(Direction::Reverse) => "server -> client",
        _ => "",
    }
}

/// One host's CPU over the window, ending with its service demand (`demand`, with its
/// unit: "0.515 us/KB", "38.32 us/transaction").
pub(crate) fn cpu_line(name: &str, cpu: &CpuUsage, demand: &str) -> String {
    if !cpu.measured() {
        return format!(
            "CPU {name}: not measured (the run ended before its window's last reading)"
        );
    }
    if cpu.cores == 0 {
        // A peer that reports only its own process (an iperf3 server or client).
        return format!(
            "CPU {name}: peer process {:.1}% of a core (user {:.1}, system {:.1}); no system-wide figures from this peer",
            cpu.process_pct,
            cpu.process_user_pct,
            cpu.process_pct - cpu.process_user_pct
        );
    }
    format!(
        "CPU {name}: {:.1}% of {} cores (user {:.1}, system {:.1}, softirq {:.1}), busiest core #{} {:.1}%, \
         linerate {:.1}% of a core; service demand {demand}",
        cpu.busy_pct,
        cpu.cores,
        cpu.user_pct,
        cpu.system_pct,
        cpu.softirq_pct,
        cpu.busiest_core,
        cpu.busiest_core_pct,
        cpu.process_pct,
    )
}

/// The CPU lines of a summary: one per end, or one for the host when both ends ran on it
/// (its system-wide figures are one reading) with each end's own threads and demand.
pub(crate) fn cpu_lines(
    cpu: &PerSide<CpuUsage>,
    basis: Option<&CpuBasis>,
    demand: &PerSide<String>,
) -> Vec<String> {
    if basis.is_some_and(|b| b.shared_host) && cpu.local.measured() {
        let host = &cpu.local;
        let others = basis.map_or(0.0, |b| b.others_pct.local);
        return vec![format!(
            "CPU (one host, client and server): {:.1}% of {} cores (user {:.1}, system {:.1}, softirq {:.1}), \
             busiest core #{} {:.1}%; linerate client {:.1}%, server {:.1}%, the rest {:.1}% of a core; \
             service demand client {}, server {}",
            host.busy_pct,
            host.cores,
            host.user_pct,
            host.system_pct,
            host.softirq_pct,
            host.busiest_core,
            host.busiest_core_pct,
            cpu.local.process_pct,
            cpu.remote.process_pct,
            others,
            demand.local,
            demand.remote,
        )];
    }
    vec![
        cpu_line("client", &cpu.local, &demand.local),
        cpu_line("server", &cpu.remote, &demand.remote),
    ]
}

/// Renders the end-of-test section: per-flow lines on request, the sums, the headline and
/// CPU on both ends.
pub fn render_summary(report: &Report, scale: Scale, per_flow: bool) -> String {
    if let Some(copy) = &report.copy {
        return render_copy(copy, scale);
    }
    let mut out = String::new();
    out.push_str(&sum_table(report, scale, per_flow));
    let s = &report.summary;
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "Receiver goodput: {} over {:.2} s ({} received, {} flow{}{})",
        format_rate(s.receiver_bps, scale),
        s.duration_s,
        format_bytes(s.receiver_bytes as f64, scale),
        s.flows,
        if s.flows == 1 { "" } else { "s" },
        if s.flows_failed > 0 {
            format!(", {} failed", s.flows_failed)
        } else {
            String::new()
        },
    );
    out.push_str(&sender_lines(s, scale));
    if let Some(p) = &s.pacing {
        let _ = writeln!(
            out,
            "Pacing:           asked {} per flow, achieved {} ({:.2}%); per interval {:.1}-{:.1}% (sd {:.2}%)",
            format_rate(p.target_bps, scale),
            format_rate(p.achieved_bps, scale),
            p.achieved_pct,
            p.interval_min_pct,
            p.interval_max_pct,
            p.interval_stddev_pct
        );
        if p.sender_late_ms > 0.0 {
            let _ = writeln!(
                out,
                "                  senders late past their burst for {:.1} ms in all (the host did not run them)",
                p.sender_late_ms
            );
        }
    }
    let demand = PerSide {
        local: format!("{:.3} us/KB", s.service_demand_us_per_kb.local),
        remote: format!("{:.3} us/KB", s.service_demand_us_per_kb.remote),
    };
    for line in cpu_lines(&s.cpu, s.cpu_basis.as_ref(), &demand) {
        let _ = writeln!(out, "{line}");
    }
    if let Some(crypto) = &s.crypto {
        for line in crypto.lines(s.receiver_bps, scale) {
            let _ = writeln!(out, "{line}");
        }
    }
    if let Some(marks) = report.config.marks {
        let datagrams = report.config.protocol.traits().datagrams;
        for line in marks_lines(marks, s.marks.as_ref(), datagrams) {
            let _ = writeln!(out, "{line}");
        }
    }
    if let Some(mptcp) = &s.mptcp {
        let _ = writeln!(out, "{}", mptcp_line(mptcp));
    }
    if let Some(path) = report.path() {
        let _ = writeln!(out, "Path:             {}", path.summary());
    }
    for warning in &report.warnings {
        let _ = writeln!(out, "warning: {warning}");
    }
    out
}

/// "MPTCP: 2 subflows on each of 1 connection", or the fallback and its likely cause.
pub fn mptcp_line(m: &crate::model::MptcpSummary) -> String {
    let plural = |n: u32| if n == 1 { "" } else { "s" };
    let mut line = format!(
        "MPTCP:            {} subflow{} over {} connection{} (at most {} on one)",
        m.subflows,
        plural(m.subflows),
        m.connections,
        plural(m.connections),
        m.max_subflows
    );
    if m.fell_back > 0 {
        line = format!(
            "MPTCP:            fell back to plain TCP on {} of {} connection{}: does the server take MPTCP (linerate serve --mptcp)?",
            m.fell_back,
            m.connections,
            plural(m.connections)
        );
    }
    line
}

/// The marks sent, and per direction what its receivers found: "received BE on 100.0 %
/// (re-marked: 100.0 %)".
fn marks_lines(
    sent: linerate_model::marks::Marks,
    summary: Option<&MarksSummary>,
    datagrams: bool,
) -> Vec<String> {
    use linerate_model::marks::{Verdict, ECN_NAMES};
    let class = |tos: u8| {
        let ecn = tos & 0b11;
        if ecn == 0 {
            linerate_model::marks::dscp_name(tos >> 2)
        } else {
            format!(
                "{} {}",
                linerate_model::marks::dscp_name(tos >> 2),
                ECN_NAMES[ecn as usize]
            )
        }
    };
    let mut lines = vec![format!(
        "Marks:            sent {} both ways",
        class(sent.tos())
    )];
    if let Some(ecn) = summary.and_then(|s| s.ecn_negotiated) {
        let _ = write!(
            lines[0],
            "; ECN negotiated on {} of {} connections",
            ecn.negotiated, ecn.connections
        );
    }
    let arrived = summary.map_or(&[][..], |s| &s.arrived[..]);
    if arrived.is_empty() {
        lines[0].push_str(if datagrams {
            "; the receivers did not say what arrived"
        } else {
            "; a TCP receiver cannot read them (a capture can)"
        });
        return lines;
    }
    for a in arrived {
        let total: u64 = a.classes.iter().map(|c| c.datagrams).sum();
        let seen: Vec<String> = a
            .classes
            .iter()
            .map(|c| {
                let pct = c.datagrams as f64 * 100.0 / total.max(1) as f64;
                format!("{} on {pct:.1} %", class(c.tos))
            })
            .collect();
        let verdict = match a.verdict {
            Verdict::Kept => "kept".to_string(),
            Verdict::Remarked => format!("re-marked: {:.1} %", a.remarked_pct),
            Verdict::EcnBleached => "ECN field cleared".to_string(),
        };
        lines.push(format!(
            "Marks {:<11} received {} ({verdict})",
            match a.direction {
                linerate_model::Direction::Reverse => "reverse:",
                _ => "forward:",
            },
            if seen.is_empty() {
                "nothing".to_string()
            } else {
                seen.join(", ")
            }
        ));
    }
    lines
}

/// The end-of-test table: each flow's lines when asked, then each direction's sums over
/// the measured window.
fn sum_table(report: &Report, scale: Scale, per_flow: bool) -> String {
    let mut out = String::new();
    let s = &report.summary;
    let window_start = report.config.omit_s;
    let window_end = window_start + s.duration_s;
    let _ = writeln!(out, "- - - - - - - - - - - - - - - - - - - - - - - - -");
    let _ = writeln!(out, "{}", interval_header(s.udp.is_some()));
    let line = |label: &str, bytes, bps, retr, note: &str| {
        interval_line(
            label,
            (window_start, window_end),
            bytes,
            bps,
            retr,
            note,
            scale,
        )
    };
    if per_flow {
        for flow in &report.flows {
            let label = flow.id.to_string();
            let _ = writeln!(
                out,
                "{}",
                line(
                    &label,
                    flow.sender_bytes,
                    flow.sender_bps,
                    Some(flow.retransmits),
                    "sender"
                )
            );
            let _ = writeln!(
                out,
                "{}",
                line(
                    &label,
                    flow.receiver_bytes,
                    flow.receiver_bps,
                    None,
                    "receiver"
                )
            );
            if let Some(error) = &flow.error {
                let _ = writeln!(out, "[{label:>3}] failed: {error}");
            }
        }
    }
    let groups: Vec<DirectionSummary> = match &s.directions {
        Some(directions) => directions.clone(),
        None => vec![DirectionSummary {
            direction: report.flows.first().and_then(|f| f.direction),
            flows: s.flows,
            receiver_bytes: s.receiver_bytes,
            receiver_bps: s.receiver_bps,
            sender_bytes: s.sender_bytes,
            sender_bps: s.sender_bps,
            retransmits: s.retransmits,
        }],
    };
    for group in &groups {
        let words = direction_words(group.direction);
        let sender_note = format!("sender  {words}");
        let receiver_note = format!("receiver  {words}");
        let _ = writeln!(
            out,
            "{}",
            line(
                "SUM",
                group.sender_bytes,
                group.sender_bps,
                s.udp.is_none().then_some(group.retransmits),
                &sender_note
            )
        );
        let _ = writeln!(
            out,
            "{}",
            line(
                "SUM",
                group.receiver_bytes,
                group.receiver_bps,
                None,
                &receiver_note
            )
        );
    }
    out
}

/// The sender's rate and retransmits; for UDP, the datagram counts, the sender's queue,
/// one-way delay and both kernels' UDP counters.
fn sender_lines(s: &Summary, scale: Scale) -> String {
    let mut out = String::new();
    match &s.udp {
        // Bytes arrived that no sender counted: the sending side gave no figures (an
        // iperf 2 client tells a server none of its own).
        None if s.sender_bytes_total == 0 && s.receiver_bytes_total > 0 => {
            out.push_str("Sender rate:      not reported (the sending side gave no figures)\n");
        }
        None => {
            let _ = writeln!(
                out,
                "Sender rate:      {}   retransmits: {}",
                format_rate(s.sender_bps, scale),
                s.retransmits
            );
        }
        Some(u) => {
            let _ = writeln!(
                out,
                "Sender rate:      {}",
                format_rate(s.sender_bps, scale)
            );
            let _ = writeln!(
                out,
                "Datagrams:        {} received of {} sent ({:.0} pps received, {:.0} pps sent); \
                 lost {} ({:.3}%) in {}, out of order {}, duplicates {}, foreign {}; jitter {:.3} ms; \
                 send errors {}",
                u.received,
                u.sent,
                u.receiver_pps,
                u.sender_pps,
                u.lost,
                u.loss_pct,
                crate::units::counted(u.loss_events, "run", None),
                u.out_of_order,
                u.duplicates,
                u.foreign,
                u.jitter_ms,
                u.send_errors
            );
            if u.qdisc_drops > 0 {
                let _ = writeln!(
                    out,
                    "Sender's queue:   {} datagrams dropped by the sending host's own qdisc and sent again \
                     (not loss between the hosts): the link out of the sender is full",
                    u.qdisc_drops
                );
            }
            if let Some(delay) = u.one_way_delay_ms {
                let _ = writeln!(
                    out,
                    "One-way delay:    {delay:.3} ms mean (sender's clock to receiver's; true where they agree)"
                );
            }
            if let Some(d) = &u.one_way_delay_us {
                let _ = writeln!(
                    out,
                    "                  p50 {:.3}, p90 {:.3}, p99 {:.3}, p99.9 {:.3}, max {:.3} ms over {} datagrams",
                    d.p50 / 1e3,
                    d.p90 / 1e3,
                    d.p99 / 1e3,
                    d.p999 / 1e3,
                    d.max / 1e3,
                    d.count
                );
            }
            let _ = writeln!(
                out,
                "Kernel UDP:       client {}; server {}",
                kernel_words(&u.kernel.local),
                kernel_words(&u.kernel.remote)
            );
        }
    }
    if let Some(call) = &s.call {
        out.push_str(&call_lines(call));
    }
    if let Some(video) = &s.video {
        out.push_str(&video_lines(video));
    }
    out
}

/// A video test's ways: frames whole, in part, lost and late, and how long a whole one
/// took from its first write to its last byte.
fn video_lines(video: &VideoSummary) -> String {
    let words = |v: &linerate_model::video::VideoSettings| {
        format!(
            "{} frames/s, {} mean, {} sd{}",
            // iperf 2's period is whole microseconds: 60 a second is 59.9988.
            (v.fps * 1e4).round() / 1e4,
            format_rate(v.mean_bps as f64, Scale::Adaptive),
            format_rate(v.stdev_bps as f64, Scale::Adaptive),
            match v.key_frames {
                Some(key) => format!(
                    ", a key frame every {} ({:.0} bytes, {} times the others' mean)",
                    key.every,
                    v.key_frame_bytes(&key),
                    key.scale
                ),
                None => String::new(),
            }
        )
    };
    let mut out = match &video.back {
        None => format!(
            "Video:            {} per frame (log-normal sizes, iperf 2's isochronous)\n",
            words(&video.settings)
        ),
        Some(back) => format!(
            "Frames:           client→server {}, server→client {} (log-normal sizes)\n",
            words(&video.settings),
            words(back)
        ),
    };
    for way in &video.ways {
        let c = &way.counts;
        if way.unseen {
            let _ = writeln!(
                out,
                "  {:<15} {} sent, sender skipped {}, {} slips; no receiver counted them (an iperf 2 server tells its client none)",
                way_name(way.direction),
                c.sent,
                c.skipped,
                c.slips
            );
            continue;
        }
        let latency = if c.latency_us.count == 0 {
            "frame latency not measured".to_string()
        } else {
            let ms = |us: f64| format!("{:.3}", us / 1e3);
            format!(
                "frame latency {} ms mean, p50 {}, p99 {}, max {} ms",
                ms(c.latency_us.mean),
                ms(c.latency_us.p50),
                ms(c.latency_us.p99),
                ms(c.latency_us.max)
            )
        };
        let _ = writeln!(
            out,
            "  {:<15} {} sent: {} whole{}, {} in part, {} lost, {} late; {latency}; \
             sender skipped {}, started them {} ms late at p99 (at most {:.3})",
            way_name(way.direction),
            c.sent,
            c.whole,
            match c.largest_whole_bytes {
                0 => String::new(),
                bytes => format!(" (the largest {bytes} bytes)"),
            },
            c.partial,
            way.lost,
            c.late,
            c.skipped,
            if c.start_late_us.count > 0 {
                // A percentile is its bucket's upper edge: never above the most.
                format!(
                    "{:.3}",
                    c.start_late_us.p99.min(c.start_late_max_us as f64) / 1e3
                )
            } else {
                "-".to_string()
            },
            c.start_late_max_us as f64 / 1e3
        );
        if c.key_latency_us.count > 0 {
            let k = &c.key_latency_us;
            let _ = writeln!(
                out,
                "  {:<15} key frames: {} whole, latency {:.3} ms mean, p50 {:.3}, p99 {:.3}, max {:.3} ms",
                "",
                c.key_whole,
                k.mean / 1e3,
                k.p50 / 1e3,
                k.p99 / 1e3,
                k.max / 1e3
            );
        }
        if let Some(qoo) = &way.qoo {
            let _ = writeln!(out, "  {:<15} Quality of Outcome {}", "", qoo.words());
        }
    }
    out
}

/// A call's two ways: the score each listener's ear gives, and what produced it.
pub(crate) fn call_lines(call: &CallSummary) -> String {
    let buffer = if call.adaptive {
        format!(
            "adaptive jitter buffer (at most {} ms)",
            call.jitter_buffer_ms
        )
    } else {
        format!("{} ms jitter buffer", call.jitter_buffer_ms)
    };
    let scored_by = match call.codec.emodel() {
        Ok(_) => "E-model, ITU-T G.107 with G.113's values",
        Err(why) => why,
    };
    let mut out = format!("Call:             {}, {buffer} ({scored_by})\n", call.codec);
    for way in &call.ways {
        let s = &way.score;
        let _ = writeln!(
            out,
            "  {:<15} {}: mouth to ear {:.1} ms (one-way {}), jitter {:.3} ms; \
             lost {} and late {} of {} ({:.2} %, burst ratio {:.2})",
            match way.direction {
                linerate_model::Direction::Reverse => "server→client",
                _ => "client→server",
            },
            s.rating(),
            s.mouth_to_ear_ms,
            way.one_way_delay_ms
                .map_or("not measured".to_string(), |d| format!("{d:.3} ms")),
            way.jitter_ms,
            way.lost,
            way.late,
            way.received + way.lost,
            s.loss_pct,
            s.burst_ratio
        );
        if let Some(depth) = way.jitter_buffer_ms {
            let _ = writeln!(
                out,
                "  {:<15} adaptive jitter buffer: {depth:.1} ms deep on average",
                ""
            );
        }
        if let Some(d) = &way.one_way_delay_us {
            let _ = writeln!(
                out,
                "  {:<15} one-way delay p50 {:.3}, p90 {:.3}, p99 {:.3}, max {:.3} ms over {} datagrams",
                "",
                d.p50 / 1e3,
                d.p90 / 1e3,
                d.p99 / 1e3,
                d.max / 1e3,
                d.count
            );
        }
        if let Some(qoo) = &way.qoo {
            let _ = writeln!(out, "  {:<15} Quality of Outcome {}", "", qoo.words());
        }
        if way.silent > 0 {
            let frames = way.received + way.lost + way.silent;
            let _ = writeln!(
                out,
                "  {:<15} voice activity: {} of its {frames} frames sent ({:.1} %), the rest fell in its speaker's pauses (ITU-T P.59's talk spurts)",
                "",
                way.received + way.lost,
                (way.received + way.lost) as f64 * 100.0 / frames.max(1) as f64
            );
        }
    }
    out
}

/// The column header printed above `--find-max` trial lines.
pub const TRIAL_HEADER: &str =
    "Trial  Offered          Sent             Received         Received pps  Loss      Verdict";

/// One `--find-max` trial as a line under [`TRIAL_HEADER`].
pub fn trial_line(number: usize, trial: &RateTrial, scale: Scale) -> String {
    let s = &trial.summary;
    let udp = s.udp.clone().unwrap_or_default();
    let offered = trial
        .offered_bps
        .map_or("unpaced".to_string(), |bps| format_rate(bps, scale));
    let verdict = match trial.verdict {
        TrialVerdict::Passed => "passed",
        TrialVerdict::Lossy => "too much loss",
        TrialVerdict::SenderShort => "sender fell short",
    };
    format!(
        "{number:>5}  {offered:<15}  {:<15}  {:<15}  {:>12.0}  {:>7.3}%  {verdict}",
        format_rate(s.sender_bps, scale),
        format_rate(s.receiver_bps, scale),
        udp.receiver_pps,
        udp.trial_loss_pct(),
    )
}

/// The closing lines of a `--find-max` search: the answer and what stopped it going higher.
pub fn render_find_max(report: &FindMaxReport, scale: Scale) -> String {
    let mut out = String::new();
    let bound = report.max_loss_pct;
    match &report.result {
        Some(found) => {
            let offered = match found.offered_bps {
                Some(bps) => format!("offered {}", format_rate(bps, scale)),
                None => "unpaced (the sender's limit)".to_string(),
            };
            let _ = writeln!(
                out,
                "Highest rate with loss <= {bound}%: {} received, {:.0} datagrams/s ({offered}, loss {:.3}%)",
                format_rate(found.receiver_bps, scale),
                found.receiver_pps,
                found.loss_pct,
            );
        }
        None => {
            let _ = writeln!(
                out,
                "No rate tried kept receiver-side loss within {bound}% ({} trials)",
                report.trials.len()
            );
        }
    }
    if let Some(limit) = &report.limit {
        let _ = writeln!(out, "Limit: {limit}");
    }
    for warning in &report.warnings {
        let _ = writeln!(out, "warning: {warning}");
    }
    out
}

/// Why a failing trial failed, in words, from the counters of the receiving host's kernel
/// (`receiver_kernel`) and the senders' CPU (`sender_cpu`).
pub fn limit_words(
    trial: &RateTrial,
    receiver_kernel: Option<&UdpCounters>,
    sender_cpu: &CpuUsage,
) -> String {
    let udp = trial.summary.udp.clone().unwrap_or_default();
    let above = trial.offered_bps.map_or("unpaced".to_string(), |bps| {
        format_rate(bps, Scale::Adaptive)
    });
    match (trial.verdict, receiver_kernel) {
        (TrialVerdict::SenderShort, _) if udp.qdisc_drops > 0 => format!(
            "at {above} the senders reached only {}: their own host's queue (qdisc) dropped \
             {} datagrams on the way out, so the link out of the sending host is the limit",
            format_rate(trial.summary.sender_bps, Scale::Adaptive),
            udp.qdisc_drops
        ),
        (TrialVerdict::SenderShort, _) => format!(
            "at {above} the senders reached only {} ({} send errors; busiest sending core {:.0}%), \
             and the receivers took it within the bound: the sending host is the limit",
            format_rate(trial.summary.sender_bps, Scale::Adaptive),
            udp.send_errors,
            sender_cpu.busiest_core_pct
        ),
        (_, Some(k)) if k.rcvbuf_errors > 0 => format!(
            "at {above} the receiver's kernel dropped datagrams for a full socket buffer \
             (RcvbufErrors {}): the receiving process could not keep up",
            k.rcvbuf_errors
        ),
        _ => format!(
            "at {above} {} datagrams ({:.3}%) were lost between the hosts, none for a full receive buffer",
            udp.lost.max(udp.lost_total), udp.trial_loss_pct()
        ),
    }
}

/// A copy's summary, as `linerate copy` printed it.
pub fn render_copy(copy: &crate::model::CopyReport, scale: Scale) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} -> {}", copy.source, copy.destination);
    let _ = writeln!(
        out,
        "Copied {} file{}, {} bytes in {:.2} s: {} goodput{}",
        copy.files,
        if copy.files == 1 { "" } else { "s" },
        copy.bytes,
        copy.wall_s,
        linerate_model::units::format_rate(copy.goodput_bps, scale),
        if copy.resumed_bytes > 0 {
            format!(" ({} bytes were already there)", copy.resumed_bytes)
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        out,
        "Datagrams: {} payload bytes, {} again ({:.3} %{}), {} corrupted on the way; {} whose hash failed came again",
        copy.payload_bytes,
        copy.resent_bytes,
        if copy.payload_bytes > 0 {
            copy.resent_bytes as f64 * 100.0 / copy.payload_bytes as f64
        } else {
            0.0
        },
        match copy.tail_copy_bytes {
            0 => String::new(),
            bytes => format!("; {bytes} of them second copies in the tail"),
        },
        copy.corrupted_datagrams,
        crate::units::counted(copy.refetched_chunks, "chunk", None),
    );
    if copy.rcvbuf_errors > 0 {
        let _ = writeln!(
            out,
            "Receiving host: its kernel dropped {} at a full socket buffer (RcvbufErrors): lost on the host, not the path",
            crate::units::counted(copy.rcvbuf_errors, "datagram", None),
        );
    }
    if copy.resume_checked_chunks > 0 {
        let _ = writeln!(
            out,
            "Resume: the receiver read back and hashed the {} its journal recorded in {:.2} s before trusting them; {} not match and came again",
            crate::units::counted(copy.resume_checked_chunks, "chunk", None),
            copy.resume_check_s,
            match copy.resume_damaged_chunks {
                0 => "all matched, none did".to_string(),
                1 => "1 did".to_string(),
                n => format!("{n} did"),
            },
        );
    }
    if let Some(root) = &copy.root {
        let _ = writeln!(out, "BLAKE3 root {root} (verified by both ends)");
    }
    if let Some(lanes) = copy.lanes {
        let _ = writeln!(
            out,
            "Lanes: the datagrams spread over {lanes} UDP flows, each with its own sending thread"
        );
    }
    if let Some(bps) = copy.resumed_from_bps {
        let _ = writeln!(
            out,
            "Rate: the search began at {}, half what the last copy over this path found (--cold-start searches from scratch)",
            linerate_model::units::format_rate(bps, scale),
        );
    }
    if let Some(start) = copy.start_estimate {
        let began = match start.jumped_to_bps {
            Some(bps) => format!(
                "the search began there at {}",
                linerate_model::units::format_rate(bps, scale)
            ),
            None => "the search already paced faster".to_string(),
        };
        let _ = writeln!(
            out,
            "Rate: the first datagrams, sent back to back, arrived at {} ({:.0} ms in); {began}",
            linerate_model::units::format_rate(start.bps, scale),
            start.after_ms,
        );
    }
    if let Some(ecn) = copy.ecn {
        let _ = writeln!(
            out,
            "ECN: {} arrived marked CE; the sender cut its rate for marks alone in {}",
            crate::units::counted(ecn.ce_marked, "datagram", None),
            crate::units::counted(ecn.ce_rounds, "round", None),
        );
    }
    let _ = writeln!(out, "Diagnosis: {}", copy.diagnosis);
    out
}

/// Runs side by side: a row per figure (`-` where a run lacks it) with each later run's
/// change from the first, to `digits` decimals. For runs that ran once each (profiles,
/// RPM), where no significance is judged.
pub fn side_by_side(
    ids: &[i64],
    figures: Vec<(String, Vec<Option<f64>>)>,
    digits: usize,
) -> comfy_table::Table {
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    let mut header = vec!["figure".to_string()];
    header.extend(ids.iter().map(|id| format!("run {id}")));
    header.extend(ids.iter().skip(1).map(|id| format!("Δ run {id}")));
    table.set_header(header);
    for (name, values) in figures {
        let mut row = vec![name];
        row.extend(
            values
                .iter()
                .map(|v| v.map_or("-".into(), |v| format!("{v:.digits$}"))),
        );
        let base = values.first().copied().flatten();
        row.extend(values.iter().skip(1).map(|v| match (base, v) {
            (Some(b), Some(v)) if b != 0.0 => format!("{:+.1}%", (v - b) / b * 100.0),
            _ => "-".into(),
        }));
        table.add_row(row);
    }
    table
}

/// A video way's name in the text report.
fn way_name(direction: linerate_model::Direction) -> &'static str {
    match direction {
        linerate_model::Direction::Reverse => "server→client",
        _ => "client→server",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mptcp_line_counts_subflows_or_names_the_fallback() {
        let mut m = crate::model::MptcpSummary {
            connections: 2,
            subflows: 4,
            max_subflows: 2,
            fell_back: 0,
        };
        assert_eq!(
            mptcp_line(&m),
            "MPTCP:            4 subflows over 2 connections (at most 2 on one)"
        );
        m.fell_back = 1;
        assert!(mptcp_line(&m).contains("fell back to plain TCP on 1 of 2 connections"));
        assert!(mptcp_line(&m).contains("serve --mptcp"));
    }

    /// A trial that lost its tail (sent at the end, never received, in no gap of the
    /// window) is judged and printed by that loss: once it read "0.000 %, passed" with
    /// 13,102 datagrams lost.
    #[test]
    fn a_trial_that_lost_its_tail_shows_that_loss() {
        let udp = UdpSummary {
            received: 1_000,
            lost_total: 13_102,
            loss_pct: 0.0,
            ..UdpSummary::default()
        };
        let judged = udp.trial_loss_pct();
        assert!((judged - 92.9).abs() < 0.1, "{judged}");
        let trial = RateTrial {
            offered_bps: None,
            verdict: TrialVerdict::Lossy,
            summary: Summary {
                udp: Some(udp.clone()),
                ..Summary::default()
            },
            warnings: Vec::new(),
        };
        let line = trial_line(1, &trial, Scale::Adaptive);
        assert!(line.contains("92.909%"), "{line}");
        // A window that lost more than the tail keeps its own figure.
        let window = UdpSummary {
            loss_pct: 95.0,
            ..udp
        };
        assert_eq!(window.trial_loss_pct(), 95.0);
    }

    #[test]
    fn interval_line_has_iperf3_columns() {
        let line = interval_line(
            "SUM",
            (0.0, 1.0),
            1 << 30,
            8.6e9,
            Some(3),
            "sender",
            Scale::Adaptive,
        );
        assert_eq!(
            line,
            "[SUM]    0.00-1.00 sec   1.00 GBytes   8.60 Gbits/sec     3  sender"
        );
    }
}
