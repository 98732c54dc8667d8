//! Linux socket options and TCP_INFO.
//!
//! Everything here acts on a raw socket and reports what the kernel actually did: the
//! kernel doubles SO_SNDBUF/SO_RCVBUF requests and caps them, and may refuse a congestion
//! control module, so callers read back and report the granted values.

use linerate_model::TestConfig;
use socket2::SockRef;
use std::io;
use std::os::fd::AsFd;

/// Applies the test's socket options. `before_connect` is true on a client socket not yet
/// connected, where the receive buffer still shapes the window scale and TCP_MAXSEG the
/// advertised MSS.
pub fn apply_options<S: AsFd>(
    socket: &S,
    config: &TestConfig,
    before_connect: bool,
) -> io::Result<()> {
    apply_udp_options(socket, config)?;
    let sock = SockRef::from(socket);
    if config.nodelay {
        sock.set_nodelay(true)
            .map_err(|e| context(e, "TCP_NODELAY"))?;
    }
    if let Some(mss) = config.mss {
        if before_connect {
            sock.set_mss(mss)
                .map_err(|e| context(e, &format!("TCP_MAXSEG {mss}")))?;
        }
    }
    if let Some(algorithm) = &config.congestion {
        sock.set_tcp_congestion(algorithm.as_bytes())
            .map_err(|e| context(e, &format!("congestion control '{algorithm}'")))?;
    }
    Ok(())
}

/// Applies the socket buffer sizes (`--window`) and the marks (`--dscp`, `--ecn`), the
/// options a UDP socket takes too.
pub fn apply_udp_options<S: AsFd>(socket: &S, config: &TestConfig) -> io::Result<()> {
    // The kernel's receive time from the socket's first datagram on: one that arrived
    // before the option was set is stamped when it is read (the kernel stamps an unstamped
    // datagram at recvmsg), and a receiver that starts late would count its wait as
    // transit.
    if SockRef::from(socket).r#type()? == socket2::Type::DGRAM {
        let _ = set_int_option(socket, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1);
    }
    if let Some(marks) = config.marks {
        set_marks(socket, marks)?;
    }
    if let Some(window) = config.window {
        let sock = SockRef::from(socket);
        let window = usize::try_from(window).unwrap_or(usize::MAX);
        sock.set_send_buffer_size(window)
            .map_err(|e| context(e, &format!("SO_SNDBUF {window}")))?;
        sock.set_recv_buffer_size(window)
            .map_err(|e| context(e, &format!("SO_RCVBUF {window}")))?;
    }
    Ok(())
}

/// Sets the TOS byte (IPv4) or traffic class (IPv6) every packet of `socket` carries: on
/// an IPv6 socket both, since one that reaches an IPv4-mapped address sends through the
/// IPv4 code. On a TCP socket the kernel keeps the ECN field itself.
pub fn set_marks<S: AsFd>(socket: &S, marks: linerate_model::marks::Marks) -> io::Result<()> {
    let tos = u32::from(marks.tos());
    let options = SockRef::from(socket);
    let what = || format!("the DSCP and ECN field (TOS {:#04x})", marks.tos());
    if options.domain()? == socket2::Domain::IPV6 {
        options
            .set_tclass_v6(tos)
            .map_err(|e| context(e, &what()))?;
        let _ = options.set_tos(tos);
        Ok(())
    } else {
        options.set_tos(tos).map_err(|e| context(e, &what()))
    }
}

/// Asks the kernel to say with each datagram received on `socket` the TOS byte or traffic
/// class it arrived with (IP_RECVTOS, IPV6_RECVTCLASS).
pub fn receive_marks<S: AsFd>(socket: &S) -> io::Result<()> {
    let options = SockRef::from(socket);
    if options.domain()? == socket2::Domain::IPV6 {
        options.set_recv_tclass_v6(true)?;
        // An IPv4-mapped peer's datagrams come through the IPv4 code.
        let _ = options.set_recv_tos(true);
        Ok(())
    } else {
        options.set_recv_tos(true)
    }
}

