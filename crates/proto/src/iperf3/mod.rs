//! iperf3's control protocol, sans-IO (docs/iperf3.md).
//!
//! A linerate server serves iperf3 clients on its own port, and `linerate iperf3 -c`
//! drives real iperf3 servers. Both ends of iperf3's exchange live here as state machines
//! fed bytes and time, like the native sessions: [`server::Iperf3Server`] and
//! [`client::Iperf3Client`]. This module holds what both share: the state bytes, the
//! parameters a client sends, the results both sides exchange and the error codes.
//!
//! Wire facts (checked against Debian's iperf3 3.12): control messages are single signed
//! bytes; JSON travels as a 4-byte big-endian length and that many bytes; error codes are
//! 32-bit big-endian integers; a test is named by a 37-byte cookie (36 characters of
//! `[a-z2-7]` and a NUL), sent first on the control connection and on every TCP data
//! connection.

pub mod auth;
pub mod client;
pub mod server;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use crate::preface::IPERF3_COOKIE_LEN as COOKIE_LEN;

/// State bytes, in iperf3's numbering.
pub mod state {
    pub const TEST_START: u8 = 1;
    pub const TEST_RUNNING: u8 = 2;
    pub const TEST_END: u8 = 4;
    pub const PARAM_EXCHANGE: u8 = 9;
    pub const CREATE_STREAMS: u8 = 10;
    pub const SERVER_TERMINATE: u8 = 11;
    pub const CLIENT_TERMINATE: u8 = 12;
    pub const EXCHANGE_RESULTS: u8 = 13;
    pub const DISPLAY_RESULTS: u8 = 14;
    pub const IPERF_DONE: u8 = 16;
    /// -1 as a signed byte: the server is busy (or refuses the client).
    pub const ACCESS_DENIED: u8 = 0xFF;
    /// -2 as a signed byte: followed by an error code and an errno, int32 each.
    pub const SERVER_ERROR: u8 = 0xFE;
}

/// The most streams an iperf3 test may ask for.
pub const MAX_STREAMS: u32 = 128;
/// The largest parameters document a server reads (iperf3 3.18 and later refuse more).
pub const MAX_PARAMS_JSON: usize = 8 * 1024;
/// The largest results document a client reads: with the server's output text a long
/// test's results run to hundreds of kilobytes.
pub const MAX_RESULTS_JSON: usize = 16 << 20;
/// The largest results document a server reads from a client: a client's results carry
/// no output text, one object per stream (at most [`MAX_STREAMS`]). A 16 MiB document
/// once took a server from 8 MiB to 805 MiB for one session.
pub const MAX_CLIENT_RESULTS_JSON: usize = 1 << 20;
/// The largest TCP write iperf3 accepts (its MAX_BLOCKSIZE).
pub const MAX_TCP_BLOCK: u32 = 1 << 20;
/// UDP datagram bounds: the header (times and a 64-bit counter) up to the IPv4 maximum.
pub const MIN_UDP_BLOCK: u32 = 16;
pub const MAX_UDP_BLOCK: u32 = 65_507;
/// The longest test (seconds) iperf3 accepts.
pub const MAX_TIME: u64 = 86_400;
/// The longest warm-up (seconds) iperf3 accepts.
pub const MAX_OMIT: u64 = 600;
/// The largest socket buffer iperf3 accepts (its MAX_TCP_BUFFER, 512 MiB).
pub const MAX_WINDOW: u64 = 512 << 20;
/// A UDP test without `bandwidth` sends at 1 Mibit/s, iperf3's default.
pub const DEFAULT_UDP_RATE: u64 = 1 << 20;
/// A TCP test without `len` writes 128 KiB blocks, iperf3's default.
pub const DEFAULT_TCP_BLOCK: u32 = 128 * 1024;

/// The UDP stream setup datagrams (3.12 and later; earlier versions sent other magics,
/// which a server accepts as well since it never checks them).
pub const UDP_CONNECT: [u8; 4] = *b"9876";
pub const UDP_REPLY: [u8; 4] = *b"6789";
/// The reply of iperf3 up to 3.11 on a little-endian host.
pub const UDP_REPLY_LEGACY: [u8; 4] = [0xB1, 0x68, 0xDE, 0x3A];

