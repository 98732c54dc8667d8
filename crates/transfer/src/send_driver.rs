//! The sending end's driver: a reader thread that reads each chunk ahead, hashes it and
//! sends the hash over the control connection; the datagram loop around the sender core
//! (pacing, batches of up to 64 datagrams per `sendmmsg`, ACKs); and the time accounts
//! that say what held the transfer back.

// An I/O driver: the datagram loop paces and accounts its time on the clock; the sender core it drives takes the time as an argument.
#![allow(clippy::disallowed_methods)]

use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::channel::{Channel, ChannelError, ControlWriter};
use crate::control::{Control, EndStats, SenderFigures};
use crate::datagrams::{Clock, Session};
use crate::error::TransferError;
use crate::journal;

/// A sending end gives up after this long without an acknowledgement, from the start of
/// sending or from the last one.
const ACK_SILENCE_NS: u64 = 60_000_000_000;
use crate::lanes::{Framing, LaneSenders, Outgoing};
use crate::layout::{chunk_buffer, root_hash, Layout};
use crate::outcome::{FileOutcome, TimelinePoint, TransferProgress, Waits};
use crate::rate::RateConfig;
use crate::seal::Sealer;
use crate::sender::{Blocked, Poll, Sender, Transmit};
use crate::sys::{self, RecvBatch, SendBatch};
use crate::wire::{self, Datagram, DATA_HEADER};

/// Chunks read ahead of the sending.
const READ_AHEAD: usize = 16;
/// Datagrams per `sendmmsg`.
const BATCH: usize = 64;
/// A cold start's packet train is framed whole before its first datagram leaves, so that
/// it leaves back to back however slow the framing (a debug build's is 40 us a datagram).
const TRAIN_BATCH: usize = crate::train::MAX_TRAIN_PACKETS as usize;

enum Loaded {
    Chunk(u64, Option<Arc<Vec<u8>>>),
    Failed(String),
    Finished {
        root: [u8; 32],
        busy_s: f64,
        cpu_s: f64,
    },
}

fn read_chunks(
    file: &File,
    layout: Layout,
    present: &[bool],
    sink: &ControlWriter,
    out: mpsc::SyncSender<Loaded>,
    spare: mpsc::Receiver<Vec<u8>>,
    stop: &AtomicBool,
) {
    let cpu_start = sys::thread_cpu_ns();
    let mut busy = Duration::ZERO;
    let mut roots = Vec::with_capacity(layout.chunks() as usize);
    for chunk in 0..layout.chunks() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let len = layout.chunk_len(chunk) as usize;
        // A buffer the sending loop is done with, else a new one (13 % of the sending
        // process's CPU at 5 Gbit/s went to zeroing new ones).
        let mut bytes = chunk_buffer(spare.try_recv().ok(), len);
        let started = Instant::now();
        if let Err(e) = file.read_exact_at(&mut bytes, chunk * layout.chunk) {
            let _ = out.send(Loaded::Failed(format!(
                "cannot read chunk {chunk}: {e} (the file shrank?)"
            )));
            return;
        }
        busy += started.elapsed();
        let hash = *blake3::hash(&bytes).as_bytes();
        roots.push(hash);
        if sink
            .send(&Control::Hash {
                chunk,
                hash: journal::hash_hex(&hash),
            })
            .is_err()
        {
            let _ = out.send(Loaded::Failed("the control connection failed".into()));
            return;
        }
        let data = (!present[chunk as usize]).then(|| Arc::new(bytes));
        if out.send(Loaded::Chunk(chunk, data)).is_err() {
            return;
        }
    }
    let _ = out.send(Loaded::Finished {
        root: root_hash(&layout, &roots),
        busy_s: busy.as_secs_f64(),
        cpu_s: (sys::thread_cpu_ns() - cpu_start) as f64 / 1e9,
    });
}

