//! Command-line flags. Values are checked here, so a mistake is one line naming the flag
//! and the value, and exit code 2.

use clap::{Args, Parser, Subcommand};
use linerate_campaign::flag_values::*;
use linerate_report::units::Scale;
use std::str::FromStr;

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
  linerate stream server1 -u -l 1400 --find-max        the highest rate with loss <= 0.1%
  linerate stream server1 --tls --baseline    TLS 1.3 beside plain TCP: what encryption costs per Gbit
  linerate stream server1 --quic -P 4 -C bbr  four QUIC streams, a worker (and connection) per CPU
  linerate rr                          request/response round trips over loopback
  linerate rr server1 -P 4 --outstanding 8    4 flows, 8 transactions in flight each
  linerate rr server1 --rate 10k       open loop: 10,000 transactions/s, no coordinated omission
  linerate rr server1 --udp --request 64 --response 1k
  linerate rr server1 --load 4         latency beside 4 bulk TCP flows
  linerate rr server1 --tls            round trips through TLS records
  linerate crr server1 -P 4            connect/request/response/close rate and connect latency
  linerate stream server1 --confidence 99,5   repeat until the 99% interval is within ±5%
  linerate sweep server1 --parallel 8,32,1000 --window 256k,32k   one row per point
  linerate history                     runs kept in the results database
  linerate compare 12 15               two kept runs side by side, deltas, significance
  linerate report 12 15 --html r.html  one self-contained HTML file with SVG charts";

const RR_EXAMPLES: &str = "\
Examples:
  linerate rr                          1-byte request/response over loopback (in-process server)
  linerate rr server1 -t 30            30 s against server1, one transaction in flight
  linerate rr server1 -P 8 --outstanding 4 --json > rr.json
  linerate rr server1 --rate 20k -t 10 open loop, latency timed from each request's due time
  linerate rr server1 --udp --request 100 --response 1400
  linerate rr server1 --tls --cipher chacha20-poly1305   latency through TLS records
  linerate rr server1 --load 2 --cpu 1 2 bulk flows beside, requester pinned to CPU 1
Latency figures are round-trip times (request handed over, or due, to the whole answer).";

const CRR_EXAMPLES: &str = "\
Examples:
  linerate crr                         connections/s over loopback (in-process server)
  linerate crr server1 -P 4 -t 20      4 flows, each connect/request/response/close in turn
  linerate crr server1 --request 100 --response 10k --json
Each transaction opens a new TCP connection; the client closes it and holds its TIME_WAIT.";

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
    /// The results database [default: $XDG_DATA_HOME/linerate/results.db]
    #[arg(long, global = true, env = "LINERATE_DB", value_name = "PATH")]
    pub db: Option<std::path::PathBuf>,
    /// Do not keep this run in the results database
    #[arg(long, global = true)]
    pub no_store: bool,
    /// Key file shared with the server and agents: clients prove they hold it and check
    /// that the server does; `serve` requires it of every native client, agent and mirror
    /// (docs/security.md)
    #[arg(long, global = true, env = "LINERATE_KEY", value_name = "FILE")]
    pub key: Option<std::path::PathBuf>,
    /// Say on stderr, before a test, what was chosen where you did not say and why
    /// (workers for this machine's CPUs, write or datagram size, TLS buffers)
    #[arg(long, global = true)]
    pub verbose: bool,
}

/// The top-level flags (`--db`, `--no-store`, `--key`, `--verbose`, by their ids) that
/// each command reads. They may be given before the command or after it; a command's
/// help shows only those it reads, and one it does not read is refused by name
/// ([`unread_flag`]) rather than silently taken.
pub fn reads(command: &str) -> &'static [&'static str] {
    match command {
        "stream" | "app" | "rr" | "crr" | "sweep" => &["db", "no_store", "key", "verbose"],
        "serve" | "run" | "copy" | "mesh" => &["db", "no_store", "key"],
        "iperf2" | "iperf3" | "rpm" | "ndt7" | "stamp" | "trace" => &["db", "no_store"],
        "history" | "show" | "compare" | "export" | "report" | "store" => &["db"],
        "doctor" => &["key"],
        // profile, impair, lab, disk: nothing kept, no key.
        _ => &[],
    }
}

/// The top-level flags, their spelling, and why a command that does not read one has no
/// use for it.
const TOP_LEVEL: [(&str, &str, &str); 4] = [
    ("db", "--db", "it keeps and reads no results"),
    ("no_store", "--no-store", "it keeps no results"),
    ("key", "--key", "it proves no key to anyone"),
    ("verbose", "--verbose", "it has no choices to explain"),
];

/// The command line's definition, each command's help showing only the top-level flags
/// it reads: a hidden copy of each of the others stands in its place (clap propagates a
/// global flag only where the command has none of that name), so they still parse, to
/// be refused by [`unread_flag`].
pub fn command() -> clap::Command {
    let root = <Cli as clap::CommandFactory>::command();
    let globals: Vec<clap::Arg> = root
        .get_arguments()
        .filter(|a| a.is_global_set())
        .cloned()
        .collect();
    root.mut_subcommands(|sub| {
        let read = reads(sub.get_name());
        globals
            .iter()
            .filter(|g| !read.contains(&g.get_id().as_str()))
            .fold(sub, |sub, g| sub.arg(g.clone().hide(true)))
    })
}

/// A top-level flag given on the command line (not from the environment) to a command
/// that does not read it: the message that refuses it.
pub fn unread_flag(matches: &clap::ArgMatches) -> Option<String> {
    let (name, _) = matches.subcommand()?;
    let read = reads(name);
    TOP_LEVEL
        .iter()
        .find(|(id, _, _)| {
            !read.contains(id)
                && matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine)
        })
        .map(|(_, flag, why)| format!("'{flag}' means nothing to 'linerate {name}': {why}"))
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve tests from linerate clients (many at once, each isolated)
    #[command(
        after_help = "Examples:\n  linerate serve\n  linerate serve --listen 192.0.2.1 --port 6000 --max-tests 8\n  head -c 32 /dev/urandom | base64 > lab.key; linerate serve --key lab.key\n  linerate serve --key lab.key --max-duration 30 --max-clients-per-ip 8 --deny 10.0.0.0/8 --log-format json\n  linerate serve --rsa-private-key-path private.pem --authorized-users-path users.csv\n  linerate serve --cert cert.pem --cert-key key.pem --require-tls\n  linerate serve --http :8080 --https :8443   responsiveness (RPM) for linerate rpm, networkQuality, mach and browsers\n  linerate serve --join 239.1.1.1 --join 232.1.1.1@192.0.2.7%eth1   count multicast streams (linerate's, iperf 2's)\n  linerate serve --key lab.key --iperf2-port 5001   iperf 2 clients too (iperf -c HOST -P 4 -t 10)\n  linerate serve --histograms   log iperf 2 --trip-times tests' latency histograms as iperf -s --histograms prints them"
    )]
    Serve(Box<ServeArgs>),
    /// Measure TCP throughput to a server, or of this machine over loopback
    #[command(after_help = EXAMPLES)]
    Stream(StreamArgs),
    /// Send traffic shaped like an application and score it as its users would: a call's
    /// MOS each way
    #[command(after_help = app_help())]
    App(AppArgs),
    /// Measure request/response round trips and transaction rates (TCP or UDP)
    #[command(after_help = RR_EXAMPLES)]
    Rr(RrArgs),
    /// Measure connection rates: connect, request, response, close, per transaction
    #[command(after_help = CRR_EXAMPLES)]
    Crr(CrrArgs),
    /// Speak iperf3: test against a real iperf3 server (-c), or serve iperf3 clients (-s)
    #[command(after_help = IPERF3_EXAMPLES)]
    Iperf3(Iperf3Args),
    /// Speak iperf 2: test against a real iperf 2 server (`iperf -s`), printed as iperf 2 prints it
    #[command(after_help = IPERF2_EXAMPLES)]
    Iperf2(Iperf2Args),
    /// Run a test at every combination of list-valued parameters, one row per point
    #[command(after_help = SWEEP_EXAMPLES)]
    Sweep(SweepArgs),
    /// List stored runs, newest first
    #[command(after_help = HISTORY_EXAMPLES)]
    History(HistoryArgs),
    /// Print a stored run as it was printed when it ran
    #[command(after_help = SHOW_EXAMPLES)]
    Show(ShowArgs),
    /// Compare stored runs side by side, with deltas and significance
    #[command(after_help = COMPARE_EXAMPLES)]
    Compare(CompareArgs),
    /// Write a stored run as JSON (the full document) or CSV
    #[command(after_help = EXPORT_EXAMPLES)]
    Export(ExportArgs),
    /// Draw stored runs into one self-contained HTML file with SVG charts
    #[command(after_help = REPORT_EXAMPLES)]
    Report(ReportArgs),
    /// Run a workload profile (linerate TOML or uperf XML) here or across agents
    #[command(after_help = RUN_EXAMPLES)]
    Run(RunArgs),
    /// Work with profile files: check them, convert uperf XML to TOML
    #[command(subcommand, after_help = PROFILE_EXAMPLES)]
    Profile(ProfileCommand),
    /// Emulate a long, lossy path: a transparent bridge between two interfaces
    #[command(after_help = IMPAIR_EXAMPLES)]
    Impair(ImpairArgs),
    /// A client and a server host on this machine, joined through an emulated path
    #[command(subcommand, after_help = LAB_EXAMPLES)]
    Lab(LabCommand),
    /// Copy files to or from a server started with --files, fast and intact over long,
    /// lossy paths: one of SRC and DST is HOST:PATH
    #[command(after_help = COPY_EXAMPLES)]
    Copy(CopyArgs),
    /// Measure the sequential write and read rates a copy would see on a file system
    #[command(after_help = DISK_EXAMPLES)]
    Disk(DiskArgs),
    /// Check this host (and the path to a `linerate serve` at HOST) for what holds results
    /// down, ranked, each with its evidence and the command that changes it
    #[command(after_help = DOCTOR_EXAMPLES)]
    Doctor(DoctorArgs),
    /// Measure many hosts on a schedule: every pair, throughput in slots no host shares,
    /// latency beside it, every result kept with its labels (docs/mesh.md)
    #[command(subcommand, after_help = MESH_EXAMPLES)]
    Mesh(MeshCommand),
    /// Measure responsiveness under working conditions (RPM, the IETF draft networkQuality
    /// and mach follow) against `linerate serve --http`/`--https` or any server of the draft:
    /// down and up capacity, idle latency, the latency load adds and its bufferbloat grade
    #[command(after_help = RPM_EXAMPLES)]
    Rpm(RpmArgs),
    /// Run M-Lab's ndt7 speed test (download, then upload, 10 s each over one TCP
    /// connection) against any ndt7 server or `linerate serve --ndt7`
    #[command(after_help = NDT7_EXAMPLES)]
    Ndt7(Ndt7Args),
    /// Measure loss and delay each way with STAMP (RFC 8762) probes to any reflector: a
    /// router, a TWAMP-light reflector, stamp-suite, or `linerate serve --stamp`
    #[command(after_help = STAMP_EXAMPLES)]
    Stamp(StampArgs),
    /// Look after the results database: prune old runs, summing a mesh's up by the hour
    #[command(subcommand, after_help = STORE_EXAMPLES)]
    Store(StoreCommand),
    /// Find which way the packets go: hop by hop, Paris-style (every probe of a flow keeps
    /// its five-tuple), over -P flows to find the equal-cost branches a multi-flow test takes
    #[command(after_help = TRACE_EXAMPLES)]
    Trace(TraceArgs),
}

const TRACE_EXAMPLES: &str = "Examples:
  linerate trace server1                      UDP probes to port 33434, 3 a hop
  linerate trace server1 -P 8                 8 flows: the branches of equal-cost paths
  linerate trace server1 --tcp -p 5201        TCP SYNs to the port a test uses (root)
  linerate trace server1 --icmp --json        echo requests (root), the result as JSON
  linerate trace server1 --mtu                each hop's MTU (tracepath's way)

Every probe of a flow has the same addresses, protocol and ports (Paris traceroute), so a
load balancer that hashes them sends the flow one way; flows differ in their source port.
UDP needs no privilege; --tcp and --icmp need CAP_NET_RAW. Routers rate-limit the ICMP they
send (Linux: a burst of 6, then 1 a second to each source): with many flows, a hop may
answer some probes only.";

