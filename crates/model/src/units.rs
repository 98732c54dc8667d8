//! Sizes and rates with iperf3's suffixes.
//!
//! Sizes are bytes with binary multiples (`128K` = 131072), rates are bits per second with
//! decimal multiples (`10M` = 10,000,000 bit/s), as iperf3 parses and prints them. Suffixes
//! are case-insensitive on input; output uses iperf3's words (`KBytes`, `Mbits/sec`).

use thiserror::Error;

/// A value that does not parse as a size or a rate.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid {what} '{value}': {why}")]
pub struct UnitError {
    pub what: &'static str,
    pub value: String,
    pub why: &'static str,
}

fn split_suffix(text: &str) -> (&str, Option<char>) {
    let trimmed = text.trim();
    match trimmed.chars().last() {
        Some(c) if c.is_ascii_alphabetic() => (&trimmed[..trimmed.len() - 1], Some(c)),
        _ => (trimmed, None),
    }
}

fn parse_scaled(text: &str, what: &'static str, base: f64) -> Result<f64, UnitError> {
    let error = |why| UnitError {
        what,
        value: text.to_string(),
        why,
    };
    let (number, suffix) = split_suffix(text);
    let multiplier = match suffix.map(|c| c.to_ascii_lowercase()) {
        None => 1.0,
        Some('k') => base,
        Some('m') => base * base,
        Some('g') => base * base * base,
        Some('t') => base * base * base * base,
        Some(_) => return Err(error("unknown suffix (use k, m, g or t)")),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| error("not a number with an optional k/m/g/t suffix"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(error("must be a non-negative number"));
    }
    Ok(value * multiplier)
}

/// Parses a time, in seconds: `10`, `1.5s`, `250ms`, `500us`, `2m`, `1h`. A bare number is
/// seconds, here as in every flag that takes a time.
/// A DSCP by its name (BE, EF, VA, LE, CS0-CS7, AF11-AF43) or number (0-63).
pub fn parse_dscp(text: &str) -> Option<u8> {
    let upper = text.trim().to_ascii_uppercase();
    match upper.as_str() {
        "BE" | "DF" | "DEFAULT" => return Some(0),
        "EF" => return Some(46),
        "VA" | "VOICE-ADMIT" => return Some(44),
        "LE" => return Some(1),
        _ => {}
    }
    if let Some(class) = upper.strip_prefix("CS") {
        return class.parse::<u8>().ok().filter(|n| *n <= 7).map(|n| n * 8);
    }
    if let Some(af) = upper.strip_prefix("AF") {
        let digits: Vec<u8> = af.bytes().map(|b| b.wrapping_sub(b'0')).collect();
        return match digits[..] {
            [class @ 1..=4, drop @ 1..=3] => Some(class * 8 + drop * 2),
            _ => None,
        };
    }
    upper.parse::<u8>().ok().filter(|n| *n < 64)
}

/// Parses a time as seconds: the one reader of times linerate has, for flags, mesh files
/// and profiles alike. A bare number is seconds (`10`, `1.5`); otherwise one or more
/// numbers each with its unit (`250ms`, `2m`, `1h30m`, `14d`, `2w`): ns, us (µs), ms,
/// s (sec), m (min), h (hour), d (day), w (week), plurals too. Callers bound the result.
pub fn parse_duration(text: &str) -> Result<f64, UnitError> {
    const HOW: &str = "use a number of seconds, or numbers with units (ns, us, ms, s, m, h, d, w)";
    let error = |why| UnitError {
        what: "a time",
        value: text.to_string(),
        why,
    };
    let t = text.trim();
    if let Ok(bare) = t.parse::<f64>() {
        return match bare {
            s if s.is_finite() => Ok(s),
            _ => Err(error("is not a finite time")),
        };
    }
    let mut rest = t;
    let mut seconds = 0.0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(digits);
        let after = after.trim_start();
        let letters = after
            .find(|c: char| c.is_ascii_digit() || c == '.' || c.is_whitespace())
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(letters);
        // Units under a second divide, so that 86ms reads as the double nearest 0.086.
        let (times, per) = match unit.to_ascii_lowercase().as_str() {
            "ns" | "nsec" => (1.0, 1e9),
            "us" | "µs" | "usec" => (1.0, 1e6),
            "ms" | "msec" => (1.0, 1e3),
            "s" | "sec" | "secs" | "second" | "seconds" => (1.0, 1.0),
            "m" | "min" | "mins" | "minute" | "minutes" => (60.0, 1.0),
            "h" | "hr" | "hour" | "hours" => (3600.0, 1.0),
            "d" | "day" | "days" => (86_400.0, 1.0),
            "w" | "week" | "weeks" => (604_800.0, 1.0),
            _ => return Err(error(HOW)),
        };
        let value: f64 = number.parse().map_err(|_| error(HOW))?;
        seconds += value * times / per;
        rest = next.trim_start();
    }
    if t.is_empty() {
        return Err(error(HOW));
    }
    if !seconds.is_finite() {
        return Err(error("is not a finite time"));
    }
    Ok(seconds)
}