/// A native UDP test's sockets without `--window`: a receive buffer of
/// [`udp_receive_buffer`] for the test's flow count (the kernel caps it at
/// `net.core.rmem_max`). The kernel's default (about 208 KiB) holds 92 datagrams of 1,400
/// bytes, a quarter of a millisecond at 400k a second: a receiver off its CPU that long
/// loses datagrams, and one that is on it wakes every few datagrams. iperf3's stand-ins
/// keep iperf3's own default and do not call this.
pub fn apply_udp_receive_default<S: AsFd>(socket: &S, config: &TestConfig) -> io::Result<()> {
    if config.window.is_some() {
        return Ok(());
    }
    let bytes = udp_receive_buffer(config.connections());
    SockRef::from(socket)
        .set_recv_buffer_size(bytes)
        .map_err(|e| context(e, &format!("SO_RCVBUF {bytes}")))
}

/// The receive buffer a UDP flow asks for by default: 4 MiB, less with many flows so that a
/// test's sockets together hold at most 64 MiB of queued datagrams, never less than 256
/// KiB.
pub fn udp_receive_buffer(flows: u32) -> usize {
    const MOST: usize = 4 << 20;
    const TEST_BUDGET: usize = 64 << 20;
    const LEAST: usize = 256 << 10;
    (TEST_BUDGET / flows.max(1) as usize).clamp(LEAST, MOST)
}

fn context(error: io::Error, what: &str) -> io::Error {
    io::Error::new(error.kind(), format!("cannot set {what}: {error}"))
}

/// Socket buffer sizes as granted: (send, receive).
pub fn granted_buffers<S: AsFd>(socket: &S) -> (u64, u64) {
    let sock = SockRef::from(socket);
    (
        sock.send_buffer_size().map_or(0, |v| v as u64),
        sock.recv_buffer_size().map_or(0, |v| v as u64),
    )
}

/// The congestion control module in use.
pub fn congestion<S: AsFd>(socket: &S) -> String {
    SockRef::from(socket)
        .tcp_congestion()
        .map(|name| {
            String::from_utf8_lossy(&name)
                .trim_end_matches('\0')
                .to_string()
        })
        .unwrap_or_default()
}

/// The few TCP_INFO fields linerate reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpInfo {
    pub total_retrans: u32,
    pub snd_mss: u32,
    pub rtt_us: u32,
    pub rttvar_us: u32,
    /// In segments.
    pub snd_cwnd: u32,
    /// In bytes; 0 where the kernel's TCP_INFO predates it (Linux 5.4).
    pub snd_wnd: u32,
    pub pmtu: u32,
    /// The handshake negotiated ECN (TCPI_OPT_ECN).
    pub ecn: bool,
}

impl TcpInfo {
    /// What iperf3 reports of a sending flow per interval.
    pub fn snapshot(&self) -> linerate_model::TcpSnapshot {
        linerate_model::TcpSnapshot {
            snd_cwnd_bytes: u64::from(self.snd_cwnd) * u64::from(self.snd_mss),
            snd_wnd_bytes: u64::from(self.snd_wnd),
            rtt_us: self.rtt_us,
            rttvar_us: self.rttvar_us,
            pmtu: self.pmtu,
        }
    }
}

/// `tcpi_options`: the connection negotiated ECN (linux/tcp.h).
const TCPI_OPT_ECN: u8 = 8;

/// Reads TCP_INFO; zeros if the kernel refuses (the socket is gone).
pub fn tcp_info<S: AsFd>(socket: &S) -> TcpInfo {
    use std::os::fd::AsRawFd;
    let fd = socket.as_fd().as_raw_fd();
    // SAFETY: getsockopt writes at most `len` bytes into the zeroed struct we own, and
    // says in `len` how many it wrote.
    unsafe {
        // libc's glibc `tcp_info` is the kernel's whole struct (through tcpi_snd_wnd and
        // beyond); a kernel that fills less leaves the rest zero.
        let mut info: libc::tcp_info = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let rc = libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        );
        if rc != 0 {
            return TcpInfo::default();
        }
        let basic = &info;
        TcpInfo {
            total_retrans: basic.tcpi_total_retrans,
            snd_mss: basic.tcpi_snd_mss,
            rtt_us: basic.tcpi_rtt,
            rttvar_us: basic.tcpi_rttvar,
            snd_cwnd: basic.tcpi_snd_cwnd,
            snd_wnd: info.tcpi_snd_wnd,
            pmtu: basic.tcpi_pmtu,
            ecn: basic.tcpi_options & TCPI_OPT_ECN != 0,
        }
    }
}

