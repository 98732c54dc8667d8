//! The receiving threads of a copy over several lanes (`--lanes`, docs/transfer-protocol.md
//! 3): a thread a lane takes batches from the lane's socket and checks each datagram (its
//! header's tag, its payload's CRC, with `--encrypt` its seal, opened where it lies), then
//! hands the batch to the receiving loop, which runs the receiver core and copies the
//! plaintext into its chunk. The receive itself (the kernel's copy and, without offloads,
//! its checksum) and the checks are most of what a datagram costs the receiving end: on
//! threads of their own they spread over cores as the lanes spread the datagrams over the
//! path's queues, and the one loop keeps only the core's bookkeeping and one copy. A
//! host without CPUs to spare for them, and a copy of one lane, receive in the loop
//! itself, checking each batch with the same [`Checked`].

// An I/O driver: the lanes' threads wait for batches on the clock.
#![allow(clippy::disallowed_methods)]

use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::{Scope, ScopedJoinHandle};
use std::time::Duration;

use crate::datagrams::Session;
use crate::error::TransferError;
use crate::seal::Sealer;
use crate::sys::{self, RecvBatch};
use crate::wire::{self, Datagram, DATA_HEADER};

/// Batches a lane's thread has: one it fills while the loop takes another, and one to
/// spare.
const BATCHES_A_LANE: usize = 3;
/// Messages a batch takes per `recvmmsg`: a datagram each, or where the socket coalesces
/// a run of them in up to 64 KiB...
const MESSAGES: usize = 64;
/// ...so with coalescing the lanes' batches together hold at most this much (fewer
/// messages a batch over many lanes: 16 lanes take 16 a batch). A coalescing socket on a
/// path that does not coalesce (the lab's links, a NIC without GRO) still takes a
/// datagram a message, so a batch is not cut smaller than that needs.
const COALESCED_BYTES: usize = 48 << 20;
/// While a stream arrives, a receiving thread sleeps this long between batches.
pub const RECEIVE_QUANTUM_NS: u64 = 250_000;
/// The longest a lane's thread lets a batch gather: datagrams wait in the socket that
/// long before they are acknowledged, which the sender reads as round-trip time.
const MAX_LANE_QUANTUM_NS: u64 = 1_000_000;
/// How long a lane's thread waits in one poll (its socket and the stop's eventfd) or for
/// a batch back, before it looks again whether it should stop.
const POLL_NS: u64 = 10_000_000;

/// Whether a copy over `lanes` receives on a thread a lane: where the host has CPUs to
/// spare for them (4 or more), or as `LINERATE_COPY_RECEIVE_THREADS` (`1` or `0`) says.
/// On 2 CPUs the threads cost more than they spread: over a veth pair without offloads,
/// 2 lanes took 14 % and 4 lanes 22 % more receiving CPU a Gbit than one loop reading
/// every lane, and that CPU was the sender's (docs/performance.md).
pub fn receive_threads(lanes: usize) -> bool {
    match std::env::var("LINERATE_COPY_RECEIVE_THREADS").as_deref() {
        Ok("1") => lanes > 1,
        Ok("0") => false,
        _ => lanes > 1 && std::thread::available_parallelism().map_or(1, |n| n.get()) >= 4,
    }
}

/// How a lane's batches receive: runs the kernel coalesced (64 KiB a message), or a
/// datagram of up to `size` bytes a message; `tos`: each message's TOS byte too (ECN).
#[derive(Clone, Copy, Debug)]
pub enum BatchKind {
    Coalescing { tos: bool },
    Datagrams { size: usize, tos: bool },
}

impl BatchKind {
    /// A batch of this kind of `count` messages.
    pub fn make(self, count: usize) -> RecvBatch {
        match self {
            BatchKind::Coalescing { tos } => RecvBatch::coalescing(count, tos),
            BatchKind::Datagrams { size, tos: true } => RecvBatch::with_tos(count, size),
            BatchKind::Datagrams { size, tos: false } => RecvBatch::new(count, size),
        }
    }

    /// A lane's batch, of `lanes`: [`MESSAGES`] messages, fewer where coalescing would
    /// take the lanes' batches past [`COALESCED_BYTES`].
    fn for_lane(self, lanes: usize) -> RecvBatch {
        let count = match self {
            BatchKind::Coalescing { .. } => {
                let room = COALESCED_BYTES / (lanes * BATCHES_A_LANE * sys::COALESCED_BUFFER);
                room.clamp(8, MESSAGES)
            }
            BatchKind::Datagrams { .. } => MESSAGES,
        };
        self.make(count)
    }
}

/// What a datagram of a file must be to be taken: of this file and session, tagged with
/// the session's key, and with `--encrypt` sealed by its sealer.
#[derive(Clone, Copy)]
pub struct Check<'a> {
    pub file: u32,
    pub session: u64,
    pub key: &'a [u8; 32],
    pub sealer: Option<&'a Sealer>,
}

