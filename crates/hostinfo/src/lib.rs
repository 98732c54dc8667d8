//! Host observation for linerate.
//!
//! [`CpuSnapshot`] reads every CPU's time counters from `/proc/stat`; two snapshots around
//! a measurement window give system-wide and per-core use, including the interrupt and
//! softirq time that `getrusage` does not see (docs/measurement.md 4). [`thread_cpu_time`]
//! gives the calling thread's own CPU time, so that a test can count its own threads even
//! when it shares a process with other tests. [`host_facts`] describes the machine.

pub mod clock;
pub mod doctor;
mod ethtool;
mod netlink;
pub mod observe;
pub mod source;

/// Blocks SIGPIPE in the calling thread (and the threads it starts from now on): a write
/// to a socket the peer reset then fails with EPIPE instead of ending the process. The
/// binary keeps SIGPIPE's default so that `linerate ... | head` ends quietly, and the
/// standard library's socket writes pass MSG_NOSIGNAL; but writev (hyper's vectored
/// writes, rustls' records through tokio) has no such flag. Call it first in every thread
/// that writes to sockets through tokio, as a runtime's `on_thread_start`.
pub fn block_sigpipe() {
    // SAFETY: a signal mask of one signal, changed for this thread only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

use linerate_model::{CpuUsage, HostFacts, UdpCounters};
use std::io;
use std::time::Duration;

/// Jiffies per CPU in `/proc/stat` field order: user, nice, system, idle, iowait, irq,
/// softirq, steal. (guest and guest_nice are already included in user and nice.)
const FIELDS: usize = 8;
const USER: usize = 0;
const NICE: usize = 1;
const SYSTEM: usize = 2;
const IDLE: usize = 3;
const IOWAIT: usize = 4;
const IRQ: usize = 5;
const SOFTIRQ: usize = 6;
const STEAL: usize = 7;

/// One reading of the per-CPU time counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuSnapshot {
    /// Indexed by CPU number as the kernel lists them (`cpu0`, `cpu1`, ...).
    pub per_core: Vec<[u64; FIELDS]>,
}

impl CpuSnapshot {
    /// Reads `/proc/stat`.
    pub fn read() -> io::Result<CpuSnapshot> {
        let text = std::fs::read_to_string("/proc/stat")?;
        CpuSnapshot::parse(&text).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "no per-CPU lines in /proc/stat")
        })
    }

    /// Parses the text of `/proc/stat`; `None` if it has no `cpuN` lines.
    pub fn parse(text: &str) -> Option<CpuSnapshot> {
        let per_core: Vec<[u64; FIELDS]> = text
            .lines()
            .filter(|line| {
                line.strip_prefix("cpu")
                    .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
            })
            .map(|line| {
                let mut fields = [0u64; FIELDS];
                for (slot, value) in fields.iter_mut().zip(line.split_whitespace().skip(1)) {
                    *slot = value.parse().unwrap_or(0);
                }
                fields
            })
            .collect();
        (!per_core.is_empty()).then_some(CpuSnapshot { per_core })
    }

    /// Each CPU's share of the time up to `later` in hard interrupts and in softirqs,
    /// percent: (irq, softirq).
    pub fn irq_shares(&self, later: &CpuSnapshot) -> Vec<(f64, f64)> {
        self.core_deltas(later)
            .map(|d| {
                let whole: u64 = d.iter().sum();
                (pct(d[IRQ], whole), pct(d[SOFTIRQ], whole))
            })
            .collect()
    }

    /// Each CPU's time counters advanced between this snapshot and `later`.
    fn core_deltas<'a>(
        &'a self,
        later: &'a CpuSnapshot,
    ) -> impl Iterator<Item = [u64; FIELDS]> + 'a {
        self.per_core.iter().zip(&later.per_core).map(|(old, new)| {
            let mut delta = [0u64; FIELDS];
            for ((slot, a), b) in delta.iter_mut().zip(old).zip(new) {
                *slot = b.saturating_sub(*a);
            }
            delta
        })
    }
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// CPU use between two snapshots. `process_cpu` is the CPU time of the test's own threads
/// over the same window, and `window` the window's length on the wall clock.
pub fn usage(
    before: &CpuSnapshot,
    after: &CpuSnapshot,
    process_cpu: Duration,
    window: Duration,
) -> CpuUsage {
    let mut sums = [0u64; FIELDS];
    let mut per_core_busy_pct = Vec::with_capacity(after.per_core.len());
    for delta in before.core_deltas(after) {
        for (sum, d) in sums.iter_mut().zip(&delta) {
            *sum += d;
        }
        let total: u64 = delta.iter().sum();
        let idle = delta[IDLE] + delta[IOWAIT];
        per_core_busy_pct.push(pct(total - idle, total));
    }
    let total: u64 = sums.iter().sum();
    let (busiest_core, busiest_core_pct) =
        per_core_busy_pct
            .iter()
            .copied()
            .enumerate()
            .fold(
                (0, 0.0),
                |best, (i, v)| if v > best.1 { (i, v) } else { best },
            );
    let window_s = window.as_secs_f64();
    CpuUsage {
        cores: per_core_busy_pct.len() as u32,
        window_s,
        user_pct: pct(sums[USER], total),
        nice_pct: pct(sums[NICE], total),
        system_pct: pct(sums[SYSTEM], total),
        irq_pct: pct(sums[IRQ], total),
        softirq_pct: pct(sums[SOFTIRQ], total),
        steal_pct: pct(sums[STEAL], total),
        iowait_pct: pct(sums[IOWAIT], total),
        busy_pct: pct(total - sums[IDLE] - sums[IOWAIT], total),
        busiest_core: busiest_core as u32,
        busiest_core_pct,
        per_core_busy_pct,
        process_pct: if window_s > 0.0 {
            process_cpu.as_secs_f64() * 100.0 / window_s
        } else {
            0.0
        },
        process_cpu_s: process_cpu.as_secs_f64(),
        process_user_pct: 0.0,
    }
}

