//! System calls the transfer's drivers need and no maintained crate wraps: batched UDP
//! sends and receives over iovecs (the payload goes to the kernel straight from the chunk
//! buffer), the path MTU of a connected socket, `ppoll` with a nanosecond timeout,
//! `openat2` confined beneath a directory, preallocation and per-thread CPU time.

// A driver: the clock and waiting are its job (the core modules stay sans-IO).
#![allow(clippy::disallowed_methods)]

use std::ffi::CString;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use socket2::{Domain, Protocol, Socket, Type};

fn check(result: libc::c_int) -> io::Result<libc::c_int> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

/// Socket buffers asked for: a 10 Gbit/s path's 20 ms, so a scheduling hiccup does not
/// overflow them.
const SOCKET_BUFFER: usize = 32 << 20;

/// A non-blocking UDP socket bound to `local`, with large buffers (forced past the
/// sysctl limits when privileged) and the don't-fragment bit set: a datagram too big for
/// the path fails with EMSGSIZE instead of travelling in fragments.
pub fn udp_socket(local: SocketAddr) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(local), Type::DGRAM, Some(Protocol::UDP))?;
    // SO_SNDBUFFORCE and SO_RCVBUFFORCE (socket2 has only the plain options, which the
    // sysctl limits cap: the fallback when not privileged).
    let size = SOCKET_BUFFER as libc::c_int;
    let force = |option| {
        // SAFETY: setsockopt with an int option on a live socket.
        check(unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                (&size as *const libc::c_int).cast(),
                4,
            )
        })
    };
    if force(libc::SO_SNDBUFFORCE).is_err() {
        let _ = socket.set_send_buffer_size(SOCKET_BUFFER);
    }
    if force(libc::SO_RCVBUFFORCE).is_err() {
        let _ = socket.set_recv_buffer_size(SOCKET_BUFFER);
    }
    let (level, option, value) = if local.is_ipv4() {
        (
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )
    } else {
        (
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        )
    };
    // SAFETY: setsockopt with an int option on a live socket.
    check(unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            option,
            (&value as *const libc::c_int).cast(),
            4,
        )
    })?;
    socket.bind(&local.into())?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// The path MTU the kernel knows for a connected socket.
