//! How many mesh results a second one coordinator's store writer keeps: the path a mesh
//! result takes (the writer thread, a compact document a result, the coordinator waiting
//! for the run ids), into SQLite or PostgreSQL. `bench/store.py` runs it against a SQLite
//! file and a PostgreSQL server on this machine.
//!
//! Without RATE every result is handed over alone and waited for (one transaction a
//! result: what a mesh whose results end one at a time pays). With RATE, jobs end at RATE
//! a second (0: all at once) on a thread of their own and the coordinator's loop does what
//! the mesh's does (crates/campaign/src/mesh.rs): it takes the first that ended and every
//! other that ended meanwhile, up to 256, and hands them over together (one transaction).
//! It prints the results a second kept, the mean batch, and how long a result waited from
//! its end until it was stored (p50, p99, max): a rate the store keeps up with holds that
//! wait flat.
//!
//! ```sh
//! cargo run --release -p linerate-store --example write_rate -- sqlite /tmp/w.db 20000
//! cargo run --release -p linerate-store --example write_rate -- postgres URL 20000 2000
//! ```

// An example is a program of its own: a usage mistake ends it with exit code 2.
#![allow(clippy::disallowed_methods)]

use linerate_model::mesh_row::{MeshRow, Outcome};
use linerate_report::document::Document;
use linerate_store::spool::{Spool, SpoolCounts, Writer};
use linerate_store::{archive::Archive, MeshArchive, Store};
use std::sync::Arc;
use std::time::{Duration, Instant};

const STREAM: &str = include_str!("../src/testdata/tcp_stream.json");

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: write_rate sqlite PATH|postgres URL [ROWS [RATE]]";
    let (kind, place) = match (args.first(), args.get(1)) {
        (Some(kind), Some(place)) => (kind.as_str(), place.as_str()),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let rows: u64 = args.get(2).map_or(20_000, |n| n.parse().expect("ROWS"));
    let rate: Option<f64> = args.get(3).map(|n| n.parse().expect("RATE"));
    let store: Box<dyn MeshArchive + Send> = match kind {
        "sqlite" => Box::new(Store::open(std::path::Path::new(place)).expect("the store opens")),
        "postgres" => Box::new(Archive::open(place).expect("the archive opens")),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let document = Document::from_json(STREAM).expect("a document").compact();
    let json = document.to_stored_json().expect("encoded");
    let counts = Arc::new(SpoolCounts::default());
    let spool = Spool::open(None, 256 << 20, counts.clone()).expect("a spool");
    let mut writer = Writer::start(store, spool, Duration::from_secs(2), None).expect("the writer");
    let mesh = format!("bench-{}", std::process::id());
    let row_of = |i: u64| {
        let at = 1.7e9 + i as f64;
        MeshRow {
            run_id: None,
            mesh: mesh.clone(),
            src: format!("h{}", i % 100),
            dst: format!("h{}", (i / 100) % 100),
            test: "lat".into(),
            direction: "forward".into(),
            protocol: "tcp".into(),
            cycle: i,
            started_at: at,
            ended_at: at + 1.0,
            outcome: Outcome::Ok,
            headline: Some(0.0012),
            headline_text: "1.20 ms".into(),
        }
    };
    let started = Instant::now();
    let mut known = 0;
    let mut batches = 0u64;
    let mut waits: Vec<f64> = Vec::new();
    match rate {
        None => {
            for i in 0..rows {
                batches += 1;
                if writer
                    .insert_mesh(&row_of(i), Some((&document, &json)))
                    .expect("handed over")
                    .is_some()
                {
                    known += 1;
                }
            }
        }
        Some(rate) => {
            (known, batches) = offered(
                &mut writer,
                rows,
                rate,
                &row_of,
                &document,
                &json,
                &mut waits,
            );
        }
    }
    drop(writer);
    let seconds = started.elapsed().as_secs_f64();
    let snapshot = Writer::snapshot(&counts);
    println!(
        "{}",
        serde_json::json!({
            "store": kind,
            "rows": rows,
            "seconds": seconds,
            "rows_per_s": rows as f64 / seconds,
            "run_ids_known": known,
            "offered_per_s": rate,
            "mean_batch": rows as f64 / batches.max(1) as f64,
            "wait_s": quantiles(&mut waits),
            "document_bytes": json.len(),
            "write_failures": snapshot.write_failures,
            "spooled_then_written": snapshot.replayed,
        })
    );
}

/// Jobs ending at `rate` a second (0: all at once) on a thread of their own, and the
/// coordinator's loop storing those that ended together, up to 256 a hand-over: the
/// results whose run ids came back and the hand-overs made; each result's wait from its
/// end until it was stored, in `waits`.
fn offered(
    writer: &mut Writer,
    rows: u64,
    rate: f64,
    row_of: &dyn Fn(u64) -> MeshRow,
    document: &Document,
    json: &str,
    waits: &mut Vec<f64>,
) -> (usize, u64) {
    let (mut known, mut batches) = (0, 0);
    let (ended, finished) = std::sync::mpsc::channel::<(u64, Instant)>();
    let producer = std::thread::spawn(move || {
        let begin = Instant::now();
        for i in 0..rows {
            if rate > 0.0 {
                let due = begin + Duration::from_secs_f64(i as f64 / rate);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            }
            if ended.send((i, Instant::now())).is_err() {
                return;
            }
        }
    });
    while let Ok(first) = finished.recv() {
        let mut batch = vec![first];
        while batch.len() < 256 {
            match finished.try_recv() {
                Ok(more) => batch.push(more),
                Err(_) => break,
            }
        }
        let batch_rows: Vec<MeshRow> = batch.iter().map(|&(i, _)| row_of(i)).collect();
        let items: Vec<linerate_store::MeshItem<'_>> = batch_rows
            .iter()
            .map(|row| (row, Some((document, json))))
            .collect();
        let ids = writer.insert_mesh_batch(&items).expect("handed over");
        let stored = Instant::now();
        known += ids.iter().filter(|id| id.is_some()).count();
        batches += 1;
        waits.extend(batch.iter().map(|&(_, at)| (stored - at).as_secs_f64()));
    }
    producer.join().expect("the producer");
    (known, batches)
}

/// p50, p99 and the largest of `waits`, seconds (null when there are none: one at a time).
fn quantiles(waits: &mut [f64]) -> serde_json::Value {
    if waits.is_empty() {
        return serde_json::Value::Null;
    }
    waits.sort_by(f64::total_cmp);
    let at = |q: f64| waits[((waits.len() - 1) as f64 * q).round() as usize];
    serde_json::json!({ "p50": at(0.5), "p99": at(0.99), "max": at(1.0) })
}
