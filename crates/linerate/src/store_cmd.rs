//! The commands that read the results database (`history`, `show`, `compare`, `export`,
//! `report`) and `store prune`: their flags, handed to `campaign::records`.

use crate::cli::{
    CompareArgs, ExportArgs, ExportFormat, HistoryArgs, PruneArgs, ReportArgs, ShowArgs,
};
use crate::failure::CommandResult;
use linerate_campaign::records::{self, Prune};
use linerate_campaign::storage::Storage;
use linerate_store::Filter;

pub fn history(args: &HistoryArgs, storage: &Storage) -> CommandResult {
    let filter = Filter {
        test: args.test.clone(),
        target: args.target.clone(),
        since: args.since,
        path: args.path.clone(),
        limit: (args.limit > 0).then_some(args.limit),
    };
    records::history(storage, &filter, args.print.json)
}

pub fn show(args: &ShowArgs, storage: &Storage) -> CommandResult {
    records::show(storage, args.id, args.print.json, args.format)
}

pub fn compare(args: &CompareArgs, storage: &Storage) -> CommandResult {
    records::compare(storage, &args.ids, args.level, args.print.json)
}

pub fn export(args: &ExportArgs, storage: &Storage) -> CommandResult {
    let csv = matches!(args.format, ExportFormat::Csv);
    records::export(storage, args.id, csv, args.output.as_deref())
}

pub fn report(args: &ReportArgs, storage: &Storage) -> CommandResult {
    records::report(storage, &args.ids, &args.html)
}

pub fn prune(args: &PruneArgs, storage: &Storage) -> CommandResult {
    let ask = Prune {
        older_than_s: args.older_than,
        batch: args.batch as usize,
        dry_run: args.dry_run,
        vacuum: args.vacuum,
        json: args.print.json,
    };
    records::prune(storage, &ask)
}
