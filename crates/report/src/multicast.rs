//! A multicast test (docs/multicast.md) as the results database keeps it: a sender's run
//! (what it sent) or one stream a receiver counted, with their text and CSV rows.

use crate::result_kind::{ResultKind, Rows};
use linerate_model::multicast::{MulticastSent, MulticastStream, OneWayDelay, StreamEnd};
use linerate_model::units::{format_rate, Scale};
use serde::{Deserialize, Serialize};

/// The `test` value of a multicast document.
pub const MULTICAST: &str = "multicast";

/// One multicast run: a sender's (`sent`) or one stream a receiver counted (`received`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MulticastReport {
    pub test: String,
    pub started_at: f64,
    /// The group and port ("239.1.1.1:5001"; "10 groups from 239.1.1.1:5001").
    pub target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<MulticastSent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received: Option<Box<MulticastStream>>,
    /// The receiver whose count this is, where a mesh asked it to count (its row of the
    /// pair source -> receiver): with `sent` beside it, what it never got is a figure
    /// even when nothing at all arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiver: Option<String>,
    /// What each receiver the sender asked (`stream GROUP -u --receivers`) counted of
    /// this stream, or why it could not: the sender's run gathers them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub receivers: Vec<ReceiverCount>,
    /// What the run had to do otherwise than asked (`-z` refused: the sender ran at
    /// normal priority).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// One receiver's count of a sender's stream, as the sender gathered it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReceiverCount {
    /// The receiver as the sender named it.
    pub receiver: String,
    /// What reached it; `None` with no `error`: nothing did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received: Option<Box<MulticastStream>>,
    /// Why it has no count (not reached, refused, its report held to another stream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ReceiverCount {
    /// Its line under the sender's: the datagrams of the `sent` that reached it.
    pub fn line(&self, sent: u64) -> String {
        match (&self.received, &self.error) {
            (_, Some(why)) => format!("receiver {}: no count: {why}", self.receiver),
            (None, None) => format!(
                "receiver {}: nothing received of {sent} datagrams sent",
                self.receiver
            ),
            (Some(stream), None) => {
                let got = stream.datagrams.min(sent);
                let lost = sent - got;
                let share = if sent == 0 {
                    0.0
                } else {
                    lost as f64 * 100.0 / sent as f64
                };
                let join = stream.join_latency_ms.map_or_else(String::new, |ms| {
                    format!(", first datagram {ms:.1} ms after its join")
                });
                format!(
                    "receiver {}: {got} of {sent} datagrams ({lost} lost, {share:.3}%), {} out of order, {} duplicates, jitter {:.3} ms{join}",
                    self.receiver, stream.out_of_order, stream.duplicates, stream.jitter_ms
                )
            }
        }
    }
}

