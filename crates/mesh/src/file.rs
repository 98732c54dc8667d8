//! The mesh file (TOML): hosts, tests and the groups that pair them. Every value is
//! checked where it is read, and a mistake is one line naming the file, the line, the
//! column and the value (docs/mesh.md shows the format).
//!
//! ```toml
//! name = "lab"
//! key = "/etc/linerate/key"      # the agents' key file (a mesh's agents dial each other)
//! [limits]
//! max_exclusive = 4              # exclusive tests at once in the whole mesh
//!
//! [[host]]
//! name = "ams1"
//! address = "10.0.0.1"           # or "10.0.0.1:5201", "[fd00::1]:5201", a DNS name
//! labels = { site = "ams" }
//!
//! [[test]]
//! name = "throughput"
//! run = "stream"                 # a kind of test: one module of src/kinds/ each
//! duration = "10s"
//! interval = "4h"
//! jitter = "10m"
//!
//! [[group]]
//! name = "all"
//! hosts = ["*"]                  # names, or "*": every host
//! shape = "full"                 # full | star (with center) | pairs (with pairs)
//! tests = ["throughput"]
//! ```

use crate::kinds;
use crate::model::*;
pub use crate::reading::MeshError;
use crate::reading::{read_dscp, Reader, TestTable};
use linerate_model::marks::Marks;
use linerate_model::units::parse_size;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMesh {
    name: Option<Spanned<String>>,
    key: Option<Spanned<String>>,
    seed: Option<Spanned<u64>>,
    limits: Option<RawLimits>,
    alerts: Option<RawAlerts>,
    store: Option<RawStore>,
    retention: Option<RawRetention>,
    #[serde(default)]
    host: Vec<Spanned<RawHost>>,
    #[serde(default)]
    test: Vec<Spanned<TestTable>>,
    #[serde(default)]
    group: Vec<Spanned<RawGroup>>,
    #[serde(default)]
    discover: Vec<Spanned<RawDiscover>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDiscover {
    name: Spanned<String>,
    port: Option<u16>,
    every: Option<Spanned<String>>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlerts {
    goodput_drop: Option<Spanned<String>>,
    latency_rise: Option<Spanned<String>>,
    latency_rise_min: Option<Spanned<String>>,
    responsiveness_drop: Option<Spanned<String>>,
    loss_above: Option<Spanned<String>>,
    #[serde(rename = "for")]
    loss_for: Option<Spanned<String>>,
    mos_below: Option<Spanned<f64>>,
    mos_for: Option<Spanned<String>>,
    baseline: Option<Spanned<u32>>,
    at_least: Option<Spanned<u32>>,
    alertmanager: Option<Spanned<String>>,
    webhook: Option<Spanned<String>>,
    grid_url: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetention {
    raw: Spanned<String>,
    hourly: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStore {
    detail: Option<Spanned<String>>,
    detail_every: Option<Spanned<u64>>,
    spool: Option<Spanned<String>>,
    spool_max: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    max_exclusive: Option<Spanned<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    name: Spanned<String>,
    address: Spanned<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    /// "stamp": the host runs no agent, only a STAMP reflector.
    reflector: Option<Spanned<String>>,
    /// The local address its jobs' connections leave from.
    source: Option<Spanned<String>>,
    /// The interface or VRF device they leave through (SO_BINDTODEVICE).
    source_dev: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    name: Spanned<String>,
    hosts: Option<Vec<Spanned<String>>>,
    shape: Option<Spanned<String>>,
    center: Option<Spanned<String>>,
    pairs: Option<Vec<Spanned<Vec<Spanned<String>>>>>,
    directions: Option<Spanned<String>>,
    tests: Vec<Spanned<String>>,
}

/// Reads a mesh file; `file` names it in errors.
pub fn parse(file: &str, text: &str) -> Result<Mesh, MeshError> {
    let reader = Reader { file, text };
    let raw: RawMesh = toml::from_str(text).map_err(|e| {
        let offset = e.span().map_or(0, |s| s.start);
        reader.error(offset, e.message().trim().to_string())
    })?;
    if raw.host.is_empty() && raw.discover.is_empty() {
        return Err(reader.error(0, "the mesh names no [[host]] and no [[discover]]"));
    }
    let discover = read_discover(&reader, &raw.discover)?;
    let (hosts, host_index) = read_hosts(&reader, &raw.host)?;
    let mut tests = Vec::new();
    let mut test_index = BTreeMap::new();
    for spanned in raw.test {
        let (test, name) = read_test(&reader, spanned)?;
        if test_index.insert(test.name.clone(), tests.len()).is_some() {
            return Err(reader.at(&name, format!("test '{}' is named twice", test.name)));
        }
        tests.push(test);
    }
    if raw.group.is_empty() {
        return Err(reader.error(0, "the mesh has no [[group]] to say which hosts test which"));
    }
    let mut groups = Vec::new();
    let mut group_names = BTreeSet::new();
    for spanned in &raw.group {
        let group = read_group(&reader, spanned, &host_index, &test_index)?;
        if !group_names.insert(group.name.clone()) {
            return Err(reader.at(
                &spanned.get_ref().name,
                format!("group '{}' is named twice", group.name),
            ));
        }
        groups.push(group);
    }
    let name = raw
        .name
        .as_ref()
        .map_or_else(|| "mesh".to_string(), |n| n.get_ref().clone());
    if !is_name(&name) {
        let at = raw.name.as_ref().map_or(0, |n| n.span().start);
        return Err(reader.error(
            at,
            format!("mesh name '{name}' must be letters, digits, '-', '_' or '.'"),
        ));
    }
    let max_exclusive = match raw.limits.and_then(|l| l.max_exclusive) {
        Some(n) if *n.get_ref() == 0 => {
            return Err(reader.at(&n, "max_exclusive must be at least 1"));
        }
        Some(n) => Some(*n.get_ref()),
        None => None,
    };
    let alerts = match &raw.alerts {
        Some(a) => alert_rules(&reader, a)?,
        None => AlertRules::default(),
    };
    let store = match &raw.store {
        Some(raw_store) => store_policy(&reader, raw_store)?,
        None => StorePolicy::default(),
    };
    let retention = match &raw.retention {
        Some(r) => Some(retention(&reader, r)?),
        None => None,
    };
    Ok(Mesh {
        alerts,
        store,
        retention,
        seed: raw.seed.map_or_else(|| name_seed(&name), |s| *s.get_ref()),
        name,
        key: raw.key.map(|k| k.into_inner().into()),
        max_exclusive,
        hosts,
        tests,
        groups,
        discover,
    })
}

/// `[[discover]]`: DNS names whose addresses are hosts too.
fn read_discover(
    reader: &Reader<'_>,
    raw: &[Spanned<RawDiscover>],
) -> Result<Vec<Discover>, MeshError> {
    let mut discover = Vec::new();
    for spanned in raw {
        let d = spanned.get_ref();
        let name = d.name.get_ref();
        if name.is_empty() || name.chars().any(char::is_whitespace) || name.contains(':') {
            return Err(reader.at(
                &d.name,
                format!("discover '{name}' is not a DNS name (give the port as port = N)"),
            ));
        }
        let every_s = match &d.every {
            Some(every) => reader.seconds(every, "every", true)?.max(1.0),
            None => DEFAULT_DISCOVER_SECONDS,
        };
        discover.push(Discover {
            name: name.clone(),
            port: d.port.unwrap_or(5201),
            every_s,
            labels: d.labels.clone(),
        });
    }
    Ok(discover)
}

/// `[[host]]`: each host, and where it is in the list by name.
fn read_hosts(
    reader: &Reader<'_>,
    raw: &[Spanned<RawHost>],
) -> Result<(Vec<Host>, BTreeMap<String, usize>), MeshError> {
    if raw.len() > MAX_HOSTS {
        return Err(reader.error(
            raw[MAX_HOSTS].span().start,
            format!("more than {MAX_HOSTS} hosts"),
        ));
    }
    let mut hosts = Vec::new();
    let mut host_index = BTreeMap::new();
    for spanned in raw {
        let host = spanned.get_ref();
        let name = host.name.get_ref();
        if !is_name(name) {
            return Err(reader.at(
                &host.name,
                format!("host name '{name}' must be letters, digits, '-', '_' or '.'"),
            ));
        }
        let address = host.address.get_ref();
        if address.is_empty() || address.chars().any(char::is_whitespace) {
            return Err(reader.at(
                &host.address,
                format!("address '{address}' is not a host name or address"),
            ));
        }
        if host_index.insert(name.clone(), hosts.len()).is_some() {
            return Err(reader.at(&host.name, format!("host '{name}' is named twice")));
        }
        let reflector_only = match &host.reflector {
            None => false,
            Some(r) if r.get_ref() == "stamp" => true,
            Some(r) => {
                return Err(reader.at(
                    r,
                    format!("reflector '{}' is not \"stamp\" (the only reflector a host without an agent can be)", r.get_ref()),
                ))
            }
        };
        let source = host_source(reader, host)?;
        hosts.push(Host {
            name: name.clone(),
            address: address.clone(),
            labels: host.labels.clone(),
            reflector_only,
            source,
        });
    }
    Ok((hosts, host_index))
}

/// `[store]`: how much of each job's document is kept, and the spool.
fn store_policy(reader: &Reader<'_>, raw_store: &RawStore) -> Result<StorePolicy, MeshError> {
    let mut store = StorePolicy::default();
    {
        if let Some(detail) = &raw_store.detail {
            store.detail = match detail.get_ref().as_str() {
                "none" => Detail::None,
                "failed" => Detail::Failed,
                "all" => Detail::All,
                other => {
                    return Err(reader.at(
                        detail,
                        format!("detail '{other}' must be \"none\", \"failed\" or \"all\""),
                    ))
                }
            };
        }
        if let Some(every) = &raw_store.detail_every {
            store.detail_every = *every.get_ref();
        }
        if let Some(spool) = &raw_store.spool {
            store.spool = Some(spool.get_ref().into());
        }
        if let Some(max) = &raw_store.spool_max {
            store.spool_max = match parse_size(max.get_ref()) {
                Ok(bytes) if bytes >= 1 << 20 => bytes,
                Ok(_) => return Err(reader.at(max, "spool_max must be at least 1M".to_string())),
                Err(e) => return Err(reader.at(max, format!("spool_max: {e}"))),
            };
        }
    }
    Ok(store)
}

/// "30%" or "0.3": a share from 0 to 10 (1000 %).
fn share(reader: &Reader, value: &Spanned<String>, what: &str) -> Result<f64, MeshError> {
    let text = value.get_ref().trim();
    let number = match text.strip_suffix('%') {
        Some(pct) => pct.trim().parse::<f64>().map(|p| p / 100.0),
        None => text.parse::<f64>(),
    };
    number
        .ok()
        .filter(|n| (0.0..=10.0).contains(n) && *n > 0.0)
        .ok_or_else(|| {
            reader.at(
                value,
                format!("{what} '{text}' is not a share like \"30%\" (above 0, at most 1000%)"),
            )
        })
}

/// An http:// or https:// URL, no longer than 2,000 bytes and without whitespace.
fn http_url(reader: &Reader, value: &Spanned<String>, what: &str) -> Result<String, MeshError> {
    let url = value.get_ref();
    let ok = (url.starts_with("http://") || url.starts_with("https://"))
        && url.len() <= 2000
        && !url.chars().any(char::is_whitespace);
    if ok {
        Ok(url.clone())
    } else {
        Err(reader.at(
            value,
            format!("{what} '{url}' is not an http:// or https:// URL"),
        ))
    }
}

fn alert_rules(reader: &Reader, raw: &RawAlerts) -> Result<AlertRules, MeshError> {
    let mut rules = AlertRules::default();
    if let Some(v) = &raw.goodput_drop {
        rules.goodput_drop = share(reader, v, "goodput_drop")?.min(1.0);
    }
    if let Some(v) = &raw.latency_rise {
        rules.latency_rise = share(reader, v, "latency_rise")?;
    }
    if let Some(v) = &raw.latency_rise_min {
        rules.latency_rise_min_s = reader.seconds(v, "latency_rise_min", false)?;
    }
    if let Some(v) = &raw.responsiveness_drop {
        rules.responsiveness_drop = share(reader, v, "responsiveness_drop")?.min(1.0);
    }
    if let Some(v) = &raw.loss_above {
        rules.loss_above = share(reader, v, "loss_above")?;
        if rules.loss_above >= 1.0 {
            return Err(reader.at(
                v,
                format!("loss_above '{}' must be below 100%", v.get_ref()),
            ));
        }
    }
    if let Some(v) = &raw.loss_for {
        rules.loss_for_s = reader.seconds(v, "for", false)?;
    }
    if let Some(v) = &raw.mos_below {
        rules.mos_below = *v.get_ref();
        if !(1.0..=4.5).contains(&rules.mos_below) {
            return Err(reader.at(
                v,
                format!(
                    "mos_below {} must be from 1 to 4.5 (the E-model's MOS scale)",
                    v.get_ref()
                ),
            ));
        }
    }
    if let Some(v) = &raw.mos_for {
        rules.mos_for_s = reader.seconds(v, "mos_for", false)?;
    }
    for (value, slot, what) in [
        (&raw.baseline, &mut rules.baseline, "baseline"),
        (&raw.at_least, &mut rules.at_least, "at_least"),
    ] {
        if let Some(v) = value {
            let n = *v.get_ref();
            if !(1..=1000).contains(&n) {
                return Err(reader.at(v, format!("{what} {n} must be from 1 to 1000 results")));
            }
            *slot = n as usize;
        }
    }
    if rules.at_least > rules.baseline {
        let at = raw
            .at_least
            .as_ref()
            .or(raw.baseline.as_ref())
            .expect("one was given");
        return Err(reader.at(at, "at_least must not be more than baseline"));
    }
    rules.alertmanager = raw
        .alertmanager
        .as_ref()
        .map(|v| http_url(reader, v, "alertmanager"))
        .transpose()?;
    rules.webhook = raw
        .webhook
        .as_ref()
        .map(|v| http_url(reader, v, "webhook"))
        .transpose()?;
    rules.grid_url = raw
        .grid_url
        .as_ref()
        .map(|v| http_url(reader, v, "grid_url"))
        .transpose()?;
    Ok(rules)
}

fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A seed from the mesh's name, so that the same file jitters the same way.
fn name_seed(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// How often each pair runs a test: the file's `interval`, or for a kind that runs all
/// the time (STAMP) its window; never shorter than such a window.
fn read_interval(
    reader: &Reader,
    table: &mut TestTable,
    name: &Spanned<String>,
    continuous: bool,
    seconds: f64,
) -> Result<f64, MeshError> {
    let interval = table.take::<String>(reader, "interval")?;
    let interval_s = match &interval {
        Some(i) => reader.seconds(i, "interval", true)?,
        // The next window starts as one ends.
        None if continuous => seconds,
        None => {
            return Err(reader.at(
                name,
                format!(
                "test '{}' needs an interval (how often each pair runs it, e.g. interval = \"1h\")",
                name.get_ref()
            ),
            ))
        }
    };
    if continuous && interval_s < seconds {
        let at = interval.as_ref().expect("a short interval was given");
        return Err(reader.at(
            at,
            format!("interval '{}' is shorter than the report window: one window would overlap the next", at.get_ref()),
        ));
    }
    Ok(interval_s)
}

/// A host's `source` (an address) and `source_dev` (an interface name, as the kernel
/// takes it: 1 to 15 bytes, no '/', no whitespace).
fn host_source(
    reader: &Reader<'_>,
    host: &RawHost,
) -> Result<Option<linerate_model::Source>, MeshError> {
    let address = match &host.source {
        None => None,
        Some(text) => Some(text.get_ref().parse::<std::net::IpAddr>().map_err(|_| {
            reader.at(
                text,
                format!("source '{}' is not an IP address", text.get_ref()),
            )
        })?),
    };
    let device = match &host.source_dev {
        None => None,
        Some(text) => {
            let name = text.get_ref();
            if name.is_empty()
                || name.len() > 15
                || name.contains('/')
                || name.chars().any(char::is_whitespace)
            {
                return Err(reader.at(
                    text,
                    format!("source_dev '{name}' is not an interface name (1 to 15 characters, no '/' or spaces)"),
                ));
            }
            Some(name.clone())
        }
    };
    Ok(
        (address.is_some() || device.is_some()).then_some(linerate_model::Source {
            address,
            device,
            mptcp: false,
        }),
    )
}

/// A test's table read: its name and kind, the kind's own options (its module takes
/// them), then what every test has (interval, jitter, exclusivity, marks); a key left
/// over is not an option of that kind. Each mistake names its place. Returns the test
/// and where its name is.
fn read_test(
    reader: &Reader,
    spanned: Spanned<TestTable>,
) -> Result<(MeshTest, Spanned<String>), MeshError> {
    let start = spanned.span().start;
    let mut table = spanned.into_inner();
    let name = table.required::<String>(reader, "name", start)?;
    if !is_name(name.get_ref()) {
        return Err(reader.at(
            &name,
            format!(
                "test name '{}' must be letters, digits, '-', '_' or '.'",
                name.get_ref()
            ),
        ));
    }
    let run_name = table.required::<String>(reader, "run", start)?;
    let run = run_name.get_ref().as_str();
    let Some((_, read_kind)) = kinds::KINDS.iter().find(|(kind, _)| *kind == run) else {
        return Err(reader.at(
            &run_name,
            format!(
                "test '{}': run '{run}' is not {}",
                name.get_ref(),
                kinds::names()
            ),
        ));
    };
    let context = kinds::Context {
        name: name.get_ref(),
        run: &run_name,
    };
    let (kind, seconds) = read_kind(reader, &mut table, &context)?;
    let interval_s = read_interval(
        reader,
        &mut table,
        &name,
        kind.kind().runs_all_the_time(),
        seconds,
    )?;
    let jitter = table.take::<String>(reader, "jitter")?;
    let jitter_s = match &jitter {
        Some(j) => reader.seconds(j, "jitter", false)?,
        None => 0.0,
    };
    if jitter_s >= interval_s {
        let at = jitter.as_ref().expect("a jitter was given");
        return Err(reader.at(
            at,
            format!("jitter '{}' must be less than the interval", at.get_ref()),
        ));
    }
    let exclusive = table
        .take::<bool>(reader, "exclusive")?
        .map_or_else(|| kind.kind().exclusive_by_default(), |e| *e.get_ref());
    let pause_for_exclusive = table
        .take::<bool>(reader, "pause_for_exclusive")?
        .is_some_and(|p| *p.get_ref());
    // A kind that reads the marks itself (STAMP's DSCP) has taken them; one that neither
    // marks nor reads them leaves them, refused below.
    let marks = if kind.kind().marks_packets() {
        let dscp = table.take::<String>(reader, "dscp")?;
        let ecn = table.take::<bool>(reader, "ecn")?;
        match (dscp, ecn) {
            (None, None) => None,
            (dscp, ecn) => Some(Marks {
                dscp: dscp
                    .map(|d| read_dscp(reader, &d))
                    .transpose()?
                    .unwrap_or(0),
                ecn: ecn.is_some_and(|e| *e.get_ref()),
            }),
        }
    } else {
        None
    };
    table.refuse_the_rest(reader, run)?;
    let test = MeshTest {
        name: name.get_ref().clone(),
        kind,
        marks,
        seconds,
        interval_s,
        jitter_s,
        exclusive,
        pause_for_exclusive,
    };
    Ok((test, name))
}

/// A group's fields read in order, each mistake naming its line and column.
fn read_group(
    reader: &Reader,
    spanned: &Spanned<RawGroup>,
    host_index: &BTreeMap<String, usize>,
    test_index: &BTreeMap<String, usize>,
) -> Result<MeshGroup, MeshError> {
    let raw = spanned.get_ref();
    let name = raw.name.get_ref().clone();
    let host = |value: &Spanned<String>| -> Result<usize, MeshError> {
        host_index.get(value.get_ref()).copied().ok_or_else(|| {
            reader.at(
                value,
                format!(
                    "group '{name}': unknown host '{}' (no [[host]] has that name)",
                    value.get_ref()
                ),
            )
        })
    };
    let every_host = match &raw.hosts {
        None => true,
        Some(list) => list.iter().any(|h| h.get_ref() == "*"),
    };
    let hosts: Vec<usize> = match &raw.hosts {
        None => (0..host_index.len()).collect(),
        Some(_) if every_host => (0..host_index.len()).collect(),
        Some(list) => {
            let mut seen = BTreeSet::new();
            let mut hosts = Vec::new();
            for value in list {
                let index = host(value)?;
                if !seen.insert(index) {
                    return Err(reader.at(
                        value,
                        format!("group '{name}': host '{}' is listed twice", value.get_ref()),
                    ));
                }
                hosts.push(index);
            }
            hosts
        }
    };
    let shape = group_shape(reader, raw, &name, &hosts, &host)?;
    // Every host, discovered ones included, may be more than two once they are known.
    if matches!(shape, Shape::Full | Shape::Star { .. }) && hosts.len() < 2 && !every_host {
        return Err(reader.at(&raw.name, format!("group '{name}' needs two hosts or more")));
    }
    let both_ways = match raw.directions.as_ref().map(|d| (d, d.get_ref().as_str())) {
        None | Some((_, "both")) => true,
        Some((_, "one")) => false,
        Some((d, other)) => {
            return Err(reader.at(
                d,
                format!("group '{name}': directions '{other}' is not both or one"),
            ));
        }
    };
    if raw.tests.is_empty() {
        return Err(reader.at(&raw.name, format!("group '{name}' runs no tests")));
    }
    let mut tests = Vec::new();
    for value in &raw.tests {
        let index = test_index.get(value.get_ref()).copied().ok_or_else(|| {
            reader.at(
                value,
                format!(
                    "group '{name}': unknown test '{}' (no [[test]] has that name)",
                    value.get_ref()
                ),
            )
        })?;
        if !tests.contains(&index) {
            tests.push(index);
        }
    }
    Ok(MeshGroup {
        name,
        hosts,
        every_host,
        shape,
        both_ways,
        tests,
    })
}

/// A group's `shape` (full, a star round its `center`, or its `pairs`) over its `hosts`;
/// `host` finds a host named in it.
fn group_shape(
    reader: &Reader,
    raw: &RawGroup,
    name: &str,
    hosts: &[usize],
    host: &dyn Fn(&Spanned<String>) -> Result<usize, MeshError>,
) -> Result<Shape, MeshError> {
    let shape = match raw.shape.as_ref().map(|s| s.get_ref().as_str()) {
        None | Some("full") => Shape::Full,
        Some("star") => {
            let Some(center) = &raw.center else {
                return Err(reader.at(
                    raw.shape.as_ref().expect("star was given"),
                    format!("group '{name}': a star needs center = \"HOST\""),
                ));
            };
            let index = host(center)?;
            if !hosts.contains(&index) {
                return Err(reader.at(
                    center,
                    format!(
                        "group '{name}': the center '{}' is not among its hosts",
                        center.get_ref()
                    ),
                ));
            }
            Shape::Star { center: index }
        }
        Some("pairs") => {
            let Some(pairs) = &raw.pairs else {
                return Err(reader.at(
                    raw.shape.as_ref().expect("pairs was given"),
                    format!("group '{name}': pairs needs pairs = [[\"a\", \"b\"], ...]"),
                ));
            };
            let mut out = Vec::new();
            for pair in pairs {
                let [a, b] = pair.get_ref().as_slice() else {
                    return Err(
                        reader.at(pair, format!("group '{name}': a pair is two host names"))
                    );
                };
                let (a, b) = (host(a)?, host(b)?);
                if a == b {
                    return Err(reader.at(
                        pair,
                        format!("group '{name}': a pair of one host with itself"),
                    ));
                }
                out.push((a, b));
            }
            Shape::Pairs(out)
        }
        Some(other) => {
            return Err(reader.at(
                raw.shape.as_ref().expect("given"),
                format!("group '{name}': shape '{other}' is not full, star or pairs"),
            ));
        }
    };
    Ok(shape)
}

/// `[retention]`: ages of at least an hour (the aggregates' unit), the aggregates kept
/// longer than the rows they sum up; `hourly = "forever"` keeps them for good.
fn retention(reader: &Reader<'_>, raw: &RawRetention) -> Result<Retention, MeshError> {
    let age = |value: &Spanned<String>, key: &str| -> Result<f64, MeshError> {
        match linerate_model::units::parse_duration(value.get_ref()) {
            Ok(seconds) if seconds >= 3600.0 => Ok(seconds),
            Ok(_) => Err(reader.at(
                value,
                format!("{key} '{}' must be at least 1h", value.get_ref()),
            )),
            Err(_) => Err(reader.at(
                value,
                format!("{key} '{}' is not an age (14d, 12h, 2w)", value.get_ref()),
            )),
        }
    };
    let raw_s = age(&raw.raw, "raw")?;
    let hourly_s = match &raw.hourly {
        Some(value) if value.get_ref() == "forever" => None,
        Some(value) => Some(age(value, "hourly")?),
        None => Some(DEFAULT_HOURLY_S.max(raw_s)),
    };
    if let (Some(hourly), Some(value)) = (hourly_s, &raw.hourly) {
        if hourly < raw_s {
            return Err(reader.at(
                value,
                format!(
                    "hourly '{}' must be at least raw '{}': the aggregates sum up rows that are gone",
                    value.get_ref(),
                    raw.raw.get_ref()
                ),
            ));
        }
    }
    Ok(Retention { raw_s, hourly_s })
}
