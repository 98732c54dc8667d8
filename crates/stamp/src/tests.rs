//! The codec, the reflector and the sender's figures against each other and against what
//! RFC 8762 and RFC 8972 say, with time injected; property tests over any bytes.

// A benchmark or test times itself on the wall clock.
#![allow(clippy::disallowed_methods)]

use crate::reflector::{Arrival, Config, Reflector, Refusal};
use crate::tally::{Reply, Settings, Tally};
use crate::wire::{self, tlv, ErrorEstimate, Key, Mode, TestPacket, Timestamp, WireError};
use proptest::prelude::*;
use std::net::SocketAddr;

const UNIX_2026: i128 = 1_795_000_000_000_000_000;

fn key() -> Key {
    Key::from_text(b"00112233445566778899aabbccddeeff").unwrap()
}

fn probe(seq: u32, mode: Mode, key: Option<&Key>, request: &tlv::Request) -> Vec<u8> {
    let packet = TestPacket {
        seq,
        timestamp: Timestamp::ntp_from_unix_ns(UNIX_2026 + i128::from(seq) * 1_000_000),
        error: ErrorEstimate::new(false, false, 0.001),
        ssid: 7,
    };
    let mut tlvs = Vec::new();
    request.encode(seq + 1, &seq.to_be_bytes(), key, &mut tlvs);
    let mut out = Vec::new();
    wire::encode_test(&packet, mode, key, &tlvs, &mut out);
    out
}

fn arrival<'a>(from: &str, bytes: &'a [u8], now_ns: u64) -> Arrival<'a> {
    Arrival {
        from: from.parse().unwrap(),
        bytes,
        received: Timestamp::ntp_from_unix_ns(UNIX_2026 + 500_000),
        now: Timestamp::ntp_from_unix_ns(UNIX_2026 + 510_000),
        now_ns,
        tos: 46 << 2,
        ttl: 62,
    }
}

fn all_tlvs() -> tlv::Request {
    tlv::Request {
        padding: 20,
        class_of_service: Some(34),
        direct_measurement: true,
        hmac: false,
    }
}

/// NTP timestamps carry nanoseconds to within one (a fraction is 0.23 ns), PTP ones
/// exactly; both read back as the Unix time they were made from, past 2036's era too.
#[test]
fn timestamps_read_back_as_written() {
    for ns in [
        UNIX_2026,
        UNIX_2026 + 999_999_999,
        2_200_000_000_000_000_000,
    ] {
        let ntp = Timestamp::ntp_from_unix_ns(ns).unix_ns(false);
        assert!((ntp - ns).abs() <= 1, "{ns}: {ntp}");
        assert_eq!(Timestamp::ptp_from_unix_ns(ns).unix_ns(true), ns);
    }
}

/// An error estimate holds at least the error it was made for, within 1 % above it; the
/// S and Z bits are where RFC 8762 puts them; the multiplier is never zero.
#[test]
fn error_estimates_bound_the_error_given() {
    for error in [0.0, 1e-9, 1e-6, 0.000_150, 0.001, 0.016, 1.0, 16.0] {
        let e = ErrorEstimate::new(true, false, error);
        assert!(e.error_s() >= error, "{error}: {}", e.error_s());
        assert!(
            e.error_s() <= error * 1.01 + 2.4e-10,
            "{error}: {}",
            e.error_s()
        );
        assert!(e.synchronised() && !e.ptp());
        assert_ne!(e.0 & 0xff, 0);
    }
    assert_eq!(ErrorEstimate::new(false, true, 0.0).0 & 0xc000, 0x4000);
}

/// Both layouts: a test packet and an answer read back field for field; a packet signed
/// with another key, or changed after signing, is refused as failing its HMAC.
#[test]
fn packets_read_back_and_a_wrong_key_is_refused() {
    for mode in [Mode::Open, Mode::Authenticated] {
        let key = key();
        let k = (mode == Mode::Authenticated).then_some(&key);
        let bytes = probe(41, mode, k, &tlv::Request::default());
        assert_eq!(bytes.len(), mode.base_len());
        let test = wire::decode_test(&bytes, mode, k).unwrap();
        assert_eq!((test.seq, test.ssid), (41, 7));
        let mut reflector = Reflector::new(
            Config {
                key: k.cloned(),
                ..Config::default()
            },
            0,
        );
        let mut out = Vec::new();
        let answer = reflector
            .reflect(&arrival("192.0.2.1:5000", &bytes, 1), &mut out)
            .unwrap();
        assert_eq!(answer.mode, mode);
        let reflected = wire::decode_reflected(&out, mode, k).unwrap();
        assert_eq!(reflected.sender_seq, 41);
        assert_eq!(reflected.seq, 0, "the reflector's own count starts at 0");
        assert_eq!(reflected.sender_timestamp, test.timestamp);
        assert_eq!(reflected.sender_ttl, 62);
        assert_eq!(reflected.ssid, 7);
        if mode == Mode::Authenticated {
            let other = Key::from_text(b"ffeeddccbbaa99887766554433221100").unwrap();
            assert_eq!(
                wire::decode_reflected(&out, mode, Some(&other)),
                Err(WireError::Integrity)
            );
            let mut changed = out.clone();
            changed[4] ^= 1;
            assert_eq!(
                wire::decode_reflected(&changed, mode, Some(&key)),
                Err(WireError::Integrity)
            );
        }
    }
}

