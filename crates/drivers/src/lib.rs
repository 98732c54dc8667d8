//! linerate's drivers: they run the sans-IO sessions of linerate-proto over real sockets
//! and hand the data to linerate-engine's data plane.
//!
//! - [`server`]: `linerate serve`'s acceptor. It owns the listening socket, lets each new
//!   connection in through the [`access`] gate, reads its preface and hands it to its
//!   protocol's handler: [`native_server`] (linerate tests), [`iperf3_server`] (iperf3
//!   clients), the agent ([`profile::agent`]), or a waiting test (data connections);
//!   iperf 2's port has its own threads, [`iperf2_server`] (TCP) and [`iperf2_udp`]. The
//!   acceptor knows the handlers; no handler imports the acceptor: what they share is in
//!   [`server_state`].
//! - [`client`]: a native test against a server (or an in-process one on loopback).
//! - [`iperf3_client`]: a test against a real iperf3 server; [`iperf3`] converts between
//!   iperf3's parameters and results and linerate's configuration and results.
//! - [`profile`]: profile runs: the controller, the agent, and the profile threads.
//! - [`bulk_load`]: `--load`'s bulk flows beside a request/response test.
//! - [`control`]: a control connection's socket loop around a session.
//! - [`access`]: who may connect, how many connections each may hold, the operator's log.
//! - [`iperf3_auth`]: loading iperf3's authentication files.

pub mod access;
pub mod bulk_load;
pub mod client;
pub mod control;
pub mod doctor;
pub mod iperf2_back;
pub(crate) mod iperf2_bounceback;
pub mod iperf2_client;
pub(crate) mod iperf2_kept;
pub(crate) mod iperf2_server;
pub(crate) mod iperf2_udp;
pub mod iperf3;
pub mod iperf3_auth;
pub mod iperf3_client;
pub mod iperf3_server;
pub mod multicast;
pub mod native_server;
pub mod profile;
pub mod secure;
mod served;
pub mod server;
pub mod server_state;
mod sys;
