//! `linerate sweep`: the flags into a sweep (linerate-campaign's), a row per point as it
//! ends, and one document holding every point's full result.

use crate::cli::{SweepArgs, SweepTest};
use crate::failure::{CommandResult, Failure};
use crate::test_cmd::{check_secure_flags, trust};
use crate::Globals;
use linerate_campaign::sink::{self, Event, Sink, Sinks, SweepBar, TextSink};
use linerate_campaign::sweep::{self, Sweep, SweepSpec};
use linerate_campaign::{cancel, test};
use linerate_report::document::Document;
use linerate_report::stats::RepeatPlan;
use linerate_report::sweep::SweepTable;

/// The sweep the flags ask for.
fn spec(args: &SweepArgs) -> SweepSpec {
    SweepSpec {
        test: match args.test {
            SweepTest::Stream => sweep::SweepTest::Stream,
            SweepTest::Rr => sweep::SweepTest::Rr,
            SweepTest::Crr => sweep::SweepTest::Crr,
        },
        host: args.server.host.clone(),
        source: args.server.source(),
        marks: args.server.marks(),
        port: args.server.port(),
        parallel: args.parallel.clone(),
        window: args.window.clone(),
        length: args.length.clone(),
        request: args.request.clone(),
        response: args.response.clone(),
        outstanding: args.outstanding.clone(),
        rate: args.rate.clone(),
        congestion: args.congestion.clone(),
        udp: args.udp,
        reverse: args.direction.reverse,
        bidir: args.direction.bidir,
        nodelay: args.nodelay,
        threads: args.threads,
        time_s: args.time,
        omit_s: args.omit,
        connect_timeout_s: args.server.connect_timeout,
        tls: args.secure.settings(false),
        plan: RepeatPlan::from_flags(args.repeat.iterations, args.repeat.confidence),
    }
}

pub fn run(args: &SweepArgs, globals: &Globals) -> CommandResult {
    check_secure_flags(&args.secure, false, false)?;
    let family = args.server.family().map_err(Failure::Usage)?;
    let target = match &args.server.host {
        Some(host) => Some(test::resolve_host_as(host, args.server.port(), family)?),
        None => None,
    };
    let resolve = |request: &_| test::resolve_request(request, target);
    let sweep = Sweep::new(&spec(args), resolve).map_err(Failure::Usage)?;
    let store = globals.storage.open_for_run()?;
    let cancel = cancel::on_signals()?;
    let bar = SweepBar::new(sweep.settings().len() as u64, false);
    let text = TextSink::new(std::io::stdout(), args.output.format)
        .table(SweepTable::new(&sweep.base, &sweep.axes))
        .around(bar.bar());
    // The bar first, so that it is cleared before the result is printed.
    let mut sinks =
        Sinks::new()
            .with(bar)
            .append(sink::standard(args.output.print.json, text, store));
    let place = match &args.server.host {
        Some(host) => format!("against {host}"),
        None => "over loopback (in-process server)".to_string(),
    };
    sinks.event(&Event::Note(&sweep.banner(&place)));
    let report = sweep.run(&cancel, &mut sinks, resolve, |config| {
        let options = trust(&args.secure, globals.key.clone()).options(config);
        test::run(target, &options, &cancel, &mut sink::Discard)
    });
    let failed = sweep::failed_points(&report.points);
    sinks.finish_document(&Document::Sweep(Box::new(report)))?;
    if failed > 0 {
        return Err(
            Failure::Partial(format!("{failed} sweep points failed; their rows say why")).into(),
        );
    }
    Ok(())
}
