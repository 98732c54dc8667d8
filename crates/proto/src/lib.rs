//! linerate's control protocol, sans-IO.
//!
//! This crate does no I/O and never reads the clock: its state machines are fed bytes and
//! time and return bytes to send, deadlines and events (the shape of quinn-proto). Sockets,
//! threads and clocks belong to the drivers in `linerate-drivers`. The exchange is described
//! in [`session`] and in docs/protocol.md.

pub mod address_check;
pub mod agent;
pub mod agent_session;
pub mod auth;
pub mod datagram;
pub mod frame;
pub mod iperf2;
pub mod iperf3;
pub mod machine;
pub mod message;
pub mod multicast;
pub mod preface;
pub mod session;
pub mod text;
pub mod transaction;
pub mod video;

pub use machine::{Machine, Outbox};
pub use message::{ClientMessage, Limits, RefuseCode, ServerMessage};
pub use preface::{Preface, Token, PROTOCOL_VERSION};
pub use session::{
    ClientEvent, ClientSession, Offer, ServerEvent, ServerSession, SessionError, Timeouts,
};
