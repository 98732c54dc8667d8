//! A multicast receiver's accounting of one joined group (docs/multicast.md), sans-IO:
//! datagrams and times in, each sender's stream out when it ends.
//!
//! A group may hear several senders at once; each (address, port) is a stream of its own
//! with its own [`SequenceTracker`] over iperf 2's datagrams. A stream ends at its final
//! datagram, after a silence, or when the receiver stops. The senders a group keeps track
//! of at once are bounded ([`MAX_SENDERS`]): a host that floods a group from many ports
//! costs the receiver a counter, not memory.

use crate::datagram::{Framing, SequenceTracker};
use linerate_model::multicast::{Join, MulticastStream, OneWayDelay, StreamEnd};
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// Senders one group keeps track of at once; datagrams from more are counted and dropped.
pub const MAX_SENDERS: usize = 64;

/// Why a stream's one-way delay is not given: the two clocks cannot be compared.
pub const CLOCKS_APART: &str = "the sender's clock is not known to agree with this host's \
     (iperf 2's datagrams do not say): give serve --same-clock where both read one clock \
     (one host, a lab's namespaces)";

/// One sender's stream as it goes.
#[derive(Debug)]
struct Stream {
    tracker: SequenceTracker,
    first_ns: u64,
    last_ns: u64,
    join_latency_ns: Option<u64>,
    /// After its end is reported, the stream stays this long to take its sender's repeated
    /// final datagrams and stragglers without starting a new stream.
    ended_at: Option<u64>,
}

/// One joined group's accounting. Times are nanoseconds: `mono` of a steady clock (the
/// join, arrivals, silences) and `wall` of the wall clock (one-way delay, compared with
/// the send times the datagrams carry).
#[derive(Debug)]
pub struct GroupReceiver {
    join: Join,
    port: u16,
    joined_ns: u64,
    silence_ns: u64,
    one_clock: bool,
    /// Whether a datagram has arrived since the join (the join latency is taken once).
    heard: bool,
    streams: BTreeMap<SocketAddr, Stream>,
    /// Datagrams from senders beyond [`MAX_SENDERS`], or from another source than a
    /// source-specific join's.
    pub refused: u64,
}

impl GroupReceiver {
    /// A group joined at `joined_ns`; a stream ends after `silence_ns` without a datagram;
    /// `one_clock`: the senders read this host's clock (one-way delay is given).
    pub fn new(
        join: Join,
        port: u16,
        joined_ns: u64,
        silence_ns: u64,
        one_clock: bool,
    ) -> GroupReceiver {
        GroupReceiver {
            join,
            port,
            joined_ns,
            silence_ns,
            one_clock,
            heard: false,
            streams: BTreeMap::new(),
            refused: 0,
        }
    }

    pub fn join(&self) -> &Join {
        &self.join
    }

    /// Streams under way (not yet ended).
    pub fn streams_on(&self) -> usize {
        self.streams
            .values()
            .filter(|s| s.ended_at.is_none())
            .count()
    }

    /// Accounts one datagram from `from`; returns the stream it ended, if it was its
    /// final datagram.
    pub fn datagram(
        &mut self,
        from: SocketAddr,
        datagram: &[u8],
        mono_ns: u64,
        wall_ns: u64,
    ) -> Option<MulticastStream> {
        if self.join.source.is_some_and(|source| source != from.ip()) {
            self.refused += 1;
            return None;
        }
        if !self.streams.contains_key(&from) {
            if Framing::Iperf2.is_final(datagram) {
                // A final of a stream already ended and forgotten, or of one never heard.
                return None;
            }
            if self.streams.len() >= MAX_SENDERS {
                self.refused += 1;
                return None;
            }
            let join_latency_ns = (!self.heard).then(|| mono_ns.saturating_sub(self.joined_ns));
            self.heard = true;
            self.streams.insert(
                from,
                Stream {
                    tracker: SequenceTracker::new(0, Framing::Iperf2),
                    first_ns: mono_ns,
                    last_ns: mono_ns,
                    join_latency_ns,
                    ended_at: None,
                },
            );
        }
        let stream = self.streams.get_mut(&from)?;
        if stream.ended_at.is_some() {
            return None;
        }
        if Framing::Iperf2.is_final(datagram) {
            let count = final_count(datagram);
            stream.ended_at = Some(mono_ns);
            return Some(self.result(from, StreamEnd::Final, count));
        }
        stream.last_ns = mono_ns;
        stream.tracker.record(datagram, wall_ns);
        None
    }

