//! The agent protocol (docs/protocol.md 7): how a controller (`linerate run`) drives the
//! agents (`linerate serve`) of a profile run, and how the host running a group asks the
//! peer at the other end of its connections to run the group's mirror image.
//!
//! A connection opens with the agent preface (`LINEAGNT` + version), then carries the
//! same length-prefixed JSON frames as the control protocol. Messages are requests and
//! replies tagged by `type`; this module holds them and the clock arithmetic, with no
//! sockets and no clock of its own.
//!
//! Every connection first: `hello` (with the dialer's nonce when it holds a key), answered
//! by `welcome` (with the agent's challenge when it holds one), then `auth` with the
//! dialer's proof (crate::auth); an agent with a key takes nothing else before a good
//! proof.
//!
//! Controller to agent: `ping` (answered by `pong` with the agent's clock, to estimate
//! its offset), `prepare` (the groups it runs; answered by `prepared` once every peer of
//! those groups runs their mirror), `start` (the moment to start, on the agent's clock;
//! answered by `started`, then `heartbeat`s, then `part_result`), `abort`.
//!
//! Group host to peer: `mirror` (answered by `mirror_ready` with the token its
//! connections present), `transaction_done` (a thread ended a timed transaction after
//! this many iterations: the mirror thread stops at the same count), `finish` (answered
//! by `mirror_result`).

use linerate_model::profile::GroupResult;
use linerate_model::HostFacts;
use linerate_profile::Group;
use serde::{Deserialize, Serialize};

/// Opens an agent connection.
pub const AGENT_MAGIC: [u8; 8] = *b"LINEAGNT";
/// The agent protocol version this build speaks (2: the dialer says hello first, and
/// proves the key when the agent holds one; 3: a job an agent runs as a mesh test's
/// source is one request, `source`, whatever its kind).
pub const AGENT_VERSION: u32 = 3;

/// The longest time limit a peer may send: a day.
pub const MAX_SECONDS: f64 = 86_400.0;

/// A time limit in seconds as a peer sends it: above zero and at most [`MAX_SECONDS`],
/// checked where it is decoded (as rustls' codec bounds its fields), so that no driver
/// sees a zero, a negative or a century and no check depends on a driver calling it.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct Seconds(f64);

impl Seconds {
    pub fn new(seconds: f64) -> Result<Seconds, String> {
        if seconds.is_finite() && seconds > 0.0 && seconds <= MAX_SECONDS {
            Ok(Seconds(seconds))
        } else {
            Err(format!(
                "a time limit of {seconds} s is outside 0 to {MAX_SECONDS} s"
            ))
        }
    }

    /// `seconds` brought into bounds: for limits this side computes itself.
    pub fn clamped(seconds: f64) -> Seconds {
        if seconds.is_nan() {
            return Seconds(MAX_SECONDS);
        }
        Seconds(seconds.clamp(1e-3, MAX_SECONDS))
    }

    pub fn get(self) -> f64 {
        self.0
    }

    pub fn duration(self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.0)
    }
}

impl TryFrom<f64> for Seconds {
    type Error = String;
    fn try_from(seconds: f64) -> Result<Seconds, String> {
        Seconds::new(seconds)
    }
}

impl From<Seconds> for f64 {
    fn from(seconds: Seconds) -> f64 {
        seconds.0
    }
}

/// The most loading connections an RPM source opens (the draft's clients stop at 16 to
/// 32).
pub const MAX_RPM_LOADS: u32 = 64;

/// How many loading connections an RPM source may open: 1 to [`MAX_RPM_LOADS`], checked
/// where it is decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub struct Loads(u32);

impl Loads {
    pub fn new(count: u32) -> Result<Loads, String> {
        if (1..=MAX_RPM_LOADS).contains(&count) {
            Ok(Loads(count))
        } else {
            Err(format!(
                "{count} loading connections asked; 1 to {MAX_RPM_LOADS} allowed"
            ))
        }
    }

    pub fn get(self) -> u32 {
        self.0
    }
}

impl TryFrom<u32> for Loads {
    type Error = String;
    fn try_from(count: u32) -> Result<Loads, String> {
        Loads::new(count)
    }
}

