//! uperf's XML profiles, read by uperf's documented semantics (its manual, `uperf.xml`):
//! `<profile name>` holds `<group nthreads|nprocs>`s, each a list of `<transaction
//! iterations|duration [rate]>`s, each a list of `<flowop type options>`. Options are
//! space-separated `key=value` pairs or bare flags; `$name` values come from the
//! environment (and from `--set`).
//!
//! Whatever linerate cannot run the way uperf would (SCTP, VSOCK, RDS, uDAPL, a FreeBSD
//! TCP stack) is refused with the element named, before any value is filled in: an
//! unsupported file is reported as such even when its variables are unset. What uperf
//! accepts and then ignores (a `duration` on a flowop other than think) is ignored here
//! too, with a note, so a profile moves the same data under both tools.

use crate::build::{self, RawGroup, RawOp, RawProfile, RawTransaction};
use crate::model::Profile;
use crate::source::{Filler, Pos, ProfileError, Text, Vars};

/// uperf option names and linerate's, where they differ or are the same.
fn option_name(uperf: &str, flowop: &str) -> Option<&'static str> {
    Some(match uperf {
        "remotehost" => "remote",
        "protocol" => "protocol",
        "wndsz" => "window",
        "tcp_nodelay" => "nodelay",
        "cc" => "congestion",
        "size" => "size",
        "rsize" => "rsize",
        "count" => "count",
        "rate" => "rate",
        "canfail" => "canfail",
        "conn" => "conn",
        "duration" if flowop == "think" => "duration",
        "idle" => "idle",
        "engine" => "engine",
        "cipher" => "cipher",
        "busy" => "busy",
        "dir" => "dir",
        "nfiles" => "nfiles",
        _ => return None,
    })
}

/// Why an element or option cannot run, when linerate knows it as a uperf feature.
fn unsupported_option(key: &str) -> Option<String> {
    let why = match key {
        "encaps" => "SCTP encapsulation belongs to protocol=sctp, which linerate does not run",
        "stack" => "choosing a FreeBSD TCP stack has no Linux counterpart",
        "async" | "subtype" | "waittype" | "waitfor" => {
            "asynchronous RDMA operations belong to protocol=udapl, which linerate does not run"
        }
        "localhost" => "binding a local address per connection is not supported",
        "non_blocking" | "poll_timeout" => {
            "linerate's threads use blocking sockets with bounded waits; this I/O option has no effect there"
        }
        _ if key.starts_with("sctp_") => {
            "SCTP options belong to protocol=sctp, which linerate does not run"
        }
        _ => return None,
    };
    Some(format!("uperf option '{key}' is not supported: {why}"))
}

fn unsupported_flowop(kind: &str) -> Option<String> {
    let why = match kind {
        "wait" => "waiting on asynchronous operations belongs to protocol=udapl",
        "redv" => "redv is not supported",
        _ => return None,
    };
    Some(format!("uperf flowop '{kind}' is not supported: {why}"))
}

/// One option of a flowop's `options` string, with its byte offset in the file.
struct RawOption<'a> {
    key: &'a str,
    value: Option<&'a str>,
    offset: usize,
}

