//! Which paths a server with `--files DIR` may touch (docs/transfer-protocol.md 7). The
//! name a client sends is checked here, lexically: no `..`, no NUL, no empty name, and an
//! absolute name only when it lies under DIR. The driver then opens what is left relative
//! to DIR with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, so a symbolic link, or a
//! rename racing the check, cannot lead out either.

use std::path::{Component, Path, PathBuf};

/// The longest name accepted.
pub const MAX_NAME: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfineError {
    #[error("an empty path")]
    Empty,
    #[error("a path over {MAX_NAME} bytes")]
    TooLong,
    #[error("'..' in the path: only names under the served directory are allowed")]
    Parent,
    #[error("a NUL byte in the path")]
    Nul,
    #[error("an absolute path outside the served directory")]
    Outside,
}

/// The relative path under `root` that `requested` names.
pub fn confine(root: &Path, requested: &str) -> Result<PathBuf, ConfineError> {
    if requested.len() > MAX_NAME {
        return Err(ConfineError::TooLong);
    }
    if requested.contains('\0') {
        return Err(ConfineError::Nul);
    }
    let path = Path::new(requested);
    let relative = if path.is_absolute() {
        path.strip_prefix(root).map_err(|_| ConfineError::Outside)?
    } else {
        path
    };
    let mut out = PathBuf::new();
    for component in relative.components() {
        match component {
            Component::Normal(name) => out.push(name),
            Component::CurDir => {}
            Component::ParentDir => return Err(ConfineError::Parent),
            Component::RootDir | Component::Prefix(_) => return Err(ConfineError::Outside),
        }
    }
    if out.as_os_str().is_empty() {
        return Err(ConfineError::Empty);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_under_the_root_are_kept_and_the_rest_refused() {
        let root = Path::new("/srv/data");
        assert_eq!(confine(root, "a/b.dat"), Ok(PathBuf::from("a/b.dat")));
        assert_eq!(confine(root, "./a//b.dat"), Ok(PathBuf::from("a/b.dat")));
        assert_eq!(confine(root, "/srv/data/x"), Ok(PathBuf::from("x")));
        assert_eq!(confine(root, "/etc/passwd"), Err(ConfineError::Outside));
        assert_eq!(confine(root, "/srv/database/x"), Err(ConfineError::Outside));
        assert_eq!(confine(root, "a/../../etc"), Err(ConfineError::Parent));
        assert_eq!(confine(root, ".."), Err(ConfineError::Parent));
        assert_eq!(confine(root, ""), Err(ConfineError::Empty));
        assert_eq!(confine(root, "/srv/data"), Err(ConfineError::Empty));
        assert_eq!(confine(root, "a\0b"), Err(ConfineError::Nul));
    }

    proptest! {
        #[test]
        fn whatever_is_kept_stays_under_the_root(name in "[a-z./]{0,40}") {
            if let Ok(relative) = confine(Path::new("/srv"), &name) {
                prop_assert!(relative.is_relative());
                prop_assert!(relative.components().all(|c| matches!(c, Component::Normal(_))));
            }
        }
    }
}
