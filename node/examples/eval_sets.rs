//! The resolver's quality on query sets, in process (the README's quality table):
//!
//! ```sh
//! cargo run --release -p rowcall-node --example eval_sets -- \
//!     --model ./models/all-minilm-l6-v2 [--weights f32|q8] [--static] [--cache DIR] SET_DIR...
//! ```
//!
//! A set folder holds `rows.jsonl` (`POST /api/directory` bodies) and `queries.jsonl`
//! (`{"q", "gold"}`), as `tests/eval/make_sets.py` writes them. For each set it prints top-1,
//! recall@5 and MRR@10 of the lexical, dense and fused rankings (and fused with static query
//! vectors with `--static`), then what learning from use adds: the even-numbered requests
//! are asked and, when a right row is among their first five candidates, that row is
//! learned as invoked after the ask (a click, as a receipt carrying the ask teaches every
//! node); the odd-numbered requests are then measured with learning off and on.
//!
//! Row vectors take the model a few milliseconds a row; `--cache DIR` keeps them (and the
//! query vectors) per set and model fingerprint for the next run.

use std::path::{Path, PathBuf};

use rowcall_client::quality::{parse_queries, GoldQuery, Quality, Scorecard};
use rowcall_node::catalogue::embed::{Embedder, QueryMode, Weights};
use rowcall_node::catalogue::resolver::Fusion;
use rowcall_node::catalogue::row::{Row, RowInput};
use rowcall_node::catalogue::{embed_text, Catalogue};

/// Candidates asked for, as an agent would (MRR is computed to this depth).
const DEPTH: usize = 10;
/// A click needs a right row among this many candidates: the agent saw it.
const CLICK_DEPTH: usize = 5;

type Error = Box<dyn std::error::Error>;

struct Options {
    model: PathBuf,
    static_queries: bool,
    weights: Weights,
    cache: Option<PathBuf>,
    sets: Vec<PathBuf>,
}

fn options() -> Result<Options, Error> {
    let mut args = std::env::args().skip(1);
    let (mut model, mut static_queries, mut cache, mut sets) = (None, false, None, Vec::new());
    let mut weights = Weights::default();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--model" => model = args.next().map(PathBuf::from),
            "--cache" => cache = args.next().map(PathBuf::from),
            "--static" => static_queries = true,
            "--weights" => weights = args.next().ok_or("--weights f32|q8")?.parse()?,
            _ => sets.push(PathBuf::from(arg)),
        }
    }
    let model = model.ok_or("--model DIR is required")?;
    if sets.is_empty() {
        return Err("name at least one set folder".into());
    }
    Ok(Options {
        model,
        static_queries,
        weights,
        cache,
        sets,
    })
}

fn main() -> Result<(), Error> {
    let options = options()?;
    let mode = if options.static_queries {
        QueryMode::Static
    } else {
        QueryMode::Model
    };
    let embedder = Embedder::load_with(&options.model, mode, options.weights)?;
    let fingerprint = embedder.info().vectors_id();
    if let Some(dir) = &options.cache {
        std::fs::create_dir_all(dir)?;
    }
    for set in &options.sets {
        let name = set
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "set".into());
        let rows = read_rows(&set.join("rows.jsonl"))?;
        let queries = parse_queries(&std::fs::read_to_string(set.join("queries.jsonl"))?)?;
        let cached = |what: &str| {
            options
                .cache
                .as_ref()
                .map(|dir| dir.join(format!("{name}.{fingerprint}.{what}.json")))
        };
        let vectors = remembered(cached("rows"), || {
            let texts: Vec<String> = rows.iter().map(embed_text).collect();
            let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
            Ok(embedder.embed_documents(&texts)?)
        })?;
        let model_queries = remembered(cached("queries"), || {
            let mut times = Vec::with_capacity(queries.len());
            let vectors = queries
                .iter()
                .map(|q| {
                    let started = std::time::Instant::now();
                    let v = embedder.embed_query_with(&q.q, QueryMode::Model)?.to_vec();
                    times.push(started.elapsed());
                    Ok(v)
                })
                .collect::<Result<Vec<_>, Error>>()?;
            times.sort_unstable();
            let at = |p: f64| {
                times[((times.len() as f64 * p).ceil() as usize).clamp(1, times.len()) - 1]
            };
            println!(
                "query embedding ({} weights), one at a time: p50 {:.2} ms, p99 {:.2} ms",
                options.weights.as_str(),
                at(0.5).as_secs_f64() * 1e3,
                at(0.99).as_secs_f64() * 1e3
            );
            Ok(vectors)
        })?;
        let mut catalogue = Catalogue::default();
        for (row, vector) in rows.into_iter().zip(&vectors) {
            let key = row.key.clone();
            catalogue.put(row);
            catalogue.set_vector(&key, vector);
        }
        println!(
            "== {name}: {} rows, {} requests",
            catalogue.len(),
            queries.len()
        );
        let all = |_: usize| true;
        let lexical = score(&queries, all, |_, q| catalogue.ask(q, DEPTH));
        print("lexical", &lexical);
        let dense_only = Fusion::dense_only();
        let dense = score(&queries, all, |i, q| {
            catalogue.ask_fused(q, Some(&model_queries[i]), DEPTH, Some(&dense_only))
        });
        print("dense", &dense);
        let fused = score(&queries, all, |i, q| {
            catalogue.ask_with(q, Some(&model_queries[i]), DEPTH)
        });
        print("fused", &fused);
        if options.static_queries {
            let static_queries = queries
                .iter()
                .map(|q| Ok(embedder.embed_query_with(&q.q, QueryMode::Static)?.to_vec()))
                .collect::<Result<Vec<_>, Error>>()?;
            let fused_static = score(&queries, all, |i, q| {
                catalogue.ask_with(q, Some(&static_queries[i]), DEPTH)
            });
            print("fused, static queries", &fused_static);
        }
        learning(&mut catalogue, &queries, &model_queries);
    }
    Ok(())
}

