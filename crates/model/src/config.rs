//! The resolved configuration of a test: every parameter that shapes its figures, with
//! defaults filled in. Sent to the server as the test specification and kept in results.

use serde::{Deserialize, Serialize};

/// Which way the bytes go, seen from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// The client sends, the server receives (iperf3's default).
    Forward,
    /// The server sends, the client receives (iperf3 `-R`).
    Reverse,
    /// Both at once, on separate connections (iperf3 `--bidir`).
    Bidir,
}

impl Direction {
    /// The way iperf3's flags ask (`-R`, `--bidir`; both: both ways).
    pub fn from_flags(reverse: bool, bidir: bool) -> Direction {
        match (reverse, bidir) {
            (_, true) => Direction::Bidir,
            (true, false) => Direction::Reverse,
            (false, false) => Direction::Forward,
        }
    }
}

/// What one end does on one flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Send,
    Receive,
    /// Request/response: sends requests and times the answers (the client).
    Request,
    /// Request/response: answers requests (the server).
    Respond,
}

/// The transport a test's flows use. Serialised as its lowercase name ("tcp", "udp",
/// "quic"), as stored results and the wire have always carried it; TLS over TCP is `Tcp`
/// with `TestConfig::tls` set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    #[default]
    Tcp,
    Udp,
    Quic,
}

/// What a protocol is and can do: the one table that checks and renderers read, instead
/// of comparing protocols by name. A new protocol is a new variant and its row here; the
/// code that does something different per protocol matches on [`Protocol`] exhaustively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtocolTraits {
    /// Messages are datagrams that stand alone and may be lost: receivers count loss,
    /// reordering and jitter, and a message is at most one datagram.
    pub datagrams: bool,
    /// Carried by the kernel's TCP: TCP_INFO, retransmits, MSS, Nagle, `--congestion`
    /// from the kernel's list.
    pub kernel_tcp: bool,
    /// Encrypted whatever the flags say.
    pub always_encrypted: bool,
    /// The workloads a test of it may run.
    pub workloads: &'static [Workload],
}

impl Protocol {
    pub const ALL: [Protocol; 3] = [Protocol::Tcp, Protocol::Udp, Protocol::Quic];

    /// This protocol's row of the table.
    pub const fn traits(self) -> ProtocolTraits {
        match self {
            Protocol::Tcp => ProtocolTraits {
                datagrams: false,
                kernel_tcp: true,
                always_encrypted: false,
                workloads: &[Workload::Stream, Workload::Rr, Workload::Crr],
            },
            Protocol::Udp => ProtocolTraits {
                datagrams: true,
                kernel_tcp: false,
                always_encrypted: false,
                workloads: &[Workload::Stream, Workload::Rr],
            },
            Protocol::Quic => ProtocolTraits {
                datagrams: false,
                kernel_tcp: false,
                always_encrypted: true,
                workloads: &[Workload::Stream],
            },
        }
    }

    /// Whether a test of this protocol may run `workload`.
    pub fn runs(self, workload: Workload) -> bool {
        self.traits().workloads.contains(&workload)
    }

    /// The name results and the wire use.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Quic => "quic",
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Protocol {
    type Err = String;
    fn from_str(text: &str) -> Result<Protocol, String> {
        Protocol::ALL
            .into_iter()
            .find(|p| p.as_str() == text)
            .ok_or_else(|| {
                format!(
                    "unknown protocol '{}' (tcp, udp or quic)",
                    text.chars().take(40).collect::<String>()
                )
            })
    }
}

/// What a test does on its flows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    /// Bulk transfer: bytes as fast as the flow takes them (or paced).
    #[default]
    Stream,
    /// Request/response on long-lived flows (`linerate rr`).
    Rr,
    /// Connect, request, response, close, per transaction (`linerate crr`).
    Crr,
}

impl Workload {
    /// The name results and commands use: "stream", "rr", "crr".
    pub fn name(self) -> &'static str {
        match self {
            Workload::Stream => "stream",
            Workload::Rr => "rr",
            Workload::Crr => "crr",
        }
    }
}

