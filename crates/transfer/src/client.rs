//! `linerate copy SRC DST`: one side `HOST:PATH`, the other a local path, as scp has it.
//! Files and (with `-r`) directory trees, pushed or pulled over one session.

// An I/O driver: a copy's session and its wall time run on the clock.
#![allow(clippy::disallowed_methods)]

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use linerate_proto::auth::Key;

use crate::control::{Control, Entry};
use crate::error::TransferError;
use crate::layout::Layout;
use crate::outcome::{FileOutcome, TransferProgress};
use crate::path_memory;
use crate::rate::RateConfig;
use crate::receive_driver::{self, Target};
use crate::seal::{Sealer, SEAL_TAG};
use crate::sender::train_for;
use crate::service::{identity, initial_window, walk};
use crate::session::{connect, ClientSession};
use crate::sys;

/// One side of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Local(PathBuf),
    Remote { host: String, path: String },
}

/// Reads `HOST:PATH` (or `[V6ADDR]:PATH`) as remote, anything else as local. As with scp,
/// a colon after a slash is part of a local name (`./a:b`).
pub fn parse_endpoint(text: &str) -> Endpoint {
    if let Some(rest) = text.strip_prefix('[') {
        if let Some((host, path)) = rest.split_once("]:") {
            return Endpoint::Remote {
                host: host.to_string(),
                path: path.to_string(),
            };
        }
    }
    match text.split_once(':') {
        Some((host, path)) if !host.is_empty() && !host.contains('/') => Endpoint::Remote {
            host: host.to_string(),
            path: path.to_string(),
        },
        _ => Endpoint::Local(PathBuf::from(text)),
    }
}

/// How to copy.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    pub key: Key,
    pub port: u16,
    pub rate: RateConfig,
    pub chunk: u64,
    pub window_chunks: u64,
    /// Write nothing at the destination (memory to memory).
    pub null: bool,
    pub recursive: bool,
    /// The largest datagram payload to use (below the path MTU's).
    pub block_cap: Option<u32>,
    /// Send datagrams without a UDP checksum (IPv4): the chunk hashes alone catch
    /// corruption.
    pub no_checksum: bool,
    /// Seal every payload with ChaCha20-Poly1305.
    pub encrypt: bool,
    /// Create missing directories at the destination (`--mkdir`); a tree copied with
    /// `-r` creates its own either way.
    pub mkdir: bool,
    /// Leave from this address (`-B`) and through this device (`--bind-dev`): the control
    /// connection and the datagrams.
    pub bind: crate::session::Bind,
    /// Where the client keeps what its copies learned of their paths (`path_memory`);
    /// `None` keeps nothing.
    pub path_book: Option<PathBuf>,
    /// Search the path's rate from scratch even where the book remembers it
    /// (`--cold-start`); what this copy learns is still kept.
    pub cold_start: bool,
    /// Mark every packet of the copy, both ways, with this DSCP (`--dscp`).
    pub dscp: Option<u8>,
    /// ECN (`--ecn`): the data datagrams carry ECT(0), the receiver counts those that
    /// arrive marked CE, and the sender's rate control takes each round with a mark as
    /// congested.
    pub ecn: bool,
    /// The UDP flows the datagrams spread over (`--lanes`, 1 to 16): each a pair of
    /// ports of its own, with its own sending thread.
    pub lanes: u8,
}

/// A push's memory of its path: recalled from the book when the copy starts, brought up
/// to date by every file (the next file of a tree starts from what the last one found),
/// and written back when the copy ends.
struct PushMemory {
    key: String,
    current: Option<crate::rate::PathMemory>,
}

impl PushMemory {
    fn recall(options: &CopyOptions, server: SocketAddr) -> PushMemory {
        let key = path_memory::client_key(
            Direction::Push,
            server,
            options.bind.address,
            options.bind.device.as_deref(),
        );
        let current = match (&options.path_book, options.cold_start) {
            (Some(file), false) => path_memory::load(file)
                .recall(&key, path_memory::now_unix_s())
                .map(|r| r.memory),
            _ => None,
        };
        PushMemory { key, current }
    }

    /// The rate for the next file: the user's, resumed from the memory when adaptive.
    fn rate(&self, rate: RateConfig) -> RateConfig {
        match rate {
            RateConfig::Adaptive { max_bps, .. } => RateConfig::Adaptive {
                max_bps,
                resume: self.current,
            },
            fixed => fixed,
        }
    }

