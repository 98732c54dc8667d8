use crate::schedule::simulate;
use crate::*;
use proptest::prelude::*;
use std::collections::BTreeSet;

/// A mesh of `n` hosts, full mesh both ways, one exclusive stream test of 10 s every hour
/// and, when `light`, a light rr test every 60 s.
fn mesh_text(n: usize, light: bool) -> String {
    let mut text = String::from("name = \"t\"\n");
    for i in 0..n {
        text += &format!(
            "[[host]]\nname = \"h{i}\"\naddress = \"10.0.0.{}\"\n",
            i + 1
        );
    }
    text += "[[test]]\nname = \"tput\"\nrun = \"stream\"\nduration = \"10s\"\ninterval = \"1h\"\n";
    let mut tests = vec!["\"tput\""];
    if light {
        text += "[[test]]\nname = \"lat\"\nrun = \"rr\"\nduration = \"5s\"\ninterval = \"60s\"\npause_for_exclusive = true\n";
        tests.push("\"lat\"");
    }
    text += &format!(
        "[[group]]\nname = \"all\"\ntests = [{}]\n",
        tests.join(", ")
    );
    text
}

fn mesh(n: usize, light: bool) -> Mesh {
    parse("m.toml", &mesh_text(n, light)).unwrap()
}

#[test]
fn a_full_mesh_makes_every_ordered_pair_in_2_n_minus_1_rounds() {
    for n in [2, 3, 4, 7, 10] {
        let m = mesh(n, false);
        let jobs = m.jobs();
        assert_eq!(jobs.len(), n * (n - 1), "n = {n}");
        let pairs: BTreeSet<(usize, usize)> = jobs.iter().map(|j| (j.src, j.dst)).collect();
        assert_eq!(pairs.len(), n * (n - 1));
        let rounds = jobs.iter().map(|j| j.round).max().unwrap() as usize + 1;
        // n even: 2(n - 1); n odd: one host sits out each round, 2n.
        let bound = if n % 2 == 0 { 2 * (n - 1) } else { 2 * n };
        assert_eq!(rounds, bound, "n = {n}");
        for round in 0..rounds as u32 {
            let mut hosts = BTreeSet::new();
            for job in jobs.iter().filter(|j| j.round == round) {
                assert!(
                    hosts.insert(job.src) && hosts.insert(job.dst),
                    "round {round} shares a host"
                );
            }
        }
    }
}

#[test]
fn stars_pairs_and_one_way_groups_make_their_jobs_once() {
    let text = r#"
[[host]]
name = "a"
address = "10.0.0.1"
[[host]]
name = "b"
address = "10.0.0.2:5202"
[[host]]
name = "c"
address = "[fd00::3]:5201"
labels = { site = "ams" }
[[test]]
name = "tput"
run = "stream"
interval = "4h"
jitter = "10m"
[[group]]
name = "star"
hosts = ["a", "b", "c"]
shape = "star"
center = "a"
directions = "one"
tests = ["tput"]
[[group]]
name = "extra"
shape = "pairs"
pairs = [["a", "b"], ["c", "b"]]
directions = "one"
tests = ["tput"]
"#;
    let m = parse("m.toml", text).unwrap();
    assert_eq!(m.hosts[2].labels["site"], "ams");
    assert_eq!(m.tests[0].interval_s, 14_400.0);
    assert_eq!(m.tests[0].jitter_s, 600.0);
    assert!(
        m.tests[0].exclusive,
        "a stream is exclusive unless the file says otherwise"
    );
    let pairs: Vec<(usize, usize)> = m.jobs().iter().map(|j| (j.src, j.dst)).collect();
    // a->b comes from both groups and is one job.
    assert_eq!(pairs.len(), 3, "{pairs:?}");
    assert!(pairs.contains(&(0, 1)) && pairs.contains(&(0, 2)) && pairs.contains(&(2, 1)));
}

#[test]
fn rr_and_crr_probes_read_their_rate() {
    let text = mesh_text(3, true);
    let paced = parse(
        "m.toml",
        &text.replace("run = \"rr\"", "run = \"crr\"\nrate = \"20/s\""),
    )
    .unwrap();
    let crr = paced.tests.iter().find(|t| t.name == "lat").unwrap();
    assert_eq!(
        crr.kind,
        TestKind::Crr(kinds::Crr {
            request: 1,
            response: 1,
            per_second: Some(20.0)
        })
    );
    assert!(!crr.exclusive, "a probe is light unless the file says so");
    let plain = parse(
        "m.toml",
        &text.replace("run = \"rr\"", "run = \"rr\"\nrate = \"0.5\""),
    )
    .unwrap();
    let rr = plain.tests.iter().find(|t| t.name == "lat").unwrap();
    assert!(matches!(rr.kind, TestKind::Rr(kinds::Rr { per_second: Some(r), .. }) if r == 0.5));
}

