//! The resolver: a search index over catalogue rows that turns a plain-language request
//! into ranked row keys (DESIGN §6).
//!
//! ```text
//!  insert(Document) ──► Analyzer ──► per-field terms ──► Index (postings, lengths, totals)
//!                                                         ▲
//!  search("what's the wether") ──► Analyzer ──► terms ────┤ exact term, or typo/prefix
//!                                    │                    │ alternatives when unknown
//!                                    └─► Synonyms ────────┘ weaker alternatives
//!        BM25F per position (best alternative) ─► demote ─► pins first ─► relative cut-off
//! ```
//!
//! Scoring is BM25F over five fields (key parts, WHAT line, the rest of the docstring,
//! category, argument names and descriptions); see `index.rs` for weights and why.

pub mod baseline;
mod dense;
mod fuzzy;
mod index;
mod synonyms;
mod tokenize;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;

pub use index::Inconsistent;
use index::{Index, Pin, Scored, ARGS, CATEGORY, DOC, FIELDS, KEY, WHAT};
use synonyms::Synonyms;
use tokenize::Analyzer;

/// Weight of a synonym relative to the word the user typed.
const SYNONYM_WEIGHT: f32 = 0.6;
/// Weight of each half of an unknown word split into two indexed terms.
const COMPOUND_PART_WEIGHT: f32 = 0.8;
/// Shortest half of such a split, so names do not fall apart into short words.
const MIN_COMPOUND_PART: usize = 4;
/// Longest unknown word tried as a compound (each split point costs two analyses).
const MAX_COMPOUND_LEN: usize = 32;
/// Factor applied to a demoted row's score.
const DEMOTE_FACTOR: f32 = 0.5;
/// Rows scoring below this share of the best score are a weak tail and are dropped.
const CUT_OFF: f32 = 0.38;
/// Postings a query's words have below which scoring every one of them is faster than
/// pruning (whose fixed cost is the exact rescoring of its candidates): the crossover of the
/// resolver bench's "lexical search alone" table.
const PRUNE_FROM: usize = 8_192;
/// A question with this many word lists (its words and their alternatives) is scored whole
/// below [`LONG_QUESTION_UP_TO`] postings: the pruned top k goes through rows one at a
/// time, looking at every list for each, and on long questions of common words that cost
/// more than reading every posting once (the resolver bench's 50,000 rows: p99 1.64× with
/// the pruned top k, 0.99× with this rule; p50 0.48× and 0.70×). Past that many postings
/// the pruned top k is still far cheaper.
const MANY_LISTS: usize = 12;
const LONG_QUESTION_UP_TO: usize = 32 * PRUNE_FROM;
/// Query positions considered (the scorer keeps a 64-bit mask of matched positions).
const MAX_QUERY_TERMS: usize = 64;
/// Surface words reported per hit in `Hit::matched`.
const MAX_MATCHED: usize = 4;
/// Most a row's learned words add to its score, as a share of the best score of the ask.
const LEARNED_CAP: f32 = 0.10;
/// Clicks on a row for one word at which its learned boost for that word saturates.
const LEARNED_SATURATION: f32 = 20.0;

/// What the index needs of one row. Only enabled, planner-visible rows are inserted.
#[derive(Debug, Clone)]
pub struct Document<'a> {
    /// Row key, e.g. `TIME_NOW`.
    pub key: &'a str,
    /// Free-text category, e.g. "Chemical Engineering".
    pub category: &'a str,
    /// The `# WHAT:` docstring line (may be empty).
    pub what: &'a str,
    /// The other docstring values (ARGS, RETURNS, EXAMPLE, ...), joined by '\n'.
    pub doc: &'a str,
    /// (argument name, argument description) from `args_schema.properties`.
    pub args: Vec<(&'a str, &'a str)>,
    /// Phrases for which this row is the canonical answer.
    pub pins: &'a [String],
    /// Rank below peers.
    pub demote: bool,
}

/// One ranked answer.
#[derive(Debug, Clone)]
pub struct Hit {
    pub key: Arc<str>,
    pub score: f32,
    /// The query words (lowercase surface forms, at most four) that matched, for a short "why".
    pub matched: Vec<String>,
    /// Found by meaning alone: no query word matched, the row's vector is close.
    pub similar: bool,
    /// Words of the ask that earlier asks leading to this row taught the resolver.
    pub learned: Vec<String>,
}