impl From<Loads> for u32 {
    fn from(loads: Loads) -> u32 {
        loads.0
    }
}

/// The most probes a second a STAMP request may ask of an agent.
pub const MAX_STAMP_RATE: f64 = 10_000.0;

/// A STAMP test's probes a second, as a request carries it: above 0.1 and at most
/// [`MAX_STAMP_RATE`], refused where it is decoded.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct ProbeRate(f64);

impl ProbeRate {
    pub fn new(rate: f64) -> Result<ProbeRate, String> {
        if rate.is_finite() && (0.1..=MAX_STAMP_RATE).contains(&rate) {
            Ok(ProbeRate(rate))
        } else {
            Err(format!(
                "{rate} probes a second asked; 0.1 to {MAX_STAMP_RATE} allowed"
            ))
        }
    }

    pub fn get(self) -> f64 {
        self.0
    }
}

impl TryFrom<f64> for ProbeRate {
    type Error = String;
    fn try_from(rate: f64) -> Result<ProbeRate, String> {
        ProbeRate::new(rate)
    }
}

impl From<ProbeRate> for f64 {
    fn from(rate: ProbeRate) -> f64 {
        rate.0
    }
}

/// The most flows and the farthest distance a trace request may ask of an agent.
pub const MAX_TRACE_FLOWS: u16 = 16;
pub const MAX_TRACE_HOPS: u8 = 64;

/// A trace's flows (1 to [`MAX_TRACE_FLOWS`]) and its farthest distance (1 to
/// [`MAX_TRACE_HOPS`]), refused out of bounds where they are decoded: an agent sends at
/// most their product in probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "u16", into = "u16")]
pub struct TraceFlows(u16);

impl TryFrom<u16> for TraceFlows {
    type Error = String;
    fn try_from(flows: u16) -> Result<TraceFlows, String> {
        if (1..=MAX_TRACE_FLOWS).contains(&flows) {
            Ok(TraceFlows(flows))
        } else {
            Err(format!(
                "a trace of {flows} flows asked; 1 to {MAX_TRACE_FLOWS} allowed"
            ))
        }
    }
}

impl From<TraceFlows> for u16 {
    fn from(flows: TraceFlows) -> u16 {
        flows.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "u8", into = "u8")]
pub struct TraceHops(u8);

impl TryFrom<u8> for TraceHops {
    type Error = String;
    fn try_from(hops: u8) -> Result<TraceHops, String> {
        if (1..=MAX_TRACE_HOPS).contains(&hops) {
            Ok(TraceHops(hops))
        } else {
            Err(format!(
                "a trace of {hops} hops asked; 1 to {MAX_TRACE_HOPS} allowed"
            ))
        }
    }
}

impl From<TraceHops> for u8 {
    fn from(hops: TraceHops) -> u8 {
        hops.0
    }
}

/// A STAMP probe's size (UDP payload, 44 to 9,000 octets) and DSCP (0 to 63), refused out
/// of bounds where they are decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "u16", into = "u16")]
pub struct ProbeSize(u16);

impl TryFrom<u16> for ProbeSize {
    type Error = String;
    fn try_from(size: u16) -> Result<ProbeSize, String> {
        if (44..=9000).contains(&size) {
            Ok(ProbeSize(size))
        } else {
            Err(format!(
                "a probe of {size} octets asked; 44 to 9000 allowed"
            ))
        }
    }
}

impl From<ProbeSize> for u16 {
    fn from(size: ProbeSize) -> u16 {
        size.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "u8", into = "u8")]
pub struct Dscp(u8);

impl TryFrom<u8> for Dscp {
    type Error = String;
    fn try_from(dscp: u8) -> Result<Dscp, String> {
        if dscp < 64 {
            Ok(Dscp(dscp))
        } else {
            Err(format!("DSCP {dscp} asked; 0 to 63 allowed"))
        }
    }
}

impl From<Dscp> for u8 {
    fn from(dscp: Dscp) -> u8 {
        dscp.0
    }
}

/// The agent preface a controller or group host sends first.
pub fn agent_preface(version: u32) -> [u8; 12] {
    let mut out = [0u8; 12];
    out[..8].copy_from_slice(&AGENT_MAGIC);
    out[8..].copy_from_slice(&version.to_be_bytes());
    out
}

