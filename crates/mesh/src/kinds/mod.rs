//! The kinds of mesh test, one module each: its options as the mesh file gives them
//! (read and checked there), what it is (its transport, the figure that heads it and
//! which way is worse) and what runs one of its jobs. The rest of the mesh crate, the
//! coordinator, the board and the metrics ask a test's [`Kind`] and never name one.
//!
//! To add a kind: a module here with its options struct, its `read` (which takes its
//! options from the test's table: what it leaves is refused as not one of them) and its
//! `impl Kind`, and its line in [`KINDS`] and in [`TestKind`].

mod app;
mod connect;
mod crr;
mod multicast;
mod quic;
mod rpm;
mod rr;
mod stamp;
mod stream;
mod trace;
mod video;
mod voip;

pub use app::App;
pub use connect::Connect;
pub use crr::Crr;
pub use multicast::{
    Multicast, DEFAULT_MULTICAST_PORT, DEFAULT_MULTICAST_RATE_BPS, MULTICAST_LEAD_S,
    MULTICAST_SILENCE_S,
};
pub use quic::{Quic, MAX_QUIC_STREAMS};
pub use rpm::{Rpm, RPM_SETUP_S};
pub use rr::Rr;
pub use stamp::{Stamp, DEFAULT_STAMP_PORT, MAX_STAMP_RATE};
pub use stream::Stream;
pub use trace::{
    Trace, DEFAULT_TRACE_HOPS, MAX_TRACE_FLOWS, MAX_TRACE_HOPS, TRACE_GAP_S, TRACE_WAIT_S,
};
pub use video::Video;
pub use voip::Voip;

use crate::host::{Host, Transport};
use crate::reading::{MeshError, Reader, TestTable};
use linerate_model::marks::Marks;
use linerate_model::measure::{Headline, Measure};
use linerate_profile::{
    Action as Op, Endpoint, Group, Profile, Protocol, Repeat, Size, Transaction, Transfer,
};
use std::time::Duration;

/// A test's kind with its options: one variant a module of this one.
#[derive(Debug, Clone, PartialEq)]
pub enum TestKind {
    Stream(Stream),
    Rr(Rr),
    Crr(Crr),
    Rpm(Rpm),
    Stamp(Stamp),
    Trace(Trace),
    Connect(Connect),
    Voip(Voip),
    Quic(Quic),
    Video(Video),
    Multicast(Multicast),
    /// Boxed: a pattern's options and plan are the largest of the kinds.
    App(Box<App>),
}

impl TestKind {
    /// What the kind says of itself: the one place a test's variant is matched.
    pub fn kind(&self) -> &dyn Kind {
        match self {
            TestKind::Stream(kind) => kind,
            TestKind::Rr(kind) => kind,
            TestKind::Crr(kind) => kind,
            TestKind::Rpm(kind) => kind,
            TestKind::Stamp(kind) => kind,
            TestKind::Trace(kind) => kind,
            TestKind::Connect(kind) => kind,
            TestKind::Voip(kind) => kind,
            TestKind::Quic(kind) => kind,
            TestKind::Video(kind) => kind,
            TestKind::Multicast(kind) => kind,
            TestKind::App(kind) => kind.as_ref(),
        }
    }

    pub fn protocol(&self) -> Transport {
        self.kind().transport()
    }

    /// The protocol a job's row is labelled with: "tcp", "udp", or "icmp" for a trace
    /// of ICMP echoes.
    pub fn protocol_label(&self) -> &'static str {
        self.kind().protocol_label()
    }

    /// "stream", "rr", "crr", "rpm", "stamp" or "trace".
    pub fn run(&self) -> &'static str {
        self.kind().run()
    }
}

