//! `--pattern video`: frames from the far end, as a viewer gets them (iperf 2's
//! isochronous pattern): each frame's latency, frames lost and late.

use super::{AppOption, AppOptions, Pattern, Plan};
use crate::{Direction, StreamRequest, StreamTransport, VideoStream};

pub(super) const PATTERN: Pattern = Pattern {
    name: "video",
    about: "the far end streams frames here: each frame's latency, frames lost and late",
    example: "video --isochronous 60:8m,2m",
    reads: &[AppOption::Frames, AppOption::KeyFrames, AppOption::Qoo],
    plan,
};

fn plan(options: &AppOptions) -> Result<Plan, String> {
    Ok(Plan::one(StreamRequest {
        direction: Direction::Reverse,
        rate_bps: None,
        transport: StreamTransport::Video(VideoStream {
            qoo: options.qoo.clone(),
            ..VideoStream::of(options.frames()?)
        }),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::video::{KeyFrames, VideoSettings};
    use crate::{Environment, TestConfig, TestKind, TestRequest};

    /// A video resolves to the far end sending the frames asked, key frames among them,
    /// in full-size datagrams.
    #[test]
    fn a_video_is_the_far_end_sending_the_frames_asked() {
        let here = Environment {
            cpus: 2,
            udp_length: Some(1472),
        };
        let frames = VideoSettings::parse("60:8m,2m").unwrap();
        let key_frames = KeyFrames::parse("60:8").unwrap();
        let options = AppOptions {
            frames: Some(frames),
            key_frames: Some(key_frames),
            ..AppOptions::default()
        };
        let plan = PATTERN.plan(&options).unwrap();
        assert_eq!(plan.test.flows, 1);
        let config =
            TestConfig::resolve(&TestRequest::new(TestKind::Stream(plan.test.stream)), &here)
                .unwrap();
        assert_eq!(config.direction, Direction::Reverse);
        assert_eq!(
            config.video_of(Direction::Reverse),
            Some(VideoSettings {
                key_frames: Some(key_frames),
                ..frames
            })
        );
        assert_eq!(config.length, 1472);
    }
}
