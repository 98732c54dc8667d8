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
//!
//! Tokens are opened with AWS-LC (`aws-lc-rs`), whose RSA decryption runs in constant
//! time: the `rsa` crate's does not (the Marvin attack, RUSTSEC-2023-0071), and a server
//! that answers every connection is the oracle that attack needs. `rsa` only reads the
//! PEM file. OAEP is the default, as iperf3 3.17+ pads; PKCS #1 v1.5 tokens are opened
//! only on a server started to take them (older clients).

use aws_lc_rs::rsa::{
    OaepPrivateDecryptingKey, Pkcs1PrivateDecryptingKey, PrivateDecryptingKey, OAEP_SHA1_MGF1SHA1,
};
use base64::Engine;
use rsa::pkcs1::DecodeRsaPrivateKey;
use rsa::pkcs8::{DecodePrivateKey, EncodePrivateKey};
use rsa::RsaPrivateKey;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;

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
    #[error("the client pads its token with PKCS #1 v1.5, which this server takes only when started with --rsa-pkcs1-padding (iperf3 before 3.17)")]
    Pkcs1Refused,
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
    oaep: Arc<OaepPrivateDecryptingKey>,
    /// Present when PKCS #1 v1.5 tokens are taken.
    pkcs1: Option<Arc<Pkcs1PrivateDecryptingKey>>,
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
    /// `pkcs1`: PKCS #1 v1.5 tokens are taken too.
    pub fn new(
        private_key_pem: &str,
        users_file: &str,
        skew_s: i64,
        pkcs1: bool,
    ) -> Result<Iperf3Auth, String> {
        let key = RsaPrivateKey::from_pkcs8_pem(private_key_pem)
            .or_else(|_| RsaPrivateKey::from_pkcs1_pem(private_key_pem))
            .map_err(|e| format!("not an RSA private key in PEM: {e}"))?;
        let der = key
            .to_pkcs8_der()
            .map_err(|e| format!("cannot re-encode the RSA key: {e}"))?;
        Iperf3Auth::from_pkcs8_der(der.as_bytes(), users_file, skew_s, pkcs1)
    }

    /// From a PKCS #8 DER private key.
    pub fn from_pkcs8_der(
        der: &[u8],
        users_file: &str,
        skew_s: i64,
        pkcs1: bool,
    ) -> Result<Iperf3Auth, String> {
        if users_file.len() > MAX_USERS_FILE {
            return Err(format!("the users file is over {MAX_USERS_FILE} bytes"));
        }
        let key = PrivateDecryptingKey::from_pkcs8(der)
            .map_err(|e| format!("the RSA key is refused: {e}"))?;
        let pkcs1 = if pkcs1 {
            Some(Arc::new(
                Pkcs1PrivateDecryptingKey::new(key.clone()).map_err(|e| e.to_string())?,
            ))
        } else {
            None
        };
        Ok(Iperf3Auth {
            oaep: Arc::new(OaepPrivateDecryptingKey::new(key).map_err(|e| e.to_string())?),
            pkcs1,
            users: parse_users(users_file),
            skew_s,
        })
    }

    /// Opens a token: OAEP first (a v1.5 block never passes OAEP's check by accident),
    /// then PKCS #1 v1.5 where taken, since clients before 3.17 pad with it unsaid.
    fn open(&self, sealed: &[u8], pkcs1_said: bool) -> Result<Vec<u8>, Iperf3AuthError> {
        let mut out = vec![0u8; self.oaep.min_output_size()];
        if !pkcs1_said {
            if let Ok(plain) = self
                .oaep
                .decrypt(&OAEP_SHA1_MGF1SHA1, sealed, &mut out, None)
            {
                return Ok(plain.to_vec());
            }
        }
        let Some(pkcs1) = &self.pkcs1 else {
            return Err(if pkcs1_said {
                Iperf3AuthError::Pkcs1Refused
            } else {
                Iperf3AuthError::Undecryptable
            });
        };
        let mut out = vec![0u8; pkcs1.min_output_size()];
        pkcs1
            .decrypt(sealed, &mut out)
            .map(|plain| plain.to_vec())
            .map_err(|_| Iperf3AuthError::Undecryptable)
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
        let plain = self.open(&sealed, pkcs1)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::encoding::AsDer;
    use aws_lc_rs::rsa::{
        KeySize, OaepPublicEncryptingKey, Pkcs1PublicEncryptingKey, PrivateDecryptingKey,
    };

    /// A token as a client pads it: OAEP, or PKCS #1 v1.5.
    fn token(key: &PrivateDecryptingKey, text: &str, oaep: bool) -> String {
        let public = key.public_key();
        let mut out = vec![0u8; 512];
        let sealed = if oaep {
            OaepPublicEncryptingKey::new(public)
                .unwrap()
                .encrypt(&OAEP_SHA1_MGF1SHA1, text.as_bytes(), &mut out, None)
                .unwrap()
                .to_vec()
        } else {
            Pkcs1PublicEncryptingKey::new(public)
                .unwrap()
                .encrypt(text.as_bytes(), &mut out)
                .unwrap()
                .to_vec()
        };
        base64::engine::general_purpose::STANDARD.encode(sealed)
    }

    #[test]
    fn oaep_by_default_and_pkcs1_only_when_taken() {
        let key = PrivateDecryptingKey::generate(KeySize::Rsa2048).unwrap();
        let der = AsDer::<aws_lc_rs::encoding::Pkcs8V1Der>::as_der(&key).unwrap();
        let users = format!("mario,{}\n", password_hash("mario", "secret"));
        let strict = Iperf3Auth::from_pkcs8_der(der.as_ref(), &users, 10, false).unwrap();
        let lenient = Iperf3Auth::from_pkcs8_der(der.as_ref(), &users, 10, true).unwrap();
        let creds = "user: mario\npwd:  secret\nts:   1000";
        let oaep = token(&key, creds, true);
        let v15 = token(&key, creds, false);
        // iperf3 3.17+: OAEP, taken by both.
        assert_eq!(strict.check(Some(&oaep), false, 1000), Ok("mario".into()));
        assert_eq!(lenient.check(Some(&oaep), false, 1005), Ok("mario".into()));
        // Before 3.17 (v1.5, unsaid) and 3.17+ with --use-pkcs1-padding (said): only a
        // server that takes PKCS #1 v1.5.
        assert_eq!(
            strict.check(Some(&v15), false, 1000),
            Err(Iperf3AuthError::Undecryptable)
        );
        assert_eq!(
            strict.check(Some(&v15), true, 1000),
            Err(Iperf3AuthError::Pkcs1Refused)
        );
        assert_eq!(lenient.check(Some(&v15), false, 1000), Ok("mario".into()));
        assert_eq!(lenient.check(Some(&v15), true, 1000), Ok("mario".into()));
        // A wrong password, a stale token, another key.
        let wrong = token(&key, "user: mario\npwd:  guess\nts:   1000", true);
        assert!(matches!(
            strict.check(Some(&wrong), false, 1000),
            Err(Iperf3AuthError::Denied(_))
        ));
        assert_eq!(
            strict.check(Some(&oaep), false, 1011),
            Err(Iperf3AuthError::Skew(11))
        );
        let other = PrivateDecryptingKey::generate(KeySize::Rsa2048).unwrap();
        assert_eq!(
            strict.check(Some(&token(&other, creds, true)), false, 1000),
            Err(Iperf3AuthError::Undecryptable)
        );
    }
}
