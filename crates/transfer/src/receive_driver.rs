//! The receiving end's driver: the `.part` file and its journal, the datagram loop around
//! the receiver core, and the writer thread that checks each chunk's hash and writes it.
//!
//! Order on the disk (what makes resume safe): a chunk's bytes are written with `pwrite`
//! (and their writeback started, which promises nothing); every journal interval the file is `fdatasync`ed and only then are the chunks written
//! since the last sync appended to the journal (and it synced). At the end the file is
//! `fsync`ed, renamed into place, the journal removed and the directory synced.

// An I/O driver: the datagram loop, the journal's intervals and the ACKs' timing read the clock; the receiver core takes the time as an argument.
#![allow(clippy::disallowed_methods)]

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::channel::{Channel, ChannelError, ControlWriter};
use crate::control::{Control, EndStats};
use crate::datagrams::{Clock, Session};
use crate::error::TransferError;
use crate::journal::{self, JournalHeader};
use crate::layout::{chunk_buffer, root_hash, Layout};
use crate::outcome::{FileOutcome, TransferProgress};
use crate::receive_lanes::{
    receive_threads, BatchKind, Check, Checked, LaneReceivers, RECEIVE_QUANTUM_NS,
};
use crate::receiver::{DataOutcome, Receiver};
use crate::seal::{Sealer, SEAL_TAG};
use crate::sender::WIRE_OVERHEAD;
use crate::sys;
use crate::wire;

/// Messages taken per `recvmmsg`: each a datagram, or a run of them where the path
/// coalesces (UDP_GRO: up to 64 KiB each).
const RECEIVE_BATCH: usize = 64;

/// Chunks synced and journaled at least this often...
pub const JOURNAL_BYTES: u64 = 64 << 20;
/// ...and at least this often in time.
pub const JOURNAL_INTERVAL: Duration = Duration::from_secs(1);

/// Where a received file goes: a directory (already opened, confined when on a server)
/// and a name in it.
pub struct Target {
    pub dir: OwnedFd,
    pub name: OsString,
    /// How messages name it.
    pub shown: String,
    /// How the file system holding it is named in a "no space" message.
    pub shown_dir: String,
    /// Memory only: nothing is written (`--null`).
    pub null: bool,
}

impl Target {
    fn with_suffix(&self, suffix: &str) -> OsString {
        let mut name = self.name.clone();
        name.push(suffix);
        name
    }

    pub fn part_name(&self) -> OsString {
        self.with_suffix(".part")
    }

    pub fn journal_name(&self) -> OsString {
        self.with_suffix(".part.journal")
    }
}

/// A target opened for one offer: what is already there, where the rest goes.
pub struct Prepared {
    target: Target,
    part: Option<File>,
    journal: Option<File>,
    header: JournalHeader,
    /// Chunks from an earlier run, each read back from the `.part` and hashed, with the
    /// hash of the bytes read (the journal's, which they matched).
    pub have: Vec<(u64, [u8; 32])>,
    /// What reading the journaled chunks back found.
    pub read_back: ReadBack,
    /// Things the user should know (a journal that was cut short or belongs elsewhere).
    pub notes: Vec<String>,
}

/// A resume's check of what the journal says the `.part` holds: each journaled chunk is
/// read back and hashed before it is trusted, because the journal's word alone is not
/// the bytes (a crash after the journal's sync and before the data's, a disk error, or
/// any other writer leaves a journal that speaks of bytes the file does not hold).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ReadBack {
    /// Journaled chunks read back and hashed.
    pub checked: u64,
    /// Of them, chunks whose bytes did not match the journal's hash (or could not be
    /// read whole): fetched again.
    pub damaged: u64,
    /// Seconds the reading and hashing took.
    pub seconds: f64,
}

/// How long a sending end waits for the receiver's `accept`: a resuming receiver reads
/// back every journaled chunk first, at a slow disk's 100 MB/s in the worst case, so the
/// wait grows with the file; a peer that says nothing is still dropped in bounded time.
pub fn accept_deadline(size: u64) -> Duration {
    Duration::from_secs(60) + Duration::from_secs(size / 100_000_000)
}

/// Reads each journaled chunk back from `part` and keeps those whose bytes hash to what
/// the journal recorded; the rest are counted as damaged (and so fetched again).
pub fn read_back(
    part: &File,
    layout: &Layout,
    journaled: Vec<(u64, [u8; 32])>,
) -> (Vec<(u64, [u8; 32])>, ReadBack) {
    let started = Instant::now();
    let mut figures = ReadBack::default();
    let mut kept = Vec::with_capacity(journaled.len());
    let mut buffer = vec![0u8; layout.chunk as usize];
    for (chunk, recorded) in journaled {
        figures.checked += 1;
        let len = layout.chunk_len(chunk) as usize;
        let offset = chunk * layout.chunk;
        // A short file (truncated), a read error or other bytes: not what was recorded.
        let intact = part
            .read_exact_at(&mut buffer[..len], offset)
            .is_ok_and(|()| *blake3::hash(&buffer[..len]).as_bytes() == recorded);
        sys::drop_cached(part.as_raw_fd(), offset, len as u64);
        if intact {
            kept.push((chunk, recorded));
        } else {
            figures.damaged += 1;
        }
    }
    figures.seconds = started.elapsed().as_secs_f64();
    (kept, figures)
}

