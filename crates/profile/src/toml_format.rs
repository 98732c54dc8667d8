//! linerate's own profile format, TOML:
//!
//! ```toml
//! name = "tcp transmit"
//! [vars]                       # defaults for ${name}; --set and the environment win
//! conns = 8
//!
//! [[group]]
//! threads = "${conns}"
//! remote = "${server}"         # where connect operations go (default: loopback)
//!
//! [[group.transaction]]
//! iterations = 1
//! ops = [{ op = "connect", protocol = "tcp", window = "256k", nodelay = true }]
//!
//! [[group.transaction]]
//! duration = "30s"
//! ops = [{ op = "write", size = "8k", count = 10 }]
//!
//! [[group.transaction]]
//! ops = [{ op = "disconnect" }]
//! ```

use crate::build::{self, RawGroup, RawOp, RawProfile, RawTransaction};
use crate::model::*;
use crate::source::{Filler, Pos, ProfileError, Text, Vars};
use linerate_model::units::format_size_compact;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt::Write;
use toml::Spanned;

type Value = Spanned<toml::Value>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlProfile {
    name: Option<Value>,
    #[serde(default)]
    vars: BTreeMap<String, toml::Value>,
    #[serde(default)]
    group: Vec<Spanned<TomlGroup>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlGroup {
    name: Option<Value>,
    threads: Option<Value>,
    host: Option<Value>,
    remote: Option<Value>,
    #[serde(default)]
    transaction: Vec<Spanned<TomlTransaction>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlTransaction {
    iterations: Option<Value>,
    duration: Option<Value>,
    rate: Option<Value>,
    #[serde(default)]
    ops: Vec<Spanned<BTreeMap<Spanned<String>, Value>>>,
}

/// Reads a TOML profile; `file` names it in errors.
pub fn parse(file: &str, text: &str, vars: &Vars) -> Result<Profile, ProfileError> {
    let at = |offset: usize| Pos::at(text, offset);
    let parsed: TomlProfile = toml::from_str(text).map_err(|e| ProfileError {
        file: file.to_string(),
        pos: e.span().map_or(Pos { line: 1, col: 1 }, |s| at(s.start)),
        message: e.message().trim().to_string(),
    })?;
    let defaults = parsed
        .vars
        .iter()
        .map(|(k, v)| (k.clone(), plain(v).unwrap_or_default()))
        .collect();
    let filler = Filler {
        file,
        vars,
        defaults,
        bare_dollar: false,
    };
    let text_of = |value: &Value| -> Result<Text, ProfileError> {
        let pos = at(value.span().start);
        match plain(value.get_ref()) {
            Some(raw) => filler.fill(&raw, pos),
            None => Err(filler.error(pos, "expected a string, number or true/false")),
        }
    };
    let opt = |value: &Option<Value>| value.as_ref().map(text_of).transpose();
    let mut groups = Vec::new();
    for group in &parsed.group {
        let g = group.get_ref();
        let mut transactions = Vec::new();
        for txn in &g.transaction {
            let t = txn.get_ref();
            let mut ops = Vec::new();
            for op in &t.ops {
                let op_pos = at(op.span().start);
                let mut kind = None;
                let mut options = Vec::new();
                for (key, value) in op.get_ref() {
                    let key_text = Text {
                        value: key.get_ref().clone(),
                        pos: at(key.span().start),
                    };
                    let value = text_of(value)?;
                    if key.get_ref() == "op" {
                        kind = Some(value);
                    } else {
                        options.push((key_text, Some(value)));
                    }
                }
                let Some(kind) = kind else {
                    return Err(filler.error(op_pos, "the operation has no 'op' key"));
                };
                ops.push(RawOp { kind, options });
            }
            transactions.push(RawTransaction {
                pos: at(txn.span().start),
                iterations: opt(&t.iterations)?,
                duration: opt(&t.duration)?,
                rate: opt(&t.rate)?,
                ops,
            });
        }
        groups.push(RawGroup {
            pos: at(group.span().start),
            name: opt(&g.name)?,
            threads: opt(&g.threads)?,
            host: opt(&g.host)?,
            remote: opt(&g.remote)?,
            transactions,
        });
    }
    let raw = RawProfile {
        name: opt(&parsed.name)?,
        groups,
    };
    build::build(&filler, raw)
}

/// A scalar as text; tables and arrays are not values.
fn plain(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

fn quote(text: &str) -> String {
    toml::Value::String(text.to_string()).to_string()
}

/// A duration as the format writes it: whole units where exact, else seconds.
fn seconds_text(seconds: f64) -> String {
    let ms = seconds * 1e3;
    if seconds >= 1.0 && seconds.fract() == 0.0 {
        format!("{seconds}s")
    } else if ms.fract() == 0.0 && ms >= 1.0 {
        format!("{ms}ms")
    } else {
        format!("{seconds}")
    }
}

fn size_text(size: Size) -> String {
    match size {
        Size::Fixed(n) => format_size_compact(n),
        Size::Random { min, max } => {
            format!(
                "rand({},{})",
                format_size_compact(min),
                format_size_compact(max)
            )
        }
    }
}

fn rate_text(rate: f64) -> String {
    if rate.fract() == 0.0 {
        format!("{}", rate as u64)
    } else {
        format!("{rate}")
    }
}

/// The profile in linerate's TOML format; reading it back gives the same profile.
pub fn to_toml(profile: &Profile) -> String {
    let mut out = format!("name = {}\n", quote(&profile.name));
    for group in &profile.groups {
        let _ = write!(
            out,
            "\n[[group]]\nname = {}\nthreads = {}\n",
            quote(&group.name),
            group.threads
        );
        if let Some(host) = &group.host {
            let _ = writeln!(out, "host = {}", quote(host));
        }
        for txn in &group.transactions {
            out.push_str("\n[[group.transaction]]\n");
            match txn.repeat {
                Repeat::Iterations(n) => {
                    let _ = writeln!(out, "iterations = {n}");
                }
                Repeat::Duration(s) => {
                    let _ = writeln!(out, "duration = {}", quote(&seconds_text(s)));
                }
            }
            if let Some(rate) = txn.rate {
                let _ = writeln!(out, "rate = {}", rate_text(rate));
            }
            out.push_str("ops = [\n");
            for op in &txn.ops {
                let _ = writeln!(out, "  {},", op_table(op));
            }
            out.push_str("]\n");
        }
    }
    out
}

fn op_table(op: &Op) -> String {
    let mut fields = vec![format!("op = {}", quote(op.action.name()))];
    if let Some(conn) = &op.conn {
        fields.push(format!("conn = {}", quote(conn)));
    }
    match &op.action {
        Action::Connect(e) | Action::Accept(e) => {
            fields.push(format!("protocol = {}", quote(e.protocol.name())));
            fields.push(format!(
                "remote = {}",
                quote(e.remote.as_deref().unwrap_or("local"))
            ));
            if let Some(window) = e.window {
                fields.push(format!("window = {}", quote(&format_size_compact(window))));
            }
            if e.nodelay {
                fields.push("nodelay = true".into());
            }
            if let Some(cc) = &e.congestion {
                fields.push(format!("congestion = {}", quote(cc)));
            }
            if let Some(cipher) = &e.cipher {
                fields.push(format!("cipher = {}", quote(cipher)));
            }
            if let Some(engine) = &e.engine {
                fields.push(format!("engine = {}", quote(engine)));
            }
        }
        Action::Write(t) | Action::Read(t) | Action::Sendto(t) | Action::Recv(t) => {
            fields.push(format!("size = {}", quote(&size_text(t.size))));
            if let Some(rsize) = t.rsize {
                fields.push(format!("rsize = {}", quote(&size_text(rsize))));
            }
            if t.count != 1 {
                fields.push(format!("count = {}", t.count));
            }
            if let Some(rate) = t.rate {
                fields.push(format!("rate = {}", rate_text(rate)));
            }
            if t.canfail {
                fields.push("canfail = true".into());
            }
        }
        Action::Think(t) => {
            fields.push(format!("duration = {}", quote(&seconds_text(t.seconds))));
            if t.busy {
                fields.push("busy = true".into());
            }
        }
        // A mirror's receive_files is written for completeness (a mirrored group shown to
        // a user); no profile file can name it, so it does not read back.
        Action::Sendfile(f) | Action::ReceiveFiles(f) => {
            fields.push(format!("dir = {}", quote(&f.dir)));
            if let Some(n) = f.nfiles {
                fields.push(format!("nfiles = {n}"));
            }
            if let Some(chunk) = f.chunk {
                fields.push(format!("size = {}", quote(&format_size_compact(chunk))));
            }
            if f.count != 1 {
                fields.push(format!("count = {}", f.count));
            }
            if f.canfail {
                fields.push("canfail = true".into());
            }
        }
        Action::Disconnect | Action::Nop => {}
    }
    format!("{{ {} }}", fields.join(", "))
}