/// linux/mptcp.h: the MPTCP socket level, its MPTCP_INFO option and the flag that says
/// the connection fell back to plain TCP.
const SOL_MPTCP: libc::c_int = 284;
const MPTCP_INFO: libc::c_int = 1;
const MPTCP_INFO_FLAG_FALLBACK: u32 = 1;

/// The head of `struct mptcp_info` (linux/mptcp.h); the kernel fills what it has of the
/// rest.
#[repr(C)]
#[derive(Default)]
struct MptcpInfo {
    subflows: u8,
    add_addr_signal: u8,
    add_addr_accepted: u8,
    subflows_max: u8,
    add_addr_signal_max: u8,
    add_addr_accepted_max: u8,
    flags: u32,
    token: u32,
    rest: [u64; 16],
}

/// The subflows (the first among them) of a socket opened as MPTCP, or its fallback to
/// plain TCP: the kernel refuses MPTCP_INFO on a connection that fell back (and on any
/// plain TCP socket, so call it only where the test asked for MPTCP).
pub fn mptcp_info<S: AsFd>(socket: &S) -> linerate_model::MptcpFacts {
    use std::os::fd::AsRawFd;
    let mut info = MptcpInfo::default();
    let mut len = std::mem::size_of::<MptcpInfo>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the struct we own.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_fd().as_raw_fd(),
            SOL_MPTCP,
            MPTCP_INFO,
            (&mut info as *mut MptcpInfo).cast(),
            &mut len,
        )
    };
    // A connection that fell back is refused, says so in its flags, or fills nothing.
    let fallback = rc != 0 || len == 0 || info.flags & MPTCP_INFO_FLAG_FALLBACK != 0;
    linerate_model::MptcpFacts {
        subflows: if fallback {
            1
        } else {
            info.subflows.saturating_add(1)
        },
        fallback,
    }
}

/// Why the kernel would not open an MPTCP socket, in words a user can act on.
pub fn mptcp_refusal(error: &io::Error) -> String {
    match error.raw_os_error() {
        Some(libc::EPROTONOSUPPORT | libc::ENOPROTOOPT | libc::EINVAL) => {
            "this kernel does not open MPTCP sockets (no MPTCP, or sysctl net.mptcp.enabled=0)"
                .into()
        }
        _ => error.to_string(),
    }
}

/// Sets an int-valued socket option (`setsockopt(level, option, value)`), for the options
/// socket2 does not have: UDP_SEGMENT and UDP_GRO, SO_TIMESTAMPNS, IP_RECVERR and
/// IPV6_RECVERR, SO_RCVLOWAT, SO_BUSY_POLL, IP_MTU_DISCOVER; each caller names its option.
#[allow(clippy::disallowed_methods)]
pub fn set_int_option<S: AsFd>(
    socket: &S,
    level: libc::c_int,
    option: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `value` is a live int of the length given, for the kernel to read.
    let rc = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&socket.as_fd()),
            level,
            option,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reads an int-valued socket option (`getsockopt(level, option)`).
pub fn int_option<S: AsFd>(
    socket: &S,
    level: libc::c_int,
    option: libc::c_int,
) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are valid for the kernel to write an int.
    let rc = unsafe {
        libc::getsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&socket.as_fd()),
            level,
            option,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// SO_RCVLOWAT: the least a read waits for before it returns (or its timeout passes).
pub fn set_receive_low_water<S: AsFd>(socket: &S, bytes: usize) -> io::Result<()> {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    set_int_option(socket, libc::SOL_SOCKET, libc::SO_RCVLOWAT, value)
        .map_err(|e| context(e, &format!("SO_RCVLOWAT {bytes}")))
}

/// Pins the calling thread to one CPU.
pub fn pin_to(cpu: usize) -> io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET stays in bounds for
    // cpu < CPU_SETSIZE, checked first.
    unsafe {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::other(format!("CPU {cpu} is out of range")));
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            let error = io::Error::last_os_error();
            return Err(io::Error::new(
                error.kind(),
                format!("cannot pin a worker to CPU {cpu}: {error}"),
            ));
        }
    }
    Ok(())
}

/// The slice a worker that keeps a schedule of frames asks the scheduler for: the
/// shortest Linux grants (0.1 ms; the default is a few milliseconds).
pub const SCHEDULE_SLICE_NS: u64 = 100_000;

