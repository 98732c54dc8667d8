//! Mutual authentication over a shared key (docs/security.md), for native control,
//! agent and copy connections alike, and the sealed control channel that follows. The key
//! never crosses the wire, and nothing that does lets anyone test guesses of it offline.
//!
//! ```text
//! client                                     server
//! hello {nonce: Nc, pake: A}          ->
//!                                     <-     welcome {auth: {nonce: Ns, pake: B, proof: Ps}}
//! [K = SPAKE2(A, B, key); checks Ps]
//! auth {proof: Pc}                    ->
//!                                            [checks Pc]
//! every frame after: sealed under keys from K, each way its own
//! ```
//!
//! A and B are SPAKE2 messages (RFC 9382, on Ed25519) over the key derived from the key
//! file. A recorded exchange, or one an attacker provokes by connecting, holds nothing to
//! check a guessed key against: the session secret K needs one end's secret scalar, and an
//! active attacker tests exactly one guess per connection (and the server rate-limits
//! failures like any refusal). The proofs are MACs under K over both nonces, both SPAKE2
//! messages, the role and what the protocol binds (its name and version), so a proof
//! serves neither the other role nor another connection nor another protocol.
//!
//! After the proofs every frame each way is sealed with ChaCha20-Poly1305 under a key of
//! its direction, its nonce the frame's number: an on-path relay can neither read, change,
//! drop silently, reorder, replay nor inject control messages (a copy's `--encrypt` among
//! them) without the connection failing.
//!
//! The drivers supply 32 random bytes per connection and end (the `Nonce` type): the nonce
//! sent is derived from them one way, and so is the SPAKE2 scalar, so this crate reads no
//! randomness and the nonce on the wire tells nothing of the scalar.

use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::ChaCha20Poly1305;
use spake2::{Ed25519Group, Identity, Password, Spake2};
use std::fmt;

/// Bytes in a nonce.
pub const NONCE_LEN: usize = 32;
/// The shortest key file content accepted (after trimming surrounding white space).
pub const MIN_KEY_LEN: usize = 16;
/// The longest key file read.
pub const MAX_KEY_FILE: usize = 64 * 1024;
/// Bytes a sealed frame adds to its plaintext.
pub const SEAL_OVERHEAD: usize = 16;

const KEY_CONTEXT: &str = "linerate 2026-11 shared key for control and agent connections";
const PUBLIC_NONCE_CONTEXT: &str = "linerate 2026-12 public nonce from a connection's random bytes";
const SCALAR_CONTEXT: &str = "linerate 2026-12 SPAKE2 scalar from a connection's random bytes";
const SECRET_CONTEXT: &str = "linerate 2026-12 session secret from SPAKE2";
const ID_CLIENT: &[u8] = b"linerate client";
const ID_SERVER: &[u8] = b"linerate server";

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

    /// A key from the key file at `path`, read no further than a key file may be long;
    /// why not, in words, where it cannot be one.
    pub fn from_path(path: &std::path::Path) -> Result<Key, String> {
        use std::io::Read;
        let mut contents = Vec::new();
        std::fs::File::open(path)
            .and_then(|file| {
                file.take(MAX_KEY_FILE as u64 + 1)
                    .read_to_end(&mut contents)
            })
            .map_err(|e| e.to_string())?;
        Key::from_file_contents(&contents).map_err(|e| e.to_string())
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

    fn other(self) -> Role {
        match self {
            Role::Client => Role::Server,
            Role::Server => Role::Client,
        }
    }
}

/// A connection's random bytes from the driver: the nonce on the wire and the SPAKE2
/// scalar are both derived from them, one way each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nonce(pub [u8; NONCE_LEN]);

impl Nonce {
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// Parses exactly 64 hex digits; anything else is `None`.
    pub fn from_hex(text: &str) -> Option<Nonce> {
        let bytes = unhex(text, NONCE_LEN)?;
        let mut out = [0u8; NONCE_LEN];
        out.copy_from_slice(&bytes);
        Some(Nonce(out))
    }

