//! What a served test holds beside its session, whichever client asked for it (a
//! linerate client or an iperf3 one): its place among the server's running tests, its
//! data plane and its share of its address's rate; and the step both test loops take
//! each turn (the plane's end, the rate bound, the server's shutdown).

use crate::access::RateShare;
use crate::server_state::{rate_exceeded, side_figures, ServerState};
use linerate_engine::flow::WritesInterval;
use linerate_engine::plane::DataPlane;
use linerate_report::SideResult;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A served test's resources; `end` gives them back.
#[derive(Default)]
pub(crate) struct Served {
    pub plane: Option<DataPlane>,
    /// The test holds one of the server's `--max-tests` places.
    counted: bool,
    /// The test's share of its address's rate (`--max-rate-per-ip`).
    pub rate_share: Option<RateShare>,
    /// A served iperf 2 `--trip-times` test over TCP under `serve --histogram-interval`:
    /// each interval's timed writes as it completes, with its span (seconds since the
    /// plane's start), for the test's loop to log; `None`: not kept.
    pub interval_writes: Option<Vec<((f64, f64), WritesInterval)>>,
    /// Intervals heard from the plane so far.
    intervals_heard: usize,
}

/// What a turn of a served test's loop found.
pub(crate) enum Step {
    /// Nothing that ends the test.
    Running,
    /// The plane finished; this side's figures (logged).
    Finished(Box<SideResult>),
    /// The test must end, for this reason (logged).
    Stop(String),
}

impl Served {
    /// Takes one of the server's places for running tests; `Err` says the server is at
    /// its limit. The place is held even then, until `end`, as the count says.
    pub fn take_place(&mut self, shared: &ServerState) -> Result<(), String> {
        let running = shared.running.fetch_add(1, Ordering::Relaxed);
        self.counted = true;
        if running >= shared.config.limits.max_tests as usize {
            return Err(format!("the server is running {running} tests, its limit"));
        }
        Ok(())
    }

    /// One turn: the plane's result once it has finished (when `may_finish`); the test
    /// stopped when its measured rate ran over its bound or the server is shutting down.
    /// `label` names the test in the log ("test 7", "iperf3 test 7").
    pub fn step(
        &mut self,
        shared: &ServerState,
        label: &str,
        peer: SocketAddr,
        may_finish: bool,
    ) -> Step {
        if may_finish && self.plane.as_ref().is_some_and(DataPlane::is_finished) {
            let plane = self.plane.take().expect("checked");
            return match plane.finish(shared.host.clone()) {
                Ok(side) => {
                    shared.log(&format!(
                        "{label} from {peer}: finished, {}",
                        side_figures(&side)
                    ));
                    Step::Finished(Box::new(side))
                }
                Err(e) => Step::Stop(format!("data plane failed: {e}")),
            };
        }
        if let Some(plane) = self.plane.as_mut() {
            // Keep the sample channel short; the intervals travel in the final result.
            let intervals = plane.poll_intervals(Duration::ZERO);
            if let Some(heard) = self.interval_writes.as_mut() {
                for (k, interval) in (self.intervals_heard..).zip(&intervals) {
                    if let Some(writes) = plane.writes_in(k) {
                        heard.push(((interval.start, interval.end), writes));
                    }
                }
            }
            self.intervals_heard += intervals.len();
            if let Some(why) = rate_exceeded(shared, self.rate_share.as_ref(), &intervals) {
                shared.refused(peer, &format!("{label}: {why}"));
                return Step::Stop(why);
            }
        }
        if shared.shutdown.load(Ordering::Relaxed) {
            return Step::Stop("the server is shutting down".into());
        }
        Step::Running
    }

    /// Stops the plane if it still runs and gives the test's place back.
    pub fn end(&mut self, shared: &ServerState) {
        if let Some(plane) = self.plane.take() {
            plane.stop();
        }
        if std::mem::take(&mut self.counted) {
            shared.running.fetch_sub(1, Ordering::Relaxed);
        }
    }
}
