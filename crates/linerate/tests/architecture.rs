//! The code's shape, checked: no module of a crate imports, through others, a module that
//! imports it (an import ring). A ring makes the modules in it one unit that cannot be
//! understood, tested or moved apart; five of them once grew one back edge at a time.
//!
//! Modules are the files under each crate's `src` (`a/mod.rs` is module `a`); an edge is a
//! `crate::` or `super::` path in the code (comments aside) that names another module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `dir`, with its module name relative to `src`.
fn modules(src: &Path, dir: &Path, out: &mut BTreeMap<String, PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            modules(src, &path, out);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let relative = path.strip_prefix(src).unwrap().with_extension("");
        let mut name = relative.to_string_lossy().replace('\\', "/");
        if let Some(parent) = name.strip_suffix("/mod") {
            name = parent.to_string();
        }
        if name != "lib" && name != "main" {
            out.insert(name, path);
        }
    }
}

/// The module a path's segments (after `crate::`, from `base`) name: the longest prefix
/// that is a module.
fn target(known: &BTreeMap<String, PathBuf>, base: &str, segments: &[&str]) -> Option<String> {
    (1..=segments.len()).rev().find_map(|n| {
        let mut name = base.to_string();
        for segment in &segments[..n] {
            if !name.is_empty() {
                name.push('/');
            }
            name.push_str(segment);
        }
        known.contains_key(&name).then_some(name)
    })
}

/// The edges of one crate: module to the modules it names.
fn edges(known: &BTreeMap<String, PathBuf>) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, path) in known {
        let text = std::fs::read_to_string(path).unwrap();
        let parent = module.rsplit_once('/').map_or("", |(p, _)| p);
        let is_mod_rs = path.ends_with("mod.rs");
        let here = if is_mod_rs { module.as_str() } else { parent };
        let targets = out.entry(module.clone()).or_default();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or("");
            for (prefix, base) in [("crate::", ""), ("super::", here)] {
                let base = if prefix == "super::" && is_mod_rs {
                    module.rsplit_once('/').map_or("", |(p, _)| p)
                } else {
                    base
                };
                for (at, _) in code.match_indices(prefix) {
                    let rest = &code[at + prefix.len()..];
                    let segments: Vec<&str> = rest
                        .split("::")
                        .map(|s| {
                            s.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                                .next()
                                .unwrap_or("")
                        })
                        .take_while(|s| !s.is_empty())
                        .collect();
                    if let Some(to) = target(known, base, &segments) {
                        if to != *module {
                            targets.insert(to);
                        }
                    }
                }
            }
        }
    }
    out
}