/// A datagram that passed: where its plaintext lies in the batch, and its header.
#[derive(Clone, Copy, Debug)]
pub struct Accepted {
    index: usize,
    pub pn: u64,
    pub offset: u64,
    start: usize,
    len: usize,
    /// Marked Congestion Experienced on the way.
    pub ce: bool,
    /// When the kernel received it, where the socket was asked ([`sys::receive_timestamps`]).
    pub arrived_ns: Option<u64>,
}

impl Accepted {
    /// Bytes of its plaintext (a block of the file).
    pub fn plain_len(&self) -> usize {
        self.len
    }
}

/// A lane's batch, checked: the datagrams that passed, and how many were damaged.
pub struct Checked {
    lane: usize,
    batch: RecvBatch,
    pub accepted: Vec<Accepted>,
    /// Datagrams whose tag, CRC or seal failed (damaged on the way, or forged).
    pub corrupted: u64,
}

impl Checked {
    /// An empty batch of lane `lane` (0 for the one loop's, which reads every lane).
    pub fn new(lane: usize, batch: RecvBatch) -> Checked {
        Checked {
            lane,
            batch,
            accepted: Vec::new(),
            corrupted: 0,
        }
    }

    /// The plaintext of a datagram that passed.
    pub fn plain(&self, datagram: &Accepted) -> &[u8] {
        &self.batch.get(datagram.index)[datagram.start..datagram.start + datagram.len]
    }

    /// Receives what waits on `fd` (without blocking) and checks it; returns the
    /// datagrams received, whether they passed or not.
    pub fn receive(&mut self, fd: RawFd, check: &Check<'_>) -> std::io::Result<usize> {
        let received = self.batch.receive(fd)?;
        self.check(check);
        Ok(received)
    }

    /// Whether the last receive filled the batch (more may wait).
    pub fn full(&self) -> bool {
        self.batch.full()
    }

    /// Checks the datagrams of the last receive, opening seals in place.
    fn check(&mut self, check: &Check<'_>) {
        self.accepted.clear();
        self.corrupted = 0;
        for index in 0..self.batch.len() {
            let header = match wire::parse(self.batch.get(index), check.key) {
                Ok(Datagram::Data { header, .. }) => header,
                // The socket is connected to the sender: a data datagram whose header tag
                // or payload CRC fails was damaged on the way.
                Err(wire::WireError::Corrupt | wire::WireError::Tag) => {
                    self.corrupted += 1;
                    continue;
                }
                _ => continue,
            };
            if header.session != check.session || header.file != check.file {
                continue;
            }
            let payload = &mut self.batch.get_mut(index)[DATA_HEADER..];
            let len = match check.sealer {
                // The tag and the CRC passed: a seal that does not open is a forgery by a
                // key holder, not taken (the sender resends what is not acknowledged).
                Some(sealer) => {
                    let (pn, offset) = (header.pn, header.offset);
                    match sealer.open_in_place(check.file, check.session, pn, offset, payload) {
                        Ok(len) if len > 0 => len,
                        _ => {
                            self.corrupted += 1;
                            continue;
                        }
                    }
                }
                None => payload.len(),
            };
            self.accepted.push(Accepted {
                index,
                pn: header.pn,
                offset: header.offset,
                start: DATA_HEADER,
                len,
                ce: self.batch.tos(index).is_some_and(|tos| tos & 0b11 == 0b11),
                arrived_ns: self.batch.arrived_ns(index),
            });
        }
    }
}

/// What a lane's thread hands the loop: a checked batch, or why it stopped.
type LaneEvent = Result<Checked, String>;

/// The lanes' receiving threads as the loop sees them.
pub struct LaneReceivers<'scope> {
    events: mpsc::Receiver<LaneEvent>,
    /// A queue a lane, for its batches once the loop is done with them.
    returns: Vec<mpsc::Sender<Checked>>,
    stop: Arc<AtomicBool>,
    /// Wakes the threads from their polls to see `stop`.
    wakeup: Arc<sys::Wakeup>,
    threads: Vec<ScopedJoinHandle<'scope, u64>>,
}

