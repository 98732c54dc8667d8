//! `run = "rr"`: request/response transactions over one connection, one at a time;
//! `crr` shares its options (its reader is here).

use super::{profile_job, Context, JobPlan, JobSite, Kind, TestKind, Transport};
use crate::model::DEFAULT_TEST_SECONDS;
use crate::reading::{read_size, transactions_per_second, MeshError, Reader, TestTable};
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
    table: &mut TestTable,
    context: &Context,
) -> Result<(TestKind, f64), MeshError> {
    let (request, response, per_second) = read_transactions(reader, table, context, "rr")?;
    let kind = TestKind::Rr(Rr {
        protocol: Transport::Tcp,
        request,
        response,
        per_second,
    });
    Ok((kind, table.duration(reader, DEFAULT_TEST_SECONDS)?))
}

/// An rr or crr test's options (`run`): request, response and rate.
pub(super) fn read_transactions(
    reader: &Reader,
    table: &mut TestTable,
    context: &Context,
    run: &str,
) -> Result<(u64, u64, Option<f64>), MeshError> {
    let protocol = table.take_transport(reader)?;
    if *protocol.get_ref() == Transport::Udp {
        return Err(reader.at(
            &protocol,
            format!("test '{}': {run} over udp does not run in a mesh yet (a lost datagram would hold its thread to the end of the test); use tcp", context.name),
        ));
    }
    let per_second = match table.take::<String>(reader, "rate")? {
        Some(r) => Some(transactions_per_second(r.get_ref()).ok_or_else(|| {
            reader.at(
                &r,
                format!(
                    "rate '{}' is not transactions per second like \"10/s\" (from 0.01 to 1000000)",
                    r.get_ref()
                ),
            )
        })?),
        None => None,
    };
    let (request, response) = (
        read_size(reader, &table.take(reader, "request")?, "request", 1)?,
        read_size(reader, &table.take(reader, "response")?, "response", 1)?,
    );
    Ok((request, response, per_second))
}
