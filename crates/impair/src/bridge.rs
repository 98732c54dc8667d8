//! The emulator's driver: a transparent bridge between two interfaces over AF_PACKET
//! sockets, one forwarding thread per direction, or several (docs/impair.md 2).
//!
//! Each forwarding thread owns its receiving socket on one interface, its sending socket
//! on the other and its [`Link`]; the threads share nothing but a stop flag and a status
//! slot each, which they publish to every few milliseconds. With several threads a
//! direction, each interface's receiving sockets form a fan-out group that hands every
//! frame of a flow (by its addresses and ports) to the same thread, so a flow keeps its
//! order and draws its impairments from one link, and flows spread over cores. A turn: send what is due (sendmmsg), wait (ppoll
//! with nanosecond timeout and a 1 ns timer slack) until the next frame is due or a frame
//! arrives, take a batch from the receive ring (`ring`, no system call), each frame's time
//! in the path counted from the kernel's stamp, and hand it to the link.

// A driver: the clock and sleeping are its job (the core modules stay sans-IO).
#![allow(clippy::disallowed_methods)]

use crate::frame::Offloaded;
use crate::frame_log::{Batch, LogSender};
use crate::link::{Frame, Link, LinkCounters};
use crate::ring::RxRing;
use crate::spec::LinkSpec;
use crate::sys::{self, PacketSocket};
use crate::wait::{self, Waiter};
use linerate_model::clock::UnixTime;
use std::io;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use thiserror::Error;

/// Why a bridge could not start. All of them are the user's to fix.
#[derive(Debug, Error)]
pub enum BridgeError {
    #[error("unknown interface '{0}' (see `ip link`)")]
    UnknownInterface(String),
    #[error("--between needs two different interfaces, not '{0}' twice")]
    SameInterface(String),
    #[error("interface '{0}' is a port of bridge '{1}'; free it first: ip link set {0} nomaster")]
    Enslaved(String, String),
    #[error("interface '{0}' is already bridged by another linerate impair")]
    InUse(String),
    #[error("interface '{0}' is down; bring it up first: ip link set {0} up")]
    Down(String),
    #[error(
        "AF_PACKET sockets need CAP_NET_RAW (and promiscuous mode CAP_NET_ADMIN): run as root"
    )]
    Privilege,
    #[error("interface '{name}': {error}")]
    Io { name: String, error: io::Error },
    #[error("--frame-log '{path}': {error}")]
    FrameLog { path: String, error: io::Error },
}

/// Frames taken from the ring, and sent per sendmmsg call, in one turn.
const BATCH: usize = 64;
/// Reads of the two clocks closer than this are taken as one moment.
const CLOSE_READS_NS: u64 = 2_000;
/// The most tries at reading the two clocks as one moment.
const CLOCK_TRIES: usize = 4;

/// The monotonic and the wall clock as of one moment: the wall clock read between two
/// monotonic reads, the midpoint of the closest pair of a few tries. A frame's wait in the
/// ring is the wall clock less its kernel stamp, and its arrival the monotonic clock less
/// that wait: a thread preempted between two plain reads took the preemption for the
/// frames' wait and sent them that much early (a busy CI host: a one-way delay of 4.505
/// ms over a 5 ms path, while the status said every frame was held 5 ms).
fn one_moment(mut monotonic: impl FnMut() -> u64, mut wall: impl FnMut() -> u64) -> (u64, u64) {
    let mut best: Option<(u64, u64, u64)> = None;
    for _ in 0..CLOCK_TRIES {
        let before = monotonic();
        let wall_now = wall();
        let after = monotonic().max(before);
        let gap = after - before;
        if best.is_none_or(|(least, _, _)| gap < least) {
            best = Some((gap, before + gap / 2, wall_now));
        }
        if gap <= CLOSE_READS_NS {
            break;
        }
    }
    let (_, mono, wall_now) = best.expect("at least one try");
    (mono, wall_now)
}
/// How often a direction publishes its counters, and the longest a wait lasts (so that a
/// stop is seen).
const PUBLISH_NS: u64 = 20_000_000;

