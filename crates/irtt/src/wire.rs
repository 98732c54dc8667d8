//! irtt's packets, protocol version 1 (irtt 0.9), learned from irtt's source: every
//! multi-byte integer little-endian; a packet is a run of fields in one fixed order, each
//! either absent or whole, and padding after them to the length the test asked for.
//!
//! ```text
//! magic 14 a7 5b | flags | [HMAC-MD5, 16] | token, 8 | seqno, 4 | [received count, 4]
//! | [received window, 8] | [receive wall, 8] [receive mono, 8] | [midpoint wall, mono]
//! | [send wall, 8] [send mono, 8] | padding
//! ```
//!
//! An open carries no token: after the flags (and HMAC) come the test's parameters, each a
//! varint type and a zig-zag varint value (the server fill a varint length and its bytes);
//! the server's answer carries the token, then the parameters as it will serve them. An
//! echo request already holds every field its answer fills (the client sends zeroes in
//! them), so an answer is the request's own length. The HMAC, where a key is shared, is
//! HMAC-MD5 of the whole packet with the HMAC field zeroed.
//!
//! Sans IO: bytes in, bytes out.

use hmac::{Hmac, Mac};
use md5::Md5;

/// The first three bytes of every irtt packet.
pub const MAGIC: [u8; 3] = [0x14, 0xa7, 0x5b];
/// irtt's port.
pub const PORT: u16 = 2112;
/// The protocol version this codec speaks; an open of another is answered with a close.
pub const PROTOCOL_VERSION: i64 = 1;
/// The HMAC field's length (MD5's).
pub const HMAC_LEN: usize = 16;
/// The longest server fill name a parameter may carry (irtt's own bound).
pub const MAX_FILL_NAME: usize = 32;
/// The longest parameters an open may carry: every known parameter at its longest fits.
pub const MAX_PARAMS: usize = 128;
/// The fill irtt's servers use unless a client is allowed its own: the pattern "irtt".
pub const DEFAULT_FILL: &str = "pattern:69727474";

/// The key a server and its clients share (irtt's `--hmac`): any bytes, kept out of
/// debug output.
#[derive(Clone, PartialEq, Eq)]
pub struct HmacKey(pub Vec<u8>);

impl std::fmt::Debug for HmacKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HmacKey(..)")
    }
}

/// The flag bits.
pub mod flag {
    pub const OPEN: u8 = 0x01;
    pub const REPLY: u8 = 0x02;
    pub const CLOSE: u8 = 0x04;
    pub const HMAC: u8 = 0x08;
    pub const ALL: u8 = OPEN | REPLY | CLOSE | HMAC;
}

/// Why a packet is not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    Short,
    Magic,
    Flags,
    /// A key is shared and the packet carries no HMAC.
    NoHmac,
    BadHmac,
    /// No key is shared and the packet carries one.
    UnexpectedHmac,
    Params,
}

impl WireError {
    pub fn reason(self) -> &'static str {
        match self {
            WireError::Short => "too short",
            WireError::Magic => "not irtt (magic)",
            WireError::Flags => "unknown flag bits",
            WireError::NoHmac => "no HMAC where one is required",
            WireError::BadHmac => "HMAC does not match",
            WireError::UnexpectedHmac => "an HMAC where no key is shared",
            WireError::Params => "malformed parameters",
        }
    }
}

/// Which counts of the requests it received the server returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReceivedStats(u8);

impl ReceivedStats {
    pub const NONE: ReceivedStats = ReceivedStats(0);
    pub const COUNT: ReceivedStats = ReceivedStats(1);
    pub const WINDOW: ReceivedStats = ReceivedStats(2);
    pub const BOTH: ReceivedStats = ReceivedStats(3);

    pub fn from_value(v: i64) -> Option<ReceivedStats> {
        (0..=3).contains(&v).then_some(ReceivedStats(v as u8))
    }
    pub fn value(self) -> i64 {
        i64::from(self.0)
    }
    pub fn count(self) -> bool {
        self.0 & 1 != 0
    }
    pub fn window(self) -> bool {
        self.0 & 2 != 0
    }
}

/// When the server stamps: at receipt, at sending, both, or once at their midpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StampAt(u8);

