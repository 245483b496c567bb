//! The inverted index: per-term postings (sorted by slot) with per-field term counts and an
//! upper bound of what the term can score, per-row field lengths, running length totals,
//! and BM25F scoring: exhaustive ([`Index::score`]) or the top k with pruning ([`top`]).
//! Every update touches only the row's own terms.
//!
//! Updates run inside the state machine's apply (and again at start), on every node, so
//! none of them may panic: a slot or term id that the tables do not hold (which only a bug
//! here could cause) is skipped and reported by [`Index::insert`] / [`Index::remove`]
//! returning `false` / [`Inconsistent`], for the caller to log and count, never a crash loop.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use super::fuzzy::{edit_distance, fuzzable, DeleteMap};

mod text;
mod top;

use self::text::Text;

/// The fields of a row, in posting order.
pub(crate) const KEY: usize = 0;
pub(crate) const WHAT: usize = 1;
pub(crate) const DOC: usize = 2;
pub(crate) const CATEGORY: usize = 3;
pub(crate) const ARGS: usize = 4;
pub(crate) const FIELDS: usize = 5;

/// BM25F field weights. The key and the WHAT line are written to name the capability, so a
/// term there is strong evidence. The rest of the docstring and the argument descriptions
/// describe inputs, outputs and examples: real but weaker evidence ("e.g. DNA, blood").
/// The category is shared by many rows, which IDF already discounts; it counts as plain text.
const WEIGHT: [f32; FIELDS] = {
    let mut w = [0.0; FIELDS];
    w[KEY] = 3.0;
    w[WHAT] = 2.5;
    w[DOC] = 1.0;
    w[CATEGORY] = 1.0;
    w[ARGS] = 0.7;
    w
};
/// Length normalisation per field. Keys, WHAT lines and categories are short and uniform,
/// so their length says little; long free text is normalised as in classic BM25.
const B: [f32; FIELDS] = {
    let mut b = [0.0; FIELDS];
    b[KEY] = 0.5;
    b[WHAT] = 0.5;
    b[DOC] = 0.75;
    b[CATEGORY] = 0.3;
    b[ARGS] = 0.75;
    b
};
const K1: f32 = 1.2;

/// Weights of tolerant matches for a query term missing from the vocabulary.
const TYPO1_WEIGHT: f32 = 0.6;
const TYPO2_WEIGHT: f32 = 0.45;
const PREFIX_WEIGHT: f32 = 0.5;
/// Most alternatives kept per tolerant kind, so a short prefix cannot flood the query.
const MAX_TOLERANT: usize = 6;

/// One row's counts of one term, per field (saturating: 255 repeats say nothing more).
type Counts = [u8; FIELDS];

/// A term's postings, sorted by slot: the slots, and apart from them each one's counts per
/// field. Two arrays instead of one of (slot, counts) pairs: a posting takes 9 bytes instead
/// of 12 (the pair's padding), at a million rows about 90 bytes a row, and a binary search
/// for a slot reads slots alone.
#[derive(Debug, Default)]
struct Postings {
    docs: Vec<u32>,
    counts: Vec<Counts>,
    /// For a word in many rows, the same slots as a bit set, so the top-k search can tell
    /// whether a row has the word with one read instead of a search (see [`Postings::has`]).
    /// Boxed twice: a thin pointer, 8 bytes in every term of a vocabulary of millions where
    /// a few dozen words have one.
    #[allow(clippy::redundant_allocation)]
    dense: Option<Box<Box<[u64]>>>,
}

/// A word's slots are also kept as a bit set once it is in one slot of [`DENSE_FROM`] (the
/// set is then at most as large as the slots' array), and no more below half of that.
const DENSE_FROM: usize = 32;
/// Fewer postings than this never get a bit set: a search in them is short anyway.
const DENSE_MIN: usize = 1_024;

impl Postings {
    fn len(&self) -> usize {
        self.docs.len()
    }

    fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// Where `doc`'s posting is, if it has one.
    fn find(&self, doc: u32) -> Option<usize> {
        self.docs.binary_search(&doc).ok()
    }

    /// Adds `doc`'s posting in slot order (a fresh slot is the largest: appended).
    fn insert(&mut self, doc: u32, counts: Counts) {
        // A fresh slot is past every posting: it goes at the end without a search through a
        // list that, for a common word, holds most of the catalogue (a reused slot is
        // searched for).
        let at = match self.docs.last() {
            Some(&last) if last > doc => self.docs.partition_point(|&d| d < doc),
            _ => self.docs.len(),
        };
        self.docs.insert(at, doc);
        self.counts.insert(at, counts);
        let (word, bit) = (doc as usize / 64, doc % 64);
        match &mut self.dense {
            Some(bits) if word < bits.len() => bits[word] |= 1 << bit,
            _ => self.redensify(DENSE_FROM),
        }
    }

