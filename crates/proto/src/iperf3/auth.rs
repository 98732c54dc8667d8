//! iperf3's client authentication (iperf3 3.2 and later), as its servers check it with
//! `--rsa-private-key-path` and `--authorized-users-path` (../shared/docs/iperf3-wire.md 6).
//!
//! The client encrypts `user: NAME\npwd:  PASSWORD\nts:   UNIX_SECONDS` to the server's RSA
//! public key (OAEP, or PKCS #1 v1.5 when it says `use_pkcs1_padding`; clients before 3.17
//! pad with v1.5 and do not say so) and sends it base64 in the parameters' `authtoken`.
//! The server decrypts it, requires the timestamp within its skew threshold of its own
//! clock, and looks for the line `NAME,HASH` in the users file, where HASH is the hex
//! SHA-256 of `{NAME}PASSWORD`. No I/O and no clock here: the driver reads the files and
//! passes the time.

use base64::Engine;
use rsa::pkcs1::DecodeRsaPrivateKey;
use rsa::pkcs8::DecodePrivateKey;
use rsa::{Oaep, Pkcs1v15Encrypt, RsaPrivateKey};
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// iperf3's default `--time-skew-threshold`, in seconds.
pub const DEFAULT_SKEW_S: i64 = 10;
/// The longest token taken: base64 of an 8192-bit RSA block, with room to spare.
pub const MAX_TOKEN: usize = 2048;
/// The longest users file read, and the most users taken from it.
pub const MAX_USERS_FILE: usize = 1 << 20;

/// Why a client is not let in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Iperf3AuthError {
    #[error("no authentication token (this server requires --username and --rsa-public-key-path)")]
    Missing,
    #[error("the authentication token cannot be decrypted with this server's key")]
    Undecryptable,
    #[error("the authentication token is malformed")]
    Malformed,
    #[error("the token's time is {0} s from the server's, over the skew threshold")]
    Skew(i64),
    #[error("user '{0}' is unknown or gave a wrong password")]
    Denied(String),
}

/// A server's authentication setup: its private key, its users, its skew threshold.
#[derive(Clone)]
pub struct Iperf3Auth {
    key: RsaPrivateKey,
    /// User name to the hex SHA-256 of `{user}password`.
    users: HashMap<String, String>,
    pub skew_s: i64,
}

impl std::fmt::Debug for Iperf3Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Iperf3Auth({} users)", self.users.len())
    }
}

impl Iperf3Auth {
    /// From a PEM private key (PKCS #1 "RSA PRIVATE KEY" or PKCS #8 "PRIVATE KEY") and a
    /// users file's text.
    pub fn new(private_key_pem: &str, users_file: &str, skew_s: i64) -> Result<Iperf3Auth, String> {
        let key = RsaPrivateKey::from_pkcs8_pem(private_key_pem)
            .or_else(|_| RsaPrivateKey::from_pkcs1_pem(private_key_pem))
            .map_err(|e| format!("not an RSA private key in PEM: {e}"))?;
        if users_file.len() > MAX_USERS_FILE {
            return Err(format!("the users file is over {MAX_USERS_FILE} bytes"));
        }
        Ok(Iperf3Auth {
            key,
            users: parse_users(users_file),
            skew_s,
        })
    }

    /// Checks a client's token at Unix time `now_s`; `Ok` names the user.
    pub fn check(
        &self,
        token: Option<&str>,
        pkcs1: bool,
        now_s: i64,
    ) -> Result<String, Iperf3AuthError> {
        let token = token.ok_or(Iperf3AuthError::Missing)?;
        if token.len() > MAX_TOKEN {
            return Err(Iperf3AuthError::Malformed);
        }
        let sealed = base64::engine::general_purpose::STANDARD
            .decode(token.trim())
            .map_err(|_| Iperf3AuthError::Malformed)?;
        // Clients before 3.17 pad with v1.5 without saying so; OAEP is tried first since
        // a v1.5 block never passes OAEP's check by accident.
        let plain = if pkcs1 {
            self.key.decrypt(Pkcs1v15Encrypt, &sealed)
        } else {
            self.key
                .decrypt(Oaep::new::<sha1::Sha1>(), &sealed)
                .or_else(|_| self.key.decrypt(Pkcs1v15Encrypt, &sealed))
        }
        .map_err(|_| Iperf3AuthError::Undecryptable)?;
        let text = std::str::from_utf8(&plain).map_err(|_| Iperf3AuthError::Malformed)?;
        let (user, password, ts) = parse_credentials(text).ok_or(Iperf3AuthError::Malformed)?;
        let skew = now_s.saturating_sub(ts);
        if skew.abs() > self.skew_s {
            return Err(Iperf3AuthError::Skew(skew));
        }
        let hash = password_hash(user, password);
        match self.users.get(user) {
            // Both sides are hex digests of equal length; the names are not secret.
            Some(known) if constant_time_eq(known.as_bytes(), hash.as_bytes()) => {
                Ok(user.to_string())
            }
            _ => Err(Iperf3AuthError::Denied(user.chars().take(64).collect())),
        }
    }
}

/// The hex SHA-256 of `{user}password`, as the users file holds it.
pub fn password_hash(user: &str, password: &str) -> String {
    let digest = Sha256::digest(format!("{{{user}}}{password}").as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// `user,hash` lines; empty lines, lines without a comma and `#` comments are skipped.
pub fn parse_users(text: &str) -> HashMap<String, String> {
    text.lines()
        .map(|line| line.trim_end_matches('\r'))
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(|line| {
            let mut fields = line.split(',');
            let user = fields.next()?;
            let hash = fields.next()?;
            Some((user.to_string(), hash.to_ascii_lowercase()))
        })
        .collect()
}

/// `user: NAME\npwd:  PASSWORD\nts:   SECONDS`, each value one word (iperf3 writes them
/// with `%s` and reads them back with `sscanf`).
pub fn parse_credentials(text: &str) -> Option<(&str, &str, i64)> {
    let mut words = text.split_ascii_whitespace();
    let mut field = |label: &str| {
        if words.next()? != label {
            return None;
        }
        words.next()
    };
    let user = field("user:")?;
    let password = field("pwd:")?;
    let ts = field("ts:")?.parse().ok()?;
    Some((user, password, ts))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
