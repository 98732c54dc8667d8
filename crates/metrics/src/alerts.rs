//! Regression alerts: a series worse than its baseline opens an alert, its return to normal
//! resolves it. The state machine is sans-IO ([`Alerts::update`], with the time given);
//! [`Notifier`] sends the changes to Alertmanager's v2 API (and re-sends open alerts, as
//! Prometheus does, so that Alertmanager does not time them out) and to a plain webhook.

use crate::assess::{Assessment, State};
use crate::board::{Key, Measure};
use crate::post::{target, Poster, Request, Target};
use anyhow::Result;
use linerate_model::clock::UnixTime;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// An open (or just resolved) alert.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    pub key: Key,
    /// The figure that went wrong: goodput, latency, responsiveness, loss or a call's MOS
    /// (hops never opens one; a path change is told as an event of its own).
    pub measure: Measure,
    /// The newest figure; for loss and MOS, their mean over the last `over_s`.
    pub value: f64,
    /// The baseline's median; for loss and MOS, the bound (`loss_above`, `mos_below`).
    pub baseline: f64,
    /// Loss and MOS: the span its figure is over, seconds.
    pub over_s: Option<f64>,
    /// Unix seconds.
    pub started_at: f64,
    /// Set when it resolved.
    pub ended_at: Option<f64>,
    /// When the series' result before the one that opened it ended: what it measured
    /// changed between then and `started_at`.
    pub since: f64,
    /// A change of the pair's path in the same span, in words, where a trace saw one.
    pub path_change: Option<String>,
    /// What a loss alert's loss is of: probes (STAMP), a video's frames not shown in
    /// time (beside its series' latency alert), or a multicast stream's datagrams.
    pub lost: LossOf,
}

/// What a loss alert's share is a share of, as its sentence says it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LossOf {
    #[default]
    Probes,
    /// A video's frames not shown in time: lost, in part, or late.
    Frames,
    /// A multicast source's datagrams that one receiver never got.
    MulticastStream,
}

impl Alert {
    pub fn name(&self) -> &'static str {
        match self.measure {
            Measure::Latency => "LinerateLatencyRise",
            Measure::Responsiveness => "LinerateResponsivenessDrop",
            Measure::Loss => "LinerateLossAbove",
            Measure::Goodput => "LinerateGoodputDrop",
            Measure::Hops => "LineratePathHops",
            Measure::Mos => "LinerateMosBelow",
        }
    }

    /// The figure and its baseline with their units: "105 µs (baseline 44.1 µs)",
    /// "412 Mbit/s (baseline 941 Mbit/s)", "850 RPM (baseline 1200 RPM)"; for loss, the
    /// share against its bound.
    pub fn figures(&self) -> String {
        let bound = match self.measure {
            Measure::Loss => "above",
            Measure::Mos => "below",
            _ => "baseline",
        };
        format!(
            "{} ({bound} {})",
            self.measure.show(self.value),
            self.measure.show(self.baseline)
        )
    }

    /// The alert as a progress line says it: the pair and the figure against its
    /// baseline (loss: its whole sentence), with a path change where a trace saw one.
    pub fn words(&self) -> String {
        if self.measure.bounded() {
            return self.summary();
        }
        let k = &self.key;
        let path = self
            .path_change
            .as_ref()
            .map_or(String::new(), |p| format!("; {p}"));
        format!("{} {} -> {} {}{path}", k.test, k.src, k.dst, self.figures())
    }

    /// The alert in a sentence: the pair, the way and the figure against its bound or
    /// baseline.
    pub fn summary(&self) -> String {
        let k = &self.key;
        if self.measure.bounded() {
            // The way the packets went, and which probes (or call) showed it: a reverse
            // series is the way back of its pair's.
            let what = match (self.measure, self.lost) {
                (Measure::Mos, _) => "call",
                (_, LossOf::Frames) => "video",
                (_, LossOf::MulticastStream) => "multicast stream",
                (_, LossOf::Probes) => "probes",
            };
            let (way, whose) = if k.direction == "reverse" {
                (
                    format!("{} -> {}", k.dst, k.src),
                    format!("the way back of {}'s {what} to {}", k.src, k.dst),
                )
            } else {
                (
                    format!("{} -> {}", k.src, k.dst),
                    format!("the way out of {}'s {what} to {}", k.src, k.dst),
                )
            };
            let over = self.over_s.map_or(String::new(), |s| {
                if s >= 60.0 && s % 60.0 == 0.0 {
                    format!(" over {}m", s / 60.0)
                } else {
                    format!(" over {s}s")
                }
            });
            if self.measure == Measure::Mos {
                return format!(
                    "{}: {way} scores MOS {:.2}{over} (below {:.2}), {whose}",
                    k.test, self.value, self.baseline
                );
            }
            let of = if self.lost == LossOf::Frames {
                " of its frames"
            } else {
                ""
            };
            return format!(
                "{}: {way} loses {:.3}%{of}{over} (above {:.3}%), {whose}",
                k.test,
                self.value * 100.0,
                self.baseline * 100.0
            );
        }
        let change = if self.baseline > 0.0 {
            (self.value / self.baseline - 1.0) * 100.0
        } else {
            0.0
        };
        let path = self
            .path_change
            .as_ref()
            .map_or(String::new(), |p| format!("; {p}"));
        format!(
            "{} {} {} -> {} is {:+.0}% from its baseline{path}",
            k.test,
            self.measure.name(),
            k.src,
            k.dst,
            change
        )
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Opened(Alert),
    Resolved(Alert),
}