/// Readies the calling thread to keep a schedule of frames (an application pattern's
/// sender): its timers wake it when asked, not up to 50 us later (the timer slack of a
/// normal thread), and it asks the scheduler for short slices. Since Linux 6.12 a thread
/// with a shorter slice has an earlier deadline and takes the CPU when it wakes rather
/// than waiting for a busy thread's slice to end: its share of the CPU is unchanged, its
/// wait for it shorter (beside two busy loops on two CPUs its timers' p99 lateness went
/// from 1-3 ms to 0.01-1.5 ms; docs/performance.md). Older kernels ignore the slice.
/// A kernel that refuses leaves the thread as it was; the result says how late each
/// frame started either way.
pub fn keep_a_schedule() {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and acts on this thread only.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    // A thread the user put under another policy keeps it: a real-time one (`chrt -f 10
    // linerate ...`) wakes ahead of every normal thread, which no slice does.
    // SAFETY: sched_getscheduler reads the calling thread's policy.
    if unsafe { libc::sched_getscheduler(0) } != libc::SCHED_OTHER {
        return;
    }
    // sched_setattr sets a normal thread's nice with its slice: keep the one it has
    // (`nice -n -20 linerate ...` stays ahead). getpriority may return -1 as a nice: the
    // error is told by errno.
    let Some(nice) = thread_nice() else {
        return;
    };
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: libc::SCHED_OTHER as u32,
        flags: 0,
        nice,
        priority: 0,
        runtime: SCHEDULE_SLICE_NS,
        deadline: 0,
        period: 0,
    };
    // SAFETY: attr is a valid sched_attr of the size it states, read by the kernel only
    // during the call; pid 0 is the calling thread.
    unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
}

/// The real-time priority [`ask_realtime`] asks: above every normal thread, below the
/// kernel's interrupt threads (50), which a test that never sleeps must not starve.
pub const REALTIME_PRIORITY: i32 = 10;

/// Puts the calling thread under round-robin real-time scheduling at
/// [`REALTIME_PRIORITY`]; the threads it starts afterwards inherit it (iperf 2's `-z`,
/// `--realtime`). A woken thread then takes a CPU from any normal one at once, where
/// EEVDF can leave it queued until the next tick (docs/performance.md). Needs root,
/// CAP_SYS_NICE or an RLIMIT_RTPRIO of at least that priority: the kernel's refusal is
/// returned, and the thread is left as it was.
pub fn ask_realtime() -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: REALTIME_PRIORITY,
    };
    // SAFETY: sched_setscheduler on the calling thread with a valid sched_param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_RR, &param) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `struct sched_attr` as the kernel's first version has it (48 bytes).
#[repr(C)]
#[derive(Debug, Default)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// The calling thread's nice (Linux keeps one a thread). getpriority may return -1 as a
/// nice: an error is told by errno.
fn thread_nice() -> Option<i32> {
    // SAFETY: gettid and getpriority take and return plain integers; errno is this
    // thread's.
    unsafe {
        let thread = libc::syscall(libc::SYS_gettid) as libc::id_t;
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, thread);
        (*libc::__errno_location() == 0).then_some(nice)
    }
}

/// The CPUs this thread may run on, in order.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is valid; the kernel fills it; CPU_ISSET stays within
    // CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect()
    }
}

/// The CPU the calling thread runs on now.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments.
    usize::try_from(unsafe { libc::sched_getcpu() }).ok()
}

/// SO_INCOMING_CPU: the CPU whose receive processing last delivered to this socket (the
/// one that took the NIC queue's interrupt, or on loopback the sender's).
pub fn incoming_cpu<S: AsFd>(socket: &S) -> Option<usize> {
    let cpu = int_option(socket, libc::SOL_SOCKET, libc::SO_INCOMING_CPU).ok()?;
    usize::try_from(cpu).ok()
}

/// The size of the level 2 cache of CPU 0 (its data or unified cache), from sysfs, read
/// once per process (every worker of every test asks); `None` where the kernel does not
/// say.
pub fn l2_cache_bytes() -> Option<usize> {
    static L2: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *L2.get_or_init(read_l2_cache_bytes)
}