fn disk_error(target: &Target, what: &str, error: io::Error) -> TransferError {
    if error.raw_os_error() == Some(libc::ENOSPC) {
        TransferError::Local(format!(
            "no space left on {}: {} kept to resume",
            target.shown_dir,
            target.part_name().to_string_lossy()
        ))
    } else {
        TransferError::Local(format!("{what} {}: {error}", target.shown))
    }
}

/// Opens (or resumes) the `.part` file for an offered file.
// Long: a receive's set-up in order: the .part, its journal, what a resume keeps.
pub fn prepare(
    target: Target,
    layout: &Layout,
    identity: &str,
    mode: u32,
) -> Result<Prepared, TransferError> {
    let header = JournalHeader {
        size: layout.size,
        chunk: layout.chunk,
        identity: identity.to_string(),
    };
    let mut prepared = Prepared {
        target,
        part: None,
        journal: None,
        header,
        have: Vec::new(),
        read_back: ReadBack::default(),
        notes: Vec::new(),
    };
    if prepared.target.null {
        return Ok(prepared);
    }
    let target = &prepared.target;
    // One reservation at a time in this process: two offers that each fit alone but not
    // together would both get half their space (the file system hands out blocks as they
    // come) and both fail; in turn, the first gets all it asked and the second is told
    // there is no room.
    static RESERVING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = RESERVING.lock().unwrap_or_else(|p| p.into_inner());
    // Room for the whole file before anything is made: a part file from an earlier run
    // already holds its blocks; the rest must fit in what the file system has free.
    let earlier = sys::allocated_at(&target.dir, &target.part_name());
    let held = *earlier.as_ref().unwrap_or(&0);
    let free = sys::free_bytes_at(&target.dir)
        .map_err(|e| disk_error(target, "cannot read the free space for", e))?;
    let needed = layout.size.saturating_sub(held);
    if needed > free {
        return Err(TransferError::Local(format!(
            "no room for {}: it is {} bytes and {} has {} bytes free",
            target.shown, layout.size, target.shown_dir, free
        )));
    }
    let created = earlier.is_err();
    // The part file first, locked: a second session for the same name (a client that
    // retried while its first session still runs) is refused instead of writing beside it.
    let part = sys::open_at(
        &target.dir,
        &target.part_name(),
        libc::O_RDWR | libc::O_CREAT,
        mode & 0o777 | 0o600,
    )
    .map_err(|e| disk_error(target, "cannot open the part file of", e))?;
    // SAFETY: flock on a live descriptor.
    if unsafe { libc::flock(part.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(TransferError::Local(format!(
            "{} is being received by another copy right now",
            target.shown
        )));
    }
    let existing =
        sys::open_at(&target.dir, &target.journal_name(), libc::O_RDONLY, 0).and_then(|file| {
            let mut bytes = Vec::new();
            Read::take(file, 64 << 20)
                .read_to_end(&mut bytes)
                .map(|_| bytes)
        });
    if let Ok(bytes) = existing {
        match journal::parse(&bytes, &prepared.header) {
            Ok(recovered) => {
                if let Some(line) = recovered.truncated_at {
                    prepared.notes.push(format!(
                        "the journal of {} is cut short at line {line}: the chunks it did not record are fetched again",
                        target.shown
                    ));
                }
                let (kept, figures) = read_back(&part, layout, recovered.chunks);
                if figures.damaged > 0 {
                    prepared.notes.push(format!(
                        "{} of the {} chunks the journal of {} records did not read back as recorded: fetched again",
                        figures.damaged, figures.checked, target.shown
                    ));
                }
                prepared.have = kept;
                prepared.read_back = figures;
            }
            Err(e) => prepared
                .notes
                .push(format!("{} ({e}): starting over", target.shown)),
        }
    }
    let resuming = !prepared.have.is_empty();
    if !resuming {
        part.set_len(0)
            .map_err(|e| disk_error(target, "cannot truncate the part file of", e))?;
    }
    if let Err(e) = sys::preallocate(part.as_raw_fd(), layout.size) {
        // A part file this offer made, with nothing in it, is not kept "to resume".
        if created && !resuming {
            let _ = sys::unlink_at(&target.dir, &target.part_name());
            return Err(TransferError::Local(format!(
                "cannot reserve {} bytes for {} on {}: {e}",
                layout.size, target.shown, target.shown_dir
            )));
        }
        return Err(disk_error(target, "cannot reserve space for", e));
    }
    let mut journal = sys::open_at(
        &target.dir,
        &target.journal_name(),
        libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | if resuming { 0 } else { libc::O_TRUNC },
        0o600,
    )
    .map_err(|e| disk_error(target, "cannot open the journal of", e))?;
    if !resuming {
        journal
            .write_all(prepared.header.encode().as_bytes())
            .and_then(|_| journal.sync_data())
            .map_err(|e| disk_error(target, "cannot write the journal of", e))?;
    }
    prepared.part = Some(part);
    prepared.journal = Some(journal);
    Ok(prepared)
}

/// Chunk ranges (both ends included) from a sorted list of chunks.
pub fn ranges(chunks: impl Iterator<Item = u64>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for chunk in chunks {
        match out.last_mut() {
            Some((_, high)) if *high + 1 == chunk => *high = chunk,
            _ => out.push((chunk, chunk)),
        }
    }
    out
}

/// Chunk buffers kept for reuse, at most: the chunks in flight between the receiving
/// loop and the writer at a steady rate are a few.
const MAX_SPARE_BUFFERS: usize = 8;

enum ToWriter {
    Hash(u64, [u8; 32]),
    Filled(u64, Vec<u8>),
}

/// The writer's end: the root, its disk-busy and CPU seconds.
type WriterDone = ([u8; 32], f64, f64);

enum FromWriter {
    /// A chunk checked (and written when whole), and its buffer back for the next chunk.
    Checked(u64, bool, Vec<u8>),
    Finished {
        root: [u8; 32],
        busy_s: f64,
        cpu_s: f64,
    },
    Failed(String),
}

struct Writer {
    layout: Layout,
    target: Target,
    part: Option<File>,
    journal: Option<File>,
    expected: HashMap<u64, [u8; 32]>,
    waiting: HashMap<u64, Vec<u8>>,
    present: HashMap<u64, [u8; 32]>,
    roots: Vec<Option<[u8; 32]>>,
    rooted: u64,
    unsynced: Vec<(u64, [u8; 32])>,
    unsynced_bytes: u64,
    last_sync: Instant,
    busy: Duration,
}

impl Writer {
    fn run(mut self, input: mpsc::Receiver<ToWriter>, output: mpsc::Sender<FromWriter>) {
        let cpu_start = sys::thread_cpu_ns();
        let result = (|| -> Result<[u8; 32], TransferError> {
            while self.rooted < self.layout.chunks() {
                let Ok(message) = input.recv() else {
                    return Err(TransferError::Interrupted);
                };
                match message {
                    ToWriter::Hash(chunk, hash) => {
                        if let Some(had) = self.present.remove(&chunk) {
                            if had != hash {
                                let _ =
                                    sys::unlink_at(&self.target.dir, &self.target.journal_name());
                                return Err(TransferError::Local(format!(
                                    "{} changed since the .part was begun (chunk {chunk} differs): run the copy again to start over",
                                    self.target.shown
                                )));
                            }
                            self.root(chunk, hash);
                        } else if let Some(bytes) = self.waiting.remove(&chunk) {
                            self.check(chunk, bytes, hash, &output)?;
                        } else {
                            self.expected.insert(chunk, hash);
                        }
                    }
                    ToWriter::Filled(chunk, bytes) => match self.expected.remove(&chunk) {
                        Some(hash) => self.check(chunk, bytes, hash, &output)?,
                        None => {
                            self.waiting.insert(chunk, bytes);
                        }
                    },
                }
                if self.unsynced_bytes >= JOURNAL_BYTES
                    || (!self.unsynced.is_empty() && self.last_sync.elapsed() >= JOURNAL_INTERVAL)
                {
                    self.sync()?;
                }
            }
            self.finish()
        })();
        let cpu_s = (sys::thread_cpu_ns() - cpu_start) as f64 / 1e9;
        let _ = output.send(match result {
            Ok(root) => FromWriter::Finished {
                root,
                busy_s: self.busy.as_secs_f64(),
                cpu_s,
            },
            Err(e) => FromWriter::Failed(e.to_string()),
        });
    }

    fn root(&mut self, chunk: u64, hash: [u8; 32]) {
        if let Some(slot) = self.roots.get_mut(chunk as usize) {
            if slot.is_none() {
                *slot = Some(hash);
                self.rooted += 1;
            }
        }
    }

    fn check(
        &mut self,
        chunk: u64,
        bytes: Vec<u8>,
        hash: [u8; 32],
        output: &mpsc::Sender<FromWriter>,
    ) -> Result<(), TransferError> {
        if *blake3::hash(&bytes).as_bytes() != hash {
            let _ = output.send(FromWriter::Checked(chunk, false, bytes));
            // The hash stays expected: the chunk comes again and is checked against it.
            self.expected.insert(chunk, hash);
            return Ok(());
        }
        if let Some(part) = &self.part {
            let started = Instant::now();
            part.write_all_at(&bytes, chunk * self.layout.chunk)
                .map_err(|e| disk_error(&self.target, "cannot write", e))?;
            sys::start_writeback(
                part.as_raw_fd(),
                chunk * self.layout.chunk,
                bytes.len() as u64,
            );
            self.busy += started.elapsed();
        }
        self.unsynced.push((chunk, hash));
        self.unsynced_bytes += bytes.len() as u64;
        self.root(chunk, hash);
        let _ = output.send(FromWriter::Checked(chunk, true, bytes));
        Ok(())
    }

    /// Makes the chunks written so far durable, then records them.
    fn sync(&mut self) -> Result<(), TransferError> {
        self.last_sync = Instant::now();
        let (Some(part), Some(journal)) = (&self.part, &mut self.journal) else {
            self.unsynced.clear();
            self.unsynced_bytes = 0;
            return Ok(());
        };
        let started = Instant::now();
        part.sync_data()
            .map_err(|e| disk_error(&self.target, "cannot sync", e))?;
        let mut lines = String::new();
        for (chunk, hash) in self.unsynced.drain(..) {
            lines += &journal::entry(chunk, &hash);
            sys::drop_cached(
                part.as_raw_fd(),
                chunk * self.layout.chunk,
                self.layout.chunk,
            );
        }
        journal
            .write_all(lines.as_bytes())
            .and_then(|_| journal.sync_data())
            .map_err(|e| disk_error(&self.target, "cannot write the journal of", e))?;
        self.unsynced_bytes = 0;
        self.busy += started.elapsed();
        Ok(())
    }

    fn finish(&mut self) -> Result<[u8; 32], TransferError> {
        self.sync()?;
        let roots: Vec<[u8; 32]> = self
            .roots
            .iter()
            .map(|r| r.expect("every chunk rooted"))
            .collect();
        if let Some(part) = self.part.take() {
            let started = Instant::now();
            part.sync_all()
                .map_err(|e| disk_error(&self.target, "cannot sync", e))?;
            drop(part);
            let dir = &self.target.dir;
            sys::rename_at(dir, &self.target.part_name(), &self.target.name)
                .map_err(|e| disk_error(&self.target, "cannot rename into place", e))?;
            self.journal = None;
            sys::unlink_at(dir, &self.target.journal_name())
                .map_err(|e| disk_error(&self.target, "cannot remove the journal of", e))?;
            // The rename is durable once the directory is.
            // SAFETY: fsync on a live descriptor.
            unsafe { libc::fsync(dir.as_raw_fd()) };
            self.busy += started.elapsed();
        }
        Ok(root_hash(&self.layout, &roots))
    }
}

/// Receives one offered file into a prepared target; the `accept` has been sent.
#[allow(clippy::too_many_arguments)]
// Long: thread set-up around the receive loop: the writer, the socket, the loop and the
// end, in order (the next to split).
pub fn receive_file(
    channel: &mut Channel,
    session: &Session,
    file_index: u32,
    layout: Layout,
    prepared: Prepared,
    window_chunks: u64,
    train: Option<u32>,
    sealer: Option<&Sealer>,
    cancel: &AtomicBool,
    progress: &dyn Fn(TransferProgress),
) -> Result<FileOutcome, TransferError> {
    let clock = Clock::start();
    let cpu_start = sys::thread_cpu_ns();
    let udp_start = linerate_hostinfo::read_udp_counters().ok();
    let present: HashMap<u64, [u8; 32]> = prepared.have.iter().copied().collect();
    let read_back = prepared.read_back;
    let mut receiver = Receiver::new(layout, window_chunks);
    if session.ecn() {
        receiver.count_ce();
    }
    if let Some(packets) = train {
        receiver.time_train(packets);
    }
    present
        .keys()
        .for_each(|&chunk| receiver.mark_present(chunk));
    let resumed_bytes: u64 = present.keys().map(|&c| layout.chunk_len(c)).sum();
    let (to_writer, writer_input) = mpsc::channel::<ToWriter>();
    let (writer_output, from_writer) = mpsc::channel::<FromWriter>();
    let writer = Writer::new(layout, prepared, present);
    let stop = Arc::new(AtomicBool::new(false));
    // Wakes the control reader at the file's end (without it, it sees `stop` within its
    // read's 100 ms).
    let wakeup = sys::Wakeup::new().ok();
    let sink = channel.sink();
    let mut figures = LoopFigures::default();
    let outcome = std::thread::scope(|scope| {
        let writer_thread = std::thread::Builder::new()
            .name("copy-writer".into())
            .spawn_scoped(scope, move || writer.run(writer_input, writer_output))
            .map_err(|e| TransferError::Local(format!("cannot start the writer: {e}")))?;
        // The control reader: the sender's hashes go straight to the writer.
        let hashes_to_writer = to_writer.clone();
        let (control_events, control_input) = mpsc::channel::<Result<Control, ChannelError>>();
        let stop_reading = stop.clone();
        let chunks = layout.chunks();
        let reader = &mut *channel;
        let wakeup_reader = wakeup.as_ref();
        let control_thread = scope.spawn(move || {
            forward_control(
                reader,
                chunks,
                &hashes_to_writer,
                &control_events,
                &stop_reading,
                wakeup_reader,
            )
        });
        let inputs = ReceiveInputs {
            session,
            file_index,
            to_writer: &to_writer,
            from_writer: &from_writer,
            control: &control_input,
            sink: &sink,
            clock: &clock,
            sealer,
            progress,
        };
        let result = receive_loop(inputs, &mut receiver, cancel, &mut figures);
        drop(to_writer);
        let outcome = match result {
            Ok(Some(done)) => Ok(done),
            // The writer syncs, renames and reports the root.
            Ok(None) => writer_end(&from_writer),
            Err(e) => Err(e),
        };
        stop.store(true, Ordering::Relaxed);
        if let Some(wakeup) = &wakeup {
            wakeup.wake();
        }
        let _ = control_thread.join();
        let _ = writer_thread.join();
        outcome
    });
    let (root, busy_s, writer_cpu_s) = match outcome {
        Ok(done) => done,
        Err(e) => {
            let _ = sink.send(&Control::Failed {
                message: e.to_string(),
            });
            return Err(e);
        }
    };
    let stats = EndStats {
        disk_busy_s: busy_s,
        cpu_s: (sys::thread_cpu_ns() - cpu_start + figures.lane_cpu_ns) as f64 / 1e9 + writer_cpu_s,
        wall_s: clock.now_ns() as f64 / 1e9,
        corrupted_datagrams: figures.corrupted,
        rcvbuf_errors: udp_start
            .zip(linerate_hostinfo::read_udp_counters().ok())
            .map_or(0, |(start, end)| start.delta(&end).rcvbuf_errors),
        resume_checked_chunks: read_back.checked,
        resume_damaged_chunks: read_back.damaged,
        resume_check_s: read_back.seconds,
        ..EndStats::default()
    };
    let root_hex = journal::hash_hex(&root);
    let done = Control::Done {
        root: root_hex.clone(),
        stats,
    };
    let failed = |e| TransferError::Peer(format!("the control connection failed: {e}"));
    sink.send(&done).map_err(failed)?;
    let remote = sender_close(channel, cancel)?;
    let counters = receiver.counters;
    let mut outcome = FileOutcome {
        bytes: layout.size,
        resumed_bytes,
        wall_s: stats.wall_s,
        duplicate_bytes: counters.duplicate_bytes,
        refetched_chunks: counters.refetched,
        root: root_hex,
        local: stats,
        remote,
        ..FileOutcome::default()
    };
    // Resends, losses and the sender's waits are the sender's own counts.
    outcome.take_sender_figures(&remote.sent);
    // The CE marks are the receiver's: its own count, not the last ACK's that arrived.
    if session.ecn() {
        outcome.ecn = Some(crate::control::EcnFigures {
            ce_marked: counters.ce_marked,
            ..outcome.ecn.unwrap_or_default()
        });
    }
    Ok(outcome)
}

impl Writer {
    fn new(layout: Layout, prepared: Prepared, present: HashMap<u64, [u8; 32]>) -> Writer {
        Writer {
            layout,
            roots: vec![None; layout.chunks() as usize],
            rooted: 0,
            present,
            part: prepared.part,
            journal: prepared.journal,
            target: prepared.target,
            expected: HashMap::new(),
            waiting: HashMap::new(),
            unsynced: Vec::new(),
            unsynced_bytes: 0,
            last_sync: Instant::now(),
            busy: Duration::ZERO,
        }
    }
}

/// The control reader's thread: the sender's hashes go straight to the writer, every
/// other message to the loop. It reads until the transfer ends: after the last hash, a
/// closed connection or a `failed` still has to reach the loop.
fn forward_control(
    reader: &mut Channel,
    chunks: u64,
    hashes_to_writer: &mpsc::Sender<ToWriter>,
    control_events: &mpsc::Sender<Result<Control, ChannelError>>,
    stop: &AtomicBool,
    wakeup: Option<&sys::Wakeup>,
) {
    loop {
        match reader.receive_woken(Duration::from_secs(3600), Some(stop), wakeup) {
            Ok(Control::Hash { chunk, hash }) if chunk < chunks => {
                let hash = journal::parse_hash(&hash).expect("validated");
                let _ = hashes_to_writer.send(ToWriter::Hash(chunk, hash));
            }
            Ok(other) => {
                let end = matches!(other, Control::Failed { .. });
                let _ = control_events.send(Ok(other));
                if end {
                    return;
                }
            }
            Err(ChannelError::Cancelled) => return,
            Err(e) => {
                let _ = control_events.send(Err(e));
                return;
            }
        }
    }
}

/// The writer's last word once every chunk is in: it syncs, renames and reports the
/// root.
fn writer_end(from_writer: &mpsc::Receiver<FromWriter>) -> Result<WriterDone, TransferError> {
    loop {
        match from_writer.recv() {
            Ok(FromWriter::Finished {
                root,
                busy_s,
                cpu_s,
            }) => return Ok((root, busy_s, cpu_s)),
            Ok(FromWriter::Failed(message)) => return Err(TransferError::Local(message)),
            Ok(FromWriter::Checked(..)) => continue,
            Err(_) => return Err(TransferError::Local("the writer stopped".into())),
        }
    }
}

/// The sender's close after our verdict: its own figures.
fn sender_close(channel: &mut Channel, cancel: &AtomicBool) -> Result<EndStats, TransferError> {
    match channel.receive(Duration::from_secs(60), Some(cancel)) {
        Ok(Control::Closed { stats }) => Ok(stats),
        Ok(Control::Failed { message }) => Err(TransferError::Remote(message)),
        Ok(other) => Err(TransferError::Peer(format!(
            "expected the sender's close, got {other:?}"
        ))),
        Err(e) => Err(TransferError::Peer(e.to_string())),
    }
}

/// What the receiving loop is given: the session, its channels to the writer and the
/// control connection, and the clock.
struct ReceiveInputs<'a> {
    session: &'a Session,
    file_index: u32,
    to_writer: &'a mpsc::Sender<ToWriter>,
    from_writer: &'a mpsc::Receiver<FromWriter>,
    control: &'a mpsc::Receiver<Result<Control, ChannelError>>,
    sink: &'a ControlWriter,
    clock: &'a Clock,
    sealer: Option<&'a Sealer>,
    progress: &'a dyn Fn(TransferProgress),
}