/// What every kind of mesh test says of itself.
pub trait Kind {
    /// Its name in the mesh file (`run = "stream"`) and in every row.
    fn run(&self) -> &'static str;
    /// The transport its packets go over.
    fn transport(&self) -> Transport;
    /// The protocol its rows are labelled with: "tcp", "udp" (or "icmp" for a trace of
    /// ICMP echoes).
    fn protocol_label(&self) -> &'static str {
        self.transport().name()
    }
    /// The figure that heads its results and which way is worse.
    fn measure(&self) -> Measure;
    /// How that figure is read from a job's document.
    fn headline(&self) -> Headline;
    /// Whether its jobs keep their hosts to themselves unless the file says otherwise
    /// (throughput: another test beside it would take its share).
    fn exclusive_by_default(&self) -> bool {
        false
    }
    /// Whether it runs all the time, one window after another (STAMP): its interval is
    /// its window unless the file gives a longer one.
    fn runs_all_the_time(&self) -> bool {
        false
    }
    /// Whether it needs nothing of its destination but an address (a host that only
    /// reflects may be one).
    fn address_only(&self) -> bool {
        false
    }
    /// Whether its packets carry the test's `dscp` and `ecn` both ways (a kind that
    /// reads a DSCP for a field of its own, as STAMP, says no).
    fn marks_packets(&self) -> bool {
        false
    }
    /// Whether a job of it goes from one source to every receiver its groups pair the
    /// source with, at once (multicast), rather than from a source to one destination:
    /// the mesh makes one job per source, plans it as a
    /// [`JobPlan::Fanout`], and keeps a row per receiver.
    fn fans_out(&self) -> bool {
        false
    }
    /// Whether its results are watched where nothing receives them (no metrics, no
    /// alert receiver): its measure's say, unless it is held to a bound its measure is not
    /// (a video's frames not shown, beside its latency).
    fn told_without_receivers(&self) -> bool {
        self.measure().told_without_receivers()
    }
    /// What runs a job of this test.
    fn plan(&self, site: &JobSite) -> JobPlan;
}

/// Where a job runs and what of its test it needs: its mesh's and test's names (a
/// profile's name, a trace's source port), the test's length and marks, its two hosts.
pub struct JobSite<'a> {
    pub mesh: &'a str,
    pub test: &'a str,
    pub seconds: f64,
    pub marks: Option<Marks>,
    pub src: &'a Host,
    pub dst: &'a Host,
}

