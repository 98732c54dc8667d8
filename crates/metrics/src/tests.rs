// A benchmark or test times itself on the wall clock.
#![allow(clippy::disallowed_methods)]

use crate::assess::{assess, State, Thresholds};
use crate::board::{Board, Key, Measure, HISTORY};
use crate::openmetrics::{Exposition, Format};
use crate::{grid, openmetrics, server};
use linerate_model::mesh_row::{MeshRow, Outcome};
use linerate_report::document::Document;
use linerate_report::latency::{LatencyBucket, LatencySummary};
use linerate_report::profile::{GroupResult, OpFigures, ProfileReport, TransactionFigures};
use proptest::prelude::*;
use std::sync::{Arc, Mutex};

fn row(src: &str, dst: &str, test: &str, ok: bool, headline: f64, at: f64) -> MeshRow {
    MeshRow {
        run_id: Some(at as i64),
        mesh: "m".into(),
        src: src.into(),
        dst: dst.into(),
        test: test.into(),
        direction: "forward".into(),
        protocol: "tcp".into(),
        cycle: 1,
        started_at: at - 1.0,
        ended_at: at,
        outcome: if ok {
            Outcome::Ok
        } else {
            Outcome::Failed {
                blamed: Some(dst.into()),
                reason: "agent: refused".into(),
            }
        },
        headline: ok.then_some(headline),
        headline_text: String::new(),
    }
}

/// A stream's document: `bps` received.
fn stream(bps: f64) -> Document {
    let mut report = ProfileReport::default();
    report.summary.received_bps = bps;
    report.summary.duration_s = 2.0;
    report.groups.push(GroupResult {
        transactions: vec![TransactionFigures {
            iterations: 1000,
            ops: vec![OpFigures::default()],
            latency_us: LatencySummary {
                count: 1000,
                ..LatencySummary::default()
            },
            ..TransactionFigures::default()
        }],
        ..GroupResult::default()
    });
    Document::Profile(Box::new(report))
}

/// An rr document: 10 transactions at 100 us and 5 at 3 ms.
fn rr() -> Document {
    let mut report = ProfileReport::default();
    report.summary.duration_s = 1.0;
    report.groups.push(GroupResult {
        transactions: vec![TransactionFigures {
            iterations: 15,
            ops: vec![OpFigures::default(), OpFigures::default()],
            latency_us: LatencySummary {
                count: 15,
                mean: (10.0 * 100.0 + 5.0 * 3000.0) / 15.0,
                p50: 100.0,
                p90: 3000.0,
                p99: 3000.0,
                p999: 3000.0,
                histogram: vec![
                    LatencyBucket {
                        le_us: 100.0,
                        count: 10,
                    },
                    LatencyBucket {
                        le_us: 3000.0,
                        count: 5,
                    },
                ],
                ..LatencySummary::default()
            },
            ..TransactionFigures::default()
        }],
        ..GroupResult::default()
    });
    Document::Profile(Box::new(report))
}

#[test]
fn the_board_keeps_each_series_newest_figures_and_adds_up_its_transactions() {
    let mut board = Board::default();
    board.declare("lat", Measure::Latency);
    board.record(&row("a", "b", "tput", true, 8e9, 10.0), Some(&stream(8e9)));
    board.record(&row("a", "b", "tput", true, 4e9, 20.0), Some(&stream(4e9)));
    board.record(&row("a", "b", "lat", true, 1e-4, 21.0), Some(&rr()));
    board.record(&row("a", "b", "lat", true, 1e-4, 22.0), Some(&rr()));
    board.record(&row("b", "a", "lat", false, 0.0, 23.0), None);
    assert_eq!(board.hosts, ["a", "b"]);
    let key = |src: &str, dst: &str, test: &str| Key::of(&row(src, dst, test, true, 0.0, 0.0));
    let tput = &board.series[&key("a", "b", "tput")];
    assert_eq!(tput.latest.goodput_bps, Some(4e9));
    assert_eq!(tput.totals.ok, 2);
    assert_eq!(tput.history.len(), 2);
    let lat = &board.series[&key("a", "b", "lat")];
    assert_eq!(lat.measure, Some(Measure::Latency));
    assert_eq!(lat.totals.rtt_count, 30);
    assert!((lat.totals.rtt_sum_s - 2.0 * (10.0 * 100e-6 + 5.0 * 3e-3)).abs() < 1e-9);
    // 100 us in the 0.0001 bucket, 3 ms in the 0.005 one.
    assert_eq!(lat.totals.rtt_buckets[0], 20);
    assert_eq!(lat.totals.rtt_buckets[4], 10);
    let failed = &board.series[&key("b", "a", "lat")];
    assert_eq!((failed.totals.failed, failed.latest.measured()), (1, false));
}

/// A client test's report as an agent answers it: `transport` resolved as the command
/// line would, its summary as given.
fn client_report(
    transport: linerate_model::StreamTransport,
    summary: linerate_report::Summary,
) -> linerate_report::Report {
    use linerate_model::{StreamRequest, TestConfig, TestKind, TestRequest};
    let request = TestRequest::new(TestKind::Stream(StreamRequest {
        direction: linerate_model::Direction::Forward,
        rate_bps: None,
        transport,
    }));
    let here = linerate_model::Environment {
        cpus: 2,
        udp_length: Some(1472),
    };
    let config = TestConfig::resolve(&request, &here).unwrap();
    linerate_report::Report {
        tool: "linerate test".into(),
        test: config.test_name(),
        started_at: 1.0,
        config,
        host: Default::default(),
        intervals: Vec::new(),
        flows: Vec::new(),
        summary,
        warnings: Vec::new(),
        repetition: None,
        copy: None,
        observe: None,
        interrupted: None,
    }
}

/// A client test an agent ran (a mesh's QUIC stream) arrives as a test's own document:
/// its goodput is what its receivers counted, as a profile's is.
#[test]
fn a_client_tests_stream_gives_the_board_its_receivers_goodput() {
    let report = client_report(
        linerate_model::StreamTransport::Quic {
            length: None,
            connection_per_flow: false,
        },
        linerate_report::Summary {
            duration_s: 10.0,
            receiver_bps: 3e8,
            sender_bps: 3.1e8,
            ..Default::default()
        },
    );
    let mut board = Board::default();
    board.declare("q", Measure::Goodput);
    let mut r = row("a", "b", "q", true, 3e8, 10.0);
    r.protocol = "quic".into();
    board.record(&r, Some(&Document::Test(Box::new(report))));
    let series = &board.series[&Key::of(&r)];
    assert_eq!(series.latest.goodput_bps, Some(3e8));
    assert_eq!(series.latest.duration_s, Some(10.0));
}

/// A video test's document: of `sent` frames, `lost` never came, `partial` came in part
/// and `late` whole but late; the latencies 10, 12, 14 and 40 ms.
fn video(sent: u64, lost: u64, partial: u64, late: u64) -> linerate_report::Report {
    use linerate_model::latency::LatencyHistogram;
    use linerate_model::video::{FrameCounts, VideoSettings};
    use linerate_report::model::{VideoSummary, VideoWay};
    let mut latency = LatencyHistogram::new();
    for ms in [10, 12, 14, 40] {
        latency.record(ms * 1_000_000);
    }
    let way = VideoWay {
        direction: linerate_model::Direction::Forward,
        lost,
        counts: FrameCounts {
            sent,
            whole: sent - lost - partial,
            partial,
            late,
            latency_us: latency.summary(true),
            ..Default::default()
        },
        received_bps: 0.0,
        qoo: None,
        unseen: false,
    };
    let settings = VideoSettings::parse("4:4m").unwrap();
    client_report(
        linerate_model::StreamTransport::Video(linerate_model::VideoStream::of(settings)),
        linerate_report::Summary {
            duration_s: 5.0,
            receiver_bps: 4e6,
            video: Some(VideoSummary {
                settings,
                back: None,
                ways: vec![way],
            }),
            ..Default::default()
        },
    )
}