fn read_l2_cache_bytes() -> Option<usize> {
    let base = "/sys/devices/system/cpu/cpu0/cache";
    (0..8).find_map(|index| {
        let read = |name: &str| std::fs::read_to_string(format!("{base}/index{index}/{name}"));
        let level = read("level").ok()?;
        let kind = read("type").ok()?;
        if level.trim() != "2" || kind.trim() == "Instruction" {
            return None;
        }
        parse_cache_size(&read("size").ok()?)
    })
}

/// sysfs's cache size: "512K", "2048K", "1M".
fn parse_cache_size(text: &str) -> Option<usize> {
    let text = text.trim();
    let (digits, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit())?);
    let scale = match unit {
        "K" => 1 << 10,
        "M" => 1 << 20,
        _ => return None,
    };
    digits.parse::<usize>().ok()?.checked_mul(scale)
}

/// CPUs this process may run on.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// What resolving a test needs to know of this machine, and, for a UDP test to `target`
/// (or loopback), the largest payload the path carries unfragmented.
pub fn environment(udp_target: Option<std::net::SocketAddr>) -> linerate_model::Environment {
    linerate_model::Environment {
        cpus: cpus(),
        udp_length: udp_target.and_then(|target| udp_payload_for(target).ok()),
    }
}

/// The largest UDP payload to `target` that fits the route's MTU (IP_MTU of a connected
/// socket), less the IP and UDP headers.
pub fn udp_payload_for(target: std::net::SocketAddr) -> io::Result<u64> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    let any: IpAddr = if target.is_ipv4() {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        Ipv6Addr::UNSPECIFIED.into()
    };
    let socket = std::net::UdpSocket::bind(SocketAddr::new(any, 0))?;
    socket.connect(target)?;
    let headers = if target.is_ipv4() { 28 } else { 48 };
    Ok(route_mtu(&socket, target.is_ipv4())?.saturating_sub(headers))
}

/// The MTU the kernel holds for a connected socket's route (IP_MTU / IPV6_MTU): the
/// interface's, or less once path MTU discovery has lowered it.
pub fn route_mtu<S: AsFd>(socket: &S, ipv4: bool) -> io::Result<u64> {
    let (level, option) = if ipv4 {
        (libc::IPPROTO_IP, libc::IP_MTU)
    } else {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    };
    Ok(u64::try_from(int_option(socket, level, option)?).unwrap_or(0))
}

/// Binds a client's socket where `source` says, before it connects to `peer`: to its
/// device (SO_BINDTODEVICE: only that interface's or VRF's routes are used) and to its
/// address (any port). An address of the other family than the peer's cannot reach it.
pub fn bind_source(
    socket: &socket2::Socket,
    source: Option<&linerate_model::Source>,
    peer: std::net::SocketAddr,
) -> io::Result<()> {
    let Some(source) = source else {
        return Ok(());
    };
    if let Some(device) = &source.device {
        socket
            .bind_device(Some(device.as_bytes()))
            .map_err(|e| io::Error::new(e.kind(), format!("--bind-dev {device}: {e}")))?;
    }
    if let Some(address) = source.address {
        if address.is_ipv4() != peer.is_ipv4() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("--bind {address} cannot reach {peer} (another IP version)"),
            ));
        }
        socket
            .bind(&std::net::SocketAddr::new(address, 0).into())
            .map_err(|e| io::Error::new(e.kind(), format!("--bind {address}: {e}")))?;
    }
    Ok(())
}

