//! STAMP's packets as bytes (RFC 8762 §4.2 and §4.3, with RFC 8972's SSID and TLVs):
//! the Session-Sender's test packet and the Session-Reflector's answer, in open (44-octet)
//! and authenticated (112-octet, HMAC-SHA-256 truncated to 16 octets) form, their
//! timestamps and error estimates, and the TLVs that follow the base packet.
//!
//! Every read is bounded by the packet it reads: a field past the end is an error, a TLV
//! whose length overruns the packet is malformed at that point and nothing after it is
//! read. Nothing here allocates in proportion to what a peer claims.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The open (unauthenticated) base packet, both ways.
pub const OPEN_BASE: usize = 44;
/// The authenticated base packet, both ways.
pub const AUTH_BASE: usize = 112;
/// Where an authenticated packet's HMAC sits: it covers every octet before it.
const AUTH_HMAC_AT: usize = 96;
pub const HMAC_LEN: usize = 16;
/// The largest test packet read or answered: a jumbo frame's payload. A longer datagram
/// is refused (it is no router's probe, and answering it would be the most a spoofed
/// source could point at someone else).
pub const MAX_PACKET: usize = 9_000;

/// Seconds between the NTP epoch (1900) and the Unix epoch (1970).
const NTP_UNIX_OFFSET_S: i128 = 2_208_988_800;

/// Open or authenticated packets; both ends must agree (RFC 8762 §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Open,
    Authenticated,
}

impl Mode {
    pub fn base_len(self) -> usize {
        match self {
            Mode::Open => OPEN_BASE,
            Mode::Authenticated => AUTH_BASE,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Open => "open",
            Mode::Authenticated => "authenticated",
        }
    }
}

/// Why bytes are not a STAMP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WireError {
    /// Fewer octets than the mode's base packet.
    Short,
    /// More than [`MAX_PACKET`] octets.
    Long,
    /// The HMAC does not match the key.
    Integrity,
}

impl WireError {
    /// The reason as counters and the log name it.
    pub fn reason(self) -> &'static str {
        match self {
            WireError::Short => "short",
            WireError::Long => "long",
            WireError::Integrity => "hmac",
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WireError::Short => "shorter than a STAMP packet",
            WireError::Long => "longer than the largest STAMP packet answered",
            WireError::Integrity => "the HMAC does not match the key",
        })
    }
}

/// A 64-bit timestamp as it travels: NTP (seconds since 1900 and a binary fraction) or,
/// when the error estimate's Z bit is set, PTP's truncated form (seconds since 1970 and
/// nanoseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// NTP format, from nanoseconds since the Unix epoch.
    pub fn ntp_from_unix_ns(ns: i128) -> Timestamp {
        let secs = ns.div_euclid(1_000_000_000);
        let nanos = ns.rem_euclid(1_000_000_000) as u64;
        // The era wraps in 2036: only the low 32 bits of the seconds travel.
        let ntp_secs = ((secs + NTP_UNIX_OFFSET_S) as u64) & 0xffff_ffff;
        let fraction = (nanos << 32) / 1_000_000_000;
        Timestamp((ntp_secs << 32) | fraction)
    }

    /// PTP's truncated format, from nanoseconds since the Unix epoch.
    pub fn ptp_from_unix_ns(ns: i128) -> Timestamp {
        let secs = (ns.div_euclid(1_000_000_000) as u64) & 0xffff_ffff;
        let nanos = ns.rem_euclid(1_000_000_000) as u64;
        Timestamp((secs << 32) | nanos)
    }

    /// Nanoseconds since the Unix epoch, read as NTP (`ptp` false) or PTP. NTP seconds
    /// with the top bit clear are taken as era 1 (from 2036 on), PTP seconds as the
    /// 32-bit count they are.
    pub fn unix_ns(self, ptp: bool) -> i128 {
        let secs = (self.0 >> 32) as i128;
        let low = (self.0 & 0xffff_ffff) as i128;
        if ptp {
            secs * 1_000_000_000 + low.min(999_999_999)
        } else {
            let secs = if secs & 0x8000_0000 == 0 {
                secs + (1 << 32)
            } else {
                secs
            };
            (secs - NTP_UNIX_OFFSET_S) * 1_000_000_000 + ((low * 1_000_000_000) >> 32)
        }
    }
}