/// The parameters of a request/response test (`rr`, `crr`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RrConfig {
    /// Bytes per request and per response.
    pub request: u64,
    pub response: u64,
    /// Closed loop: transactions kept in flight per flow.
    pub outstanding: u32,
    /// Open loop: transactions due per second per flow, each timed from when it was due;
    /// `outstanding` then caps the transactions in flight.
    pub rate_tps: Option<f64>,
    /// SO_BUSY_POLL in microseconds on every socket of the test, both ends.
    pub busy_poll_us: Option<u32>,
    /// CPUs the client's workers are pinned to, worker i on `cpus[i % len]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpus: Vec<usize>,
    /// Bulk TCP flows run beside the transactions, client to server (`--load`).
    #[serde(default)]
    pub load: u32,
}

/// The fully resolved configuration of a stream test: every parameter that shaped the
/// figures, defaults filled in. Sent to the server as the test specification and kept in
/// the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestConfig {
    pub protocol: Protocol,
    /// The server as the user named it, or "loopback" for the in-process server.
    pub target: String,
    pub port: u16,
    pub direction: Direction,
    /// Flows per direction (bidir opens twice this many connections).
    pub parallel: u32,
    /// Client worker threads.
    pub threads: u32,
    /// Measured seconds, after the omitted warm-up.
    pub time_s: f64,
    /// Warm-up seconds excluded from the summary.
    pub omit_s: f64,
    /// Interval report period in seconds; 0 turns interval reports off.
    pub interval_s: f64,
    /// Bytes per write call.
    pub length: u64,
    /// Requested socket buffer size (SO_SNDBUF and SO_RCVBUF) on both ends; `None` leaves
    /// the kernel's autotuning on.
    pub window: Option<u64>,
    /// Requested TCP maximum segment size (TCP_MAXSEG) on the client's sockets.
    pub mss: Option<u32>,
    pub nodelay: bool,
    /// Congestion control algorithm asked for on both ends.
    pub congestion: Option<String>,
    /// Per-flow pacing target in bits per second; `None` sends as fast as possible.
    pub rate_bps: Option<u64>,
    /// UDP: per-flow pacing target in datagrams per second (sets `rate_bps` from the
    /// datagram size when given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pps: Option<u64>,
    /// UDP: senders hand the kernel runs of datagrams in one buffer to segment (UDP GSO).
    #[serde(default)]
    pub gso: bool,
    /// UDP: receivers take runs of datagrams the kernel coalesced, in one buffer (UDP GRO).
    #[serde(default)]
    pub gro: bool,
    /// Keep per-flow interval figures.
    pub per_flow: bool,
    pub connect_timeout_s: f64,
    /// Stream (bulk), rr or crr.
    #[serde(default)]
    pub workload: Workload,
    /// Request/response parameters (rr and crr tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rr: Option<RrConfig>,
    /// Both ends read the host's own counters around the window (`--observe`, on unless
    /// `--no-observe`). Written only when off, so documents stored before it existed
    /// read back and write out unchanged; a peer that sends no value observes.
    #[serde(default = "observing", skip_serializing_if = "is_observing")]
    pub observe: bool,
    /// Encryption of the data connections (`--tls`; QUIC's own TLS for `--quic`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSettings>,
    /// QUIC streams (`protocol: "quic"`): how they map onto connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic: Option<QuicSettings>,
    /// Where the client's sockets leave from (`--bind`, `--bind-dev`); `None`: where
    /// the routes say. The server has no use for it; the document keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    /// The DSCP and ECN both ends set on every packet of the test (`--dscp`, `--ecn`);
    /// `None`: the sockets' default (zero).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marks: Option<crate::marks::Marks>,
    /// A call-shaped test (`linerate app --pattern voip`): its codec and the receivers'
    /// jitter buffer; scored each way by [`crate::call`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<crate::call::CallSettings>,
    /// A video-shaped test (`--isochronous`, `linerate app --pattern video`): frames at a
    /// rate, of log-normal sizes (crate::video).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub video: Option<crate::video::VideoSettings>,
    /// The frames the server sends where they differ from `video` (a game's state
    /// against its inputs); `None`: `video` both ways.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub video_back: Option<crate::video::VideoSettings>,
    /// The Quality of Outcome requirement a video's or a game's ways are scored against
    /// (`--qoo`); `None`: the pattern's own (crate::qoo).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qoo: Option<crate::qoo::Requirement>,
}

