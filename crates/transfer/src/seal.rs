//! `--encrypt`: each data datagram's payload sealed with ChaCha20-Poly1305 (RustCrypto's
//! `chacha20poly1305`). The key is derived from the session's datagram key, itself bound to
//! the shared key and both ends' nonces, so every session encrypts under its own key. The
//! nonce is the file's index in the session and the packet number (retransmissions get new
//! packet numbers, so no nonce repeats under one key). The header's fields (file, session,
//! packet number, offset) are the associated data: a payload moved to another offset does
//! not open.

use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Nonce, Tag};

/// Bytes the seal adds to a payload.
pub const SEAL_TAG: usize = 16;

const CONTEXT: &str = "linerate copy 2026-11 payload encryption";

pub struct Sealer(ChaCha20Poly1305);

/// The payload could not be opened: damaged or forged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unopened;

fn nonce(file: u32, pn: u64) -> Nonce {
    let mut bytes = [0u8; 12];
    bytes[..4].copy_from_slice(&file.to_be_bytes());
    bytes[4..].copy_from_slice(&pn.to_be_bytes());
    Nonce::from(bytes)
}

fn associated(file: u32, session: u64, pn: u64, offset: u64) -> [u8; 28] {
    let mut out = [0u8; 28];
    out[..4].copy_from_slice(&file.to_be_bytes());
    out[4..12].copy_from_slice(&session.to_be_bytes());
    out[12..20].copy_from_slice(&pn.to_be_bytes());
    out[20..].copy_from_slice(&offset.to_be_bytes());
    out
}

impl Sealer {
    pub fn new(datagram_key: &[u8; 32]) -> Sealer {
        let key = blake3::derive_key(CONTEXT, datagram_key);
        Sealer(ChaCha20Poly1305::new(&key.into()))
    }

    /// Seals `plain` into `out` (cleared first): the ciphertext, then the 16-byte tag.
    pub fn seal(
        &self,
        file: u32,
        session: u64,
        pn: u64,
        offset: u64,
        plain: &[u8],
        out: &mut Vec<u8>,
    ) {
        out.clear();
        out.extend_from_slice(plain);
        let tag = self
            .0
            .encrypt_in_place_detached(
                &nonce(file, pn),
                &associated(file, session, pn, offset),
                out,
            )
            .expect("a payload is far below ChaCha20's limit");
        out.extend_from_slice(&tag);
    }

    /// Opens a sealed payload: `sealed` is the ciphertext and tag as received; the
    /// plaintext is written to `plain` (as long as the ciphertext).
    pub fn open_into(
        &self,
        file: u32,
        session: u64,
        pn: u64,
        offset: u64,
        sealed: &[u8],
        plain: &mut [u8],
    ) -> Result<(), Unopened> {
        if sealed.len() < SEAL_TAG || plain.len() != sealed.len() - SEAL_TAG {
            return Err(Unopened);
        }
        let (cipher, tag) = sealed.split_at(sealed.len() - SEAL_TAG);
        plain.copy_from_slice(cipher);
        self.0
            .decrypt_in_place_detached(
                &nonce(file, pn),
                &associated(file, session, pn, offset),
                plain,
                Tag::from_slice(tag),
            )
            .map_err(|_| Unopened)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_payload_opens_only_where_it_was_sealed() {
        let sealer = Sealer::new(&[3; 32]);
        let mut sealed = Vec::new();
        sealer.seal(1, 9, 42, 4096, b"the file's bytes", &mut sealed);
        assert_eq!(sealed.len(), 16 + SEAL_TAG);
        assert_ne!(&sealed[..16], b"the file's bytes");
        let mut plain = [0u8; 16];
        assert_eq!(
            sealer.open_into(1, 9, 42, 4096, &sealed, &mut plain),
            Ok(())
        );
        assert_eq!(&plain, b"the file's bytes");
        // Another offset, packet number, file or key: it does not open.
        assert!(sealer
            .open_into(1, 9, 42, 8192, &sealed, &mut plain)
            .is_err());
        assert!(sealer
            .open_into(1, 9, 43, 4096, &sealed, &mut plain)
            .is_err());
        assert!(sealer
            .open_into(2, 9, 42, 4096, &sealed, &mut plain)
            .is_err());
        assert!(Sealer::new(&[4; 32])
            .open_into(1, 9, 42, 4096, &sealed, &mut plain)
            .is_err());
        // A flipped bit anywhere.
        sealed[3] ^= 1;
        assert!(sealer
            .open_into(1, 9, 42, 4096, &sealed, &mut plain)
            .is_err());
    }
}
