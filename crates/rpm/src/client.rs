//! `linerate rpm`: the draft's client. It reads the server's configuration, measures the
//! idle path, then for each direction adds load-generating HTTP/2 connections (an
//! endless download, or an endless upload, each) one an interval until goodput stops
//! growing, while foreign probes (a new connection each: TCP, TLS, a small object) and
//! self probes (a small object over a loading connection) time the path. A direction
//! ends when goodput and responsiveness have both saturated ([`method::Saturation`]), or
//! at its time limit, which the result says.

use crate::body::Endless;
use crate::method::{self, Probes, Saturation};
use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Empty};
use hyper::client::conn::http2::SendRequest;
use hyper::Request;
use linerate_model::clock::UnixTime;
use linerate_report::rpm::{ProbeSpread, RpmInterval, RpmLeg, RpmReport, RPM};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

type Body = BoxBody<Bytes, std::convert::Infallible>;

/// How a run goes.
#[derive(Debug, Clone)]
pub struct Options {
    /// The server as the user named it (kept with the result).
    pub target: String,
    /// The configuration's URL (`https://host:port/.well-known/nq`).
    pub config_url: String,
    /// TLS: how the server's certificate is checked (`None` over cleartext).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub interval: Duration,
    /// Each direction's time limit.
    pub leg_limit: Duration,
    pub max_connections: usize,
    /// Intervals a moving average covers, and the saturation test's spread.
    pub window: usize,
    pub tolerance: f64,
    /// Probes of each kind a second.
    pub probes_per_second: u32,
    /// Set from elsewhere to end the run at the next interval (a mesh that stops).
    pub cancel: Option<Arc<AtomicBool>>,
    /// Every connection leaves from this address (`--bind`)...
    pub bind: Option<std::net::IpAddr>,
    /// ...and through this interface or VRF device (`--bind-dev`, SO_BINDTODEVICE).
    pub bind_device: Option<String>,
}

impl Options {
    pub fn new(config_url: String, tls: Option<Arc<rustls::ClientConfig>>) -> Options {
        Options {
            target: config_url.clone(),
            config_url,
            tls,
            interval: Duration::from_secs(1),
            leg_limit: Duration::from_secs(20),
            max_connections: 16,
            window: 4,
            tolerance: 0.05,
            probes_per_second: 10,
            cancel: None,
            bind: None,
            bind_device: None,
        }
    }
}

/// The server's URLs, from its configuration.
#[derive(Debug, Clone)]
pub(crate) struct Urls {
    pub(crate) small: hyper::Uri,
    pub(crate) large: hyper::Uri,
    pub(crate) upload: hyper::Uri,
}

/// Where the probes and loads go.
#[derive(Clone)]
struct Target {
    addr: SocketAddr,
    host: String,
    tls: Option<tokio_rustls::TlsConnector>,
    bind: Option<std::net::IpAddr>,
    bind_device: Option<String>,
}

/// Stages of a new connection, seconds.
struct Opened {
    send: SendRequest<Body>,
    connect_s: f64,
    tls_s: Option<f64>,
}

/// The longest one step may take: a connection, a handshake, a small object.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(10);

async fn within<T>(what: &str, step: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    tokio::time::timeout(STEP_TIMEOUT, step)
        .await
        .map_err(|_| anyhow!("{what}: no answer within {} s", STEP_TIMEOUT.as_secs()))?
}

