//! `linerate doctor HOST`: the facts of the path to a server, from real sockets. The
//! round trip is the least of a few TCP handshakes to the server's port (a handshake is
//! one round trip and needs nothing from the server but its listening socket); the
//! route's interface is the one holding the address the kernel picks to reach it; the
//! path MTU is what the kernel holds for the route after datagrams of the interface's
//! full size were sent with "don't fragment" (a router on a narrower link answers with
//! "fragmentation needed" and the kernel lowers it). The path's loss is what a short UDP
//! request/response test to the server loses ([`probe_loss`]): paced, so the probe
//! itself fills no queue and what it loses the path loses.

use linerate_engine::sys;
use linerate_model::observe::{LossProbe, PathFacts};
use linerate_model::{TestConfig, TestKind, TestRequest, TransactionRequest};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

const HANDSHAKES: usize = 5;

/// Probes the path to `host:port`. `Err` says why it could not be reached.
pub fn probe_path(host: &str, port: u16, timeout: Duration) -> Result<PathFacts, String> {
    let address = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host} has no address"))?;
    let mut best: Option<Duration> = None;
    let mut last_error = None;
    for _ in 0..HANDSHAKES {
        let started = Instant::now();
        match TcpStream::connect_timeout(&address, timeout) {
            Ok(mut stream) => {
                let took = started.elapsed();
                best = Some(best.map_or(took, |b| b.min(took)));
                // Said what it is, so the server closes it without logging a refusal.
                let _ =
                    std::io::Write::write_all(&mut stream, &linerate_proto::preface::PING_MAGIC);
                drop(stream);
            }
            Err(e) => last_error = Some(e),
        }
    }
    let rtt = best.ok_or_else(|| {
        format!(
            "cannot reach {address}: {} (is `linerate serve` running there?)",
            last_error.map_or_else(|| "no answer".to_string(), |e| e.to_string())
        )
    })?;
    let local = UdpSocket::bind(if address.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    })
    .and_then(|s| {
        s.connect(address)?;
        Ok(s)
    })
    .map_err(|e| format!("no route to {address}: {e}"))?;
    let local_ip = local.local_addr().map_err(|e| e.to_string())?.ip();
    let interface = interface_of(local_ip);
    let interface_mtu = interface.as_deref().and_then(|name| {
        std::fs::read_to_string(format!("/sys/class/net/{name}/mtu"))
            .ok()?
            .trim()
            .parse()
            .ok()
    });
    let path_mtu = probe_mtu(&local, address, interface_mtu, rtt);
    Ok(PathFacts {
        target: format!("{host} ({})", address.ip()),
        rtt_ms: rtt.as_secs_f64() * 1e3,
        interface,
        interface_mtu,
        path_mtu,
        loss: None,
        loss_unprobed: None,
    })
}

/// Flows, transactions per second per flow and seconds of the loss probe: 1,600 paced
/// transactions, enough to see 1 % loss each way (about 30 lost) and few enough for a
/// slow path (64-byte datagrams: 0.2 Mbit/s each way).
const LOSS_FLOWS: u32 = 4;
const LOSS_TPS: u64 = 200;
const LOSS_SECONDS: f64 = 2.0;