    /// Removes the posting at `i`, returning its counts.
    fn remove(&mut self, i: usize) -> Counts {
        let doc = self.docs.remove(i);
        if let Some(bits) = &mut self.dense {
            if let Some(word) = bits.get_mut(doc as usize / 64) {
                *word &= !(1 << (doc % 64));
            }
            self.redensify(DENSE_FROM * 2);
        }
        self.counts.remove(i)
    }

    /// Builds the bit set afresh if the word is in at least one slot of `every` (and has
    /// [`DENSE_MIN`] postings), drops it otherwise.
    fn redensify(&mut self, every: usize) {
        let span = self.docs.last().map_or(0, |&d| d as usize + 1);
        if self.docs.len() < DENSE_MIN || self.docs.len() * every < span {
            self.dense = None;
            return;
        }
        if self
            .dense
            .as_ref()
            .is_some_and(|bits| bits.len() * 64 >= span)
        {
            return;
        }
        // Room to grow by an eighth before the next rebuild.
        let mut bits = vec![0u64; (span + span / 8).div_ceil(64)];
        for &d in &self.docs {
            bits[d as usize / 64] |= 1 << (d % 64);
        }
        self.dense = Some(Box::new(bits.into_boxed_slice()));
    }

    /// The bit set, if the word has one.
    fn bits(&self) -> Option<&[u64]> {
        self.dense.as_deref().map(|bits| &**bits)
    }

    /// Whether `doc` has a posting, if the answer is one read away (`None`: search).
    fn has(&self, doc: u32) -> Option<bool> {
        let bits = self.dense.as_ref()?;
        Some(
            bits.get(doc as usize / 64)
                .is_some_and(|word| word & (1 << (doc % 64)) != 0),
        )
    }

    /// (slot, counts) in slot order.
    fn iter(&self) -> impl Iterator<Item = (u32, &Counts)> {
        self.docs.iter().copied().zip(&self.counts)
    }

    /// Heap bytes, at capacity.
    fn heap_bytes(&self) -> usize {
        self.docs.capacity() * std::mem::size_of::<u32>()
            + self.counts.capacity() * std::mem::size_of::<Counts>()
            + self.dense.as_ref().map_or(0, |bits| bits.len() * 8 + 16)
    }
}

#[derive(Debug)]
struct Term {
    text: Text,
    /// Sorted by slot, so the top-k search can skip through them.
    postings: Postings,
    bound: Ceiling,
}

/// What bounds a term's score in any row: its largest count per field, and the shortest
/// field it occurs in (a shorter field normalises a count up). Widened as postings are
/// added, recomputed when a removed posting was the one that set it, so it stays tight.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Ceiling {
    max_tf: [u8; FIELDS],
    min_len: [u32; FIELDS],
}

impl Ceiling {
    const NONE: Ceiling = Ceiling {
        max_tf: [0; FIELDS],
        min_len: [u32::MAX; FIELDS],
    };

    fn widen(&mut self, tf: &[u8; FIELDS], len: &[u32; FIELDS]) {
        for f in 0..FIELDS {
            if tf[f] > 0 {
                self.max_tf[f] = self.max_tf[f].max(tf[f]);
                self.min_len[f] = self.min_len[f].min(len[f]);
            }
        }
    }

    /// Whether a posting with these counts and lengths sets part of the bound.
    fn is_set_by(&self, tf: &[u8; FIELDS], len: &[u32; FIELDS]) -> bool {
        (0..FIELDS).any(|f| tf[f] > 0 && (tf[f] == self.max_tf[f] || len[f] == self.min_len[f]))
    }

    /// Per field, the most one count there can add to [`tfn`]: `WEIGHT / norm` at the
    /// shortest length the term occurs in (0 where it never occurs).
    fn per_count(&self, inv_avg: &[f32; FIELDS]) -> [f32; FIELDS] {
        let mut per = [0.0f32; FIELDS];
        for f in 0..FIELDS {
            if self.max_tf[f] > 0 {
                per[f] = WEIGHT[f] / (1.0 - B[f] + B[f] * self.min_len[f] as f32 * inv_avg[f]);
            }
        }
        per
    }

    /// The most [`tfn`] can be for the term in any row (rounding included: each step is
    /// the same monotone operation on larger inputs).
    fn tfn(&self, inv_avg: &[f32; FIELDS]) -> f32 {
        let mut tfn = 0.0f32;
        for f in 0..FIELDS {
            if self.max_tf[f] > 0 {
                let norm = 1.0 - B[f] + B[f] * self.min_len[f] as f32 * inv_avg[f];
                tfn += WEIGHT[f] * f32::from(self.max_tf[f]) / norm;
            }
        }
        tfn
    }
}

