//! One subtest over an open WebSocket, from either end: the sender's loop (binary
//! messages grown by the spec's rule, a measurement message every 250 ms), the
//! receiver's count, the closing handshake, and the record of it.

use crate::frames::DataCount;
use crate::kernel;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use linerate_model::ndt7::{
    self as spec, Measurement, MessageSizer, Subtest, SubtestEnd, SubtestResult,
};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

/// The connection a subtest runs over, as the server sees it.
#[derive(Debug, Clone, Copy)]
pub struct Link {
    pub fd: RawFd,
    pub client: SocketAddr,
    pub server: SocketAddr,
}

/// When the data stops, and when the connection is closed whatever the peer does.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub runtime: Instant,
    pub hard: Instant,
}

/// The framing's bounds: a message and a frame within the spec's 16 MiB (a receiver must
/// take that much), client frames masked (tungstenite refuses an unmasked one).
pub fn websocket_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(spec::MAX_MESSAGE))
        .max_frame_size(Some(spec::MAX_MESSAGE))
}

/// The server's framing for one subtest. Tungstenite writes only the server's own small
/// frames (measurements, pongs, the Close), straight out: a download's data goes as
/// frames written from the shared payload beside it (`crate::frames::RawFrames`), which
/// tungstenite would copy whole into a write buffer that keeps its largest size. The client's binary
/// messages never reach tungstenite here (an upload's are counted as they arrive,
/// `crate::frames`), so what it reads is measurements and control frames, each bounded
/// by [`MAX_MEASUREMENT`]; a download reads only those, so its read buffer is small. A
/// thousand subtests at once then hold tens of MiB, where whole messages held over a GiB.
pub fn server_websocket_config(subtest: Subtest) -> WebSocketConfig {
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_MEASUREMENT))
        .max_frame_size(Some(MAX_MEASUREMENT))
        .write_buffer_size(0);
    match subtest {
        Subtest::Download => config.read_buffer_size(4 * 1024),
        Subtest::Upload => config,
    }
}

/// The most a measurement message is read as one (larger ones are counted, not parsed).
pub const MAX_MEASUREMENT: usize = 64 * 1024;
/// Text messages a peer may send: ten a second on average (the spec's "should not send
/// more"), with room for a burst, before it is closed as a flood.
fn text_allowance(elapsed: Duration) -> u64 {
    50 + (elapsed.as_secs_f64() * 10.0) as u64
}

/// What one message from the peer was.
pub(crate) enum Heard {
    Data(usize),
    /// A measurement message (kept by the listener where it parsed).
    Measurement,
    Other,
    Closed,
}

/// What a receiver keeps of the peer's messages.
#[derive(Default)]
pub(crate) struct Listener {
    pub texts: u64,
    pub last: Option<Measurement>,
    pub series: Vec<Measurement>,
    /// Keep every measurement (a client keeps the server's), or only the last.
    pub keep_series: bool,
}

impl Listener {
    /// Classifies one message; `data_allowed` is whether binary messages may come this
    /// way. An error says how the subtest ends.
    pub(crate) fn hear(
        &mut self,
        message: Option<Result<Message, WsError>>,
        data_allowed: bool,
        started: Instant,
    ) -> Result<Heard, (SubtestEnd, String)> {
        let message = match message {
            None => {
                return Err((
                    SubtestEnd::Abrupt,
                    "the connection ended without a closing handshake".into(),
                ))
            }
            Some(Err(e)) => return Err(ended_by(e)),
            Some(Ok(message)) => message,
        };
        Ok(match message {
            Message::Binary(data) if data_allowed => Heard::Data(data.len()),
            Message::Binary(_) => {
                return Err((SubtestEnd::Refused, "a binary message the wrong way".into()))
            }
            Message::Text(text) => {
                self.texts += 1;
                if self.texts > text_allowance(started.elapsed()) {
                    return Err((
                        SubtestEnd::Refused,
                        format!(
                            "{} measurement messages in {:.1} s, a flood",
                            self.texts,
                            started.elapsed().as_secs_f64()
                        ),
                    ));
                }
                let measurement = (text.len() <= MAX_MEASUREMENT)
                    .then(|| serde_json::from_str::<Measurement>(text.as_str()).ok())
                    .flatten();
                if let Some(m) = &measurement {
                    if self.keep_series && self.series.len() < MAX_SERIES {
                        self.series.push(m.clone());
                    }
                    self.last = Some(m.clone());
                }
                Heard::Measurement
            }
            Message::Close(_) => Heard::Closed,
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => Heard::Other,
        })
    }
}

