//! The application patterns of `linerate app` (docs/app.md), one module each: a pattern
//! reads the options it takes (each with its default where not given) and says which tests
//! it is, a [`Plan`]. A pattern is data; the data plane, the receivers' counts and the
//! scores are the call's (`crate::call`) and video's (`crate::video`).
//!
//! Nothing outside this module names a pattern: the command line reads `--pattern` and the
//! options into [`AppOptions`] and hands them to the pattern [`find`] names; the runner
//! runs the plan's tests (`campaign::test_run::run_app`). An option the pattern does not
//! read is refused with its flag, as a mesh kind refuses a key it does not know. To add a
//! pattern: its module (a [`Pattern`] constant: its name, what it is, the options it reads,
//! its plan, its unit tests) and its line in [`PATTERNS`]; a flag of its own, where it
//! needs one, is a field of [`AppOptions`], a variant of [`AppOption`] and the binary's flag.

mod cloud_gaming;
mod conference;
mod game;
mod video;
mod voip;

pub use conference::Conference;

use crate::call::{CallSettings, Codec, JitterBuffer, DEFAULT_JITTER_BUFFER_MS};
use crate::qoo::Requirement;
use crate::video::{KeyFrames, VideoSettings};
use crate::{CallStream, StreamRequest, StreamTransport};
use serde::{Deserialize, Serialize};

/// Every pattern, in the order help lists them.
pub const PATTERNS: [&Pattern; 5] = [
    &voip::PATTERN,
    &video::PATTERN,
    &game::PATTERN,
    &conference::PATTERN,
    &cloud_gaming::PATTERN,
];

/// The pattern named `name` (as `--pattern` takes it); the error names the value and the
/// patterns there are.
pub fn find(name: &str) -> Result<&'static Pattern, String> {
    PATTERNS
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(|| {
            format!(
                "invalid value '{name}' for '--pattern': one of {}",
                PATTERNS.map(|p| p.name).join(", ")
            )
        })
}

/// An application pattern: what the table holds of it.
#[derive(Debug)]
pub struct Pattern {
    /// Its name on the command line.
    pub name: &'static str,
    /// What it sends, one line for help.
    pub about: &'static str,
    /// `--pattern` and options of an example for help (`game --state 128:1m,300k`).
    pub example: &'static str,
    /// The options it reads; any other given is refused.
    pub reads: &'static [AppOption],
    plan: fn(&AppOptions) -> Result<Plan, String>,
}

/// A pattern is its name: the table holds one of each.
impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.name == other.name
    }
}

impl Pattern {
    /// The tests the pattern is with `options`, or one line naming the value that is out
    /// of bounds or the option it does not read.
    pub fn plan(&self, options: &AppOptions) -> Result<Plan, String> {
        if let Some(stray) = options.given().find(|o| !self.reads.contains(o)) {
            return Err(format!(
                "'{}' is not an option of '--pattern {}' (it reads {})",
                stray.flag(),
                self.name,
                match self.reads {
                    [] => "none".to_string(),
                    reads => reads
                        .iter()
                        .map(|o| o.flag())
                        .collect::<Vec<_>>()
                        .join(", "),
                }
            ));
        }
        (self.plan)(options)
    }
}

/// The options of an application pattern, each `None` where not given: the pattern's
/// default applies. A mesh's agent reads them from its request (`Pattern::plan` checks
/// each); a requirement (`qoo`) is the command line's alone and never crosses.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppOptions {
    /// The video's frames (`--isochronous`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frames: Option<VideoSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_frames: Option<KeyFrames>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub participants: Option<u32>,
    /// A game's client inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<VideoSettings>,
    /// A game's server state each tick.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<VideoSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codec: Option<Codec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_buffer: Option<JitterBuffer>,
    /// Each way's Quality of Outcome requirement.
    #[serde(skip)]
    pub qoo: Option<Requirement>,
}

/// An option of [`AppOptions`], as a pattern says it reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppOption {
    Frames,
    KeyFrames,
    Participants,
    Inputs,
    State,
    Codec,
    JitterBuffer,
    Qoo,
}

impl AppOption {
    /// Its flag on the command line.
    pub fn flag(self) -> &'static str {
        match self {
            AppOption::Frames => "--isochronous",
            AppOption::KeyFrames => "--key-frames",
            AppOption::Participants => "--participants",
            AppOption::Inputs => "--inputs",
            AppOption::State => "--state",
            AppOption::Codec => "--codec",
            AppOption::JitterBuffer => "--jitter-buffer",
            AppOption::Qoo => "--qoo",
        }
    }
}

impl AppOptions {
    /// The options given, in [`AppOption`]'s order.
    pub fn given(&self) -> impl Iterator<Item = AppOption> {
        [
            (AppOption::Frames, self.frames.is_some()),
            (AppOption::KeyFrames, self.key_frames.is_some()),
            (AppOption::Participants, self.participants.is_some()),
            (AppOption::Inputs, self.inputs.is_some()),
            (AppOption::State, self.state.is_some()),
            (AppOption::Codec, self.codec.is_some()),
            (AppOption::JitterBuffer, self.jitter_buffer.is_some()),
            (AppOption::Qoo, self.qoo.is_some()),
        ]
        .into_iter()
        .filter_map(|(option, given)| given.then_some(option))
    }

