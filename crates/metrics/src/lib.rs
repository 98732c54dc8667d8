//! A mesh's results where operators look: OpenMetrics for Prometheus to scrape, the same
//! series sent by remote_write, a live grid in the browser, and alerts on regressions.
//! The board (sans-IO) holds what was measured; everything else reads it.

pub mod alerts;
pub mod assess;
pub mod board;
pub mod families;
pub mod grid;
pub mod openmetrics;
pub mod past;
pub mod post;
pub mod remote_write;
pub mod served;
pub mod server;
pub mod watch;

#[cfg(test)]
mod tests;
