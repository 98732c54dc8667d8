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

/// The bins of the latency histograms an iperf 2 server prints (`linerate serve
/// --histograms`): their width and how many (2.1.8's default: 100 us, 10,000 of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistogramBins {
    pub width_us: u32,
    pub count: u32,
}

impl HistogramBins {
    pub const IPERF2: HistogramBins = HistogramBins {
        width_us: 100,
        count: 10_000,
    };
    /// Bins at most: a test's line names every bin that holds a delay (some 14 bytes
    /// each), so a client's delays make it at most about 140 KB.
    pub const MOST: u32 = 10_000;

    /// Reads `WIDTH[,BINS]`: a width as a time (`100us`, `0.5ms`, `1ms`; at least 1 us,
    /// at most 1 s) and a count of bins (1 to [`HistogramBins::MOST`]). The error is the
    /// reason alone.
    pub fn parse(text: &str) -> Result<HistogramBins, String> {
        let (width, count) = match text.split_once(',') {
            Some((width, count)) => (width.trim(), Some(count.trim())),
            None => (text.trim(), None),
        };
        let (number, scale) = if let Some(us) = width.strip_suffix("us") {
            (us, 1.0)
        } else if let Some(ms) = width.strip_suffix("ms") {
            (ms, 1e3)
        } else if let Some(s) = width.strip_suffix('s') {
            (s, 1e6)
        } else {
            return Err("give the bins' width as a time: 100us, 0.5ms".into());
        };
        let width_us = number
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .map(|v| (v * scale).round())
            .filter(|us| (1.0..=1e6).contains(us))
            .ok_or("the bins' width is 1 us to 1 s")? as u32;
        let count = match count {
            None => HistogramBins::IPERF2.count,
            Some(count) => count
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=HistogramBins::MOST).contains(n))
                .ok_or(format!("the bins are 1 to {}", HistogramBins::MOST))?,
        };
        Ok(HistogramBins { width_us, count })
    }
}

/// A latency histogram's line as iperf 2's server prints it: what it is of.
#[derive(Debug, Clone, Copy)]
pub struct Pdf<'a> {
    /// The connection's id, or `None` for a test's connections together (`[SUM]`).
    pub id: Option<u32>,
    /// Seconds from the test's start.
    pub span: (f64, f64),
    /// `T8` for a UDP test's datagrams, `F8` for a TCP test's writes.
    pub name: &'static str,
    /// A test's whole (`T8(f)`, at its end) or one interval's (`T8`, `serve
    /// --histogram-interval`).
    pub whole: bool,
    /// Each bucket's top and its count.
    pub delays: &'a [linerate_model::latency::LatencyBucket],
    /// TCP writes: the slowest one's latency (ns) and its send time (Unix ns), which
    /// iperf 2 prints after the figures.
    pub slowest: Option<(f64, i128)>,
}

