//! `run = "trace"`: which way the packets go: a Paris-style trace from the source's
//! agent to the destination's address (any host, one that only reflects too), its hop
//! list kept, and a change from the pair's last trace told.

use super::{address_of, trace_source_port, Context, JobPlan, JobSite, Kind, TestKind, Transport};
use crate::reading::{MeshError, Reader, TestTable};
use linerate_model::measure::{Headline, Measure};
use linerate_model::TraceProbe;

/// A trace's farthest distance when the file does not say (`max_hops`), as traceroute's.
pub const DEFAULT_TRACE_HOPS: u8 = 30;
/// The most flows (source ports) a mesh's trace may send, and the farthest distance.
pub const MAX_TRACE_FLOWS: u16 = 16;
pub const MAX_TRACE_HOPS: u8 = 64;
/// A mesh trace's probes: one every 5 ms (kind to routers that rate-limit their ICMP),
/// each waiting at most a second for its answer.
pub const TRACE_GAP_S: f64 = 0.005;
pub const TRACE_WAIT_S: f64 = 1.0;

#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub probe: TraceProbe,
    /// Flows with different source ports, each kept from one trace to the next.
    pub flows: u16,
    pub max_hops: u8,
    /// The destination port of UDP and TCP probes; `None`: traceroute's (33434 UDP,
    /// 80 TCP).
    pub port: Option<u16>,
    /// Each hop's MTU too (UDP probes, don't-fragment): a narrower link is a change.
    pub mtu: bool,
}

impl Kind for Trace {
    fn run(&self) -> &'static str {
        "trace"
    }

    fn transport(&self) -> Transport {
        match self.probe {
            TraceProbe::Tcp => Transport::Tcp,
            TraceProbe::Udp | TraceProbe::Icmp => Transport::Udp,
        }
    }

    fn protocol_label(&self) -> &'static str {
        self.probe.name()
    }

    fn measure(&self) -> Measure {
        Measure::Hops
    }

    fn headline(&self) -> Headline {
        Headline::Hops
    }

    fn address_only(&self) -> bool {
        true
    }

    fn plan(&self, site: &JobSite) -> JobPlan {
        let (src, dst) = (site.src, site.dst);
        // What the agent's trace job reads (drivers' `trace_job::Spec`).
        JobPlan::Source {
            kind: self.run(),
            spec: serde_json::json!({
                "target": address_of(dst),
                "probe": self.probe,
                "flows": self.flows,
                "max_hops": self.max_hops,
                "port": self.port,
                "mtu": self.mtu,
                "source_port": trace_source_port(site.mesh, site.test, &src.name, &dst.name, self.flows),
            }),
        }
    }
}

/// A trace's options: protocol (udp, tcp or icmp probes), parallel (flows, 1 to 16),
/// max_hops (1 to 64), port.
pub(super) fn read(
    reader: &Reader,
    table: &mut TestTable,
    _: &Context,
) -> Result<(TestKind, f64), MeshError> {
    table.refuse(
        reader,
        "duration",
        "run = \"trace\" ends when its probes are answered: it has no duration",
    )?;
    let probe = match table.take::<String>(reader, "protocol")? {
        None => TraceProbe::Udp,
        Some(p) => match p.get_ref().as_str() {
            "udp" => TraceProbe::Udp,
            "tcp" => TraceProbe::Tcp,
            "icmp" => TraceProbe::Icmp,
            other => {
                return Err(reader.at(&p, format!("protocol '{other}' is not udp, tcp or icmp")))
            }
        },
    };
    let flows = match table.take::<u32>(reader, "parallel")? {
        Some(p) if (1..=u32::from(MAX_TRACE_FLOWS)).contains(p.get_ref()) => *p.get_ref() as u16,
        Some(p) => {
            return Err(reader.at(
                &p,
                format!(
                    "parallel {} must be between 1 and {MAX_TRACE_FLOWS} (the flows a trace sends)",
                    p.get_ref()
                ),
            ))
        }
        None => 1,
    };
    let max_hops = match table.take::<u8>(reader, "max_hops")? {
        Some(h) if (1..=MAX_TRACE_HOPS).contains(h.get_ref()) => *h.get_ref(),
        Some(h) => {
            return Err(reader.at(
                &h,
                format!(
                    "max_hops {} must be between 1 and {MAX_TRACE_HOPS}",
                    h.get_ref()
                ),
            ))
        }
        None => DEFAULT_TRACE_HOPS,
    };
    let port = table.take::<u16>(reader, "port")?;
    if let (TraceProbe::Icmp, Some(p)) = (probe, &port) {
        return Err(reader.at(p, "'port' is for udp and tcp probes; ICMP echo has none"));
    }
    let mtu = table
        .take::<bool>(reader, "mtu")?
        .is_some_and(|m| *m.get_ref());
    let kind = TestKind::Trace(Trace {
        probe,
        flows,
        max_hops,
        port: port.map(|p| *p.get_ref()),
        mtu,
    });
    // Its longest: every probe sent, the last one's wait, a second's set-up.
    let seconds = f64::from(flows) * f64::from(max_hops) * TRACE_GAP_S + TRACE_WAIT_S + 1.0;
    Ok((kind, seconds))
}
