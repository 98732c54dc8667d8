//! linerate's file mover (docs/transfer-protocol.md): `linerate copy` and the server's
//! `--files` service.
//!
//! The cores are sans-IO: `wire` (datagram codecs), `layout` (chunks and blocks),
//! `receiver` and `sender` (which blocks, which packet numbers, ACKs, loss detection),
//! `rate` (pacing), `journal` (what a `.part` file already holds), `control` (the control
//! connection's messages) and `confine` (which paths a server may touch). They take the
//! time as an argument and never open a file or socket (`clippy.toml`).

pub mod journal;
pub mod layout;
pub mod rate;
pub mod receiver;
pub mod sender;
pub mod wire;
