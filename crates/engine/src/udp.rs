//! The UDP data plane of one worker: paced senders and counting receivers over connected
//! datagram sockets, batched with `sendmmsg`/`recvmmsg`.
//!
//! A sender stamps each datagram with its flow's sequence number and the send time
//! (docs/protocol.md 5); one clock read serves a whole batch. A receiver feeds every
//! datagram to its flow's [`SequenceTracker`], which keeps loss, reordering, duplicates
//! and jitter apart. Send calls the kernel refuses (EAGAIN, ENOBUFS) are counted, never
//! retried silently. The loop waits in `poll(2)` on the sockets that have nothing to do,
//! bounded by the next pacing slot and the next boundary.

use crate::flow::{outcome_of, send_sample, FlowCount, FlowOutcome, FlowSocket, FlowSpec};
use crate::flow::{Sample, SampleExtra, WorkerPlan};
use crate::nap::Napper;
use crate::pacer::Pacer;
use crate::video::FrameSender;
use linerate_model::call::JitterBuffer;
use linerate_model::clock::UnixTime;
use linerate_model::marks::ClassTally;
use linerate_model::{Role, UdpCounts};
use linerate_proto::datagram::{is_hello, Framing, SequenceTracker};
use linerate_proto::video::{FrameFields, FrameWire};
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
/// How long receivers go on after the end for datagrams still in flight, and after each
/// datagram that comes in that time: they count in the totals, not in the window. UDP has
/// no end-of-stream to wait for, and a path's one-way delay may be longer than any fixed
/// wait: while the sender's last datagrams are still arriving the receiver reads on, up
/// to the plan's drain.
const RECEIVE_GRACE: Duration = Duration::from_millis(250);

/// After this host's queue dropped a datagram (ENOBUFS), how long before sending again.
const QDISC_RETRY: Duration = Duration::from_micros(100);
/// What the kernel charges a send buffer per datagram beyond its payload (sk_buff and
/// headers), roughly: the margin for telling a full send buffer from a full qdisc.
const SKB_OVERHEAD: usize = 1024;

/// Messages per batched call when each message carries a run of datagrams (GSO, GRO).
const OFFLOAD_MESSAGES: usize = 8;
/// The kernel's limit on datagrams per UDP GSO buffer (UDP_MAX_SEGMENTS).
const GSO_MAX_SEGMENTS: usize = 64;
/// The largest UDP payload over IPv4; it bounds a GSO buffer.
const MAX_UDP_PAYLOAD: usize = 65507;
/// A receive buffer that holds any coalesced run (at most one IP packet's worth).
const GRO_BUFFER: usize = 65536;

/// Datagrams of `size` bytes one GSO buffer can carry; `None` when not even two fit.
fn gso_segments(size: usize) -> Option<usize> {
    let segments = (MAX_UDP_PAYLOAD / size).min(GSO_MAX_SEGMENTS);
    (segments >= 2).then_some(segments)
}

/// Sets an integer UDP-level socket option (UDP_SEGMENT, UDP_GRO).
fn set_udp_option(socket: &UdpSocket, option: libc::c_int, value: usize) -> io::Result<()> {
    crate::sys::set_int_option(socket, libc::SOL_UDP, option, value as libc::c_int)
}

/// Buffers for one batched call: `messages` message headers, each pointing at
/// `segments` datagrams of `size` bytes laid end to end. A message carries one datagram,
/// or with UDP GSO a run the kernel cuts into `size`-byte datagrams. The buffers never
/// move after construction, so the pointers stay valid.
struct Batch {
    size: usize,
    segments: usize,
    buffer: Vec<u8>,
    iovecs: Vec<libc::iovec>,
    headers: Vec<libc::mmsghdr>,
    /// Receivers: room per message for its control messages (the kernel's receive
    /// timestamp, with UDP GRO the coalesced run's datagram size, with marks counted the
    /// TOS byte); empty for senders.
    control: Vec<[u64; 12]>,
}

impl Batch {
    fn new(size: usize, segments: usize, messages: usize, receives: bool) -> Batch {
        let stride = size * segments;
        // The payload after the header is a constant byte.
        let mut buffer = vec![0x5a_u8; stride * messages];
        let iovecs: Vec<libc::iovec> = (0..messages)
            .map(|m| libc::iovec {
                iov_base: buffer[m * stride..].as_mut_ptr().cast(),
                iov_len: stride,
            })
            .collect();
        let mut batch = Batch {
            size,
            segments,
            buffer,
            iovecs,
            headers: Vec::with_capacity(messages),
            control: if receives {
                vec![[0; 12]; messages]
            } else {
                Vec::new()
            },
        };
        for m in 0..messages {
            // SAFETY: an all-zero msghdr is valid (no name, no control data).
            let mut header: libc::mmsghdr = unsafe { std::mem::zeroed() };
            header.msg_hdr.msg_iov = &mut batch.iovecs[m];
            header.msg_hdr.msg_iovlen = 1;
            if let Some(control) = batch.control.get_mut(m) {
                header.msg_hdr.msg_control = control.as_mut_ptr().cast();
            }
            batch.headers.push(header);
        }
        batch
    }

    /// Writes `template` (cut to the datagram size) at the start of every datagram, once:
    /// the framing's fields are written over it at each send, the rest stays.
    fn begin_each_with(&mut self, template: &[u8]) {
        let len = template.len().min(self.size);
        for i in 0..self.capacity() {
            self.datagram(i)[..len].copy_from_slice(&template[..len]);
        }
    }

    /// Datagrams one call can carry.
    fn capacity(&self) -> usize {
        self.segments * self.headers.len()
    }

    fn datagram(&mut self, i: usize) -> &mut [u8] {
        &mut self.buffer[i * self.size..(i + 1) * self.size]
    }

