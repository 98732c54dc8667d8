//! Encrypted tests on both ends: the server's TLS identity and the handshakes of data
//! connections, the client's trust and its handshakes, and kTLS where asked for.
//!
//! The server makes a self-signed certificate at its first encrypted test (or reads the
//! one given), and announces its SHA-256 fingerprint when it accepts a test; the client
//! trusts exactly that certificate unless it was given `--ca`, in which case the
//! certificate must chain to one of those roots and name the server. A data connection's
//! handshake runs after its plaintext preface; on the server it runs on a thread of its own
//! so the acceptor never waits on a client.

use linerate_engine::flow::FlowSocket;
use linerate_report::TestConfig;
use linerate_tls::verify::Trust;
use linerate_tls::{Cipher, Identity, TlsError};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::mpsc::Sender;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Whether a server runs encrypted tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMode {
    /// Plain and encrypted tests, as each client asks.
    #[default]
    Offered,
    /// Plain tests only (`--no-tls`).
    Off,
    /// Encrypted tests only (`--require-tls`).
    Required,
}

impl TlsMode {
    /// The mode `--no-tls` and `--require-tls` ask for (the flags exclude each other).
    pub fn from_flags(no_tls: bool, require_tls: bool) -> TlsMode {
        match (no_tls, require_tls) {
            (true, _) => TlsMode::Off,
            (_, true) => TlsMode::Required,
            _ => TlsMode::Offered,
        }
    }
}

/// How long a data connection's handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The server's TLS: its configuration, made once, and the fingerprint it announces.
#[derive(Debug)]
pub struct ServerTls {
    pub config: Arc<rustls::ServerConfig>,
    pub fingerprint: String,
}

/// The server's identity, made or read on first use.
#[derive(Debug, Default)]
pub struct ServerIdentity {
    /// `--cert` and `--cert-key`; `None`: self-signed.
    files: Option<(PathBuf, PathBuf)>,
    made: OnceLock<Result<Arc<ServerTls>, String>>,
}

impl ServerIdentity {
    pub fn new(files: Option<(PathBuf, PathBuf)>) -> ServerIdentity {
        ServerIdentity {
            files,
            made: OnceLock::new(),
        }
    }

    /// Reads the files now, so a bad `--cert` stops the server at start, not at the
    /// first encrypted test.
    pub fn load(&self) -> Result<Arc<ServerTls>, String> {
        self.made
            .get_or_init(|| {
                let identity = match &self.files {
                    Some((cert, key)) => Identity::from_files(cert, key),
                    None => Identity::self_signed(&self_names()),
                }
                .map_err(|e| e.to_string())?;
                let config = linerate_tls::server_config(&identity).map_err(|e| e.to_string())?;
                Ok(Arc::new(ServerTls {
                    config,
                    fingerprint: identity.fingerprint,
                }))
            })
            .clone()
    }
}

/// The names a self-signed certificate carries: localhost, this host's name and the
/// loopback addresses (a client that checks names against `--ca` has made its own).
fn self_names() -> Vec<String> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
    let host = linerate_hostinfo::host_facts().hostname;
    if !host.is_empty() {
        names.push(host);
    }
    names
}

/// An encrypted test waiting for its data connections: where each goes once its
/// handshake is done (or why it failed), and how to take it.
#[derive(Debug, Clone)]
pub struct TlsWaiting {
    pub sender: Sender<(u32, Result<FlowSocket, String>)>,
    pub tls: Arc<ServerTls>,
    pub ktls: bool,
    /// The test's marks, set before the handshake so that its records carry them too.
    pub marks: Option<linerate_model::marks::Marks>,
}

/// The server's end of one data connection's handshake, and kTLS if asked for.
pub fn accept_data(stream: TcpStream, waiting: &TlsWaiting) -> Result<FlowSocket, String> {
    if let Some(marks) = waiting.marks {
        linerate_engine::sys::set_marks(&stream, marks).map_err(|e| e.to_string())?;
    }
    let tls = linerate_tls::stream::accept(stream, waiting.tls.config.clone(), HANDSHAKE_TIMEOUT)
        .map_err(|e| e.to_string())?;
    finish(tls, waiting.ktls)
}

/// Hands the session to the kernel when asked and it can; a refusal is noted on the
/// flow and the records stay in user space.
fn finish(tls: linerate_tls::TlsStream<TcpStream>, ktls: bool) -> Result<FlowSocket, String> {
    if !ktls {
        return Ok(FlowSocket::Tls(Box::new(tls)));
    }
    use linerate_tls::ktls::Offload;
    match linerate_tls::ktls::offload(tls) {
        Offload::Taken(stream, facts) => Ok(FlowSocket::Ktls(stream, facts)),
        Offload::Failed(e) => Err(e.to_string()),
        Offload::Refused(mut kept, why) => {
            kept.set_note(format!(
                "--ktls: {why}; TLS records are sealed in user space"
            ));
            Ok(FlowSocket::Tls(kept))
        }
    }
}

/// The client's TLS for one test.
#[derive(Debug, Clone)]
pub struct ClientTls {
    config: Arc<rustls::ClientConfig>,
    name: String,
    ktls: bool,
}

