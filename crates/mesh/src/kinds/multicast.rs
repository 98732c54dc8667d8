//! `run = "multicast"`: one source's stream to a group and every receiver its groups pair
//! it with, at once (docs/multicast.md's sender and receivers, run by the agents): the
//! receivers' agents join the group, the source's agent sends a paced stream to it a
//! moment later, and each receiver's count of it is a row of its own (source ->
//! receiver), headed by the share of the source's datagrams that receiver never got.
//! The kind's one job per source, not per pair, is what makes it one-to-many.

use super::{address_of, Context, JobPlan, JobSite, Kind, TestKind, Transport};
use crate::model::DEFAULT_TEST_SECONDS;
use crate::reading::{read_size, MeshError, Reader, TestTable};
use linerate_model::measure::{Headline, Measure};
use linerate_model::units::parse_rate;
use std::net::IpAddr;

/// iperf 2's port, as `linerate stream GROUP -u` and `serve --join` use by default.
pub const DEFAULT_MULTICAST_PORT: u16 = 5001;
/// The rate of a group's stream when the file gives none: light enough to run all day.
pub const DEFAULT_MULTICAST_RATE_BPS: u64 = 1_000_000;
/// How long the source waits after the job starts before it sends, so that every
/// receiver has joined: a receiver that joins after the first datagram would count the
/// datagrams before its join as lost.
pub const MULTICAST_LEAD_S: f64 = 1.0;
/// How long a receiver waits past the stream's end for its final datagram before it
/// reports what it has.
pub const MULTICAST_SILENCE_S: f64 = 2.0;

#[derive(Debug, Clone, PartialEq)]
pub struct Multicast {
    /// The group: IPv4 224.0.0.0/4 or IPv6 ff00::/8.
    pub group: IpAddr,
    pub port: u16,
    /// Payload bit/s.
    pub rate_bps: u64,
    /// Payload bytes per datagram.
    pub size: u64,
    /// The TTL (IPv6 hop limit): 1 stays on the link.
    pub ttl: u32,
    /// Receivers join the group from the source alone (IGMPv3/MLDv2) instead of any.
    pub source_specific: bool,
}

impl Kind for Multicast {
    fn run(&self) -> &'static str {
        "multicast"
    }

    fn transport(&self) -> Transport {
        Transport::Udp
    }

    fn measure(&self) -> Measure {
        Measure::Loss
    }

    fn headline(&self) -> Headline {
        Headline::Loss
    }

    fn marks_packets(&self) -> bool {
        true
    }

    fn fans_out(&self) -> bool {
        true
    }

    fn plan(&self, site: &JobSite) -> JobPlan {
        // Who the receivers hear the stream from: the source's own address (its
        // `source`, else its agent's), where it is one.
        let sender: Option<IpAddr> = site
            .src
            .source
            .as_ref()
            .and_then(|s| s.address)
            .or_else(|| address_of(site.src).parse().ok());
        // What the agents' multicast jobs read (drivers' `multicast_job`).
        let send = serde_json::json!({
            "group": self.group,
            "port": self.port,
            "rate_bps": self.rate_bps,
            "length": self.size,
            "ttl": self.ttl,
            "seconds": site.seconds,
            "lead_s": MULTICAST_LEAD_S,
            "marks": site.marks,
        });
        let receive = serde_json::json!({
            "group": self.group,
            "port": self.port,
            "sender": sender,
            "source_specific": self.source_specific,
            "seconds": MULTICAST_LEAD_S + site.seconds + MULTICAST_SILENCE_S,
        });
        JobPlan::Fanout {
            send: ("multicast_send", send),
            receive: ("multicast_receive", receive),
        }
    }
}

/// A multicast test's options: its `group` (required), `port`, `rate` (payload bit/s,
/// 1M by default), `size` (payload bytes a datagram, 1470 by default, iperf 2's), `ttl`
/// (1 by default), `source_specific`, its `duration`.
pub(super) fn read(
    reader: &Reader,
    table: &mut TestTable,
    context: &Context,
) -> Result<(TestKind, f64), MeshError> {
    let seconds = table.seconds_at_least(
        reader,
        "duration",
        (1.0, "a multicast stream must last at least 1 s"),
        DEFAULT_TEST_SECONDS,
    )?;
    let Some(given) = table.take::<String>(reader, "group")? else {
        return Err(reader.at(
            context.run,
            format!(
                "test '{}': run = \"multicast\" needs its group (group = \"239.1.1.1\")",
                context.name
            ),
        ));
    };
    let group = given
        .get_ref()
        .parse::<IpAddr>()
        .ok()
        .filter(IpAddr::is_multicast)
        .ok_or_else(|| {
            reader.at(
                &given,
                format!(
                    "group '{}' is not a multicast address (224.0.0.0/4 or ff00::/8)",
                    given.get_ref()
                ),
            )
        })?;
    let rate_bps = match table.take::<String>(reader, "rate")? {
        Some(r) => parse_rate(r.get_ref())
            .ok()
            .filter(|&bps| bps > 0)
            .ok_or_else(|| {
                reader.at(&r, format!("rate '{}' is not a rate like 10M", r.get_ref()))
            })?,
        None => DEFAULT_MULTICAST_RATE_BPS,
    };
    let given_size = table.take::<String>(reader, "size")?;
    let size = read_size(reader, &given_size, "size", 1470)?;
    if !(20..=65_507).contains(&size) {
        let at = given_size
            .as_ref()
            .expect("only a given size is out of range");
        return Err(reader.at(
            at,
            format!("size {size}: a multicast datagram carries 20 to 65507 bytes"),
        ));
    }
    let ttl = match table.take::<u32>(reader, "ttl")? {
        Some(t) if (1..=255).contains(t.get_ref()) => *t.get_ref(),
        Some(t) => return Err(reader.at(&t, format!("ttl {} must be from 1 to 255", t.get_ref()))),
        None => 1,
    };
    let port = table
        .take::<u16>(reader, "port")?
        .map_or(DEFAULT_MULTICAST_PORT, |p| *p.get_ref());
    let source_specific = table
        .take::<bool>(reader, "source_specific")?
        .is_some_and(|s| *s.get_ref());
    let kind = TestKind::Multicast(Multicast {
        group,
        port,
        rate_bps,
        size,
        ttl,
        source_specific,
    });
    Ok((kind, seconds))
}

