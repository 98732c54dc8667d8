//! The RPM server of `serve --http ADDR` (cleartext) and `--https ADDR` (TLS): what any
//! client of the draft needs.
//!
//! | path | what |
//! |---|---|
//! | `/` | the speed test for a browser: download, upload, latency idle and loaded, RPM, grade |
//! | `/.well-known/nq` | the configuration: the URLs below, named as networkQuality and mach read them |
//! | `/small` | one byte (a probe's object) |
//! | `/large` | an endless download, until the client goes or [`Limits::max_request`] passes |
//! | `/slurp` | an upload sink: the body read and dropped, its byte count answered at its end (`?progress`: every 100 ms while it lasts) |
//!
//! HTTP/1.1 and HTTP/2 (ALPN over TLS; prior knowledge over cleartext) through hyper on a
//! Tokio runtime of its own. Bounded like every server path: connections at once, in all
//! and per client address; a request's head within a deadline and size; every request and
//! connection within a lifetime; HTTP/2 streams per connection. Nothing is ever sent
//! before a client has asked over a connection it opened.

use crate::body::Endless;
use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What one server allows.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections at once, in all.
    pub max_connections: usize,
    /// Connections at once from one address (a client of the draft opens up to 16 loading
    /// connections and a probe's connection every 100 ms, which mach keeps to the end of
    /// a direction: over 100).
    pub max_per_client: usize,
    /// The longest one request lasts: an endless download ends, an upload is cut.
    pub max_request: Duration,
    /// The most one upload may send.
    pub max_upload: u64,
    /// Serve this address only (a mesh agent's server for the one host that asked for
    /// it); others are closed at once.
    pub only_from: Option<IpAddr>,
    /// The bits of an IPv6 address that name its client for `max_per_client`.
    pub v6_prefix: u8,
    /// Where the page's ndt7 subtests go: the ndt7 server's port on this host, and whether
    /// it speaks TLS (`serve --ndt7`); `None`, the page offers none.
    pub ndt7: Option<(u16, bool)>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 1024,
            max_per_client: 256,
            max_request: Duration::from_secs(60),
            max_upload: 64 << 30,
            only_from: None,
            v6_prefix: 64,
            ndt7: None,
        }
    }
}

/// The browser's speed test at `/`: one self-contained page (docs/rpm.md).
pub const SPEED_TEST_PAGE: &str = include_str!("speedtest.html");

/// A request's head: within this time and this size. The first request's head is due
/// this long after the accept, a TLS handshake included.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a connection stays open with no request under way (HTTP/1 keep-alive and
/// HTTP/2 alike): a client of the draft keeps its probe connections busy.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// HTTP/2: a PING after this long without a frame, and the connection closed when its
/// answer takes longer than [`PING_TIMEOUT`].
pub const PING_EVERY: Duration = Duration::from_secs(20);
pub const PING_TIMEOUT: Duration = Duration::from_secs(10);
pub const MAX_HEAD: usize = 16 * 1024;
/// HTTP/2 streams at once on one connection.
pub const MAX_STREAMS: u32 = 128;

/// Counts a server keeps, for its log and its tests.
#[derive(Debug, Default)]
pub struct Counters {
    pub connections: AtomicU64,
    pub refused: AtomicU64,
    pub downloaded: AtomicU64,
    pub uploaded: AtomicU64,
}

/// The running server; dropped, it stops.
pub struct HttpServer {
    pub addr: SocketAddr,
    pub tls: bool,
    pub counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl HttpServer {
    /// The configuration's URL a client is given.
    pub fn config_url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}/.well-known/nq", self.addr)
    }
}

#[derive(Clone)]
struct Shared {
    addr: SocketAddr,
    tls: bool,
    limits: Limits,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
}