/// A latency alert opens when this many of the series' last [`HELD_OF`] results were
/// worse, and resolves when at most one of them was: one slow result among normal ones
/// (a busy moment) opens nothing, and a series at the edge does not flap.
pub const HELD_WORSE: usize = 3;
pub const HELD_OF: usize = 5;

/// The open alerts, by series.
#[derive(Debug, Default)]
pub struct Alerts {
    /// By series and the figure that went wrong: a video's series may have its latency's
    /// alert and its frames' loss alert open at once.
    pub open: BTreeMap<(Key, Measure), Alert>,
    /// Latency series: whether each of the last [`HELD_OF`] results was worse.
    pub recent: BTreeMap<Key, VecDeque<bool>>,
    /// Loss series: the windows of the last `loss_for_s` (their ends and loss ratios), and
    /// when the series' first window ended.
    pub spans: BTreeMap<Key, LossSpan>,
}

/// A loss series' recent windows, for the loss over `for`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LossSpan {
    pub windows: VecDeque<(f64, f64)>,
    pub first_at: Option<f64>,
}

impl LossSpan {
    /// Adds a window ending at `at` with loss `ratio`, forgets those that ended `span_s`
    /// or more before it, and says the loss over the span when the series has been
    /// watched for all of it: the mean of its windows' ratios (the windows of one test
    /// have one rate and one length, so this is lost over sent). Watched for all of it:
    /// its first window ended at most `span_s` less one window's length ago.
    fn add(&mut self, at: f64, ratio: f64, span_s: f64) -> Option<f64> {
        let gap = self.windows.back().map(|&(last, _)| at - last);
        let first = *self.first_at.get_or_insert(at);
        self.windows.push_back((at, ratio));
        while self
            .windows
            .front()
            .is_some_and(|&(end, _)| end <= at - span_s)
        {
            self.windows.pop_front();
        }
        let watched = gap.is_some_and(|gap| first <= at - span_s + gap + 1e-9);
        let n = self.windows.len() as f64;
        watched.then(|| self.windows.iter().map(|&(_, r)| r).sum::<f64>() / n)
    }
}

impl Alerts {
    /// After `key`'s newest result (`value`, assessed): an alert opens when it is worse,
    /// resolves when it is back to normal. A failed or skipped test changes nothing (that
    /// is `linerate_last_result_ok`'s to say), nor does a series without a baseline.
    ///
    /// Loss is held to `loss_above` over the last `loss_for_s` rather than window by
    /// window: a small steady loss leaves many windows with nothing lost (0.05 % of 600
    /// probes is 0.3 a window), so a rule per window would never hold for long, and one
    /// window of loss among clean ones is spread over the span. It opens when the loss of
    /// the windows that ended in the last `loss_for_s` is above `loss_above`, once the
    /// series has been watched that long, and resolves when it is back under.
    pub fn update(
        &mut self,
        key: &Key,
        a: &Assessment,
        value: Option<f64>,
        now: f64,
        t: &crate::assess::Thresholds,
    ) -> Option<Change> {
        let bound = t.bound(a.measure);
        let (state, value) = match (bound, a.state, value) {
            (Some(bound), State::Worse | State::Normal, Some(figure)) => {
                let span = self.spans.entry(key.clone()).or_default();
                let over = span.add(now, figure, bound.span_s)?;
                let state = if bound.crossed_by(over) {
                    State::Worse
                } else {
                    State::Normal
                };
                (state, Some(over))
            }
            (Some(_), _, _) => return None,
            (None, state, value) if a.measure == Measure::Latency => {
                let recent = self.recent.entry(key.clone()).or_default();
                match state {
                    State::Worse | State::Normal => {
                        recent.push_back(state == State::Worse);
                        if recent.len() > HELD_OF {
                            recent.pop_front();
                        }
                    }
                    State::Failed | State::Learning => return None,
                }
                let worse = recent.iter().filter(|w| **w).count();
                let held = if self.open.contains_key(&(key.clone(), a.measure)) {
                    if worse <= 1 {
                        State::Normal
                    } else {
                        State::Worse
                    }
                } else if worse >= HELD_WORSE && state == State::Worse {
                    State::Worse
                } else {
                    State::Normal
                };
                (held, value)
            }
            (None, state, value) => (state, value),
        };
        match state {
            State::Worse => {
                if self.open.contains_key(&(key.clone(), a.measure)) {
                    return None;
                }
                let alert = Alert {
                    key: key.clone(),
                    measure: a.measure,
                    value: value?,
                    baseline: match bound {
                        Some(bound) => bound.limit,
                        None => a.baseline?.median,
                    },
                    over_s: bound.map(|b| b.span_s),
                    started_at: now,
                    ended_at: None,
                    since: now,
                    path_change: None,
                    lost: LossOf::Probes,
                };
                self.open.insert((key.clone(), a.measure), alert.clone());
                Some(Change::Opened(alert))
            }
            State::Normal => {
                let mut alert = self.open.remove(&(key.clone(), a.measure))?;
                alert.ended_at = Some(now);
                if let Some(v) = value {
                    alert.value = v;
                }
                Some(Change::Resolved(alert))
            }
            State::Failed | State::Learning => None,
        }
    }
}

