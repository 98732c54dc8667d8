//! `linerate iperf3 -c` as the user runs it: a test against an iperf3 server, its lines
//! as iperf3 prints them (or iperf3's documents, or linerate's), kept as linerate's.

use crate::cancel;
use crate::failure::{usage, Failure};
use crate::sink::{Sinks, StoreSink};
use crate::storage::{self, Storage};
use anyhow::{Context, Result};
use linerate_drivers::iperf3_client;
use linerate_model::clock::UnixTime;
use linerate_proto::iperf3::Params;
use linerate_report::document::Document;
use linerate_report::live::TestUpdate;
use linerate_report::text::{self, INTERVAL_HEADER};
use linerate_report::units::Scale;
use linerate_report::{iperf3_json, Direction};
use serde_json::Value;
use std::net::SocketAddr;
use std::time::Duration;

/// How an iperf3 client run prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Iperf3Print {
    /// iperf3's text, with the server's output when asked.
    Text,
    /// iperf3's `-J` document.
    Iperf3Json,
    /// iperf3's `--json-stream` lines.
    Iperf3JsonStream,
    /// linerate's own document.
    Document,
}

/// An iperf3 client run, as `linerate iperf3 -c` asks it.
pub struct Iperf3Ask<'a> {
    pub host: &'a str,
    pub addr: SocketAddr,
    pub port: u16,
    pub params: Params,
    pub print: Iperf3Print,
    /// `--title`: every line's prefix.
    pub title: Option<&'a str>,
    /// `-Z`, said not to change how linerate writes.
    pub zerocopy: bool,
    /// Seconds between interval lines; 0 for none.
    pub interval: f64,
    pub format: Scale,
    pub connect_timeout: Duration,
}

/// `linerate iperf3 -c`: one test against an iperf3 server on iperf3's wire, printed as
/// iperf3 prints it (or linerate's document) and kept as linerate's document.
pub fn run(ask: &Iperf3Ask, storage: &Storage) -> Result<()> {
    let (host, addr, params) = (ask.host, ask.addr, &ask.params);
    let store = storage.open_for_run()?;
    let cancel = cancel::on_signals()?;
    let quiet = ask.print != Iperf3Print::Text;
    let prefix = ask.title.map_or(String::new(), |t| format!("{t}:  "));
    let say = |line: &str| {
        if !quiet {
            println!("{prefix}{line}");
        }
    };
    say(&format!(
        "Connecting to iperf3 server {host} ({addr}): {}",
        params
            .describe()
            .split_once(": ")
            .map_or("", |(_, what)| what)
    ));
    if ask.zerocopy {
        say("-Z: linerate writes from memory; the figures are of ordinary writes");
    }
    let flow_ids: Vec<u32> =
        (0..params.parallel * if params.bidirectional { 2 } else { 1 }).collect();
    let config = match linerate_drivers::iperf3::config_of(params, host, ask.port, Duration::ZERO) {
        Ok(config) => config,
        Err(message) => return Err(usage(message)),
    };
    let sends = |id: u32| config.flow_direction(id) != Direction::Reverse;
    let tool = format!("linerate {}", env!("CARGO_PKG_VERSION"));
    let host_facts = linerate_hostinfo::host_facts();
    let asked = |cookie: String, control_mss: u32| iperf3_json::Iperf3Start {
        cookie,
        tcp_mss_default: u64::from(control_mss),
        bytes: params.num,
        blocks: params.blockcount,
        target_bitrate: params.bandwidth,
    };
    let started_at = UnixTime::now().seconds();
    let mut progress = |event: TestUpdate| match event {
        TestUpdate::Iperf3Streams {
            cookie,
            control_mss,
            streams,
        } if ask.print == Iperf3Print::Iperf3JsonStream => {
            let start = asked(cookie, control_mss);
            let run = iperf3_json::StartOf {
                config: &config,
                tool: &tool,
                host: &host_facts,
                started_at,
                streams: &streams,
            };
            let line = iperf3_json::start_line(&run, &start);
            println!("{line}");
        }
        TestUpdate::Interval(interval) if ask.print == Iperf3Print::Iperf3JsonStream => {
            println!("{}", iperf3_json::interval_line(&config, &interval));
        }
        TestUpdate::Started if ask.interval > 0.0 => say(INTERVAL_HEADER),
        TestUpdate::Interval(interval) => {
            for line in text::side_interval_lines(
                &interval,
                &sends,
                &flow_ids,
                ask.format,
                params.parallel > 1,
            ) {
                say(&line);
            }
        }
        _ => {}
    };
    let outcome = iperf3_client::run(
        addr,
        host,
        params,
        ask.connect_timeout,
        &cancel,
        &mut progress,
    )?;
    print_outcome(ask, &outcome, &asked, &say)?;
    if let Some(store) = store {
        // Kept as linerate's own document, whichever shape was printed; the note goes
        // where a note after this output goes.
        let command = storage::command_line();
        let mut keeper: Sinks = if quiet {
            Sinks::new().with(StoreSink::new(store, command, std::io::stderr()))
        } else {
            Sinks::new().with(StoreSink::new(store, command, Titled(prefix.clone())))
        };
        keeper.finish_document(&Document::Test(Box::new(outcome.report.clone())))?;
    }
    crate::repeat::check_flows(&outcome.report)
        .map_err(|e| Failure::Partial(format!("{e:#}")).into())
}

