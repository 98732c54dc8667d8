//! linerate's file mover (docs/transfer-protocol.md): `linerate copy` and the server's
//! `--files` service.
//!
//! The cores are sans-IO: `wire` (datagram codecs), `layout` (chunks and blocks),
//! `receiver` and `sender` (which blocks, which packet numbers, ACKs, loss detection),
//! `rate` (pacing), `journal` (what a `.part` file already holds), `control` (the control
//! connection's messages) and `confine` (which paths a server may touch). They take the
//! time as an argument and never open a file or socket (`clippy.toml`).

pub mod confine;
pub mod control;
pub mod journal;
pub mod layout;
pub mod rate;
pub mod receiver;
pub mod seal;
pub mod sender;
pub mod wire;

// The drivers: sockets, files, threads and the clock.
pub mod channel;
pub mod client;
pub mod diagnosis;
pub mod disk;
pub mod recv;
pub mod send;
pub mod service;
pub mod session;
pub mod sys;
pub mod transport;
