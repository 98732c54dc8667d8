//! `run = "crr"`: a new TCP connection per transaction: connect, request, response,
//! close (its options are rr's).

use super::rr::read_transactions;
use super::{profile_job, Context, JobPlan, JobSite, Kind, TestKind, Transport};
use crate::model::DEFAULT_TEST_SECONDS;
use crate::reading::{MeshError, Reader, TestTable};
use linerate_model::measure::{Headline, Measure};
use linerate_profile::Action as Op;

#[derive(Debug, Clone, PartialEq)]
pub struct Crr {
    pub request: u64,
    pub response: u64,
    pub per_second: Option<f64>,
}

impl Kind for Crr {
    fn run(&self) -> &'static str {
        "crr"
    }

    fn transport(&self) -> Transport {
        Transport::Tcp
    }

    fn measure(&self) -> Measure {
        Measure::Latency
    }

    fn headline(&self) -> Headline {
        Headline::Transaction {
            index: 0,
            label: "connect+rr",
        }
    }

    fn marks_packets(&self) -> bool {
        true
    }

    fn plan(&self, site: &JobSite) -> JobPlan {
        // Each transaction its own connection: the timed transaction holds the connect.
        profile_job(site, self.transport(), 1, true, |parts| {
            vec![parts.timed(
                self.per_second,
                vec![
                    parts.connect.clone(),
                    Op::Write(parts.transfer(self.request, None)),
                    Op::Read(parts.transfer(self.response, None)),
                    Op::Disconnect,
                ],
            )]
        })
    }
}

pub(super) fn read(
    reader: &Reader,
    table: &mut TestTable,
    context: &Context,
) -> Result<(TestKind, f64), MeshError> {
    let (request, response, per_second) = read_transactions(reader, table, context, "crr")?;
    let kind = TestKind::Crr(Crr {
        request,
        response,
        per_second,
    });
    Ok((kind, table.duration(reader, DEFAULT_TEST_SECONDS)?))
}
