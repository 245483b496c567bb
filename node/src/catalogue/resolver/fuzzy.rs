//! Typo tolerance: a symmetric-delete map from "term with up to two characters deleted" to
//! the vocabulary terms that produce it, and a bounded edit-distance check.
//!
//! Two words within edit distance d share a deletion variant with at most d deletions on each
//! side, so a query term looks up its own few variants instead of scanning the vocabulary.
//! Vocabulary terms store one-deletion variants, and two-deletion variants only from eight
//! characters up: two substitutions need two deletions on both sides, and only query terms
//! of eight or more characters may have two edits.

use std::collections::HashMap;

use super::tokenize::is_cjk;

/// Shortest vocabulary term worth storing (a 4-letter query term may lose one letter).
const MIN_VOCAB_LEN: usize = 3;
/// Vocabulary terms this long also store two-deletion variants.
const TWO_DELETES_FROM: usize = 8;

/// Marks a map value as an index into `DeleteMap::spill` rather than a term id.
const SPILL: u32 = 1 << 31;

/// Deletion-variant hash -> term id. Hashes are 32-bit to keep a bucket at eight bytes: a
/// collision only adds a candidate that the edit-distance check then rejects. The few
/// variants shared by several terms keep their ids in `spill`.
#[derive(Debug, Default)]
pub(crate) struct DeleteMap {
    map: HashMap<u32, u32>,
    spill: Vec<Vec<u32>>,
    free_spill: Vec<u32>,
}

/// Longest term that takes part: variants grow with the square of the length, and a long
/// token (an id, a hash, a pasted blob) is not a misspelt word.
const MAX_LEN: usize = 24;

/// Can this term take part in typo matching? Only alphabetic terms of sane length: numbers
/// and codes that differ by one character ("2016" / "2017") are different things, and CJK
/// bigrams are too short.
pub(crate) fn fuzzable(term: &str) -> bool {
    term.len() <= 4 * MAX_LEN
        && term.chars().count() <= MAX_LEN
        && term.chars().all(|c| c.is_alphabetic() && !is_cjk(c))
}

/// FNV-1a over the characters of `chars` minus the positions in `skip`.
fn variant_hash(chars: &[char], skip: [usize; 2]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for (i, &c) in chars.iter().enumerate() {
        if i == skip[0] || i == skip[1] {
            continue;
        }
        for b in (c as u32).to_le_bytes() {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
    }
    h
}

/// Hashes of `chars` itself and of its variants with up to `max_deletes` deletions, deduplicated.
fn variants(chars: &[char], max_deletes: usize) -> Vec<u32> {
    const NONE: usize = usize::MAX;
    let n = chars.len();
    let mut out = vec![variant_hash(chars, [NONE, NONE])];
    if max_deletes >= 1 {
        for i in 0..n {
            out.push(variant_hash(chars, [i, NONE]));
        }
    }
    if max_deletes >= 2 {
        for i in 0..n {
            for j in i + 1..n {
                out.push(variant_hash(chars, [i, j]));
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

fn stored_variants(term: &str) -> Option<Vec<u32>> {
    let chars: Vec<char> = term.chars().collect();
    if chars.len() < MIN_VOCAB_LEN || !fuzzable(term) {
        return None;
    }
    let d = if chars.len() >= TWO_DELETES_FROM {
        2
    } else {
        1
    };
    Some(variants(&chars, d))
}

impl DeleteMap {
    pub(crate) fn insert(&mut self, term: &str, id: u32) {
        debug_assert!(id < SPILL);
        for h in stored_variants(term).unwrap_or_default() {
            let Some(&v) = self.map.get(&h) else {
                self.map.insert(h, id);
                continue;
            };
            if v & SPILL != 0 {
                self.spill[(v & !SPILL) as usize].push(id);
            } else {
                let slot = match self.free_spill.pop() {
                    Some(s) => {
                        self.spill[s as usize] = vec![v, id];
                        s
                    }
                    None => {
                        self.spill.push(vec![v, id]);
                        (self.spill.len() - 1) as u32
                    }
                };
                self.map.insert(h, slot | SPILL);
            }
        }
    }

    pub(crate) fn remove(&mut self, term: &str, id: u32) {
        for h in stored_variants(term).unwrap_or_default() {
            let Some(&v) = self.map.get(&h) else { continue };
            if v & SPILL == 0 {
                if v == id {
                    self.map.remove(&h);
                }
                continue;
            }
            let slot = v & !SPILL;
            let ids = &mut self.spill[slot as usize];
            ids.retain(|&x| x != id);
            if ids.len() == 1 {
                let last = ids[0];
                self.spill[slot as usize] = Vec::new();
                self.free_spill.push(slot);
                self.map.insert(h, last);
            }
        }
    }

    /// Term ids that may lie within `max_dist` edits of `query`; the caller verifies.
    pub(crate) fn candidates(&self, query: &str, max_dist: usize) -> Vec<u32> {
        let chars: Vec<char> = query.chars().collect();
        let mut out = Vec::new();
        for h in variants(&chars, max_dist) {
            match self.map.get(&h) {
                Some(&v) if v & SPILL != 0 => {
                    out.extend_from_slice(&self.spill[(v & !SPILL) as usize])
                }
                Some(&v) => out.push(v),
                None => {}
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        let buckets = self.map.capacity() * (std::mem::size_of::<(u32, u32)>() + 1);
        let spill = self.spill.capacity() * std::mem::size_of::<Vec<u32>>()
            + self.spill.iter().map(|v| v.capacity() * 4).sum::<usize>()
            + self.free_spill.capacity() * 4;
        buckets + spill
    }
}

/// Optimal-string-alignment distance (Levenshtein plus adjacent transposition), or `None`
/// once it must exceed `max`.
pub(crate) fn edit_distance(a: &str, b: &str, max: usize) -> Option<usize> {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.len().abs_diff(b.len()) > max {
        return None;
    }
    let w = b.len() + 1;
    // Three rows: two back for transpositions.
    let mut prev2 = vec![0usize; w];
    let mut prev: Vec<usize> = (0..w).collect();
    let mut cur = vec![0usize; w];
    for i in 1..=a.len() {
        cur[0] = i;
        let mut row_min = cur[0];
        for j in 1..w {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(prev2[j - 2] + 1);
            }
            cur[j] = v;
            row_min = row_min.min(v);
        }
        if row_min > max {
            return None;
        }
        std::mem::swap(&mut prev2, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    let d = prev[w - 1];
    (d <= max).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_counts_transpositions_once() {
        assert_eq!(edit_distance("weather", "wether", 2), Some(1));
        assert_eq!(edit_distance("weather", "waether", 2), Some(1));
        assert_eq!(edit_distance("weather", "whether", 1), None);
        assert_eq!(edit_distance("weather", "whether", 2), Some(2));
        assert_eq!(edit_distance("kitten", "sitting", 2), None);
    }

    #[test]
    fn delete_map_finds_one_and_two_edit_neighbours() {
        let mut m = DeleteMap::default();
        m.insert("weather", 1);
        m.insert("calendar", 2);
        m.insert("2017", 3);
        assert_eq!(m.candidates("wether", 1), vec![1]);
        assert_eq!(m.candidates("weahter", 1), vec![1]);
        // two substitutions in a long word
        assert!(m.candidates("kalendor", 2).contains(&2));
        // numbers never take part
        assert!(m.candidates("2016", 1).is_empty());
        m.remove("weather", 1);
        assert!(m.candidates("wether", 1).is_empty());
    }
}
