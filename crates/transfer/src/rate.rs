//! How fast the sender paces (docs/transfer-protocol.md 5).
//!
//! Two modes. `Fixed` paces at the rate the user named (a dedicated circuit). `Adaptive`
//! models the path the way BBR does: the bottleneck rate is the largest delivery rate seen
//! over the last ten round trips, the propagation delay the smallest RTT; the sender paces
//! at a gain times that rate (2.89 while starting up, then a cycle of 1.25, 0.75 until the
//! queue is drained, and six rounds of 1) and keeps at most twice the bandwidth-delay
//! product in flight.
//!
//! Loss is not taken as congestion by itself. In a round where some RTT sample came back
//! near the propagation delay, the bottleneck queue was empty at some moment, so that
//! round's losses were not ours to cause: they feed an estimate of the path's random loss,
//! and the pacing rate is raised by 1 / (1 - loss) so the bytes that arrive still fill the
//! bottleneck. A round whose every sample saw a standing queue and that lost clearly more
//! than the path's own loss (over twice it, and half a percent more) is congestion: the
//! rate estimate is cut to what the round delivered, less a tenth, and the loss estimate
//! halves, so a full queue never passes for random loss.
//!
//! A search may begin from what an earlier transfer over the same path learned (its
//! [`PathMemory`]), as the IETF's Careful Resume (draft-ietf-tsvwg-careful-resume) lets a
//! sender do: only when the path's round trip now is within a factor of two of the one
//! remembered, it paces its first round trip at half the remembered rate instead of
//! startup's 128 packets, and its own delivery samples decide the rate from the first
//! one on. Losses that answer the jump are taken as congestion (the safe retreat): a
//! path slower than remembered is cut to what it delivered, and the jump's overshoot
//! never passes for the path's random loss.
//!
//! A search with nothing remembered (or a path whose delay changed) starts from a packet
//! train instead (`train.rs`): its first datagrams go back to back, the receiver times
//! their spacing at the bottleneck and its ACKs carry the rate, and the search jumps to a
//! share of that rate a round trip after it began, under the same rules as a resumed
//! jump: held without gain until what it sent is acknowledged, its losses congestion.

/// What a transfer learned of its path: the bottleneck rate (in the pacer's bytes) and the
/// propagation delay, kept for the next transfer over the same path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PathMemory {
    pub bottleneck_bps: u64,
    pub min_rtt_ns: u64,
}

impl PathMemory {
    /// What a finished transfer's figures say of its path, when they say enough.
    pub fn of(bottleneck_bps: Option<f64>, min_rtt_ms: Option<f64>) -> Option<PathMemory> {
        let bottleneck_bps = bottleneck_bps.filter(|b| b.is_finite() && *b >= 1e6)? as u64;
        let min_rtt_ns = (min_rtt_ms.filter(|r| r.is_finite() && *r > 0.0)? * 1e6) as u64;
        Some(PathMemory {
            bottleneck_bps,
            min_rtt_ns,
        })
    }
}

/// The user's choice of rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RateConfig {
    /// Pace at this many bits per second, whatever happens.
    Fixed { bps: u64 },
    /// Find the rate; never above `max_bps` when given; from `resume` when an earlier
    /// transfer over this path left one (and the path's delay still matches it).
    Adaptive {
        max_bps: Option<u64>,
        resume: Option<PathMemory>,
    },
}

/// Startup's gain, 2 / ln 2: the rate doubles every round trip.
const STARTUP_GAIN: f64 = 2.885;
/// The gain of a startup begun again after a probe was delivered in full.
const RESTART_GAIN: f64 = 1.5;
/// The probing cycle's gains, one phase per propagation delay.
const CYCLE: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
/// The cycle's phase that drains the queue its probe made.
const DRAIN_PHASE: usize = 1;
/// The cycle's probing phase, and the longest it lasts: at its gain of 1.25 it adds a
/// quarter of its length to the bottleneck's queue, so a round trip's probe over a 200 ms
/// path adds 50 ms, a lab's default queue whole (its overflow is resent bytes); capped,
/// it adds at most 25 ms on any path, and a path up to 100 ms probes as before. The
/// draining phase is as long (at 0.75 it takes away what the probe added): a round trip's
/// drain after a capped probe left the path idle for the difference, 25 ms a cycle over
/// 200 ms (1.7 % of a copy's time).
const PROBE_PHASE: usize = 0;
const MAX_PROBE_NS: u64 = 100_000_000;
/// Round trips the bottleneck-rate filter remembers.
const BW_WINDOW_ROUNDS: u64 = 10;
/// RTT samples in a row that must show a queue to end startup.
const STARTUP_QUEUED_SAMPLES: u32 = 16;
/// A round with more than this share lost ends startup: the queue overflowed.
const STARTUP_LOSS_EXIT: f64 = 0.2;
/// The random loss compensated for at most: past it, loss is too high to be noise.
const MAX_LOSS_COMPENSATION: f64 = 0.25;
/// Packets the window holds beyond twice the bandwidth-delay product (ACK aggregation,
/// the receiver's ACK delay).
const CWND_SLACK_PACKETS: u64 = 64;
/// The share of a packet train's estimate a cold search jumps to. The train measures the
/// bottleneck's rate, not what other flows leave of it: half, as Careful Resume jumps to
/// half what it remembered, overloads a bottleneck that another flow fills by half for
/// the round trip the jump stands, and still fills an idle one from the next.
pub const TRAIN_JUMP_SHARE: f64 = 0.5;
/// A cold startup paces at most a tenth above its packet train's estimate: over a path
/// the train read right, a queue of a tenth of the path's delay a round builds (startup
/// leaves on it before a 50 ms queue overflows at 200 ms); over a path the train read
/// low, the samples pass the estimate by more than [`TRAIN_LIFT`] and the hold lifts.
const TRAIN_CEILING: f64 = 1.1;
const TRAIN_LIFT: f64 = 1.05;
/// The loss in a round of a jump that saw the queue empty above which the round is still
/// taken as the jump's overshoot.
const JUMP_EMPTY_QUEUE_LOSS: f64 = 0.05;
/// Rounds a resumed search's jump stands: the first ends at the first ACK, the second
/// when what was sent after it is acknowledged, so the jump's own data and the round
/// paced at it have answered. Their losses are the jump's.
const JUMP_ROUNDS: u64 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Fixed,
    Startup,
    Drain,
    ProbeBw,
}

