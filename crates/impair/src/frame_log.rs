//! The emulator's frame log (`linerate impair --frame-log FILE`, `lab up --frame-log`,
//! docs/impair.md): a line for every frame a direction took, with when it arrived, when it
//! was due to leave and when it left, or why it was dropped; its size, its flow and the
//! first bytes of its payload. What the status file gives in aggregate (delay, lateness,
//! drops), per frame: a test or a user can hold each datagram a receiver counted to the
//! time the path held it, and a jitter buffer's late loss to each frame's holding time.
//!
//! The link keeps records ([`Recorder`], sans-IO, bounded); its forwarding thread hands
//! them over every publish in a batch ([`Batch`]) and never waits for the writer: a batch
//! the writer's queue has no room for is counted as unrecorded. The writer formats and
//! writes on a thread of its own.

use crate::frame::{Frame, FrameSummary};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};

/// Frames a direction's log keeps; beyond, frames are counted, not recorded (a 1 Gbit/s
/// path of full frames passes 83,000 a second: twelve seconds of it).
pub const FRAME_LOG_LIMIT: u64 = 1_000_000;

/// Batches waiting for the writer; a forwarding thread hands one over every 20 ms.
const QUEUED_BATCHES: usize = 256;

/// What became of one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Left at `left_ns`; it was due at `due_ns` (its arrival, its wait for the bottleneck,
    /// the path's delay and jitter), so `left_ns - due_ns` is how late the emulator was.
    Passed { due_ns: u64, left_ns: u64 },
    /// Dropped by the loss model.
    Lost,
    /// Dropped by a full queue before the bottleneck.
    QueueFull,
    /// Dropped because the delay line held its memory limit.
    MemoryFull,
}

impl Fate {
    fn name(self) -> &'static str {
        match self {
            Fate::Passed { .. } => "passed",
            Fate::Lost => "lost",
            Fate::QueueFull => "queue-full",
            Fate::MemoryFull => "memory-full",
        }
    }
}

/// One frame's line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRecord {
    /// When the kernel received it, on the link's clock (ns from the emulator's start).
    pub arrived_ns: u64,
    pub wire_bytes: u32,
    pub fate: Fate,
    pub summary: FrameSummary,
}

/// A link's records until its driver takes them, at most a limit in all.
#[derive(Debug)]
pub struct Recorder {
    records: Vec<FrameRecord>,
    room: u64,
    unrecorded: u64,
}

impl Recorder {
    pub fn new(limit: u64) -> Recorder {
        Recorder {
            records: Vec::new(),
            room: limit,
            unrecorded: 0,
        }
    }

    pub fn record<F: Frame>(&mut self, arrived_ns: u64, frame: &F, fate: Fate) {
        if self.room == 0 {
            self.unrecorded += 1;
            return;
        }
        self.room -= 1;
        self.records.push(FrameRecord {
            arrived_ns,
            wire_bytes: u32::try_from(frame.wire_len()).unwrap_or(u32::MAX),
            fate,
            summary: frame.summary(),
        });
    }

    /// The records kept since the last call, and the frames not recorded since then.
    pub fn take(&mut self) -> (Vec<FrameRecord>, u64) {
        (
            std::mem::take(&mut self.records),
            std::mem::take(&mut self.unrecorded),
        )
    }
}

/// What a forwarding thread hands the writer.
#[derive(Debug)]
pub struct Batch {
    /// 0: the first interface to the second; 1: back.
    pub direction: usize,
    pub records: Vec<FrameRecord>,
    /// Frames of this direction left out since its last batch (past the limit, or a batch
    /// the writer had no room for).
    pub unrecorded: u64,
}

/// A forwarding thread's end of the log.
#[derive(Debug, Clone)]
pub struct LogSender {
    sender: SyncSender<Batch>,
    /// What this thread's link may record.
    pub limit: u64,
    /// Frames of batches the writer had no room for, to be said with the next.
    carried: u64,
}

impl LogSender {
    /// Hands `batch` over without waiting.
    pub fn send(&mut self, mut batch: Batch) {
        if batch.records.is_empty() && batch.unrecorded == 0 && self.carried == 0 {
            return;
        }
        batch.unrecorded += std::mem::take(&mut self.carried);
        match self.sender.try_send(batch) {
            Ok(()) => {}
            Err(TrySendError::Full(batch)) | Err(TrySendError::Disconnected(batch)) => {
                self.carried = batch.unrecorded + batch.records.len() as u64;
            }
        }
    }

