//! How a client decides to trust the server's certificate, and what a failed
//! handshake means in the user's terms.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error, SignatureScheme};
use std::path::Path;
use std::sync::Arc;

/// What the client trusts.
#[derive(Debug, Clone)]
pub enum Trust {
    /// Exactly the certificate with this SHA-256 fingerprint: the one the server announced
    /// on the control connection (the default; it proves the data connections reach the
    /// server the control connection reached, which `--key` authenticates).
    Pinned(String),
    /// Certificates that chain to these roots and name the server (`--ca FILE`).
    Roots(Arc<rustls::RootCertStore>),
}

impl Trust {
    /// The roots in a PEM file (`--ca`).
    pub fn from_ca_file(path: &Path) -> Result<Trust, crate::TlsError> {
        let pem = std::fs::read(path).map_err(|e| {
            crate::TlsError::Identity(format!("cannot read {}: {e}", path.display()))
        })?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
            let cert = cert.map_err(|e| {
                crate::TlsError::Identity(format!("{}: not a PEM certificate: {e}", path.display()))
            })?;
            roots.add(cert).map_err(|e| {
                crate::TlsError::Identity(format!("{}: cannot use as a CA: {e}", path.display()))
            })?;
        }
        if roots.is_empty() {
            return Err(crate::TlsError::Identity(format!(
                "{}: no CERTIFICATE block in it",
                path.display()
            )));
        }
        Ok(Trust::Roots(Arc::new(roots)))
    }
}

/// Trusts one certificate by fingerprint, and checks the handshake's signature with it.
#[derive(Debug)]
pub struct PinnedCertificate {
    fingerprint: String,
    provider: Arc<CryptoProvider>,
}

impl PinnedCertificate {
    pub fn new(fingerprint: String, provider: Arc<CryptoProvider>) -> PinnedCertificate {
        PinnedCertificate {
            fingerprint,
            provider,
        }
    }
}

impl ServerCertVerifier for PinnedCertificate {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let presented = crate::identity::fingerprint(end_entity);
        if presented == self.fingerprint {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(Error::General(format!(
                "the data connection's certificate (SHA-256 {}) is not the one the server \
                 announced ({}): something between the hosts answered in its place",
                &presented[..16],
                &self.fingerprint[..self.fingerprint.len().min(16)]
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        // Both configurations allow TLS 1.3 only.
        Err(Error::PeerIncompatible(
            rustls::PeerIncompatible::Tls12NotOffered,
        ))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Takes any certificate and checks only the handshake's signatures with it (TLS 1.2 and
/// 1.3): for a lab's self-signed server (`rpm --insecure`, as curl and mach call it) and
/// libpq's `sslmode=prefer` and `require`, which encrypt without checking whom to.
#[derive(Debug)]
pub struct AnyCertificate(pub Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A handshake error in the user's terms: what went wrong and what to do about it.
pub fn describe(error: &Error) -> String {
    match error {
        Error::InvalidCertificate(certificate) => match certificate {
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                format!("the server's certificate has expired ({certificate:?})")
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                format!("the server's certificate is not valid yet ({certificate:?})")
            }
            CertificateError::NotValidForName => {
                "the server's certificate does not name the host we connected to".into()
            }
            CertificateError::NotValidForNameContext {
                expected,
                presented,
            } => format!(
                "the server's certificate is for {} and not for {}",
                presented
                    .iter()
                    .map(|name| bare_name(name))
                    .collect::<Vec<_>>()
                    .join(", "),
                expected.to_str()
            ),
            CertificateError::UnknownIssuer => {
                "the server's certificate is not signed by a CA in --ca".into()
            }
            other => format!("the server's certificate was refused: {other:?}"),
        },
        Error::InvalidMessage(_) => {
            "the peer sent something that is not TLS (a plain TCP peer where TLS was expected?)"
                .into()
        }
        Error::AlertReceived(alert) => format!("the peer refused the handshake ({alert:?})"),
        Error::PeerIncompatible(why) => {
            format!(
                "the peer has no TLS 1.3 cipher suite or key exchange in common with us ({why:?})"
            )
        }
        Error::NoApplicationProtocol => {
            "the peer is a TLS server but not a linerate data connection (no common ALPN)".into()
        }
        Error::General(text) => text.clone(),
        other => other.to_string(),
    }
}

/// A presented name as rustls spells it (`DnsName("a.example")`), without the wrapping.
fn bare_name(name: &str) -> &str {
    match (name.find("(\""), name.rfind("\")")) {
        (Some(open), Some(close)) if open + 2 <= close => &name[open + 2..close],
        _ => name,
    }
}
