//! The `linerate` binary: flags, one call per command into the library crates, printing
//! and exit codes.
//!
//! Exit codes: 0 success, 1 a test that could not run or finished with failed flows,
//! 2 a usage error (bad flag or value).

mod cli;
mod copy_cmd;
mod doctor_cmd;
mod failure;
mod iperf2_cmd;
mod iperf3_cmd;
mod lab_cmd;
mod mesh_cmd;
mod ndt7_cmd;
mod rpm_cmd;
mod run_cmd;
mod serve_cmd;
mod stamp_cmd;
mod store_cmd;
mod sweep_cmd;
mod test_cmd;
mod trace_cmd;

use cli::{Cli, Command};
use failure::Failure;
use linerate_campaign::storage::Storage;
use linerate_proto::auth::Key;
use std::process::ExitCode;

/// What every command may need from the top-level flags.
pub struct Globals {
    /// Where runs are kept (`--db`, `--no-store`).
    pub storage: Storage,
    /// The key the user named (`--key` or `LINERATE_KEY`), read before any command runs.
    pub key: Option<Key>,
    /// `--verbose`: say what a test chose and why before it runs.
    pub verbose: bool,
}

/// jemalloc in place of glibc's malloc, for every allocation in the process (SQLite's
/// too): a mesh coordinator left running keeps a flat resident size with it, where
/// glibc's heap crept by 1-2 MiB an hour from fragments it cannot return
/// (docs/performance.md). The `jemalloc` feature, on by default.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main`: a thread of its own hands pages freed a second
/// ago back to the kernel (dirty, then at once as muzzy), so that what a burst of results
/// touched does not stay resident. `MALLOC_CONF` in the environment is applied after it.
#[cfg(feature = "jemalloc")]
#[export_name = "malloc_conf"]
static MALLOC_CONF: &[u8; 60] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

fn main() -> ExitCode {
    // Output piped into `head` should end the process quietly, as for any command-line
    // tool. Sockets are unaffected: the standard library sends with MSG_NOSIGNAL.
    // SAFETY: setting a signal's disposition before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let (cli, reads_key) = match cli::command().try_get_matches().and_then(|matches| {
        use clap::FromArgMatches;
        let reads_key = matches
            .subcommand_name()
            .is_some_and(|name| cli::reads(name).contains(&"key"));
        Ok((
            Cli::from_arg_matches(&matches)?,
            reads_key,
            cli::unread_flag(&matches),
        ))
    }) {
        Ok((_, _, Some(unread))) => {
            return failure::exit_code(Err(Failure::Usage(unread).into()), false)
        }
        Ok((cli, reads_key, None)) => (cli, reads_key),
        Err(error) => return failure::exit_code(Err(failure::FlagsRefused(error).into()), false),
    };
    // A key from LINERATE_KEY is read only by a command that proves it to someone.
    let named_key = cli.key.as_deref().filter(|_| reads_key);
    let key = match named_key.map(read_key).transpose() {
        Ok(key) => key,
        Err(message) => return failure::exit_code(Err(Failure::Usage(message).into()), false),
    };
    let globals = Globals {
        storage: Storage {
            path: cli.db,
            disabled: cli.no_store,
        },
        key,
        verbose: cli.verbose,
    };
    let g = &globals;
    let (json, outcome) = match cli.command {
        Command::Serve(args) => (false, serve_cmd::serve(&args, g)),
        Command::Stream(args) => (args.output.print.json, test_cmd::stream(&args, g)),
        Command::App(args) => (args.output.print.json, test_cmd::app(&args, g)),
        Command::Rr(args) => (
            args.common.output.print.json,
            test_cmd::transactions(&args.common, Some(&args), g),
        ),
        Command::Crr(args) => (
            args.common.output.print.json,
            test_cmd::transactions(&args.common, None, g),
        ),
        Command::Iperf2(args) => (args.json, iperf2_cmd::run(&args, g)),
        Command::Iperf3(args) => (
            args.json || args.iperf3_json || args.json_stream,
            iperf3_cmd::run(&args, g),
        ),
        Command::Sweep(args) => (args.output.print.json, sweep_cmd::run(&args, g)),
        Command::History(args) => (args.print.json, store_cmd::history(&args, &g.storage)),
        Command::Show(args) => (args.print.json, store_cmd::show(&args, &g.storage)),
        Command::Compare(args) => (args.print.json, store_cmd::compare(&args, &g.storage)),
        Command::Export(args) => (false, store_cmd::export(&args, &g.storage)),
        Command::Report(args) => (false, store_cmd::report(&args, &g.storage)),
        Command::Run(args) => (args.print.json, run_cmd::run(&args, g)),
        Command::Profile(command) => (false, run_cmd::profile(&command)),
        Command::Impair(args) => (false, lab_cmd::impair(&args)),
        Command::Lab(command) => (false, lab_cmd::run(&command)),
        Command::Copy(args) => (args.print.json, copy_cmd::copy(&args, g)),
        Command::Disk(args) => (args.print.json, copy_cmd::disk(&args)),
        Command::Doctor(args) => (args.print.json, doctor_cmd::run(&args, g.key.clone())),
        Command::Mesh(command) => mesh_cmd::run(command, g),
        Command::Rpm(args) => (args.print.json, rpm_cmd::run(&args, g)),
        Command::Ndt7(args) => (args.print.json, ndt7_cmd::run(&args, g)),
        Command::Stamp(args) => (args.print.json, stamp_cmd::run(&args, g)),
        Command::Trace(args) => (args.print.json, trace_cmd::run(&args, g)),
        Command::Store(cli::StoreCommand::Prune(args)) => {
            (args.print.json, store_cmd::prune(&args, &g.storage))
        }
    };
    failure::exit_code(outcome, json)
}

/// Reads a key file; a file that cannot be a key is the user's mistake, named in one line.
fn read_key(path: &std::path::Path) -> Result<Key, String> {
    Key::from_path(path).map_err(|e| format!("invalid value '{}' for '--key': {e}", path.display()))
}