/// An RPM test: exclusive (it saturates the path), over TLS, 16 loads at most and 20 s a
/// direction unless the file says; the schedule allows both directions and the set-up.
#[test]
fn an_rpm_test_reads_its_defaults_and_is_scheduled_for_both_directions() {
    let text = mesh_text(3, true).replace(
        "run = \"rr\"\nduration = \"5s\"\ninterval = \"60s\"\npause_for_exclusive = true\n",
        "run = \"rpm\"\ninterval = \"60s\"\n",
    );
    let m = parse("m.toml", &text).unwrap();
    let rpm = m.tests.iter().find(|t| t.name == "lat").unwrap();
    assert_eq!(
        rpm.kind,
        TestKind::Rpm(kinds::Rpm {
            leg_s: DEFAULT_RPM_LEG_SECONDS,
            tls: true,
            max_connections: 16
        })
    );
    assert!(rpm.exclusive, "an RPM test loads the path: exclusive");
    assert_eq!(rpm.seconds, 2.0 * DEFAULT_RPM_LEG_SECONDS + RPM_SETUP_S);
    assert_eq!(rpm.kind.run(), "rpm");
    let m = parse(
        "m.toml",
        &text.replace(
            "run = \"rpm\"",
            "run = \"rpm\"\nduration = \"8s\"\ntls = false\nmax_connections = 4\nexclusive = false",
        ),
    )
    .unwrap();
    let rpm = m.tests.iter().find(|t| t.name == "lat").unwrap();
    assert_eq!(
        rpm.kind,
        TestKind::Rpm(kinds::Rpm {
            leg_s: 8.0,
            tls: false,
            max_connections: 4
        })
    );
    assert!(!rpm.exclusive);
    // Exclusive RPM jobs never share a host with a stream in the simulated schedule.
    let m = parse("m.toml", &text).unwrap();
    let plan = simulate(&m, 1, |job| m.tests[job.test].seconds + 1.0);
    assert_no_double_booking(&m, &plan.placed);
}

/// Each text fails to parse with one line that names the file and holds its needle.
fn assert_one_line_errors(cases: &[(String, &str)]) {
    for (text, needle) in cases {
        let err = parse("m.toml", text).unwrap_err();
        let shown = err.to_string();
        assert!(shown.contains(needle), "{needle}: {shown}");
        assert!(shown.starts_with("m.toml:") && err.line >= 1, "{shown}");
        assert_eq!(shown.lines().count(), 1, "{shown}");
    }
}

/// An RPM test's options on other runs, other runs' options on it, and its bounds.
#[test]
fn rpm_mistakes_in_a_mesh_file_are_one_line_too() {
    let good = mesh_text(3, true);
    let cases = [
        (
            good.replace("run = \"rr\"", "run = \"rpm\"\nsize = \"1k\""),
            "'size' is not an option of run = \"rpm\"",
        ),
        (
            good.replace("run = \"rr\"", "run = \"rpm\"\nmax_connections = 65"),
            "max_connections 65 must be between 1 and 64",
        ),
        (
            good.replace("run = \"rr\"", "run = \"rpm\"\nprotocol = \"udp\""),
            "'protocol' is not an option of run = \"rpm\"",
        ),
        (
            good.replace(
                "run = \"rr\"\nduration = \"5s\"",
                "run = \"rpm\"\nduration = \"1s\"",
            ),
            "must be at least 2 s",
        ),
        (
            good.replace("run = \"stream\"", "run = \"stream\"\nmax_connections = 4"),
            "'max_connections' is not an option of run = \"stream\"",
        ),
        (
            good.replace("run = \"stream\"", "run = \"stream\"\ntls = false"),
            // Every kind takes its own options; what it leaves is refused at its place.
            "14:1: 'tls' is not an option of run = \"stream\"",
        ),
    ];
    assert_one_line_errors(&cases);
}

#[test]
fn mistakes_in_a_mesh_file_are_one_line_naming_the_place() {
    let good = mesh_text(3, true);
    let cases = [
        (
            good.replace(
                "tests = [\"tput\", \"lat\"]",
                "hosts = [\"h0\", \"h9\"]\ntests = [\"tput\"]",
            ),
            "unknown host 'h9'",
        ),
        (
            good.replace("interval = \"1h\"", "interval = \"often\""),
            "interval 'often' is not a time",
        ),
        (
            good.replace("interval = \"1h\"", "interval = \"0s\""),
            "interval '0s' must be above 0",
        ),
        (
            good.replace("name = \"h1\"", "name = \"h0\""),
            "host 'h0' is named twice",
        ),
        (
            good.replace("name = \"lat\"", "name = \"tput\""),
            "test 'tput' is named twice",
        ),
        (
            good.replace("\"lat\"]", "\"latency\"]"),
            "unknown test 'latency'",
        ),
        (
            good.replace("run = \"rr\"", "run = \"ping\""),
            // Every kind of the table is named; the list grows with it.
            "run 'ping' is not stream, rr, crr, rpm, stamp",
        ),
        (
            good.replace("run = \"rr\"", "run = \"rr\"\nrate = \"fast\""),
            "rate 'fast' is not transactions per second",
        ),
        (
            good.replace("run = \"rr\"", "run = \"crr\"\nprotocol = \"udp\""),
            "crr over udp does not run in a mesh",
        ),
        (
            good.replace(
                "duration = \"10s\"",
                "duration = \"10s\"\nprotocol = \"udp\"",
            ),
            "a UDP stream needs a rate",
        ),
        (
            good.replace("interval = \"60s\"", "interval = \"60s\"\njitter = \"2m\""),
            "must be less than the interval",
        ),
        (
            good.replace("address = \"10.0.0.2\"", "address = \"10.0.0 .2\""),
            "is not a host name or address",
        ),
        (
            good.replace("name = \"t\"", "name = \"t\"\ncolour = \"red\""),
            "unknown field `colour`",
        ), // A key no reader of the test took, at its place; a value of the wrong type, named.
        (
            good.replace("duration = \"10s\"", "duraton = \"10s\""),
            "'duraton' is not an option of run = \"stream\"",
        ),
        (
            good.replace("run = \"stream\"", "run = \"stream\"\nparallel = \"4\""),
            "parallel: invalid type: string \"4\", expected u32",
        ),
        (good.replace("interval = \"1h\"\n", ""), "needs an interval"),
    ];
    assert_one_line_errors(&cases);
    // The position is the offending value's.
    let err = parse(
        "m.toml",
        &good.replace("interval = \"1h\"", "interval = \"often\""),
    )
    .unwrap_err();
    let line = good.lines().position(|l| l == "interval = \"1h\"").unwrap() + 1;
    assert_eq!((err.line, err.col), (line, 12), "{err}");
}

