//! A watch on the client's WebSocket frames as their bytes arrive, before tungstenite
//! reads them. It does two things tungstenite's message-level reading cannot:
//!
//! - It takes the client's binary messages (an upload's data) out of the stream and
//!   counts them, so that no message is ever assembled: an upload holds its read buffer,
//!   not the up to 16 MiB message the spec lets a client send. A download's client sends
//!   no binary message, and one is refused at its first byte.
//! - It refuses the abuses that cost the server without moving data: a message cut into
//!   a storm of tiny fragments (each costs a wake-up and a header parse for a byte or two)
//!   and a storm of pings (each makes the server write a pong).
//!
//! A client's download uses the same watch the other way ([`FrameWatch::of_server`]): the
//! server's binary messages are counted as they arrive and never assembled (tungstenite
//! would copy each into a message buffer that grows as its fragments come), after the
//! upgrade's HTTP response, which passes on whole.
//!
//! A server's download writes its binary messages the other way round: each is one frame
//! written straight from the shared payload ([`RawFrames`]), a header and a slice of it,
//! where tungstenite would copy every frame into a write buffer of its own that keeps the
//! largest frame's size (a 1 MiB message a subtest, a GiB for a thousand subtests). Its
//! own frames (measurements, pongs, the Close) go between them, never inside one.
//!
//! [`FrameWatch`] is sans IO: bytes in, the bytes tungstenite is to see and a verdict out.
//! [`Watched`] puts it in front of a connection's reads; a verdict against the peer reads
//! as an `InvalidData` error, which the session reports as the protocol broken. The
//! frames that pass (text, control) are tungstenite's to check further (masking, lengths
//! over its bound, reserved bits, opcodes); the binary frames the watch counts it checks
//! itself, as tungstenite would: masked, no reserved bits, a message within 16 MiB.

use linerate_model::ndt7::MAX_MESSAGE;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A fragment under this many bytes (not a message's last) is small. Clients cut large
/// messages into frames of their write buffer (4 KiB in common WebSocket libraries), so
/// even a 16 MiB message has no small fragments but its last.
pub const SMALL_FRAGMENT: u64 = 1024;
/// The small fragments a message may have before the sender is refused as a storm.
pub const MAX_SMALL_FRAGMENTS: u32 = 64;
/// Pings a peer may send: ten a second with room for a burst (the spec's clients send
/// none).
fn ping_allowance(elapsed: Duration) -> u64 {
    50 + (elapsed.as_secs_f64() * 10.0) as u64
}

/// What the watch does with the client's binary messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryFrames {
    /// Counted and taken out of the stream (an upload's data).
    Count,
    /// Refused at once (a download's client sends only measurements).
    Refuse,
}

/// Which end's frames a watch reads: a client's are masked, a server's are not (RFC 6455
/// section 5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FramesFrom {
    Client,
    Server,
}

/// The longest HTTP response head a client's watch lets pass before the frames begin.
pub const MAX_HTTP_HEAD: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The upgrade's HTTP response head, passed on whole: how many bytes of it so far and
    /// how many of its closing CR LF CR LF.
    HttpHead { have: usize, matched: u8 },
    /// Reading a frame's header: the bytes so far.
    Header { have: usize },
    /// A frame's payload: the bytes left, and whether they pass on to tungstenite.
    Payload { left: u64, passes: bool },
}

/// The data message a continuation frame goes on with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Text,
    /// A binary message and its payload so far.
    Binary {
        bytes: u64,
    },
}

/// The state of the watch over one direction of one connection.
#[derive(Debug, Clone)]
pub struct FrameWatch {
    binary: BinaryFrames,
    from: FramesFrom,
    phase: Phase,
    header: [u8; 14],
    /// Whether the frame whose header is being read passes on (all but binary data).
    passes: bool,
    open: Option<Open>,
    /// The open message's small fragments so far.
    small: u32,
    pings: u64,
    /// Binary payload counted, and when the last of it arrived.
    data_bytes: u64,
    last_data: Duration,
}

/// The length of a header whose second byte (mask bit and 7-bit length) is `second`.
fn header_len(second: u8) -> usize {
    let mask = if second & 0x80 != 0 { 4 } else { 0 };
    2 + mask
        + match second & 0x7f {
            126 => 2,
            127 => 8,
            _ => 0,
        }
}