/// Runs the loss probe against the server at `address`: a UDP rr test, paced, run as any
/// client's would be (the server logs it as a test). `Err` says why it could not run.
pub fn probe_loss(
    address: SocketAddr,
    key: Option<linerate_proto::auth::Key>,
) -> Result<LossProbe, String> {
    let mut request = TestRequest::new(TestKind::Transactions(TransactionRequest {
        connect_each: false,
        udp: true,
        request: 64,
        response: 64,
        outstanding: None,
        rate_tps: Some(LOSS_TPS),
        busy_poll_us: None,
        cpus: Vec::new(),
        load: 0,
        keep_nagle: false,
    }));
    request.target = Some(address.ip().to_string());
    request.port = address.port();
    request.parallel = LOSS_FLOWS;
    request.time_s = LOSS_SECONDS;
    request.interval_s = 0.0;
    request.observe = false;
    let config = TestConfig::resolve(&request, &sys::environment(Some(address)))?;
    let mut options = crate::client::ClientOptions::new(config);
    options.key = key;
    let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let report = crate::bulk_load::run_with_load(Some(address), &options, &cancel, &mut |_| {})
        .map_err(|e| e.to_string())?;
    let rr = report
        .summary
        .rr
        .ok_or_else(|| "the probe's report holds no transactions".to_string())?;
    // An answer that came after its transaction was given up was not lost: each such
    // answer takes one off the count (a duplicate would too; the probe's paths rarely
    // duplicate, and the emulator's counts are what the tests hold it to).
    let late = rr.late.min(rr.lost);
    Ok(LossProbe {
        answered: rr.transactions,
        lost: rr.lost - late,
        late,
        rtt_median_ms: rr.latency_us.p50 / 1e3,
    })
}

/// The interface holding `ip` (getifaddrs).
fn interface_of(ip: IpAddr) -> Option<String> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list`, freed below; each entry is read while it lives.
    unsafe {
        if libc::getifaddrs(&mut list) != 0 {
            return None;
        }
        let mut found = None;
        let mut entry = list;
        while !entry.is_null() {
            let address = (*entry).ifa_addr;
            if !address.is_null() {
                let candidate = match i32::from((*address).sa_family) {
                    libc::AF_INET => {
                        let v4 = &*(address as *const libc::sockaddr_in);
                        Some(IpAddr::from(u32::from_be(v4.sin_addr.s_addr).to_be_bytes()))
                    }
                    libc::AF_INET6 => {
                        let v6 = &*(address as *const libc::sockaddr_in6);
                        Some(IpAddr::from(v6.sin6_addr.s6_addr))
                    }
                    _ => None,
                };
                if candidate == Some(ip) {
                    found = std::ffi::CStr::from_ptr((*entry).ifa_name)
                        .to_str()
                        .ok()
                        .map(str::to_string);
                    break;
                }
            }
            entry = (*entry).ifa_next;
        }
        libc::freeifaddrs(list);
        found
    }
}

/// Sends a few don't-fragment datagrams of the interface's full size to the server's
/// address (a UDP port nobody listens on answers "port unreachable": harmless) and reads
/// the path MTU the kernel then holds.
fn probe_mtu(
    socket: &UdpSocket,
    address: SocketAddr,
    interface_mtu: Option<u64>,
    rtt: Duration,
) -> Option<u64> {
    let ipv4 = address.is_ipv4();
    let (level, discover, headers) = if ipv4 {
        (libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, 28u64)
    } else {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, 48u64)
    };
    let _ = sys::set_int_option(socket, level, discover, libc::IP_PMTUDISC_DO);
    if let Some(mtu) = interface_mtu {
        let payload = vec![0u8; mtu.saturating_sub(headers) as usize];
        for _ in 0..3 {
            // EMSGSIZE once the kernel knows a smaller MTU: that is the answer.
            let _ = socket.send(&payload);
            std::thread::sleep((rtt * 2).max(Duration::from_millis(20)));
        }
    }
    sys::route_mtu(socket, ipv4).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_reached_through_lo_and_a_closed_port_is_a_clear_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let facts = probe_path("127.0.0.1", port, Duration::from_secs(2)).unwrap();
        assert_eq!(facts.interface.as_deref(), Some("lo"));
        assert!(facts.rtt_ms > 0.0 && facts.rtt_ms < 1000.0, "{facts:?}");
        // lo's 65536 is more than an IPv4 packet can be: the route says 65535.
        assert_eq!(
            facts.path_mtu,
            facts.interface_mtu.map(|m| m.min(65535)),
            "{facts:?}"
        );
        drop(listener);
        let error = probe_path("127.0.0.1", port, Duration::from_secs(1)).unwrap_err();
        assert!(error.starts_with("cannot reach 127.0.0.1:"), "{error}");
    }
}
