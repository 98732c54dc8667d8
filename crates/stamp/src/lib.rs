//! STAMP, the Simple Two-way Active Measurement Protocol (RFC 8762) with its optional
//! extensions (RFC 8972): `linerate stamp` sends test packets to any reflector (routers,
//! TWAMP-light reflectors, another linerate) and `linerate serve --stamp` answers them.
//!
//! The cores are sans-IO: `wire` (packets, timestamps, TLVs, HMAC), `reflector` (what an
//! arriving packet gets: an answer of the same size, or a refusal with its reason, under
//! a bounded session table and rate caps) and `tally` (a sender's probes and answers into
//! the figures of a [`linerate_report::stamp::StampReport`]). Time comes in as arguments.
//! `sys` is the socket calls that carry the packets' metadata (TOS, TTL, the kernel's
//! receive time; the multicast receivers read their datagrams with them too); `sender` (one session, `linerate stamp`), `prober` (many sessions on one
//! thread, an agent's) and `listener` (the reflector) are the loops around them.

pub mod listener;
pub mod prober;
pub mod reflector;
pub mod sender;
pub mod sys;
pub mod tally;
pub mod wire;

#[cfg(test)]
mod tests;

/// STAMP's well-known port (RFC 8762 §4.1).
pub const PORT: u16 = 862;
