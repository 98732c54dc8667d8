//! `linerate ndt7`: the download and upload subtests against any ndt7 server (M-Lab's,
//! `linerate serve --ndt7`), each over its own connection, as the spec's clients run
//! them: the download counted here as it arrives, the upload's figure the server's own
//! count from its measurement messages.

use crate::frames::{DataCount, Watched};
use crate::session::{self, Heard, Listener};
use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use linerate_model::ndt7::{
    self as spec, LocatedServer, Measurement, MessageSizer, Subtest, SubtestEnd, SubtestResult,
};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// A client's wait for the TCP connect, the TLS handshake and the upgrade, each.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a client waits for a download to end (the spec's server closes at 13 s at
/// the latest; M-Lab's clients wait 15 s).
pub const DOWNLOAD_BOUND: Duration = Duration::from_secs(15);
/// The wait for the server's Close after the client's.
const CLOSE_WAIT: Duration = Duration::from_secs(3);

/// Where the server is and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub host: String,
    pub port: u16,
    /// wss:// (TLS) or ws://.
    pub tls: bool,
    /// A server a locate answer gave: its subtests' own URLs (with their access tokens).
    pub located: Option<LocatedServer>,
}

impl Target {
    /// `HOST`, `HOST:PORT`, `[V6]:PORT`, or a `wss://`, `ws://`, `https://` or `http://`
    /// URL (its path is ignored: the subtests' paths are the spec's). TLS on 443 unless
    /// `cleartext` (then 80) or the scheme says otherwise.
    pub fn parse(text: &str, cleartext: bool) -> Result<Target, String> {
        let (tls, rest) = match text.split_once("://") {
            Some(("wss" | "https", rest)) => (true, rest),
            Some(("ws" | "http", rest)) => (false, rest),
            Some((scheme, _)) => {
                return Err(format!(
                    "{text}: the scheme {scheme}:// is not ndt7's (wss:// or ws://)"
                ))
            }
            None => (!cleartext, text),
        };
        let authority = rest.split(['/', '?']).next().unwrap_or("");
        if authority.is_empty() {
            return Err(format!("{text}: no host"));
        }
        let default_port = if tls { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("{text}: an IPv6 address without its ']'"))?;
            let port = match after.strip_prefix(':') {
                Some(port) => parse_port(text, port)?,
                None if after.is_empty() => default_port,
                None => return Err(format!("{text}: {after:?} after the IPv6 address")),
            };
            (host.to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) if !host.contains(':') => {
                    (host.to_string(), parse_port(text, port)?)
                }
                Some(_) => {
                    return Err(format!(
                        "{text}: an IPv6 address needs [brackets] around it"
                    ))
                }
                None => (authority.to_string(), default_port),
            }
        };
        Ok(Target {
            host,
            port,
            tls,
            located: None,
        })
    }

    /// A server a locate answer offered: both its URLs name one host and port.
    pub fn located(server: LocatedServer) -> Result<Target, String> {
        let download = Target::parse(&server.download_url, false)?;
        let upload = Target::parse(&server.upload_url, false)?;
        if (&download.host, download.port, download.tls) != (&upload.host, upload.port, upload.tls)
        {
            return Err(format!(
                "{}: its download and upload URLs name different servers",
                server.machine
            ));
        }
        Ok(Target {
            located: Some(server),
            ..download
        })
    }

    /// The subtest's URL, with the client's metadata in the query string.
    pub fn url(&self, subtest: Subtest) -> String {
        let metadata = format!(
            "client_name=linerate&client_version={}",
            env!("CARGO_PKG_VERSION")
        );
        if let Some(server) = &self.located {
            let url = server.url(subtest);
            let joint = if url.contains('?') { '&' } else { '?' };
            return format!("{url}{joint}{metadata}");
        }
        let scheme = if self.tls { "wss" } else { "ws" };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!(
            "{scheme}://{host}:{}{}?{metadata}",
            self.port,
            subtest.path(),
        )
    }
}

/// Asks a locate service (M-Lab's v2, [`spec::MLAB_LOCATE_URL`], or one like it) for the
/// nearest ndt7 servers: an HTTPS (or, for a lab's, HTTP) GET, its answer read within
/// [`spec::MAX_LOCATE_ANSWER`] and [`HANDSHAKE_TIMEOUT`] for each step.
pub fn locate(
    url: &str,
    tls: Option<Arc<rustls::ClientConfig>>,
    cleartext: bool,
) -> Result<Vec<LocatedServer>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the locate client's runtime")?;
    let answer = runtime.block_on(fetch(url, tls))?;
    spec::parse_locate(&answer, !cleartext).map_err(|e| anyhow!("{url}: {e}"))
}