/// iperf3 error codes (its `i_errno` values) that cross the wire in SERVER_ERROR.
pub mod code {
    pub const DURATION: i32 = 5;
    pub const NUM_STREAMS: i32 = 6;
    pub const BLOCK_SIZE: i32 = 7;
    pub const BUF_SIZE: i32 = 8;
    pub const MSS: i32 = 10;
    pub const OMIT: i32 = 12;
    pub const UNIMPLEMENTED: i32 = 13;
    pub const UDP_BLOCK_SIZE: i32 = 20;
    pub const RECV_PARAMS: i32 = 114;
    pub const SERVER_TERMINATED: i32 = 120;
    pub const ACCESS_DENIED: i32 = 121;
    pub const PROTOCOL: i32 = 131;
    pub const AUTH: i32 = 142;
    pub const CREATE_STREAM: i32 = 200;
}

/// What an iperf3 error code means, in words for linerate's messages.
pub fn describe_code(code: i32) -> &'static str {
    match code {
        code::DURATION => "test duration out of range",
        code::NUM_STREAMS => "too many parallel streams",
        code::BLOCK_SIZE => "block size out of range",
        code::BUF_SIZE => "socket buffer size out of range",
        code::MSS => "MSS out of range",
        code::OMIT => "omit period out of range",
        code::UNIMPLEMENTED => "a feature the server does not implement",
        code::UDP_BLOCK_SIZE => "UDP block size out of range",
        code::RECV_PARAMS => "the server could not read the test parameters",
        code::SERVER_TERMINATED => "the server was terminated",
        code::ACCESS_DENIED => "access denied",
        code::PROTOCOL => "protocol not supported",
        code::AUTH => "authentication failed",
        code::CREATE_STREAM => "the server could not create a stream",
        _ => "server error",
    }
}

/// The transport a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    #[default]
    Tcp,
    Udp,
}

/// A test's parameters as an iperf3 client sends them (`send_parameters`), with iperf3's
/// fallbacks for keys left out.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    pub transport: Transport,
    /// Seconds of warm-up not counted.
    pub omit: u64,
    /// Seconds; 0 when the test ends on `num` bytes or `blockcount` blocks.
    pub time: u64,
    pub num: u64,
    pub blockcount: u64,
    pub parallel: u32,
    pub len: u32,
    /// bit/s per stream; 0 is unlimited.
    pub bandwidth: u64,
    pub pacing_timer: u64,
    pub reverse: bool,
    pub bidirectional: bool,
    pub nodelay: bool,
    pub mss: Option<u32>,
    pub window: Option<u64>,
    pub congestion: Option<String>,
    pub get_server_output: bool,
    pub udp_counters_64bit: bool,
    pub zerocopy: bool,
    pub title: Option<String>,
    pub client_version: Option<String>,
    /// The client's authentication token: its credentials RSA-encrypted to the server's
    /// public key, base64 ([`auth`]).
    pub authtoken: Option<String>,
    /// The token is padded with PKCS #1 v1.5 (3.17's `--use-pkcs1-padding`), not OAEP.
    pub use_pkcs1_padding: bool,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            transport: Transport::Tcp,
            omit: 0,
            time: 10,
            num: 0,
            blockcount: 0,
            parallel: 1,
            len: DEFAULT_TCP_BLOCK,
            bandwidth: 0,
            pacing_timer: 1000,
            reverse: false,
            bidirectional: false,
            nodelay: false,
            mss: None,
            window: None,
            congestion: None,
            get_server_output: false,
            udp_counters_64bit: false,
            zerocopy: false,
            title: None,
            client_version: None,
            authtoken: None,
            use_pkcs1_padding: false,
        }
    }
}

/// Parameters a server cannot serve: the iperf3 error code to send and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamsError {
    pub code: i32,
    pub message: String,
}

fn refuse(code: i32, message: String) -> ParamsError {
    ParamsError { code, message }
}

