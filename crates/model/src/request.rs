//! What a test asks for, before defaults, and the one way from there to a resolved
//! [`TestConfig`]: [`TestConfig::resolve`]. The command line, sweeps, `--load`,
//! `--find-max` and the iperf3 bridge all build a [`TestRequest`] and resolve it here, so a
//! default (threads, datagram size, pacing, transactions in flight, write size) is decided
//! in one place.
//!
//! The request's types say which settings go together: a stream over UDP has a datagram
//! size, a rate in datagrams per second and segmentation offloads; a stream over TCP has a
//! write size, an MSS and Nagle's switch; a transaction test has messages and a loop.

use crate::{Direction, RrConfig, TestConfig, Workload};

/// Seconds a test measures when the user does not say.
pub const DEFAULT_TIME_S: f64 = 10.0;
/// Seconds each `--find-max` trial measures when the user does not say.
pub const FIND_MAX_TRIAL_S: f64 = 2.0;

/// Seconds a test beside another (an rr's bulk load, a conference's calls) starts ahead
/// of it (connections open, windows grow) and runs on after it, so that it covers the
/// other's whole window.
pub const BESIDE_LEAD_S: f64 = 1.0;
/// Bytes per TCP write when the user does not say: 128,000 (qperf's `128k`), not
/// iperf3's 131,072. Writes of exactly 128 KiB are two full segments and a 106-byte one
/// on a 64 KiB-MTU path (loopback, veth between namespaces), and ran at 0.55-0.65x the
/// goodput of 128,000-byte writes there (one flow: 18.4 against 28.0 Gbit/s, medians of
/// 8; eight flows 34.2 against 43.7), with the same or slightly more at MTU 9000 and
/// 1500 (docs/performance.md).
pub const DEFAULT_TCP_LENGTH: u64 = 128_000;
/// A UDP flow's pace when the user does not say (1 Mbit/s, as iperf3), so that a UDP
/// test never floods a path by default.
pub const DEFAULT_UDP_RATE: u64 = 1_000_000;
/// The UDP payload when the path's MTU cannot be read: 1500 less IPv4 and UDP headers.
pub const FALLBACK_UDP_LENGTH: u64 = 1472;
/// The most transactions in flight per flow in open loop when the user does not say:
/// enough that a slow answer rarely holds a due request back.
pub const OPEN_LOOP_CAP: u32 = 128;
/// Up to this many flows, each gets a worker of its own by default.
pub const THREAD_PER_FLOW_UP_TO: usize = 16;
/// The TLS 1.3 cipher when the user does not say (rustls' and OpenSSL's first choice).
pub const DEFAULT_CIPHER: &str = "aes256-gcm";
/// The TLS 1.3 ciphers a test can ask for, by the names `--cipher` takes.
pub const CIPHERS: [&str; 3] = ["aes128-gcm", "aes256-gcm", "chacha20-poly1305"];
/// The smallest and largest UDP payloads.
pub const UDP_LENGTH: std::ops::RangeInclusive<u64> = 16..=65_507;
/// A video datagram's payload: its header and frame fields (crate::video) at least.
pub const VIDEO_LENGTH: std::ops::RangeInclusive<u64> =
    crate::video::DATAGRAM_HEADER_BYTES..=65_507;

/// Workers for `flows` connections on a machine with `cpus` CPUs when the user did not
/// say: one per flow while there are few (each then runs its flow with blocking calls, the
/// cheapest way to move bytes), else one per CPU, each an event loop over its share.
pub fn default_threads(flows: usize, cpus: usize) -> usize {
    if flows <= THREAD_PER_FLOW_UP_TO {
        flows.max(1)
    } else {
        cpus.max(1)
    }
}

/// QUIC workers for `flows` on `threads` worker threads: one per flow up to the threads,
/// and no more than the CPUs, since each keeps a core busy with its connection's
/// packet protection, acknowledgements and system calls.
pub fn quic_workers(flows: u32, threads: u32, cpus: usize) -> u32 {
    let cpus = u32::try_from(cpus).unwrap_or(u32::MAX);
    flows.min(threads).min(cpus).max(1)
}

