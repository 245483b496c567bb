//! The k best rows of a query without scoring every posting of its words: document-at-a-time
//! MaxScore (Turtle & Flood, 1995) over the slot-sorted postings.
//!
//! Each query position has an upper bound, the most any row can score from it (the best of
//! its alternatives' [`Ceiling`]s). Positions are ordered weakest bound first. The rows held
//! so far set a floor: the k-th best rank once k rows are held, and at least the share of
//! the best rank under which the caller drops rows anyway (its cut-off). The weakest
//! positions whose bounds together stay below the floor are *non-essential* — a row that
//! only they match cannot enter — so rows are visited in slot order along the essential
//! positions' postings alone, and each visited row is looked up in the non-essential ones (a
//! galloping search forward, as rows come in slot order) strongest first, only while what it
//! has so far plus the bounds left could still reach the floor. As better rows come in, the
//! floor rises and more positions turn non-essential: for an ask of common words, their long
//! lists are stepped through along the rarest one's postings instead of being scored whole.
//!
//! Two things keep the visits cheap. A row is first judged on its postings' counts alone,
//! each at its term's shortest field ([`List::most`]): most rows of a common word fall short
//! there, and are left without reading their lengths (a read far from the last, dearer than
//! the rest of a posting). And when the strongest position's words are rare, their rows are
//! scored first (the seeds), so the floor starts where they put it rather than at zero.
//!
//! Exactness: a row that is scored whole gets its positions' scores from the same [`tfn`]
//! and [`saturate`] the exhaustive scorer uses, added in query order, one addition per
//! matched position from zero, as the exhaustive scorer adds them: the same f32 bits. Partial
//! sums and bounds (added in another order) are compared only with [`SLACK`] to spare, and
//! strictly, so a row that could tie the k-th is scored whole and ordered by key as the final
//! ranking orders ties.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::{saturate, tfn, Counts, Index, Postings, Scored, FIELDS};

/// What a top-k search took: postings scored exactly (a seed counts one), rows visited.
#[derive(Debug, Default)]
struct Work {
    scored: usize,
    visited: usize,
}

/// Most postings of the strongest position for its rows to be scored first (see `top`).
const SEEDS: usize = 128;

/// Relative margin on every comparison of partial sums and bounds, far above what a sum of
/// at most 64 f32 terms can differ by when added in another order.
const SLACK: f32 = 1e-4;

/// One alternative of a position: a term's postings and its weighted IDF.
struct List<'a> {
    postings: &'a Postings,
    idf: f32,
    /// Per field, the most one count there can add to [`tfn`]: at the term's shortest field.
    per_count: [f32; FIELDS],
}

impl List<'_> {
    /// A posting's score in a row of lengths `len`: what the exhaustive scorer computes.
    fn score(&self, counts: &Counts, len: &[u32; FIELDS], inv_avg: &[f32; FIELDS]) -> f32 {
        saturate(self.idf, tfn(counts, len, inv_avg))
    }

    /// The most a posting with `counts` can score, whatever its row's lengths: a bound
    /// read from the postings alone, before the row's lengths are.
    fn most(&self, counts: &Counts) -> f32 {
        let mut tfn = 0.0f32;
        for (count, per) in counts.iter().zip(&self.per_count) {
            tfn += f32::from(*count) * per;
        }
        saturate(self.idf, tfn)
    }
}

/// A query position: its alternatives and the most a row can score from it.
struct Position<'a> {
    lists: Vec<List<'a>>,
    bound: f32,
}

/// Where an alternative's postings are read: the position (in query order) it scores for,
/// and the index of its next posting.
struct Cursor<'a> {
    list: &'a List<'a>,
    position: usize,
    at: usize,
}

/// A row held among the k best, ordered worst first (the heap's top): lowest rank, then the
/// larger key, as the final ranking orders ties.
struct Held<'a> {
    rank: f32,
    key: &'a str,
    scored: Scored,
}