/// The state of one file's receiving, driven a step at a time: take a batch of
/// datagrams into chunk buffers, hear the writer's checks and the control connection,
/// send the ACKs due, report progress, sleep.
struct ReceiveLoop<'a> {
    io: ReceiveInputs<'a>,
    layout: Layout,
    chunks: ChunkBuffers,
    ack_bytes: Vec<u8>,
    last_progress: u64,
    last_datagram_ns: u64,
    /// The writer's last word, which may come before this loop sees the last check.
    finished: Option<WriterDone>,
    /// Data datagrams damaged on the way (tag, CRC or seal failed).
    corrupted: u64,
    /// Whether a lane's last receive filled its batch (more may wait).
    lane_full: bool,
    /// Every lane's socket, to wait on.
    lane_fds: Vec<std::os::fd::RawFd>,
    /// CPU the lanes' receiving threads used (a copy over lanes).
    lane_cpu_ns: u64,
}

/// The chunks being filled, and buffers the writer is done with for the next ones
/// (zeroing new ones was 4 % of the receiving process's CPU at 5 Gbit/s;
/// `layout::chunk_buffer`).
#[derive(Default)]
struct ChunkBuffers {
    filling: HashMap<u64, Vec<u8>>,
    spare: Vec<Vec<u8>>,
}

