//! ndt7 (M-Lab's speed test protocol, m-lab/ndt-server `spec/ndt7-protocol.md` v0.11.0):
//! its constants, its measurement message as the wire carries it, the rule that grows a
//! sender's binary messages, the client's metadata from the upgrade's query string, and
//! what one subtest measured as linerate keeps it. Sans-IO: the server and client in
//! linerate-ndt7 move the bytes; linerate-report renders what is here.

use serde::{Deserialize, Serialize};

/// The WebSocket subprotocol every ndt7 upgrade names.
pub const SUBPROTOCOL: &str = "net.measurementlab.ndt.v7";
pub const DOWNLOAD_PATH: &str = "/ndt/v7/download";
pub const UPLOAD_PATH: &str = "/ndt/v7/upload";
/// The spec's bounds on a binary message, and where a sender starts.
pub const MIN_MESSAGE: usize = 1 << 10;
pub const INITIAL_MESSAGE: usize = 1 << 13;
/// The largest message a sender grows to: M-Lab's server and the Rust and browser clients
/// stop at 1 MiB (the spec allows up to [`MAX_MESSAGE`], which a receiver must accept).
pub const MAX_SCALED_MESSAGE: usize = 1 << 20;
/// The largest message a receiver must accept, and the most linerate accepts.
pub const MAX_MESSAGE: usize = 1 << 24;
/// A sender doubles its message when the message is at most this fraction of what it
/// has sent so far.
pub const SCALING_FRACTION: u64 = 16;
/// The longest query string the spec allows.
pub const MAX_QUERY: usize = 4096;
/// A subtest's data runs this long after the WebSocket handshake.
pub const RUNTIME_S: f64 = 10.0;
/// A subtest's connection is closed this long after the handshake, whatever the peer
/// does (the spec allows closing at 13 s).
pub const HARD_BOUND_S: f64 = 13.0;
/// How often a measurement message is sent: the spec asks for no more than ten a second
/// on average; M-Lab's server samples every 250 ms on average.
pub const MEASUREMENT_EVERY_S: f64 = 0.25;

/// Which way the data flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Subtest {
    Download,
    Upload,
}

impl Subtest {
    pub fn path(self) -> &'static str {
        match self {
            Subtest::Download => DOWNLOAD_PATH,
            Subtest::Upload => UPLOAD_PATH,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Subtest::Download => "download",
            Subtest::Upload => "upload",
        }
    }

    /// The subtest a request's path selects.
    pub fn of_path(path: &str) -> Option<Subtest> {
        match path {
            DOWNLOAD_PATH => Some(Subtest::Download),
            UPLOAD_PATH => Some(Subtest::Upload),
            _ => None,
        }
    }
}

/// One measurement message (a WebSocket text message), field names as the spec spells
/// them. Every part is optional on the wire.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    #[serde(rename = "AppInfo", default, skip_serializing_if = "Option::is_none")]
    pub app_info: Option<AppInfo>,
    #[serde(
        rename = "ConnectionInfo",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub connection_info: Option<ConnectionInfo>,
    #[serde(rename = "Origin", default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    #[serde(rename = "Test", default, skip_serializing_if = "Option::is_none")]
    pub test: Option<String>,
    #[serde(rename = "TCPInfo", default, skip_serializing_if = "Option::is_none")]
    pub tcp_info: Option<TcpInfo>,
    /// Not in the spec's latest text (v0.11.0); M-Lab's server sends it where the
    /// connection runs BBR, and clients ignore what they do not know.
    #[serde(rename = "BBRInfo", default, skip_serializing_if = "Option::is_none")]
    pub bbr_info: Option<BbrInfo>,
}

/// Application-level counts: payload bytes, without WebSocket, TLS or TCP/IP overhead.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct AppInfo {
    /// Microseconds since the subtest began.
    #[serde(rename = "ElapsedTime")]
    pub elapsed_us: i64,
    #[serde(rename = "NumBytes")]
    pub num_bytes: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConnectionInfo {
    #[serde(rename = "Client")]
    pub client: String,
    #[serde(rename = "Server")]
    pub server: String,
    #[serde(rename = "UUID", default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(rename = "StartTime", default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
}