/// Listens on `addr` and serves until dropped; TLS when `tls` is given (its ALPN is set
/// to h2 and http/1.1 here).
pub fn start(
    addr: SocketAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: Limits,
) -> Result<HttpServer> {
    let listener =
        linerate_http::listen(addr).with_context(|| format!("cannot listen for HTTP on {addr}"))?;
    let addr = listener.local_addr()?;
    let acceptor = tls.map(|config| {
        let mut config = (*config).clone();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    });
    let is_tls = acceptor.is_some();
    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let shared = Shared {
        addr,
        tls: acceptor.is_some(),
        limits,
        counters: counters.clone(),
        stop: stop.clone(),
    };
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("http-rpm")
        .on_thread_start(linerate_hostinfo::block_sigpipe)
        .enable_io()
        .enable_time()
        .build()
        .context("starting the HTTP server's runtime")?;
    let thread = std::thread::Builder::new()
        .name("http-accept".into())
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
        .context("starting the HTTP server's thread")?;
    Ok(HttpServer {
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
        idle: IDLE_TIMEOUT,
        v6_prefix: shared.limits.v6_prefix,
    });
    let mut logged_at: Option<Instant> = None;
    while !shared.stop.load(Ordering::Relaxed) {
        let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
        let Ok(Ok((stream, peer))) = accepted else {
            continue;
        };
        let client = peer.ip();
        if shared.limits.only_from.is_some_and(|only| only != client) {
            shared.counters.refused.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        // Over a bound, with no idle connection of a larger holder to give way: closed
        // at once (a client of the draft retires the connection).
        let slot = match guard.admit(client) {
            Ok(slot) => slot,
            Err(refusal) => {
                let refused = shared.counters.refused.fetch_add(1, Ordering::Relaxed) + 1;
                // Logged at most once a second: a client over its bound retries fast.
                if !logged_at.is_some_and(|at| at.elapsed() < Duration::from_secs(1)) {
                    logged_at = Some(Instant::now());
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
                    eprintln!(
                        "linerate serve: HTTP: refused a connection from {client}: {why} ({refused} refused so far)"
                    );
                }
                drop(stream);
                continue;
            }
        };
        shared.counters.connections.fetch_add(1, Ordering::Relaxed);
        let _ = stream.set_nodelay(true);
        crate::limit_unsent(&stream);
        let shared = shared.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let activity = slot.activity();
            let lifetime = shared.limits.max_request + HEAD_TIMEOUT;
            // The handshake and the first request within the slot's deadline; a request
            // under way holds it open up to the lifetime.
            let connection = async move {
                match acceptor {
                    Some(acceptor) => {
                        if let Ok(tls) = acceptor.accept(stream).await {
                            serve_connection(tls, shared, activity).await;
                        }
                    }
                    None => serve_connection(stream, shared, activity).await,
                }
            };
            slot.hold(tokio::time::timeout(lifetime, connection)).await;
        });
    }
}

async fn serve_connection<S>(stream: S, shared: Shared, activity: linerate_http::Activity)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(stream);
    let service = hyper::service::service_fn(move |request| {
        let shared = shared.clone();
        // Under way until its response's body is sent (an endless download too).
        let busy = activity.begin();
        async move {
            let mut response = route(&shared, request).await;
            linerate_http::secure(response.headers_mut(), None);
            Ok::<_, std::convert::Infallible>(
                response.map(|body| linerate_http::Tracked::new(body, busy).boxed()),
            )
        }
    });
    let mut builder =
        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD);
    builder
        .http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(Some(PING_EVERY))
        .keep_alive_timeout(PING_TIMEOUT)
        .max_concurrent_streams(MAX_STREAMS)
        .max_header_list_size(MAX_HEAD as u32)
        // Windows as large as a long fat path needs (the defaults hold a 100 ms path to
        // a few Mbit/s per connection).
        .initial_stream_window_size(8 << 20)
        .initial_connection_window_size(16 << 20);
    let _ = builder.serve_connection(io, service).await;
}

type Reply = Response<BoxBody<Bytes, std::convert::Infallible>>;

