//! The HTTP listener of `--metrics ADDR`: `/metrics` (OpenMetrics), `/` (the live grid),
//! `/api/grid` and `/api/history` (its JSON). hyper serves HTTP/1.1 on a Tokio runtime of
//! one thread of its own; every handler only reads the board. Bounded like every server
//! path (linerate-http): at most [`MAX_CONNECTIONS`] at once and [`MAX_PER_CLIENT`] from
//! one address (an IPv6 /64), a newcomer taking an idle place of the largest holder at
//! the cap; the first request within [`HEAD_TIMEOUT`] of the accept, [`IDLE_TIMEOUT`]
//! between requests, a head of at most [`MAX_HEAD`] bytes, bodies never read, a
//! connection closed after [`CONNECTION_LIFETIME`].

// The HTTP listener stamps what it serves with the wall clock; the board takes it.
#![allow(clippy::disallowed_methods)]

use crate::assess::Thresholds;
use crate::board::Board;
use crate::past::PastSource;
use crate::{grid, openmetrics};
use anyhow::{Context, Result};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use linerate_model::clock::UnixTime;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const MAX_CONNECTIONS: usize = 64;
/// A scraper or two and a few browser tabs from one address; a client holding more
/// locks nobody out (see the module's note).
pub const MAX_PER_CLIENT: usize = 16;
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Prometheus keeps its connection between scrapes (every 15 s by default, a minute at
/// most in common use): a connection idle longer is closed and reopened by the scraper.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
pub const MAX_HEAD: usize = 16 * 1024;
/// The longest a connection lasts (a scraper keeping one open reconnects after it).
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(600);

/// The running listener; dropped, it stops.
pub struct MetricsServer {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the handlers read.
#[derive(Clone)]
struct Shared {
    board: Arc<Mutex<Board>>,
    /// The board's text, kept between scrapes.
    exposition: Arc<Mutex<openmetrics::Exposition>>,
    /// The page's title: the mesh's name, or "serve".
    title: Arc<str>,
    thresholds: Thresholds,
    /// The mesh's store, for the grid's plot over days (none for `serve`, or a mesh
    /// without a store: the plot then has the board's recent results only).
    past: Option<Arc<dyn PastSource>>,
}

/// Store reads at once for the plot over days, each on a thread of its own beside the
/// listener's (they wait their turn at the store's writer anyway).
const PAST_READERS: usize = 2;

/// Listens on `addr` (port 0: one of the system's) and serves until dropped.
pub fn start(
    addr: SocketAddr,
    board: Arc<Mutex<Board>>,
    title: &str,
    thresholds: Thresholds,
    past: Option<Arc<dyn PastSource>>,
) -> Result<MetricsServer> {
    // Every address ([::]) on a host without IPv6: every IPv4 address instead.
    let listener = std::net::TcpListener::bind(addr)
        .or_else(|e| match addr.ip() {
            std::net::IpAddr::V6(ip) if ip.is_unspecified() => {
                std::net::TcpListener::bind((std::net::Ipv4Addr::UNSPECIFIED, addr.port()))
            }
            _ => Err(e),
        })
        .with_context(|| format!("cannot listen for metrics on {addr}"))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let exposition = Arc::new(Mutex::new(openmetrics::Exposition::new(board.clone())));
    let shared = Shared {
        board,
        exposition,
        title: title.into(),
        thresholds,
        past,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .max_blocking_threads(PAST_READERS)
        .build()
        .context("starting the metrics listener's runtime")?;
    let thread = std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || {
            linerate_hostinfo::block_sigpipe();
            // Every series encoded once before the first scrape asks (a coordinator's
            // board, seeded from its store, can hold tens of thousands): scrapes then only
            // re-encode what changed.
            shared
                .exposition
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .render(openmetrics::Format::OpenMetrics);
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                serve(listener, shared, stopping).await;
            })
        })
        .context("starting the metrics listener's thread")?;
    Ok(MetricsServer {
        addr,
        stop,
        thread: Some(thread),
    })
}

/// The grid page's Content-Security-Policy: its own inline script and style, its API
/// from the same origin, nothing from elsewhere, never framed.
pub const PAGE_POLICY: &str = "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; frame-ancestors 'none'";

