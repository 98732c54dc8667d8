//! Endless bodies: the server's large download and the client's upload, each a run of
//! the same zero-filled chunk until told to stop or past its deadline, counting what it
//! handed over.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

/// Each chunk: large enough that a frame's overhead is nothing, small enough to stay in
/// cache. HTTP/2 cuts it into frames of the peer's size.
pub const CHUNK: usize = 256 * 1024;

/// The zero-filled chunk every endless body hands out (shared, never copied).
pub fn chunk() -> Bytes {
    static ZEROS: [u8; CHUNK] = [0; CHUNK];
    Bytes::from_static(&ZEROS)
}

/// A body of `chunk()`s until `stop` is set or `deadline` passes.
pub struct Endless {
    /// Bytes handed over so far.
    pub sent: u64,
    pub stop: Arc<AtomicBool>,
    pub deadline: Instant,
}

impl Body for Endless {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.stop.load(Ordering::Relaxed) || Instant::now() >= self.deadline {
            return Poll::Ready(None);
        }
        self.get_mut().sent += CHUNK as u64;
        Poll::Ready(Some(Ok(Frame::data(chunk()))))
    }

    fn is_end_stream(&self) -> bool {
        false
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