impl Target {
    async fn open(&self) -> Result<Opened> {
        let start = Instant::now();
        let tcp = within("connecting", async {
            let socket = if self.addr.is_ipv4() {
                tokio::net::TcpSocket::new_v4()?
            } else {
                tokio::net::TcpSocket::new_v6()?
            };
            if let Some(device) = &self.bind_device {
                socket2::SockRef::from(&socket)
                    .bind_device(Some(device.as_bytes()))
                    .with_context(|| format!("--bind-dev {device}"))?;
            }
            if let Some(address) = self.bind {
                socket
                    .bind(SocketAddr::new(address, 0))
                    .with_context(|| format!("--bind {address}"))?;
            }
            socket
                .connect(self.addr)
                .await
                .with_context(|| format!("cannot connect to {}", self.addr))
        })
        .await?;
        let _ = tcp.set_nodelay(true);
        crate::limit_unsent(&tcp);
        let connect_s = start.elapsed().as_secs_f64();
        match &self.tls {
            Some(connector) => {
                let started = Instant::now();
                let name = rustls::pki_types::ServerName::try_from(self.host.clone())
                    .map_err(|e| anyhow!("{}: {e}", self.host))?;
                let stream = within("TLS", async {
                    connector
                        .connect(name, tcp)
                        .await
                        .with_context(|| format!("TLS with {}", self.addr))
                })
                .await?;
                let tls_s = started.elapsed().as_secs_f64();
                if stream.get_ref().1.alpn_protocol() != Some(b"h2") {
                    bail!("{} does not offer HTTP/2 over TLS (ALPN h2)", self.addr);
                }
                Ok(Opened {
                    send: within("HTTP/2", handshake(stream)).await?,
                    connect_s,
                    tls_s: Some(tls_s),
                })
            }
            None => Ok(Opened {
                send: within("HTTP/2", handshake(tcp)).await?,
                connect_s,
                tls_s: None,
            }),
        }
    }
}

async fn handshake<S>(stream: S) -> Result<SendRequest<Body>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (send, connection) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .timer(hyper_util::rt::TokioTimer::new())
            .initial_stream_window_size(8 << 20)
            .initial_connection_window_size(16 << 20)
            .handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .context("HTTP/2 handshake")?;
    tokio::spawn(connection);
    Ok(send)
}

fn empty() -> Body {
    Empty::<Bytes>::new().boxed()
}

/// GETs `uri` over `send` and reads the body to its end, within [`STEP_TIMEOUT`] and
/// [`MAX_CONFIG`] bytes (a small object or a configuration): the seconds it took and the
/// body.
async fn fetch(send: &mut SendRequest<Body>, uri: &hyper::Uri) -> Result<(f64, Bytes)> {
    let start = Instant::now();
    within(&uri.to_string(), async {
        send.ready().await.context("the connection closed")?;
        let request = Request::get(uri.clone())
            .body(empty())
            .expect("a request of known parts");
        let response = send.send_request(request).await.context("request")?;
        if !response.status().is_success() {
            bail!("{uri}: {}", response.status());
        }
        let mut body = response.into_body();
        let mut bytes = Vec::new();
        while let Some(frame) = body.frame().await {
            if let Some(data) = frame.context("reading the response")?.data_ref() {
                if bytes.len() + data.len() > MAX_CONFIG {
                    bail!("{uri}: an answer over {MAX_CONFIG} bytes where a small one belongs");
                }
                bytes.extend_from_slice(data);
            }
        }
        Ok((start.elapsed().as_secs_f64(), Bytes::from(bytes)))
    })
    .await
}

/// The most a configuration may be: it is a few URLs.
const MAX_CONFIG: usize = 64 * 1024;

pub(crate) fn parse_urls(config: &[u8], tls: bool) -> Result<Urls> {
    if config.len() > MAX_CONFIG {
        bail!("the configuration is over {MAX_CONFIG} bytes");
    }
    let json: serde_json::Value =
        serde_json::from_slice(config).context("the configuration is not JSON")?;
    let url = |names: &[&str]| -> Result<hyper::Uri> {
        let text = names
            .iter()
            .find_map(|n| json["urls"][n].as_str())
            .ok_or_else(|| anyhow!("the configuration has no {}", names[0]))?;
        let uri: hyper::Uri = text.parse().with_context(|| format!("{text:?}"))?;
        match (uri.scheme_str(), tls) {
            (Some("https"), true) | (Some("http"), false) => Ok(uri),
            _ => bail!("{text}: not the configuration's scheme"),
        }
    };
    let (small, large, upload) = if tls {
        (
            ["small_https_download_url", "small_download_url"],
            ["large_https_download_url", "large_download_url"],
            ["https_upload_url", "upload_url"],
        )
    } else {
        (
            ["small_download_url", "small_https_download_url"],
            ["large_download_url", "large_https_download_url"],
            ["upload_url", "https_upload_url"],
        )
    };
    Ok(Urls {
        small: url(&small)?,
        large: url(&large)?,
        upload: url(&upload)?,
    })
}

