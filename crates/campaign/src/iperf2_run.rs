//! `linerate iperf2 -c` as the user runs it: a test against an iperf 2 server, its lines
//! as iperf 2's client prints them (or linerate's document), kept as linerate's.

use crate::cancel;
use crate::failure::{usage, Failure};
use crate::sink::{Sinks, StoreSink};
use crate::storage::{self, Storage};
use anyhow::{Context, Result};
use linerate_drivers::client::TestUpdate;
use linerate_drivers::iperf2_client::{Iperf2Ask, Iperf2ClientError, Iperf2Outcome, Iperf2Rate};
use linerate_report::document::Document;
use linerate_report::iperf2_text::{self, ServerFigures};

/// A run as `linerate iperf2 -c` asks it.
pub struct Iperf2Run<'a> {
    /// The server as the user named it.
    pub host: &'a str,
    pub ask: Iperf2Ask,
    /// `--json`: linerate's document instead of iperf 2's lines.
    pub json: bool,
    /// `-z`: the test's threads under real-time scheduling (`sys::ask_realtime`).
    pub realtime: bool,
}

/// `linerate iperf2 -c`: one test against an iperf 2 server on its wire, printed as iperf
/// 2's client prints it (or linerate's document) and kept as linerate's document.
pub fn run(run: &Iperf2Run, storage: &Storage) -> Result<()> {
    let ask = &run.ask;
    // Before any of the test's threads starts, so that all of them inherit it.
    let realtime_refused = crate::test_run::take_realtime(run.realtime);
    let store = storage.open_for_run()?;
    let cancel = cancel::on_signals()?;
    let say = |line: &str| {
        if !run.json {
            println!("{line}");
        }
    };
    let test = linerate_drivers::iperf2_back::open(ask).map_err(|e| match e {
        Iperf2ClientError::Usage(message) => usage(message),
        other => anyhow::Error::new(other),
    })?;
    let gap_us = match (ask.udp, ask.rate) {
        (true, Some(Iperf2Rate::Packets(packets))) => Some(1e6 / packets as f64),
        (true, Some(Iperf2Rate::Bits(bits))) => Some(f64::from(ask.length) * 8e6 / bits as f64),
        _ => None,
    };
    for line in iperf2_text::banner(
        run.host,
        (ask.udp, ask.addr.port()),
        ask.length,
        gap_us,
        test.buffer_bytes(),
    ) {
        say(&line);
    }
    for (id, ends) in test.connected().iter().enumerate() {
        let line = iperf2_text::connected(id as u32 + 1, *ends, ask.reverse);
        say(&if ask.full_duplex {
            format!("{line} (full-duplex)")
        } else {
            line
        });
    }
    // A UDP test this side receives has its receiver's columns; video frames their own.
    let receives_udp = ask.udp && ask.reverse;
    let isochronous = ask.isochronous.is_some();
    say(if receives_udp {
        iperf2_text::UDP_FIGURES_HEADER
    } else if isochronous && !ask.udp {
        iperf2_text::TCP_ISOCH_FIGURES_HEADER
    } else if isochronous {
        iperf2_text::ISOCH_FIGURES_HEADER
    } else {
        iperf2_text::FIGURES_HEADER
    });
    let several = ask.parallel > 1;
    let intervals = ask.interval_s > 0.0;
    let label = label_for(ask);
    let mut progress = |event: TestUpdate| {
        // Without -i the plane's one span is the whole test, printed at the end. A flow
        // only sends or only receives: its bytes are the sum of the two.
        if let (TestUpdate::Interval(interval), true) = (event, intervals) {
            let span = (interval.start, interval.end);
            for flow in interval.flows.iter().flatten() {
                let bytes = flow.sent_bytes + flow.received_bytes;
                let id = label(Some(flow.id));
                let received_here = receives_udp || (ask.udp && flow.received_datagrams > 0);
                say(&if received_here {
                    let datagrams = flow.received_datagrams + flow.lost_datagrams;
                    let loss = (flow.jitter_ms, flow.lost_datagrams, datagrams);
                    iperf2_text::udp_figures(id, span, bytes, loss)
                } else if isochronous && !ask.udp {
                    iperf2_text::tcp_isoch_figures(id, span, bytes, None)
                } else if isochronous {
                    let written = (flow.sent_datagrams, 0);
                    iperf2_text::isoch_figures(id, span, bytes, written, None)
                } else {
                    iperf2_text::figures(id, span, bytes)
                });
            }
            if several {
                say(&iperf2_text::figures(
                    label(None),
                    span,
                    interval.sent_bytes + interval.received_bytes,
                ));
            }
        }
    };
    let mut outcome = test.run(&cancel, &mut progress)?;
    outcome.report.warnings.extend(realtime_refused);
    finish(run, &outcome, store)
}

