//! Each interface's root qdisc, from the kernel's rtnetlink (RTM_GETQDISC dump, and
//! RTM_GETTCLASS for an htb's classes): what `tc qdisc show` prints, without running `tc`.
//! Its kind, and what it does to everything the interface sends:
//! - `tbf`: its rate caps the interface;
//! - `htb`: traffic no filter classifies goes to its default class, whose ceiling caps it
//!   (without a default class such traffic leaves unshaped, and no cap is claimed);
//! - `netem`: its rate, and the delay and loss it adds;
//! - `fq`: its per-flow maximum rate caps each flow, not the interface.
//!
//! Every message is bounded by the bytes the kernel said it sent; a malformed one ends
//! the parse.

use std::collections::BTreeMap;

const RTM_GETQDISC: u16 = 38;
const RTM_NEWQDISC: u16 = 36;
const RTM_NEWTCLASS: u16 = 40;
const RTM_GETTCLASS: u16 = 42;
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
/// Inside an htb class's options: `struct tc_htb_opt` (rate, then ceil: `tc_ratespec`s of
/// 12 bytes whose rate, bytes/s, is at 8), and the 64-bit ceil.
const TCA_HTB_PARMS: u16 = 1;
/// Inside an htb qdisc's options: `struct tc_htb_glob`, whose default class is at 8.
const TCA_HTB_INIT: u16 = 2;
const TCA_HTB_CEIL64: u16 = 7;
/// netem's options: `struct tc_netem_qopt` (latency in 64 ns ticks at 0, loss at 8 as a
/// share of 2^32 - 1), then attributes: the rate (`struct tc_netem_rate`, bytes/s at 0),
/// its 64-bit form, and the latency in ns.
const NETEM_QOPT: usize = 24;
const TCA_NETEM_RATE: u16 = 6;
const TCA_NETEM_RATE64: u16 = 8;
const TCA_NETEM_LATENCY64: u16 = 10;
/// fq's per-flow maximum rate, bytes/s (all ones: none).
const TCA_FQ_FLOW_MAX_RATE: u16 = 7;
const TC_H_ROOT: u32 = 0xFFFF_FFFF;
const HEADER: usize = 16;
const TCMSG: usize = 20;
/// Messages read before giving up: a host has far fewer qdiscs.
const MAX_READS: usize = 4096;

/// An interface's root qdisc.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RootQdisc {
    pub kind: String,
    /// The rate it holds what the interface sends to, bit/s: nothing leaves faster.
    pub rate_bps: Option<u64>,
    /// fq: the most one flow may send, bit/s.
    pub flow_rate_bps: Option<u64>,
    /// netem: the delay and the loss it adds to what leaves.
    pub delay_ms: Option<f64>,
    pub loss_pct: Option<f64>,
    /// The qdisc's handle, and an htb's default class (minor number; 0: none).
    handle: u32,
    default_class: u32,
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
    let mut out = BTreeMap::new();
    dump(fd, RTM_GETQDISC, 0, |data| parse(data, &mut out));
    // An htb caps what its default class's ceiling allows: read from its classes.
    for (index, qdisc) in out.iter_mut() {
        if qdisc.kind == "htb" && qdisc.default_class != 0 {
            let mut ceilings = BTreeMap::new();
            dump(fd, RTM_GETTCLASS, *index, |data| {
                parse_classes(data, &mut ceilings)
            });
            let default = (qdisc.handle & 0xFFFF_0000) | qdisc.default_class;
            qdisc.rate_bps = ceilings.get(&default).copied();
        }
    }
    // SAFETY: closing the descriptor opened above, once.
    unsafe { libc::close(fd) };
    out
}

