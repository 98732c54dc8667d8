//! What a user asks of a path, checked and resolved: flag values (`100ms`, `1%`, `1G`,
//! `64k` or `20ms` of queue, `A,B` for two directions) into [`Impairment`]s, and those into
//! the [`LinkSpec`] each direction's [`crate::Link`] runs with (docs/impair.md 3).

use linerate_model::units::parse_rate;
use linerate_model::Impairment;
use thiserror::Error;

/// A flag value the emulator cannot use; the message names the flag and the value.
#[derive(Debug, Error, PartialEq)]
pub enum SpecError {
    #[error("invalid {flag} '{value}': {why}")]
    Value {
        flag: &'static str,
        value: String,
        why: String,
    },
    #[error(
        "{direction}: a delay of {delay_ms} ms at {rate} bit/s with a {queue} byte queue needs \
         {needed} bytes in flight, more than the delay line's limit of {limit} bytes \
         (lower --delay or --rate, or raise --memory)"
    )]
    TooLong {
        direction: &'static str,
        delay_ms: f64,
        rate: u64,
        queue: u64,
        needed: u64,
        limit: u64,
    },
}

fn invalid(flag: &'static str, value: &str, why: impl Into<String>) -> SpecError {
    SpecError::Value {
        flag,
        value: value.to_string(),
        why: why.into(),
    }
}

/// The longest delay the emulator adds in one direction.
pub const MAX_DELAY_MS: f64 = 10_000.0;
/// The default memory a direction's delay line may hold.
pub const DEFAULT_LIMIT_BYTES: u64 = 1 << 30;
/// The default queue before the bottleneck: this long at the bottleneck's rate...
pub const DEFAULT_QUEUE_MS: f64 = 50.0;
/// ...and never less than this many bytes.
pub const MIN_DEFAULT_QUEUE_BYTES: u64 = 64 * 1024;

/// Splits `A,B` into its two directions' texts; one value serves both.
pub fn split_pair<'a>(flag: &'static str, text: &'a str) -> Result<(&'a str, &'a str), SpecError> {
    let parts: Vec<&str> = text.split(',').map(str::trim).collect();
    match parts.as_slice() {
        [one] => Ok((one, one)),
        [a, b] => Ok((a, b)),
        _ => Err(invalid(
            flag,
            text,
            "give one value, or two separated by a comma (this direction,the other)",
        )),
    }
}

/// A duration: `100ms`, `0.5s`, `250us`, `0`; a bare number is milliseconds. Returns
/// milliseconds.
pub fn parse_duration_ms(flag: &'static str, text: &str) -> Result<f64, SpecError> {
    let seconds = linerate_model::units::parse_duration(text).map_err(|_| {
        invalid(
            flag,
            text,
            "use a time: 20ms, 0.5s, 250us (a bare number is seconds)",
        )
    })?;
    let ms = seconds * 1e3;
    if !(0.0..=MAX_DELAY_MS).contains(&ms) {
        let hint = if text.trim().parse::<f64>().is_ok() {
            format!(
                " (a bare number is seconds: {}ms for milliseconds)",
                text.trim()
            )
        } else {
            String::new()
        };
        return Err(SpecError::Value {
            flag,
            value: text.into(),
            why: format!("must be between 0 and 10 s{hint}"),
        });
    }
    Ok(ms)
}

/// A percentage: `1%`, `0.5%` or `0.5` (percent either way), from 0 to 100.
pub fn parse_percent(flag: &'static str, text: &str) -> Result<f64, SpecError> {
    let number = text.trim().trim_end_matches('%').trim();
    let value: f64 = number
        .parse()
        .map_err(|_| invalid(flag, text, "use a percentage such as 1% or 0.5%"))?;
    if !value.is_finite() || !(0.0..=100.0).contains(&value) {
        return Err(invalid(flag, text, "must be between 0 and 100%"));
    }
    Ok(value)
}

/// A mean burst length in frames: at least 1.
pub fn parse_burst(flag: &'static str, text: &str) -> Result<f64, SpecError> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| invalid(flag, text, "use a mean burst length in frames, such as 3"))?;
    if !value.is_finite() || !(1.0..=1e6).contains(&value) {
        return Err(invalid(flag, text, "must be between 1 and 1000000 frames"));
    }
    Ok(value)
}