pub fn path_mtu(socket: &Socket, ipv4: bool) -> io::Result<u32> {
    let (level, option) = if ipv4 {
        (libc::IPPROTO_IP, libc::IP_MTU)
    } else {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    };
    let mut value: libc::c_int = 0;
    let mut len = 4 as libc::socklen_t;
    // SAFETY: getsockopt into an int of the stated length.
    check(unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            level,
            option,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok(value as u32)
}

/// Most datagrams one segmented send carries (the kernel's UDP_MAX_SEGMENTS).
const GSO_SEGMENTS: usize = 64;
/// Most bytes one segmented send carries: a UDP datagram's 65,535 less its headers,
/// IPv6's included.
const GSO_BYTES: usize = 65_000;
/// Asks the kernel to give each datagram `socket` receives with the time it arrived
/// (SO_TIMESTAMPNS: the receive path's clock, not the reading thread's), or no longer.
pub fn receive_timestamps<S: std::os::fd::AsFd>(socket: &S, on: bool) -> io::Result<()> {
    set_flag(socket, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, on)
}

/// Turns an int socket option that is a flag on or off.
fn set_flag<S: std::os::fd::AsFd>(
    socket: &S,
    level: libc::c_int,
    name: libc::c_int,
    on: bool,
) -> io::Result<()> {
    let fd = std::os::fd::AsFd::as_fd(socket).as_raw_fd();
    let value: libc::c_int = on.into();
    // SAFETY: setsockopt with an int option on a live socket.
    check(unsafe { libc::setsockopt(fd, level, name, (&value as *const libc::c_int).cast(), 4) })
        .map(|_| ())
}

/// Room for one message's UDP_SEGMENT control message (a u16), in u64s so that the
/// buffer is aligned as a `cmsghdr` must be.
const GSO_CONTROL_WORDS: usize = 3;

/// Reusable arrays for `sendmmsg`: two iovecs (header, payload) a datagram, and, while
/// the socket takes them, runs of equal datagrams sent as one message with UDP_SEGMENT
/// (generic segmentation offload): the kernel walks its UDP and IP send path once for
/// the run and cuts it into datagrams at the device (or in software just before it).
/// What arrives is the same datagrams as without it.
pub struct SendBatch {
    iovecs: Vec<libc::iovec>,
    headers: Vec<libc::mmsghdr>,
    controls: Vec<[u64; GSO_CONTROL_WORDS]>,
    /// How many datagrams each message carries.
    runs: Vec<usize>,
    /// Whether to segment: cleared for good when the socket refuses a segmented send
    /// (no checksum offload on the route's device, IPsec, an old kernel).
    gso: bool,
}

impl Default for SendBatch {
    fn default() -> SendBatch {
        SendBatch {
            iovecs: Vec::new(),
            headers: Vec::new(),
            controls: Vec::new(),
            runs: Vec::new(),
            gso: true,
        }
    }
}

// SAFETY: the raw pointers only ever point into buffers of the call that filled them.
unsafe impl Send for SendBatch {}

/// Splits `lengths` into runs a segmented send may carry: equal lengths (the last may be
/// shorter), at most [`GSO_SEGMENTS`] and [`GSO_BYTES`] a run. Without `gso`, one each.
fn runs_of(lengths: impl Iterator<Item = usize>, gso: bool, runs: &mut Vec<usize>) {
    runs.clear();
    let mut current: Option<(usize, usize, usize)> = None; // (segment, count, bytes)
    for len in lengths {
        current = match current {
            Some((segment, count, bytes))
                if gso && len <= segment && count < GSO_SEGMENTS && bytes + len <= GSO_BYTES =>
            {
                if len < segment {
                    // A shorter one ends its run.
                    runs.push(count + 1);
                    None
                } else {
                    Some((segment, count + 1, bytes + len))
                }
            }
            Some((_, count, _)) => {
                runs.push(count);
                Some((len, 1, len))
            }
            None => Some((len, 1, len)),
        };
    }
    if let Some((_, count, _)) = current {
        runs.push(count);
    }
}

impl SendBatch {
    /// Sends every datagram (header then payload) on a connected socket, waiting for
    /// room when the socket's buffer is full. Returns how many went out; a datagram the
    /// kernel refuses outright (EMSGSIZE: the path's MTU shrank) ends the batch early
    /// with the error.
    pub fn send(&mut self, fd: RawFd, datagrams: &[(&[u8], &[u8])]) -> io::Result<usize> {
        let sent = self.send_runs(fd, datagrams)?;
        if sent < datagrams.len() {
            // A segmented send was refused: the rest one datagram a message.
            return Ok(sent + self.send_runs(fd, &datagrams[sent..])?);
        }
        Ok(sent)
    }

    /// Whether runs of datagrams still go as one segmented message each.
    pub fn segmenting(&self) -> bool {
        self.gso
    }

    /// Sends `datagrams` in runs; returns early (fewer sent) when the socket refused a
    /// segmented message, having cleared `gso`.
    fn send_runs(&mut self, fd: RawFd, datagrams: &[(&[u8], &[u8])]) -> io::Result<usize> {
        let lengths = datagrams.iter().map(|(h, p)| h.len() + p.len());
        runs_of(lengths, self.gso, &mut self.runs);
        self.iovecs.clear();
        for (header, payload) in datagrams {
            self.iovecs.push(libc::iovec {
                iov_base: header.as_ptr() as *mut libc::c_void,
                iov_len: header.len(),
            });
            self.iovecs.push(libc::iovec {
                iov_base: payload.as_ptr() as *mut libc::c_void,
                iov_len: payload.len(),
            });
        }
        self.controls.clear();
        self.controls
            .resize(self.runs.len(), [0; GSO_CONTROL_WORDS]);
        self.headers.clear();
        let mut first = 0;
        for (i, &count) in self.runs.iter().enumerate() {
            // SAFETY: mmsghdr is plain data; zero is a valid empty value.
            let mut header: libc::mmsghdr = unsafe { std::mem::zeroed() };
            header.msg_hdr.msg_iov = self.iovecs[2 * first..].as_mut_ptr();
            header.msg_hdr.msg_iovlen = 2 * count;
            if count > 1 {
                let (h, p) = datagrams[first];
                let segment = (h.len() + p.len()) as u16;
                let control = &mut self.controls[i];
                header.msg_hdr.msg_control = control.as_mut_ptr().cast();
                // SAFETY: CMSG_SPACE is arithmetic.
                header.msg_hdr.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as usize;
                // SAFETY: the control buffer holds CMSG_SPACE(2) bytes (24 of 24),
                // aligned for a cmsghdr; CMSG_FIRSTHDR points at its start.
                unsafe {
                    let cmsg = libc::CMSG_FIRSTHDR(&header.msg_hdr);
                    (*cmsg).cmsg_level = libc::SOL_UDP;
                    (*cmsg).cmsg_type = libc::UDP_SEGMENT;
                    (*cmsg).cmsg_len = libc::CMSG_LEN(2) as usize;
                    std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>(), segment);
                }
            }
            self.headers.push(header);
            first += count;
        }
        let (mut at, mut sent) = (0, 0);
        while at < self.headers.len() {
            // SAFETY: the headers from `at` point at live iovecs over live buffers and at
            // their own control buffers.
            let n = unsafe {
                libc::sendmmsg(
                    fd,
                    self.headers[at..].as_mut_ptr(),
                    (self.headers.len() - at) as libc::c_uint,
                    0,
                )
            };
            if n < 0 {
                let error = io::Error::last_os_error();
                match error.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) | Some(libc::ENOBUFS) => {
                        wait(fd, libc::POLLOUT, Some(1_000_000))?;
                        continue;
                    }
                    // The socket cannot segment (EIO: no checksum offload on the way;
                    // EINVAL: a segment past the path's MTU or an old kernel): the rest
                    // goes a datagram a message, now and from now on.
                    Some(libc::EIO) | Some(libc::EINVAL) | Some(libc::EOPNOTSUPP)
                        if self.runs[at] > 1 =>
                    {
                        self.gso = false;
                        return Ok(sent);
                    }
                    // The peer's port is closed (an ICMP error came back): report it.
                    _ => return Err(error),
                }
            }
            sent += self.runs[at..at + n as usize].iter().sum::<usize>();
            at += n as usize;
        }
        Ok(sent)
    }
}

