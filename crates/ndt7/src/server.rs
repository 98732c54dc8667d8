//! The ndt7 server of `serve --ndt7 ADDR` (TLS, or cleartext with `--ndt7-cleartext`):
//! `/ndt/v7/download` and `/ndt/v7/upload` as spec v0.11.0 describes them, for any ndt7
//! client (M-Lab's browser library, ndt7-client, `linerate ndt7`).
//!
//! The upgrade is HTTP/1.1 through hyper, so a request that is not an ndt7 upgrade gets
//! the status RFC 6455 and the spec give; the WebSocket framing after it is
//! tokio-tungstenite's. Bounded like every server path: connections at once, in all and
//! per client ([`linerate_http::Guard`]); the upgrade's head within a deadline and a
//! size; the query string within the spec's 4,096 bytes; a message within 16 MiB; the
//! subtest's data for 10 s and its connection closed at 13 s, whatever the client does;
//! a client that sends what the protocol forbids is closed, counted and logged (at most
//! once a second). Nothing is sent before a client has asked over a connection it opened.

use crate::frames::{BinaryFrames, Watched};
use crate::session::{self, Link};
use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{
    HeaderValue, CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_PROTOCOL, UPGRADE,
};
use hyper::{Method, Request, Response, StatusCode};
use linerate_model::ndt7::{self as spec, Subtest, SubtestResult};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What one server allows.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub max_per_client: usize,
    pub v6_prefix: u8,
    /// How long a subtest's data runs after the handshake.
    pub runtime: Duration,
    /// When a subtest's connection is closed after the handshake, whatever the client.
    pub hard_bound: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 1024,
            // A browser runs one subtest at a time; a lab host running several clients
            // still fits.
            max_per_client: 32,
            v6_prefix: 64,
            runtime: Duration::from_secs_f64(spec::RUNTIME_S),
            hard_bound: Duration::from_secs_f64(spec::HARD_BOUND_S),
        }
    }
}

/// The upgrade's head: within this time (a TLS handshake included) and this size.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
pub const MAX_HEAD: usize = 16 * 1024;

/// Counts a server keeps, for its log and its tests.
#[derive(Debug, Default)]
pub struct Counters {
    pub connections: AtomicU64,
    /// Connections refused by the caps.
    pub refused: AtomicU64,
    /// Upgrades refused (a wrong path, subprotocol, version, query string).
    pub bad_upgrades: AtomicU64,
    /// Subtests run to their end, however it came.
    pub subtests: AtomicU64,
    /// Subtests closed for breaking the protocol, or bounded for not finishing.
    pub closed_by_server: AtomicU64,
}

/// Called with each subtest's record when it ends (on one of the server's threads).
pub type Keeper = Arc<dyn Fn(SubtestResult) + Send + Sync>;