/// A JSON object with its keys in lower case: iperf3 looks keys up case-insensitively.
/// The object with its keys in lower case; values are moved, never copied.
fn lower_keys(object: Map<String, Value>) -> Map<String, Value> {
    object
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect()
}

impl Params {
    /// Reads a client's parameters document and checks it against iperf3's own bounds.
    // Long: one match over iperf3's parameter keys, each bounded where it is read.
    pub fn from_json(body: &[u8]) -> Result<Params, ParamsError> {
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| refuse(code::RECV_PARAMS, format!("parameters are not JSON: {e}")))?;
        let Value::Object(object) = value else {
            return Err(refuse(
                code::RECV_PARAMS,
                "parameters are not a JSON object".into(),
            ));
        };
        let keys = lower_keys(object);
        let number = |key: &str| -> Result<Option<u64>, ParamsError> {
            match keys.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Number(n)) => n
                    .as_u64()
                    .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
                    .map(Some)
                    .ok_or_else(|| {
                        refuse(code::RECV_PARAMS, format!("\"{key}\" is {n}, not a count"))
                    }),
                Some(other) => Err(refuse(
                    code::RECV_PARAMS,
                    format!("\"{key}\" is {other}, not a number"),
                )),
            }
        };
        // Up to 3.17 a flag is set by its key's presence; later clients send true or 1.
        let flag = |key: &str| match keys.get(key) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::Number(n)) => n.as_f64() != Some(0.0),
            Some(_) => true,
        };
        let text = |key: &str| keys.get(key).and_then(Value::as_str).map(str::to_string);
        if flag("sctp") {
            return Err(refuse(code::PROTOCOL, "SCTP is not served".into()));
        }
        let transport = if flag("udp") {
            Transport::Udp
        } else {
            Transport::Tcp
        };
        let defaults = Params::default();
        let parallel = number("parallel")?.unwrap_or(1);
        if parallel == 0 || parallel > u64::from(MAX_STREAMS) {
            return Err(refuse(
                code::NUM_STREAMS,
                format!("\"parallel\" {parallel} is outside 1..={MAX_STREAMS}"),
            ));
        }
        let len = match (number("len")?, transport) {
            (Some(len), _) => len,
            (None, Transport::Tcp) => u64::from(DEFAULT_TCP_BLOCK),
            (None, Transport::Udp) => {
                return Err(refuse(
                    code::UDP_BLOCK_SIZE,
                    "a UDP test must give \"len\"".into(),
                ))
            }
        };
        match transport {
            Transport::Tcp if len == 0 || len > u64::from(MAX_TCP_BLOCK) => {
                return Err(refuse(
                    code::BLOCK_SIZE,
                    format!("\"len\" {len} is outside 1..={MAX_TCP_BLOCK}"),
                ))
            }
            Transport::Udp
                if !(u64::from(MIN_UDP_BLOCK)..=u64::from(MAX_UDP_BLOCK)).contains(&len) =>
            {
                return Err(refuse(
                    code::UDP_BLOCK_SIZE,
                    format!("\"len\" {len} is outside {MIN_UDP_BLOCK}..={MAX_UDP_BLOCK}"),
                ))
            }
            _ => {}
        }
        let time = number("time")?.unwrap_or(defaults.time);
        let num = number("num")?.unwrap_or(0);
        let blockcount = number("blockcount")?.unwrap_or(0);
        if time > MAX_TIME || (time == 0 && num == 0 && blockcount == 0) {
            return Err(refuse(
                code::DURATION,
                format!("\"time\" {time} is outside 1..={MAX_TIME} with no byte or block count"),
            ));
        }
        let omit = number("omit")?.unwrap_or(0);
        if omit > MAX_OMIT {
            return Err(refuse(
                code::OMIT,
                format!("\"omit\" {omit} is over {MAX_OMIT}"),
            ));
        }
        let window = number("window")?.filter(|w| *w > 0);
        if let Some(window) = window.filter(|w| *w > MAX_WINDOW) {
            return Err(refuse(
                code::BUF_SIZE,
                format!("\"window\" {window} is over {MAX_WINDOW}"),
            ));
        }
        let mss = number("mss")?.filter(|m| *m > 0);
        if let Some(mss) = mss.filter(|m| *m > 9000) {
            return Err(refuse(code::MSS, format!("\"MSS\" {mss} is over 9000")));
        }
        let bandwidth = match (number("bandwidth")?, transport) {
            (Some(rate), _) => rate,
            (None, Transport::Udp) => DEFAULT_UDP_RATE,
            (None, Transport::Tcp) => 0,
        };
        Ok(Params {
            transport,
            omit,
            time,
            num,
            blockcount,
            parallel: parallel as u32,
            len: len as u32,
            bandwidth,
            pacing_timer: number("pacing_timer")?.unwrap_or(defaults.pacing_timer),
            reverse: flag("reverse"),
            bidirectional: flag("bidirectional"),
            nodelay: flag("nodelay"),
            mss: mss.map(|m| m as u32),
            window,
            congestion: text("congestion"),
            get_server_output: flag("get_server_output"),
            udp_counters_64bit: flag("udp_counters_64bit"),
            zerocopy: flag("zerocopy"),
            title: text("title"),
            client_version: text("client_version"),
            authtoken: text("authtoken"),
            use_pkcs1_padding: flag("use_pkcs1_padding"),
        })
    }

    /// The parameters document as an iperf3 client sends it: flags only when set, since
    /// servers up to 3.17 take a key's presence as the flag.
    pub fn to_json(&self) -> Vec<u8> {
        let mut j = Map::new();
        let set = |j: &mut Map<String, Value>, key: &str, value: Value| {
            j.insert(key.to_string(), value);
        };
        match self.transport {
            Transport::Tcp => set(&mut j, "tcp", Value::Bool(true)),
            Transport::Udp => set(&mut j, "udp", Value::Bool(true)),
        }
        set(&mut j, "omit", self.omit.into());
        set(&mut j, "time", self.time.into());
        set(&mut j, "num", self.num.into());
        set(&mut j, "blockcount", self.blockcount.into());
        if let Some(mss) = self.mss {
            set(&mut j, "MSS", mss.into());
        }
        if self.nodelay {
            set(&mut j, "nodelay", Value::Bool(true));
        }
        set(&mut j, "parallel", self.parallel.into());
        if self.reverse {
            set(&mut j, "reverse", Value::Bool(true));
        }
        if self.bidirectional {
            set(&mut j, "bidirectional", Value::Bool(true));
        }
        if let Some(window) = self.window {
            set(&mut j, "window", window.into());
        }
        set(&mut j, "len", self.len.into());
        if self.bandwidth > 0 || self.transport == Transport::Udp {
            set(&mut j, "bandwidth", self.bandwidth.into());
        }
        set(&mut j, "pacing_timer", self.pacing_timer.into());
        if let Some(congestion) = &self.congestion {
            set(&mut j, "congestion", congestion.clone().into());
        }
        if self.get_server_output {
            set(&mut j, "get_server_output", 1.into());
        }
        if self.udp_counters_64bit {
            set(&mut j, "udp_counters_64bit", 1.into());
        }
        if self.zerocopy {
            set(&mut j, "zerocopy", 1.into());
        }
        if let Some(title) = &self.title {
            set(&mut j, "title", title.clone().into());
        }
        if let Some(version) = &self.client_version {
            set(&mut j, "client_version", version.clone().into());
        }
        serde_json::to_vec(&Value::Object(j)).expect("a map of plain values serializes")
    }

    /// One line for logs: "TCP, 4 streams, client sends, 10 s, 128K blocks".
    pub fn describe(&self) -> String {
        let transport = match self.transport {
            Transport::Tcp => "TCP",
            Transport::Udp => "UDP",
        };
        let direction = if self.bidirectional {
            "both send"
        } else if self.reverse {
            "server sends"
        } else {
            "client sends"
        };
        let end = if self.time > 0 {
            format!("{} s", self.time)
        } else if self.num > 0 {
            format!("{} bytes", self.num)
        } else {
            format!("{} blocks", self.blockcount)
        };
        format!(
            "iperf3 {}: {transport}, {} stream{}, {direction}, {end}, {}-byte blocks",
            self.client_version.as_deref().unwrap_or("client"),
            self.parallel,
            if self.parallel == 1 { "" } else { "s" },
            self.len
        )
    }
}

