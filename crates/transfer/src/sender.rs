//! The sending end's core (docs/transfer-protocol.md 4-5): which block goes next under
//! which packet number, when, and what the ACKs say was lost. Loss detection follows RFC
//! 9002: a packet is lost when one sent three later has been acknowledged, or when it is
//! 9/8 of an RTT older than the newest acknowledged; a probe timeout covers the tail. A
//! lost block goes again under a new packet number. The driver holds the bytes.

use std::collections::VecDeque;

use crate::control::StartEstimate;
use crate::layout::{Block, Layout};
use crate::rate::{AckEvent, RateConfig, RateControl};
use crate::wire::{Ack, DATA_HEADER};

/// Later packets acknowledged before an earlier one counts as lost.
const PACKET_THRESHOLD: u64 = 3;
/// Bytes each datagram costs on the wire besides its payload: our header, UDP and IPv4.
pub const WIRE_OVERHEAD: u64 = DATA_HEADER as u64 + 28;

/// A datagram's bytes on the wire for a payload of `len`.
fn wire_bytes(len: u32) -> u64 {
    u64::from(len) + WIRE_OVERHEAD
}
/// The packet train a transfer of `layout` under `rate` begins with (its datagrams), as
/// its offer names it: a cold search's ([`RateControl::starts_with_train`]), never longer
/// than the file.
pub fn train_for(layout: &Layout, rate: RateConfig, initial_rtt_ns: u64) -> Option<u32> {
    let packets = RateControl::starts_with_train(rate, initial_rtt_ns, wire_bytes(layout.block))?;
    let packets = u64::from(packets).min(layout.blocks());
    (packets >= 2).then_some(packets as u32)
}

/// The receiver's ACK delay the probe timeout allows for.
const MAX_ACK_DELAY_NS: u64 = crate::receiver::MAX_ACK_DELAY_NS;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Outstanding,
    Acked,
    Lost,
}

#[derive(Debug, Clone, Copy)]
struct Sent {
    block: Block,
    time_ns: u64,
    /// [`Sender::delivered_wire`] when this was sent.
    delivered_wire: u64,
    delivered_time_ns: u64,
    first_sent_time_ns: u64,
    app_limited: bool,
    state: State,
}

/// A datagram to send now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    pub pn: u64,
    /// The UDP flow it goes over (`--lanes`): the packet number modulo the lanes.
    pub lane: usize,
    pub offset: u64,
    pub len: u32,
    pub retransmission: bool,
}

/// Why nothing goes out now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocked {
    /// The pacer: the next datagram is due later.
    Pacing,
    /// The congestion window is full.
    Window,
    /// The receiver's flow-control window (its disk or its CPU is behind).
    Receiver,
    /// The next chunk has not been read from the disk yet.
    Reader,
    /// Everything sent; waiting for ACKs.
    Tail,
    /// Everything acknowledged.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    Send(Transmit),
    /// Nothing to send before `until` (or before an ACK, when `None`).
    Wait {
        until: Option<u64>,
        why: Blocked,
    },
}

/// Why an ACK was not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AckRefusal {
    #[error("an ACK older than one already taken (replayed or reordered)")]
    Stale,
    #[error("an ACK for packet {0}, which was never sent")]
    Unsent(u64),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderCounters {
    pub packets: u64,
    pub bytes: u64,
    pub retransmitted_packets: u64,
    pub retransmitted_bytes: u64,
    pub lost_packets: u64,
    /// Of the lost packets, those judged by the time threshold (the rest by the packet
    /// threshold or a probe timeout).
    pub lost_by_time: u64,
    pub probe_timeouts: u64,
    pub acks: u64,
    pub refused_acks: u64,
    /// Second copies of blocks resent in the tail (counted in the retransmitted figures
    /// too: they are bytes sent again).
    pub tail_copies: u64,
    pub tail_copy_bytes: u64,
    /// With `--ecn`: data datagrams the receiver said arrived marked CE.
    pub ce_marked: u64,
}

#[derive(Debug, Clone, Copy)]
struct Rtt {
    min_ns: u64,
    smoothed_ns: u64,
    var_ns: u64,
    latest_ns: u64,
    sampled: bool,
}

impl Rtt {
    fn update(&mut self, sample_ns: u64, ack_delay_ns: u64) {
        self.min_ns = self.min_ns.min(sample_ns);
        // Take the receiver's delay out unless that would go below the minimum.
        let adjusted = if sample_ns >= self.min_ns + ack_delay_ns {
            sample_ns - ack_delay_ns
        } else {
            sample_ns
        };
        self.latest_ns = sample_ns;
        if !self.sampled {
            self.sampled = true;
            self.smoothed_ns = adjusted;
            self.var_ns = adjusted / 2;
        } else {
            self.var_ns = (3 * self.var_ns + self.smoothed_ns.abs_diff(adjusted)) / 4;
            self.smoothed_ns = (7 * self.smoothed_ns + adjusted) / 8;
        }
    }
}

#[derive(Debug)]
pub struct Sender {
    layout: Layout,
    /// Chunks the receiver already holds: never sent.
    present: Vec<bool>,
    next_new: Option<Block>,
    retransmit: VecDeque<Block>,
    /// A block resent in the tail, to be sent once more right after it (see
    /// [`Sender::poll_transmit`]).
    tail_copy: Option<Block>,
    acked_blocks: Vec<u64>,
    acked_count: u64,
    to_send: u64,
    sent: VecDeque<Sent>,
    first_pn: u64,
    next_pn: u64,
    largest_acked: Option<u64>,
    /// The UDP flows the datagrams spread over, packet number modulo `lanes`, and the
    /// largest packet number acknowledged on each: flows may overtake each other (each
    /// its own queue or thread on the way), so a packet is judged lost only against the
    /// packets of its own lane.
    lanes: u64,
    largest_by_lane: Vec<Option<u64>>,
    last_ack_seq: u64,
    /// The receiver's CE count in the last ACK that carried one.
    last_ce: u64,
    in_flight: u64,
    delivered: u64,
    /// Bytes acknowledged as the path carried them (payload and [`WIRE_OVERHEAD`]): the
    /// unit the pacer spaces datagrams in, so the rate model measures in it too.
    delivered_wire: u64,
    delivered_time_ns: u64,
    /// When the newest packet acknowledged so far was sent: the start of the send
    /// interval of a delivery-rate sample.
    first_sent_time_ns: u64,
    next_round_delivered: u64,
    window: u64,
    verified: u64,
    readable_chunks: u64,
    next_send_ns: u64,
    app_limited: bool,
    loss_time_ns: Option<u64>,
    last_activity_ns: u64,
    pto_count: u32,
    probe_credit: u32,
    rtt: Rtt,
    rate: RateControl,
    /// Datagrams sent back to back at the start, a packet train the receiver times (a
    /// cold start; 0 without one).
    train_packets: u64,
    /// When the first datagram left, when the train's last did (with the train's wire
    /// bytes), and how long after the first the train's estimate came.
    started_ns: Option<u64>,
    train_sent: (u64, u64),
    train_after_ns: Option<u64>,
    pub counters: SenderCounters,
}

