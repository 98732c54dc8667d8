//! What limited a copy (docs/transfer-protocol.md 8). The sender's loop knows, at every
//! moment it did not send, why: the pacer (the rate the network allows, or `--rate`), the
//! congestion window, the receiver's flow-control window (its disk or CPU behind), or the
//! reader (its own disk). What is left of the wall time it spent working. The largest
//! share names the limit; the ends' disk and CPU figures say which resource it was.

use serde::{Deserialize, Serialize};

use crate::outcome::FileOutcome;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// The path (or the fixed rate) set the pace.
    Network,
    /// The fixed `--rate`.
    FixedRate,
    SenderDisk,
    SenderCpu,
    ReceiverDisk,
    ReceiverCpu,
    /// Too short to say: set-up and the last round trips dominate.
    Latency,
}

/// The time split of one copy, in shares of its wall time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub limit: Limit,
    /// One line for the summary: "limited by the receiver's disk: 412 MB/s write, ...".
    pub sentence: String,
    pub wall_s: f64,
    /// Seconds the sender was held by the pacer or the congestion window.
    pub network_s: f64,
    /// Of those, by the congestion window (in flight as much as the model allows).
    pub window_s: f64,
    /// Seconds it waited for the receiver's window.
    pub receiver_s: f64,
    /// Seconds it waited for its disk.
    pub sender_disk_s: f64,
    /// Seconds it waited for the last ACKs and the receiver's verdict.
    pub tail_s: f64,
    /// Seconds it was busy (CPU).
    pub busy_s: f64,
    pub sender_disk_busy_s: f64,
    pub receiver_disk_busy_s: f64,
    pub sender_cpu_s: f64,
    pub receiver_cpu_s: f64,
    /// Goodput of the bytes moved, bit/s.
    pub goodput_bps: f64,
    /// Where the rate search began: a packet train's estimate, or a resumed search's jump.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_estimate: Option<crate::control::StartEstimate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from_bps: Option<f64>,
}

/// A random loss share at or above this is a lossy path (0.1 %).
const LOSSY_PATH: f64 = 0.001;

fn mbytes(bytes: f64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes / seconds / 1e6
    } else {
        0.0
    }
}

fn rate_text(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2} Gbit/s", bps / 1e9)
    } else {
        format!("{:.1} Mbit/s", bps / 1e6)
    }
}

