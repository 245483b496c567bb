//! Three real `rowcall-node` processes, started with `--join`, take writes and invocations on
//! every node while the leader is SIGKILLed and restarted. Afterwards every acknowledged row
//! and receipt is on every node, and the nodes' directories and receipt logs are identical.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use support::{get_json, spawn, wait_ready, Process, ADMIN};

#[derive(Default)]
struct Acked {
    rows: Vec<String>,
    receipts: Vec<String>,
}

/// Writes rows (and invokes each one) round-robin over the nodes until told to stop;
/// failures on a node that is down are expected and retried elsewhere.
async fn workload(
    urls: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Acked>>,
    worker: usize,
) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let url = {
            let urls = urls.lock().unwrap();
            urls[(worker + n) % urls.len()].clone()
        };
        n += 1;
        let key = format!("P{worker}_{n:05}");
        let row = json!({"key": key, "type": "static", "auth": "public",
                         "content": format!("# WHAT: process cluster row {n}\n\n{{\"n\":{n}}}\n")});
        let Ok(response) = http
            .post(format!("{url}/api/directory"))
            .header("x-terminal-key", ADMIN)
            .json(&row)
            .send()
            .await
        else {
            continue;
        };
        if response.status() != 201 {
            continue;
        }
        acked.lock().unwrap().rows.push(key.clone());
        let Ok(response) = http
            .post(format!("{url}/api/dispatch"))
            .json(&json!({"key": key}))
            .send()
            .await
        else {
            continue;
        };
        if response.status() == 200 {
            let body: Value = response.json().await.unwrap();
            let id = body["proof"]["invocation_id"].as_str().unwrap().to_owned();
            acked.lock().unwrap().receipts.push(id);
        }
    }
}

async fn leader_of(http: &reqwest::Client, url: &str) -> Option<u64> {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_node_restarts_and_converges_with_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let any = [
        "--http",
        "127.0.0.1:0",
        "--grpc",
        "127.0.0.1:0",
        "--no-demo",
    ];
    let first = spawn(
        &[&any[..], &["--id", "1"]].concat(),
        &dir.path().join("n1"),
        None,
    );
    wait_ready(&http, &first.url).await;
    let join = first.grpc.clone();
    let mut nodes: Vec<Process> = vec![first];
    for id in 2..=3 {
        let id = id.to_string();
        let node = spawn(
            &[&any[..], &["--id", &id, "--join", &join]].concat(),
            &dir.path().join(format!("n{id}")),
            None,
        );
        wait_ready(&http, &node.url).await;
        nodes.push(node);
    }
    let status: Value = get_json(&http, &format!("{}/api/cluster", nodes[0].url)).await;
    assert_eq!(status["members"].as_array().unwrap().len(), 3, "{status}");

    let urls = Arc::new(Mutex::new(
        nodes.iter().map(|n| n.url.clone()).collect::<Vec<_>>(),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Acked::default()));
    let workers: Vec<_> = (0..4)
        .map(|w| tokio::spawn(workload(urls.clone(), stop.clone(), acked.clone(), w)))
        .collect();

    let wait_for_progress = |at_least: usize| {
        let acked = acked.clone();
        async move {
            for _ in 0..600 {
                if acked.lock().unwrap().rows.len() >= at_least {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            panic!("the workload made no progress to {at_least} rows");
        }
    };
    wait_for_progress(50).await;
    let leader = leader_of(&http, &nodes[0].url).await.expect("a leader") as usize;
    let victim = &mut nodes[leader - 1];
    let (http_addr, grpc_addr) = (victim.http.clone(), victim.grpc.clone());
    victim.kill();
    let before = acked.lock().unwrap().rows.len();
    wait_for_progress(before + 50).await;

    // Restart on the same addresses and data folder: no flags beyond those.
    let restarted = spawn(
        &[
            "--id",
            &leader.to_string(),
            "--http",
            &http_addr,
            "--grpc",
            &grpc_addr,
        ],
        &dir.path().join(format!("n{leader}")),
        None,
    );
    nodes[leader - 1] = restarted;
    wait_ready(&http, &nodes[leader - 1].url).await;
    let before = acked.lock().unwrap().rows.len();
    wait_for_progress(before + 50).await;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.unwrap();
    }

    // Converge: every node reaches the highest applied index, then digests must match.
    let mut highest = 0;
    for node in &nodes {
        let digest: Value = http
            .get(format!("{}/api/cluster/digest", node.url))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        highest = highest.max(digest["index"].as_u64().unwrap());
    }
    let mut digests = Vec::new();
    for node in &nodes {
        let digest: Value = http
            .get(format!("{}/api/cluster/digest", node.url))
            .header("x-rowcall-min-index", highest.to_string())
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        digests.push(digest);
    }
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    for digest in &digests {
        assert_eq!(
            digest["rows_sha256"], digests[0]["rows_sha256"],
            "{digests:?}"
        );
        assert_eq!(
            digest["receipts_sha256"], digests[0]["receipts_sha256"],
            "{digests:?}"
        );
        assert!(digest["rows"].as_u64().unwrap() as usize >= acked.rows.len());
    }
    for node in &nodes {
        for key in acked.rows.iter().step_by(7) {
            let status = http
                .get(format!("{}/api/directory/{key}", node.url))
                .send()
                .await
                .unwrap()
                .status();
            assert_eq!(status, 200, "{key} on {}", node.url);
        }
        for id in &acked.receipts {
            let confirmed: Value =
                get_json(&http, &format!("{}/api/dispatch?confirm={id}", node.url)).await;
            assert_eq!(confirmed["confirmed"], true, "{id} on {}", node.url);
        }
    }
}