/// RFC 8972's TLVs as the reflector fills them: Class of Service gets the DSCP and ECN
/// the probe arrived with (EF here) and keeps the DSCP asked (AF41), which the answer
/// leaves with; Direct Measurement the session's counts; padding comes back as sent; the
/// answer is exactly as long as the probe.
#[test]
fn the_reflector_fills_in_class_of_service_and_its_counts() {
    let mut reflector = Reflector::new(Config::default(), 0);
    let mut out = Vec::new();
    for seq in 0..3 {
        let bytes = probe(seq, Mode::Open, None, &all_tlvs());
        let answer = reflector
            .reflect(&arrival("192.0.2.1:5000", &bytes, 1), &mut out)
            .unwrap();
        assert_eq!(answer.len, bytes.len());
        assert_eq!(out.len(), bytes.len());
        assert_eq!(answer.tos, 34 << 2);
        let read = tlv::Answer::read(&out[wire::OPEN_BASE..], &out[..4], None);
        let cos = read.class_of_service.unwrap();
        assert_eq!(
            (cos.asked_dscp, cos.received_dscp, cos.received_ecn),
            (34, 46, 0)
        );
        let dm = read.direct_measurement.unwrap();
        assert_eq!(dm.sender_sent, seq + 1);
        assert_eq!(
            (dm.reflector_received, dm.reflector_sent),
            (seq + 1, seq + 1)
        );
        assert!(read.unrecognized.is_empty() && !read.malformed);
    }
}

/// An unknown type comes back flagged U, a Class of Service TLV of the wrong length M,
/// and a length that overruns the packet M at its header; nothing is lengthened.
#[test]
fn unknown_and_malformed_tlvs_are_flagged_not_answered_longer() {
    let mut area = vec![0, 200, 0, 2, 9, 9]; // type 200, two octets
    area.extend([0, tlv::CLASS_OF_SERVICE, 0, 2, 0, 0]); // CoS of two octets: malformed
    area.extend([0, tlv::EXTRA_PADDING, 0, 50, 0]); // claims 50, has 1
    let base = probe(0, Mode::Open, None, &tlv::Request::default());
    let bytes = [base.clone(), area.clone()].concat();
    let mut reflector = Reflector::new(Config::default(), 0);
    let mut out = Vec::new();
    reflector
        .reflect(&arrival("192.0.2.1:5000", &bytes, 1), &mut out)
        .unwrap();
    assert_eq!(out.len(), bytes.len());
    let reflected = &out[wire::OPEN_BASE..];
    assert_eq!(reflected[0], tlv::U);
    assert_eq!(reflected[6], tlv::M);
    assert_eq!(reflected[12], tlv::M);
    let read = tlv::Answer::read(reflected, &out[..4], None);
    assert_eq!(read.unrecognized, vec![200]);
    assert!(read.malformed);
}

/// The HMAC TLV (RFC 8972 §4.8): the reflector checks the probe's and signs the answer's
/// over the answer's sequence number and the TLVs before it, which the sender verifies;
/// a probe whose TLVs were changed after signing gets the I flag back.
#[test]
fn the_hmac_tlv_is_checked_and_signed_again() {
    let key = key();
    let request = tlv::Request {
        hmac: true,
        direct_measurement: true,
        ..tlv::Request::default()
    };
    let mut reflector = Reflector::new(
        Config {
            key: Some(key.clone()),
            ..Config::default()
        },
        0,
    );
    let bytes = probe(5, Mode::Authenticated, Some(&key), &request);
    let mut out = Vec::new();
    reflector
        .reflect(&arrival("192.0.2.1:5000", &bytes, 1), &mut out)
        .unwrap();
    let read = tlv::Answer::read(&out[wire::AUTH_BASE..], &out[..4], Some(&key));
    assert!(!read.integrity_failed, "{read:?}");
    assert_eq!(read.direct_measurement.unwrap().reflector_received, 1);

    let mut tampered = bytes.clone();
    tampered[wire::AUTH_BASE + tlv::HEADER] ^= 1; // the Direct Measurement's S_TxC
    reflector
        .reflect(&arrival("192.0.2.1:5000", &tampered, 2), &mut out)
        .unwrap();
    let read = tlv::Answer::read(&out[wire::AUTH_BASE..], &out[..4], Some(&key));
    assert!(read.integrity_failed);
}

/// With --stamp-authenticated-only an open probe is refused as unauthenticated, and one of
/// an authenticated size with a wrong HMAC as failing it; with a key but open packets
/// allowed, an open probe is answered open.
#[test]
fn authenticated_only_refuses_open_probes() {
    let config = Config {
        key: Some(key()),
        authenticated_only: true,
        ..Config::default()
    };
    let mut reflector = Reflector::new(config.clone(), 0);
    let mut out = Vec::new();
    let open = probe(0, Mode::Open, None, &tlv::Request::default());
    assert_eq!(
        reflector.reflect(&arrival("192.0.2.1:5000", &open, 1), &mut out),
        Err(Refusal::Unauthenticated)
    );
    let other = Key::from_text(b"ffeeddccbbaa99887766554433221100").unwrap();
    let forged = probe(
        0,
        Mode::Authenticated,
        Some(&other),
        &tlv::Request::default(),
    );
    assert_eq!(
        reflector.reflect(&arrival("192.0.2.1:5000", &forged, 1), &mut out),
        Err(Refusal::Malformed(WireError::Integrity))
    );
    let mut lenient = Reflector::new(
        Config {
            authenticated_only: false,
            ..config
        },
        0,
    );
    let answer = lenient
        .reflect(&arrival("192.0.2.1:5000", &open, 1), &mut out)
        .unwrap();
    assert_eq!(answer.mode, Mode::Open);
}