/// Names the limit of one file's transfer. `sent_here` says whether this end sent (its
/// `local` figures are the sender's); `fixed_rate` whether `--rate` was given.
// Long: a rule table: what limited a copy, one rule after another in order of precedence.
pub fn diagnose(outcome: &FileOutcome, sent_here: bool, fixed_rate: bool) -> Diagnosis {
    let (sender, receiver) = if sent_here {
        (outcome.local, outcome.remote)
    } else {
        (outcome.remote, outcome.local)
    };
    let waits = outcome.waits;
    let wall = outcome.wall_s.max(1e-9);
    let moved = (outcome.bytes - outcome.resumed_bytes) as f64;
    let goodput_bps = moved * 8.0 / wall;
    let network_s = waits.pacing_s + waits.window_s;
    // The sender's waits cover its own loop: what is left of that loop's wall time is its
    // work. The whole copy's wall (set-up, the offer's round trips, on a pull the
    // receiver's clock) would count time the loop never ran as the sender's CPU.
    let sender_wall = if sender.wall_s > 0.0 {
        sender.wall_s
    } else {
        wall
    };
    let busy_s =
        (sender_wall - network_s - waits.receiver_s - waits.reader_s - waits.tail_s).max(0.0);
    let shares = [
        (network_s, 0),
        (waits.receiver_s, 1),
        (waits.reader_s, 2),
        (busy_s, 3),
        (waits.tail_s, 4),
    ];
    let largest = shares
        .iter()
        .copied()
        .fold((f64::MIN, 0), |best, s| if s.0 > best.0 { s } else { best })
        .1;
    let carried = format!("the path carried {}", rate_text(goodput_bps));
    let (limit, sentence) = match largest {
        0 if fixed_rate => (Limit::FixedRate, format!("limited by the fixed --rate: {carried}")),
        // Held by the pacer below what the model ended at, on a path that dropped
        // datagrams: the rate search climbing through the losses, not the sender's CPU.
        0 if outcome
            .bottleneck_bps
            .is_some_and(|b| goodput_bps < 0.5 * b)
            && outcome.random_loss.unwrap_or(0.0) >= LOSSY_PATH =>
        {
            (
                Limit::Network,
                format!(
                    "limited by the network's loss: {carried} while the path dropped {:.2} % of the datagrams at random ({} lost, {} bytes sent again); the rate model climbed to {} only as the copy went on",
                    outcome.random_loss.unwrap_or(0.0) * 100.0,
                    outcome.lost_packets,
                    outcome.resent_bytes,
                    rate_text(outcome.bottleneck_bps.unwrap_or(0.0))
                ),
            )
        }
        // Held by the pacer, yet far below what the model ended at: the sender itself
        // (its rate search, or its CPU) is what did not go faster.
        0 if outcome
            .bottleneck_bps
            .is_some_and(|b| goodput_bps < 0.5 * b) =>
        {
            (
                Limit::SenderCpu,
                format!(
                    "limited by the sender's pacing: {carried}, its rate model ended at {} (a slow start, or a CPU that could not keep the pace)",
                    rate_text(outcome.bottleneck_bps.unwrap_or(0.0))
                ),
            )
        }
        0 => {
            let model = outcome
                .bottleneck_bps
                .map(|b| {
                    format!(
                        " (bottleneck estimate {}, random loss {:.2} %)",
                        rate_text(b),
                        outcome.random_loss.unwrap_or(0.0) * 100.0
                    )
                })
                .unwrap_or_default();
            (Limit::Network, format!("limited by the network: {carried}{model}"))
        }
        1 => {
            // The receiver held the window: its disk if that was busy most of the time,
            // else its CPU (hashing, copying datagrams).
            if receiver.disk_busy_s > 0.5 * receiver.wall_s.max(1e-9) {
                (
                    Limit::ReceiverDisk,
                    format!(
                        "limited by the receiver's disk: {:.0} MB/s write, {carried}",
                        mbytes(moved, receiver.disk_busy_s)
                    ),
                )
            } else {
                (
                    Limit::ReceiverCpu,
                    format!(
                        "limited by the receiver's CPU: {:.0} % of a core, {carried}",
                        receiver.cpu_s / receiver.wall_s.max(1e-9) * 100.0
                    ),
                )
            }
        }
        2 => (
            Limit::SenderDisk,
            format!(
                "limited by the sender's disk: {:.0} MB/s read, {carried}",
                mbytes(outcome.bytes as f64, sender.disk_busy_s)
            ),
        ),
        // Much of the sender's working time it spent runnable, waiting for a CPU that
        // other work held (the kernel's run-queue wait of its thread).
        3 if sender.runqueue_wait_s > 0.3 * busy_s => (
            Limit::SenderCpu,
            format!(
                "limited by CPU time for the sender: it waited {:.2} s for a CPU and ran {:.2} s \
                 ({:.0} % of a core); other work on its host held the CPUs, {carried}",
                sender.runqueue_wait_s,
                sender.cpu_s,
                sender.cpu_s / sender.wall_s.max(1e-9) * 100.0
            ),
        ),
        3 => (
            Limit::SenderCpu,
            format!(
                "limited by the sender's CPU: {:.0} % of a core, {carried}",
                sender.cpu_s / sender.wall_s.max(1e-9) * 100.0
            ),
        ),
        _ => (
            Limit::Latency,
            format!("limited by round trips (set-up and the last ACKs took most of the time): {carried}"),
        ),
    };
    Diagnosis {
        limit,
        sentence,
        wall_s: outcome.wall_s,
        network_s,
        window_s: waits.window_s,
        receiver_s: waits.receiver_s,
        sender_disk_s: waits.reader_s,
        tail_s: waits.tail_s,
        busy_s,
        sender_disk_busy_s: sender.disk_busy_s,
        receiver_disk_busy_s: receiver.disk_busy_s,
        sender_cpu_s: sender.cpu_s,
        receiver_cpu_s: receiver.cpu_s,
        goodput_bps,
        start_estimate: outcome.start_estimate,
        resumed_from_bps: outcome.resumed_from_bps,
    }
}

