//! Linux system calls the emulator's drivers need and no maintained crate wraps: AF_PACKET
//! sockets bound to one interface (promiscuous, own transmissions ignored, qdisc
//! bypassed), batched send, interface facts by ioctl, segmentation offloads
//! switched off by the ethtool ioctl (the lab must not depend on the ethtool program), and
//! running a closure inside a named network namespace.

// A driver: the clock and sleeping are its job (the core modules stay sans-IO).
#![allow(clippy::disallowed_methods)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const ETH_P_ALL: u16 = 0x0003;
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
const PACKET_MR_PROMISC: u16 = 1;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_VNET_HDR: libc::c_int = 15;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// `sll_pkttype` of a frame this host sent.
pub const PACKET_OUTGOING: u8 = 4;

#[repr(C)]
struct PacketMreq {
    mr_ifindex: libc::c_int,
    mr_type: u16,
    mr_alen: u16,
    mr_address: [u8; 8],
}

/// `struct ifreq` with its union read as an int (SIOCGIFMTU, SIOCGIFFLAGS).
#[repr(C)]
struct IfReqInt {
    name: [libc::c_char; libc::IFNAMSIZ],
    value: libc::c_int,
    _pad: [u8; 20],
}

/// `struct ifreq` with its union read as a pointer (SIOCETHTOOL).
#[repr(C)]
struct IfReqPtr {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

fn check(result: libc::c_int) -> io::Result<libc::c_int> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

fn ifname(name: &str) -> io::Result<[libc::c_char; libc::IFNAMSIZ]> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface names are 1 to 15 bytes",
        ));
    }
    let mut out = [0 as libc::c_char; libc::IFNAMSIZ];
    for (o, b) in out.iter_mut().zip(name.bytes()) {
        *o = b as libc::c_char;
    }
    Ok(out)
}

/// The index of interface `name` in this thread's network namespace; `None` when there
/// is no such interface.
pub fn interface_index(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    // SAFETY: a valid NUL-terminated string.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (index != 0).then_some(index)
}

fn control_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket call; the descriptor is owned at once.
    let fd =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: fd is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn ioctl_int(name: &str, request: libc::c_ulong) -> io::Result<libc::c_int> {
    let socket = control_socket()?;
    let mut req = IfReqInt {
        name: ifname(name)?,
        value: 0,
        _pad: [0; 20],
    };
    // SAFETY: req is a properly sized ifreq for these requests.
    check(unsafe { libc::ioctl(socket.as_raw_fd(), request as _, &mut req) })?;
    Ok(req.value)
}

/// The interface's MTU.
pub fn interface_mtu(name: &str) -> io::Result<usize> {
    ioctl_int(name, libc::SIOCGIFMTU).map(|m| m.max(0) as usize)
}

/// Whether the interface is administratively up.
pub fn interface_up(name: &str) -> io::Result<bool> {
    ioctl_int(name, libc::SIOCGIFFLAGS).map(|f| f & libc::IFF_UP != 0)
}

#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// ethtool's legacy "set" commands for the offloads that merge or split frames and that
/// leave checksums to hardware.
const ETHTOOL_SRXCSUM: u32 = 0x15;
const ETHTOOL_STXCSUM: u32 = 0x17;
const ETHTOOL_SSG: u32 = 0x19;
const ETHTOOL_STSO: u32 = 0x1f;
const ETHTOOL_SGSO: u32 = 0x24;
const ETHTOOL_SGRO: u32 = 0x2c;

/// Turns segmentation and receive offloads and checksum offload off on `name`, so that a
/// frame is at most one MTU and carries a complete checksum (a frame that crosses the
/// emulator is re-injected and checked again by the receiver); or, with `on`, checksum,
/// scatter-gather and segmentation offloads on (in the order the kernel needs them), so
/// that the host hands over segments of up to 64 KB that the emulator carries whole.
/// Features the driver does not have are skipped.
pub fn set_offloads(name: &str, on: bool) -> io::Result<()> {
    let socket = control_socket()?;
    if on {
        for cmd in [
            ETHTOOL_SRXCSUM,
            ETHTOOL_STXCSUM,
            ETHTOOL_SSG,
            ETHTOOL_STSO,
            ETHTOOL_SGSO,
        ] {
            ethtool_set(&socket, name, cmd, 1)?;
        }
        return Ok(());
    }
    for cmd in [
        ETHTOOL_SGRO,
        ETHTOOL_SGSO,
        ETHTOOL_STSO,
        ETHTOOL_SSG,
        ETHTOOL_STXCSUM,
        ETHTOOL_SRXCSUM,
    ] {
        ethtool_set(&socket, name, cmd, 0)?;
    }
    Ok(())
}

