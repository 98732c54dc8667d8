//! UDP test datagrams and the receiver's accounting of them (docs/protocol.md 5).
//!
//! Every test datagram starts with a header in network byte order:
//!
//! | bytes  | field                                                        |
//! |--------|--------------------------------------------------------------|
//! | 0..8   | sequence number, u64, from 0 per flow                        |
//! | 8..16  | send time, u64 nanoseconds on the sender's test clock        |
//! | 16..20 | flow id, u32 (present when the datagram is at least 20 bytes) |
//! | 20..24 | test tag, u32: the first four bytes of the test token (at 24) |
//!
//! The rest is a fixed pattern. Datagrams may be as short as 16 bytes, so the flow id and
//! tag are carried only when there is room; each flow has its own connected socket pair,
//! which identifies it anyway.
//!
//! [`SequenceTracker`] turns arriving headers into the figures docs/measurement.md 9
//! ask for: loss, reordering and duplicates as three separate counts, and RFC 3550 jitter
//! over in-order datagrams.

/// Each field's bytes, named once for writing and reading (smoltcp's `field` modules).
mod field {
    use std::ops::Range;

    /// linerate's header.
    pub const SEQUENCE: Range<usize> = 0..8;
    pub const SENT_NS: Range<usize> = 8..16;
    pub const FLOW: Range<usize> = 16..20;
    pub const TAG: Range<usize> = 20..24;

    /// iperf3's header.
    pub mod iperf3 {
        use std::ops::Range;
        pub const SECONDS: Range<usize> = 0..4;
        pub const MICROS: Range<usize> = 4..8;
        pub const NUMBER: Range<usize> = 8..12;
        /// With iperf3's 64-bit counters.
        pub const WIDE_NUMBER: Range<usize> = 8..16;
    }

    /// iperf 2's header (its UDP datagram): the packet number's low 32 bits, the send time
    /// as seconds and microseconds of the wall clock, the number's high 32 bits, then the
    /// first word of its client header, whose flags say whether the number is 64 bits.
    pub mod iperf2 {
        use std::ops::Range;
        pub const NUMBER_LOW: Range<usize> = 0..4;
        pub const SECONDS: Range<usize> = 4..8;
        pub const MICROS: Range<usize> = 8..12;
        pub const NUMBER_HIGH: Range<usize> = 12..16;
        pub const FLAGS: Range<usize> = 16..20;
    }

    /// A UDP flow's hello.
    pub mod hello {
        use std::ops::Range;
        pub const MAGIC: Range<usize> = 0..8;
        pub const TOKEN: Range<usize> = 8..24;
        pub const FLOW: Range<usize> = 24..28;
    }
}

fn u32_at(datagram: &[u8], at: std::ops::Range<usize>) -> u32 {
    u32::from_be_bytes(datagram[at].try_into().expect("four bytes"))
}

fn u64_at(datagram: &[u8], at: std::ops::Range<usize>) -> u64 {
    u64::from_be_bytes(datagram[at].try_into().expect("eight bytes"))
}

/// The smallest datagram that carries a sequence number and a send time.
pub const MIN_DATAGRAM: usize = field::SENT_NS.end;
/// The largest UDP payload over IPv4.
pub const MAX_DATAGRAM: usize = 65_507;
/// Header bytes when the datagram has room for all fields.
pub const FULL_HEADER: usize = field::TAG.end;

/// The fields of a test datagram's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub sequence: u64,
    pub sent_ns: u64,
    pub flow: Option<u32>,
    pub tag: Option<u32>,
}

/// Writes the header for `sequence` into `datagram` (at least [`MIN_DATAGRAM`] bytes).
pub fn write_header(datagram: &mut [u8], sequence: u64, sent_ns: u64, flow: u32, tag: u32) {
    datagram[field::SEQUENCE].copy_from_slice(&sequence.to_be_bytes());
    datagram[field::SENT_NS].copy_from_slice(&sent_ns.to_be_bytes());
    if datagram.len() >= field::FLOW.end {
        datagram[field::FLOW].copy_from_slice(&flow.to_be_bytes());
    }
    if datagram.len() >= field::TAG.end {
        datagram[field::TAG].copy_from_slice(&tag.to_be_bytes());
    }
}

/// How a test's datagrams carry their header: linerate's own, or iperf3's when the peer is
/// an iperf3 client or server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// The header above, with the test's tag.
    Native { tag: u32 },
    /// iperf3's: send time as seconds and microseconds (u32 BE each), then the packet
    /// number from 1, as u32 BE or, with `wide` (iperf3's 64-bit counters), u64 BE. Only
    /// differences of send times matter (jitter), so any steady clock will do.
    Iperf3 { wide: bool },
    /// iperf 2's (docs/protocol.md, "iperf 2's datagrams"): the packet number from 1, its low
    /// 32 bits first and its high 32 bits after the send time (seconds and microseconds of
    /// the wall clock, which one-way delay needs); the stream's last datagrams carry the
    /// number negated (see [`Framing::is_final`]). linerate writes the 64-bit flag in the
    /// word after, where the datagram has room; a datagram without it has a 32-bit number.
    Iperf2,
}

/// iperf 2's flag for 64-bit packet numbers (HEADER_SEQNO64B in its client header's
/// first word).
pub const IPERF2_SEQNO64: u32 = 0x0800_0000;
/// iperf 2's flag for a UDP test's client header (HEADER_UDPTESTS).
pub const IPERF2_UDP_TESTS: u32 = 0x2000_0000;

impl Framing {
    /// The shortest datagram that carries the header.
    pub fn min_len(&self) -> usize {
        match self {
            Framing::Native { .. } => MIN_DATAGRAM,
            Framing::Iperf3 { wide: true } => field::iperf3::WIDE_NUMBER.end,
            Framing::Iperf3 { wide: false } => field::iperf3::NUMBER.end,
            Framing::Iperf2 => field::iperf2::NUMBER_HIGH.end,
        }
    }

