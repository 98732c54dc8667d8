//! What the acceptor and the protocol handlers share: the server's configuration, the
//! state every connection may consult (limits, the test registry, the operator's log,
//! the rate book), and small helpers for tokens and log lines. Handlers import this,
//! never the acceptor.

use crate::access::{self, AccessPolicy, Gate, LogFormat, OperatorLog, RateBook};
use crate::iperf3_auth::Iperf3Auth;
use linerate_proto::auth::Key;
use linerate_proto::{Limits, Timeouts, Token};
use linerate_report::units::{format_rate, Scale};
use linerate_report::{HostFacts, Role, SideResult};
use std::collections::HashMap;
use std::io::{self};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How a server is set up.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub limits: Limits,
    /// Worker threads per test (capped by its flow count); `None`: [`default_threads`].
    pub threads: Option<usize>,
    pub timeouts: Timeouts,
    /// How long receivers wait for a sender's last bytes after the end.
    pub drain: Duration,
    /// Log test starts and ends to stderr.
    pub log: bool,
    /// Hears the report of every iperf3 and iperf 2 test served to its end, to keep it.
    pub foreign_reports: Option<ReportKeeper>,
    /// Hears this side's result of every native test served to its end, and of every
    /// group its agent ran (`serve --metrics`).
    pub served_tests: Option<ServedTestHook>,
    /// When set, every native client, agent and mirror must prove it holds this key.
    pub key: Option<Key>,
    /// iperf3 clients' RSA authentication (`--rsa-private-key-path`,
    /// `--authorized-users-path`); when set, every iperf3 client must authenticate.
    pub iperf3_auth: Option<Arc<Iperf3Auth>>,
    /// Who may connect, and how many connections each may hold.
    pub access: AccessPolicy,
    /// The most bits per second the running tests of one client address may ask for
    /// together (`--max-rate-per-ip`).
    pub max_rate_per_ip: Option<u64>,
    pub log_format: LogFormat,
    /// The file service (`--files DIR`): copy sessions are refused without it.
    pub files: Option<Arc<linerate_transfer::service::FileService>>,
    /// Whether encrypted tests run here (`--no-tls`, `--require-tls`).
    pub tls_mode: crate::secure::TlsMode,
    /// The certificate encrypted tests present (`--cert`, `--cert-key`, or self-signed).
    pub tls_identity: Arc<crate::secure::ServerIdentity>,
    /// The files a profile's sendfile operations may send from this host: those the
    /// controller listed for its own in-process server. Empty for `linerate serve`, which
    /// never sends its files on a peer's word.
    pub sendable_files: Arc<std::collections::BTreeSet<String>>,
    /// Listen with IPPROTO_MPTCP (`--mptcp`): MPTCP clients get MPTCP connections, whose
    /// subflows the path manager adds; plain TCP clients fall back to TCP.
    pub mptcp: bool,
    /// How iperf 2 clients are served (`serve`'s iperf 2 options).
    pub iperf2: Iperf2Serving,
    /// Clients read this host's clock (`--same-clock`: network namespaces of one host, a
    /// lab): one-way delays need no time source then.
    pub same_clock: bool,
}

/// How a server serves iperf 2 clients: `serve`'s iperf 2 options, read from the command
/// line once and carried whole to the tests (an option is a field here and its flag).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Iperf2Serving {
    /// Serve iperf 2 clients on this port of the listening address (`--iperf2-port`);
    /// `None`: not at all.
    pub port: Option<u16>,
    /// The operator named the port: a port this server cannot have is an error, not a
    /// line in the log.
    pub port_chosen: bool,
    /// Log each iperf 2 `--trip-times` test's latencies as iperf 2's server prints its
    /// histograms (`--histograms`), in these bins.
    pub histograms: Option<linerate_report::iperf2_text::HistogramBins>,
    /// With the histograms, each UDP test's of every interval this long too
    /// (`--histogram-interval`).
    pub histogram_interval: Option<Duration>,
}

