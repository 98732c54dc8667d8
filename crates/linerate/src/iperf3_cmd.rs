//! `linerate iperf3`: iperf3's flags, for a test against a real iperf3 server (`-c`) or
//! for serving iperf3 clients (`-s`, the same server as `linerate serve`).

use crate::cli::{Iperf3Args, ServeArgs};
use crate::failure::{CommandResult, Failure};
use crate::Globals;
use anyhow::Context;
use clap::Parser;
use linerate_campaign::sink::{Sinks, StoreSink};
use linerate_campaign::{cancel, repeat, storage, test};
use linerate_drivers::iperf3_client;
use linerate_model::clock::UnixTime;
use linerate_proto::iperf3::{Params, Transport, DEFAULT_TCP_BLOCK, DEFAULT_UDP_RATE};
use linerate_report::document::Document;
use linerate_report::live::TestUpdate;
use linerate_report::text::{self, INTERVAL_HEADER};
use linerate_report::{iperf3_json, Direction};
use serde_json::Value;
use std::time::Duration;

/// `serve`'s flags alone, to run `linerate iperf3 -s` as `linerate serve` with its defaults.
#[derive(clap::Parser)]
struct ServeOnly {
    #[command(flatten)]
    args: ServeArgs,
}

/// `serve`'s own defaults, from its flag definitions, with iperf3's server flags.
fn serve_args(args: &Iperf3Args) -> ServeArgs {
    let mut serve = ServeOnly::parse_from(["serve"]).args;
    serve.port = args.port;
    serve.listen = args.bind;
    if let (Some(key), Some(users)) = (&args.rsa_private_key_path, &args.authorized_users_path) {
        serve.rsa_private_key_path = Some(key.clone());
        serve.authorized_users_path = Some(users.clone());
        serve.time_skew_threshold = args.time_skew_threshold;
        serve.rsa_pkcs1_padding = args.use_pkcs1_padding;
    }
    serve
}

pub fn run(args: &Iperf3Args, globals: &Globals) -> CommandResult {
    let Some(host) = &args.client else {
        return crate::serve_cmd::serve(&serve_args(args), globals);
    };
    let addr = test::resolve_host(host, args.port)?;
    let params = params_of(args, addr);
    let store = globals.storage.open_for_run()?;
    let cancel = cancel::on_signals()?;
    let quiet = args.json || args.iperf3_json || args.json_stream;
    let prefix = args
        .title
        .as_deref()
        .map_or(String::new(), |t| format!("{t}:  "));
    let say = |line: &str| {
        if !quiet {
            println!("{prefix}{line}");
        }
    };
    say(&format!(
        "Connecting to iperf3 server {host} ({addr}): {}",
        params
            .describe()
            .split_once(": ")
            .map_or("", |(_, what)| what)
    ));
    if args.zerocopy {
        say("-Z: linerate writes from memory; the figures are of ordinary writes");
    }
    let flow_ids: Vec<u32> =
        (0..params.parallel * if params.bidirectional { 2 } else { 1 }).collect();
    let config = match linerate_drivers::iperf3::config_of(&params, host, args.port, Duration::ZERO)
    {
        Ok(config) => config,
        Err(message) => return Err(Failure::Usage(message).into()),
    };
    let sends = |id: u32| config.flow_direction(id) != Direction::Reverse;
    let tool = format!("linerate {}", env!("CARGO_PKG_VERSION"));
    let host_facts = linerate_hostinfo::host_facts();
    let asked = |cookie: String, control_mss: u32| iperf3_json::Iperf3Start {
        cookie,
        tcp_mss_default: u64::from(control_mss),
        bytes: params.num,
        blocks: params.blockcount,
        target_bitrate: params.bandwidth,
    };
    let started_at = UnixTime::now().seconds();
    let mut progress = |event: TestUpdate| match event {
        TestUpdate::Iperf3Streams {
            cookie,
            control_mss,
            streams,
        } if args.json_stream => {
            let start = asked(cookie, control_mss);
            let run = iperf3_json::StartOf {
                config: &config,
                tool: &tool,
                host: &host_facts,
                started_at,
                streams: &streams,
            };
            let line = iperf3_json::start_line(&run, &start);
            println!("{line}");
        }
        TestUpdate::Interval(interval) if args.json_stream => {
            println!("{}", iperf3_json::interval_line(&config, &interval));
        }
        TestUpdate::Started if args.interval > 0.0 => say(INTERVAL_HEADER),
        TestUpdate::Interval(interval) => {
            for line in text::side_interval_lines(
                &interval,
                &sends,
                &flow_ids,
                args.format,
                params.parallel > 1,
            ) {
                say(&line);
            }
        }
        _ => {}
    };
    let timeout = Duration::from_millis(args.connect_timeout);
    let outcome = iperf3_client::run(addr, host, &params, timeout, &cancel, &mut progress)?;
    print_outcome(args, &params, &outcome, &asked, &say)?;
    if let Some(store) = store {
        // Kept as linerate's own document, whichever shape was printed; the note goes
        // where a note after this output goes.
        let command = storage::command_line();
        let mut keeper: Sinks = if quiet {
            Sinks::new().with(StoreSink::new(store, command, std::io::stderr()))
        } else {
            Sinks::new().with(StoreSink::new(store, command, Titled(prefix.clone())))
        };
        keeper.finish_document(&Document::Test(Box::new(outcome.report.clone())))?;
    }
    repeat::check_flows(&outcome.report).map_err(|e| Failure::Partial(format!("{e:#}")).into())
}

