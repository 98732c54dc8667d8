//! `linerate lab`: a client and a server host on this machine, joined through a router
//! host that runs the emulator (docs/impair.md 4).
//!
//! ```text
//!  lrlab-NAME-client          lrlab-NAME-router               lrlab-NAME-server
//!  eth0 10.77.0.1/24  <-veth->  to-client  [impair]  to-server  <-veth->  eth0 10.77.0.2/24
//!       fd77::1/64                                                        fd77::2/64
//! ```
//!
//! With receivers (`--receivers N`), the router's server side is a port of a snooping
//! bridge in a fourth namespace (`switch`), whose other ports are the server and the
//! receivers rx1 to rxN ([`receiver`]); the bridge is the link's IGMP/MLD querier.
//!
//! Namespaces and veths are made with iproute2's `ip` (the one program the lab needs);
//! offloads are switched off by ioctl so that a frame is one MTU and a loss of 1 % means
//! 1 % of packets. The emulator runs as `linerate impair` inside the router namespace, in
//! its own session so a terminal's Ctrl-C reaches only the lab's controller. State (the
//! path, the emulator's status and log) lives in /run/linerate/lab/NAME; each namespace
//! has a hosts file naming `client` and `server`. `down` finds a lab by its namespaces'
//! names, so a lab whose controller was killed is removed all the same.

// A driver: the clock and sleeping are its job (the core modules stay sans-IO).
#![allow(clippy::disallowed_methods)]

use linerate_model::units::counted;
use linerate_model::{PathFacts, PATH_ENV};
use std::io;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use thiserror::Error;

/// The client's and server's addresses in every lab.
pub const CLIENT_V4: &str = "10.77.0.1";
pub const SERVER_V4: &str = "10.77.0.2";
pub const CLIENT_V6: &str = "fd77::1";
pub const SERVER_V6: &str = "fd77::2";
/// The environment variable that names the server's address inside a lab.
pub const SERVER_ENV: &str = "LINERATE_LAB_SERVER";
/// The router's interfaces towards each host.
pub const ROUTER_CLIENT_SIDE: &str = "to-client";
pub const ROUTER_SERVER_SIDE: &str = "to-server";
const STATE_ROOT: &str = "/run/linerate/lab";
const PREFIX: &str = "lrlab-";
const HOSTS: [&str; 3] = ["client", "router", "server"];
/// The most receiver hosts a lab builds beside its server (`--receivers`).
pub const MAX_RECEIVERS: u8 = 16;
/// The namespace holding the bridge that joins the router's server side, the server and
/// the receivers, where the lab has receivers.
const SWITCH: &str = "switch";
/// The bridge in the switch namespace: the kernel's, snooping IGMPv3 and MLDv2.
const BRIDGE: &str = "br0";
/// The switch's port towards the router (the emulator's server side).
pub const SWITCH_UPLINK: &str = "to-router";

/// Receiver `k`'s (1 to [`MAX_RECEIVERS`]) name and addresses: rx1 10.77.0.11 fd77::11.
pub fn receiver(k: u8) -> (String, String, String) {
    (
        format!("rx{k}"),
        format!("10.77.0.{}", 10 + u16::from(k)),
        format!("fd77::{}", 10 + u16::from(k)),
    )
}

/// Every host name a lab may have: the three always there, the switch and the receivers.
fn every_host() -> impl Iterator<Item = String> {
    HOSTS
        .iter()
        .map(|h| h.to_string())
        .chain(std::iter::once(SWITCH.to_string()))
        .chain((1..=MAX_RECEIVERS).map(|k| receiver(k).0))
}

