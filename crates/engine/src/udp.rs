//! The UDP data plane of one worker: paced senders and counting receivers over connected
//! datagram sockets, batched with `sendmmsg`/`recvmmsg`.
//!
//! A sender stamps each datagram with its flow's sequence number and the send time
//! (docs/protocol.md 5); one clock read serves a whole batch. A receiver feeds every
//! datagram to its flow's [`SequenceTracker`], which keeps loss, reordering, duplicates
//! and jitter apart. Send calls the kernel refuses (EAGAIN, ENOBUFS) are counted, never
//! retried silently. The loop waits in `poll(2)` on the sockets that have nothing to do,
//! bounded by the next pacing slot and the next boundary.

use crate::pacer::Pacer;
use crate::worker::{outcome_of, send_sample, FlowCount, FlowOutcome, FlowSocket, FlowSpec};
use crate::worker::{Sample, WorkerPlan};
use linerate_proto::datagram::{parse_hello, write_header, SequenceTracker, MIN_DATAGRAM};
use linerate_report::{Role, UdpCounts};
use std::io;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Datagrams per `sendmmsg`/`recvmmsg` call.
const BATCH: usize = 64;
/// Calls per flow per loop turn, so that one busy flow cannot starve the others.
const CALLS_PER_TURN: usize = 4;
/// The longest a loop turn waits in `poll`, so a stop request is seen promptly.
const MAX_WAIT: Duration = Duration::from_millis(5);
/// How long receivers go on after the end for datagrams still in flight; they count in
/// the totals, not in the window. UDP has no end-of-stream to wait for.
const RECEIVE_GRACE: Duration = Duration::from_millis(250);

/// `count` buffers of `size` bytes with the message headers that point at them, for one
/// batched call. The buffers never move after construction, so the pointers stay valid.
struct Batch {
    size: usize,
    buffer: Vec<u8>,
    iovecs: Vec<libc::iovec>,
    headers: Vec<libc::mmsghdr>,
}

impl Batch {
    fn new(size: usize, count: usize) -> Batch {
        // The payload after the header is a constant byte.
        let mut buffer = vec![0x5a_u8; size * count];
        let iovecs: Vec<libc::iovec> = (0..count)
            .map(|i| libc::iovec {
                iov_base: buffer[i * size..].as_mut_ptr().cast(),
                iov_len: size,
            })
            .collect();
        let mut batch = Batch {
            size,
            buffer,
            iovecs,
            headers: Vec::with_capacity(count),
        };
        for i in 0..count {
            // SAFETY: an all-zero msghdr is valid (no name, no control data).
            let mut header: libc::mmsghdr = unsafe { std::mem::zeroed() };
            header.msg_hdr.msg_iov = &mut batch.iovecs[i];
            header.msg_hdr.msg_iovlen = 1;
            batch.headers.push(header);
        }
        batch
    }

    fn datagram(&mut self, i: usize) -> &mut [u8] {
        &mut self.buffer[i * self.size..(i + 1) * self.size]
    }

    /// Sends the first `count` datagrams; the number the kernel took.
    fn send(&mut self, socket: &UdpSocket, count: usize) -> io::Result<usize> {
        // SAFETY: `headers[..count]` point at live iovecs and buffers owned by `self`.
        let sent = unsafe {
            libc::sendmmsg(
                socket.as_raw_fd(),
                self.headers.as_mut_ptr(),
                count as libc::c_uint,
                0,
            )
        };
        if sent < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(sent as usize)
        }
    }

    /// Receives up to the batch's size without waiting; the number of datagrams.
    fn receive(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        for header in &mut self.headers {
            header.msg_hdr.msg_flags = 0;
        }
        // SAFETY: as in `send`; the kernel writes at most `iov_len` bytes per buffer.
        let received = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                self.headers.as_mut_ptr(),
                self.headers.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if received < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(received as usize)
        }
    }

    /// Datagram `i` of the last receive, or `None` if it was cut short (too long for the
    /// buffer, so not a datagram of this test).
    fn received(&self, i: usize) -> Option<&[u8]> {
        let header = &self.headers[i];
        let len = header.msg_len as usize;
        (header.msg_hdr.msg_flags & libc::MSG_TRUNC == 0)
            .then(|| &self.buffer[i * self.size..i * self.size + len])
    }
}

struct UdpFlow {
    id: u32,
    role: Role,
    socket: UdpSocket,
    /// Sender: payload bytes sent (a receiver's tracker counts its own).
    sent_bytes: u64,
    /// Sender: the next sequence number, which is also the datagrams sent.
    sequence: u64,
    send_errors: u64,
    /// Sender: the socket buffer is full; wait until poll says it is writable.
    blocked: bool,
    pacer: Option<Pacer>,
    tracker: Option<SequenceTracker>,
    done: bool,
    outcome: FlowOutcome,
}