/// One direction's state as its threads last published it (summed over them).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct DirectionStatus {
    pub counters: LinkCounters,
    /// Frames and bytes in the link when published.
    pub queued_frames: u64,
    pub queued_bytes: u64,
    /// Frames larger than the receive buffer (offloads merging frames, or a larger MTU on
    /// the way in) and frames the outgoing interface refused; both dropped.
    pub oversize: u64,
    pub refused: u64,
    /// How long frames waited in the receiving socket before this emulator read them,
    /// summed and at most, nanoseconds. Their time in the path counts from the kernel's
    /// receive stamp, so this wait is not added to the path's delay; it says how busy the
    /// emulator's thread was.
    #[serde(default)]
    pub pickup_sum_ns: u64,
    #[serde(default)]
    pub pickup_max_ns: u64,
    /// Frames the kernel dropped because this direction's receive ring was full: the
    /// emulator's own loss, when its thread falls behind.
    #[serde(default)]
    pub ring_drops: u64,
    /// How far ahead of a due frame this direction's timer wakes it (the rest is spun):
    /// the timer overshoot it has measured on this machine, plus a margin.
    #[serde(default)]
    pub wake_early_ns: u64,
    /// With several forwarding threads a direction: the frames each has passed, in order
    /// (how the flows spread over them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thread_passed: Vec<u64>,
}

impl DirectionStatus {
    /// One direction's status from each of its forwarding threads' own.
    fn merged(threads: &[DirectionStatus]) -> DirectionStatus {
        let mut merged = DirectionStatus::default();
        for one in threads {
            merged.counters.add(&one.counters);
            merged.queued_frames += one.queued_frames;
            merged.queued_bytes += one.queued_bytes;
            merged.oversize += one.oversize;
            merged.refused += one.refused;
            merged.pickup_sum_ns += one.pickup_sum_ns;
            merged.pickup_max_ns = merged.pickup_max_ns.max(one.pickup_max_ns);
            merged.ring_drops += one.ring_drops;
            merged.wake_early_ns = merged.wake_early_ns.max(one.wake_early_ns);
        }
        if threads.len() > 1 {
            merged.thread_passed = threads.iter().map(|t| t.counters.passed).collect();
        }
        merged
    }
}

/// The two interfaces, checked and opened: a receiving ring and a sending socket on each
/// per forwarding thread.
pub struct Ports {
    names: [String; 2],
    receivers: [Vec<RxRing>; 2],
    senders: [Vec<PacketSocket>; 2],
    /// Frame buffer size: the larger MTU plus Ethernet and VLAN headers, or with offloads
    /// the largest segment.
    frame_capacity: usize,
    /// The hosts' segments pass whole, each with its `virtio_net_hdr`.
    offloads: bool,
    /// Held while the bridge runs: an abstract socket per interface, so a second
    /// emulator on the same interface (in the same namespace) is refused.
    _locks: [UnixDatagram; 2],
}

fn lock(name: &str) -> Result<UnixDatagram, BridgeError> {
    use std::os::linux::net::SocketAddrExt;
    let address = std::os::unix::net::SocketAddr::from_abstract_name(
        format!("linerate-impair-{name}").as_bytes(),
    )
    .map_err(|error| BridgeError::Io {
        name: name.into(),
        error,
    })?;
    UnixDatagram::bind_addr(&address).map_err(|error| match error.kind() {
        io::ErrorKind::AddrInUse => BridgeError::InUse(name.into()),
        _ => BridgeError::Io {
            name: name.into(),
            error,
        },
    })
}

fn io_error(name: &str, error: io::Error) -> BridgeError {
    match error.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => BridgeError::Privilege,
        _ => BridgeError::Io {
            name: name.into(),
            error,
        },
    }
}