/// The source's rate and the total rate, on injected time: a source gets its second's
/// packets and no more until time passes; an IPv6 source is counted by its /64, so a
/// host drawing new addresses from its prefix gains nothing; the total caps everybody.
#[test]
fn rates_are_capped_per_source_and_in_total() {
    let mut reflector = Reflector::new(
        Config {
            per_source_pps: 5,
            total_pps: 12,
            ..Config::default()
        },
        0,
    );
    let bytes = probe(0, Mode::Open, None, &tlv::Request::default());
    let mut out = Vec::new();
    let mut answered = |from: &str, now_ns: u64, r: &mut Reflector| {
        r.reflect(&arrival(from, &bytes, now_ns), &mut out)
    };
    for _ in 0..5 {
        answered("192.0.2.1:5000", 1, &mut reflector).unwrap();
    }
    assert_eq!(
        answered("192.0.2.1:5001", 1, &mut reflector),
        Err(Refusal::SourceRate)
    );
    for i in 0..5 {
        answered(&format!("[2001:db8::{i}]:5000"), 1, &mut reflector).unwrap();
    }
    assert_eq!(
        answered("[2001:db8::ff]:5000", 1, &mut reflector),
        Err(Refusal::SourceRate)
    );
    // 10 answered, 12 in total a second: two more from a third source, then none.
    answered("198.51.100.1:5000", 1, &mut reflector).unwrap();
    answered("198.51.100.1:5000", 1, &mut reflector).unwrap();
    assert_eq!(
        answered("198.51.100.2:5000", 1, &mut reflector),
        Err(Refusal::TotalRate)
    );
    // A second later every bucket is full again.
    answered("192.0.2.1:5000", 1_000_000_001, &mut reflector).unwrap();
}

/// A full session table refuses a new sender, keeps the senders it has (a flood of forged
/// sources cannot take a measuring sender's counts away), and gives a place to a new one
/// once an old one has been silent for the idle time.
#[test]
fn a_full_session_table_refuses_newcomers_until_one_is_idle() {
    let mut reflector = Reflector::new(
        Config {
            max_sessions: 2,
            session_idle_ns: 60_000_000_000,
            ..Config::default()
        },
        0,
    );
    let bytes = probe(0, Mode::Open, None, &tlv::Request::default());
    let mut out = Vec::new();
    let mut go = |from: &str, now: u64, r: &mut Reflector| {
        r.reflect(&arrival(from, &bytes, now), &mut out)
            .map(|_| wire::decode_reflected(&out, Mode::Open, None).unwrap().seq)
    };
    assert_eq!(go("192.0.2.1:1", 1, &mut reflector), Ok(0));
    assert_eq!(go("192.0.2.2:1", 1, &mut reflector), Ok(0));
    assert_eq!(go("192.0.2.3:1", 2, &mut reflector), Err(Refusal::Full));
    assert_eq!(
        go("192.0.2.1:1", 3, &mut reflector),
        Ok(1),
        "kept its count"
    );
    assert_eq!(reflector.sessions(), 2);
    // 192.0.2.2 silent a minute: its place goes to the newcomer.
    assert_eq!(go("192.0.2.1:1", 61_000_000_000, &mut reflector), Ok(2));
    assert_eq!(go("192.0.2.3:1", 61_000_000_001, &mut reflector), Ok(0));
}

/// One source cannot hold the table: at its share it is refused (and only it), a new
/// sender elsewhere is still answered, and once its sessions go idle it may open more.
#[test]
fn one_source_holds_at_most_its_share_of_the_sessions() {
    let mut reflector = Reflector::new(
        Config {
            max_sessions: 16,
            max_sessions_per_source: 4,
            session_idle_ns: 60_000_000_000,
            ..Config::default()
        },
        0,
    );
    let mut out = Vec::new();
    let mut go = |from: &str, ssid: u16, now: u64, r: &mut Reflector| {
        let mut bytes = probe(0, Mode::Open, None, &tlv::Request::default());
        bytes[14..16].copy_from_slice(&ssid.to_be_bytes());
        r.reflect(&arrival(from, &bytes, now), &mut out).map(|_| ())
    };
    // Four sessions (port and SSID) from one address, then a fifth is refused.
    for ssid in 0..4u16 {
        go("192.0.2.1:7", ssid, 1, &mut reflector).unwrap();
    }
    assert_eq!(
        go("192.0.2.1:8", 9, 2, &mut reflector),
        Err(Refusal::SourceSessions)
    );
    // An IPv6 source is its /64: other addresses of the prefix share its share.
    for host in 1..=4 {
        go(&format!("[2001:db8::{host}]:7"), 0, 3, &mut reflector).unwrap();
    }
    assert_eq!(
        go("[2001:db8::ff]:7", 0, 4, &mut reflector),
        Err(Refusal::SourceSessions)
    );
    // Its live sessions are answered; a newcomer from elsewhere too.
    go("192.0.2.1:7", 2, 5, &mut reflector).unwrap();
    go("198.51.100.9:7", 0, 6, &mut reflector).unwrap();
    // A minute later the first source's sessions are idle: it may open new ones.
    go("192.0.2.1:9", 0, 61_000_000_006, &mut reflector).unwrap();
    assert!(reflector.sessions() <= 16);
}

