//! Comparison scorers for benchmarks and tests: textbook BM25 and the seed's substring scorer.
//! Neither is used to answer `ask`.

use std::collections::HashMap;

use super::parse_docstring;

/// Lowercase alphanumeric runs: `GET_USER_INFO` -> get, user, info.
fn plain_tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
}

/// Best-first by score, then by key for a stable order.
fn rank(mut scored: Vec<(String, f32)>, limit: usize) -> Vec<(String, f32)> {
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    scored.truncate(limit);
    scored
}

/// BM25 with k1 = 1.2 and b = 0.75 over one bag of words per row (key parts, category and the
/// whole content): no stemming, no stop words, no field weights.
#[derive(Debug)]
pub struct PlainBm25 {
    keys: Vec<String>,
    lens: Vec<u32>,
    avg_len: f32,
    postings: HashMap<String, Vec<(u32, u32)>>,
}

impl PlainBm25 {
    /// Builds from `(key, category, content)` rows.
    pub fn build(rows: &[(String, String, String)]) -> Self {
        let mut postings: HashMap<String, Vec<(u32, u32)>> = HashMap::new();
        let mut lens = Vec::with_capacity(rows.len());
        let mut keys = Vec::with_capacity(rows.len());
        for (i, (key, category, content)) in rows.iter().enumerate() {
            let mut tf: HashMap<String, u32> = HashMap::new();
            let mut len = 0;
            for t in plain_tokens(key)
                .chain(plain_tokens(category))
                .chain(plain_tokens(content))
            {
                *tf.entry(t).or_default() += 1;
                len += 1;
            }
            for (t, n) in tf {
                postings.entry(t).or_default().push((i as u32, n));
            }
            lens.push(len);
            keys.push(key.clone());
        }
        let avg_len = lens.iter().map(|&l| l as f32).sum::<f32>() / rows.len().max(1) as f32;
        Self {
            keys,
            lens,
            avg_len,
            postings,
        }
    }

    pub fn search(&self, q: &str, limit: usize) -> Vec<(String, f32)> {
        const K1: f32 = 1.2;
        const B: f32 = 0.75;
        let n = self.keys.len() as f32;
        let mut acc: HashMap<u32, f32> = HashMap::new();
        let mut seen = Vec::new();
        for t in plain_tokens(q) {
            if seen.contains(&t) {
                continue;
            }
            let Some(list) = self.postings.get(&t) else {
                continue;
            };
            let df = list.len() as f32;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(d, tf) in list {
                let tf = tf as f32;
                let norm = 1.0 - B + B * self.lens[d as usize] as f32 / self.avg_len;
                *acc.entry(d).or_default() += idf * tf * (K1 + 1.0) / (tf + K1 * norm);
            }
            seen.push(t);
        }
        rank(
            acc.into_iter()
                .map(|(d, s)| (self.keys[d as usize].clone(), s))
                .collect(),
            limit,
        )
    }
}

/// The seed's scorer: per query term (lowercased, split on whitespace) +3 when it is a
/// substring of the key and +1 when it is a substring of the key, category or docstring.
#[derive(Debug)]
pub struct SubstringScorer {
    /// (key, lowercase key, lowercase category, lowercase docstring)
    rows: Vec<(String, String, String, String)>,
}

impl SubstringScorer {
    pub fn build(rows: &[(String, String, String)]) -> Self {
        let rows = rows
            .iter()
            .map(|(key, category, content)| {
                let (what, doc) = parse_docstring(content);
                (
                    key.clone(),
                    key.to_lowercase(),
                    category.to_lowercase(),
                    format!("{what}\n{doc}").to_lowercase(),
                )
            })
            .collect();
        Self { rows }
    }

    pub fn search(&self, q: &str, limit: usize) -> Vec<(String, f32)> {
        let terms: Vec<String> = q.split_whitespace().map(str::to_lowercase).collect();
        let mut scored = Vec::new();
        for (key, lkey, cat, doc) in &self.rows {
            let mut s = 0.0;
            for t in &terms {
                if lkey.contains(t.as_str()) {
                    s += 3.0;
                }
                if lkey.contains(t.as_str()) || cat.contains(t.as_str()) || doc.contains(t.as_str())
                {
                    s += 1.0;
                }
            }
            if s > 0.0 {
                scored.push((key.clone(), s));
            }
        }
        rank(scored, limit)
    }
}
