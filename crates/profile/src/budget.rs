//! What one request for profile work may ask of an agent (docs/security.md): every value
//! a group carries is checked here before anything is allocated for it, because groups
//! also arrive from the network (an agent's `prepare` and `mirror` requests) and a group's
//! sizes are multiplied by its threads.
//!
//! A group host keeps a latency histogram (about 230 KB once used) for every transaction
//! and operation, a counter per thread and transaction, and two message buffers per thread;
//! the bounds below keep one request's share of those under about 256 MiB.

use crate::model::{Action, FileSend, Group, Repeat, Size, Transfer};

/// Groups in one request.
pub const MAX_GROUPS: usize = 64;
/// Transactions and operations, counted together over one request's groups: each may
/// get a latency histogram.
pub const MAX_TIMED_ITEMS: usize = 512;
/// Threads × transactions of one request: a mirror keeps a counter for each.
pub const MAX_THREAD_TRANSACTIONS: u64 = 1 << 20;
/// Bytes of message buffers over one request's threads (each thread holds two buffers
/// of its largest message, up to 256 KiB each).
pub const MAX_BUFFER_BYTES: u64 = 256 << 20;
/// The largest message buffer a thread holds, whatever its messages ask.
pub const MAX_THREAD_BUFFER: u64 = 256 * 1024;
/// Seconds a duration, a think or a limit may say at most: a day.
pub const MAX_SECONDS: f64 = 86_400.0;
/// Messages one operation may send per execution.
pub const MAX_COUNT: u64 = 1_000_000_000;
/// Files one sendfile operation may choose from: each is listed in the group its peer
/// receives.
pub const MAX_SEND_FILES: usize = 1024;

/// Why `groups` ask more than one request may, if they do: the first value over its
/// bound, named.
pub fn check(groups: &[&Group]) -> Result<(), String> {
    if groups.len() > MAX_GROUPS {
        return Err(format!(
            "{} groups in one request, at most {MAX_GROUPS}",
            groups.len()
        ));
    }
    let mut timed = 0usize;
    let mut thread_transactions = 0u64;
    let mut buffers = 0u64;
    for group in groups {
        let name = &group.name;
        if group.threads == 0 || group.threads > crate::MAX_THREADS {
            return Err(format!(
                "group '{name}': {} threads, between 1 and {} allowed",
                group.threads,
                crate::MAX_THREADS
            ));
        }
        let threads = u64::from(group.threads);
        timed = timed.saturating_add(group.transactions.len());
        thread_transactions =
            thread_transactions.saturating_add(threads * group.transactions.len() as u64);
        let mut largest = 0u64;
        for (ti, txn) in group.transactions.iter().enumerate() {
            let at = format!("group '{name}' transaction {}", ti + 1);
            timed = timed.saturating_add(txn.ops.len());
            if timed > MAX_TIMED_ITEMS {
                return Err(format!(
                    "more than {MAX_TIMED_ITEMS} transactions and operations in one request"
                ));
            }
            if let Repeat::Duration(seconds) = txn.repeat {
                seconds_within(seconds, &at, "duration")?;
            }
            if let Some(rate) = txn.rate {
                rate_within(rate, &at)?;
            }
            for (oi, op) in txn.ops.iter().enumerate() {
                let at = format!("{at} operation {}", oi + 1);
                if let Action::Think(think) = &op.action {
                    seconds_within(think.seconds, &at, "think")?;
                }
                if let Action::Sendfile(f) | Action::ReceiveFiles(f) = &op.action {
                    files_within(f, &at)?;
                }
                if let Some((transfer, _)) = op.action.transfer() {
                    if let (Some(last), Size::Fixed(size)) = (transfer.last, transfer.size) {
                        if last == 0 || last > size {
                            return Err(format!(
                                "{at}: a last message of {last} bytes, the messages are {size}"
                            ));
                        }
                    }
                    for size in [Some(transfer.size), transfer.rsize].into_iter().flatten() {
                        if let Size::Random { min, max } = size {
                            if min > max {
                                return Err(format!(
                                    "{at}: size rand({min},{max}) has min over max"
                                ));
                            }
                        }
                    }
                    largest = largest.max(largest_message(transfer));
                    if transfer.count == 0 || transfer.count > MAX_COUNT {
                        return Err(format!(
                            "{at}: count {} outside 1 to {MAX_COUNT}",
                            transfer.count
                        ));
                    }
                    if let Some(rate) = transfer.rate {
                        rate_within(rate, &at)?;
                    }
                }
            }
        }
        buffers = buffers.saturating_add(threads * 2 * largest.clamp(1, MAX_THREAD_BUFFER));
    }
    if thread_transactions > MAX_THREAD_TRANSACTIONS {
        return Err(format!(
            "{thread_transactions} thread-transactions (threads × transactions) in one request, at most {MAX_THREAD_TRANSACTIONS}"
        ));
    }
    if buffers > MAX_BUFFER_BYTES {
        return Err(format!(
            "message buffers of {} MiB over the request's threads (two of each thread's largest message), at most {} MiB",
            buffers >> 20,
            MAX_BUFFER_BYTES >> 20
        ));
    }
    Ok(())
}