impl Iperf2Serving {
    /// iperf 2 on the port the flags ask (`--iperf2-port`, `--no-iperf2`), with the
    /// server's key (`keyed`) and its multicast receivers' port (`join_port`) in mind;
    /// no histograms.
    pub fn on_port(
        asked: Option<u16>,
        refused: bool,
        keyed: bool,
        join_port: Option<u16>,
    ) -> Iperf2Serving {
        let (port, port_chosen) = served_port(asked, refused, keyed, join_port);
        Iperf2Serving {
            port,
            port_chosen,
            ..Iperf2Serving::default()
        }
    }

    /// The interval histograms asked, where histograms are.
    pub fn histogram_interval(&self) -> Option<Duration> {
        self.histogram_interval
            .filter(|_| self.histograms.is_some())
    }
}

pub use linerate_model::{Served, ServedGroup, ServedTest};

/// What a [`ServedTestHook`] calls.
pub type HearServed = dyn Fn(Served<'_>) + Send + Sync;

/// Hears every native test served to its end, and every profile group an agent ran.
#[derive(Clone)]
pub struct ServedTestHook(pub Arc<HearServed>);

impl std::fmt::Debug for ServedTestHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServedTestHook")
    }
}

/// Takes a finished test's report (with the client's tool and the server's test id). An
/// iperf3 or iperf 2 client keeps no linerate result of its own, so the server hands its
/// tests over to be kept.
#[derive(Clone)]
pub struct ReportKeeper(pub Arc<KeepReport>);

/// Which foreign client a kept test served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServedTool {
    Iperf3,
    Iperf2,
}

impl ServedTool {
    pub fn name(self) -> &'static str {
        match self {
            ServedTool::Iperf3 => "iperf3",
            ServedTool::Iperf2 => "iperf 2",
        }
    }
}

/// What a [`ReportKeeper`] calls: the client's tool, the server's test id and the report.
pub type KeepReport = dyn Fn(ServedTool, u64, &linerate_report::Report) + Send + Sync;

impl std::fmt::Debug for ReportKeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReportKeeper")
    }
}

impl ServerConfig {
    pub fn new(listen: SocketAddr) -> ServerConfig {
        ServerConfig {
            listen,
            limits: Limits::default(),
            threads: None,
            timeouts: Timeouts::default(),
            drain: Duration::from_secs(3),
            log: true,
            foreign_reports: None,
            served_tests: None,
            key: None,
            iperf3_auth: None,
            access: AccessPolicy::default(),
            max_rate_per_ip: None,
            log_format: LogFormat::Text,
            files: None,
            tls_mode: crate::secure::TlsMode::default(),
            tls_identity: Arc::new(crate::secure::ServerIdentity::default()),
            sendable_files: Arc::default(),
            mptcp: false,
            iperf2: Iperf2Serving::default(),
            same_clock: false,
        }
    }
}

type FlowSender = Sender<(u32, std::net::TcpStream)>;

pub(crate) struct ServerState {
    pub(crate) config: ServerConfig,
    pub(crate) gate: Gate,
    pub(crate) operator_log: OperatorLog,
    pub(crate) rates: Arc<RateBook>,
    /// Failed proofs of the key or of iperf3 credentials, per client.
    pub(crate) failures: access::Failures,
    /// Copy handshakes under way, per client and in all.
    pub(crate) copy_handshakes: Arc<access::Handshakes>,
    pub(crate) host: HostFacts,
    pub(crate) shutdown: Arc<AtomicBool>,
    pub(crate) running: AtomicUsize,
    pub(crate) next_id: AtomicU64,
    /// Live tests waiting for data connections, by token.
    pub(crate) registry: Mutex<HashMap<Token, FlowSender>>,
    /// Live encrypted tests waiting for data connections, by token: the acceptor hands
    /// each to a handshake thread.
    pub(crate) tls_registry: Mutex<HashMap<Token, crate::secure::TlsWaiting>>,
    /// iperf3 tests waiting for their TCP streams, by cookie.
    pub(crate) iperf3_streams: Mutex<HashMap<String, Sender<std::net::TcpStream>>>,
    /// The UDP socket on the server's port where iperf3 clients open UDP streams; one
    /// test at a time holds it while its streams arrive.
    pub(crate) iperf3_udp: Mutex<Option<UdpSocket>>,
}