#[test]
fn a_full_mesh_cycle_takes_its_rounds_and_never_double_books() {
    for n in [4, 6, 10] {
        let m = mesh(n, false);
        let crate::schedule::Simulation {
            placed, skipped, ..
        } = simulate(&m, 1, |_| 10.0);
        assert!(skipped.is_empty());
        let first: Vec<&Placed> = placed.iter().filter(|p| p.cycle == 1).collect();
        assert_eq!(first.len(), n * (n - 1));
        let end = first.iter().map(|p| p.end).fold(0.0, f64::max);
        assert_eq!(
            end,
            10.0 * 2.0 * (n as f64 - 1.0),
            "n = {n}: the cycle is its rounds"
        );
        assert_no_double_booking(&m, &placed);
    }
}

#[test]
fn max_exclusive_bounds_the_mesh_and_light_probes_spread_over_their_interval() {
    let mut m = mesh(6, true);
    m.max_exclusive = Some(1);
    let placed = simulate(&m, 1, |job| if job.test == 0 { 10.0 } else { 5.0 }).placed;
    let exclusive: Vec<&Placed> = placed
        .iter()
        .filter(|p| m.jobs()[p.job].test == 0)
        .collect();
    for (a, b) in exclusive.iter().zip(exclusive.iter().skip(1)) {
        assert!(
            b.start >= a.end,
            "one exclusive test at a time: {a:?} {b:?}"
        );
    }
    // Light probes pause for an exclusive test on either host.
    assert_no_light_beside_exclusive(&m, &placed);
    // Unpaused, they do not fire together: their first starts spread over the minute
    // (Goldpinger's probes, fired together, gave a p99 of 2 s).
    m.tests[1].pause_for_exclusive = false;
    let placed = simulate(&m, 1, |job| if job.test == 0 { 10.0 } else { 5.0 }).placed;
    let mut firsts: Vec<f64> = Vec::new();
    for job in 0..m.jobs().len() {
        if m.jobs()[job].test == 1 {
            let first = placed
                .iter()
                .find(|p| p.job == job)
                .expect("every probe ran");
            firsts.push(first.start);
        }
    }
    firsts.sort_by(f64::total_cmp);
    firsts.dedup();
    assert_eq!(firsts.len(), 30, "{firsts:?}");
    assert!(firsts[0] < 10.0 && firsts[29] > 50.0, "{firsts:?}");
}

fn assert_no_double_booking(m: &Mesh, placed: &[Placed]) {
    let jobs = m.jobs();
    let exclusive: Vec<&Placed> = placed
        .iter()
        .filter(|p| m.tests[jobs[p.job].test].exclusive)
        .collect();
    for (i, a) in exclusive.iter().enumerate() {
        for b in &exclusive[i + 1..] {
            let overlap = a.start < b.end && b.start < a.end;
            let (ja, jb) = (jobs[a.job], jobs[b.job]);
            let shared = [ja.src, ja.dst]
                .iter()
                .any(|h| *h == jb.src || *h == jb.dst);
            assert!(!(overlap && shared), "double-booked: {a:?} {b:?}");
        }
    }
}

fn assert_no_light_beside_exclusive(m: &Mesh, placed: &[Placed]) {
    let jobs = m.jobs();
    for light in placed
        .iter()
        .filter(|p| m.tests[jobs[p.job].test].pause_for_exclusive)
    {
        for heavy in placed
            .iter()
            .filter(|p| m.tests[jobs[p.job].test].exclusive)
        {
            let (jl, jh) = (jobs[light.job], jobs[heavy.job]);
            let shared = [jl.src, jl.dst]
                .iter()
                .any(|h| *h == jh.src || *h == jh.dst);
            // A light job may be running when an exclusive one starts (it was there
            // first); it never starts while one runs.
            let started_inside = light.start >= heavy.start && light.start < heavy.end;
            assert!(
                !(shared && started_inside),
                "{light:?} started during {heavy:?}"
            );
        }
    }
}

/// Runs the scheduler by hand: jobs involving `dead` fail (laid at it) until `revive`.
fn run_with_failures(m: &Mesh, dead: usize, revive: f64, until: f64) -> (Vec<Placed>, Vec<Action>) {
    let mut s = Scheduler::new(m, 0.0);
    let mut placed = Vec::new();
    let mut skipped = Vec::new();
    let mut ends: Vec<(f64, usize, bool)> = Vec::new();
    let mut now = 0.0;
    while now < until {
        for action in s.poll(now) {
            match action {
                Action::Start { job, cycle } => {
                    let j = s.jobs()[job];
                    let fails = (j.src == dead || j.dst == dead) && now < revive;
                    // A dead host's failure shows at once (refused); a test runs 10 s.
                    let end = now + if fails { 0.5 } else { 10.0 };
                    ends.push((end, job, fails));
                    placed.push(Placed {
                        job,
                        cycle,
                        start: now,
                        end,
                    });
                }
                skip => skipped.push(skip),
            }
        }
        let next_end = ends.iter().map(|e| e.0).fold(f64::INFINITY, f64::min);
        let next = next_end
            .min(s.next_wakeup(now).unwrap_or(f64::INFINITY))
            .min(until);
        now = next.max(now + 1e-9);
        ends.retain(|&(end, job, fails)| {
            if end > now {
                return true;
            }
            let outcome = if fails {
                JobEnd::Failed {
                    hosts: vec![dead],
                    reason: "connection refused".into(),
                }
            } else {
                JobEnd::Done
            };
            s.finished(job, now, outcome);
            false
        });
    }
    (placed, skipped)
}

