//! `linerate stream`, `rr` and `crr`: flags into a test request, then one campaign call
//! (a test, repeated or not, or `--find-max`'s search) with its results going through the
//! standard sinks.

use crate::cli::{
    AppArgs, AppPeer, MeasureArgs, OutputArgs, RrArgs, ServerArgs, StreamArgs, TlsArgs,
    TransactionArgs,
};
use crate::failure::{CommandResult, Failure};
use crate::Globals;
use linerate_campaign::test_run::{self, Shown, Trust};
use linerate_model::{
    StreamRequest, StreamTransport, TestKind, TestRequest, TransactionRequest, DEFAULT_TIME_S,
    FIND_MAX_TRIAL_S,
};
use linerate_proto::auth::Key;
use linerate_report::stats::RepeatPlan;
use linerate_report::Direction;

/// The test `linerate stream`'s flags ask for.
fn stream_request(args: &StreamArgs) -> TestRequest {
    let direction = Direction::from_flags(args.direction.reverse, args.direction.bidir);
    let transport = if args.quic {
        StreamTransport::Quic {
            length: args.length,
            connection_per_flow: args.connections,
        }
    } else if let Some(video) = args.isochronous {
        StreamTransport::Video(linerate_model::VideoStream {
            length: args.length,
            ..linerate_model::VideoStream::of(linerate_model::video::VideoSettings {
                gap_us: args.frame_gap.unwrap_or(0),
                key_frames: args.key_frames,
                ..video
            })
        })
    } else if args.udp {
        StreamTransport::Udp {
            length: args.length,
            pps: args.pps,
            gso: args.gso,
            gro: args.gro,
        }
    } else {
        StreamTransport::Tcp {
            length: args.length,
            mss: args.mss,
            nodelay: args.nodelay,
        }
    };
    let time_s = args.time.unwrap_or(if args.find_max {
        FIND_MAX_TRIAL_S
    } else {
        DEFAULT_TIME_S
    });
    let kind = TestKind::Stream(StreamRequest {
        direction,
        rate_bps: args.rate,
        transport,
    });
    TestRequest {
        tls: args.secure.settings(args.quic),
        parallel: args.parallel,
        congestion: args.congestion.clone(),
        per_flow: args.per_flow,
        ..request_to(&args.server, &args.measure, time_s, kind)
    }
}

/// A request to the server the flags name, measured as they say: what every test
/// command's request takes from its server and measurement flags alike.
fn request_to(
    server: &ServerArgs,
    measure: &MeasureArgs,
    time_s: f64,
    kind: TestKind,
) -> TestRequest {
    TestRequest {
        target: server.host.clone(),
        port: server.port(),
        threads: measure.threads,
        time_s,
        omit_s: measure.omit,
        interval_s: measure.interval,
        window: measure.window,
        connect_timeout_s: server.connect_timeout,
        observe: !measure.no_observe,
        source: server.source(),
        marks: server.marks(),
        ..TestRequest::new(kind)
    }
}

/// How a test command's run reaches its server and shows its result, from its flags.
fn shown<'a>(
    server: &'a ServerArgs,
    output: &OutputArgs,
    trust: Trust,
    plan: Option<RepeatPlan>,
    per_flow: bool,
    (verbose, realtime): (bool, bool),
) -> Result<Shown<'a>, Failure> {
    Ok(Shown {
        host: server.host.as_deref(),
        port: server.port(),
        family: server.family().map_err(Failure::Usage)?,
        trust,
        plan,
        json: output.print.json,
        scale: output.format,
        per_flow,
        verbose,
        realtime,
    })
}

/// The test `linerate rr` (with its own flags) or `linerate crr` (`rr` is `None`) asks for.
fn transaction_request(common: &TransactionArgs, rr: Option<&RrArgs>) -> TestRequest {
    TestRequest {
        tls: rr.and_then(|a| a.secure.settings(false)),
        parallel: common.parallel,
        congestion: common.congestion.clone(),
        per_flow: common.per_flow,
        ..request_to(
            &common.server,
            &common.measure,
            common.time,
            TestKind::Transactions(TransactionRequest {
                connect_each: rr.is_none(),
                udp: rr.is_some_and(|a| a.udp),
                request: common.request,
                response: common.response,
                outstanding: rr.and_then(|a| a.outstanding),
                rate_tps: rr.and_then(|a| a.rate),
                busy_poll_us: common.busy_poll,
                cpus: common.cpu.iter().map(|&c| usize::from(c)).collect(),
                load: rr.map_or(0, |a| a.load),
                keep_nagle: common.no_nodelay,
            }),
        )
    }
}

/// `linerate stream`.
pub fn stream(args: &StreamArgs, globals: &Globals) -> CommandResult {
    if let Some(group) = args.server.multicast_group() {
        return multicast(args, group, globals);
    }
    if args.ttl.is_some() || args.groups > 1 || !args.receivers.is_empty() {
        let why = "'--ttl', '--groups' and '--receivers' are for a multicast group: the host is not one (224.0.0.0/4, ff00::/8)";
        return Err(Failure::Usage(why.into()).into());
    }
    check_secure_flags(&args.secure, args.quic, args.baseline)?;
    let shown = shown(
        &args.server,
        &args.output,
        trust(&args.secure, globals.key.clone()),
        RepeatPlan::from_flags(args.repeat.iterations, args.repeat.confidence),
        args.per_flow,
        (globals.verbose, args.measure.realtime),
    )?;
    let request = stream_request(args);
    if args.find_max {
        return test_run::search(&request, args.max_loss, &shown, &globals.storage);
    }
    test_run::run(&request, &shown, args.baseline, &globals.storage)
}

