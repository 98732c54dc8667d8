//! One test from a request: resolved on this machine, checked against the bounds every
//! server puts on a test, and run against a server (or an in-process one on loopback)
//! with its live events flowing to a sink.

use crate::sink::{Event, Sink};
use anyhow::{anyhow, Context, Result};
use linerate_drivers::bulk_load;
use linerate_drivers::client::ClientOptions;
use linerate_model::{StreamRequest, StreamTransport, TestConfig, TestKind, TestRequest};
use linerate_proto::Limits;
use linerate_report::Report;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// The first address of `host`.
pub fn resolve_host(host: &str, port: u16) -> Result<SocketAddr> {
    resolve_host_as(host, port, Family::Any)
}

/// Which IP version a client reaches its server over (`-4`, `-6`, or that of `--bind`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Family {
    #[default]
    Any,
    V4,
    V6,
}

impl Family {
    /// The IP version the flags ask for: `-4` (`v4`), `-6` (`v6`), else that of `--bind`'s
    /// address; a bind address or a server named by its address of the other version is
    /// the user's mistake, told in words.
    pub fn asked(
        v4: bool,
        v6: bool,
        bind: Option<std::net::IpAddr>,
        host: Option<&str>,
    ) -> std::result::Result<Family, String> {
        let asked = match (v4, v6) {
            (true, _) => Family::V4,
            (_, true) => Family::V6,
            _ => Family::Any,
        };
        let flag = |family| match (bind, family) {
            (Some(addr), _) => format!("--bind {addr}"),
            (None, Family::V6) => "-6".to_string(),
            (None, _) => "-4".to_string(),
        };
        let family = match (asked, bind) {
            (Family::Any, Some(addr)) if addr.is_ipv4() => Family::V4,
            (Family::Any, Some(_)) => Family::V6,
            (Family::V4, Some(addr)) if addr.is_ipv6() => {
                return Err(format!(
                    "--bind {addr} is an IPv6 address and -4 asks for IPv4"
                ))
            }
            (Family::V6, Some(addr)) if addr.is_ipv4() => {
                return Err(format!(
                    "--bind {addr} is an IPv4 address and -6 asks for IPv6"
                ))
            }
            _ => asked,
        };
        // A server named by its address cannot be reached over the other IP version.
        match (
            family,
            host.and_then(|h| h.parse::<std::net::IpAddr>().ok()),
        ) {
            (Family::V4, Some(ip)) if ip.is_ipv6() => Err(format!(
                "{ip} is an IPv6 address and {} asks for IPv4",
                flag(family)
            )),
            (Family::V6, Some(ip)) if ip.is_ipv4() => Err(format!(
                "{ip} is an IPv4 address and {} asks for IPv6",
                flag(family)
            )),
            _ => Ok(family),
        }
    }
}