/// How this build ranks with a model, told to the other members so a cluster in the middle
/// of an upgrade shows who ranks otherwise: 1 (builds that do not say) gave each row one
/// vector and weighed raw cosines; 2 sees each row from several sides
/// ([`crate::catalogue::semantic::embed_views`]) and weighs cosines as a share of the
/// query's best.
pub const HYBRID_REVISION: u32 = 2;

/// How the lexical and dense scores combine when the resolver has a model (DESIGN §6).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fusion {
    /// Weight of the lexical score, divided by the best lexical score of the query.
    pub lexical: f32,
    /// Weight of the cosine between the query's vector and the row's closest view, divided
    /// by the best cosine of the query.
    pub dense: f32,
    /// Rows below this share of the best fused score are dropped.
    pub cut_off: f32,
    /// Least cosine (not divided) for a row that no query word matched.
    pub floor: f32,
    /// Closest rows by meaning considered, beside every lexical match.
    pub depth: usize,
    /// How much a clear lexical winner shifts the weight toward words: the lexical weight
    /// grows by this times the margin of the best lexical score over the second.
    pub margin: f32,
}

impl Default for Fusion {
    fn default() -> Self {
        // Chosen across five query sets of different styles (`eval_sets --grid`, the
        // ranking chapter): meaning carries most of the weight, and a clear lexical winner
        // takes some back, which keeps the words' precision on requests phrased like the
        // rows; against one view per row and raw cosines, only the development set ranks
        // worse, by one request of 200 (with the row vectors in 8 bits).
        Self {
            lexical: 0.2,
            dense: 0.8,
            cut_off: 0.4,
            floor: 0.25,
            depth: 50,
            margin: 0.4,
        }
    }
}

impl Fusion {
    /// Meaning alone: the cosine ranks, words only say why.
    pub fn dense_only() -> Self {
        Self {
            lexical: 0.0,
            dense: 1.0,
            margin: 0.0,
            ..Self::default()
        }
    }
}

/// The lexical half of a search.
struct Lexical {
    terms: Vec<String>,
    surfaces: Vec<String>,
    covers: Vec<u64>,
    pinned: Vec<u32>,
    /// Per query position, its alternatives: (term id, weight).
    positions: Vec<Vec<(u32, f32)>>,
}

/// How the lexical half scores rows.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Scoring {
    /// Pruned when the query's postings are many, exhaustive otherwise (both rank alike).
    Auto,
    /// The best `limit` rows, skipping rows that cannot reach them ([`Index::top`]).
    Pruned,
    /// Every row sharing a word with the query ([`Index::score`]).
    Exhaustive,
}

/// The search index. Updates are incremental; `search` takes `&self`, so readers can share it
/// behind a `RwLock`.
#[derive(Default)]
pub struct Resolver {
    analyzer: Analyzer,
    synonyms: Synonyms,
    index: Index,
    vectors: dense::Vectors,
    fusion: Fusion,
    /// Learned words: analysed term -> row key -> clicks (asks with the term that led to an
    /// invocation of the row). See [`Resolver::learn`].
    learned: HashMap<String, HashMap<Arc<str>, u32>>,
}

impl Default for Synonyms {
    fn default() -> Self {
        Synonyms::new(&Analyzer::default())
    }
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver")
            .field("rows", &self.len())
            .finish_non_exhaustive()
    }
}

impl Resolver {
    pub fn new() -> Self {
        Self::default()
    }

    /// Inserts the row, or replaces the row with the same key (and drops its vector).
    pub fn insert(&mut self, doc: &Document<'_>) -> Result<(), Inconsistent> {
        self.insert_embedded(doc, &[])
    }

