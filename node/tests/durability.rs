//! Durability with the real binary: acknowledged inserts and invocations survive SIGKILL.
//!
//! A `rowcall-node` process takes 500 inserts and 200 invocations, is killed with SIGKILL
//! (no shutdown, no flush on exit), and is restarted on the same data folder: every
//! acknowledged row and every receipt it handed out must be there. The second scenario does
//! the same after snapshots were taken and the log purged behind them. The third kills the
//! process in the middle of the writes: every insert answered before the kill is there with
//! its content, and no row appears that was never sent.

mod support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use support::{get_json, spawn, wait_ready, Process, ADMIN};

/// Starts the binary with its snapshot policy in a config file (so that path is real too).
fn start(root: &std::path::Path, snapshot_every: u64) -> Process {
    start_with(root, snapshot_every, "")
}

/// [`start`] with more of the config file (`storage` settings).
fn start_with(root: &std::path::Path, snapshot_every: u64, storage: &str) -> Process {
    start_flags(root, snapshot_every, storage, &[])
}

/// [`start_with`] and more flags.
fn start_flags(
    root: &std::path::Path,
    snapshot_every: u64,
    storage: &str,
    flags: &[&str],
) -> Process {
    let config = root.join("rowcall.toml");
    std::fs::write(
        &config,
        format!(
            "[raft]\nsnapshot_every = {snapshot_every}\nkeep_after_snapshot = 0\n\
             [storage]\n{storage}\n"
        ),
    )
    .unwrap();
    let mut args = vec![
        "--http",
        "127.0.0.1:0",
        "--grpc",
        "127.0.0.1:0",
        "--no-demo",
    ];
    args.extend_from_slice(flags);
    spawn(&args, &root.join("data"), Some(&config))
}

fn row(i: usize) -> Value {
    json!({
        "key": format!("DURABLE_{i:04}"), "type": "static", "auth": "public",
        "category": "Durability",
        "content": format!("# WHAT: Durable row number {i}\n\n{{\"n\":{i}}}\n"),
    })
}

/// Writes 500 rows and 200 invocations (8 at a time), returning the acknowledged
/// receipts as (id, key).
async fn write_load(http: &reqwest::Client, url: &str) -> Vec<(String, String)> {
    let mut inserts = tokio::task::JoinSet::new();
    for chunk in (0..500).collect::<Vec<_>>().chunks(63) {
        let (http, url, chunk) = (http.clone(), url.to_owned(), chunk.to_vec());
        inserts.spawn(async move {
            for i in chunk {
                let response = http
                    .post(format!("{url}/api/directory"))
                    .header("x-terminal-key", ADMIN)
                    .json(&row(i))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), 201, "insert {i}");
            }
        });
    }
    while let Some(done) = inserts.join_next().await {
        done.unwrap();
    }
    let mut invokes = tokio::task::JoinSet::new();
    for worker in 0..8 {
        let (http, url) = (http.clone(), url.to_owned());
        invokes.spawn(async move {
            let mut receipts = Vec::new();
            for n in 0..25 {
                let key = format!("DURABLE_{:04}", worker * 25 + n);
                let answer: Value = http
                    .post(format!("{url}/api/dispatch"))
                    .json(&json!({"key": key}))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                assert_eq!(answer["ok"], true, "{answer}");
                receipts.push((
                    answer["proof"]["invocation_id"]
                        .as_str()
                        .unwrap()
                        .to_owned(),
                    key,
                ));
            }
            receipts
        });
    }
    let mut receipts = Vec::new();
    while let Some(done) = invokes.join_next().await {
        receipts.extend(done.unwrap());
    }
    receipts
}

async fn verify(http: &reqwest::Client, url: &str, receipts: &[(String, String)]) {
    let counts: Value = get_json(http, &format!("{url}/api/directory/counts")).await;
    assert_eq!(counts["rows_total"], 500, "{counts}");
    for i in 0..500 {
        let got: Value = get_json(http, &format!("{url}/api/directory/DURABLE_{i:04}")).await;
        assert_eq!(got["content"], row(i)["content"], "row {i}");
    }
    for (id, key) in receipts {
        let confirmed: Value = http
            .get(format!("{url}/api/dispatch"))
            .query(&[("confirm", id)])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(confirmed["confirmed"], true, "receipt {id}");
        assert_eq!(&confirmed["key"], key);
    }
    let asked: Value = get_json(
        http,
        &format!("{url}/api/dispatch?ask=durable+row+number+417"),
    )
    .await;
    assert_eq!(
        asked["best"]["key"], "DURABLE_0417",
        "the resolver index is rebuilt: {asked}"
    );
}

