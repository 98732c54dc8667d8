//! The files of `sendfile` and `sendfilev` operations: found under their directory before
//! a run (uperf lists the directory when it reads the profile, and so does linerate, on
//! the host that runs the profile), and sent with sendfile(2) on plain TCP, or read and
//! written through the session on TLS, which the kernel cannot encrypt here (no kTLS).

use super::conn::{Conn, OpError};
use linerate_profile::{Action, FileSend, Profile, SendFile};
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::Path;

/// The most files one operation's directory may hold: each is listed in the group every
/// peer receives.
pub const MAX_FILES: usize = linerate_profile::budget::MAX_SEND_FILES;

/// Lists the files of every sendfile operation in `profile`, in place: the regular files
/// under its directory (subdirectories too), in path order. An operation whose directory
/// cannot be read, holds no file with bytes or more than [`MAX_FILES`] files is named.
pub fn find(profile: &mut Profile) -> Result<(), String> {
    for group in &mut profile.groups {
        for (ti, txn) in group.transactions.iter_mut().enumerate() {
            for (oi, op) in txn.ops.iter_mut().enumerate() {
                let Action::Sendfile(send) = &mut op.action else {
                    continue;
                };
                let at = format!(
                    "group '{}' transaction {} operation {} ({})",
                    group.name,
                    ti + 1,
                    oi + 1,
                    if send.nfiles.is_some() {
                        "sendfilev"
                    } else {
                        "sendfile"
                    }
                );
                send.files = list(Path::new(&send.dir)).map_err(|e| format!("{at}: {e}"))?;
            }
        }
    }
    Ok(())
}

fn list(dir: &Path) -> Result<Vec<SendFile>, String> {
    let shown = dir.display();
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        let entries = std::fs::read_dir(&next)
            .map_err(|e| format!("cannot read directory {}: {e}", next.display()))?;
        for entry in entries {
            let entry =
                entry.map_err(|e| format!("cannot read directory {}: {e}", next.display()))?;
            // Symbolic links are not followed: a link out of the directory would send
            // what the profile did not name, and a loop would never end.
            let kind = entry
                .file_type()
                .map_err(|e| format!("{}: {e}", entry.path().display()))?;
            if kind.is_dir() {
                pending.push(entry.path());
            } else if kind.is_file() {
                let size = entry
                    .metadata()
                    .map_err(|e| format!("{}: {e}", entry.path().display()))?
                    .len();
                if size == 0 {
                    continue;
                }
                if files.len() == MAX_FILES {
                    return Err(format!(
                        "dir {shown} holds more than {MAX_FILES} files; name a directory with fewer"
                    ));
                }
                files.push(SendFile {
                    path: entry.path().display().to_string(),
                    size,
                });
            }
        }
    }
    if files.is_empty() {
        return Err(format!("dir {shown} holds no file with any bytes to send"));
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

/// The seed of one thread's picks for one operation: the same on the runner and on its
/// mirror, which draw the same files from it.
pub(crate) fn seed(thread: u32, transaction: usize, op: usize) -> u64 {
    linerate_profile::splitmix64(
        (u64::from(thread) << 32) ^ ((transaction as u64) << 16) ^ op as u64,
    )
}

/// The bytes execution `execution` of `send` moves: the sizes of the files it picks.
pub(crate) fn bytes_of(send: &FileSend, seed: u64, execution: u64) -> u64 {
    send.picks(seed, execution)
        .map(|i| send.files.get(i).map_or(0, |f| f.size))
        .sum()
}

/// Sends the files execution `execution` picks, each whole. `buf` carries a file's bytes
/// through a TLS session.
pub(crate) fn send(
    conn: &mut Conn,
    send: &FileSend,
    seed: u64,
    execution: u64,
    buf: &mut [u8],
    moved: &mut u64,
    give_up: &mut dyn FnMut() -> bool,
) -> Result<(), OpError> {
    for index in send.picks(seed, execution) {
        let Some(entry) = send.files.get(index) else {
            return Err(OpError::Io(std::io::Error::other(
                "sendfile has no files listed",
            )));
        };
        let file = File::open(&entry.path).map_err(OpError::Io)?;
        match conn {
            Conn::Tcp(stream) => send_with_sendfile(
                stream.as_raw_fd(),
                &file,
                entry.size,
                send.chunk,
                moved,
                give_up,
            )?,
            Conn::Tls(_) => copy_through(conn, file, entry.size, buf, moved, give_up)?,
            Conn::Udp(_) => {
                return Err(OpError::Io(std::io::Error::other(
                    "sendfile needs a tcp or ssl connection",
                )))
            }
        }
    }
    Ok(())
}

/// sendfile(2) from `file` to the socket until `size` bytes are sent, `chunk` at most
/// per call. The socket's send timeout returns the call so that `give_up` is asked.
fn send_with_sendfile(
    socket: i32,
    file: &File,
    size: u64,
    chunk: Option<u64>,
    moved: &mut u64,
    give_up: &mut dyn FnMut() -> bool,
) -> Result<(), OpError> {
    // The kernel sends at most about 2 GiB per call.
    const MOST_PER_CALL: u64 = 0x7fff_f000;
    let mut offset: libc::off_t = 0;
    while (offset as u64) < size {
        let left = size - offset as u64;
        let want = left.min(chunk.unwrap_or(MOST_PER_CALL)).min(MOST_PER_CALL) as usize;
        // SAFETY: both descriptors are open for the call; `offset` is a valid out-pointer
        // and the kernel advances it by the bytes sent, leaving the file's own offset alone.
        let sent = unsafe { libc::sendfile(socket, file.as_raw_fd(), &mut offset, want) };
        match sent {
            n if n > 0 => *moved += n as u64,
            0 => {
                return Err(OpError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the file ended before its listed size (it changed during the run)",
                )))
            }
            _ => super::conn::keep_waiting(std::io::Error::last_os_error(), give_up)?,
        }
    }
    Ok(())
}

