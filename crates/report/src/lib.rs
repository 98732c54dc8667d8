//! linerate's result model and its renderers.
//!
//! One [`model::Report`] value holds everything a test produced: the resolved configuration,
//! host facts, per-interval samples, per-flow figures and the summary. Renderers (text here,
//! JSON through serde) consume that value and nothing else. [`units`] parses and prints
//! sizes and rates the way iperf3 users write them.

pub mod assemble;
pub mod compare;
pub mod cpu_basis;
pub mod crypto;
pub mod document;
pub mod export;
#[cfg(test)]
mod fixtures;
pub mod headline;
pub mod html;
pub mod iperf2_text;
pub mod iperf3_json;
pub mod live;
pub mod model;
pub mod multicast;
mod native;
pub mod ndt7;
pub mod profile;
pub mod result_kind;
pub mod rpm;
pub mod rr;
mod sides;
pub mod stamp;
pub mod stats;
pub mod sweep;
pub mod text;
pub mod trace;

pub use linerate_model::{latency, units};
pub use model::*;
