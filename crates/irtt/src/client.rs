//! `linerate stamp --irtt HOST`: an irtt session run as a STAMP session. The open (and
//! the close) are irtt's own; between them the STAMP sender's loop paces the requests and
//! its tally counts the answers through [`IrttWire`], which writes irtt's requests and
//! reads irtt's answers as STAMP's fields: the server's receive and send wall clock as T2
//! and T3, its count of requests received as a stateful reflector's sequence number (so
//! loss splits by direction as it does against one), the sequence number as the sender's.
//! One report, one history, one set of figures for both protocols.

// A socket loop reads the clock; the sans-IO parts (wire, server, the wire adapter) take it.
#![allow(clippy::disallowed_methods)]

use crate::wire::{self, flag, Clock, HmacKey, Layout, Params, ReceivedStats, StampAt};
use linerate_report::stamp::{Protocol, StampInterval, StampReport};
use linerate_stamp::sender::{self, ForeignWire, Options};
use linerate_stamp::sys;
use linerate_stamp::wire::{ErrorEstimate, Mode, Reflected, Timestamp};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the session asks of the server beyond the STAMP session's own options.
#[derive(Debug, Clone, Default)]
pub struct Ask {
    /// Each request's length, octets (0: the fields' own).
    pub length: usize,
    pub key: Option<HmacKey>,
}

/// How long to wait for the open's answer, each try (irtt's own: 1, 2, 4, 8 s).
const OPEN_TRIES: [Duration; 4] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
    Duration::from_secs(8),
];

/// An open session's requests and answers, as the STAMP sender's loop carries them.
#[derive(Debug)]
pub struct IrttWire {
    token: u64,
    layout: Layout,
    size: usize,
    key: Option<HmacKey>,
}

impl IrttWire {
    pub fn new(token: u64, granted: &Params, key: Option<HmacKey>) -> IrttWire {
        let layout = granted.layout(key.is_some());
        IrttWire {
            token,
            layout,
            size: layout.end.max(usize::try_from(granted.length).unwrap_or(0)),
            key,
        }
    }

    fn key(&self) -> Option<&[u8]> {
        self.key.as_ref().map(|k| k.0.as_slice())
    }

    /// An answer of this session: its flags, when the packet checks and carries its token.
    fn answer_flags(&self, bytes: &[u8]) -> Option<u8> {
        let head = wire::header(bytes, self.key()).ok()?;
        let ours = head.has(flag::REPLY)
            && !head.has(flag::OPEN)
            && bytes.len() >= self.layout.end
            && wire::le_u64(bytes, self.layout.token) == self.token;
        ours.then_some(head.flags)
    }

    /// The close irtt's server expects: the flags and the token.
    fn close_packet(&self) -> Vec<u8> {
        let mut packet = wire::MAGIC.to_vec();
        packet.push(flag::CLOSE);
        if self.key.is_some() {
            packet.extend_from_slice(&[0u8; wire::HMAC_LEN]);
        }
        packet.extend_from_slice(&self.token.to_le_bytes());
        if let Some(key) = self.key() {
            wire::sign(&mut packet, key);
        }
        packet
    }
}

/// A wall-clock stamp as STAMP's NTP time.
fn ntp(wall_ns: i64) -> Timestamp {
    Timestamp::ntp_from_unix_ns(i128::from(wall_ns))
}

impl ForeignWire for IrttWire {
    fn protocol(&self) -> Protocol {
        Protocol::Irtt
    }

    fn size(&self) -> usize {
        self.size
    }

    fn encode(&self, seq: u32, out: &mut Vec<u8>) {
        // The request holds every field its answer fills, zeroed, as irtt's client sends
        // it: the answer is then the request's length.
        out.clear();
        out.resize(self.size, 0);
        out[..3].copy_from_slice(&wire::MAGIC);
        let l = &self.layout;
        out[l.token..l.token + 8].copy_from_slice(&self.token.to_le_bytes());
        out[l.seqno..l.seqno + 4].copy_from_slice(&seq.to_le_bytes());
        if let Some(key) = self.key() {
            wire::sign(out, key);
        }
    }

    fn decode(&self, bytes: &[u8]) -> Option<Reflected> {
        self.answer_flags(bytes)?;
        let l = &self.layout;
        let seqno = wire::le_u32(bytes, l.seqno);
        let received = Layout::stamp(bytes, l.receive);
        let sent = Layout::stamp(bytes, l.send);
        if received.wall == 0 || sent.wall == 0 {
            return None;
        }
        // The server's count includes this request; a stateful STAMP reflector's number
        // counts those before it.
        let count = l
            .count
            .map_or(seqno.wrapping_add(1), |at| wire::le_u32(bytes, at));
        // irtt servers say nothing of their clocks: not known to be synchronised.
        let unknown = ErrorEstimate::new(false, false, 1.0);
        Some(Reflected {
            seq: count.wrapping_sub(1),
            timestamp: ntp(sent.wall),
            error: unknown,
            ssid: 0,
            receive: ntp(received.wall),
            sender_seq: seqno,
            sender_timestamp: Timestamp::default(),
            sender_error: ErrorEstimate::new(false, false, 0.0),
            sender_ttl: 0,
        })
    }

