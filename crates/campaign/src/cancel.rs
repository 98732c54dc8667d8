//! Ctrl-C and SIGTERM as a flag every loop checks: a test or campaign stops at its next
//! check and reports what it has, instead of the process dying mid-write.

use anyhow::{Context, Result};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// A flag that SIGINT and SIGTERM set.
pub fn on_signals() -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    set_on_signals(&flag)?;
    Ok(flag)
}

/// Has SIGINT and SIGTERM set `flag` (one a server already watches).
pub fn set_on_signals(flag: &Arc<AtomicBool>) -> Result<()> {
    register(
        flag,
        &[signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM],
    )
}

/// A flag that SIGINT, SIGTERM and SIGHUP set: for a command that holds something the
/// system keeps after the process (namespaces, qdiscs) and must undo it on any of them.
pub fn on_signals_and_hangup() -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    register(
        &flag,
        &[
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGHUP,
        ],
    )?;
    Ok(flag)
}

fn register(flag: &Arc<AtomicBool>, signals: &[i32]) -> Result<()> {
    for &signal in signals {
        signal_hook::flag::register(signal, flag.clone())
            .context("cannot install signal handlers")?;
    }
    Ok(())
}