/// A row's BM25F-normalised count of one term (`tf` per field, field lengths `len`).
/// Shared by the exhaustive and the pruned scorer, so both compute the same bits.
#[inline]
fn tfn(tf: &[u8; FIELDS], len: &[u32; FIELDS], inv_avg: &[f32; FIELDS]) -> f32 {
    let mut tfn = 0.0f32;
    for f in 0..FIELDS {
        if tf[f] > 0 {
            let norm = 1.0 - B[f] + B[f] * len[f] as f32 * inv_avg[f];
            tfn += WEIGHT[f] * f32::from(tf[f]) / norm;
        }
    }
    tfn
}

/// A term's score in a row, from its [`tfn`] and its weighted IDF.
#[inline]
fn saturate(idf: f32, tfn: f32) -> f32 {
    idf * tfn / (K1 + tfn)
}

/// A pin: the analysed terms of a phrase (sorted, unique) and its raw lowercase words.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pin {
    pub(crate) terms: Box<[Box<str>]>,
    pub(crate) raw: Box<str>,
}

#[derive(Debug)]
struct Doc {
    key: Arc<str>,
    /// Ids of the distinct terms, to find the postings again on removal.
    terms: Box<[u32]>,
    pins: Box<[Pin]>,
}

/// A scored row: slot, score, bit set of the query positions that matched.
pub(crate) struct Scored {
    pub(crate) slot: u32,
    pub(crate) score: f32,
    pub(crate) mask: u64,
}

/// An ask's working memory, indexed by slot, kept between asks: zeroing and faulting in
/// accumulators for every slot on each ask cost more than scoring a rare word's rows at a
/// million rows (12 MB an exhaustive ask), and the allocator kept the freed blocks of
/// concurrent asks (a node answering asks held 100–200 MB more than one that did not).
/// Outside an ask, `acc`, `mask` and `best` are all zero: an ask resets what it touched.
#[derive(Debug, Default)]
struct Scratch {
    acc: Vec<f32>,
    mask: Vec<u64>,
    best: Vec<f32>,
    touched: Vec<u32>,
    best_touched: Vec<u32>,
}

/// Scratches kept for the next asks; more asks at once than this allocate their own.
const SCRATCHES_KEPT: usize = 2;

impl Scratch {
    /// `acc` and `mask` of at least `slots` (zero), the lists empty.
    fn fit(&mut self, slots: usize, mask: bool) {
        if self.acc.len() < slots {
            self.acc.resize(slots, 0.0);
        }
        if mask && self.mask.len() < slots {
            self.mask.resize(slots, 0);
        }
        self.touched.clear();
        self.best_touched.clear();
    }
}

#[derive(Debug, Default)]
pub(crate) struct Index {
    vocab: BTreeMap<Text, u32>,
    terms: Vec<Option<Term>>,
    free_terms: Vec<u32>,
    docs: Vec<Option<Doc>>,
    /// Field lengths by slot, apart from `docs` so the scoring loop reads 20 bytes per row.
    lens: Vec<[u32; FIELDS]>,
    /// Whether the row in a slot is demoted, apart from `docs` for the same reason.
    demote: Vec<bool>,
    free_docs: Vec<u32>,
    by_key: HashMap<Arc<str>, u32>,
    total_len: [u64; FIELDS],
    fuzzy: DeleteMap,
    /// Pin term -> slots of rows with a pin holding that term; raw pin -> slots.
    pin_terms: HashMap<Box<str>, Vec<u32>>,
    pin_raw: HashMap<Box<str>, Vec<u32>>,
    scratches: std::sync::Mutex<Vec<Scratch>>,
}

impl Index {
    pub(crate) fn len(&self) -> usize {
        self.by_key.len()
    }

    /// A scratch for one ask over every slot (with `mask` if it is asked for).
    fn scratch(&self, mask: bool) -> Scratch {
        let kept = self
            .scratches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop();
        let mut scratch = kept.unwrap_or_default();
        scratch.fit(self.docs.len(), mask);
        scratch
    }

    /// Keeps `scratch`, reset by its ask, for the next one.
    fn give_back(&self, scratch: Scratch) {
        let mut kept = self
            .scratches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if kept.len() < SCRATCHES_KEPT {
            kept.push(scratch);
        }
    }