/// The `TCP_INFO` fields the spec names (bytes at the TCP level, times in microseconds).
/// A field the kernel does not fill is left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpInfo {
    #[serde(rename = "BusyTime", default, skip_serializing_if = "Option::is_none")]
    pub busy_time: Option<i64>,
    #[serde(
        rename = "BytesAcked",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub bytes_acked: Option<i64>,
    #[serde(
        rename = "BytesReceived",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub bytes_received: Option<i64>,
    #[serde(rename = "BytesSent", default, skip_serializing_if = "Option::is_none")]
    pub bytes_sent: Option<i64>,
    #[serde(
        rename = "BytesRetrans",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub bytes_retrans: Option<i64>,
    #[serde(
        rename = "ElapsedTime",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub elapsed_us: Option<i64>,
    #[serde(rename = "MinRTT", default, skip_serializing_if = "Option::is_none")]
    pub min_rtt_us: Option<i64>,
    #[serde(rename = "RTT", default, skip_serializing_if = "Option::is_none")]
    pub rtt_us: Option<i64>,
    #[serde(rename = "RTTVar", default, skip_serializing_if = "Option::is_none")]
    pub rtt_var_us: Option<i64>,
    #[serde(
        rename = "RWndLimited",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub rwnd_limited_us: Option<i64>,
    #[serde(
        rename = "SndBufLimited",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub sndbuf_limited_us: Option<i64>,
}

/// BBR's own estimates (`TCP_CC_INFO`), in the kernel's units.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct BbrInfo {
    /// The bottleneck bandwidth estimate, bytes a second.
    #[serde(rename = "BW")]
    pub bw: i64,
    /// Microseconds.
    #[serde(rename = "MinRTT")]
    pub min_rtt_us: i64,
    /// Fixed point, 256 = 1.0.
    #[serde(rename = "PacingGain")]
    pub pacing_gain: i64,
    #[serde(rename = "CwndGain")]
    pub cwnd_gain: i64,
    #[serde(rename = "ElapsedTime")]
    pub elapsed_us: i64,
}

/// The spec's appendix rule for a sender's binary messages: start at [`INITIAL_MESSAGE`],
/// double while the message is at most 1/[`SCALING_FRACTION`] of what was sent, up to
/// `max`.
#[derive(Debug, Clone, Copy)]
pub struct MessageSizer {
    size: usize,
    max: usize,
    sent: u64,
}

impl MessageSizer {
    pub fn new(max: usize) -> MessageSizer {
        MessageSizer {
            size: INITIAL_MESSAGE.min(max).max(MIN_MESSAGE),
            max: max.clamp(MIN_MESSAGE, MAX_MESSAGE),
            sent: 0,
        }
    }

    /// The size of the next message.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Counts a message of the current size as sent, and grows the next one by the rule.
    pub fn sent(&mut self) {
        self.sent = self.sent.saturating_add(self.size as u64);
        if self.size < self.max && self.size as u64 <= self.sent / SCALING_FRACTION {
            self.size = (self.size * 2).min(self.max);
        }
    }
}

/// Why an upgrade's query string is refused (the spec: a 4xx).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    #[error("the query string is {0} bytes, over the spec's {MAX_QUERY}")]
    TooLong(usize),
    #[error("the query string's {0:?} is not valid percent-encoding")]
    BadEscape(String),
    #[error("the query string's {0:?} is not UTF-8 once decoded")]
    NotUtf8(String),
}

/// The client's metadata from an upgrade's query string: name and value pairs, decoded,
/// in order. A key repeated keeps its first value and a key without a value has an empty
/// one (both as the spec asks of a server).
pub fn parse_metadata(query: &str) -> Result<Vec<(String, String)>, MetadataError> {
    if query.len() > MAX_QUERY {
        return Err(MetadataError::TooLong(query.len()));
    }
    let mut pairs: Vec<(String, String)> = Vec::new();
    for part in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = part.split_once('=').unwrap_or((part, ""));
        let name = percent_decode(name)?;
        let value = percent_decode(value)?;
        if !pairs.iter().any(|(known, _)| *known == name) {
            pairs.push((name, value));
        }
    }
    Ok(pairs)
}

