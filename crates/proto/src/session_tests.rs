//! In-memory client/server pairs on a virtual clock: no sockets, no sleeping.

use super::*;
use linerate_model::{Direction, SideResult};

fn config(parallel: u32) -> TestConfig {
    TestConfig {
        quic: None,
        source: None,
        marks: None,
        call: None,
        video: None,
        video_back: None,
        qoo: None,
        tls: None,
        protocol: linerate_model::Protocol::Tcp,
        target: "test".into(),
        port: 5201,
        direction: Direction::Forward,
        parallel,
        threads: 1,
        time_s: 10.0,
        omit_s: 1.0,
        interval_s: 1.0,
        length: 131072,
        window: None,
        mss: None,
        nodelay: false,
        congestion: None,
        rate_bps: None,
        pps: None,
        gso: false,
        gro: false,
        per_flow: false,
        connect_timeout_s: 5.0,
        workload: Default::default(),
        rr: None,
        observe: true,
    }
}

/// A client and a server joined by a perfect in-memory wire, on a clock the test moves.
struct Pair {
    now: Instant,
    client: ClientSession,
    server: ServerSession,
    client_events: Vec<ClientEvent>,
    server_events: Vec<ServerEvent>,
}

impl Pair {
    fn new(version: u32, config: TestConfig) -> Pair {
        #[allow(clippy::disallowed_methods)] // the virtual clock's origin; only offsets matter
        let now = Instant::now();
        Pair {
            now,
            client: ClientSession::new(
                now,
                version,
                HostFacts::default(),
                config,
                Timeouts::default(),
            ),
            server: ServerSession::new(
                now,
                Limits::default(),
                "s".into(),
                HostFacts::default(),
                Timeouts::default(),
            ),
            client_events: Vec::new(),
            server_events: Vec::new(),
        }
    }

    /// Moves every queued byte both ways until nothing moves.
    fn exchange(&mut self) {
        loop {
            let mut moved = false;
            while let Some(bytes) = self.client.poll_transmit() {
                self.server.handle_input(self.now, &bytes);
                moved = true;
            }
            while let Some(bytes) = self.server.poll_transmit() {
                self.client.handle_input(self.now, &bytes);
                moved = true;
            }
            while let Some(event) = self.client.poll_event() {
                self.client_events.push(event);
            }
            while let Some(event) = self.server.poll_event() {
                self.server_events.push(event);
            }
            if !moved {
                return;
            }
        }
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
        self.client.handle_timeout(self.now);
        self.server.handle_timeout(self.now);
        self.exchange();
    }
}

#[test]
fn whole_exchange_completes_on_a_virtual_clock() {
    let mut pair = Pair::new(PROTOCOL_VERSION, config(4));
    pair.exchange();
    assert!(matches!(
        pair.client_events[0],
        ClientEvent::Welcomed { .. }
    ));
    assert!(matches!(&pair.server_events[0], ServerEvent::TestRequested(c) if c.parallel == 4));

    let token = Token([7; 16]);
    pair.server.accept(pair.now, 42, token);
    pair.exchange();
    assert_eq!(
        pair.client_events[1],
        ClientEvent::Accepted {
            quic_ports: Vec::new(),
            tls_fingerprint: None,
            test_id: 42,
            token,
            udp_ports: vec![],
            crr_port: None,
        }
    );

    pair.advance(Duration::from_millis(5));
    pair.server.flows_ready(pair.now);
    pair.exchange();
    assert_eq!(pair.client_events[2], ClientEvent::FlowsReady);

    pair.client.start(pair.now);
    pair.exchange();
    // Start carries the test asked for: the driver starts its plane from it.
    let ServerEvent::Start(started) = &pair.server_events[1] else {
        panic!("{:?}", pair.server_events[1])
    };
    assert_eq!(Some(&**started), pair.server.config());

    // The test runs for omit + time = 11 s; no deadline fires inside it.
    pair.advance(Duration::from_secs(11));
    assert!(!pair.client.is_closed() && !pair.server.is_closed());

    let result = SideResult {
        warnings: vec!["marker".into()],
        ..Default::default()
    };
    pair.server.finish(pair.now, result.clone());
    pair.exchange();
    assert_eq!(
        pair.client_events[3],
        ClientEvent::Results(Box::new(result))
    );

    pair.client.done();
    pair.exchange();
    assert_eq!(pair.server_events[2], ServerEvent::Closed(Ok(())));
    assert!(pair.client.is_closed() && pair.server.is_closed());
}