impl StampAt {
    pub const NONE: StampAt = StampAt(0);
    pub const SEND: StampAt = StampAt(1);
    pub const RECEIVE: StampAt = StampAt(2);
    pub const BOTH: StampAt = StampAt(3);
    pub const MIDPOINT: StampAt = StampAt(4);

    pub fn from_value(v: i64) -> Option<StampAt> {
        (0..=4).contains(&v).then_some(StampAt(v as u8))
    }
    pub fn value(self) -> i64 {
        i64::from(self.0)
    }
    pub fn receive(self) -> bool {
        self.0 & 2 != 0
    }
    pub fn send(self) -> bool {
        self.0 & 1 != 0
    }
    pub fn midpoint(self) -> bool {
        self.0 & 4 != 0
    }
}

/// Which of the server's clocks a stamp carries: the wall clock, its monotonic one, both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock(u8);

impl Default for Clock {
    fn default() -> Clock {
        Clock::BOTH
    }
}

impl Clock {
    pub const WALL: Clock = Clock(1);
    pub const MONOTONIC: Clock = Clock(2);
    pub const BOTH: Clock = Clock(3);

    pub fn from_value(v: i64) -> Option<Clock> {
        (1..=3).contains(&v).then_some(Clock(v as u8))
    }
    pub fn value(self) -> i64 {
        i64::from(self.0)
    }
    pub fn wall(self) -> bool {
        self.0 & 1 != 0
    }
    pub fn monotonic(self) -> bool {
        self.0 & 2 != 0
    }
}

/// A test's parameters, as an open asks them and its answer grants them. Zero (or
/// empty) is "not said": such a parameter is left out of the encoding.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Params {
    pub protocol_version: i64,
    pub duration_ns: i64,
    pub interval_ns: i64,
    /// The packet length the test asked for (0: as short as the fields allow).
    pub length: i64,
    pub received_stats: ReceivedStats,
    pub stamp_at: StampAt,
    /// `None` where the open did not say (a client always does).
    pub clock: Option<Clock>,
    /// The whole TOS byte (irtt calls it DSCP).
    pub dscp: i64,
    pub server_fill: String,
}

const P_VERSION: u64 = 1;
const P_DURATION: u64 = 2;
const P_INTERVAL: u64 = 3;
const P_LENGTH: u64 = 4;
const P_RECEIVED_STATS: u64 = 5;
const P_STAMP_AT: u64 = 6;
const P_CLOCK: u64 = 7;
const P_DSCP: u64 = 8;
const P_SERVER_FILL: u64 = 9;

impl Params {
    /// Reads the parameters of an open. Unknown types are skipped (a later version's);
    /// a value out of its range, a truncated varint or a fill name over
    /// [`MAX_FILL_NAME`] is malformed.
    pub fn parse(mut bytes: &[u8]) -> Result<Params, WireError> {
        if bytes.len() > MAX_PARAMS {
            return Err(WireError::Params);
        }
        let mut p = Params::default();
        while !bytes.is_empty() {
            let kind = uvarint(&mut bytes)?;
            if kind == P_SERVER_FILL {
                let len = uvarint(&mut bytes)?;
                let len = usize::try_from(len).map_err(|_| WireError::Params)?;
                if len > MAX_FILL_NAME || len > bytes.len() {
                    return Err(WireError::Params);
                }
                p.server_fill = String::from_utf8_lossy(&bytes[..len]).into_owned();
                bytes = &bytes[len..];
                continue;
            }
            let value = varint(&mut bytes)?;
            match kind {
                P_VERSION => p.protocol_version = value,
                P_DURATION if value > 0 => p.duration_ns = value,
                P_INTERVAL if value > 0 => p.interval_ns = value,
                P_DURATION | P_INTERVAL => return Err(WireError::Params),
                P_LENGTH => p.length = value,
                P_RECEIVED_STATS => {
                    p.received_stats = ReceivedStats::from_value(value).ok_or(WireError::Params)?
                }
                P_STAMP_AT => p.stamp_at = StampAt::from_value(value).ok_or(WireError::Params)?,
                P_CLOCK => p.clock = Some(Clock::from_value(value).ok_or(WireError::Params)?),
                P_DSCP => p.dscp = value,
                _ => {}
            }
        }
        Ok(p)
    }