/// The most bits per second a group's threads may move, both ways together, from the
/// rates its transactions and operations declare: `None` when a transaction moves data
/// unpaced. Transactions run one after another, so the fastest bounds the group.
pub fn declared_rate_bps(group: &Group) -> Option<f64> {
    let mut fastest = 0.0f64;
    for txn in &group.transactions {
        let transfers: Vec<_> = txn
            .ops
            .iter()
            .filter_map(|op| op.action.transfer())
            .map(|(t, _)| t)
            .collect();
        let per_s = match txn.rate {
            Some(rate) => {
                let bytes: f64 = transfers
                    .iter()
                    .map(|t| t.count as f64 * largest_message(t) as f64)
                    .sum();
                rate * bytes
            }
            None => {
                let mut sum = 0.0;
                for t in &transfers {
                    sum += t.rate? * largest_message(t) as f64;
                }
                sum
            }
        };
        fastest = fastest.max(per_s * 8.0);
    }
    Some(fastest * f64::from(group.threads))
}

fn files_within(send: &FileSend, at: &str) -> Result<(), String> {
    if send.files.len() > MAX_SEND_FILES {
        return Err(format!(
            "{at}: {} files to choose from, at most {MAX_SEND_FILES}",
            send.files.len()
        ));
    }
    if send.per_execution() == 0 || send.per_execution() > crate::MAX_FILES_PER_SEND {
        return Err(format!(
            "{at}: {} files per send, between 1 and {}",
            send.per_execution(),
            crate::MAX_FILES_PER_SEND
        ));
    }
    if send.count == 0 || send.count > MAX_COUNT {
        return Err(format!(
            "{at}: count {} outside 1 to {MAX_COUNT}",
            send.count
        ));
    }
    Ok(())
}

/// Refuses groups that would send this host's files: a group from the network runs on
/// a peer's word, and a peer may not choose what of this host's disk goes out. (A mirror
/// of a sendfile receives files and is welcome.)
pub fn sends_no_files(groups: &[&Group]) -> Result<(), String> {
    for group in groups {
        let sends = group
            .transactions
            .iter()
            .flat_map(|t| &t.ops)
            .any(|op| matches!(op.action, Action::Sendfile(_)));
        if sends {
            return Err(format!(
                "group '{}' would send this host's files (sendfile); only the host that reads a profile sends its own files",
                group.name
            ));
        }
    }
    Ok(())
}

/// The largest message a transfer moves either way (its size, or its peer's `rsize`).
fn largest_message(transfer: &Transfer) -> u64 {
    transfer.size.max().max(transfer.rsize.map_or(0, Size::max))
}

/// Whether every connection of the group runs through TLS (`ssl`).
pub fn all_encrypted(group: &Group) -> bool {
    group
        .transactions
        .iter()
        .flat_map(|t| &t.ops)
        .all(|op| match &op.action {
            Action::Connect(e) | Action::Accept(e) => e.protocol == crate::model::Protocol::Ssl,
            _ => true,
        })
}

fn seconds_within(seconds: f64, at: &str, what: &str) -> Result<(), String> {
    if seconds.is_finite() && (0.0..=MAX_SECONDS).contains(&seconds) {
        Ok(())
    } else {
        Err(format!(
            "{at}: {what} of {seconds} s outside 0 to {MAX_SECONDS} s"
        ))
    }
}

