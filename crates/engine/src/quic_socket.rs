//! QUIC's UDP socket for a marked test (`--quic` with `--dscp` or `--ecn`).
//!
//! quinn's own socket layer (quinn-udp) writes each datagram's whole TOS byte (IPv6:
//! traffic class) from the ECN code point alone, in a control message on every send, so a
//! DSCP set on the socket never reaches the wire; and on receipt it keeps only the ECN
//! bits. A marked test's endpoints use this socket instead: its sends carry the test's
//! DSCP beside the ECN code point quinn chose (ECT(0) while quinn's ECN validation holds,
//! RFC 9000 section 13.4), and its receives count every datagram by the TOS byte it
//! arrived with, so the result can say what the path did to the marks, each way (the
//! datagrams a side receives all travelled towards it: data, acknowledgements and the
//! handshake alike).
//!
//! The socket is set up by quinn-udp's [`quinn::udp::UdpSocketState`] (IP_RECVTOS,
//! packet info, GRO, don't-fragment), whose segment limits it reports; the system calls
//! (sendmsg with IP_TOS, UDP_SEGMENT and packet info; recvmsg reading them back) are this
//! module's, as quinn-udp offers no way to set the DSCP. Unmarked QUIC tests keep
//! quinn's socket.

use linerate_model::marks::ClassTally;
use quinn::udp::{EcnCodepoint, RecvMeta, Transmit, UdpSocketState};
use quinn::{AsyncUdpSocket, UdpPoller};
use std::future::Future;
use std::io::{self, IoSliceMut};
use std::mem::size_of;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use tokio::io::Interest;

/// Room for the control messages of one datagram: the TOS byte, the segment size or the
/// GRO stride, and IPv6 packet info (the largest), each with its header, and spare.
const CONTROL_LEN: usize = 128;

/// A control-message buffer aligned as `cmsghdr` needs.
#[repr(C, align(8))]
struct Control([u8; CONTROL_LEN]);

/// A QUIC endpoint's socket that sets the test's DSCP on every datagram it sends and
/// counts the TOS bytes of those it receives.
#[derive(Debug)]
pub(crate) struct MarkedSocket {
    io: tokio::net::UdpSocket,
    state: UdpSocketState,
    /// The DSCP in the TOS byte's high six bits.
    dscp_bits: u8,
    /// False once the device refused a segmented send: one datagram a send from then on.
    segmenting: AtomicBool,
    /// An IPv6 socket, which reaches IPv4 peers at their IPv4-mapped addresses (known
    /// once, not asked of the kernel a send).
    ipv6: bool,
    arrived: Arc<Mutex<ClassTally>>,
}

impl MarkedSocket {
    /// Wraps `socket` (inside a tokio runtime) to send with `dscp`; what arrives is
    /// counted into `arrived`.
    pub(crate) fn new(
        socket: std::net::UdpSocket,
        dscp: u8,
        arrived: Arc<Mutex<ClassTally>>,
    ) -> io::Result<MarkedSocket> {
        let state = UdpSocketState::new((&socket).into())?;
        let ipv6 = socket.local_addr()?.is_ipv6();
        Ok(MarkedSocket {
            io: tokio::net::UdpSocket::from_std(socket)?,
            state,
            dscp_bits: (dscp & 0x3f) << 2,
            segmenting: AtomicBool::new(true),
            ipv6,
            arrived,
        })
    }

    /// The TOS byte of a datagram quinn sends with `ecn`.
    fn tos(&self, ecn: Option<EcnCodepoint>) -> u8 {
        self.dscp_bits | ecn.map_or(0, |e| e as u8)
    }