/// Asks the kernel to give each datagram `socket` receives with the TOS byte (IPv6:
/// traffic class) it arrived with (IP_RECVTOS, IPV6_RECVTCLASS).
pub fn receive_tos<S: std::os::fd::AsFd>(socket: &S) -> io::Result<()> {
    let options = socket2::SockRef::from(socket);
    if options.domain()? == Domain::IPV6 {
        options.set_recv_tclass_v6(true)?;
        // An IPv4-mapped peer's datagrams come through the IPv4 code.
        let _ = options.set_recv_tos(true);
        Ok(())
    } else {
        options.set_recv_tos(true)
    }
}

/// Asks the kernel to hand `socket` a run of equal datagrams that arrived together as one
/// message with their size (UDP_GRO), which [`RecvBatch::coalescing`] splits again; `on`
/// false asks for them one by one again. Loopback and NICs with GRO coalesce; a socket
/// that also receives small control datagrams should turn it off when the data ends.
pub fn receive_gro<S: std::os::fd::AsFd>(socket: &S, on: bool) -> io::Result<()> {
    set_flag(socket, libc::SOL_UDP, libc::UDP_GRO, on)
}

/// Room for one message's control messages: its TOS byte or traffic class, its UDP_GRO
/// segment size and its arrival time (u64s: aligned for `cmsghdr`).
const CONTROL_WORDS: usize = 12;
/// A coalesced message's buffer: the most a UDP datagram carries.
pub const COALESCED_BUFFER: usize = 65_536;

/// Reusable buffers and arrays for `recvmmsg`.
pub struct RecvBatch {
    /// One slot of `slot` bytes a message, in one allocation: the kernel's zero pages
    /// until written, so a 64 KiB slot holding one datagram costs a page.
    buffer: Vec<u8>,
    slot: usize,
    count: usize,
    iovecs: Vec<libc::iovec>,
    headers: Vec<libc::mmsghdr>,
    /// Each datagram of the last receive: (message, start, length).
    datagrams: Vec<(usize, usize, usize)>,
    /// Messages the last receive took.
    messages: usize,
    /// With [`with_tos`](Self::with_tos) or [`coalescing`](Self::coalescing): a control
    /// buffer a message.
    controls: Vec<[u64; CONTROL_WORDS]>,
    /// Whether each message's TOS byte is read.
    read_tos: bool,
}

