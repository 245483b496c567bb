//! The k best rows of a query without reading every posting of its words: term-at-a-time
//! scoring with early termination (the "quit/continue" family of MaxScore, Turtle & Flood,
//! 1995), over the slot-sorted postings.
//!
//! Each query position has an upper bound, the most any row can score from it (the best of
//! its alternatives' [`Ceiling`]s). Positions are read strongest bound first into dense
//! accumulators, as the exhaustive scorer reads them. Before each further position, the
//! k-th best partial score is a floor under the k-th final score; once the summed bounds of
//! the positions left are below it, no row unread so far can enter, and neither can a row
//! whose partial score plus those bounds is below it. The few rows left are then scored
//! exactly by looking them up in every position's postings (binary search), and the weak
//! positions' postings — the common words' long lists — are never read.
//!
//! Exactness: the rows returned are scored position by position in query order, from the
//! same [`tfn`] and [`saturate`] the exhaustive scorer uses, so their scores are the same
//! f32 bits. Partial sums (added in another order) are compared only with [`SLACK`] to
//! spare, and strictly, so a row that could tie the k-th is kept and ordered by key as
//! the final ranking orders ties.

use super::{saturate, tfn, Index, Postings, Scored, Scratch, FIELDS};

/// Relative margin on every comparison of partial sums and bounds, far above what a sum of
/// at most 64 f32 terms can differ by when added in another order.
const SLACK: f32 = 1e-4;

/// Rescoring a row looks it up in every list, a binary search each; reading on costs one
/// step per posting. Stop reading when rescoring the rows left costs less than this share of
/// the postings still unread.
const LOOKUP_COST: usize = 8;

/// One alternative of a position: a term's postings and its weighted IDF.
struct List<'a> {
    postings: &'a Postings,
    idf: f32,
}