/// `application/x-www-form-urlencoded` decoding ('+' is a space), refusing what is not
/// UTF-8 afterwards rather than replacing it.
fn percent_decode(text: &str) -> Result<String, MetadataError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(at + 1..at + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| MetadataError::BadEscape(text.to_string()))?;
                out.push(hex);
                at += 2;
            }
            other => out.push(other),
        }
        at += 1;
    }
    String::from_utf8(out).map_err(|_| MetadataError::NotUtf8(text.to_string()))
}

/// How a subtest ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubtestEnd {
    /// Its runtime passed and the closing handshake was made.
    Completed,
    /// The peer closed it first (a client's upload ends so).
    PeerClosed,
    /// The connection ended without a closing handshake (an EOF or a reset: the spec
    /// asks that this be recorded, not failed).
    Abrupt,
    /// The hard bound passed with the peer not done (a download client that stopped
    /// reading).
    Bounded,
    /// The peer broke the protocol (a binary message the wrong way, a message over the
    /// bound, an unmasked frame, a text flood) and was closed.
    Refused,
}

/// What one subtest measured, from one end's view, with the other end's last
/// measurement message where it sent one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubtestResult {
    pub subtest: Subtest,
    /// "client" or "server": whose record this is.
    pub measured_by: String,
    /// The client and server as the server sees them ("10.0.0.1:40000").
    pub client: String,
    pub server: String,
    /// Seconds from the handshake to the subtest's end.
    pub elapsed_s: f64,
    /// Payload bytes this end sent (a download's server, an upload's client) or received.
    pub app_bytes: u64,
    /// The subtest's figure, counted at the receiver where it can be: a download's
    /// client counts what it received; an upload's figure is the server's count (its
    /// AppInfo, or its TCPInfo's BytesReceived where a foreign server sends no AppInfo).
    pub goodput_bps: f64,
    /// Which count `goodput_bps` is ("client AppInfo", "server AppInfo", "server
    /// TCPInfo BytesReceived").
    pub counted_by: String,
    pub min_rtt_ms: Option<f64>,
    /// Retransmitted over sent bytes, percent, from the sender's TCPInfo.
    pub retransmission_pct: Option<f64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub congestion: String,
    pub ended: SubtestEnd,
    /// Why the subtest ended so, where it was not completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_why: Option<String>,
    /// The server's measurement messages, in order (at most one every
    /// [`MEASUREMENT_EVERY_S`] for [`HARD_BOUND_S`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_measurements: Vec<Measurement>,
    /// The client's last measurement message, where it sent any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_last: Option<Measurement>,
    /// The client's metadata from the upgrade's query string.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metadata: Vec<(String, String)>,
}

impl SubtestResult {
    /// The server's last measurement message.
    pub fn server_last(&self) -> Option<&Measurement> {
        self.server_measurements.last()
    }
}

/// Minimum RTT and retransmission share from a sender's or receiver's TCPInfo.
pub fn rtt_and_retransmission(tcp: &TcpInfo) -> (Option<f64>, Option<f64>) {
    let min_rtt = tcp.min_rtt_us.map(|us| us as f64 / 1000.0);
    let retrans = match (tcp.bytes_retrans, tcp.bytes_sent) {
        (Some(retrans), Some(sent)) if sent > 0 => Some(retrans as f64 / sent as f64 * 100.0),
        _ => None,
    };
    (min_rtt, retrans)
}

/// M-Lab's locate API (v2): the nearest ndt7 servers, each with its subtests' URLs.
pub const MLAB_LOCATE_URL: &str = "https://locate.measurementlab.net/v2/nearest/ndt/ndt7";
/// The most of a locate answer read (M-Lab's is about 4 KiB for four servers).
pub const MAX_LOCATE_ANSWER: usize = 256 * 1024;