impl Ports {
    /// Checks both interfaces and opens their sockets, for `threads` forwarding threads a
    /// direction; with `offloads`, for segments of up to 64 KB that pass whole (the kernel
    /// cuts them into frames as they leave, or hands them to a veth peer as they are).
    pub fn open(a: &str, b: &str, offloads: bool, threads: usize) -> Result<Ports, BridgeError> {
        let threads = threads.max(1);
        if a == b {
            return Err(BridgeError::SameInterface(a.into()));
        }
        let mut indexes = [0; 2];
        let mut mtu = 0;
        for (slot, name) in indexes.iter_mut().zip([a, b]) {
            *slot = sys::interface_index(name)
                .ok_or_else(|| BridgeError::UnknownInterface(name.into()))?;
            if let Ok(master) = std::fs::read_link(format!("/sys/class/net/{name}/master")) {
                let master = master
                    .file_name()
                    .map(|m| m.to_string_lossy().into_owned())
                    .unwrap_or_default();
                return Err(BridgeError::Enslaved(name.into(), master));
            }
            if !sys::interface_up(name).map_err(|e| io_error(name, e))? {
                return Err(BridgeError::Down(name.into()));
            }
            mtu = mtu.max(sys::interface_mtu(name).map_err(|e| io_error(name, e))?);
        }
        let locks = [lock(a)?, lock(b)?];
        // An IP packet of at most 65,535 bytes in an Ethernet frame with a VLAN tag.
        let frame_capacity = if offloads {
            65_535 + 14 + 4
        } else {
            mtu + 14 + 4
        };
        let receivers = |index: u32, name: &str| {
            let receiver = || {
                PacketSocket::receiver(index)
                    .and_then(|socket| RxRing::new(socket, frame_capacity, offloads))
            };
            let rings = (0..threads)
                .map(|_| receiver())
                .collect::<io::Result<Vec<RxRing>>>()
                .map_err(|e| io_error(name, e))?;
            if threads > 1 {
                fan_out(&rings, index).map_err(|e| io_error(name, e))?;
            }
            Ok::<_, BridgeError>(rings)
        };
        let senders = |index: u32, name: &str| {
            (0..threads)
                .map(|_| PacketSocket::sender(index, offloads))
                .collect::<io::Result<Vec<PacketSocket>>>()
                .map_err(|e| io_error(name, e))
        };
        let receivers = [receivers(indexes[0], a)?, receivers(indexes[1], b)?];
        let senders = [senders(indexes[0], a)?, senders(indexes[1], b)?];
        Ok(Ports {
            names: [a.into(), b.into()],
            receivers,
            senders,
            frame_capacity,
            offloads,
            _locks: locks,
        })
    }

    pub fn names(&self) -> &[String; 2] {
        &self.names
    }
}

/// Puts `rings` (one interface's, `index`) into one fan-out group by flow hash. Group ids
/// are shared by the whole network namespace: an id another interface's group holds is
/// refused, and the next one is tried.
fn fan_out(rings: &[RxRing], index: u32) -> io::Result<()> {
    let start = (std::process::id() ^ index.wrapping_mul(0x9e37)) as u16;
    let mut last = io::Error::other("no fan-out group id was free");
    for step in 0..256u16 {
        let group = start.wrapping_add(step.wrapping_mul(7919));
        match rings[0].join_fanout(group) {
            Ok(()) => {
                for ring in &rings[1..] {
                    ring.join_fanout(group)?;
                }
                return Ok(());
            }
            Err(error) if error.raw_os_error() == Some(libc::EINVAL) => last = error,
            Err(error) => return Err(error),
        }
    }
    Err(last)
}

/// A running bridge: its forwarding threads and their status slots, by direction.
pub struct Bridge {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<io::Result<()>>>,
    status: [Vec<Arc<Mutex<DirectionStatus>>>; 2],
    started: Instant,
    /// Held while the bridge runs (see [`Ports`]).
    _locks: [UnixDatagram; 2],
}

