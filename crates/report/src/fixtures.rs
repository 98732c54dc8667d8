//! Test fixtures shared by the report's modules: a test's configuration and a flow's
//! figures, filled with plain values.

use linerate_model::{Direction, FlowSide, Role, TestConfig};

pub(crate) fn config(direction: Direction, parallel: u32) -> TestConfig {
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
        target: "loopback".into(),
        port: 5201,
        direction,
        parallel,
        threads: 1,
        time_s: 10.0,
        omit_s: 0.0,
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

pub(crate) fn flow(id: u32, role: Role, bytes: u64, seconds: f64, retransmits: u64) -> FlowSide {
    FlowSide {
        id,
        direction: Direction::Forward,
        role,
        local_addr: String::new(),
        remote_addr: String::new(),
        window_bytes: bytes,
        window_s: seconds,
        bytes_total: bytes + 100,
        retransmits,
        sndbuf: 0,
        rcvbuf: 0,
        mss: 1448,
        rtt_us: 50,
        congestion: "cubic".into(),
        error: None,
        udp: None,
        datagrams_total: 0,
        transactions: 0,
        transactions_total: 0,
        classes: None,
        frames: None,
        one_way_delay_us: None,
        ecn: false,
        mptcp: None,
    }
}

/// A report of `config` with every figure at zero.
pub(crate) fn report(config: TestConfig) -> crate::model::Report {
    crate::model::Report {
        tool: "linerate test".into(),
        test: config.test_name(),
        started_at: 0.0,
        config,
        host: Default::default(),
        intervals: Vec::new(),
        flows: Vec::new(),
        summary: Default::default(),
        warnings: Vec::new(),
        repetition: None,
        copy: None,
        observe: None,
        interrupted: None,
    }
}