/// One ACK's news for the rate control.
#[derive(Debug, Clone, Copy, Default)]
pub struct AckEvent {
    pub now_ns: u64,
    /// Bytes newly acknowledged, counted as the pacer counts them (payload and headers),
    /// like the bytes [`RateControl::on_loss`] is given.
    pub acked: u64,
    /// A delivery rate, bits per second of the same bytes, from the newest packet
    /// acknowledged: the pacing rate's unit, so a cruise at gain 1 fills the bottleneck.
    pub delivery_bps: Option<u64>,
    /// Whether that sample was taken while the sender had nothing to send (it may be
    /// lower than the path allows).
    pub app_limited: bool,
    /// An RTT sample, nanoseconds.
    pub rtt_ns: Option<u64>,
    /// This ACK ended a round trip.
    pub round_end: bool,
    /// Bytes in flight after the ACK.
    pub in_flight: u64,
    /// Data datagrams newly reported CE-marked (`--ecn`): a queue on the path is building
    /// (an AQM marks instead of dropping).
    pub ce_marked: u64,
}

#[derive(Debug, Clone)]
pub struct RateControl {
    config: RateConfig,
    mode: Mode,
    packet: u64,
    /// (round, bits per second): each round's largest sample, for the max filter.
    bw_samples: Vec<(u64, u64)>,
    btl_bw: u64,
    min_rtt_ns: u64,
    initial_bps: u64,
    round: u64,
    full_bw: u64,
    full_bw_rounds: u32,
    phase: usize,
    phase_start_ns: u64,
    // This round's tallies.
    round_acked: u64,
    round_lost: u64,
    /// Datagrams this round that arrived CE-marked.
    round_ce: u64,
    round_min_rtt_ns: u64,
    round_start_ns: u64,
    /// The path's random loss, smoothed over rounds.
    random_loss: f64,
    /// RTT samples in a row that saw a queue (startup).
    queued_samples: u32,
    /// This round had samples taken while the sender had nothing to send.
    round_app_limited: bool,
    /// The bottleneck estimate at the end of the last round.
    previous_btl_bw: u64,
    /// The bottleneck estimate when startup last ended, and the round it ended in.
    exit_btl_bw: u64,
    exit_round: u64,
    /// When the current startup began (0, or the last restart).
    startup_began_ns: u64,
    /// Times the search started again after leaving startup too early.
    pub restarts: u64,
    /// Rounds judged congested (for the diagnosis).
    pub congested_rounds: u64,
    /// Of them, rounds judged so by CE marks alone (`--ecn`).
    pub ce_rounds: u64,
    /// A jump (half the remembered rate, or a share of a packet train's estimate) while it
    /// stands or was taken, bits per second; 0 without one.
    jump_bps: u64,
    /// The rate a resumed search began from (half the remembered one); 0 without one.
    resumed_bps: u64,
    /// A cold search's packet-train estimate of the path, bits per second; 0 without one.
    train_bps: u64,
    /// The last round whose losses are taken as the jump's (0: no jump, or one already
    /// retreated from).
    jump_until_round: u64,
}

impl RateControl {
    /// `packet` is the datagram payload size; `initial_rtt_ns` the control connection's
    /// handshake time, the first guess of the path's delay.
    pub fn new(config: RateConfig, packet: u64, initial_rtt_ns: u64) -> RateControl {
        let initial_rtt_ns = initial_rtt_ns.clamp(100_000, 1_000_000_000);
        // 128 packets a round trip to begin with (startup's gain on top), never below
        // 10 Mbit/s.
        let cold_bps = (128 * packet * 8 * 1_000_000_000 / initial_rtt_ns).max(10_000_000);
        let mode = match config {
            RateConfig::Fixed { .. } => Mode::Fixed,
            RateConfig::Adaptive { .. } => Mode::Startup,
        };
        let jump_bps = match config {
            RateConfig::Adaptive {
                resume: Some(memory),
                ..
            } if Self::same_path(memory, initial_rtt_ns) => memory.bottleneck_bps / 2,
            _ => 0,
        };
        // A jump paces at it, without startup's gain, until what it sent is acknowledged
        // (Careful Resume's unvalidated phase).
        let initial_bps = if jump_bps > 0 { jump_bps } else { cold_bps };
        RateControl {
            config,
            mode,
            packet,
            bw_samples: Vec::new(),
            btl_bw: 0,
            min_rtt_ns: u64::MAX,
            initial_bps,
            round: 0,
            full_bw: 0,
            full_bw_rounds: 0,
            phase: 0,
            phase_start_ns: 0,
            round_acked: 0,
            round_lost: 0,
            round_ce: 0,
            round_min_rtt_ns: u64::MAX,
            round_start_ns: 0,
            random_loss: 0.0,
            queued_samples: 0,
            round_app_limited: false,
            previous_btl_bw: 0,
            exit_btl_bw: 0,
            exit_round: 0,
            startup_began_ns: 0,
            restarts: 0,
            congested_rounds: 0,
            ce_rounds: 0,
            jump_bps,
            resumed_bps: jump_bps,
            train_bps: 0,
            jump_until_round: if jump_bps > 0 { JUMP_ROUNDS } else { 0 },
        }
    }

