//! Command-line flags. Values are checked here, so a mistake is one line naming the flag
//! and the value, and exit code 2.

use clap::{Args, Parser, Subcommand};
use linerate_report::units::{self, Scale};

const EXAMPLES: &str = "\
Examples:
  linerate stream                      measure this machine over loopback (in-process server)
  linerate serve                       serve tests on port 5201
  linerate stream server1 -P 8 -t 30   8 TCP flows to server1 for 30 s
  linerate stream server1 -R           the server sends (reverse)
  linerate stream server1 --bidir -w 4M --json > result.json
  linerate stream server1 -u -b 500M -l 1400   UDP at 500 Mbit/s: loss, jitter, kernel drops
  linerate stream server1 -u --pps 100k -l 64  100,000 64-byte datagrams per second
  linerate stream server1 -u -b 0 -l 64 --gso --gro   as many 64-byte datagrams as offload allows
  linerate stream server1 -u -l 1400 --find-max        the highest rate with loss <= 0.1%";

#[derive(Debug, Parser)]
#[command(
    name = "linerate",
    version,
    about = "A network performance lab in one binary: throughput, CPU cost and scaling, measured at the receiver.",
    after_help = EXAMPLES
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve tests from linerate clients (many at once, each isolated)
    #[command(
        after_help = "Examples:\n  linerate serve\n  linerate serve --listen 192.0.2.1 --port 6000 --max-tests 8"
    )]
    Serve(ServeArgs),
    /// Measure TCP throughput to a server, or of this machine over loopback
    #[command(after_help = EXAMPLES)]
    Stream(StreamArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (default: every IPv6 and IPv4 address)
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::IpAddr>,
    /// Port for control and data connections
    #[arg(short, long, default_value_t = 5201)]
    pub port: u16,
    /// Tests served at once; more are refused as busy
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_tests: u32,
    /// Connections one test may open
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_flows: u32,
    /// Longest test (warm-up included), in seconds
    #[arg(long, default_value_t = 86_400.0, value_parser = positive_seconds)]
    pub max_duration: f64,
    /// Worker threads per test (default: one per flow up to 16 flows, else one per CPU)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub threads: Option<u32>,
    /// Seconds a client may take over each handshake step before it is dropped
    #[arg(long, default_value_t = 10.0, value_parser = positive_seconds)]
    pub handshake_timeout: f64,
    /// Do not log test starts and ends
    #[arg(short, long)]
    pub quiet: bool,
}