    fn ends(&self, bytes: &[u8]) -> bool {
        self.answer_flags(bytes)
            .is_some_and(|flags| flags & flag::CLOSE != 0)
    }

    /// irtt's window, 0 while the server holds it unreliable (a request came out of
    /// order): `None` then, and where the session did not ask for it.
    fn received_window(&self, bytes: &[u8]) -> Option<u64> {
        let at = self.layout.window?;
        (bytes.len() >= at + 8)
            .then(|| wire::le_u64(bytes, at))
            .filter(|w| *w != 0)
    }
}

/// Opens a session on `socket` to `addr`: the parameters asked, tried as irtt's client
/// tries (waiting 1, 2, 4 then 8 s for the answer). The server's token and what it
/// granted, or why not.
pub fn open(
    socket: &UdpSocket,
    addr: SocketAddr,
    asked: &Params,
    key: Option<&HmacKey>,
) -> io::Result<(u64, Params)> {
    let key = key.map(|k| k.0.as_slice());
    let mut request = Vec::new();
    wire::put_open(&mut request, flag::OPEN, None, asked, key);
    let mut buf = vec![0u8; 2048];
    for wait in OPEN_TRIES {
        sys::send(socket, &request, addr, None, addr.is_ipv6())?;
        let deadline = Instant::now() + wait;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            if !sys::wait_readable(socket, left)? {
                break;
            }
            let (n, from, _) = match sys::recv(socket, &mut buf) {
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionRefused,
                        format!("{addr} refused it (no irtt server on that port?)"),
                    ))
                }
                Err(e) => return Err(e),
            };
            if let Some(opened) = opened(&buf[..n.min(buf.len())], from == addr, key)? {
                return Ok(opened);
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "no answer from {addr} to the open in 15 s: is an irtt server there ('linerate serve --irtt {}', 'irtt server')? A firewall?{}",
            addr.port(),
            if key.is_some() { " The same key?" } else { " Does it want a key (--irtt-hmac-key-file)?" }
        ),
    ))
}

/// The token and the granted parameters, where `bytes` is the open's answer.
fn opened(
    bytes: &[u8],
    from_server: bool,
    key: Option<&[u8]>,
) -> io::Result<Option<(u64, Params)>> {
    let Ok(head) = wire::header(bytes, key) else {
        return Ok(None);
    };
    if !from_server
        || !head.has(flag::OPEN)
        || !head.has(flag::REPLY)
        || bytes.len() < head.body + 8
    {
        return Ok(None);
    }
    let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
    let granted = Params::parse(&bytes[head.body + 8..])
        .map_err(|e| bad(format!("the server's answer to the open: {}", e.reason())))?;
    if head.has(flag::CLOSE) {
        return Err(bad(format!(
            "the server closed the session at its open (it speaks protocol version {}, this client {}; or its sessions are full)",
            granted.protocol_version,
            wire::PROTOCOL_VERSION
        )));
    }
    let token = wire::le_u64(bytes, head.body);
    if token == 0 {
        return Err(bad(
            "the server's answer to the open carried no token".into()
        ));
    }
    Ok(Some((token, granted)))
}

/// The parameters an open asks for a STAMP session's options: its interval and duration,
/// every count and both stamps on both clocks (the figures need them all).
pub fn asked(options: &Options, ask: &Ask) -> Params {
    let duration = options.duration.map_or(
        // A count alone: its requests at the rate, and a second more.
        options.count.unwrap_or(1) as f64 / options.rate_pps + 1.0,
        |d| d.as_secs_f64(),
    );
    Params {
        protocol_version: wire::PROTOCOL_VERSION,
        duration_ns: (duration * 1e9) as i64,
        interval_ns: (1e9 / options.rate_pps) as i64,
        length: ask.length as i64,
        received_stats: ReceivedStats::BOTH,
        stamp_at: StampAt::BOTH,
        clock: Some(Clock::BOTH),
        dscp: options.dscp.map_or(0, |d| i64::from(d) << 2),
        server_fill: String::new(),
    }
}

