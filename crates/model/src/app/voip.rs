//! `--pattern voip`: a call, a codec frame each way every 20 ms, both ways at once, each
//! way scored by the E-model (and against `--qoo` where given).

use super::{AppOption, AppOptions, Pattern, Plan};
use crate::{CallStream, Direction, StreamRequest, StreamTransport};

pub(super) const PATTERN: Pattern = Pattern {
    name: "voip",
    about: "a codec frame each way every 20 ms, scored by ITU-T G.107's E-model",
    example: "voip",
    reads: &[AppOption::Codec, AppOption::JitterBuffer, AppOption::Qoo],
    plan,
};

fn plan(options: &AppOptions) -> Result<Plan, String> {
    Ok(Plan::one(StreamRequest {
        direction: Direction::Bidir,
        rate_bps: None,
        transport: StreamTransport::Call(CallStream {
            settings: options.call()?,
            qoo: options.qoo.clone(),
        }),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{Codec, JitterBuffer};
    use crate::qoo::Requirement;
    use crate::{Environment, TestConfig, TestKind, TestRequest};

    /// A call is both ways at once with the codec and buffer asked, its requirement kept
    /// in the config as a video's is; a buffer of an hour is refused with its value.
    #[test]
    fn a_call_is_both_ways_with_the_codec_and_buffer_asked() {
        let here = Environment {
            cpus: 2,
            udp_length: Some(1472),
        };
        let given = Requirement::parse("p99=100ms/300ms,loss=1%/5%").unwrap();
        let options = AppOptions {
            codec: Some(Codec::G729a),
            jitter_buffer: Some(JitterBuffer::Adaptive { most_ms: 300 }),
            qoo: Some(given.clone()),
            ..AppOptions::default()
        };
        let plan = PATTERN.plan(&options).unwrap();
        let config = TestConfig::resolve(
            &TestRequest::new(TestKind::Stream(plan.test.stream.clone())),
            &here,
        )
        .unwrap();
        assert_eq!(config.direction, Direction::Bidir);
        assert_eq!(config.qoo, Some(given));
        let call = config.call.unwrap();
        assert_eq!(
            (call.codec, call.jitter_buffer_ms, call.adaptive),
            (Codec::G729a, 300, true)
        );
        let defaults = PATTERN.plan(&AppOptions::default()).unwrap();
        let call = defaults.only_call().unwrap();
        assert_eq!(
            (call.settings.codec, call.settings.buffer(), &call.qoo),
            (Codec::G711, JitterBuffer::Fixed { ms: 60 }, &None)
        );
        let hour = AppOptions {
            jitter_buffer: Some(JitterBuffer::Fixed { ms: 3_600_000 }),
            ..AppOptions::default()
        };
        assert!(PATTERN.plan(&hour).unwrap_err().contains("'3600000ms'"));
    }
}