impl MulticastReport {
    /// A sender's run.
    pub fn sender(sent: MulticastSent, started_at: f64) -> MulticastReport {
        let group = std::net::SocketAddr::new(sent.group, sent.port);
        MulticastReport {
            test: MULTICAST.into(),
            started_at,
            target: if sent.groups > 1 {
                format!("{} groups from {group}", sent.groups)
            } else {
                group.to_string()
            },
            sent: Some(sent),
            received: None,
            receiver: None,
            receivers: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// One stream a receiver counted, ending at `ended_at`.
    pub fn receiver(stream: MulticastStream, ended_at: f64) -> MulticastReport {
        MulticastReport {
            test: MULTICAST.into(),
            started_at: ended_at - stream.duration_s,
            target: std::net::SocketAddr::new(stream.group, stream.port).to_string(),
            sent: None,
            received: Some(Box::new(stream)),
            receiver: None,
            receivers: Vec::new(),
            warnings: Vec::new(),
        }
    }
}

impl MulticastReport {
    /// The run's counts in words: what was sent, and what each receiver got of it.
    fn counts_text(&self) -> String {
        match (&self.sent, &self.received) {
            (Some(sent), Some(stream)) => sent_text(sent) + &stream_line(stream) + "\n",
            (Some(sent), None) if self.receiver.is_some() => {
                sent_text(sent) + "nothing received of it\n"
            }
            (Some(sent), _) if !self.receivers.is_empty() => {
                let mut text = sent_text(sent).replace(SEE_RECEIVERS, "");
                for receiver in &self.receivers {
                    text += &(receiver.line(sent.datagrams) + "\n");
                }
                text
            }
            (Some(sent), _) => sent_text(sent),
            (None, Some(stream)) => stream_line(stream) + "\n",
            (None, None) => String::new(),
        }
    }

    /// A mesh row's figure, where the document carries what the sender sent beside what
    /// this receiver counted: the share of the sender's datagrams (by its own count) the
    /// receiver never got, 0 to 1, with the two counts; `None` without the sender's count.
    pub fn lost_share(&self) -> Option<(f64, u64, u64)> {
        self.receiver.as_ref()?;
        let sent = self.sent.as_ref()?.datagrams;
        if sent == 0 {
            return None;
        }
        let got = self.received.as_ref().map_or(0, |r| r.datagrams).min(sent);
        Some(((sent - got) as f64 / sent as f64, got, sent))
    }
}

/// What a sender prints when it is done.
pub fn sent_text(sent: &MulticastSent) -> String {
    let from = sent
        .local
        .map_or_else(String::new, |local| format!(" from {local}"));
    let through = sent
        .interface
        .as_ref()
        .map_or_else(String::new, |name| format!(" through {name}"));
    let groups = if sent.groups > 1 {
        format!("{} groups from {}", sent.groups, sent.group)
    } else {
        sent.group.to_string()
    };
    let each = if sent.groups > 1 { " each" } else { "" };
    let mut text = format!(
        "multicast to {groups} port {}{from}{through}, TTL {}, {}-byte datagrams paced to {}{each}\n",
        sent.port,
        sent.ttl,
        sent.length,
        format_rate(sent.rate_bps as f64, Scale::Adaptive)
    );
    text.push_str(&format!(
        "sent {} datagrams ({} bytes) in {:.2} s: {}; {} sends refused by a full queue; final datagram sent {} times\n",
        sent.datagrams,
        sent.bytes,
        sent.duration_s,
        format_rate(sent.sent_bps, Scale::Adaptive),
        sent.send_errors,
        sent.finals
    ));
    text.push_str(SEE_RECEIVERS);
    text
}

/// A sender's last line where it gathered no receiver.
const SEE_RECEIVERS: &str = "each receiver counts what reached it: see its serve --join output\n";

/// One receiver's line for one sender's stream.
pub fn stream_line(stream: &MulticastStream) -> String {
    let source = stream
        .source
        .map_or_else(String::new, |source| format!("@{source}"));
    let delay = match &stream.one_way_delay {
        OneWayDelay::Given {
            mean_ms,
            min_ms,
            max_ms,
        } => format!("one-way delay {mean_ms:.3}/{min_ms:.3}/{max_ms:.3} ms (mean/min/max)"),
        OneWayDelay::Withheld { .. } => "one-way delay withheld (clocks apart)".to_string(),
    };
    let join = stream.join_latency_ms.map_or_else(String::new, |ms| {
        format!(", first datagram {ms:.1} ms after the join")
    });
    let ended = match stream.ended {
        StreamEnd::Final => "its final datagram",
        StreamEnd::Silence => "silence",
        StreamEnd::Stopped => "the receiver's stop",
    };
    format!(
        "multicast {}{source} port {} from {}: {} of {} datagrams ({} lost, {:.3}%), {} out of order, {} duplicates, {} in {:.2} s, jitter {:.3} ms, {delay}, added delay {:.3} ms{join}; ended by {ended}",
        stream.group,
        stream.port,
        stream.sender,
        stream.datagrams,
        stream.expected,
        stream.lost,
        stream.loss_percent,
        stream.out_of_order,
        stream.duplicates,
        format_rate(stream.received_bps, Scale::Adaptive),
        stream.duration_s,
        stream.jitter_ms,
        stream.added_delay_ms,
    )
}

impl ResultKind for MulticastReport {
    fn test(&self) -> &str {
        &self.test
    }

    fn target(&self) -> &str {
        &self.target
    }

    fn started_at(&self) -> f64 {
        self.started_at
    }

    /// For listings: "sent 1.00 Mbits/sec" or "received 99.9 % from 10.0.0.1:40000".
    fn headline_text(&self, _scale: Scale) -> String {
        if let (Some((share, got, sent)), Some(_)) = (self.lost_share(), &self.received) {
            return format!(
                "received {got} of {sent} datagrams sent, loss {:.3} %",
                share * 100.0
            );
        }
        match (&self.sent, &self.received) {
            (Some(sent), _) => format!(
                "sent {} datagrams, {}",
                sent.datagrams,
                format_rate(sent.sent_bps, Scale::Adaptive)
            ),
            (None, Some(stream)) => format!(
                "from {}: {} of {} datagrams, loss {:.3} %",
                stream.sender, stream.datagrams, stream.expected, stream.loss_percent
            ),
            (None, None) => String::new(),
        }
    }

    /// A mesh row's: the share of the sender's datagrams this receiver never got.
    fn mesh_figure(&self, which: linerate_model::measure::Headline) -> (Option<f64>, String) {
        let linerate_model::measure::Headline::Loss = which else {
            return (None, String::new());
        };
        let Some((share, got, sent)) = self.lost_share() else {
            return (None, String::new());
        };
        let text = match &self.received {
            // (Not its join latency: in a mesh the source waits for the receivers to
            // join, so that is mostly the wait.)
            Some(stream) => format!(
                "loss {:.3} % ({got} of {sent} received), jitter {:.3} ms",
                share * 100.0,
                stream.jitter_ms
            ),
            None => format!("nothing received of {sent} datagrams sent"),
        };
        (Some(share), text)
    }

    fn render_text(&self, _scale: Scale) -> String {
        let warnings: String = self
            .warnings
            .iter()
            .map(|w| format!("warning: {w}\n"))
            .collect();
        self.counts_text() + &warnings
    }
    /// `export --format csv`: one row, the run's counts.
    fn rows(&self) -> Rows {
        let header = [
            "side",
            "group",
            "port",
            "peer",
            "datagrams",
            "expected",
            "lost",
            "out_of_order",
            "duplicates",
            "jitter_ms",
            "duration_s",
            "bps",
        ]
        .map(String::from)
        .to_vec();
        let row = match (&self.sent, &self.received) {
            (Some(sent), Some(stream)) => vec![
                "receiver".into(),
                stream.group.to_string(),
                stream.port.to_string(),
                stream.sender.to_string(),
                stream.datagrams.to_string(),
                sent.datagrams.to_string(),
                (sent.datagrams.saturating_sub(stream.datagrams)).to_string(),
                stream.out_of_order.to_string(),
                stream.duplicates.to_string(),
                format!("{:.6}", stream.jitter_ms),
                format!("{:.6}", stream.duration_s),
                format!("{:.0}", stream.received_bps),
            ],
            (Some(sent), _) => vec![
                "sender".into(),
                sent.group.to_string(),
                sent.port.to_string(),
                sent.local.map(|a| a.to_string()).unwrap_or_default(),
                sent.datagrams.to_string(),
                sent.datagrams.to_string(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                format!("{:.6}", sent.duration_s),
                format!("{:.0}", sent.sent_bps),
            ],
            (None, Some(stream)) => vec![
                "receiver".into(),
                stream.group.to_string(),
                stream.port.to_string(),
                stream.sender.to_string(),
                stream.datagrams.to_string(),
                stream.expected.to_string(),
                stream.lost.to_string(),
                stream.out_of_order.to_string(),
                stream.duplicates.to_string(),
                format!("{:.6}", stream.jitter_ms),
                format!("{:.6}", stream.duration_s),
                format!("{:.0}", stream.received_bps),
            ],
            (None, None) => return (header, Vec::new()),
        };
        let mut rows = vec![row];
        // A sender's gathered receivers: a row each, counted against what it sent.
        let sent = self.sent.as_ref().map_or(0, |s| s.datagrams);
        for count in self.receivers.iter() {
            let stream = count.received.as_deref();
            let got = stream.map_or(0, |s| s.datagrams.min(sent));
            let mut row = vec![format!("receiver {}", count.receiver)];
            row.extend(stream.map_or_else(
                || vec![String::new(); 3],
                |s| {
                    vec![
                        s.group.to_string(),
                        s.port.to_string(),
                        s.sender.to_string(),
                    ]
                },
            ));
            row.extend([got.to_string(), sent.to_string(), (sent - got).to_string()]);
            row.extend(stream.map_or_else(
                || vec![String::new(); 5],
                |s| {
                    vec![
                        s.out_of_order.to_string(),
                        s.duplicates.to_string(),
                        format!("{:.6}", s.jitter_ms),
                        format!("{:.6}", s.duration_s),
                        format!("{:.0}", s.received_bps),
                    ]
                },
            ));
            rows.push(row);
        }
        (header, rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_line_says_its_counts_its_delay_and_how_it_ended() {
        let stream = MulticastStream {
            group: "239.1.1.1".parse().unwrap(),
            port: 5001,
            source: None,
            sender: "10.0.0.1:40000".parse().unwrap(),
            datagrams: 98,
            bytes: 98 * 1470,
            lost: 2,
            expected: 100,
            loss_percent: 2.0,
            out_of_order: 1,
            duplicates: 0,
            foreign: 0,
            jitter_ms: 0.012,
            duration_s: 1.0,
            received_bps: 1_152_480.0,
            join_latency_ms: Some(3.25),
            one_way_delay: OneWayDelay::Given {
                mean_ms: 5.1,
                min_ms: 5.0,
                max_ms: 6.0,
            },
            added_delay_ms: 0.1,
            ended: StreamEnd::Final,
        };
        let line = stream_line(&stream);
        for part in [
            "multicast 239.1.1.1 port 5001 from 10.0.0.1:40000",
            "98 of 100 datagrams (2 lost, 2.000%)",
            "1 out of order",
            "one-way delay 5.100/5.000/6.000 ms",
            "first datagram 3.2 ms after the join",
            "ended by its final datagram",
        ] {
            assert!(line.contains(part), "{part:?} not in {line}");
        }
    }

    #[test]
    fn a_gathering_senders_text_and_rows_have_a_line_for_each_receiver() {
        let sent = MulticastSent {
            group: "239.1.1.1".parse().unwrap(),
            groups: 1,
            port: 5001,
            ttl: 1,
            marks: None,
            interface: None,
            local: None,
            length: 1000,
            rate_bps: 1_000_000,
            datagrams: 100,
            bytes: 100_000,
            send_errors: 0,
            duration_s: 0.8,
            sent_bps: 1_000_000.0,
            finals: 10,
        };
        let stream = MulticastStream {
            group: "239.1.1.1".parse().unwrap(),
            port: 5001,
            source: None,
            sender: "10.0.0.1:40000".parse().unwrap(),
            datagrams: 97,
            bytes: 97_000,
            lost: 3,
            expected: 100,
            loss_percent: 3.0,
            out_of_order: 0,
            duplicates: 0,
            foreign: 0,
            jitter_ms: 0.02,
            duration_s: 0.8,
            received_bps: 970_000.0,
            join_latency_ms: Some(1000.5),
            one_way_delay: OneWayDelay::Withheld {
                reason: "clocks apart".into(),
            },
            added_delay_ms: 0.0,
            ended: StreamEnd::Final,
        };
        let mut report = MulticastReport::sender(sent, 0.0);
        report.receivers = vec![
            ReceiverCount {
                receiver: "b".into(),
                received: Some(Box::new(stream)),
                error: None,
            },
            ReceiverCount {
                receiver: "c".into(),
                received: None,
                error: None,
            },
            ReceiverCount {
                receiver: "d".into(),
                received: None,
                error: Some("the key is not this server's".into()),
            },
        ];
        let text = report.render_text(Scale::Adaptive);
        for line in [
            "receiver b: 97 of 100 datagrams (3 lost, 3.000%)",
            "first datagram 1000.5 ms after its join",
            "receiver c: nothing received of 100 datagrams sent",
            "receiver d: no count: the key is not this server's",
        ] {
            assert!(text.contains(line), "{line:?} not in {text}");
        }
        assert!(!text.contains("see its serve --join output"), "{text}");
        let (header, rows) = report.rows();
        assert_eq!(rows.len(), 4, "the sender's row and one a receiver");
        assert!(rows.iter().all(|r| r.len() == header.len()), "{rows:?}");
        let lost = header.iter().position(|h| h == "lost").unwrap();
        let lost: Vec<&str> = rows[1..].iter().map(|r| r[lost].as_str()).collect();
        assert_eq!(lost, ["3", "100", "100"]);
        let back: MulticastReport =
            serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
        assert_eq!(back, report);
    }
}
