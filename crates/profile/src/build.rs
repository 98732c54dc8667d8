//! From values as written to the checked model: one validator for both formats, so a
//! uperf file and its TOML conversion mean the same and fail the same way.

use crate::model::*;
use crate::source::{Filler, Pos, ProfileError, Text};
use linerate_model::units::parse_size;

/// The most threads one group may ask for.
pub const MAX_THREADS: u32 = 16_384;
/// The most files one `sendfilev` sends per execution.
pub const MAX_FILES_PER_SEND: u32 = 64;

pub(crate) struct RawProfile {
    pub name: Option<Text>,
    pub groups: Vec<RawGroup>,
}

pub(crate) struct RawGroup {
    pub pos: Pos,
    pub name: Option<Text>,
    pub threads: Option<Text>,
    pub host: Option<Text>,
    /// The default remote of the group's connect and accept operations.
    pub remote: Option<Text>,
    pub transactions: Vec<RawTransaction>,
}

pub(crate) struct RawTransaction {
    pub pos: Pos,
    pub iterations: Option<Text>,
    pub duration: Option<Text>,
    pub rate: Option<Text>,
    pub ops: Vec<RawOp>,
}

pub(crate) struct RawOp {
    pub kind: Text,
    /// Options in linerate's names; a flag has no value.
    pub options: Vec<(Text, Option<Text>)>,
}

type Result<T> = std::result::Result<T, ProfileError>;

pub(crate) fn build(filler: &Filler, raw: RawProfile) -> Result<Profile> {
    if raw.groups.is_empty() {
        return Err(filler.error(Pos { line: 1, col: 1 }, "the profile has no groups"));
    }
    let mut groups = Vec::new();
    for (index, group) in raw.groups.into_iter().enumerate() {
        groups.push(build_group(filler, index, group)?);
    }
    Ok(Profile {
        name: raw.name.map_or_else(|| "profile".into(), |t| t.value),
        groups,
    })
}

fn build_group(filler: &Filler, index: usize, raw: RawGroup) -> Result<Group> {
    let threads = match &raw.threads {
        None => 1,
        Some(text) => {
            let n = parse_count(filler, text, "threads")?;
            if n == 0 || n > u64::from(MAX_THREADS) {
                return Err(filler.error(
                    text.pos,
                    format!(
                        "threads '{}' must be between 1 and {MAX_THREADS}",
                        text.value
                    ),
                ));
            }
            n as u32
        }
    };
    if raw.transactions.is_empty() {
        return Err(filler.error(raw.pos, "the group has no transactions"));
    }
    let host = raw
        .host
        .map(|h| host_value(filler, &h, "host"))
        .transpose()?;
    let remote = raw
        .remote
        .map(|r| host_value(filler, &r, "remote"))
        .transpose()?;
    let mut transactions = Vec::new();
    for txn in raw.transactions {
        transactions.push(build_transaction(filler, txn, remote.as_deref())?);
    }
    check_connections(filler, &transactions, raw.pos)?;
    if let Some(host) = host.as_deref().filter(|h| !is_local(h)) {
        let sends_files = transactions
            .iter()
            .flat_map(|t| &t.ops)
            .any(|op| matches!(op.action, Action::Sendfile(_)));
        if sends_files {
            return Err(filler.error(
                raw.pos,
                format!("sendfile sends files of the host that reads the profile, so it cannot run in a group on host '{host}'"),
            ));
        }
    }
    Ok(Group {
        name: raw
            .name
            .map_or_else(|| format!("group{}", index + 1), |t| t.value),
        threads,
        host: host.filter(|h| !is_local(h)),
        transactions,
    })
}

/// `local` and `loopback` name the controller's own in-process server.
pub(crate) fn is_local(host: &str) -> bool {
    matches!(host, "local" | "loopback")
}

fn host_value(filler: &Filler, text: &Text, what: &str) -> Result<String> {
    let value = text.value.as_str();
    if value.is_empty() || value.chars().any(char::is_whitespace) {
        return Err(filler.error(
            text.pos,
            format!("{what} '{value}' is not a host name or address"),
        ));
    }
    Ok(value.to_string())
}

