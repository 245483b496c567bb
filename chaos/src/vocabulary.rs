//! Synthetic catalogues whose words are distributed as real catalogues' are.
//!
//! The benches' first catalogue draws every word uniformly from 50, so each word is in
//! about 45% of the rows and a three-word ask matches about 83% of them: at a million rows
//! every ask scores most of the catalogue whatever the index does. Real catalogues are not
//! like that. In the two public catalogues of the project's development data, word
//! frequencies fall off by rank as Zipf's law says (exponent 1.12 and 1.23 fitted over ranks
//! 10 to 3,000), the vocabulary grows with the text as Heaps' law says (`V = K·N^β`, β 0.54
//! and 0.72), and only 17 words of 7,987 are in more than a tenth of the rows. This module
//! draws rows that way: a vocabulary of `K·N^β` made-up words for `N` words of text, each
//! word drawn with probability proportional to `1/rank^s`, and asks made of words of one
//! row, as a request names what one capability does.

use serde_json::{json, Value};

use crate::rng::Rng;

/// Zipf's exponent: the lower of the two public catalogues' (the flatter, harder case).
const ZIPF_S: f64 = 1.1;
/// Heaps' law, `V = K·N^β`: between the two public catalogues' fits.
const HEAPS_K: f64 = 8.0;
const HEAPS_BETA: f64 = 0.6;
/// Words of a row's summary line and of its description, as the uniform catalogue has.
const SUMMARY_WORDS: usize = 6;
const DESCRIPTION_WORDS: usize = 24;
/// Words of an ask.
const ASK_WORDS: usize = 3;

/// Consonants and vowels of the made-up words: no `e`, `s` or `y`, which English
/// stemming strips or changes at the end of a word, so every word stays its own term.
const CONSONANTS: &[u8] = b"bdfgklmnprtvz";
const VOWELS: &[u8] = b"aiou";
/// Syllables of the shortest word: none of the made-up words is a stop word.
const MIN_SYLLABLES: usize = 3;

/// A vocabulary with Zipf-distributed ranks.
#[derive(Debug, Clone)]
pub struct Vocabulary {
    /// `cumulative[r]`: the probability of a word of rank `r` or less.
    cumulative: Vec<f64>,
}

impl Vocabulary {
    /// The vocabulary a text of `tokens` words has by Heaps' law (at least 1,000 words).
    pub fn for_tokens(tokens: usize) -> Self {
        let size = (HEAPS_K * (tokens as f64).powf(HEAPS_BETA)).round() as usize;
        Self::with_size(size.max(1_000))
    }

    /// A vocabulary of `size` words.
    pub fn with_size(size: usize) -> Self {
        let mut total = 0.0;
        let mut cumulative: Vec<f64> = (1..=size.max(1))
            .map(|rank| {
                total += (rank as f64).powf(-ZIPF_S);
                total
            })
            .collect();
        for c in &mut cumulative {
            *c /= total;
        }
        Self { cumulative }
    }

    /// Words in the vocabulary.
    pub fn len(&self) -> usize {
        self.cumulative.len()
    }

    /// Whether it has no words (never: it has at least one).
    pub fn is_empty(&self) -> bool {
        self.cumulative.is_empty()
    }

    /// The rank (0 for the most frequent) of a word drawn at random.
    pub fn draw(&self, rng: &mut Rng) -> usize {
        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        self.cumulative
            .partition_point(|&c| c <= u)
            .min(self.len() - 1)
    }
}

/// The made-up word of `rank`: consonant-vowel syllables, a different word for each rank.
pub fn word(rank: usize) -> String {
    let base = CONSONANTS.len() * VOWELS.len();
    let mut out = String::new();
    let mut n = rank;
    let mut syllables = 0;
    while n > 0 || syllables < MIN_SYLLABLES {
        let digit = n % base;
        out.push(CONSONANTS[digit / VOWELS.len()] as char);
        out.push(VOWELS[digit % VOWELS.len()] as char);
        n /= base;
        syllables += 1;
    }
    out
}

/// A catalogue of `rows` rows drawn from `vocabulary`, and `asks` asks, each three words of
/// the summary line of a row drawn at random.
pub fn catalogue(rows: usize, asks: usize, seed: u64) -> (Vec<Value>, Vec<String>) {
    let vocabulary = Vocabulary::for_tokens(rows * (SUMMARY_WORDS + DESCRIPTION_WORDS));
    let mut rng = Rng::new(seed);
    let mut summaries = Vec::with_capacity(rows);
    let catalogue = (0..rows)
        .map(|i| {
            let mut words = |n: usize| -> Vec<String> {
                (0..n).map(|_| word(vocabulary.draw(&mut rng))).collect()
            };
            let summary = words(SUMMARY_WORDS);
            let description = words(DESCRIPTION_WORDS).join(" ");
            let row = json!({
                "key": format!("BENCH_ROW_{i}"),
                "type": "static",
                "auth": "public",
                "category": crate::bench_reads::category(i),
                "content": format!("# WHAT: {}\n\n{description}\n", summary.join(" ")),
            });
            summaries.push(summary);
            row
        })
        .collect();
    let asks = (0..asks)
        .map(|_| {
            let summary = &summaries[rng.below(rows as u64) as usize];
            let mut picked: Vec<&str> = Vec::with_capacity(ASK_WORDS);
            for _ in 0..SUMMARY_WORDS * 4 {
                let w = summary[rng.below(summary.len() as u64) as usize].as_str();
                if !picked.contains(&w) {
                    picked.push(w);
                }
                if picked.len() == ASK_WORDS {
                    break;
                }
            }
            picked.join(" ")
        })
        .collect();
    (catalogue, asks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_has_its_own_word_and_none_is_short() {
        let words: std::collections::HashSet<String> = (0..20_000).map(word).collect();
        assert_eq!(words.len(), 20_000);
        assert!(words.iter().all(|w| w.len() >= 2 * MIN_SYLLABLES));
    }

    #[test]
    fn frequent_words_are_few_and_the_vocabulary_grows_with_the_text() {
        let small = Vocabulary::for_tokens(100_000);
        let large = Vocabulary::for_tokens(10_000_000);
        assert!(large.len() > 10 * small.len());
        let mut rng = Rng::new(1);
        let mut counts = vec![0usize; large.len()];
        for _ in 0..200_000 {
            counts[large.draw(&mut rng)] += 1;
        }
        // Zipf: rank 1 about 2^1.1 times as frequent as rank 2, and far above rank 1,000.
        let ratio = counts[0] as f64 / counts[1] as f64;
        assert!((1.8..2.6).contains(&ratio), "rank 1 / rank 2 = {ratio}");
        assert!(counts[0] > 100 * counts[999].max(1));
    }

    #[test]
    fn asks_are_words_of_one_row() {
        let (rows, asks) = catalogue(50, 20, 7);
        assert_eq!((rows.len(), asks.len()), (50, 20));
        for ask in &asks {
            let words: Vec<&str> = ask.split(' ').collect();
            assert!(!words.is_empty() && words.len() <= ASK_WORDS);
            assert!(rows.iter().any(|row| {
                let content = row["content"].as_str().unwrap_or_default();
                let summary = content.lines().next().unwrap_or_default();
                words.iter().all(|w| summary.split(' ').any(|s| s == *w))
            }));
        }
    }
}
