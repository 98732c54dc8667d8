//! The live grid: a page (self-contained: no CDN, no framework) that shows the mesh as an
//! N x N table per test and polls `/api/grid`; a cell opens the pair's history from
//! `/api/history` as a plot with its baseline band.

use crate::assess::{assess, Thresholds};
use crate::board::{Board, Measure};
use serde_json::{json, Value};

const PAGE: &str = include_str!("grid.html");

/// The page, titled, with the grid as it is now inside it (so that the first view needs
/// no second request).
pub fn page(title: &str, initial: &Value) -> String {
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
    let data = initial.to_string().replace("</", "<\\/");
    PAGE.replace("{{TITLE}}", &escaped)
        .replace("{{INITIAL}}", &data)
}

fn measure_name(measure: Option<Measure>) -> &'static str {
    match measure {
        Some(Measure::Latency) => "latency",
        _ => "goodput",
    }
}

/// Every series' newest figure and state, with the hosts and tests in the order seen.
pub fn grid_json(board: &Board, thresholds: &Thresholds) -> Value {
    let tests: Vec<Value> = board
        .tests
        .iter()
        .map(|name| {
            let measure = board.measures.get(name).copied().or_else(|| {
                board
                    .series
                    .iter()
                    .find(|(k, _)| &k.test == name)
                    .and_then(|(_, s)| s.measure)
            });
            json!({ "name": name, "measure": measure_name(measure) })
        })
        .collect();
    let cells: Vec<Value> = board
        .series
        .iter()
        .map(|(key, series)| {
            let a = assess(series, thresholds);
            let l = &series.latest;
            json!({
                "mesh": key.mesh,
                "test": key.test,
                "src": key.src,
                "dst": key.dst,
                "direction": key.direction,
                "protocol": key.protocol,
                "value": l.value,
                "text": l.text,
                "ok": l.ok,
                "reason": l.reason,
                "at": l.ended_at,
                "cycle": l.cycle,
                "run_id": l.run_id,
                "state": a.state,
                "symbol": a.state.symbol(),
                "ratio": a.ratio,
                "baseline": a.baseline,
            })
        })
        .collect();
    json!({
        "hosts": board.hosts,
        "tests": tests,
        "cells": cells,
        "thresholds": {
            "goodput_drop": thresholds.goodput_drop,
            "latency_rise": thresholds.latency_rise,
        },
    })
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
            _ => return Err(format!("unknown parameter '{name}' (test, src, dst)")),
        }
    }
    match (test, src, dst) {
        (Some(t), Some(s), Some(d)) => Ok((t, s, d)),
        _ => Err("give test, src and dst".into()),
    }
}

/// One pair's history (every direction and protocol of it) with its baseline.
pub fn history_json(board: &Board, query: &str, thresholds: &Thresholds) -> Result<Value, String> {
    let (test, src, dst) = pair_of(query)?;
    let found = board
        .series
        .iter()
        .find(|(k, _)| k.test == test && k.src == src && k.dst == dst);
    let Some((key, series)) = found else {
        return Err(format!("no series {test} {src} -> {dst}"));
    };
    let a = assess(series, thresholds);
    Ok(json!({
        "key": key,
        "measure": measure_name(series.measure),
        "points": series.history,
        "baseline": a.baseline,
        "state": a.state,
        "symbol": a.state.symbol(),
    }))
}