async fn fetch(url: &str, tls: Option<Arc<rustls::ClientConfig>>) -> Result<Bytes> {
    let uri: hyper::Uri = url.parse().with_context(|| format!("{url}: not a URL"))?;
    let secure = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => bail!("{url}: a locate URL is https:// or http://"),
    };
    let host = uri
        .host()
        .ok_or_else(|| anyhow!("{url}: no host"))?
        .trim_matches(['[', ']'])
        .to_string();
    let port = uri.port_u16().unwrap_or(if secure { 443 } else { 80 });
    let step =
        |what: &'static str| move |_| anyhow!("{url}: no {what} within {HANDSHAKE_TIMEOUT:?}");
    let tcp = tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await
    .map_err(step("connection"))?
    .with_context(|| format!("cannot connect to {host}:{port}"))?;
    let request = hyper::Request::get(uri.path_and_query().map_or("/", |p| p.as_str()))
        .header(
            hyper::header::HOST,
            uri.authority().map_or("", |a| a.as_str()),
        )
        .header(
            hyper::header::USER_AGENT,
            concat!("linerate/", env!("CARGO_PKG_VERSION")),
        )
        .body(http_body_util::Empty::<Bytes>::new())
        .context("the locate request")?;
    let response = if secure {
        let mut config =
            (*tls.ok_or_else(|| anyhow!("https:// needs a TLS configuration"))?).clone();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let name = rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|e| anyhow!("{host}: not a name TLS can check: {e}"))?;
        let stream = tokio::time::timeout(
            HANDSHAKE_TIMEOUT,
            tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp),
        )
        .await
        .map_err(step("TLS handshake"))?
        .context("the locate service's TLS handshake failed")?;
        tokio::time::timeout(HANDSHAKE_TIMEOUT, get(stream, request)).await
    } else {
        tokio::time::timeout(HANDSHAKE_TIMEOUT, get(tcp, request)).await
    };
    response.map_err(step("answer"))?
}

/// One HTTP/1.1 request over `stream`; the answer's body within the locate bound, or
/// why not.
async fn get<S>(stream: S, request: hyper::Request<http_body_util::Empty<Bytes>>) -> Result<Bytes>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    use http_body_util::BodyExt;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .context("the locate service's HTTP")?;
    tokio::spawn(connection);
    let response = sender
        .send_request(request)
        .await
        .context("the locate request")?;
    let status = response.status();
    let body = http_body_util::Limited::new(response.into_body(), spec::MAX_LOCATE_ANSWER)
        .collect()
        .await
        .map_err(|e| anyhow!("the locate answer: {e}"))?
        .to_bytes();
    if !status.is_success() {
        bail!(
            "the locate service answered {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)]).trim()
        );
    }
    Ok(body)
}

fn parse_port(text: &str, port: &str) -> Result<u16, String> {
    port.parse::<u16>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("{text}: {port:?} is not a port (1 to 65535)"))
}

/// What a client run does.
#[derive(Clone)]
pub struct Options {
    pub target: Target,
    pub subtests: Vec<Subtest>,
    /// The TLS client configuration (its certificate checks as the user asked).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// How long the client sends in an upload (the spec's 10 s).
    pub upload_runtime: Duration,
}

/// Runs the subtests in order; `progress` is told of each as it starts and ends. A
/// subtest that could not start fails the run; one that ended abruptly is recorded.
pub fn run(options: &Options, progress: &mut dyn FnMut(&str)) -> Result<Vec<SubtestResult>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the ndt7 client's runtime")?;
    linerate_hostinfo::block_sigpipe();
    let mut results = Vec::new();
    for &subtest in &options.subtests {
        let url = options.target.url(subtest);
        progress(&format!("{} from {url}", subtest.name()));
        let result = runtime
            .block_on(one(options, subtest, &url))
            .with_context(|| format!("ndt7 {} at {url}", subtest.name()))?;
        progress(&format!(
            "{}: {:.2} Mbit/s ({})",
            subtest.name(),
            result.goodput_bps / 1e6,
            result.counted_by
        ));
        results.push(result);
    }
    Ok(results)
}

