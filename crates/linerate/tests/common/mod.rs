//! Helpers for end-to-end tests of the real binary: servers on ephemeral ports, descriptor
//! counts, and network namespaces with unique names.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_linerate")
}

/// Where the runs of tests are kept: one scratch database shared by every test (writers
/// at once are safe), never the user's own.
pub fn scratch_db() -> std::path::PathBuf {
    std::env::temp_dir().join("linerate-tests.db")
}

/// The environment every command of a test runs with: the scratch database, and a state
/// directory of its own, so that no copy resumes its rate search from what another
/// test's copy learned of another path (a test that wants a resume names its own).
pub fn scratch_env() -> [(&'static str, std::path::PathBuf); 2] {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let state =
        std::env::temp_dir().join(format!("linerate-tests-state/{}-{n}", std::process::id()));
    [("LINERATE_DB", scratch_db()), ("XDG_STATE_HOME", state)]
}

/// The binary, with the scratch database.
pub fn command() -> Command {
    let mut command = Command::new(binary());
    command.envs(scratch_env());
    command
}

pub fn linerate(args: &[&str]) -> Output {
    command().args(args).output().expect("run linerate")
}

/// A `linerate serve` child process on an ephemeral loopback port; killed on drop.
pub struct ServeProcess {
    pub child: Child,
    pub port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl ServeProcess {
    pub fn start(extra: &[&str]) -> ServeProcess {
        Self::start_with(None, "127.0.0.1", extra)
    }

    /// Starts a server, inside network namespace `netns` if given, listening on `addr`.
    pub fn start_with(netns: Option<&str>, addr: &str, extra: &[&str]) -> ServeProcess {
        Self::start_at(netns, addr, "0", extra)
    }

    /// As [`start`](Self::start), with environment variables `env` set.
    pub fn start_env(extra: &[&str], env: &[(&str, &str)]) -> ServeProcess {
        Self::start_command(None, "127.0.0.1", "0", extra, env)
    }

    /// As [`start_with`](Self::start_with), on `port` (0: any).
    pub fn start_at(netns: Option<&str>, addr: &str, port: &str, extra: &[&str]) -> ServeProcess {
        Self::start_command(netns, addr, port, extra, &[])
    }

    fn start_command(
        netns: Option<&str>,
        addr: &str,
        port: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> ServeProcess {
        let mut command = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, binary()]);
                c.envs(scratch_env());
                c
            }
            None => command(),
        };
        command.envs(env.iter().copied());
        command
            .args(["serve", "--listen", addr, "--port", port])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("start linerate serve");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.split("listening on ").nth(1) {
                    let port = addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
                    let _ = port_tx.send(port.unwrap_or(0));
                }
                sink.lock().unwrap().push(line);
            }
        });
        let port = port_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("server announced its port");
        ServeProcess { child, port, log }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Waits until the log contains `needle`.
    pub fn wait_log(&self, needle: &str, within: Duration) -> bool {
        let until = Instant::now() + within;
        while Instant::now() < until {
            if self.log().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Waits until a log line has every one of `parts`.
    pub fn wait_line(&self, parts: &[&str], within: Duration) -> bool {
        let until = Instant::now() + within;
        while Instant::now() < until {
            if self
                .log
                .lock()
                .unwrap()
                .iter()
                .any(|l| parts.iter().all(|p| l.contains(p)))
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// The server's threads, less the allocator's: jemalloc starts a thread of its own
    /// ("jemalloc_bg_thd") for each arena that has pages to return, when the arena is
    /// first used, and keeps it; it serves no request and is no leak.
    pub fn thread_count(&self) -> usize {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.pid())) else {
            return 0;
        };
        tasks
            .flatten()
            .filter(|task| {
                std::fs::read_to_string(task.path().join("comm"))
                    .map_or(true, |name| name.trim() != "jemalloc_bg_thd")
            })
            .count()
    }

    /// Waits until the thread count is back to `baseline` at most; returns the last count.
    pub fn wait_threads(&self, baseline: usize, within: Duration) -> usize {
        let until = Instant::now() + within;
        loop {
            let now = self.thread_count();
            if now <= baseline || Instant::now() >= until {
                return now;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the descriptor count is back to `baseline`; returns the last count.
    pub fn wait_fds(&self, baseline: usize, within: Duration) -> usize {
        let until = Instant::now() + within;
        loop {
            let now = self.open_fds();
            if now == baseline || Instant::now() >= until {
                return now;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs linerate with `args` inside network namespace `ns`.
pub fn linerate_in(ns: &str, args: &[&str]) -> Output {
    Command::new("ip")
        .args(["netns", "exec", ns, binary()])
        .envs(scratch_env())
        .args(args)
        .output()
        .expect("run linerate in a namespace")
}

/// Starts `linerate stream 127.0.0.1 -p PORT` with `extra` flags in the background.
pub fn spawn_stream(port: u16, extra: &[&str], stderr: Stdio) -> Child {
    command()
        .args(["stream", "127.0.0.1", "-p", &port.to_string()])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("start linerate stream")
}

/// Runs linerate with `args` as root without CAP_SYS_NICE (`setpriv
/// --bounding-set=-sys_nice`), in namespace `ns` if given: the kernel then refuses
/// real-time scheduling (`-z`) as it would an unprivileged user's.
pub fn linerate_without_sys_nice(ns: Option<&str>, args: &[&str]) -> Output {
    let mut command = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "setpriv"]);
            c
        }
        None => Command::new("setpriv"),
    };
    command
        .arg("--bounding-set=-sys_nice")
        .arg(binary())
        .envs(scratch_env())
        .args(args)
        .output()
        .expect("linerate under setpriv")
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

pub fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().expect("run command");
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Two network namespaces joined by a veth pair, with unique names; removed on drop.
pub struct VethPair {
    pub ns_a: String,
    pub ns_b: String,
    pub dev_a: String,
    pub dev_b: String,
    pub addr_a: String,
    pub addr_b: String,
}

impl VethPair {
    pub fn new(tag: &str) -> VethPair {
        let pid = std::process::id();
        let n = (pid % 250) as u8 + 1;
        let salt = tag
            .bytes()
            .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32))
            % 200;
        let pair = VethPair {
            ns_a: format!("lr-{tag}-{pid}-a"),
            ns_b: format!("lr-{tag}-{pid}-b"),
            dev_a: format!("lra{}{}", pid % 100_000, salt % 10),
            dev_b: format!("lrb{}{}", pid % 100_000, salt % 10),
            addr_a: format!("10.{}.{}.1", 200 + salt % 50, n),
            addr_b: format!("10.{}.{}.2", 200 + salt % 50, n),
        };
        run("ip", &["netns", "add", &pair.ns_a]);
        run("ip", &["netns", "add", &pair.ns_b]);
        run(
            "ip",
            &[
                "link",
                "add",
                &pair.dev_a,
                "type",
                "veth",
                "peer",
                "name",
                &pair.dev_b,
            ],
        );
        run("ip", &["link", "set", &pair.dev_a, "netns", &pair.ns_a]);
        run("ip", &["link", "set", &pair.dev_b, "netns", &pair.ns_b]);
        for (ns, dev, addr) in [
            (&pair.ns_a, &pair.dev_a, &pair.addr_a),
            (&pair.ns_b, &pair.dev_b, &pair.addr_b),
        ] {
            run(
                "ip",
                &["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev],
            );
            run("ip", &["-n", ns, "link", "set", "lo", "up"]);
            run("ip", &["-n", ns, "link", "set", dev, "up"]);
        }
        pair
    }

    /// Shapes `dev_a`'s egress with `tbf rate RATE burst 64kb QUEUE`, QUEUE being
    /// `["latency", "50ms"]` or `["limit", BYTES]`.
    pub fn shape_a(&self, rate: &str, queue: [&str; 2]) {
        tbf(&self.ns_a, &self.dev_a, rate, queue);
    }

    /// Packets the tbf on `dev_a` has dropped (`tc -s qdisc`).
    pub fn tbf_dropped(&self) -> u64 {
        let text = run(
            "ip",
            &[
                "netns",
                "exec",
                &self.ns_a,
                "tc",
                "-s",
                "qdisc",
                "show",
                "dev",
                &self.dev_a,
            ],
        );
        let after = text.split("dropped ").nth(1).expect("tc -s shows drops");
        after
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse().ok())
            .expect("a drop count")
    }

    /// The UDP counter `name` (e.g. InDatagrams) of namespace `ns`, from /proc/net/snmp.
    pub fn udp_counter(&self, ns: &str, name: &str) -> u64 {
        snmp_counter(ns, "Udp", name)
    }

    /// Runs `linerate stream ADDR_B -p PORT ARGS --json` from namespace a against a fresh
    /// server in namespace b. Returns the result (after checking the run succeeded) and
    /// what `dev_a` sent meanwhile: bytes and packets (a GSO packet counts once).
    pub fn stream_counting_tx(&self, args: &[&str]) -> (serde_json::Value, u64, u64) {
        let server = ServeProcess::start_with(Some(&self.ns_b), &self.addr_b, &[]);
        let tx = || {
            (
                self.counter(&self.ns_a, &self.dev_a, "tx_bytes"),
                self.counter(&self.ns_a, &self.dev_a, "tx_packets"),
            )
        };
        let before = tx();
        let port = server.port.to_string();
        let mut all = vec!["stream", &self.addr_b, "-p", &port, "--json"];
        all.extend_from_slice(args);
        let out = linerate_in(&self.ns_a, &all);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let after = tx();
        (json(&out), after.0 - before.0, after.1 - before.1)
    }

    /// A counter of `dev` in `ns` from sysfs.
    pub fn counter(&self, ns: &str, dev: &str, name: &str) -> u64 {
        run(
            "ip",
            &[
                "netns",
                "exec",
                ns,
                "cat",
                &format!("/sys/class/net/{dev}/statistics/{name}"),
            ],
        )
        .trim()
        .parse()
        .expect("a counter")
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth inside it (and its peer).
        let _ = Command::new("ip")
            .args(["netns", "del", &self.ns_a])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.ns_b])
            .status();
    }
}

pub fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}); stderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// A result's warnings but the one that says other processes were busy on the host (a
/// fact of the machine the test runs on, not of the feature under test).
pub fn warnings_besides_other_work(doc: &serde_json::Value) -> Vec<String> {
    doc["warnings"]
        .as_array()
        .map(|all| {
            all.iter()
                .filter_map(|w| w.as_str())
                .filter(|w| !w.starts_with("other processes took"))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the result says other work kept the host's CPUs busy during the test (its
/// `cpu_basis`: more than a quarter of a core besides the test's own threads). A rate the
/// test was asked for is then a promise the machine, not the tool, may break; tests that
/// hold a rate to its target check instead that the tool said so. Printed when true.
pub fn host_was_busy(doc: &serde_json::Value) -> bool {
    let busy = doc["summary"]["cpu_basis"]["service_demand"] == "processes";
    if busy {
        eprintln!(
            "the host was busy with other work: {}",
            doc["summary"]["cpu_basis"]["others_pct"]
        );
    }
    busy
}

/// A result's warnings about UDP offloads (`--gso`, `--gro` refused or turned off).
pub fn offload_warnings(doc: &serde_json::Value) -> Vec<String> {
    warnings_besides_other_work(doc)
        .into_iter()
        .filter(|w| w.contains("--gso") || w.contains("--gro") || w.contains("offload"))
        .collect()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A native control connection's opening bytes for protocol `version`.
pub fn preface(version: u32) -> Vec<u8> {
    let mut bytes = b"LINERATE".to_vec();
    bytes.extend_from_slice(&version.to_be_bytes());
    bytes
}

/// One control frame: a 4-byte big-endian length and the body.
pub fn frame(body: &[u8]) -> Vec<u8> {
    let mut bytes = (body.len() as u32).to_be_bytes().to_vec();
    bytes.extend_from_slice(body);
    bytes
}

/// Reads one control frame's body, waiting at most 5 s.
pub fn read_frame_body(stream: &mut std::net::TcpStream) -> Vec<u8> {
    use std::io::Read;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).expect("a frame length");
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut body).expect("a frame body");
    body
}

/// Reads one control frame's JSON, with a bound.
pub fn read_frame(stream: &mut std::net::TcpStream) -> serde_json::Value {
    serde_json::from_slice(&read_frame_body(stream)).expect("a JSON frame")
}

/// The number at JSON `pointer` in `doc`; a missing or non-numeric key fails the test.
/// The counter `name` of `protocol` ("Tcp", "Udp", ...) in namespace `ns`, from
/// /proc/net/snmp.
pub fn snmp_counter(ns: &str, protocol: &str, name: &str) -> u64 {
    let text = run("ip", &["netns", "exec", ns, "cat", "/proc/net/snmp"]);
    let prefix = format!("{protocol}:");
    let mut rows = text.lines().filter(|l| l.starts_with(&prefix));
    let names: Vec<&str> = rows
        .next()
        .expect("counter names")
        .split_whitespace()
        .collect();
    let values: Vec<&str> = rows
        .next()
        .expect("counter values")
        .split_whitespace()
        .collect();
    let i = names
        .iter()
        .position(|n| *n == name)
        .unwrap_or_else(|| panic!("no counter {protocol} {name}"));
    values[i].parse().expect("a number")
}

pub fn num(doc: &serde_json::Value, pointer: &str) -> f64 {
    doc.pointer(pointer)
        .and_then(serde_json::Value::as_f64)
        .unwrap_or_else(|| panic!("{pointer} missing or not a number in {doc}"))
}

/// Shapes `dev`'s egress in namespace `ns`: `tbf rate RATE burst 64kb QUEUE`, QUEUE being
/// `["latency", "50ms"]` or `["limit", BYTES]`.
fn tbf(ns: &str, dev: &str, rate: &str, queue: [&str; 2]) {
    run(
        "ip",
        &[
            "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate,
            "burst", "64kb", queue[0], queue[1],
        ],
    );
}

/// Network namespaces on one bridge (in a namespace of its own), each with one address
/// in a /24 of their own; removed on drop.
pub struct Star {
    pub hub: String,
    pub hosts: Vec<String>,
    pub addrs: Vec<String>,
    pub devs: Vec<String>,
    /// The bridge's port towards each host, in the hub.
    ports: Vec<String>,
}

impl Star {
    pub fn new(tag: &str, count: usize) -> Star {
        // Stars of one process differ in their devices' names by this count.
        static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let made = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 36;
        let made = char::from_digit(made as u32, 36).expect("below 36");
        let pid = std::process::id();
        let subnet = format!("10.{}.{}", 150 + pid % 40, (pid / 40) % 250 + 1);
        let hub = format!("lr-{tag}-{pid}-hub");
        run("ip", &["netns", "add", &hub]);
        run("ip", &["-n", &hub, "link", "add", "br0", "type", "bridge"]);
        run("ip", &["-n", &hub, "link", "set", "br0", "up"]);
        let mut star = Star {
            hub,
            hosts: Vec::new(),
            addrs: Vec::new(),
            devs: Vec::new(),
            ports: Vec::new(),
        };
        for i in 0..count {
            let ns = format!("lr-{tag}-{pid}-h{i}");
            let outer = format!("lr{}{made}o{i}", pid % 100_000);
            let inner = format!("lr{}{made}i{i}", pid % 100_000);
            let addr = format!("{subnet}.{}", i + 1);
            run("ip", &["netns", "add", &ns]);
            run(
                "ip",
                &[
                    "link", "add", &outer, "type", "veth", "peer", "name", &inner,
                ],
            );
            run("ip", &["link", "set", &outer, "netns", &star.hub]);
            run("ip", &["link", "set", &inner, "netns", &ns]);
            run(
                "ip",
                &["-n", &star.hub, "link", "set", &outer, "master", "br0"],
            );
            run("ip", &["-n", &star.hub, "link", "set", &outer, "up"]);
            run(
                "ip",
                &[
                    "-n",
                    &ns,
                    "addr",
                    "add",
                    &format!("{addr}/24"),
                    "dev",
                    &inner,
                ],
            );
            run("ip", &["-n", &ns, "link", "set", "lo", "up"]);
            run("ip", &["-n", &ns, "link", "set", &inner, "up"]);
            star.hosts.push(ns);
            star.addrs.push(addr);
            star.devs.push(inner);
            star.ports.push(outer);
        }
        star
    }

    /// Shapes what host `i` receives, in the network (the bridge's port towards it, so
    /// the queue is the network's and not the senders' own, which TCP small queues keep
    /// short): `tbf rate RATE burst 64kb limit BYTES`.
    pub fn shape_towards(&self, i: usize, rate: &str, limit_bytes: u64) {
        let limit = limit_bytes.to_string();
        tbf(&self.hub, &self.ports[i], rate, ["limit", &limit]);
    }

    /// Limits what host `i` receives of UDP datagrams to `port` (any address) to `rate`,
    /// in the network, and nothing else: the bridge's port towards it gets an htb whose
    /// one limited class takes those datagrams (a u32 filter) into a short FIFO of its own
    /// (handle 10:, 16 packets), everything else passing unlimited. What that FIFO drops
    /// is [`Star::limited_drops`].
    pub fn limit_udp_towards(&self, i: usize, port: u16, rate: &str) {
        let dev = self.ports[i].as_str();
        let tc = |args: &[&str]| {
            let mut all = vec!["-n", self.hub.as_str()];
            all.extend_from_slice(args);
            run("tc", &all);
        };
        tc(&[
            "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "20",
        ]);
        tc(&[
            "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", rate,
            "ceil", rate,
        ]);
        tc(&[
            "class", "add", "dev", dev, "parent", "1:", "classid", "1:20", "htb", "rate", "10gbit",
        ]);
        tc(&[
            "qdisc", "add", "dev", dev, "parent", "1:10", "handle", "10:", "pfifo", "limit", "16",
        ]);
        let port = port.to_string();
        tc(&[
            "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
            "match", "ip", "protocol", "17", "0xff", "match", "ip", "dport", &port, "0xffff",
            "flowid", "1:10",
        ]);
    }

    /// Packets the limited class towards host `i` dropped (its FIFO's "dropped N").
    pub fn limited_drops(&self, i: usize) -> u64 {
        let text = run(
            "tc",
            &[
                "-n",
                &self.hub,
                "-s",
                "qdisc",
                "show",
                "dev",
                &self.ports[i],
            ],
        );
        let fifo = text
            .split("qdisc ")
            .find(|q| q.starts_with("pfifo 10:"))
            .unwrap_or_else(|| panic!("no limited FIFO in {text}"));
        fifo.split("dropped ")
            .nth(1)
            .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no drop count in {fifo}"))
    }

    /// Bytes the shaper towards host `i` has sent (`tc -s qdisc`: "Sent N bytes").
    pub fn shaped_sent(&self, i: usize) -> u64 {
        let text = run(
            "ip",
            &[
                "netns",
                "exec",
                &self.hub,
                "tc",
                "-s",
                "qdisc",
                "show",
                "dev",
                &self.ports[i],
            ],
        );
        text.split("Sent ")
            .nth(1)
            .and_then(|t| t.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no sent bytes in {text}"))
    }

    /// A statistics counter of host `i`'s interface (`rx_bytes`, `tx_bytes`, ...).
    pub fn counter(&self, i: usize, name: &str) -> u64 {
        run(
            "ip",
            &[
                "netns",
                "exec",
                &self.hosts[i],
                "cat",
                &format!("/sys/class/net/{}/statistics/{name}", self.devs[i]),
            ],
        )
        .trim()
        .parse()
        .expect("a counter")
    }
}

impl Drop for Star {
    fn drop(&mut self) {
        for ns in self.hosts.iter().chain([&self.hub]) {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Runs a stream test to 127.0.0.1:`port` with `extra` flags that the server must refuse:
/// exit 1, and `needle` in what the client says.
pub fn stream_refused(port: &str, extra: &[&str], needle: &str) {
    let mut args = vec!["stream", "127.0.0.1", "-p", port];
    args.extend_from_slice(extra);
    let out = linerate(&args);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains(needle), "{}", stderr(&out));
}

/// Reads until the server closes, with a bound.
pub fn read_to_close(stream: &mut std::net::TcpStream) -> Vec<u8> {
    use std::io::Read;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    out
}

/// Records that the calling test cannot run here, and why; the test then returns. A skip
/// is never a pass: `scripts/test` counts the lines written to `$LINERATE_SKIP_LOG` and
/// reports them as skipped, and under `CI=true` (where everything a test needs is
/// installed) a skip fails the test instead.
pub fn skip(test: &str, reason: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test} cannot run: {reason} (CI=true: a test that cannot run fails)");
    }
    skip_unrunnable(test, reason);
}

/// Records a skip that no set-up can cure (what the test needs is not in the checkout and
/// nothing installs it: `../shared` absent), so it is counted as skipped even under
/// `CI=true`.
pub fn skip_unrunnable(test: &str, reason: &str) {
    eprintln!("SKIPPED {test}: {reason}");
    if let Ok(path) = std::env::var("LINERATE_SKIP_LOG") {
        use std::io::Write;
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(file, "{test}: {reason}");
        }
    }
}

/// Whether a program answers `--version`; when it does not, the calling test is skipped.
pub fn have(program: &str, test: &str) -> bool {
    let found = Command::new(program).arg("--version").output().is_ok();
    if !found {
        skip(
            test,
            &format!("{program} is not installed (scripts/test installs it as root)"),
        );
    }
    found
}

/// stamp-suite, built from crates.io by scripts/test (LINERATE_STAMP_SUITE), or found in
/// the peers' cache; `None`, with `test` counted as skipped and why, where it is not.
pub fn stamp_suite(test: &str) -> Option<String> {
    let path = std::env::var("LINERATE_STAMP_SUITE").ok().or_else(|| {
        let home = std::env::var("HOME").ok()?;
        let cached = format!("{home}/.cache/linerate-peers/stamp-suite/bin/stamp-suite");
        std::path::Path::new(&cached).exists().then_some(cached)
    });
    match path {
        Some(p) if Command::new(&p).arg("--version").output().is_ok() => Some(p),
        _ => {
            skip(
                test,
                "stamp-suite is not installed (scripts/test builds it from crates.io)",
            );
            None
        }
    }
}

/// ndt7-client from crates.io (`LINERATE_NDT7_CLIENT`, or where scripts/test builds it),
/// or the test skipped with the reason.
pub fn ndt7_client(test: &str) -> Option<String> {
    let path = std::env::var("LINERATE_NDT7_CLIENT").ok().or_else(|| {
        let home = std::env::var("HOME").ok()?;
        let cached = format!("{home}/.cache/linerate-peers/ndt7-client/bin/ndt7-client");
        std::path::Path::new(&cached).exists().then_some(cached)
    });
    match path {
        Some(p) if Command::new(&p).arg("--help").output().is_ok() => Some(p),
        _ => {
            skip(
                test,
                "ndt7-client is not installed (scripts/test builds it from crates.io)",
            );
            None
        }
    }
}

/// M-Lab's ndt7 browser library (@m-lab/ndt7 from npm: `ndt7.js` and its two workers),
/// where scripts/test fetched it (`LINERATE_NDT7_JS`, or the peers' cache), or the test
/// skipped with the reason.
pub fn ndt7_js(test: &str) -> Option<std::path::PathBuf> {
    let dir = std::env::var("LINERATE_NDT7_JS").ok().or_else(|| {
        let home = std::env::var("HOME").ok()?;
        Some(format!("{home}/.cache/linerate-peers/ndt7-js/package/src"))
    });
    match dir.map(std::path::PathBuf::from) {
        Some(d) if d.join("ndt7.js").is_file() && d.join("ndt7-upload-worker.js").is_file() => {
            Some(d)
        }
        _ => {
            skip(
                test,
                "@m-lab/ndt7 is not fetched (scripts/test fetches it from npm)",
            );
            None
        }
    }
}

/// The last measurement message of `origin` ("client", "server") in `test` among
/// ndt7-client's JSON lines.
pub fn ndt7_client_last(lines: &str, test: &str, origin: &str) -> serde_json::Value {
    lines
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|v| v["Type"] == "Measurement" && v["Test"] == test)
        .map(|v| v["Measurement"].clone())
        .rfind(|m| m["Origin"] == origin)
        .unwrap_or_else(|| panic!("no {origin} measurement of the {test} in {lines}"))
}

/// A page drawn by headless Chromium, as a screenshot's pixels.
pub struct Screenshot {
    pub width: u32,
    pub height: u32,
    /// Samples a pixel: 3 (RGB) or 4 (RGBA).
    pub channels: usize,
    pub pixels: Vec<u8>,
}

impl Screenshot {
    /// How many pixels have some ink (a channel below 200), and how many colours there are.
    pub fn ink_and_colours(&self) -> (usize, usize) {
        let mut colours = std::collections::HashSet::new();
        let mut inked = 0usize;
        for pixel in self.pixels.chunks(self.channels) {
            if pixel[..3].iter().any(|&c| c < 200) {
                inked += 1;
            }
            colours.insert(pixel[..3].to_vec());
        }
        (inked, colours.len())
    }

    /// How many pixels are within 12 of `colour` in each channel.
    pub fn pixels_of(&self, colour: [u8; 3]) -> usize {
        self.pixels
            .chunks(self.channels)
            .filter(|p| p.iter().zip(colour).all(|(&a, b)| a.abs_diff(b) <= 12))
            .count()
    }
}

/// `page` (a local file) drawn by headless Chromium in a window of `size`; `None` (and
/// the test `test` skipped) when Chromium is not installed.
pub fn chromium_screenshot(
    page: &std::path::Path,
    size: (u32, u32),
    test: &str,
) -> Option<Screenshot> {
    let Some(browser) = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|b| Command::new(b).arg("--version").output().is_ok())
    else {
        skip(
            test,
            "chromium is not installed (scripts/test installs it as root)",
        );
        return None;
    };
    let dir = tempfile::tempdir().unwrap();
    let shot = dir.path().join("shot.png");
    let status = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg(format!("--window-size={},{}", size.0, size.1))
        .arg(format!(
            "--user-data-dir={}",
            dir.path().join("profile").display()
        ))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run chromium");
    assert!(status.success(), "chromium failed: {status}");
    let decoder = png::Decoder::new(BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut pixels).unwrap();
    pixels.truncate(frame.buffer_size());
    Some(Screenshot {
        width: frame.width,
        height: frame.height,
        channels: frame.color_type.samples(),
        pixels,
    })
}