impl ServerState {
    /// A server's shared state before anything is served.
    pub(crate) fn new(config: ServerConfig, iperf3_udp: Option<UdpSocket>) -> ServerState {
        ServerState {
            host: linerate_hostinfo::host_facts(),
            gate: Gate::new(config.access.clone()),
            operator_log: OperatorLog::new(config.log, config.log_format),
            rates: Arc::new(RateBook::default()),
            failures: access::Failures::default(),
            copy_handshakes: Arc::default(),
            config,
            shutdown: Arc::new(AtomicBool::new(false)),
            running: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
            registry: Mutex::new(HashMap::new()),
            tls_registry: Mutex::new(HashMap::new()),
            iperf3_streams: Mutex::new(HashMap::new()),
            iperf3_udp: Mutex::new(iperf3_udp),
        }
    }

    /// Whether `peer` is refused for its failed proofs: says so in the log.
    pub(crate) fn blocked_for_failures(&self, peer: SocketAddr) -> bool {
        let client = self.gate.policy.client(peer.ip());
        match self.failures.blocked(client, Instant::now()) {
            Some(left) => {
                self.refused(
                    peer,
                    &format!(
                        "{} failed proofs within {} s; refused for {:.0} s more",
                        access::MAX_FAILURES,
                        access::FAILURE_WINDOW.as_secs(),
                        left.as_secs_f64()
                    ),
                );
                true
            }
            None => false,
        }
    }

    pub(crate) fn failed_proof(&self, peer: SocketAddr) {
        self.failures
            .record(self.gate.policy.client(peer.ip()), Instant::now());
    }

    /// Data connections presenting `token` arrive on the returned channel.
    pub(crate) fn register_flows(&self, token: Token) -> Receiver<(u32, std::net::TcpStream)> {
        let (sender, receiver) = channel();
        self.registry
            .lock()
            .expect("registry lock")
            .insert(token, sender);
        receiver
    }

    pub(crate) fn unregister_flows(&self, token: &Token) {
        self.registry.lock().expect("registry lock").remove(token);
    }

    pub(crate) fn log(&self, message: &str) {
        self.operator_log.line(message);
    }

    /// A line of this server's own figures, logged whole (`OperatorLog::own_line`).
    pub(crate) fn log_own(&self, message: &str) {
        self.operator_log.own_line(message);
    }

    /// One line for a refused or limited client, with the reason (a few a second at most).
    pub(crate) fn refused(&self, peer: SocketAddr, reason: &str) {
        self.operator_log.refused(peer, reason);
    }
}

/// `N` bytes from the system's random source.
fn random_bytes<const N: usize>() -> io::Result<[u8; N]> {
    let mut bytes = [0u8; N];
    getrandom::getrandom(&mut bytes).map_err(|e| io::Error::other(e.to_string()))?;
    Ok(bytes)
}

/// Fresh cookies for the UDP hellos of one test or rendezvous (proto's address_check).
pub(crate) fn random_cookies() -> io::Result<linerate_proto::address_check::AddressCookies> {
    random_bytes().map(linerate_proto::address_check::AddressCookies::new)
}

/// A fresh token for a test's data connections.
pub(crate) fn random_token() -> io::Result<Token> {
    random_bytes().map(Token)
}

/// A fresh nonce for one authentication handshake.
pub(crate) fn random_nonce() -> io::Result<linerate_proto::auth::Nonce> {
    random_bytes().map(linerate_proto::auth::Nonce)
}