/// Sources no answer can go to are refused before anything is spent on them.
#[test]
fn sources_that_cannot_be_answered_are_refused() {
    let mut reflector = Reflector::new(Config::default(), 0);
    let bytes = probe(0, Mode::Open, None, &tlv::Request::default());
    let mut out = Vec::new();
    for from in [
        "192.0.2.1:0",
        "0.0.0.0:5000",
        "224.0.0.1:5000",
        "255.255.255.255:5000",
        "[::]:5000",
        "[ff02::1]:5000",
        "[::ffff:224.0.0.1]:5000",
        "[2001:db8::1]:0",
    ] {
        assert_eq!(
            reflector
                .reflect(&arrival(from, &bytes, 1), &mut out)
                .map(|_| ()),
            Err(Refusal::Unanswerable),
            "{from}"
        );
    }
    assert_eq!(reflector.sessions(), 0);
    reflector
        .reflect(&arrival("192.0.2.1:5000", &bytes, 1), &mut out)
        .unwrap();
}

/// TWAMP-light's 14-octet probes: refused as short by default (no answer longer than
/// its probe), answered with RFC 5357's 41-octet reply under `twamp_light_pps`, their
/// sequence number, timestamp and error echoed, at most the rate a second; and a
/// TWAMP-light responder's 38-octet answer (no Sender TTL) reads back field by field.
#[test]
fn twamp_light_probes_are_answered_only_when_asked_and_within_their_rate() {
    let probe = {
        let mut p = [0u8; wire::TWAMP_LIGHT_TEST];
        p[..4].copy_from_slice(&7u32.to_be_bytes());
        p[4..12].copy_from_slice(&Timestamp::ntp_from_unix_ns(UNIX_2026).0.to_be_bytes());
        p[12..14].copy_from_slice(&0x8001u16.to_be_bytes());
        p
    };
    let mut out = Vec::new();
    let mut closed = Reflector::new(Config::default(), 0);
    assert_eq!(
        closed
            .reflect(&arrival("192.0.2.1:5000", &probe, 1), &mut out)
            .map(|_| ()),
        Err(Refusal::Malformed(WireError::Short))
    );
    let mut open = Reflector::new(
        Config {
            twamp_light_pps: Some(3),
            ..Config::default()
        },
        0,
    );
    let answer = open
        .reflect(&arrival("192.0.2.1:5000", &probe, 1), &mut out)
        .unwrap();
    assert_eq!(answer.len, wire::TWAMP_LIGHT_REFLECTED);
    assert_eq!(out.len(), 41);
    let read = wire::decode_reflected_short(&out[..wire::TWAMP_LIGHT_NO_TTL]).unwrap();
    assert_eq!(read.sender_seq, 7);
    assert_eq!(
        read.sender_timestamp,
        Timestamp::ntp_from_unix_ns(UNIX_2026)
    );
    assert_eq!(read.sender_error.0, 0x8001);
    assert_eq!(
        read.receive,
        Timestamp::ntp_from_unix_ns(UNIX_2026 + 500_000)
    );
    assert_eq!(read.sender_ttl, 0, "no TTL in 38 octets");
    assert_eq!(wire::decode_reflected_short(&out).unwrap().sender_ttl, 62);
    // Three a second, then refused until the bucket fills again.
    open.reflect(&arrival("192.0.2.1:5000", &probe, 2), &mut out)
        .unwrap();
    open.reflect(&arrival("192.0.2.2:5000", &probe, 3), &mut out)
        .unwrap();
    assert_eq!(
        open.reflect(&arrival("192.0.2.3:5000", &probe, 4), &mut out)
            .map(|_| ()),
        Err(Refusal::TotalRate)
    );
    // Shorter than a TWAMP-light probe: still refused.
    assert_eq!(
        open.reflect(
            &arrival("192.0.2.1:5000", &probe[..13], 2_000_000_000),
            &mut out
        )
        .map(|_| ()),
        Err(Refusal::Malformed(WireError::Short))
    );
}