/// Runs the test (`progress` hears each interval) on a runtime of its own.
pub fn run(options: &Options, progress: &mut (dyn FnMut(&str) + Send)) -> Result<RpmReport> {
    // On a thread of its own, which (with the runtime's) a reset connection cannot end
    // with SIGPIPE; the caller's thread keeps its disposition for its output.
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                linerate_hostinfo::block_sigpipe();
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .on_thread_start(linerate_hostinfo::block_sigpipe)
                    .enable_all()
                    .build()
                    .context("starting the client's runtime")?;
                runtime.block_on(run_async(options, progress))
            })
            .join()
            .unwrap_or_else(|_| Err(anyhow!("the client's thread panicked")))
    })
}

/// The configuration fetched and checked, then each direction's leg and the report.
async fn run_async(
    options: &Options,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<RpmReport> {
    let started_at = UnixTime::now().seconds();
    let Reached {
        config,
        tls,
        port,
        target,
    } = reach(options).await?;
    let (host, addr) = (target.host.clone(), target.addr);
    // The configuration must name this server: the loads and probes go to the address
    // it was fetched from, never to one a document merely names.
    let mut control = target.open().await?;
    let (_, document) = fetch(&mut control.send, &config).await?;
    let urls = parse_urls(&document, tls)?;
    for uri in [&urls.small, &urls.large, &urls.upload] {
        if uri.host().map(|h| h.trim_matches(|c| c == '[' || c == ']')) != Some(host.as_str())
            && tokio::net::lookup_host((uri.host().unwrap_or(""), port))
                .await
                .map_or(true, |mut a| a.all(|a| a != addr))
        {
            bail!("the configuration names {uri}, not the server it came from ({host})");
        }
    }
    progress(&format!("configuration from {}", options.config_url));

    let idle = idle(&target, &mut control, &urls).await?;
    let (idle_latency_s, idle_connect_s) = (idle.round_trip_s, idle.connect_s);
    progress(&format!(
        "idle: {:.2} ms round trip, {:.2} ms a new connection",
        idle_latency_s * 1e3,
        idle_connect_s * 1e3
    ));
    let download = leg(options, &target, &urls, true, idle_connect_s, progress).await?;
    let upload = leg(options, &target, &urls, false, idle_connect_s, progress).await?;
    let rpm = match (download.rpm, upload.rpm) {
        (Some(d), Some(u)) => Some(d.min(u)),
        (d, u) => d.or(u),
    };
    let added = match (download.added_latency_s, upload.added_latency_s) {
        (Some(d), Some(u)) => Some(d.max(u)),
        (d, u) => d.or(u),
    };
    Ok(RpmReport {
        test: RPM.into(),
        started_at,
        target: options.target.clone(),
        config_url: options.config_url.clone(),
        tls,
        idle_latency_s,
        idle_connect_s,
        download,
        upload,
        rpm,
        band: rpm.map(|r| method::rpm_band(r).to_string()),
        added_latency_s: added,
        grade: added.map(|a| method::bufferbloat_grade(a.max(0.0)).to_string()),
        idle_spread: ProbeSpread::of(&idle.round_trips),
        idle_connect_spread: ProbeSpread::of(&idle.connects),
        host: Some(linerate_hostinfo::host_facts()),
    })
}

/// The server the configuration URL names: its address resolved, its TLS set up.
struct Reached {
    config: hyper::Uri,
    tls: bool,
    port: u16,
    target: Target,
}

async fn reach(options: &Options) -> Result<Reached> {
    let config: hyper::Uri = options
        .config_url
        .parse()
        .with_context(|| format!("{}: not a URL", options.config_url))?;
    let tls = match config.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => bail!(
            "{}: the URL must be http:// or https://",
            options.config_url
        ),
    };
    let host = config
        .host()
        .ok_or_else(|| anyhow!("{}: no host", options.config_url))?
        .trim_matches(|c| c == '[' || c == ']')
        .to_string();
    let port = config.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let addr = within("resolving", async {
        tokio::net::lookup_host((host.as_str(), port))
            .await
            .with_context(|| format!("cannot resolve {host}"))?
            .next()
            .ok_or_else(|| anyhow!("{host} has no address"))
    })
    .await?;
    let connector = match (&options.tls, tls) {
        (Some(config), true) => {
            let mut config = (**config).clone();
            config.alpn_protocols = vec![b"h2".to_vec()];
            Some(tokio_rustls::TlsConnector::from(Arc::new(config)))
        }
        (None, true) => bail!("https needs a way to check the certificate"),
        (_, false) => None,
    };
    if let Some(bind) = options.bind.filter(|b| b.is_ipv4() != addr.is_ipv4()) {
        bail!("--bind {bind} cannot reach {addr} (another IP version)");
    }
    let target = Target {
        addr,
        host: host.clone(),
        tls: connector,
        bind: options.bind,
        bind_device: options.bind_device.clone(),
    };
    Ok(Reached {
        config,
        tls,
        port,
        target,
    })
}

