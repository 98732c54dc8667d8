//! `linerate mesh plan|run|status`: a mesh file read and checked, its schedule simulated,
//! run by the coordinator (linerate_campaign::mesh), and its last figures shown.

use crate::cli::{
    MeshCommand, MeshHistoryArgs, MeshPlanArgs, MeshRunArgs, MeshStatusArgs, ReadArchiveArgs,
};
use crate::failure::{CommandResult, Failure};
use crate::Globals;
use anyhow::Context;
use linerate_campaign::cancel;
use linerate_campaign::coordinator::{
    self, Coordinator, CoordinatorSpec, Note, SpoolPlace, StartError, StoreSpec,
};
use linerate_campaign::mesh::MeshOptions;
use linerate_campaign::mesh_file;
use linerate_campaign::mesh_view::{self, Printer, RowsFrom};
use linerate_mesh::Mesh;
use linerate_model::clock::UnixTime;
use linerate_proto::auth::Key;
use linerate_store::prune::PairQuery;
use std::time::Duration;

/// What a job costs beyond its test's duration, for the plan: reaching the source's
/// agent, its clock samples, the destination's preparation and the lead to the start.
const SETUP_S: f64 = 1.0;

pub fn run(command: MeshCommand, globals: &Globals) -> (bool, CommandResult) {
    match command {
        MeshCommand::Plan(args) => (args.print.json, plan(&args)),
        MeshCommand::Run(args) => (args.print.json, run_mesh(&args, globals)),
        MeshCommand::Status(args) => (args.print.json, status(&args, globals)),
        MeshCommand::History(args) => (args.print.json, history(&args, globals)),
    }
}

/// A mesh file that does not read is a usage error: one line naming file, line and value.
fn load(path: &std::path::Path) -> Result<Mesh, Failure> {
    mesh_file::load(path).map_err(Failure::Usage)
}

fn plan(args: &MeshPlanArgs) -> CommandResult {
    let mesh = load(&args.file)?;
    let plan = linerate_mesh::plan::summary(&mesh, SETUP_S);
    if args.print.json {
        let doc = mesh_view::plan_json(&mesh, &plan);
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).context("encoding the plan")?
        );
        return Ok(());
    }
    print!("{}", mesh_view::plan_text(&mesh, &plan, SETUP_S));
    Ok(())
}

/// The mesh's key: `--key` (or LINERATE_KEY) first, else the file's `key`.
fn key_of(mesh: &Mesh, globals: &Globals) -> Result<Option<Key>, Failure> {
    if let Some(key) = &globals.key {
        return Ok(Some(key.clone()));
    }
    let Some(path) = &mesh.key else {
        return Ok(None);
    };
    Key::from_path(path)
        .map(Some)
        .map_err(|e| Failure::Usage(format!("the mesh's key {}: {e}", path.display())))
}

/// `linerate mesh run`: the coordinator's spec from the flags and the file, its notes
/// printed.
fn run_mesh(args: &MeshRunArgs, globals: &Globals) -> CommandResult {
    coordinator::one_allocator_arena();
    let mesh = load(&args.file)?;
    let key = key_of(&mesh, globals)?;
    if key.is_none() {
        return Err(Failure::Usage(format!(
            "mesh '{}' has no key: its agents dial each other only with one (key = \"PATH\" in {}, or --key)",
            mesh.name,
            args.file.display()
        ))
        .into());
    }
    let store = match &args.store {
        Some(url) => Some(StoreSpec {
            store: Box::new(mesh_view::open_archive(
                url,
                args.store_password_file.as_deref(),
            )?),
            spool: match &mesh.store.spool {
                Some(path) => SpoolPlace::File(path.clone()),
                None => SpoolPlace::Default,
            },
        }),
        None => globals.storage.open_for_run()?.map(|sqlite| StoreSpec {
            store: Box::new(sqlite),
            spool: SpoolPlace::Memory,
        }),
    };
    let options = MeshOptions {
        cycles: args.cycles,
        key,
        control_timeout: Duration::from_secs(5),
        lead: Duration::from_millis(500),
        rediscover: mesh_file::rediscover(&args.file).map_err(Failure::Usage)?,
    };
    let spec = CoordinatorSpec {
        mesh,
        file: args.file.clone(),
        options,
        store,
        metrics: args.metrics,
        remote_write: args.remote_write.clone(),
    };
    let coordinator = Coordinator::start(spec).map_err(|e| match e {
        StartError::Usage(message) => anyhow::Error::from(Failure::Usage(message)),
        StartError::Other(error) => error,
    })?;
    for notice in &coordinator.notices {
        eprintln!("{notice}");
    }
    let stop = cancel::on_signals()?;
    let mesh = coordinator.mesh().clone();
    if !args.print.json {
        eprintln!(
            "Mesh '{}': {} hosts, {} jobs{}",
            mesh.name,
            mesh.hosts.len(),
            mesh.jobs().len(),
            match args.cycles {
                Some(n) => format!(", {n} cycle(s)"),
                None => ", until stopped".into(),
            }
        );
    }
    let mut out = Printer::new(&mesh.name, mesh.hosts.len(), args.print.json);
    coordinator.run(&stop, &mut |note| match note {
        Note::Row(row) => out.row(row),
        Note::Line { text, event } => out.note(&text, event),
    })?;
    let stopped = stop.load(std::sync::atomic::Ordering::Relaxed);
    let failures = out.finish(stopped);
    // A stop is the operator's (SIGTERM from `systemctl stop`, Ctrl-C): the run did what
    // it was asked and ends with status 0; the jobs it cut short are kept as interrupted.
    // Failures before it are in the rows and the metrics, as they were.
    if failures > 0 && !stopped {
        return Err(Failure::Partial(format!(
            "{failures} job(s) failed or were skipped (see above)"
        ))
        .into());
    }
    Ok(())
}

fn status(args: &MeshStatusArgs, globals: &Globals) -> CommandResult {
    // A file names its mesh; anything else is the name.
    let path = std::path::Path::new(&args.mesh);
    let name = if path.is_file() {
        load(path)?.name
    } else {
        args.mesh.clone()
    };
    mesh_view::status(&name, rows_from(&args.archive, globals), args.print.json)
}

/// `mesh history`: a pair's rows since `--since`, and before them the hourly aggregates
/// that stand for the rows retention removed, each line saying which it is.
fn history(args: &MeshHistoryArgs, globals: &Globals) -> CommandResult {
    let path = std::path::Path::new(&args.mesh);
    let file = if path.is_file() {
        Some(load(path)?)
    } else {
        None
    };
    let name = file.as_ref().map_or(args.mesh.clone(), |m| m.name.clone());
    let query = PairQuery {
        mesh: &name,
        src: &args.src,
        dst: &args.dst,
        test: args.test.as_deref(),
        since: UnixTime::now().seconds() - args.since,
    };
    let from = rows_from(&args.archive, globals);
    mesh_view::history(&name, file.as_ref(), &query, from, args.print.json)
}

fn rows_from<'a>(archive: &'a ReadArchiveArgs, globals: &'a Globals) -> RowsFrom<'a> {
    match &archive.store {
        Some(url) => RowsFrom::Archive {
            url,
            password_file: archive.store_password_file.as_deref(),
        },
        None => RowsFrom::Store(&globals.storage),
    }
}