// SAFETY: the raw pointers point into this struct's own buffers.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    pub fn new(count: usize, size: usize) -> RecvBatch {
        RecvBatch {
            buffer: vec![0u8; count * size],
            slot: size,
            count,
            iovecs: Vec::with_capacity(count),
            headers: Vec::with_capacity(count),
            datagrams: Vec::with_capacity(count),
            messages: 0,
            // Every batch has room for the arrival times (a cold start's train).
            controls: vec![[0; CONTROL_WORDS]; count],
            read_tos: false,
        }
    }

    /// As [`new`](Self::new), each datagram read with its TOS byte (the socket must ask
    /// for it: [`receive_tos`]); see [`tos`](Self::tos).
    pub fn with_tos(count: usize, size: usize) -> RecvBatch {
        RecvBatch {
            read_tos: true,
            ..RecvBatch::new(count, size)
        }
    }

    /// For a socket that coalesces ([`receive_gro`]): `count` messages of up to 64 KiB,
    /// each split into the datagrams it carries; with `tos`, as [`with_tos`](Self::with_tos)
    /// (the kernel coalesces only datagrams of one TOS byte).
    pub fn coalescing(count: usize, tos: bool) -> RecvBatch {
        RecvBatch {
            read_tos: tos,
            ..RecvBatch::new(count, COALESCED_BUFFER)
        }
    }

    /// Receives what is waiting, without blocking; the datagrams are then
    /// [`get`](Self::get)`(0..n)`.
    pub fn receive(&mut self, fd: RawFd) -> io::Result<usize> {
        self.iovecs.clear();
        self.headers.clear();
        self.datagrams.clear();
        self.messages = 0;
        for slot in self.buffer.chunks_exact_mut(self.slot) {
            self.iovecs.push(libc::iovec {
                iov_base: slot.as_mut_ptr().cast(),
                iov_len: slot.len(),
            });
        }
        for i in 0..self.count {
            // SAFETY: plain data; zero is a valid empty value.
            let mut header: libc::mmsghdr = unsafe { std::mem::zeroed() };
            header.msg_hdr.msg_iov = &mut self.iovecs[i];
            header.msg_hdr.msg_iovlen = 1;
            if let Some(control) = self.controls.get_mut(i) {
                header.msg_hdr.msg_control = control.as_mut_ptr().cast();
                header.msg_hdr.msg_controllen = std::mem::size_of_val(control);
            }
            self.headers.push(header);
        }
        // SAFETY: every header points at a live iovec over a live buffer.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.headers.as_mut_ptr(),
                self.headers.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let error = io::Error::last_os_error();
            return match error.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                // An ICMP error for an earlier send: nothing to read this time.
                io::ErrorKind::ConnectionRefused => Ok(0),
                _ => Err(error),
            };
        }
        self.messages = n as usize;
        for message in 0..self.messages {
            let header = &self.headers[message];
            let len = header.msg_len as usize;
            match self.control(message, libc::SOL_UDP, libc::UDP_GRO) {
                Some(segment) if segment > 0 => {
                    let segment = segment as usize;
                    // A coalesced message cut short by its buffer loses only its last,
                    // partial datagram (a loss the sender resends), never a piece of one.
                    let truncated = header.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
                    let mut start = 0;
                    while start < len {
                        let take = segment.min(len - start);
                        if take < segment && truncated {
                            break;
                        }
                        self.datagrams.push((message, start, take));
                        start += take;
                    }
                }
                _ => self.datagrams.push((message, 0, len)),
            }
        }
        Ok(self.datagrams.len())
    }

    /// Whether the last receive took as many messages as it had room for (more may wait).
    pub fn full(&self) -> bool {
        self.messages == self.count
    }

    pub fn get(&self, i: usize) -> &[u8] {
        let (message, start, len) = self.datagrams[i];
        let at = message * self.slot + start;
        &self.buffer[at..at + len]
    }

    /// Datagrams the last receive took.
    pub fn len(&self) -> usize {
        self.datagrams.len()
    }

    pub fn is_empty(&self) -> bool {
        self.datagrams.is_empty()
    }

    /// Datagram `i`, to change where it lies (a seal opened in place).
    pub fn get_mut(&mut self, i: usize) -> &mut [u8] {
        let (message, start, len) = self.datagrams[i];
        let at = message * self.slot + start;
        &mut self.buffer[at..at + len]
    }

    /// The TOS byte (traffic class) datagram `i` arrived with, where the batch reads them.
    pub fn tos(&self, i: usize) -> Option<u8> {
        if !self.read_tos {
            return None;
        }
        let (message, ..) = *self.datagrams.get(i)?;
        self.control(message, libc::IPPROTO_IP, libc::IP_TOS)
            .map(|tos| tos as u8)
            .or_else(|| {
                let class = self.control(message, libc::IPPROTO_IPV6, libc::IPV6_TCLASS)?;
                u8::try_from(class).ok()
            })
    }

    /// When the kernel received datagram `i` (SO_TIMESTAMPNS, the socket must ask for it:
    /// [`receive_timestamps`]), nanoseconds on the wall clock; a coalesced run's datagrams
    /// all carry their first one's arrival.
    pub fn arrived_ns(&self, i: usize) -> Option<u64> {
        let (message, ..) = *self.datagrams.get(i)?;
        let at: libc::timespec =
            self.control_data(message, libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS)?;
        let ns = u64::try_from(at.tv_sec).ok()? * 1_000_000_000 + u64::try_from(at.tv_nsec).ok()?;
        (ns > 0).then_some(ns)
    }

    /// The value of control message (`level`, `kind`) of message `message` of the last
    /// receive: IPv4's TOS comes as a byte, IPv6's class and UDP_GRO's size as an int.
    fn control(&self, message: usize, level: libc::c_int, kind: libc::c_int) -> Option<i32> {
        if (level, kind) == (libc::IPPROTO_IP, libc::IP_TOS) {
            return self.control_data::<u8>(message, level, kind).map(i32::from);
        }
        self.control_data::<libc::c_int>(message, level, kind)
    }

    /// The data of control message (`level`, `kind`) of message `message`, read as a `T`.
    fn control_data<T: Copy>(
        &self,
        message: usize,
        level: libc::c_int,
        kind: libc::c_int,
    ) -> Option<T> {
        if self.controls.is_empty() {
            return None;
        }
        let header = &self.headers.get(message)?.msg_hdr;
        // SAFETY: the control buffer is this batch's own and the kernel set
        // `msg_controllen` within it; a message of (`level`, `kind`) holds a `T`, read
        // only when its length says it is whole.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(header);
            while !cmsg.is_null() {
                if ((*cmsg).cmsg_level, (*cmsg).cmsg_type) == (level, kind)
                    && (*cmsg).cmsg_len as usize
                        >= libc::CMSG_LEN(std::mem::size_of::<T>() as u32) as usize
                {
                    return Some(std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<T>()));
                }
                cmsg = libc::CMSG_NXTHDR(header, cmsg);
            }
        }
        None
    }
}

