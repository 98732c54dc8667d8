//! The socket calls socket2 lacks, each in one named function with the option's name.

use std::io;
use std::net::{IpAddr, SocketAddr};

/// A socket of `kind` for `addr` that, bound to "::", takes IPv4 too (as iperf3's and
/// iperf 2's servers do).
pub fn dual_stack(addr: SocketAddr, kind: socket2::Type) -> io::Result<socket2::Socket> {
    let socket = socket2::Socket::new(socket2::Domain::for_address(addr), kind, None)?;
    if addr.is_ipv6() {
        let _ = socket.set_only_v6(false);
    }
    Ok(socket)
}

/// The index of the interface named `name` (`if_nametoindex(3)`); an error naming it when
/// the host has none of that name.
pub fn interface_index(name: &str) -> io::Result<u32> {
    let c_name = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name holds a NUL"))?;
    // SAFETY: a NUL-terminated string the call only reads.
    let index = unsafe { libc::if_nametoindex(c_name.as_ptr()) };
    if index == 0 {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("this host has no interface named {name}"),
        ));
    }
    Ok(index)
}

/// A source-specific join (MCAST_JOIN_SOURCE_GROUP, RFC 3678's protocol-independent
/// form, for IPv4 and IPv6 alike; socket2 has IPv4's by interface address only and no
/// IPv6 one): datagrams to `group` from `source` alone, on interface `index` (0: the
/// one the route to the group takes).
#[allow(clippy::disallowed_methods)] // MCAST_JOIN_SOURCE_GROUP: socket2 lacks it (above).
pub fn join_source_group(
    socket: &socket2::Socket,
    group: IpAddr,
    source: IpAddr,
    index: u32,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: all zeroes is a valid group_source_req (no addresses yet).
    let mut request: libc::group_source_req = unsafe { std::mem::zeroed() };
    request.gsr_interface = index;
    request.gsr_group = socket2::SockAddr::from(std::net::SocketAddr::new(group, 0)).as_storage();
    request.gsr_source = socket2::SockAddr::from(std::net::SocketAddr::new(source, 0)).as_storage();
    let level = if group.is_ipv4() {
        libc::IPPROTO_IP
    } else {
        libc::IPPROTO_IPV6
    };
    // SAFETY: the option's value is the struct above, of the size given; the kernel only
    // reads it.
    let answer = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            libc::MCAST_JOIN_SOURCE_GROUP,
            (&request as *const libc::group_source_req).cast(),
            std::mem::size_of::<libc::group_source_req>() as libc::socklen_t,
        )
    };
    if answer == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Waits at most `tick` for any of `fds` to have something to read (`poll(2)`): whether
/// one has. Returns early on a signal too (false), which callers treat as a tick.
pub fn wait_readable(fds: &[std::os::fd::RawFd], tick: std::time::Duration) -> bool {
    let mut polled: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `polled` is a live array of `len` pollfds for the duration of the call.
    let ready = unsafe {
        libc::poll(
            polled.as_mut_ptr(),
            polled.len() as libc::nfds_t,
            tick.as_millis().min(i32::MAX as u128) as libc::c_int,
        )
    };
    ready > 0
}
