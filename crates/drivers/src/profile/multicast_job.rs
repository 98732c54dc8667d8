//! A mesh's multicast test (`run = "multicast"`), both of its sides as agents run them:
//! each receiver's agent joins the group and counts the source's stream to it
//! (`multicast_receive`), the source's agent sends the stream after a lead that lets
//! every receiver join first (`multicast_send`); the controller gathers each receiver's
//! count with what the source sent, a document per receiver.
//!
//! Only a keyed requester (a mesh's coordinator, which proved the key) may ask either:
//! an agent joins a group, or sends to one, because the operator's key said so, never
//! because a peer named a group (docs/security.md).

use crate::multicast::{self, ReceiveOptions, ReceiverEvent, Receivers, SendSpec};
use linerate_model::clock::UnixTime;
use linerate_model::multicast::{Join, MulticastStream};
use linerate_report::document::Document;
use linerate_report::multicast::MulticastReport;
use serde::Deserialize;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::rpm_job::SourceError;
use super::source_job::{Bounds, SourceJob, SourceKind, SourceRun, ThreadRun};

/// The longest lead a sender is asked to wait before it sends.
const MAX_LEAD_S: f64 = 10.0;
/// How long a receiver listens past the agent's `--max-duration`: the lead and the
/// silence after the stream.
const RECEIVE_SLACK_S: f64 = 15.0;
/// A receiver's stream ends after this long without a datagram (its final lost).
const SILENCE: Duration = Duration::from_secs(2);

fn refused(reason: String) -> SourceError {
    SourceError {
        reason,
        unreachable: None,
    }
}

/// Either side runs only for a requester that proved this server's key: `what` is done
/// for no one else.
fn keyed(key: Option<&linerate_proto::auth::Key>, what: &str) -> Result<(), SourceError> {
    match key {
        Some(_) => Ok(()),
        None => Err(refused(format!(
            "{what} only for a requester that proved this server's key"
        ))),
    }
}

/// What a group is, checked where it is read: a multicast address.
fn group_of(group: IpAddr) -> Result<IpAddr, String> {
    if group.is_multicast() {
        Ok(group)
    } else {
        Err(format!("{group} is not a multicast group"))
    }
}

/// A multicast sender as a request carries it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct SendAsked {
    group: IpAddr,
    port: u16,
    rate_bps: u64,
    length: usize,
    ttl: u32,
    seconds: f64,
    lead_s: f64,
    #[serde(default)]
    marks: Option<linerate_model::marks::Marks>,
}

impl SendAsked {
    /// The request, each value bounded where it is read.
    fn read(spec: &serde_json::Value) -> Result<SendAsked, String> {
        let asked = SendAsked::deserialize(spec)
            .map_err(|e| format!("a multicast send request that does not read: {e}"))?;
        group_of(asked.group)?;
        if !(multicast::MIN_LENGTH..=multicast::MAX_LENGTH).contains(&asked.length) {
            return Err(format!(
                "a multicast datagram of {} bytes (from {} to {})",
                asked.length,
                multicast::MIN_LENGTH,
                multicast::MAX_LENGTH
            ));
        }
        if !(1..=255).contains(&asked.ttl) {
            return Err(format!("a multicast TTL of {} (from 1 to 255)", asked.ttl));
        }
        if !(asked.seconds.is_finite() && asked.seconds > 0.0) {
            return Err(format!("a multicast stream of {} s", asked.seconds));
        }
        if !(0.0..=MAX_LEAD_S).contains(&asked.lead_s) {
            return Err(format!(
                "a lead of {} s before a multicast stream (at most {MAX_LEAD_S})",
                asked.lead_s
            ));
        }
        if asked.rate_bps == 0 {
            return Err("a multicast stream of 0 bit/s".into());
        }
        Ok(asked)
    }

    fn spec(&self, source: Option<&linerate_model::Source>) -> SendSpec {
        SendSpec {
            group: SocketAddr::new(self.group, self.port),
            groups: 1,
            ttl: self.ttl,
            interface: source.and_then(|s| s.device.clone()),
            bind: source.and_then(|s| s.address),
            length: self.length,
            rate_bps: self.rate_bps,
            marks: self.marks,
            duration: Duration::from_secs_f64(self.seconds),
        }
    }
}

