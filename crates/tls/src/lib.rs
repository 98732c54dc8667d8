//! Encrypted data connections for linerate's streams and request/response tests.
//!
//! A test that asks for `--tls` runs every data connection through TLS 1.3 after its
//! plaintext preface: the server answers with a certificate it made at start (or the one
//! given with `--cert`/`--cert-key`), the client checks it against the SHA-256
//! fingerprint the server announced on the control connection (or against `--ca` and the
//! server's name), and the data plane then moves application bytes through a
//! [`stream::TlsStream`], which times the calls that encrypt and decrypt so a report can
//! say what the crypto cost. `--ktls` hands the record layer to the kernel ([`ktls`]).
//!
//! rustls with its `ring` provider: no C toolchain beyond what `ring` builds, TLS 1.3
//! only, and secret extraction for kTLS.

pub mod cost;
mod handshake;
pub mod identity;
pub mod ktls;
pub mod session;
pub mod stream;
pub mod suite;
pub mod verify;

pub use identity::Identity;
pub use stream::{TlsFacts, TlsStream};
pub use suite::Cipher;

use std::sync::Arc;

/// The ALPN protocol both ends name, so a linerate TLS peer is told from any other.
pub const ALPN: &[u8] = b"linerate";

/// Why a TLS connection or configuration could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The handshake failed; the text says why in the user's terms.
    #[error("TLS handshake failed: {0}")]
    Handshake(String),
    /// A certificate or key file could not be used.
    #[error("{0}")]
    Identity(String),
    /// The kernel could not take the record layer.
    #[error("kTLS: {0}")]
    Ktls(String),
}

fn provider(ciphers: &[Cipher]) -> rustls::crypto::CryptoProvider {
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites = ciphers.iter().map(|c| c.rustls_suite()).collect();
    provider
}

/// The server's configuration: TLS 1.3 with every cipher linerate offers (the client
/// picks), no session tickets (nothing arrives after the handshake but data, which kTLS
/// needs), and secrets extractable for kTLS.
pub fn server_config(identity: &Identity) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(provider(&Cipher::ALL)))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TlsError::Identity(format!("TLS configuration: {e}")))?
        .with_no_client_auth()
        .with_single_cert(identity.chain.clone(), identity.key.clone_key())
        .map_err(|e| {
            TlsError::Identity(format!("the certificate and key do not go together: {e}"))
        })?;
    config.send_tls13_tickets = 0;
    config.enable_secret_extraction = true;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(Arc::new(config))
}

/// The client's configuration: TLS 1.3 with the one cipher asked for, trusting what
/// `trust` says, secrets extractable for kTLS.
pub fn client_config(
    cipher: Cipher,
    trust: &verify::Trust,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    configure_client(&[cipher], trust)
}

/// The client's configuration for QUIC: the cipher asked for first (the server follows
/// the client's order), and AES-128-GCM after it, which QUIC's Initial packets use.
pub fn quic_client_config(
    cipher: Cipher,
    trust: &verify::Trust,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut ciphers = vec![cipher];
    if cipher != Cipher::Aes128Gcm {
        ciphers.push(Cipher::Aes128Gcm);
    }
    configure_client(&ciphers, trust)
}

fn configure_client(
    ciphers: &[Cipher],
    trust: &verify::Trust,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let provider = Arc::new(provider(ciphers));
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TlsError::Identity(format!("TLS configuration: {e}")))?;
    let mut config = match trust {
        verify::Trust::Pinned(fingerprint) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verify::PinnedCertificate::new(
                fingerprint.clone(),
                provider,
            )))
            .with_no_client_auth(),
        verify::Trust::Roots(roots) => builder
            .with_root_certificates(roots.clone())
            .with_no_client_auth(),
    };
    config.enable_secret_extraction = true;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(Arc::new(config))
}