/// The running server; dropped, it stops.
pub struct Ndt7Server {
    pub addr: SocketAddr,
    pub tls: bool,
    pub counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Ndt7Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Ndt7Server {
    /// The download subtest's URL, for the operator's log.
    pub fn download_url(&self) -> String {
        let scheme = if self.tls { "wss" } else { "ws" };
        format!("{scheme}://{}{}", self.addr, spec::DOWNLOAD_PATH)
    }
}

#[derive(Clone)]
struct Shared {
    limits: Limits,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    keep: Keeper,
    /// One random buffer every download slices its messages from.
    payload: Bytes,
    logged_at: Arc<Mutex<Option<Instant>>>,
}

impl Shared {
    /// Says `line` unless something was said less than a second ago: a misbehaving
    /// client retries fast.
    fn log(&self, line: impl FnOnce() -> String) {
        let mut at = self.logged_at.lock().unwrap_or_else(|e| e.into_inner());
        if !at.is_some_and(|at| at.elapsed() < Duration::from_secs(1)) {
            *at = Some(Instant::now());
            eprintln!("linerate serve: ndt7: {}", line());
        }
    }
}

/// Listens on `addr` and serves until dropped; TLS when `tls` is given (ALPN http/1.1:
/// the upgrade is HTTP/1.1's).
pub fn start(
    addr: SocketAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: Limits,
    keep: Keeper,
) -> Result<Ndt7Server> {
    let listener =
        linerate_http::listen(addr).with_context(|| format!("cannot listen for ndt7 on {addr}"))?;
    let addr = listener.local_addr()?;
    let acceptor = tls.map(|config| {
        let mut config = (*config).clone();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    });
    let is_tls = acceptor.is_some();
    let mut payload = vec![0u8; spec::MAX_SCALED_MESSAGE];
    getrandom::getrandom(&mut payload)
        .map_err(|e| anyhow::anyhow!("drawing the download's random payload: {e}"))?;
    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let shared = Shared {
        limits,
        counters: counters.clone(),
        stop: stop.clone(),
        keep,
        payload: Bytes::from(payload),
        logged_at: Arc::default(),
    };
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("ndt7")
        .on_thread_start(linerate_hostinfo::block_sigpipe)
        .enable_io()
        .enable_time()
        .build()
        .context("starting the ndt7 server's runtime")?;
    let thread = std::thread::Builder::new()
        .name("ndt7-accept".into())
        .spawn(move || {
            linerate_hostinfo::block_sigpipe();
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                accept_loop(listener, acceptor, shared).await;
            });
            runtime.shutdown_timeout(Duration::from_secs(1));
        })
        .context("starting the ndt7 server's thread")?;
    Ok(Ndt7Server {
        addr,
        tls: is_tls,
        counters,
        stop,
        thread: Some(thread),
    })
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    shared: Shared,
) {
    let guard = linerate_http::Guard::new(linerate_http::Limits {
        max_connections: shared.limits.max_connections,
        max_per_client: shared.limits.max_per_client,
        first_request: HEAD_TIMEOUT,
        // One request a connection: the upgrade holds it to its end.
        idle: HEAD_TIMEOUT,
        v6_prefix: shared.limits.v6_prefix,
    });
    while !shared.stop.load(Ordering::Relaxed) {
        let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
        let Ok(Ok((stream, peer))) = accepted else {
            continue;
        };
        let slot = match guard.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(refusal) => {
                let refused = shared.counters.refused.fetch_add(1, Ordering::Relaxed) + 1;
                shared.log(|| {
                    let why = match refusal {
                        linerate_http::Refusal::PerClient => format!(
                            "over {} at once from its address (an IPv6 /{})",
                            shared.limits.max_per_client, shared.limits.v6_prefix
                        ),
                        linerate_http::Refusal::Full => format!(
                            "{} held in all, none idle to give way",
                            shared.limits.max_connections
                        ),
                    };
                    format!("refused a connection from {peer}: {why} ({refused} refused so far)")
                });
                continue;
            }
        };
        shared.counters.connections.fetch_add(1, Ordering::Relaxed);
        let link = Link {
            fd: stream.as_raw_fd(),
            client: peer,
            server: stream.local_addr().unwrap_or(peer),
        };
        let shared = shared.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let activity = slot.activity();
            let lifetime = HEAD_TIMEOUT * 2 + shared.limits.hard_bound;
            let connection = async move {
                match acceptor {
                    Some(acceptor) => {
                        let handshake = tokio::time::timeout(HEAD_TIMEOUT, acceptor.accept(stream));
                        if let Ok(Ok(tls)) = handshake.await {
                            serve_connection(tls, link, shared, activity).await;
                        }
                    }
                    None => serve_connection(stream, link, shared, activity).await,
                }
            };
            slot.hold(tokio::time::timeout(lifetime, connection)).await;
        });
    }
}

/// An upgrade the service accepted: what the connection does once hyper hands it over.
struct Accepted {
    subtest: Subtest,
    metadata: Vec<(String, String)>,
    upgrade: hyper::upgrade::OnUpgrade,
    busy: linerate_http::Busy,
}

async fn serve_connection<S>(
    stream: S,
    link: Link,
    shared: Shared,
    activity: linerate_http::Activity,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(stream);
    let accepted: Arc<Mutex<Option<Accepted>>> = Arc::default();
    let service = {
        let accepted = accepted.clone();
        let shared = shared.clone();
        hyper::service::service_fn(move |request: Request<Incoming>| {
            let reply = match upgrade(request, &activity) {
                Ok((reply, accept)) => {
                    *accepted.lock().unwrap_or_else(|e| e.into_inner()) = Some(accept);
                    reply
                }
                Err((status, why)) => {
                    let bad = shared.counters.bad_upgrades.fetch_add(1, Ordering::Relaxed) + 1;
                    shared.log(|| {
                        format!(
                            "refused an upgrade from {}: {why} ({status}; {bad} refused so far)",
                            link.client
                        )
                    });
                    refusal(status, &why)
                }
            };
            async move { Ok::<_, std::convert::Infallible>(reply) }
        })
    };
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD)
        .serve_connection(io, service)
        .with_upgrades();
    let _ = connection.await;
    let Some(accept) = accepted.lock().unwrap_or_else(|e| e.into_inner()).take() else {
        return;
    };
    let Ok(upgraded) = accept.upgrade.await else {
        return;
    };
    let started = Instant::now();
    // An upload's data is counted as it arrives and never assembled into messages; a
    // download's client sends none (crate::frames).
    let binary = match accept.subtest {
        Subtest::Download => BinaryFrames::Refuse,
        Subtest::Upload => BinaryFrames::Count,
    };
    let watched = Watched::new(hyper_util::rt::TokioIo::new(upgraded), started, binary);
    let uploaded = watched.count();
    let raw = watched.raw_frames();
    let ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
        watched,
        tokio_tungstenite::tungstenite::protocol::Role::Server,
        Some(session::server_websocket_config(accept.subtest)),
    )
    .await;
    let bounds = session::Bounds {
        runtime: started + shared.limits.runtime,
        hard: started + shared.limits.hard_bound,
    };
    let mut result = match accept.subtest {
        Subtest::Download => {
            let payload = shared.payload.clone();
            session::serve_download(ws, &raw, &link, payload, started, bounds).await
        }
        Subtest::Upload => session::serve_upload(ws, &link, &uploaded, started, bounds).await,
    };
    drop(accept.busy);
    result.metadata = accept.metadata;
    shared.counters.subtests.fetch_add(1, Ordering::Relaxed);
    if let Some(why) = closed_by_server(&result) {
        shared
            .counters
            .closed_by_server
            .fetch_add(1, Ordering::Relaxed);
        shared.log(|| {
            format!(
                "closed the {} of {}: {why}",
                result.subtest.name(),
                link.client
            )
        });
    }
    (shared.keep)(result);
}

