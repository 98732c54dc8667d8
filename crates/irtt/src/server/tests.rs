use super::*;
use crate::wire::{Clock, ReceivedStats, StampAt};

const MS: i64 = 1_000_000;

fn counter_tokens() -> Tokens {
    let mut next = 0x1000u64;
    Box::new(move || {
        next += 1;
        next
    })
}

fn client() -> SocketAddr {
    "192.0.2.7:40000".parse().unwrap()
}

fn at(ms: i64) -> Stamp {
    Stamp {
        wall: 1_700_000_000_000_000_000 + ms * MS,
        mono: ms * MS,
    }
}

fn asked(length: i64) -> Params {
    Params {
        protocol_version: 1,
        duration_ns: 10_000 * MS,
        interval_ns: 20 * MS,
        length,
        received_stats: ReceivedStats::BOTH,
        stamp_at: StampAt::BOTH,
        clock: Some(Clock::BOTH),
        dscp: 0,
        server_fill: String::new(),
    }
}

/// Opens a session as a client would; the granted parameters and the token.
fn open(server: &mut Server, from: SocketAddr, params: &Params, ms: i64) -> (Params, u64) {
    let mut request = Vec::new();
    wire::put_open(&mut request, flag::OPEN, None, params, None);
    let mut out = Vec::new();
    let decision = server.handle(
        &Arrival {
            from,
            bytes: &request,
            received: at(ms),
            now: at(ms),
        },
        &mut out,
    );
    let answer = decision.answer.expect("an open is answered");
    assert_eq!(answer.len, out.len());
    assert!(out.len() <= request.len() + OPEN_ANSWER_GROWTH);
    let head = wire::header(&out, None).unwrap();
    assert!(head.has(flag::OPEN) && head.has(flag::REPLY));
    let token = wire::le_u64(&out, head.body);
    (Params::parse(&out[head.body + 8..]).unwrap(), token)
}

/// An echo request as irtt's client builds one: its fields zeroed, padded to the length.
fn request(params: &Params, token: u64, seqno: u32) -> Vec<u8> {
    let layout = params.layout(false);
    let mut packet = vec![0u8; layout.end.max(params.length as usize)];
    packet[..3].copy_from_slice(&wire::MAGIC);
    packet[layout.token..layout.token + 8].copy_from_slice(&token.to_le_bytes());
    packet[layout.seqno..layout.seqno + 4].copy_from_slice(&seqno.to_le_bytes());
    packet
}

fn echo(
    server: &mut Server,
    from: SocketAddr,
    packet: &[u8],
    ms: i64,
    out: &mut Vec<u8>,
) -> Decision {
    server.handle(
        &Arrival {
            from,
            bytes: packet,
            received: at(ms),
            now: at(ms),
        },
        out,
    )
}

#[test]
fn an_echo_is_answered_at_its_own_length_with_the_counts_and_stamps_asked() {
    let mut server = Server::new(Config::default(), counter_tokens(), 0);
    let (params, token) = open(&mut server, client(), &asked(172), 0);
    assert_eq!(params, asked(172));
    let layout = params.layout(false);
    let mut out = Vec::new();
    for seqno in 0..3u32 {
        let packet = request(&params, token, seqno);
        let ms = 20 * (i64::from(seqno) + 1);
        let mut arrival = Arrival {
            from: client(),
            bytes: &packet,
            received: at(ms),
            now: at(ms),
        };
        arrival.now.wall += 7_000;
        arrival.now.mono += 7_000;
        let decision = server.handle(&arrival, &mut out);
        assert_eq!(decision.answer.unwrap().len, packet.len());
        assert_eq!(out.len(), 172);
        assert_eq!(out[3], flag::REPLY);
        assert_eq!(wire::le_u32(&out, layout.seqno), seqno);
        assert_eq!(wire::le_u32(&out, layout.count.unwrap()), seqno + 1);
        // Every request so far received: the low bits all set.
        assert_eq!(
            wire::le_u64(&out, layout.window.unwrap()),
            (1 << (seqno + 1)) - 1
        );
        assert_eq!(Layout::stamp(&out, layout.receive), arrival.received);
        assert_eq!(Layout::stamp(&out, layout.send), arrival.now);
        assert_eq!(&out[layout.end..layout.end + 4], b"irtt");
    }
}

