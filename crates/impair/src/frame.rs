//! Just enough of an Ethernet frame's layout to corrupt its payload and not its headers:
//! `--corrupt` flips one bit after the TCP or UDP header (after the IP header for other
//! protocols), so that the frame still reaches the receiver's transport layer, whose
//! checksum is what must catch it. Frames come from the wire: every offset is checked
//! against the frame's length before it is read.

use std::ops::Range;

const ETHERNET_HEADER: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const PROTOCOL_TCP: u8 = 6;
const PROTOCOL_UDP: u8 = 17;

fn u16_at(frame: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]))
}

/// The bytes of `frame` that are payload: after the transport header for TCP and UDP over
/// IPv4 or IPv6 (without extension headers), after the IP header for other IP protocols,
/// after the Ethernet header otherwise. Empty when the frame has no such bytes.
pub fn payload_range(frame: &[u8]) -> Range<usize> {
    let end = frame.len();
    let empty = end..end;
    let mut at = ETHERNET_HEADER;
    let Some(mut ethertype) = u16_at(frame, 12) else {
        return empty;
    };
    if ethertype == ETHERTYPE_VLAN {
        match u16_at(frame, 16) {
            Some(inner) => ethertype = inner,
            None => return empty,
        }
        at += 4;
    }
    let (protocol, transport) = match ethertype {
        ETHERTYPE_IPV4 => {
            let Some(&first) = frame.get(at) else {
                return empty;
            };
            let header = usize::from(first & 0x0f) * 4;
            let Some(&protocol) = frame.get(at + 9) else {
                return empty;
            };
            (protocol, at + header.max(20))
        }
        ETHERTYPE_IPV6 => {
            let Some(&protocol) = frame.get(at + 6) else {
                return empty;
            };
            (protocol, at + 40)
        }
        _ => return at.min(end)..end,
    };
    let payload = match protocol {
        PROTOCOL_UDP => transport + 8,
        PROTOCOL_TCP => match frame.get(transport + 12) {
            Some(&offset) => transport + usize::from(offset >> 4) * 4,
            None => return empty,
        },
        _ => transport,
    };
    payload.min(end)..end
}

/// Where a frame's IP header puts its addresses and its transport header begins.
struct IpLayout {
    addresses: Range<usize>,
    protocol: u8,
    transport: usize,
}

fn ip_layout(frame: &[u8]) -> Option<IpLayout> {
    let mut at = ETHERNET_HEADER;
    let mut ethertype = u16_at(frame, 12)?;
    if ethertype == ETHERTYPE_VLAN {
        ethertype = u16_at(frame, 16)?;
        at += 4;
    }
    let layout = match ethertype {
        ETHERTYPE_IPV4 => {
            let header = usize::from(frame.get(at)? & 0x0f) * 4;
            IpLayout {
                addresses: at + 12..at + 20,
                protocol: *frame.get(at + 9)?,
                transport: at + header.max(20),
            }
        }
        ETHERTYPE_IPV6 => IpLayout {
            addresses: at + 8..at + 40,
            protocol: *frame.get(at + 6)?,
            transport: at + 40,
        },
        _ => return None,
    };
    frame.get(layout.addresses.clone())?;
    Some(layout)
}

/// A key of the transport flow of `frame`: FNV-1a over its IP addresses, protocol and (TCP,
/// UDP) ports. `None` for frames that are not IP (ARP) and for ICMP (neighbour discovery),
/// which belong to no flow a receiver counts. Every offset is checked before it is read.
pub fn flow_key(frame: &[u8]) -> Option<u64> {
    let layout = ip_layout(frame)?;
    let ports = match layout.protocol {
        PROTOCOL_TCP | PROTOCOL_UDP => frame.get(layout.transport..layout.transport + 4)?,
        _ => return None,
    };
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for &byte in frame
        .get(layout.addresses)?
        .iter()
        .chain([layout.protocol].iter())
        .chain(ports)
    {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    Some(hash)
}

/// Bytes of a frame's payload the frame log keeps: enough for a sequence number or an
/// RTP header's, so a frame can be matched to the datagram a receiver counted.
pub const HEAD_BYTES: usize = 8;

/// Who a frame is from and to, and the first bytes of its payload: what the frame log
/// (`--frame-log`) writes of it. Read from the wire: every offset checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameSummary {
    /// The IP protocol and addresses; `None` for frames that are not IP.
    pub ip: Option<(u8, std::net::IpAddr, std::net::IpAddr)>,
    /// The source and destination ports of TCP and UDP.
    pub ports: Option<(u16, u16)>,
    pub head: [u8; HEAD_BYTES],
    pub head_len: u8,
}