fn rate_within(rate: f64, at: &str) -> Result<(), String> {
    if rate.is_finite() && rate > 0.0 && rate <= 1e12 {
        Ok(())
    } else {
        Err(format!(
            "{at}: rate {rate} per second is not a positive finite number"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Op, Think, Transaction, Transfer};

    fn group(threads: u32, transactions: Vec<Transaction>) -> Group {
        Group {
            name: "g".into(),
            threads,
            host: None,
            transactions,
        }
    }

    fn txn(ops: Vec<Action>) -> Transaction {
        Transaction {
            repeat: Repeat::Iterations(1),
            rate: None,
            ops: ops
                .into_iter()
                .map(|action| Op { conn: None, action })
                .collect(),
        }
    }

    fn write(size: u64) -> Action {
        Action::Write(Transfer {
            size: Size::Fixed(size),
            rsize: None,
            count: 1,
            last: None,
            rate: None,
            canfail: false,
        })
    }

    #[test]
    fn requests_that_once_exhausted_an_agent_are_refused_naming_the_bound() {
        // 16 threads × 400,000 empty transactions.
        let many = group(16, vec![txn(vec![]); 400_000]);
        assert!(check(&[&many])
            .unwrap_err()
            .contains("transactions and operations"));
        // 900,000 nops.
        let nops = group(1, vec![txn(vec![Action::Nop; 900_000])]);
        assert!(check(&[&nops]).is_err());
        // 200,000 groups.
        let small = group(1, vec![txn(vec![Action::Nop])]);
        let groups: Vec<&Group> = std::iter::repeat_n(&small, 200_000).collect();
        assert!(check(&groups).unwrap_err().contains("200000 groups"));
        // 4,096 threads × 256 KiB messages: 2 GiB of buffers.
        let wide = group(4096, vec![txn(vec![write(256 * 1024)])]);
        assert!(check(&[&wide]).unwrap_err().contains("MiB"));
        // 16,384 threads × 100 transactions.
        let counters = group(16_384, vec![txn(vec![]); 100]);
        assert!(check(&[&counters])
            .unwrap_err()
            .contains("thread-transactions"));
        // What a profile usually asks: fine.
        let usual = group(64, vec![txn(vec![write(64 * 1024), Action::Nop]); 4]);
        assert_eq!(check(&[&usual, &usual]), Ok(()));
    }

    #[test]
    fn a_group_declares_its_rate_or_is_unpaced() {
        let mut paced = write(1000);
        if let Action::Write(t) = &mut paced {
            t.rate = Some(100.0);
        }
        // 4 threads × 100 messages/s × 1,000 bytes × 8 bits.
        let group4 = group(4, vec![txn(vec![paced.clone()])]);
        assert_eq!(declared_rate_bps(&group4), Some(3_200_000.0));
        let mut per_txn = txn(vec![write(1000), write(500)]);
        per_txn.rate = Some(10.0);
        assert_eq!(declared_rate_bps(&group(1, vec![per_txn])), Some(120_000.0));
        assert_eq!(
            declared_rate_bps(&group(1, vec![txn(vec![paced, write(1)])])),
            None
        );
        assert_eq!(
            declared_rate_bps(&group(9, vec![txn(vec![Action::Nop])])),
            Some(0.0)
        );
    }

    #[test]
    fn values_that_panicked_a_worker_are_refused() {
        for seconds in [f64::NAN, -1.0, f64::INFINITY, 1e30] {
            let think = group(
                1,
                vec![txn(vec![Action::Think(Think {
                    seconds,
                    busy: false,
                })])],
            );
            assert!(check(&[&think]).unwrap_err().contains("think"), "{seconds}");
            let mut timed = txn(vec![]);
            timed.repeat = Repeat::Duration(seconds);
            assert!(check(&[&group(1, vec![timed])]).is_err(), "{seconds}");
        }
        for rate in [f64::NAN, 0.0, -5.0, f64::INFINITY] {
            let mut paced = txn(vec![]);
            paced.rate = Some(rate);
            assert!(check(&[&group(1, vec![paced])])
                .unwrap_err()
                .contains("rate"));
        }
        let backwards = group(
            1,
            vec![txn(vec![Action::Read(Transfer {
                size: Size::Random { min: 10, max: 2 },
                rsize: None,
                count: 1,
                last: None,
                rate: None,
                canfail: false,
            })])],
        );
        assert!(check(&[&backwards]).unwrap_err().contains("min over max"));
        assert!(check(&[&group(0, vec![])]).is_err());
    }
}