impl Held<'_> {
    /// Whether it ranks above `other`.
    fn beats(&self, other: &Held<'_>) -> bool {
        self.cmp(other) == Ordering::Less
    }
}

impl PartialEq for Held<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Held<'_> {}

impl PartialOrd for Held<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Held<'_> {
    /// Greater is worse: a lower rank, or the same rank and a larger key.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .rank
            .total_cmp(&self.rank)
            .then_with(|| self.key.cmp(other.key))
    }
}

/// The rows held so far and the floor they set.
struct Best<'a> {
    held: BinaryHeap<Held<'a>>,
    k: usize,
    /// Share of the best rank under which rows are not wanted.
    cut: f32,
    /// The best rank seen, of a row held or kept.
    top: f32,
    /// What a row must reach to be wanted, less the slack: the k-th best rank once k rows
    /// are held, and `cut` times the best rank seen.
    floor: f32,
}

impl<'a> Best<'a> {
    fn new(k: usize, cut: f32) -> Self {
        Self {
            held: BinaryHeap::with_capacity(k + 1),
            k,
            cut,
            top: 0.0,
            floor: 0.0,
        }
    }

    /// Notes a rank seen (a kept row's) for the cut.
    fn see(&mut self, rank: f32) {
        self.top = self.top.max(rank);
        let kth = match self.held.peek() {
            Some(worst) if self.held.len() == self.k => worst.rank,
            _ => 0.0,
        };
        self.floor = kth.max(self.cut * self.top) * (1.0 - SLACK);
    }

    /// Holds a row scored `scored`, ranked `rank`, if it is among the k best so far; its
    /// key is read only if the rank alone does not decide.
    fn offer(&mut self, rank: f32, scored: Scored, key: impl FnOnce() -> &'a str) {
        let full = self.held.len() == self.k;
        if full && self.held.peek().is_some_and(|worst| rank < worst.rank) {
            return;
        }
        let row = Held {
            rank,
            key: key(),
            scored,
        };
        if !full {
            self.held.push(row);
        } else if self.held.peek().is_some_and(|worst| row.beats(worst)) {
            self.held.pop();
            self.held.push(row);
        }
        self.see(rank);
    }
}

/// Fills `needed` with the bit sets of the positions of `query` without which no row
/// reaches `floor` (the other positions' bounds, of `all` in all, fall short), for those
/// whose words are all kept as bit sets.
fn needed_sets<'a>(query: &[Position<'a>], all: f32, floor: f32, needed: &mut Vec<Vec<&'a [u64]>>) {
    needed.clear();
    for position in query {
        if (all - position.bound) * (1.0 + SLACK) < floor {
            let sets: Option<Vec<&'a [u64]>> =
                position.lists.iter().map(|l| l.postings.bits()).collect();
            needed.extend(sets.filter(|sets| !sets.is_empty()));
        }
    }
}

/// The first slot from `doc` on in every one of `needed` (a position's alternatives' bit
/// sets: in any of them), `u32::MAX` if none: 64 rows a step.
fn next_candidate(needed: &[Vec<&[u64]>], doc: u32) -> u32 {
    let end = needed
        .iter()
        .map(|sets| sets.iter().map(|bits| bits.len()).max().unwrap_or(0))
        .min()
        .unwrap_or(0);
    let mut word = doc as usize / 64;
    let mut from_bit = !0u64 << (doc % 64);
    while word < end {
        let mut all = from_bit;
        for sets in needed {
            all &= sets
                .iter()
                .fold(0, |any, bits| any | bits.get(word).copied().unwrap_or(0));
            if all == 0 {
                break;
            }
        }
        if all != 0 {
            return u32::try_from(word * 64 + all.trailing_zeros() as usize).unwrap_or(u32::MAX);
        }
        word += 1;
        from_bit = !0;
    }
    u32::MAX
}

