//! The application patterns of `linerate app` (docs/app.md) as the streams they are: which
//! way each goes and what it carries. A pattern is data; the data plane, the receivers'
//! counts and the scores are the call's (`crate::call`) and video's (`crate::video`).

use crate::call::CallSettings;
use crate::qoo::Requirement;
use crate::video::{KeyFrames, VideoSettings, GAME_DATAGRAM};
use crate::{CallStream, Direction, StreamRequest, StreamTransport, VideoStream};

/// An application's traffic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pattern {
    /// A call: a codec frame each way every 20 ms, both ways at once.
    Voip(CallSettings),
    /// Video frames from the far end: what a viewer gets.
    Video(VideoSettings),
    /// A game: the client's inputs to the far end and its state back each tick, both ways
    /// at once, in datagrams of [`GAME_DATAGRAM`] so a tick's state goes as a burst.
    Game {
        inputs: VideoSettings,
        state: VideoSettings,
    },
}

impl Pattern {
    /// A video stream of `frames`, with `key_frames` where asked.
    pub fn video(frames: VideoSettings, key_frames: Option<KeyFrames>) -> Pattern {
        Pattern::Video(VideoSettings {
            key_frames,
            ..frames
        })
    }

    /// A game of `inputs` out and `state` back.
    pub fn game(inputs: VideoSettings, state: VideoSettings) -> Pattern {
        Pattern::Game { inputs, state }
    }

    /// The stream the pattern is, its ways scored against `qoo` where given (a video's and
    /// a game's frames, a call's datagrams; a call is scored by the E-model besides).
    pub fn stream_scored(self, qoo: Option<Requirement>) -> Result<StreamRequest, String> {
        let mut stream = self.stream();
        match (&mut stream.transport, qoo) {
            (_, None) => {}
            (StreamTransport::Video(video), given) => video.qoo = given,
            (StreamTransport::Call(call), given) => call.qoo = given,
            (_, Some(_)) => {
                return Err("'--qoo' scores an application pattern's ways".into());
            }
        }
        Ok(stream)
    }

    /// The stream the pattern is.
    pub fn stream(self) -> StreamRequest {
        let (direction, transport) = match self {
            Pattern::Voip(call) => (
                Direction::Bidir,
                StreamTransport::Call(CallStream::of(call)),
            ),
            Pattern::Video(frames) => (
                Direction::Reverse,
                StreamTransport::Video(VideoStream::of(frames)),
            ),
            Pattern::Game { inputs, state } => (
                Direction::Bidir,
                StreamTransport::Video(VideoStream {
                    length: Some(GAME_DATAGRAM),
                    back: Some(state),
                    ..VideoStream::of(inputs)
                }),
            ),
        };
        StreamRequest {
            direction,
            rate_bps: None,
            transport,
        }
    }
}

/// A conference of `participants`, each sending its voice and its video to every other
/// (a call of full mesh, as WebRTC's peer-to-peer calls are): seen from one of them, a
/// call and a video stream out to each of the others and one back from each. Over two
/// hosts, this host is one participant and the far end holds the others: two tests at
/// once, the calls beside the video, each with a flow each way per other participant.
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

    /// A game resolves to both ways at once, the client's inputs forward and the server's
    /// state back, in 600-byte datagrams, the larger way's load the rate a server weighs;
    /// a video resolves to the far end sending.
    #[test]
    fn a_game_is_inputs_out_and_state_back() {
        let inputs = VideoSettings::parse(crate::video::GAME_INPUTS).unwrap();
        let state = VideoSettings::parse(crate::video::GAME_STATE).unwrap();
        let here = Environment {
            cpus: 2,
            udp_length: Some(1472),
        };
        let request = TestRequest::new(TestKind::Stream(Pattern::Game { inputs, state }.stream()));
        let config = TestConfig::resolve(&request, &here).unwrap();
        assert_eq!(config.direction, Direction::Bidir);
        assert_eq!(config.length, 600);
        assert_eq!(config.video_of(Direction::Forward), Some(inputs));
        assert_eq!(config.video_of(Direction::Reverse), Some(state));
        assert_eq!(config.rate_bps, Some(614_400));
        assert!((inputs.mean_frame_bytes() - 120.0).abs() < 1e-9);
        assert!((state.mean_frame_bytes() - 1_200.0).abs() < 1e-9);
        // A call takes a requirement of its own, kept in the config as a video's is.
        let given = Requirement::parse("p99=100ms/300ms,loss=1%/5%").unwrap();
        let call = crate::call::CallSettings::checked(
            crate::call::Codec::parse("g711").unwrap(),
            crate::call::JitterBuffer::Fixed { ms: 60 },
        )
        .unwrap();
        let scored = Pattern::Voip(call)
            .stream_scored(Some(given.clone()))
            .unwrap();
        let config =
            TestConfig::resolve(&TestRequest::new(TestKind::Stream(scored)), &here).unwrap();
        assert_eq!(config.qoo, Some(given));
        assert_eq!(config.call, Some(call));
        let video = Pattern::Video(inputs).stream();
        assert_eq!(video.direction, Direction::Reverse);
        let config =
            TestConfig::resolve(&TestRequest::new(TestKind::Stream(video)), &here).unwrap();
        assert_eq!(config.video_of(Direction::Reverse), Some(inputs));
        assert_eq!(config.length, 1472);
    }

    /// A conference is its video both ways and its calls both ways, a flow each way per
    /// other participant; it has 2 to 32 participants.
    #[test]
    fn a_conference_is_video_and_calls_both_ways_to_each_other_participant() {
        let video = VideoSettings::parse("30:1500k,300k").unwrap();
        let call = crate::call::CallSettings::checked(
            crate::call::Codec::parse("g711").unwrap(),
            crate::call::JitterBuffer::Fixed { ms: 60 },
        )
        .unwrap();
        let here = Environment {
            cpus: 2,
            udp_length: Some(1472),
        };
        let conference = Conference::checked(4, call, video).unwrap();
        assert_eq!(conference.others(), 3);
        let request = TestRequest {
            parallel: conference.others(),
            ..TestRequest::new(TestKind::Stream(conference.video_stream()))
        };
        let config = TestConfig::resolve(&request, &here).unwrap();
        assert_eq!(config.direction, Direction::Bidir);
        assert_eq!(config.parallel, 3);
        assert_eq!(config.video_of(Direction::Forward), Some(video));
        assert_eq!(config.video_of(Direction::Reverse), Some(video));
        let calls = TestRequest {
            parallel: conference.others(),
            ..TestRequest::new(TestKind::Stream(conference.call_stream(None)))
        };
        let config = TestConfig::resolve(&calls, &here).unwrap();
        assert_eq!(
            (config.direction, config.call),
            (Direction::Bidir, Some(call))
        );
        for refused in [0, 1, 33] {
            let err = Conference::checked(refused, call, video).unwrap_err();
            assert!(err.contains(&format!("'{refused}'")), "{err}");
        }
    }
}
