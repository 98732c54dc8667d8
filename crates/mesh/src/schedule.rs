//! The scheduler, sans IO: given the mesh's jobs, the time and what has finished, it says
//! what to start (or skip) now. Time is injected (seconds on the caller's clock) and its
//! randomness (jitter, the phases of light jobs) comes from the mesh's seed, so a schedule
//! is tested, simulated and planned without sockets or clocks.
//!
//! - **Exclusive tests** (throughput) run in cycles: at each cycle's start every job of the
//!   test is pending, and a pending job starts as soon as neither of its hosts is in
//!   another exclusive job (and the mesh's `max_exclusive` allows), earliest cycle first,
//!   then by round. Jobs of a round share no host, so with equal durations a round starts
//!   whole and a full mesh takes its 2(n - 1) rounds. The next cycle is due an interval
//!   (plus jitter) after this one was, or as soon as this one ends if it ran longer.
//! - **Light tests** (latency, loss) run each job every interval from its own phase (drawn
//!   in the interval, so probes do not fire together), beside everything else; a test that
//!   asks waits while either host is in an exclusive job.
//! - **A host that fails** is down for a backoff (30 s, doubling to an hour): its jobs are
//!   skipped (reported, with the reason) and never hold the others; after the backoff its
//!   next job tries it again, and success clears it.
//! - **Resuming**: given what the store holds (each job's last cycle and times), a new
//!   scheduler carries on the cycle under way instead of starting from zero.

use crate::model::{Job, Mesh};
use std::collections::BTreeSet;

/// A time as the light queue orders it: microseconds.
fn key(seconds: f64) -> u64 {
    (seconds.max(0.0) * 1e6) as u64
}

/// The first backoff of a failed host, and the longest.
pub const FIRST_BACKOFF_S: f64 = 30.0;
pub const LONGEST_BACKOFF_S: f64 = 3600.0;

/// What to do now.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Start {
        job: usize,
        cycle: u64,
    },
    /// The job's turn came with a host down: reported as failed, not run.
    Skip {
        job: usize,
        cycle: u64,
        down: Down,
    },
}

/// A host that is down, as a job skipped for it names it.
#[derive(Debug, Clone, PartialEq)]
pub struct Down {
    pub host: usize,
    pub name: String,
    pub failures: u32,
    /// Seconds until its next job tries it again.
    pub retry_in_s: f64,
    /// Why its last job failed.
    pub reason: String,
}

impl Down {
    /// The skip's text. `kept_in` names where the failure's reason is kept (the failed
    /// job's stored run, "run 42"): a host down for an hour skips hundreds of jobs, and
    /// each of their rows points to the one reason instead of repeating it.
    pub fn describe(&self, kept_in: Option<&str>) -> String {
        let why = match kept_in {
            Some(place) => format!("the reason is in {place}"),
            None => self.reason.clone(),
        };
        format!(
            "host {} is down after {} failure(s) ({why}); tried again in {:.0} s",
            self.name, self.failures, self.retry_in_s
        )
    }
}

impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe(None))
    }
}

/// How a started job ended.
#[derive(Debug, Clone, PartialEq)]
pub enum JobEnd {
    Done,
    /// `hosts`: those the failure is laid at (unreachable, refused), which go down.
    Failed {
        hosts: Vec<usize>,
        reason: String,
    },
}

/// A job's result as the store keeps it, for resuming.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Past {
    pub job: usize,
    pub cycle: u64,
    pub started_at: f64,
    pub ended_at: f64,
}

/// The shortest spread of light jobs brought forward to now ([`Scheduler::start_now`]).
const LIGHT_START_SPREAD_S: f64 = 60.0;

#[derive(Debug, Clone)]
struct Cycle {
    number: u64,
    /// When it was due, without its jitter: the next is due an interval later.
    base: f64,
    started_at: f64,
    /// Pending jobs, in the order they may start in.
    pending: Pending,
    running: usize,
}