/// What the frame log writes of `frame`.
pub fn summarize(frame: &[u8]) -> FrameSummary {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let layout = ip_layout(frame);
    let ip = layout.as_ref().and_then(|l| {
        let bytes = frame.get(l.addresses.clone())?;
        let (source, destination): (IpAddr, IpAddr) = if bytes.len() == 8 {
            let v4 = |b: &[u8]| Ipv4Addr::new(b[0], b[1], b[2], b[3]).into();
            (v4(&bytes[..4]), v4(&bytes[4..]))
        } else {
            let v6 = |b: &[u8]| {
                let octets: [u8; 16] = b.try_into().unwrap_or([0; 16]);
                Ipv6Addr::from(octets).into()
            };
            (v6(&bytes[..16]), v6(&bytes[16..]))
        };
        Some((l.protocol, source, destination))
    });
    let ports = layout.as_ref().and_then(|l| match l.protocol {
        PROTOCOL_TCP | PROTOCOL_UDP => {
            Some((u16_at(frame, l.transport)?, u16_at(frame, l.transport + 2)?))
        }
        _ => None,
    });
    let payload = frame.get(payload_range(frame)).unwrap_or_default();
    let mut head = [0u8; HEAD_BYTES];
    let head_len = payload.len().min(HEAD_BYTES);
    head[..head_len].copy_from_slice(&payload[..head_len]);
    FrameSummary {
        ip,
        ports,
        head,
        head_len: head_len as u8,
    }
}

/// Sets the DSCP of an IP frame's header to `dscp` and keeps its ECN field (`--remark`):
/// the IPv4 TOS byte, with the header checksum brought up to date (RFC 1624), or the IPv6
/// traffic class. False for a frame that is not IP or already carries `dscp`.
pub fn remark(frame: &mut [u8], dscp: u8) -> bool {
    rewrite_traffic_class(frame, |old| (dscp << 2) | (old & 0b11))
}

/// Marks an ECN-capable IP frame Congestion Experienced (RFC 3168), as an AQM does in
/// place of a drop; true when the frame is CE now (it was ECT(0), ECT(1) or CE), false
/// for a frame that is not ECN-capable or not IP, which the AQM drops instead.
pub fn mark_ce(frame: &mut [u8]) -> bool {
    let mut capable = false;
    rewrite_traffic_class(frame, |old| {
        capable = old & 0b11 != 0;
        if capable {
            old | 0b11
        } else {
            old
        }
    });
    capable
}