/// The idle path's times and their trimmed means.
struct Idle {
    round_trips: Vec<f64>,
    connects: Vec<f64>,
    round_trip_s: f64,
    connect_s: f64,
}

/// The idle path: 20 small objects over the open connection, and 10 new connections'
/// TCP handshakes (the open one's among them).
async fn idle(target: &Target, control: &mut Opened, urls: &Urls) -> Result<Idle> {
    let mut round_trips = Vec::new();
    for _ in 0..20 {
        round_trips.push(fetch(&mut control.send, &urls.small).await?.0);
    }
    let mut connects = vec![control.connect_s];
    for _ in 0..9 {
        connects.push(target.open().await?.connect_s);
    }
    Ok(Idle {
        round_trip_s: method::trimmed_mean(&round_trips, method::TRIM_KEEP).unwrap_or(0.0),
        connect_s: method::trimmed_mean(&connects, method::TRIM_KEEP).unwrap_or(0.0),
        round_trips,
        connects,
    })
}

/// One probe's outcome.
enum Probe {
    Foreign {
        connect_s: f64,
        tls_s: Option<f64>,
        http_s: f64,
    },
    Own {
        http_s: f64,
    },
    Failed,
}

/// An upload's progress lines from the server (`/slurp?progress`): each a count of the
/// bytes received so far. Bounded: a line is at most 24 bytes (a count has at most 20
/// digits); anything else is not a count and is dropped, as is a count that goes back.
#[derive(Debug, Default)]
pub struct UploadProgress {
    reported: u64,
    line: Vec<u8>,
    overlong: bool,
}

impl UploadProgress {
    /// Takes the answer's next bytes; returns the bytes newly received by the server.
    pub fn take(&mut self, data: &[u8]) -> u64 {
        let mut arrived = 0;
        for &b in data {
            if b != b'\n' {
                if self.line.len() < 24 {
                    self.line.push(b);
                } else {
                    self.overlong = true;
                }
                continue;
            }
            let count = (!self.overlong)
                .then(|| std::str::from_utf8(&self.line).ok()?.parse::<u64>().ok())
                .flatten();
            self.line.clear();
            self.overlong = false;
            if let Some(count) = count.filter(|&c| c >= self.reported) {
                arrived += count - self.reported;
                self.reported = count;
            }
        }
        arrived
    }
}

/// A loading connection: its sender (for self probes) and its task.
struct Load {
    send: SendRequest<Body>,
    task: tokio::task::JoinHandle<()>,
}