    /// The encoding, the parameters that are set in type order.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut put = |kind: u64, value: i64| {
            if value != 0 {
                put_uvarint(out, kind);
                put_varint(out, value);
            }
        };
        put(P_VERSION, self.protocol_version);
        put(P_DURATION, self.duration_ns);
        put(P_INTERVAL, self.interval_ns);
        put(P_LENGTH, self.length);
        put(P_RECEIVED_STATS, self.received_stats.value());
        put(P_STAMP_AT, self.stamp_at.value());
        put(P_CLOCK, self.clock.map_or(0, Clock::value));
        put(P_DSCP, self.dscp);
        if !self.server_fill.is_empty() {
            let fill = &self.server_fill.as_bytes()[..self.server_fill.len().min(MAX_FILL_NAME)];
            put_uvarint(out, P_SERVER_FILL);
            put_uvarint(out, fill.len() as u64);
            out.extend_from_slice(fill);
        }
    }

    /// Where an echo's fields lie under these parameters.
    pub fn layout(&self, hmac: bool) -> Layout {
        Layout::new(
            hmac,
            self.received_stats,
            self.stamp_at,
            self.clock.unwrap_or_default(),
        )
    }
}

/// An unsigned LEB128 varint of at most ten bytes (64 bits), taken off the front.
fn uvarint(bytes: &mut &[u8]) -> Result<u64, WireError> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        if i == 9 && b > 1 {
            return Err(WireError::Params);
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            *bytes = &bytes[i + 1..];
            return Ok(value);
        }
    }
    Err(WireError::Params)
}

/// A zig-zag varint.
fn varint(bytes: &mut &[u8]) -> Result<i64, WireError> {
    let u = uvarint(bytes)?;
    Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
}

fn put_uvarint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn put_varint(out: &mut Vec<u8>, value: i64) {
    put_uvarint(out, ((value << 1) ^ (value >> 63)) as u64);
}

/// A wall and a monotonic time, nanoseconds (the wall since the Unix epoch, the
/// monotonic since the server started): one stamp of the server's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stamp {
    pub wall: i64,
    pub mono: i64,
}

impl Stamp {
    /// Halfway between two stamps, each clock apart.
    pub fn midpoint(self, later: Stamp) -> Stamp {
        Stamp {
            wall: self.wall + (later.wall - self.wall) / 2,
            mono: self.mono + (later.mono - self.mono) / 2,
        }
    }
}

/// Where each field of an echo lies: offsets from the packet's start, `None` when the
/// test did not ask for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub hmac: Option<usize>,
    pub token: usize,
    pub seqno: usize,
    pub count: Option<usize>,
    pub window: Option<usize>,
    /// Wall and monotonic offsets of the receive, midpoint and send stamps.
    pub receive: [Option<usize>; 2],
    pub midpoint: [Option<usize>; 2],
    pub send: [Option<usize>; 2],
    /// The fields' end: an echo is at least this long.
    pub end: usize,
}

impl Layout {
    pub fn new(hmac: bool, received: ReceivedStats, at: StampAt, clock: Clock) -> Layout {
        let mut at_offset = 4;
        let mut take = |present: bool, len: usize| {
            present.then(|| {
                let offset = at_offset;
                at_offset += len;
                offset
            })
        };
        let hmac = take(hmac, HMAC_LEN);
        let token = take(true, 8).unwrap_or_default();
        let seqno = take(true, 4).unwrap_or_default();
        let count = take(received.count(), 4);
        let window = take(received.window(), 8);
        let mut stamp = |stamped: bool| {
            [
                take(stamped && clock.wall(), 8),
                take(stamped && clock.monotonic(), 8),
            ]
        };
        let receive = stamp(at.receive());
        let midpoint = stamp(at.midpoint());
        let send = stamp(at.send());
        Layout {
            hmac,
            token,
            seqno,
            count,
            window,
            receive,
            midpoint,
            send,
            end: at_offset,
        }
    }

