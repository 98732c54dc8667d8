//! The socket calls that carry a datagram's metadata: the TOS (DSCP and ECN) and TTL it
//! arrived with and the kernel's time of arrival (`recvmsg` with IP_RECVTOS, IP_RECVTTL,
//! their IPv6 twins and SO_TIMESTAMPNS), and a TOS to send one with (`sendmsg` with
//! IP_TOS or IPV6_TCLASS). std's UdpSocket has none of these; socket2 has no control
//! messages on receive, so the few calls are written here.

// A socket loop reads the clock; the sans-IO parts (wire, reflector, tally) take it.
#![allow(clippy::disallowed_methods)]

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// What the kernel said of a datagram besides its bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Meta {
    pub tos: Option<u8>,
    pub ttl: Option<u8>,
    /// When it arrived, Unix nanoseconds (CLOCK_REALTIME, taken by the kernel).
    pub kernel_unix_ns: Option<i128>,
}

/// An int socket option socket2 does not have (SO_TIMESTAMPNS, IP_RECVTTL,
/// IPV6_RECVHOPLIMIT); the others go through socket2.
fn setopt(fd: RawFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: the value is a live i32 of the size given.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Asks the kernel for each datagram's TOS, TTL and arrival time. An IPv6 socket asks
/// for both families' (it receives IPv4 as mapped addresses).
pub fn enable_meta<S: AsRawFd + std::os::fd::AsFd>(socket: &S, v6: bool) -> io::Result<()> {
    let fd = socket.as_raw_fd();
    let options = socket2::SockRef::from(socket);
    setopt(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
    let v4 = [
        options.set_recv_tos(true),
        setopt(fd, libc::IPPROTO_IP, libc::IP_RECVTTL, 1),
    ];
    if v6 {
        options.set_recv_tclass_v6(true)?;
        setopt(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT, 1)?;
    } else {
        for result in v4 {
            result?;
        }
    }
    Ok(())
}

/// Sets the TOS (or traffic class) every datagram of the socket leaves with, and a TTL of
/// 255 (RFC 8762 §4.2: the reflector reports the TTL it saw, which counts the hops).
pub fn set_marks(socket: &impl std::os::fd::AsFd, v6: bool, tos: u8) -> io::Result<()> {
    let options = socket2::SockRef::from(socket);
    if v6 {
        options.set_tclass_v6(u32::from(tos))?;
        options.set_unicast_hops_v6(255)?;
        // IPv4 through a dual-stack socket.
        let _ = options.set_tos(u32::from(tos));
        let _ = options.set_ttl(255);
    } else {
        options.set_tos(u32::from(tos))?;
        options.set_ttl(255)?;
    }
    Ok(())
}

fn to_sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is a valid value of it.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than, and aligned for, sockaddr_in.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

fn from_sockaddr(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin: &libc::sockaddr_in =
                unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6: &libc::sockaddr_in6 =
                unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Room for the control messages asked for: a timespec and four integers, with headers.
const CONTROL: usize = 256;

/// Receives one datagram without waiting: its length, source and metadata. A datagram
/// longer than `buf` reports its whole length (MSG_TRUNC), so the caller can refuse it.
pub fn recv(socket: &impl AsRawFd, buf: &mut [u8]) -> io::Result<(usize, SocketAddr, Meta)> {
    let fd = socket.as_raw_fd();
    // SAFETY: zeroed storage and header are valid; every pointer below points into
    // locals that outlive the call, with the lengths given.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut control = [0u64; CONTROL / 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut storage as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = CONTROL as _;
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT | libc::MSG_TRUNC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let from = from_sockaddr(&storage)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no source address"))?;
    // SAFETY: the kernel filled this header's control buffer within msg_controllen.
    let meta = unsafe { read_meta(&msg) };
    Ok((n as usize, from, meta))
}

/// Sends `buf` to `to`, with `tos` on this datagram alone where given (a control
/// message; the socket's own TOS otherwise).
pub fn send(
    socket: &impl AsRawFd,
    buf: &[u8],
    to: SocketAddr,
    tos: Option<u8>,
    v6: bool,
) -> io::Result<usize> {
    let fd = socket.as_raw_fd();
    let (mut storage, len) = to_sockaddr(to);
    let mut iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut control = [0u64; 4];
    // SAFETY: as in `recv`: every pointer is into a local that outlives the call; the
    // one control message written fits the buffer (CMSG_SPACE of an int is 24 octets).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut storage as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = len;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(tos) = tos {
        let mapped_v4 = matches!(to.ip(), IpAddr::V6(ip) if ip.to_ipv4_mapped().is_some());
        let (level, kind) = if v6 && !mapped_v4 {
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
        } else {
            (libc::IPPROTO_IP, libc::IP_TOS)
        };
        unsafe {
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<i32>() as u32) as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = level;
            (*cmsg).cmsg_type = kind;
            (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<i32>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<i32>(), i32::from(tos));
        }
    }
    let n = unsafe { libc::sendmsg(fd, &msg, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Waits until the socket has a datagram or `timeout` passes; true when readable.
pub fn wait_readable(socket: &impl AsRawFd, timeout: Duration) -> io::Result<bool> {
    let mut poll = libc::pollfd {
        fd: socket.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one pollfd, a live timespec, no signal mask.
    let rc = unsafe { libc::ppoll(&mut poll, 1, &ts, std::ptr::null()) };
    match rc {
        rc if rc > 0 => Ok(true),
        0 => Ok(false),
        _ => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            }
        }
    }
}

/// Datagrams received a batch at a time (`recvmmsg`): one system call for up to as many
/// datagrams as the batch holds, each with its source and metadata. The reflector reads
/// this way: at 200,000 probes a second, a call each is most of a core.
pub struct ReceiveBatch {
    buffers: Vec<Vec<u8>>,
    names: Vec<libc::sockaddr_storage>,
    controls: Vec<[u64; CONTROL / 8]>,
    iovs: Vec<libc::iovec>,
    headers: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers in the headers point only into the batch's own buffers, which
// move with it (their heap allocations do not move).
unsafe impl Send for ReceiveBatch {}

impl ReceiveBatch {
    /// A batch of `count` buffers of `size` octets.
    pub fn new(count: usize, size: usize) -> ReceiveBatch {
        let mut batch = ReceiveBatch {
            buffers: vec![vec![0u8; size]; count],
            // SAFETY: zeroed sockaddr_storage and mmsghdr are valid values.
            names: vec![unsafe { std::mem::zeroed() }; count],
            controls: vec![[0u64; CONTROL / 8]; count],
            iovs: Vec::with_capacity(count),
            headers: Vec::with_capacity(count),
        };
        for i in 0..count {
            batch.iovs.push(libc::iovec {
                iov_base: batch.buffers[i].as_mut_ptr().cast(),
                iov_len: size,
            });
        }
        for i in 0..count {
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_name = (&mut batch.names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_iov = &mut batch.iovs[i];
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = batch.controls[i].as_mut_ptr().cast();
            batch.headers.push(h);
        }
        batch
    }

    /// Receives what is waiting, without waiting: how many datagrams (0 when none).
    pub fn recv(&mut self, socket: &impl AsRawFd) -> io::Result<usize> {
        self.recv_with(socket, libc::MSG_DONTWAIT)
    }

    /// As [`recv`](Self::recv), going on past an interrupted call and an ICMP error for
    /// an earlier answer (nothing is to be done for it): 0 when nothing is waiting.
    pub fn recv_waiting(&mut self, socket: &impl AsRawFd) -> io::Result<usize> {
        loop {
            match self.recv(socket) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => continue,
                other => return other,
            }
        }
    }

    /// Takes the transmit times waiting on the socket's error queue, a batch a call, into
    /// `out` as [`tx_timestamps`] does.
    pub fn tx_timestamps(
        &mut self,
        socket: &impl AsRawFd,
        out: &mut Vec<(u32, i128)>,
    ) -> io::Result<()> {
        loop {
            let n = self.recv_with(socket, libc::MSG_DONTWAIT | libc::MSG_ERRQUEUE)?;
            for h in &self.headers[..n] {
                // SAFETY: the kernel filled this header's control buffer.
                if let Some(stamp) = unsafe { read_tx_stamp(&h.msg_hdr) } {
                    out.push(stamp);
                }
            }
            if n < self.headers.len() {
                return Ok(());
            }
        }
    }

    fn recv_with(&mut self, socket: &impl AsRawFd, flags: i32) -> io::Result<usize> {
        for h in &mut self.headers {
            h.msg_hdr.msg_namelen =
                std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_hdr.msg_controllen = CONTROL as _;
            h.msg_hdr.msg_flags = 0;
            h.msg_len = 0;
        }
        // SAFETY: every header points into this batch's buffers, with their lengths.
        let n = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                self.headers.as_mut_ptr(),
                self.headers.len() as u32,
                flags,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(0)
            } else {
                Err(e)
            };
        }
        Ok(n as usize)
    }

    /// Datagram `i` of the last `recv`: its octets (a datagram cut short by the buffer
    /// says so by `truncated`), its source and its metadata.
    pub fn datagram(&self, i: usize) -> Option<(&[u8], bool, SocketAddr, Meta)> {
        let h = &self.headers[i];
        let len = (h.msg_len as usize).min(self.buffers[i].len());
        let truncated = h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        let from = from_sockaddr(&self.names[i])?;
        // SAFETY: the kernel filled this header's control buffer within msg_controllen.
        let meta = unsafe { read_meta(&h.msg_hdr) };
        Some((&self.buffers[i][..len], truncated, from, meta))
    }
}

/// Reads the TOS, TTL and arrival time from a received message's control messages.
///
/// # Safety
/// `msg` is a header the kernel filled in by a receive call, its control buffer valid for
/// `msg_controllen`.
unsafe fn read_meta(msg: &libc::msghdr) -> Meta {
    let mut meta = Meta::default();
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(msg) };
    while !cmsg.is_null() {
        let (level, kind, data) =
            unsafe { ((*cmsg).cmsg_level, (*cmsg).cmsg_type, libc::CMSG_DATA(cmsg)) };
        let int = || unsafe { std::ptr::read_unaligned(data.cast::<i32>()) };
        match (level, kind) {
            (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS) => {
                let ts = unsafe { std::ptr::read_unaligned(data.cast::<libc::timespec>()) };
                meta.kernel_unix_ns =
                    Some(i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec));
            }
            (libc::IPPROTO_IP, libc::IP_TOS) => meta.tos = Some(unsafe { *data }),
            (libc::IPPROTO_IP, libc::IP_TTL) => meta.ttl = Some(int() as u8),
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => meta.tos = Some(int() as u8),
            (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT) => meta.ttl = Some(int() as u8),
            _ => {}
        }
        cmsg = unsafe { libc::CMSG_NXTHDR(msg, cmsg) };
    }
    meta
}

