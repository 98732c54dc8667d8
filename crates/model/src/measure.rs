//! What a test's headline figure is and which way is worse: the kinds of figure every
//! output (the mesh's rows, its board, metrics and alerts) speaks of, named once.

use serde::Serialize;

/// What kind of figure a test's headline is, which says which way is worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// Bits per second: lower is worse.
    Goodput,
    /// Seconds per transaction: higher is worse.
    Latency,
    /// Round trips a minute under load (RPM): lower is worse.
    Responsiveness,
    /// The share of probes lost (STAMP), 0 to 1: above the mesh's `loss_above` for its
    /// `for` is worse, whatever the baseline.
    Loss,
    /// A trace's distance to the destination: neither way is worse; a path change is
    /// told as an event of its own (a path mark).
    Hops,
    /// A call's mean opinion score each way (ITU-T G.107's E-model), 1 to 4.5: below the
    /// mesh's `mos_below` for its `mos_for` is worse, whatever the baseline.
    Mos,
}

impl Measure {
    /// The figure's name where a sentence or a document says it.
    pub fn name(self) -> &'static str {
        match self {
            Measure::Goodput => "goodput",
            Measure::Latency => "latency",
            Measure::Responsiveness => "responsiveness",
            Measure::Loss => "loss",
            Measure::Hops => "hops",
            Measure::Mos => "mos",
        }
    }

    /// Whether its results are watched even where nothing receives them (no metrics,
    /// no alert receiver): a soft failure (loss, a call's poor score) is the reason to
    /// run STAMP or calls in a mesh, a path change the reason to run traces, and the
    /// progress lines tell them.
    pub fn told_without_receivers(self) -> bool {
        matches!(self, Measure::Loss | Measure::Hops | Measure::Mos)
    }

    /// Whether it is held to an absolute bound over a span (the mesh's `loss_above` and
    /// `loss_for`, `mos_below` and `mos_for`) rather than to its baseline: a path that has
    /// always lost 0.2 %, or a call that has always scored 3.1, has always been broken,
    /// and a baseline would call it normal.
    pub fn bounded(self) -> bool {
        matches!(self, Measure::Loss | Measure::Mos)
    }

    /// A figure of this measure with its unit: "105 µs", "412 Mbit/s", "850 RPM",
    /// "0.100 %".
    pub fn show(self, value: f64) -> String {
        match self {
            Measure::Latency => crate::units::format_seconds(value),
            Measure::Goodput => crate::units::format_rate(value, crate::units::Scale::Adaptive),
            Measure::Responsiveness => format!("{value:.0} RPM"),
            Measure::Loss => format!("{:.3} %", value * 100.0),
            Measure::Hops => format!("{value:.0} hops"),
            Measure::Mos => format!("MOS {value:.2}"),
        }
    }
}

/// Which figure heads a result where there is room for one: a mesh's row, its grid cell
/// and its metrics (how it is read from a document is the report crate's `headline::of`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Headline {
    /// Bits per second counted by the receiver.
    Goodput,
    /// The median time of a profile's timed transaction (its first group's transaction
    /// `index`), in seconds, shown with `label` ("rtt", "connect+rr").
    Transaction { index: usize, label: &'static str },
    /// Round trips a minute under load.
    Responsiveness,
    /// The share of STAMP probes lost (round trip), 0 to 1.
    Loss,
    /// A trace's distance to the destination, where a flow reached it.
    Hops,
    /// A call's mean opinion score, the worse of its two ways.
    Mos,
}

/// The bufferbloat grade of the latency a loaded path adds to an idle one, in seconds, on
/// the scale people share (Waveform's): A+ under 5 ms, A under 30, B under 60, C under
/// 200, D under 400, F from 400 ms. `rpm` grades a new connection's handshake under load;
/// `rr --load` its transactions' round trip.
pub fn bufferbloat_grade(added_s: f64) -> &'static str {
    let ms = added_s * 1e3;
    if ms < 5.0 {
        "A+"
    } else if ms < 30.0 {
        "A"
    } else if ms < 60.0 {
        "B"
    } else if ms < 200.0 {
        "C"
    } else if ms < 400.0 {
        "D"
    } else {
        "F"
    }
}