struct SendJob {
    asked: SendAsked,
    source: Option<linerate_model::Source>,
}

impl SourceJob for SendJob {
    fn what(&self) -> &'static str {
        "multicast stream"
    }

    fn check(&self, bounds: &Bounds) -> Result<(), String> {
        if self.asked.seconds > bounds.max_duration_s {
            return Err(format!(
                "a multicast stream of {:.0} s is over this server's {:.0} s (--max-duration)",
                self.asked.seconds, bounds.max_duration_s
            ));
        }
        if let Some(most) = bounds.max_rate_bps {
            if self.asked.rate_bps > most {
                return Err(format!(
                    "a multicast stream of {} bit/s is over this server's --max-rate of {most}",
                    self.asked.rate_bps
                ));
            }
        }
        super::source_job::check_source(self.source.as_ref())
    }

    fn start(
        self: Box<Self>,
        _requester: IpAddr,
        key: Option<linerate_proto::auth::Key>,
        stop: Arc<AtomicBool>,
    ) -> Result<Box<dyn SourceRun>, SourceError> {
        keyed(key.as_ref(), "a multicast stream is sent")?;
        let spec = self.asked.spec(self.source.as_ref());
        spec.check().map_err(refused)?;
        let lead = Duration::from_secs_f64(self.asked.lead_s);
        let (tell, outcome) = mpsc::channel();
        std::thread::Builder::new()
            .name("agent-multicast-send".into())
            .spawn(move || {
                // The receivers join meanwhile.
                let until = Instant::now() + lead;
                while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(20).min(until - Instant::now()));
                }
                let started_at = UnixTime::now().seconds();
                let result = multicast::send(&spec, &stop)
                    .map(|sent| MulticastReport::sender(sent, started_at))
                    .map_err(|e| refused(format!("multicast to {}: {e}", spec.group)));
                let _ = tell.send(result);
            })
            .map_err(|e| refused(format!("cannot start a multicast stream: {e}")))?;
        Ok(Box::new(ThreadRun {
            what: "multicast stream",
            outcome,
        }))
    }
}

/// A sender's side as a kind of source job.
pub static SEND_KIND: SourceKind = SourceKind {
    name: "multicast_send",
    what: "multicast stream",
    read: |asked| {
        Ok(Box::new(SendJob {
            asked: SendAsked::read(&asked.spec)?,
            source: asked.source,
        }))
    },
    heartbeat: None,
    limit: |spec| {
        let asked = SendAsked::read(spec)?;
        Ok(Duration::from_secs_f64(asked.lead_s + asked.seconds) + Duration::from_secs(30))
    },
    answer: |_, report, _| {
        let report = MulticastReport::deserialize(report)
            .map_err(|e| format!("a multicast sender's report that does not read: {e}"))?;
        if report.sent.is_none() || report.received.is_some() {
            return Err("a multicast sender's report without what it sent".into());
        }
        Ok(Document::Multicast(Box::new(report)))
    },
    gather: None,
};

/// A receiver as a request carries it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReceiveAsked {
    group: IpAddr,
    port: u16,
    /// The source's address: its stream is the one counted (others to the group are
    /// not this job's); absent, the stream that brought the most datagrams.
    sender: Option<IpAddr>,
    /// Join from `sender` alone (IGMPv3/MLDv2).
    #[serde(default)]
    source_specific: bool,
    /// How long to listen at most: the lead, the stream, the silence after it.
    seconds: f64,
}

