//! The kinds of mesh test, one module each: its options as the mesh file gives them
//! (read and checked there), what it is (its transport, the figure that heads it and
//! which way is worse) and what runs one of its jobs. The rest of the mesh crate, the
//! coordinator, the board and the metrics ask a test's [`Kind`] and never name one.
//!
//! To add a kind: a module here with its options struct, its `read` and its `impl Kind`,
//! and its line in [`KINDS`] and in [`crate::model::TestKind`].

mod crr;
mod rpm;
mod rr;
mod stamp;
mod stream;
mod trace;

pub use crr::Crr;
pub use rpm::Rpm;
pub use rr::Rr;
pub use stamp::Stamp;
pub use stream::Stream;
pub use trace::Trace;

use crate::file::{MeshError, RawTest, Reader};
use crate::model::{Job, Mesh, TestKind, Transport};
use crate::plan::JobPlan;
use linerate_model::measure::{Headline, Measure};
use linerate_profile::{
    Action as Op, Endpoint, Group, Profile, Protocol, Repeat, Size, Transaction, Transfer,
};

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
    /// Whether it needs nothing of its destination but an address (a host that only
    /// reflects may be one).
    fn address_only(&self) -> bool {
        false
    }
    /// What runs `job` of this test.
    fn plan(&self, mesh: &Mesh, job: &Job) -> JobPlan;
}

/// What every test's reader is given besides its own table.
pub(crate) struct Context<'a> {
    /// The test's name, for messages.
    pub name: &'a str,
    /// `protocol`, where the kind takes tcp or udp.
    pub protocol: Transport,
    /// The test's `duration` (or its report window), seconds.
    pub seconds: f64,
}

/// A kind's reader: its options from the test's table, and how long one of its jobs may
/// take, seconds (its duration, unless the kind knows better).
pub(crate) type ReadKind = fn(&Reader, &RawTest, &Context) -> Result<(TestKind, f64), MeshError>;

/// Every kind, by its `run` name: the one table the mesh file is read through.
pub(crate) const KINDS: &[(&str, ReadKind)] = &[
    ("stream", stream::read),
    ("rr", rr::read),
    ("crr", crr::read),
    ("rpm", rpm::read),
    ("stamp", stamp::read),
    ("trace", trace::read),
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
    mesh: &Mesh,
    job: &Job,
    threads: u32,
    nodelay: bool,
    shape: impl FnOnce(&ProfileParts) -> Vec<Transaction>,
) -> JobPlan {
    let test = &mesh.tests[job.test];
    let (src, dst) = (&mesh.hosts[job.src], &mesh.hosts[job.dst]);
    let protocol = match test.kind.kind().transport() {
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
        marks: test.marks,
        source: src.source.clone(),
    });
    let parts = ProfileParts {
        protocol,
        connect,
        seconds: test.seconds,
    };
    JobPlan::Profile(Profile {
        name: format!(
            "mesh {} {} {} -> {}",
            mesh.name, test.name, src.name, dst.name
        ),
        groups: vec![Group {
            name: test.name.clone(),
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
