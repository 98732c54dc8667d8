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

#[repr(C)]
struct AesGcm128 {
    version: u16,
    cipher: u16,
    iv: [u8; 8],
    key: [u8; 16],
    salt: [u8; 4],
    rec_seq: [u8; 8],
}

#[repr(C)]
struct AesGcm256 {
    version: u16,
    cipher: u16,
    iv: [u8; 8],
    key: [u8; 32],
    salt: [u8; 4],
    rec_seq: [u8; 8],
}

#[repr(C)]
struct Chacha20Poly1305 {
    version: u16,
    cipher: u16,
    iv: [u8; 12],
    key: [u8; 32],
    rec_seq: [u8; 8],
}

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

fn set_option<T>(
    fd: libc::c_int,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> std::io::Result<()> {
    // SAFETY: `value` is a live, initialised value of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn install(
    fd: libc::c_int,
    direction: libc::c_int,
    seq: u64,
    secrets: &ConnectionTrafficSecrets,
) -> std::io::Result<()> {
    let rec_seq = seq.to_be_bytes();
    match secrets {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv } => {
            let (salt, explicit) = iv.as_ref().split_at(4);
            let info = AesGcm128 {
                version: TLS_1_3_VERSION,
                cipher: TLS_CIPHER_AES_GCM_128,
                iv: explicit
                    .try_into()
                    .map_err(|_| std::io::ErrorKind::InvalidInput)?,
                key: key
                    .as_ref()
                    .try_into()
                    .map_err(|_| std::io::ErrorKind::InvalidInput)?,
                salt: salt
                    .try_into()
                    .map_err(|_| std::io::ErrorKind::InvalidInput)?,
                rec_seq,
            };
            set_option(fd, SOL_TLS, direction, &info)
        }
        ConnectionTrafficSecrets::Aes256Gcm { key, iv } => {
            let (salt, explicit) = iv.as_ref().split_at(4);
            let info = AesGcm256 {
                version: TLS_1_3_VERSION,
                cipher: TLS_CIPHER_AES_GCM_256,
                iv: explicit
                    .try_into()
                    .map_err(|_| std::io::ErrorKind::InvalidInput)?,
                key: key
                    .as_ref()
                    .try_into()
                    .map_err(|_| std::io::ErrorKind::InvalidInput)?,
                salt: salt
                    .try_into()
                    .map_err(|_| std::io::ErrorKind::InvalidInput)?,
                rec_seq,
            };
            set_option(fd, SOL_TLS, direction, &info)
        }
        ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
            let info = Chacha20Poly1305 {
                version: TLS_1_3_VERSION,
                cipher: TLS_CIPHER_CHACHA20_POLY1305,
                iv: iv
                    .as_ref()
                    .try_into()
                    .map_err(|_| std::io::ErrorKind::InvalidInput)?,
                key: key
                    .as_ref()
                    .try_into()
                    .map_err(|_| std::io::ErrorKind::InvalidInput)?,
                rec_seq,
            };
            set_option(fd, SOL_TLS, direction, &info)
        }
        _ => Err(std::io::ErrorKind::Unsupported.into()),
    }
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
    let (conn, socket, pending) = stream.into_parts();
    if !pending.is_empty() {
        return Offload::Failed(crate::TlsError::Ktls(format!(
            "{} bytes arrived before the kernel took the session",
            pending.len()
        )));
    }
    let ExtractedSecrets { tx, rx } = match conn.dangerous_extract_secrets() {
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
