//! A vocabulary term's text, held inline when it is short.
//!
//! The vocabulary is a B-tree keyed by term text (sorted, for prefix completions), and every
//! row a node applies looks its terms up in it. With the text behind a pointer, each key
//! compared on the way down is a read of another heap block: at a million rows the
//! vocabulary holds over a million terms, those blocks are not in cache, and the lookups
//! took about an eighth of a follower's time applying a bulk load (profiled). Nearly every
//! term (a stemmed word, a number, a part of an identifier) fits in [`Text::INLINE`] bytes,
//! so it is kept in the key itself, and a comparison reads the node it is in. The rare
//! longer term is shared between the vocabulary and the term table, as every term was
//! before.
//!
//! Inline text also takes no allocation of its own: 24 bytes where a shared one takes 16
//! plus a heap block of at least 32.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::sync::Arc;

/// A term's text. Compared and borrowed as its bytes, so a B-tree keyed by it is
/// searched with a `&[u8]` and sorts as `str` does (byte order).
#[derive(Debug, Clone)]
pub(super) enum Text {
    /// Up to [`Text::INLINE`] bytes, the first `len` of `bytes`.
    Inline { len: u8, bytes: [u8; Text::INLINE] },
    /// Longer text.
    Shared(Arc<str>),
}

impl Text {
    /// The longest text kept inline: what fits beside the length and the variant's tag in
    /// the 24 bytes the shared variant needs anyway.
    pub(super) const INLINE: usize = 22;

    pub(super) fn new(text: &str) -> Self {
        let len = text.len();
        if len <= Self::INLINE {
            let mut bytes = [0; Self::INLINE];
            bytes[..len].copy_from_slice(text.as_bytes());
            Self::Inline {
                len: len as u8,
                bytes,
            }
        } else {
            Self::Shared(Arc::from(text))
        }
    }

    pub(super) fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Self::Shared(text) => text.as_bytes(),
        }
    }

    /// The text (always valid UTF-8: it was copied from a `&str`).
    pub(super) fn as_str(&self) -> &str {
        match self {
            Self::Inline { .. } => std::str::from_utf8(self.as_bytes()).unwrap_or_default(),
            Self::Shared(text) => text,
        }
    }

    /// Bytes held on the heap for it (a shared text's block: two counts and the text).
    pub(super) fn heap_bytes(&self) -> usize {
        match self {
            Self::Inline { .. } => 0,
            Self::Shared(text) => text.len() + 16,
        }
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Text {}

impl PartialOrd for Text {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Text {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl Borrow<[u8]> for Text {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_is_no_larger_than_a_shared_one_needs() {
        assert_eq!(std::mem::size_of::<Text>(), 24);
    }

    #[test]
    fn short_text_is_inline_and_long_text_shared_and_both_read_back() {
        let at_most = "a".repeat(Text::INLINE);
        let longer = "b".repeat(Text::INLINE + 1);
        for (text, inline) in [
            ("", true),
            ("été", true),
            (&*at_most, true),
            (&*longer, false),
        ] {
            let held = Text::new(text);
            assert_eq!(matches!(held, Text::Inline { .. }), inline, "{text}");
            assert_eq!(held.as_str(), text);
            assert_eq!(held.heap_bytes(), if inline { 0 } else { text.len() + 16 });
        }
    }

    #[test]
    fn texts_sort_as_their_strings_whichever_way_each_is_held() {
        let long = "c".repeat(Text::INLINE + 3);
        let mut words = vec![
            "zeta",
            "alpha",
            "alphabet",
            long.as_str(),
            "c",
            "ccc",
            "é",
            "",
        ];
        let mut texts: Vec<Text> = words.iter().map(|w| Text::new(w)).collect();
        texts.sort();
        words.sort();
        let sorted: Vec<&str> = texts.iter().map(Text::as_str).collect();
        assert_eq!(sorted, words);
        let set: std::collections::BTreeSet<Text> = texts.into_iter().collect();
        assert!(set.contains(long.as_bytes()));
        assert!(set.contains("alpha".as_bytes()));
        assert!(!set.contains("alph".as_bytes()));
    }
}
