//! Replicated write benchmark with real `rowcall-node` processes on loopback:
//!
//! - insert latency (p50/p99) and throughput at 1 and 16 concurrent clients, on a 1-node and
//!   a 3-node cluster (clients spread over all nodes, so two thirds of writes are
//!   forwarded), each with storage synced the old way (`sled-flush`: sled's flush alone,
//!   `sync_file_range`) and the durable way (`fdatasync`: the group-commit sync of
//!   `store::durable`), all in one run; with the writes each sync round covered on the leader
//!   (requests / rounds from its metrics: the group-commit factor);
//! - time from SIGKILL of the leader to the first successful write on a survivor.
//!
//! `cargo bench -p rowcall-node --bench cluster`. Prints a table; asserts nothing.

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{spawn, wait_ready, Process, ADMIN};

const ANY: [&str; 5] = [
    "--http",
    "127.0.0.1:0",
    "--grpc",
    "127.0.0.1:0",
    "--no-demo",
];

async fn cluster(root: &std::path::Path, size: usize, sync: &str) -> Vec<Process> {
    std::fs::create_dir_all(root).unwrap();
    let config = root.join("rowcall.toml");
    std::fs::write(&config, format!("[storage]\nsync = \"{sync}\"\n")).unwrap();
    let http = reqwest::Client::new();
    let first = spawn(
        &[&ANY[..], &["--id", "1"]].concat(),
        &root.join("n1"),
        Some(&config),
    );
    wait_ready(&http, &first.url).await;
    let join = first.grpc.clone();
    let mut nodes = vec![first];
    for id in 2..=size {
        let id = id.to_string();
        let node = spawn(
            &[&ANY[..], &["--id", &id, "--join", &join]].concat(),
            &root.join(format!("n{id}")),
            Some(&config),
        );
        wait_ready(&http, &node.url).await;
        nodes.push(node);
    }
    nodes
}

/// A counter from a node's `/metrics`.
async fn counter(http: &reqwest::Client, url: &str, name: &str) -> f64 {
    let text = http
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// `clients` concurrent writers, `per_client` sequential inserts each, spread over `urls`.
async fn load(
    urls: &[String],
    clients: usize,
    per_client: usize,
    tag: &str,
) -> (Vec<Duration>, Duration) {
    let urls = Arc::new(urls.to_vec());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let urls = urls.clone();
        let tag = tag.to_owned();
        tasks.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            let url = &urls[c % urls.len()];
            let mut latencies = Vec::with_capacity(per_client);
            for i in 0..per_client {
                let row = json!({"key": format!("{tag}_{c}_{i}"), "type": "static", "content": "# WHAT: benchmark row\n"});
                let t = Instant::now();
                let response = http.post(format!("{url}/api/directory")).header("x-terminal-key", ADMIN).json(&row).send().await.unwrap();
                assert_eq!(response.status(), 201, "{}", response.text().await.unwrap_or_default());
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed();
    all.sort();
    (all, elapsed)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

async fn leader(http: &reqwest::Client, url: &str) -> Option<u64> {
    let status: Value = http
        .get(format!("{url}/api/cluster"))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    status["leader"].as_u64()
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    println!("insert latency and throughput (sequential inserts per client, loopback), by sync:");
    println!(
        "{:<11} {:<6} {:>8} {:>10} {:>10} {:>12} {:>14}",
        "sync", "nodes", "clients", "p50", "p99", "inserts/s", "writes/sync"
    );
    for size in [1usize, 3] {
        for sync in ["sled-flush", "fdatasync"] {
            let nodes = cluster(&dir.path().join(format!("c{size}-{sync}")), size, sync).await;
            let urls: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
            let leader_url = match leader(&http, &urls[0]).await {
                Some(id) => urls[id as usize - 1].clone(),
                None => urls[0].clone(),
            };
            for (clients, per_client) in [(1usize, 400usize), (16, 50)] {
                let before = (
                    counter(&http, &leader_url, "rowcall_store_sync_requests_total").await,
                    counter(&http, &leader_url, "rowcall_store_syncs_total").await,
                );
                let tag = format!(
                    "B{size}_{}_{clients}",
                    sync.replace('-', "_").to_uppercase()
                );
                let (latencies, elapsed) = load(&urls, clients, per_client, &tag).await;
                let requests = counter(&http, &leader_url, "rowcall_store_sync_requests_total")
                    .await
                    - before.0;
                let rounds =
                    counter(&http, &leader_url, "rowcall_store_syncs_total").await - before.1;
                println!(
                    "{:<11} {:<6} {:>8} {:>10} {:>10} {:>12.0} {:>14.2}",
                    sync,
                    size,
                    clients,
                    ms(percentile(&latencies, 0.5)),
                    ms(percentile(&latencies, 0.99)),
                    latencies.len() as f64 / elapsed.as_secs_f64(),
                    requests / rounds.max(1.0)
                );
            }
            drop(nodes);
        }
    }

    println!("time from SIGKILL of the leader to the first successful write on a survivor:");
    let root = dir.path().join("failover");
    let mut nodes = cluster(&root, 3, "fdatasync").await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    for round in 0..3 {
        let leader_id = leader(&http, &nodes[0].url).await.expect("leader") as usize;
        let survivors: Vec<String> = nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| i + 1 != leader_id)
            .map(|(_, n)| n.url.clone())
            .collect();
        let (http_addr, grpc_addr) = (
            nodes[leader_id - 1].http.clone(),
            nodes[leader_id - 1].grpc.clone(),
        );
        nodes[leader_id - 1].kill();
        let killed = Instant::now();
        let mut attempt = 0usize;
        loop {
            let url = &survivors[attempt % survivors.len()];
            attempt += 1;
            let row = json!({"key": format!("FAILOVER_{round}_{attempt}"), "type": "static"});
            let ok = http
                .post(format!("{url}/api/directory"))
                .header("x-terminal-key", ADMIN)
                .json(&row)
                .send()
                .await
                .is_ok_and(|r| r.status() == 201);
            if ok {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        println!(
            "  round {round}: killed node {leader_id}, first write after {} ({attempt} attempts)",
            ms(killed.elapsed())
        );
        let restarted = spawn(
            &[
                "--id",
                &leader_id.to_string(),
                "--http",
                &http_addr,
                "--grpc",
                &grpc_addr,
            ],
            &root.join(format!("n{leader_id}")),
            None,
        );
        wait_ready(&http, &restarted.url).await;
        nodes[leader_id - 1] = restarted;
    }
}