/// Sends one file; the receiver's `accept` (its chunks and window) has arrived.
#[allow(clippy::too_many_arguments)]
// Long: thread set-up around the send loop: the reader, the socket, the loop and the end,
// in order (the next to split).
pub fn send_file(
    channel: &mut Channel,
    session: &Session,
    file_index: u32,
    file: &File,
    layout: Layout,
    have: &[(u64, u64)],
    window: u64,
    rate: RateConfig,
    initial_rtt_ns: u64,
    sealer: Option<&Sealer>,
    cancel: &AtomicBool,
    progress: &dyn Fn(TransferProgress),
) -> Result<FileOutcome, TransferError> {
    let clock = Clock::start();
    let cpu_start = sys::thread_cpu_ns();
    let wait_start = sys::thread_runqueue_wait_ns();
    let mut sender = Sender::new(layout, rate, initial_rtt_ns);
    sender.set_lanes(session.lane_count());
    let mut present = vec![false; layout.chunks() as usize];
    for chunk in crate::receive_driver::have_chunks(have, layout.chunks()) {
        present[chunk as usize] = true;
        sender.mark_present(chunk);
    }
    let resumed_bytes: u64 = (0..layout.chunks())
        .filter(|&c| present[c as usize])
        .map(|c| layout.chunk_len(c))
        .sum();
    sender.set_window(window);
    let stop = Arc::new(AtomicBool::new(false));
    let sink = channel.sink();
    let result = std::thread::scope(|scope| {
        let (loaded_tx, loaded_rx) = mpsc::sync_channel(READ_AHEAD);
        let (spare_tx, spare_rx) = mpsc::sync_channel(READ_AHEAD);
        let reader_stop = stop.clone();
        let reader_sink = sink.clone();
        let present = &present;
        let reader = std::thread::Builder::new()
            .name("copy-reader".into())
            .spawn_scoped(scope, move || {
                let (out, spare) = (loaded_tx, spare_rx);
                read_chunks(
                    file,
                    layout,
                    present,
                    &reader_sink,
                    out,
                    spare,
                    &reader_stop,
                )
            })
            .map_err(|e| TransferError::Local(format!("cannot start the reader: {e}")))?;
        let (control_tx, control_rx) = mpsc::channel::<Result<Control, ChannelError>>();
        let control_stop = stop.clone();
        let control_reader = &mut *channel;
        let control = scope.spawn(move || loop {
            let message = control_reader.receive(Duration::from_secs(3600), Some(&control_stop));
            let end = !matches!(message, Ok(Control::Refetch { .. }));
            let _ = control_tx.send(message);
            if end {
                return;
            }
        });
        let framing = Framing {
            file: file_index,
            session: session.id,
            key: session.key,
            sealer,
        };
        let (lanes, lane_threads) = match session.lane_count() {
            1 => (None, Vec::new()),
            _ => {
                let (lanes, threads) = LaneSenders::start(scope, session, framing)?;
                (Some(lanes), threads)
            }
        };
        let inputs = SendInputs {
            session,
            framing,
            loaded: &loaded_rx,
            spare: &spare_tx,
            control: &control_rx,
            clock: &clock,
            progress,
            lanes: lanes.as_ref(),
        };
        let result = send_loop(inputs, &mut sender, cancel);
        stop.store(true, Ordering::Relaxed);
        // The lanes' threads end when their queues close.
        drop(lanes);
        let lanes_cpu_ns: u64 = lane_threads
            .into_iter()
            .map(|t| t.join().unwrap_or(0))
            .sum();
        // Unblock a reader waiting for room, then wait for both threads.
        while loaded_rx.try_recv().is_ok() {}
        drop(loaded_rx);
        let _ = reader.join();
        let _ = control.join();
        result.map(|looped| (looped, lanes_cpu_ns))
    });
    let (mut looped, lanes_cpu_ns) = match result {
        Ok(done) => done,
        Err(e) => {
            if !matches!(e, TransferError::Remote(_)) {
                let _ = sink.send(&Control::Failed {
                    message: e.to_string(),
                });
            }
            return Err(e);
        }
    };
    if looped.receiver_root != looped.sender_root {
        let message = "the file's root hash differs between the ends".to_string();
        let _ = sink.send(&Control::Failed {
            message: message.clone(),
        });
        return Err(TransferError::Local(message));
    }
    let counters = sender.counters;
    let model = !matches!(rate, RateConfig::Fixed { .. });
    let stats = EndStats {
        disk_busy_s: looped.reader_busy_s,
        cpu_s: (sys::thread_cpu_ns() - cpu_start + lanes_cpu_ns) as f64 / 1e9 + looped.reader_cpu_s,
        wall_s: clock.now_ns() as f64 / 1e9,
        corrupted_datagrams: 0,
        rcvbuf_errors: 0,
        runqueue_wait_s: sys::thread_runqueue_wait_ns().saturating_sub(wait_start) as f64 / 1e9,
        // Only a receiver reads a resumed file back.
        resume_checked_chunks: 0,
        resume_damaged_chunks: 0,
        resume_check_s: 0.0,
        sent: SenderFigures {
            payload_bytes: counters.bytes,
            resent_bytes: counters.retransmitted_bytes,
            lost_packets: counters.lost_packets,
            tail_copy_bytes: counters.tail_copy_bytes,
            waits: looped.outcome.waits,
            min_rtt_ms: sender.min_rtt_ns().map(|ns| ns as f64 / 1e6),
            bottleneck_bps: model.then(|| sender.rate().bottleneck_bps() as f64),
            random_loss: model.then(|| sender.rate().random_loss()),
            resumed_bps: sender.rate().resumed_bps().map(|bps| bps as f64),
            train: sender.train_estimate(),
            ecn: session.ecn().then(|| crate::control::EcnFigures {
                ce_marked: counters.ce_marked,
                ce_rounds: sender.rate().ce_rounds,
            }),
        },
    };
    sink.send(&Control::Closed { stats })
        .map_err(|e| TransferError::Peer(format!("the control connection failed: {e}")))?;
    looped.outcome.bytes = layout.size;
    looped.outcome.resumed_bytes = resumed_bytes;
    looped.outcome.wall_s = stats.wall_s;
    looped.outcome.root = journal::hash_hex(&looped.sender_root);
    looped.outcome.local = stats;
    looped.outcome.take_sender_figures(&stats.sent);
    Ok(looped.outcome)
}