#[test]
fn a_dead_host_is_skipped_with_its_reason_and_measured_again_once_back() {
    let mut m = mesh(6, false);
    m.tests[0].interval_s = 200.0;
    let (placed, skipped) = run_with_failures(&m, 2, 150.0, 600.0);
    let jobs = m.jobs();
    // Cycle 1: every pair without host 2 measured; host 2's first job failed, the rest
    // of its jobs skipped naming it.
    let ok_first: BTreeSet<usize> = placed
        .iter()
        .filter(|p| p.cycle == 1 && p.end - p.start == 10.0)
        .map(|p| p.job)
        .collect();
    let healthy = jobs.iter().filter(|j| j.src != 2 && j.dst != 2).count();
    assert_eq!(ok_first.len(), healthy);
    assert!(!skipped.is_empty());
    for skip in &skipped {
        let Action::Skip { down, .. } = skip else {
            unreachable!()
        };
        let reason = down.to_string();
        assert!(
            reason.contains("host h2 is down") && reason.contains("connection refused"),
            "{reason}"
        );
    }
    // The others were not held: cycle 1 ended within its 10 rounds and a failure or two.
    let end_1 = placed
        .iter()
        .filter(|p| p.cycle == 1)
        .map(|p| p.end)
        .fold(0.0, f64::max);
    assert!(end_1 <= 10.0 * 10.0 + 5.0, "cycle 1 ended at {end_1}");
    // Back at 150 s: cycle 2 (due at 200 s) measures every pair, host 2's too.
    let second: BTreeSet<usize> = placed
        .iter()
        .filter(|p| p.cycle == 2 && p.end - p.start == 10.0)
        .map(|p| p.job)
        .collect();
    assert_eq!(second.len(), jobs.len());
    assert_no_double_booking(&m, &placed);
}

#[test]
fn a_restarted_scheduler_carries_on_the_cycle_from_the_store() {
    let m = mesh(6, false);
    let placed = simulate(&m, 1, |_| 10.0).placed;
    // The coordinator stopped at 45 s: what had finished is in the store.
    let past: Vec<Past> = placed
        .iter()
        .filter(|p| p.end <= 45.0)
        .map(|p| Past {
            job: p.job,
            cycle: p.cycle,
            started_at: p.start,
            ended_at: p.end,
        })
        .collect();
    let done: BTreeSet<usize> = past.iter().map(|p| p.job).collect();
    let mut s = Scheduler::new(&m, 50.0);
    s.resume(&past, 50.0);
    let started: BTreeSet<usize> = s
        .poll(50.0)
        .into_iter()
        .filter_map(|a| match a {
            Action::Start { job, cycle } => {
                assert_eq!(cycle, 1, "the same cycle goes on");
                Some(job)
            }
            _ => None,
        })
        .collect();
    assert!(!started.is_empty());
    assert!(started.is_disjoint(&done), "nothing done is run again");
    // The next cycle is due an hour after the first began, not an hour after the restart.
    let (number, began, _) = s.cycle(0).unwrap();
    assert_eq!((number, began), (1, 0.0));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any mesh size, durations and max_exclusive: no host in two exclusive tests at once,
    /// and every ordered pair exactly once per cycle.
    #[test]
    fn never_double_booked_and_every_pair_once_per_cycle(
        n in 2usize..12,
        limit in proptest::option::of(1u32..6),
        light in any::<bool>(),
        durations in proptest::collection::vec(1.0f64..30.0, 1..8),
    ) {
        let mut m = mesh(n, light);
        m.max_exclusive = limit;
        let placed = simulate(&m, 2, |job| durations[(job.src * 7 + job.dst) % durations.len()]).placed;
        assert_no_double_booking(&m, &placed);
        if light {
            assert_no_light_beside_exclusive(&m, &placed);
        }
        let jobs = m.jobs();
        for cycle in [1, 2] {
            let mut seen = Vec::new();
            for p in placed.iter().filter(|p| p.cycle == cycle && jobs[p.job].test == 0) {
                seen.push(p.job);
            }
            seen.sort_unstable();
            let all: Vec<usize> = (0..jobs.len()).filter(|&j| jobs[j].test == 0).collect();
            prop_assert_eq!(seen, all, "cycle {}", cycle);
        }
    }

    /// Under failures of any one host, every pair of the others is measured every cycle.
    #[test]
    fn a_failing_host_never_costs_the_others_their_cycle(n in 3usize..10, dead_pick in 0usize..10) {
        let dead = dead_pick % n;
        let mut m = mesh(n, false);
        m.tests[0].interval_s = 400.0;
        let (placed, _) = run_with_failures(&m, dead, f64::INFINITY, 1200.0);
        let jobs = m.jobs();
        for cycle in [1, 2] {
            let measured: BTreeSet<usize> = placed
                .iter()
                .filter(|p| p.cycle == cycle && p.end - p.start == 10.0)
                .map(|p| p.job)
                .collect();
            let healthy: BTreeSet<usize> = (0..jobs.len())
                .filter(|&j| jobs[j].src != dead && jobs[j].dst != dead)
                .collect();
            prop_assert_eq!(measured, healthy, "cycle {}", cycle);
        }
    }
}

