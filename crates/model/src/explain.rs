//! What a resolved test chose where the user did not say, and why: the lines `--verbose`
//! prints before a test. The choices that depend on the machine (its CPUs, the path's MTU)
//! name what was found; the rest name the rule.

use crate::{
    Environment, Protocol, StreamRequest, StreamTransport, TestConfig, TestKind, TestRequest,
    Workload, DEFAULT_CIPHER, DEFAULT_TCP_LENGTH, FALLBACK_UDP_LENGTH, THREAD_PER_FLOW_UP_TO,
};

/// One line per choice of `config`, resolved from `request` on `environment`.
pub fn explain(
    request: &TestRequest,
    environment: &Environment,
    config: &TestConfig,
) -> Vec<String> {
    let flows = match config.workload {
        Workload::Stream => config.connections(),
        _ => config.parallel,
    } as usize;
    let workers = (config.threads as usize).max(1);
    let per_worker = flows.div_ceil(workers);
    let mut lines = workers_chosen(request, environment, flows, workers, per_worker);
    if let TestKind::Stream(stream) = &request.kind {
        lines.extend(stream_chosen(stream, environment, config, per_worker));
    }
    if let Some(tls) = &config.tls {
        lines.push(if tls.cipher == DEFAULT_CIPHER {
            format!(
                "cipher: {} (the default: rustls' and OpenSSL's first choice)",
                tls.cipher
            )
        } else {
            format!("cipher: {} (as given)", tls.cipher)
        });
        if config.protocol == Protocol::Tcp && !tls.ktls {
            lines.push(if per_worker <= 1 {
                "TLS buffers: fast (a lone flow reads up to 1 MiB of records a call and seals \
                 a whole write at once)"
                    .into()
            } else {
                format!(
                    "TLS buffers: frugal ({per_worker} flows a worker: a sender seals no more \
                     than its socket has room for, and what waits is kept sized to it)"
                )
            });
        }
    }
    lines
}

/// How many workers, why, and how each runs its flows.
fn workers_chosen(
    request: &TestRequest,
    environment: &Environment,
    flows: usize,
    workers: usize,
    per_worker: usize,
) -> Vec<String> {
    let cpus = environment.cpus;
    let cpu_word = if cpus == 1 { "CPU" } else { "CPUs" };
    let count = match request.threads {
        Some(_) => format!("workers: {workers} (as given) for {flows} flows on {cpus} {cpu_word}"),
        None if flows <= THREAD_PER_FLOW_UP_TO => format!(
            "workers: {workers}, one per flow (up to {THREAD_PER_FLOW_UP_TO} flows each gets \
             its own; this machine has {cpus} {cpu_word})"
        ),
        None => format!(
            "workers: {workers}, one per CPU ({cpus} {cpu_word} this process may run on; past \
             {THREAD_PER_FLOW_UP_TO} flows a worker per flow would only add switching)"
        ),
    };
    let how = if per_worker <= 1 {
        "each worker runs its flow with blocking calls: the thread sleeps in the socket and \
         the kernel wakes it only when it waits, the cheapest way to move bytes"
            .into()
    } else {
        format!(
            "each worker runs an event loop over up to {per_worker} flows (edge-triggered \
             epoll)"
        )
    };
    vec![count, how]
}

/// A stream's write or datagram size, its pace, and the receivers' low-water mark.
fn stream_chosen(
    stream: &StreamRequest,
    environment: &Environment,
    config: &TestConfig,
    per_worker: usize,
) -> Vec<String> {
    let mut lines = Vec::new();
    match &stream.transport {
        StreamTransport::Tcp { length: None, .. } | StreamTransport::Quic { length: None, .. } => {
            lines.push(format!(
                "write size: {DEFAULT_TCP_LENGTH} bytes (qperf's 128k; writes of exactly 128 \
                 KiB leave a 106-byte segment on a 64 KiB-MTU path such as loopback, and \
                 ran at 0.55-0.65x there)"
            ))
        }
        StreamTransport::Udp {
            length: None, pps, ..
        } => {
            lines.push(match environment.udp_length {
                Some(found) => format!(
                    "datagram: {} bytes, the largest the path's MTU carries unfragmented \
                     ({found} found from the route's IP_MTU)",
                    config.length
                ),
                None => format!(
                    "datagram: {FALLBACK_UDP_LENGTH} bytes (the path's MTU could not be read; \
                     1500 less IPv4 and UDP headers)"
                ),
            });
            if pps.is_none() && stream.rate_bps.is_none() {
                lines.push(UDP_PACE.into());
            }
        }
        StreamTransport::Udp { pps, .. } => {
            lines.push(format!("datagram: {} bytes (as given)", config.length));
            if pps.is_none() && stream.rate_bps.is_none() {
                lines.push(UDP_PACE.into());
            }
        }
        _ => lines.push(format!("write size: {} bytes (as given)", config.length)),
    }
    if config.protocol == Protocol::Tcp && config.tls.is_none() && per_worker <= 1 {
        lines.push(
            "receivers set SO_RCVLOWAT to 256 KiB where the handshake's round trip is under \
             1 ms and buffers autotune: the reader wakes every 256 KiB, not every segment"
                .into(),
        );
    }
    lines
}