/// A test as asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct TestRequest {
    /// The server as the user named it; `None`: the in-process server on loopback.
    pub target: Option<String>,
    pub port: u16,
    /// Flows per direction.
    pub parallel: u32,
    /// Worker threads on this side; `None`: [`default_threads`].
    pub threads: Option<u32>,
    pub time_s: f64,
    pub omit_s: f64,
    /// 0 turns interval reports off.
    pub interval_s: f64,
    pub window: Option<u64>,
    pub congestion: Option<String>,
    pub per_flow: bool,
    pub connect_timeout_s: f64,
    /// Read the host's own counters around the window (`--observe`).
    pub observe: bool,
    /// Encrypt the data connections (`--tls`).
    pub tls: Option<crate::TlsSettings>,
    /// Where the client's sockets leave from (`--bind`, `--bind-dev`).
    pub source: Option<crate::Source>,
    /// The DSCP and ECN the test's packets carry both ways (`--dscp`, `--ecn`).
    pub marks: Option<crate::marks::Marks>,
    pub kind: TestKind,
}

/// Which test, with the settings that belong to it alone.
#[derive(Debug, Clone, PartialEq)]
pub enum TestKind {
    Stream(StreamRequest),
    Transactions(TransactionRequest),
}

/// A bulk stream.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamRequest {
    pub direction: Direction,
    /// Per-flow pace in bits per second; `Some(0)`: unpaced. `None`: TCP unpaced, UDP at
    /// [`DEFAULT_UDP_RATE`].
    pub rate_bps: Option<u64>,
    pub transport: StreamTransport,
}

/// A stream's transport and the settings only it has.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamTransport {
    Tcp {
        /// Bytes per write; `None`: [`DEFAULT_TCP_LENGTH`].
        length: Option<u64>,
        mss: Option<u32>,
        nodelay: bool,
    },
    /// QUIC streams (`--quic`): TLS 1.3 inside, over UDP.
    Quic {
        /// Bytes per stream write; `None`: [`DEFAULT_TCP_LENGTH`].
        length: Option<u64>,
        /// One connection per flow rather than one stream per flow on one connection.
        connection_per_flow: bool,
    },
    Udp {
        /// Payload per datagram; `None`: the largest that fits the path's MTU.
        length: Option<u64>,
        /// Per-flow pace in datagrams per second (sets the rate from the payload).
        pps: Option<u64>,
        gso: bool,
        gro: bool,
    },
    /// A call (`linerate app --pattern voip`): a frame of the codec each way every 20 ms,
    /// in RTP-sized UDP datagrams, both ways at once.
    Call(CallStream),
    /// Video frames (`--isochronous`, `linerate app --pattern video|game`).
    Video(VideoStream),
}

/// A call as a stream: its codec and jitter buffer, and the Quality of Outcome requirement
/// its ways are scored against (`--qoo`; `None`: a voice call's, crate::qoo).
#[derive(Debug, Clone, PartialEq)]
pub struct CallStream {
    pub settings: crate::call::CallSettings,
    pub qoo: Option<crate::qoo::Requirement>,
}

impl CallStream {
    /// `settings`' call, scored against a voice call's requirement.
    pub fn of(settings: crate::call::CallSettings) -> CallStream {
        CallStream {
            settings,
            qoo: None,
        }
    }
}

/// A video-shaped stream: UDP datagrams of `length` bytes (`None`: as `Udp`'s), a frame
/// of them every period. Built from [`VideoStream::of`] and what differs from it, so a
/// setting added here is added here alone.
#[derive(Debug, Clone, PartialEq)]
pub struct VideoStream {
    pub settings: crate::video::VideoSettings,
    pub length: Option<u64>,
    /// The frames the server sends, where they differ from the client's (a game's state
    /// against its inputs); `None`: `settings` both ways.
    pub back: Option<crate::video::VideoSettings>,
    /// The Quality of Outcome requirement its ways are scored against (`--qoo`); `None`:
    /// the pattern's own (crate::qoo).
    pub qoo: Option<crate::qoo::Requirement>,
}

impl VideoStream {
    /// `settings`' frames both ways asked, in datagrams of the path's size, scored
    /// against the pattern's own requirement.
    pub fn of(settings: crate::video::VideoSettings) -> VideoStream {
        VideoStream {
            settings,
            length: None,
            back: None,
            qoo: None,
        }
    }
}

impl StreamTransport {
    /// UDP (`udp`) of `length`-byte datagrams at `pps` a second where paced so, without
    /// offloads; or TCP of `length`-byte writes, the kernel's MSS, `nodelay` as given: the
    /// transports of the tests that take no more than that (iperf 2's, a sweep's points).
    pub fn plain(udp: bool, length: Option<u64>, pps: Option<u64>, nodelay: bool) -> Self {
        if udp {
            StreamTransport::Udp {
                length,
                pps,
                gso: false,
                gro: false,
            }
        } else {
            StreamTransport::Tcp {
                length,
                mss: None,
                nodelay,
            }
        }
    }
}

