//! `run = "game"`, `run = "conference"`: an application pattern between every pair
//! (`linerate app --pattern NAME`, `linerate_model::app`), run by the source's agent
//! against the destination's server as the command line runs it, the options it reads
//! taken from the test's table under their mesh names (`frames`, `key_frames`,
//! `participants`, `inputs`, `state`, `codec`, `jitter_buffer`). A pattern with a call
//! is headed by its worse way's MOS and held to the mesh's `mos_below`; one of frames
//! alone by its worse way's median frame latency, its frames not shown in time held to the
//! loss bound. A pattern is a line in [`super::KINDS`]; its reading, its checks and its
//! plan are the pattern's own.

use super::{Context, JobPlan, JobSite, Kind, TestKind, Transport};
use crate::model::DEFAULT_TEST_SECONDS;
use crate::reading::{MeshError, Reader, TestTable};
use linerate_model::app::{AppOption, AppOptions, Pattern, Plan};
use linerate_model::call::JitterBuffer;
use linerate_model::measure::{Headline, Measure};
use linerate_model::video::{KeyFrames, VideoSettings};
use toml::Spanned;

#[derive(Debug, Clone, PartialEq)]
pub struct App {
    pub pattern: &'static Pattern,
    pub options: AppOptions,
    plan: Plan,
}

impl App {
    /// Whether it carries a call (scored by the E-model) in either of its tests.
    fn has_call(&self) -> bool {
        self.plan.tests().any(|t| t.call().is_some())
    }
}

impl Kind for App {
    fn run(&self) -> &'static str {
        self.pattern.name
    }

    fn transport(&self) -> Transport {
        Transport::Udp
    }

    fn measure(&self) -> Measure {
        match self.has_call() {
            true => Measure::Mos,
            false => Measure::Latency,
        }
    }

    fn headline(&self) -> Headline {
        match self.has_call() {
            true => Headline::Mos,
            false => Headline::Transaction {
                index: 0,
                label: "frame",
            },
        }
    }

    fn marks_packets(&self) -> bool {
        true
    }

    /// Its frames not shown in time, or its call's score, are watched as loss and MOS are.
    fn told_without_receivers(&self) -> bool {
        true
    }

    fn plan(&self, site: &JobSite) -> JobPlan {
        // What the agent's client job reads (drivers' `client_job::Spec`).
        JobPlan::Source {
            kind: "client",
            spec: serde_json::json!({
                "server": site.dst.address,
                "seconds": site.seconds,
                "test": "app",
                "pattern": self.pattern.name,
                "options": self.options,
                "marks": site.marks,
            }),
        }
    }
}

/// Its name in a mesh file: an option's flag without its dashes, in snake case; `None`
/// for what the mesh does not carry (a requirement is the command line's).
fn key(option: AppOption) -> Option<&'static str> {
    match option {
        AppOption::Frames => Some("frames"),
        AppOption::KeyFrames => Some("key_frames"),
        AppOption::Participants => Some("participants"),
        AppOption::Inputs => Some("inputs"),
        AppOption::State => Some("state"),
        AppOption::Codec => Some("codec"),
        AppOption::JitterBuffer => Some("jitter_buffer"),
        AppOption::Qoo => None,
    }
}

