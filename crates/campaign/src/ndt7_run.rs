//! `linerate ndt7` as the user runs it (docs/ndt7.md): the subtests against any ndt7
//! server, progress as they go, the result printed as M-Lab's clients print it and kept;
//! and what `serve --ndt7` does with each subtest it served.

use crate::sink::{self, TextSink};
use crate::storage::Storage;
use anyhow::Result;
use linerate_drivers::server_state::ServedTestHook;
use linerate_model::clock::UnixTime;
use linerate_model::ndt7::SubtestResult;
use linerate_model::Served;
use linerate_ndt7::client::{self, Options};
use linerate_report::document::Document;
use linerate_report::ndt7::Ndt7Report;
use linerate_report::units::Scale;
use linerate_store::Store;
use std::io::IsTerminal;
use std::sync::Mutex;

/// `linerate ndt7`: the subtests in order, printed (or JSON) and kept.
pub fn run(options: &Options, target: &str, json: bool, storage: &Storage) -> Result<()> {
    let store = storage.open_for_run()?;
    let show = !json || std::io::stderr().is_terminal();
    let mut progress = |line: &str| {
        if show {
            eprintln!("linerate ndt7: {line}");
        }
    };
    let started_at = UnixTime::now().seconds();
    let subtests = client::run(options, &mut progress)?;
    let document = Document::Ndt7(Box::new(Ndt7Report::client(
        target.to_string(),
        started_at,
        subtests,
    )));
    let text = TextSink::new(std::io::stdout(), Scale::Adaptive);
    sink::standard(json, text, store).finish_document(&document)?;
    Ok(())
}

/// What `serve --ndt7` does with each subtest it served: a row on `--metrics`'s board
/// (`board`), a line in the operator's log, and the subtest kept as a run.
pub fn server_keeper(
    store: Option<Store>,
    log: bool,
    board: Option<ServedTestHook>,
) -> linerate_ndt7::server::Keeper {
    let store = Mutex::new(store);
    std::sync::Arc::new(move |subtest: SubtestResult| {
        if let Some(hook) = &board {
            (hook.0)(Served::Ndt7 {
                subtest: &subtest,
                ended_at: UnixTime::now().seconds(),
            });
        }
        let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
        let line = format!(
            "ndt7 {} of {}: {:.2} Mbit/s ({}), {:.2} s",
            subtest.subtest.name(),
            subtest.client,
            subtest.goodput_bps / 1e6,
            subtest.counted_by,
            subtest.elapsed_s
        );
        let document = Document::Ndt7(Box::new(Ndt7Report::served(
            subtest,
            UnixTime::now().seconds(),
        )));
        let mut store = store.lock().unwrap_or_else(|p| p.into_inner());
        let kept = match (store.as_mut(), document.to_json()) {
            (Some(store), Ok(json)) => store
                .insert(&document, &json, "ndt7 client")
                .map(|id| format!("; stored as run {id} in {}", store.path()))
                .unwrap_or_else(|e| format!("; not stored: {e}")),
            (None, _) => String::new(),
            (_, Err(e)) => format!("; not stored: {e}"),
        };
        if log {
            eprintln!("{now} {line}{kept}");
        }
    })
}
