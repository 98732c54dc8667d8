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
    /// uperf's `sendfile` and `sendfilev`: files from a directory sent with sendfile(2).
    Sendfile(FileSend),
    /// The peer's side of a [`Action::Sendfile`]: it reads the bytes of the same files,
    /// picked the same way. Only mirrors hold it; no profile file can name it.
    ReceiveFiles(FileSend),
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
            Action::Sendfile(f) if f.nfiles.is_some() => "sendfilev",
            Action::Sendfile(_) => "sendfile",
            Action::ReceiveFiles(_) => "receive_files",
        }
    }

    /// Whether this side sends the data an operation moves (`Some(true)`), receives it
    /// (`Some(false)`), or the operation moves none (`None`).
    pub fn sends(&self) -> Option<bool> {
        match self {
            Action::Write(_) | Action::Sendto(_) | Action::Sendfile(_) => Some(true),
            Action::Read(_) | Action::Recv(_) | Action::ReceiveFiles(_) => Some(false),
            _ => None,
        }
    }

    /// Whether a failure of this operation is counted and the thread goes on.
    pub fn canfail(&self) -> bool {
        match self {
            Action::Write(t) | Action::Read(t) | Action::Sendto(t) | Action::Recv(t) => t.canfail,
            Action::Sendfile(f) | Action::ReceiveFiles(f) => f.canfail,
            _ => false,
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
        match self {
            Action::Connect(e) => Action::Accept(e.clone()),
            Action::Accept(e) => Action::Connect(e.clone()),
            Action::Disconnect => Action::Disconnect,
            Action::Write(t) => Action::Read(t.peer_of_stream()),
            Action::Read(t) => Action::Write(t.peer_of_stream()),
            Action::Sendto(t) => Action::Recv(t.peer_of_datagrams()),
            Action::Recv(t) => Action::Sendto(t.peer_of_datagrams()),
            Action::Think(_) | Action::Nop => Action::Nop,
            Action::Sendfile(f) => Action::ReceiveFiles(f.clone()),
            Action::ReceiveFiles(f) => Action::Sendfile(f.clone()),
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
    /// The DSCP and ECN the connection's packets carry, set at both ends (a mesh test's
    /// `dscp` and `ecn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marks: Option<linerate_model::marks::Marks>,
    /// Where the connection leaves from: an address, a device or both (a mesh host's
    /// `source` and `source_dev`); `None`: where the routes say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<linerate_model::Source>,
}

/// One data operation: `count` messages of `size` bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transfer {
    pub size: Size,
    /// The size the peer uses (uperf's asymmetric messages); `None`: `size`. On a byte
    /// stream the peer moves the same bytes in pieces of this size (uperf's slaves read
    /// `size × count` bytes as `rsize` pieces); a datagram keeps its boundaries, so the
    /// peer sends or receives `count` datagrams of this size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rsize: Option<Size>,
    pub count: u64,
    /// The last message's size when it differs from `size`: a peer moving an `rsize`
    /// stream whose bytes do not divide into whole pieces. No profile file sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<u64>,
    /// Messages per second; `None`: as fast as they go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// A failure (a lost datagram, a timeout) is counted and the thread goes on.
    #[serde(default)]
    pub canfail: bool,
}

impl Transfer {
    /// The peer's side of a byte-stream transfer: the same bytes, in `rsize` pieces when
    /// given (the last piece shorter when they do not divide), paced to the same byte rate.
    fn peer_of_stream(&self) -> Transfer {
        let (Some(Size::Fixed(piece)), Size::Fixed(size)) = (self.rsize, self.size) else {
            return self.peer_of_datagrams();
        };
        let total = size
            .saturating_mul(self.count.saturating_sub(1))
            .saturating_add(self.last.unwrap_or(size));
        let piece = piece.max(1);
        let count = total.div_ceil(piece).max(1);
        let tail = total - (count - 1) * piece;
        Transfer {
            size: Size::Fixed(piece),
            rsize: None,
            count,
            last: (tail != piece).then_some(tail),
            rate: self
                .rate
                .map(|r| r * count as f64 / self.count.max(1) as f64),
            canfail: self.canfail,
        }
    }

    /// The peer's side of a datagram transfer (or of a stream whose sizes are drawn at
    /// random): message for message, at the peer's size.
    fn peer_of_datagrams(&self) -> Transfer {
        Transfer {
            size: self.rsize.unwrap_or(self.size),
            rsize: None,
            ..self.clone()
        }
    }

    /// The bytes of message `k` (from 0) when the size is fixed.
    pub fn fixed_size_of(&self, k: u64) -> Option<u64> {
        match self.size {
            Size::Fixed(n) if k + 1 == self.count => Some(self.last.unwrap_or(n)),
            Size::Fixed(n) => Some(n),
            Size::Random { .. } => None,
        }
    }
}

/// Files sent with sendfile(2) (uperf's `sendfile` and `sendfilev` flowops): every
/// execution picks `nfiles` (one for `sendfile`) of the files found under `dir`, at random
/// from a seed both ends derive, and sends each whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileSend {
    /// The directory as the profile names it.
    pub dir: String,
    /// The regular files under `dir` (their paths and sizes), listed by the host that runs
    /// the profile before it starts, as uperf lists them when it reads the profile. Empty
    /// until then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<SendFile>,
    /// `sendfilev`: files per execution; `None`: `sendfile`, one file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nfiles: Option<u32>,
    /// Bytes per sendfile(2) call; `None`: a file in one call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk: Option<u64>,
    pub count: u64,
    #[serde(default)]
    pub canfail: bool,
}

/// One file a [`FileSend`] may pick.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendFile {
    pub path: String,
    pub size: u64,
}

impl FileSend {
    /// Files sent per execution.
    pub fn per_execution(&self) -> u32 {
        self.nfiles.unwrap_or(1)
    }

    /// The files execution `execution` of this operation sends, by index in `files`: the
    /// same on both ends, from the thread, the operation's place and the execution alone.
    pub fn picks(&self, seed: u64, execution: u64) -> impl Iterator<Item = usize> + '_ {
        let n = self.files.len().max(1) as u64;
        (0..u64::from(self.per_execution()))
            .map(move |j| (splitmix64(splitmix64(seed ^ execution) ^ j) % n) as usize)
    }
}

/// SplitMix64's finaliser: a well-spread 64-bit hash of `x`.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
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