/// The most measurements kept of one subtest: one every 25 ms for the 13 s bound, more
/// than any client of the spec sends.
const MAX_SERIES: usize = 520;

pub(crate) fn ended_by(error: WsError) -> (SubtestEnd, String) {
    match error {
        // The frame watch's verdict (crate::frames).
        WsError::Io(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            (SubtestEnd::Refused, format!("broke the protocol: {e}"))
        }
        WsError::Protocol(
            tokio_tungstenite::tungstenite::error::ProtocolError::ResetWithoutClosingHandshake,
        )
        | WsError::ConnectionClosed
        | WsError::AlreadyClosed
        | WsError::Io(_) => (SubtestEnd::Abrupt, format!("the connection ended: {error}")),
        WsError::Protocol(_) | WsError::Capacity(_) | WsError::Utf8(_) => {
            (SubtestEnd::Refused, format!("broke the protocol: {error}"))
        }
        other => (SubtestEnd::Abrupt, other.to_string()),
    }
}

/// Sends one message, or says why the subtest ends: the hard bound passed with the peer
/// not reading, or the connection failed.
pub(crate) async fn send<S>(
    sink: &mut futures_util::stream::SplitSink<WebSocketStream<S>, Message>,
    message: Message,
    hard: Instant,
) -> Result<(), (SubtestEnd, String)>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match tokio::time::timeout_at(hard.into(), sink.send(message)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(ended_by(e)),
        Err(_) => Err((
            SubtestEnd::Bounded,
            "the peer stopped reading: the subtest's hard bound passed".into(),
        )),
    }
}

/// Writes out what is queued (a raw frame, tungstenite's own), or says why the subtest
/// ends, as [`send`] does.
async fn flush<S>(
    sink: &mut futures_util::stream::SplitSink<WebSocketStream<S>, Message>,
    hard: Instant,
) -> Result<(), (SubtestEnd, String)>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match tokio::time::timeout_at(hard.into(), sink.flush()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(ended_by(e)),
        Err(_) => Err((
            SubtestEnd::Bounded,
            "the peer stopped reading: the subtest's hard bound passed".into(),
        )),
    }
}

/// The closing handshake after the runtime: a Close sent, the peer's awaited until the
/// hard bound. How the subtest ended, given how the data phase did.
pub(crate) async fn close<S>(
    sink: &mut futures_util::stream::SplitSink<WebSocketStream<S>, Message>,
    stream: &mut futures_util::stream::SplitStream<WebSocketStream<S>>,
    listener: &mut Listener,
    data_allowed: bool,
    started: Instant,
    hard: Instant,
    counted: &mut u64,
) -> (SubtestEnd, Option<String>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match send(sink, Message::Close(None), hard).await {
        // The runtime had passed: a peer that went as the Close was sent (M-Lab's
        // ndt7-client drops its end on the last measurement) had its whole subtest.
        Err((SubtestEnd::Abrupt, _)) => return (SubtestEnd::Completed, None),
        Err((end, why)) => return (end, Some(why)),
        Ok(()) => {}
    }
    loop {
        let next = tokio::time::timeout_at(hard.into(), stream.next()).await;
        let Ok(message) = next else {
            return (
                SubtestEnd::Bounded,
                Some("the peer did not answer the closing handshake by the hard bound".into()),
            );
        };
        match listener.hear(message, data_allowed, started) {
            Ok(Heard::Data(n)) => *counted += n as u64,
            Ok(Heard::Closed) => return (SubtestEnd::Completed, None),
            Ok(_) => {}
            // The peer went after our Close: the subtest was done.
            Err((SubtestEnd::Abrupt, _)) => return (SubtestEnd::Completed, None),
            Err((end, why)) => return (end, Some(why)),
        }
    }
}

