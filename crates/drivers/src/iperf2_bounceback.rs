//! Serving iperf 2's bounceback tests (`iperf -c HOST --bounceback`, docs/iperf2.md):
//! request and response on one TCP connection, the client timing each round trip.
//!
//! A bounceback connection opens with its first request, no test header: each request
//! carries its size and the hold it asks ([`Bounceback`], bounded where it is read), and
//! the server answers it whole, as long as it came, with its read and write times in
//! their words after holding it that long. The client's round trips are its own (iperf 2
//! tells the server none of them); this side keeps what it did: the requests answered,
//! the bytes each way, and its turnaround (read to write, the hold in it).
//!
//! Bounds: a place among the server's tests, the connection caps of the listener that
//! accepted it, the request's size and hold (proto), the server's `--max-duration`
//! (a test running longer is cut there), and a client silent for [`IDLE`] between requests
//! ends the test.

use crate::access::Held;
use crate::iperf2_kept::{keep_report, plain_flow, Finished};
use crate::served::Served;
use crate::server_state::ServerState;
use linerate_model::clock::UnixTime;
use linerate_proto::iperf2::{Bounceback, ClientHeader, BOUNCEBACK_LEN};
use linerate_report::{FlowSide, Role, SideResult, TestConfig};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A client silent this long between requests has ended its test.
const IDLE: Duration = Duration::from_secs(10);

/// A bounceback connection whose first request's first bytes (`first`) were read as its
/// header: served on a thread of its own.
pub(crate) fn start(
    shared: &Arc<ServerState>,
    (stream, peer, held): (TcpStream, SocketAddr, Held),
    header: ClientHeader,
    first: Vec<u8>,
) -> Option<JoinHandle<()>> {
    let ours = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("linerate-iperf2-bb".into())
        .spawn(move || {
            let _held = held;
            serve(&ours, stream, peer, &header, first);
        });
    match spawned {
        Ok(handle) => Some(handle),
        Err(e) => {
            shared.log(&format!(
                "iperf 2 bounceback from {peer}: cannot start its thread: {e}"
            ));
            None
        }
    }
}

/// What one test did, as this side counts it.
#[derive(Debug, Default)]
struct Tally {
    answered: u64,
    bytes_in: u64,
    bytes_out: u64,
    turnaround_sum_ns: u128,
    turnaround_max_ns: u64,
    size: u32,
    hold_us: u32,
}

fn serve(
    shared: &Arc<ServerState>,
    mut stream: TcpStream,
    peer: SocketAddr,
    header: &ClientHeader,
    first: Vec<u8>,
) {
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let label = format!("iperf 2 bounceback test {id}");
    let mut served = Served::default();
    if let Err(why) = served.take_place(shared) {
        shared.refused(peer, &format!("{label}: {why}"));
        served.end(shared);
        return;
    }
    let started_at = UnixTime::now().seconds();
    let began = Instant::now();
    let mut tally = Tally::default();
    let ended = answer_all(shared, &mut stream, first, &mut tally, began);
    served.end(shared);
    let elapsed = began.elapsed().as_secs_f64();
    let cut = match &ended {
        Ok(()) => None,
        Err(why) => Some(why.clone()),
    };
    shared.log(&format!(
        "{label} from {peer}: {}, {} requests of {} bytes answered in {elapsed:.3} s (hold {} us)",
        cut.as_deref()
            .map_or("ended".to_string(), |why| format!("cut: {why}")),
        tally.answered,
        tally.size,
        tally.hold_us
    ));
    if tally.answered == 0 {
        return;
    }
    let local = stream.local_addr().unwrap_or(peer);
    let Ok(config) = config_of(peer, local.port(), &tally, elapsed) else {
        return;
    };
    let mean_us = tally.turnaround_sum_ns as f64 / tally.answered as f64 / 1e3;
    let flow = FlowSide {
        transactions: tally.answered,
        transactions_total: tally.answered,
        ..plain_flow(Role::Respond, (local, peer), tally.bytes_in, elapsed, cut)
    };
    // The client's side as its requests showed it: every answer went back whole on a
    // connection that stayed open, so it received each (its round trips are its own).
    let requested = FlowSide {
        role: Role::Request,
        local_addr: peer.to_string(),
        remote_addr: local.to_string(),
        window_bytes: tally.bytes_out,
        bytes_total: tally.bytes_out,
        error: None,
        ..flow.clone()
    };
    let ours = SideResult {
        flows: vec![flow],
        host: shared.host.clone(),
        ..SideResult::default()
    };
    let finished = Finished {
        id,
        peer,
        started_at,
        theirs: vec![requested],
        ours,
        note: Some(format!(
            "--bounceback: {} requests of {} bytes answered, {} bytes back; this server's turnaround (read to write, a hold of {} us asked in it) {mean_us:.1} us mean, {:.1} us at most; the round trips are the client's",
            tally.answered,
            tally.size,
            tally.bytes_out,
            tally.hold_us,
            tally.turnaround_max_ns as f64 / 1e3
        )),
    };
    keep_report(shared, header, config, finished);
}

