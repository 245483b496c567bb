//! Resolver benchmark (DESIGN §6, §9), one run of `cargo bench -p rowcall-node --bench resolver`:
//!
//! 1. quality on a catalogue with a query set of known answers: top-1, recall@5 and MRR@10 of
//!    rowcall's resolver beside textbook BM25 and the seed's substring scorer, printed as one
//!    table;
//! 2. at 891, 5,000 and 50,000 rows: ask latency p50/p99 in process (through
//!    `Catalogue::ask`, the path the HTTP handler takes), index memory per row, and the cost of
//!    one insert — replacing an existing row and adding a fresh one — printed as a table and
//!    also measured by criterion groups `ask` and `insert`.
//!
//! 3. with `ROWCALL_EMBED_MODEL` naming a model folder (`deploy/fetch-model.sh`), the cost
//!    of ranking by meaning at 5,000 and 50,000 rows: query embedding (full model and
//!    static), the fused search with every row's views and, in the same run, with each row
//!    seen whole only (one vector per row, as before views), the whole ask (embedding and
//!    fused search), one insert with the embedding of its views, and the memory the model
//!    and the row vectors add. Only the first 5,000 distinct rows are run through the model;
//!    larger catalogues reuse their vectors cyclically, which costs a search exactly what
//!    distinct vectors would.
//!
//! The data is the fixture in `data/` (303 rows, 300 paraphrased queries), or the public
//! development data (4,076 seal rows with 200 dev queries, plus 527 livemcp rows) when
//! `ROWCALL_PUBLIC_DATA` names its folder; a folder without those files stops the benchmark
//! with an error. Catalogues above the data set's size are made by combining its rows and
//! adding variants: a key suffix, docstring words shuffled and one WHAT word swapped for a
//! word of another row, all from a fixed seed so every run sees the same rows.

use std::collections::HashSet;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use rowcall_client::dataset::{DataError, DataSet};
use rowcall_client::quality::{GoldQuery, Scorecard};
use rowcall_node::catalogue::embed::{Embedder, QueryMode};
use rowcall_node::catalogue::resolver::baseline::{PlainBm25, SubstringScorer};
use rowcall_node::catalogue::row::{Row, RowInput};
use rowcall_node::catalogue::{embed_views, Catalogue};

/// Catalogue sizes for latency, memory and insert cost: the seed's production catalogue,
/// the §9 target size, and ten times that.
const SIZES: [usize; 3] = [891, 5_000, 50_000];
/// Candidates asked for, as an agent would (MRR is computed to this depth).
const LIMIT: usize = 10;
/// Passes over the query set for the latency percentiles (after one warm-up pass).
const LATENCY_ROUNDS: usize = 10;
/// Timed inserts of each kind for the insert percentiles.
const INSERTS: usize = 500;

/// A small deterministic generator (SplitMix64), so the synthetic rows are the same each run.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }
}

/// Rows of a data set as the state machine would store them.
fn stored_rows(values: Result<Vec<serde_json::Value>, DataError>) -> Vec<Row> {
    let values = values.unwrap_or_else(|e| panic!("{e}"));
    values
        .into_iter()
        .map(|value| {
            let input: RowInput = serde_json::from_value(value).unwrap();
            stored(input)
        })
        .collect()
}

fn stored(input: RowInput) -> Row {
    let at = "2026-01-01T00:00:00Z".to_owned();
    Row::stored(input, 1, at.as_str().into(), at.into())
}

/// A variant of `row`: key suffix `_V{round}`, docstring words shuffled, one WHAT word
/// replaced by `swap_in`.
fn variant(row: &Row, round: usize, swap_in: &str, mix: &mut Mix) -> Row {
    let suffix = format!("_V{round}");
    let stem: String = row.key.chars().take(64 - suffix.len()).collect();
    let mut content = String::new();
    let mut lines = row.content.lines().peekable();
    while let Some(line) = lines.next_if(|l| l.starts_with("# ")) {
        let Some((field, value)) = line.split_once(':') else {
            content.push_str(line);
            content.push('\n');
            continue;
        };
        let mut words: Vec<&str> = value.split_whitespace().collect();
        mix.shuffle(&mut words);
        if field == "# WHAT" && !words.is_empty() {
            let at = mix.below(words.len());
            words[at] = swap_in;
        }
        content.push_str(&format!("{field}: {}\n", words.join(" ")));
    }
    for line in lines {
        content.push_str(line);
        content.push('\n');
    }
    Row {
        key: format!("{stem}{suffix}"),
        content,
        ..row.clone()
    }
}

