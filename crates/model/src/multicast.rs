//! Multicast tests (docs/multicast.md): the groups a receiver joins, and what a sender and
//! each receiver report. One sender, any number of receivers, each of which counts what
//! reached it; the datagrams are iperf 2's, so iperf 2's senders and receivers take part.

use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};

/// The port multicast tests use unless told: iperf 2's, so that `iperf -s -u -B GROUP`
/// and `iperf -c GROUP -u` meet linerate's receivers and senders without a flag.
pub const DEFAULT_MULTICAST_PORT: u16 = 5001;
/// The TTL (IPv6 hop limit) a sender gives its datagrams unless told: one hop, the
/// sender's own link, as iperf 2 and the kernel default to. Crossing a router takes more.
pub const DEFAULT_MULTICAST_TTL: u32 = 1;

/// One group a receiver joins: any-source (`239.1.1.1`) or source-specific
/// (`232.1.1.1@192.0.2.7`, IGMPv3/MLDv2), through the interface named after `%` or the one
/// the route to the group takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Join {
    pub group: IpAddr,
    /// The one sender a source-specific join takes datagrams from.
    pub source: Option<IpAddr>,
    pub interface: Option<String>,
}

impl Join {
    /// Reads `GROUP[@SOURCE][%IFACE]`; the error names what is wrong with the value.
    pub fn parse(text: &str) -> Result<Join, String> {
        let (rest, interface) = match text.rsplit_once('%') {
            Some((rest, name)) => (rest, Some(crate::interface_name(name)?)),
            None => (text, None),
        };
        let (group, source) = match rest.split_once('@') {
            Some((group, source)) => (group, Some(source)),
            None => (rest, None),
        };
        let group = bare_address(group)
            .parse::<IpAddr>()
            .map_err(|_| format!("{group:?} is not an IP address (GROUP[@SOURCE][%IFACE])"))?;
        if !group.is_multicast() {
            return Err(format!(
                "{group} is not a multicast group (IPv4 224.0.0.0/4, IPv6 ff00::/8)"
            ));
        }
        let source = match source {
            None => None,
            Some(text) => {
                let source = bare_address(text)
                    .parse::<IpAddr>()
                    .map_err(|_| format!("source {text:?} is not an IP address (GROUP@SOURCE)"))?;
                if source.is_multicast() || source.is_unspecified() {
                    return Err(format!(
                        "source {source} cannot send: a source-specific join names the sender's unicast address"
                    ));
                }
                if source.is_ipv4() != group.is_ipv4() {
                    return Err(format!(
                        "source {source} and group {group} are of different IP versions"
                    ));
                }
                Some(source)
            }
        };
        Ok(Join {
            group,
            source,
            interface,
        })
    }

    /// `239.1.1.1`, `232.1.1.1@192.0.2.7%eth1`: as it is written on the command line.
    pub fn describe(&self) -> String {
        let mut text = self.group.to_string();
        if let Some(source) = self.source {
            text.push('@');
            text.push_str(&source.to_string());
        }
        if let Some(interface) = &self.interface {
            text.push('%');
            text.push_str(interface);
        }
        text
    }
}

impl std::str::FromStr for Join {
    type Err = String;
    fn from_str(text: &str) -> Result<Join, String> {
        Join::parse(text)
    }
}

/// The multicast group `host` names, where it names one (`239.1.1.1`, `[ff3e::1]`).
pub fn group_named(host: &str) -> Option<IpAddr> {
    bare_address(host)
        .parse::<IpAddr>()
        .ok()
        .filter(IpAddr::is_multicast)
}

/// An address as written, without the brackets an IPv6 address may carry.
fn bare_address(text: &str) -> &str {
    text.strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(text)
}

/// What a multicast sender did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MulticastSent {
    /// The first group; with `groups` above one, the groups from it on, one stream each.
    pub group: IpAddr,
    pub groups: u32,
    pub port: u16,
    /// The TTL (IPv6 hop limit) its datagrams carried.
    pub ttl: u32,
    /// The DSCP and ECN they carried, where asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marks: Option<crate::marks::Marks>,
    /// The interface they left through, where one was named.
    pub interface: Option<String>,
    /// The address and port they left from: what receivers see as the sender.
    pub local: Option<SocketAddr>,
    /// Payload bytes per datagram.
    pub length: usize,
    /// The rate each group's stream was paced to, bit/s of payload.
    pub rate_bps: u64,
    /// Datagrams the kernel took, all groups' (the final datagrams not among them), and
    /// their bytes.
    pub datagrams: u64,
    pub bytes: u64,
    /// Sends the kernel refused (a full queue: ENOBUFS, EAGAIN), each counted, none retried.
    pub send_errors: u64,
    /// From the first send to the last, seconds, and the rate over it, bit/s of payload.
    pub duration_s: f64,
    pub sent_bps: f64,
    /// Times every stream's final datagram was sent (UDP may lose one).
    pub finals: u32,
}

