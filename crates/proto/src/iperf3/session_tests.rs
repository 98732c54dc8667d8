//! The two iperf3 sessions against each other, and each against hostile or broken peers,
//! in memory on a virtual clock.

use super::client::{self, Iperf3Client, Iperf3Error};
use super::server::{self, Iperf3Server};
use super::*;
use crate::machine::Machine;
use std::time::{Duration, Instant};

/// The virtual clock's origin; only offsets from it matter.
#[allow(clippy::disallowed_methods)]
fn origin() -> Instant {
    Instant::now()
}

fn results(bytes: u64) -> Results {
    Results {
        cpu_util_total: 1.0,
        cpu_util_user: 0.25,
        cpu_util_system: 0.75,
        sender_has_retransmits: -1,
        congestion_used: None,
        server_output_text: None,
        server_output_json: None,
        streams: vec![StreamResults {
            id: 1,
            bytes,
            retransmits: -1,
            jitter: 0.0,
            errors: 0,
            omitted_errors: None,
            packets: 0,
            omitted_packets: None,
            start_time: 0.0,
            end_time: 5.0,
        }],
    }
}

/// Moves every queued byte both ways until neither side has anything to say.
fn pump(now: Instant, c: &mut Iperf3Client, s: &mut Iperf3Server) {
    loop {
        let mut moved = false;
        while let Some(bytes) = c.poll_transmit() {
            s.handle_input(now, &bytes);
            moved = true;
        }
        while let Some(bytes) = s.poll_transmit() {
            c.handle_input(now, &bytes);
            moved = true;
        }
        if !moved {
            return;
        }
    }
}

fn drain<T>(mut next: impl FnMut() -> Option<T>) -> Vec<T> {
    std::iter::from_fn(&mut next).collect()
}

#[test]
fn a_whole_test_runs_from_cookie_to_done() {
    let t0 = origin();
    let params = Params {
        time: 5,
        parallel: 2,
        ..Params::default()
    };
    let mut c = Iperf3Client::new(t0, cookie_from(&[7; 36]), params.clone());
    // The acceptor reads the cookie; the session starts after it.
    assert_eq!(c.poll_transmit().unwrap().len(), COOKIE_LEN);
    let mut s = Iperf3Server::new(t0);
    pump(t0, &mut c, &mut s);
    assert_eq!(
        drain(|| s.poll_event()),
        vec![server::Event::Params(params)]
    );
    s.accept(t0);
    pump(t0, &mut c, &mut s);
    assert_eq!(drain(|| c.poll_event()), vec![client::Event::CreateStreams]);
    s.streams_ready(t0);
    pump(t0, &mut c, &mut s);
    assert_eq!(
        drain(|| c.poll_event()),
        vec![client::Event::TestStart, client::Event::TestRunning]
    );
    // Running: the client alone ends it, long after any read timeout.
    let t1 = t0 + Duration::from_secs(5);
    s.handle_timeout(t1);
    assert!(!s.is_closed());
    c.end_test(t1, results(100));
    pump(t1, &mut c, &mut s);
    assert_eq!(drain(|| s.poll_event()), vec![server::Event::EndRequested]);
    s.finish(t1, results(99));
    pump(t1, &mut c, &mut s);
    assert_eq!(
        drain(|| s.poll_event()),
        vec![
            server::Event::ClientResults(results(100)),
            server::Event::Closed(Ok(()))
        ]
    );
    assert_eq!(
        drain(|| c.poll_event()),
        vec![
            client::Event::ServerResults(results(99)),
            client::Event::Closed(Ok(()))
        ]
    );
}

#[test]
fn refused_parameters_reach_the_client_as_an_iperf3_error() {
    let t0 = origin();
    let params = Params {
        parallel: 200,
        ..Params::default()
    };
    let mut c = Iperf3Client::new(t0, cookie_from(&[1; 36]), params);
    c.poll_transmit();
    let mut s = Iperf3Server::new(t0);
    pump(t0, &mut c, &mut s);
    let events = drain(|| s.poll_event());
    assert!(matches!(&events[..], [server::Event::Closed(Err(why))] if why.contains("parallel")));
    let events = drain(|| c.poll_event());
    assert!(matches!(
        &events[..],
        [client::Event::Closed(Err(Iperf3Error::Server {
            code: code::NUM_STREAMS,
            ..
        }))]
    ));
}

#[test]
fn a_busy_server_is_reported_as_busy() {
    let t0 = origin();
    let mut c = Iperf3Client::new(t0, cookie_from(&[1; 36]), Params::default());
    c.poll_transmit();
    let mut s = Iperf3Server::new(t0);
    pump(t0, &mut c, &mut s);
    s.busy("limit".into());
    pump(t0, &mut c, &mut s);
    assert_eq!(
        drain(|| c.poll_event()),
        vec![client::Event::Closed(Err(Iperf3Error::Busy))]
    );
}