/// The first index from `from` on whose slot is at least `doc` (`docs.len()` if none),
/// galloping: steps of 1, 2, 4, … then a binary search, so a lookup near the cursor costs a
/// few comparisons and a far one a logarithm of the distance.
fn seek(docs: &[u32], from: usize, doc: u32) -> usize {
    if docs.get(from).is_none_or(|&d| d >= doc) {
        return from.min(docs.len());
    }
    // docs[lo] < doc throughout; hi is past the end or at a slot of at least `doc`.
    let mut lo = from;
    let mut step = 1;
    let mut hi = from + 1;
    while hi < docs.len() && docs[hi] < doc {
        lo = hi;
        step *= 2;
        hi = lo + step;
    }
    let hi = hi.min(docs.len());
    lo + 1 + docs[lo + 1..hi].partition_point(|&d| d < doc)
}

impl Index {
    /// The `k` best rows for `positions` (as [`Index::score`] takes them), ranked by score
    /// times `demote_factor` for demoted rows, ties by key, except that rows ranked below
    /// `cut` times the best (a share the caller drops anyway) may be missing or left in;
    /// and every row of `keep` that a position matches, wherever it ranks. Scores and masks
    /// are exactly those [`Index::score`] gives the same rows (before demotion), in no
    /// particular order.
    pub(crate) fn top(
        &self,
        positions: &[Vec<(u32, f32)>],
        k: usize,
        demote_factor: f32,
        cut: f32,
        keep: &[u32],
    ) -> Vec<Scored> {
        self.top_counted(positions, k, demote_factor, cut, keep).0
    }