/// The test's ending: its closing lines (or its documents, the test back's after the test
/// out's), each kept as a run, and whether every flow (and the test back) ran.
fn finish(
    run: &Iperf2Run,
    outcome: &Iperf2Outcome,
    store: Option<linerate_store::Store>,
) -> Result<()> {
    let ask = &run.ask;
    let say = |line: &str| {
        if !run.json {
            println!("{line}");
        }
    };
    // A test back that did not come is said at the end (exit 1).
    let back = match &outcome.back {
        Some(Ok(back)) => Some(back.as_ref()),
        _ => None,
    };
    if run.json {
        // With a test back, both documents: the test out first.
        let text = match back {
            Some(back) => serde_json::to_string_pretty(&[&outcome.report, &back.report]),
            None => serde_json::to_string_pretty(&outcome.report),
        };
        println!("{}", text.context("cannot encode the result")?);
    } else {
        for line in closing_lines(ask, outcome) {
            say(&line);
        }
        if let Some(back) = back {
            for line in back_lines(ask, back) {
                say(&line);
            }
        }
    }
    if let Some(store) = store {
        let command = storage::command_line();
        let mut keeper = Sinks::new().with(StoreSink::new(store, command, std::io::stderr()));
        keeper.finish_document(&Document::Test(Box::new(outcome.report.clone())))?;
        if let Some(back) = back {
            keeper.finish_document(&Document::Test(Box::new(back.report.clone())))?;
        }
    }
    crate::repeat::check_flows(&outcome.report)
        .and_then(|()| back.map_or(Ok(()), |b| crate::repeat::check_flows(&b.report)))
        .map_err(|e| Failure::Partial(format!("{e:#}")).into())
        .and_then(|()| match &outcome.back {
            Some(Err(why)) => {
                Err(Failure::Partial(format!("the test back (-d, -r) did not run: {why}")).into())
            }
            _ => Ok(()),
        })
}

/// The test back's lines, as 2.1.8's client prints a `-d` or `-r` test's: its
/// connections numbered after the test out's, each with the server's address and port,
/// then each one's bytes over its span (and their sum).
fn back_lines(ask: &Iperf2Ask, back: &Iperf2Outcome) -> Vec<String> {
    let first = ask.parallel + 1;
    let mut lines: Vec<String> = back
        .connected
        .iter()
        .enumerate()
        .map(|(i, ends)| iperf2_text::connected(first + i as u32, *ends, false))
        .collect();
    for f in &back.flows {
        let (id, span) = (iperf2_text::label(Some(first + f.id)), (0.0, f.window_s));
        lines.push(match &f.udp {
            // A UDP test back: this side's own loss and jitter, as the receiver.
            Some(udp) => iperf2_text::udp_figures(
                id,
                span,
                f.bytes_total,
                (udp.jitter_ms, udp.lost, udp.received + udp.lost),
            ),
            None => iperf2_text::figures(id, span, f.bytes_total),
        });
    }
    if back.flows.len() > 1 {
        let longest = back.flows.iter().map(|f| f.window_s).fold(0.0, f64::max);
        let bytes = back.flows.iter().map(|f| f.bytes_total).sum();
        lines.push(iperf2_text::figures(
            iperf2_text::label(None),
            (0.0, longest),
            bytes,
        ));
    }
    lines
}

