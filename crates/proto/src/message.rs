//! Control messages (docs/protocol.md 3). Each travels as one JSON object in one frame,
//! tagged by its `type` field.

use linerate_model::{HostFacts, SideResult, TestConfig};
use serde::{Deserialize, Serialize};

/// What a server is willing to run; announced in `welcome`, enforced on `spec`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    pub max_tests: u32,
    pub max_flows: u32,
    pub max_duration_s: f64,
    /// The most bits per second one test may ask for, all its flows together; `None`:
    /// no limit (docs/security.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rate_bps: Option<u64>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_tests: 64,
            max_flows: 4096,
            max_duration_s: 86_400.0,
            max_rate_bps: None,
        }
    }
}

/// Why a server refuses a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefuseCode {
    /// The client speaks another protocol version.
    VersionMismatch,
    /// The server runs as many tests as it allows.
    Busy,
    /// The test asks for more than the server's limits.
    OverLimit,
    /// The specification is malformed or inconsistent.
    Invalid,
    /// The client did not prove it holds the server's key.
    Unauthorized,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMessage {
    Hello {
        software: String,
        host: HostFacts,
        /// The client's authentication nonce (hex); sent by clients that hold a key
        /// (docs/protocol.md 4, docs/security.md).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nonce: Option<String>,
        /// The client's SPAKE2 message (hex), with `nonce` (crate::auth).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pake: Option<String>,
    },
    /// The client's proof that it holds the server's key.
    Auth {
        proof: String,
    },
    Spec {
        // Boxed: a configuration is far larger than the other messages.
        config: Box<TestConfig>,
    },
    Start,
    /// Ends the running test now, ahead of its schedule (the user interrupted it): the
    /// server ends its side at once and sends its results as usual.
    End,
    Done,
    Abort {
        reason: crate::text::PeerText,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMessage {
    Welcome {
        version: u32,
        software: String,
        host: HostFacts,
        limits: Limits,
        /// Present when the server holds a key: its nonce and its proof over both nonces.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        auth: Option<crate::auth::Challenge>,
    },
    Refuse {
        code: RefuseCode,
        reason: crate::text::PeerText,
    },
    Accepted {
        /// A keyed server's facts: its welcome, before the client proved the key, names
        /// only its software.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        host: Option<Box<HostFacts>>,
        test_id: u64,
        /// 32 hex digits; data connections present it in their preface.
        token: String,
        /// UDP tests: the server's port for each flow, in flow order. Each flow's first
        /// datagram there is a hello carrying the token (docs/protocol.md 5).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        udp_ports: Vec<u16>,
        /// crr tests: the port where the test's listener takes one new connection per
        /// transaction, from the control connection's host only (docs/protocol.md 6).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        crr_port: Option<u16>,
        /// TLS and QUIC tests: the SHA-256 fingerprint (hex) of the certificate the data
        /// connections will present; the client trusts that one (docs/protocol.md 7).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tls_fingerprint: Option<String>,
        /// QUIC tests: the server's UDP port for the test's QUIC connections.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        quic_port: Option<u16>,
        /// QUIC tests where the server runs several QUIC workers: each one's port, the
        /// first being `quic_port` (docs/protocol.md 7). Absent for one worker.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        quic_ports: Vec<u16>,
    },
    FlowsReady,
    Results {
        result: Box<SideResult>,
    },
    Error {
        reason: crate::text::PeerText,
    },
}

/// Encodes a message as one frame.
pub fn encode<T: Serialize>(message: &T) -> Vec<u8> {
    // Serializing these plain data types to JSON cannot fail (no maps with non-string keys).
    let body = serde_json::to_vec(message).expect("control messages serialize");
    crate::frame::encode(&body)
}
