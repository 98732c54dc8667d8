//! Quality of Outcome (draft-ietf-ippm-qoo-09, "QoO"): how close what a path gave an
//! application is to what the application needs, as a score from 0 (unacceptable) to 100
//! (optimal). A requirement names, for a few latency percentiles, the latency at which the
//! application is at its best and the one at which it becomes unacceptable; the same two
//! bounds for the share of packets lost; and the least throughput it needs. Each latency
//! percentile and the loss score where the measure lies between its two bounds (linearly,
//! clamped to 0..100), the throughput scores all or nothing, and the score is the worst of
//! them, so that it says which figure held the application back.
//!
//! The draft defines the method, not the requirements: those are the application's. The
//! sets here ([`Requirement::interactive_video`], [`Requirement::game`]) are linerate's
//! own, with the reasons beside them (docs/app.md); a user gives their own with `--qoo`.
//! Sans IO.

use serde::{Deserialize, Serialize};

use crate::latency::LatencySummary;

/// The percentiles a requirement may name: those every latency summary carries.
pub const PERCENTILES: [f64; 6] = [50.0, 90.0, 99.0, 99.9, 99.99, 100.0];
/// The most latency points a requirement holds (one a percentile).
pub const MAX_POINTS: usize = PERCENTILES.len();

/// One latency percentile's bounds, milliseconds: at or under `optimal_ms` the
/// application is at its best, at or over `unacceptable_ms` it is unusable.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencyBound {
    pub percentile: f64,
    pub optimal_ms: f64,
    pub unacceptable_ms: f64,
}

/// What an application needs of a path (the draft's requirement specification: its
/// requirements for optimal performance and its conditions at the point of unacceptable
/// performance).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Requirement {
    /// Whose requirement it is, for the reader: `interactive video`, `game`, `given`.
    pub name: String,
    pub latency: Vec<LatencyBound>,
    /// The share of packets (or frames) lost, 0..1: optimal at or under the first,
    /// unacceptable at or over the second.
    pub loss: (f64, f64),
    /// The least throughput, bit/s (0: none asked).
    #[serde(default)]
    pub min_bps: f64,
}

/// What was measured of one way: its latency distribution (microseconds, as every
/// latency summary holds it), the share lost, the throughput.
#[derive(Debug, Clone, Copy)]
pub struct Measured<'a> {
    pub latency_us: &'a LatencySummary,
    pub loss: f64,
    pub bps: f64,
}

/// A way's score and the parts it is the worst of (each 0..100), with the latency
/// percentile that scored worst.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QooScore {
    pub requirement: Requirement,
    pub score: f64,
    pub latency: f64,
    pub loss: f64,
    pub throughput: f64,
    /// The percentile whose latency scored lowest (`None` without latency bounds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worst_percentile: Option<f64>,
}

/// Where `measured` lies from `optimal` (100) to `unacceptable` (0), clamped.
fn between(measured: f64, optimal: f64, unacceptable: f64) -> f64 {
    if measured <= optimal {
        return 100.0;
    }
    let span = unacceptable - optimal;
    if span <= 0.0 {
        return 0.0;
    }
    ((1.0 - (measured - optimal) / span) * 100.0).clamp(0.0, 100.0)
}

/// A summary's latency at `percentile` (one of [`PERCENTILES`]), microseconds.
pub fn latency_at(summary: &LatencySummary, percentile: f64) -> Option<f64> {
    let near = |p: f64| (percentile - p).abs() < 1e-9;
    Some(match () {
        _ if near(50.0) => summary.p50,
        _ if near(90.0) => summary.p90,
        _ if near(99.0) => summary.p99,
        _ if near(99.9) => summary.p999,
        _ if near(99.99) => summary.p9999,
        _ if near(100.0) => summary.max,
        _ => return None,
    })
}

impl Requirement {
    /// A video call's picture, one way: frames whole within G.114's bounds for one-way
    /// delay of interactive media (150 ms acceptable to most users, 400 ms the limit for
    /// planning) at the 99th percentile, frames not shown in time (lost, in part, late) at
    /// most 1 % and at worst 5 %, and the stream's own mean load carried.
    pub fn interactive_video(mean_bps: f64) -> Requirement {
        Requirement {
            name: "interactive video".into(),
            latency: vec![LatencyBound {
                percentile: 99.0,
                optimal_ms: 150.0,
                unacceptable_ms: 400.0,
            }],
            loss: (0.01, 0.05),
            min_bps: mean_bps,
        }
    }

