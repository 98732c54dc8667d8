//! STAMP, the Simple Two-way Active Measurement Protocol (RFC 8762) with its optional
//! extensions (RFC 8972): `linerate stamp` sends test packets to any reflector (routers,
//! TWAMP-light reflectors, another linerate) and `linerate serve --stamp` answers them.
//!
//! The cores are sans-IO: `wire` (packets, timestamps, TLVs, HMAC), `reflector` (what an
//! arriving packet gets: an answer of the same size, or a refusal with its reason, under
//! a bounded session table and rate caps) and `tally` (a sender's probes and answers into
//! the figures of a [`linerate_report::stamp::StampReport`]; `call`, a call carried by
//! the session's requests and answers, scored each way). Time comes in as arguments.
//! `sys` is the socket calls that carry the packets' metadata (TOS, TTL, the kernel's
//! receive time; the multicast receivers read their datagrams with them too); `sender` (one session, `linerate stamp`), `prober` (many sessions on one
//! thread, an agent's) and `listener` (the reflector) are the loops around them.

pub mod call;
pub mod listener;
pub mod prober;
pub mod reflector;
pub mod sender;
pub mod sys;
pub mod tally;
pub mod wire;

#[cfg(test)]
mod tests;

/// STAMP's well-known port (RFC 8762 §4.1).
pub const PORT: u16 = 862;

/// A reflector named as users name one, as an address: HOST, HOST:PORT, [V6]:PORT or a
/// bare IPv6 address, port 862 unless given. The error is the reason alone; the caller
/// names the value.
pub fn resolve_reflector(target: &str) -> Result<std::net::SocketAddr, String> {
    resolve_reflector_at(target, PORT)
}

/// [`resolve_reflector`] with another protocol's port (irtt's 2112) where none is named.
pub fn resolve_reflector_at(target: &str, port: u16) -> Result<std::net::SocketAddr, String> {
    use std::net::{SocketAddr, ToSocketAddrs};
    if target.is_empty() || target.contains('/') || target.contains(char::is_whitespace) {
        return Err("give HOST or HOST:PORT".into());
    }
    if let Ok(ip) = target.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let with_port = if target.starts_with('[')
        || target
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        target.to_string()
    } else {
        format!("{target}:{port}")
    };
    with_port
        .to_socket_addrs()
        .map_err(|e| e.to_string())?
        .next()
        .ok_or_else(|| "the name has no address".into())
}

/// A session identifier for a new session: nonzero, drawn from the system's randomness.
pub fn random_ssid() -> u16 {
    let mut bytes = [0u8; 2];
    let _ = getrandom::getrandom(&mut bytes);
    u16::from_be_bytes(bytes).max(1)
}