#[derive(Debug, Error)]
pub enum LabError {
    #[error("invalid lab name '{0}': use 1 to 24 of a-z, 0-9 and -")]
    Name(String),
    #[error("a lab named '{0}' exists already (linerate lab down --name {0})")]
    Exists(String),
    #[error("no lab named '{0}' (linerate lab up --name {0})")]
    Missing(String),
    #[error("unknown lab host '{0}': use client, router or server")]
    Host(String),
    #[error("the lab needs root (CAP_SYS_ADMIN for namespaces, CAP_NET_ADMIN for links)")]
    Privilege,
    #[error("the lab needs iproute2's `ip` on PATH: apt-get install iproute2")]
    NoIp,
    #[error("`{command}` failed: {stderr}")]
    Command { command: String, stderr: String },
    #[error("the emulator did not start: {0}")]
    Emulator(String),
    #[error("linerate serve did not listen on port {port} in the lab: {log}")]
    NotListening { port: u16, log: String },
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// A lab's name and the names derived from it.
#[derive(Debug, Clone)]
pub struct Lab {
    name: String,
}

impl Lab {
    pub fn new(name: &str) -> Result<Lab, LabError> {
        let valid = !name.is_empty()
            && name.len() <= 24
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !valid {
            return Err(LabError::Name(name.into()));
        }
        Ok(Lab { name: name.into() })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace of `host` (client, router, server; switch and rx1 to rx16 where the
    /// lab has receivers).
    pub fn namespace(&self, host: &str) -> Result<String, LabError> {
        if !every_host().any(|h| h == host) {
            return Err(LabError::Host(host.into()));
        }
        Ok(format!("{PREFIX}{}-{host}", self.name))
    }

    /// Where the lab keeps its records: the path, the emulator's status and log.
    pub fn state_dir(&self) -> PathBuf {
        PathBuf::from(STATE_ROOT).join(&self.name)
    }

    /// The emulator's status file (JSON, rewritten every second and at its end).
    pub fn status_file(&self) -> PathBuf {
        self.state_dir().join("status.json")
    }

    /// Every frame's fate, where the lab was built with `--frame-log` (crate::frame_log).
    pub fn frame_log_file(&self) -> PathBuf {
        self.state_dir().join("frames.tsv")
    }

    pub fn log_file(&self) -> PathBuf {
        self.state_dir().join("impair.log")
    }

    fn path_file(&self) -> PathBuf {
        self.state_dir().join("path.json")
    }

    /// The path the lab was built with.
    pub fn path(&self) -> Result<PathFacts, LabError> {
        let text = std::fs::read_to_string(self.path_file())
            .map_err(|_| LabError::Missing(self.name.clone()))?;
        PathFacts::from_json(&text)
            .ok_or_else(|| LabError::Emulator(format!("{} is damaged", self.path_file().display())))
    }

    /// What the lab's emulator last wrote of itself (its status file, every second).
    pub fn status(&self) -> Result<crate::runner::Status, LabError> {
        let damaged = |why: String| {
            LabError::Emulator(format!("reading {}: {why}", self.status_file().display()))
        };
        let text =
            std::fs::read_to_string(self.status_file()).map_err(|e| damaged(e.to_string()))?;
        serde_json::from_str(&text).map_err(|e| damaged(e.to_string()))
    }

    /// Whether any of the lab's namespaces exists.
    pub fn exists(&self) -> bool {
        every_host().any(|h| {
            self.namespace(&h)
                .map(|ns| PathBuf::from("/run/netns").join(ns).exists())
                .unwrap_or(false)
        })
    }
}

fn ip(args: &[&str]) -> Result<(), LabError> {
    let output = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => LabError::NoIp,
            _ => LabError::Io(e),
        })?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
    if stderr.contains("Operation not permitted") || stderr.contains("Permission denied") {
        return Err(LabError::Privilege);
    }
    Err(LabError::Command {
        command: format!("ip {}", args.join(" ")),
        stderr,
    })
}

/// How to start the emulator: this program's path (it runs `EXE impair ...`).
pub struct UpOptions {
    pub path: PathFacts,
    pub mtu: usize,
    /// The hosts' largest TCP buffers; `None`: this host's own settings.
    pub buffers: Option<u64>,
    /// Receiver hosts (rx1, rx2, ...) on a snooping bridge beside the server, behind the
    /// emulator as the server is (`--receivers`); 0: the server alone, on the router.
    pub receivers: u8,
    /// The emulator writes every frame's fate to [`Lab::frame_log_file`].
    pub frame_log: bool,
    pub exe: PathBuf,
}

/// Builds the lab and starts its emulator. On any failure, what was built is removed.
pub fn up(lab: &Lab, options: &UpOptions) -> Result<(), LabError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(LabError::Privilege);
    }
    if lab.exists() {
        return Err(LabError::Exists(lab.name.clone()));
    }
    let result = build(lab, options);
    if result.is_err() {
        let _ = down(lab, Records::Keep);
    }
    result
}