#[cfg(test)]
mod tests {
    use crate::{job_plan, parse, JobPlan};

    fn mesh(test: &str) -> String {
        format!(
            "name = \"m\"\n\
             [[host]]\nname = \"a\"\naddress = \"10.0.0.1:5201\"\n\
             [[host]]\nname = \"b\"\naddress = \"10.0.0.2:5201\"\n\
             [[host]]\nname = \"c\"\naddress = \"10.0.0.3:5201\"\n\
             [[host]]\nname = \"d\"\naddress = \"10.0.0.4:5201\"\n\
             [[test]]\nname = \"g\"\nrun = \"multicast\"\ninterval = \"1m\"\n{test}\n\
             [[group]]\nname = \"tv\"\nhosts = [\"a\", \"b\", \"c\"]\nshape = \"star\"\ncenter = \"a\"\n\
             directions = \"one\"\ntests = [\"g\"]\n\
             [[group]]\nname = \"more\"\nshape = \"pairs\"\npairs = [[\"a\", \"d\"], [\"b\", \"c\"]]\n\
             directions = \"one\"\ntests = [\"g\"]\n"
        )
    }

    /// A multicast test is one job per source, to every receiver its groups pair it with
    /// (a's star and its pair with d: b, c and d; b's pair: c), each receiver's agent asked
    /// to join and the source's to send, as the file says.
    #[test]
    fn a_multicast_test_is_one_job_per_source_to_each_of_its_receivers() {
        let m = parse(
            "m.toml",
            &mesh(
                "group = \"239.1.2.3\"\nrate = \"2M\"\nsize = \"1000\"\nttl = 4\nduration = \"5s\"",
            ),
        )
        .unwrap();
        let jobs = m.jobs();
        assert_eq!(jobs.len(), 2, "{jobs:?}");
        let names = |hosts: Vec<usize>| -> Vec<String> {
            hosts.into_iter().map(|h| m.hosts[h].name.clone()).collect()
        };
        assert_eq!((jobs[0].src, jobs[0].dst), (0, 0));
        assert_eq!(names(m.receivers(&jobs[0])), ["b", "c", "d"]);
        assert_eq!((jobs[1].src, jobs[1].dst), (1, 1));
        assert_eq!(names(m.receivers(&jobs[1])), ["c"]);
        let JobPlan::Fanout { send, receive } = job_plan(&m, &jobs[0]) else {
            panic!("a fan-out job")
        };
        assert_eq!(send.0, "multicast_send");
        assert_eq!(send.1["group"], "239.1.2.3");
        assert_eq!(send.1["rate_bps"], 2_000_000);
        assert_eq!(send.1["length"], 1000);
        assert_eq!(send.1["ttl"], 4);
        assert_eq!(send.1["seconds"], 5.0);
        assert_eq!(receive.0, "multicast_receive");
        assert_eq!(receive.1["sender"], "10.0.0.1");
        assert_eq!(receive.1["source_specific"], false);
        // The receivers listen through the lead, the stream and the silence after it.
        assert_eq!(receive.1["seconds"], 8.0);
    }

    /// A group that is not one, a size a datagram cannot carry, a TTL past 255 and a
    /// missing group are each refused where they stand.
    #[test]
    fn a_multicast_test_is_refused_with_what_is_wrong() {
        for (test, says) in [
            ("group = \"10.0.0.9\"", "is not a multicast address"),
            ("group = \"239.1.1.1\"\nsize = \"10\"", "20 to 65507"),
            ("group = \"239.1.1.1\"\nttl = 300", "ttl 300"),
            ("rate = \"1M\"", "needs its group"),
            (
                "group = \"239.1.1.1\"\nparallel = 2",
                "'parallel' is not an option",
            ),
        ] {
            let error = parse("m.toml", &mesh(test)).unwrap_err().to_string();
            assert!(error.contains(says), "{test}: {error}");
        }
    }
}