    /// Inserts a row (replacing one with the same key) from its analysed fields. `Err` when
    /// the tables were found inconsistent: the row is then indexed without the terms
    /// concerned.
    pub(crate) fn insert(
        &mut self,
        key: &str,
        fields: &[Vec<String>; FIELDS],
        demote: bool,
        pins: Vec<Pin>,
    ) -> Result<(), Inconsistent> {
        let mut consistent = self.remove(key).is_ok();
        let slot = match self.free_docs.pop() {
            Some(s) => s,
            None => {
                self.docs.push(None);
                self.lens.push([0; FIELDS]);
                self.demote.push(false);
                (self.docs.len() - 1) as u32
            }
        };
        let mut counts: HashMap<&str, [u8; FIELDS]> = HashMap::new();
        let mut len = [0u32; FIELDS];
        for (f, terms) in fields.iter().enumerate() {
            len[f] = terms.len() as u32;
            self.total_len[f] += terms.len() as u64;
            for t in terms {
                let c = counts.entry(t.as_str()).or_insert([0; FIELDS]);
                c[f] = c[f].saturating_add(1);
            }
        }
        let mut ids = Vec::with_capacity(counts.len());
        for (text, tf) in counts {
            let id = self.term_id_or_create(text);
            match self.term_mut(id) {
                Some(term) => {
                    term.postings.insert(slot, tf);
                    term.bound.widen(&tf, &len);
                    ids.push(id);
                }
                None => consistent = false,
            }
        }
        for pin in &pins {
            for t in pin.terms.iter() {
                push_unique(self.pin_terms.entry(t.clone()).or_default(), slot);
            }
            push_unique(self.pin_raw.entry(pin.raw.clone()).or_default(), slot);
        }
        let key: Arc<str> = Arc::from(key);
        let doc = Doc {
            key: key.clone(),
            terms: ids.into_boxed_slice(),
            pins: pins.into_boxed_slice(),
        };
        match (
            self.lens.get_mut(slot as usize),
            self.demote.get_mut(slot as usize),
            self.docs.get_mut(slot as usize),
        ) {
            (Some(lens), Some(demoted), Some(place)) => {
                *lens = len;
                *demoted = demote;
                *place = Some(doc);
                self.by_key.insert(key, slot);
            }
            _ => consistent = false,
        }
        if consistent {
            Ok(())
        } else {
            Err(Inconsistent)
        }
    }

    /// Removes the row with `key`, if there is one. `Err` when the tables were found
    /// inconsistent (what could be removed was).
    pub(crate) fn remove(&mut self, key: &str) -> Result<(), Inconsistent> {
        let Some(slot) = self.by_key.remove(key) else {
            return Ok(());
        };
        let Some(doc) = self.docs.get_mut(slot as usize).and_then(Option::take) else {
            return Err(Inconsistent);
        };
        let mut consistent = true;
        let lens = self.lens.get(slot as usize).copied().unwrap_or_default();
        for (total, len) in self.total_len.iter_mut().zip(lens) {
            *total = total.saturating_sub(u64::from(len));
        }
        for &id in doc.terms.iter() {
            let Some(term) = self.terms.get_mut(id as usize).and_then(Option::as_mut) else {
                consistent = false;
                continue;
            };
            // O(df) to keep the order, touching only this term's list.
            if let Some(i) = term.postings.find(slot) {
                let removed = term.postings.remove(i);
                if term.bound.is_set_by(&removed, &lens) {
                    let mut bound = Ceiling::NONE;
                    for (doc, tf) in term.postings.iter() {
                        if let Some(len) = self.lens.get(doc as usize) {
                            bound.widen(tf, len);
                        }
                    }
                    term.bound = bound;
                }
            }
            if term.postings.is_empty() {
                let text = term.text.clone();
                self.vocab.remove(text.as_bytes());
                self.fuzzy.remove(text.as_str(), id);
                if let Some(place) = self.terms.get_mut(id as usize) {
                    *place = None;
                }
                self.free_terms.push(id);
            }
        }
        for pin in doc.pins.iter() {
            for t in pin.terms.iter() {
                remove_slot(&mut self.pin_terms, t, slot);
            }
            remove_slot(&mut self.pin_raw, &pin.raw, slot);
        }
        if let Some(demoted) = self.demote.get_mut(slot as usize) {
            *demoted = false;
        }
        self.free_docs.push(slot);
        if consistent {
            Ok(())
        } else {
            Err(Inconsistent)
        }
    }

