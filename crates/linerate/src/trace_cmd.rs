//! `linerate trace HOST`: which way the packets go (linerate_trace), its result printed,
//! kept and shown as every other test's.

use crate::cli::TraceArgs;
use crate::failure::{CommandResult, Failure};
use crate::Globals;
use linerate_campaign::{cancel, sink};
use linerate_model::clock::UnixTime;
use linerate_report::document::Document;
use linerate_report::units::Scale;
use linerate_trace::net::{self, Protocol, TraceError};
use linerate_trace::prober::Plan;
use std::io::IsTerminal;
use std::net::IpAddr;

/// HOST as an address of the family asked (`-4`, `-6`, `--bind`'s), else the first the
/// resolver gives.
fn resolve(target: &str, args: &TraceArgs) -> Result<IpAddr, Failure> {
    use linerate_campaign::test::{resolve_host_as, Family};
    let bad =
        |why: String| Failure::Usage(format!("invalid value '{target}' for '<TARGET>': {why}"));
    let family =
        Family::asked(args.ipv4, args.ipv6, args.source.bind, Some(target)).map_err(bad)?;
    let addr = resolve_host_as(target, 0, family).map_err(|e| bad(format!("{e:#}")))?;
    Ok(addr.ip())
}

fn options(args: &TraceArgs) -> Result<net::Options, Failure> {
    if args.first_hop > args.max_hops {
        return Err(Failure::Usage(format!(
            "invalid value '{}' for '--first-hop': beyond --max-hops {}",
            args.first_hop, args.max_hops
        )));
    }
    let protocol = if args.tcp {
        Protocol::Tcp
    } else if args.icmp {
        Protocol::Icmp
    } else {
        Protocol::Udp
    };
    if protocol == Protocol::Icmp && args.port.is_some() {
        return Err(Failure::Usage(
            "--port is for UDP and TCP probes; ICMP echo has none".into(),
        ));
    }
    let port = args.port.unwrap_or(protocol.default_port());
    Ok(net::Options {
        target: resolve(&args.target, args)?,
        protocol,
        port,
        bind: args.source.bind,
        device: args.source.bind_dev.clone(),
        source_port: None,
        mtu: args.mtu,
        plan: Plan {
            flows: args.parallel,
            queries: args
                .queries
                .unwrap_or(if args.parallel == 1 { 3 } else { 1 }),
            first_ttl: args.first_hop,
            max_ttl: args.max_hops,
            gap_ns: (args.gap * 1e9) as u64,
            wait_ns: (args.wait * 1e9) as u64,
        },
    })
}

pub fn run(args: &TraceArgs, globals: &Globals) -> CommandResult {
    let options = options(args)?;
    let store = globals.storage.open_for_run()?;
    let stop = cancel::on_signals()?;
    let raw_needed = |e: TraceError| match e {
        // No privilege is the user's to fix: one line, exit 2.
        TraceError::NeedsRaw { .. } => anyhow::Error::from(Failure::Usage(e.to_string())),
        other => anyhow::Error::from(other),
    };
    let opened = net::open(&options).map_err(raw_needed)?;
    if !args.print.json || std::io::stderr().is_terminal() {
        eprintln!(
            "linerate trace: {} ({}), {} probes, {} flow(s), up to {} hops",
            args.target,
            options.target,
            options.protocol.name().to_uppercase(),
            options.plan.flows,
            options.plan.max_ttl
        );
    }
    let started_at = UnixTime::now().seconds();
    let traced = net::trace(opened, &options, &stop).map_err(raw_needed)?;
    let mut report = linerate_trace::report(&args.target, &options, &traced, started_at);
    report.host = Some(linerate_hostinfo::host_facts());
    let document = Document::Trace(Box::new(report));
    let text = sink::TextSink::new(std::io::stdout(), Scale::Adaptive);
    sink::standard(args.print.json, text, store).finish_document(&document)?;
    Ok(())
}