/// A video's frames not shown in time are held to the loss bound over its span beside its
/// latency's baseline: a steady 20 % of frames not shown opens `LinerateLossAbove` for its
/// way, said as frames, while its latency (steady) opens nothing; a clean span resolves
/// it.
#[test]
fn a_videos_frames_not_shown_open_a_loss_alert_of_their_own() {
    let mut watch = crate::watch::Watch::start(crate::watch::WatchSpec {
        mesh: "m",
        hosts: vec!["a", "b"],
        tests: vec![("video", Measure::Latency)],
        past: &[],
        thresholds: Thresholds {
            loss_above: 0.05,
            loss_for_s: 10.0,
            ..Thresholds::default()
        },
        metrics: None,
        remote_write: None,
        alertmanager: None,
        webhook: None,
        grid_url: None,
        store: None,
        past_source: None,
    })
    .unwrap();
    let mut record = |at: f64, lost: u64| {
        let mut r = row("a", "b", "video", true, 0.012, at);
        r.protocol = "udp".into();
        let report = video(20, lost, 1, 3);
        watch
            .record(&r, Some(&Document::Test(Box::new(report))))
            .changes
    };
    let mut opened = Vec::new();
    for at in [5.0, 10.0, 15.0, 20.0] {
        opened.extend(record(at, 0));
    }
    let [crate::alerts::Change::Opened(alert)] = opened.as_slice() else {
        panic!("{opened:?}")
    };
    assert_eq!(alert.name(), "LinerateLossAbove");
    assert_eq!(alert.lost, crate::alerts::LossOf::Frames);
    assert_eq!(
        alert.summary(),
        "video: a -> b loses 20.000% of its frames over 10s (above 5.000%), the way out of a's video to b"
    );
    let mut resolved = Vec::new();
    for at in [25.0, 30.0, 35.0] {
        let mut r = row("a", "b", "video", true, 0.012, at);
        r.protocol = "udp".into();
        let clean = video(20, 0, 0, 0);
        resolved.extend(
            watch
                .record(&r, Some(&Document::Test(Box::new(clean))))
                .changes,
        );
    }
    assert!(
        matches!(resolved.as_slice(), [crate::alerts::Change::Resolved(a)] if a.lost == crate::alerts::LossOf::Frames),
        "{resolved:?}"
    );
}

/// A video test's document (a mesh's `run = "video"`): its frames' latency is the
/// series' timed transaction (quantiles and buckets), the frames not shown in time its
/// loss, and its measure latency.
#[test]
fn a_video_tests_frames_give_the_board_their_latency_and_the_frames_not_shown() {
    let report = video(20, 1, 1, 2);
    let mut board = Board::default();
    let mut r = row("a", "b", "video", true, 0.0, 5.0);
    r.protocol = "udp".into();
    board.record(&r, Some(&Document::Test(Box::new(report))));
    let series = &board.series[&Key::of(&r)];
    assert_eq!(series.measure, Some(Measure::Latency));
    assert_eq!(
        series.latest.loss_ratio,
        Some(4.0 / 20.0),
        "1 lost, 1 in part, 2 late"
    );
    let rtt = series.latest.rtt.expect("frame latency");
    assert!((rtt.p50 - 0.012).abs() < 1e-4, "{rtt:?}");
    assert_eq!(series.totals.rtt_count, 4);
    assert_eq!(series.latest.goodput_bps, Some(4e6));
    // Its Quality of Outcome, where the way was scored, is a gauge of its own.
    let mut report = video(20, 1, 1, 2);
    let requirement =
        linerate_model::qoo::Requirement::parse("p99=150ms/400ms,loss=1%/5%").unwrap();
    report.summary.video.as_mut().unwrap().ways[0].qoo = Some(linerate_model::qoo::QooScore {
        requirement,
        score: 62.5,
        latency: 62.5,
        loss: 100.0,
        throughput: 100.0,
        worst_percentile: Some(99.0),
    });
    let mut later = row("a", "b", "video", true, 0.012, 6.0);
    later.protocol = "udp".into();
    board.record(&later, Some(&Document::Test(Box::new(report))));
    let text = Exposition::new(Arc::new(Mutex::new(board))).render(Format::OpenMetrics);
    assert!(
        text.contains("linerate_qoo_score{mesh=\"m\",src=\"a\",dst=\"b\",test=\"video\",direction=\"forward\",protocol=\"udp\"} 62.5\n"),
        "{text}"
    );
}

/// A mesh's board takes a series' whole history when the series first appears, and never
/// grows it again: a coordinator's memory is flat once its series exist. A server's board
/// takes what each series holds.
#[test]
fn a_mesh_board_reserves_each_series_history_once() {
    let mut mesh = Board {
        reserve_history: true,
        ..Board::default()
    };
    let mut server = Board::default();
    let key = Key::of(&row("a", "b", "tput", true, 0.0, 0.0));
    mesh.record(&row("a", "b", "tput", true, 1e9, 1.0), None);
    server.record(&row("a", "b", "tput", true, 1e9, 1.0), None);
    let reserved = mesh.series[&key].history.capacity();
    assert!(reserved > HISTORY, "reserved {reserved}");
    assert!(server.series[&key].history.capacity() < HISTORY);
    for at in 2..(3 * HISTORY) {
        mesh.record(&row("a", "b", "tput", true, 1e9, at as f64), None);
    }
    assert_eq!(mesh.series[&key].history.len(), HISTORY);
    assert_eq!(mesh.series[&key].history.capacity(), reserved);
}

/// A kept exposition re-encodes what changed and forgets what went: after every change
/// its text is the text a fresh encoder writes, in both formats.
#[test]
fn a_kept_exposition_writes_what_a_fresh_one_writes_after_every_change() {
    let board = Arc::new(Mutex::new(Board::default()));
    let mut kept = Exposition::new(board.clone());
    let same = |kept: &mut Exposition| {
        for format in [Format::OpenMetrics, Format::Classic] {
            assert_eq!(
                kept.render(format),
                openmetrics::encode(board.clone(), format)
            );
        }
    };
    same(&mut kept);
    board
        .lock()
        .unwrap()
        .record(&row("a", "b", "tput", true, 8e9, 10.0), Some(&stream(8e9)));
    same(&mut kept);
    // A changed series, a new family (the rtt histogram) and a failure's counter.
    board
        .lock()
        .unwrap()
        .record(&row("a", "b", "tput", true, 4e9, 20.0), Some(&stream(4e9)));
    board
        .lock()
        .unwrap()
        .record(&row("a", "b", "lat", true, 1e-4, 21.0), Some(&rr()));
    board
        .lock()
        .unwrap()
        .record(&row("b", "a", "tput", false, 0.0, 22.0), None);
    same(&mut kept);
    let text = kept.render(Format::OpenMetrics);
    assert!(text.contains("} 500000000.0\n"), "{text}");
    assert!(!text.contains("} 1000000000.0\n"), "{text}");
    // The latency series gone: its families go with it.
    let lat = Key::of(&row("a", "b", "lat", true, 1e-4, 21.0));
    board.lock().unwrap().series.remove(&lat);
    same(&mut kept);
    assert!(!kept
        .render(Format::OpenMetrics)
        .contains("linerate_rtt_seconds"));
}

#[test]
fn gzip_is_taken_when_named_or_starred_and_not_refused() {
    for (header, takes) in [
        ("gzip", true),
        ("gzip, deflate, br", true),
        ("deflate, GZIP;q=0.5", true),
        ("*", true),
        ("", false),
        ("identity", false),
        ("gzip;q=0", false),
        ("gzip; q=0.0, identity", false),
        ("x-gzip2", false),
    ] {
        assert_eq!(server::accepts_gzip(header), takes, "{header:?}");
    }
}

#[test]
fn a_scrape_says_what_the_board_holds_in_both_text_formats() {
    let board = Arc::new(Mutex::new(Board::default()));
    {
        let mut b = board.lock().unwrap();
        b.record(
            &row("a", "b\"x", "tput", true, 8e9, 10.0),
            Some(&stream(8e9)),
        );
        b.record(&row("a", "b", "lat", true, 1e-4, 21.0), Some(&rr()));
    }
    let text = openmetrics::encode(board.clone(), Format::OpenMetrics);
    assert!(text.ends_with("# EOF\n"), "{text}");
    // The label value's quote escaped; goodput in bytes per second.
    assert!(
        text.contains(
            "linerate_goodput_bytes_per_second{mesh=\"m\",src=\"a\",dst=\"b\\\"x\",test=\"tput\",direction=\"forward\",protocol=\"tcp\"} 1000000000.0"
        ),
        "{text}"
    );
    assert!(text.contains("# TYPE linerate_tests counter"), "{text}");
    assert!(
        text.contains("linerate_rtt_seconds_bucket{le=\"+Inf\""),
        "{text}"
    );
    assert!(text.contains("linerate_rtt_seconds_count{mesh=\"m\",src=\"a\",dst=\"b\",test=\"lat\",direction=\"forward\",protocol=\"tcp\"} 15"), "{text}");
    let classic = openmetrics::encode(board, Format::Classic);
    assert_eq!(classic, openmetrics::classic(&text));
    assert!(
        classic.contains("# TYPE linerate_tests_total counter\n"),
        "{classic}"
    );
    assert!(
        classic.contains("# HELP linerate_tests_total "),
        "{classic}"
    );
    assert!(!classic.contains("# EOF"), "{classic}");
    let samples = |t: &str| t.lines().filter(|l| !l.starts_with('#')).count();
    assert_eq!(samples(&text), samples(&classic));
}

