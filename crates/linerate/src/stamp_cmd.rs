//! `linerate stamp TARGET`: a STAMP Session-Sender (linerate_stamp::sender) against any
//! reflector, its result printed, kept and shown as every other test's.

use crate::cli::StampArgs;
use crate::failure::{CommandResult, Failure};
use crate::Globals;
use linerate_campaign::stamp_run;
use linerate_model::clock::UnixTime;
use linerate_stamp::sender::{self, Options};
use linerate_stamp::wire::{tlv, Key, Mode};
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// TARGET as an address: HOST, HOST:PORT, [V6]:PORT or a bare IPv6 address; port 862
/// unless given.
pub fn resolve(target: &str) -> Result<SocketAddr, String> {
    let bad = |why: &str| format!("invalid value '{target}' for '<TARGET>': {why}");
    if target.is_empty() || target.contains('/') || target.contains(char::is_whitespace) {
        return Err(bad("give HOST or HOST:PORT"));
    }
    if let Ok(ip) = target.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, linerate_stamp::PORT));
    }
    let with_port = if target.starts_with('[')
        || target
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        target.to_string()
    } else {
        format!("{target}:{}", linerate_stamp::PORT)
    };
    with_port
        .to_socket_addrs()
        .map_err(|e| bad(&e.to_string()))?
        .next()
        .ok_or_else(|| bad("the name has no address"))
}

/// The key of --hmac-key or --hmac-key-file, when given.
fn key(args: &StampArgs) -> Result<Option<Key>, Failure> {
    if let Some(hex) = &args.hmac_key {
        return Key::from_text(hex.as_bytes())
            .map(Some)
            .map_err(|e| Failure::Usage(format!("invalid value for '--hmac-key': {e}")));
    }
    let Some(path) = &args.hmac_key_file else {
        return Ok(None);
    };
    read_key_file(path, "--hmac-key-file")
        .map(Some)
        .map_err(Failure::Usage)
}

/// A STAMP key file: hexadecimal text, or the raw bytes; at most 4 KiB.
pub fn read_key_file(path: &std::path::Path, flag: &str) -> Result<Key, String> {
    let shown = path.display();
    let meta = std::fs::metadata(path)
        .map_err(|e| format!("invalid value '{shown}' for '{flag}': {e}"))?;
    if meta.len() > 4096 {
        return Err(format!(
            "invalid value '{shown}' for '{flag}': over 4096 bytes"
        ));
    }
    let bytes =
        std::fs::read(path).map_err(|e| format!("invalid value '{shown}' for '{flag}': {e}"))?;
    Key::from_text(&bytes).map_err(|e| format!("invalid value '{shown}' for '{flag}': {e}"))
}

/// The run the flags ask for: the mode the key makes, the rate, the TLVs and the padding
/// that makes `--size`.
fn options(args: &StampArgs) -> Result<Options, Failure> {
    let addr = resolve(&args.target).map_err(Failure::Usage)?;
    if let Some(bind) = args.source.bind.filter(|b| b.is_ipv4() != addr.is_ipv4()) {
        return Err(Failure::Usage(format!(
            "invalid value '{bind}' for '--bind': the reflector {addr} is of the other IP version"
        )));
    }
    let key = key(args)?;
    let mode = if key.is_some() {
        Mode::Authenticated
    } else {
        Mode::Open
    };
    let rate_pps = match (args.rate, args.interval) {
        (Some(rate), _) => rate,
        (None, Some(gap)) => 1.0 / gap,
        (None, None) => 10.0,
    };
    let extensions = tlv::Request {
        padding: 0,
        class_of_service: args.dscp.filter(|_| !args.no_tlvs),
        direct_measurement: !args.no_tlvs,
        hmac: mode == Mode::Authenticated && !args.no_tlvs,
    };
    let mut options = Options {
        target: args.target.clone(),
        addr,
        mode,
        key,
        rate_pps,
        count: args.count,
        duration: match (args.time, args.count) {
            (Some(t), _) => Some(Duration::from_secs_f64(t)),
            (None, Some(_)) => None,
            (None, None) => Some(Duration::from_secs(10)),
        },
        extensions,
        dscp: args.dscp,
        source: args.source.source(),
        timeout: Duration::from_secs_f64(args.timeout),
        report_every: Duration::from_secs_f64(args.interval_report),
        // In a lab (`lab run`, `lab exec` name the path they build), both ends are
        // network namespaces of this host: one clock.
        same_clock: args.same_clock
            || sender::is_local(addr.ip())
            || std::env::var_os(linerate_model::PATH_ENV).is_some(),
        ssid: ssid(),
        started_at: UnixTime::now().seconds(),
    };
    if let Some(size) = args.size {
        let bare = options.size();
        let size = usize::from(size);
        let padding = size.saturating_sub(bare);
        if size < bare || (padding > 0 && padding < tlv::HEADER) {
            return Err(Failure::Usage(format!(
                "invalid value '{size}' for '--size': at least {bare} octets in {} mode{}, or {} and up",
                mode.name(),
                if args.no_tlvs { "" } else { " with its TLVs (--no-tlvs for less)" },
                bare + tlv::HEADER
            )));
        }
        options.extensions.padding = padding;
    }
    Ok(options)
}

pub fn run(args: &StampArgs, globals: &Globals) -> CommandResult {
    stamp_run::run(&options(args)?, args.print.json, &globals.storage)
}

/// A session identifier for this run: nonzero, drawn from the system's randomness.
fn ssid() -> u16 {
    let mut bytes = [0u8; 2];
    let _ = getrandom::getrandom(&mut bytes);
    u16::from_be_bytes(bytes).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bare host or address gets STAMP's port; a given port is kept; nonsense is one
    /// line naming the value.
    #[test]
    fn targets_take_port_862_unless_given() {
        assert_eq!(
            resolve("127.0.0.1").unwrap(),
            "127.0.0.1:862".parse().unwrap()
        );
        assert_eq!(
            resolve("127.0.0.1:8620").unwrap(),
            "127.0.0.1:8620".parse().unwrap()
        );
        assert_eq!(resolve("::1").unwrap(), "[::1]:862".parse().unwrap());
        assert_eq!(resolve("[::1]:9").unwrap(), "[::1]:9".parse().unwrap());
        assert_eq!(resolve("localhost").unwrap().port(), 862);
        let e = resolve("a b").unwrap_err();
        assert!(e.contains("'a b'"), "{e}");
    }
}
