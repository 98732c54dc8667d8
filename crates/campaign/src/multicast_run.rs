//! `linerate stream GROUP -u` as the user runs it (docs/multicast.md): a paced stream to
//! a multicast group, its figures printed and kept when it ends; and what `serve --join`
//! does with each stream a receiver counted. Each receiver counts what reached it
//! (`serve --join`, or iperf 2's `iperf -s -u -B GROUP`).

use crate::cancel;
use crate::sink;
use crate::storage::Storage;
use anyhow::{Context, Result};
use linerate_drivers::multicast::{self, SendSpec};
use linerate_drivers::profile::controller::{run_source, RunError, RunOptions};
use linerate_model::clock::UnixTime;
use linerate_model::multicast::{MulticastSent, MulticastStream};
use linerate_report::document::Document;
use linerate_report::multicast::{MulticastReport, ReceiverCount};
use linerate_report::units::Scale;
use linerate_store::Store;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The receivers a sender asks to count its stream and report to it (`stream GROUP -u
/// --receivers HOST,...`): each a `serve` that holds `key`, which joins the group for
/// this stream alone (an agent joins a group only for a requester that proved its key).
pub struct Gather<'a> {
    pub hosts: &'a [String],
    pub key: Option<linerate_proto::auth::Key>,
}

/// How long the sender waits for its receivers to join before it sends (as a mesh's
/// multicast test does).
const JOIN_LEAD: Duration = Duration::from_secs(1);
/// How long a receiver listens past the stream: its finals, or its silence (2 s).
const RECEIVE_SLACK: Duration = Duration::from_secs(4);

/// Sends the stream until its time is up or the operator's signal; prints and keeps what
/// it sent, with what each receiver of `gather` counted of it. A sender whose every send
/// the kernel refused has measured nothing: that is a failure.
/// `warnings`: what the run already does otherwise than asked (`-z` refused), for its
/// document.
pub fn send(
    spec: &SendSpec,
    gather: &Gather<'_>,
    (json, warnings): (bool, Vec<String>),
    storage: &Storage,
) -> Result<()> {
    spec.check().map_err(crate::failure::usage)?;
    if !gather.hosts.is_empty() {
        if spec.groups > 1 {
            return Err(crate::failure::usage(
                "'--receivers' with '--groups': a receiver is asked to count one group",
            ));
        }
        if gather.key.is_none() {
            return Err(crate::failure::usage(
                "'--receivers' needs --key: a receiver joins a group only for a sender that proved its key",
            ));
        }
    }
    let store = storage.open_for_run()?;
    let stop = cancel::on_signals()?;
    if !json {
        eprintln!(
            "linerate: multicast to {} for {:.1} s ({}-byte datagrams, TTL {}{})",
            spec.group,
            spec.duration.as_secs_f64(),
            spec.length,
            spec.ttl,
            match gather.hosts.len() {
                0 => String::new(),
                n => format!(", {n} receivers asked to count it"),
            }
        );
    }
    let started_at = UnixTime::now().seconds();
    let (sent, receivers) = if gather.hosts.is_empty() {
        (multicast::send(spec, &stop), Vec::new())
    } else {
        send_gathering(spec, gather, &stop)
    };
    let sent = sent.with_context(|| format!("cannot send to multicast group {}", spec.group))?;
    let (datagrams, refused) = (sent.datagrams, sent.send_errors);
    let mut report = MulticastReport::sender(sent, started_at);
    report.receivers = receivers;
    report.warnings = warnings;
    let document = Document::Multicast(Box::new(report));
    let text = sink::TextSink::new(std::io::stdout(), Scale::Adaptive);
    sink::standard(json, text, store).finish_document(&document)?;
    if datagrams == 0 {
        anyhow::bail!("no datagram left: the kernel refused all {refused} sends");
    }
    Ok(())
}

/// Asks every receiver to join and count (the agents' `multicast_receive` job), gives
/// them [`JOIN_LEAD`] to join, sends, and gathers each one's count of the stream or why it
/// has none. A receiver that cannot be reached or refuses does not stop the stream.
fn send_gathering(
    spec: &SendSpec,
    gather: &Gather<'_>,
    stop: &AtomicBool,
) -> (std::io::Result<MulticastSent>, Vec<ReceiverCount>) {
    let sender = multicast::source_address(spec);
    let asked = serde_json::json!({
        "group": spec.group.ip(),
        "port": spec.group.port(),
        "sender": sender,
        "seconds": (JOIN_LEAD + spec.duration + RECEIVE_SLACK).as_secs_f64(),
    });
    let options = RunOptions {
        key: gather.key.clone(),
        ..RunOptions::default()
    };
    let abandon = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let waits: Vec<_> = gather
            .hosts
            .iter()
            .map(|host| {
                let (asked, options, abandon) = (&asked, &options, &abandon);
                scope.spawn(move || {
                    let kind = (linerate_drivers::profile::MULTICAST_RECEIVE, asked);
                    run_source(host, kind, (None, host), options, abandon)
                })
            })
            .collect();
        let until = Instant::now() + JOIN_LEAD;
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let sent = multicast::send(spec, stop);
        if sent.is_err() || stop.load(Ordering::Relaxed) {
            abandon.store(true, Ordering::Relaxed);
        }
        let counts = waits
            .into_iter()
            .zip(gather.hosts)
            .map(|(wait, host)| {
                let counted = wait.join().unwrap_or_else(|_| {
                    Err(RunError::Local(std::io::Error::other(
                        "its thread panicked",
                    )))
                });
                receiver_count(host, counted)
            })
            .collect();
        (sent, counts)
    })
}

/// One receiver's answer as the sender's run keeps it.
fn receiver_count(host: &str, counted: Result<Document, RunError>) -> ReceiverCount {
    let (received, error) = match counted {
        Ok(Document::Multicast(report)) => (report.received, None),
        Ok(_) => (
            None,
            Some("its answer is not a multicast count".to_string()),
        ),
        Err(e) => (None, Some(e.to_string())),
    };
    ReceiverCount {
        receiver: host.to_string(),
        received,
        error,
    }
}

/// Keeps one stream a receiver counted as a run; what to tell the operator's log.
pub fn keep_stream(store: &mut Store, stream: &MulticastStream) -> Result<String> {
    let document = Document::Multicast(Box::new(MulticastReport::receiver(
        stream.clone(),
        UnixTime::now().seconds(),
    )));
    let json = document.to_json()?;
    let command = format!("multicast receiver of {}", stream.group);
    let id = store.insert(&document, &json, &command)?;
    Ok(format!("stored as run {id} in {}", store.path()))
}
