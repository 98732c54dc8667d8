//! The marks a test's packets carry in their IP header (`--dscp`, `--ecn`): a DSCP class
//! and ECN capability, set by both ends on every socket of the test, and what the
//! receivers found on the datagrams they read (UDP: IP_RECVTOS, IPV6_RECVTCLASS).

use serde::{Deserialize, Serialize};

/// The IP header's traffic class a test sets on its packets, both ways. A DSCP over 63
/// is refused where it is read (a peer's test or profile).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "MarksRead")]
pub struct Marks {
    /// Differentiated Services code point, 0 to 63.
    pub dscp: u8,
    /// ECN-capable transport: UDP datagrams carry ECT(0); TCP connections ask for ECN.
    #[serde(default)]
    pub ecn: bool,
}

/// [`Marks`] as read, before its DSCP is checked.
#[derive(Deserialize)]
struct MarksRead {
    dscp: u8,
    #[serde(default)]
    ecn: bool,
}

impl TryFrom<MarksRead> for Marks {
    type Error = String;

    fn try_from(read: MarksRead) -> Result<Marks, String> {
        if read.dscp > 63 {
            return Err(format!("DSCP {} is over 63", read.dscp));
        }
        Ok(Marks {
            dscp: read.dscp,
            ecn: read.ecn,
        })
    }
}

/// The ECN field's code points, by the low two bits of the TOS byte.
pub const ECN_NAMES: [&str; 4] = ["Not-ECT", "ECT(1)", "ECT(0)", "CE"];

impl Marks {
    /// The TOS (IPv4) or traffic class (IPv6) byte: the DSCP in the high six bits, ECT(0)
    /// in the low two with `ecn`. (On a TCP socket the kernel keeps the low two bits
    /// itself: they say what ECN negotiated.)
    pub fn tos(&self) -> u8 {
        ((self.dscp & 0x3f) << 2) | if self.ecn { 0b10 } else { 0 }
    }
}

/// "EF", "CS1", "AF41" or the number.
pub fn dscp_name(dscp: u8) -> String {
    match dscp {
        0 => "BE".into(),
        46 => "EF".into(),
        44 => "VA".into(),
        8 | 16 | 24 | 32 | 40 | 48 | 56 => format!("CS{}", dscp / 8),
        d if (10..=38).contains(&d) && d % 2 == 0 && (d >> 3) >= 1 && (d & 7) != 0 => {
            format!("AF{}{}", d >> 3, (d & 7) / 2)
        }
        d => d.to_string(),
    }
}

/// Received datagrams that carried one TOS byte.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassCount {
    /// The TOS or traffic class byte as it arrived.
    pub tos: u8,
    pub datagrams: u64,
}

/// Counts by TOS byte, as a receiver keeps them while it reads.
#[derive(Debug, Clone)]
pub struct ClassTally(Box<[u64; 256]>);

impl Default for ClassTally {
    fn default() -> ClassTally {
        ClassTally(Box::new([0; 256]))
    }
}

impl ClassTally {
    pub fn add(&mut self, tos: u8, datagrams: u64) {
        let count = &mut self.0[tos as usize];
        *count = count.saturating_add(datagrams);
    }

    /// The classes seen, lowest TOS first.
    pub fn counts(&self) -> Vec<ClassCount> {
        (0..=255u8)
            .filter(|&tos| self.0[tos as usize] > 0)
            .map(|tos| ClassCount {
                tos,
                datagrams: self.0[tos as usize],
            })
            .collect()
    }
}

/// What a direction's receivers found, against what was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every datagram arrived with the DSCP sent (and ECT, or CE, where ECT was sent).
    Kept,
    /// Some or all arrived with another DSCP.
    Remarked,
    /// ECT was sent and some arrived without it (a box cleared the ECN field).
    EcnBleached,
}

/// How `classes` compare with `sent`: the DSCP first, then the ECN field (CE is a kept
/// ECT: the path marked congestion, as ECN means it to).
pub fn verdict(sent: Marks, classes: &[ClassCount]) -> Verdict {
    if classes.iter().any(|c| c.tos >> 2 != sent.dscp) {
        return Verdict::Remarked;
    }
    if sent.ecn && classes.iter().any(|c| c.tos & 0b11 == 0) {
        return Verdict::EcnBleached;
    }
    Verdict::Kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_tos_byte_holds_the_dscp_above_the_ecn_field() {
        assert_eq!(
            Marks {
                dscp: 46,
                ecn: true
            }
            .tos(),
            0xba
        );
        assert_eq!(
            Marks {
                dscp: 46,
                ecn: false
            }
            .tos(),
            0xb8
        );
        assert_eq!(Marks { dscp: 0, ecn: true }.tos(), 0x02);
    }

    #[test]
    fn a_verdict_names_a_remark_before_a_bleached_ecn_field_and_takes_ce_as_kept() {
        let sent = Marks {
            dscp: 46,
            ecn: true,
        };
        let class = |tos, datagrams| ClassCount { tos, datagrams };
        assert_eq!(
            verdict(sent, &[class(0xba, 10), class(0xbb, 2)]),
            Verdict::Kept
        );
        assert_eq!(verdict(sent, &[class(0xb8, 1)]), Verdict::EcnBleached);
        assert_eq!(verdict(sent, &[class(0x02, 10)]), Verdict::Remarked);
        assert_eq!(
            verdict(
                Marks {
                    dscp: 46,
                    ecn: false
                },
                &[class(0xb8, 3)]
            ),
            Verdict::Kept
        );
    }

    proptest! {
        /// Marks read from a peer: a DSCP up to 63 reads back as written, anything above
        /// is refused.
        #[test]
        fn marks_are_bounded_where_they_are_read(dscp in any::<u8>(), ecn in any::<bool>()) {
            let text = format!("{{\"dscp\":{dscp},\"ecn\":{ecn}}}");
            let read: Result<Marks, _> = serde_json::from_str(&text);
            if dscp <= 63 {
                prop_assert_eq!(read.unwrap(), Marks { dscp, ecn });
            } else {
                prop_assert!(read.unwrap_err().to_string().contains("over 63"));
            }
        }

        /// Any byte tallied comes back once with its count.
        #[test]
        fn a_tally_gives_back_what_it_counted(bytes in proptest::collection::vec(any::<u8>(), 0..500)) {
            let mut tally = ClassTally::default();
            let mut expected = std::collections::BTreeMap::new();
            for &b in &bytes {
                tally.add(b, 1);
                *expected.entry(b).or_insert(0u64) += 1;
            }
            let counts = tally.counts();
            prop_assert_eq!(counts.len(), expected.len());
            for c in counts {
                prop_assert_eq!(expected[&c.tos], c.datagrams);
            }
        }
    }
}