    fn term_id_or_create(&mut self, text: &str) -> u32 {
        if let Some(&id) = self.vocab.get(text.as_bytes()) {
            if self.term_mut(id).is_some() {
                return id;
            }
        }
        let text = Text::new(text);
        let term = Term {
            text: text.clone(),
            postings: Postings::default(),
            bound: Ceiling::NONE,
        };
        let free = self.free_terms.pop();
        let id = match free.and_then(|id| self.terms.get_mut(id as usize).map(|p| (id, p))) {
            Some((id, place)) => {
                *place = Some(term);
                id
            }
            None => {
                self.terms.push(Some(term));
                (self.terms.len() - 1) as u32
            }
        };
        self.fuzzy.insert(text.as_str(), id);
        self.vocab.insert(text, id);
        id
    }

    fn term_mut(&mut self, id: u32) -> Option<&mut Term> {
        self.terms.get_mut(id as usize).and_then(Option::as_mut)
    }

    fn term(&self, id: u32) -> Option<&Term> {
        self.terms.get(id as usize).and_then(Option::as_ref)
    }

    fn df(&self, id: u32) -> usize {
        self.term(id).map_or(0, |t| t.postings.len())
    }

    pub(crate) fn lookup(&self, term: &str) -> Option<u32> {
        self.vocab.get(term.as_bytes()).copied()
    }

    /// Alternatives for a query term missing from the vocabulary: vocabulary terms within one
    /// edit (4-7 characters) or two (8 and more), and terms it is a prefix of (4 and more).
    /// `surface` is the unstemmed word; its length sets the budget and it is tried as well,
    /// since a typo can derail the stemmer ("calender" stems to "calend").
    pub(crate) fn tolerant(&self, term: &str, surface: &str) -> Vec<(u32, f32)> {
        let n = surface.chars().count().max(term.chars().count());
        if n < 4 || !fuzzable(term) {
            return Vec::new();
        }
        let max_dist = if n >= 8 { 2 } else { 1 };
        let mut typos: Vec<(usize, usize, u32)> = Vec::new(); // (distance, -df as rank, id)
        for probe in [term, surface] {
            for id in self.fuzzy.candidates(probe, max_dist) {
                let Some(t) = self.term(id) else {
                    continue;
                };
                if let Some(d) = edit_distance(probe, t.text.as_str(), max_dist) {
                    if d > 0 && !typos.iter().any(|x| x.2 == id) {
                        typos.push((d, usize::MAX - t.postings.len(), id));
                    }
                }
            }
            if probe == surface || term == surface {
                break;
            }
        }
        typos.sort_unstable();
        typos.truncate(MAX_TOLERANT);

        // Prefix: scan the sorted vocabulary from the term on; prefer the shortest
        // completions (closest to what was typed), then the commonest.
        let mut prefixes: Vec<(usize, usize, u32)> = self
            .vocab
            .range::<[u8], _>((Bound::Excluded(term.as_bytes()), Bound::Unbounded))
            .take_while(|(t, _)| t.as_bytes().starts_with(term.as_bytes()))
            .take(256)
            .map(|(t, &id)| (t.as_bytes().len(), usize::MAX - self.df(id), id))
            .collect();
        prefixes.sort_unstable();
        prefixes.truncate(MAX_TOLERANT);

        let mut out: Vec<(u32, f32)> = typos
            .iter()
            .map(|&(d, _, id)| (id, if d == 1 { TYPO1_WEIGHT } else { TYPO2_WEIGHT }))
            .collect();
        for (_, _, id) in prefixes {
            if !out.iter().any(|a| a.0 == id) {
                out.push((id, PREFIX_WEIGHT));
            }
        }
        out
    }

    /// BM25F over the query positions: each position is a list of (term, weight)
    /// alternatives (the exact term, synonyms, typo and prefix matches) and contributes the
    /// best of them per row, so a word with many synonyms does not count many times.
    pub(crate) fn score(&self, positions: &[Vec<(u32, f32)>]) -> Vec<Scored> {
        let n = self.len() as f32;
        if n == 0.0 {
            return Vec::new();
        }
        let inv_avg = self.inv_avg();
        // Dense accumulators indexed by slot: at tens of thousands of rows a common term
        // touches a large share of them, where a hash map would cost more than the zeroing.
        let slots = self.docs.len();
        let mut scratch = self.scratch(true);
        let Scratch {
            acc,
            mask,
            best,
            touched,
            best_touched,
        } = &mut scratch;

        for (pos, alts) in positions.iter().enumerate().take(64) {
            let bit = 1u64 << pos;
            let multi = alts.len() > 1;
            if multi && best.len() < slots {
                best.resize(slots, 0.0);
            }
            for &(id, weight) in alts {
                let Some(term) = self.term(id) else {
                    continue;
                };
                let idf = self.idf(term, weight);
                // Postings only ever name live rows: removal deletes them first.
                for (doc, tf) in term.postings.iter() {
                    let Some(len) = self.lens.get(doc as usize) else {
                        continue;
                    };
                    let s = saturate(idf, tfn(tf, len, &inv_avg));
                    let d = doc as usize;
                    if multi {
                        if best[d] == 0.0 {
                            best_touched.push(doc);
                        }
                        best[d] = best[d].max(s);
                    } else {
                        if mask[d] == 0 {
                            touched.push(doc);
                        }
                        acc[d] += s;
                        mask[d] |= bit;
                    }
                }
            }
            for &slot in best_touched.iter() {
                let d = slot as usize;
                if mask[d] == 0 {
                    touched.push(slot);
                }
                acc[d] += best[d];
                mask[d] |= bit;
                best[d] = 0.0;
            }
            best_touched.clear();
        }
        let scored = touched
            .iter()
            .map(|&slot| Scored {
                slot,
                score: acc[slot as usize],
                mask: mask[slot as usize],
            })
            .collect();
        for &slot in touched.iter() {
            acc[slot as usize] = 0.0;
            mask[slot as usize] = 0;
        }
        self.give_back(scratch);
        scored
    }

