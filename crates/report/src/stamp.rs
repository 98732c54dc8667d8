//! A STAMP run (`linerate stamp`, docs/stamp.md): its figures as printed with `--json`
//! and kept in the results database, its text, CSV rows and comparison.

use crate::result_kind::{ResultKind, Rows};
use crate::units::Scale;
use linerate_model::clock::ClockState;
use linerate_model::latency::LatencySummary;
use linerate_model::marks::dscp_name;
use linerate_model::measure::Headline as MeshHeadline;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// The `test` value of a STAMP document.
pub const STAMP: &str = "stamp";

/// The two-way protocol a run's probes spoke: STAMP's, or irtt's (to an irtt server,
/// whose answers carry the same four times and a count of what it received).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    #[default]
    Stamp,
    Irtt,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Stamp => "STAMP",
            Protocol::Irtt => "irtt",
        }
    }
}

/// Probes lost, split by direction where the reflector let it be told.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StampLoss {
    /// Probes sent and never answered.
    pub round_trip: u64,
    pub round_trip_pct: f64,
    /// Lost on the way to the reflector, and on the way back; `None` when the reflector
    /// gave nothing to tell them apart (`basis` says why).
    pub forward: Option<u64>,
    pub forward_pct: Option<f64>,
    pub reverse: Option<u64>,
    pub reverse_pct: Option<f64>,
    /// Lost before the first answer or after the last: the reflector's counts do not
    /// reach them, so their direction is unknown.
    pub unattributed: Option<u64>,
    /// How the split was made: "direct measurement", "reflector sequence numbers", or
    /// "round trip only: ..." with the reason.
    pub basis: String,
}

/// One direction's delay.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OneWay {
    /// The one-way delay, microseconds; withheld (`None`) when the clocks cannot vouch
    /// for it, with the reason in `withheld`. Can be negative where clocks disagree.
    pub delay_us: Option<DelayFigures>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withheld: Option<String>,
    /// The delay above this direction's own minimum in the run: needs no synchronised
    /// clocks (the offset cancels), and shows a queue building one way.
    pub added_us: DelayFigures,
    /// RFC 3550's interarrival jitter of this direction, microseconds.
    pub jitter_us: f64,
    /// IPDV (RFC 5481) between probes of consecutive sequence numbers this way, its
    /// magnitude, microseconds (irtt's "IPDV"): needs no synchronised clocks; `None`
    /// until two neighbours are answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipdv_us: Option<DelayFigures>,
    /// Every answered probe's one-way delay this way, counted into [`DELAY_BOUNDS_US`]
    /// (not cumulative; one more count past the last bound); empty when the delay is
    /// withheld. Their sum, microseconds, for a histogram's `_sum`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub histogram: Vec<u64>,
    #[serde(default)]
    pub sum_us: f64,
}

/// Upper bounds of a one-way delay histogram's buckets, microseconds: 10 us to 1 s in
/// 1-2.5-5 steps (every bound of the metrics' round-trip buckets is among them).
pub const DELAY_BOUNDS_US: [f64; 16] = [
    10.0,
    25.0,
    50.0,
    100.0,
    250.0,
    500.0,
    1_000.0,
    2_500.0,
    5_000.0,
    10_000.0,
    25_000.0,
    50_000.0,
    100_000.0,
    250_000.0,
    500_000.0,
    1_000_000.0,
];

/// The bucket of [`DELAY_BOUNDS_US`] a delay (nanoseconds) falls in; a negative one (clocks
/// apart) in the first, past the last bound in the last.
pub fn delay_bucket(ns: i64) -> usize {
    let us = ns as f64 / 1e3;
    DELAY_BOUNDS_US
        .iter()
        .position(|&bound| us <= bound)
        .unwrap_or(DELAY_BOUNDS_US.len())
}

/// Percentiles of a delay, microseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DelayFigures {
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