#[test]
fn a_lost_request_shows_in_the_window_and_a_late_one_makes_it_unknown() {
    let mut server = Server::new(Config::default(), counter_tokens(), 0);
    let (params, token) = open(&mut server, client(), &asked(0), 0);
    let layout = params.layout(false);
    let mut out = Vec::new();
    let window = |out: &Vec<u8>| wire::le_u64(out, layout.window.unwrap());
    echo(
        &mut server,
        client(),
        &request(&params, token, 0),
        20,
        &mut out,
    );
    // Seqno 1 lost on the way.
    echo(
        &mut server,
        client(),
        &request(&params, token, 2),
        60,
        &mut out,
    );
    assert_eq!(window(&out), 0b101);
    // Seqno 1 arrives late: its bit is set, the answer says the window is not known.
    echo(
        &mut server,
        client(),
        &request(&params, token, 1),
        80,
        &mut out,
    );
    assert_eq!(window(&out), 0);
    echo(
        &mut server,
        client(),
        &request(&params, token, 3),
        100,
        &mut out,
    );
    assert_eq!(window(&out), 0b1111);
    assert_eq!(wire::le_u32(&out, layout.count.unwrap()), 4);
}

#[test]
fn the_midpoint_and_one_clock_are_stamped_as_asked() {
    let mut server = Server::new(Config::default(), counter_tokens(), 0);
    let mut mid = asked(0);
    mid.stamp_at = StampAt::MIDPOINT;
    mid.clock = Some(Clock::WALL);
    mid.received_stats = ReceivedStats::NONE;
    let (params, token) = open(&mut server, client(), &mid, 0);
    let layout = params.layout(false);
    assert_eq!(layout.end, 24);
    let packet = request(&params, token, 0);
    let mut out = Vec::new();
    let received = at(20);
    let now = at(21);
    server.handle(
        &Arrival {
            from: client(),
            bytes: &packet,
            received,
            now,
        },
        &mut out,
    );
    assert_eq!(out.len(), 24);
    let stamp = Layout::stamp(&out, layout.midpoint);
    assert_eq!(stamp.wall, received.wall + MS / 2);
    assert_eq!(stamp.mono, 0, "the monotonic clock was not asked");
}

#[test]
fn asked_parameters_are_granted_within_the_servers_bounds() {
    let config = Config {
        max_duration_ns: 30_000 * MS,
        ..Config::default()
    };
    let mut server = Server::new(config, counter_tokens(), 0);
    let mut greedy = asked(100_000);
    greedy.duration_ns = 3_600_000 * MS;
    greedy.interval_ns = 1_000;
    greedy.dscp = 4_096;
    greedy.server_fill = "pattern:00".into();
    let (granted, _) = open(&mut server, client(), &greedy, 0);
    assert_eq!(granted.duration_ns, 30_000 * MS);
    assert_eq!(granted.interval_ns, 10 * MS);
    assert_eq!(granted.length, MAX_LENGTH as i64);
    assert_eq!(granted.dscp, 0);
    assert_eq!(granted.server_fill, wire::DEFAULT_FILL);
    let mut rand = asked(0);
    rand.server_fill = "rand".into();
    assert_eq!(
        open(&mut server, client(), &rand, 200).0.server_fill,
        "rand"
    );
}

