//! The kernel's ethtool ioctl (SIOCETHTOOL) on this host: driver name, statistics, the
//! common offloads and ring sizes. The ethtool program is not run: it may be missing,
//! and its output is not a stable interface. Every answer is bounded before use (a driver
//! reporting millions of statistics is refused), and any refusal leaves that part empty.

use std::collections::BTreeMap;

/// What ethtool knows of one interface.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ethtool {
    pub driver: Option<String>,
    /// Statistics by the driver's names (`ethtool -S`).
    pub stats: BTreeMap<String, u64>,
    /// Offloads by ethtool's feature names (`ethtool -k`).
    pub features: BTreeMap<String, bool>,
    /// rx, rx_max, tx, tx_max (`ethtool -g`).
    pub rings: Option<[u32; 4]>,
    /// rx-usecs, tx-usecs, adaptive rx (0 or 1) (`ethtool -c`).
    pub coalesce: Option<[u32; 3]>,
}

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GCOALESCE: u32 = 0x0e;
const ETHTOOL_GRINGPARAM: u32 = 0x10;
const ETHTOOL_GRXCSUM: u32 = 0x14;
const ETHTOOL_GTXCSUM: u32 = 0x16;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETHTOOL_GTSO: u32 = 0x1e;
const ETHTOOL_GGSO: u32 = 0x23;
const ETHTOOL_GFLAGS: u32 = 0x25;
const ETHTOOL_GGRO: u32 = 0x2b;
const ETH_SS_STATS: u32 = 1;
const ETH_GSTRING_LEN: usize = 32;
const ETH_FLAG_LRO: u32 = 1 << 15;
/// More statistics than any driver has; a larger count is not believed.
const MAX_STATS: usize = 16_384;

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

#[repr(C)]
struct DrvInfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    n_priv_flags: u32,
    n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}

#[repr(C)]
struct Value {
    cmd: u32,
    data: u32,
}

#[repr(C)]
struct RingParam {
    cmd: u32,
    rx_max: u32,
    rx_mini_max: u32,
    rx_jumbo_max: u32,
    tx_max: u32,
    rx: u32,
    rx_mini: u32,
    rx_jumbo: u32,
    tx: u32,
}

struct Device {
    socket: libc::c_int,
    name: [u8; libc::IFNAMSIZ],
}

impl Device {
    fn open(interface: &str) -> Option<Device> {
        let bytes = interface.as_bytes();
        if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ {
            return None;
        }
        let mut name = [0u8; libc::IFNAMSIZ];
        name[..bytes.len()].copy_from_slice(bytes);
        // SAFETY: plain socket creation; the descriptor is closed in Drop.
        let socket = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
        (socket >= 0).then_some(Device { socket, name })
    }

    /// One ethtool command; `data` must be the command's structure, starting with `cmd`.
    fn call<T>(&self, data: &mut T) -> bool {
        let mut request = IfReq {
            name: self.name,
            data: (data as *mut T).cast(),
            _pad: [0; 16],
        };
        // SAFETY: `request` names the interface and points at a live structure of the
        // size the command expects; the kernel writes within it.
        unsafe { libc::ioctl(self.socket, SIOCETHTOOL, &mut request) == 0 }
    }

    fn value(&self, cmd: u32) -> Option<u32> {
        let mut value = Value { cmd, data: 0 };
        self.call(&mut value).then_some(value.data)
    }

    /// A buffer-carrying command: a header of `header` u32 words, then `len` bytes.
    fn with_buffer(&self, header: &[u32], len: usize) -> Option<Vec<u8>> {
        let mut buffer = vec![0u8; header.len() * 4 + len];
        for (i, word) in header.iter().enumerate() {
            buffer[i * 4..i * 4 + 4].copy_from_slice(&word.to_ne_bytes());
        }
        let mut request = IfReq {
            name: self.name,
            data: buffer.as_mut_ptr().cast(),
            _pad: [0; 16],
        };
        // SAFETY: the buffer holds the header the command reads and room for the
        // `len` bytes it writes, as the header's count says.
        let ok = unsafe { libc::ioctl(self.socket, SIOCETHTOOL, &mut request) == 0 };
        ok.then(|| buffer.split_off(header.len() * 4))
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: the descriptor was opened by us and is closed once.
        unsafe { libc::close(self.socket) };
    }
}

fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// Everything the kernel will say of `interface`; empty parts where it refuses.
pub fn query(interface: &str) -> Ethtool {
    let mut out = Ethtool::default();
    let Some(device) = Device::open(interface) else {
        return out;
    };
    // SAFETY: DrvInfo is plain old data; all-zero is a valid value.
    let mut info: DrvInfo = unsafe { std::mem::zeroed() };
    info.cmd = ETHTOOL_GDRVINFO;
    if device.call(&mut info) {
        let driver = c_string(&info.driver);
        out.driver = (!driver.is_empty()).then_some(driver);
        out.stats = statistics(&device, info.n_stats as usize);
    }
    for (cmd, name) in [
        (ETHTOOL_GRXCSUM, "rx-checksumming"),
        (ETHTOOL_GTXCSUM, "tx-checksumming"),
        (ETHTOOL_GTSO, "tcp-segmentation-offload"),
        (ETHTOOL_GGSO, "generic-segmentation-offload"),
        (ETHTOOL_GGRO, "generic-receive-offload"),
    ] {
        if let Some(value) = device.value(cmd) {
            out.features.insert(name.to_string(), value != 0);
        }
    }
    if let Some(flags) = device.value(ETHTOOL_GFLAGS) {
        out.features.insert(
            "large-receive-offload".to_string(),
            flags & ETH_FLAG_LRO != 0,
        );
    }
    let mut rings = RingParam {
        cmd: ETHTOOL_GRINGPARAM,
        rx_max: 0,
        rx_mini_max: 0,
        rx_jumbo_max: 0,
        tx_max: 0,
        rx: 0,
        rx_mini: 0,
        rx_jumbo: 0,
        tx: 0,
    };
    if device.call(&mut rings) && rings.rx_max > 0 {
        out.rings = Some([rings.rx, rings.rx_max, rings.tx, rings.tx_max]);
    }
    // struct ethtool_coalesce: cmd, then 22 u32 fields; rx_coalesce_usecs is the first,
    // tx_coalesce_usecs the fifth, use_adaptive_rx_coalesce the tenth.
    let mut coalesce = [0u32; 23];
    coalesce[0] = ETHTOOL_GCOALESCE;
    if device.call(&mut coalesce) {
        out.coalesce = Some([coalesce[1], coalesce[5], coalesce[10]]);
    }
    out
}

fn statistics(device: &Device, count: usize) -> BTreeMap<String, u64> {
    if count == 0 || count > MAX_STATS {
        return BTreeMap::new();
    }
    let count32 = count as u32;
    let Some(names) = device.with_buffer(
        &[ETHTOOL_GSTRINGS, ETH_SS_STATS, count32],
        count * ETH_GSTRING_LEN,
    ) else {
        return BTreeMap::new();
    };
    let Some(values) = device.with_buffer(&[ETHTOOL_GSTATS, count32], count * 8) else {
        return BTreeMap::new();
    };
    names
        .chunks_exact(ETH_GSTRING_LEN)
        .zip(values.chunks_exact(8))
        .map(|(name, value)| {
            let mut word = [0u8; 8];
            word.copy_from_slice(value);
            (c_string(name), u64::from_ne_bytes(word))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loopback has no ethtool statistics but answers the offload queries; a name too
    /// long for the kernel is refused before any call.
    #[test]
    fn the_kernel_answers_for_loopback_and_bad_names_are_refused() {
        let lo = query("lo");
        assert!(
            lo.features.contains_key("generic-segmentation-offload"),
            "{lo:?}"
        );
        assert_eq!(query("a-name-longer-than-ifnamsiz"), Ethtool::default());
        assert_eq!(query(""), Ethtool::default());
    }
}