impl UdpFlow {
    /// Payload bytes sent, or distinct datagrams' bytes received.
    fn bytes(&self) -> u64 {
        self.tracker
            .as_ref()
            .map_or(self.sent_bytes, |t| t.counts().bytes)
    }

    fn counts(&self) -> UdpCounts {
        match &self.tracker {
            Some(tracker) => {
                let c = tracker.counts();
                UdpCounts {
                    received: c.datagrams,
                    lost: c.lost,
                    out_of_order: c.out_of_order,
                    duplicates: c.duplicates,
                    foreign: c.foreign,
                    jitter_ms: c.jitter_ns / 1e6,
                    ..Default::default()
                }
            }
            None => UdpCounts {
                sent: self.sequence,
                send_errors: self.send_errors,
                ..Default::default()
            },
        }
    }
}

/// Runs a worker's UDP flows to the end of the schedule (or until `stop`).
pub fn run(
    plan: WorkerPlan,
    specs: Vec<FlowSpec>,
    samples: Sender<Sample>,
    stop: Arc<AtomicBool>,
) -> io::Result<Vec<FlowOutcome>> {
    let tag = plan.udp_tag.unwrap_or(0);
    let size = plan.length.max(MIN_DATAGRAM);
    let mut flows = Vec::with_capacity(specs.len());
    for spec in specs {
        let FlowSocket::Udp(socket) = spec.socket else {
            return Err(io::Error::other("a TCP flow was given to the UDP loop"));
        };
        socket.set_nonblocking(true)?;
        let outcome = outcome_of(
            &socket,
            spec.id,
            spec.direction,
            spec.role,
            (socket.local_addr().ok(), socket.peer_addr().ok()),
        );
        let pacer = match (spec.role, plan.rate_bps) {
            // Credit for 5 ms of rate or one datagram, whichever is larger: bursts stay
            // far below a 100 ms interval.
            (Role::Send, Some(rate)) => Some(Pacer::new(
                plan.start,
                rate,
                (rate / 8 / 200).max(size as u64),
            )),
            _ => None,
        };
        flows.push(UdpFlow {
            id: spec.id,
            role: spec.role,
            socket,
            sent_bytes: 0,
            sequence: 0,
            send_errors: 0,
            blocked: false,
            pacer,
            tracker: (spec.role == Role::Receive).then(|| SequenceTracker::new(spec.id, tag)),
            done: false,
            outcome,
        });
    }
    let mut send_batch = Batch::new(size, BATCH);
    // A paced sender's batch: a millisecond's worth of datagrams, at most BATCH. Larger
    // batches cost fewer calls but arrive as bursts a shallow queue downstream would drop.
    let paced_batch = plan.rate_bps.map_or(1, |rate| {
        ((rate / 8 / 1000) as usize / size).clamp(1, BATCH)
    });
    // Receive buffers take any datagram of the test; a longer one is cut and counted
    // foreign.
    let mut receive_batch = Batch::new(size.max(64), BATCH);
    let end_index = plan.boundaries.len() - 1;
    let mut next_boundary = 0usize;
    let mut grace_until: Option<Instant> = None;

    loop {
        let now = Instant::now();
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let since = now.saturating_duration_since(plan.start);
        while next_boundary <= end_index && since >= plan.boundaries[next_boundary] {
            let counts = flows
                .iter()
                .map(|f| FlowCount {
                    id: f.id,
                    bytes: f.bytes(),
                    retransmits: 0,
                    udp: Some(f.counts()),
                })
                .collect();
            send_sample(&plan, &samples, next_boundary, since, counts);
            if next_boundary == end_index {
                for flow in flows.iter_mut().filter(|f| f.role == Role::Send) {
                    flow.done = true;
                }
                grace_until = Some(now + RECEIVE_GRACE.min(plan.drain));
            }
            next_boundary += 1;
        }
        if grace_until.is_some_and(|g| now >= g) || flows.iter().all(|f| f.done) {
            break;
        }

        let since_ns = since.as_nanos() as u64;
        let mut next_send: Option<Instant> = None;
        let mut busy = false;
        for flow in flows.iter_mut().filter(|f| !f.done) {
            match flow.role {
                Role::Send if !flow.blocked => {
                    for _ in 0..CALLS_PER_TURN {
                        let allowed = match flow.pacer.as_mut() {
                            None => BATCH,
                            Some(pacer) => {
                                // Wait for a full batch's credit (or the bucket's, if it
                                // holds less): a sender that went out with every datagram
                                // of credit would spend its time in one-datagram calls.
                                let allowed = pacer.allowance(now, size);
                                if allowed < paced_batch {
                                    let missing = (paced_batch - allowed) * size;
                                    let at = now + pacer.time_for(missing);
                                    next_send = Some(next_send.map_or(at, |n| n.min(at)));
                                    break;
                                }
                                allowed.min(BATCH)
                            }
                        };
                        for i in 0..allowed {
                            let sequence = flow.sequence + i as u64;
                            write_header(send_batch.datagram(i), sequence, since_ns, flow.id, tag);
                        }
                        match send_batch.send(&flow.socket, allowed) {
                            Ok(sent) => {
                                flow.sequence += sent as u64;
                                flow.sent_bytes += (sent * size) as u64;
                                if let Some(pacer) = flow.pacer.as_mut() {
                                    pacer.charge(sent * size);
                                }
                                busy = true;
                            }
                            Err(e) => match e.raw_os_error() {
                                Some(libc::EAGAIN) => {
                                    flow.send_errors += 1;
                                    flow.blocked = true;
                                    break;
                                }
                                // The device queue is full: count it and try again shortly.
                                Some(libc::ENOBUFS) => {
                                    flow.send_errors += 1;
                                    let at = now + Duration::from_micros(100);
                                    next_send = Some(next_send.map_or(at, |n| n.min(at)));
                                    break;
                                }
                                Some(libc::EINTR) => {}
                                // ECONNREFUSED: the peer's port is closed (ICMP).
                                _ => {
                                    flow.outcome.error = Some(format!(
                                        "send failed at {:.3} s: {e}",
                                        since.as_secs_f64()
                                    ));
                                    flow.done = true;
                                    break;
                                }
                            },
                        }
                    }
                }
                Role::Send => {}
                Role::Receive => {
                    for _ in 0..CALLS_PER_TURN {
                        match receive_batch.receive(&flow.socket) {
                            Ok(count) => {
                                let arrival_ns =
                                    Instant::now().saturating_duration_since(plan.start);
                                let arrival_ns = arrival_ns.as_nanos() as u64;
                                let tracker = flow.tracker.as_mut().expect("receivers track");
                                for i in 0..count {
                                    match receive_batch.received(i) {
                                        // A hello repeated while the flows were set up.
                                        Some(d) if parse_hello(d).is_some() => {}
                                        Some(d) => tracker.record(d, arrival_ns),
                                        None => tracker.record(&[], arrival_ns),
                                    }
                                }
                                busy = true;
                                if count < BATCH {
                                    break;
                                }
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            // A refused earlier send of ours (ICMP) surfaces here; ignore.
                            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => break,
                            Err(e) => {
                                flow.outcome.error = Some(format!(
                                    "receive failed at {:.3} s: {e}",
                                    since.as_secs_f64()
                                ));
                                flow.done = true;
                                break;
                            }
                        }
                    }
                }
            }
        }
        if busy {
            continue;
        }
        // Nothing moved: wait for a socket, the next pacing slot or the next boundary.
        let mut wake = now + MAX_WAIT;
        if let Some(at) = next_send {
            wake = wake.min(at);
        }
        if next_boundary <= end_index {
            wake = wake.min(plan.start + plan.boundaries[next_boundary]);
        }
        if let Some(g) = grace_until {
            wake = wake.min(g);
        }
        let mut fds: Vec<libc::pollfd> = flows
            .iter()
            .filter(|f| !f.done && (f.role == Role::Receive || f.blocked))
            .map(|f| libc::pollfd {
                fd: f.socket.as_raw_fd(),
                events: if f.role == Role::Receive {
                    libc::POLLIN
                } else {
                    libc::POLLOUT
                },
                revents: 0,
            })
            .collect();
        let timeout = wake.saturating_duration_since(now);
        if fds.is_empty() {
            std::thread::sleep(timeout);
        } else {
            // ppoll, not poll: pacing slots are finer than poll's milliseconds.
            let timespec = libc::timespec {
                tv_sec: timeout.as_secs() as libc::time_t,
                tv_nsec: timeout.subsec_nanos() as libc::c_long,
            };
            // SAFETY: `fds` is a live, correctly sized array of pollfd.
            unsafe {
                libc::ppoll(
                    fds.as_mut_ptr(),
                    fds.len() as libc::nfds_t,
                    &timespec,
                    std::ptr::null(),
                )
            };
        }
        // Poll says nothing precise for blocked senders; try them all again.
        for flow in flows.iter_mut() {
            flow.blocked = false;
        }
    }
    Ok(flows
        .into_iter()
        .map(|flow| {
            let bytes_total = flow.bytes();
            let datagrams_total = match &flow.tracker {
                Some(t) => t.counts().datagrams,
                None => flow.sequence,
            };
            FlowOutcome {
                bytes_total,
                datagrams_total,
                ..flow.outcome
            }
        })
        .collect())
}