    /// Whether a transfer under `config` begins with a packet train (of this many
    /// datagrams of `wire_bytes`): an adaptive search that has no remembered rate to
    /// resume from, or whose path's delay changed.
    pub fn starts_with_train(
        config: RateConfig,
        initial_rtt_ns: u64,
        wire_bytes: u64,
    ) -> Option<u32> {
        let initial_rtt_ns = initial_rtt_ns.clamp(100_000, 1_000_000_000);
        match config {
            RateConfig::Adaptive { resume, .. }
                if resume.is_none_or(|memory| !Self::same_path(memory, initial_rtt_ns)) =>
            {
                Some(crate::train::train_packets(wire_bytes))
            }
            _ => None,
        }
    }

    /// The receiver's estimate of the path's rate from the packet train (bits per second
    /// of wire bytes): a cold search in its first startup jumps to [`TRAIN_JUMP_SHARE`] of
    /// it, as a resumed one jumps to half what it remembered, when that is above what it
    /// paces at now. Taken once; true when it jumped.
    pub fn on_train_estimate(&mut self, bps: u64) -> bool {
        if self.mode != Mode::Startup || self.train_bps > 0 || self.jump_bps > 0 {
            return false;
        }
        let bps = bps.min(crate::train::MAX_ESTIMATE_BPS);
        self.train_bps = bps;
        let jump = (bps as f64 * TRAIN_JUMP_SHARE) as u64;
        if self.restarts > 0 || jump <= self.base_bps() {
            return false;
        }
        self.jump_bps = jump;
        // The round in progress ends at the ACK of the first datagram paced at the jump:
        // from then on the ACKs say what the path delivers of it, and startup's gain
        // applies to that (a resumed jump waits a round more: what it remembered may be
        // old; the train measured this path a round trip ago). Its losses are judged as
        // the jump's for a round more.
        self.jump_until_round = self.round + 1;
        true
    }

    /// What a cold search jumped to on its packet train's estimate, when it did.
    pub fn train_jump_bps(&self) -> Option<u64> {
        (self.train_bps > 0 && self.jump_bps > 0).then_some(self.jump_bps)
    }

    /// A cold search's packet-train estimate, when one came.
    pub fn train_bps(&self) -> Option<u64> {
        (self.train_bps > 0).then_some(self.train_bps)
    }

    /// Careful Resume's check: a round trip now within a factor of two of the one
    /// remembered. A path that changed its delay is likely another path; its rate is
    /// searched afresh.
    fn same_path(memory: PathMemory, rtt_now_ns: u64) -> bool {
        memory.min_rtt_ns > 0
            && rtt_now_ns >= memory.min_rtt_ns / 2
            && rtt_now_ns <= memory.min_rtt_ns.saturating_mul(2)
    }

    /// A jump not yet validated by the ACKs of what it sent, nor retreated from.
    fn jump_stands(&self) -> bool {
        self.round < self.jump_until_round
    }

    /// This round's losses are taken as a jump's: it stands, or this is the round after,
    /// whose ACKs are the first of what was paced at it.
    fn judged_as_the_jumps(&self) -> bool {
        self.jump_until_round > 0 && self.round <= self.jump_until_round
    }