/// Where a client's sockets leave from: `trace`, `stamp` and `rpm` take it as it is; the
/// tests' own group (`ServerArgs`) adds `-4`, `-6`, marks and MPTCP.
#[derive(Debug, Clone, Args)]
pub struct BindArgs {
    /// Leave from this local address
    #[arg(short = 'B', long, value_name = "ADDR")]
    pub bind: Option<std::net::IpAddr>,
    /// Leave through this interface or VRF device (SO_BINDTODEVICE)
    #[arg(long, value_name = "IFACE", value_parser = linerate_model::interface_name)]
    pub bind_dev: Option<String>,
}

impl BindArgs {
    /// The source, when the user named any.
    pub fn source(&self) -> Option<linerate_model::Source> {
        (self.bind.is_some() || self.bind_dev.is_some()).then(|| linerate_model::Source {
            address: self.bind,
            device: self.bind_dev.clone(),
            mptcp: false,
        })
    }
}

/// `linerate trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The destination: a name or an address
    pub target: String,
    /// Flows, each with its own source port (or ICMP identifier)
    #[arg(short = 'P', long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub parallel: u16,
    /// Probes a hop and flow [default: 3 with one flow, 1 with more]
    #[arg(short, long, value_parser = clap::value_parser!(u8).range(1..=10))]
    pub queries: Option<u8>,
    /// The farthest hop to probe
    #[arg(short, long = "max-hops", default_value_t = 30, value_parser = clap::value_parser!(u8).range(1..=255))]
    pub max_hops: u8,
    /// The nearest hop to probe
    #[arg(short, long = "first-hop", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=255))]
    pub first_hop: u8,
    /// Find each hop's MTU as tracepath does: probes (UDP, TCP or ICMP) as large as the
    /// path allows, don't-fragment set, shrunk where a router says its next link is narrower
    #[arg(long)]
    pub mtu: bool,
    /// TCP SYN probes (needs CAP_NET_RAW)
    #[arg(long, conflicts_with = "icmp")]
    pub tcp: bool,
    /// ICMP echo probes (needs CAP_NET_RAW)
    #[arg(long)]
    pub icmp: bool,
    /// The destination port of UDP and TCP probes [default: 33434 UDP, 80 TCP]
    #[arg(short, long)]
    pub port: Option<u16>,
    /// How long a probe waits for its answer (e.g. 1s, 500ms)
    #[arg(short, long, default_value = "1s", value_parser = probe_gap)]
    pub wait: f64,
    /// The gap between two probes (routers rate-limit their answers)
    #[arg(long, default_value = "1ms", value_parser = probe_gap)]
    pub gap: f64,
    /// IPv4 only
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// IPv6 only
    #[arg(short = '6')]
    pub ipv6: bool,
    #[command(flatten)]
    pub source: BindArgs,
    #[command(flatten)]
    pub print: JsonFlag,
}

const STORE_EXAMPLES: &str = "Examples:
  linerate store prune --older-than 30d --dry-run     what would go
  linerate store prune --older-than 30d               runs of more than 30 days ago go
  linerate store prune --older-than 14d --vacuum      and the file shrinks (a long lock)
  linerate --db /var/lib/linerate/mesh.db store prune --older-than 90d
A mesh's rows are summed up per pair, test and hour (count, how they ended, min, median,
p95, max and mean of the figure) before they go; whole hours only, in small transactions
beside a running coordinator (docs/results-db.md).";

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Remove runs older than a while, a mesh's rows summed up by the hour first
    #[command(after_help = STORE_EXAMPLES)]
    Prune(PruneArgs),
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Runs that started more than this long ago go (30d, 12h, 2w)
    #[arg(long, value_name = "AGE", value_parser = age)]
    pub older_than: f64,
    /// Count what would go; change nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Then give the free pages back to the file system (VACUUM; writers wait for it)
    #[arg(long)]
    pub vacuum: bool,
    /// Rows removed per transaction: a writer beside waits for one batch at most
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub batch: u64,
    #[command(flatten)]
    pub print: JsonFlag,
}

const STAMP_EXAMPLES: &str = "Examples:
  linerate serve --stamp 862 &            then, from another host:
  linerate stamp server1                  10 probes/s for 10 s to server1:862
  linerate stamp 192.0.2.1:8620 --rate 100 -t 60 --dscp EF
  linerate stamp router1 --count 1000 --interval 20ms --size 1400
  linerate stamp router1 --hmac-key-file stamp.key      authenticated mode (HMAC-SHA-256)
  linerate stamp server1 --json > stamp.json
  linerate stamp router1 -B 192.0.2.7 --bind-dev eth1  from that address, through eth1
  linerate stamp server1 --irtt --interval 10ms -t 30  irtt's protocol to an irtt server (2112)

Loss is split per direction from the reflector's Direct Measurement TLV (RFC 8972) or its
own sequence numbers (a stateful reflector); otherwise only the round trip is known, and
the result says so. One-way delay needs synchronised clocks: it is withheld, with the
reason, when the clocks' stated error is larger than the delay. The delay each way above
its own minimum (added) needs no synchronised clocks and is always given.";

/// `linerate stamp`.
#[derive(Debug, Args)]
pub struct StampArgs {
    /// The reflector: HOST[:PORT] (port 862, with --irtt 2112, unless given; [ADDR]:PORT
    /// for IPv6)
    pub target: String,
    /// Speak irtt's protocol to an irtt server (`irtt server`, `linerate serve --irtt`):
    /// the same figures, its loss split by the server's count; --size is irtt's --length
    #[arg(long, conflicts_with_all = ["hmac_key", "hmac_key_file", "no_tlvs"])]
    pub irtt: bool,
    /// With --irtt: the key the server requires (irtt's --hmac, the file's bytes)
    #[arg(long, value_name = "FILE", requires = "irtt", value_parser = irtt_key_file)]
    pub irtt_hmac_key_file: Option<linerate_irtt::wire::HmacKey>,
    /// Probes a second (a number, or N/s); conflicts with --interval
    #[arg(short, long, value_parser = probe_rate, conflicts_with = "interval")]
    pub rate: Option<f64>,
    /// The gap between probes (e.g. 100ms, 1s)
    #[arg(long, value_parser = probe_gap)]
    pub interval: Option<f64>,
    /// Probes to send [default: as many as --time allows]
    #[arg(short, long, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    pub count: Option<u64>,
    /// Seconds to send for [default: 10, or until --count]
    #[arg(short, long, allow_negative_numbers = true, value_parser = positive_seconds)]
    pub time: Option<f64>,
    /// Each probe's UDP payload, octets, padded with an Extra Padding TLV [default: the
    /// smallest: 60 open, 148 authenticated, with the Direct Measurement TLV]
    #[arg(short, long, value_parser = clap::value_parser!(u16).range(44..=9000))]
    pub size: Option<u16>,
    /// The DSCP probes leave with and ask of the answers (a name: BE, EF, CS0-CS7,
    /// AF11-AF43, VA; or 0-63); what arrived each way is reported
    #[arg(long, value_parser = dscp)]
    pub dscp: Option<u8>,
    #[command(flatten)]
    pub source: BindArgs,
    /// Authenticated mode: the HMAC-SHA-256 key in hexadecimal (at least 16 bytes; --key
    /// is linerate's own key file, not STAMP's)
    #[arg(long, value_name = "HEX", conflicts_with = "hmac_key_file", value_parser = stamp_key)]
    pub hmac_key: Option<linerate_stamp::wire::Key>,
    /// Authenticated mode: the key from FILE (hexadecimal text, or the raw bytes)
    #[arg(long, value_name = "FILE", value_parser = stamp_key_file)]
    pub hmac_key_file: Option<linerate_stamp::wire::Key>,
    /// Send the bare base packet: no Direct Measurement TLV (a reflector that echoes
    /// unknown octets wrongly, or a size below the default)
    #[arg(long)]
    pub no_tlvs: bool,
    /// Seconds to wait for answers after the last probe
    #[arg(long, default_value_t = 2.0, allow_negative_numbers = true, value_parser = positive_seconds)]
    pub timeout: f64,
    /// Both ends read one clock (the same host, or network namespaces of one host): one-way
    /// delays need no synchronisation then (assumed for this host's own addresses)
    #[arg(long)]
    pub same_clock: bool,
    /// A line every this many seconds while it runs (0: none)
    #[arg(short, long, default_value_t = 1.0, value_parser = non_negative_seconds)]
    pub interval_report: f64,
    #[command(flatten)]
    pub print: JsonFlag,
}

const RPM_EXAMPLES: &str = "Examples:
  linerate serve --http :8080 &   then:
  linerate rpm http://server1:8080/.well-known/nq
  linerate rpm server1:8443 --insecure        https://server1:8443/.well-known/nq, any certificate
  linerate rpm server1:8443 --ca lab-ca.pem   the certificate checked against a CA
  linerate rpm https://server1:8443/.well-known/nq --pin SHA256 --json
  linerate rpm server1:8080 --http            cleartext HTTP/2

RPM is round trips a minute while the path is busy (under 300 low, 300 to 1,000 medium,
above it high). The grade is of the latency load adds to a new connection's handshake:
A+ under 5 ms, A under 30, B under 60, C under 200, D under 400, F from 400 ms.";

/// How a client checks the server's certificate (`rpm`, `ndt7`).
#[derive(Debug, Args)]
pub struct TrustArgs {
    /// Accept any certificate (a lab's self-signed one)
    #[arg(long, conflicts_with_all = ["ca", "pin"])]
    pub insecure: bool,
    /// Check the certificate against the CA certificates in FILE (PEM)
    #[arg(long, value_name = "FILE", conflicts_with = "pin")]
    pub ca: Option<std::path::PathBuf>,
    /// Accept exactly the certificate with this SHA-256 fingerprint (serve prints it)
    #[arg(long, value_name = "SHA256")]
    pub pin: Option<String>,
}

/// `linerate rpm`.
#[derive(Debug, Args)]
pub struct RpmArgs {
    /// The server: HOST[:PORT] (https on 443 unless --http; port 80 then), or the
    /// configuration's URL (http://HOST:PORT/.well-known/nq)
    pub target: String,
    /// HOST[:PORT] is cleartext HTTP/2 (prior knowledge), not TLS
    #[arg(long)]
    pub http: bool,
    #[command(flatten)]
    pub trust: TrustArgs,
    /// Each direction's time limit, seconds
    #[arg(short, long, default_value_t = 20.0, value_parser = rpm_seconds)]
    pub time: f64,
    /// Load-generating connections at most, each direction
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub max_connections: u32,
    #[command(flatten)]
    pub source: BindArgs,
    #[command(flatten)]
    pub print: JsonFlag,
}

const NDT7_EXAMPLES: &str = "Examples:
  linerate serve --ndt7 :4443 &   then:
  linerate ndt7 server1:4443 --insecure       wss://, any certificate (a lab's own)
  linerate ndt7 server1:4443 --pin SHA256     the certificate serve printed
  linerate ndt7 ws://server1:8080 --download  cleartext (serve --ndt7-cleartext), one subtest
  linerate ndt7 server1:4443 --ca ca.pem --json
  linerate ndt7 --mlab                          the nearest M-Lab server, by M-Lab's locate API

The download is counted here as it arrives; the upload's figure is the server's own count
(its measurement messages), as M-Lab's clients report them.";

/// `linerate ndt7`.
#[derive(Debug, Args)]
pub struct Ndt7Args {
    /// The server: HOST[:PORT] (wss:// on 443, or ws:// on 80 with --cleartext), or a
    /// wss:// or ws:// URL
    #[arg(required_unless_present_any = ["mlab", "locate"])]
    pub target: Option<String>,
    /// Find the nearest M-Lab server through M-Lab's locate API (v2) and test against it;
    /// its certificate is checked against the system's CA certificates unless --ca or --pin
    #[arg(long, conflicts_with = "target")]
    pub mlab: bool,
    /// As --mlab, asking this locate service instead (one that answers as M-Lab's v2 does)
    #[arg(long, value_name = "URL", conflicts_with = "target")]
    pub locate: Option<String>,
    /// HOST[:PORT] is ws://, not wss:// (with --mlab or --locate: the located server's ws:// URLs)
    #[arg(long)]
    pub cleartext: bool,
    /// The download subtest only
    #[arg(long, conflicts_with = "upload")]
    pub download: bool,
    /// The upload subtest only
    #[arg(long)]
    pub upload: bool,
    #[command(flatten)]
    pub trust: TrustArgs,
    #[command(flatten)]
    pub print: JsonFlag,
}