/// A signed count as any iperf3 writes it: some versions print -1 as the unsigned 64-bit
/// 18446744073709551615, others as a double; both read as -1.
fn lenient_i64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let number = serde_json::Number::deserialize(d)?;
    if let Some(v) = number.as_i64() {
        Ok(v)
    } else if let Some(v) = number.as_u64() {
        Ok(v as i64)
    } else {
        Ok(number.as_f64().unwrap_or(0.0) as i64)
    }
}

fn lenient_option_i64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    lenient_i64(d).map(Some)
}

/// One stream's figures in the results exchange.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamResults {
    #[serde(deserialize_with = "lenient_i64")]
    pub id: i64,
    /// Sent after the warm-up, or received.
    pub bytes: u64,
    /// -1 unless the sender knows (TCP_INFO).
    #[serde(deserialize_with = "lenient_i64")]
    pub retransmits: i64,
    /// Seconds.
    pub jitter: f64,
    /// Datagrams lost.
    #[serde(deserialize_with = "lenient_i64")]
    pub errors: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "lenient_option_i64")]
    pub omitted_errors: Option<i64>,
    /// Datagrams sent, or the highest sequence number seen; 0 for TCP.
    pub packets: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omitted_packets: Option<u64>,
    #[serde(default)]
    pub start_time: f64,
    #[serde(default)]
    pub end_time: f64,
}