impl ClientTls {
    /// The configuration `config.tls` asks for, trusting the certificate with
    /// `fingerprint` or, with `ca`, certificates that chain to it and name `name`.
    pub fn new(
        config: &TestConfig,
        fingerprint: Option<&str>,
        ca: Option<&std::path::Path>,
        name: &str,
    ) -> Result<Option<ClientTls>, TlsError> {
        let Some(settings) = &config.tls else {
            return Ok(None);
        };
        let cipher: Cipher = settings.cipher.parse().map_err(TlsError::Identity)?;
        let trust = trust(fingerprint, ca)?;
        Ok(Some(ClientTls {
            config: linerate_tls::client_config(cipher, &trust)?,
            name: name.to_string(),
            ktls: settings.ktls,
        }))
    }

    /// The client's end of a data connection's handshake (after its preface), and kTLS
    /// if asked for.
    pub fn connect(&self, stream: TcpStream) -> Result<FlowSocket, String> {
        let tls = linerate_tls::stream::connect(
            stream,
            self.config.clone(),
            &self.name,
            HANDSHAKE_TIMEOUT,
        )
        .map_err(|e| e.to_string())?;
        finish(tls, self.ktls)
    }
}

/// What a client trusts: certificates that chain to `ca` and name the server, or else the
/// one whose fingerprint the server announced.
fn trust(fingerprint: Option<&str>, ca: Option<&std::path::Path>) -> Result<Trust, TlsError> {
    match (ca, fingerprint) {
        (Some(ca), _) => Trust::from_ca_file(ca),
        (None, Some(fingerprint)) => Ok(Trust::Pinned(fingerprint.to_string())),
        (None, None) => Err(TlsError::Handshake(
            "the server announced no certificate to trust".into(),
        )),
    }
}

/// The name a client checks the certificate against: the host as the user named it
/// ("localhost" for the in-process server).
pub fn server_name(config: &TestConfig) -> String {
    match config.target.as_str() {
        "loopback" => "localhost".into(),
        target => target
            .trim_start_matches('[')
            .split(']')
            .next()
            .unwrap_or(target)
            .to_string(),
    }
}

/// Why a QUIC test's client side could not open. Its own type, so that this module,
/// which the server's handlers use too, does not import the client's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuicOpenError {
    /// The test's TLS settings or trust cannot be used.
    Config(String),
    /// The connection or its streams did not open.
    Quic(String),
}

/// The client's side of a QUIC test: a QUIC worker per server port in `servers`, each
/// connecting to its port and opening a stream per flow of its own, trusting as for TLS.
pub fn open_quic(
    config: &TestConfig,
    servers: &[std::net::SocketAddr],
    token: linerate_proto::Token,
    fingerprint: Option<&str>,
    ca: Option<&std::path::Path>,
) -> Result<linerate_engine::quic::QuicSide, QuicOpenError> {
    let settings = config
        .tls
        .as_ref()
        .ok_or_else(|| QuicOpenError::Config("a QUIC test without TLS settings".into()))?;
    let cipher: Cipher = settings.cipher.parse().map_err(QuicOpenError::Config)?;
    let trust = trust(fingerprint, ca).map_err(|e| QuicOpenError::Config(e.to_string()))?;
    let tls = linerate_tls::quic_client_config(cipher, &trust)
        .map_err(|e| QuicOpenError::Config(e.to_string()))?;
    let timeout = Duration::from_secs_f64(config.connect_timeout_s).max(HANDSHAKE_TIMEOUT);
    let plan = linerate_engine::quic::QuicPlan::of(config, token, timeout);
    linerate_engine::quic::QuicSide::connect(servers, tls, server_name(config), plan)
        .map_err(QuicOpenError::Quic)
}

/// The certificate this process presents on the `ssl` connections of profile runs it
/// accepts: self-signed, made on first use, announced to the dialer over the agent
/// connection (`mirror_ready`, `dial_back`).
pub fn profile_identity() -> Result<Arc<ServerTls>, String> {
    static IDENTITY: OnceLock<ServerIdentity> = OnceLock::new();
    IDENTITY.get_or_init(ServerIdentity::default).load()
}

/// The dialing end of a profile `ssl` connection, after its preface: trusts the
/// certificate the peer announced.
pub fn profile_connect(
    stream: TcpStream,
    endpoint: &linerate_profile::Endpoint,
    fingerprint: Option<String>,
) -> Result<linerate_tls::TlsStream<TcpStream>, String> {
    let fingerprint =
        fingerprint.ok_or("the peer announced no certificate for its ssl connections")?;
    let cipher: Cipher = endpoint
        .cipher
        .as_deref()
        .unwrap_or(linerate_model::DEFAULT_CIPHER)
        .parse()?;
    let config = linerate_tls::client_config(cipher, &Trust::Pinned(fingerprint))
        .map_err(|e| e.to_string())?;
    linerate_tls::stream::connect(stream, config, "localhost", HANDSHAKE_TIMEOUT)
        .map_err(|e| e.to_string())
}

/// The accepting end of a profile `ssl` connection.
pub fn profile_accept(stream: TcpStream) -> Result<linerate_tls::TlsStream<TcpStream>, String> {
    let tls = profile_identity()?;
    linerate_tls::stream::accept(stream, tls.config.clone(), HANDSHAKE_TIMEOUT)
        .map_err(|e| e.to_string())
}