struct Looped {
    outcome: FileOutcome,
    sender_root: [u8; 32],
    receiver_root: [u8; 32],
    reader_busy_s: f64,
    reader_cpu_s: f64,
}

/// What the sending loop is given: the session, its channels to the reader and the
/// control connection, and the clock.
struct SendInputs<'a> {
    session: &'a Session,
    /// The file's index, the session's id and key, and the sealer: what each datagram is
    /// framed with, here or in the lanes' threads.
    framing: Framing<'a>,
    loaded: &'a mpsc::Receiver<Loaded>,
    /// Chunk buffers back to the reader once no lane holds them.
    spare: &'a mpsc::SyncSender<Vec<u8>>,
    control: &'a mpsc::Receiver<Result<Control, ChannelError>>,
    clock: &'a Clock,
    progress: &'a dyn Fn(TransferProgress),
    /// With more than one lane, their sending threads.
    lanes: Option<&'a LaneSenders>,
}

/// The reader's last word: the file's root and its costs.
#[derive(Clone, Copy)]
struct ReaderEnd {
    root: [u8; 32],
    busy_s: f64,
    cpu_s: f64,
}

/// The receiving end's verdict: its root and its figures.
type Verdict = ([u8; 32], EndStats);

/// Why the sender core held datagrams back, and until when (a time, or an event).
type HeldBack = Option<(Option<u64>, Blocked)>;