/// Request/response (`rr`) or connect/request/response/close (`crr`) transactions.
#[derive(Debug, Clone, PartialEq)]
pub struct TransactionRequest {
    /// `crr` (over TCP) rather than `rr`.
    pub connect_each: bool,
    /// `rr` over UDP.
    pub udp: bool,
    pub request: u64,
    pub response: u64,
    /// In flight per flow; `None`: 1, or [`OPEN_LOOP_CAP`] with a rate.
    pub outstanding: Option<u32>,
    /// Open loop: transactions due per second per flow.
    pub rate_tps: Option<u64>,
    pub busy_poll_us: Option<u32>,
    pub cpus: Vec<usize>,
    /// Bulk TCP flows beside the transactions (`--load`).
    pub load: u32,
    /// Leave Nagle's algorithm on (transactions set TCP_NODELAY by default).
    pub keep_nagle: bool,
}

impl TransactionRequest {
    /// TCP request/response of these sizes, one in flight, nothing else asked: every
    /// other setting its default.
    pub fn tcp(request: u64, response: u64) -> TransactionRequest {
        TransactionRequest {
            connect_each: false,
            udp: false,
            request,
            response,
            outstanding: None,
            rate_tps: None,
            busy_poll_us: None,
            cpus: Vec::new(),
            load: 0,
            keep_nagle: false,
        }
    }
}

/// What the resolver needs to know of this machine and the path: facts, not choices.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Environment {
    pub cpus: usize,
    /// The largest UDP payload that crosses the path unfragmented, where it was read.
    pub udp_length: Option<u64>,
}

impl TestConfig {
    /// The resolved configuration of `request` on this machine: every default filled in.
    /// `Err` is a user's mistake, in one line naming the value.
    pub fn resolve(request: &TestRequest, environment: &Environment) -> Result<TestConfig, String> {
        let mut config = TestConfig {
            protocol: crate::Protocol::Tcp,
            target: request.target.clone().unwrap_or_else(|| "loopback".into()),
            port: request.port,
            direction: Direction::Forward,
            parallel: request.parallel,
            threads: 0,
            time_s: request.time_s,
            omit_s: request.omit_s,
            interval_s: request.interval_s,
            length: DEFAULT_TCP_LENGTH,
            window: request.window,
            mss: None,
            nodelay: false,
            congestion: request.congestion.clone(),
            rate_bps: None,
            pps: None,
            gso: false,
            gro: false,
            per_flow: request.per_flow,
            connect_timeout_s: request.connect_timeout_s,
            workload: Workload::Stream,
            rr: None,
            observe: request.observe,
            tls: request.tls.clone(),
            quic: None,
            source: request.source.clone(),
            marks: request.marks,
            call: None,
            video: None,
            video_back: None,
            qoo: None,
        };
        match &request.kind {
            TestKind::Stream(stream) => resolve_stream(&mut config, stream, environment)?,
            TestKind::Transactions(transactions) => {
                if request.tls.is_some() && (transactions.udp || transactions.connect_each) {
                    return Err(
                        "'--tls' runs request/response over TCP connections; it does not go with --udp or --crr"
                            .into(),
                    );
                }
                resolve_transactions(&mut config, transactions, environment)?
            }
        }
        let flows = match config.workload {
            Workload::Stream => config.connections(),
            _ => config.parallel,
        };
        config.threads = request.threads.unwrap_or_else(|| {
            u32::try_from(default_threads(flows as usize, environment.cpus)).unwrap_or(u32::MAX)
        });
        if config.source.as_ref().is_some_and(|s| s.mptcp)
            && (config.protocol != crate::Protocol::Tcp || config.workload == Workload::Crr)
        {
            return Err(
                "'--mptcp' opens the data connections of a TCP (or TLS) stream or rr test as MPTCP; it does not go with --udp, --quic or crr"
                    .into(),
            );
        }
        if let Some(quic) = config.quic.as_mut() {
            quic.workers = quic_workers(flows, config.threads, environment.cpus);
        }
        Ok(config)
    }
}