#[test]
fn a_series_is_worse_once_it_leaves_its_baseline_beyond_the_threshold() {
    let t = Thresholds {
        goodput_drop: 0.3,
        latency_rise: 0.5,
        responsiveness_drop: 0.3,
        window: 10,
        at_least: 3,
        ..Thresholds::default()
    };
    let mut board = Board::default();
    let mut at = 0.0;
    let mut add = |board: &mut Board, test: &str, v: f64| {
        at += 1.0;
        board.record(&row("a", "b", test, true, v, at), None);
    };
    board.declare("tput", Measure::Goodput);
    board.declare("lat", Measure::Latency);
    add(&mut board, "tput", 1e9);
    let key = Key::of(&row("a", "b", "tput", true, 0.0, 0.0));
    assert_eq!(assess(&board.series[&key], &t).state, State::Learning);
    for v in [1.0e9, 1.02e9, 0.98e9] {
        add(&mut board, "tput", v);
    }
    assert_eq!(assess(&board.series[&key], &t).state, State::Normal);
    add(&mut board, "tput", 0.5e9);
    let a = assess(&board.series[&key], &t);
    assert_eq!(a.state, State::Worse);
    assert!((a.ratio.unwrap() - 0.5).abs() < 0.02, "{a:?}");
    // Latency: higher is worse.
    for v in [1e-3, 1e-3, 1.1e-3, 1e-3] {
        add(&mut board, "lat", v);
    }
    let lat = Key::of(&row("a", "b", "lat", true, 0.0, 0.0));
    assert_eq!(assess(&board.series[&lat], &t).state, State::Normal);
    // 1.5 ms above a 1 ms baseline: over the share, the 1 ms floor and the spread.
    add(&mut board, "lat", 2.5e-3);
    assert_eq!(assess(&board.series[&lat], &t).state, State::Worse);
    board.record(&row("a", "b", "lat", false, 0.0, 100.0), None);
    assert_eq!(assess(&board.series[&lat], &t).state, State::Failed);
}

/// A latency alert is judged as an operator would: a loopback pair wandering between
/// 40 and 110 us (busy CPUs) opens none in 300 results; on a 10 ms path one slow result
/// among normal ones opens none; a rise held for 3 of 5 results opens one, and it
/// resolves once at most one of the last 5 is slow. The figures print with their units.
#[test]
fn a_latency_alert_needs_a_held_rise_beyond_the_spread_and_the_floor() {
    let t = Thresholds::default();
    let mut board = Board::default();
    board.declare("lat", Measure::Latency);
    let mut alerts = crate::alerts::Alerts::default();
    let mut at = 0.0;
    // A result of the pair `src -> dst` on the board, then the alerts told of it.
    let mut feed =
        |src: &str, dst: &str, board: &mut Board, alerts: &mut crate::alerts::Alerts, v: f64| {
            at += 1.0;
            let row = row(src, dst, "lat", true, v, at);
            board.record(&row, None);
            let key = Key::of(&row);
            let series = &board.series[&key];
            let a = assess(series, &t);
            alerts.update(&key, &a, series.latest.value, at, &t)
        };
    let mut state = 12345u64;
    for _ in 0..300 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let jitter = (state % 1000) as f64 / 1000.0;
        // Most near 44 us, one in five up to 110 us.
        let v = if state % 5 == 0 {
            60e-6 + 50e-6 * jitter
        } else {
            40e-6 + 8e-6 * jitter
        };
        assert_eq!(feed("a", "b", &mut board, &mut alerts, v), None, "{v}");
    }
    let mut feed10 = |board: &mut Board, alerts: &mut crate::alerts::Alerts, v: f64| {
        feed("c", "d", board, alerts, v)
    };
    for _ in 0..20 {
        assert_eq!(feed10(&mut board, &mut alerts, 10e-3), None);
    }
    for v in [25e-3, 10e-3, 10e-3, 10e-3, 10e-3] {
        assert_eq!(feed10(&mut board, &mut alerts, v), None, "one slow result");
    }
    assert_eq!(feed10(&mut board, &mut alerts, 20e-3), None);
    assert_eq!(feed10(&mut board, &mut alerts, 20e-3), None);
    let Some(crate::alerts::Change::Opened(alert)) = feed10(&mut board, &mut alerts, 20e-3) else {
        panic!("the third slow result of five opens the alert");
    };
    assert_eq!(alert.name(), "LinerateLatencyRise");
    assert_eq!(alert.figures(), "20.0 ms (baseline 10.0 ms)");
    // Back to normal: resolved once at most one of the last five is slow (the fourth).
    for _ in 0..3 {
        assert_eq!(feed10(&mut board, &mut alerts, 10e-3), None);
    }
    assert!(matches!(
        feed10(&mut board, &mut alerts, 10e-3),
        Some(crate::alerts::Change::Resolved(_))
    ));
}

/// An RPM run: `rpm` round trips a minute, 40 Mbit/s down and 90 up, 30 ms added.
fn rpm(rpm: f64) -> Document {
    use linerate_report::rpm::{RpmLeg, RpmReport};
    let leg = |direction: &str, bps: f64| RpmLeg {
        direction: direction.into(),
        started_unix_s: 0.0,
        capacity_bps: bps,
        rpm: Some(rpm),
        goodput_saturated: true,
        rpm_saturated: true,
        connections: 4,
        loaded_connect_s: Some(0.032),
        loaded_self_s: Some(0.04),
        added_latency_s: Some(0.03),
        probes: 100,
        failed_probes: 0,
        intervals: Vec::new(),
        loaded_self_spread: None,
        loaded_connect_spread: None,
    };
    Document::Rpm(Box::new(RpmReport {
        test: "rpm".into(),
        started_at: 0.0,
        target: "b".into(),
        config_url: "https://b/.well-known/nq".into(),
        tls: true,
        idle_latency_s: 0.002,
        idle_connect_s: 0.002,
        download: leg("download", 40e6),
        upload: leg("upload", 90e6),
        rpm: Some(rpm),
        band: Some("Medium".into()),
        added_latency_s: Some(0.03),
        grade: Some("B".into()),
        idle_spread: None,
        idle_connect_spread: None,
        host: None,
    }))
}

/// An RPM series: its four families in the scrape (capacity by leg, in bytes), its
/// measure declared by the document, and a drop in RPM is worse (lower is worse).
#[test]
fn an_rpm_series_shows_its_responsiveness_and_a_drop_is_worse() {
    let board = Arc::new(Mutex::new(Board::default()));
    let t = Thresholds::default();
    let key = Key::of(&row("a", "b", "rpm", true, 0.0, 0.0));
    for (i, v) in [1000.0, 1020.0, 980.0, 1000.0].into_iter().enumerate() {
        board
            .lock()
            .unwrap()
            .record(&row("a", "b", "rpm", true, v, i as f64), Some(&rpm(v)));
    }
    {
        let b = board.lock().unwrap();
        assert_eq!(b.series[&key].measure, Some(Measure::Responsiveness));
        assert_eq!(assess(&b.series[&key], &t).state, State::Normal);
    }
    let text = openmetrics::encode(board.clone(), Format::OpenMetrics);
    let labels =
        "mesh=\"m\",src=\"a\",dst=\"b\",test=\"rpm\",direction=\"forward\",protocol=\"tcp\"";
    for line in [
        format!("linerate_responsiveness_rpm{{{labels}}} 1000.0"),
        format!("linerate_capacity_bytes_per_second{{{labels},leg=\"download\"}} 5000000.0"),
        format!("linerate_capacity_bytes_per_second{{{labels},leg=\"upload\"}} 11250000.0"),
        format!("linerate_idle_latency_seconds{{{labels}}} 0.002"),
        format!("linerate_added_latency_seconds{{{labels}}} 0.03"),
    ] {
        assert!(text.contains(&line), "{line}\n{text}");
    }
    assert!(
        !text.contains("linerate_goodput_bytes_per_second"),
        "{text}"
    );
    board
        .lock()
        .unwrap()
        .record(&row("a", "b", "rpm", true, 500.0, 9.0), Some(&rpm(500.0)));
    let b = board.lock().unwrap();
    let a = assess(&b.series[&key], &t);
    assert_eq!(
        (a.state, a.measure),
        (State::Worse, Measure::Responsiveness)
    );
}

#[test]
fn the_grid_and_history_answer_from_the_board() {
    let mut board = Board::default();
    board.record(&row("a", "b", "tput", true, 8e9, 10.0), Some(&stream(8e9)));
    let t = Thresholds::default();
    let g: serde_json::Value = serde_json::from_str(&grid::grid_json(&board, &t)).unwrap();
    assert_eq!(g["tabs"][0]["name"], "tput");
    // [src, dst, value, state, outcome]: learning (no baseline yet), ok.
    assert_eq!(
        g["tabs"][0]["cells"][0],
        serde_json::json!([0, 1, 8e9, 0, 0])
    );
    assert_eq!(g["symbols"][0], "·");
    let h = grid::history_json(&board, "test=tput&src=a&dst=b", &t).unwrap();
    assert_eq!(h["points"][0]["value"], 8e9);
    assert!(grid::history_json(&board, "test=tput&src=a", &t).is_err());
    assert!(grid::history_json(&board, "test=x&src=a&dst=b", &t).is_err());
    assert_eq!(
        grid::pair_of("test=a%20b&src=h+1&dst=fd00--1").unwrap(),
        ("a b".into(), "h 1".into(), "fd00--1".into())
    );
    assert!(grid::pair_of("test=%zz&src=a&dst=b").is_err());
    let page = grid::page(
        "<x>",
        &serde_json::json!({"hosts": ["</script><b>"]}).to_string(),
    );
    assert!(page.contains("&lt;x&gt;"));
    assert!(
        !page.contains("</script><b>") && page.contains("<\\/script><b>"),
        "a host name cannot end the page's script"
    );
}