/// The state of one file's sending, driven a step at a time (as a sans-IO connection is
/// driven by its transmit and timer steps): take the reader's chunks, hear the control
/// connection, take ACKs, transmit a batch, account the timeline and the waits, sleep.
struct SendLoop<'a> {
    io: SendInputs<'a>,
    layout: Layout,
    /// Chunks in memory from `base` on; a slot is None for a chunk not sent (present).
    chunks: VecDeque<Option<Arc<Vec<u8>>>>,
    base: u64,
    loaded_count: u64,
    reader: Option<ReaderEnd>,
    batch: Batch,
    acks: RecvBatch,
    /// When the last ACK came (0: none yet, the clock's start, when sending began).
    last_ack_ns: u64,
    waits: Waits,
    /// What held the next datagram back, since when.
    waiting: Option<(Blocked, u64)>,
    timeline: Timeline,
    refetched: u64,
    /// Over lanes: the batch being built for each lane's thread this turn.
    lane_work: Vec<Vec<Outgoing>>,
    /// What the sender core let go this turn, before it is framed here.
    polled: Vec<Transmit>,
}

/// One `sendmmsg` worth of datagrams being built.
struct Batch {
    headers: Vec<[u8; DATA_HEADER]>,
    /// (chunk, offset in it, length, lane) of each datagram's plain payload.
    pending: Vec<(u64, usize, usize, usize)>,
    /// With --encrypt, each datagram's sealed payload (the chunk's bytes stay plain).
    sealed: Vec<Vec<u8>>,
    send: SendBatch,
}

/// The sender's figures every 100 ms: the copy's timeline and its progress.
#[derive(Default)]
struct Timeline {
    points: Vec<TimelinePoint>,
    slice_start: u64,
    last_acked: u64,
    last_resent: u64,
    /// A line of the rate model's state every 100 ms on stderr, for studying a path
    /// (`LINERATE_COPY_TRACE`).
    trace: bool,
    trace_sent: u64,
}

fn send_loop(
    io: SendInputs<'_>,
    sender: &mut Sender,
    cancel: &AtomicBool,
) -> Result<Looped, TransferError> {
    sys::tight_timer_slack();
    let layout = *sender.layout();
    let mut state = SendLoop {
        io,
        layout,
        chunks: VecDeque::new(),
        base: 0,
        loaded_count: 0,
        reader: None,
        batch: Batch {
            headers: vec![[0u8; DATA_HEADER]; TRAIN_BATCH],
            pending: Vec::with_capacity(TRAIN_BATCH),
            sealed: vec![Vec::new(); TRAIN_BATCH],
            send: SendBatch::default(),
        },
        acks: RecvBatch::new(16, 2048),
        last_ack_ns: 0,
        waits: Waits::default(),
        waiting: None,
        lane_work: Vec::new(),
        polled: Vec::with_capacity(TRAIN_BATCH),
        timeline: Timeline {
            trace: std::env::var_os("LINERATE_COPY_TRACE").is_some(),
            ..Timeline::default()
        },
        refetched: 0,
    };
    loop {
        if cancel.load(Ordering::Relaxed) {
            return Err(TransferError::Interrupted);
        }
        let now = state.io.clock.now_ns();
        state.drive_reader(sender)?;
        if let Some(verdict) = state.drive_control(sender)? {
            return state.finish(now, verdict);
        }
        let received = state.drive_acks(sender, now)?;
        let (sent, why_not) = state.drive_transmit(sender, now)?;
        state.drive_timeline(sender, now);
        state.account_wait(now, why_not.map(|(_, why)| why));
        if sent == 0 && received == 0 {
            state.sleep(sender, now, why_not);
        }
    }
}