const MESH_EXAMPLES: &str = "\
Examples:
  linerate mesh plan mesh.toml                  the schedule and the cycle time, nothing run
  linerate mesh run mesh.toml                   run until stopped (SIGTERM ends within 10 s)
  linerate mesh run mesh.toml --cycles 1 --key lab.key
  linerate mesh status lab                      the last figure of every pair of mesh 'lab'
  linerate mesh history lab h1 h2 --since 90d   a pair over time, hourly past the raw span
  linerate mesh run mesh.toml --store postgres://mesh@db.example/linerate
  linerate mesh run mesh.toml --metrics :9470   Prometheus scrapes /metrics; the grid at /
Every host runs 'linerate serve --key KEY'; the agents dial each other, so a mesh needs the
key (the file's key = PATH, or --key).";

#[derive(Debug, Subcommand)]
pub enum MeshCommand {
    /// Print the schedule a mesh file makes and its cycle time, running nothing
    #[command(after_help = MESH_EXAMPLES)]
    Plan(MeshPlanArgs),
    /// Run a mesh: the coordinator, until stopped or for --cycles
    #[command(after_help = MESH_EXAMPLES)]
    Run(MeshRunArgs),
    /// The last figure of every pair and test of a mesh, from the results database
    #[command(after_help = MESH_EXAMPLES)]
    Status(MeshStatusArgs),
    /// One pair's figures over time: its rows, and hourly aggregates where retention
    /// removed the rows
    #[command(after_help = MESH_EXAMPLES)]
    History(MeshHistoryArgs),
}

#[derive(Debug, Args)]
pub struct MeshHistoryArgs {
    /// The mesh's name, or its file
    pub mesh: String,
    /// The pair's source host
    pub src: String,
    /// The pair's destination host
    pub dst: String,
    /// One test only (default: every test of the pair)
    #[arg(long, value_name = "NAME")]
    pub test: Option<String>,
    /// How far back (30d, 12h, 2w)
    #[arg(long, value_name = "AGE", default_value = "30d", value_parser = age)]
    pub since: f64,
    #[command(flatten)]
    pub archive: ReadArchiveArgs,
    #[command(flatten)]
    pub print: JsonFlag,
}

#[derive(Debug, Args)]
pub struct MeshPlanArgs {
    /// The mesh file (TOML, docs/mesh.md)
    pub file: std::path::PathBuf,
    #[command(flatten)]
    pub print: JsonFlag,
}

#[derive(Debug, Args)]
pub struct MeshRunArgs {
    /// The mesh file (TOML, docs/mesh.md)
    pub file: std::path::PathBuf,
    /// Run every test now and stop after this many cycles of every exclusive test and
    /// runs of every light job; default: run until stopped
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub cycles: Option<u64>,
    /// Keep the results in this PostgreSQL archive (postgres://USER@HOST/DB), which many
    /// coordinators share, instead of the results database. TLS as its sslmode says:
    /// verify-full by default for a host that is not this machine (docs/mesh.md)
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// The archive's password: the first line of this file (else PGPASSWORD, else
    /// PGPASSFILE or ~/.pgpass), kept out of the command line that `ps` shows
    #[arg(long, value_name = "FILE")]
    pub store_password_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub print: JsonFlag,
    /// Serve the results over HTTP on this address: OpenMetrics at /metrics for Prometheus,
    /// the live grid at / (e.g. 0.0.0.0:9470, or :9470 for every address)
    #[arg(long, value_name = "ADDR", value_parser = metrics_addr)]
    pub metrics: Option<std::net::SocketAddr>,
    /// Also push every result to this Prometheus remote-write receiver
    /// (http://HOST:9090/api/v1/write; Mimir, Thanos and VictoriaMetrics take it too)
    #[arg(long, value_name = "URL")]
    pub remote_write: Option<String>,
}

/// Where `mesh status` and `mesh history` read a mesh's rows from.
#[derive(Debug, Args)]
pub struct ReadArchiveArgs {
    /// Read from this PostgreSQL archive (postgres://USER@HOST/DB) instead of the results
    /// database
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// The archive's password: the first line of this file (else PGPASSWORD, else
    /// PGPASSFILE or ~/.pgpass)
    #[arg(long, value_name = "FILE")]
    pub store_password_file: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct MeshStatusArgs {
    /// The mesh's name, or its file
    pub mesh: String,
    #[command(flatten)]
    pub archive: ReadArchiveArgs,
    #[command(flatten)]
    pub print: JsonFlag,
}

const SHOW_EXAMPLES: &str = "\
Examples:
  linerate show 12             run 12 as it printed when it ran, with its command line
  linerate show 12 -f m        rates in Mbit/s
  linerate show 12 --json      the stored document, byte for byte
Run numbers are in 'linerate history'.";

const EXPORT_EXAMPLES: &str = "\
Examples:
  linerate export 12                      the full JSON document on stdout
  linerate export 12 --format csv         intervals (or iterations, sweep points, trials) as CSV
  linerate export 12 --format csv -o run12.csv";

const REPORT_EXAMPLES: &str = "\
Examples:
  linerate report 12 --html run12.html           one run: its intervals, flows and CPU drawn
  linerate report 12 13 14 --html compare.html   several runs side by side
  linerate report 20 --html sweep.html           a sweep's points as curves
The file is self-contained (SVG inside, no scripts or fonts fetched).";

const PROFILE_EXAMPLES: &str = "\
Examples:
  linerate profile check profiles/rr-1byte.toml
  linerate profile check netperf.xml --set h=server1 --set proto=tcp
  linerate profile convert netperf.xml --set h=server1 --set proto=tcp > netperf.toml";

const DOCTOR_EXAMPLES: &str = "\
Examples:
  linerate doctor                      this host: queues, interrupts, offloads, rings, drops
  linerate doctor server1              and the path: round trip, windows against it, MTU
  linerate doctor --rtt 100ms --target 1G windows for a 100 ms path at 1 Gbit/s
  linerate doctor server1 --apply      also set the sysctls found (old values printed)
  linerate doctor server1 --json
Nothing is changed without --apply, and --apply changes sysctls only.";

const COPY_EXAMPLES: &str = "\
Examples:
  linerate serve --files /srv/data --key lab.key          on the server
  linerate copy big.dat server:incoming/ --key lab.key    push into a directory
  linerate copy server:big.dat . --key lab.key            pull
  linerate copy big.dat server:new/dir/ --mkdir --key lab.key   into directories made for it
  linerate copy -r results/ server:runs/ --key lab.key    a directory tree
  linerate copy big.dat server: --rate 800M --key lab.key a fixed rate (a dedicated circuit)
  linerate copy big.dat server: --null --key lab.key      memory to memory: nothing written
  linerate copy big.dat server: --lanes 4 --key lab.key   over 4 UDP flows and 4 sending threads
  linerate lab run --rtt 100ms --loss 1% --rate 1G --serve-args \"--files /tmp/in --key K\" -- \\
      linerate copy big.dat server:big.dat --key K
Run again after an interruption and the copy resumes: only chunks not yet verified and
synced at the destination move again. A copy over a path copied in the last hour begins
its rate search at half the rate that copy found; over a new path (or with --cold-start)
it sends its first datagrams back to back and begins at half the rate they arrived at.
The summary names what limited the copy (the sender's disk, the network, the receiver's
disk or CPU); --diagnose shows the split.";

const DISK_EXAMPLES: &str = "\
Examples:
  linerate disk /srv/data                 1 GiB written (synced) then read back uncached
  linerate disk /tmp --size 256M --json";

const RUN_EXAMPLES: &str = "\
Examples:
  linerate run profiles/tcp-transmit-scaling.toml --set conns=100
  linerate run profiles/rr-1byte.toml --set server=10.0.0.2 --json > rr.json
  linerate run netperf.xml --set h=10.0.0.2 --set proto=tcp     a uperf profile, as uperf runs it
  linerate run profiles/four-clients.toml --set server=10.0.0.1 --set c1=10.0.0.11 ...
Groups run where their 'host' says (an agent: 'linerate serve' there), or here; each
connection's peer is the agent its 'remote' names ('local': the host running the group).
${name} values come from --set, then the environment, then the profile's [vars].";

/// The `--set` flag of profile commands.
#[derive(Debug, Args)]
pub struct SetArgs {
    /// Fill ${NAME} (uperf: $NAME) in the profile; repeat for more
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = set_pair)]
    pub set: Vec<(String, String)>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The profile: linerate TOML, or uperf XML (.xml)
    pub profile: std::path::PathBuf,
    #[command(flatten)]
    pub set: SetArgs,
    #[command(flatten)]
    pub print: JsonFlag,
    /// The longest the run may take, in seconds [default: its timed transactions + 120]
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true, value_parser = positive_seconds)]
    pub limit: Option<f64>,
    /// An agent silent this long (seconds) is lost and the run ends incomplete
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS", allow_negative_numbers = true, value_parser = positive_seconds)]
    pub control_timeout: f64,
    /// How far ahead the synchronized start is announced, in seconds
    #[arg(long, default_value_t = 0.5, value_name = "SECONDS", allow_negative_numbers = true, value_parser = positive_seconds)]
    pub lead: f64,
    /// Format to report in: a adaptive, k/m/g bits, K/M/G bytes
    #[arg(short, long, default_value = "a", value_parser = scale)]
    pub format: Scale,
}

#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// Print a profile (uperf XML or TOML) as linerate TOML, references filled
    #[command(
        after_help = "Examples:\n  linerate profile convert netperf.xml --set h=server1 --set proto=tcp > netperf.toml"
    )]
    Convert(ProfileFileArgs),
    /// Check a profile and print what it runs
    #[command(after_help = PROFILE_EXAMPLES)]
    Check(ProfileFileArgs),
}

#[derive(Debug, Args)]
pub struct ProfileFileArgs {
    pub profile: std::path::PathBuf,
    #[command(flatten)]
    pub set: SetArgs,
}

const SWEEP_EXAMPLES: &str = "\
Examples:
  linerate sweep --parallel 1,8,100,1000 -t 5          TCP goodput over flow counts, loopback
  linerate sweep server1 --parallel 8,32 --window 256k,32k,auto --length 8k,64k
  linerate sweep server1 --udp --rate 100M,500M,1G --length 1400
  linerate sweep server1 --test rr --request 1,1k,64k --response 1,1k --parallel 1,8
  linerate sweep server1 --test crr --parallel 1,4,16 --iterations 3 --json > crr.json
Points run in a fixed order, --parallel varying slowest. A point that fails is reported
and the sweep goes on.";

const HISTORY_EXAMPLES: &str = "\
Examples:
  linerate history                      the last 20 runs
  linerate history --test tcp_rr --since 7d
  linerate history --target server1 --limit 0 --json
  linerate history --path \"loss 2%\"         runs over a lab path that drops 2 % each way
Each row names the path a run crossed: a lab's or impair's figures, or \"direct\".";

const COMPARE_EXAMPLES: &str = "\
Examples:
  linerate compare 12 15                two runs side by side, deltas against the first
  linerate compare 12 15 19 --json
Runs made with --iterations or --confidence are judged with Welch's t test: a difference
is called significant only when the iterations' spread cannot explain it.";

/// `--iterations` and `--confidence`, for every kind of test.
#[derive(Debug, Clone, Copy, Args)]
pub struct RepeatArgs {
    /// Run the test N times and report the mean with its confidence interval (with
    /// --confidence: at most N times) [default with --confidence: 10]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub iterations: Option<u32>,
    /// Repeat until the LEVEL % confidence interval of the mean is within ±WIDTH % of it
    /// (at least 3 runs, at most --iterations) [e.g. 99,5]
    #[arg(long, value_name = "LEVEL,WIDTH", value_parser = confidence)]
    pub confidence: Option<linerate_report::stats::Confidence>,
}

/// Which kind of test a sweep runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SweepTest {
    Stream,
    Rr,
    Crr,
}