    /// Writes a stamp into the wall and monotonic fields at `offsets`.
    pub fn put_stamp(packet: &mut [u8], offsets: [Option<usize>; 2], stamp: Stamp) {
        for (offset, value) in offsets.into_iter().zip([stamp.wall, stamp.mono]) {
            if let Some(at) = offset {
                packet[at..at + 8].copy_from_slice(&value.to_le_bytes());
            }
        }
    }

    /// Reads the stamp at `offsets` (0 for a clock it does not carry).
    pub fn stamp(packet: &[u8], offsets: [Option<usize>; 2]) -> Stamp {
        let read = |offset: Option<usize>| offset.map_or(0, |at| le_i64(&packet[at..at + 8]));
        Stamp {
            wall: read(offsets[0]),
            mono: read(offsets[1]),
        }
    }
}

fn le_i64(bytes: &[u8]) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[..8]);
    i64::from_le_bytes(b)
}

/// Reads a little-endian u32 at `at`.
pub fn le_u32(packet: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&packet[at..at + 4]);
    u32::from_le_bytes(b)
}

/// Reads a little-endian u64 at `at`.
pub fn le_u64(packet: &[u8], at: usize) -> u64 {
    le_i64(&packet[at..]) as u64
}

/// What every packet starts with, checked: its flags, and where what follows starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub flags: u8,
    /// Where an open's parameters, or an echo's token, start.
    pub body: usize,
}

impl Header {
    pub fn has(&self, bit: u8) -> bool {
        self.flags & bit != 0
    }
}

/// Checks a packet's magic, flags and (with a key) its HMAC.
pub fn header(packet: &[u8], key: Option<&[u8]>) -> Result<Header, WireError> {
    if packet.len() < 4 {
        return Err(WireError::Short);
    }
    if packet[..3] != MAGIC {
        return Err(WireError::Magic);
    }
    let flags = packet[3];
    if flags & !flag::ALL != 0 {
        return Err(WireError::Flags);
    }
    match key {
        Some(key) => {
            if flags & flag::HMAC == 0 {
                return Err(WireError::NoHmac);
            }
            if packet.len() < 4 + HMAC_LEN {
                return Err(WireError::Short);
            }
            let mut mac = keyed(key);
            mac.update(&packet[..4]);
            mac.update(&[0u8; HMAC_LEN]);
            mac.update(&packet[4 + HMAC_LEN..]);
            mac.verify_slice(&packet[4..4 + HMAC_LEN])
                .map_err(|_| WireError::BadHmac)?;
            Ok(Header {
                flags,
                body: 4 + HMAC_LEN,
            })
        }
        None if flags & flag::HMAC != 0 => Err(WireError::UnexpectedHmac),
        None => Ok(Header { flags, body: 4 }),
    }
}

fn keyed(key: &[u8]) -> Hmac<Md5> {
    // HMAC takes a key of any length.
    Hmac::<Md5>::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC takes any key length"))
}

/// Sets the HMAC flag and field of a packet whose field is at 4 (a keyed packet's).
pub fn sign(packet: &mut [u8], key: &[u8]) {
    packet[3] |= flag::HMAC;
    packet[4..4 + HMAC_LEN].fill(0);
    let mut mac = keyed(key);
    mac.update(packet);
    let sum = mac.finalize().into_bytes();
    packet[4..4 + HMAC_LEN].copy_from_slice(&sum);
}