/// Hosts from a DNS name with many addresses (a headless Service): each address a host,
/// in every group of every host, named by its address; one already listed stays itself.
#[test]
fn discovered_addresses_become_hosts_of_every_host_groups() {
    let text = r#"
[[host]]
name = "fixed"
address = "10.0.0.1:5201"
[[discover]]
name = "agents.linerate.svc"
port = 5202
labels = { pool = "k8s" }
[[test]]
name = "tput"
run = "stream"
interval = "1h"
[[group]]
name = "all"
tests = ["tput"]
[[group]]
name = "fixed-only"
hosts = ["fixed"]
shape = "pairs"
pairs = []
tests = ["tput"]
"#;
    let m = parse("m.toml", text).unwrap();
    assert_eq!(m.discover[0].port, 5202);
    let ips: Vec<std::net::IpAddr> = ["10.0.0.1", "10.0.0.7", "fd00::9"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    let m = m.with_discovered(&[ips]).unwrap();
    let names: Vec<&str> = m.hosts.iter().map(|h| h.name.as_str()).collect();
    // 10.0.0.1 is "fixed" already (same address, other port): not twice.
    assert_eq!(names, ["fixed", "10.0.0.7", "fd00--9"]);
    assert_eq!(m.hosts[2].address, "[fd00::9]:5202");
    assert_eq!(m.hosts[1].labels["pool"], "k8s");
    assert_eq!(m.groups[0].hosts, [0, 1, 2]);
    assert_eq!(m.jobs().len(), 6);
    let empty = parse("m.toml", text).unwrap().with_discovered(&[vec![]]);
    assert!(empty.unwrap_err().contains("resolves to no address"));
}

#[test]
fn a_skip_points_to_the_kept_reason_instead_of_repeating_it() {
    let down = linerate_mesh_down();
    let pointing = down.describe(Some("run 42"));
    assert!(
        pointing.contains("host h2 is down after 3 failure(s)"),
        "{pointing}"
    );
    assert!(
        pointing.contains("run 42") && !pointing.contains("refused"),
        "{pointing}"
    );
    // Without a store the reason is all there is, so the text carries it.
    assert!(down.to_string().contains("connection refused"));
}

fn linerate_mesh_down() -> crate::Down {
    crate::Down {
        host: 2,
        name: "h2".into(),
        failures: 3,
        retry_in_s: 120.0,
        reason: "connection refused".into(),
    }
}

/// A STAMP test runs all the time: its report window is each job's length (1 minute by
/// default) and the next starts as one ends; 10 probes a second to port 862 unless the
/// file says. A host that only reflects is the destination of STAMP jobs and of nothing
/// else, never a source; its reflector is at the address it gives, an agent host's at its
/// address with the test's port.
#[test]
fn stamp_tests_run_all_the_time_and_reflector_hosts_only_answer() {
    let text = format!(
        "{}[[host]]\nname = \"r1\"\naddress = \"10.0.0.9:8620\"\nreflector = \"stamp\"\n\
         [[test]]\nname = \"loss\"\nrun = \"stamp\"\nrate = \"50/s\"\ndscp = \"EF\"\n\
         [[group]]\nname = \"probes\"\ntests = [\"loss\", \"tput\"]\n\
         [alerts]\nloss_above = \"0.05%\"\nfor = \"5m\"\n",
        mesh_text(2, false)
    );
    let m = parse("m.toml", &text).unwrap();
    let loss = m.tests.iter().position(|t| t.name == "loss").unwrap();
    let test = &m.tests[loss];
    assert_eq!(
        test.kind,
        TestKind::Stamp(kinds::Stamp {
            rate_pps: 50.0,
            size: None,
            dscp: Some(46),
            port: DEFAULT_STAMP_PORT
        })
    );
    assert_eq!((test.seconds, test.interval_s), (60.0, 60.0));
    assert!(!test.exclusive && !test.pause_for_exclusive);
    assert_eq!(m.alerts.loss_above, 0.0005);
    assert_eq!(m.alerts.loss_for_s, 300.0);
    let jobs = m.jobs();
    let name = |i: usize| m.hosts[i].name.as_str();
    let stamp: BTreeSet<(&str, &str)> = jobs
        .iter()
        .filter(|j| j.test == loss)
        .map(|j| (name(j.src), name(j.dst)))
        .collect();
    let expected: BTreeSet<(&str, &str)> =
        [("h0", "h1"), ("h1", "h0"), ("h0", "r1"), ("h1", "r1")].into();
    assert_eq!(stamp, expected);
    assert!(
        jobs.iter()
            .filter(|j| j.test != loss)
            .all(|j| name(j.src) != "r1" && name(j.dst) != "r1"),
        "a reflector host runs no stream"
    );
    let plan_of = |src: &str, dst: &str| {
        let job = jobs
            .iter()
            .find(|j| j.test == loss && name(j.src) == src && name(j.dst) == dst)
            .unwrap();
        match plan::job_plan(&m, job) {
            plan::JobPlan::Source {
                kind: "stamp",
                spec,
            } => (
                spec["reflector"].as_str().unwrap().to_string(),
                spec["window_s"].as_f64().unwrap(),
                spec["rate"].as_f64().unwrap(),
            ),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(plan_of("h0", "r1"), ("10.0.0.9:8620".into(), 60.0, 50.0));
    assert_eq!(plan_of("h0", "h1"), ("10.0.0.2:862".into(), 60.0, 50.0));
}

/// A trace is light (never exclusive), ends when answered (no duration; its job's
/// length is every probe at 5 ms and a wait), goes to any host's address (one that only
/// reflects too) and leaves each pair's flows from ports of the pair's own, the same
/// every time, above the ephemeral range and apart between pairs.
#[test]
fn trace_tests_go_to_every_destination_from_the_pairs_own_ports() {
    let text = format!(
        "{}[[host]]\nname = \"r1\"\naddress = \"10.0.0.9:8620\"\nreflector = \"stamp\"\n\
         [[test]]\nname = \"path\"\nrun = \"trace\"\nprotocol = \"icmp\"\nparallel = 4\n\
         max_hops = 20\ninterval = \"5m\"\n\
         [[group]]\nname = \"traces\"\ntests = [\"path\"]\n",
        mesh_text(2, false)
    );
    let m = parse("m.toml", &text).unwrap();
    let path = m.tests.iter().position(|t| t.name == "path").unwrap();
    let test = &m.tests[path];
    assert_eq!(
        test.kind,
        TestKind::Trace(kinds::Trace {
            probe: TraceProbe::Icmp,
            flows: 4,
            max_hops: 20,
            port: None,
            mtu: false
        })
    );
    assert!(!test.exclusive);
    assert!((test.seconds - (4.0 * 20.0 * TRACE_GAP_S + TRACE_WAIT_S + 1.0)).abs() < 1e-9);
    assert_eq!(test.kind.protocol_label(), "icmp");
    let jobs: Vec<Job> = m.jobs().into_iter().filter(|j| j.test == path).collect();
    let name = |i: usize| m.hosts[i].name.as_str();
    let pairs: BTreeSet<(&str, &str)> = jobs.iter().map(|j| (name(j.src), name(j.dst))).collect();
    let expected: BTreeSet<(&str, &str)> =
        [("h0", "h1"), ("h1", "h0"), ("h0", "r1"), ("h1", "r1")].into();
    assert_eq!(pairs, expected);
    let mut ports = BTreeSet::new();
    for job in &jobs {
        let plan::JobPlan::Source {
            kind: "trace",
            spec,
        } = plan::job_plan(&m, job)
        else {
            panic!("not a trace");
        };
        let target = spec["target"].as_str().unwrap().to_string();
        let source_port = spec["source_port"].as_u64().unwrap();
        assert!(!target.contains(':'), "{target}: the address alone");
        assert!(
            (61_000..=65_535 - 3).contains(&source_port),
            "{source_port}"
        );
        assert_eq!(
            plan::job_plan(&m, job),
            plan::job_plan(&m, job),
            "the same every time"
        );
        ports.insert(source_port);
    }
    assert_eq!(ports.len(), jobs.len(), "each pair its own ports");
    let bad = |extra: &str| {
        parse("m.toml", &text.replace("max_hops = 20", extra))
            .unwrap_err()
            .to_string()
    };
    assert!(bad("max_hops = 65").contains("max_hops 65 must be between 1 and 64"));
    assert!(bad("max_hops = 20\nport = 80").contains("ICMP echo has none"));
    assert!(bad("max_hops = 20\nduration = \"5s\"").contains("it has no duration"));
    assert!(bad("max_hops = 20\ndscp = \"EF\"").contains("'dscp' is not an option"));
    // Any probe finds the MTU.
    assert!(parse(
        "m.toml",
        &text.replace("max_hops = 20", "max_hops = 20\nmtu = true")
    )
    .is_ok());
    assert!(
        parse("m.toml", &text.replace("parallel = 4", "parallel = 17"))
            .unwrap_err()
            .to_string()
            .contains("between 1 and 16")
    );
    assert!(parse("m.toml", &text.replace("\"icmp\"", "\"gre\""))
        .unwrap_err()
        .to_string()
        .contains("is not udp, tcp or icmp"));
}

/// A stream, rr or crr test's `dscp` and `ecn` mark the connection its profile opens (set
/// at both ends); RPM takes neither, STAMP no `ecn` (its DSCP is its own field).
#[test]
fn marks_of_a_mesh_test_reach_its_jobs_connections() {
    let text = mesh_text(2, true)
        .replace(
            "run = \"stream\"",
            "run = \"stream\"\ndscp = \"AF41\"\necn = true",
        )
        .replace("run = \"rr\"", "run = \"rr\"\ndscp = \"46\"");
    let m = parse("m.toml", &text).unwrap();
    let marks = |name: &str| m.tests.iter().find(|t| t.name == name).unwrap().marks;
    assert_eq!(
        marks("tput"),
        Some(linerate_model::marks::Marks {
            dscp: 34,
            ecn: true
        })
    );
    assert_eq!(
        marks("lat"),
        Some(linerate_model::marks::Marks {
            dscp: 46,
            ecn: false
        })
    );
    for job in m.jobs() {
        let plan::JobPlan::Profile(profile) = plan::job_plan(&m, &job) else {
            panic!("a stream or rr job runs a profile");
        };
        let connects: Vec<_> = profile
            .groups
            .iter()
            .flat_map(|g| &g.transactions)
            .flat_map(|t| &t.ops)
            .filter_map(|op| match &op.action {
                linerate_profile::Action::Connect(e) => Some(e.marks),
                _ => None,
            })
            .collect();
        assert!(!connects.is_empty());
        assert!(
            connects.iter().all(|c| *c == m.tests[job.test].marks),
            "{connects:?}"
        );
    }
    let cases = [
        (
            mesh_text(2, false).replace("run = \"stream\"", "run = \"stream\"\ndscp = \"gold\""),
            "dscp 'gold' is not a DSCP",
        ),
        (
            mesh_text(2, false).replace("run = \"stream\"", "run = \"rpm\"\ndscp = \"EF\""),
            "'dscp' is not an option of run = \"rpm\"",
        ),
        (
            mesh_text(2, false).replace(
                "run = \"stream\"\nduration = \"10s\"",
                "run = \"stamp\"\necn = true",
            ),
            "'ecn' is not an option of run = \"stamp\"",
        ),
    ];
    assert_one_line_errors(&cases);
}

/// STAMP's options and their bounds, one line each.
#[test]
fn stamp_mistakes_in_a_mesh_file_are_one_line_too() {
    let good = mesh_text(2, false)
        + "[[test]]\nname = \"loss\"\nrun = \"stamp\"\n[[group]]\nname = \"p\"\ntests = [\"loss\"]\n";
    let cases = [
        (
            good.replace("run = \"stamp\"", "run = \"stamp\"\nrate = \"20000/s\""),
            "from 0.1 to 10000",
        ),
        (
            good.replace("run = \"stamp\"", "run = \"stamp\"\nduration = \"5s\""),
            "give its window as report",
        ),
        (
            good.replace("run = \"stamp\"", "run = \"stamp\"\nsize = \"20\""),
            "size '20' must be from 44 to 9000",
        ),
        (
            good.replace("run = \"stamp\"", "run = \"stamp\"\ndscp = \"XY\""),
            "dscp 'XY' is not a DSCP",
        ),
        (
            good.replace(
                "run = \"stamp\"",
                "run = \"stamp\"\nreport = \"1m\"\ninterval = \"10s\"",
            ),
            "shorter than the report window",
        ),
        (
            good.replace("run = \"stream\"", "run = \"stream\"\nreport = \"1m\""),
            "'report' is not an option of run = \"stream\"",
        ),
        (
            good.replace(
                "address = \"10.0.0.1\"",
                "address = \"10.0.0.1\"\nreflector = \"twamp\"",
            ),
            "reflector 'twamp' is not \"stamp\"",
        ),
        (
            good.replace(
                "run = \"stream\"\nduration = \"10s\"\ninterval = \"1h\"",
                "run = \"stream\"",
            ),
            "test 'tput' needs an interval",
        ),
        (
            good.clone() + "[alerts]\nloss_above = \"100%\"\n",
            "must be below 100%",
        ),
    ];
    assert_one_line_errors(&cases);
}

/// `[store]`: compact documents by default; whole ones for failed jobs, for one job in
/// N, or for all, as the file says; a wrong word is one line naming it and its place.
#[test]
fn the_store_section_says_whose_documents_are_kept_whole() {
    let m = parse("m.toml", &mesh_text(2, false)).unwrap();
    assert_eq!(m.store, StorePolicy::default());
    assert!(!(0..10).any(|n| m.store.keeps_whole(n, false) || m.store.keeps_whole(n, true)));
    let text = format!(
        "{}[store]\ndetail = \"failed\"\ndetail_every = 10\nspool = \"/var/lib/linerate/spool.db\"\nspool_max = \"64M\"\n",
        mesh_text(2, false)
    );
    let m = parse("m.toml", &text).unwrap();
    assert_eq!(
        m.store,
        StorePolicy {
            detail: Detail::Failed,
            detail_every: 10,
            spool: Some("/var/lib/linerate/spool.db".into()),
            spool_max: 64 << 20,
        }
    );
    assert_eq!(m.store.spool_bound(), 64 << 20);
    assert_eq!(StorePolicy::default().spool_bound(), DEFAULT_SPOOL_MAX);
    let whole: Vec<u64> = (0..25).filter(|&n| m.store.keeps_whole(n, false)).collect();
    assert_eq!(whole, [0, 10, 20]);
    assert!((0..25).all(|n| m.store.keeps_whole(n, true)));
    let all = StorePolicy {
        detail: Detail::All,
        ..StorePolicy::default()
    };
    assert!((0..5).all(|n| all.keeps_whole(n, false)));
    let text = mesh_text(2, false);
    let line = text.lines().count() + 2;
    let bad = format!("{text}[store]\ndetail = \"some\"\n");
    let e = parse("m.toml", &bad).unwrap_err().to_string();
    assert!(
        e.contains(&format!("m.toml:{line}:"))
            && e.contains("detail 'some' must be \"none\", \"failed\" or \"all\""),
        "{e}"
    );
    for (value, said) in [("\"10k\"", "at least 1M"), ("\"lots\"", "spool_max: ")] {
        let bad = format!("{text}[store]\nspool_max = {value}\n");
        let e = parse("m.toml", &bad).unwrap_err().to_string();
        assert!(
            e.contains(&format!("m.toml:{line}:")) && e.contains(said),
            "{e}"
        );
    }
}

#[test]
fn retention_reads_ages_and_refuses_what_cannot_hold() {
    let text = mesh_text(2, false);
    assert_eq!(parse("m.toml", &text).unwrap().retention, None);
    let with = |section: &str| parse("m.toml", &format!("{text}[retention]\n{section}"));
    let r = with("raw = \"14d\"\n").unwrap().retention.unwrap();
    assert_eq!(r.raw_s, 14.0 * 86_400.0);
    assert_eq!(r.hourly_s, Some(DEFAULT_HOURLY_S));
    let r = with("raw = \"2w\"\nhourly = \"90d\"\n")
        .unwrap()
        .retention
        .unwrap();
    assert_eq!(
        (r.raw_s, r.hourly_s),
        (14.0 * 86_400.0, Some(90.0 * 86_400.0))
    );
    let r = with("raw = \"36h\"\nhourly = \"forever\"\n")
        .unwrap()
        .retention
        .unwrap();
    assert_eq!(r.hourly_s, None);
    let line = text.lines().count() + 2;
    for (section, said) in [
        ("raw = \"10m\"\n", "raw '10m' must be at least 1h"),
        ("raw = \"soon\"\n", "raw 'soon' is not an age"),
        (
            "raw = \"30d\"\nhourly = \"7d\"\n",
            "must be at least raw '30d'",
        ),
        ("hourly = \"7d\"\n", "missing field `raw`"),
    ] {
        let e = with(section).unwrap_err().to_string();
        assert!(e.contains("m.toml:") && e.contains(said), "{section}: {e}");
        if !section.starts_with("hourly") {
            assert!(
                e.contains(&format!("m.toml:{line}:"))
                    || e.contains(&format!("m.toml:{}:", line + 1)),
                "{e}"
            );
        }
    }
}

/// A host's `source` and `source_dev` go into every connection its jobs open (the source
/// host's agent dials from there); another host's jobs leave as their routes say.
#[test]
fn a_hosts_source_is_where_its_jobs_connections_leave_from() {
    let text = mesh_text(2, true).replace(
        "address = \"10.0.0.1\"\n",
        "address = \"10.0.0.1\"\nsource = \"192.0.2.7\"\nsource_dev = \"eth1\"\n",
    );
    let m = parse("m.toml", &text).unwrap();
    let named = linerate_model::Source {
        address: Some("192.0.2.7".parse().unwrap()),
        device: Some("eth1".into()),
        mptcp: false,
    };
    assert_eq!(m.hosts[0].source.as_ref(), Some(&named));
    assert_eq!(m.hosts[1].source, None);
    for job in m.jobs() {
        let plan::JobPlan::Profile(profile) = plan::job_plan(&m, &job) else {
            panic!("a stream or rr job runs a profile");
        };
        let sources: Vec<_> = profile
            .groups
            .iter()
            .flat_map(|g| &g.transactions)
            .flat_map(|t| &t.ops)
            .filter_map(|op| match &op.action {
                linerate_profile::Action::Connect(e) => Some(e.source.clone()),
                _ => None,
            })
            .collect();
        assert!(!sources.is_empty());
        let expected = (job.src == 0).then(|| named.clone());
        assert!(sources.iter().all(|s| *s == expected), "{sources:?}");
    }
    let cases = [
        (
            mesh_text(2, false).replace(
                "address = \"10.0.0.1\"\n",
                "address = \"10.0.0.1\"\nsource = \"here\"\n",
            ),
            "source 'here' is not an IP address",
        ),
        (
            mesh_text(2, false).replace(
                "address = \"10.0.0.1\"\n",
                "address = \"10.0.0.1\"\nsource_dev = \"a/very/long/interface\"\n",
            ),
            "source_dev 'a/very/long/interface' is not an interface name",
        ),
    ];
    assert_one_line_errors(&cases);
}

/// A call between every pair: G.711 and a 60 ms jitter buffer unless the file says, a
/// job that asks the source's agent to call the destination's server for the test's
/// duration with the test's marks, and the `[alerts]` bound its score is held to.
#[test]
fn a_voip_test_calls_every_destinations_server_with_its_codec_and_marks() {
    let voip = |options: &str| {
        mesh_text(2, false).replace(
            "run = \"stream\"\nduration = \"10s\"",
            &format!("run = \"voip\"\nduration = \"30s\"{options}"),
        )
    };
    let m = parse("m.toml", &voip("")).unwrap();
    let test = &m.tests[0];
    assert_eq!(
        test.kind,
        TestKind::Voip(kinds::Voip {
            call: linerate_model::call::CallSettings {
                codec: linerate_model::call::Codec::G711,
                jitter_buffer_ms: 60,
                adaptive: false,
            }
        })
    );
    assert_eq!(test.kind.protocol_label(), "udp");
    assert!(!test.exclusive, "a call is light");
    assert_eq!((m.alerts.mos_below, m.alerts.mos_for_s), (3.6, 300.0));
    let m = parse(
        "m.toml",
        &(voip("\ncodec = \"g729a\"\njitter_buffer = \"40ms\"\ndscp = \"ef\"")
            + "[alerts]\nmos_below = 3.8\nmos_for = \"10m\"\n"),
    )
    .unwrap();
    assert_eq!((m.alerts.mos_below, m.alerts.mos_for_s), (3.8, 600.0));
    let jobs = m.jobs();
    assert_eq!(jobs.len(), 2);
    for job in &jobs {
        let plan::JobPlan::Source {
            kind: "client",
            spec,
        } = plan::job_plan(&m, job)
        else {
            panic!("not a client test");
        };
        assert_eq!(spec["test"], "call");
        assert_eq!(spec["server"], m.hosts[job.dst].address.as_str());
        assert_eq!(spec["seconds"], 30.0);
        assert_eq!(spec["codec"], "g729a");
        assert_eq!(spec["jitter_buffer_ms"], 40);
        assert_eq!(spec["adaptive"], false);
        assert_eq!(spec["marks"]["dscp"], 46);
    }
    // An adaptive buffer and the most it grows to.
    let m = parse("m.toml", &voip("\njitter_buffer = \"adaptive:300ms\"")).unwrap();
    let plan::JobPlan::Source { spec, .. } = plan::job_plan(&m, &m.jobs()[0]) else {
        panic!("not a client test");
    };
    assert_eq!(
        (spec["adaptive"].clone(), spec["jitter_buffer_ms"].clone()),
        (serde_json::json!(true), serde_json::json!(300))
    );
    let cases = [
        (
            voip("\njitter_buffer = \"adaptive:5ms\""),
            "jitter_buffer 'adaptive:5ms' may grow to from 20ms to 1s",
        ),
        (
            voip("\ncodec = \"opus\""),
            "codec 'opus' is not one of g711",
        ),
        (
            voip("\ncodec = \"opus:24k\""),
            "codec 'opus:24k' has no MOS: ITU-T G.113 gives Opus no Ie or Bpl",
        ),
        (
            voip("\njitter_buffer = \"2s\""),
            "jitter_buffer '2s' must be at most 1s",
        ),
        (
            voip("\nparallel = 2"),
            "'parallel' is not an option of run = \"voip\"",
        ),
        (
            voip("\nsize = \"1k\""),
            "'size' is not an option of run = \"voip\"",
        ),
        (
            voip("").replace("duration = \"30s\"", "duration = \"500ms\""),
            "a call must last at least 1 s",
        ),
        (
            mesh_text(2, false).replace("run = \"stream\"", "run = \"stream\"\ncodec = \"g711\""),
            "'codec' is not an option of run = \"stream\"",
        ),
        (
            voip("") + "[alerts]\nmos_below = 4.6\n",
            "mos_below 4.6 must be from 1 to 4.5",
        ),
    ];
    assert_one_line_errors(&cases);
}
