//! Ranking quality of a resolver against a query set with known answers: top-1 accuracy,
//! recall@5 and mean reciprocal rank, plus the misses that explain the numbers.

use serde::Deserialize;

/// Depth of the recall figure.
pub const RECALL_DEPTH: usize = 5;

/// One line of a query file: `{"q": "...", "gold": ["KEY", ...]}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct GoldQuery {
    /// The plain-language request.
    pub q: String,
    /// The keys that answer it correctly (any of them counts as a hit at top-1).
    pub gold: Vec<String>,
}

/// A query file line that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {source}")]
pub struct QueryLineError {
    /// 1-based line number.
    pub line: usize,
    /// What was wrong with it.
    #[source]
    pub source: serde_json::Error,
}

/// Reads JSON lines of [`GoldQuery`]; blank lines are skipped.
pub fn parse_queries(text: &str) -> Result<Vec<GoldQuery>, QueryLineError> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            serde_json::from_str(line).map_err(|source| QueryLineError {
                line: i + 1,
                source,
            })
        })
        .collect()
}

/// 1-based rank of the first gold key within the first `depth` answers.
pub fn first_gold_rank(gold: &[String], ranked: &[String], depth: usize) -> Option<usize> {
    ranked
        .iter()
        .take(depth)
        .position(|key| gold.contains(key))
        .map(|i| i + 1)
}

/// Share of the gold keys found within the first `depth` answers (0 for an empty gold set).
pub fn recall_at(gold: &[String], ranked: &[String], depth: usize) -> f64 {
    if gold.is_empty() {
        return 0.0;
    }
    let found = gold
        .iter()
        .filter(|g| ranked.iter().take(depth).any(|k| k == *g))
        .count();
    found as f64 / gold.len() as f64
}

/// A query whose first answer was not a gold key.
#[derive(Debug, Clone, PartialEq)]
pub struct Miss {
    /// The request.
    pub q: String,
    /// The keys that were wanted.
    pub gold: Vec<String>,
    /// What came first instead (None: no answer at all).
    pub first: Option<String>,
    /// Where the first gold key came, if within the depth.
    pub gold_rank: Option<usize>,
}

/// Accumulates answers to queries; [`Scorecard::summary`] gives the averages.
#[derive(Debug, Clone)]
pub struct Scorecard {
    depth: usize,
    queries: usize,
    top1: usize,
    recall: f64,
    reciprocal: f64,
    misses: Vec<Miss>,
}

/// The averages over a query set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quality {
    /// Queries scored.
    pub queries: usize,
    /// Share of queries whose first answer is a gold key.
    pub top1: f64,
    /// Mean share of gold keys within the first five answers.
    pub recall_at_5: f64,
    /// Mean of 1/rank of the first gold key within `depth` answers (0 when absent).
    pub mrr: f64,
    /// The depth MRR was computed to.
    pub depth: usize,
}

impl Scorecard {
    /// A scorecard counting reciprocal ranks to `depth` (e.g. 10 for MRR@10).
    pub fn new(depth: usize) -> Self {
        Self {
            depth,
            queries: 0,
            top1: 0,
            recall: 0.0,
            reciprocal: 0.0,
            misses: Vec::new(),
        }
    }

    /// Scores one query's ranked answer keys, best first.
    pub fn add(&mut self, query: &GoldQuery, ranked: &[String]) {
        self.queries += 1;
        self.recall += recall_at(&query.gold, ranked, RECALL_DEPTH);
        let rank = first_gold_rank(&query.gold, ranked, self.depth);
        if let Some(rank) = rank {
            self.reciprocal += 1.0 / rank as f64;
        }
        if rank == Some(1) {
            self.top1 += 1;
        } else {
            self.misses.push(Miss {
                q: query.q.clone(),
                gold: query.gold.clone(),
                first: ranked.first().cloned(),
                gold_rank: rank,
            });
        }
    }