/// One side's results: its CPU and its streams.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub cpu_util_total: f64,
    pub cpu_util_user: f64,
    pub cpu_util_system: f64,
    /// -1: this side only received; 1: it sent TCP and knows retransmits; 0 otherwise.
    #[serde(deserialize_with = "lenient_i64")]
    pub sender_has_retransmits: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion_used: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_output_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_output_json: Option<Value>,
    pub streams: Vec<StreamResults>,
}

impl Results {
    /// Reads a peer's results, keys in any case as iperf3 allows.
    pub fn from_json(body: &[u8]) -> Result<Results, String> {
        let value: Value =
            serde_json::from_slice(body).map_err(|e| format!("results are not JSON: {e}"))?;
        let Value::Object(object) = value else {
            return Err("results are not a JSON object".into());
        };
        let mut keys = lower_keys(object);
        if let Some(Value::Array(streams)) = keys.get_mut("streams") {
            for stream in streams.iter_mut() {
                if let Value::Object(fields) = stream {
                    *fields = lower_keys(std::mem::take(fields));
                }
            }
        }
        serde_json::from_value(Value::Object(keys)).map_err(|e| format!("results: {e}"))
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("results serialize")
    }
}

/// The id iperf3 gives the stream created `index`-th (from 0) on either side: 1, 3, 4,
/// 5, ... (the skip of 2 is iperf3's own, kept because results are matched by id).
pub fn stream_id(index: usize) -> i64 {
    if index == 0 {
        1
    } else {
        index as i64 + 2
    }
}