fn rfc3339(unix: f64) -> String {
    let at = UnixTime::from_seconds(unix).system();
    humantime::format_rfc3339_millis(at).to_string()
}

// The notifier's resends read the wall clock; Alerts::update is given the time.
#[allow(clippy::disallowed_methods)]
fn now_unix() -> f64 {
    UnixTime::now().seconds()
}

/// How often open alerts are sent again, and how long Alertmanager keeps one without.
pub const RESEND: Duration = Duration::from_secs(30);

/// The alert as Alertmanager's v2 API takes it (`POST /api/v2/alerts`, a list of these).
pub fn alertmanager_json(alert: &Alert, grid: Option<&str>, now: f64) -> Value {
    let k = &alert.key;
    // Open: valid for four re-send periods (Prometheus' rule); resolved: ended.
    let ends = alert.ended_at.unwrap_or(now + 4.0 * RESEND.as_secs_f64());
    let mut body = json!({
        "labels": {
            "alertname": alert.name(),
            "severity": "warning",
            "mesh": k.mesh,
            "src": k.src,
            "dst": k.dst,
            "test": k.test,
            "direction": k.direction,
            "protocol": k.protocol,
        },
        "annotations": {
            "summary": alert.summary(),
            "value": alert.value.to_string(),
            "baseline": alert.baseline.to_string(),
        },
        "startsAt": rfc3339(alert.started_at),
        "endsAt": rfc3339(ends),
    });
    if let Some(path) = &alert.path_change {
        body["annotations"]["path_change"] = json!(path);
    }
    if let Some(grid) = grid {
        body["generatorURL"] = json!(format!(
            "{}/#test={}&src={}&dst={}",
            grid.trim_end_matches('/'),
            k.test,
            k.src,
            k.dst
        ));
    }
    body
}

/// Sends alerts' changes (and re-sends the open ones) to Alertmanager and a webhook.
pub struct Notifier {
    alertmanager: Option<Target>,
    webhook: Option<Target>,
    grid: Option<String>,
    poster: Poster,
    last_resend: f64,
}

impl Notifier {
    /// What was sent and dropped.
    pub fn counts(&self) -> std::sync::Arc<crate::post::Counts> {
        self.poster.counts.clone()
    }

    /// `None` when there is nowhere to send.
    pub fn start(
        alertmanager: Option<&str>,
        webhook: Option<&str>,
        grid: Option<String>,
    ) -> Result<Option<Notifier>> {
        if alertmanager.is_none() && webhook.is_none() {
            return Ok(None);
        }
        Ok(Some(Notifier {
            alertmanager: alertmanager
                .map(|url| {
                    target(url)
                        .map(|t| t.at(&format!("{}/api/v2/alerts", t.path.trim_end_matches('/'))))
                })
                .transpose()?,
            webhook: webhook.map(target).transpose()?,
            grid,
            poster: Poster::start("alerts")?,
            last_resend: now_unix(),
        }))
    }

    fn to_alertmanager(&self, alerts: &[&Alert], now: f64) {
        let Some(target) = &self.alertmanager else {
            return;
        };
        if alerts.is_empty() {
            return;
        }
        let body: Vec<Value> = alerts
            .iter()
            .map(|a| alertmanager_json(a, self.grid.as_deref(), now))
            .collect();
        self.poster.push(Request {
            target: target.clone(),
            content_type: "application/json",
            headers: Vec::new(),
            body: Value::Array(body).to_string().into(),
        });
    }

    pub fn send(&self, change: &Change) {
        let now = now_unix();
        let (alert, status) = match change {
            Change::Opened(a) => (a, "firing"),
            Change::Resolved(a) => (a, "resolved"),
        };
        self.to_alertmanager(&[alert], now);
        if let Some(target) = &self.webhook {
            let body = json!({
                "status": status,
                "alert": alertmanager_json(alert, self.grid.as_deref(), now),
            });
            self.poster.push(Request {
                target: target.clone(),
                content_type: "application/json",
                headers: Vec::new(),
                body: body.to_string().into(),
            });
        }
    }

    /// Re-sends the open alerts when [`RESEND`] has passed.
    pub fn keep_alive(&mut self, alerts: &Alerts) {
        let now = now_unix();
        if now - self.last_resend < RESEND.as_secs_f64() {
            return;
        }
        self.last_resend = now;
        let open: Vec<&Alert> = alerts.open.values().collect();
        self.to_alertmanager(&open, now);
    }
}