    fn learn(&mut self, outcome: &FileOutcome) {
        if let Some(memory) = path_memory::lesson(outcome) {
            self.current = Some(memory);
        }
    }

    /// Writes what was learned into the book (read again first: another copy may have
    /// written it meanwhile). A book that cannot be written costs a note, not the copy.
    fn keep(&self, options: &CopyOptions, events: &CopyEvents) {
        let (Some(file), Some(memory)) = (&options.path_book, self.current) else {
            return;
        };
        let mut book = path_memory::load(file);
        book.remember(&self.key, memory, path_memory::now_unix_s());
        if let Err(e) = path_memory::save(file, &book) {
            (events.note)(&format!(
                "could not keep the path's rate in {}: {e}",
                file.display()
            ));
        }
    }
}

pub use crate::outcome::Direction;

/// One copied file.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CopiedFile {
    pub source: String,
    pub destination: String,
    #[serde(flatten)]
    pub outcome: FileOutcome,
}

/// What a copy did.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CopySummary {
    pub direction: Direction,
    pub server: String,
    pub block: u32,
    pub chunk: u64,
    /// The whole copy's wall time, set-up and verification included.
    pub wall_s: f64,
    /// The payloads travelled sealed (`--encrypt`).
    pub encrypted: bool,
    /// The UDP flows the datagrams spread over.
    pub lanes: u8,
    pub files: Vec<CopiedFile>,
}

/// Callbacks for a copy's progress.
pub struct CopyEvents<'a> {
    pub file_started: &'a dyn Fn(&str, u64),
    pub progress: &'a dyn Fn(TransferProgress),
    pub note: &'a dyn Fn(&str),
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, TransferError> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| TransferError::Local(format!("cannot resolve '{host}': {e}")))?
        .next()
        .ok_or_else(|| TransferError::Local(format!("'{host}' has no address")))
}

fn join_remote(base: &str, name: &str) -> String {
    if base.is_empty() {
        name.to_string()
    } else if base.ends_with('/') {
        format!("{base}{name}")
    } else {
        format!("{base}/{name}")
    }
}

fn base_name(path: &str) -> Option<&str> {
    path.trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty() && *n != "." && *n != "..")
}

/// The server `host` names and a session with it, as `options` say.
fn open(host: &str, options: &CopyOptions) -> Result<(SocketAddr, ClientSession), TransferError> {
    let server = resolve(host, options.port)?;
    let mut session = connect(
        server,
        &options.key,
        options.block_cap,
        &options.bind,
        options.dscp,
    )?;
    if options.lanes > 1 {
        session.open_lanes(options.lanes, &options.bind, options.dscp)?;
    }
    Ok((server, session))
}

/// Copies according to SRC and DST.
pub fn copy(
    source: &Endpoint,
    destination: &Endpoint,
    options: &CopyOptions,
    events: &CopyEvents,
    cancel: &AtomicBool,
) -> Result<CopySummary, TransferError> {
    let started = Instant::now();
    match (source, destination) {
        (Endpoint::Local(local), Endpoint::Remote { host, path }) => {
            let files = push_list(local, path, options.recursive)?;
            let (server, mut session) = open(host, options)?;
            if options.no_checksum {
                session
                    .session
                    .sockets()
                    .try_for_each(sys::no_udp_checksum)
                    .map_err(|e| TransferError::Local(format!("--no-udp-checksum: {e}")))?;
            }
            let mut copied = Vec::new();
            let mut memory = PushMemory::recall(options, server);
            for (local, remote) in files {
                let outcome = push_file(
                    &mut session,
                    copied.len() as u32 + 1,
                    &local,
                    &remote,
                    options,
                    memory.rate(options.rate),
                    events,
                    cancel,
                )?;
                memory.learn(&outcome);
                copied.push(CopiedFile {
                    source: local.display().to_string(),
                    destination: format!("{host}:{remote}"),
                    outcome,
                });
            }
            memory.keep(options, events);
            Ok(finish(
                session,
                Direction::Push,
                server,
                options.chunk,
                options,
                started,
                copied,
            ))
        }
        (Endpoint::Remote { host, path }, Endpoint::Local(local)) => {
            let (server, mut session) = open(host, options)?;
            let plan = pull_list(&mut session, path, local, options)?;
            let mut copied = Vec::new();
            for (remote, local) in plan {
                let outcome = pull_file(
                    &mut session,
                    copied.len() as u32 + 1,
                    &remote,
                    &local,
                    options,
                    events,
                    cancel,
                )?;
                copied.push(CopiedFile {
                    source: format!("{host}:{remote}"),
                    destination: local.display().to_string(),
                    outcome,
                });
            }
            let chunk = crate::layout::DEFAULT_CHUNK;
            Ok(finish(
                session,
                Direction::Pull,
                server,
                chunk,
                options,
                started,
                copied,
            ))
        }
        (Endpoint::Local(_), Endpoint::Local(_)) => Err(TransferError::Local(
            "both sides are local: one of SRC and DST must be HOST:PATH".into(),
        )),
        (Endpoint::Remote { .. }, Endpoint::Remote { .. }) => Err(TransferError::Local(
            "both sides are remote: one of SRC and DST must be a local path".into(),
        )),
    }
}

