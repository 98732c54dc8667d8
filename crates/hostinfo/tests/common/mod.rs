//! Fixture bundles: hand-written copies of other hosts' /proc, /sys and ethtool output.

use std::path::{Path, PathBuf};

/// Expands a bundle (`=== path` headers, each followed by the file's text) into a fresh
/// directory; returns it.
pub fn expand(bundle: &str, name: &str) -> PathBuf {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(bundle),
    )
    .unwrap();
    let dir = std::env::temp_dir().join(format!(
        "linerate-observe-{name}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let mut current: Option<(PathBuf, String)> = None;
    let flush = |file: Option<(PathBuf, String)>| {
        if let Some((path, body)) = file {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, body).unwrap();
        }
    };
    for line in text.lines() {
        if let Some(path) = line.strip_prefix("=== ") {
            flush(current.take());
            current = Some((dir.join(path.trim()), String::new()));
        } else if let Some((_, body)) = current.as_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    flush(current);
    dir
}
