//! Writing records to a peer that has gone must give an error, not SIGPIPE: the linerate
//! binary keeps SIGPIPE's default action (so `| head` ends it quietly), and a signal would
//! end the whole process. This test binary takes the default too, so a write that raises
//! SIGPIPE kills it and the test fails. (Its own process: the signal's disposition is the
//! process's.)

use linerate_tls::identity::Identity;
use linerate_tls::stream::{accept, connect};
use linerate_tls::verify::Trust;
use linerate_tls::{client_config, server_config, Cipher};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

#[test]
fn records_sent_to_a_closed_peer_fail_without_a_signal() {
    // SAFETY: setting a signal's disposition; this binary's only test.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let identity = Identity::self_signed(&["localhost".into()]).unwrap();
    let trust = Trust::Pinned(identity.fingerprint.clone());
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let socket = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let config = server_config(&identity).unwrap();
    let timeout = Duration::from_secs(5);
    let server = std::thread::spawn(move || accept(listener.accept().unwrap().0, config, timeout));
    let mut client = connect(
        socket,
        client_config(Cipher::Aes128Gcm, &trust).unwrap(),
        "h",
        timeout,
    )
    .unwrap();
    drop(server.join().unwrap().unwrap());
    std::thread::sleep(Duration::from_millis(50));
    let data = vec![0u8; 64 * 1024];
    let failed = (0..100).any(|_| client.write(&data).is_err() || client.send_records().is_err());
    assert!(failed, "writes to a closed peer kept succeeding");
}