    /// One sendmsg of `transmit`, marked; a datagram the kernel refused for any reason but
    /// a full buffer is lost, as on a path (QUIC recovers it), as quinn-udp does.
    fn send(&self, transmit: &Transmit) -> io::Result<()> {
        let destination = self.destination(transmit.destination);
        let segment = transmit
            .segment_size
            .filter(|&size| size > 0 && size < transmit.contents.len());
        loop {
            match send_marked(
                &self.io,
                destination,
                transmit.contents,
                self.tos(transmit.ecn),
                segment,
                transmit.src_ip,
            ) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Err(e),
                Err(e) => {
                    // A device that cannot segment answers EIO (or EINVAL): the batch is
                    // lost and the endpoint sends one datagram at a time from now on.
                    if segment.is_some()
                        && matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL))
                    {
                        self.segmenting.store(false, Ordering::Relaxed);
                    }
                    return Ok(());
                }
            }
        }
    }

    /// `to` as this socket's family addresses it: an IPv6 socket reaches an IPv4 peer at
    /// its IPv4-mapped address.
    fn destination(&self, to: SocketAddr) -> SocketAddr {
        match to {
            SocketAddr::V4(v4) if self.ipv6 => {
                SocketAddr::new(IpAddr::V6(v4.ip().to_ipv6_mapped()), v4.port())
            }
            _ => to,
        }
    }

    /// One recvmsg into `buf`, counted by its TOS byte.
    fn receive(&self, buf: &mut IoSliceMut<'_>) -> io::Result<RecvMeta> {
        let received = receive_marked(&self.io, buf)?;
        if let Some(tos) = received.tos {
            let datagrams = received.len.div_ceil(received.stride.max(1)).max(1);
            self.arrived
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .add(tos, datagrams as u64);
        }
        Ok(RecvMeta {
            addr: received.from,
            len: received.len,
            stride: received.stride,
            ecn: received.tos.and_then(EcnCodepoint::from_bits),
            dst_ip: received.to,
        })
    }
}

impl AsyncUdpSocket for MarkedSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(Writable {
            socket: self,
            waiting: None,
        })
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        self.io.try_io(Interest::WRITABLE, || self.send(transmit))
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let (Some(buf), Some(slot)) = (bufs.first_mut(), meta.first_mut()) else {
            return Poll::Ready(Ok(0));
        };
        loop {
            ready!(self.io.poll_recv_ready(cx))?;
            if let Ok(received) = self.io.try_io(Interest::READABLE, || self.receive(buf)) {
                *slot = received;
                return Poll::Ready(Ok(1));
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        if self.segmenting.load(Ordering::Relaxed) {
            self.state.max_gso_segments()
        } else {
            1
        }
    }

    fn max_receive_segments(&self) -> usize {
        self.state.gro_segments()
    }

    fn may_fragment(&self) -> bool {
        self.state.may_fragment()
    }
}

/// Waits for the socket to be writable (quinn asks after a send found its buffer full).
struct Writable {
    socket: Arc<MarkedSocket>,
    waiting: Option<Pin<Box<dyn Future<Output = io::Result<()>> + Send + Sync>>>,
}

impl std::fmt::Debug for Writable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Writable")
    }
}

impl UdpPoller for Writable {
    fn poll_writable(mut self: Pin<&mut Self>, cx: &mut Context) -> Poll<io::Result<()>> {
        if self.waiting.is_none() {
            let socket = self.socket.clone();
            self.waiting = Some(Box::pin(async move { socket.io.writable().await }));
        }
        let result = ready!(self
            .waiting
            .as_mut()
            .expect("set just above")
            .as_mut()
            .poll(cx));
        self.waiting = None;
        Poll::Ready(result)
    }
}

/// Appends a control message of `level` and `kind` carrying `value` to `header`'s control
/// buffer, whose length so far is `*used`.
///
/// # Safety
/// `header.msg_control` points to a buffer of `CONTROL_LEN` bytes aligned for `cmsghdr`,
/// and `*used` plus this message's space fits in it.
unsafe fn push_control<T: Copy>(
    header: &mut libc::msghdr,
    used: &mut usize,
    level: libc::c_int,
    kind: libc::c_int,
    value: T,
) {
    // SAFETY: the caller's promise: the message lands inside the aligned buffer.
    unsafe {
        let space = libc::CMSG_SPACE(size_of::<T>() as u32) as usize;
        debug_assert!(*used + space <= CONTROL_LEN);
        header.msg_controllen = (*used + space) as _;
        let cmsg = header
            .msg_control
            .cast::<u8>()
            .add(*used)
            .cast::<libc::cmsghdr>();
        (*cmsg).cmsg_level = level;
        (*cmsg).cmsg_type = kind;
        (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<T>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<T>(), value);
        *used += space;
    }
}

