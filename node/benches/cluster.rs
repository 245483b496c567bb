//! Replicated write benchmark with real `rowcall-node` processes on loopback:
//!
//! - insert latency (p50/p99) and throughput at 1 and 64 concurrent clients, through a
//!   3-node cluster (clients spread over all nodes, so two thirds of writes are forwarded)
//!   beside the same load on a 1-node cluster, in one run;
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

async fn cluster(root: &std::path::Path, size: usize) -> Vec<Process> {
    let http = reqwest::Client::new();
    let first = spawn(&[&ANY[..], &["--id", "1"]].concat(), &root.join("n1"), None);
    wait_ready(&http, &first.url).await;
    let join = first.grpc.clone();
    let mut nodes = vec![first];
    for id in 2..=size {
        let id = id.to_string();
        let node = spawn(
            &[&ANY[..], &["--id", &id, "--join", &join]].concat(),
            &root.join(format!("n{id}")),
            None,
        );
        wait_ready(&http, &node.url).await;
        nodes.push(node);
    }
    nodes
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
    println!("insert latency and throughput (sequential inserts per client, loopback, fsync):");
    println!(
        "{:<8} {:>8} {:>10} {:>10} {:>12}",
        "nodes", "clients", "p50", "p99", "inserts/s"
    );
    for size in [1usize, 3] {
        let nodes = cluster(&dir.path().join(format!("c{size}")), size).await;
        let urls: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
        for (clients, per_client) in [(1usize, 500usize), (64, 40)] {
            let (latencies, elapsed) =
                load(&urls, clients, per_client, &format!("B{size}_{clients}")).await;
            println!(
                "{:<8} {:>8} {:>10} {:>10} {:>12.0}",
                size,
                clients,
                ms(percentile(&latencies, 0.5)),
                ms(percentile(&latencies, 0.99)),
                latencies.len() as f64 / elapsed.as_secs_f64()
            );
        }
        drop(nodes);
    }

    println!("time from SIGKILL of the leader to the first successful write on a survivor:");
    let root = dir.path().join("failover");
    let mut nodes = cluster(&root, 3).await;
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