/// A UDP socket to reach `peer` from where `source` says (else from any address of the
/// peer's family), not yet connected.
pub fn udp_socket_from(
    source: Option<&linerate_model::Source>,
    peer: std::net::SocketAddr,
) -> io::Result<std::net::UdpSocket> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(peer),
        socket2::Type::DGRAM,
        None,
    )?;
    bind_source(&socket, source, peer)?;
    if source.is_none_or(|s| s.address.is_none()) {
        let any: IpAddr = if peer.is_ipv4() {
            Ipv4Addr::UNSPECIFIED.into()
        } else {
            Ipv6Addr::UNSPECIFIED.into()
        };
        socket.bind(&SocketAddr::new(any, 0).into())?;
    }
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_that_keeps_a_schedule_gets_the_shortest_slice_and_keeps_its_nice() {
        std::thread::spawn(|| {
            // A nice of its own first (raising it needs no privilege): kept, not reset.
            // SAFETY: setpriority on this thread, with plain integers.
            let thread = unsafe { libc::syscall(libc::SYS_gettid) } as libc::id_t;
            let nice = thread_nice().expect("this thread's nice") + 3;
            assert_eq!(
                unsafe { libc::setpriority(libc::PRIO_PROCESS, thread, nice.min(19)) },
                0
            );
            keep_a_schedule();
            let mut attr = SchedAttr::default();
            // SAFETY: attr is a writable sched_attr of the size passed.
            let read = unsafe {
                libc::syscall(
                    libc::SYS_sched_getattr,
                    0,
                    &mut attr as *mut SchedAttr,
                    std::mem::size_of::<SchedAttr>() as libc::c_uint,
                    0,
                )
            };
            assert_eq!(read, 0, "{}", io::Error::last_os_error());
            assert_eq!(attr.policy, libc::SCHED_OTHER as u32);
            assert_eq!(attr.nice, nice.min(19), "the thread's nice");
            // A slice of a normal thread's own came with Linux 6.12; before, the kernel
            // keeps and reports none, and only the nice above is this function's doing.
            let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
            let mut version = release
                .split(['.', '-'])
                .map(|n| n.parse::<u32>().unwrap_or(0));
            let (major, minor) = (version.next().unwrap(), version.next().unwrap_or(0));
            if (major, minor) >= (6, 12) {
                assert_eq!(
                    attr.runtime, SCHEDULE_SLICE_NS,
                    "{attr:?} on Linux {release}"
                );
            }
        })
        .join()
        .expect("the scheduled thread");
    }

    #[test]
    fn a_worker_under_a_policy_of_the_users_keeps_it() {
        std::thread::spawn(|| {
            // SCHED_BATCH needs no privilege; a real-time policy (chrt) is kept the same way.
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: sched_setscheduler on this thread with a valid sched_param.
            let set = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
            assert_eq!(set, 0, "{}", io::Error::last_os_error());
            keep_a_schedule();
            // SAFETY: sched_getscheduler reads this thread's policy.
            assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_BATCH);
        })
        .join()
        .expect("the batch thread");
    }

    /// Granted (root, or CAP_SYS_NICE): the thread and those it starts are round-robin at
    /// the priority, and a worker that keeps a schedule keeps it. Refused: the kernel's
    /// reason comes back and the thread is as it was.
    #[test]
    fn realtime_asked_is_inherited_and_kept_or_refused_with_the_reason() {
        std::thread::spawn(|| {
            // SAFETY: sched_getscheduler reads the calling thread's policy.
            let policy = || unsafe { libc::sched_getscheduler(0) };
            match ask_realtime() {
                Ok(()) => {
                    assert_eq!(policy(), libc::SCHED_RR);
                    let child = std::thread::spawn(move || {
                        keep_a_schedule();
                        let mut param = libc::sched_param { sched_priority: 0 };
                        // SAFETY: sched_getparam writes this thread's sched_param.
                        assert_eq!(unsafe { libc::sched_getparam(0, &mut param) }, 0);
                        (policy(), param.sched_priority)
                    });
                    assert_eq!(child.join().unwrap(), (libc::SCHED_RR, REALTIME_PRIORITY));
                }
                Err(e) => {
                    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
                    assert_eq!(policy(), libc::SCHED_OTHER);
                }
            }
        })
        .join()
        .expect("the real-time thread");
    }

    #[test]
    fn cache_sizes_read_as_sysfs_writes_them() {
        assert_eq!(parse_cache_size("512K\n"), Some(512 << 10));
        assert_eq!(parse_cache_size("2048K"), Some(2 << 20));
        assert_eq!(parse_cache_size("1M"), Some(1 << 20));
        assert_eq!(parse_cache_size("K"), None);
        assert_eq!(parse_cache_size("512"), None);
        assert_eq!(parse_cache_size("12G"), None);
    }

    #[test]
    fn a_udp_receive_buffer_is_4_mib_shared_out_over_many_flows_within_bounds() {
        assert_eq!(udp_receive_buffer(1), 4 << 20);
        assert_eq!(udp_receive_buffer(16), 4 << 20);
        assert_eq!(udp_receive_buffer(64), 1 << 20);
        // Never under 256 KiB, more than the kernel's own default.
        assert_eq!(udp_receive_buffer(4000), 256 << 10);
        assert_eq!(udp_receive_buffer(0), 4 << 20);
    }
}
