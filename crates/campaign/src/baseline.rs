//! `--baseline`: the same test plain over TCP, run first, so that an encrypted test's cost
//! is read beside what the same path and hosts do without encryption.

use crate::repeat::check_flows;
use crate::sink::{Event, Sink};
use anyhow::Result;
use linerate_model::{Protocol, TestConfig};
use linerate_report::units::{format_rate, Scale};
use linerate_report::Report;

/// The plain twin of an encrypted test: TCP without TLS or QUIC, every other setting the
/// same.
pub fn plain_twin(config: &TestConfig) -> TestConfig {
    let mut plain = config.clone();
    plain.tls = None;
    plain.quic = None;
    plain.protocol = Protocol::Tcp;
    plain
}

/// Runs the plain twin of `config` with `run`, telling `sink` what it is and what it
/// measured. Failed flows fail the baseline: half a baseline compares with nothing.
pub fn run_baseline(
    config: &TestConfig,
    scale: Scale,
    sink: &mut dyn Sink,
    run: impl FnOnce(&TestConfig) -> Result<Report>,
) -> Result<Report> {
    let plain = plain_twin(config);
    sink.event(&Event::Note(&format!(
        "Baseline first: the same test plain, {}",
        plain.describe()
    )));
    let report = run(&plain)?;
    check_flows(&report)?;
    sink.event(&Event::Note(&baseline_line(&report, scale)));
    Ok(report)
}

/// The baseline in one line: its goodput and CPU per Gbit on each end.
fn baseline_line(report: &Report, scale: Scale) -> String {
    let (cpu, total) = linerate_report::crypto::cpu_per_gbit(&report.summary);
    format!(
        "Baseline: plain TCP {}, {total:.4} CPU s/Gbit (client {:.4}, server {:.4})",
        format_rate(report.summary.receiver_bps, scale),
        cpu.local,
        cpu.remote
    )
}

/// Sets the baseline beside an encrypted run's cost figures.
pub fn compare(encrypted: &mut Report, plain: &Report) {
    let receiver_bps = encrypted.summary.receiver_bps;
    if let Some(crypto) = encrypted.summary.crypto.as_mut() {
        crypto.compare_with(receiver_bps, &plain.summary);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{report_of, stream_config};

    #[test]
    fn the_twin_is_plain_tcp_and_nothing_else_changes() {
        let mut quic = stream_config();
        quic.protocol = Protocol::Quic;
        quic.tls = Some(linerate_model::TlsSettings {
            cipher: "aes256-gcm".into(),
            ktls: false,
        });
        quic.quic = Some(linerate_model::QuicSettings {
            connection_per_flow: true,
            workers: 1,
        });
        quic.parallel = 4;
        let plain = plain_twin(&quic);
        assert_eq!(plain.protocol, Protocol::Tcp);
        assert!(plain.tls.is_none() && plain.quic.is_none());
        assert_eq!(plain.parallel, 4);
        assert_eq!(plain.time_s, quic.time_s);
    }

    #[test]
    fn the_baseline_is_announced_and_summed_up() {
        struct Notes(Vec<String>);
        impl Sink for Notes {
            fn event(&mut self, event: &Event<'_>) {
                if let Event::Note(line) = event {
                    self.0.push(line.to_string());
                }
            }
        }
        let mut notes = Notes(Vec::new());
        let report = run_baseline(&stream_config(), Scale::Adaptive, &mut notes, |plain| {
            Ok(report_of(plain.clone(), 25e9))
        })
        .unwrap();
        assert_eq!(report.summary.receiver_bps, 25e9);
        assert!(notes.0[0].starts_with("Baseline first: the same test plain, "));
        assert!(
            notes.0[1].starts_with("Baseline: plain TCP 25.0 Gbits/sec"),
            "{}",
            notes.0[1]
        );
    }
}
