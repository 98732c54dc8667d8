//! linerate's file mover (docs/transfer-protocol.md): `linerate copy` and the server's
//! `--files` service.
//!
//! The cores are sans-IO: `wire` (datagram codecs), `layout` (chunks and blocks),
//! `receiver` and `sender` (which blocks, which packet numbers, ACKs, loss detection),
//! `rate` (pacing), `train` (a cold start's packet train), `journal` (what a `.part` file
//! already holds), `control` (the control connection's messages), `confine` (which paths a
//! server may touch) and `path_memory` (what earlier copies learned of their paths; its
//! `load` and `save` are the one file access beside it). They take the time as an argument and never open a socket
//! (`clippy.toml`).

pub mod confine;
pub mod control;
pub mod journal;
pub mod layout;
pub mod path_memory;
pub mod rate;
pub mod receiver;
pub mod seal;
pub mod sender;
pub mod train;
pub mod wire;

// What the cores and drivers report: a file's figures and progress, why a transfer
// stopped, and (sans-IO too) what limited it.
pub mod diagnosis;
pub mod error;
pub mod outcome;

// The drivers: sockets, files, threads and the clock. `send_driver` and `receive_driver`
// run the `sender` and `receiver` cores over the session's datagrams (`datagrams`).
pub mod channel;
pub mod client;
pub mod datagrams;
pub mod disk;
pub mod lanes;
pub mod receive_driver;
pub mod receive_lanes;
pub mod send_driver;
pub mod service;
pub mod session;
pub mod sys;