/// Sends a dump request of `kind` (for interface `ifindex`; 0: all) and hands each read to
/// `take` until it says the dump is done.
fn dump(fd: libc::c_int, kind: u16, ifindex: u32, mut take: impl FnMut(&[u8]) -> bool) {
    let mut request = [0u8; HEADER + TCMSG];
    request[0..4].copy_from_slice(&((HEADER + TCMSG) as u32).to_ne_bytes());
    request[4..6].copy_from_slice(&kind.to_ne_bytes());
    request[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    request[8..12].copy_from_slice(&1u32.to_ne_bytes());
    // tcmsg: family AF_UNSPEC, the interface, and every other field zero.
    request[HEADER + 4..HEADER + 8].copy_from_slice(&ifindex.to_ne_bytes());
    // SAFETY: sends the request buffer of the length given.
    let sent = unsafe { libc::send(fd, request.as_ptr().cast(), request.len(), 0) };
    if sent != request.len() as isize {
        return;
    }
    let mut buffer = vec![0u8; 32 * 1024];
    for _ in 0..MAX_READS {
        // SAFETY: the kernel writes at most the buffer's length.
        let got = unsafe { libc::recv(fd, buffer.as_mut_ptr().cast(), buffer.len(), 0) };
        if got <= 0 || take(&buffer[..got as usize]) {
            return;
        }
    }
}

/// The messages of one read, as (type, tcmsg, attributes); `None` after the last, with
/// whether the dump is done.
fn messages(mut data: &[u8], mut each: impl FnMut(u16, &[u8], &[u8])) -> bool {
    while data.len() >= HEADER {
        let len = u32::from_ne_bytes(data[0..4].try_into().unwrap()) as usize;
        let kind = u16::from_ne_bytes(data[4..6].try_into().unwrap());
        if len < HEADER || len > data.len() {
            return true;
        }
        match kind {
            NLMSG_DONE | NLMSG_ERROR => return true,
            _ if len >= HEADER + TCMSG => {
                each(
                    kind,
                    &data[HEADER..HEADER + TCMSG],
                    &data[HEADER + TCMSG..len],
                );
            }
            _ => {}
        }
        // Messages are aligned to 4 bytes.
        let step = (len + 3) & !3;
        data = data.get(step..).unwrap_or(&[]);
    }
    false
}

/// An htb dump's classes into `out`: each class's ceiling, bit/s, by its handle; true once
/// the dump is done.
pub fn parse_classes(data: &[u8], out: &mut BTreeMap<u32, u64>) -> bool {
    messages(data, |kind, tcmsg, attributes| {
        if kind != RTM_NEWTCLASS || kind_of(attributes).as_deref() != Some("htb") {
            return;
        }
        let handle = u32::from_ne_bytes(tcmsg[8..12].try_into().unwrap());
        let Some(options) = option_attributes(attributes) else {
            return;
        };
        let nested = attributes_of(options);
        let ceil64 = u64_attribute(&nested, TCA_HTB_CEIL64);
        let ceil32 = nested
            .iter()
            .find(|(kind, value)| *kind == TCA_HTB_PARMS && value.len() >= 24)
            .map(|(_, value)| u64::from(u32::from_ne_bytes(value[20..24].try_into().unwrap())));
        if let Some(bytes) = ceil64.or(ceil32).filter(|&b| b > 0) {
            out.insert(handle, bytes.saturating_mul(8));
        }
    })
}

/// Parses one read's messages into `out`; true once the dump is done.
pub fn parse(data: &[u8], out: &mut BTreeMap<u32, RootQdisc>) -> bool {
    messages(data, |kind, tcmsg, attributes| {
        if kind != RTM_NEWQDISC {
            return;
        }
        let ifindex = i32::from_ne_bytes(tcmsg[4..8].try_into().unwrap());
        let handle = u32::from_ne_bytes(tcmsg[8..12].try_into().unwrap());
        let parent = u32::from_ne_bytes(tcmsg[12..16].try_into().unwrap());
        if parent != TC_H_ROOT {
            return;
        }
        if let (Ok(index), Some(kind)) = (u32::try_from(ifindex), kind_of(attributes)) {
            let mut qdisc = RootQdisc {
                handle,
                ..RootQdisc::default()
            };
            let options = option_attributes(attributes);
            match (kind.as_str(), options) {
                ("tbf", _) => qdisc.rate_bps = tbf_rate_bps(attributes),
                ("htb", Some(options)) => {
                    qdisc.default_class = attributes_of(options)
                        .iter()
                        .find(|(kind, value)| *kind == TCA_HTB_INIT && value.len() >= 12)
                        .map_or(0, |(_, value)| {
                            u32::from_ne_bytes(value[8..12].try_into().unwrap())
                        });
                }
                ("netem", Some(options)) => read_netem(options, &mut qdisc),
                ("fq", Some(options)) => {
                    let nested = attributes_of(options);
                    qdisc.flow_rate_bps = u64_attribute(&nested, TCA_FQ_FLOW_MAX_RATE)
                        .filter(|&bytes| bytes > 0 && bytes != u64::from(u32::MAX))
                        .map(|bytes| bytes.saturating_mul(8));
                }
                _ => {}
            }
            qdisc.kind = kind;
            out.insert(index, qdisc);
        }
    })
}

/// netem's rate, delay and loss from its options (a fixed struct, then attributes).
fn read_netem(options: &[u8], qdisc: &mut RootQdisc) {
    let Some(qopt) = options.get(..NETEM_QOPT) else {
        return;
    };
    let ticks = u32::from_ne_bytes(qopt[0..4].try_into().unwrap());
    let loss = u32::from_ne_bytes(qopt[8..12].try_into().unwrap());
    let nested = attributes_of(options.get(NETEM_QOPT..).unwrap_or(&[]));
    let latency_ns = u64_attribute(&nested, TCA_NETEM_LATENCY64).unwrap_or(u64::from(ticks) << 6);
    qdisc.delay_ms = (latency_ns > 0).then(|| latency_ns as f64 / 1e6);
    qdisc.loss_pct = (loss > 0).then(|| f64::from(loss) / f64::from(u32::MAX) * 100.0);
    let rate32 = nested
        .iter()
        .find(|(kind, value)| *kind == TCA_NETEM_RATE && value.len() >= 4)
        .map(|(_, value)| u64::from(u32::from_ne_bytes(value[0..4].try_into().unwrap())));
    qdisc.rate_bps = u64_attribute(&nested, TCA_NETEM_RATE64)
        .or(rate32)
        .filter(|&bytes| bytes > 0)
        .map(|bytes| bytes.saturating_mul(8));
}

/// The TCA_OPTIONS attribute's value.
fn option_attributes(message: &[u8]) -> Option<&[u8]> {
    attributes_of(message)
        .into_iter()
        .find(|(kind, _)| *kind == TCA_OPTIONS)
        .map(|(_, value)| value)
}

/// An attribute holding a u32 or a u64, widened.
fn u64_attribute(attributes: &[(u16, &[u8])], wanted: u16) -> Option<u64> {
    attributes
        .iter()
        .find(|(kind, _)| *kind == wanted)
        .and_then(|(_, value)| match value.len() {
            8.. => Some(u64::from_ne_bytes(value[0..8].try_into().unwrap())),
            4.. => Some(u64::from(u32::from_ne_bytes(
                value[0..4].try_into().unwrap(),
            ))),
            _ => None,
        })
}

/// The attributes of a message (or of a nested attribute), as (type, value) pairs; a
/// malformed one ends them.
fn attributes_of(mut data: &[u8]) -> Vec<(u16, &[u8])> {
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
    let options = attributes_of(message)
        .into_iter()
        .find(|(kind, _)| *kind == TCA_OPTIONS)?
        .1;
    let nested = attributes_of(options);
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

/// `tc qdisc show dev IF` text (a fixture), followed for an htb by `tc class show dev IF`:
/// the root qdisc's kind and what it does, as [`parse`] reads them from the kernel.
pub fn parse_tc_show(text: &str) -> Option<RootQdisc> {
    let line = text
        .lines()
        .find(|line| line.starts_with("qdisc ") && line.contains(" root"))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let after = |key: &str| {
        words
            .iter()
            .position(|w| *w == key)
            .and_then(|i| words.get(i + 1).copied())
    };
    let kind = words.get(1)?.to_string();
    let mut qdisc = RootQdisc::default();
    match kind.as_str() {
        "tbf" => qdisc.rate_bps = after("rate").and_then(tc_rate),
        "netem" => {
            qdisc.rate_bps = after("rate").and_then(tc_rate);
            qdisc.delay_ms = after("delay").and_then(tc_millis);
            qdisc.loss_pct = after("loss")
                .and_then(|p| p.strip_suffix('%'))
                .and_then(|p| p.parse().ok());
        }
        "fq" => qdisc.flow_rate_bps = after("maxrate").and_then(tc_rate),
        "htb" => {
            // "default 0x10": the default class's minor number, in hex.
            let default = after("default")
                .and_then(|d| u32::from_str_radix(d.trim_start_matches("0x"), 16).ok())
                .filter(|&d| d != 0);
            let handle = words.get(2).map_or("", |h| h.trim_end_matches(':'));
            qdisc.rate_bps = default.and_then(|minor| {
                let class = format!("{handle}:{minor:x}");
                text.lines().find_map(|line| {
                    let words: Vec<&str> = line.split_whitespace().collect();
                    if words.first() != Some(&"class") || words.get(2) != Some(&class.as_str()) {
                        return None;
                    }
                    let at = words.iter().position(|w| *w == "ceil")?;
                    tc_rate(words.get(at + 1)?)
                })
            });
        }
        _ => {}
    }
    qdisc.kind = kind;
    Some(qdisc)
}

/// A time as `tc` prints it: "25ms", "100us", "1s"; milliseconds.
fn tc_millis(text: &str) -> Option<f64> {
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(number_end);
    let value: f64 = number.parse().ok()?;
    Some(match unit {
        "us" => value / 1e3,
        "ms" => value,
        "s" => value * 1e3,
        _ => return None,
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
        let tbf =
            parse_tc_show("qdisc tbf 8001: root refcnt 2 rate 200Mbit burst 256Kb lat 50ms\n")
                .unwrap();
        assert_eq!(
            (tbf.kind.as_str(), tbf.rate_bps),
            ("tbf", Some(200_000_000))
        );
        let netem = parse_tc_show(
            "qdisc netem 8002: root refcnt 2 limit 1000 delay 25ms loss 2% rate 50Mbit\n",
        )
        .unwrap();
        assert_eq!(
            (netem.rate_bps, netem.delay_ms, netem.loss_pct),
            (Some(50_000_000), Some(25.0), Some(2.0))
        );
        let fq =
            parse_tc_show("qdisc fq 8003: root refcnt 2 limit 10000p maxrate 100Mbit\n").unwrap();
        assert_eq!((fq.rate_bps, fq.flow_rate_bps), (None, Some(100_000_000)));
        let htb = "qdisc htb 1: root refcnt 2 r2q 10 default 0x10 direct_packets_stat 0\n\
                   class htb 1:1 root rate 1Gbit ceil 1Gbit burst 1375b\n\
                   class htb 1:10 parent 1:1 prio 0 rate 50Mbit ceil 80Mbit burst 1600b\n";
        assert_eq!(parse_tc_show(htb).unwrap().rate_bps, Some(80_000_000));
        let no_default = htb.replace("default 0x10", "default 0");
        assert_eq!(parse_tc_show(&no_default).unwrap().rate_bps, None);
    }

    fn attribute(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut out = ((value.len() + 4) as u16).to_ne_bytes().to_vec();
        out.extend(kind.to_ne_bytes());
        out.extend(value);
        while !out.len().is_multiple_of(4) {
            out.push(0);
        }
        out
    }

    /// A whole rtnetlink message: header, tcmsg, attributes.
    fn message(kind: u16, ifindex: i32, handle: u32, parent: u32, attributes: &[u8]) -> Vec<u8> {
        let len = HEADER + TCMSG + attributes.len();
        let mut out = (len as u32).to_ne_bytes().to_vec();
        out.extend(kind.to_ne_bytes());
        out.extend([0u8; 10]);
        out.extend([0u8; 4]);
        out.extend(ifindex.to_ne_bytes());
        out.extend(handle.to_ne_bytes());
        out.extend(parent.to_ne_bytes());
        out.extend([0u8; 4]);
        out.extend(attributes);
        out
    }

    /// netem, fq and htb as the kernel sends them (the layouts of linux/pkt_sched.h).
    #[test]
    fn netem_fq_and_htb_are_read_from_the_kernels_messages() {
        let mut qopt = vec![0u8; NETEM_QOPT];
        qopt[0..4].copy_from_slice(&((25_000_000u32) >> 6).to_ne_bytes());
        // 2 % of 2^32 - 1.
        qopt[8..12].copy_from_slice(&((f64::from(u32::MAX) * 0.02) as u32).to_ne_bytes());
        let mut options = qopt.clone();
        options.extend(attribute(
            TCA_NETEM_RATE,
            &[&6_250_000u32.to_ne_bytes()[..], &[0u8; 12]].concat(),
        ));
        options.extend(attribute(TCA_NETEM_LATENCY64, &25_000_000u64.to_ne_bytes()));
        let mut attributes = attribute(TCA_KIND, b"netem\0");
        attributes.extend(attribute(TCA_OPTIONS, &options));
        let mut data = message(RTM_NEWQDISC, 3, 0x8002_0000, TC_H_ROOT, &attributes);
        let mut fq_options = attribute(TCA_FQ_FLOW_MAX_RATE, &12_500_000u32.to_ne_bytes());
        fq_options.extend(attribute(1, &10_000u32.to_ne_bytes()));
        let mut attributes = attribute(TCA_KIND, b"fq\0");
        attributes.extend(attribute(TCA_OPTIONS | 0x8000, &fq_options));
        data.extend(message(
            RTM_NEWQDISC,
            4,
            0x8003_0000,
            TC_H_ROOT,
            &attributes,
        ));
        let mut glob = vec![0u8; 20];
        glob[8..12].copy_from_slice(&0x10u32.to_ne_bytes());
        let mut attributes = attribute(TCA_KIND, b"htb\0");
        attributes.extend(attribute(TCA_OPTIONS, &attribute(TCA_HTB_INIT, &glob)));
        data.extend(message(
            RTM_NEWQDISC,
            5,
            0x0001_0000,
            TC_H_ROOT,
            &attributes,
        ));
        let mut out = BTreeMap::new();
        assert!(!parse(&data, &mut out));
        let netem = &out[&3];
        assert_eq!(netem.rate_bps, Some(50_000_000));
        assert_eq!(netem.delay_ms, Some(25.0));
        assert!((netem.loss_pct.unwrap() - 2.0).abs() < 1e-6, "{netem:?}");
        assert_eq!(
            (out[&4].flow_rate_bps, out[&4].rate_bps),
            (Some(100_000_000), None)
        );
        let htb = &out[&5];
        assert_eq!((htb.handle, htb.default_class), (0x0001_0000, 0x10));
        // Its classes: the ceiling of 1:10 (80 Mbit/s) and of the root class 1:1.
        let class = |handle: u32, parent: u32, ceil_bytes: u32| {
            let mut parms = vec![0u8; 44];
            parms[20..24].copy_from_slice(&ceil_bytes.to_ne_bytes());
            let mut attributes = attribute(TCA_KIND, b"htb\0");
            attributes.extend(attribute(TCA_OPTIONS, &attribute(TCA_HTB_PARMS, &parms)));
            message(RTM_NEWTCLASS, 5, handle, parent, &attributes)
        };
        let mut classes = class(0x0001_0001, TC_H_ROOT, 125_000_000);
        classes.extend(class(0x0001_0010, 0x0001_0001, 10_000_000));
        let mut ceilings = BTreeMap::new();
        assert!(!parse_classes(&classes, &mut ceilings));
        assert_eq!(ceilings[&0x0001_0010], 80_000_000);
        assert_eq!(ceilings[&0x0001_0001], 1_000_000_000);
    }

    proptest! {
        /// Any bytes from the socket: the parser returns, and keeps no name over 64 bytes.
        #[test]
        fn netlink_parsing_never_panics(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut out = BTreeMap::new();
            let _ = parse(&data, &mut out);
            let _ = parse_classes(&data, &mut BTreeMap::new());
            prop_assert!(out.values().all(|q| q.kind.len() <= 64));
        }
    }

    /// A tbf's rate from the options the kernel sends: its parameters' 32-bit rate, or
    /// the 64-bit one beside it.
    #[test]
    fn a_tbf_rate_is_read_from_its_options() {
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