#[derive(Debug, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// The test at every point
    #[arg(long, value_enum, default_value = "stream")]
    pub test: SweepTest,
    /// Flow counts to sweep (comma-separated) [default: 1]
    #[arg(short = 'P', long, value_name = "LIST", value_delimiter = ',', value_parser = flows)]
    pub parallel: Vec<u32>,
    /// Socket buffer sizes; 'auto' keeps kernel autotuning [k|m|g]
    #[arg(short, long, value_name = "LIST", value_delimiter = ',', value_parser = window_or_auto)]
    pub window: Vec<Option<u64>>,
    /// Stream: bytes per write or UDP datagram [k|m suffixes]
    #[arg(short, long, value_name = "LIST", value_delimiter = ',', value_parser = length)]
    pub length: Vec<u64>,
    /// rr and crr: bytes per request [k|m suffixes] [default: 1]
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = message)]
    pub request: Vec<u64>,
    /// rr and crr: bytes per response [k|m suffixes] [default: 1]
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = message)]
    pub response: Vec<u64>,
    /// rr: transactions in flight per flow
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub outstanding: Vec<u32>,
    /// Per-flow pacing: bit/s for stream, transactions/s for rr; 0 is unpaced [k|m|g]
    #[arg(short = 'b', long, value_name = "LIST", value_delimiter = ',', value_parser = rate)]
    pub rate: Vec<u64>,
    /// Congestion control algorithms
    #[arg(short = 'C', long, value_name = "LIST", value_delimiter = ',')]
    pub congestion: Vec<String>,
    /// UDP instead of TCP (stream and rr)
    #[arg(short, long)]
    pub udp: bool,
    #[command(flatten)]
    pub direction: DirectionArgs,
    /// Stream: disable Nagle's algorithm (rr and crr always do, as they do alone)
    #[arg(short = 'N', long)]
    pub nodelay: bool,
    /// Worker threads on this side (default: chosen for each point's flow count)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub threads: Option<u32>,
    /// Seconds to measure at each point, after --omit
    #[arg(short, long, default_value_t = 5.0, allow_negative_numbers = true, value_parser = positive_seconds)]
    pub time: f64,
    /// Warm-up seconds left out at each point
    #[arg(short = 'O', long, default_value_t = 0.0, allow_negative_numbers = true, value_parser = seconds)]
    pub omit: f64,
    #[command(flatten)]
    pub secure: TlsArgs,
    #[command(flatten)]
    pub repeat: RepeatArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Only runs of this test (tcp_stream, udp_stream, tcp_rr, udp_rr, tcp_crr, sweep,
    /// udp_find_max, copy); a sweep of the test matches too
    #[arg(long)]
    pub test: Option<String>,
    /// Only runs against this server, as it was named ("loopback" for local runs)
    #[arg(long)]
    pub target: Option<String>,
    /// Only runs since a time (2026-11-01, 2026-11-01T08:00:00Z) or a while ago (2h, 7d)
    #[arg(long, value_name = "WHEN", value_parser = since)]
    pub since: Option<f64>,
    /// Only runs whose path holds this text, any case ("loss 2%", "lab wan", "direct")
    #[arg(long, value_name = "TEXT")]
    pub path: Option<String>,
    /// The most runs to list; 0 for all
    #[arg(short = 'n', long, default_value_t = 20)]
    pub limit: usize,
    #[command(flatten)]
    pub print: JsonFlag,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The run's id (see 'linerate history')
    pub id: i64,
    #[command(flatten)]
    pub print: JsonFlag,
    /// Units of printed figures: a (adaptive), k, m, g
    #[arg(short, long, default_value = "a", value_parser = scale)]
    pub format: Scale,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Two or more run ids; deltas are against the first
    #[arg(required = true, num_args = 2..)]
    pub ids: Vec<i64>,
    /// The confidence level of the significance test, in percent
    #[arg(long, default_value_t = 95.0, value_parser = level)]
    pub level: f64,
    #[command(flatten)]
    pub print: JsonFlag,
}

/// What `export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    Json,
    Csv,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The run's id
    pub id: i64,
    /// json: the full document; csv: one row per interval (a test), per iteration (a
    /// repeated test), per point (a sweep) or per trial (a --find-max search)
    #[arg(long, value_enum, default_value = "json")]
    pub format: ExportFormat,
    /// Write to FILE instead of standard output
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Run ids to draw; two or more are also compared
    #[arg(required = true, num_args = 1..)]
    pub ids: Vec<i64>,
    /// The HTML file to write
    #[arg(long, value_name = "FILE")]
    pub html: std::path::PathBuf,
}

const IPERF2_EXAMPLES: &str = "\
Examples:
  linerate iperf2 -c server.example -P 4 -t 30        TCP, 4 connections, against iperf -s
  linerate iperf2 -c server.example -u -b 100m        UDP at 100 Mbit/s (k, m, g: 1000s)
  linerate iperf2 -c server.example -u -b 500pps --trip-times
                                                      the server's one-way delays, in its report
  linerate iperf2 -c server.example -n 1G -i 1        1 GiB (K, M, G: 1024s), a line a second
  linerate iperf2 -c server.example -d -L 5002        the server connects back to 5002 and sends too
  linerate iperf2 -c server.example --json            linerate's own result document

The lines are iperf 2's plain client lines (its connections, its figures, a UDP flow's
datagrams sent and its server's report), so scripts that read iperf 2's output read these;
-e is taken and changes nothing (its write counts are not kept). An iperf 2 server tells a
TCP client nothing: over TCP the figures are this side's, the sender's. Every run is kept
like any other (history, show). iperf 2 servers are served by linerate serve (docs/iperf2.md).";

const IPERF3_EXAMPLES: &str = "\
Examples:
  linerate iperf3 -c server.example -P 4 -t 30   TCP, 4 streams, against an iperf3 server
  linerate iperf3 -c server.example -R            the server sends
  linerate iperf3 -c server.example -u -b 1G      UDP at 1 Gbit/s per stream
  linerate iperf3 -c server.example -n 1G -J      1 GiB, output shaped as iperf3 -J
  linerate iperf3 -c server.example --json        linerate's own result document
  linerate iperf3 -s -p 5201                      serve iperf3 (and linerate) clients

Figures are linerate's: receiver figures come from the receiving end (the server's own
counts in the results exchange when it receives), over the window after --omit.";

/// iperf 2's own client flags, for a test against an iperf 2 server.
#[derive(Debug, Args)]
pub struct Iperf2Args {
    /// Run as a client against the iperf 2 server at HOST
    #[arg(short = 'c', long, value_name = "HOST", required = true)]
    pub client: String,
    /// Server port
    #[arg(short, long, default_value_t = linerate_proto::iperf2::DEFAULT_PORT)]
    pub port: u16,
    /// UDP rather than TCP
    #[arg(short, long)]
    pub udp: bool,
    /// Seconds to transmit (ignored with -n)
    #[arg(short, long, default_value = "10", value_parser = |t: &str| seconds_within(t, 0.01, 86_400.0))]
    pub time: f64,
    /// Bytes to transmit per connection instead of a time [kmg: 1000s, KMG: 1024s]
    #[arg(short = 'n', long = "num", value_parser = iperf2_size)]
    pub num: Option<u64>,
    /// Bytes a write or a datagram [kmKM] (iperf 2's defaults: TCP 128K, UDP 1470, 1450 over IPv6)
    #[arg(short = 'l', long = "len", value_parser = iperf2_size)]
    pub len: Option<u64>,
    /// Rate in bits a second [kmgKMG], or packets a second (500pps); UDP's default 1m
    #[arg(short = 'b', long = "bandwidth", value_parser = iperf2_rate)]
    pub bandwidth: Option<Iperf2RateValue>,
    /// Parallel connections
    #[arg(short = 'P', long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=128))]
    pub parallel: u32,
    /// Seconds between interval lines (0: none)
    #[arg(short, long, default_value = "0", value_parser = interval)]
    pub interval: f64,
    /// Enhanced reports: taken, and the lines stay iperf 2's plain ones
    #[arg(short = 'e', long)]
    pub enhanced: bool,
    /// Real-time scheduling for the test's threads (round-robin, priority 10; root or
    /// CAP_SYS_NICE): a timer's wake-up takes a CPU from a busy thread at once
    #[arg(short = 'z', long)]
    pub realtime: bool,
    /// Socket buffer size [KM]
    #[arg(short = 'w', long, value_parser = iperf2_size)]
    pub window: Option<u64>,
    /// TCP_NODELAY
    #[arg(short = 'N', long)]
    pub nodelay: bool,
    /// Every datagram's (UDP) or write's (TCP) send time is the server's to read one-way
    /// delays from (where it takes the two clocks as one)
    #[arg(long)]
    pub trip_times: bool,
    /// Video frames, as iperf 2's --isochronous[=FPS:MEAN,STDEV] [default: 60:20m,0]: in
    /// datagrams (-u), or a TCP write each
    #[arg(long, value_name = "FPS:MEAN[,STDEV]", num_args = 0..=1, require_equals = true, default_missing_value = linerate_model::video::DEFAULT_SPEC, value_parser = isochronous)]
    pub isochronous: Option<linerate_model::video::VideoSettings>,
    /// The server sends and this side receives (over TCP on the same connections)
    #[arg(short = 'R', long)]
    pub reverse: bool,
    /// Both ends send at once: on each TCP connection, or each UDP socket (-u)
    #[arg(long, conflicts_with = "reverse")]
    pub full_duplex: bool,
    /// The server connects back to -L and sends a test too: at once (-d), or after this one (-r)
    #[arg(short = 'd', long = "dualtest", conflicts_with = "tradeoff")]
    pub dual: bool,
    /// As -d, the test back once this one has ended
    #[arg(short = 'r', long)]
    pub tradeoff: bool,
    /// Where the server connects back for -d or -r [default: 5001]
    #[arg(short = 'L', long = "listenport", value_name = "PORT")]
    pub listen_port: Option<u16>,
    /// Seconds to wait for each connection
    #[arg(long, default_value = "10", value_parser = |t: &str| seconds_within(t, 0.1, 300.0))]
    pub connect_timeout: f64,
    /// Print linerate's JSON document instead of iperf 2's lines
    #[arg(long)]
    pub json: bool,
}

/// iperf3's own flags, for a test against an iperf3 server or for serving iperf3 clients.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("role").required(true).args(["client", "server"])))]
pub struct Iperf3Args {
    /// Run as a client against the iperf3 server at HOST
    #[arg(short = 'c', long, value_name = "HOST")]
    pub client: Option<String>,
    /// Run as a server (the same as `linerate serve`, which serves iperf3 clients too)
    #[arg(short = 's', long)]
    pub server: bool,
    /// Server port
    #[arg(short, long, default_value_t = 5201)]
    pub port: u16,
    /// Server: the address to listen on
    #[arg(short = 'B', long, value_name = "ADDR", requires = "server")]
    pub bind: Option<std::net::IpAddr>,
    /// Server: the RSA private key (PEM) clients' credentials are encrypted to
    #[arg(long, value_name = "PATH", requires_all = ["server", "authorized_users_path"])]
    pub rsa_private_key_path: Option<std::path::PathBuf>,
    /// Server: the users file ("user,sha256hex" lines, the hash of "{user}password")
    #[arg(long, value_name = "PATH", requires_all = ["server", "rsa_private_key_path"])]
    pub authorized_users_path: Option<std::path::PathBuf>,
    /// Server: seconds a client's credentials' time may differ from ours
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(i64).range(0..=86_400))]
    pub time_skew_threshold: i64,
    /// Server: take credentials padded with PKCS #1 v1.5 too (iperf3 before 3.17, or
    /// clients with --use-pkcs1-padding); OAEP only without it
    #[arg(long, requires = "rsa_private_key_path")]
    pub use_pkcs1_padding: bool,
    /// Seconds to transmit (ignored with -n or -k)
    #[arg(short, long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub time: u64,
    /// Bytes to transmit instead of a time [k|m|g suffixes, binary]
    #[arg(short = 'n', long, value_parser = count_bytes, conflicts_with = "blockcount")]
    pub bytes: Option<u64>,
    /// Blocks (writes or datagrams) to transmit instead of a time
    #[arg(short = 'k', long, value_parser = clap::value_parser!(u64).range(1..))]
    pub blockcount: Option<u64>,
    /// Parallel streams (iperf3 servers take at most 128)
    #[arg(short = 'P', long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=128))]
    pub parallel: u32,
    /// The server sends
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both send at once
    #[arg(long)]
    pub bidir: bool,
    /// UDP instead of TCP
    #[arg(short, long)]
    pub udp: bool,
    /// Rate per stream in bit/s [k|m|g suffixes] (UDP default 1M; TCP default unlimited)
    #[arg(short = 'b', long, value_parser = rate)]
    pub bitrate: Option<u64>,
    /// Block size: bytes per write, or per UDP datagram [k|m suffixes] (TCP default 128K;
    /// UDP default the path's largest unfragmented datagram)
    #[arg(short, long, value_parser = length)]
    pub length: Option<u64>,
    /// Socket buffer size on both ends [k|m suffixes]
    #[arg(short, long, value_parser = window)]
    pub window: Option<u64>,
    /// TCP maximum segment size
    #[arg(short = 'M', long = "set-mss", value_parser = clap::value_parser!(u32).range(88..=9000))]
    pub mss: Option<u32>,
    /// Set TCP_NODELAY
    #[arg(short = 'N', long = "no-delay")]
    pub nodelay: bool,
    /// TCP congestion control algorithm
    #[arg(short = 'C', long)]
    pub congestion: Option<String>,
    /// Seconds of warm-up left out of the figures
    #[arg(short = 'O', long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=600))]
    pub omit: u64,
    /// Seconds between interval reports (0 turns them off)
    #[arg(short, long, default_value_t = 1.0, value_parser = interval)]
    pub interval: f64,
    /// Print a document with iperf3 -J's keys
    #[arg(short = 'J')]
    pub iperf3_json: bool,
    /// Print linerate's result document
    #[arg(long, conflicts_with = "iperf3_json")]
    pub json: bool,
    /// Print iperf3 3.17's --json-stream lines: one JSON object per line (start, each
    /// interval as it ends, end)
    #[arg(long, conflicts_with_all = ["iperf3_json", "json"])]
    pub json_stream: bool,
    /// Ask the server for its own output, and print it
    #[arg(long)]
    pub get_server_output: bool,
    /// 64-bit UDP packet counters
    #[arg(long)]
    pub udp_counters_64bit: bool,
    /// Accepted for iperf3 compatibility; linerate always writes from memory
    #[arg(short = 'Z', long)]
    pub zerocopy: bool,
    /// Prefix for every output line
    #[arg(short = 'T', long)]
    pub title: Option<String>,
    /// Milliseconds to wait for the control connection
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub connect_timeout: u64,
    /// Units of printed figures: a (adaptive), k, m, g
    #[arg(short, long, default_value = "a", value_parser = scale)]
    pub format: Scale,
}

