//! Address validation for UDP hellos at a profile rendezvous (docs/protocol.md 7).
//!
//! A UDP hello's source address is only a claim: a forged one would turn the answering
//! socket, and every datagram a mirror then sends, on a host that never asked. So a hello
//! is answered first with a cookie only, no larger than the hello itself, sent to the
//! claimed address; the flow's socket is opened only for a second hello that carries that
//! cookie back, which proves the sender receives at the address it named (the scheme of
//! QUIC's Retry and DTLS's HelloVerifyRequest, RFC 9000 8.1).
//!
//! The cookie is a keyed BLAKE3 hash of the address and the flow under a key of the
//! rendezvous's own, so the rendezvous keeps no state per hello it has not validated.

use crate::preface::{self, Preface, Token, DATA_PREFACE_LEN};
use std::net::SocketAddr;

/// A challenge's first eight bytes.
pub const CHALLENGE_MAGIC: [u8; 8] = *b"LINECOOK";
/// Bytes in a cookie.
pub const COOKIE_LEN: usize = 16;
/// Bytes in a challenge: magic, flow, cookie. The same as a hello, so an answer to a
/// forged hello is never larger than what the forger sent (RFC 9000's limit is three
/// times).
pub const CHALLENGE_LEN: usize = 8 + 4 + COOKIE_LEN;
/// Bytes in a hello that carries its cookie back.
pub const VALIDATED_HELLO_LEN: usize = DATA_PREFACE_LEN + COOKIE_LEN;

/// Makes and checks the cookies of one rendezvous.
pub struct AddressCookies {
    key: [u8; 32],
}

/// What a datagram at a rendezvous is.
#[derive(Debug, PartialEq, Eq)]
pub enum RendezvousHello {
    /// A hello without its cookie: answer with [`AddressCookies::challenge`] only.
    Unproven { flow: u32 },
    /// A hello whose cookie proves its source address: open the flow.
    Proven { flow: u32 },
    /// Anything else, a hello with a wrong token or cookie among it: drop it.
    Foreign,
}

impl AddressCookies {
    /// `key` must be secret and fresh for each rendezvous.
    pub fn new(key: [u8; 32]) -> AddressCookies {
        AddressCookies { key }
    }

    /// The cookie for `flow` from `from`.
    pub fn cookie(&self, from: SocketAddr, flow: u32) -> [u8; COOKIE_LEN] {
        let mut hasher = blake3::Hasher::new_keyed(&self.key);
        match from {
            SocketAddr::V4(v4) => hasher.update(&v4.ip().octets()),
            SocketAddr::V6(v6) => hasher.update(&v6.ip().octets()),
        };
        hasher.update(&from.port().to_be_bytes());
        hasher.update(&flow.to_be_bytes());
        let mut out = [0u8; COOKIE_LEN];
        out.copy_from_slice(&hasher.finalize().as_bytes()[..COOKIE_LEN]);
        out
    }

    /// The answer to an unproven hello from `from`.
    pub fn challenge(&self, from: SocketAddr, flow: u32) -> [u8; CHALLENGE_LEN] {
        let mut out = [0u8; CHALLENGE_LEN];
        out[..8].copy_from_slice(&CHALLENGE_MAGIC);
        out[8..12].copy_from_slice(&flow.to_be_bytes());
        out[12..].copy_from_slice(&self.cookie(from, flow));
        out
    }

    /// Classifies a datagram from `from` against the rendezvous's `token`.
    pub fn classify(&self, token: &Token, from: SocketAddr, datagram: &[u8]) -> RendezvousHello {
        if datagram.len() != DATA_PREFACE_LEN && datagram.len() != VALIDATED_HELLO_LEN {
            return RendezvousHello::Foreign;
        }
        let Preface::Data { token: said, flow } = preface::classify(&datagram[..DATA_PREFACE_LEN])
        else {
            return RendezvousHello::Foreign;
        };
        if said != *token {
            return RendezvousHello::Foreign;
        }
        if datagram.len() == DATA_PREFACE_LEN {
            return RendezvousHello::Unproven { flow };
        }
        if self.verify(from, flow, &datagram[DATA_PREFACE_LEN..]) {
            RendezvousHello::Proven { flow }
        } else {
            RendezvousHello::Foreign
        }
    }

