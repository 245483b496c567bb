//! `rowcall-bench reads`: ask, contract and row get on a follower of 3 nodes, beside etcd's
//! serializable get on a follower of a 3-member etcd, through the same client class
//! (HTTP/1.1 + JSON, one keep-alive connection per closed-loop client), every operation's
//! runs interleaved over rounds.
//!
//! Both sides hold the same catalogue (rowcall: as rows; etcd: each row's JSON as the value
//! of its key): by default `rows` rows made from a fixed vocabulary of 50 words, asked with
//! three of those words (every ask matches most rows), or a real catalogue and real requests
//! from files (`--catalogue`, `--asks`: requests of a sentence or two cost more words to
//! analyse, each with its own rows to score). An ask searches the whole catalogue and ranks
//! it; a contract renders one row; a row get and an etcd get each read one value.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde::Serialize;
use serde_json::{json, Value};

use crate::bench::{answered, bench_client, closed_loop, machine, Sample};
use crate::cluster::{control_client, Cluster, ClusterOptions, ADMIN_KEY};
use crate::error::ChaosError;
use crate::etcd::Etcd;
use crate::report::Latency;
use crate::rng::Rng;

/// Words the catalogue's rows and the asks are made of.
const WORDS: &[&str] = &[
    "invoice",
    "customer",
    "refund",
    "ticket",
    "weather",
    "forecast",
    "currency",
    "convert",
    "translate",
    "summary",
    "calendar",
    "meeting",
    "schedule",
    "payment",
    "order",
    "shipment",
    "track",
    "inventory",
    "stock",
    "price",
    "report",
    "monthly",
    "sales",
    "employee",
    "leave",
    "request",
    "approve",
    "document",
    "search",
    "index",
    "email",
    "send",
    "notify",
    "alert",
    "incident",
    "deploy",
    "service",
    "status",
    "metrics",
    "latency",
    "database",
    "backup",
    "restore",
    "user",
    "account",
    "password",
    "reset",
    "token",
    "audit",
    "log",
];
/// Categories the rows are spread over.
const CATEGORIES: &[&str] = &[
    "Finance",
    "Support",
    "Operations",
    "People",
    "Data",
    "Sales",
];
/// Rows per bulk write while loading.
const LOAD_BATCH: usize = 100;

/// How to run `reads`.
#[derive(Debug, Clone)]
pub struct ReadsOptions {
    /// The rowcall-node binary.
    pub node_bin: PathBuf,
    /// The etcd binary, or why etcd is not measured.
    pub etcd: Result<PathBuf, String>,
    /// Data folders, logs and `reads.json` go under here.
    pub out: PathBuf,
    /// Concurrent clients, one measurement each.
    pub clients: Vec<usize>,
    /// Length of one measurement.
    pub cell: Duration,
    /// Rounds: every (operation, clients) measurement runs once per round, interleaved.
    pub rounds: usize,
    /// Rows in the synthetic catalogue (when `catalogue` is none).
    pub rows: usize,
    /// A catalogue file instead: JSON lines, each a row as `POST /api/directory` takes it.
    pub catalogue: Option<PathBuf>,
    /// Asks from a file instead of vocabulary words: JSON lines with the request in `q`.
    pub asks: Option<PathBuf>,
}

/// What closed-loop clients read: keys of the catalogue and asks, each cycled through.
#[derive(Debug, Clone)]
pub(crate) struct Workload {
    keys: Arc<[String]>,
    asks: Arc<[String]>,
    /// Asks sent so far, by every client in every measurement: each takes the next, so no
    /// ask comes twice before the list wraps (a node keeps recent asks' vectors, and a
    /// repeated ask would time that cache, not the model).
    asked: Arc<std::sync::atomic::AtomicUsize>,
}

impl Workload {
    /// The keys of `catalogue`, and `asks` (three vocabulary words each when none).
    pub(crate) fn new(catalogue: &[Value], asks: Option<Vec<String>>) -> Self {
        let keys = catalogue
            .iter()
            .map(|row| row["key"].as_str().unwrap_or_default().to_owned())
            .collect();
        let asks = asks.unwrap_or_else(|| (0..WORDS.len() as u64).map(ask_text).collect());
        Self {
            keys,
            asks: asks.into(),
            asked: Arc::default(),
        }
    }

