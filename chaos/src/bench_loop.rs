//! `rowcall-bench loop`: the four-step loop an agent runs — ask → contract → invoke →
//! confirm — on one node and on a follower of 3 nodes: latency of each step and of the
//! whole loop, and the bytes each step moves, beside the seed's loop (2.185 s and 47,409 B).
//!
//! One agent, one keep-alive connection, loops back to back. Each step uses what the one
//! before answered: the contract link of the ask's best candidate, its key to invoke, the
//! receipt's confirm link, read at the invocation's index (`x-rowcall-min-index`), so a
//! follower confirms a receipt it may not have applied yet only once it has. A loop whose
//! ask does not put the expected row first, or whose receipt does not confirm, is an error.
//! Bytes are what the agent reads into its context and sends: the request's path, query and
//! body, and the answer's body (headers are not counted).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};

use crate::bench::{bench_client, machine};
use crate::bench_reads::{catalogue_row, load_rowcall};
use crate::cluster::{Cluster, ClusterOptions};
use crate::error::ChaosError;
use crate::report::Latency;
use crate::rng::Rng;

/// The seed's loop, measured in its article: total wall time and bytes.
const SEED_SECONDS: f64 = 2.185;
const SEED_BYTES: u64 = 47_409;
/// The row the loop looks for, and how it asks for it.
const LOOP_KEY: &str = "LOOP_CLOCK";
const ASK: &str = "what time is it now in utc";
/// The four steps, in order.
const STEPS: [&str; 4] = ["ask", "contract", "invoke", "confirm"];

/// How to run `loop`.
#[derive(Debug, Clone)]
pub struct LoopOptions {
    /// The rowcall-node binary.
    pub node_bin: PathBuf,
    /// Data folders, logs and `loop.json` go under here.
    pub out: PathBuf,
    /// How long loops run back to back on each system, per round.
    pub cell: Duration,
    /// Rounds: each system runs once per round, interleaved.
    pub rounds: usize,
    /// Other rows in the catalogue, so that the ask ranks a real one.
    pub rows: usize,
}

/// One step's (or the whole loop's) figures on one system.
#[derive(Debug, Clone, Serialize)]
pub struct StepRow {
    /// The system, e.g. `rowcall 3 nodes (follower)`.
    pub system: String,
    /// `ask`, `contract`, `invoke`, `confirm` or `loop`.
    pub step: String,
    /// Latency over every completed loop.
    pub latency: Latency,
    /// Median bytes moved (request path, query and body, and answer body).
    pub bytes: u64,
}

/// Everything a `loop` run measured.
#[derive(Debug, Serialize)]
pub struct LoopReport {
    /// Where it ran.
    pub machine: Value,
    /// How it ran.
    pub settings: Value,
    /// Completed loops, by system.
    pub loops: Vec<(String, u64)>,
    /// Loops that failed a step, by system.
    pub errors: Vec<(String, u64)>,
    /// Four steps and the whole loop, per system.
    pub rows: Vec<StepRow>,
}

/// The steps of completed loops on one system: `[step][loop]`.
#[derive(Default)]
struct Loops {
    latencies_us: [Vec<u64>; 5],
    bytes: [Vec<u64>; 5],
    errors: u64,
}

/// Why a loop failed.
type StepError = String;

/// Sends one step, returns its answer's body, and notes its latency and bytes.
async fn step(
    request: reqwest::RequestBuilder,
    sent_bytes: usize,
    times: &mut [u64; 5],
    bytes: &mut [u64; 5],
    at: usize,
) -> Result<(Value, Option<u64>), StepError> {
    let started = Instant::now();
    let answer = request.send().await.map_err(|e| e.to_string())?;
    let status = answer.status();
    let index = answer
        .headers()
        .get("x-rowcall-index")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let body = answer.bytes().await.map_err(|e| e.to_string())?;
    times[at] = started.elapsed().as_micros() as u64;
    bytes[at] = (sent_bytes + body.len()) as u64;
    if !status.is_success() {
        return Err(format!("{}: {status}", STEPS[at]));
    }
    let value = serde_json::from_slice(&body).map_err(|e| format!("{}: {e}", STEPS[at]))?;
    Ok((value, index))
}

