//! The control connection's messages (docs/transfer-protocol.md 2): JSON in linerate's
//! length-prefixed frames, after the `LINECOPY` preface. The key exchange is
//! linerate-proto's `auth`; everything a peer sends is checked by [`Control::validate`]
//! before a driver acts on it.

use serde::{Deserialize, Serialize};

/// The copy protocol's version.
pub const COPY_VERSION: u32 = 4;
/// The largest frame either end accepts.
pub const MAX_FRAME: usize = 1 << 20;
/// The most files one directory listing names.
pub const MAX_ENTRIES: usize = 20_000;
/// The most chunk ranges an `accept` lists.
pub const MAX_HAVE_RANGES: usize = 50_000;
/// The most UDP flows (lanes) a session's datagrams spread over (`--lanes`).
pub const MAX_LANES: u8 = 16;

/// One file of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Relative to the directory listed, `/`-separated.
    pub path: String,
    pub size: u64,
}

/// What one end measured of its part, for the other's summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct EndStats {
    /// Seconds the disk thread spent reading (sender) or writing and syncing (receiver).
    pub disk_busy_s: f64,
    /// CPU seconds of all the transfer's threads on this end.
    pub cpu_s: f64,
    /// Seconds of the transfer's wall time.
    pub wall_s: f64,
    /// Datagrams the receiver dropped for a payload CRC that did not match (corrupted on
    /// the way); 0 from a sender.
    #[serde(default)]
    pub corrupted_datagrams: u64,
    /// Datagrams the receiving host's kernel dropped at a full socket buffer while the
    /// copy ran (`RcvbufErrors` of /proc/net/snmp, host-wide: a receiver kept from
    /// running loses them though the path carried them); 0 from a sender.
    #[serde(default)]
    pub rcvbuf_errors: u64,
    /// Seconds the end's main thread waited, runnable, for a CPU (other work held them).
    #[serde(default)]
    pub runqueue_wait_s: f64,
    /// A resuming receiver: chunks its journal recorded that it read back from the
    /// `.part` and hashed before trusting them, how many of those did not match (fetched
    /// again), and the seconds it took; 0 from a sender and from a fresh copy.
    #[serde(default)]
    pub resume_checked_chunks: u64,
    #[serde(default)]
    pub resume_damaged_chunks: u64,
    #[serde(default)]
    pub resume_check_s: f64,
    /// The sender's own view, so that a receiving end reports what the sender did (a
    /// receiver sees duplicates, not resends, and none of the sender's waits); zero from
    /// a receiver.
    #[serde(default)]
    pub sent: SenderFigures,
}

/// Where the sender's time went, seconds: what held the next datagram back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Waits {
    /// Sending as fast as the rate allows: the network (or `--rate`) sets the pace.
    pub pacing_s: f64,
    /// The congestion window was full.
    pub window_s: f64,
    /// The receiver's flow-control window was closed (its disk or CPU behind).
    pub receiver_s: f64,
    /// The next chunk had not been read from the disk.
    pub reader_s: f64,
    /// Everything sent, waiting for the last ACKs and the receiver's verdict.
    pub tail_s: f64,
}

/// What only the sending end of a copy knows, sent with its close.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SenderFigures {
    /// Datagram payload bytes sent, of them sent again, and the datagrams declared lost.
    pub payload_bytes: u64,
    pub resent_bytes: u64,
    pub lost_packets: u64,
    /// Of the resent bytes, second copies of blocks resent in the tail (by design: a
    /// lost resend there has nothing sent after it to reveal it).
    #[serde(default)]
    pub tail_copy_bytes: u64,
    pub waits: Waits,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_rtt_ms: Option<f64>,
    /// The rate model's bottleneck estimate at the end (bit/s) and its random loss share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bottleneck_bps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub random_loss: Option<f64>,
    /// The rate the search began from when it resumed from an earlier copy over this
    /// path (half what that copy found), bit/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_bps: Option<f64>,
    /// A cold start: the packet train's estimate of the path (bit/s) and how long after
    /// the first datagram it came (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train: Option<StartEstimate>,
    /// With `--ecn`: what the ACKs said of CE marks and what the rate control did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecn: Option<EcnFigures>,
}

/// A cold start's packet train as the sender took it: the path's rate by the train's
/// arrival (wire bytes, bit/s), and the milliseconds from the first datagram to the ACK
/// that carried it; the rate the search jumped to (absent where it already paced above
/// it).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StartEstimate {
    pub bps: f64,
    pub after_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jumped_to_bps: Option<f64>,
    /// The rate the train left the sender at (absent where it left within one batch):
    /// a train that left slower than the bottleneck reads the sender, not the path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_bps: Option<f64>,
}