    /// A sender for one of `threads` forwarding threads of a direction: its share of the
    /// direction's limit.
    pub fn for_thread(&self, threads: usize) -> LogSender {
        LogSender {
            limit: self.limit / threads.max(1) as u64,
            ..self.clone()
        }
    }
}

/// The writer: a file and the thread that fills it.
pub struct FrameLog {
    sender: LogSender,
    writer: std::thread::JoinHandle<io::Result<()>>,
}

impl FrameLog {
    /// Creates `path` and starts writing to it; `interfaces` name the directions,
    /// `started_unix_ns` is the wall clock at the emulator's time 0.
    pub fn create(
        path: &Path,
        interfaces: &[String; 2],
        started_unix_ns: u64,
    ) -> io::Result<FrameLog> {
        let mut file = BufWriter::new(File::create(path)?);
        write_header(&mut file, interfaces, started_unix_ns)?;
        let (sender, receiver) = std::sync::mpsc::sync_channel(QUEUED_BATCHES);
        let writer = std::thread::Builder::new()
            .name("frame-log".into())
            .spawn(move || write_batches(file, receiver))?;
        Ok(FrameLog {
            sender: LogSender {
                sender,
                limit: FRAME_LOG_LIMIT,
                carried: 0,
            },
            writer,
        })
    }

    /// A direction's end: cloned for each of its forwarding threads.
    pub fn sender(&self) -> LogSender {
        self.sender.clone()
    }

    /// Waits for every sender to be gone (the bridge stopped) and the last line written.
    pub fn finish(self) -> io::Result<()> {
        drop(self.sender);
        self.writer
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the frame log's writer panicked")))
    }
}

fn write_header(
    out: &mut impl Write,
    [a, b]: &[String; 2],
    started_unix_ns: u64,
) -> io::Result<()> {
    writeln!(
        out,
        "# linerate impair frame log: forward is {a} -> {b}, reverse {b} -> {a}; times in ns \
         from the emulator's start (unix time {started_unix_ns} ns); at most {FRAME_LOG_LIMIT} \
         frames a direction"
    )?;
    writeln!(
        out,
        "# direction\tarrived_ns\tdue_ns\tleft_ns\tfate\twire_bytes\tprotocol\tsource\tdestination\tpayload_head"
    )
}

fn write_batches(mut out: BufWriter<File>, batches: Receiver<Batch>) -> io::Result<()> {
    let mut unrecorded = [0u64; 2];
    for batch in batches {
        let direction = batch.direction.min(1);
        unrecorded[direction] += batch.unrecorded;
        for record in &batch.records {
            writeln!(out, "{}", line(DIRECTIONS[direction], record))?;
        }
        // Whole batches on disk as they come: a lab's log is readable while it runs.
        out.flush()?;
    }
    for (name, missed) in DIRECTIONS.iter().zip(unrecorded) {
        if missed > 0 {
            writeln!(out, "# {name}: {missed} frames not recorded")?;
        }
    }
    out.flush()
}

const DIRECTIONS: [&str; 2] = ["forward", "reverse"];

/// A record as its line: tab-separated, `-` where a field has no value.
pub fn line(direction: &str, record: &FrameRecord) -> String {
    use std::fmt::Write as _;
    let mut text = String::with_capacity(128);
    let _ = write!(text, "{direction}\t{}\t", record.arrived_ns);
    match record.fate {
        Fate::Passed { due_ns, left_ns } => {
            let _ = write!(text, "{due_ns}\t{left_ns}\t");
        }
        _ => text.push_str("-\t-\t"),
    }
    let _ = write!(text, "{}\t{}\t", record.fate.name(), record.wire_bytes);
    let summary = &record.summary;
    match summary.ip {
        None => text.push_str("-\t-\t-\t"),
        Some((protocol, source, destination)) => {
            let end = |address: std::net::IpAddr, port: Option<u16>| match port {
                Some(port) => std::net::SocketAddr::new(address, port).to_string(),
                None => address.to_string(),
            };
            let (from, to) = match summary.ports {
                Some((from, to)) => (Some(from), Some(to)),
                None => (None, None),
            };
            let _ = write!(
                text,
                "{}\t{}\t{}\t",
                protocol_name(protocol),
                end(source, from),
                end(destination, to)
            );
        }
    }
    let head = &summary.head[..usize::from(summary.head_len).min(summary.head.len())];
    if head.is_empty() {
        text.push('-');
    }
    for byte in head {
        let _ = write!(text, "{byte:02x}");
    }
    text
}