/// The round-trip times of ping's replies in `text` (`time=20.4 ms`), less the first (the
/// neighbour lookup rides on it), sorted.
pub fn ping_times_ms(text: &str) -> Vec<f64> {
    let mut times: Vec<f64> = text
        .lines()
        .filter_map(|line| line.split("time=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .skip(1)
        .collect();
    times.sort_by(f64::total_cmp);
    times
}

/// The host's CPU time by kind, in ticks: /proc/stat's first line.
fn cpu_ticks() -> Vec<f64> {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    stat.lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect()
}

/// The share of the host's CPU time the hypervisor gave to other guests (steal, from
/// /proc/stat) while `run` ran: a host short of CPU delays every process here, the lab's
/// emulator and both ends alike, which no figure of ours can show.
pub fn steal_share_during<T>(run: impl FnOnce() -> T) -> (T, f64) {
    fn ticks() -> (f64, f64) {
        let fields = cpu_ticks();
        // user nice system idle iowait irq softirq steal (guest is within user).
        let total: f64 = fields.iter().take(8).sum();
        (fields.get(7).copied().unwrap_or(0.0), total)
    }
    let before = ticks();
    let out = run();
    let after = ticks();
    (out, (after.0 - before.0) / (after.1 - before.1).max(1.0))
}

/// The CPU time (in cores) that work besides `run`'s children took while it ran, read from
/// /proc/stat and this process's waited-for children's times: the same run's measure of a
/// busy host, for a test that compares a paced figure with another tool's.
pub fn others_cores_during<T>(run: impl FnOnce() -> T) -> (T, f64) {
    fn busy_ticks() -> f64 {
        let fields = cpu_ticks();
        // user nice system idle iowait irq softirq steal: all but idle and iowait.
        [0, 1, 2, 5, 6, 7]
            .iter()
            .filter_map(|&i| fields.get(i))
            .sum()
    }
    fn children_ticks() -> f64 {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        // The fields after the command's closing parenthesis; cutime and cstime are the
        // 16th and 17th of the line.
        let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<f64> = rest
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
        fields.get(13).unwrap_or(&0.0) + fields.get(14).unwrap_or(&0.0)
    }
    let (busy, children, began) = (busy_ticks(), children_ticks(), std::time::Instant::now());
    let out = run();
    let seconds = began.elapsed().as_secs_f64().max(0.01);
    let others = (busy_ticks() - busy) - (children_ticks() - children);
    // USER_HZ is 100 on Linux.
    (out, (others / 100.0 / seconds).max(0.0))
}

/// Raises this process's descriptor limit for a test that holds thousands of sockets.
pub fn raise_descriptor_limit(want: u64) -> bool {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 || limit.rlim_max < want {
            return false;
        }
        limit.rlim_cur = limit.rlim_cur.max(want);
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0
    }
}

/// The value of the one sample of `name` whose labels hold every `labels` pair.
pub fn sample_of(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| labels.iter().all(|want| l.contains(want)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The first "avg/min/max/stdev" figures (milliseconds) iperf 2 prints in `text` for a
/// `--trip-times` UDP test, its client for the server's report or its server for itself.
#[allow(dead_code)]
pub fn iperf2_latency(text: &str) -> Option<[f64; 4]> {
    let figures = text
        .split_whitespace()
        .find(|w| w.matches('/').count() == 3 && w.starts_with(|c: char| c.is_ascii_digit()))?;
    let parsed: Vec<f64> = figures.split('/').filter_map(|f| f.parse().ok()).collect();
    parsed.try_into().ok()
}

/// The value of a sample line of /metrics (`name{labels}` as written).
pub fn metric(addr: &str, series: &str) -> f64 {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to metrics");
    use std::io::{Read, Write};
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
}

/// One packet of a capture: when it was caught (ns since the epoch), its length on the
/// wire, and the bytes kept of it (the snap length's).
pub struct Captured {
    pub at_ns: u64,
    pub wire: usize,
    pub bytes: Vec<u8>,
}

/// Every packet of a nanosecond pcap (`tcpdump --time-stamp-precision nano -w`), in order.
pub fn pcap_packets(pcap: &std::path::Path) -> Vec<Captured> {
    let data = std::fs::read(pcap).expect("the capture");
    assert!(data.len() >= 24, "a pcap header in {}", pcap.display());
    assert_eq!(
        u32::from_le_bytes(data[0..4].try_into().unwrap()),
        0xa1b2_3c4d,
        "a nanosecond pcap"
    );
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= data.len() {
        let le32 = |o: usize| u32::from_le_bytes(data[at + o..at + o + 4].try_into().unwrap());
        let (seconds, nanos, caught, wire) = (le32(0), le32(4), le32(8) as usize, le32(12));
        out.push(Captured {
            at_ns: u64::from(seconds) * 1_000_000_000 + u64::from(nanos),
            wire: wire as usize,
            bytes: data[at + 16..(at + 16 + caught).min(data.len())].to_vec(),
        });
        at += 16 + caught;
    }
    out
}

/// The writes an iperf 2 client's whole-test line says it made (its `Write/Err` column),
/// from its output; `None` where no such line is.
pub fn iperf2_writes(text: &str, line: impl Fn(&str) -> bool) -> Option<f64> {
    text.lines()
        .filter(|l| l.contains(" sec ") && line(l))
        .filter_map(|l| {
            l.split_whitespace()
                .find(|w| w.contains('/') && !w.contains("sec"))?
                .split('/')
                .next()?
                .parse()
                .ok()
        })
        .next_back()
}