    /// The averages so far (all zero before the first query).
    pub fn summary(&self) -> Quality {
        let n = self.queries.max(1) as f64;
        Quality {
            queries: self.queries,
            top1: self.top1 as f64 / n,
            recall_at_5: self.recall / n,
            mrr: self.reciprocal / n,
            depth: self.depth,
        }
    }

    /// The queries whose first answer was wrong, in the order they were added.
    pub fn misses(&self) -> &[Miss] {
        &self.misses
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(gold: &[&str]) -> GoldQuery {
        GoldQuery {
            q: "a request".into(),
            gold: gold.iter().map(|g| g.to_string()).collect(),
        }
    }

    fn keys(ks: &[&str]) -> Vec<String> {
        ks.iter().map(|k| k.to_string()).collect()
    }

    #[test]
    fn perfect_answers_score_one() {
        let mut card = Scorecard::new(10);
        card.add(&q(&["A"]), &keys(&["A", "B"]));
        card.add(&q(&["C"]), &keys(&["C"]));
        let s = card.summary();
        assert_eq!(
            (s.queries, s.top1, s.recall_at_5, s.mrr),
            (2, 1.0, 1.0, 1.0)
        );
        assert!(card.misses().is_empty());
    }

    #[test]
    fn ranks_recall_and_misses_are_computed_per_query() {
        let mut card = Scorecard::new(10);
        // gold second: top-1 miss, recall 1, RR 1/2
        card.add(&q(&["A"]), &keys(&["B", "A"]));
        // gold sixth: outside recall@5, RR 1/6
        card.add(&q(&["A"]), &keys(&["B", "C", "D", "E", "F", "A"]));
        // nothing answered
        card.add(&q(&["A"]), &[]);
        // two gold keys, one found at rank 1: top-1 hit, recall 1/2, RR 1
        card.add(&q(&["A", "Z"]), &keys(&["A", "B"]));
        let s = card.summary();
        assert_eq!(s.queries, 4);
        assert!((s.top1 - 0.25).abs() < 1e-12);
        assert!((s.recall_at_5 - (1.0 + 0.0 + 0.0 + 0.5) / 4.0).abs() < 1e-12);
        assert!((s.mrr - (0.5 + 1.0 / 6.0 + 0.0 + 1.0) / 4.0).abs() < 1e-12);
        let misses = card.misses();
        assert_eq!(misses.len(), 3);
        assert_eq!(misses[0].first.as_deref(), Some("B"));
        assert_eq!(misses[0].gold_rank, Some(2));
        assert_eq!(misses[1].gold_rank, Some(6));
        assert_eq!(misses[2].first, None);
        assert_eq!(misses[2].gold_rank, None);
    }

    #[test]
    fn reciprocal_rank_stops_at_the_depth() {
        let mut card = Scorecard::new(3);
        card.add(&q(&["A"]), &keys(&["B", "C", "D", "A"]));
        assert_eq!(card.summary().mrr, 0.0);
        assert_eq!(card.misses()[0].gold_rank, None);
    }

    #[test]
    fn empty_scorecard_and_empty_gold_are_zero() {
        let card = Scorecard::new(10);
        assert_eq!(card.summary().top1, 0.0);
        assert_eq!(recall_at(&[], &keys(&["A"]), 5), 0.0);
    }

    #[test]
    fn query_files_are_read_line_by_line() {
        let text =
            "{\"q\": \"what time\", \"gold\": [\"TIME_NOW\"]}\n\n{\"q\": \"x\", \"gold\": []}\n";
        let queries = parse_queries(text).unwrap();
        assert_eq!(queries.len(), 2);
        assert_eq!(queries[0].gold, ["TIME_NOW"]);
        let err = parse_queries("{\"q\": \"ok\", \"gold\": []}\n{\"q\": 1}\n").unwrap_err();
        assert_eq!(err.line, 2);
    }
}