impl Sender {
    pub fn new(layout: Layout, rate: RateConfig, initial_rtt_ns: u64) -> Sender {
        let initial_rtt_ns = initial_rtt_ns.max(100_000);
        Sender {
            layout,
            present: vec![false; layout.chunks() as usize],
            next_new: layout.first_block(0),
            retransmit: VecDeque::new(),
            tail_copy: None,
            acked_blocks: vec![0; layout.blocks().div_ceil(64) as usize],
            acked_count: 0,
            to_send: layout.blocks(),
            sent: VecDeque::new(),
            first_pn: 0,
            next_pn: 0,
            largest_acked: None,
            lanes: 1,
            largest_by_lane: vec![None],
            last_ack_seq: 0,
            last_ce: 0,
            in_flight: 0,
            delivered: 0,
            delivered_wire: 0,
            delivered_time_ns: 0,
            first_sent_time_ns: 0,
            next_round_delivered: 0,
            window: 0,
            verified: 0,
            readable_chunks: 0,
            next_send_ns: 0,
            app_limited: true,
            loss_time_ns: None,
            last_activity_ns: 0,
            pto_count: 0,
            probe_credit: 0,
            rtt: Rtt {
                min_ns: u64::MAX,
                smoothed_ns: initial_rtt_ns,
                var_ns: initial_rtt_ns / 2,
                latest_ns: initial_rtt_ns,
                sampled: false,
            },
            rate: RateControl::new(rate, u64::from(layout.block), initial_rtt_ns),
            train_packets: train_for(&layout, rate, initial_rtt_ns).map_or(0, u64::from),
            started_ns: None,
            train_sent: (0, 0),
            train_after_ns: None,
            counters: SenderCounters::default(),
        }
    }

    /// The datagrams this transfer sends back to back at its start for the receiver to
    /// time (the offer names them), when it begins with a packet train.
    pub fn train_packets(&self) -> Option<u32> {
        (self.train_packets > 0).then_some(self.train_packets as u32)
    }

    /// Whether the next datagram is one of the packet train's.
    pub fn in_train(&self) -> bool {
        self.next_pn < self.train_packets
    }

    /// The packet train's estimate of the path, how long after the first datagram it
    /// came and what the search jumped to, when one came.
    pub fn train_estimate(&self) -> Option<StartEstimate> {
        // The rate the train left at, from the first datagram's send to the last's (the
        // bytes before the last over that span); none where it left within one instant of
        // this clock (one batch of the sending loop).
        let (last_ns, bytes) = self.train_sent;
        let span = last_ns.saturating_sub(self.started_ns?);
        let last = wire_bytes(self.layout.block);
        let sent_bps = (span > 0).then(|| bytes.saturating_sub(last) as f64 * 8e9 / span as f64);
        Some(StartEstimate {
            bps: self.rate.train_bps()? as f64,
            after_ms: self.train_after_ns? as f64 / 1e6,
            jumped_to_bps: self.rate.train_jump_bps().map(|bps| bps as f64),
            sent_bps,
        })
    }

    /// Spreads the datagrams over `lanes` UDP flows (1 to 64), before the first is sent.
    pub fn set_lanes(&mut self, lanes: usize) {
        assert!((1..=64).contains(&lanes), "1 to 64 lanes");
        debug_assert_eq!(self.next_pn, 0, "lanes are set before the first datagram");
        self.lanes = lanes as u64;
        self.largest_by_lane = vec![None; lanes];
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn rate(&self) -> &RateControl {
        &self.rate
    }

    pub fn srtt_ns(&self) -> u64 {
        self.rtt.smoothed_ns
    }

    pub fn min_rtt_ns(&self) -> Option<u64> {
        (self.rtt.min_ns != u64::MAX).then_some(self.rtt.min_ns)
    }

    /// Payload bytes acknowledged so far.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    pub fn in_flight(&self) -> u64 {
        self.in_flight
    }

    /// Bytes below which the receiver has verified everything: the driver may drop them.
    pub fn verified(&self) -> u64 {
        self.verified
    }

    /// The receiver already holds this chunk (resume): it is never sent.
    pub fn mark_present(&mut self, chunk: u64) {
        let Some(slot) = self.present.get_mut(chunk as usize) else {
            return;
        };
        if *slot {
            return;
        }
        *slot = true;
        self.to_send -= self.layout.blocks_in(chunk);
        self.skip_present();
    }

    fn skip_present(&mut self) {
        while let Some(block) = self.next_new {
            if !self.present[block.chunk as usize] {
                break;
            }
            self.next_new = self.layout.first_block(block.chunk + 1);
        }
    }

    /// The receiver's window as the control connection reported it before any ACK.
    pub fn set_window(&mut self, window: u64) {
        self.window = self.window.max(window.min(self.layout.size));
    }

    /// The driver has read chunks `0..chunks` into memory.
    pub fn set_readable(&mut self, chunks: u64) {
        self.readable_chunks = self.readable_chunks.max(chunks);
    }

    /// Every block is acknowledged.
    pub fn all_acked(&self) -> bool {
        self.acked_count >= self.to_send
    }

    fn is_acked(&self, block: &Block) -> bool {
        self.acked_blocks[(block.index / 64) as usize] & (1 << (block.index % 64)) != 0
    }

    /// The receiver found chunk `chunk`'s hash wrong: all of it goes again.
    pub fn refetch(&mut self, chunk: u64) {
        let mut block = self.layout.first_block(chunk);
        while let Some(b) = block.filter(|b| b.chunk == chunk) {
            let word = &mut self.acked_blocks[(b.index / 64) as usize];
            if *word & (1 << (b.index % 64)) != 0 {
                *word &= !(1 << (b.index % 64));
                self.acked_count -= 1;
            }
            self.retransmit.push_back(b);
            block = self.layout.next_block(&b);
        }
    }