    /// The key client `client` reads at its `n`th request.
    fn key(&self, n: u64, client: usize) -> &str {
        &self.keys[(n as usize * 31 + client * 17) % self.keys.len().max(1)]
    }

    /// The next ask.
    fn ask(&self) -> &str {
        let n = self
            .asked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        &self.asks[n % self.asks.len().max(1)]
    }
}

/// Reads a JSON-lines file: each non-empty line's number and value.
fn json_lines(path: &std::path::Path) -> Result<Vec<(usize, Value)>, ChaosError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ChaosError::io(format!("read {}", path.display()), e))?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            serde_json::from_str(line)
                .map(|value| (i + 1, value))
                .map_err(|e| bad_line(path, i + 1, &e.to_string()))
        })
        .collect()
}

fn bad_line(path: &std::path::Path, line: usize, why: &str) -> ChaosError {
    ChaosError::setup(
        "the reads workload",
        format!("{} line {line}: {why}", path.display()),
    )
}

/// The catalogue and the asks `options` name, or the synthetic ones.
fn workload(options: &ReadsOptions) -> Result<(Vec<Value>, Workload), ChaosError> {
    let catalogue = match &options.catalogue {
        Some(path) => {
            let mut rows = Vec::new();
            for (line, row) in json_lines(path)? {
                if !row["key"].is_string() {
                    return Err(bad_line(path, line, "every line must be a row with a key"));
                }
                rows.push(row);
            }
            if rows.is_empty() {
                return Err(ChaosError::setup(
                    "the reads workload",
                    format!("{} holds no rows", path.display()),
                ));
            }
            rows
        }
        None => {
            let mut rng = Rng::new(7);
            (0..options.rows)
                .map(|i| catalogue_row(i, &mut rng))
                .collect()
        }
    };
    let asks = match &options.asks {
        Some(path) => {
            let mut asks = Vec::new();
            for (line, ask) in json_lines(path)? {
                match ask["q"].as_str() {
                    Some(q) if !q.trim().is_empty() => asks.push(q.to_owned()),
                    _ => return Err(bad_line(path, line, "every line needs a request in \"q\"")),
                }
            }
            if asks.is_empty() {
                return Err(ChaosError::setup(
                    "the reads workload",
                    format!("{} holds no requests", path.display()),
                ));
            }
            Some(asks)
        }
        None => None,
    };
    let workload = Workload::new(&catalogue, asks);
    Ok((catalogue, workload))
}

/// A read measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Read {
    /// `GET /api/dispatch?ask=…`.
    Ask,
    /// `GET /api/dispatch?key=…`.
    Contract,
    /// `GET /api/directory/{key}`.
    Row,
    /// etcd `POST /v3/kv/range` with `serializable: true`.
    EtcdGet,
}

impl Read {
    fn name(self) -> &'static str {
        match self {
            Read::Ask => "rowcall ask",
            Read::Contract => "rowcall contract",
            Read::Row => "rowcall row get",
            Read::EtcdGet => "etcd serializable get",
        }
    }
}

/// The figures of one (read, clients) pair, over every round.
#[derive(Debug, Clone, Serialize)]
pub struct ReadRow {
    /// The read.
    pub read: Read,
    /// Concurrent clients.
    pub clients: usize,
    /// Answered reads per second.
    pub per_s: f64,
    /// Latency of answered reads.
    pub latency: Latency,
    /// Answered reads.
    pub ok: u64,
    /// Reads refused or failed (not in the latency figures).
    pub errors: u64,
    /// Reads/s over etcd's serializable gets at the same clients (when etcd ran).
    pub throughput_vs_etcd: Option<f64>,
    /// p50 over etcd's p50 at the same clients (below 1 is faster).
    pub p50_vs_etcd: Option<f64>,
}

/// Everything a `reads` run measured.
#[derive(Debug, Serialize)]
pub struct ReadsReport {
    /// Where it ran.
    pub machine: Value,
    /// How it ran.
    pub settings: Value,
    /// Why etcd was not measured, if it was not.
    pub etcd_skipped: Option<String>,
    /// One row per read and clients.
    pub rows: Vec<ReadRow>,
}