/// The server's download: binary messages from `payload` for the runtime, each one frame
/// written from it beside tungstenite (`raw`, the connection's queue), measurements
/// between them, the client's messages read beside.
pub async fn serve_download<S>(
    ws: WebSocketStream<S>,
    raw: &crate::frames::RawFrames,
    link: &Link,
    payload: Bytes,
    started: Instant,
    bounds: Bounds,
) -> SubtestResult
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut sink, mut stream) = ws.split();
    let mut sent = 0u64;
    let mut series = Vec::new();
    let mut listener = Listener::default();
    let every = Duration::from_secs_f64(spec::MEASUREMENT_EVERY_S);
    let early = {
        let writer = async {
            let mut sizer = MessageSizer::new(spec::MAX_SCALED_MESSAGE.min(payload.len()));
            let mut next_measure = started + every;
            while Instant::now() < bounds.runtime {
                if Instant::now() >= next_measure {
                    next_measure += every;
                    let m = measurement(link, Subtest::Download, started, sent);
                    let text = serde_json::to_string(&m).unwrap_or_default();
                    series.push(m);
                    send(&mut sink, Message::Text(text.into()), bounds.hard).await?;
                }
                let size = sizer.size();
                raw.push_binary(payload.slice(..size));
                flush(&mut sink, bounds.hard).await?;
                sent += size as u64;
                sizer.sent();
            }
            Ok::<(), (SubtestEnd, String)>(())
        };
        let reader = async {
            loop {
                let next = tokio::time::timeout_at(bounds.hard.into(), stream.next()).await;
                let Ok(message) = next else {
                    return (SubtestEnd::Bounded, "the hard bound passed".to_string());
                };
                match listener.hear(message, false, started) {
                    Ok(Heard::Closed) => {
                        return (SubtestEnd::PeerClosed, "the client closed it".into())
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
    let (ended, ended_why) = match early {
        None => {
            let mut extra = 0;
            let last = measurement(link, Subtest::Download, started, sent);
            let text = serde_json::to_string(&last).unwrap_or_default();
            series.push(last);
            let _ = send(&mut sink, Message::Text(text.into()), bounds.hard).await;
            close(
                &mut sink,
                &mut stream,
                &mut listener,
                false,
                started,
                bounds.hard,
                &mut extra,
            )
            .await
        }
        Some((end, why)) => {
            series.push(measurement(link, Subtest::Download, started, sent));
            // Answer a client's Close (tungstenite queued the reply); nothing else.
            let _ = tokio::time::timeout(Duration::from_millis(200), sink.close()).await;
            (end, Some(why))
        }
    };
    download_record(link, started, sent, series, listener, ended, ended_why)
}

/// A served download's record: the figure as the receiver counted it where the client
/// said (its AppInfo), else what TCP had acknowledged (bytes on the wire, framing
/// included).
fn download_record(
    link: &Link,
    started: Instant,
    sent: u64,
    series: Vec<Measurement>,
    listener: Listener,
    ended: SubtestEnd,
    ended_why: Option<String>,
) -> SubtestResult {
    let elapsed = started.elapsed().as_secs_f64();
    let client_count = listener
        .last
        .as_ref()
        .and_then(|m| m.app_info)
        .filter(|a| a.elapsed_us > 0);
    let tcp = series.last().and_then(|m| m.tcp_info).unwrap_or_default();
    let (goodput_bps, counted_by) = match client_count {
        Some(app) => (
            app.num_bytes as f64 * 8.0 / (app.elapsed_us as f64 / 1e6),
            "client AppInfo",
        ),
        None => (
            tcp.bytes_acked.unwrap_or(0) as f64 * 8.0 / elapsed.max(1e-9),
            "server TCPInfo BytesAcked",
        ),
    };
    let (min_rtt_ms, retransmission_pct) = spec::rtt_and_retransmission(&tcp);
    SubtestResult {
        subtest: Subtest::Download,
        measured_by: "server".into(),
        client: link.client.to_string(),
        server: link.server.to_string(),
        elapsed_s: elapsed,
        app_bytes: sent,
        goodput_bps,
        counted_by: counted_by.into(),
        min_rtt_ms,
        retransmission_pct,
        congestion: crate::kernel::congestion(link.fd),
        ended,
        ended_why,
        server_measurements: series,
        client_last: listener.last,
        metadata: Vec::new(),
    }
}

/// The server's upload: the client's binary payload counted for the runtime as it
/// arrives (`uploaded`, by the connection's frame watch), a measurement of that count
/// sent every 250 ms.
pub async fn serve_upload<S>(
    ws: WebSocketStream<S>,
    link: &Link,
    uploaded: &DataCount,
    started: Instant,
    bounds: Bounds,
) -> SubtestResult
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut sink, mut stream) = ws.split();
    let mut series = Vec::new();
    let mut listener = Listener::default();
    let every = Duration::from_secs_f64(spec::MEASUREMENT_EVERY_S);
    let mut next_measure = started + every;
    let early: Option<(SubtestEnd, String)> = loop {
        if Instant::now() >= bounds.runtime {
            break None;
        }
        tokio::select! {
            // The payload is counted as tungstenite reads; it hears the rest.
            message = stream.next() => match listener.hear(message, false, started) {
                Ok(Heard::Closed) => break Some((SubtestEnd::PeerClosed, "the client closed it".into())),
                Ok(_) => {}
                Err(end) => break Some(end),
            },
            _ = tokio::time::sleep_until(next_measure.into()) => {
                next_measure += every;
                let m = measurement(link, Subtest::Upload, started, uploaded.get().0);
                let text = serde_json::to_string(&m).unwrap_or_default();
                series.push(m);
                if let Err(end) = send(&mut sink, Message::Text(text.into()), bounds.hard).await {
                    break Some(end);
                }
            }
            _ = tokio::time::sleep_until(bounds.runtime.into()) => break None,
        }
    };
    // What arrived by the runtime (or the early end), and when its last byte came; what
    // arrives after it is outside the subtest.
    let (received, last_data) = uploaded.get();
    let last_data = last_data.min(bounds.runtime - started);
    let (ended, ended_why) = match early {
        None => {
            let last = measurement(link, Subtest::Upload, started, received);
            let text = serde_json::to_string(&last).unwrap_or_default();
            series.push(last);
            let _ = send(&mut sink, Message::Text(text.into()), bounds.hard).await;
            {
                let mut after = 0;
                close(
                    &mut sink,
                    &mut stream,
                    &mut listener,
                    true,
                    started,
                    bounds.hard,
                    &mut after,
                )
                .await
            }
        }
        Some((end, why)) => {
            series.push(measurement(link, Subtest::Upload, started, received));
            let _ = tokio::time::timeout(Duration::from_millis(200), sink.close()).await;
            (end, Some(why))
        }
    };
    let elapsed = started.elapsed().as_secs_f64();
    let tcp = series.last().and_then(|m| m.tcp_info).unwrap_or_default();
    let (min_rtt_ms, _) = spec::rtt_and_retransmission(&tcp);
    // The sender's retransmissions are the client's; the server's TCPInfo cannot say them.
    let retransmission_pct = listener
        .last
        .as_ref()
        .and_then(|m| m.tcp_info)
        .and_then(|tcp| spec::rtt_and_retransmission(&tcp).1);
    SubtestResult {
        subtest: Subtest::Upload,
        measured_by: "server".into(),
        client: link.client.to_string(),
        server: link.server.to_string(),
        elapsed_s: elapsed,
        app_bytes: received,
        // Counted here, over the time the data took to arrive.
        goodput_bps: received as f64 * 8.0 / last_data.as_secs_f64().max(1e-9),
        counted_by: "server AppInfo".into(),
        min_rtt_ms,
        retransmission_pct,
        congestion: crate::kernel::congestion(link.fd),
        ended,
        ended_why,
        server_measurements: series,
        client_last: listener.last,
        metadata: Vec::new(),
    }
}

/// The spec's fields of one connection as its server sees it, for a measurement.
pub(crate) fn measurement(
    link: &Link,
    subtest: Subtest,
    started: Instant,
    app_bytes: u64,
) -> spec::Measurement {
    let elapsed_us = i64::try_from(started.elapsed().as_micros()).unwrap_or(i64::MAX);
    spec::Measurement {
        app_info: Some(spec::AppInfo {
            elapsed_us,
            num_bytes: i64::try_from(app_bytes).unwrap_or(i64::MAX),
        }),
        connection_info: Some(spec::ConnectionInfo {
            client: link.client.to_string(),
            server: link.server.to_string(),
            uuid: None,
            start_time: None,
        }),
        origin: Some("server".into()),
        test: Some(subtest.name().into()),
        tcp_info: kernel::tcp_info(link.fd, elapsed_us),
        bbr_info: kernel::bbr_info(link.fd, elapsed_us),
    }
}