/// Parses a byte count: `131072`, `128k`, `1.5M` (binary multiples).
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    let value = parse_scaled(text, "size", 1024.0)?;
    if value > u64::MAX as f64 {
        return Err(UnitError {
            what: "size",
            value: text.to_string(),
            why: "too large",
        });
    }
    Ok(value.round() as u64)
}

/// Parses a rate in bits per second: `100M`, `2.5g`, `0` (decimal multiples).
pub fn parse_rate(text: &str) -> Result<u64, UnitError> {
    let value = parse_scaled(text, "rate", 1000.0)?;
    if value > u64::MAX as f64 {
        return Err(UnitError {
            what: "rate",
            value: text.to_string(),
            why: "too large",
        });
    }
    Ok(value.round() as u64)
}

/// Which unit a printed figure uses: adaptive (iperf3's default), or fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scale {
    #[default]
    Adaptive,
    Kilo,
    Mega,
    Giga,
}

impl Scale {
    /// iperf3's `-f` letters: k, m, g (and upper case, which iperf3 uses for bytes; here the
    /// same scale applies to both bytes and bits).
    pub fn parse(letter: &str) -> Option<Scale> {
        match letter.to_ascii_lowercase().as_str() {
            "a" => Some(Scale::Adaptive),
            "k" => Some(Scale::Kilo),
            "m" => Some(Scale::Mega),
            "g" => Some(Scale::Giga),
            _ => None,
        }
    }
}

