//! The datagrams of a transfer (docs/transfer-protocol.md 3): data, ACK and the address
//! proof. Every field is a fixed-width big-endian integer; every value is bounded here,
//! where it is parsed, so the cores never see a length, count or range they did not allow.
//!
//! ```text
//! data   type=1 | flags | len u16 | file u32 | session u64 | pn u64 | offset u64
//!        | crc32 u32 | tag 8 | payload
//! ack    type=2 | flags | ranges u16 | file u32 | session u64 | seq u64 | largest u64
//!        | delay_us u32 | backlog u32 | window u64 | verified u64
//!        | (gap u32, len u32) x ranges | [ce u64 when flags has ECN]
//!        | [train_bps u64 when flags has TRAIN] | mac 16
//! hello  type=3 | 0 | 0 u16 | 0 u32 | session u64 | mac 16
//! ```
//!
//! Packet numbers (`pn`) grow by one per datagram sent, retransmissions included; the file
//! offset travels beside them, so an ACK never has to say which copy of a block arrived.
//! ACKs and hellos carry a 16-byte keyed BLAKE3 tag under the session's key: a forged one
//! is dropped before it is read. A data datagram's header carries an 8-byte tag: a header
//! forged or corrupted on the way is dropped, so no false packet number or offset reaches
//! the receiver. Its payload carries a CRC-32: a datagram corrupted on the way (the UDP
//! checksum off, or missing it) is dropped and counted, and comes again like a lost one.
//! The CRC is no defence against a forger; the chunk hashes (sent over the authenticated
//! control connection) decide which bytes are kept.

/// Bytes before a data datagram's payload: 36 of fields, 8 of tag.
pub const DATA_HEADER: usize = field::data::TAG.end;
/// Bytes of a data header's tag.
const DATA_TAG: usize = field::data::TAG.end - field::data::TAG.start;
/// Bytes of an ACK before its ranges.
pub const ACK_HEADER: usize = field::ack::VERIFIED.end;
/// Bytes of a tag.
pub const TAG_LEN: usize = 16;
/// Bytes of a hello datagram.
pub const HELLO_LEN: usize = field::hello::MAC.end;
/// The most ranges one ACK carries (it stays under 1,100 bytes, below any path MTU).
pub const MAX_ACK_RANGES: usize = 128;
/// An ACK's flag: it carries the receiver's count of data datagrams that arrived marked
/// CE (a copy with `--ecn`), after its ranges.
pub const ACK_FLAG_ECN: u8 = 0x01;
/// Bytes of that count.
const ACK_CE: usize = 8;
/// An ACK's flag: it carries the receiver's estimate of the path's rate from the sender's
/// packet train (`train.rs`), bits per second, after the CE count.
pub const ACK_FLAG_TRAIN: u8 = 0x02;
/// Bytes of that estimate.
const ACK_TRAIN: usize = 8;
/// The largest payload a data datagram may carry (a loopback MTU of 64 KiB less headers).
pub const MAX_PAYLOAD: usize = 65_000;

/// Each field's bytes, named once for encoding and parsing (smoltcp's `field` modules).
mod field {
    use std::ops::Range;

    pub const TYPE: usize = 0;
    pub const FLAGS: usize = 1;
    /// Data: the payload's length; ACK: the ranges' count.
    pub const COUNT: Range<usize> = 2..4;
    pub const FILE: Range<usize> = 4..8;
    pub const SESSION: Range<usize> = 8..16;

    /// A data datagram's header.
    pub mod data {
        use std::ops::Range;
        pub const PN: Range<usize> = 16..24;
        pub const OFFSET: Range<usize> = 24..32;
        pub const CRC: Range<usize> = 32..36;
        /// The bytes the header's tag covers, and the tag.
        pub const FIELDS: Range<usize> = 0..36;
        pub const TAG: Range<usize> = 36..44;
    }

    /// An ACK's header; its ranges follow, then its MAC.
    pub mod ack {
        use std::ops::Range;
        pub const SEQ: Range<usize> = 16..24;
        pub const LARGEST: Range<usize> = 24..32;
        pub const DELAY_US: Range<usize> = 32..36;
        pub const BACKLOG: Range<usize> = 36..40;
        pub const WINDOW: Range<usize> = 40..48;
        pub const VERIFIED: Range<usize> = 48..56;
        /// One range, from its start: the gap below the range before, and its length.
        pub const GAP: Range<usize> = 0..4;
        pub const LEN: Range<usize> = 4..8;
        pub const RANGE: usize = 8;
    }