    /// Sends the first `count` datagrams; the number the kernel took.
    fn send(&mut self, socket: &UdpSocket, count: usize) -> io::Result<usize> {
        let messages = count.div_ceil(self.segments);
        for (m, iovec) in self.iovecs[..messages].iter_mut().enumerate() {
            iovec.iov_len = (count - m * self.segments).min(self.segments) * self.size;
        }
        let sent = self.send_messages(socket, messages)?;
        // Only the last message can be short, so whole messages are whole runs.
        Ok((sent * self.segments).min(count))
    }

    /// Sends one datagram of each of `lengths` bytes (at most the datagram size; a batch
    /// without GSO); the number the kernel took.
    fn send_lengths(&mut self, socket: &UdpSocket, lengths: &[usize]) -> io::Result<usize> {
        debug_assert_eq!(self.segments, 1);
        for (iovec, len) in self.iovecs.iter_mut().zip(lengths) {
            iovec.iov_len = (*len).min(self.size);
        }
        self.send_messages(socket, lengths.len().min(self.headers.len()))
    }

    /// `sendmmsg` of the first `messages` messages as their iovecs stand.
    fn send_messages(&mut self, socket: &UdpSocket, messages: usize) -> io::Result<usize> {
        // SAFETY: `headers[..messages]` point at live iovecs and buffers owned by `self`.
        let sent = unsafe {
            libc::sendmmsg(
                socket.as_raw_fd(),
                self.headers.as_mut_ptr(),
                messages as libc::c_uint,
                0,
            )
        };
        if sent < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(sent as usize)
        }
    }

    /// Receives up to the batch's messages; the number of messages. Without `wait` the
    /// call never sleeps; with it, it sleeps until the first datagram (or the socket's
    /// receive timeout) and then takes what has queued (MSG_WAITFORONE).
    fn receive(&mut self, socket: &UdpSocket, wait: bool) -> io::Result<usize> {
        let control_len = if self.control.is_empty() {
            0
        } else {
            std::mem::size_of::<[u64; 12]>()
        };
        for header in &mut self.headers {
            header.msg_hdr.msg_flags = 0;
            header.msg_hdr.msg_controllen = control_len as _;
        }
        // SAFETY: as in `send`; the kernel writes at most `iov_len` bytes per buffer and
        // `msg_controllen` bytes of control data.
        let received = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                self.headers.as_mut_ptr(),
                self.headers.len() as libc::c_uint,
                if wait {
                    libc::MSG_WAITFORONE
                } else {
                    libc::MSG_DONTWAIT
                },
                std::ptr::null_mut(),
            )
        };
        if received < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(received as usize)
        }
    }

    /// Hands each datagram of received message `m` to `each`: the message itself, or the
    /// datagrams of a coalesced run. A message cut short (too long for the buffer, so not
    /// a datagram of this test) comes as one empty datagram.
    fn received(&self, m: usize, mut each: impl FnMut(&[u8])) {
        let header = &self.headers[m];
        if header.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
            return each(&[]);
        }
        let start = m * self.size * self.segments;
        let data = &self.buffer[start..start + header.msg_len as usize];
        match self.gro_segment(m) {
            Some(segment) if segment > 0 && segment < data.len() => {
                data.chunks(segment).for_each(each);
            }
            _ => each(data),
        }
    }

    /// The data of received message `m`'s control message of `level` and `kind`, read as a
    /// `T` (the kernel writes it unaligned); `None` when the message has none.
    fn control_data<T: Copy>(&self, m: usize, level: libc::c_int, kind: libc::c_int) -> Option<T> {
        if self.control.is_empty() {
            return None;
        }
        let header = &self.headers[m].msg_hdr;
        // SAFETY: the control buffer is live and the kernel set `msg_controllen`; the
        // CMSG macros stay within it, and a message of this level and kind carries a `T`.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(header);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == level && (*cmsg).cmsg_type == kind {
                    return Some(std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<T>()));
                }
                cmsg = libc::CMSG_NXTHDR(header, cmsg);
            }
        }
        None
    }

    /// When the kernel received message `m` (SO_TIMESTAMPNS), nanoseconds on the wall
    /// clock; `None` where the socket gave no timestamp.
    fn kernel_arrival_ns(&self, m: usize) -> Option<u64> {
        let at: libc::timespec = self.control_data(m, libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS)?;
        let ns = u64::try_from(at.tv_sec).ok()? * 1_000_000_000 + u64::try_from(at.tv_nsec).ok()?;
        (ns > 0).then_some(ns)
    }

    /// The TOS byte (IPv4) or traffic class (IPv6) message `m` arrived with, where the
    /// socket asked for it (a coalesced run's datagrams all carry the same: GRO merges
    /// only datagrams whose headers agree).
    fn tos(&self, m: usize) -> Option<u8> {
        if let Some(tos) = self.control_data::<u8>(m, libc::IPPROTO_IP, libc::IP_TOS) {
            return Some(tos);
        }
        let class: libc::c_int = self.control_data(m, libc::IPPROTO_IPV6, libc::IPV6_TCLASS)?;
        u8::try_from(class).ok()
    }

    /// The datagram size of a run the kernel coalesced into message `m` (UDP_GRO).
    fn gro_segment(&self, m: usize) -> Option<usize> {
        let size: libc::c_int = self.control_data(m, libc::SOL_UDP, libc::UDP_GRO)?;
        usize::try_from(size).ok()
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
    /// Sender: datagrams the kernel refused because the socket's send buffer was full
    /// (EAGAIN); each is sent again, under the same sequence number.
    send_errors: u64,
    /// Sender: datagrams this host's own queue (the qdisc, the device) dropped on the way
    /// out (ENOBUFS, reported because the socket has IP_RECVERR); each is sent again under
    /// the same sequence number, so they are never counted as loss between the hosts.
    qdisc_drops: u64,
    /// Sender: the send buffer the kernel granted (SO_SNDBUF), to tell which of the two
    /// refused the datagram that ended a short batch.
    send_buffer: usize,
    /// Sender: the socket buffer is full; wait until poll says it is writable.
    blocked: bool,
    pacer: Option<Pacer>,
    /// Sender of a video test: its frames, in place of the pacer.
    frames: Option<FrameSender>,
    /// Sender of a call whose codec has voice activity detection: its speaker's talk
    /// spurts, and the frames of its pauses it did not send.
    talk: Option<linerate_model::call::TalkSpurts>,
    silent: u64,
    /// iperf 2's final datagrams the kernel took (sent once, at the end).
    finals: u64,
    tracker: Option<SequenceTracker>,
    /// Receiver of a marked test: its datagrams by the TOS byte they arrived with.
    classes: Option<ClassTally>,
    done: bool,
    /// Bytes this flow moves before it stops (iperf3's `-n`), and whether it has.
    budget: Option<u64>,
    spent: bool,
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
                    transit_sum_ms: c.transit_sum_ns / 1e6,
                    transit_samples: c.transit_samples,
                    loss_events: c.loss_events,
                    late: c.late,
                    unplayed_runs: c.unplayed_runs,
                    playout_judged: c.playout_judged,
                    playout_depth_sum_ms: c.playout_depth_sum_ns / 1e6,
                    ..Default::default()
                }
            }
            None => UdpCounts {
                sent: self.sequence,
                send_errors: self.send_errors,
                qdisc_drops: self.qdisc_drops,
                sender_late_us: self
                    .pacer
                    .as_ref()
                    .map_or(0, |p| p.late().as_micros() as u64),
                silent: self.silent,
                finals: self.finals,
                ..Default::default()
            },
        }
    }
}