    /// iperf 2's signed packet number: 64 bits where the flags say so, else the low
    /// word's 32 (an older sender leaves the high word to chance).
    fn iperf2_number(datagram: &[u8]) -> i64 {
        let low = u32_at(datagram, field::iperf2::NUMBER_LOW);
        let wide = datagram.len() >= field::iperf2::FLAGS.end
            && u32_at(datagram, field::iperf2::FLAGS) & IPERF2_SEQNO64 != 0;
        if wide {
            ((u64::from(u32_at(datagram, field::iperf2::NUMBER_HIGH)) << 32) | u64::from(low))
                as i64
        } else {
            i64::from(low as i32)
        }
    }

    /// The datagrams an iperf 2 final datagram says its stream sent (its number negated,
    /// less one); `None` for any other datagram.
    pub fn iperf2_sent(datagram: &[u8]) -> Option<u64> {
        if datagram.len() < Framing::Iperf2.min_len() {
            return None;
        }
        Framing::iperf2_number(datagram)
            .checked_neg()?
            .checked_sub(1)
            .and_then(|n| u64::try_from(n).ok())
    }

    /// Whether `datagram` ends its stream: iperf 2's last datagrams carry their packet
    /// number negated (its sender repeats them, as UDP may lose one). Other framings end
    /// over the control connection, never in a datagram.
    pub fn is_final(&self, datagram: &[u8]) -> bool {
        match self {
            Framing::Iperf2 => {
                datagram.len() >= self.min_len() && Framing::iperf2_number(datagram) < 0
            }
            Framing::Native { .. } | Framing::Iperf3 { .. } => false,
        }
    }

    /// Writes iperf 2's final datagram after `sent` datagrams: the next packet number,
    /// negated, with the send time (`sent_ns`, wall clock).
    pub fn write_iperf2_final(datagram: &mut [u8], sent: u64, sent_ns: u64) {
        Framing::Iperf2.write(datagram, sent, sent_ns, 0);
        let negated = (-((sent + 1) as i64)) as u64;
        datagram[field::iperf2::NUMBER_LOW].copy_from_slice(&(negated as u32).to_be_bytes());
        datagram[field::iperf2::NUMBER_HIGH]
            .copy_from_slice(&((negated >> 32) as u32).to_be_bytes());
    }

    /// Writes the header of datagram `sequence` (from 0) of `flow`.
    pub fn write(&self, datagram: &mut [u8], sequence: u64, sent_ns: u64, flow: u32) {
        match *self {
            Framing::Native { tag } => write_header(datagram, sequence, sent_ns, flow, tag),
            Framing::Iperf3 { wide } => {
                let seconds = (sent_ns / 1_000_000_000) as u32;
                let micros = ((sent_ns % 1_000_000_000) / 1000) as u32;
                datagram[field::iperf3::SECONDS].copy_from_slice(&seconds.to_be_bytes());
                datagram[field::iperf3::MICROS].copy_from_slice(&micros.to_be_bytes());
                let number = sequence + 1;
                if wide {
                    datagram[field::iperf3::WIDE_NUMBER].copy_from_slice(&number.to_be_bytes());
                } else {
                    datagram[field::iperf3::NUMBER].copy_from_slice(&(number as u32).to_be_bytes());
                }
            }
            Framing::Iperf2 => {
                let number = sequence + 1;
                let seconds = (sent_ns / 1_000_000_000) as u32;
                let micros = ((sent_ns % 1_000_000_000) / 1000) as u32;
                datagram[field::iperf2::NUMBER_LOW].copy_from_slice(&(number as u32).to_be_bytes());
                datagram[field::iperf2::SECONDS].copy_from_slice(&seconds.to_be_bytes());
                datagram[field::iperf2::MICROS].copy_from_slice(&micros.to_be_bytes());
                datagram[field::iperf2::NUMBER_HIGH]
                    .copy_from_slice(&((number >> 32) as u32).to_be_bytes());
                // A datagram that carries a client's UDP header (its UDP_TESTS flag, which
                // `linerate iperf2 -c` writes once into every datagram) keeps that flags
                // word: it says 64-bit numbers itself.
                if datagram.len() >= field::iperf2::FLAGS.end
                    && u32_at(datagram, field::iperf2::FLAGS) & IPERF2_UDP_TESTS == 0
                {
                    datagram[field::iperf2::FLAGS].copy_from_slice(&IPERF2_SEQNO64.to_be_bytes());
                }
            }
        }
    }

    /// Reads a header, sequence numbered from 0; `None` for a datagram that is not one.
    pub fn read(&self, datagram: &[u8]) -> Option<Header> {
        match *self {
            Framing::Native { .. } => read_header(datagram),
            Framing::Iperf3 { wide } => {
                if datagram.len() < self.min_len() {
                    return None;
                }
                let number = if wide {
                    u64_at(datagram, field::iperf3::WIDE_NUMBER)
                } else {
                    u64::from(u32_at(datagram, field::iperf3::NUMBER))
                };
                let sent_ns = u64::from(u32_at(datagram, field::iperf3::SECONDS)) * 1_000_000_000
                    + u64::from(u32_at(datagram, field::iperf3::MICROS)) * 1000;
                Some(Header {
                    // Packet numbers start at 1: a 0 is no iperf3 datagram.
                    sequence: number.checked_sub(1)?,
                    sent_ns,
                    flow: None,
                    tag: None,
                })
            }
            Framing::Iperf2 => {
                if datagram.len() < self.min_len() {
                    return None;
                }
                // From 1; a final (negative) number or a 0 is no test datagram.
                let number = u64::try_from(Framing::iperf2_number(datagram)).ok()?;
                let sent_ns = u64::from(u32_at(datagram, field::iperf2::SECONDS)) * 1_000_000_000
                    + u64::from(u32_at(datagram, field::iperf2::MICROS)).min(999_999) * 1000;
                Some(Header {
                    sequence: number.checked_sub(1)?,
                    sent_ns,
                    flow: None,
                    tag: None,
                })
            }
        }
    }
}

