//! The binary's flags, errors and exit codes.

mod common;
use common::*;
use std::time::{Duration, Instant};

#[test]
fn bad_flags_and_values_are_one_line_naming_them_with_exit_2() {
    for (args, needle) in [
        (vec!["stream", "-P", "0"], "'0'"),
        (vec!["stream", "-P", "5000"], "'5000'"),
        (vec!["stream", "--length", "12q"], "'12q'"),
        (vec!["stream", "--window", "big"], "'big'"),
        (vec!["stream", "--rate=-5M"], "'-5M'"),
        (vec!["stream", "--time", "0"], "'0'"),
        (vec!["stream", "-t", "-5"], "a duration cannot be negative"),
        (vec!["rr", "-O", "-1"], "a duration cannot be negative"),
        (vec!["stream", "--bogus"], "'--bogus'"),
        (vec!["stream", "-R", "--bidir"], "--bidir"),
        (vec!["serve", "--listen", "nowhere"], "'nowhere'"),
        (vec!["stream", "--udp", "-l", "8"], "'8'"),
        (vec!["stream", "--udp", "-l", "70000"], "'70000'"),
        (vec!["stream", "--udp", "--mss", "1400"], "--mss"),
        (vec!["stream", "--udp", "-C", "bbr"], "--congestion"),
        (vec!["stream", "--pps", "1000"], "--udp"),
        (vec!["stream", "--udp", "--pps", "0"], "'0'"),
        (vec!["stream", "--gso"], "--udp"),
        (vec!["stream", "--find-max"], "--udp"),
        (vec!["stream", "-u", "--find-max", "-b", "1G"], "--rate"),
        (vec!["stream", "-u", "--find-max", "--bidir"], "--bidir"),
        (
            vec!["stream", "-u", "--find-max", "--max-loss", "150"],
            "'150'",
        ),
        (vec!["stream", "-u", "--max-loss", "1"], "--find-max"),
        (vec!["frobnicate"], "'frobnicate'"),
        (vec!["stream", "-u", "--mptcp"], "'--mptcp'"),
        (vec!["crr", "--mptcp"], "'--mptcp'"),
        (
            vec!["trace", "localhost", "-f", "9", "-m", "3"],
            "'--first-hop'",
        ),
        (vec!["trace", "localhost", "--icmp", "-p", "80"], "--port"),
        (vec!["trace", "localhost", "--tcp", "--icmp"], "--icmp"),
        // Video frames: an impossible frame rate, a frame over the budget, a gap over
        // the period, frames over TCP, an iperf 2 value that is not one.
        (
            vec!["stream", "-u", "--isochronous", "5000:20m"],
            "'5000:20m'",
        ),
        (vec!["stream", "-u", "--isochronous", "1:1000g"], "16777216"),
        (vec!["stream", "-u", "--isochronous", "60"], "FPS:MEAN"),
        (vec!["stream", "--isochronous", "60:20m"], "--udp"),
        (vec!["stream", "-u", "--isochronous", "-b", "1m"], "--rate"),
        // Key frames: every frame one, a scale of 1 or less, one over the frame budget,
        // without frames.
        (
            vec!["stream", "-u", "--isochronous", "--key-frames", "1"],
            "outside 2 to",
        ),
        (
            vec!["app", "h", "--pattern", "video", "--key-frames", "30:0.5"],
            "'30:0.5'",
        ),
        (
            vec![
                "stream",
                "127.0.0.1",
                "-u",
                "--isochronous",
                "1:100m",
                "--key-frames",
                "1000:100",
            ],
            "with --key-frames 1000:100, a key frame of",
        ),
        (vec!["stream", "-u", "--key-frames", "60"], "--isochronous"),
        // iperf 2's frames: this way (over UDP or TCP), for a time.
        (
            vec!["iperf2", "-c", "127.0.0.1", "--isochronous=30:4m", "-R"],
            "-R",
        ),
        (
            vec![
                "iperf2",
                "-c",
                "127.0.0.1",
                "-p",
                "1",
                "-u",
                "--isochronous",
                "-n",
                "1M",
            ],
            "--isochronous with -n",
        ),
        (
            vec![
                "app",
                "h",
                "--pattern",
                "video",
                "--isochronous",
                "60:1m,20m",
            ],
            "ten times the mean",
        ),
        (
            vec!["app", "h", "--pattern", "game", "--state", "0:1m"],
            "'0:1m'",
        ),
        (
            vec!["app", "h", "--pattern", "voip", "--jitter-buffer", "1h"],
            "'1h'",
        ),
        (vec!["app", "h", "--pattern", "chess"], "'chess'"),
        (
            vec!["app", "h", "--pattern", "video", "--peer", "irtt"],
            "'--pattern voip'",
        ),
        (
            vec![
                "app",
                "h",
                "--pattern",
                "voip",
                "--peer",
                "irtt",
                "--codec",
                "g729a",
            ],
            "'g729a'",
        ),
        (
            vec!["app", "h/x", "--pattern", "voip", "--peer", "irtt"],
            "'h/x'",
        ),
        (
            vec!["app", "h", "--pattern", "voip", "--peer", "sip"],
            "'sip'",
        ),
        (
            vec!["app", "h", "--pattern", "conference", "--participants", "1"],
            "'1'",
        ),
        (
            vec!["app", "h", "--pattern", "conference", "--peer", "irtt"],
            "'--pattern voip'",
        ),
        (
            vec!["app", "h", "--pattern", "voip", "--isochronous", "30:1m"],
            "'--isochronous' is not an option of '--pattern voip'",
        ),
        (
            vec!["app", "h", "--pattern", "video", "--jitter-buffer", "40ms"],
            "'--jitter-buffer' is not an option of '--pattern video'",
        ),
        (
            vec!["app", "h", "--pattern", "game", "--participants", "3"],
            "'--participants' is not an option of '--pattern game'",
        ),
    ] {
        let out = linerate(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = stderr(&out);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.stdout.is_empty());
    }
}

