//! `linerate iperf2 -c`: iperf 2's client flags, for a test against a real iperf 2 server.

use crate::cli::Iperf2Args;
use crate::failure::CommandResult;
use crate::Globals;
use linerate_campaign::iperf2_run::{self, Iperf2Run};
use linerate_campaign::test;
use linerate_drivers::iperf2_back::DEFAULT_LISTEN_PORT;
use linerate_drivers::iperf2_client::{self, Back, Iperf2Ask, Iperf2Rate};
use linerate_proto::iperf2::Amount;
use std::time::Duration;

pub fn run(args: &Iperf2Args, globals: &Globals) -> CommandResult {
    let addr = test::resolve_host(&args.client, args.port)?;
    let length = (args.len).unwrap_or(iperf2_client::default_length(args.udp, addr.is_ipv6()));
    let rate = (args.bandwidth.map(Iperf2Rate::from)).or(args
        .udp
        .then_some(Iperf2Rate::Bits(iperf2_client::DEFAULT_UDP_RATE)));
    let ask = Iperf2Ask {
        addr,
        target: args.client.clone(),
        udp: args.udp,
        parallel: args.parallel,
        amount: args.num.map_or(Amount::Seconds(args.time), Amount::Bytes),
        length: u32::try_from(length).unwrap_or(u32::MAX),
        rate,
        trip_times: args.trip_times,
        isochronous: args.isochronous,
        reverse: args.reverse,
        full_duplex: args.full_duplex,
        interval_s: args.interval,
        window: args.window,
        nodelay: args.nodelay,
        connect_timeout: Duration::from_secs_f64(args.connect_timeout),
        back: (args.dual || args.tradeoff).then(|| Back {
            dual: args.dual,
            port: args.listen_port.unwrap_or(DEFAULT_LISTEN_PORT),
        }),
    };
    let run = Iperf2Run {
        host: &args.client,
        ask,
        json: args.json,
        realtime: args.realtime,
    };
    iperf2_run::run(&run, &globals.storage)
}
