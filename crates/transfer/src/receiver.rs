//! The receiving end's core (docs/transfer-protocol.md 4): which blocks of which chunks
//! have arrived, which packet numbers to acknowledge, how far the sender may go. Datagrams
//! and the time come in; where to put each payload, which chunks are whole, and ACKs come
//! out. The driver holds the bytes, hashes the chunks and writes them.
//!
//! Flow control is by chunks: the sender may send into the `window_chunks` chunks from the
//! lowest one not yet handed to the disk. A slow disk holds that chunk back, the window
//! stops, and the sender waits; nothing is dropped for want of room.

use std::collections::VecDeque;

use crate::layout::Layout;
use crate::train::TrainMeter;
use crate::wire::{Ack, PnRange, MAX_ACK_RANGES};

/// Packet numbers the receiver remembers below the largest: an ACK reports ranges from
/// this span only.
pub const PN_SPAN: u64 = 1 << 16;
/// Send an ACK after this many packets...
pub const ACK_EVERY: u32 = 32;
/// ...or this long after the first packet it would acknowledge.
pub const MAX_ACK_DELAY_NS: u64 = 2_000_000;
/// With nothing arriving, an ACK still goes out this often (it carries the window).
pub const IDLE_ACK_NS: u64 = 25_000_000;

#[derive(Debug, Clone)]
enum Chunk {
    Missing,
    Filling {
        bits: Vec<u64>,
        have: u32,
    },
    /// Whole, in memory, with the driver for hashing and writing.
    Filled,
    /// Verified and handed to the disk, or present from an earlier run.
    Done,
}

/// What became of a data datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataOutcome {
    /// Copy the payload to `at` bytes into chunk `chunk`'s buffer (allocate it when
    /// `fresh`); `filled` when that made the chunk whole.
    Store {
        chunk: u64,
        at: usize,
        fresh: bool,
        filled: bool,
    },
    /// A block already here.
    Duplicate,
    /// An offset or length no block has: dropped.
    Invalid,
    /// Beyond the window: dropped (a sender that keeps to the protocol never does this).
    OutsideWindow,
}

/// What the receiver counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiverCounters {
    pub packets: u64,
    pub bytes: u64,
    pub duplicate_packets: u64,
    pub duplicate_bytes: u64,
    pub invalid: u64,
    pub outside_window: u64,
    /// Chunks whose hash failed and that were fetched again.
    pub refetched: u64,
    pub acks: u64,
    /// With `--ecn`: data datagrams of this file that arrived marked CE, duplicates
    /// included (each was a mark the path set).
    pub ce_marked: u64,
}

#[derive(Debug)]
pub struct Receiver {
    layout: Layout,
    window_chunks: u64,
    chunks: Vec<Chunk>,
    /// The lowest chunk not done: the window starts here.
    lowest_open: u64,
    done: u64,
    /// Chunks in memory (filling or filled).
    held: u32,
    /// Packet numbers received, ascending, disjoint ranges within `PN_SPAN` of the largest.
    pns: VecDeque<PnRange>,
    /// Packet numbers that arrived below the largest since the last ACK, and those before
    /// it (at most MAX_ACK_RANGES each): an ACK describes their ranges even where more
    /// ranges lie above them than it carries, so that a datagram of a lane far behind the
    /// others is reported (twice, against a lost ACK) before later ones of its lane are.
    late: Vec<u64>,
    late_before: Vec<u64>,
    /// The largest packet number the last ACK carried.
    acked_largest: Option<u64>,
    largest_at_ns: u64,
    unacked: u32,
    first_unacked_ns: Option<u64>,
    last_ack_ns: u64,
    window_at_last_ack: u64,
    ack_seq: u64,
    /// `--ecn`: the ACKs carry the count of CE marks.
    counting_ce: bool,
    /// The sender's packet train, timed (a cold start): the ACKs carry its estimate.
    train: Option<TrainMeter>,
    pub counters: ReceiverCounters,
}