proptest! {
    /// A query string from the network: any bytes give an answer or an error, never a
    /// panic, and nothing longer than what came in.
    #[test]
    fn any_query_is_answered_or_refused(query in "[a-z=&%0-9A-F+]{0,200}") {
        if let Ok((t, s, d)) = grid::pair_of(&query) {
            prop_assert!(t.len() + s.len() + d.len() <= query.len());
        }
    }

    /// Any label value, escaped, keeps a scrape's lines intact.
    #[test]
    fn any_host_name_keeps_one_sample_per_line(name in "\\PC{0,40}") {
        let board = Arc::new(Mutex::new(Board::default()));
        board.lock().unwrap().record(&row(&name, "b", "tput", true, 1.0, 1.0), Some(&stream(1.0)));
        let text = openmetrics::encode(board, Format::OpenMetrics);
        let goodput = text.lines().filter(|l| l.starts_with("linerate_goodput_bytes_per_second{")).count();
        prop_assert_eq!(goodput, 1);
    }
}

/// A trace's document to 10.0.9.2: four hops, `middle` at the second.
fn trace(middle: &str) -> Document {
    let hop = |ttl: u8, address: &str, kind: &str| serde_json::json!({"ttl": ttl, "answers": [{"address": address, "rtt_ms": 0.1, "kind": kind}]});
    let paths = serde_json::json!([{
        "flow": 0, "source_port": 61000, "reached_ttl": 4,
        "hops": [
            hop(1, "10.0.1.2", "time exceeded"),
            hop(2, middle, "time exceeded"),
            hop(3, "10.0.4.2", "time exceeded"),
            hop(4, "10.0.9.2", "reached"),
        ],
    }]);
    let paths: Vec<linerate_report::trace::FlowPath> = serde_json::from_value(paths).unwrap();
    let (hops, distinct_paths) = linerate_report::trace::TraceReport::merge(&paths);
    Document::Trace(Box::new(linerate_report::trace::TraceReport {
        test: "trace".into(),
        started_at: 0.0,
        target: "b".into(),
        address: "10.0.9.2".into(),
        protocol: "udp".into(),
        port: Some(33434),
        flows: 1,
        queries: 1,
        first_ttl: 1,
        max_ttl: 30,
        duration_s: 0.1,
        sent: 4,
        answered: 4,
        unmatched: 0,
        paths,
        hops,
        reached: true,
        distinct_paths,
        warnings: Vec::new(),
        host: None,
    }))
}

/// A watch of tput (goodput) and path (traces), nowhere to send.
fn watch_of_traces() -> crate::watch::Watch {
    crate::watch::Watch::start(crate::watch::WatchSpec {
        mesh: "m",
        hosts: vec!["a", "b"],
        tests: vec![("tput", Measure::Goodput), ("path", Measure::Hops)],
        past: &[],
        thresholds: Thresholds::default(),
        metrics: None,
        remote_write: None,
        alertmanager: None,
        webhook: None,
        grid_url: None,
        store: None,
        past_source: None,
    })
    .unwrap()
}

/// A trace that goes another way than the pair's trace before is a path change: told
/// once (the same way again is none), counted, kept for the grid's plot; a goodput alert
/// of the pair that opens after it names it, as does one already open when the change
/// may have happened in its span. A change outside an alert's span is not named.
#[test]
fn a_path_change_is_counted_marked_and_named_by_its_pairs_alert() {
    let mut watch = watch_of_traces();
    fn path(
        watch: &mut crate::watch::Watch,
        at: f64,
        middle: &str,
    ) -> Option<crate::board::PathMark> {
        let mut r = row("a", "b", "path", true, 4.0, at);
        r.protocol = "udp".into();
        watch.record(&r, Some(&trace(middle))).path_change
    }
    assert_eq!(
        path(&mut watch, 5.0, "10.0.2.2"),
        None,
        "the first trace sets the way"
    );
    assert_eq!(path(&mut watch, 15.0, "10.0.2.2"), None, "the same way");
    for at in [10.0, 20.0, 30.0] {
        let told = watch.record(&row("a", "b", "tput", true, 8e9, at), Some(&stream(8e9)));
        assert!(told.changes.is_empty() && told.path_change.is_none());
    }
    let mark = path(&mut watch, 45.0, "10.0.3.2").expect("a path change");
    assert_eq!((mark.since, mark.at), (15.0, 45.0));
    assert!(
        mark.words
            .starts_with("hop 2: 10.0.2.2 -> 10.0.3.2 (1 of 1 flow)"),
        "{}",
        mark.words
    );
    // The goodput of the pair drops at 50: its span (30, 50] meets the change's (15, 45].
    let told = watch.record(&row("a", "b", "tput", true, 4e9, 50.0), Some(&stream(4e9)));
    let [crate::alerts::Change::Opened(alert)] = told.changes.as_slice() else {
        panic!("{:?}", told.changes);
    };
    let named = alert.path_change.as_deref().expect("the change named");
    assert!(
        named.starts_with("the path a -> b changed between 1970-01-01T00:00:15Z and 1970-01-01T00:00:45Z (trace 'path': hop 2"),
        "{named}"
    );
    assert!(alert.summary().contains(named), "{}", alert.summary());
    let json = crate::alerts::alertmanager_json(alert, None, 60.0);
    assert_eq!(json["annotations"]["path_change"], named);
    // The other way's goodput drops first (b -> a at 70, normal at 60: the change of
    // (15, 45] is outside its span); a trace of a -> b at 80 sees the way change back:
    // the open alert names it (the change's span, (45, 80], meets the alert's, (60, 70]).
    for at in [50.0, 55.0, 60.0] {
        watch.record(&row("b", "a", "tput", true, 8e9, at), Some(&stream(8e9)));
    }
    let told = watch.record(&row("b", "a", "tput", true, 2e9, 70.0), Some(&stream(2e9)));
    assert!(
        matches!(told.changes.as_slice(), [crate::alerts::Change::Opened(a)] if a.path_change.is_none())
    );
    let mut r = row("a", "b", "path", true, 4.0, 80.0);
    r.protocol = "udp".into();
    assert!(watch
        .record(&r, Some(&trace("10.0.2.2")))
        .path_change
        .is_some());
    let open = &watch.alerts.open;
    let back = open.values().find(|a| a.key.src == "b").unwrap();
    assert!(
        back.path_change
            .as_deref()
            .is_some_and(|p| p.contains("between 1970-01-01T00:00:45Z and 1970-01-01T00:01:20Z")),
        "{back:?}"
    );
    let out = open.values().find(|a| a.key.src == "a").unwrap();
    assert!(
        out.path_change
            .as_deref()
            .is_some_and(|p| p.contains("00:00:15Z")),
        "kept the first: {out:?}"
    );
    // Counted (two changes of the one trace series), its distance a gauge; both marks on
    // the pair's plot.
    let board = watch.board.clone();
    let text = Exposition::new(board.clone()).render(Format::OpenMetrics);
    assert!(text.contains("linerate_path_changes_total{mesh=\"m\",src=\"a\",dst=\"b\",test=\"path\",direction=\"forward\",protocol=\"udp\"} 2"), "{text}");
    assert!(text.contains("linerate_path_hops{mesh=\"m\",src=\"a\",dst=\"b\",test=\"path\",direction=\"forward\",protocol=\"udp\"} 4"), "{text}");
    assert!(
        !text.contains("linerate_path_changes_total{mesh=\"m\",src=\"a\",dst=\"b\",test=\"tput\""),
        "{text}"
    );
    let b = board.lock().unwrap();
    let h = grid::history_json(&b, "test=tput&src=a&dst=b", &Thresholds::default()).unwrap();
    let marks = h["path_changes"].as_array().unwrap();
    assert_eq!(marks.len(), 2, "{h}");
    assert_eq!(
        (marks[0]["at"].as_f64(), marks[1]["at"].as_f64()),
        (Some(45.0), Some(80.0))
    );
}

/// A series line of an exposition as (name, sorted labels) and its value.
fn scraped(text: &str) -> std::collections::BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter(|l| !l.starts_with("linerate_build_info"))
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("a sample line");
            let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
            let mut labels: Vec<&str> = labels
                .trim_end_matches('}')
                .split(',')
                .filter(|l| !l.is_empty())
                .collect();
            labels.sort();
            let value = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().expect("a number"),
            };
            (format!("{name}{{{}}}", labels.join(",")), value)
        })
        .collect()
}