/// The whole test's lines: each connection's span and bytes (and their sum), and for UDP
/// each flow's datagrams sent and its server's report.
fn closing_lines(ask: &Iperf2Ask, outcome: &Iperf2Outcome) -> Vec<String> {
    let flows = &outcome.flows;
    let label = label_for(ask);
    let mut lines: Vec<String> = flows
        .iter()
        .map(|f| {
            let (id, span) = (label(Some(f.id)), (0.0, f.window_s));
            // A flow this side received on: -R's, and --full-duplex's second of each.
            let received = ask.reverse || (ask.full_duplex && f.id >= ask.parallel);
            match (&f.udp, received, &f.frames) {
                // This side received: its own loss and jitter.
                (Some(udp), true, _) => iperf2_text::udp_figures(
                    id,
                    span,
                    f.bytes_total,
                    (udp.jitter_ms, udp.lost, udp.received + udp.lost),
                ),
                (Some(udp), false, Some(frames)) => iperf2_text::isoch_figures(
                    id,
                    span,
                    f.bytes_total,
                    (udp.sent, udp.send_errors),
                    Some([frames.sent, frames.skipped, frames.slips]),
                ),
                (None, false, Some(frames)) => iperf2_text::tcp_isoch_figures(
                    id,
                    span,
                    f.bytes_total,
                    Some([frames.sent, frames.skipped, frames.slips]),
                ),
                _ => iperf2_text::figures(id, span, f.bytes_total),
            }
        })
        .collect();
    if ask.parallel > 1 {
        let longest = flows.iter().map(|f| f.window_s).fold(0.0, f64::max);
        let bytes = flows.iter().map(|f| f.bytes_total).sum();
        lines.push(iperf2_text::figures(label(None), (0.0, longest), bytes));
    }
    if ask.udp && ask.full_duplex {
        // No server reports both ways: each sending flow's datagrams and its final.
        for (i, sent) in outcome.datagrams_sent.iter().enumerate() {
            let finals = outcome.finals_sent.get(i).copied().unwrap_or(0);
            lines.push(format!(
                "{} Sent {} datagrams",
                iperf2_text::label(Some(i as u32 + 1)),
                sent + finals
            ));
        }
    } else if ask.udp && !ask.reverse {
        for (i, flow) in flows.iter().enumerate() {
            let server = outcome
                .server_reports
                .get(i)
                .copied()
                .flatten()
                .map(|report| ServerFigures {
                    bytes: report.bytes,
                    seconds: report.duration_ns as f64 / 1e9,
                    jitter_ms: report.jitter_ns / 1e6,
                    lost: report.lost,
                    datagrams: report.datagrams,
                    latency_ms: report.transit.map(|t| {
                        [t.mean_ns, t.min_ns, t.max_ns, t.deviation_ns()].map(|ns| ns / 1e6)
                    }),
                });
            // As iperf 2 counts them: the test's datagrams and each final sent.
            let sent = outcome.datagrams_sent.get(i).copied().unwrap_or(0)
                + outcome.finals_sent.get(i).copied().unwrap_or(0);
            lines.extend(iperf2_text::udp_closing(flow.id + 1, sent, server.as_ref()));
        }
    }
    lines
}

/// How a flow (its id, from 0) or the sum (`None`) is labelled, as 2.1.8's client
/// labels them: `[  1]` for a connection this side sends on, `[ *1]` for one the server
/// sends on (`-R`, and each `--full-duplex` connection's receiving flow).
fn label_for(ask: &Iperf2Ask) -> impl Fn(Option<u32>) -> String {
    let (reverse, full_duplex, parallel) = (ask.reverse, ask.full_duplex, ask.parallel);
    move |flow| match flow {
        None => iperf2_text::label(None),
        Some(id) if full_duplex && id >= parallel => {
            iperf2_text::reverse_label(Some(id - parallel + 1))
        }
        Some(id) if reverse => iperf2_text::reverse_label(Some(id + 1)),
        Some(id) => iperf2_text::label(Some(id + 1)),
    }
}
