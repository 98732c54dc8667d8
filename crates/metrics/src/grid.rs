//! The live grid: a page (self-contained: no CDN, no framework) that shows the mesh as an
//! N x N table per test and polls `/api/grid`; a cell opens the pair's history from
//! `/api/history` as a plot with its baseline band.

use crate::assess::{assess, State, Thresholds};
use crate::board::{Board, Key, Measure};
use linerate_model::mesh_row::Outcome;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};

const PAGE: &str = include_str!("grid.html");

/// The page, titled, with the grid as it is now (`initial`, [`grid_json`]) inside it, so
/// that the first view needs no second request.
pub fn page(title: &str, initial: &str) -> String {
    let escaped: String = title
        .chars()
        .map(|c| match c {
            '<' => "&lt;".to_string(),
            '>' => "&gt;".to_string(),
            '&' => "&amp;".to_string(),
            '"' => "&quot;".to_string(),
            c => c.to_string(),
        })
        .collect();
    // Inside a script element nothing may close it: every "</" written as "<\/" (the
    // same string to JSON).
    let data = initial.replace("</", "<\\/");
    PAGE.replace("{{TITLE}}", &escaped)
        .replace("{{INITIAL}}", &data)
}

fn measure_name(measure: Option<Measure>) -> &'static str {
    measure.unwrap_or(Measure::Goodput).name()
}

/// A tab of the grid: a test (and its protocol, when the test has runs over more than
/// one, as a server's may).
#[derive(Debug, Serialize)]
pub struct Tab {
    pub name: String,
    pub test: String,
    pub protocol: Option<String>,
    pub measure: &'static str,
    /// `[src, dst, value, state, outcome]`: host indices, the newest value (null when it
    /// failed), the state's index in [`STATES`], and 0 ok, 1 failed, 2 skipped.
    pub cells: Vec<(u32, u32, Option<f64>, u8, u8)>,
}

/// The states a cell's index names, and their symbols.
pub const STATES: [State; 4] = [State::Learning, State::Normal, State::Worse, State::Failed];

/// The grid as `/api/grid` sends it: compact (a 100-host mesh's four tests are 39,600
/// cells), each cell's detail left to `/api/history`.
#[derive(Debug, Serialize)]
pub struct GridView {
    pub hosts: Vec<String>,
    pub states: Vec<State>,
    pub symbols: Vec<&'static str>,
    pub tabs: Vec<Tab>,
    pub goodput_drop: f64,
    pub latency_rise: f64,
}