/// The server a test runs against, where its packets leave from and how they are marked,
/// defined once for `stream`, `rr`, `crr` and `sweep`.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// Server to test against; without it, an in-process server on loopback measures this machine
    pub host: Option<String>,
    /// Server port [default: 5201; to a multicast group, 5001 (iperf 2's)]
    #[arg(short, long)]
    pub port: Option<u16>,
    /// Seconds to wait for each connection to be accepted
    #[arg(long, default_value_t = 5.0, allow_negative_numbers = true, value_parser = positive_seconds)]
    pub connect_timeout: f64,
    /// Leave from this local address (every connection and datagram of the test)
    #[arg(short = 'B', long, value_name = "ADDR")]
    pub bind: Option<std::net::IpAddr>,
    /// Leave through this interface or VRF device (SO_BINDTODEVICE): only its routes are used
    #[arg(long, value_name = "IFACE", value_parser = linerate_model::interface_name)]
    pub bind_dev: Option<String>,
    /// Reach the server over IPv4 only
    #[arg(short = '4', long = "ipv4", conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Reach the server over IPv6 only
    #[arg(short = '6', long = "ipv6")]
    pub ipv6: bool,
    /// Mark every packet of the test, both ways, with this DSCP: a name (EF, AF41, CS1, LE, BE) or 0-63
    #[arg(long, value_name = "NAME|N", value_parser = dscp)]
    pub dscp: Option<u8>,
    /// Send ECN-capable packets both ways: UDP datagrams carry ECT(0); TCP asks for ECN (needs net.ipv4.tcp_ecn=1 on the client); QUIC sends ECT(0) while its ECN validation holds, with or without it
    #[arg(long)]
    pub ecn: bool,
    /// Open the data connections as MPTCP (the kernel's path manager adds subflows over
    /// the host's other addresses, `ip mptcp endpoint`); the server needs `serve --mptcp`
    #[arg(long)]
    pub mptcp: bool,
}

impl ServerArgs {
    /// The server's port: `--port`, else linerate's.
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(5201)
    }

    /// The multicast group the host names, where it names one (`stream GROUP -u`).
    pub fn multicast_group(&self) -> Option<std::net::IpAddr> {
        linerate_model::multicast::group_named(self.host.as_deref()?)
    }

    /// The marks the test's packets carry, when the user asked for any.
    pub fn marks(&self) -> Option<linerate_model::marks::Marks> {
        (self.dscp.is_some() || self.ecn).then(|| linerate_model::marks::Marks {
            dscp: self.dscp.unwrap_or(0),
            ecn: self.ecn,
        })
    }

    /// Where the test's sockets leave from, when the user said.
    pub fn source(&self) -> Option<linerate_model::Source> {
        (self.bind.is_some() || self.bind_dev.is_some() || self.mptcp).then(|| {
            linerate_model::Source {
                address: self.bind,
                device: self.bind_dev.clone(),
                mptcp: self.mptcp,
            }
        })
    }

    /// The IP version asked for: `-4`, `-6`, else that of `--bind`'s address.
    pub fn family(&self) -> Result<linerate_campaign::test::Family, String> {
        linerate_campaign::test::Family::asked(
            self.ipv4,
            self.ipv6,
            self.bind,
            self.host.as_deref(),
        )
    }
}

/// Which way a stream's data goes, defined once for `stream` and `sweep`.
#[derive(Debug, Clone, Args)]
pub struct DirectionArgs {
    /// The server sends and the client receives (a sweep: its stream tests)
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both ends send at once, on separate connections (a sweep: its stream tests)
    #[arg(long)]
    pub bidir: bool,
}

/// `-J/--json`, defined once for every command that prints a result (`linerate iperf3`
/// alone differs: its `-J` is iperf3's document and `--json` linerate's, as iperf3 users
/// expect).
#[derive(Debug, Clone, Args)]
pub struct JsonFlag {
    /// Print JSON instead of text (a run's document as docs/results.md defines it, or the
    /// command's rows)
    #[arg(short = 'J', long)]
    pub json: bool,
}

/// How a test's result is printed, defined once for `stream`, `rr`, `crr` and `sweep`.
#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    #[command(flatten)]
    pub print: JsonFlag,
    /// Units of printed figures: a (adaptive), k, m, g
    #[arg(short, long, default_value = "a", value_parser = scale)]
    pub format: Scale,
}

/// How a single test measures, defined once for `stream`, `rr` and `crr`.
#[derive(Debug, Clone, Args)]
pub struct MeasureArgs {
    /// Worker threads on this side (default: one per flow up to 16 flows, else one per CPU)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub threads: Option<u32>,
    /// Warm-up seconds to leave out of the summary
    #[arg(short = 'O', long, default_value_t = 0.0, allow_negative_numbers = true, value_parser = seconds)]
    pub omit: f64,
    /// Seconds between interval reports; 0 for none
    #[arg(short, long, default_value_t = 1.0, value_parser = interval)]
    pub interval: f64,
    /// Socket buffer size on both ends (turns kernel autotuning off; without it a UDP
    /// socket asks for a 4 MiB receive buffer, less over many flows) [k|m|g]
    #[arg(short, long, value_parser = window)]
    pub window: Option<u64>,
    /// Do not read the host's own counters around the window (interrupts, softirqs,
    /// softnet drops, NIC queues, protocol counters); both ends read them by default
    #[arg(long)]
    pub no_observe: bool,
    /// Real-time scheduling for this side's threads, and the in-process server's
    /// (round-robin, priority 10; root or CAP_SYS_NICE): a worker woken by its timer takes
    /// a CPU from a busy thread at once (iperf 2's -z)
    #[arg(short = 'z', long)]
    pub realtime: bool,
}

/// Flags shared by `rr` and `crr`.
#[derive(Debug, Clone, Args)]
pub struct TransactionArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(flatten)]
    pub measure: MeasureArgs,
    /// Bytes per request [k|m suffixes, binary]
    #[arg(long, default_value = "1", value_parser = message)]
    pub request: u64,
    /// Bytes per response [k|m suffixes, binary]
    #[arg(long, default_value = "1", value_parser = message)]
    pub response: u64,
    /// Parallel flows, each with its own transactions
    #[arg(short = 'P', long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub parallel: u32,
    /// Seconds to measure, after --omit
    #[arg(short, long, default_value_t = 10.0, allow_negative_numbers = true, value_parser = positive_seconds)]
    pub time: f64,
    /// Leave Nagle's algorithm on (rr and crr set TCP_NODELAY by default)
    #[arg(long)]
    pub no_nodelay: bool,
    /// Congestion control algorithm on both ends (e.g. cubic, reno, bbr)
    #[arg(short = 'C', long, value_name = "ALGO")]
    pub congestion: Option<String>,
    /// Busy-poll the device queue for up to USEC microseconds on a blocking receive
    /// (SO_BUSY_POLL), on both ends
    #[arg(long, value_name = "USEC", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub busy_poll: Option<u32>,
    /// Pin this side's workers to these CPUs, worker i on the i-th (comma-separated).
    /// Without it each requester stays on a CPU of its own and each responder moves to
    /// the CPU its requests arrive on, so one round trip wakes no other CPU
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = clap::value_parser!(u16))]
    pub cpu: Vec<u16>,
    #[command(flatten)]
    pub output: OutputArgs,
    /// Show figures per flow
    #[arg(long)]
    pub per_flow: bool,
    #[command(flatten)]
    pub repeat: RepeatArgs,
}

/// Encryption of the data connections (`stream` and `rr`).
#[derive(Debug, Args, Clone, Default)]
pub struct TlsArgs {
    /// Encrypt every data connection with TLS 1.3 (rustls) after its preface; the report
    /// adds the handshake time and what sealing and opening records cost each end
    #[arg(long)]
    pub tls: bool,
    /// TLS 1.3 cipher: aes128-gcm, aes256-gcm or chacha20-poly1305 [default: aes256-gcm]
    #[arg(long, value_name = "CIPHER", value_parser = cipher)]
    pub cipher: Option<String>,
    /// Hand the TLS record layer to the kernel (kTLS) on both ends where it can take it;
    /// the report says when an end could not
    #[arg(long, requires = "tls")]
    pub ktls: bool,
    /// Trust certificates that chain to the CA certificates in FILE (PEM) and name the
    /// server, instead of the certificate the server announces on the control connection
    #[arg(long, value_name = "FILE")]
    pub ca: Option<std::path::PathBuf>,
    /// The in-process server's certificate chain (PEM), used without HOST [default: a
    /// self-signed one made at start]
    #[arg(long, value_name = "FILE", requires = "cert_key")]
    pub cert: Option<std::path::PathBuf>,
    /// The private key (PEM) of --cert
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub cert_key: Option<std::path::PathBuf>,
}

impl TlsArgs {
    /// What the test's config carries: `None` for a plain test.
    pub fn settings(&self, quic: bool) -> Option<linerate_model::TlsSettings> {
        (self.tls || quic).then(|| linerate_model::TlsSettings {
            cipher: self
                .cipher
                .clone()
                .unwrap_or_else(|| linerate_model::DEFAULT_CIPHER.into()),
            ktls: self.ktls,
        })
    }
}

fn cipher(text: &str) -> Result<String, String> {
    linerate_tls::Cipher::from_str(text).map(|c| c.name().to_string())
}

#[derive(Debug, Args)]
pub struct RrArgs {
    #[command(flatten)]
    pub common: TransactionArgs,
    #[command(flatten)]
    pub secure: TlsArgs,
    /// UDP instead of TCP: one datagram per request and per response
    #[arg(short, long)]
    pub udp: bool,
    /// Transactions in flight per flow (closed loop); with --rate, the most in flight
    /// [default: 1; with --rate, 128]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub outstanding: Option<u32>,
    /// Open loop: start this many transactions per second per flow, each timed from when
    /// it fell due, so a stall shows in the tail [k|m suffixes, decimal]
    #[arg(short = 'b', long, value_parser = per_second)]
    pub rate: Option<u64>,
    /// Run N bulk TCP flows (client to server) beside the transactions and report their
    /// goodput too, and what they added to the transactions' round trip alone (2 s of them
    /// first), graded as `rpm` grades it
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=4096))]
    pub load: u32,
}

#[derive(Debug, Args)]
pub struct CrrArgs {
    #[command(flatten)]
    pub common: TransactionArgs,
}