    /// A hello: its fields, then its MAC.
    pub mod hello {
        use std::ops::Range;
        pub const FIELDS: Range<usize> = 0..16;
        pub const MAC: Range<usize> = 16..32;
    }
}

const TYPE_DATA: u8 = 1;
const TYPE_ACK: u8 = 2;
const TYPE_HELLO: u8 = 3;

/// The header of a data datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHeader {
    /// Which file of the session (0, 1, ...): a late datagram of the previous file is
    /// told apart from the current one's.
    pub file: u32,
    pub session: u64,
    pub pn: u64,
    pub offset: u64,
    pub len: u16,
    /// CRC-32 (IEEE) of the payload.
    pub crc: u32,
}

impl DataHeader {
    /// Encodes the header and its tag under the session's key.
    pub fn encode(&self, out: &mut [u8; DATA_HEADER], key: &[u8; 32]) {
        out[field::TYPE] = TYPE_DATA;
        out[field::FLAGS] = 0;
        out[field::COUNT].copy_from_slice(&self.len.to_be_bytes());
        out[field::FILE].copy_from_slice(&self.file.to_be_bytes());
        out[field::SESSION].copy_from_slice(&self.session.to_be_bytes());
        out[field::data::PN].copy_from_slice(&self.pn.to_be_bytes());
        out[field::data::OFFSET].copy_from_slice(&self.offset.to_be_bytes());
        out[field::data::CRC].copy_from_slice(&self.crc.to_be_bytes());
        let tag = blake3::keyed_hash(key, &out[field::data::FIELDS]);
        out[field::data::TAG].copy_from_slice(&tag.as_bytes()[..DATA_TAG]);
    }
}

/// A range of packet numbers received, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PnRange {
    pub low: u64,
    pub high: u64,
}

/// An ACK frame: what the receiver has seen of the packet numbers, and how far the sender
/// may go into the file (flow control, separate from loss).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    pub file: u32,
    pub session: u64,
    /// Grows by one per ACK sent: an older or repeated one is ignored.
    pub seq: u64,
    pub largest: u64,
    /// Microseconds between the largest packet's arrival and this ACK.
    pub delay_us: u32,
    /// Chunks the receiver holds in memory, waiting for their hash or the disk.
    pub backlog: u32,
    /// The sender may send file bytes below this offset.
    pub window: u64,
    /// Every byte below this offset is verified and handed to the disk: the sender may
    /// let go of it.
    pub verified: u64,
    /// Received ranges, highest first, not overlapping; the first one ends at `largest`.
    pub ranges: Vec<PnRange>,
    /// With `--ecn`: data datagrams that arrived marked CE (congestion experienced), over
    /// the file so far, as QUIC's ECN counts are (RFC 9000 19.3.2): the sender reads the
    /// growth.
    pub ce: Option<u64>,
    /// The path's rate by the sender's packet train, bits per second of wire bytes (1 to
    /// 10 Tbit/s), once the receiver has timed it.
    pub train_bps: Option<u64>,
}

/// Why a datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("datagram too short")]
    Short,
    #[error("unknown datagram type {0}")]
    UnknownType(u8),
    #[error("length field does not match the datagram")]
    Length,
    #[error("ACK ranges out of order or below packet number 0")]
    Ranges,
    #[error("too many ACK ranges")]
    TooManyRanges,
    #[error("a packet train's estimate of 0 or over 10 Tbit/s")]
    Train,
    #[error("unknown ACK flags {0:#04x}")]
    Flags(u8),
    #[error("authentication tag does not match")]
    Tag,
    #[error("payload CRC does not match (corrupted on the way)")]
    Corrupt,
}

/// A parsed datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Datagram<'a> {
    Data {
        header: DataHeader,
        payload: &'a [u8],
    },
    Ack(Ack),
    Hello {
        session: u64,
    },
}

fn u16_at(b: &[u8], at: std::ops::Range<usize>) -> u16 {
    u16::from_be_bytes(b[at].try_into().expect("two bytes"))
}