    /// A voice call, one way: each datagram delivered within G.114's bounds for one-way
    /// delay of interactive media (150 ms acceptable to most users, 400 ms the limit for
    /// planning) at the 99th percentile; datagrams not played in time (lost, or late
    /// behind the jitter buffer) at most 1 % and at worst 10 % (G.711 with loss
    /// concealment, G.113 Appendix I's Bpl of 25.1: the E-model's R falls by under 4 at
    /// 1 % and by 27 at 10 %, where many users are dissatisfied); no throughput asked (a
    /// codec's rate is fixed, and its losses are counted). linerate's choice of the loss
    /// bounds, on G.113's values, not a standard's.
    pub fn voice() -> Requirement {
        Requirement {
            name: "voice".into(),
            latency: vec![LatencyBound {
                percentile: 99.0,
                optimal_ms: 150.0,
                unacceptable_ms: 400.0,
            }],
            loss: (0.01, 0.10),
            min_bps: 0.0,
        }
    }

    /// One way of a call scored against `given` (`--qoo`) or a voice call's requirement:
    /// its delays, and the datagrams not played in time (`missed`: lost and late) over
    /// those `sent` (all of them missed where none was sent).
    pub fn score_call(
        given: Option<&Requirement>,
        latency_us: &LatencySummary,
        sent: u64,
        missed: u64,
    ) -> QooScore {
        let requirement = given.cloned().unwrap_or_else(Requirement::voice);
        requirement.score(&Measured {
            latency_us,
            loss: if sent == 0 {
                1.0
            } else {
                missed as f64 / sent as f64
            },
            bps: 0.0,
        })
    }

    /// A fast online game, each way (its inputs out, its state back): a tick's update
    /// whole within 50 ms at the median and 100 ms at the 99th percentile at best, 150 and
    /// 250 ms at the point where play becomes unacceptable; updates not applied in time at
    /// most 0.5 %, at worst 5 %; the way's own load carried. linerate's choice (a 64-tick
    /// game's state is 15.6 ms apart: a LAN scores 100, a path that holds an update for a
    /// quarter of a second at its 99th percentile scores 0), not a standard's.
    pub fn game(mean_bps: f64) -> Requirement {
        Requirement {
            name: "game".into(),
            latency: vec![
                LatencyBound {
                    percentile: 50.0,
                    optimal_ms: 50.0,
                    unacceptable_ms: 150.0,
                },
                LatencyBound {
                    percentile: 99.0,
                    optimal_ms: 100.0,
                    unacceptable_ms: 250.0,
                },
            ],
            loss: (0.005, 0.05),
            min_bps: mean_bps,
        }
    }

    /// Reads a requirement a user gives (`--qoo`): comma-separated `pP=OPTIMAL/UNACCEPTABLE`
    /// latency bounds (`p99=150ms/400ms`, percentiles among [`PERCENTILES`]),
    /// `loss=OPTIMAL/UNACCEPTABLE` (`loss=0.1%/2%`) and `rate=BPS` (`rate=4m`); at least one
    /// latency bound. The error says why.
    pub fn parse(text: &str) -> Result<Requirement, String> {
        let mut requirement = Requirement {
            name: "given".into(),
            latency: Vec::new(),
            loss: (1.0, 1.0),
            min_bps: 0.0,
        };
        for part in text.split(',').map(str::trim) {
            let (key, value) = part.split_once('=').ok_or_else(|| {
                format!("'{part}': expected pP=OPTIMAL/UNACCEPTABLE, loss=A/B or rate=R")
            })?;
            let pair = |value: &str| -> Result<(String, String), String> {
                value
                    .split_once('/')
                    .map(|(a, b)| (a.trim().to_string(), b.trim().to_string()))
                    .ok_or_else(|| format!("'{part}': expected OPTIMAL/UNACCEPTABLE"))
            };
            match key.trim() {
                "loss" => {
                    let (a, b) = pair(value)?;
                    requirement.loss = (share(&a)?, share(&b)?);
                }
                "rate" => {
                    requirement.min_bps = crate::units::parse_rate(value.trim())
                        .map_err(|e| format!("'{part}': {e}"))?
                        as f64;
                }
                key => {
                    let percentile: f64 = key
                        .strip_prefix('p')
                        .and_then(|p| p.parse().ok())
                        .filter(|p| PERCENTILES.iter().any(|q| (q - p).abs() < 1e-9))
                        .ok_or_else(|| {
                            format!(
                                "'{key}': a percentile among p50, p90, p99, p99.9, p99.99, p100"
                            )
                        })?;
                    let (a, b) = pair(value)?;
                    requirement.latency.push(LatencyBound {
                        percentile,
                        optimal_ms: millis(&a)?,
                        unacceptable_ms: millis(&b)?,
                    });
                }
            }
        }
        requirement.checked()
    }