#[test]
fn version_mismatch_is_refused_with_a_reason() {
    let mut pair = Pair::new(PROTOCOL_VERSION + 1, config(1));
    pair.exchange();
    match &pair.client_events[..] {
        [ClientEvent::Failed(SessionError::Protocol(reason))] => {
            assert!(reason.contains("version mismatch"), "{reason}")
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(pair.server.is_closed());
}

#[test]
fn over_limit_test_is_refused() {
    let mut pair = Pair::new(PROTOCOL_VERSION, config(5000));
    pair.exchange();
    assert!(matches!(
        pair.client_events.last(),
        Some(ClientEvent::Failed(SessionError::Refused {
            code: RefuseCode::OverLimit,
            ..
        }))
    ));
    assert!(matches!(
        pair.server_events.last(),
        Some(ServerEvent::Closed(Err(_)))
    ));
}

#[test]
fn silent_client_times_out_on_the_server() {
    #[allow(clippy::disallowed_methods)]
    let start = Instant::now();
    let mut server = ServerSession::new(
        start,
        Limits::default(),
        "s".into(),
        HostFacts::default(),
        Timeouts::default(),
    );
    server.handle_timeout(start + Duration::from_secs(9));
    assert!(server.poll_event().is_none());
    assert_eq!(server.poll_timeout(), Some(start + Duration::from_secs(10)));
    server.handle_timeout(start + Duration::from_secs(10));
    assert!(matches!(
        server.poll_event(),
        Some(ServerEvent::Closed(Err(SessionError::Timeout { .. })))
    ));
}

fn server_after_preface() -> (Instant, ServerSession) {
    #[allow(clippy::disallowed_methods)]
    let now = Instant::now();
    let mut server = ServerSession::new(
        now,
        Limits::default(),
        "s".into(),
        HostFacts::default(),
        Timeouts::default(),
    );
    server.handle_input(now, &preface::control_preface(PROTOCOL_VERSION));
    assert!(server.poll_event().is_none());
    (now, server)
}

#[test]
fn oversized_frame_is_refused_without_buffering() {
    let (now, mut server) = server_after_preface();
    server.handle_input(now, &(2u32 << 20).to_be_bytes());
    assert!(matches!(
        server.poll_event(),
        Some(ServerEvent::Closed(Err(SessionError::Frame(
            FrameError::TooLarge { .. }
        ))))
    ));
    let reply = server
        .poll_transmit()
        .expect("an error frame for the client");
    assert!(String::from_utf8_lossy(&reply).contains("over the limit"));
}

#[test]
fn garbage_json_and_wrong_order_are_protocol_errors() {
    let (now, mut server) = server_after_preface();
    server.handle_input(now, &crate::frame::encode(b"\x00\x01not json"));
    assert!(matches!(
        server.poll_event(),
        Some(ServerEvent::Closed(Err(SessionError::Protocol(_))))
    ));

    let (now, mut server) = server_after_preface();
    server.handle_input(now, &encode(&ClientMessage::Start));
    match server.poll_event() {
        Some(ServerEvent::Closed(Err(SessionError::Protocol(reason)))) => {
            assert!(reason.contains("unexpected start"), "{reason}")
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn truncated_frame_then_eof_closes_the_session() {
    let (now, mut server) = server_after_preface();
    let frame = encode(&ClientMessage::Done);
    server.handle_input(now, &frame[..frame.len() - 1]);
    assert!(server.poll_event().is_none());
    server.handle_eof(now);
    assert!(matches!(
        server.poll_event(),
        Some(ServerEvent::Closed(Err(SessionError::PeerClosed(_))))
    ));
}

#[test]
fn client_gives_up_when_results_never_come() {
    let mut pair = Pair::new(PROTOCOL_VERSION, config(1));
    pair.exchange();
    pair.server.accept(pair.now, 1, Token([1; 16]));
    pair.exchange();
    pair.server.flows_ready(pair.now);
    pair.exchange();
    pair.client.start(pair.now);
    pair.exchange();
    // omit 1 + time 10 + grace 20 = 31 s
    pair.advance(Duration::from_secs(30));
    assert!(!pair.client.is_closed());
    pair.now += Duration::from_secs(1);
    pair.client.handle_timeout(pair.now);
    assert!(matches!(
        pair.client.poll_event(),
        Some(ClientEvent::Failed(SessionError::Timeout { .. }))
    ));
}

#[test]
fn client_vanishing_mid_test_closes_the_server_session() {
    let mut pair = Pair::new(PROTOCOL_VERSION, config(1));
    pair.exchange();
    pair.server.accept(pair.now, 1, Token([1; 16]));
    pair.exchange();
    pair.server.flows_ready(pair.now);
    pair.exchange();
    pair.client.start(pair.now);
    pair.exchange();
    pair.server.handle_eof(pair.now);
    assert!(matches!(
        pair.server.poll_event(),
        Some(ServerEvent::Closed(Err(SessionError::PeerClosed(
            "running the test"
        ))))
    ));
}

fn keyed(text: &str) -> crate::auth::Key {
    crate::auth::Key::from_file_contents(text.as_bytes()).unwrap()
}

fn keyed_client(key: &str, nonce: u8, now: Instant) -> ClientSession {
    ClientSession::new(
        now,
        PROTOCOL_VERSION,
        HostFacts::default(),
        config(1),
        Timeouts::default(),
    )
    .with_key(keyed(key), Nonce([nonce; 32]))
}

fn keyed_server(key: &str, nonce: u8, now: Instant) -> ServerSession {
    ServerSession::new(
        now,
        Limits::default(),
        "s".into(),
        HostFacts::default(),
        Timeouts::default(),
    )
    .with_key(keyed(key), Nonce([nonce; 32]))
}

/// A pair whose ends hold these keys (or none), with fixed nonces.
fn keyed_pair(client: Option<&str>, server: Option<&str>, server_nonce: u8) -> Pair {
    let mut pair = Pair::new(PROTOCOL_VERSION, config(1));
    if let Some(k) = client {
        pair.client = keyed_client(k, 1, pair.now);
    }
    if let Some(k) = server {
        pair.server = keyed_server(k, server_nonce, pair.now);
    }
    pair.exchange();
    pair
}

fn refused_for_the_key(pair: &Pair) -> bool {
    matches!(
        pair.server_events.last(),
        Some(ServerEvent::Closed(Err(SessionError::Refused {
            code: RefuseCode::Unauthorized,
            ..
        })))
    )
}

#[test]
fn a_keyed_server_takes_only_clients_with_its_key() {
    const KEY: &str = "the key of this server, 32 bytes";
    // The same key: the test is requested as without one.
    let pair = keyed_pair(Some(KEY), Some(KEY), 2);
    assert!(
        matches!(&pair.server_events[..], [ServerEvent::TestRequested(_)]),
        "{:?}",
        pair.server_events
    );
    // No key: refused, and the client hears why.
    let pair = keyed_pair(None, Some(KEY), 2);
    assert!(refused_for_the_key(&pair), "{:?}", pair.server_events);
    assert!(matches!(
        pair.client_events.last(),
        Some(ClientEvent::Failed(SessionError::Refused {
            code: RefuseCode::Unauthorized,
            ..
        }))
    ));
    // A wrong key: the client finds the server's proof wrong and goes no further; the
    // server never sees a test requested.
    let pair = keyed_pair(Some("another key of 32 bytes, not it"), Some(KEY), 2);
    assert!(pair.server_events.is_empty(), "{:?}", pair.server_events);
    assert!(matches!(
        pair.client_events.last(),
        Some(ClientEvent::Failed(SessionError::Auth(
            crate::auth::AuthError::ServerUnproven
        )))
    ));
    // A client with a key does not trust a server without it.
    let pair = keyed_pair(Some(KEY), None, 2);
    assert!(matches!(
        pair.client_events.last(),
        Some(ClientEvent::Failed(SessionError::Auth(
            crate::auth::AuthError::ServerKeyless
        )))
    ));
}

#[test]
fn a_recorded_handshake_replayed_is_refused() {
    const KEY: &str = "the key of this server, 32 bytes";
    let mut recorded = Vec::new();
    let mut pair = keyed_pair(None, Some(KEY), 2);
    pair.client = keyed_client(KEY, 1, pair.now);
    pair.server = keyed_server(KEY, 2, pair.now);
    // Record every byte the genuine client sends.
    loop {
        let mut moved = false;
        while let Some(bytes) = pair.client.poll_transmit() {
            recorded.extend_from_slice(&bytes);
            pair.server.handle_input(pair.now, &bytes);
            moved = true;
        }
        while let Some(bytes) = pair.server.poll_transmit() {
            pair.client.handle_input(pair.now, &bytes);
            moved = true;
        }
        if !moved {
            break;
        }
    }
    assert!(matches!(
        pair.server.poll_event(),
        Some(ServerEvent::TestRequested(_))
    ));
    // The same bytes to a server with a fresh nonce.
    let mut server = keyed_server(KEY, 3, pair.now);
    server.handle_input(pair.now, &recorded);
    assert!(matches!(
        server.poll_event(),
        Some(ServerEvent::Closed(Err(SessionError::Refused {
            code: RefuseCode::Unauthorized,
            ..
        })))
    ));
}

#[test]
fn intervals_and_their_readings_are_bounded() {
    let limits = Limits::default();
    let mut c = config(1);
    c.interval_s = 1e-9;
    assert_eq!(validate(&c, &limits).unwrap_err().0, RefuseCode::Invalid);
    c.interval_s = 0.01;
    assert!(validate(&c, &limits).is_ok());
    // 4096 connections for a day at 1 s: too many readings to keep.
    let mut big = config(4096);
    big.time_s = 86_000.0;
    assert_eq!(
        validate(&big, &limits).unwrap_err().0,
        RefuseCode::OverLimit
    );
    big.interval_s = 0.0;
    assert!(validate(&big, &limits).is_ok());
    let mut long = config(1);
    long.length = MAX_LENGTH + 1;
    assert!(validate(&long, &limits).is_err());
    long.length = MAX_LENGTH;
    long.congestion = Some("x".repeat(200));
    assert!(validate(&long, &limits).is_err());
}

#[test]
fn a_calls_settings_are_bounded_and_only_over_udp() {
    use linerate_model::call::{CallSettings, Codec};
    let limits = Limits::default();
    let mut c = config(1);
    c.call = Some(CallSettings {
        codec: Codec::G711,
        jitter_buffer_ms: 60,
        adaptive: false,
    });
    assert!(validate(&c, &limits).unwrap_err().1.contains("UDP"));
    c.protocol = linerate_model::Protocol::Udp;
    c.length = 172;
    assert!(validate(&c, &limits).is_ok());
    c.call = Some(CallSettings {
        codec: Codec::G711,
        jitter_buffer_ms: u32::MAX,
        adaptive: false,
    });
    assert_eq!(validate(&c, &limits).unwrap_err().0, RefuseCode::Invalid);
    // An adaptive buffer of less than a frame.
    c.call = Some(CallSettings {
        codec: Codec::G711,
        jitter_buffer_ms: 5,
        adaptive: true,
    });
    assert_eq!(validate(&c, &limits).unwrap_err().0, RefuseCode::Invalid);
}

/// A bidirectional test of 2^31 flows once wrapped to 0 connections and passed
/// `--max-flows`.
#[test]
fn a_flow_count_that_would_wrap_is_refused() {
    let mut c = config(1 << 31);
    c.direction = linerate_model::Direction::Bidir;
    assert_eq!(c.connections(), u32::MAX);
    assert_eq!(
        validate(&c, &Limits::default()).unwrap_err().0,
        RefuseCode::OverLimit
    );
}

#[test]
fn a_protocol_runs_only_the_workloads_its_row_lists() {
    let limits = Limits::default();
    let mut crr = config(1);
    crr.workload = Workload::Crr;
    crr.rr = Some(linerate_model::RrConfig {
        request: 1,
        response: 1,
        outstanding: 1,
        rate_tps: None,
        busy_poll_us: None,
        cpus: Vec::new(),
        load: 0,
    });
    assert!(validate(&crr, &limits).is_ok());
    crr.protocol = linerate_model::Protocol::Udp;
    assert_eq!(
        validate(&crr, &limits).unwrap_err(),
        (RefuseCode::Invalid, "a udp test does not run crr".into())
    );
    let mut quic = config(1);
    quic.protocol = linerate_model::Protocol::Quic;
    quic.quic = Some(linerate_model::QuicSettings {
        connection_per_flow: false,
        workers: 1,
    });
    assert_eq!(
        validate(&quic, &limits).unwrap_err(),
        (
            RefuseCode::Invalid,
            "a quic test is encrypted: it needs TLS settings".into()
        )
    );
}

#[test]
fn a_server_failure_reaches_the_client_said_once() {
    let mut pair = Pair::new(PROTOCOL_VERSION, config(1));
    pair.exchange();
    pair.server.abort("the server is shutting down".into());
    pair.exchange();
    let failed = pair
        .client_events
        .iter()
        .find_map(|e| match e {
            ClientEvent::Failed(error) => Some(error.to_string()),
            _ => None,
        })
        .expect("the client hears why");
    assert_eq!(failed, "server error: the server is shutting down");
}

#[test]
fn a_client_may_end_a_running_test_early_and_still_gets_results() {
    let mut pair = Pair::new(PROTOCOL_VERSION, config(1));
    pair.exchange();
    pair.server.accept(pair.now, 1, Token([1; 16]));
    pair.exchange();
    pair.server.flows_ready(pair.now);
    pair.exchange();
    // Before the start there is nothing to end: the client sends nothing.
    pair.client.end();
    assert!(pair.client.poll_transmit().is_none());
    pair.client.start(pair.now);
    pair.exchange();
    pair.advance(Duration::from_secs(3));
    pair.client.end();
    pair.exchange();
    assert_eq!(pair.server_events.last(), Some(&ServerEvent::EndRequested));
    pair.server.finish(pair.now, SideResult::default());
    pair.exchange();
    assert!(pair
        .client_events
        .iter()
        .any(|e| matches!(e, ClientEvent::Results(_))));
    // An end that crosses the results on the way is no error.
    pair.client.end();
    pair.exchange();
    pair.client.done();
    pair.exchange();
    assert_eq!(
        pair.server_events.last(),
        Some(&ServerEvent::Closed(Ok(())))
    );
}

#[test]
fn quic_ports_offered_are_one_per_worker_and_no_more_than_asked() {
    let mut quic = config(4);
    quic.protocol = linerate_model::Protocol::Quic;
    quic.quic = Some(linerate_model::QuicSettings {
        connection_per_flow: false,
        workers: 2,
    });
    // An older server names one port; a newer one each worker's, the first its port.
    assert_eq!(quic_ports_offered(&quic, Some(7), vec![]), Ok(vec![7]));
    assert_eq!(
        quic_ports_offered(&quic, Some(7), vec![7, 9]),
        Ok(vec![7, 9])
    );
    let refused = [
        (None, vec![]),
        (Some(7), vec![7, 8, 9]),
        (Some(7), vec![8, 9]),
        (Some(7), vec![7, 0]),
    ];
    for (port, ports) in refused {
        assert!(
            quic_ports_offered(&quic, port, ports.clone()).is_err(),
            "{port:?} {ports:?}"
        );
    }
    // Not a QUIC test: nothing to check.
    assert_eq!(
        quic_ports_offered(&config(1), None, vec![1, 2, 3]),
        Ok(vec![])
    );
}

/// A video test's frames are bounded where the server reads them: UDP only, datagrams
/// that hold the frame fields, a frame rate and size within the limits.
#[test]
fn a_video_tests_frames_are_bounded_and_only_over_udp() {
    use linerate_model::video::VideoSettings;
    let limits = Limits::default();
    let mut c = config(1);
    c.video = Some(VideoSettings::parse("60:20m,1m").unwrap());
    assert!(validate(&c, &limits).unwrap_err().1.contains("UDP"));
    c.protocol = linerate_model::Protocol::Udp;
    c.length = 40;
    assert!(validate(&c, &limits)
        .unwrap_err()
        .1
        .contains("56-byte header"));
    c.length = 1200;
    assert!(validate(&c, &limits).is_ok());
    for forged in [
        VideoSettings {
            fps: 1e9,
            ..c.video.unwrap()
        },
        VideoSettings {
            fps: f64::NAN,
            ..c.video.unwrap()
        },
        VideoSettings {
            mean_bps: u64::MAX,
            ..c.video.unwrap()
        },
        VideoSettings {
            gap_us: u32::MAX,
            ..c.video.unwrap()
        },
    ] {
        c.video = Some(forged);
        let (code, why) = validate(&c, &limits).unwrap_err();
        assert_eq!(code, RefuseCode::Invalid, "{why}");
        assert!(why.starts_with("video frames: "), "{why}");
    }
}