async fn one(options: &Options, subtest: Subtest, url: &str) -> Result<SubtestResult> {
    let target = &options.target;
    let tcp = tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        tokio::net::TcpStream::connect((target.host.as_str(), target.port)),
    )
    .await
    .map_err(|_| anyhow!("no TCP connection within {HANDSHAKE_TIMEOUT:?}"))?
    .with_context(|| format!("cannot connect to {}:{}", target.host, target.port))?;
    let fd = tcp.as_raw_fd();
    let remote = tcp.peer_addr()?;
    let local = tcp.local_addr()?;
    if target.tls {
        let config = options
            .tls
            .clone()
            .ok_or_else(|| anyhow!("wss:// needs a TLS configuration"))?;
        let name = rustls::pki_types::ServerName::try_from(target.host.clone())
            .map_err(|e| anyhow!("{}: not a name TLS can check: {e}", target.host))?;
        let stream = tokio::time::timeout(
            HANDSHAKE_TIMEOUT,
            tokio_rustls::TlsConnector::from(config).connect(name, tcp),
        )
        .await
        .map_err(|_| anyhow!("no TLS handshake within {HANDSHAKE_TIMEOUT:?}"))?
        .context("the TLS handshake failed")?;
        let watched = Watched::of_server(stream, Instant::now());
        let count = (subtest == Subtest::Download).then(|| (watched.count(), watched.started()));
        let ws = upgrade(watched, url).await?;
        Ok(subtest_over(ws, count, options, subtest, fd, local, remote).await)
    } else {
        let watched = Watched::of_server(tcp, Instant::now());
        let count = (subtest == Subtest::Download).then(|| (watched.count(), watched.started()));
        let ws = upgrade(watched, url).await?;
        Ok(subtest_over(ws, count, options, subtest, fd, local, remote).await)
    }
}

/// The WebSocket upgrade with ndt7's subprotocol; a server that does not choose it is
/// not an ndt7 server.
async fn upgrade<S>(stream: S, url: &str) -> Result<WebSocketStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut request = url.into_client_request().context("the upgrade request")?;
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        spec::SUBPROTOCOL.parse().expect("a valid header value"),
    );
    request.headers_mut().insert(
        "User-Agent",
        concat!("linerate/", env!("CARGO_PKG_VERSION"))
            .parse()
            .expect("a valid header value"),
    );
    let (ws, response) = tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        tokio_tungstenite::client_async_with_config(
            request,
            stream,
            Some(session::websocket_config()),
        ),
    )
    .await
    .map_err(|_| anyhow!("no WebSocket upgrade within {HANDSHAKE_TIMEOUT:?}"))?
    .map_err(|e| match e {
        tokio_tungstenite::tungstenite::Error::Http(response) => anyhow!(
            "the server refused the upgrade: {} {}",
            response.status(),
            response
                .body()
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default()
                .trim()
        ),
        other => anyhow!("the upgrade failed: {other}"),
    })?;
    let chosen = response
        .headers()
        .get("Sec-WebSocket-Protocol")
        .and_then(|v| v.to_str().ok());
    if chosen != Some(spec::SUBPROTOCOL) {
        bail!(
            "the server chose the subprotocol {:?}, not {}: not an ndt7 server",
            chosen.unwrap_or("(none)"),
            spec::SUBPROTOCOL
        );
    }
    Ok(ws)
}

/// A subtest over its upgraded connection; a download's payload counted by the
/// connection's watch (`count`).
async fn subtest_over<S>(
    ws: WebSocketStream<S>,
    count: Option<(Arc<DataCount>, Instant)>,
    options: &Options,
    subtest: Subtest,
    fd: std::os::fd::RawFd,
    local: std::net::SocketAddr,
    remote: std::net::SocketAddr,
) -> SubtestResult
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let started = Instant::now();
    let mut listener = Listener {
        keep_series: true,
        ..Listener::default()
    };
    let mut own_tcp = None;
    let (app_bytes, data_s, ended, ended_why) = match subtest {
        Subtest::Download => {
            let (count, counted_from) = count.unwrap_or_else(|| (Arc::default(), started));
            download(ws, (&count, counted_from), &mut listener, started).await
        }
        Subtest::Upload => {
            let runtime = options.upload_runtime;
            upload(ws, &mut listener, started, runtime, fd, &mut own_tcp).await
        }
    };
    let server_last = listener.series.last().cloned();
    let server_tcp = server_last.as_ref().and_then(|m| m.tcp_info);
    let (goodput_bps, counted_by) = match subtest {
        Subtest::Download => (
            app_bytes as f64 * 8.0 / data_s.max(1e-9),
            "client AppInfo".to_string(),
        ),
        Subtest::Upload => upload_figure(server_last.as_ref()).unwrap_or((
            app_bytes as f64 * 8.0 / data_s.max(1e-9),
            "client AppInfo (sent)".to_string(),
        )),
    };
    // The sender's TCPInfo says the path's RTT and retransmissions: the server's in a
    // download, this end's in an upload.
    let sender_tcp = match subtest {
        Subtest::Download => server_tcp,
        Subtest::Upload => own_tcp,
    };
    let (min_rtt_ms, retransmission_pct) = sender_tcp
        .map(|tcp| spec::rtt_and_retransmission(&tcp))
        .unwrap_or((None, None));
    let seen = server_last.as_ref().and_then(|m| m.connection_info.clone());
    SubtestResult {
        subtest,
        measured_by: "client".into(),
        client: seen
            .as_ref()
            .map_or_else(|| local.to_string(), |c| c.client.clone()),
        server: remote.to_string(),
        elapsed_s: started.elapsed().as_secs_f64(),
        app_bytes,
        goodput_bps,
        counted_by,
        min_rtt_ms,
        retransmission_pct,
        congestion: match subtest {
            Subtest::Upload => crate::kernel::congestion(fd),
            Subtest::Download => String::new(),
        },
        ended,
        ended_why,
        server_measurements: listener.series,
        client_last: None,
        metadata: Vec::new(),
    }
}

