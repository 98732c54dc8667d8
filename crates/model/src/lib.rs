//! linerate's ground crate: the values every other crate shares, knowing nobody.
//!
//! The resolved test configuration ([`TestConfig`]), what one end of a test measured
//! ([`SideResult`]) with its host facts, latency histograms and their summaries, a profile
//! group's figures, and the units sizes and rates are written in. The control protocol
//! (linerate-proto) carries these values; the data plane fills them; the report crate
//! merges and renders them. No I/O, no clock, no renderer lives here, so the protocol
//! crate builds without the report's plotting, CSV and statistics dependencies.

pub mod app;
pub mod call;
pub mod clock;
mod config;
mod explain;
pub mod latency;
pub mod marks;
pub mod measure;
pub mod mesh_row;
pub mod multicast;
pub mod ndt7;
pub mod observe;
mod path;
pub mod profile;
pub mod qoo;
mod request;
mod side;
pub mod units;
pub mod video;

pub use config::*;
pub use explain::explain;
pub use path::*;
pub use request::*;
pub use side::*;
