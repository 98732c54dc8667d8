//! iperf 2's client lines, as 2.1.8 prints them (learned from its output, docs/iperf2.md),
//! so that scripts that read iperf 2's output read `linerate iperf2 -c`'s: the banner, the
//! connection lines, `[ ID] Interval Transfer Bandwidth` figures per connection and
//! `[SUM]` over them, a UDP flow's datagrams sent and its server's report.

use crate::units::{format_bytes, format_rate, Scale};

/// A figure of linerate's formatters (iperf3's three significant digits and units, which
/// are iperf 2's too) in iperf 2's four-wide field (` 101 Mbits/sec`).
fn four_wide(text: String) -> String {
    match text.split_once(' ') {
        Some((figure, unit)) => format!("{figure:>4} {unit}"),
        None => text,
    }
}

/// Bytes as iperf 2's Transfer column has them (binary multiples).
pub fn transfer(bytes: f64) -> String {
    four_wide(format_bytes(bytes, Scale::Adaptive))
}

/// Bits a second as iperf 2's Bandwidth column has them (decimal multiples).
pub fn bandwidth(bits_per_second: f64) -> String {
    four_wide(format_rate(bits_per_second, Scale::Adaptive))
}

/// A line's connection label: `[  1]` for connection 1, `[SUM]` for the sum.
pub fn label(id: Option<u32>) -> String {
    id.map_or("[SUM]".to_string(), |id| format!("[{id:3}]"))
}

/// A connection the server sends on (`-R`) is marked as 2.1.8's client marks it: `[ *1]`.
pub fn reverse_label(id: Option<u32>) -> String {
    id.map_or("[SUM]".to_string(), |id| {
        format!("[{:>3}]", format!("*{id}"))
    })
}

/// The banner before a client's connections; `gap_us`: a paced UDP test's time between
/// datagrams.
pub fn banner(
    host: &str,
    (udp, port): (bool, u16),
    length: u32,
    gap_us: Option<f64>,
    buffer: Option<u64>,
) -> Vec<String> {
    let rule = "-".repeat(60);
    let mut lines = vec![
        rule.clone(),
        format!(
            "Client connecting to {host}, {} port {port}",
            if udp { "UDP" } else { "TCP" }
        ),
    ];
    if udp {
        lines.push(match gap_us {
            Some(gap) => format!("Sending {length} byte datagrams, IPG target: {gap:.2} us"),
            None => format!("Sending {length} byte datagrams"),
        });
    }
    let what = if udp {
        "UDP buffer size"
    } else {
        "TCP window size"
    };
    if let Some(bytes) = buffer {
        // The buffer line's unit is singular ("85.0 KByte").
        let size = transfer(bytes as f64);
        let size = size.strip_suffix('s').unwrap_or(&size);
        lines.push(format!("{what}: {size} (default)"));
    }
    lines.push(rule);
    lines
}

/// A connection's line: `[  1] local 10.0.0.1 port 41136 connected with 10.0.0.2 port 5001`,
/// and ` (reverse)` after it where the server sends.
pub fn connected(
    id: u32,
    (local, remote): (std::net::SocketAddr, std::net::SocketAddr),
    reverse: bool,
) -> String {
    format!(
        "{} local {} port {} connected with {} port {}{}",
        label(Some(id)),
        local.ip(),
        local.port(),
        remote.ip(),
        remote.port(),
        if reverse { " (reverse)" } else { "" }
    )
}

/// The figures' column header.
pub const FIGURES_HEADER: &str = "[ ID] Interval       Transfer     Bandwidth";

/// A span's figures: `[  1] 0.0000-1.0221 sec  12.1 MBytes  99.5 Mbits/sec`; `label`
/// is [`label`] or [`reverse_label`].
pub fn figures(label: String, (start, end): (f64, f64), bytes: u64) -> String {
    let seconds = (end - start).max(f64::MIN_POSITIVE);
    format!(
        "{label} {start:.4}-{end:.4} sec  {}  {}",
        transfer(bytes as f64),
        bandwidth(bytes as f64 * 8.0 / seconds)
    )
}

/// The figures' column header of an `--isochronous` sender, as iperf 2's client prints it.
pub const ISOCH_FIGURES_HEADER: &str =
    "[ ID] Interval            Transfer     Bandwidth      Write/Err  PPS  isoch:tx/miss/slip";