/// The pattern `run` names, its options from the table (what it does not read is left
/// for the file to refuse), checked by its plan: a value out of bounds is shown at its
/// key.
pub(super) fn read(
    reader: &Reader,
    table: &mut TestTable,
    context: &Context,
) -> Result<(TestKind, f64), MeshError> {
    let pattern = linerate_model::app::find(context.run.get_ref())
        .map_err(|why| reader.at(context.run, why))?;
    let seconds = table.seconds_at_least(
        reader,
        "duration",
        (1.0, "an application's test must last at least 1 s"),
        DEFAULT_TEST_SECONDS,
    )?;
    let mut options = AppOptions::default();
    let mut given: Vec<(AppOption, std::ops::Range<usize>)> = Vec::new();
    for &option in pattern.reads {
        let Some(key) = key(option) else { continue };
        if let Some(span) = read_option(reader, table, &mut options, option, key)? {
            given.push((option, span));
        }
    }
    let plan = pattern.plan(&options).map_err(|why| {
        // Shown at the key its flag names, in the file's words.
        let at = given
            .iter()
            .find(|(option, _)| why.contains(option.flag()))
            .map_or(context.run.span().start, |(_, span)| span.start);
        let why = given.iter().fold(why.clone(), |why, (option, _)| {
            why.replace(option.flag(), key(*option).unwrap_or(option.flag()))
        });
        reader.error(at, format!("{}: {why}", context.name))
    })?;
    // A test beside runs a lead longer at each end; the agent's limit allows for it.
    Ok((
        TestKind::App(Box::new(App {
            pattern,
            options,
            plan,
        })),
        seconds,
    ))
}

/// `key`'s value into `options` where the table gives it; its place where it did.
fn read_option(
    reader: &Reader,
    table: &mut TestTable,
    options: &mut AppOptions,
    option: AppOption,
    key: &str,
) -> Result<Option<std::ops::Range<usize>>, MeshError> {
    let text = match option {
        AppOption::Participants => {
            let Some(n) = table.take::<u32>(reader, key)? else {
                return Ok(None);
            };
            options.participants = Some(*n.get_ref());
            return Ok(Some(n.span()));
        }
        // Not a key of the file.
        AppOption::Qoo => return Ok(None),
        _ => match table.take::<String>(reader, key)? {
            Some(text) => text,
            None => return Ok(None),
        },
    };
    // In the file's words: a message that names the flag names the key.
    let bad = |why: String| {
        let why = why.replace(option.flag(), key);
        match why.starts_with("invalid value") {
            true => reader.at(&text, why),
            false => reader.at(&text, format!("{key} '{}': {why}", text.get_ref())),
        }
    };
    let frames = || {
        VideoSettings::parse(text.get_ref())
            .and_then(VideoSettings::checked)
            .map_err(bad)
    };
    match option {
        AppOption::Frames => options.frames = Some(frames()?),
        AppOption::Inputs => options.inputs = Some(frames()?),
        AppOption::State => options.state = Some(frames()?),
        AppOption::KeyFrames => {
            options.key_frames = Some(KeyFrames::parse(text.get_ref()).map_err(bad)?)
        }
        AppOption::Codec => {
            let codec = super::voip::scored_codec(text.get_ref());
            options.codec = Some(codec.map_err(|why| reader.at(&text, why))?)
        }
        AppOption::JitterBuffer => {
            options.jitter_buffer = Some(JitterBuffer::parse(text.get_ref(), |time| {
                let time = Spanned::new(text.span(), time.to_string());
                Ok((reader.seconds(&time, key, false)? * 1000.0).round() as u32)
            })?)
        }
        AppOption::Participants | AppOption::Qoo => {}
    }
    Ok(Some(text.span()))
}

#[cfg(test)]
mod tests {
    use crate::{job_plan, parse, JobPlan, TestKind};
    use linerate_model::app::AppOptions;
    use linerate_model::call::{Codec, JitterBuffer};
    use linerate_model::measure::{Headline, Measure};
    use linerate_model::video::VideoSettings;

    const MESH: &str = "name = \"m\"\n\
        [[host]]\nname = \"a\"\naddress = \"10.0.0.1:5201\"\n\
        [[host]]\nname = \"b\"\naddress = \"10.0.0.2:5201\"\n\
        [[test]]\nname = \"c\"\nrun = \"conference\"\nduration = \"6s\"\ninterval = \"1h\"\nparticipants = 3\nframes = \"30:1m,200k\"\ncodec = \"g729a\"\njitter_buffer = \"adaptive:300ms\"\ndscp = \"AF41\"\n\
        [[test]]\nname = \"g\"\nrun = \"game\"\nduration = \"5s\"\ninterval = \"1h\"\nstate = \"128:1m,300k\"\n\
        [[group]]\nname = \"all\"\nhosts = [\"*\"]\ntests = [\"c\", \"g\"]\n";