/// Runs one worker's UDP flows until the end boundary (plus a short grace for receivers)
/// or until `stop` is set. Each turn: take the samples due, give every flow a few calls,
/// settle byte budgets, and wait when nothing moved.
pub fn run(
    plan: WorkerPlan,
    specs: Vec<FlowSpec>,
    samples: Sender<Sample>,
    stop: Arc<AtomicBool>,
) -> io::Result<Vec<FlowOutcome>> {
    let mut udp = UdpLoop::new(plan, specs, samples)?;
    loop {
        let now = Instant::now();
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let since = now.saturating_duration_since(udp.plan.start);
        udp.take_samples(now, since);
        if udp.grace_until.is_some_and(|g| now >= g) || udp.flows.iter().all(|f| f.done) {
            break;
        }
        let turn = udp.move_datagrams(now, since);
        udp.settle_budgets();
        if let Some(e) = turn.gso_refused {
            udp.send_without_gso(&e);
            continue;
        }
        if turn.busy {
            continue;
        }
        udp.wait(now, turn.next_send);
    }
    Ok(udp.finish())
}

/// What one turn over the flows did.
struct Turn {
    /// Some flow moved datagrams: go round again at once.
    busy: bool,
    /// The earliest a paced sender may send again.
    next_send: Option<Instant>,
    /// The device refused a GSO buffer.
    gso_refused: Option<io::Error>,
}

/// One worker's UDP loop: its flows, batches and schedule.
struct UdpLoop {
    plan: WorkerPlan,
    samples: Sender<Sample>,
    framing: Framing,
    /// Bytes per datagram.
    size: usize,
    flows: Vec<UdpFlow>,
    /// What the loop had to do otherwise than asked (offloads refused), for the result.
    notes: Vec<String>,
    send_batch: Batch,
    /// A video sender's datagrams planned for one call and their lengths: kept between
    /// calls, so that a frame's turn allocates nothing.
    frame_plan: Vec<(usize, FrameFields)>,
    frame_lengths: Vec<usize>,
    /// A paced sender's batch (see [`UdpLoop::paced_batch`]).
    paced: usize,
    receive_batch: Batch,
    next_boundary: usize,
    /// After the end, receivers read on until then; each datagram that arrives moves it
    /// to [`RECEIVE_GRACE`] after, never past `grace_most`.
    grace_until: Option<Instant>,
    /// The end and the plan's drain: the latest any receiver reads to.
    grace_most: Option<Instant>,
    /// The loop's one flow receives: it sleeps in `recvmmsg` itself (a blocking socket
    /// with a [`MAX_WAIT`] timeout) instead of in `ppoll` and then `recvmmsg`. The poll
    /// call, its wait-queue entry and the second system call per wake-up were a quarter
    /// of a 64-byte receiver's CPU (docs/performance.md).
    lone_receiver: bool,
    /// The lone receiver's naps between short batches (`crate::nap`).
    napper: Option<Napper>,
    /// The wall clock (ns since the Unix epoch) at `plan.start`: datagrams carry wall
    /// clock send times, so that on one host (or synchronised hosts) arrival minus send
    /// time is the one-way delay. Read once; the monotonic clock measures from it.
    wall_base_ns: u64,
}

/// Whose frame fields a video flow's datagrams carry: iperf 2's with its framing.
fn frame_wire(framing: Framing) -> FrameWire {
    match framing {
        Framing::Iperf2 => FrameWire::Iperf2,
        Framing::Native { .. } | Framing::Iperf3 { .. } => FrameWire::Native,
    }
}

