//! The probes' bytes and the answers' parsing: UDP payloads, ICMP echo requests, TCP SYNs;
//! ICMP errors quoting them, echo replies, SYN-ACKs and RSTs. Every length read from an
//! answer is checked against the bytes that arrived.

/// The first bytes of a probe's UDP payload and ICMP echo data: tell our probes from
/// anything else a socket sees.
pub const MAGIC: [u8; 4] = *b"LRTR";
/// A UDP probe's payload and an ICMP probe's data: small, as traceroute's.
pub const PROBE_PAYLOAD: usize = 24;
/// A TCP probe's sequence number: this in the high half, the probe's tag in the low.
pub const TCP_SEQUENCE_HIGH: u32 = 0x4c52_0000;

/// A UDP probe's payload: the magic and the tag.
pub fn udp_payload(tag: u16) -> [u8; PROBE_PAYLOAD] {
    let mut payload = [0u8; PROBE_PAYLOAD];
    payload[..4].copy_from_slice(&MAGIC);
    payload[4..6].copy_from_slice(&tag.to_be_bytes());
    payload
}

/// The tag of a UDP probe's payload as an ICMP error returned it (the socket's error
/// queue gives the payload the router quoted); `None` when it is not ours or was cut.
pub fn udp_tag(payload: &[u8]) -> Option<u16> {
    (payload.len() >= 6 && payload[..4] == MAGIC)
        .then(|| u16::from_be_bytes([payload[4], payload[5]]))
}

