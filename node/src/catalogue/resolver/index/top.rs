//! The k best rows of a query without scoring every row that shares a word: MaxScore
//! pruning (Turtle & Flood, 1995) over the slot-sorted postings.
//!
//! Each query position has an upper bound, the most any row can score from it (the best of
//! its alternatives' [`Ceiling`]s). Positions are ordered by bound; once the k-th best score
//! so far (the threshold) exceeds the summed bounds of the weakest positions, a row matching
//! only those cannot enter, so only the other ("essential") positions' postings propose
//! candidates, and the weak ones are looked up in their postings for a candidate only while
//! it can still reach the threshold. With a rare word beside a common one, the common
//! word's postings are skipped through, not read.
//!
//! Exactness: a candidate's score is summed position by position in query order from the
//! same [`tfn`] and [`saturate`] the exhaustive scorer uses, so it is the same f32; pruning
//! compares bounds widened by [`SLACK`] against the threshold strictly, so a row that would
//! tie the k-th is scored and ordered by key as the final ranking orders ties.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::{saturate, tfn, Index, Posting, Scored, FIELDS};

/// Relative widening of every sum of bounds, far above the rounding a sum of at most 64
/// f32 terms can differ by when added in another order.
const SLACK: f32 = 1e-4;

/// One alternative of a position: a term's postings, its weighted IDF, a cursor.
struct List<'a> {
    postings: &'a [Posting],
    idf: f32,
    at: usize,
}

impl<'a> List<'a> {
    fn doc(&self) -> Option<u32> {
        self.postings.get(self.at).map(|p| p.doc)
    }

    /// Moves the cursor to the first posting at or after `slot` (galloping, then binary
    /// search within the last step), and returns it if it is `slot`'s.
    fn seek(&mut self, slot: u32) -> Option<&'a Posting> {
        let postings = self.postings;
        let rest = postings.get(self.at..).unwrap_or_default();
        let mut step = 1;
        while step < rest.len() && rest[step].doc < slot {
            step *= 2;
        }
        let window = rest.get(..(step + 1).min(rest.len())).unwrap_or_default();
        self.at += window.partition_point(|p| p.doc < slot);
        postings.get(self.at).filter(|p| p.doc == slot)
    }
}

/// A query position: its alternatives and the most a row can score from it.
struct Position<'a> {
    lists: Vec<List<'a>>,
    bound: f32,
}

/// A row in the running top k, ordered so the heap's greatest is the one to drop: the
/// lowest (demoted) score, and of equal scores the greater key.
struct Entry<'a> {
    rank: f32,
    key: &'a str,
    scored: Scored,
}

impl Ord for Entry<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .rank
            .total_cmp(&self.rank)
            .then_with(|| self.key.cmp(other.key))
    }
}

impl PartialOrd for Entry<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Entry<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Entry<'_> {}

fn below(bound: f32, threshold: f32) -> bool {
    bound * (1.0 + SLACK) < threshold
}

impl Index {
    /// The `k` best rows for `positions` (as [`Index::score`] takes them), ranked by score
    /// times `demote_factor` for demoted rows, ties by key; and every row of `keep` that a
    /// position matches, wherever it ranks. Scores and masks are exactly those
    /// [`Index::score`] gives the same rows (before demotion), in no particular order.
    pub(crate) fn top(
        &self,
        positions: &[Vec<(u32, f32)>],
        k: usize,
        demote_factor: f32,
        keep: &[u32],
    ) -> Vec<Scored> {
        self.top_counted(positions, k, demote_factor, keep).0
    }