fn three_digits(value: f64) -> String {
    // iperf3 prints three significant figures at most: 123, 12.3, 1.23.
    if value >= 99.95 {
        format!("{value:.0}")
    } else if value >= 9.995 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// Formats a byte count: `3.51 GBytes`, `640 KBytes`.
pub fn format_bytes(bytes: f64, scale: Scale) -> String {
    const K: f64 = 1024.0;
    let level = match scale {
        Scale::Kilo => 1,
        Scale::Mega => 2,
        Scale::Giga => 3,
        Scale::Adaptive => {
            if bytes >= K * K * K {
                3
            } else if bytes >= K * K {
                2
            } else if bytes >= K {
                1
            } else {
                0
            }
        }
    };
    let unit = ["Bytes", "KBytes", "MBytes", "GBytes"][level];
    format!("{} {unit}", three_digits(bytes / K.powi(level as i32)))
}

/// Formats a rate in bits per second: `30.1 Gbits/sec`.
pub fn format_rate(bits_per_second: f64, scale: Scale) -> String {
    const K: f64 = 1000.0;
    let level = match scale {
        Scale::Kilo => 1,
        Scale::Mega => 2,
        Scale::Giga => 3,
        Scale::Adaptive => {
            if bits_per_second >= K * K * K {
                3
            } else if bits_per_second >= K * K {
                2
            } else if bits_per_second >= K {
                1
            } else {
                0
            }
        }
    };
    let unit = ["bits/sec", "Kbits/sec", "Mbits/sec", "Gbits/sec"][level];
    format!(
        "{} {unit}",
        three_digits(bits_per_second / K.powi(level as i32))
    )
}

/// Formats a count or a per-second figure with decimal multiples: `950`, `12.3k`, `1.50M`.
pub fn format_count(value: f64) -> String {
    if value >= 1e6 {
        format!("{}M", three_digits(value / 1e6))
    } else if value >= 1e3 {
        format!("{}k", three_digits(value / 1e3))
    } else if value == value.trunc() {
        format!("{value:.0}")
    } else {
        three_digits(value)
    }
}

/// A count with its noun, singular or plural as English has it: "1 run", "3 runs",
/// "0 chunks"; `plural` for nouns that do not take an "s" ("processes").
pub fn counted(n: u64, singular: &str, plural: Option<&str>) -> String {
    match (n, plural) {
        (1, _) => format!("1 {singular}"),
        (n, Some(plural)) => format!("{n} {plural}"),
        (n, None) => format!("{n} {singular}s"),
    }
}

/// A time in microseconds in the unit a reader takes in at a glance: "850.0 µs",
/// "20.00 ms", "1.500 s".
pub fn format_micros(us: f64) -> String {
    let magnitude = us.abs();
    if magnitude >= 1e6 {
        format!("{:.3} s", us / 1e6)
    } else if magnitude >= 1e4 {
        format!("{:.2} ms", us / 1e3)
    } else {
        format!("{us:.1} µs")
    }
}

/// Formats a byte count compactly for configuration lines: `128K`, `1M`, `1500`.
pub fn format_size_compact(bytes: u64) -> String {
    for (shift, letter) in [(30, 'G'), (20, 'M'), (10, 'K')] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{letter}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Seconds in the unit that reads best: "105 µs", "10.0 ms", "1.50 s".
pub fn format_seconds(v: f64) -> String {
    if v < 1e-3 {
        format!("{:.0} µs", v * 1e6)
    } else if v < 1.0 {
        format!("{:.1} ms", v * 1e3)
    } else {
        format!("{v:.2} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_use_binary_multiples() {
        assert_eq!(parse_size("128k"), Ok(131072));
        assert_eq!(parse_size("128K"), Ok(131072));
        assert_eq!(parse_size("1.5M"), Ok(1572864));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("1500"), Ok(1500));
    }

    #[test]
    fn rates_use_decimal_multiples() {
        assert_eq!(parse_rate("100M"), Ok(100_000_000));
        assert_eq!(parse_rate("2.5g"), Ok(2_500_000_000));
        assert_eq!(parse_rate("0"), Ok(0));
    }

    #[test]
    fn bad_values_name_themselves() {
        let error = parse_size("12q").unwrap_err();
        assert_eq!(error.value, "12q");
        assert!(error.to_string().contains("'12q'"));
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("-5M").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn formatting_matches_iperf3_words() {
        assert_eq!(format_rate(30.1e9, Scale::Adaptive), "30.1 Gbits/sec");
        assert_eq!(format_rate(956.4e6, Scale::Adaptive), "956 Mbits/sec");
        assert_eq!(format_rate(1.5e9, Scale::Mega), "1500 Mbits/sec");
        assert_eq!(
            format_bytes(3.51 * 1024.0 * 1024.0 * 1024.0, Scale::Adaptive),
            "3.51 GBytes"
        );
        assert_eq!(format_bytes(640.0 * 1024.0, Scale::Adaptive), "640 KBytes");
        assert_eq!(format_size_compact(131072), "128K");
        assert_eq!(format_size_compact(1500), "1500");
        assert_eq!(format_count(950.0), "950");
        assert_eq!(format_count(12_345.0), "12.3k");
        assert_eq!(format_count(1_500_000.0), "1.50M");
    }

    #[test]
    fn counts_and_times_read_as_written_by_hand() {
        assert_eq!(counted(1, "run", None), "1 run");
        assert_eq!(counted(0, "chunk", None), "0 chunks");
        assert_eq!(counted(2, "process", Some("processes")), "2 processes");
        assert_eq!(format_micros(850.0), "850.0 µs");
        assert_eq!(format_micros(20_004.9), "20.00 ms");
        assert_eq!(format_micros(1_500_000.0), "1.500 s");
    }

    #[test]
    fn a_time_takes_units_and_a_bare_number_is_seconds() {
        assert_eq!(parse_duration("10").unwrap(), 10.0);
        assert_eq!(parse_duration("1.5s").unwrap(), 1.5);
        assert_eq!(parse_duration("250ms").unwrap(), 0.25);
        assert_eq!(parse_duration("2m").unwrap(), 120.0);
        assert_eq!(parse_duration("1h").unwrap(), 3600.0);
        assert!((parse_duration("500us").unwrap() - 5e-4).abs() < 1e-15);
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert_eq!(parse_duration("1h30m").unwrap(), 5400.0);
        assert_eq!(parse_duration("14d").unwrap(), 14.0 * 86_400.0);
        assert_eq!(parse_duration("2w").unwrap(), 2.0 * 604_800.0);
        assert_eq!(parse_duration("2 days").unwrap(), 2.0 * 86_400.0);
        assert!(parse_duration("").is_err());
        assert!(parse_duration("ms").is_err());
        assert!(parse_duration("1e400").is_err());
    }
}