/// The length of `url`'s path and query: what of it the agent writes into a request line.
fn path_len(url: &str) -> usize {
    reqwest::Url::parse(url).map_or(url.len(), |u| {
        u.path().len() + u.query().map_or(0, |q| q.len() + 1)
    })
}

/// One loop against `base`; on success the latency and bytes of each step and of the whole.
async fn one_loop(http: &reqwest::Client, base: &str) -> Result<([u64; 5], [u64; 5]), StepError> {
    let (mut times, mut bytes) = ([0u64; 5], [0u64; 5]);
    let started = Instant::now();
    let ask_url = format!("{base}/api/dispatch?ask={}", ASK.replace(' ', "+"));
    let request = http.get(&ask_url);
    let (ask, _) = step(request, path_len(&ask_url), &mut times, &mut bytes, 0).await?;
    if ask["best"]["key"] != LOOP_KEY {
        return Err(format!(
            "ask: best is {}, not {LOOP_KEY}",
            ask["best"]["key"]
        ));
    }
    let contract_url = ask["best"]["contract"]
        .as_str()
        .ok_or("ask: no contract link")?;
    let request = http.get(contract_url);
    let (contract, _) = step(request, path_len(contract_url), &mut times, &mut bytes, 1).await?;
    let key = contract["key"].as_str().ok_or("contract: no key")?;
    let body = json!({"key": key}).to_string();
    let invoke_url = format!("{base}/api/dispatch");
    let request = http
        .post(&invoke_url)
        .header("content-type", "application/json")
        .body(body.clone());
    let sent = path_len(&invoke_url) + body.len();
    let (invoked, index) = step(request, sent, &mut times, &mut bytes, 2).await?;
    let confirm_url = invoked["proof"]["confirm"]
        .as_str()
        .ok_or("invoke: no confirm link")?;
    let mut request = http.get(confirm_url);
    if let Some(index) = index {
        request = request.header("x-rowcall-min-index", index);
    }
    let (confirmed, _) = step(request, path_len(confirm_url), &mut times, &mut bytes, 3).await?;
    if confirmed["confirmed"] != true {
        return Err(format!("confirm: {confirmed}"));
    }
    times[4] = started.elapsed().as_micros() as u64;
    bytes[4] = bytes[..4].iter().sum();
    Ok((times, bytes))
}

/// Loops back to back against `base` for `length`.
async fn run_loops(base: &str, length: Duration, into: &mut Loops) -> Result<(), ChaosError> {
    let http = bench_client(None)?;
    let deadline = Instant::now() + length;
    while Instant::now() < deadline {
        match one_loop(&http, base).await {
            Ok((times, bytes)) => {
                for at in 0..5 {
                    into.latencies_us[at].push(times[at]);
                    into.bytes[at].push(bytes[at]);
                }
            }
            Err(why) => {
                if into.errors == 0 {
                    eprintln!("a loop failed: {why}");
                }
                into.errors += 1;
            }
        }
    }
    Ok(())
}

