//! `rowcall-bench api`: ask and invoke latency over the public gRPC API (through the
//! `rowcall-client` library) beside the HTTP protocol (reqwest, JSON), on the same node in
//! one run, every (operation, protocol) pair measured in each round in turn so that a busy
//! moment of a shared machine falls on all of them alike.
//!
//! One node, seeded with `rows` static rows of distinct words. A measurement is one client,
//! closed loop (the next request once the previous answer is read in full): an ask for one
//! row's words, or an invocation of one row (which runs it and commits its receipt).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::bench::{answered, machine};
use crate::cluster::{Cluster, ClusterOptions, ADMIN_KEY};
use crate::error::ChaosError;
use crate::report::Latency;

/// How to run `api`.
#[derive(Debug, Clone)]
pub struct ApiOptions {
    /// The rowcall-node binary.
    pub node_bin: PathBuf,
    /// Data folder, log and `api.json` go under here.
    pub out: PathBuf,
    /// Requests per (operation, protocol) per round.
    pub requests: usize,
    /// Interleaved rounds.
    pub rounds: usize,
    /// Rows seeded before measuring (asks look for one of them each).
    pub rows: usize,
}

/// The two protocols measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// `rowcall.v1` through [`rowcall_client::Client`] (HTTP/2, protobuf).
    Grpc,
    /// `GET/POST /api/dispatch` with JSON (HTTP/1.1).
    Http,
}

/// The two operations measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// A plain-language ask (ranked candidates).
    Ask,
    /// An invocation of a static row (its receipt committed before the answer).
    Invoke,
}

/// The figures of one (operation, protocol) pair over every round.
#[derive(Debug, Clone, Serialize)]
pub struct ApiRow {
    /// Which operation.
    pub operation: Operation,
    /// Which protocol.
    pub protocol: Protocol,
    /// Answered requests.
    pub ok: u64,
    /// Failed requests (not in the latency figures).
    pub errors: u64,
    /// Latency of answered requests.
    pub latency: Latency,
    /// Its p50 over HTTP's for the same operation (below 1: gRPC is faster).
    pub p50_vs_http: f64,
    /// Its p99 over HTTP's for the same operation.
    pub p99_vs_http: f64,
}

/// Everything an `api` run measured.
#[derive(Debug, Serialize)]
pub struct ApiReport {
    /// Where it ran.
    pub machine: Value,
    /// How it ran.
    pub settings: Value,
    /// One row per operation and protocol.
    pub rows: Vec<ApiRow>,
}

const OPERATIONS: [Operation; 2] = [Operation::Ask, Operation::Invoke];
const PROTOCOLS: [Protocol; 2] = [Protocol::Grpc, Protocol::Http];

/// One node and a client of each protocol.
struct Clients {
    grpc: rowcall_client::Client,
    http: reqwest::Client,
    url: String,
}

/// Runs the `api` benchmark: one node, seeded, measured; prints the table and writes
/// `api.json` under `options.out`.
pub async fn api(options: &ApiOptions) -> Result<ApiReport, ChaosError> {
    std::fs::create_dir_all(&options.out)
        .map_err(|e| ChaosError::io(format!("create {}", options.out.display()), e))?;
    let machine = machine();
    let cluster = Cluster::start(&ClusterOptions {
        bin: options.node_bin.clone(),
        nodes: 1,
        root: options.out.join("node"),
        proxies: false,
        snapshot_every: 5_000,
        seed: 1,
        tls: false,
    })
    .await?;
    let node = cluster.node(1);
    let clients = Clients {
        grpc: rowcall_client::Client::builder()
            .node(node.grpc.to_string())
            .credential(ADMIN_KEY)
            // One node: nothing to hedge to.
            .hedge_after(None)
            .build()
            .map_err(|e| ChaosError::setup("the gRPC client", e))?,
        http: reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(1)
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| ChaosError::setup("the HTTP client", e))?,
        url: node.url(),
    };
    let words = seed(&clients, options.rows.max(1)).await?;

    // Warm both protocols up (connections, the resolver's first queries).
    for operation in OPERATIONS {
        for protocol in PROTOCOLS {
            measure(
                &clients,
                operation,
                protocol,
                &words,
                20.min(options.requests),
            )
            .await;
        }
    }
    let mut samples = vec![(Vec::new(), 0u64); OPERATIONS.len() * PROTOCOLS.len()];
    for round in 0..options.rounds {
        for (o, operation) in OPERATIONS.into_iter().enumerate() {
            for (p, protocol) in PROTOCOLS.into_iter().enumerate() {
                let (latencies, errors) =
                    measure(&clients, operation, protocol, &words, options.requests).await;
                let into = &mut samples[o * PROTOCOLS.len() + p];
                into.0.extend(latencies);
                into.1 += errors;
            }
        }
        eprintln!("round {}/{} done", round + 1, options.rounds);
    }
    drop(cluster);

    let mut rows = Vec::new();
    for (o, operation) in OPERATIONS.into_iter().enumerate() {
        let mut pair: Vec<ApiRow> = PROTOCOLS
            .into_iter()
            .enumerate()
            .map(|(p, protocol)| {
                let (latencies, errors) = std::mem::take(&mut samples[o * PROTOCOLS.len() + p]);
                ApiRow {
                    operation,
                    protocol,
                    ok: latencies.len() as u64,
                    errors,
                    latency: Latency::of(latencies),
                    p50_vs_http: 1.0,
                    p99_vs_http: 1.0,
                }
            })
            .collect();
        let http = pair
            .iter()
            .find(|r| r.protocol == Protocol::Http)
            .map(|r| r.latency.clone())
            .unwrap_or_default();
        for row in &mut pair {
            row.p50_vs_http = row.latency.p50_ms / http.p50_ms.max(1e-9);
            row.p99_vs_http = row.latency.p99_ms / http.p99_ms.max(1e-9);
        }
        rows.extend(pair);
    }
    let report = ApiReport {
        machine,
        settings: json!({
            "requests_per_round": options.requests,
            "rounds": options.rounds,
            "rows": options.rows,
            "clients": "one per protocol, closed loop, one at a time",
            "grpc": "rowcall-client (tonic, HTTP/2, protobuf), no hedging",
            "http": "reqwest (HTTP/1.1 keep-alive, JSON)",
            "node_bin": options.node_bin.display().to_string(),
        }),
        rows,
    };
    crate::bench::publish(&options.out.join("api.json"), &report, &table(&report))?;
    Ok(report)
}