/// Remote write's series of every key in the same form.
fn pushed(board: &Board) -> std::collections::BTreeMap<String, f64> {
    board
        .series
        .keys()
        .flat_map(|key| crate::remote_write::batch_of(board, key))
        .map(|series| {
            let name = series.labels[0].value.clone();
            let mut labels: Vec<String> = series.labels[1..]
                .iter()
                .map(|l| {
                    // The exposition writes a bucket's bound as a float.
                    let value = match (l.name.as_str(), l.value.parse::<f64>()) {
                        ("le", Ok(v)) if !l.value.contains('.') && v.is_finite() => {
                            format!("{v:.1}")
                        }
                        _ => l.value.clone(),
                    };
                    format!("{}=\"{value}\"", l.name)
                })
                .collect();
            labels.sort();
            (
                format!("{name}{{{}}}", labels.join(",")),
                series.samples[0].value,
            )
        })
        .collect()
}

/// One table of families feeds both: a scrape and remote write send the same series with
/// the same values (remote write once sent a p999 the scrape did not, left out the RPM
/// families and decided retransmits on another condition).
#[test]
fn remote_write_sends_what_a_scrape_gives_series_by_series() {
    let board = Arc::new(Mutex::new(Board::default()));
    {
        let mut b = board.lock().unwrap();
        b.record(&row("a", "b", "tput", true, 8e9, 10.0), Some(&stream(8e9)));
        b.record(&row("a", "b", "lat", true, 1e-4, 11.0), Some(&rr()));
        b.record(&row("a", "b", "rpm", true, 900.0, 12.0), Some(&rpm(900.0)));
        b.record(
            &row("a", "b", "stamp", true, 0.0, 12.5),
            Some(&stamp(600, 1, 0)),
        );
        b.record(
            &row("a", "b", "path", true, 4.0, 12.7),
            Some(&trace("10.0.2.2")),
        );
        b.record_figures(
            &row("a", "b", "call", true, 4.3, 12.8),
            Some(&crate::board::Figures {
                mos: Some(4.3),
                duration_s: 10.0,
                ..Default::default()
            }),
        );
        b.record_figures(
            &row("a", "b", "video", true, 0.012, 12.9),
            Some(&crate::board::Figures {
                qoo: Some(87.5),
                duration_s: 10.0,
                ..Default::default()
            }),
        );
        b.record(&row("b", "a", "tput", false, 0.0, 13.0), None);
        let mut skipped = row("b", "a", "lat", false, 0.0, 14.0);
        skipped.outcome = Outcome::Skipped {
            reason: "host b is down".into(),
        };
        b.record(&skipped, None);
    }
    for format in [Format::OpenMetrics, Format::Classic] {
        let scrape = scraped(&openmetrics::encode(board.clone(), format));
        let remote = pushed(&board.lock().unwrap());
        let names = |m: &std::collections::BTreeMap<String, f64>| {
            m.keys()
                .map(|k| k.split('{').next().unwrap().to_string())
                .collect::<std::collections::BTreeSet<_>>()
        };
        for family in &crate::families::FAMILIES {
            if family.name.starts_with("linerate_retransmits")
                || family.name.starts_with("linerate_cpu")
            {
                continue; // no series of the board above has these
            }
            for name in crate::families::series_names(family) {
                assert!(names(&scrape).contains(&name), "{name} scraped");
            }
        }
        // 37 series: goodput, four percentiles, the histogram's lines, RPM's four
        // families, results ok, failed and skipped, and each series' last result.
        assert!(scrape.len() >= 35, "{scrape:#?}");
        let only_scraped: Vec<_> = scrape.keys().filter(|k| !remote.contains_key(*k)).collect();
        let only_pushed: Vec<_> = remote.keys().filter(|k| !scrape.contains_key(*k)).collect();
        assert!(
            only_scraped.is_empty() && only_pushed.is_empty(),
            "{format:?}: scraped only {only_scraped:#?}\npushed only {only_pushed:#?}"
        );
        for (series, value) in &scrape {
            let sent = remote[series];
            assert!(
                (sent - value).abs() <= value.abs() * 1e-9,
                "{series}: scraped {value}, pushed {sent}"
            );
        }
    }
}

/// A STAMP window's document: `sent` probes, `out` lost on the way out, `back` on the
/// way back (split by the reflector's counts).
fn stamp(sent: u64, out: u64, back: u64) -> Document {
    use linerate_report::stamp::{StampLoss, StampReport, STAMP};
    Document::Stamp(Box::new(StampReport {
        test: STAMP.into(),
        protocol: Default::default(),
        started_at: 0.0,
        target: "b".into(),
        address: "192.0.2.2:862".into(),
        mode: "open".into(),
        rate_pps: 10.0,
        size: 60,
        duration_s: 60.0,
        sent,
        answered: sent - out - back,
        duplicates: 0,
        reordered: 0,
        unmatched: 0,
        loss: StampLoss::of(
            sent,
            sent - out - back,
            Some((out, back, 0)),
            "direct".into(),
        ),
        rtt_us: LatencySummary {
            count: 10,
            p50: 400.0,
            mean: 400.0,
            ..LatencySummary::default()
        },
        // Ten round trips in the bucket up to 500 us.
        rtt_histogram: (0..17).map(|i| if i == 5 { 10 } else { 0 }).collect(),
        kernel_sent_times: 10,
        reflector_hold_us: None,
        rtt_jitter_us: 0.0,
        // Out: the clocks vouched for the one-way delay; back: withheld.
        forward: linerate_report::stamp::OneWay {
            delay_us: Some(linerate_report::stamp::DelayFigures {
                p50: 200.0,
                p99: 300.0,
                ..Default::default()
            }),
            // Eight up to 250 us, two up to 500 us.
            histogram: (0..17)
                .map(|i| match i {
                    4 => 8,
                    5 => 2,
                    _ => 0,
                })
                .collect(),
            sum_us: 2_000.0,
            ..Default::default()
        },
        reverse: linerate_report::stamp::OneWay {
            withheld: Some("unsynchronised".into()),
            ..Default::default()
        },
        clocks: Default::default(),
        hops: None,
        reflector_stateful: None,
        unrecognized_tlvs: Vec::new(),
        marks: None,
        intervals: Vec::new(),
        impossible_timestamps: 0,
        unreadable_answers: 0,
        short_answers: 0,
        warnings: Vec::new(),
        error: None,
        interrupted_after_s: None,
        host: None,
        call: None,
    }))
}

/// A call's MOS is held to `mos_below` over `mos_for` as loss is to its bound: one poor
/// call among good ones stays above it, a way that keeps scoring under it opens an alert
/// for that way alone, and it resolves once the poor calls have left the span.
#[test]
fn a_way_whose_calls_keep_scoring_under_the_bound_opens_an_alert_for_that_way() {
    let t = Thresholds {
        mos_below: 3.6,
        mos_for_s: 300.0,
        ..Thresholds::default()
    };
    let board = Arc::new(Mutex::new(Board::default()));
    board.lock().unwrap().declare("call", Measure::Mos);
    let mut alerts = crate::alerts::Alerts::default();
    let mut changes = Vec::new();
    let call = |at: f64,
                out: f64,
                back: f64,
                alerts: &mut crate::alerts::Alerts,
                changes: &mut Vec<(f64, String, crate::alerts::Change)>| {
        let mut b = board.lock().unwrap();
        let mut keys = Vec::new();
        for (direction, mos) in [("forward", out), ("reverse", back)] {
            let mut r = row("a", "b", "call", true, mos, at);
            r.protocol = "udp".into();
            r.direction = direction.into();
            let figures = crate::board::Figures {
                mos: Some(mos),
                duration_s: 10.0,
                ..Default::default()
            };
            b.record_figures(&r, Some(&figures));
            keys.push(crate::board::Key::of(&r));
        }
        for key in keys {
            let series = &b.series[&key];
            let a = assess(series, &t);
            assert_eq!(a.measure, Measure::Mos);
            if let Some(change) = alerts.update(&key, &a, series.latest.value, at, &t) {
                changes.push((at, key.direction.clone(), change));
            }
        }
    };
    // A call a minute. Five good ones, then one poor way out (2.5): over five minutes a
    // mean of 4.18, above the bound; nothing opens.
    for at in [60.0, 120.0, 180.0, 240.0, 300.0] {
        call(at, 4.4, 4.4, &mut alerts, &mut changes);
    }
    call(360.0, 2.5, 4.4, &mut alerts, &mut changes);
    assert!(changes.is_empty(), "{changes:?}");
    // The way out keeps scoring 3.0: the mean of the last five minutes' calls falls under
    // 3.6 at the second (4.4, 4.4, 2.5, 3.0, 3.0: 3.46), that way alone.
    for at in [420.0, 480.0, 540.0] {
        call(at, 3.0, 4.4, &mut alerts, &mut changes);
    }
    assert_eq!(changes.len(), 1, "{changes:?}");
    let (at, direction, change) = &changes[0];
    assert_eq!((*at, direction.as_str()), (480.0, "forward"));
    let crate::alerts::Change::Opened(alert) = change else {
        panic!("{change:?}");
    };
    assert_eq!(alert.name(), "LinerateMosBelow");
    let json = crate::alerts::alertmanager_json(alert, None, 600.0);
    assert_eq!(json["labels"]["direction"], "forward");
    assert_eq!(
        json["annotations"]["summary"].as_str().unwrap(),
        "call: a -> b scores MOS 3.46 over 5m (below 3.60), the way out of a's call to b"
    );
    // Good again: open while the span's mean stays under the bound (3.56 at 660 s),
    // resolved at 720 s (3.0, 3.0 and three good calls: 3.84).
    for at in [600.0, 660.0] {
        call(at, 4.4, 4.4, &mut alerts, &mut changes);
    }
    assert_eq!(changes.len(), 1, "{changes:?}");
    call(720.0, 4.4, 4.4, &mut alerts, &mut changes);
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert!(
        matches!(changes[1], (at, ref d, crate::alerts::Change::Resolved(_)) if at == 720.0 && d == "forward"),
        "{changes:?}"
    );
    // The exposition carries each way's score.
    let text = Exposition::new(board.clone()).render(Format::OpenMetrics);
    assert!(text.contains("linerate_call_mos{mesh=\"m\",src=\"a\",dst=\"b\",test=\"call\",direction=\"reverse\",protocol=\"udp\"} 4.4"), "{text}");
}

