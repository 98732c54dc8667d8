//! `linerate copy` against a real `linerate serve --files` over loopback: every file that
//! arrives is compared byte for byte with its source (not only by the tool's own hash);
//! resume after kill -9 of either end; hostile names, keys and datagrams; a full disk.
//! The long, lossy path cases are in lab.rs (they need the lab and take turns).

mod common;
use common::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A scratch directory for one test: a key, a source tree and the served directory.
struct Scratch {
    root: PathBuf,
}

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let root = std::env::temp_dir().join(format!("linerate-copy-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join("served")).unwrap();
        std::fs::write(root.join("key"), "a copy test's shared key, 32 bytes\n").unwrap();
        Scratch { root }
    }

    fn path(&self, rest: &str) -> PathBuf {
        self.root.join(rest)
    }

    fn key(&self) -> String {
        self.path("key").display().to_string()
    }

    fn served(&self) -> String {
        self.path("served").display().to_string()
    }

    /// A file of `len` pseudo-random bytes (seeded: every run the same).
    fn file(&self, rest: &str, len: usize, seed: u64) -> PathBuf {
        let path = self.path(rest);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut state = seed | 1;
        let mut bytes = vec![0u8; len];
        for chunk in bytes.chunks_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
        }
        std::fs::write(&path, &bytes).unwrap();
        path
    }

    fn serve(&self) -> ServeProcess {
        ServeProcess::start(&["--files", &self.served(), "--key", &self.key()])
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// A small tmpfs mounted over a directory, unmounted when dropped (root only).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        let options = format!("size={size}");
        run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &options,
                "tmpfs",
                dir.to_str().unwrap(),
            ],
        );
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn same_bytes(a: &Path, b: &Path) {
    let (x, y) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    assert_eq!(
        x.len(),
        y.len(),
        "{} and {} differ in length",
        a.display(),
        b.display()
    );
    assert!(x == y, "{} and {} differ", a.display(), b.display());
}

fn copy(server: &ServeProcess, key: &str, args: &[&str]) -> std::process::Output {
    let port = server.port.to_string();
    let mut all = vec!["copy", "-p", &port, "--key", key];
    all.extend_from_slice(args);
    linerate(&all)
}

fn remote(rest: &str) -> String {
    format!("127.0.0.1:{rest}")
}