impl UdpLoop {
    fn new(plan: WorkerPlan, specs: Vec<FlowSpec>, samples: Sender<Sample>) -> io::Result<Self> {
        let framing = plan.udp_framing.unwrap_or(Framing::Native { tag: 0 });
        let size = plan.length.max(framing.min_len());
        let mut flows = Vec::with_capacity(specs.len());
        for spec in specs {
            flows.push(UdpFlow::new(spec, &plan, framing, size)?);
        }
        let mut notes = Vec::new();
        let sends = flows.iter().any(|f| f.role == Role::Send);
        let receives = flows.iter().any(|f| f.role == Role::Receive);
        // A video frame's last datagram is shorter than the rest: no GSO run can carry it.
        let gso = plan.gso && sends && plan.video.is_none();
        let mut send_batch = match gso.then(|| enable_gso(&flows, size)) {
            Some(Ok(segments)) => Batch::new(size, segments, OFFLOAD_MESSAGES, false),
            Some(Err(note)) => {
                notes.push(note);
                Batch::new(size, 1, BATCH, false)
            }
            None => Batch::new(size, 1, BATCH, false),
        };
        send_batch.begin_each_with(&plan.udp_template);
        // Receive buffers take any datagram of the test (a longer one is cut and counted
        // foreign), or with GRO any coalesced run.
        let mut coalesced = false;
        let receive_batch = match (plan.gro && receives).then(|| enable_gro(&flows)) {
            Some(Ok(())) => {
                coalesced = true;
                Batch::new(GRO_BUFFER, 1, OFFLOAD_MESSAGES * 2, true)
            }
            Some(Err(note)) => {
                notes.push(note);
                Batch::new(size.max(64), 1, BATCH, true)
            }
            None => Batch::new(size.max(64), 1, BATCH, true),
        };
        let paced = paced_batch(&plan, &send_batch, size);
        let lone_receiver = flows.len() == 1 && flows[0].role == Role::Receive;
        let mut napper = None;
        if lone_receiver {
            flows[0].socket.set_nonblocking(false)?;
            flows[0].socket.set_read_timeout(Some(MAX_WAIT))?;
            // With GRO a message is a coalesced run of unknown length: what the socket
            // holds of them cannot be told, so such a receiver never naps.
            if !coalesced {
                let buffer = socket2::SockRef::from(&flows[0].socket).recv_buffer_size()?;
                napper = Some(Napper::new(buffer, size + SKB_OVERHEAD));
            }
        }
        // The start is usually still ahead (the ends start together at a set time): the
        // wall clock then is now plus the wait, not now. Taking now for both cases once
        // put each end's base off by its own wait, a clock offset of up to milliseconds
        // between sender and receiver in every one-way delay.
        let (mono_now, wall_now) = (Instant::now(), UnixTime::now().nanos());
        let wall_base_ns = if plan.start >= mono_now {
            wall_now + (plan.start - mono_now).as_nanos() as u64
        } else {
            wall_now.saturating_sub((mono_now - plan.start).as_nanos() as u64)
        };
        for flow in flows.iter_mut().filter(|f| f.role == Role::Send) {
            if let Some(video) = plan.video_of(flow.outcome.direction) {
                // iperf 2's frames are carried after its client header (and the test's
                // start with its --trip-times): every datagram holds the template.
                let least = frame_wire(framing)
                    .header_len()
                    .max(plan.udp_template.len());
                flow.frames = Some(FrameSender::new(&video, size, least, wall_base_ns));
            }
        }
        Ok(UdpLoop {
            wall_base_ns,
            plan,
            samples,
            framing,
            size,
            flows,
            notes,
            send_batch,
            frame_plan: Vec::with_capacity(BATCH),
            frame_lengths: Vec::with_capacity(BATCH),
            paced,
            receive_batch,
            next_boundary: 0,
            grace_until: None,
            grace_most: None,
            lone_receiver,
            napper,
        })
    }

    /// Senders stop at the end (with iperf 2's final datagram where the plan asks it);
    /// receivers read on for the grace period.
    fn end_sending(&mut self, now: Instant) {
        let final_datagram = (self.plan.udp_final && self.framing == Framing::Iperf2).then(|| {
            let mut datagram = self.plan.udp_template.clone();
            datagram.resize(self.size.max(datagram.len()), 0);
            datagram
        });
        let wall_ns = self.wall_base_ns + self.plan.start.elapsed().as_nanos() as u64;
        for flow in self.flows.iter_mut().filter(|f| f.role == Role::Send) {
            if let (Some(mut datagram), false) = (final_datagram.clone(), flow.done) {
                Framing::write_iperf2_final(&mut datagram, flow.sequence, wall_ns);
                // Once, as 2.1.8's own client ends a test both ways; a refusal is the
                // peer's loss to count, not this side's, and the final is not counted.
                if flow.socket.send(&datagram).is_ok() {
                    flow.finals += 1;
                }
            }
            flow.done = true;
        }
        self.grace_until = Some(now + RECEIVE_GRACE.min(self.plan.drain));
        self.grace_most = Some(now + self.plan.drain);
    }

    /// Sends the samples of every boundary that is due; the last one ends the sending.
    fn take_samples(&mut self, now: Instant, since: Duration) {
        let end_index = self.plan.end_index();
        if self.next_boundary > end_index && self.grace_until.is_none() {
            // Asked to end at a boundary this worker has already sampled.
            self.end_sending(now);
        }
        while self.next_boundary <= end_index && self.plan.is_due(self.next_boundary, since) {
            // Lateness up to the boundary, not to now: a sender away across several
            // boundaries is late in each interval it missed.
            let boundary = (self.plan.start + self.plan.boundaries[self.next_boundary]).min(now);
            for pacer in self.flows.iter_mut().filter_map(|f| f.pacer.as_mut()) {
                pacer.refill(boundary);
            }
            if self.next_boundary == end_index {
                // Before the last counts, so that they hold the finals it sends.
                self.end_sending(now);
            }
            let counts = self
                .flows
                .iter()
                .map(|f| FlowCount {
                    id: f.id,
                    bytes: f.bytes(),
                    retransmits: 0,
                    udp: Some(f.counts()),
                    tcp: None,
                    transactions: 0,
                    crypto: Duration::ZERO,
                })
                .collect();
            send_sample(
                &self.plan,
                &self.samples,
                self.next_boundary,
                since,
                counts,
                SampleExtra::default(),
            );
            if self.next_boundary == self.plan.window_start && self.next_boundary > 0 {
                // The warm-up's delays are not the window's.
                for tracker in self.flows.iter_mut().filter_map(|f| f.tracker.as_mut()) {
                    tracker.restart_delays();
                }
            }
            self.next_boundary += 1;
        }
    }