/// A copy's ECN (`--ecn`): the data datagrams the receiver found marked CE, and the
/// rounds the sender's rate control took as congested for them alone (a cut each).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EcnFigures {
    pub ce_marked: u64,
    pub ce_rounds: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Control {
    /// Client: its nonce and SPAKE2 message (linerate-proto's `auth`).
    Hello { nonce: String, pake: String },
    /// Server: its nonce, SPAKE2 message and proof, and where the client's UDP hello
    /// goes: the session's UDP port and id, bound into both proofs.
    Challenge {
        nonce: String,
        pake: String,
        proof: String,
        udp_port: u16,
        session: u64,
    },
    /// Client: its proof.
    Proof { proof: String },
    /// Server: the client's UDP address is proven.
    UdpReady,
    /// Either end: what was asked cannot be done; the connection stays for the next ask
    /// unless the refusal is of the key.
    Refused { message: String },
    /// Client: send me this file (the server then offers it), at a fixed rate or under a
    /// ceiling when given (bit/s).
    Pull {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rate_bps: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_rate_bps: Option<u64>,
        /// Seal the payloads (`--encrypt`).
        #[serde(default)]
        encrypt: bool,
        /// Search the path's rate from scratch, not from what the server's last file to
        /// this client found (`--cold-start`). Sent only when set.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cold_start: bool,
        /// As an offer's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dscp: Option<u8>,
        /// As an offer's (the server sends, with ECT(0)). Sent only when set.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        ecn: bool,
    },
    /// Client: spread the session's datagrams over `count` UDP flows ("lanes", 2 to
    /// [`MAX_LANES`]), each a pair of ports of its own, so that a path that keeps each
    /// flow to one queue, link or thread (ECMP, a LAG, a per-flow policer, an emulator's
    /// threads) carries the copy on several. Asked at most once, before any file.
    Lanes { count: u8 },
    /// Server: the UDP ports of lanes 1 to count - 1 (lane 0 is the session's). The client
    /// sends a hello to each from a socket of its own; each is proven as the session's
    /// first was.
    LanePorts { ports: Vec<u16> },
    /// Server: a hello came to every lane: the lanes are open both ways.
    LanesReady,
    /// Client: list the files under this path (a directory pull).
    List { path: String },
    /// Server: the files under the path listed.
    Entries { entries: Vec<Entry> },
    /// The sending end: a file to come. `path` is where the receiver puts it (a push);
    /// empty for a pull, whose receiver knows where.
    Offer {
        path: String,
        size: u64,
        chunk: u64,
        block: u32,
        identity: String,
        mode: u32,
        /// Memory to memory: the receiver checks the hashes and writes nothing.
        #[serde(default)]
        discard: bool,
        /// Payloads sealed with ChaCha20-Poly1305 (`--encrypt`); `block` is the plaintext's.
        #[serde(default)]
        encrypted: bool,
        /// Create the missing directories of `path` (`--mkdir`; a tree copied with `-r`
        /// brings its own). Without it a missing directory is an error, as for scp.
        #[serde(default)]
        mkdir: bool,
        /// The client's `--dscp`: the server marks its datagrams and control messages
        /// with it too (0 to 63). Sent only when set.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dscp: Option<u8>,
        /// The client's `--ecn`: the data datagrams carry ECT(0) and the receiving end
        /// counts those marked CE in its ACKs. Sent only when set.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        ecn: bool,
        /// A cold start: the first `train` datagrams (packet numbers 0 to train - 1) go
        /// back to back; the receiving end times their arrival and its ACKs carry the rate
        /// (`train.rs`). Sent only when set.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        train: Option<u32>,
    },
    /// The receiving end: go ahead; these chunk ranges (both ends included) are already
    /// durable; this far into the file you may send.
    Accept { have: Vec<(u64, u64)>, window: u64 },
    /// The sending end: a chunk's BLAKE3, hex.
    Hash { chunk: u64, hash: String },
    /// The receiving end: chunk's hash failed; send it all again.
    Refetch { chunk: u64 },
    /// The receiving end: the file is whole, synced and in place; its root hash, and
    /// what the receiver measured.
    Done { root: String, stats: EndStats },
    /// The sending end, after `done`: what the sender measured.
    Closed { stats: EndStats },
    /// Either end: the transfer failed; why.
    Failed { message: String },
    /// Client: no more files.
    Bye,
}

/// A message that breaks the protocol's bounds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