    /// [`Index::top`], and how many rows it proposed as candidates.
    fn top_counted(
        &self,
        positions: &[Vec<(u32, f32)>],
        k: usize,
        demote_factor: f32,
        keep: &[u32],
    ) -> (Vec<Scored>, usize) {
        if self.len() == 0 {
            return (Vec::new(), 0);
        }
        let inv_avg = self.inv_avg();
        let mut query: Vec<Position<'_>> = positions
            .iter()
            .take(64)
            .map(|alts| {
                let mut bound = 0.0f32;
                let lists = alts
                    .iter()
                    .filter_map(|&(id, weight)| {
                        let term = self.term(id)?;
                        let idf = self.idf(term, weight);
                        bound = bound.max(saturate(idf, term.bound.tfn(&inv_avg)));
                        Some(List {
                            postings: &term.postings,
                            idf,
                            at: 0,
                        })
                    })
                    .collect();
                Position { lists, bound }
            })
            .collect();
        let mut keep = keep.to_vec();
        keep.sort_unstable();
        keep.dedup();
        let mut out: Vec<Scored> = keep
            .iter()
            .filter_map(|&slot| self.exact(&mut query, slot, &inv_avg))
            .collect();
        for p in &mut query {
            for l in &mut p.lists {
                l.at = 0;
            }
        }
        if k == 0 {
            return (out, 0);
        }

        // Positions from the weakest bound up; weak[i] sums the bounds of the i weakest.
        let mut order: Vec<usize> = (0..query.len()).collect();
        order.sort_by(|&a, &b| query[a].bound.total_cmp(&query[b].bound));
        let mut weak = vec![0.0f32; order.len() + 1];
        for (i, &p) in order.iter().enumerate() {
            weak[i + 1] = weak[i] + query[p].bound;
        }
        // order[..skippable] cannot make a row enter on their own.
        let mut skippable = 0;
        let mut threshold = f32::NEG_INFINITY;
        let mut heap: BinaryHeap<Entry<'_>> = BinaryHeap::with_capacity(k + 1);
        let mut found = vec![0.0f32; query.len()];
        let mut candidates = 0;

        // Candidates in slot order: the least slot any essential position's cursor is at.
        while let Some(slot) = order[skippable..]
            .iter()
            .flat_map(|&p| query[p].lists.iter().filter_map(List::doc))
            .min()
        {
            candidates += 1;
            let Some(len) = self.lens.get(slot as usize) else {
                for &p in &order[skippable..] {
                    for l in &mut query[p].lists {
                        l.seek(slot + 1);
                    }
                }
                continue;
            };
            let mut partial = 0.0f32;
            for &p in &order[skippable..] {
                let mut best = 0.0f32;
                for l in &mut query[p].lists {
                    if let Some(posting) = l.postings.get(l.at).filter(|x| x.doc == slot) {
                        best = best.max(saturate(l.idf, tfn(&posting.tf, len, &inv_avg)));
                        l.at += 1;
                    }
                }
                found[p] = best;
                partial += best;
            }
            // The weak positions, strongest first, while the row can still reach the k-th.
            let mut reachable = true;
            for i in (0..skippable).rev() {
                if below(partial + weak[i + 1], threshold) {
                    reachable = false;
                    break;
                }
                let p = order[i];
                let mut best = 0.0f32;
                for l in &mut query[p].lists {
                    if let Some(posting) = l.seek(slot) {
                        best = best.max(saturate(l.idf, tfn(&posting.tf, len, &inv_avg)));
                    }
                }
                found[p] = best;
                partial += best;
            }
            if reachable {
                let scored = summed(slot, &found);
                let rank = if self.demoted(slot) {
                    scored.score * demote_factor
                } else {
                    scored.score
                };
                let key = self.key(slot).map_or("", |k| &**k);
                let entry = Entry { rank, key, scored };
                if heap.len() < k {
                    heap.push(entry);
                } else if heap.peek().is_some_and(|worst| entry < *worst) {
                    heap.pop();
                    heap.push(entry);
                }
                if heap.len() == k {
                    threshold = heap.peek().map_or(threshold, |worst| worst.rank);
                    while skippable < order.len() && below(weak[skippable + 1], threshold) {
                        skippable += 1;
                    }
                }
            }
            found.fill(0.0);
        }
        for entry in heap {
            if !out.iter().any(|s| s.slot == entry.scored.slot) {
                out.push(entry.scored);
            }
        }
        (out, candidates)
    }

    /// `slot`'s score and mask, looked up in every position; `None` if none matches.
    fn exact(
        &self,
        query: &mut [Position<'_>],
        slot: u32,
        inv_avg: &[f32; FIELDS],
    ) -> Option<Scored> {
        let len = self.lens.get(slot as usize)?;
        let found: Vec<f32> = query
            .iter_mut()
            .map(|p| {
                let mut best = 0.0f32;
                for l in &mut p.lists {
                    l.at = 0;
                    if let Some(posting) = l.seek(slot) {
                        best = best.max(saturate(l.idf, tfn(&posting.tf, len, inv_avg)));
                    }
                }
                best
            })
            .collect();
        let scored = summed(slot, &found);
        (scored.mask != 0).then_some(scored)
    }
}

/// A row's score from what each position found, added in query order as the exhaustive
/// scorer adds them (a position that found nothing adds nothing).
fn summed(slot: u32, found: &[f32]) -> Scored {
    let mut score = 0.0f32;
    let mut mask = 0u64;
    for (p, &s) in found.iter().enumerate() {
        if s > 0.0 {
            score += s;
            mask |= 1u64 << p;
        }
    }
    Scored { slot, score, mask }
}

#[cfg(test)]
mod tests {
    use super::super::{Index, FIELDS, WHAT};

    fn what(words: &str) -> [Vec<String>; FIELDS] {
        let mut fields: [Vec<String>; FIELDS] = Default::default();
        fields[WHAT] = words.split(' ').map(str::to_owned).collect();
        fields
    }

    #[test]
    fn a_rare_word_beside_a_common_one_reads_few_rows_and_finds_the_same_best() {
        let mut index = Index::default();
        for i in 0..2_000 {
            let words = if [3, 5, 9, 1_000, 1_500].contains(&i) {
                "common rare"
            } else {
                "common"
            };
            index
                .insert(&format!("ROW_{i:04}"), &what(words), false, Vec::new())
                .unwrap();
        }
        let common = index.lookup("common").unwrap();
        let rare = index.lookup("rare").unwrap();
        let query = [vec![(common, 1.0)], vec![(rare, 1.0)]];
        let (top, candidates) = index.top_counted(&query, 3, 0.5, &[]);
        let mut all = index.score(&query);
        all.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.slot.cmp(&b.slot)));
        let mut top: Vec<(u32, u32)> = top.iter().map(|s| (s.slot, s.score.to_bits())).collect();
        top.sort_unstable();
        let mut best: Vec<(u32, u32)> = all[..3]
            .iter()
            .map(|s| (s.slot, s.score.to_bits()))
            .collect();
        best.sort_unstable();
        assert_eq!(top, best);
        // Once three rows with both words hold the top k, no row with the common word
        // alone can reach the k-th: the rest of its rows are skipped, not read, and only
        // the rare word's rows are.
        assert!(candidates < 20, "{candidates} of 2000 rows read");
    }
}