    /// A conference's and a game's tables become the source agent's application test,
    /// each option under its mesh name; a conference is headed by MOS (it carries calls)
    /// and may take its calls' lead at each end, a game by its frames' latency.
    #[test]
    fn an_application_test_asks_the_sources_agent_for_its_pattern() {
        let mesh = parse("m.toml", MESH).unwrap();
        let TestKind::App(conference) = &mesh.tests[0].kind else {
            panic!("an application")
        };
        assert_eq!(conference.pattern.name, "conference");
        assert_eq!(
            conference.options,
            AppOptions {
                participants: Some(3),
                frames: Some(VideoSettings::parse("30:1m,200k").unwrap()),
                codec: Some(Codec::G729a),
                jitter_buffer: Some(JitterBuffer::Adaptive { most_ms: 300 }),
                ..AppOptions::default()
            }
        );
        let kind = mesh.tests[0].kind.kind();
        assert_eq!((kind.run(), kind.measure()), ("conference", Measure::Mos));
        assert_eq!(kind.headline(), Headline::Mos);
        assert_eq!(mesh.tests[0].seconds, 6.0);
        let game = mesh.tests[1].kind.kind();
        assert_eq!((game.run(), game.measure()), ("game", Measure::Latency));
        assert_eq!(mesh.tests[1].kind.protocol_label(), "udp");
        let jobs = mesh.jobs();
        assert!(!jobs.is_empty());
        for job in &jobs {
            let JobPlan::Source {
                kind: "client",
                spec,
            } = job_plan(&mesh, job)
            else {
                panic!("a client test")
            };
            assert_eq!(spec["test"], "app");
            assert_eq!(spec["server"], mesh.hosts[job.dst].address.as_str());
            match spec["pattern"].as_str() {
                Some("conference") => {
                    assert_eq!(spec["options"]["participants"], 3);
                    assert_eq!(spec["options"]["codec"], "g729a");
                    assert_eq!(spec["marks"]["dscp"], 34);
                }
                Some("game") => {
                    assert_eq!(spec["options"]["state"]["fps"], 128.0);
                    assert!(spec["options"].get("inputs").is_none(), "{spec}");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    /// What an application test cannot take is refused at its place, in one line, in the
    /// file's words: a value out of the pattern's bounds, an option it does not read.
    #[test]
    fn an_application_test_refuses_what_it_cannot_take() {
        for (change, needle, says) in [
            ("participants = 3", "participants = 40", "participants"),
            ("participants = 3", "participants = -1", "participants"),
            ("frames = \"30:1m,200k\"", "frames = \"fast\"", "frames"),
            ("codec = \"g729a\"", "codec = \"opus\"", "codec"),
            (
                "jitter_buffer = \"adaptive:300ms\"",
                "jitter_buffer = \"1h\"",
                "jitter_buffer",
            ),
            (
                "state = \"128:1m,300k\"",
                "participants = 3",
                "'participants' is not an option of run = \"game\"",
            ),
            (
                "state = \"128:1m,300k\"",
                "qoo = \"p99=1ms/2ms\"",
                "'qoo' is not an option",
            ),
            ("duration = \"5s\"", "duration = \"0s\"", "duration"),
        ] {
            let error = parse("m.toml", &MESH.replace(change, needle))
                .unwrap_err()
                .to_string();
            assert!(error.starts_with("m.toml:"), "{error}");
            assert!(error.contains(says), "{needle}: {error}");
            assert!(!error.contains("--"), "the file's words: {error}");
            assert_eq!(error.lines().count(), 1, "{error}");
        }
        // Out of bounds, at its own line, in the file's words.
        let text = MESH.replace("participants = 3", "participants = 40");
        let error = parse("m.toml", &text).unwrap_err();
        let line = text.lines().position(|l| l == "participants = 40").unwrap() + 1;
        assert_eq!(error.line, line, "{error}");
    }
}
