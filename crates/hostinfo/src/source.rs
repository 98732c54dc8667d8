//! Where the host's files come from: this host (`/`), or a directory holding copies of
//! another host's `/proc` and `/sys` files (test fixtures). NIC statistics, offloads and
//! rings come from the kernel's ethtool ioctl on this host, and from text files in
//! `ethtool`'s own output formats under `ethtool/IF/` in a fixture.

pub use crate::ethtool::Ethtool;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A host's files, read-only.
#[derive(Debug, Clone)]
pub struct Root {
    dir: PathBuf,
    /// This host: ask the kernel for ethtool data instead of reading fixture files.
    live: bool,
}

impl Root {
    /// This host.
    pub fn live() -> Root {
        Root {
            dir: PathBuf::from("/"),
            live: true,
        }
    }

    /// Another host's files copied under `dir` (`dir/proc/interrupts`, ...).
    pub fn fixture(dir: impl Into<PathBuf>) -> Root {
        Root {
            dir: dir.into(),
            live: false,
        }
    }

    fn path(&self, path: &str) -> PathBuf {
        self.dir.join(path.trim_start_matches('/'))
    }

    /// A file's text, if it can be read.
    pub fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.path(path)).ok()
    }

    /// A file's first line, trimmed.
    pub fn value(&self, path: &str) -> Option<String> {
        let text = self.read(path)?;
        Some(text.lines().next().unwrap_or("").trim().to_string())
    }

    /// A number in a file (a sysfs attribute).
    pub fn number(&self, path: &str) -> Option<u64> {
        self.value(path)?.parse().ok()
    }

    /// The names in a directory, sorted.
    pub fn list(&self, dir: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path(dir))
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// The last part of a symbolic link's target (a device's driver or bus name). In a
    /// fixture the link may be a plain file holding that name.
    pub fn link_name(&self, path: &str) -> Option<String> {
        let full = self.path(path);
        match std::fs::read_link(&full) {
            Ok(target) => target
                .file_name()
                .and_then(|n| n.to_str())
                .map(str::to_string),
            Err(_) if !self.live => self.value(path).filter(|v| !v.is_empty()),
            Err(_) => None,
        }
    }

    /// Whether a process of this name runs (its `/proc/PID/comm`).
    pub fn runs(&self, name: &str) -> bool {
        self.list("/proc")
            .iter()
            .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
            .any(|pid| self.value(&format!("/proc/{pid}/comm")).as_deref() == Some(name))
    }

    /// What ethtool knows of `interface`.
    pub fn ethtool(&self, interface: &str) -> Ethtool {
        if self.live {
            return crate::ethtool::query(interface);
        }
        let dir = format!("/ethtool/{interface}");
        Ethtool {
            driver: self
                .read(&format!("{dir}/driver"))
                .and_then(|text| parse_colon_pairs(&text).remove("driver")),
            stats: self
                .read(&format!("{dir}/stats"))
                .map(|text| parse_stats(&text))
                .unwrap_or_default(),
            features: self
                .read(&format!("{dir}/features"))
                .map(|text| parse_features(&text))
                .unwrap_or_default(),
            rings: self
                .read(&format!("{dir}/rings"))
                .and_then(|text| parse_rings(&text)),
            coalesce: self
                .read(&format!("{dir}/coalesce"))
                .and_then(|text| parse_coalesce(&text)),
        }
    }

    /// Root qdisc by interface name: rtnetlink on this host, `tc/IF` files (`tc qdisc
    /// show dev IF`) in a fixture.
    pub fn qdiscs(&self, interfaces: &[String]) -> BTreeMap<String, crate::netlink::RootQdisc> {
        if self.live {
            let by_index = crate::netlink::root_qdiscs();
            return interfaces
                .iter()
                .filter_map(|name| {
                    let index = self.number(&format!("/sys/class/net/{name}/ifindex"))?;
                    let kind = by_index.get(&u32::try_from(index).ok()?)?;
                    Some((name.clone(), kind.clone()))
                })
                .collect();
        }
        interfaces
            .iter()
            .filter_map(|name| {
                let text = self.read(&format!("/tc/{name}"))?;
                Some((name.clone(), crate::netlink::parse_tc_show(&text)?))
            })
            .collect()
    }
}