impl ChunkBuffers {
    /// Stores a datagram's plaintext where the receiver core says; a filled chunk goes to
    /// the writer.
    #[allow(clippy::too_many_arguments)]
    fn store(
        &mut self,
        receiver: &mut Receiver,
        layout: &Layout,
        to_writer: &mpsc::Sender<ToWriter>,
        now: u64,
        pn: u64,
        offset: u64,
        plain: &[u8],
    ) {
        let len = plain.len();
        let DataOutcome::Store {
            chunk,
            at,
            fresh,
            filled,
        } = receiver.on_data(now, pn, offset, len as u16)
        else {
            return;
        };
        if fresh {
            let buffer = chunk_buffer(self.spare.pop(), layout.chunk_len(chunk) as usize);
            self.filling.insert(chunk, buffer);
        }
        if let Some(buffer) = self.filling.get_mut(&chunk) {
            buffer[at..at + len].copy_from_slice(plain);
        }
        if filled {
            if let Some(buffer) = self.filling.remove(&chunk) {
                let _ = to_writer.send(ToWriter::Filled(chunk, buffer));
            }
        }
    }
}

/// What the receiving loop leaves for the file's figures.
#[derive(Default)]
struct LoopFigures {
    corrupted: u64,
    lane_cpu_ns: u64,
}

