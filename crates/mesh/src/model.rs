//! What a mesh is once its file was read: hosts, tests, groups, and the jobs they make
//! (one test from one host to another).

pub use crate::host::{Host, Transport};
pub use crate::kinds::{
    TestKind, DEFAULT_STAMP_PORT, DEFAULT_TRACE_HOPS, MAX_STAMP_RATE, MAX_TRACE_FLOWS,
    MAX_TRACE_HOPS, RPM_SETUP_S, TRACE_GAP_S, TRACE_WAIT_S,
};
use std::collections::BTreeMap;

/// The most hosts one mesh may have, listed and discovered.
pub const MAX_HOSTS: usize = 4096;

/// A test runs this long when its file does not say.
pub const DEFAULT_TEST_SECONDS: f64 = 10.0;
/// A STAMP test's report window when the file does not say (`report`).
pub const DEFAULT_STAMP_REPORT_SECONDS: f64 = 60.0;
/// An RPM test's default time limit for each direction (as `linerate rpm --time`'s).
pub const DEFAULT_RPM_LEG_SECONDS: f64 = 20.0;

#[derive(Debug, Clone, PartialEq)]
pub struct Mesh {
    pub name: String,
    /// The agents' key file.
    pub key: Option<std::path::PathBuf>,
    /// The seed of every random choice (jitter, phases): from the file, else its name.
    pub seed: u64,
    /// Exclusive tests at once in the whole mesh; `None`: as many as disjoint hosts allow.
    pub max_exclusive: Option<u32>,
    pub hosts: Vec<Host>,
    pub tests: Vec<MeshTest>,
    pub groups: Vec<MeshGroup>,
    /// DNS names whose addresses are hosts too (a Kubernetes headless Service), resolved
    /// by the caller before the mesh runs ([`Mesh::with_discovered`]).
    pub discover: Vec<Discover>,
    /// When a pair is worse than its baseline, and where alerts go (`[alerts]`).
    pub alerts: AlertRules,
    /// How much of each job's document the store keeps (`[store]`).
    pub store: StorePolicy,
    /// How long the store keeps the mesh's rows, and their hourly aggregates
    /// (`[retention]`); `None`: everything, forever.
    pub retention: Option<Retention>,
}

/// The `[retention]` section: raw rows (with their documents) for `raw_s`, then each
/// series' hourly aggregates for `hourly_s` (`None`: forever). The coordinator applies
/// it in the background, a small transaction at a time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retention {
    pub raw_s: f64,
    pub hourly_s: Option<f64>,
}

/// The hourly aggregates' default span when `[retention]` names only `raw`: a year.
pub const DEFAULT_HOURLY_S: f64 = 365.0 * 86_400.0;

/// The `[store]` section: how much of each job's result document is kept. A mesh runs
/// thousands of jobs an hour; the row and a compact document (the figures and
/// percentiles) are enough to follow a pair, and the whole detail (histograms, per-thread
/// figures, the hosts' counters) is what a failure is looked into with.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StorePolicy {
    pub detail: Detail,
    /// Besides, one job's document in this many kept whole (0: none).
    pub detail_every: u64,
    /// Where results wait while the archive cannot take them (`spool`), else beside the
    /// results database (`linerate_store::spool::default_spool_path`).
    pub spool: Option<std::path::PathBuf>,
    /// The most bytes the spool holds (`spool_max`); 0: the default,
    /// [`DEFAULT_SPOOL_MAX`].
    pub spool_max: u64,
}

/// The spool's bound when the file does not set one: about 170,000 compact results, or
/// nearly two days of a 100-host mesh's rows alone.
pub const DEFAULT_SPOOL_MAX: u64 = 256 << 20;

/// Whose documents are kept whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Detail {
    /// Nobody's: every document compact.
    #[default]
    None,
    /// Failed jobs' (a partial run's detail shows where it broke).
    Failed,
    /// Every job's.
    All,
}

impl StorePolicy {
    pub fn spool_bound(&self) -> u64 {
        if self.spool_max == 0 {
            DEFAULT_SPOOL_MAX
        } else {
            self.spool_max
        }
    }