impl FrameWatch {
    /// A server's watch on its client's frames.
    pub fn new(binary: BinaryFrames) -> FrameWatch {
        FrameWatch {
            binary,
            from: FramesFrom::Client,
            phase: Phase::Header { have: 0 },
            header: [0; 14],
            passes: true,
            open: None,
            small: 0,
            pings: 0,
            data_bytes: 0,
            last_data: Duration::ZERO,
        }
    }

    /// A client's watch on the server's frames from the upgrade's response on: the head
    /// passes, then the binary payload is counted.
    pub fn of_server() -> FrameWatch {
        FrameWatch {
            from: FramesFrom::Server,
            phase: Phase::HttpHead {
                have: 0,
                matched: 0,
            },
            ..FrameWatch::new(BinaryFrames::Count)
        }
    }

    /// The binary payload counted so far, and how long after the start its last byte came.
    pub fn data(&self) -> (u64, Duration) {
        (self.data_bytes, self.last_data)
    }

    /// Takes the next bytes read from the peer, `elapsed` after the subtest began, and
    /// leaves at the front of `bytes` those tungstenite is to read (every frame but the
    /// binary ones): their length, or why the peer is refused.
    pub fn take(&mut self, bytes: &mut [u8], elapsed: Duration) -> Result<usize, String> {
        let (mut read, mut kept) = (0, 0);
        while read < bytes.len() {
            let available = bytes.len() - read;
            match self.phase {
                Phase::HttpHead { have, matched } => {
                    let byte = bytes[read];
                    bytes[kept] = byte;
                    kept += 1;
                    read += 1;
                    let expected = b"\r\n\r\n"[usize::from(matched)];
                    let matched = match (byte == expected, byte == b'\r') {
                        (true, _) => matched + 1,
                        (false, true) => 1,
                        (false, false) => 0,
                    };
                    self.phase = if matched == 4 {
                        Phase::Header { have: 0 }
                    } else if have + 1 >= MAX_HTTP_HEAD {
                        return Err(format!("an HTTP response head over {MAX_HTTP_HEAD} bytes"));
                    } else {
                        Phase::HttpHead {
                            have: have + 1,
                            matched,
                        }
                    };
                }
                Phase::Payload { left, passes } => {
                    let n = left.min(available as u64) as usize;
                    if passes {
                        bytes.copy_within(read..read + n, kept);
                        kept += n;
                    } else {
                        self.data_bytes += n as u64;
                        self.last_data = elapsed;
                    }
                    read += n;
                    self.phase = if left == n as u64 {
                        Phase::Header { have: 0 }
                    } else {
                        Phase::Payload {
                            left: left - n as u64,
                            passes,
                        }
                    };
                }
                Phase::Header { have } => {
                    if have == 0 {
                        self.passes = self.passes_on(bytes[read])?;
                    }
                    let need = if have < 2 {
                        2
                    } else {
                        header_len(self.header[1])
                    };
                    let take = (need - have).min(available);
                    self.header[have..have + take].copy_from_slice(&bytes[read..read + take]);
                    if self.passes {
                        bytes.copy_within(read..read + take, kept);
                        kept += take;
                    }
                    read += take;
                    let have = have + take;
                    self.phase = Phase::Header { have };
                    if have == 2 && header_len(self.header[1]) > 2 {
                        continue;
                    }
                    if have == need {
                        let left = self.frame(elapsed)?;
                        self.phase = if left == 0 {
                            Phase::Header { have: 0 }
                        } else {
                            Phase::Payload {
                                left,
                                passes: self.passes,
                            }
                        };
                    }
                }
            }
        }
        Ok(kept)
    }

    /// Whether a frame whose first byte is `first` passes on: all but binary data,
    /// which is counted here, or refused where none may come.
    fn passes_on(&self, first: u8) -> Result<bool, String> {
        let binary = match first & 0x0f {
            0x2 => true,
            0x0 => matches!(self.open, Some(Open::Binary { .. })),
            _ => false,
        };
        if binary && self.binary == BinaryFrames::Refuse {
            return Err("a binary message the wrong way".into());
        }
        Ok(!binary)
    }

