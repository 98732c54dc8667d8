//! A watch on the client's WebSocket frames as their bytes arrive, before tungstenite
//! reads them: the one abuse its message-level reading cannot see, a message cut into a
//! storm of tiny fragments (each costs a wake-up and a header parse for a byte or two of
//! data), and a storm of pings (each makes the server write a pong).
//!
//! [`FrameWatch`] is sans IO: bytes in, a verdict out. [`Watched`] puts it in front of a
//! connection's reads; a verdict against the peer reads as an `InvalidData` error, which
//! the session reports as the protocol broken. Everything else about frames (masking,
//! lengths over the bound, reserved bits, opcodes) is tungstenite's to refuse.

use std::io;
use std::pin::Pin;
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading a frame's header: the bytes so far.
    Header { have: usize },
    /// Skipping a frame's payload: the bytes left.
    Payload { left: u64 },
}

/// The state of the watch over one direction of one connection.
#[derive(Debug, Clone)]
pub struct FrameWatch {
    phase: Phase,
    header: [u8; 14],
    /// Within a fragmented message: its small fragments so far.
    in_message: Option<u32>,
    pings: u64,
}

impl Default for FrameWatch {
    fn default() -> FrameWatch {
        FrameWatch {
            phase: Phase::Header { have: 0 },
            header: [0; 14],
            in_message: None,
            pings: 0,
        }
    }
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
    /// Takes the next bytes read from the peer, `elapsed` after the subtest began; an
    /// error says why the peer is refused.
    pub fn take(&mut self, mut bytes: &[u8], elapsed: Duration) -> Result<(), String> {
        while !bytes.is_empty() {
            match self.phase {
                Phase::Payload { left } => {
                    let skip = left.min(bytes.len() as u64);
                    bytes = &bytes[skip as usize..];
                    self.phase = if left == skip {
                        Phase::Header { have: 0 }
                    } else {
                        Phase::Payload { left: left - skip }
                    };
                }
                Phase::Header { have } => {
                    let need = if have < 2 {
                        2
                    } else {
                        header_len(self.header[1])
                    };
                    let take = (need - have).min(bytes.len());
                    self.header[have..have + take].copy_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
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
                            Phase::Payload { left }
                        };
                    }
                }
            }
        }
        Ok(())
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
                let small = u32::from(len < SMALL_FRAGMENT && !fin);
                let count = match (opcode, self.in_message) {
                    (0x0, Some(count)) => count + small,
                    _ => small,
                };
                if count > MAX_SMALL_FRAGMENTS {
                    return Err(format!(
                        "a fragment storm: over {MAX_SMALL_FRAGMENTS} fragments under \
                         {SMALL_FRAGMENT} bytes in one message"
                    ));
                }
                self.in_message = (!fin).then_some(count);
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
}

/// A connection whose reads pass through a [`FrameWatch`] first.
pub struct Watched<S> {
    inner: S,
    watch: FrameWatch,
    started: Instant,
}

impl<S> Watched<S> {
    pub fn new(inner: S, started: Instant) -> Watched<S> {
        Watched {
            inner,
            watch: FrameWatch::default(),
            started,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let elapsed = this.started.elapsed();
                match this.watch.take(&buf.filled()[before..], elapsed) {
                    Ok(()) => Poll::Ready(Ok(())),
                    Err(why) => Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, why))),
                }
            }
            other => other,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
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

    #[test]
    fn whole_messages_and_large_fragments_pass_a_storm_does_not() {
        let mut watch = FrameWatch::default();
        // A 1 MiB message in one frame, then one cut in 4 KiB frames (as a browser's
        // library might), then a ping.
        watch.take(&frame(true, 2, 1 << 20), T).unwrap();
        watch.take(&message(&[4096; 256]), T).unwrap();
        watch.take(&frame(true, 9, 4), T).unwrap();
        // Small fragments up to the allowance in a message, then over it.
        watch
            .take(&message(&[10; MAX_SMALL_FRAGMENTS as usize + 1]), T)
            .unwrap();
        let storm = message(&[1; MAX_SMALL_FRAGMENTS as usize + 2]);
        let why = watch.take(&storm, T).unwrap_err();
        assert!(why.contains("fragment storm"), "{why}");
    }

    #[test]
    fn the_count_starts_again_with_each_message() {
        let mut watch = FrameWatch::default();
        for _ in 0..10 {
            watch
                .take(&message(&[1; MAX_SMALL_FRAGMENTS as usize + 1]), T)
                .unwrap();
        }
    }

    #[test]
    fn pings_past_the_allowance_are_a_flood() {
        let mut watch = FrameWatch::default();
        let pings: Vec<u8> = (0..70).flat_map(|_| frame(true, 9, 0)).collect();
        assert!(watch.take(&pings, T).unwrap_err().contains("pings"));
        let mut slow = FrameWatch::default();
        slow.take(&pings, Duration::from_secs(10)).unwrap();
    }

    proptest! {
        /// However the bytes are cut as they arrive, the watch reaches the same verdict
        /// as when they come at once, and never panics on any bytes.
        #[test]
        fn any_cut_gives_the_same_verdict(
            fragments in proptest::collection::vec(0usize..2000, 1..100),
            cuts in proptest::collection::vec(1usize..300, 1..50),
        ) {
            let bytes = message(&fragments);
            let whole = FrameWatch::default().take(&bytes, T).is_ok();
            let mut watch = FrameWatch::default();
            let mut rest = &bytes[..];
            let mut verdict = Ok(());
            for cut in cuts.iter().cycle() {
                if rest.is_empty() || verdict.is_err() {
                    break;
                }
                let n = (*cut).min(rest.len());
                verdict = watch.take(&rest[..n], T);
                rest = &rest[n..];
            }
            prop_assert_eq!(verdict.is_ok(), whole);
            let small = fragments[..fragments.len() - 1]
                .iter()
                .filter(|&&len| (len as u64) < SMALL_FRAGMENT)
                .count();
            prop_assert_eq!(whole, small <= MAX_SMALL_FRAGMENTS as usize);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
            let _ = FrameWatch::default().take(&bytes, T);
        }
    }
}
