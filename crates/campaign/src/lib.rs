//! What linerate runs around one test, as library code the binary calls once per command:
//!
//! - [`test`]: one test from a request: resolved on this machine, checked against the
//!   bounds every server puts on a test, run against a server or an in-process one.
//! - [`repeat`]: a test repeated (`--iterations`, `--confidence`) into one report with its
//!   confidence interval.
//! - [`sweep`]: one test at every combination of list-valued parameters.
//! - [`find_max`]: `--find-max`'s UDP trials over [`search`], the sans-IO rate search.
//! - [`baseline`]: `--baseline`, the same test plain beside an encrypted one.
//! - [`copy`]: a file copy's outcome as a result document like any test's.
//! - [`sink`]: the one way results leave a run: live events and the finished document
//!   flow through [`sink::Sink`]s (text, JSON, the results database, a progress bar).
//! - [`mesh`]: the mesh coordinator: the scheduler's jobs run as profiles on the hosts'
//!   agents, every result stored with its labels.
//! - [`coordinator`]: `linerate mesh run`'s coordinator started from a spec: the store's
//!   writer and spool, the watch (board, metrics, alerts), its notes for the printer;
//!   [`mesh_view`]: how a mesh's rows are shown (tables, JSON, the live view).
//! - [`threads`]: the threads a mesh's jobs run on, kept between jobs.
//! - [`storage`]: where runs are kept; [`cancel`]: Ctrl-C and SIGTERM as a stop flag.
//!
//! Nothing here parses flags or decides exit codes: that is the binary's.

pub mod baseline;
pub mod cancel;
pub mod coordinator;
pub mod copy;
pub mod copy_run;
pub mod failure;
pub mod find_max;
#[cfg(test)]
mod fixtures;
pub mod flag_values;
pub mod iperf2_run;
pub mod iperf3_run;
pub mod mesh;
pub mod mesh_file;
pub mod mesh_view;
pub mod multicast_run;
pub mod ndt7_run;
pub mod records;
pub mod repeat;
pub mod rpm_run;
pub mod search;
pub mod serve_run;
pub mod sink;
pub mod stamp_run;
pub mod storage;
pub mod sweep;
pub mod test;
pub mod test_run;
pub mod threads;
