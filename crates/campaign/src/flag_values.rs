//! The values the command line takes, each read and bounded in one place: a mistake is
//! one line naming the value, which clap prefixes with the flag (exit 2). The binary's
//! flag definitions name these as their `value_parser`; the rules live here, beside
//! their tests, so that the same bounds hold wherever a value is read.

use linerate_model::clock::UnixTime;
use linerate_report::units::{self, Scale};

/// An age: a while, more than nothing (30d, 12h).
pub fn age(text: &str) -> Result<f64, String> {
    match linerate_model::units::parse_duration(text) {
        Ok(seconds) if seconds > 0.0 => Ok(seconds),
        Ok(_) => Err(format!("'{text}' must be more than 0 (30d, 12h)")),
        Err(_) => Err(format!("'{text}' is not an age (30d, 12h, 2w)")),
    }
}

/// Probes a second: a number or N/s, above 0 and at most a million.
pub fn probe_rate(text: &str) -> Result<f64, String> {
    let number = text.trim().trim_end_matches("/s");
    match number.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 && r <= 1_000_000.0 => Ok(r),
        _ => Err(format!(
            "'{text}' must be probes a second, above 0 and at most 1000000 (e.g. 10 or 10/s)"
        )),
    }
}

/// The gap between probes: 1 µs to 1 h.
pub fn probe_gap(text: &str) -> Result<f64, String> {
    let seconds = linerate_model::units::parse_duration(text)
        .map_err(|_| format!("'{text}' is not a gap (e.g. 100ms, 1s)"))?;
    if seconds > 0.000_001 - 1e-12 && seconds <= 3600.0 {
        Ok(seconds)
    } else {
        Err(format!("'{text}' must be from 1us to 1h"))
    }
}

/// A time of 0 s or more.
pub fn non_negative_seconds(text: &str) -> Result<f64, String> {
    seconds_within(text, 0.0, 1e7)
}

/// A DSCP by its name or number.
pub fn dscp(text: &str) -> Result<u8, String> {
    linerate_model::units::parse_dscp(text).ok_or_else(|| {
        format!("'{text}' is not a DSCP: give a name (BE, EF, CS0-CS7, AF11-AF43, VA) or 0-63")
    })
}

/// An RPM run's length: 2 s to 10 min.
pub fn rpm_seconds(text: &str) -> Result<f64, String> {
    seconds_within(text, 2.0, 600.0)
}

/// A listening address: HOST:PORT, or :PORT for every address.
pub fn metrics_addr(text: &str) -> Result<std::net::SocketAddr, String> {
    let full = match text.strip_prefix(':') {
        Some(port) => format!("[::]:{port}"),
        None => text.to_string(),
    };
    full.parse().map_err(|_| {
        format!("'{text}' is not an address to listen on (HOST:PORT or :PORT, e.g. 0.0.0.0:9470)")
    })
}

/// PORT, :PORT (every address) or ADDR:PORT.
pub fn udp_listen_addr(text: &str) -> Result<std::net::SocketAddr, String> {
    if let Ok(port) = text.trim().parse::<u16>() {
        return Ok((std::net::Ipv6Addr::UNSPECIFIED, port).into());
    }
    metrics_addr(text).map_err(|_| {
        format!("'{text}' is not an address to listen on (PORT, :PORT or ADDR:PORT, e.g. 862)")
    })
}

/// A profile variable: NAME=VALUE, the name letters, digits and _.
pub fn set_pair(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("'{text}' is not NAME=VALUE"))?;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!(
            "'{name}' is not a variable name (letters, digits, _)"
        ));
    }
    Ok((name.to_string(), value.to_string()))
}