/// Learning from use: clicks on the even half, measured on the odd half.
fn learning(catalogue: &mut Catalogue, queries: &[GoldQuery], vectors: &[Vec<f32>]) {
    let mut clicks = Vec::new();
    for (i, q) in queries.iter().enumerate().filter(|(i, _)| i % 2 == 0) {
        let candidates = catalogue.ask_with(&q.q, Some(&vectors[i]), CLICK_DEPTH);
        if let Some((hit, _)) = candidates
            .iter()
            .find(|(hit, _)| q.gold.iter().any(|g| **g == *hit.key))
        {
            clicks.push((hit.key.to_string(), q.q.clone()));
        }
    }
    let odd = |i: usize| i % 2 == 1;
    let ask =
        |catalogue: &Catalogue, i: usize, q: &str| catalogue.ask_with(q, Some(&vectors[i]), DEPTH);
    catalogue.set_learning(false);
    let before = score(queries, odd, |i, q| ask(catalogue, i, q));
    catalogue.set_learning(true);
    for (key, words) in &clicks {
        catalogue.learn(key, words, 1);
    }
    let after = score(queries, odd, |i, q| ask(catalogue, i, q));
    println!(
        "learning from use: {} clicks on the even half; on the odd half:",
        clicks.len()
    );
    print("  fused", &before);
    print("  fused, learned", &after);
}

/// Scores the requests `take` admits, ranked by `rank(index, request)`.
fn score<R>(
    queries: &[GoldQuery],
    take: impl Fn(usize) -> bool,
    rank: impl Fn(usize, &str) -> Vec<(R, std::sync::Arc<Row>)>,
) -> Quality {
    let mut card = Scorecard::new(DEPTH);
    for (i, q) in queries.iter().enumerate().filter(|(i, _)| take(*i)) {
        let ranked: Vec<String> = rank(i, &q.q)
            .into_iter()
            .map(|(_, row)| row.key.clone())
            .collect();
        card.add(q, &ranked);
    }
    card.summary()
}

fn print(label: &str, quality: &Quality) {
    println!(
        "{label:<24} top-1 {:.3}  recall@5 {:.3}  MRR@10 {:.3}",
        quality.top1, quality.recall_at_5, quality.mrr
    );
}

fn read_rows(path: &Path) -> Result<Vec<Row>, Error> {
    let at = "2026-01-01T00:00:00Z".to_owned();
    std::fs::read_to_string(path)?
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let input: RowInput = serde_json::from_str(line)?;
            Ok(Row::stored(input, 1, at.clone(), at.clone()))
        })
        .collect()
}

/// `compute`, or what an earlier run kept at `path`.
fn remembered(
    path: Option<PathBuf>,
    compute: impl FnOnce() -> Result<Vec<Vec<f32>>, Error>,
) -> Result<Vec<Vec<f32>>, Error> {
    if let Some(kept) = path
        .as_ref()
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
    {
        return Ok(kept);
    }
    let vectors = compute()?;
    if let Some(path) = path {
        std::fs::write(path, serde_json::to_vec(&vectors)?)?;
    }
    Ok(vectors)
}