/// Reads a header; `None` for a datagram too short to be a test datagram.
pub fn read_header(datagram: &[u8]) -> Option<Header> {
    (datagram.len() >= MIN_DATAGRAM).then(|| Header {
        sequence: u64_at(datagram, field::SEQUENCE),
        sent_ns: u64_at(datagram, field::SENT_NS),
        flow: (datagram.len() >= field::FLOW.end).then(|| u32_at(datagram, field::FLOW)),
        tag: (datagram.len() >= field::TAG.end).then(|| u32_at(datagram, field::TAG)),
    })
}

/// The tag a test's datagrams carry: the first four bytes of its token.
pub fn tag_of(token: &[u8; 16]) -> u32 {
    u32_at(token, 0..4)
}

/// A UDP flow's hello, client to server, until the server reports the flows ready:
/// "LRUDPHEL", the test token and the flow id. The server takes the flow's address from
/// it, and only from the address that holds the test's control connection.
pub const HELLO_MAGIC: &[u8; 8] = b"LRUDPHEL";
pub const HELLO_LEN: usize = field::hello::FLOW.end;

pub fn hello(token: &[u8; 16], flow: u32) -> [u8; HELLO_LEN] {
    let mut out = [0u8; HELLO_LEN];
    out[field::hello::MAGIC].copy_from_slice(HELLO_MAGIC);
    out[field::hello::TOKEN].copy_from_slice(token);
    out[field::hello::FLOW].copy_from_slice(&flow.to_be_bytes());
    out
}

/// The token and flow of a hello.
pub fn parse_hello(datagram: &[u8]) -> Option<([u8; 16], u32)> {
    if datagram.len() != HELLO_LEN || &datagram[field::hello::MAGIC] != HELLO_MAGIC {
        return None;
    }
    let token: [u8; 16] = datagram[field::hello::TOKEN].try_into().ok()?;
    let flow = u32_at(datagram, field::hello::FLOW);
    Some((token, flow))
}

/// A hello that carries back the cookie the server answered the plain hello with
/// (crate::address_check): only then does the server send to the hello's address.
pub const VALIDATED_HELLO_LEN: usize = HELLO_LEN + crate::address_check::COOKIE_LEN;

pub fn validated_hello(
    hello: &[u8; HELLO_LEN],
    cookie: &[u8; crate::address_check::COOKIE_LEN],
) -> [u8; VALIDATED_HELLO_LEN] {
    let mut out = [0u8; VALIDATED_HELLO_LEN];
    out[..HELLO_LEN].copy_from_slice(hello);
    out[HELLO_LEN..].copy_from_slice(cookie);
    out
}

/// The token, flow and cookie of a validated hello.
pub fn parse_validated_hello(
    datagram: &[u8],
) -> Option<([u8; 16], u32, [u8; crate::address_check::COOKIE_LEN])> {
    if datagram.len() != VALIDATED_HELLO_LEN {
        return None;
    }
    let (token, flow) = parse_hello(&datagram[..HELLO_LEN])?;
    Some((token, flow, datagram[HELLO_LEN..].try_into().ok()?))
}

/// Whether a datagram is a hello, plain or validated (a receiver skips the ones repeated
/// while the flows were set up).
pub fn is_hello(datagram: &[u8]) -> bool {
    parse_hello(datagram).is_some() || parse_validated_hello(datagram).is_some()
}

/// Counts of one flow's arrivals, cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ArrivalCounts {
    /// Distinct test datagrams received (duplicates excluded).
    pub datagrams: u64,
    /// Their payload bytes.
    pub bytes: u64,
    /// Sequence numbers skipped and not (yet) seen: a gap that a late datagram fills is
    /// taken back out.
    pub lost: u64,
    /// Datagrams that arrived after a higher sequence number.
    pub out_of_order: u64,
    /// Datagrams seen before.
    pub duplicates: u64,
    /// Datagrams that were not this flow's: too short, another flow's id or test's tag.
    pub foreign: u64,
    /// RFC 3550 interarrival jitter in nanoseconds.
    pub jitter_ns: f64,
    /// Sum of transit times (arrival minus send time) of in-order datagrams, nanoseconds,
    /// and how many were summed: the one-way delay when both ends' clocks agree.
    pub transit_sum_ns: f64,
    pub transit_samples: u64,
    /// The least and the most of those transit times, nanoseconds: the least is the
    /// path's delay with no queue, the reference an added delay is measured from.
    pub transit_min_ns: Option<f64>,
    pub transit_max_ns: Option<f64>,
    /// The sum of the squared differences of those transit times from their mean,
    /// nanoseconds squared (Welford's running form, exact enough over millions): their
    /// variance is this over `transit_samples - 1`.
    pub transit_m2_ns2: f64,
    /// Gaps in the sequence when they opened (a run of consecutive losses is one event):
    /// `lost / loss_events` is the mean burst length, where nothing arrived late.
    pub loss_events: u64,
    /// Calls (`--pattern voip`): datagrams that arrived after the jitter buffer would have
    /// played them (a fixed one: their transit exceeded the first datagram's by more than
    /// the buffer). They count among `datagrams`, and a call counts them lost.
    pub late: u64,
    /// Calls: runs of consecutive sequence numbers the listener did not hear (lost, or
    /// judged late), a run of late and lost datagrams together once: the E-model's burst
    /// ratio counts these. A datagram that fills a gap out of order leaves it as it stood.
    pub unplayed_runs: u64,
    /// Calls: the datagrams the jitter buffer judged and the sum of its depth at each,
    /// nanoseconds (a fixed buffer's size each time; an adaptive one's as it stood): the
    /// mean depth is what the listener waited.
    pub playout_judged: u64,
    pub playout_depth_sum_ns: f64,
}

/// A call's jitter buffer, as a receiver judges datagrams against it.
#[derive(Debug, Clone)]
enum Playout {
    Fixed(u64),
    Adaptive(Box<linerate_model::call::AdaptivePlayout>),
}

/// How far back the tracker remembers which sequence numbers it has seen.
const HISTORY: u64 = 1 << 14;