/// Where a client's sockets leave from: a local address (`--bind`), an interface or VRF
/// device (`--bind-dev`, SO_BINDTODEVICE), or both.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<std::net::IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// The data connections are MPTCP (`--mptcp`, IPPROTO_MPTCP): the kernel's path
    /// manager may add subflows over the host's other addresses.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mptcp: bool,
}

impl Source {
    /// Why a source read from the network cannot be used: a device name that is no
    /// interface name (1 to 15 bytes, the kernel's IFNAMSIZ less its NUL; no '/', space or
    /// control character).
    pub fn check(&self) -> Result<(), String> {
        match self.device.as_deref() {
            Some(name) => interface_name(name)
                .map(|_| ())
                .map_err(|why| format!("source device {why}")),
            None => Ok(()),
        }
    }
}

/// An interface's name as the kernel takes it (`dev_valid_name`): 1 to 15 bytes
/// (IFNAMSIZ less its NUL), no '/', ':', blank or control character. The error quotes at
/// most 32 characters of what it was given (a name may come from the network).
pub fn interface_name(text: &str) -> Result<String, String> {
    let fits = (1..=15).contains(&text.len())
        && !text
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control());
    if fits {
        Ok(text.to_string())
    } else {
        Err(format!(
            "{:?} is not an interface name (1 to 15 characters, no '/', ':' or spaces)",
            text.chars().take(32).collect::<String>()
        ))
    }
}

/// A trace's probes: UDP (no privilege), TCP SYN or ICMP echo (CAP_NET_RAW).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceProbe {
    Udp,
    Tcp,
    Icmp,
}

impl TraceProbe {
    pub fn name(self) -> &'static str {
        match self {
            TraceProbe::Udp => "udp",
            TraceProbe::Tcp => "tcp",
            TraceProbe::Icmp => "icmp",
        }
    }
}

/// What a test's TLS is to be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsSettings {
    /// "aes128-gcm", "aes256-gcm" or "chacha20-poly1305" (TLS 1.3 suites).
    pub cipher: String,
    /// Hand the record layer to the kernel where it can take it (`--ktls`).
    #[serde(default)]
    pub ktls: bool,
}

/// How a QUIC test's flows map onto QUIC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuicSettings {
    /// One connection per flow (`--connections`) rather than one stream per flow on a
    /// single connection.
    pub connection_per_flow: bool,
    /// QUIC workers the client runs, each with its own endpoint, UDP socket, thread and
    /// connection (a QUIC connection is driven by one thread): flow `i` runs on worker
    /// `i % workers`. The server runs as many and offers a port for each; a request
    /// without the field (an older client) asks for one.
    #[serde(default = "one_worker", skip_serializing_if = "is_one_worker")]
    pub workers: u32,
}

fn one_worker() -> u32 {
    1
}

fn is_one_worker(workers: &u32) -> bool {
    *workers == 1
}

fn observing() -> bool {
    true
}

fn is_observing(observe: &bool) -> bool {
    *observe
}

impl TestConfig {
    /// The frames the flows of `direction` carry: the client's (`video`) forward, the
    /// server's (`video_back`, else `video`) in reverse.
    pub fn video_of(&self, direction: crate::Direction) -> Option<crate::video::VideoSettings> {
        match direction {
            crate::Direction::Reverse => self.video_back.or(self.video),
            _ => self.video,
        }
    }
}

impl TestConfig {
    /// Connections the test opens: `parallel`, or twice that for bidir.
    /// Saturating: a `parallel` from the wire near 2^31 must not wrap to a few flows.
    pub fn connections(&self) -> u32 {
        match self.direction {
            Direction::Bidir => self.parallel.saturating_mul(2),
            _ => self.parallel,
        }
    }

    /// The test's name in results: "tcp_stream", "udp_stream", "tcp_rr", "udp_rr", "tcp_crr",
    /// "tls_stream", "tls_rr", "quic_stream".
    pub fn test_name(&self) -> String {
        let kind = self.workload.name();
        // TCP through TLS is told apart in results and history: "tls_stream", "tls_rr".
        let protocol = match (&self.tls, self.protocol) {
            (Some(_), Protocol::Tcp) => "tls",
            (_, protocol) => protocol.as_str(),
        };
        format!("{protocol}_{kind}")
    }

