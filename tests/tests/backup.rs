//! Backup and restore (`rowcall backup FILE`, `rowcall-node --restore FILE --bootstrap`). A
//! backup taken from a follower of a 3-node cluster while writes go on founds a new cluster
//! holding exactly what the source held at the backup's index — the rows written before it
//! at their versions, none written after — whose receipts confirm and which takes writes.
//! Taken once the writes stop, the restored cluster's digests equal the source's.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::cluster::{eventually, Cluster};
use common::{Fetch, TestNode, ADMIN};
use rowcall_client::node::NodeClient;
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

fn row(key: &str) -> Value {
    json!({"key": key, "type": "static", "auth": "public", "category": "Backup",
           "content": format!("# WHAT: Row {key} of the backup test\n\n{{\"key\":\"{key}\"}}\n")})
}

/// Writes `row` through the node at `url`; its version, or `None` if the write failed.
async fn put(http: &reqwest::Client, url: &str, row: &Value) -> Option<u64> {
    let response = http
        .post(format!("{url}/api/directory"))
        .bearer_auth(ADMIN)
        .json(row)
        .send()
        .await
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    response.json::<Value>().await.ok()?["version"].as_u64()
}

/// Every row the node at `url` lists, as key → version.
async fn versions(http: &reqwest::Client, url: &str) -> BTreeMap<String, u64> {
    let mut rows = BTreeMap::new();
    let mut cursor = String::new();
    loop {
        let page = http
            .get(format!("{url}/api/directory?limit=1000&cursor={cursor}"))
            .bearer_auth(ADMIN)
            .fetch()
            .await;
        for row in page["rows"].as_array().expect("a listing") {
            rows.insert(
                row["key"].as_str().unwrap().to_owned(),
                row["version"].as_u64().unwrap(),
            );
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => return rows,
        }
    }
}

async fn digest(http: &reqwest::Client, url: &str) -> Value {
    let mut digest = http
        .get(format!("{url}/api/cluster/digest"))
        .bearer_auth(ADMIN)
        .fetch()
        .await;
    digest.as_object_mut().unwrap().remove("index");
    digest
}

/// A one-node cluster founded from the backup at `file`.
async fn restored(file: &Path) -> TestNode {
    let file = file.to_owned();
    common::start_with(false, move |config| {
        config.cluster.bootstrap = true;
        config.cluster.restore = Some(file);
    })
    .await
}

/// A node on `data` that founds its cluster from the backup `file`.
fn restoring(data: PathBuf, file: &Path) -> rowcall_node::Config {
    let mut config = rowcall_node::Config::default();
    config.node.data = data;
    config.node.http = "127.0.0.1:0".parse().unwrap();
    config.node.grpc = "127.0.0.1:0".parse().unwrap();
    config.auth.admin_key = Some(ADMIN.into());
    config.cluster.bootstrap = true;
    config.cluster.restore = Some(file.to_owned());
    config
}

/// Why a node with `config` does not start.
async fn refusal(config: rowcall_node::Config) -> String {
    match rowcall_node::start(config).await {
        Ok(_) => panic!("the node started"),
        Err(e) => format!("{e:#}"),
    }
}