/// What one end's clock declared.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Clocks {
    /// Both ends read one clock (loopback, or network namespaces of one host).
    pub same_clock: bool,
    /// This host's clock (adjtimex), when the kernel said.
    pub sender: Option<ClockState>,
    /// The reflector's, as its answers' error estimate declared it (S bit, error bound).
    pub reflector_synchronised: bool,
    pub reflector_error_s: f64,
}

/// Counts of DSCP and ECN seen: `(dscp, ecn, packets)`.
pub type MarkCounts = Vec<(u8, u8, u64)>;

/// The marks asked and what arrived each way.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Marks {
    /// The DSCP the probes left with, and asked for the answers.
    pub dscp: u8,
    /// As the reflector saw the probes (its Class of Service TLV); empty when it does not
    /// fill one in.
    pub forward: MarkCounts,
    /// As the answers arrived here.
    pub reverse: MarkCounts,
}

/// One interval of the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StampInterval {
    pub end_s: f64,
    pub sent: u64,
    pub answered: u64,
    pub rtt_p50_us: Option<f64>,
    pub forward_added_p50_us: Option<f64>,
    pub reverse_added_p50_us: Option<f64>,
}

/// A run's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StampReport {
    /// Always [`STAMP`]: tells the document's kind.
    pub test: String,
    /// The probes' protocol (STAMP's unless said).
    #[serde(default, skip_serializing_if = "is_stamp")]
    pub protocol: Protocol,
    pub started_at: f64,
    /// The reflector as the user named it, and the address it resolved to.
    pub target: String,
    pub address: String,
    /// "open" or "authenticated".
    pub mode: String,
    pub rate_pps: f64,
    /// Each probe's UDP payload, octets.
    pub size: usize,
    pub duration_s: f64,
    pub sent: u64,
    /// Probes answered (each once; copies are `duplicates`).
    pub answered: u64,
    pub duplicates: u64,
    /// Answers that arrived after one to a later probe.
    pub reordered: u64,
    /// Answers that did not belong to this run (another session's, or too old to match).
    pub unmatched: u64,
    pub loss: StampLoss,
    /// T4 − T1: from the probe's leaving to its answer's arrival, this host's clock.
    pub rtt_us: LatencySummary,
    /// Every round trip counted into [`DELAY_BOUNDS_US`] (as [`OneWay::histogram`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rtt_histogram: Vec<u64>,
    /// Answered probes whose T1 is the kernel's time of leaving (SO_TIMESTAMPING); the
    /// others' is the sender's loop's time before the send call.
    #[serde(default)]
    pub kernel_sent_times: u64,
    /// The reflector's hold, T3 − T2, median: part of the round trip that is no network.
    pub reflector_hold_us: Option<f64>,
    pub rtt_jitter_us: f64,
    pub forward: OneWay,
    pub reverse: OneWay,
    pub clocks: Clocks,
    /// Hops the probes crossed (255 less the TTL the reflector saw), when it says.
    pub hops: Option<u8>,
    /// Whether the reflector keeps a sequence number per session (stateful), if told.
    pub reflector_stateful: Option<bool>,
    /// TLV types the reflector did not know.
    #[serde(default)]
    pub unrecognized_tlvs: Vec<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marks: Option<Marks>,
    #[serde(default)]
    pub intervals: Vec<StampInterval>,
    /// Answers whose reflector timestamps (T2, T3) fall outside what the run and the
    /// clocks' error bounds allow (before the probe left or after the answer came, or a
    /// hold longer than the round trip): counted, and left out of the one-way figures
    /// and the reflector's hold.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub impossible_timestamps: u64,
    /// Datagrams from the reflector that could not be read as answers (not counted as
    /// answered), and answers read from a TWAMP-light responder's shorter packet (its
    /// TTL unknown).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unreadable_answers: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub short_answers: u64,
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Why the run failed (nothing answered), inside the document so that `--json`
    /// prints one value either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Cut short (Ctrl-C) after this many seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted_after_s: Option<f64>,
    #[serde(default)]
    pub host: Option<linerate_model::HostFacts>,
    /// The requests were a call's frames and the answers the call's way back (`linerate
    /// app --pattern voip --peer irtt`): each way scored as a call's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<crate::model::CallSummary>,
}

