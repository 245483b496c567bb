//! Three real `rowcall-node` processes, started with `--join`, take writes and invocations on
//! every node. The leader is SIGKILLed in the middle of the writes and restarted, and the
//! leader of that moment is SIGKILLed again after the writes stopped. What must hold:
//!
//! - while the second victim is down, the two survivors serve every acknowledged row, by
//!   content and version, and every receipt handed out;
//! - after its restart, on every node: every acknowledged row with exactly the content and
//!   version its write was answered with; every receipt confirms, names its row and the row
//!   version it ran, and stores the output the client received; no row that no write
//!   attempted; and identical directory and receipt-log digests at one index.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use support::{get_json, invoke, spawn, wait_ready, Process, ADMIN};

/// A row whose write was acknowledged: what was written and the version it got.
#[derive(Debug, Clone)]
struct AckedRow {
    content: String,
    version: u64,
}

/// An invocation that was answered: the row, and the result the client received.
#[derive(Debug, Clone)]
struct AckedReceipt {
    key: String,
    row_version: u64,
    result: Value,
}

#[derive(Default)]
struct Acked {
    /// Every key a write was sent for, acknowledged or not.
    attempted: BTreeSet<String>,
    rows: BTreeMap<String, AckedRow>,
    receipts: BTreeMap<String, AckedReceipt>,
}