/// Row `i` of the catalogue: the same on both systems.
pub(crate) fn catalogue_row(i: usize, rng: &mut Rng) -> Value {
    let mut words = |n: usize| {
        (0..n)
            .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
            .collect::<Vec<_>>()
            .join(" ")
    };
    let what = words(6);
    let content = words(24);
    json!({
        "key": format!("BENCH_ROW_{i}"),
        "type": "static",
        "auth": "public",
        "category": category(i),
        "content": format!("# WHAT: {what}\n\n{content}\n"),
    })
}

/// The category of the `i`th synthetic row: the rows are spread evenly over a few.
pub(crate) fn category(i: usize) -> &'static str {
    CATEGORIES[i % CATEGORIES.len()]
}

/// The `n`th ask: three vocabulary words, cycling.
pub(crate) fn ask_text(n: u64) -> String {
    let at = |k: u64| WORDS[((n * 7 + k * 13) % WORDS.len() as u64) as usize];
    format!("{} {} {}", at(0), at(1), at(2))
}

/// Writes `rows` to the cluster through its leader in bulk writes, and waits until the
/// follower `on` has applied the last of them.
/// Times a bulk write is sent before the load gives up.
const LOAD_ATTEMPTS: usize = 5;

pub(crate) async fn load_rowcall(
    cluster: &Cluster,
    leader: u64,
    on: u64,
    rows: &[Value],
) -> Result<(), ChaosError> {
    // A bulk write of a few hundred rows may take seconds on a loaded machine.
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| ChaosError::setup("an HTTP client", e))?;
    let leader_url = cluster.node(leader).url();
    let mut index = 0u64;
    for (n, batch) in rows.chunks(LOAD_BATCH).enumerate() {
        // As a client should: a write whose outcome is unknown (the leader gave up on its
        // quorum for a moment, say while a large snapshot is written) is sent again with
        // the same key, and applied once.
        let key = format!("bench-load-{n}");
        let mut attempt = 0;
        let answer = loop {
            attempt += 1;
            let sent = http
                .post(format!("{leader_url}/api/directory"))
                .header("x-terminal-key", ADMIN_KEY)
                .header("idempotency-key", &key)
                .json(batch)
                .send()
                .await;
            let retry = match &sent {
                Ok(answer) => answer.status().is_server_error(),
                Err(e) => e.is_timeout() || e.is_connect(),
            };
            if !retry || attempt == LOAD_ATTEMPTS {
                break sent.map_err(|e| ChaosError::setup("the benchmark catalogue", e))?;
            }
            eprintln!("bulk write {n} sent again (attempt {attempt} unanswered or failed)");
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        if !answer.status().is_success() {
            let status = answer.status();
            let body = answer.text().await.unwrap_or_default();
            return Err(ChaosError::setup(
                "the benchmark catalogue",
                format!("{status}: {body}"),
            ));
        }
        index = answer
            .headers()
            .get("x-rowcall-index")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(index);
    }
    // The follower answers a read at the last write's index once it has applied it.
    let url = format!("{}/api/directory/counts", cluster.node(on).url());
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let read = http.get(&url).query(&[("min_index", index)]).send().await;
        if read.is_ok_and(|r| r.status().is_success()) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(ChaosError::setup(
        "the benchmark catalogue",
        format!("the follower did not reach index {index} within 30 s"),
    ))
}