impl Bridge {
    /// Starts forwarding: `forward` applies to frames from the first interface to the
    /// second, `reverse` to the others; with several forwarding threads a direction, each
    /// thread's link has its share of the direction's memory limit and a seed of its own
    /// (the first thread's is the direction's, so one thread repeats a one-thread run).
    /// `stop` ends every thread within [`PUBLISH_NS`]. With `log`, each thread records what
    /// becomes of every frame (its share of the log's limit) and hands the records over as
    /// it publishes.
    pub fn start(
        ports: Ports,
        forward: LinkSpec,
        reverse: LinkSpec,
        seed: u64,
        stop: Arc<AtomicBool>,
        log: Option<LogSender>,
    ) -> Bridge {
        let started = Instant::now();
        let Ports {
            receivers: [rx_a, rx_b],
            senders: [tx_a, tx_b],
            frame_capacity,
            offloads,
            _locks,
            ..
        } = ports;
        let mut threads = Vec::new();
        let mut status: [Vec<Arc<Mutex<DirectionStatus>>>; 2] = [Vec::new(), Vec::new()];
        let directions = [
            (rx_a, tx_b, forward, seed),
            (rx_b, tx_a, reverse, seed ^ 0x9e37_79b9_7f4a_7c15),
        ];
        for (direction, (receivers, senders, spec, direction_seed)) in
            directions.into_iter().enumerate()
        {
            let count = receivers.len() as u64;
            let spec = LinkSpec {
                limit_bytes: spec.limit_bytes / count.max(1),
                ..spec
            };
            for (thread, (rx, tx)) in receivers.into_iter().zip(senders).enumerate() {
                let slot = Arc::new(Mutex::new(DirectionStatus::default()));
                status[direction].push(slot.clone());
                let link_seed =
                    direction_seed ^ (thread as u64).wrapping_mul(0xd1b5_4a32_d192_ed03);
                let stop = stop.clone();
                let log = log
                    .as_ref()
                    .map(|log| (direction, log.for_thread(count as usize)));
                threads.push(std::thread::spawn(move || {
                    let parts = DirectionParts {
                        rx,
                        tx,
                        spec,
                        seed: link_seed,
                        frame_capacity,
                        status: slot,
                        origin_ns: wait::monotonic_ns() - started.elapsed().as_nanos() as u64,
                        log,
                    };
                    if offloads {
                        Direction::<Offloaded>::new(parts)?.run(&stop)
                    } else {
                        Direction::<Vec<u8>>::new(parts)?.run(&stop)
                    }
                }));
            }
        }
        Bridge {
            stop,
            threads,
            status,
            started,
            _locks,
        }
    }

    /// Both directions' latest status: first to second interface, then back.
    pub fn status(&self) -> [DirectionStatus; 2] {
        self.status.each_ref().map(|slots| {
            let threads: Vec<DirectionStatus> = slots
                .iter()
                .map(|slot| slot.lock().unwrap_or_else(|p| p.into_inner()).clone())
                .collect();
            DirectionStatus::merged(&threads)
        })
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Whether a forwarding thread has ended (by the stop flag or an error).
    pub fn finished(&self) -> bool {
        self.threads.iter().any(|t| t.is_finished())
    }

    /// Stops every thread and returns both directions' final status, or the first error
    /// a thread met.
    pub fn stop(mut self) -> io::Result<[DirectionStatus; 2]> {
        self.stop.store(true, Ordering::SeqCst);
        let mut result = Ok(());
        for thread in std::mem::take(&mut self.threads) {
            let outcome = thread
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a bridge thread panicked")));
            if result.is_ok() {
                result = outcome;
            }
        }
        result.map(|_| self.status())
    }
}

/// What a direction's link carries: frames, or offloaded segments with their header.
trait Carried: Frame + AsRef<[u8]> {
    fn from_buffer(buffer: Vec<u8>) -> Self;
    fn into_buffer(self) -> Vec<u8>;
}

impl Carried for Vec<u8> {
    fn from_buffer(buffer: Vec<u8>) -> Self {
        buffer
    }