impl Control {
    /// Checks the values a peer sent against the protocol's bounds.
    pub fn validate(&self) -> Result<(), Invalid> {
        let too_long = |what: &str, text: &str, limit: usize| {
            if text.len() > limit {
                Err(Invalid(format!("{what} over {limit} bytes")))
            } else {
                Ok(())
            }
        };
        match self {
            Control::Hello { nonce, pake } => {
                too_long("nonce", nonce, 64)?;
                too_long("pake", pake, 66)
            }
            Control::Challenge {
                nonce, pake, proof, ..
            } => {
                too_long("nonce", nonce, 64)?;
                too_long("pake", pake, 66)?;
                too_long("proof", proof, 64)
            }
            Control::Proof { proof } => too_long("proof", proof, 64),
            Control::Refused { message } | Control::Failed { message } => {
                too_long("message", message, 4096)
            }
            Control::Pull {
                path,
                rate_bps,
                max_rate_bps,
                dscp,
                ..
            } => {
                dscp_in_range(*dscp)?;
                if [rate_bps, max_rate_bps]
                    .into_iter()
                    .flatten()
                    .any(|&r| r == 0)
                {
                    return Err(Invalid("a rate of 0".into()));
                }
                too_long("path", path, crate::confine::MAX_NAME)
            }
            Control::List { path } => too_long("path", path, crate::confine::MAX_NAME),
            Control::Entries { entries } => {
                if entries.len() > MAX_ENTRIES {
                    return Err(Invalid(format!("over {MAX_ENTRIES} entries")));
                }
                for entry in entries {
                    too_long("path", &entry.path, crate::confine::MAX_NAME)?;
                }
                Ok(())
            }
            Control::Offer {
                path,
                size,
                chunk,
                block,
                identity,
                dscp,
                train,
                ..
            } => {
                dscp_in_range(*dscp)?;
                train_in_range(*train)?;
                too_long("path", path, crate::confine::MAX_NAME)?;
                too_long("identity", identity, 64)?;
                crate::layout::Layout::new(*size, *chunk, *block)
                    .map(|_| ())
                    .map_err(|e| Invalid(e.to_string()))
            }
            Control::Accept { have, .. } => {
                if have.len() > MAX_HAVE_RANGES {
                    return Err(Invalid(format!("over {MAX_HAVE_RANGES} chunk ranges")));
                }
                if have.iter().any(|(low, high)| low > high) {
                    return Err(Invalid("a chunk range that ends before it starts".into()));
                }
                Ok(())
            }
            Control::Hash { hash, .. } => crate::journal::parse_hash(hash)
                .map(|_| ())
                .ok_or_else(|| Invalid("a chunk hash that is not 64 hex digits".into())),
            Control::Done { root, stats } => {
                crate::journal::parse_hash(root)
                    .ok_or_else(|| Invalid("a root hash that is not 64 hex digits".into()))?;
                stats.validate()
            }
            Control::Closed { stats } => stats.validate(),
            Control::Lanes { count } => lanes_in_range(*count),
            Control::LanePorts { ports } => lane_ports_valid(ports),
            Control::UdpReady | Control::LanesReady | Control::Refetch { .. } | Control::Bye => {
                Ok(())
            }
        }
    }
}

impl EndStats {
    fn validate(&self) -> Result<(), Invalid> {
        let fine = |v: f64| v.is_finite() && (0.0..1e9).contains(&v);
        let sent = &self.sent;
        let w = &sent.waits;
        let waits = [w.pacing_s, w.window_s, w.receiver_s, w.reader_s, w.tail_s];
        let optional = [
            sent.min_rtt_ms,
            sent.bottleneck_bps.map(|b| b / 1e6),
            sent.resumed_bps.map(|b| b / 1e6),
            sent.train.map(|t| t.bps / 1e6),
            sent.train.map(|t| t.after_ms),
            sent.train.and_then(|t| t.jumped_to_bps).map(|b| b / 1e6),
            sent.train.and_then(|t| t.sent_bps).map(|b| b / 1e9),
        ];
        if fine(self.disk_busy_s)
            && fine(self.cpu_s)
            && fine(self.runqueue_wait_s)
            && fine(self.wall_s)
            && waits.into_iter().all(fine)
            && optional.into_iter().flatten().all(fine)
            && sent
                .random_loss
                .is_none_or(|l| l.is_finite() && (0.0..=1.0).contains(&l))
        {
            Ok(())
        } else {
            Err(Invalid("figures out of range".into()))
        }
    }
}

