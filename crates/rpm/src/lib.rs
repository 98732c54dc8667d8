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
pub mod tls;

pub use hyper::Uri;