async fn serve(listener: tokio::net::TcpListener, shared: Shared, stop: Arc<AtomicBool>) {
    let guard = linerate_http::Guard::new(linerate_http::Limits {
        max_connections: MAX_CONNECTIONS,
        max_per_client: MAX_PER_CLIENT,
        first_request: HEAD_TIMEOUT,
        idle: IDLE_TIMEOUT,
        v6_prefix: 64,
    });
    while !stop.load(Ordering::Relaxed) {
        let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
        let Ok(Ok((stream, peer))) = accepted else {
            continue;
        };
        // Over a bound with no idle place to take: closed at once (the scraper retries;
        // the board is not going anywhere).
        let Ok(slot) = guard.admit(peer.ip()) else {
            drop(stream);
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let activity = slot.activity();
            let io = hyper_util::rt::TokioIo::new(stream);
            let service = hyper::service::service_fn(move |request| {
                let busy = activity.begin();
                let page = request.uri().path() == "/";
                // The plot over days reads the store: off the listener's thread.
                let long = long_history(&shared, &request);
                let mut response = long.is_none().then(|| route(&shared, &request));
                async move {
                    let mut response = match (response.take(), long) {
                        (Some(response), _) => response,
                        (None, Some(read)) => {
                            tokio::task::spawn_blocking(read).await.unwrap_or_else(|_| {
                                reply(
                                    StatusCode::INTERNAL_SERVER_ERROR,
                                    "text/plain; charset=utf-8",
                                    "reading the pair's past failed\n",
                                )
                            })
                        }
                        (None, None) => unreachable!("one of the two is set"),
                    };
                    linerate_http::secure(response.headers_mut(), page.then_some(PAGE_POLICY));
                    let response = response.map(|body| linerate_http::Tracked::new(body, busy));
                    Ok::<_, std::convert::Infallible>(response)
                }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .max_buf_size(MAX_HEAD)
                .serve_connection(io, service);
            slot.hold(tokio::time::timeout(CONNECTION_LIFETIME, connection))
                .await;
        });
    }
}

fn reply(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .header("cache-control", "no-store")
        .body(Full::new(body.into()))
        .expect("a response of known parts")
}

/// Whether an `Accept-Encoding` value takes gzip (`gzip` or `*`, not at `q=0`).
pub fn accepts_gzip(accept_encoding: &str) -> bool {
    accept_encoding.split(',').any(|item| {
        let mut parts = item.split(';').map(str::trim);
        let coding = parts.next().unwrap_or("");
        let refused = parts.any(|p| {
            p.strip_prefix("q=")
                .and_then(|q| q.parse::<f64>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
    })
}

/// The exposition gzipped at the fastest level, written through a buffer that stays in
/// cache: most of a scrape's text is its labels again and again, which the fastest level
/// already takes to a twentieth (a 100-host mesh's 57 MiB to 3 MiB, in about 20 ms with zlib-rs).
pub fn gzip(exposition: &mut openmetrics::Exposition, format: openmetrics::Format) -> Vec<u8> {
    let encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut buffered = std::io::BufWriter::with_capacity(256 * 1024, encoder);
    exposition
        .write(format, &mut buffered)
        .and_then(|_| buffered.into_inner().map_err(|e| e.into_error()))
        .and_then(|encoder| encoder.finish())
        .expect("writing to a Vec does not fail")
}

/// A read of the store, on a blocking thread, and its response.
type PastRead = Box<dyn FnOnce() -> Response<Full<Bytes>> + Send>;

/// A blocking read for `/api/history?...&days=N` when the mesh has a store; `None` for
/// every other request (answered by [`route`]).
fn long_history(shared: &Shared, request: &Request<Incoming>) -> Option<PastRead> {
    if request.method() != Method::GET || request.uri().path() != "/api/history" {
        return None;
    }
    let query = request.uri().query().unwrap_or("").to_string();
    let days = match crate::past::days_of(&query) {
        Ok(Some(days)) => days,
        Ok(None) => return None,
        Err(why) => {
            return Some(Box::new(move || {
                reply(
                    StatusCode::BAD_REQUEST,
                    "text/plain; charset=utf-8",
                    format!("{why}\n"),
                )
            }))
        }
    };
    let past = shared.past.clone()?;
    let (board, thresholds) = (shared.board.clone(), shared.thresholds);
    Some(Box::new(move || {
        let now = UnixTime::now().seconds();
        match crate::past::long_history_json(&board, &query, days, &thresholds, &*past, now) {
            Ok(json) => reply(StatusCode::OK, "application/json", json.to_string()),
            Err(why) => reply(
                StatusCode::BAD_REQUEST,
                "text/plain; charset=utf-8",
                format!("{why}\n"),
            ),
        }
    }))
}

fn route(shared: &Shared, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "only GET\n",
        );
    }
    let query = request.uri().query().unwrap_or("");
    match request.uri().path() {
        "/metrics" => {
            // OpenMetrics for a scraper that asks for it (Prometheus does), else the
            // classic text format; gzipped when the scraper takes it (Prometheus does): a
            // 100-host mesh's text is 57 MiB, and 3 MiB gzipped.
            let header = |name| {
                request
                    .headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
            };
            let format = if header(hyper::header::ACCEPT).contains("application/openmetrics-text") {
                openmetrics::Format::OpenMetrics
            } else {
                openmetrics::Format::Classic
            };
            let mut exposition = shared.exposition.lock().unwrap_or_else(|e| e.into_inner());
            if accepts_gzip(header(hyper::header::ACCEPT_ENCODING)) {
                let mut response = reply(
                    StatusCode::OK,
                    format.content_type(),
                    gzip(&mut exposition, format),
                );
                response.headers_mut().insert(
                    hyper::header::CONTENT_ENCODING,
                    "gzip".parse().expect("a token"),
                );
                response
            } else {
                reply(
                    StatusCode::OK,
                    format.content_type(),
                    exposition.render(format),
                )
            }
        }
        "/" => {
            let initial = {
                let board = shared.board.lock().unwrap_or_else(|e| e.into_inner());
                grid::grid_json(&board, &shared.thresholds)
            };
            reply(
                StatusCode::OK,
                "text/html; charset=utf-8",
                grid::page(&shared.title, &initial),
            )
        }
        "/api/grid" => {
            let board = shared.board.lock().unwrap_or_else(|e| e.into_inner());
            reply(
                StatusCode::OK,
                "application/json",
                grid::grid_json(&board, &shared.thresholds),
            )
        }
        "/api/history" => {
            let board = shared.board.lock().unwrap_or_else(|e| e.into_inner());
            match grid::history_json(&board, query, &shared.thresholds) {
                Ok(json) => reply(StatusCode::OK, "application/json", json.to_string()),
                Err(why) => reply(
                    StatusCode::BAD_REQUEST,
                    "text/plain; charset=utf-8",
                    format!("{why}\n"),
                ),
            }
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found: /metrics, / (the grid), /api/grid, /api/history\n",
        ),
    }
}