impl ReceiveAsked {
    fn read(spec: &serde_json::Value) -> Result<ReceiveAsked, String> {
        let asked = ReceiveAsked::deserialize(spec)
            .map_err(|e| format!("a multicast receive request that does not read: {e}"))?;
        group_of(asked.group)?;
        if !(asked.seconds.is_finite() && asked.seconds > 0.0) {
            return Err(format!("a multicast receiver of {} s", asked.seconds));
        }
        if let Some(sender) = asked.sender {
            if sender.is_multicast() || sender.is_unspecified() {
                return Err(format!("{sender} cannot send a multicast stream"));
            }
            if sender.is_ipv4() != asked.group.is_ipv4() {
                return Err(format!(
                    "the sender {sender} and the group {} are of different IP versions",
                    asked.group
                ));
            }
        }
        if asked.source_specific && asked.sender.is_none() {
            return Err("a source-specific join needs the sender's address".into());
        }
        Ok(asked)
    }

    fn join(&self, source: Option<&linerate_model::Source>) -> Join {
        Join {
            group: self.group,
            source: self.sender.filter(|_| self.source_specific),
            interface: source.and_then(|s| s.device.clone()),
        }
    }
}

struct ReceiveJob {
    asked: ReceiveAsked,
    source: Option<linerate_model::Source>,
}

impl SourceJob for ReceiveJob {
    fn what(&self) -> &'static str {
        "multicast receiver"
    }

    fn check(&self, bounds: &Bounds) -> Result<(), String> {
        if self.asked.seconds > bounds.max_duration_s + RECEIVE_SLACK_S {
            return Err(format!(
                "a multicast receiver of {:.0} s is over this server's {:.0} s (--max-duration)",
                self.asked.seconds, bounds.max_duration_s
            ));
        }
        super::source_job::check_source(self.source.as_ref())
    }

    fn start(
        self: Box<Self>,
        _requester: IpAddr,
        key: Option<linerate_proto::auth::Key>,
        stop: Arc<AtomicBool>,
    ) -> Result<Box<dyn SourceRun>, SourceError> {
        keyed(key.as_ref(), "a multicast group is joined")?;
        let join = self.asked.join(self.source.as_ref());
        let options = ReceiveOptions {
            port: self.asked.port,
            silence: SILENCE,
            same_clock: false,
        };
        let (events, heard) = mpsc::channel();
        // Joined here, so that a group that cannot be joined is this job's error at once.
        let receivers = Receivers::start(std::slice::from_ref(&join), options, move |event| {
            let _ = events.send(event);
        })
        .map_err(|e| refused(e.to_string()))?;
        let (tell, outcome) = mpsc::channel();
        let asked = self.asked;
        std::thread::Builder::new()
            .name("agent-multicast-receive".into())
            .spawn(move || {
                let until = Instant::now() + Duration::from_secs_f64(asked.seconds);
                let stream = listen(&asked, receivers, &heard, until, &stop);
                let target = SocketAddr::new(asked.group, asked.port).to_string();
                let report = match stream {
                    Some(stream) => MulticastReport::receiver(stream, UnixTime::now().seconds()),
                    None => MulticastReport {
                        test: linerate_report::multicast::MULTICAST.into(),
                        started_at: UnixTime::now().seconds(),
                        target,
                        sent: None,
                        received: None,
                        receiver: None,
                        receivers: Vec::new(),
                        warnings: Vec::new(),
                    },
                };
                let _ = tell.send(Ok(report));
            })
            .map_err(|e| refused(format!("cannot start a multicast receiver: {e}")))?;
        Ok(Box::new(ThreadRun {
            what: "multicast receiver",
            outcome,
        }))
    }
}