fn resolve_stream(
    config: &mut TestConfig,
    stream: &StreamRequest,
    environment: &Environment,
) -> Result<(), String> {
    config.direction = stream.direction;
    match stream.transport {
        StreamTransport::Tcp {
            length,
            mss,
            nodelay,
        } => {
            config.length = length.unwrap_or(DEFAULT_TCP_LENGTH);
            config.mss = mss;
            config.nodelay = nodelay;
            config.rate_bps = stream.rate_bps.filter(|r| *r > 0);
        }
        StreamTransport::Quic {
            length,
            connection_per_flow,
        } => {
            config.protocol = crate::Protocol::Quic;
            config.length = length.unwrap_or(DEFAULT_TCP_LENGTH);
            config.rate_bps = stream.rate_bps.filter(|r| *r > 0);
            config.tls.get_or_insert_with(|| crate::TlsSettings {
                cipher: DEFAULT_CIPHER.into(),
                ktls: false,
            });
            config.quic = Some(crate::QuicSettings {
                connection_per_flow,
                // Set once the threads are known.
                workers: 1,
            });
        }
        StreamTransport::Udp {
            length,
            pps,
            gso,
            gro,
        } => {
            let length = match length {
                Some(length) if !UDP_LENGTH.contains(&length) => {
                    return Err(format!(
                        "invalid value '{length}' for '--length': a UDP datagram carries {} to {} bytes",
                        UDP_LENGTH.start(),
                        UDP_LENGTH.end()
                    ));
                }
                Some(length) => length,
                None => environment
                    .udp_length
                    .unwrap_or(FALLBACK_UDP_LENGTH)
                    .clamp(*UDP_LENGTH.start(), *UDP_LENGTH.end()),
            };
            if config.tls.is_some() {
                return Err(
                    "'--tls' encrypts TCP connections; for encrypted datagrams use '--quic'".into(),
                );
            }
            config.protocol = crate::Protocol::Udp;
            config.length = length;
            config.pps = pps;
            config.gso = gso;
            config.gro = gro;
            config.rate_bps = match (pps, stream.rate_bps) {
                (Some(pps), _) => Some(pps.saturating_mul(length * 8)),
                (None, Some(0)) => None,
                (None, Some(rate)) => Some(rate),
                (None, None) => Some(DEFAULT_UDP_RATE),
            };
        }
        StreamTransport::Call(ref call) => {
            if config.tls.is_some() {
                return Err("'--tls' encrypts TCP connections; a call is UDP".into());
            }
            let settings = call.settings;
            config.protocol = crate::Protocol::Udp;
            config.direction = Direction::Bidir;
            config.length = settings.codec.datagram_bytes();
            config.pps = Some(settings.pps());
            config.rate_bps = Some(settings.pps() * config.length * 8);
            config.call = Some(settings);
            config.qoo = checked_requirement(call.qoo.as_ref())?;
        }
        StreamTransport::Video(ref video) => {
            resolve_video(
                config,
                (video.settings, video.back),
                video.length,
                environment,
            )?;
            config.qoo = checked_requirement(video.qoo.as_ref())?;
        }
    }
    Ok(())
}

/// A requirement given with `--qoo`, checked as a server checks it.
fn checked_requirement(
    given: Option<&crate::qoo::Requirement>,
) -> Result<Option<crate::qoo::Requirement>, String> {
    given
        .cloned()
        .map(|q| q.checked())
        .transpose()
        .map_err(|why| format!("invalid value for '--qoo': {why}"))
}

/// A video test: UDP datagrams of `length` bytes (the path's largest by default, never
/// less than the frame fields), paced by its frames, its mean load the rate a server
/// weighs.
fn resolve_video(
    config: &mut TestConfig,
    (settings, back): (
        crate::video::VideoSettings,
        Option<crate::video::VideoSettings>,
    ),
    length: Option<u64>,
    environment: &Environment,
) -> Result<(), String> {
    if config.tls.is_some() {
        return Err("'--tls' encrypts TCP connections; video frames are UDP".into());
    }
    let checked = |settings: crate::video::VideoSettings| {
        settings.checked().map_err(|why| {
            format!(
                "invalid value '{}' for '--isochronous': {why}",
                settings.spec()
            )
        })
    };
    let settings = checked(settings)?;
    let back = back.map(checked).transpose()?;
    let length = match length {
        Some(length) if !VIDEO_LENGTH.contains(&length) => {
            return Err(format!(
                "invalid value '{length}' for '--length': a video datagram carries {} to {} bytes",
                VIDEO_LENGTH.start(),
                VIDEO_LENGTH.end()
            ));
        }
        Some(length) => length,
        None => environment
            .udp_length
            .unwrap_or(FALLBACK_UDP_LENGTH)
            .clamp(*VIDEO_LENGTH.start(), *VIDEO_LENGTH.end()),
    };
    config.protocol = crate::Protocol::Udp;
    config.length = length;
    // The larger way's mean load: what a server's rate limit weighs.
    config.rate_bps = Some(settings.mean_bps.max(back.map_or(0, |b| b.mean_bps)));
    config.video = Some(settings);
    config.video_back = back;
    Ok(())
}

