//! The first bytes of every connection to a linerate server (docs/protocol.md 1).
//!
//! One port serves control connections, data connections and (later) iperf3 clients, so
//! the server classifies a connection by its first bytes before anything else:
//!
//! | first bytes | length | meaning |
//! |---|---|---|
//! | `LINERATE` + u32 BE version | 12 | native control connection |
//! | `LINEAGNT` + u32 BE version | 12 | agent connection (profile runs) |
//! | `LINEDATA` + 16-byte token + u32 BE flow index | 28 | native data connection |
//! | `LINECOPY` + u32 BE version | 12 | a copy session (`--files`) |
//! | `LINEPING` | 8 | a reachability probe (`linerate doctor HOST`): closed, nothing logged |
//! | 36 of `[a-z2-7]` + NUL | 37 | an iperf3 client's cookie |
//!
//! The magics are upper case, which the iperf3 cookie alphabet cannot contain, so eight
//! bytes always decide. The classifier asks for exactly as many bytes as it needs, so a
//! server never reads past the preface into what follows.

/// Opens a native control connection.
pub const CONTROL_MAGIC: [u8; 8] = *b"LINERATE";
/// Opens a native data connection.
pub const DATA_MAGIC: [u8; 8] = *b"LINEDATA";
/// Opens a copy session (the file service).
pub const COPY_MAGIC: [u8; 8] = *b"LINECOPY";
/// A probe of the server's reachability (`linerate doctor HOST` times its handshakes):
/// the server closes it without a word in its log.
pub const PING_MAGIC: [u8; 8] = *b"LINEPING";
/// The control protocol version this build speaks.
pub const PROTOCOL_VERSION: u32 = 1;
/// Length of a control preface: magic and version.
pub const CONTROL_PREFACE_LEN: usize = 12;
/// Length of a data preface: magic, token and flow index.
pub const DATA_PREFACE_LEN: usize = 28;
/// Length of an iperf3 cookie, NUL included.
pub const IPERF3_COOKIE_LEN: usize = 37;

/// A test's secret: data connections present it to join the test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token(pub [u8; 16]);

impl Token {
    /// Lower-case hex, as the token travels in JSON.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses 32 hex digits.
    pub fn from_hex(text: &str) -> Option<Token> {
        if text.len() != 32 || !text.is_ascii() {
            return None;
        }
        let mut bytes = [0u8; 16];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Token(bytes))
    }
}

/// What the first bytes of a connection say it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Preface {
    /// Not decided yet: read until the buffer holds this many bytes in all.
    NeedBytes(usize),
    /// A native control connection speaking `version`.
    Control { version: u32 },
    /// An agent connection (a profile run's controller or group host) speaking `version`.
    Agent { version: u32 },
    /// A copy session speaking `version`.
    Copy { version: u32 },
    /// A native data connection for flow `flow` of the test with `token`.
    Data { token: Token, flow: u32 },
    /// An iperf3 client; the cookie is the 36 characters before the NUL.
    Iperf3 { cookie: String },
    /// A reachability probe: close it, log nothing.
    Ping,
    /// Nothing this server speaks.
    Unknown,
}

fn is_cookie_char(byte: u8) -> bool {
    byte.is_ascii_lowercase() || (b'2'..=b'7').contains(&byte)
}

/// Classifies a connection from the bytes read so far (never more than it asked for).
pub fn classify(bytes: &[u8]) -> Preface {
    let Some(&first) = bytes.first() else {
        return Preface::NeedBytes(CONTROL_MAGIC.len());
    };
    if is_cookie_char(first) {
        if let Some(bad) = bytes
            .iter()
            .take(IPERF3_COOKIE_LEN - 1)
            .position(|&b| !is_cookie_char(b))
        {
            let _ = bad;
            return Preface::Unknown;
        }
        if bytes.len() < IPERF3_COOKIE_LEN {
            return Preface::NeedBytes(IPERF3_COOKIE_LEN);
        }
        if bytes[IPERF3_COOKIE_LEN - 1] != 0 {
            return Preface::Unknown;
        }
        let cookie = String::from_utf8_lossy(&bytes[..IPERF3_COOKIE_LEN - 1]).into_owned();
        return Preface::Iperf3 { cookie };
    }
    let seen = bytes.len().min(CONTROL_MAGIC.len());
    let control = bytes[..seen] == CONTROL_MAGIC[..seen];
    let agent = bytes[..seen] == crate::agent::AGENT_MAGIC[..seen];
    let data = bytes[..seen] == DATA_MAGIC[..seen];
    let copy = bytes[..seen] == COPY_MAGIC[..seen];
    let ping = bytes[..seen] == PING_MAGIC[..seen];
    if !control && !data && !agent && !copy && !ping {
        return Preface::Unknown;
    }
    if bytes.len() < CONTROL_MAGIC.len() {
        return Preface::NeedBytes(CONTROL_MAGIC.len());
    }
    if ping {
        return Preface::Ping;
    }
    if control || agent || copy {
        if bytes.len() < CONTROL_PREFACE_LEN {
            return Preface::NeedBytes(CONTROL_PREFACE_LEN);
        }
        let version = u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        return if control {
            Preface::Control { version }
        } else if agent {
            Preface::Agent { version }
        } else {
            Preface::Copy { version }
        };
    }
    if bytes.len() < DATA_PREFACE_LEN {
        return Preface::NeedBytes(DATA_PREFACE_LEN);
    }
    let mut token = [0u8; 16];
    token.copy_from_slice(&bytes[8..24]);
    let flow = u32::from_be_bytes([bytes[24], bytes[25], bytes[26], bytes[27]]);
    Preface::Data {
        token: Token(token),
        flow,
    }
}