/// UDP generic segmentation offload's control message (linux/udp.h): one send carries
/// several datagrams of one size to one destination.
const UDP_SEGMENT: i32 = 103;
/// The most datagrams one segmented send may carry, and its most octets.
const MAX_SEGMENTS: usize = 64;
const MAX_SEGMENTED_BYTES: usize = 65_000;

/// Whether the kernel takes segmented UDP sends on this socket.
pub fn supports_segmentation(socket: &impl AsRawFd) -> bool {
    setopt(socket.as_raw_fd(), libc::SOL_UDP, UDP_SEGMENT, 0).is_ok()
}

/// Answers sent a batch at a time (`sendmmsg`), each to its own address with its own TOS.
/// Answers in a row to one address, of one size and TOS (a busy sender's probes) leave in
/// one segmented send where the kernel takes it: the route, the headers and the copies
/// are made once for them.
pub struct SendBatch {
    buffers: Vec<Vec<u8>>,
    lens: Vec<usize>,
    addrs: Vec<Option<SocketAddr>>,
    names: Vec<(libc::sockaddr_storage, libc::socklen_t)>,
    tos: Vec<Option<u8>>,
    /// A transmit-timestamp id for this datagram alone (SCM_TS_OPT_ID).
    ids: Vec<Option<u32>>,
    /// Whether each datagram of the last `send` left.
    left: Vec<bool>,
    controls: Vec<[u64; 12]>,
    iovs: Vec<libc::iovec>,
    headers: Vec<libc::mmsghdr>,
    /// The answers each header carries.
    carried: Vec<usize>,
    count: usize,
    v6: bool,
    segment: bool,
    /// Messages of the last `send` refused for a reason of their own (not a full
    /// buffer or an ICMP error), and the last such error: they cost only themselves.
    failed: usize,
    last_failure: Option<io::Error>,
}