    /// The streams a silence ended by `mono_ns`; forgets streams ended long enough ago.
    pub fn tick(&mut self, mono_ns: u64) -> Vec<MulticastStream> {
        let silence = self.silence_ns;
        self.streams.retain(|_, s| {
            s.ended_at
                .is_none_or(|at| mono_ns.saturating_sub(at) < silence)
        });
        let quiet: Vec<SocketAddr> = self
            .streams
            .iter()
            .filter(|(_, s)| s.ended_at.is_none() && mono_ns.saturating_sub(s.last_ns) >= silence)
            .map(|(from, _)| *from)
            .collect();
        quiet
            .into_iter()
            .map(|from| {
                if let Some(stream) = self.streams.get_mut(&from) {
                    stream.ended_at = Some(mono_ns);
                }
                self.result(from, StreamEnd::Silence, None)
            })
            .collect()
    }

    /// Every stream under way, ended by the receiver's stop.
    pub fn stop(&mut self, mono_ns: u64) -> Vec<MulticastStream> {
        let on: Vec<SocketAddr> = self
            .streams
            .iter()
            .filter(|(_, s)| s.ended_at.is_none())
            .map(|(from, _)| *from)
            .collect();
        on.into_iter()
            .map(|from| {
                if let Some(stream) = self.streams.get_mut(&from) {
                    stream.ended_at = Some(mono_ns);
                }
                self.result(from, StreamEnd::Stopped, None)
            })
            .collect()
    }

    /// The figures of `from`'s stream; `sent`: the count its final datagram carried.
    fn result(&self, from: SocketAddr, ended: StreamEnd, sent: Option<u64>) -> MulticastStream {
        let stream = &self.streams[&from];
        let counts = stream.tracker.counts();
        let seen = stream.tracker.expected();
        // Datagrams after the last one seen, lost too where the final says how many.
        let expected = sent.map_or(seen, |sent| sent.max(seen));
        let lost = counts.lost + (expected - seen);
        let duration_s = stream.last_ns.saturating_sub(stream.first_ns) as f64 / 1e9;
        let ms = |ns: f64| ns / 1e6;
        let one_way_delay = match (self.one_clock, counts.transit_min_ns, counts.transit_max_ns) {
            (true, Some(min), Some(max)) => OneWayDelay::Given {
                mean_ms: ms(counts.transit_sum_ns / counts.transit_samples as f64),
                min_ms: ms(min),
                max_ms: ms(max),
            },
            (true, _, _) => OneWayDelay::Withheld {
                reason: "no datagram arrived in order".into(),
            },
            (false, _, _) => OneWayDelay::Withheld {
                reason: CLOCKS_APART.into(),
            },
        };
        let added_delay_ms = match counts.transit_min_ns {
            Some(min) if counts.transit_samples > 0 => {
                ms(counts.transit_sum_ns / counts.transit_samples as f64 - min)
            }
            _ => 0.0,
        };
        MulticastStream {
            group: self.join.group,
            port: self.port,
            source: self.join.source,
            sender: from,
            datagrams: counts.datagrams,
            bytes: counts.bytes,
            lost,
            expected,
            // At most 100: two counts near 2^64 divide to a hair above it in floating point.
            loss_percent: if expected == 0 {
                0.0
            } else {
                (lost as f64 * 100.0 / expected as f64).min(100.0)
            },
            out_of_order: counts.out_of_order,
            duplicates: counts.duplicates,
            foreign: counts.foreign,
            jitter_ms: ms(counts.jitter_ns),
            duration_s,
            received_bps: if duration_s > 0.0 {
                counts.bytes as f64 * 8.0 / duration_s
            } else {
                0.0
            },
            join_latency_ms: stream.join_latency_ns.map(|ns| ms(ns as f64)),
            one_way_delay,
            added_delay_ms,
            ended,
        }
    }
}