/// Answers requests until the client closes between two (`Ok`), or the test is cut
/// (`Err` with why).
fn answer_all(
    shared: &ServerState,
    stream: &mut TcpStream,
    first: Vec<u8>,
    tally: &mut Tally,
    began: Instant,
) -> Result<(), String> {
    let max = Duration::from_secs_f64(shared.config.limits.max_duration_s.max(0.0));
    let _ = stream.set_nodelay(true);
    stream
        .set_read_timeout(Some(IDLE))
        .map_err(|e| e.to_string())?;
    let mut request = first;
    loop {
        // The fixed part first: it says how long the request is.
        if !fill(stream, &mut request, BOUNCEBACK_LEN)? {
            return Ok(());
        }
        let asked = Bounceback::decode(&request).map_err(|e| e.to_string())?;
        if tally.answered > 0 && asked.size != tally.size {
            return Err(format!(
                "a request of {} bytes after requests of {}",
                asked.size, tally.size
            ));
        }
        if !fill(stream, &mut request, asked.size as usize)? {
            return Err("closed inside a request".into());
        }
        let read_ns = UnixTime::now().nanos();
        let read_at = Instant::now();
        // Held in slices that notice the server shutting down.
        let hold = Duration::from_micros(u64::from(asked.hold_us));
        crate::profile::group::wait_for(Instant::now() + hold, &shared.shutdown);
        let written_ns = UnixTime::now().nanos();
        Bounceback::answer(&mut request, read_ns, written_ns);
        stream.write_all(&request).map_err(|e| e.to_string())?;
        let turnaround = read_at.elapsed().as_nanos() as u64;
        tally.answered += 1;
        tally.bytes_in += u64::from(asked.size);
        tally.bytes_out += u64::from(asked.size);
        tally.turnaround_sum_ns += u128::from(turnaround);
        tally.turnaround_max_ns = tally.turnaround_max_ns.max(turnaround);
        (tally.size, tally.hold_us) = (asked.size, asked.hold_us);
        request.clear();
        if shared.shutdown.load(Ordering::Relaxed) {
            return Err("the server shut down".into());
        }
        if began.elapsed() >= max {
            return Err(format!(
                "the server's --max-duration of {} s",
                max.as_secs_f64()
            ));
        }
    }
}

/// Reads until `buf` holds `len` bytes; `Ok(false)`: the client closed before the first
/// of them.
fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>, len: usize) -> Result<bool, String> {
    let mut chunk = [0u8; 64 * 1024];
    while buf.len() < len {
        let room = (len - buf.len()).min(chunk.len());
        match stream.read(&mut chunk[..room]) {
            Ok(0) if buf.is_empty() => return Ok(false),
            Ok(0) => return Err("closed inside a request".into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(format!("no request for {} s", IDLE.as_secs()))
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(true)
}

/// The test as linerate describes it: TCP request/response of the client's size both
/// ways, one flow, as long as it ran.
fn config_of(
    peer: SocketAddr,
    local_port: u16,
    tally: &Tally,
    elapsed: f64,
) -> Result<TestConfig, String> {
    use linerate_model::{Environment, TestKind, TestRequest, TransactionRequest};
    let request = TestRequest {
        target: Some(crate::access::canonical(peer.ip()).to_string()),
        port: local_port,
        time_s: elapsed.max(0.001),
        observe: false,
        ..TestRequest::new(TestKind::Transactions(TransactionRequest::tcp(
            u64::from(tally.size),
            u64::from(tally.size),
        )))
    };
    let environment = Environment {
        cpus: linerate_engine::sys::cpus(),
        udp_length: None,
    };
    TestConfig::resolve(&request, &environment)
}
