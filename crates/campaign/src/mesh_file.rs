//! A mesh file as the coordinator takes it: read and checked, its `[[discover]]` names
//! resolved (each address a host), and found again as often as those names ask while the
//! mesh runs. A mistake is one line naming the file and the value.

use crate::mesh::Rediscover;
use linerate_mesh::Mesh;
use std::time::Duration;

/// A mesh file that does not read is a usage error: one line naming file, line and value.
/// Its `[[discover]]` names are resolved here, each address a host.
pub fn load(path: &std::path::Path) -> Result<Mesh, String> {
    let name = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("cannot read mesh file {name}: {e}"))?;
    let mesh = linerate_mesh::parse(&name, &text).map_err(|e| e.to_string())?;
    let mesh = discovered(&name, mesh)?;
    if mesh.hosts.len() < 2 {
        return Err(format!(
            "{name}: mesh '{}' has {} host(s): a mesh measures pairs",
            mesh.name,
            mesh.hosts.len()
        ));
    }
    Ok(mesh)
}

/// `mesh` (as its file `name` reads) with its `[[discover]]` names resolved, each address
/// a host; `Err` names the name that did not resolve.
fn discovered(name: &str, mesh: Mesh) -> Result<Mesh, String> {
    use std::net::ToSocketAddrs;
    let mut found = Vec::new();
    for discover in &mesh.discover {
        let mut ips: Vec<std::net::IpAddr> = (discover.name.as_str(), discover.port)
            .to_socket_addrs()
            .map_err(|e| format!("{name}: discover '{}': {e}", discover.name))?
            .map(|a| a.ip())
            .collect();
        ips.sort();
        ips.dedup();
        found.push(ips);
    }
    mesh.with_discovered(&found)
        .map_err(|e| format!("{name}: {e}"))
}

/// The running mesh finds its hosts again as often as its `[[discover]]` names ask (the
/// most often of them), from the file as it was read at the start.
pub fn rediscover(path: &std::path::Path) -> Result<Option<Rediscover>, String> {
    let name = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("cannot read mesh file {name}: {e}"))?;
    let listed = linerate_mesh::parse(&name, &text).map_err(|e| e.to_string())?;
    let every = listed
        .discover
        .iter()
        .map(|d| d.every_s)
        .fold(f64::INFINITY, f64::min);
    if !every.is_finite() {
        return Ok(None);
    }
    Ok(Some(Rediscover {
        every: Duration::from_secs_f64(every),
        find: Box::new(move || {
            let mesh = discovered(&name, listed.clone()).map_err(anyhow::Error::msg)?;
            anyhow::ensure!(
                mesh.hosts.len() >= 2,
                "{name}: discovery found {} host(s); keeping the hosts the mesh has",
                mesh.hosts.len()
            );
            Ok(mesh)
        }),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &tempfile::TempDir, name: &str, text: &str) -> std::path::PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    const TESTS: &str = "[[test]]\nname = \"tput\"\nrun = \"stream\"\ninterval = \"1h\"\n\
                         [[group]]\nname = \"all\"\ntests = [\"tput\"]\n";

    /// A discovered name's addresses are hosts beside the listed ones; the running mesh
    /// finds them again as often as its names ask, and a file without names is never
    /// looked at again.
    #[test]
    fn discovered_names_become_hosts_and_are_found_again_as_asked() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "name = \"m\"\n[[host]]\nname = \"fixed\"\naddress = \"192.0.2.1:5201\"\n\
             [[discover]]\nname = \"localhost\"\nport = 5202\nevery = \"90s\"\n{TESTS}"
        );
        let path = file(&dir, "m.toml", &text);
        let mesh = load(&path).unwrap();
        assert_eq!(mesh.hosts[0].name, "fixed");
        assert!(mesh.hosts.len() >= 2, "{:?}", mesh.hosts);
        assert!(mesh.hosts[1..].iter().all(|h| h.address.ends_with(":5202")));
        let mut again = rediscover(&path).unwrap().expect("a name to find again");
        assert_eq!(again.every, Duration::from_secs(90));
        assert_eq!((again.find)().unwrap().hosts.len(), mesh.hosts.len());

        let listed = format!(
            "name = \"m\"\n[[host]]\nname = \"a\"\naddress = \"192.0.2.1:5201\"\n\
             [[host]]\nname = \"b\"\naddress = \"192.0.2.2:5201\"\n{TESTS}"
        );
        assert!(rediscover(&file(&dir, "listed.toml", &listed))
            .unwrap()
            .is_none());
    }

    /// Each mistake is one line naming the file and what is wrong.
    #[test]
    fn mistakes_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let absent = dir.path().join("absent.toml");
        let e = load(&absent).unwrap_err();
        assert!(
            e.starts_with("cannot read mesh file ") && e.contains("absent.toml"),
            "{e}"
        );
        let alone =
            format!("name = \"m\"\n[[host]]\nname = \"a\"\naddress = \"192.0.2.1:5201\"\n{TESTS}");
        let e = load(&file(&dir, "alone.toml", &alone)).unwrap_err();
        assert!(e.ends_with("has 1 host(s): a mesh measures pairs"), "{e}");
        let unresolved = format!(
            "name = \"m\"\n[[host]]\nname = \"a\"\naddress = \"192.0.2.1:5201\"\n\
             [[discover]]\nname = \"no-such-host.invalid\"\nport = 5202\n{TESTS}"
        );
        let e = load(&file(&dir, "unresolved.toml", &unresolved)).unwrap_err();
        assert!(e.contains("discover 'no-such-host.invalid'"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
}
