//! `linerate copy` and `linerate disk`: their flags, handed to `campaign::copy_run`.

use linerate_campaign::copy_run::{self, CopyAsk};
use linerate_transfer::client::CopyOptions;
use linerate_transfer::rate::RateConfig;

use crate::cli::{CopyArgs, DiskArgs};
use crate::failure::{CommandResult, Failure};
use crate::Globals;

fn usage(message: String) -> anyhow::Error {
    Failure::Usage(message).into()
}

fn options(args: &CopyArgs, globals: &Globals) -> Result<CopyOptions, anyhow::Error> {
    let key = globals.key.clone().ok_or_else(|| {
        usage("'linerate copy' needs '--key FILE' (or LINERATE_KEY): the key the server was started with".into())
    })?;
    let rate = match (args.rate, args.max_rate) {
        (Some(bps), _) => RateConfig::Fixed { bps },
        (None, max_bps) => RateConfig::Adaptive {
            max_bps,
            resume: None,
        },
    };
    Ok(CopyOptions {
        key,
        port: args.port,
        rate,
        chunk: args.chunk,
        window_chunks: args.window,
        null: args.null,
        recursive: args.recursive,
        block_cap: args.block,
        no_checksum: args.no_udp_checksum,
        encrypt: args.encrypt,
        // A tree brings its own directories, as scp -r does.
        mkdir: args.mkdir || args.recursive,
        bind: linerate_transfer::session::Bind {
            address: args.bind,
            device: args.bind_dev.clone(),
        },
        path_book: linerate_transfer::path_memory::default_file(),
        cold_start: args.cold_start,
        dscp: args.dscp,
        ecn: args.ecn,
        lanes: args.lanes,
    })
}

pub fn copy(args: &CopyArgs, globals: &Globals) -> CommandResult {
    let options = options(args, globals)?;
    let ask = CopyAsk {
        source: &args.source,
        destination: &args.destination,
        recursive: args.recursive,
        quiet: args.quiet,
        json: args.print.json,
        diagnose: args.diagnose,
    };
    copy_run::run(&ask, &options, &globals.storage)
}

pub fn disk(args: &DiskArgs) -> CommandResult {
    copy_run::disk(&args.path, args.size, args.print.json)
}
