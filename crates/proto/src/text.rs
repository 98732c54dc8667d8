//! Text a peer wrote, bounded and made printable where it is decoded.
//!
//! A reason, an abort or an error message from the other end of a connection ends up in
//! rows, logs, terminals and pages. Before a key is proved anything may have written it
//! (a squatter on a dead agent's port once sent a 60 MB reason that the mesh coordinator
//! copied into every row it wrote for that host), so the bound is applied in the decoder,
//! not by each reader: a [`PeerText`] holds at most [`MOST_PEER_CHARS`] characters and no
//! control character (a newline that forges a log line, a terminal escape).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// The most characters kept of one peer's text; what is cut is marked with "...".
pub const MOST_PEER_CHARS: usize = 2000;

/// `text` as one printable line: control characters written as Rust escapes (`\n`,
/// `\u{1b}`), at most [`MOST_PEER_CHARS`] characters so written, "..." after a cut.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MOST_PEER_CHARS + 3));
    let mut written = 0;
    for c in text.chars() {
        let escaped = c.is_control().then(|| c.escape_default().to_string());
        let width = escaped.as_ref().map_or(1, |e| e.chars().count());
        if written + width > MOST_PEER_CHARS {
            out.push_str("...");
            break;
        }
        written += width;
        match escaped {
            Some(escape) => out.push_str(&escape),
            None => out.push(c),
        }
    }
    out
}

/// Text from a peer: bounded and printable however it was sent (see the module's note).
/// Built from local text it is made printable the same way, so a message and its echo
/// read alike.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PeerText(String);

impl PeerText {
    pub fn new(text: &str) -> PeerText {
        PeerText(printable(text))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl From<String> for PeerText {
    fn from(text: String) -> PeerText {
        PeerText::new(&text)
    }
}

impl From<&str> for PeerText {
    fn from(text: &str) -> PeerText {
        PeerText::new(text)
    }
}

impl From<PeerText> for String {
    fn from(text: PeerText) -> String {
        text.0
    }
}

impl std::ops::Deref for PeerText {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PeerText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for PeerText {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for PeerText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<PeerText, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = PeerText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            // Borrowed where the JSON has no escapes: the long original is never copied.
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<PeerText, E> {
                Ok(PeerText::new(text))
            }
        }
        deserializer.deserialize_str(Visit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_peer_cannot_forge_lines_or_send_escapes() {
        let sent = r#""ok\n2026-01-01T00:00:00Z FAKE LOG LINE: ok\u001b[2J\r""#;
        let text: PeerText = serde_json::from_str(sent).unwrap();
        assert_eq!(
            text.as_str(),
            "ok\\n2026-01-01T00:00:00Z FAKE LOG LINE: ok\\u{1b}[2J\\r"
        );
    }

    #[test]
    fn a_long_reason_is_cut_where_it_is_decoded() {
        let sent = serde_json::to_string(&"é".repeat(500_000)).unwrap();
        let text: PeerText = serde_json::from_str(&sent).unwrap();
        assert_eq!(text.chars().count(), MOST_PEER_CHARS + 3);
        assert!(text.ends_with("..."));
    }

    proptest! {
        #[test]
        fn any_text_decodes_bounded_and_printable(text in any::<String>()) {
            let json = serde_json::to_string(&text).unwrap();
            let decoded: PeerText = serde_json::from_str(&json).unwrap();
            prop_assert!(decoded.chars().count() <= MOST_PEER_CHARS + 3);
            prop_assert!(!decoded.chars().any(char::is_control));
            // Printable text under the bound comes through as it was.
            if text.chars().count() <= MOST_PEER_CHARS && !text.chars().any(char::is_control) {
                prop_assert_eq!(decoded.as_str(), text.as_str());
            }
        }
    }
}