/// An eventfd that threads waiting in [`wait_any`] on it and their sockets are woken by
/// (a receiving lane told to stop at a file's end, at once rather than at its next
/// timeout).
pub struct Wakeup(OwnedFd);

impl Wakeup {
    pub fn new() -> io::Result<Wakeup> {
        // SAFETY: plain integer arguments; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor this process owns and nothing else holds.
        Ok(Wakeup(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Makes the eventfd readable (for good: nothing reads it).
    pub fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: eight bytes from a live buffer to a live eventfd.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }

    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Waits until `fd` has `events` or `timeout_ns` passes (`None`: no limit). A signal
/// ends the wait early, which callers treat as a timeout.
pub fn wait(fd: RawFd, events: libc::c_short, timeout_ns: Option<u64>) -> io::Result<bool> {
    wait_any(&[fd], events, timeout_ns)
}

/// As [`wait`], for any of `fds` (a session's lanes: at most 16 are waited on).
pub fn wait_any(fds: &[RawFd], events: libc::c_short, timeout_ns: Option<u64>) -> io::Result<bool> {
    let empty = libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    };
    let mut polls = [empty; 16];
    let count = fds.len().min(polls.len());
    for (poll, &fd) in polls.iter_mut().zip(&fds[..count]) {
        *poll = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
    }
    let spec = timeout_ns.map(|ns| libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    });
    let spec_ptr = spec
        .as_ref()
        .map_or(std::ptr::null(), |s| s as *const libc::timespec);
    // SAFETY: `count` live pollfds, an optional live timespec, no signal mask.
    let n = unsafe {
        libc::ppoll(
            polls.as_mut_ptr(),
            count as libc::nfds_t,
            spec_ptr,
            std::ptr::null(),
        )
    };
    if n < 0 {
        let error = io::Error::last_os_error();
        if error.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(error);
    }
    Ok(n > 0)
}

/// Sleeps `ns` nanoseconds (a signal may end it early).
pub fn sleep_ns(ns: u64) {
    let spec = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: a live timespec; no remainder wanted.
    unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, 0, &spec, std::ptr::null_mut()) };
}

/// Asks for 1 ns of timer slack on this thread: the pacer's sleeps end when asked, not up
/// to 50 µs later.
pub fn tight_timer_slack() {
    // SAFETY: prctl with plain integer arguments.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

/// CPU time this thread has used, nanoseconds.
/// How long the calling thread has waited, runnable, for a CPU (nanoseconds, the second
/// field of /proc/thread-self/schedstat); 0 where the kernel does not keep it. Time a
/// thread was ready to run while other work held the CPUs.
pub fn thread_runqueue_wait_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|text| text.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

pub fn thread_cpu_ns() -> u64 {
    let mut spec = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut spec) };
    spec.tv_sec as u64 * 1_000_000_000 + spec.tv_nsec as u64
}