/// A sender's run against this reflector with losses chosen each way: loss is split
/// exactly by the Direct Measurement TLV, and without it by the reflector's sequence
/// numbers; the figures count duplicates, reordering, and answers not of this run.
#[test]
fn loss_splits_each_way_exactly() {
    for direct in [true, false] {
        let request = tlv::Request {
            direct_measurement: direct,
            ..tlv::Request::default()
        };
        let mut reflector = Reflector::new(Config::default(), 0);
        let mut tally = Tally::new(settings(), 0);
        let mut out = Vec::new();
        let (mut forward_lost, mut reverse_lost) = (0, 0);
        for seq in 0..1000u32 {
            let bytes = probe(seq, Mode::Open, None, &request);
            let sent = wire::decode_test(&bytes, Mode::Open, None).unwrap();
            tally.sent_probe(seq, u64::from(seq) * 1_000_000, sent.timestamp);
            // Lost on the way out: every 97th; on the way back: every 89th answered.
            if seq % 97 == 50 {
                forward_lost += 1;
                continue;
            }
            reflector
                .reflect(&arrival("192.0.2.1:5000", &bytes, 1), &mut out)
                .unwrap();
            if seq % 89 == 40 {
                reverse_lost += 1;
                continue;
            }
            tally.answer(&reply(&out, u64::from(seq) * 1_000_000 + 300_000));
        }
        let report = tally.finish(1_000_000_000, false);
        assert_eq!(report.sent, 1000);
        assert_eq!(report.loss.round_trip, forward_lost + reverse_lost);
        assert_eq!(report.loss.forward, Some(forward_lost), "{:?}", report.loss);
        assert_eq!(report.loss.reverse, Some(reverse_lost), "{:?}", report.loss);
        assert_eq!(report.loss.unattributed, Some(0));
        assert!(report
            .loss
            .basis
            .contains(if direct { "direct" } else { "sequence" }));
        assert!(
            (report.rtt_us.p50 - 300.0).abs() < 1.0,
            "{}",
            report.rtt_us.p50
        );
    }
}

/// Reflector timestamps the run cannot explain (from the past, the future, PTP's
/// largest, a hold longer than the round trip) are counted and left out of the one-way
/// figures, on one clock and on two; the plausible answers' figures stay as they were.
#[test]
fn impossible_reflector_timestamps_are_counted_and_left_out() {
    for same_clock in [true, false] {
        let mut tally = Tally::new(
            Settings {
                same_clock,
                sender_clock: Some(linerate_model::clock::ClockState {
                    synchronised: true,
                    estimated_error_s: 0.001,
                    max_error_s: 0.01,
                }),
                ..settings()
            },
            0,
        );
        let mut reflector = Reflector::new(Config::default(), 0);
        reflector.set_clock(ErrorEstimate::new(true, false, 0.001));
        let mut out = Vec::new();
        // T1 = UNIX_2026 + seq ms; T4 = T1 + 600 us; plausible T2, T3 at +500, +510 us.
        let lies: [(i128, i128); 4] = [
            (-1_000_000_000, -1_000_000_000 + 10_000),
            (
                77 * 365 * 86_400 * 1_000_000_000,
                77 * 365 * 86_400 * 1_000_000_000,
            ),
            (500_000, -4_300_000_000_000_000),
            (i128::from(u32::MAX) * 1_000_000_000, 500_000),
        ];
        for seq in 0..20u32 {
            let bytes = probe(seq, Mode::Open, None, &tlv::Request::default());
            let sent = wire::decode_test(&bytes, Mode::Open, None).unwrap();
            let t1 = UNIX_2026 + i128::from(seq) * 1_000_000;
            tally.sent_probe(seq, u64::from(seq) * 1_000_000, sent.timestamp);
            let (t2, t3) = lies
                .get(seq as usize)
                .copied()
                .unwrap_or((500_000, 510_000));
            let at = Arrival {
                received: Timestamp::ntp_from_unix_ns(t1 + t2),
                now: Timestamp::ntp_from_unix_ns(t1 + t3),
                ..arrival("192.0.2.1:5000", &bytes, 1)
            };
            reflector.reflect(&at, &mut out).unwrap();
            let mut answer = reply(&out, u64::from(seq) * 1_000_000 + 600_000);
            answer.arrived_unix_ns = t1 + 600_000;
            tally.answer(&answer);
        }
        let report = tally.finish(1_000_000_000, false);
        assert_eq!(report.answered, 20);
        assert_eq!(report.impossible_timestamps, 4, "same clock {same_clock}");
        assert!(report.warnings.iter().any(|w| w.contains("4 answers")));
        let hold = report.reflector_hold_us.unwrap();
        assert!((hold - 10.0).abs() < 0.5, "{hold}");
        for way in [&report.forward, &report.reverse] {
            assert!(way.added_us.max.abs() < 1.0, "{:?}", way.added_us);
            if let Some(delay) = &way.delay_us {
                assert!(delay.min >= 0.0 && delay.max <= 600.0, "{delay:?}");
            }
        }
    }
}

/// A stateless reflector (its sequence number the sender's) with loss, and no Direct
/// Measurement TLV: the loss is round trip only, and the result says why.
#[test]
fn a_stateless_reflector_gives_round_trip_loss_only() {
    let mut tally = Tally::new(settings(), 0);
    let mut reflector = Reflector::new(Config::default(), 0);
    let mut out = Vec::new();
    for seq in 0..10u32 {
        let bytes = probe(seq, Mode::Open, None, &tlv::Request::default());
        let sent = wire::decode_test(&bytes, Mode::Open, None).unwrap();
        tally.sent_probe(seq, u64::from(seq), sent.timestamp);
        if seq == 4 {
            continue;
        }
        reflector
            .reflect(&arrival("192.0.2.1:5000", &bytes, 1), &mut out)
            .unwrap();
        // Stateless: the answer's own sequence number is the probe's.
        out[..4].copy_from_slice(&seq.to_be_bytes());
        tally.answer(&reply(&out, u64::from(seq) + 100));
    }
    let report = tally.finish(1_000, false);
    assert_eq!(report.loss.round_trip, 1);
    assert_eq!(report.loss.forward, None);
    assert!(
        report.loss.basis.starts_with("round trip only"),
        "{}",
        report.loss.basis
    );
}