/// An `--isochronous` sender's figures: a span's, its datagrams written and refused, their
/// rate, and its frames sent, missed (whose time passed) and its slips (`None` within the
/// test: frames are counted at its end, shown `-/-/-`):
/// `[  1] 0.0000-1.0003 sec   515 KBytes  4.21 Mbits/sec  376/0      376 pps   31/0/0`.
pub fn isoch_figures(
    label: String,
    span: (f64, f64),
    bytes: u64,
    (written, refused): (u64, u64),
    frames: Option<[u64; 3]>,
) -> String {
    let seconds = (span.1 - span.0).max(f64::MIN_POSITIVE);
    let pps = format!("{:.0}", written as f64 / seconds);
    let frames = frames.map_or("-/-/-".to_string(), |[sent, missed, slips]| {
        format!("{sent:>4}/{missed}/{slips}")
    });
    format!(
        "{}  {written}/{refused} {pps:>8} pps  {frames}",
        figures(label, span, bytes)
    )
}

/// The figures' column header of an `--isochronous` sender over TCP: a frame is a write,
/// and linerate does not count its writes one by one (no `Write/Err` column).
pub const TCP_ISOCH_FIGURES_HEADER: &str =
    "[ ID] Interval       Transfer     Bandwidth       isoch:tx/miss/slip";

/// An `--isochronous` sender's figures over TCP: a span's, and its frames sent, missed
/// and its slips (`None` within the test: `-/-/-`).
pub fn tcp_isoch_figures(
    label: String,
    span: (f64, f64),
    bytes: u64,
    frames: Option<[u64; 3]>,
) -> String {
    let frames = frames.map_or("-/-/-".to_string(), |[sent, missed, slips]| {
        format!("{sent:>4}/{missed}/{slips}")
    });
    format!("{}  {frames}", figures(label, span, bytes))
}

/// What a UDP test's server reported, as its report's lines show it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerFigures {
    pub bytes: u64,
    pub seconds: f64,
    pub jitter_ms: f64,
    pub lost: u64,
    pub datagrams: u64,
    /// `--trip-times`: the one-way delays' mean, least, most and standard deviation (ms).
    pub latency_ms: Option<[f64; 4]>,
}

/// A UDP flow's closing lines: the datagrams it sent, then its server's report (or that
/// none came, in iperf 2's words).
pub fn udp_closing(id: u32, sent: u64, server: Option<&ServerFigures>) -> Vec<String> {
    let tag = label(Some(id));
    let mut lines = vec![format!("{tag} Sent {sent} datagrams")];
    let Some(server) = server else {
        lines.push(format!(
            "{tag} WARNING: did not receive ack of last datagram after 10 tries."
        ));
        return lines;
    };
    lines.push(format!("{tag} Server Report:"));
    let mut header = UDP_FIGURES_HEADER.to_string();
    let mut line = udp_figures(
        label(Some(id)),
        (0.0, server.seconds),
        server.bytes,
        (server.jitter_ms, server.lost, server.datagrams),
    );
    if let Some([mean, least, most, deviation]) = server.latency_ms {
        header.push_str("  Latency avg/min/max/stdev");
        line.push_str(&format!(
            " {mean:.3}/{least:.3}/{most:.3}/{deviation:.3} ms"
        ));
    }
    lines.push(header);
    lines.push(line);
    lines
}

/// The column header of a UDP receiver's figures.
pub const UDP_FIGURES_HEADER: &str =
    "[ ID] Interval       Transfer     Bandwidth        Jitter   Lost/Total Datagrams";

/// A UDP receiver's figures: a span's, then the jitter (ms), the datagrams lost and all
/// the datagrams of the span (received and lost), with the share lost:
/// `[ *1] 0.0000-2.0013 sec  2.39 MBytes  10.0 Mbits/sec   0.001 ms 0/1703 (0%)`.
pub fn udp_figures(
    label: String,
    span: (f64, f64),
    bytes: u64,
    (jitter_ms, lost, datagrams): (f64, u64, u64),
) -> String {
    let percent = if datagrams > 0 {
        lost as f64 * 100.0 / datagrams as f64
    } else {
        0.0
    };
    format!(
        "{}  {jitter_ms:6.3} ms {lost}/{datagrams} ({}%)",
        figures(label, span, bytes),
        trimmed_percent(percent)
    )
}