/// Opens `relative` beneath the directory `dir`, refusing any symbolic link on the way
/// and any escape (`openat2` with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
/// RESOLVE_NO_MAGICLINKS).
pub fn open_beneath(
    dir: &OwnedFd,
    relative: &Path,
    flags: libc::c_int,
    mode: u32,
) -> io::Result<OwnedFd> {
    let name = CString::new(relative.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the path"))?;
    // SAFETY: open_how is plain data.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    // openat2 refuses O_PATH with any flag but these few (open(2) ignores them).
    let extra = if flags & libc::O_PATH != 0 {
        libc::O_CLOEXEC
    } else {
        libc::O_CLOEXEC | libc::O_NOCTTY
    };
    how.flags = (flags | extra) as u64;
    how.mode = if flags & libc::O_CREAT != 0 {
        u64::from(mode)
    } else {
        0
    };
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: a live directory descriptor, a NUL-terminated name, a live open_how of the
    // stated size.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            name.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just opened for us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Creates directory `relative` beneath `dir` (its parent must exist there); an existing
/// directory is fine.
pub fn mkdir_beneath(dir: &OwnedFd, relative: &Path) -> io::Result<()> {
    let parent = relative.parent().filter(|p| !p.as_os_str().is_empty());
    let parent_fd = match parent {
        Some(parent) => open_beneath(dir, parent, libc::O_PATH | libc::O_DIRECTORY, 0)?,
        None => dir.try_clone()?,
    };
    let name = relative
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no name"))?;
    let name = CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the path"))?;
    // SAFETY: a live directory descriptor and a NUL-terminated name.
    let result = unsafe { libc::mkdirat(parent_fd.as_raw_fd(), name.as_ptr(), 0o755) };
    if result != 0 {
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::AlreadyExists {
            return Err(error);
        }
    }
    Ok(())
}

/// Reserves `len` bytes for a file up front, so a full disk shows before any data moves
/// and the file is not fragmented. File systems without `fallocate` are left as they are.
pub fn preallocate(fd: RawFd, len: u64) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: fallocate on a live descriptor with plain integer arguments.
    let result = unsafe { libc::fallocate(fd, 0, 0, len as libc::off_t) };
    if result != 0 {
        let error = io::Error::last_os_error();
        if matches!(
            error.raw_os_error(),
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)
        ) {
            return Ok(());
        }
        return Err(error);
    }
    Ok(())
}

/// Tells the kernel the bytes just written will not be read again soon: the page cache
/// stays free for the rest of the machine.
pub fn drop_cached(fd: RawFd, offset: u64, len: u64) {
    // SAFETY: plain integer arguments on a live descriptor; failure only costs cache.
    unsafe {
        libc::posix_fadvise(
            fd,
            offset as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        )
    };
}

/// Starts writing the bytes just written out to the disk without waiting for it: the
/// sync that makes them durable later finds them written, so the copy's last sync (on
/// its critical path) has one chunk left to write, not a journal interval's.
pub fn start_writeback(fd: RawFd, offset: u64, len: u64) {
    // SAFETY: plain integer arguments on a live descriptor; failure only means the later
    // sync writes these pages itself.
    unsafe {
        libc::sync_file_range(
            fd,
            offset as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        )
    };
}

/// Bytes free to an unprivileged user on the file system holding `path`.
pub fn free_bytes(path: &Path) -> Option<u64> {
    let name = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain data, filled by the call.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a live statvfs.
    if unsafe { libc::statvfs(name.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    Some(stat.f_bavail as u64 * stat.f_frsize as u64)
}

/// Whether `path` is on a file system kept in memory (tmpfs, ramfs): its reads come
/// from memory whatever the page cache holds.
pub fn memory_backed(path: &Path) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    let Ok(name) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs is plain data, filled by the call.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a live statfs.
    if unsafe { libc::statfs(name.as_ptr(), &mut stat) } != 0 {
        return false;
    }
    matches!(stat.f_type as i64, TMPFS_MAGIC | RAMFS_MAGIC)
}

fn c_name(name: &std::ffi::OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the name"))
}

/// Opens `name` (one component) in the directory `dir`, never following a symbolic link
/// there.
pub fn open_at(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    flags: libc::c_int,
    mode: u32,
) -> io::Result<std::fs::File> {
    let name = c_name(name)?;
    // SAFETY: a live directory descriptor and a NUL-terminated name.
    let fd = check(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NOCTTY,
            mode as libc::c_uint,
        )
    })?;
    // SAFETY: a descriptor the kernel just opened for us.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// Renames `from` to `to`, both in the directory `dir`.
pub fn rename_at(dir: &OwnedFd, from: &std::ffi::OsStr, to: &std::ffi::OsStr) -> io::Result<()> {
    let (from, to) = (c_name(from)?, c_name(to)?);
    // SAFETY: a live directory descriptor and NUL-terminated names.
    check(unsafe { libc::renameat(dir.as_raw_fd(), from.as_ptr(), dir.as_raw_fd(), to.as_ptr()) })
        .map(|_| ())
}

/// Removes the file `name` in the directory `dir`; a missing one is fine.
pub fn unlink_at(dir: &OwnedFd, name: &std::ffi::OsStr) -> io::Result<()> {
    let name = c_name(name)?;
    // SAFETY: a live directory descriptor and a NUL-terminated name.
    let result = unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) };
    if result != 0 {
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::NotFound {
            return Err(error);
        }
    }
    Ok(())
}

