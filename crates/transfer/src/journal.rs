//! The journal beside a `.part` file: which chunks are verified and on the disk, so a
//! copy run again fetches only the rest (docs/transfer-protocol.md 6).
//!
//! ```text
//! linerate-journal 1 size=1073741824 chunk=1048576 identity=<64 hex>
//! 0 <64 hex: the chunk's BLAKE3>
//! 1 <...>
//! ```
//!
//! A line is appended only after the chunk's bytes are `fdatasync`ed, so every whole line
//! speaks of durable bytes. A line cut short by a crash (no newline, or not two fields) and
//! everything after it is ignored, and said so.

/// The first word of a journal.
const MAGIC: &str = "linerate-journal";
const VERSION: u32 = 1;

/// What a journal describes: the file it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalHeader {
    pub size: u64,
    pub chunk: u64,
    /// The source's identity as the sender named it (size and modification time, hashed).
    pub identity: String,
}

impl JournalHeader {
    pub fn encode(&self) -> String {
        format!(
            "{MAGIC} {VERSION} size={} chunk={} identity={}\n",
            self.size, self.chunk, self.identity
        )
    }
}

/// One durable chunk's line.
pub fn entry(chunk: u64, hash: &[u8; 32]) -> String {
    format!("{chunk} {}\n", hash_hex(hash))
}

/// What a journal says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// Durable chunks and their hashes, ascending, each once.
    pub chunks: Vec<(u64, [u8; 32])>,
    /// The 1-based line where a cut-short or unreadable line stopped the reading.
    pub truncated_at: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JournalError {
    #[error("not a linerate journal")]
    NotAJournal,
    #[error("journal version {0} is not one this build reads")]
    Version(String),
    #[error("the journal belongs to another file (size, chunk size or source identity differ)")]
    OtherFile,
}

/// Parses a hash of 64 hex digits (BLAKE3's own hex form).
pub fn parse_hash(text: &str) -> Option<[u8; 32]> {
    blake3::Hash::from_hex(text)
        .ok()
        .map(|hash| *hash.as_bytes())
}

/// Hex of a hash.
pub fn hash_hex(hash: &[u8; 32]) -> String {
    blake3::Hash::from_bytes(*hash).to_hex().to_string()
}

fn parse_header(line: &str) -> Result<JournalHeader, JournalError> {
    let mut words = line.split(' ');
    if words.next() != Some(MAGIC) {
        return Err(JournalError::NotAJournal);
    }
    let version = words.next().ok_or(JournalError::NotAJournal)?;
    if version != VERSION.to_string() {
        return Err(JournalError::Version(version.chars().take(16).collect()));
    }
    let mut field = |name: &str| -> Result<String, JournalError> {
        words
            .next()
            .and_then(|w| w.strip_prefix(name))
            .and_then(|w| w.strip_prefix('='))
            .map(str::to_string)
            .ok_or(JournalError::NotAJournal)
    };
    let size = field("size")?
        .parse()
        .map_err(|_| JournalError::NotAJournal)?;
    let chunk = field("chunk")?
        .parse()
        .map_err(|_| JournalError::NotAJournal)?;
    let identity = field("identity")?;
    Ok(JournalHeader {
        size,
        chunk,
        identity,
    })
}

/// Reads a journal written for `expected`. Chunk numbers at or past the file's end, bad
/// hashes and cut-short lines end the reading (what came before still counts).
pub fn parse(bytes: &[u8], expected: &JournalHeader) -> Result<Recovered, JournalError> {
    let text = String::from_utf8_lossy(bytes);
    let Some(header_end) = text.find('\n') else {
        return Err(JournalError::NotAJournal);
    };
    let header = parse_header(&text[..header_end])?;
    if header != *expected {
        return Err(JournalError::OtherFile);
    }
    let chunks_in_file = expected.size.div_ceil(expected.chunk.max(1));
    let mut have = std::collections::BTreeMap::new();
    let mut truncated_at = None;
    let mut rest = &text[header_end + 1..];
    let mut line_number = 1;
    while !rest.is_empty() {
        line_number += 1;
        let Some(end) = rest.find('\n') else {
            truncated_at = Some(line_number);
            break;
        };
        let line = &rest[..end];
        rest = &rest[end + 1..];
        let parsed = line.split_once(' ').and_then(|(chunk, hash)| {
            let chunk: u64 = chunk.parse().ok()?;
            (chunk < chunks_in_file).then_some(())?;
            Some((chunk, parse_hash(hash)?))
        });
        match parsed {
            Some((chunk, hash)) => {
                have.insert(chunk, hash);
            }
            None => {
                truncated_at = Some(line_number);
                break;
            }
        }
    }
    Ok(Recovered {
        chunks: have.into_iter().collect(),
        truncated_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header() -> JournalHeader {
        JournalHeader {
            size: 5 << 20,
            chunk: 1 << 20,
            identity: "ab".repeat(32),
        }
    }

    #[test]
    fn entries_read_back_and_a_torn_tail_is_dropped() {
        let mut text = header().encode();
        text += &entry(0, &[1; 32]);
        text += &entry(3, &[3; 32]);
        text += &entry(4, &[4; 32])[..20];
        let recovered = parse(text.as_bytes(), &header()).unwrap();
        assert_eq!(recovered.chunks, vec![(0, [1; 32]), (3, [3; 32])]);
        assert_eq!(recovered.truncated_at, Some(4));
    }

    #[test]
    fn another_files_journal_is_not_used() {
        let mut other = header();
        other.identity = "cd".repeat(32);
        let text = other.encode() + &entry(0, &[1; 32]);
        assert_eq!(
            parse(text.as_bytes(), &header()),
            Err(JournalError::OtherFile)
        );
        assert_eq!(parse(b"hello\n", &header()), Err(JournalError::NotAJournal));
        assert_eq!(parse(b"", &header()), Err(JournalError::NotAJournal));
    }

    #[test]
    fn chunks_past_the_end_stop_the_reading() {
        let text = header().encode() + &entry(5, &[1; 32]) + &entry(1, &[1; 32]);
        let recovered = parse(text.as_bytes(), &header()).unwrap();
        assert!(recovered.chunks.is_empty());
        assert_eq!(recovered.truncated_at, Some(2));
    }

    proptest! {
        #[test]
        fn any_bytes_after_a_header_never_panic_and_stay_in_the_file(tail in proptest::collection::vec(any::<u8>(), 0..600)) {
            let mut bytes = header().encode().into_bytes();
            bytes.extend_from_slice(&tail);
            let recovered = parse(&bytes, &header()).unwrap();
            for (chunk, _) in recovered.chunks {
                prop_assert!(chunk < 5);
            }
        }

        #[test]
        fn any_prefix_of_a_journal_keeps_only_whole_lines(cut in 0usize..400) {
            let mut text = header().encode();
            for chunk in 0..5 {
                text += &entry(chunk, &[chunk as u8; 32]);
            }
            let cut = cut.min(text.len());
            if let Ok(recovered) = parse(&text.as_bytes()[..cut], &header()) {
                let whole_lines = text[..cut].matches('\n').count().saturating_sub(1);
                prop_assert_eq!(recovered.chunks.len(), whole_lines);
            }
        }
    }
}