fn build_transaction(
    filler: &Filler,
    raw: RawTransaction,
    group_remote: Option<&str>,
) -> Result<Transaction> {
    let repeat = match (&raw.iterations, &raw.duration) {
        (Some(_), Some(d)) => {
            return Err(filler.error(
                d.pos,
                "a transaction has iterations or a duration, not both",
            ))
        }
        (Some(text), None) => Repeat::Iterations(parse_count(filler, text, "iterations")?),
        (None, Some(text)) => Repeat::Duration(parse_seconds(filler, text, "duration")?),
        (None, None) => Repeat::Iterations(1),
    };
    let rate = raw
        .rate
        .map(|text| parse_positive(filler, &text, "rate"))
        .transpose()?;
    if raw.ops.is_empty() {
        return Err(filler.error(raw.pos, "the transaction has no operations"));
    }
    let ops = raw
        .ops
        .into_iter()
        .map(|op| build_op(filler, op, group_remote))
        .collect::<Result<Vec<_>>>()?;
    Ok(Transaction { repeat, rate, ops })
}

/// The options each operation takes (besides `conn`, which every connection op takes).
fn allowed(kind: &str) -> &'static [&'static str] {
    match kind {
        "connect" | "accept" => &[
            "protocol",
            "remote",
            "window",
            "nodelay",
            "congestion",
            "cipher",
            "engine",
        ],
        // uperf files name the connection's host and protocol on disconnect too; the
        // connection is already known, so they change nothing.
        "disconnect" => &["protocol", "remote"],
        "nop" => &[],
        "write" | "read" | "sendto" | "recv" => &["size", "rsize", "count", "rate", "canfail"],
        "think" => &["duration", "idle", "busy"],
        "sendfile" => &["dir", "size", "count", "canfail"],
        "sendfilev" => &["dir", "nfiles", "size", "count", "canfail"],
        _ => &[],
    }
}