    /// The nonce this end sends.
    fn public(&self) -> Nonce {
        let mut hasher = blake3::Hasher::new_derive_key(PUBLIC_NONCE_CONTEXT);
        hasher.update(&self.0);
        Nonce(*hasher.finalize().as_bytes())
    }

    /// The randomness for this end's SPAKE2 scalar.
    fn scalar_source(&self) -> SeededRng {
        let mut hasher = blake3::Hasher::new_derive_key(SCALAR_CONTEXT);
        hasher.update(&self.0);
        SeededRng(hasher.finalize_xof())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Exactly `len` bytes as hex; anything else is `None`.
fn unhex(text: &str, len: usize) -> Option<Vec<u8>> {
    if text.len() != len * 2 || !text.is_ascii() {
        return None;
    }
    (0..len)
        .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok())
        .collect()
}

/// A deterministic generator over the driver's random bytes, for SPAKE2's scalar.
struct SeededRng(blake3::OutputReader);

impl rand_core::RngCore for SeededRng {
    fn next_u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        self.0.fill(&mut b);
        u32::from_le_bytes(b)
    }
    fn next_u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        self.0.fill(&mut b);
        u64::from_le_bytes(b)
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        self.0.fill(dest);
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.0.fill(dest);
        Ok(())
    }
}

// The output is a keyed hash of the driver's random bytes: as unpredictable as they are.
impl rand_core::CryptoRng for SeededRng {}

/// Bytes in a SPAKE2 message on Ed25519 (a side byte and a point).
const PAKE_LEN: usize = 33;

/// What one connection's exchange established: the secret both ends share.
#[derive(Clone)]
pub struct SessionKeys {
    secret: [u8; 32],
}

impl fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionKeys(..)")
    }
}

impl SessionKeys {
    /// The secret from SPAKE2's key and everything both ends said.
    fn new(pake_key: &[u8], transcript: &Transcript) -> SessionKeys {
        let mut hasher = blake3::Hasher::new_derive_key(SECRET_CONTEXT);
        hasher.update(pake_key);
        transcript.feed(&mut hasher);
        SessionKeys {
            secret: *hasher.finalize().as_bytes(),
        }
    }

    /// A key for one further use of this connection (`context` names it).
    pub fn derive(&self, context: &str) -> [u8; 32] {
        let mut hasher = blake3::Hasher::new_derive_key(context);
        hasher.update(&self.secret);
        *hasher.finalize().as_bytes()
    }

    fn proof(&self, role: Role) -> blake3::Hash {
        blake3::keyed_hash(&self.secret, role.label())
    }

    /// The sealed channel as `role` drives it: what it sends, what it receives.
    pub fn seal_for(&self, role: Role) -> ControlSeal {
        let key = |r: Role| {
            let context = match r {
                Role::Client => "linerate 2026-12 control frames from the client",
                Role::Server => "linerate 2026-12 control frames from the server",
            };
            ChaCha20Poly1305::new(&self.derive(context).into())
        };
        ControlSeal {
            send: key(role),
            sent: 0,
            receive: key(role.other()),
            received: 0,
        }
    }
}

/// Everything the proofs cover.
struct Transcript<'a> {
    bound: &'a [u8],
    client_nonce: &'a Nonce,
    server_nonce: &'a Nonce,
    client_pake: &'a [u8],
    server_pake: &'a [u8],
}

impl Transcript<'_> {
    fn feed(&self, hasher: &mut blake3::Hasher) {
        for part in [
            self.bound,
            &self.client_nonce.0[..],
            &self.server_nonce.0[..],
            self.client_pake,
            self.server_pake,
        ] {
            hasher.update(&(part.len() as u64).to_be_bytes());
            hasher.update(part);
        }
    }
}

fn spake_pair(role: Role, key: &Key, seed: &Nonce) -> (Spake2<Ed25519Group>, Vec<u8>) {
    let password = Password::new(key.0);
    let (a, b) = (Identity::new(ID_CLIENT), Identity::new(ID_SERVER));
    match role {
        Role::Client => Spake2::start_a_with_rng(&password, &a, &b, seed.scalar_source()),
        Role::Server => Spake2::start_b_with_rng(&password, &a, &b, seed.scalar_source()),
    }
}