/// The report as a Markdown table, machine details on top.
pub fn table(report: &ApiReport) -> String {
    let m = &report.machine;
    let mut out = format!(
        "api, {} UTC, {} ({} cores), load average at start {}\n\
         one node, one client per protocol, {} requests x {} interleaved rounds per figure\n\n",
        m["date_utc"].as_str().unwrap_or("?"),
        m["cpu"].as_str().unwrap_or("?"),
        m["cores"],
        m["load_average"].as_str().unwrap_or("?"),
        report.settings["requests_per_round"],
        report.settings["rounds"],
    );
    out.push_str(
        "| operation | protocol | ok | errors | p50 ms | p99 ms | × HTTP p50 | × HTTP p99 |\n",
    );
    out.push_str("|---|---|---:|---:|---:|---:|---:|---:|\n");
    for row in &report.rows {
        out.push_str(&format!(
            "| {:?} | {:?} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} |\n",
            row.operation,
            row.protocol,
            row.ok,
            row.errors,
            row.latency.p50_ms,
            row.latency.p99_ms,
            row.p50_vs_http,
            row.p99_vs_http,
        ));
    }
    out
}

/// Writes `n` static rows, each with its own words; returns (key, words) of each.
async fn seed(clients: &Clients, n: usize) -> Result<Vec<(String, String)>, ChaosError> {
    let mut rows = Vec::with_capacity(n);
    for i in 0..n {
        let key = format!("BENCH_API_{i:04}");
        let words = format!("bench probe {} {}", spell(i), spell(i * 7 + 3));
        let row = json!({"key": key, "type": "static", "auth": "public", "category": "bench",
                         "content": format!("# WHAT: {words}\n\n{{\"n\":{i}}}\n")});
        let response = clients
            .http
            .post(format!("{}/api/directory", clients.url))
            .header("x-terminal-key", ADMIN_KEY)
            .json(&row)
            .send()
            .await
            .map_err(|e| ChaosError::setup(&key, e))?;
        if !response.status().is_success() {
            return Err(ChaosError::setup(&key, response.status()));
        }
        rows.push((key, words));
    }
    Ok(rows)
}

/// A number as a word of letters (`0` → `a`, `27` → `bb`), so every row has its own words.
fn spell(mut n: usize) -> String {
    let mut word = String::new();
    loop {
        word.push(char::from(b'a' + (n % 26) as u8));
        n /= 26;
        if n == 0 {
            return word;
        }
    }
}

/// `requests` requests of one kind, one after another; the latencies of those answered
/// and the count of the others.
async fn measure(
    clients: &Clients,
    operation: Operation,
    protocol: Protocol,
    words: &[(String, String)],
    requests: usize,
) -> (Vec<u64>, u64) {
    let mut latencies = Vec::with_capacity(requests);
    let mut errors = 0;
    for i in 0..requests {
        let (key, ask) = &words[i % words.len()];
        let sent = Instant::now();
        let ok = match (operation, protocol) {
            (Operation::Ask, Protocol::Grpc) => clients.grpc.ask(ask, 5).await.is_ok(),
            (Operation::Invoke, Protocol::Grpc) => clients
                .grpc
                .invoke(key, Some(Map::new()))
                .await
                .is_ok_and(|ran| ran.ok),
            (Operation::Ask, Protocol::Http) => {
                let request = clients
                    .http
                    .get(format!("{}/api/dispatch", clients.url))
                    .query(&[("ask", ask.as_str()), ("limit", "5")]);
                answered(request).await
            }
            (Operation::Invoke, Protocol::Http) => {
                let request = clients
                    .http
                    .post(format!("{}/api/dispatch", clients.url))
                    .json(&json!({"key": key, "args": {}}));
                answered(request).await
            }
        };
        if ok {
            latencies.push(sent.elapsed().as_micros() as u64);
        } else {
            errors += 1;
        }
    }
    (latencies, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_has_its_own_word() {
        assert_eq!(spell(0), "a");
        assert_eq!(spell(25), "z");
        assert_eq!(spell(26), "ab");
        let words: std::collections::BTreeSet<String> = (0..1000).map(spell).collect();
        assert_eq!(words.len(), 1000);
    }
}