// Long: one match over the uperf flowop kinds, each arm reading its own options.
fn build_op(filler: &Filler, raw: RawOp, group_remote: Option<&str>) -> Result<Op> {
    let kind = raw.kind.value.as_str();
    if !matches!(
        kind,
        "connect"
            | "accept"
            | "disconnect"
            | "write"
            | "read"
            | "sendto"
            | "recv"
            | "think"
            | "nop"
            | "sendfile"
            | "sendfilev"
    ) {
        return Err(filler.error(
            raw.kind.pos,
            format!("unknown operation '{kind}' (connect, accept, disconnect, write, read, sendto, recv, sendfile, sendfilev, think, nop)"),
        ));
    }
    let mut conn = None;
    let mut get = std::collections::BTreeMap::new();
    for (key, value) in &raw.options {
        let takes_conn = !matches!(kind, "think" | "nop");
        if key.value == "conn" && takes_conn {
            let value = need_value(filler, key, value.as_ref())?;
            conn = Some(value.value.clone());
            continue;
        }
        if !allowed(kind).contains(&key.value.as_str()) {
            return Err(filler.error(
                key.pos,
                format!("'{}' is not an option of {kind}", key.value),
            ));
        }
        if get
            .insert(key.value.clone(), (key.clone(), value.clone()))
            .is_some()
        {
            return Err(filler.error(key.pos, format!("option '{}' is given twice", key.value)));
        }
    }
    let value = |name: &str| -> Result<Option<&Text>> {
        match get.get(name) {
            None => Ok(None),
            Some((key, value)) => need_value(filler, key, value.as_ref()).map(Some),
        }
    };
    let flag = |name: &str| -> Result<bool> {
        match get.get(name) {
            None => Ok(false),
            Some((_, None)) => Ok(true),
            Some((key, Some(text))) => match text.value.as_str() {
                "true" | "yes" | "1" | "on" => Ok(true),
                "false" | "no" | "0" | "off" => Ok(false),
                other => Err(filler.error(
                    text.pos,
                    format!("{} '{other}' is not true or false", key.value),
                )),
            },
        }
    };
    let count = || -> Result<u64> {
        match value("count")? {
            None => Ok(1),
            Some(text) => {
                let n = parse_count(filler, text, "count")?;
                if n == 0 {
                    return Err(filler.error(text.pos, "count '0' must be at least 1"));
                }
                Ok(n)
            }
        }
    };
    let action = match kind {
        "sendfile" | "sendfilev" => {
            let Some(dir) = value("dir")? else {
                return Err(filler.error(
                    raw.kind.pos,
                    format!("{kind} needs dir=, the directory whose files it sends"),
                ));
            };
            let nfiles = match (kind, value("nfiles")?) {
                ("sendfile", _) => None,
                (_, None) => Some(1),
                (_, Some(text)) => {
                    let n = parse_count(filler, text, "nfiles")?;
                    if n == 0 || n > u64::from(MAX_FILES_PER_SEND) {
                        return Err(filler.error(
                            text.pos,
                            format!(
                                "nfiles '{}' must be between 1 and {MAX_FILES_PER_SEND}",
                                text.value
                            ),
                        ));
                    }
                    Some(n as u32)
                }
            };
            // uperf's size on a sendfile is the bytes per sendfile(2) call; 0 or none
            // sends a file in one call.
            let chunk = value("size")?
                .map(|t| parse_bytes(filler, t, "size"))
                .transpose()?
                .filter(|&n| n > 0);
            Action::Sendfile(FileSend {
                dir: dir.value.clone(),
                files: Vec::new(),
                nfiles,
                chunk,
                count: count()?,
                canfail: flag("canfail")?,
            })
        }
        "connect" | "accept" => {
            let protocol = match value("protocol")? {
                None => Protocol::Tcp,
                Some(text) => parse_protocol(filler, text)?,
            };
            let remote = match value("remote")? {
                Some(text) => Some(host_value(filler, text, "remote")?),
                None => group_remote.map(str::to_string),
            };
            let window = value("window")?
                .map(|t| parse_bytes(filler, t, "window"))
                .transpose()?;
            let congestion = value("congestion")?.map(|t| t.value.clone());
            let tls = |name: &str| -> Result<Option<String>> {
                match value(name)? {
                    Some(text) if protocol != Protocol::Ssl => Err(filler.error(
                        text.pos,
                        format!("'{name}' applies to protocol=ssl connections"),
                    )),
                    Some(text) => Ok(Some(text.value.clone())),
                    None => Ok(None),
                }
            };
            let (cipher, engine) = (tls("cipher")?, tls("engine")?);
            if let Some(cipher) = &cipher {
                if !linerate_model::CIPHERS.contains(&cipher.as_str()) {
                    let pos = value("cipher")?.map_or(raw.kind.pos, |t| t.pos);
                    return Err(filler.error(
                        pos,
                        format!(
                            "unknown cipher '{cipher}' (one of: {})",
                            linerate_model::CIPHERS.join(", ")
                        ),
                    ));
                }
            }
            let endpoint = Endpoint {
                protocol,
                remote: remote.filter(|r| !is_local(r)),
                window,
                nodelay: flag("nodelay")?,
                congestion,
                cipher,
                engine,
                marks: None,
                source: None,
            };
            if kind == "connect" {
                Action::Connect(endpoint)
            } else {
                Action::Accept(endpoint)
            }
        }
        "disconnect" => Action::Disconnect,
        "nop" => Action::Nop,
        "think" => {
            let Some(duration) = value("duration")? else {
                return Err(filler.error(raw.kind.pos, "think needs a duration"));
            };
            let busy = flag("busy")?;
            if busy && flag("idle")? {
                return Err(filler.error(duration.pos, "think is idle or busy, not both"));
            }
            Action::Think(Think {
                seconds: parse_seconds(filler, duration, "duration")?,
                busy,
            })
        }
        _ => {
            let Some(size_text) = value("size")? else {
                return Err(filler.error(raw.kind.pos, format!("{kind} needs a size")));
            };
            let size = parse_message_size(filler, size_text)?;
            let rsize = value("rsize")?
                .map(|t| parse_message_size(filler, t))
                .transpose()?;
            if let (Some(rsize), "write" | "read") = (rsize, kind) {
                if !matches!((size, rsize), (Size::Fixed(_), Size::Fixed(_))) {
                    let pos = value("rsize")?.map_or(raw.kind.pos, |t| t.pos);
                    return Err(filler.error(
                        pos,
                        "rsize needs fixed sizes on a byte stream: the peer moves the same bytes in rsize pieces, and a random size leaves it not knowing how many",
                    ));
                }
            }
            let count = count()?;
            let rate = value("rate")?
                .map(|t| parse_positive(filler, t, "rate"))
                .transpose()?;
            let transfer = Transfer {
                size,
                rsize,
                count,
                last: None,
                rate,
                canfail: flag("canfail")?,
            };
            match kind {
                "write" => Action::Write(transfer),
                "read" => Action::Read(transfer),
                "sendto" => Action::Sendto(transfer),
                _ => Action::Recv(transfer),
            }
        }
    };
    Ok(Op { conn, action })
}