/// Waits for the sender's stream to end (its final datagram, or its silence) or for
/// `until`, then leaves the group; the sender's stream as counted, if any came.
fn listen(
    asked: &ReceiveAsked,
    receivers: Receivers,
    heard: &mpsc::Receiver<ReceiverEvent>,
    until: Instant,
    stop: &AtomicBool,
) -> Option<MulticastStream> {
    let mut streams: Vec<MulticastStream> = Vec::new();
    let ours = |stream: &MulticastStream| asked.sender.is_none_or(|ip| stream.sender.ip() == ip);
    let mut receivers = Some(receivers);
    loop {
        if streams.iter().any(ours) && asked.sender.is_some() {
            break;
        }
        let now = Instant::now();
        if now >= until || stop.load(Ordering::Relaxed) {
            break;
        }
        match heard.recv_timeout((until - now).min(Duration::from_millis(100))) {
            Ok(ReceiverEvent::Stream(stream)) => streams.push(*stream),
            Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    // Leaving ends the streams under way: they are told as stopped.
    drop(receivers.take());
    while let Ok(event) = heard.try_recv() {
        if let ReceiverEvent::Stream(stream) = event {
            streams.push(*stream);
        }
    }
    streams
        .into_iter()
        .filter(ours)
        .max_by_key(|stream| stream.datagrams)
}

/// The receiver's kind by name: what a sender asks of the receivers it gathers.
pub const RECEIVE: &str = "multicast_receive";

/// A receiver's side as a kind of source job.
pub static RECEIVE_KIND: SourceKind = SourceKind {
    name: RECEIVE,
    what: "multicast receiver",
    read: |asked| {
        Ok(Box::new(ReceiveJob {
            asked: ReceiveAsked::read(&asked.spec)?,
            source: asked.source,
        }))
    },
    heartbeat: None,
    limit: |spec| {
        let asked = ReceiveAsked::read(spec)?;
        Ok(Duration::from_secs_f64(asked.seconds) + Duration::from_secs(30))
    },
    answer: |spec, report, receiver| {
        let asked = ReceiveAsked::read(spec)?;
        let report = MulticastReport::deserialize(report)
            .map_err(|e| format!("a multicast receiver's report that does not read: {e}"))?;
        if report.sent.is_some() {
            return Err("a multicast receiver's report that says it sent".into());
        }
        if let Some(stream) = &report.received {
            let other = stream.group != asked.group
                || stream.port != asked.port
                || asked.sender.is_some_and(|ip| stream.sender.ip() != ip);
            if other {
                return Err(format!(
                    "a multicast receiver's report of another stream ({} to {}:{})",
                    stream.sender, stream.group, stream.port
                ));
            }
        }
        Ok(Document::Multicast(Box::new(MulticastReport {
            receiver: Some(receiver.to_string()),
            ..report
        })))
    },
    gather: Some(gather),
};

/// A receiver's document with what the source sent beside what it counted: the row
/// of the pair (source, receiver).
fn gather(sent: &Document, received: Document) -> Result<Document, String> {
    let (Document::Multicast(sent), Document::Multicast(mut received)) = (sent, received) else {
        return Err("a multicast job's documents are not multicast reports".into());
    };
    received.sent = sent.sent.clone();
    if received.received.is_none() {
        received.target = sent.target.clone();
        received.started_at = sent.started_at;
    }
    Ok(Document::Multicast(received))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The requests' values are bounded where they are read: a group that is not one,
    /// a datagram too long, a TTL past 255, a lead past 10 s, a sender of another IP
    /// version, an unknown field.
    #[test]
    fn multicast_requests_are_bounded_where_they_are_read() {
        let send = json!({"group": "239.1.1.1", "port": 5001, "rate_bps": 1_000_000,
            "length": 1470, "ttl": 1, "seconds": 5.0, "lead_s": 1.0});
        assert!(SendAsked::read(&send).is_ok());
        for (key, value) in [
            ("group", json!("10.0.0.1")),
            ("length", json!(70_000)),
            ("length", json!(4)),
            ("ttl", json!(256)),
            ("lead_s", json!(11.0)),
            ("seconds", json!(-1.0)),
            ("rate_bps", json!(0)),
            ("extra", json!(1)),
        ] {
            let mut bad = send.clone();
            bad[key] = value;
            assert!(SendAsked::read(&bad).is_err(), "{key}");
        }
        let receive = json!({"group": "239.1.1.1", "port": 5001, "sender": "10.0.0.1",
            "seconds": 8.0});
        assert!(ReceiveAsked::read(&receive).is_ok());
        for (key, value) in [
            ("group", json!("10.0.0.2")),
            ("sender", json!("239.1.1.2")),
            ("sender", json!("2001:db8::1")),
            ("sender", json!("0.0.0.0")),
            ("seconds", json!(f64::NAN.to_string())),
        ] {
            let mut bad = receive.clone();
            bad[key] = value;
            assert!(ReceiveAsked::read(&bad).is_err(), "{key}");
        }
        let mut any = receive.clone();
        any["sender"] = serde_json::Value::Null;
        any["source_specific"] = json!(true);
        assert!(
            ReceiveAsked::read(&any).is_err(),
            "source-specific without a sender"
        );
    }

    /// An agent's bounds hold: a stream longer than --max-duration or faster than
    /// --max-rate is refused before anything is sent.
    #[test]
    fn a_multicast_stream_is_held_to_the_servers_bounds() {
        let asked = SendAsked::read(&json!({"group": "239.1.1.1", "port": 5001,
            "rate_bps": 5_000_000, "length": 1470, "ttl": 1, "seconds": 20.0, "lead_s": 1.0}))
        .unwrap();
        let job = SendJob {
            asked,
            source: None,
        };
        let bounds = |max_duration_s, max_rate_bps| Bounds {
            max_duration_s,
            max_rate_bps,
        };
        assert!(job.check(&bounds(30.0, None)).is_ok());
        assert!(job
            .check(&bounds(10.0, None))
            .unwrap_err()
            .contains("--max-duration"));
        assert!(job
            .check(&bounds(30.0, Some(1_000_000)))
            .unwrap_err()
            .contains("--max-rate"));
    }

    /// Neither side runs for a requester without the key: no group is joined, nothing
    /// is sent.
    #[test]
    fn a_multicast_job_needs_the_key() {
        let receive = ReceiveJob {
            asked: ReceiveAsked::read(&json!({"group": "239.1.1.1", "port": 5001,
                "sender": null, "seconds": 1.0}))
            .unwrap(),
            source: None,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let refusal = Box::new(receive)
            .start("127.0.0.1".parse().unwrap(), None, stop.clone())
            .err()
            .expect("refused");
        assert!(refusal.reason.contains("key"), "{}", refusal.reason);
        let send = SendJob {
            asked: SendAsked::read(&json!({"group": "239.1.1.1", "port": 5001,
                "rate_bps": 1000, "length": 100, "ttl": 1, "seconds": 1.0, "lead_s": 0.0}))
            .unwrap(),
            source: None,
        };
        let refusal = Box::new(send)
            .start("127.0.0.1".parse().unwrap(), None, stop)
            .err()
            .expect("refused");
        assert!(refusal.reason.contains("key"), "{}", refusal.reason);
    }

    /// A receiver's row carries what the source sent beside what it counted; one that
    /// heard nothing keeps the source's group and start.
    #[test]
    fn a_receivers_document_is_gathered_with_the_senders() {
        let sent = linerate_model::multicast::MulticastSent {
            group: "239.1.1.1".parse().unwrap(),
            groups: 1,
            port: 5001,
            ttl: 1,
            marks: None,
            interface: None,
            local: None,
            length: 1000,
            rate_bps: 1_000_000,
            datagrams: 500,
            bytes: 500_000,
            send_errors: 0,
            duration_s: 4.0,
            sent_bps: 1e6,
            finals: 10,
        };
        let sender = Document::Multicast(Box::new(MulticastReport::sender(sent.clone(), 100.0)));
        let nothing = Document::Multicast(Box::new(MulticastReport {
            test: "multicast".into(),
            started_at: 0.0,
            target: String::new(),
            sent: None,
            received: None,
            receiver: Some("b".into()),
            receivers: Vec::new(),
            warnings: Vec::new(),
        }));
        let Document::Multicast(row) = gather(&sender, nothing).unwrap() else {
            panic!("a multicast document")
        };
        assert_eq!(row.sent, Some(sent));
        assert_eq!(
            (row.target.as_str(), row.started_at),
            ("239.1.1.1:5001", 100.0)
        );
        // Nothing arrived: all of it lost.
        assert_eq!(row.lost_share(), Some((1.0, 0, 500)));
    }
}