    /// Whether the `n`th stored document (counted from 0) of a job that `failed` is kept
    /// whole.
    pub fn keeps_whole(&self, n: u64, failed: bool) -> bool {
        match self.detail {
            Detail::All => true,
            Detail::Failed if failed => true,
            _ => self.detail_every > 0 && n.is_multiple_of(self.detail_every),
        }
    }
}

/// The `[alerts]` section: thresholds against each pair's baseline and the receivers.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertRules {
    /// Goodput below the baseline's median by more than this share.
    pub goodput_drop: f64,
    /// Transaction time above the baseline's median by more than this share...
    pub latency_rise: f64,
    /// ...and by at least this many seconds (`latency_rise_min`, 1 ms).
    pub latency_rise_min_s: f64,
    /// Responsiveness (RPM) below the baseline's median by more than this share.
    pub responsiveness_drop: f64,
    /// STAMP: a direction losing more than this share of its probes...
    pub loss_above: f64,
    /// ...for this long (seconds) opens an alert naming the pair and the direction.
    pub loss_for_s: f64,
    /// A call: a way whose mean opinion score is below this (1 to 4.5)...
    pub mos_below: f64,
    /// ...over this long (seconds) opens an alert naming the pair and the way.
    pub mos_for_s: f64,
    /// The baseline: the median of up to this many recent successful results...
    pub baseline: usize,
    /// ...once there are this many.
    pub at_least: usize,
    /// Alertmanager's base URL (alerts go to its /api/v2/alerts).
    pub alertmanager: Option<String>,
    /// A URL that gets every alert's opening and resolution as JSON.
    pub webhook: Option<String>,
    /// The grid's public URL, for the links in alerts (default: the listener's).
    pub grid_url: Option<String>,
}

impl Default for AlertRules {
    fn default() -> Self {
        AlertRules {
            goodput_drop: 0.3,
            latency_rise: 0.5,
            latency_rise_min_s: 0.001,
            responsiveness_drop: 0.3,
            loss_above: 0.001,
            loss_for_s: 300.0,
            mos_below: 3.6,
            mos_for_s: 300.0,
            baseline: 20,
            at_least: 3,
            alertmanager: None,
            webhook: None,
            grid_url: None,
        }
    }
}

/// How often a running mesh resolves its `discover` names again when the file does not say.
pub const DEFAULT_DISCOVER_SECONDS: f64 = 300.0;

/// A DNS name whose every address is a host of the mesh.
#[derive(Debug, Clone, PartialEq)]
pub struct Discover {
    pub name: String,
    pub port: u16,
    /// How often a running mesh resolves the name again (hosts come and go).
    pub every_s: f64,
    pub labels: BTreeMap<String, String>,
}

impl Mesh {
    /// The mesh with the hosts its `discover` names resolved to: `addresses[i]` are the
    /// addresses of `discover[i]`. Each becomes a host named by its address (`:` as `-`),
    /// joining the groups of every host (`hosts = ["*"]`); an address already named by a
    /// `[[host]]` is that host. `Err` names a discovery that found nothing.
    pub fn with_discovered(mut self, addresses: &[Vec<std::net::IpAddr>]) -> Result<Mesh, String> {
        for (discover, found) in self.discover.iter().zip(addresses) {
            if found.is_empty() {
                return Err(format!(
                    "discover '{}' resolves to no address",
                    discover.name
                ));
            }
            for ip in found {
                let address = std::net::SocketAddr::new(*ip, discover.port).to_string();
                let known = self.hosts.iter().any(|h| {
                    let listed = h
                        .address
                        .parse::<std::net::SocketAddr>()
                        .map(|a| a.ip())
                        .or_else(|_| h.address.parse::<std::net::IpAddr>());
                    listed.is_ok_and(|listed| listed == *ip)
                });
                if known {
                    continue;
                }
                if self.hosts.len() >= MAX_HOSTS {
                    return Err(format!(
                        "discover '{}' makes more than {} hosts",
                        discover.name, MAX_HOSTS
                    ));
                }
                self.hosts.push(Host {
                    name: ip.to_string().replace(':', "-"),
                    address,
                    labels: discover.labels.clone(),
                    reflector_only: false,
                    source: None,
                });
            }
        }
        let all: Vec<usize> = (0..self.hosts.len()).collect();
        for group in &mut self.groups {
            if group.every_host {
                group.hosts = all.clone();
            }
        }
        Ok(self)
    }
}