    /// The requirement, or why it cannot score: no latency bound, one named twice, more
    /// than [`MAX_POINTS`], an unacceptable bound not above the optimal one.
    pub fn checked(self) -> Result<Requirement, String> {
        if self.latency.is_empty() {
            return Err("at least one latency bound, as p99=150ms/400ms".into());
        }
        if self.latency.len() > MAX_POINTS {
            return Err(format!("at most {MAX_POINTS} latency bounds"));
        }
        for (i, bound) in self.latency.iter().enumerate() {
            if self.latency[..i]
                .iter()
                .any(|b| (b.percentile - bound.percentile).abs() < 1e-9)
            {
                return Err(format!("p{} is named twice", bound.percentile));
            }
            let finite = bound.optimal_ms.is_finite() && bound.unacceptable_ms.is_finite();
            if !finite || bound.optimal_ms < 0.0 || bound.unacceptable_ms <= bound.optimal_ms {
                return Err(format!(
                    "p{}: the unacceptable latency must be above the optimal one",
                    bound.percentile
                ));
            }
        }
        let (optimal, unacceptable) = self.loss;
        if !(0.0..=1.0).contains(&optimal) || !(optimal..=1.0).contains(&unacceptable) {
            return Err(
                "loss: OPTIMAL/UNACCEPTABLE shares from 0 to 100 %, the second not under the first"
                    .into(),
            );
        }
        if !self.min_bps.is_finite() || self.min_bps < 0.0 {
            return Err("rate: a rate of 0 or more".into());
        }
        Ok(self)
    }

    /// The score of `measured` against this requirement.
    pub fn score(&self, measured: &Measured) -> QooScore {
        let mut latency = 100.0;
        let mut worst_percentile = None;
        for bound in &self.latency {
            let ms =
                latency_at(measured.latency_us, bound.percentile).unwrap_or(f64::INFINITY) / 1e3;
            let part = between(ms, bound.optimal_ms, bound.unacceptable_ms);
            if worst_percentile.is_none() || part < latency {
                latency = part;
                worst_percentile = Some(bound.percentile);
            }
        }
        // Nothing measured is nothing delivered: no latency to score, all of it lost.
        if measured.latency_us.count == 0 {
            latency = 0.0;
        }
        let (optimal, unacceptable) = self.loss;
        let loss = if optimal >= unacceptable {
            if measured.loss <= optimal {
                100.0
            } else {
                0.0
            }
        } else {
            between(measured.loss, optimal, unacceptable)
        };
        let throughput = if measured.bps >= self.min_bps {
            100.0
        } else {
            0.0
        };
        QooScore {
            requirement: self.clone(),
            score: latency.min(loss).min(throughput),
            latency,
            loss,
            throughput,
            worst_percentile,
        }
    }
}

impl QooScore {
    /// `87 % for interactive video (latency 87 at p99, loss 100, throughput 100)`.
    pub fn words(&self) -> String {
        format!(
            "{:.0} % for {} (latency {:.0}{}, loss {:.0}, throughput {:.0})",
            self.score,
            self.requirement.name,
            self.latency,
            self.worst_percentile
                .map(|p| format!(" at p{p}"))
                .unwrap_or_default(),
            self.loss,
            self.throughput
        )
    }
}

fn share(text: &str) -> Result<f64, String> {
    let (number, scale) = match text.strip_suffix('%') {
        Some(number) => (number, 100.0),
        None => (text, 1.0),
    };
    number
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|v| v / scale)
        .ok_or_else(|| format!("'{text}': a share, as 0.1% or 0.001"))
}