    /// The rate a resumed search jumped to (half the remembered one), when it did.
    pub fn resumed_bps(&self) -> Option<u64> {
        (self.resumed_bps > 0).then_some(self.resumed_bps)
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The bottleneck rate the model believes in, bits per second (0 before a sample).
    pub fn bottleneck_bps(&self) -> u64 {
        self.btl_bw
    }

    /// The random loss the model compensates for.
    pub fn random_loss(&self) -> f64 {
        self.random_loss
    }

    fn gain(&self) -> f64 {
        match self.mode {
            Mode::Fixed => 1.0,
            // A queue seen but not yet confirmed: hold the rate instead of doubling it.
            Mode::Startup if self.queued_samples > 0 => 1.0,
            // A jump's first round paces at the jump itself (Careful Resume's unvalidated
            // phase): nothing of this path has been seen yet.
            Mode::Startup if self.jump_stands() => 1.0,
            // A search started again is near the bottleneck already: grow by half a round
            // trip's worth, not double, so that it overshoots less into the queue.
            Mode::Startup if self.restarts > 0 => RESTART_GAIN,
            Mode::Startup => STARTUP_GAIN,
            Mode::Drain => 1.0 / STARTUP_GAIN,
            Mode::ProbeBw => CYCLE[self.phase],
        }
    }

    fn cap(&self, bps: f64) -> u64 {
        let bps = bps.max(1_000_000.0) as u64;
        match self.config {
            RateConfig::Fixed { bps } => bps,
            RateConfig::Adaptive {
                max_bps: Some(max), ..
            } => bps.min(max),
            RateConfig::Adaptive { max_bps: None, .. } => bps,
        }
    }

    /// The rate the gains multiply: the model's bottleneck, never below a jump that
    /// stands nor in the round after it, whose losses are still the jump's (the samples
    /// read low for a round trip more: each spans the ACKs of what went before the jump;
    /// taken as they read, they cut the window below what the jump has in flight and
    /// held a cold copy over 200 ms at half its pace a round longer), and the first guess
    /// before any sample.
    fn base_bps(&self) -> u64 {
        let floor = if self.judged_as_the_jumps() {
            self.jump_bps
        } else {
            0
        };
        if self.btl_bw == 0 {
            self.initial_bps.max(floor)
        } else {
            self.btl_bw.max(floor)
        }
    }

    /// The pacing rate now, bits per second.
    pub fn pacing_bps(&self) -> u64 {
        if let RateConfig::Fixed { bps } = self.config {
            return bps;
        }
        let base = self.base_bps();
        let compensation = 1.0 / (1.0 - self.random_loss.min(MAX_LOSS_COMPENSATION));
        self.cap(self.startup_ceiling(base as f64 * self.gain()) * compensation)
    }

    /// A cold search's first startup climbs to its packet train's estimate of the
    /// bottleneck and a tenth past it, no further: the train timed the bottleneck itself,
    /// so a doubling past it only fills the queue, and over a long path the round trip
    /// before the queue shows (sixteen samples) overflows it (a 200 ms path at 1 Gbit/s
    /// lost 1.3 % of a copy to it, beside the path's own 1 %). Samples past the estimate
    /// by [`TRAIN_LIFT`] (the train read low) lift the hold; a restarted search is never
    /// held, and probing after startup is the cycle's.
    fn startup_ceiling(&self, bps: f64) -> f64 {
        let held = self.mode == Mode::Startup
            && self.restarts == 0
            && self.train_bps > 0
            && (self.btl_bw as f64) < self.train_bps as f64 * TRAIN_LIFT;
        if held {
            bps.min(self.train_bps as f64 * TRAIN_CEILING)
        } else {
            bps
        }
    }

    /// The most bytes in flight allowed now: twice the bandwidth-delay product at the
    /// modelled bottleneck (raised for the random loss the pacing makes up for).
    pub fn cwnd(&self) -> u64 {
        if self.mode == Mode::Fixed || self.min_rtt_ns == u64::MAX {
            // A fixed rate is held by pacing alone, and before the first RTT sample there
            // is no delay to multiply by: flow control bounds what is in flight.
            return u64::MAX;
        }
        let base = self.base_bps();
        let compensation = 1.0 / (1.0 - self.random_loss.min(MAX_LOSS_COMPENSATION));
        let rtt = self.min_rtt_ns.max(1_000_000);
        let bdp = (base as u128 * rtt as u128 / 8_000_000_000) as f64 * compensation;
        (2.0 * bdp) as u64 + CWND_SLACK_PACKETS * self.packet
    }

    /// Bytes declared lost.
    pub fn on_loss(&mut self, bytes: u64) {
        self.round_lost += bytes;
    }

    pub fn on_ack(&mut self, event: &AckEvent) {
        if self.mode == Mode::Fixed {
            return;
        }
        self.round_acked += event.acked;
        self.round_ce += event.ce_marked;
        if let Some(rtt) = event.rtt_ns {
            self.min_rtt_ns = self.min_rtt_ns.min(rtt);
            self.round_min_rtt_ns = self.round_min_rtt_ns.min(rtt);
        }
        if event.app_limited {
            self.round_app_limited = true;
        }
        if let Some(bps) = event.delivery_bps {
            if !event.app_limited || bps > self.btl_bw {
                // One entry per round, its largest sample: the filter holds ten entries,
                // not every ACK's.
                match self.bw_samples.last_mut() {
                    Some((round, best)) if *round == self.round => *best = (*best).max(bps),
                    _ => self.bw_samples.push((self.round, bps)),
                }
                self.btl_bw = self.btl_bw.max(bps);
            }
        }
        if event.round_end {
            self.end_round(event.now_ns);
        }
        // Startup ends as soon as the samples show a queue of an eighth of the path's delay
        // (and at least 2 ms) sixteen ACKs in a row: waiting for the round to end would
        // overflow a shallow bottleneck queue by up to a bandwidth-delay product, and one
        // late sample (a descheduled receiver) must not end it early.
        if self.mode == Mode::Startup && self.btl_bw > 0 {
            // A packet sent before this search began says nothing of it: after a restart,
            // the late ACKs of the stall that ended the last search would end this one.
            let sample = event
                .rtt_ns
                .filter(|&rtt| event.now_ns.saturating_sub(rtt) >= self.startup_began_ns);
            if let Some(rtt) = sample {
                let queued = rtt
                    > self
                        .min_rtt_ns
                        .saturating_add((self.min_rtt_ns / 8).max(2_000_000));
                self.queued_samples = if queued { self.queued_samples + 1 } else { 0 };
                if self.queued_samples >= STARTUP_QUEUED_SAMPLES {
                    self.leave_startup();
                }
            }
        }
        match self.mode {
            Mode::Drain if event.in_flight <= self.bdp() => {
                self.mode = Mode::ProbeBw;
                // Start the cycle on a cruising phase: draining just emptied the queue.
                self.phase = 2;
                self.phase_start_ns = event.now_ns;
            }
            Mode::ProbeBw => {
                let phase_len = self.min_rtt_ns.clamp(1_000_000, 1_000_000_000);
                let phase_len = if self.phase == PROBE_PHASE || self.phase == DRAIN_PHASE {
                    phase_len.min(MAX_PROBE_NS)
                } else {
                    phase_len
                };
                let elapsed = event.now_ns.saturating_sub(self.phase_start_ns);
                // The draining phase lasts until what is in flight fits the path without a
                // queue (at most four of its lengths): a queue left standing fills with
                // the next probe and overflows, and its losses are resent bytes.
                let drained = self.phase != DRAIN_PHASE
                    || event.in_flight <= self.bdp()
                    || elapsed >= 4 * phase_len;
                if elapsed >= phase_len && drained {
                    self.phase = (self.phase + 1) % CYCLE.len();
                    self.phase_start_ns = event.now_ns;
                }
            }
            _ => {}
        }
    }

    fn end_round(&mut self, now_ns: u64) {
        self.round += 1;
        let sent = self.round_acked + self.round_lost;
        let loss = if sent == 0 {
            0.0
        } else {
            self.round_lost as f64 / sent as f64
        };
        // A CE mark is never the path's own randomness: an AQM (RFC 3168, 8289) marked
        // because its queue stood above its target, however short that queue is against
        // the path's delay. One cut a round, as for loss.
        let marked = self.round_ce > 0;
        self.judge_round(now_ns, sent, loss, marked);
        // Forget samples older than the window.
        let oldest = self.round.saturating_sub(BW_WINDOW_ROUNDS);
        self.bw_samples.retain(|&(round, _)| round >= oldest);
        if !self.bw_samples.is_empty() {
            self.btl_bw = self
                .bw_samples
                .iter()
                .map(|&(_, bps)| bps)
                .max()
                .unwrap_or(0);
        }
        // A probe delivered in full (the estimate grew by a fifth in one round, or since
        // startup ended: what a stall held back arrives over more than one round) means
        // the pipe was far from full: startup ended too early (a stalled receiver's late
        // ACKs look like a queue), so the search starts again.
        // The first two rounds after startup are not judged: what startup had in flight
        // when it ended is still being delivered, and the filter still climbing to it
        // (a start that jumped leaves startup on a queue within a round of the path's
        // rate) is no probe. Judged, it began the search again at once, and that restart's
        // overshoot cost a 200 ms path 6,000 datagrams.
        let grew = |base: u64| base > 0 && self.btl_bw as f64 >= base as f64 * 1.2;
        if self.mode == Mode::ProbeBw
            && self.round > self.exit_round + 2
            && !self.round_app_limited
            && (grew(self.previous_btl_bw) || grew(self.exit_btl_bw))
        {
            self.mode = Mode::Startup;
            self.startup_began_ns = now_ns;
            self.full_bw = self.btl_bw;
            self.full_bw_rounds = 0;
            self.queued_samples = 0;
            self.restarts += 1;
        }
        self.previous_btl_bw = self.btl_bw;
        // A round in which the sender ran out of data (its disk, the receiver's window)
        // says nothing of the path: it neither ends startup nor counts towards it.
        if self.mode == Mode::Startup && !self.round_app_limited {
            if self.btl_bw as f64 >= self.full_bw as f64 * 1.25 {
                self.full_bw = self.btl_bw;
                self.full_bw_rounds = 0;
            } else {
                self.full_bw_rounds += 1;
            }
            // A queue that stayed all round (every RTT sample above the propagation delay
            // by a quarter) means the pipe is full: leave before it overflows.
            let standing_queue = self.round_min_rtt_ns != u64::MAX
                && self.round_min_rtt_ns
                    > self
                        .min_rtt_ns
                        .saturating_add(self.min_rtt_ns / 4 + 2_000_000);
            if self.full_bw_rounds >= 3
                || (loss > STARTUP_LOSS_EXIT && self.btl_bw > 0)
                || (standing_queue && self.btl_bw > 0)
                || (marked && self.btl_bw > 0)
            {
                self.leave_startup();
            }
        }
        self.round_acked = 0;
        self.round_lost = 0;
        self.round_ce = 0;
        self.round_app_limited = false;
        self.round_start_ns = now_ns;
        self.round_min_rtt_ns = u64::MAX;
    }

    /// The path's bandwidth-delay product by the model, bytes: what is in flight when the
    /// bottleneck is busy and its queue empty.
    fn bdp(&self) -> u64 {
        (self.btl_bw as u128 * self.min_rtt_ns.min(10_000_000_000) as u128 / 8_000_000_000) as u64
    }

    /// Takes the round that just ended as congested (a cut to what it delivered, less a
    /// tenth) or as the path's own loss (the random-loss estimate follows it).
    fn judge_round(&mut self, now_ns: u64, sent: u64, loss: f64, marked: bool) {
        // An RTT within an eighth (and a millisecond) of the propagation delay: the queue
        // drained at some point in this round.
        let queue_seen_empty = self.round_min_rtt_ns
            <= self
                .min_rtt_ns
                .saturating_add(self.min_rtt_ns / 8 + 1_000_000);
        // Congestion: a standing queue all round, and a loss clearly above the path's own
        // (twice it and half a percent more). A queue without such loss is left to the
        // probing cycle's drain phase; loss without a queue is the path's. While a jump
        // stands, its losses are taken as congestion whatever the queue showed (Careful
        // Resume's safe retreat): the jump overshot a path slower than remembered, and
        // its losses must not pass for the path's own.
        // A jump's round that saw the queue empty is congested only by a loss no random
        // path has: a jump above the path's rate into a queue too short to show as delay
        // loses what it sent too fast (a tenth or more), while a lossy path's own 1 % cut
        // the jump to its first round's delivery and cost a 200 ms path a round trip.
        // The first round's rate is a guess too (the first guess, or a jump).
        let jumping = self.round == 0 || self.judged_as_the_jumps();
        let lossy = self.round_lost > 0
            && (!queue_seen_empty || (jumping && loss > JUMP_EMPTY_QUEUE_LOSS))
            && loss > 2.0 * self.random_loss + 0.005;
        if sent == 0 {
            return;
        }
        if lossy || marked {
            self.congested_rounds += 1;
            if !lossy {
                self.ce_rounds += 1;
            }
            self.random_loss *= 0.5;
            let round_bps = self.round_delivery_cut(now_ns);
            self.bw_samples.clear();
            self.bw_samples.push((self.round, round_bps));
            self.btl_bw = round_bps;
            self.jump_until_round = 0;
        } else if sent >= 16 * self.packet {
            self.random_loss += (loss - self.random_loss) / 8.0;
        }
    }

    fn leave_startup(&mut self) {
        self.mode = Mode::Drain;
        self.exit_btl_bw = self.btl_bw;
        self.exit_round = self.round;
    }

    /// A congested round's rate: what it delivered (never above the filter), less a tenth.
    fn round_delivery_cut(&self, now_ns: u64) -> u64 {
        let elapsed = now_ns.saturating_sub(self.round_start_ns).max(1);
        let delivered = (self.round_acked as u128 * 8_000_000_000 / elapsed as u128) as u64;
        (delivered.min(self.btl_bw) as f64 * 0.9) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PACKET: u64 = 1400;

    fn adaptive() -> RateConfig {
        RateConfig::Adaptive {
            max_bps: None,
            resume: None,
        }
    }

    fn ack(now_ns: u64, bps: u64, rtt_ns: u64, round_end: bool) -> AckEvent {
        AckEvent {
            now_ns,
            acked: 100 * PACKET,
            delivery_bps: Some(bps),
            app_limited: false,
            rtt_ns: Some(rtt_ns),
            round_end,
            in_flight: 0,
            ce_marked: 0,
        }
    }

    /// A CE mark cuts the rate in a round whose queue, a few milliseconds, is no
    /// standing queue by the delay's measure (an AQM holds it short), where the same
    /// round without marks is left alone; and it ends startup.
    #[test]
    fn ce_marks_cut_the_rate_where_the_queue_is_short() {
        let mut rate = RateControl::new(adaptive(), PACKET, 100_000_000);
        let mut now = 0;
        for _ in 0..30 {
            now += 100_000_000;
            rate.on_ack(&ack(now, 1_000_000_000, 100_000_000, true));
        }
        assert_eq!(rate.mode(), Mode::ProbeBw);
        let before = rate.bottleneck_bps();
        // RTTs 5 ms above the propagation delay (CoDel's target), unmarked: no cut.
        for _ in 0..3 {
            now += 105_000_000;
            rate.on_ack(&ack(now, 1_000_000_000, 105_000_000, true));
        }
        assert_eq!(rate.congested_rounds, 0);
        // The same rounds, two datagrams of each marked CE: a cut a round.
        for _ in 0..3 {
            now += 105_000_000;
            rate.on_ack(&AckEvent {
                ce_marked: 2,
                ..ack(now, 1_000_000_000, 105_000_000, true)
            });
        }
        assert_eq!((rate.congested_rounds, rate.ce_rounds), (3, 3));
        assert!(rate.bottleneck_bps() < before, "{}", rate.bottleneck_bps());
        assert_eq!(rate.random_loss(), 0.0);
        // In startup, a round with a mark ends it.
        let mut rate = RateControl::new(adaptive(), PACKET, 100_000_000);
        rate.on_ack(&ack(100_000_000, 20_000_000, 100_000_000, true));
        assert_eq!(rate.mode(), Mode::Startup);
        rate.on_ack(&AckEvent {
            ce_marked: 1,
            ..ack(200_000_000, 40_000_000, 100_000_000, true)
        });
        assert_ne!(rate.mode(), Mode::Startup);
    }

    /// A cold start's startup climbs to its packet train's estimate and holds there (a
    /// path of 1 Gbit/s that the train read as such: paced at it, never doubled past it),
    /// then leaves startup once the samples stop growing; samples above the estimate (a
    /// train that read low) lift the ceiling.
    #[test]
    fn a_cold_startup_climbs_to_the_trains_estimate_and_no_further() {
        let mut rate = RateControl::new(adaptive(), PACKET, 200_000_000);
        let mut now = 0;
        rate.on_ack(&ack(now + 1, 20_000_000, 200_000_000, false));
        assert!(rate.on_train_estimate(1_000_000_000));
        let mut most = 0;
        let mut delivered = 20_000_000u64;
        for _ in 0..8 {
            now += 200_000_000;
            rate.on_ack(&ack(now, delivered, 200_000_000, true));
            let paced = rate.pacing_bps();
            if rate.mode() == Mode::Startup {
                most = most.max(paced);
            }
            delivered = paced.min(1_000_000_000);
        }
        assert!(most <= 1_100_000_000, "startup paced at {most}");
        assert!(most >= 1_000_000_000, "startup reached only {most}");
        assert_ne!(
            rate.mode(),
            Mode::Startup,
            "left startup once the rate stopped growing"
        );
        // A train that read half the path: samples past it lift the ceiling.
        let mut rate = RateControl::new(adaptive(), PACKET, 200_000_000);
        rate.on_ack(&ack(1, 20_000_000, 200_000_000, false));
        rate.on_train_estimate(400_000_000);
        for (i, bps) in [200_000_000u64, 430_000_000].into_iter().enumerate() {
            rate.on_ack(&ack((i as u64 + 1) * 200_000_000, bps, 200_000_000, true));
        }
        assert_eq!(rate.mode(), Mode::Startup);
        assert!(rate.pacing_bps() > 1_000_000_000, "{}", rate.pacing_bps());
    }

    /// The round after a train's jump: its samples still span the ACKs of what went
    /// before the jump and read low, yet the window holds what the jump has in flight and
    /// startup climbs from the jump, not from them; a loss that round is still the jump's
    /// and takes the floor away.
    #[test]
    fn the_round_after_a_trains_jump_climbs_from_the_jump_not_from_its_late_samples() {
        let rtt = 200_000_000;
        let jumped = || {
            let mut rate = RateControl::new(adaptive(), PACKET, rtt);
            rate.on_ack(&ack(1, 20_000_000, rtt, false));
            assert!(rate.on_train_estimate(1_000_000_000));
            // The round of the jump ends at the ACK of the first datagram paced at it.
            rate.on_ack(&ack(rtt, 20_000_000, rtt, true));
            // Startup's gain on the jump (1.44 Gbit/s), held at the train's ceiling.
            assert_eq!(rate.pacing_bps(), 1_100_000_000);
            rate
        };
        let mut rate = jumped();
        rate.on_ack(&ack(rtt + 50_000_000, 60_000_000, rtt, false));
        assert_eq!(
            rate.pacing_bps(),
            1_100_000_000,
            "held at the train's ceiling"
        );
        assert!(
            rate.cwnd() >= 2 * 500_000_000 / 8 * rtt / 1_000_000_000,
            "the window of the jump's pace: {}",
            rate.cwnd()
        );
        // Half of that round lost, the queue standing: the jump was wrong.
        let mut rate = jumped();
        for _ in 0..100 {
            rate.on_loss(PACKET);
        }
        rate.on_ack(&AckEvent {
            acked: 100 * PACKET,
            ..ack(2 * rtt, 60_000_000, rtt + 60_000_000, true)
        });
        assert!(
            rate.pacing_bps() < 500_000_000,
            "retreated: {}",
            rate.pacing_bps()
        );
    }

    #[test]
    fn fixed_rate_ignores_everything() {
        let mut rate = RateControl::new(RateConfig::Fixed { bps: 500_000_000 }, PACKET, 1);
        rate.on_loss(1 << 20);
        rate.on_ack(&ack(1, 1, 1, true));
        assert_eq!(rate.pacing_bps(), 500_000_000);
        assert_eq!(rate.cwnd(), u64::MAX);
    }

    #[test]
    fn startup_ends_when_the_rate_stops_growing_and_cruises_at_the_bottleneck() {
        let mut rate = RateControl::new(adaptive(), PACKET, 100_000_000);
        let mut now = 0;
        let mut bps = 10_000_000u64;
        for _ in 0..20 {
            now += 100_000_000;
            bps = (bps * 2).min(1_000_000_000);
            rate.on_ack(&ack(now, bps, 100_000_000, true));
        }
        assert_eq!(rate.mode(), Mode::ProbeBw);
        assert_eq!(rate.bottleneck_bps(), 1_000_000_000);
        // A cruising phase paces at the bottleneck rate; the cycle averages to it.
        let mut paced = 0.0;
        for _ in 0..8 {
            now += 100_000_000;
            rate.on_ack(&ack(now, 1_000_000_000, 100_000_000, true));
            paced += rate.pacing_bps() as f64;
        }
        let mean = paced / 8.0;
        assert!((mean - 1e9).abs() < 0.05e9, "mean pacing {mean}");
    }

    /// Over a 200 ms path the probe and the drain that follows it last 100 ms each (the
    /// probe's cap): the cycle paces at the bottleneck on average over time, neither
    /// leaving the path idle (a round trip's drain after a capped probe) nor queueing.
    #[test]
    fn a_long_paths_cycle_drains_what_its_probe_added_and_no_more() {
        let rtt = 200_000_000;
        let mut rate = RateControl::new(adaptive(), PACKET, rtt);
        let mut now = 0;
        for _ in 0..30 {
            now += rtt;
            rate.on_ack(&ack(now, 1_000_000_000, rtt, true));
        }
        assert_eq!(rate.mode(), Mode::ProbeBw);
        // Every millisecond an ACK, what is in flight the path's own: 25 MB at 1 Gbit/s.
        let (mut paced_ns, mut span_ns, mut phases) = (0.0, 0.0, Vec::new());
        for _ in 0..3_000 {
            now += 1_000_000;
            let mut event = ack(now, 1_000_000_000, rtt, false);
            event.in_flight = 25_000_000;
            rate.on_ack(&event);
            paced_ns += rate.pacing_bps() as f64 * 1e6;
            span_ns += 1e6;
            if phases.last() != Some(&rate.phase) {
                phases.push(rate.phase);
            }
        }
        let mean = paced_ns / span_ns;
        assert!(
            phases.contains(&PROBE_PHASE) && phases.contains(&DRAIN_PHASE),
            "{phases:?}"
        );
        assert!((mean / 1e9 - 1.0).abs() < 0.005, "mean pacing {mean}");
    }

    #[test]
    fn random_loss_raises_the_pacing_rate_and_congestion_cuts_it() {
        let mut rate = RateControl::new(adaptive(), PACKET, 100_000_000);
        let mut now = 0;
        for _ in 0..30 {
            now += 100_000_000;
            rate.on_loss(PACKET);
            // One packet lost in a hundred, RTT at the propagation delay: random loss.
            rate.on_ack(&AckEvent {
                acked: 99 * PACKET,
                ..ack(now, 990_000_000, 100_000_000, true)
            });
        }
        assert!(
            (rate.random_loss() - 0.01).abs() < 0.003,
            "{}",
            rate.random_loss()
        );
        assert_eq!(rate.congested_rounds, 0);
        let before = rate.bottleneck_bps();
        // Now losses with every RTT 40 ms above the propagation delay: a standing queue.
        for _ in 0..3 {
            now += 140_000_000;
            rate.on_loss(10 * PACKET);
            rate.on_ack(&AckEvent {
                acked: 90 * PACKET,
                ..ack(now, 900_000_000, 140_000_000, true)
            });
        }
        assert_eq!(rate.congested_rounds, 3);
        assert!(rate.bottleneck_bps() < before * 3 / 4);
        assert!(rate.random_loss() < 0.002);
    }

    #[test]
    fn rounds_short_of_data_do_not_end_startup() {
        let mut rate = RateControl::new(adaptive(), PACKET, 100_000_000);
        let mut now = 0;
        // Five rounds at a flat 50 Mbit/s while the sender waits for its disk.
        for _ in 0..5 {
            now += 100_000_000;
            rate.on_ack(&AckEvent {
                app_limited: true,
                ..ack(now, 50_000_000, 100_000_000, true)
            });
        }
        assert_eq!(rate.mode(), Mode::Startup);
        // Three flat rounds with data to send: the pipe is full.
        for _ in 0..4 {
            now += 100_000_000;
            rate.on_ack(&ack(now, 50_000_000, 100_000_000, true));
        }
        assert_ne!(rate.mode(), Mode::Startup);
    }

    #[test]
    fn the_ceiling_holds() {
        let mut rate = RateControl::new(
            RateConfig::Adaptive {
                max_bps: Some(200_000_000),
                resume: None,
            },
            PACKET,
            1_000_000,
        );
        rate.on_ack(&ack(1_000_000, 900_000_000, 1_000_000, true));
        assert_eq!(rate.pacing_bps(), 200_000_000);
    }

    fn resumed(bottleneck_bps: u64, remembered_rtt_ns: u64, rtt_now_ns: u64) -> RateControl {
        RateControl::new(
            RateConfig::Adaptive {
                max_bps: None,
                resume: Some(PathMemory {
                    bottleneck_bps,
                    min_rtt_ns: remembered_rtt_ns,
                }),
            },
            PACKET,
            rtt_now_ns,
        )
    }

    #[test]
    fn a_resumed_search_paces_its_first_round_at_half_the_remembered_rate() {
        let cold = RateControl::new(adaptive(), PACKET, 100_000_000);
        let rate = resumed(1_000_000_000, 100_000_000, 104_000_000);
        assert_eq!(rate.resumed_bps(), Some(500_000_000));
        assert_eq!(rate.pacing_bps(), 500_000_000);
        assert!(cold.pacing_bps() < 50_000_000, "{}", cold.pacing_bps());
        // A delay that changed by more than a factor of two is another path: a cold start.
        for rtt_now in [40_000_000, 210_000_000] {
            let other = resumed(1_000_000_000, 100_000_000, rtt_now);
            assert_eq!(other.resumed_bps(), None);
            let cold = RateControl::new(adaptive(), PACKET, rtt_now);
            assert_eq!(other.pacing_bps(), cold.pacing_bps());
        }
    }

    #[test]
    fn a_resumed_search_holds_the_jump_until_it_is_acknowledged_then_doubles() {
        let mut rate = resumed(1_000_000_000, 100_000_000, 100_000_000);
        // The first ACK: its sample spans the time the jump took to fill the path and
        // reads low; the jump stands, not yet multiplied.
        rate.on_ack(&ack(100_000_000, 250_000_000, 100_000_000, true));
        assert_eq!(rate.pacing_bps(), 500_000_000);
        // What was paced at the jump came back in full: startup's gain from then on.
        rate.on_ack(&ack(200_000_000, 500_000_000, 100_000_000, true));
        assert_eq!(rate.mode(), Mode::Startup);
        let paced = rate.pacing_bps();
        assert!((1_400_000_000..1_500_000_000).contains(&paced), "{paced}");
    }

    #[test]
    fn a_path_slower_than_remembered_is_cut_to_what_it_delivered() {
        // Remembered 1 Gbit/s; the path now carries 200 Mbit/s with a standing queue and
        // congestion losses.
        let mut rate = resumed(1_000_000_000, 100_000_000, 100_000_000);
        let mut now = 0;
        for _ in 0..6 {
            now += 150_000_000;
            rate.on_loss(30 * PACKET);
            rate.on_ack(&AckEvent {
                acked: 70 * PACKET,
                ..ack(now, 200_000_000, 150_000_000, true)
            });
        }
        assert!(
            rate.bottleneck_bps() <= 200_000_000,
            "{}",
            rate.bottleneck_bps()
        );
        assert_ne!(rate.mode(), Mode::Startup);
    }
}