fn protocol_name(protocol: u8) -> String {
    match protocol {
        1 => "icmp".into(),
        2 => "igmp".into(),
        6 => "tcp".into(),
        17 => "udp".into(),
        58 => "icmpv6".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::summarize;

    fn udp_frame() -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8 + 10];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[23] = 17;
        f[26..30].copy_from_slice(&[10, 77, 0, 1]);
        f[30..34].copy_from_slice(&[10, 77, 0, 2]);
        f[34..36].copy_from_slice(&40_000u16.to_be_bytes());
        f[36..38].copy_from_slice(&5_201u16.to_be_bytes());
        f[42..50].copy_from_slice(&7u64.to_be_bytes());
        f
    }

    /// A passed frame's line has its three times, a dropped one dashes where it has none;
    /// the flow is written as the wire has it and the payload's head in hex (a frame that
    /// is not IP: what follows its Ethernet header).
    #[test]
    fn a_frames_line_says_when_it_came_was_due_and_left_or_why_it_was_dropped() {
        let frame = udp_frame();
        let passed = FrameRecord {
            arrived_ns: 1_000,
            wire_bytes: 52,
            fate: Fate::Passed {
                due_ns: 20_001_000,
                left_ns: 20_004_000,
            },
            summary: summarize(&frame),
        };
        assert_eq!(
            line("forward", &passed),
            "forward\t1000\t20001000\t20004000\tpassed\t52\tudp\t10.77.0.1:40000\t10.77.0.2:5201\t0000000000000007"
        );
        let lost = FrameRecord {
            fate: Fate::Lost,
            ..passed
        };
        assert_eq!(
            line("reverse", &lost),
            "reverse\t1000\t-\t-\tlost\t52\tudp\t10.77.0.1:40000\t10.77.0.2:5201\t0000000000000007"
        );
        let arp = FrameRecord {
            summary: summarize(&[0u8; 20]),
            fate: Fate::QueueFull,
            ..passed
        };
        assert_eq!(
            line("forward", &arp),
            "forward\t1000\t-\t-\tqueue-full\t52\t-\t-\t-\t000000000000"
        );
        // A frame with nothing past its headers has no head.
        let bare = FrameRecord {
            summary: summarize(&[0u8; 14]),
            ..arp
        };
        assert!(line("forward", &bare).ends_with("\t-\t-\t-\t-"));
    }

    /// A recorder keeps at most its limit and counts the rest; taking empties it.
    #[test]
    fn a_recorder_keeps_its_limit_and_counts_the_rest() {
        let frame = udp_frame();
        let mut recorder = Recorder::new(2);
        for at in 0..5 {
            recorder.record(at, &frame, Fate::Lost);
        }
        let (records, unrecorded) = recorder.take();
        assert_eq!(records.len(), 2);
        assert_eq!(unrecorded, 3);
        assert_eq!(records[1].arrived_ns, 1);
        assert_eq!(recorder.take(), (Vec::new(), 0));
    }

    /// The writer writes every batch's lines after its header and ends with what was not
    /// recorded; a sender whose writer has no room never waits.
    #[test]
    fn the_writer_writes_each_batch_and_what_was_left_out() {
        let dir = std::env::temp_dir().join(format!("lr-frame-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("frames.tsv");
        let log = FrameLog::create(&path, &["a".into(), "b".into()], 42).unwrap();
        let mut sender = log.sender().for_thread(2);
        assert_eq!(sender.limit, FRAME_LOG_LIMIT / 2);
        let mut recorder = Recorder::new(1);
        recorder.record(5, &udp_frame(), Fate::MemoryFull);
        recorder.record(6, &udp_frame(), Fate::MemoryFull);
        let (records, unrecorded) = recorder.take();
        sender.send(Batch {
            direction: 1,
            records,
            unrecorded,
        });
        drop(sender);
        log.finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("forward is a -> b") && lines[0].contains("unix time 42"));
        assert!(lines[1].starts_with("# direction\tarrived_ns"));
        assert!(lines[2].starts_with("reverse\t5\t-\t-\tmemory-full\t"));
        assert_eq!(lines[3], "# reverse: 1 frames not recorded");
        assert_eq!(lines.len(), 4);
    }
}
