//! The profile model: what a workload is, after its file was read, its `${name}`
//! references filled and every value checked. Both file formats (TOML and uperf XML)
//! build this one value; the executor and the controller take nothing else.
//!
//! The concepts are uperf's: a profile holds groups of threads; each thread runs its
//! group's transactions in order; a transaction repeats its operations a number of times
//! or for a duration. The peer of every connection runs the mirror image (a connect meets
//! an accept, a write meets a read), so a profile is written for one side only.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub name: String,
    pub groups: Vec<Group>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Group {
    pub name: String,
    /// Threads that each run the transactions (uperf's nthreads, or nprocs).
    pub threads: u32,
    /// The agent that runs this group (`host` or `host:port`); `None`: the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub transactions: Vec<Transaction>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transaction {
    pub repeat: Repeat,
    /// Iterations per second per thread; `None`: as fast as they go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    pub ops: Vec<Op>,
}

/// How often a transaction runs its operations.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Repeat {
    Iterations(u64),
    /// Seconds: the transaction starts iterations until this much time has passed.
    Duration(f64),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Op {
    /// The named connection this operation uses; `None`: the first anonymous one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conn: Option<String>,
    pub action: Action,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Connect(Endpoint),
    Accept(Endpoint),
    Disconnect,
    Write(Transfer),
    Read(Transfer),
    Sendto(Transfer),
    Recv(Transfer),
    Think(Think),
    Nop,
}

impl Action {
    /// The operation's name as profiles spell it.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Connect(_) => "connect",
            Action::Accept(_) => "accept",
            Action::Disconnect => "disconnect",
            Action::Write(_) => "write",
            Action::Read(_) => "read",
            Action::Sendto(_) => "sendto",
            Action::Recv(_) => "recv",
            Action::Think(_) => "think",
            Action::Nop => "nop",
        }
    }

    /// The transfer of a data operation, and whether this side sends it.
    pub fn transfer(&self) -> Option<(&Transfer, bool)> {
        match self {
            Action::Write(t) | Action::Sendto(t) => Some((t, true)),
            Action::Read(t) | Action::Recv(t) => Some((t, false)),
            _ => None,
        }
    }

    /// What the peer does when this side does `self`: the mirror image uperf gives its
    /// slaves. A think is this side's own time and has no counterpart.
    pub fn mirror(&self) -> Action {
        let peer_transfer = |t: &Transfer| Transfer {
            size: t.rsize.unwrap_or(t.size),
            rsize: None,
            ..t.clone()
        };
        match self {
            Action::Connect(e) => Action::Accept(e.clone()),
            Action::Accept(e) => Action::Connect(e.clone()),
            Action::Disconnect => Action::Disconnect,
            Action::Write(t) => Action::Read(peer_transfer(t)),
            Action::Read(t) => Action::Write(peer_transfer(t)),
            Action::Sendto(t) => Action::Recv(peer_transfer(t)),
            Action::Recv(t) => Action::Sendto(peer_transfer(t)),
            Action::Think(_) | Action::Nop => Action::Nop,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    Tcp,
    Udp,
    /// TCP through TLS 1.3 (uperf's `ssl`).
    Ssl,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Ssl => "ssl",
        }
    }
}

/// Where a connection goes and how its socket is set up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Endpoint {
    pub protocol: Protocol,
    /// The agent at the other end (`host` or `host:port`); `None`: the controller's own
    /// in-process server on loopback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    /// SO_SNDBUF and SO_RCVBUF; `None` leaves kernel autotuning on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u64>,
    #[serde(default)]
    pub nodelay: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    /// `ssl`: the TLS 1.3 cipher (aes128-gcm, aes256-gcm, chacha20-poly1305); `None`:
    /// aes256-gcm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cipher: Option<String>,
    /// `ssl`: the OpenSSL engine a uperf file names (`engine=`), kept as written. linerate's
    /// TLS is rustls on the CPU whatever it says (docs/profiles.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
}

/// One data operation: `count` messages of `size` bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transfer {
    pub size: Size,
    /// The size the peer uses (uperf's asymmetric messages); `None`: `size`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rsize: Option<Size>,
    pub count: u64,
    /// Messages per second; `None`: as fast as they go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// A failure (a lost datagram, a timeout) is counted and the thread goes on.
    #[serde(default)]
    pub canfail: bool,
}

/// A message size: fixed, or uniformly random between two bounds (the sender draws, the
/// receiver accepts up to the maximum).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Size {
    Fixed(u64),
    Random { min: u64, max: u64 },
}

impl Size {
    /// The largest message this size allows: what a receiver must be ready for.
    pub fn max(self) -> u64 {
        match self {
            Size::Fixed(n) => n,
            Size::Random { max, .. } => max,
        }
    }
}

/// Time a thread spends on its own: sleeping (`idle`) or spinning (`busy`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Think {
    pub seconds: f64,
    #[serde(default)]
    pub busy: bool,
}

impl Profile {
    /// Every thread of every group.
    pub fn total_threads(&self) -> u64 {
        self.groups.iter().map(|g| u64::from(g.threads)).sum()
    }
}
