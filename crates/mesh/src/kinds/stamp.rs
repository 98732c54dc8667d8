//! `run = "stamp"`: STAMP probes (RFC 8762) from the source's agent to the
//! destination's reflector (`serve --stamp`, or a host that only reflects), all the
//! time: each job is one report window, and the next starts as it ends.

use super::{reflector_of, Context, JobPlan, JobSite, Kind, TestKind, Transport};
use crate::model::DEFAULT_STAMP_REPORT_SECONDS;
use crate::reading::{read_dscp, transactions_per_second, MeshError, Reader, TestTable};
use linerate_model::measure::{Headline, Measure};
use linerate_model::units::parse_size;

/// STAMP's port (RFC 8762 §4.1), where a host's reflector listens unless it says.
pub const DEFAULT_STAMP_PORT: u16 = 862;
/// The most probes a second a mesh's STAMP test may send to one destination.
pub const MAX_STAMP_RATE: f64 = 10_000.0;

#[derive(Debug, Clone, PartialEq)]
pub struct Stamp {
    /// Probes a second.
    pub rate_pps: f64,
    /// Each probe's UDP payload, octets; `None`: the smallest.
    pub size: Option<u16>,
    /// The probes' DSCP, asked of the answers too.
    pub dscp: Option<u8>,
    /// The reflectors' port where a host's address does not name one.
    pub port: u16,
}

impl Kind for Stamp {
    fn run(&self) -> &'static str {
        "stamp"
    }

    fn runs_all_the_time(&self) -> bool {
        true
    }

    fn transport(&self) -> Transport {
        Transport::Udp
    }

    fn measure(&self) -> Measure {
        Measure::Loss
    }

    fn headline(&self) -> Headline {
        Headline::Loss
    }

    fn address_only(&self) -> bool {
        true
    }

    fn plan(&self, site: &JobSite) -> JobPlan {
        // What the agent's STAMP job reads (drivers' `stamp_job::Spec`).
        JobPlan::Source {
            kind: self.run(),
            spec: serde_json::json!({
                "reflector": reflector_of(site.dst, self.port),
                "window_s": site.seconds,
                "rate": self.rate_pps,
                "size": self.size,
                "dscp": self.dscp,
            }),
        }
    }
}

/// A STAMP test's options: rate (probes a second, default 10/s, at most 10,000/s), size,
/// dscp, port; its report window at least a second.
pub(super) fn read(
    reader: &Reader,
    table: &mut TestTable,
    _: &Context,
) -> Result<(TestKind, f64), MeshError> {
    table.refuse(
        reader,
        "duration",
        "run = \"stamp\" runs all the time: give its window as report = \"1m\", not a duration",
    )?;
    let seconds = table.seconds_at_least(
        reader,
        "report",
        (1.0, "a STAMP report window must be at least 1 s"),
        DEFAULT_STAMP_REPORT_SECONDS,
    )?;
    let rate_pps = match table.take::<String>(reader, "rate")? {
        Some(r) => transactions_per_second(r.get_ref())
            .filter(|r| (0.1..=MAX_STAMP_RATE).contains(r))
            .ok_or_else(|| {
                reader.at(
                    &r,
                    format!(
                        "rate '{}' is not probes a second like \"10/s\" (from 0.1 to {MAX_STAMP_RATE})",
                        r.get_ref()
                    ),
                )
            })?,
        None => 10.0,
    };
    let size = match table.take::<String>(reader, "size")? {
        Some(v) => Some(
            parse_size(v.get_ref())
                .ok()
                .filter(|n| (44..=9000).contains(n))
                .map(|n| n as u16)
                .ok_or_else(|| {
                    reader.at(
                        &v,
                        format!("size '{}' must be from 44 to 9000 octets", v.get_ref()),
                    )
                })?,
        ),
        None => None,
    };
    let dscp = table
        .take::<String>(reader, "dscp")?
        .map(|d| read_dscp(reader, &d))
        .transpose()?;
    let port = table.take::<u16>(reader, "port")?;
    let kind = TestKind::Stamp(Stamp {
        rate_pps,
        size,
        dscp,
        port: port.map_or(DEFAULT_STAMP_PORT, |p| *p.get_ref()),
    });
    Ok((kind, seconds))
}
