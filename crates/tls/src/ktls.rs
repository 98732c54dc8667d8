//! kTLS: the kernel takes a session's record layer after rustls' handshake, so reads and
//! writes on the socket carry plaintext and the kernel seals and opens the records.
//!
//! The order matters: the `tls` upper-layer protocol is attached first (this fails
//! cleanly where the kernel has no TLS, and the session stays in user space), then the
//! secrets leave rustls for the kernel in both directions. The data connection is quiet
//! between the handshake and the test's start and the server sends no session tickets, so
//! no record is in flight while the kernel takes over.

use crate::stream::{TlsFacts, TlsStream};
use rustls::{ConnectionTrafficSecrets, ExtractedSecrets};
use std::net::TcpStream;
use std::os::fd::AsRawFd;

const SOL_TLS: libc::c_int = 282;
const TLS_TX: libc::c_int = 1;
const TLS_RX: libc::c_int = 2;
const TCP_ULP: libc::c_int = 31;
const TLS_1_3_VERSION: u16 = 0x0304;
const TLS_CIPHER_AES_GCM_128: u16 = 51;
const TLS_CIPHER_AES_GCM_256: u16 = 52;
const TLS_CIPHER_CHACHA20_POLY1305: u16 = 54;

/// What `/proc` says of the kernel's upper-layer protocols: `Ok` when `tls` is there,
/// or the reason it is not.
pub fn available() -> Result<(), String> {
    let path = "/proc/sys/net/ipv4/tcp_available_ulp";
    match std::fs::read_to_string(path) {
        Ok(list) if list.split_whitespace().any(|u| u == "tls") => Ok(()),
        Ok(list) => Err(format!(
            "this kernel offers no TLS upper-layer protocol (tcp_available_ulp: {}; \
             CONFIG_TLS, or `modprobe tls`)",
            list.trim()
        )),
        Err(e) => Err(format!("cannot read {path}: {e}")),
    }
}

// kTLS: TCP_ULP and SOL_TLS's TLS_TX/TLS_RX, which socket2 does not have.
#[allow(clippy::disallowed_methods)]
fn set_option(
    fd: libc::c_int,
    level: libc::c_int,
    name: libc::c_int,
    value: &[u8],
) -> std::io::Result<()> {
    // SAFETY: `value` is a live buffer of the length passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            value.as_ptr().cast(),
            value.len() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The kernel's `tls12_crypto_info_*` for one direction, byte for byte: the version and
/// cipher (native-endian u16s), then for AES-GCM the explicit IV (the last 8 bytes of
/// TLS 1.3's 12-byte IV), key, salt (its first 4) and record sequence, and for
/// ChaCha20-Poly1305 the whole IV, key and record sequence. Every field is bytes after two
/// u16s, so the C structs have no padding; the kernel checks the length per cipher.
fn crypto_info(seq: u64, secrets: &ConnectionTrafficSecrets) -> Option<Vec<u8>> {
    let rec_seq = seq.to_be_bytes();
    let (cipher, fields): (u16, [&[u8]; 4]) = match secrets {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv } => {
            let (salt, explicit) = iv.as_ref().split_at(4);
            (
                TLS_CIPHER_AES_GCM_128,
                [explicit, key.as_ref(), salt, &rec_seq],
            )
        }
        ConnectionTrafficSecrets::Aes256Gcm { key, iv } => {
            let (salt, explicit) = iv.as_ref().split_at(4);
            (
                TLS_CIPHER_AES_GCM_256,
                [explicit, key.as_ref(), salt, &rec_seq],
            )
        }
        ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (
            TLS_CIPHER_CHACHA20_POLY1305,
            [iv.as_ref(), key.as_ref(), &[], &rec_seq],
        ),
        _ => return None,
    };
    let mut info = Vec::with_capacity(64);
    info.extend_from_slice(&TLS_1_3_VERSION.to_ne_bytes());
    info.extend_from_slice(&cipher.to_ne_bytes());
    for field in fields {
        info.extend_from_slice(field);
    }
    Some(info)
}