    /// A whole header is in: judges the frame, returns its payload's length.
    fn frame(&mut self, elapsed: Duration) -> Result<u64, String> {
        let (fin, opcode) = (self.header[0] & 0x80 != 0, self.header[0] & 0x0f);
        let len = match self.header[1] & 0x7f {
            126 => u64::from(u16::from_be_bytes([self.header[2], self.header[3]])),
            127 => u64::from_be_bytes(self.header[2..10].try_into().unwrap_or([0; 8])),
            short => u64::from(short),
        };
        match opcode {
            // A data frame opens a message; a continuation goes on with one.
            0x0..=0x2 => {
                let open = match (opcode, self.open) {
                    (0x0, Some(open)) => open,
                    (0x0, None) => return Err("a continuation frame with no message open".into()),
                    (_, Some(_)) => return Err("a new message before the last one ended".into()),
                    (0x1, None) => Open::Text,
                    _ => Open::Binary { bytes: 0 },
                };
                let small = u32::from(len < SMALL_FRAGMENT && !fin);
                let count = if opcode == 0x0 {
                    self.small + small
                } else {
                    small
                };
                if count > MAX_SMALL_FRAGMENTS {
                    return Err(format!(
                        "a fragment storm: over {MAX_SMALL_FRAGMENTS} fragments under \
                         {SMALL_FRAGMENT} bytes in one message"
                    ));
                }
                let open = match open {
                    Open::Binary { bytes } => Open::Binary {
                        bytes: self.counted_frame(bytes, len)?,
                    },
                    text => text,
                };
                self.small = count;
                self.open = (!fin).then_some(open);
            }
            0x9 => {
                self.pings += 1;
                if self.pings > ping_allowance(elapsed) {
                    return Err(format!(
                        "{} pings in {:.1} s, a flood",
                        self.pings,
                        elapsed.as_secs_f64()
                    ));
                }
            }
            _ => {}
        }
        Ok(len)
    }

    /// A binary frame of `len` in a message that has `so_far`: checked as tungstenite
    /// checks the frames it reads; the message's length with it.
    fn counted_frame(&self, so_far: u64, len: u64) -> Result<u64, String> {
        let masked = self.header[1] & 0x80 != 0;
        match (self.from, masked) {
            (FramesFrom::Client, false) => return Err("an unmasked frame from the client".into()),
            (FramesFrom::Server, true) => return Err("a masked frame from the server".into()),
            _ => {}
        }
        if self.header[0] & 0x70 != 0 {
            return Err("reserved bits set with no extension agreed".into());
        }
        match so_far.checked_add(len) {
            Some(total) if total <= MAX_MESSAGE as u64 => Ok(total),
            _ => Err(format!("a message too long: over {MAX_MESSAGE} bytes")),
        }
    }
}

/// The binary payload a [`Watched`] connection has counted, read from another task.
#[derive(Debug, Default)]
pub struct DataCount {
    bytes: AtomicU64,
    last_ns: AtomicU64,
}

impl DataCount {
    /// The bytes so far, and how long after the start the last of them came.
    pub fn get(&self) -> (u64, Duration) {
        (
            self.bytes.load(Ordering::Relaxed),
            Duration::from_nanos(self.last_ns.load(Ordering::Relaxed)),
        )
    }
}

/// Binary frames waiting to be written beside tungstenite's, each from its payload.
#[derive(Debug, Default)]
pub struct RawFrames {
    queue: std::sync::Mutex<std::collections::VecDeque<RawFrame>>,
}

#[derive(Debug)]
struct RawFrame {
    header: [u8; 10],
    header_len: usize,
    payload: bytes::Bytes,
    /// Bytes of header and payload written so far.
    written: usize,
}

/// An unmasked frame's header (a server's) for `len` payload bytes: its bytes and length.
pub fn server_frame_header(fin: bool, opcode: u8, len: usize) -> ([u8; 10], usize) {
    let mut header = [0u8; 10];
    header[0] = u8::from(fin) << 7 | (opcode & 0x0f);
    let header_len = match len {
        0..=125 => {
            header[1] = len as u8;
            2
        }
        126..=0xffff => {
            header[1] = 126;
            header[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            4
        }
        _ => {
            header[1] = 127;
            header[2..10].copy_from_slice(&(len as u64).to_be_bytes());
            10
        }
    };
    (header, header_len)
}

impl RawFrames {
    /// Queues `payload` as one whole binary message, one frame, to go out at the next
    /// write or flush of the connection.
    pub fn push_binary(&self, payload: bytes::Bytes) {
        let (header, header_len) = server_frame_header(true, 0x2, payload.len());
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(RawFrame {
                header,
                header_len,
                payload,
                written: 0,
            });
    }

    /// Writes the queued frames to `inner`, first to last, until done or until it would
    /// block: each frame's header and payload in one vectored write, no copy made.
    fn poll_drain<S: AsyncWrite + Unpin>(
        &self,
        inner: &mut S,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(frame) = queue.front_mut() {
            let whole = frame.header_len + frame.payload.len();
            while frame.written < whole {
                let (head, body) = if frame.written < frame.header_len {
                    (
                        &frame.header[frame.written..frame.header_len],
                        &frame.payload[..],
                    )
                } else {
                    (&[][..], &frame.payload[frame.written - frame.header_len..])
                };
                let slices = [io::IoSlice::new(head), io::IoSlice::new(body)];
                match Pin::new(&mut *inner).poll_write_vectored(cx, &slices) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Poll::Ready(Ok(n)) => frame.written += n,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                }
            }
            queue.pop_front();
        }
        Poll::Ready(Ok(()))
    }
}