/// The strongly connected components of more than one module (Tarjan's algorithm).
fn rings(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(walk: &mut Walk<'a>, node: &'a str) {
        let n = walk.index.len();
        walk.index.insert(node, n);
        walk.low.insert(node, n);
        walk.stack.push(node);
        walk.on_stack.insert(node);
        let graph = walk.graph;
        for next in graph.get(node).into_iter().flatten() {
            if !walk.index.contains_key(next.as_str()) {
                visit(walk, next);
                let low = walk.low[node].min(walk.low[next.as_str()]);
                walk.low.insert(node, low);
            } else if walk.on_stack.contains(next.as_str()) {
                let low = walk.low[node].min(walk.index[next.as_str()]);
                walk.low.insert(node, low);
            }
        }
        if walk.low[node] == walk.index[node] {
            let mut component = Vec::new();
            while let Some(top) = walk.stack.pop() {
                walk.on_stack.remove(top);
                component.push(top.to_string());
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                walk.found.push(component);
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node.as_str()) {
            visit(&mut walk, node);
        }
    }
    walk.found
}

#[test]
fn no_crate_has_an_import_ring() {
    let crates = workspace().join("crates");
    let mut found = Vec::new();
    let mut counted = 0;
    for entry in std::fs::read_dir(&crates).unwrap() {
        let src = entry.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        let mut known = BTreeMap::new();
        modules(&src, &src, &mut known);
        counted += known.len();
        for ring in rings(&edges(&known)) {
            found.push(format!("{}: {}", src.display(), ring.join(", ")));
        }
    }
    assert!(
        counted > 50,
        "only {counted} modules found under {}",
        crates.display()
    );
    assert!(found.is_empty(), "import rings:\n{}", found.join("\n"));
}

#[test]
fn the_ring_finder_finds_a_ring_and_no_false_one() {
    let graph = |pairs: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in pairs {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    assert_eq!(
        rings(&graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])),
        vec![vec!["a".to_string(), "b".into(), "c".into()]]
    );
    assert!(rings(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])).is_empty());
    // Paths resolve to the longest module prefix, `super::` from a file's parent.
    let mut known = BTreeMap::new();
    let dir = std::env::temp_dir().join(format!("linerate-rings-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("p")).unwrap();
    for (name, text) in [
        (
            "x",
            "use crate::p::y::Thing;\n// crate::z in a comment is no edge\n",
        ),
        ("p/y", "use super::z::f;\n"),
        ("p/z", "fn g() { crate::x::h() }\n"),
        ("z", ""),
    ] {
        let path = dir.join(format!("{name}.rs"));
        std::fs::write(&path, text).unwrap();
        known.insert(name.to_string(), path);
    }
    let found = edges(&known);
    assert_eq!(found["x"], BTreeSet::from(["p/y".to_string()]));
    assert_eq!(found["p/y"], BTreeSet::from(["p/z".to_string()]));
    assert_eq!(
        rings(&found),
        vec![vec!["p/y".to_string(), "p/z".into(), "x".into()]]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each crate's `linerate-*` dependencies, from its manifest's `[dependencies]`.
fn manifest_graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for entry in std::fs::read_dir(workspace().join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let mut section = "";
        let mut deps = BTreeSet::new();
        for line in manifest.lines().map(str::trim) {
            if line.starts_with('[') {
                section = line;
            } else if section == "[dependencies]" {
                if let Some(rest) = line.strip_prefix("linerate-") {
                    let dep: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    deps.insert(dep);
                }
            }
        }
        graph.insert(name, deps);
    }
    graph
}

/// The crate graph docs/architecture.md draws: the `text` block after its marker, one
/// `crate: dependency, dependency` line per crate (`-` for none).
fn documented_graph() -> BTreeMap<String, BTreeSet<String>> {
    let doc = std::fs::read_to_string(workspace().join("docs/architecture.md")).unwrap();
    let (_, after) = doc
        .split_once("<!-- crate graph -->")
        .expect("docs/architecture.md marks its crate graph");
    let block = after
        .split("```")
        .nth(1)
        .expect("a fenced block after the marker");
    block
        .lines()
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .map(|(name, deps)| {
            let deps = deps
                .split(',')
                .map(str::trim)
                .filter(|d| !d.is_empty() && *d != "-")
                .map(str::to_string)
                .collect();
            (name.trim().to_string(), deps)
        })
        .collect()
}

#[test]
fn the_documented_crate_graph_is_the_manifests() {
    let real = manifest_graph();
    assert!(real.len() >= 13, "{real:?}");
    assert_eq!(
        documented_graph(),
        real,
        "docs/architecture.md's crate graph (left) differs from the manifests (right)"
    );
}

/// The modules docs/architecture.md names by path exist, and it names every command
/// module of the binary: a `crate::module` path in backticks (`transfer::send_driver`,
/// `linerate_proto::agent`) whose crate is the workspace's must name a module of it, so a
/// module that moves or is renamed fails here until the page says where it went; a
/// `*_cmd` module added to the binary fails until the page lists it.
#[test]
fn the_modules_docs_architecture_names_exist_and_every_command_is_named() {
    let root = workspace();
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let crates: BTreeSet<String> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let mut missing = Vec::new();
    let mut checked = 0;
    for (i, span) in doc.split('`').enumerate() {
        if i % 2 == 0 {
            continue;
        }
        for token in span.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')) {
            let segments: Vec<&str> = token.split("::").collect();
            if segments.len() < 2 {
                continue;
            }
            let krate = segments[0].strip_prefix("linerate_").unwrap_or(segments[0]);
            let module = segments[1];
            if !crates.contains(krate) || !module.starts_with(|c: char| c.is_ascii_lowercase()) {
                continue;
            }
            let src = root.join("crates").join(krate).join("src");
            checked += 1;
            if !src.join(format!("{module}.rs")).is_file() && !src.join(module).is_dir() {
                missing.push(token.to_string());
            }
        }
    }
    assert!(
        checked >= 10,
        "only {checked} module paths found: is the page read?"
    );
    assert!(
        missing.is_empty(),
        "docs/architecture.md names modules that are not there: {missing:?}"
    );
    let unnamed: Vec<String> = std::fs::read_dir(root.join("crates/linerate/src"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|name| name.strip_suffix(".rs").map(String::from))
        .filter(|name| name.ends_with("_cmd") && !doc.contains(&format!("`{name}`")))
        .collect();
    assert!(
        unnamed.is_empty(),
        "commands docs/architecture.md does not name: {unnamed:?}"
    );
}