fn build(lab: &Lab, options: &UpOptions) -> Result<(), LabError> {
    let client = lab.namespace("client")?;
    let router = lab.namespace("router")?;
    let server = lab.namespace("server")?;
    std::fs::create_dir_all(lab.state_dir())?;
    let path_json = serde_json::to_string(&options.path).map_err(io::Error::other)?;
    std::fs::write(lab.path_file(), &path_json)?;
    let receivers: Vec<(String, String, String)> = (1..=options.receivers.min(MAX_RECEIVERS))
        .map(receiver)
        .collect();
    let mut hosts = format!(
        "127.0.0.1 localhost\n::1 localhost\n{CLIENT_V4} client\n{SERVER_V4} server\n\
         {CLIENT_V6} client\n{SERVER_V6} server\n"
    );
    for (name, v4, v6) in &receivers {
        hosts += &format!("{v4} {name}\n{v6} {name}\n");
    }
    let mut namespaces = vec![client.clone(), router.clone(), server.clone()];
    for name in receivers.iter().map(|r| r.0.as_str()) {
        namespaces.push(lab.namespace(name)?);
    }
    for ns in &namespaces {
        ip(&["netns", "add", ns])?;
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
        let etc = PathBuf::from("/etc/netns").join(ns);
        std::fs::create_dir_all(&etc)?;
        std::fs::write(etc.join("hosts"), &hosts)?;
    }
    let mtu = options.mtu.to_string();
    let veth = |one: End<'_>, other: End<'_>| veth_pair(&mtu, one, other);
    veth(("eth0", &client), (ROUTER_CLIENT_SIDE, &router))?;
    let mut hosts_v: Vec<(String, String, String)> =
        vec![(server.clone(), SERVER_V4.to_string(), SERVER_V6.to_string())];
    if receivers.is_empty() {
        veth(("eth0", &server), (ROUTER_SERVER_SIDE, &router))?;
    } else {
        let switch = lab.namespace(SWITCH)?;
        let mut ports = vec![(
            SWITCH_UPLINK.to_string(),
            (ROUTER_SERVER_SIDE, router.as_str()),
        )];
        ports.push(("to-server".to_string(), ("eth0", server.as_str())));
        for (k, (name, v4, v6)) in receivers.iter().enumerate() {
            hosts_v.push((namespaces[3 + k].clone(), v4.clone(), v6.clone()));
            ports.push((format!("to-{name}"), ("eth0", namespaces[3 + k].as_str())));
        }
        build_switch(&switch, &ports, &mtu, options.path.offloads)?;
    }
    let mut ends: Vec<(&String, &str, &str)> = vec![(&client, CLIENT_V4, CLIENT_V6)];
    ends.extend(
        hosts_v
            .iter()
            .map(|(ns, v4, v6)| (ns, v4.as_str(), v6.as_str())),
    );
    for (ns, v4, v6) in ends {
        ip(&["-n", ns, "addr", "add", &format!("{v4}/24"), "dev", "eth0"])?;
        ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{v6}/64"),
            "dev",
            "eth0",
            "nodad",
        ])?;
        ip(&["-n", ns, "link", "set", "eth0", "up"])?;
        let name = ns.to_string();
        let offloads = options.path.offloads;
        crate::sys::in_namespace(&name, move || crate::sys::set_offloads("eth0", offloads))?;
        set_tcp_buffers(ns, options.buffers)?;
        if !receivers.is_empty() {
            // Groups are reached through the one link: a sender and a join need no device.
            ip(&["-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth0"])?;
        }
    }
    for side in [ROUTER_CLIENT_SIDE, ROUTER_SERVER_SIDE] {
        ip(&["-n", &router, "link", "set", side, "up"])?;
        let router = router.clone();
        let offloads = options.path.offloads;
        crate::sys::in_namespace(&router, move || crate::sys::set_offloads(side, offloads))?;
    }
    start_emulator(lab, options, &router, &path_json)
}