// SAFETY: as for ReceiveBatch: the pointers are rebuilt into the batch's own buffers
// before each send.
unsafe impl Send for SendBatch {}

impl SendBatch {
    /// Room for `count` answers of `size` octets; `segment`: send runs of like answers
    /// segmented ([`supports_segmentation`]).
    pub fn new(count: usize, size: usize, v6: bool, segment: bool) -> SendBatch {
        SendBatch {
            buffers: vec![Vec::with_capacity(size); count],
            lens: vec![0; count],
            addrs: vec![None; count],
            // SAFETY: zeroed sockaddr_storage is a valid value.
            names: vec![(unsafe { std::mem::zeroed() }, 0); count],
            tos: vec![None; count],
            ids: vec![None; count],
            left: vec![false; count],
            controls: vec![[0u64; 12]; count],
            iovs: Vec::with_capacity(count),
            headers: Vec::with_capacity(count),
            carried: Vec::with_capacity(count),
            count: 0,
            v6,
            segment,
            failed: 0,
            last_failure: None,
        }
    }

    /// The buffer of the next answer, to be filled and then `push`ed; `None` when full.
    pub fn next_buffer(&mut self) -> Option<&mut Vec<u8>> {
        self.buffers.get_mut(self.count)
    }

    /// Adds the answer written in `next_buffer`: its length, where and with what TOS.
    pub fn push(&mut self, len: usize, to: SocketAddr, tos: Option<u8>) {
        self.push_stamped(len, to, tos, None);
    }