/// One server a locate answer offers: its name and place, and the two subtests' URLs
/// (with the access tokens locate put in their query strings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocatedServer {
    pub machine: String,
    pub city: Option<String>,
    pub country: Option<String>,
    pub download_url: String,
    pub upload_url: String,
}

impl LocatedServer {
    pub fn url(&self, subtest: Subtest) -> &str {
        match subtest {
            Subtest::Download => &self.download_url,
            Subtest::Upload => &self.upload_url,
        }
    }

    /// "mlab1-lga05.mlab-oti.measurement-lab.org (New York, US)".
    pub fn describe(&self) -> String {
        let place: Vec<&str> = [&self.city, &self.country]
            .into_iter()
            .filter_map(|p| p.as_deref())
            .collect();
        if place.is_empty() {
            self.machine.clone()
        } else {
            format!("{} ({})", self.machine, place.join(", "))
        }
    }
}

/// Reads a locate v2 answer: its `results`, nearest first, each with the `urls` keyed by
/// scheme and path (`wss:///ndt/v7/download`; `ws:///…` where `tls` is false). A result
/// without both URLs of the scheme, or with a URL of another scheme, host-less or of
/// another path, is passed over; an answer with none left is an error, as is one over
/// [`MAX_LOCATE_ANSWER`] or not JSON.
pub fn parse_locate(answer: &[u8], tls: bool) -> Result<Vec<LocatedServer>, String> {
    if answer.len() > MAX_LOCATE_ANSWER {
        return Err(format!(
            "the locate answer is over {MAX_LOCATE_ANSWER} bytes"
        ));
    }
    let value: serde_json::Value = serde_json::from_slice(answer)
        .map_err(|e| format!("the locate answer is not JSON: {e}"))?;
    let results = value
        .get("results")
        .and_then(|r| r.as_array())
        .ok_or("the locate answer has no results")?;
    let scheme = if tls { "wss" } else { "ws" };
    let string = |v: &serde_json::Value, key: &str| {
        v.get(key)
            .and_then(|s| s.as_str())
            .filter(|s| !s.is_empty() && s.len() <= 4096)
            .map(str::to_string)
    };
    let url_of = |result: &serde_json::Value, path: &str| {
        let url = result
            .get("urls")
            .and_then(|u| string(u, &format!("{scheme}://{path}")))?;
        let rest = url.strip_prefix(&format!("{scheme}://"))?;
        let (authority, tail) = rest.split_at(rest.find('/')?);
        let path_ok = tail.split('?').next() == Some(path);
        (!authority.is_empty() && path_ok && !url.chars().any(char::is_whitespace)).then_some(url)
    };
    let servers: Vec<LocatedServer> = results
        .iter()
        .take(64)
        .filter_map(|result| {
            let location = result.get("location");
            Some(LocatedServer {
                machine: string(result, "machine")?,
                city: location.and_then(|l| string(l, "city")),
                country: location.and_then(|l| string(l, "country")),
                download_url: url_of(result, DOWNLOAD_PATH)?,
                upload_url: url_of(result, UPLOAD_PATH)?,
            })
        })
        .collect();
    if servers.is_empty() {
        return Err(format!(
            "the locate answer offers no server with {scheme}:// URLs for both subtests"
        ));
    }
    Ok(servers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn messages_double_once_they_are_a_sixteenth_of_what_was_sent_up_to_the_bound() {
        let mut sizer = MessageSizer::new(MAX_SCALED_MESSAGE);
        assert_eq!(sizer.size(), 8192);
        // 8 KiB doubles when 8 KiB <= sent/16, i.e. after 16 messages (128 KiB sent).
        for _ in 0..15 {
            sizer.sent();
            assert_eq!(sizer.size(), 8192);
        }
        sizer.sent();
        assert_eq!(sizer.size(), 16384);
        let mut sent = 0u64;
        for _ in 0..100_000 {
            sent += sizer.size() as u64;
            sizer.sent();
            assert!(sizer.size() <= MAX_SCALED_MESSAGE);
        }
        assert!(sent > 1 << 30);
        assert_eq!(sizer.size(), MAX_SCALED_MESSAGE);
    }

    #[test]
    fn metadata_is_decoded_first_key_wins_and_keys_without_values_are_empty() {
        let pairs = parse_metadata(
            "client_name=ndt7-client&client_version=0.3.1%2Bx&flag&client_name=other&os=a+b",
        )
        .unwrap();
        assert_eq!(
            pairs,
            vec![
                ("client_name".into(), "ndt7-client".into()),
                ("client_version".into(), "0.3.1+x".into()),
                ("flag".into(), String::new()),
                ("os".into(), "a b".into()),
            ]
        );
        assert_eq!(parse_metadata("").unwrap(), vec![]);
    }

    #[test]
    fn a_long_query_a_broken_escape_and_bytes_that_are_not_utf8_are_refused() {
        let long = "a=".to_string() + &"b".repeat(MAX_QUERY);
        assert_eq!(
            parse_metadata(&long),
            Err(MetadataError::TooLong(MAX_QUERY + 2))
        );
        assert!(matches!(
            parse_metadata("a=%zz"),
            Err(MetadataError::BadEscape(_))
        ));
        assert!(matches!(
            parse_metadata("a=%4"),
            Err(MetadataError::BadEscape(_))
        ));
        assert!(matches!(
            parse_metadata("a=%ff%fe"),
            Err(MetadataError::NotUtf8(_))
        ));
    }

    #[test]
    fn a_measurement_reads_and_writes_the_specs_field_names() {
        let text = r#"{"AppInfo":{"ElapsedTime":250000,"NumBytes":1048576},
            "ConnectionInfo":{"Client":"10.0.0.1:5000","Server":"[::1]:443"},
            "Origin":"server","Test":"download",
            "TCPInfo":{"BytesAcked":2000000,"BytesSent":2100000,"BytesRetrans":1000,"MinRTT":20000,"ElapsedTime":250100},
            "Unknown":{"x":1}}"#;
        let m: Measurement = serde_json::from_str(text).unwrap();
        assert_eq!(m.app_info.unwrap().num_bytes, 1_048_576);
        let tcp = m.tcp_info.unwrap();
        assert_eq!(tcp.min_rtt_us, Some(20_000));
        assert_eq!(tcp.bytes_received, None);
        let (rtt, retrans) = rtt_and_retransmission(&tcp);
        assert_eq!(rtt, Some(20.0));
        assert!((retrans.unwrap() - 1000.0 / 2_100_000.0 * 100.0).abs() < 1e-12);
        let written = serde_json::to_value(&m).unwrap();
        assert_eq!(written["TCPInfo"]["MinRTT"], 20_000);
        assert!(written["TCPInfo"].get("BytesReceived").is_none());
        assert!(written.get("BBRInfo").is_none());
    }

    proptest! {
        /// Any query string: refused with a reason or decoded into unique names, never
        /// a panic, never more pairs than parts.
        #[test]
        fn any_query_is_decoded_or_refused(query in ".{0,300}", raw in proptest::collection::vec(any::<u8>(), 0..300)) {
            for text in [query, String::from_utf8_lossy(&raw).into_owned()] {
                if let Ok(pairs) = parse_metadata(&text) {
                    let mut names: Vec<_> = pairs.iter().map(|p| &p.0).collect();
                    names.sort();
                    names.dedup();
                    prop_assert_eq!(names.len(), pairs.len());
                    prop_assert!(pairs.len() <= text.split('&').count());
                }
            }
        }

        /// The sizer never leaves the spec's bounds, whatever its bound.
        #[test]
        fn message_sizes_stay_within_the_spec(max in 0usize..(1 << 26), steps in 0usize..2000) {
            let mut sizer = MessageSizer::new(max);
            for _ in 0..steps {
                prop_assert!((MIN_MESSAGE..=MAX_MESSAGE).contains(&sizer.size()));
                sizer.sent();
            }
        }
    }
    /// An answer in the shape M-Lab's locate v2 gives (its documentation's example, with
    /// a second server and one result that lacks the upload URL).
    const LOCATE_ANSWER: &str = r#"{
      "results": [
        {"machine": "mlab3-lga05.mlab-oti.measurement-lab.org",
         "location": {"city": "New York", "country": "US"},
         "urls": {
           "ws:///ndt/v7/download": "ws://ndt-mlab3-lga05.mlab-oti.measurement-lab.org/ndt/v7/download?access_token=T1",
           "ws:///ndt/v7/upload": "ws://ndt-mlab3-lga05.mlab-oti.measurement-lab.org/ndt/v7/upload?access_token=T2",
           "wss:///ndt/v7/download": "wss://ndt-mlab3-lga05.mlab-oti.measurement-lab.org/ndt/v7/download?access_token=T3",
           "wss:///ndt/v7/upload": "wss://ndt-mlab3-lga05.mlab-oti.measurement-lab.org/ndt/v7/upload?access_token=T4"}},
        {"machine": "mlab1-half.example", "urls": {
           "wss:///ndt/v7/download": "wss://half.example/ndt/v7/download?access_token=X"}},
        {"machine": "mlab2-ewr01.mlab-oti.measurement-lab.org",
         "urls": {
           "wss:///ndt/v7/download": "wss://ndt-mlab2-ewr01.mlab-oti.measurement-lab.org/ndt/v7/download?access_token=T5",
           "wss:///ndt/v7/upload": "wss://ndt-mlab2-ewr01.mlab-oti.measurement-lab.org/ndt/v7/upload?access_token=T6"}}
      ]
    }"#;

    #[test]
    fn a_locate_answer_gives_the_servers_with_both_urls_nearest_first() {
        let servers = parse_locate(LOCATE_ANSWER.as_bytes(), true).unwrap();
        assert_eq!(servers.len(), 2);
        assert_eq!(
            servers[0].describe(),
            "mlab3-lga05.mlab-oti.measurement-lab.org (New York, US)"
        );
        assert_eq!(
            servers[0].url(Subtest::Upload),
            "wss://ndt-mlab3-lga05.mlab-oti.measurement-lab.org/ndt/v7/upload?access_token=T4"
        );
        assert_eq!(
            servers[1].machine,
            "mlab2-ewr01.mlab-oti.measurement-lab.org"
        );
        let cleartext = parse_locate(LOCATE_ANSWER.as_bytes(), false).unwrap();
        assert_eq!(cleartext.len(), 1);
        assert!(cleartext[0].download_url.starts_with("ws://ndt-mlab3"));
    }

    #[test]
    fn locate_answers_without_a_usable_server_are_errors() {
        for (answer, why) in [
            ("not json", "not JSON"),
            ("{}", "no results"),
            (r#"{"results": []}"#, "no server"),
            (
                r#"{"results": [{"machine": "m", "urls": {"wss:///ndt/v7/download": "wss://h/elsewhere", "wss:///ndt/v7/upload": "wss://h/ndt/v7/upload"}}]}"#,
                "no server",
            ),
            (
                r#"{"results": [{"machine": "m", "urls": {"wss:///ndt/v7/download": "https://h/ndt/v7/download", "wss:///ndt/v7/upload": "wss://h/ndt/v7/upload"}}]}"#,
                "no server",
            ),
        ] {
            let err = parse_locate(answer.as_bytes(), true).unwrap_err();
            assert!(err.contains(why), "{answer}: {err}");
        }
        let huge = vec![b' '; MAX_LOCATE_ANSWER + 1];
        assert!(parse_locate(&huge, true).unwrap_err().contains("over"));
    }

    proptest::proptest! {
        /// Any bytes: servers or an error, never a panic; every server's URLs are of the
        /// scheme asked and the spec's paths.
        #[test]
        fn any_locate_answer_is_read_or_refused(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            if let Ok(servers) = parse_locate(&bytes, true) {
                for s in servers {
                    proptest::prop_assert!(s.download_url.starts_with("wss://"));
                    proptest::prop_assert!(s.upload_url.contains(UPLOAD_PATH));
                }
            }
        }
    }
}