fn u32_at(b: &[u8], at: std::ops::Range<usize>) -> u32 {
    u32::from_be_bytes(b[at].try_into().expect("four bytes"))
}

fn u64_at(b: &[u8], at: std::ops::Range<usize>) -> u64 {
    u64::from_be_bytes(b[at].try_into().expect("eight bytes"))
}

/// `range` moved on by `by` bytes (a field of the `i`th ACK range).
fn shifted(range: std::ops::Range<usize>, by: usize) -> std::ops::Range<usize> {
    range.start + by..range.end + by
}

fn tag(key: &[u8; 32], bytes: &[u8]) -> [u8; TAG_LEN] {
    let hash = blake3::keyed_hash(key, bytes);
    let mut out = [0u8; TAG_LEN];
    out.copy_from_slice(&hash.as_bytes()[..TAG_LEN]);
    out
}

fn tag_matches(key: &[u8; 32], bytes: &[u8], theirs: &[u8]) -> bool {
    tag_eq(&tag(key, bytes), theirs)
}

/// Compares every byte whatever the first difference: the time taken says nothing.
fn tag_eq(ours: &[u8], theirs: &[u8]) -> bool {
    ours.len() == theirs.len()
        && ours
            .iter()
            .zip(theirs)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// Encodes an ACK with its tag.
pub fn encode_ack(ack: &Ack, key: &[u8; 32], out: &mut Vec<u8>) {
    debug_assert!(ack.ranges.len() <= MAX_ACK_RANGES);
    out.clear();
    out.resize(ACK_HEADER + field::ack::RANGE * ack.ranges.len(), 0);
    out[field::TYPE] = TYPE_ACK;
    out[field::FLAGS] = if ack.ce.is_some() { ACK_FLAG_ECN } else { 0 }
        | if ack.train_bps.is_some() {
            ACK_FLAG_TRAIN
        } else {
            0
        };
    out[field::COUNT].copy_from_slice(&(ack.ranges.len() as u16).to_be_bytes());
    out[field::FILE].copy_from_slice(&ack.file.to_be_bytes());
    out[field::SESSION].copy_from_slice(&ack.session.to_be_bytes());
    out[field::ack::SEQ].copy_from_slice(&ack.seq.to_be_bytes());
    out[field::ack::LARGEST].copy_from_slice(&ack.largest.to_be_bytes());
    out[field::ack::DELAY_US].copy_from_slice(&ack.delay_us.to_be_bytes());
    out[field::ack::BACKLOG].copy_from_slice(&ack.backlog.to_be_bytes());
    out[field::ack::WINDOW].copy_from_slice(&ack.window.to_be_bytes());
    out[field::ack::VERIFIED].copy_from_slice(&ack.verified.to_be_bytes());
    let mut previous_low = ack.largest.saturating_add(1);
    for (i, range) in ack.ranges.iter().enumerate() {
        let gap = previous_low - range.high - 1;
        let len = range.high - range.low + 1;
        let at = ACK_HEADER + field::ack::RANGE * i;
        out[shifted(field::ack::GAP, at)].copy_from_slice(&(gap as u32).to_be_bytes());
        out[shifted(field::ack::LEN, at)].copy_from_slice(&(len as u32).to_be_bytes());
        previous_low = range.low;
    }
    if let Some(ce) = ack.ce {
        out.extend_from_slice(&ce.to_be_bytes());
    }
    if let Some(bps) = ack.train_bps {
        out.extend_from_slice(&bps.to_be_bytes());
    }
    let mac = tag(key, out);
    out.extend_from_slice(&mac);
}

/// Encodes the hello a client sends from its UDP socket, proving the address is its own.
pub fn encode_hello(session: u64, key: &[u8; 32]) -> [u8; HELLO_LEN] {
    let mut out = [0u8; HELLO_LEN];
    out[field::TYPE] = TYPE_HELLO;
    out[field::SESSION].copy_from_slice(&session.to_be_bytes());
    let mac = tag(key, &out[field::hello::FIELDS]);
    out[field::hello::MAC].copy_from_slice(&mac);
    out
}

/// Parses one datagram. ACKs and hellos must carry a tag made with `key`.
pub fn parse<'a>(bytes: &'a [u8], key: &[u8; 32]) -> Result<Datagram<'a>, WireError> {
    let Some(&kind) = bytes.first() else {
        return Err(WireError::Short);
    };
    match kind {
        TYPE_DATA => {
            if bytes.len() < DATA_HEADER {
                return Err(WireError::Short);
            }
            let len = u16_at(bytes, field::COUNT);
            let payload = &bytes[DATA_HEADER..];
            if payload.len() != usize::from(len) || payload.is_empty() {
                return Err(WireError::Length);
            }
            let tag = blake3::keyed_hash(key, &bytes[field::data::FIELDS]);
            if !tag_eq(&tag.as_bytes()[..DATA_TAG], &bytes[field::data::TAG]) {
                return Err(WireError::Tag);
            }
            let crc = u32_at(bytes, field::data::CRC);
            if crc32fast::hash(payload) != crc {
                return Err(WireError::Corrupt);
            }
            Ok(Datagram::Data {
                header: DataHeader {
                    file: u32_at(bytes, field::FILE),
                    session: u64_at(bytes, field::SESSION),
                    pn: u64_at(bytes, field::data::PN),
                    offset: u64_at(bytes, field::data::OFFSET),
                    len,
                    crc,
                },
                payload,
            })
        }
        TYPE_ACK => parse_ack(bytes, key).map(Datagram::Ack),
        TYPE_HELLO => {
            if bytes.len() != HELLO_LEN {
                return Err(WireError::Length);
            }
            if !tag_matches(key, &bytes[field::hello::FIELDS], &bytes[field::hello::MAC]) {
                return Err(WireError::Tag);
            }
            Ok(Datagram::Hello {
                session: u64_at(bytes, field::SESSION),
            })
        }
        other => Err(WireError::UnknownType(other)),
    }
}