/// A clock's error estimate (RFC 8762 §4.2.1): S (synchronised to an external source),
/// Z (PTP timestamps), and the error bound as a multiplier of a power of two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ErrorEstimate(pub u16);

impl ErrorEstimate {
    const S: u16 = 0x8000;
    const Z: u16 = 0x4000;

    /// An estimate for a clock whose error is at most `error_s` seconds (rounded up to
    /// what the field can hold; never a multiplier of 0, which RFC 4656 forbids).
    pub fn new(synchronised: bool, ptp: bool, error_s: f64) -> ErrorEstimate {
        let units = (error_s.max(0.0) * 4_294_967_296.0).ceil();
        let mut scale = 0i32;
        while scale < 63 && (units / 2f64.powi(scale)).ceil() > 255.0 {
            scale += 1;
        }
        let multiplier = (units / 2f64.powi(scale)).ceil().clamp(1.0, 255.0) as u16;
        let scale = scale as u16;
        let mut bits = (scale << 8) | multiplier;
        if synchronised {
            bits |= Self::S;
        }
        if ptp {
            bits |= Self::Z;
        }
        ErrorEstimate(bits)
    }

    pub fn synchronised(self) -> bool {
        self.0 & Self::S != 0
    }

    pub fn ptp(self) -> bool {
        self.0 & Self::Z != 0
    }

    /// The error bound, seconds.
    pub fn error_s(self) -> f64 {
        let scale = i32::from((self.0 >> 8) & 0x3f);
        let multiplier = f64::from(self.0 & 0xff);
        multiplier * 2f64.powi(scale - 32)
    }
}

/// The key both ends share in authenticated mode, and for the HMAC TLV.
#[derive(Clone)]
pub struct Key(ring::hmac::Key);

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(..)")
    }
}

/// The shortest key taken: 128 bits.
pub const MIN_KEY_LEN: usize = 16;

impl Key {
    pub fn new(bytes: &[u8]) -> Result<Key, String> {
        if bytes.len() < MIN_KEY_LEN {
            return Err(format!(
                "the key is {} bytes; at least {MIN_KEY_LEN} are needed",
                bytes.len()
            ));
        }
        Ok(Key(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, bytes)))
    }

    /// A key as given on the command line or in a key file: hexadecimal digits when the
    /// text is that, else its bytes as they are (the form stamp-suite's key files take).
    pub fn from_text(text: &[u8]) -> Result<Key, String> {
        let trimmed = String::from_utf8_lossy(text).trim().to_string();
        if !trimmed.is_empty() && trimmed.len() % 2 == 0 {
            if let Some(bytes) = hex(&trimmed) {
                return Key::new(&bytes);
            }
        }
        Key::new(text)
    }

    /// A key file: hexadecimal text, or the raw bytes; at most 4 KiB (a larger file is
    /// not a key, and is not read).
    pub fn from_file(path: &std::path::Path) -> Result<Key, String> {
        let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
        if meta.len() > 4096 {
            return Err("over 4096 bytes".into());
        }
        Key::from_text(&std::fs::read(path).map_err(|e| e.to_string())?)
    }

    /// HMAC-SHA-256 over the parts in order, truncated to 16 octets.
    pub fn sign(&self, parts: &[&[u8]]) -> [u8; HMAC_LEN] {
        let mut context = ring::hmac::Context::with_key(&self.0);
        for part in parts {
            context.update(part);
        }
        let tag = context.sign();
        let mut out = [0u8; HMAC_LEN];
        out.copy_from_slice(&tag.as_ref()[..HMAC_LEN]);
        out
    }

    /// Whether `tag` is the HMAC of the parts, compared in constant time.
    pub fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        let expected = self.sign(parts);
        tag.len() == HMAC_LEN
            && expected
                .iter()
                .zip(tag)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

