//! `run = "voip"`: a call between every pair (`linerate app --pattern voip`): a codec
//! frame each way every 20 ms, both ways at once, from the source's agent to the
//! destination's server, each way counted where it arrives and scored by the E-model
//! (ITU-T G.107 with G.113's values). The worse way's MOS heads the row; each way's is a
//! series of its own, held to the mesh's `mos_below` over its `mos_for`.

use super::{Context, JobPlan, JobSite, Kind, TestKind, Transport};
use crate::model::DEFAULT_TEST_SECONDS;
use crate::reading::{MeshError, Reader, TestTable};
use linerate_model::call::{CallSettings, Codec, JitterBuffer, DEFAULT_JITTER_BUFFER_MS};
use linerate_model::measure::{Headline, Measure};

#[derive(Debug, Clone, PartialEq)]
pub struct Voip {
    pub call: CallSettings,
}

impl Kind for Voip {
    fn run(&self) -> &'static str {
        "voip"
    }

    fn transport(&self) -> Transport {
        Transport::Udp
    }

    fn measure(&self) -> Measure {
        Measure::Mos
    }

    fn headline(&self) -> Headline {
        Headline::Mos
    }

    fn marks_packets(&self) -> bool {
        true
    }

    fn plan(&self, site: &JobSite) -> JobPlan {
        // What the agent's client job reads (drivers' `client_job::Spec`).
        JobPlan::Source {
            kind: "client",
            spec: serde_json::json!({
                "server": site.dst.address,
                "seconds": site.seconds,
                "test": "call",
                "codec": self.call.codec,
                "jitter_buffer_ms": self.call.jitter_buffer_ms,
                "adaptive": self.call.adaptive,
                "marks": site.marks,
            }),
        }
    }
}

/// A mesh's call is headed, drawn and alerted by its MOS: its codec is one G.113 gives
/// values for (an Opus call, which has none, is refused with the reason).
pub(super) fn scored_codec(name: &str) -> Result<Codec, String> {
    let scored: Vec<String> = Codec::SCORED.iter().map(|c| c.name()).collect();
    match Codec::parse(name) {
        Ok(codec) => match codec.emodel() {
            Ok(_) => Ok(codec),
            Err(why) => Err(format!(
                "codec '{name}' has {why}; a mesh's call is headed and alerted by its MOS: one of {}",
                scored.join(", ")
            )),
        },
        Err(_) => Err(format!(
            "codec '{name}' is not one of {}",
            scored.join(", ")
        )),
    }
}

/// A call's options: its codec (`g711`, `g711-no-plc`, `g729a`) and the receivers'
/// jitter buffer (`"60ms"`, at most a second); its length is the test's duration.
pub(super) fn read(
    reader: &Reader,
    table: &mut TestTable,
    _: &Context,
) -> Result<(TestKind, f64), MeshError> {
    table.refuse(
        reader,
        "parallel",
        "'parallel' is not an option of run = \"voip\": a call is one",
    )?;
    let seconds = table.seconds_at_least(
        reader,
        "duration",
        (1.0, "a call must last at least 1 s"),
        DEFAULT_TEST_SECONDS,
    )?;
    let codec = match table.take::<String>(reader, "codec")? {
        Some(c) => scored_codec(c.get_ref()).map_err(|why| reader.at(&c, why))?,
        None => Codec::G711,
    };
    let buffer = table.take::<String>(reader, "jitter_buffer")?;
    let jitter_buffer = match &buffer {
        Some(j) => JitterBuffer::parse(j.get_ref(), |time| {
            let time = toml::Spanned::new(j.span(), time.to_string());
            Ok((reader.seconds(&time, "jitter_buffer", false)? * 1000.0).round() as u32)
        })?,
        None => JitterBuffer::Fixed {
            ms: DEFAULT_JITTER_BUFFER_MS,
        },
    };
    let call = CallSettings::checked(codec, jitter_buffer).map_err(|_| {
        let at = buffer.as_ref().expect("a buffer out of bounds was given");
        let bounds = match jitter_buffer {
            JitterBuffer::Fixed { .. } => "must be at most 1s",
            JitterBuffer::Adaptive { .. } => "may grow to from 20ms to 1s",
        };
        reader.at(at, format!("jitter_buffer '{}' {bounds}", at.get_ref()))
    })?;
    Ok((TestKind::Voip(Voip { call }), seconds))
}
