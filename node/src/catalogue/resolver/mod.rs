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
mod fuzzy;
mod index;
mod synonyms;
mod tokenize;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use index::{Index, Pin, ARGS, CATEGORY, DOC, FIELDS, KEY, WHAT};
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
/// Query positions considered (the scorer keeps a 64-bit mask of matched positions).
const MAX_QUERY_TERMS: usize = 64;
/// Surface words reported per hit in `Hit::matched`.
const MAX_MATCHED: usize = 4;

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
}

/// The search index. Updates are incremental; `search` takes `&self`, so readers can share it
/// behind a `RwLock`.
#[derive(Default)]
pub struct Resolver {
    analyzer: Analyzer,
    synonyms: Synonyms,
    index: Index,
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

    /// Inserts the row, or replaces the row with the same key.
    pub fn insert(&mut self, doc: &Document<'_>) {
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
        self.index.insert(doc.key, &fields, doc.demote, pins);
    }

    /// Removes the row with `key`, if present.
    pub fn remove(&mut self, key: &str) {
        self.index.remove(key);
    }

    /// Ranked keys for `query`, best first: at most `limit`, weak tail cut, never padded.
    pub fn search(&self, query: &str, limit: usize) -> Vec<Hit> {
        if limit == 0 || self.index.len() == 0 {
            return Vec::new();
        }
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
        if terms.is_empty() && pinned.is_empty() {
            return Vec::new();
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

        let mut scored = self.index.score(&positions);
        for s in &mut scored {
            if self.index.demoted(s.slot) {
                s.score *= DEMOTE_FACTOR;
            }
        }
        let best = scored.iter().map(|s| s.score).fold(0.0f32, f32::max);
        scored.retain(|s| s.score >= CUT_OFF * best || pinned.contains(&s.slot));

        // Pinned rows go first, in their own score order, lifted above every other score.
        let mut hits: Vec<(bool, f32, u32, u64)> = scored
            .iter()
            .map(|s| (pinned.contains(&s.slot), s.score, s.slot, s.mask))
            .collect();
        for &slot in &pinned {
            if !hits.iter().any(|h| h.2 == slot) {
                hits.push((true, 0.0, slot, 0));
            }
        }
        hits.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then(b.1.total_cmp(&a.1))
                .then_with(|| self.index.key(a.2).cmp(self.index.key(b.2)))
        });
        hits.truncate(limit);
        hits.into_iter()
            .map(|(is_pinned, score, slot, mask)| {
                let words = covers
                    .iter()
                    .enumerate()
                    .filter(|&(p, _)| mask & (1u64 << p) != 0)
                    .fold(0u64, |acc, (_, &c)| acc | c);
                let matched: Vec<String> = surfaces
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
                Hit {
                    key: self.index.key(slot).clone(),
                    score,
                    matched,
                }
            })
            .collect()
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
        self.index.memory_bytes() + self.synonyms.memory_bytes()
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
