//! Each interface's root qdisc, from the kernel's rtnetlink (RTM_GETQDISC dump): what `tc
//! qdisc show` prints, without running `tc`: its kind, and a token bucket's rate (a `tbf`
//! at the root caps everything the interface sends). Every message is bounded by the bytes
//! the kernel said it sent; a malformed one ends the parse.

use std::collections::BTreeMap;

const RTM_GETQDISC: u16 = 38;
const RTM_NEWQDISC: u16 = 36;
const NLMSG_DONE: u16 = 3;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
/// Inside a tbf's options: `struct tc_tbf_qopt`, whose rate (bytes/s, u32) is at 8.
const TCA_TBF_PARMS: u16 = 1;
/// Inside a tbf's options: the rate in bytes/s when it does not fit 32 bits.
const TCA_TBF_RATE64: u16 = 4;
const TC_H_ROOT: u32 = 0xFFFF_FFFF;
const HEADER: usize = 16;
const TCMSG: usize = 20;
/// Messages read before giving up: a host has far fewer qdiscs.
const MAX_READS: usize = 4096;

/// An interface's root qdisc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootQdisc {
    pub kind: String,
    /// A token bucket's rate, bit/s: nothing leaves the interface faster.
    pub rate_bps: Option<u64>,
}

/// Root qdisc by interface index.
pub fn root_qdiscs() -> BTreeMap<u32, RootQdisc> {
    // SAFETY: a plain netlink socket, closed below on every path.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return BTreeMap::new();
    }
    let out = dump(fd).unwrap_or_default();
    // SAFETY: closing the descriptor opened above, once.
    unsafe { libc::close(fd) };
    out
}

fn dump(fd: libc::c_int) -> Option<BTreeMap<u32, RootQdisc>> {
    let mut request = [0u8; HEADER + TCMSG];
    request[0..4].copy_from_slice(&((HEADER + TCMSG) as u32).to_ne_bytes());
    request[4..6].copy_from_slice(&RTM_GETQDISC.to_ne_bytes());
    request[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    request[8..12].copy_from_slice(&1u32.to_ne_bytes());
    // tcmsg: family AF_UNSPEC and every other field zero: all interfaces.
    // SAFETY: sends the request buffer of the length given.
    let sent = unsafe { libc::send(fd, request.as_ptr().cast(), request.len(), 0) };
    if sent != request.len() as isize {
        return None;
    }
    let mut out = BTreeMap::new();
    let mut buffer = vec![0u8; 32 * 1024];
    for _ in 0..MAX_READS {
        // SAFETY: the kernel writes at most the buffer's length.
        let got = unsafe { libc::recv(fd, buffer.as_mut_ptr().cast(), buffer.len(), 0) };
        if got <= 0 {
            return Some(out);
        }
        if parse(&buffer[..got as usize], &mut out) {
            return Some(out);
        }
    }
    Some(out)
}

/// Parses one read's messages into `out`; true once the dump is done.
pub fn parse(mut data: &[u8], out: &mut BTreeMap<u32, RootQdisc>) -> bool {
    while data.len() >= HEADER {
        let len = u32::from_ne_bytes(data[0..4].try_into().unwrap()) as usize;
        let kind = u16::from_ne_bytes(data[4..6].try_into().unwrap());
        if len < HEADER || len > data.len() {
            return true;
        }
        match kind {
            NLMSG_DONE | NLMSG_ERROR => return true,
            RTM_NEWQDISC if len >= HEADER + TCMSG => {
                let tcmsg = &data[HEADER..HEADER + TCMSG];
                let ifindex = i32::from_ne_bytes(tcmsg[4..8].try_into().unwrap());
                let parent = u32::from_ne_bytes(tcmsg[12..16].try_into().unwrap());
                if parent == TC_H_ROOT {
                    let attributes = &data[HEADER + TCMSG..len];
                    if let (Ok(index), Some(kind)) = (u32::try_from(ifindex), kind_of(attributes)) {
                        let rate_bps = (kind == "tbf").then(|| tbf_rate_bps(attributes)).flatten();
                        out.insert(index, RootQdisc { kind, rate_bps });
                    }
                }
            }
            _ => {}
        }
        // Messages are aligned to 4 bytes.
        let step = (len + 3) & !3;
        data = data.get(step..).unwrap_or(&[]);
    }
    false
}

/// The attributes of a message (or of a nested attribute), as (type, value) pairs; a
/// malformed one ends them.
fn attributes(mut data: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while data.len() >= 4 {
        let len = u16::from_ne_bytes(data[0..2].try_into().unwrap()) as usize;
        // The high bits flag nested and byte-order attributes.
        let kind = u16::from_ne_bytes(data[2..4].try_into().unwrap()) & 0x3fff;
        if len < 4 || len > data.len() {
            break;
        }
        out.push((kind, &data[4..len]));
        data = data.get((len + 3) & !3..).unwrap_or(&[]);
    }
    out
}

/// A tbf's rate from its options: the 64-bit one when the kernel sent it, else the rate of
/// its parameters; bit/s.
fn tbf_rate_bps(message: &[u8]) -> Option<u64> {
    let options = attributes(message)
        .into_iter()
        .find(|(kind, _)| *kind == TCA_OPTIONS)?
        .1;
    let nested = attributes(options);
    let rate64 = nested
        .iter()
        .find(|(kind, value)| *kind == TCA_TBF_RATE64 && value.len() >= 8)
        .map(|(_, value)| u64::from_ne_bytes(value[0..8].try_into().unwrap()));
    let rate32 = nested
        .iter()
        .find(|(kind, value)| *kind == TCA_TBF_PARMS && value.len() >= 12)
        .map(|(_, value)| u64::from(u32::from_ne_bytes(value[8..12].try_into().unwrap())));
    rate64
        .or(rate32)
        .filter(|&bytes| bytes > 0)
        .map(|bytes| bytes.saturating_mul(8))
}

/// The TCA_KIND attribute: the qdisc's name.
fn kind_of(mut attributes: &[u8]) -> Option<String> {
    while attributes.len() >= 4 {
        let len = u16::from_ne_bytes(attributes[0..2].try_into().unwrap()) as usize;
        let kind = u16::from_ne_bytes(attributes[2..4].try_into().unwrap());
        if len < 4 || len > attributes.len() {
            return None;
        }
        if kind == TCA_KIND {
            let value = &attributes[4..len];
            let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
            return std::str::from_utf8(&value[..end])
                .ok()
                .filter(|s| !s.is_empty() && s.len() <= 64)
                .map(str::to_string);
        }
        attributes = attributes.get((len + 3) & !3..).unwrap_or(&[]);
    }
    None
}

/// `tc qdisc show dev IF` text (a fixture): the root qdisc's kind, and a tbf's rate
/// ("rate 200Mbit").
pub fn parse_tc_show(text: &str) -> Option<RootQdisc> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        if words.next()? != "qdisc" || !line.contains(" root") {
            return None;
        }
        let kind = words.next()?.to_string();
        let mut rest = line.split_whitespace().skip_while(|w| *w != "rate").skip(1);
        let rate_bps = (kind == "tbf")
            .then(|| rest.next().and_then(tc_rate))
            .flatten();
        Some(RootQdisc { kind, rate_bps })
    })
}