#[test]
fn requests_faster_than_the_interval_are_refused_after_a_burst() {
    let mut server = Server::new(Config::default(), counter_tokens(), 0);
    let (params, token) = open(&mut server, client(), &asked(0), 0);
    let mut out = Vec::new();
    let mut answered = 0;
    let mut refused = 0;
    // Twenty requests 1 ms apart, from 1 ms after the open: the burst of five and the
    // 1.9 intervals of 10 ms earned after it (the first 0.1 spills over the full bucket).
    for seqno in 0..20u32 {
        let d = echo(
            &mut server,
            client(),
            &request(&params, token, seqno),
            1 + i64::from(seqno),
            &mut out,
        );
        match d.refused {
            Some(Refusal::TooSoon) => refused += 1,
            None => answered += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((answered, refused), (6, 14));
}

#[test]
fn a_token_from_another_address_or_none_is_refused_and_a_close_ends_the_session() {
    let mut server = Server::new(Config::default(), counter_tokens(), 0);
    let (params, token) = open(&mut server, client(), &asked(0), 0);
    let mut out = Vec::new();
    let other: SocketAddr = "198.51.100.9:40000".parse().unwrap();
    let d = echo(
        &mut server,
        other,
        &request(&params, token, 0),
        20,
        &mut out,
    );
    assert_eq!(d.refused, Some(Refusal::WrongAddress));
    let d = echo(
        &mut server,
        client(),
        &request(&params, token ^ 1, 0),
        20,
        &mut out,
    );
    assert_eq!(d.refused, Some(Refusal::UnknownToken));
    echo(
        &mut server,
        client(),
        &request(&params, token, 0),
        40,
        &mut out,
    );
    let mut close = request(&params, token, 1);
    close[3] = flag::CLOSE;
    let d = echo(&mut server, client(), &close, 60, &mut out);
    assert_eq!(d, Decision::default());
    assert_eq!(server.sessions(), 0);
    let ended = server.take_ended();
    assert_eq!(ended.len(), 1);
    assert_eq!(
        (ended[0].received, ended[0].answered, ended[0].why),
        (1, 1, EndReason::Closed)
    );
}

#[test]
fn a_session_past_its_duration_is_answered_with_a_close_and_an_idle_one_ends() {
    let config = Config {
        max_duration_ns: 1_000 * MS,
        ..Config::default()
    };
    let mut server = Server::new(config, counter_tokens(), 0);
    let (params, token) = open(&mut server, client(), &asked(0), 0);
    let mut out = Vec::new();
    echo(
        &mut server,
        client(),
        &request(&params, token, 0),
        10,
        &mut out,
    );
    // 1 s of duration and 2 s of grace later.
    let d = echo(
        &mut server,
        client(),
        &request(&params, token, 1),
        3_100,
        &mut out,
    );
    assert!(d.answer.is_some());
    assert_eq!(out[3], flag::REPLY | flag::CLOSE);
    assert_eq!(server.take_ended()[0].why, EndReason::Duration);
    let (_, _) = open(&mut server, client(), &asked(0), 4_000);
    server.sweep(4_000 * MS + 66_000 * MS);
    assert_eq!(server.take_ended()[0].why, EndReason::Idle);
}

#[test]
fn a_full_table_or_a_sources_share_answers_the_open_with_a_close() {
    let config = Config {
        max_sessions: 3,
        max_sessions_per_source: 2,
        ..Config::default()
    };
    let mut server = Server::new(config, counter_tokens(), 0);
    let mut request = Vec::new();
    wire::put_open(&mut request, flag::OPEN, None, &asked(0), None);
    let mut out = Vec::new();
    let mut from = |ip: &str, ms: i64, server: &mut Server| {
        let d = server.handle(
            &Arrival {
                from: format!("{ip}:4000").parse().unwrap(),
                bytes: &request,
                received: at(ms),
                now: at(ms),
            },
            &mut out,
        );
        (d, out[3])
    };
    assert_eq!(from("192.0.2.1", 0, &mut server).0.refused, None);
    assert_eq!(from("192.0.2.1", 1, &mut server).0.refused, None);
    let (d, flags) = from("192.0.2.1", 2, &mut server);
    assert_eq!(d.refused, Some(Refusal::SourceFull));
    assert_eq!(flags, flag::OPEN | flag::REPLY | flag::CLOSE);
    assert_eq!(from("192.0.2.2", 3, &mut server).0.refused, None);
    assert_eq!(
        from("192.0.2.3", 4, &mut server).0.refused,
        Some(Refusal::Full)
    );
}

#[test]
fn opens_over_the_sources_rate_get_no_answer() {
    let mut server = Server::new(Config::default(), counter_tokens(), 0);
    let mut request = Vec::new();
    // An open that only asks whether the server answers: no session is kept.
    wire::put_open(
        &mut request,
        flag::OPEN | flag::CLOSE,
        None,
        &asked(0),
        None,
    );
    let mut out = Vec::new();
    let refused = (0..30)
        .filter(|i| {
            let d = echo(&mut server, client(), &request, *i, &mut out);
            d.refused == Some(Refusal::OpenRate)
        })
        .count();
    // Ten a second from one source, with a second's burst: 30 within 30 ms.
    assert_eq!(refused, 20);
    assert_eq!(server.sessions(), 0);
}

#[test]
fn another_protocol_version_is_answered_with_a_close() {
    let mut server = Server::new(Config::default(), counter_tokens(), 0);
    let mut old = asked(0);
    old.protocol_version = 2;
    let mut request = Vec::new();
    wire::put_open(&mut request, flag::OPEN, None, &old, None);
    let mut out = Vec::new();
    let d = echo(&mut server, client(), &request, 0, &mut out);
    assert!(d.answer.is_some());
    assert_eq!(out[3], flag::OPEN | flag::REPLY | flag::CLOSE);
    assert_eq!(server.sessions(), 0);
}

#[test]
fn a_keyed_server_answers_signed_packets_and_signs_its_answers() {
    let config = Config {
        key: Some(wire::HmacKey(b"shared".to_vec())),
        ..Config::default()
    };
    let mut server = Server::new(config, counter_tokens(), 0);
    let mut request = Vec::new();
    wire::put_open(&mut request, flag::OPEN, None, &asked(0), None);
    let mut out = Vec::new();
    let d = echo(&mut server, client(), &request, 0, &mut out);
    assert_eq!(d.refused, Some(Refusal::Malformed(WireError::NoHmac)));
    wire::put_open(&mut request, flag::OPEN, None, &asked(0), Some(b"shared"));
    let d = echo(&mut server, client(), &request, 1, &mut out);
    assert!(d.answer.is_some());
    let head = wire::header(&out, Some(b"shared")).expect("a signed answer");
    let token = wire::le_u64(&out, head.body);
    let layout = asked(0).layout(true);
    let mut packet = vec![0u8; layout.end];
    packet[..3].copy_from_slice(&wire::MAGIC);
    packet[layout.token..layout.token + 8].copy_from_slice(&token.to_le_bytes());
    wire::sign(&mut packet, b"shared");
    let d = echo(&mut server, client(), &packet, 30, &mut out);
    assert_eq!(d.answer.map(|a| a.len), Some(layout.end));
    wire::header(&out, Some(b"shared")).expect("a signed echo");
}

#[test]
fn replies_and_unanswerable_sources_are_refused() {
    let mut server = Server::new(Config::default(), counter_tokens(), 0);
    let mut request = Vec::new();
    wire::put_open(
        &mut request,
        flag::OPEN | flag::REPLY,
        None,
        &asked(0),
        None,
    );
    let mut out = Vec::new();
    let d = echo(&mut server, client(), &request, 0, &mut out);
    assert_eq!(d.refused, Some(Refusal::NotARequest));
    wire::put_open(&mut request, flag::OPEN, None, &asked(0), None);
    let zero: SocketAddr = "192.0.2.7:0".parse().unwrap();
    assert_eq!(
        echo(&mut server, zero, &request, 0, &mut out).refused,
        Some(Refusal::Unanswerable)
    );
}

mod property {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever arrives, an answer is never longer than what came, except an open's
        /// (by its token and granted parameters), and nothing panics.
        #[test]
        fn no_answer_outgrows_its_request(
            packets in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..40),
            magic in any::<bool>(),
        ) {
            let mut server = Server::new(Config::default(), counter_tokens(), 0);
            let mut out = Vec::new();
            for (i, mut packet) in packets.into_iter().enumerate() {
                if magic && packet.len() >= 4 {
                    packet[..3].copy_from_slice(&wire::MAGIC);
                }
                let d = echo(&mut server, client(), &packet, i as i64 * 20, &mut out);
                if let Some(answer) = d.answer {
                    let open = packet[3] & flag::OPEN != 0;
                    let allowed = packet.len() + if open { OPEN_ANSWER_GROWTH } else { 0 };
                    prop_assert!(answer.len <= allowed);
                }
            }
        }
    }
}

#[test]
fn every_refusal_has_its_own_label_in_snake_case() {
    let labels: std::collections::BTreeSet<&str> = Refusal::ALL.iter().map(|r| r.label()).collect();
    assert_eq!(labels.len(), Refusal::ALL.len());
    for label in labels {
        assert!(
            label.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
            "{label}"
        );
    }
}