/// A latency histogram as iperf 2's server prints one at a test's end (`T8(f)` for a UDP
/// test's datagrams, `F8(f)` for a TCP test's writes) or an interval's (`T8`), from the
/// delays kept as a distribution (each bucket's top and its count; a delay within the
/// distribution's resolution, 0.1 %, of a bin's edge may fall in its neighbour). Each
/// delay falls in bin floor(delay / width), printed from 1; delays past the last bin are
/// `obu`. The figures after it are iperf 2's: the bins where the running share first
/// passes 5 %, 95 % and 99.7 %, and its outliers (bins past the 90 % bin by three times
/// the distance from the 10 % bin to it); then, for TCP writes, the slowest write's
/// latency and its send time in seconds and microseconds, the microseconds unpadded as
/// iperf 2 prints them. `None` when no delay was counted.
pub fn histogram_line(pdf: &Pdf<'_>, bins: HistogramBins) -> Option<String> {
    let Pdf {
        id,
        span,
        name,
        whole,
        delays,
        slowest,
    } = *pdf;
    let mut counts = std::collections::BTreeMap::<u64, u64>::new();
    let mut above = 0u64;
    let mut population = 0u64;
    for bucket in delays.iter().filter(|b| b.count > 0) {
        population += bucket.count;
        let bin = (bucket.le_us.max(0.0) / f64::from(bins.width_us)).floor() as u64;
        if bin >= u64::from(bins.count) {
            above += bucket.count;
        } else {
            *counts.entry(bin).or_default() += bucket.count;
        }
    }
    if population == 0 {
        return None;
    }
    let share = |running: u64| running as f64 / population as f64;
    let (mut lower, mut upper, mut three_sigma) = (0u64, 0u64, 0u64);
    // The outer fence, 0 until the running share reaches 90 % (and again while it
    // comes out 0, as iperf 2 keeps it).
    let (mut fence_low, mut fence_high, mut outer_fence) = (0u64, 0u64, 0u64);
    let mut outliers = 0u64;
    let mut running = 0u64;
    let mut listed = Vec::with_capacity(counts.len());
    for (&bin, &count) in &counts {
        running += count;
        let (shown, share) = (bin + 1, share(running));
        if lower == 0 && share > 0.05 {
            lower = shown;
        }
        if share < 0.1 {
            fence_low = shown;
        }
        if share < 0.9 {
            fence_high = shown;
        } else if outer_fence == 0 {
            outer_fence = fence_high + 3 * fence_high.saturating_sub(fence_low);
        } else if bin > outer_fence {
            // iperf 2 compares the bin counted from 0 with the fence counted from 1.
            outliers += count;
        }
        if upper == 0 && share > 0.95 {
            upper = shown;
        }
        if three_sigma == 0 && share > 0.997 {
            three_sigma = shown;
        }
        listed.push(format!("{shown}:{count}"));
    }
    let last = u64::from(bins.count);
    let slowest = slowest.map_or(String::new(), |(latency_ns, sent_ns)| {
        format!(
            " ({:.3} ms/{}.{})",
            latency_ns / 1e6,
            sent_ns.div_euclid(1_000_000_000),
            sent_ns.rem_euclid(1_000_000_000) / 1_000
        )
    });
    Some(format!(
        "{} {:.4}-{:.4} sec {name}{}-PDF: bin(w={}us):cnt({population})={} (5.00/95.00/99.7%={lower}/{}/{},Outliers={outliers},obl/obu=0/{above}){slowest}",
        label(id),
        span.0,
        span.1,
        if whole { "(f)" } else { "" },
        bins.width_us,
        listed.join(","),
        if upper == 0 { last } else { upper },
        if three_sigma == 0 { last } else { three_sigma },
    ))
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

    fn delays(values: &[(f64, u64)]) -> Vec<linerate_model::latency::LatencyBucket> {
        values
            .iter()
            .map(|&(le_us, count)| linerate_model::latency::LatencyBucket { le_us, count })
            .collect()
    }

    /// Debian's 2.1.8 server printed this line for 174 datagrams of 5 to 58 us; a spread
    /// whose figures are worked by hand gives its bins, its 5/95/99.7 % bins and its
    /// outliers (past the 90 % bin by three times its distance from the 10 % one), and
    /// fewer bins count the delays past them as `obu`.
    #[test]
    fn histogram_lines_are_iperf2s() {
        let whole = |id, span, name, delays| Pdf {
            id,
            span,
            name,
            whole: true,
            delays,
            slowest: None,
        };
        let quiet = delays(&[(5.0, 40), (20.0, 100), (58.0, 34)]);
        assert_eq!(
            histogram_line(&whole(Some(1), (0.0, 2.023), "T8", &quiet), HistogramBins::IPERF2)
                .unwrap(),
            "[  1] 0.0000-2.0230 sec T8(f)-PDF: bin(w=100us):cnt(174)=1:174 (5.00/95.00/99.7%=1/1/1,Outliers=0,obl/obu=0/0)"
        );
        let spread = delays(&[(50.0, 10), (250.0, 80), (550.0, 9), (4050.0, 1)]);
        assert_eq!(
            histogram_line(&whole(Some(2), (0.0, 10.0), "F8", &spread), HistogramBins::IPERF2)
                .unwrap(),
            "[  2] 0.0000-10.0000 sec F8(f)-PDF: bin(w=100us):cnt(100)=1:10,3:80,6:9,41:1 (5.00/95.00/99.7%=1/6/41,Outliers=10,obl/obu=0/0)"
        );
        let few = HistogramBins {
            width_us: 100,
            count: 20,
        };
        assert_eq!(
            histogram_line(&whole(Some(2), (0.0, 10.0), "F8", &spread), few).unwrap(),
            "[  2] 0.0000-10.0000 sec F8(f)-PDF: bin(w=100us):cnt(100)=1:10,3:80,6:9 (5.00/95.00/99.7%=1/6/20,Outliers=9,obl/obu=0/1)"
        );
        assert_eq!(
            histogram_line(&whole(Some(1), (0.0, 1.0), "T8", &[]), few),
            None
        );
        // Debian's 2.1.8 server's lines for ten and nine writes of a TCP --trip-times test
        // (an interval's, then a whole test's): the slowest write after the figures, its
        // microseconds unpadded (088496 printed 88496).
        let writes = delays(&[(150.0, 2), (190.0, 7), (3772.0, 1)]);
        let interval = Pdf {
            whole: false,
            slowest: Some((3_772_000.0, 1_796_464_422_088_496_000)),
            ..whole(Some(1), (0.0, 1.0), "F8", &writes)
        };
        assert_eq!(
            histogram_line(&interval, HistogramBins::IPERF2).unwrap(),
            "[  1] 0.0000-1.0000 sec F8-PDF: bin(w=100us):cnt(10)=2:9,38:1 (5.00/95.00/99.7%=2/38/38,Outliers=0,obl/obu=0/0) (3.772 ms/1796464422.88496)"
        );
    }

    #[test]
    fn histogram_bins_read_as_a_width_and_a_count() {
        let read = |t: &str| HistogramBins::parse(t).map(|b| (b.width_us, b.count));
        assert_eq!(read("100us"), Ok((100, 10_000)));
        assert_eq!(read("1ms,500"), Ok((1_000, 500)));
        assert_eq!(read("0.5ms"), Ok((500, 10_000)));
        for bad in ["100", "0us", "100us,0", "2s", "100us,x", "nanus"] {
            assert!(read(bad).is_err(), "{bad}");
        }
    }
}