    /// Per field, the number of rows over the total length (the inverse average length).
    fn inv_avg(&self) -> [f32; FIELDS] {
        let n = self.len() as f32;
        self.total_len
            .map(|total| if total > 0 { n / total as f32 } else { 0.0 })
    }

    /// A term's IDF times the weight of the query position's alternative.
    fn idf(&self, term: &Term, weight: f32) -> f32 {
        let n = self.len() as f32;
        let df = term.postings.len() as f32;
        (1.0 + (n - df + 0.5) / (df + 0.5)).ln() * weight
    }

    /// How many postings the alternatives of `positions` have in all.
    pub(crate) fn postings(&self, positions: &[Vec<(u32, f32)>]) -> usize {
        positions.iter().flatten().map(|&(id, _)| self.df(id)).sum()
    }

    /// The slot of the row `key`.
    pub(crate) fn slot(&self, key: &str) -> Option<u32> {
        self.by_key.get(key).copied()
    }

    /// The key of the row in `slot` (`None` only for a slot no row holds).
    pub(crate) fn key(&self, slot: u32) -> Option<&Arc<str>> {
        self.doc(slot).map(|d| &d.key)
    }

    fn doc(&self, slot: u32) -> Option<&Doc> {
        self.docs.get(slot as usize).and_then(Option::as_ref)
    }

    pub(crate) fn demoted(&self, slot: u32) -> bool {
        self.demote.get(slot as usize).copied().unwrap_or(false)
    }

    /// Rows with a pin close to the query: the same raw words, or analysed term sets with a
    /// Jaccard similarity of at least 0.8 (equal sets for queries of up to four terms).
    pub(crate) fn pinned(&self, query_terms: &[String], raw: &str) -> Vec<u32> {
        let mut q: Vec<&str> = query_terms.iter().map(String::as_str).collect();
        q.sort_unstable();
        q.dedup();
        let mut candidates: Vec<u32> = Vec::new();
        for t in &q {
            if let Some(slots) = self.pin_terms.get(*t) {
                candidates.extend_from_slice(slots);
            }
        }
        if let Some(slots) = self.pin_raw.get(raw) {
            candidates.extend_from_slice(slots);
        }
        candidates.sort_unstable();
        candidates.dedup();
        candidates.retain(|&slot| {
            let Some(doc) = self.doc(slot) else {
                return false;
            };
            doc.pins.iter().any(|pin| {
                if !raw.is_empty() && *pin.raw == *raw {
                    return true;
                }
                if pin.terms.is_empty() || q.is_empty() {
                    return false;
                }
                let common = pin
                    .terms
                    .iter()
                    .filter(|t| q.binary_search(&&***t).is_ok())
                    .count();
                let union = pin.terms.len() + q.len() - common;
                common as f32 >= 0.8 * union as f32
            })
        });
        candidates
    }

