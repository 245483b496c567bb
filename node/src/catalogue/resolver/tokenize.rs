//! Text analysis: Unicode words -> lowercase, stop-word-free, stemmed terms; CJK runs -> bigrams.
//!
//! The same [`Analyzer`] runs over rows and queries, so both sides agree on every term.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::OnceLock;

use rust_stemmers::{Algorithm, Stemmer};
use unicode_segmentation::UnicodeSegmentation;

/// English function words plus conversational request filler ("please", "tell me", "I want").
/// Filler is rare in rows, so without this list it would earn a high IDF and pull in
/// whichever row happens to contain it. Words that carry intent in tool requests
/// (`now`, `on`, `off`, `up`, `down`, `new`, `all`) are deliberately kept. Contractions are
/// listed with and without the apostrophe (apostrophes are normalised to ' first).
const STOP_WORDS: &str = "\
    a about above after again against am an and any are as at be because been before being \
    below between both but by can could did do does doing during each else few for from \
    further had has have having he her here hers herself him himself his how i if in into \
    is it its itself just me might more most must my myself nor not of once only or other \
    our ours ourselves own same shall she should so some such than that the their theirs \
    them themselves then there these they this those through to too until very was we were \
    what when where which while who whom whose why will with would you your yours yourself \
    yourselves us also may via etc \
    i'm i'd i'll i've it's what's that's there's let's don't doesn't didn't can't won't isn't \
    aren't you're we're they're \
    im whats thats theres dont doesnt didnt cant isnt arent \
    please kindly tell want wanna need like let know hey hi hello thanks thank
";

/// Is `word` (already lowercase) a stop word?
pub(crate) fn is_stop_word(word: &str) -> bool {
    // Asked twice for every word of every row and ask: a scan of the list was the largest
    // part of analysing an ask of a sentence or two.
    static SET: OnceLock<HashSet<&'static str>> = OnceLock::new();
    SET.get_or_init(|| STOP_WORDS.split_ascii_whitespace().collect())
        .contains(word)
}

/// Han, Hiragana, Katakana and Hangul: scripts written without spaces between words (or, for
/// Hangul, with long agglutinated words), indexed as overlapping character bigrams.
pub(crate) fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // Hiragana, Katakana
        | 0x31F0..=0x31FF    // Katakana phonetic extensions
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xF900..=0xFAFF    // CJK compatibility ideographs
        | 0xFF66..=0xFF9F    // half-width Katakana
        | 0x1100..=0x11FF    // Hangul Jamo
        | 0x3130..=0x318F    // Hangul compatibility Jamo
        | 0xA960..=0xA97F    // Hangul Jamo extended A
        | 0xAC00..=0xD7FF    // Hangul syllables, Jamo extended B
        | 0x20000..=0x3134F  // CJK extensions B..G
    )
}

/// Turns text into index terms. Cheap to build; holds only the stemmer's function pointer.
pub(crate) struct Analyzer {
    stemmer: Stemmer,
}

impl Default for Analyzer {
    fn default() -> Self {
        Self {
            stemmer: Stemmer::create(Algorithm::English),
        }
    }
}

impl Analyzer {
    /// Calls `emit(term, surface)` for every term of `text`, in order. `surface` is the
    /// lowercase word the term came from (the bigram itself for CJK).
    pub(crate) fn analyze<F: FnMut(&str, &str)>(&self, text: &str, mut emit: F) {
        // A CJK run continues across word boundaries as long as the words touch: UAX #29
        // makes every ideograph its own "word", but "获取网页" is one run of four.
        let mut run: Vec<char> = Vec::new();
        let mut run_end = usize::MAX;
        for (start, word) in text.unicode_word_indices() {
            if start != run_end {
                flush_cjk(&mut run, &mut emit);
            }
            let mut piece: Option<usize> = None;
            for (i, c) in word.char_indices() {
                if is_cjk(c) {
                    if let Some(p) = piece.take() {
                        self.word(&word[p..i], &mut emit);
                    }
                    run.push(c);
                } else if piece.is_none() {
                    flush_cjk(&mut run, &mut emit);
                    piece = Some(i);
                }
            }
            if let Some(p) = piece {
                self.word(&word[p..], &mut emit);
            }
            run_end = start + word.len();
        }
        flush_cjk(&mut run, &mut emit);
    }

    /// Convenience for callers that want the terms alone.
    pub(crate) fn terms(&self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        self.analyze(text, |t, _| out.push(t.to_string()));
        out
    }

    /// The lowercase words of `text` with stop words kept and nothing stemmed: the form used
    /// to compare a pin made only of stop words ("who am i") with a query.
    pub(crate) fn raw_words(&self, text: &str) -> String {
        let mut out = String::new();
        for w in text.unicode_words() {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(&w.to_lowercase());
        }
        out
    }