/// A fresh cookie from 36 random bytes.
pub fn cookie_from(random: &[u8; 36]) -> [u8; COOKIE_LEN] {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut cookie = [0u8; COOKIE_LEN];
    for (c, r) in cookie.iter_mut().zip(random) {
        *c = ALPHABET[usize::from(*r) % 32];
    }
    cookie
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_udp_parameters_document_reads_with_its_values() {
        let body = br#"{"udp":true,"omit":0,"time":10,"num":0,"blockcount":0,"parallel":1,"len":1448,"bandwidth":1048576,"pacing_timer":1000,"client_version":"3.17.1"}"#;
        let p = Params::from_json(body).unwrap();
        assert_eq!(p.transport, Transport::Udp);
        assert_eq!(
            (p.time, p.len, p.bandwidth, p.parallel),
            (10, 1448, 1 << 20, 1)
        );
        assert_eq!(p.client_version.as_deref(), Some("3.17.1"));
        assert!(!p.reverse && !p.udp_counters_64bit);
    }

    #[test]
    fn flags_count_by_presence_keys_in_any_case() {
        let body = br#"{"TCP":true,"time":5,"Reverse":true,"get_server_output":1,"MSS":1400,"window":262144}"#;
        let p = Params::from_json(body).unwrap();
        assert!(p.reverse && p.get_server_output);
        assert_eq!(
            (p.mss, p.window, p.len),
            (Some(1400), Some(262_144), DEFAULT_TCP_BLOCK)
        );
    }

    #[test]
    fn out_of_range_parameters_get_iperf3_codes() {
        let cases: [(&[u8], i32); 7] = [
            (
                br#"{"tcp":true,"time":5,"parallel":129}"#,
                code::NUM_STREAMS,
            ),
            (br#"{"udp":true,"time":5}"#, code::UDP_BLOCK_SIZE),
            (br#"{"udp":true,"time":5,"len":8}"#, code::UDP_BLOCK_SIZE),
            (br#"{"tcp":true,"time":5,"len":2000000}"#, code::BLOCK_SIZE),
            (br#"{"tcp":true,"time":0}"#, code::DURATION),
            (br#"{"sctp":true,"time":5}"#, code::PROTOCOL),
            (br#"[1,2]"#, code::RECV_PARAMS),
        ];
        for (body, expected) in cases {
            let error = Params::from_json(body).unwrap_err();
            assert_eq!(error.code, expected, "{}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn parameters_round_trip_through_the_client_document() {
        let p = Params {
            transport: Transport::Udp,
            time: 3,
            omit: 1,
            parallel: 4,
            len: 1200,
            bandwidth: 50_000_000,
            bidirectional: true,
            udp_counters_64bit: true,
            get_server_output: true,
            window: Some(1 << 20),
            client_version: Some("linerate".into()),
            ..Params::default()
        };
        assert_eq!(Params::from_json(&p.to_json()).unwrap(), p);
        let text = String::from_utf8(Params::default().to_json()).unwrap();
        assert!(
            !text.contains("reverse") && !text.contains("bandwidth"),
            "{text}"
        );
    }

    #[test]
    fn results_read_as_iperf3_writes_them() {
        let body = br#"{"cpu_util_total":1.2,"cpu_util_user":0.1,"cpu_util_system":1.1,"sender_has_retransmits":-1,"congestion_used":"cubic","streams":[{"id":1,"bytes":1170000000,"retransmits":-1,"jitter":0,"errors":0,"omitted_errors":0,"packets":0,"omitted_packets":0,"start_time":0,"end_time":10.0004}]}"#;
        let r = Results::from_json(body).unwrap();
        assert_eq!(r.streams[0].bytes, 1_170_000_000);
        assert_eq!(r.sender_has_retransmits, -1);
        assert_eq!(Results::from_json(&r.to_json()).unwrap(), r);
        assert!(Results::from_json(br#"{"cpu_util_total":1}"#).is_err());
        // iperf3 3.12 writes an unknown retransmit count as 2^64 - 1.
        let unsigned = br#"{"cpu_util_total":1,"cpu_util_user":0,"cpu_util_system":1,"sender_has_retransmits":0,"streams":[{"id":1,"bytes":5,"retransmits":18446744073709551615,"jitter":0,"errors":0,"packets":0}]}"#;
        assert_eq!(
            Results::from_json(unsigned).unwrap().streams[0].retransmits,
            -1
        );
    }

    #[test]
    fn stream_ids_skip_two_and_cookies_use_the_alphabet() {
        let ids: Vec<i64> = (0..4).map(stream_id).collect();
        assert_eq!(ids, vec![1, 3, 4, 5]);
        let cookie = cookie_from(&[255; 36]);
        assert_eq!(cookie[36], 0);
        assert!(matches!(
            crate::preface::classify(&cookie),
            crate::preface::Preface::Iperf3 { .. }
        ));
    }
}

#[cfg(test)]
mod session_tests;
