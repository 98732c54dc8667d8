//! How many mesh results a second one coordinator's store writer keeps: the path a mesh
//! result takes (the writer thread, one transaction per result with its compact
//! document, the coordinator waiting for each run id), into SQLite or PostgreSQL, as fast
//! as it takes them. `bench/store.py` runs it against a SQLite file and a PostgreSQL
//! server on this machine.
//!
//! ```sh
//! cargo run --release -p linerate-store --example write_rate -- sqlite /tmp/w.db 20000
//! cargo run --release -p linerate-store --example write_rate -- postgres URL 20000
//! ```

use linerate_model::mesh_row::{MeshRow, Outcome};
use linerate_report::document::Document;
use linerate_store::spool::{Spool, SpoolCounts, Writer};
use linerate_store::{archive::Archive, MeshArchive, Store};
use std::sync::Arc;
use std::time::{Duration, Instant};

const STREAM: &str = include_str!("../src/testdata/tcp_stream.json");

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: write_rate sqlite PATH|postgres URL [ROWS]";
    let (kind, place) = match (args.first(), args.get(1)) {
        (Some(kind), Some(place)) => (kind.as_str(), place.as_str()),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let rows: u64 = args.get(2).map_or(20_000, |n| n.parse().expect("ROWS"));
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
    let started = Instant::now();
    let mut known = 0;
    for i in 0..rows {
        let at = 1.7e9 + i as f64;
        let row = MeshRow {
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
        };
        if writer
            .insert_mesh(&row, Some((&document, &json)))
            .expect("handed over")
            .is_some()
        {
            known += 1;
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
            "document_bytes": json.len(),
            "write_failures": snapshot.write_failures,
            "spooled_then_written": snapshot.replayed,
        })
    );
}