/// `size` rows: a seeded sample of the queried rows if that is enough, otherwise every row
/// of the data set plus variants of them.
fn rows_of_size(queried: &[Row], more: &[Row], size: usize) -> Vec<Row> {
    let mut mix = Mix(size as u64);
    if size <= queried.len() {
        let mut sample = queried.to_vec();
        mix.shuffle(&mut sample);
        sample.truncate(size);
        return sample;
    }
    let base: Vec<&Row> = queried.iter().chain(more).collect();
    let words: Vec<&str> = base
        .iter()
        .flat_map(|r| r.docs().what().split_whitespace().collect::<Vec<_>>())
        .collect();
    let mut out: Vec<Row> = base.iter().map(|r| (*r).clone()).collect();
    let mut keys: HashSet<String> = out.iter().map(|r| r.key.clone()).collect();
    let mut j = 0;
    while out.len() < size {
        let row = variant(
            base[j % base.len()],
            j / base.len() + 1,
            words[mix.below(words.len())],
            &mut mix,
        );
        j += 1;
        if keys.insert(row.key.clone()) {
            out.push(row);
        }
    }
    out.truncate(size);
    out
}

fn catalogue_of(rows: &[Row]) -> Catalogue {
    let mut catalogue = Catalogue::default();
    for row in rows {
        catalogue.put(row.clone());
    }
    catalogue
}

fn keys(ranked: Vec<(String, f32)>) -> Vec<String> {
    ranked.into_iter().map(|(k, _)| k).collect()
}

/// The quality table: each scorer over the same rows and queries, plus its mean ask time.
fn quality(name: &str, rows: &[Row], queries: &[GoldQuery]) {
    let triples: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| (r.key.clone(), r.category.clone(), r.content.clone()))
        .collect();
    let catalogue = catalogue_of(rows);
    let bm25 = PlainBm25::build(&triples);
    let substring = SubstringScorer::build(&triples);
    type Scorer<'a> = Box<dyn Fn(&str) -> Vec<String> + 'a>;
    let scorers: [(&str, Scorer); 3] = [
        (
            "rowcall",
            Box::new(|q| {
                catalogue
                    .ask(q, LIMIT)
                    .into_iter()
                    .map(|(h, _)| h.key.to_string())
                    .collect()
            }),
        ),
        ("plain BM25", Box::new(|q| keys(bm25.search(q, LIMIT)))),
        (
            "substring (seed)",
            Box::new(|q| keys(substring.search(q, LIMIT))),
        ),
    ];
    println!(
        "\nresolver quality: {} rows, {} queries ({name} data set)",
        rows.len(),
        queries.len()
    );
    println!(
        "{:<18} {:>6} {:>9} {:>7} {:>12}",
        "scorer", "top-1", "recall@5", "MRR@10", "mean ask µs"
    );
    for (name, scorer) in &scorers {
        let mut card = Scorecard::new(LIMIT);
        let started = Instant::now();
        for q in queries {
            let ranked = scorer(&q.q);
            card.add(q, &ranked);
        }
        let mean = started.elapsed().as_secs_f64() * 1e6 / queries.len() as f64;
        let s = card.summary();
        println!(
            "{name:<18} {:>6.3} {:>9.3} {:>7.3} {:>12.1}",
            s.top1, s.recall_at_5, s.mrr, mean
        );
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len());
    sorted[at - 1]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// One line of the size table.
struct SizeReport {
    rows: usize,
    build: Duration,
    bytes_per_row: usize,
    ask: [Duration; 3],
    /// The lexical search alone: pruned (as asks run) and scoring every matching row.
    pruned: [Duration; 2],
    exhaustive: [Duration; 2],
    replace: [Duration; 2],
    fresh: [Duration; 2],
}

/// Times every query `LATENCY_ROUNDS` times (after a warm-up pass): p50, p99, max.
fn ask_percentiles(catalogue: &Catalogue, queries: &[GoldQuery]) -> [Duration; 3] {
    for q in queries {
        black_box(catalogue.ask(&q.q, LIMIT));
    }
    let mut times = Vec::with_capacity(queries.len() * LATENCY_ROUNDS);
    for _ in 0..LATENCY_ROUNDS {
        for q in queries {
            let started = Instant::now();
            black_box(catalogue.ask(black_box(&q.q), LIMIT));
            times.push(started.elapsed());
        }
    }
    times.sort_unstable();
    [
        percentile(&times, 0.50),
        percentile(&times, 0.99),
        *times.last().unwrap(),
    ]
}