fn hex(text: &str) -> Option<Vec<u8>> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([bytes[at], bytes[at + 1]])
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_be_bytes(b)
}

fn put16(bytes: &mut [u8], at: usize, v: u16) {
    bytes[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

fn put32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn put64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// Where the fields of each layout sit.
struct Layout {
    seq: usize,
    timestamp: usize,
    error: usize,
    ssid: usize,
    receive: usize,
    sender_seq: usize,
    sender_timestamp: usize,
    sender_error: usize,
    sender_ttl: usize,
}

const OPEN: Layout = Layout {
    seq: 0,
    timestamp: 4,
    error: 12,
    ssid: 14,
    receive: 16,
    sender_seq: 24,
    sender_timestamp: 28,
    sender_error: 36,
    sender_ttl: 40,
};

const AUTH: Layout = Layout {
    seq: 0,
    timestamp: 16,
    error: 24,
    ssid: 26,
    receive: 32,
    sender_seq: 48,
    sender_timestamp: 64,
    sender_error: 72,
    sender_ttl: 80,
};

fn layout(mode: Mode) -> &'static Layout {
    match mode {
        Mode::Open => &OPEN,
        Mode::Authenticated => &AUTH,
    }
}

/// A Session-Sender's test packet (its base; TLVs follow it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TestPacket {
    pub seq: u32,
    pub timestamp: Timestamp,
    pub error: ErrorEstimate,
    /// The Session-Sender Identifier (RFC 8972 §3).
    pub ssid: u16,
}

/// A Session-Reflector's answer (its base).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reflected {
    /// The reflector's own sequence number (the sender's, from a stateless reflector).
    pub seq: u32,
    /// When the answer left (T3).
    pub timestamp: Timestamp,
    pub error: ErrorEstimate,
    pub ssid: u16,
    /// When the test packet arrived (T2).
    pub receive: Timestamp,
    pub sender_seq: u32,
    /// When the test packet left (T1), copied back.
    pub sender_timestamp: Timestamp,
    pub sender_error: ErrorEstimate,
    /// The test packet's TTL or hop limit as it arrived.
    pub sender_ttl: u8,
}

/// Writes a test packet's base and the TLV area `tlvs` after it into `out` (cleared
/// first), signing it in authenticated mode.
pub fn encode_test(
    packet: &TestPacket,
    mode: Mode,
    key: Option<&Key>,
    tlvs: &[u8],
    out: &mut Vec<u8>,
) {
    let l = layout(mode);
    out.clear();
    out.resize(mode.base_len(), 0);
    put32(out, l.seq, packet.seq);
    put64(out, l.timestamp, packet.timestamp.0);
    put16(out, l.error, packet.error.0);
    put16(out, l.ssid, packet.ssid);
    if let (Mode::Authenticated, Some(key)) = (mode, key) {
        let tag = key.sign(&[&out[..AUTH_HMAC_AT]]);
        out[AUTH_HMAC_AT..AUTH_BASE].copy_from_slice(&tag);
    }
    out.extend_from_slice(tlvs);
}

/// Checks a packet's length, and its HMAC in authenticated mode.
fn check(bytes: &[u8], mode: Mode, key: Option<&Key>) -> Result<(), WireError> {
    if bytes.len() < mode.base_len() {
        return Err(WireError::Short);
    }
    if bytes.len() > MAX_PACKET {
        return Err(WireError::Long);
    }
    if mode == Mode::Authenticated {
        let Some(key) = key else {
            return Err(WireError::Integrity);
        };
        if !key.verify(&[&bytes[..AUTH_HMAC_AT]], &bytes[AUTH_HMAC_AT..AUTH_BASE]) {
            return Err(WireError::Integrity);
        }
    }
    Ok(())
}

