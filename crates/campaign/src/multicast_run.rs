//! `linerate stream GROUP -u` as the user runs it (docs/multicast.md): a paced stream to
//! a multicast group, its figures printed and kept when it ends; and what `serve --join`
//! does with each stream a receiver counted. Each receiver counts what reached it
//! (`serve --join`, or iperf 2's `iperf -s -u -B GROUP`).

use crate::cancel;
use crate::sink;
use crate::storage::Storage;
use anyhow::{Context, Result};
use linerate_drivers::multicast::{self, SendSpec};
use linerate_model::clock::UnixTime;
use linerate_model::multicast::MulticastStream;
use linerate_report::document::Document;
use linerate_report::multicast::MulticastReport;
use linerate_report::units::Scale;
use linerate_store::Store;

/// Sends the stream until its time is up or the operator's signal; prints and keeps what
/// it sent. A sender whose every send the kernel refused has measured nothing: that is a
/// failure.
pub fn send(spec: &SendSpec, json: bool, storage: &Storage) -> Result<()> {
    spec.check().map_err(crate::failure::usage)?;
    let store = storage.open_for_run()?;
    let stop = cancel::on_signals()?;
    if !json {
        eprintln!(
            "linerate: multicast to {} for {:.1} s ({}-byte datagrams, TTL {})",
            spec.group,
            spec.duration.as_secs_f64(),
            spec.length,
            spec.ttl
        );
    }
    let started_at = UnixTime::now().seconds();
    let sent = multicast::send(spec, &stop)
        .with_context(|| format!("cannot send to multicast group {}", spec.group))?;
    let (datagrams, refused) = (sent.datagrams, sent.send_errors);
    let document = Document::Multicast(Box::new(MulticastReport::sender(sent, started_at)));
    let text = sink::TextSink::new(std::io::stdout(), Scale::Adaptive);
    sink::standard(json, text, store).finish_document(&document)?;
    if datagrams == 0 {
        anyhow::bail!("no datagram left: the kernel refused all {refused} sends");
    }
    Ok(())
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