pub use linerate_model::TraceProbe;

#[derive(Debug, Clone, PartialEq)]
pub struct MeshTest {
    pub name: String,
    pub kind: TestKind,
    /// Kinds that mark their packets: the DSCP and ECN every packet carries both ways
    /// (`dscp`, `ecn`).
    pub marks: Option<linerate_model::marks::Marks>,
    pub seconds: f64,
    /// How often each of its jobs runs.
    pub interval_s: f64,
    /// Up to this much later than the interval says, drawn anew each time.
    pub jitter_s: f64,
    /// No host takes part in two exclusive tests at once, at either end (throughput).
    pub exclusive: bool,
    /// Light tests only: wait while either host is in an exclusive test.
    pub pause_for_exclusive: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// Every host with every other.
    Full,
    /// The center with every other host.
    Star { center: usize },
    /// These pairs (source first).
    Pairs(Vec<(usize, usize)>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct MeshGroup {
    pub name: String,
    pub hosts: Vec<usize>,
    /// `hosts = ["*"]` (or none given): every host, discovered ones too.
    pub every_host: bool,
    pub shape: Shape,
    /// Each pair both ways; else only from the first named (the center, for a star).
    pub both_ways: bool,
    pub tests: Vec<usize>,
}

/// One test from one host to another: what the scheduler places.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Job {
    pub test: usize,
    pub src: usize,
    /// The destination; for a test that fans out (multicast), the source itself: its
    /// receivers are [`Mesh::receivers`].
    pub dst: usize,
    /// Exclusive tests: the round of the test's cycle the job belongs in. Jobs of one
    /// round share no host, and a full mesh of n hosts (n even) needs 2(n - 1) rounds both
    /// ways, n - 1 one way.
    pub round: u32,
}

impl Mesh {
    /// Every job the groups make, each (test, source, destination) once, in round order
    /// for exclusive tests.
    pub fn jobs(&self) -> Vec<Job> {
        let hosts = self.hosts.len();
        let mut jobs = Vec::new();
        for test in 0..self.tests.len() {
            // The test's pairs in the order the groups make them (the circle method's,
            // which the rounds keep), each once: a bit per ordered pair says seen.
            let mut seen = vec![0u64; (hosts * hosts).div_ceil(64)];
            let mut ordered: Vec<Pair> = Vec::new();
            // STAMP and traces need nothing of their destination but its address.
            let stamp = self.tests[test].kind.kind().address_only();
            for group in self.groups.iter().filter(|g| g.tests.contains(&test)) {
                for (a, b) in pairs_of(group) {
                    // A host that only reflects sends nothing, and is the destination of
                    // STAMP tests and traces alone.
                    if self.hosts[a].reflector_only || (!stamp && self.hosts[b].reflector_only) {
                        continue;
                    }
                    let bit = a * hosts + b;
                    if seen[bit / 64] & (1 << (bit % 64)) == 0 {
                        seen[bit / 64] |= 1 << (bit % 64);
                        ordered.push((a, b));
                    }
                }
            }
            if self.tests[test].kind.kind().fans_out() {
                // One job per source, to every receiver its pairs name: the job's
                // destination is its source (the scheduler places it by its source
                // alone), its receivers are `receivers`.
                let mut is_source = vec![false; hosts];
                let mut sources: Vec<usize> = Vec::new();
                for &(src, _) in &ordered {
                    if !std::mem::replace(&mut is_source[src], true) {
                        sources.push(src);
                    }
                }
                jobs.extend(sources.into_iter().map(|src| Job {
                    test,
                    src,
                    dst: src,
                    round: 0,
                }));
                continue;
            }
            let rounds = rounds(&ordered, hosts);
            // In round order (a counting sort), each round in the order it filled.
            let mut order: Vec<usize> = (0..ordered.len()).collect();
            order.sort_by_key(|&i| rounds[i]);
            jobs.extend(order.into_iter().map(|i| Job {
                test,
                src: ordered[i].0,
                dst: ordered[i].1,
                round: rounds[i],
            }));
        }
        jobs
    }
}

impl Mesh {
    /// The hosts a job's results are counted at: its destination, or for a test that
    /// fans out, every host its groups pair its source with, in the order they make them.
    pub fn receivers(&self, job: &Job) -> Vec<usize> {
        if !self.tests[job.test].kind.kind().fans_out() {
            return vec![job.dst];
        }
        let mut receivers = Vec::new();
        for group in self.groups.iter().filter(|g| g.tests.contains(&job.test)) {
            for (a, b) in pairs_of(group) {
                if a == job.src && !self.hosts[b].reflector_only && !receivers.contains(&b) {
                    receivers.push(b);
                }
            }
        }
        receivers
    }
}

/// An ordered pair of hosts: (source, destination).
type Pair = (usize, usize);

/// The ordered pairs a group makes.
fn pairs_of(group: &MeshGroup) -> Vec<(usize, usize)> {
    let one_way: Vec<(usize, usize)> = match &group.shape {
        Shape::Full if group.hosts.len() < 2 => Vec::new(),
        Shape::Full => {
            // The circle method: n - 1 rounds of disjoint pairs (n even; with n odd one
            // host sits out each of n rounds). Pairs come out round by round, which is
            // the order `rounds` keeps.
            let mut ring: Vec<Option<usize>> = group.hosts.iter().copied().map(Some).collect();
            if ring.len() % 2 == 1 {
                ring.push(None);
            }
            let n = ring.len();
            let mut out = Vec::new();
            for round in 0..n - 1 {
                for i in 0..n / 2 {
                    let (a, b) = (ring[i], ring[n - 1 - i]);
                    if let (Some(a), Some(b)) = (a, b) {
                        // Alternate which end sends, so one way still spreads the load.
                        out.push(if (round + i) % 2 == 0 { (a, b) } else { (b, a) });
                    }
                }
                // Keep the first in place and turn the rest one step.
                let last = ring.pop().expect("two or more");
                ring.insert(1, last);
            }
            out
        }
        Shape::Star { center } => group
            .hosts
            .iter()
            .filter(|&&h| h != *center)
            .map(|&h| (*center, h))
            .collect(),
        Shape::Pairs(pairs) => pairs.clone(),
    };
    if !group.both_ways {
        return one_way;
    }
    let mut both = one_way.clone();
    both.extend(one_way.iter().map(|&(a, b)| (b, a)));
    both
}

/// Places ordered pairs in rounds of host-disjoint pairs, each in the first round where
/// both its hosts are free, in the order given: the circle method's rounds come out whole
/// (each is a perfect matching for n even, so the next cannot join it), and so a full mesh
/// keeps its n - 1 rounds one way and 2(n - 1) both ways. Returns each pair's round.
fn rounds(pairs: &[Pair], hosts: usize) -> Vec<u32> {
    // Per host, the rounds it is in, as bits: the first round free at both ends is the
    // first zero bit of the two OR-ed, a word at a time.
    let mut used: Vec<Vec<u64>> = vec![Vec::new(); hosts];
    let mut out = Vec::with_capacity(pairs.len());
    for &(a, b) in pairs {
        let words = used[a].len().max(used[b].len());
        let word = |bits: &Vec<u64>, w: usize| bits.get(w).copied().unwrap_or(0);
        let round = (0..=words)
            .find_map(|w| {
                let both = word(&used[a], w) | word(&used[b], w);
                (both != u64::MAX).then(|| w * 64 + both.trailing_ones() as usize)
            })
            .expect("the word past the last has room");
        for host in [a, b] {
            let bits = &mut used[host];
            if bits.len() <= round / 64 {
                bits.resize(round / 64 + 1, 0);
            }
            bits[round / 64] |= 1 << (round % 64);
        }
        out.push(round as u32);
    }
    out
}