/// CPU time (user + system) the calling thread has used so far.
pub fn thread_cpu_time() -> Duration {
    let (user, system) = thread_cpu_times();
    user + system
}

/// The calling thread's CPU time so far, as user and system time.
pub fn thread_cpu_times() -> (Duration, Duration) {
    // SAFETY: getrusage writes into the zeroed struct we own; RUSAGE_THREAD is Linux's.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_THREAD, &mut usage) != 0 {
            return (Duration::ZERO, Duration::ZERO);
        }
        usage
    };
    let time =
        |t: libc::timeval| Duration::from_micros(t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64);
    (time(usage.ru_utime), time(usage.ru_stime))
}

fn cpuinfo_field<'a>(cpuinfo: &'a str, key: &str) -> Option<&'a str> {
    cpuinfo.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim())
    })
}

/// Describes this host: name, kernel, CPU model and frequency, core count.
pub fn host_facts() -> HostFacts {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let read_trimmed = |path: &str| std::fs::read_to_string(path).map(|s| s.trim().to_string());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    HostFacts {
        hostname: read_trimmed("/proc/sys/kernel/hostname").unwrap_or_default(),
        kernel: read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_default(),
        cpu_model: cpuinfo_field(&cpuinfo, "model name")
            .or_else(|| cpuinfo_field(&cpuinfo, "Model"))
            .unwrap_or("unknown")
            .to_string(),
        cores,
        cpu_mhz: cpuinfo_field(&cpuinfo, "cpu MHz").and_then(|v| v.parse().ok()),
        software: format!("linerate {}", env!("CARGO_PKG_VERSION")),
        path: std::env::var(linerate_model::PATH_ENV)
            .ok()
            .and_then(|text| linerate_model::PathFacts::from_json(&text))
            .map(Box::new),
        boot_id: read_trimmed("/proc/sys/kernel/random/boot_id").unwrap_or_default(),
    }
}

/// The kernel's UDP counters now (see [`UdpCounters`]).
///
/// IPv4 and IPv6 together: a datagram on a dual-stack (IPv6) socket is counted in
/// /proc/net/snmp6's Udp6 rows even when it came over IPv4 (a server listening on [::]).
pub fn read_udp_counters() -> io::Result<UdpCounters> {
    let v4 = parse_udp_counters(&std::fs::read_to_string("/proc/net/snmp")?)
        .ok_or_else(|| io::Error::other("no Udp rows in /proc/net/snmp"))?;
    let v6 = std::fs::read_to_string("/proc/net/snmp6")
        .map(|text| parse_udp6_counters(&text))
        .unwrap_or_default();
    Ok(UdpCounters {
        in_datagrams: v4.in_datagrams + v6.in_datagrams,
        no_ports: v4.no_ports + v6.no_ports,
        in_errors: v4.in_errors + v6.in_errors,
        out_datagrams: v4.out_datagrams + v6.out_datagrams,
        rcvbuf_errors: v4.rcvbuf_errors + v6.rcvbuf_errors,
        sndbuf_errors: v4.sndbuf_errors + v6.sndbuf_errors,
    })
}