#[derive(Debug, Args)]
pub struct StreamArgs {
    /// Server to test against; without it, an in-process server on loopback measures this machine
    pub host: Option<String>,
    /// Server port
    #[arg(short, long, default_value_t = 5201)]
    pub port: u16,
    /// UDP instead of TCP: datagrams paced to --rate (default 1M per flow) or --pps
    #[arg(short, long)]
    pub udp: bool,
    /// Parallel flows (TCP connections or UDP socket pairs) per direction
    #[arg(short = 'P', long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub parallel: u32,
    /// Worker threads on this side (default: one per flow up to 16 flows, else one per CPU)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub threads: Option<u32>,
    /// Seconds to measure, after --omit [default: 10; with --find-max, 2 per trial]
    #[arg(short, long, value_parser = positive_seconds)]
    pub time: Option<f64>,
    /// Warm-up seconds to leave out of the summary
    #[arg(short = 'O', long, default_value_t = 0.0, value_parser = seconds)]
    pub omit: f64,
    /// Seconds between interval reports; 0 for none
    #[arg(short, long, default_value_t = 1.0, value_parser = seconds)]
    pub interval: f64,
    /// Bytes per write (default 128K), or UDP payload per datagram, 16 to 65507 (default:
    /// the largest that fits the path MTU) [k|m|g suffixes, binary]
    #[arg(short, long, value_parser = length)]
    pub length: Option<u64>,
    /// Socket buffer size on both ends (turns kernel autotuning off) [k|m|g]
    #[arg(short, long, value_parser = window)]
    pub window: Option<u64>,
    /// TCP maximum segment size
    #[arg(short = 'M', long, value_parser = clap::value_parser!(u32).range(88..=65535), conflicts_with = "udp")]
    pub mss: Option<u32>,
    /// Disable Nagle's algorithm (TCP_NODELAY)
    #[arg(short = 'N', long, conflicts_with = "udp")]
    pub nodelay: bool,
    /// Congestion control algorithm on both ends (e.g. cubic, reno, bbr)
    #[arg(short = 'C', long, value_name = "ALGO", conflicts_with = "udp")]
    pub congestion: Option<String>,
    /// The server sends and the client receives
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both ends send at once, on separate connections
    #[arg(long)]
    pub bidir: bool,
    /// Pace each flow to this many bits/s of payload; 0 for as fast as possible (TCP's
    /// default; UDP's is 1M) [k|m|g suffixes, decimal]
    #[arg(short = 'b', long, value_parser = rate)]
    pub rate: Option<u64>,
    /// UDP: pace each flow to this many datagrams per second instead of --rate [k|m|g, decimal]
    #[arg(long, requires = "udp", conflicts_with = "rate", value_parser = per_second)]
    pub pps: Option<u64>,
    /// UDP: search for the highest rate whose receiver-side loss stays within --max-loss,
    /// over short trials (-t each, default 2 s), and print every trial
    #[arg(long, requires = "udp", conflicts_with_all = ["rate", "pps", "bidir"])]
    pub find_max: bool,
    /// The loss bound for --find-max, in percent of datagrams
    #[arg(long, default_value_t = 0.1, requires = "find_max", value_parser = percent)]
    pub max_loss: f64,
    /// UDP: send with segmentation offload (UDP_SEGMENT): up to 64 datagrams per buffer
    #[arg(long, requires = "udp")]
    pub gso: bool,
    /// UDP: receive with coalescing (UDP_GRO): runs of datagrams per buffer
    #[arg(long, requires = "udp")]
    pub gro: bool,
    /// Print one JSON document (docs/results.md) instead of text
    #[arg(short = 'J', long)]
    pub json: bool,
    /// Show figures per flow, and keep them per interval in the result
    #[arg(long)]
    pub per_flow: bool,
    /// Units of printed figures: a (adaptive), k, m, g
    #[arg(short, long, default_value = "a", value_parser = scale)]
    pub format: Scale,
    /// Seconds to wait for each connection to be accepted
    #[arg(long, default_value_t = 5.0, value_parser = positive_seconds)]
    pub connect_timeout: f64,
}

fn seconds(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .parse()
        .map_err(|_| format!("'{text}' is not a number of seconds"))?;
    if !value.is_finite() || !(0.0..=1e7).contains(&value) {
        return Err(format!("'{text}' must be between 0 and 10000000 seconds"));
    }
    Ok(value)
}

fn positive_seconds(text: &str) -> Result<f64, String> {
    let value = seconds(text)?;
    if value <= 0.0 {
        return Err(format!("'{text}' must be more than 0 seconds"));
    }
    Ok(value)
}

fn length(text: &str) -> Result<u64, String> {
    let value = units::parse_size(text).map_err(|e| e.to_string())?;
    if value == 0 || value > 1 << 30 {
        return Err(format!("'{text}' must be between 1 byte and 1G"));
    }
    Ok(value)
}

fn window(text: &str) -> Result<u64, String> {
    let value = units::parse_size(text).map_err(|e| e.to_string())?;
    if !(1024..=1 << 30).contains(&value) {
        return Err(format!("'{text}' must be between 1K and 1G"));
    }
    Ok(value)
}

fn percent(text: &str) -> Result<f64, String> {
    match text.trim_end_matches('%').parse::<f64>() {
        Ok(value) if (0.0..100.0).contains(&value) => Ok(value),
        _ => Err(format!("'{text}' is not a percentage from 0 to below 100")),
    }
}

fn rate(text: &str) -> Result<u64, String> {
    units::parse_rate(text).map_err(|e| e.to_string())
}

fn per_second(text: &str) -> Result<u64, String> {
    match units::parse_rate(text).map_err(|e| e.to_string())? {
        0 => Err(format!("'{text}' must be at least 1 per second")),
        value => Ok(value),
    }
}

fn scale(text: &str) -> Result<Scale, String> {
    Scale::parse(text).ok_or_else(|| format!("'{text}' is not one of a, k, m, g"))
}