fn receive_loop(
    io: ReceiveInputs<'_>,
    receiver: &mut Receiver,
    cancel: &AtomicBool,
    figures: &mut LoopFigures,
) -> Result<Option<WriterDone>, TransferError> {
    sys::tight_timer_slack();
    let layout = *receiver.layout();
    let size = layout.block as usize + SEAL_TAG + wire::DATA_HEADER + 64;
    // Runs of datagrams that arrived together come as one message where the path
    // coalesces (loopback, a NIC's GRO): a walk of the receive path a run, not a datagram.
    // Off again at the end: the session's socket then hears small datagrams (ACKs when
    // it sends, hellos) that must not be merged.
    let mut coalescing = true;
    for lane in io.session.sockets() {
        coalescing &= sys::receive_gro(lane, true).is_ok();
    }
    if !coalescing {
        // All lanes or none: a batch of one datagram a buffer would cut a run short.
        for lane in io.session.sockets() {
            let _ = sys::receive_gro(lane, false);
        }
    }
    // A cold start's packet train is timed by the kernel's receive timestamps: this loop
    // reads a quarter of a millisecond apart, as long as a train takes at 1 Gbit/s.
    let timing = receiver.timing_train()
        && io
            .session
            .sockets()
            .all(|lane| sys::receive_timestamps(lane, true).is_ok());
    let lane_fds = io.session.sockets().map(|lane| lane.as_raw_fd()).collect();
    let tos = io.session.ecn();
    let kind = match coalescing {
        true => BatchKind::Coalescing { tos },
        false => BatchKind::Datagrams { size, tos },
    };
    let session = io.session;
    let mut state = ReceiveLoop {
        io,
        layout,
        chunks: ChunkBuffers::default(),
        ack_bytes: Vec::with_capacity(1200),
        last_progress: 0,
        last_datagram_ns: 0,
        finished: None,
        corrupted: 0,
        lane_full: false,
        lane_fds,
        lane_cpu_ns: 0,
    };
    let check = Check {
        file: state.io.file_index,
        session: session.id,
        key: &session.key,
        sealer: state.io.sealer,
    };
    let result = match receive_threads(session.lane_count()) {
        false => {
            let mut batch = Checked::new(0, kind.make(RECEIVE_BATCH));
            state.run(receiver, cancel, &mut batch, &check)
        }
        true => state.run_over_lanes(receiver, cancel, kind, check),
    };
    if coalescing {
        for lane in session.sockets() {
            let _ = sys::receive_gro(lane, false);
        }
    }
    if timing {
        for lane in session.sockets() {
            let _ = sys::receive_timestamps(lane, false);
        }
    }
    figures.corrupted += state.corrupted;
    figures.lane_cpu_ns += state.lane_cpu_ns;
    result.map(|()| state.finished)
}