    /// Inserts the row with the vectors of its views, when the node has a model and has
    /// embedded them (none: the row is found by its words alone until
    /// [`Resolver::set_views`]). `Err` only if the index found its own tables inconsistent
    /// (a bug): the row is then indexed as well as they allow, and the caller logs it.
    pub fn insert_embedded(
        &mut self,
        doc: &Document<'_>,
        views: &[&[f32]],
    ) -> Result<(), Inconsistent> {
        let a = &self.analyzer;
        let mut fields: [Vec<String>; FIELDS] = Default::default();
        fields[KEY] = a.terms(doc.key);
        fields[WHAT] = a.terms(doc.what);
        fields[DOC] = a.terms(doc.doc);
        fields[CATEGORY] = a.terms(doc.category);
        for (name, description) in &doc.args {
            a.analyze(name, |t, _| fields[ARGS].push(t.to_string()));
            a.analyze(description, |t, _| fields[ARGS].push(t.to_string()));
        }
        let mut pins: Vec<Pin> = Vec::new();
        for phrase in doc.pins {
            let mut terms = a.terms(phrase);
            terms.sort_unstable();
            terms.dedup();
            let pin = Pin {
                terms: terms.into_iter().map(String::into_boxed_str).collect(),
                raw: a.raw_words(phrase).into_boxed_str(),
            };
            if !pin.raw.is_empty() && !pins.contains(&pin) {
                pins.push(pin);
            }
        }
        let indexed = self.index.insert(doc.key, &fields, doc.demote, pins);
        if let Some(slot) = self.index.slot(doc.key) {
            if !self.vectors.set(slot, views) {
                self.vectors.clear(slot);
            }
        }
        indexed
    }

    /// Sets the vectors of the row `key`'s views (a row embedded after it was inserted).
    /// Returns false if there is no such row, no view, or a vector's length differs from
    /// the others'.
    pub fn set_views(&mut self, key: &str, views: &[&[f32]]) -> bool {
        match self.index.slot(key) {
            Some(slot) => self.vectors.set(slot, views),
            None => false,
        }
    }

    /// Sets the vector of a row seen from one side (see [`Resolver::set_views`]).
    pub fn set_vector(&mut self, key: &str, vector: &[f32]) -> bool {
        self.set_views(key, &[vector])
    }

    /// Whether row `key` has a vector.
    pub fn has_vector(&self, key: &str) -> bool {
        self.index
            .slot(key)
            .is_some_and(|slot| self.vectors.has(slot))
    }

    /// Rows that have a vector.
    pub fn embedded(&self) -> usize {
        self.vectors.len()
    }

    /// The fusion weights.
    pub fn fusion(&self) -> Fusion {
        self.fusion
    }

    /// Replaces the fusion weights.
    pub fn set_fusion(&mut self, fusion: Fusion) {
        self.fusion = fusion;
    }

    /// Removes the row with `key`, if present (`Err` as for [`Resolver::insert_embedded`]).
    pub fn remove(&mut self, key: &str) -> Result<(), Inconsistent> {
        if let Some(slot) = self.index.slot(key) {
            self.vectors.clear(slot);
        }
        self.index.remove(key)
    }

    /// Ranked keys for `query`, best first: at most `limit`, weak tail cut, never padded.
    pub fn search(&self, query: &str, limit: usize) -> Vec<Hit> {
        self.search_with(query, None, limit)
    }

    /// As [`Resolver::search`], fusing in the cosine of `vector` (the query's embedding)
    /// with each row's vector when both exist; see [`Fusion`].
    pub fn search_with(&self, query: &str, vector: Option<&[f32]>, limit: usize) -> Vec<Hit> {
        self.search_fused(query, vector, limit, &self.fusion)
    }

    /// As [`Resolver::search_with`], with other fusion weights (e.g. [`Fusion::dense_only`]).
    pub fn search_fused(
        &self,
        query: &str,
        vector: Option<&[f32]>,
        limit: usize,
        fusion: &Fusion,
    ) -> Vec<Hit> {
        self.search_scored(query, vector, limit, fusion, Scoring::Auto)
    }

    /// [`Resolver::search`] scoring every row that shares a word with the query: the
    /// reference the pruned search must equal, for tests and benchmarks.
    pub fn search_exhaustive(&self, query: &str, limit: usize) -> Vec<Hit> {
        self.search_scored(query, None, limit, &self.fusion, Scoring::Exhaustive)
    }

    /// Whether scoring every posting of `positions` costs less than the pruned top k: few
    /// postings, or a long question over a catalogue of moderate size.
    fn exhaustive_is_cheaper(&self, positions: &[Vec<(u32, f32)>]) -> bool {
        let postings = self.index.postings(positions);
        let lists: usize = positions.iter().map(Vec::len).sum();
        postings < PRUNE_FROM || (lists >= MANY_LISTS && postings < LONG_QUESTION_UP_TO)
    }