/// Reads a test packet's base (its TLVs are `&bytes[mode.base_len()..]`).
pub fn decode_test(bytes: &[u8], mode: Mode, key: Option<&Key>) -> Result<TestPacket, WireError> {
    check(bytes, mode, key)?;
    let l = layout(mode);
    Ok(TestPacket {
        seq: u32_at(bytes, l.seq),
        timestamp: Timestamp(u64_at(bytes, l.timestamp)),
        error: ErrorEstimate(u16_at(bytes, l.error)),
        ssid: u16_at(bytes, l.ssid),
    })
}

/// Writes an answer's base over the first octets of `out` (which holds the answer's TLV
/// area after them already), signing it in authenticated mode. `out` is at least the
/// base long.
pub fn encode_reflected(answer: &Reflected, mode: Mode, key: Option<&Key>, out: &mut [u8]) {
    let l = layout(mode);
    out[..mode.base_len()].fill(0);
    put32(out, l.seq, answer.seq);
    put64(out, l.timestamp, answer.timestamp.0);
    put16(out, l.error, answer.error.0);
    put16(out, l.ssid, answer.ssid);
    put64(out, l.receive, answer.receive.0);
    put32(out, l.sender_seq, answer.sender_seq);
    put64(out, l.sender_timestamp, answer.sender_timestamp.0);
    put16(out, l.sender_error, answer.sender_error.0);
    out[l.sender_ttl] = answer.sender_ttl;
    if let (Mode::Authenticated, Some(key)) = (mode, key) {
        let tag = key.sign(&[&out[..AUTH_HMAC_AT]]);
        out[AUTH_HMAC_AT..AUTH_BASE].copy_from_slice(&tag);
    }
}

/// Reads an answer's base.
pub fn decode_reflected(
    bytes: &[u8],
    mode: Mode,
    key: Option<&Key>,
) -> Result<Reflected, WireError> {
    check(bytes, mode, key)?;
    Ok(read_reflected(bytes, layout(mode)))
}

/// An answer's fields where `l` places them; `bytes` reaches at least the sender's error
/// estimate, and the Sender TTL reads as unknown (0) where the packet ends before it.
fn read_reflected(bytes: &[u8], l: &Layout) -> Reflected {
    Reflected {
        seq: u32_at(bytes, l.seq),
        timestamp: Timestamp(u64_at(bytes, l.timestamp)),
        error: ErrorEstimate(u16_at(bytes, l.error)),
        ssid: u16_at(bytes, l.ssid),
        receive: Timestamp(u64_at(bytes, l.receive)),
        sender_seq: u32_at(bytes, l.sender_seq),
        sender_timestamp: Timestamp(u64_at(bytes, l.sender_timestamp)),
        sender_error: ErrorEstimate(u16_at(bytes, l.sender_error)),
        sender_ttl: bytes.get(l.sender_ttl).copied().unwrap_or(0),
    }
}

/// A TWAMP-light test packet's least (RFC 5357 4.1.2, unauthenticated, no padding):
/// sequence number, timestamp and error estimate.
pub const TWAMP_LIGHT_TEST: usize = 14;
/// A TWAMP-light reflector's packet (RFC 5357 4.2.1): STAMP's reflected base less its
/// last 3 octets (the SSID's place is MBZ there).
pub const TWAMP_LIGHT_REFLECTED: usize = 41;
/// What some TWAMP-light responders send (twampy's): the reflected packet up to the
/// sender's error estimate, without the Sender TTL.
pub const TWAMP_LIGHT_NO_TTL: usize = 38;

/// Reads an open answer shorter than STAMP's base but long enough for every field up to
/// the sender's error estimate (a TWAMP-light responder's, 38 to 43 octets): the Sender
/// TTL is read where it is there, else unknown (0).
pub fn decode_reflected_short(bytes: &[u8]) -> Option<Reflected> {
    if !(TWAMP_LIGHT_NO_TTL..OPEN_BASE).contains(&bytes.len()) {
        return None;
    }
    Some(read_reflected(bytes, &OPEN))
}

