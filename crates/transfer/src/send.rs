//! The sending end's driver: a reader thread that reads each chunk ahead, hashes it and
//! sends the hash over the control connection; the datagram loop around the sender core
//! (pacing, batches of up to 64 datagrams per `sendmmsg`, ACKs); and the time accounts
//! that say what held the transfer back.

#![allow(clippy::disallowed_methods)]

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::channel::{Channel, ChannelError, Sink};
use crate::control::{Control, EndStats, SenderFigures};
use crate::journal;
use crate::layout::{root_hash, Layout};
use crate::rate::RateConfig;
use crate::seal::Sealer;
use crate::sender::{Blocked, Poll, Sender};
use crate::sys::{self, RecvBatch, SendBatch};
use crate::transport::{
    Clock, FileOutcome, Progress, Session, TimelinePoint, TransferError, Waits,
};
use crate::wire::{self, DataHeader, Datagram, DATA_HEADER};

/// Chunks read ahead of the sending.
const READ_AHEAD: usize = 16;
/// Datagrams per `sendmmsg`.
const BATCH: usize = 64;

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
    sink: &Sink,
    out: mpsc::SyncSender<Loaded>,
    stop: &AtomicBool,
) {
    let cpu_start = sys::thread_cpu_ns();
    let mut busy = Duration::ZERO;
    let mut roots = Vec::with_capacity(layout.chunks() as usize);
    for chunk in 0..layout.chunks() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let mut bytes = vec![0u8; layout.chunk_len(chunk) as usize];
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
    progress: &dyn Fn(Progress),
) -> Result<FileOutcome, TransferError> {
    let clock = Clock::start();
    let cpu_start = sys::thread_cpu_ns();
    let wait_start = sys::thread_runqueue_wait_ns();
    let mut sender = Sender::new(layout, rate, initial_rtt_ns);
    let mut present = vec![false; layout.chunks() as usize];
    for chunk in crate::recv::have_chunks(have, layout.chunks()) {
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
        let reader_stop = stop.clone();
        let reader_sink = sink.clone();
        let present = &present;
        let reader = std::thread::Builder::new()
            .name("copy-reader".into())
            .spawn_scoped(scope, move || {
                read_chunks(file, layout, present, &reader_sink, loaded_tx, &reader_stop)
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
        let result = send_loop(
            session,
            file_index,
            &mut sender,
            &loaded_rx,
            &control_rx,
            &clock,
            sealer,
            cancel,
            progress,
        );
        stop.store(true, Ordering::Relaxed);
        // Unblock a reader waiting for room, then wait for both threads.
        while loaded_rx.try_recv().is_ok() {}
        drop(loaded_rx);
        let _ = reader.join();
        let _ = control.join();
        result
    });
    let mut looped = match result {
        Ok(looped) => looped,
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
        cpu_s: (sys::thread_cpu_ns() - cpu_start) as f64 / 1e9 + looped.reader_cpu_s,
        wall_s: clock.now_ns() as f64 / 1e9,
        corrupted_datagrams: 0,
        runqueue_wait_s: sys::thread_runqueue_wait_ns().saturating_sub(wait_start) as f64 / 1e9,
        sent: SenderFigures {
            payload_bytes: counters.bytes,
            resent_bytes: counters.retransmitted_bytes,
            lost_packets: counters.lost_packets,
            waits: looped.outcome.waits,
            min_rtt_ms: sender.min_rtt_ns().map(|ns| ns as f64 / 1e6),
            bottleneck_bps: model.then(|| sender.rate().bottleneck_bps() as f64),
            random_loss: model.then(|| sender.rate().random_loss()),
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

#[allow(clippy::too_many_arguments)]
fn send_loop(
    session: &Session,
    file_index: u32,
    sender: &mut Sender,
    loaded: &mpsc::Receiver<Loaded>,
    control: &mpsc::Receiver<Result<Control, ChannelError>>,
    clock: &Clock,
    sealer: Option<&Sealer>,
    cancel: &AtomicBool,
    progress: &dyn Fn(Progress),
) -> Result<Looped, TransferError> {
    sys::tight_timer_slack();
    let layout = *sender.layout();
    // Chunks in memory from `base` on; a slot is None for a chunk not sent (present).
    let mut chunks: VecDeque<Option<Arc<Vec<u8>>>> = VecDeque::new();
    let mut base = 0u64;
    let mut loaded_count = 0u64;
    let mut sender_root = None;
    let mut reader_busy_s = 0.0;
    let mut reader_cpu_s = 0.0;
    let mut headers: Vec<[u8; DATA_HEADER]> = vec![[0u8; DATA_HEADER]; BATCH];
    let mut pending: Vec<(u64, usize, usize)> = Vec::with_capacity(BATCH);
    // With --encrypt, each datagram's sealed payload (the chunk's bytes stay plain).
    let mut sealed: Vec<Vec<u8>> = vec![Vec::new(); BATCH];
    let mut send_batch = SendBatch::default();
    let mut acks = RecvBatch::new(16, 2048);
    let mut waits = Waits::default();
    let mut waiting: Option<(Blocked, u64)> = None;
    let mut timeline = Vec::new();
    let mut slice_start = 0u64;
    let mut slice_acked = 0u64;
    let mut slice_resent = 0u64;
    let mut last_acked = 0u64;
    let mut last_resent = 0u64;
    let mut last_ack_ns = 0u64;
    let mut finished: Option<([u8; 32], EndStats)> = None;
    let mut refetched = 0u64;
    let held_limit = layout.chunks();
    // A line of the rate model's state every 100 ms on stderr, for studying a path.
    let trace = std::env::var_os("LINERATE_COPY_TRACE").is_some();
    let mut trace_sent = 0u64;
    loop {
        if cancel.load(Ordering::Relaxed) {
            return Err(TransferError::Interrupted);
        }
        let now = clock.now_ns();
        // Chunks from the reader, up to what the receiver's window lets us send soon.
        let window_chunk = sender.verified() / layout.chunk;
        while loaded_count < held_limit && loaded_count < window_chunk + (READ_AHEAD as u64) + 256 {
            match loaded.try_recv() {
                Ok(Loaded::Chunk(chunk, data)) => {
                    debug_assert_eq!(chunk, loaded_count);
                    chunks.push_back(data);
                    loaded_count += 1;
                    sender.set_readable(loaded_count);
                }
                Ok(Loaded::Failed(message)) => return Err(TransferError::Local(message)),
                Ok(Loaded::Finished {
                    root,
                    busy_s,
                    cpu_s,
                }) => {
                    sender_root = Some(root);
                    reader_busy_s = busy_s;
                    reader_cpu_s = cpu_s;
                }
                Err(_) => break,
            }
        }
        if loaded_count == held_limit && sender_root.is_none() {
            if let Ok(Loaded::Finished {
                root,
                busy_s,
                cpu_s,
            }) = loaded.try_recv()
            {
                sender_root = Some(root);
                reader_busy_s = busy_s;
                reader_cpu_s = cpu_s;
            }
        }
        // Let go of what the receiver has verified.
        while base < window_chunk && !chunks.is_empty() {
            chunks.pop_front();
            base += 1;
        }
        while let Ok(message) = control.try_recv() {
            match message {
                Ok(Control::Refetch { chunk }) if chunk < layout.chunks() => {
                    refetched += 1;
                    sender.refetch(chunk);
                }
                Ok(Control::Done { root, stats }) => {
                    let root = journal::parse_hash(&root).expect("validated");
                    finished = Some((root, stats));
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
        if let Some((receiver_root, remote)) = finished {
            if let Some((why, since)) = waiting.take() {
                account(&mut waits, why, now - since);
            }
            // The receiver's verdict may overtake the reader's last message.
            let sender_root = match sender_root {
                Some(root) => root,
                None => loop {
                    match loaded.recv_timeout(Duration::from_secs(60)) {
                        Ok(Loaded::Finished {
                            root,
                            busy_s,
                            cpu_s,
                        }) => {
                            reader_busy_s = busy_s;
                            reader_cpu_s = cpu_s;
                            break root;
                        }
                        Ok(Loaded::Chunk(..)) => continue,
                        Ok(Loaded::Failed(message)) => return Err(TransferError::Local(message)),
                        Err(_) => return Err(TransferError::Local("the reader stopped".into())),
                    }
                },
            };
            return Ok(Looped {
                outcome: FileOutcome {
                    remote,
                    waits,
                    timeline,
                    refetched_chunks: refetched,
                    ..FileOutcome::default()
                },
                sender_root,
                receiver_root,
                reader_busy_s,
                reader_cpu_s,
            });
        }
        let received = acks
            .receive(session.fd())
            .map_err(|e| TransferError::Local(format!("cannot receive: {e}")))?;
        for i in 0..received {
            if let Ok(Datagram::Ack(ack)) = wire::parse(acks.get(i), &session.key) {
                if ack.session == session.id
                    && ack.file == file_index
                    && sender.on_ack(now, &ack).is_ok()
                {
                    last_ack_ns = now;
                }
            }
        }
        if sender.next_timeout().is_some_and(|t| t <= now) {
            sender.on_timeout(now);
        }
        if last_ack_ns > 0 && now > last_ack_ns + 60_000_000_000 {
            return Err(TransferError::Peer("no acknowledgement for 60 s".into()));
        }
        pending.clear();
        let mut why_not = None;
        while pending.len() < BATCH {
            match sender.poll_transmit(now) {
                Poll::Send(t) => {
                    let chunk = t.offset / layout.chunk;
                    let Some(Some(data)) =
                        chunk.checked_sub(base).and_then(|i| chunks.get(i as usize))
                    else {
                        // Not in memory (verified meanwhile): nothing to resend.
                        continue;
                    };
                    let start = (t.offset - chunk * layout.chunk) as usize;
                    let i = pending.len();
                    let plain = &data[start..start + t.len as usize];
                    let payload = match sealer {
                        Some(sealer) => {
                            sealer.seal(
                                file_index,
                                session.id,
                                t.pn,
                                t.offset,
                                plain,
                                &mut sealed[i],
                            );
                            &sealed[i][..]
                        }
                        None => plain,
                    };
                    DataHeader {
                        file: file_index,
                        session: session.id,
                        pn: t.pn,
                        offset: t.offset,
                        len: payload.len() as u16,
                        crc: crc32fast::hash(payload),
                    }
                    .encode(&mut headers[i], &session.key);
                    pending.push((chunk, start, t.len as usize));
                }
                Poll::Wait { until, why } => {
                    why_not = Some((until, why));
                    break;
                }
            }
        }
        if !pending.is_empty() {
            let datagrams: Vec<(&[u8], &[u8])> = pending
                .iter()
                .enumerate()
                .map(|(i, &(chunk, start, len))| {
                    let data = chunks[(chunk - base) as usize]
                        .as_ref()
                        .expect("checked above");
                    match sealer {
                        Some(_) => (&headers[i][..], &sealed[i][..]),
                        None => (&headers[i][..], &data[start..start + len]),
                    }
                })
                .collect();
            match send_batch.send(session.fd(), &datagrams) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {
                    return Err(TransferError::Local(format!(
                        "datagrams of {} bytes no longer fit the path (its MTU fell): {e}",
                        layout.block as usize + DATA_HEADER
                    )))
                }
                // ICMP port unreachable and friends: the receiver went away.
                Err(e) => return Err(TransferError::Peer(format!("cannot send: {e}"))),
            }
        }
        let progress_due = now >= slice_start + 100_000_000;
        if progress_due && trace {
            let rate = sender.rate();
            let span = (now - slice_start).max(1) as f64 / 1e9;
            let sent_mbps = (sender.counters.bytes - trace_sent) as f64 * 8.0 / span / 1e6;
            let acked_mbps = (sender.delivered() - last_acked) as f64 * 8.0 / span / 1e6;
            trace_sent = sender.counters.bytes;
            eprint!("trace sent {sent_mbps:>6.0} M acked {acked_mbps:>6.0} M ");
            eprintln!(
                "trace {:>7.3} s pacing {:>6} M bottleneck {:>6} M cwnd {:>10} in flight {:>10} {:?} random loss {:.4} srtt {:.1} ms min {:.1} ms lost {} congested rounds {}",
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
                rate.congested_rounds,
            );
        }
        if progress_due {
            let acked = sender.delivered();
            let resent = sender.counters.retransmitted_bytes;
            slice_acked += acked - last_acked;
            slice_resent += resent - last_resent;
            last_acked = acked;
            last_resent = resent;
            let span = (now - slice_start) as f64 / 1e9;
            timeline.push(TimelinePoint {
                t_s: now as f64 / 1e9,
                goodput_bps: slice_acked as f64 * 8.0 / span,
                resent_bps: slice_resent as f64 * 8.0 / span,
            });
            slice_acked = 0;
            slice_resent = 0;
            slice_start = now;
            progress(Progress {
                done: acked.min(layout.size),
                total: layout.size,
                sent: sender.counters.bytes,
                resent,
            });
        }
        // Account the wait and sleep until the pacer, a timer or an ACK.
        let state = why_not.map(|(_, why)| why);
        match (waiting, state) {
            (Some((was, since)), Some(now_why)) if was == now_why => {
                let _ = since;
            }
            (Some((was, since)), _) => {
                account(&mut waits, was, now - since);
                waiting = state.map(|w| (w, now));
            }
            (None, _) => waiting = state.map(|w| (w, now)),
        }
        if pending.is_empty() && received == 0 {
            let until = why_not.and_then(|(until, _)| until);
            let deadline = [until, sender.next_timeout()]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(now + 2_000_000);
            let wait = deadline.saturating_sub(now).clamp(1, 2_000_000);
            if matches!(why_not, Some((_, Blocked::Pacing))) {
                // The pacer decides: sleep until it is due, not at every ACK (each
                // wake-up costs more than the ACKs it would take a millisecond sooner;
                // they wait in the socket and are taken at once on waking).
                sys::sleep_ns(wait);
            } else {
                let _ = sys::wait(session.fd(), libc::POLLIN, Some(wait));
            }
        }
    }
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
