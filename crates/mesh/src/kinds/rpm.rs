//! `run = "rpm"`: responsiveness under working conditions: the source's agent runs
//! `linerate rpm` against the destination's, downloading and uploading over HTTP/2.

use super::{Context, JobPlan, JobSite, Kind, TestKind, Transport};
use crate::model::DEFAULT_RPM_LEG_SECONDS;
use crate::reading::{MeshError, Reader, TestTable};
use linerate_model::measure::{Headline, Measure};
use std::time::Duration;

/// An RPM test's time beyond its two directions: the configuration, the idle phase.
pub const RPM_SETUP_S: f64 = 5.0;

#[derive(Debug, Clone, PartialEq)]
pub struct Rpm {
    /// Each direction's time limit.
    pub leg_s: f64,
    /// Over TLS, the certificate pinned to the one the destination's agent announced.
    pub tls: bool,
    /// Loading connections at most, each direction.
    pub max_connections: u32,
}

impl Kind for Rpm {
    fn run(&self) -> &'static str {
        "rpm"
    }

    fn transport(&self) -> Transport {
        Transport::Tcp
    }

    fn measure(&self) -> Measure {
        Measure::Responsiveness
    }

    fn headline(&self) -> Headline {
        Headline::Responsiveness
    }

    fn exclusive_by_default(&self) -> bool {
        true
    }

    fn plan(&self, site: &JobSite) -> JobPlan {
        JobPlan::Rpm {
            remote: site.dst.address.clone(),
            leg: Duration::from_secs_f64(self.leg_s),
            tls: self.tls,
            max_connections: self.max_connections,
        }
    }
}

/// An RPM test's options; its `duration` is each direction's limit.
pub(super) fn read(
    reader: &Reader,
    table: &mut TestTable,
    _: &Context,
) -> Result<(TestKind, f64), MeshError> {
    table.refuse(
        reader,
        "parallel",
        "'parallel' is not an option of run = \"rpm\" (max_connections bounds its loads)",
    )?;
    let max_connections = match table.take::<u32>(reader, "max_connections")? {
        Some(n) if (1..=64).contains(n.get_ref()) => *n.get_ref(),
        Some(n) => {
            return Err(reader.at(
                &n,
                format!("max_connections {} must be between 1 and 64", n.get_ref()),
            ))
        }
        None => 16,
    };
    let leg_s = table.seconds_at_least(
        reader,
        "duration",
        (
            2.0,
            "an RPM test's duration (each direction's limit) must be at least 2 s",
        ),
        DEFAULT_RPM_LEG_SECONDS,
    )?;
    let tls = table
        .take::<bool>(reader, "tls")?
        .is_none_or(|t| *t.get_ref());
    let kind = TestKind::Rpm(Rpm {
        leg_s,
        tls,
        max_connections,
    });
    // Both directions and the set-up: what the schedule allows for a job.
    Ok((kind, 2.0 * leg_s + RPM_SETUP_S))
}