/// Parses the text of `/proc/net/snmp6` (one `Name value` per line) for its Udp6 rows.
pub fn parse_udp6_counters(text: &str) -> UdpCounters {
    let get = |name: &str| {
        text.lines()
            .filter_map(|l| l.split_once(char::is_whitespace))
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    UdpCounters {
        in_datagrams: get("Udp6InDatagrams"),
        no_ports: get("Udp6NoPorts"),
        in_errors: get("Udp6InErrors"),
        out_datagrams: get("Udp6OutDatagrams"),
        rcvbuf_errors: get("Udp6RcvbufErrors"),
        sndbuf_errors: get("Udp6SndbufErrors"),
    }
}

/// Parses the text of `/proc/net/snmp`: a row of names and a row of values per
/// protocol, matched by name so that added columns do not shift anything.
pub fn parse_udp_counters(text: &str) -> Option<UdpCounters> {
    let mut rows = text.lines().filter(|l| l.starts_with("Udp:"));
    let names: Vec<&str> = rows.next()?.split_whitespace().skip(1).collect();
    let values: Vec<&str> = rows.next()?.split_whitespace().skip(1).collect();
    let get = |name: &str| {
        names
            .iter()
            .position(|n| *n == name)
            .and_then(|i| values.get(i)?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Some(UdpCounters {
        in_datagrams: get("InDatagrams"),
        no_ports: get("NoPorts"),
        in_errors: get("InErrors"),
        out_datagrams: get("OutDatagrams"),
        rcvbuf_errors: get("RcvbufErrors"),
        sndbuf_errors: get("SndbufErrors"),
    })
}

/// Sockets in TIME_WAIT in this network namespace (`/proc/net/sockstat`, "TCP: ... tw N").
pub fn time_wait_sockets() -> Option<u64> {
    parse_time_wait(&std::fs::read_to_string("/proc/net/sockstat").ok()?)
}

#[cfg(test)]
mod udp6_tests {
    #[test]
    fn udp6_rows_are_read_by_name() {
        let text = "Udp6InDatagrams                 \t39219\nUdp6NoPorts 2\nUdp6InErrors 772\nUdp6InCsumErrors 772\nUdp6RcvbufErrors 5\n";
        let c = super::parse_udp6_counters(text);
        assert_eq!(
            (c.in_datagrams, c.no_ports, c.in_errors, c.rcvbuf_errors),
            (39219, 2, 772, 5)
        );
        assert_eq!(
            super::parse_udp6_counters("garbage\n\n"),
            Default::default()
        );
    }
}

fn parse_time_wait(text: &str) -> Option<u64> {
    let row = text.lines().find(|l| l.starts_with("TCP:"))?;
    let fields: Vec<&str> = row.split_whitespace().collect();
    let at = fields.iter().position(|f| *f == "tw")?;
    fields.get(at + 1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_wait_is_read_from_sockstat() {
        let text = "sockets: used 180\nTCP: inuse 9 orphan 0 tw 28231 alloc 12 mem 3\nUDP: inuse 2 mem 0\n";
        assert_eq!(parse_time_wait(text), Some(28231));
        assert_eq!(parse_time_wait("UDP: inuse 2\n"), None);
    }

    const BEFORE: &str = "cpu  300 0 300 1400 0 0 0 0 0 0\n\
                          cpu0 100 0 200 700 0 0 0 0 0 0\n\
                          cpu1 200 0 100 700 0 0 0 0 0 0\nintr 5\n";
    const AFTER: &str = "cpu  0 0 0 0 0 0 0 0 0 0\n\
                         cpu0 110 0 270 710 0 0 10 0 0 0\n\
                         cpu1 210 0 110 780 0 0 0 0 0 0\n";

    #[test]
    fn usage_splits_system_wide_and_per_core() {
        let before = CpuSnapshot::parse(BEFORE).unwrap();
        let after = CpuSnapshot::parse(AFTER).unwrap();
        assert_eq!(before.per_core.len(), 2);
        let cpu = usage(
            &before,
            &after,
            Duration::from_millis(500),
            Duration::from_secs(1),
        );
        // cpu0: 10 user + 70 system + 10 softirq busy of 100; cpu1: 20 busy of 100.
        assert_eq!(cpu.cores, 2);
        assert!((cpu.busy_pct - 55.0).abs() < 1e-9);
        assert!((cpu.system_pct - 40.0).abs() < 1e-9);
        assert!((cpu.softirq_pct - 5.0).abs() < 1e-9);
        assert_eq!(cpu.busiest_core, 0);
        assert!((cpu.busiest_core_pct - 90.0).abs() < 1e-9);
        assert!((cpu.process_pct - 50.0).abs() < 1e-9);
    }

    #[test]
    fn reads_this_host() {
        let snapshot = CpuSnapshot::read().expect("/proc/stat");
        assert!(!snapshot.per_core.is_empty());
        let facts = host_facts();
        assert!(!facts.kernel.is_empty());
        assert!(facts.cores >= 1);
    }

    #[test]
    fn thread_cpu_time_grows_with_work() {
        let before = thread_cpu_time();
        let mut x = 0u64;
        let until = std::time::Instant::now() + Duration::from_millis(50);
        while std::time::Instant::now() < until {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(thread_cpu_time() > before);
    }

    #[test]
    fn udp_counters_are_matched_by_name() {
        let text = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n\
Udp: 100 2 7 90 5 1 0 0 0\n\
UdpLite: InDatagrams NoPorts\nUdpLite: 0 0\n";
        let c = parse_udp_counters(text).unwrap();
        assert_eq!(c.in_datagrams, 100);
        assert_eq!(c.no_ports, 2);
        assert_eq!(c.in_errors, 7);
        assert_eq!(c.out_datagrams, 90);
        assert_eq!(c.rcvbuf_errors, 5);
        assert_eq!(c.sndbuf_errors, 1);
        let later = UdpCounters { in_errors: 9, ..c };
        assert_eq!(c.delta(&later).in_errors, 2);
        assert!(read_udp_counters().is_ok());
    }
}