/// Opens a directory by an ordinary path (the client's own side).
pub fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    let name = c_name(path.as_os_str())?;
    // SAFETY: a NUL-terminated path.
    let fd = check(unsafe {
        libc::open(
            name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: a descriptor the kernel just opened for us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends this socket's IPv4 datagrams without a UDP checksum (SO_NO_CHECK): a host without
/// checksum offload saves the software sum, and corruption on the way is left to the
/// chunk hashes. IPv6 requires the checksum; the option is refused there.
pub fn no_udp_checksum(socket: &Socket) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: setsockopt with an int option on a live socket.
    check(unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_NO_CHECK,
            (&on as *const libc::c_int).cast(),
            4,
        )
    })
    .map(|_| ())
}

/// Marks every packet `socket` sends with the DSCP `dscp` (the ECN field left Not-ECT):
/// IP_TOS, and on an IPv6 socket IPV6_TCLASS too (one that reaches an IPv4-mapped
/// address sends through the IPv4 code).
pub fn set_dscp<S: std::os::fd::AsFd>(socket: &S, dscp: u8) -> io::Result<()> {
    set_marks(socket, dscp, false)
}

/// As [`set_dscp`], with ECT(0) in the ECN field when `ect` (a UDP socket's datagrams:
/// a copy's data with `--ecn`).
pub fn set_marks<S: std::os::fd::AsFd>(socket: &S, dscp: u8, ect: bool) -> io::Result<()> {
    let socket = socket2::SockRef::from(socket);
    let tos = (u32::from(dscp & 0x3f) << 2) | if ect { 0b10 } else { 0 };
    if socket.domain()? == Domain::IPV6 {
        socket.set_tclass_v6(tos)?;
        let _ = socket.set_tos(tos);
        Ok(())
    } else {
        socket.set_tos(tos)
    }
}