fn reply(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Reply {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .header("cache-control", "no-store")
        .body(Full::new(body.into()).boxed())
        .expect("a response of known parts")
}

/// The configuration's URLs at the authority the client reached (its `Host`, or the
/// `:authority` of HTTP/2), when that is a plain host and port; else at `fallback`.
pub fn config_json(tls: bool, authority: Option<&str>, fallback: SocketAddr) -> String {
    let scheme = if tls { "https" } else { "http" };
    let plain = |a: &str| {
        !a.is_empty()
            && a.len() <= 255
            && a.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.:[]_".contains(&b))
    };
    // Plain, and an authority a URL can carry ("[" alone is plain but none).
    let usable = |a: &str| plain(a) && format!("{scheme}://{a}/").parse::<hyper::Uri>().is_ok();
    let host = authority
        .filter(|a| usable(a))
        .map_or_else(|| fallback.to_string(), str::to_string);
    let url = |path: &str| format!("{scheme}://{host}{path}");
    serde_json::json!({
        "version": 1,
        "urls": {
            "small_https_download_url": url("/small"),
            "large_https_download_url": url("/large"),
            "https_upload_url": url("/slurp"),
            "small_download_url": url("/small"),
            "large_download_url": url("/large"),
            "upload_url": url("/slurp"),
        },
        "test_endpoint": host,
    })
    .to_string()
}

async fn route(shared: &Shared, request: Request<Incoming>) -> Reply {
    let path = request.uri().path().to_string();
    let method = request.method().clone();
    match (method, path.as_str()) {
        (Method::GET | Method::HEAD, "/.well-known/nq") => {
            let authority = request
                .uri()
                .authority()
                .map(|a| a.as_str().to_string())
                .or_else(|| {
                    request
                        .headers()
                        .get(hyper::header::HOST)
                        .and_then(|h| h.to_str().ok())
                        .map(str::to_string)
                });
            reply(
                StatusCode::OK,
                "application/json",
                config_json(shared.tls, authority.as_deref(), shared.addr),
            )
        }
        (Method::GET | Method::HEAD, "/") => {
            let mut page = reply(StatusCode::OK, "text/html; charset=utf-8", SPEED_TEST_PAGE);
            // Self-contained: nothing may load from anywhere else, and it connects only
            // here (and to this host's ndt7 port, where there is one).
            let ndt7 = shared.limits.ndt7.map_or(String::new(), |(port, _)| {
                format!(" ws://*:{port} wss://*:{port}")
            });
            let policy = format!(
                "default-src 'self'; connect-src 'self'{ndt7}; script-src 'unsafe-inline'; style-src 'unsafe-inline'"
            );
            page.headers_mut().insert(
                "content-security-policy",
                policy.parse().expect("a header value"),
            );
            page
        }
        (Method::GET | Method::HEAD, "/ndt7.json") => match shared.limits.ndt7 {
            Some((port, tls)) => reply(
                StatusCode::OK,
                "application/json",
                serde_json::json!({"port": port, "tls": tls}).to_string(),
            ),
            None => reply(StatusCode::NOT_FOUND, "text/plain", &b"no ndt7 here\n"[..]),
        },
        (Method::GET | Method::HEAD, "/small") => {
            reply(StatusCode::OK, "application/octet-stream", &b"x"[..])
        }
        (Method::GET, "/large") => {
            let body = Endless {
                sent: 0,
                stop: shared.stop.clone(),
                deadline: Instant::now() + shared.limits.max_request,
            };
            let counted = CountedOnDrop {
                body,
                counters: shared.counters.clone(),
            };
            Response::builder()
                .status(StatusCode::OK)
                .header("content-type", "application/octet-stream")
                .header("cache-control", "no-store")
                .body(counted.boxed())
                .expect("a response of known parts")
        }
        (Method::POST | Method::PUT, "/slurp") => {
            // A declared length over the bound is refused before a byte of the body.
            let declared = request
                .headers()
                .get(hyper::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            if let Some(length) = declared.filter(|&l| l > shared.limits.max_upload) {
                shared.counters.refused.fetch_add(1, Ordering::Relaxed);
                let limit = shared.limits.max_upload;
                return reply(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "text/plain; charset=utf-8",
                    format!("an upload sends at most {limit} bytes; this one declares {length}\n"),
                );
            }
            if request.uri().query() == Some("progress") {
                slurp_with_progress(shared, request.into_body())
            } else {
                slurp(shared, request.into_body()).await
            }
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found: / (the speed test), /.well-known/nq, /small, /large, /slurp\n",
        ),
    }
}

/// Reads an upload to its end and drops it, within the request's time and size bounds;
/// answers how many bytes arrived.
async fn slurp(shared: &Shared, mut body: Incoming) -> Reply {
    let deadline = tokio::time::Instant::now() + shared.limits.max_request;
    let mut received: u64 = 0;
    // Counted however it ends.
    let answer = |received: u64, status: StatusCode, text: String| {
        shared
            .counters
            .uploaded
            .fetch_add(received, Ordering::Relaxed);
        reply(status, "text/plain; charset=utf-8", text)
    };
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => {
                let limit = shared.limits.max_request.as_secs();
                let why = format!("an upload lasts at most {limit} s\n");
                return answer(received, StatusCode::REQUEST_TIMEOUT, why);
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                let why = format!("the upload's body is malformed: {e}\n");
                return answer(received, StatusCode::BAD_REQUEST, why);
            }
            Ok(Some(Ok(frame))) => frame,
        };
        if let Some(data) = frame.data_ref() {
            received += data.len() as u64;
            if received > shared.limits.max_upload {
                let limit = shared.limits.max_upload;
                let why = format!("an upload sends at most {limit} bytes\n");
                return answer(received, StatusCode::PAYLOAD_TOO_LARGE, why);
            }
        }
    }
    let mut done = answer(
        received,
        StatusCode::OK,
        format!("{{\"bytes\":{received}}}"),
    );
    done.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        "application/json".parse().expect("a header value"),
    );
    done
}