/// A round trip, in milliseconds, from a time ("100ms"; a bare number is seconds).
pub fn positive_millis(text: &str) -> Result<f64, String> {
    let value = linerate_model::units::parse_duration(text)
        .map_err(|e| format!("'{text}' is not a round trip: {}", e.why))?;
    match value * 1e3 {
        ms if ms > 0.0 && ms <= 60_000.0 => Ok(ms),
        _ => Err(format!(
            "'{text}' must be a round trip above 0 and at most 60 s (a bare number is seconds: 100ms for 100 milliseconds)"
        )),
    }
}

/// A copy's chunk: a power of two from 64K to 64M.
pub fn chunk_size(text: &str) -> Result<u64, String> {
    let value = units::parse_size(text).map_err(|e| e.to_string())?;
    if !value.is_power_of_two() || !(64 << 10..=64 << 20).contains(&value) {
        return Err(format!("'{text}' must be a power of two from 64K to 64M"));
    }
    Ok(value)
}

/// A jitter buffer: fixed, its depth in whole milliseconds from 0 to 1 s, or `adaptive`
/// with the most it grows to (`adaptive:300ms`; 200 ms unless given), 20 ms to 1 s.
pub fn jitter_buffer(text: &str) -> Result<linerate_model::call::JitterBuffer, String> {
    use linerate_model::call::{JitterBuffer, ADAPTIVE_LEAST_MS, MAX_JITTER_BUFFER_MS};
    let buffer = JitterBuffer::parse(text, |time| {
        Ok::<u32, String>((seconds(time)? * 1e3).round() as u32)
    })?;
    match buffer {
        JitterBuffer::Fixed { ms } if ms > MAX_JITTER_BUFFER_MS => {
            Err("a jitter buffer holds 0 to 1s".into())
        }
        JitterBuffer::Adaptive { most_ms }
            if !(ADAPTIVE_LEAST_MS..=MAX_JITTER_BUFFER_MS).contains(&most_ms) =>
        {
            Err("an adaptive jitter buffer grows to from 20ms to 1s".into())
        }
        _ => Ok(buffer),
    }
}

/// A lab host's largest TCP buffers (`--buffers 64M`): 64 KiB to 1 GiB.
pub fn lab_buffers(text: &str) -> Result<u64, String> {
    let bytes = linerate_model::units::parse_size(text).map_err(|e| e.why.to_string())?;
    if !(64 * 1024..=1 << 30).contains(&bytes) {
        return Err("must be between 64K and 1G".into());
    }
    Ok(bytes)
}

/// Video frames, iperf 2's way (`--isochronous 60:20m,1m`).
pub fn isochronous(text: &str) -> Result<linerate_model::video::VideoSettings, String> {
    linerate_model::video::VideoSettings::parse(text)
}

/// `serve --histograms=WIDTH[,BINS]`: iperf 2's histograms' bins.
pub fn histogram_bins(text: &str) -> Result<linerate_report::iperf2_text::HistogramBins, String> {
    linerate_report::iperf2_text::HistogramBins::parse(text)
}

/// A STAMP key (`--hmac-key`): hexadecimal, at least 16 bytes.
pub fn stamp_key(text: &str) -> Result<linerate_stamp::wire::Key, String> {
    linerate_stamp::wire::Key::from_text(text.as_bytes())
}

/// A STAMP key file (`--hmac-key-file`, `--stamp-hmac-key-file`): hexadecimal text, or
/// the raw bytes.
pub fn stamp_key_file(path: &str) -> Result<linerate_stamp::wire::Key, String> {
    linerate_stamp::wire::Key::from_file(std::path::Path::new(path))
}

/// irtt's key from a file (`--irtt-hmac-key-file`): its bytes, as irtt's `--hmac` takes
/// its text, a final line end left off; 1 to 4,096 bytes.
pub fn irtt_key_file(path: &str) -> Result<linerate_irtt::wire::HmacKey, String> {
    let len = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    if len > 4096 {
        return Err("over 4096 bytes".into());
    }
    let mut bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        bytes.pop();
    }
    if bytes.is_empty() {
        return Err("the file is empty".into());
    }
    Ok(linerate_irtt::wire::HmacKey(bytes))
}

