//! What encryption cost a test: the suite and handshake, each end's CPU per Gbit and the
//! part of it spent sealing and opening records, and, with `--baseline`, the same test's
//! plain TCP figures beside them.

pub use crate::model::{Baseline, CryptoSummary};
use crate::model::{PerSide, Summary};
use linerate_model::units::{format_rate, Scale};
use linerate_model::{CryptoSide, SideResult};

fn per_gbit(seconds: f64, gbit: f64) -> f64 {
    if gbit > 0.0 {
        seconds / gbit
    } else {
        0.0
    }
}

/// Process CPU seconds per Gbit received on each end, and together.
pub fn cpu_per_gbit(summary: &Summary) -> (PerSide<f64>, f64) {
    let gbit = summary.receiver_bytes as f64 * 8.0 / 1e9;
    let local = per_gbit(summary.cpu.local.process_cpu_s, gbit);
    let remote = per_gbit(summary.cpu.remote.process_cpu_s, gbit);
    (PerSide { local, remote }, local + remote)
}

/// The cost of an encrypted test, from both ends' results and the summary's window bytes
/// and CPU; `None` for a plain test.
pub fn summarize(
    local: &SideResult,
    remote: &SideResult,
    summary: &Summary,
) -> Option<CryptoSummary> {
    let client: &CryptoSide = local.crypto.as_ref().or(remote.crypto.as_ref())?;
    let gbit = summary.receiver_bytes as f64 * 8.0 / 1e9;
    let (cpu, total) = cpu_per_gbit(summary);
    let crypto = |side: &SideResult| {
        side.crypto
            .as_ref()
            .and_then(|c| c.crypto_cpu_s)
            .map(|s| per_gbit(s, gbit))
    };
    let ktls = |side: &SideResult| side.crypto.as_ref().map_or(0, |c| c.ktls_connections);
    Some(CryptoSummary {
        protocol: client.protocol.clone(),
        suite: client.suite.clone(),
        ktls_connections: PerSide {
            local: ktls(local),
            remote: ktls(remote),
        },
        connections: client.connections,
        handshake_ms: client.handshake_ms,
        handshake_max_ms: client.handshake_max_ms,
        cpu_s_per_gbit: cpu,
        cpu_s_per_gbit_total: total,
        crypto_s_per_gbit: PerSide {
            local: crypto(local),
            remote: crypto(remote),
        },
        baseline: None,
        crypto_us_per_transaction: None,
    })
}

/// Microseconds each end spent sealing and opening records per transaction.
pub fn per_transaction(
    local: &SideResult,
    remote: &SideResult,
    transactions: u64,
) -> PerSide<Option<f64>> {
    let per = |side: &SideResult| {
        side.crypto
            .as_ref()
            .and_then(|c| c.crypto_cpu_s)
            .filter(|_| transactions > 0)
            .map(|s| s / transactions as f64 * 1e6)
    };
    PerSide {
        local: per(local),
        remote: per(remote),
    }
}

impl CryptoSummary {
    /// Sets the plain run's figures beside this one's.
    pub fn compare_with(&mut self, encrypted_bps: f64, plain: &Summary) {
        let (cpu, total) = cpu_per_gbit(plain);
        self.baseline = Some(Baseline {
            receiver_bps: plain.receiver_bps,
            cpu_s_per_gbit: cpu,
            cpu_s_per_gbit_total: total,
            extra_cpu_pct: if total > 0.0 {
                (self.cpu_s_per_gbit_total / total - 1.0) * 100.0
            } else {
                0.0
            },
            goodput_ratio: if plain.receiver_bps > 0.0 {
                encrypted_bps / plain.receiver_bps
            } else {
                0.0
            },
        });
    }

    /// "TLS" or "QUIC" and the suite: "TLS AES-256-GCM".
    pub fn name(&self) -> String {
        let short = match self.suite.as_str() {
            "TLS_AES_128_GCM_SHA256" => "AES-128-GCM",
            "TLS_AES_256_GCM_SHA384" => "AES-256-GCM",
            "TLS_CHACHA20_POLY1305_SHA256" => "ChaCha20-Poly1305",
            other => other,
        };
        format!("{} {short}", self.protocol.to_ascii_uppercase())
    }

    /// The report's lines.
    pub fn lines(&self, receiver_bps: f64, scale: Scale) -> Vec<String> {
        let record_layer = match (self.ktls_connections.local, self.ktls_connections.remote) {
            (0, 0) => String::new(),
            (l, r) => format!(
                ", kTLS on {l} client and {r} server connections of {}",
                self.connections
            ),
        };
        let sealing = match (self.crypto_s_per_gbit.local, self.crypto_s_per_gbit.remote) {
            (None, None) => String::new(),
            (l, r) => {
                let show = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.4}"));
                let unit = if self.protocol == "quic" {
                    "packets"
                } else {
                    "records"
                };
                format!(
                    "; sealing and opening {unit} client {}, server {} s/Gbit",
                    show(l),
                    show(r)
                )
            }
        };
        let mut lines = vec![
            format!(
                "Crypto:           {}{record_layer}, handshake {:.2} ms (longest {:.2})",
                self.name(),
                self.handshake_ms,
                self.handshake_max_ms
            ),
            format!(
                "Crypto CPU:       {:.4} CPU s/Gbit (client {:.4}, server {:.4}){sealing}",
                self.cpu_s_per_gbit_total, self.cpu_s_per_gbit.local, self.cpu_s_per_gbit.remote
            ),
        ];
        if let Some(base) = &self.baseline {
            let verb = if base.extra_cpu_pct >= 0.0 {
                "more"
            } else {
                "less"
            };
            lines.push(format!(
                "Baseline:         {}: {}, {:.4} CPU s/Gbit vs plain TCP {}, {:.4}: encryption costs {:.0} % {verb} CPU per Gbit, goodput {:.2}x",
                self.name(),
                format_rate(receiver_bps, scale),
                self.cpu_s_per_gbit_total,
                format_rate(base.receiver_bps, scale),
                base.cpu_s_per_gbit_total,
                base.extra_cpu_pct.abs(),
                base.goodput_ratio
            ));
        }
        lines
    }
}