/// The resolver's search, pruned and exhaustive, each query timed both ways in turn (which
/// goes first alternates), after checking that both rank alike: p50 and p99 of each.
fn pruning_percentiles(catalogue: &Catalogue, queries: &[GoldQuery]) -> [[Duration; 2]; 2] {
    let resolver = catalogue.resolver();
    for q in queries {
        let pruned: Vec<_> = resolver
            .search(&q.q, LIMIT)
            .into_iter()
            .map(|h| h.key)
            .collect();
        let all: Vec<_> = resolver
            .search_exhaustive(&q.q, LIMIT)
            .into_iter()
            .map(|h| h.key)
            .collect();
        assert_eq!(pruned, all, "{:?}", q.q);
    }
    let (mut pruned, mut exhaustive) = (Vec::new(), Vec::new());
    for round in 0..LATENCY_ROUNDS {
        for (i, q) in queries.iter().enumerate() {
            for which in [(round + i) % 2, (round + i + 1) % 2] {
                let started = Instant::now();
                if which == 0 {
                    black_box(resolver.search(black_box(&q.q), LIMIT));
                    pruned.push(started.elapsed());
                } else {
                    black_box(resolver.search_exhaustive(black_box(&q.q), LIMIT));
                    exhaustive.push(started.elapsed());
                }
            }
        }
    }
    [sorted_percentiles(pruned), sorted_percentiles(exhaustive)]
}

/// A fresh row never in any catalogue here: a data set row under a new key.
fn fresh_row(template: &Row, n: usize) -> Row {
    Row {
        key: format!("BENCH_FRESH_{n}"),
        ..template.clone()
    }
}

/// Times `INSERTS` replacements of existing rows and `INSERTS` fresh inserts (each fresh row
/// is removed again, untimed, so the size stays put): p50 and p99 of each.
fn insert_percentiles(catalogue: &mut Catalogue, rows: &[Row]) -> ([Duration; 2], [Duration; 2]) {
    let mut mix = Mix(7);
    let mut replace = Vec::with_capacity(INSERTS);
    let mut fresh = Vec::with_capacity(INSERTS);
    for n in 0..INSERTS {
        let row = rows[mix.below(rows.len())].clone();
        let started = Instant::now();
        catalogue.put(row);
        replace.push(started.elapsed());

        let row = fresh_row(&rows[mix.below(rows.len())], n);
        let key = row.key.clone();
        let started = Instant::now();
        catalogue.put(row);
        fresh.push(started.elapsed());
        catalogue.remove(&key);
    }
    replace.sort_unstable();
    fresh.sort_unstable();
    (
        [percentile(&replace, 0.5), percentile(&replace, 0.99)],
        [percentile(&fresh, 0.5), percentile(&fresh, 0.99)],
    )
}

fn criterion_groups(
    c: &mut Criterion,
    catalogue: &mut Catalogue,
    rows: &[Row],
    queries: &[GoldQuery],
) {
    let size = catalogue.len();
    let mut group = c.benchmark_group("ask");
    group.bench_function(BenchmarkId::new("rows", size), |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % queries.len();
            black_box(catalogue.ask(black_box(&queries[i].q), LIMIT))
        });
    });
    group.finish();

    let mut group = c.benchmark_group("insert");
    group.bench_function(BenchmarkId::new("replace", size), |b| {
        let mut mix = Mix(11);
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let row = rows[mix.below(rows.len())].clone();
                let started = Instant::now();
                catalogue.put(row);
                total += started.elapsed();
            }
            total
        });
    });
    group.bench_function(BenchmarkId::new("fresh", size), |b| {
        let mut mix = Mix(13);
        let mut n = 0;
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                n += 1;
                let row = fresh_row(&rows[mix.below(rows.len())], n);
                let key = row.key.clone();
                let started = Instant::now();
                catalogue.put(row);
                total += started.elapsed();
                catalogue.remove(&key);
            }
            total
        });
    });
    group.finish();
}