/// The Internet checksum (RFC 1071) of `parts` taken as one run of bytes.
pub fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum: u32 = 0;
    let mut odd: Option<u8> = None;
    for part in parts {
        for &byte in *part {
            match odd.take() {
                Some(high) => sum += u32::from(u16::from_be_bytes([high, byte])),
                None => odd = Some(byte),
            }
        }
    }
    if let Some(high) = odd {
        sum += u32::from(u16::from_be_bytes([high, 0]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An ICMP (v4: type 8) or ICMPv6 (type 128) echo request of identifier `id` and sequence
/// `tag`. Its data starts with a word that cancels the sequence in the checksum, so every
/// probe of a flow has the same checksum as well as the same identifier: a router that
/// hashes either sends them one way (Paris traceroute). The v4 checksum is filled in; the
/// kernel fills the v6 one.
///
/// `length` pads the message with zeros to that many bytes (`--mtu`'s large probes; the
/// zeros leave the checksum as it was); under the probe's own size it is ignored.
pub fn echo_request(v6: bool, id: u16, tag: u16, length: usize) -> Vec<u8> {
    let mut packet = vec![0u8; length.max(8 + PROBE_PAYLOAD)];
    packet[0] = if v6 { 128 } else { 8 };
    packet[4..6].copy_from_slice(&id.to_be_bytes());
    packet[6..8].copy_from_slice(&tag.to_be_bytes());
    // tag + (0xffff - tag) = 0xffff, which is zero in ones' complement.
    packet[8..10].copy_from_slice(&(0xffff - tag).to_be_bytes());
    packet[10..14].copy_from_slice(&MAGIC);
    if !v6 {
        let sum = checksum(&[&packet]);
        packet[2..4].copy_from_slice(&sum.to_be_bytes());
    }
    packet
}

/// A TCP SYN from `source_port` to `port` carrying `tag` in its sequence number. For IPv4
/// the checksum needs the addresses (the pseudo-header); for IPv6 the kernel fills it.
/// `padding` zero bytes of data follow the header (`--mtu`'s large probes: a SYN may
/// carry data, which the destination acknowledges or drops; the routers forward it as any
/// segment of that size).
pub fn tcp_syn(
    source_port: u16,
    port: u16,
    tag: u16,
    addresses: Option<(std::net::Ipv4Addr, std::net::Ipv4Addr)>,
    padding: usize,
) -> Vec<u8> {
    let mut segment = vec![0u8; 20 + padding];
    segment[0..2].copy_from_slice(&source_port.to_be_bytes());
    segment[2..4].copy_from_slice(&port.to_be_bytes());
    segment[4..8].copy_from_slice(&(TCP_SEQUENCE_HIGH | u32::from(tag)).to_be_bytes());
    segment[12] = 5 << 4;
    segment[13] = 0x02; // SYN
    segment[14..16].copy_from_slice(&65535u16.to_be_bytes());
    if let Some((source, destination)) = addresses {
        let mut pseudo = [0u8; 12];
        pseudo[0..4].copy_from_slice(&source.octets());
        pseudo[4..8].copy_from_slice(&destination.octets());
        pseudo[9] = libc::IPPROTO_TCP as u8;
        let length = u16::try_from(segment.len()).unwrap_or(u16::MAX);
        pseudo[10..12].copy_from_slice(&length.to_be_bytes());
        let sum = checksum(&[&pseudo, &segment]);
        segment[16..18].copy_from_slice(&sum.to_be_bytes());
    }
    segment
}

/// What an ICMP message received on a raw socket says of one of our probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IcmpAnswer {
    /// An echo reply: identifier and sequence.
    EchoReply { id: u16, tag: u16 },
    /// An error quoting one of our probes: the probe's destination, its protocol and the
    /// first eight bytes of its transport header (ports and sequence, or the echo's
    /// identifier and sequence), with the ICMP type and code, and `next_mtu`: in a
    /// "fragmentation needed" (v4) or "packet too big" (v6), the MTU of the router's next
    /// link (0 where the router did not say; unused in other errors).
    Error {
        icmp_type: u8,
        code: u8,
        destination: std::net::IpAddr,
        protocol: u8,
        transport: [u8; 8],
        next_mtu: u32,
    },
}

/// Parses an ICMP message from a raw socket: v4 with its IP header in front (a raw IPv4
/// socket gives it), v6 without (a raw IPv6 socket strips it). `None` for anything that
/// is neither an echo reply nor an error quoting a whole transport header.
pub fn parse_icmp(v6: bool, packet: &[u8]) -> Option<IcmpAnswer> {
    let icmp = if v6 {
        packet
    } else {
        let header = usize::from(packet.first()? & 0x0f) * 4;
        packet.get(header..)?
    };
    let (icmp_type, code) = (*icmp.first()?, *icmp.get(1)?);
    let echo_reply = if v6 { 129 } else { 0 };
    if icmp_type == echo_reply {
        return Some(IcmpAnswer::EchoReply {
            id: u16::from_be_bytes([*icmp.get(4)?, *icmp.get(5)?]),
            tag: u16::from_be_bytes([*icmp.get(6)?, *icmp.get(7)?]),
        });
    }
    let is_error = if v6 {
        matches!(icmp_type, 1..=3)
    } else {
        matches!(icmp_type, 3 | 11)
    };
    if !is_error {
        return None;
    }
    // v4 keeps the next-hop MTU in the word's low half (RFC 1191), v6 in all of it.
    let word = u32::from_be_bytes([*icmp.get(4)?, *icmp.get(5)?, *icmp.get(6)?, *icmp.get(7)?]);
    let next_mtu = if v6 { word } else { word & 0xffff };
    let quoted = icmp.get(8..)?;
    let (destination, protocol, transport_at) = if v6 {
        if quoted.len() < 40 || quoted[0] >> 4 != 6 {
            return None;
        }
        let mut octets = [0u8; 16];
        octets.copy_from_slice(&quoted[24..40]);
        (std::net::IpAddr::from(octets), quoted[6], 40)
    } else {
        if quoted.len() < 20 || quoted[0] >> 4 != 4 {
            return None;
        }
        let header = usize::from(quoted[0] & 0x0f) * 4;
        let octets = [quoted[16], quoted[17], quoted[18], quoted[19]];
        (std::net::IpAddr::from(octets), quoted[9], header)
    };
    let mut transport = [0u8; 8];
    transport.copy_from_slice(quoted.get(transport_at..transport_at + 8)?);
    Some(IcmpAnswer::Error {
        icmp_type,
        code,
        destination,
        protocol,
        transport,
        next_mtu,
    })
}

/// Whether an ICMP error of `icmp_type` and `code` says the probe was larger than a
/// router's next link (v4: fragmentation needed and DF set; v6: packet too big).
pub fn too_big(v6: bool, icmp_type: u8, code: u8) -> bool {
    if v6 {
        icmp_type == 2
    } else {
        (icmp_type, code) == (3, 4)
    }
}

/// What an ICMP error's type and code say of the path: `None` for time exceeded (a
/// router on the way), else why it ends there; `Some("reached")` for the destination's
/// own port unreachable.
pub fn error_words(v6: bool, icmp_type: u8, code: u8) -> Option<&'static str> {
    let time_exceeded = if v6 { 3 } else { 11 };
    if icmp_type == time_exceeded {
        return None;
    }
    Some(match (v6, icmp_type, code) {
        (false, 3, 3) | (true, 1, 4) => "reached",
        (false, 3, 0) | (true, 1, 0) => "network unreachable",
        (false, 3, 1) | (true, 1, 3) => "host unreachable",
        (false, 3, 2) => "protocol unreachable",
        (false, 3, 4) | (true, 2, _) => "fragmentation needed",
        (false, 3, 9 | 10 | 13) | (true, 1, 1 | 5 | 6) => "administratively prohibited",
        _ => "unreachable",
    })
}

/// A TCP segment from a raw socket (v4 with its IP header, v6 without): its source
/// address when the IP header is there, ports, acknowledgement number and flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpAnswer {
    pub source_port: u16,
    pub destination_port: u16,
    pub ack: u32,
    pub syn: bool,
    pub rst: bool,
    pub ack_flag: bool,
}