async fn add_load(
    target: &Target,
    urls: &Urls,
    download: bool,
    bytes: &Arc<AtomicU64>,
    stop: &Arc<AtomicBool>,
    limit: Duration,
) -> Result<Load> {
    let opened = target.open().await?;
    let mut send = opened.send;
    within("a loading connection", async {
        send.ready().await.context("the connection closed")
    })
    .await?;
    let request = if download {
        Request::get(urls.large.clone())
            .body(empty())
            .expect("a request of known parts")
    } else {
        // What left is not what arrived: the server reports what arrived (`?progress`),
        // and that is what counts.
        let body = Endless {
            sent: 0,
            stop: stop.clone(),
            deadline: Instant::now() + limit,
        };
        let mut parts = urls.upload.clone().into_parts();
        parts.path_and_query = Some(
            format!("{}?progress", urls.upload.path())
                .parse()
                .context("the upload URL")?,
        );
        Request::post(hyper::Uri::from_parts(parts).context("the upload URL")?)
            .header("content-type", "application/octet-stream")
            .body(body.boxed())
            .expect("a request of known parts")
    };
    let response = send.send_request(request);
    let (bytes, stop) = (bytes.clone(), stop.clone());
    let task = tokio::spawn(async move {
        let Ok(response) = response.await else {
            return;
        };
        let mut body = response.into_body();
        let mut progress = UploadProgress::default();
        while !stop.load(Ordering::Relaxed) {
            let Some(Ok(frame)) = body.frame().await else {
                break;
            };
            let Some(data) = frame.data_ref() else {
                continue;
            };
            let arrived = if download {
                data.len() as u64
            } else {
                progress.take(data)
            };
            bytes.fetch_add(arrived, Ordering::Relaxed);
        }
    });
    Ok(Load { send, task })
}

/// One foreign probe (a new connection: TCP, TLS, the small object) and one self probe
/// (the small object over `own`, a loading connection), each reporting on `tx`.
fn send_probes(
    target: &Target,
    small: &hyper::Uri,
    mut own: SendRequest<Body>,
    tx: &tokio::sync::mpsc::UnboundedSender<Probe>,
) {
    let (t, foreign_tx, uri) = (target.clone(), tx.clone(), small.clone());
    tokio::spawn(async move {
        let outcome = async {
            let mut opened = t.open().await?;
            let (http_s, _) = fetch(&mut opened.send, &uri).await?;
            Ok::<_, anyhow::Error>(Probe::Foreign {
                connect_s: opened.connect_s,
                tls_s: opened.tls_s,
                http_s,
            })
        }
        .await;
        let _ = foreign_tx.send(outcome.unwrap_or(Probe::Failed));
    });
    let (own_tx, uri) = (tx.clone(), small.clone());
    tokio::spawn(async move {
        let _ = own_tx.send(match fetch(&mut own, &uri).await {
            Ok((http_s, _)) => Probe::Own { http_s },
            Err(_) => Probe::Failed,
        });
    });
}

/// The probes that have reported since the last call, by kind; counts them and the
/// failed.
fn tally(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Probe>,
    probes: &mut usize,
    failed: &mut usize,
) -> Probes {
    let mut now = Probes::default();
    while let Ok(probe) = rx.try_recv() {
        *probes += 1;
        match probe {
            Probe::Foreign {
                connect_s,
                tls_s,
                http_s,
            } => {
                now.connect_s.push(connect_s);
                now.tls_s.extend(tls_s);
                now.http_foreign_s.push(http_s);
            }
            Probe::Own { http_s } => now.http_self_s.push(http_s),
            Probe::Failed => *failed += 1,
        }
    }
    now
}

/// The probes of the last `window` intervals, together.
fn latest(windows: &[Probes], window: usize) -> Probes {
    let mut recent = Probes::default();
    for w in &windows[windows.len().saturating_sub(window)..] {
        recent.extend(w);
    }
    recent
}

/// What `progress` hears at the end of an interval.
fn interval_line(direction: &str, interval: &RpmInterval) -> String {
    format!(
        "{direction} {:>4.1} s: {:>9.2} Mbit/s over {:>2} connections, RPM {}",
        interval.end_s,
        interval.goodput_bps / 1e6,
        interval.connections,
        interval.rpm.map_or("-".to_string(), |r| format!("{r:.0}"))
    )
}