    /// [`Index::top`], and the work it took.
    fn top_counted<'a>(
        &'a self,
        positions: &[Vec<(u32, f32)>],
        k: usize,
        demote_factor: f32,
        cut: f32,
        keep: &[u32],
    ) -> (Vec<Scored>, Work) {
        if self.len() == 0 {
            return (Vec::new(), Work::default());
        }
        let inv_avg = self.inv_avg();
        let query: Vec<Position<'a>> = positions
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
                            per_count: term.bound.per_count(&inv_avg),
                        })
                    })
                    .collect();
                Position { lists, bound }
            })
            .collect();
        let rank = |slot: u32, score: f32| {
            if self.demoted(slot) {
                score * demote_factor
            } else {
                score
            }
        };
        let mut best = Best::new(k, cut);
        let mut keep = keep.to_vec();
        keep.sort_unstable();
        keep.dedup();
        let mut out: Vec<Scored> = keep
            .iter()
            .filter_map(|&slot| self.exact(&query, slot, &inv_avg))
            .collect();
        for s in &out {
            best.see(rank(s.slot, s.score));
        }
        if k == 0 {
            return (out, Work::default());
        }
        // Weakest bound first; `below[i]` bounds what the positions before `order[i]` add,
        // and their alternatives' cursors are `cursors[first[i]..first[i + 1]]`.
        let mut order: Vec<usize> = (0..query.len()).collect();
        order.sort_by(|&a, &b| query[a].bound.total_cmp(&query[b].bound));
        let mut below = vec![0.0f32; order.len() + 1];
        let mut first = vec![0usize; order.len() + 1];
        let mut cursors: Vec<Cursor<'_>> = Vec::new();
        for (i, &p) in order.iter().enumerate() {
            below[i + 1] = below[i] + query[p].bound;
            first[i] = cursors.len();
            cursors.extend(query[p].lists.iter().map(|list| Cursor {
                list,
                position: p,
                at: 0,
            }));
        }
        first[order.len()] = cursors.len();
        // Positions `order[..essential]` are non-essential: together they cannot lift a row
        // to the floor.
        let mut essential = 0;
        // And `needed`: the bit sets of positions without which no row reaches the floor
        // (the others' bounds together fall short), when their words are all kept as bit
        // sets: a row without one of their words is skipped unread (see `next_candidate`).
        let mut needed: Vec<Vec<&[u64]>> = Vec::new();
        let settle = |essential: &mut usize, needed: &mut Vec<Vec<&'a [u64]>>, floor: f32| {
            while *essential < order.len() && below[*essential + 1] * (1.0 + SLACK) < floor {
                *essential += 1;
            }
            needed_sets(&query, below[order.len()], floor, needed);
        };

        // Seeds: the rows of the strongest position, when they are few (its words are rare),
        // scored whole first, so the floor starts where they put it rather than at zero and
        // the common words' postings before them in slot order are not scored.
        let seeds: Vec<u32> = match order.last() {
            Some(&p)
                if query[p]
                    .lists
                    .iter()
                    .map(|l| l.postings.len())
                    .sum::<usize>()
                    <= SEEDS =>
            {
                let mut seeds: Vec<u32> = query[p]
                    .lists
                    .iter()
                    .flat_map(|l| l.postings.docs.iter().copied())
                    .collect();
                seeds.sort_unstable();
                seeds.dedup();
                seeds
            }
            _ => Vec::new(),
        };
        for &slot in &seeds {
            if let Some(scored) = self.exact(&query, slot, &inv_avg) {
                best.offer(rank(slot, scored.score), scored, || {
                    self.key(slot).map_or("", |k| &**k)
                });
            }
        }
        settle(&mut essential, &mut needed, best.floor);
        let mut work = Work {
            scored: seeds.len(),
            visited: 0,
        };
        let mut seeds = seeds.iter().copied().peekable();

        // Each cursor's slot, `u32::MAX` once its postings are read: the next row is the least.
        let slot_at = |c: &Cursor<'_>| c.list.postings.docs.get(c.at).copied();
        let mut next: Vec<u32> = cursors
            .iter()
            .map(|c| slot_at(c).unwrap_or(u32::MAX))
            .collect();
        let mut found = [0.0f32; 64];
        loop {
            let from = first[essential];
            let mut doc = next[from..].iter().copied().min().unwrap_or(u32::MAX);
            // Leapfrog with the needed positions' bit sets: on to the next row that has all
            // of them, the essential cursors sought past the rows between.
            while !needed.is_empty() && doc != u32::MAX {
                let candidate = next_candidate(&needed, doc);
                if candidate == doc {
                    break;
                }
                for (c, n) in cursors[from..].iter_mut().zip(&mut next[from..]) {
                    if *n < candidate {
                        c.at = seek(&c.list.postings.docs, c.at, candidate);
                        *n = slot_at(c).unwrap_or(u32::MAX);
                    }
                }
                doc = next[from..].iter().copied().min().unwrap_or(u32::MAX);
            }
            if doc == u32::MAX {
                break;
            }
            work.visited += 1;
            while seeds.next_if(|&s| s < doc).is_some() {}
            let seeded = seeds.next_if_eq(&doc).is_some();

            // First from the postings' counts alone (see `List::most`): the row's lengths are
            // a read far from the last, dearer than the rest of a posting, and most rows of a
            // common word fall short of the floor without them. The non-essential positions
            // are looked up strongest first, while the bounds could still reach the floor,
            // and their cursors left on the row if it has their words.
            let mut viable = !seeded;
            if viable {
                let mut most = 0.0f32;
                for (c, &n) in cursors[from..].iter().zip(&next[from..]) {
                    if n == doc {
                        most += c.list.most(&c.list.postings.counts[c.at]);
                    }
                }
                for j in (0..essential).rev() {
                    if (most + below[j + 1]) * (1.0 + SLACK) < best.floor {
                        viable = false;
                        break;
                    }
                    let mut here = 0.0f32;
                    for c in &mut cursors[first[j]..first[j + 1]] {
                        if c.list.postings.has(doc) == Some(false) {
                            continue;
                        }
                        c.at = seek(&c.list.postings.docs, c.at, doc);
                        if slot_at(c) == Some(doc) {
                            here = here.max(c.list.most(&c.list.postings.counts[c.at]));
                        }
                    }
                    most += here;
                }
                viable = viable && most * (1.0 + SLACK) >= best.floor;
            }

            // Then exactly, for the rows still in the running. Postings only ever name live
            // rows (removal deletes them first); a slot without lengths (a bug elsewhere) is
            // stepped over.
            let len = self.lens.get(doc as usize).filter(|_| viable);
            let mut mask = 0u64;
            for (c, n) in cursors[from..].iter_mut().zip(&mut next[from..]) {
                if *n != doc {
                    continue;
                }
                if let Some(len) = len {
                    let counts = &c.list.postings.counts[c.at];
                    let s = c.list.score(counts, len, &inv_avg);
                    add(&mut found, &mut mask, c.position, s);
                    work.scored += 1;
                }
                c.at += 1;
                *n = slot_at(c).unwrap_or(u32::MAX);
            }
            let Some(len) = len else {
                continue;
            };
            for c in &cursors[..from] {
                if slot_at(c) == Some(doc) {
                    let counts = &c.list.postings.counts[c.at];
                    let s = c.list.score(counts, len, &inv_avg);
                    add(&mut found, &mut mask, c.position, s);
                    work.scored += 1;
                }
            }
            if mask == 0 {
                continue;
            }
            // Added in query order from zero, one addition per matched position, as the
            // exhaustive scorer adds them.
            let mut score = 0.0f32;
            for p in ones(mask) {
                score += found[p];
            }
            best.offer(
                rank(doc, score),
                Scored {
                    slot: doc,
                    score,
                    mask,
                },
                || self.key(doc).map_or("", |k| &**k),
            );
            settle(&mut essential, &mut needed, best.floor);
        }
        for h in best.held {
            if !out.iter().any(|s| s.slot == h.scored.slot) {
                out.push(h.scored);
            }
        }
        (out, work)
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
                    let s = l.score(&l.postings.counts[i], len, inv_avg);
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