/// A loss percentage as iperf 2 prints it: whole where whole (`0%`), else up to four
/// significant digits (`0.12%`).
fn trimmed_percent(percent: f64) -> String {
    if percent == percent.trunc() {
        format!("{percent:.0}")
    } else {
        format!("{percent:.2}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figures of lines 2.1.8 printed here, from the bytes and seconds behind them.
    #[test]
    fn figures_read_as_iperf_2_prints_them() {
        assert_eq!(
            figures(label(Some(1)), (0.0, 1.0221), 12_700_000),
            "[  1] 0.0000-1.0221 sec  12.1 MBytes  99.4 Mbits/sec"
        );
        assert_eq!(
            figures(label(Some(2)), (0.0, 0.5), 6 * 1024 * 1024),
            "[  2] 0.0000-0.5000 sec  6.00 MBytes   101 Mbits/sec"
        );
        assert_eq!(
            figures(label(None), (0.5, 1.0), 12 * 1024 * 1024),
            "[SUM] 0.5000-1.0000 sec  12.0 MBytes   201 Mbits/sec"
        );
        assert_eq!(transfer(1.2 * 1048576.0), "1.20 MBytes");
        assert_eq!(bandwidth(10.0e6), "10.0 Mbits/sec");
        assert_eq!(bandwidth(999.0), " 999 bits/sec");
    }

    /// A test the server sent (`-R`), as 2.1.8's client printed it here.
    #[test]
    fn a_reverse_test_reads_as_iperf_2_prints_it() {
        let ends = (
            "127.0.0.1:55748".parse().unwrap(),
            "127.0.0.1:15001".parse().unwrap(),
        );
        assert_eq!(
            connected(1, ends, true),
            "[  1] local 127.0.0.1 port 55748 connected with 127.0.0.1 port 15001 (reverse)"
        );
        assert!(!connected(1, ends, false).contains("reverse"));
        assert_eq!(reverse_label(Some(1)), "[ *1]");
        assert_eq!(reverse_label(Some(12)), "[*12]");
        assert_eq!(
            figures(reverse_label(Some(1)), (1.0, 2.0), 1_084_479_242),
            "[ *1] 1.0000-2.0000 sec  1.01 GBytes  8.68 Gbits/sec"
        );
        // UDP: the receiver's own figures (2.1.8's client, -u -R -b 10m -t 2).
        assert_eq!(
            udp_figures(
                reverse_label(Some(1)),
                (0.0, 2.0013),
                1703 * 1470,
                (0.001, 0, 1703)
            ),
            "[ *1] 0.0000-2.0013 sec  2.39 MBytes  10.0 Mbits/sec   0.001 ms 0/1703 (0%)"
        );
    }

    #[test]
    fn the_banner_reads_as_iperf_2_prints_it() {
        let udp = banner("10.0.0.2", (true, 5001), 1470, Some(1176.0), Some(212_992));
        assert_eq!(udp[1], "Client connecting to 10.0.0.2, UDP port 5001");
        assert_eq!(
            udp[2],
            "Sending 1470 byte datagrams, IPG target: 1176.00 us"
        );
        assert_eq!(udp[3], "UDP buffer size:  208 KByte (default)");
        let tcp = banner("h", (false, 5001), 131_072, None, Some(4 << 20));
        assert_eq!(tcp[2], "TCP window size: 4.00 MByte (default)");
    }

    #[test]
    fn a_server_report_reads_as_the_client_prints_it() {
        let server = ServerFigures {
            bytes: 1_255_380,
            seconds: 1.002,
            jitter_ms: 0.002,
            lost: 0,
            datagrams: 854,
            latency_ms: None,
        };
        let lines = udp_closing(1, 855, Some(&server));
        assert_eq!(lines[0], "[  1] Sent 855 datagrams");
        assert_eq!(lines[1], "[  1] Server Report:");
        assert_eq!(
            lines[3],
            "[  1] 0.0000-1.0020 sec  1.20 MBytes  10.0 Mbits/sec   0.002 ms 0/854 (0%)"
        );
        let timed = ServerFigures {
            lost: 3,
            latency_ms: Some([5.063, 5.001, 8.04, 0.125]),
            ..server
        };
        let lines = udp_closing(1, 855, Some(&timed));
        assert!(
            lines[3].ends_with("3/854 (0.35%) 5.063/5.001/8.040/0.125 ms"),
            "{}",
            lines[3]
        );
        assert!(udp_closing(1, 855, None)[1].contains("did not receive ack"));
    }
}