/// The datagrams a final datagram says its stream sent: its number negated, less one.
fn final_count(datagram: &[u8]) -> Option<u64> {
    Framing::iperf2_sent(datagram)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn datagram(sequence: u64, sent_ns: u64) -> Vec<u8> {
        let mut d = vec![0u8; 100];
        Framing::Iperf2.write(&mut d, sequence, sent_ns, 0);
        d
    }

    fn last(sent: u64) -> Vec<u8> {
        let mut d = vec![0u8; 100];
        Framing::write_iperf2_final(&mut d, sent, 0);
        d
    }

    fn receiver(one_clock: bool) -> GroupReceiver {
        GroupReceiver::new(
            Join::parse("239.1.1.1").unwrap(),
            5001,
            0,
            2000 * MS,
            one_clock,
        )
    }

    fn from(port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], port))
    }

    /// A stream with a gap and its final: the tail lost after the last datagram seen
    /// counts too, the join latency is the first datagram's, the delay on one clock is
    /// arrival less send time.
    #[test]
    fn a_stream_ends_at_its_final_with_the_tail_it_lost() {
        let mut r = receiver(true);
        for (i, sequence) in [0u64, 1, 3, 4].into_iter().enumerate() {
            let at = 50 * MS + i as u64 * MS;
            assert!(r
                .datagram(from(9), &datagram(sequence, at - 2 * MS), at, at)
                .is_none());
        }
        let stream = r.datagram(from(9), &last(7), 60 * MS, 60 * MS).unwrap();
        assert_eq!(stream.ended, StreamEnd::Final);
        assert_eq!((stream.datagrams, stream.expected, stream.lost), (4, 7, 3));
        assert!((stream.loss_percent - 300.0 / 7.0).abs() < 1e-9);
        assert_eq!(stream.join_latency_ms, Some(50.0));
        assert_eq!(
            stream.one_way_delay,
            OneWayDelay::Given {
                mean_ms: 2.0,
                min_ms: 2.0,
                max_ms: 2.0
            }
        );
        assert!((stream.duration_s - 0.003).abs() < 1e-12);
        // The sender's repeated finals and a straggler start nothing new.
        assert!(r.datagram(from(9), &last(7), 61 * MS, 61 * MS).is_none());
        assert!(r
            .datagram(from(9), &datagram(5, 0), 62 * MS, 62 * MS)
            .is_none());
        assert_eq!(r.streams_on(), 0);
    }

    #[test]
    fn silence_ends_a_stream_and_the_stop_ends_the_rest() {
        let mut r = receiver(false);
        r.datagram(from(1), &datagram(0, 0), MS, MS);
        r.datagram(from(2), &datagram(0, 0), 1500 * MS, 1500 * MS);
        assert!(r.tick(1000 * MS).is_empty());
        let quiet = r.tick(2001 * MS);
        assert_eq!(quiet.len(), 1);
        assert_eq!(
            (quiet[0].sender, quiet[0].ended),
            (from(1), StreamEnd::Silence)
        );
        assert!(matches!(
            quiet[0].one_way_delay,
            OneWayDelay::Withheld { .. }
        ));
        assert_eq!(
            quiet[0].join_latency_ms,
            Some(1.0),
            "the first stream the join saw"
        );
        let stopped = r.stop(2500 * MS);
        assert_eq!(stopped.len(), 1);
        assert_eq!(
            (stopped[0].sender, stopped[0].ended),
            (from(2), StreamEnd::Stopped)
        );
        assert_eq!(stopped[0].join_latency_ms, None);
        // Ended streams are forgotten after a silence.
        r.tick(5000 * MS);
        assert!(r.streams.is_empty());
    }

    #[test]
    fn senders_are_bounded_and_a_source_specific_join_hears_its_source_alone() {
        let mut r = receiver(false);
        for port in 0..(MAX_SENDERS as u16 + 10) {
            r.datagram(from(port), &datagram(0, 0), MS, MS);
        }
        assert_eq!(r.streams.len(), MAX_SENDERS);
        assert_eq!(r.refused, 10);
        let mut ssm = GroupReceiver::new(
            Join::parse("232.1.1.1@10.0.0.2").unwrap(),
            5001,
            0,
            MS,
            false,
        );
        ssm.datagram(from(1), &datagram(0, 0), MS, MS);
        assert_eq!((ssm.streams.len(), ssm.refused), (0, 1));
        ssm.datagram(
            SocketAddr::from(([10, 0, 0, 2], 1)),
            &datagram(0, 0),
            MS,
            MS,
        );
        assert_eq!(ssm.streams.len(), 1);
    }

    #[test]
    fn a_final_counts_what_its_sender_sent() {
        assert_eq!(final_count(&last(1314)), Some(1314));
        assert_eq!(final_count(&last(0)), Some(0));
        // iperf 2's 32-bit final: -1315 in the low word, no 64-bit flag.
        let mut old = vec![0u8; 16];
        old[..4].copy_from_slice(&(-1315i32).to_be_bytes());
        assert_eq!(final_count(&old), Some(1314));
        assert_eq!(final_count(&datagram(3, 0)), None);
    }
}