/// Writes rows (and invokes each one) round-robin over the nodes until told to stop;
/// failures on a node that is down are expected and the next key goes elsewhere.
async fn workload(
    urls: Arc<Vec<String>>,
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
        let url = &urls[(worker + n) % urls.len()];
        n += 1;
        let key = format!("P{worker}_{n:05}");
        let content = format!("# WHAT: process cluster row {worker} {n}\n\n{{\"n\":{n}}}\n");
        let row = json!({"key": key, "type": "static", "auth": "public", "content": content});
        acked.lock().unwrap().attempted.insert(key.clone());
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
        let Ok(answer) = response.json::<Value>().await else {
            continue;
        };
        let version = answer["version"]
            .as_u64()
            .expect("a write answers its version");
        acked
            .lock()
            .unwrap()
            .rows
            .insert(key.clone(), AckedRow { content, version });
        let Some((StatusCode::OK, body)) = invoke(&http, url, &key).await else {
            continue;
        };
        let id = body["proof"]["invocation_id"].as_str().unwrap().to_owned();
        let receipt = AckedReceipt {
            key,
            row_version: version,
            result: body["result"].clone(),
        };
        acked.lock().unwrap().receipts.insert(id, receipt);
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

/// The leader as the nodes at `urls` see it, once one other than `not` is known (polling,
/// bounded).
async fn await_leader(http: &reqwest::Client, urls: &[&str], not: Option<u64>) -> u64 {
    for _ in 0..800 {
        for url in urls {
            match leader_of(http, url).await {
                Some(leader) if Some(leader) != not => return leader,
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no leader among {urls:?}");
}

/// GETs `path` on `url` with the admin key, waiting until the node applied `min_index`.
async fn read(http: &reqwest::Client, url: &str, path: &str, min_index: u64) -> (u16, Value) {
    let response = http
        .get(format!("{url}{path}"))
        .header("x-terminal-key", ADMIN)
        .header("x-rowcall-min-index", min_index.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Every key the node holds, through the paged directory.
async fn keys_on(http: &reqwest::Client, url: &str, min_index: u64) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut cursor = String::new();
    loop {
        let path = format!("/api/directory?limit=500&cursor={cursor}");
        let (status, page) = read(http, url, &path, min_index).await;
        assert_eq!(status, 200, "{page}");
        for row in page["rows"].as_array().unwrap() {
            keys.insert(row["key"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(next) if !next.is_empty() => cursor = next.to_owned(),
            _ => return keys,
        }
    }
}

/// Every acknowledged row and receipt is on the node at `url` by content, and it holds no
/// row that no write attempted.
async fn check_node(http: &reqwest::Client, url: &str, acked: &Acked, min_index: u64) {
    for (key, row) in &acked.rows {
        let (status, got) = read(http, url, &format!("/api/directory/{key}"), min_index).await;
        assert_eq!(status, 200, "{key} on {url}: {got}");
        assert_eq!(got["content"], row.content, "{key} on {url}");
        assert_eq!(got["version"], row.version, "{key} on {url}");
    }
    for (id, receipt) in &acked.receipts {
        let (status, confirmed) =
            read(http, url, &format!("/api/dispatch?confirm={id}"), min_index).await;
        assert_eq!(status, 200, "{id} on {url}: {confirmed}");
        assert_eq!(confirmed["confirmed"], true, "{id} on {url}");
        assert_eq!(confirmed["key"], receipt.key, "{id} on {url}");
        let (status, stored) = read(http, url, &format!("/api/receipts/{id}"), min_index).await;
        assert_eq!(status, 200, "{id} on {url}: {stored}");
        assert_eq!(stored["key"], receipt.key, "{id} on {url}");
        assert_eq!(stored["ok"], true, "{id} on {url}");
        assert_eq!(stored["row_version"], receipt.row_version, "{id} on {url}");
        let output: Value = serde_json::from_str(stored["output"].as_str().unwrap()).unwrap();
        assert_eq!(output, receipt.result, "{id} on {url}");
    }
    let keys = keys_on(http, url, min_index).await;
    let unexplained: Vec<&String> = keys.difference(&acked.attempted).collect();
    assert!(
        unexplained.is_empty(),
        "rows nobody wrote on {url}: {unexplained:?}"
    );
}

/// The node's applied index (from its digest), if it answers.
async fn applied(http: &reqwest::Client, url: &str) -> Option<u64> {
    let (status, digest) = read(http, url, "/api/cluster/digest", 0).await;
    (status == 200).then(|| digest["index"].as_u64()).flatten()
}

/// Waits (polling, bounded) until every node at `urls` has applied the highest index any of
/// them reports, and returns that index: reads with it as `min_index` then answer at once.
async fn caught_up(http: &reqwest::Client, urls: &[&str]) -> u64 {
    let mut top = 0;
    for url in urls {
        top = top.max(applied(http, url).await.expect("a digest"));
    }
    for url in urls {
        let mut at = 0;
        for _ in 0..800 {
            at = applied(http, url).await.unwrap_or(0);
            if at >= top {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(at >= top, "{url} stayed at {at}, behind {top}");
    }
    top
}

/// Restarts node `id` on its addresses and data folder: no flags beyond those.
fn restart(id: u64, http: &str, grpc: &str, data: &std::path::Path) -> Process {
    spawn(
        &["--id", &id.to_string(), "--http", http, "--grpc", grpc],
        data,
        None,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_rows_and_receipts_survive_leader_kills_during_and_after_writes() {
    let dir = tempfile::tempdir().unwrap();
    let data = |id: u64| dir.path().join(format!("n{id}"));
    let http = reqwest::Client::new();
    let any = [
        "--http",
        "127.0.0.1:0",
        "--grpc",
        "127.0.0.1:0",
        "--no-demo",
    ];
    let first = spawn(&[&any[..], &["--id", "1"]].concat(), &data(1), None);
    wait_ready(&http, &first.url).await;
    let join = first.grpc.clone();
    let mut nodes: Vec<Process> = vec![first];
    for id in 2..=3 {
        let node = spawn(
            &[&any[..], &["--id", &id.to_string(), "--join", &join]].concat(),
            &data(id),
            None,
        );
        wait_ready(&http, &node.url).await;
        nodes.push(node);
    }
    let status: Value = get_json(&http, &format!("{}/api/cluster", nodes[0].url)).await;
    assert_eq!(status["members"].as_array().unwrap().len(), 3, "{status}");
    // Restarts reuse the addresses, so the workload's list stays right.
    let urls: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();

    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Acked::default()));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let urls = Arc::new(urls.clone());
            tokio::spawn(workload(urls, stop.clone(), acked.clone(), w))
        })
        .collect();
    let wait_for_progress = |at_least: usize| {
        let acked = acked.clone();
        async move {
            for _ in 0..1200 {
                if acked.lock().unwrap().receipts.len() >= at_least {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            panic!("the workload made no progress to {at_least} receipts");
        }
    };
    let progress = || acked.lock().unwrap().receipts.len();

    // 1. The leader dies in the middle of the writes; they go on without it.
    wait_for_progress(50).await;
    let all: Vec<&str> = urls.iter().map(String::as_str).collect();
    let leader = await_leader(&http, &all, None).await;
    let victim = &mut nodes[leader as usize - 1];
    let (http_addr, grpc_addr) = (victim.http.clone(), victim.grpc.clone());
    assert!(!stop.load(Ordering::Relaxed), "writes are still running");
    victim.kill();
    wait_for_progress(progress() + 50).await;
    nodes[leader as usize - 1] = restart(leader, &http_addr, &grpc_addr, &data(leader));
    wait_ready(&http, &nodes[leader as usize - 1].url).await;
    wait_for_progress(progress() + 50).await;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.unwrap();
    }
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    assert!(acked.rows.len() >= 150 && acked.receipts.len() >= 150);

    // 2. The leader of now dies after the writes: the survivors hold everything.
    let leader = await_leader(&http, &all, None).await;
    let victim = &mut nodes[leader as usize - 1];
    let (http_addr, grpc_addr) = (victim.http.clone(), victim.grpc.clone());
    victim.kill();
    let survivors: Vec<&str> = nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| *i as u64 + 1 != leader)
        .map(|(_, n)| n.url.as_str())
        .collect();
    await_leader(&http, &survivors, Some(leader)).await;
    let top = caught_up(&http, &survivors).await;
    for url in &survivors {
        check_node(&http, url, &acked, top).await;
    }

    // 3. Back up: every node holds exactly what was acknowledged, and they agree.
    nodes[leader as usize - 1] = restart(leader, &http_addr, &grpc_addr, &data(leader));
    wait_ready(&http, &nodes[leader as usize - 1].url).await;
    let top = caught_up(&http, &all).await;
    let mut digests = Vec::new();
    for url in &all {
        check_node(&http, url, &acked, top).await;
        let (_, digest) = read(&http, url, "/api/cluster/digest", top).await;
        digests.push(digest);
    }
    for digest in &digests {
        assert_eq!(
            digest["rows_sha256"], digests[0]["rows_sha256"],
            "{digests:?}"
        );
        assert_eq!(
            digest["receipts_sha256"], digests[0]["receipts_sha256"],
            "{digests:?}"
        );
    }
}

/// A node founding a cluster serves its peers before the demo catalogue is written; an
/// outside poller (a load balancer, a newcomer's script) that waits for `/readyz` must then
/// find the catalogue, never an empty one in the moment between the election and the write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_founding_node_is_ready_only_once_its_demo_catalogue_is_there() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let http_addr = format!("127.0.0.1:{port}");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_rowcall-node"))
        .args(["--id", "1", "--http", &http_addr, "--grpc", "127.0.0.1:0"])
        .arg("--data")
        .arg(dir.path())
        .env("ROWCALL_ADMIN_KEY", ADMIN)
        .env("ROWCALL_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn rowcall-node");
    let _node = Process {
        child,
        url: format!("http://{http_addr}"),
        http: http_addr.clone(),
        grpc: String::new(),
    };
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the node never became ready"
        );
        // Polled as tightly as a poller can: the window before the fix was one write long.
        if let Ok(answer) = http.get(format!("http://{http_addr}/readyz")).send().await {
            let ok = answer.status() == StatusCode::OK;
            let body: Value = answer.json().await.unwrap_or_default();
            if ok {
                assert_eq!(body.get("starting"), None, "{body}");
                break;
            }
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let answer = get_json(
        &http,
        &format!("http://{http_addr}/api/dispatch?ask=what+time+is+it"),
    )
    .await;
    assert!(
        answer["count"].as_u64().unwrap_or(0) > 0,
        "the first ask after /readyz said ready found nothing: {answer}"
    );
    assert_eq!(answer["best"]["key"], "TIME_NOW", "{answer}");
}