impl SendLoop<'_> {
    /// Takes chunks from the reader, up to what the receiver's window lets us send soon,
    /// and lets go of what the receiver has verified.
    fn drive_reader(&mut self, sender: &mut Sender) -> Result<(), TransferError> {
        let chunks = self.layout.chunks();
        let window_chunk = sender.verified() / self.layout.chunk;
        while self.loaded_count < chunks
            && self.loaded_count < window_chunk + (READ_AHEAD as u64) + 256
        {
            match self.io.loaded.try_recv() {
                Ok(Loaded::Chunk(chunk, data)) => {
                    debug_assert_eq!(chunk, self.loaded_count);
                    self.chunks.push_back(data);
                    self.loaded_count += 1;
                    sender.set_readable(self.loaded_count);
                }
                Ok(Loaded::Failed(message)) => return Err(TransferError::Local(message)),
                Ok(Loaded::Finished {
                    root,
                    busy_s,
                    cpu_s,
                }) => {
                    self.reader = Some(ReaderEnd {
                        root,
                        busy_s,
                        cpu_s,
                    })
                }
                Err(_) => break,
            }
        }
        if self.loaded_count == chunks && self.reader.is_none() {
            if let Ok(Loaded::Finished {
                root,
                busy_s,
                cpu_s,
            }) = self.io.loaded.try_recv()
            {
                self.reader = Some(ReaderEnd {
                    root,
                    busy_s,
                    cpu_s,
                });
            }
        }
        while self.base < window_chunk && !self.chunks.is_empty() {
            if let Some(Some(bytes)) = self.chunks.pop_front() {
                if let Ok(bytes) = Arc::try_unwrap(bytes) {
                    let _ = self.io.spare.try_send(bytes);
                }
            }
            self.base += 1;
        }
        Ok(())
    }

    /// Hears the control connection: refetches of chunks whose hash failed, and the
    /// receiver's verdict, which ends the loop.
    fn drive_control(&mut self, sender: &mut Sender) -> Result<Option<Verdict>, TransferError> {
        let mut verdict = None;
        while let Ok(message) = self.io.control.try_recv() {
            match message {
                Ok(Control::Refetch { chunk }) if chunk < self.layout.chunks() => {
                    self.refetched += 1;
                    sender.refetch(chunk);
                }
                Ok(Control::Done { root, stats }) => {
                    let root = journal::parse_hash(&root).expect("validated");
                    verdict = Some((root, stats));
                }
                Ok(Control::Failed { message }) => return Err(TransferError::Remote(message)),
                Ok(other) => {
                    return Err(TransferError::Peer(format!(
                        "unexpected message during the transfer: {other:?}"
                    )))
                }
                Err(e) => return Err(TransferError::Peer(e.to_string())),
            }
        }
        Ok(verdict)
    }

    /// The receiver's verdict is in: the last wait is accounted and the reader's last
    /// word awaited (the verdict may overtake it).
    fn finish(mut self, now: u64, verdict: Verdict) -> Result<Looped, TransferError> {
        if let Some((why, since)) = self.waiting.take() {
            account(&mut self.waits, why, now - since);
        }
        let reader = match self.reader {
            Some(reader) => reader,
            None => loop {
                match self.io.loaded.recv_timeout(Duration::from_secs(60)) {
                    Ok(Loaded::Finished {
                        root,
                        busy_s,
                        cpu_s,
                    }) => {
                        break ReaderEnd {
                            root,
                            busy_s,
                            cpu_s,
                        }
                    }
                    Ok(Loaded::Chunk(..)) => continue,
                    Ok(Loaded::Failed(message)) => return Err(TransferError::Local(message)),
                    Err(_) => return Err(TransferError::Local("the reader stopped".into())),
                }
            },
        };
        let (receiver_root, remote) = verdict;
        Ok(Looped {
            outcome: FileOutcome {
                remote,
                waits: self.waits,
                timeline: self.timeline.points,
                refetched_chunks: self.refetched,
                ..FileOutcome::default()
            },
            sender_root: reader.root,
            receiver_root,
            reader_busy_s: reader.busy_s,
            reader_cpu_s: reader.cpu_s,
        })
    }

    /// Takes the ACKs waiting in the socket, and fires the loss timer when due; returns
    /// the datagrams taken.
    fn drive_acks(&mut self, sender: &mut Sender, now: u64) -> Result<usize, TransferError> {
        let session = self.io.session;
        let received = self
            .acks
            .receive(session.fd())
            .map_err(|e| TransferError::Local(format!("cannot receive: {e}")))?;
        for i in 0..received {
            if let Ok(Datagram::Ack(ack)) = wire::parse(self.acks.get(i), &session.key) {
                if ack.session == session.id
                    && ack.file == self.io.framing.file
                    && sender.on_ack(now, &ack).is_ok()
                {
                    self.last_ack_ns = now;
                }
            }
        }
        if sender.next_timeout().is_some_and(|t| t <= now) {
            sender.on_timeout(now);
        }
        // Counted from the start of sending too (`last_ack_ns` starts at 0, the clock's
        // start) while anything is still to be acknowledged: a receiver that accepts and
        // then never acknowledges (a window of 0, no ACK ever) is dropped after 60 s, not
        // held until the client gives up. A resume with nothing to send waits on the
        // sender's own reading, not on ACKs.
        let owed = self.last_ack_ns > 0 || !sender.all_acked();
        if owed && now > self.last_ack_ns + ACK_SILENCE_NS {
            return Err(TransferError::Peer("no acknowledgement for 60 s".into()));
        }
        Ok(received)
    }

    /// Sends what the sender core lets go now, up to a batch; returns the datagrams sent
    /// and, when it held some back, until when and why. A cold start's packet train goes
    /// whole, from this thread, over every lane's socket: handed to the lanes' threads it
    /// would leave as each is scheduled, slower than the bottleneck it is to measure.
    fn drive_transmit(
        &mut self,
        sender: &mut Sender,
        now: u64,
    ) -> Result<(usize, HeldBack), TransferError> {
        let train = sender.in_train();
        if let Some(lanes) = self.io.lanes.filter(|_| !train) {
            return self.transmit_over_lanes(sender, now, lanes);
        }
        let mut polled = std::mem::take(&mut self.polled);
        let why_not = match train {
            true => poll_batch(sender, now, &mut polled, TRAIN_BATCH, Sender::in_train),
            false => poll_batch(sender, now, &mut polled, BATCH, |_| true),
        };
        self.frame_here(&polled);
        self.polled = polled;
        let mut sent = 0;
        for (lane, socket) in self.io.session.sockets().enumerate() {
            sent += self.send_framed(socket.as_raw_fd(), lane)?;
        }
        Ok((sent, why_not))
    }

    /// Frames `transmits` in this thread, into the batch.
    fn frame_here(&mut self, transmits: &[Transmit]) {
        let framing = self.io.framing;
        let batch = &mut self.batch;
        batch.pending.clear();
        for t in transmits {
            let Some((chunk, data, start)) = in_memory(&self.chunks, self.base, self.layout, t)
            else {
                continue;
            };
            let i = batch.pending.len();
            let plain = &data[start..start + t.len as usize];
            let sealed = batch.sealed.get_mut(i);
            framing.frame(t.pn, t.offset, plain, &mut batch.headers[i], sealed);
            batch.pending.push((chunk, start, t.len as usize, t.lane));
        }
    }

    /// Sends the framed datagrams of lane `lane` on its socket `fd`, in one batch.
    fn send_framed(&mut self, fd: RawFd, lane: usize) -> Result<usize, TransferError> {
        let framing = self.io.framing;
        let batch = &mut self.batch;
        let datagrams: Vec<(&[u8], &[u8])> = batch
            .pending
            .iter()
            .enumerate()
            .filter(|(_, pending)| pending.3 == lane)
            .map(|(i, &(chunk, start, len, _))| {
                let data = self.chunks[(chunk - self.base) as usize]
                    .as_ref()
                    .expect("framed from memory");
                let payload = framing.payload(&data[start..start + len], &batch.sealed[i]);
                (&batch.headers[i][..], payload)
            })
            .collect();
        if datagrams.is_empty() {
            return Ok(0);
        }
        match batch.send.send(fd, &datagrams) {
            Ok(_) => Ok(datagrams.len()),
            Err(e) => Err(send_error(e, self.layout)),
        }
    }

    /// As [`drive_transmit`](Self::drive_transmit), each datagram handed to its lane's
    /// thread (which seals, sums, tags and sends it).
    fn transmit_over_lanes(
        &mut self,
        sender: &mut Sender,
        now: u64,
        lanes: &LaneSenders,
    ) -> Result<(usize, HeldBack), TransferError> {
        if let Some(e) = lanes.failure() {
            return Err(send_error(e, self.layout));
        }
        let mut work = std::mem::take(&mut self.lane_work);
        work.resize_with(self.io.session.lane_count(), Vec::new);
        let (mut sent, mut why_not) = (0, None);
        while sent < BATCH {
            match sender.poll_transmit(now) {
                Poll::Send(t) => {
                    let Some((_, data, start)) =
                        in_memory(&self.chunks, self.base, self.layout, &t)
                    else {
                        continue;
                    };
                    let lane = &mut work[t.lane];
                    if lane.capacity() == 0 {
                        *lane = lanes.batch();
                    }
                    lane.push(Outgoing {
                        pn: t.pn,
                        offset: t.offset,
                        chunk: data.clone(),
                        start,
                        len: t.len as usize,
                    });
                    sent += 1;
                }
                Poll::Wait { until, why } => {
                    why_not = Some((until, why));
                    break;
                }
            }
        }
        for (lane, batch) in work.iter_mut().enumerate() {
            if !batch.is_empty() {
                lanes
                    .send(lane, std::mem::take(batch))
                    .map_err(|e| TransferError::Local(format!("cannot send: {e}")))?;
            }
        }
        self.lane_work = work;
        Ok((sent, why_not))
    }

    /// Every 100 ms: a point of the timeline, the caller's progress, and the trace line.
    fn drive_timeline(&mut self, sender: &Sender, now: u64) {
        let line = &mut self.timeline;
        if now < line.slice_start + 100_000_000 {
            return;
        }
        if line.trace {
            trace_line(sender, now, line);
        }
        let acked = sender.delivered();
        let resent = sender.counters.retransmitted_bytes;
        let span = (now - line.slice_start) as f64 / 1e9;
        line.points.push(TimelinePoint {
            t_s: now as f64 / 1e9,
            goodput_bps: (acked - line.last_acked) as f64 * 8.0 / span,
            resent_bps: (resent - line.last_resent) as f64 * 8.0 / span,
        });
        line.last_acked = acked;
        line.last_resent = resent;
        line.slice_start = now;
        (self.io.progress)(TransferProgress {
            done: acked.min(self.layout.size),
            total: self.layout.size,
            sent: sender.counters.bytes,
            resent,
        });
    }

    /// Accounts the time the sender was held back, by what held it.
    fn account_wait(&mut self, now: u64, why: Option<Blocked>) {
        match self.waiting {
            Some((was, _)) if Some(was) == why => {}
            Some((was, since)) => {
                account(&mut self.waits, was, now - since);
                self.waiting = why.map(|w| (w, now));
            }
            None => self.waiting = why.map(|w| (w, now)),
        }
    }

    /// Nothing moved: sleeps until the pacer, a timer or an ACK.
    fn sleep(&self, sender: &Sender, now: u64, why_not: HeldBack) {
        let until = why_not.and_then(|(until, _)| until);
        let deadline = [until, sender.next_timeout()]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now + 2_000_000);
        let wait = deadline.saturating_sub(now).clamp(1, 2_000_000);
        if matches!(why_not, Some((_, Blocked::Pacing))) {
            // The pacer decides: sleep until it is due, not at every ACK (each wake-up
            // costs more than the ACKs it would take a millisecond sooner; they wait in
            // the socket and are taken at once on waking).
            sys::sleep_ns(wait);
        } else {
            let _ = sys::wait(self.io.session.fd(), libc::POLLIN, Some(wait));
        }
    }
}