/// One ethtool "set" command; a feature the driver does not have is skipped.
fn ethtool_set(socket: &OwnedFd, name: &str, cmd: u32, data: u32) -> io::Result<()> {
    let mut value = EthtoolValue { cmd, data };
    let mut req = IfReqPtr {
        name: ifname(name)?,
        data: (&mut value as *mut EthtoolValue).cast(),
        _pad: [0; 16],
    };
    // SAFETY: req points at a live ethtool_value for the call's duration.
    let result = unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCETHTOOL as _, &mut req) };
    if result < 0 {
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EOPNOTSUPP) {
            return Err(error);
        }
    }
    Ok(())
}

/// Runs `work` on a new thread that has joined network namespace `namespace` (a name under
/// /run/netns): setns changes only the calling thread, so the caller's namespace is left
/// alone.
pub fn in_namespace<T: Send + 'static>(
    namespace: &str,
    work: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let path = format!("/run/netns/{namespace}");
    let file =
        std::fs::File::open(&path).map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
    std::thread::spawn(move || {
        // SAFETY: a valid namespace descriptor; CLONE_NEWNET checks its kind.
        check(unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) })?;
        work()
    })
    .join()
    .map_err(|_| io::Error::other("namespace thread panicked"))?
}

/// Lets this thread's timed waits end within about a microsecond of their deadline
/// (the default timer slack is 50 us, as large as the delay the emulator may add).
pub fn tight_timer_slack() {
    // SAFETY: prctl with plain integer arguments.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

/// Runs this thread under SCHED_FIFO (priority 10), or back under the ordinary policy.
/// False when not permitted (a container without CAP_SYS_NICE for it).
pub fn set_realtime(on: bool) -> bool {
    let (policy, priority) = if on {
        (libc::SCHED_FIFO, 10)
    } else {
        (libc::SCHED_OTHER, 0)
    };
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: a valid sched_param for this thread (pid 0).
    unsafe { libc::sched_setscheduler(0, policy, &param) == 0 }
}

/// The highest ordinary priority for this thread, where real-time scheduling is refused.
pub fn highest_ordinary_priority() {
    // SAFETY: plain integer arguments; `who` 0 is this thread.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -20) };
}

/// An AF_PACKET socket bound to one interface.
pub struct PacketSocket {
    fd: OwnedFd,
}

impl PacketSocket {
    /// A receiving socket: every frame that arrives on `index` (promiscuous), none that
    /// this host sends there. Non-blocking.
    pub fn receiver(index: u32) -> io::Result<PacketSocket> {
        let socket = PacketSocket::open(index, ETH_P_ALL, true)?;
        let mreq = PacketMreq {
            mr_ifindex: index as libc::c_int,
            mr_type: PACKET_MR_PROMISC,
            mr_alen: 0,
            mr_address: [0; 8],
        };
        socket.set_option(libc::SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq)?;
        // Stamps every frame as the kernel receives it (the ring's slot carries the
        // stamp): a frame's time in the path starts when it arrived, not when this
        // thread got round to reading it.
        let _ = socket.set_option(libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &1 as &libc::c_int);
        // Older kernels lack it; the receive loop skips outgoing frames by type anyway.
        let _ = socket.set_option(libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, &1 as &libc::c_int);
        Ok(socket)
    }

    /// A sending socket on `index` that receives nothing and bypasses the qdisc (the
    /// emulator is the queue). Blocking: a full transmit ring makes the sender wait.
    /// With `offloads`, each frame sent starts with a `virtio_net_hdr` that says how the
    /// kernel is to cut it into frames and fill in its checksum.
    pub fn sender(index: u32, offloads: bool) -> io::Result<PacketSocket> {
        let socket = PacketSocket::open(index, 0, false)?;
        if offloads {
            socket.set_option(libc::SOL_PACKET, PACKET_VNET_HDR, &1 as &libc::c_int)?;
        }
        let _ = socket.set_option(libc::SOL_PACKET, PACKET_QDISC_BYPASS, &1 as &libc::c_int);
        let _ = socket.set_option(
            libc::SOL_SOCKET,
            libc::SO_SNDBUFFORCE,
            &(16 << 20) as &libc::c_int,
        );
        Ok(socket)
    }

    fn open(index: u32, protocol: u16, nonblocking: bool) -> io::Result<PacketSocket> {
        let flags =
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | if nonblocking { libc::SOCK_NONBLOCK } else { 0 };
        // SAFETY: plain socket call; the descriptor is owned at once.
        let fd =
            check(unsafe { libc::socket(libc::AF_PACKET, flags, i32::from(protocol.to_be())) })?;
        // SAFETY: fd is fresh and owned by nobody else.
        let socket = PacketSocket {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        };
        // SAFETY: sockaddr_ll is plain data; zero is a valid start.
        let mut address: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        address.sll_family = libc::AF_PACKET as u16;
        address.sll_protocol = protocol.to_be();
        address.sll_ifindex = index as libc::c_int;
        // SAFETY: a properly sized sockaddr_ll.
        check(unsafe {
            libc::bind(
                fd,
                (&address as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })?;
        Ok(socket)
    }

    fn set_option<T>(&self, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
        // SAFETY: value is a live T of the size passed.
        check(unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                level,
                name,
                (value as *const T).cast(),
                std::mem::size_of::<T>() as libc::socklen_t,
            )
        })
        .map(|_| ())
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Reads and drops whatever waits in the socket's own queue: frames of other
    /// interfaces may have queued between socket() and bind(), before a receive ring took
    /// over.
    pub fn discard_queued(&self) {
        let mut scratch = [0u8; 64];
        // SAFETY: recv into a local buffer until the queue is empty.
        while unsafe {
            libc::recv(
                self.raw(),
                scratch.as_mut_ptr().cast(),
                scratch.len(),
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        } >= 0
        {}
    }
}

/// The arrays a batched send hands the kernel, kept by the calling thread between calls so
/// that a batch allocates nothing; refilled (pointers included) on every call.
#[derive(Default)]
pub struct BatchScratch {
    iovecs: Vec<libc::iovec>,
    headers: Vec<libc::mmsghdr>,
}

impl BatchScratch {
    /// Sizes the arrays for `count` messages, zeroed, and points each iovec at its frame.
    fn prepare<'a>(&mut self, frames: impl Iterator<Item = (*mut u8, usize)> + 'a, count: usize) {
        self.iovecs.clear();
        self.iovecs.extend(frames.map(|(base, len)| libc::iovec {
            iov_base: base.cast(),
            iov_len: len,
        }));
        self.headers.clear();
        // SAFETY: plain data, for which all-zero is a valid value.
        self.headers.resize(count, unsafe { std::mem::zeroed() });
        for (h, iov) in self.headers.iter_mut().zip(self.iovecs.iter_mut()) {
            h.msg_hdr.msg_iov = iov;
            h.msg_hdr.msg_iovlen = 1;
        }
    }
}

/// Sends every frame in one call where the kernel takes them all (sendmmsg), retrying the
/// rest. Returns the frames the interface refused (too large for its MTU, or an error).
pub fn send_batch<F: AsRef<[u8]>>(
    socket: &PacketSocket,
    frames: &[F],
    scratch: &mut BatchScratch,
) -> io::Result<u64> {
    // The kernel only reads the frames; iovec's pointer is mutable by its C type alone.
    scratch.prepare(
        frames
            .iter()
            .map(|f| (f.as_ref().as_ptr() as *mut u8, f.as_ref().len())),
        frames.len(),
    );
    let headers = &mut scratch.headers;
    let mut refused = 0;
    let mut at = 0;
    while at < headers.len() {
        // SAFETY: headers from `at` point at live iovecs over live frames.
        let n = unsafe {
            libc::sendmmsg(
                socket.raw(),
                headers[at..].as_mut_ptr(),
                (headers.len() - at) as libc::c_uint,
                0,
            )
        };
        if n < 0 {
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EINTR) | Some(libc::ENOBUFS) | Some(libc::EAGAIN) => continue,
                // The frame at `at` cannot go out (too big, interface down): skip it.
                Some(libc::EMSGSIZE) | Some(libc::ENETDOWN) | Some(libc::ENXIO) => {
                    refused += 1;
                    at += 1;
                }
                _ => return Err(error),
            }
        } else {
            at += n as usize;
        }
    }
    Ok(refused)
}

/// Sets the AF_PACKET option `name` (`PACKET_VERSION`, `PACKET_RX_RING`,
/// `PACKET_VNET_HDR`, `PACKET_FANOUT`: the ring's, which neither socket2 nor nix has) on
/// `fd` to `value`, a live value of the type the kernel reads for it.
pub(crate) fn set_packet_option<T>(fd: RawFd, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: value is a live T of the size passed.
    let result = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
