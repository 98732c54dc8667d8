//! `linerate trace`: which way the packets go (docs/trace.md). Paris-style: every probe of
//! a flow keeps one five-tuple, so a load balancer that hashes it sends them all one way;
//! `-P N` flows with different source ports find the equal-cost branches a multi-flow test
//! takes. UDP probes need no privilege; TCP SYN and ICMP echo probes need CAP_NET_RAW.
//!
//! [`prober`] decides, sans-IO, what to send when and what an answer means; [`net`] carries
//! it over sockets; [`wire`] builds and parses the packets.

pub mod net;
pub mod prober;
mod sys;
pub mod wire;

use linerate_report::trace::{TraceReport, TRACE};

/// The report of a finished trace of `target` (as the user named it).
pub fn report(
    target: &str,
    options: &net::Options,
    traced: &net::Traced,
    started_at: f64,
) -> TraceReport {
    let paths = traced.prober.paths(&traced.source_ports);
    let (hops, distinct_paths) = TraceReport::merge(&paths);
    let reached = paths.iter().all(|p| p.reached_ttl.is_some());
    let mut warnings = traced.warnings.clone();
    if !reached {
        warnings.push(format!(
            "{} of {} flows did not reach {} within {} hops: a firewall that drops the probes, \
             or a destination that rate-limits its answers",
            paths.iter().filter(|p| p.reached_ttl.is_none()).count(),
            paths.len(),
            options.target,
            options.plan.max_ttl
        ));
    }
    TraceReport {
        test: TRACE.into(),
        started_at,
        target: target.into(),
        address: options.target.to_string(),
        protocol: options.protocol.name().into(),
        port: (options.protocol != net::Protocol::Icmp).then_some(options.port),
        flows: options.plan.flows,
        queries: options.plan.queries,
        first_ttl: options.plan.first_ttl,
        max_ttl: options.plan.max_ttl,
        duration_s: traced.elapsed_s,
        sent: traced.prober.sent_count(),
        answered: traced.prober.answered_count(),
        unmatched: traced.prober.unmatched(),
        paths,
        hops,
        reached,
        distinct_paths,
        warnings,
        host: None,
    }
}