/// How a job runs: a profile on the source's agent, an RPM test between the two agents,
/// or a job the source's agent runs itself.
#[derive(Debug, Clone, PartialEq)]
pub enum JobPlan {
    Profile(Profile),
    Rpm {
        /// The destination's agent.
        remote: String,
        /// Each direction's time limit.
        leg: Duration,
        tls: bool,
        max_connections: u32,
    },
    /// A job the source's agent runs itself and reports once (a STAMP window, a trace):
    /// its kind's name among the agent's source kinds, and the kind's own request. The
    /// coordinator sends it as it is and never reads it.
    Source {
        kind: &'static str,
        spec: serde_json::Value,
    },
    /// A job from one source to many receivers at once: each receiver's agent runs the
    /// `receive` source kind with its request, the source's agent `send` with its; each
    /// receiver's result, gathered with the source's, is a row of its own (source ->
    /// receiver). As with `Source`, the coordinator sends the requests as they are.
    Fanout {
        send: (&'static str, serde_json::Value),
        receive: (&'static str, serde_json::Value),
    },
}

/// The first of the ports a pair's trace flows leave from: above Linux's ephemeral range
/// (32768 to 60999), so that no connection of the host has taken it, and drawn from the
/// pair and test (FNV-1a), so that the pairs of a source spread over the range.
pub fn trace_source_port(mesh: &str, test: &str, src: &str, dst: &str, flows: u16) -> u16 {
    const FIRST: u32 = 61_000;
    let mut hash: u32 = 0x811c_9dc5;
    for byte in [mesh, test, src, dst].join("\0").bytes() {
        hash = (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193);
    }
    let room = 65_535 - FIRST + 1 - u32::from(flows);
    (FIRST + hash % room) as u16
}

/// A host's address without its port: where a trace goes.
pub fn address_of(host: &Host) -> String {
    let address = host.address.as_str();
    if let Ok(addr) = address.parse::<std::net::SocketAddr>() {
        addr.ip().to_string()
    } else if let Ok(ip) = address.parse::<std::net::IpAddr>() {
        ip.to_string()
    } else {
        match address.rsplit_once(':') {
            Some((name, p)) if p.parse::<u16>().is_ok() => name.to_string(),
            _ => address.to_string(),
        }
    }
}

/// Where `host`'s STAMP reflector answers: its address with `port` for a host that runs
/// an agent (the address names the agent's port); a host that only reflects at the port
/// its address names, else `port`.
pub fn reflector_of(host: &Host, port: u16) -> String {
    let bare = address_of(host);
    if host.reflector_only && bare != host.address {
        // Its address names the reflector's port.
        return match host.address.parse::<std::net::SocketAddr>() {
            Ok(addr) => addr.to_string(),
            Err(_) => host.address.clone(),
        };
    }
    if bare.contains(':') {
        format!("[{bare}]:{port}")
    } else {
        format!("{bare}:{port}")
    }
}

/// What every test's reader is given besides its own table.
pub(crate) struct Context<'a> {
    /// The test's name, for messages.
    pub name: &'a str,
    /// Its `run`, where a mistake of the test as a whole is shown.
    pub run: &'a toml::Spanned<String>,
}

/// A kind's reader: its options, taken from the test's table (a key it leaves is not one
/// of its options, and the file refuses it), and how long one of its jobs may take,
/// seconds (its duration, unless the kind knows better).
pub(crate) type ReadKind =
    fn(&Reader, &mut TestTable, &Context) -> Result<(TestKind, f64), MeshError>;

/// Every kind, by its `run` name: the one table the mesh file is read through.
pub(crate) const KINDS: &[(&str, ReadKind)] = &[
    ("stream", stream::read),
    ("rr", rr::read),
    ("crr", crr::read),
    ("rpm", rpm::read),
    ("stamp", stamp::read),
    ("trace", trace::read),
    ("connect", connect::read),
    ("voip", voip::read),
    ("quic", quic::read),
    ("video", video::read),
    ("multicast", multicast::read),
    ("game", app::read),
    ("conference", app::read),
    ("cloud-gaming", app::read),
];

/// The kinds' names as a message lists them: "stream, rr, crr, rpm, stamp or trace".
pub(crate) fn names() -> String {
    let names: Vec<&str> = KINDS.iter().map(|(name, _)| *name).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

/// The profile that runs `job` of a kind that is one: one group of `threads` on the
/// source's agent, its `transactions` made by `shape` from the connect to the
/// destination's agent (Nagle off where `nodelay`) and the test's timed transaction.
pub(crate) fn profile_job(
    site: &JobSite,
    transport: Transport,
    threads: u32,
    nodelay: bool,
    shape: impl FnOnce(&ProfileParts) -> Vec<Transaction>,
) -> JobPlan {
    let (src, dst) = (site.src, site.dst);
    let protocol = match transport {
        Transport::Tcp => Protocol::Tcp,
        Transport::Udp => Protocol::Udp,
    };
    let connect = Op::Connect(Endpoint {
        protocol,
        remote: Some(dst.address.clone()),
        window: None,
        nodelay,
        congestion: None,
        cipher: None,
        engine: None,
        marks: site.marks,
        source: src.source.clone(),
    });
    let parts = ProfileParts {
        protocol,
        connect,
        seconds: site.seconds,
    };
    JobPlan::Profile(Profile {
        name: format!(
            "mesh {} {} {} -> {}",
            site.mesh, site.test, src.name, dst.name
        ),
        groups: vec![Group {
            name: site.test.to_string(),
            threads,
            host: Some(src.address.clone()),
            transactions: shape(&parts),
        }],
    })
}

/// What a profile kind builds its transactions from.
pub(crate) struct ProfileParts {
    pub protocol: Protocol,
    /// The connect to the destination's agent, with the test's marks and the source's
    /// address.
    pub connect: Op,
    /// The timed transaction's length.
    pub seconds: f64,
}

impl ProfileParts {
    /// `size` bytes a transfer, `rate` transfers a second; a datagram may be lost.
    pub fn transfer(&self, size: u64, rate: Option<f64>) -> Transfer {
        Transfer {
            size: Size::Fixed(size),
            rsize: None,
            count: 1,
            last: None,
            rate,
            canfail: self.protocol == Protocol::Udp,
        }
    }

    /// A transaction of one action, done once.
    pub fn once(&self, action: Op) -> Transaction {
        Transaction {
            repeat: Repeat::Iterations(1),
            rate: None,
            ops: vec![op(action)],
        }
    }

    /// A transaction of `ops` repeated for the test's length, `rate` times a second.
    pub fn timed(&self, rate: Option<f64>, ops: Vec<Op>) -> Transaction {
        Transaction {
            repeat: Repeat::Duration(self.seconds),
            rate,
            ops: ops.into_iter().map(op).collect(),
        }
    }
}

fn op(action: Op) -> linerate_profile::Op {
    linerate_profile::Op { conn: None, action }
}
