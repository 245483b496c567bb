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
use rowcall_node::catalogue::{embed_views, Catalogue};

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
    grid: bool,
    sets: Vec<PathBuf>,
}

fn options() -> Result<Options, Error> {
    let mut args = std::env::args().skip(1);
    let (mut model, mut static_queries, mut cache, mut sets) = (None, false, None, Vec::new());
    let mut grid = false;
    let mut weights = Weights::default();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--model" => model = args.next().map(PathBuf::from),
            "--cache" => cache = args.next().map(PathBuf::from),
            "--static" => static_queries = true,
            "--grid" => grid = true,
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
        grid,
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
    let mut grids = Vec::new();
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
        let views: Vec<Vec<String>> = rows.iter().map(embed_views).collect();
        let vectors = texts_remembered(cached("texts"), views.iter().flatten(), |texts| {
            Ok(embedder.embed_documents(texts)?)
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
        let view_count: usize = views.iter().map(Vec::len).sum();
        for (row, texts) in rows.into_iter().zip(&views) {
            let key = row.key.clone();
            catalogue.put(row);
            let row_views: Vec<&[f32]> = texts.iter().map(|t| vectors[t].as_slice()).collect();
            catalogue.set_views(&key, &row_views);
        }
        println!("views: {view_count}");
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
        if options.grid {
            grids.push((name, fusion_grid(&catalogue, &queries, &model_queries)));
        }
        learning(&mut catalogue, &queries, &model_queries);
    }
    if options.grid {
        leave_one_set_out(&grids);
    }
    Ok(())
}

/// Fusion weights tried by `--grid`: the lexical weight, the margin's shift and the floor
/// (the dense weight is the rest of the lexical one; the cut-off and depth do not move the
/// first candidate).
fn grid() -> Vec<Fusion> {
    let mut out = Vec::new();
    for lexical in [0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4] {
        for margin in [0.0, 0.2, 0.4, 0.6, 0.8, 1.0] {
            for floor in [0.15, 0.25, 0.35] {
                out.push(Fusion {
                    lexical,
                    dense: 1.0 - lexical,
                    margin,
                    floor,
                    ..Fusion::default()
                });
            }
        }
    }
    out
}

/// Top-1 of every weighting of [`grid`] on one set.
fn fusion_grid(catalogue: &Catalogue, queries: &[GoldQuery], vectors: &[Vec<f32>]) -> Vec<f64> {
    grid()
        .iter()
        .map(|fusion| {
            score(
                queries,
                |_| true,
                |i, q| catalogue.ask_fused(q, Some(&vectors[i]), DEPTH, Some(fusion)),
            )
            .top1
        })
        .collect()
}

/// For each set, the weighting best on average over the other sets, and what it scores on
/// the one left out: weights chosen without a set must still help on it.
fn leave_one_set_out(grids: &[(String, Vec<f64>)]) {
    let weightings = grid();
    let best_without = |left_out: Option<usize>| {
        (0..weightings.len())
            .map(|w| {
                let (sum, n) = grids
                    .iter()
                    .enumerate()
                    .filter(|(s, _)| Some(*s) != left_out)
                    .fold((0.0, 0), |(sum, n), (_, (_, g))| (sum + g[w], n + 1));
                (w, sum / f64::from(n.max(1)))
            })
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
            .map_or(0, |(w, _)| w)
    };
    let default = Fusion::default();
    let at_default = weightings.iter().position(|f| {
        f.lexical == default.lexical && f.margin == default.margin && f.floor == default.floor
    });
    println!("== every weighting: lexical, margin, floor, then top-1 per set");
    {
        for (w, f) in weightings.iter().enumerate() {
            let cells: Vec<String> = grids.iter().map(|(_, g)| format!("{:.3}", g[w])).collect();
            println!(
                "grid {:.2} {:.1} {:.2} {}",
                f.lexical,
                f.margin,
                f.floor,
                cells.join(" ")
            );
        }
    }
    println!("== leave one set out (top-1 fused)");
    for (s, (name, g)) in grids.iter().enumerate() {
        let w = best_without(Some(s));
        let f = &weightings[w];
        println!(
            "{name:<12} chosen without it: lexical {:.2} margin {:.1} floor {:.2} -> {:.3} (default {:.3})",
            f.lexical,
            f.margin,
            f.floor,
            g[w],
            at_default.map_or(f64::NAN, |d| g[d])
        );
    }
    let w = best_without(None);
    let f = &weightings[w];
    let mean = grids.iter().map(|(_, g)| g[w]).sum::<f64>() / grids.len().max(1) as f64;
    println!(
        "all sets: lexical {:.2} margin {:.1} floor {:.2} -> mean top-1 {mean:.4}",
        f.lexical, f.margin, f.floor
    );
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
            Ok(Row::stored(
                input,
                1,
                at.as_str().into(),
                at.as_str().into(),
            ))
        })
        .collect()
}

/// The vector of every text, computed by `compute` unless an earlier run kept it at `path`
/// (whatever else that run kept stays kept).
fn texts_remembered<'a>(
    path: Option<PathBuf>,
    texts: impl Iterator<Item = &'a String>,
    compute: impl FnOnce(&[&str]) -> Result<Vec<Vec<f32>>, Error>,
) -> Result<std::collections::HashMap<String, Vec<f32>>, Error> {
    let mut kept: std::collections::HashMap<String, Vec<f32>> = path
        .as_ref()
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    let mut missing: Vec<&str> = texts
        .map(String::as_str)
        .filter(|t| !kept.contains_key(*t))
        .collect();
    missing.sort_unstable();
    missing.dedup();
    if !missing.is_empty() {
        for (text, vector) in missing.iter().zip(compute(&missing)?) {
            kept.insert((*text).to_owned(), vector);
        }
        if let Some(path) = path {
            std::fs::write(path, serde_json::to_vec(&kept)?)?;
        }
    }
    Ok(kept)
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