    fn into_buffer(self) -> Vec<u8> {
        self
    }
}

impl Carried for Offloaded {
    fn from_buffer(buffer: Vec<u8>) -> Self {
        Offloaded(buffer)
    }

    fn into_buffer(self) -> Vec<u8> {
        self.0
    }
}

struct Direction<F: Carried> {
    rx: RxRing,
    tx: PacketSocket,
    link: Link<F>,
    frame_capacity: usize,
    status: Arc<Mutex<DirectionStatus>>,
    /// The arrival time given to the last frame (the link's clock never goes back).
    last_arrival: u64,
    /// CLOCK_MONOTONIC at `started`, nanoseconds: the link's clock counts from it.
    origin_ns: u64,
    waiter: Waiter,
    /// The direction (0: first interface to second) and the frame log's sender.
    log: Option<(usize, LogSender)>,
}

/// What a direction thread starts from, whatever it carries.
struct DirectionParts {
    rx: RxRing,
    tx: PacketSocket,
    spec: LinkSpec,
    seed: u64,
    frame_capacity: usize,
    status: Arc<Mutex<DirectionStatus>>,
    /// CLOCK_MONOTONIC at the bridge's start, nanoseconds.
    origin_ns: u64,
    log: Option<(usize, LogSender)>,
}

impl<F: Carried> Direction<F> {
    fn new(parts: DirectionParts) -> io::Result<Direction<F>> {
        let mut link = Link::new(parts.spec, parts.seed);
        if let Some((_, log)) = &parts.log {
            link.record_frames(log.limit);
        }
        Ok(Direction {
            rx: parts.rx,
            tx: parts.tx,
            link,
            frame_capacity: parts.frame_capacity,
            status: parts.status,
            last_arrival: 0,
            origin_ns: parts.origin_ns,
            waiter: Waiter::new()?,
            log: parts.log,
        })
    }

    fn now_ns(&self) -> u64 {
        wait::monotonic_ns().saturating_sub(self.origin_ns)
    }

    fn run(mut self, stop: &AtomicBool) -> io::Result<()> {
        let mut spare: Vec<Vec<u8>> = Vec::new();
        let mut send_scratch = sys::BatchScratch::default();
        let mut due: Vec<F> = Vec::with_capacity(BATCH);
        let mut extra = DirectionStatus::default();
        let mut next_publish = 0;
        while !stop.load(Ordering::Relaxed) {
            let now = self.now_ns();
            // Send everything due, in batches.
            loop {
                while due.len() < BATCH {
                    match self.link.poll_departure(now) {
                        Some(frame) => due.push(frame),
                        None => break,
                    }
                }
                if due.is_empty() {
                    break;
                }
                extra.refused += sys::send_batch(&self.tx, &due, &mut send_scratch)?;
                spare.extend(due.drain(..).map(F::into_buffer));
            }
            if now >= next_publish {
                extra.ring_drops += self.rx.drops();
                self.publish(&extra);
                self.hand_over_records();
                next_publish = now + PUBLISH_NS;
            }
            if !self.rx.ready() {
                // Read the clock again: sending ran the receivers' network stack inline
                // (veth delivers in the sender's softirq), which can take tens of
                // microseconds.
                let now = self.now_ns();
                let departure = self.link.poll_timeout();
                let early = self.waiter.early_ns();
                match departure {
                    Some(due) if due <= now + early => {
                        let rx = &self.rx;
                        self.waiter.spin_until(|| rx.ready(), self.origin_ns + due)
                    }
                    _ => {
                        // Wake for the next frame due, or at the latest to publish.
                        let (until, for_departure) = match departure {
                            Some(due) if due - early < now + PUBLISH_NS => (due - early, true),
                            _ => (now + PUBLISH_NS, false),
                        };
                        self.waiter
                            .sleep(self.rx.raw(), self.origin_ns + until, for_departure)?;
                    }
                }
                continue;
            }
            self.receive(&mut spare, &mut extra);
            // Cap the spare pool so a burst does not keep its memory forever.
            spare.truncate(4 * BATCH);
        }
        extra.ring_drops += self.rx.drops();
        self.publish(&extra);
        self.hand_over_records();
        Ok(())
    }

