//! iperf 2's TCP test wire (docs/protocol.md, "iperf 2's wire"), sans-IO: the header an
//! iperf 2 client opens each connection with, the acknowledgement a server answers it
//! with, and the gathering of a `-P` test's connections into one test.
//!
//! iperf 2 has no specification of its wire; this follows what 2.1.8's clients and server
//! put on it. All fields are big-endian 32-bit words. A 2.1 client's first write begins
//! with the base header (6 words) and the extended one (9 words); a client before 2.0.14
//! sends no header for a plain test (its first bytes are payload, digits in ASCII), which
//! is a plain test here too.

use crate::datagram::{Framing, SequenceTracker};
use std::collections::BTreeMap;

/// The base header's flags word: which parts follow and what the test asks.
pub mod flag {
    /// The base header's settings ask for a test back (`-d` dual or `-r` tradeoff).
    pub const VERSION1: u32 = 0x8000_0000;
    /// The extended header follows the base one.
    pub const EXTEND: u32 = 0x4000_0000;
    /// A UDP test's header (in its first datagram).
    pub const UDP_TESTS: u32 = 0x2000_0000;
    /// Packet numbers are 64 bits.
    pub const SEQNO64: u32 = 0x0800_0000;
    /// Set by a 2.1 client beside a test the server runs its side of (`-R`): 2.1.8's
    /// server sends a reverse test only where it is set (seen here: the same header
    /// without it got the acknowledgement and nothing more).
    pub const VERSION2: u32 = 0x0400_0000;
    /// `--bounceback`.
    pub const BOUNCEBACK: u32 = 0x0080_0000;
    /// With [`VERSION1`]: the test back runs at once (`-d`), not after this one (`-r`).
    pub const RUN_NOW: u32 = 0x0000_0001;
    /// The header's length is in the flags' [`LENGTH_MASK`] bits (shifted left once): a
    /// server reads that many bytes of header, not the base and extended headers' own.
    pub const LENGTH: u32 = 0x0001_0000;
    pub const LENGTH_MASK: u32 = 0x0000_01fe;
}

/// The extended header's test flags (the upper half of its flags word).
pub mod ext_flag {
    /// `--isochronous`.
    pub const ISOCHRONOUS: u16 = 0x0001;
    /// UDP without the final exchange (`--no-udp-fin`, and 2.1.8's own client over UDP
    /// both ways): each end sends its final once and neither answers it with a report.
    pub const NO_UDP_FIN: u16 = 0x0008;
    /// `--trip-times`: every write carries its send time.
    pub const TRIP_TIMES: u16 = 0x0010;
    /// The rate is in packets per second.
    pub const UNITS_PPS: u16 = 0x0080;
    /// `-R`: the server sends.
    pub const REVERSE: u16 = 0x0400;
    /// `--full-duplex`: both send on the one connection.
    pub const FULL_DUPLEX: u16 = 0x0800;
    /// `--burst-period`.
    pub const PERIODIC_BURST: u16 = 0x2000;
}

/// iperf 2's port.
pub const DEFAULT_PORT: u16 = 5001;
/// The base header's length in bytes.
pub const BASE_LEN: usize = 24;
/// The base and the extended header's length in bytes: what a 2.1 client's first write
/// begins with and what a server reads before the payload.
pub const HEADER_LEN: usize = 60;
/// The acknowledgement a 2.1 server sends once it has read the header: a 2.1 client waits
/// for it (up to about 2 s) after its last write before it reports.
pub const ACK_LEN: usize = 28;
/// The acknowledgement's message type (iperf 2's `CLIENTHDRACK`).
const ACK_TYPE: u32 = 2;
/// The version the acknowledgement names: the iperf 2 release whose wire this follows
/// (2.1.8, a final release).
const ACK_VERSION: (u32, u32) = (0x0002_0001, 0x0008_0003);

/// The most connections one test may gather (`-P`); a header that asks more is refused.
pub const MAX_THREADS: u32 = 4096;
/// The longest write a header may name (`-l`), as iperf 2 bounds its buffer.
pub const MAX_WRITE: u32 = 16 << 20;

/// How much a test moves: for a time, or a count of bytes (`-t` or `-n`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Amount {
    Seconds(f64),
    Bytes(u64),
    /// An older client's plain test sent no header: it sends until it stops.
    Unsaid,
}

/// What the client asked that this server does not serve yet, named as iperf 2's flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unserved {
    Dual,
    Tradeoff,
    FullDuplex,
    Bounceback,
    Isochronous,
    Burst,
}

impl Unserved {
    pub fn flag(self) -> &'static str {
        match self {
            Unserved::Dual => "-d (dual)",
            Unserved::Tradeoff => "-r (tradeoff)",
            Unserved::FullDuplex => "--full-duplex",
            Unserved::Bounceback => "--bounceback",
            Unserved::Isochronous => "--isochronous",
            Unserved::Burst => "--burst-period",
        }
    }
}

/// A client's test header, decoded and bounded.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientHeader {
    pub flags: u32,
    /// Connections the test opens (`-P`), 1 to [`MAX_THREADS`].
    pub threads: u32,
    /// The client's port for a test back (`-d`, `-r`).
    pub port: u16,
    /// The client's write length (`-l`); 0 where it did not say.
    pub write_len: u32,
    pub amount: Amount,
    /// The extended header's test flags ([`ext_flag`]); 0 without one.
    pub ext_flags: u16,
    /// The client's release, major, minor and patch, from the extended header.
    pub version: Option<(u16, u16, u16)>,
    /// The rate asked (`-b`), bits (or packets, with [`ext_flag::UNITS_PPS`]) a second;
    /// 0: unlimited. At most [`MAX_RATE`] on the wire.
    pub rate: u64,
}

/// The most rate a header carries: 32 bits and the 24 above them (the upper word's
/// lowest byte is not the rate's).
pub const MAX_RATE: u64 = (1 << 56) - 1;

/// Why a header was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("an iperf 2 header of {0} bytes; it needs {BASE_LEN}")]
    Short(usize),
    #[error("an iperf 2 header asking {0} connections; at most {MAX_THREADS}")]
    Threads(i32),
    #[error("an iperf 2 header naming port {0}")]
    Port(i32),
    #[error("an iperf 2 header asking writes of {0} bytes; at most {MAX_WRITE}")]
    WriteLen(i32),
    #[error("an iperf 2 header asking {0} bytes")]
    Amount(i32),
}

fn word(bytes: &[u8], index: usize) -> u32 {
    let at = index * 4;
    u32::from_be_bytes(bytes[at..at + 4].try_into().expect("four bytes"))
}

/// How many bytes of a connection's start the header takes, from its first
/// [`BASE_LEN`]: the extended header's too where the flags say one follows, none where
/// the client sent no header (the bytes are payload).
pub fn header_len(base: &[u8]) -> Option<usize> {
    let flags = word(base.get(..BASE_LEN)?, 0);
    Some(if flags & flag::EXTEND != 0 {
        HEADER_LEN
    } else if flags & (flag::VERSION1 | flag::BOUNCEBACK) != 0 {
        BASE_LEN
    } else {
        0
    })
}

impl ClientHeader {
    /// A plain test of `threads` connections for `seconds` (what a client without a
    /// header, or `linerate iperf2 -c`, asks).
    pub fn plain(threads: u32, amount: Amount) -> ClientHeader {
        ClientHeader {
            flags: flag::EXTEND,
            threads,
            port: 0,
            write_len: 0,
            amount,
            ext_flags: 0,
            version: None,
            rate: 0,
        }
    }

    /// Decodes a connection's first bytes; `Ok(None)`: the client sent no header.
    /// Every field is bounded here, before anything reads it.
    pub fn decode(bytes: &[u8]) -> Result<Option<ClientHeader>, HeaderError> {
        if bytes.len() < BASE_LEN {
            return Err(HeaderError::Short(bytes.len()));
        }
        let flags = word(bytes, 0);
        if flags & (flag::EXTEND | flag::VERSION1) == 0 {
            // A bounceback test's header is its own (its first word is its flags alone).
            return Ok((flags & flag::BOUNCEBACK != 0).then(|| ClientHeader {
                flags,
                ..ClientHeader::plain(1, Amount::Unsaid)
            }));
        }
        let signed = |index| word(bytes, index) as i32;
        let threads = signed(1);
        if !(1..=MAX_THREADS as i32).contains(&threads) {
            return Err(HeaderError::Threads(threads));
        }
        let port = signed(2);
        let port = u16::try_from(port).map_err(|_| HeaderError::Port(port))?;
        let write_len = signed(3);
        if !(0..=MAX_WRITE as i32).contains(&write_len) {
            return Err(HeaderError::WriteLen(write_len));
        }
        // Negative: hundredths of a second; positive: bytes.
        let amount = match signed(5) {
            n if n < 0 => Amount::Seconds(-(i64::from(n)) as f64 / 100.0),
            0 => return Err(HeaderError::Amount(0)),
            n => Amount::Bytes(n as u64),
        };
        let extended = flags & flag::EXTEND != 0 && bytes.len() >= HEADER_LEN;
        let (ext_flags, version, rate) = if extended {
            let ext_flags = (word(bytes, 8) >> 16) as u16;
            let (upper, lower) = (word(bytes, 9), word(bytes, 10));
            let version = (
                (upper >> 16) as u16,
                (upper & 0xffff) as u16,
                (lower >> 16) as u16,
            );
            // The rate's upper 32 bits sit a byte up in their word (2.1.8 reads and writes
            // them so): 10 Gbit/s is 0x540be400 and 0x00000200.
            let rate = u64::from(word(bytes, 12)) | (u64::from(word(bytes, 13) >> 8) << 32);
            (ext_flags, Some(version), rate)
        } else {
            (0, None, 0)
        };
        Ok(Some(ClientHeader {
            flags,
            threads: threads as u32,
            port,
            write_len: write_len as u32,
            amount,
            ext_flags,
            version,
            rate,
        }))
    }

