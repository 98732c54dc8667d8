//! The TLS 1.3 cipher suites a test can ask for.

use std::fmt;
use std::str::FromStr;

/// A TLS 1.3 AEAD, named as users name it (`--cipher aes256-gcm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Cipher {
    Aes128Gcm,
    /// rustls' and OpenSSL's first TLS 1.3 choice.
    #[default]
    Aes256Gcm,
    Chacha20Poly1305,
}

impl Cipher {
    pub const ALL: [Cipher; 3] = [
        Cipher::Aes256Gcm,
        Cipher::Aes128Gcm,
        Cipher::Chacha20Poly1305,
    ];

    /// The short name `--cipher` takes and reports show.
    pub fn name(self) -> &'static str {
        match self {
            Cipher::Aes128Gcm => "aes128-gcm",
            Cipher::Aes256Gcm => "aes256-gcm",
            Cipher::Chacha20Poly1305 => "chacha20-poly1305",
        }
    }

    /// The suite's IANA name, as OpenSSL and the report print it.
    pub fn suite_name(self) -> &'static str {
        match self {
            Cipher::Aes128Gcm => "TLS_AES_128_GCM_SHA256",
            Cipher::Aes256Gcm => "TLS_AES_256_GCM_SHA384",
            Cipher::Chacha20Poly1305 => "TLS_CHACHA20_POLY1305_SHA256",
        }
    }

    pub(crate) fn rustls_suite(self) -> rustls::SupportedCipherSuite {
        use rustls::crypto::ring::cipher_suite as suites;
        match self {
            Cipher::Aes128Gcm => suites::TLS13_AES_128_GCM_SHA256,
            Cipher::Aes256Gcm => suites::TLS13_AES_256_GCM_SHA384,
            Cipher::Chacha20Poly1305 => suites::TLS13_CHACHA20_POLY1305_SHA256,
        }
    }

    /// The cipher of a negotiated suite.
    pub fn of_suite(suite: rustls::SupportedCipherSuite) -> Option<Cipher> {
        Cipher::ALL
            .into_iter()
            .find(|c| c.rustls_suite().suite() == suite.suite())
    }
}

impl fmt::Display for Cipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Cipher {
    type Err = String;

    /// Takes the short names, the IANA names and OpenSSL's spellings, in any case.
    fn from_str(text: &str) -> Result<Cipher, String> {
        let key: String = text
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        let key = key.strip_prefix("tls").unwrap_or(&key);
        match key {
            "aes128gcm" | "aes128gcmsha256" => Ok(Cipher::Aes128Gcm),
            "aes256gcm" | "aes256gcmsha384" => Ok(Cipher::Aes256Gcm),
            "chacha20poly1305" | "chacha20poly1305sha256" | "chacha20" => {
                Ok(Cipher::Chacha20Poly1305)
            }
            _ => Err(format!(
                "unknown cipher '{text}' (one of: aes128-gcm, aes256-gcm, chacha20-poly1305)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_names_one_cipher() {
        for cipher in Cipher::ALL {
            assert_eq!(cipher.name().parse::<Cipher>(), Ok(cipher));
            assert_eq!(cipher.suite_name().parse::<Cipher>(), Ok(cipher));
            assert_eq!(Cipher::of_suite(cipher.rustls_suite()), Some(cipher));
        }
        assert_eq!("AES-128-GCM".parse::<Cipher>(), Ok(Cipher::Aes128Gcm));
        assert!("aes-cbc".parse::<Cipher>().unwrap_err().contains("aes-cbc"));
    }
}
