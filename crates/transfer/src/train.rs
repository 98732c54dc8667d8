//! A cold start's estimate of the path's rate from one packet train (docs/transfer-protocol.md
//! 5, "A cold start").
//!
//! A copy that knows nothing of its path sends its first datagrams back to back, faster
//! than any bottleneck takes them; the bottleneck spaces them out at its own rate, and the
//! receiving end times their arrival (the kernel's receive timestamps, not its own loop's,
//! which wakes a quarter of a millisecond apart). The bytes that arrived before the last
//! arrival over the time from the first arrival to the last are the rate the narrowest link
//! passed them at: the packet-train dispersion of pathrate and of Jain and Dovrolis. The
//! receiver's ACKs carry the estimate, so the sender has it a round trip after it began.
//!
//! Where arrivals are coalesced (a NIC's GRO: several datagrams handed up as one, with one
//! timestamp), the datagrams of a message are taken to have arrived when it did: the bytes
//! counted are those of the messages before the last timestamp, over the time from the
//! first timestamp to the last, which is exact however the arrivals were grouped.
//!
//! Other traffic at the bottleneck can only spread the train (its packets queue between
//! ours), so the estimate is at most the bottleneck's rate when nothing compresses the
//! train after it; the sender holds a fraction of it until its own ACKs confirm it.

/// Datagrams a train holds at most, and at least where each is large (loopback's 64 KiB).
pub const MAX_TRAIN_PACKETS: u32 = 256;
pub const MIN_TRAIN_PACKETS: u32 = 16;
/// A train's bytes on the wire at most: 3 ms at 1 Gbit/s, long against the bursts in which
/// a busy forwarder or a virtual NIC hands frames on (a 64-datagram train, 0.8 ms, read a
/// 1 Gbit/s path in the lab at 2.5 and 4 Gbit/s on a 2-CPU host; this one at 0.76 to 1.02),
/// and short enough for a bottleneck queue to take in one burst (31 ms at 100 Mbit/s).
const MAX_TRAIN_BYTES: u64 = 384 * 1024;
/// Arrivals timed before an estimate is believed.
const MIN_TIMED: u32 = 8;
/// The fastest rate an estimate may say, bits per second (10 Tbit/s): a faster figure is
/// a train that a receiving host compressed into one instant.
pub const MAX_ESTIMATE_BPS: u64 = 10_000_000_000_000;

/// How many datagrams a train of datagrams `wire_bytes` long each holds.
pub fn train_packets(wire_bytes: u64) -> u32 {
    let fit = MAX_TRAIN_BYTES / wire_bytes.max(1);
    (fit as u32).clamp(MIN_TRAIN_PACKETS, MAX_TRAIN_PACKETS)
}

/// The receiving end's timing of a train of `packets` datagrams, packet numbers
/// `0..packets`.
#[derive(Debug, Clone)]
pub struct TrainMeter {
    packets: u64,
    /// (arrival, wire bytes) of each datagram of the train timed, at most `packets`.
    arrivals: Vec<(u64, u64)>,
    /// The train ended (a datagram after it arrived, or all of it did).
    ended: bool,
    estimate: Option<u64>,
}

impl TrainMeter {
    pub fn new(packets: u32) -> TrainMeter {
        let packets = packets.clamp(2, MAX_TRAIN_PACKETS);
        TrainMeter {
            packets: u64::from(packets),
            arrivals: Vec::with_capacity(packets as usize),
            ended: false,
            estimate: None,
        }
    }

    /// Datagram `pn` of `wire_bytes` arrived at `arrived_ns` (the kernel's clock; any
    /// origin). Arrivals may come in any order (lanes read apart).
    pub fn on_arrival(&mut self, pn: u64, wire_bytes: u64, arrived_ns: u64) {
        if self.ended {
            return;
        }
        if pn >= self.packets {
            self.end();
            return;
        }
        self.arrivals.push((arrived_ns, wire_bytes));
        if self.arrivals.len() as u64 >= self.packets {
            self.end();
        }
    }

    /// The rate over the whole train, and over each half of it (by arrival), whichever
    /// is slowest: a forwarder that held the train's first (or last) datagrams and handed
    /// them on together compresses that half, never both, and the slower half reads the
    /// bottleneck (taken alone, the whole span read a 1 Gbit/s lab path at 3.5 Gbit/s once
    /// in eight cold copies on a 2-CPU host).
    fn end(&mut self) {
        self.ended = true;
        if self.arrivals.len() < MIN_TIMED as usize {
            return;
        }
        self.arrivals.sort_unstable();
        let half = self.arrivals.len() / 2;
        let (first, second) = self.arrivals.split_at(half);
        let bps = [rate(&self.arrivals), rate(first), rate(second)]
            .into_iter()
            .flatten()
            .min();
        self.estimate = bps.filter(|&bps| bps > 0 && bps <= MAX_ESTIMATE_BPS);
    }

    /// Whether the train has ended (its estimate, if any, is final).
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The path's rate by the train, bits per second of wire bytes, once it has ended.
    pub fn estimate(&self) -> Option<u64> {
        self.estimate
    }
}