fn millis(text: &str) -> Result<f64, String> {
    crate::units::parse_duration(text)
        .map(|seconds| seconds * 1e3)
        .map_err(|e| format!("'{text}': {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(p99_ms: f64, p999_ms: f64) -> LatencySummary {
        LatencySummary {
            count: 1_000,
            p50: p99_ms * 500.0,
            p90: p99_ms * 900.0,
            p99: p99_ms * 1e3,
            p999: p999_ms * 1e3,
            max: p999_ms * 1e3,
            ..LatencySummary::default()
        }
    }

    /// The draft's worked example (its section 5.4): bounds at p99 of 200 and 500 ms and
    /// at p99.9 of 300 and 600 ms, loss 1 % and 5 %, 4 Mbit/s; measured 350 and 375 ms,
    /// 2 % lost, 28 Mbit/s: latency 50 (p99 the worse), loss 75, throughput 100, QoO 50.
    #[test]
    fn the_drafts_example_scores_fifty() {
        let requirement =
            Requirement::parse("p99=200ms/500ms, p99.9=300ms/600ms, loss=1%/5%, rate=4m").unwrap();
        let latency = summary(350.0, 375.0);
        let score = requirement.score(&Measured {
            latency_us: &latency,
            loss: 0.02,
            bps: 28e6,
        });
        assert!((score.latency - 50.0).abs() < 1e-9, "{score:?}");
        assert!((score.loss - 75.0).abs() < 1e-9, "{score:?}");
        assert_eq!(score.throughput, 100.0);
        assert!((score.score - 50.0).abs() < 1e-9);
        assert_eq!(score.worst_percentile, Some(99.0));
        assert_eq!(
            score.words(),
            "50 % for given (latency 50 at p99, loss 75, throughput 100)"
        );
        // Under the throughput asked: nothing, whatever the rest.
        let starved = requirement.score(&Measured {
            latency_us: &latency,
            loss: 0.0,
            bps: 3e6,
        });
        assert_eq!(starved.score, 0.0);
        // At or inside every optimal bound: all of it; past an unacceptable one: none.
        let best = requirement.score(&Measured {
            latency_us: &summary(10.0, 20.0),
            loss: 0.005,
            bps: 5e6,
        });
        assert_eq!(best.score, 100.0);
        let worst = requirement.score(&Measured {
            latency_us: &summary(10.0, 900.0),
            loss: 0.0,
            bps: 5e6,
        });
        assert_eq!((worst.score, worst.worst_percentile), (0.0, Some(99.9)));
    }

    /// linerate's own sets: a LAN scores 100; G.114's 400 ms at p99 scores a video call 0,
    /// halfway (275 ms) 50.
    #[test]
    fn the_built_in_sets_score_a_lan_full_and_g114s_limit_nothing() {
        let video = Requirement::interactive_video(5e6);
        let measured = |p99_ms: f64, loss: f64| Measured {
            latency_us: Box::leak(Box::new(summary(p99_ms, p99_ms))),
            loss,
            bps: 5e6,
        };
        assert_eq!(video.score(&measured(0.5, 0.0)).score, 100.0);
        assert!((video.score(&measured(275.0, 0.0)).score - 50.0).abs() < 1e-9);
        assert_eq!(video.score(&measured(400.0, 0.0)).score, 0.0);
        assert!((video.score(&measured(1.0, 0.03)).score - 50.0).abs() < 1e-9);
        let voice = Requirement::voice();
        assert_eq!(voice.score(&measured(0.5, 0.0)).score, 100.0);
        assert!((voice.score(&measured(275.0, 0.0)).score - 50.0).abs() < 1e-9);
        // 2 % not played in time: a ninth of the way from 1 % to 10 %.
        assert!((voice.score(&measured(1.0, 0.02)).score - 800.0 / 9.0).abs() < 1e-9);
        assert_eq!(voice.score(&measured(1.0, 0.10)).score, 0.0);
        let game = Requirement::game(1e5);
        assert_eq!(game.score(&measured(0.5, 0.0)).score, 100.0);
        // A p99 of 175 ms: the p99 bound's halfway, the median's (87.5 ms) better.
        let s = game.score(&measured(175.0, 0.0));
        assert!(
            (s.score - 50.0).abs() < 1e-9 && s.worst_percentile == Some(99.0),
            "{s:?}"
        );
        // Nothing measured scores nothing.
        let none = LatencySummary::default();
        let s = video.score(&Measured {
            latency_us: &none,
            loss: 1.0,
            bps: 0.0,
        });
        assert_eq!(s.score, 0.0);
    }

    #[test]
    fn bad_requirements_say_why() {
        for (bad, says) in [
            ("loss=1%/5%", "at least one latency bound"),
            ("p98=1ms/2ms", "a percentile among"),
            ("p99=200ms/100ms", "above the optimal"),
            ("p99=1ms/2ms,p99=3ms/4ms", "named twice"),
            ("p99=1ms/2ms,loss=5%/1%", "loss:"),
            ("p99=1ms/2ms,loss=x/1%", "a share"),
            ("p99=1ms", "OPTIMAL/UNACCEPTABLE"),
            ("p99=fast/2ms", "'fast'"),
            ("p99=1ms/2ms,rate=lots", "rate=lots"),
            ("speed", "expected pP="),
        ] {
            let e = Requirement::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
