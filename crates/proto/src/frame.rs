//! Length-prefixed frames: a 4-byte big-endian length, then that many bytes of JSON
//! (docs/protocol.md 2).

use thiserror::Error;

/// The largest frame a server accepts from a client. Results sent by a server can be larger
/// (thousands of flows), so each reader sets its own limit.
pub const MAX_CLIENT_FRAME: usize = 1 << 20;
/// The largest frame a client accepts from a server.
pub const MAX_SERVER_FRAME: usize = 64 << 20;

/// A frame that cannot be accepted.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("frame length {length} is over the limit of {limit} bytes")]
    TooLarge { length: usize, limit: usize },
}

/// Splits a byte stream into frames. Feed it bytes with [`push`](Self::push), then take
/// frames with [`next_frame`](Self::next_frame) until it returns `Ok(None)`.
#[derive(Debug)]
pub struct FrameDecoder {
    buffer: Vec<u8>,
    limit: usize,
}

impl FrameDecoder {
    pub fn new(limit: usize) -> FrameDecoder {
        FrameDecoder {
            buffer: Vec::new(),
            limit,
        }
    }

    /// Changes the largest frame taken from here on: a link raises it once its peer has
    /// passed the handshake.
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// Bytes received but not yet part of a whole frame.
    pub fn pending(&self) -> usize {
        self.buffer.len()
    }

    /// Takes the bytes received past the last whole frame (what follows the frames on the
    /// connection).
    pub fn take_rest(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buffer)
    }

    /// The next whole frame's body, `None` if more bytes are needed. The length is checked
    /// against the limit as soon as its four bytes arrive, before the body is buffered.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        if self.buffer.len() < 4 {
            return Ok(None);
        }
        let length = u32::from_be_bytes([
            self.buffer[0],
            self.buffer[1],
            self.buffer[2],
            self.buffer[3],
        ]) as usize;
        if length > self.limit {
            return Err(FrameError::TooLarge {
                length,
                limit: self.limit,
            });
        }
        if self.buffer.len() < 4 + length {
            return Ok(None);
        }
        let body = self.buffer[4..4 + length].to_vec();
        self.buffer.drain(..4 + length);
        Ok(Some(body))
    }
}

/// Wraps a body in a frame.
pub fn encode(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_at_any_byte_boundary() {
        let mut stream = encode(b"{\"a\":1}");
        stream.extend(encode(b"[]"));
        let mut decoder = FrameDecoder::new(1024);
        let mut frames = Vec::new();
        for byte in &stream {
            decoder.push(std::slice::from_ref(byte));
            while let Some(frame) = decoder.next_frame().unwrap() {
                frames.push(frame);
            }
        }
        assert_eq!(frames, vec![b"{\"a\":1}".to_vec(), b"[]".to_vec()]);
        assert_eq!(decoder.pending(), 0);
    }

    #[test]
    fn oversized_length_is_refused_before_the_body() {
        let mut decoder = FrameDecoder::new(MAX_CLIENT_FRAME);
        decoder.push(&((MAX_CLIENT_FRAME + 1) as u32).to_be_bytes());
        assert_eq!(
            decoder.next_frame(),
            Err(FrameError::TooLarge {
                length: MAX_CLIENT_FRAME + 1,
                limit: MAX_CLIENT_FRAME
            })
        );
    }
}