    /// Heap bytes held by the index, counted from capacities (hash tables at one control
    /// byte per bucket, B-tree nodes approximated by their entries plus a third).
    pub(crate) fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        let mut bytes = 0usize;
        // A long term's text is shared by the vocabulary and the term table: count once.
        for t in self.terms.iter().flatten() {
            bytes += t.text.heap_bytes();
            bytes += t.postings.heap_bytes();
        }
        bytes += self.terms.capacity() * size_of::<Option<Term>>();
        bytes += self.free_terms.capacity() * 4 + self.free_docs.capacity() * 4;
        bytes += self.vocab.len() * size_of::<(Text, u32)>() * 4 / 3;
        for d in self.docs.iter().flatten() {
            bytes += d.key.len() + 16;
            bytes += d.terms.len() * 4;
            bytes += d.pins.len() * size_of::<Pin>();
            for p in d.pins.iter() {
                bytes += p.raw.len()
                    + p.terms
                        .iter()
                        .map(|t| t.len() + size_of::<Box<str>>())
                        .sum::<usize>();
            }
        }
        bytes += self.docs.capacity() * size_of::<Option<Doc>>();
        bytes += self.lens.capacity() * size_of::<[u32; FIELDS]>() + self.demote.capacity();
        bytes += self.by_key.capacity() * (size_of::<(Arc<str>, u32)>() + 1);
        for map in [&self.pin_terms, &self.pin_raw] {
            bytes += map.capacity() * (size_of::<(Box<str>, Vec<u32>)>() + 1);
            bytes += map
                .iter()
                .map(|(k, v)| k.len() + v.capacity() * 4)
                .sum::<usize>();
        }
        bytes + self.fuzzy.memory_bytes()
    }
}

/// The index's tables disagreed (a slot or term id they do not hold): a bug, reported
/// instead of panicking inside apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the resolver index is inconsistent")]
pub struct Inconsistent;

fn push_unique(v: &mut Vec<u32>, slot: u32) {
    if !v.contains(&slot) {
        v.push(slot);
    }
}