/// Reads that find only binary payload go on reading this many times before yielding to
/// the other tasks (the payload is counted, so nothing is returned to tungstenite).
const READS_BEFORE_YIELD: u32 = 16;

/// A connection whose reads pass through a [`FrameWatch`] first.
pub struct Watched<S> {
    inner: S,
    raw: Arc<RawFrames>,
    watch: FrameWatch,
    count: Arc<DataCount>,
    started: Instant,
}

impl<S> Watched<S> {
    /// A server's connection, its client's frames watched.
    pub fn new(inner: S, started: Instant, binary: BinaryFrames) -> Watched<S> {
        Watched::with(inner, started, FrameWatch::new(binary))
    }

    /// A client's connection before its upgrade, the server's frames watched after it.
    pub fn of_server(inner: S, started: Instant) -> Watched<S> {
        Watched::with(inner, started, FrameWatch::of_server())
    }

    fn with(inner: S, started: Instant, watch: FrameWatch) -> Watched<S> {
        Watched {
            inner,
            raw: Arc::default(),
            watch,
            count: Arc::new(DataCount::default()),
            started,
        }
    }

    /// Where binary frames are queued to go out beside tungstenite's writes.
    pub fn raw_frames(&self) -> Arc<RawFrames> {
        self.raw.clone()
    }

