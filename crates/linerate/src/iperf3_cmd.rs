//! `linerate iperf3`: iperf3's flags, for a test against a real iperf3 server (`-c`) or
//! for serving iperf3 clients (`-s`, the same server as `linerate serve`).

use crate::cli::{Iperf3Args, ServeArgs};
use crate::failure::CommandResult;
use crate::Globals;
use clap::Parser;
use linerate_campaign::iperf3_run::{self, Iperf3Ask, Iperf3Print};
use linerate_campaign::test;
use linerate_proto::iperf3::{Params, Transport, DEFAULT_TCP_BLOCK, DEFAULT_UDP_RATE};
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
    let print = if args.iperf3_json {
        Iperf3Print::Iperf3Json
    } else if args.json_stream {
        Iperf3Print::Iperf3JsonStream
    } else if args.json {
        Iperf3Print::Document
    } else {
        Iperf3Print::Text
    };
    let ask = Iperf3Ask {
        host,
        addr,
        port: args.port,
        params: params_of(args, addr),
        print,
        title: args.title.as_deref(),
        zerocopy: args.zerocopy,
        interval: args.interval,
        format: args.format,
        connect_timeout: Duration::from_millis(args.connect_timeout),
    };
    iperf3_run::run(&ask, &globals.storage)
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