    /// Gives every flow that is not done a few calls.
    fn move_datagrams(&mut self, now: Instant, since: Duration) -> Turn {
        let mut turn = Turn {
            busy: false,
            next_send: None,
            gso_refused: None,
        };
        for index in 0..self.flows.len() {
            if self.flows[index].done {
                continue;
            }
            match self.flows[index].role {
                Role::Send if self.flows[index].blocked => {}
                Role::Send if self.flows[index].frames.is_some() => {
                    self.send_frames(index, now, since, &mut turn)
                }
                Role::Send => self.send_turn(index, now, since, &mut turn),
                // Request/response flows run in `crate::rr`, never here.
                Role::Request | Role::Respond => {}
                Role::Receive => self.receive_turn(index, since, &mut turn),
            }
        }
        turn
    }

    /// Up to [`CALLS_PER_TURN`] batches from sender `index`, within its pace and budget.
    fn send_turn(&mut self, index: usize, now: Instant, since: Duration, turn: &mut Turn) {
        let size = self.size;
        let flow = &mut self.flows[index];
        for _ in 0..CALLS_PER_TURN {
            let left = flow.budget.map_or(usize::MAX, |b| {
                (b.saturating_sub(flow.sent_bytes) as usize).div_ceil(size)
            });
            let allowed = match flow.pacer.as_mut() {
                None => self.send_batch.capacity().min(left),
                Some(pacer) => {
                    // Wait for a full batch's credit (or the bucket's, if it holds less):
                    // a sender that went out with every datagram of credit would spend
                    // its time in one-datagram calls.
                    let allowed = pacer.allowance(now, size);
                    if allowed < self.paced {
                        let missing = (self.paced - allowed) * size;
                        let at = now + pacer.time_for(missing);
                        turn.next_send = Some(turn.next_send.map_or(at, |n| n.min(at)));
                        break;
                    }
                    allowed.min(self.send_batch.capacity()).min(left)
                }
            };
            if allowed == 0 {
                break;
            }
            if let Some(talk) = flow.talk.as_mut() {
                if !talk.talking(since.as_nanos() as u64) {
                    // A pause: its frames are due and not sent, as a codec with voice
                    // activity detection sends none; the pace goes on.
                    if let Some(pacer) = flow.pacer.as_mut() {
                        pacer.charge(allowed * size);
                    }
                    flow.silent += allowed as u64;
                    continue;
                }
            }
            // Stamped as the batch goes, not as the turn began: a turn's first batch can
            // follow milliseconds of other work (the first turn's set-up), which the
            // receiver would count as transit.
            let sent_ns = self.wall_base_ns + self.plan.start.elapsed().as_nanos() as u64;
            for i in 0..allowed {
                let sequence = flow.sequence + i as u64;
                self.framing
                    .write(self.send_batch.datagram(i), sequence, sent_ns, flow.id);
            }
            // The datagrams of one message: what one refusal refuses.
            let refused = self.send_batch.segments.min(allowed);
            match self.send_batch.send(&flow.socket, allowed) {
                Ok(sent) => {
                    flow.sequence += sent as u64;
                    flow.sent_bytes += (sent * size) as u64;
                    if let Some(pacer) = flow.pacer.as_mut() {
                        pacer.charge(sent * size);
                    }
                    turn.busy = true;
                    if sent < allowed {
                        // The kernel refused the next message and sendmmsg dropped the
                        // error: the socket's own queue says which refusal it was.
                        let refused = self.send_batch.segments.min(allowed - sent);
                        let full = flow.send_buffer_full(size);
                        flow.refused(full, refused, now, turn);
                        break;
                    }
                }
                Err(e) => {
                    let gso = self.send_batch.segments > 1;
                    if flow.send_failed(e, (refused, gso), (now, since), turn) {
                        break;
                    }
                }
            }
        }
    }

    /// Up to [`CALLS_PER_TURN`] batches of video sender `index`'s frames, as its schedule
    /// lets them go.
    fn send_frames(&mut self, index: usize, now: Instant, since: Duration, turn: &mut Turn) {
        let flow = &mut self.flows[index];
        let (planned, lengths) = (&mut self.frame_plan, &mut self.frame_lengths);
        for _ in 0..CALLS_PER_TURN {
            // The schedule reads the clock as it plans, not the turn's start: the turn may
            // have begun with the samples of a boundary (worker 0's first readings of the
            // host), and the first plan sets the schedule's origin, which would then lie
            // before them and make the first frame late by what they cost (1.6 to 5.9 ms
            // beside two busy loops).
            let elapsed_ns = self.plan.start.elapsed().as_nanos() as u64;
            let frames = flow.frames.as_mut().expect("a video sender");
            if let Err(next_ns) = frames.plan(elapsed_ns, self.send_batch.capacity(), planned) {
                let at = self.plan.start + Duration::from_nanos(next_ns);
                turn.next_send = Some(turn.next_send.map_or(at, |n| n.min(at)));
                break;
            }
            lengths.clear();
            let (wire, period_ns) = (frame_wire(self.framing), frames.period_ns());
            // As a plain sender's: stamped as the batch goes.
            let sent_ns = self.wall_base_ns + self.plan.start.elapsed().as_nanos() as u64;
            for (i, (len, fields)) in planned.iter().enumerate() {
                let datagram = &mut self.send_batch.datagram(i)[..*len];
                self.framing
                    .write(datagram, flow.sequence + i as u64, sent_ns, flow.id);
                fields.write_on(wire, datagram, period_ns);
                lengths.push(*len);
            }
            // A frame's first write is when its first datagram goes to the kernel, not
            // when the turn began: the headers above take tens of microseconds to write
            // in a debug build, which the latency would otherwise count.
            if let Some(frames) = flow.frames.as_mut() {
                let write_ns = self.wall_base_ns + self.plan.start.elapsed().as_nanos() as u64;
                // iperf 2's fields have no first write: its frames count from their due
                // time.
                if frames.first_written(write_ns) && wire == FrameWire::Native {
                    for i in 0..planned.len() {
                        FrameFields::set_first_write(self.send_batch.datagram(i), write_ns);
                    }
                }
            }
            match self.send_batch.send_lengths(&flow.socket, lengths) {
                Ok(sent) => {
                    flow.sequence += sent as u64;
                    flow.sent_bytes += lengths[..sent].iter().sum::<usize>() as u64;
                    if let Some(frames) = flow.frames.as_mut() {
                        frames.sent(planned, sent, elapsed_ns);
                    }
                    turn.busy = true;
                    if sent < lengths.len() {
                        let full = flow.send_buffer_full(self.size);
                        flow.refused(full, 1, now, turn);
                        break;
                    }
                }
                Err(e) => {
                    if flow.send_failed(e, (1, false), (now, since), turn) {
                        break;
                    }
                }
            }
        }
    }

