//! Responsiveness under working conditions (draft-ietf-ippm-responsiveness, "RPM"): how
//! many round trips a minute a path keeps while it is busy, as Apple's networkQuality
//! and Cloudflare's mach measure it.
//!
//! - [`method`]: the draft's rules, sans IO (trimmed means, responsiveness, saturation,
//!   grades);
//! - [`server`]: `serve --http` / `--https`: the configuration at `/.well-known/nq`, a
//!   small object, an endless large download and an upload sink, over HTTP/1.1 and
//!   HTTP/2 (hyper), with or without TLS (rustls), bounded;
//! - [`client`]: `linerate rpm`: load-generating connections added until goodput and
//!   responsiveness stop moving, foreign and self probes meanwhile.

pub mod body;
pub mod client;
pub mod method;
pub mod server;
mod sys;
pub mod tls;

#[cfg(test)]
mod tests;

pub use hyper::Uri;

/// Unsent bytes a loading connection's socket keeps ready beyond what is in flight
/// (TCP_NOTSENT_LOWAT). Without it the kernel buffers megabytes unsent, and a self probe
/// waits behind them for seconds that say nothing about the path (a 50 Mbit/s lab path:
/// 2.5 s); with it the sender still keeps the pipe full, and the queue the probes meet is
/// the network's.
pub const NOTSENT_LOWAT: u32 = 128 * 1024;

pub use sys::limit_unsent;
