//! linerate's data plane: it moves and counts the bytes of tests it is handed, and nothing
//! else. It never accepts a connection, drives a session or waits on storage; the drivers
//! (linerate-drivers) hand it connected sockets and a resolved configuration.
//!
//! - [`flow`]: the types the parts share: a flow's spec, a worker's plan, the samples and
//!   outcomes it sends back, the signal that ends a test early.
//! - [`plane`]: a side's workers, their schedule of interval boundaries, and the merge of
//!   their samples into intervals and a side's result.
//! - [`worker`]: the TCP stream loop (blocking for one flow, a mio event loop for many).
//! - [`udp`]: the UDP loop (batched, optionally offloaded datagrams).
//! - [`rr`]: the request/response loop (`rr`, `crr`).
//! - [`pacer`]: the per-flow token bucket behind `--rate`.
//! - [`sys`]: Linux socket options, TCP_INFO, CPU pinning.

pub mod bursts;
mod conn;
pub mod flow;
mod nap;
pub mod pacer;
pub mod plane;
pub mod quic;
mod quic_socket;
pub mod rr;
pub mod sys;
pub mod udp;
mod video;
pub mod worker;