    /// The header's bytes: the base and extended headers a 2.1 client sends.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        let amount: i32 = match self.amount {
            Amount::Seconds(s) => -((s * 100.0).round().clamp(1.0, i32::MAX as f64) as i32),
            Amount::Bytes(n) => n.clamp(1, i32::MAX as u64) as i32,
            Amount::Unsaid => 0,
        };
        let version = self.version.unwrap_or((2, 1, 8));
        // The wire holds 56 bits of rate: more is saturated, not wrapped.
        let rate = self.rate.min(MAX_RATE);
        let words: [u32; 15] = [
            self.flags | flag::EXTEND,
            self.threads,
            u32::from(self.port),
            self.write_len,
            0,
            amount as u32,
            0,
            0,
            u32::from(self.ext_flags) << 16,
            (u32::from(version.0) << 16) | u32::from(version.1),
            (u32::from(version.2) << 16) | 3,
            0,
            rate as u32,
            ((rate >> 32) as u32) << 8,
            0,
        ];
        for (i, w) in words.iter().enumerate() {
            out[i * 4..i * 4 + 4].copy_from_slice(&w.to_be_bytes());
        }
        out
    }

    /// Whether this is a bounceback test's first request (its fixed part follows).
    pub fn bounceback(&self) -> bool {
        self.flags & flag::BOUNCEBACK != 0 && self.flags & (flag::EXTEND | flag::VERSION1) == 0
    }

    /// Whether every write carries its send time for the receiver's one-way delay
    /// (`--trip-times`).
    pub fn trip_times(&self) -> bool {
        self.ext_flags & ext_flag::TRIP_TIMES != 0
    }

    /// Whether the server sends (`-R`).
    pub fn reverse(&self) -> bool {
        self.ext_flags & ext_flag::REVERSE != 0
    }

    /// Whether both ends send on each connection (`--full-duplex`).
    pub fn full_duplex(&self) -> bool {
        self.ext_flags & ext_flag::FULL_DUPLEX != 0
    }

    /// Whether the client sends on the test's connections: every test but `-R` alone.
    pub fn client_sends(&self) -> bool {
        !self.reverse() || self.full_duplex()
    }

    /// Whether the server sends on them: `-R` or `--full-duplex`.
    pub fn server_sends(&self) -> bool {
        self.reverse() || self.full_duplex()
    }

    /// `-d` (dual): a test back from the server, on connections of its own to the
    /// client's `port`, at once.
    pub fn dual(&self) -> bool {
        self.flags & (flag::VERSION1 | flag::RUN_NOW) == flag::VERSION1 | flag::RUN_NOW
    }

    /// `-r` (tradeoff): a test back from the server once this one has ended.
    pub fn tradeoff(&self) -> bool {
        self.flags & (flag::VERSION1 | flag::RUN_NOW) == flag::VERSION1
    }

    /// The test back that `-d` or `-r` asks, as a header of its own: the server sends,
    /// for the time or count this one asked, at its rate, on as many connections.
    pub fn back(&self) -> ClientHeader {
        let mut back = self.clone();
        back.flags &= !(flag::VERSION1 | flag::RUN_NOW);
        back.ext_flags = (back.ext_flags | ext_flag::REVERSE) & !ext_flag::FULL_DUPLEX;
        back
    }

    /// The flows each connection carries at once: two where both ends send
    /// (`--full-duplex`, or `-d` on connections of its own).
    pub fn ways(&self) -> usize {
        if self.full_duplex() || self.dual() {
            2
        } else {
            1
        }
    }

    /// What the header asks that this server does not serve yet; `None`: a test it
    /// serves (one way, either way, for a time or a count, paced or not).
    pub fn unserved(&self) -> Option<Unserved> {
        let ext = self.ext_flags;
        if self.flags & flag::VERSION1 != 0 {
            return Some(if self.flags & flag::RUN_NOW != 0 {
                Unserved::Dual
            } else {
                Unserved::Tradeoff
            });
        }
        if self.flags & flag::BOUNCEBACK != 0 {
            return Some(Unserved::Bounceback);
        }
        [
            (ext_flag::FULL_DUPLEX, Unserved::FullDuplex),
            (ext_flag::ISOCHRONOUS, Unserved::Isochronous),
            (ext_flag::PERIODIC_BURST, Unserved::Burst),
        ]
        .into_iter()
        .find(|(bit, _)| ext & bit != 0)
        .map(|(_, unserved)| unserved)
    }

    /// Whether it asks `--isochronous`: video frames.
    pub fn isochronous(&self) -> bool {
        self.ext_flags & ext_flag::ISOCHRONOUS != 0
    }

    /// The client's release as iperf 2 prints it ("2.1.8"), where its header said.
    pub fn release(&self) -> Option<String> {
        self.version
            .map(|(major, minor, patch)| format!("{major}.{minor}.{patch}"))
    }
}

/// A bounceback request's fixed part, twelve words: flags, the request's size, two words
/// of settings, a reserved one, the client's write time, the server's read time and write
/// time (seconds and microseconds each; the client leaves the server's all ones), and the
/// hold the client asks (microseconds). The rest of the request is filler. Read from
/// 2.1.8's client and server in a capture (docs/iperf2.md).
pub const BOUNCEBACK_LEN: usize = 48;
/// The longest hold a bounceback request may ask (`--bounceback-hold`): ten seconds.
pub const MAX_BOUNCEBACK_HOLD_US: u32 = 10_000_000;

/// What one bounceback request asks of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounceback {
    /// The request's bytes, its fixed part included; the answer is as long.
    pub size: u32,
    /// How long the server holds the request before it answers, microseconds.
    pub hold_us: u32,
}

/// Why a bounceback request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BouncebackError {
    #[error("a bounceback request of {0} bytes; it needs {BOUNCEBACK_LEN}")]
    Short(usize),
    #[error("a bounceback request whose flags ({0:#010x}) are not a bounceback's")]
    NotBounceback(u32),
    #[error("a bounceback request of {0} bytes; from {BOUNCEBACK_LEN} to {MAX_WRITE}")]
    Size(u32),
    #[error("a bounceback hold of {0} us; at most {MAX_BOUNCEBACK_HOLD_US}")]
    Hold(u32),
}

impl Bounceback {
    /// Reads a request's fixed part, every field bounded.
    pub fn decode(bytes: &[u8]) -> Result<Bounceback, BouncebackError> {
        if bytes.len() < BOUNCEBACK_LEN {
            return Err(BouncebackError::Short(bytes.len()));
        }
        let flags = word(bytes, 0);
        if flags & flag::BOUNCEBACK == 0 || flags & (flag::EXTEND | flag::VERSION1) != 0 {
            return Err(BouncebackError::NotBounceback(flags));
        }
        let size = word(bytes, 1);
        if !(BOUNCEBACK_LEN as u32..=MAX_WRITE).contains(&size) {
            return Err(BouncebackError::Size(size));
        }
        let hold_us = word(bytes, 11);
        if hold_us > MAX_BOUNCEBACK_HOLD_US {
            return Err(BouncebackError::Hold(hold_us));
        }
        Ok(Bounceback { size, hold_us })
    }

    /// Turns a whole request into its answer: the server's read and write times (wall
    /// clock, nanoseconds since the epoch) in their words; the rest goes back as it came.
    pub fn answer(request: &mut [u8], read_ns: u64, written_ns: u64) {
        for (index, ns) in [(7, read_ns), (9, written_ns)] {
            let at = index * 4;
            let seconds = (ns / 1_000_000_000) as u32;
            let micros = ((ns % 1_000_000_000) / 1_000) as u32;
            request[at..at + 4].copy_from_slice(&seconds.to_be_bytes());
            request[at + 4..at + 8].copy_from_slice(&micros.to_be_bytes());
        }
    }
}

/// The acknowledgement a server sends after the header.
pub fn ack() -> [u8; ACK_LEN] {
    let mut out = [0u8; ACK_LEN];
    let words = [
        ACK_TYPE,
        ACK_LEN as u32,
        0,
        ACK_VERSION.0,
        ACK_VERSION.1,
        0,
        0,
    ];
    for (i, w) in words.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&w.to_be_bytes());
    }
    out
}

/// Whether `bytes` begin with a server's acknowledgement.
pub fn is_ack(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && word(bytes, 0) == ACK_TYPE && word(bytes, 1) as usize == ACK_LEN
}

/// Where a UDP test's client header begins in its datagrams: after the datagram's own
/// header (packet number and send time).
pub const UDP_HEADER_AT: usize = 16;
/// The report a server answers a UDP test's final datagram with.
pub const REPORT_LEN: usize = 128;
/// Final datagrams of one test answered at most.
pub const MOST_REPLIES: u32 = 10;

/// What a UDP test's receiver reports back to its client (iperf 2's server report): the
/// client prints these as the server's figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerReport {
    pub bytes: u64,
    /// From the first datagram to the last, nanoseconds.
    pub duration_ns: u64,
    pub lost: u64,
    pub out_of_order: u64,
    /// The datagrams the client sent, by their numbers.
    pub datagrams: u64,
    pub jitter_ns: f64,
    /// The one-way delays, where the test asked for them (`--trip-times`) and the
    /// receiver gives them (its clock and the client's on one time scale).
    pub transit: Option<Transit>,
}

/// A `--trip-times` test's one-way delays as its server report carries them (the client
/// prints them as its server's "Latency avg/min/max/stdev" and NetPwr), nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transit {
    pub min_ns: f64,
    pub max_ns: f64,
    pub sum_ns: f64,
    pub mean_ns: f64,
    /// The sum of squared differences from the mean, nanoseconds squared.
    pub m2_ns2: f64,
    pub count: u64,
    /// Datagrams received over the test's whole seconds: the client's packets a second.
    pub received: u64,
    pub whole_seconds: u32,
}

impl Transit {
    /// The sample standard deviation of the delays, nanoseconds (0 for one).
    pub fn deviation_ns(&self) -> f64 {
        if self.count > 1 {
            (self.m2_ns2.max(0.0) / (self.count - 1) as f64).sqrt()
        } else {
            0.0
        }
    }
}

/// A `--trip-times` client's header is this much longer than [`HEADER_LEN`] (its test's
/// start time; 2.1.8 sends 80 bytes before its first write), and a TCP test's first write
/// follows it.
pub const TRIP_TIMES_HEADER_EXTRA: usize = 20;

/// Where a `--trip-times` TCP write's fields sit in the bytes that begin it (learned from
/// 2.1.8's client; iperf 2 has no specification): its send time as seconds and
/// microseconds of the sender's wall clock, and the write's length, header included.
mod burst_field {
    /// The stream's start, and (`--isochronous`) the frame period in microseconds and the
    /// frame's number: the sender's frame clock's tick.
    pub const START_SECONDS: usize = 12;
    pub const START_MICROS: usize = 16;
    pub const PERIOD_US: usize = 40;
    pub const ID: usize = 44;
    pub const SENT_SECONDS: usize = 20;
    pub const SENT_MICROS: usize = 24;
    pub const SIZE: usize = 48;
    /// A running count of the bursts, low and high words.
    pub const SEQUENCE_LOW: usize = 52;
    pub const SEQUENCE_HIGH: usize = 56;
    /// The bytes read before a write's fields are known.
    pub const HEADER: usize = 56;
}

