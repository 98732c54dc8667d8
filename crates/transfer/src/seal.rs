//! `--encrypt`: each data datagram's payload sealed with ChaCha20-Poly1305 (ring's, whose
//! assembly seals and opens several times as fast as the portable RustCrypto crate the
//! first versions used; the bytes on the wire are the same). The key is derived from the session's datagram key, itself bound to
//! the shared key and both ends' nonces, so every session encrypts under its own key. The
//! nonce is the file's index in the session and the packet number (retransmissions get new
//! packet numbers, so no nonce repeats under one key). The header's fields (file, session,
//! packet number, offset) are the associated data: a payload moved to another offset does
//! not open.

use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, CHACHA20_POLY1305};

/// Bytes the seal adds to a payload.
pub const SEAL_TAG: usize = 16;

const CONTEXT: &str = "linerate copy 2026-11 payload encryption";

pub struct Sealer(LessSafeKey);

/// The payload could not be opened: damaged or forged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unopened;

/// The file's index and the packet number: unique under a session's key, as ring's
/// `assume_unique_for_key` asks.
fn nonce(file: u32, pn: u64) -> Nonce {
    let mut bytes = [0u8; 12];
    bytes[..4].copy_from_slice(&file.to_be_bytes());
    bytes[4..].copy_from_slice(&pn.to_be_bytes());
    Nonce::assume_unique_for_key(bytes)
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
        let key = UnboundKey::new(&CHACHA20_POLY1305, &key).expect("a 32-byte key");
        Sealer(LessSafeKey::new(key))
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
            .seal_in_place_separate_tag(
                nonce(file, pn),
                Aad::from(associated(file, session, pn, offset)),
                out,
            )
            .expect("a payload is far below ChaCha20's limit");
        out.extend_from_slice(tag.as_ref());
    }

    /// Opens a sealed payload where it lies (a receiving lane's batch): the plaintext
    /// is then the first of `sealed`'s bytes; returns its length.
    pub fn open_in_place(
        &self,
        file: u32,
        session: u64,
        pn: u64,
        offset: u64,
        sealed: &mut [u8],
    ) -> Result<usize, Unopened> {
        let Some(len) = sealed.len().checked_sub(SEAL_TAG) else {
            return Err(Unopened);
        };
        let (cipher, tag) = sealed.split_at_mut(len);
        self.open_cipher(file, session, pn, offset, tag, cipher)?;
        Ok(len)
    }

    /// Opens `cipher` in place against its `tag`.
    fn open_cipher(
        &self,
        file: u32,
        session: u64,
        pn: u64,
        offset: u64,
        tag: &[u8],
        cipher: &mut [u8],
    ) -> Result<(), Unopened> {
        let tag = Tag::try_from(tag).map_err(|_| Unopened)?;
        self.0
            .open_in_place_separate_tag(
                nonce(file, pn),
                Aad::from(associated(file, session, pn, offset)),
                tag,
                cipher,
                0..,
            )
            .map(|_| ())
            .map_err(|_| Unopened)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Opens `sealed` (left as it is) into `plain`, which must be as long as the
    /// plaintext.
    fn open_into(
        sealer: &Sealer,
        (file, session, pn, offset): (u32, u64, u64, u64),
        sealed: &[u8],
        plain: &mut [u8],
    ) -> Result<(), Unopened> {
        let mut opened = sealed.to_vec();
        let len = sealer.open_in_place(file, session, pn, offset, &mut opened)?;
        if len != plain.len() {
            return Err(Unopened);
        }
        plain.copy_from_slice(&opened[..len]);
        Ok(())
    }

    #[test]
    fn a_sealed_payload_opens_only_where_it_was_sealed() {
        let sealer = Sealer::new(&[3; 32]);
        let mut sealed = Vec::new();
        sealer.seal(1, 9, 42, 4096, b"the file's bytes", &mut sealed);
        assert_eq!(sealed.len(), 16 + SEAL_TAG);
        assert_ne!(&sealed[..16], b"the file's bytes");
        let mut plain = [0u8; 16];
        assert_eq!(
            open_into(&sealer, (1, 9, 42, 4096), &sealed, &mut plain),
            Ok(())
        );
        assert_eq!(&plain, b"the file's bytes");
        // Another offset, packet number, file or key: it does not open.
        assert!(open_into(&sealer, (1, 9, 42, 8192), &sealed, &mut plain).is_err());
        assert!(open_into(&sealer, (1, 9, 43, 4096), &sealed, &mut plain).is_err());
        assert!(open_into(&sealer, (2, 9, 42, 4096), &sealed, &mut plain).is_err());
        assert!(open_into(
            &Sealer::new(&[4; 32]),
            (1, 9, 42, 4096),
            &sealed,
            &mut plain
        )
        .is_err());
        // A flipped bit anywhere.
        sealed[3] ^= 1;
        assert!(open_into(&sealer, (1, 9, 42, 4096), &sealed, &mut plain).is_err());
    }

    #[test]
    fn a_payload_opened_in_place_is_the_plaintext_and_a_forgery_is_refused() {
        let sealer = Sealer::new(&[5; 32]);
        let mut sealed = Vec::new();
        sealer.seal(2, 7, 11, 1408, b"bytes of a lane", &mut sealed);
        let mut copy = sealed.clone();
        assert_eq!(sealer.open_in_place(2, 7, 11, 1408, &mut copy), Ok(15));
        assert_eq!(&copy[..15], b"bytes of a lane");
        let mut moved = sealed.clone();
        assert!(sealer.open_in_place(2, 7, 11, 2816, &mut moved).is_err());
        let mut flipped = sealed.clone();
        flipped[15] ^= 0x80;
        assert!(sealer.open_in_place(2, 7, 11, 1408, &mut flipped).is_err());
        assert!(sealer
            .open_in_place(2, 7, 11, 1408, &mut sealed[..SEAL_TAG - 1])
            .is_err());
    }

    /// The bytes on the wire are those the first versions sealed (RustCrypto's
    /// `chacha20poly1305`, this vector taken from it): copies between versions open.
    #[test]
    fn sealed_bytes_match_the_earlier_versions() {
        let sealer = Sealer::new(&[7; 32]);
        let mut sealed = Vec::new();
        let plain = b"a block of the file, sealed";
        sealer.seal(3, 0x0102_0304_0506_0708, 99, 1408 * 5, plain, &mut sealed);
        let hex: String = sealed.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "6b047cdb914e5e7f02f82a78e2943da72067c0f34992e723d8930b0c89a1029872458b8d367ba625e63e5e"
        );
        let mut opened = [0u8; 27];
        open_into(
            &sealer,
            (3, 0x0102_0304_0506_0708, 99, 1408 * 5),
            &sealed,
            &mut opened,
        )
        .unwrap();
        assert_eq!(&opened, plain);
    }
}