/// Ends the session and sums up what it copied.
fn finish(
    mut session: ClientSession,
    direction: Direction,
    server: SocketAddr,
    chunk: u64,
    options: &CopyOptions,
    started: Instant,
    files: Vec<CopiedFile>,
) -> CopySummary {
    // A session that asked for nothing still lets the server see its hello, so that the
    // server does not wait for it (and log it missing) before it reads the bye.
    let _ = session.prove_udp();
    let _ = session.channel.send(&Control::Bye);
    CopySummary {
        direction,
        server: server.to_string(),
        block: session.session.block - if options.encrypt { SEAL_TAG as u32 } else { 0 },
        chunk,
        wall_s: started.elapsed().as_secs_f64(),
        encrypted: options.encrypt,
        lanes: session.session.lane_count() as u8,
        files,
    }
}

/// (local file, remote path) pairs for a push.
fn push_list(
    local: &Path,
    remote: &str,
    recursive: bool,
) -> Result<Vec<(PathBuf, String)>, TransferError> {
    let metadata = std::fs::metadata(local)
        .map_err(|e| TransferError::Local(format!("{}: {e}", local.display())))?;
    let name = local
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| TransferError::Local(format!("{}: no usable file name", local.display())))?;
    let into_directory = remote.is_empty() || remote.ends_with('/') || remote == ".";
    if metadata.is_file() {
        let remote = if into_directory {
            join_remote(remote.trim_start_matches("./").trim_end_matches('.'), name)
        } else {
            remote.to_string()
        };
        return Ok(vec![(local.to_path_buf(), remote)]);
    }
    if !metadata.is_dir() {
        return Err(TransferError::Local(format!(
            "{}: not a regular file or directory",
            local.display()
        )));
    }
    if !recursive {
        return Err(TransferError::Local(format!(
            "{} is a directory: copy it with -r",
            local.display()
        )));
    }
    let base = if into_directory {
        join_remote(remote.trim_end_matches('.'), name)
    } else {
        remote.to_string()
    };
    let dir = sys::open_dir(local)
        .map_err(|e| TransferError::Local(format!("{}: {e}", local.display())))?;
    let mut entries: Vec<Entry> = Vec::new();
    walk(&dir, "", &mut entries)
        .map_err(|e| TransferError::Local(format!("{}: {e}", local.display())))?;
    Ok(entries
        .into_iter()
        .map(|entry| (local.join(&entry.path), join_remote(&base, &entry.path)))
        .collect())
}

fn peer_error(e: impl std::fmt::Display) -> TransferError {
    TransferError::Peer(e.to_string())
}