/// Bytes the file `name` in `dir` holds on disk (its allocated blocks), without following
/// a symbolic link; an error when there is no such file.
pub fn allocated_at(dir: &OwnedFd, name: &std::ffi::OsStr) -> io::Result<u64> {
    let name = c_name(name)?;
    // SAFETY: an all-zero stat is a valid out-buffer.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a live directory descriptor, a NUL-terminated name and a live stat buffer.
    check(unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut stat,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(u64::try_from(stat.st_blocks).unwrap_or(0) * 512)
}

/// Bytes an unprivileged writer may still put on the file system holding the open
/// directory `dir` (fstatvfs: available blocks times the fragment size).
pub fn free_bytes_at(dir: &OwnedFd) -> io::Result<u64> {
    // SAFETY: an all-zero statvfs is a valid out-buffer.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a live descriptor and a live statvfs buffer.
    check(unsafe { libc::fstatvfs(dir.as_raw_fd(), &mut stat) })?;
    Ok((stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(lengths: &[usize], gso: bool) -> Vec<usize> {
        let mut out = Vec::new();
        runs_of(lengths.iter().copied(), gso, &mut out);
        out
    }

    #[test]
    fn equal_datagrams_go_in_runs_a_shorter_one_ends() {
        assert_eq!(runs(&[1400; 5], true), vec![5]);
        assert_eq!(runs(&[1400, 1400, 300, 1400], true), vec![3, 1]);
        assert_eq!(runs(&[300, 1400, 1400], true), vec![1, 2]);
        assert_eq!(runs(&[1400; 5], false), vec![1; 5]);
        assert!(runs(&[], true).is_empty());
    }

    #[test]
    fn a_run_stays_within_the_kernels_limits() {
        // 64 segments at most.
        assert_eq!(runs(&[100; 130], true), vec![64, 64, 2]);
        // 65,000 bytes at most: 43 of 1,500.
        assert_eq!(runs(&[1500; 50], true), vec![43, 7]);
    }

    /// A connected sender and its receiver on loopback.
    fn pair() -> (Socket, Socket) {
        let receiver = udp_socket("127.0.0.1:0".parse().unwrap()).unwrap();
        let sender = udp_socket("127.0.0.1:0".parse().unwrap()).unwrap();
        sender.connect(&receiver.local_addr().unwrap()).unwrap();
        (sender, receiver)
    }

    /// 100 datagrams: an 8-byte header naming each and a payload of its own bytes, the
    /// last one shorter.
    fn datagrams() -> Vec<([u8; 8], Vec<u8>)> {
        (0..100u64)
            .map(|i| {
                let len = if i == 99 { 300 } else { 1200 };
                (i.to_be_bytes(), vec![i as u8; len])
            })
            .collect()
    }

    /// Reads every datagram that arrived, each as the kernel delivered it.
    fn arrived(receiver: &Socket, count: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buffer = [std::mem::MaybeUninit::<u8>::uninit(); 2048];
        while out.len() < count {
            wait(receiver.as_raw_fd(), libc::POLLIN, Some(2_000_000_000)).unwrap();
            let n = receiver.recv(&mut buffer).unwrap();
            // SAFETY: recv initialised the first n bytes.
            out.push(
                buffer[..n]
                    .iter()
                    .map(|b| unsafe { b.assume_init() })
                    .collect(),
            );
        }
        out
    }

    fn send_and_check(sender: &Socket, receiver: &Socket) -> SendBatch {
        let all = datagrams();
        let views: Vec<(&[u8], &[u8])> = all.iter().map(|(h, p)| (&h[..], &p[..])).collect();
        let mut batch = SendBatch::default();
        assert_eq!(batch.send(sender.as_raw_fd(), &views).unwrap(), 100);
        let got = arrived(receiver, 100);
        for (i, (datagram, (header, payload))) in got.iter().zip(&all).enumerate() {
            assert_eq!(datagram.len(), 8 + payload.len(), "datagram {i}");
            assert_eq!(&datagram[..8], header, "datagram {i}");
            assert_eq!(&datagram[8..], &payload[..], "datagram {i}");
        }
        batch
    }

    #[test]
    fn segmented_runs_arrive_as_the_datagrams_they_were() {
        let (sender, receiver) = pair();
        let batch = send_and_check(&sender, &receiver);
        // Loopback segments (checksum offload): the runs went whole.
        assert!(batch.segmenting());
    }

    #[test]
    fn a_run_leaves_as_one_message() {
        // A receiver that takes segmented datagrams whole (UDP_GRO) is handed loopback's
        // unsegmented run as one: the proof that it left as one.
        let (sender, receiver) = pair();
        let on: libc::c_int = 1;
        // SAFETY: setsockopt with an int option on a live socket.
        check(unsafe {
            libc::setsockopt(
                receiver.as_raw_fd(),
                libc::SOL_UDP,
                libc::UDP_GRO,
                (&on as *const libc::c_int).cast(),
                4,
            )
        })
        .unwrap();
        let header = [7u8; 8];
        let payload = vec![1u8; 1200];
        let views = vec![(&header[..], &payload[..]); 10];
        let mut batch = SendBatch::default();
        assert_eq!(batch.send(sender.as_raw_fd(), &views).unwrap(), 10);
        let mut buffer = vec![std::mem::MaybeUninit::<u8>::uninit(); 65_536];
        wait(receiver.as_raw_fd(), libc::POLLIN, Some(2_000_000_000)).unwrap();
        assert_eq!(receiver.recv(&mut buffer).unwrap(), 10 * 1208);
    }

    #[test]
    fn a_coalescing_receiver_splits_each_run_into_its_datagrams() {
        let (sender, receiver) = pair();
        receive_gro(&receiver, true).unwrap();
        receive_tos(&receiver).unwrap();
        set_marks(&sender, 46, true).unwrap();
        let all = datagrams();
        let views: Vec<(&[u8], &[u8])> = all.iter().map(|(h, p)| (&h[..], &p[..])).collect();
        assert_eq!(
            SendBatch::default()
                .send(sender.as_raw_fd(), &views)
                .unwrap(),
            100
        );
        let mut batch = RecvBatch::coalescing(8, true);
        let mut got = Vec::new();
        let mut messages = 0;
        while got.len() < 100 {
            wait(receiver.as_raw_fd(), libc::POLLIN, Some(2_000_000_000)).unwrap();
            let n = batch.receive(receiver.as_raw_fd()).unwrap();
            messages += batch.messages;
            for i in 0..n {
                assert_eq!(batch.tos(i), Some(46 << 2 | 0b10), "datagram {}", got.len());
                got.push(batch.get(i).to_vec());
            }
        }
        // 99 datagrams of 1,208 bytes in runs of 53 (64,000 bytes), then the short one.
        assert!(messages <= 3, "{messages} messages for 100 datagrams");
        for (i, (datagram, (header, payload))) in got.iter().zip(&all).enumerate() {
            assert_eq!(&datagram[..8], header, "datagram {i}");
            assert_eq!(&datagram[8..], &payload[..], "datagram {i}");
        }
        // Turned off, datagrams come one a message again.
        receive_gro(&receiver, false).unwrap();
        assert_eq!(
            SendBatch::default()
                .send(sender.as_raw_fd(), &views[..10])
                .unwrap(),
            10
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(batch.receive(receiver.as_raw_fd()).unwrap(), 8);
        assert!(batch.full());
    }

    #[test]
    fn a_socket_that_cannot_segment_sends_a_datagram_a_message() {
        // Without a UDP checksum the kernel refuses a segmented send (EINVAL).
        let (sender, receiver) = pair();
        no_udp_checksum(&sender).unwrap();
        let batch = send_and_check(&sender, &receiver);
        assert!(!batch.segmenting());
    }
}
