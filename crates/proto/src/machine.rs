//! What every session of this crate is to a driver, and the queues each keeps.
//!
//! A driver owns the socket and the clock; a session is fed bytes, the peer's end of
//! stream and the time, and hands back bytes to send and the next deadline. Every session
//! (native client and server, agent, iperf3 client and server) implements [`Machine`]
//! itself, so one socket loop drives any of them; each keeps what it has to say in an
//! [`Outbox`]: bytes for the peer and events for the driver, in order.

use std::collections::VecDeque;
use std::time::Instant;

/// The calls a driver makes on any session.
pub trait Machine {
    /// Bytes the peer sent.
    fn handle_input(&mut self, now: Instant, bytes: &[u8]);
    /// The peer closed its end (or the connection broke).
    fn handle_eof(&mut self, now: Instant);
    /// The deadline `poll_timeout` gave has passed (or may have).
    fn handle_timeout(&mut self, now: Instant);
    /// The next bytes to send, in order.
    fn poll_transmit(&mut self) -> Option<Vec<u8>>;
    /// When `handle_timeout` must be called next.
    fn poll_timeout(&self) -> Option<Instant>;
}

/// A session's queues: bytes for the peer and events for the driver.
#[derive(Debug)]
pub struct Outbox<E> {
    transmit: VecDeque<Vec<u8>>,
    events: VecDeque<E>,
}

impl<E> Default for Outbox<E> {
    fn default() -> Self {
        Outbox {
            transmit: VecDeque::new(),
            events: VecDeque::new(),
        }
    }
}

impl<E> Outbox<E> {
    pub fn new() -> Outbox<E> {
        Outbox::default()
    }

    /// Queues bytes for the peer.
    pub fn send(&mut self, bytes: Vec<u8>) {
        self.transmit.push_back(bytes);
    }

    /// Queues an event for the driver.
    pub fn emit(&mut self, event: E) {
        self.events.push_back(event);
    }

    /// Drops whatever is queued for the peer and queues `bytes` alone (a session that
    /// must restart its opening).
    pub fn send_only(&mut self, bytes: Vec<u8>) {
        self.transmit.clear();
        self.transmit.push_back(bytes);
    }

    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.transmit.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<E> {
        self.events.pop_front()
    }

    /// Whether nothing is queued for the peer.
    pub fn is_drained(&self) -> bool {
        self.transmit.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_events_leave_in_the_order_queued() {
        let mut outbox = Outbox::new();
        outbox.send(b"one".to_vec());
        outbox.emit(1);
        outbox.send(b"two".to_vec());
        outbox.emit(2);
        assert_eq!(outbox.poll_transmit().as_deref(), Some(&b"one"[..]));
        assert_eq!(outbox.poll_event(), Some(1));
        assert_eq!(outbox.poll_transmit().as_deref(), Some(&b"two"[..]));
        assert!(outbox.is_drained());
        outbox.send(b"x".to_vec());
        outbox.send_only(b"again".to_vec());
        assert_eq!(outbox.poll_transmit().as_deref(), Some(&b"again"[..]));
        assert_eq!(outbox.poll_event(), Some(2));
        assert_eq!(outbox.poll_event(), None);
    }
}
