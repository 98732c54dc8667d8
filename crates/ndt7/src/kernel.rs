//! What the kernel says of one ndt7 connection: the `TCP_INFO` fields the spec names
//! (each left out where the running kernel's struct stops short of it), BBR's own
//! estimates (`TCP_CC_INFO`) where the connection runs BBR, and its congestion control.

use linerate_model::ndt7::{BbrInfo, TcpInfo};
use std::os::fd::RawFd;

/// linux/tcp.h: the congestion control's own information.
const TCP_CC_INFO: libc::c_int = 26;

/// `TCP_INFO` of `fd`, the spec's fields, stamped `elapsed_us`; `None` where the kernel
/// refuses (the socket is gone).
pub fn tcp_info(fd: RawFd, elapsed_us: i64) -> Option<TcpInfo> {
    // SAFETY: getsockopt writes at most `len` bytes into the zeroed struct we own and
    // says in `len` how many it wrote.
    let (info, len) = unsafe {
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
            return None;
        }
        (info, len as usize)
    };
    // A field is there when the kernel's struct reaches past it.
    macro_rules! field {
        ($name:ident) => {{
            let end =
                std::mem::offset_of!(libc::tcp_info, $name) + std::mem::size_of_val(&info.$name);
            (end <= len).then(|| i64::try_from(info.$name).unwrap_or(i64::MAX))
        }};
    }
    Some(TcpInfo {
        busy_time: field!(tcpi_busy_time),
        bytes_acked: field!(tcpi_bytes_acked),
        bytes_received: field!(tcpi_bytes_received),
        bytes_sent: field!(tcpi_bytes_sent),
        bytes_retrans: field!(tcpi_bytes_retrans),
        elapsed_us: Some(elapsed_us),
        min_rtt_us: field!(tcpi_min_rtt),
        rtt_us: field!(tcpi_rtt),
        rtt_var_us: field!(tcpi_rttvar),
        rwnd_limited_us: field!(tcpi_rwnd_limited),
        sndbuf_limited_us: field!(tcpi_sndbuf_limited),
    })
}

/// The congestion control `fd` runs ("cubic", "bbr"); empty where the kernel refuses.
pub fn congestion(fd: RawFd) -> String {
    let mut name = [0u8; 16];
    let mut len = name.len() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the buffer we own.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return String::new();
    }
    let name = &name[..(len as usize).min(name.len())];
    String::from_utf8_lossy(name)
        .trim_end_matches('\0')
        .to_string()
}

/// BBR's bandwidth and min-RTT estimates and gains (linux/inet_diag.h `tcp_bbr_info`:
/// five u32s, the bandwidth split in two halves), stamped `elapsed_us`; `None` unless
/// `fd` runs BBR.
pub fn bbr_info(fd: RawFd, elapsed_us: i64) -> Option<BbrInfo> {
    if congestion(fd) != "bbr" {
        return None;
    }
    let mut words = [0u32; 5];
    let mut len = std::mem::size_of_val(&words) as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the array we own.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            TCP_CC_INFO,
            words.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 || (len as usize) < std::mem::size_of_val(&words) {
        return None;
    }
    let [bw_lo, bw_hi, min_rtt, pacing_gain, cwnd_gain] = words;
    Some(BbrInfo {
        bw: i64::try_from((u64::from(bw_hi) << 32) | u64::from(bw_lo)).unwrap_or(i64::MAX),
        min_rtt_us: i64::from(min_rtt),
        pacing_gain: i64::from(pacing_gain),
        cwnd_gain: i64::from(cwnd_gain),
        elapsed_us,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;

    #[test]
    fn a_connection_reports_the_bytes_it_sent_and_the_other_end_received() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        client.write_all(&[7u8; 100_000]).unwrap();
        let mut got = vec![0u8; 100_000];
        server.read_exact(&mut got).unwrap();
        let sent = tcp_info(client.as_raw_fd(), 5).unwrap();
        let received = tcp_info(server.as_raw_fd(), 5).unwrap();
        assert_eq!(sent.elapsed_us, Some(5));
        // Every byte read was received by TCP; the sender's count is at least that.
        assert!(received.bytes_received.unwrap() >= 100_000, "{received:?}");
        assert!(sent.bytes_sent.unwrap_or(i64::MAX) >= 100_000, "{sent:?}");
        assert!(sent.min_rtt_us.unwrap() > 0);
        assert!(!congestion(client.as_raw_fd()).is_empty());
        assert_eq!(tcp_info(-1, 0), None);
    }
}