    /// One non-CJK Unicode word: split on `_`, `.` and other joiners, then on case changes.
    fn word<F: FnMut(&str, &str)>(&self, word: &str, emit: &mut F) {
        for part in word.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '’')) {
            if part.chars().any(char::is_uppercase) {
                for sub in camel_parts(part) {
                    self.part(sub, emit);
                }
            } else {
                // No case change to split at (and no copy of the characters to find one).
                self.part(part, emit);
            }
        }
    }

    fn part<F: FnMut(&str, &str)>(&self, part: &str, emit: &mut F) {
        // Most words are lowercase ASCII already: those are not copied.
        let lower: Cow<'_, str> = if part
            .bytes()
            .any(|b| b.is_ascii_uppercase() || !b.is_ascii())
        {
            Cow::Owned(part.to_lowercase().replace('’', "'"))
        } else {
            Cow::Borrowed(part)
        };
        if lower.is_empty() || is_stop_word(&lower) {
            return;
        }
        // Possessives and stray quotes: "children's" -> "children", "o'clock" -> "oclock".
        let base = lower.strip_suffix("'s").unwrap_or(&lower);
        let cleaned: Cow<'_, str> = if base.contains('\'') {
            Cow::Owned(base.chars().filter(|&c| c != '\'').collect())
        } else {
            Cow::Borrowed(base)
        };
        if cleaned.is_empty() || is_stop_word(&cleaned) {
            return;
        }
        if cleaned.chars().any(|c| c.is_numeric()) {
            // Numbers and codes ("2017", "mp3", "sha256") are kept verbatim: stemming them
            // gains nothing and could merge distinct codes.
            emit(&cleaned, &cleaned);
        } else {
            let stem = self.stemmer.stem(&cleaned);
            emit(&stem, &cleaned);
        }
    }
}

/// Emits the bigrams of a CJK run (the single character for a run of one) and clears it.
fn flush_cjk<F: FnMut(&str, &str)>(run: &mut Vec<char>, emit: &mut F) {
    let mut buf = String::new();
    if run.len() == 1 {
        buf.push(run[0]);
        emit(&buf, &buf);
    } else {
        for pair in run.windows(2) {
            buf.clear();
            buf.push(pair[0]);
            buf.push(pair[1]);
            emit(&buf, &buf);
        }
    }
    run.clear();
}

/// Splits at case changes: "getComputerArchitecture" -> get, Computer, Architecture;
/// "HTTPServer" -> HTTP, Server; "iOS" -> i, OS. All-caps and all-lowercase words are whole.
fn camel_parts(s: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = s.char_indices().collect();
    let mut out = Vec::new();
    let mut start = 0;
    for k in 1..chars.len() {
        let (i, c) = chars[k];
        let prev = chars[k - 1].1;
        let next_lower = chars.get(k + 1).is_some_and(|&(_, n)| n.is_lowercase());
        let boundary = c.is_uppercase()
            && (prev.is_lowercase() || prev.is_numeric() || (prev.is_uppercase() && next_lower));
        if boundary {
            out.push(&s[start..i]);
            start = i;
        }
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_on_underscores_and_stem() {
        let a = Analyzer::default();
        assert_eq!(
            a.terms("GET_FORENSIC_ANALYSIS"),
            ["get", "forens", "analysi"]
        );
        assert_eq!(a.terms("TIME_NOW"), ["time", "now"]);
    }

    #[test]
    fn camel_case_is_split() {
        let a = Analyzer::default();
        assert_eq!(
            a.terms("getComputerArchitecture"),
            ["get", "comput", "architectur"]
        );
        assert_eq!(a.terms("HTTPServer"), ["http", "server"]);
    }

    #[test]
    fn stop_words_dropped_numbers_kept() {
        let a = Analyzer::default();
        assert_eq!(a.terms("What time is it in 2017?"), ["time", "2017"]);
        assert_eq!(
            a.terms("Please tell me the children's mp3 files"),
            ["children", "mp3", "file"]
        );
        assert!(a.terms("is it the").is_empty());
    }

    #[test]
    fn cjk_runs_become_bigrams() {
        let a = Analyzer::default();
        assert_eq!(a.terms("获取网页"), ["获取", "取网", "网页"]);
        // Punctuation ends a run; a lone character is kept as itself; Latin words are separate.
        assert_eq!(
            a.terms("搜索，书 and Bing网页"),
            ["搜索", "书", "bing", "网页"]
        );
        assert_eq!(a.terms("カタカナ"), ["カタ", "タカ", "カナ"]);
    }
}