    /// Whether `cookie` is the one sent to `from` for `flow`; compared in constant time,
    /// since the cookie is a MAC.
    pub fn verify(&self, from: SocketAddr, flow: u32, cookie: &[u8]) -> bool {
        let expected = self.cookie(from, flow);
        cookie.len() == COOKIE_LEN
            && expected
                .iter()
                .zip(cookie)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

/// The cookie in a challenge for `flow`, if `datagram` is one.
pub fn parse_challenge(datagram: &[u8], flow: u32) -> Option<[u8; COOKIE_LEN]> {
    if datagram.len() != CHALLENGE_LEN || datagram[..8] != CHALLENGE_MAGIC {
        return None;
    }
    if datagram[8..12] != flow.to_be_bytes() {
        return None;
    }
    let mut cookie = [0u8; COOKIE_LEN];
    cookie.copy_from_slice(&datagram[12..]);
    Some(cookie)
}

/// A hello that carries `cookie` back.
pub fn validated_hello(
    hello: &[u8; DATA_PREFACE_LEN],
    cookie: &[u8; COOKIE_LEN],
) -> [u8; VALIDATED_HELLO_LEN] {
    let mut out = [0u8; VALIDATED_HELLO_LEN];
    out[..DATA_PREFACE_LEN].copy_from_slice(hello);
    out[DATA_PREFACE_LEN..].copy_from_slice(cookie);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preface::data_preface;
    use proptest::prelude::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn only_the_cookie_sent_to_an_address_opens_its_flow() {
        let cookies = AddressCookies::new([7; 32]);
        let token = Token([3; 16]);
        let hello = data_preface(token, 9);
        let client = addr("192.0.2.1:4000");
        assert_eq!(
            cookies.classify(&token, client, &hello),
            RendezvousHello::Unproven { flow: 9 }
        );
        let challenge = cookies.challenge(client, 9);
        assert_eq!(challenge.len(), hello.len(), "no amplification");
        let cookie = parse_challenge(&challenge, 9).expect("a challenge");
        assert_eq!(parse_challenge(&challenge, 8), None);
        let proven = validated_hello(&hello, &cookie);
        assert_eq!(
            cookies.classify(&token, client, &proven),
            RendezvousHello::Proven { flow: 9 }
        );
        // The same cookie from another address or port, for another flow, under another
        // rendezvous's key or token: refused.
        for other in ["192.0.2.2:4000", "192.0.2.1:4001"] {
            assert_eq!(
                cookies.classify(&token, addr(other), &proven),
                RendezvousHello::Foreign
            );
        }
        let other_flow = validated_hello(&data_preface(token, 10), &cookie);
        assert_eq!(
            cookies.classify(&token, client, &other_flow),
            RendezvousHello::Foreign
        );
        assert_eq!(
            AddressCookies::new([8; 32]).classify(&token, client, &proven),
            RendezvousHello::Foreign
        );
        assert_eq!(
            cookies.classify(&Token([4; 16]), client, &proven),
            RendezvousHello::Foreign
        );
    }

    proptest! {
        #[test]
        fn no_datagram_of_other_sizes_or_bytes_is_taken(
            bytes in proptest::collection::vec(any::<u8>(), 0..80),
        ) {
            let cookies = AddressCookies::new([1; 32]);
            let verdict = cookies.classify(&Token([2; 16]), addr("[2001:db8::1]:9"), &bytes);
            prop_assert_eq!(verdict, RendezvousHello::Foreign);
        }

        #[test]
        fn a_guessed_cookie_is_refused(cookie in any::<[u8; 16]>(), flow in any::<u32>()) {
            let cookies = AddressCookies::new([5; 32]);
            let token = Token([6; 16]);
            let from = addr("198.51.100.4:53");
            let guess = validated_hello(&data_preface(token, flow), &cookie);
            let expected = parse_challenge(&cookies.challenge(from, flow), flow).unwrap();
            let verdict = cookies.classify(&token, from, &guess);
            prop_assert_eq!(
                verdict == (RendezvousHello::Proven { flow }),
                cookie == expected
            );
        }
    }
}