/// One group an agent runs, as the controller hands it over.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupPart {
    /// The group's place in the profile.
    pub index: usize,
    /// How the group's host is named in results.
    pub host_label: String,
    pub group: Group,
}

/// A group's mirror image, as the group's host hands it to the peer: the same
/// transactions, each operation mirrored, and operations on connections to other peers
/// replaced by `nop` so that positions match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MirrorSpec {
    pub group: Group,
    /// Where the mirror dials the group's host for the group's `accept` operations (the
    /// group host's listener), with the token to present; `None` when there are none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dial_back: Option<DialBack>,
    /// The longest the mirror may run, in seconds (a bound, not a schedule).
    pub limit_s: Seconds,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DialBack {
    pub port: u16,
    pub udp_port: u16,
    pub token: String,
    /// The certificate the group host's `ssl` accepts present (SHA-256, hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_fingerprint: Option<String>,
}

/// What the mirror side counted, per transaction and operation of the group (same
/// positions as the group's own).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MirrorFigures {
    /// `[transaction][operation]`: payload bytes the mirror moved for that operation.
    pub bytes: Vec<Vec<u64>>,
    /// Per thread: bytes the mirror read (what the group's writes delivered).
    pub received_per_thread: Vec<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentRequest {
    /// The first message on every agent connection; `nonce` (hex) from dialers that hold
    /// a key (crate::auth).
    Hello {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nonce: Option<String>,
        /// The dialer's SPAKE2 message (hex), with `nonce` (crate::auth).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pake: Option<String>,
    },
    /// The dialer's proof of the key, after a welcome that carried a challenge.
    Auth {
        proof: String,
    },
    Ping {
        seq: u64,
    },
    Prepare {
        parts: Vec<GroupPart>,
        /// The longest the run may take, in seconds.
        limit_s: Seconds,
    },
    Start {
        /// Unix time in nanoseconds on the agent's clock.
        at_unix_ns: u64,
    },
    Abort {
        reason: crate::text::PeerText,
    },
    Mirror {
        spec: Box<MirrorSpec>,
    },
    TransactionDone {
        thread: u32,
        transaction: u32,
        iterations: u64,
    },
    Finish,
    /// Controller to the source of an RPM test: run `linerate rpm` towards the agent at
    /// `remote`, which serves it for this host alone (`rpm_serve`); answered by
    /// heartbeats, then `rpm_result`. `abort` ends it.
    Rpm {
        remote: String,
        /// Each direction's time limit, in seconds.
        leg_s: Seconds,
        /// Over TLS (the certificate pinned to the fingerprint its agent announced).
        tls: bool,
        max_connections: Loads,
        /// Where the test's connections leave from (the mesh host's `source` and
        /// `source_dev`); absent: where the routes say. Sent only when set.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<linerate_model::Source>,
    },
    /// RPM source to destination: serve the draft's endpoints for the dialer's address
    /// alone, until this connection closes or `limit_s` passes; answered by `rpm_ready`.
    RpmServe {
        limit_s: Seconds,
        tls: bool,
    },
    /// Controller to the source of a job the agent runs itself and reports once (a
    /// STAMP window, a trace, and the kinds to come): `kind` names it among the agent's
    /// kinds, `spec` is that kind's own request, read and bounded by the kind where it is
    /// decoded; answered by heartbeats, then `source_result`. `abort` ends it.
    Source {
        kind: JobKind,
        spec: serde_json::Value,
        /// How often the agent sends its heartbeat meanwhile, the controller's word (it
        /// waits three of them before it counts the agent lost); the kind keeps it within
        /// its bounds, and says what it is when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        heartbeat_s: Option<Seconds>,
        /// Where the job's packets leave from, as for `rpm`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<linerate_model::Source>,
    },
}

/// The name of a kind of source job (`stamp`, `trace`): 1 to 32 of `a-z`, `0-9`, `_` and
/// `-`, refused otherwise where it is decoded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JobKind(String);