/// `name: value` lines.
fn parse_colon_pairs(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            Some((name.trim().to_string(), value.trim().to_string()))
        })
        .collect()
}

/// `ethtool -S IF`: a header line, then `     name: value`.
pub fn parse_stats(text: &str) -> BTreeMap<String, u64> {
    parse_colon_pairs(text)
        .into_iter()
        .filter_map(|(name, value)| Some((name, value.parse().ok()?)))
        .collect()
}

/// `ethtool -k IF`: `name: on`, `name: off [fixed]`; sub-features are indented.
pub fn parse_features(text: &str) -> BTreeMap<String, bool> {
    parse_colon_pairs(text)
        .into_iter()
        .filter_map(|(name, value)| {
            let state = match value.split_whitespace().next()? {
                "on" => true,
                "off" => false,
                _ => return None,
            };
            Some((name, state))
        })
        .collect()
}

/// `ethtool -g IF`: the "Pre-set maximums" block, then "Current hardware settings", each
/// with `RX:` and `TX:` lines.
pub fn parse_rings(text: &str) -> Option<[u32; 4]> {
    let mut maximums = (None, None);
    let mut current = (None, None);
    let mut in_current = false;
    for line in text.lines() {
        let lower = line.trim().to_ascii_lowercase();
        if lower.starts_with("current") {
            in_current = true;
            continue;
        }
        let Some((name, value)) = lower.split_once(':') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<u32>() else {
            continue;
        };
        let slot = if in_current {
            &mut current
        } else {
            &mut maximums
        };
        match name.trim() {
            "rx" => slot.0 = Some(value),
            "tx" => slot.1 = Some(value),
            _ => {}
        }
    }
    Some([current.0?, maximums.0?, current.1?, maximums.1?])
}

/// `ethtool -c IF`: `Adaptive RX: on  TX: off`, `rx-usecs: 8`, `tx-usecs: 16`.
pub fn parse_coalesce(text: &str) -> Option<[u32; 3]> {
    let mut rx = None;
    let mut tx = None;
    let mut adaptive = 0;
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("Adaptive RX:") {
            adaptive = u32::from(rest.split_whitespace().next() == Some("on"));
        } else if let Some((name, value)) = line.split_once(':') {
            match name.trim() {
                "rx-usecs" => rx = value.trim().parse().ok(),
                "tx-usecs" => tx = value.trim().parse().ok(),
                _ => {}
            }
        }
    }
    Some([rx?, tx.unwrap_or(0), adaptive])
}

/// Whether a path exists under the root (a directory such as `brif` or `bridge`).
pub fn exists(root: &Root, path: &str) -> bool {
    Path::new(&root.path(path)).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ethtool_text_formats_are_read() {
        let stats = parse_stats(
            "NIC statistics:\n     rx_queue_0_packets: 1200\n     tx_queue_0_bytes: 99\n     weird: x\n",
        );
        assert_eq!(stats.get("rx_queue_0_packets"), Some(&1200));
        assert_eq!(stats.get("tx_queue_0_bytes"), Some(&99));
        assert_eq!(stats.len(), 2);
        let features = parse_features(
            "Features for eth0:\nrx-checksumming: on\ntx-checksumming: off [fixed]\n\ttx-checksum-ipv4: off [fixed]\n",
        );
        assert_eq!(features.get("rx-checksumming"), Some(&true));
        assert_eq!(features.get("tx-checksumming"), Some(&false));
        let rings = parse_rings(
            "Ring parameters for eth0:\nPre-set maximums:\nRX:\t\t4096\nRX Mini:\tn/a\nTX:\t\t4096\nCurrent hardware settings:\nRX:\t\t256\nRX Mini:\tn/a\nTX:\t\t512\n",
        );
        assert_eq!(rings, Some([256, 4096, 512, 4096]));
        let coalesce = parse_coalesce(
            "Coalesce parameters for eth0:\nAdaptive RX: on  TX: off\nrx-usecs: 8\nrx-frames: 128\ntx-usecs: 16\n",
        );
        assert_eq!(coalesce, Some([8, 16, 1]));
    }
}