/// One flow's receive-side accounting.
#[derive(Debug, Clone)]
pub struct SequenceTracker {
    flow: u32,
    framing: Framing,
    /// The next sequence number expected in order (one past the highest seen).
    next: u64,
    /// Bit `s % HISTORY` is set when sequence `s` (within HISTORY of `next`) has arrived.
    seen: Vec<u64>,
    /// Transit time of the previous in-order datagram, for jitter.
    last_transit: Option<i128>,
    /// A call's jitter buffer: fixed (nanoseconds, set on the first datagram's transit),
    /// or adaptive.
    playout: Option<Playout>,
    /// Calls: whether the last in-order sequence number went unheard (lost or late).
    last_unplayed: bool,
    first_transit: Option<i128>,
    /// A video flow's frames, put back together from its distinct datagrams.
    frames: Option<crate::video::FrameTracker>,
    /// Each distinct datagram's one-way delay (arrival less send time), where the flow's
    /// delays are wanted as a distribution (calls, iperf 2's `--trip-times`); a delay
    /// below zero (clocks apart) is counted in `delays_before_sent`, not recorded.
    delays: Option<Box<linerate_model::latency::LatencyHistogram>>,
    delays_before_sent: u64,
    counts: ArrivalCounts,
}

impl SequenceTracker {
    pub fn new(flow: u32, framing: Framing) -> SequenceTracker {
        SequenceTracker {
            flow,
            framing,
            next: 0,
            seen: vec![0; (HISTORY / 64) as usize],
            last_transit: None,
            playout: None,
            last_unplayed: false,
            first_transit: None,
            frames: None,
            delays: None,
            delays_before_sent: 0,
            counts: ArrivalCounts::default(),
        }
    }

    /// Also puts a video flow's datagrams back into frames due every `period_ns`, the
    /// key frames (`key`) counted apart too.
    pub fn with_frames(
        mut self,
        period_ns: u64,
        key: Option<linerate_model::video::KeyFrames>,
    ) -> SequenceTracker {
        self.frames = Some(crate::video::FrameTracker::new(period_ns).with_key_frames(key));
        self
    }

    /// Also puts an iperf 2 `--isochronous` stream's datagrams back into frames.
    pub fn with_iperf2_frames(mut self) -> SequenceTracker {
        self.frames = Some(crate::video::FrameTracker::iperf2());
        self
    }

    /// Also keeps every distinct datagram's one-way delay as a distribution.
    pub fn with_delays(mut self) -> SequenceTracker {
        self.delays = Some(Box::new(linerate_model::latency::LatencyHistogram::new()));
        self
    }

    /// The one-way delays so far, microseconds, with their buckets (so that flows'
    /// distributions can be merged); `None` where the tracker keeps none, or none was
    /// recorded.
    pub fn delays(&self) -> Option<linerate_model::latency::LatencySummary> {
        let delays = self.delays.as_ref()?;
        let summary = delays.summary(true);
        (summary.count > 0).then_some(summary)
    }

    /// Forgets the delays kept so far (a test's warm-up, before its measured window).
    pub fn restart_delays(&mut self) {
        if let Some(delays) = self.delays.as_mut() {
            **delays = linerate_model::latency::LatencyHistogram::new();
            self.delays_before_sent = 0;
        }
    }

    /// Datagrams whose send time came after their arrival here (clocks apart): not
    /// among [`SequenceTracker::delays`].
    pub fn delays_before_sent(&self) -> u64 {
        self.delays_before_sent
    }

    fn time_delay(&mut self, transit: i128) {
        if let Some(delays) = self.delays.as_mut() {
            match u64::try_from(transit) {
                Ok(ns) => delays.record(ns),
                Err(_) => self.delays_before_sent += 1,
            }
        }
    }

    /// A video flow's frames so far; `None` for any other flow.
    pub fn frame_counts(&self) -> Option<linerate_model::video::FrameCounts> {
        self.frames.as_ref().map(crate::video::FrameTracker::counts)
    }

    /// A video flow's frame tracker; `None` for any other flow.
    pub fn frames(&self) -> Option<&crate::video::FrameTracker> {
        self.frames.as_ref()
    }

    /// A distinct datagram of this flow arrived: the frame it belongs to has it.
    fn judge_frame(&mut self, datagram: &[u8], arrival_ns: u64) {
        if let Some(frames) = self.frames.as_mut() {
            frames.record(datagram, arrival_ns);
        }
    }

    /// Also judges each datagram against a fixed jitter buffer of `buffer_ns` set on the
    /// first datagram's transit (a call's receiver), counting the late ones.
    pub fn with_playout(mut self, buffer_ns: u64) -> SequenceTracker {
        self.playout = Some(Playout::Fixed(buffer_ns));
        self
    }

    /// Also judges each datagram against an adaptive jitter buffer that grows to at most
    /// `most_ms` (`linerate_model::call::AdaptivePlayout`), counting the late ones.
    pub fn with_adaptive_playout(mut self, most_ms: u32) -> SequenceTracker {
        self.playout = Some(Playout::Adaptive(Box::new(
            linerate_model::call::AdaptivePlayout::new(most_ms),
        )));
        self
    }

    /// Counts a datagram with `transit` late where a jitter buffer is judged: one the
    /// buffer would have played before it arrived (a fixed one set on the first
    /// datagram's transit; an adaptive one where it stood).
    fn judge_playout(&mut self, transit: i128) -> bool {
        let (late, depth_ns) = match self.playout.as_mut() {
            None => return false,
            Some(Playout::Fixed(buffer)) => {
                let first = *self.first_transit.get_or_insert(transit);
                (transit - first > i128::from(*buffer), *buffer as f64)
            }
            Some(Playout::Adaptive(adaptive)) => {
                let depth = adaptive.depth_ns();
                (adaptive.late(transit), depth)
            }
        };
        self.counts.late += u64::from(late);
        self.counts.playout_judged += 1;
        self.counts.playout_depth_sum_ns += depth_ns;
        late
    }