/// A bottleneck rate in bit/s (`1G`, `100M`): above zero.
pub fn parse_link_rate(flag: &'static str, text: &str) -> Result<u64, SpecError> {
    let rate = parse_rate(text).map_err(|e| invalid(flag, text, e.why))?;
    if rate < 8_000 {
        return Err(invalid(flag, text, "must be at least 8 kbit/s"));
    }
    Ok(rate)
}

/// A queue limit: bytes (`64k`, `1M`) or time at the bottleneck's rate (`20ms`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum QueueLimit {
    Bytes(u64),
    Millis(f64),
}

pub fn parse_queue(flag: &'static str, text: &str) -> Result<QueueLimit, SpecError> {
    let t = text.trim().to_ascii_lowercase();
    if t.ends_with("ms") || t.ends_with("us") || (t.ends_with('s') && !t.ends_with("bs")) {
        let ms = parse_duration_ms(flag, text)?;
        if ms <= 0.0 {
            return Err(invalid(flag, text, "must be above 0"));
        }
        return Ok(QueueLimit::Millis(ms));
    }
    let bytes = linerate_model::units::parse_size(text.trim().trim_end_matches(['b', 'B']))
        .map_err(|e| invalid(flag, text, e.why))?;
    if bytes < 1500 {
        return Err(invalid(
            flag,
            text,
            "must hold at least one 1500-byte frame",
        ));
    }
    Ok(QueueLimit::Bytes(bytes))
}

impl QueueLimit {
    /// The limit in bytes at `rate_bps`.
    pub fn bytes_at(self, rate_bps: u64) -> u64 {
        match self {
            QueueLimit::Bytes(b) => b,
            QueueLimit::Millis(ms) => ((rate_bps as f64 / 8.0 * ms / 1000.0) as u64).max(1514),
        }
    }
}

/// The queue a rate gets when none is given: [`DEFAULT_QUEUE_MS`] at the rate.
pub fn default_queue_bytes(rate_bps: u64) -> u64 {
    QueueLimit::Millis(DEFAULT_QUEUE_MS)
        .bytes_at(rate_bps)
        .max(MIN_DEFAULT_QUEUE_BYTES)
}

/// One direction's settings as its [`crate::Link`] uses them: nanoseconds and fractions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkSpec {
    pub delay_ns: u64,
    pub jitter_ns: u64,
    /// Fractions from 0 to 1.
    pub loss: f64,
    pub loss_burst: Option<f64>,
    pub reorder: f64,
    pub duplicate: f64,
    pub corrupt: f64,
    pub rate_bps: Option<u64>,
    /// Bytes the queue before the bottleneck holds (with a rate only).
    pub queue_bytes: u64,
    /// Bytes the whole direction may hold; more is dropped and counted.
    pub limit_bytes: u64,
    /// The DSCP every IP frame leaves with (`--remark`), its ECN field kept.
    pub remark: Option<u8>,
    /// CoDel or FQ-CoDel in place of drop-tail (with a rate only).
    pub aqm: Option<linerate_model::Aqm>,
}

impl LinkSpec {
    /// A link that passes everything at once.
    pub fn unimpaired() -> LinkSpec {
        LinkSpec {
            delay_ns: 0,
            jitter_ns: 0,
            loss: 0.0,
            loss_burst: None,
            reorder: 0.0,
            duplicate: 0.0,
            corrupt: 0.0,
            rate_bps: None,
            queue_bytes: u64::MAX,
            limit_bytes: DEFAULT_LIMIT_BYTES,
            remark: None,
            aqm: None,
        }
    }