/// The rate of `arrivals` (sorted by time): the bytes of those before the last instant
/// over the time from the first to the last; none within one instant, or too few.
fn rate(arrivals: &[(u64, u64)]) -> Option<u64> {
    let (&(first_ns, _), &(last_ns, _)) = (arrivals.first()?, arrivals.last()?);
    if arrivals.len() < MIN_TIMED as usize / 2 || last_ns == first_ns {
        return None;
    }
    let before_last: u64 = arrivals
        .iter()
        .filter(|&&(at, _)| at < last_ns)
        .map(|&(_, bytes)| bytes)
        .sum();
    Some((u128::from(before_last) * 8_000_000_000 / u128::from(last_ns - first_ns)) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// 1,500-byte datagrams through a bottleneck of `bps`: their arrival times.
    fn spaced(count: u64, bps: u64) -> Vec<u64> {
        let gap = 1_500 * 8 * 1_000_000_000 / bps;
        (0..count).map(|i| 5_000_000 + i * gap).collect()
    }

    #[test]
    fn a_train_spaced_by_a_bottleneck_reads_its_rate() {
        let mut meter = TrainMeter::new(64);
        for (pn, at) in spaced(64, 1_000_000_000).into_iter().enumerate() {
            assert_eq!(meter.estimate(), None);
            meter.on_arrival(pn as u64, 1_500, at);
        }
        assert_eq!(meter.estimate(), Some(1_000_000_000));
    }

    #[test]
    fn coalesced_arrivals_read_the_same_rate() {
        // The same train handed up eight datagrams a message, each message stamped with
        // its first datagram's arrival.
        let times = spaced(64, 1_000_000_000);
        let mut meter = TrainMeter::new(64);
        for (pn, _) in times.iter().enumerate() {
            meter.on_arrival(pn as u64, 1_500, times[pn / 8 * 8]);
        }
        assert_eq!(meter.estimate(), Some(1_000_000_000));
    }

    #[test]
    fn losses_in_the_train_and_the_datagram_after_it_end_it() {
        // Every fourth datagram lost: the rest still arrive a bottleneck's gap apart.
        let times = spaced(64, 100_000_000);
        let mut meter = TrainMeter::new(64);
        for pn in (0..64u64).filter(|pn| pn % 4 != 3) {
            meter.on_arrival(pn, 1_500, times[pn as usize]);
        }
        assert_eq!(meter.estimate(), None, "the train has not ended");
        meter.on_arrival(64, 1_500, times[63] + 1_000_000);
        let bps = meter.estimate().unwrap();
        // 46 gaps' bytes (those before the last arrival) over 62 gaps' time.
        assert_eq!(bps, 47 * 1_500 * 8 * 1_000_000_000 / (62 * 120_000));
        // Too few arrivals timed, or all at one instant: no estimate.
        let mut few = TrainMeter::new(64);
        for pn in 0..5 {
            few.on_arrival(pn, 1_500, 1_000 * pn);
        }
        few.on_arrival(70, 1_500, 10_000);
        assert_eq!(few.estimate(), None);
        let mut instant = TrainMeter::new(16);
        for pn in 0..16 {
            instant.on_arrival(pn, 1_500, 7);
        }
        assert_eq!(instant.estimate(), None);
    }

    /// A forwarder that held the train's first quarter and handed it on at once, late: the
    /// whole span reads faster than the bottleneck; the half it did not touch does not.
    #[test]
    fn a_train_compressed_at_one_end_reads_its_untouched_half() {
        let times = spaced(64, 1_000_000_000);
        let mut meter = TrainMeter::new(64);
        for (pn, &at) in times.iter().enumerate() {
            meter.on_arrival(pn as u64, 1_500, at.max(times[32]));
        }
        let bps = meter.estimate().unwrap();
        assert!((990_000_000..=1_000_000_000).contains(&bps), "{bps}");
        // The same train timed whole: its span is half what it was.
        let compressed = rate(
            &times
                .iter()
                .map(|&at| (at.max(times[32]), 1_500))
                .collect::<Vec<_>>(),
        );
        assert!(compressed.unwrap() > 1_900_000_000, "{compressed:?}");
    }

    #[test]
    fn a_train_fits_a_bottleneck_queue() {
        assert_eq!(train_packets(1_500), 256);
        assert_eq!(train_packets(9_000), 43);
        assert_eq!(train_packets(65_072), 16);
    }

    proptest! {
        /// Whatever arrives, in any order, at any times: never a panic, and an estimate is
        /// within its bound and no faster than the train's bytes over its span.
        #[test]
        fn any_arrivals_give_a_bounded_estimate_or_none(
            packets in 2u32..100,
            arrivals in proptest::collection::vec((0u64..200, 0u64..70_000, any::<u64>()), 0..200),
        ) {
            let mut meter = TrainMeter::new(packets);
            for (pn, bytes, at) in arrivals {
                meter.on_arrival(pn, bytes, at);
            }
            if let Some(bps) = meter.estimate() {
                prop_assert!(bps > 0 && bps <= MAX_ESTIMATE_BPS);
            }
        }
    }
}