/// Key frames of a video (`--key-frames 60:8`).
pub fn key_frames(text: &str) -> Result<linerate_model::video::KeyFrames, String> {
    linerate_model::video::KeyFrames::parse(text)
}

/// The gap between a video frame's datagrams (`--frame-gap 100us`), in microseconds: at
/// most a second (a frame's period, checked with the frame rate, is the real bound).
pub fn frame_gap(text: &str) -> Result<u32, String> {
    let us = (seconds(text)? * 1e6).round();
    if us > 1e6 {
        return Err("a frame's datagrams are at most 1s apart".into());
    }
    Ok(us as u32)
}

/// A time (`30`, `500ms`, `1m30s`): 0 to 10,000,000 seconds, never negative.
pub fn seconds(text: &str) -> Result<f64, String> {
    if text.trim_start().starts_with('-') {
        return Err(format!("'{text}': a duration cannot be negative"));
    }
    let value = linerate_model::units::parse_duration(text)
        .map_err(|e| format!("'{text}' is not a time: {}", e.why))?;
    if !(0.0..=1e7).contains(&value) {
        return Err(format!("'{text}' must be between 0 and 10000000 seconds"));
    }
    Ok(value)
}

/// An address range: "192.0.2.0/24", "2001:db8::/32", or one address.
pub fn cidr(text: &str) -> Result<ipnet::IpNet, String> {
    text.parse::<ipnet::IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map(|net| net.trunc())
        .map_err(|_| format!("'{text}' is not an address range such as 192.0.2.0/24"))
}

/// An interval between reports: 0 (none) or within the bounds every server enforces.
pub fn interval(text: &str) -> Result<f64, String> {
    use linerate_proto::session::{MAX_INTERVAL_S, MIN_INTERVAL_S};
    let value = seconds(text)?;
    if value != 0.0 && !(MIN_INTERVAL_S..=MAX_INTERVAL_S).contains(&value) {
        return Err(format!(
            "'{text}' must be 0 (no interval reports) or {MIN_INTERVAL_S} to {MAX_INTERVAL_S} seconds"
        ));
    }
    Ok(value)
}

/// A multicast group to join: GROUP[@SOURCE][%IFACE].
pub fn multicast_join(text: &str) -> Result<linerate_model::multicast::Join, String> {
    linerate_model::multicast::Join::parse(text)
}

/// How long a multicast stream may be silent before it is taken as ended: 0.1 s to 1 h.
pub fn join_silence(text: &str) -> Result<f64, String> {
    seconds_within(text, 0.1, 3600.0)
}

/// How often `serve --histograms` logs an iperf 2 UDP test's interval histogram: 0.1 s to
/// 1 h (a test is cut into at most `linerate_proto::iperf2::MOST_INTERVALS`).
pub fn histogram_interval(text: &str) -> Result<f64, String> {
    seconds_within(text, 0.1, 3600.0)
}

/// A time (the one reader of times: `30`, `500ms`, `1m30s`) from `least` to `most` seconds.
pub fn seconds_within(text: &str, least: f64, most: f64) -> Result<f64, String> {
    match seconds(text)? {
        value if (least..=most).contains(&value) => Ok(value),
        _ => Err(format!("'{text}' must be {least} to {most} seconds")),
    }
}

/// A time above 0 s.
pub fn positive_seconds(text: &str) -> Result<f64, String> {
    let value = seconds(text)?;
    if value <= 0.0 {
        return Err(format!("'{text}' must be more than 0 seconds"));
    }
    Ok(value)
}

/// A message length the server accepts: 1 byte to its most.
pub fn length(text: &str) -> Result<u64, String> {
    let value = units::parse_size(text).map_err(|e| e.to_string())?;
    let most = linerate_proto::session::MAX_LENGTH;
    if value == 0 || value > most {
        return Err(format!(
            "'{text}' must be between 1 byte and {}M",
            most >> 20
        ));
    }
    Ok(value)
}

