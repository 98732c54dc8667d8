//! The emulator's driver: a transparent bridge between two interfaces over AF_PACKET
//! sockets, one thread per direction (docs/impair.md 2).
//!
//! Each direction's thread owns its receiving socket on one interface, its sending socket
//! on the other and its [`Link`]; the two share nothing but a stop flag and a status slot
//! they publish to every few milliseconds. A turn: send what is due, wait (ppoll with
//! nanosecond timeout and a 1 ns timer slack) until the next frame is due or a frame
//! arrives, receive a batch (recvmmsg), stamp it with one clock read, hand it to the link.

// A driver: the clock and sleeping are its job (the core modules stay sans-IO).
#![allow(clippy::disallowed_methods)]

use crate::link::{Link, LinkCounters};
use crate::spec::LinkSpec;
use crate::sys::{self, PacketSocket, Received};
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
}

/// Receive batch: frames taken per recvmmsg call.
const BATCH: usize = 64;
/// How often a direction publishes its counters, and the longest a wait lasts (so that a
/// stop is seen).
const PUBLISH_NS: u64 = 20_000_000;

/// One direction's state as its thread last published it.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
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
}

/// The two interfaces, checked and opened.
pub struct Ports {
    names: [String; 2],
    receivers: [PacketSocket; 2],
    senders: [PacketSocket; 2],
    /// Frame buffer size: the larger MTU plus Ethernet and VLAN headers.
    frame_capacity: usize,
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
    /// Checks both interfaces and opens their sockets.
    pub fn open(a: &str, b: &str) -> Result<Ports, BridgeError> {
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
        let receivers = [
            PacketSocket::receiver(indexes[0]).map_err(|e| io_error(a, e))?,
            PacketSocket::receiver(indexes[1]).map_err(|e| io_error(b, e))?,
        ];
        let senders = [
            PacketSocket::sender(indexes[0]).map_err(|e| io_error(a, e))?,
            PacketSocket::sender(indexes[1]).map_err(|e| io_error(b, e))?,
        ];
        Ok(Ports {
            names: [a.into(), b.into()],
            receivers,
            senders,
            frame_capacity: mtu + 14 + 4,
            _locks: locks,
        })
    }

    pub fn names(&self) -> &[String; 2] {
        &self.names
    }
}

/// A running bridge: two direction threads and their status slots.
pub struct Bridge {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<io::Result<()>>>,
    status: [Arc<Mutex<DirectionStatus>>; 2],
    started: Instant,
}

impl Bridge {
    /// Starts forwarding: `forward` applies to frames from the first interface to the
    /// second, `reverse` to the others. `stop` ends both threads within [`PUBLISH_NS`].
    pub fn start(
        ports: Ports,
        forward: LinkSpec,
        reverse: LinkSpec,
        seed: u64,
        stop: Arc<AtomicBool>,
    ) -> Bridge {
        let started = Instant::now();
        let status = [
            Arc::new(Mutex::new(DirectionStatus::default())),
            Arc::new(Mutex::new(DirectionStatus::default())),
        ];
        let Ports {
            receivers: [rx_a, rx_b],
            senders: [tx_a, tx_b],
            frame_capacity,
            _locks,
            ..
        } = ports;
        // The locks live as long as the threads: each thread keeps one.
        let [lock_a, lock_b] = _locks;
        let mut threads = Vec::new();
        for (rx, tx, spec, link_seed, slot, lock) in [
            (rx_a, tx_b, forward, seed, status[0].clone(), lock_a),
            (
                rx_b,
                tx_a,
                reverse,
                seed ^ 0x9e37_79b9_7f4a_7c15,
                status[1].clone(),
                lock_b,
            ),
        ] {
            let stop = stop.clone();
            threads.push(std::thread::spawn(move || {
                let _lock = lock;
                let direction = Direction {
                    rx,
                    tx,
                    link: Link::new(spec, link_seed),
                    frame_capacity,
                    started,
                    status: slot,
                    last_arrival: 0,
                };
                direction.run(&stop)
            }));
        }
        Bridge {
            stop,
            threads,
            status,
            started,
        }
    }