/// The SSID a reflected packet of `mode` carries, without checking the rest of it (a
/// loop that must find which session an answer is for before reading it whole).
pub fn reflected_ssid(bytes: &[u8], mode: Mode) -> Option<u16> {
    let at = layout(mode).ssid;
    (bytes.len() >= mode.base_len()).then(|| u16_at(bytes, at))
}

/// RFC 8972's TLVs: types, flags and the ones linerate fills or reads.
pub mod tlv {
    use super::{put32, u32_at, Key, HMAC_LEN};

    pub const HEADER: usize = 4;
    pub const EXTRA_PADDING: u8 = 1;
    pub const CLASS_OF_SERVICE: u8 = 4;
    pub const DIRECT_MEASUREMENT: u8 = 5;
    pub const HMAC: u8 = 8;
    /// Unrecognized: the reflector does not know this type.
    pub const U: u8 = 0x80;
    /// Malformed: the TLV's length overruns the packet, or is wrong for its type.
    pub const M: u8 = 0x40;
    /// Integrity: the HMAC TLV failed.
    pub const I: u8 = 0x20;

    /// One TLV as found: where its header starts in the TLV area, its flags, type and
    /// value's place.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Found {
        pub at: usize,
        pub flags: u8,
        pub kind: u8,
        pub value: std::ops::Range<usize>,
    }

    /// The TLVs of an area, in order, and where the area stops parsing when a header or a
    /// length overruns it (`Some(offset)`: malformed from there on).
    pub fn parse(area: &[u8]) -> (Vec<Found>, Option<usize>) {
        let mut found = Vec::new();
        let mut at = 0;
        while at < area.len() {
            if area.len() - at < HEADER {
                return (found, Some(at));
            }
            let length = usize::from(u16::from_be_bytes([area[at + 2], area[at + 3]]));
            let start = at + HEADER;
            if length > area.len() - start {
                return (found, Some(at));
            }
            found.push(Found {
                at,
                flags: area[at],
                kind: area[at + 1],
                value: start..start + length,
            });
            at = start + length;
        }
        (found, None)
    }

    fn header(out: &mut Vec<u8>, kind: u8, length: usize) {
        out.push(0);
        out.push(kind);
        out.extend_from_slice(&(length as u16).to_be_bytes());
    }

    /// What a sender asks of the reflector beside the base packet.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct Request {
        /// Octets of Extra Padding (TLV header included): the packet's size on the wire
        /// without changing its meaning.
        pub padding: usize,
        /// Class of Service: the DSCP asked for the answer (DSCP1); the reflector fills
        /// in the DSCP and ECN the test packet arrived with.
        pub class_of_service: Option<u8>,
        /// Direct Measurement: the reflector's counts of packets received and sent in the
        /// session, so loss splits per direction.
        pub direct_measurement: bool,
        /// Sign the TLVs with an HMAC TLV (authenticated mode, or asked).
        pub hmac: bool,
    }

    impl Request {
        pub fn is_empty(&self) -> bool {
            self.padding == 0 && self.class_of_service.is_none() && !self.direct_measurement
        }

        /// The TLV area of a test packet: `sent` is the Direct Measurement's S_TxC (this
        /// packet counted); `seq` the base packet's sequence number field, which the HMAC
        /// TLV covers with the TLVs before it (RFC 8972 §4.8).
        pub fn encode(&self, sent: u32, seq: &[u8], key: Option<&Key>, out: &mut Vec<u8>) {
            out.clear();
            if self.is_empty() {
                return;
            }
            if let Some(dscp) = self.class_of_service {
                header(out, CLASS_OF_SERVICE, 4);
                out.extend_from_slice(&[(dscp & 0x3f) << 2, 0, 0, 0]);
            }
            if self.direct_measurement {
                header(out, DIRECT_MEASUREMENT, 12);
                let at = out.len();
                out.extend_from_slice(&[0; 12]);
                put32(out, at, sent);
            }
            if self.padding >= HEADER {
                header(out, EXTRA_PADDING, self.padding - HEADER);
                out.resize(out.len() + self.padding - HEADER, 0);
            }
            if let (true, Some(key)) = (self.hmac, key) {
                let tag = key.sign(&[seq, out]);
                header(out, HMAC, HMAC_LEN);
                out.extend_from_slice(&tag);
            }
        }
    }

    /// What the reflector saw: the Class of Service TLV's DSCP2 and ECN.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct ClassOfService {
        /// The DSCP the sender asked for the answer.
        pub asked_dscp: u8,
        /// The DSCP and ECN the test packet arrived with.
        pub received_dscp: u8,
        pub received_ecn: u8,
        /// Reverse path: 0 when the reflector used the DSCP asked.
        pub reverse_path: u8,
    }

    impl ClassOfService {
        pub fn read(value: &[u8]) -> Option<ClassOfService> {
            (value.len() == 4).then(|| ClassOfService {
                asked_dscp: value[0] >> 2,
                received_dscp: ((value[0] & 0x03) << 4) | (value[1] >> 4),
                received_ecn: (value[1] >> 2) & 0x03,
                reverse_path: value[1] & 0x03,
            })
        }

        /// Fills in what the reflector saw, keeping the DSCP asked.
        pub fn fill(value: &mut [u8], tos: u8, used_asked: bool) {
            let dscp = tos >> 2;
            let ecn = tos & 0x03;
            value[0] = (value[0] & 0xfc) | (dscp >> 4);
            value[1] = ((dscp & 0x0f) << 4) | (ecn << 2) | u8::from(!used_asked);
        }
    }

    /// The Direct Measurement TLV's counts.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct DirectMeasurement {
        pub sender_sent: u32,
        pub reflector_received: u32,
        pub reflector_sent: u32,
    }

    impl DirectMeasurement {
        pub fn read(value: &[u8]) -> Option<DirectMeasurement> {
            (value.len() == 12).then(|| DirectMeasurement {
                sender_sent: u32_at(value, 0),
                reflector_received: u32_at(value, 4),
                reflector_sent: u32_at(value, 8),
            })
        }
    }

    /// What an answer's TLVs say.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct Answer {
        pub class_of_service: Option<ClassOfService>,
        pub direct_measurement: Option<DirectMeasurement>,
        /// Types the reflector flagged as unknown to it.
        pub unrecognized: Vec<u8>,
        /// The reflector flagged a TLV malformed, or the area did not parse.
        pub malformed: bool,
        /// The reflector flagged the HMAC TLV, or the answer's HMAC TLV failed here.
        pub integrity_failed: bool,
    }

    impl Answer {
        /// Reads an answer's TLV area; `seq` is the answer's sequence number field,
        /// which its HMAC TLV covers.
        pub fn read(area: &[u8], seq: &[u8], key: Option<&Key>) -> Answer {
            let (found, malformed_at) = parse(area);
            let mut answer = Answer {
                malformed: malformed_at.is_some(),
                ..Answer::default()
            };
            for tlv in &found {
                let value = &area[tlv.value.clone()];
                if tlv.flags & U != 0 {
                    answer.unrecognized.push(tlv.kind);
                    continue;
                }
                if tlv.flags & M != 0 {
                    answer.malformed = true;
                    continue;
                }
                if tlv.flags & I != 0 {
                    answer.integrity_failed = true;
                }
                match tlv.kind {
                    CLASS_OF_SERVICE => answer.class_of_service = ClassOfService::read(value),
                    DIRECT_MEASUREMENT => {
                        answer.direct_measurement = DirectMeasurement::read(value)
                    }
                    HMAC => {
                        if let Some(key) = key {
                            if !key.verify(&[seq, &area[..tlv.at]], value) {
                                answer.integrity_failed = true;
                            }
                        }
                    }
                    _ => {}
                }
            }
            answer
        }
    }
}
