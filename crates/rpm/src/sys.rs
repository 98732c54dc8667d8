//! The socket option RPM's connections set that socket2 does not have; the crate's one
//! hand-written `setsockopt`.

use crate::NOTSENT_LOWAT;

/// Sets [`NOTSENT_LOWAT`] on a TCP socket (best effort: a kernel without it buffers as it
/// always did).
// TCP_NOTSENT_LOWAT, which socket2 does not have.
#[allow(clippy::disallowed_methods)]
pub fn limit_unsent(socket: &impl std::os::fd::AsRawFd) {
    let value = NOTSENT_LOWAT as libc::c_int;
    // SAFETY: an int option on a socket this process owns.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}