async fn kill_and_restart(snapshot_every: u64, check_snapshot: bool) {
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let mut node = start(dir.path(), snapshot_every);
    wait_ready(&http, &node.url).await;
    let receipts = write_load(&http, &node.url).await;
    assert_eq!(receipts.len(), 200);
    if check_snapshot {
        let mut purged = 0;
        for _ in 0..200 {
            let cluster: Value = get_json(&http, &format!("{}/api/cluster", node.url)).await;
            purged = cluster["purged_index"].as_u64().unwrap_or(0);
            if purged > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            purged > 0,
            "a snapshot was taken and the log purged behind it"
        );
    }
    node.kill();

    let mut node = start(dir.path(), snapshot_every);
    wait_ready(&http, &node.url).await;
    verify(&http, &node.url, &receipts).await;
    node.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill() {
    kill_and_restart(1_000_000, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill_after_snapshot_and_purge() {
    kill_and_restart(100, true).await;
}

/// Starts a node in `root`, gives it the write load and kills it; returns its receipts.
async fn loaded_and_killed(
    http: &reqwest::Client,
    root: &std::path::Path,
) -> Vec<(String, String)> {
    let mut node = start(root, 100);
    wait_ready(http, &node.url).await;
    let receipts = write_load(http, &node.url).await;
    node.kill();
    receipts
}

/// A data folder written without compression (the default, and every release before the
/// setting), killed mid-life, opens compressed with every row and receipt, and converts back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_written_uncompressed_opens_compressed_with_everything_kept() {
    use rowcall_node::store::compression::written_with;
    let dir = tempfile::tempdir().unwrap();
    let sled = dir.path().join("data").join("sled");
    let http = reqwest::Client::new();
    let receipts = loaded_and_killed(&http, dir.path()).await;
    assert_eq!(written_with(&sled).unwrap(), Some(false));

    let mut node = start_with(dir.path(), 100, "compression = true");
    wait_ready(&http, &node.url).await;
    verify(&http, &node.url, &receipts).await;
    node.kill();
    assert_eq!(written_with(&sled).unwrap(), Some(true), "converted");

    let mut node = start(dir.path(), 100);
    wait_ready(&http, &node.url).await;
    verify(&http, &node.url, &receipts).await;
    node.kill();
    assert_eq!(written_with(&sled).unwrap(), Some(false), "and back");
}

/// `--defragment` rewrites a killed node's database with its live data alone: smaller, and
/// with every row and receipt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_defragmented_database_is_smaller_and_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let sled = dir.path().join("data").join("sled");
    let http = reqwest::Client::new();
    let receipts = loaded_and_killed(&http, dir.path()).await;
    let before = folder_bytes(&sled);

    let mut node = start_flags(dir.path(), 100, "", &["--defragment"]);
    wait_ready(&http, &node.url).await;
    let after = folder_bytes(&sled);
    verify(&http, &node.url, &receipts).await;
    node.kill();
    assert!(after < before, "{before} -> {after} bytes");
}

/// The marker file asks for the same rewrite as the flag, once: the node removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marker_file_in_the_data_folder_defragments_once() {
    let dir = tempfile::tempdir().unwrap();
    let sled = dir.path().join("data").join("sled");
    let marker = dir.path().join("data").join("defragment");
    let http = reqwest::Client::new();
    let receipts = loaded_and_killed(&http, dir.path()).await;
    let before = folder_bytes(&sled);

    std::fs::write(&marker, b"").unwrap();
    let mut node = start(dir.path(), 100);
    wait_ready(&http, &node.url).await;
    let after = folder_bytes(&sled);
    verify(&http, &node.url, &receipts).await;
    node.kill();
    assert!(after < before, "{before} -> {after} bytes");
    assert!(!marker.exists(), "the marker is removed once done");
}

fn folder_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            match entry.metadata().unwrap() {
                meta if meta.is_dir() => folder_bytes(&entry.path()),
                meta => meta.len(),
            }
        })
        .sum()
}

/// What the writers of the mid-write kill got answered.
#[derive(Default)]
struct Answered {
    /// Row numbers a write was sent for.
    sent: BTreeSet<usize>,
    /// Row numbers whose insert was answered 201.
    rows: BTreeSet<usize>,
}

/// Inserts rows `from..` until the node stops answering. Inserts only: an invocation
/// flushes the store for its receipt, which would make earlier rows durable by accident.
async fn write_until_killed(
    http: reqwest::Client,
    url: String,
    from: usize,
    answered: Arc<Mutex<Answered>>,
) {
    for i in from.. {
        answered.lock().unwrap().sent.insert(i);
        let Ok(response) = http
            .post(format!("{url}/api/directory"))
            .header("x-terminal-key", ADMIN)
            .json(&row(i))
            .send()
            .await
        else {
            return;
        };
        assert_eq!(response.status(), 201, "insert {i}");
        answered.lock().unwrap().rows.insert(i);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill_in_the_middle_of_writes() {
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let mut node = start(dir.path(), 1_000_000);
    wait_ready(&http, &node.url).await;
    let answered = Arc::new(Mutex::new(Answered::default()));
    let writers: Vec<_> = (0..6)
        .map(|w| {
            let (http, url) = (http.clone(), node.url.clone());
            tokio::spawn(write_until_killed(http, url, w * 1000, answered.clone()))
        })
        .collect();
    // Killed once enough was answered, with the writers still sending.
    for _ in 0..2400 {
        if answered.lock().unwrap().rows.len() >= 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        answered.lock().unwrap().rows.len() >= 200,
        "writes progressed"
    );
    node.kill();
    for writer in writers {
        writer.await.unwrap();
    }
    let answered = std::mem::take(&mut *answered.lock().unwrap());

    let node = start(dir.path(), 1_000_000);
    wait_ready(&http, &node.url).await;
    for i in &answered.rows {
        let got: Value =
            get_json(&http, &format!("{}/api/directory/DURABLE_{i:04}", node.url)).await;
        assert_eq!(got["content"], row(*i)["content"], "row {i}: {got}");
    }
    // Rows whose answer the kill cut off may be there or not; nothing else may.
    let listed: Value = get_json(&http, &format!("{}/api/directory?limit=1000", node.url)).await;
    assert!(listed["next_cursor"].is_null(), "one page holds them");
    for row in listed["rows"].as_array().unwrap() {
        let key = row["key"].as_str().unwrap();
        let sent = key
            .strip_prefix("DURABLE_")
            .and_then(|n| n.parse().ok())
            .is_some_and(|i: usize| answered.sent.contains(&i));
        assert!(sent, "{key} was never sent");
    }
}