const UDP_PACE: &str =
    "rate: 1 Mbit/s per flow (iperf3's default, so a UDP test never floods a path; -b 0 for unpaced)";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Direction;

    fn request(parallel: u32, transport: StreamTransport, tls: bool) -> TestRequest {
        TestRequest {
            target: None,
            port: 5201,
            parallel,
            threads: None,
            time_s: 1.0,
            omit_s: 0.0,
            interval_s: 1.0,
            window: None,
            congestion: None,
            per_flow: false,
            connect_timeout_s: 5.0,
            source: None,
            marks: None,
            observe: false,
            tls: tls.then(|| crate::TlsSettings {
                cipher: DEFAULT_CIPHER.into(),
                ktls: false,
            }),
            kind: TestKind::Stream(StreamRequest {
                direction: Direction::Forward,
                rate_bps: None,
                transport,
            }),
        }
    }

    fn lines_for(request: &TestRequest, environment: &Environment) -> Vec<String> {
        let config = TestConfig::resolve(request, environment).unwrap();
        explain(request, environment, &config)
    }

    const TCP: StreamTransport = StreamTransport::Tcp {
        length: None,
        mss: None,
        nodelay: false,
    };

    #[test]
    fn few_flows_get_a_worker_each_and_many_a_worker_per_cpu_named_by_count() {
        let machine = Environment {
            cpus: 6,
            udp_length: None,
        };
        let few = lines_for(&request(4, TCP, false), &machine);
        assert!(few[0].starts_with("workers: 4, one per flow"), "{few:?}");
        assert!(few[0].contains("6 CPUs"), "{few:?}");
        assert!(few[1].contains("blocking calls"), "{few:?}");
        assert!(few.iter().any(|l| l.contains("SO_RCVLOWAT")), "{few:?}");
        let many = lines_for(&request(600, TCP, true), &machine);
        assert!(
            many[0].starts_with("workers: 6, one per CPU (6 CPUs"),
            "{many:?}"
        );
        assert!(many[1].contains("up to 100 flows"), "{many:?}");
        assert!(
            many.iter()
                .any(|l| l.starts_with("TLS buffers: frugal (100 flows")),
            "{many:?}"
        );
        assert!(!many.iter().any(|l| l.contains("SO_RCVLOWAT")), "{many:?}");
    }

    #[test]
    fn a_udp_datagram_names_the_mtu_found_or_the_fallback() {
        let udp = StreamTransport::Udp {
            length: None,
            pps: None,
            gso: false,
            gro: false,
        };
        let found = Environment {
            cpus: 2,
            udp_length: Some(8972),
        };
        let lines = lines_for(&request(1, udp.clone(), false), &found);
        assert!(
            lines.iter().any(|l| l.starts_with("datagram: 8972 bytes")),
            "{lines:?}"
        );
        assert!(
            lines.iter().any(|l| l.starts_with("rate: 1 Mbit/s")),
            "{lines:?}"
        );
        let unknown = Environment {
            cpus: 2,
            udp_length: None,
        };
        let lines = lines_for(&request(1, udp, false), &unknown);
        assert!(
            lines.iter().any(|l| l.starts_with("datagram: 1472 bytes")),
            "{lines:?}"
        );
    }

    #[test]
    fn values_the_user_gave_are_said_to_be_given() {
        let machine = Environment {
            cpus: 2,
            udp_length: None,
        };
        let mut asked = request(
            3,
            StreamTransport::Tcp {
                length: Some(9000),
                mss: None,
                nodelay: false,
            },
            false,
        );
        asked.threads = Some(1);
        let lines = lines_for(&asked, &machine);
        assert!(lines[0].starts_with("workers: 1 (as given)"), "{lines:?}");
        assert!(lines.contains(&"write size: 9000 bytes (as given)".to_string()));
    }
}
