//! `run = "stream"`: bulk data from the source to the destination, TCP or paced UDP.

use super::{profile_job, Context, JobPlan, JobSite, Kind, TestKind, Transport};
use crate::model::DEFAULT_TEST_SECONDS;
use crate::reading::{read_size, MeshError, Reader, TestTable};
use linerate_model::measure::{Headline, Measure};
use linerate_model::units::parse_rate;
use linerate_profile::{Action as Op, Protocol};

#[derive(Debug, Clone, PartialEq)]
pub struct Stream {
    pub protocol: Transport,
    pub parallel: u32,
    /// Per flow; required over UDP.
    pub rate_bps: Option<u64>,
    /// Bytes per write (TCP) or datagram (UDP).
    pub size: u64,
}

impl Kind for Stream {
    fn run(&self) -> &'static str {
        "stream"
    }

    fn transport(&self) -> Transport {
        self.protocol
    }

    fn measure(&self) -> Measure {
        Measure::Goodput
    }

    fn headline(&self) -> Headline {
        Headline::Goodput
    }

    fn exclusive_by_default(&self) -> bool {
        true
    }

    fn marks_packets(&self) -> bool {
        true
    }

    fn plan(&self, site: &JobSite) -> JobPlan {
        let per_second = self
            .rate_bps
            .map(|bps| bps as f64 / (self.size as f64 * 8.0));
        profile_job(site, self.transport(), self.parallel, false, |parts| {
            let send = match parts.protocol {
                Protocol::Udp => Op::Sendto(parts.transfer(self.size, per_second)),
                _ => Op::Write(parts.transfer(self.size, per_second)),
            };
            vec![
                parts.once(parts.connect.clone()),
                parts.timed(None, vec![send]),
                parts.once(Op::Disconnect),
            ]
        })
    }
}

/// A stream test's options.
pub(super) fn read(
    reader: &Reader,
    table: &mut TestTable,
    context: &Context,
) -> Result<(TestKind, f64), MeshError> {
    let protocol = *table.take_transport(reader)?.get_ref();
    let seconds = table.duration(reader, DEFAULT_TEST_SECONDS)?;
    let rate_bps = match table.take::<String>(reader, "rate")? {
        Some(r) => Some(
            parse_rate(r.get_ref())
                .ok()
                .filter(|&bps| bps > 0)
                .ok_or_else(|| {
                    reader.at(
                        &r,
                        format!("rate '{}' is not a rate like 100M", r.get_ref()),
                    )
                })?,
        ),
        None => None,
    };
    if protocol == Transport::Udp && rate_bps.is_none() {
        return Err(reader.at(
            context.run,
            format!("test '{}': a UDP stream needs a rate (rate = \"100M\"): unpaced datagrams measure only what the sender's host drops", context.name),
        ));
    }
    let parallel = match table.take::<u32>(reader, "parallel")? {
        Some(p) if (1..=64).contains(p.get_ref()) => *p.get_ref(),
        Some(p) => {
            return Err(reader.at(
                &p,
                format!("parallel {} must be between 1 and 64", p.get_ref()),
            ))
        }
        None => 1,
    };
    let default_size = match protocol {
        Transport::Tcp => linerate_model::DEFAULT_TCP_LENGTH,
        Transport::Udp => 1400,
    };
    let given = table.take::<String>(reader, "size")?;
    let size = read_size(reader, &given, "size", default_size)?;
    if protocol == Transport::Udp && size > 65_507 {
        let at = given.as_ref().expect("a UDP size over 65507 was given");
        return Err(reader.at(at, format!("size {size} does not fit one UDP datagram")));
    }
    let kind = TestKind::Stream(Stream {
        protocol,
        parallel,
        rate_bps,
        size,
    });
    Ok((kind, seconds))
}