    fn search_scored(
        &self,
        query: &str,
        vector: Option<&[f32]>,
        limit: usize,
        fusion: &Fusion,
        scoring: Scoring,
    ) -> Vec<Hit> {
        if limit == 0 || self.index.len() == 0 {
            return Vec::new();
        }
        let lexical = self.lexical(query);
        let vector = vector.filter(|_| self.vectors.len() > 0);
        if lexical.terms.is_empty() && lexical.pinned.is_empty() && vector.is_none() {
            return Vec::new();
        }
        let taught = self.learned_boosts(&lexical.terms, &lexical.surfaces);
        let scoring = match scoring {
            Scoring::Auto if self.exhaustive_is_cheaper(&lexical.positions) => Scoring::Exhaustive,
            Scoring::Auto => Scoring::Pruned,
            chosen => chosen,
        };
        let mut scored = match (vector, scoring) {
            // Words alone rank: only the `limit` best can show, beside the pinned rows and
            // the rows with learned words, whose final scores do not follow their lexical
            // order. Every other row is below `limit` rows at least as good, or under the
            // cut-off below, which the best row found so far already sets a floor for.
            (None, Scoring::Pruned) => {
                let keep: Vec<u32> = lexical
                    .pinned
                    .iter()
                    .copied()
                    .chain(taught.iter().map(|t| t.0))
                    .collect();
                self.index
                    .top(&lexical.positions, limit, DEMOTE_FACTOR, CUT_OFF, &keep)
            }
            // Fused, every lexical match may rise by its cosine (until the dense half has an
            // index whose bounds can prune the lexical one).
            _ => self.index.score(&lexical.positions),
        };
        for s in &mut scored {
            if self.index.demoted(s.slot) {
                s.score *= DEMOTE_FACTOR;
            }
        }
        let best_lexical = scored.iter().map(|s| s.score).fold(0.0f32, f32::max);
        // (slot, score, matched-positions mask, found by meaning alone)
        let mut ranked: Vec<(u32, f32, u64, bool)> = match vector {
            None => {
                scored.retain(|s| {
                    s.score >= CUT_OFF * best_lexical || lexical.pinned.contains(&s.slot)
                });
                scored
                    .iter()
                    .map(|s| (s.slot, s.score, s.mask, false))
                    .collect()
            }
            Some(v) => self.fuse(&scored, best_lexical, v, &lexical.pinned, limit, fusion),
        };
        let mut learned_words: HashMap<u32, Vec<String>> = HashMap::new();
        if !taught.is_empty() {
            let scale = ranked.iter().map(|r| r.1).fold(0.0f32, f32::max).max(1e-6);
            for (slot, boost, words) in taught {
                match ranked.iter_mut().find(|r| r.0 == slot) {
                    Some(r) => r.1 += scale * boost,
                    None => ranked.push((slot, scale * boost, 0, false)),
                }
                learned_words.insert(slot, words);
            }
        }
        let best = ranked.iter().map(|r| r.1).fold(0.0f32, f32::max);

        // Pinned rows go first, in their own score order, lifted above every other score.
        let mut hits: Vec<(bool, f32, u32, u64, bool)> = ranked
            .drain(..)
            .map(|(slot, score, mask, similar)| {
                (lexical.pinned.contains(&slot), score, slot, mask, similar)
            })
            .collect();
        for &slot in &lexical.pinned {
            if !hits.iter().any(|h| h.2 == slot) {
                hits.push((true, 0.0, slot, 0, false));
            }
        }
        // Pinned first, then by score, ties by key: a total order (keys are unique), so
        // selecting the first `limit` and sorting only those gives what sorting everything
        // would. A common word can leave thousands of rows above the cut-off, and comparing
        // their keys on ties was most of a full sort's cost.
        let order = |a: &(bool, f32, u32, u64, bool), b: &(bool, f32, u32, u64, bool)| {
            b.0.cmp(&a.0)
                .then(b.1.total_cmp(&a.1))
                .then_with(|| self.index.key(a.2).cmp(&self.index.key(b.2)))
        };
        if hits.len() > limit {
            hits.select_nth_unstable_by(limit - 1, order);
            hits.truncate(limit);
        }
        hits.sort_by(order);
        hits.into_iter()
            .filter_map(|(is_pinned, score, slot, mask, similar)| {
                // Every scored slot holds a row; one that does not is left out.
                let key = self.index.key(slot)?.clone();
                let words = lexical
                    .covers
                    .iter()
                    .enumerate()
                    .filter(|&(p, _)| mask & (1u64 << p) != 0)
                    .fold(0u64, |acc, (_, &c)| acc | c);
                let matched: Vec<String> = lexical
                    .surfaces
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| words & (1u64 << i) != 0 || (is_pinned && mask == 0))
                    .map(|(_, s)| s.clone())
                    .take(MAX_MATCHED)
                    .collect();
                let score = if is_pinned {
                    best + score + f32::EPSILON
                } else {
                    score
                };
                let learned = learned_words.remove(&slot).unwrap_or_default();
                Some(Hit {
                    key,
                    score,
                    similar: similar && matched.is_empty() && learned.is_empty(),
                    matched,
                    learned,
                })
            })
            .collect()
    }

    /// Rows whose learned words the query holds: (slot, boost as a share of the best
    /// score, the words). A word's clicks count as `ln(1 + clicks)`, saturating at
    /// [`LEARNED_SATURATION`] clicks; the sum over the query's words is capped at
    /// [`LEARNED_CAP`], so use can reorder close candidates and surface a row for words its
    /// docstring lacks, but never bury a clear match.
    fn learned_boosts(
        &self,
        terms: &[String],
        surfaces: &[String],
    ) -> Vec<(u32, f32, Vec<String>)> {
        if self.learned.is_empty() {
            return Vec::new();
        }
        let full = (1.0 + LEARNED_SATURATION).ln();
        let mut by_slot: HashMap<u32, (f32, Vec<String>)> = HashMap::new();
        for (term, surface) in terms.iter().zip(surfaces) {
            let Some(rows) = self.learned.get(term) else {
                continue;
            };
            for (key, &clicks) in rows {
                let Some(slot) = self.index.slot(key) else {
                    continue;
                };
                let entry = by_slot.entry(slot).or_default();
                entry.0 += ((1.0 + clicks as f32).ln() / full).min(1.0);
                if entry.1.len() < MAX_MATCHED {
                    entry.1.push(surface.clone());
                }
            }
        }
        let per_word = LEARNED_CAP / 2.0;
        let mut out: Vec<(u32, f32, Vec<String>)> = by_slot
            .into_iter()
            .map(|(slot, (weight, words))| (slot, (weight * per_word).min(LEARNED_CAP), words))
            .collect();
        out.sort_by_key(|r| r.0);
        out
    }

    /// Learns (`delta` 1) or forgets (-1) that an ask with `words` led to an invocation of
    /// row `key`. Every node applies the same receipts in the same order, so every node
    /// learns the same words.
    pub fn learn(&mut self, key: &str, words: &str, delta: i32) {
        let mut terms = self.analyzer.terms(words);
        terms.sort_unstable();
        terms.dedup();
        let key: Arc<str> = Arc::from(key);
        for term in terms {
            let rows = self.learned.entry(term.clone()).or_default();
            let clicks = rows.entry(key.clone()).or_default();
            *clicks = clicks.saturating_add_signed(delta);
            if *clicks == 0 {
                rows.remove(&key);
                if rows.is_empty() {
                    self.learned.remove(&term);
                }
            }
        }
    }

    /// Forgets every learned word.
    pub fn forget_learned(&mut self) {
        self.learned.clear();
    }

    /// The lexical half: analysed query, pinned rows, and the query positions to score.
    fn lexical(&self, query: &str) -> Lexical {
        let mut terms: Vec<String> = Vec::new();
        let mut surfaces: Vec<String> = Vec::new();
        self.analyzer.analyze(query, |t, s| {
            if terms.len() < MAX_QUERY_TERMS && !terms.iter().any(|x| x == t) {
                terms.push(t.to_string());
                surfaces.push(s.to_string());
            }
        });
        let raw = self.analyzer.raw_words(query);
        let pinned = self.index.pinned(&terms, &raw);
        if terms.is_empty() {
            return Lexical {
                terms,
                surfaces,
                covers: Vec::new(),
                pinned,
                positions: Vec::new(),
            };
        }

        // Each query position: the exact term if indexed, else typo and prefix matches;
        // plus synonyms of the typed word. `covers[p]` is the set of typed words (bits) that
        // position p stands for, to report them in `Hit::matched`.
        let mut positions: Vec<Vec<(u32, f32)>> = terms
            .iter()
            .zip(&surfaces)
            .map(|(t, s)| match self.index.lookup(t) {
                Some(id) => vec![(id, 1.0)],
                None => self.index.tolerant(t, s),
            })
            .collect();
        let mut covers: Vec<u64> = (0..terms.len()).map(|i| 1u64 << i).collect();
        for (pos, alt) in self.synonyms.expand(&terms) {
            if terms.contains(&alt) {
                continue; // typed as well: its own position counts it at full weight
            }
            if let Some(id) = self.index.lookup(&alt) {
                if !positions[pos].iter().any(|a| a.0 == id) {
                    positions[pos].push((id, SYNONYM_WEIGHT));
                }
            }
        }
        self.add_compounds(&terms, &surfaces, &mut positions, &mut covers);
        Lexical {
            terms,
            surfaces,
            covers,
            pinned,
            positions,
        }
    }

    /// Weighted sum of the lexical score and the cosine, each divided by the query's best,
    /// over the rows either half found: every lexical match and the closest rows by
    /// meaning. A row found by meaning alone needs a cosine of at least [`Fusion::floor`].
    fn fuse(
        &self,
        scored: &[Scored],
        best_lexical: f32,
        vector: &[f32],
        pinned: &[u32],
        limit: usize,
        f: &Fusion,
    ) -> Vec<(u32, f32, u64, bool)> {
        let cosines = self.vectors.cosines(vector);
        // Both halves count as a share of the query's best: a model's cosines sit in a
        // narrow band that moves with the query, words' scores have no scale at all.
        let best_cosine = cosines.iter().copied().fold(0.0f32, f32::max);
        let dense_share = |c: f32| {
            if best_cosine > 0.0 {
                c / best_cosine
            } else {
                0.0
            }
        };
        let cosine = |slot: u32| dense_share(cosines.get(slot as usize).copied().unwrap_or(0.0));
        let demote = |slot: u32| {
            if self.index.demoted(slot) {
                DEMOTE_FACTOR
            } else {
                1.0
            }
        };
        let (mut first, mut second) = (0.0f32, 0.0f32);
        for s in scored {
            if s.score > first {
                (first, second) = (s.score, first);
            } else if s.score > second {
                second = s.score;
            }
        }
        let margin = if first > 0.0 {
            (first - second) / first
        } else {
            0.0
        };
        let w_lex = (f.lexical + f.margin * margin).min(1.0);
        let w_dense = f.dense * (1.0 - w_lex) / (1.0 - f.lexical).max(f32::EPSILON);
        let lexical_share = |score: f32| {
            if best_lexical > 0.0 {
                score / best_lexical
            } else {
                0.0
            }
        };
        let mut out: Vec<(u32, f32, u64, bool)> = scored
            .iter()
            .map(|s| {
                // A row not embedded yet counts as lexical-only, scaled to the same range.
                let dense = if self.vectors.has(s.slot) {
                    cosine(s.slot)
                } else {
                    lexical_share(s.score)
                };
                let fused = w_lex * lexical_share(s.score) + w_dense * dense * demote(s.slot);
                (s.slot, fused, s.mask, false)
            })
            .collect();
        let mut seen: std::collections::HashSet<u32> = scored.iter().map(|s| s.slot).collect();
        let mut nearest: Vec<(u32, f32)> = cosines
            .iter()
            .enumerate()
            .filter(|&(slot, &c)| c >= f.floor && self.vectors.has(slot as u32))
            .map(|(slot, &c)| (slot as u32, c))
            .collect();
        let depth = f.depth.max(limit);
        if nearest.len() > depth {
            // Ties broken by key, not slot: slots depend on each node's history.
            nearest.select_nth_unstable_by(depth, |a, b| {
                b.1.total_cmp(&a.1)
                    .then_with(|| self.index.key(a.0).cmp(&self.index.key(b.0)))
            });
            nearest.truncate(depth);
        }
        for (slot, c) in nearest {
            if seen.insert(slot) {
                out.push((slot, w_dense * dense_share(c) * demote(slot), 0, true));
            }
        }
        let best = out.iter().map(|r| r.1).fold(0.0f32, f32::max);
        out.retain(|r| r.1 >= f.cut_off * best || pinned.contains(&r.0));
        out
    }

    /// Bridges compounds written differently in the query and the rows. Two adjacent typed
    /// words that form an indexed term ("copy editing" -> `copyediting`, "CAD preview" ->
    /// a key part `cadpreview`) add a position for that term; an unknown word that splits
    /// into two indexed terms ("copyediting" -> copy + editing) matches both halves.
    fn add_compounds(
        &self,
        terms: &[String],
        surfaces: &[String],
        positions: &mut Vec<Vec<(u32, f32)>>,
        covers: &mut Vec<u64>,
    ) {
        let single = |text: &str| {
            let t = self.analyzer.terms(text);
            if t.len() == 1 {
                self.index.lookup(&t[0])
            } else {
                None
            }
        };
        let plain = |s: &str| {
            s.chars()
                .all(|c| c.is_alphanumeric() && !tokenize::is_cjk(c))
        };
        for i in 0..surfaces.len().saturating_sub(1) {
            if positions.len() >= MAX_QUERY_TERMS {
                return;
            }
            let (a, b) = (&surfaces[i], &surfaces[i + 1]);
            if !plain(a) || !plain(b) {
                continue;
            }
            if let Some(id) = single(&format!("{a}{b}")) {
                positions.push(vec![(id, 1.0)]);
                covers.push(0b11 << i);
            }
        }
        for (i, (t, s)) in terms.iter().zip(surfaces).enumerate() {
            let chars: Vec<(usize, char)> = s.char_indices().collect();
            if self.index.lookup(t).is_some()
                || !(2 * MIN_COMPOUND_PART..=MAX_COMPOUND_LEN).contains(&chars.len())
                || !plain(s)
            {
                continue;
            }
            // The most balanced split whose halves are both indexed.
            let mut best: Option<(usize, u32, u32)> = None;
            for k in MIN_COMPOUND_PART..=chars.len() - MIN_COMPOUND_PART {
                let at = chars[k].0;
                let balance = k.min(chars.len() - k);
                if best.is_some_and(|b| b.0 >= balance) {
                    continue;
                }
                if let (Some(l), Some(r)) = (single(&s[..at]), single(&s[at..])) {
                    best = Some((balance, l, r));
                }
            }
            if let Some((_, l, r)) = best {
                if positions.len() < MAX_QUERY_TERMS {
                    positions[i].push((l, COMPOUND_PART_WEIGHT));
                    positions.push(vec![(r, COMPOUND_PART_WEIGHT)]);
                    covers.push(1u64 << i);
                }
            }
        }
    }

    /// Replaces the operator's synonym groups; the built-in groups stay.
    pub fn set_synonyms(&mut self, groups: &[Vec<String>]) {
        self.synonyms.set_operator(&self.analyzer, groups);
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.len() == 0
    }

    /// Estimated heap bytes held by the index and synonym tables.
    pub fn memory_bytes(&self) -> usize {
        self.index.memory_bytes() + self.synonyms.memory_bytes() + self.vectors.memory_bytes()
    }
}

/// Docstring fields recognised in `# FIELD: value` lines.
const DOC_FIELDS: &[&str] = &[
    "WHAT", "ARGS", "RETURNS", "EXAMPLE", "AUTH", "RISK", "ERRORS", "SEE",
];

/// Splits a row's leading `# FIELD: value` lines into the WHAT value and the other values
/// joined by '\n'. The first line that is not such a line ends the docstring.
pub fn parse_docstring(content: &str) -> (String, String) {
    let mut what = String::new();
    let mut doc: Vec<&str> = Vec::new();
    for line in content.lines() {
        let Some(rest) = line.trim_start().strip_prefix('#') else {
            break;
        };
        let Some((field, value)) = rest.split_once(':') else {
            break;
        };
        let field = field.trim();
        if !DOC_FIELDS.iter().any(|f| f.eq_ignore_ascii_case(field)) {
            break;
        }
        let value = value.trim();
        if field.eq_ignore_ascii_case("WHAT") {
            if !what.is_empty() {
                what.push(' ');
            }
            what.push_str(value);
        } else {
            doc.push(value);
        }
    }
    (what, doc.join("\n"))
}
