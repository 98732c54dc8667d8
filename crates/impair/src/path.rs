//! The path the flags ask for, resolved: each direction's impairments and the
//! emulator's settings, checked together (what `--offloads` cannot carry, what a
//! bottleneck allows of threads).

use crate::spec::{self, DirectionTexts, LinkSpec, SpecError};
use linerate_model::{Impairment, PathFacts};

/// `--memory`: what the emulator's queues may hold in all, at least 1 MiB.
pub fn memory_limit(text: &str) -> Result<u64, String> {
    let limit = linerate_model::units::parse_size(text)
        .map_err(|e| format!("invalid --memory '{text}': {}", e.why))?;
    if limit < 1 << 20 {
        return Err(format!("invalid --memory '{text}': must be at least 1M"));
    }
    Ok(limit)
}

/// What the flags ask of a path, as text where the emulator's spec reads it.
#[derive(Debug, Clone)]
pub struct PathAsk<'a> {
    pub texts: DirectionTexts,
    /// `lab --rtt`: the round trip, split between the two directions.
    pub rtt: Option<&'a str>,
    pub memory: &'a str,
    /// Carry the hosts' segments whole (GRO/TSO through the emulator).
    pub offloads: bool,
    /// The seed of the path's randomness (drawn by the caller when not asked).
    pub seed: u64,
    /// Forwarding threads each way, when asked.
    pub threads: Option<u32>,
    /// The CPUs of this host, for the default of threads.
    pub cpus: usize,
}

/// The path and each direction's resolved settings.
pub fn resolve_path(
    emulator: &str,
    lab: Option<&str>,
    ask: &PathAsk,
) -> Result<(PathFacts, LinkSpec, LinkSpec), String> {
    let text = |e: SpecError| e.to_string();
    let (mut forward, mut reverse) = spec::directions(&ask.texts, ask.rtt).map_err(text)?;
    if ask.offloads && ask.texts.queue.is_none() {
        // The default queue, but at least two whole segments.
        for direction in [&mut forward, &mut reverse] {
            if let Some(rate) = direction.rate_bps {
                direction.queue_bytes =
                    Some(spec::default_queue_bytes(rate).max(OFFLOADED_QUEUE_BYTES));
            }
        }
    }
    let limit = memory_limit(ask.memory)?;
    let forward_spec = LinkSpec::resolve("forward", &mut forward, limit).map_err(text)?;
    let reverse_spec = LinkSpec::resolve("reverse", &mut reverse, limit).map_err(text)?;
    let path = PathFacts {
        emulator: emulator.into(),
        lab: lab.map(str::to_string),
        forward,
        reverse,
        seed: ask.seed,
        offloads: ask.offloads,
        threads: forwarding_threads(ask, &forward, &reverse)?,
    };
    if path.offloads {
        if let Some(flag) = [path.forward, path.reverse]
            .iter()
            .find_map(per_frame_impairment)
        {
            return Err(format!(
                "--offloads carries the hosts' 64 KB segments whole, so {flag} (a per-frame \
                 impairment) cannot apply; leave out one or the other"
            ));
        }
        if let Some(queue) = [path.forward, path.reverse]
            .iter()
            .filter_map(|d| d.queue_bytes)
            .find(|&q| q < OFFLOADED_QUEUE_BYTES)
        {
            return Err(format!(
                "invalid --queue: {queue} bytes cannot hold two whole segments with --offloads \
                 (a 64 KB segment is up to 70 kB of frames); give --queue 128k or more"
            ));
        }
    }
    Ok((path, forward_spec, reverse_spec))
}

/// The least queue before a bottleneck with `--offloads`: two whole segments (a 64 KB
/// segment leaves as up to 70 kB of frames), so that one fits behind another.
const OFFLOADED_QUEUE_BYTES: u64 = 128 * 1024;

/// The flag of an impairment that acts on single frames, if the direction has one.
fn per_frame_impairment(i: &Impairment) -> Option<&'static str> {
    [
        (i.loss_pct, "--loss"),
        (i.reorder_pct, "--reorder"),
        (i.duplicate_pct, "--duplicate"),
        (i.corrupt_pct, "--corrupt"),
    ]
    .into_iter()
    .find(|(share, _)| *share > 0.0)
    .map(|(_, flag)| flag)
}

/// Forwarding threads each way: as asked, or one per 4 CPUs (the hosts' stacks and the
/// test's own threads need the rest); one where a direction has a bottleneck, which is one
/// queue with one rate and cannot be split between threads.
fn forwarding_threads(
    ask: &PathAsk,
    forward: &Impairment,
    reverse: &Impairment,
) -> Result<u32, String> {
    let bottleneck = forward.rate_bps.is_some() || reverse.rate_bps.is_some();
    match ask.threads {
        Some(0) | Some(65..) => Err(format!(
            "invalid --threads '{}': from 1 to 64 forwarding threads each way",
            ask.threads.unwrap_or_default()
        )),
        Some(threads) if threads > 1 && bottleneck => Err(format!(
            "--threads {threads} cannot go with --rate: a bottleneck is one queue, forwarded \
             by one thread; leave --threads out"
        )),
        Some(threads) => Ok(threads),
        None if bottleneck => Ok(1),
        None => Ok(u32::try_from(ask.cpus / 4).unwrap_or(1).clamp(1, 64)),
    }
}