impl<'scope> LaneReceivers<'scope> {
    /// A thread for each of `session`'s lanes, within `scope`.
    pub fn start(
        scope: &'scope Scope<'scope, '_>,
        session: &'scope Session,
        check: Check<'scope>,
        kind: BatchKind,
    ) -> Result<LaneReceivers<'scope>, TransferError> {
        let (events_tx, events) = mpsc::sync_channel(session.lane_count() * BATCHES_A_LANE);
        let stop = Arc::new(AtomicBool::new(false));
        let wakeup = sys::Wakeup::new()
            .map(Arc::new)
            .map_err(|e| TransferError::Local(format!("cannot make an eventfd: {e}")))?;
        let mut receivers = LaneReceivers {
            events,
            returns: Vec::new(),
            stop: stop.clone(),
            wakeup: wakeup.clone(),
            threads: Vec::new(),
        };
        let lanes = session.lane_count();
        for (lane, socket) in session.sockets().enumerate() {
            let (returns, returned) = mpsc::channel();
            let fds = [socket.as_raw_fd(), wakeup.fd()];
            let (events, stop, wakeup) = (events_tx.clone(), stop.clone(), wakeup.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("copy-recv-{lane}"))
                .spawn_scoped(scope, move || {
                    let _wakeup = wakeup;
                    receive_lane(lane, lanes, fds, kind, check, &returned, &events, &stop)
                });
            match spawned {
                Ok(thread) => {
                    receivers.returns.push(returns);
                    receivers.threads.push(thread);
                }
                Err(e) => {
                    receivers.stop();
                    return Err(TransferError::Local(format!(
                        "cannot start a lane's receiving thread: {e}"
                    )));
                }
            }
        }
        Ok(receivers)
    }

    /// The next checked batch, waiting up to `timeout_ns` for one; `Ok(None)` when none
    /// came.
    pub fn next(&self, timeout_ns: Option<u64>) -> Result<Option<Checked>, TransferError> {
        let event = match timeout_ns {
            Some(ns) => match self.events.recv_timeout(Duration::from_nanos(ns)) {
                Ok(event) => event,
                Err(mpsc::RecvTimeoutError::Timeout) => return Ok(None),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(TransferError::Local("the lanes' threads ended".into()))
                }
            },
            None => match self.events.try_recv() {
                Ok(event) => event,
                Err(_) => return Ok(None),
            },
        };
        event
            .map(Some)
            .map_err(|e| TransferError::Local(format!("cannot receive: {e}")))
    }

    /// Gives a batch back to its lane's thread.
    pub fn give_back(&self, checked: Checked) {
        let _ = self.returns[checked.lane].send(checked);
    }

    /// Stops the threads and waits for them; returns the CPU nanoseconds they used. (Each
    /// lane has at most [`BATCHES_A_LANE`] batches and the queue room for all of them, so
    /// no thread is blocked handing one over.)
    pub fn stop(&mut self) -> u64 {
        self.stop_now();
        self.threads
            .drain(..)
            .map(|thread| thread.join().unwrap_or(0))
            .sum()
    }
}

impl Drop for LaneReceivers<'_> {
    /// A loop that ends by an error still stops the threads (its scope then joins them).
    fn drop(&mut self) {
        self.stop_now();
    }
}

impl LaneReceivers<'_> {
    /// Tells the threads to stop and wakes them: from their polls by the eventfd, from
    /// their waits for a batch back by closing the queues.
    fn stop_now(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.wakeup.wake();
        self.returns.clear();
    }
}