/// One direction's frame number ran out, or a frame did not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("a control frame did not open: changed, forged or out of order on the way")]
    Tampered,
    #[error("a control connection sent 2^64 frames")]
    Exhausted,
}

/// A control connection's frames, sealed each way under its own key.
pub struct ControlSeal {
    send: ChaCha20Poly1305,
    sent: u64,
    receive: ChaCha20Poly1305,
    received: u64,
}

impl fmt::Debug for ControlSeal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ControlSeal(sent {}, received {})",
            self.sent, self.received
        )
    }
}

fn frame_nonce(n: u64) -> chacha20poly1305::Nonce {
    let mut bytes = [0u8; 12];
    bytes[4..].copy_from_slice(&n.to_be_bytes());
    bytes.into()
}

impl ControlSeal {
    /// The next frame's body, sealed.
    pub fn seal(&mut self, plaintext: &[u8]) -> Result<Vec<u8>, SealError> {
        let n = self.sent;
        self.sent = n.checked_add(1).ok_or(SealError::Exhausted)?;
        self.send
            .encrypt(&frame_nonce(n), plaintext)
            .map_err(|_| SealError::Exhausted)
    }

    /// The next frame's body, opened: only the frame the peer sealed next opens.
    pub fn open(&mut self, sealed: &[u8]) -> Result<Vec<u8>, SealError> {
        let n = self.received;
        let plain = self
            .receive
            .decrypt(&frame_nonce(n), sealed)
            .map_err(|_| SealError::Tampered)?;
        self.received = n.checked_add(1).ok_or(SealError::Exhausted)?;
        Ok(plain)
    }
}

/// A control message as its frame: sealed once the channel is (`seal` set).
pub fn encode_with<T: serde::Serialize>(seal: &mut Option<ControlSeal>, message: &T) -> Vec<u8> {
    let body = serde_json::to_vec(message).expect("control messages serialize");
    match seal {
        Some(seal) => crate::frame::encode(
            &seal
                .seal(&body)
                .expect("a connection sends fewer than 2^64 frames"),
        ),
        None => crate::frame::encode(&body),
    }
}

/// A received frame's body, opened once the channel is sealed.
pub fn open_with(seal: &mut Option<ControlSeal>, body: Vec<u8>) -> Result<Vec<u8>, SealError> {
    match seal {
        Some(seal) => seal.open(&body),
        None => Ok(body),
    }
}

/// What a server sends in its welcome when it holds a key.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Challenge {
    /// The server's nonce, hex.
    pub nonce: String,
    /// The server's SPAKE2 message, hex.
    #[serde(default)]
    pub pake: String,
    /// The server's proof, hex.
    pub proof: String,
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
    #[error("malformed authentication message (a peer of an older version?)")]
    Malformed,
    /// The peer hung up instead of proving the key: a client holding another key finds
    /// the server's proof wrong and goes no further.
    #[error("closed without proving the key (it holds another key, or none)")]
    Abandoned,
}

/// The client's half: its hello's fields, then its answer to the server's challenge.
pub struct ClientAuth {
    nonce: Nonce,
    state: Option<Spake2<Ed25519Group>>,
    pake: Vec<u8>,
}

impl fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClientAuth(..)")
    }
}

impl ClientAuth {
    /// `random` is 32 fresh random bytes for this connection.
    pub fn new(key: &Key, random: &Nonce) -> ClientAuth {
        let (state, pake) = spake_pair(Role::Client, key, random);
        ClientAuth {
            nonce: random.public(),
            state: Some(state),
            pake,
        }
    }

    /// The hello's `nonce`.
    pub fn nonce_hex(&self) -> String {
        self.nonce.to_hex()
    }

    /// The hello's `pake`.
    pub fn pake_hex(&self) -> String {
        hex(&self.pake)
    }

