//! The server's file service (`linerate serve --files DIR --key FILE`): one control
//! connection at a time per thread, any number of files per connection. Every name a
//! client sends is confined to DIR (`confine`, then `openat2` beneath DIR with no symbolic
//! links); only regular files are read or written; a refusal is told to the client and
//! logged, and the session goes on.

// An I/O driver: the server's admission and deadlines read the clock.
#![allow(clippy::disallowed_methods)]

use std::ffi::OsString;
use std::io;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use linerate_proto::auth::Key;

use crate::channel::{Channel, ChannelError};
use crate::confine::confine;
use crate::control::{Control, Entry, MAX_ENTRIES};
use crate::datagrams::Session;
use crate::layout::{Layout, DEFAULT_CHUNK};
use crate::outcome::FileOutcome;
use crate::path_memory::{self, PathBook};
use crate::rate::RateConfig;
use crate::receive_driver::{self, accept_deadline, Target};
use crate::seal::{Sealer, SEAL_TAG};
use crate::sender::train_for;
use crate::sys;

/// A session waits this long for its next request.
const IDLE: Duration = Duration::from_secs(600);
/// Chunks a receiver lets the sender have outstanding (its memory: chunks × chunk size).
pub const DEFAULT_WINDOW_CHUNKS: u64 = 256;

/// What the server's listener lends one copy session: its handshake deadline and the
/// hooks of its admission (docs/security.md).
pub struct Admission<'a> {
    /// The hello and the key's proof together must come within this.
    pub handshake: Duration,
    /// The key is proven: the session is no longer one that may be closed to make room.
    pub proven: &'a dyn Fn(),
    /// The client had the key confirmation and did not prove the key: one failure
    /// toward its lockout, shared with every other service of the server.
    pub failed_proof: &'a dyn Fn(),
    /// The operator's log.
    pub log: &'a dyn Fn(&str),
}

/// Refused handshakes, told at most once per reason every ten seconds with how many
/// since, so that a flood of them cannot fill the log.
#[derive(Debug, Default)]
pub struct RefusalLog {
    by_reason: Mutex<std::collections::HashMap<&'static str, (Instant, u64)>>,
}

/// How often a refusal's reason may be told.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

impl RefusalLog {
    /// Counts a refusal; the line to write now, if one is due (with the count of those
    /// not written since the last).
    pub fn note(&self, reason: &'static str, line: &str, now: Instant) -> Option<String> {
        let mut by_reason = self.by_reason.lock().unwrap_or_else(|p| p.into_inner());
        match by_reason.get_mut(reason) {
            Some((last, unsaid)) if now.duration_since(*last) < REFUSAL_LOG_EVERY => {
                *unsaid += 1;
                None
            }
            Some((last, unsaid)) => {
                let more = std::mem::take(unsaid);
                *last = now;
                Some(if more > 0 {
                    format!(
                        "{line} ({more} more refused for this reason in the last {} s)",
                        REFUSAL_LOG_EVERY.as_secs()
                    )
                } else {
                    line.to_string()
                })
            }
            None => {
                by_reason.insert(reason, (now, 0));
                Some(line.to_string())
            }
        }
    }
}

/// The directory a server serves and the key a client must hold.
pub struct FileService {
    root: PathBuf,
    root_dir: OwnedFd,
    key: Key,
    refusals: RefusalLog,
    /// What the files this server sent learned of the paths to their clients, by client
    /// address: the next pull by the same client resumes its rate search from it. Held
    /// in memory, [`crate::path_memory::MAX_ENTRIES`] clients at most.
    paths: Mutex<PathBook>,
}

impl std::fmt::Debug for FileService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key stays out of debug output.
        f.debug_struct("FileService")
            .field("root", &self.root)
            .finish()
    }
}

