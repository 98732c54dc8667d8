//! Mutual challenge-response over a shared key (docs/security.md), for native control
//! connections and agent connections alike. The key never crosses the wire.
//!
//! ```text
//! client                                   server
//! hello {nonce: Nc}                 ->
//!                                   <-     welcome {auth: {nonce: Ns, proof: Ps}}
//! [checks Ps = MAC(K, "server" Nc Ns)]
//! auth {proof: Pc}                  ->
//!                                          [checks Pc = MAC(K, "client" Nc Ns)]
//! ```
//!
//! Both nonces are 32 random bytes drawn by the drivers (this crate reads no randomness);
//! the server's is fresh per connection, so a recorded client proof is worthless on any
//! other connection, and the role label in each MAC keeps one side's proof from serving as
//! the other's (reflection). The MAC is BLAKE3 in keyed mode under a key derived from the
//! key file's contents. The exchange authenticates the ends, not the bytes that follow: an
//! on-path attacker who can rewrite a live connection is outside this threat model.

use std::fmt;

/// Bytes in a nonce.
pub const NONCE_LEN: usize = 32;
/// The shortest key file content accepted (after trimming surrounding white space).
pub const MIN_KEY_LEN: usize = 16;
/// The longest key file read.
pub const MAX_KEY_FILE: usize = 64 * 1024;

const KEY_CONTEXT: &str = "linerate 2026-11 shared key for control and agent connections";

/// A shared key, derived from a key file's contents.
#[derive(Clone, PartialEq, Eq)]
pub struct Key([u8; 32]);

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print key material, not even in debug output.
        f.write_str("Key(..)")
    }
}

/// Why a key file's contents cannot be a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the key is {0} bytes; at least {MIN_KEY_LEN} are needed (e.g. head -c 32 /dev/urandom | base64 > FILE)")]
    TooShort(usize),
    #[error("the key file is over {MAX_KEY_FILE} bytes")]
    TooLong,
}

impl Key {
    /// A key from a key file's bytes: surrounding white space (a trailing newline) is not
    /// part of it.
    pub fn from_file_contents(contents: &[u8]) -> Result<Key, KeyError> {
        if contents.len() > MAX_KEY_FILE {
            return Err(KeyError::TooLong);
        }
        let trimmed = contents.trim_ascii();
        if trimmed.len() < MIN_KEY_LEN {
            return Err(KeyError::TooShort(trimmed.len()));
        }
        Ok(Key(blake3::derive_key(KEY_CONTEXT, trimmed)))
    }

    fn mac(&self, role: Role, client: &Nonce, server: &Nonce) -> blake3::Hash {
        let mut hasher = blake3::Hasher::new_keyed(&self.0);
        hasher.update(role.label());
        hasher.update(&client.0);
        hasher.update(&server.0);
        hasher.finalize()
    }

    /// A key for one connection's further use (`context` names the use), bound to both
    /// nonces: both ends derive the same one, and no other connection can.
    pub fn derive(&self, context: &str, client: &Nonce, server: &Nonce) -> [u8; 32] {
        let mut hasher = blake3::Hasher::new_derive_key(context);
        hasher.update(&self.0);
        hasher.update(&client.0);
        hasher.update(&server.0);
        *hasher.finalize().as_bytes()
    }

    /// The proof `role` sends for this pair of nonces, as hex.
    pub fn proof(&self, role: Role, client: &Nonce, server: &Nonce) -> String {
        self.mac(role, client, server).to_hex().to_string()
    }

    /// Whether `proof` (hex, from the peer) is `role`'s proof for these nonces; compared
    /// in constant time.
    pub fn verify(&self, role: Role, client: &Nonce, server: &Nonce, proof: &str) -> bool {
        match blake3::Hash::from_hex(proof) {
            // blake3::Hash's equality is constant-time.
            Ok(theirs) => theirs == self.mac(role, client, server),
            Err(_) => false,
        }
    }
}

/// Which end a proof comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

impl Role {
    fn label(self) -> &'static [u8] {
        match self {
            Role::Client => b"linerate client proof\0",
            Role::Server => b"linerate server proof\0",
        }
    }
}

/// A nonce: random bytes from the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nonce(pub [u8; NONCE_LEN]);

impl Nonce {
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses exactly 64 hex digits; anything else is `None`.
    pub fn from_hex(text: &str) -> Option<Nonce> {
        if text.len() != NONCE_LEN * 2 || !text.is_ascii() {
            return None;
        }
        let mut out = [0u8; NONCE_LEN];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Nonce(out))
    }
}

/// What a server sends in its welcome when it holds a key.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Challenge {
    /// The server's nonce, hex.
    pub nonce: String,
    /// The server's proof over the client's nonce and its own, hex.
    pub proof: String,
}

impl Challenge {
    /// The server's challenge for a client that sent `client` as its nonce.
    pub fn new(key: &Key, client: &Nonce, server: &Nonce) -> Challenge {
        Challenge {
            nonce: server.to_hex(),
            proof: key.proof(Role::Server, client, server),
        }
    }