/// A query position: its alternatives and the most a row can score from it.
struct Position<'a> {
    lists: Vec<List<'a>>,
    bound: f32,
    /// Postings of all its alternatives.
    postings: usize,
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

    /// [`Index::top`], and how many postings it read in full (lookups aside).
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
        let query: Vec<Position<'_>> = positions
            .iter()
            .take(64)
            .map(|alts| {
                let mut bound = 0.0f32;
                let lists: Vec<List<'_>> = alts
                    .iter()
                    .filter_map(|&(id, weight)| {
                        let term = self.term(id)?;
                        let idf = self.idf(term, weight);
                        bound = bound.max(saturate(idf, term.bound.tfn(&inv_avg)));
                        Some(List {
                            postings: &term.postings,
                            idf,
                        })
                    })
                    .collect();
                let postings = lists.iter().map(|l| l.postings.len()).sum();
                Position {
                    lists,
                    bound,
                    postings,
                }
            })
            .collect();
        let mut keep = keep.to_vec();
        keep.sort_unstable();
        keep.dedup();
        let mut out: Vec<Scored> = keep
            .iter()
            .filter_map(|&slot| self.exact(&query, slot, &inv_avg))
            .collect();
        if k == 0 {
            return (out, 0);
        }
        let rank = |slot: u32, score: f32| {
            if self.demoted(slot) {
                score * demote_factor
            } else {
                score
            }
        };

        // Strongest bound first; left[i] bounds what the positions from order[i] on add.
        let mut order: Vec<usize> = (0..query.len()).collect();
        order.sort_by(|&a, &b| query[b].bound.total_cmp(&query[a].bound));
        let mut left = vec![0.0f32; order.len() + 1];
        let mut unread = vec![0usize; order.len() + 1];
        for (i, &p) in order.iter().enumerate().rev() {
            left[i] = left[i + 1] + query[p].bound;
            unread[i] = unread[i + 1] + query[p].postings;
        }
        let lists: usize = query.iter().map(|p| p.lists.len()).sum();

        let slots = self.docs.len();
        // Per row its partial score and, for a position with several alternatives, its best
        // alternative's; kept zero between asks (see `Scratch`).
        let mut scratch = self.scratch(false);
        let Scratch {
            acc,
            best,
            touched,
            best_touched,
            ..
        } = &mut scratch;
        let mut most = 0.0f32;
        let mut read = 0usize;
        let mut floors: Vec<f32> = Vec::new();
        let mut candidates: Vec<u32> = Vec::new();
        for i in 0..=order.len() {
            // Worth a look only if the rows read so far could already shut out the rest,
            // and if looking (a pass over them) costs less than reading on.
            let last = i == order.len();
            let worth = touched.len() < unread[i] && left[i] * (1.0 + SLACK) < most;
            if touched.len() >= k && (last || worth) {
                floors.clear();
                floors.extend(touched.iter().map(|&d| rank(d, acc[d as usize])));
                let (_, kth, _) = floors.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
                let floor = *kth * (1.0 - SLACK);
                if last || left[i] * (1.0 + SLACK) < floor {
                    candidates.clear();
                    candidates.extend(
                        touched.iter().copied().filter(|&d| {
                            rank(d, acc[d as usize] + left[i]) * (1.0 + SLACK) >= floor
                        }),
                    );
                    if last || candidates.len() * lists * LOOKUP_COST < unread[i] {
                        break;
                    }
                }
            }
            if last {
                // Fewer than k rows match at all: every one of them is in the top k.
                candidates = std::mem::take(touched);
                break;
            }
            let position = &query[order[i]];
            let multi = position.lists.len() > 1;
            if multi && best.len() < slots {
                best.resize(slots, 0.0);
            }
            for l in &position.lists {
                read += l.postings.len();
                for (doc, tf) in l.postings.iter() {
                    let Some(len) = self.lens.get(doc as usize) else {
                        continue;
                    };
                    let s = saturate(l.idf, tfn(tf, len, &inv_avg));
                    let d = doc as usize;
                    if multi {
                        if best[d] == 0.0 {
                            best_touched.push(doc);
                        }
                        best[d] = best[d].max(s);
                    } else {
                        if acc[d] == 0.0 {
                            touched.push(doc);
                        }
                        acc[d] += s;
                        most = most.max(acc[d]);
                    }
                }
            }
            for &slot in best_touched.iter() {
                let d = slot as usize;
                if acc[d] == 0.0 {
                    touched.push(slot);
                }
                acc[d] += best[d];
                most = most.max(acc[d]);
                best[d] = 0.0;
            }
            best_touched.clear();
        }

        // Leave the scratch as it was found: every slot given a partial score is in
        // `touched`, or in `candidates` when they were all taken from it.
        for &slot in touched.iter().chain(&candidates) {
            acc[slot as usize] = 0.0;
        }
        self.give_back(scratch);

        let mut exact: Vec<(f32, &str, Scored)> = candidates
            .iter()
            .filter_map(|&slot| {
                let scored = self.exact(&query, slot, &inv_avg)?;
                let key = self.key(slot).map_or("", |k| &**k);
                Some((rank(slot, scored.score), key, scored))
            })
            .collect();
        let order = |a: &(f32, &str, Scored), b: &(f32, &str, Scored)| {
            b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1))
        };
        if exact.len() > k {
            exact.select_nth_unstable_by(k - 1, order);
            exact.truncate(k);
        }
        for (_, _, scored) in exact {
            if !out.iter().any(|s| s.slot == scored.slot) {
                out.push(scored);
            }
        }
        (out, read)
    }

    /// `slot`'s score and mask, looked up in every position; `None` if none matches.
    fn exact(&self, query: &[Position<'_>], slot: u32, inv_avg: &[f32; FIELDS]) -> Option<Scored> {
        let len = self.lens.get(slot as usize)?;
        let mut score = 0.0f32;
        let mut mask = 0u64;
        for (p, position) in query.iter().enumerate() {
            let mut found: Option<f32> = None;
            for l in &position.lists {
                if let Some(i) = l.postings.find(slot) {
                    let s = saturate(l.idf, tfn(&l.postings.counts[i], len, inv_avg));
                    found = Some(found.map_or(s, |b: f32| b.max(s)));
                }
            }
            // Added in query order, one addition per matched position, as the exhaustive
            // scorer adds them.
            if let Some(s) = found {
                score += s;
                mask |= 1u64 << p;
            }
        }
        (mask != 0).then_some(Scored { slot, score, mask })
    }
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
    fn a_rare_word_beside_commoner_ones_reads_only_its_own_postings_and_finds_the_same_best() {
        let mut index = Index::default();
        for i in 0..2_000 {
            let words = if [3, 5, 9, 1_000, 1_500].contains(&i) {
                "common rare"
            } else if i % 40 == 1 {
                "common middle"
            } else {
                "common"
            };
            index
                .insert(&format!("ROW_{i:04}"), &what(words), false, Vec::new())
                .unwrap();
        }
        let common = index.lookup("common").unwrap();
        let middle = index.lookup("middle").unwrap();
        let rare = index.lookup("rare").unwrap();
        let query = [vec![(common, 1.0)], vec![(middle, 1.0)], vec![(rare, 1.0)]];
        let (top, read) = index.top_counted(&query, 3, 0.5, &[]);
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
        // Once the rare word's rows are read, three of them hold the top k and no row with
        // the other words alone can reach the k-th: the middle and the common word's
        // postings (50 and 2,000, more than looking up the rare word's 5 rows in every list
        // costs) are never read, only looked up for the rare word's rows.
        assert_eq!(read, 5, "postings read");
    }
}
