//! The sending threads of a copy over several lanes (`--lanes`, docs/transfer-protocol.md
//! 3): the sending loop runs the sender core, tags and seals each datagram, and hands it
//! to its lane's thread, which sends it with `sendmmsg` on the lane's socket. What a send
//! costs is mostly the kernel's (the UDP and IP path, and on a veth the receiving side's
//! work too, run in the sender's context), and one thread a lane spreads it over cores as
//! the lanes spread the datagrams over the path's queues.

#![allow(clippy::disallowed_methods)]

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::{Scope, ScopedJoinHandle};

use crate::datagrams::Session;
use crate::error::TransferError;
use crate::sys::{self, SendBatch};
use crate::wire::DATA_HEADER;

/// Batches a lane's thread may have waiting: past them the sending loop waits for it
/// (its socket's buffer is full, so the lane is as busy as it can be).
const QUEUED_BATCHES: usize = 4;

/// One datagram for a lane's thread: its header and its payload, owned.
pub struct Outgoing {
    pub header: [u8; DATA_HEADER],
    pub payload: Payload,
}

pub enum Payload {
    /// Bytes of a chunk in memory: (chunk, start, length).
    Chunk(Arc<Vec<u8>>, usize, usize),
    /// A sealed copy (`--encrypt`).
    Sealed(Vec<u8>),
}

impl Outgoing {
    fn parts(&self) -> (&[u8], &[u8]) {
        let payload = match &self.payload {
            Payload::Chunk(data, start, len) => &data[*start..*start + *len],
            Payload::Sealed(sealed) => &sealed[..],
        };
        (&self.header[..], payload)
    }
}

/// The lanes' threads as the sending loop sees them: a queue each, the first error any
/// of them met, and batches given back empty for reuse.
pub struct LaneSenders {
    queues: Vec<mpsc::SyncSender<Vec<Outgoing>>>,
    failed: Arc<Mutex<Option<io::Error>>>,
    spare: mpsc::Receiver<Vec<Outgoing>>,
}

/// What each lane's thread did: CPU nanoseconds it used.
pub type LaneThreads<'scope> = Vec<ScopedJoinHandle<'scope, u64>>;

impl LaneSenders {
    /// A thread for each of `session`'s lanes, within `scope`. Dropping the returned
    /// senders ends the threads once their queues are sent.
    pub fn start<'scope>(
        scope: &'scope Scope<'scope, '_>,
        session: &Session,
    ) -> Result<(LaneSenders, LaneThreads<'scope>), TransferError> {
        let failed = Arc::new(Mutex::new(None));
        let (spare_tx, spare) = mpsc::channel();
        let mut queues = Vec::new();
        let mut threads = Vec::new();
        for (lane, socket) in session.sockets().enumerate() {
            let (queue, work) = mpsc::sync_channel(QUEUED_BATCHES);
            let (fd, failed, spare_tx) = (socket.as_raw_fd(), failed.clone(), spare_tx.clone());
            let thread = std::thread::Builder::new()
                .name(format!("copy-lane-{lane}"))
                .spawn_scoped(scope, move || send_lane(fd, work, spare_tx, &failed))
                .map_err(|e| TransferError::Local(format!("cannot start a lane's thread: {e}")))?;
            queues.push(queue);
            threads.push(thread);
        }
        Ok((
            LaneSenders {
                queues,
                failed,
                spare,
            },
            threads,
        ))
    }

    /// An empty batch, one given back when there is one.
    pub fn batch(&self) -> Vec<Outgoing> {
        self.spare.try_recv().unwrap_or_default()
    }

    /// Hands `batch` to lane `lane`'s thread, waiting while its queue is full.
    pub fn send(&self, lane: usize, batch: Vec<Outgoing>) -> Result<(), io::Error> {
        self.queues[lane]
            .send(batch)
            .map_err(|_| io::Error::other("a lane's thread ended"))
    }

    /// The first error a lane's thread met, taken.
    pub fn failure(&self) -> Option<io::Error> {
        self.failed.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// A lane's thread: sends each batch it is handed on its socket until the queue closes;
/// after an error it only drains. Returns its CPU time.
fn send_lane(
    fd: RawFd,
    work: mpsc::Receiver<Vec<Outgoing>>,
    spare: mpsc::Sender<Vec<Outgoing>>,
    failed: &Mutex<Option<io::Error>>,
) -> u64 {
    let mut send = SendBatch::default();
    let mut broken = false;
    for mut batch in work {
        if !broken {
            let parts: Vec<(&[u8], &[u8])> = batch.iter().map(Outgoing::parts).collect();
            if let Err(e) = send.send(fd, &parts) {
                broken = true;
                *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
            }
        }
        batch.clear();
        let _ = spare.send(batch);
    }
    sys::thread_cpu_ns()
}