    /// The client's answer to this challenge: its own proof, or why the server is not
    /// to be trusted.
    pub fn answer(&self, key: &Key, client: &Nonce) -> Result<String, AuthError> {
        let server = Nonce::from_hex(&self.nonce).ok_or(AuthError::Malformed)?;
        if !key.verify(Role::Server, client, &server, &self.proof) {
            return Err(AuthError::ServerUnproven);
        }
        Ok(key.proof(Role::Client, client, &server))
    }
}

/// Why an authentication failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("the server requires a key (--key FILE or LINERATE_KEY)")]
    KeyRequired,
    #[error("the key does not match the server's")]
    WrongKey,
    #[error("the server does not hold this key: it could not prove it is the server meant")]
    ServerUnproven,
    #[error("the server was started without --key: it cannot prove it holds this key")]
    ServerKeyless,
    #[error("malformed authentication message")]
    Malformed,
    /// The peer hung up instead of proving the key: a client holding another key finds
    /// the server's proof wrong and goes no further.
    #[error("closed without proving the key (it holds another key, or none)")]
    Abandoned,
}

/// The server's half, for drivers that run the exchange outside a session (agent
/// connections): fed the client's nonce, it answers with the challenge; fed the client's
/// proof, it says whether to go on.
#[derive(Debug, Clone)]
pub struct ServerAuth {
    key: Key,
    server: Nonce,
    client: Option<Nonce>,
}

impl ServerAuth {
    pub fn new(key: Key, server: Nonce) -> ServerAuth {
        ServerAuth {
            key,
            server,
            client: None,
        }
    }

    /// The client's hello carried `nonce` (hex, or nothing from a keyless client).
    pub fn handle_hello(&mut self, nonce: Option<&str>) -> Result<Challenge, AuthError> {
        let client = nonce
            .and_then(Nonce::from_hex)
            .ok_or(AuthError::KeyRequired)?;
        self.client = Some(client);
        Ok(Challenge::new(&self.key, &client, &self.server))
    }

    /// The client's proof; `Ok` lets the connection go on.
    pub fn handle_proof(&self, proof: &str) -> Result<(), AuthError> {
        let client = self.client.as_ref().ok_or(AuthError::Malformed)?;
        if self.key.verify(Role::Client, client, &self.server, proof) {
            Ok(())
        } else {
            Err(AuthError::WrongKey)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> Key {
        Key::from_file_contents(text.as_bytes()).unwrap()
    }

    #[test]
    fn the_same_key_passes_both_ways() {
        let k = key("correct horse battery staple\n");
        let (c, s) = (Nonce([1; 32]), Nonce([2; 32]));
        let mut server = ServerAuth::new(k.clone(), s);
        let challenge = server.handle_hello(Some(&c.to_hex())).unwrap();
        let proof = challenge.answer(&k, &c).unwrap();
        assert_eq!(server.handle_proof(&proof), Ok(()));
        // A trailing newline or spaces do not change the key.
        assert_eq!(key("  correct horse battery staple"), k);
    }

    #[test]
    fn wrong_key_replay_and_reflection_fail() {
        let (k, other) = (key("0123456789abcdef-one"), key("0123456789abcdef-two"));
        let c = Nonce([7; 32]);
        // A client with another key: the server's proof fails at the client, and the
        // client's proof fails at the server.
        let mut server = ServerAuth::new(k.clone(), Nonce([9; 32]));
        let challenge = server.handle_hello(Some(&c.to_hex())).unwrap();
        assert_eq!(challenge.answer(&other, &c), Err(AuthError::ServerUnproven));
        let forged = other.proof(Role::Client, &c, &Nonce([9; 32]));
        assert_eq!(server.handle_proof(&forged), Err(AuthError::WrongKey));
        // A proof recorded on one connection fails on the next (a fresh server nonce).
        let recorded = challenge.answer(&k, &c).unwrap();
        let mut next = ServerAuth::new(k.clone(), Nonce([10; 32]));
        next.handle_hello(Some(&c.to_hex())).unwrap();
        assert_eq!(next.handle_proof(&recorded), Err(AuthError::WrongKey));
        // The server's own proof sent back as the client's (reflection) fails.
        assert_eq!(
            server.handle_proof(&challenge.proof),
            Err(AuthError::WrongKey)
        );
        // No nonce: the client has no key.
        assert_eq!(
            ServerAuth::new(k, Nonce([1; 32])).handle_hello(None),
            Err(AuthError::KeyRequired)
        );
    }

    #[test]
    fn keys_and_nonces_are_bounded() {
        assert_eq!(
            Key::from_file_contents(b"short\n"),
            Err(KeyError::TooShort(5))
        );
        assert_eq!(
            Key::from_file_contents(&vec![b'a'; MAX_KEY_FILE + 1]),
            Err(KeyError::TooLong)
        );
        assert_eq!(Nonce::from_hex("00"), None);
        assert_eq!(Nonce::from_hex(&"zz".repeat(32)), None);
        assert_eq!(Nonce::from_hex(&"é".repeat(32)), None);
        let n = Nonce([0xAB; 32]);
        assert_eq!(Nonce::from_hex(&n.to_hex()), Some(n));
        assert!(!key("0123456789abcdef").verify(Role::Client, &n, &n, "not hex"));
        assert!(format!("{:?}", key("0123456789abcdef")) == "Key(..)");
    }
}
