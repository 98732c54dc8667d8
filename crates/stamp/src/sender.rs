//! The Session-Sender's loop (`linerate stamp`): probes paced on a fixed timeline (a late
//! wake-up does not stretch the gaps, and a sender that fell far behind starts the
//! timeline again rather than bursting), answers taken as they arrive with the kernel's
//! time of arrival, then a wait for the last answers.

use crate::sys;
use crate::tally::{Reply, Settings, Tally};
use crate::wire::{self, tlv, ErrorEstimate, Key, Mode, TestPacket, Timestamp};
use linerate_report::stamp::{StampInterval, StampReport};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A run as asked.
#[derive(Debug, Clone)]
pub struct Options {
    /// The reflector as named, and where it resolved.
    pub target: String,
    pub addr: SocketAddr,
    pub mode: Mode,
    pub key: Option<Key>,
    pub rate_pps: f64,
    /// Stop after this many probes, or after `duration`, whichever comes first.
    pub count: Option<u64>,
    pub duration: Option<Duration>,
    /// What the probes ask beyond the base packet (padding, Class of Service, Direct
    /// Measurement).
    pub extensions: tlv::Request,
    /// The DSCP probes leave with (and ask of the answers).
    pub dscp: Option<u8>,
    /// How long to wait for answers after the last probe.
    pub timeout: Duration,
    /// A live line every this often (0: none).
    pub report_every: Duration,
    pub same_clock: bool,
    /// The session's identifier (nonzero; drawn by the caller).
    pub ssid: u16,
    pub started_at: f64,
}

impl Options {
    /// The size of each probe, octets of UDP payload.
    pub fn size(&self) -> usize {
        let mut tlvs = Vec::new();
        self.extensions
            .encode(0, &[0; 4], self.key.as_ref(), &mut tlvs);
        self.mode.base_len() + tlvs.len()
    }
}