    /// When the watch began: the times of its count are from it.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Where the binary payload this connection counts can be read.
    pub fn count(&self) -> Arc<DataCount> {
        self.count.clone()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        for _ in 0..READS_BEFORE_YIELD {
            let before = buf.filled().len();
            match Pin::new(&mut this.inner).poll_read(cx, buf) {
                Poll::Ready(Ok(())) if buf.filled().len() > before => {
                    let elapsed = this.started.elapsed();
                    let kept = match this.watch.take(&mut buf.filled_mut()[before..], elapsed) {
                        Ok(kept) => kept,
                        Err(why) => {
                            return Poll::Ready(Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                why,
                            )))
                        }
                    };
                    buf.set_filled(before + kept);
                    let (bytes, last) = this.watch.data();
                    this.count.bytes.store(bytes, Ordering::Relaxed);
                    this.count
                        .last_ns
                        .store(last.as_nanos() as u64, Ordering::Relaxed);
                    if kept > 0 {
                        return Poll::Ready(Ok(()));
                    }
                }
                other => return other,
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
/// Tungstenite's writes go out after the queued raw frames, never inside one.
impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        std::task::ready!(this.raw.poll_drain(&mut this.inner, cx))?;
        Pin::new(&mut this.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        std::task::ready!(this.raw.poll_drain(&mut this.inner, cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A masked client frame's bytes (the mask all zeros: the watch never unmasks).
    fn frame(fin: bool, opcode: u8, len: usize) -> Vec<u8> {
        let mut out = vec![u8::from(fin) << 7 | opcode];
        match len {
            0..=125 => out.push(0x80 | len as u8),
            126..=0xffff => {
                out.push(0x80 | 126);
                out.extend_from_slice(&(len as u16).to_be_bytes());
            }
            _ => {
                out.push(0x80 | 127);
                out.extend_from_slice(&(len as u64).to_be_bytes());
            }
        }
        out.extend_from_slice(&[0; 4]);
        out.extend(std::iter::repeat_n(7u8, len));
        out
    }

    fn message(fragments: &[usize]) -> Vec<u8> {
        let last = fragments.len() - 1;
        fragments
            .iter()
            .enumerate()
            .flat_map(|(i, &len)| frame(i == last, if i == 0 { 2 } else { 0 }, len))
            .collect()
    }

    const T: Duration = Duration::from_secs(1);

    /// What the watch passes on of `bytes`, or why it refused them.
    fn take(watch: &mut FrameWatch, bytes: &[u8]) -> Result<Vec<u8>, String> {
        let mut bytes = bytes.to_vec();
        let kept = watch.take(&mut bytes, T)?;
        bytes.truncate(kept);
        Ok(bytes)
    }

    fn upload() -> FrameWatch {
        FrameWatch::new(BinaryFrames::Count)
    }

    #[test]
    fn whole_messages_and_large_fragments_pass_a_storm_does_not() {
        let mut watch = upload();
        // A 1 MiB message in one frame, then one cut in 4 KiB frames (as a browser's
        // library might), then a ping.
        take(&mut watch, &frame(true, 2, 1 << 20)).unwrap();
        take(&mut watch, &message(&[4096; 256])).unwrap();
        take(&mut watch, &frame(true, 9, 4)).unwrap();
        // Small fragments up to the allowance in a message, then over it.
        take(
            &mut watch,
            &message(&[10; MAX_SMALL_FRAGMENTS as usize + 1]),
        )
        .unwrap();
        let storm = message(&[1; MAX_SMALL_FRAGMENTS as usize + 2]);
        let why = take(&mut watch, &storm).unwrap_err();
        assert!(why.contains("fragment storm"), "{why}");
    }

    #[test]
    fn the_count_starts_again_with_each_message() {
        let mut watch = upload();
        for _ in 0..10 {
            take(&mut watch, &message(&[1; MAX_SMALL_FRAGMENTS as usize + 1])).unwrap();
        }
    }

    #[test]
    fn pings_past_the_allowance_are_a_flood() {
        let mut watch = upload();
        let pings: Vec<u8> = (0..70).flat_map(|_| frame(true, 9, 0)).collect();
        assert!(take(&mut watch, &pings).unwrap_err().contains("pings"));
        let mut slow = upload();
        let mut bytes = pings.clone();
        slow.take(&mut bytes, Duration::from_secs(10)).unwrap();
    }

    /// An upload's binary messages are counted and taken out, whole or in fragments, with
    /// pings between them; text and control frames pass on byte for byte, in order.
    #[test]
    fn binary_payload_is_counted_and_taken_out_the_rest_passes() {
        let mut watch = upload();
        let text = frame(true, 1, 30);
        let ping = frame(true, 9, 3);
        let bytes = [
            frame(true, 2, 70_000),
            text.clone(),
            frame(false, 2, 5000),
            ping.clone(),
            frame(true, 0, 6000),
            frame(true, 8, 2),
        ]
        .concat();
        let passed = take(&mut watch, &bytes).unwrap();
        assert_eq!(passed, [text, ping, frame(true, 8, 2)].concat());
        assert_eq!(watch.data(), (70_000 + 5000 + 6000, T));
    }

    /// A download's client sends no binary message: the first byte of one is refused. A
    /// binary frame the watch counts is checked as tungstenite would: masked, no reserved
    /// bits, within the message bound, in a message that is open.
    #[test]
    fn binary_frames_the_wrong_way_or_malformed_are_refused() {
        let mut download = FrameWatch::new(BinaryFrames::Refuse);
        let why = take(&mut download, &frame(true, 2, 10)[..1]).unwrap_err();
        assert!(why.contains("wrong way"), "{why}");
        let mut text_ok = FrameWatch::new(BinaryFrames::Refuse);
        assert_eq!(take(&mut text_ok, &frame(true, 1, 10)).unwrap().len(), 16);

        let mut unmasked = frame(true, 2, 4);
        unmasked[1] &= 0x7f;
        unmasked.drain(2..6);
        assert!(take(&mut upload(), &unmasked)
            .unwrap_err()
            .contains("unmasked"));
        let mut reserved = frame(true, 2, 4);
        reserved[0] |= 0x40;
        assert!(take(&mut upload(), &reserved)
            .unwrap_err()
            .contains("reserved"));
        let head = &frame(true, 2, MAX_MESSAGE + 1)[..14];
        assert!(take(&mut upload(), head).unwrap_err().contains("too long"));
        // Over the bound in fragments, each within it.
        let mut watch = upload();
        take(&mut watch, &frame(false, 2, MAX_MESSAGE - 10)).unwrap();
        let why = take(&mut watch, &frame(true, 0, 11)[..14]).unwrap_err();
        assert!(why.contains("too long"), "{why}");
        assert!(take(&mut upload(), &frame(true, 0, 4))
            .unwrap_err()
            .contains("no message open"));
        let mut watch = upload();
        take(&mut watch, &frame(false, 2, 4)).unwrap();
        assert!(take(&mut watch, &frame(true, 1, 4))
            .unwrap_err()
            .contains("before the last one ended"));
    }

    /// A server's frame as a client reads it: unmasked.
    fn server_frame(fin: bool, opcode: u8, len: usize) -> Vec<u8> {
        let mut out = frame(fin, opcode, len);
        out[1] &= 0x7f;
        let mask_at = match len {
            0..=125 => 2,
            126..=0xffff => 4,
            _ => 10,
        };
        out.drain(mask_at..mask_at + 4);
        out
    }

    /// A client's download: the upgrade's response passes whole, then the server's binary
    /// messages are counted and taken out, text and control frames pass, and a masked
    /// frame from the server is refused; a head that never ends is too.
    #[test]
    fn a_download_is_counted_after_the_upgrades_head() {
        let head = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n".to_vec();
        let text = server_frame(true, 1, 50);
        let bytes = [
            head.clone(),
            server_frame(false, 2, 65_536),
            server_frame(true, 0, 1000),
            text.clone(),
            server_frame(true, 2, 100),
        ]
        .concat();
        for cut in [1usize, 7, 100, 4096, bytes.len()] {
            let mut watch = FrameWatch::of_server();
            let mut passed = Vec::new();
            for piece in bytes.chunks(cut) {
                passed.extend(take(&mut watch, piece).unwrap());
            }
            assert_eq!(passed, [head.clone(), text.clone()].concat(), "cut {cut}");
            assert_eq!(watch.data().0, 65_536 + 1000 + 100, "cut {cut}");
        }
        let masked = [head.clone(), frame(true, 2, 10)].concat();
        let why = take(&mut FrameWatch::of_server(), &masked).unwrap_err();
        assert!(why.contains("masked frame from the server"), "{why}");
        let endless = vec![b'x'; MAX_HTTP_HEAD + 1];
        assert!(take(&mut FrameWatch::of_server(), &endless)
            .unwrap_err()
            .contains("HTTP response head"));
    }

    proptest! {
        /// However the bytes are cut as they arrive, the watch reaches the same verdict,
        /// passes on the same bytes and counts the same payload as when they come at
        /// once, and never panics on any bytes.
        #[test]
        fn any_cut_gives_the_same_verdict(
            fragments in proptest::collection::vec(0usize..2000, 1..100),
            cuts in proptest::collection::vec(1usize..300, 1..50),
        ) {
            let text = frame(true, 1, 40);
            let bytes = [message(&fragments), text.clone()].concat();
            let mut at_once = upload();
            let whole = take(&mut at_once, &bytes);
            let mut watch = upload();
            let mut rest = &bytes[..];
            let mut verdict = Ok(());
            let mut passed = Vec::new();
            for cut in cuts.iter().cycle() {
                if rest.is_empty() || verdict.is_err() {
                    break;
                }
                let n = (*cut).min(rest.len());
                match take(&mut watch, &rest[..n]) {
                    Ok(kept) => passed.extend(kept),
                    Err(why) => verdict = Err(why),
                }
                rest = &rest[n..];
            }
            prop_assert_eq!(verdict.is_ok(), whole.is_ok());
            let small = fragments[..fragments.len() - 1]
                .iter()
                .filter(|&&len| (len as u64) < SMALL_FRAGMENT)
                .count();
            prop_assert_eq!(whole.is_ok(), small <= MAX_SMALL_FRAGMENTS as usize);
            if let Ok(kept) = whole {
                prop_assert_eq!(&kept, &text);
                prop_assert_eq!(&passed, &text);
                let sum: usize = fragments.iter().sum();
                prop_assert_eq!(watch.data().0, sum as u64);
                prop_assert_eq!(at_once.data().0, sum as u64);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
            let watches = [
                FrameWatch::new(BinaryFrames::Count),
                FrameWatch::new(BinaryFrames::Refuse),
                FrameWatch::of_server(),
            ];
            for mut watch in watches {
                if let Ok(kept) = take(&mut watch, &bytes) {
                    prop_assert!(kept.len() <= bytes.len());
                }
            }
        }
    }
}