/// Every data operation needs a connection opened before it in the thread's order, and
/// datagram sizes must fit a datagram.
fn check_connections(filler: &Filler, transactions: &[Transaction], at: Pos) -> Result<()> {
    let mut open: std::collections::BTreeMap<Option<&str>, Protocol> = Default::default();
    for txn in transactions {
        for op in &txn.ops {
            let name = op.conn.as_deref();
            match &op.action {
                Action::Connect(e) | Action::Accept(e) => {
                    open.insert(name, e.protocol);
                }
                Action::Disconnect => {}
                action => {
                    if action.sends().is_none() {
                        continue;
                    }
                    let protocol = open.get(&name).copied();
                    let Some(protocol) = protocol else {
                        return Err(filler.error(
                            at,
                            format!(
                                "{} uses {} before any connect or accept opens it",
                                action.name(),
                                name.map_or("the anonymous connection".into(), |n| format!(
                                    "connection '{n}'"
                                ))
                            ),
                        ));
                    };
                    let Some((transfer, _)) = action.transfer() else {
                        if protocol == Protocol::Udp {
                            return Err(filler.error(
                                at,
                                format!(
                                    "{} needs a tcp or ssl connection: files go over a byte stream",
                                    action.name()
                                ),
                            ));
                        }
                        continue;
                    };
                    let biggest = transfer.size.max().max(transfer.rsize.map_or(0, Size::max));
                    if protocol == Protocol::Udp && biggest > 65_507 {
                        return Err(filler.error(
                            at,
                            format!("{} of {biggest} bytes does not fit one UDP datagram (65507 at most)", action.name()),
                        ));
                    }
                    if biggest == 0 {
                        return Err(filler.error(at, format!("{} of 0 bytes", action.name())));
                    }
                }
            }
        }
    }
    Ok(())
}

fn need_value<'a>(filler: &Filler, key: &Text, value: Option<&'a Text>) -> Result<&'a Text> {
    value.ok_or_else(|| filler.error(key.pos, format!("option '{}' needs a value", key.value)))
}

fn parse_protocol(filler: &Filler, text: &Text) -> Result<Protocol> {
    match text.value.to_ascii_lowercase().as_str() {
        "tcp" => Ok(Protocol::Tcp),
        "udp" => Ok(Protocol::Udp),
        "ssl" => Ok(Protocol::Ssl),
        other @ ("sctp" | "vsock" | "rds" | "udapl") => Err(filler.error(
            text.pos,
            format!("protocol '{other}' is not supported: linerate runs tcp, udp and ssl profiles"),
        )),
        other => Err(filler.error(
            text.pos,
            format!("unknown protocol '{other}' (tcp, udp or ssl)"),
        )),
    }
}

fn parse_count(filler: &Filler, text: &Text, what: &str) -> Result<u64> {
    text.value.parse::<u64>().map_err(|_| {
        filler.error(
            text.pos,
            format!("{what} '{}' is not a whole number", text.value),
        )
    })
}

fn parse_positive(filler: &Filler, text: &Text, what: &str) -> Result<f64> {
    match text.value.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(filler.error(
            text.pos,
            format!("{what} '{}' is not a positive number", text.value),
        )),
    }
}

fn parse_bytes(filler: &Filler, text: &Text, what: &str) -> Result<u64> {
    parse_size(&text.value).map_err(|_| {
        filler.error(
            text.pos,
            format!("{what} '{}' is not a size like 64k", text.value),
        )
    })
}

/// `8k`, or `rand(4k,8k)`.
fn parse_message_size(filler: &Filler, text: &Text) -> Result<Size> {
    let value = text.value.replace(' ', "");
    if let Some(inner) = value
        .strip_prefix("rand(")
        .and_then(|rest| rest.strip_suffix(')'))
    {
        let bad = || {
            filler.error(
                text.pos,
                format!("size '{}' is not rand(MIN,MAX) with MIN <= MAX", text.value),
            )
        };
        let (min, max) = inner.split_once(',').ok_or_else(bad)?;
        let (min, max) = (
            parse_size(min).map_err(|_| bad())?,
            parse_size(max).map_err(|_| bad())?,
        );
        if min > max || max == 0 {
            return Err(bad());
        }
        return Ok(Size::Random { min, max });
    }
    Ok(Size::Fixed(parse_bytes(filler, text, "size")?))
}

/// `30s`, `100ms`, `1.5` (seconds), `2m`.
pub(crate) fn parse_seconds(filler: &Filler, text: &Text, what: &str) -> Result<f64> {
    let value = text.value.trim();
    match linerate_model::units::parse_duration(value).ok() {
        Some(s) if s.is_finite() && s >= 0.0 => Ok(s),
        _ => Err(filler.error(
            text.pos,
            format!("{what} '{value}' is not a duration like 30s or 100ms"),
        )),
    }
}