/// A rate as `tc` prints it: "200Mbit", "1Gbit", "64Kbit", "800bit"; bit/s.
fn tc_rate(text: &str) -> Option<u64> {
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(number_end);
    let value: f64 = number.parse().ok()?;
    let scale = match unit {
        "bit" => 1.0,
        "Kbit" => 1e3,
        "Mbit" => 1e6,
        "Gbit" => 1e9,
        "Tbit" => 1e12,
        _ => return None,
    };
    Some((value * scale) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn loopback_has_a_root_qdisc_and_tc_text_is_read() {
        let qdiscs = root_qdiscs();
        // lo is interface 1 on every Linux host; it has a root (noqueue) qdisc.
        assert!(qdiscs.contains_key(&1), "{qdiscs:?}");
        let kind = |text: &str| parse_tc_show(text).map(|q| q.kind);
        assert_eq!(
            kind("qdisc mq 0: root\nqdisc fq_codel 0: parent :1 limit 10240p\n"),
            Some("mq".to_string())
        );
        assert_eq!(
            kind("qdisc noqueue 0: root refcnt 2\n"),
            Some("noqueue".into())
        );
        assert_eq!(
            parse_tc_show("qdisc tbf 8001: root refcnt 2 rate 200Mbit burst 256Kb lat 50ms\n"),
            Some(RootQdisc {
                kind: "tbf".into(),
                rate_bps: Some(200_000_000)
            })
        );
    }

    proptest! {
        /// Any bytes from the socket: the parser returns, and keeps no name over 64 bytes.
        #[test]
        fn netlink_parsing_never_panics(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut out = BTreeMap::new();
            let _ = parse(&data, &mut out);
            prop_assert!(out.values().all(|q| q.kind.len() <= 64));
        }
    }

    /// A tbf's rate from the options the kernel sends: its parameters' 32-bit rate, or
    /// the 64-bit one beside it.
    #[test]
    fn a_tbf_rate_is_read_from_its_options() {
        let attribute = |kind: u16, value: &[u8]| {
            let mut out = ((value.len() + 4) as u16).to_ne_bytes().to_vec();
            out.extend(kind.to_ne_bytes());
            out.extend(value);
            while !out.len().is_multiple_of(4) {
                out.push(0);
            }
            out
        };
        let mut parms = vec![0u8; 36];
        parms[8..12].copy_from_slice(&25_000_000u32.to_ne_bytes());
        let options = attribute(TCA_TBF_PARMS, &parms);
        let mut message = attribute(TCA_KIND, b"tbf\0");
        message.extend(attribute(TCA_OPTIONS | 0x8000, &options));
        assert_eq!(tbf_rate_bps(&message), Some(200_000_000));
        let mut wide = options.clone();
        wide.extend(attribute(TCA_TBF_RATE64, &5_000_000_000u64.to_ne_bytes()));
        let mut message = attribute(TCA_KIND, b"tbf\0");
        message.extend(attribute(TCA_OPTIONS, &wide));
        assert_eq!(tbf_rate_bps(&message), Some(40_000_000_000));
    }
}