fn closed_by_server(result: &SubtestResult) -> Option<String> {
    match result.ended {
        spec::SubtestEnd::Refused | spec::SubtestEnd::Bounded => result.ended_why.clone(),
        _ => None,
    }
}

type Reply = Response<Full<Bytes>>;

/// The service's answer to one request: the 101 of an ndt7 upgrade, or why not.
fn upgrade(
    mut request: Request<Incoming>,
    activity: &linerate_http::Activity,
) -> Result<(Reply, Accepted), (StatusCode, String)> {
    let subtest = Subtest::of_path(request.uri().path()).ok_or_else(|| {
        (
            StatusCode::NOT_FOUND,
            format!(
                "{} is not an ndt7 path ({} or {})",
                request.uri().path(),
                spec::DOWNLOAD_PATH,
                spec::UPLOAD_PATH
            ),
        )
    })?;
    if request.method() != Method::GET {
        return Err((
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{} is not GET", request.method()),
        ));
    }
    let headers = request.headers();
    let has_token = |name, token: &str| {
        headers.get_all(name).iter().any(|value| {
            value
                .to_str()
                .unwrap_or("")
                .split(',')
                .any(|part| part.trim().eq_ignore_ascii_case(token))
        })
    };
    if !has_token(UPGRADE, "websocket") || !has_token(CONNECTION, "upgrade") {
        return Err((
            StatusCode::UPGRADE_REQUIRED,
            "not a WebSocket upgrade (Upgrade: websocket, Connection: Upgrade)".into(),
        ));
    }
    if headers.get("sec-websocket-version").map(|v| v.as_bytes()) != Some(b"13") {
        return Err((
            StatusCode::UPGRADE_REQUIRED,
            "Sec-WebSocket-Version is not 13".into(),
        ));
    }
    let key = headers
        .get("sec-websocket-key")
        .filter(|key| key.len() == 24)
        .ok_or((
            StatusCode::BAD_REQUEST,
            "Sec-WebSocket-Key is missing or not 16 bytes in base64".to_string(),
        ))?
        .clone();
    if !has_token(SEC_WEBSOCKET_PROTOCOL, spec::SUBPROTOCOL) {
        return Err((
            StatusCode::BAD_REQUEST,
            format!("the subprotocol {} is not asked for", spec::SUBPROTOCOL),
        ));
    }
    let metadata = spec::parse_metadata(request.uri().query().unwrap_or(""))
        .map_err(|why| (StatusCode::BAD_REQUEST, why.to_string()))?;
    let accept_key = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let accepted = Accepted {
        subtest,
        metadata,
        upgrade: hyper::upgrade::on(&mut request),
        busy: activity.begin(),
    };
    let mut reply = Response::new(Full::new(Bytes::new()));
    *reply.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = reply.headers_mut();
    headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(
        SEC_WEBSOCKET_PROTOCOL,
        HeaderValue::from_static(spec::SUBPROTOCOL),
    );
    if let Ok(value) = HeaderValue::from_str(&accept_key) {
        headers.insert(SEC_WEBSOCKET_ACCEPT, value);
    }
    Ok((reply, accepted))
}

fn refusal(status: StatusCode, why: &str) -> Reply {
    let mut reply = Response::new(Full::new(Bytes::from(format!("{why}\n"))));
    *reply.status_mut() = status;
    let headers = reply.headers_mut();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if status == StatusCode::UPGRADE_REQUIRED {
        headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
        headers.insert("sec-websocket-version", HeaderValue::from_static("13"));
    }
    linerate_http::secure(headers, None);
    reply
}
