//! `run = "video"`: video frames from the source to the destination, as `linerate stream
//! HOST -u --isochronous FPS:MEAN,STDEV` sends them (iperf 2's isochronous pattern):
//! a frame every period, its size log-normal, sent as a burst of datagrams from the
//! source's agent to the destination's server, which puts each frame back together. The
//! median frame's latency (first write to last byte) heads the row, held to its baseline
//! as a round trip is; the frames not shown in time (lost, in part, or late) are its loss.

use super::{Context, JobPlan, JobSite, Kind, TestKind, Transport};
use crate::model::DEFAULT_TEST_SECONDS;
use crate::reading::{MeshError, Reader, TestTable};
use linerate_model::measure::{Headline, Measure};
use linerate_model::video::VideoSettings;

/// A stream of 1080p's order when the file names none: 30 frames a second, 5 Mbit/s,
/// frames spread by 1 Mbit/s.
pub const DEFAULT_FRAMES: &str = "30:5m,1m";

#[derive(Debug, Clone, PartialEq)]
pub struct Video {
    pub frames: VideoSettings,
}

impl Kind for Video {
    fn run(&self) -> &'static str {
        "video"
    }

    fn transport(&self) -> Transport {
        Transport::Udp
    }

    fn measure(&self) -> Measure {
        Measure::Latency
    }

    fn headline(&self) -> Headline {
        Headline::Transaction {
            index: 0,
            label: "frame",
        }
    }

    fn marks_packets(&self) -> bool {
        true
    }

    /// Its frames not shown in time are held to the mesh's loss bound, told as loss is.
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
                "test": "video",
                "frames": self.frames,
                "marks": site.marks,
            }),
        }
    }
}

/// A video test's options: its `frames` as iperf 2's `--isochronous` value
/// (`"60:20m,1m"`: frames a second, mean load, its spread), the gap between a frame's
/// datagrams (`frame_gap`, `"100us"`; none by default), its key frames (`key_frames`,
/// `"60:8"` as `--key-frames`; none by default), its `duration`.
pub(super) fn read(
    reader: &Reader,
    table: &mut TestTable,
    _: &Context,
) -> Result<(TestKind, f64), MeshError> {
    table.refuse(
        reader,
        "parallel",
        "'parallel' is not an option of run = \"video\": a video is one stream of frames",
    )?;
    let seconds = table.seconds_at_least(
        reader,
        "duration",
        (1.0, "a video must last at least 1 s"),
        DEFAULT_TEST_SECONDS,
    )?;
    let given = table.take::<String>(reader, "frames")?;
    let mut frames = match &given {
        Some(f) => VideoSettings::parse(f.get_ref())
            .map_err(|why| reader.at(f, format!("frames '{}': {why}", f.get_ref())))?,
        None => VideoSettings::parse(DEFAULT_FRAMES).expect("the default frames read"),
    };
    if let Some(gap) = table.take::<String>(reader, "frame_gap")? {
        frames.gap_us = (reader.seconds(&gap, "frame_gap", false)? * 1e6).round() as u32;
        frames = frames
            .checked()
            .map_err(|why| reader.at(&gap, format!("frame_gap '{}': {why}", gap.get_ref())))?;
    }
    if let Some(key) = table.take::<String>(reader, "key_frames")? {
        let why = |why: String| reader.at(&key, format!("key_frames '{}': {why}", key.get_ref()));
        frames.key_frames =
            Some(linerate_model::video::KeyFrames::parse(key.get_ref()).map_err(why)?);
        frames = frames.checked().map_err(why)?;
    }
    Ok((TestKind::Video(Video { frames }), seconds))
}

#[cfg(test)]
mod tests {
    use crate::kinds::Video;
    use crate::{job_plan, parse, JobPlan, TestKind};
    use linerate_model::measure::Measure;
    use linerate_model::video::VideoSettings;

    const MESH: &str = "name = \"m\"\n\
        [[host]]\nname = \"a\"\naddress = \"10.0.0.1:5201\"\n\
        [[host]]\nname = \"b\"\naddress = \"10.0.0.2:5201\"\n\
        [[test]]\nname = \"v\"\nrun = \"video\"\nduration = \"6s\"\ninterval = \"1h\"\nframes = \"60:8m,2m\"\nframe_gap = \"50us\"\nkey_frames = \"60:8\"\ndscp = \"AF41\"\n\
        [[group]]\nname = \"all\"\nhosts = [\"*\"]\ntests = [\"v\"]\n";

    /// The file's table becomes video frames the source's agent sends to the destination's
    /// server, its frames, gap, length and marks as given, headed by the frames' latency.
    #[test]
    fn a_video_test_asks_the_sources_agent_for_its_frames() {
        let mesh = parse("m.toml", MESH).unwrap();
        let test = &mesh.tests[0];
        let frames = VideoSettings {
            gap_us: 50,
            key_frames: Some(linerate_model::video::KeyFrames {
                every: 60,
                scale: 8.0,
            }),
            ..VideoSettings::parse("60:8m,2m").unwrap()
        };
        assert_eq!(test.kind, TestKind::Video(Video { frames }));
        assert_eq!((test.seconds, test.exclusive), (6.0, false));
        assert_eq!(test.kind.protocol_label(), "udp");
        assert_eq!(test.kind.kind().measure(), Measure::Latency);
        for job in &mesh.jobs() {
            let JobPlan::Source {
                kind: "client",
                spec,
            } = job_plan(&mesh, job)
            else {
                panic!("a client test")
            };
            assert_eq!(spec["test"], "video");
            assert_eq!(spec["frames"]["fps"], 60.0);
            assert_eq!(spec["frames"]["mean_bps"], 8_000_000);
            assert_eq!(spec["frames"]["gap_us"], 50);
            assert_eq!(spec["frames"]["key_frames"]["every"], 60);
            assert_eq!(spec["marks"]["dscp"], 34);
            assert_eq!(spec["seconds"], 6.0);
            assert_eq!(spec["server"], mesh.hosts[job.dst].address.as_str());
        }
        // With no frames named: 30 a second of 5 Mbit/s.
        let plain = MESH.replace("frames = \"60:8m,2m\"\nframe_gap = \"50us\"\n", "");
        let mesh = parse("m.toml", &plain).unwrap();
        let TestKind::Video(video) = &mesh.tests[0].kind else {
            panic!("a video")
        };
        assert_eq!((video.frames.fps, video.frames.mean_bps), (30.0, 5_000_000));
    }

    /// What a video test cannot take is refused at its place, in one line.
    #[test]
    fn a_video_test_refuses_what_it_cannot_take() {
        for (change, needle) in [
            ("frames = \"60:8m,2m\"", "frames = \"5000:8m\""),
            ("frames = \"60:8m,2m\"", "frames = \"fast\""),
            ("frame_gap = \"50us\"", "frame_gap = \"1s\""),
            ("key_frames = \"60:8\"", "key_frames = \"1\""),
            ("key_frames = \"60:8\"", "key_frames = \"2:0.5\""),
            ("frame_gap = \"50us\"", "parallel = 2"),
            ("frame_gap = \"50us\"", "rate = \"1G\""),
            ("duration = \"6s\"", "duration = \"0s\""),
        ] {
            let error = parse("m.toml", &MESH.replace(change, needle))
                .unwrap_err()
                .to_string();
            let key = needle.split(' ').next().unwrap();
            assert!(error.starts_with("m.toml:"), "{error}");
            assert!(error.contains(key), "{needle}: {error}");
            assert_eq!(error.lines().count(), 1, "{error}");
        }
    }
}