/// A lane's thread: receives a batch, checks it and hands it over, until told to stop or
/// the loop is gone. Returns its CPU time.
#[allow(clippy::too_many_arguments)]
fn receive_lane(
    lane: usize,
    lanes: usize,
    [fd, wakeup]: [RawFd; 2],
    kind: BatchKind,
    check: Check<'_>,
    returned: &mpsc::Receiver<Checked>,
    events: &mpsc::SyncSender<LaneEvent>,
    stop: &AtomicBool,
) -> u64 {
    sys::tight_timer_slack();
    let quantum = (RECEIVE_QUANTUM_NS * lanes as u64).min(MAX_LANE_QUANTUM_NS);
    let mut made = 0;
    let mut ready: Option<Checked> = None;
    while !stop.load(Ordering::Relaxed) {
        let mut checked = match ready.take().map(Ok).unwrap_or_else(|| returned.try_recv()) {
            Ok(checked) => checked,
            Err(_) if made < BATCHES_A_LANE => {
                made += 1;
                Checked::new(lane, kind.for_lane(lanes))
            }
            Err(_) => match returned.recv_timeout(Duration::from_nanos(POLL_NS)) {
                Ok(checked) => checked,
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            },
        };
        if !matches!(
            sys::wait_any(&[fd, wakeup], libc::POLLIN, Some(POLL_NS)),
            Ok(true)
        ) || stop.load(Ordering::Relaxed)
        {
            ready = Some(checked);
            continue;
        }
        match checked.receive(fd, &check) {
            Ok(0) => {
                ready = Some(checked);
                continue;
            }
            Ok(_) => {}
            Err(e) => {
                let _ = events.send(Err(e.to_string()));
                break;
            }
        }
        let full = checked.full();
        if events.send(Ok(checked)).is_err() {
            break;
        }
        // While a stream arrives, let a batch gather in the socket instead of waking for
        // every datagram (a wake-up costs more than the datagram): a lane carries a share
        // of the stream, so it waits that many quanta for a batch as large as one lane's.
        if !full {
            sys::sleep_ns(quantum);
        }
    }
    sys::thread_cpu_ns()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lanes::Framing;
    use std::net::UdpSocket;

    const KEY: [u8; 32] = [9; 32];

    /// A datagram of file 1, session 77, framed as a lane's sending thread frames it.
    fn framed(framing: &Framing<'_>, pn: u64, plain: &[u8]) -> Vec<u8> {
        let mut header = [0u8; DATA_HEADER];
        let mut sealed = Vec::new();
        framing.frame(pn, pn * 100, plain, &mut header, Some(&mut sealed));
        let mut bytes = header.to_vec();
        bytes.extend_from_slice(framing.payload(plain, &sealed));
        bytes
    }

    /// Sends `datagrams` to a fresh socket and checks them as a lane's thread does.
    fn checked(datagrams: &[Vec<u8>], check: Check<'_>) -> Checked {
        let to = UdpSocket::bind("127.0.0.1:0").unwrap();
        let from = UdpSocket::bind("127.0.0.1:0").unwrap();
        for datagram in datagrams {
            from.send_to(datagram, to.local_addr().unwrap()).unwrap();
        }
        let mut batch = Checked::new(
            0,
            BatchKind::Datagrams {
                size: 2048,
                tos: false,
            }
            .make(MESSAGES),
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while batch.batch.len() < datagrams.len() && std::time::Instant::now() < deadline {
            let _ = sys::wait_any(&[to.as_raw_fd()], libc::POLLIN, Some(POLL_NS));
            // Every datagram is in the socket before the one receive that takes them all.
            std::thread::sleep(Duration::from_millis(20));
            batch.batch.receive(to.as_raw_fd()).unwrap();
        }
        assert_eq!(batch.batch.len(), datagrams.len(), "datagrams received");
        batch.check(&check);
        batch
    }

    /// A lane's thread passes what the one-lane loop would store and counts what it
    /// would count as damaged: good datagrams pass with their plaintext (a sealed one
    /// opened where it lies), a flipped payload bit (CRC), a changed header (tag) and a
    /// seal that does not open are counted, another file's or session's datagram is
    /// passed over without counting.
    #[test]
    fn a_lanes_thread_passes_the_good_datagrams_and_counts_the_damaged() {
        for sealer in [None, Some(Sealer::new(&[4; 32]))] {
            let framing = Framing {
                file: 1,
                session: 77,
                key: KEY,
                sealer: sealer.as_ref(),
            };
            let check = Check {
                file: 1,
                session: 77,
                key: &KEY,
                sealer: sealer.as_ref(),
            };
            let good = framed(&framing, 5, b"first block");
            let mut crc = framed(&framing, 6, b"second block");
            *crc.last_mut().unwrap() ^= 1;
            let mut tag = framed(&framing, 7, b"third block");
            tag[DATA_HEADER - 1] ^= 1;
            let other_file = framed(&Framing { file: 2, ..framing }, 8, b"other file");
            let other_session = framed(
                &Framing {
                    session: 78,
                    ..framing
                },
                9,
                b"other",
            );
            let later = framed(&framing, 10, b"last block");
            let mut datagrams = vec![good, crc, tag, other_file, other_session, later];
            let mut expect_corrupted = 2;
            if let Some(sealer) = &sealer {
                // Sealed under another offset, then framed (CRC and tag) correctly: only
                // the seal fails, as a key holder's forgery would.
                let mut forged = Vec::new();
                sealer.seal(1, 77, 11, 0, b"forged", &mut forged);
                let mut header = [0u8; DATA_HEADER];
                wire::DataHeader {
                    file: 1,
                    session: 77,
                    pn: 11,
                    offset: 1100,
                    len: forged.len() as u16,
                    crc: crc32fast::hash(&forged),
                }
                .encode(&mut header, &KEY);
                datagrams.push([&header[..], &forged].concat());
                expect_corrupted += 1;
            }
            let batch = checked(&datagrams, check);
            let name = if sealer.is_some() { "sealed" } else { "plain" };
            assert_eq!(batch.corrupted, expect_corrupted, "{name}");
            let passed: Vec<(u64, u64, &[u8])> = batch
                .accepted
                .iter()
                .map(|a| (a.pn, a.offset, batch.plain(a)))
                .collect();
            assert_eq!(
                passed,
                vec![
                    (5, 500, &b"first block"[..]),
                    (10, 1000, &b"last block"[..])
                ],
                "{name}"
            );
        }
    }
}