/// The control preface a client sends first.
pub fn control_preface(version: u32) -> [u8; CONTROL_PREFACE_LEN] {
    let mut out = [0u8; CONTROL_PREFACE_LEN];
    out[..8].copy_from_slice(&CONTROL_MAGIC);
    out[8..].copy_from_slice(&version.to_be_bytes());
    out
}

/// The data preface a client sends first on each data connection.
pub fn data_preface(token: Token, flow: u32) -> [u8; DATA_PREFACE_LEN] {
    let mut out = [0u8; DATA_PREFACE_LEN];
    out[..8].copy_from_slice(&DATA_MAGIC);
    out[8..24].copy_from_slice(&token.0);
    out[24..].copy_from_slice(&flow.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_preface_round_trips_byte_by_byte() {
        let preface = control_preface(7);
        for len in 0..CONTROL_PREFACE_LEN {
            assert!(matches!(classify(&preface[..len]), Preface::NeedBytes(n) if n > len));
        }
        assert_eq!(classify(&preface), Preface::Control { version: 7 });
    }

    #[test]
    fn data_preface_carries_token_and_flow() {
        let token = Token([9; 16]);
        let preface = data_preface(token, 4095);
        assert_eq!(
            classify(&preface[..8]),
            Preface::NeedBytes(DATA_PREFACE_LEN)
        );
        assert_eq!(classify(&preface), Preface::Data { token, flow: 4095 });
    }

    #[test]
    fn iperf3_cookie_is_recognised() {
        let mut cookie = b"abcdefghijklmnopqrstuvwxyz234567abcd".to_vec();
        cookie.push(0);
        assert_eq!(
            classify(&cookie[..10]),
            Preface::NeedBytes(IPERF3_COOKIE_LEN)
        );
        assert!(matches!(classify(&cookie), Preface::Iperf3 { cookie } if cookie.len() == 36));
    }

    #[test]
    fn agent_preface_is_told_from_control() {
        let preface = crate::agent::agent_preface(3);
        assert_eq!(classify(&preface[..4]), Preface::NeedBytes(8));
        assert_eq!(classify(&preface[..8]), Preface::NeedBytes(12));
        assert_eq!(classify(&preface), Preface::Agent { version: 3 });
    }

    #[test]
    fn copy_preface_is_told_from_data() {
        let mut preface = COPY_MAGIC.to_vec();
        preface.extend_from_slice(&1u32.to_be_bytes());
        assert_eq!(classify(&preface[..8]), Preface::NeedBytes(12));
        assert_eq!(classify(&preface), Preface::Copy { version: 1 });
    }

    #[test]
    fn garbage_is_unknown_early() {
        assert_eq!(classify(b"GET / HTTP/1.1"), Preface::Unknown);
        assert_eq!(classify(b"LINEX"), Preface::Unknown);
        assert_eq!(classify(b"abc!"), Preface::Unknown);
        assert_eq!(classify(&[0xff, 0, 0]), Preface::Unknown);
    }

    #[test]
    fn token_hex_round_trips() {
        let token = Token(*b"0123456789abcdef");
        assert_eq!(Token::from_hex(&token.to_hex()), Some(token));
        assert_eq!(Token::from_hex("zz"), None);
    }

    #[test]
    fn a_ping_is_known_at_eight_bytes() {
        assert_eq!(classify(b"LINEP"), Preface::NeedBytes(8));
        assert_eq!(classify(b"LINEPING"), Preface::Ping);
        assert_eq!(classify(b"LINEPONG"), Preface::Unknown);
    }
}