#[allow(clippy::too_many_arguments)]
fn push_file(
    session: &mut ClientSession,
    file_index: u32,
    local: &Path,
    remote: &str,
    options: &CopyOptions,
    rate: RateConfig,
    events: &CopyEvents,
    cancel: &AtomicBool,
) -> Result<FileOutcome, TransferError> {
    let file = std::fs::File::open(local)
        .map_err(|e| TransferError::Local(format!("{}: {e}", local.display())))?;
    let metadata = file
        .metadata()
        .map_err(|e| TransferError::Local(format!("{}: {e}", local.display())))?;
    let block = session.session.block - if options.encrypt { SEAL_TAG as u32 } else { 0 };
    let layout = Layout::fitting(metadata.len(), options.chunk, block)
        .map_err(|e| TransferError::Local(format!("{}: {e}", local.display())))?;
    session
        .channel
        .send(&Control::Offer {
            path: remote.to_string(),
            size: layout.size,
            chunk: layout.chunk,
            block: layout.block,
            identity: identity(&metadata),
            mode: std::os::unix::fs::PermissionsExt::mode(&metadata.permissions()) & 0o777,
            discard: options.null,
            encrypted: options.encrypt,
            mkdir: options.mkdir,
            dscp: options.dscp,
            ecn: options.ecn,
            train: train_for(&layout, rate, session.initial_rtt_ns),
        })
        .map_err(peer_error)?;
    if options.ecn {
        // This end sends the data: ECT(0) on its datagrams.
        let dscp = options.dscp.unwrap_or(0);
        session
            .session
            .sockets()
            .try_for_each(|udp| sys::set_marks(udp, dscp, true))
            .map_err(|e| TransferError::Local(format!("--ecn: {e}")))?;
        session
            .session
            .ecn
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
    session.prove_udp()?;
    let (have, window) = match session
        .channel
        .receive(receive_driver::accept_deadline(layout.size), Some(cancel))
    {
        Ok(Control::Accept { have, window }) => (have, window),
        Ok(Control::Refused { message }) => return Err(TransferError::Remote(message)),
        Ok(other) => {
            return Err(TransferError::Peer(format!(
                "expected an accept, got {other:?}"
            )))
        }
        Err(e) => return Err(peer_error(e)),
    };
    let resumed: u64 = receive_driver::have_chunks(&have, layout.chunks())
        .map(|c| layout.chunk_len(c))
        .sum();
    if resumed > 0 {
        (events.note)(&format!(
            "{remote}: resuming, {resumed} of {} bytes already there",
            layout.size
        ));
    }
    (events.file_started)(remote, layout.size);
    let sealer = options.encrypt.then(|| Sealer::new(&session.session.key));
    crate::send_driver::send_file(
        &mut session.channel,
        &session.session,
        file_index,
        &file,
        layout,
        &have,
        window,
        rate,
        session.initial_rtt_ns,
        sealer.as_ref(),
        cancel,
        events.progress,
    )
}

/// (remote path, local path) pairs for a pull.
fn pull_list(
    session: &mut ClientSession,
    remote: &str,
    local: &Path,
    options: &CopyOptions,
) -> Result<Vec<(String, PathBuf)>, TransferError> {
    let local_is_dir = local.is_dir();
    if !options.recursive {
        let target = if local_is_dir {
            let name = base_name(remote)
                .ok_or_else(|| TransferError::Local(format!("'{remote}' names no file")))?;
            local.join(name)
        } else {
            local.to_path_buf()
        };
        return Ok(vec![(remote.to_string(), target)]);
    }
    session
        .channel
        .send(&Control::List {
            path: remote.to_string(),
        })
        .map_err(peer_error)?;
    session.prove_udp()?;
    let entries = match session.channel.receive(Duration::from_secs(60), None) {
        Ok(Control::Entries { entries }) => entries,
        Ok(Control::Refused { message }) => return Err(TransferError::Remote(message)),
        Ok(other) => {
            return Err(TransferError::Peer(format!(
                "expected a listing, got {other:?}"
            )))
        }
        Err(e) => return Err(peer_error(e)),
    };
    let base = if local_is_dir {
        match base_name(remote) {
            Some(name) => local.join(name),
            None => local.to_path_buf(),
        }
    } else {
        local.to_path_buf()
    };
    let mut plan = Vec::new();
    for entry in entries {
        // The server's names are checked like any name from the network.
        let relative = crate::confine::confine(Path::new("/"), &entry.path)
            .map_err(|e| TransferError::Peer(format!("the server listed '{}': {e}", entry.path)))?;
        plan.push((join_remote(remote, &entry.path), base.join(relative)));
    }
    Ok(plan)
}

// Long: thread set-up around the receive loop: the socket, the writer, the progress and
// the end, in order (the next to split).
fn pull_file(
    session: &mut ClientSession,
    file_index: u32,
    remote: &str,
    local: &Path,
    options: &CopyOptions,
    events: &CopyEvents,
    cancel: &AtomicBool,
) -> Result<FileOutcome, TransferError> {
    session
        .channel
        .send(&Control::Pull {
            path: remote.to_string(),
            rate_bps: match options.rate {
                RateConfig::Fixed { bps } => Some(bps),
                RateConfig::Adaptive { .. } => None,
            },
            max_rate_bps: match options.rate {
                RateConfig::Adaptive { max_bps, .. } => max_bps,
                RateConfig::Fixed { .. } => None,
            },
            encrypt: options.encrypt,
            cold_start: options.cold_start,
            dscp: options.dscp,
            ecn: options.ecn,
        })
        .map_err(peer_error)?;
    if options.ecn {
        // This end receives: it reads each datagram's marks.
        session
            .session
            .sockets()
            .try_for_each(sys::receive_tos)
            .map_err(|e| TransferError::Local(format!("--ecn: {e}")))?;
        session
            .session
            .ecn
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
    session.prove_udp()?;
    let (layout, identity, mode, (encrypted, train)) = match session
        .channel
        .receive(Duration::from_secs(60), Some(cancel))
    {
        Ok(Control::Offer {
            size,
            chunk,
            block,
            identity,
            mode,
            encrypted,
            train,
            ..
        }) => (
            Layout::new(size, chunk, block).expect("validated"),
            identity,
            mode,
            (encrypted, train),
        ),
        Ok(Control::Refused { message }) => return Err(TransferError::Remote(message)),
        Ok(other) => {
            return Err(TransferError::Peer(format!(
                "expected an offer, got {other:?}"
            )))
        }
        Err(e) => return Err(peer_error(e)),
    };
    let parent = local
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !options.null {
        if options.mkdir {
            std::fs::create_dir_all(parent)
                .map_err(|e| TransferError::Local(format!("{}: {e}", parent.display())))?;
        } else if !parent.is_dir() {
            return Err(TransferError::Local(format!(
                "no directory '{}' here (--mkdir creates it)",
                parent.display()
            )));
        }
    }
    let name = local
        .file_name()
        .ok_or_else(|| TransferError::Local(format!("{}: no file name", local.display())))?
        .to_os_string();
    let dir = sys::open_dir(parent)
        .map_err(|e| TransferError::Local(format!("{}: {e}", parent.display())))?;
    let target = Target {
        dir,
        name,
        shown: local.display().to_string(),
        shown_dir: parent.display().to_string(),
        null: options.null,
    };
    let prepared = match receive_driver::prepare(target, &layout, &identity, mode) {
        Ok(prepared) => prepared,
        Err(e) => {
            let _ = session.channel.send(&Control::Refused {
                message: e.to_string(),
            });
            return Err(e);
        }
    };
    for note in &prepared.notes {
        (events.note)(note);
    }
    let have: Vec<u64> = prepared.have.iter().map(|(c, _)| *c).collect();
    if !have.is_empty() {
        let resumed: u64 = have.iter().map(|&c| layout.chunk_len(c)).sum();
        (events.note)(&format!(
            "{}: resuming, {resumed} of {} bytes already there",
            local.display(),
            layout.size
        ));
    }
    session
        .channel
        .send(&Control::Accept {
            have: receive_driver::ranges(have.iter().copied()),
            window: initial_window(&layout, &have, options.window_chunks),
        })
        .map_err(peer_error)?;
    (events.file_started)(&local.display().to_string(), layout.size);
    let sealer = encrypted.then(|| Sealer::new(&session.session.key));
    receive_driver::receive_file(
        &mut session.channel,
        &session.session,
        file_index,
        layout,
        prepared,
        options.window_chunks,
        train,
        sealer.as_ref(),
        cancel,
        events.progress,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_read_like_scp() {
        assert_eq!(
            parse_endpoint("server:big.dat"),
            Endpoint::Remote {
                host: "server".into(),
                path: "big.dat".into()
            }
        );
        assert_eq!(
            parse_endpoint("[fd77::2]:d/x"),
            Endpoint::Remote {
                host: "fd77::2".into(),
                path: "d/x".into()
            }
        );
        assert_eq!(parse_endpoint("./a:b"), Endpoint::Local("./a:b".into()));
        assert_eq!(parse_endpoint("big.dat"), Endpoint::Local("big.dat".into()));
        assert_eq!(
            parse_endpoint("server:"),
            Endpoint::Remote {
                host: "server".into(),
                path: String::new()
            }
        );
    }

    #[test]
    fn remote_names_join_like_paths() {
        assert_eq!(join_remote("", "a"), "a");
        assert_eq!(join_remote("d/", "a"), "d/a");
        assert_eq!(join_remote("d", "a"), "d/a");
        assert_eq!(base_name("x/y/"), Some("y"));
        assert_eq!(base_name("."), None);
    }
}