/// Writes an open (or its answer) into `out`: magic, flags, room for the HMAC with a key,
/// the token when answering, then the parameters; signed with the key.
pub fn put_open(
    out: &mut Vec<u8>,
    flags: u8,
    token: Option<u64>,
    params: &Params,
    key: Option<&[u8]>,
) {
    out.clear();
    out.extend_from_slice(&MAGIC);
    out.push(flags);
    if key.is_some() {
        out.extend_from_slice(&[0u8; HMAC_LEN]);
    }
    if let Some(token) = token {
        out.extend_from_slice(&token.to_le_bytes());
    }
    params.encode(out);
    if let Some(key) = key {
        sign(out, key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parameters_round_trip_and_leave_out_what_is_unset() {
        let p = Params {
            protocol_version: 1,
            duration_ns: 10_000_000_000,
            interval_ns: 20_000_000,
            length: 172,
            received_stats: ReceivedStats::BOTH,
            stamp_at: StampAt::BOTH,
            clock: Some(Clock::BOTH),
            dscp: 0xb8,
            server_fill: "rand".into(),
        };
        let mut bytes = Vec::new();
        p.encode(&mut bytes);
        assert_eq!(Params::parse(&bytes).unwrap(), p);
        let mut few = Vec::new();
        Params {
            protocol_version: 1,
            ..Params::default()
        }
        .encode(&mut few);
        // Type 1, value 1 zig-zagged to 2.
        assert_eq!(few, [1, 2]);
    }

    #[test]
    fn values_out_of_range_and_truncations_are_malformed() {
        for bad in [
            &[6u8, 10][..],      // stamp at 5
            &[7, 0],             // clock 0
            &[5, 8],             // received stats 4
            &[2, 1],             // duration -1
            &[3, 0],             // interval 0
            &[4],                // a type without its value
            &[4, 0x80],          // a varint cut short
            &[9, 33],            // a fill name over 32
            &[9, 4, b'r', b'a'], // a fill name cut short
            &[
                4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
            ], // over 64 bits
        ] {
            assert_eq!(Params::parse(bad), Err(WireError::Params), "{bad:?}");
        }
        // An unknown type is skipped with its value.
        assert_eq!(Params::parse(&[42, 6, 1, 2]).unwrap().protocol_version, 1);
    }

    #[test]
    fn an_echos_fields_lie_in_the_fixed_order() {
        let all = Layout::new(true, ReceivedStats::BOTH, StampAt::BOTH, Clock::BOTH);
        assert_eq!(all.hmac, Some(4));
        assert_eq!((all.token, all.seqno), (20, 28));
        assert_eq!((all.count, all.window), (Some(32), Some(36)));
        assert_eq!(all.receive, [Some(44), Some(52)]);
        assert_eq!(all.midpoint, [None, None]);
        assert_eq!(all.send, [Some(60), Some(68)]);
        assert_eq!(all.end, 76);
        let mid = Layout::new(false, ReceivedStats::NONE, StampAt::MIDPOINT, Clock::WALL);
        assert_eq!((mid.token, mid.seqno), (4, 12));
        assert_eq!(mid.midpoint, [Some(16), None]);
        assert_eq!(mid.end, 24);
    }

    #[test]
    fn a_signed_packet_checks_and_a_changed_one_does_not() {
        let mut out = Vec::new();
        let params = Params {
            protocol_version: 1,
            ..Params::default()
        };
        put_open(&mut out, flag::OPEN, None, &params, Some(b"secret"));
        let head = header(&out, Some(b"secret")).unwrap();
        assert_eq!(head.body, 20);
        assert_eq!(Params::parse(&out[head.body..]).unwrap(), params);
        assert_eq!(header(&out, Some(b"other")), Err(WireError::BadHmac));
        assert_eq!(header(&out, None), Err(WireError::UnexpectedHmac));
        let mut changed = out.clone();
        *changed.last_mut().unwrap() ^= 1;
        assert_eq!(header(&changed, Some(b"secret")), Err(WireError::BadHmac));
        put_open(&mut out, flag::OPEN, None, &params, None);
        assert_eq!(header(&out, Some(b"secret")), Err(WireError::NoHmac));
        assert_eq!(
            header(&[0x14, 0xa7, 0x5b, 0x10], None),
            Err(WireError::Flags)
        );
        assert_eq!(
            header(&[0x14, 0xa7, 0x5c, 0x01], None),
            Err(WireError::Magic)
        );
    }

    proptest! {
        #[test]
        fn arbitrary_parameters_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Params::parse(&bytes);
            let _ = header(&bytes, None);
            let _ = header(&bytes, Some(b"k"));
        }

        #[test]
        fn any_value_round_trips(v in any::<i64>(), u in any::<u64>()) {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            put_uvarint(&mut out, u);
            let mut rest = &out[..];
            prop_assert_eq!(varint(&mut rest).unwrap(), v);
            prop_assert_eq!(uvarint(&mut rest).unwrap(), u);
            prop_assert!(rest.is_empty());
        }
    }
}