/// Sends `contents` to `to` with TOS byte `tos` (as IP_TOS to an IPv4 or IPv4-mapped
/// peer, IPV6_TCLASS otherwise), in `segment`-sized datagrams when given (UDP_SEGMENT),
/// from `source` when given (packet info).
fn send_marked(
    socket: &tokio::net::UdpSocket,
    to: SocketAddr,
    contents: &[u8],
    tos: u8,
    segment: Option<usize>,
    source: Option<IpAddr>,
) -> io::Result<()> {
    let address = socket2::SockAddr::from(to);
    let to_ipv4 = match to.ip() {
        IpAddr::V4(_) => true,
        IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some(),
    };
    let mut control = Control([0; CONTROL_LEN]);
    let mut iov = libc::iovec {
        iov_base: contents.as_ptr() as *mut libc::c_void,
        iov_len: contents.len(),
    };
    // SAFETY: every pointer in the header is to a live local (the address, the one iovec,
    // the aligned control buffer) that outlives the call; the three control messages
    // together take under CONTROL_LEN bytes; the kernel only reads them.
    let sent = unsafe {
        let mut header: libc::msghdr = std::mem::zeroed();
        header.msg_name = address.as_ptr() as *mut libc::c_void;
        header.msg_namelen = address.len();
        header.msg_iov = &mut iov;
        header.msg_iovlen = 1;
        header.msg_control = control.0.as_mut_ptr().cast();
        let mut used = 0;
        if to_ipv4 {
            push_control(
                &mut header,
                &mut used,
                libc::IPPROTO_IP,
                libc::IP_TOS,
                libc::c_int::from(tos),
            );
        } else {
            push_control(
                &mut header,
                &mut used,
                libc::IPPROTO_IPV6,
                libc::IPV6_TCLASS,
                libc::c_int::from(tos),
            );
        }
        if let Some(segment) = segment {
            let size = u16::try_from(segment).unwrap_or(u16::MAX);
            push_control(
                &mut header,
                &mut used,
                libc::SOL_UDP,
                libc::UDP_SEGMENT,
                size,
            );
        }
        match source {
            Some(IpAddr::V4(ip)) => {
                let info = libc::in_pktinfo {
                    ipi_ifindex: 0,
                    ipi_spec_dst: libc::in_addr {
                        s_addr: u32::from_ne_bytes(ip.octets()),
                    },
                    ipi_addr: libc::in_addr { s_addr: 0 },
                };
                push_control(
                    &mut header,
                    &mut used,
                    libc::IPPROTO_IP,
                    libc::IP_PKTINFO,
                    info,
                );
            }
            Some(IpAddr::V6(ip)) => {
                let info = libc::in6_pktinfo {
                    ipi6_addr: libc::in6_addr {
                        s6_addr: ip.octets(),
                    },
                    ipi6_ifindex: 0,
                };
                push_control(
                    &mut header,
                    &mut used,
                    libc::IPPROTO_IPV6,
                    libc::IPV6_PKTINFO,
                    info,
                );
            }
            None => {}
        }
        libc::sendmsg(socket.as_raw_fd(), &header, 0)
    };
    if sent < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// What one recvmsg gave.
#[derive(Debug, Clone, Copy)]
struct Received {
    from: SocketAddr,
    len: usize,
    /// The datagram size of a coalesced run (GRO); `len` for a single datagram.
    stride: usize,
    tos: Option<u8>,
    to: Option<IpAddr>,
}

/// Receives one datagram (or a run the kernel coalesced) into `buf`, with its sender, its
/// TOS byte or traffic class, its GRO stride and the address it was sent to.
fn receive_marked(
    socket: &tokio::net::UdpSocket,
    buf: &mut IoSliceMut<'_>,
) -> io::Result<Received> {
    let mut control = Control([0; CONTROL_LEN]);
    // SAFETY: a zeroed sockaddr_storage is a valid value of its type.
    let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: the header points to live locals (the address storage, one iovec over
    // `buf`, the aligned control buffer) with their true sizes; the kernel writes within
    // them and says how much in the lengths read back below.
    let (len, header) = unsafe {
        let mut header: libc::msghdr = std::mem::zeroed();
        header.msg_name = (&mut from as *mut libc::sockaddr_storage).cast();
        header.msg_namelen = size_of::<libc::sockaddr_storage>() as _;
        header.msg_iov = &mut iov;
        header.msg_iovlen = 1;
        header.msg_control = control.0.as_mut_ptr().cast();
        header.msg_controllen = CONTROL_LEN as _;
        let len = libc::recvmsg(socket.as_raw_fd(), &mut header, 0);
        (len, header)
    };
    if len < 0 {
        return Err(io::Error::last_os_error());
    }
    let len = len as usize;
    // SAFETY: the kernel wrote a socket address of `msg_namelen` bytes into `from`.
    let from = unsafe { socket2::SockAddr::new(from, header.msg_namelen) }
        .as_socket()
        .ok_or_else(|| io::Error::other("a datagram from an address that is not IP"))?;
    let mut received = Received {
        from,
        len,
        stride: len,
        tos: None,
        to: None,
    };
    // SAFETY: the CMSG macros walk the control buffer the kernel filled, within the
    // `msg_controllen` it set; each message of a level and kind carries the type read.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&header);
        while !cmsg.is_null() {
            let data = libc::CMSG_DATA(cmsg);
            match ((*cmsg).cmsg_level, (*cmsg).cmsg_type) {
                // IPv4's TOS comes as one byte, IPv6's traffic class as an int.
                (libc::IPPROTO_IP, libc::IP_TOS) => received.tos = Some(*data),
                (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                    let class = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                    received.tos = u8::try_from(class).ok();
                }
                (libc::SOL_UDP, libc::UDP_GRO) => {
                    let stride = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                    if let Ok(stride) = usize::try_from(stride) {
                        if stride > 0 {
                            received.stride = stride;
                        }
                    }
                }
                (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                    let info = std::ptr::read_unaligned(data.cast::<libc::in_pktinfo>());
                    received.to = Some(IpAddr::from(info.ipi_addr.s_addr.to_ne_bytes()));
                }
                (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                    let info = std::ptr::read_unaligned(data.cast::<libc::in6_pktinfo>());
                    received.to = Some(IpAddr::from(info.ipi6_addr.s6_addr));
                }
                _ => {}
            }
            cmsg = libc::CMSG_NXTHDR(&header, cmsg);
        }
    }
    Ok(received)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A segmented send with a DSCP arrives as its datagrams, each counted under the TOS
    /// byte made of the DSCP and the ECN code point quinn chose, read back by a plain
    /// socket asking for IP_TOS; and the receiving side's own count agrees.
    #[test]
    fn every_datagram_leaves_with_the_dscp_and_quinns_ecn_and_is_counted_by_its_tos() {
        runtime().block_on(async {
            let sent_tally = Arc::new(Mutex::new(ClassTally::default()));
            let got_tally = Arc::new(Mutex::new(ClassTally::default()));
            let sender = MarkedSocket::new(
                std::net::UdpSocket::bind("127.0.0.1:0").unwrap(),
                46,
                sent_tally,
            )
            .unwrap();
            let receiver = MarkedSocket::new(
                std::net::UdpSocket::bind("127.0.0.1:0").unwrap(),
                0,
                got_tally.clone(),
            )
            .unwrap();
            let to = receiver.local_addr().unwrap();
            let contents = vec![7u8; 3000];
            let segmented = Transmit {
                destination: to,
                ecn: Some(EcnCodepoint::Ect0),
                contents: &contents,
                segment_size: (sender.max_transmit_segments() > 1).then_some(1000),
                src_ip: None,
            };
            let segments = if segmented.segment_size.is_some() {
                3
            } else {
                1
            };
            sender.io.writable().await.unwrap();
            sender.try_send(&segmented).unwrap();
            let single = Transmit {
                destination: to,
                ecn: None,
                contents: &contents[..500],
                segment_size: None,
                src_ip: None,
            };
            sender.io.writable().await.unwrap();
            sender.try_send(&single).unwrap();
            let mut buffer = vec![0u8; 65536];
            let mut ecn_seen = Vec::new();
            let total = |tally: &Mutex<ClassTally>| -> u64 {
                tally
                    .lock()
                    .unwrap()
                    .counts()
                    .iter()
                    .map(|c| c.datagrams)
                    .sum()
            };
            while total(&got_tally) < segments + 1 {
                let mut bufs = [IoSliceMut::new(&mut buffer)];
                let mut meta = [RecvMeta::default()];
                let n = std::future::poll_fn(|cx| receiver.poll_recv(cx, &mut bufs, &mut meta))
                    .await
                    .unwrap();
                assert_eq!(n, 1);
                ecn_seen.push(meta[0].ecn);
                assert_eq!(meta[0].addr, sender.local_addr().unwrap());
                assert_eq!(meta[0].dst_ip, Some(IpAddr::from([127, 0, 0, 1])));
            }
            let counts = got_tally.lock().unwrap().counts();
            let ef_ect0 = counts.iter().find(|c| c.tos == (46 << 2) | 0b10);
            let ef_plain = counts.iter().find(|c| c.tos == 46 << 2);
            assert_eq!(ef_ect0.map(|c| c.datagrams), Some(segments));
            assert_eq!(ef_plain.map(|c| c.datagrams), Some(1));
            assert_eq!(counts.len(), 2, "{counts:?}");
            assert!(ecn_seen.contains(&Some(EcnCodepoint::Ect0)));
            assert!(ecn_seen.contains(&None));
        });
    }

    /// An IPv6 socket marks an IPv4-mapped peer through IP_TOS and a native IPv6 peer
    /// through IPV6_TCLASS: both arrive with the DSCP.
    #[test]
    fn an_ipv6_socket_marks_ipv6_peers_by_traffic_class() {
        let Ok(plain) = std::net::UdpSocket::bind("[::1]:0") else {
            eprintln!("skipped: no IPv6 loopback here");
            return;
        };
        drop(plain);
        runtime().block_on(async {
            let got = Arc::new(Mutex::new(ClassTally::default()));
            let sender = MarkedSocket::new(
                std::net::UdpSocket::bind("[::1]:0").unwrap(),
                10,
                Arc::new(Mutex::new(ClassTally::default())),
            )
            .unwrap();
            let receiver = MarkedSocket::new(
                std::net::UdpSocket::bind("[::1]:0").unwrap(),
                0,
                got.clone(),
            )
            .unwrap();
            let transmit = Transmit {
                destination: receiver.local_addr().unwrap(),
                ecn: Some(EcnCodepoint::Ect1),
                contents: b"marked",
                segment_size: None,
                src_ip: None,
            };
            sender.io.writable().await.unwrap();
            sender.try_send(&transmit).unwrap();
            let mut buffer = vec![0u8; 2048];
            let mut bufs = [IoSliceMut::new(&mut buffer)];
            let mut meta = [RecvMeta::default()];
            std::future::poll_fn(|cx| receiver.poll_recv(cx, &mut bufs, &mut meta))
                .await
                .unwrap();
            assert_eq!(meta[0].len, 6);
            assert_eq!(meta[0].ecn, Some(EcnCodepoint::Ect1));
            let counts = got.lock().unwrap().counts();
            assert_eq!(counts.len(), 1);
            assert_eq!(counts[0].tos, (10 << 2) | 0b01);
        });
    }
}