/// One end of a veth pair: its interface's name and its namespace.
type End<'a> = (&'a str, &'a str);

/// A veth pair of MTU `mtu` between two namespaces.
fn veth_pair(
    mtu: &str,
    (one, one_ns): End<'_>,
    (other, other_ns): End<'_>,
) -> Result<(), LabError> {
    ip(&[
        "link", "add", one, "netns", one_ns, "mtu", mtu, "type", "veth", "peer", "name", other,
        "netns", other_ns, "mtu", mtu,
    ])
}

/// The switch namespace: a bridge of the kernel's that snoops IGMPv3 and MLDv2 (so that a
/// source-specific join is one) and is the link's querier (without a querier the bridge
/// floods every group), each host's port leaving a group at its host's leave
/// (`fastleave`: one host a port), with a port to
/// each of `ports` (its name here, and the other end's name and namespace).
fn build_switch(
    switch: &str,
    ports: &[(String, End<'_>)],
    mtu: &str,
    offloads: bool,
) -> Result<(), LabError> {
    // Every name here is the lab's own (no spaces): a command reads as one line.
    let ip_line = |line: String| ip(&line.split_whitespace().collect::<Vec<_>>());
    ip(&["netns", "add", switch])?;
    ip(&["-n", switch, "link", "set", "lo", "up"])?;
    ip_line(format!(
        "-n {switch} link add {BRIDGE} type bridge mcast_snooping 1 \
         mcast_igmp_version 3 mcast_mld_version 2 mcast_query_response_interval 100"
    ))?;
    // Made the querier once its response interval is set: becoming one waits that long
    // (the kernel reads the interval as the querier is turned on).
    ip_line(format!(
        "-n {switch} link set {BRIDGE} type bridge mcast_querier 1"
    ))?;
    for (port, other) in ports {
        veth_pair(mtu, (port, switch), *other)?;
        ip(&["-n", switch, "link", "set", port, "master", BRIDGE])?;
        if port != SWITCH_UPLINK {
            // One host behind each port: its leave ends the port's membership at once.
            ip_line(format!(
                "-n {switch} link set {port} type bridge_slave fastleave on"
            ))?;
        }
        ip(&["-n", switch, "link", "set", port, "up"])?;
        let (name, port) = (switch.to_string(), port.clone());
        crate::sys::in_namespace(&name, move || crate::sys::set_offloads(&port, offloads))?;
    }
    ip(&["-n", switch, "link", "set", BRIDGE, "up"])?;
    // A bridge that has just become the querier floods every group for one query
    // response interval (it waits to hear of another querier first): the lab is up once
    // that is over, so a host that did not join hears nothing from the start.
    std::thread::sleep(QUERIER_WAIT);
    Ok(())
}

/// The switch's query response interval (1 s, `mcast_query_response_interval 100`) and
/// a little more.
const QUERIER_WAIT: Duration = Duration::from_millis(1_200);

/// A new namespace starts from the kernel's TCP buffer defaults, not this host's: the
/// lab's hosts get this host's tcp_rmem and tcp_wmem (so a test in the lab behaves as
/// this host would), or a larger maximum when asked.
fn set_tcp_buffers(ns: &str, maximum: Option<u64>) -> Result<(), LabError> {
    let mut settings = Vec::new();
    for key in ["tcp_rmem", "tcp_wmem"] {
        let path = format!("/proc/sys/net/ipv4/{key}");
        let mut value = std::fs::read_to_string(&path)?.trim().to_string();
        if let Some(max) = maximum {
            let fields: Vec<&str> = value.split_whitespace().collect();
            if fields.len() == 3 {
                value = format!("{} {} {max}", fields[0], fields[1]);
            }
        }
        settings.push((path, value));
    }
    crate::sys::in_namespace(ns, move || {
        for (path, value) in settings {
            std::fs::write(&path, value)?;
        }
        Ok(())
    })?;
    Ok(())
}

fn start_emulator(
    lab: &Lab,
    options: &UpOptions,
    router: &str,
    path_json: &str,
) -> Result<(), LabError> {
    let log = std::fs::File::create(lab.log_file())?;
    let status = lab.status_file();
    let _ = std::fs::remove_file(&status);
    let mut command = Command::new("ip");
    command
        .args(["netns", "exec", router])
        .arg(&options.exe)
        .args([
            "impair",
            "--between",
            ROUTER_CLIENT_SIDE,
            ROUTER_SERVER_SIDE,
            "--path-json",
            path_json,
            "--quiet",
            "--status-file",
        ])
        .arg(&status);
    let frames = lab.frame_log_file();
    let _ = std::fs::remove_file(&frames);
    if options.frame_log {
        command.arg("--frame-log").arg(&frames);
    }
    command
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    detach(&mut command);
    let mut child = command.spawn()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if status.exists() {
            return Ok(());
        }
        if let Some(exit) = child.try_wait()? {
            let log = std::fs::read_to_string(lab.log_file()).unwrap_or_default();
            return Err(LabError::Emulator(format!("{exit}: {}", log.trim())));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    Err(LabError::Emulator("no status within 10 s".into()))
}

/// Puts a child in its own session: a terminal's Ctrl-C goes to the controller, which
/// tears the lab down in order.
pub fn detach(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid is async-signal-safe and touches nothing of the parent's.
    unsafe {
        command.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
}

/// A command to run on one of the lab's hosts, with the lab's environment: the server's
/// address and the path (for results).
pub fn command_in(lab: &Lab, host: &str, argv: &[String]) -> Result<Command, LabError> {
    let ns = lab.namespace(host)?;
    if !lab.exists() {
        return Err(LabError::Missing(lab.name.clone()));
    }
    let path = lab.path()?;
    let mut command = Command::new("ip");
    command
        .args(["netns", "exec", &ns])
        .args(argv)
        .env(SERVER_ENV, SERVER_V4)
        .env(
            PATH_ENV,
            serde_json::to_string(&path).map_err(io::Error::other)?,
        );
    Ok(command)
}

/// What `down` removed.
#[derive(Debug, Default)]
pub struct Removed {
    pub namespaces: usize,
    pub processes: usize,
}

fn pids_in(ns: &str) -> Vec<i32> {
    Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Takes down the lab a `lab run` built: a lab named for this run alone leaves nothing
/// behind when its command succeeded; a named lab's records, or a failed run's, are kept
/// for a look. The lines to tell the user (a warning, or where the records are).
pub fn down_after_run(lab: &Lab, named: bool, succeeded: bool) -> Vec<String> {
    let records = if !named && succeeded {
        Records::Remove
    } else {
        Records::Keep
    };
    match down(lab, records) {
        Err(error) => vec![format!("warning: removing lab '{}': {error}", lab.name())],
        Ok(_) if records == Records::Keep && lab.state_dir().exists() => vec![format!(
            "the lab's records (the emulator's status and log) are kept in {}",
            lab.state_dir().display()
        )],
        Ok(_) => Vec::new(),
    }
}

/// What `down` leaves behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Records {
    /// Nothing: the lab's run directory goes too (`linerate lab down`).
    Remove,
    /// The emulator's status and log, readable until the next lab of this name (`lab run`
    /// tears its lab down and its caller reads what the emulator counted).
    Keep,
}

/// Removes the lab: ends every process inside its namespaces (TERM, then KILL after two
/// seconds), deletes the namespaces (and with them the veths), the hosts files and the
/// state directory. Removing a lab that is not there is not an error.
pub fn down(lab: &Lab, records: Records) -> Result<Removed, LabError> {
    let mut removed = Removed::default();
    let namespaces: Vec<String> = every_host()
        .filter_map(|h| lab.namespace(&h).ok())
        .collect();
    let mut pids: Vec<i32> = namespaces.iter().flat_map(|ns| pids_in(ns)).collect();
    pids.sort_unstable();
    pids.dedup();
    removed.processes = pids.len();
    for &pid in &pids {
        // SAFETY: signalling processes that live in this lab's namespaces.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline && pids.iter().any(|&p| alive(p)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for &pid in pids.iter().filter(|&&p| alive(p)) {
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    for ns in &namespaces {
        if PathBuf::from("/run/netns").join(ns).exists() {
            ip(&["netns", "del", ns])?;
            removed.namespaces += 1;
        }
        let _ = std::fs::remove_dir_all(PathBuf::from("/etc/netns").join(ns));
    }
    // The path goes either way, so that the lab is known to be down.
    let _ = std::fs::remove_file(lab.path_file());
    if records == Records::Remove {
        let _ = std::fs::remove_dir_all(lab.state_dir());
    }
    Ok(removed)
}

fn alive(pid: i32) -> bool {
    // A zombie child of ours counts as gone: it has stopped and holds no namespace.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Every lab on this machine, by its namespaces.
pub fn list() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter_map(|n| {
                    let rest = n.strip_prefix(PREFIX)?;
                    every_host()
                        .find_map(|h| rest.strip_suffix(&format!("-{h}")))
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names.dedup();
    names
}

/// Waits until something listens on TCP `port` inside the lab's server namespace (read
/// from that namespace's /proc/net/tcp and tcp6, so nothing connects and nothing is
/// logged by the server).
pub fn wait_listening(lab: &Lab, port: u16, within: Duration) -> Result<bool, LabError> {
    let ns = lab.namespace("server")?;
    let deadline = Instant::now() + within;
    loop {
        let listening = crate::sys::in_namespace(&ns, move || {
            let needle = format!(":{port:04X} ");
            let mut found = false;
            for table in ["tcp", "tcp6"] {
                let text = std::fs::read_to_string(format!("/proc/thread-self/net/{table}"))
                    .unwrap_or_default();
                found |= text.lines().skip(1).any(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    fields.len() > 3
                        && format!("{} ", fields[1]).ends_with(&needle)
                        && fields[3] == "0A"
                });
            }
            Ok(found)
        })?;
        if listening {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What `lab up` prints: the path, the hosts' addresses and the commands to go on with.
pub fn up_text(lab: &Lab, path: &PathFacts, receivers: u8) -> String {
    let name = if lab.name() == "lab" {
        String::new()
    } else {
        format!(" --name {}", lab.name())
    };
    let receivers = match receivers {
        0 => String::new(),
        n => {
            let (last, v4, _) = receiver(n);
            format!(
                "\n  receivers rx1 {} to {last} {v4} beside the server, on a bridge that snoops IGMPv3 and MLDv2",
                receiver(1).1
            )
        }
    };
    let frames = lab.frame_log_file();
    let receivers = if frames.exists() {
        format!("{receivers}\n  each frame's fate: {}", frames.display())
    } else {
        receivers
    };
    format!(
        "lab '{}' is up: {}\n  client {CLIENT_V4} ({CLIENT_V6}), server {SERVER_V4} ({SERVER_V6}); \
         the router runs the emulator{receivers}\n  linerate lab exec{name} server -- linerate serve &\n  \
         linerate lab exec{name} client -- linerate stream server -t 30\n  linerate lab down{name}\n",
        lab.name(),
        path.summary()
    )
}

/// `lab down`: each lab named taken down, its records removed, a line each.
pub fn down_each(names: &[String], say: &mut dyn FnMut(&str)) -> Result<(), LabError> {
    if names.is_empty() {
        say("no labs on this machine");
    }
    for name in names {
        let lab = Lab::new(name)?;
        let removed = down(&lab, Records::Remove)?;
        if removed.namespaces == 0 {
            say(&format!("no lab named '{name}'"));
        } else {
            say(&format!(
                "lab '{name}' removed: {}, {} ended",
                counted(removed.namespaces as u64, "namespace", None),
                counted(removed.processes as u64, "process", Some("processes"))
            ));
        }
    }
    Ok(())
}
