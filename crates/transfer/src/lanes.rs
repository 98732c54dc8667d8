//! The sending threads of a copy over several lanes (`--lanes`, docs/transfer-protocol.md
//! 3): the sending loop runs the sender core and hands each datagram (its packet number,
//! offset and bytes) to its lane's thread, which seals it (`--encrypt`), sums and tags it,
//! and sends it with `sendmmsg` on the lane's socket. The framing is most of what a
//! datagram costs in user space and the send most of the kernel's (the UDP and IP path,
//! and on a veth the receiving side's work too, run in the sender's context): one thread a
//! lane spreads both over cores as the lanes spread the datagrams over the path's queues.

// An I/O driver: the lanes' threads wait and time their sends on the clock.
#![allow(clippy::disallowed_methods)]

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::{Scope, ScopedJoinHandle};

use crate::datagrams::Session;
use crate::error::TransferError;
use crate::seal::Sealer;
use crate::sys::{self, SendBatch};
use crate::wire::{DataHeader, DATA_HEADER};

/// Batches a lane's thread may have waiting: past them the sending loop waits for it
/// (its socket's buffer is full, so the lane is as busy as it can be).
const QUEUED_BATCHES: usize = 4;

/// One datagram for a lane's thread: where its bytes are in a chunk in memory, and what
/// its header says of them.
pub struct Outgoing {
    pub pn: u64,
    pub offset: u64,
    pub chunk: Arc<Vec<u8>>,
    pub start: usize,
    pub len: usize,
}

/// What every datagram of a file is framed with: the file's index, the session (its id
/// and tag key), and with `--encrypt` its sealer (a key only read, so shared).
#[derive(Clone, Copy)]
pub struct Framing<'a> {
    pub file: u32,
    pub session: u64,
    pub key: [u8; 32],
    pub sealer: Option<&'a Sealer>,
}

impl Framing<'_> {
    /// Frames one datagram: its payload sealed into `sealed` (with a sealer: then the
    /// payload sent is `sealed`, else `plain`), its header summed and tagged.
    pub fn frame(
        &self,
        pn: u64,
        offset: u64,
        plain: &[u8],
        header: &mut [u8; DATA_HEADER],
        sealed: Option<&mut Vec<u8>>,
    ) {
        let bytes = match (self.sealer, sealed) {
            (Some(sealer), Some(sealed)) => {
                sealer.seal(self.file, self.session, pn, offset, plain, sealed);
                &sealed[..]
            }
            _ => plain,
        };
        DataHeader {
            file: self.file,
            session: self.session,
            pn,
            offset,
            len: bytes.len() as u16,
            crc: crc32fast::hash(bytes),
        }
        .encode(header, &self.key);
    }

    /// The payload a datagram framed by [`frame`](Self::frame) carries: `sealed` with a
    /// sealer, else `plain`.
    pub fn payload<'b>(&self, plain: &'b [u8], sealed: &'b [u8]) -> &'b [u8] {
        match self.sealer {
            Some(_) => sealed,
            None => plain,
        }
    }
}

/// A lane thread's buffers for a batch's headers and sealed payloads, reused.
#[derive(Default)]
struct Framed {
    headers: Vec<[u8; DATA_HEADER]>,
    sealed: Vec<Vec<u8>>,
}

impl Framed {
    /// Frames `batch`: each datagram sealed (with a sealer), summed and tagged.
    fn frame(&mut self, framing: &Framing<'_>, batch: &[Outgoing]) {
        self.headers.resize(batch.len(), [0; DATA_HEADER]);
        if framing.sealer.is_some() && self.sealed.len() < batch.len() {
            self.sealed.resize_with(batch.len(), Vec::new);
        }
        for (i, datagram) in batch.iter().enumerate() {
            let plain = &datagram.chunk[datagram.start..datagram.start + datagram.len];
            let sealed = self.sealed.get_mut(i);
            framing.frame(
                datagram.pn,
                datagram.offset,
                plain,
                &mut self.headers[i],
                sealed,
            );
        }
    }

    /// The framed batch as (header, payload) pairs.
    fn parts<'b>(
        &'b self,
        framing: &Framing<'_>,
        batch: &'b [Outgoing],
    ) -> Vec<(&'b [u8], &'b [u8])> {
        batch
            .iter()
            .enumerate()
            .map(|(i, datagram)| {
                let plain = &datagram.chunk[datagram.start..datagram.start + datagram.len];
                let sealed = self.sealed.get(i).map_or(&[][..], |s| &s[..]);
                (&self.headers[i][..], framing.payload(plain, sealed))
            })
            .collect()
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
        framing: Framing<'scope>,
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
                .spawn_scoped(scope, move || {
                    send_lane(fd, framing, work, spare_tx, &failed)
                })
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

/// A lane's thread: frames and sends each batch it is handed on its socket until the
/// queue closes; after an error it only drains. Returns its CPU time.
fn send_lane(
    fd: RawFd,
    framing: Framing<'_>,
    work: mpsc::Receiver<Vec<Outgoing>>,
    spare: mpsc::Sender<Vec<Outgoing>>,
    failed: &Mutex<Option<io::Error>>,
) -> u64 {
    let mut send = SendBatch::default();
    let mut framed = Framed::default();
    let mut broken = false;
    for mut batch in work {
        if !broken {
            framed.frame(&framing, &batch);
            let parts = framed.parts(&framing, &batch);
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