fn resolve_transactions(
    config: &mut TestConfig,
    transactions: &TransactionRequest,
    environment: &Environment,
) -> Result<(), String> {
    let udp = transactions.udp && !transactions.connect_each;
    for (name, size) in [
        ("--request", transactions.request),
        ("--response", transactions.response),
    ] {
        if udp && size > *UDP_LENGTH.end() {
            return Err(format!(
                "invalid value '{size}' for '{name}': a UDP datagram carries 1 to {} bytes",
                UDP_LENGTH.end()
            ));
        }
    }
    if let Some(&cpu) = transactions.cpus.iter().find(|&&c| c >= environment.cpus) {
        return Err(format!(
            "invalid value '{cpu}' for '--cpu': this machine has CPUs 0 to {}",
            environment.cpus.saturating_sub(1)
        ));
    }
    config.protocol = if udp {
        crate::Protocol::Udp
    } else {
        crate::Protocol::Tcp
    };
    config.workload = if transactions.connect_each {
        Workload::Crr
    } else {
        Workload::Rr
    };
    config.length = transactions.request;
    config.nodelay = !transactions.keep_nagle && !udp;
    config.rr = Some(RrConfig {
        request: transactions.request,
        response: transactions.response,
        outstanding: transactions
            .outstanding
            .unwrap_or(if transactions.rate_tps.is_some() {
                OPEN_LOOP_CAP
            } else {
                1
            }),
        rate_tps: transactions.rate_tps.map(|r| r as f64),
        busy_poll_us: transactions.busy_poll_us,
        cpus: transactions.cpus.clone(),
        load: transactions.load,
    });
    Ok(())
}

