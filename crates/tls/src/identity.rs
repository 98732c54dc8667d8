//! The server's certificate and key: made at start, or read from PEM files.

use crate::TlsError;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use sha2::{Digest, Sha256};
use std::path::Path;

/// A certificate chain (leaf first), its key, and the leaf's SHA-256 fingerprint, which
/// the server announces so a client can pin it.
#[derive(Debug)]
pub struct Identity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    pub fingerprint: String,
    /// "self-signed, made at start" or the certificate file's path.
    pub origin: String,
}

/// Lower-case hex SHA-256 of a certificate's DER encoding.
pub fn fingerprint(certificate: &[u8]) -> String {
    Sha256::digest(certificate)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Identity {
    /// A fresh self-signed ECDSA P-256 certificate for `names` (DNS names or addresses).
    pub fn self_signed(names: &[String]) -> Result<Identity, TlsError> {
        let made = rcgen::generate_simple_self_signed(names.to_vec())
            .map_err(|e| TlsError::Identity(format!("cannot make a certificate: {e}")))?;
        let der = made.cert.der().clone();
        Ok(Identity {
            fingerprint: fingerprint(&der),
            chain: vec![der],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(made.key_pair.serialize_der())),
            origin: "self-signed, made at start".into(),
        })
    }

    /// Reads a PEM certificate chain and its PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub fn from_files(cert: &Path, key: &Path) -> Result<Identity, TlsError> {
        let read = |path: &Path| {
            std::fs::read(path)
                .map_err(|e| TlsError::Identity(format!("cannot read {}: {e}", path.display())))
        };
        let cert_pem = read(cert)?;
        let chain: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut cert_pem.as_slice())
            .collect::<Result<_, _>>()
            .map_err(|e| {
                TlsError::Identity(format!("{}: not a PEM certificate: {e}", cert.display()))
            })?;
        if chain.is_empty() {
            return Err(TlsError::Identity(format!(
                "{}: no CERTIFICATE block in it",
                cert.display()
            )));
        }
        let key_pem = read(key)?;
        let key_der = rustls_pemfile::private_key(&mut key_pem.as_slice())
            .map_err(|e| TlsError::Identity(format!("{}: not a PEM key: {e}", key.display())))?
            .ok_or_else(|| {
                TlsError::Identity(format!("{}: no PRIVATE KEY block in it", key.display()))
            })?;
        Ok(Identity {
            fingerprint: fingerprint(&chain[0]),
            chain,
            key: key_der,
            origin: cert.display().to_string(),
        })
    }
}

/// A self-signed certificate and key in PEM, valid from `not_before` to `not_after`
/// (years, month, day), for `names`: what `linerate serve --cert` takes. Tests use it to
/// make certificates that are expired or name another host.
pub fn self_signed_pem(
    names: &[String],
    not_before: (i32, u8, u8),
    not_after: (i32, u8, u8),
) -> Result<(String, String), TlsError> {
    let fail = |e: rcgen::Error| TlsError::Identity(format!("cannot make a certificate: {e}"));
    let mut params = rcgen::CertificateParams::new(names.to_vec()).map_err(fail)?;
    params.not_before = rcgen::date_time_ymd(not_before.0, not_before.1, not_before.2);
    params.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
    let key = rcgen::KeyPair::generate().map_err(fail)?;
    let cert = params.self_signed(&key).map_err(fail)?;
    Ok((cert.pem(), key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_read_back_to_the_same_fingerprint() {
        let dir = std::env::temp_dir().join(format!("linerate-tls-id-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) =
            self_signed_pem(&["example.test".into()], (2020, 1, 1), (2099, 1, 1)).unwrap();
        std::fs::write(dir.join("c.pem"), &cert).unwrap();
        std::fs::write(dir.join("k.pem"), &key).unwrap();
        let identity = Identity::from_files(&dir.join("c.pem"), &dir.join("k.pem")).unwrap();
        let der = rustls_pemfile::certs(&mut cert.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(identity.fingerprint, fingerprint(&der));
        assert_eq!(identity.fingerprint.len(), 64);
        // A key file given as the certificate is named in the error.
        let wrong = Identity::from_files(&dir.join("k.pem"), &dir.join("k.pem")).unwrap_err();
        assert!(
            wrong.to_string().contains("k.pem: no CERTIFICATE"),
            "{wrong}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