/// The fields iperf 2's server reads at the start of each TCP write (its burst) under
/// `--trip-times` or `--isochronous`: it reads this many, then the burst's size less them
/// (2.1.8's `TCP_burst_payload`; [`BurstTracker`] needs only the first
/// `burst_field::HEADER` of them).
pub const BURST_FIELDS_LEN: usize = 92;

/// What a TCP client sends before its first write: `header` and, under `--trip-times`
/// or `--isochronous` (`start_ns`: the test's start, Unix), the start extension, with the
/// length the flags must then say (2.1.8's server reads only the base and extended
/// headers' own 60 bytes otherwise, and takes the start for payload).
pub fn tcp_opening(header: &ClientHeader, start_ns: Option<u64>) -> Vec<u8> {
    let mut opening = header.encode().to_vec();
    if let Some(start_ns) = start_ns {
        opening.extend(start_extension(start_ns));
        let length = opening.len() as u32;
        let flags = u32::from_be_bytes(opening[0..4].try_into().expect("four bytes"))
            | flag::LENGTH
            | ((length << 1) & flag::LENGTH_MASK);
        opening[0..4].copy_from_slice(&flags.to_be_bytes());
    }
    opening
}

/// What a TCP client's header carries after [`HEADER_LEN`] under `--trip-times` or
/// `--isochronous`: a reserved word, the test's start (seconds and microseconds of the
/// wall clock) and two words of a pacing rate, unused here.
pub fn start_extension(start_ns: u64) -> [u8; TRIP_TIMES_HEADER_EXTRA] {
    let mut extension = [0u8; TRIP_TIMES_HEADER_EXTRA];
    let (seconds, micros) = seconds_micros(start_ns);
    extension[4..8].copy_from_slice(&seconds.to_be_bytes());
    extension[8..12].copy_from_slice(&micros.to_be_bytes());
    extension
}

fn seconds_micros(unix_ns: u64) -> (u32, u32) {
    (
        (unix_ns / 1_000_000_000) as u32,
        (unix_ns % 1_000_000_000 / 1_000) as u32,
    )
}

/// The fields that begin each burst a TCP client sends under `--trip-times` (a write)
/// or `--isochronous` (a frame), sans IO: the test's start, the burst's send time, its
/// period and number (a frame's), its size with the fields, and a running count.
#[derive(Debug, Clone)]
pub struct BurstWriter {
    start_ns: u64,
    period_us: u32,
    written: u64,
}

impl BurstWriter {
    /// Bursts of a test that started at `start_ns` (Unix), frames `period_us` apart (0:
    /// plain writes).
    pub fn new(start_ns: u64, period_us: u32) -> BurstWriter {
        BurstWriter {
            start_ns,
            period_us,
            written: 0,
        }
    }

    /// The fields of burst `id` (a frame's number from 1; plain writes are numbered in
    /// turn) of `size` bytes, fields included, written at `write_ns` (Unix).
    pub fn fields(&mut self, id: Option<u32>, size: u32, write_ns: u64) -> [u8; BURST_FIELDS_LEN] {
        self.written += 1;
        let mut fields = [0u8; BURST_FIELDS_LEN];
        let mut put =
            |at: usize, value: u32| fields[at..at + 4].copy_from_slice(&value.to_be_bytes());
        let (start_s, start_us) = seconds_micros(self.start_ns);
        let (write_s, write_us) = seconds_micros(write_ns);
        put(burst_field::START_SECONDS, start_s);
        put(burst_field::START_MICROS, start_us);
        put(burst_field::SENT_SECONDS, write_s);
        put(burst_field::SENT_MICROS, write_us);
        put(burst_field::PERIOD_US, self.period_us);
        put(burst_field::ID, id.unwrap_or(self.written as u32));
        put(burst_field::SIZE, size);
        put(burst_field::SEQUENCE_LOW, self.written as u32);
        put(burst_field::SEQUENCE_HIGH, (self.written >> 32) as u32);
        fields
    }
}

/// The one-way delay of an iperf 2 client's TCP writes (`--trip-times` over TCP), sans
/// IO: each write begins with its send time and its length; the tracker follows the
/// stream write by write and, when a write's last byte has been read, takes its latency
/// from its send time to that read, as iperf 2's own server does ("burst latency"). A
/// stream that stops making sense (a length under the fields' own or over
/// [`MAX_WRITE`], microseconds past a second) is no longer followed: counted, never
/// trusted.
#[derive(Debug, Clone, Default)]
pub struct BurstTracker {
    /// Bytes before the first write (the rest of the client's header) still to pass.
    skip: usize,
    header: Vec<u8>,
    /// Bytes of the write under way still to come, and its send time (Unix ns).
    remaining: u64,
    sent_ns: i128,
    /// `--isochronous`: each write is a frame, counted here as it ends whole; the frame
    /// under way as its fields said it.
    frames: Option<Box<crate::video::FrameTracker>>,
    frame: Option<crate::video::StreamFrame>,
    lost_track: bool,
    /// Writes whose last byte came before their send time (clocks apart), not counted.
    pub before_sent: u64,
    count: u64,
    min_ns: f64,
    max_ns: f64,
    mean_ns: f64,
    m2_ns2: f64,
    /// The writes' latencies as a distribution, for their percentiles.
    latencies: linerate_model::latency::LatencyHistogram,
    /// The slowest write's latency and its send time (Unix ns), as iperf 2's histogram
    /// line ends.
    slowest: Option<(f64, i128)>,
    /// The latencies' buckets when the last interval was taken, and the slowest write
    /// since (`serve --histogram-interval`).
    interval_from: Vec<linerate_model::latency::LatencyBucket>,
    interval_slowest: Option<(f64, i128)>,
}

/// The writes that ended in an interval of a test (`serve --histogram-interval`): their
/// latencies' buckets and the slowest of them (its latency, ns, and send time, Unix ns),
/// as iperf 2's interval histogram line has them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WritesInterval {
    pub delays: Vec<linerate_model::latency::LatencyBucket>,
    pub slowest: Option<(f64, i128)>,
}

impl WritesInterval {
    /// Another connection's writes of the same interval joined to these.
    pub fn merge(&mut self, other: &WritesInterval) {
        self.delays = linerate_model::latency::buckets_merged(&self.delays, &other.delays);
        self.slowest = slower(self.slowest, other.slowest);
    }
}

/// The slower of two writes (latency ns, send time), either absent.
fn slower(a: Option<(f64, i128)>, b: Option<(f64, i128)>) -> Option<(f64, i128)> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if y.0 > x.0 { y } else { x }),
        (x, y) => x.or(y),
    }
}

impl BurstTracker {
    pub fn new() -> BurstTracker {
        BurstTracker::default()
    }

    /// A tracker for a connection whose first writes come after what is left of the
    /// client's header once [`HEADER_LEN`] was read: [`TRIP_TIMES_HEADER_EXTRA`].
    pub fn after_header() -> BurstTracker {
        BurstTracker {
            skip: TRIP_TIMES_HEADER_EXTRA,
            ..BurstTracker::default()
        }
    }

    /// A tracker of `--isochronous` frames over TCP, each write (iperf 2's burst) a
    /// frame, for the shared tracker a test's flows merge into.
    pub fn isochronous() -> BurstTracker {
        BurstTracker {
            frames: Some(Box::new(crate::video::FrameTracker::iperf2())),
            ..BurstTracker::default()
        }
    }

    /// A tracker for one connection of the test this one gathers: its writes come
    /// after the rest of the header ([`BurstTracker::after_header`]), and are frames
    /// where this tracker counts frames.
    pub fn for_a_connection(&self) -> BurstTracker {
        BurstTracker {
            frames: self
                .frames
                .as_ref()
                .map(|_| Box::new(crate::video::FrameTracker::iperf2())),
            ..BurstTracker::after_header()
        }
    }

    /// The frames counted (`--isochronous`); `None` for plain `--trip-times` writes.
    pub fn frames(&self) -> Option<&crate::video::FrameTracker> {
        self.frames.as_deref()
    }

    /// `bytes` were read at `arrival_ns` (Unix nanoseconds).
    pub fn feed(&mut self, mut bytes: &[u8], arrival_ns: u64) {
        let skipped = self.skip.min(bytes.len());
        self.skip -= skipped;
        bytes = &bytes[skipped..];
        while !bytes.is_empty() && !self.lost_track {
            if self.remaining == 0 {
                // A write begins: its fields first.
                let want = burst_field::HEADER - self.header.len();
                let take = want.min(bytes.len());
                self.header.extend_from_slice(&bytes[..take]);
                bytes = &bytes[take..];
                if self.header.len() < burst_field::HEADER {
                    return;
                }
                let header = std::mem::take(&mut self.header);
                let word = |at: usize| {
                    u32::from_be_bytes(header[at..at + 4].try_into().expect("four bytes"))
                };
                let (seconds, micros, size) = (
                    word(burst_field::SENT_SECONDS),
                    word(burst_field::SENT_MICROS),
                    word(burst_field::SIZE),
                );
                if micros >= 1_000_000 || (size as usize) < burst_field::HEADER || size > MAX_WRITE
                {
                    self.lost_track = true;
                    return;
                }
                self.sent_ns = i128::from(seconds) * 1_000_000_000 + i128::from(micros) * 1000;
                self.remaining = u64::from(size) - burst_field::HEADER as u64;
                if self.frames.is_some() {
                    let start_micros = u64::from(word(burst_field::START_MICROS).min(999_999));
                    self.frame = Some(crate::video::StreamFrame {
                        id: word(burst_field::ID),
                        period_ns: u64::from(word(burst_field::PERIOD_US)) * 1_000,
                        start_ns: u64::from(word(burst_field::START_SECONDS)) * 1_000_000_000
                            + start_micros * 1_000,
                        bytes: size,
                        sent_ns: u64::from(seconds) * 1_000_000_000 + u64::from(micros) * 1_000,
                    });
                }
                // The buffer is kept for the next write's fields.
                self.header = header;
                self.header.clear();
                if self.remaining == 0 {
                    self.ended(arrival_ns);
                }
                continue;
            }
            let take = (self.remaining as usize).min(bytes.len());
            bytes = &bytes[take..];
            self.remaining -= take as u64;
            if self.remaining == 0 {
                self.ended(arrival_ns);
            }
        }
    }