    /// As [`push`](Self::push), and where `id` is given the kernel's time of this
    /// datagram's leaving comes back on the error queue under that id (SCM_TS_OPT_ID,
    /// Linux 6.13; the socket has [`enable_tx_timestamps`]). Such a datagram is never
    /// sent segmented.
    pub fn push_stamped(&mut self, len: usize, to: SocketAddr, tos: Option<u8>, id: Option<u32>) {
        let i = self.count;
        self.lens[i] = len;
        self.addrs[i] = Some(to);
        self.names[i] = to_sockaddr(to);
        self.tos[i] = tos;
        self.ids[i] = id;
        self.count += 1;
    }

    /// Whether datagram `i` (in the order pushed) left in the last `send`.
    pub fn left(&self, i: usize) -> bool {
        self.left.get(i).copied().unwrap_or(false)
    }

    /// Writes header `h`'s control messages (a TOS, a segment size) into control `c`.
    fn control(&mut self, c: usize, first: usize, segments: usize) -> usize {
        let control = &mut self.controls[c];
        *control = [0; 12];
        let mut used = 0;
        let mapped = matches!(self.addrs[first].map(|a| a.ip()), Some(IpAddr::V6(ip)) if ip.to_ipv4_mapped().is_some());
        // SAFETY: three control messages of at most 24 octets each fit the 96-octet buffer.
        unsafe {
            let base = control.as_mut_ptr().cast::<u8>();
            if let Some(tos) = self.tos[first] {
                // A destination mapped into IPv6 is IPv4 on the wire: its TOS is IP_TOS.
                let (level, kind) = if self.v6 && !mapped {
                    (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
                } else {
                    (libc::IPPROTO_IP, libc::IP_TOS)
                };
                let header = base.add(used).cast::<libc::cmsghdr>();
                (*header).cmsg_level = level;
                (*header).cmsg_type = kind;
                (*header).cmsg_len = libc::CMSG_LEN(4) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<i32>(), i32::from(tos));
                used += libc::CMSG_SPACE(4) as usize;
            }
            if segments > 1 {
                let header = base.add(used).cast::<libc::cmsghdr>();
                (*header).cmsg_level = libc::SOL_UDP;
                (*header).cmsg_type = UDP_SEGMENT;
                (*header).cmsg_len = libc::CMSG_LEN(2) as _;
                std::ptr::write_unaligned(
                    libc::CMSG_DATA(header).cast::<u16>(),
                    self.lens[first] as u16,
                );
                used += libc::CMSG_SPACE(2) as usize;
            }
            if let Some(id) = self.ids[first] {
                let header = base.add(used).cast::<libc::cmsghdr>();
                (*header).cmsg_level = libc::SOL_SOCKET;
                (*header).cmsg_type = SCM_TS_OPT_ID;
                (*header).cmsg_len = libc::CMSG_LEN(4) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<u32>(), id);
                used += libc::CMSG_SPACE(4) as usize;
            }
        }
        used
    }

    /// The messages of the last `send` that failed for a reason of their own, and the
    /// last such error (none when every message left or met only a full buffer or an
    /// ICMP error).
    pub fn failures(&self) -> Option<(usize, &io::Error)> {
        self.last_failure.as_ref().map(|e| (self.failed, e))
    }

    /// Sends every answer pushed; how many left. The batch is empty afterwards. A
    /// message the kernel refuses costs only its own datagrams: the rest of the batch
    /// still goes ([`failures`](Self::failures) tells). An error only when nothing could
    /// be sent at all for a reason of the socket's.
    pub fn send(&mut self, socket: &impl AsRawFd) -> io::Result<usize> {
        let count = std::mem::take(&mut self.count);
        self.left.iter_mut().for_each(|l| *l = false);
        self.failed = 0;
        self.last_failure = None;
        if count == 0 {
            return Ok(0);
        }
        self.build_messages(count);
        let messages = self.headers.len();
        let delivered = self.transmit(socket);
        if delivered == 0 && self.failed == messages {
            if let Some(e) = self.last_failure.take() {
                self.failed = 0;
                return Err(e);
            }
        }
        Ok(delivered)
    }

    /// The batch's `count` answers as messages: one a datagram, or a run of answers of
    /// one size to one destination with one TOS as a single GSO message where the socket
    /// segments.
    fn build_messages(&mut self, count: usize) {
        self.iovs.clear();
        for i in 0..count {
            self.iovs.push(libc::iovec {
                iov_base: self.buffers[i].as_mut_ptr().cast(),
                iov_len: self.lens[i],
            });
        }
        self.headers.clear();
        self.carried.clear();
        let mut i = 0;
        while i < count {
            let mut j = i + 1;
            if self.segment && self.ids[i].is_none() {
                while j < count
                    && j - i < MAX_SEGMENTS
                    && (j - i + 1) * self.lens[i] <= MAX_SEGMENTED_BYTES
                    && self.lens[j] == self.lens[i]
                    && self.addrs[j] == self.addrs[i]
                    && self.tos[j] == self.tos[i]
                    && self.ids[j].is_none()
                {
                    j += 1;
                }
            }
            let c = self.headers.len();
            let used = self.control(c, i, j - i);
            // SAFETY: a zeroed mmsghdr is valid; its pointers go into this batch's
            // vectors, which are not touched until the call returns.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_name = (&mut self.names[i].0 as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_namelen = self.names[i].1;
            h.msg_hdr.msg_iov = &mut self.iovs[i];
            h.msg_hdr.msg_iovlen = (j - i) as _;
            if used > 0 {
                h.msg_hdr.msg_control = self.controls[c].as_mut_ptr().cast();
                h.msg_hdr.msg_controllen = used as _;
            }
            self.headers.push(h);
            self.carried.push(j - i);
            i = j;
        }
    }

    /// Sends the built messages, on past a message the kernel refuses; how many answers
    /// left.
    fn transmit(&mut self, socket: &impl AsRawFd) -> usize {
        let messages = self.headers.len();
        let (mut at, mut delivered) = (0, 0);
        while at < messages {
            // SAFETY: as above.
            let n = unsafe {
                libc::sendmmsg(
                    socket.as_raw_fd(),
                    self.headers[at..].as_mut_ptr(),
                    (messages - at) as u32,
                    libc::MSG_DONTWAIT,
                )
            };
            if n <= 0 {
                let e = io::Error::last_os_error();
                // A full buffer, or one destination's ICMP error: that message's answers
                // are dropped, the rest go on.
                match e.raw_os_error() {
                    Some(
                        libc::EAGAIN
                        | libc::ENOBUFS
                        | libc::ECONNREFUSED
                        | libc::EHOSTUNREACH
                        | libc::ENETUNREACH
                        | libc::EPERM,
                    ) => {
                        at += 1;
                        continue;
                    }
                    _ => {
                        // This message alone (port 0, an address the kernel will not
                        // send to): skipped, the rest of the batch goes on.
                        self.failed += 1;
                        self.last_failure = Some(e);
                        at += 1;
                        continue;
                    }
                }
            }
            let carried: usize = self.carried[at..at + n as usize].iter().sum();
            let first: usize = self.carried[..at].iter().sum();
            self.left[first..first + carried]
                .iter_mut()
                .for_each(|l| *l = true);
            delivered += carried;
            at += n as usize;
        }
        delivered
    }
}