/// A file's bytes read into `buf` and written through the connection's session.
fn copy_through(
    conn: &mut Conn,
    mut file: File,
    size: u64,
    buf: &mut [u8],
    moved: &mut u64,
    give_up: &mut dyn FnMut() -> bool,
) -> Result<(), OpError> {
    let mut left = size;
    while left > 0 {
        let want = (left.min(buf.len() as u64) as usize).max(1);
        let n = file.read(&mut buf[..want]).map_err(OpError::Io)?;
        if n == 0 {
            return Err(OpError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the file ended before its listed size (it changed during the run)",
            )));
        }
        conn.send(&buf[..n], moved, give_up)?;
        left -= n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_finds_regular_files_below_and_names_an_empty_directory() {
        let dir = std::env::temp_dir().join(format!("linerate-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("a"), vec![1u8; 10]).unwrap();
        std::fs::write(dir.join("sub/b"), vec![2u8; 20]).unwrap();
        std::fs::write(dir.join("empty"), b"").unwrap();
        let files = list(&dir).unwrap();
        let sizes: Vec<u64> = files.iter().map(|f| f.size).collect();
        assert_eq!(sizes, [10, 20], "{files:?}");
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        let err = list(&dir).unwrap_err();
        assert!(err.contains("holds no file"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(list(&dir).unwrap_err().contains("cannot read directory"));
    }

    #[test]
    fn both_ends_pick_the_same_files_and_count_the_same_bytes() {
        let send = FileSend {
            dir: "d".into(),
            files: (1..=7)
                .map(|i| SendFile {
                    path: format!("f{i}"),
                    size: i * 1000,
                })
                .collect(),
            nfiles: Some(3),
            chunk: None,
            count: 1,
            canfail: false,
        };
        let seed = seed(4, 1, 2);
        let mut seen = std::collections::BTreeSet::new();
        for execution in 0..200 {
            let picks: Vec<usize> = send.picks(seed, execution).collect();
            assert_eq!(picks.len(), 3);
            assert_eq!(picks, send.picks(seed, execution).collect::<Vec<_>>());
            seen.extend(picks);
            let expected: u64 = send
                .picks(seed, execution)
                .map(|i| send.files[i].size)
                .sum();
            assert_eq!(bytes_of(&send, seed, execution), expected);
        }
        // Every file gets picked: the choice spreads over the directory, as uperf's does.
        assert_eq!(seen.len(), 7);
        assert_ne!(
            send.picks(seed, 0).collect::<Vec<_>>(),
            send.picks(super::seed(5, 1, 2), 0).collect::<Vec<_>>(),
            "threads draw differently (a coincidence here is possible but not for these seeds)"
        );
    }
}
