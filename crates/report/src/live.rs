//! What a running test tells whoever shows it, as it happens: the server it reached,
//! that it started, each interval of this side's figures. Drivers send these; sinks and
//! commands show them.

use crate::iperf3_json::StreamFacts;
use crate::{HostFacts, SideInterval};

/// What the client tells its caller while a test runs.
#[derive(Debug, Clone)]
pub enum TestUpdate {
    /// Connected; the server's facts.
    Connected { server: Box<HostFacts> },
    /// The data connections are open and the test has started.
    Started,
    /// An interval of this side's own figures.
    Interval(Box<SideInterval>),
    /// An iperf3 test's streams are open (iperf3 clients only, before `Started`): what
    /// `--json-stream`'s start line says of them.
    Iperf3Streams {
        cookie: String,
        control_mss: u32,
        streams: Box<StreamFacts>,
    },
}