/// Records `s` for `position` in a row's `found` scores: the best of its alternatives.
fn add(found: &mut [f32; 64], mask: &mut u64, position: usize, s: f32) {
    let bit = 1u64 << position;
    if *mask & bit == 0 {
        *mask |= bit;
        found[position] = s;
    } else {
        found[position] = found[position].max(s);
    }
}

/// The positions set in `mask`, in query order.
fn ones(mut mask: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let p = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            p
        })
    })
}

#[cfg(test)]
mod tests {
    use super::super::super::tests::Mix;
    use super::super::{Index, Scored, DOC, FIELDS, WHAT};
    use super::seek;

    fn what(words: &str) -> [Vec<String>; FIELDS] {
        let mut fields: [Vec<String>; FIELDS] = Default::default();
        fields[WHAT] = words.split(' ').map(str::to_owned).collect();
        fields
    }

    /// An index of `rows` rows, `ROW_0000` on, the words of each from `words`.
    fn index_of(rows: usize, words: impl Fn(usize) -> &'static str) -> Index {
        let mut index = Index::default();
        for i in 0..rows {
            index
                .insert(&format!("ROW_{i:04}"), &what(words(i)), false, Vec::new())
                .unwrap();
        }
        index
    }

    /// A query of one alternative per word.
    fn query(index: &Index, words: &[&str]) -> Vec<Vec<(u32, f32)>> {
        words
            .iter()
            .map(|w| vec![(index.lookup(w).unwrap(), 1.0)])
            .collect()
    }

    /// (slot, score bits, mask), sorted by slot.
    fn view(scored: &[Scored]) -> Vec<(u32, u32, u64)> {
        let mut v: Vec<_> = scored
            .iter()
            .map(|s| (s.slot, s.score.to_bits(), s.mask))
            .collect();
        v.sort_unstable();
        v
    }

    /// The `k` best of the exhaustive scorer: rank (demoted rows times `demote`), then key.
    fn exhaustive(index: &Index, query: &[Vec<(u32, f32)>], k: usize, demote: f32) -> Vec<Scored> {
        let rank = |s: &Scored| {
            if index.demoted(s.slot) {
                s.score * demote
            } else {
                s.score
            }
        };
        let mut all = index.score(query);
        all.sort_by(|a, b| {
            rank(b)
                .total_cmp(&rank(a))
                .then_with(|| index.key(a.slot).cmp(&index.key(b.slot)))
        });
        all.truncate(k);
        all
    }