    fn burst_ns(&self) -> u64 {
        // A millisecond at the current rate, but never more than 64 datagrams: each wake-up
        // of the sending thread costs a timer and a context switch (dearer still in a
        // virtual machine), so fewer, larger bursts leave the CPU to the data; a bottleneck
        // queue absorbs a millisecond's burst.
        let bps = self.rate.pacing_bps().max(1);
        let most = 64 * (u64::from(self.layout.block) + WIRE_OVERHEAD) * 8;
        ((most as u128 * 1_000_000_000 / bps as u128) as u64).min(1_000_000)
    }

    fn wait(&mut self, until: Option<u64>, why: Blocked) -> Poll {
        self.app_limited = matches!(why, Blocked::Receiver | Blocked::Reader | Blocked::Tail);
        Poll::Wait { until, why }
    }

    /// The next datagram to send now, or why none.
    pub fn poll_transmit(&mut self, now_ns: u64) -> Poll {
        if self.all_acked() {
            return self.wait(None, Blocked::Done);
        }
        let burst = self.burst_ns();
        // A packet train goes back to back, unpaced: the bottleneck spaces it.
        let in_train = self.next_pn < self.train_packets;
        if !in_train && now_ns + burst < self.next_send_ns {
            // Wake when the whole burst is due, not its first datagram: waking at
            // `next_send_ns - burst` would send one datagram a wake-up in the steady state.
            return self.wait(Some(self.next_send_ns), Blocked::Pacing);
        }
        if self.probe_credit == 0
            && self.in_flight + u64::from(self.layout.block) > self.rate.cwnd()
        {
            return self.wait(None, Blocked::Window);
        }
        let (block, retransmission) = loop {
            if let Some(block) = self.tail_copy.take() {
                if self.is_acked(&block) || block.offset < self.verified {
                    continue;
                }
                self.counters.tail_copies += 1;
                self.counters.tail_copy_bytes += u64::from(block.len);
                break (block, true);
            }
            if let Some(block) = self.retransmit.pop_front() {
                if self.is_acked(&block) || block.offset < self.verified {
                    continue;
                }
                // In the tail (every block sent once) a resend goes twice. About as many
                // datagrams are lost in the last round trip as in any other, and each of
                // their resends is lost again at the path's rate (at 1 % and 1 Gbit/s,
                // 100 ms: 89 resends, one or more lost in 59 % of copies); a lost resend
                // with nothing sent after it to reveal it waits for a probe timeout, a
                // tail of five round trips instead of two. Two copies are both lost at the
                // square of the rate, for a few hundred datagrams more a copy.
                if self.next_new.is_none() {
                    self.tail_copy = Some(block);
                }
                break (block, true);
            }
            match self.next_new {
                Some(block) if block.offset >= self.window => {
                    return self.wait(None, Blocked::Receiver)
                }
                Some(block) if block.chunk >= self.readable_chunks => {
                    return self.wait(None, Blocked::Reader)
                }
                Some(block) => {
                    self.next_new = self.layout.next_block(&block);
                    self.skip_present();
                    break (block, false);
                }
                None => return self.wait(None, Blocked::Tail),
            }
        };
        self.probe_credit = self.probe_credit.saturating_sub(1);
        let pn = self.next_pn;
        self.next_pn += 1;
        self.note_train(now_ns, in_train, block.len);
        if self.sent.is_empty() {
            self.first_pn = pn;
        }
        if self.in_flight == 0 {
            // Nothing in flight: the delivery clock restarts now, not at the last ACK.
            self.delivered_time_ns = now_ns;
            self.first_sent_time_ns = now_ns;
        }
        self.sent.push_back(Sent {
            block,
            time_ns: now_ns,
            delivered_wire: self.delivered_wire,
            delivered_time_ns: self.delivered_time_ns,
            first_sent_time_ns: self.first_sent_time_ns,
            app_limited: self.app_limited,
            state: State::Outstanding,
        });
        self.in_flight += u64::from(block.len);
        self.last_activity_ns = now_ns;
        let wire = wire_bytes(block.len) * 8;
        let tx_ns = (wire as u128 * 1_000_000_000 / self.rate.pacing_bps().max(1) as u128) as u64;
        // The pacing begins after the train, as though it had not been sent.
        let paced_from = self.next_send_ns.max(now_ns.saturating_sub(burst));
        self.next_send_ns = if in_train { now_ns } else { paced_from + tx_ns };
        self.counters.packets += 1;
        self.counters.bytes += u64::from(block.len);
        if retransmission {
            self.counters.retransmitted_packets += 1;
            self.counters.retransmitted_bytes += u64::from(block.len);
        }
        Poll::Send(Transmit {
            pn,
            lane: (pn % self.lanes) as usize,
            offset: block.offset,
            len: block.len,
            retransmission,
        })
    }

    /// When the first datagram left, and the train's last with the train's bytes.
    fn note_train(&mut self, now_ns: u64, in_train: bool, len: u32) {
        self.started_ns.get_or_insert(now_ns);
        if in_train {
            self.train_sent = (now_ns, self.train_sent.1 + wire_bytes(len));
        }
    }

    /// The packet train's estimate, from the first ACK that carries it (once).
    fn take_train_estimate(&mut self, now_ns: u64, ack: &Ack) {
        let Some(bps) = ack.train_bps.filter(|_| self.train_packets > 0) else {
            return;
        };
        if self.train_after_ns.is_none() {
            self.train_after_ns = Some(now_ns.saturating_sub(self.started_ns.unwrap_or(0)));
            self.rate.on_train_estimate(bps);
        }
    }

    fn loss_delay_ns(&self) -> u64 {
        (self.rtt.smoothed_ns.max(self.rtt.latest_ns) * 9 / 8).max(1_000_000)
    }

    fn pto_ns(&self) -> u64 {
        let base = self.rtt.smoothed_ns + (4 * self.rtt.var_ns).max(1_000_000) + MAX_ACK_DELAY_NS;
        base << self.pto_count.min(6)
    }