/// The chunk transmit `t` sends from, when it is still in memory (a chunk verified
/// meanwhile has nothing to resend): (chunk, its bytes, `t`'s start in them).
fn in_memory<'a>(
    chunks: &'a VecDeque<Option<Arc<Vec<u8>>>>,
    base: u64,
    layout: Layout,
    t: &Transmit,
) -> Option<(u64, &'a Arc<Vec<u8>>, usize)> {
    let chunk = t.offset / layout.chunk;
    let data = chunks.get(chunk.checked_sub(base)? as usize)?.as_ref()?;
    Some((chunk, data, (t.offset - chunk * layout.chunk) as usize))
}

/// Takes up to `most` of what the sender core lets go now, while `more` holds, into
/// `polled`; returns until when and why it held the rest back, when it did.
fn poll_batch(
    sender: &mut Sender,
    now: u64,
    polled: &mut Vec<Transmit>,
    most: usize,
    more: impl Fn(&Sender) -> bool,
) -> HeldBack {
    polled.clear();
    while polled.len() < most && more(sender) {
        match sender.poll_transmit(now) {
            Poll::Send(t) => polled.push(t),
            Poll::Wait { until, why } => return Some((until, why)),
        }
    }
    None
}

/// What a failed send means: a datagram too large for the path now (its MTU fell), or
/// the receiver gone (ICMP port unreachable and friends).
fn send_error(e: std::io::Error, layout: Layout) -> TransferError {
    if e.raw_os_error() == Some(libc::EMSGSIZE) {
        TransferError::Local(format!(
            "datagrams of {} bytes no longer fit the path (its MTU fell): {e}",
            layout.block as usize + DATA_HEADER
        ))
    } else {
        TransferError::Peer(format!("cannot send: {e}"))
    }
}