/// A copy of an answer is a duplicate, an answer after a later one's is reordered, and
/// an answer whose echoed T1 is not the probe's (forged, or another run's) is not
/// counted at all.
#[test]
fn duplicates_reordering_and_strangers_are_told_apart() {
    let mut tally = Tally::new(settings(), 0);
    let mut reflector = Reflector::new(Config::default(), 0);
    let mut answers = Vec::new();
    for seq in 0..3u32 {
        let bytes = probe(seq, Mode::Open, None, &tlv::Request::default());
        let sent = wire::decode_test(&bytes, Mode::Open, None).unwrap();
        tally.sent_probe(seq, 0, sent.timestamp);
        let mut out = Vec::new();
        reflector
            .reflect(&arrival("192.0.2.1:5000", &bytes, 1), &mut out)
            .unwrap();
        answers.push(out);
    }
    tally.answer(&reply(&answers[1], 10));
    tally.answer(&reply(&answers[0], 10));
    tally.answer(&reply(&answers[0], 10));
    let mut forged = answers[2].clone();
    forged[28 + 7] ^= 1; // the echoed T1's last octet
    tally.answer(&reply(&forged, 10));
    let report = tally.finish(100, false);
    assert_eq!(
        (
            report.answered,
            report.duplicates,
            report.reordered,
            report.unmatched
        ),
        (2, 1, 1, 1)
    );
}

fn settings() -> Settings {
    Settings {
        target: "t".into(),
        address: "192.0.2.1:862".into(),
        mode: Mode::Open,
        protocol: Default::default(),
        rate_pps: 1000.0,
        size: 44,
        dscp: None,
        ssid: 7,
        same_clock: true,
        sender_clock: None,
        started_at: 0.0,
        call: None,
    }
}

fn reply(bytes: &[u8], arrived_ns: u64) -> Reply {
    Reply {
        answer: wire::decode_reflected(bytes, Mode::Open, None).unwrap(),
        tlvs: tlv::Answer::read(&bytes[wire::OPEN_BASE..], &bytes[..4], None),
        arrived_unix_ns: UNIX_2026 + 600_000,
        arrived_ns,
        tos: None,
        received_window: None,
    }
}

proptest! {
    /// Any datagram to the reflector is answered with exactly as many octets, or refused;
    /// it never panics and never answers longer.
    #[test]
    fn any_bytes_are_answered_no_longer_or_refused(
        bytes in proptest::collection::vec(any::<u8>(), 0..400),
        keyed in any::<bool>(),
        only in any::<bool>(),
    ) {
        let mut reflector = Reflector::new(Config {
            key: keyed.then(key),
            authenticated_only: keyed && only,
            ..Config::default()
        }, 0);
        let mut out = Vec::new();
        let from: SocketAddr = "192.0.2.9:862".parse().unwrap();
        let a = Arrival { from, bytes: &bytes, received: Timestamp(1), now: Timestamp(2), now_ns: 1, tos: 0, ttl: 64 };
        if let Ok(answer) = reflector.reflect(&a, &mut out) {
            prop_assert_eq!(answer.len, bytes.len());
            prop_assert_eq!(out.len(), bytes.len());
        }
    }

    /// Any TLVs after a valid base: answered at the same length, never a panic.
    #[test]
    fn any_tlvs_after_a_valid_base_keep_the_length(
        area in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut bytes = probe(1, Mode::Open, None, &tlv::Request::default());
        bytes.extend_from_slice(&area);
        let mut reflector = Reflector::new(Config { key: Some(key()), ..Config::default() }, 0);
        let mut out = Vec::new();
        let answer = reflector.reflect(&arrival("192.0.2.1:5000", &bytes, 1), &mut out);
        prop_assert_eq!(answer.map(|a| a.len), Ok(bytes.len()));
    }

    /// Any bytes as an answer: the sender's reading of the base and its TLVs never
    /// panics, with or without a key.
    #[test]
    fn any_answer_is_read_or_refused(
        bytes in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        let key = key();
        for mode in [Mode::Open, Mode::Authenticated] {
            let k = (mode == Mode::Authenticated).then_some(&key);
            if let Ok(answer) = wire::decode_reflected(&bytes, mode, k) {
                let _ = answer.timestamp.unix_ns(answer.error.ptp());
                let _ = tlv::Answer::read(&bytes[mode.base_len()..], &bytes[..4], k);
            }
        }
        let (found, stop) = tlv::parse(&bytes);
        for t in found {
            prop_assert!(t.value.end <= bytes.len());
        }
        prop_assert!(stop.map_or(true, |at| at < bytes.len()));
    }
}

/// Many sessions on the prober's one thread, as an agent runs them: sessions to two
/// reflectors, two of them to one reflector (which must not share a socket, or the
/// reflector would take them for one), one with a DSCP of its own, one to a reflector
/// that answers from another of its addresses than the one probed. Every probe is
/// answered and matched to its own session, loss is split each way from the reflector's
/// counts, and each probe's time of leaving is the kernel's, sent back under the id its
/// send gave where sockets are shared.
#[test]
fn the_prober_carries_many_sessions_each_answered_as_its_own() {
    // Shared sockets where the kernel times each send apart (6.13), else one each.
    let shared = crate::prober::shared().unwrap();
    many_sessions_on_one_prober(shared);
    if crate::sys::has_send_timestamp_ids() {
        let own_sockets = crate::prober::Prober::start(false).unwrap();
        many_sessions_on_one_prober(&own_sockets);
    }
}

