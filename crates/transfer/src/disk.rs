//! `linerate disk PATH`: the sequential write and read rates a copy's receiver and sender
//! would see on a file system, the way a copy does its I/O (1 MiB `pwrite`s then
//! `fdatasync`; `pread`s after the file's pages are dropped from the cache).

// An I/O driver: it times the file system's writes and reads on the clock.
#![allow(clippy::disallowed_methods)]

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::Instant;

const BLOCK: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DiskRates {
    pub bytes: u64,
    /// Bytes per second written, the final sync included.
    pub write_bps: f64,
    /// Bytes per second read back from the device (the cache dropped first).
    pub read_bps: f64,
    pub write_s: f64,
    pub read_s: f64,
    /// The file system is kept in memory (tmpfs, ramfs): both rates are memory's, and
    /// there is no device to read back from.
    #[serde(default)]
    pub memory_backed: bool,
}

/// Writes and reads back `bytes` in a scratch file under `dir`, which is removed after.
pub fn measure(dir: &Path, bytes: u64, progress: &dyn Fn(&str, u64)) -> io::Result<DiskRates> {
    if let Some(free) = crate::sys::free_bytes(dir) {
        if free < bytes {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                format!(
                    "{} has {free} bytes free, fewer than the {bytes} to write",
                    dir.display()
                ),
            ));
        }
    }
    let path = dir.join(format!(".linerate-disk-{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    let result = (|| {
        // Incompressible, not all zeros: a file system that elides zeros would flatter.
        let mut block = vec![0u8; BLOCK];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for word in block.chunks_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            word.copy_from_slice(&state.to_le_bytes()[..word.len()]);
        }
        let started = Instant::now();
        let mut at = 0u64;
        while at < bytes {
            let len = (bytes - at).min(BLOCK as u64) as usize;
            file.write_all_at(&block[..len], at)?;
            at += len as u64;
            progress("write", at);
        }
        file.sync_all()?;
        let write_s = started.elapsed().as_secs_f64();
        crate::sys::drop_cached(file.as_raw_fd(), 0, bytes);
        let started = Instant::now();
        let mut at = 0u64;
        while at < bytes {
            let len = (bytes - at).min(BLOCK as u64) as usize;
            file.read_exact_at(&mut block[..len], at)?;
            at += len as u64;
            progress("read", at);
        }
        let read_s = started.elapsed().as_secs_f64();
        Ok(DiskRates {
            bytes,
            write_bps: bytes as f64 / write_s.max(1e-9),
            read_bps: bytes as f64 / read_s.max(1e-9),
            write_s,
            read_s,
            memory_backed: crate::sys::memory_backed(dir),
        })
    })();
    let _ = std::fs::remove_file(&path);
    result
}