#[test]
fn oversized_or_broken_parameters_are_refused_before_they_are_buffered() {
    let t0 = origin();
    let mut s = Iperf3Server::new(t0);
    s.poll_transmit();
    s.handle_input(t0, &((MAX_PARAMS_JSON as u32) + 1).to_be_bytes());
    let sent = drain(|| s.poll_transmit());
    assert_eq!(sent[0][0], state::SERVER_ERROR);
    assert_eq!(&sent[0][1..5], &code::RECV_PARAMS.to_be_bytes());
    assert!(s.is_closed());

    let mut s = Iperf3Server::new(t0);
    s.handle_input(t0, &crate::frame::encode(b"{not json"));
    assert!(matches!(
        s.poll_event(),
        Some(server::Event::Closed(Err(_)))
    ));
}

#[test]
fn a_silent_or_vanishing_client_ends_the_session_on_time() {
    let t0 = origin();
    let mut s = Iperf3Server::new(t0);
    s.handle_timeout(t0 + server::READ_TIMEOUT - Duration::from_millis(1));
    assert!(!s.is_closed());
    s.handle_timeout(t0 + server::READ_TIMEOUT);
    assert!(
        matches!(s.poll_event(), Some(server::Event::Closed(Err(why))) if why.contains("parameters"))
    );

    let mut c = Iperf3Client::new(t0, cookie_from(&[1; 36]), Params::default());
    let mut s = Iperf3Server::new(t0);
    c.poll_transmit();
    pump(t0, &mut c, &mut s);
    s.poll_event();
    s.accept(t0);
    s.streams_ready(t0);
    pump(t0, &mut c, &mut s);
    // A running test ends at its duration plus the grace, not at a read timeout.
    let end = t0 + Duration::from_secs(10) + server::RUN_GRACE;
    s.handle_timeout(end - Duration::from_secs(1));
    assert!(!s.is_closed());
    s.handle_timeout(end);
    assert!(s.is_closed());
    c.handle_eof(end);
    assert!(matches!(
        drain(|| c.poll_event()).last(),
        Some(client::Event::Closed(Err(Iperf3Error::PeerGone(_))))
    ));
}

#[test]
fn an_auth_failure_may_close_after_one_code() {
    let t0 = origin();
    let mut c = Iperf3Client::new(t0, cookie_from(&[1; 36]), Params::default());
    c.handle_input(t0, &[state::SERVER_ERROR]);
    c.handle_input(t0, &code::AUTH.to_be_bytes());
    c.handle_eof(t0);
    assert!(matches!(
        drain(|| c.poll_event()).last(),
        Some(client::Event::Closed(Err(Iperf3Error::Server {
            code: code::AUTH,
            errno: None,
            ..
        })))
    ));
}

#[test]
fn a_client_terminating_mid_test_closes_the_server_session() {
    let t0 = origin();
    let mut c = Iperf3Client::new(t0, cookie_from(&[1; 36]), Params::default());
    let mut s = Iperf3Server::new(t0);
    c.poll_transmit();
    pump(t0, &mut c, &mut s);
    s.poll_event();
    s.accept(t0);
    s.streams_ready(t0);
    pump(t0, &mut c, &mut s);
    c.terminate("interrupted".into());
    pump(t0, &mut c, &mut s);
    assert!(
        matches!(s.poll_event(), Some(server::Event::Closed(Err(why))) if why.contains("terminated"))
    );
}

/// A 15.9 MiB results document once took a server from 8 MiB to 805 MiB for one
/// session: a client's results are refused past 1 MiB, from the length alone.
#[test]
fn a_client_results_document_over_a_mebibyte_is_refused_from_its_length() {
    let t0 = origin();
    let params = Params {
        time: 1,
        ..Params::default()
    };
    let mut c = Iperf3Client::new(t0, cookie_from(&[7; 36]), params);
    c.poll_transmit();
    let mut s = Iperf3Server::new(t0);
    pump(t0, &mut c, &mut s);
    drain(|| s.poll_event());
    s.accept(t0);
    pump(t0, &mut c, &mut s);
    s.streams_ready(t0);
    pump(t0, &mut c, &mut s);
    s.handle_input(t0, &[state::TEST_END]);
    assert_eq!(drain(|| s.poll_event()), vec![server::Event::EndRequested]);
    s.finish(t0, results(1));
    s.handle_input(
        t0,
        &((super::MAX_CLIENT_RESULTS_JSON as u32) + 1).to_be_bytes(),
    );
    let events = drain(|| s.poll_event());
    assert!(
        matches!(&events[..], [server::Event::Closed(Err(why))] if why.contains("results refused")),
        "{events:?}"
    );
}
