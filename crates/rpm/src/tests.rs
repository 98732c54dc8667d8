use crate::client::{parse_urls, UploadProgress};
use crate::server::{self, config_json, Limits};
use proptest::prelude::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

#[test]
fn the_configuration_names_the_authority_asked_for_or_the_listener() {
    let here = "192.0.2.7:8443".parse().unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&config_json(true, Some("server:8443"), here)).unwrap();
    assert_eq!(
        json["urls"]["large_https_download_url"],
        "https://server:8443/large"
    );
    assert_eq!(
        json["urls"]["https_upload_url"],
        "https://server:8443/slurp"
    );
    assert_eq!(json["version"], 1);
    // Not a plain authority: the listener's address instead.
    for odd in ["evil.example/x?", "a b", "", "x\"y"] {
        let json: serde_json::Value =
            serde_json::from_str(&config_json(false, Some(odd), here)).unwrap();
        assert_eq!(
            json["urls"]["small_download_url"],
            "http://192.0.2.7:8443/small"
        );
    }
    let urls = parse_urls(
        config_json(true, Some("server:8443"), here).as_bytes(),
        true,
    )
    .unwrap();
    assert_eq!(urls.large.path(), "/large");
    // A cleartext client does not take https URLs, nor the reverse.
    assert!(parse_urls(config_json(true, None, here).as_bytes(), false).is_err());
}

#[test]
fn progress_lines_count_what_arrived_once() {
    let mut p = UploadProgress::default();
    assert_eq!(p.take(b"100\n25"), 100);
    assert_eq!(p.take(b"0\n"), 150);
    // Backwards, not a number, too long: nothing.
    assert_eq!(p.take(b"200\nabc\n"), 0);
    assert_eq!(p.take(&[b'9'; 40]), 0);
    assert_eq!(p.take(b"\n300\n"), 50);
}

proptest! {
    /// Any bytes as a configuration: URLs or an error, never a panic.
    #[test]
    fn any_configuration_is_read_or_refused(bytes in proptest::collection::vec(any::<u8>(), 0..512), tls in any::<bool>()) {
        let _ = parse_urls(&bytes, tls);
    }

    /// Any authority a client sends keeps the configuration valid JSON with URLs of the
    /// listener's scheme.
    #[test]
    fn any_authority_keeps_the_configuration_whole(authority in "\\PC{0,80}") {
        let here = "127.0.0.1:80".parse().unwrap();
        let json: serde_json::Value = serde_json::from_str(&config_json(false, Some(&authority), here)).unwrap();
        let url = json["urls"]["large_download_url"].as_str().unwrap().to_string();
        prop_assert!(url.starts_with("http://") && url.ends_with("/large"));
        prop_assert!(url.parse::<hyper::Uri>().is_ok(), "{}", url);
    }

    /// Any bytes as progress lines: never more than the largest count seen.
    #[test]
    fn progress_never_counts_beyond_the_largest_line(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..20)) {
        let mut p = UploadProgress::default();
        let total: u64 = chunks.iter().map(|c| p.take(c)).sum();
        let joined: Vec<u8> = chunks.concat();
        let largest = joined
            .split(|&b| b == b'\n')
            .filter_map(|l| std::str::from_utf8(l).ok()?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        prop_assert!(total <= largest);
    }
}