/// A STAMP window makes two series, the pair's way out and its way back, each with its
/// own loss. Loss is held to `loss_above` over the last `for`, not window by window: one
/// bad window among clean ones stays under it, a steady loss opens an alert for its own
/// direction alone, naming it, and the alert resolves once the lossy windows have left
/// the span.
#[test]
fn steady_loss_one_way_opens_an_alert_for_that_way_after_its_time() {
    let t = Thresholds {
        loss_above: 0.0005,
        loss_for_s: 300.0,
        ..Thresholds::default()
    };
    let board = Arc::new(Mutex::new(Board::default()));
    board.lock().unwrap().declare("loss", Measure::Loss);
    let mut alerts = crate::alerts::Alerts::default();
    let mut changes = Vec::new();
    let window = |at: f64,
                  out: u64,
                  back: u64,
                  alerts: &mut crate::alerts::Alerts,
                  changes: &mut Vec<(f64, String, crate::alerts::Change)>| {
        let mut b = board.lock().unwrap();
        let mut r = row("a", "b", "loss", true, 0.0, at);
        r.protocol = "udp".into();
        let keys = b.record(&r, Some(&stamp(600, out, back)));
        assert_eq!(keys.len(), 2);
        for key in keys {
            let series = &b.series[&key];
            let a = assess(series, &t);
            if let Some(change) = alerts.update(&key, &a, series.latest.value, at, &t) {
                changes.push((at, key.direction.clone(), change));
            }
        }
    };
    // A minute's windows of 600 probes. Five clean ones, then one with 1 of 600 lost back
    // (0.17 %): over five minutes 0.033 %, under the bound; nothing opens.
    for at in [60.0, 120.0, 180.0, 240.0, 300.0] {
        window(at, 0, 0, &mut alerts, &mut changes);
    }
    window(360.0, 0, 1, &mut alerts, &mut changes);
    for at in [420.0, 480.0, 540.0, 600.0, 660.0] {
        window(at, 0, 0, &mut alerts, &mut changes);
    }
    assert!(changes.is_empty(), "{changes:?}");
    // 2 of 600 lost back (0.33 %) for three windows: 0.067 % over five minutes at the
    // first, open then, back only.
    for at in [720.0, 780.0, 840.0] {
        window(at, 0, 2, &mut alerts, &mut changes);
    }
    assert_eq!(changes.len(), 1, "{changes:?}");
    let (at, direction, change) = &changes[0];
    assert_eq!((*at, direction.as_str()), (720.0, "reverse"));
    let crate::alerts::Change::Opened(alert) = change else {
        panic!("{change:?}");
    };
    assert_eq!(alert.name(), "LinerateLossAbove");
    let json = crate::alerts::alertmanager_json(alert, None, 800.0);
    assert_eq!(json["labels"]["direction"], "reverse");
    let summary = json["annotations"]["summary"].as_str().unwrap();
    assert_eq!(
        summary,
        "loss: b -> a loses 0.067% over 5m (above 0.050%), the way back of a's probes to b"
    );
    // Clean again: open while the five minutes hold lossy windows over the bound (one of
    // five at 1080 s: 0.067 %), resolved once the last has left them (1140 s).
    for at in [900.0, 960.0, 1020.0, 1080.0] {
        window(at, 0, 0, &mut alerts, &mut changes);
    }
    assert_eq!(changes.len(), 1, "{changes:?}");
    window(1140.0, 0, 0, &mut alerts, &mut changes);
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert!(
        matches!(changes[1], (at, ref d, crate::alerts::Change::Resolved(_)) if at == 1140.0 && d == "reverse"),
        "{changes:?}"
    );
    // The exposition carries the loss each way.
    let text = Exposition::new(board.clone()).render(Format::OpenMetrics);
    assert!(text.contains("linerate_loss_ratio{mesh=\"m\",src=\"a\",dst=\"b\",test=\"loss\",direction=\"reverse\",protocol=\"udp\"} 0"), "{text}");
    // The added delay each way is there always; the one-way delay only where the clocks
    // vouched for it (out, not back).
    assert!(text.contains("linerate_last_one_way_added_delay_seconds{mesh=\"m\",src=\"a\",dst=\"b\",test=\"loss\",direction=\"reverse\",protocol=\"udp\",stat=\"p99\"}"), "{text}");
    assert!(text.contains("linerate_last_one_way_delay_seconds{mesh=\"m\",src=\"a\",dst=\"b\",test=\"loss\",direction=\"forward\",protocol=\"udp\",stat=\"p50\"} 0.0002"), "{text}");
    assert!(!text.contains("linerate_last_one_way_delay_seconds{mesh=\"m\",src=\"a\",dst=\"b\",test=\"loss\",direction=\"reverse\""), "{text}");
    // Every probe's delay, in the histogram: nineteen windows of ten, the buckets
    // cumulative (nothing up to 100 us, all up to the 500 us bound), `_count` equal to
    // +Inf.
    let line = |suffix: &str, le: &str| {
        format!("linerate_one_way_delay_seconds{suffix}{{{le}mesh=\"m\",src=\"a\",dst=\"b\",test=\"loss\",direction=\"forward\",protocol=\"udp\"}}")
    };
    for (bucket, want) in [("0.0001", 0), ("0.0005", 190), ("+Inf", 190)] {
        let l = line("_bucket", &format!("le=\"{bucket}\","));
        assert!(text.contains(&format!("{l} {want}")), "{l} {want}: {text}");
    }
    assert!(
        text.contains(&format!("{} 190", line("_count", ""))),
        "{text}"
    );
    assert!(
        text.contains(&format!("{} 0.038", line("_sum", ""))),
        "{text}"
    );
    assert!(!text.contains("linerate_one_way_delay_seconds_count{mesh=\"m\",src=\"a\",dst=\"b\",test=\"loss\",direction=\"reverse\""), "{text}");
    // The round trips, in the rr histogram's family, consistent too.
    assert!(text.contains("linerate_rtt_seconds_count{mesh=\"m\",src=\"a\",dst=\"b\",test=\"loss\",direction=\"forward\",protocol=\"udp\"} 190"), "{text}");
}

/// A reflector's counts are written as counters by reason, in both formats.
#[test]
fn reflector_counts_are_counters_by_reason() {
    let board = Arc::new(Mutex::new(Board::default()));
    board.lock().unwrap().reflectors = vec![(
        crate::board::Reflector::Stamp,
        crate::board::ReflectorSource(Arc::new(|| crate::board::ReflectorCounts {
            answered: 7,
            refused: vec![("source_rate", 3), ("denied", 0)],
            sessions: 2,
        })),
    )];
    let text = Exposition::new(board.clone()).render(Format::OpenMetrics);
    assert!(
        text.contains("linerate_stamp_answered_packets_total 7\n"),
        "{text}"
    );
    assert!(text.contains("linerate_stamp_refused_packets_total{reason=\"source_rate\"} 3\n"));
    assert!(text.contains("linerate_stamp_sessions 2\n"));
    let classic = Exposition::new(board).render(Format::Classic);
    assert!(
        classic.contains("# TYPE linerate_stamp_answered_packets_total counter"),
        "{classic}"
    );
}