    /// When the driver must call [`on_timeout`](Self::on_timeout) next.
    pub fn next_timeout(&self) -> Option<u64> {
        let pto = (self.in_flight > 0).then(|| self.last_activity_ns + self.pto_ns());
        match (self.loss_time_ns, pto) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn on_timeout(&mut self, now_ns: u64) {
        if self.loss_time_ns.is_some_and(|t| t <= now_ns) {
            self.detect_losses(now_ns);
        }
        if self.in_flight > 0 && now_ns >= self.last_activity_ns + self.pto_ns() {
            // No ACK for too long: the oldest packets go again, past the window if need be.
            self.counters.probe_timeouts += 1;
            self.pto_count += 1;
            self.last_activity_ns = now_ns;
            let mut probes = 0;
            for i in 0..self.sent.len() {
                if probes == 2 {
                    break;
                }
                if self.sent[i].state == State::Outstanding {
                    self.declare_lost(i);
                    probes += 1;
                }
            }
            self.probe_credit = probes;
            self.prune();
        }
    }

    fn declare_lost(&mut self, index: usize) {
        let sent = &mut self.sent[index];
        sent.state = State::Lost;
        let block = sent.block;
        self.in_flight -= u64::from(block.len);
        self.counters.lost_packets += 1;
        self.rate.on_loss(wire_bytes(block.len));
        if !self.is_acked(&block) {
            self.retransmit.push_back(block);
        }
    }

    fn detect_losses(&mut self, now_ns: u64) {
        self.loss_time_ns = None;
        let Some(largest) = self.largest_acked else {
            return;
        };
        let delay = self.loss_delay_ns();
        // Lanes whose oldest outstanding packet is not lost (yet): nothing later on them
        // is either. With one lane this is RFC 9002's walk, which stops at the first.
        let every_lane = u64::MAX >> (64 - self.lanes);
        let mut settled = 0u64;
        for i in 0..self.sent.len() {
            let pn = self.first_pn + i as u64;
            if pn >= largest || settled == every_lane {
                break;
            }
            let sent = self.sent[i];
            let lane = pn % self.lanes;
            if sent.state != State::Outstanding || settled & (1 << lane) != 0 {
                continue;
            }
            let lane_largest = self.largest_by_lane[lane as usize].filter(|&l| l > pn);
            let Some(lane_largest) = lane_largest else {
                // Nothing later on its lane acknowledged: not lost by either rule.
                settled |= 1 << lane;
                continue;
            };
            if lane_largest >= pn + PACKET_THRESHOLD * self.lanes {
                self.declare_lost(i);
            } else if sent.time_ns + delay <= now_ns {
                self.counters.lost_by_time += 1;
                self.declare_lost(i);
            } else {
                let due = sent.time_ns + delay;
                self.loss_time_ns = Some(self.loss_time_ns.map_or(due, |t| t.min(due)));
                settled |= 1 << lane;
            }
        }
        self.prune();
    }

    fn prune(&mut self) {
        while self
            .sent
            .front()
            .is_some_and(|s| s.state != State::Outstanding)
        {
            self.sent.pop_front();
            self.first_pn += 1;
        }
    }

    /// An ACK arrived (its tag already checked).
    pub fn on_ack(&mut self, now_ns: u64, ack: &Ack) -> Result<(), AckRefusal> {
        if ack.seq <= self.last_ack_seq {
            self.counters.refused_acks += 1;
            return Err(AckRefusal::Stale);
        }
        if ack.largest >= self.next_pn && !(ack.largest == 0 && ack.ranges.is_empty()) {
            self.counters.refused_acks += 1;
            return Err(AckRefusal::Unsent(ack.largest));
        }
        self.last_ack_seq = ack.seq;
        self.counters.acks += 1;
        self.window = self.window.max(ack.window.min(self.layout.size));
        self.verified = self.verified.max(ack.verified.min(self.layout.size));
        let mut newest: Option<Sent> = None;
        let mut newly_acked = 0u64;
        let end = self.first_pn + self.sent.len() as u64;
        for range in &ack.ranges {
            let low = range.low.max(self.first_pn);
            let high = range.high.min(end.saturating_sub(1));
            if low > high || end == self.first_pn {
                continue;
            }
            for pn in low..=high {
                let lane = &mut self.largest_by_lane[(pn % self.lanes) as usize];
                *lane = Some(lane.map_or(pn, |l| l.max(pn)));
                let i = (pn - self.first_pn) as usize;
                let sent = &mut self.sent[i];
                if sent.state != State::Outstanding {
                    continue;
                }
                sent.state = State::Acked;
                let sent = *sent;
                self.in_flight -= u64::from(sent.block.len);
                self.delivered += u64::from(sent.block.len);
                self.delivered_wire += wire_bytes(sent.block.len);
                newly_acked += wire_bytes(sent.block.len);
                let word = &mut self.acked_blocks[(sent.block.index / 64) as usize];
                if *word & (1 << (sent.block.index % 64)) == 0 {
                    *word |= 1 << (sent.block.index % 64);
                    self.acked_count += 1;
                }
                if newest.is_none_or(|n| n.time_ns < sent.time_ns) {
                    newest = Some(sent);
                }
            }
        }
        // The CE count only grows; never past the datagrams sent (a count beyond them is
        // no mark the path set).
        let ce = ack
            .ce
            .map_or(self.last_ce, |c| c.min(self.next_pn))
            .max(self.last_ce);
        let ce_marked = ce - self.last_ce;
        self.last_ce = ce;
        self.counters.ce_marked += ce_marked;
        let mut event = AckEvent {
            now_ns,
            acked: newly_acked,
            ce_marked,
            ..AckEvent::default()
        };
        if let Some(newest) = newest {
            self.delivered_time_ns = now_ns;
            self.largest_acked = Some(
                self.largest_acked
                    .map_or(ack.largest, |l| l.max(ack.largest)),
            );
            let sample = now_ns.saturating_sub(newest.time_ns);
            self.rtt
                .update(sample.max(1), u64::from(ack.delay_us) * 1000);
            event.rtt_ns = Some(sample.max(1));
            // As BBR samples it: bytes delivered over the longer of the time they took
            // to send and to be acknowledged, so ACKs that bunch up cannot inflate the
            // rate; an interval shorter than the path's delay is no sample at all.
            let send_elapsed = newest.time_ns.saturating_sub(newest.first_sent_time_ns);
            let ack_elapsed = now_ns.saturating_sub(newest.delivered_time_ns);
            let interval = send_elapsed.max(ack_elapsed).max(1);
            self.first_sent_time_ns = newest.time_ns;
            let bytes = self.delivered_wire - newest.delivered_wire;
            if interval >= self.rtt.min_ns.min(u64::MAX / 2) {
                event.delivery_bps =
                    Some((bytes as u128 * 8_000_000_000 / interval as u128) as u64);
            }
            event.app_limited = newest.app_limited;
            if newest.delivered_wire >= self.next_round_delivered {
                event.round_end = true;
                self.next_round_delivered = self.delivered_wire;
            }
            self.pto_count = 0;
            self.last_activity_ns = now_ns;
        }
        self.detect_losses(now_ns);
        event.in_flight = self.in_flight;
        self.rate.on_ack(&event);
        self.take_train_estimate(now_ns, ack);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::MIN_CHUNK;
    use crate::rate::{PathMemory, TRAIN_JUMP_SHARE};
    use crate::receiver::{DataOutcome, Receiver};

    const MS: u64 = 1_000_000;

    fn layout() -> Layout {
        Layout::new(4 * MIN_CHUNK, MIN_CHUNK, 1000).unwrap()
    }

    fn fixed(bps: u64) -> RateConfig {
        RateConfig::Fixed { bps }
    }

    /// Runs a sender against a receiver over a path that drops the datagrams `lose`
    /// picks, with a one-way delay; returns both ends when the receiver is whole.
    fn run(
        sender: Sender,
        receiver: Receiver,
        one_way_ns: u64,
        lose: impl FnMut(u64) -> bool,
    ) -> (Sender, Receiver, u64) {
        run_over_lanes(sender, receiver, (1, &|_| one_way_ns), one_way_ns, lose)
    }

    #[test]
    fn a_paced_sender_sends_a_burst_each_time_it_wakes() {
        // 100 Mbit/s: a millisecond's burst is about nine 1,000-byte blocks. The driver
        // sleeps until the time the sender names and sends what it then allows.
        let layout = Layout::fitting(4 << 20, MIN_CHUNK, 1000).unwrap();
        let mut sender = Sender::new(layout, fixed(100_000_000), 10 * MS);
        sender.set_readable(u64::MAX);
        sender.set_window(u64::MAX);
        let (mut now, mut wakes, mut sent) = (0u64, 0u64, 0u64);
        while sent < 2_000 {
            wakes += 1;
            loop {
                match sender.poll_transmit(now) {
                    Poll::Send(_) => sent += 1,
                    Poll::Wait {
                        until: Some(until),
                        why: Blocked::Pacing,
                    } => {
                        assert!(until > now, "a pacing wait names a later time");
                        now = until;
                        break;
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        let per_wake = sent as f64 / wakes as f64;
        assert!(per_wake >= 8.0, "{per_wake:.1} datagrams a wake-up");
        // The bursts add up to the rate: 2,000 blocks of 1,072 wire bytes at 100 Mbit/s.
        let expected_ns = 2_000 * (1_000 + WIRE_OVERHEAD) * 8 * 10;
        assert!(
            now.abs_diff(expected_ns) <= 2 * MS,
            "{now} ns against {expected_ns}"
        );
    }

    #[test]
    fn a_lossless_path_sends_each_block_once() {
        let sender = Sender::new(layout(), fixed(100_000_000), 10 * MS);
        let receiver = Receiver::new(layout(), 8);
        let (sender, receiver, _) = run(sender, receiver, 5 * MS, |_| false);
        assert_eq!(sender.counters.retransmitted_packets, 0);
        assert_eq!(receiver.counters.duplicate_packets, 0);
        assert_eq!(sender.counters.packets, layout().blocks());
    }

    #[test]
    fn lost_blocks_are_sent_again_and_only_they() {
        let sender = Sender::new(layout(), fixed(100_000_000), 10 * MS);
        let receiver = Receiver::new(layout(), 8);
        // Every 50th datagram lost, retransmissions included.
        let (sender, receiver, _) = run(sender, receiver, 5 * MS, |i| i % 50 == 7);
        resends_only_the_losses(&sender, &receiver, layout().blocks() / 50);
    }

    /// At least `dropped` packets were judged lost, and only the lost blocks went again
    /// (and those resent in the tail twice): every copy beyond them a duplicate at the
    /// receiver, none judged lost that arrived.
    fn resends_only_the_losses(sender: &Sender, receiver: &Receiver, dropped: u64) {
        let lost = sender.counters.lost_packets;
        assert!(lost >= dropped, "lost {lost}, dropped {dropped}");
        let copies = sender.counters.tail_copies;
        assert_eq!(sender.counters.retransmitted_packets, lost + copies);
        assert!(
            receiver.counters.duplicate_packets <= copies,
            "no spurious loss: {} duplicates, {copies} tail copies, {lost} judged lost",
            receiver.counters.duplicate_packets
        );
    }

    #[test]
    fn a_resend_in_the_tail_lost_again_needs_no_probe_timeout() {
        let sender = Sender::new(layout(), fixed(100_000_000), 10 * MS);
        let receiver = Receiver::new(layout(), 8);
        let blocks = layout().blocks();
        // A block near the end is lost, and so is its resend: the first datagram after
        // the first pass. Its second copy arrives, so no probe timeout is waited for.
        let (sender, _, _) = run(sender, receiver, 5 * MS, |i| i == blocks - 5 || i == blocks);
        assert_eq!(sender.counters.probe_timeouts, 0);
        assert_eq!(sender.counters.tail_copies, 1);
    }

    #[test]
    fn the_tail_is_recovered_by_the_probe_timeout() {
        let sender = Sender::new(layout(), fixed(100_000_000), 10 * MS);
        let receiver = Receiver::new(layout(), 8);
        let blocks = layout().blocks();
        // The last three datagrams of the first pass are lost: no later packet reveals it.
        let (sender, _, _) = run(sender, receiver, 5 * MS, |i| i >= blocks - 3 && i < blocks);
        assert!(sender.counters.probe_timeouts >= 1);
    }

    /// Runs a sender against a receiver over a path of `lanes` flows (a datagram's lane:
    /// its packet number modulo them) with a one-way delay each (`lane_delay_ns`): the
    /// lanes overtake each other, each keeps its order. The ACKs take `ack_ns`; `lose`
    /// picks the datagrams dropped. Returns both ends and the time when the receiver is
    /// whole.
    fn run_over_lanes(
        mut sender: Sender,
        mut receiver: Receiver,
        (lanes, lane_delay_ns): (u64, &dyn Fn(u64) -> u64),
        ack_ns: u64,
        mut lose: impl FnMut(u64) -> bool,
    ) -> (Sender, Receiver, u64) {
        sender.set_readable(u64::MAX);
        sender.set_window(receiver.window());
        let mut now = 0u64;
        // (arrival, order sent) -> datagram: arrivals in time order, sends in order.
        let mut to_receiver = std::collections::BTreeMap::new();
        let mut to_sender: VecDeque<(u64, Ack)> = VecDeque::new();
        let mut sent_index = 0u64;
        while !receiver.is_complete() {
            assert!(now < 600_000 * MS, "no progress");
            while let Poll::Send(t) = sender.poll_transmit(now) {
                // The path's lanes are its own: a sender told of fewer still crosses them.
                if !lose(sent_index) {
                    let arrival = now + lane_delay_ns(t.pn % lanes);
                    to_receiver.insert((arrival, sent_index), t);
                }
                sent_index += 1;
            }
            while let Some(entry) = to_receiver.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                let t = entry.remove();
                if let DataOutcome::Store {
                    chunk,
                    filled: true,
                    ..
                } = receiver.on_data(now, t.pn, t.offset, t.len as u16)
                {
                    receiver.chunk_checked(chunk, true);
                }
            }
            if let Some(ack) = receiver.poll_ack(now, 0, 1) {
                to_sender.push_back((now + ack_ns, ack));
            }
            while to_sender.front().is_some_and(|(at, _)| *at <= now) {
                let (_, ack) = to_sender.pop_front().unwrap();
                sender.on_ack(now, &ack).unwrap();
            }
            if sender.next_timeout().is_some_and(|t| t <= now) {
                sender.on_timeout(now);
            }
            now += 100_000;
        }
        (sender, receiver, now)
    }

    #[test]
    fn lanes_that_overtake_each_other_are_not_read_as_loss() {
        // Two lanes, the second 0.6 ms slower: at 100 Mbit/s of 1,000-byte blocks its
        // datagrams arrive 7 or so behind the first lane's, past the packet threshold.
        let slower = |lane: u64| 5 * MS + lane * 600_000;
        let path = (2, &slower as &dyn Fn(u64) -> u64);
        let mut sender = Sender::new(layout(), fixed(100_000_000), 10 * MS);
        sender.set_lanes(2);
        let (sender, receiver, _) =
            run_over_lanes(sender, Receiver::new(layout(), 8), path, 5 * MS, |_| false);
        assert_eq!(sender.counters.lost_packets, 0);
        assert_eq!(receiver.counters.duplicate_packets, 0);
        // A sender that judges every packet against all the others reads the overtaking
        // as loss: what the lanes' own thresholds are for.
        let sender = Sender::new(layout(), fixed(100_000_000), 10 * MS);
        let (sender, _, _) =
            run_over_lanes(sender, Receiver::new(layout(), 8), path, 5 * MS, |_| false);
        assert!(
            sender.counters.lost_packets >= 10,
            "{}",
            sender.counters.lost_packets
        );
    }

    #[test]
    fn a_loss_on_one_lane_is_found_by_that_lanes_packets() {
        // Four lanes, every 40th datagram lost (on every lane in turn): each is sent
        // again, nothing else is, and no probe timeout is needed but for the tail.
        let mut sender = Sender::new(layout(), fixed(100_000_000), 10 * MS);
        sender.set_lanes(4);
        let skewed = |lane: u64| 5 * MS + (3 - lane) * 400_000;
        let path = (4, &skewed as &dyn Fn(u64) -> u64);
        let (sender, receiver, _) =
            run_over_lanes(sender, Receiver::new(layout(), 8), path, 5 * MS, |i| {
                i % 40 == 9
            });
        resends_only_the_losses(&sender, &receiver, layout().blocks() / 40);
    }

    #[test]
    fn lanes_far_behind_each_other_are_acknowledged_not_resent() {
        // Sixteen lanes 0 to 6 ms behind the first, in an order that interleaves fast and
        // slow ones: at 1 Gbit/s of 1,000-byte blocks the slowest lane's datagrams arrive
        // some 750 behind the fastest's, and the late lanes leave holes between the
        // early ones', far more than the ranges one ACK carries. A datagram
        // of a late lane must still be acknowledged before its lane's later ones are, or
        // it is judged lost and sent again though it arrived.
        let layout = Layout::fitting(16 << 20, MIN_CHUNK, 1000).unwrap();
        let mut sender = Sender::new(layout, fixed(1_000_000_000), 20 * MS);
        sender.set_lanes(16);
        let staggered = |lane: u64| 5 * MS + (lane * 7 % 16) * 400_000;
        let path = (16, &staggered as &dyn Fn(u64) -> u64);
        let (sender, receiver, _) =
            run_over_lanes(sender, Receiver::new(layout, 64), path, 5 * MS, |i| {
                i % 97 == 11
            });
        resends_only_the_losses(&sender, &receiver, layout.blocks() / 97);
    }

    #[test]
    fn replayed_and_forged_acks_are_refused() {
        let mut sender = Sender::new(layout(), fixed(100_000_000), 10 * MS);
        sender.set_readable(4);
        let mut receiver = Receiver::new(layout(), 8);
        sender.set_window(receiver.window());
        for _ in 0..40 {
            if let Poll::Send(t) = sender.poll_transmit(0) {
                receiver.on_data(0, t.pn, t.offset, t.len as u16);
            }
        }
        let ack = receiver.poll_ack(10 * MS, 0, 1).unwrap();
        sender.on_ack(MS, &ack).unwrap();
        assert_eq!(sender.on_ack(MS, &ack), Err(AckRefusal::Stale));
        let mut forged = ack.clone();
        forged.seq += 1;
        forged.largest = 1_000;
        forged.ranges[0].high = 1_000;
        assert_eq!(sender.on_ack(MS, &forged), Err(AckRefusal::Unsent(1_000)));
    }

    #[test]
    fn flow_control_stops_the_sender_at_the_receivers_window() {
        let mut sender = Sender::new(layout(), fixed(10_000_000_000), 10 * MS);
        sender.set_readable(4);
        let mut receiver = Receiver::new(layout(), 2);
        sender.set_window(receiver.window());
        let mut sent = 0u64;
        let mut now = 0;
        let why = loop {
            match sender.poll_transmit(now) {
                Poll::Send(t) => {
                    assert!(t.offset < 2 * MIN_CHUNK);
                    sent += u64::from(t.len);
                    receiver.on_data(0, t.pn, t.offset, t.len as u16);
                }
                Poll::Wait {
                    why: Blocked::Pacing,
                    until,
                } => now = until.unwrap(),
                Poll::Wait { why, .. } => break why,
            }
            if let Some(ack) = receiver.poll_ack(now, 0, 1) {
                sender.on_ack(now, &ack).unwrap();
            }
        };
        assert_eq!(why, Blocked::Receiver);
        assert_eq!(sent, 2 * MIN_CHUNK);
    }

    #[test]
    fn resumed_chunks_are_never_sent() {
        let mut sender = Sender::new(layout(), fixed(100_000_000), 10 * MS);
        let mut receiver = Receiver::new(layout(), 8);
        sender.mark_present(1);
        sender.mark_present(2);
        receiver.mark_present(1);
        receiver.mark_present(2);
        let (sender, _, _) = run(sender, receiver, MS, |_| false);
        assert_eq!(sender.counters.bytes, 2 * MIN_CHUNK);
    }

    struct Simulated {
        goodput_bps: f64,
        retransmitted: f64,
        /// When the receiver's rate over 100 ms first reached 90 % of the link.
        ramp_ns: Option<u64>,
        /// The packet train's estimate and when it came.
        train: Option<StartEstimate>,
    }

    /// A transfer over a simulated path: a bottleneck of `link_bps` with a drop-tail
    /// queue of `queue_ns`, `loss` random loss before it, `one_way_ns` each way.
    fn simulate(size: u64, link_bps: u64, one_way_ns: u64, loss: f64, queue_ns: u64) -> Simulated {
        simulate_with(
            size,
            link_bps,
            one_way_ns,
            loss,
            queue_ns,
            Twists::default(),
        )
    }

    /// What a simulated transfer meets besides its path.
    struct Twists {
        /// The receiver's ACKs held back for `(at, for)` nanoseconds (a receiving thread
        /// descheduled).
        stall: Option<(u64, u64)>,
        /// The search resumed from what an earlier transfer found.
        resume: Option<PathMemory>,
        /// Whether the receiver times a cold start's packet train (an older receiver
        /// does not), and by how much the estimate its ACKs carry is wrong.
        train_timed: bool,
        train_error: f64,
    }

    impl Default for Twists {
        fn default() -> Twists {
            Twists {
                stall: None,
                resume: None,
                train_timed: true,
                train_error: 1.0,
            }
        }
    }

    impl Simulated {
        /// The run's figures on stderr, for a failing test's reader.
        fn tell(&self, sender: &Sender) {
            eprintln!(
                "goodput {:.0} retransmitted {:.4} ramp {:?} ms, train {:?}, lost {} probes {} congested rounds {}",
                self.goodput_bps,
                self.retransmitted,
                self.ramp_ns.map(|n| n / MS),
                self.train,
                sender.counters.lost_packets,
                sender.counters.probe_timeouts,
                sender.rate().congested_rounds
            );
        }
    }

    /// A simulated window's line under TRACE_SIM: what arrived and the search's state.
    fn trace_window(now: u64, bps: f64, sender: &Sender) {
        eprintln!(
            "{:>6} ms recv {:>5.0} M pacing {:>5} M btl {:>5} M cwnd {:>9} inflight {:>9} {:?} loss {:.3} srtt {}",
            now / MS,
            bps / 1e6,
            sender.rate().pacing_bps() / 1_000_000,
            sender.rate().bottleneck_bps() / 1_000_000,
            sender.rate().cwnd(),
            sender.in_flight(),
            sender.rate().mode(),
            sender.rate().random_loss(),
            sender.srtt_ns() / MS,
        );
    }

    /// As `simulate`, with `twists`: a test's simulated path, step by step, in one place
    /// to read.
    fn simulate_with(
        size: u64,
        link_bps: u64,
        one_way_ns: u64,
        loss: f64,
        queue_ns: u64,
        twists: Twists,
    ) -> Simulated {
        let layout = Layout::new(size, 1 << 20, 1400).unwrap();
        let (max_bps, resume) = (None, twists.resume);
        let mut sender = Sender::new(
            layout,
            RateConfig::Adaptive { max_bps, resume },
            2 * one_way_ns,
        );
        let mut receiver = Receiver::new(layout, 256);
        if let Some(packets) = sender.train_packets().filter(|_| twists.train_timed) {
            receiver.time_train(packets);
        }
        sender.set_readable(u64::MAX);
        sender.set_window(receiver.window());
        let mut link_free = 0u64;
        let mut now = 0u64;
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut to_receiver: VecDeque<(u64, Transmit)> = VecDeque::new();
        let mut to_sender: VecDeque<(u64, Ack)> = VecDeque::new();
        let mut window_bytes = 0u64;
        let mut window_start = 0u64;
        let mut ramp_ns = None;
        while !receiver.is_complete() {
            assert!(now < 120_000 * MS);
            while let Poll::Send(t) = sender.poll_transmit(now) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                if (seed % 1_000_000) as f64 / 1e6 < loss {
                    continue;
                }
                let wire_ns = (u64::from(t.len) + WIRE_OVERHEAD) * 8 * 1_000_000_000 / link_bps;
                let start = link_free.max(now);
                if start > now + queue_ns {
                    continue;
                }
                link_free = start + wire_ns;
                to_receiver.push_back((link_free + one_way_ns, t));
            }
            while to_receiver.front().is_some_and(|(at, _)| *at <= now) {
                let (at, t) = to_receiver.pop_front().unwrap();
                window_bytes += u64::from(t.len) + WIRE_OVERHEAD;
                // The kernel's timestamp: the arrival itself, not this loop's step.
                receiver.on_timed_arrival(t.pn, wire_bytes(t.len), at);
                if let DataOutcome::Store {
                    chunk,
                    filled: true,
                    ..
                } = receiver.on_data(now, t.pn, t.offset, t.len as u16)
                {
                    receiver.chunk_checked(chunk, true);
                }
            }
            if now >= window_start + 100 * MS {
                let bps = window_bytes as f64 * 8.0 / 0.1;
                if std::env::var_os("TRACE_SIM").is_some() {
                    trace_window(now, bps, &sender);
                }
                if ramp_ns.is_none() && bps >= 0.9 * link_bps as f64 {
                    ramp_ns = Some(now);
                }
                window_bytes = 0;
                window_start = now;
            }
            if let Some(mut ack) = receiver.poll_ack(now, 0, 1) {
                ack.train_bps = ack
                    .train_bps
                    .map(|bps| (bps as f64 * twists.train_error) as u64);
                // During a stall the ACKs are made but leave only when it ends.
                let leaves = match twists.stall {
                    Some((at, span)) if now >= at && now < at + span => at + span,
                    _ => now,
                };
                to_sender.push_back((leaves + one_way_ns, ack));
            }
            while to_sender.front().is_some_and(|(at, _)| *at <= now) {
                let (_, ack) = to_sender.pop_front().unwrap();
                sender.on_ack(now, &ack).unwrap();
            }
            if sender.next_timeout().is_some_and(|t| t <= now) {
                sender.on_timeout(now);
            }
            now += 20_000;
        }
        let simulated = Simulated {
            goodput_bps: size as f64 * 8.0 / (now as f64 / 1e9),
            retransmitted: sender.counters.retransmitted_bytes as f64 / size as f64,
            ramp_ns,
            train: sender.train_estimate(),
        };
        simulated.tell(&sender);
        simulated
    }

    #[test]
    fn adaptive_rate_holds_a_lossy_long_path_full() {
        // The lab's case in small: 1 Gbit/s, 100 ms RTT, 1 % random loss, 50 ms queue.
        let run = simulate(256 << 20, 1_000_000_000, 50 * MS, 0.01, 50 * MS);
        // 256 MiB is 2.2 s at the link's rate: the ramp and the tail weigh on it.
        assert!(run.goodput_bps > 0.65e9, "{:.0}", run.goodput_bps);
        assert!(run.retransmitted < 0.04, "{:.4}", run.retransmitted);
        assert!(run.ramp_ns.is_some_and(|ns| ns < 1_500 * MS));
    }

    #[test]
    fn a_stalled_receiver_during_startup_does_not_leave_the_rate_low() {
        // The ACKs stop for 150 ms at 0.5 s (a descheduled receiving thread): the late
        // ACKs that follow look like a queue. The search must still find the bottleneck.
        let run = simulate_with(
            256 << 20,
            1_000_000_000,
            50 * MS,
            0.01,
            50 * MS,
            Twists {
                stall: Some((500 * MS, 150 * MS)),
                ..Twists::default()
            },
        );
        assert!(
            run.ramp_ns.is_some_and(|ns| ns < 3_000 * MS),
            "{:?}",
            run.ramp_ns
        );
        assert!(run.goodput_bps > 0.6e9, "{:.0}", run.goodput_bps);
    }

    /// The lab's case: what a cold transfer over 1 Gbit/s, 100 ms, 1 % ended believing.
    const LAB_MEMORY: PathMemory = PathMemory {
        bottleneck_bps: 1_000_000_000,
        min_rtt_ns: 100 * MS,
    };

    /// A cold start without the train's estimate (an older receiver): the search from
    /// 128 datagrams a round trip.
    fn ramp_only() -> Twists {
        Twists {
            train_timed: false,
            ..Twists::default()
        }
    }

    #[test]
    fn a_search_resumed_from_the_last_transfer_fills_the_path_sooner() {
        let cold = simulate_with(
            256 << 20,
            1_000_000_000,
            50 * MS,
            0.01,
            50 * MS,
            ramp_only(),
        );
        let warm = simulate_with(
            256 << 20,
            1_000_000_000,
            50 * MS,
            0.01,
            50 * MS,
            Twists {
                resume: Some(LAB_MEMORY),
                ..Twists::default()
            },
        );
        let (cold_ramp, warm_ramp) = (cold.ramp_ns.unwrap(), warm.ramp_ns.unwrap());
        assert!(
            warm_ramp + 300 * MS <= cold_ramp,
            "{warm_ramp} against {cold_ramp}"
        );
        assert!(warm.goodput_bps > cold.goodput_bps * 1.1);
        assert!(warm.retransmitted < 0.04, "{:.4}", warm.retransmitted);
        // The same memory over a path that now carries a quarter of it: the jump
        // overshoots for a round trip, then the transfer's own samples take over.
        let slower = simulate_with(
            64 << 20,
            250_000_000,
            50 * MS,
            0.01,
            50 * MS,
            Twists {
                resume: Some(LAB_MEMORY),
                ..Twists::default()
            },
        );
        assert!(
            slower.goodput_bps > 0.6 * 250e6,
            "{:.0}",
            slower.goodput_bps
        );
        assert!(slower.retransmitted < 0.10, "{:.4}", slower.retransmitted);
    }

    /// A cold start with the packet train: the receiver times the first datagrams' arrival
    /// at the bottleneck's spacing, and the search jumps a round trip in, filling the path
    /// within a round trip of a resumed one and long before the ramp alone would.
    #[test]
    fn a_cold_start_times_its_train_and_fills_the_path_as_a_resumed_one_does() {
        let path = |twists| simulate_with(256 << 20, 1_000_000_000, 50 * MS, 0.01, 50 * MS, twists);
        let ramp = path(ramp_only());
        let train = path(Twists::default());
        let warm = path(Twists {
            resume: Some(LAB_MEMORY),
            ..Twists::default()
        });
        let start = train.train.expect("an estimate");
        let (estimate, after) = (start.bps as u64, (start.after_ms * 1e6) as u64);
        assert_eq!(start.jumped_to_bps, Some(start.bps * TRAIN_JUMP_SHARE));
        // The train's rate is the bottleneck's (the simulated receiver timestamps each
        // arrival exactly; one datagram's spacing is 1.2 % of a 64-datagram train).
        assert!(
            (0.97e9..=1.0e9).contains(&(estimate as f64)),
            "estimate {estimate}"
        );
        // A round trip, and the train's own time at the bottleneck.
        assert!((100 * MS..105 * MS).contains(&after), "after {after}");
        let (ramp_at, train_at, warm_at) = (
            ramp.ramp_ns.unwrap(),
            train.ramp_ns.unwrap(),
            warm.ramp_ns.unwrap(),
        );
        assert!(
            train_at + 300 * MS <= ramp_at,
            "{train_at} against {ramp_at}"
        );
        assert!(
            train_at <= warm_at + 150 * MS,
            "{train_at} against {warm_at}"
        );
        assert!(train.goodput_bps > ramp.goodput_bps * 1.05);
        assert!(train.retransmitted < 0.04, "{:.4}", train.retransmitted);
        assert!(warm.train.is_none(), "a resumed search sends no train");
    }

    /// A wrong estimate costs a round trip, not the transfer: a train read four times too
    /// fast (a receiving host that bunched it) over a path that the jump then overloads,
    /// and one read a tenth of the truth, both end near the path's rate and resend little.
    #[test]
    fn a_wrong_train_estimate_costs_a_round_trip() {
        let path = |error| {
            simulate_with(
                64 << 20,
                250_000_000,
                50 * MS,
                0.01,
                50 * MS,
                Twists {
                    train_error: error,
                    ..Twists::default()
                },
            )
        };
        let right = path(1.0);
        for error in [4.0, 0.1] {
            let wrong = path(error);
            assert!(
                wrong.goodput_bps > 0.85 * right.goodput_bps,
                "{error}: {:.0} against {:.0}",
                wrong.goodput_bps,
                right.goodput_bps
            );
            assert!(wrong.retransmitted < 0.10, "{:.4}", wrong.retransmitted);
        }
    }

    #[test]
    fn adaptive_rate_holds_through_five_percent_loss() {
        let run = simulate(128 << 20, 1_000_000_000, 50 * MS, 0.05, 50 * MS);
        assert!(run.goodput_bps > 0.45e9, "{:.0}", run.goodput_bps);
        assert!(run.retransmitted < 0.10, "{:.4}", run.retransmitted);
    }
}