/// Opens an irtt session, runs it with the STAMP sender's loop over irtt's wire, closes
/// it. What the server granted in place of what was asked is said in the report's
/// warnings, and the run goes at what was granted (as irtt's `--loose`).
pub fn run(
    options: &Options,
    ask: &Ask,
    stop: &AtomicBool,
    live: &mut dyn FnMut(&StampInterval),
) -> io::Result<StampReport> {
    let socket = sender::open_socket_from(
        options.addr.is_ipv6(),
        options.dscp,
        options.source.as_ref(),
    )?;
    let asked = asked(options, ask);
    let (token, granted) = open(&socket, options.addr, &asked, ask.key.as_ref())?;
    let wire = IrttWire::new(token, &granted, ask.key.clone());
    let mut options = options.clone();
    let mut warnings = Vec::new();
    if granted.interval_ns != asked.interval_ns && granted.interval_ns > 0 {
        warnings.push(format!(
            "the server granted a request every {:.3} ms (asked {:.3} ms)",
            granted.interval_ns as f64 / 1e6,
            asked.interval_ns as f64 / 1e6
        ));
        options.rate_pps = 1e9 / granted.interval_ns as f64;
    }
    if granted.duration_ns < asked.duration_ns && granted.duration_ns > 0 {
        warnings.push(format!(
            "the server granted {:.1} s (asked {:.1} s)",
            granted.duration_ns as f64 / 1e9,
            asked.duration_ns as f64 / 1e9
        ));
        let granted = Duration::from_nanos(granted.duration_ns as u64);
        options.duration = Some(options.duration.map_or(granted, |d| d.min(granted)));
    }
    if granted.length != asked.length {
        warnings.push(format!(
            "the server granted requests of {} bytes (asked {})",
            granted.length, asked.length
        ));
    }
    let close = wire.close_packet();
    options.mode = if ask.key.is_some() {
        Mode::Authenticated
    } else {
        Mode::Open
    };
    options.wire = Some(Arc::new(wire));
    let report = sender::run_on(&socket, &options, stop, live);
    // The server forgets the session at once, whether or not the report was made.
    let _ = sys::send(&socket, &close, options.addr, None, options.addr.is_ipv6());
    let mut report = report?;
    report.warnings.extend(warnings);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::{Arrival, Config, Server};
    use crate::wire::Stamp;

    fn granted() -> Params {
        Params {
            protocol_version: 1,
            duration_ns: 1_000_000_000,
            interval_ns: 10_000_000,
            length: 100,
            received_stats: ReceivedStats::BOTH,
            stamp_at: StampAt::BOTH,
            clock: Some(Clock::BOTH),
            dscp: 0,
            server_fill: String::new(),
        }
    }

    /// The client's requests through the server's rules and back through the adapter:
    /// the server's count becomes a stateful reflector's sequence number (a request lost
    /// on the way shows as the gap), its stamps T2 and T3.
    #[test]
    fn the_servers_answers_read_as_a_stateful_reflectors() {
        let mut tokens = 41u64;
        let mut server = Server::new(
            Config::default(),
            Box::new(move || {
                tokens += 1;
                tokens
            }),
            0,
        );
        let mut open = Vec::new();
        wire::put_open(&mut open, flag::OPEN, None, &granted(), None);
        let from: SocketAddr = "192.0.2.9:4000".parse().unwrap();
        let at = |ms: i64| Stamp {
            wall: 1_800_000_000_000_000_000 + ms * 1_000_000,
            mono: ms * 1_000_000,
        };
        let mut answer = Vec::new();
        server.handle(
            &Arrival {
                from,
                bytes: &open,
                received: at(0),
                now: at(0),
            },
            &mut answer,
        );
        let (token, params) = opened(&answer, true, None).unwrap().unwrap();
        let wire = IrttWire::new(token, &params, None);
        assert_eq!(wire.size(), 100);
        let mut request = Vec::new();
        let mut reads = Vec::new();
        for seq in [0u32, 2, 3] {
            wire.encode(seq, &mut request);
            let ms = 10 * i64::from(seq + 1);
            let mut now = at(ms);
            now.wall += 50_000;
            server.handle(
                &Arrival {
                    from,
                    bytes: &request,
                    received: at(ms),
                    now,
                },
                &mut answer,
            );
            assert_eq!(answer.len(), request.len());
            reads.push(wire.decode(&answer).expect("an answer of the session"));
            assert!(!wire.ends(&answer));
        }
        let numbers: Vec<(u32, u32)> = reads.iter().map(|r| (r.sender_seq, r.seq)).collect();
        assert_eq!(numbers, [(0, 0), (2, 1), (3, 2)]);
        assert_eq!(reads[0].receive, ntp(at(10).wall));
        assert_eq!(reads[0].timestamp, ntp(at(10).wall + 50_000));
        // Another session's token, or a request echoed back, is no answer of this one.
        let other = IrttWire::new(token + 1, &params, None);
        assert!(other.decode(&answer).is_none());
        assert!(wire.decode(&request).is_none());
        // The close ends the server's session.
        server.handle(
            &Arrival {
                from,
                bytes: &wire.close_packet(),
                received: at(60),
                now: at(60),
            },
            &mut answer,
        );
        assert_eq!(server.sessions(), 0);
    }

    #[test]
    fn an_open_closed_by_the_server_says_why() {
        let mut answer = Vec::new();
        let mut old = granted();
        old.protocol_version = 2;
        wire::put_open(
            &mut answer,
            flag::OPEN | flag::REPLY | flag::CLOSE,
            Some(0),
            &old,
            None,
        );
        let err = opened(&answer, true, None).unwrap_err();
        assert!(err.to_string().contains("protocol version 2"), "{err}");
        // From another address, or not an answer: ignored.
        wire::put_open(
            &mut answer,
            flag::OPEN | flag::REPLY,
            Some(9),
            &granted(),
            None,
        );
        assert!(opened(&answer, false, None).unwrap().is_none());
        assert_eq!(opened(&answer, true, None).unwrap().unwrap().0, 9);
    }
}