/// A cycle's jobs by (round, index), each taken once: a sorted list with a mark per
/// entry and the first untaken one, so a cycle of a million jobs costs 16 bytes a job.
#[derive(Debug, Clone)]
struct Pending {
    jobs: Vec<(u32, usize)>,
    taken: Vec<bool>,
    first: usize,
    left: usize,
}

impl Pending {
    fn new(mut jobs: Vec<(u32, usize)>) -> Pending {
        jobs.sort_unstable();
        let left = jobs.len();
        Pending {
            taken: vec![false; left],
            jobs,
            first: 0,
            left,
        }
    }

    fn is_empty(&self) -> bool {
        self.left == 0
    }

    /// The untaken entries from the first, by position.
    fn untaken(&self) -> impl Iterator<Item = (usize, (u32, usize))> + '_ {
        (self.first..self.jobs.len())
            .filter(|&i| !self.taken[i])
            .map(|i| (i, self.jobs[i]))
    }

    fn take(&mut self, position: usize) {
        if !std::mem::replace(&mut self.taken[position], true) {
            self.left -= 1;
        }
        while self.first < self.jobs.len() && self.taken[self.first] {
            self.first += 1;
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Health {
    failures: u32,
    down_until: f64,
    reason: String,
}

#[derive(Debug, Clone)]
pub struct Scheduler {
    jobs: Vec<Job>,
    interval: Vec<f64>,
    /// Each test's duration, for spreading light jobs brought forward.
    seconds: Vec<f64>,
    jitter: Vec<f64>,
    exclusive: Vec<bool>,
    pause: Vec<bool>,
    max_exclusive: usize,
    random: u64,
    /// Exclusive tests: the cycle under way (or last), and when the next is due.
    cycles: Vec<Option<Cycle>>,
    next_cycle: Vec<f64>,
    /// Exclusive tests: the last cycle to open, when the run is of a set number.
    last_cycle: Vec<Option<u64>>,
    /// Light jobs: when each is next due; those not running, by that time.
    next_due: Vec<f64>,
    light_queue: BTreeSet<(u64, usize)>,
    running: Vec<bool>,
    running_count: usize,
    /// Per host: the exclusive job it is in.
    busy: Vec<Option<usize>>,
    exclusive_running: usize,
    health: Vec<Health>,
    /// Light jobs: the occurrence number, for the cycle field of their results.
    occurrence: Vec<u64>,
    /// Host names, for reasons.
    names: Vec<String>,
}

impl Scheduler {
    /// A scheduler for `mesh` whose first cycles are due at `now`.
    pub fn new(mesh: &Mesh, now: f64) -> Scheduler {
        let jobs = mesh.jobs();
        let tests = mesh.tests.len();
        // Only light jobs keep due times and occurrences: a mesh of exclusive tests alone
        // (a million jobs at 1,000 hosts) keeps none.
        let light = if mesh.tests.iter().any(|t| !t.exclusive) {
            jobs.len()
        } else {
            0
        };
        let mut scheduler = Scheduler {
            interval: mesh.tests.iter().map(|t| t.interval_s).collect(),
            seconds: mesh.tests.iter().map(|t| t.seconds).collect(),
            jitter: mesh.tests.iter().map(|t| t.jitter_s).collect(),
            exclusive: mesh.tests.iter().map(|t| t.exclusive).collect(),
            pause: mesh.tests.iter().map(|t| t.pause_for_exclusive).collect(),
            max_exclusive: mesh.max_exclusive.map_or(usize::MAX, |n| n as usize),
            random: mesh.seed | 1,
            cycles: vec![None; tests],
            next_cycle: vec![now; tests],
            last_cycle: vec![None; tests],
            next_due: vec![now; light],
            light_queue: BTreeSet::new(),
            running: vec![false; jobs.len()],
            running_count: 0,
            busy: vec![None; mesh.hosts.len()],
            exclusive_running: 0,
            health: vec![Health::default(); mesh.hosts.len()],
            occurrence: vec![0; light],
            names: mesh.hosts.iter().map(|h| h.name.clone()).collect(),
            jobs,
        };
        // Light jobs start at a phase drawn in their interval.
        for i in 0..scheduler.jobs.len() {
            let test = scheduler.jobs[i].test;
            if !scheduler.exclusive[test] {
                scheduler.next_due[i] = now + scheduler.draw() * scheduler.interval[test];
            }
        }
        scheduler.queue_light();
        scheduler
    }

    /// Rebuilds the light queue from the jobs' due times.
    fn queue_light(&mut self) {
        self.light_queue = (0..self.jobs.len())
            .filter(|&j| !self.exclusive[self.jobs[j].test] && !self.running[j])
            .map(|j| (key(self.next_due[j]), j))
            .collect();
    }

    pub fn jobs(&self) -> &[Job] {
        &self.jobs
    }

    /// Carries on from what the store holds: each exclusive test resumes its last cycle
    /// (the jobs not yet in it pending) or waits for its next; each light job is next due
    /// an interval after it last ran. `now` is the time of the restart.
    pub fn resume(&mut self, past: &[Past], now: f64) {
        for test in 0..self.exclusive.len() {
            let mine: Vec<&Past> = past
                .iter()
                .filter(|p| self.jobs.get(p.job).is_some_and(|j| j.test == test))
                .collect();
            if self.exclusive[test] {
                let Some(last) = mine.iter().map(|p| p.cycle).max() else {
                    continue;
                };
                let in_last: Vec<&&Past> = mine.iter().filter(|p| p.cycle == last).collect();
                let started = in_last
                    .iter()
                    .map(|p| p.started_at)
                    .fold(f64::INFINITY, f64::min);
                let done: BTreeSet<usize> = in_last.iter().map(|p| p.job).collect();
                let pending = Pending::new(
                    self.jobs
                        .iter()
                        .enumerate()
                        .filter(|(i, j)| j.test == test && !done.contains(i))
                        .map(|(i, j)| (j.round, i))
                        .collect(),
                );
                self.cycles[test] = Some(Cycle {
                    number: last,
                    base: started,
                    started_at: started,
                    pending,
                    running: 0,
                });
                self.next_cycle[test] = started + self.interval[test] + self.draw_jitter(test);
            } else {
                for p in mine {
                    let due = p.ended_at + self.interval[test];
                    self.next_due[p.job] = due.max(now.min(due));
                    self.occurrence[p.job] = self.occurrence[p.job].max(p.cycle + 1);
                }
            }
        }
        self.queue_light();
    }

    /// Brings every test forward to `now`, for a run of a set number of cycles
    /// (`mesh run --cycles N`): each exclusive test whose last cycle is complete opens its
    /// next one now (one under way carries on), and each light job is due within the
    /// next minute or so instead of an interval after it last ran. The light jobs keep
    /// phases of their own over a spread long enough for about one of a test's jobs per
    /// host at a time (jobs x duration / hosts, at least a minute, at most the interval):
    /// all at once, a mesh's hundreds of probes took the CPUs and the agents down with
    /// them. Later cycles keep the intervals.
    pub fn start_now(&mut self, now: f64) {
        for test in 0..self.exclusive.len() {
            if self.exclusive[test] {
                self.next_cycle[test] = self.next_cycle[test].min(now);
            }
        }
        let hosts = self.names.len().max(1) as f64;
        let mut per_test = vec![0usize; self.exclusive.len()];
        for job in &self.jobs {
            per_test[job.test] += 1;
        }
        for job in 0..self.next_due.len() {
            let test = self.jobs[job].test;
            if !self.exclusive[test] {
                let busy = per_test[test] as f64 * self.seconds[test] / hosts;
                let spread = self.interval[test].min(busy.max(LIGHT_START_SPREAD_S));
                let phase = self.draw() * spread;
                self.next_due[job] = self.next_due[job].min(now + phase);
            }
        }
        self.queue_light();
    }

    /// Opens no cycle of exclusive test `test` numbered above `last` (a run of a set
    /// number of cycles), so that the light tests get their turn once it is through
    /// instead of waiting beside cycle after cycle.
    pub fn last_cycle(&mut self, test: usize, last: u64) {
        if let Some(slot) = self.last_cycle.get_mut(test) {
            *slot = Some(last);
        }
    }

    /// What to start or skip at `now`. A started job runs until [`finished`] is called.
    ///
    /// [`finished`]: Scheduler::finished
    pub fn poll(&mut self, now: f64) -> Vec<Action> {
        let mut actions = Vec::new();
        self.open_cycles(now);
        // Exclusive jobs: the earliest cycle's first, each in round order. The scan of a
        // cycle stops once no two hosts are free, so a poll costs the jobs it starts.
        let mut tests: Vec<usize> = (0..self.cycles.len())
            .filter(|&t| {
                self.cycles[t]
                    .as_ref()
                    .is_some_and(|c| !c.pending.is_empty())
            })
            .collect();
        tests.sort_by(|&a, &b| {
            let started = |t: usize| self.cycles[t].as_ref().map_or(0.0, |c| c.started_at);
            started(a).total_cmp(&started(b)).then(a.cmp(&b))
        });
        let hosts = self.busy.len();
        for test in tests {
            let Some(cycle) = self.cycles[test].as_ref() else {
                continue;
            };
            let number = cycle.number;
            let mut taken = Vec::new();
            let mut started = 0;
            for (position, (_, job)) in cycle.pending.untaken() {
                if self.exclusive_running >= self.max_exclusive
                    || hosts < 2 * self.exclusive_running + 2
                {
                    break;
                }
                let Job { src, dst, .. } = self.jobs[job];
                if let Some(down) = down(&self.health, &self.names, src, dst, now) {
                    taken.push(position);
                    actions.push(Action::Skip {
                        job,
                        cycle: number,
                        down,
                    });
                    continue;
                }
                if self.busy[src].is_some() || self.busy[dst].is_some() {
                    continue;
                }
                taken.push(position);
                self.busy[src] = Some(job);
                self.busy[dst] = Some(job);
                self.exclusive_running += 1;
                self.running[job] = true;
                self.running_count += 1;
                started += 1;
                actions.push(Action::Start { job, cycle: number });
            }
            let cycle = self.cycles[test].as_mut().expect("checked above");
            for position in taken {
                cycle.pending.take(position);
            }
            cycle.running += started;
        }
        // Light jobs: each at its own time.
        let due: Vec<(u64, usize)> = self
            .light_queue
            .range(..=(key(now), usize::MAX))
            .copied()
            .collect();
        for entry in due {
            let job = entry.1;
            let Job { test, src, dst, .. } = self.jobs[job];
            let occurrence = self.occurrence[job];
            if let Some(down) = down(&self.health, &self.names, src, dst, now) {
                self.light_queue.remove(&entry);
                self.advance_light(job, now);
                self.light_queue.insert((key(self.next_due[job]), job));
                actions.push(Action::Skip {
                    job,
                    cycle: occurrence,
                    down,
                });
                continue;
            }
            if self.pause[test] && (self.busy[src].is_some() || self.busy[dst].is_some()) {
                continue;
            }
            self.light_queue.remove(&entry);
            self.running[job] = true;
            self.running_count += 1;
            self.advance_light(job, now);
            actions.push(Action::Start {
                job,
                cycle: occurrence,
            });
        }
        actions
    }

    /// A started job ended at `now`.
    pub fn finished(&mut self, job: usize, now: f64, outcome: JobEnd) {
        if !std::mem::take(&mut self.running[job]) {
            return;
        }
        self.running_count -= 1;
        let Job { test, src, dst, .. } = self.jobs[job];
        if !self.exclusive[test] {
            self.light_queue.insert((key(self.next_due[job]), job));
        }
        if self.exclusive[test] {
            for host in [src, dst] {
                if self.busy[host] == Some(job) {
                    self.busy[host] = None;
                }
            }
            self.exclusive_running = self.exclusive_running.saturating_sub(1);
            if let Some(cycle) = self.cycles[test].as_mut() {
                cycle.running = cycle.running.saturating_sub(1);
            }
        }
        match outcome {
            JobEnd::Done => {
                for host in [src, dst] {
                    self.health[host] = Health::default();
                }
            }
            JobEnd::Failed { hosts, reason } => {
                for host in hosts {
                    let health = &mut self.health[host];
                    health.failures += 1;
                    let backoff = (FIRST_BACKOFF_S * 2f64.powi(health.failures as i32 - 1))
                        .min(LONGEST_BACKOFF_S);
                    health.down_until = now + backoff;
                    health.reason = reason.clone();
                }
            }
        }
    }

    /// The earliest time after `now` a poll may find something new to do, short of a job
    /// finishing (which the caller polls after anyway); `None`: nothing until a job ends.
    pub fn next_wakeup(&self, now: f64) -> Option<f64> {
        let mut soonest = f64::INFINITY;
        for (test, cycle) in self.cycles.iter().enumerate() {
            if !self.exclusive[test] {
                continue;
            }
            let open = cycle
                .as_ref()
                .is_some_and(|c| !c.pending.is_empty() || c.running > 0);
            let at_last = match (cycle, self.last_cycle[test]) {
                (Some(c), Some(last)) => c.number >= last,
                (None, Some(last)) => last == 0,
                _ => false,
            };
            if !open && !at_last {
                soonest = soonest.min(self.next_cycle[test]);
            }
        }
        for &(_, job) in &self.light_queue {
            let Job { test, src, dst, .. } = self.jobs[job];
            let due = self.next_due[job];
            // Due and paused for an exclusive job: that job's end wakes it.
            let paused = self.pause[test] && (self.busy[src].is_some() || self.busy[dst].is_some());
            if due <= now && paused {
                continue;
            }
            soonest = soonest.min(due);
            break;
        }
        soonest.is_finite().then_some(soonest)
    }

    /// The cycle under way (or last) of an exclusive test: its number, when it started,
    /// and whether it is complete.
    pub fn cycle(&self, test: usize) -> Option<(u64, f64, bool)> {
        self.cycles.get(test)?.as_ref().map(|c| {
            (
                c.number,
                c.started_at,
                c.pending.is_empty() && c.running == 0,
            )
        })
    }

    /// Jobs started and not yet finished.
    pub fn running(&self) -> usize {
        self.running_count
    }

    /// Whether `host` is down at `now`, and why.
    pub fn host_down(&self, host: usize, now: f64) -> Option<&str> {
        let health = self.health.get(host)?;
        (health.down_until > now).then_some(health.reason.as_str())
    }

    fn open_cycles(&mut self, now: f64) {
        for test in 0..self.exclusive.len() {
            if !self.exclusive[test] || now < self.next_cycle[test] {
                continue;
            }
            let (number, base) = match &self.cycles[test] {
                Some(c) if !c.pending.is_empty() || c.running > 0 => continue,
                Some(c) => (c.number + 1, c.base + self.interval[test]),
                None => (1, self.next_cycle[test]),
            };
            if self.last_cycle[test].is_some_and(|last| number > last) {
                continue;
            }
            let pending = Pending::new(
                self.jobs
                    .iter()
                    .enumerate()
                    .filter(|(_, j)| j.test == test)
                    .map(|(i, j)| (j.round, i))
                    .collect(),
            );
            if pending.is_empty() {
                continue;
            }
            self.cycles[test] = Some(Cycle {
                number,
                base,
                started_at: now,
                pending,
                running: 0,
            });
            self.next_cycle[test] = base + self.interval[test] + self.draw_jitter(test);
        }
    }

    fn advance_light(&mut self, job: usize, now: f64) {
        let test = self.jobs[job].test;
        self.occurrence[job] += 1;
        let mut due = self.next_due[job] + self.interval[test];
        // A job late by more than an interval (a host long down, a paused probe) keeps its
        // phase but drops the occurrences it missed.
        while due <= now {
            due += self.interval[test];
        }
        self.next_due[job] = due + self.draw_jitter(test);
    }

    /// A draw in [0, 1) from the seeded generator (xorshift64*).
    fn draw(&mut self) -> f64 {
        self.random ^= self.random >> 12;
        self.random ^= self.random << 25;
        self.random ^= self.random >> 27;
        let x = self.random.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }

    fn draw_jitter(&mut self, test: usize) -> f64 {
        if self.jitter[test] > 0.0 {
            self.draw() * self.jitter[test]
        } else {
            0.0
        }
    }
}

/// Why a job of `src` and `dst` cannot run at `now`: the first of them that is down.
fn down(health: &[Health], names: &[String], src: usize, dst: usize, now: f64) -> Option<Down> {
    [src, dst].into_iter().find_map(|host| {
        let health = &health[host];
        (health.down_until > now).then(|| Down {
            host,
            name: names[host].clone(),
            failures: health.failures,
            retry_in_s: health.down_until - now,
            reason: health.reason.clone(),
        })
    })
}

/// One job as a simulation ran it.
#[derive(Debug, Clone, PartialEq)]
pub struct Placed {
    pub job: usize,
    pub cycle: u64,
    pub start: f64,
    pub end: f64,
}

/// What a simulation ran: the jobs, each placement, and what it skipped.
#[derive(Debug, Clone)]
pub struct Simulation {
    pub jobs: Vec<Job>,
    pub placed: Vec<Placed>,
    pub skipped: Vec<Action>,
}

/// Runs the scheduler on simulated time from 0 until every exclusive test has completed
/// `cycles` cycles (light jobs alongside), each job taking `seconds(job)`: the plan
/// `mesh plan` prints and the benchmark measures.
pub fn simulate(mesh: &Mesh, cycles: u64, mut seconds: impl FnMut(&Job) -> f64) -> Simulation {
    let mut scheduler = Scheduler::new(mesh, 0.0);
    let mut placed = Vec::with_capacity(scheduler.jobs().len() * cycles.min(4) as usize);
    let mut skipped = Vec::new();
    // Running jobs by end time.
    let mut ends: Vec<(f64, usize)> = Vec::new();
    let mut now = 0.0;
    let exclusive: Vec<usize> = (0..mesh.tests.len())
        .filter(|&t| mesh.tests[t].exclusive)
        .collect();
    let limit = 1_000_000usize.max(scheduler.jobs().len() * (cycles as usize + 1) * 4);
    for _ in 0..limit {
        for action in scheduler.poll(now) {
            match action {
                Action::Start { job, cycle } => {
                    let end = now + seconds(&scheduler.jobs()[job]);
                    ends.push((end, job));
                    placed.push(Placed {
                        job,
                        cycle,
                        start: now,
                        end,
                    });
                }
                skip @ Action::Skip { .. } => skipped.push(skip),
            }
        }
        let finished_all = exclusive.iter().all(|&t| {
            scheduler
                .cycle(t)
                .is_some_and(|(n, _, complete)| n > cycles || (n == cycles && complete))
        });
        if finished_all && (!exclusive.is_empty() || placed.len() >= scheduler.jobs().len()) {
            break;
        }
        let next_end = ends.iter().map(|e| e.0).fold(f64::INFINITY, f64::min);
        let next = next_end.min(scheduler.next_wakeup(now).unwrap_or(f64::INFINITY));
        if !next.is_finite() {
            break;
        }
        now = next.max(now);
        ends.retain(|&(end, job)| {
            if end <= now {
                scheduler.finished(job, now, JobEnd::Done);
                false
            } else {
                true
            }
        });
    }
    Simulation {
        jobs: scheduler.jobs,
        placed,
        skipped,
    }
}