/// The commands a `--help` lists under "Commands:" (clap's own `help` aside).
fn commands_in(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn every_command_has_examples_in_its_help() {
    let top = linerate(&["--help"]);
    assert_eq!(top.status.code(), Some(0));
    let mut paths: Vec<Vec<String>> = Vec::new();
    for command in commands_in(&String::from_utf8_lossy(&top.stdout)) {
        let help = linerate(&[command.as_str(), "--help"]);
        for sub in commands_in(&String::from_utf8_lossy(&help.stdout)) {
            paths.push(vec![command.clone(), sub]);
        }
        paths.push(vec![command]);
    }
    assert!(paths.len() >= 25, "{paths:?}");
    for path in &paths {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let out = linerate(&args);
        assert_eq!(out.status.code(), Some(0), "{path:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("Examples:\n  linerate "),
            "{path:?} has no examples:\n{text}"
        );
    }
    let stream = String::from_utf8_lossy(&linerate(&["stream", "--help"]).stdout).into_owned();
    assert!(stream.contains("--parallel"));
}

#[test]
fn refused_connection_is_a_clear_error() {
    // Bind and drop a listener to find a port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    let out = linerate(&["stream", "127.0.0.1", "-p", &port.to_string(), "-t", "1"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("connection refused"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn unresolvable_host_is_a_clear_error() {
    let out = linerate(&["stream", "no-such-host.invalid", "-t", "1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no-such-host.invalid"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn json_errors_are_json_too() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = linerate(&["stream", "127.0.0.1", "-p", &port.to_string(), "--json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(json(&out)["error"].as_str().unwrap().contains("refused"));
}

/// scripts/test runs every test binary whatever fails first, and its closing line counts
/// every binary's tests: a failing binary, the binaries after it, and one that died
/// without printing its result.
#[test]
fn the_suite_counts_every_binary_after_a_failure() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let script = std::fs::read_to_string(format!("{root}/scripts/test")).unwrap();
    assert!(
        script.contains("cargo test --workspace --locked --no-fail-fast"),
        "scripts/test must not stop at the first failing binary"
    );
    let log = "     Running tests/lab.rs (target/debug/deps/lab-1)\n\
               test result: FAILED. 9 passed; 3 failed; 0 ignored; 0 measured; 0 filtered out\n\
               error: test failed, to rerun pass `-p linerate --test lab`\n\
               \x20    Running tests/netns.rs (target/debug/deps/netns-2)\n\
               test result: ok. 20 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n\
               \x20    Running tests/rr.rs (target/debug/deps/rr-3)\n\
               error: test failed, to rerun pass `-p linerate --test rr`\n\
               \x20  Doc-tests linerate_model\n\
               test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n";
    let dir = std::env::temp_dir().join(format!("linerate-count-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("log");
    std::fs::write(&path, log).unwrap();
    let out = std::process::Command::new("awk")
        .args(["-v", "skipped=2", "-f"])
        .arg(format!("{root}/scripts/count-tests.awk"))
        .arg(&path)
        .output()
        .expect("awk");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "tests: 28 passed, 3 failed, 2 skipped, 1 test binaries ended without a result\n"
    );
}

#[test]
fn every_time_flag_takes_units_and_a_bare_number_is_seconds() {
    // `-t 1s` is a time like `-t 1`; nothing runs: the flag error comes first.
    for args in [
        vec!["stream", "-t", "1s", "--bogus"],
        vec!["stream", "-t", "1500ms", "--bogus"],
    ] {
        let out = linerate(&args);
        assert!(
            stderr(&out).contains("'--bogus'"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let out = linerate(&["stream", "-t", "soon"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("'soon' is not a time"),
        "{}",
        stderr(&out)
    );
    // In the lab a bare number is seconds too: 20 s is over the bound, and says so.
    let out = linerate(&["lab", "up", "--rtt", "20"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("20ms for milliseconds"),
        "{}",
        stderr(&out)
    );
    let out = linerate(&["doctor", "--rtt", "100"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("100ms for 100 milliseconds"),
        "{}",
        stderr(&out)
    );
}

/// `--verbose` says on stderr what the test chose for this machine and why; stdout keeps
/// its JSON document.
#[test]
fn verbose_says_what_was_chosen_for_this_machine_on_stderr() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let out = linerate(&[
        "stream",
        "--verbose",
        "-P",
        "40",
        "--tls",
        "-t",
        "0.3",
        "-i",
        "0",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let said = stderr(&out);
    let workers = format!("linerate: workers: {cpus}, one per CPU ({cpus} CPU");
    assert!(said.contains(&workers), "no '{workers}' in:\n{said}");
    let per_worker = 40usize.div_ceil(cpus);
    let loop_line = if per_worker > 1 {
        format!("event loop over up to {per_worker} flows")
    } else {
        "with blocking calls".to_string()
    };
    assert!(said.contains(&loop_line), "no '{loop_line}' in:\n{said}");
    assert!(said.contains("write size: 128000 bytes"), "{said}");
    let buffers = if per_worker > 1 { "frugal" } else { "fast" };
    assert!(said.contains(&format!("TLS buffers: {buffers}")), "{said}");
    assert_eq!(json(&out)["config"]["threads"], cpus as u64);
    // Without the flag, nothing of it.
    let quiet = linerate(&["stream", "-t", "0.2", "-i", "0", "--json"]);
    assert!(!stderr(&quiet).contains("workers:"), "{}", stderr(&quiet));
}

/// A command's help shows the top-level flags it reads and no others; one it does not
/// read is refused by name (exit 2), before or after the command, while the ones it
/// reads work in either place and the environment's are left alone.
#[test]
fn each_command_shows_and_takes_only_the_top_level_flags_it_reads() {
    let help = |args: &[&str]| String::from_utf8_lossy(&linerate(args).stdout).to_string();
    let store = help(&["store", "prune", "--help"]);
    assert!(store.contains("--db"), "{store}");
    for unread in ["--no-store", "--key", "--verbose"] {
        assert!(!store.contains(unread), "{unread} in:\n{store}");
    }
    let stream = help(&["stream", "--help"]);
    for read in ["--db", "--no-store", "--key", "--verbose"] {
        assert!(stream.contains(read), "{read} not in:\n{stream}");
    }
    let lab = help(&["lab", "up", "--help"]);
    assert!(
        !lab.contains("--no-store") && !lab.contains("--db"),
        "{lab}"
    );
    for (args, flag) in [
        (
            vec!["store", "prune", "--older-than", "1d", "--key", "k"],
            "'--key'",
        ),
        (vec!["--no-store", "history"], "'--no-store'"),
        (
            vec!["--verbose", "profile", "check", "p.toml"],
            "'--verbose'",
        ),
        (
            vec!["lab", "up", "--name", "x", "--no-store"],
            "'--no-store'",
        ),
    ] {
        let out = linerate(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let said = stderr(&out);
        assert!(
            said.contains(flag) && said.contains("means nothing"),
            "{said}"
        );
        assert_eq!(said.trim().lines().count(), 1, "{said}");
    }
    // Read where given, before or after the command.
    let dir = std::env::temp_dir().join(format!("linerate-cli-reads-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("r.db");
    let db = db.to_str().unwrap();
    let kept = linerate(&["--db", db, "rr", "-t", "0.3", "-i", "0", "--json"]);
    assert_eq!(kept.status.code(), Some(0), "{}", stderr(&kept));
    for args in [vec!["--db", db, "history"], vec!["history", "--db", db]] {
        let out = linerate(&args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    }
    // LINERATE_KEY names a key for the commands that prove one; the others pass it by.
    let out = command()
        .env("LINERATE_KEY", dir.join("no-such-key"))
        .args(["--db", db, "history"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(&dir);
}