/// Whether `ip` is one of this host's addresses (so both ends read one clock).
pub fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback() || UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// Runs the session until its count or time is reached or `stop` is set, then waits for
/// the last answers. `live` gets each interval as it closes.
pub fn run(
    options: &Options,
    stop: &AtomicBool,
    live: &mut dyn FnMut(&StampInterval),
) -> io::Result<StampReport> {
    let v6 = options.addr.is_ipv6();
    let local: SocketAddr = if v6 {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local)?;
    sys::enable_meta(&socket, v6)?;
    sys::set_marks(&socket, v6, options.dscp.map_or(0, |d| d << 2))?;
    let clock = linerate_hostinfo::clock::read();
    let error = clock.map_or(ErrorEstimate::new(false, false, 1.0), |c| {
        ErrorEstimate::new(c.synchronised, false, c.max_error_s)
    });
    let epoch = Instant::now();
    let mono = || epoch.elapsed().as_nanos() as u64;
    let mut tally = Tally::new(
        Settings {
            target: options.target.clone(),
            address: options.addr.to_string(),
            mode: options.mode,
            rate_pps: options.rate_pps,
            size: options.size(),
            dscp: options.dscp,
            ssid: options.ssid,
            same_clock: options.same_clock,
            sender_clock: clock,
            started_at: options.started_at,
        },
        0,
    );
    let gap_ns = (1e9 / options.rate_pps).max(1.0) as u64;
    let every_ns = options.report_every.as_nanos() as u64;
    let mut next_send = 0u64;
    let mut next_report = every_ns;
    let mut packet = Vec::with_capacity(wire::MAX_PACKET);
    let mut tlvs = Vec::with_capacity(wire::MAX_PACKET);
    let mut buf = vec![0u8; wire::MAX_PACKET + 1];
    let deadline = options.duration.map(|d| d.as_nanos() as u64);
    let done_sending = |tally: &Tally, now: u64| {
        options.count.is_some_and(|c| tally.sent() >= c) || deadline.is_some_and(|d| now >= d)
    };
    let mut interrupted = false;
    loop {
        if stop.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        let now = mono();
        if done_sending(&tally, now) {
            break;
        }
        if now >= next_send {
            let seq = tally.next_seq();
            let probe = TestPacket {
                seq,
                timestamp: Timestamp::ntp_from_unix_ns(sys::unix_ns()),
                error,
                ssid: options.ssid,
            };
            options.extensions.encode(
                seq.wrapping_add(1),
                &seq.to_be_bytes(),
                options.key.as_ref(),
                &mut tlvs,
            );
            wire::encode_test(
                &probe,
                options.mode,
                options.key.as_ref(),
                &tlvs,
                &mut packet,
            );
            let sent_ns = mono();
            match sys::send(&socket, &packet, options.addr, None, v6) {
                Ok(_) => tally.sent_probe(seq, sent_ns, probe.timestamp),
                // A full send buffer or an ICMP error from an earlier probe: this probe
                // did not leave; it is not counted as sent (or lost).
                Err(e) if retry(&e) => {}
                Err(e) => return Err(e),
            }
            next_send += gap_ns;
            // Far behind (the host was busy): start the timeline again, no burst.
            if now > next_send + 10 * gap_ns {
                next_send = now + gap_ns;
            }
        }
        drain(&socket, &mut buf, options, &mut tally, &epoch)?;
        let now = mono();
        if every_ns > 0 && now >= next_report {
            live(&tally.close_interval(now));
            next_report += every_ns;
        }
        let until = next_send.min(if every_ns > 0 { next_report } else { u64::MAX });
        if until > now {
            sys::wait_readable(&socket, Duration::from_nanos(until - now))?;
        }
    }
    // The last answers: until every probe is answered, the timeout passes or Ctrl-C.
    let last = mono();
    let wait_ns = options.timeout.as_nanos() as u64;
    while !interrupted && tally.answered() < tally.sent() && mono() < last + wait_ns {
        if stop.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        sys::wait_readable(&socket, Duration::from_millis(20))?;
        drain(&socket, &mut buf, options, &mut tally, &epoch)?;
    }
    let end = mono();
    if every_ns > 0 && end > next_report.saturating_sub(every_ns) {
        live(&tally.close_interval(end));
    }
    Ok(tally.finish(end, interrupted))
}

fn retry(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ENOBUFS
                | libc::EAGAIN
                | libc::ECONNREFUSED
                | libc::EHOSTUNREACH
                | libc::ENETUNREACH
        )
    )
}

/// Takes every answer waiting on the socket.
fn drain(
    socket: &UdpSocket,
    buf: &mut [u8],
    options: &Options,
    tally: &mut Tally,
    epoch: &Instant,
) -> io::Result<()> {
    loop {
        let (n, _from, meta) = match sys::recv(socket, buf) {
            Ok(got) => got,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            // An ICMP error for an earlier probe (port unreachable): that probe is lost.
            Err(e) if retry(&e) => continue,
            Err(e) => return Err(e),
        };
        let now_unix = sys::unix_ns();
        let now_ns = epoch.elapsed().as_nanos() as u64;
        if n > wire::MAX_PACKET {
            continue;
        }
        let bytes = &buf[..n];
        let Ok(answer) = wire::decode_reflected(bytes, options.mode, options.key.as_ref()) else {
            continue;
        };
        let area = &bytes[options.mode.base_len()..];
        let tlvs = tlv::Answer::read(area, &bytes[..4], options.key.as_ref());
        // The kernel's time of arrival: how long the answer waited in the socket is taken
        // off this loop's clock too, so the round trip is the network's and the
        // reflector's, not this loop's wake-up.
        let (arrived_unix_ns, arrived_ns) = match meta.kernel_unix_ns {
            Some(k) if (0..1_000_000_000).contains(&(now_unix - k)) => {
                (k, now_ns.saturating_sub((now_unix - k) as u64))
            }
            _ => (now_unix, now_ns),
        };
        tally.answer(&Reply {
            answer,
            tlvs,
            arrived_unix_ns,
            arrived_ns,
            tos: meta.tos,
        });
    }
}