fn split_options(options: &str, base: usize) -> Vec<RawOption<'_>> {
    let mut out = Vec::new();
    let mut start = None;
    let bytes = options.as_bytes();
    for i in 0..=bytes.len() {
        let space = i == bytes.len() || bytes[i].is_ascii_whitespace();
        match (space, start) {
            (false, None) => start = Some(i),
            (true, Some(s)) => {
                let token = &options[s..i];
                let (key, value) = match token.split_once('=') {
                    Some((k, v)) => (k, Some(v)),
                    None => (token, None),
                };
                out.push(RawOption {
                    key,
                    value,
                    offset: base + s,
                });
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// Reads a uperf profile; `file` names it in errors.
pub fn parse(file: &str, text: &str, vars: &Vars) -> Result<Profile, ProfileError> {
    parse_noting(file, text, vars).map(|(profile, _)| profile)
}

/// Reads a uperf profile, with a note (`file:line:col: ...`) for every option that uperf
/// ignores and linerate ignores with it.
// Long: one pass over the XML's events, a match per element with its position for errors.
pub fn parse_noting(
    file: &str,
    text: &str,
    vars: &Vars,
) -> Result<(Profile, Vec<String>), ProfileError> {
    let mut notes = Vec::new();
    let filler = Filler {
        file,
        vars,
        defaults: Default::default(),
        bare_dollar: true,
    };
    let at = |offset: usize| Pos::at(text, offset);
    let doc = roxmltree::Document::parse(text).map_err(|e| {
        let p = e.pos();
        filler.error(
            Pos {
                line: p.row as usize,
                col: p.col as usize,
            },
            format!("not well-formed XML: {e}"),
        )
    })?;
    let root = doc.root_element();
    if root.tag_name().name() != "profile" {
        return Err(filler.error(
            at(root.range().start),
            format!(
                "the root element is <{}>, not <profile>",
                root.tag_name().name()
            ),
        ));
    }
    refuse_unsupported(&filler, text, root)?;
    let attr_text = |node: roxmltree::Node, name: &str| -> Result<Option<Text>, ProfileError> {
        match node.attribute_node(name) {
            None => Ok(None),
            Some(attr) => filler
                .fill(attr.value(), at(attr.range_value().start))
                .map(Some),
        }
    };
    let check_attrs = |node: roxmltree::Node, known: &[&str]| -> Result<(), ProfileError> {
        for attr in node.attributes() {
            if !known.contains(&attr.name()) {
                return Err(filler.error(
                    at(attr.range().start),
                    format!(
                        "unknown attribute '{}' of <{}>",
                        attr.name(),
                        node.tag_name().name()
                    ),
                ));
            }
        }
        Ok(())
    };
    check_attrs(root, &["name"])?;
    let mut groups = Vec::new();
    for group in elements(&filler, text, root, "group")? {
        check_attrs(group, &["nthreads", "nprocs", "name"])?;
        let threads = match attr_text(group, "nthreads")? {
            Some(t) => Some(t),
            None => attr_text(group, "nprocs")?,
        };
        let mut transactions = Vec::new();
        for txn in elements(&filler, text, group, "transaction")? {
            check_attrs(txn, &["iterations", "duration", "rate"])?;
            let mut ops = Vec::new();
            for flowop in elements(&filler, text, txn, "flowop")? {
                check_attrs(flowop, &["type", "options"])?;
                let Some(kind) = attr_text(flowop, "type")? else {
                    return Err(filler.error(at(flowop.range().start), "a flowop without a type"));
                };
                let mut options = Vec::new();
                if let Some(attr) = flowop.attribute_node("options") {
                    for option in split_options(attr.value(), attr.range_value().start) {
                        let pos = at(option.offset);
                        if option.key == "duration" && kind.value != "think" {
                            // uperf parses a flowop's duration and only think reads it
                            // (its manual calls it deprecated): the flowop runs `count`
                            // times whatever it says.
                            notes.push(format!(
                                "{file}:{pos}: duration on a {} is ignored, as uperf ignores it (only think uses a flowop's duration); give the transaction a duration to run for a time",
                                kind.value
                            ));
                            continue;
                        }
                        if option.key == "nfiles" && kind.value == "sendfile" {
                            // uperf parses every option for every flowop; sendfile sends
                            // one file at a time and never reads nfiles (sendfilev does).
                            notes.push(format!(
                                "{file}:{pos}: nfiles on a sendfile is ignored, as uperf ignores it (only sendfilev sends several files a call)"
                            ));
                            continue;
                        }
                        let Some(name) = option_name(option.key, &kind.value) else {
                            return Err(filler.error(
                                pos,
                                format!(
                                    "unknown uperf option '{}' of flowop {}",
                                    option.key, kind.value
                                ),
                            ));
                        };
                        let value = option
                            .value
                            .map(|v| filler.fill(v, at(option.offset + option.key.len() + 1)))
                            .transpose()?;
                        options.push((
                            Text {
                                value: name.to_string(),
                                pos,
                            },
                            value,
                        ));
                    }
                }
                ops.push(RawOp { kind, options });
            }
            transactions.push(RawTransaction {
                pos: at(txn.range().start),
                iterations: attr_text(txn, "iterations")?,
                duration: attr_text(txn, "duration")?,
                rate: attr_text(txn, "rate")?,
                ops,
            });
        }
        groups.push(RawGroup {
            pos: at(group.range().start),
            name: attr_text(group, "name")?,
            threads,
            host: None,
            remote: None,
            transactions,
        });
    }
    let raw = RawProfile {
        name: root.attribute("name").map(|n| Text {
            value: n.to_string(),
            pos: Pos::default(),
        }),
        groups,
    };
    Ok((build::build(&filler, raw)?, notes))
}

/// Refuses the first element linerate cannot run, by its literal text.
fn refuse_unsupported(
    filler: &Filler,
    text: &str,
    root: roxmltree::Node,
) -> Result<(), ProfileError> {
    for flowop in root
        .descendants()
        .filter(|n| n.is_element() && n.tag_name().name() == "flowop")
    {
        let kind = flowop.attribute("type").unwrap_or_default();
        if let Some(message) = unsupported_flowop(kind) {
            let pos = flowop
                .attribute_node("type")
                .map_or(flowop.range().start, |a| a.range_value().start);
            return Err(filler.error(Pos::at(text, pos), message));
        }
        let Some(attr) = flowop.attribute_node("options") else {
            continue;
        };
        for option in split_options(attr.value(), attr.range_value().start) {
            let pos = Pos::at(text, option.offset);
            if option.key == "protocol" {
                let value = option.value.unwrap_or_default().to_ascii_lowercase();
                if matches!(value.as_str(), "sctp" | "vsock" | "rds" | "udapl") {
                    return Err(filler.error(
                        pos,
                        format!("protocol '{value}' is not supported: linerate runs tcp, udp and ssl profiles"),
                    ));
                }
            }
        }
        for option in split_options(attr.value(), attr.range_value().start) {
            if let Some(message) = unsupported_option(option.key) {
                return Err(filler.error(Pos::at(text, option.offset), message));
            }
        }
    }
    Ok(())
}

/// The element children of `node`, which must all be `<want>`.
fn elements<'a, 'input>(
    filler: &Filler,
    text: &str,
    node: roxmltree::Node<'a, 'input>,
    want: &'static str,
) -> Result<Vec<roxmltree::Node<'a, 'input>>, ProfileError> {
    let mut out = Vec::new();
    for child in node.children().filter(roxmltree::Node::is_element) {
        if child.tag_name().name() != want {
            return Err(filler.error(
                Pos::at(text, child.range().start),
                format!(
                    "unexpected element <{}> in <{}> (expected <{want}>)",
                    child.tag_name().name(),
                    node.tag_name().name()
                ),
            ));
        }
        out.push(child);
    }
    Ok(out)
}
