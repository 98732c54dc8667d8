//! `linerate rpm` as the user runs it: responsiveness under working conditions, its
//! progress as it goes, its result printed and kept; a slip to the test port is named.

use crate::sink::{self, TextSink};
use crate::storage::Storage;
use anyhow::Result;
use linerate_report::document::Document;
use linerate_report::units::Scale;
use linerate_rpm::client::{self, Options};
use std::io::IsTerminal;

/// `linerate rpm`: a responsiveness run with its progress on stderr, printed as
/// networkQuality prints it (or as JSON) and kept.
pub fn run(options: &Options, json: bool, storage: &Storage) -> Result<()> {
    let store = storage.open_for_run()?;
    // Progress on a terminal, or beside text; JSON alone when piped.
    let show = !json || std::io::stderr().is_terminal();
    let mut progress = |line: &str| {
        if show {
            eprintln!("linerate rpm: {line}");
        }
    };
    let report = match client::run(options, &mut progress) {
        Ok(report) => report,
        Err(e) => {
            // A common slip: the test port (5201) instead of serve's --http/--https one.
            if let Some(authority) = authority_of(&options.config_url) {
                if is_linerate_test_port(&authority) {
                    return Err(e.context(format!(
                        "rpm: {authority} is linerate's test port (serve's control and data port), not its HTTP one: start the server with 'linerate serve --http PORT' or '--https PORT' and give that port"
                    )));
                }
            }
            return Err(e.context("rpm"));
        }
    };
    let document = Document::Rpm(Box::new(report));
    let text = TextSink::new(std::io::stdout(), Scale::Adaptive);
    sink::standard(json, text, store).finish_document(&document)?;
    Ok(())
}

/// HOST:PORT of a URL (the scheme's port when none is given).
fn authority_of(url: &str) -> Option<String> {
    let uri = url.parse::<linerate_rpm::Uri>().ok()?;
    let host = uri.host()?;
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    Some(format!("{host}:{port}"))
}

/// Whether `authority` answers an agent hello as `linerate serve`'s test port does: with
/// a linerate frame (a welcome, or a refusal when it holds a key), within two seconds.
fn is_linerate_test_port(authority: &str) -> bool {
    use std::io::{Read, Write};
    use std::net::ToSocketAddrs;
    let timeout = std::time::Duration::from_secs(2);
    let Some(addr) = authority.to_socket_addrs().ok().and_then(|mut a| a.next()) else {
        return false;
    };
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&addr, timeout) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(timeout));
    let mut hello =
        linerate_proto::agent::agent_preface(linerate_proto::agent::AGENT_VERSION).to_vec();
    hello.extend(linerate_proto::frame::encode(br#"{"type":"hello"}"#));
    if stream.write_all(&hello).is_err() {
        return false;
    }
    let mut length = [0u8; 4];
    if stream.read_exact(&mut length).is_err() {
        return false;
    }
    let length = u32::from_be_bytes(length) as usize;
    if length == 0 || length > 1 << 20 {
        return false;
    }
    let mut body = vec![0u8; length];
    if stream.read_exact(&mut body).is_err() {
        return false;
    }
    serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(String::from))
        .is_some_and(|kind| matches!(kind.as_str(), "welcome" | "error" | "refuse"))
}
