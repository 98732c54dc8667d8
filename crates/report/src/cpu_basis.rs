//! How a test's CPU figures are to be read, and what its service demand charges.
//!
//! Each end reads its host's `/proc/stat` over the window (docs/measurement.md rule 4)
//! and the CPU time of its own threads. Two things make the host's busy time the wrong
//! charge for the test:
//!
//! - **One host.** When both ends run on one kernel (loopback, network namespaces), the
//!   two system-wide readings are the same figure, and charging it to each end counts the
//!   host twice. The host's busy time is then split between the ends in proportion to
//!   their own threads' CPU time (the kernel work each one caused rides along).
//! - **Other work.** Busy time that neither end's threads account for is other processes
//!   (or kernel threads). When it is more than [`OTHER_WORK_PCT`] of a core, a service
//!   demand from the host's busy time would charge that work to the test (a 1-byte `rr`
//!   beside two busy loops once read 40,455 us per transaction); the demand then counts
//!   only the test's own threads, and a warning says how much the others took.

use crate::model::{CpuBasis, DemandBasis, PerSide};
use linerate_model::{CpuUsage, SideResult};

/// Other work above this share of one core (percent, averaged over the window) makes a
/// host busy for the service demand.
pub const OTHER_WORK_PCT: f64 = 25.0;

impl CpuBasis {
    /// The basis of a test whose ends measured `local` and `remote`. An end without
    /// system-wide figures (an iperf3 peer) counts as its own host with no other work known.
    pub fn of(local: &SideResult, remote: &SideResult) -> CpuBasis {
        let (l, r) = (&local.cpu, &remote.cpu);
        let shared_host = local.host.same_kernel(&remote.host) && l.cores > 0 && r.cores > 0;
        let others = |cpu: &CpuUsage, ours_s: f64| {
            if cpu.cores == 0 || cpu.window_s <= 0.0 {
                return 0.0;
            }
            ((cpu.busy_us() / 1e6 - ours_s) / cpu.window_s * 100.0).max(0.0)
        };
        let others_pct = if shared_host {
            let host = others(l, l.process_cpu_s + r.process_cpu_s);
            PerSide {
                local: host,
                remote: host,
            }
        } else {
            PerSide {
                local: others(l, l.process_cpu_s),
                remote: others(r, r.process_cpu_s),
            }
        };
        let service_demand =
            if others_pct.local > OTHER_WORK_PCT || others_pct.remote > OTHER_WORK_PCT {
                DemandBasis::Processes
            } else if shared_host {
                DemandBasis::Split
            } else {
                DemandBasis::System
            };
        CpuBasis {
            shared_host,
            others_pct,
            service_demand,
        }
    }

    /// The CPU microseconds charged to each end for its service demand.
    pub fn charged_us(&self, local: &CpuUsage, remote: &CpuUsage) -> PerSide<f64> {
        let own = |cpu: &CpuUsage| cpu.process_cpu_s * 1e6;
        match self.service_demand {
            DemandBasis::System => PerSide {
                local: local.busy_us(),
                remote: remote.busy_us(),
            },
            DemandBasis::Split => {
                let ours = own(local) + own(remote);
                let share = |cpu: &CpuUsage| {
                    if ours > 0.0 {
                        own(cpu) / ours
                    } else {
                        0.5
                    }
                };
                PerSide {
                    local: local.busy_us() * share(local),
                    remote: local.busy_us() * share(remote),
                }
            }
            // An end without system-wide figures charges its process either way.
            DemandBasis::Processes => PerSide {
                local: own(local),
                remote: own(remote),
            },
        }
    }

    /// The warning a busy host earns: how much other work took, and what the demand counts.
    pub fn warning(&self) -> Option<String> {
        if self.service_demand != DemandBasis::Processes {
            return None;
        }
        let took = if self.shared_host {
            format!(
                "{:.0} % of a core on this host (client and server both ran on it)",
                self.others_pct.local
            )
        } else {
            format!(
                "{:.0} % of a core on the client's host and {:.0} % on the server's",
                self.others_pct.local, self.others_pct.remote
            )
        };
        Some(format!(
            "other processes took {took} during the test: the system-wide CPU figures \
             include them, and the service demand counts only linerate's own threads"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linerate_model::HostFacts;

    fn side(boot: &str, busy_pct: f64, process_cpu_s: f64) -> SideResult {
        SideResult {
            host: HostFacts {
                boot_id: boot.into(),
                ..Default::default()
            },
            cpu: CpuUsage {
                cores: 2,
                window_s: 10.0,
                busy_pct,
                process_cpu_s,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn one_quiet_host_is_split_between_the_ends_by_their_threads() {
        // 2 cores at 50 % for 10 s: 10 CPU-seconds; the ends' threads 6 and 3.
        let (local, remote) = (side("a", 50.0, 6.0), side("a", 50.0, 3.0));
        let basis = CpuBasis::of(&local, &remote);
        assert!(basis.shared_host);
        assert_eq!(basis.service_demand, DemandBasis::Split);
        assert!((basis.others_pct.local - 10.0).abs() < 1e-9);
        let charged = basis.charged_us(&local.cpu, &remote.cpu);
        assert!((charged.local - 10e6 * 6.0 / 9.0).abs() < 1.0);
        assert!((charged.local + charged.remote - 10e6).abs() < 1.0);
        assert_eq!(basis.warning(), None);
    }

    #[test]
    fn other_work_is_not_charged_to_the_test() {
        // Two busy loops: the host is at 100 %, the ends' threads used 0.2 s and 0.1 s.
        let (local, remote) = (side("a", 100.0, 0.2), side("a", 100.0, 0.1));
        let basis = CpuBasis::of(&local, &remote);
        assert_eq!(basis.service_demand, DemandBasis::Processes);
        let charged = basis.charged_us(&local.cpu, &remote.cpu);
        assert_eq!((charged.local, charged.remote), (0.2e6, 0.1e6));
        let warning = basis.warning().unwrap();
        assert!(warning.contains("197 %"), "{warning}");
    }

    #[test]
    fn two_quiet_hosts_charge_their_own_busy_time() {
        let (local, remote) = (side("a", 30.0, 5.0), side("b", 20.0, 3.5));
        let basis = CpuBasis::of(&local, &remote);
        assert!(!basis.shared_host);
        assert_eq!(basis.service_demand, DemandBasis::System);
        let charged = basis.charged_us(&local.cpu, &remote.cpu);
        assert_eq!((charged.local, charged.remote), (6e6, 4e6));
        // Unknown boot ids are never one host.
        assert!(!CpuBasis::of(&side("", 30.0, 5.0), &side("", 30.0, 5.0)).shared_host);
    }
}