/// Every series' newest figure and state, a tab per test, hosts in the order seen.
pub fn grid_view(board: &Board, thresholds: &Thresholds) -> GridView {
    let index: HashMap<&str, u32> = board
        .hosts
        .iter()
        .enumerate()
        .map(|(i, h)| (h.as_str(), i as u32))
        .collect();
    let mut protocols: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for key in board.series.keys() {
        protocols
            .entry(&key.test)
            .or_default()
            .insert(&key.protocol);
    }
    let mut tabs: Vec<Tab> = Vec::new();
    let mut tab_of: HashMap<(&str, &str), usize> = HashMap::new();
    for name in &board.tests {
        let Some(mine) = protocols.get(name.as_str()) else {
            continue;
        };
        for protocol in mine {
            let several = mine.len() > 1;
            tab_of.insert((name.as_str(), protocol), tabs.len());
            let measure = board.measures.get(name).copied().or_else(|| {
                board
                    .series
                    .iter()
                    .find(|(k, _)| &k.test == name && k.protocol == *protocol)
                    .and_then(|(_, s)| s.measure)
            });
            tabs.push(Tab {
                name: if several {
                    format!("{name} {protocol}")
                } else {
                    name.clone()
                },
                test: name.clone(),
                protocol: several.then(|| protocol.to_string()),
                measure: measure_name(measure),
                cells: Vec::new(),
            });
        }
    }
    for (key, series) in &board.series {
        // A cell is a way the packets went, from its row's host to its column's. A STAMP
        // pair's way back (direction "reverse") is the way from its destination to its
        // source: shown there when no probes of that host's own measure that way (a host
        // that only reflects sends none).
        let (from, to) = if key.direction == "reverse" {
            let forward = Key {
                src: key.dst.clone(),
                dst: key.src.clone(),
                direction: "forward".into(),
                ..key.clone()
            };
            if board.series.contains_key(&forward) {
                continue;
            }
            (key.dst.as_str(), key.src.as_str())
        } else {
            (key.src.as_str(), key.dst.as_str())
        };
        let (Some(&tab), Some(&src), Some(&dst)) = (
            tab_of.get(&(key.test.as_str(), key.protocol.as_str())),
            index.get(from),
            index.get(to),
        ) else {
            continue;
        };
        let state = assess(series, thresholds).state;
        let l = &series.latest;
        // The cell's mark: an interrupted job shows as one that did not measure.
        let outcome = match l.outcome {
            Outcome::Ok => 0,
            Outcome::Failed { .. } | Outcome::Interrupted { .. } => 1,
            Outcome::Skipped { .. } => 2,
        };
        let state_index = STATES.iter().position(|s| *s == state).unwrap_or(0) as u8;
        tabs[tab].cells.push((
            src,
            dst,
            l.value.filter(|_| l.measured()),
            state_index,
            outcome,
        ));
    }
    GridView {
        hosts: board.hosts.clone(),
        states: STATES.to_vec(),
        symbols: STATES.iter().map(|s| s.symbol()).collect(),
        tabs,
        goodput_drop: thresholds.goodput_drop,
        latency_rise: thresholds.latency_rise,
    }
}

/// [`grid_view`] as JSON.
pub fn grid_json(board: &Board, thresholds: &Thresholds) -> String {
    serde_json::to_string(&grid_view(board, thresholds)).expect("the grid serializes")
}

/// `%XX` and `+` decoded; `None` for a malformed escape or bytes that are not UTF-8.
fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// `test`, `src` and `dst` from a query string.
pub fn pair_of(query: &str) -> Result<(String, String, String), String> {
    let (mut test, mut src, mut dst) = (None, None, None);
    for part in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = part.split_once('=').unwrap_or((part, ""));
        let value = decode(value).ok_or_else(|| format!("'{part}' is not a query value"))?;
        match name {
            "test" => test = Some(value),
            "src" => src = Some(value),
            "dst" => dst = Some(value),
            // The span of the plot over days, read by the past module.
            "days" => {}
            _ => return Err(format!("unknown parameter '{name}' (test, src, dst, days)")),
        }
    }
    match (test, src, dst) {
        (Some(t), Some(s), Some(d)) => Ok((t, s, d)),
        _ => Err("give test, src and dst".into()),
    }
}

/// The series the query's pair names (its first direction and protocol).
pub fn pair_series<'a>(
    board: &'a Board,
    query: &str,
) -> Result<(&'a Key, &'a crate::board::Series), String> {
    let (test, src, dst) = pair_of(query)?;
    board
        .series
        .iter()
        .find(|(k, _)| k.test == test && k.src == src && k.dst == dst)
        .ok_or_else(|| format!("no series {test} {src} -> {dst}"))
}

/// One pair's history (every direction and protocol of it) with its baseline.
pub fn history_json(board: &Board, query: &str, thresholds: &Thresholds) -> Result<Value, String> {
    let (key, series) = pair_series(board, query)?;
    let a = assess(series, thresholds);
    let since = series.history.front().map_or(0.0, |p| p.at);
    let path_changes = board.path_changes_between(key, since, f64::INFINITY);
    Ok(json!({
        "path_changes": path_changes,
        "key": key,
        "measure": measure_name(series.measure),
        "points": series.history,
        "baseline": a.baseline,
        "state": a.state,
        "symbol": a.state.symbol(),
        "ratio": a.ratio,
        "text": series.latest.text,
        "reason": series.latest.outcome.reason(),
        "run_id": series.latest.run_id,
        "at": series.latest.ended_at,
    }))
}
