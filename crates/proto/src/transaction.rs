//! Request/response transactions, sans IO: which requests a requester may send at a given
//! time, which transactions the response bytes complete and how long each took, and how
//! many responses a responder owes. Time is injected (nanoseconds on the caller's clock),
//! so the rules are tested without sockets.
//!
//! Two ways to pace a requester:
//! - **closed loop**: keep `outstanding` transactions in flight; each counts from the moment
//!   its request was handed over. A stall lowers the rate, and the rate shows it.
//! - **open loop**: requests fall due at a fixed rate, and each counts from the moment it
//!   was *due*, not when it was sent. A stall delays every request due during it, and each
//!   of those carries the delay in its round trip, so the tail shows the stall instead of
//!   hiding it (no coordinated omission). At most `cap` transactions are in flight; the
//!   requests due beyond that are owed and go out, still counted from their due times, as
//!   soon as responses make room.
//!
//! Over a byte stream answers come in order, so response bytes complete the oldest
//! transactions first. Datagrams may be lost or reordered: there each request carries a
//! tag (its number), the answer carries it back, and [`Requester::answered`] completes the
//! transaction it names, so a lost request or answer leaves its own transaction to expire
//! instead of letting the next answer complete it.

use std::collections::VecDeque;
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum TransactionError {
    /// More response bytes than the requests in flight asked for: the peer answers with
    /// the wrong size, or unasked.
    #[error("the peer sent {extra} response bytes more than the {in_flight} requests in flight asked for")]
    UnaskedBytes { extra: usize, in_flight: usize },
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Pacing {
    Closed { outstanding: usize },
    Open { interval_ns: f64, cap: usize },
}

/// The requesting end of one flow.
#[derive(Debug, Clone)]
pub struct Requester {
    response: usize,
    pacing: Pacing,
    /// The transactions in flight, oldest first: (number, start time).
    in_flight: VecDeque<(u64, u64)>,
    /// Bytes of the oldest response that have arrived.
    partial: usize,
    /// Open loop: requests due since the start, by count.
    scheduled: u64,
    start_ns: u64,
    sent: u64,
    completed: u64,
}

impl Requester {
    /// A closed-loop requester keeping `outstanding` (at least 1) transactions in flight,
    /// each expecting a `response`-byte answer.
    pub fn closed(response: usize, outstanding: usize) -> Requester {
        Requester::new(
            response,
            Pacing::Closed {
                outstanding: outstanding.max(1),
            },
            0,
        )
    }

    /// An open-loop requester whose requests fall due `per_second` times a second from
    /// `start_ns`, with at most `cap` (at least 1) transactions in flight.
    pub fn open(response: usize, per_second: f64, start_ns: u64, cap: usize) -> Requester {
        Requester::new(
            response,
            Pacing::Open {
                interval_ns: 1e9 / per_second.max(1e-9),
                cap: cap.max(1),
            },
            start_ns,
        )
    }

    fn new(response: usize, pacing: Pacing, start_ns: u64) -> Requester {
        Requester {
            response: response.max(1),
            pacing,
            in_flight: VecDeque::new(),
            partial: 0,
            scheduled: 0,
            start_ns,
            sent: 0,
            completed: 0,
        }
    }

    /// The due time of request number `n` (open loop).
    fn due_time(&self, n: u64, interval_ns: f64) -> u64 {
        self.start_ns + (n as f64 * interval_ns) as u64
    }

    /// How many requests to send now, at `now_ns`; the caller must send exactly that many.
    pub fn due(&mut self, now_ns: u64) -> usize {
        let mut count = 0;
        match self.pacing {
            Pacing::Closed { outstanding } => {
                while self.in_flight.len() < outstanding {
                    self.in_flight.push_back((self.sent + count as u64, now_ns));
                    count += 1;
                }
            }
            Pacing::Open { interval_ns, cap } => {
                while self.in_flight.len() < cap {
                    let due = self.due_time(self.scheduled, interval_ns);
                    if due > now_ns {
                        break;
                    }
                    self.in_flight.push_back((self.sent + count as u64, due));
                    self.scheduled += 1;
                    count += 1;
                }
            }
        }
        self.sent += count as u64;
        count
    }

    /// Open loop: when the next request falls due (possibly already past, if the cap
    /// holds it back); `None` in closed loop, where only responses make room.
    pub fn next_due_ns(&self) -> Option<u64> {
        match self.pacing {
            Pacing::Open { interval_ns, .. } => Some(self.due_time(self.scheduled, interval_ns)),
            Pacing::Closed { .. } => None,
        }
    }

    /// Open loop: requests that were due by `now_ns` but not yet sent (held back by the
    /// cap): the rate asked for and not honoured.
    /// Requests merely not yet taken with [`due`](Self::due) while there is room do not
    /// count: nothing holds them back.
    pub fn owed(&self, now_ns: u64) -> u64 {
        match self.pacing {
            Pacing::Open { interval_ns, cap }
                if now_ns >= self.start_ns && self.in_flight.len() >= cap =>
            {
                let due = ((now_ns - self.start_ns) as f64 / interval_ns) as u64 + 1;
                due.saturating_sub(self.scheduled)
            }
            _ => 0,
        }
    }

    /// Takes `bytes` response bytes that arrived at `now_ns`, and hands the round trip of
    /// each transaction they complete to `done`, in nanoseconds.
    pub fn received(
        &mut self,
        bytes: usize,
        now_ns: u64,
        mut done: impl FnMut(u64),
    ) -> Result<(), TransactionError> {
        let owed = self.in_flight.len() * self.response - self.partial;
        if bytes > owed {
            return Err(TransactionError::UnaskedBytes {
                extra: bytes - owed,
                in_flight: self.in_flight.len(),
            });
        }
        let mut total = self.partial + bytes;
        while total >= self.response {
            total -= self.response;
            let (_, start) = self
                .in_flight
                .pop_front()
                .expect("bytes owed imply a request");
            done(now_ns.saturating_sub(start));
            self.completed += 1;
        }
        self.partial = total;
        Ok(())
    }

    /// A datagram's answer tagged `tag` arrived at `now_ns`: completes the transaction in
    /// flight whose number it carries, handing its round trip to `done`. `false` when none
    /// is in flight under that tag: an answer to a transaction already given up for lost
    /// (or one never asked).
    pub fn answered(&mut self, tag: u32, now_ns: u64, done: impl FnOnce(u64)) -> bool {
        let Some(at) = self.in_flight.iter().position(|&(n, _)| tag_of(n) == tag) else {
            return false;
        };
        let (_, start) = self.in_flight.remove(at).expect("found above");
        done(now_ns.saturating_sub(start));
        self.completed += 1;
        true
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// When the oldest transaction in flight started (was sent, or fell due).
    pub fn oldest_ns(&self) -> Option<u64> {
        self.in_flight.front().map(|&(_, start)| start)
    }

    /// Gives up the transactions that started more than `timeout_ns` before `now_ns`
    /// (a datagram protocol's lost request or answer); returns how many. They make room
    /// for new requests and never complete.
    pub fn expire(&mut self, now_ns: u64, timeout_ns: u64) -> usize {
        let mut expired = 0;
        while self
            .in_flight
            .front()
            .is_some_and(|&(_, start)| now_ns.saturating_sub(start) > timeout_ns)
        {
            self.in_flight.pop_front();
            expired += 1;
        }
        if expired > 0 {
            self.partial = 0;
        }
        expired
    }

    /// Requests sent and transactions completed so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    pub fn completed(&self) -> u64 {
        self.completed
    }
}

/// Bytes of the tag at the start of a datagram request and of its answer: the request's
/// number, little-endian, modulo 2³². Transactions with smaller messages go untagged.
pub const TAG_BYTES: usize = 4;

/// The tag of transaction number `n`: it wraps, and no flow holds 2³² in flight.
pub fn tag_of(n: u64) -> u32 {
    n as u32
}

/// The tag a datagram carries, if it is long enough to carry one.
pub fn read_tag(datagram: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(
        datagram.get(..TAG_BYTES)?.try_into().ok()?,
    ))
}