    #[test]
    fn a_rare_word_beside_commoner_ones_scores_only_its_own_rows_and_finds_the_same_best() {
        let index = index_of(2_000, |i| {
            if [3, 5, 9, 1_000, 1_500].contains(&i) {
                "common rare"
            } else if i % 40 == 1 {
                "common middle"
            } else {
                "common"
            }
        });
        let query = query(&index, &["common", "middle", "rare"]);
        let (top, work) = index.top_counted(&query, 3, 0.5, 0.0, &[]);
        assert_eq!(view(&top), view(&exhaustive(&index, &query, 3, 0.5)));
        // The rare word's 5 rows are scored first; three of them hold the top k, and no row
        // with the other words alone can reach the k-th: the middle and the common word's
        // postings (50 and 2,000) are never scored, only looked up for the rare word's rows.
        assert_eq!(work.scored, 5, "postings scored");
    }

    #[test]
    fn rows_under_the_cut_are_not_looked_for() {
        // Two rows have the rare word; the other eight of a top 10 can only be rows with the
        // common word alone, all alike, so finding the right eight (by key) takes them all.
        let index = index_of(2_000, |i| {
            if i == 700 || i == 1_300 {
                "common rare"
            } else {
                "common"
            }
        });
        let query = query(&index, &["common", "rare"]);
        let (top, work) = index.top_counted(&query, 10, 0.5, 0.0, &[]);
        assert_eq!(view(&top), view(&exhaustive(&index, &query, 10, 0.5)));
        assert!(
            work.scored >= 2_000,
            "without a cut every row is a candidate: {work:?}"
        );

        // A row with the common word alone scores far under 0.38 of the best: with that cut
        // only the rare word's rows are wanted, and only they are scored.
        let (top, work) = index.top_counted(&query, 10, 0.5, 0.38, &[]);
        let best = exhaustive(&index, &query, 10, 0.5);
        let wanted: Vec<Scored> = best
            .into_iter()
            .filter(|s| [700, 1_300].contains(&s.slot))
            .collect();
        assert_eq!(wanted.len(), 2);
        assert_eq!(view(&top), view(&wanted));
        assert!(work.scored <= 4, "postings scored with the cut: {work:?}");
    }

    #[test]
    fn rows_of_common_words_that_cannot_reach_the_floor_are_left_on_their_counts() {
        // Two words of 1,000 rows each, 40 rows with both: the top 5 have both, and a row
        // with one of them falls short of it whatever its lengths.
        let index = index_of(1_960, |i| match i % 49 {
            0 => "alpha beta",
            n if n % 2 == 1 => "alpha",
            _ => "beta",
        });
        let query = query(&index, &["alpha", "beta"]);
        let postings: usize = query
            .iter()
            .map(|p| index.term(p[0].0).unwrap().postings.len())
            .sum();
        let (top, work) = index.top_counted(&query, 5, 0.5, 0.0, &[]);
        assert_eq!(view(&top), view(&exhaustive(&index, &query, 5, 0.5)));
        assert!(postings > 1_900, "{postings}");
        // Scored: the rows read until five with both words are held (about 200, their rows
        // 0 to 196), then only the rows with both; the other 1,750 are left on their counts.
        assert!(work.scored < 400, "postings scored: {work:?}");
    }

