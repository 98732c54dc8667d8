//! What a scrape of a large mesh costs: a board of N hosts (full mesh, both ways) and
//! four tests (a TCP stream, a UDP stream with loss, rr and crr with their histograms),
//! encoded as OpenMetrics and as the classic text, and the grid's JSON; the time of each
//! (median of 5), its size, and the process's peak memory. With `--serve ADDR SECONDS`
//! it then serves the board, for a browser to time the grid (bench/metrics.py).
//!
//!     cargo run --release -p linerate-metrics --example scrape_scale -- 100

// A benchmark or test times itself on the wall clock.
#![allow(clippy::disallowed_methods)]

use linerate_metrics::assess::Thresholds;
use linerate_metrics::board::{Board, Figures, Measure, Quantiles, Transactions};
use linerate_metrics::{grid, openmetrics};
use linerate_model::mesh_row::MeshRow;
use std::sync::{Arc, Mutex};
use std::time::Instant;

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

fn median_ms(mut f: impl FnMut() -> usize) -> (f64, usize) {
    let mut times = Vec::new();
    let mut size = 0;
    for _ in 0..5 {
        let start = Instant::now();
        size = f();
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    (times[2], size)
}

fn goodput(bps: f64, udp: bool) -> Figures {
    Figures {
        goodput_bps: Some(bps),
        loss_ratio: udp.then_some(0.001),
        duration_s: 10.0,
        ..Figures::default()
    }
}

fn latency(median_s: f64) -> Figures {
    Figures {
        rtt: Some(Transactions {
            quantiles: Quantiles {
                p50: median_s,
                p90: median_s * 1.5,
                p99: median_s * 3.0,
                p999: median_s * 6.0,
            },
            buckets: vec![(median_s, 900), (median_s * 3.0, 90), (median_s * 6.0, 10)],
            count: 1000,
            sum_s: median_s * 1200.0,
        }),
        duration_s: 10.0,
        ..Figures::default()
    }
}

/// The four tests: a TCP stream, a UDP stream with loss, rr and crr.
const TESTS: [(&str, &str, Measure); 4] = [
    ("tput", "tcp", Measure::Goodput),
    ("tput-udp", "udp", Measure::Goodput),
    ("lat", "tcp", Measure::Latency),
    ("conn", "tcp", Measure::Latency),
];

/// A board with a result of every test for every ordered pair of `hosts` hosts.
fn filled_board(hosts: usize) -> Board {
    let tests = TESTS;
    let mut board = Board::default();
    for h in 0..hosts {
        board.declare_host(&format!("host-{h:04}"));
    }
    for (name, _, measure) in tests {
        board.declare(name, measure);
    }
    let mut at = 1.8e9;
    for s in 0..hosts {
        for d in 0..hosts {
            if s == d {
                continue;
            }
            for (i, (name, protocol, measure)) in tests.iter().enumerate() {
                at += 0.001;
                let value = match measure {
                    Measure::Goodput | Measure::Responsiveness => {
                        9.4e8 + (s * 7 + d * 13 + i) as f64 * 1e3
                    }
                    Measure::Latency => 2.5e-4 + (s + d) as f64 * 1e-7,
                    Measure::Loss => (s + d) as f64 * 1e-6,
                    Measure::Hops => (3 + (s + d) % 5) as f64,
                    Measure::Mos => 4.4 - (s + d) as f64 * 1e-4,
                };
                let row = MeshRow {
                    run_id: Some((at * 1e3) as i64),
                    mesh: "scale".into(),
                    src: format!("host-{s:04}"),
                    dst: format!("host-{d:04}"),
                    test: name.to_string(),
                    direction: "forward".into(),
                    protocol: protocol.to_string(),
                    cycle: 1,
                    started_at: at - 10.0,
                    ended_at: at,
                    outcome: linerate_model::mesh_row::Outcome::Ok,
                    headline: Some(value),
                    headline_text: String::new(),
                };
                let figures = match measure {
                    Measure::Goodput | Measure::Responsiveness => {
                        goodput(value, *protocol == "udp")
                    }
                    Measure::Latency => latency(value),
                    Measure::Loss => linerate_metrics::board::Figures {
                        loss_ratio: Some(value),
                        ..Default::default()
                    },
                    Measure::Hops => linerate_metrics::board::Figures {
                        traced: true,
                        ..Default::default()
                    },
                    Measure::Mos => linerate_metrics::board::Figures {
                        mos: Some(value),
                        ..Default::default()
                    },
                };
                board.record_figures(&row, Some(&figures));
            }
        }
    }
    board
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let hosts: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100);
    let serve = args.iter().position(|a| a == "--serve").map(|i| {
        (
            args[i + 1]
                .parse::<std::net::SocketAddr>()
                .expect("--serve ADDR SECONDS"),
            args[i + 2].parse::<u64>().expect("--serve ADDR SECONDS"),
        )
    });
    let start = Instant::now();
    let board = filled_board(hosts);
    let filled = start.elapsed().as_secs_f64();
    let series = board.series.len();
    let board = Arc::new(Mutex::new(board));
    // As the listener does: one exposition kept between scrapes. The first scrape
    // encodes every series; the next ones only those with a new result (here 150, about
    // what a 100-host mesh finishes between two scrapes 15 s apart).
    let mut exposition = openmetrics::Exposition::new(board.clone());
    let cold_start = Instant::now();
    let cold_bytes = exposition.render(openmetrics::Format::OpenMetrics).len();
    let cold_ms = cold_start.elapsed().as_secs_f64() * 1e3;
    let mut fresh = 0u64;
    let mut renew = |board: &Arc<Mutex<Board>>| {
        let mut b = board.lock().unwrap();
        let keys: Vec<_> = b
            .series
            .keys()
            .skip((fresh as usize * 150) % 39_000)
            .take(150)
            .cloned()
            .collect();
        for key in keys {
            fresh += 1;
            let row = MeshRow {
                run_id: None,
                mesh: key.mesh.clone(),
                src: key.src.clone(),
                dst: key.dst.clone(),
                test: key.test.clone(),
                direction: key.direction.clone(),
                protocol: key.protocol.clone(),
                cycle: 2,
                started_at: 2.0e9,
                ended_at: 2.0e9 + fresh as f64,
                outcome: linerate_model::mesh_row::Outcome::Ok,
                headline: Some(9.0e8),
                headline_text: String::new(),
            };
            // A new result of the series' own kind.
            let figures = match TESTS.iter().find(|t| t.0 == key.test).map(|t| t.2) {
                Some(Measure::Latency) => latency(3.0e-4),
                _ => goodput(9.0e8, key.protocol == "udp"),
            };
            b.record_figures(&row, Some(&figures));
        }
    };
    let mut scrape = |format: openmetrics::Format, gzip: bool| {
        renew(&board);
        if gzip {
            linerate_metrics::server::gzip(&mut exposition, format).len()
        } else {
            exposition.render(format).len()
        }
    };
    let (om_ms, om_bytes) = median_ms(|| scrape(openmetrics::Format::OpenMetrics, false));
    let (gz_ms, gz_bytes) = median_ms(|| scrape(openmetrics::Format::OpenMetrics, true));
    let (classic_ms, classic_bytes) = median_ms(|| scrape(openmetrics::Format::Classic, false));
    let thresholds = Thresholds::default();
    let (grid_ms, grid_bytes) = median_ms(|| {
        let b = board.lock().unwrap();
        grid::grid_json(&b, &thresholds).to_string().len()
    });
    let samples = openmetrics::encode(board.clone(), openmetrics::Format::OpenMetrics)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .count();
    println!(
        "{hosts} hosts, {series} series ({samples} samples), board filled in {filled:.2} s\n\
         first scrape (every series encoded): {cold_ms:.1} ms, {:.2} MiB\n\
         OpenMetrics scrape (150 new results): {om_ms:.1} ms, {:.2} MiB\n\
         gzipped, as Prometheus takes it: {gz_ms:.1} ms, {:.2} MiB\n\
         classic text scrape: {classic_ms:.1} ms, {:.2} MiB\n\
         grid JSON: {grid_ms:.1} ms, {:.2} MiB\n\
         peak memory: {:.1} MiB",
        cold_bytes as f64 / 1048576.0,
        om_bytes as f64 / 1048576.0,
        gz_bytes as f64 / 1048576.0,
        classic_bytes as f64 / 1048576.0,
        grid_bytes as f64 / 1048576.0,
        peak_rss_mib(),
    );
    if let Some((addr, seconds)) = serve {
        let server = linerate_metrics::server::start(addr, board, "scale", thresholds, None)
            .expect("listen");
        println!("serving on http://{}/ for {seconds} s", server.addr);
        std::thread::sleep(std::time::Duration::from_secs(seconds));
    }
}