impl ReceiveLoop<'_> {
    /// This thread takes the datagrams from every lane's socket itself, a batch from each
    /// a turn, checked as a lane's thread checks them.
    fn run(
        &mut self,
        receiver: &mut Receiver,
        cancel: &AtomicBool,
        batch: &mut Checked,
        check: &Check<'_>,
    ) -> Result<(), TransferError> {
        while !receiver.is_complete() {
            if cancel.load(Ordering::Relaxed) {
                return Err(TransferError::Interrupted);
            }
            let now = self.io.clock.now_ns();
            let mut received = 0;
            self.lane_full = false;
            for lane in 0..self.lane_fds.len() {
                received += batch
                    .receive(self.lane_fds[lane], check)
                    .map_err(|e| TransferError::Local(format!("cannot receive: {e}")))?;
                self.store_checked(receiver, now, batch);
                self.lane_full |= batch.full();
                // The ACKs due after each lane's batch, not after all lanes': sixteen
                // batches are a thousand datagrams, more late arrivals than one ACK has
                // room for.
                self.drive_acks(receiver, now);
            }
            self.drive_rest(receiver, now)?;
            self.sleep(receiver, now, received, self.lane_full);
        }
        Ok(())
    }

    /// Several lanes: a thread a lane receives and checks (`receive_lanes`); this loop
    /// stores what they pass, each lane's batch as it comes.
    fn run_over_lanes(
        &mut self,
        receiver: &mut Receiver,
        cancel: &AtomicBool,
        kind: BatchKind,
        check: Check<'_>,
    ) -> Result<(), TransferError> {
        let session = self.io.session;
        std::thread::scope(|scope| {
            let mut lanes = LaneReceivers::start(scope, session, check, kind)?;
            let result = self.drive_lanes(receiver, cancel, &lanes);
            self.lane_cpu_ns = lanes.stop();
            result
        })
    }

    fn drive_lanes(
        &mut self,
        receiver: &mut Receiver,
        cancel: &AtomicBool,
        lanes: &LaneReceivers<'_>,
    ) -> Result<(), TransferError> {
        let mut received = false;
        while !receiver.is_complete() {
            if cancel.load(Ordering::Relaxed) {
                return Err(TransferError::Interrupted);
            }
            let wait = receiver
                .next_timeout()
                .saturating_sub(self.io.clock.now_ns())
                .clamp(1, 2_000_000);
            // While a stream arrives, the lanes' batches gather for a quantum and are
            // taken together (a wake-up a batch was ten times the context switches of
            // one lane); when none came, the wait is for the next.
            let mut timeout = match received {
                true => {
                    sys::sleep_ns(wait.min(RECEIVE_QUANTUM_NS));
                    None
                }
                false => Some(wait),
            };
            received = false;
            let now = self.io.clock.now_ns();
            // What the lanes have handed over (at most three batches a lane), the ACKs
            // due after each lane's batch.
            while let Some(checked) = lanes.next(timeout)? {
                timeout = None;
                received = true;
                self.store_checked(receiver, now, &checked);
                lanes.give_back(checked);
                self.drive_acks(receiver, now);
            }
            let now = self.io.clock.now_ns();
            self.drive_acks(receiver, now);
            self.drive_rest(receiver, now)?;
        }
        Ok(())
    }

    /// The writer, the control connection, the silence limit and progress.
    fn drive_rest(&mut self, receiver: &mut Receiver, now: u64) -> Result<(), TransferError> {
        self.drive_writer(receiver)?;
        self.drive_control()?;
        if now > self.last_datagram_ns + 60_000_000_000 {
            return Err(TransferError::Peer("no data for 60 s".into()));
        }
        self.drive_progress(receiver, now);
        Ok(())
    }

    /// Stores the datagrams of a lane's checked batch.
    fn store_checked(&mut self, receiver: &mut Receiver, now: u64, checked: &Checked) {
        self.corrupted += checked.corrupted;
        for (i, datagram) in checked.accepted.iter().enumerate() {
            // A coalesced batch holds hundreds of datagrams: the ACKs due go out every
            // 64 of them.
            if i > 0 && i % RECEIVE_BATCH == 0 {
                self.drive_acks(receiver, now);
            }
            // Congestion experienced: an AQM on the path marked it instead of dropping.
            if datagram.ce {
                receiver.on_ce();
            }
            if let Some(at) = datagram.arrived_ns {
                let wire_bytes = datagram.plain_len() as u64 + WIRE_OVERHEAD;
                receiver.on_timed_arrival(datagram.pn, wire_bytes, at);
            }
            self.last_datagram_ns = now;
            self.chunks.store(
                receiver,
                &self.layout,
                self.io.to_writer,
                now,
                datagram.pn,
                datagram.offset,
                checked.plain(datagram),
            );
        }
    }

    /// Hears the writer: each chunk's check (a failed one is fetched again) and its end.
    fn drive_writer(&mut self, receiver: &mut Receiver) -> Result<(), TransferError> {
        while let Ok(event) = self.io.from_writer.try_recv() {
            match event {
                FromWriter::Checked(chunk, ok, buffer) => {
                    if self.chunks.spare.len() < MAX_SPARE_BUFFERS {
                        self.chunks.spare.push(buffer);
                    }
                    receiver.chunk_checked(chunk, ok);
                    if !ok {
                        self.io
                            .sink
                            .send(&Control::Refetch { chunk })
                            .map_err(|e| {
                                TransferError::Peer(format!("the control connection failed: {e}"))
                            })?;
                    }
                }
                FromWriter::Failed(message) => return Err(TransferError::Local(message)),
                FromWriter::Finished {
                    root,
                    busy_s,
                    cpu_s,
                } => self.finished = Some((root, busy_s, cpu_s)),
            }
        }
        Ok(())
    }

    /// The control connection says nothing during a transfer but that the sender failed.
    fn drive_control(&mut self) -> Result<(), TransferError> {
        match self.io.control.try_recv() {
            Err(_) => Ok(()),
            Ok(Ok(Control::Failed { message })) => Err(TransferError::Remote(message)),
            Ok(Ok(other)) => Err(TransferError::Peer(format!(
                "unexpected message during the transfer: {other:?}"
            ))),
            Ok(Err(e)) => Err(TransferError::Peer(e.to_string())),
        }
    }

    /// Sends the ACKs due; a lost ACK is covered by the next, so a failed send is not an
    /// error.
    fn drive_acks(&mut self, receiver: &mut Receiver, now: u64) {
        let session = self.io.session;
        while let Some(ack) = receiver.poll_ack(now, self.io.file_index, session.id) {
            wire::encode_ack(&ack, &session.key, &mut self.ack_bytes);
            let _ = session.udp.send(&self.ack_bytes);
        }
    }

    /// The caller's progress, every 100 ms.
    fn drive_progress(&mut self, receiver: &Receiver, now: u64) {
        if now < self.last_progress + 100_000_000 {
            return;
        }
        self.last_progress = now;
        (self.io.progress)(TransferProgress {
            done: (receiver.chunks_done() * self.layout.chunk).min(self.layout.size),
            total: self.layout.size,
            sent: receiver.counters.bytes,
            resent: receiver.counters.duplicate_bytes,
        });
    }

    /// Sleeps until the next datagram or timer; while a stream is arriving, lets a batch
    /// gather in the socket instead of waking for every datagram (a wake-up costs more
    /// than the datagram).
    fn sleep(&self, receiver: &Receiver, now: u64, received: usize, full: bool) {
        let wait = receiver
            .next_timeout()
            .saturating_sub(now)
            .clamp(1, 2_000_000);
        if received == 0 {
            let _ = sys::wait_any(&self.lane_fds, libc::POLLIN, Some(wait));
        } else if !full {
            sys::sleep_ns(wait.min(RECEIVE_QUANTUM_NS));
        }
    }
}