/// `linerate copy`.
#[derive(Debug, Args)]
pub struct CopyArgs {
    /// What to copy: a local path, or HOST:PATH on a server started with --files
    pub source: String,
    /// Where to: HOST:PATH (a trailing / or an empty PATH copies into that directory), or a
    /// local path
    pub destination: String,
    /// Copy directories and everything under them
    #[arg(short, long)]
    pub recursive: bool,
    /// Create missing directories at the destination (without it a missing directory is
    /// an error, as for scp; -r creates the tree's own)
    #[arg(long)]
    pub mkdir: bool,
    /// The server's port
    #[arg(short, long, default_value_t = 5201)]
    pub port: u16,
    /// Leave from this local address: the control connection and the datagrams
    #[arg(short = 'B', long, value_name = "ADDR")]
    pub bind: Option<std::net::IpAddr>,
    /// Leave through this interface or VRF device (SO_BINDTODEVICE): the control
    /// connection and the datagrams
    #[arg(long, value_name = "IFACE", value_parser = linerate_model::interface_name)]
    pub bind_dev: Option<String>,
    /// Mark every packet of the copy both ways with this DSCP (EF, AF41, CS1, or 0-63):
    /// the datagrams and the control connection, the server's too once asked
    #[arg(long, value_name = "NAME|N", value_parser = dscp)]
    pub dscp: Option<u8>,
    /// ECN: the data datagrams carry ECT(0); the receiver counts those an AQM marked CE
    /// and says so in its ACKs, and the sender takes a round with a mark as congested
    /// (a cut of its rate, as for loss above the path's own)
    #[arg(long)]
    pub ecn: bool,
    /// Spread the datagrams over N UDP flows (lanes), each a pair of ports and a sending
    /// thread of its own: for paths that keep a flow to one link, queue or policer (ECMP,
    /// a LAG, per-flow limits) and senders one core cannot keep up with; one rate control
    /// and one file either way
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=16))]
    pub lanes: u8,
    /// Send at this fixed rate instead of finding the path's [k|m|g suffixes, bit/s]
    #[arg(long, value_name = "RATE", value_parser = per_second)]
    pub rate: Option<u64>,
    /// Never send faster than this while finding the path's rate [bit/s]
    #[arg(long, value_name = "RATE", value_parser = per_second, conflicts_with = "rate")]
    pub max_rate: Option<u64>,
    /// Find the path's rate from scratch (a packet train of the first datagrams, read a
    /// round trip in), even where a copy over the same path in the last hour left it
    /// (kept in $XDG_STATE_HOME/linerate/paths.json; pulls: by the server)
    #[arg(long, conflicts_with = "rate")]
    pub cold_start: bool,
    /// Chunk size: the unit hashed, written and resumed (a power of two, 64K to 64M)
    #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = chunk_size)]
    pub chunk: u64,
    /// Chunks the receiver holds in memory for the sender (its flow-control window)
    #[arg(long, value_name = "CHUNKS", default_value_t = 256, value_parser = clap::value_parser!(u64).range(4..=65_536))]
    pub window: u64,
    /// Write nothing at the destination: hashes are still checked (memory to memory)
    #[arg(long)]
    pub null: bool,
    /// The largest datagram payload, below what the path MTU allows [bytes]
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(64..=65_000))]
    pub block: Option<u32>,
    /// Send datagrams without a UDP checksum (IPv4, pushes): the chunk hashes alone catch
    /// corruption, and a host without checksum offload saves the software sum
    #[arg(long)]
    pub no_udp_checksum: bool,
    /// Encrypt the data: every datagram's payload sealed with ChaCha20-Poly1305 under a
    /// key only this session holds (the control messages are authenticated, not encrypted)
    #[arg(long)]
    pub encrypt: bool,
    /// Print where the time went on both ends and what limited the copy
    #[arg(long)]
    pub diagnose: bool,
    /// No progress bar
    #[arg(short, long)]
    pub quiet: bool,
    #[command(flatten)]
    pub print: JsonFlag,
}

/// `linerate doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// A host running `linerate serve`, to measure the round trip and the path MTU to
    pub host: Option<String>,
    /// The server's port
    #[arg(short, long, default_value_t = 5201)]
    pub port: u16,
    /// Judge windows for this round trip in milliseconds (instead of measuring one)
    #[arg(long, value_name = "MS", value_parser = positive_millis)]
    pub rtt: Option<f64>,
    /// The rate windows must carry (default: the route's link speed, else 10G)
    #[arg(long, value_name = "RATE", value_parser = per_second)]
    pub target: Option<u64>,
    /// Set the sysctls the findings name, printing the old values for undo
    #[arg(long)]
    pub apply: bool,
    #[command(flatten)]
    pub print: JsonFlag,
}

/// `linerate disk`.
#[derive(Debug, Args)]
pub struct DiskArgs {
    /// A directory on the file system to measure (a scratch file is made and removed)
    pub path: std::path::PathBuf,
    /// Bytes to write and read back
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = count_bytes)]
    pub size: u64,
    #[command(flatten)]
    pub print: JsonFlag,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (default: every IPv6 and IPv4 address)
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::IpAddr>,
    /// Real-time scheduling for every thread of the server (round-robin, priority 10; root
    /// or CAP_SYS_NICE), as iperf 2's -s -z: the tests it sends keep their schedule beside
    /// busy threads
    #[arg(short = 'z', long)]
    pub realtime: bool,
    /// Accept MPTCP connections (IPPROTO_MPTCP): clients' `--mptcp` tests get their
    /// subflows; plain TCP clients are served as before
    #[arg(long)]
    pub mptcp: bool,
    /// Serve the tests this server ran over HTTP on this address: OpenMetrics at /metrics
    /// (goodput it received, retransmits and CPU per gigabit when it sent), a grid at /
    #[arg(long, value_name = "ADDR", value_parser = metrics_addr)]
    pub metrics: Option<std::net::SocketAddr>,
    /// Serve responsiveness tests (RPM) over cleartext HTTP/1.1 and HTTP/2 on this address:
    /// the configuration at /.well-known/nq for `linerate rpm`, networkQuality and mach
    #[arg(long, value_name = "ADDR", value_parser = metrics_addr)]
    pub http: Option<std::net::SocketAddr>,
    /// The same over TLS (--cert and --cert-key, else a self-signed certificate)
    #[arg(long, value_name = "ADDR", value_parser = metrics_addr)]
    pub https: Option<std::net::SocketAddr>,
    /// Serve ndt7 (M-Lab's speed test: its browser library, ndt7-client, `linerate ndt7`)
    /// on this address, over TLS as --https
    #[arg(long, value_name = "ADDR", value_parser = metrics_addr)]
    pub ndt7: Option<std::net::SocketAddr>,
    /// --ndt7 in cleartext (ws://), for a lab
    #[arg(long, requires = "ndt7", conflicts_with = "require_tls")]
    pub ndt7_cleartext: bool,
    /// Port for control and data connections
    #[arg(short, long, default_value_t = 5201)]
    pub port: u16,
    #[command(flatten)]
    pub iperf2: Iperf2ServeArgs,
    /// Tests served at once; more are refused as busy
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_tests: u32,
    /// Connections one test may open
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_flows: u32,
    /// Longest test (warm-up included), in seconds
    #[arg(long, default_value_t = 86_400.0, allow_negative_numbers = true, value_parser = positive_seconds)]
    pub max_duration: f64,
    /// Worker threads per test (default: one per flow up to 16 flows, else one per CPU)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub threads: Option<u32>,
    /// Seconds a client may take over each handshake step before it is dropped
    #[arg(long, default_value_t = 10.0, allow_negative_numbers = true, value_parser = positive_seconds)]
    pub handshake_timeout: f64,
    /// Seconds an agent connection with nothing running may stay silent
    #[arg(long, default_value_t = 120.0, allow_negative_numbers = true, value_parser = positive_seconds)]
    pub idle_timeout: f64,
    /// Connections held at once (in their handshake or session); beyond it new ones are
    /// closed at once, or take the place of a waiting one from the largest holder
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_connections: u32,
    /// Connections one client may hold at once [default: no limit of its own]; a client
    /// is an IPv4 address or an IPv6 prefix (--ipv6-client-prefix)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_clients_per_ip: Option<u32>,
    /// IPv6 clients are counted by this prefix length for every per-client limit: one
    /// host usually holds a whole /64
    #[arg(long, value_name = "BITS", default_value_t = 64, value_parser = clap::value_parser!(u8).range(1..=128))]
    pub ipv6_client_prefix: u8,
    /// The most bits/s one test may ask for, all flows together; unpaced tests are refused,
    /// and a test that moves more in an interval is ended [k|m|g suffixes, decimal]
    #[arg(long, value_name = "RATE", value_parser = rate)]
    pub max_rate: Option<u64>,
    /// The most bits/s the running tests of one client address may ask for together
    #[arg(long, value_name = "RATE", value_parser = rate)]
    pub max_rate_per_ip: Option<u64>,
    /// Only these address ranges may connect (CIDR, comma-separated or repeated)
    #[arg(long, value_name = "CIDR", value_delimiter = ',', value_parser = cidr)]
    pub allow: Vec<ipnet::IpNet>,
    /// These address ranges may not connect (CIDR, comma-separated or repeated)
    #[arg(long, value_name = "CIDR", value_delimiter = ',', value_parser = cidr)]
    pub deny: Vec<ipnet::IpNet>,
    /// Log lines as text or as one JSON object per line
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
    /// Serve files under DIR to 'linerate copy' clients holding --key (names are confined
    /// to DIR: no '..', no symbolic links, regular files only)
    #[arg(long, value_name = "DIR")]
    pub files: Option<std::path::PathBuf>,
    /// iperf3 clients: the RSA private key (PEM) their credentials are encrypted to; with
    /// --authorized-users-path, every iperf3 client must authenticate
    #[arg(long, value_name = "PATH", requires = "authorized_users_path")]
    pub rsa_private_key_path: Option<std::path::PathBuf>,
    /// iperf3 clients: the users file, lines of "user,sha256hex" where the hash is of
    /// "{user}password"
    #[arg(long, value_name = "PATH", requires = "rsa_private_key_path")]
    pub authorized_users_path: Option<std::path::PathBuf>,
    /// iperf3 clients: seconds the time in a client's credentials may differ from ours
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(i64).range(0..=86_400))]
    pub time_skew_threshold: i64,
    /// iperf3 clients: take credentials padded with PKCS #1 v1.5 too (iperf3 before 3.17
    /// pads so; 3.17+ with --use-pkcs1-padding); without it only OAEP, as 3.17+ pads
    #[arg(long, requires = "rsa_private_key_path")]
    pub rsa_pkcs1_padding: bool,
    /// Do not log test starts and ends
    #[arg(short, long)]
    pub quiet: bool,
    /// The certificate chain (PEM) encrypted tests' data connections present [default: a
    /// self-signed one made at the first encrypted test; clients trust it by the
    /// fingerprint the server announces]
    #[arg(long, value_name = "FILE", requires = "cert_key")]
    pub cert: Option<std::path::PathBuf>,
    /// The private key (PEM) of --cert
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub cert_key: Option<std::path::PathBuf>,
    /// Refuse encrypted tests (--tls, --quic)
    #[arg(long, conflicts_with = "require_tls")]
    pub no_tls: bool,
    /// Refuse plain tests: every test must ask for --tls or --quic
    #[arg(long)]
    pub require_tls: bool,
    /// Join this multicast group and count every sender's stream to it (loss, order,
    /// jitter, delay, join latency), one line each as it ends: GROUP (any source),
    /// GROUP@SOURCE (source-specific, IGMPv3/MLDv2), either with %IFACE; repeat for more
    #[arg(long, value_name = "GROUP[@SOURCE][%IFACE]", value_parser = multicast_join)]
    pub join: Vec<linerate_model::multicast::Join>,
    /// The UDP port the joined groups are heard on (iperf 2's)
    #[arg(long, value_name = "PORT", default_value_t = linerate_model::multicast::DEFAULT_MULTICAST_PORT, requires = "join")]
    pub join_port: u16,
    /// A multicast stream ends after this long without a datagram (seconds, or 500ms)
    #[arg(long, value_name = "DURATION", default_value = "2", value_parser = join_silence, requires = "join")]
    pub join_silence: f64,
    /// Clients and multicast senders read this host's clock (one host, a lab's
    /// namespaces): give their one-way delays (iperf 2's --trip-times, multicast streams)
    /// without a time source
    #[arg(long)]
    pub same_clock: bool,
    /// Answer STAMP test packets (RFC 8762, stateful, with RFC 8972's TLVs) on this UDP
    /// [ADDR:]PORT (862 is STAMP's; below 1024 needs root or CAP_NET_BIND_SERVICE)
    #[arg(long, value_name = "[ADDR:]PORT", value_parser = udp_listen_addr)]
    pub stamp: Option<std::net::SocketAddr>,
    /// STAMP: the HMAC-SHA-256 key (hexadecimal text, or the raw bytes, in FILE) that
    /// authenticated test packets are checked and answered with
    #[arg(long, value_name = "FILE", requires = "stamp", value_parser = stamp_key_file)]
    pub stamp_hmac_key_file: Option<linerate_stamp::wire::Key>,
    /// STAMP: answer only authenticated test packets
    #[arg(long, requires = "stamp_hmac_key_file")]
    pub stamp_authenticated_only: bool,
    /// STAMP: test packets a second answered from one source (an IPv4 address, an IPv6
    /// /64)
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=10_000_000), requires = "stamp")]
    pub stamp_rate_per_source: u32,
    /// STAMP: test packets a second answered from everybody together
    #[arg(long, value_name = "N", default_value_t = 500_000, value_parser = clap::value_parser!(u32).range(1..=10_000_000), requires = "stamp")]
    pub stamp_rate: u32,
    /// STAMP: senders (address, port and session id) kept at once; a full table refuses
    /// new ones until one has been silent a minute
    #[arg(long, value_name = "N", default_value_t = 4_096, value_parser = clap::value_parser!(u32).range(1..=1_000_000), requires = "stamp")]
    pub stamp_sessions: u32,
    /// STAMP: sessions one source (an IPv4 address, an IPv6 prefix of
    /// --ipv6-client-prefix bits) may hold at once, so that no one source fills the table
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1_000_000), requires = "stamp")]
    pub stamp_sessions_per_source: u32,
    /// STAMP: also answer TWAMP-light senders' short probes (14 to 43 octets, as
    /// twampy's default) with RFC 5357's 41-octet reply, at most PPS a second in all
    /// (1,000 when no value is given). Off by default: that reply is up to 2.9 times the
    /// probe, the one answer that amplifies; padded probes (twampy --padding 30) need none
    #[arg(long, value_name = "PPS", num_args = 0..=1, default_missing_value = "1000", value_parser = clap::value_parser!(u32).range(1..=100_000), requires = "stamp")]
    pub stamp_twamp_light: Option<u32>,
    /// Answer irtt clients (irtt 0.9, flent's irtt tests) on this UDP [ADDR:]PORT (2112,
    /// irtt's, when none is given), as `irtt server` does, under --max-duration and the
    /// access rules
    #[arg(long, value_name = "[ADDR:]PORT", num_args = 0..=1, default_missing_value = "2112", value_parser = udp_listen_addr)]
    pub irtt: Option<std::net::SocketAddr>,
    /// irtt: the key (irtt's --hmac, the file's bytes) every packet must be signed with
    #[arg(long, value_name = "FILE", requires = "irtt", value_parser = irtt_key_file)]
    pub irtt_hmac_key_file: Option<linerate_irtt::wire::HmacKey>,
}