/// A coordinator's queues are written as they are now: the store's spool as gauges, what
/// was lost anywhere as counters; a queue that is not there has no line.
#[test]
fn a_coordinators_queues_are_gauges_and_their_losses_counters() {
    use crate::board::{ProcessCounts, ProcessSource, StoreCounts};
    let board = Arc::new(Mutex::new(Board::default()));
    board.lock().unwrap().process = Some(ProcessSource(Arc::new(|| ProcessCounts {
        store: Some(StoreCounts {
            waiting: 12,
            waiting_bytes: 4096,
            oldest_waiting_s: 61.5,
            writing: false,
            write_failures: 4,
            replayed: 30,
            dropped_documents: 2,
            dropped_results: 0,
        }),
        remote_write_dropped: None,
        notifications_dropped: Some(1),
    })));
    let text = Exposition::new(board.clone()).render(Format::OpenMetrics);
    for line in [
        "# TYPE linerate_store_writing gauge\nlinerate_store_writing 0\n",
        "linerate_store_waiting_results 12\n",
        "linerate_store_waiting_bytes 4096\n",
        "linerate_store_oldest_waiting_seconds 61.5\n",
        "# TYPE linerate_store_write_failures counter\nlinerate_store_write_failures_total 4\n",
        "linerate_store_replayed_results_total 30\n",
        "linerate_store_dropped_documents_total 2\n",
        "linerate_store_dropped_results_total 0\n",
        "linerate_alert_notifications_dropped_total 1\n",
    ] {
        assert!(text.contains(line), "{line}: {text}");
    }
    assert!(!text.contains("remote_write"), "{text}");
    assert!(text.ends_with("# EOF\n"));
    let classic = Exposition::new(board).render(Format::Classic);
    assert!(
        classic.contains("# TYPE linerate_store_write_failures_total counter\n"),
        "{classic}"
    );
}

/// A group an agent ran: a UDP stream's goodput is what its peer received over the timed
/// transaction, its loss what the peer did not; a stream read from the peer runs from
/// it; an rr group has its round trips and no goodput; a group that timed nothing has
/// no row.
#[test]
fn an_agents_group_is_counted_by_what_its_receiver_counted() {
    use crate::served;
    use linerate_model::ServedGroup;
    let transaction = |op: &str, bytes: u64, peer_bytes: u64| {
        let mut t = TransactionFigures {
            iterations: 1_000,
            elapsed_s: 2.0,
            ops: vec![OpFigures {
                op: op.into(),
                bytes,
                peer_bytes,
                ..OpFigures::default()
            }],
            ..TransactionFigures::default()
        };
        t.latency_us.count = 1_000;
        t.latency_us.p50 = 150.0;
        t
    };
    let group = |kind: &'static str, sends: bool, protocol: &'static str, t: TransactionFigures| {
        ServedGroup {
            local: "10.0.0.1".parse().unwrap(),
            peer: Some("10.0.0.2:5201".into()),
            kind,
            sends,
            protocol,
            timed: Some(0),
            result: GroupResult {
                elapsed_s: 2.1,
                transactions: vec![t],
                ..GroupResult::default()
            },
            ended_at: 100.0,
        }
    };
    let udp = group(
        "stream",
        true,
        "udp",
        transaction("sendto", 1_000_000, 990_000),
    );
    let (row, figures) = served::rows_of_group(&udp).unwrap();
    assert_eq!(
        (row.src.as_str(), row.dst.as_str()),
        ("10.0.0.1", "10.0.0.2")
    );
    assert_eq!(
        (row.test.as_str(), row.direction.as_str()),
        ("stream", "forward")
    );
    assert_eq!(figures.goodput_bps, Some(990_000.0 * 8.0 / 2.0));
    assert!((figures.loss_ratio.unwrap() - 0.01).abs() < 1e-12);
    assert!(matches!(row.outcome, Outcome::Ok));

    let reverse = group(
        "stream",
        false,
        "tcp",
        transaction("read", 4_000_000, 4_000_000),
    );
    let (row, figures) = served::rows_of_group(&reverse).unwrap();
    assert_eq!(
        (row.src.as_str(), row.dst.as_str()),
        ("10.0.0.2", "10.0.0.1")
    );
    assert_eq!(row.direction, "reverse");
    assert_eq!(figures.goodput_bps, Some(16e6));
    assert_eq!(figures.loss_ratio, None);

    let rr = group("rr", true, "tcp", transaction("write", 1_000, 1_000));
    let (row, figures) = served::rows_of_group(&rr).unwrap();
    assert_eq!(row.test, "rr");
    assert_eq!(figures.goodput_bps, None);
    let rtt = figures.rtt.unwrap();
    assert_eq!((rtt.count, rtt.quantiles.p50), (1_000, 150e-6));

    let mut failed = rr.clone();
    failed.result.failures = vec!["peer 10.0.0.2 did not report".into()];
    let (row, _) = served::rows_of_group(&failed).unwrap();
    assert!(matches!(row.outcome, Outcome::Failed { .. }), "{row:?}");

    let mut untimed = rr;
    untimed.timed = None;
    assert!(served::rows_of_group(&untimed).is_none());
}

/// A store's past as a test states it: the hours it was asked for, and what it answers.
struct FakePast {
    asked: Mutex<Vec<(Key, f64)>>,
}

impl crate::past::PastSource for FakePast {
    fn hourly(&self, key: &Key, since: f64) -> Result<Vec<crate::past::HourPoint>, String> {
        use crate::past::{HourPoint, Kept};
        self.asked.lock().unwrap().push((key.clone(), since));
        if key.dst == "broken" {
            return Err("the store is down".into());
        }
        let point = |at: f64, median: f64, kept| HourPoint {
            at,
            count: 4,
            ok: 3,
            min: Some(median / 2.0),
            median: Some(median),
            max: Some(median * 2.0),
            kept,
        };
        Ok(vec![
            point(7200.0, 1e9, Kept::Aggregate),
            point(10_800.0, 2e9, Kept::Aggregate),
            point(14_400.0, 3e9, Kept::Rows),
        ])
    }
}

/// One GET over a fresh connection: the status line's code and the body.
fn http_get(addr: std::net::SocketAddr, target: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let code = text[9..12].parse().unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (code, body)
}

#[test]
fn the_plot_over_days_reads_hours_from_the_store_and_says_which_are_aggregates() {
    let board = Arc::new(Mutex::new(Board::default()));
    board
        .lock()
        .unwrap()
        .record(&row("a", "b", "tput", true, 8e9, 10.0), Some(&stream(8e9)));
    board.lock().unwrap().record(
        &row("a", "broken", "tput", true, 8e9, 10.0),
        Some(&stream(8e9)),
    );
    let past = Arc::new(FakePast {
        asked: Mutex::new(Vec::new()),
    });
    let listening = server::start(
        "127.0.0.1:0".parse().unwrap(),
        board.clone(),
        "m",
        Thresholds::default(),
        Some(past.clone()),
    )
    .unwrap();
    let addr = listening.addr;
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let (code, body) = http_get(addr, "/api/history?test=tput&src=a&dst=b&days=30");
    assert_eq!(code, 200, "{body}");
    let h: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        h.get("points").is_none(),
        "hours in place of the board's points"
    );
    assert_eq!(h["hourly"].as_array().unwrap().len(), 3);
    assert_eq!(h["hourly"][0]["kept"], "aggregate");
    assert_eq!(h["hourly"][2]["kept"], "rows");
    assert_eq!(h["hourly"][2]["median"], 3e9);
    // The aggregates end where the newest of them ends; the rows follow.
    assert_eq!(h["aggregates_until"], 14_400.0);
    assert_eq!(h["days"], 30);
    assert_eq!(h["key"]["dst"], "b");
    let asked = past.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(
        (asked[0].0.src.as_str(), asked[0].0.dst.as_str()),
        ("a", "b")
    );
    let span = before - asked[0].1;
    assert!(
        (30.0 * 86_400.0 - 60.0..=30.0 * 86_400.0).contains(&span),
        "{span}"
    );
    // Without days: the board's recent points, the store not asked.
    let (code, body) = http_get(addr, "/api/history?test=tput&src=a&dst=b");
    assert_eq!(code, 200);
    assert!(body.contains("\"points\""), "{body}");
    assert_eq!(past.asked.lock().unwrap().len(), 1);
    // A span out of bounds, a pair the board does not know and a store that fails are
    // each one clear line, and the listener serves on.
    for (target, says) in [
        ("/api/history?test=tput&src=a&dst=b&days=0", "days=0"),
        ("/api/history?test=tput&src=a&dst=b&days=401", "days=401"),
        ("/api/history?test=tput&src=a&dst=b&days=x", "days=x"),
        ("/api/history?test=tput&src=a&dst=z&days=7", "no series"),
        (
            "/api/history?test=tput&src=a&dst=broken&days=7",
            "the store is down",
        ),
    ] {
        let (code, body) = http_get(addr, target);
        assert_eq!(code, 400, "{target}: {body}");
        assert!(
            body.contains(says) && body.lines().count() == 1,
            "{target}: {body}"
        );
    }
    assert_eq!(http_get(addr, "/api/grid").0, 200);
}