/// Encodes a message as one frame.
pub fn encode(message: &Control) -> Vec<u8> {
    let body = serde_json::to_vec(message).expect("control messages serialize");
    let mut frame = Vec::with_capacity(body.len() + 4);
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

/// Decodes and checks one frame's body.
pub fn decode(body: &[u8]) -> Result<Control, Invalid> {
    let message: Control =
        serde_json::from_slice(body).map_err(|e| Invalid(format!("malformed message: {e}")))?;
    message.validate()?;
    Ok(message)
}

/// A session's lanes: 2 to [`MAX_LANES`].
fn lanes_in_range(count: u8) -> Result<(), Invalid> {
    if (2..=MAX_LANES).contains(&count) {
        Ok(())
    } else {
        Err(Invalid(format!("{count} lanes (2 to {MAX_LANES})")))
    }
}

/// The ports of lanes 1 and on: 1 to [`MAX_LANES`] - 1 of them, none 0.
fn lane_ports_valid(ports: &[u16]) -> Result<(), Invalid> {
    if ports.is_empty() || ports.len() >= usize::from(MAX_LANES) {
        return Err(Invalid(format!(
            "{} lane ports (1 to {})",
            ports.len(),
            MAX_LANES - 1
        )));
    }
    if ports.contains(&0) {
        return Err(Invalid("a lane port of 0".into()));
    }
    Ok(())
}

/// A DSCP is six bits.
fn train_in_range(train: Option<u32>) -> Result<(), Invalid> {
    let most = crate::train::MAX_TRAIN_PACKETS;
    match train {
        Some(packets) if !(2..=most).contains(&packets) => Err(Invalid(format!(
            "a packet train of {packets} datagrams (2 to {most})"
        ))),
        _ => Ok(()),
    }
}

fn dscp_in_range(dscp: Option<u8>) -> Result<(), Invalid> {
    match dscp {
        Some(d) if d > 63 => Err(Invalid(format!("a DSCP of {d} (0 to 63)"))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn messages_round_trip() {
        let offer = Control::Offer {
            path: "a/b".into(),
            size: 10,
            chunk: 1 << 20,
            block: 1400,
            identity: "00".repeat(32),
            mode: 0o644,
            discard: false,
            encrypted: true,
            mkdir: false,
            dscp: Some(46),
            ecn: true,
            train: Some(64),
        };
        let frame = encode(&offer);
        assert_eq!(decode(&frame[4..]), Ok(offer));
    }

    #[test]
    fn out_of_bounds_values_are_refused() {
        let bad_layout = br#"{"type":"offer","path":"x","size":1,"chunk":3,"block":1400,"identity":"","mode":0}"#;
        assert!(decode(bad_layout).is_err());
        let offer = |train: u32| {
            format!(
                r#"{{"type":"offer","path":"x","size":1,"chunk":1048576,"block":1400,"identity":"","mode":0,"train":{train}}}"#
            )
        };
        assert!(decode(offer(64).as_bytes()).is_ok());
        for train in [0, 1, 257, u32::MAX] {
            assert!(
                decode(offer(train).as_bytes()).is_err(),
                "a train of {train}"
            );
        }
        let bad_hash = br#"{"type":"hash","chunk":1,"hash":"zz"}"#;
        assert!(decode(bad_hash).is_err());
        let backwards = br#"{"type":"accept","have":[[5,1]],"window":0}"#;
        assert!(decode(backwards).is_err());
        let unknown = br#"{"type":"offer","path":"x","size":1,"chunk":1048576,"block":1400,"identity":"","mode":0,"extra":1}"#;
        assert!(decode(unknown).is_err());
        let nan = br#"{"type":"closed","stats":{"disk_busy_s":-1,"cpu_s":0,"wall_s":0}}"#;
        assert!(decode(nan).is_err());
        for lanes in [
            &br#"{"type":"lanes","count":1}"#[..],
            br#"{"type":"lanes","count":17}"#,
            br#"{"type":"lanes","count":300}"#,
            br#"{"type":"lane_ports","ports":[]}"#,
            br#"{"type":"lane_ports","ports":[5,0]}"#,
            br#"{"type":"lane_ports","ports":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}"#,
        ] {
            assert!(decode(lanes).is_err(), "{}", String::from_utf8_lossy(lanes));
        }
        assert!(decode(br#"{"type":"lanes","count":16}"#).is_ok());
        assert!(decode(br#"{"type":"lane_ports","ports":[40000,40001,40002]}"#).is_ok());
    }

    proptest! {
        #[test]
        fn any_bytes_decode_or_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode(&bytes);
        }
    }
}