    /// Resolves one direction, filling in the default queue (written back into
    /// `impairment` so that results record it), and checks that the delay line can hold
    /// what the rate puts into it.
    pub fn resolve(
        direction: &'static str,
        impairment: &mut Impairment,
        limit_bytes: u64,
    ) -> Result<LinkSpec, SpecError> {
        let queue_bytes = match impairment.rate_bps {
            Some(rate) => *impairment
                .queue_bytes
                .get_or_insert_with(|| default_queue_bytes(rate)),
            None => {
                impairment.queue_bytes = None;
                u64::MAX
            }
        };
        let spec = LinkSpec {
            delay_ns: (impairment.delay_ms * 1e6).round() as u64,
            jitter_ns: (impairment.jitter_ms * 1e6).round() as u64,
            loss: impairment.loss_pct / 100.0,
            loss_burst: impairment.loss_burst,
            reorder: impairment.reorder_pct / 100.0,
            duplicate: impairment.duplicate_pct / 100.0,
            corrupt: impairment.corrupt_pct / 100.0,
            rate_bps: impairment.rate_bps,
            queue_bytes,
            limit_bytes,
            remark: impairment.remark_dscp,
            aqm: impairment.aqm,
        };
        if let Some(rate) = spec.rate_bps {
            let longest_ms = impairment.delay_ms + impairment.jitter_ms;
            let in_flight = (rate as f64 / 8.0 * longest_ms / 1000.0) as u64;
            let needed = in_flight.saturating_add(queue_bytes);
            if needed > limit_bytes {
                return Err(SpecError::TooLong {
                    direction,
                    delay_ms: longest_ms,
                    rate,
                    queue: queue_bytes,
                    needed,
                    limit: limit_bytes,
                });
            }
        }
        if impairment.jitter_ms > impairment.delay_ms {
            return Err(invalid(
                "--jitter",
                &format!("{}ms", impairment.jitter_ms),
                format!(
                    "must not exceed the delay ({} ms) in the same direction",
                    impairment.delay_ms
                ),
            ));
        }
        Ok(spec)
    }
}

/// The flag values that set what the emulator does, as typed: a value applies to both
/// directions, "A,B" gives the first direction A and the other B.
#[derive(Debug, Clone, Default)]
pub struct DirectionTexts {
    pub delay: Option<String>,
    pub jitter: Option<String>,
    pub loss: Option<String>,
    pub loss_burst: Option<String>,
    pub reorder: Option<String>,
    pub duplicate: Option<String>,
    pub corrupt: Option<String>,
    pub rate: Option<String>,
    pub queue: Option<String>,
    pub remark: Option<String>,
    pub aqm: Option<String>,
    /// The AQM marks ECN-capable frames CE instead of dropping them.
    pub ecn: bool,
}

/// `--rtt`: one round trip (the same both ways, if given as a pair), in milliseconds.
fn parse_rtt_ms(text: &str) -> Result<f64, SpecError> {
    let (a, b) = split_pair("--rtt", text)?;
    if a != b {
        return Err(SpecError::Value {
            flag: "--rtt",
            value: text.into(),
            why: "is one round trip; give --delay A,B for different directions".into(),
        });
    }
    parse_duration_ms("--rtt", a)
}

/// `--queue`: each direction's queue before its bottleneck, which needs its `--rate`.
fn queues(directions: &mut [Impairment; 2], text: &str) -> Result<(), SpecError> {
    let (a, b) = split_pair("--queue", text)?;
    for (d, v) in directions.iter_mut().zip([a, b]) {
        let limit = parse_queue("--queue", v)?;
        let Some(rate) = d.rate_bps else {
            return Err(SpecError::Value {
                flag: "--queue",
                value: text.to_string(),
                why: "needs --rate (the queue is the one before the bottleneck)".into(),
            });
        };
        d.queue_bytes = Some(limit.bytes_at(rate));
    }
    Ok(())
}