/// A size of at least one byte.
pub fn count_bytes(text: &str) -> Result<u64, String> {
    match units::parse_size(text).map_err(|e| e.to_string())? {
        0 => Err(format!("'{text}' must be at least 1 byte")),
        value => Ok(value),
    }
}

/// A request or response: 1 byte to 64M.
pub fn message(text: &str) -> Result<u64, String> {
    let value = units::parse_size(text).map_err(|e| e.to_string())?;
    if value == 0 || value > 64 << 20 {
        return Err(format!("'{text}' must be between 1 byte and 64M"));
    }
    Ok(value)
}

/// A socket buffer: 1K to 1G.
pub fn window(text: &str) -> Result<u64, String> {
    let value = units::parse_size(text).map_err(|e| e.to_string())?;
    if !(1024..=1 << 30).contains(&value) {
        return Err(format!("'{text}' must be between 1K and 1G"));
    }
    Ok(value)
}

/// A percentage from 0 to below 100 (the % sign optional).
pub fn percent(text: &str) -> Result<f64, String> {
    match text.trim_end_matches('%').parse::<f64>() {
        Ok(value) if (0.0..100.0).contains(&value) => Ok(value),
        _ => Err(format!("'{text}' is not a percentage from 0 to below 100")),
    }
}

/// A rate in bits a second (`500M`, `1G`; 0: as fast as it goes).
pub fn rate(text: &str) -> Result<u64, String> {
    units::parse_rate(text).map_err(|e| e.to_string())
}

/// A count a second, at least one (`100k`).
pub fn per_second(text: &str) -> Result<u64, String> {
    match units::parse_rate(text).map_err(|e| e.to_string())? {
        0 => Err(format!("'{text}' must be at least 1 per second")),
        value => Ok(value),
    }
}

/// A confidence target: LEVEL,WIDTH (`99,5`).
pub fn confidence(text: &str) -> Result<linerate_report::stats::Confidence, String> {
    linerate_report::stats::Confidence::parse(text)
}

/// A confidence level: 50 to below 100 %.
pub fn level(text: &str) -> Result<f64, String> {
    match text.trim_end_matches('%').parse::<f64>() {
        Ok(value) if (50.0..100.0).contains(&value) => Ok(value),
        _ => Err(format!("'{text}' is not a percentage from 50 to below 100")),
    }
}

/// A flow count: 1 to 4096.
pub fn flows(text: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(n) if (1..=4096).contains(&n) => Ok(n),
        _ => Err(format!("'{text}' is not a flow count from 1 to 4096")),
    }
}

/// A socket buffer, or `auto` for the kernel's autotuning.
pub fn window_or_auto(text: &str) -> Result<Option<u64>, String> {
    if text.eq_ignore_ascii_case("auto") {
        return Ok(None);
    }
    window(text).map(Some)
}

/// An RFC 3339 time or date, or a while ago ("2h", "7d"), as seconds since the epoch.
pub fn since(text: &str) -> Result<f64, String> {
    let epoch = |t| UnixTime::from_system(t).seconds();
    if let Ok(ago) = linerate_model::units::parse_duration(text) {
        return Ok(UnixTime::now().seconds() - ago);
    }
    let full = if text.len() == 10 {
        format!("{text}T00:00:00Z")
    } else {
        text.to_string()
    };
    humantime::parse_rfc3339_weak(&full)
        .map(epoch)
        .map_err(|_| format!("'{text}' is neither a time (2026-11-01, 2026-11-01T08:00:00Z) nor a while ago (2h, 7d)"))
}