impl FileService {
    pub fn new(root: &Path, key: Key) -> io::Result<FileService> {
        let root = root.canonicalize()?;
        let root_dir = sys::open_dir(&root)?;
        Ok(FileService {
            root,
            root_dir,
            key,
            refusals: RefusalLog::default(),
            paths: Mutex::new(PathBook::default()),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The service's refusals, told at most once per reason every ten seconds (the
    /// listener tells its own refusals of copy sessions there too).
    pub fn refusals(&self) -> &RefusalLog {
        &self.refusals
    }

    fn book(&self) -> std::sync::MutexGuard<'_, PathBook> {
        // A session that panicked while holding it left a book still whole.
        self.paths.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Serves one control connection (its preface already read; `already` holds any
    /// bytes read past it), within what the listener's `admission` lends it.
    pub fn serve(&self, stream: TcpStream, already: &[u8], admission: &Admission) {
        let log = admission.log;
        let peer = stream
            .peer_addr()
            .map_or_else(|_| "a client".to_string(), |p| p.to_string());
        let Some((mut channel, mut session)) = self.open(stream, already, admission, &peer) else {
            return;
        };
        let mut file_index = 0u32;
        loop {
            let request = match channel.receive(IDLE, None) {
                Ok(request) => request,
                Err(ChannelError::Closed) => return,
                Err(e) => return log(&format!("copy session from {peer}: {e}")),
            };
            let result = match request {
                Control::Offer {
                    path,
                    size,
                    chunk,
                    block,
                    identity,
                    mode,
                    discard,
                    encrypted,
                    mkdir,
                    dscp,
                    ecn,
                    train,
                } => {
                    file_index += 1;
                    mark(&channel, &session, (dscp, ecn), Way::Receives, &peer, log);
                    let offer = Offer {
                        path,
                        size,
                        chunk,
                        block,
                        identity,
                        mode,
                        discard,
                        encrypted,
                        mkdir,
                        train,
                    };
                    self.receive(&mut channel, &session, file_index, offer, &peer, log)
                }
                Control::Pull {
                    path,
                    rate_bps,
                    max_rate_bps,
                    encrypt,
                    cold_start,
                    dscp,
                    ecn,
                } => {
                    file_index += 1;
                    mark(&channel, &session, (dscp, ecn), Way::Sends, &peer, log);
                    let rate = match rate_bps {
                        Some(bps) => RateConfig::Fixed { bps },
                        None => RateConfig::Adaptive {
                            max_bps: max_rate_bps,
                            resume: None,
                        },
                    };
                    let resume = !cold_start;
                    let sealer = encrypt.then(|| Sealer::new(&session.key));
                    self.send(
                        &mut channel,
                        &session,
                        file_index,
                        &path,
                        (rate, resume),
                        sealer.as_ref(),
                        &peer,
                        log,
                    )
                }
                Control::List { path } => self.list(&channel, &path, &peer, log),
                // Lanes are the session's, set up before its first file, once.
                Control::Lanes { count } if file_index == 0 && session.lanes.is_empty() => {
                    crate::session::accept_lanes(&channel, &mut session, count)
                        .map_err(|e| format!("--lanes {count}: {e}"))
                }
                Control::Bye => return,
                other => {
                    log(&format!(
                        "copy session from {peer}: refused an out-of-turn message ({})",
                        message_name(&other)
                    ));
                    return;
                }
            };
            if let Err(ended) = result {
                return log(&format!("copy session from {peer}: {ended}"));
            }
        }
    }

    /// The session's channel and its proven key, or `None` (said in the log, a failed
    /// proof counted against the client) when it did not open.
    fn open(
        &self,
        stream: TcpStream,
        already: &[u8],
        admission: &Admission,
        peer: &str,
    ) -> Option<(Channel, crate::datagrams::Session)> {
        let log = admission.log;
        let channel = match Channel::new(stream, already) {
            Ok(channel) => channel,
            Err(e) => {
                log(&format!("copy session from {peer}: {e}"));
                return None;
            }
        };
        let opened =
            crate::session::accept(channel, &self.key, admission.handshake, admission.proven);
        match opened {
            Ok(ready) => Some(ready),
            Err(unopened) => {
                if matches!(unopened, crate::session::Unopened::KeyNotProven(_)) {
                    (admission.failed_proof)();
                }
                let line = format!("refused a copy session from {peer}: {unopened}");
                if let Some(line) = self.refusals.note(unopened.reason(), &line, Instant::now()) {
                    log(&line);
                }
                None
            }
        }
    }

    fn refuse(
        &self,
        channel: &Channel,
        peer: &str,
        log: &dyn Fn(&str),
        message: String,
    ) -> Result<(), String> {
        log(&format!("copy session from {peer}: refused: {message}"));
        channel
            .send(&Control::Refused { message })
            .map_err(|e| e.to_string())
    }

    /// The directory (created beneath the root when missing) and name for `relative`.
    fn parent_of(&self, relative: &Path, create: bool) -> io::Result<(OwnedFd, OsString)> {
        let name = relative
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?
            .to_os_string();
        let parent = relative.parent().filter(|p| !p.as_os_str().is_empty());
        let dir = match parent {
            None => self.root_dir.try_clone()?,
            Some(parent) => {
                if create {
                    let mut prefix = PathBuf::new();
                    for component in parent.components() {
                        prefix.push(component);
                        sys::mkdir_beneath(&self.root_dir, &prefix)?;
                    }
                }
                sys::open_beneath(
                    &self.root_dir,
                    parent,
                    libc::O_RDONLY | libc::O_DIRECTORY,
                    0,
                )?
            }
        };
        Ok((dir, name))
    }

    fn receive(
        &self,
        channel: &mut Channel,
        session: &Session,
        file_index: u32,
        offer: Offer,
        peer: &str,
        log: &dyn Fn(&str),
    ) -> Result<(), String> {
        let relative = match confine(&self.root, &offer.path) {
            Ok(relative) => relative,
            Err(e) => {
                return self.refuse(channel, peer, log, format!("path '{}': {e}", offer.path))
            }
        };
        let layout = Layout::new(offer.size, offer.chunk, offer.block).expect("validated");
        let (dir, name) = match self.parent_of(&relative, !offer.discard && offer.mkdir) {
            Ok(found) => found,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && !offer.mkdir => {
                let dir = relative
                    .parent()
                    .map_or(String::new(), |p| p.display().to_string());
                let why = format!("no directory '{dir}' on the server (--mkdir creates it)");
                return self.refuse(channel, peer, log, why);
            }
            Err(e) => return self.refuse(channel, peer, log, describe(&offer.path, &e)),
        };
        // An existing name must be a regular file (not a directory, link or device).
        if let Ok(existing) = sys::open_at(&dir, &name, libc::O_PATH, 0) {
            let regular = existing
                .metadata()
                .map(|m| m.file_type().is_file())
                .unwrap_or(false);
            if !regular {
                return self.refuse(
                    channel,
                    peer,
                    log,
                    format!("'{}' exists and is not a regular file", offer.path),
                );
            }
        }
        let target = Target {
            dir,
            name,
            shown: relative.display().to_string(),
            shown_dir: self.root.display().to_string(),
            null: offer.discard,
        };
        let prepared = match receive_driver::prepare(target, &layout, &offer.identity, offer.mode) {
            Ok(prepared) => prepared,
            Err(e) => return self.refuse(channel, peer, log, e.to_string()),
        };
        for note in &prepared.notes {
            log(&format!("copy session from {peer}: {note}"));
        }
        let have: Vec<u64> = prepared.have.iter().map(|(c, _)| *c).collect();
        let window = initial_window(&layout, &have, DEFAULT_WINDOW_CHUNKS);
        channel
            .send(&Control::Accept {
                have: receive_driver::ranges(have.iter().copied()),
                window,
            })
            .map_err(|e| e.to_string())?;
        let cancel = AtomicBool::new(false);
        let sealer = offer.encrypted.then(|| Sealer::new(&session.key));
        let outcome = receive_driver::receive_file(
            channel,
            session,
            file_index,
            layout,
            prepared,
            DEFAULT_WINDOW_CHUNKS,
            offer.train,
            sealer.as_ref(),
            &cancel,
            &|_| {},
        )
        .map_err(|e| format!("receiving '{}' failed: {e}", offer.path))?;
        log(&format!(
            "copy session from {peer}: received {}{}",
            offer.path,
            summary(&outcome)
        ));
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn send(
        &self,
        channel: &mut Channel,
        session: &Session,
        file_index: u32,
        path: &str,
        (rate, resume): (RateConfig, bool),
        sealer: Option<&Sealer>,
        peer: &str,
        log: &dyn Fn(&str),
    ) -> Result<(), String> {
        let relative = match confine(&self.root, path) {
            Ok(relative) => relative,
            Err(e) => return self.refuse(channel, peer, log, format!("path '{path}': {e}")),
        };
        let file = match sys::open_beneath(&self.root_dir, &relative, libc::O_RDONLY, 0) {
            Ok(fd) => std::fs::File::from(fd),
            Err(e) => return self.refuse(channel, peer, log, describe(path, &e)),
        };
        let metadata = file.metadata().map_err(|e| e.to_string())?;
        if !metadata.file_type().is_file() {
            let what = if metadata.is_dir() {
                "a directory (copy it with -r)"
            } else {
                "not a regular file"
            };
            return self.refuse(channel, peer, log, format!("'{path}' is {what}"));
        }
        let block = session.block - if sealer.is_some() { SEAL_TAG as u32 } else { 0 };
        let layout = match Layout::fitting(metadata.len(), DEFAULT_CHUNK, block) {
            Ok(layout) => layout,
            Err(e) => return self.refuse(channel, peer, log, format!("'{path}': {e}")),
        };
        // The path back to this client, as the last file sent to it found it.
        let path_key = peer
            .parse::<std::net::SocketAddr>()
            .map(|p| format!("to {}", p.ip()))
            .ok();
        let rate = self.resumed(rate, resume, path_key.as_deref());
        let train = train_for(&layout, rate, channel.handshake_rtt_ns());
        channel
            .send(&Control::Offer {
                train,
                ecn: false,
                path: String::new(),
                size: layout.size,
                chunk: layout.chunk,
                block: layout.block,
                identity: identity(&metadata),
                mode: metadata.permissions().mode() & 0o777,
                discard: false,
                encrypted: sealer.is_some(),
                mkdir: false,
                dscp: None,
            })
            .map_err(|e| e.to_string())?;
        let (have, window) = match channel.receive(accept_deadline(layout.size), None) {
            Ok(Control::Accept { have, window }) => (have, window),
            Ok(Control::Refused { message }) => {
                log(&format!(
                    "copy session from {peer}: the client declined '{path}': {message}"
                ));
                return Ok(());
            }
            Ok(other) => return Err(format!("expected an accept, got {}", message_name(&other))),
            Err(e) => return Err(e.to_string()),
        };
        let cancel = AtomicBool::new(false);
        let outcome = crate::send_driver::send_file(
            channel,
            session,
            file_index,
            &file,
            layout,
            &have,
            window,
            rate,
            channel.handshake_rtt_ns(),
            sealer,
            &cancel,
            &|_| {},
        )
        .map_err(|e| format!("sending '{path}' failed: {e}"))?;
        if let (Some(key), Some(memory)) = (&path_key, path_memory::lesson(&outcome)) {
            self.book().remember(key, memory, path_memory::now_unix_s());
        }
        log(&format!(
            "copy session from {peer}: sent {path}{}",
            summary(&outcome)
        ));
        Ok(())
    }

    fn list(
        &self,
        channel: &Channel,
        path: &str,
        peer: &str,
        log: &dyn Fn(&str),
    ) -> Result<(), String> {
        let relative = match confine(&self.root, path) {
            Ok(relative) => relative,
            Err(e) => return self.refuse(channel, peer, log, format!("path '{path}': {e}")),
        };
        let dir = match sys::open_beneath(
            &self.root_dir,
            &relative,
            libc::O_RDONLY | libc::O_DIRECTORY,
            0,
        ) {
            Ok(dir) => dir,
            Err(e) => return self.refuse(channel, peer, log, describe(path, &e)),
        };
        let mut entries = Vec::new();
        if let Err(e) = walk(&dir, "", &mut entries) {
            return self.refuse(channel, peer, log, format!("'{path}': {e}"));
        }
        channel
            .send(&Control::Entries { entries })
            .map_err(|e| e.to_string())
    }
}

impl FileService {
    /// `rate`, resumed from what the last file sent over path `key` found where `resume`.
    fn resumed(&self, rate: RateConfig, resume: bool, key: Option<&str>) -> RateConfig {
        match (rate, key) {
            (RateConfig::Adaptive { max_bps, .. }, Some(key)) if resume => RateConfig::Adaptive {
                max_bps,
                resume: self
                    .book()
                    .recall(key, path_memory::now_unix_s())
                    .map(|r| r.memory),
            },
            (rate, _) => rate,
        }
    }
}

/// A push's offer, as received.
struct Offer {
    path: String,
    size: u64,
    chunk: u64,
    block: u32,
    identity: String,
    mode: u32,
    discard: bool,
    encrypted: bool,
    mkdir: bool,
    train: Option<u32>,
}

/// The regular files under a directory, depth first, names sorted; links, devices and
/// the like are left out (as rsync does without -L).
pub fn walk(dir: &OwnedFd, prefix: &str, out: &mut Vec<Entry>) -> io::Result<()> {
    let listing = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))?;
    let mut names: Vec<(OsString, std::fs::FileType)> = Vec::new();
    for entry in listing {
        let entry = entry?;
        names.push((entry.file_name(), entry.file_type()?));
    }
    names.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, kind) in names {
        let Some(text) = name.to_str() else { continue };
        if text.ends_with(".part") || text.ends_with(".part.journal") {
            continue;
        }
        let path = if prefix.is_empty() {
            text.to_string()
        } else {
            format!("{prefix}/{text}")
        };
        if kind.is_dir() {
            let child = sys::open_at(dir, &name, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
            walk(&OwnedFd::from(child), &path, out)?;
        } else if kind.is_file() {
            let file = sys::open_at(dir, &name, libc::O_PATH, 0)?;
            out.push(Entry {
                path,
                size: file.metadata()?.len(),
            });
        }
        if out.len() > MAX_ENTRIES {
            return Err(io::Error::other(format!(
                "over {MAX_ENTRIES} files: copy its subdirectories one at a time"
            )));
        }
    }
    Ok(())
}

/// A file's identity for resuming: its size and modification time, hashed.
pub fn identity(metadata: &std::fs::Metadata) -> String {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&metadata.len().to_le_bytes());
    hasher.update(&metadata.mtime().to_le_bytes());
    hasher.update(&metadata.mtime_nsec().to_le_bytes());
    hasher.finalize().to_hex().to_string()
}

/// The window a receiver opens before its first ACK.
pub fn initial_window(layout: &Layout, have: &[u64], window_chunks: u64) -> u64 {
    let mut lowest = 0;
    for &chunk in have {
        if chunk == lowest {
            lowest += 1;
        } else if chunk > lowest {
            break;
        }
    }
    ((lowest + window_chunks) * layout.chunk).min(layout.size)
}

fn describe(path: &str, error: &io::Error) -> String {
    match error.raw_os_error() {
        Some(libc::ELOOP) => format!("'{path}' goes through a symbolic link: refused"),
        Some(libc::EXDEV) => format!("'{path}' leads out of the served directory: refused"),
        Some(libc::ENOENT) => format!("'{path}': no such file or directory"),
        Some(libc::ENOTDIR) => format!("'{path}': a part of it is not a directory"),
        _ => format!("'{path}': {error}"),
    }
}

/// What the server does with a file: which end of the copy's datagrams it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    Sends,
    Receives,
}

/// Marks the session's datagrams and control messages from here on with the client's
/// DSCP, when it asked for one; with `ecn`, the server's data datagrams carry ECT(0)
/// (`way` Sends) or it reads the marks of the client's (Receives). A socket that refuses
/// is logged and left as it was.
fn mark(
    channel: &Channel,
    session: &Session,
    (dscp, ecn): (Option<u8>, bool),
    way: Way,
    peer: &str,
    log: &dyn Fn(&str),
) {
    if ecn {
        session
            .ecn
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let result = session.sockets().try_for_each(|udp| match way {
            Way::Sends => sys::set_marks(udp, dscp.unwrap_or(0), true),
            Way::Receives => sys::receive_tos(udp),
        });
        if let Err(e) = result {
            session
                .ecn
                .store(false, std::sync::atomic::Ordering::Relaxed);
            log(&format!("copy session from {peer}: cannot use ECN: {e}"));
        }
    }
    let Some(dscp) = dscp else {
        return;
    };
    let datagrams = if ecn && way == Way::Sends {
        Ok(())
    } else {
        session
            .sockets()
            .try_for_each(|udp| sys::set_dscp(udp, dscp))
    };
    if let Err(e) = datagrams.and_then(|()| channel.set_dscp(dscp)) {
        log(&format!(
            "copy session from {peer}: cannot mark with DSCP {dscp}: {e}"
        ));
    }
}

fn summary(outcome: &FileOutcome) -> String {
    let rate = if outcome.wall_s > 0.0 {
        (outcome.bytes - outcome.resumed_bytes) as f64 * 8.0 / outcome.wall_s / 1e6
    } else {
        0.0
    };
    format!(
        " ({} bytes in {:.2} s, {rate:.1} Mbit/s, {} bytes resent{})",
        outcome.bytes,
        outcome.wall_s,
        outcome.resent_bytes,
        if outcome.resumed_bytes > 0 {
            format!(", {} resumed", outcome.resumed_bytes)
        } else {
            String::new()
        }
    )
}

fn message_name(message: &Control) -> String {
    serde_json::to_value(message)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// Answers a copy session on a server that serves no files: one refusal the client can
/// print, then the connection closes.
pub fn refuse_unserved(stream: TcpStream, message: &str) {
    if let Ok(channel) = Channel::new(stream, &[]) {
        let _ = channel.send(&Control::Refused {
            message: message.to_string(),
        });
    }
}