fn is_stamp(protocol: &Protocol) -> bool {
    *protocol == Protocol::Stamp
}

/// Microseconds as milliseconds with three decimals.
fn ms(us: f64) -> String {
    format!("{:.3} ms", us / 1e3)
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

impl StampLoss {
    /// The loss figures from counts: `split` is (forward, reverse, unattributed) when
    /// told, with its basis.
    pub fn of(
        sent: u64,
        answered: u64,
        split: Option<(u64, u64, u64)>,
        basis: String,
    ) -> StampLoss {
        let round_trip = sent.saturating_sub(answered);
        StampLoss {
            round_trip,
            round_trip_pct: pct(round_trip, sent),
            forward: split.map(|s| s.0),
            forward_pct: split.map(|s| pct(s.0, sent)),
            reverse: split.map(|s| s.1),
            reverse_pct: split.map(|s| pct(s.1, sent)),
            unattributed: split.map(|s| s.2),
            basis,
        }
    }
}

impl StampReport {
    fn loss_text(&self) -> String {
        let l = &self.loss;
        let mut out = format!(
            "loss         {} of {} ({:.3} %) round trip",
            l.round_trip, self.sent, l.round_trip_pct
        );
        match (l.forward, l.reverse) {
            (Some(f), Some(r)) => {
                let _ = write!(
                    out,
                    "; out {f} ({:.3} %), back {r} ({:.3} %)",
                    l.forward_pct.unwrap_or(0.0),
                    l.reverse_pct.unwrap_or(0.0)
                );
                if let Some(u) = l.unattributed.filter(|u| *u > 0) {
                    let _ = write!(out, ", {u} at the ends unattributed");
                }
                let _ = writeln!(out, " [{}]", l.basis);
            }
            _ => {
                let _ = writeln!(out, "; {}", l.basis);
            }
        }
        out
    }

    fn clocks_text(&self) -> String {
        let c = &self.clocks;
        if c.same_clock {
            return "one clock at both ends (one host)".into();
        }
        let sender = c.sender.map_or("unknown".into(), |s| s.describe());
        let reflector = if c.reflector_synchronised {
            format!(
                "synchronised, error at most {:.3} ms",
                c.reflector_error_s * 1e3
            )
        } else {
            "not synchronised (its answers say)".into()
        };
        format!("here {sender}; reflector {reflector}")
    }
}

fn marks_text(marks: &Marks) -> String {
    let mut out = String::new();
    let asked = dscp_name(marks.dscp);
    for (name, counts) in [("out", &marks.forward), ("back", &marks.reverse)] {
        let total: u64 = counts.iter().map(|c| c.2).sum();
        if total == 0 {
            continue;
        }
        let seen: Vec<String> = counts
            .iter()
            .map(|(dscp, ecn, n)| {
                let ecn = match ecn {
                    0 => "",
                    1 => " ECT(1)",
                    2 => " ECT(0)",
                    _ => " CE",
                };
                format!("{}{ecn} on {:.1} %", dscp_name(*dscp), pct(*n, total))
            })
            .collect();
        let remarked: u64 = counts
            .iter()
            .filter(|c| c.0 != marks.dscp)
            .map(|c| c.2)
            .sum();
        let verdict = if remarked > 0 {
            format!(" (re-marked: {:.1} %)", pct(remarked, total))
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "marks {name}: sent {asked}, received {}{verdict}",
            seen.join(", ")
        );
    }
    out
}

/// Runs side by side: each figure, and each later run's change from the first.
pub fn compare_text(runs: &[(i64, &StampReport)]) -> String {
    type Pick = fn(&StampReport) -> Option<f64>;
    let picks: [(&str, Pick); 9] = [
        ("rtt p50 ms", |r| {
            (r.rtt_us.count > 0).then_some(r.rtt_us.p50 / 1e3)
        }),
        ("rtt p99 ms", |r| {
            (r.rtt_us.count > 0).then_some(r.rtt_us.p99 / 1e3)
        }),
        ("loss %", |r| Some(r.loss.round_trip_pct)),
        ("loss out %", |r| r.loss.forward_pct),
        ("loss back %", |r| r.loss.reverse_pct),
        ("added out p99 ms", |r| Some(r.forward.added_us.p99 / 1e3)),
        ("added back p99 ms", |r| Some(r.reverse.added_us.p99 / 1e3)),
        ("jitter out ms", |r| Some(r.forward.jitter_us / 1e3)),
        ("jitter back ms", |r| Some(r.reverse.jitter_us / 1e3)),
    ];
    let figures = picks
        .into_iter()
        .map(|(name, pick)| {
            (
                name.to_string(),
                runs.iter().map(|(_, r)| pick(r)).collect(),
            )
        })
        .collect();
    let ids: Vec<i64> = runs.iter().map(|(id, _)| *id).collect();
    format!("{}\n", crate::text::side_by_side(&ids, figures, 3))
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

impl ResultKind for StampReport {
    fn test(&self) -> &str {
        &self.test
    }

    fn target(&self) -> &str {
        &self.target
    }

    fn started_at(&self) -> f64 {
        self.started_at
    }

    fn path(&self) -> Option<&linerate_model::PathFacts> {
        self.host.as_ref().and_then(|h| h.path.as_deref())
    }

    fn mesh_figure(&self, which: MeshHeadline) -> (Option<f64>, String) {
        if which != MeshHeadline::Loss {
            return (None, String::new());
        }
        (
            Some(self.loss.round_trip_pct / 100.0),
            self.headline_text(Scale::Adaptive),
        )
    }

    /// "rtt 0.412 ms, loss 0.10 % (0.10 % out, 0.00 % back)".
    fn headline_text(&self, _scale: Scale) -> String {
        let split = match (self.loss.forward_pct, self.loss.reverse_pct) {
            (Some(f), Some(r)) => format!(" ({f:.2} % out, {r:.2} % back)"),
            _ => String::new(),
        };
        let rtt = if self.rtt_us.count > 0 {
            format!("rtt p50 {}", ms(self.rtt_us.p50))
        } else {
            "no answers".into()
        };
        let cut = self
            .interrupted_after_s
            .map_or(String::new(), |s| format!(" (interrupted after {s:.2} s)"));
        format!("{rtt}, loss {:.2} %{split}{cut}", self.loss.round_trip_pct)
    }

    fn render_text(&self, _scale: Scale) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} to {} ({}), {} mode: {} probes of {} bytes at {:.0}/s over {:.2} s",
            self.protocol.name(),
            self.target,
            self.address,
            self.mode,
            self.sent,
            self.size,
            self.rate_pps,
            self.duration_s
        );
        let _ = writeln!(
            out,
            "answered {} ({} duplicates, {} reordered{})",
            self.answered,
            self.duplicates,
            self.reordered,
            if self.unmatched > 0 {
                format!(", {} not of this run", self.unmatched)
            } else {
                String::new()
            }
        );
        out.push_str(&self.loss_text());
        if self.rtt_us.count > 0 {
            let r = &self.rtt_us;
            let _ = writeln!(
                out,
                "round trip   min {} p50 {} p90 {} p99 {} max {}, jitter {}",
                ms(r.min),
                ms(r.p50),
                ms(r.p90),
                ms(r.p99),
                ms(r.max),
                ms(self.rtt_jitter_us)
            );
            if let Some(hold) = self.reflector_hold_us {
                let _ = writeln!(out, "reflector held each probe {} (median)", ms(hold));
            }
            for (name, way) in [("out", &self.forward), ("back", &self.reverse)] {
                let added = &way.added_us;
                let delay = match (&way.delay_us, &way.withheld) {
                    (Some(d), _) => format!("one-way p50 {} (min {}), ", ms(d.p50), ms(d.min)),
                    (None, Some(_)) => "one-way withheld, ".into(),
                    (None, None) => String::new(),
                };
                let ipdv = way.ipdv_us.as_ref().map_or(String::new(), |i| {
                    format!(", ipdv mean {} p99 {}", ms(i.mean), ms(i.p99))
                });
                let _ = writeln!(
                    out,
                    "{name:<4} {delay}added p50 {} p99 {} max {}, jitter {}{ipdv}",
                    ms(added.p50),
                    ms(added.p99),
                    ms(added.max),
                    ms(way.jitter_us)
                );
            }
            if let Some(why) = self
                .forward
                .withheld
                .as_ref()
                .or(self.reverse.withheld.as_ref())
            {
                let _ = writeln!(out, "one-way delay withheld: {why}");
            }
        }
        let _ = writeln!(out, "clocks: {}", self.clocks_text());
        if let Some(call) = &self.call {
            out.push_str(&crate::text::call_lines(call));
        }
        if let Some(marks) = &self.marks {
            out.push_str(&marks_text(marks));
        }
        if let Some(hops) = self.hops {
            let _ = writeln!(out, "hops to the reflector: {hops}");
        }
        if !self.unrecognized_tlvs.is_empty() {
            let _ = writeln!(
                out,
                "the reflector does not know TLV types {:?}",
                self.unrecognized_tlvs
            );
        }
        for warning in &self.warnings {
            let _ = writeln!(out, "warning: {warning}");
        }
        if let Some(after) = self.interrupted_after_s {
            let _ = writeln!(out, "interrupted after {after:.2} s");
        }
        out
    }

    /// CSV: a row per interval.
    fn rows(&self) -> Rows {
        let header = [
            "end_s",
            "sent",
            "answered",
            "rtt_p50_us",
            "forward_added_p50_us",
            "reverse_added_p50_us",
        ]
        .map(String::from)
        .to_vec();
        let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.1}"));
        let rows = self
            .intervals
            .iter()
            .map(|i| {
                vec![
                    format!("{:.3}", i.end_s),
                    i.sent.to_string(),
                    i.answered.to_string(),
                    opt(i.rtt_p50_us),
                    opt(i.forward_added_p50_us),
                    opt(i.reverse_added_p50_us),
                ]
            })
            .collect();
        (header, rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names operators use for the common classes, the number otherwise.
    #[test]
    fn dscp_names_are_the_usual_ones() {
        assert_eq!(dscp_name(0), "BE");
        assert_eq!(dscp_name(46), "EF");
        assert_eq!(dscp_name(8), "CS1");
        assert_eq!(dscp_name(34), "AF41");
        assert_eq!(dscp_name(10), "AF11");
        assert_eq!(dscp_name(3), "3");
    }

    /// A re-marked class says so, with its share; a class that arrived as sent does not.
    #[test]
    fn re_marking_is_told_with_its_share() {
        let marks = Marks {
            dscp: 46,
            forward: vec![(0, 0, 10)],
            reverse: vec![(46, 0, 10)],
        };
        let text = marks_text(&marks);
        assert!(
            text.contains("marks out: sent EF, received BE on 100.0 % (re-marked: 100.0 %)"),
            "{text}"
        );
        assert!(
            text.contains("marks back: sent EF, received EF on 100.0 %\n"),
            "{text}"
        );
    }

    /// Loss without a split says why, with the round trip figure still given.
    #[test]
    fn loss_without_a_split_keeps_the_round_trip_and_the_reason() {
        let loss = StampLoss::of(
            1000,
            990,
            None,
            "round trip only: a stateless reflector".into(),
        );
        assert_eq!(loss.round_trip, 10);
        assert_eq!(loss.round_trip_pct, 1.0);
        assert_eq!(loss.forward, None);
        let split = StampLoss::of(1000, 990, Some((7, 2, 1)), "direct measurement".into());
        assert_eq!(split.forward_pct, Some(0.7));
        assert_eq!(split.unattributed, Some(1));
    }
}