/// How often `/slurp?progress` reports what has arrived, while it changes.
pub const PROGRESS_EVERY: Duration = Duration::from_millis(50);

/// `/slurp?progress`: answers at once, and while the upload lasts writes a line with the
/// bytes received so far every [`PROGRESS_EVERY`] (and at its end), so that the client
/// counts its goodput where it arrived rather than where it left: bytes a client has
/// sent may sit in its socket and HTTP/2 windows for seconds on a slow path. Needs a
/// client that reads the answer while it sends (HTTP/2; linerate's client asks for it).
/// The lines go on a clock, not as data arrives: over a deep queue a connection's data
/// comes in bursts a round trip apart, and a count sent with the next burst would put
/// the bytes of the last one in the wrong interval.
fn slurp_with_progress(shared: &Shared, mut body: Incoming) -> Reply {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    let limits = shared.limits;
    let counters = shared.counters.clone();
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + limits.max_request;
        let mut received: u64 = 0;
        let mut reported: u64 = 0;
        let mut clock = tokio::time::interval(PROGRESS_EVERY);
        clock.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                frame = tokio::time::timeout_at(deadline, body.frame()) => {
                    let Ok(Some(Ok(frame))) = frame else { break };
                    if let Some(data) = frame.data_ref() {
                        received += data.len() as u64;
                        if received > limits.max_upload {
                            break;
                        }
                    }
                }
                _ = clock.tick() => {
                    if received != reported {
                        reported = received;
                        // A client that does not read the lines loses them, not the upload.
                        let _ = tx.try_send(Bytes::from(format!("{received}\n")));
                    }
                }
            }
        }
        counters.uploaded.fetch_add(received, Ordering::Relaxed);
        let _ = tx.send(Bytes::from(format!("{received}\n"))).await;
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/plain")
        .header("cache-control", "no-store")
        .body(Lines(rx).boxed())
        .expect("a response of known parts")
}

/// A response body of the lines a channel carries, ending when the sender goes.
struct Lines(tokio::sync::mpsc::Receiver<Bytes>);

impl http_body::Body for Lines {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        self.get_mut()
            .0
            .poll_recv(cx)
            .map(|line| line.map(|l| Ok(http_body::Frame::data(l))))
    }
}

/// The large download's body, adding what it handed over to the server's count when the
/// response ends.
struct CountedOnDrop {
    body: Endless,
    counters: Arc<Counters>,
}

impl Drop for CountedOnDrop {
    fn drop(&mut self) {
        self.counters
            .downloaded
            .fetch_add(self.body.sent, Ordering::Relaxed);
    }
}

impl http_body::Body for CountedOnDrop {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }
}
