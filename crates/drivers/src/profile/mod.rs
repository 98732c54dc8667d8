//! Profile runs (`linerate run`): threads that execute a group's transactions
//! ([`exec`]), the peer side that runs their mirror image, the agent handler inside
//! `linerate serve` ([`agent`]) and the controller that drives the agents ([`controller`]).
//!
//! Profile threads are OS threads with blocking sockets, as uperf's are: each executes its
//! operations in order, so a thread is the unit the profile describes. Every blocking call
//! waits at most [`SLICE`] before it checks whether to give up, so no thread outlives the
//! run's bounds. Threads share nothing while they run but a stop flag; their figures are
//! merged when they end.

pub mod agent;
mod client_job;
mod conn;
pub mod controller;
mod exec;
pub mod files;
pub(crate) mod group;
pub(crate) mod link;
mod multicast_job;
mod rendezvous;
pub mod rpm_job;
mod served;
mod source_job;
pub mod stamp_job;
pub mod trace_job;

pub use link::LinkPool;
pub use multicast_job::RECEIVE as MULTICAST_RECEIVE;

/// Every kind of job an agent runs as a mesh test's source, each with both of its sides
/// in its module (`source_job::SourceKind`).
pub static SOURCE_KINDS: &[&source_job::SourceKind] = &[
    &stamp_job::KIND,
    &trace_job::KIND,
    &client_job::KIND,
    &multicast_job::SEND_KIND,
    &multicast_job::RECEIVE_KIND,
];

/// The source kind called `name`.
pub(crate) fn source_kind(name: &str) -> Option<&'static source_job::SourceKind> {
    SOURCE_KINDS.iter().copied().find(|k| k.name == name)
}

use std::time::Duration;

/// The longest a profile thread blocks before checking its stop conditions.
pub(crate) const SLICE: Duration = Duration::from_millis(100);

/// The agent port when a host is named without one.
pub const DEFAULT_PORT: u16 = 5201;

/// `host`, `host:port`, `[v6]:port` or `v6` to a socket address.
pub fn resolve(host: &str) -> std::io::Result<std::net::SocketAddr> {
    use std::net::ToSocketAddrs;
    let with_port = if host.parse::<std::net::IpAddr>().is_ok() {
        // A bare address, IPv6 included.
        std::net::SocketAddr::new(host.parse().expect("checked"), DEFAULT_PORT).to_string()
    } else if host
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        host.to_string()
    } else {
        format!("{host}:{DEFAULT_PORT}")
    };
    with_port.to_socket_addrs()?.next().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("'{host}' resolves to no address"),
        )
    })
}