/// How one sender's stream ended at a receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamEnd {
    /// Its final datagram arrived.
    Final,
    /// Nothing arrived for the receiver's silence bound.
    Silence,
    /// The receiver stopped (its operator's signal) while the stream was on.
    Stopped,
}

/// The one-way delay of a stream's datagrams, given only where the two clocks can be
/// compared (docs/stamp.md's rule).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum OneWayDelay {
    Given {
        mean_ms: f64,
        min_ms: f64,
        max_ms: f64,
    },
    Withheld {
        reason: String,
    },
}

/// What one receiver counted of one sender's stream to one group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MulticastStream {
    pub group: IpAddr,
    pub port: u16,
    /// The join's source, for a source-specific join.
    pub source: Option<IpAddr>,
    /// The sender as its datagrams say (address and port).
    pub sender: SocketAddr,
    /// Distinct test datagrams received and their bytes.
    pub datagrams: u64,
    pub bytes: u64,
    /// Packet numbers never seen, below the highest seen (or the final's count).
    pub lost: u64,
    /// The datagrams the sender sent as far as this receiver can tell: the final
    /// datagram's count where it arrived, else the highest packet number seen.
    pub expected: u64,
    pub loss_percent: f64,
    pub out_of_order: u64,
    pub duplicates: u64,
    /// Datagrams on the group's port that were not test datagrams.
    pub foreign: u64,
    /// RFC 3550 interarrival jitter, milliseconds.
    pub jitter_ms: f64,
    /// From the first datagram to the last, seconds, and the rate over it, bit/s.
    pub duration_s: f64,
    pub received_bps: f64,
    /// From the join to the first datagram of the first stream the join saw: how long
    /// the network took to start delivering (IGMP/MLD report, snooping, routing).
    pub join_latency_ms: Option<f64>,
    pub one_way_delay: OneWayDelay,
    /// The mean delay above the stream's least, milliseconds: the queues on the way. The
    /// clocks' offset cancels, so it is given without synchronised clocks.
    pub added_delay_ms: f64,
    pub ended: StreamEnd,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_read_any_source_source_specific_and_an_interface() {
        let join = Join::parse("239.1.1.1").unwrap();
        assert_eq!(join.group, "239.1.1.1".parse::<IpAddr>().unwrap());
        assert_eq!((join.source, join.interface), (None, None));
        let join = Join::parse("232.1.1.1@192.0.2.7%eth1").unwrap();
        assert_eq!(join.source, Some("192.0.2.7".parse().unwrap()));
        assert_eq!(join.interface.as_deref(), Some("eth1"));
        assert_eq!(join.describe(), "232.1.1.1@192.0.2.7%eth1");
        let join = Join::parse("[ff3e::8000:1]@2001:db8::7%veth0").unwrap();
        assert_eq!(join.group, "ff3e::8000:1".parse::<IpAddr>().unwrap());
        assert_eq!(join.source, Some("2001:db8::7".parse().unwrap()));
        assert_eq!(Join::parse("ff02::1%lo").unwrap().describe(), "ff02::1%lo");
    }

    #[test]
    fn a_join_that_cannot_be_is_refused_with_what_is_wrong() {
        for (text, says) in [
            ("10.0.0.1", "is not a multicast group"),
            ("2001:db8::1", "is not a multicast group"),
            ("group", "is not an IP address"),
            ("232.1.1.1@239.2.2.2", "cannot send"),
            ("232.1.1.1@0.0.0.0", "cannot send"),
            ("232.1.1.1@2001:db8::1", "different IP versions"),
            ("232.1.1.1@x", "is not an IP address"),
            ("239.1.1.1%", "is not an interface name"),
            (
                "239.1.1.1%a-very-long-interface",
                "is not an interface name",
            ),
            ("239.1.1.1%a/b", "is not an interface name"),
            ("239.1.1.1%a b", "is not an interface name"),
            ("239.1.1.1%a b", "is not an interface name"),
        ] {
            let error = Join::parse(text).unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn results_keep_their_shape_in_json() {
        let delay = OneWayDelay::Withheld {
            reason: "unknown".into(),
        };
        let text = serde_json::to_string(&delay).unwrap();
        assert_eq!(text, r#"{"state":"withheld","reason":"unknown"}"#);
        assert_eq!(
            serde_json::to_string(&StreamEnd::Silence).unwrap(),
            r#""silence""#
        );
    }
}