/// The unit figures are printed in: a(daptive), k, m or g.
pub fn scale(text: &str) -> Result<Scale, String> {
    Scale::parse(text).ok_or_else(|| format!("'{text}' is not one of a, k, m, g"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_read_one_way_and_bounded_where_asked() {
        assert_eq!(seconds("1m30s"), Ok(90.0));
        assert_eq!(seconds("500ms"), Ok(0.5));
        assert!(seconds("-1").unwrap_err().contains("cannot be negative"));
        assert!(seconds("soon")
            .unwrap_err()
            .contains("'soon' is not a time"));
        assert!(positive_seconds("0").is_err());
        assert_eq!(seconds_within("2s", 2.0, 600.0), Ok(2.0));
        assert!(rpm_seconds("601").unwrap_err().contains("2 to 600 seconds"));
        assert_eq!(non_negative_seconds("0"), Ok(0.0));
        assert!(age("0").is_err() && age("30d").is_ok());
        assert_eq!(positive_millis("100ms"), Ok(100.0));
        assert!(positive_millis("61").is_err());
        use linerate_model::call::JitterBuffer;
        assert_eq!(jitter_buffer("60ms"), Ok(JitterBuffer::Fixed { ms: 60 }));
        assert!(jitter_buffer("2s").is_err());
        assert_eq!(
            jitter_buffer("adaptive"),
            Ok(JitterBuffer::Adaptive { most_ms: 200 })
        );
        assert_eq!(
            jitter_buffer("adaptive:300ms"),
            Ok(JitterBuffer::Adaptive { most_ms: 300 })
        );
        assert!(jitter_buffer("adaptive:5ms").is_err());
        assert!(jitter_buffer("adaptive:2s").is_err());
        assert!(jitter_buffer("elastic").is_err());
        assert!(probe_gap("0.5us").is_err() && probe_gap("1us").is_ok());
        assert!(interval("0").is_ok());
        assert_eq!(histogram_interval("500ms"), Ok(0.5));
        assert!(histogram_interval("0")
            .unwrap_err()
            .contains("0.1 to 3600 seconds"));
    }

    #[test]
    fn sizes_rates_and_counts_hold_their_bounds() {
        assert_eq!(window("64k"), Ok(64 << 10));
        assert!(window("512").is_err() && window("2G").is_err());
        assert_eq!(window_or_auto("AUTO"), Ok(None));
        assert_eq!(chunk_size("4M"), Ok(4 << 20));
        assert!(chunk_size("3M").unwrap_err().contains("power of two"));
        assert!(count_bytes("0").is_err() && message("65M").is_err());
        assert_eq!(percent("1.5%"), Ok(1.5));
        assert!(percent("100").is_err() && level("49").is_err());
        assert_eq!(flows("4096"), Ok(4096));
        assert!(flows("0").is_err() && flows("4097").is_err());
        assert!(per_second("0").is_err());
        assert_eq!(probe_rate("10/s"), Ok(10.0));
        assert!(probe_rate("0").is_err() && probe_rate("inf").is_err());
        assert_eq!(dscp("EF"), Ok(46));
        assert!(dscp("64").is_err());
    }

    #[test]
    fn addresses_names_and_moments() {
        assert_eq!(
            metrics_addr(":9470").unwrap(),
            "[::]:9470".parse::<std::net::SocketAddr>().unwrap()
        );
        assert_eq!(udp_listen_addr("862").unwrap().port(), 862);
        assert!(udp_listen_addr("host").is_err());
        assert_eq!(cidr("192.0.2.7/24").unwrap().to_string(), "192.0.2.0/24");
        assert_eq!(cidr("192.0.2.7").unwrap().to_string(), "192.0.2.7/32");
        assert_eq!(
            set_pair("rate=10M"),
            Ok(("rate".to_string(), "10M".to_string()))
        );
        assert!(set_pair("a-b=1").is_err() && set_pair("novalue").is_err());
        let day = since("2026-11-01").unwrap();
        assert_eq!(day, since("2026-11-01T00:00:00Z").unwrap());
        let ago = UnixTime::now().seconds() - since("2h").unwrap();
        assert!((7190.0..7210.0).contains(&ago), "{ago}");
        assert!(since("yesterday").is_err());
    }
}

/// A size as iperf 2 reads one (`-n`, `-l`, `-w`): lowercase k, m, g multiply by 1000,
/// uppercase K, M, G by 1024; at least 1.
pub fn iperf2_size(text: &str) -> Result<u64, String> {
    let value = iperf2_number(text)?;
    if value < 1.0 || value > u64::MAX as f64 {
        return Err(format!("'{text}' must be at least 1"));
    }
    Ok(value as u64)
}

/// A number with iperf 2's suffixes: k, m, g (1000s) or K, M, G (1024s).
fn iperf2_number(text: &str) -> Result<f64, String> {
    let (digits, multiple) = match text.chars().last() {
        Some('k') => (&text[..text.len() - 1], 1e3),
        Some('m') => (&text[..text.len() - 1], 1e6),
        Some('g') => (&text[..text.len() - 1], 1e9),
        Some('K') => (&text[..text.len() - 1], 1024.0),
        Some('M') => (&text[..text.len() - 1], 1024.0 * 1024.0),
        Some('G') => (&text[..text.len() - 1], 1024.0 * 1024.0 * 1024.0),
        _ => (text, 1.0),
    };
    match digits.parse::<f64>() {
        Ok(value) if value.is_finite() && value >= 0.0 => Ok(value * multiple),
        _ => Err(format!(
            "'{text}' is not a number with iperf 2's suffixes (k, m, g: 1000s; K, M, G: 1024s)"
        )),
    }
}

/// iperf 2's `-b`: bits a second with its suffixes, or packets a second (`100pps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Iperf2RateValue {
    Bits(u64),
    Packets(u64),
}

impl From<Iperf2RateValue> for linerate_drivers::iperf2_client::Iperf2Rate {
    fn from(value: Iperf2RateValue) -> Self {
        match value {
            Iperf2RateValue::Bits(bits) => Self::Bits(bits),
            Iperf2RateValue::Packets(packets) => Self::Packets(packets),
        }
    }
}

pub fn iperf2_rate(text: &str) -> Result<Iperf2RateValue, String> {
    if let Some(packets) = text.strip_suffix("pps") {
        return match packets.parse::<u64>() {
            Ok(n) if (1..=100_000_000).contains(&n) => Ok(Iperf2RateValue::Packets(n)),
            _ => Err(format!(
                "'{text}' must be 1 to 100000000 packets a second (e.g. 500pps)"
            )),
        };
    }
    let bits = iperf2_number(text)?;
    if !(1.0..=1e12).contains(&bits) {
        return Err(format!("'{text}' must be between 1 bit/s and 1000g"));
    }
    Ok(Iperf2RateValue::Bits(bits as u64))
}

#[cfg(test)]
mod iperf2_value_tests {
    use super::*;

    #[test]
    fn iperf2_suffixes_are_its_own() {
        assert_eq!(iperf2_size("1470"), Ok(1470));
        assert_eq!(iperf2_size("128K"), Ok(131_072));
        assert_eq!(iperf2_size("2k"), Ok(2000));
        assert_eq!(iperf2_size("1G"), Ok(1 << 30));
        assert!(iperf2_size("0").is_err());
        assert!(iperf2_size("12x").unwrap_err().contains("12x"));
        assert_eq!(iperf2_rate("10m"), Ok(Iperf2RateValue::Bits(10_000_000)));
        assert_eq!(iperf2_rate("1M"), Ok(Iperf2RateValue::Bits(1_048_576)));
        assert_eq!(iperf2_rate("500pps"), Ok(Iperf2RateValue::Packets(500)));
        assert!(iperf2_rate("0pps").is_err());
        assert!(iperf2_rate("-5m").is_err());
    }
}