    /// The call asked: `--codec` (G.711 with concealment) and `--jitter-buffer` (60 ms
    /// fixed) or their defaults, checked.
    pub fn call(&self) -> Result<CallSettings, String> {
        CallSettings::checked(
            self.codec.unwrap_or(Codec::G711),
            self.jitter_buffer.unwrap_or(JitterBuffer::Fixed {
                ms: DEFAULT_JITTER_BUFFER_MS,
            }),
        )
    }

    /// The video's frames: `--isochronous` ([`DEFAULT_FRAMES`] where not given) with its
    /// key frames where asked, checked together (a key frame may not outgrow a frame).
    pub fn frames(&self) -> Result<VideoSettings, String> {
        self.frames_or(DEFAULT_FRAMES)
    }

    /// The video's frames as [`AppOptions::frames`], a pattern's own `default` where not
    /// given.
    pub fn frames_or(&self, default: &str) -> Result<VideoSettings, String> {
        let frames = self.frames.unwrap_or_else(|| {
            VideoSettings::parse(default).expect("a pattern's default frames read")
        });
        VideoSettings {
            key_frames: self.key_frames,
            ..frames
        }
        .checked()
    }
}

/// A video's frames where `--isochronous` gives none: a 1080p stream's order.
pub const DEFAULT_FRAMES: &str = "30:5m,1m";

/// One test of a plan: its stream and its flows each way.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedTest {
    pub stream: StreamRequest,
    pub flows: u32,
}

impl PlannedTest {
    /// One flow each way of `stream`.
    fn one(stream: StreamRequest) -> PlannedTest {
        PlannedTest { stream, flows: 1 }
    }

    /// The call it carries, where it is a call and nothing else.
    pub fn call(&self) -> Option<&CallStream> {
        match &self.stream.transport {
            StreamTransport::Call(call) => Some(call),
            _ => None,
        }
    }
}

/// What a pattern runs: its test, and where the application is two shapes at once (the
/// data plane gives a test one shape each way) a test beside it over the same span, whose
/// call scores join the first's summary.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub test: PlannedTest,
    pub beside: Option<PlannedTest>,
}

impl Plan {
    /// A plan of `stream` alone, one flow each way.
    fn one(stream: StreamRequest) -> Plan {
        Plan {
            test: PlannedTest::one(stream),
            beside: None,
        }
    }

    /// Its tests: the test, then the one beside it where there is one.
    pub fn tests(&self) -> impl Iterator<Item = &PlannedTest> {
        std::iter::once(&self.test).chain(self.beside.as_ref())
    }

    /// The call the plan is, where it is one call and nothing beside (what an irtt server
    /// can answer).
    pub fn only_call(&self) -> Option<&CallStream> {
        match (&self.beside, self.test.flows) {
            (None, 1) => self.test.call(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pattern plans from its defaults alone and is found by its name; an unknown
    /// name is refused with the names there are.
    #[test]
    fn each_pattern_plans_from_its_defaults_and_is_found_by_name() {
        for pattern in PATTERNS {
            assert_eq!(find(pattern.name).unwrap().name, pattern.name);
            let plan = pattern.plan(&AppOptions::default()).unwrap();
            assert!(plan.test.flows >= 1, "{}", pattern.name);
            assert!(!pattern.about.is_empty());
        }
        let err = find("chess").unwrap_err();
        assert!(
            err.contains("'chess'") && err.contains("voip, video, game, conference, cloud-gaming"),
            "{err}"
        );
    }

    /// An option a pattern does not read is refused with its flag and what it reads;
    /// one it reads is taken.
    #[test]
    fn an_option_a_pattern_does_not_read_is_refused_with_its_flag() {
        let participants = AppOptions {
            participants: Some(3),
            ..AppOptions::default()
        };
        let err = find("voip").unwrap().plan(&participants).unwrap_err();
        assert!(
            err.contains("'--participants' is not an option of '--pattern voip'")
                && err.contains("--codec"),
            "{err}"
        );
        assert_eq!(
            find("conference")
                .unwrap()
                .plan(&participants)
                .unwrap()
                .test
                .flows,
            2
        );
        for pattern in PATTERNS {
            for option in pattern.reads {
                assert!(!option.flag().is_empty());
            }
        }
    }

    /// Only a call alone can go to an irtt server.
    #[test]
    fn only_a_call_alone_is_a_call_plan() {
        let plan = |name| find(name).unwrap().plan(&AppOptions::default()).unwrap();
        assert!(plan("voip").only_call().is_some());
        for name in ["video", "game", "conference", "cloud-gaming"] {
            assert!(plan(name).only_call().is_none(), "{name}");
        }
    }
}