impl TestRequest {
    /// A request with every common setting at its default, for `kind`.
    pub fn new(kind: TestKind) -> TestRequest {
        TestRequest {
            target: None,
            port: 5201,
            parallel: 1,
            threads: None,
            time_s: DEFAULT_TIME_S,
            omit_s: 0.0,
            interval_s: 1.0,
            window: None,
            congestion: None,
            per_flow: false,
            connect_timeout_s: 10.0,
            observe: true,
            tls: None,
            source: None,
            marks: None,
            kind,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HERE: Environment = Environment {
        cpus: 2,
        udp_length: Some(1472),
    };

    fn stream(transport: StreamTransport, rate_bps: Option<u64>) -> TestRequest {
        TestRequest::new(TestKind::Stream(StreamRequest {
            direction: Direction::Forward,
            rate_bps,
            transport,
        }))
    }

    fn udp(length: Option<u64>, pps: Option<u64>) -> StreamTransport {
        StreamTransport::Udp {
            length,
            pps,
            gso: false,
            gro: false,
        }
    }

    #[test]
    fn stream_defaults() {
        let tcp = StreamTransport::Tcp {
            length: None,
            mss: None,
            nodelay: false,
        };
        let c = TestConfig::resolve(&stream(tcp, None), &HERE).unwrap();
        assert_eq!(
            (c.protocol.as_str(), c.length, c.rate_bps, c.threads),
            ("tcp", 128_000, None, 1)
        );
        assert_eq!(c.target, "loopback");
        // UDP: the path's datagram, iperf3's default pace; pps sets the rate; 0 unpaced.
        let c = TestConfig::resolve(&stream(udp(None, None), None), &HERE).unwrap();
        assert_eq!((c.length, c.rate_bps), (1472, Some(DEFAULT_UDP_RATE)));
        let c = TestConfig::resolve(&stream(udp(Some(64), Some(1000)), None), &HERE).unwrap();
        assert_eq!(c.rate_bps, Some(64 * 8 * 1000));
        let c = TestConfig::resolve(&stream(udp(None, None), Some(0)), &HERE).unwrap();
        assert_eq!(c.rate_bps, None);
        let err = TestConfig::resolve(&stream(udp(Some(70_000), None), None), &HERE).unwrap_err();
        assert!(err.contains("'70000'"), "{err}");
        let no_mtu = Environment {
            cpus: 2,
            udp_length: None,
        };
        let c = TestConfig::resolve(&stream(udp(None, None), None), &no_mtu).unwrap();
        assert_eq!(c.length, FALLBACK_UDP_LENGTH);
    }

    #[test]
    fn threads_follow_the_flows_then_the_cpus() {
        let mut request = stream(
            StreamTransport::Tcp {
                length: None,
                mss: None,
                nodelay: false,
            },
            None,
        );
        request.parallel = 8;
        assert_eq!(TestConfig::resolve(&request, &HERE).unwrap().threads, 8);
        if let TestKind::Stream(s) = &mut request.kind {
            s.direction = Direction::Bidir;
        }
        request.parallel = 10;
        assert_eq!(TestConfig::resolve(&request, &HERE).unwrap().threads, 2);
        request.threads = Some(3);
        assert_eq!(TestConfig::resolve(&request, &HERE).unwrap().threads, 3);
    }

    #[test]
    fn quic_workers_are_one_per_flow_up_to_the_threads_and_the_cpus() {
        assert_eq!(quic_workers(8, 8, 16), 8);
        assert_eq!(quic_workers(8, 8, 2), 2);
        assert_eq!(quic_workers(8, 1, 16), 1);
        assert_eq!(quic_workers(1, 16, 16), 1);
        assert_eq!(quic_workers(0, 0, 0), 1);
        let mut request = stream(
            StreamTransport::Quic {
                length: None,
                connection_per_flow: false,
            },
            None,
        );
        request.parallel = 4;
        let workers = |request: &TestRequest, cpus: usize| {
            let here = Environment {
                cpus,
                udp_length: None,
            };
            let config = TestConfig::resolve(request, &here).unwrap();
            config.quic.map(|q| q.workers)
        };
        assert_eq!(workers(&request, 16), Some(4));
        assert_eq!(workers(&request, 2), Some(2));
        request.threads = Some(1);
        assert_eq!(workers(&request, 16), Some(1));
    }

    #[test]
    fn transaction_defaults() {
        let mut t = TransactionRequest::tcp(1, 1);
        let c = TestConfig::resolve(&TestRequest::new(TestKind::Transactions(t.clone())), &HERE)
            .unwrap();
        assert_eq!(c.workload, Workload::Rr);
        assert!(c.nodelay);
        assert_eq!(c.rr.as_ref().unwrap().outstanding, 1);
        t.rate_tps = Some(1000);
        t.udp = true;
        let c = TestConfig::resolve(&TestRequest::new(TestKind::Transactions(t.clone())), &HERE)
            .unwrap();
        assert_eq!((c.protocol.as_str(), c.nodelay), ("udp", false));
        assert_eq!(c.rr.as_ref().unwrap().outstanding, OPEN_LOOP_CAP);
        t.connect_each = true;
        let c = TestConfig::resolve(&TestRequest::new(TestKind::Transactions(t)), &HERE).unwrap();
        assert_eq!((c.workload, c.protocol.as_str()), (Workload::Crr, "tcp"));
    }

    #[test]
    fn a_udp_message_over_one_datagram_and_a_cpu_not_here_are_named() {
        let t = TransactionRequest {
            udp: true,
            ..TransactionRequest::tcp(65_508, 1)
        };
        let resolve = |t: &TransactionRequest| {
            TestConfig::resolve(&TestRequest::new(TestKind::Transactions(t.clone())), &HERE)
        };
        assert_eq!(
            resolve(&t).unwrap_err(),
            "invalid value '65508' for '--request': a UDP datagram carries 1 to 65507 bytes"
        );
        // Over TCP a message may be larger than a datagram.
        let tcp = TransactionRequest {
            udp: false,
            ..t.clone()
        };
        assert!(resolve(&tcp).is_ok());
        let cpus = TransactionRequest {
            udp: false,
            cpus: vec![0, 2],
            ..t
        };
        assert_eq!(
            resolve(&cpus).unwrap_err(),
            "invalid value '2' for '--cpu': this machine has CPUs 0 to 1"
        );
    }

    #[test]
    fn every_protocol_has_a_row_that_runs_a_stream() {
        for protocol in crate::Protocol::ALL {
            let traits = protocol.traits();
            assert!(protocol.runs(Workload::Stream), "{protocol}");
            // A datagram protocol is not the kernel's TCP, and only TCP connects per
            // transaction.
            assert!(!(traits.datagrams && traits.kernel_tcp), "{protocol}");
            assert_eq!(
                protocol.runs(Workload::Crr),
                traits.kernel_tcp,
                "{protocol}"
            );
        }
        assert!(crate::Protocol::Quic.traits().always_encrypted);
    }
}
