//! The socket calls socket2 lacks, each in one named function with the option's name.

use std::io;
use std::net::IpAddr;

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

/// One datagram read with the kernel's receive time (SO_TIMESTAMPNS, which the socket
/// must have on): its length, its sender, and when it arrived in nanoseconds of the wall
/// clock (`None` where the kernel gave no time). socket2's `recv_from` carries no control
/// messages; the time is what makes one-way delay and jitter the path's, not the
/// reader's wake-ups.
pub fn recv_stamped(
    socket: &socket2::Socket,
    buffer: &mut [u8],
) -> io::Result<(usize, std::net::SocketAddr, Option<u64>)> {
    use std::os::fd::AsRawFd;
    // SAFETY: zeroed sockaddr_storage, iovec and msghdr are valid values of their types;
    // every pointer set below points at a live local of the size given.
    let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut control = [0u64; 8];
    let mut iovec = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: buffer.len(),
    };
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_name = (&mut from as *mut libc::sockaddr_storage).cast();
    header.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    header.msg_iov = &mut iovec;
    header.msg_iovlen = 1;
    header.msg_control = control.as_mut_ptr().cast();
    header.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: the header's buffers are live for the call and of the sizes it states.
    let len = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut header, 0) };
    if len < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel wrote a sockaddr of msg_namelen bytes into `from`.
    let sender = unsafe { socket2::SockAddr::new(from, header.msg_namelen) }
        .as_socket()
        .ok_or_else(|| io::Error::other("a datagram from no IP address"))?;
    let mut arrived = None;
    // SAFETY: CMSG_FIRSTHDR/NXTHDR walk the control buffer the kernel filled, within
    // msg_controllen; the data of an SCM_TIMESTAMPNS message is one timespec.
    unsafe {
        let mut message = libc::CMSG_FIRSTHDR(&header);
        while !message.is_null() {
            if (*message).cmsg_level == libc::SOL_SOCKET
                && (*message).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let at: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(message).cast());
                arrived = Some(at.tv_sec as u64 * 1_000_000_000 + at.tv_nsec as u64);
            }
            message = libc::CMSG_NXTHDR(&header, message);
        }
    }
    Ok((len as usize, sender, arrived))
}