    /// The frame log's records since the last publish, to its writer (never waiting).
    fn hand_over_records(&mut self) {
        let Some((direction, log)) = self.log.as_mut() else {
            return;
        };
        if let Some((records, unrecorded)) = self.link.take_frame_records() {
            log.send(Batch {
                direction: *direction,
                records,
                unrecorded,
            });
        }
    }

    /// Takes a batch of frames from the ring into the link: one copy each, into a buffer
    /// from the spare pool.
    fn receive(&mut self, spare: &mut Vec<Vec<u8>>, extra: &mut DirectionStatus) {
        let origin = self.origin_ns;
        let (read, wall) = one_moment(
            || wait::monotonic_ns().saturating_sub(origin),
            || UnixTime::now().nanos(),
        );
        let Direction {
            rx,
            link,
            frame_capacity,
            last_arrival,
            ..
        } = self;
        rx.receive(BATCH, |r, bytes| {
            if r.outgoing {
                return;
            }
            if r.truncated || r.len > *frame_capacity {
                extra.oversize += 1;
                return;
            }
            // A frame's time in the path starts when the kernel received it: while this
            // thread was sending (veth runs the receiver's stack inside the send call),
            // frames wait in the ring. Never before the last frame's, so the link's clock
            // only moves forward.
            let waited = wall.saturating_sub(r.kernel_ns);
            let arrived = read.saturating_sub(waited).max(*last_arrival);
            *last_arrival = arrived;
            extra.pickup_sum_ns += read - arrived;
            extra.pickup_max_ns = extra.pickup_max_ns.max(read - arrived);
            let mut buffer = spare.pop().unwrap_or_default();
            buffer.clear();
            buffer.extend_from_slice(bytes);
            link.handle_arrival(arrived, F::from_buffer(buffer));
        });
    }

    fn publish(&self, extra: &DirectionStatus) {
        let (frames, bytes) = self.link.occupancy();
        let mut slot = self.status.lock().unwrap_or_else(|p| p.into_inner());
        *slot = DirectionStatus {
            counters: self.link.counters(),
            queued_frames: frames as u64,
            queued_bytes: bytes,
            wake_early_ns: self.waiter.early_ns(),
            ..extra.clone()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A preemption between the reads is not taken for time: the closest pair of reads
    /// stands, its midpoint with the wall clock read between.
    #[test]
    fn the_clocks_are_read_as_one_moment() {
        // First try: 500 us between the monotonic reads (the thread was preempted);
        // second: 1 us.
        let mut monotonic = [1_000_000u64, 1_500_000, 2_000_000, 2_001_000].into_iter();
        let mut wall = [9_000_000u64, 9_600_000].into_iter();
        let (mono, wall_now) = one_moment(|| monotonic.next().unwrap(), || wall.next().unwrap());
        assert_eq!((mono, wall_now), (2_000_500, 9_600_000));
        // Every try slow: the least gap of the four stands.
        let gaps = [900_000u64, 300_000, 700_000, 800_000];
        let mut reads = Vec::new();
        let mut t = 0u64;
        for gap in gaps {
            reads.extend([t, t + gap]);
            t += gap + 10;
        }
        let mut reads = reads.into_iter();
        let mut walls = 0u64..;
        let (mono, wall_now) = one_moment(|| reads.next().unwrap(), || walls.next().unwrap());
        assert_eq!(wall_now, 1);
        assert_eq!(mono, 900_010 + 150_000);
    }
}
