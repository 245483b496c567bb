//! What one query's embedding costs, alone and in batches, per weights type: a probe for
//! profiling the encoder (`perf record` on it), not a benchmark with a baseline.
//!
//! `cargo run --release -p rowcall-node --example encoder_cost -- MODEL_DIR QUERIES.jsonl [f32|q8] [rounds]`

use std::time::{Duration, Instant};

use rowcall_node::catalogue::embed::{Embedder, QueryMode, Weights};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (dir, queries) = (&args[1], &args[2]);
    let weights = match args.get(3).map(String::as_str) {
        Some("f32") => Weights::F32,
        _ => Weights::Q8,
    };
    let rounds: usize = args.get(4).and_then(|r| r.parse().ok()).unwrap_or(3);
    let texts: Vec<String> = std::fs::read_to_string(queries)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v.get("q").and_then(|q| q.as_str()).map(str::to_owned))
        .collect();
    let model = Embedder::load_with(dir.as_ref(), QueryMode::Model, weights).unwrap();
    // On one of the pool's threads, as the node's ask runners are.
    rayon::scope(|_| measure(&model, &texts, rounds));
}

fn measure(model: &Embedder, texts: &[String], rounds: usize) {
    let mut alone = Vec::new();
    // A digest of every vector's bits, to tell that two builds compute the same.
    let mut digest = 0xcbf2_9ce4_8422_2325u64;
    for _ in 0..rounds {
        for q in texts {
            let t = Instant::now();
            let v = model.embed_query_with(q, QueryMode::Model).unwrap();
            alone.push(t.elapsed());
            for x in v.iter() {
                digest = (digest ^ u64::from(x.to_bits())).wrapping_mul(0x100_0000_01b3);
            }
        }
    }
    println!("vectors' digest: {digest:016x}");
    alone.sort_unstable();
    let pick = |p: f64| alone[((alone.len() - 1) as f64 * p) as usize];
    println!(
        "alone: {} queries, p50 {:?} p99 {:?}, {:.0}/s",
        alone.len(),
        pick(0.5),
        pick(0.99),
        alone.len() as f64 / alone.iter().sum::<Duration>().as_secs_f64()
    );
    let t = Instant::now();
    let mut n = 0;
    for r in 0..rounds {
        // Trailing spaces: the same tokens under a text the query cache has not seen.
        let round: Vec<String> = texts
            .iter()
            .map(|q| format!("{q}{}", " ".repeat(r + 1)))
            .collect();
        let refs: Vec<&str> = round.iter().map(String::as_str).collect();
        for batch in refs.chunks(32) {
            std::hint::black_box(model.embed_queries(batch).unwrap());
            n += batch.len();
        }
    }
    println!(
        "batches of 32: {:.0}/s",
        n as f64 / t.elapsed().as_secs_f64()
    );
}