fn get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// Over its bound a client's connection is closed at once, and counted; another client
/// (here: the same one, once it has let go) is served.
#[test]
fn connections_over_a_clients_bound_are_refused_and_others_served() {
    let limits = Limits {
        max_per_client: 2,
        ..Limits::default()
    };
    let server = server::start("127.0.0.1:0".parse().unwrap(), None, limits).unwrap();
    let held: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(server.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut third = TcpStream::connect(server.addr).unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = write!(third, "GET /small HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut buf = [0u8; 64];
    assert!(
        matches!(third.read(&mut buf), Ok(0) | Err(_)),
        "the third was served"
    );
    assert!(
        server
            .counters
            .refused
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    let answer = get(server.addr, "/small").unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// `/slurp?progress` reports what arrived on its own clock: a chunk followed by silence
/// (a connection's burst over a deep queue) is counted within a few report periods, not
/// only when more data comes.
#[test]
fn an_upload_that_pauses_still_has_what_arrived_reported() {
    let server = server::start("127.0.0.1:0".parse().unwrap(), None, Limits::default()).unwrap();
    let mut up = TcpStream::connect(server.addr).unwrap();
    up.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    write!(
        up,
        "POST /slurp?progress HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    let mut read_for = |up: &mut TcpStream, seconds: f64| {
        let until = Instant::now() + Duration::from_secs_f64(seconds);
        let mut buf = [0u8; 4096];
        while Instant::now() < until {
            if let Ok(n) = up.read(&mut buf) {
                answer.extend_from_slice(&buf[..n]);
            }
        }
        String::from_utf8_lossy(&answer).into_owned()
    };
    // One chunk: the answer's head, perhaps a first count.
    write!(up, "3e8\r\n{}\r\n", "x".repeat(1000)).unwrap();
    // Then nothing more is sent; the count must come anyway.
    let text = read_for(&mut up, 3.0);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.lines().any(|l| l.trim() == "1000"),
        "no count of the 1000 bytes while the upload paused: {text:?}"
    );
    // A count is sent when it changed, not on every tick.
    let lines = text.lines().filter(|l| l.trim() == "1000").count();
    assert_eq!(lines, 1, "{text:?}");
}

/// An upload that does not end is cut at the request's time limit, one with a broken
/// chunk is refused, and the server answers the next client.
#[test]
fn an_endless_upload_is_cut_at_the_time_limit_and_a_broken_one_refused() {
    let limits = Limits {
        max_request: Duration::from_secs(2),
        ..Limits::default()
    };
    let server = server::start("127.0.0.1:0".parse().unwrap(), None, limits).unwrap();
    let mut up = TcpStream::connect(server.addr).unwrap();
    up.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    write!(
        up,
        "POST /slurp HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    .unwrap();
    let started = Instant::now();
    let chunk = vec![0u8; 65536];
    let mut answer = Vec::new();
    while started.elapsed() < Duration::from_secs(10) {
        if write!(up, "{:x}\r\n", chunk.len())
            .and_then(|_| up.write_all(&chunk))
            .and_then(|_| up.write_all(b"\r\n"))
            .is_err()
        {
            break;
        }
        let mut buf = [0u8; 256];
        if let Ok(n) = up.read(&mut buf) {
            answer.extend_from_slice(&buf[..n]);
            if n == 0 || answer.windows(3).any(|w| w == b"408") {
                break;
            }
        }
    }
    let cut_after = started.elapsed();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.contains("408"), "{text}");
    assert!(
        cut_after >= Duration::from_millis(1900) && cut_after < Duration::from_secs(8),
        "{cut_after:?}"
    );
    assert!(
        server
            .counters
            .uploaded
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    );

    let mut broken = TcpStream::connect(server.addr).unwrap();
    broken
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(
        broken,
        "POST /slurp HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    let _ = broken.read_to_string(&mut reply);
    assert!(!reply.contains("200 OK"), "{reply}");
    let answer = get(server.addr, "/.well-known/nq").unwrap();
    assert!(answer.contains("\"large_download_url\""), "{answer}");
}

/// A server for one address (a mesh agent's, for the source that asked) closes every
/// other client's connection unanswered, and counts it; its own client is served.
#[test]
fn a_server_for_one_address_serves_no_other() {
    let limits = Limits {
        only_from: Some("127.0.0.2".parse().unwrap()),
        ..Limits::default()
    };
    let server = server::start("127.0.0.1:0".parse().unwrap(), None, limits).unwrap();
    let answer = get(server.addr, "/small");
    assert!(
        !answer.as_deref().unwrap_or("").starts_with("HTTP/1.1"),
        "another address was answered: {answer:?}"
    );
    let refused = || {
        server
            .counters
            .refused
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    assert_eq!(refused(), 1);
    // The address it serves: a socket bound to 127.0.0.2 (loopback's whole /8).
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(
            &"127.0.0.2:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
    socket.connect(&server.addr.into()).unwrap();
    let mut s: TcpStream = socket.into();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET /small HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert_eq!(refused(), 1);
}

/// An upload that declares more than the server takes is refused from its header, before
/// a byte of its body: docs/rpm.md promises 413 for uploads over the bound.
#[test]
fn an_upload_declaring_more_than_the_bound_gets_413_before_its_body() {
    let server = server::start("127.0.0.1:0".parse().unwrap(), None, Limits::default()).unwrap();
    let mut up = TcpStream::connect(server.addr).unwrap();
    up.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let declared = 100u64 << 30;
    write!(
        up,
        "POST /slurp HTTP/1.1\r\nHost: x\r\nContent-Length: {declared}\r\n\r\n"
    )
    .unwrap();
    let mut answer = [0u8; 1024];
    let n = up.read(&mut answer).unwrap();
    let text = String::from_utf8_lossy(&answer[..n]);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("x-content-type-options: nosniff"), "{text}");
    assert_eq!(server.counters.uploaded.load(Ordering::Relaxed), 0);
}

/// The page learns where this host's ndt7 server is from `/ndt7.json`, and its security
/// policy lets it connect there and nowhere else; without one, `/ndt7.json` is 404 and the
/// page connects only to its own origin.
#[test]
fn the_page_is_told_of_the_ndt7_server_and_may_connect_to_it_alone() {
    let with = Limits {
        ndt7: Some((4480, false)),
        ..Limits::default()
    };
    let server = server::start("127.0.0.1:0".parse().unwrap(), None, with).unwrap();
    let place = get(server.addr, "/ndt7.json").unwrap();
    assert!(place.starts_with("HTTP/1.1 200"), "{place}");
    assert!(place.ends_with(r#"{"port":4480,"tls":false}"#), "{place}");
    let page = get(server.addr, "/").unwrap().to_lowercase();
    assert!(
        page.contains("connect-src 'self' ws://*:4480 wss://*:4480;"),
        "{page}"
    );
    let without = server::start("127.0.0.1:0".parse().unwrap(), None, Limits::default()).unwrap();
    assert!(get(without.addr, "/ndt7.json")
        .unwrap()
        .starts_with("HTTP/1.1 404"));
    let page = get(without.addr, "/").unwrap().to_lowercase();
    assert!(page.contains("connect-src 'self';"), "{page}");
}
