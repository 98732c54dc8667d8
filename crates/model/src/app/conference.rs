//! `--pattern conference`: each participant sends its voice and its video to every other
//! (a full mesh, as WebRTC's peer-to-peer calls are). Seen from one of them, a call and a
//! video stream out to each of the others and one back from each. Over two hosts, this host
//! is one participant and the far end holds the others: two tests at once, the calls
//! beside the video, each with a flow each way per other participant.

use super::{AppOption, AppOptions, Pattern, Plan, PlannedTest};
use crate::call::CallSettings;
use crate::qoo::Requirement;
use crate::video::VideoSettings;
use crate::{CallStream, Direction, StreamRequest, StreamTransport, VideoStream};

pub(super) const PATTERN: Pattern = Pattern {
    name: "conference",
    about: "voice and video to and from each other participant",
    example: "conference --participants 5 --isochronous 30:1500k,300k",
    reads: &[
        AppOption::Participants,
        AppOption::Frames,
        AppOption::KeyFrames,
        AppOption::Codec,
        AppOption::JitterBuffer,
        AppOption::Qoo,
    ],
    plan,
};

/// The participants where `--participants` gives none.
pub const DEFAULT_PARTICIPANTS: u32 = 4;

/// The video both ways scored as interactive video (or against `--qoo`), the calls beside
/// it, each a flow each way per other participant.
fn plan(options: &AppOptions) -> Result<Plan, String> {
    let conference = Conference::checked(
        options.participants.unwrap_or(DEFAULT_PARTICIPANTS),
        options.call()?,
        options.frames()?,
    )?;
    let mut video = conference.video_stream();
    if let StreamTransport::Video(stream) = &mut video.transport {
        let mean_bps = conference.video.mean_bps as f64;
        stream.qoo = Some(
            options
                .qoo
                .clone()
                .unwrap_or_else(|| Requirement::interactive_video(mean_bps)),
        );
    }
    let flows = conference.others();
    Ok(Plan {
        test: PlannedTest {
            stream: video,
            flows,
        },
        beside: Some(PlannedTest {
            stream: conference.call_stream(options.qoo.clone()),
            flows,
        }),
    })
}

/// A conference's participants, their call and their video.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Conference {
    pub participants: u32,
    pub call: CallSettings,
    pub video: VideoSettings,
}

impl Conference {
    /// Participants at most: a conference's streams are flows, two a participant each way.
    pub const MOST: u32 = 32;

    /// A conference of `participants` (2 to [`Conference::MOST`]); the error names the
    /// value.
    pub fn checked(
        participants: u32,
        call: CallSettings,
        video: VideoSettings,
    ) -> Result<Conference, String> {
        if !(2..=Self::MOST).contains(&participants) {
            return Err(format!(
                "invalid value '{participants}' for '--participants': a conference is 2 to {} participants",
                Self::MOST
            ));
        }
        Ok(Conference {
            participants,
            call,
            video,
        })
    }

    /// The others: each a flow each way of both tests.
    pub fn others(&self) -> u32 {
        self.participants - 1
    }

    /// The video: the frames each way, out to each other participant and back from each.
    pub fn video_stream(&self) -> StreamRequest {
        StreamRequest {
            direction: Direction::Bidir,
            rate_bps: None,
            transport: StreamTransport::Video(VideoStream {
                back: Some(self.video),
                ..VideoStream::of(self.video)
            }),
        }
    }

    /// The calls beside it, scored against `qoo` where given.
    pub fn call_stream(&self, qoo: Option<Requirement>) -> StreamRequest {
        StreamRequest {
            direction: Direction::Bidir,
            rate_bps: None,
            transport: StreamTransport::Call(CallStream {
                settings: self.call,
                qoo,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Environment, TestConfig, TestKind, TestRequest};

    /// A conference is its video both ways, scored as interactive video, and its calls
    /// both ways beside it, a flow each way per other participant; it has 2 to 32
    /// participants.
    #[test]
    fn a_conference_is_video_and_calls_both_ways_to_each_other_participant() {
        let video = VideoSettings::parse("30:1500k,300k").unwrap();
        let here = Environment {
            cpus: 2,
            udp_length: Some(1472),
        };
        let options = AppOptions {
            frames: Some(video),
            ..AppOptions::default()
        };
        let plan = PATTERN.plan(&options).unwrap();
        let request = |test: &PlannedTest| TestRequest {
            parallel: test.flows,
            ..TestRequest::new(TestKind::Stream(test.stream.clone()))
        };
        let config = TestConfig::resolve(&request(&plan.test), &here).unwrap();
        assert_eq!(config.direction, Direction::Bidir);
        assert_eq!(config.parallel, 3);
        assert_eq!(config.video_of(Direction::Forward), Some(video));
        assert_eq!(config.video_of(Direction::Reverse), Some(video));
        assert_eq!(
            config.qoo.map(|q| q.name),
            Some("interactive video".to_string())
        );
        let calls = plan.beside.as_ref().unwrap();
        let config = TestConfig::resolve(&request(calls), &here).unwrap();
        let call = options.call().unwrap();
        assert_eq!(
            (config.direction, config.call, config.parallel),
            (Direction::Bidir, Some(call), 3)
        );
        for refused in [0, 1, 33] {
            let err = Conference::checked(refused, call, video).unwrap_err();
            assert!(err.contains(&format!("'{refused}'")), "{err}");
            let asked = AppOptions {
                participants: Some(refused),
                ..AppOptions::default()
            };
            assert!(PATTERN
                .plan(&asked)
                .unwrap_err()
                .contains("'--participants'"));
        }
    }
}
