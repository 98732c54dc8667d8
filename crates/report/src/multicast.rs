//! A multicast test's text (docs/multicast.md): what a sender sent, and one line per
//! sender's stream a receiver counted. Their JSON is the model's values as they are.

use linerate_model::multicast::{MulticastSent, MulticastStream, OneWayDelay, StreamEnd};
use linerate_model::units::{format_rate, Scale};

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
    text.push_str("each receiver counts what reached it: see its serve --join output\n");
    text
}

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
}