/// Runs the `loop` benchmark: starts one node and 3 nodes, writes the catalogue, runs loops,
/// prints the table and writes `loop.json` under `options.out`.
pub async fn four_step_loop(options: &LoopOptions) -> Result<LoopReport, ChaosError> {
    std::fs::create_dir_all(&options.out)
        .map_err(|e| ChaosError::io(format!("create {}", options.out.display()), e))?;
    let machine = machine();
    let mut rng = Rng::new(11);
    let mut catalogue: Vec<Value> = (0..options.rows)
        .map(|i| catalogue_row(i, &mut rng))
        .collect();
    catalogue.push(json!({
        "key": LOOP_KEY, "type": "builtin", "target": "now", "category": "Time",
        "auth": "public", "risk": "read",
        "content": "# WHAT: Current time now: date, time and zone (UTC)\n# RETURNS: {utc, date, time, zone, unix_ms}\n",
    }));

    let mut clusters = Vec::new();
    let mut systems = Vec::new();
    for (name, nodes) in [("rowcall 1 node", 1), ("rowcall 3 nodes (follower)", 3)] {
        let cluster = Cluster::start(&ClusterOptions {
            bin: options.node_bin.clone(),
            nodes,
            root: options.out.join(format!("rowcall-{nodes}")),
            proxies: false,
            snapshot_every: 5_000,
            seed: 1,
            tls: false,
        })
        .await?;
        let leader = cluster
            .await_leader(Duration::from_secs(10))
            .await
            .ok_or_else(|| ChaosError::Setup {
                what: name.to_owned(),
                detail: "no leader within 10 s".into(),
            })?;
        let on = cluster
            .ids()
            .into_iter()
            .find(|id| *id != leader || nodes == 1)
            .unwrap_or(leader);
        load_rowcall(&cluster, leader, on, &catalogue).await?;
        systems.push((name.to_owned(), cluster.node(on).url()));
        clusters.push(cluster);
    }

    let mut loops: Vec<Loops> = systems.iter().map(|_| Loops::default()).collect();
    // Warm up: connections, the resolver's caches, the first receipts.
    for (_, base) in &systems {
        run_loops(
            base,
            options.cell.min(Duration::from_secs(1)),
            &mut Loops::default(),
        )
        .await?;
    }
    for round in 0..options.rounds {
        for (s, (name, base)) in systems.iter().enumerate() {
            run_loops(base, options.cell, &mut loops[s]).await?;
            eprintln!("round {}/{}: {name} done", round + 1, options.rounds);
        }
    }
    drop(clusters);

    let counts = |count: fn(&Loops) -> u64| {
        systems
            .iter()
            .zip(&loops)
            .map(|((name, _), l)| (name.clone(), count(l)))
            .collect::<Vec<_>>()
    };
    let (completed, errors) = (
        counts(|l| l.latencies_us[4].len() as u64),
        counts(|l| l.errors),
    );
    let mut rows = Vec::new();
    for ((name, _), done) in systems.iter().zip(&mut loops) {
        for (at, label) in STEPS.iter().chain(&["loop"]).enumerate() {
            let mut bytes = std::mem::take(&mut done.bytes[at]);
            bytes.sort_unstable();
            rows.push(StepRow {
                system: name.clone(),
                step: (*label).to_owned(),
                latency: Latency::of(std::mem::take(&mut done.latencies_us[at])),
                bytes: bytes.get(bytes.len() / 2).copied().unwrap_or(0),
            });
        }
    }
    let report = LoopReport {
        machine,
        settings: json!({
            "seconds_per_measurement": options.cell.as_secs_f64(),
            "rounds": options.rounds,
            "catalogue_rows": options.rows + 1,
            "ask": ASK,
            "client": "one agent, one HTTP/1.1 keep-alive connection, loops back to back",
            "bytes": "request path, query and body, plus the answer's body; headers not counted",
            "seed": {"seconds": SEED_SECONDS, "bytes": SEED_BYTES},
            "node_bin": options.node_bin.display().to_string(),
        }),
        loops: completed,
        errors,
        rows,
    };
    crate::bench::publish(&options.out.join("loop.json"), &report, &table(&report))?;
    Ok(report)
}

/// The report as a Markdown table, machine details on top.
pub fn table(report: &LoopReport) -> String {
    let mut out = crate::bench::machine_line("loop", &report.machine);
    out.push_str(&format!(
        "{} catalogue rows, one agent, {} s x {} interleaved rounds per system\n\n",
        report.settings["catalogue_rows"],
        report.settings["seconds_per_measurement"],
        report.settings["rounds"],
    ));
    out.push_str("| system | step | p50 ms | p99 ms | bytes |\n|---|---|---:|---:|---:|\n");
    for row in &report.rows {
        out.push_str(&format!(
            "| {} | {} | {:.2} | {:.2} | {} |\n",
            row.system, row.step, row.latency.p50_ms, row.latency.p99_ms, row.bytes
        ));
    }
    out.push_str(&format!(
        "| the seed | loop | {:.0} | – | {SEED_BYTES} |\n\n",
        SEED_SECONDS * 1000.0
    ));
    for ((name, loops), (_, errors)) in report.loops.iter().zip(&report.errors) {
        out.push_str(&format!("{name}: {loops} loops, {errors} failed\n"));
    }
    out
}