/// An upload's figure from the server's last measurement: its count of the payload
/// (AppInfo), else its TCP's count of bytes received (framing included).
fn upload_figure(server: Option<&Measurement>) -> Option<(f64, String)> {
    let server = server?;
    if let Some(app) = server
        .app_info
        .filter(|a| a.elapsed_us > 0 && a.num_bytes > 0)
    {
        return Some((
            app.num_bytes as f64 * 8.0 / (app.elapsed_us as f64 / 1e6),
            "server AppInfo".into(),
        ));
    }
    let tcp = server.tcp_info?;
    let (bytes, elapsed) = (tcp.bytes_received?, tcp.elapsed_us.filter(|e| *e > 0)?);
    Some((
        bytes as f64 * 8.0 / (elapsed as f64 / 1e6),
        "server TCPInfo BytesReceived".into(),
    ))
}

/// Reads the server's messages until it closes (or the client's bound), telling the
/// server this end's count every 250 ms. The payload is counted by the connection's
/// watch as it arrives (`count`, its times from the watch's start, before the upgrade),
/// and never reaches tungstenite. The payload bytes, the seconds they took, how it ended.
async fn download<S>(
    ws: WebSocketStream<S>,
    (count, counted_from): (&DataCount, Instant),
    listener: &mut Listener,
    started: Instant,
) -> (u64, f64, SubtestEnd, Option<String>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut sink, mut stream) = ws.split();
    let every = Duration::from_secs_f64(spec::MEASUREMENT_EVERY_S);
    let mut next_measure = started + every;
    let bound = started + DOWNLOAD_BOUND;
    let (ended, why) = loop {
        tokio::select! {
            message = tokio::time::timeout_at(bound.into(), stream.next()) => {
                let Ok(message) = message else {
                    break (SubtestEnd::Bounded, Some("the server did not end the download within 15 s".into()));
                };
                match listener.hear(message, true, started) {
                    Ok(Heard::Closed) => {
                        let _ = tokio::time::timeout(CLOSE_WAIT, sink.close()).await;
                        break (SubtestEnd::Completed, None);
                    }
                    // The payload is counted before tungstenite reads; it hears the rest.
                    Ok(_) => {}
                    Err((end, why)) => break (end, Some(why)),
                }
            }
            _ = tokio::time::sleep_until(next_measure.into()) => {
                next_measure += every;
                let mine = client_measurement(Subtest::Download, started, count.get().0);
                let _ = session::send(&mut sink, Message::Text(mine.into()), bound).await;
            }
        }
    };
    let (received, last) = count.get();
    let data_s = (counted_from + last).saturating_duration_since(started);
    (received, data_s.as_secs_f64(), ended, why)
}