fn main() {
    let data = DataSet::from_env().unwrap_or_else(|e| panic!("{e}"));
    let queried = stored_rows(data.read_rows());
    let queries = data.read_queries().unwrap_or_else(|e| panic!("{e}"));
    let more = stored_rows(data.read_more_rows());

    quality(data.name, &queried, &queries);

    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
        .configure_from_args();
    let mut reports = Vec::new();
    for size in SIZES {
        let rows = rows_of_size(&queried, &more, size);
        let started = Instant::now();
        let mut catalogue = catalogue_of(&rows);
        let build = started.elapsed();
        assert_eq!(catalogue.len(), size);
        let bytes_per_row = catalogue.index_bytes() / size;
        let ask = ask_percentiles(&catalogue, &queries);
        let [pruned, exhaustive] = pruning_percentiles(&catalogue, &queries);
        let (replace, fresh) = insert_percentiles(&mut catalogue, &rows);
        criterion_groups(&mut c, &mut catalogue, &rows, &queries);
        reports.push(SizeReport {
            rows: size,
            build,
            bytes_per_row,
            ask,
            pruned,
            exhaustive,
            replace,
            fresh,
        });
    }
    c.final_summary();
    print_sizes(&reports, &queries);
    if let Some(dir) = std::env::var_os("ROWCALL_EMBED_MODEL").filter(|d| !d.is_empty()) {
        semantic(std::path::Path::new(&dir), &queried, &more, &queries);
    }
}

/// This process's resident memory, from `/proc/self/status` (0 where there is none).
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn sorted_percentiles(mut times: Vec<Duration>) -> [Duration; 2] {
    times.sort_unstable();
    [percentile(&times, 0.5), percentile(&times, 0.99)]
}

/// Section 3: what ranking by meaning costs.
fn semantic(dir: &std::path::Path, queried: &[Row], more: &[Row], queries: &[GoldQuery]) {
    const EMBEDDED: usize = 5_000;
    let before = resident_bytes();
    let started = Instant::now();
    let model = Embedder::load(dir, QueryMode::Model).unwrap_or_else(|e| panic!("{e}"));
    let load = started.elapsed();
    let model_bytes = resident_bytes().saturating_sub(before);
    let fixed = Embedder::load(dir, QueryMode::Static).unwrap_or_else(|e| panic!("{e}"));

    let mut embed_model = Vec::new();
    let mut embed_static = Vec::new();
    for q in queries {
        let t = Instant::now();
        black_box(model.embed_query_with(&q.q, QueryMode::Model).unwrap());
        embed_model.push(t.elapsed());
        let t = Instant::now();
        black_box(fixed.embed_query_with(&q.q, QueryMode::Static).unwrap());
        embed_static.push(t.elapsed());
    }
    let embed_model = sorted_percentiles(embed_model);
    let embed_static = sorted_percentiles(embed_static);

    println!(
        "\nranking by meaning: {} (load {:.1} s, {:.0} MB resident), {} queries",
        model.info().name,
        load.as_secs_f64(),
        model_bytes as f64 / 1e6,
        queries.len()
    );
    println!(
        "query embedding, µs: model p50 {:.0} p99 {:.0}; static p50 {:.0} p99 {:.0}",
        micros(embed_model[0]),
        micros(embed_model[1]),
        micros(embed_static[0]),
        micros(embed_static[1]),
    );
    println!(
        "{:>7} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>10} {:>10}",
        "rows",
        "search p50",
        "search p99",
        "1 view p50",
        "1 view p99",
        "ask p50",
        "ask p99",
        "insert p50",
        "insert p99",
        "views/row",
        "vec B/row"
    );
    // Each row's views' vectors, for the first `EMBEDDED` rows (larger catalogues reuse them).
    let mut vectors: Vec<Vec<Vec<f32>>> = Vec::new();
    for size in [EMBEDDED, 50_000] {
        let rows = rows_of_size(queried, more, size);
        let views: Vec<Vec<String>> = rows.iter().take(EMBEDDED).map(embed_views).collect();
        if vectors.len() < views.len() {
            let refs: Vec<&str> = views.iter().flatten().map(String::as_str).collect();
            let mut flat = model.embed_documents(&refs).unwrap().into_iter();
            vectors = views
                .iter()
                .map(|v| flat.by_ref().take(v.len()).collect())
                .collect();
        }
        let mut catalogue = catalogue_of(&rows);
        let lexical_bytes = catalogue.index_bytes();
        let views_of = |i: usize| -> Vec<&[f32]> {
            vectors[i % vectors.len()]
                .iter()
                .map(Vec::as_slice)
                .collect()
        };
        for (i, row) in rows.iter().enumerate() {
            catalogue.set_views(&row.key, &views_of(i));
        }
        let vector_bytes = catalogue.index_bytes().saturating_sub(lexical_bytes);
        let view_count: usize = (0..rows.len())
            .map(|i| vectors[i % vectors.len()].len())
            .sum();
        // The query vectors are computed apart, so the search and the whole ask are told
        // apart; the ask adds the model's embedding time per query.
        let query_vectors: Vec<_> = queries
            .iter()
            .map(|q| model.embed_query_with(&q.q, QueryMode::Model).unwrap())
            .collect();
        let searches = |catalogue: &Catalogue| {
            let mut times = Vec::new();
            for _ in 0..3 {
                for (q, v) in queries.iter().zip(&query_vectors) {
                    let t = Instant::now();
                    black_box(catalogue.ask_with(&q.q, Some(v), LIMIT));
                    times.push(t.elapsed());
                }
            }
            times
        };
        let search = searches(&catalogue);
        let mut ask = Vec::new();
        for q in queries {
            let t = Instant::now();
            let v = model.embed_query_with(&q.q, QueryMode::Model).unwrap();
            black_box(catalogue.ask_with(&q.q, Some(&v), LIMIT));
            ask.push(t.elapsed());
        }
        let mut insert = Vec::new();
        for (n, row) in rows.iter().take(200).enumerate() {
            let row = fresh_row(row, n);
            let key = row.key.clone();
            let t = Instant::now();
            let texts = embed_views(&row);
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let v = model.embed_documents(&refs).unwrap();
            catalogue.put(row);
            catalogue.set_views(&key, &v.iter().map(Vec::as_slice).collect::<Vec<_>>());
            insert.push(t.elapsed());
            catalogue.remove(&key);
        }
        // The same catalogue with each row seen whole only, as before rows had views.
        for (i, row) in rows.iter().enumerate() {
            catalogue.set_vector(&row.key, views_of(i)[0]);
        }
        let one_view = sorted_percentiles(searches(&catalogue));
        let search = sorted_percentiles(search);
        let ask = sorted_percentiles(ask);
        let insert = sorted_percentiles(insert);
        println!(
            "{:>7} {:>12.0} {:>12.0} {:>12.0} {:>12.0} {:>12.0} {:>12.0} {:>12.0} {:>12.0} {:>10.1} {:>10}",
            size,
            micros(search[0]),
            micros(search[1]),
            micros(one_view[0]),
            micros(one_view[1]),
            micros(ask[0]),
            micros(ask[1]),
            micros(insert[0]),
            micros(insert[1]),
            view_count as f64 / size as f64,
            vector_bytes / size,
        );
    }
}

