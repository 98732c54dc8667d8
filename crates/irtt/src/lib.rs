//! irtt, the Isochronous Round-Trip Tester's protocol (version 1, irtt 0.9): `linerate
//! serve --irtt` answers irtt's clients (and flent's irtt measurements) as `irtt server`
//! does, bounded as every server path of linerate is; `linerate stamp --irtt` measures
//! against irtt servers.
//!
//! The cores are sans-IO: `wire` (packets, parameters, HMAC-MD5) and `server` (what a
//! packet gets: an open a token and its granted parameters, an echo its answer of the
//! same length, under bounded sessions and rates). `listener` is the socket loop around
//! them, reading datagrams with the kernel's arrival times through the STAMP crate's
//! socket calls.

pub mod client;
pub mod listener;
pub mod server;
pub mod wire;