/// Both directions' impairments from the flags' values; `rtt` (lab) sets half of it
/// each way: a table of every per-direction flag with its parser, then the queue that
/// needs the rate.
pub fn directions(
    args: &DirectionTexts,
    rtt: Option<&str>,
) -> Result<(Impairment, Impairment), SpecError> {
    let mut directions = [Impairment::default(), Impairment::default()];
    if let Some(text) = rtt {
        let ms = parse_rtt_ms(text)?;
        for d in &mut directions {
            d.delay_ms = ms / 2.0;
        }
    }
    type Setter = fn(&mut Impairment, &'static str, &str) -> Result<(), SpecError>;
    let fields: [(&'static str, &Option<String>, Setter); 10] = [
        ("--delay", &args.delay, |d, f, v| {
            d.delay_ms = parse_duration_ms(f, v)?;
            Ok(())
        }),
        ("--jitter", &args.jitter, |d, f, v| {
            d.jitter_ms = parse_duration_ms(f, v)?;
            Ok(())
        }),
        ("--loss", &args.loss, |d, f, v| {
            d.loss_pct = parse_percent(f, v)?;
            Ok(())
        }),
        ("--loss-burst", &args.loss_burst, |d, f, v| {
            d.loss_burst = Some(parse_burst(f, v)?);
            Ok(())
        }),
        ("--reorder", &args.reorder, |d, f, v| {
            d.reorder_pct = parse_percent(f, v)?;
            Ok(())
        }),
        ("--duplicate", &args.duplicate, |d, f, v| {
            d.duplicate_pct = parse_percent(f, v)?;
            Ok(())
        }),
        ("--corrupt", &args.corrupt, |d, f, v| {
            d.corrupt_pct = parse_percent(f, v)?;
            Ok(())
        }),
        ("--rate", &args.rate, |d, f, v| {
            d.rate_bps = Some(parse_link_rate(f, v)?);
            Ok(())
        }),
        ("--remark", &args.remark, |d, f, v| {
            d.remark_dscp = Some(linerate_model::units::parse_dscp(v).ok_or_else(|| {
                invalid(
                    f,
                    v,
                    "give a DSCP: a name (BE, EF, CS0-CS7, AF11-AF43, VA, LE) or 0-63",
                )
            })?);
            Ok(())
        }),
        ("--aqm", &args.aqm, |d, f, v| {
            d.aqm = parse_aqm(f, v)?;
            Ok(())
        }),
    ];
    for (flag, value, set) in fields {
        if let Some(text) = value {
            let (a, b) = split_pair(flag, text)?;
            set(&mut directions[0], flag, a)?;
            set(&mut directions[1], flag, b)?;
        }
    }
    if let Some(text) = &args.queue {
        queues(&mut directions, text)?;
    }
    aqm_needs(&mut directions, args)?;
    if directions.iter().all(|d| d.loss_pct == 0.0) {
        if let Some(burst) = &args.loss_burst {
            return Err(SpecError::Value {
                flag: "--loss-burst",
                value: burst.clone(),
                why: "needs --loss (the long-run share of frames lost)".into(),
            });
        }
    }
    // A direction without loss has no bursts of it.
    for d in &mut directions {
        if d.loss_pct == 0.0 {
            d.loss_burst = None;
        }
    }
    let [forward, reverse] = directions;
    Ok((forward, reverse))
}

/// CoDel's and FQ-CoDel's sojourn target and interval (RFC 8289 4.3, 4.4).
pub const AQM_TARGET_MS: f64 = 5.0;
pub const AQM_INTERVAL_MS: f64 = 100.0;

/// `codel`, `fq_codel`, or `drop-tail` (none) for one direction.
pub fn parse_aqm(flag: &'static str, text: &str) -> Result<Option<linerate_model::Aqm>, SpecError> {
    use linerate_model::{Aqm, AqmKind};
    let kind = match text.trim().to_ascii_lowercase().replace('-', "_").as_str() {
        "codel" => AqmKind::Codel,
        "fq_codel" | "fqcodel" => AqmKind::FqCodel,
        "drop_tail" | "droptail" | "none" => return Ok(None),
        _ => return Err(invalid(flag, text, "use codel, fq_codel or drop-tail")),
    };
    Ok(Some(Aqm {
        kind,
        ecn: false,
        target_ms: AQM_TARGET_MS,
        interval_ms: AQM_INTERVAL_MS,
    }))
}

/// An AQM manages the queue before a bottleneck, so it needs `--rate`; `--ecn` is what
/// the AQM does in place of a drop, so it needs `--aqm`.
fn aqm_needs(directions: &mut [Impairment; 2], args: &DirectionTexts) -> Result<(), SpecError> {
    if let Some(text) = &args.aqm {
        if directions
            .iter()
            .any(|d| d.aqm.is_some() && d.rate_bps.is_none())
        {
            return Err(invalid(
                "--aqm",
                text,
                "needs --rate in the same direction (it manages the queue before the bottleneck)",
            ));
        }
    }
    if args.ecn {
        if directions.iter().all(|d| d.aqm.is_none()) {
            return Err(SpecError::Value {
                flag: "--ecn",
                value: "on".into(),
                why: "needs --aqm (the AQM marks CE where it would drop)".into(),
            });
        }
        for aqm in directions.iter_mut().filter_map(|d| d.aqm.as_mut()) {
            aqm.ecn = true;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_with_their_units() {
        assert_eq!(parse_duration_ms("--delay", "100ms"), Ok(100.0));
        assert_eq!(parse_duration_ms("--delay", "0.5s"), Ok(500.0));
        assert_eq!(parse_duration_ms("--delay", "250us"), Ok(0.25));
        // A bare number is seconds, as for every time linerate takes.
        assert_eq!(parse_duration_ms("--delay", "7"), Ok(7000.0));
        let Err(SpecError::Value { why, .. }) = parse_duration_ms("--rtt", "20") else {
            panic!("20 s is over the bound");
        };
        assert!(why.contains("20ms for milliseconds"), "{why}");
        assert_eq!(parse_percent("--loss", "1%"), Ok(1.0));
        assert_eq!(parse_percent("--loss", "0.25"), Ok(0.25));
        assert_eq!(parse_link_rate("--rate", "1G"), Ok(1_000_000_000));
        assert_eq!(parse_queue("--queue", "64k"), Ok(QueueLimit::Bytes(65536)));
        assert_eq!(parse_queue("--queue", "20ms"), Ok(QueueLimit::Millis(20.0)));
        assert_eq!(split_pair("--loss", "1%,0"), Ok(("1%", "0")));
        assert_eq!(split_pair("--loss", "1%"), Ok(("1%", "1%")));
    }

    #[test]
    fn bad_values_name_the_flag_and_the_value() {
        let e = parse_percent("--loss", "120%").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid --loss '120%': must be between 0 and 100%"
        );
        assert!(parse_link_rate("--rate", "0")
            .unwrap_err()
            .to_string()
            .starts_with("invalid --rate '0'"));
        assert!(parse_duration_ms("--delay", "-3ms").is_err());
        assert!(parse_duration_ms("--delay", "11s").is_err());
        assert!(parse_duration_ms("--delay", "5 parsecs").is_err());
        assert!(parse_queue("--queue", "10").is_err());
        assert!(parse_burst("--loss-burst", "0.5").is_err());
        assert!(split_pair("--loss", "1,2,3").is_err());
    }

    #[test]
    fn a_delay_the_line_cannot_hold_is_refused() {
        let mut long = Impairment {
            delay_ms: 10_000.0,
            rate_bps: Some(10_000_000_000),
            ..Default::default()
        };
        let e = LinkSpec::resolve("forward", &mut long, DEFAULT_LIMIT_BYTES).unwrap_err();
        assert!(matches!(e, SpecError::TooLong { .. }), "{e}");
        let mut fine = Impairment {
            delay_ms: 100.0,
            rate_bps: Some(1_000_000_000),
            ..Default::default()
        };
        let spec = LinkSpec::resolve("forward", &mut fine, DEFAULT_LIMIT_BYTES).unwrap();
        // The default queue, 50 ms at 1 Gbit/s, is written back for the record.
        assert_eq!(fine.queue_bytes, Some(6_250_000));
        assert_eq!(spec.queue_bytes, 6_250_000);
        assert_eq!(spec.delay_ns, 100_000_000);
    }

    #[test]
    fn an_aqm_needs_a_rate_and_ecn_needs_an_aqm() {
        let texts = |aqm: &str, rate: Option<&str>, ecn: bool| DirectionTexts {
            aqm: Some(aqm.into()),
            rate: rate.map(str::to_string),
            ecn,
            ..Default::default()
        };
        let (f, r) = directions(&texts("fq_codel,drop-tail", Some("100M"), true), None).unwrap();
        let aqm = f.aqm.expect("forward has fq_codel");
        assert_eq!(aqm.kind, linerate_model::AqmKind::FqCodel);
        assert!(aqm.ecn);
        assert_eq!((aqm.target_ms, aqm.interval_ms), (5.0, 100.0));
        assert_eq!(r.aqm, None, "the way back is drop-tail");
        let e = directions(&texts("codel", None, false), None).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid --aqm 'codel': needs --rate"),
            "{e}"
        );
        let e = directions(&texts("red", Some("1G"), false), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid --aqm 'red': use codel, fq_codel or drop-tail"
        );
        let no_aqm = DirectionTexts {
            ecn: true,
            ..Default::default()
        };
        let e = directions(&no_aqm, None).unwrap_err();
        assert!(e.to_string().contains("--ecn"), "{e}");
        assert!(e.to_string().contains("needs --aqm"), "{e}");
    }
}
