//! POSTs in the background: a bounded queue (the oldest request dropped, and counted, when
//! it is full), a sender thread on a one-thread Tokio runtime with hyper's HTTP/1.1
//! client, retries with backoff on a failed connection or a 5xx, none on a 4xx (the
//! receiver refused the request itself). Remote-write and the alerts send through it; a
//! result never waits on the network.

// Sending over HTTP waits and retries on the clock; the board and the assessments take it.
#![allow(clippy::disallowed_methods)]

use anyhow::{bail, Context, Result};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Requests waiting, at most.
pub const QUEUE: usize = 4096;
/// Tries of a request after its first before it is dropped.
const RETRIES: u32 = 5;
const TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a response read (and dropped).
const MAX_ANSWER: usize = 64 * 1024;

/// Where to send: host, port and path of an http:// URL.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub host: String,
    pub port: u16,
    pub path: String,
}

/// An http:// URL; https is refused with the reason (no TLS client for it here yet).
pub fn target(url: &str) -> Result<Target> {
    if url.starts_with("https://") {
        bail!(
            "'{url}': https is not supported here yet; use http:// (a local receiver or a proxy)"
        );
    }
    let Some(rest) = url.strip_prefix("http://") else {
        bail!("'{url}' is not an http:// URL");
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .with_context(|| format!("'{url}': an IPv6 address needs its closing ']'"))?;
        match after.strip_prefix(':') {
            Some(p) => (
                host,
                p.parse()
                    .with_context(|| format!("'{url}': port '{p}' is not a port"))?,
            ),
            None => (host, 80),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (
                h,
                p.parse()
                    .with_context(|| format!("'{url}': port '{p}' is not a port"))?,
            ),
            None => (authority, 80),
        }
    };
    if host.is_empty() {
        bail!("'{url}' names no host");
    }
    Ok(Target {
        host: host.to_string(),
        port,
        path: path.to_string(),
    })
}

impl Target {
    /// The same host and port, another path.
    pub fn at(&self, path: &str) -> Target {
        Target {
            path: path.to_string(),
            ..self.clone()
        }
    }
}

pub struct Request {
    pub target: Target,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    /// Shared, so that a retry does not copy it.
    pub body: Bytes,
}

/// What was sent and what was not.
#[derive(Debug, Default)]
pub struct Counts {
    pub sent: AtomicU64,
    pub dropped: AtomicU64,
    pub failed_tries: AtomicU64,
}

struct Queue {
    requests: Mutex<VecDeque<Request>>,
    wake: Condvar,
}

pub struct Poster {
    queue: Arc<Queue>,
    stop: Arc<AtomicBool>,
    pub counts: Arc<Counts>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Poster {
    pub fn start(name: &str) -> Result<Poster> {
        let queue = Arc::new(Queue {
            requests: Mutex::new(VecDeque::new()),
            wake: Condvar::new(),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts::default());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .with_context(|| format!("starting {name}'s runtime"))?;
        let (q, s, c) = (queue.clone(), stop.clone(), counts.clone());
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                linerate_hostinfo::block_sigpipe();
                send_loop(&runtime, &q, &s, &c)
            })
            .with_context(|| format!("starting {name}'s thread"))?;
        Ok(Poster {
            queue,
            stop,
            counts,
            thread: Some(thread),
        })
    }

    pub fn push(&self, request: Request) {
        let mut requests = self
            .queue
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if requests.len() >= QUEUE {
            requests.pop_front();
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
        }
        requests.push_back(request);
        self.queue.wake.notify_one();
    }
}

impl Drop for Poster {
    /// Sends what is queued (each request within its tries), then stops.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.queue.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn send_loop(runtime: &tokio::runtime::Runtime, queue: &Queue, stop: &AtomicBool, counts: &Counts) {
    loop {
        let request = {
            let mut requests = queue.requests.lock().unwrap_or_else(|e| e.into_inner());
            while requests.is_empty() && !stop.load(Ordering::Relaxed) {
                requests = queue
                    .wake
                    .wait_timeout(requests, Duration::from_millis(500))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            match requests.pop_front() {
                Some(request) => request,
                None => return,
            }
        };
        let mut delay = Duration::from_millis(250);
        for attempt in 0..=RETRIES {
            match runtime.block_on(post(&request)) {
                Ok(status) if status.is_success() => {
                    counts.sent.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Ok(status) if status.is_client_error() => {
                    counts.failed_tries.fetch_add(1, Ordering::Relaxed);
                    counts.dropped.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                _ => {
                    counts.failed_tries.fetch_add(1, Ordering::Relaxed);
                    // Stopping: one try each, so that a stop is not held by a dead receiver.
                    if attempt == RETRIES || stop.load(Ordering::Relaxed) {
                        counts.dropped.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}

/// One POST; the response's status.
async fn post(request: &Request) -> Result<hyper::StatusCode> {
    let target = &request.target;
    let connect = tokio::net::TcpStream::connect((target.host.as_str(), target.port));
    let stream = tokio::time::timeout(TIMEOUT, connect)
        .await
        .context("connecting timed out")??;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let host = if target.host.contains(':') {
        format!("[{}]:{}", target.host, target.port)
    } else {
        format!("{}:{}", target.host, target.port)
    };
    let mut builder = hyper::Request::post(&target.path)
        .header("host", host)
        .header("content-type", request.content_type)
        .header(
            "user-agent",
            concat!("linerate/", env!("CARGO_PKG_VERSION")),
        );
    for (name, value) in &request.headers {
        builder = builder.header(*name, value);
    }
    let http = builder.body(Full::new(request.body.clone()))?;
    let response = tokio::time::timeout(TIMEOUT, sender.send_request(http))
        .await
        .context("the receiver did not answer in time")??;
    let status = response.status();
    let body = http_body_util::Limited::new(response.into_body(), MAX_ANSWER);
    let _ = tokio::time::timeout(TIMEOUT, body.collect()).await;
    Ok(status)
}