    /// Checks the server's challenge; the client's proof and the session's keys, or why
    /// the server is not to be trusted. `bound` must be what the server bound.
    pub fn answer(
        &mut self,
        challenge: &Challenge,
        bound: &[u8],
    ) -> Result<(String, SessionKeys), AuthError> {
        let server_nonce = Nonce::from_hex(&challenge.nonce).ok_or(AuthError::Malformed)?;
        let server_pake = unhex(&challenge.pake, PAKE_LEN).ok_or(AuthError::Malformed)?;
        let proof = blake3::Hash::from_hex(&challenge.proof).map_err(|_| AuthError::Malformed)?;
        let state = self.state.take().ok_or(AuthError::Malformed)?;
        let pake_key = state
            .finish(&server_pake)
            .map_err(|_| AuthError::ServerUnproven)?;
        let keys = SessionKeys::new(
            &pake_key,
            &Transcript {
                bound,
                client_nonce: &self.nonce,
                server_nonce: &server_nonce,
                client_pake: &self.pake,
                server_pake: &server_pake,
            },
        );
        // blake3::Hash's equality is constant-time.
        if keys.proof(Role::Server) != proof {
            return Err(AuthError::ServerUnproven);
        }
        Ok((keys.proof(Role::Client).to_hex().to_string(), keys))
    }
}

/// The server's half: fed the client's hello, it answers with the challenge; fed the
/// client's proof, it says whether to go on and gives the session's keys.
pub struct ServerAuth {
    key: Key,
    random: Nonce,
    keys: Option<SessionKeys>,
}

impl fmt::Debug for ServerAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ServerAuth(..)")
    }
}

impl ServerAuth {
    /// `random` is 32 fresh random bytes for this connection.
    pub fn new(key: Key, random: Nonce) -> ServerAuth {
        ServerAuth {
            key,
            random,
            keys: None,
        }
    }

    /// The client's hello carried `nonce` and `pake` (hex; nothing from a keyless
    /// client); `bound` names the protocol and its version.
    pub fn handle_hello(
        &mut self,
        nonce: Option<&str>,
        pake: Option<&str>,
        bound: &[u8],
    ) -> Result<Challenge, AuthError> {
        let Some(nonce) = nonce else {
            return Err(AuthError::KeyRequired);
        };
        let client_nonce = Nonce::from_hex(nonce).ok_or(AuthError::Malformed)?;
        let client_pake = pake
            .and_then(|p| unhex(p, PAKE_LEN))
            .ok_or(AuthError::Malformed)?;
        let (state, server_pake) = spake_pair(Role::Server, &self.key, &self.random);
        let pake_key = state
            .finish(&client_pake)
            .map_err(|_| AuthError::Malformed)?;
        let server_nonce = self.random.public();
        let keys = SessionKeys::new(
            &pake_key,
            &Transcript {
                bound,
                client_nonce: &client_nonce,
                server_nonce: &server_nonce,
                client_pake: &client_pake,
                server_pake: &server_pake,
            },
        );
        let challenge = Challenge {
            nonce: server_nonce.to_hex(),
            pake: hex(&server_pake),
            proof: keys.proof(Role::Server).to_hex().to_string(),
        };
        self.keys = Some(keys);
        Ok(challenge)
    }

    /// The client's proof; `Ok` lets the connection go on, under these keys.
    pub fn handle_proof(&self, proof: &str) -> Result<SessionKeys, AuthError> {
        let keys = self.keys.as_ref().ok_or(AuthError::Malformed)?;
        match blake3::Hash::from_hex(proof) {
            Ok(theirs) if theirs == keys.proof(Role::Client) => Ok(keys.clone()),
            _ => Err(AuthError::WrongKey),
        }
    }
}

