//! linerate's path emulator (docs/impair.md): a long, lossy path on demand, in user space.
//!
//! - [`Link`] is one direction's sans-IO core: frames and the time in, frames out when
//!   they are due, with delay, jitter, loss (independent or Gilbert-Elliott bursts),
//!   duplication, corruption, reordering and a rate-limited drop-tail queue. Seeded, O(1)
//!   per frame, no clock inside (`clippy.toml` enforces it outside the drivers).
//! - [`spec`] turns flag values into each direction's settings and refuses what cannot work.
//! - [`path`] resolves a whole path from them, the two directions checked together.
//! - `bridge` (Linux) drives two links between two interfaces over AF_PACKET sockets.
//! - `lab` builds a client, a router running the bridge, and a server in network
//!   namespaces on this machine; `lab_run` runs a command there beside `linerate serve`.

mod aqm;
pub mod frame;
pub mod frame_log;
mod link;
pub mod path;
pub mod spec;

pub use link::{Frame, Link, LinkCounters, REORDER_HOLD_NS};
pub use spec::{LinkSpec, SpecError};

pub mod bridge;
pub mod lab;
pub mod lab_run;
mod ring;
pub mod runner;
pub mod sojourn;
mod sys;
mod wait;
