//! Property tests over every parser of untrusted input, a fixed number of cases each, run
//! by `cargo test` (and so by `scripts/test`): the native control sessions, the agent
//! protocol and authentication, iperf3's parameters, results and session, and the datagram
//! headers. Each input is random bytes or a valid message with bytes changed. A case fails
//! on a panic, on a session left open with nothing to wait for, or on memory grown past a
//! bound while it ran (counted by the allocator below, per thread).

use linerate_model::HostFacts;
use linerate_proto::agent::{AgentReply, AgentRequest};
use linerate_proto::auth::{Key, Nonce, ServerAuth};
use linerate_proto::datagram::{self, Framing, SequenceTracker};
use linerate_proto::iperf3::auth::{parse_credentials, parse_users};
use linerate_proto::iperf3::client::Iperf3Client;
use linerate_proto::iperf3::server::Iperf3Server;
use linerate_proto::iperf3::{Params, Results};
use linerate_proto::Machine;
use linerate_proto::{
    preface, ClientMessage, ClientSession, Limits, ServerMessage, ServerSession, Timeouts,
    PROTOCOL_VERSION,
};
use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};

/// Bytes this thread holds, and the most it held since the mark.
struct Counting;

thread_local! {
    static HELD: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(delta: isize) {
    let _ = HELD.try_with(|held| {
        let now = held.get() + delta;
        held.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every call goes to the system allocator unchanged; only sizes are counted.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize);
        // SAFETY: forwarded as received.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-(layout.size() as isize));
        // SAFETY: forwarded as received.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size as isize - layout.size() as isize);
        // SAFETY: forwarded as received.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `case` and returns the most memory it held at once beyond what was held before.
fn peak_of(case: impl FnOnce()) -> isize {
    let base = HELD.with(Cell::get);
    PEAK.with(|p| p.set(base));
    case();
    PEAK.with(Cell::get) - base
}

/// The most a case may hold: inputs are at most 64 KiB, and no parser should need more
/// than a small multiple of its input plus its fixed state.
const MEMORY_BOUND: isize = 8 << 20;

fn config() -> Cases {
    Cases(ProptestConfig {
        cases: 1000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })
}

struct Cases(ProptestConfig);

/// Random bytes, or a valid sample with some bytes overwritten, truncated or extended.
fn mutated(samples: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let random = prop::collection::vec(any::<u8>(), 0..4096);
    let edited = (
        prop::sample::select(samples),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
        any::<prop::sample::Index>(),
        prop::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(mut sample, edits, cut, tail)| {
            if !sample.is_empty() {
                for (at, byte) in edits {
                    let i = at.index(sample.len());
                    sample[i] = byte;
                }
                sample.truncate(cut.index(sample.len() + 1));
            }
            sample.extend(tail);
            sample
        });
    prop_oneof![random, edited]
}

fn json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap()
}

fn framed<T: serde::Serialize>(value: &T) -> Vec<u8> {
    linerate_proto::message::encode(value)
}

#[allow(clippy::disallowed_methods)] // the virtual clock's origin; only offsets matter
fn origin() -> Instant {
    Instant::now()
}

fn sample_config() -> linerate_model::TestConfig {
    serde_json::from_value(serde_json::json!({
        "protocol": "tcp", "target": "t", "port": 5201, "direction": "forward",
        "parallel": 2, "threads": 1, "time_s": 1.0, "omit_s": 0.0, "interval_s": 1.0,
        "length": 131072, "window": null, "mss": null, "nodelay": false,
        "congestion": null, "rate_bps": null, "per_flow": false, "connect_timeout_s": 5.0
    }))
    .unwrap()
}

/// Drives a server session with `input` after a valid preface, and after the deadline:
/// it must end closed, whatever the input.
fn drive_server(input: &[u8], keyed: bool) {
    let now = origin();
    let mut server = ServerSession::new(
        now,
        Limits::default(),
        "s".into(),
        HostFacts::default(),
        Timeouts::default(),
    );
    if keyed {
        let key = Key::from_file_contents(b"a key of sixteen bytes or more").unwrap();
        server = server.with_key(key, Nonce([5; 32]));
    }
    server.handle_input(now, &preface::control_preface(PROTOCOL_VERSION));
    for chunk in input.chunks(997) {
        server.handle_input(now, chunk);
    }
    while server.poll_transmit().is_some() {}
    while server.poll_event().is_some() {}
    let late = now + Duration::from_secs(3600);
    server.handle_timeout(late);
    if !server.is_closed() {
        // Waiting for the driver's answer to a test request, which has no deadline of
        // its own: refusing must close it.
        server.refuse(linerate_proto::RefuseCode::Busy, "test".into());
    }
    assert!(server.is_closed());
}

proptest! {
    #![proptest_config(config().0)]

    #[test]
    fn native_server_session(input in mutated(vec![
        framed(&ClientMessage::Hello { software: "x".into(), host: HostFacts::default(), nonce: Some("ab".repeat(32)), pake: Some(format!("41{}", "ab".repeat(32))) }),
        [framed(&ClientMessage::Hello { software: "x".into(), host: HostFacts::default(), nonce: None, pake: None }),
         framed(&ClientMessage::Spec { config: Box::new(sample_config()) })].concat(),
        framed(&ClientMessage::Auth { proof: "00".repeat(32) }),
    ]), keyed in any::<bool>()) {
        let peak = peak_of(|| drive_server(&input, keyed));
        prop_assert!(peak < MEMORY_BOUND, "held {peak} bytes");
    }

    #[test]
    fn native_client_session(input in mutated(vec![
        framed(&ServerMessage::Welcome { version: PROTOCOL_VERSION, software: "s".into(), host: HostFacts::default(), limits: Limits::default(), auth: None }),
        framed(&ServerMessage::Refuse { code: linerate_proto::RefuseCode::Busy, reason: "r".into() }),
        framed(&ServerMessage::Accepted { host: None, test_id: 1, token: "00".repeat(16), udp_ports: vec![1, 2], crr_port: None, tls_fingerprint: None, quic_port: None, quic_ports: vec![] }),
        framed(&ServerMessage::Accepted { host: None, test_id: 1, token: "00".repeat(16), udp_ports: vec![], crr_port: None, tls_fingerprint: Some("ab".repeat(32)), quic_port: Some(4433), quic_ports: vec![4433, 4434] }),
    ])) {
        let peak = peak_of(|| {
            let now = origin();
            let mut client = ClientSession::new(now, PROTOCOL_VERSION, HostFacts::default(), sample_config(), Timeouts::default());
            for chunk in input.chunks(1201) {
                client.handle_input(now, chunk);
            }
            while client.poll_transmit().is_some() {}
            while client.poll_event().is_some() {}
            client.handle_timeout(now + Duration::from_secs(3600));
        });
        prop_assert!(peak < MEMORY_BOUND, "held {peak} bytes");
    }

    #[test]
    fn preface_classification(input in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = preface::classify(&input);
    }

    #[test]
    fn agent_messages_and_authentication(input in mutated(vec![
        json(&AgentRequest::Hello { nonce: Some("cd".repeat(32)), pake: Some(format!("41{}", "cd".repeat(32))) }),
        json(&AgentRequest::Auth { proof: "11".repeat(32) }),
        json(&AgentRequest::Prepare { parts: vec![], limit_s: linerate_proto::agent::Seconds::new(5.0).unwrap() }),
        json(&AgentRequest::Start { at_unix_ns: 5 }),
        json(&AgentReply::Welcome { version: 3, host: HostFacts::default(), auth: None }),
        json(&AgentRequest::Source { kind: "trace".to_string().try_into().unwrap(), spec: serde_json::json!({"target": "192.0.2.1", "probe": "udp", "flows": 4, "max_hops": 30}), heartbeat_s: None, source: None }),
    ])) {
        let peak = peak_of(|| {
            let _ = serde_json::from_slice::<AgentRequest>(&input);
            let _ = serde_json::from_slice::<AgentReply>(&input);
            let text = String::from_utf8_lossy(&input);
            let key = Key::from_file_contents(b"a key of sixteen bytes or more").unwrap();
            let mut auth = ServerAuth::new(key, Nonce([1; 32]));
            // Any text as the nonce and as the SPAKE2 message: refused or answered, and a
            // proof made of the same text never passes.
            let _ = auth.handle_hello(Some(&text), Some(&text), b"fuzz");
            let _ = auth.handle_hello(Some(&"cd".repeat(32)), Some(&text), b"fuzz");
            assert!(auth.handle_proof(&text).is_err());
            let _ = Key::from_file_contents(&input);
        });
        prop_assert!(peak < MEMORY_BOUND, "held {peak} bytes");
    }

    #[test]
    fn agent_session(input in mutated(vec![
        framed(&AgentRequest::Hello { nonce: Some("cd".repeat(32)), pake: Some(format!("41{}", "cd".repeat(32))) }),
        [framed(&AgentRequest::Hello { nonce: None, pake: None }), framed(&AgentRequest::Ping { seq: 1 })].concat(),
        framed(&AgentRequest::Auth { proof: "11".repeat(32) }),
    ]), keyed in any::<bool>()) {
        let peak = peak_of(|| {
            let now = origin();
            let timeouts = linerate_proto::agent_session::AgentTimeouts {
                handshake: Duration::from_secs(10),
                idle: Duration::from_secs(120),
            };
            let mut agent = linerate_proto::agent_session::AgentSession::new(
                now,
                linerate_proto::agent::AGENT_VERSION,
                HostFacts::default(),
                timeouts,
            );
            if keyed {
                let key = Key::from_file_contents(b"a key of sixteen bytes or more").unwrap();
                agent = agent.with_key(key, Nonce([6; 32]));
            }
            for chunk in input.chunks(509) {
                agent.handle_input(now, chunk);
            }
            while agent.poll_transmit().is_some() {}
            while agent.poll_event().is_some() {}
            agent.handle_timeout(now + Duration::from_secs(3600));
            assert!(agent.is_closed(), "every deadline ends a silent connection");
        });
        prop_assert!(peak < MEMORY_BOUND, "held {peak} bytes");
    }

    #[test]
    fn iperf3_parameters_and_results(input in mutated(vec![
        br#"{"tcp":true,"omit":0,"time":10,"num":0,"blockcount":0,"parallel":1,"len":131072,"pacing_timer":1000,"client_version":"3.12"}"#.to_vec(),
        br#"{"udp":true,"time":5,"len":1448,"bandwidth":1048576,"authtoken":"AAAA","use_pkcs1_padding":true}"#.to_vec(),
        br#"{"cpu_util_total":1.5,"cpu_util_user":1,"cpu_util_system":0.5,"sender_has_retransmits":1,"streams":[{"id":1,"bytes":100,"retransmits":0,"jitter":0,"errors":0,"packets":0,"start_time":0,"end_time":1}]}"#.to_vec(),
    ])) {
        let peak = peak_of(|| {
            let _ = Params::from_json(&input);
            let _ = Results::from_json(&input);
            let text = String::from_utf8_lossy(&input);
            let _ = parse_credentials(&text);
            let _ = parse_users(&text);
        });
        prop_assert!(peak < MEMORY_BOUND, "held {peak} bytes");
    }

    #[test]
    fn iperf3_sessions(input in mutated(vec![
        [b"abcdefghijklmnopqrstuvwxyz234567abcd\0".to_vec(), 9u32.to_be_bytes().to_vec(), b"{\"tcp\":1}".to_vec()].concat(),
        vec![9, 1, 2, 4, 13, 14, 16],
    ])) {
        let peak = peak_of(|| {
            let now = origin();
            let mut server = Iperf3Server::new(now);
            let mut client = Iperf3Client::new(now, *b"abcdefghijklmnopqrstuvwxyz234567abcd\0", Params::default());
            for chunk in input.chunks(613) {
                server.handle_input(now, chunk);
                client.handle_input(now, chunk);
            }
            while server.poll_event().is_some() {}
            while client.poll_event().is_some() {}
        });
        prop_assert!(peak < MEMORY_BOUND, "held {peak} bytes");
    }

    #[test]
    fn datagram_headers(input in mutated(vec![
        datagram::hello(&[3; 16], 2).to_vec(),
        {
            let mut d = vec![0u8; 64];
            datagram::write_header(&mut d, 7, 99, 1, 5);
            d
        },
    ])) {
        let _ = datagram::parse_hello(&input);
        let _ = datagram::read_header(&input);
        for framing in [Framing::Native { tag: 5 }, Framing::Iperf3 { wide: false }, Framing::Iperf3 { wide: true }, Framing::Iperf2] {
            let _ = framing.read(&input);
            let _ = framing.is_final(&input);
            let mut tracker = SequenceTracker::new(1, framing);
            tracker.record(&input, 10);
            tracker.record(&input, 5);
            let _ = tracker.counts();
        }
    }

    /// A multicast group's accounting fed anything from a handful of senders: it never
    /// panics, holds no more senders than its bound, and every stream it ends adds up
    /// (received and lost are what the sender sent, as far as the receiver can tell).
    #[test]
    fn multicast_group_accounting(
        datagrams in proptest::collection::vec(
            (0u16..80, proptest::collection::vec(any::<u8>(), 0..40), 0u64..10_000),
            0..200,
        )
    ) {
        use linerate_proto::multicast::{GroupReceiver, MAX_SENDERS};
        let join = linerate_model::multicast::Join::parse("239.1.1.1").unwrap();
        let mut group = GroupReceiver::new(join, 5001, 0, 1_000_000, true);
        let mut ended = Vec::new();
        let mut mono = 0u64;
        for (port, bytes, step) in datagrams {
            mono += step;
            let from = std::net::SocketAddr::from(([10, 0, 0, 1], port));
            ended.extend(group.datagram(from, &bytes, mono, mono));
            ended.extend(group.tick(mono));
            prop_assert!(group.streams_on() <= MAX_SENDERS);
        }
        ended.extend(group.stop(mono + 1));
        for stream in ended {
            prop_assert_eq!(stream.datagrams + stream.lost, stream.expected);
            prop_assert!(stream.loss_percent >= 0.0 && stream.loss_percent <= 100.0);
        }
    }
}