/// `linerate stream GROUP -u`: one paced sender to a multicast group (docs/multicast.md).
/// What a group cannot be sent (TCP, a reply, several flows, a search) is refused by name.
fn multicast(args: &StreamArgs, group: std::net::IpAddr, globals: &Globals) -> CommandResult {
    use linerate_model::multicast::{DEFAULT_MULTICAST_PORT, DEFAULT_MULTICAST_TTL};
    let repeat = args.repeat.iterations.is_some() || args.repeat.confidence.is_some();
    let refused = [
        (
            !args.udp,
            "multicast is UDP: add -u (a group takes no TCP connection)",
        ),
        (
            args.quic,
            "'--quic' needs a connection, and a group has none",
        ),
        (
            args.direction.reverse || args.direction.bidir,
            "'-R'/'--bidir': a group cannot send back",
        ),
        (
            args.parallel > 1,
            "'-P': one sender a run (run more senders for more)",
        ),
        (
            args.find_max,
            "'--find-max' needs the receivers' loss, which a sender does not hear",
        ),
        (args.pps.is_some(), "'--pps' is not taken: give -b"),
        (repeat, "'--iterations'/'--confidence' are not taken"),
        (args.server.mptcp, "'--mptcp' needs TCP"),
        (
            args.isochronous.is_some(),
            "'--isochronous' frames go to a server",
        ),
    ];
    if let Some((_, why)) = refused.iter().find(|(refuse, _)| *refuse) {
        return Err(Failure::Usage(format!("to multicast group {group}: {why}")).into());
    }
    let spec = linerate_drivers::multicast::SendSpec {
        group: std::net::SocketAddr::new(group, args.server.port.unwrap_or(DEFAULT_MULTICAST_PORT)),
        groups: args.groups,
        ttl: args.ttl.unwrap_or(DEFAULT_MULTICAST_TTL),
        interface: args.server.bind_dev.clone(),
        bind: args.server.bind,
        // iperf 2's default datagram: 1,470 bytes fit an Ethernet frame.
        length: args.length.map_or(1470, |l| l as usize),
        rate_bps: args.rate.filter(|r| *r > 0).unwrap_or(1_000_000),
        marks: args.server.marks(),
        duration: std::time::Duration::from_secs_f64(args.time.unwrap_or(DEFAULT_TIME_S)),
    };
    // Said on stderr where refused, and among the sender's document's warnings.
    let warnings = linerate_campaign::test_run::take_realtime(args.measure.realtime);
    let gather = linerate_campaign::multicast_run::Gather {
        hosts: &args.receivers,
        key: globals.key.clone(),
    };
    linerate_campaign::multicast_run::send(
        &spec,
        &gather,
        (args.output.print.json, warnings.into_iter().collect()),
        &globals.storage,
    )?;
    Ok(())
}

/// `linerate app --pattern NAME`: an application's traffic (docs/app.md): the pattern's
/// plan from the options given, run by the runner (a test, or two at once).
pub fn app(args: &AppArgs, globals: &Globals) -> CommandResult {
    let plan = args.pattern.plan(&args.options()).map_err(Failure::Usage)?;
    if args.peer == AppPeer::Irtt {
        let Some(call) = plan.only_call() else {
            return Err(Failure::Usage(format!(
                "'--peer irtt' carries a call: it needs '--pattern voip', not '{}'",
                args.pattern.name
            ))
            .into());
        };
        return crate::stamp_cmd::call(args, call.clone(), globals);
    }
    let shown = shown(
        &args.server,
        &args.output,
        trust(&TlsArgs::default(), globals.key.clone()),
        RepeatPlan::from_flags(None, None),
        false,
        (globals.verbose, args.measure.realtime),
    )?;
    let request = |test: &linerate_model::app::PlannedTest| TestRequest {
        parallel: test.flows,
        ..request_to(
            &args.server,
            &args.measure,
            args.time,
            TestKind::Stream(test.stream.clone()),
        )
    };
    let beside = plan.beside.as_ref().map(request);
    test_run::run_app(
        &request(&plan.test),
        beside.as_ref(),
        &shown,
        &globals.storage,
    )
}

/// `linerate rr` (with its own flags) and `linerate crr` (`rr` is `None`).
pub fn transactions(
    common: &TransactionArgs,
    rr: Option<&RrArgs>,
    globals: &Globals,
) -> CommandResult {
    let default_secure = TlsArgs::default();
    let secure = rr.map_or(&default_secure, |a| &a.secure);
    check_secure_flags(secure, false, false)?;
    let shown = shown(
        &common.server,
        &common.output,
        trust(secure, globals.key.clone()),
        RepeatPlan::from_flags(common.repeat.iterations, common.repeat.confidence),
        common.per_flow,
        (globals.verbose, common.measure.realtime),
    )?;
    let request = transaction_request(common, rr);
    test_run::run(&request, &shown, false, &globals.storage)
}

/// Who the client is and whom it trusts, from the TLS flags and the user's key.
pub fn trust(secure: &TlsArgs, key: Option<Key>) -> Trust {
    Trust {
        key,
        ca: secure.ca.clone(),
        identity: secure.cert.clone().zip(secure.cert_key.clone()),
    }
}

/// Flags that mean something only for an encrypted test, given without one.
pub fn check_secure_flags(secure: &TlsArgs, quic: bool, baseline: bool) -> Result<(), Failure> {
    if secure.tls || quic {
        return Ok(());
    }
    let stray = [
        ("--cipher", secure.cipher.is_some()),
        ("--ca", secure.ca.is_some()),
        ("--cert", secure.cert.is_some()),
        ("--baseline", baseline),
    ];
    match stray.iter().find(|(_, given)| *given) {
        Some((flag, _)) => Err(Failure::Usage(format!(
            "'{flag}' applies to encrypted tests: add '--tls' (or '--quic')"
        ))),
        None => Ok(()),
    }
}
