//! Plain results for the campaign's unit tests.

use linerate_model::{StreamRequest, StreamTransport, TestConfig, TestKind, TestRequest};
use linerate_report::Report;

/// A TCP stream test's configuration with every default.
pub(crate) fn stream_config() -> TestConfig {
    let request = TestRequest::new(TestKind::Stream(StreamRequest {
        direction: linerate_model::Direction::Forward,
        rate_bps: None,
        transport: StreamTransport::Tcp {
            length: None,
            mss: None,
            nodelay: false,
        },
    }));
    let here = linerate_model::Environment {
        cpus: 2,
        udp_length: Some(1472),
    };
    TestConfig::resolve(&request, &here).unwrap()
}

/// A report of `config` whose receiver counted `receiver_bps`.
pub(crate) fn report_of(config: TestConfig, receiver_bps: f64) -> Report {
    let mut summary = linerate_report::Summary {
        duration_s: config.time_s,
        receiver_bps,
        sender_bps: receiver_bps,
        flows: config.parallel,
        ..Default::default()
    };
    summary.receiver_bytes = (receiver_bps * config.time_s / 8.0) as u64;
    Report {
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

/// One interval of a sender's figures.
pub(crate) fn sent_interval(start: f64, end: f64, bytes: u64) -> linerate_model::SideInterval {
    linerate_model::SideInterval {
        start,
        end,
        sent_bytes: bytes,
        sent_bps: bytes as f64 * 8.0 / (end - start),
        ..Default::default()
    }
}