fn install(
    fd: libc::c_int,
    direction: libc::c_int,
    seq: u64,
    secrets: &ConnectionTrafficSecrets,
) -> std::io::Result<()> {
    let info = crypto_info(seq, secrets).ok_or(std::io::ErrorKind::Unsupported)?;
    set_option(fd, SOL_TLS, direction, &info)
}

/// What became of a session offered to the kernel.
pub enum Offload {
    /// The kernel holds the records: the socket carries plaintext.
    Taken(TcpStream, TlsFacts),
    /// The kernel cannot take it (why); the session is unchanged, in user space.
    Refused(Box<TlsStream<TcpStream>>, String),
    /// It failed after the secrets left rustls, which cannot be undone.
    Failed(crate::TlsError),
}

/// Hands `stream`'s record layer to the kernel.
pub fn offload(stream: TlsStream<TcpStream>) -> Offload {
    if let Err(why) = available() {
        return Offload::Refused(Box::new(stream), why);
    }
    let fd = stream.socket().as_raw_fd();
    let ulp = *b"tls\0";
    if let Err(e) = set_option(fd, libc::IPPROTO_TCP, TCP_ULP, &ulp) {
        return Offload::Refused(
            Box::new(stream),
            format!("the kernel refused the tls upper-layer protocol: {e}"),
        );
    }
    let mut facts = stream.facts();
    let (session, socket, pending) = stream.into_parts();
    if pending > 0 {
        return Offload::Failed(crate::TlsError::Ktls(format!(
            "{pending} bytes arrived before the kernel took the session"
        )));
    }
    let ExtractedSecrets { tx, rx } = match session.dangerous_extract_secrets() {
        Ok(secrets) => secrets,
        Err(e) => {
            return Offload::Failed(crate::TlsError::Ktls(format!(
                "cannot take the secrets: {e}"
            )))
        }
    };
    for (direction, (seq, secrets)) in [(TLS_TX, tx), (TLS_RX, rx)] {
        if let Err(e) = install(fd, direction, seq, &secrets) {
            let which = if direction == TLS_TX {
                "send"
            } else {
                "receive"
            };
            return Offload::Failed(crate::TlsError::Ktls(format!(
                "the kernel refused the {which} keys: {e}"
            )));
        }
    }
    facts.ktls = true;
    Offload::Taken(socket, facts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::crypto::cipher::{AeadKey, Iv};

    /// The layouts of the kernel's `tls12_crypto_info_aes_gcm_256` and
    /// `tls12_crypto_info_chacha20_poly1305` (include/uapi/linux/tls.h): 56 bytes each.
    #[test]
    fn crypto_info_is_laid_out_as_the_kernel_reads_it() {
        let iv: [u8; 12] = std::array::from_fn(|i| 0xa0 + i as u8);
        let aes = ConnectionTrafficSecrets::Aes256Gcm {
            key: AeadKey::from([7u8; 32]),
            iv: Iv::from(iv),
        };
        let info = crypto_info(0x0102, &aes).unwrap();
        assert_eq!(info.len(), 56);
        assert_eq!(&info[..2], &0x0304u16.to_ne_bytes());
        assert_eq!(&info[2..4], &52u16.to_ne_bytes());
        assert_eq!(&info[4..12], &iv[4..], "explicit IV: the last 8 bytes");
        assert_eq!(&info[12..44], &[7u8; 32]);
        assert_eq!(&info[44..48], &iv[..4], "salt: the first 4 bytes");
        assert_eq!(&info[48..], &0x0102u64.to_be_bytes());

        let chacha = ConnectionTrafficSecrets::Chacha20Poly1305 {
            key: AeadKey::from([9u8; 32]),
            iv: Iv::from(iv),
        };
        let info = crypto_info(5, &chacha).unwrap();
        assert_eq!(info.len(), 56);
        assert_eq!(&info[2..4], &54u16.to_ne_bytes());
        assert_eq!(&info[4..16], &iv);
        assert_eq!(&info[16..48], &[9u8; 32]);
        assert_eq!(&info[48..], &5u64.to_be_bytes());
    }
}