/// `serve`'s iperf 2 options: one struct, read once into the server's
/// `Iperf2Serving` (an option is a field there and its flag here).
#[derive(Args, Debug, Clone)]
pub struct Iperf2ServeArgs {
    /// Serve iperf 2 clients' TCP tests on this port (default 5001, where free; with
    /// --key only where this is given: iperf 2 cannot prove a key)
    #[arg(long, value_name = "PORT", conflicts_with = "no_iperf2")]
    pub iperf2_port: Option<u16>,
    /// Do not serve iperf 2 clients
    #[arg(long)]
    pub no_iperf2: bool,
    /// Log each iperf 2 --trip-times test's latencies as iperf 2's server prints its
    /// histograms (`T8(f)-PDF` for UDP datagrams, `F8(f)-PDF` for TCP writes), in bins of
    /// WIDTH, BINS of them [default: 100us,10000]
    #[arg(long, value_name = "WIDTH[,BINS]", num_args = 0..=1, require_equals = true, default_missing_value = "100us,10000", value_parser = histogram_bins)]
    pub histograms: Option<linerate_report::iperf2_text::HistogramBins>,
    /// With --histograms: each iperf 2 UDP --trip-times test's histogram of every
    /// DURATION too (`T8-PDF`), as `iperf -s -i DURATION --histograms` prints each
    /// interval's (0.1 s to 1 h)
    #[arg(long, value_name = "DURATION", value_parser = histogram_interval, requires = "histograms")]
    pub histogram_interval: Option<f64>,
}

impl Iperf2ServeArgs {
    /// How the server serves iperf 2 clients, given its key (`keyed`) and its multicast
    /// receivers' port (`join_port`).
    pub fn serving(
        &self,
        keyed: bool,
        join_port: Option<u16>,
    ) -> linerate_drivers::server_state::Iperf2Serving {
        linerate_drivers::server_state::Iperf2Serving {
            histograms: self.histograms,
            histogram_interval: self
                .histogram_interval
                .map(std::time::Duration::from_secs_f64),
            ..linerate_drivers::server_state::Iperf2Serving::on_port(
                self.iperf2_port,
                self.no_iperf2,
                keyed,
                join_port,
            )
        }
    }
}

#[derive(Debug, Args)]
pub struct StreamArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(flatten)]
    pub measure: MeasureArgs,
    /// UDP instead of TCP: datagrams paced to --rate (default 1M per flow) or --pps
    #[arg(short, long)]
    pub udp: bool,
    /// Parallel flows (TCP connections or UDP socket pairs) per direction
    #[arg(short = 'P', long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub parallel: u32,
    /// Seconds to measure, after --omit [default: 10; with --find-max, 2 per trial]
    #[arg(short, long, allow_negative_numbers = true, value_parser = positive_seconds)]
    pub time: Option<f64>,
    /// Bytes per write (default 128000: exactly 128K writes leave a short segment each on
    /// 64K-MTU paths such as loopback, and run slower), or UDP payload per datagram, 16 to
    /// 65507 (default: the largest that fits the path MTU) [k|m|g suffixes, binary]
    #[arg(short, long, value_parser = length)]
    pub length: Option<u64>,
    /// TCP maximum segment size
    #[arg(short = 'M', long, value_parser = clap::value_parser!(u32).range(88..=65535), conflicts_with = "udp")]
    pub mss: Option<u32>,
    /// Disable Nagle's algorithm (TCP_NODELAY)
    #[arg(short = 'N', long, conflicts_with = "udp")]
    pub nodelay: bool,
    /// Congestion control algorithm on both ends (e.g. cubic, reno, bbr)
    #[arg(short = 'C', long, value_name = "ALGO", conflicts_with = "udp")]
    pub congestion: Option<String>,
    #[command(flatten)]
    pub direction: DirectionArgs,
    /// Pace each flow to this many bits/s of payload; 0 for as fast as possible (TCP's
    /// default; UDP's is 1M) [k|m|g suffixes, decimal]
    #[arg(short = 'b', long, value_parser = rate)]
    pub rate: Option<u64>,
    /// UDP: pace each flow to this many datagrams per second instead of --rate [k|m|g, decimal]
    #[arg(long, requires = "udp", conflicts_with = "rate", value_parser = per_second)]
    pub pps: Option<u64>,
    /// UDP: search for the highest rate whose receiver-side loss stays within --max-loss,
    /// over short trials (-t each, default 2 s), and print every trial
    #[arg(long, requires = "udp", conflicts_with_all = ["rate", "pps", "bidir", "iterations", "confidence"])]
    pub find_max: bool,
    /// The loss bound for --find-max, in percent of datagrams
    #[arg(long, default_value_t = 0.1, requires = "find_max", value_parser = percent)]
    pub max_loss: f64,
    /// UDP: send with segmentation offload (UDP_SEGMENT): up to 64 datagrams per buffer
    #[arg(long, requires = "udp")]
    pub gso: bool,
    /// UDP video frames, as iperf 2's --isochronous: FPS frames a second whose sizes make a
    /// log-normal load of MEAN bits/s with standard deviation STDEV, each frame a burst of
    /// datagrams; the receiver reports each frame's latency, frames whole, lost and late
    /// [default: 60:20m,0]
    #[arg(long, value_name = "FPS:MEAN[,STDEV]", num_args = 0..=1, default_missing_value = linerate_model::video::DEFAULT_SPEC, value_parser = isochronous, requires = "udp", conflicts_with_all = ["rate", "pps", "find_max", "gso"])]
    pub isochronous: Option<linerate_model::video::VideoSettings>,
    /// With --isochronous: the time between a frame's datagrams (iperf 2's --ipg)
    /// [default: 0, the frame in one burst]
    #[arg(long, value_name = "TIME", requires = "isochronous", value_parser = frame_gap)]
    pub frame_gap: Option<u32>,
    /// With --isochronous: a key frame every EVERY frames, SCALE (8) times the others' mean
    #[arg(long, value_name = "EVERY[:SCALE]", requires = "isochronous", value_parser = key_frames)]
    pub key_frames: Option<linerate_model::video::KeyFrames>,
    /// UDP: receive with coalescing (UDP_GRO): runs of datagrams per buffer
    #[arg(long, requires = "udp")]
    pub gro: bool,
    /// To a multicast group: the TTL (IPv6 hop limit) of its datagrams, 1 (this link) to 255
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=255))]
    pub ttl: Option<u32>,
    /// To a multicast group: this many groups from it on (239.1.1.1, 239.1.1.2, ...), each
    /// its own stream at -b, all from one socket
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub groups: u32,
    /// To a multicast group: ask these `serve --key` hosts to join and count the stream,
    /// and gather each one's count in this run (needs --key)
    #[arg(long, value_name = "HOST[:PORT],...", value_delimiter = ',')]
    pub receivers: Vec<String>,
    #[command(flatten)]
    pub output: OutputArgs,
    /// Show figures per flow, and keep them per interval in the result
    #[arg(long)]
    pub per_flow: bool,
    #[command(flatten)]
    pub repeat: RepeatArgs,
    #[command(flatten)]
    pub secure: TlsArgs,
    /// QUIC streams (quinn) instead of TCP: -P streams spread over QUIC workers (one per
    /// flow up to --threads and the CPUs, each a thread with its own socket and
    /// connection), or -P connections with --connections; TLS 1.3 inside, --cipher as for
    /// --tls
    #[arg(long, conflicts_with_all = ["udp", "tls", "mss", "nodelay", "find_max"])]
    pub quic: bool,
    /// QUIC: one connection per flow instead of one stream per flow on each worker's
    /// connection
    #[arg(long, requires = "quic")]
    pub connections: bool,
    /// Encrypted tests: run the same test plain over TCP first, and compare goodput and
    /// CPU per Gbit ("encryption costs N % more CPU per Gbit")
    #[arg(long)]
    pub baseline: bool,
}

/// `linerate app`: an application's traffic pattern, both ways, scored.
#[derive(Args, Debug)]
pub struct AppArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(flatten)]
    pub measure: MeasureArgs,
    /// The application (the options each reads are listed at the end; one it does not read
    /// is refused)
    #[arg(long, value_parser = app_pattern())]
    pub pattern: &'static linerate_model::app::Pattern,
    /// The video's frames, as iperf 2's --isochronous: FPS:MEAN[,STDEV] [default: 30:5m,1m,
    /// a 1080p stream's order; a pattern may have its own]
    #[arg(long, value_name = "FPS:MEAN[,STDEV]", value_parser = isochronous)]
    pub isochronous: Option<linerate_model::video::VideoSettings>,
    /// The participants, this host one of them (2 to 32): a call and a video stream to and
    /// from each of the others [default: 4]
    #[arg(long)]
    pub participants: Option<u32>,
    /// A key frame every EVERY frames, SCALE (8) times the others' mean
    #[arg(long, value_name = "EVERY[:SCALE]", value_parser = key_frames)]
    pub key_frames: Option<linerate_model::video::KeyFrames>,
    /// The client's inputs, FPS:MEAN[,STDEV] [default: a game's, 64:61440,15360: 120 bytes
    /// 64 times a second]
    #[arg(long, value_name = "FPS:MEAN[,STDEV]", value_parser = isochronous)]
    pub inputs: Option<linerate_model::video::VideoSettings>,
    /// The server's state each tick, FPS:MEAN[,STDEV] [default: 64:614400,204800, 1,200
    /// bytes 64 times a second]
    #[arg(long, value_name = "FPS:MEAN[,STDEV]", value_parser = isochronous)]
    pub state: Option<linerate_model::video::VideoSettings>,
    /// Each way's Quality of Outcome requirement, as p99=150ms/400ms,loss=1%/5%
    #[arg(long, value_name = "REQUIREMENT", value_parser = linerate_model::qoo::Requirement::parse)]
    pub qoo: Option<linerate_model::qoo::Requirement>,
    /// The call's codec: g711 (with loss concealment), g711-no-plc, g729a, or
    /// opus:RATE (6k to 510k bit/s; measured, with no MOS: G.113 gives Opus no values)
    /// [default: g711]
    #[arg(long, value_name = "CODEC", value_parser = linerate_model::call::Codec::parse)]
    pub codec: Option<linerate_model::call::Codec>,
    /// The call's receivers' jitter buffer: fixed (a datagram later than the first's delay
    /// by more is played too late, lost), or `adaptive[:MOST]` (follows the jitter)
    /// [default: 60ms]
    #[arg(long, value_name = "TIME", value_parser = jitter_buffer)]
    pub jitter_buffer: Option<linerate_model::call::JitterBuffer>,
    /// voip: the far end: linerate's own server, or an irtt server (`irtt server`, `linerate
    /// serve --irtt`; port 2112 unless -p): each request a frame out, its answer the frame
    /// back, both ways scored from irtt's timestamps and counts
    #[arg(long, value_enum, default_value = "linerate")]
    pub peer: AppPeer,
    /// Seconds to measure, after --omit
    #[arg(short, long, default_value_t = 10.0, allow_negative_numbers = true, value_parser = positive_seconds)]
    pub time: f64,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `linerate app --peer`: what answers the pattern's traffic.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppPeer {
    Linerate,
    Irtt,
}

