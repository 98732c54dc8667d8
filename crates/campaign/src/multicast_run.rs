//! `linerate stream GROUP -u` as the user runs it (docs/multicast.md): a paced stream to
//! a multicast group, its figures printed when it ends. Each receiver counts what reached
//! it (`serve --join`, or iperf 2's `iperf -s -u -B GROUP`).

use crate::cancel;
use anyhow::{Context, Result};
use linerate_drivers::multicast::{self, SendSpec};
use linerate_model::multicast::MulticastSent;

/// Sends the stream until its time is up or the operator's signal; what it sent. A
/// sender whose every send the kernel refused has measured nothing: that is a failure.
pub fn send(spec: &SendSpec, json: bool) -> Result<MulticastSent> {
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
    let sent = multicast::send(spec, &stop)
        .with_context(|| format!("cannot send to multicast group {}", spec.group))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&sent)?);
    } else {
        print!("{}", linerate_report::multicast::sent_text(&sent));
    }
    if sent.datagrams == 0 {
        anyhow::bail!(
            "no datagram left: the kernel refused all {} sends",
            sent.send_errors
        );
    }
    Ok(sent)
}