pub fn parse_tcp(v6: bool, packet: &[u8]) -> Option<TcpAnswer> {
    let segment = if v6 {
        packet
    } else {
        let header = usize::from(packet.first()? & 0x0f) * 4;
        if packet.get(9) != Some(&(libc::IPPROTO_TCP as u8)) {
            return None;
        }
        packet.get(header..)?
    };
    if segment.len() < 20 {
        return None;
    }
    let flags = segment[13];
    Some(TcpAnswer {
        source_port: u16::from_be_bytes([segment[0], segment[1]]),
        destination_port: u16::from_be_bytes([segment[2], segment[3]]),
        ack: u32::from_be_bytes([segment[8], segment[9], segment[10], segment[11]]),
        syn: flags & 0x02 != 0,
        rst: flags & 0x04 != 0,
        ack_flag: flags & 0x10 != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_udp_payload_carries_its_tag() {
        assert_eq!(udp_tag(&udp_payload(0x1e02)), Some(0x1e02));
        assert_eq!(udp_tag(b"LRT"), None);
        assert_eq!(udp_tag(b"XXXX\x01\x02"), None);
    }

    #[test]
    fn an_echo_requests_checksum_is_right_and_the_same_for_every_sequence() {
        let first = echo_request(false, 0x1234, 0x0100, 0);
        assert_eq!(checksum(&[&first]), 0, "a right checksum sums to zero");
        for tag in [0u16, 1, 0x0203, 0xff00, 0xffff] {
            let probe = echo_request(false, 0x1234, tag, 0);
            assert_eq!(checksum(&[&probe]), 0);
            assert_eq!(probe[2..4], first[2..4], "tag {tag:#x}");
            // Padded to a path's MTU: as long as asked, the same checksum, still right.
            let large = echo_request(false, 0x1234, tag, 1472);
            assert_eq!(large.len(), 1472);
            assert_eq!(checksum(&[&large]), 0);
            assert_eq!(large[..first.len()], probe[..]);
        }
    }

    #[test]
    fn a_syns_checksum_covers_the_pseudo_header() {
        let (a, b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let syn = tcp_syn(40000, 80, 0x0301, Some((a, b)), 0);
        let mut pseudo = [0u8; 12];
        pseudo[0..4].copy_from_slice(&a.octets());
        pseudo[4..8].copy_from_slice(&b.octets());
        pseudo[9] = 6;
        pseudo[11] = 20;
        assert_eq!(checksum(&[&pseudo, &syn]), 0);
        // With data to fill a 1500-byte packet, the pseudo-header counts it.
        let large = tcp_syn(40000, 80, 0x0301, Some((a, b)), 1460);
        assert_eq!(large.len(), 1480);
        pseudo[10..12].copy_from_slice(&1480u16.to_be_bytes());
        assert_eq!(checksum(&[&pseudo, &large]), 0);
        assert_eq!(
            u32::from_be_bytes([syn[4], syn[5], syn[6], syn[7]]) & 0xffff,
            0x0301
        );
    }

    /// A v4 time exceeded quoting a UDP probe to 10.9.9.9.
    fn time_exceeded_v4() -> Vec<u8> {
        let mut p = vec![0u8; 20 + 8 + 20 + 8];
        p[0] = 0x45;
        p[9] = 1;
        p[20] = 11;
        let inner = 28;
        p[inner] = 0x45;
        p[inner + 9] = 17;
        p[inner + 16..inner + 20].copy_from_slice(&[10, 9, 9, 9]);
        p[inner + 20..inner + 22].copy_from_slice(&40000u16.to_be_bytes());
        p
    }

    #[test]
    fn an_icmp_error_gives_the_quoted_probe() {
        let Some(IcmpAnswer::Error {
            icmp_type,
            destination,
            protocol,
            transport,
            ..
        }) = parse_icmp(false, &time_exceeded_v4())
        else {
            panic!("an error");
        };
        assert_eq!((icmp_type, protocol), (11, 17));
        assert_eq!(destination, "10.9.9.9".parse::<std::net::IpAddr>().unwrap());
        assert_eq!(u16::from_be_bytes([transport[0], transport[1]]), 40000);
        assert_eq!(error_words(false, 11, 0), None);
        assert_eq!(error_words(false, 3, 3), Some("reached"));
        assert_eq!(error_words(true, 1, 4), Some("reached"));
        assert_eq!(error_words(true, 3, 0), None);
        // Cut anywhere, it is refused, never read past.
        let whole = time_exceeded_v4();
        for len in 0..whole.len() {
            assert_eq!(parse_icmp(false, &whole[..len]), None, "{len}");
        }
    }

    /// A router's "fragmentation needed" names its next link's MTU (v4: the word's low
    /// half); a v6 "packet too big" the whole word.
    #[test]
    fn a_too_big_error_gives_the_next_links_mtu() {
        let mut v4 = time_exceeded_v4();
        v4[20] = 3;
        v4[21] = 4;
        v4[26..28].copy_from_slice(&1400u16.to_be_bytes());
        let Some(IcmpAnswer::Error {
            icmp_type,
            code,
            next_mtu,
            ..
        }) = parse_icmp(false, &v4)
        else {
            panic!("an error");
        };
        assert!(too_big(false, icmp_type, code));
        assert_eq!(next_mtu, 1400);
        assert!(!too_big(false, 11, 0));
        // v6: no IP header in front (the raw socket strips it); the quoted v6 header.
        let mut v6 = vec![0u8; 8 + 40 + 8];
        v6[0] = 2;
        v6[4..8].copy_from_slice(&1280u32.to_be_bytes());
        v6[8] = 0x60;
        v6[8 + 6] = 17;
        let Some(IcmpAnswer::Error {
            icmp_type,
            code,
            next_mtu,
            ..
        }) = parse_icmp(true, &v6)
        else {
            panic!("a v6 error");
        };
        assert!(too_big(true, icmp_type, code));
        assert_eq!(next_mtu, 1280);
    }

    proptest! {
        /// Any bytes at all: the parsers read nothing past what arrived.
        #[test]
        fn parsers_take_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..120), v6 in any::<bool>()) {
            let _ = parse_icmp(v6, &bytes);
            let _ = parse_tcp(v6, &bytes);
            let _ = udp_tag(&bytes);
        }
    }
}