/// The test's result in the shape the flags ask for: iperf3's `-J` document, its
/// `--json-stream` end lines, linerate's own JSON, or text with the server's output.
fn print_outcome(
    args: &Iperf3Args,
    params: &Params,
    outcome: &iperf3_client::Iperf3Outcome,
    asked: &dyn Fn(String, u32) -> iperf3_json::Iperf3Start,
    say: &dyn Fn(&str),
) -> CommandResult {
    let server_output = outcome.server.server_output_text.as_deref();
    if args.iperf3_json {
        let output = server_output_of(&outcome.server);
        let start = asked(outcome.cookie.clone(), outcome.control_mss);
        let doc = iperf3_json::render(&outcome.report, &start, output);
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).context("cannot encode the result")?
        );
    } else if args.json_stream {
        let output = server_output_of(&outcome.server);
        for line in iperf3_json::end_lines(&outcome.report, output) {
            println!("{line}");
        }
    } else if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&outcome.report).context("cannot encode the result")?
        );
    } else {
        for line in text::render_summary(&outcome.report, args.format, params.parallel > 1).lines()
        {
            say(line);
        }
        let json_text = outcome
            .server
            .server_output_json
            .as_ref()
            .and_then(|j| serde_json::to_string_pretty(j).ok());
        if let Some(output) = server_output.or(json_text.as_deref()) {
            say("");
            say("Server output:");
            for line in output.lines() {
                say(line);
            }
        }
    }
    Ok(())
}

/// The parameters an iperf3 client with these flags sends.
fn params_of(args: &Iperf3Args, addr: std::net::SocketAddr) -> Params {
    let transport = if args.udp {
        Transport::Udp
    } else {
        Transport::Tcp
    };
    let counted = args.bytes.is_some() || args.blockcount.is_some();
    let len = args.length.unwrap_or(match transport {
        Transport::Tcp => u64::from(DEFAULT_TCP_BLOCK),
        Transport::Udp => linerate_engine::sys::udp_payload_for(addr).map_or(
            linerate_model::FALLBACK_UDP_LENGTH,
            |len| {
                len.clamp(
                    *linerate_model::UDP_LENGTH.start(),
                    *linerate_model::UDP_LENGTH.end(),
                )
            },
        ),
    });
    Params {
        transport,
        omit: args.omit,
        time: if counted { 0 } else { args.time },
        num: args.bytes.unwrap_or(0),
        blockcount: args.blockcount.unwrap_or(0),
        parallel: args.parallel,
        len: u32::try_from(len).unwrap_or(u32::MAX),
        bandwidth: args.bitrate.unwrap_or(match transport {
            Transport::Tcp => 0,
            Transport::Udp => DEFAULT_UDP_RATE,
        }),
        pacing_timer: 1000,
        reverse: args.reverse,
        bidirectional: args.bidir,
        nodelay: args.nodelay,
        mss: args.mss,
        window: args.window,
        congestion: args.congestion.clone(),
        get_server_output: args.get_server_output,
        udp_counters_64bit: args.udp_counters_64bit,
        zerocopy: false,
        title: args.title.clone(),
        client_version: Some(format!("linerate {}", env!("CARGO_PKG_VERSION"))),
        authtoken: None,
        use_pkcs1_padding: false,
    }
}

/// The server's output as iperf3 -J and --json-stream carry it: its JSON, or its text.
fn server_output_of(server: &linerate_proto::iperf3::Results) -> Option<(&'static str, Value)> {
    match (&server.server_output_json, &server.server_output_text) {
        (Some(json), _) => Some(("server_output_json", json.clone())),
        (None, Some(text)) => Some(("server_output_text", text.as_str().into())),
        (None, None) => None,
    }
}

/// Lines on stdout after `--title`'s prefix, as iperf3 prints every line of a titled run.
struct Titled(String);

impl std::io::Write for Titled {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(bytes);
        let mut out = std::io::stdout().lock();
        for line in text.split_inclusive('\n') {
            write!(out, "{}{line}", self.0)?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stdout().flush()
    }
}