fn sha256_of(file: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(file).unwrap()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_taken_under_load_restores_the_state_at_its_index() {
    let cluster = Cluster::start(3, 0).await;
    let http = cluster.http.clone();
    let leader = cluster.leader().await;
    let follower = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    let leader_url = cluster.url(leader);

    // Receipts to find again.
    put(&http, &leader_url, &row("BACKUP_ECHO")).await.unwrap();
    let mut receipts = Vec::new();
    for _ in 0..3 {
        let answer = http
            .post(format!("{leader_url}/api/dispatch"))
            .bearer_auth(ADMIN)
            .json(&json!({"key": "BACKUP_ECHO"}))
            .fetch()
            .await;
        receipts.push(
            answer["proof"]["invocation_id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }

    // Writes go on through the leader while the backup is taken from a follower.
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let load = tokio::spawn({
        let (http, url, stop, written) = (
            http.clone(),
            leader_url.clone(),
            stop.clone(),
            written.clone(),
        );
        async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                if put(&http, &url, &row(&format!("LOAD_{n:05}")))
                    .await
                    .is_some()
                {
                    written.fetch_add(1, Ordering::Relaxed);
                }
                n += 1;
            }
        }
    });
    let at_least = |n: u64| {
        let written = written.clone();
        async move {
            eventually(Duration::from_secs(60), &format!("{n} writes"), || {
                let done = written.load(Ordering::Relaxed) >= n;
                async move { done }
            })
            .await
        }
    };
    at_least(20).await;
    let dir = tempfile::tempdir().unwrap();
    let under_load: PathBuf = dir.path().join("under-load.backup");
    let saved = NodeClient::new(&cluster.url(follower))
        .unwrap()
        .backup(ADMIN, &under_load)
        .await
        .unwrap();
    let after = written.load(Ordering::Relaxed);
    at_least(after + 20).await;
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    assert_eq!(
        sha256_of(&under_load),
        saved.sha256,
        "the file is what the node sent"
    );

    // The restored cluster holds the source's rows at the backup's index, no later ones.
    let source = versions(&http, &leader_url).await;
    let node = restored(&under_load).await;
    let expected: BTreeMap<String, u64> = source
        .iter()
        .filter(|(_, &version)| version <= saved.index)
        .map(|(key, &version)| (key.clone(), version))
        .collect();
    assert!(
        expected.len() > 20 && expected.len() < source.len(),
        "the backup fell between writes: {} of {} rows at index {}",
        expected.len(),
        source.len(),
        saved.index
    );
    assert_eq!(versions(&node.http, &node.url).await, expected);
    for id in &receipts {
        let confirmed = node
            .http
            .get(format!("{}/api/dispatch?confirm={id}", node.url))
            .fetch()
            .await;
        assert_eq!(confirmed["confirmed"], true, "{confirmed}");
    }
    // A new cluster: it takes writes of its own.
    assert!(put(&node.http, &node.url, &row("AFTER_RESTORE"))
        .await
        .is_some());
    node.handle.shutdown().await;

    // Once writes have stopped, a backup restores to the same digests. (From the same
    // follower: its snapshot of the first backup is older than what it has applied now.)
    let quiet: PathBuf = dir.path().join("quiet.backup");
    NodeClient::new(&cluster.url(follower))
        .unwrap()
        .backup(ADMIN, &quiet)
        .await
        .unwrap();
    let node = restored(&quiet).await;
    let restored_digest = digest(&node.http, &node.url).await;
    assert_eq!(digest(&http, &leader_url).await, restored_digest);
    assert!(
        restored_digest["receipts"].as_u64().unwrap() >= 3,
        "{restored_digest}"
    );
    node.handle.shutdown().await;
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_backup_needs_the_admin_key_and_a_restore_a_backup() {
    let node = common::start(true).await;
    let status = node
        .http
        .get(format!("{}/api/cluster/backup", node.url))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 401);
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("rows.jsonl");
    std::fs::write(&rows, "{\"key\":\"A\"}\n").unwrap();
    let refused = refusal(restoring(dir.path().join("data"), &rows)).await;
    assert!(refused.contains("is not a rowcall backup"), "{refused}");

    // A backup cut short is refused and leaves the folder fresh: the whole one then works.
    let whole = dir.path().join("whole.backup");
    NodeClient::new(&node.url)
        .unwrap()
        .backup(ADMIN, &whole)
        .await
        .unwrap();
    let bytes = std::fs::read(&whole).unwrap();
    let cut = dir.path().join("cut.backup");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let folder = dir.path().join("restored");
    let refused = refusal(restoring(folder.clone(), &cut)).await;
    assert!(refused.contains("damaged or cut short"), "{refused}");
    // The refused start's last tasks may hold the folder's database for a moment.
    let restored =
        crate::common::start_once_unlocked(restoring(folder, &whole), Default::default())
            .await
            .expect("the whole backup restores");
    restored
        .app
        .raft
        .wait(Some(Duration::from_secs(10)))
        .current_leader(1, "the restored node leads")
        .await
        .unwrap();
    let url = restored.url();
    assert_eq!(
        versions(&node.http, &url).await,
        versions(&node.http, &node.url).await
    );
    restored.shutdown().await;
    node.handle.shutdown().await;
}