    /// A write's last byte was read at `arrival_ns`.
    fn ended(&mut self, arrival_ns: u64) {
        if let (Some(frames), Some(frame)) = (self.frames.as_mut(), self.frame.take()) {
            frames.whole_frame(&frame, arrival_ns);
        }
        let latency = i128::from(arrival_ns) - self.sent_ns;
        if latency < 0 {
            self.before_sent += 1;
            return;
        }
        self.latencies.record(latency as u64);
        let latency = latency as f64;
        self.slowest = slower(self.slowest, Some((latency, self.sent_ns)));
        self.interval_slowest = slower(self.interval_slowest, Some((latency, self.sent_ns)));
        self.count += 1;
        if self.count == 1 {
            (self.min_ns, self.max_ns) = (latency, latency);
        } else {
            self.min_ns = self.min_ns.min(latency);
            self.max_ns = self.max_ns.max(latency);
        }
        // Welford's running mean and squared differences.
        let delta = latency - self.mean_ns;
        self.mean_ns += delta / self.count as f64;
        self.m2_ns2 += delta * (latency - self.mean_ns);
    }

    /// The writes' latencies' percentiles, microseconds; `None` before one was counted.
    pub fn percentiles(&self) -> Option<linerate_model::latency::LatencySummary> {
        (self.count > 0).then(|| self.latencies.summary(false))
    }

    /// The writes' latencies with every bucket (`serve --histograms`); `None` before one
    /// was counted.
    pub fn distribution(&self) -> Option<linerate_model::latency::LatencySummary> {
        (self.count > 0).then(|| self.latencies.summary(true))
    }

    /// The slowest write's latency (ns) and its send time (Unix ns); `None` before one
    /// was counted.
    pub fn slowest(&self) -> Option<(f64, i128)> {
        self.slowest
    }

    /// The writes that ended since the last call, or since the tracker began: an
    /// interval's (`serve --histogram-interval`).
    pub fn interval(&mut self) -> WritesInterval {
        // The buckets alone: this runs in the reading worker at each interval's end,
        // where a summary's passes held the reads up milliseconds (a debug build: 12 ms).
        let now = self.latencies.buckets();
        let delays = linerate_model::latency::buckets_since(&now, &self.interval_from);
        self.interval_from = now;
        WritesInterval {
            delays,
            slowest: self.interval_slowest.take(),
        }
    }

    /// Whether the stream stopped making sense as `--trip-times` writes.
    pub fn lost_track(&self) -> bool {
        self.lost_track
    }

    /// The writes' latencies so far, where one was counted.
    pub fn transit(&self) -> Option<Transit> {
        (self.count > 0).then_some(Transit {
            min_ns: self.min_ns,
            max_ns: self.max_ns,
            sum_ns: self.mean_ns * self.count as f64,
            mean_ns: self.mean_ns,
            m2_ns2: self.m2_ns2,
            count: self.count,
            received: self.count,
            whole_seconds: 0,
        })
    }

    /// Joins another connection's writes into these (Chan's parallel form).
    pub fn merge(&mut self, other: &BurstTracker) {
        let mut frames = self.frames.take();
        match (frames.as_mut(), other.frames.as_deref()) {
            (Some(ours), Some(theirs)) => ours.merge(theirs),
            (None, Some(theirs)) => frames = Some(Box::new(theirs.clone())),
            _ => {}
        }
        // A frame the other connection had begun and never read whole.
        if let (Some(ours), Some(_)) = (frames.as_mut(), other.frame) {
            ours.partial_frame();
        }
        self.merge_writes(other);
        self.frames = frames;
    }

    /// The writes' latencies of [`BurstTracker::merge`].
    fn merge_writes(&mut self, other: &BurstTracker) {
        self.latencies.merge(&other.latencies);
        if other.count == 0 {
            self.before_sent += other.before_sent;
            self.lost_track |= other.lost_track;
            return;
        }
        if self.count == 0 {
            let before = self.before_sent;
            *self = other.clone();
            self.before_sent += before;
            return;
        }
        let n = (self.count + other.count) as f64;
        let delta = other.mean_ns - self.mean_ns;
        self.m2_ns2 += other.m2_ns2 + delta * delta * self.count as f64 * other.count as f64 / n;
        self.mean_ns += delta * other.count as f64 / n;
        self.count += other.count;
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
        self.slowest = slower(self.slowest, other.slowest);
        self.before_sent += other.before_sent;
        self.lost_track |= other.lost_track;
    }
}

/// Where the report's first extension (fifteen words) begins, by word index after the
/// datagram header: minimum, maximum, sum, mean, squared differences and a last delay
/// change, each as two words; then the count, and the datagrams and seconds the client's
/// packet rate is taken over.
const TRANSIT_AT: usize = 10;

/// A signed time as iperf 2's two words: whole seconds and microseconds, both carrying
/// the sign (a delay read across two clocks can be below zero).
fn seconds_and_micros(ns: f64) -> (u32, u32) {
    let micros = (ns / 1e3).round() as i64;
    (
        (micros / 1_000_000) as i32 as u32,
        (micros % 1_000_000) as i32 as u32,
    )
}

fn from_seconds_and_micros(seconds: u32, micros: u32) -> f64 {
    (f64::from(seconds as i32) * 1e6 + f64::from(micros as i32)) * 1e3
}

impl ServerReport {
    /// The report's bytes: the datagram header left zero, the report's base words with
    /// 64-bit counts (their high words in the second extension).
    pub fn encode(&self) -> [u8; REPORT_LEN] {
        let mut out = [0u8; REPORT_LEN];
        let mut put = |index: usize, value: u32| {
            let at = UDP_HEADER_AT + index * 4;
            out[at..at + 4].copy_from_slice(&value.to_be_bytes());
        };
        let seconds = self.duration_ns / 1_000_000_000;
        let jitter_us = (self.jitter_ns / 1e3).round() as u64;
        put(0, flag::VERSION1 | flag::SEQNO64);
        put(1, (self.bytes >> 32) as u32);
        put(2, self.bytes as u32);
        put(3, seconds as u32);
        put(4, ((self.duration_ns % 1_000_000_000) / 1_000) as u32);
        put(5, self.lost as u32);
        put(6, self.out_of_order as u32);
        put(7, self.datagrams as u32);
        put(8, (jitter_us / 1_000_000) as u32);
        put(9, (jitter_us % 1_000_000) as u32);
        if let Some(transit) = &self.transit {
            put(0, flag::VERSION1 | flag::EXTEND | flag::SEQNO64);
            let mut at = TRANSIT_AT;
            for ns in [
                transit.min_ns,
                transit.max_ns,
                transit.sum_ns,
                transit.mean_ns,
            ] {
                let (seconds, micros) = seconds_and_micros(ns);
                put(at, seconds);
                put(at + 1, micros);
                at += 2;
            }
            // The squared differences in microseconds squared: the whole part, then the
            // millionths (the client's deviation is the root of this over count - 1).
            let m2_us2 = (transit.m2_ns2 / 1e6).max(0.0);
            put(18, m2_us2.trunc().min(f64::from(u32::MAX)) as u32);
            put(19, (m2_us2.fract() * 1e6) as u32);
            put(22, transit.count.min(u64::from(u32::MAX)) as u32);
            put(23, transit.received.min(u64::from(u32::MAX)) as u32);
            put(24, transit.whole_seconds);
        }
        // After the 15-word first extension: the counts' high words.
        put(25, (self.lost >> 32) as u32);
        put(26, (self.out_of_order >> 32) as u32);
        put(27, (self.datagrams >> 32) as u32);
        out
    }

    /// A report's figures, where `bytes` is one.
    pub fn decode(bytes: &[u8]) -> Option<ServerReport> {
        if bytes.len() < REPORT_LEN {
            return None;
        }
        let body = &bytes[UDP_HEADER_AT..];
        if word(body, 0) & flag::VERSION1 == 0 {
            return None;
        }
        let wide = |high: usize, low: usize| {
            (u64::from(word(body, high)) << 32) | u64::from(word(body, low))
        };
        Some(ServerReport {
            bytes: wide(1, 2),
            duration_ns: u64::from(word(body, 3)) * 1_000_000_000
                + u64::from(word(body, 4)) * 1_000,
            lost: wide(25, 5),
            out_of_order: wide(26, 6),
            datagrams: wide(27, 7),
            jitter_ns: (f64::from(word(body, 8)) * 1e6 + f64::from(word(body, 9))) * 1e3,
            transit: (word(body, 0) & flag::EXTEND != 0).then(|| {
                let at = |index: usize| {
                    from_seconds_and_micros(word(body, index), word(body, index + 1))
                };
                Transit {
                    min_ns: at(TRANSIT_AT),
                    max_ns: at(TRANSIT_AT + 2),
                    sum_ns: at(TRANSIT_AT + 4),
                    mean_ns: at(TRANSIT_AT + 6),
                    m2_ns2: (f64::from(word(body, 18)) + f64::from(word(body, 19)) / 1e6) * 1e6,
                    count: u64::from(word(body, 22)),
                    received: u64::from(word(body, 23)),
                    whole_seconds: word(body, 24),
                }
            }),
        })
    }
}

/// One UDP test as its receiver counts it, sans-IO: its client's header, the datagrams,
/// and the answers to its final datagrams. The answers are bounded so that a source
/// address cannot be made to receive more than it sent: at most [`MOST_REPLIES`], and
/// never more bytes in all than arrived from it.
#[derive(Debug)]
pub struct UdpTest {
    pub header: ClientHeader,
    tracker: SequenceTracker,
    first_ns: u64,
    last_ns: u64,
    /// Every byte that arrived from the client, finals too.
    arrived: u64,
    /// The count the first final datagram carried; `Some` once the test has ended.
    sent: Option<u64>,
    replies: u32,
    /// Whether its report carries the one-way delays (asked, and the clocks allow).
    gives_transit: bool,
    /// `serve --histogram-interval`: each interval's length, the next interval's index,
    /// and the delays' buckets as the last interval ended.
    interval_ns: Option<u64>,
    next_interval: u64,
    delays_before: Vec<linerate_model::latency::LatencyBucket>,
}

/// One interval of a test's one-way delays (`serve --histogram-interval`): seconds from
/// the test's first datagram, and the delays of the datagrams that arrived in it.
#[derive(Debug, Clone, PartialEq)]
pub struct DelayInterval {
    pub span: (f64, f64),
    pub delays: Vec<linerate_model::latency::LatencyBucket>,
}

/// The most intervals a test is cut into: an interval as short as allowed over the
/// longest test still ends within it.
pub const MOST_INTERVALS: u64 = 100_000;

impl UdpTest {
    /// A test whose first datagram (carrying `header`) arrived at `mono_ns`.
    pub fn new(header: ClientHeader, mono_ns: u64) -> UdpTest {
        let tracker = SequenceTracker::new(0, Framing::Iperf2);
        UdpTest {
            // An `--isochronous` stream's datagrams are frames too.
            tracker: match header.isochronous() {
                true => tracker.with_iperf2_frames(),
                false => tracker,
            },
            header,
            first_ns: mono_ns,
            last_ns: mono_ns,
            arrived: 0,
            sent: None,
            replies: 0,
            gives_transit: false,
            interval_ns: None,
            next_interval: 1,
            delays_before: Vec::new(),
        }
    }