// Long: one direction of the draft's test: each interval adds loads, probes and checks
// saturation, in the draft's order.
async fn leg(
    options: &Options,
    target: &Target,
    urls: &Urls,
    download: bool,
    idle_connect_s: f64,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<RpmLeg> {
    let direction = if download { "download" } else { "upload" };
    let bytes = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let limit = options.leg_limit + Duration::from_secs(5);
    let mut loads = vec![add_load(target, urls, download, &bytes, &stop, limit).await?];
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Probe>();
    let start = tokio::time::Instant::now();
    let started_unix_s = UnixTime::now().seconds();
    let probe_every = Duration::from_secs_f64(1.0 / options.probes_per_second.max(1) as f64);
    let mut next_probe = start;
    let mut goodput = Saturation::new(options.window, options.tolerance);
    let mut responsiveness = Saturation::new(options.window, options.tolerance);
    let mut windows: Vec<Probes> = Vec::new();
    let mut intervals = Vec::new();
    let mut last_bytes = 0;
    let mut last_tick = start;
    let mut rpm = None;
    let (mut probes, mut failed) = (0, 0);
    let mut turn = 0usize;
    let mut tick = 1u32;
    loop {
        let boundary = start + options.interval * tick;
        // Probes until the interval's end, one of each kind every `probe_every`.
        while next_probe < boundary {
            tokio::time::sleep_until(next_probe).await;
            next_probe += probe_every;
            turn = (turn + 1) % loads.len();
            send_probes(target, &urls.small, loads[turn].send.clone(), &tx);
        }
        tokio::time::sleep_until(boundary).await;
        if options
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
        {
            stop.store(true, Ordering::Relaxed);
            bail!("stopped during the {direction}");
        }
        let now = tally(&mut rx, &mut probes, &mut failed);
        windows.push(now);
        let total = bytes.load(Ordering::Relaxed);
        // Over the time the bytes took: a tick comes late when adding a load took longer
        // than an interval (a SYN lost in a full queue waits a second to be sent again),
        // and the interval after it is as much shorter.
        let ticked = tokio::time::Instant::now();
        let seconds = ticked.duration_since(last_tick).as_secs_f64().max(1e-3);
        let bps = (total - last_bytes) as f64 * 8.0 / seconds;
        (last_bytes, last_tick) = (total, ticked);
        let current = method::responsiveness(&latest(&windows, options.window));
        let goodput_saturated = goodput.add_weighted(bps, seconds);
        let rpm_saturated = current.is_some_and(|r| responsiveness.add(r));
        rpm = current.or(rpm);
        intervals.push(RpmInterval {
            end_s: start.elapsed().as_secs_f64(),
            connections: loads.len(),
            goodput_bps: bps,
            rpm: current,
        });
        progress(&interval_line(
            direction,
            intervals.last().expect("just pushed"),
        ));
        let out_of_time = start.elapsed() + options.interval > options.leg_limit;
        if (goodput_saturated && rpm_saturated) || out_of_time {
            break;
        }
        if !goodput_saturated && loads.len() < options.max_connections {
            match add_load(target, urls, download, &bytes, &stop, limit).await {
                Ok(load) => loads.push(load),
                Err(_) => failed += 1,
            }
        }
        tick += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for load in &loads {
        load.task.abort();
    }
    let recent = latest(&windows, options.window);
    let loaded_connect_s = method::trimmed_mean(&recent.connect_s, method::TRIM_KEEP);
    Ok(RpmLeg {
        direction: direction.into(),
        started_unix_s,
        capacity_bps: goodput.average().unwrap_or(0.0),
        rpm,
        goodput_saturated: goodput.saturated(),
        rpm_saturated: responsiveness.saturated(),
        connections: loads.len(),
        loaded_connect_s,
        loaded_self_s: method::trimmed_mean(&recent.http_self_s, method::TRIM_KEEP),
        added_latency_s: loaded_connect_s.map(|l| l - idle_connect_s),
        probes,
        failed_probes: failed,
        intervals,
        loaded_self_spread: ProbeSpread::of(&recent.http_self_s),
        loaded_connect_spread: ProbeSpread::of(&recent.connect_s),
    })
}
