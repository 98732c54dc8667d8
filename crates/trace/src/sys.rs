//! The socket options a trace sets that socket2 does not have, each a function named for
//! its option; the one hand-written `setsockopt` of the crate is here.

use socket2::Socket;
use std::io;
use std::os::fd::AsRawFd;

/// IP_RECVERR / IPV6_RECVERR: ICMP errors about what the socket sent come back on its
/// error queue with the quoted packet (socket2 has no setter).
pub(crate) fn set_recv_errors(socket: &Socket, v6: bool) -> io::Result<()> {
    if v6 {
        set_int(socket, libc::SOL_IPV6, libc::IPV6_RECVERR, 1)
    } else {
        set_int(socket, libc::SOL_IP, libc::IP_RECVERR, 1)
    }
}

/// IPV6_CHECKSUM: on a raw IPv6 socket the kernel fills the checksum at `offset` of
/// what is sent (socket2 has no setter).
pub(crate) fn set_ipv6_checksum_offset(socket: &Socket, offset: i32) -> io::Result<()> {
    set_int(socket, libc::SOL_IPV6, libc::IPV6_CHECKSUM, offset)
}

/// IP_MTU_DISCOVER / IPV6_MTU_DISCOVER at `*_PMTUDISC_PROBE`: datagrams leave with the
/// don't-fragment bit whatever the kernel's path MTU says, so a narrower hop answers
/// (socket2 has no setter).
pub(crate) fn set_path_mtu_probe(socket: &Socket, v6: bool) -> io::Result<()> {
    if v6 {
        set_int(
            socket,
            libc::SOL_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_PROBE,
        )
    } else {
        set_int(
            socket,
            libc::SOL_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_PROBE,
        )
    }
}

// The options above, which socket2 lacks.
#[allow(clippy::disallowed_methods)]
fn set_int(socket: &Socket, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: a valid descriptor and a pointer to an int of the length given.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
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