    /// Its one-way delays cut into intervals of `interval_ns` too, where it gives them
    /// ([`UdpTest::intervals_ended`]).
    pub fn with_intervals(mut self, interval_ns: Option<u64>) -> UdpTest {
        self.interval_ns = interval_ns
            .filter(|_| self.gives_transit)
            .map(|ns| ns.max(1));
        self
    }

    /// The intervals that ended before `mono_ns` and were not yet taken, each with the
    /// delays of the datagrams that arrived in it (an interval without any has none):
    /// ask before the datagram of `mono_ns` is accounted. At most [`MOST_INTERVALS`] in a
    /// test; none once it has ended.
    pub fn intervals_ended(&mut self, mono_ns: u64) -> Vec<DelayInterval> {
        let Some(length) = self.interval_ns else {
            return Vec::new();
        };
        let elapsed = mono_ns.saturating_sub(self.first_ns);
        let mut ended: Vec<DelayInterval> = Vec::new();
        while self.sent.is_none()
            && self.next_interval <= MOST_INTERVALS
            && elapsed >= self.next_interval.saturating_mul(length)
        {
            // The first interval ended holds every datagram since the last taken; any
            // after it in one call ended without one (the distribution is read once).
            let delays = if ended.is_empty() {
                let now = self.tracker.delays().map_or(Vec::new(), |d| d.histogram);
                let since = linerate_model::latency::buckets_since(&now, &self.delays_before);
                self.delays_before = now;
                since
            } else {
                Vec::new()
            };
            let seconds = |i: u64| (i * length) as f64 / 1e9;
            ended.push(DelayInterval {
                span: (seconds(self.next_interval - 1), seconds(self.next_interval)),
                delays,
            });
            self.next_interval += 1;
        }
        ended
    }

    /// Its report carries the one-way delays: the client asked (`--trip-times`) and the
    /// receiver reads its clock on the client's time scale (one host, a lab, or clocks a
    /// time source keeps; the caller's judgement).
    pub fn giving_transit(mut self, give: bool) -> UdpTest {
        self.gives_transit = give && self.header.trip_times();
        if self.gives_transit {
            // The delays as a distribution too, for the kept run's percentiles.
            self.tracker = self.tracker.with_delays();
        }
        self
    }

    /// The one-way delays' distribution, where they are given.
    pub fn delays(&self) -> Option<linerate_model::latency::LatencySummary> {
        self.tracker.delays()
    }

    /// Accounts one datagram; for a final one, the report to answer it with, where the
    /// bounds allow one.
    pub fn datagram(
        &mut self,
        datagram: &[u8],
        mono_ns: u64,
        wall_ns: u64,
    ) -> Option<[u8; REPORT_LEN]> {
        self.arrived += datagram.len() as u64;
        if !Framing::Iperf2.is_final(datagram) {
            if self.sent.is_none() {
                self.last_ns = mono_ns;
                self.tracker.record(datagram, wall_ns);
            }
            return None;
        }
        if self.sent.is_none() {
            self.sent = Some(Framing::iperf2_sent(datagram).unwrap_or(0));
        }
        let allowed = self.replies < MOST_REPLIES
            && (u64::from(self.replies) + 1) * REPORT_LEN as u64 <= self.arrived;
        allowed.then(|| {
            self.replies += 1;
            self.report().encode()
        })
    }

    /// Whether the client's final datagram has arrived.
    pub fn ended(&self) -> bool {
        self.sent.is_some()
    }

    /// When the last datagram of the test arrived (steady clock).
    pub fn last_ns(&self) -> u64 {
        self.last_ns
    }

    /// An `--isochronous` stream's frames; `None` for any other test.
    pub fn frames(&self) -> Option<&crate::video::FrameTracker> {
        self.tracker.frames()
    }

    /// The tracker's counts.
    pub fn counts(&self) -> crate::datagram::ArrivalCounts {
        self.tracker.counts()
    }

    /// The test's figures so far: the datagrams after the last one seen count as lost
    /// where the final says they were sent.
    pub fn report(&self) -> ServerReport {
        let counts = self.tracker.counts();
        let seen = self.tracker.expected();
        let expected = self.sent.map_or(seen, |sent| sent.max(seen));
        ServerReport {
            bytes: counts.bytes,
            duration_ns: self.last_ns.saturating_sub(self.first_ns),
            lost: counts.lost + (expected - seen),
            out_of_order: counts.out_of_order,
            datagrams: expected,
            jitter_ns: counts.jitter_ns,
            transit: self.transit(&counts),
        }
    }

    fn transit(&self, counts: &crate::datagram::ArrivalCounts) -> Option<Transit> {
        if !self.gives_transit {
            return None;
        }
        let (min_ns, max_ns) = counts.transit_min_ns.zip(counts.transit_max_ns)?;
        let seconds = self.last_ns.saturating_sub(self.first_ns) as f64 / 1e9;
        Some(Transit {
            min_ns,
            max_ns,
            sum_ns: counts.transit_sum_ns,
            mean_ns: counts.transit_sum_ns / counts.transit_samples as f64,
            m2_ns2: counts.transit_m2_ns2,
            count: counts.transit_samples,
            received: counts.datagrams,
            whole_seconds: (seconds.round() as u32).max(1),
        })
    }
}

/// The connections of `-P` tests arriving, gathered into tests: an iperf 2 client opens
/// its `-P` connections one after another, each with the same header and no test
/// identifier, so a test is the connections of one client address with one header that
/// arrive within [`Gathering::wait_ns`] of its first. Sans-IO: `T` is whatever stands for
/// a connection; times are nanoseconds of a steady clock.
#[derive(Debug)]
pub struct Gathering<T> {
    wait_ns: u64,
    /// Tests still gathering, by client address and header bytes.
    open: BTreeMap<(std::net::IpAddr, Vec<u8>), Open<T>>,
    /// The most tests gathering at once; a connection beyond is refused.
    most: usize,
}

/// A test still gathering: the time of its first connection, its header, its
/// connections so far.
type Open<T> = (u64, ClientHeader, Vec<T>);

/// A test gathered: its header and its connections (fewer than asked where the wait ran
/// out).
#[derive(Debug)]
pub struct Gathered<T> {
    pub header: ClientHeader,
    pub connections: Vec<T>,
}

impl<T> Gathering<T> {
    pub fn new(wait_ns: u64, most: usize) -> Gathering<T> {
        Gathering {
            wait_ns,
            open: BTreeMap::new(),
            most,
        }
    }

    /// A connection from `client` whose header was `header_bytes`: the test it completes,
    /// if it does; `Err` hands the connection back where too many tests are gathering.
    pub fn arrive(
        &mut self,
        client: std::net::IpAddr,
        header_bytes: &[u8],
        header: ClientHeader,
        connection: T,
        now_ns: u64,
    ) -> Result<Option<Gathered<T>>, T> {
        let key = (client, header_bytes.to_vec());
        if !self.open.contains_key(&key) && self.open.len() >= self.most {
            return Err(connection);
        }
        let entry = self
            .open
            .entry(key.clone())
            .or_insert_with(|| (now_ns, header, Vec::new()));
        entry.2.push(connection);
        if entry.2.len() as u32 >= entry.1.threads {
            let (_, header, connections) = self.open.remove(&key).expect("present");
            return Ok(Some(Gathered {
                header,
                connections,
            }));
        }
        Ok(None)
    }

    /// The tests whose wait ran out by `now_ns`, with the connections that arrived.
    pub fn expired(&mut self, now_ns: u64) -> Vec<Gathered<T>> {
        let wait = self.wait_ns;
        let due: Vec<_> = self
            .open
            .iter()
            .filter(|(_, (first, _, _))| now_ns.saturating_sub(*first) >= wait)
            .map(|(key, _)| key.clone())
            .collect();
        due.into_iter()
            .filter_map(|key| self.open.remove(&key))
            .map(|(_, header, connections)| Gathered {
                header,
                connections,
            })
            .collect()
    }