impl TryFrom<String> for JobKind {
    type Error = String;
    fn try_from(name: String) -> Result<JobKind, String> {
        let allowed =
            |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-';
        if (1..=32).contains(&name.len()) && name.chars().all(allowed) {
            Ok(JobKind(name))
        } else {
            Err(format!(
                "a job kind of {} characters asked; 1 to 32 of a-z, 0-9, _ and - allowed",
                name.len()
            ))
        }
    }
}

impl From<JobKind> for String {
    fn from(kind: JobKind) -> String {
        kind.0
    }
}

impl JobKind {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The heartbeat interval of a STAMP window, from a request's `heartbeat_s`: 2 s where
/// absent, else within 1 to 30 s whatever was asked.
pub fn stamp_heartbeat(asked: Option<Seconds>) -> std::time::Duration {
    let seconds = asked.map_or(2.0, |s| s.get().clamp(1.0, 30.0));
    std::time::Duration::from_secs_f64(seconds)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentReply {
    Welcome {
        version: u32,
        host: HostFacts,
        /// Present when the agent holds a key.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        auth: Option<crate::auth::Challenge>,
    },
    Pong {
        seq: u64,
        unix_ns: u64,
    },
    Prepared,
    Started {
        /// When the threads were released, on the agent's clock.
        at_unix_ns: u64,
    },
    Heartbeat,
    PartResult {
        groups: Vec<GroupResult>,
        /// The agent's host over its part of the run (`--observe`); absent from agents
        /// that predate it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        observe: Option<Box<linerate_model::observe::Observation>>,
    },
    MirrorReady {
        token: String,
        udp_port: u16,
        /// The certificate the mirror's `ssl` accepts present (SHA-256, hex).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tls_fingerprint: Option<String>,
    },
    MirrorResult {
        figures: MirrorFigures,
    },
    /// Where the RPM server for the dialer listens (on the address the dialer reached).
    RpmReady {
        port: u16,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tls_fingerprint: Option<String>,
    },
    RpmResult {
        report: Box<linerate_report::rpm::RpmReport>,
    },
    /// A source job's report, as its kind writes it; the controller's side of the kind
    /// reads it and holds it to what was asked.
    SourceResult {
        report: serde_json::Value,
    },
    Error {
        reason: crate::text::PeerText,
        /// The peer the agent could not reach or use for the request (as the request named
        /// it), when that is why it failed: whoever reads the error blames that host, not
        /// the agent. Absent from agents that predate it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        unreachable: Option<crate::text::PeerText>,
    },
}

/// One clock exchange: the controller's clock when it sent a ping and when the pong came
/// back, and the agent's clock in the pong (all Unix nanoseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSample {
    pub sent_ns: u64,
    pub agent_ns: u64,
    pub received_ns: u64,
}

/// An agent's clock against the controller's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockOffset {
    /// Agent clock minus controller clock.
    pub offset_ns: i64,
    /// The round trip of the sample used; the offset is within half of it.
    pub rtt_ns: u64,
}

impl ClockOffset {
    /// A controller instant on the agent's clock.
    pub fn to_agent(self, controller_ns: u64) -> u64 {
        controller_ns.saturating_add_signed(self.offset_ns)
    }

    /// An agent instant on the controller's clock.
    pub fn to_controller(self, agent_ns: u64) -> u64 {
        agent_ns.saturating_add_signed(-self.offset_ns)
    }
}

