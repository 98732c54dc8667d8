//! `--pattern cloud-gaming`: a game played on a server far away (GeForce NOW's, Xbox Cloud
//! Gaming's kind): the client's inputs go out every tick and the game's picture comes back
//! as video frames, both ways at once. Each way is counted as video's frames are (an
//! input is a frame of its own) and scored as a game's updates (`qoo::Requirement::game`):
//! what a player feels is the time from a press to the frame that shows it, and a frame
//! late is a stutter.

use super::{AppOption, AppOptions, Pattern, Plan};
use crate::video::VideoSettings;
use crate::{Direction, StreamRequest, StreamTransport, VideoStream};

pub(super) const PATTERN: Pattern = Pattern {
    name: "cloud-gaming",
    about: "inputs out each tick, the game's picture back as video frames, scored as a game",
    example: "cloud-gaming --isochronous 120:35m,8m",
    reads: &[
        AppOption::Inputs,
        AppOption::Frames,
        AppOption::KeyFrames,
        AppOption::Qoo,
    ],
    plan,
};

/// A controller's inputs where `--inputs` gives none: polled 125 times a second, about
/// 100 bytes each.
pub const DEFAULT_INPUTS: &str = "125:100k,20k";

/// The picture where `--isochronous` gives none: 1080p at 60 frames a second, 20 Mbit/s
/// spread by 5 (the order cloud gaming services stream at).
pub const DEFAULT_PICTURE: &str = "60:20m,5m";

fn plan(options: &AppOptions) -> Result<Plan, String> {
    let inputs = options
        .inputs
        .unwrap_or_else(|| VideoSettings::parse(DEFAULT_INPUTS).expect("the inputs read"))
        .checked()
        .map_err(|e| format!("--inputs: {e}"))?;
    let picture = options.frames_or(DEFAULT_PICTURE)?;
    Ok(Plan::one(StreamRequest {
        direction: Direction::Bidir,
        rate_bps: None,
        transport: StreamTransport::Video(VideoStream {
            back: Some(picture),
            qoo: options.qoo.clone(),
            ..VideoStream::of(inputs)
        }),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Environment, TestConfig, TestKind, TestRequest};

    /// Cloud gaming resolves to both ways at once: the inputs out, the picture back, in
    /// datagrams of the path's size (a frame of 40 kB is a burst of them), the picture's
    /// load the rate a server weighs; a picture given replaces the default one way only.
    #[test]
    fn cloud_gaming_is_inputs_out_and_the_picture_back() {
        let here = Environment {
            cpus: 2,
            udp_length: Some(1472),
        };
        let resolve = |options: &AppOptions| {
            let plan = PATTERN.plan(options).unwrap();
            assert_eq!((plan.test.flows, plan.beside), (1, None));
            TestConfig::resolve(&TestRequest::new(TestKind::Stream(plan.test.stream)), &here)
                .unwrap()
        };
        let inputs = VideoSettings::parse(DEFAULT_INPUTS).unwrap();
        let config = resolve(&AppOptions::default());
        assert_eq!(config.direction, Direction::Bidir);
        assert_eq!(config.length, 1472);
        assert_eq!(config.video_of(Direction::Forward), Some(inputs));
        assert_eq!(
            config.video_of(Direction::Reverse),
            Some(VideoSettings::parse(DEFAULT_PICTURE).unwrap())
        );
        assert_eq!(config.rate_bps, Some(20_000_000));
        assert!((inputs.mean_frame_bytes() - 100.0).abs() < 1e-9);
        let sharper = VideoSettings::parse("120:35m,8m").unwrap();
        let config = resolve(&AppOptions {
            frames: Some(sharper),
            ..AppOptions::default()
        });
        assert_eq!(config.video_of(Direction::Forward), Some(inputs));
        assert_eq!(config.video_of(Direction::Reverse), Some(sharper));
        let calls = AppOptions {
            codec: Some(crate::call::Codec::G711),
            ..AppOptions::default()
        };
        assert!(PATTERN.plan(&calls).unwrap_err().contains("'--codec'"));
    }
}
