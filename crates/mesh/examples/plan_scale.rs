//! The scheduler at scale, simulated: a full mesh of N hosts (both ways) with 10 s
//! exclusive tests, one cycle planned. Prints the cycle against its 2(N - 1) rounds, the
//! double-bookings found (none allowed), the time to plan and the peak memory.
//!
//! `cargo run --release -p linerate-mesh --example plan_scale -- 1000` (one N per process,
//! so that the peak memory is that N's).

// A benchmark or test times itself on the wall clock.
#![allow(clippy::disallowed_methods)]

use linerate_mesh::schedule::simulate;
use std::time::Instant;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100);
    let mut text = String::from("name = \"scale\"\n");
    for i in 0..n {
        text += &format!(
            "[[host]]\nname = \"h{i}\"\naddress = \"10.{}.{}.{}\"\n",
            i / 65_536,
            (i / 256) % 256,
            i % 256
        );
    }
    text += "[[test]]\nname = \"tput\"\nrun = \"stream\"\nduration = \"10s\"\ninterval = \"24h\"\n";
    text += "[[group]]\nname = \"all\"\ntests = [\"tput\"]\n";
    let began = Instant::now();
    let mesh = linerate_mesh::parse("scale.toml", &text).expect("a mesh");
    let simulation = simulate(&mesh, 1, |_| 10.0);
    let took = began.elapsed().as_secs_f64();
    // The plan's peak, read before the checks below add theirs.
    let peak_kib: u64 = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0);
    let (jobs, placed) = (&simulation.jobs, &simulation.placed);
    let cycle = placed.iter().map(|p| p.end).fold(0.0, f64::max);
    let bound = 10.0 * 2.0 * (n as f64 - 1.0);
    // Double-bookings: per host, its jobs' intervals sorted must not overlap.
    let mut by_host: Vec<Vec<(f64, f64)>> = vec![Vec::new(); n];
    for p in placed {
        let job = jobs[p.job];
        by_host[job.src].push((p.start, p.end));
        by_host[job.dst].push((p.start, p.end));
    }
    let mut double = 0usize;
    for spans in &mut by_host {
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        double += spans.windows(2).filter(|w| w[1].0 < w[0].1).count();
    }
    println!(
        "{{\"hosts\": {n}, \"jobs\": {}, \"placed\": {}, \"cycle_s\": {cycle}, \"bound_s\": {bound}, \"ratio\": {:.4}, \"double_bookings\": {double}, \"plan_s\": {took:.3}, \"peak_mib\": {:.1}}}",
        jobs.len(),
        placed.len(),
        cycle / bound,
        peak_kib as f64 / 1024.0
    );
}
