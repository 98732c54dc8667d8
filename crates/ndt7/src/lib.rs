//! ndt7, M-Lab's speed test protocol (m-lab/ndt-server `spec/ndt7-protocol.md`,
//! v0.11.0): a server any ndt7 client can run its subtests against (`serve --ndt7`), and
//! a client for any ndt7 server (`linerate ndt7`). The protocol's values (its
//! measurement message, message sizes, metadata) are linerate-model's `ndt7`; here is
//! what moves the bytes, and what the kernel says of the connection.

pub mod client;
pub mod frames;
pub mod kernel;
pub mod server;
mod session;
