//! CPU figures on a shared host: both ends of a loopback test run on one kernel, so the
//! report gives one system line with each end's own share; and when other processes keep
//! the CPUs busy, the service demand counts the test's own threads, not theirs, and a
//! warning says how much they took. A binary of its own: its busy loops would disturb
//! the timing of other tests.

mod common;

use common::{json, linerate, num, stderr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One busy loop per CPU, threads of this test process (so nothing outlives it), each
/// ending by itself after `seconds` or when dropped.
struct BusyLoops {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl BusyLoops {
    fn start(seconds: u64) -> BusyLoops {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let stop = Arc::new(AtomicBool::new(false));
        let until = Instant::now() + Duration::from_secs(seconds);
        let threads = (0..cpus)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut spins = 0u64;
                    while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                        spins = std::hint::black_box(spins.wrapping_add(1));
                    }
                })
            })
            .collect();
        BusyLoops { stop, threads }
    }
}

impl Drop for BusyLoops {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

fn rr_demand() -> (f64, serde_json::Value) {
    let out = linerate(&["rr", "-t", "3", "--json", "--no-store"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = json(&out);
    let demand = num(&doc, "/summary/service_demand_us_per_transaction/local");
    (demand, doc)
}

#[test]
fn a_shared_host_is_said_and_other_work_is_not_charged_to_the_test() {
    let quiet = linerate(&["rr", "-t", "2", "--no-store"]);
    assert!(quiet.status.success(), "{}", stderr(&quiet));
    let text = String::from_utf8_lossy(&quiet.stdout);
    assert!(
        text.contains("CPU (one host, client and server)") && !text.contains("CPU server:"),
        "{text}"
    );
    let (quiet_demand, quiet_doc) = rr_demand();
    assert_eq!(quiet_doc["summary"]["cpu_basis"]["shared_host"], true);
    let loaded = {
        let _loops = BusyLoops::start(10);
        std::thread::sleep(Duration::from_millis(300));
        rr_demand()
    };
    let (busy_demand, busy_doc) = loaded;
    let basis = &busy_doc["summary"]["cpu_basis"];
    assert_eq!(basis["service_demand"], "processes", "{basis}");
    assert!(num(basis, "/others_pct/local") > 50.0, "{basis}");
    let warned = busy_doc["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap_or("").contains("other processes took"));
    assert!(warned, "{}", busy_doc["warnings"]);
    assert!(
        busy_demand < 2.0 * quiet_demand && busy_demand > quiet_demand / 2.0,
        "service demand {busy_demand:.2} us/transaction beside two busy loops, \
         {quiet_demand:.2} quiet"
    );
}