/// The rate model's state in one line on stderr.
fn trace_line(sender: &Sender, now: u64, line: &mut Timeline) {
    let rate = sender.rate();
    let span = (now - line.slice_start).max(1) as f64 / 1e9;
    let sent_mbps = (sender.counters.bytes - line.trace_sent) as f64 * 8.0 / span / 1e6;
    let acked_mbps = (sender.delivered() - line.last_acked) as f64 * 8.0 / span / 1e6;
    line.trace_sent = sender.counters.bytes;
    eprint!("trace sent {sent_mbps:>6.0} M acked {acked_mbps:>6.0} M ");
    eprintln!(
        "trace {:>7.3} s pacing {:>6} M bottleneck {:>6} M cwnd {:>10} in flight {:>10} {:?} random loss {:.4} srtt {:.1} ms min {:.1} ms lost {} (by time {}, probes {}) congested rounds {}",
        now as f64 / 1e9,
        rate.pacing_bps() / 1_000_000,
        rate.bottleneck_bps() / 1_000_000,
        rate.cwnd().min(u64::from(u32::MAX) * 100),
        sender.in_flight(),
        rate.mode(),
        rate.random_loss(),
        sender.srtt_ns() as f64 / 1e6,
        sender.min_rtt_ns().unwrap_or(0) as f64 / 1e6,
        sender.counters.lost_packets,
        sender.counters.lost_by_time,
        sender.counters.probe_timeouts,
        rate.congested_rounds,
    );
}

fn account(waits: &mut Waits, why: Blocked, ns: u64) {
    let s = ns as f64 / 1e9;
    match why {
        Blocked::Pacing => waits.pacing_s += s,
        Blocked::Window => waits.window_s += s,
        Blocked::Receiver => waits.receiver_s += s,
        Blocked::Reader => waits.reader_s += s,
        Blocked::Tail | Blocked::Done => waits.tail_s += s,
    }
}