/// Why a running test breaks its rate bound, from its latest intervals: `--max-rate`,
/// and under `--max-rate-per-ip` the share of its address's rate it was granted. The bytes
/// measured are what count: a rate the test declared (and a relay may rewrite) only
/// decides whether it starts.
pub(crate) fn rate_exceeded(
    shared: &ServerState,
    share: Option<&access::RateShare>,
    intervals: &[linerate_report::SideInterval],
) -> Option<String> {
    let per_test = shared.config.limits.max_rate_bps;
    // A closed-loop test asks no rate; its address's whole limit bounds it.
    let granted = share.map(|s| {
        if s.rate() >= 1.0 {
            s.rate() as u64
        } else {
            shared.config.max_rate_per_ip.unwrap_or(u64::MAX)
        }
    });
    let (most, flag) = match (per_test, granted) {
        (Some(a), Some(b)) if b < a => (b, "its share of --max-rate-per-ip"),
        (Some(a), _) => (a, "this server's --max-rate"),
        (None, Some(b)) => (b, "its share of --max-rate-per-ip"),
        (None, None) => return None,
    };
    intervals
        .iter()
        .find(|i| {
            access::over_rate(
                i.sent_bytes.saturating_add(i.received_bytes),
                i.end - i.start,
                most,
            )
        })
        .map(|i| {
            format!(
                "{} moved in an interval, over {flag} of {}; test ended",
                format_rate(i.sent_bps + i.received_bps, Scale::Adaptive),
                format_rate(most as f64, Scale::Adaptive)
            )
        })
}

/// What a finished test moved, for the log: the directions this side took part in (an
/// empty sum would print as a meaningless zero) and the requests it answered.
pub(crate) fn side_figures(result: &SideResult) -> String {
    let mut figures = Vec::new();
    for (role, verb) in [(Role::Receive, "received"), (Role::Send, "sent")] {
        let rates: Vec<f64> = result
            .flows
            .iter()
            .filter(|f| f.role == role)
            .map(|f| f.window_bps())
            .collect();
        if !rates.is_empty() {
            let total = rates.iter().sum::<f64>();
            figures.push(format!("{verb} {}", format_rate(total, Scale::Adaptive)));
        }
    }
    if result.flows.iter().any(|f| f.role == Role::Respond) {
        let answered: u64 = result
            .flows
            .iter()
            .filter(|f| f.role == Role::Respond)
            .map(|f| f.transactions)
            .sum();
        figures.push(format!("answered {answered} requests in the window"));
    }
    figures.join(", ")
}

/// iperf 2's port as a server serves it, and whether the operator chose it
/// (`--iperf2-port`), from the flags: none with `--no-iperf2`; iperf 2's own unless the
/// server holds a key (its clients prove none: opened only by name) or a multicast
/// receiver joins on that port (`join_port`: iperf 2's groups use it too).
fn served_port(
    asked: Option<u16>,
    refused: bool,
    keyed: bool,
    join_port: Option<u16>,
) -> (Option<u16>, bool) {
    match (asked, refused) {
        (_, true) => (None, false),
        (Some(port), false) => (Some(port), true),
        (None, false) if !keyed && join_port != Some(linerate_proto::iperf2::DEFAULT_PORT) => {
            (Some(linerate_proto::iperf2::DEFAULT_PORT), false)
        }
        (None, false) => (None, false),
    }
}

#[cfg(test)]
#[test]
fn iperf2s_port_is_served_unless_a_key_or_a_join_holds_it_or_it_is_refused() {
    use linerate_proto::iperf2::DEFAULT_PORT;
    assert_eq!(
        served_port(None, false, false, None),
        (Some(DEFAULT_PORT), false)
    );
    assert_eq!(served_port(None, false, true, None), (None, false));
    assert_eq!(
        served_port(Some(5002), false, true, None),
        (Some(5002), true)
    );
    assert_eq!(served_port(Some(5002), true, false, None), (None, false));
    assert_eq!(
        served_port(None, false, false, Some(DEFAULT_PORT)),
        (None, false)
    );
    assert_eq!(
        served_port(None, false, false, Some(6000)),
        (Some(DEFAULT_PORT), false)
    );
}

#[cfg(test)]
#[test]
fn iperf2s_interval_histograms_are_served_only_with_its_histograms() {
    let every = Some(Duration::from_millis(500));
    let without = Iperf2Serving {
        histogram_interval: every,
        ..Iperf2Serving::on_port(Some(5002), false, true, None)
    };
    assert_eq!((without.port, without.port_chosen), (Some(5002), true));
    assert_eq!(without.histogram_interval(), None);
    let with = Iperf2Serving {
        histograms: Some(linerate_report::iperf2_text::HistogramBins::IPERF2),
        ..without
    };
    assert_eq!(with.histogram_interval(), every);
}