/// The test's result in the shape the flags ask for: iperf3's `-J` document, its
/// `--json-stream` end lines, linerate's own JSON, or text with the server's output.
fn print_outcome(
    ask: &Iperf3Ask,
    outcome: &iperf3_client::Iperf3Outcome,
    asked: &dyn Fn(String, u32) -> iperf3_json::Iperf3Start,
    say: &dyn Fn(&str),
) -> Result<()> {
    let server_output = outcome.server.server_output_text.as_deref();
    if ask.print == Iperf3Print::Iperf3Json {
        let output = server_output_of(&outcome.server);
        let start = asked(outcome.cookie.clone(), outcome.control_mss);
        let doc = iperf3_json::render(&outcome.report, &start, output);
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).context("cannot encode the result")?
        );
    } else if ask.print == Iperf3Print::Iperf3JsonStream {
        let output = server_output_of(&outcome.server);
        for line in iperf3_json::end_lines(&outcome.report, output) {
            println!("{line}");
        }
    } else if ask.print == Iperf3Print::Document {
        println!(
            "{}",
            serde_json::to_string_pretty(&outcome.report).context("cannot encode the result")?
        );
    } else {
        for line in
            text::render_summary(&outcome.report, ask.format, ask.params.parallel > 1).lines()
        {
            say(line);
        }
        let json_text = outcome
            .server
            .server_output_json
            .as_ref()
            .and_then(|j| serde_json::to_string_pretty(j).ok());
        if let Some(output) = server_output.or(json_text.as_deref()) {
            say("");
            say("Server output:");
            for line in output.lines() {
                say(line);
            }
        }
    }
    Ok(())
}

/// The server's output as iperf3 -J and --json-stream carry it: its JSON, or its text.
fn server_output_of(server: &linerate_proto::iperf3::Results) -> Option<(&'static str, Value)> {
    match (&server.server_output_json, &server.server_output_text) {
        (Some(json), _) => Some(("server_output_json", json.clone())),
        (None, Some(text)) => Some(("server_output_text", text.as_str().into())),
        (None, None) => None,
    }
}

/// Lines on stdout after `--title`'s prefix, as iperf3 prints every line of a titled run.
struct Titled(String);

impl std::io::Write for Titled {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(bytes);
        let mut out = std::io::stdout().lock();
        for line in text.split_inclusive('\n') {
            write!(out, "{}{line}", self.0)?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stdout().flush()
    }
}