    /// Calls: counts the runs of unheard sequence numbers as in-order datagram `late`
    /// arrives after `gap` lost ones.
    fn count_unplayed_runs(&mut self, gap: u64, late: bool) {
        if self.playout.is_none() {
            return;
        }
        let mut unheard = self.last_unplayed;
        for unheard_now in [gap > 0, late] {
            if unheard_now && !unheard {
                self.counts.unplayed_runs += 1;
            }
            unheard |= unheard_now;
        }
        self.last_unplayed = late;
    }

    pub fn counts(&self) -> ArrivalCounts {
        self.counts
    }

    /// The highest sequence number seen plus one: datagrams the sender must have sent.
    pub fn expected(&self) -> u64 {
        self.next
    }

    fn bit(&self, sequence: u64) -> bool {
        let slot = sequence % HISTORY;
        self.seen[(slot / 64) as usize] & (1 << (slot % 64)) != 0
    }

    fn set_bit(&mut self, sequence: u64, on: bool) {
        let slot = sequence % HISTORY;
        let word = &mut self.seen[(slot / 64) as usize];
        if on {
            *word |= 1 << (slot % 64);
        } else {
            *word &= !(1 << (slot % 64));
        }
    }

    /// Accounts one datagram of `len` bytes that arrived at `arrival_ns` (receiver clock).
    pub fn record(&mut self, datagram: &[u8], arrival_ns: u64) {
        let Some(header) = self.framing.read(datagram) else {
            self.counts.foreign += 1;
            return;
        };
        let tag = match self.framing {
            Framing::Native { tag } => Some(tag),
            Framing::Iperf3 { .. } | Framing::Iperf2 => None,
        };
        if header.flow.is_some_and(|f| f != self.flow)
            || header
                .tag
                .zip(tag)
                .is_some_and(|(theirs, ours)| theirs != ours)
        {
            self.counts.foreign += 1;
            return;
        }
        let sequence = header.sequence;
        let transit = i128::from(arrival_ns) - i128::from(header.sent_ns);
        if sequence >= self.next {
            // In order, possibly after a gap. Forget the history the window slides past.
            let gap = sequence - self.next;
            if gap >= HISTORY {
                self.seen.iter_mut().for_each(|w| *w = 0);
            } else {
                for s in self.next..sequence {
                    self.set_bit(s, false);
                }
            }
            self.counts.lost += gap;
            self.counts.loss_events += u64::from(gap > 0);
            self.set_bit(sequence, true);
            self.next = sequence + 1;
            self.counts.datagrams += 1;
            self.counts.bytes += datagram.len() as u64;
            let late = self.judge_playout(transit);
            self.count_unplayed_runs(gap, late);
            self.time_delay(transit);
            self.judge_frame(datagram, arrival_ns);
            // RFC 3550 6.4.1: J += (|D| - J) / 16, D the change in transit time between
            // consecutive in-order datagrams; the first datagram only sets the reference.
            let transit_ns = transit as f64;
            let mean_before = if self.counts.transit_samples > 0 {
                self.counts.transit_sum_ns / self.counts.transit_samples as f64
            } else {
                transit_ns
            };
            self.counts.transit_sum_ns += transit_ns;
            self.counts.transit_samples += 1;
            let mean_after = self.counts.transit_sum_ns / self.counts.transit_samples as f64;
            self.counts.transit_m2_ns2 += (transit_ns - mean_before) * (transit_ns - mean_after);
            self.counts.transit_min_ns = Some(
                self.counts
                    .transit_min_ns
                    .map_or(transit_ns, |m| m.min(transit_ns)),
            );
            self.counts.transit_max_ns = Some(
                self.counts
                    .transit_max_ns
                    .map_or(transit_ns, |m| m.max(transit_ns)),
            );
            if let Some(last) = self.last_transit {
                let d = (transit - last).unsigned_abs() as f64;
                self.counts.jitter_ns += (d - self.counts.jitter_ns) / 16.0;
            }
            self.last_transit = Some(transit);
        } else if self.next - sequence > HISTORY {
            // Older than the history: it was counted lost, and cannot be told from a
            // duplicate. Count it late, and take it out of the losses.
            self.counts.out_of_order += 1;
            self.counts.lost = self.counts.lost.saturating_sub(1);
            self.counts.datagrams += 1;
            self.counts.bytes += datagram.len() as u64;
            self.judge_playout(transit);
            self.time_delay(transit);
            self.judge_frame(datagram, arrival_ns);
        } else if self.bit(sequence) {
            self.counts.duplicates += 1;
        } else {
            // Late: it fills a gap counted as loss.
            self.set_bit(sequence, true);
            self.counts.out_of_order += 1;
            self.counts.lost -= 1;
            self.counts.datagrams += 1;
            self.counts.bytes += datagram.len() as u64;
            self.judge_playout(transit);
            self.time_delay(transit);
            self.judge_frame(datagram, arrival_ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLOW: u32 = 3;
    const TAG: u32 = 0xfeed_beef;

    fn datagram(sequence: u64, sent_ns: u64, len: usize) -> Vec<u8> {
        let mut d = vec![0u8; len];
        write_header(&mut d, sequence, sent_ns, FLOW, TAG);
        d
    }

    fn feed(tracker: &mut SequenceTracker, sequences: &[u64]) {
        for &s in sequences {
            tracker.record(&datagram(s, 0, 64), 0);
        }
    }

    #[test]
    fn header_round_trips_at_every_size() {
        for len in [16, 19, 20, 23, 24, 64, 1400] {
            let d = datagram(0x0102_0304_0506_0708, 42, len);
            let h = read_header(&d).unwrap();
            assert_eq!(h.sequence, 0x0102_0304_0506_0708);
            assert_eq!(h.sent_ns, 42);
            assert_eq!(h.flow, (len >= 20).then_some(FLOW));
            assert_eq!(h.tag, (len >= 24).then_some(TAG));
        }
        assert!(read_header(&[0u8; 15]).is_none());
    }

    #[test]
    fn in_order_stream_has_no_loss() {
        let mut t = SequenceTracker::new(FLOW, Framing::Native { tag: TAG });
        feed(&mut t, &[0, 1, 2, 3, 4]);
        let c = t.counts();
        assert_eq!(
            (c.datagrams, c.lost, c.out_of_order, c.duplicates),
            (5, 0, 0, 0)
        );
        assert_eq!(c.bytes, 5 * 64);
        assert_eq!(t.expected(), 5);
    }

    /// A tracker that keeps delays holds every distinct datagram's, late ones too, as a
    /// distribution; a duplicate adds none, and one sent after its arrival (clocks apart)
    /// is counted aside.
    #[test]
    fn delays_are_kept_as_a_distribution_where_asked() {
        let mut t = SequenceTracker::new(FLOW, Framing::Native { tag: TAG }).with_delays();
        let ms = 1_000_000u64;
        let base = 1_000_000_000u64;
        // Transits 1..=100 ms, sequence 50 arriving after 51 (out of order), 10 twice.
        for s in (0..100u64).filter(|s| *s != 50) {
            t.record(&datagram(s, base, 64), base + (s + 1) * ms);
            if s == 51 {
                t.record(&datagram(50, base, 64), base + 51 * ms);
            }
        }
        t.record(&datagram(10, base, 64), base + 500 * ms);
        t.record(&datagram(100, base + ms, 64), base);
        let d = t.delays().expect("delays kept");
        assert_eq!(d.count, 100);
        assert!((d.p50 / 1e3 - 50.0).abs() < 0.1, "{d:?}");
        assert!((d.p99 / 1e3 - 99.0).abs() < 0.1, "{d:?}");
        assert!(!d.histogram.is_empty());
        assert_eq!(t.delays_before_sent(), 1);
        // Not asked: none kept.
        let mut plain = SequenceTracker::new(FLOW, Framing::Native { tag: TAG });
        plain.record(&datagram(0, base, 64), base + ms);
        assert!(plain.delays().is_none());
        // A warm-up's delays are forgotten where the window starts; the window's kept.
        t.restart_delays();
        assert!(t.delays().is_none());
        t.record(&datagram(200, base, 64), base + 7 * ms);
        let kept = t.delays().unwrap();
        assert_eq!(kept.count, 1);
        assert!((kept.max - 7_000.0).abs() < 10.0, "{kept:?}");
    }

    /// The squared differences from the mean, kept as datagrams arrive, are what they
    /// are taken over all at once: a deviation of delays (iperf 2's `--trip-times`) needs
    /// them, and a few milliseconds of delay squared over millions of datagrams would
    /// lose its digits as a plain sum of squares.
    #[test]
    fn delays_spread_is_kept_as_they_arrive() {
        let mut t = SequenceTracker::new(FLOW, Framing::Native { tag: TAG });
        let transits = [5_001_000u64, 5_003_000, 5_002_000, 5_010_000, 5_000_500];
        for (s, transit) in transits.iter().enumerate() {
            let sent = 1_000_000_000 + s as u64 * 1_000_000;
            t.record(&datagram(s as u64, sent, 64), sent + transit);
        }
        let c = t.counts();
        let mean = transits.iter().sum::<u64>() as f64 / transits.len() as f64;
        let m2: f64 = transits.iter().map(|&x| (x as f64 - mean).powi(2)).sum();
        assert_eq!(c.transit_samples, 5);
        assert!(
            (c.transit_m2_ns2 - m2).abs() < 1e-3 * m2,
            "{} against {m2}",
            c.transit_m2_ns2
        );
    }

    #[test]
    fn gaps_are_lost_until_a_late_datagram_fills_them() {
        let mut t = SequenceTracker::new(FLOW, Framing::Native { tag: TAG });
        feed(&mut t, &[0, 1, 4, 5]);
        assert_eq!(t.counts().lost, 2);
        feed(&mut t, &[2]);
        let c = t.counts();
        assert_eq!((c.datagrams, c.lost, c.out_of_order), (5, 1, 1));
    }

    #[test]
    fn duplicates_are_counted_apart_and_not_received_twice() {
        let mut t = SequenceTracker::new(FLOW, Framing::Native { tag: TAG });
        feed(&mut t, &[0, 1, 1, 2, 0, 3]);
        let c = t.counts();
        assert_eq!(
            (c.datagrams, c.duplicates, c.lost, c.out_of_order),
            (4, 2, 0, 0)
        );
    }

    #[test]
    fn a_late_duplicate_of_a_late_datagram_is_a_duplicate() {
        let mut t = SequenceTracker::new(FLOW, Framing::Native { tag: TAG });
        feed(&mut t, &[0, 2, 1, 1]);
        let c = t.counts();
        assert_eq!(
            (c.datagrams, c.lost, c.out_of_order, c.duplicates),
            (3, 0, 1, 1)
        );
    }

    #[test]
    fn a_huge_gap_resets_the_history_without_false_duplicates() {
        let mut t = SequenceTracker::new(FLOW, Framing::Native { tag: TAG });
        feed(&mut t, &[0, 1, HISTORY * 3 + 1, HISTORY * 3 + 2]);
        let c = t.counts();
        assert_eq!(c.lost, HISTORY * 3 - 1);
        assert_eq!((c.duplicates, c.datagrams), (0, 4));
    }

    #[test]
    fn foreign_datagrams_are_counted_and_ignored() {
        let mut t = SequenceTracker::new(FLOW, Framing::Native { tag: TAG });
        t.record(&[1, 2, 3], 0);
        let mut other_flow = datagram(0, 0, 64);
        other_flow[16..20].copy_from_slice(&9u32.to_be_bytes());
        t.record(&other_flow, 0);
        let mut other_test = datagram(0, 0, 64);
        other_test[20..24].copy_from_slice(&1u32.to_be_bytes());
        t.record(&other_test, 0);
        let c = t.counts();
        assert_eq!(c.foreign, 3);
        assert_eq!((c.datagrams, c.lost, t.expected()), (0, 0, 0));
    }

    /// RFC 3550 jitter over a hand-computed vector: datagrams sent every 10 ms; transit
    /// times 5, 7, 6, 9 ms give |D| = 2, 1, 3 ms and
    /// J1 = 2/16 = 0.125, J2 = 0.125 + (1 - 0.125)/16 = 0.1796875,
    /// J3 = 0.1796875 + (3 - 0.1796875)/16 = 0.35595703125 ms.
    #[test]
    fn jitter_follows_rfc_3550() {
        let ms = 1_000_000u64;
        let mut t = SequenceTracker::new(FLOW, Framing::Native { tag: TAG });
        for (i, transit) in [5u64, 7, 6, 9].iter().enumerate() {
            let sent = i as u64 * 10 * ms;
            t.record(&datagram(i as u64, sent, 64), sent + transit * ms);
        }
        let jitter_ms = t.counts().jitter_ns / ms as f64;
        assert!((jitter_ms - 0.355_957_031_25).abs() < 1e-9, "{jitter_ms}");
    }

    #[test]
    fn late_datagrams_leave_jitter_alone() {
        let ms = 1_000_000u64;
        let mut t = SequenceTracker::new(FLOW, Framing::Native { tag: TAG });
        t.record(&datagram(0, 0, 64), 5 * ms);
        t.record(&datagram(2, 20 * ms, 64), 25 * ms);
        // Sequence 1 arrives 100 ms late: out of order, not a jitter sample.
        t.record(&datagram(1, 10 * ms, 64), 115 * ms);
        assert_eq!(t.counts().jitter_ns, 0.0);
        assert_eq!(t.counts().out_of_order, 1);
    }

    #[test]
    fn a_jitter_buffer_set_on_the_first_datagram_counts_the_late_ones() {
        let ms = 1_000_000u64;
        let mut t = SequenceTracker::new(FLOW, Framing::Native { tag: TAG }).with_playout(40 * ms);
        // Transits 10, 30, 51 (late: 41 over the first), 50 (not: 40 is the buffer).
        for (sequence, transit) in [(0u64, 10u64), (1, 30), (2, 51), (3, 50)] {
            let sent = sequence * 20 * ms;
            t.record(&datagram(sequence, sent, 64), sent + transit * ms);
        }
        assert_eq!(t.counts().late, 1);
        // One that fills a gap is judged as well; a duplicate is not judged again.
        t.record(&datagram(5, 100 * ms, 64), 110 * ms);
        t.record(&datagram(4, 80 * ms, 64), 200 * ms);
        t.record(&datagram(4, 80 * ms, 64), 200 * ms);
        assert_eq!(t.counts().late, 2);
        assert_eq!((t.counts().datagrams, t.counts().duplicates), (6, 1));
        // Without a buffer nothing is judged late.
        let mut plain = SequenceTracker::new(FLOW, Framing::Native { tag: TAG });
        plain.record(&datagram(0, 0, 64), 10 * ms);
        plain.record(&datagram(1, 0, 64), 900 * ms);
        assert_eq!(plain.counts().late, 0);
    }

    /// The runs the listener did not hear: a late datagram next to a gap continues its
    /// run, late ones in a row are one run, and a heard datagram ends a run.
    #[test]
    fn late_and_lost_datagrams_in_a_row_are_one_unheard_run() {
        let ms = 1_000_000u64;
        let mut t = SequenceTracker::new(FLOW, Framing::Native { tag: TAG }).with_playout(5 * ms);
        // 0 heard; 1 lost, 2 and 3 late (one run); 4 heard; 5 late, 6 lost, 7 heard
        // (one run); 8 heard; 9 and 10 late (one run).
        for (sequence, transit) in [
            (0u64, 10u64),
            (2, 30),
            (3, 30),
            (4, 10),
            (5, 30),
            (7, 10),
            (8, 10),
            (9, 30),
            (10, 30),
        ] {
            let sent = sequence * 20 * ms;
            t.record(&datagram(sequence, sent, 64), sent + transit * ms);
        }
        let c = t.counts();
        assert_eq!((c.late, c.lost, c.loss_events), (5, 2, 2));
        assert_eq!(c.unplayed_runs, 3);
        // Without a buffer no runs are counted.
        let mut plain = SequenceTracker::new(FLOW, Framing::Native { tag: TAG });
        feed(&mut plain, &[0, 2, 4]);
        assert_eq!(plain.counts().unplayed_runs, 0);
    }

    proptest::proptest! {
        /// Whatever a peer sends (numbers out of order, send times from the future or the
        /// past), late datagrams are among those counted, and only where a buffer is set.
        #[test]
        fn late_datagrams_are_among_those_that_arrived(
            arrivals in proptest::collection::vec((0u64..64, proptest::num::u64::ANY, 0u64..u64::MAX / 2), 0..200),
            buffer in 0u64..100_000_000,
        ) {
            let mut judged = SequenceTracker::new(FLOW, Framing::Native { tag: TAG }).with_playout(buffer);
            let mut plain = SequenceTracker::new(FLOW, Framing::Native { tag: TAG });
            let mut adaptive =
                SequenceTracker::new(FLOW, Framing::Native { tag: TAG }).with_adaptive_playout(200);
            for &(sequence, sent, arrival) in &arrivals {
                judged.record(&datagram(sequence, sent, 64), arrival);
                plain.record(&datagram(sequence, sent, 64), arrival);
                adaptive.record(&datagram(sequence, sent, 64), arrival);
            }
            proptest::prop_assert!(judged.counts().late <= judged.counts().datagrams);
            let a = adaptive.counts();
            proptest::prop_assert!(a.late <= a.datagrams && a.playout_judged <= a.datagrams);
            // Its depth stays within one frame and its most, whatever the peer claims.
            proptest::prop_assert!(
                a.playout_depth_sum_ns <= a.playout_judged as f64 * 200e6 + 1.0
                    && a.playout_depth_sum_ns >= a.playout_judged as f64 * 20e6 - 1.0
            );
            proptest::prop_assert_eq!(plain.counts().late, 0);
            // Runs not heard join loss runs and late datagrams: never more than both.
            let j = judged.counts();
            proptest::prop_assert!(j.unplayed_runs <= j.loss_events + j.late);
            let mut same = judged.counts();
            same.late = 0;
            same.unplayed_runs = 0;
            same.playout_judged = 0;
            same.playout_depth_sum_ns = 0.0;
            proptest::prop_assert_eq!(same, plain.counts());
        }
    }

    #[test]
    fn iperf3_headers_round_trip_and_count_from_one() {
        for wide in [false, true] {
            let framing = Framing::Iperf3 { wide };
            let mut d = vec![0u8; 64];
            framing.write(&mut d, 41, 3_000_123_456, 0);
            assert_eq!(&d[0..4], &3u32.to_be_bytes());
            assert_eq!(&d[4..8], &123u32.to_be_bytes());
            let number_at = if wide { 15 } else { 11 };
            assert_eq!(d[number_at], 42, "the 42nd packet of iperf3's count");
            let h = framing.read(&d).unwrap();
            assert_eq!((h.sequence, h.sent_ns), (41, 3_000_123_000));
            assert!(framing.read(&[0u8; 64]).is_none(), "packet number 0");
        }
        let mut t = SequenceTracker::new(0, Framing::Iperf3 { wide: false });
        for number in [1u32, 2, 4] {
            let mut d = vec![0u8; 100];
            d[8..12].copy_from_slice(&number.to_be_bytes());
            t.record(&d, 0);
        }
        assert_eq!(
            (t.counts().datagrams, t.counts().lost, t.expected()),
            (3, 1, 4)
        );
    }

    /// The first datagram iperf 2.1.8's client sent (`iperf -c 239.1.1.1 -u -e -l 200`,
    /// as tcpdump showed it): packet 1, its wall-clock send time, and its client header,
    /// whose flags (0x48010098) include the 64-bit packet number.
    #[test]
    fn iperf2_datagrams_read_as_iperf_2_wrote_them() {
        let mut d = vec![0u8; 200];
        d[..24].copy_from_slice(&[
            0, 0, 0, 1, 0x6b, 0x10, 0x6a, 0x23, 0, 0x0d, 0x2b, 0x8e, 0, 0, 0, 0, 0x48, 1, 0, 0x98,
            0, 0, 0, 1,
        ]);
        let h = Framing::Iperf2.read(&d).unwrap();
        assert_eq!(h.sequence, 0, "iperf 2 counts from 1");
        assert_eq!(h.sent_ns, 0x6b10_6a23 * 1_000_000_000 + 0x000d_2b8e * 1000);
        assert!(!Framing::Iperf2.is_final(&d));
        // Its stream's end: the number negated.
        let mut last = d.clone();
        last[..4].copy_from_slice(&(-1315i32).to_be_bytes());
        last[12..16].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(Framing::Iperf2.is_final(&last));
        assert!(Framing::Iperf2.read(&last).is_none(), "no test datagram");
        // An older sender's 32-bit number: the high word is not read.
        let mut old = vec![0u8; 16];
        old[..4].copy_from_slice(&7u32.to_be_bytes());
        old[12..16].copy_from_slice(&9u32.to_be_bytes());
        assert_eq!(Framing::Iperf2.read(&old).unwrap().sequence, 6);
        old[..4].copy_from_slice(&(-8i32).to_be_bytes());
        assert!(Framing::Iperf2.is_final(&old));
        assert!(!Framing::Native { tag: 1 }.is_final(&last));
    }

    /// A datagram that carries a client's UDP header (`linerate iperf2 -c` writes it once
    /// into every datagram) keeps its flags word; one without gets the 64-bit flag alone.
    #[test]
    fn an_iperf2_client_header_in_a_datagram_keeps_its_flags() {
        let flags = 0x4000_0000 | IPERF2_UDP_TESTS | IPERF2_SEQNO64;
        let mut d = vec![0x5a_u8; 64];
        d[16..20].copy_from_slice(&flags.to_be_bytes());
        Framing::Iperf2.write(&mut d, 3, 1_000_000_000, 0);
        assert_eq!(u32_at(&d, 16..20), flags);
        assert_eq!(Framing::Iperf2.read(&d).unwrap().sequence, 3);
        let mut plain = vec![0x5a_u8; 64];
        Framing::Iperf2.write(&mut plain, 3, 1_000_000_000, 0);
        assert_eq!(u32_at(&plain, 16..20), IPERF2_SEQNO64);
    }

    #[test]
    fn iperf2_headers_round_trip_with_64_bit_numbers_and_finals() {
        for (sequence, len) in [(0u64, 16usize), (41, 64), ((1 << 33) + 5, 1470)] {
            let mut d = vec![0u8; len];
            Framing::Iperf2.write(&mut d, sequence, 1_700_000_000_123_456_789, 0);
            let h = Framing::Iperf2.read(&d).unwrap();
            let wide = len >= 20;
            let expected = if wide {
                sequence
            } else {
                sequence & 0xffff_ffff
            };
            assert_eq!(h.sequence, expected, "len {len}");
            assert_eq!(h.sent_ns, 1_700_000_000_123_456_000);
            Framing::write_iperf2_final(&mut d, sequence + 1, 5);
            assert!(Framing::Iperf2.is_final(&d), "len {len}");
        }
        let mut t = SequenceTracker::new(0, Framing::Iperf2);
        for sequence in [0u64, 1, 3] {
            let mut d = vec![0u8; 100];
            Framing::Iperf2.write(&mut d, sequence, 0, 0);
            t.record(&d, 0);
        }
        assert_eq!(
            (t.counts().datagrams, t.counts().lost, t.expected()),
            (3, 1, 4)
        );
    }

    #[test]
    fn hello_round_trips_and_rejects_anything_else() {
        let token = [7u8; 16];
        let h = hello(&token, 12);
        assert_eq!(parse_hello(&h), Some((token, 12)));
        assert_eq!(parse_hello(&h[..27]), None);
        let mut other = h;
        other[0] = b'X';
        assert_eq!(parse_hello(&other), None);
        assert_eq!(tag_of(&token), 0x0707_0707);
    }
}