fn remove_slot(map: &mut HashMap<Box<str>, Vec<u32>>, key: &str, slot: u32) {
    if let Some(v) = map.get_mut(key) {
        v.retain(|&s| s != slot);
        if v.is_empty() {
            map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::Mix;
    use super::*;

    fn key_terms(words: &[&str]) -> [Vec<String>; FIELDS] {
        let mut fields: [Vec<String>; FIELDS] = Default::default();
        fields[KEY] = words.iter().map(|w| (*w).to_owned()).collect();
        fields
    }

    /// An index of `rows` rows over a few words, some in many rows and some in few.
    fn words_index(rows: usize) -> Index {
        let words = ["alpha", "beta", "gamma", "delta", "omega"];
        let mut index = Index::default();
        for i in 0..rows {
            let mut fields: [Vec<String>; FIELDS] = Default::default();
            for (w, word) in words.iter().enumerate() {
                if i % (w + 1) == 0 {
                    fields[if i % 3 == 0 { WHAT } else { DOC }].push((*word).to_owned());
                }
            }
            fields[KEY] = vec![format!("k{}", i % 7)];
            index
                .insert(&format!("ROW_{i}"), &fields, i % 11 == 0, Vec::new())
                .unwrap();
        }
        index
    }

    fn sorted(scored: Vec<Scored>) -> Vec<(u32, u32, u64)> {
        let mut out: Vec<_> = scored
            .into_iter()
            .map(|s| (s.slot, s.score.to_bits(), s.mask))
            .collect();
        out.sort_unstable();
        out
    }

    #[test]
    fn an_ask_after_others_scores_as_on_a_fresh_index() {
        let warm = words_index(300);
        // Asks as words, with weights: a position of two words is the rows' best of them.
        let asks: [&[&[(&str, f32)]]; 4] = [
            &[&[("alpha", 1.0)], &[("omega", 1.0)]],
            &[&[("beta", 1.0), ("gamma", 0.6)], &[("k3", 1.0)]],
            &[&[("delta", 1.0)]],
            &[&[("gamma", 1.0)], &[("alpha", 1.0), ("k1", 0.5)]],
        ];
        // Term ids depend on the index (the order a row's terms are met in): per index.
        let positions = |index: &Index, ask: &[&[(&str, f32)]]| -> Vec<Vec<(u32, f32)>> {
            ask.iter()
                .map(|alts| {
                    alts.iter()
                        .map(|&(w, weight)| (index.lookup(w).unwrap(), weight))
                        .collect()
                })
                .collect()
        };
        // Every ask twice over on the same index, each way, against a fresh index's answer.
        for _ in 0..2 {
            for ask in asks {
                let fresh = words_index(300);
                assert_eq!(
                    sorted(warm.score(&positions(&warm, ask))),
                    sorted(fresh.score(&positions(&fresh, ask)))
                );
                let fresh = words_index(300);
                assert_eq!(
                    sorted(warm.top(&positions(&warm, ask), 5, 0.5, 0.0, &[])),
                    sorted(fresh.top(&positions(&fresh, ask), 5, 0.5, 0.0, &[]))
                );
            }
        }
        // Left as found: no slot keeps a partial score.
        let kept = warm.scratches.lock().unwrap();
        assert!(!kept.is_empty(), "scratches are kept for the next ask");
        for scratch in kept.iter() {
            assert!(scratch.acc.iter().all(|&a| a == 0.0));
            assert!(scratch.mask.iter().all(|&m| m == 0));
            assert!(scratch.best.iter().all(|&b| b == 0.0));
        }
    }

    #[test]
    fn no_more_scratches_are_kept_than_the_bound() {
        let index = words_index(10);
        // As many asks at once as the bound and one more: the extra one's is let go.
        let taken: Vec<Scratch> = (0..=SCRATCHES_KEPT).map(|_| index.scratch(false)).collect();
        for scratch in taken {
            index.give_back(scratch);
        }
        assert_eq!(index.scratches.lock().unwrap().len(), SCRATCHES_KEPT);
    }

    #[test]
    fn a_common_words_bit_set_holds_exactly_its_slots_as_rows_come_and_go() {
        let mut postings = Postings::default();
        let mut mix = Mix(0x2545);
        let mut next = |n: usize| mix.below(n);
        let check = |postings: &Postings, at: &str| {
            let span = postings.docs.last().map_or(0, |&d| d as usize + 1);
            if postings.len() < DENSE_MIN {
                assert!(postings.dense.is_none(), "{at}: too few postings for a set");
            }
            if postings.len() >= DENSE_MIN && postings.len() * DENSE_FROM >= span {
                assert!(postings.dense.is_some(), "{at}: dense enough");
            }
            if postings.len() * DENSE_FROM * 2 < span {
                assert!(postings.dense.is_none(), "{at}: too sparse to keep");
            }
        };
        // With a set, whether a slot has a posting is answered from it, and rightly.
        let agree = |postings: &Postings| {
            for doc in 0..210_000 {
                let has = postings.has(doc).expect("answered from the set");
                assert_eq!(has, postings.find(doc).is_some(), "slot {doc}");
            }
        };
        // A word in one row of 20 as 200,000 rows come: a bit set from 1,024 postings on.
        for slot in 0..200_000u32 {
            if next(20) == 0 {
                postings.insert(slot, [1; FIELDS]);
                check(&postings, "growing");
            }
        }
        assert!(postings.dense.is_some());
        agree(&postings);
        // A row going clears its bit; the set is not built again.
        let before = postings.bits().map(<[u64]>::as_ptr);
        postings.remove(postings.len() / 2);
        assert_eq!(postings.bits().map(<[u64]>::as_ptr), before);
        // Its rows go, at random: kept down to one row of 64, then dropped.
        let mut at_one_in_50 = false;
        while postings.len() > 2_500 {
            postings.remove(next(postings.len()));
            check(&postings, "thinning");
            if postings.len() == 4_000 {
                at_one_in_50 = true;
                assert!(
                    postings.dense.is_some(),
                    "kept between one in 32 and one in 64"
                );
                agree(&postings);
            }
        }
        assert!(at_one_in_50);
        assert!(postings.dense.is_none(), "{} postings left", postings.len());
    }

    #[test]
    fn postings_stay_in_slot_order_with_their_own_counts() {
        let mut postings = Postings::default();
        for (doc, n) in [(4, 1), (9, 2), (2, 3)] {
            postings.insert(doc, [n; FIELDS]);
        }
        // A reused slot goes in its place, not at the end.
        postings.insert(6, [7; FIELDS]);
        let all: Vec<(u32, u8)> = postings.iter().map(|(d, c)| (d, c[0])).collect();
        assert_eq!(all, [(2, 3), (4, 1), (6, 7), (9, 2)]);
        let at = postings.find(6).unwrap();
        assert_eq!(postings.remove(at), [7; FIELDS]);
        assert_eq!(postings.find(6), None);
        assert_eq!(postings.find(9).map(|i| postings.counts[i][0]), Some(2));
        assert_eq!(postings.len(), 3);
        assert!(postings.heap_bytes() >= 3 * (4 + FIELDS));
    }

    #[test]
    fn tables_found_inconsistent_are_reported_never_a_panic() {
        let mut index = Index::default();
        index
            .insert("A", &key_terms(&["time"]), false, Vec::new())
            .unwrap();
        // A bug elsewhere loses a term a row still names: replacing or removing that row
        // runs inside apply on every node, and must not panic there.
        index.terms.clear();
        assert_eq!(
            index.insert("A", &key_terms(&["time", "now"]), false, Vec::new()),
            Err(Inconsistent)
        );
        assert_eq!(
            index.slot("A").and_then(|s| index.key(s)).map(|k| &**k),
            Some("A")
        );
        assert_eq!(index.remove("A"), Ok(()));
        assert_eq!(index.len(), 0);
        assert!(index.key(7).is_none());
    }
}