    /// One line for logs and banners: "TCP, 4 flows, client sends, 10 s, 128K writes".
    pub fn describe(&self) -> String {
        if let Some(rr) = self
            .rr
            .as_ref()
            .filter(|_| self.workload != Workload::Stream)
        {
            return self.describe_rr(rr);
        }
        let direction = match self.direction {
            Direction::Forward => "client sends",
            Direction::Reverse => "server sends",
            Direction::Bidir => "both send",
        };
        let warm_up = if self.omit_s > 0.0 {
            format!(" after {} s warm-up", self.omit_s)
        } else {
            String::new()
        };
        let size = if self.protocol == crate::Protocol::Udp {
            let pace = match self.rate_bps {
                Some(rate) => format!(
                    " at {} per flow",
                    crate::units::format_rate(rate as f64, crate::units::Scale::Adaptive)
                ),
                None => " unpaced".to_string(),
            };
            let offload = match (self.gso, self.gro) {
                (true, true) => ", GSO and GRO",
                (true, false) => ", GSO",
                (false, true) => ", GRO",
                (false, false) => "",
            };
            format!("{}-byte datagrams{pace}{offload}", self.length)
        } else {
            format!("{} writes", crate::units::format_size_compact(self.length))
        };
        format!(
            "{}, {} flow{}, {direction}, {} s{warm_up}, {size}",
            self.protocol.as_str().to_uppercase(),
            self.parallel,
            if self.parallel == 1 { "" } else { "s" },
            self.time_s,
        )
    }

    fn describe_rr(&self, rr: &RrConfig) -> String {
        let pacing = match rr.rate_tps {
            Some(rate) => format!(
                "open loop at {} transactions/s per flow (at most {} in flight)",
                crate::units::format_count(rate),
                rr.outstanding
            ),
            None => format!("closed loop, {} in flight per flow", rr.outstanding),
        };
        let kind = if self.workload == Workload::Crr {
            "connect/request/response/close"
        } else {
            "request/response"
        };
        let warm_up = if self.omit_s > 0.0 {
            format!(" after {} s warm-up", self.omit_s)
        } else {
            String::new()
        };
        let load = if rr.load > 0 {
            format!(
                ", beside {} bulk TCP flow{}",
                rr.load,
                if rr.load == 1 { "" } else { "s" }
            )
        } else {
            String::new()
        };
        format!(
            "{} {kind}, {}-byte requests, {}-byte responses, {} flow{}, {pacing}, {} s{warm_up}{load}",
            self.protocol.as_str().to_uppercase(),
            rr.request,
            rr.response,
            self.parallel,
            if self.parallel == 1 { "" } else { "s" },
            self.time_s,
        )
    }

    /// The direction of connection `index` (0-based, in opening order).
    pub fn flow_direction(&self, index: u32) -> Direction {
        match self.direction {
            Direction::Bidir if index >= self.parallel => Direction::Reverse,
            Direction::Bidir => Direction::Forward,
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {

    /// A source's device read from the network is an interface name, or refused.
    #[test]
    fn a_sources_device_must_be_an_interface_name() {
        let with = |device: &str| Source {
            address: None,
            device: Some(device.into()),
            mptcp: false,
        };
        assert_eq!(with("eth1").check(), Ok(()));
        assert_eq!(with("vrf-blue").check(), Ok(()));
        for bad in [
            "",
            "a-very-long-device-name",
            "../eth0",
            "eth 0",
            "eth\u{0}",
        ] {
            assert!(with(bad).check().is_err(), "{bad:?}");
        }
    }

    use super::*;

    /// Stored results and the wire carry the protocol as its name; the type changed, the
    /// bytes did not.
    #[test]
    fn a_protocol_travels_as_its_name_and_nothing_else_reads_as_one() {
        for protocol in Protocol::ALL {
            let text = serde_json::to_string(&protocol).unwrap();
            assert_eq!(text, format!("\"{}\"", protocol.as_str()));
            assert_eq!(serde_json::from_str::<Protocol>(&text).unwrap(), protocol);
            assert_eq!(protocol.as_str().parse::<Protocol>(), Ok(protocol));
        }
        assert!(serde_json::from_str::<Protocol>("\"sctp\"").is_err());
        assert!("TCP"
            .parse::<Protocol>()
            .unwrap_err()
            .contains("unknown protocol 'TCP'"));
    }
}