#[cfg(test)]
mod tests {
    /// A key file is read no further than a key may be long, and each reason it cannot be
    /// one is told.
    #[test]
    fn a_key_file_is_read_within_its_bound() {
        let dir = std::env::temp_dir().join(format!("linerate-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, contents: &[u8]| {
            let path = dir.join(name);
            std::fs::write(&path, contents).unwrap();
            path
        };
        let good = file("good", b"a key of sixteen bytes or more\n");
        assert_eq!(
            super::Key::from_path(&good).unwrap(),
            super::Key::from_file_contents(b"a key of sixteen bytes or more").unwrap()
        );
        let long = file("long", &vec![b'k'; super::MAX_KEY_FILE + 10]);
        assert!(super::Key::from_path(&long).unwrap_err().contains("over"));
        let short = file("short", b"short");
        assert!(super::Key::from_path(&short)
            .unwrap_err()
            .contains("at least"));
        assert!(super::Key::from_path(&dir.join("absent")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    use super::*;

    fn key(text: &str) -> Key {
        Key::from_file_contents(text.as_bytes()).unwrap()
    }

    /// One whole exchange: the client's hello, the server's challenge, the client's
    /// proof and keys, the server's verdict.
    fn exchange(
        client_key: &Key,
        server_key: &Key,
        seeds: (u8, u8),
    ) -> (
        Challenge,
        Result<(String, SessionKeys), AuthError>,
        ServerAuth,
    ) {
        let mut client = ClientAuth::new(client_key, &Nonce([seeds.0; 32]));
        let mut server = ServerAuth::new(server_key.clone(), Nonce([seeds.1; 32]));
        let challenge = server
            .handle_hello(
                Some(&client.nonce_hex()),
                Some(&client.pake_hex()),
                b"test v1",
            )
            .unwrap();
        let answer = client.answer(&challenge, b"test v1");
        (challenge, answer, server)
    }

    #[test]
    fn the_same_key_passes_both_ways_and_seals_the_channel() {
        let k = key("correct horse battery staple\n");
        let (_, answer, server) = exchange(&k, &k, (1, 2));
        let (proof, client_keys) = answer.unwrap();
        let server_keys = server.handle_proof(&proof).unwrap();
        assert_eq!(client_keys.derive("x"), server_keys.derive("x"));
        let mut to_server = client_keys.seal_for(Role::Client);
        let mut at_server = server_keys.seal_for(Role::Server);
        let sealed = to_server.seal(b"pull a file").unwrap();
        assert_eq!(sealed.len(), b"pull a file".len() + SEAL_OVERHEAD);
        assert_eq!(at_server.open(&sealed).unwrap(), b"pull a file");
        // A replayed, a changed, or a reflected frame does not open.
        assert_eq!(at_server.open(&sealed), Err(SealError::Tampered));
        let mut changed = to_server.seal(b"encrypt: true").unwrap();
        changed[0] ^= 1;
        assert_eq!(at_server.open(&changed), Err(SealError::Tampered));
        let mut from_server = server_keys.seal_for(Role::Server);
        let echoed = from_server.seal(b"x").unwrap();
        assert_eq!(
            server_keys.seal_for(Role::Server).open(&echoed),
            Err(SealError::Tampered)
        );
        // A trailing newline or spaces do not change the key.
        assert_eq!(key("  correct horse battery staple"), k);
    }

    #[test]
    fn wrong_key_replay_reflection_and_another_protocol_fail() {
        let (k, other) = (key("0123456789abcdef-one"), key("0123456789abcdef-two"));
        // A client with another key: the server's proof fails at the client.
        let (_, answer, _) = exchange(&other, &k, (7, 9));
        assert_eq!(answer.unwrap_err(), AuthError::ServerUnproven);
        // A genuine proof recorded on one connection fails on the next (a fresh server
        // scalar and nonce).
        let (challenge, answer, _) = exchange(&k, &k, (7, 9));
        let (recorded, _) = answer.unwrap();
        let (_, _, next) = exchange(&k, &k, (7, 10));
        assert_eq!(
            next.handle_proof(&recorded).unwrap_err(),
            AuthError::WrongKey
        );
        // The server's own proof sent back as the client's (reflection) fails.
        let (_, _, server) = exchange(&k, &k, (7, 9));
        assert_eq!(
            server.handle_proof(&challenge.proof).unwrap_err(),
            AuthError::WrongKey
        );
        // What one protocol proved does not pass in another.
        let mut client = ClientAuth::new(&k, &Nonce([3; 32]));
        let mut server = ServerAuth::new(k.clone(), Nonce([4; 32]));
        let challenge = server
            .handle_hello(
                Some(&client.nonce_hex()),
                Some(&client.pake_hex()),
                b"copy v3",
            )
            .unwrap();
        assert_eq!(
            client.answer(&challenge, b"native v1").unwrap_err(),
            AuthError::ServerUnproven
        );
        // No nonce: the client has no key; a nonce without a SPAKE2 message: malformed.
        let mut keyless = ServerAuth::new(k, Nonce([1; 32]));
        assert_eq!(
            keyless.handle_hello(None, None, b"").unwrap_err(),
            AuthError::KeyRequired
        );
        assert_eq!(
            keyless
                .handle_hello(Some(&Nonce([1; 32]).to_hex()), None, b"")
                .unwrap_err(),
            AuthError::Malformed
        );
    }

    /// The offline attack that found a chosen passphrase in four guesses: a dictionary
    /// that holds the key, tried against a recorded genuine exchange and against one the
    /// attacker provoked, confirms nothing. The attacker computes what it can from each
    /// guess and the wire: the old scheme's proof was a MAC of the nonces under the key,
    /// so this comparison once confirmed the key.
    #[test]
    fn a_dictionary_that_holds_the_key_cannot_confirm_it_offline() {
        let secret = "summer2026!lab-key";
        let k = key(secret);
        let dictionary = [
            "password123456789",
            "letmein-letmein-1",
            secret,
            "lab-key-2026-summer",
        ];
        // Recorded: the client's hello and the server's challenge of a genuine exchange.
        let mut client = ClientAuth::new(&k, &Nonce([21; 32]));
        let mut server = ServerAuth::new(k.clone(), Nonce([22; 32]));
        let (client_nonce, client_pake) = (client.nonce_hex(), client.pake_hex());
        let recorded = server
            .handle_hello(Some(&client_nonce), Some(&client_pake), b"native v1")
            .unwrap();
        let (client_proof, _) = client.answer(&recorded, b"native v1").unwrap();
        // Provoked: the attacker's own hello (its own scalar, any guess) and the answer.
        let mut provoked_by = ClientAuth::new(&key("attacker's first guess"), &Nonce([23; 32]));
        let mut victim = ServerAuth::new(k.clone(), Nonce([24; 32]));
        let provoked = victim
            .handle_hello(
                Some(&provoked_by.nonce_hex()),
                Some(&provoked_by.pake_hex()),
                b"native v1",
            )
            .unwrap();
        let mut confirmed = Vec::new();
        for guess in dictionary {
            let guessed = key(guess);
            // Everything an attacker holding the guess can compute: a client of its own
            // finishing against the recorded server message, and the old scheme's MAC.
            let mut replay = ClientAuth::new(&guessed, &Nonce([99; 32]));
            let replayed = replay.answer(&recorded, b"native v1");
            let old_mac = blake3::keyed_hash(&guessed.0, recorded.nonce.as_bytes());
            if replayed.is_ok()
                || old_mac.to_hex().as_str() == recorded.proof
                || old_mac.to_hex().as_str() == client_proof
            {
                confirmed.push(guess);
            }
            // Against the provoked challenge, only the attacker's own scalar finishes,
            // and that was bound to its first guess, not this one.
            let mut again = ClientAuth::new(&guessed, &Nonce([23; 32]));
            if again.answer(&provoked, b"native v1").is_ok() && guess != "attacker's first guess" {
                confirmed.push(guess);
            }
        }
        assert!(confirmed.is_empty(), "confirmed offline: {confirmed:?}");
        // The provoked exchange does confirm the one guess the attacker made online.
        assert_eq!(
            provoked_by.answer(&provoked, b"native v1").unwrap_err(),
            AuthError::ServerUnproven
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
        assert!(format!("{:?}", key("0123456789abcdef")) == "Key(..)");
    }
}