/// Sends binary messages (grown by the spec's rule) for `runtime`, reading the server's
/// measurements beside; then the closing handshake.
async fn upload<S>(
    ws: WebSocketStream<S>,
    listener: &mut Listener,
    started: Instant,
    runtime: Duration,
    fd: std::os::fd::RawFd,
    own_tcp: &mut Option<spec::TcpInfo>,
) -> (u64, f64, SubtestEnd, Option<String>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut sink, mut stream) = ws.split();
    let mut payload = vec![0u8; spec::MAX_SCALED_MESSAGE];
    let _ = getrandom::getrandom(&mut payload);
    let payload = Bytes::from(payload);
    let end = started + runtime;
    let hard = end + CLOSE_WAIT;
    let mut sent = 0u64;
    let early = {
        let writer = async {
            let mut sizer = MessageSizer::new(spec::MAX_SCALED_MESSAGE);
            let every = Duration::from_secs_f64(spec::MEASUREMENT_EVERY_S);
            let mut next_measure = started + every;
            while Instant::now() < end {
                if Instant::now() >= next_measure {
                    next_measure += every;
                    let mine = client_measurement(Subtest::Upload, started, sent);
                    session::send(&mut sink, Message::Text(mine.into()), hard).await?;
                }
                let size = sizer.size();
                session::send(&mut sink, Message::Binary(payload.slice(..size)), hard).await?;
                sent += size as u64;
                sizer.sent();
            }
            Ok::<(), (SubtestEnd, String)>(())
        };
        let reader = async {
            loop {
                match listener.hear(stream.next().await, false, started) {
                    Ok(Heard::Closed) => {
                        return (SubtestEnd::PeerClosed, "the server closed it".to_string())
                    }
                    Ok(_) => {}
                    Err(end) => return end,
                }
            }
        };
        tokio::select! {
            written = writer => written.err(),
            heard = reader => Some(heard),
        }
    };
    let data_s = started.elapsed().as_secs_f64();
    // This end's TCP, the sender's, while the connection is open.
    let elapsed_us = i64::try_from(started.elapsed().as_micros()).unwrap_or(i64::MAX);
    *own_tcp = crate::kernel::tcp_info(fd, elapsed_us);
    let (ended, why) = match early {
        None => {
            let mut after = 0;
            session::close(
                &mut sink,
                &mut stream,
                listener,
                false,
                started,
                hard,
                &mut after,
            )
            .await
        }
        // The server ending the upload at its runtime is how an upload completes.
        Some((SubtestEnd::PeerClosed, _)) => {
            let _ = tokio::time::timeout(CLOSE_WAIT, sink.close()).await;
            (SubtestEnd::Completed, None)
        }
        Some((end, why)) => (end, Some(why)),
    };
    (sent, data_s, ended, why)
}

/// This end's count as a measurement message.
fn client_measurement(subtest: Subtest, started: Instant, bytes: u64) -> String {
    let m = Measurement {
        app_info: Some(spec::AppInfo {
            elapsed_us: i64::try_from(started.elapsed().as_micros()).unwrap_or(i64::MAX),
            num_bytes: i64::try_from(bytes).unwrap_or(i64::MAX),
        }),
        origin: Some("client".into()),
        test: Some(subtest.name().into()),
        ..Measurement::default()
    };
    serde_json::to_string(&m).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_read_hosts_ports_and_urls() {
        let t = |text, cleartext| Target::parse(text, cleartext);
        assert_eq!(
            t("server", false).unwrap(),
            Target {
                host: "server".into(),
                port: 443,
                tls: true,
                located: None
            }
        );
        assert_eq!(
            t("server:3001", true).unwrap(),
            Target {
                host: "server".into(),
                port: 3001,
                tls: false,
                located: None
            }
        );
        assert_eq!(
            t("wss://[2001:db8::1]:4443/ndt/v7/download", true).unwrap(),
            Target {
                host: "2001:db8::1".into(),
                port: 4443,
                tls: true,
                located: None
            }
        );
        assert_eq!(
            t("http://server", false).unwrap(),
            Target {
                host: "server".into(),
                port: 80,
                tls: false,
                located: None
            }
        );
        assert!(t("ftp://server", false).unwrap_err().contains("ftp://"));
        assert!(t("server:0", false).unwrap_err().contains("not a port"));
        assert!(t("2001:db8::1", false).unwrap_err().contains("brackets"));
        assert!(t("wss://", false).unwrap_err().contains("no host"));
        let url = t("[::1]:80", true).unwrap().url(Subtest::Upload);
        assert!(
            url.starts_with("ws://[::1]:80/ndt/v7/upload?client_name=linerate"),
            "{url}"
        );
    }

    #[test]
    fn an_uploads_figure_is_the_servers_count_first_then_its_tcp() {
        let app = Measurement {
            app_info: Some(spec::AppInfo {
                elapsed_us: 2_000_000,
                num_bytes: 25_000_000,
            }),
            tcp_info: Some(spec::TcpInfo {
                bytes_received: Some(26_000_000),
                elapsed_us: Some(2_000_000),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            upload_figure(Some(&app)),
            Some((100e6, "server AppInfo".into()))
        );
        let tcp_only = Measurement {
            app_info: None,
            ..app
        };
        assert_eq!(
            upload_figure(Some(&tcp_only)),
            Some((104e6, "server TCPInfo BytesReceived".into()))
        );
        assert_eq!(upload_figure(Some(&Measurement::default())), None);
        assert_eq!(upload_figure(None), None);
    }
}