/// The offset from the sample with the shortest round trip (NTP's rule: the agent read
/// its clock somewhere within that round trip, best assumed at its middle).
pub fn estimate_offset(samples: &[ClockSample]) -> Option<ClockOffset> {
    samples
        .iter()
        .filter(|s| s.received_ns >= s.sent_ns)
        .min_by_key(|s| s.received_ns - s.sent_ns)
        .map(|s| {
            let rtt = s.received_ns - s.sent_ns;
            let midpoint = s.sent_ns + rtt / 2;
            ClockOffset {
                offset_ns: s.agent_ns as i64 - midpoint as i64,
                rtt_ns: rtt,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source rides on source-job and RPM requests only when the mesh host names one,
    /// so an older agent still takes the requests of hosts that name none; one that is
    /// named arrives whole.
    #[test]
    fn a_source_job_or_rpm_requests_source_is_sent_only_when_named() {
        let bare = r#"{"type":"source","kind":"stamp","spec":{"reflector":"192.0.2.1:862"}}"#;
        let request: AgentRequest = serde_json::from_str(bare).unwrap();
        assert!(matches!(request, AgentRequest::Source { source: None, .. }));
        assert!(!serde_json::to_string(&request)
            .unwrap()
            .contains("source\":{"));
        let source = linerate_model::Source {
            address: Some("192.0.2.7".parse().unwrap()),
            device: Some("eth1".into()),
            mptcp: false,
        };
        let rpm = AgentRequest::Rpm {
            remote: "192.0.2.2".into(),
            leg_s: Seconds::clamped(10.0),
            tls: false,
            max_connections: Loads::new(8).unwrap(),
            source: Some(source.clone()),
        };
        let text = serde_json::to_string(&rpm).unwrap();
        assert!(
            text.contains(r#""source":{"address":"192.0.2.7","device":"eth1"}"#),
            "{text}"
        );
        let back: AgentRequest = serde_json::from_str(&text).unwrap();
        assert!(matches!(back, AgentRequest::Rpm { source: Some(s), .. } if s == source));
    }

    /// A job's kind is a short plain name, refused otherwise where it is decoded; its
    /// spec travels as it was sent, for its kind to read.
    #[test]
    fn a_source_jobs_kind_is_bounded_where_it_is_decoded() {
        let asked = |kind: &str| {
            serde_json::from_str::<AgentRequest>(&format!(
                r#"{{"type":"source","kind":"{kind}","spec":{{"flows":4}}}}"#
            ))
        };
        assert!(asked("").is_err());
        assert!(asked(&"a".repeat(33)).is_err());
        assert!(asked("Trace").is_err());
        assert!(asked("tr\\u001bace").is_err());
        let request = asked("trace").unwrap();
        let AgentRequest::Source { kind, spec, .. } = &request else {
            panic!("not a source job");
        };
        assert_eq!(
            (kind.as_str(), &spec["flows"]),
            ("trace", &serde_json::json!(4))
        );
        let text = serde_json::to_string(&request).unwrap();
        assert_eq!(
            serde_json::from_str::<AgentRequest>(&text).unwrap(),
            request
        );
    }

    /// A STAMP window's heartbeat: every 2 s when the request has none, else within 1 to
    /// 30 s, whatever it says.
    #[test]
    fn a_stamp_windows_heartbeat_is_what_was_asked_within_bounds() {
        assert_eq!(stamp_heartbeat(None), std::time::Duration::from_secs(2));
        let asked = |s: f64| stamp_heartbeat(Some(Seconds::clamped(s))).as_secs_f64();
        assert_eq!(asked(10.0), 10.0);
        assert_eq!(asked(0.001), 1.0);
        assert_eq!(asked(1e9), 30.0);
    }

    /// A virtual agent whose clock runs `offset` ahead, with asymmetric one-way delays:
    /// the estimate is off by at most half the best round trip, and picks that one.
    #[test]
    fn offset_from_the_shortest_round_trip() {
        let offset: i64 = 1_234_567_890;
        let exchanges = [
            (5_000_000u64, 3_000_000u64),
            (200_000, 100_000),
            (900_000, 50_000),
        ];
        let mut now = 1_700_000_000_000_000_000u64;
        let samples: Vec<ClockSample> = exchanges
            .iter()
            .map(|&(out, back)| {
                let sent = now;
                let agent = (sent + out).saturating_add_signed(offset);
                let received = sent + out + back;
                now += 10_000_000;
                ClockSample {
                    sent_ns: sent,
                    agent_ns: agent,
                    received_ns: received,
                }
            })
            .collect();
        let estimate = estimate_offset(&samples).expect("samples");
        assert_eq!(estimate.rtt_ns, 300_000);
        // One way out 200 µs, back 100 µs: the midpoint rule errs by (200-100)/2 = 50 µs.
        assert_eq!(estimate.offset_ns, offset + 50_000);
        assert!((estimate.offset_ns - offset).unsigned_abs() <= estimate.rtt_ns / 2);
        let t = 1_800_000_000_000_000_000u64;
        assert_eq!(estimate.to_controller(estimate.to_agent(t)), t);
        assert_eq!(estimate_offset(&[]), None);
    }

    #[test]
    fn messages_are_tagged_json() {
        let text = serde_json::to_string(&AgentRequest::TransactionDone {
            thread: 3,
            transaction: 1,
            iterations: 99,
        })
        .unwrap();
        assert_eq!(
            text,
            r#"{"type":"transaction_done","thread":3,"transaction":1,"iterations":99}"#
        );
        let back: AgentRequest = serde_json::from_str(&text).unwrap();
        assert!(matches!(
            back,
            AgentRequest::TransactionDone { iterations: 99, .. }
        ));
    }

    #[test]
    fn an_rpm_request_and_its_server_reply_are_tagged_json() {
        let text = serde_json::to_string(&AgentRequest::RpmServe {
            limit_s: Seconds::new(70.0).unwrap(),
            tls: true,
        })
        .unwrap();
        assert_eq!(text, r#"{"type":"rpm_serve","limit_s":70.0,"tls":true}"#);
        let reply: AgentReply =
            serde_json::from_str(r#"{"type":"rpm_ready","port":4433,"tls_fingerprint":"ab"}"#)
                .unwrap();
        assert_eq!(
            reply,
            AgentReply::RpmReady {
                port: 4433,
                tls_fingerprint: Some("ab".into())
            }
        );
    }

    proptest::proptest! {
        /// Whatever an agent sends, decoding it is an answer or an error, never a panic;
        /// a port out of range or a result without its report is an error.
        #[test]
        fn any_bytes_decode_to_a_reply_or_an_error(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            port in 65_536u64..1 << 40,
        ) {
            let _ = serde_json::from_slice::<AgentReply>(&bytes);
            let port = format!(r#"{{"type":"rpm_ready","port":{port}}}"#);
            let bare = r#"{"type":"rpm_result"}"#;
            proptest::prop_assert!(serde_json::from_str::<AgentReply>(&port).is_err());
            proptest::prop_assert!(serde_json::from_str::<AgentReply>(bare).is_err());
        }

        /// A request's time limits and load count are bounded where they are decoded:
        /// any value decodes to one within bounds or to an error naming it.
        #[test]
        fn limits_in_a_request_are_bounded_at_decode(
            seconds in proptest::prelude::any::<f64>(),
            loads in proptest::prelude::any::<u32>(),
        ) {
            let serve = format!(r#"{{"type":"rpm_serve","limit_s":{seconds:?},"tls":false}}"#);
            match serde_json::from_str::<AgentRequest>(&serve) {
                Ok(AgentRequest::RpmServe { limit_s, .. }) => {
                    proptest::prop_assert!(limit_s.get() > 0.0 && limit_s.get() <= MAX_SECONDS);
                    proptest::prop_assert_eq!(limit_s.get(), seconds);
                }
                Ok(other) => proptest::prop_assert!(false, "{:?}", other),
                Err(e) => proptest::prop_assert!(
                    !(seconds > 0.0 && seconds <= MAX_SECONDS) || seconds.is_nan(),
                    "{} refused: {}", seconds, e
                ),
            }
            let rpm = format!(
                r#"{{"type":"rpm","remote":"h:7575","leg_s":10,"tls":false,"max_connections":{loads}}}"#
            );
            let decoded = serde_json::from_str::<AgentRequest>(&rpm);
            proptest::prop_assert_eq!(decoded.is_ok(), (1..=MAX_RPM_LOADS).contains(&loads));
        }
    }

    #[test]
    fn an_out_of_bounds_limit_is_named_in_the_error() {
        let zero = r#"{"type":"rpm_serve","limit_s":0,"tls":false}"#;
        let error = serde_json::from_str::<AgentRequest>(zero).unwrap_err();
        assert!(error.to_string().contains("a time limit of 0 s"), "{error}");
        let many = r#"{"type":"rpm","remote":"h","leg_s":5,"tls":true,"max_connections":65}"#;
        let error = serde_json::from_str::<AgentRequest>(many).unwrap_err();
        assert!(
            error.to_string().contains("65 loading connections"),
            "{error}"
        );
        assert_eq!(Seconds::clamped(f64::NAN).get(), MAX_SECONDS);
        assert_eq!(Seconds::clamped(1e12).get(), MAX_SECONDS);
    }
}