/// On nodes with a model (`ROWCALL_EMBED_MODEL` in the environment), waits until every
/// node holds a vector for each of `rows` rows, so asks are not timed beside the embedding
/// of the catalogue. Nodes without a model return at once.
pub(crate) async fn await_vectors(cluster: &Cluster, rows: usize) -> Result<(), ChaosError> {
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| ChaosError::setup("an HTTP client", e))?;
    let deadline = Instant::now() + Duration::from_secs(1800);
    for id in cluster.ids() {
        let url = format!("{}/api/cluster", cluster.node(id).url());
        loop {
            let status: Option<Value> = match http.get(&url).send().await {
                Ok(answer) => answer.json().await.ok(),
                Err(_) => None,
            };
            let resolver = status.as_ref().and_then(|s| s.get("resolver"));
            let hybrid =
                resolver.and_then(|r| r.get("mode")).and_then(Value::as_str) == Some("hybrid");
            let embedded = resolver
                .and_then(|r| r.get("rows_embedded"))
                .and_then(Value::as_u64)
                .unwrap_or(0);
            if resolver.is_some() && (!hybrid || embedded >= rows as u64) {
                break;
            }
            if Instant::now() > deadline {
                return Err(ChaosError::setup(
                    "the catalogue's vectors",
                    format!("node {id} embedded {embedded} of {rows} rows within 30 min"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Ok(())
}

/// Puts every row's JSON under its key into etcd.
async fn load_etcd(url: &str, rows: &[Value]) -> Result<(), ChaosError> {
    let http = control_client();
    let b64 = base64::engine::general_purpose::STANDARD;
    for row in rows {
        let key = row["key"].as_str().unwrap_or_default();
        let answer = http
            .post(format!("{url}/v3/kv/put"))
            .json(&json!({"key": b64.encode(key), "value": b64.encode(row.to_string())}))
            .send()
            .await
            .map_err(|e| ChaosError::setup("the etcd catalogue", e))?;
        if !answer.status().is_success() {
            return Err(ChaosError::setup("the etcd catalogue", answer.status()));
        }
    }
    Ok(())
}

/// `clients` closed-loop clients sending `read` to `url` for `length`; keys and asks cycle
/// through `workload`'s.
pub(crate) async fn load(
    url: &str,
    read: Read,
    workload: &Workload,
    clients: usize,
    length: Duration,
) -> Result<Sample, ChaosError> {
    let connections = (0..clients)
        .map(|_| bench_client(None))
        .collect::<Result<Vec<_>, _>>()?;
    let url = Arc::<str>::from(url);
    let b64 = base64::engine::general_purpose::STANDARD;
    let workload = workload.clone();
    Ok(closed_loop(connections, length, move |http, client, n| {
        let key = workload.key(n, client);
        answered(match read {
            Read::Ask => http
                .get(format!("{url}/api/dispatch"))
                .query(&[("ask", workload.ask())]),
            Read::Contract => http
                .get(format!("{url}/api/dispatch"))
                .query(&[("key", key)]),
            Read::Row => http.get(format!("{url}/api/directory/{key}")),
            Read::EtcdGet => http
                .post(format!("{url}/v3/kv/range"))
                .json(&json!({"key": b64.encode(key), "serializable": true})),
        })
    })
    .await)
}

/// Runs the `reads` benchmark: starts both systems, loads the catalogue, measures, prints
/// the table and writes `reads.json` under `options.out`.
pub async fn reads(options: &ReadsOptions) -> Result<ReadsReport, ChaosError> {
    std::fs::create_dir_all(&options.out)
        .map_err(|e| ChaosError::io(format!("create {}", options.out.display()), e))?;
    let machine = machine();
    let (catalogue, work) = workload(options)?;

    let cluster = Cluster::start(&ClusterOptions {
        bin: options.node_bin.clone(),
        nodes: 3,
        root: options.out.join("rowcall-3-nodes"),
        proxies: false,
        snapshot_every: 5_000,
        seed: 1,
        tls: false,
    })
    .await?;
    let leader = cluster
        .await_leader(Duration::from_secs(10))
        .await
        .ok_or_else(|| ChaosError::setup("the rowcall cluster", "no leader within 10 s"))?;
    let follower = cluster
        .ids()
        .into_iter()
        .find(|id| *id != leader)
        .unwrap_or(leader);
    load_rowcall(&cluster, leader, follower, &catalogue).await?;
    await_vectors(&cluster, catalogue.len()).await?;
    let mut targets = vec![
        (Read::Ask, cluster.node(follower).url()),
        (Read::Contract, cluster.node(follower).url()),
        (Read::Row, cluster.node(follower).url()),
    ];

    let mut etcd_skipped = None;
    let mut etcd_cluster = None;
    let mut etcd_version = None;
    match &options.etcd {
        Ok(bin) => {
            let etcd = Etcd::start(bin, 3, &options.out.join("etcd-3-members")).await?;
            let url = etcd.follower().await;
            load_etcd(&url, &catalogue).await?;
            targets.push((Read::EtcdGet, url));
            etcd_version = Some(etcd.version.clone());
            etcd_cluster = Some(etcd);
        }
        Err(why) => {
            println!("etcd skipped: {why}; measuring rowcall alone");
            etcd_skipped = Some(why.clone());
        }
    }

    // Warm every read up once (connections, the resolver's caches).
    for (read, url) in &targets {
        let warm = options.cell.min(Duration::from_secs(1));
        load(url, *read, &work, 4, warm).await?;
    }
    let mut samples: Vec<Vec<Sample>> = targets
        .iter()
        .map(|_| options.clients.iter().map(|_| Sample::default()).collect())
        .collect();
    for round in 0..options.rounds {
        for (c, &clients) in options.clients.iter().enumerate() {
            for (t, (read, url)) in targets.iter().enumerate() {
                let sample = load(url, *read, &work, clients, options.cell).await?;
                samples[t][c].add(sample);
            }
            eprintln!(
                "round {}/{}: every read at {clients} clients done",
                round + 1,
                options.rounds
            );
        }
    }
    drop(etcd_cluster);
    drop(cluster);

    let mut rows = Vec::new();
    for (t, (read, _)) in targets.iter().enumerate() {
        for (c, &clients) in options.clients.iter().enumerate() {
            let sample = std::mem::take(&mut samples[t][c]);
            rows.push(ReadRow {
                read: *read,
                clients,
                per_s: sample.per_s(),
                ok: sample.ok(),
                errors: sample.errors,
                latency: Latency::of(sample.latencies_us),
                throughput_vs_etcd: None,
                p50_vs_etcd: None,
            });
        }
    }
    let etcd_rows: Vec<ReadRow> = rows
        .iter()
        .filter(|r| r.read == Read::EtcdGet)
        .cloned()
        .collect();
    for row in &mut rows {
        if let Some(etcd) = etcd_rows.iter().find(|e| e.clients == row.clients) {
            row.throughput_vs_etcd = Some(row.per_s / etcd.per_s.max(1e-9));
            row.p50_vs_etcd = Some(row.latency.p50_ms / etcd.latency.p50_ms.max(1e-9));
        }
    }
    rows.sort_by_key(|r| r.clients);
    let report = ReadsReport {
        machine,
        settings: json!({
            "clients": options.clients,
            "seconds_per_measurement": options.cell.as_secs_f64(),
            "rounds": options.rounds,
            "catalogue_rows": catalogue.len(),
            "catalogue": options.catalogue.as_ref().map_or_else(
                || "synthetic: 50 words".to_owned(),
                |p| p.display().to_string(),
            ),
            "asks": options.asks.as_ref().map_or_else(
                || "three of the 50 words".to_owned(),
                |p| format!("{} ({} requests)", p.display(), work.asks.len()),
            ),
            "load_on": "a follower of 3 (rowcall and etcd)",
            "client": "HTTP/1.1 JSON, one connection per client, closed loop",
            "node_bin": options.node_bin.display().to_string(),
            "etcd": etcd_version,
        }),
        etcd_skipped,
        rows,
    };
    crate::bench::publish(&options.out.join("reads.json"), &report, &table(&report))?;
    Ok(report)
}

/// The report as a Markdown table, machine details on top.
pub fn table(report: &ReadsReport) -> String {
    let mut out = crate::bench::machine_line("reads", &report.machine);
    out.push_str(&format!(
        "{} catalogue rows ({}), asks: {}; load on a follower of 3, HTTP/JSON, {} s x {} interleaved rounds per figure\n\n",
        report.settings["catalogue_rows"],
        report.settings["catalogue"].as_str().unwrap_or_default(),
        report.settings["asks"].as_str().unwrap_or_default(),
        report.settings["seconds_per_measurement"],
        report.settings["rounds"],
    ));
    out.push_str(
        "| clients | read | reads/s | p50 ms | p99 ms | errors | × etcd reads/s | × etcd p50 |\n",
    );
    out.push_str("|---:|---|---:|---:|---:|---:|---:|---:|\n");
    let ratio = |r: Option<f64>| r.map_or("–".to_owned(), |r| format!("{r:.2}"));
    for row in &report.rows {
        out.push_str(&format!(
            "| {} | {} | {:.0} | {:.2} | {:.2} | {} | {} | {} |\n",
            row.clients,
            row.read.name(),
            row.per_s,
            row.latency.p50_ms,
            row.latency.p99_ms,
            row.errors,
            ratio(row.throughput_vs_etcd),
            ratio(row.p50_vs_etcd),
        ));
    }
    if let Some(why) = &report.etcd_skipped {
        out.push_str(&format!("\netcd skipped: {why}\n"));
    }
    out
}
