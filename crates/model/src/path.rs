//! The network path a test ran over when linerate's emulator made it (`linerate lab`,
//! `linerate impair`): what each direction added, so that a stored figure says which path
//! produced it (docs/impair.md).

use serde::{Deserialize, Serialize};

/// The environment variable through which `linerate lab` (or a user beside `linerate
/// impair`) tells a test which path it runs over: a [`PathFacts`] as JSON.
pub const PATH_ENV: &str = "LINERATE_PATH";

/// What the emulator does to one direction's frames. Percentages are of frames.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Impairment {
    /// Added one-way delay, milliseconds.
    pub delay_ms: f64,
    /// Uniform variation of the delay, plus or minus, milliseconds (never reorders).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub jitter_ms: f64,
    /// Long-run share of frames dropped at random.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub loss_pct: f64,
    /// Gilbert-Elliott: the mean number of frames in a run of losses (absent: independent
    /// losses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_burst: Option<f64>,
    /// Share of frames held back until the next frame has passed them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reorder_pct: f64,
    /// Share of frames sent twice.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub duplicate_pct: f64,
    /// Share of frames with one bit of their payload flipped.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub corrupt_pct: f64,
    /// Bottleneck rate in bit/s of Ethernet frames (header included); absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_bps: Option<u64>,
    /// Drop-tail queue before the bottleneck, bytes (with a rate only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_bytes: Option<u64>,
    /// The DSCP every IP frame leaves with (`--remark`), its ECN field kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remark_dscp: Option<u8>,
    /// The active queue manager at the bottleneck (`--aqm`); absent: drop-tail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aqm: Option<Aqm>,
}

/// An active queue manager in place of the bottleneck's drop-tail queue: CoDel (RFC 8289)
/// or FQ-CoDel (RFC 8290), within the queue's limit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Aqm {
    pub kind: AqmKind,
    /// Marks ECN-capable packets Congestion Experienced where it would drop them.
    #[serde(default)]
    pub ecn: bool,
    /// The sojourn time the queue keeps to, milliseconds (the RFCs' 5).
    pub target_ms: f64,
    /// The window over which the sojourn must stay above the target before a drop,
    /// milliseconds (the RFCs' 100).
    pub interval_ms: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AqmKind {
    Codel,
    FqCodel,
}

impl AqmKind {
    pub fn name(self) -> &'static str {
        match self {
            AqmKind::Codel => "codel",
            AqmKind::FqCodel => "fq_codel",
        }
    }
}

fn is_zero(value: &f64) -> bool {
    *value == 0.0
}

/// The path of a test: both directions' impairments and the seed of their randomness.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathFacts {
    /// Who built the path: "lab" (a `linerate lab`) or "impair" (a bridge between two
    /// interfaces).
    pub emulator: String,
    /// The lab's name, when a lab built it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lab: Option<String>,
    /// Client to server (lab), or the first interface to the second (impair).
    pub forward: Impairment,
    /// The other way.
    pub reverse: Impairment,
    /// The seed of every random choice; the same seed repeats a run's drop pattern.
    pub seed: u64,
    /// The hosts' segmentation offloads stay on and the emulator carries their segments
    /// (up to 64 KB) whole, sent on as one; only delay, jitter, rate and queue apply.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub offloads: bool,
    /// Forwarding threads a direction: with more than one, the flows (by addresses and
    /// ports) are spread over them, each flow on one thread with impairment draws of its
    /// own. Absent: one.
    #[serde(default = "one_thread", skip_serializing_if = "is_one_thread")]
    pub threads: u32,
}

fn one_thread() -> u32 {
    1
}

fn is_one_thread(threads: &u32) -> bool {
    *threads == 1
}

impl PathFacts {
    /// The round trip the emulator adds: both directions' delays.
    pub fn added_rtt_ms(&self) -> f64 {
        self.forward.delay_ms + self.reverse.delay_ms
    }

    /// One line for reports: "emulated path: rtt +100 ms, loss 1%, rate 1 Gbit/s, ...".
    /// A figure that differs between the directions is written `forward/reverse`.
    pub fn summary(&self) -> String {
        format!(
            "emulated path ({}): {}, seed {}",
            self.emulator,
            self.figures().join(", "),
            self.seed
        )
    }

    /// The path in a listing's column: "lab NAME: rtt +20 ms, loss 2% each way".
    pub fn brief(&self) -> String {
        let place = match &self.lab {
            Some(lab) => format!("lab {lab}"),
            None => self.emulator.clone(),
        };
        format!("{place}: {}", self.figures().join(", "))
    }

