//! `--pattern game`: the client's inputs to the far end and its state back each tick, both
//! ways at once, in datagrams of [`GAME_DATAGRAM`] so a tick's state goes as a burst;
//! counted as video's frames are (a tick's update is a frame).

use super::{AppOption, AppOptions, Pattern, Plan};
use crate::video::{VideoSettings, GAME_DATAGRAM, GAME_INPUTS, GAME_STATE};
use crate::{Direction, StreamRequest, StreamTransport, VideoStream};

pub(super) const PATTERN: Pattern = Pattern {
    name: "game",
    about: "inputs out and the state back each tick, counted as video's frames",
    example: "game --state 128:1m,300k",
    reads: &[AppOption::Inputs, AppOption::State, AppOption::Qoo],
    plan,
};

fn plan(options: &AppOptions) -> Result<Plan, String> {
    let or_default = |given: Option<VideoSettings>, default| {
        given
            .unwrap_or_else(|| VideoSettings::parse(default).expect("a game's defaults read"))
            .checked()
    };
    let inputs = or_default(options.inputs, GAME_INPUTS).map_err(|e| format!("--inputs: {e}"))?;
    let state = or_default(options.state, GAME_STATE).map_err(|e| format!("--state: {e}"))?;
    Ok(Plan::one(StreamRequest {
        direction: Direction::Bidir,
        rate_bps: None,
        transport: StreamTransport::Video(VideoStream {
            length: Some(GAME_DATAGRAM),
            back: Some(state),
            qoo: options.qoo.clone(),
            ..VideoStream::of(inputs)
        }),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Environment, TestConfig, TestKind, TestRequest};

    /// A game resolves to both ways at once, the client's inputs forward and the server's
    /// state back, in 600-byte datagrams, the larger way's load the rate a server weighs.
    #[test]
    fn a_game_is_inputs_out_and_state_back() {
        let inputs = VideoSettings::parse(GAME_INPUTS).unwrap();
        let state = VideoSettings::parse(GAME_STATE).unwrap();
        let here = Environment {
            cpus: 2,
            udp_length: Some(1472),
        };
        let plan = PATTERN.plan(&AppOptions::default()).unwrap();
        let request = TestRequest::new(TestKind::Stream(plan.test.stream));
        let config = TestConfig::resolve(&request, &here).unwrap();
        assert_eq!(config.direction, Direction::Bidir);
        assert_eq!(config.length, 600);
        assert_eq!(config.video_of(Direction::Forward), Some(inputs));
        assert_eq!(config.video_of(Direction::Reverse), Some(state));
        assert_eq!(config.rate_bps, Some(614_400));
        assert!((inputs.mean_frame_bytes() - 120.0).abs() < 1e-9);
        assert!((state.mean_frame_bytes() - 1_200.0).abs() < 1e-9);
        // The state given replaces the default one way only.
        let faster = VideoSettings::parse("128:1m,300k").unwrap();
        let options = AppOptions {
            state: Some(faster),
            ..AppOptions::default()
        };
        let plan = PATTERN.plan(&options).unwrap();
        let config =
            TestConfig::resolve(&TestRequest::new(TestKind::Stream(plan.test.stream)), &here)
                .unwrap();
        assert_eq!(config.video_of(Direction::Forward), Some(inputs));
        assert_eq!(config.video_of(Direction::Reverse), Some(faster));
    }
}
