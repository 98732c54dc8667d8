//! Handshakes between real sockets on loopback: what passes, and what each failure says.

use linerate_tls::identity::{self_signed_pem, Identity};
use linerate_tls::stream::{accept, connect, TlsStream};
use linerate_tls::verify::Trust;
use linerate_tls::{client_config, ktls, server_config, Cipher, TlsError};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(5);

fn pair() -> (TcpStream, TcpListener) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    (client, listener)
}

fn serve(
    listener: TcpListener,
    identity: Identity,
) -> JoinHandle<Result<TlsStream<TcpStream>, TlsError>> {
    let config = server_config(&identity).unwrap();
    std::thread::spawn(move || accept(listener.accept().unwrap().0, config, TIMEOUT))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("linerate-tls-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A PEM identity valid over the given dates for `names`, written to files; returns the
/// identity and a CA file (the certificate itself) for the client.
fn identity_on_disk(
    name: &str,
    names: &[&str],
    from: (i32, u8, u8),
    to: (i32, u8, u8),
) -> (Identity, PathBuf) {
    let dir = scratch(name);
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let (cert, key) = self_signed_pem(&names, from, to).unwrap();
    std::fs::write(dir.join("cert.pem"), cert).unwrap();
    std::fs::write(dir.join("key.pem"), key).unwrap();
    let identity = Identity::from_files(&dir.join("cert.pem"), &dir.join("key.pem")).unwrap();
    (identity, dir.join("cert.pem"))
}

#[test]
fn every_cipher_carries_bytes_both_ways_with_the_pinned_certificate() {
    for cipher in Cipher::ALL {
        let identity = Identity::self_signed(&["localhost".into()]).unwrap();
        let pin = Trust::Pinned(identity.fingerprint.clone());
        let (socket, listener) = pair();
        let server = serve(listener, identity);
        let mut client = connect(
            socket,
            client_config(cipher, &pin).unwrap(),
            "127.0.0.1",
            TIMEOUT,
        )
        .unwrap();
        let mut server = server.join().unwrap().unwrap();
        assert_eq!(client.facts().cipher, cipher);
        assert_eq!(
            server.facts().cipher,
            cipher,
            "the server follows the client's choice"
        );
        assert!(client.facts().handshake > Duration::ZERO);

        let message: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let mut sent = 0;
        let mut received = Vec::new();
        let mut buffer = vec![0u8; 1 << 20];
        while received.len() < message.len() {
            if sent < message.len() {
                sent += client.write(&message[sent..]).unwrap();
            }
            client.send_records().unwrap();
            let n = server.read(&mut buffer).unwrap();
            received.extend_from_slice(&buffer[..n]);
        }
        assert!(received == message, "{cipher}: decrypted bytes differ");
        assert!(client.crypto_time() > Duration::ZERO && server.crypto_time() > Duration::ZERO);
        // The reverse direction, and the end of the stream.
        server.write(b"pong").unwrap();
        let n = client.read(&mut buffer).unwrap();
        assert_eq!(&buffer[..n], b"pong");
        drop(server);
        assert_eq!(client.read(&mut buffer).unwrap(), 0);
    }
}

/// A request and its answer, a byte each, again and again (what `rr` does), both ends in
/// this thread: the crypto time the two ends estimate is a part of what the thread spent.
/// Seals and opens alternate; timed together one call in eight, only seals were timed
/// and charged to every byte opened too, several times the thread's whole time.
#[test]
fn an_exchange_of_small_records_is_charged_no_more_than_its_thread_spent() {
    let identity = Identity::self_signed(&["localhost".into()]).unwrap();
    let pin = Trust::Pinned(identity.fingerprint.clone());
    let (socket, listener) = pair();
    let server = serve(listener, identity);
    let cipher = Cipher::Aes256Gcm;
    let mut client = connect(
        socket,
        client_config(cipher, &pin).unwrap(),
        "127.0.0.1",
        TIMEOUT,
    )
    .unwrap();
    let mut server = server.join().unwrap().unwrap();
    let mut buffer = [0u8; 64];
    let began = linerate_tls::cost::thread_cpu();
    for _ in 0..4000 {
        client.write(b"q").unwrap();
        client.send_records().unwrap();
        assert_eq!(server.read(&mut buffer).unwrap(), 1);
        server.write(b"a").unwrap();
        server.send_records().unwrap();
        assert_eq!(client.read(&mut buffer).unwrap(), 1);
    }
    let spent = linerate_tls::cost::thread_cpu() - began;
    let crypto = client.crypto_time() + server.crypto_time();
    eprintln!("4000 exchanges: crypto {crypto:?} of the thread's {spent:?}");
    assert!(
        crypto > Duration::ZERO && crypto < spent,
        "crypto {crypto:?} of the thread's {spent:?}"
    );
}

#[test]
fn a_certificate_other_than_the_announced_one_is_refused() {
    let identity = Identity::self_signed(&["localhost".into()]).unwrap();
    let other = Identity::self_signed(&["localhost".into()]).unwrap();
    let pin = Trust::Pinned(other.fingerprint.clone());
    let (socket, listener) = pair();
    let server = serve(listener, identity);
    let error = connect(
        socket,
        client_config(Cipher::Aes128Gcm, &pin).unwrap(),
        "h",
        TIMEOUT,
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("is not the one the server announced"),
        "{error}"
    );
    let server_error = server.join().unwrap().unwrap_err().to_string();
    assert!(
        server_error.contains("refused the handshake"),
        "{server_error}"
    );
}

/// A client that trusts `ca` connects as `name` to a server presenting `identity`; `Ok`
/// when both ends finished the handshake, else the client's error.
fn connect_with_ca(identity: Identity, ca: &std::path::Path, name: &str) -> Result<(), String> {
    let trust = Trust::from_ca_file(ca).unwrap();
    let (socket, listener) = pair();
    let server = serve(listener, identity);
    let config = client_config(Cipher::Aes256Gcm, &trust).unwrap();
    connect(socket, config, name, TIMEOUT).map_err(|e| e.to_string())?;
    server.join().unwrap().unwrap();
    Ok(())
}

#[test]
fn an_expired_certificate_is_named_as_expired() {
    let (identity, ca) = identity_on_disk("expired", &["localhost"], (2020, 1, 1), (2021, 1, 1));
    let error = connect_with_ca(identity, &ca, "localhost").unwrap_err();
    assert!(error.contains("certificate has expired"), "{error}");
    std::fs::remove_dir_all(ca.parent().unwrap()).unwrap();
}

#[test]
fn a_certificate_for_another_name_says_both_names() {
    let (identity, ca) = identity_on_disk("name", &["other.example"], (2020, 1, 1), (2099, 1, 1));
    let error = connect_with_ca(identity, &ca, "localhost").unwrap_err();
    assert!(
        error.contains("other.example") && error.contains("localhost"),
        "{error}"
    );
    // The same certificate under its own name passes.
    let identity = Identity::from_files(&ca, &ca.with_file_name("key.pem")).unwrap();
    connect_with_ca(identity, &ca, "other.example").unwrap();
    std::fs::remove_dir_all(ca.parent().unwrap()).unwrap();
}

#[test]
fn a_plain_peer_is_told_from_a_tls_one_on_both_sides() {
    // A TLS client against a plain server.
    let (socket, listener) = pair();
    let plain = std::thread::spawn(move || {
        let (mut peer, _) = listener.accept().unwrap();
        let mut hello = [0u8; 64];
        let _ = peer.read(&mut hello);
        peer.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").unwrap();
    });
    let pin = Trust::Pinned("00".repeat(32));
    let error = connect(
        socket,
        client_config(Cipher::Aes256Gcm, &pin).unwrap(),
        "h",
        TIMEOUT,
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("not TLS"), "{error}");
    plain.join().unwrap();

    // A plain client against a TLS server.
    let (mut socket, listener) = pair();
    let server = serve(
        listener,
        Identity::self_signed(&["localhost".into()]).unwrap(),
    );
    socket
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let error = server.join().unwrap().unwrap_err().to_string();
    assert!(error.contains("not TLS"), "{error}");
}

#[test]
fn a_silent_peer_times_out_with_a_clear_error() {
    let (socket, listener) = pair();
    let _held = listener.accept().unwrap();
    let pin = Trust::Pinned("00".repeat(32));
    let error = connect(
        socket,
        client_config(Cipher::Aes256Gcm, &pin).unwrap(),
        "h",
        Duration::from_millis(300),
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("no TLS answer within"), "{error}");
}

#[test]
fn ktls_takes_the_session_or_says_why_not() {
    let identity = Identity::self_signed(&["localhost".into()]).unwrap();
    let pin = Trust::Pinned(identity.fingerprint.clone());
    let (socket, listener) = pair();
    let server = serve(listener, identity);
    let client = connect(
        socket,
        client_config(Cipher::Aes128Gcm, &pin).unwrap(),
        "h",
        TIMEOUT,
    )
    .unwrap();
    let mut server = server.join().unwrap().unwrap();
    match ktls::offload(client) {
        ktls::Offload::Refused(_, why) => {
            // This kernel has no kTLS: the reason names what is missing.
            assert!(ktls::available().is_err());
            assert!(why.contains("upper-layer protocol"), "{why}");
            eprintln!("kTLS not available here: {why}");
        }
        ktls::Offload::Failed(e) => panic!("the kernel offers kTLS but refused the keys: {e}"),
        ktls::Offload::Taken(mut plain, facts) => {
            assert!(facts.ktls);
            plain.write_all(b"sealed by the kernel").unwrap();
            let mut buffer = [0u8; 64];
            let n = server.read(&mut buffer).unwrap();
            assert_eq!(&buffer[..n], b"sealed by the kernel");
        }
    }
}