#[test]
fn a_plot_span_is_whole_days_within_bounds() {
    use crate::past::{days_of, MAX_DAYS};
    assert_eq!(days_of("test=a&src=b&dst=c"), Ok(None));
    assert_eq!(days_of("days=1&test=a"), Ok(Some(1)));
    assert_eq!(days_of(&format!("days={MAX_DAYS}")), Ok(Some(MAX_DAYS)));
    for bad in ["days=0", "days=-1", "days=1.5", "days=", "days=99999999999"] {
        assert!(days_of(bad).is_err(), "{bad}");
    }
}

/// Compares `text` with the golden file `name` under `tests/golden/`; with
/// `LINERATE_BLESS=1` writes it instead (an output changed on purpose). A missing file
/// fails: a golden test never passes without its reference.
fn golden(name: &str, text: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("LINERATE_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        return;
    }
    let kept = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (LINERATE_BLESS=1 cargo test -p linerate-metrics golden writes it)",
            path.display()
        )
    });
    if kept != text {
        let differs = kept
            .lines()
            .zip(text.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(kept.lines().count().min(text.lines().count()));
        panic!(
            "{} differs from this output at line {}:\n  kept: {:?}\n  made: {:?}\n(an output changed on purpose: LINERATE_BLESS=1 cargo test -p linerate-metrics golden)",
            path.display(),
            differs + 1,
            kept.lines().nth(differs),
            text.lines().nth(differs)
        );
    }
}

/// One cycle of a mesh with a row of every kind and every outcome (a stream, a failed
/// stream, rr, RPM, STAMP each way, a trace, a skipped and an interrupted job): the
/// scrape in both text formats, the grid and a pair's history, byte for byte as the
/// golden files keep them. Nothing in them is random or read from a clock, so any
/// difference is a change of what users see: a refactor must leave them alone.
#[test]
fn one_mesh_cycle_renders_byte_for_byte_as_its_golden_files() {
    let board = Arc::new(Mutex::new(Board::default()));
    {
        let mut b = board.lock().unwrap();
        b.declare("owd", Measure::Loss);
        b.record(&row("a", "b", "tput", true, 8e9, 10.0), Some(&stream(8e9)));
        b.record(&row("b", "a", "tput", false, 0.0, 11.0), None);
        b.record(&row("a", "b", "lat", true, 1e-4, 12.0), Some(&rr()));
        b.record(
            &row("a", "b", "rpm", true, 1500.0, 13.0),
            Some(&rpm(1500.0)),
        );
        let mut probes = row("a", "b", "owd", true, 0.0, 14.0);
        probes.protocol = "udp".into();
        b.record(&probes, Some(&stamp(600, 3, 0)));
        let mut path = row("a", "b", "path", true, 4.0, 15.0);
        path.protocol = "udp".into();
        b.record(&path, Some(&trace("10.0.2.2")));
        let mut skipped = row("b", "a", "lat", false, 0.0, 16.0);
        skipped.outcome = Outcome::Skipped {
            reason: "b is down since 11.0 (agent: refused)".into(),
        };
        b.record(&skipped, None);
        let mut interrupted = row("b", "a", "rpm", false, 0.0, 17.0);
        interrupted.outcome = Outcome::Interrupted {
            reason: "the coordinator was stopped".into(),
        };
        b.record(&interrupted, None);
    }
    let t = Thresholds::default();
    golden(
        "one_cycle.openmetrics",
        &openmetrics::encode(board.clone(), Format::OpenMetrics),
    );
    golden(
        "one_cycle.prom",
        &openmetrics::encode(board.clone(), Format::Classic),
    );
    let b = board.lock().unwrap();
    let pretty = |v: serde_json::Value| serde_json::to_string_pretty(&v).unwrap() + "\n";
    let grid: serde_json::Value = serde_json::from_str(&grid::grid_json(&b, &t)).unwrap();
    golden("one_cycle.grid.json", &pretty(grid));
    let history = grid::history_json(&b, "test=lat&src=a&dst=b", &t).unwrap();
    golden("one_cycle.history.json", &pretty(history));
}

/// A multicast job's rows, one per receiver, are each their pair's loss series: the share
/// of the source's datagrams that receiver never got, by the source's own count (b got
/// all 1,000, c 900, d nothing at all), in the exposition as three series of a.
#[test]
fn a_multicast_jobs_receivers_are_each_their_pairs_loss() {
    use linerate_report::multicast::MulticastReport;
    let sent: linerate_model::multicast::MulticastSent =
        serde_json::from_value(serde_json::json!({
            "group": "239.1.1.1", "groups": 1, "port": 5001, "ttl": 1, "interface": null,
            "local": "10.0.0.1:40000", "length": 1000, "rate_bps": 2000000, "datagrams": 1000,
            "bytes": 1000000, "send_errors": 0, "duration_s": 4.0, "sent_bps": 2e6, "finals": 10
        }))
        .unwrap();
    let received = |got: u64| {
        serde_json::from_value::<linerate_model::multicast::MulticastStream>(serde_json::json!({
            "group": "239.1.1.1", "port": 5001, "source": null, "sender": "10.0.0.1:40000",
            "datagrams": got, "bytes": got * 1000, "lost": 1000 - got, "expected": 1000,
            "loss_percent": (1000 - got) as f64 / 10.0, "out_of_order": 0, "duplicates": 0,
            "foreign": 0, "jitter_ms": 0.1, "duration_s": 4.0, "received_bps": 2e6,
            "join_latency_ms": 1000.0, "one_way_delay": {"state": "withheld", "reason": "clocks"},
            "added_delay_ms": 0.0, "ended": "final"
        }))
        .unwrap()
    };
    let mut board = Board::default();
    for (dst, got) in [("b", Some(1000)), ("c", Some(900)), ("d", None)] {
        let document = Document::Multicast(Box::new(MulticastReport {
            received: got.map(|g| Box::new(received(g))),
            receiver: Some(dst.into()),
            receivers: Vec::new(),
            ..MulticastReport::sender(sent.clone(), 100.0)
        }));
        let (figure, text) =
            linerate_report::headline::of(&document, linerate_model::measure::Headline::Loss);
        let mut kept = row("a", dst, "channel", true, figure.unwrap(), 110.0);
        kept.protocol = "udp".into();
        kept.headline_text = text;
        board.record(&kept, Some(&document));
    }
    let text = Exposition::new(Arc::new(Mutex::new(board))).render(Format::OpenMetrics);
    for (dst, loss) in [("b", "0.0"), ("c", "0.1"), ("d", "1.0")] {
        let series = format!("linerate_loss_ratio{{mesh=\"m\",src=\"a\",dst=\"{dst}\",test=\"channel\",direction=\"forward\",protocol=\"udp\"}} {loss}\n");
        assert!(text.contains(&series), "{series} not in {text}");
    }
}

/// A call's ways carry their Quality of Outcome, where the receivers timed every
/// datagram, to the board's figures each way (the `linerate_qoo_score` gauge).
#[test]
fn a_calls_quality_of_outcome_is_each_ways_figure() {
    use linerate_report::model::{CallSummary, CallWay};
    let requirement = linerate_model::qoo::Requirement::voice();
    let way = |direction, qoo: Option<f64>| CallWay {
        direction,
        received: 490,
        lost: 10,
        late: 0,
        loss_events: 10,
        unplayed_runs: 10,
        silent: 0,
        one_way_delay_ms: Some(20.0),
        one_way_delay_us: None,
        qoo: qoo.map(|score| linerate_model::qoo::QooScore {
            requirement: requirement.clone(),
            score,
            latency: 100.0,
            loss: score,
            throughput: 100.0,
            worst_percentile: Some(99.0),
        }),
        jitter_ms: 0.1,
        jitter_buffer_ms: None,
        score: linerate_model::call::CallScore {
            mouth_to_ear_ms: 80.0,
            loss_pct: 2.0,
            burst_ratio: 1.0,
            delay_impairment: 0.5,
            loss_impairment: Some(10.0),
            r: Some(83.0),
            mos: Some(4.1),
        },
    };
    let report = client_report(
        linerate_model::StreamTransport::Udp {
            length: None,
            pps: None,
            gso: false,
            gro: false,
        },
        linerate_report::Summary {
            duration_s: 10.0,
            call: Some(CallSummary {
                codec: linerate_model::call::Codec::G711,
                jitter_buffer_ms: 60,
                adaptive: false,
                ways: vec![
                    way(linerate_model::Direction::Forward, Some(88.9)),
                    way(linerate_model::Direction::Reverse, None),
                ],
            }),
            ..Default::default()
        },
    );
    let (out, back) = crate::board::call_figures(&report).expect("a call");
    assert_eq!(out.qoo, Some(88.9));
    assert_eq!(back.qoo, None);
    assert_eq!(out.loss_ratio, Some(10.0 / 500.0));
}