/// SO_TIMESTAMPING and its control message (asm-generic/socket.h; x86 and arm alike).
const SO_TIMESTAMPING: i32 = 37;
/// A send's own transmit-timestamp id (asm-generic/socket.h, Linux 6.13).
const SCM_TS_OPT_ID: i32 = 81;

/// Whether this kernel takes a transmit-timestamp id per send (SCM_TS_OPT_ID, Linux
/// 6.13): then datagrams to many destinations can share one socket and still have their
/// times of leaving told apart.
pub fn has_send_timestamp_ids() -> bool {
    // SAFETY: uname fills a zeroed utsname.
    let mut name: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut name) } != 0 {
        return false;
    }
    let release: String = name
        .release
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8 as char)
        .collect();
    kernel_at_least(&release, (6, 13))
}

/// Whether a kernel release string ("6.18.44-foo") is at least `major.minor`.
pub fn kernel_at_least(release: &str, (major, minor): (u32, u32)) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(a), Some(b)) => (a, b) >= (major, minor),
        _ => false,
    }
}

/// Asks for the kernel's time of each datagram's leaving (SO_TIMESTAMPING, software, one
/// id per send, no copy of the datagram), read back from the error queue: a probe's T1 as
/// the kernel sent it, not as the sender's loop was about to.
pub fn enable_tx_timestamps(socket: &impl AsRawFd) -> io::Result<()> {
    let flags = libc::SOF_TIMESTAMPING_TX_SOFTWARE
        | libc::SOF_TIMESTAMPING_SOFTWARE
        | libc::SOF_TIMESTAMPING_OPT_ID
        | libc::SOF_TIMESTAMPING_OPT_TSONLY;
    setopt(
        socket.as_raw_fd(),
        libc::SOL_SOCKET,
        SO_TIMESTAMPING,
        flags as i32,
    )
}

