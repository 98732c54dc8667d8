//! The client's TLS: HTTP/2 by ALPN, the certificate checked as the user said (a CA, a
//! pinned fingerprint), or not at all for a lab's self-signed one (`--insecure`, as curl
//! and mach call it), the handshake's signatures still verified.

use linerate_tls::verify::Trust;
use std::sync::Arc;

pub use rustls::ClientConfig;

/// A configuration that checks the certificate as `trust` says.
pub fn checked(trust: &Trust) -> Result<Arc<ClientConfig>, String> {
    let config = linerate_tls::client_config(linerate_tls::Cipher::default(), trust)
        .map_err(|e| e.to_string())?;
    let mut config = (*config).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// A configuration that takes any certificate.
pub fn any_certificate() -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(linerate_tls::verify::AnyCertificate(provider)))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}