/// Rewrites the TOS byte (IPv4, its header checksum brought up to date by RFC 1624) or the
/// traffic class (IPv6) as `to` says; false when the frame is not IP or `to` left it as
/// it was.
fn rewrite_traffic_class(frame: &mut [u8], mut to: impl FnMut(u8) -> u8) -> bool {
    let mut at = ETHERNET_HEADER;
    let Some(mut ethertype) = u16_at(frame, 12) else {
        return false;
    };
    if ethertype == ETHERTYPE_VLAN {
        let Some(inner) = u16_at(frame, 16) else {
            return false;
        };
        ethertype = inner;
        at += 4;
    }
    match ethertype {
        ETHERTYPE_IPV4 => {
            if frame.len() < at + 20 || frame[at] >> 4 != 4 {
                return false;
            }
            let old = frame[at + 1];
            let new = to(old);
            if old == new {
                return false;
            }
            // The checksum covers 16-bit words: the TOS is the low byte of the first.
            let old_word = u16::from_be_bytes([frame[at], old]);
            let new_word = u16::from_be_bytes([frame[at], new]);
            let checksum = u16::from_be_bytes([frame[at + 10], frame[at + 11]]);
            // HC' = ~(~HC + ~m + m'), in ones' complement arithmetic.
            let mut sum = u32::from(!checksum) + u32::from(!old_word) + u32::from(new_word);
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            frame[at + 1] = new;
            frame[at + 10..at + 12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
            true
        }
        ETHERTYPE_IPV6 => {
            if frame.len() < at + 40 || frame[at] >> 4 != 6 {
                return false;
            }
            // Version (4 bits), traffic class (8), flow label (20).
            let class = (frame[at] << 4) | (frame[at + 1] >> 4);
            let new = to(class);
            if class == new {
                return false;
            }
            frame[at] = 0x60 | (new >> 4);
            frame[at + 1] = (new << 4) | (frame[at + 1] & 0x0f);
            true
        }
        _ => false,
    }
}

/// Flips the bit `pick` chooses (modulo the payload's bits); false for a frame without
/// payload.
pub fn flip_payload_bit(frame: &mut [u8], pick: u64) -> bool {
    let range = payload_range(frame);
    let bits = (range.len() as u64) * 8;
    if bits == 0 {
        return false;
    }
    let bit = pick % bits;
    frame[range.start + (bit / 8) as usize] ^= 1 << (bit % 8);
    true
}

/// A frame the hosts' offloads left whole (docs/impair.md, `--offloads`): a
/// `virtio_net_hdr` of [`VNET_HEADER`](crate::ring::VNET_HEADER) bytes, then an Ethernet
/// frame that may be a segment of up to 64 KB for the kernel to cut into frames as it
/// leaves. Read from the wire like any frame: every offset is checked.
#[derive(Debug, Clone, Default)]
pub struct Offloaded(pub Vec<u8>);

/// `virtio_net_hdr.gso_type`: not a segment to cut.
const GSO_NONE: u8 = 0;

impl Offloaded {
    fn ethernet(&self) -> &[u8] {
        self.0.get(crate::ring::VNET_HEADER..).unwrap_or_default()
    }

    /// The frames it leaves as, and their bytes on the wire: each frame repeats the
    /// headers before the payload, and carries at most `gso_size` bytes of it.
    pub fn frames(&self) -> (usize, usize) {
        let frame = self.ethernet();
        let gso_type = self.0.get(1).copied().unwrap_or(GSO_NONE);
        let gso_size = match (self.0.get(4), self.0.get(5)) {
            (Some(&low), Some(&high)) => usize::from(u16::from_le_bytes([low, high])),
            _ => 0,
        };
        let headers = payload_range(frame).start;
        let payload = frame.len() - headers;
        if gso_type == GSO_NONE || gso_size == 0 || payload <= gso_size {
            return (1, frame.len());
        }
        let frames = payload.div_ceil(gso_size);
        (frames, frame.len() + (frames - 1) * headers)
    }
}

impl AsRef<[u8]> for Offloaded {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// A frame the link carries: its length decides its time on the bottleneck; corruption
/// flips one bit of its payload.
pub trait Frame: Clone {
    /// Bytes on the wire (Ethernet header included, no preamble or FCS).
    fn wire_len(&self) -> usize;
    /// Frames on the wire: more than one for a segment the kernel cuts into frames as it
    /// leaves (offloads).
    fn wire_frames(&self) -> usize {
        1
    }
    /// Flips one bit of the payload chosen by `pick`; false when the frame has no byte to
    /// flip.
    fn flip_bit(&mut self, pick: u64) -> bool;
    /// Sets the DSCP of its IP header (`--remark`); false when it is not IP or had it.
    fn remark(&mut self, dscp: u8) -> bool;
    /// Marks it Congestion Experienced (an AQM with ECN); false when it is not
    /// ECN-capable, which the AQM then drops.
    fn mark_ce(&mut self) -> bool;
    /// A key of the transport flow (addresses, protocol, ports) the frame belongs to;
    /// `None` for frames of no flow (neighbour discovery, ARP). Reordering is counted only
    /// between frames of one flow, as the flow's receiver sees it.
    fn flow(&self) -> Option<u64>;
    /// Who it is from and to and how its payload begins, for the frame log.
    fn summary(&self) -> FrameSummary;
}

impl Frame for Vec<u8> {
    fn wire_len(&self) -> usize {
        self.len()
    }

    fn flip_bit(&mut self, pick: u64) -> bool {
        flip_payload_bit(self, pick)
    }

    fn remark(&mut self, dscp: u8) -> bool {
        remark(self, dscp)
    }

    fn mark_ce(&mut self) -> bool {
        mark_ce(self)
    }

    fn flow(&self) -> Option<u64> {
        flow_key(self)
    }

    fn summary(&self) -> FrameSummary {
        summarize(self)
    }
}

/// An offloaded segment is on the wire as the frames the kernel cuts it into.
impl Frame for Offloaded {
    fn wire_len(&self) -> usize {
        self.frames().1
    }

    fn wire_frames(&self) -> usize {
        self.frames().0
    }

    fn flip_bit(&mut self, pick: u64) -> bool {
        match self.0.get_mut(crate::ring::VNET_HEADER..) {
            Some(frame) => flip_payload_bit(frame, pick),
            None => false,
        }
    }

    /// The segment's one IP header, which the kernel copies into every frame it cuts.
    fn remark(&mut self, dscp: u8) -> bool {
        match self.0.get_mut(crate::ring::VNET_HEADER..) {
            Some(frame) => remark(frame, dscp),
            None => false,
        }
    }

    /// The one IP header the kernel copies into every frame: all of them CE.
    fn mark_ce(&mut self) -> bool {
        match self.0.get_mut(crate::ring::VNET_HEADER..) {
            Some(frame) => mark_ce(frame),
            None => false,
        }
    }

    fn flow(&self) -> Option<u64> {
        flow_key(self.0.get(crate::ring::VNET_HEADER..)?)
    }

    fn summary(&self) -> FrameSummary {
        summarize(self.0.get(crate::ring::VNET_HEADER..).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn udp_frame(payload: usize) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8 + payload];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        f[14] = 0x45;
        f[14 + 9] = PROTOCOL_UDP;
        f
    }

    #[test]
    fn udp_payload_starts_after_the_udp_header() {
        assert_eq!(payload_range(&udp_frame(100)), 42..142);
        let mut f = udp_frame(100);
        assert!(flip_payload_bit(&mut f, 9));
        assert_eq!(f[43], 2, "bit 9 of the payload is bit 1 of its second byte");
        assert!(f[..42]
            .iter()
            .skip(15)
            .all(|&b| b == 0 || b == PROTOCOL_UDP));
    }

    /// A UDP frame's summary: its protocol, addresses and ports as the wire has them and
    /// the first eight bytes of its payload; a frame that is not IP has neither.
    #[test]
    fn a_udp_frame_is_summarized_by_its_addresses_ports_and_payloads_head() {
        let mut f = udp_frame(12);
        f[26..30].copy_from_slice(&[10, 77, 0, 1]);
        f[30..34].copy_from_slice(&[10, 77, 0, 2]);
        f[34..36].copy_from_slice(&40_000u16.to_be_bytes());
        f[36..38].copy_from_slice(&5_201u16.to_be_bytes());
        f[42..54].copy_from_slice(b"0123456789ab");
        let summary = summarize(&f);
        let (protocol, source, destination) = summary.ip.expect("IPv4");
        assert_eq!(protocol, PROTOCOL_UDP);
        assert_eq!(source.to_string(), "10.77.0.1");
        assert_eq!(destination.to_string(), "10.77.0.2");
        assert_eq!(summary.ports, Some((40_000, 5_201)));
        assert_eq!(&summary.head[..usize::from(summary.head_len)], b"01234567");
        let short = summarize(&udp_frame(3));
        assert_eq!(short.head_len, 3);
        let mut arp = udp_frame(8);
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(summarize(&arp).ip, None);
        assert_eq!(summarize(&arp).ports, None);
    }

    /// The sum of an IPv4 header's 16-bit words in ones' complement: 0xffff when its
    /// checksum is right.
    fn header_sum(header: &[u8]) -> u16 {
        let mut sum: u32 = header
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum as u16
    }

    proptest! {
        /// A re-marked IPv4 header carries the new DSCP, its ECN field as it was, and a
        /// checksum that is right again; every other byte is untouched.
        #[test]
        fn a_remarked_ipv4_header_keeps_its_ecn_field_and_a_right_checksum(
            header in proptest::collection::vec(any::<u8>(), 20),
            dscp in 0u8..64,
        ) {
            let mut f = udp_frame(4);
            f[14..34].copy_from_slice(&header);
            f[14] = 0x45;
            f[24..26].fill(0);
            let sum = !header_sum(&f[14..34]);
            f[24..26].copy_from_slice(&sum.to_be_bytes());
            prop_assert_eq!(header_sum(&f[14..34]), 0xffff);
            let before = f.clone();
            let changed = remark(&mut f, dscp);
            prop_assert_eq!(changed, before[15] >> 2 != dscp);
            prop_assert_eq!(f[15] >> 2, dscp);
            prop_assert_eq!(f[15] & 3, before[15] & 3);
            prop_assert_eq!(header_sum(&f[14..34]), 0xffff);
            for i in (0..f.len()).filter(|i| ![15, 24, 25].contains(i)) {
                prop_assert_eq!(f[i], before[i]);
            }
        }

        /// Any bytes at all: re-marking reads nothing past the frame.
        #[test]
        fn remark_takes_any_bytes(mut bytes in proptest::collection::vec(any::<u8>(), 0..80), dscp in 0u8..64) {
            remark(&mut bytes, dscp);
            mark_ce(&mut bytes);
        }

        /// CE goes only on an ECN-capable header, whose DSCP and checksum stay right; a
        /// Not-ECT one is left as it was, for the AQM to drop.
        #[test]
        fn only_an_ecn_capable_header_is_marked_ce(tos in any::<u8>(), id in any::<u16>()) {
            let mut f = udp_frame(4);
            f[15] = tos;
            f[18..20].copy_from_slice(&id.to_be_bytes());
            f[24..26].fill(0);
            let sum = !header_sum(&f[14..34]);
            f[24..26].copy_from_slice(&sum.to_be_bytes());
            let before = f.clone();
            let capable = tos & 3 != 0;
            prop_assert_eq!(mark_ce(&mut f), capable);
            if capable {
                prop_assert_eq!(f[15], tos | 3);
            } else {
                prop_assert_eq!(&f, &before);
            }
            prop_assert_eq!(header_sum(&f[14..34]), 0xffff);
        }
    }

    #[test]
    fn a_remarked_ipv6_header_keeps_its_version_flow_label_and_ecn_field() {
        let mut f = vec![0u8; 14 + 40 + 8];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        // Version 6, traffic class 0xb9 (EF, ECT(1)), flow label 0xabcde.
        f[14..18].copy_from_slice(&[0x6b, 0x9a, 0xbc, 0xde]);
        assert!(remark(&mut f, 0));
        assert_eq!(&f[14..18], &[0x60, 0x1a, 0xbc, 0xde]);
        assert!(!remark(&mut f, 0), "already BE");
    }

    #[test]
    fn tcp_payload_starts_after_the_data_offset() {
        let mut f = vec![0u8; 14 + 20 + 32 + 10];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        f[14] = 0x45;
        f[14 + 9] = PROTOCOL_TCP;
        f[14 + 20 + 12] = 8 << 4;
        assert_eq!(payload_range(&f), 66..76);
        // A bare ACK has nothing to corrupt.
        f.truncate(66);
        assert!(!flip_payload_bit(&mut f, 3));
    }

    #[test]
    fn frames_of_one_flow_share_a_key_and_others_do_not() {
        let mut a = udp_frame(10);
        a[14 + 20..14 + 24].copy_from_slice(&[0x13, 0x88, 0x13, 0x89]);
        let mut b = a.clone();
        b[50] = 7; // another payload, the same flow
        assert_eq!(flow_key(&a), flow_key(&b));
        assert!(flow_key(&a).is_some());
        b[14 + 21] ^= 1; // another source port
        assert_ne!(flow_key(&a), flow_key(&b));
        // ICMP and ARP are no flow.
        let mut icmp = a.clone();
        icmp[14 + 9] = 1;
        assert_eq!(flow_key(&icmp), None);
        let mut arp = a.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(flow_key(&arp), None);
        // Too short to hold the ports.
        assert_eq!(flow_key(&a[..14 + 20 + 2]), None);
    }

    /// A TCP segment of `payload` bytes behind a `virtio_net_hdr` of `gso_type` and
    /// `gso_size`, with 12 bytes of TCP options (a 66-byte header set).
    fn offloaded_tcp(payload: usize, gso_type: u8, gso_size: u16) -> Offloaded {
        let mut f = vec![0u8; crate::ring::VNET_HEADER + 14 + 20 + 32 + payload];
        f[1] = gso_type;
        f[4..6].copy_from_slice(&gso_size.to_le_bytes());
        let e = crate::ring::VNET_HEADER;
        f[e + 12..e + 14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        f[e + 14] = 0x45;
        f[e + 14 + 9] = PROTOCOL_TCP;
        f[e + 14 + 20 + 12] = 8 << 4;
        Offloaded(f)
    }

    #[test]
    fn an_offloaded_segment_is_counted_as_the_frames_it_leaves_as() {
        // 64,000 bytes cut at 1,448: 44 whole frames and one of 288, each with the
        // 66 bytes of headers.
        let segment = offloaded_tcp(64_000, 1, 1448);
        assert_eq!(segment.frames(), (45, 66 + 64_000 + 44 * 66));
        // Exactly two frames' worth.
        assert_eq!(offloaded_tcp(2896, 1, 1448).frames(), (2, 2 * (66 + 1448)));
        // Not a segment to cut (an ACK, or a frame under one MTU): itself.
        assert_eq!(offloaded_tcp(0, 0, 0).frames(), (1, 66));
        assert_eq!(offloaded_tcp(1000, 1, 1448).frames(), (1, 1066));
        assert_eq!(offloaded_tcp(5000, 0, 1448).frames(), (1, 5066));
    }

    proptest! {
        /// Any bytes as an offloaded frame: counted without a panic, at least as one frame
        /// of its own length.
        #[test]
        fn any_offloaded_bytes_are_counted(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let frame = Offloaded(bytes.clone());
            let (frames, wire) = frame.frames();
            prop_assert!(frames >= 1);
            prop_assert!(wire >= bytes.len().saturating_sub(crate::ring::VNET_HEADER));
            let _ = flow_key(frame.ethernet());
        }

        #[test]
        fn any_bytes_have_a_flow_key_or_none(frame in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = flow_key(&frame);
        }

        /// Any bytes: summarized without reading past them, the head no longer than the
        /// frame's payload, and ports only where there are addresses.
        #[test]
        fn any_bytes_are_summarized_within_them(frame in proptest::collection::vec(any::<u8>(), 0..120)) {
            let summary = summarize(&frame);
            prop_assert!(usize::from(summary.head_len) <= HEAD_BYTES);
            prop_assert!(usize::from(summary.head_len) <= payload_range(&frame).len());
            prop_assert!(summary.ports.is_none() || summary.ip.is_some());
        }

        #[test]
        fn any_bytes_give_a_range_inside_the_frame(frame in proptest::collection::vec(any::<u8>(), 0..200), pick: u64) {
            let range = payload_range(&frame);
            prop_assert!(range.start <= range.end && range.end == frame.len());
            let mut copy = frame.clone();
            let flipped = flip_payload_bit(&mut copy, pick);
            let differing = frame.iter().zip(&copy).filter(|(a, b)| a != b).count();
            prop_assert_eq!(differing, usize::from(flipped));
        }
    }
}