/// The transmit times waiting on the error queue: (the send's id, counted from 0 per
/// socket unless the send gave its own; Unix nanoseconds).
pub fn tx_timestamps(socket: &impl AsRawFd, out: &mut Vec<(u32, i128)>) -> io::Result<()> {
    loop {
        let mut data = [0u8; 64];
        let mut control = [0u64; CONTROL / 8];
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: data.len(),
        };
        // SAFETY: a zeroed msghdr is valid; its pointers go into locals that outlive the
        // call, with their lengths.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = CONTROL as _;
        let n = unsafe {
            libc::recvmsg(
                socket.as_raw_fd(),
                &mut msg,
                libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(())
            } else {
                Err(e)
            };
        }
        // SAFETY: the kernel filled this header's control buffer.
        if let Some(stamp) = unsafe { read_tx_stamp(&msg) } {
            out.push(stamp);
        }
    }
}

/// A transmit time's id and Unix nanoseconds, from an error-queue message's control
/// messages.
///
/// # Safety
/// As [`read_meta`].
unsafe fn read_tx_stamp(msg: &libc::msghdr) -> Option<(u32, i128)> {
    let (mut when, mut id) = (None, None);
    // SAFETY: the CMSG_* macros walk the control buffer the kernel filled.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            let data = libc::CMSG_DATA(cmsg);
            match ((*cmsg).cmsg_level, (*cmsg).cmsg_type) {
                (libc::SOL_SOCKET, SO_TIMESTAMPING) => {
                    // struct scm_timestamping: three timespecs, the first software.
                    let ts = std::ptr::read_unaligned(data.cast::<libc::timespec>());
                    if ts.tv_sec != 0 || ts.tv_nsec != 0 {
                        when = Some(i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec));
                    }
                }
                (libc::IPPROTO_IP, libc::IP_RECVERR) | (libc::IPPROTO_IPV6, libc::IPV6_RECVERR) => {
                    let err = std::ptr::read_unaligned(data.cast::<libc::sock_extended_err>());
                    if err.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING {
                        id = Some(err.ee_data);
                    }
                }
                _ => {}
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    Some((id?, when?))
}