/// [`resolve_host`], the first address of `family`.
pub fn resolve_host_as(host: &str, port: u16, family: Family) -> Result<SocketAddr> {
    let mut addrs = (host, port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve host '{host}'"))?;
    let wanted = |a: &SocketAddr| match family {
        Family::Any => true,
        Family::V4 => a.is_ipv4(),
        Family::V6 => a.is_ipv6(),
    };
    addrs.find(wanted).ok_or_else(|| match family {
        Family::Any => anyhow!("host '{host}' has no address"),
        Family::V4 => anyhow!("host '{host}' has no IPv4 address (-4, or --bind of IPv4)"),
        Family::V6 => anyhow!("host '{host}' has no IPv6 address (-6, or --bind of IPv6)"),
    })
}

/// Resolves a request on this machine (linerate-model's one resolver), with the path's
/// datagram size towards `target` (or loopback) for UDP streams, and checks it against
/// the bounds every server puts on a test; `Err` is the user's mistake, in one line.
pub fn resolve_request(
    request: &TestRequest,
    target: Option<SocketAddr>,
) -> std::result::Result<TestConfig, String> {
    resolve_explained(request, target).map(|(config, _)| config)
}

/// [`resolve_request`], with what it chose where the request did not say and why
/// (linerate-model's `explain`: the lines `--verbose` prints).
pub fn resolve_explained(
    request: &TestRequest,
    target: Option<SocketAddr>,
) -> std::result::Result<(TestConfig, Vec<String>), String> {
    let udp_stream = matches!(
        &request.kind,
        TestKind::Stream(StreamRequest {
            transport: StreamTransport::Udp { length: None, .. }
                | StreamTransport::Video(linerate_model::VideoStream { length: None, .. }),
            ..
        })
    );
    let probe =
        udp_stream.then(|| target.unwrap_or(SocketAddr::from(([127, 0, 0, 1], request.port))));
    let environment = linerate_engine::sys::environment(probe);
    let config = TestConfig::resolve(request, &environment)?;
    within_bounds(&config)?;
    check_tcp_ecn(
        &config,
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_ecn").ok(),
    )?;
    let choices = linerate_model::explain(request, &environment, &config);
    Ok((config, choices))
}

/// `--ecn` over TCP: Linux asks for ECN per host (`net.ipv4.tcp_ecn`), not per socket, so
/// a host whose setting does not ask (2, the default, only answers) would run the test
/// without it and say nothing. `setting` is the sysctl's text, where it could be read.
fn check_tcp_ecn(config: &TestConfig, setting: Option<String>) -> std::result::Result<(), String> {
    let asked = config.marks.is_some_and(|m| m.ecn);
    // UDP sets ECT itself, and QUIC validates ECN per connection (RFC 9000 13.4).
    if !asked || config.protocol != linerate_model::Protocol::Tcp {
        return Ok(());
    }
    match setting.as_deref().map(str::trim) {
        Some("1") | None => Ok(()),
        Some(value) => Err(format!(
            "'--ecn' over TCP needs net.ipv4.tcp_ecn=1 on this host (it is {value}: Linux asks for ECN per host, not per connection); set it (sysctl -w net.ipv4.tcp_ecn=1) or mark a UDP test"
        )),
    }
}

/// The bounds every server puts on a test (linerate-proto's `validate`), checked before
/// connecting, so that a test no server would take is the user's mistake, told at once.
/// Only the server's own limits (tests, flows, duration, rate) are left to the server.
fn within_bounds(config: &TestConfig) -> std::result::Result<(), String> {
    let unlimited = Limits {
        max_tests: u32::MAX,
        max_flows: u32::MAX,
        max_duration_s: f64::MAX,
        max_rate_bps: None,
    };
    linerate_proto::session::validate(config, &unlimited).map_err(|(_, reason)| reason)
}

/// "Connecting to HOST (ADDR), ..." or its loopback twin: what is about to be measured.
pub fn banner(host: Option<&str>, target: Option<SocketAddr>, config: &TestConfig) -> String {
    match (host, target) {
        (Some(host), Some(addr)) => format!("Connecting to {host} ({addr}), {}", config.describe()),
        _ => format!(
            "Measuring this machine over loopback (in-process server), {}",
            config.describe()
        ),
    }
}

/// One test against `target`, or against an in-process server when there is none, with
/// a request/response test's bulk load beside it when it asks for one.
pub fn run(
    target: Option<SocketAddr>,
    options: &ClientOptions,
    cancel: &Arc<AtomicBool>,
    sink: &mut dyn Sink,
) -> Result<Report> {
    let mut progress = |event| sink.event(&Event::Test(&event));
    Ok(bulk_load::run_with_load(
        target,
        options,
        cancel,
        &mut progress,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// -4, -6 and --bind choose the IP version; a bind address or a server's address of
    /// the other version is refused, naming the flag that asked.
    #[test]
    fn the_ip_version_is_the_flags_and_the_addresses_agree_with_it() {
        let v4: std::net::IpAddr = "192.0.2.1".parse().unwrap();
        let v6: std::net::IpAddr = "fd00::1".parse().unwrap();
        assert_eq!(
            Family::asked(false, false, None, Some("h")),
            Ok(Family::Any)
        );
        assert_eq!(Family::asked(true, false, None, None), Ok(Family::V4));
        assert_eq!(
            Family::asked(false, true, None, Some("fd00::2")),
            Ok(Family::V6)
        );
        assert_eq!(Family::asked(false, false, Some(v6), None), Ok(Family::V6));
        assert_eq!(
            Family::asked(false, false, Some(v4), Some("h")),
            Ok(Family::V4)
        );
        let refused = |v4f, v6f, bind, host| Family::asked(v4f, v6f, bind, host).unwrap_err();
        assert_eq!(
            refused(true, false, Some(v6), None),
            "--bind fd00::1 is an IPv6 address and -4 asks for IPv4"
        );
        assert_eq!(
            refused(false, false, Some(v6), Some("192.0.2.9")),
            "192.0.2.9 is an IPv4 address and --bind fd00::1 asks for IPv6"
        );
        assert_eq!(
            refused(true, false, None, Some("fd00::2")),
            "fd00::2 is an IPv6 address and -4 asks for IPv4"
        );
        assert_eq!(
            refused(false, true, None, Some("192.0.2.9")),
            "192.0.2.9 is an IPv4 address and -6 asks for IPv6"
        );
    }

    #[test]
    fn a_test_no_server_takes_is_refused_before_connecting() {
        let mut request = TestRequest::new(TestKind::Stream(StreamRequest {
            direction: linerate_model::Direction::Forward,
            rate_bps: None,
            transport: StreamTransport::Tcp {
                length: None,
                mss: None,
                nodelay: false,
            },
        }));
        request.time_s = 10.0;
        assert!(resolve_request(&request, None).is_ok());
        request.time_s = f64::INFINITY;
        assert!(resolve_request(&request, None).is_err());
    }

    /// `--ecn` over TCP is refused, naming the setting, where the host does not ask for
    /// ECN; UDP and QUIC mark their own datagrams whatever the setting.
    #[test]
    fn ecn_over_tcp_needs_the_host_to_ask_for_it() {
        let mut config = crate::fixtures::stream_config();
        config.marks = Some(linerate_model::marks::Marks { dscp: 0, ecn: true });
        let error = check_tcp_ecn(&config, Some("2\n".into())).unwrap_err();
        assert!(
            error.contains("net.ipv4.tcp_ecn=1") && error.contains("it is 2"),
            "{error}"
        );
        assert!(check_tcp_ecn(&config, Some("1\n".into())).is_ok());
        config.protocol = linerate_model::Protocol::Udp;
        assert!(check_tcp_ecn(&config, Some("0".into())).is_ok());
        config.protocol = linerate_model::Protocol::Quic;
        assert!(check_tcp_ecn(&config, Some("2".into())).is_ok());
        config.protocol = linerate_model::Protocol::Tcp;
        config.marks = Some(linerate_model::marks::Marks {
            dscp: 46,
            ecn: false,
        });
        assert!(check_tcp_ecn(&config, Some("0".into())).is_ok());
    }

    #[test]
    fn the_banner_names_the_host_and_its_address() {
        let config = crate::fixtures::stream_config();
        let addr: SocketAddr = "192.0.2.1:5201".parse().unwrap();
        let line = banner(Some("far"), Some(addr), &config);
        assert!(
            line.starts_with("Connecting to far (192.0.2.1:5201), "),
            "{line}"
        );
        assert!(banner(None, None, &config).contains("over loopback"));
    }
}