    /// Both directions' latest status: first to second interface, then back.
    pub fn status(&self) -> [DirectionStatus; 2] {
        [
            *self.status[0].lock().unwrap_or_else(|p| p.into_inner()),
            *self.status[1].lock().unwrap_or_else(|p| p.into_inner()),
        ]
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Whether a direction thread has ended (by the stop flag or an error).
    pub fn finished(&self) -> bool {
        self.threads.iter().any(|t| t.is_finished())
    }

    /// Stops both directions and returns their final status, or the first error a thread
    /// met.
    pub fn stop(self) -> io::Result<[DirectionStatus; 2]> {
        self.stop.store(true, Ordering::SeqCst);
        let mut result = Ok(());
        for thread in self.threads {
            let outcome = thread
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a bridge thread panicked")));
            if result.is_ok() {
                result = outcome;
            }
        }
        result.map(|_| {
            [
                *self.status[0].lock().unwrap_or_else(|p| p.into_inner()),
                *self.status[1].lock().unwrap_or_else(|p| p.into_inner()),
            ]
        })
    }
}

struct Direction {
    rx: PacketSocket,
    tx: PacketSocket,
    link: Link<Vec<u8>>,
    frame_capacity: usize,
    started: Instant,
    status: Arc<Mutex<DirectionStatus>>,
    /// The arrival time given to the last frame (the link's clock never goes back).
    last_arrival: u64,
}

impl Direction {
    fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    fn run(mut self, stop: &AtomicBool) -> io::Result<()> {
        sys::tight_timer_slack();
        sys::realtime_priority();
        let capacity = self.frame_capacity;
        let mut slots: Vec<Vec<u8>> = (0..BATCH).map(|_| vec![0u8; capacity]).collect();
        let mut spare: Vec<Vec<u8>> = Vec::new();
        let mut received: Vec<Received> = Vec::with_capacity(BATCH);
        let mut receive_scratch = sys::BatchScratch::default();
        let mut send_scratch = sys::BatchScratch::default();
        let mut due: Vec<Vec<u8>> = Vec::with_capacity(BATCH);
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
                spare.append(&mut due);
            }
            if now >= next_publish {
                self.publish(extra);
                next_publish = now + PUBLISH_NS;
            }
            // Read the clock again: sending ran the receivers' network stack inline (veth
            // delivers in the sender's softirq), which can take tens of microseconds.
            let now = self.now_ns();
            let wait = self
                .link
                .poll_timeout()
                .map_or(PUBLISH_NS, |t| t.saturating_sub(now))
                .min(PUBLISH_NS);
            if wait > 0 && !self.rx.wait_readable(wait)? {
                continue;
            }
            let count =
                sys::receive_batch(&self.rx, &mut slots, &mut receive_scratch, &mut received)?;
            if count == 0 {
                continue;
            }
            let (read, wall) = (self.now_ns(), sys::wall_clock_ns());
            for (i, r) in received.iter().enumerate() {
                if r.outgoing {
                    continue;
                }
                if r.truncated {
                    extra.oversize += 1;
                    continue;
                }
                // A frame's time in the path starts when the kernel received it: while
                // this thread was sending (veth runs the receiver's stack inside the send
                // call), frames wait in the socket. Never before the last frame's, so the
                // link's clock only moves forward.
                let waited = r.kernel_ns.map_or(0, |k| wall.saturating_sub(k));
                let arrived = read.saturating_sub(waited).max(self.last_arrival);
                self.last_arrival = arrived;
                extra.pickup_sum_ns += read - arrived;
                extra.pickup_max_ns = extra.pickup_max_ns.max(read - arrived);
                let mut buffer = spare.pop().unwrap_or_default();
                buffer.resize(capacity, 0);
                std::mem::swap(&mut buffer, &mut slots[i]);
                buffer.truncate(r.len);
                self.link.handle_arrival(arrived, buffer);
            }
            // Cap the spare pool so a burst does not keep its memory forever.
            spare.truncate(4 * BATCH);
        }
        self.publish(extra);
        Ok(())
    }

    fn publish(&self, extra: DirectionStatus) {
        let (frames, bytes) = self.link.occupancy();
        let mut slot = self.status.lock().unwrap_or_else(|p| p.into_inner());
        *slot = DirectionStatus {
            counters: self.link.counters(),
            queued_frames: frames as u64,
            queued_bytes: bytes,
            ..extra
        };
    }
}
