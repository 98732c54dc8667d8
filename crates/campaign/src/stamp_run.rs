//! `linerate stamp` as the user runs it: the session's intervals as they end, the
//! result printed and kept, silence a failure.

use crate::cancel;
use crate::failure::Failure;
use crate::sink;
use crate::storage::Storage;
use anyhow::{Context, Result};
use linerate_irtt::client::Ask;
use linerate_report::document::Document;
use linerate_report::units::Scale;
use linerate_stamp::sender::{self, Options};
use linerate_stamp::wire::Mode;
use std::io::IsTerminal;

/// `linerate stamp`: a STAMP session to a reflector (with `irtt`, an irtt session to an
/// irtt server), its intervals on stderr as they end, its result printed and kept; a run
/// that heard nothing back fails (exit 1), as ping's does, with its reason inside the
/// document.
pub fn run(options: &Options, irtt: Option<Ask>, json: bool, storage: &Storage) -> Result<()> {
    let (addr, mode, rate_pps) = (options.addr, options.mode, options.rate_pps);
    let store = storage.open_for_run()?;
    let stop = cancel::on_signals()?;
    let show = !json || std::io::stderr().is_terminal();
    if show {
        let (protocol, mode, size) = match &irtt {
            Some(ask) => (
                "irtt",
                if ask.key.is_some() { "HMAC" } else { "open" },
                ask.length,
            ),
            None => ("STAMP", mode.name(), options.size()),
        };
        eprintln!(
            "linerate stamp: {} ({addr}), {protocol}, {mode} mode, {rate_pps:.0} probes/s of {} bytes",
            options.target,
            if size == 0 { "the fewest".to_string() } else { size.to_string() },
        );
    }
    let mut live = |i: &linerate_report::stamp::StampInterval| {
        if !show {
            return;
        }
        let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.3}", v / 1e3));
        eprintln!(
            "{:>7.2} s  sent {:>6}  answered {:>6}  rtt p50 {} ms  added out {} back {} ms",
            i.end_s,
            i.sent,
            i.answered,
            ms(i.rtt_p50_us),
            ms(i.forward_added_p50_us),
            ms(i.reverse_added_p50_us)
        );
    };
    let mut report = match &irtt {
        Some(ask) => linerate_irtt::client::run(options, ask, &stop, &mut live)
            .with_context(|| format!("irtt to {addr}"))?,
        None => {
            sender::run(options, &stop, &mut live).with_context(|| format!("stamp to {addr}"))?
        }
    };
    report.host = Some(linerate_hostinfo::host_facts());
    let silent = report.sent > 0 && report.answered == 0 && report.interrupted_after_s.is_none();
    // As ping: a run that heard nothing back ends in failure (exit 1), kept and printed,
    // the reason inside the document (one JSON value either way).
    if silent {
        let key = if mode == Mode::Authenticated {
            " Does it hold the same key, and answer authenticated packets?"
        } else {
            ""
        };
        report.error = Some(if irtt.is_some() {
            format!(
                "the irtt server at {addr} opened the session and answered none of its {} requests",
                report.sent
            )
        } else if report.unreadable_answers > 0 {
            format!(
                "no answer from {addr} could be read: {} datagrams came back that are not STAMP answers (a TWAMP reflector that wants a control session? the same mode and key?)",
                report.unreadable_answers
            )
        } else {
            format!(
                "no answer from {addr}: is a reflector there ('linerate serve --stamp {}')? A firewall?{key}",
                addr.port()
            )
        });
    }
    let error = report.error.clone();
    let document = Document::Stamp(Box::new(report));
    let text = sink::TextSink::new(std::io::stdout(), Scale::Adaptive);
    sink::standard(json, text, store).finish_document(&document)?;
    match error {
        Some(message) => Err(Failure::Partial(message).into()),
        None => Ok(()),
    }
}
