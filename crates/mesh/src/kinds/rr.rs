//! `run = "rr"`: request/response transactions over one connection, one at a time;
//! `crr` shares its options (its reader is here).

use super::{profile_job, Context, JobPlan, JobSite, Kind, TestKind, Transport};
use crate::reading::{
    not_an_option, read_size, transactions_per_second, MeshError, RawTest, Reader,
};
use linerate_model::measure::{Headline, Measure};
use linerate_profile::Action as Op;

#[derive(Debug, Clone, PartialEq)]
pub struct Rr {
    pub protocol: Transport,
    pub request: u64,
    pub response: u64,
    /// Transactions per second (a probe at a low rate); `None`: back to back.
    pub per_second: Option<f64>,
}

impl Kind for Rr {
    fn run(&self) -> &'static str {
        "rr"
    }

    fn transport(&self) -> Transport {
        self.protocol
    }

    fn measure(&self) -> Measure {
        Measure::Latency
    }

    fn headline(&self) -> Headline {
        Headline::Transaction {
            index: 1,
            label: "rtt",
        }
    }

    fn marks_packets(&self) -> bool {
        true
    }

    fn plan(&self, site: &JobSite) -> JobPlan {
        profile_job(site, self.transport(), 1, true, |parts| {
            vec![
                parts.once(parts.connect.clone()),
                parts.timed(
                    self.per_second,
                    vec![
                        Op::Write(parts.transfer(self.request, None)),
                        Op::Read(parts.transfer(self.response, None)),
                    ],
                ),
                parts.once(Op::Disconnect),
            ]
        })
    }
}

pub(super) fn read(
    reader: &Reader,
    raw: &RawTest,
    context: &Context,
) -> Result<(TestKind, f64), MeshError> {
    let (request, response, per_second) = read_transactions(reader, raw, context, "rr")?;
    let kind = TestKind::Rr(Rr {
        protocol: context.protocol,
        request,
        response,
        per_second,
    });
    Ok((kind, context.seconds))
}

/// An rr or crr test's options (`run`): request, response and rate.
pub(super) fn read_transactions(
    reader: &Reader,
    raw: &RawTest,
    context: &Context,
    run: &str,
) -> Result<(u64, u64, Option<f64>), MeshError> {
    let (protocol, name) = (context.protocol, context.name);
    not_an_option(reader, raw.size.as_ref(), "size", run)?;
    if protocol == Transport::Udp {
        return Err(reader.at(
            raw.protocol.as_ref().expect("udp was given"),
            format!("test '{name}': {run} over udp does not run in a mesh yet (a lost datagram would hold its thread to the end of the test); use tcp"),
        ));
    }
    if let Some(p) = &raw.parallel {
        return Err(reader.at(p, format!("'parallel' is not an option of run = \"{run}\"")));
    }
    let per_second = match &raw.rate {
        Some(r) => Some(transactions_per_second(r.get_ref()).ok_or_else(|| {
            reader.at(
                r,
                format!(
                    "rate '{}' is not transactions per second like \"10/s\" (from 0.01 to 1000000)",
                    r.get_ref()
                ),
            )
        })?),
        None => None,
    };
    let (request, response) = (
        read_size(reader, &raw.request, "request", 1)?,
        read_size(reader, &raw.response, "response", 1)?,
    );
    Ok((request, response, per_second))
}