    /// Up to [`CALLS_PER_TURN`] batches into receiver `index`'s tracker.
    fn receive_turn(&mut self, index: usize, since: Duration, turn: &mut Turn) {
        let flow = &mut self.flows[index];
        for call in 0..CALLS_PER_TURN {
            let wait = self.lone_receiver && call == 0;
            match self.receive_batch.receive(&flow.socket, wait) {
                Ok(count) => {
                    let arrival = Instant::now().saturating_duration_since(self.plan.start);
                    let read_ns = self.wall_base_ns + arrival.as_nanos() as u64;
                    // Each datagram arrived when the kernel took it, not when this thread
                    // got round to reading it (on a busy host, milliseconds later): its
                    // time on the test's clock is the read time less its wait in the
                    // socket, the wall clock against the kernel's stamp.
                    let wall_now = UnixTime::now().nanos();
                    let tracker = flow.tracker.as_mut().expect("receivers track");
                    let classes = &mut flow.classes;
                    for m in 0..count {
                        let tos = if classes.is_some() {
                            self.receive_batch.tos(m)
                        } else {
                            None
                        };
                        let arrival_ns = self
                            .receive_batch
                            .kernel_arrival_ns(m)
                            .map_or(read_ns, |kernel| {
                                read_ns.saturating_sub(wall_now.saturating_sub(kernel))
                            });
                        self.receive_batch.received(m, |d| {
                            // Not a hello repeated while the flows were set up.
                            if !is_hello(d) {
                                tracker.record(d, arrival_ns);
                                if let (Some(classes), Some(tos)) = (classes.as_mut(), tos) {
                                    classes.add(tos, 1);
                                }
                            }
                        });
                    }
                    turn.busy = true;
                    if let (Some(until), Some(most), true) =
                        (self.grace_until, self.grace_most, count > 0)
                    {
                        // Still arriving after the end: a longer path's tail.
                        self.grace_until =
                            Some(until.max((Instant::now() + RECEIVE_GRACE).min(most)));
                    }
                    if let Some(napper) = self.napper.as_mut() {
                        napper.read(count);
                    }
                    if count < self.receive_batch.headers.len() {
                        // The socket is empty: nap while the next batch arrives.
                        let stamped =
                            count > 0 && self.receive_batch.kernel_arrival_ns(0).is_some();
                        let nap = self
                            .napper
                            .as_mut()
                            .and_then(|n| n.after_short_read(Instant::now(), stamped));
                        if let Some(nap) = nap {
                            std::thread::sleep(nap);
                        }
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // A quiet spell: the rate is measured afresh when datagrams come.
                    if let Some(napper) = self.napper.as_mut() {
                        napper.quiet();
                    }
                    break;
                }
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

    /// Flows that moved their byte budget stop (senders), and the last one ends the test.
    fn settle_budgets(&mut self) {
        for flow in self.flows.iter_mut() {
            if !flow.spent && flow.budget.is_some_and(|b| flow.bytes() >= b) {
                flow.spent = true;
                if flow.role == Role::Send {
                    flow.done = true;
                }
                if self.plan.end.budget_spent() {
                    self.plan.end.request(self.next_boundary);
                }
            }
        }
    }

    /// The device refused a GSO buffer: send single datagrams from now on, and say so.
    fn send_without_gso(&mut self, error: &io::Error) {
        self.notes.push(format!(
            "--gso: the device refused segmentation offload ({error}); sending without"
        ));
        let _ = set_on_all(&self.flows, Role::Send, libc::UDP_SEGMENT, 0);
        self.send_batch = Batch::new(self.size, 1, BATCH, false);
        self.paced = paced_batch(&self.plan, &self.send_batch, self.size);
    }

    /// Nothing moved: waits for a socket, the next pacing slot or the next boundary.
    fn wait(&mut self, now: Instant, next_send: Option<Instant>) {
        if self.lone_receiver {
            // Its receive call has just waited (up to MAX_WAIT) in the kernel.
            return;
        }
        let mut wake = now + MAX_WAIT;
        if let Some(at) = next_send {
            wake = wake.min(at);
        }
        if self.next_boundary <= self.plan.end_index() {
            wake = wake.min(self.plan.start + self.plan.boundaries[self.next_boundary]);
        }
        if let Some(g) = self.grace_until {
            wake = wake.min(g);
        }
        let mut fds: Vec<libc::pollfd> = self
            .flows
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
        for flow in self.flows.iter_mut() {
            flow.blocked = false;
        }
    }

    /// Each flow's outcome; the first carries the loop's notes.
    fn finish(self) -> Vec<FlowOutcome> {
        let mut outcomes: Vec<FlowOutcome> = self
            .flows
            .into_iter()
            .map(|flow| {
                let bytes_total = flow.bytes();
                let datagrams_total = match &flow.tracker {
                    Some(t) => t.counts().datagrams,
                    None => flow.sequence,
                };
                let frames = match (&flow.tracker, &flow.frames) {
                    (Some(tracker), _) => tracker.frame_counts(),
                    (None, Some(sender)) => Some(sender.counts()),
                    (None, None) => None,
                };
                FlowOutcome {
                    bytes_total,
                    datagrams_total,
                    frames,
                    one_way_delay_us: flow.tracker.as_ref().and_then(SequenceTracker::delays),
                    classes: flow.classes.as_ref().map(ClassTally::counts),
                    ..flow.outcome
                }
            })
            .collect();
        if let Some(first) = outcomes.first_mut() {
            first.notes = self.notes;
        }
        outcomes
    }
}

/// A paced sender's batch: a millisecond's worth of datagrams, at most BATCH (one GSO
/// buffer's worth with GSO). Larger batches cost fewer calls but arrive as bursts a
/// shallow queue or a default receive buffer downstream would drop.
fn paced_batch(plan: &WorkerPlan, batch: &Batch, size: usize) -> usize {
    plan.rate_bps.map_or(1, |rate| {
        ((rate / 8 / 1000) as usize / size).clamp(1, batch.capacity().min(BATCH))
    })
}

impl UdpFlow {
    /// The kernel refused `datagrams` of this sender's: its send buffer was full (wait
    /// until the socket is writable), or this host's queue dropped them (try again
    /// shortly). Either way they go again under the same sequence numbers.
    fn refused(&mut self, buffer_full: bool, datagrams: usize, now: Instant, turn: &mut Turn) {
        if buffer_full {
            self.send_errors += datagrams as u64;
            self.blocked = true;
        } else {
            self.qdisc_drops += datagrams as u64;
            let at = now + QDISC_RETRY;
            turn.next_send = Some(turn.next_send.map_or(at, |n| n.min(at)));
        }
    }

    /// A send call that failed with `e`, having offered `refused` datagrams in its first
    /// message (GSO runs where `gso`): the buffer full or this host's queue dropping them
    /// (counted, tried again), an interruption (tried again at once), a device that cannot
    /// take GSO (the loop goes on without), or the flow's end (ECONNREFUSED: the peer's
    /// port is closed). Whether the turn stops here.
    fn send_failed(
        &mut self,
        e: io::Error,
        (refused, gso): (usize, bool),
        (now, since): (Instant, Duration),
        turn: &mut Turn,
    ) -> bool {
        match e.raw_os_error() {
            Some(libc::EAGAIN) => self.refused(true, refused, now, turn),
            // This host's queue dropped it: count it and try again shortly.
            Some(libc::ENOBUFS) => self.refused(false, refused, now, turn),
            Some(libc::EINTR) => return false,
            // The route's device cannot checksum a GSO buffer: go on without GSO, and say so.
            Some(libc::EIO) if gso => turn.gso_refused = Some(e),
            _ => {
                self.outcome.error =
                    Some(format!("send failed at {:.3} s: {e}", since.as_secs_f64()));
                self.done = true;
            }
        }
        true
    }

    /// Whether the socket's send queue is too full to take one more `size`-byte datagram
    /// (SIOCOUTQ, which is TIOCOUTQ: the bytes, overhead included, the socket holds in the
    /// kernel). Asked right after a refusal; a datagram or two may have left since, hence
    /// the margin.
    fn send_buffer_full(&self, size: usize) -> bool {
        let mut queued: libc::c_int = 0;
        // SAFETY: SIOCOUTQ writes one int to the pointer given.
        let rc = unsafe { libc::ioctl(self.socket.as_raw_fd(), libc::TIOCOUTQ, &mut queued) };
        rc == 0 && queued.max(0) as usize + 2 * (size + SKB_OVERHEAD) >= self.send_buffer
    }

    fn new(spec: FlowSpec, plan: &WorkerPlan, framing: Framing, size: usize) -> io::Result<Self> {
        let FlowSocket::Udp(socket) = spec.socket else {
            return Err(io::Error::other("a TCP flow was given to the UDP loop"));
        };
        socket.set_nonblocking(true)?;
        let outcome = outcome_of(&socket, spec.id, spec.direction, spec.role);
        let pacer = match (spec.role, plan.rate_bps.filter(|_| plan.video.is_none())) {
            // Credit for 5 ms of rate or one datagram, whichever is larger: bursts stay
            // far below a 100 ms interval.
            (Role::Send, Some(rate)) => Some(Pacer::new(
                plan.start,
                rate,
                (rate / 8 / 200).max(size as u64),
            )),
            _ => None,
        };
        let mut send_buffer = 0;
        if spec.role == Role::Receive {
            // The kernel's receive time of every datagram (see `receive_turn`); without
            // it, arrivals are stamped when read. Set where the test's sockets are opened
            // (`sys::apply_udp_options`), before a datagram can come; again here for one
            // opened elsewhere.
            let _ = crate::sys::set_int_option(&socket, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1);
            if plan.count_marks {
                crate::sys::receive_marks(&socket)?;
            }
        }
        if spec.role == Role::Send {
            // Without IP_RECVERR the kernel swallows a drop by this host's own queue (it
            // counts SndbufErrors and returns success), and the gap it leaves would be
            // reported as loss between the hosts.
            if socket.local_addr()?.is_ipv6() {
                crate::sys::set_int_option(&socket, libc::IPPROTO_IPV6, libc::IPV6_RECVERR, 1)?;
                // IPv4-mapped destinations go out through the IPv4 code, which asks this.
                let _ = crate::sys::set_int_option(&socket, libc::IPPROTO_IP, libc::IP_RECVERR, 1);
            } else {
                crate::sys::set_int_option(&socket, libc::IPPROTO_IP, libc::IP_RECVERR, 1)?;
            }
            send_buffer =
                crate::sys::int_option(&socket, libc::SOL_SOCKET, libc::SO_SNDBUF)?.max(0) as usize;
        }
        Ok(UdpFlow {
            id: spec.id,
            role: spec.role,
            socket,
            sent_bytes: 0,
            sequence: 0,
            send_errors: 0,
            qdisc_drops: 0,
            send_buffer,
            blocked: false,
            pacer,
            frames: None,
            // Each way its own speaker: the flow and its direction seed the conversation.
            talk: (plan.voice_activity && spec.role == Role::Send).then(|| {
                let way = u64::from(spec.direction == linerate_model::Direction::Reverse);
                linerate_model::call::TalkSpurts::new((u64::from(spec.id) << 1) | way)
            }),
            silent: 0,
            finals: 0,
            tracker: (spec.role == Role::Receive).then(|| {
                let mut tracker = SequenceTracker::new(spec.id, framing);
                match plan.playout {
                    Some(JitterBuffer::Fixed { ms }) => {
                        tracker = tracker
                            .with_playout(u64::from(ms) * 1_000_000)
                            .with_delays();
                    }
                    Some(JitterBuffer::Adaptive { most_ms }) => {
                        tracker = tracker.with_adaptive_playout(most_ms).with_delays();
                    }
                    None => {}
                }
                if let Some(video) = plan.video_of(spec.direction) {
                    tracker = tracker.with_frames(video.period_ns(), video.key_frames);
                }
                tracker
            }),
            classes: (spec.role == Role::Receive && plan.count_marks).then(ClassTally::default),
            done: false,
            budget: plan.budget_for(spec.role),
            spent: false,
            outcome,
        })
    }
}

/// Turns on UDP GSO for every sending flow; the datagrams per buffer, or the note that
/// says why the flows send without it.
fn enable_gso(flows: &[UdpFlow], size: usize) -> Result<usize, String> {
    let Some(segments) = gso_segments(size) else {
        return Err(format!(
            "--gso: two {size}-byte datagrams do not fit one 64 KiB buffer; sending without"
        ));
    };
    set_on_all(flows, Role::Send, libc::UDP_SEGMENT, size).map_err(|e| {
        format!("--gso: this kernel does not offer UDP segmentation offload ({e}); sending without")
    })?;
    Ok(segments)
}

/// Turns on UDP GRO for every receiving flow, or gives the note that says why they
/// receive without it.
fn enable_gro(flows: &[UdpFlow]) -> Result<(), String> {
    set_on_all(flows, Role::Receive, libc::UDP_GRO, 1).map_err(|e| {
        format!("--gro: this kernel does not offer UDP receive coalescing ({e}); receiving without")
    })
}

/// Sets a UDP option on every flow of `role`; if any refuses, turns it back off on all,
/// so the flows of a worker run alike.
fn set_on_all(flows: &[UdpFlow], role: Role, option: libc::c_int, value: usize) -> io::Result<()> {
    let mut of_role = flows.iter().filter(|f| f.role == role);
    if let Some(e) = of_role.find_map(|f| set_udp_option(&f.socket, option, value).err()) {
        for flow in flows.iter().filter(|f| f.role == role) {
            let _ = set_udp_option(&flow.socket, option, 0);
        }
        return Err(e);
    }
    Ok(())
}
#[cfg(test)]
mod tests {
    use super::*;
    use linerate_model::Direction;
    use std::sync::mpsc::channel;

    const TAG: u32 = 0x5eed_f00d;

    fn datagram(sequence: u64, flow: u32, tag: u32) -> Vec<u8> {
        let mut d = vec![0x5a; 100];
        linerate_proto::datagram::write_header(&mut d, sequence, 0, flow, tag);
        d
    }

    /// Datagrams from another test (another tag), for another flow, or too short to be
    /// ours are foreign in the window and never count as received; those that arrive
    /// after the end count in the flow's total only.
    #[test]
    fn foreign_and_late_datagrams_never_count_as_the_flows_own() {
        let ours = UdpSocket::bind("127.0.0.1:0").unwrap();
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        ours.connect(peer.local_addr().unwrap()).unwrap();
        peer.connect(ours.local_addr().unwrap()).unwrap();
        let start = Instant::now();
        let end = Duration::from_millis(300);
        let plan = WorkerPlan {
            udp_framing: Some(Framing::Native { tag: TAG }),
            ..WorkerPlan::alone(start, end, 100, Duration::from_secs(1))
        };
        let spec = FlowSpec {
            id: 0,
            direction: Direction::Forward,
            role: Role::Receive,
            socket: FlowSocket::Udp(ours),
        };
        let (samples, readings) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let worker = std::thread::spawn(move || run(plan, vec![spec], samples, stop));
        std::thread::sleep(Duration::from_millis(50));
        for sequence in 0..100 {
            peer.send(&datagram(sequence, 0, TAG)).unwrap();
        }
        for sequence in 0..10 {
            peer.send(&datagram(sequence, 0, TAG ^ 1)).unwrap(); // an earlier test's
            peer.send(&datagram(sequence + 100, 7, TAG)).unwrap(); // another flow's
        }
        peer.send(&[1, 2, 3, 4, 5, 6, 7, 8]).unwrap(); // shorter than any header
        std::thread::sleep(end + Duration::from_millis(50) - start.elapsed());
        // After the end, within the receivers' grace: late datagrams of the flow and more
        // strays.
        for sequence in 100..120 {
            peer.send(&datagram(sequence, 0, TAG)).unwrap();
            peer.send(&datagram(sequence, 0, TAG ^ 1)).unwrap();
        }
        let outcomes = worker.join().unwrap().unwrap();
        let last = readings.iter().last().expect("the end boundary's sample");
        let counts = last.flows[0].udp.expect("UDP counts");
        assert_eq!(counts.received, 100, "{counts:?}");
        assert_eq!(counts.foreign, 21, "{counts:?}");
        assert_eq!(
            (counts.lost, counts.out_of_order, counts.duplicates),
            (0, 0, 0)
        );
        assert_eq!(outcomes[0].datagrams_total, 120);
        assert_eq!(outcomes[0].bytes_total, 120 * 100);
    }
}