// Long: one scenario, start to end: the reflector, many sessions' options, their run on
// one prober, and each session's figures checked in turn.
fn many_sessions_on_one_prober(prober: &crate::prober::Prober) {
    use crate::listener;
    use crate::sender::Options;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::Duration;
    let permits: listener::Permits = Arc::new(|_| Ok(()));
    let log: listener::LogLine = Arc::new(|_| {});
    let start = |at: &str| {
        listener::start(
            at.parse().unwrap(),
            crate::reflector::Config::default(),
            permits.clone(),
            log.clone(),
        )
        .unwrap()
    };
    let (a, b) = (start("127.0.0.1:0"), start("127.0.0.1:0"));
    // Bound to every address: it answers a probe to 127.0.0.2 from 127.0.0.1.
    let c = start("0.0.0.0:0");
    let c_addr: std::net::SocketAddr =
        (std::net::Ipv4Addr::new(127, 0, 0, 2), c.addr.port()).into();
    let count = 40;
    let session = |addr: std::net::SocketAddr, dscp: Option<u8>, ssid: u16| Options {
        target: addr.to_string(),
        addr,
        mode: Mode::Open,
        key: None,
        rate_pps: 200.0,
        count: Some(count),
        duration: None,
        extensions: all_tlvs(),
        dscp,
        source: None,
        timeout: Duration::from_secs(2),
        report_every: Duration::ZERO,
        same_clock: true,
        ssid,
        started_at: 0.0,
        wire: None,
        call: None,
    };
    let runs = [
        // One SSID: only their ports tell these two apart.
        session(a.addr, None, 11),
        session(a.addr, None, 11),
        session(b.addr, None, 13),
        session(b.addr, Some(46), 14),
        session(c_addr, None, 15),
    ];
    let outcomes: Vec<_> = runs
        .iter()
        .map(|o| {
            prober
                .probe(o.clone(), Arc::new(AtomicBool::new(false)))
                .unwrap()
        })
        .collect();
    for (options, outcome) in runs.iter().zip(outcomes) {
        let report = outcome
            .recv_timeout(Duration::from_secs(30))
            .expect("the session ends")
            .expect("the session runs");
        assert_eq!(report.sent, count, "{}", options.ssid);
        assert_eq!(report.answered, count, "{}: {report:?}", options.ssid);
        assert_eq!(
            report.unmatched, 0,
            "{}: another session's answers",
            options.ssid
        );
        assert_eq!(report.duplicates, 0);
        assert_eq!(report.loss.forward, Some(0), "{}", options.ssid);
        assert_eq!(report.loss.reverse, Some(0), "{}", options.ssid);
        assert!(report.rtt_us.min > 0.0, "{:?}", report.rtt_us);
        // Linux has told a UDP send's time since 3.17; shared sockets tell them apart by
        // the id each send gives (6.13), and a wrong id would leave probes untimed.
        assert_eq!(report.kernel_sent_times, count, "{}", options.ssid);
        if let Some(marks) = &report.marks {
            assert_eq!(options.dscp, Some(46));
            assert!(marks.forward.iter().all(|m| m.0 == 46), "{marks:?}");
            assert_eq!(marks.forward.iter().map(|m| m.2).sum::<u64>(), count);
        } else {
            assert_eq!(options.dscp, None);
        }
    }
    // The two to `a` came from two ports: two sessions there (its count is updated
    // each second).
    std::thread::sleep(Duration::from_millis(1_200));
    assert_eq!(
        a.counters
            .answered
            .load(std::sync::atomic::Ordering::Relaxed),
        2 * count
    );
    assert_eq!(
        a.counters
            .sessions
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
}

/// A session with a source (a mesh host's `source`) sends from it, and never shares a
/// socket with a session that has none: two silent reflectors, probed at once through
/// the process's prober, each see only the address their session left from.
#[test]
fn the_prober_sends_each_sessions_probes_from_its_own_source() {
    use crate::sender::Options;
    use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    let prober = crate::prober::shared().unwrap();
    let reflectors = [
        UdpSocket::bind("127.0.0.1:0").unwrap(),
        UdpSocket::bind("127.0.0.1:0").unwrap(),
    ];
    let bound: IpAddr = Ipv4Addr::new(127, 0, 0, 3).into();
    let session = |addr: SocketAddr, source: Option<linerate_model::Source>| Options {
        target: addr.to_string(),
        addr,
        mode: Mode::Open,
        key: None,
        rate_pps: 100.0,
        count: Some(5),
        duration: None,
        extensions: all_tlvs(),
        dscp: None,
        source,
        timeout: Duration::from_millis(200),
        report_every: Duration::ZERO,
        same_clock: true,
        ssid: 21,
        started_at: 0.0,
        wire: None,
        call: None,
    };
    let from_bound = Some(linerate_model::Source {
        address: Some(bound),
        device: None,
        mptcp: false,
    });
    let outcomes = [
        prober.probe(
            session(reflectors[0].local_addr().unwrap(), from_bound),
            Arc::new(AtomicBool::new(false)),
        ),
        prober.probe(
            session(reflectors[1].local_addr().unwrap(), None),
            Arc::new(AtomicBool::new(false)),
        ),
    ];
    for outcome in outcomes {
        let _ = outcome.unwrap().recv_timeout(Duration::from_secs(10));
    }
    let seen = |socket: &UdpSocket| {
        socket.set_nonblocking(true).unwrap();
        let mut from = std::collections::BTreeSet::new();
        let mut buffer = [0u8; 2048];
        let until = Instant::now() + Duration::from_millis(200);
        while Instant::now() < until {
            if let Ok((_, peer)) = socket.recv_from(&mut buffer) {
                from.insert(peer.ip());
            }
        }
        from
    };
    let loopback: IpAddr = Ipv4Addr::LOCALHOST.into();
    assert_eq!(seen(&reflectors[0]), [bound].into());
    assert_eq!(seen(&reflectors[1]), [loopback].into());
}

/// A bare host or address gets STAMP's port; a given port is kept; nonsense is refused
/// with its reason.
#[test]
fn reflectors_take_port_862_unless_given() {
    use crate::resolve_reflector as resolve;
    assert_eq!(
        resolve("127.0.0.1").unwrap(),
        "127.0.0.1:862".parse().unwrap()
    );
    assert_eq!(
        resolve("127.0.0.1:8620").unwrap(),
        "127.0.0.1:8620".parse().unwrap()
    );
    assert_eq!(resolve("::1").unwrap(), "[::1]:862".parse().unwrap());
    assert_eq!(resolve("[::1]:9").unwrap(), "[::1]:9".parse().unwrap());
    assert_eq!(resolve("localhost").unwrap().port(), 862);
    assert_eq!(resolve("a b").unwrap_err(), "give HOST or HOST:PORT");
}

/// A key file is hexadecimal text or raw bytes, and a file over 4 KiB is not read.
#[test]
fn key_files_are_hex_or_bytes_and_small() {
    let dir = std::env::temp_dir().join(format!("stamp-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hex = dir.join("hex");
    std::fs::write(&hex, "00112233445566778899aabbccddeeff\n").unwrap();
    let raw = dir.join("raw");
    std::fs::write(
        &raw,
        [
            0x00u8, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
            0xee, 0xff,
        ],
    )
    .unwrap();
    let parts: [&[u8]; 1] = [b"probe"];
    let by_hex = crate::wire::Key::from_file(&hex).unwrap().sign(&parts);
    let by_raw = crate::wire::Key::from_file(&raw).unwrap().sign(&parts);
    assert_eq!(by_hex, by_raw);
    let big = dir.join("big");
    std::fs::write(&big, vec![b'a'; 4097]).unwrap();
    assert_eq!(
        crate::wire::Key::from_file(&big).unwrap_err(),
        "over 4096 bytes"
    );
    assert!(crate::wire::Key::from_file(&dir.join("absent")).is_err());
    std::fs::remove_dir_all(dir).unwrap();
}

/// IPDV is taken between answered probes of consecutive sequence numbers, each pair
/// once whichever came back last, its magnitude each way: probes 0, 1 and 3 answered in
/// turn and 2 late give the pairs (0, 1), (1, 2) and (2, 3), and none across the gap.
#[test]
fn ipdv_pairs_consecutive_sequence_numbers_whatever_order_their_answers_come_in() {
    let mut tally = Tally::new(settings(), 0);
    let ms = |v: i128| v * 1_000_000;
    // (seq, out ms, back ms)
    let probes = [(0u32, 10, 20), (1, 12, 21), (3, 11, 20), (2, 15, 24)];
    for seq in 0..4u32 {
        let t1 = Timestamp::ntp_from_unix_ns(UNIX_2026 + ms(i128::from(seq) * 100));
        tally.sent_probe(seq, u64::from(seq) * 100_000_000, t1);
    }
    for (seq, out, back) in probes {
        let t1 = UNIX_2026 + ms(i128::from(seq) * 100);
        let (t2, t3) = (t1 + ms(out), t1 + ms(out) + 1_000);
        let unknown = ErrorEstimate::new(false, false, 0.0);
        tally.answer(&Reply {
            answer: wire::Reflected {
                seq,
                timestamp: Timestamp::ntp_from_unix_ns(t3),
                error: unknown,
                ssid: 7,
                receive: Timestamp::ntp_from_unix_ns(t2),
                sender_seq: seq,
                sender_timestamp: Timestamp::ntp_from_unix_ns(t1),
                sender_error: unknown,
                sender_ttl: 64,
            },
            tlvs: tlv::Answer::default(),
            arrived_unix_ns: t3 + ms(back),
            arrived_ns: (t3 + ms(back) - UNIX_2026) as u64,
            tos: None,
            received_window: None,
        });
    }
    let report = tally.finish(1_000_000_000, false);
    let out = report.forward.ipdv_us.expect("IPDV out");
    let back = report.reverse.ipdv_us.expect("IPDV back");
    // Out: |12-10|, |15-12|, |11-15|; back: |21-20|, |24-21|, |20-24| (ms).
    // NTP timestamps keep a nanosecond at most off.
    let near = |a: f64, b: f64| (a - b).abs() < 0.01;
    assert!(
        near(out.mean, 3_000.0) && near(out.min, 2_000.0) && near(out.max, 4_000.0),
        "{out:?}"
    );
    assert!(near(back.mean, 8_000.0 / 3.0), "{back:?}");
}