    /// What the emulator does, figure by figure.
    fn figures(&self) -> Vec<String> {
        let (f, r) = (&self.forward, &self.reverse);
        let mut parts = vec![format!("rtt +{} ms", number(self.added_rtt_ms()))];
        // A figure set alike on both directions applies to each of them: a round trip
        // meets a loss of 1% each way twice.
        let mut pair = |name: &str, a: f64, b: f64, unit: &str| {
            if a != 0.0 || b != 0.0 {
                if a == b {
                    parts.push(format!("{name} {}{unit} each way", number(a)));
                } else {
                    parts.push(format!("{name} {}{unit}/{}{unit}", number(a), number(b)));
                }
            }
        };
        pair("jitter", f.jitter_ms, r.jitter_ms, " ms");
        pair("loss", f.loss_pct, r.loss_pct, "%");
        pair(
            "loss burst",
            f.loss_burst.unwrap_or(0.0),
            r.loss_burst.unwrap_or(0.0),
            "",
        );
        pair("reorder", f.reorder_pct, r.reorder_pct, "%");
        pair("duplicate", f.duplicate_pct, r.duplicate_pct, "%");
        pair("corrupt", f.corrupt_pct, r.corrupt_pct, "%");
        let rate = |i: &Impairment| i.rate_bps.map_or(0.0, |b| b as f64 / 1e6);
        pair("rate", rate(f), rate(r), " Mbit/s");
        let queue = |i: &Impairment| i.queue_bytes.map_or(0.0, |b| b as f64 / 1e3);
        pair("queue", queue(f), queue(r), " kB");
        match (f.remark_dscp, r.remark_dscp) {
            (None, None) => {}
            (a, b) if a == b => parts.push(format!("re-marked to DSCP {}", a.unwrap_or(0))),
            (a, b) => {
                let dscp = |d: Option<u8>| d.map_or("none".into(), |d| d.to_string());
                parts.push(format!("re-marked to DSCP {},{}", dscp(a), dscp(b)));
            }
        }
        let aqm = |i: &Impairment| {
            i.aqm.map_or("drop-tail".to_string(), |a| {
                format!("{}{}", a.kind.name(), if a.ecn { " with ECN" } else { "" })
            })
        };
        if f.aqm.is_some() || r.aqm.is_some() {
            if f.aqm == r.aqm {
                parts.push(format!("{} each way", aqm(f)));
            } else {
                parts.push(format!("{}/{}", aqm(f), aqm(r)));
            }
        }
        if self.offloads {
            parts.push("offloaded segments up to 64 kB".into());
        }
        if self.threads > 1 {
            // Each flow draws its losses from its thread's link: the same seed repeats a
            // run only with as many threads.
            parts.push(format!("{} forwarding threads each way", self.threads));
        }
        parts
    }

    /// The path named by [`PATH_ENV`] in this process's environment, if any and valid.
    pub fn from_json(text: &str) -> Option<PathFacts> {
        serde_json::from_str(text).ok()
    }
}

/// A figure without trailing zeros: 100, 0.5, 1.25.
fn number(value: f64) -> String {
    let text = format!("{value:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_names_the_aqm_of_each_direction() {
        let fq = Aqm {
            kind: AqmKind::FqCodel,
            ecn: true,
            target_ms: 5.0,
            interval_ms: 100.0,
        };
        let managed = Impairment {
            rate_bps: Some(20_000_000),
            aqm: Some(fq),
            ..Default::default()
        };
        let mut path = PathFacts {
            emulator: "lab".into(),
            lab: None,
            forward: managed,
            reverse: managed,
            seed: 1,
            offloads: false,
            threads: 1,
        };
        assert!(
            path.summary().contains("fq_codel with ECN each way"),
            "{}",
            path.summary()
        );
        path.reverse.aqm = None;
        assert!(
            path.summary().contains("fq_codel with ECN/drop-tail"),
            "{}",
            path.summary()
        );
        let text = serde_json::to_string(&path).unwrap();
        assert!(
            text.contains(r#""aqm":{"kind":"fq_codel","ecn":true"#),
            "{text}"
        );
        assert_eq!(PathFacts::from_json(&text), Some(path));
    }

    #[test]
    fn summary_names_what_differs_between_directions() {
        let forward = Impairment {
            delay_ms: 50.0,
            loss_pct: 1.0,
            rate_bps: Some(1_000_000_000),
            ..Default::default()
        };
        let reverse = Impairment {
            loss_pct: 0.0,
            ..forward
        };
        let path = PathFacts {
            emulator: "lab".into(),
            lab: None,
            forward,
            reverse,
            seed: 7,
            offloads: false,
            threads: 1,
        };
        assert_eq!(
            path.summary(),
            "emulated path (lab): rtt +100 ms, loss 1%/0%, rate 1000 Mbit/s each way, seed 7"
        );
        let json = serde_json::to_string(&path).unwrap();
        // A path without offloads is written as before they existed.
        assert!(!json.contains("offloads"), "{json}");
        assert_eq!(PathFacts::from_json(&json), Some(path.clone()));
        assert!(!json.contains("threads"), "{json}");
        let spread = PathFacts {
            threads: 4,
            ..path.clone()
        };
        assert!(spread.summary().contains("4 forwarding threads each way"));
        let json = serde_json::to_string(&spread).unwrap();
        assert_eq!(PathFacts::from_json(&json), Some(spread));
        let offloaded = PathFacts {
            offloads: true,
            ..path
        };
        assert!(offloaded
            .summary()
            .contains("offloaded segments up to 64 kB"));
        let json = serde_json::to_string(&offloaded).unwrap();
        assert_eq!(PathFacts::from_json(&json), Some(offloaded));
    }
}
