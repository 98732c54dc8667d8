//! linerate's data plane and the drivers that run tests over real sockets.
//!
//! - [`worker`] and [`plane`]: T worker threads, each with its own mio poll set and share of
//!   the flows; counters are per worker and read out at interval boundaries.
//! - [`pacer`]: the per-flow token bucket behind `--rate`.
//! - [`rr`]: the request/response loop of a worker (`rr`, `crr`).
//! - [`udp`]: the UDP loop of a worker (batched, optionally offloaded datagrams).
//! - [`search`]: the sans-IO rate search behind `--find-max`.
//! - [`sys`]: Linux socket options and TCP_INFO.
//! - [`server`] and [`client`]: the control-connection drivers around the sans-IO sessions
//!   of `linerate-proto`.

pub mod access;
pub mod client;
pub mod control;
pub mod flow;
pub mod iperf3;
pub mod iperf3_auth;
pub mod iperf3_client;
pub mod iperf3_server;
pub mod pacer;
pub mod plane;
pub mod profile;
pub mod rr;
pub mod search;
pub mod server;
pub mod sys;
pub mod udp;
pub mod worker;
