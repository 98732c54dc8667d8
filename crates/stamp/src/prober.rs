//! Many STAMP sessions on one thread: an agent probing every peer of a mesh at once. The
//! sessions of one rate send on one grid (their probes are due at the same instants), so
//! one wake-up sends a probe for each, and their answers come back together: a hundred
//! peers at 10/s wake the thread about twenty times a second, not two thousand.
//!
//! Each session keeps its own socket (a reflector tells sessions apart by address and
//! port, as RFC 8762 says, whatever their SSIDs) and its own figures; the loop only
//! decides when each is looked at.

use crate::sender::{Options, Session};
use crate::wire;
use linerate_report::stamp::StampReport;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// A session's outcome, sent once.
pub type Outcome = io::Result<StampReport>;

struct Start {
    options: Options,
    cancel: Arc<AtomicBool>,
    done: Sender<Outcome>,
}

/// The loop's mailbox and the descriptor that wakes it.
pub struct Prober {
    commands: Mutex<Sender<Start>>,
    wake: RawFd,
}

/// The process's prober, started on first use.
pub fn shared() -> io::Result<&'static Prober> {
    static PROBER: OnceLock<Prober> = OnceLock::new();
    if let Some(prober) = PROBER.get() {
        return Ok(prober);
    }
    let started = Prober::start()?;
    Ok(PROBER.get_or_init(|| started))
}

impl Prober {
    fn start() -> io::Result<Prober> {
        // SAFETY: eventfd with valid flags; the descriptor lives as long as the process
        // (the prober is never dropped: it is the process's).
        let wake = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if wake < 0 {
            return Err(io::Error::last_os_error());
        }
        let (commands, inbox) = channel();
        std::thread::Builder::new()
            .name("stamp-prober".into())
            .spawn(move || run(&inbox, wake))?;
        Ok(Prober {
            commands: Mutex::new(commands),
            wake,
        })
    }

    /// Starts a session; its report (or why not) arrives on the receiver once. `cancel`
    /// stops it early (its report then says interrupted).
    pub fn probe(
        &self,
        options: Options,
        cancel: Arc<AtomicBool>,
    ) -> io::Result<Receiver<Outcome>> {
        let (done, outcome) = channel();
        self.commands
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(Start {
                options,
                cancel,
                done,
            })
            .map_err(|_| io::Error::other("the STAMP prober has stopped"))?;
        let one: u64 = 1;
        // SAFETY: writes 8 octets from a live u64 to the eventfd.
        unsafe { libc::write(self.wake, (&one as *const u64).cast(), 8) };
        Ok(outcome)
    }
}

struct Running {
    session: Session,
    cancel: Arc<AtomicBool>,
    done: Sender<Outcome>,
}

/// The first instant on the grid of `gap_ns` at or after `now_ns`.
fn on_grid(now_ns: u64, gap_ns: u64) -> u64 {
    now_ns.div_ceil(gap_ns.max(1)) * gap_ns.max(1)
}

fn run(inbox: &Receiver<Start>, wake: RawFd) {
    let epoch = Instant::now();
    let mono = || epoch.elapsed().as_nanos() as u64;
    let mut sessions: Vec<Running> = Vec::new();
    let mut buf = vec![0u8; wire::MAX_PACKET + 1];
    let mut fds: Vec<libc::pollfd> = Vec::new();
    loop {
        while let Ok(start) = inbox.try_recv() {
            let now = mono();
            let gap = (1e9 / start.options.rate_pps).max(1.0) as u64;
            match Session::open(&start.options, now, on_grid(now, gap)) {
                Ok(session) => sessions.push(Running {
                    session,
                    cancel: start.cancel,
                    done: start.done,
                }),
                Err(e) => {
                    let _ = start.done.send(Err(e));
                }
            }
        }
        let now = mono();
        for running in &mut sessions {
            if running.cancel.load(Ordering::Relaxed) {
                running.session.interrupt();
            }
            if let Err(e) = running.session.tick(now, &epoch) {
                running.session.interrupt();
                let _ = running.done.send(Err(e));
            }
        }
        // Finished sessions leave with their figures.
        let now = mono();
        sessions.retain(|running| {
            if running.session.is_done() {
                let _ = running.done.send(Ok(running.session.finish(now)));
                false
            } else {
                true
            }
        });
        let due = sessions
            .iter()
            .filter_map(|r| r.session.due_ns())
            .min()
            .unwrap_or(now + 1_000_000_000);
        // A wait for the last answers is looked at every 20 ms; nothing waits past a
        // second without a look.
        let wait_ns = due.saturating_sub(now).min(1_000_000_000);
        fds.clear();
        fds.push(libc::pollfd {
            fd: wake,
            events: libc::POLLIN,
            revents: 0,
        });
        fds.extend(sessions.iter().map(|r| libc::pollfd {
            fd: r.session.socket().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }));
        let ts = libc::timespec {
            tv_sec: (wait_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (wait_ns % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: `fds` is a live array of its length; a live timespec; no signal mask.
        let ready = unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
        if ready <= 0 {
            continue;
        }
        if fds[0].revents & libc::POLLIN != 0 {
            let mut count = 0u64;
            // SAFETY: reads 8 octets into a live u64 (clears the eventfd).
            unsafe { libc::read(wake, (&mut count as *mut u64).cast(), 8) };
        }
        for (running, fd) in sessions.iter_mut().zip(&fds[1..]) {
            // POLLERR: the probes' times of leaving wait on the error queue.
            if fd.revents & (libc::POLLIN | libc::POLLERR) != 0 {
                if let Err(e) = running.session.drain(&mut buf, &epoch) {
                    running.session.interrupt();
                    let _ = running.done.send(Err(e));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::on_grid;

    /// Sessions of one rate line up on one grid, whenever they start.
    #[test]
    fn sessions_of_one_rate_share_one_grid() {
        let gap = 100_000_000;
        assert_eq!(on_grid(0, gap), 0);
        assert_eq!(on_grid(1, gap), gap);
        assert_eq!(on_grid(250_000_000, gap), 300_000_000);
        assert_eq!(on_grid(300_000_000, gap), 300_000_000);
    }
}