    #[test]
    fn rows_without_a_needed_common_word_are_skipped_unvisited() {
        // Rows of three words each: alpha in every second row, beta in every third, gamma in
        // every fifth. The top 5 have all three, and so must any row that reaches them:
        // along gamma's 800 rows, only the 134 that alpha's and beta's bit sets both hold
        // are visited.
        let mut index = Index::default();
        for i in 0..4_000 {
            let mut fields: [Vec<String>; FIELDS] = Default::default();
            for (word, every, other) in [("alpha", 2, "a"), ("beta", 3, "b"), ("gamma", 5, "c")] {
                let w = if i % every == 0 {
                    word.to_owned()
                } else {
                    format!("{other}{i}")
                };
                fields[WHAT].push(w);
            }
            index
                .insert(&format!("ROW_{i:04}"), &fields, false, Vec::new())
                .unwrap();
        }
        let query = query(&index, &["alpha", "beta", "gamma"]);
        let (top, work) = index.top_counted(&query, 5, 0.5, 0.0, &[]);
        assert_eq!(view(&top), view(&exhaustive(&index, &query, 5, 0.5)));
        assert!(work.visited < 200, "rows visited: {work:?}");
    }

    #[test]
    fn the_top_k_is_the_exhaustive_top_k_on_random_indexes() {
        let mut mix = Mix(0x9E37);
        let mut next = |n: usize| mix.below(n);
        let words = ["ab", "cd", "ef", "gh", "ij", "kl", "mn", "op"];
        let mut asked = 0;
        for round in 0..40 {
            // Every fourth index is large, of rows alike in length, its words in a third of
            // the rows or more: kept as bit sets, and needed by the top k.
            let large = round % 4 == 3;
            let mut index = Index::default();
            let mut keys: Vec<String> = Vec::new();
            let rows = if large {
                2_500 + next(2_500)
            } else {
                50 + next(400)
            };
            // Inserts, removals (a fifth), inserts again into the freed slots.
            for i in 0..rows + rows / 3 {
                if i >= rows && i < rows + rows / 5 {
                    let key = keys.swap_remove(next(keys.len()));
                    index.remove(&key).unwrap();
                    continue;
                }
                let mut fields: [Vec<String>; FIELDS] = Default::default();
                if large {
                    while fields[WHAT].len() < 3 {
                        let w = words[next(words.len()).min(next(words.len()))].to_owned();
                        if !fields[WHAT].contains(&w) {
                            fields[WHAT].push(w);
                        }
                    }
                } else {
                    // Common words early in the list, repeats, two fields of other lengths.
                    for field in [WHAT, DOC] {
                        for _ in 0..next(6) {
                            let w = words[next(words.len()).min(next(words.len()))];
                            fields[field].push(w.to_owned());
                        }
                    }
                }
                // Keys out of slot order, so ties are not settled by the order rows come in.
                let key = format!("ROW_{:04}_{i}", next(50));
                index
                    .insert(&key, &fields, next(6) == 0, Vec::new())
                    .unwrap();
                keys.push(key);
            }
            for _ in 0..30 {
                let mut query: Vec<Vec<(u32, f32)>> = Vec::new();
                for _ in 0..1 + next(4) {
                    let mut alts = Vec::new();
                    for _ in 0..1 + next(2) {
                        if let Some(id) = index.lookup(words[next(words.len())]) {
                            alts.push((id, [1.0, 0.6][next(2)]));
                        }
                    }
                    query.push(alts);
                }
                let k = 1 + next(12);
                let (top, _) = index.top_counted(&query, k, 0.5, 0.0, &[]);
                let best = exhaustive(&index, &query, k, 0.5);
                assert_eq!(view(&top), view(&best), "{query:?}, k {k}");
                asked += usize::from(!best.is_empty());
            }
        }
        assert!(asked > 1_000, "{asked}");
    }

    #[test]
    fn seeking_finds_the_first_slot_at_or_past_the_one_sought() {
        let docs: Vec<u32> = (0..300).map(|i| i * 8 + (i % 7)).collect();
        for from in [0, 1, 5, 64, 299, 300] {
            for doc in 0..2_500 {
                let want = from + docs[from..].partition_point(|&d| d < doc);
                assert_eq!(seek(&docs, from, doc), want, "from {from}, doc {doc}");
            }
        }
        assert_eq!(seek(&[], 0, 5), 0);
    }
}