impl AppArgs {
    /// The pattern's options as given; the pattern supplies its defaults.
    pub fn options(&self) -> linerate_model::app::AppOptions {
        linerate_model::app::AppOptions {
            frames: self.isochronous,
            key_frames: self.key_frames,
            participants: self.participants,
            inputs: self.inputs,
            state: self.state,
            codec: self.codec,
            jitter_buffer: self.jitter_buffer,
            qoo: self.qoo.clone(),
        }
    }
}

/// `linerate app`'s closing help, from the patterns' table: the options each reads, and
/// an example of each.
fn app_help() -> String {
    use linerate_model::app::PATTERNS;
    let mut help = String::from("Patterns and the options each reads:\n");
    for pattern in PATTERNS {
        let reads: Vec<&str> = pattern.reads.iter().map(|o| o.flag()).collect();
        help += &format!("  {:<13}{}\n", pattern.name, reads.join(", "));
    }
    help += "\nExamples:\n";
    for pattern in PATTERNS {
        help += &format!("  linerate app 192.0.2.1 --pattern {}\n", pattern.example);
    }
    help + "  linerate app 192.0.2.1 --pattern voip --codec g729a --jitter-buffer 40ms -t 30 --json\n  linerate app 192.0.2.1 --pattern voip --codec opus:32k --qoo p99=150ms/400ms,loss=1%/5%\n  linerate app 192.0.2.1 --pattern voip --peer irtt    a call to an irtt server (port 2112)"
}

/// `--pattern`: the table's patterns, each with what it is in help.
fn app_pattern(
) -> impl clap::builder::TypedValueParser<Value = &'static linerate_model::app::Pattern> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    use linerate_model::app::{find, PATTERNS};
    PossibleValuesParser::new(PATTERNS.map(|p| PossibleValue::new(p.name).help(p.about)))
        .map(|name| find(&name).expect("a pattern the table lists"))
}

const IMPAIR_EXAMPLES: &str = "\
Examples:
  linerate impair --between eth1 eth2 --delay 50ms --loss 1%
  linerate impair --between eth1 eth2 --delay 25ms --rate 1G --queue 20ms --seed 7
  linerate impair --between eth1 eth2 --loss 1%,0 --loss-burst 3   bursts, first direction only
  linerate impair --between eth1 eth2 --reorder 0.5% --duplicate 0.1% --corrupt 0.01%
  linerate impair --between eth1 eth2 --rate 100M --aqm fq_codel --ecn   CoDel per flow, marking
A value applies to both directions; 'A,B' gives eth1->eth2 A and eth2->eth1 B.
Runs until Ctrl-C (or -t), printing each direction's counters every second.";

const LAB_EXAMPLES: &str = "\
Examples:
  linerate lab up --rtt 100ms --loss 1% --rate 1G
  linerate lab exec client -- linerate stream server -t 30
  linerate lab status
  linerate lab down
  linerate lab run --rtt 100ms --loss 1% --rate 1G -- linerate stream server -C bbr -t 30
  linerate lab run --rtt 50ms --serve-args \"--max-tests 4\" -- linerate rr server
  linerate lab up --rtt 100ms --offloads --buffers 256M     10 Gbit/s and more, segments whole
  linerate lab up --rtt 100ms --loss 1% --threads 4         frames over 4 threads each way, flows spread
  linerate lab up --rtt 10ms --receivers 4                  rx1..rx4 beside the server, a snooping bridge (multicast)
  linerate lab run --rtt 40ms --rate 20M --queue 250ms --aqm fq_codel --ecn -- linerate rpm server
Hosts: client 10.77.0.1, server 10.77.0.2 (names 'client' and 'server' resolve inside the
lab; LINERATE_LAB_SERVER holds the server's address). The router between them runs
'linerate impair'; --rtt is the added round trip, half each way.";

/// What the emulator does to each direction. A value applies to both directions;
/// "A,B" gives the first direction (client to server in a lab) A and the other B.
#[derive(Debug, Clone, Args)]
pub struct ImpairmentArgs {
    /// Added one-way delay per direction (100ms, 0.5s, 250us)
    #[arg(long, value_name = "D[,D]")]
    pub delay: Option<String>,
    /// Delay varies uniformly by up to this much either way (never reorders)
    #[arg(long, value_name = "D[,D]")]
    pub jitter: Option<String>,
    /// Share of frames dropped at random (1%, 0.1%)
    #[arg(long, value_name = "P[,P]")]
    pub loss: Option<String>,
    /// Losses come in bursts of this mean length in frames (Gilbert-Elliott); needs --loss
    #[arg(long, value_name = "N[,N]")]
    pub loss_burst: Option<String>,
    /// Share of frames held back until the next frame has passed them
    #[arg(long, value_name = "P[,P]")]
    pub reorder: Option<String>,
    /// Share of frames sent twice
    #[arg(long, value_name = "P[,P]")]
    pub duplicate: Option<String>,
    /// Share of frames with one payload bit flipped
    #[arg(long, value_name = "P[,P]")]
    pub corrupt: Option<String>,
    /// Re-mark every IP frame with this DSCP, its ECN field kept (a path that bleaches or re-classes)
    #[arg(long, value_name = "DSCP[,DSCP]")]
    pub remark: Option<String>,
    /// Bottleneck rate in bit/s of Ethernet frames (100M, 1G)
    #[arg(long, value_name = "R[,R]")]
    pub rate: Option<String>,
    /// Drop-tail queue before the bottleneck, bytes (256k) or time at the rate (20ms);
    /// default 50 ms at the rate. With --aqm, the AQM's limit
    #[arg(long, value_name = "Q[,Q]")]
    pub queue: Option<String>,
    /// Manage the queue before the bottleneck: codel (RFC 8289) or fq_codel (RFC 8290),
    /// target 5 ms, interval 100 ms; drop-tail is the default. Needs --rate
    #[arg(long, value_name = "AQM[,AQM]")]
    pub aqm: Option<String>,
    /// The AQM marks ECN-capable frames Congestion Experienced where it would drop them
    #[arg(long)]
    pub ecn: bool,
    /// Seed of every random choice: the same seed repeats a run's drop pattern
    #[arg(long)]
    pub seed: Option<u64>,
    /// Most bytes a direction's delay line may hold
    #[arg(long, value_name = "SIZE", default_value = "1G")]
    pub memory: String,
    /// Carry the hosts' segments whole (TSO/GSO, up to 64 KB each) instead of frames:
    /// forwarding at many Gbit/s; delay, jitter, rate and queue only (no per-frame loss,
    /// reordering, duplication or corruption)
    #[arg(long)]
    pub offloads: bool,
    /// Forwarding threads each way: flows (by addresses and ports) spread over them, each
    /// flow on one thread, in order, with loss drawn from that thread's link. Default: one
    /// per 4 CPUs; always 1 with --rate (a bottleneck is one queue)
    #[arg(long, value_name = "N")]
    pub threads: Option<u32>,
}

#[derive(Debug, Args)]
pub struct ImpairArgs {
    /// The two interfaces to bridge: frames entering one leave the other
    #[arg(long, num_args = 2, value_names = ["IF_A", "IF_B"], required = true)]
    pub between: Vec<String>,
    #[command(flatten)]
    pub impairment: ImpairmentArgs,
    /// Stop after this many seconds (default: until Ctrl-C)
    #[arg(short = 't', long)]
    pub time: Option<f64>,
    /// No per-second lines
    #[arg(short, long)]
    pub quiet: bool,
    /// Write the counters as JSON to this file every second and at the end
    #[arg(long, value_name = "FILE")]
    pub status_file: Option<std::path::PathBuf>,
    /// Write a line for every frame to this file: when it arrived, was due and left, or
    /// why it was dropped, its flow and payload's first bytes (1,000,000 a direction)
    #[arg(long, value_name = "FILE")]
    pub frame_log: Option<std::path::PathBuf>,
    /// The whole path as JSON (how `linerate lab` starts the emulator)
    #[arg(long, hide = true, conflicts_with_all = ["delay", "jitter", "loss", "loss_burst", "reorder", "duplicate", "corrupt", "rate", "queue", "seed", "offloads", "threads"])]
    pub path_json: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// Build the lab: client, router (running the emulator) and server namespaces
    #[command(after_help = LAB_EXAMPLES)]
    Up(LabUpArgs),
    /// Run a command on a lab host (client, server or router)
    #[command(after_help = LAB_EXAMPLES)]
    Exec(LabExecArgs),
    /// Build the lab, start 'linerate serve' on the server, run a command on the client,
    /// tear down; exits with the command's status
    #[command(after_help = LAB_EXAMPLES)]
    Run(LabRunArgs),
    /// Print the emulator's counters
    #[command(after_help = LAB_EXAMPLES)]
    Status(LabStatusArgs),
    /// Remove the lab (and leftovers of one whose controller was killed)
    #[command(after_help = LAB_EXAMPLES)]
    Down(LabDownArgs),
}

#[derive(Debug, Clone, Args)]
pub struct LabNameArgs {
    /// The lab's name (several labs can exist at once)
    #[arg(long, default_value = "lab")]
    pub name: String,
}

#[derive(Debug, Clone, Args)]
pub struct LabStatusArgs {
    #[command(flatten)]
    pub lab: LabNameArgs,
    #[command(flatten)]
    pub print: JsonFlag,
}

#[derive(Debug, Clone, Args)]
pub struct LabPathArgs {
    /// Added round-trip time, half each way (100ms)
    #[arg(long, conflicts_with = "delay")]
    pub rtt: Option<String>,
    #[command(flatten)]
    pub impairment: ImpairmentArgs,
    /// Largest TCP buffers the lab's hosts autotune to (net.ipv4.tcp_rmem and tcp_wmem
    /// maximum, 64M for a 1 Gbit/s, 100 ms path); default: this host's settings
    #[arg(long, value_name = "SIZE", value_parser = lab_buffers)]
    pub buffers: Option<u64>,
    /// MTU of the lab's links
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u16).range(576..=9000))]
    pub mtu: u16,
    /// Receiver hosts rx1 (10.77.0.11) to rxN beside the server, behind the emulator, on a
    /// bridge snooping IGMPv3/MLDv2 (multicast: docs/multicast.md)
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=16))]
    pub receivers: u8,
    /// Write every frame's arrival, due and departure times (or why it was dropped) to the
    /// lab's frames.tsv, at most 1,000,000 a direction (docs/impair.md)
    #[arg(long)]
    pub frame_log: bool,
}

#[derive(Debug, Args)]
pub struct LabUpArgs {
    #[command(flatten)]
    pub lab: LabNameArgs,
    #[command(flatten)]
    pub path: LabPathArgs,
}

#[derive(Debug, Args)]
pub struct LabExecArgs {
    #[command(flatten)]
    pub lab: LabNameArgs,
    /// client, server or router
    pub host: String,
    /// The command and its arguments
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct LabRunArgs {
    /// The lab's name (default: one of its own, so runs can overlap)
    #[arg(long)]
    pub name: Option<String>,
    #[command(flatten)]
    pub path: LabPathArgs,
    /// Extra flags for 'linerate serve' on the server ("--key lab.key --max-tests 4")
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub serve_args: Option<String>,
    /// The command to run on the client, and its arguments
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct LabDownArgs {
    #[command(flatten)]
    pub lab: LabNameArgs,
    /// Remove every lab on this machine
    #[arg(long)]
    pub all: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// Each pattern's example in help is a command line that reads, and whose options the
    /// pattern takes.
    #[test]
    fn each_app_patterns_example_reads_and_plans() {
        for pattern in linerate_model::app::PATTERNS {
            let mut argv = vec!["linerate", "app", "192.0.2.1", "--pattern"];
            argv.extend(pattern.example.split_whitespace());
            let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
            let Command::App(args) = cli.command else {
                panic!("{argv:?}: not app")
            };
            assert_eq!(args.pattern.name, pattern.name);
            args.pattern
                .plan(&args.options())
                .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        }
    }
}