    /// Connections waiting for the rest of their test.
    pub fn waiting(&self) -> usize {
        self.open.values().map(|(_, _, c)| c.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{IpAddr, Ipv4Addr};

    /// The first 60 bytes iperf 2.1.8's client wrote for `iperf -c HOST -p 15001 -t 1`.
    const IPERF_2_1_8_T1: &str =
        "40010078 00000001 00003a99 00000000 00000000 ffffff9c 00000000 00000000 00000000 00020001 00080003 00000000 00000000 00000000 00000000";

    fn hex(text: &str) -> Vec<u8> {
        text.split_whitespace()
            .flat_map(|w| u32::from_str_radix(w, 16).unwrap().to_be_bytes())
            .collect()
    }

    #[test]
    fn a_2_1_8_clients_header_reads_as_it_asked() {
        let bytes = hex(IPERF_2_1_8_T1);
        assert_eq!(header_len(&bytes), Some(HEADER_LEN));
        let header = ClientHeader::decode(&bytes).unwrap().unwrap();
        assert_eq!(header.threads, 1);
        assert_eq!(header.port, 15001);
        assert_eq!(header.amount, Amount::Seconds(1.0));
        assert_eq!(header.release().as_deref(), Some("2.1.8"));
        assert_eq!(header.unserved(), None);
        assert_eq!(header.rate, 0);
    }

    #[test]
    fn what_2_1_8_clients_ask_reads_as_asked() {
        // First words iperf 2.1.8's client wrote with -R, --full-duplex, --trip-times,
        // -b 10m, --isochronous, -d, -r and --bounceback.
        let flags_of = |words: &str| ClientHeader::decode(&hex(words)).unwrap().unwrap();
        let reverse = "44010078 00000001 00003aa1 00000000 00000000 ffffff9c 00000000 00000000 04000000 00020001 00080003 00000000 00000000 00000000 00000000";
        assert!(flags_of(reverse).reverse());
        assert_eq!(flags_of(reverse).unserved(), None);
        assert!(!flags_of(reverse).client_sends() && flags_of(reverse).server_sends());
        // --full-duplex -t 200 (the words 2.1.8's client wrote): both send, two flows a
        // connection; unserved over UDP, which the server names (TCP serves it).
        let both = "44010078 00000001 00001393 00000000 00000000 ffffff38 00000000 00000000 08000000 00020001 00080003 00000000 00000000 00000000 00000000";
        let both = flags_of(both);
        assert!(both.full_duplex() && both.client_sends() && both.server_sends());
        assert_eq!((both.ways(), flags_of(reverse).ways()), (2, 1));
        assert_eq!(both.unserved(), Some(Unserved::FullDuplex));
        let trip = "400100a0 00000001 00003aa1 00000000 00000000 ffffff9c 00000000 00000000 00100000 00020001 00080003 00000000 00000000 00000000 00000000";
        assert_eq!(flags_of(trip).ext_flags, ext_flag::TRIP_TIMES);
        assert_eq!(flags_of(trip).unserved(), None);
        let paced = "40010078 00000001 00003aa1 00000000 00000000 ffffff9c 00000000 00000000 00000000 00020001 00080003 00000000 00989680 00000000 00000000";
        assert_eq!(flags_of(paced).rate, 10_000_000);
        // -b 10g: above 32 bits, the upper part a byte up in its word (2.1.8's client's
        // words; a server reading it unshifted asked 2.2 Tbit/s, and a client writing it
        // so had 2.1.8's server send at 1.41 Gbit/s, the rate's lower 32 bits).
        let fast = "40010078 00000001 00003e7f 00000000 00000000 ffffff9c 00000000 00000000 00000000 00020001 00080003 00000000 540be400 00000200 00000000";
        let fast = flags_of(fast);
        assert_eq!(fast.rate, 10_000_000_000);
        assert_eq!(
            &fast.encode()[48..56],
            &[0x54, 0x0b, 0xe4, 0x00, 0, 0, 2, 0]
        );
        let too_fast = ClientHeader {
            rate: u64::MAX,
            ..fast
        };
        let back = ClientHeader::decode(&too_fast.encode()).unwrap().unwrap();
        assert_eq!(back.rate, MAX_RATE);
        let isochronous = "400100a0 00000001 00003aa1 00000000 00000000 ffffff9c 00000000 00000000 00010000 00020001 00080003 00000000 00000000 00000000 00000000";
        assert_eq!(
            flags_of(isochronous).unserved(),
            Some(Unserved::Isochronous)
        );
        let dual = "c0010079 00000001 00003aa1 00000000 00000000 ffffff9c 00000000 00000000 00000000 00020001 00080003 00000000 00000000 00000000 00000000";
        assert_eq!(flags_of(dual).unserved(), Some(Unserved::Dual));
        let tradeoff = "c0010078 00000001 00003aa1 00000000 00000000 ffffff9c 00000000 00000000 00000000 00020001 00080003 00000000 00000000 00000000 00000000";
        assert_eq!(flags_of(tradeoff).unserved(), Some(Unserved::Tradeoff));
        // A test back: at once (-d, two flows a connection) or after (-r), from the
        // server, for the time asked, to the client's port (0x3aa1: 15009).
        let (dual, tradeoff) = (flags_of(dual), flags_of(tradeoff));
        assert!(dual.dual() && !dual.tradeoff() && tradeoff.tradeoff() && !tradeoff.dual());
        assert_eq!((dual.ways(), tradeoff.ways()), (2, 1));
        assert_eq!(dual.port, 15009);
        for back in [dual.back(), tradeoff.back()] {
            assert!(back.reverse() && !back.dual() && !back.tradeoff());
            assert_eq!((back.amount, back.unserved()), (dual.amount, None));
        }
        let bounceback = "00800000 00000064 00000001 80005a5a 00000000 6b10d716";
        assert_eq!(header_len(&hex(bounceback)), Some(BASE_LEN));
        assert_eq!(flags_of(bounceback).unserved(), Some(Unserved::Bounceback));
    }

    #[test]
    fn payload_without_a_header_is_a_plain_test() {
        let bytes = b"012345678901234567890123456789".to_vec();
        assert_eq!(header_len(&bytes), Some(0));
        assert_eq!(ClientHeader::decode(&bytes), Ok(None));
    }

    #[test]
    fn modes_not_served_are_named() {
        let mut header = ClientHeader::plain(1, Amount::Seconds(2.0));
        for (ext, unserved) in [
            (ext_flag::FULL_DUPLEX, Unserved::FullDuplex),
            (ext_flag::ISOCHRONOUS, Unserved::Isochronous),
        ] {
            header.ext_flags = ext;
            let back = ClientHeader::decode(&header.encode()).unwrap().unwrap();
            assert_eq!(back.unserved(), Some(unserved));
        }
        header.ext_flags = ext_flag::TRIP_TIMES;
        assert_eq!(header.unserved(), None, "trip times ride in the payload");
        header.flags = flag::VERSION1 | flag::RUN_NOW;
        assert_eq!(header.unserved(), Some(Unserved::Dual));
        header.flags = flag::VERSION1;
        assert_eq!(header.unserved(), Some(Unserved::Tradeoff));
    }

    #[test]
    fn out_of_range_fields_are_refused() {
        let mut bytes = hex(IPERF_2_1_8_T1);
        bytes[4..8].copy_from_slice(&0i32.to_be_bytes());
        assert_eq!(ClientHeader::decode(&bytes), Err(HeaderError::Threads(0)));
        bytes[4..8].copy_from_slice(&1_000_000i32.to_be_bytes());
        assert!(ClientHeader::decode(&bytes).is_err());
        bytes[4..8].copy_from_slice(&1i32.to_be_bytes());
        bytes[8..12].copy_from_slice(&70_000i32.to_be_bytes());
        assert_eq!(ClientHeader::decode(&bytes), Err(HeaderError::Port(70_000)));
        bytes[8..12].copy_from_slice(&5001i32.to_be_bytes());
        bytes[12..16].copy_from_slice(&(-5i32).to_be_bytes());
        assert_eq!(ClientHeader::decode(&bytes), Err(HeaderError::WriteLen(-5)));
        assert_eq!(
            ClientHeader::decode(&bytes[..10]),
            Err(HeaderError::Short(10))
        );
    }

    #[test]
    fn the_ack_is_what_a_2_1_8_server_sends() {
        // What iperf 2.1.8's server wrote to its client.
        assert_eq!(
            ack().to_vec(),
            hex("00000002 0000001c 00000000 00020001 00080003 00000000 00000000")
        );
        assert!(is_ack(&ack()));
        assert!(!is_ack(&hex(IPERF_2_1_8_T1)));
    }

    #[test]
    fn a_tests_connections_are_gathered_and_a_late_one_starts_no_test_of_its_own() {
        let client = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let header = ClientHeader::plain(3, Amount::Seconds(5.0));
        let bytes = header.encode();
        let mut gathering = Gathering::new(1_000, 4);
        assert!(gathering
            .arrive(client, &bytes, header.clone(), 'a', 0)
            .unwrap()
            .is_none());
        assert!(gathering
            .arrive(client, &bytes, header.clone(), 'b', 10)
            .unwrap()
            .is_none());
        assert_eq!(gathering.waiting(), 2);
        let test = gathering
            .arrive(client, &bytes, header.clone(), 'c', 20)
            .unwrap()
            .expect("the third completes the test");
        assert_eq!(test.connections, vec!['a', 'b', 'c']);
        // Two of three arrive; the wait runs out with what came.
        gathering
            .arrive(client, &bytes, header.clone(), 'd', 100)
            .unwrap();
        assert!(gathering.expired(1_099).is_empty());
        let late = gathering.expired(1_100);
        assert_eq!(late.len(), 1);
        assert_eq!(late[0].connections, vec!['d']);
        // Bounded: a fifth test gathering at once is refused.
        let mut full = Gathering::new(1_000, 1);
        full.arrive(client, &bytes, header.clone(), 'e', 0).unwrap();
        let other = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        assert_eq!(full.arrive(other, &bytes, header, 'f', 0).unwrap_err(), 'f');
    }

    /// A 2.1.8 server's report of 128 datagrams of 200 bytes over 0.2 s (its words as
    /// it wrote them, the extension's transit figures left out).
    #[test]
    fn a_report_reads_as_a_2_1_8_server_writes_it() {
        let report = ServerReport {
            bytes: 25_600,
            duration_ns: 201_651_000,
            lost: 0,
            out_of_order: 0,
            datagrams: 128,
            jitter_ns: 4_000.0,
            transit: None,
        };
        let bytes = report.encode();
        assert_eq!(
            bytes[16..56].to_vec(),
            hex("88000000 00000000 00006400 00000000 000313b3 00000000 00000000 00000080 00000000 00000004")
        );
        assert_eq!(ServerReport::decode(&bytes), Some(report));
    }

    /// A 2.1.8 server's report of a `--trip-times` test on one host (89 datagrams, its
    /// client printing "0.012/0.003/0.067/0.012 ms" and "86 pps"), captured with tcpdump:
    /// read, and written back the same but for the two words of its last delay change,
    /// which linerate leaves zero (its client prints nothing of them).
    #[test]
    fn a_trip_times_report_reads_and_writes_as_2_1_8_has_it() {
        let words = "c8000000 00000000 0001ff0e 00000001 00005b6b 00000000 00000000 00000059 00000000 00000002 \
                     00000000 00000003 00000000 00000043 00000000 00000436 00000000 0000000c 000033e5 0009c5c1 \
                     00000000 fffffff7 00000059 00000056 00000001 00000000 00000000 00000000";
        let mut bytes = vec![0u8; UDP_HEADER_AT];
        bytes.extend(hex(words));
        let report = ServerReport::decode(&bytes).unwrap();
        let transit = report.transit.expect("the extension's delays");
        assert_eq!((report.datagrams, report.bytes), (89, 130_830));
        assert_eq!((transit.min_ns, transit.max_ns), (3_000.0, 67_000.0));
        assert_eq!((transit.sum_ns, transit.mean_ns), (1_078_000.0, 12_000.0));
        assert_eq!(
            (transit.count, transit.received, transit.whole_seconds),
            (89, 86, 1)
        );
        // The client's deviation, 0.012 ms: the root of 13,285.640449 us^2 over 88.
        assert!(
            (transit.deviation_ns() - 12_287.0).abs() < 1.0,
            "{transit:?}"
        );
        let mut again = report.encode().to_vec();
        assert_eq!(&again[96..104], &[0u8; 8], "the delay change left zero");
        again[96..104].copy_from_slice(&bytes[96..104]);
        assert_eq!(again, bytes);
        // A delay below zero (two clocks apart) keeps its sign in both words.
        let negative = ServerReport {
            transit: Some(Transit {
                min_ns: -1_500_000.0,
                ..transit
            }),
            ..report
        };
        let read = ServerReport::decode(&negative.encode()).unwrap();
        assert_eq!(read.transit.unwrap().min_ns, -1_500_000.0);
    }

    /// A 2.1.8 client's bounceback request of 64 bytes with a 5 ms hold, and its server's
    /// answer, as captured: the answer is the request with the server's read and write
    /// times in their words.
    #[test]
    fn a_bounceback_request_is_answered_as_2_1_8_answers_it() {
        let request = hex(
            "00800000 00000040 00000001 80005a5a 00000000 6b118801 0005014f \
             ffffffff ffffffff ffffffff ffffffff 00001388 5a5a5a5a 5a5a5a5a 5a5a5a5a 30313233",
        );
        let asked = Bounceback::decode(&request).unwrap();
        assert_eq!(
            asked,
            Bounceback {
                size: 64,
                hold_us: 5_000
            }
        );
        let mut answer = request.clone();
        let second = |s: u64, us: u64| s * 1_000_000_000 + us * 1_000;
        Bounceback::answer(
            &mut answer,
            second(0x6b11_8801, 0x0005_0181),
            second(0x6b11_8801, 0x0005_165e),
        );
        let server = hex(
            "00800000 00000040 00000001 80005a5a 00000000 6b118801 0005014f \
             6b118801 00050181 6b118801 0005165e 00001388 5a5a5a5a 5a5a5a5a 5a5a5a5a 30313233",
        );
        assert_eq!(answer, server);
        // Bounds: the size, the hold, the flags, the length.
        let with = |index: usize, value: u32| {
            let mut r = request.clone();
            r[index * 4..index * 4 + 4].copy_from_slice(&value.to_be_bytes());
            Bounceback::decode(&r)
        };
        assert_eq!(with(1, 47), Err(BouncebackError::Size(47)));
        assert_eq!(
            with(1, MAX_WRITE + 1),
            Err(BouncebackError::Size(MAX_WRITE + 1))
        );
        assert_eq!(with(11, 10_000_001), Err(BouncebackError::Hold(10_000_001)));
        assert!(matches!(
            with(0, 0x4080_0000),
            Err(BouncebackError::NotBounceback(_))
        ));
        assert_eq!(
            Bounceback::decode(&request[..47]),
            Err(BouncebackError::Short(47))
        );
    }

    fn udp_datagram(sequence: u64, header: &ClientHeader) -> Vec<u8> {
        let mut d = vec![0u8; 200];
        Framing::Iperf2.write(&mut d, sequence, 1_000 * sequence, 0);
        d[UDP_HEADER_AT..UDP_HEADER_AT + HEADER_LEN].copy_from_slice(&header.encode());
        d
    }

    #[test]
    fn a_udp_test_counts_its_losses_and_answers_its_finals_within_bounds() {
        let header = ClientHeader::plain(1, Amount::Seconds(1.0));
        let mut test = UdpTest::new(header.clone(), 0);
        for n in [1u64, 2, 4, 5] {
            assert!(test
                .datagram(&udp_datagram(n, &header), n * 10, n * 10)
                .is_none());
        }
        let mut last = vec![0u8; 200];
        Framing::write_iperf2_final(&mut last, 6, 0);
        let answer = test.datagram(&last, 100, 100).expect("answered");
        let report = ServerReport::decode(&answer).unwrap();
        // Sent 6: 3 and 6 lost.
        assert_eq!((report.datagrams, report.lost, report.bytes), (6, 2, 800));
        assert!(test.ended());
        let answers = (0..20)
            .filter(|_| test.datagram(&last, 110, 110).is_some())
            .count();
        assert_eq!(answers as u32, MOST_REPLIES - 1);
        // A source that sent a 20-byte final alone is answered with no more than it sent.
        let mut tiny = UdpTest::new(header, 0);
        let mut short = vec![0u8; 20];
        Framing::write_iperf2_final(&mut short, 1, 0);
        assert!(tiny.datagram(&short, 1, 1).is_none());
    }

    /// `serve --histogram-interval`: a `--trip-times` test's delays cut at each second
    /// from its first datagram, each interval holding the datagrams that arrived in it,
    /// taken once; none past the test's end, none where it gives no delays.
    #[test]
    fn a_udp_tests_delays_are_cut_into_intervals() {
        let mut header = ClientHeader::plain(1, Amount::Seconds(3.0));
        header.ext_flags = ext_flag::TRIP_TIMES;
        let second = 1_000_000_000u64;
        let mut test = UdpTest::new(header.clone(), 0)
            .giving_transit(true)
            .with_intervals(Some(second));
        // Sent at 1,000 ns a sequence number; read 2 ms later (1 to 3), 5 ms (4 to 5).
        let arrive = |test: &mut UdpTest, n: u64, delay_ns: u64, at: u64| {
            let ended = test.intervals_ended(at);
            test.datagram(&udp_datagram(n, &header), at, 1_000 * n + delay_ns);
            ended
        };
        assert!(arrive(&mut test, 1, 2_000_000, 0).is_empty());
        assert!(arrive(&mut test, 2, 2_000_000, second / 2).is_empty());
        assert!(arrive(&mut test, 3, 2_000_000, second - 1).is_empty());
        // 2.5 s in: the first second ended with three, the second with none.
        // An interval's span, its delays' count, and each delay within 0.1 % of `us`.
        let holds = |interval: &DelayInterval, span: (f64, f64), count: u64, us: f64| {
            interval.span == span
                && interval.delays.iter().map(|b| b.count).sum::<u64>() == count
                && interval
                    .delays
                    .iter()
                    .all(|b| (b.le_us - us).abs() <= us / 1000.0 + 1.0)
        };
        let ended = arrive(&mut test, 4, 5_000_000, 5 * second / 2);
        assert_eq!(ended.len(), 2, "{ended:?}");
        assert!(holds(&ended[0], (0.0, 1.0), 3, 2_000.0), "{ended:?}");
        assert!(holds(&ended[1], (1.0, 2.0), 0, 0.0), "{ended:?}");
        arrive(&mut test, 5, 5_000_000, 5 * second / 2 + 1);
        let third = test.intervals_ended(3 * second);
        assert_eq!(third.len(), 1);
        assert!(holds(&third[0], (2.0, 3.0), 2, 5_000.0), "{third:?}");
        // Ended: no more intervals.
        let mut last = vec![0u8; 200];
        Framing::write_iperf2_final(&mut last, 6, 0);
        test.datagram(&last, 3 * second + 1, 0);
        assert!(test.intervals_ended(9 * second).is_empty());
        // Without --trip-times' delays, no intervals.
        let plain = ClientHeader::plain(1, Amount::Seconds(3.0));
        let mut untimed = UdpTest::new(plain, 0)
            .giving_transit(true)
            .with_intervals(Some(second));
        assert!(untimed.intervals_ended(5 * second).is_empty());
    }

    proptest! {
        /// Any bytes decode to a bounded header, no header, or an error; never a panic.
        #[test]
        fn any_bytes_decode_within_bounds(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(Some(h)) = ClientHeader::decode(&bytes) {
                prop_assert!((1..=MAX_THREADS).contains(&h.threads));
                prop_assert!(h.write_len <= MAX_WRITE);
                match h.amount {
                    Amount::Seconds(s) => prop_assert!(s > 0.0 && s <= i32::MAX as f64 / 100.0 + 1.0),
                    Amount::Bytes(n) => prop_assert!(n > 0 && n <= i32::MAX as u64),
                    // Only a bounceback header (refused) leaves it unsaid.
                    Amount::Unsaid => prop_assert!(h.unserved() == Some(Unserved::Bounceback)),
                }
            }
            if bytes.len() >= BASE_LEN {
                prop_assert!(header_len(&bytes).is_some());
            }
        }

        /// Any bytes read as a bounded bounceback request or an error; never a panic.
        #[test]
        fn any_bounceback_request_decodes_within_bounds(bytes in proptest::collection::vec(any::<u8>(), 0..64), size in 0u32..=u32::MAX, hold in 0u32..=u32::MAX) {
            let mut bytes = bytes;
            if bytes.len() >= BOUNCEBACK_LEN {
                bytes[..4].copy_from_slice(&flag::BOUNCEBACK.to_be_bytes());
                bytes[4..8].copy_from_slice(&size.to_be_bytes());
                bytes[44..48].copy_from_slice(&hold.to_be_bytes());
            }
            if let Ok(asked) = Bounceback::decode(&bytes) {
                prop_assert!((BOUNCEBACK_LEN as u32..=MAX_WRITE).contains(&asked.size));
                prop_assert!(asked.hold_us <= MAX_BOUNCEBACK_HOLD_US);
            }
        }

        /// What a client encodes, a server decodes as asked.
        #[test]
        fn headers_round_trip(threads in 1u32..=MAX_THREADS, hundredths in 1u32..1_000_000, rate in 0..=MAX_RATE, ext in any::<u16>()) {
            let mut header = ClientHeader::plain(threads, Amount::Seconds(f64::from(hundredths) / 100.0));
            header.rate = rate;
            header.ext_flags = ext;
            header.version = Some((2, 1, 8));
            let back = ClientHeader::decode(&header.encode()).unwrap().unwrap();
            prop_assert_eq!(back, header);
        }
    }

    /// A `--trip-times` write as 2.1.8's client writes it: its send time at 20..28, its
    /// length (header included) at 48..52, the rest filler.
    fn trip_write(sent_ns: u64, size: u32) -> Vec<u8> {
        let mut write = vec![0u8; size as usize];
        write[0..4].copy_from_slice(&0x4001_00a0u32.to_be_bytes());
        write[20..24].copy_from_slice(&((sent_ns / 1_000_000_000) as u32).to_be_bytes());
        write[24..28].copy_from_slice(&((sent_ns % 1_000_000_000 / 1000) as u32).to_be_bytes());
        write[48..52].copy_from_slice(&size.to_be_bytes());
        write
    }

    /// What a client writes is what a server reads: a header's start extension and
    /// frames of [`BurstWriter`]'s fields, read by a served connection's tracker, are
    /// each frame whole, numbered as written, timed from its send time, its size its own.
    #[test]
    fn a_burst_writers_frames_are_read_back_as_written() {
        let start = 1_796_000_000_123_456_000u64;
        let ms = 1_000_000u64;
        let extension = start_extension(start);
        assert_eq!(extension.len(), TRIP_TIMES_HEADER_EXTRA);
        // The opening says its own length (80) in the flags; without a start, none.
        let header = ClientHeader::plain(1, Amount::Seconds(2.0));
        let opening = tcp_opening(&header, Some(start));
        assert_eq!(opening.len(), HEADER_LEN + TRIP_TIMES_HEADER_EXTRA);
        let flags = u32::from_be_bytes(opening[0..4].try_into().unwrap());
        assert_eq!(flags & flag::LENGTH_MASK, 80 << 1);
        assert!(flags & flag::LENGTH != 0 && flags & flag::EXTEND != 0);
        assert_eq!(&opening[HEADER_LEN..], &extension);
        assert_eq!(
            ClientHeader::decode(&opening).unwrap().map(|h| h.threads),
            Some(1)
        );
        assert_eq!(tcp_opening(&header, None), header.encode().to_vec());
        assert_eq!(
            u32::from_be_bytes(extension[4..8].try_into().unwrap()),
            1_796_000_000
        );
        assert_eq!(
            u32::from_be_bytes(extension[8..12].try_into().unwrap()),
            123_456
        );
        let mut writer = BurstWriter::new(start, 16_667);
        let mut stream = extension.to_vec();
        for id in 1..=3u32 {
            let size = 1_000 * id;
            let sent = start + u64::from(id - 1) * 16_667_000 + 100_000;
            let mut frame = vec![0u8; size as usize];
            frame[..BURST_FIELDS_LEN].copy_from_slice(&writer.fields(Some(id), size, sent));
            stream.extend(frame);
        }
        let test = BurstTracker::isochronous();
        let mut served = test.for_a_connection();
        served.feed(&stream, start + 60 * ms);
        let transit = served.transit().expect("three writes timed");
        assert_eq!(transit.count, 3);
        let frames = served.frames().expect("frames").counts();
        assert_eq!(frames.whole, 3, "{frames:?}");
        assert!(!served.lost_track());
        // Plain writes are numbered in turn, each its own running count.
        let mut plain = BurstWriter::new(start, 0);
        let first = plain.fields(None, 500, start);
        let second = plain.fields(None, 500, start + ms);
        let id = |f: &[u8; BURST_FIELDS_LEN]| u32::from_be_bytes(f[44..48].try_into().unwrap());
        assert_eq!((id(&first), id(&second)), (1, 2));
        assert_eq!(u32::from_be_bytes(second[52..56].try_into().unwrap()), 2);
        assert_eq!(u32::from_be_bytes(second[48..52].try_into().unwrap()), 500);
    }

    /// Writes read whole, split at any byte, and several in one read: each write's
    /// latency is from its send time to the read that brought its last byte.
    #[test]
    fn trip_times_writes_are_timed_to_their_last_byte() {
        let base = 1_796_000_000_000_000_000u64;
        let ms = 1_000_000u64;
        let mut t = BurstTracker::new();
        // Write 1 (2,000 bytes, sent at base) read in three pieces; its end at +5 ms.
        let one = trip_write(base, 2000);
        t.feed(&one[..30], base + ms);
        t.feed(&one[30..1000], base + 2 * ms);
        t.feed(&one[1000..], base + 5 * ms);
        // Writes 2 and 3 (sent at +20, +21 ms) in one read at +30 ms.
        let mut both = trip_write(base + 20 * ms, 2000);
        both.extend(trip_write(base + 21 * ms, 2000));
        t.feed(&both, base + 30 * ms);
        let transit = t.transit().unwrap();
        assert_eq!(transit.count, 3);
        assert!((transit.min_ns - 5e6).abs() < 1.0, "{transit:?}");
        assert!((transit.max_ns - 10e6).abs() < 1.0, "{transit:?}");
        assert!((transit.mean_ns - 8e6).abs() < 1.0, "{transit:?}");
        // The slowest, write 2 (10 ms), with its send time.
        assert_eq!(t.slowest(), Some((10e6, i128::from(base + 20 * ms))));
        // Two connections' writes merge as one set; the slowest of both stands.
        let mut other = BurstTracker::new();
        other.feed(&trip_write(base, 100), base + 7 * ms);
        t.merge(&other);
        assert_eq!(t.slowest(), Some((10e6, i128::from(base + 20 * ms))));
        let mut slower = BurstTracker::new();
        slower.feed(&trip_write(base + 40 * ms, 100), base + 52 * ms);
        let mut both = other.clone();
        both.merge(&slower);
        assert_eq!(both.slowest(), Some((12e6, i128::from(base + 40 * ms))));
        let merged = t.transit().unwrap();
        assert_eq!(merged.count, 4);
        assert!((merged.mean_ns - 31e6 / 4.0).abs() < 1.0, "{merged:?}");
        let spread = [5e6f64, 9e6, 10e6, 7e6];
        let mean = spread.iter().sum::<f64>() / 4.0;
        let m2: f64 = spread.iter().map(|x| (x - mean) * (x - mean)).sum();
        assert!(
            (merged.m2_ns2 - m2).abs() < 1e3,
            "{} against {m2}",
            merged.m2_ns2
        );
        // A write that says it is shorter than its own fields: no longer followed.
        let mut lost = BurstTracker::new();
        let mut short = trip_write(base, 100);
        short[48..52].copy_from_slice(&10u32.to_be_bytes());
        lost.feed(&short, base);
        assert!(lost.lost_track() && lost.transit().is_none());
        // After a header's last 20 bytes, as a served connection reads them.
        let mut served = BurstTracker::after_header();
        let mut stream = vec![7u8; TRIP_TIMES_HEADER_EXTRA];
        stream.extend(trip_write(base, 300));
        served.feed(&stream, base + 2 * ms);
        assert_eq!(served.transit().map(|t| t.count), Some(1));
        // A send time after the read (clocks apart): not counted.
        let mut early = BurstTracker::new();
        early.feed(&trip_write(base + ms, 100), base);
        assert_eq!((early.before_sent, early.transit()), (1, None));
    }

    /// `serve --histogram-interval`: each interval holds the writes that ended since the
    /// last, with the slowest of them; two connections' intervals join.
    #[test]
    fn an_intervals_writes_are_those_ended_since_the_last_with_their_slowest() {
        let base = 1_796_000_000_000_000_000u64;
        let ms = 1_000_000u64;
        let count = |i: &WritesInterval| i.delays.iter().map(|b| b.count).sum::<u64>();
        let mut t = BurstTracker::new();
        t.feed(&trip_write(base, 500), base + 2 * ms);
        t.feed(&trip_write(base + ms, 500), base + 9 * ms);
        let first = t.interval();
        assert_eq!(count(&first), 2, "{first:?}");
        assert_eq!(first.slowest, Some((8e6, i128::from(base + ms))));
        assert_eq!(t.interval(), WritesInterval::default(), "nothing since");
        t.feed(&trip_write(base + 20 * ms, 500), base + 23 * ms);
        let third = t.interval();
        assert_eq!(count(&third), 1);
        assert_eq!(third.slowest, Some((3e6, i128::from(base + 20 * ms))));
        // The test's own slowest stays the first interval's.
        assert_eq!(t.slowest(), Some((8e6, i128::from(base + ms))));
        let mut other = BurstTracker::new();
        other.feed(&trip_write(base + 20 * ms, 500), base + 24 * ms);
        let mut joined = third.clone();
        joined.merge(&other.interval());
        assert_eq!(count(&joined), 2);
        assert_eq!(joined.slowest, Some((4e6, i128::from(base + 20 * ms))));
    }

    /// An `--isochronous` frame as 2.1.8's client writes it over TCP: a `--trip-times`
    /// write that also says the stream's start (12..20), the period (40..44) and the
    /// frame's number (44..48), as captured from 2.1.8 (`0000411a` is 16,666 us).
    fn frame_write(id: u32, start_ns: u64, sent_ns: u64, size: u32) -> Vec<u8> {
        let mut write = trip_write(sent_ns, size);
        write[12..16].copy_from_slice(&((start_ns / 1_000_000_000) as u32).to_be_bytes());
        write[16..20].copy_from_slice(&((start_ns % 1_000_000_000 / 1000) as u32).to_be_bytes());
        write[40..44].copy_from_slice(&0x0000_411au32.to_be_bytes());
        write[44..48].copy_from_slice(&id.to_be_bytes());
        write
    }

    /// Over TCP each `--isochronous` burst is a frame: counted whole when its last byte is
    /// read, its latency from its send time; a number past the next is a tick the sender
    /// skipped; two connections' frames add up.
    #[test]
    fn isochronous_bursts_over_tcp_are_counted_as_frames() {
        let start = 1_796_000_000_000_000_000u64;
        let ms = 1_000_000u64;
        let shared = BurstTracker::isochronous();
        let mut one = shared.for_a_connection();
        let mut stream = vec![7u8; TRIP_TIMES_HEADER_EXTRA];
        stream.extend(frame_write(1, start, start + ms, 20_000));
        // Frame 2 skipped by the sender; frame 3 read in two pieces, its end 30 ms after
        // its send time.
        let three = frame_write(3, start, start + 34 * ms, 5_000);
        stream.extend(&three[..100]);
        one.feed(&stream, start + 3 * ms);
        one.feed(&three[100..], start + 64 * ms);
        let frames = one.frames().expect("frames counted");
        let counts = frames.counts();
        assert_eq!(counts.whole, 2, "{counts:?}");
        assert_eq!(counts.largest_whole_bytes, 20_000);
        assert_eq!((frames.numbered().sent, frames.numbered().skipped), (2, 1));
        assert_eq!(frames.period_ns(), 16_666_000);
        assert_eq!(counts.latency_us.count, 2);
        assert!(
            (counts.latency_us.max - 30_000.0).abs() < 30.0,
            "{counts:?}"
        );
        // Frame 3 was whole 64 ms after the start, due at 33.3 ms: later than frame 1's
        // schedule (whole 3 ms after its due time) by more than a period.
        assert_eq!(counts.late, 1);
        let mut two = shared.for_a_connection();
        let mut stream = vec![7u8; TRIP_TIMES_HEADER_EXTRA];
        stream.extend(frame_write(1, start, start + ms, 900));
        two.feed(&stream, start + 2 * ms);
        let mut test = shared;
        test.merge(&one);
        test.merge(&two);
        let all = test.frames().unwrap();
        assert_eq!(all.counts().whole, 3);
        assert_eq!((all.numbered().sent, all.numbered().skipped), (3, 1));
        assert_eq!(test.transit().map(|t| t.count), Some(3));
        // Plain --trip-times writes count no frames.
        assert!(BurstTracker::new().for_a_connection().frames().is_none());
    }

    proptest! {
        /// Whatever a client writes, the tracker counts no more writes than the bytes could
        /// hold and never panics.
        #[test]
        fn trip_times_tracking_holds_against_any_bytes(
            reads in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..300), any::<u64>()), 0..40),
        ) {
            let mut t = BurstTracker::new();
            let mut total = 0usize;
            for (bytes, at) in &reads {
                t.feed(bytes, *at);
                total += bytes.len();
            }
            let counted = t.transit().map_or(0, |x| x.count) + t.before_sent;
            prop_assert!(counted as usize <= total / 56 + 1);
            // As frames too: none whole that the bytes could not hold.
            let mut frames = BurstTracker::isochronous().for_a_connection();
            for (bytes, at) in &reads {
                frames.feed(bytes, *at);
            }
            let whole = frames.frames().map_or(0, |f| f.counts().whole);
            prop_assert!(whole as usize <= total / 56 + 1);
        }
    }
}