/// The responding end of one flow over a byte stream: counts whole requests.
#[derive(Debug, Clone)]
pub struct Responder {
    request: usize,
    partial: usize,
    answered: u64,
}

impl Responder {
    pub fn new(request: usize) -> Responder {
        Responder {
            request: request.max(1),
            partial: 0,
            answered: 0,
        }
    }

    /// Takes `bytes` request bytes; the number of responses now owed.
    pub fn received(&mut self, bytes: usize) -> usize {
        let total = self.partial + bytes;
        let whole = total / self.request;
        self.partial = total % self.request;
        self.answered += whole as u64;
        whole
    }

    /// Requests answered (or owed an answer) so far.
    pub fn answered(&self) -> u64 {
        self.answered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;
    const MS: u64 = 1_000_000;

    /// Open loop over datagrams: request 0 is lost, 1 and 2 are answered (2 first). Each
    /// answer completes its own transaction, timed from its own due time; the lost one
    /// stays until it expires, counted once, and its answer after that completes nothing.
    /// (Matched in order, answer 1 would have completed transaction 0 with its time and
    /// the loss would never have shown.)
    #[test]
    fn tagged_answers_complete_their_own_transactions() {
        let mut r = Requester::open(64, 1000.0, 0, 8);
        assert_eq!(r.due(2 * MS), 3, "requests 0, 1 and 2 fell due");
        let mut rtts = Vec::new();
        assert!(r.answered(tag_of(2), 12 * MS, |ns| rtts.push(ns)));
        assert!(r.answered(tag_of(1), 13 * MS, |ns| rtts.push(ns)));
        assert_eq!(rtts, vec![10 * MS, 12 * MS]);
        assert_eq!((r.in_flight(), r.completed()), (1, 2));
        assert_eq!(
            r.oldest_ns(),
            Some(0),
            "the lost request is still the oldest"
        );
        assert!(
            !r.answered(tag_of(1), 14 * MS, |_| {}),
            "a duplicate answer completes nothing"
        );
        assert_eq!(r.expire(201 * MS, 200 * MS), 1);
        assert!(
            !r.answered(tag_of(0), 250 * MS, |_| {}),
            "late: already given up"
        );
        assert_eq!(r.completed(), 2);
        // Tags are read back from the datagram's first bytes, little-endian.
        let mut datagram = vec![0u8; 64];
        datagram[..TAG_BYTES].copy_from_slice(&tag_of(0x1_0000_0007).to_le_bytes());
        assert_eq!(read_tag(&datagram), Some(7));
        assert_eq!(read_tag(&datagram[..3]), None);
    }

    #[test]
    fn expired_transactions_make_room_and_never_complete() {
        let mut r = Requester::closed(10, 2);
        assert_eq!(r.due(0), 2);
        assert_eq!(r.oldest_ns(), Some(0));
        assert_eq!(r.expire(50 * MS, 100 * MS), 0, "not yet overdue");
        assert_eq!(r.expire(101 * MS, 100 * MS), 2);
        assert_eq!((r.in_flight(), r.completed()), (0, 0));
        assert_eq!(r.due(101 * MS), 2, "room for two new requests");
        let mut rtts = Vec::new();
        r.received(10, 102 * MS, |ns| rtts.push(ns)).unwrap();
        assert_eq!(
            rtts,
            vec![MS],
            "timed from the new request, not the lost one"
        );
    }

    #[test]
    fn closed_loop_keeps_its_transactions_in_flight_and_times_each() {
        let mut r = Requester::closed(100, 3);
        assert_eq!(r.due(0), 3);
        assert_eq!(r.due(5 * US), 0, "nothing more until a response");
        let mut rtts = Vec::new();
        // One and a half responses, then the rest of the second in another read.
        r.received(150, 20 * US, |ns| rtts.push(ns)).unwrap();
        assert_eq!(rtts, vec![20 * US]);
        r.received(50, 30 * US, |ns| rtts.push(ns)).unwrap();
        assert_eq!(rtts, vec![20 * US, 30 * US]);
        assert_eq!(r.due(31 * US), 2, "two slots freed");
        r.received(100, 40 * US, |ns| rtts.push(ns)).unwrap();
        assert_eq!(rtts[2], 40 * US, "the oldest request answers first");
        assert_eq!((r.sent(), r.completed(), r.in_flight()), (5, 3, 2));
    }

    #[test]
    fn bytes_beyond_the_requests_in_flight_are_an_error() {
        let mut r = Requester::closed(10, 1);
        r.due(0);
        assert_eq!(
            r.received(11, US, |_| {}),
            Err(TransactionError::UnaskedBytes {
                extra: 1,
                in_flight: 1
            })
        );
        let mut idle = Requester::closed(10, 1);
        assert!(idle.received(1, US, |_| {}).is_err(), "nothing was asked");
    }

    /// A peer that serves every request in 20 µs except for one 2 ms stall, served
    /// one request at a time (a single server thread); returns every round trip.
    fn serve_with_a_stall(mut r: Requester, requests: u64, open: bool) -> (Vec<u64>, u64) {
        let mut rtts = Vec::new();
        let mut now = 0u64;
        let mut server_free_at = 0u64;
        let mut answered = 0u64;
        while answered < requests {
            // Requests due by now go out; the server takes them in order.
            let sent = r.due(now);
            for _ in 0..sent {
                let service = if answered + r.in_flight() as u64 == 500 {
                    2 * MS
                } else {
                    20 * US
                };
                server_free_at = server_free_at.max(now) + service;
            }
            // Advance to the next event: a response or (open loop) a due request.
            let next_due = if open { r.next_due_ns() } else { None };
            let response_at = (r.in_flight() > 0).then_some(server_free_at);
            let next = [next_due, response_at].into_iter().flatten().min().unwrap();
            now = now.max(next);
            if r.in_flight() > 0 && server_free_at <= now {
                let in_flight = r.in_flight();
                r.received(in_flight * 8, now, |ns| rtts.push(ns)).unwrap();
                answered += in_flight as u64;
            }
        }
        (rtts, now)
    }

    /// The coordinated-omission property. Closed loop: one transaction sees the stall and
    /// the rate drops. Open loop at a rate the peer sustains: every request due during the
    /// stall carries its share of it, so the stall reaches the 99th percentile.
    #[test]
    fn an_open_loop_shows_a_stall_in_the_tail_that_a_closed_loop_hides() {
        let (closed, closed_end) = serve_with_a_stall(Requester::closed(8, 1), 1000, false);
        let slow = |rtts: &[u64]| rtts.iter().filter(|&&ns| ns >= MS).count();
        assert_eq!(slow(&closed), 1, "closed loop: one slow transaction");
        // Without the stall, 1000 x 20 µs = 20 ms; the stall shows only as a lower rate.
        assert!(closed_end >= 20 * MS + 2 * MS - 20 * US);

        // Open loop at 10,000 requests/s (one due every 100 µs).
        let (open, _) = serve_with_a_stall(Requester::open(8, 10_000.0, 0, 1000), 1000, true);
        // Requests due in the 2 ms stall: about 20, each delayed by what remained of it.
        let delayed = open.iter().filter(|&&ns| ns >= 500 * US).count();
        assert!(delayed >= 15, "open loop: {delayed} delayed transactions");
        let mut sorted = open.clone();
        sorted.sort_unstable();
        let p99 = sorted[sorted.len() * 99 / 100];
        assert!(p99 >= 500 * US, "the stall reaches p99: {p99} ns");
    }

    #[test]
    fn open_loop_holds_requests_beyond_the_cap_and_counts_them_from_their_due_time() {
        // 1,000 requests/s: due at 0, 1, 2, ... ms. At most 2 in flight.
        let mut r = Requester::open(1, 1000.0, 0, 2);
        assert_eq!(r.due(0), 1);
        assert_eq!(r.due(5 * MS), 1, "the cap holds the rest back");
        assert_eq!(r.owed(5 * MS), 4, "due at 2, 3, 4 and 5 ms and not sent");
        let mut rtts = Vec::new();
        r.received(1, 6 * MS, |ns| rtts.push(ns)).unwrap();
        assert_eq!(r.owed(6 * MS), 0, "room again: nothing holds them back");
        assert_eq!(rtts, vec![6 * MS], "the first request was due at 0");
        // Room for one more: the request due at 2 ms goes out now, counted from 2 ms.
        assert_eq!(r.due(6 * MS), 1);
        r.received(2, 7 * MS, |ns| rtts.push(ns)).unwrap();
        assert_eq!(rtts, vec![6 * MS, 6 * MS, 5 * MS]);
        assert_eq!(r.next_due_ns(), Some(3 * MS));
    }

    #[test]
    fn a_responder_counts_whole_requests_across_reads() {
        let mut r = Responder::new(100);
        assert_eq!(r.received(50), 0);
        assert_eq!(r.received(250), 3);
        assert_eq!(r.received(0), 0);
        assert_eq!(r.received(100), 1);
        assert_eq!(r.answered(), 4);
    }
}