impl Diagnosis {
    /// Where the sender's time went, line by line, with both ends' disk and CPU;
    /// `moved_bytes` is what this copy moved (resumed bytes not counted).
    pub fn render_detail(&self, moved_bytes: u64) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let wall = self.wall_s.max(1e-9);
        let share = |s: f64| s * 100.0 / wall;
        let _ = writeln!(out, "Where the sender's time went ({:.2} s):", self.wall_s);
        let _ = writeln!(
            out,
            "  held by the network (pacing, window) {:>8.2} s {:>5.1} %",
            self.network_s,
            share(self.network_s)
        );
        let _ = writeln!(
            out,
            "    of which the window was full       {:>8.2} s {:>5.1} %",
            self.window_s,
            share(self.window_s)
        );
        let _ = writeln!(
            out,
            "  waiting for the receiver's window    {:>8.2} s {:>5.1} %",
            self.receiver_s,
            share(self.receiver_s)
        );
        let _ = writeln!(
            out,
            "  waiting for its own disk reads       {:>8.2} s {:>5.1} %",
            self.sender_disk_s,
            share(self.sender_disk_s)
        );
        let _ = writeln!(
            out,
            "  waiting for the last ACKs            {:>8.2} s {:>5.1} %",
            self.tail_s,
            share(self.tail_s)
        );
        let _ = writeln!(
            out,
            "  working (set-up, CPU)                {:>8.2} s {:>5.1} %",
            self.busy_s,
            share(self.busy_s)
        );
        let _ = writeln!(
            out,
            "  disk busy: sender {:.2} s read, receiver {:.2} s write and sync",
            self.sender_disk_busy_s, self.receiver_disk_busy_s
        );
        let _ = writeln!(
            out,
            "  CPU: sender {:.2} s, receiver {:.2} s ({:.2} and {:.2} s per GB moved)",
            self.sender_cpu_s,
            self.receiver_cpu_s,
            self.sender_cpu_s * 1e9 / moved_bytes.max(1) as f64,
            self.receiver_cpu_s * 1e9 / moved_bytes.max(1) as f64
        );
        if let Some(train) = self.start_estimate {
            let began = match train.jumped_to_bps {
                Some(bps) => format!("the search jumped to {}", rate_text(bps)),
                None => "the search already paced above its share".to_string(),
            };
            let _ = writeln!(
                out,
                "  rate search: a packet train read the path at {} after {:.1} ms; {began}",
                rate_text(train.bps),
                train.after_ms,
            );
        } else if let Some(bps) = self.resumed_from_bps {
            let _ = writeln!(
                out,
                "  rate search: began at {}, half what the last copy over this path found",
                rate_text(bps)
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::EndStats;
    use crate::outcome::Waits;

    fn outcome(waits: Waits, receiver_disk: f64) -> FileOutcome {
        FileOutcome {
            bytes: 1_000_000_000,
            wall_s: 10.0,
            local: EndStats {
                disk_busy_s: 1.0,
                cpu_s: 3.0,
                wall_s: 10.0,
                ..EndStats::default()
            },
            remote: EndStats {
                disk_busy_s: receiver_disk,
                cpu_s: 2.0,
                wall_s: 10.0,
                ..EndStats::default()
            },
            waits,
            ..FileOutcome::default()
        }
    }

    #[test]
    fn a_closed_receiver_window_with_a_busy_disk_is_the_receivers_disk() {
        let d = diagnose(
            &outcome(
                Waits {
                    receiver_s: 7.0,
                    pacing_s: 1.0,
                    ..Waits::default()
                },
                8.0,
            ),
            true,
            false,
        );
        assert_eq!(d.limit, Limit::ReceiverDisk);
        assert!(d.sentence.contains("125 MB/s write"), "{}", d.sentence);
        assert!(d.sentence.contains("800.0 Mbit/s"), "{}", d.sentence);
    }

    #[test]
    fn pacing_is_the_network_and_waiting_for_reads_the_senders_disk() {
        let network = diagnose(
            &outcome(
                Waits {
                    pacing_s: 8.0,
                    ..Waits::default()
                },
                1.0,
            ),
            true,
            false,
        );
        assert_eq!(network.limit, Limit::Network);
        let fixed = diagnose(
            &outcome(
                Waits {
                    pacing_s: 8.0,
                    ..Waits::default()
                },
                1.0,
            ),
            true,
            true,
        );
        assert_eq!(fixed.limit, Limit::FixedRate);
        let disk = diagnose(
            &outcome(
                Waits {
                    reader_s: 6.0,
                    ..Waits::default()
                },
                1.0,
            ),
            false,
            false,
        );
        assert_eq!(disk.limit, Limit::SenderDisk);
    }

    #[test]
    fn pacing_far_below_the_models_rate_is_the_senders_loop() {
        let mut o = outcome(
            Waits {
                pacing_s: 8.0,
                ..Waits::default()
            },
            1.0,
        );
        o.bottleneck_bps = Some(20e9);
        let d = diagnose(&o, true, false);
        assert_eq!(d.limit, Limit::SenderCpu);
        assert!(d.sentence.contains("sender's pacing"), "{}", d.sentence);
        o.bottleneck_bps = Some(1e9);
        assert_eq!(diagnose(&o, true, false).limit, Limit::Network);
        // The same on a path that drops 2 %: its loss held the rate search back.
        o.bottleneck_bps = Some(20e9);
        o.random_loss = Some(0.02);
        o.lost_packets = 300;
        let d = diagnose(&o, true, false);
        assert_eq!(d.limit, Limit::Network);
        assert!(
            d.sentence.contains("loss")
                && d.sentence.contains("2.00 %")
                && !d.sentence.contains("CPU"),
            "{}",
            d.sentence
        );
    }

    #[test]
    fn no_waiting_at_all_is_the_senders_cpu() {
        let d = diagnose(&outcome(Waits::default(), 1.0), true, false);
        assert_eq!(d.limit, Limit::SenderCpu);
        assert!(d.sentence.contains("30 % of a core"), "{}", d.sentence);
        assert!(!d.sentence.contains("other work"), "{}", d.sentence);
    }

    /// Busy by its own account, and runnable but off a CPU for most of it (the kernel's
    /// run-queue wait): the sender waited for CPUs other work held.
    #[test]
    fn a_sender_that_ran_far_less_than_it_worked_was_starved() {
        let mut o = outcome(Waits::default(), 1.0);
        o.local.cpu_s = 2.0;
        o.local.runqueue_wait_s = 6.0;
        let d = diagnose(&o, true, false);
        assert_eq!(d.limit, Limit::SenderCpu);
        assert!(
            d.sentence.contains("other work on its host"),
            "{}",
            d.sentence
        );
    }
}
