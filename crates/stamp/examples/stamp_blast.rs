//! A load for STAMP reflectors (bench/stamp.py): open-mode test packets at a fixed rate
//! from a few sockets, sent and received in batches (sendmmsg, recvmmsg) so that one core
//! offers hundreds of thousands a second; counts the answers that come back.
//! (Sends are segmented, UDP_SEGMENT: Linux 4.18 and later.)
//!
//! stamp_blast ADDR:PORT RATE SECONDS [SOCKETS]  ->  one JSON line on stdout

// A benchmark or test times itself on the wall clock.
#![allow(clippy::disallowed_methods)]

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const BATCH: usize = 32;
const SIZE: usize = 44;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: stamp_blast ADDR:PORT RATE SECONDS [SOCKETS]");
        std::process::exit(2);
    }
    let target: SocketAddr = args[1].parse().expect("ADDR:PORT");
    let rate: f64 = args[2].parse().expect("RATE");
    let seconds: f64 = args[3].parse().expect("SECONDS");
    let count: usize = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(4);
    let sockets: Vec<UdpSocket> = (0..count)
        .map(|_| {
            let s = UdpSocket::bind(if target.is_ipv4() {
                "0.0.0.0:0"
            } else {
                "[::]:0"
            })
            .expect("bind");
            s.connect(target).expect("connect");
            s.set_nonblocking(true).expect("nonblocking");
            // Room for the answers while this thread is sending (rmem_max caps it).
            let bytes: i32 = 4 << 20;
            // SAFETY: a live i32 of the size given.
            unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUF,
                    (&bytes as *const i32).cast(),
                    4,
                )
            };
            s
        })
        .collect();
    let mut packets = vec![[0u8; SIZE]; BATCH];
    let mut seqs = vec![0u32; count];
    let mut receive = vec![[0u8; 2048]; BATCH];
    let (mut sent, mut answered) = (0u64, 0u64);
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(seconds);
    let gap = Duration::from_secs_f64(BATCH as f64 / rate);
    let mut next = start;
    let mut turn = 0usize;
    while Instant::now() < end {
        let now = Instant::now();
        if now >= next {
            let socket = turn % count;
            for packet in packets.iter_mut() {
                packet[..4].copy_from_slice(&seqs[socket].to_be_bytes());
                seqs[socket] = seqs[socket].wrapping_add(1);
            }
            sent += send_batch(&sockets[socket], &packets) as u64;
            turn += 1;
            next += gap;
            if now > next + gap * 100 {
                next = now;
            }
        }
        for socket in &sockets {
            answered += receive_batch(socket, &mut receive) as u64;
        }
        if next > Instant::now() {
            std::hint::spin_loop();
        }
    }
    let drain = Instant::now() + Duration::from_millis(500);
    while Instant::now() < drain {
        for socket in &sockets {
            answered += receive_batch(socket, &mut receive) as u64;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let elapsed = start.elapsed().as_secs_f64();
    println!(
        "{{\"sent\":{sent},\"answered\":{answered},\"seconds\":{elapsed:.3},\"offered_pps\":{:.0}}}",
        sent as f64 / seconds
    );
}

/// One segmented send (UDP_SEGMENT) of the whole batch: the load's own sending costs
/// little of the core it shares with the answers' arrival.
fn send_batch(socket: &UdpSocket, packets: &[[u8; SIZE]]) -> usize {
    const UDP_SEGMENT: i32 = 103;
    let mut iovs: Vec<libc::iovec> = packets
        .iter()
        .map(|p| libc::iovec {
            iov_base: p.as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        })
        .collect();
    let mut control = [0u64; 4];
    // SAFETY: a zeroed msghdr is valid; it points at `iovs` and `control`, which outlive
    // the call; one control message of CMSG_SPACE(2) octets fits the 32 given.
    let rc = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = iovs.as_mut_ptr();
        msg.msg_iovlen = iovs.len() as _;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(2) as _;
        let header = libc::CMSG_FIRSTHDR(&msg);
        (*header).cmsg_level = libc::SOL_UDP;
        (*header).cmsg_type = UDP_SEGMENT;
        (*header).cmsg_len = libc::CMSG_LEN(2) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<u16>(), SIZE as u16);
        libc::sendmsg(socket.as_raw_fd(), &msg, libc::MSG_DONTWAIT)
    };
    if rc > 0 {
        packets.len()
    } else {
        0
    }
}

fn receive_batch(socket: &UdpSocket, buffers: &mut [[u8; 2048]]) -> usize {
    let mut total = 0;
    loop {
        let mut iovs: Vec<libc::iovec> = buffers
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: as in send_batch, for receiving.
        let mut headers: Vec<libc::mmsghdr> = iovs
            .iter_mut()
            .map(|iov| {
                let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
                h.msg_hdr.msg_iov = iov;
                h.msg_hdr.msg_iovlen = 1;
                h
            })
            .collect();
        let n = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                headers.as_mut_ptr(),
                headers.len() as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n <= 0 {
            return total;
        }
        total += n as usize;
        if (n as usize) < buffers.len() {
            return total;
        }
    }
}