fn print_sizes(reports: &[SizeReport], queries: &[GoldQuery]) {
    println!(
        "\nask (limit {LIMIT}, {} queries x {LATENCY_ROUNDS}) and insert ({INSERTS} each), in process, µs",
        queries.len()
    );
    println!(
        "{:>7} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>9} {:>8}",
        "rows",
        "ask p50",
        "ask p99",
        "ask max",
        "B/row",
        "repl p50",
        "repl p99",
        "fresh p50",
        "fresh p99",
        "build ms",
        "µs/row"
    );
    for r in reports {
        println!(
            "{:>7} {:>9.1} {:>9.1} {:>9.1} {:>9} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>9.0} {:>8.1}",
            r.rows,
            micros(r.ask[0]),
            micros(r.ask[1]),
            micros(r.ask[2]),
            r.bytes_per_row,
            micros(r.replace[0]),
            micros(r.replace[1]),
            micros(r.fresh[0]),
            micros(r.fresh[1]),
            r.build.as_secs_f64() * 1e3,
            micros(r.build) / r.rows as f64,
        );
    }
    println!(
        "
lexical search alone, µs: top {LIMIT} pruned (MaxScore) vs every matching row scored, same run"
    );
    println!(
        "{:>7} {:>11} {:>11} {:>9} {:>9} {:>9} {:>9}",
        "rows", "pruned p50", "pruned p99", "all p50", "all p99", "p50 ×", "p99 ×"
    );
    for r in reports {
        println!(
            "{:>7} {:>11.1} {:>11.1} {:>9.1} {:>9.1} {:>9.2} {:>9.2}",
            r.rows,
            micros(r.pruned[0]),
            micros(r.pruned[1]),
            micros(r.exhaustive[0]),
            micros(r.exhaustive[1]),
            micros(r.pruned[0]) / micros(r.exhaustive[0]),
            micros(r.pruned[1]) / micros(r.exhaustive[1]),
        );
    }
}