impl Receiver {
    pub fn new(layout: Layout, window_chunks: u64) -> Receiver {
        let mut receiver = Receiver {
            layout,
            window_chunks: window_chunks.max(2),
            chunks: vec![Chunk::Missing; layout.chunks() as usize],
            lowest_open: 0,
            done: 0,
            held: 0,
            pns: VecDeque::new(),
            late: Vec::new(),
            late_before: Vec::new(),
            acked_largest: None,
            largest_at_ns: 0,
            unacked: 0,
            first_unacked_ns: None,
            last_ack_ns: 0,
            window_at_last_ack: 0,
            ack_seq: 0,
            counting_ce: false,
            train: None,
            counters: ReceiverCounters::default(),
        };
        receiver.window_at_last_ack = receiver.window();
        receiver
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// A chunk already here from an earlier run (the journal says it is durable).
    pub fn mark_present(&mut self, chunk: u64) {
        if let Some(slot) = self.chunks.get_mut(chunk as usize) {
            if matches!(slot, Chunk::Missing) {
                *slot = Chunk::Done;
                self.done += 1;
                self.advance();
            }
        }
    }

    pub fn is_complete(&self) -> bool {
        self.done == self.layout.chunks()
    }

    pub fn chunks_done(&self) -> u64 {
        self.done
    }

    /// Bytes of the file below which everything is done.
    pub fn verified_offset(&self) -> u64 {
        (self.lowest_open * self.layout.chunk).min(self.layout.size)
    }

    /// The sender may send file bytes below this offset.
    pub fn window(&self) -> u64 {
        ((self.lowest_open + self.window_chunks) * self.layout.chunk).min(self.layout.size)
    }

    fn advance(&mut self) {
        while (self.lowest_open as usize) < self.chunks.len()
            && matches!(self.chunks[self.lowest_open as usize], Chunk::Done)
        {
            self.lowest_open += 1;
        }
    }

    fn record_pn(&mut self, pn: u64, now_ns: u64) {
        let largest = self.pns.back().map(|r| r.high);
        match largest {
            None => self.pns.push_back(PnRange { low: pn, high: pn }),
            Some(high) if pn == high + 1 => self.pns.back_mut().expect("a range").high = pn,
            Some(high) if pn > high => self.pns.push_back(PnRange { low: pn, high: pn }),
            Some(high) => {
                if high - pn >= PN_SPAN {
                    return;
                }
                if self.insert_old_pn(pn) && self.late.len() < MAX_ACK_RANGES {
                    self.late.push(pn);
                }
                self.count_unacked(now_ns);
                return;
            }
        }
        self.largest_at_ns = now_ns;
        let largest = self.pns.back().expect("a range").high;
        while let Some(front) = self.pns.front() {
            if largest - front.high >= PN_SPAN {
                self.pns.pop_front();
            } else {
                break;
            }
        }
        self.count_unacked(now_ns);
    }

    fn count_unacked(&mut self, now_ns: u64) {
        self.unacked += 1;
        self.first_unacked_ns.get_or_insert(now_ns);
    }

    /// A packet number below the largest (reordered, or of a lane behind the others);
    /// false when it was seen before. Rare with one lane, so a linear merge will do.
    fn insert_old_pn(&mut self, pn: u64) -> bool {
        let at = self.pns.partition_point(|r| r.high < pn);
        if let Some(range) = self.pns.get(at) {
            if range.low <= pn {
                return false; // already seen
            }
        }
        let joins_next = self.pns.get(at).is_some_and(|r| r.low == pn + 1);
        let joins_previous = at > 0 && self.pns[at - 1].high + 1 == pn;
        match (joins_previous, joins_next) {
            (true, true) => {
                let next = self.pns.remove(at).expect("a range");
                self.pns[at - 1].high = next.high;
            }
            (true, false) => self.pns[at - 1].high = pn,
            (false, true) => self.pns[at].low = pn,
            (false, false) => self.pns.insert(at, PnRange { low: pn, high: pn }),
        }
        true
    }

    /// The ranges an ACK carries, highest first: all of them when they fit; else, in this
    /// order until the room is full, those above the last ACK's largest (the one ending
    /// at the largest first), those holding the late arrivals since the last ACK, those
    /// holding the late arrivals before it, and the highest of the rest.
    fn ack_ranges(&mut self) -> Vec<PnRange> {
        let ranges = self.choose_ranges();
        self.acked_largest = ranges.first().map(|r| r.high);
        // This ACK's late arrivals become the ones before the next (the buffers reused).
        std::mem::swap(&mut self.late, &mut self.late_before);
        self.late.clear();
        ranges
    }

    fn choose_ranges(&self) -> Vec<PnRange> {
        if self.pns.len() <= MAX_ACK_RANGES {
            return self.pns.iter().rev().copied().collect();
        }
        // Indexes into `pns` (ascending), kept sorted: at most MAX_ACK_RANGES of them.
        let mut chosen: Vec<usize> = Vec::with_capacity(MAX_ACK_RANGES);
        let from_the_top = (0..self.pns.len()).rev();
        let new_at_the_top = from_the_top
            .clone()
            .take_while(|&at| self.acked_largest.is_none_or(|l| self.pns[at].high > l));
        let late = self.late.iter().rev().chain(self.late_before.iter().rev());
        let holding_late = late.map(|&pn| self.pns.partition_point(|r| r.high < pn));
        for at in new_at_the_top.chain(holding_late).chain(from_the_top) {
            if chosen.len() == MAX_ACK_RANGES {
                break;
            }
            if at < self.pns.len() {
                if let Err(slot) = chosen.binary_search(&at) {
                    chosen.insert(slot, at);
                }
            }
        }
        chosen.iter().rev().map(|&at| self.pns[at]).collect()
    }

    /// The ACKs from now on carry the count of data datagrams that arrived marked CE
    /// (`--ecn`), which the driver reports with [`on_ce`](Self::on_ce).
    pub fn count_ce(&mut self) {
        self.counting_ce = true;
    }

    /// The sender's first `packets` datagrams come back to back (its offer said so): the
    /// driver times their arrival with [`on_timed_arrival`](Self::on_timed_arrival) and
    /// the ACKs carry the rate they arrived at, once they have.
    pub fn time_train(&mut self, packets: u32) {
        self.train = Some(TrainMeter::new(packets));
    }

    /// Whether arrivals are still timed for the train.
    pub fn timing_train(&self) -> bool {
        self.train.as_ref().is_some_and(|t| !t.ended())
    }

    /// Datagram `pn` (`wire_bytes` on the wire) arrived at `arrived_ns` by the kernel's
    /// clock.
    pub fn on_timed_arrival(&mut self, pn: u64, wire_bytes: u64, arrived_ns: u64) {
        if let Some(train) = &mut self.train {
            train.on_arrival(pn, wire_bytes, arrived_ns);
        }
    }

    /// The train's estimate of the path's rate, bits per second, once it has ended.
    pub fn train_estimate(&self) -> Option<u64> {
        self.train.as_ref().and_then(TrainMeter::estimate)
    }

    /// A data datagram of this file arrived marked CE.
    pub fn on_ce(&mut self) {
        self.counters.ce_marked += 1;
    }

    /// A data datagram arrived.
    pub fn on_data(&mut self, now_ns: u64, pn: u64, offset: u64, len: u16) -> DataOutcome {
        let Some(block) = self.layout.block_at(offset) else {
            self.counters.invalid += 1;
            return DataOutcome::Invalid;
        };
        if block.len != u32::from(len) {
            self.counters.invalid += 1;
            return DataOutcome::Invalid;
        }
        if block.chunk >= self.lowest_open + self.window_chunks {
            self.counters.outside_window += 1;
            return DataOutcome::OutsideWindow;
        }
        self.record_pn(pn, now_ns);
        self.counters.packets += 1;
        self.counters.bytes += u64::from(len);
        let blocks = self.layout.blocks_in(block.chunk) as u32;
        let slot = &mut self.chunks[block.chunk as usize];
        let fresh = matches!(slot, Chunk::Missing);
        if fresh {
            *slot = Chunk::Filling {
                bits: vec![0; blocks.div_ceil(64) as usize],
                have: 0,
            };
            self.held += 1;
        }
        match slot {
            Chunk::Filling { bits, have } => {
                let word = (block.in_chunk / 64) as usize;
                let bit = 1u64 << (block.in_chunk % 64);
                if bits[word] & bit != 0 {
                    return self.duplicate(len);
                }
                bits[word] |= bit;
                *have += 1;
                let filled = *have == blocks;
                if filled {
                    *slot = Chunk::Filled;
                }
                DataOutcome::Store {
                    chunk: block.chunk,
                    at: (offset - block.chunk * self.layout.chunk) as usize,
                    fresh,
                    filled,
                }
            }
            _ => self.duplicate(len),
        }
    }

    fn duplicate(&mut self, len: u16) -> DataOutcome {
        self.counters.duplicate_packets += 1;
        self.counters.duplicate_bytes += u64::from(len);
        DataOutcome::Duplicate
    }

    /// The driver verified a filled chunk and handed it to the disk (or, with `ok`
    /// false, found its hash wrong: the chunk is emptied and must come again).
    pub fn chunk_checked(&mut self, chunk: u64, ok: bool) {
        let Some(slot) = self.chunks.get_mut(chunk as usize) else {
            return;
        };
        if !matches!(slot, Chunk::Filled) {
            return;
        }
        self.held -= 1;
        if ok {
            *slot = Chunk::Done;
            self.done += 1;
            self.advance();
        } else {
            *slot = Chunk::Missing;
            self.counters.refetched += 1;
        }
    }

    /// When the driver must call [`poll_ack`](Self::poll_ack) next.
    pub fn next_timeout(&self) -> u64 {
        let idle = self.last_ack_ns + IDLE_ACK_NS;
        match self.first_unacked_ns {
            Some(first) => (first + MAX_ACK_DELAY_NS).min(idle),
            None => idle,
        }
    }

    /// An ACK, when one is due.
    pub fn poll_ack(&mut self, now_ns: u64, file: u32, session: u64) -> Option<Ack> {
        let due = self.unacked >= ACK_EVERY
            || self
                .first_unacked_ns
                .is_some_and(|first| now_ns >= first + MAX_ACK_DELAY_NS)
            || now_ns >= self.last_ack_ns + IDLE_ACK_NS
            // The window moved by a chunk or more: a sender stopped at it may go on.
            || self.window() >= self.window_at_last_ack + self.layout.chunk;
        if !due {
            return None;
        }
        self.ack_seq += 1;
        self.unacked = 0;
        self.first_unacked_ns = None;
        self.last_ack_ns = now_ns;
        self.window_at_last_ack = self.window();
        self.counters.acks += 1;
        let largest = self.pns.back().map_or(0, |r| r.high);
        Some(Ack {
            file,
            session,
            seq: self.ack_seq,
            largest,
            delay_us: (now_ns.saturating_sub(self.largest_at_ns) / 1000).min(u64::from(u32::MAX))
                as u32,
            backlog: self.held,
            window: self.window(),
            verified: self.verified_offset(),
            ranges: self.ack_ranges(),
            ce: self.counting_ce.then_some(self.counters.ce_marked),
            // Every ACK once it is known: a lost ACK must not cost the sender its jump.
            train_bps: self.train_estimate(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::MIN_CHUNK;

    fn layout() -> Layout {
        // Two chunks of 64 KiB and a short third; blocks of 1000 bytes.
        Layout::new(2 * MIN_CHUNK + 1500, MIN_CHUNK, 1000).unwrap()
    }

    fn fill_chunk(receiver: &mut Receiver, chunk: u64, pn: &mut u64) -> Vec<DataOutcome> {
        let layout = *receiver.layout();
        let mut block = layout.first_block(chunk);
        let mut out = Vec::new();
        while let Some(b) = block.filter(|b| b.chunk == chunk) {
            out.push(receiver.on_data(0, *pn, b.offset, b.len as u16));
            *pn += 1;
            block = layout.next_block(&b);
        }
        out
    }

    #[test]
    fn a_chunk_fills_once_and_duplicates_are_counted() {
        let mut receiver = Receiver::new(layout(), 4);
        let mut pn = 0;
        let outcomes = fill_chunk(&mut receiver, 0, &mut pn);
        assert!(matches!(
            outcomes[0],
            DataOutcome::Store {
                fresh: true,
                filled: false,
                at: 0,
                ..
            }
        ));
        assert!(matches!(
            outcomes.last(),
            Some(DataOutcome::Store {
                filled: true,
                at: 65_000,
                ..
            })
        ));
        assert_eq!(receiver.on_data(0, pn, 0, 1000), DataOutcome::Duplicate);
        assert_eq!(receiver.counters.duplicate_bytes, 1000);
        assert_eq!(receiver.on_data(0, pn + 1, 1, 999), DataOutcome::Invalid);
        assert_eq!(receiver.on_data(0, pn + 1, 0, 999), DataOutcome::Invalid);
        receiver.chunk_checked(0, true);
        assert_eq!(receiver.verified_offset(), MIN_CHUNK);
    }

    #[test]
    fn a_chunk_with_a_bad_hash_is_taken_again() {
        let mut receiver = Receiver::new(layout(), 4);
        let mut pn = 0;
        fill_chunk(&mut receiver, 1, &mut pn);
        receiver.chunk_checked(1, false);
        assert_eq!(receiver.counters.refetched, 1);
        let again = fill_chunk(&mut receiver, 1, &mut pn);
        assert!(matches!(again[0], DataOutcome::Store { fresh: true, .. }));
        assert!(matches!(
            again.last(),
            Some(DataOutcome::Store { filled: true, .. })
        ));
    }

    #[test]
    fn the_window_holds_until_the_disk_takes_the_lowest_chunk() {
        let mut receiver = Receiver::new(layout(), 2);
        assert_eq!(receiver.window(), 2 * MIN_CHUNK);
        assert_eq!(
            receiver.on_data(0, 0, 2 * MIN_CHUNK, 1000),
            DataOutcome::OutsideWindow
        );
        let mut pn = 1;
        fill_chunk(&mut receiver, 1, &mut pn);
        receiver.chunk_checked(1, true);
        // Chunk 0 is still missing: the window has not moved.
        assert_eq!(receiver.window(), 2 * MIN_CHUNK);
        fill_chunk(&mut receiver, 0, &mut pn);
        receiver.chunk_checked(0, true);
        assert_eq!(receiver.window(), receiver.layout().size);
        fill_chunk(&mut receiver, 2, &mut pn);
        receiver.chunk_checked(2, true);
        assert!(receiver.is_complete());
    }

    #[test]
    fn acks_report_the_gaps_and_come_every_32_packets() {
        let mut receiver = Receiver::new(layout(), 4);
        let mut acks = Vec::new();
        for pn in (0..64u64).filter(|pn| pn % 10 != 3) {
            receiver.on_data(1_000, pn, pn * 1000, 1000);
            if let Some(ack) = receiver.poll_ack(1_000, 0, 1) {
                acks.push(ack);
            }
        }
        assert_eq!(acks.len(), 1, "after 32 packets");
        let ack = receiver
            .poll_ack(1_000 + MAX_ACK_DELAY_NS, 0, 1)
            .expect("the delay ran out");
        assert_eq!(ack.largest, 62);
        assert_eq!(ack.ranges.first(), Some(&PnRange { low: 54, high: 62 }));
        assert_eq!(ack.ranges.last(), Some(&PnRange { low: 0, high: 2 }));
        assert_eq!(ack.ranges.len(), 7);
        // A late packet fills its gap.
        receiver.on_data(2_000, 53, 53_000, 1000);
        let ack = receiver.poll_ack(10_000_000, 0, 1).unwrap();
        assert_eq!(ack.ranges.first(), Some(&PnRange { low: 44, high: 62 }));
        assert!(ack.seq > acks[0].seq);
    }

    #[test]
    fn a_late_arrival_below_more_ranges_than_an_ack_carries_is_acknowledged_twice() {
        use crate::wire::{encode_ack, parse, Datagram};
        let layout = Layout::fitting(64 << 20, MIN_CHUNK, 1024).unwrap();
        let mut receiver = Receiver::new(layout, 1024);
        // Every other packet number up to 600: 300 ranges, more than an ACK carries.
        for pn in (0..600u64).step_by(2) {
            receiver.on_data(1_000, pn, pn * 1024, 1024);
        }
        let first = receiver.poll_ack(1_000 + MAX_ACK_DELAY_NS, 0, 1).unwrap();
        assert_eq!(first.ranges.len(), MAX_ACK_RANGES);
        assert_eq!(
            first.ranges.last().unwrap().low,
            600 - 2 * MAX_ACK_RANGES as u64
        );
        // A datagram of a lane far behind: 11, below the ranges the ACK had room for.
        receiver.on_data(2_000, 11, 11 * 1024, 1024);
        receiver.on_data(2_000, 601, 601 * 1024, 1024);
        let mut acks = Vec::new();
        for at in [2, 3, 4] {
            acks.push(receiver.poll_ack(3 * at * MAX_ACK_DELAY_NS, 0, 1).unwrap());
            let pn = 600 + at;
            receiver.on_data(3 * at * MAX_ACK_DELAY_NS + 1, pn, pn * 1024, 1024);
        }
        let key = [3u8; 32];
        for (i, ack) in acks.iter().enumerate() {
            assert!(ack.ranges.len() <= MAX_ACK_RANGES);
            assert_eq!(
                ack.ranges[0].high, ack.largest,
                "the first range ends at the largest"
            );
            // Highest first, disjoint: what the wire carries (gaps between them).
            let mut bytes = Vec::new();
            encode_ack(ack, &key, &mut bytes);
            assert_eq!(parse(&bytes, &key), Ok(Datagram::Ack(ack.clone())));
            let holds_11 = ack.ranges.contains(&PnRange { low: 10, high: 12 });
            // The ACK after the arrival and the one after it (in case the first is lost)
            // carry it; the third has the room for the highest ranges again.
            assert_eq!(holds_11, i < 2, "ACK {i}: {:?}", ack.ranges.last());
        }
        // The highest ranges: 601 to 603, and the 127 single ones below it, down to 346.
        assert_eq!(
            acks[2].ranges[0],
            PnRange {
                low: 601,
                high: 603
            }
        );
        assert_eq!(acks[2].ranges.last().unwrap().low, 598 - 2 * 126);
    }

    #[test]
    fn resumed_chunks_count_as_done() {
        let mut receiver = Receiver::new(layout(), 2);
        receiver.mark_present(0);
        receiver.mark_present(0);
        assert_eq!(receiver.chunks_done(), 1);
        assert_eq!(receiver.window(), receiver.layout().size);
    }
}