fn parse_ack(bytes: &[u8], key: &[u8; 32]) -> Result<Ack, WireError> {
    if bytes.len() < ACK_HEADER + TAG_LEN {
        return Err(WireError::Short);
    }
    let count = usize::from(u16_at(bytes, field::COUNT));
    if count > MAX_ACK_RANGES {
        return Err(WireError::TooManyRanges);
    }
    let flags = bytes[field::FLAGS];
    if flags & !(ACK_FLAG_ECN | ACK_FLAG_TRAIN) != 0 {
        return Err(WireError::Flags(flags));
    }
    let ce_len = if flags & ACK_FLAG_ECN != 0 { ACK_CE } else { 0 };
    let train_len = if flags & ACK_FLAG_TRAIN != 0 {
        ACK_TRAIN
    } else {
        0
    };
    let ranges_end = ACK_HEADER + field::ack::RANGE * count;
    if bytes.len() != ranges_end + ce_len + train_len + TAG_LEN {
        return Err(WireError::Length);
    }
    let body = bytes.len() - TAG_LEN;
    if !tag_matches(key, &bytes[..body], &bytes[body..]) {
        return Err(WireError::Tag);
    }
    let largest = u64_at(bytes, field::ack::LARGEST);
    let mut ranges = Vec::with_capacity(count);
    // Each range's high end lies below `bound`: largest + 1 for the first, then the low
    // end of the range before (with a gap of at least one, or the two would be one).
    let mut bound = largest.checked_add(1).ok_or(WireError::Ranges)?;
    for i in 0..count {
        let at = ACK_HEADER + field::ack::RANGE * i;
        let gap = u64::from(u32_at(bytes, shifted(field::ack::GAP, at)));
        let len = u64::from(u32_at(bytes, shifted(field::ack::LEN, at)));
        if len == 0 || (i == 0) != (gap == 0) {
            return Err(WireError::Ranges);
        }
        let high = bound.checked_sub(gap + 1).ok_or(WireError::Ranges)?;
        let low = (high + 1).checked_sub(len).ok_or(WireError::Ranges)?;
        ranges.push(PnRange { low, high });
        bound = low;
    }
    let train_at = ranges_end + ce_len;
    let train_bps = (train_len > 0).then(|| u64_at(bytes, train_at..train_at + ACK_TRAIN));
    if train_bps.is_some_and(|bps| bps == 0 || bps > crate::train::MAX_ESTIMATE_BPS) {
        return Err(WireError::Train);
    }
    Ok(Ack {
        file: u32_at(bytes, field::FILE),
        session: u64_at(bytes, field::SESSION),
        seq: u64_at(bytes, field::ack::SEQ),
        largest,
        delay_us: u32_at(bytes, field::ack::DELAY_US),
        backlog: u32_at(bytes, field::ack::BACKLOG),
        window: u64_at(bytes, field::ack::WINDOW),
        verified: u64_at(bytes, field::ack::VERIFIED),
        ranges,
        ce: (ce_len > 0).then(|| u64_at(bytes, ranges_end..ranges_end + ACK_CE)),
        train_bps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY: [u8; 32] = [7; 32];

    fn ack(ranges: Vec<PnRange>) -> Ack {
        Ack {
            file: 3,
            session: 0xfeed,
            seq: 9,
            largest: ranges.first().map_or(0, |r| r.high),
            delay_us: 250,
            backlog: 4,
            window: 1 << 30,
            verified: 1 << 20,
            ranges,
            ce: None,
            train_bps: None,
        }
    }

    /// A cold start's ACKs carry the packet train's estimate after the CE count, under the
    /// tag; an estimate of 0 or beyond the bound is refused where it is read.
    #[test]
    fn an_ack_carries_the_trains_estimate_when_flagged() {
        let mut original = ack(vec![PnRange { low: 0, high: 70 }]);
        for ce in [None, Some(3)] {
            original.ce = ce;
            original.train_bps = Some(987_654_321);
            let mut bytes = Vec::new();
            encode_ack(&original, &KEY, &mut bytes);
            assert_eq!(bytes[1] & ACK_FLAG_TRAIN, ACK_FLAG_TRAIN);
            assert_eq!(parse(&bytes, &KEY), Ok(Datagram::Ack(original.clone())));
        }
        for refused in [0, crate::train::MAX_ESTIMATE_BPS + 1] {
            original.train_bps = Some(refused);
            let mut bytes = Vec::new();
            encode_ack(&original, &KEY, &mut bytes);
            assert_eq!(parse(&bytes, &KEY), Err(WireError::Train));
        }
    }

    /// With `--ecn` an ACK carries the CE count after its ranges, under the tag; a flag
    /// this version does not know is refused, as is a count cut off or added.
    #[test]
    fn an_ack_carries_its_ce_count_when_flagged() {
        let mut original = ack(vec![PnRange { low: 3, high: 9 }]);
        original.ce = Some(41);
        let mut bytes = Vec::new();
        encode_ack(&original, &KEY, &mut bytes);
        assert_eq!(bytes[1], ACK_FLAG_ECN);
        assert_eq!(parse(&bytes, &KEY), Ok(Datagram::Ack(original.clone())));
        // The flag cleared (and the tag made again): the count is now 8 bytes too many.
        let mut unflagged = bytes[..bytes.len() - TAG_LEN].to_vec();
        unflagged[1] = 0;
        let mac = tag(&KEY, &unflagged);
        unflagged.extend_from_slice(&mac);
        assert_eq!(parse(&unflagged, &KEY), Err(WireError::Length));
        let mut unknown = bytes[..bytes.len() - TAG_LEN].to_vec();
        unknown[1] = 0x05;
        let mac = tag(&KEY, &unknown);
        unknown.extend_from_slice(&mac);
        assert_eq!(parse(&unknown, &KEY), Err(WireError::Flags(0x05)));
        original.ce = None;
        encode_ack(&original, &KEY, &mut bytes);
        assert_eq!(bytes[1], 0);
        assert_eq!(parse(&bytes, &KEY), Ok(Datagram::Ack(original)));
    }

    #[test]
    fn ack_round_trips_with_its_ranges() {
        let original = ack(vec![
            PnRange { low: 95, high: 100 },
            PnRange { low: 90, high: 92 },
            PnRange { low: 0, high: 10 },
        ]);
        let mut bytes = Vec::new();
        encode_ack(&original, &KEY, &mut bytes);
        assert_eq!(parse(&bytes, &KEY), Ok(Datagram::Ack(original)));
    }

    #[test]
    fn a_forged_or_altered_ack_is_refused() {
        let mut bytes = Vec::new();
        encode_ack(&ack(vec![PnRange { low: 1, high: 5 }]), &KEY, &mut bytes);
        assert_eq!(parse(&bytes, &[8; 32]), Err(WireError::Tag));
        bytes[40] ^= 1; // the window
        assert_eq!(parse(&bytes, &KEY), Err(WireError::Tag));
    }

    #[test]
    fn data_round_trips_and_its_length_must_match() {
        let header = DataHeader {
            file: 1,
            session: 42,
            pn: 7,
            offset: 1 << 40,
            len: 3,
            crc: crc32fast::hash(b"abc"),
        };
        let mut bytes = [0u8; DATA_HEADER + 3];
        header.encode((&mut bytes[..DATA_HEADER]).try_into().unwrap(), &KEY);
        bytes[DATA_HEADER..].copy_from_slice(b"abc");
        assert_eq!(
            parse(&bytes, &KEY),
            Ok(Datagram::Data {
                header,
                payload: b"abc"
            })
        );
        assert_eq!(
            parse(&bytes[..DATA_HEADER + 2], &KEY),
            Err(WireError::Length)
        );
        // A flipped bit in the payload is caught by the CRC, one in the header (here the
        // packet number) by the tag.
        bytes[DATA_HEADER + 1] ^= 0x10;
        assert_eq!(parse(&bytes, &KEY), Err(WireError::Corrupt));
        bytes[DATA_HEADER + 1] ^= 0x10;
        bytes[20] ^= 0x10;
        assert_eq!(parse(&bytes, &KEY), Err(WireError::Tag));
    }

    #[test]
    fn hello_needs_the_session_key() {
        let hello = encode_hello(99, &KEY);
        assert_eq!(parse(&hello, &KEY), Ok(Datagram::Hello { session: 99 }));
        assert_eq!(parse(&hello, &[0; 32]), Err(WireError::Tag));
    }

    #[test]
    fn ranges_that_run_below_zero_are_refused() {
        // Hand-built: largest 5, one range of length 9 (would reach -3).
        let mut bytes = Vec::new();
        encode_ack(&ack(vec![PnRange { low: 0, high: 5 }]), &KEY, &mut bytes);
        bytes[ACK_HEADER + 4..ACK_HEADER + 8].copy_from_slice(&9u32.to_be_bytes());
        let body = bytes.len() - TAG_LEN;
        let mac = tag(&KEY, &bytes[..body]);
        bytes[body..].copy_from_slice(&mac);
        assert_eq!(parse(&bytes, &KEY), Err(WireError::Ranges));
    }

    proptest! {
        /// Any bytes at all: parsed or refused, never a panic; whatever parses as an ACK
        /// has ordered, disjoint ranges under its largest packet number.
        #[test]
        fn any_bytes_parse_or_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..1200)) {
            let _ = parse(&bytes, &KEY);
        }

        #[test]
        fn tagged_acks_with_any_fields_keep_their_ranges_in_order(
            largest in any::<u64>(),
            parts in proptest::collection::vec((any::<u32>(), 1u32..u32::MAX), 1..6),
            count in 0usize..MAX_ACK_RANGES,
        ) {
            let mut bytes = Vec::new();
            encode_ack(&ack(vec![]), &KEY, &mut bytes);
            bytes.truncate(ACK_HEADER);
            bytes[24..32].copy_from_slice(&largest.to_be_bytes());
            let n = count.min(parts.len());
            bytes[2..4].copy_from_slice(&(n as u16).to_be_bytes());
            for (i, (gap, len)) in parts.iter().take(n).enumerate() {
                let gap = if i == 0 { 0 } else { (*gap).max(1) };
                bytes.extend_from_slice(&gap.to_be_bytes());
                bytes.extend_from_slice(&len.to_be_bytes());
            }
            let mac = tag(&KEY, &bytes);
            bytes.extend_from_slice(&mac);
            if let Ok(Datagram::Ack(ack)) = parse(&bytes, &KEY) {
                let mut bound = ack.largest as u128 + 1;
                for range in &ack.ranges {
                    prop_assert!(range.low <= range.high);
                    prop_assert!((range.high as u128) < bound);
                    bound = range.low as u128;
                }
            }
        }
    }
}