#[test]
fn a_file_pushed_and_pulled_arrives_byte_for_byte_and_is_kept_as_a_run() {
    let s = Scratch::new("file");
    let server = s.serve();
    // Not a multiple of the chunk or the block: the short last block and chunk count.
    let source = s.file("src/data.bin", 5 * 1024 * 1024 + 12_345, 7);
    // As scp: a directory that is not there is an error, and --mkdir makes it.
    let refused = copy(
        &server,
        &s.key(),
        &[source.to_str().unwrap(), &remote("in/"), "-q"],
    );
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("no directory 'in' on the server (--mkdir creates it)"),
        "{}",
        stderr(&refused)
    );
    assert!(!s.path("served/in").exists());
    let out = copy(
        &server,
        &s.key(),
        &[
            source.to_str().unwrap(),
            &remote("in/"),
            "--json",
            "-q",
            "--mkdir",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    same_bytes(&source, &s.path("served/in/data.bin"));
    let doc = json(&out);
    assert_eq!(doc["test"], "copy");
    assert_eq!(doc["copy"]["direction"], "push");
    assert_eq!(num(&doc, "/copy/bytes") as u64, 5 * 1024 * 1024 + 12_345);
    assert!(num(&doc, "/summary/receiver_bps") > 0.0);
    assert_eq!(doc["copy"]["root"].as_str().map(str::len), Some(64));
    // No .part or journal is left behind.
    let left: Vec<_> = std::fs::read_dir(s.path("served/in")).unwrap().collect();
    assert_eq!(left.len(), 1);

    // Pull it back under another name, into a directory that does not exist yet: refused
    // without --mkdir, made with it.
    let back = s.path("back/copy.bin");
    let refused = copy(
        &server,
        &s.key(),
        &[&remote("in/data.bin"), back.to_str().unwrap(), "-q"],
    );
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("(--mkdir creates it)"),
        "{}",
        stderr(&refused)
    );
    let out = copy(
        &server,
        &s.key(),
        &[
            &remote("in/data.bin"),
            back.to_str().unwrap(),
            "-q",
            "--mkdir",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    same_bytes(&source, &back);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Diagnosis: limited by"), "{text}");

    // The runs are in the results database and history lists them as copies.
    let out = linerate(&["history", "--test", "copy", "--json", "--limit", "0"]);
    let runs = json(&out);
    let runs = runs.as_array().expect("a JSON array");
    assert!(!runs.is_empty(), "{runs:?}");
    assert!(runs.iter().all(|r| r["test"] == "copy"), "{runs:?}");
}

#[test]
fn encrypted_copies_arrive_byte_for_byte_both_ways() {
    let s = Scratch::new("sealed");
    let server = s.serve();
    let source = s.file("src/secret.bin", 3 * 1024 * 1024 + 77, 21);
    let out = copy(
        &server,
        &s.key(),
        &[
            source.to_str().unwrap(),
            &remote("secret.bin"),
            "--encrypt",
            "--json",
            "-q",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    same_bytes(&source, &s.path("served/secret.bin"));
    let doc = json(&out);
    assert_eq!(doc["copy"]["encrypted"], true);
    // Each payload carries a 16-byte tag: the plaintext block is 16 bytes smaller.
    let plain = copy(
        &server,
        &s.key(),
        &[
            source.to_str().unwrap(),
            &remote("plain.bin"),
            "--json",
            "-q",
        ],
    );
    assert_eq!(
        num(&json(&plain), "/copy/block") - num(&doc, "/copy/block"),
        16.0
    );
    let back = s.path("back.bin");
    let out = copy(
        &server,
        &s.key(),
        &[
            &remote("secret.bin"),
            back.to_str().unwrap(),
            "--encrypt",
            "-q",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    same_bytes(&source, &back);
}

/// `--lanes`: a push and a pull over four UDP flows each, plain and sealed, arrive byte
/// for byte, and the result says over how many lanes; the server opened a socket and a
/// receiving thread a lane (its UDP ports seen in the kernel's table and its threads'
/// names during a slow push).
#[test]
fn copies_over_lanes_arrive_byte_for_byte_both_ways() {
    let s = Scratch::new("lanes");
    // The server receives a push on a thread a lane, the client a pull in one loop over
    // every lane, whatever the machine's CPUs (`receive_lanes::receive_threads`).
    let server = ServeProcess::start_env(
        &["--files", &s.served(), "--key", &s.key()],
        &[("LINERATE_COPY_RECEIVE_THREADS", "1")],
    );
    let source = s.file("src/lanes.bin", 6 * 1024 * 1024 + 1_001, 33);
    let key = s.key();
    for (name, extra) in [("plain", None), ("sealed", Some("--encrypt"))] {
        let pushed = format!("{name}.bin");
        let remote_pushed = remote(&pushed);
        let mut args = vec![source.to_str().unwrap(), remote_pushed.as_str()];
        args.extend(["--lanes", "4", "--json", "-q"]);
        args.extend(extra);
        let out = copy(&server, &s.key(), &args);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", stderr(&out));
        same_bytes(&source, &s.path(&format!("served/{pushed}")));
        assert_eq!(num(&json(&out), "/copy/lanes"), 4.0, "{name}");
        let back = s.path(&format!("back-{name}.bin"));
        let mut args = vec![remote_pushed.as_str(), back.to_str().unwrap()];
        args.extend(["--lanes", "3", "--json", "-q"]);
        args.extend(extra);
        let port = server.port.to_string();
        let mut all = vec!["copy", "-p", &port, "--key", &key];
        all.extend_from_slice(&args);
        let out = command()
            .env("LINERATE_COPY_RECEIVE_THREADS", "0")
            .args(&all)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{name}: {}", stderr(&out));
        same_bytes(&source, &back);
        assert_eq!(num(&json(&out), "/copy/lanes"), 3.0, "{name}");
    }
    // One lane is the default, and the result then says nothing of lanes.
    let out = copy(
        &server,
        &s.key(),
        &[source.to_str().unwrap(), &remote("one.bin"), "--json", "-q"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(json(&out)["copy"].get("lanes").is_none());
    // A slow push over 5 lanes: the server holds the session's socket and 4 more.
    let before = udp_ports_of(server.pid()).len();
    let mut slow = std::process::Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args([
            "--no-store",
            "copy",
            "-p",
            &server.port.to_string(),
            "--key",
            &s.key(),
        ])
        .args([
            source.to_str().unwrap(),
            &remote("slow.bin"),
            "--lanes",
            "5",
        ])
        .args(["--rate", "2M", "-q"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (mut during, mut receiving) = (before, 0);
    while std::time::Instant::now() < deadline && (during < before + 5 || receiving < 5) {
        std::thread::sleep(std::time::Duration::from_millis(100));
        during = udp_ports_of(server.pid()).len();
        receiving = threads_named(server.pid(), "copy-recv-");
    }
    let _ = slow.kill();
    let _ = slow.wait();
    assert_eq!(
        during,
        before + 5,
        "the server's UDP sockets during a 5-lane push"
    );
    // And a receiving thread a lane.
    assert_eq!(
        receiving, 5,
        "the server's receiving threads during a 5-lane push"
    );
}

/// How many of `pid`'s threads have a name beginning with `prefix`.
fn threads_named(pid: u32, prefix: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .flatten()
                .filter(|task| {
                    std::fs::read_to_string(task.path().join("comm"))
                        .is_ok_and(|name| name.starts_with(prefix))
                })
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn a_tree_is_copied_with_r_and_refused_without_it() {
    let s = Scratch::new("tree");
    let server = s.serve();
    let a = s.file("src/tree/a.bin", 300_000, 1);
    let b = s.file("src/tree/sub/b.bin", 2_000_000, 2);
    let empty = s.file("src/tree/sub/deeper/empty", 0, 3);
    let tree = s.path("src/tree");
    let out = copy(
        &server,
        &s.key(),
        &[tree.to_str().unwrap(), &remote(""), "-q"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("-r"), "{}", stderr(&out));
    let out = copy(
        &server,
        &s.key(),
        &["-r", tree.to_str().unwrap(), &remote(""), "-q"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    same_bytes(&a, &s.path("served/tree/a.bin"));
    same_bytes(&b, &s.path("served/tree/sub/b.bin"));
    same_bytes(&empty, &s.path("served/tree/sub/deeper/empty"));
    // And the whole tree back.
    let back = s.path("back");
    std::fs::create_dir_all(&back).unwrap();
    let out = copy(
        &server,
        &s.key(),
        &["-r", &remote("tree"), back.to_str().unwrap(), "-q"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    same_bytes(&b, &s.path("back/tree/sub/b.bin"));
    same_bytes(&empty, &s.path("back/tree/sub/deeper/empty"));
}

/// Starts a push at a fixed rate in the background.
fn slow_push(server: &ServeProcess, s: &Scratch, source: &Path, dest: &str) -> std::process::Child {
    command()
        .args([
            "copy",
            "-p",
            &server.port.to_string(),
            "--key",
            &s.key(),
            "-q",
            "--rate",
            "100M",
        ])
        .arg(source)
        .arg(remote(dest))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Lines in a journal (its header included), 0 when there is none.
fn journal_lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

fn wait_for_journal(path: &Path, lines: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while journal_lines(path) < lines {
        assert!(
            Instant::now() < deadline,
            "the journal never reached {lines} lines"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn kill_9_of_the_client_then_of_the_server_and_the_copy_resumes() {
    let s = Scratch::new("resume");
    let mut server = s.serve();
    let source = s.file("src/big.bin", 48 * 1024 * 1024, 11);
    let journal = s.path("served/big.bin.part.journal");
    // The client dies once 8 chunks are durable.
    let mut client = slow_push(&server, &s, &source, "big.bin");
    wait_for_journal(&journal, 9);
    client.kill().unwrap();
    client.wait().unwrap();
    let durable = journal_lines(&journal) - 1;
    // The server sees the control connection close and lets the file go at once.
    assert!(
        server.wait_log("failed", Duration::from_secs(10)),
        "{}",
        server.log()
    );
    // Run again, slowly, and kill the server this time.
    let mut client = slow_push(&server, &s, &source, "big.bin");
    wait_for_journal(&journal, durable + 1 + 8);
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let _ = client.wait();
    let durable = journal_lines(&journal) - 1;
    assert!(durable >= 16);
    // A new server; the third run finishes, sending only what was not durable.
    let server = s.serve();
    let out = copy(
        &server,
        &s.key(),
        &[source.to_str().unwrap(), &remote("big.bin"), "--json", "-q"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    same_bytes(&source, &s.path("served/big.bin"));
    let doc = json(&out);
    let resumed = num(&doc, "/copy/resumed_bytes") as u64;
    assert_eq!(
        resumed,
        durable as u64 * 1024 * 1024,
        "every durable chunk resumed"
    );
    // Exactly the rest went for the first time (a probe timeout may resend some of it).
    let first_time =
        num(&doc, "/copy/payload_bytes") as u64 - num(&doc, "/copy/resent_bytes") as u64;
    assert_eq!(first_time, 48 * 1024 * 1024 - resumed);
    assert!(!s.path("served/big.bin.part").exists());
    assert!(!journal.exists());
}

/// The chunks a journal records, in the order it records them.
fn journaled_chunks(path: &Path) -> Vec<u64> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .skip(1)
        .filter_map(|line| line.split(' ').next()?.parse().ok())
        .collect()
}

/// How a `.part` was damaged between two runs of the same copy.
#[derive(Debug, Clone, Copy)]
enum Damage {
    /// 8 bytes of a journaled chunk changed (another writer, a disk error).
    Tampered,
    /// The file cut short inside the journaled chunks.
    Truncated,
    /// A hole punched inside a journaled chunk: it reads as zeros.
    Hole,
    /// The journal records a chunk (with the source's true hash) whose bytes never
    /// reached the disk: a power loss after the journal's sync and before the data's.
    JournalAhead,
}

#[test]
fn a_resumed_copy_reads_its_part_back_and_fetches_again_what_does_not_match() {
    const MIB: u64 = 1024 * 1024;
    for damage in [
        Damage::Tampered,
        Damage::Truncated,
        Damage::Hole,
        Damage::JournalAhead,
    ] {
        let s = Scratch::new(&format!("readback-{damage:?}"));
        let server = s.serve();
        let source = s.file("src/f.bin", 48 * MIB as usize, 17);
        let part = s.path("served/f.bin.part");
        let journal = s.path("served/f.bin.part.journal");
        let mut client = slow_push(&server, &s, &source, "f.bin");
        wait_for_journal(&journal, 9);
        client.kill().unwrap();
        client.wait().unwrap();
        assert!(
            server.wait_log("failed", Duration::from_secs(10)),
            "{}",
            server.log()
        );
        let mut journaled = journaled_chunks(&journal);
        journaled.sort_unstable();
        journaled.dedup();
        assert!(
            journaled.len() >= 8 && !journaled.contains(&47),
            "{journaled:?}"
        );
        let file = std::fs::OpenOptions::new().write(true).open(&part).unwrap();
        use std::os::unix::fs::FileExt;
        let damaged: u64 = match damage {
            Damage::Tampered => {
                // Byte 4,097 of the file, inside chunk 0.
                assert!(journaled.contains(&0), "{journaled:?}");
                file.write_all_at(b"tampered", 4097).unwrap();
                1
            }
            Damage::Truncated => {
                let cut_chunk = journaled[journaled.len() / 2];
                file.set_len(cut_chunk * MIB + 1000).unwrap();
                journaled.iter().filter(|&&c| c >= cut_chunk).count() as u64
            }
            Damage::Hole => {
                let chunk = journaled[journaled.len() / 2];
                // SAFETY: fallocate on a live descriptor with plain integer arguments.
                let punched = unsafe {
                    libc::fallocate(
                        std::os::fd::AsRawFd::as_raw_fd(&file),
                        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                        (chunk * MIB + 65536) as libc::off_t,
                        4096,
                    )
                };
                assert_eq!(punched, 0, "{}", std::io::Error::last_os_error());
                1
            }
            Damage::JournalAhead => {
                let chunk = 40;
                assert!(!journaled.contains(&chunk));
                let source_bytes = std::fs::read(&source).unwrap();
                let start = (chunk * MIB) as usize;
                let hash = blake3::hash(&source_bytes[start..start + MIB as usize]);
                file.write_all_at(&vec![0u8; MIB as usize], chunk * MIB)
                    .unwrap();
                let mut lines = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&journal)
                    .unwrap();
                writeln!(lines, "{chunk} {}", hash.to_hex()).unwrap();
                journaled.push(chunk);
                1
            }
        };
        drop(file);
        let out = copy(
            &server,
            &s.key(),
            &[source.to_str().unwrap(), &remote("f.bin"), "--json", "-q"],
        );
        assert_eq!(out.status.code(), Some(0), "{damage:?}: {}", stderr(&out));
        same_bytes(&source, &s.path("served/f.bin"));
        let doc = json(&out);
        assert_eq!(
            num(&doc, "/copy/resume_checked_chunks") as usize,
            journaled.len(),
            "{damage:?}: every journaled chunk read back"
        );
        assert_eq!(
            num(&doc, "/copy/resume_damaged_chunks") as u64,
            damaged,
            "{damage:?}: the damaged chunks counted"
        );
        assert_eq!(
            num(&doc, "/copy/resumed_bytes") as u64,
            (journaled.len() as u64 - damaged) * MIB,
            "{damage:?}: only the chunks that read back as recorded were kept"
        );
        // The damaged chunks went again: the bytes sent for the first time are the
        // rest of the file, the damaged chunks included.
        let first_time =
            num(&doc, "/copy/payload_bytes") as u64 - num(&doc, "/copy/resent_bytes") as u64;
        assert_eq!(
            first_time,
            48 * MIB - num(&doc, "/copy/resumed_bytes") as u64,
            "{damage:?}"
        );
        assert!(
            server.log().contains("did not read back as recorded"),
            "{damage:?}: {}",
            server.log()
        );
        // The text report says it too.
        assert!(!journal.exists());
    }
}

#[test]
fn a_pull_killed_midway_resumes_from_the_local_journal() {
    let s = Scratch::new("pullresume");
    let server = s.serve();
    let source = s.file("served/big.bin", 40 * 1024 * 1024, 5);
    let local = s.path("got/big.bin");
    std::fs::create_dir_all(local.parent().unwrap()).unwrap();
    let journal = s.path("got/big.bin.part.journal");
    let mut client = command()
        .args([
            "copy",
            "-p",
            &server.port.to_string(),
            "--key",
            &s.key(),
            "-q",
            "--rate",
            "100M",
        ])
        .arg(remote("big.bin"))
        .arg(&local)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_journal(&journal, 6);
    client.kill().unwrap();
    client.wait().unwrap();
    // Cut the journal's last line short, as a crash while appending would.
    let text = std::fs::read_to_string(&journal).unwrap();
    let cut = text.len() - 20;
    std::fs::write(&journal, &text[..cut]).unwrap();
    let whole_lines = text[..cut].matches('\n').count() - 1;
    let out = copy(
        &server,
        &s.key(),
        &[&remote("big.bin"), local.to_str().unwrap(), "--json", "-q"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("cut short"), "{}", stderr(&out));
    same_bytes(&source, &local);
    assert_eq!(
        num(&json(&out), "/copy/resumed_bytes") as u64,
        whole_lines as u64 * 1024 * 1024
    );
}

#[test]
fn hostile_names_are_refused_nothing_is_written_outside_and_the_server_serves_on() {
    let s = Scratch::new("hostile");
    let server = s.serve();
    let source = s.file("src/x.bin", 100_000, 3);
    let outside = s.path("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let secret = s.file("outside/secret", 1000, 4);
    std::os::unix::fs::symlink(&outside, s.path("served/link")).unwrap();
    std::os::unix::fs::symlink(&secret, s.path("served/secret-link")).unwrap();
    let absolute_outside = outside.join("x.bin").display().to_string();
    for (dest, says) in [
        ("../x.bin", "'..'"),
        ("a/../../x.bin", "'..'"),
        (absolute_outside.as_str(), "outside"),
        ("link/x.bin", "symbolic link"),
        ("secret-link", "not a regular file"),
    ] {
        let out = copy(
            &server,
            &s.key(),
            &[source.to_str().unwrap(), &remote(dest), "-q"],
        );
        assert_eq!(out.status.code(), Some(1), "{dest}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{dest}: {}", stderr(&out));
        assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", stderr(&out));
    }
    for (from, says) in [
        ("link/secret", "symbolic link"),
        ("secret-link", "symbolic link"),
        ("../outside/secret", "'..'"),
    ] {
        let out = copy(
            &server,
            &s.key(),
            &[&remote(from), s.path("stolen").to_str().unwrap(), "-q"],
        );
        assert_eq!(out.status.code(), Some(1), "{from}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{from}: {}", stderr(&out));
        assert!(!s.path("stolen").exists());
    }
    // Nothing reached the outside directory, and the secret is untouched.
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
    assert_eq!(std::fs::read(&secret).unwrap().len(), 1000);
    assert!(server.log().contains("refused"), "{}", server.log());
    // A wrong key: refused, told as a key problem.
    std::fs::write(s.path("other.key"), "not the server's key at all, 32b\n").unwrap();
    let other = s.path("other.key").display().to_string();
    let out = copy(
        &server,
        &other,
        &[source.to_str().unwrap(), &remote("y.bin"), "-q"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("key"), "{}", stderr(&out));
    assert!(!s.path("served/y.bin").exists());
    // The server still serves.
    let out = copy(
        &server,
        &s.key(),
        &[source.to_str().unwrap(), &remote("ok.bin"), "-q"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    same_bytes(&source, &s.path("served/ok.bin"));
}

#[test]
fn user_mistakes_are_one_line_and_exit_2() {
    let s = Scratch::new("usage");
    let source = s.file("src/x.bin", 10, 1);
    let (source_name, key) = (source.to_str().unwrap(), s.key());
    let copy_with = |flag: &'static str, value: &'static str| {
        vec![
            "copy",
            source_name,
            "h:b",
            "--key",
            key.as_str(),
            flag,
            value,
        ]
    };
    for (args, names) in [
        (
            vec!["copy", "a", "b", "--key", &s.key()],
            "one of SOURCE and DESTINATION must be HOST:PATH",
        ),
        (
            vec!["copy", "h:a", "h:b", "--key", &s.key()],
            "must be a local path",
        ),
        (
            vec!["copy", "/nonexistent/x", "h:b", "--key", &s.key()],
            "'/nonexistent/x'",
        ),
        (vec!["copy", source.to_str().unwrap(), "h:b"], "--key"),
        (copy_with("--chunk", "3M"), "'3M'"),
        (copy_with("--lanes", "17"), "'17'"),
        (vec!["serve", "--files", &s.served()], "--key"),
        (vec!["disk", "/nonexistent"], "'/nonexistent'"),
    ] {
        let out = linerate(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(names), "{args:?}: {}", stderr(&out));
        assert_eq!(
            stderr(&out).trim().lines().count(),
            1,
            "{args:?}: {}",
            stderr(&out)
        );
    }
    // A server without --files answers a copy with why.
    let plain = ServeProcess::start(&["--key", &s.key()]);
    let out = copy(
        &plain,
        &s.key(),
        &[source.to_str().unwrap(), &remote("x"), "-q"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("serves no files"), "{}", stderr(&out));
}

/// The server's UDP ports (its copy sessions' sockets), from the kernel's table.
fn udp_ports_of(pid: u32) -> Vec<u16> {
    let mut inodes = Vec::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        if let Ok(target) = std::fs::read_link(fd.path()) {
            if let Some(inode) = target.to_str().and_then(|t| t.strip_prefix("socket:[")) {
                inodes.push(inode.trim_end_matches(']').to_string());
            }
        }
    }
    let mut ports = Vec::new();
    for table in ["/proc/net/udp", "/proc/net/udp6"] {
        for line in std::fs::read_to_string(table)
            .unwrap_or_default()
            .lines()
            .skip(1)
        {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() > 9 && inodes.iter().any(|i| i == fields[9]) {
                let port = fields[1].rsplit(':').next().unwrap();
                ports.push(u16::from_str_radix(port, 16).unwrap());
            }
        }
    }
    ports
}

#[test]
fn datagrams_from_another_address_or_forged_change_nothing() {
    let s = Scratch::new("forged");
    let server = s.serve();
    let source = s.file("src/f.bin", 24 * 1024 * 1024, 9);
    let mut client = slow_push(&server, &s, &source, "f.bin");
    let deadline = Instant::now() + Duration::from_secs(10);
    let ports = loop {
        let ports = udp_ports_of(server.pid());
        if !ports.is_empty() {
            break ports;
        }
        assert!(Instant::now() < deadline, "no copy session socket");
        std::thread::sleep(Duration::from_millis(20));
    };
    // From another socket (another source port): well-formed data headers claiming
    // offsets in the file, ACK-typed datagrams, hellos and garbage.
    let attacker = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut sent = 0;
    for i in 0u64..3000 {
        let mut datagram = vec![0u8; 1472];
        datagram[0] = (i % 4) as u8;
        datagram[2..4].copy_from_slice(&1440u16.to_be_bytes());
        datagram[16..24].copy_from_slice(&i.to_be_bytes());
        datagram[24..32].copy_from_slice(&((i % 24) * 1_048_576).to_be_bytes());
        for port in &ports {
            if attacker.send_to(&datagram, ("127.0.0.1", *port)).is_ok() {
                sent += 1;
            }
        }
    }
    assert!(sent > 0);
    let status = client.wait().unwrap();
    assert!(status.success());
    same_bytes(&source, &s.path("served/f.bin"));
}

#[test]
fn a_full_disk_stops_the_copy_with_a_clear_message_and_the_server_serves_on() {
    if !is_root() {
        skip(
            "a_full_disk_stops_the_copy",
            "needs root to mount a small tmpfs",
        );
        return;
    }
    let s = Scratch::new("full");
    let small = s.path("served");
    let _unmount = Tmpfs::mount(&small, "8m");
    let server = s.serve();
    let big = s.file("src/big.bin", 20 * 1024 * 1024, 1);
    let out = copy(
        &server,
        &s.key(),
        &[big.to_str().unwrap(), &remote("big.bin"), "-q"],
    );
    // Refused before anything is written: the space is checked against the offer, and no
    // empty part file is left "to resume".
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("no room for big.bin: it is 20971520 bytes") && err.contains("bytes free"),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(&small).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    // An offer of a terabyte (a sparse file: nothing is read before the answer) is refused
    // the same way, at once, and the server lives on; its bookkeeping for a file that size
    // once took more memory than the machine has.
    let huge = s.path("src/huge.bin");
    let sparse = std::fs::File::create(&huge).and_then(|f| f.set_len(1 << 40));
    if sparse.is_ok() {
        let out = copy(
            &server,
            &s.key(),
            &[huge.to_str().unwrap(), &remote("huge.bin"), "-q"],
        );
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("no room for huge.bin"),
            "{}",
            stderr(&out)
        );
        assert_eq!(std::fs::read_dir(&small).unwrap().count(), 0);
    }
    // The server serves the next copy, which fits.
    let fits = s.file("src/fits.bin", 1024 * 1024, 2);
    let out = copy(
        &server,
        &s.key(),
        &[fits.to_str().unwrap(), &remote("fits.bin"), "-q"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    same_bytes(&fits, &small.join("fits.bin"));
    let _ = std::io::stderr().flush();
}

#[test]
fn disk_measures_a_directory() {
    let s = Scratch::new("disk");
    let out = linerate(&["disk", s.root.to_str().unwrap(), "--size", "32M", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = json(&out);
    assert_eq!(num(&doc, "/bytes") as u64, 32 * 1024 * 1024);
    assert!(num(&doc, "/write_bps") > 0.0 && num(&doc, "/read_bps") > 0.0);
    // Its scratch file is gone.
    assert_eq!(std::fs::read_dir(&s.root).unwrap().count(), 3);
}

#[test]
fn an_interrupted_copy_says_what_it_kept_and_resumes_with_the_same_command() {
    let s = Scratch::new("interrupt");
    let server = s.serve();
    let source = s.file("src/slow.bin", 24 * 1024 * 1024, 3);
    std::fs::create_dir_all(s.path("served/in")).unwrap();
    let port = server.port.to_string();
    let key = s.key();
    let dest = remote("in/");
    // 40 Mbit/s: the 24 MiB take about 5 s, and SIGINT comes after 1.5.
    let args = [
        "copy",
        "-p",
        &port,
        "--key",
        &key,
        source.to_str().unwrap(),
        &dest,
        "--rate",
        "40M",
    ];
    let child = Command::new(binary())
        .envs(scratch_env())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("linerate copy");
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: signalling the child this test started, by its PID.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("kept on the server as in/slow.bin.part")
            && err.contains("run the same command to resume: "),
        "{err}"
    );
    assert!(s.path("served/in/slow.bin.part").exists());
    // The same command, run again, finishes the file.
    let again = linerate(&args);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    same_bytes(&source, &s.path("served/in/slow.bin"));
    assert!(!s.path("served/in/slow.bin.part").exists());
}

#[test]
fn disk_names_a_memory_file_system_and_a_size_that_does_not_fit() {
    let shm = std::path::Path::new("/dev/shm");
    if !shm.is_dir() {
        skip(
            "disk_names_a_memory_file_system_and_a_size_that_does_not_fit",
            "no /dev/shm",
        );
        return;
    }
    let out = linerate(&["disk", "/dev/shm", "--size", "4M", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(json(&out)["memory_backed"], true);
    let out = linerate(&["disk", "/dev/shm", "--size", "4M"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("from memory"));
    let out = linerate(&["disk", "/dev/shm", "--size", "100T"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("a smaller --size fits"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn two_pushes_into_room_for_one_let_one_through_and_leave_nothing_of_the_other() {
    if !is_root() {
        skip(
            "two_pushes_into_room_for_one",
            "needs root to mount a small tmpfs",
        );
        return;
    }
    let s = Scratch::new("two");
    let small = s.path("served");
    let _unmount = Tmpfs::mount(&small, "50m");
    let server = s.serve();
    let a = s.file("src/a.bin", 30 * 1024 * 1024, 1);
    let b = s.file("src/b.bin", 30 * 1024 * 1024, 2);
    let port = server.port.to_string();
    let key = s.key();
    let push = |source: &Path, name: &str| {
        Command::new(binary())
            .envs(scratch_env())
            .args(["copy", "-p", &port, "--key", &key, "-q"])
            .args([source.to_str().unwrap(), &remote(name)])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("linerate copy")
    };
    let (first, second) = (push(&a, "a.bin"), push(&b, "b.bin"));
    let outs = [
        first.wait_with_output().unwrap(),
        second.wait_with_output().unwrap(),
    ];
    let done: Vec<bool> = outs.iter().map(|o| o.status.success()).collect();
    assert_eq!(
        done.iter().filter(|d| **d).count(),
        1,
        "{:?}",
        outs.iter().map(stderr).collect::<Vec<_>>()
    );
    let failed = outs.iter().find(|o| !o.status.success()).unwrap();
    let err = stderr(failed);
    assert!(
        err.contains("no room") || err.contains("cannot reserve"),
        "{err}"
    );
    // What arrived is whole; the refused one left no part file behind.
    let names: Vec<String> = std::fs::read_dir(&small)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    let (name, source) = if done[0] {
        ("a.bin", &a)
    } else {
        ("b.bin", &b)
    };
    same_bytes(source, &small.join(name));
}

/// `-B` makes a copy leave from the address named: one with another key is refused, and
/// the server's log names the address it came from; one with the right key arrives byte
/// for byte (its datagrams take the control connection's address).
#[test]
fn a_copy_leaves_from_the_address_bound() {
    let s = Scratch::new("bind");
    let server = s.serve();
    let source = s.file("src/bound.bin", 1024 * 1024 + 5, 3);
    let out = copy(
        &server,
        &s.key(),
        &[
            source.to_str().unwrap(),
            &remote("bound.bin"),
            "-B",
            "127.0.0.3",
            "-q",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    same_bytes(&source, &s.path("served/bound.bin"));
    let other = s.path("other-key");
    std::fs::write(&other, "another key, not the server's one\n").unwrap();
    let refused = copy(
        &server,
        other.to_str().unwrap(),
        &[
            source.to_str().unwrap(),
            &remote("refused.bin"),
            "-B",
            "127.0.0.3",
            "-q",
        ],
    );
    assert_ne!(refused.status.code(), Some(0));
    assert!(
        server.wait_log("from 127.0.0.3:", Duration::from_secs(10)),
        "{}",
        server.log()
    );
}

/// One lockout for every service: ten wrong-key copies lock the client out of `stream`
/// with the right key, and ten wrong-key streams lock it out of `copy`. An abandoned
/// handshake (the key confirmation taken, no proof sent) counts as a failed guess too.
#[test]
fn guessing_the_key_over_copy_or_stream_locks_the_client_out_of_both() {
    for guess_with in ["copy", "stream"] {
        let s = Scratch::new(&format!("lockout-{guess_with}"));
        let server = s.serve();
        let port = server.port.to_string();
        let source = s.file("src/small.bin", 10_000, 2);
        for i in 0..10 {
            let wrong = s.path(&format!("wrong{i}"));
            std::fs::write(&wrong, format!("wrong key number {i} of many, 32b")).unwrap();
            let wrong = wrong.display().to_string();
            let out = if guess_with == "copy" {
                copy(
                    &server,
                    &wrong,
                    &[source.to_str().unwrap(), &remote("small.bin"), "-q"],
                )
            } else {
                linerate(&[
                    "stream",
                    "127.0.0.1",
                    "-p",
                    &port,
                    "-t",
                    "0.2",
                    "--key",
                    &wrong,
                ])
            };
            assert_ne!(out.status.code(), Some(0), "{guess_with} guess {i}");
        }
        let right_copy = copy(
            &server,
            &s.key(),
            &[source.to_str().unwrap(), &remote("small.bin"), "-q"],
        );
        assert_eq!(right_copy.status.code(), Some(1), "{}", stderr(&right_copy));
        assert!(
            stderr(&right_copy).contains("failed proofs"),
            "{}",
            stderr(&right_copy)
        );
        let right_stream = linerate(&[
            "stream",
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "0.2",
            "--key",
            &s.key(),
        ]);
        assert_ne!(
            right_stream.status.code(),
            Some(0),
            "{}",
            stderr(&right_stream)
        );
        assert!(!s.path("served/small.bin").exists());
    }
}

/// A hello of a copy session (nonce, SPAKE2 message) under a key of the flooder's own:
/// made once (the test binary's curve arithmetic is unoptimised) and sent many times.
fn flooders_hello() -> (String, String) {
    let key = linerate_proto::auth::Key::from_file_contents(b"any key at all, the flooder's own")
        .unwrap();
    let auth = linerate_proto::auth::ClientAuth::new(&key, &linerate_proto::auth::Nonce([5; 32]));
    (auth.nonce_hex(), auth.pake_hex())
}

/// A copy session's hello, the key confirmation awaited and never answered: what a
/// keyless client can make a server hold.
fn stalled_copy_handshake(
    port: u16,
    from: &str,
    hello: &(String, String),
) -> Option<linerate_transfer::channel::Channel> {
    use linerate_transfer::control::{Control, COPY_VERSION};
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    socket
        .bind(
            &format!("{from}:0")
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .ok()?;
    socket
        .connect(
            &format!("127.0.0.1:{port}")
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .ok()?;
    let channel = linerate_transfer::channel::Channel::new(socket.into(), &[]).ok()?;
    let mut preface = linerate_proto::preface::COPY_MAGIC.to_vec();
    preface.extend_from_slice(&COPY_VERSION.to_be_bytes());
    channel.send_raw(&preface).ok()?;
    channel
        .send(&Control::Hello {
            nonce: hello.0.clone(),
            pake: hello.1.clone(),
        })
        .ok()?;
    Some(channel)
}

/// A keyless flood of copy handshakes (a hello each, then silence) from one address
/// holds at most a few of the server's threads: a copy from another address beside it
/// completes within twice the time of the same copy without it, the flood's refusals
/// are logged in a few lines, not one each.
#[test]
fn a_keyless_handshake_flood_leaves_room_for_a_real_copy() {
    let s = Scratch::new("hsflood");
    let server = s.serve();
    let source = s.file("src/f.bin", 8 << 20, 9);
    let timed_copy = |dest: &str| {
        let started = Instant::now();
        let out = copy(
            &server,
            &s.key(),
            &[source.to_str().unwrap(), &remote(dest), "-q"],
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        same_bytes(&source, &s.path(&format!("served/{dest}")));
        started.elapsed()
    };
    let alone = timed_copy("alone.bin");
    // 2,000 handshakes from 127.0.0.2, held open for the copy's time.
    let hello = flooders_hello();
    let opening = Instant::now();
    let held: Vec<_> = (0..2000)
        .filter_map(|_| stalled_copy_handshake(server.port, "127.0.0.2", &hello))
        .collect();
    eprintln!(
        "{} handshakes opened in {:?}",
        held.len(),
        opening.elapsed()
    );
    assert!(held.len() > 1000, "{} handshakes opened", held.len());
    let beside = timed_copy("beside.bin");
    assert!(
        beside <= alone * 2 + Duration::from_millis(200),
        "{beside:?} beside the flood, {alone:?} alone"
    );
    drop(held);
    let log = server.log();
    assert!(
        log.contains("copy handshakes under way at the client's limit"),
        "{log}"
    );
    // Told once per reason every ten seconds, with the count.
    let refusal_lines = log.lines().filter(|l| l.contains("127.0.0.2")).count();
    assert!(refusal_lines <= 6, "{refusal_lines} lines:\n{log}");
}

/// A client that takes a pull's offer with a window of 0 and never acknowledges a
/// datagram is dropped by the server within its 60 s of silence, counted from the start
/// of sending (it once held the session until the client gave up).
#[test]
fn a_silent_pull_is_dropped_after_the_ack_deadline() {
    use linerate_transfer::control::{Control, COPY_VERSION};
    let s = Scratch::new("silentpull");
    let server = s.serve();
    s.file("served/big.bin", 4 << 20, 3);
    let key =
        linerate_proto::auth::Key::from_file_contents(std::fs::read(s.key()).unwrap().as_slice())
            .unwrap();
    let mut client = linerate_transfer::session::connect(
        format!("127.0.0.1:{}", server.port).parse().unwrap(),
        &key,
        None,
        &linerate_transfer::session::Bind::default(),
        None,
    )
    .expect("a session");
    client
        .channel
        .send(&Control::Pull {
            path: "big.bin".into(),
            rate_bps: Some(10_000_000),
            max_rate_bps: None,
            dscp: None,
            ecn: false,
            encrypt: false,
            cold_start: false,
        })
        .unwrap();
    client.prove_udp().unwrap();
    let offer = client
        .channel
        .receive(Duration::from_secs(10), None)
        .unwrap();
    assert!(matches!(offer, Control::Offer { .. }), "{offer:?}");
    client
        .channel
        .send(&Control::Accept {
            have: Vec::new(),
            window: 0,
        })
        .unwrap();
    let started = Instant::now();
    let _ = COPY_VERSION;
    // The server gives up: a failed message or the connection closed, within 60 s and
    // a margin, never the 300 s a client might wait.
    loop {
        match client.channel.receive(Duration::from_secs(90), None) {
            Ok(Control::Hash { .. }) => continue,
            Ok(Control::Failed { message }) => {
                assert!(message.contains("acknowledgement"), "{message}");
                break;
            }
            Ok(other) => panic!("{other:?}"),
            Err(_) => break,
        }
    }
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(59) && waited < Duration::from_secs(75),
        "{waited:?}"
    );
    assert!(
        server.wait_log("no acknowledgement for 60 s", Duration::from_secs(5)),
        "{}",
        server.log()
    );
}
