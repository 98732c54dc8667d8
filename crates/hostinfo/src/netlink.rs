//! Each interface's root qdisc, from the kernel's rtnetlink (RTM_GETQDISC dump): what `tc
//! qdisc show` prints, without running `tc`. Every message is bounded by the bytes the
//! kernel said it sent; a malformed one ends the parse.

use std::collections::BTreeMap;

const RTM_GETQDISC: u16 = 38;
const RTM_NEWQDISC: u16 = 36;
const NLMSG_DONE: u16 = 3;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const TCA_KIND: u16 = 1;
const TC_H_ROOT: u32 = 0xFFFF_FFFF;
const HEADER: usize = 16;
const TCMSG: usize = 20;
/// Messages read before giving up: a host has far fewer qdiscs.
const MAX_READS: usize = 4096;

/// Root qdisc kind by interface index.
pub fn root_qdiscs() -> BTreeMap<u32, String> {
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

fn dump(fd: libc::c_int) -> Option<BTreeMap<u32, String>> {
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
pub fn parse(mut data: &[u8], out: &mut BTreeMap<u32, String>) -> bool {
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
                    if let (Ok(index), Some(name)) =
                        (u32::try_from(ifindex), kind_of(&data[HEADER + TCMSG..len]))
                    {
                        out.insert(index, name);
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

/// `tc qdisc show dev IF` text (a fixture): the root qdisc's kind.
pub fn parse_tc_show(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next()? == "qdisc" && line.contains(" root"))
            .then(|| words.next().map(str::to_string))?
    })
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
        assert_eq!(
            parse_tc_show("qdisc mq 0: root\nqdisc fq_codel 0: parent :1 limit 10240p\n"),
            Some("mq".to_string())
        );
        assert_eq!(
            parse_tc_show("qdisc noqueue 0: root refcnt 2\n"),
            Some("noqueue".into())
        );
    }

    proptest! {
        /// Any bytes from the socket: the parser returns, and keeps no name over 64 bytes.
        #[test]
        fn netlink_parsing_never_panics(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut out = BTreeMap::new();
            let _ = parse(&data, &mut out);
            prop_assert!(out.values().all(|n| n.len() <= 64));
        }
    }
}
