//! The record layer between real sockets on loopback: every byte arrives once and in
//! order whatever the read and write sizes, in both of the stream's modes, and what is not
//! TLS after the handshake is refused with an error, never a panic.

use linerate_tls::identity::Identity;
use linerate_tls::stream::{accept, connect, TlsStream};
use linerate_tls::verify::Trust;
use linerate_tls::{client_config, server_config, Cipher};
use proptest::prelude::*;
use std::io::{self, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(5);

/// A client and server session over one loopback connection.
fn sessions() -> (TlsStream<TcpStream>, TlsStream<TcpStream>) {
    let identity = Identity::self_signed(&["localhost".into()]).unwrap();
    let trust = Trust::Pinned(identity.fingerprint.clone());
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let socket = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let config = server_config(&identity).unwrap();
    let server = std::thread::spawn(move || accept(listener.accept().unwrap().0, config, TIMEOUT));
    let client = connect(
        socket,
        client_config(Cipher::Aes128Gcm, &trust).unwrap(),
        "h",
        TIMEOUT,
    )
    .unwrap();
    (client, server.join().unwrap().unwrap())
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// Moves `data` from `sender` to `receiver` over non-blocking sockets in one thread, the
/// writes `write_size` bytes and the reads `read_size`; returns what arrived.
fn carry_over(
    sender: &mut TlsStream<TcpStream>,
    receiver: &mut TlsStream<TcpStream>,
    data: &[u8],
    write_size: usize,
    read_size: usize,
) -> Vec<u8> {
    sender.socket().set_nonblocking(true).unwrap();
    receiver.socket().set_nonblocking(true).unwrap();
    let mut received = Vec::with_capacity(data.len());
    let mut buffer = vec![0u8; read_size];
    let mut sent = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while received.len() < data.len() {
        assert!(
            Instant::now() < deadline,
            "stalled at {} bytes",
            received.len()
        );
        if sent < data.len() {
            let end = (sent + write_size).min(data.len());
            match sender.write(&data[sent..end]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("write: {e}"),
            }
        } else {
            match sender.send_records() {
                Ok(()) | Err(_) => {}
            }
        }
        loop {
            match receiver.read(&mut buffer) {
                Ok(0) => panic!("the stream ended at {} bytes", received.len()),
                Ok(n) => received.extend_from_slice(&buffer[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("read: {e}"),
            }
        }
    }
    assert!(!sender.has_unsent());
    received
}

#[test]
fn every_byte_arrives_in_order_whatever_the_read_and_write_sizes() {
    let data = pattern(3 << 20);
    for (write_size, read_size) in [(128 * 1024, 1 << 20), (1000, 100), (70_000, 16 * 1024)] {
        let (mut client, mut server) = sessions();
        let received = carry_over(&mut client, &mut server, &data, write_size, read_size);
        assert!(received == data, "{write_size}/{read_size}: bytes differ");
    }
}

#[test]
fn a_frugal_stream_carries_every_byte_and_keeps_nothing_once_sent() {
    let data = pattern(4 << 20);
    let (mut client, mut server) = sessions();
    client.set_frugal(true);
    server.set_frugal(true);
    // Small socket buffers, so writes are cut short and records arrive in parts.
    for stream in [&client, &server] {
        let socket = socket2::SockRef::from(stream.socket());
        socket.set_send_buffer_size(32 * 1024).unwrap();
        socket.set_recv_buffer_size(32 * 1024).unwrap();
    }
    let received = carry_over(&mut client, &mut server, &data, 128 * 1024, 64 * 1024);
    assert!(received == data, "bytes differ");
    // And back the other way.
    let received = carry_over(&mut server, &mut client, &data, 50_000, 1 << 20);
    assert!(received == data, "bytes differ on the way back");
}

#[test]
fn the_end_of_the_socket_is_the_end_of_the_stream() {
    let (mut client, mut server) = sessions();
    client.write_all(b"last words").unwrap();
    client.flush().unwrap();
    client.socket().shutdown(std::net::Shutdown::Write).unwrap();
    let mut buffer = [0u8; 64];
    let mut got = Vec::new();
    loop {
        match server.read(&mut buffer).unwrap() {
            0 => break,
            n => got.extend_from_slice(&buffer[..n]),
        }
    }
    assert_eq!(got, b"last words");
    assert_eq!(
        server.read(&mut buffer).unwrap(),
        0,
        "the end stays the end"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Bytes that are not records of this session, after a real one: the read fails with
    /// an error that says so, it does not panic or return them.
    #[test]
    fn what_is_not_a_record_of_the_session_is_refused(
        header in prop::sample::select(vec![20u8, 21, 22, 23, 24, 0, 0x16, 0xff]),
        length in 0u16..=0x4200,
        body in prop::collection::vec(any::<u8>(), 0..2048),
    ) {
        let (mut client, mut server) = sessions();
        client.write_all(b"real").unwrap();
        client.flush().unwrap();
        let mut raw = client.socket().try_clone().unwrap();
        let mut forged = vec![header, 3, 3];
        forged.extend_from_slice(&length.to_be_bytes());
        forged.extend_from_slice(&body);
        raw.write_all(&forged).unwrap();
        raw.shutdown(std::net::Shutdown::Write).unwrap();
        let mut buffer = [0u8; 4096];
        let mut got = Vec::new();
        let outcome = loop {
            match server.read(&mut buffer) {
                Ok(0) => break Ok(()),
                Ok(n) => got.extend_from_slice(&buffer[..n]),
                Err(e) => break Err(e),
            }
        };
        prop_assert_eq!(&got[..], b"real");
        // A forged record ends in an error; one cut short by the end is the end.
        if let Err(e) = outcome {
            prop_assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        } else {
            prop_assert!(body.len() < usize::from(length), "a whole forged record was taken");
        }
    }
}