/// The chunk numbers of a have-list, for the sender's core.
pub fn have_chunks(have: &[(u64, u64)], chunks: u64) -> impl Iterator<Item = u64> + '_ {
    have.iter()
        .flat_map(move |&(low, high)| low..=high.min(chunks.saturating_sub(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `.part` of three whole chunks and a short last one, in a scratch file.
    fn part_file(layout: &Layout, tag: &str) -> (std::path::PathBuf, Vec<u8>) {
        let path =
            std::env::temp_dir().join(format!("linerate-read-back-{}-{tag}", std::process::id()));
        let bytes: Vec<u8> = (0..layout.size).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        (path, bytes)
    }

    fn recorded(layout: &Layout, bytes: &[u8]) -> Vec<(u64, [u8; 32])> {
        (0..layout.chunks())
            .map(|c| {
                let start = (c * layout.chunk) as usize;
                let end = start + layout.chunk_len(c) as usize;
                (c, *blake3::hash(&bytes[start..end]).as_bytes())
            })
            .collect()
    }

    #[test]
    fn intact_chunks_are_kept_and_changed_short_or_zeroed_ones_are_not() {
        let layout = Layout::new(3 * 65536 + 1000, 65536, 1024).unwrap();
        let (path, bytes) = part_file(&layout, "damage");
        let journaled = recorded(&layout, &bytes);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        // All intact: every chunk kept, with the hash the journal recorded.
        let (kept, figures) = read_back(&file, &layout, journaled.clone());
        assert_eq!(kept, journaled);
        assert_eq!((figures.checked, figures.damaged), (4, 0));
        // One byte of chunk 1 changed.
        file.write_all_at(&[bytes[70000] ^ 1], 70000).unwrap();
        // Chunk 2 zeroed, as a journal ahead of its data leaves it.
        file.write_all_at(&[0u8; 65536], 2 * 65536).unwrap();
        // The last chunk cut short.
        file.set_len(layout.size - 10).unwrap();
        let (kept, figures) = read_back(&file, &layout, journaled.clone());
        assert_eq!(kept, vec![journaled[0]]);
        assert_eq!((figures.checked, figures.damaged), (4, 3));
        // A journal entry whose hash is not the chunk's (the source's bytes differ).
        let (kept, figures) = read_back(&file, &layout, vec![(0, [9; 32])]);
        assert!(kept.is_empty());
        assert_eq!(figures.damaged, 1);
        let _ = std::fs::remove_file(&path);
    }
}
