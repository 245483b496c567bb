//! Snapshots are one atomic thing (issue 10, item 3). With a snapshot every few entries and
//! the log purged right behind it, followers are stopped and restarted in turn while rows
//! are written, rewritten and deleted and invocations are recorded, so restarted nodes catch
//! up by installing snapshots while they and the leader keep building their own. At the end
//! every node must hold the same directory and receipt log (digests and full listings), each
//! must have purged its log behind a snapshot, and every receipt handed out must confirm on
//! every node. (The race of a build finishing after a newer install is reproduced
//! deterministically in the state machine's unit tests.)

use crate::common;

use std::time::Duration;

use common::cluster::{eventually, Cluster};
use common::{Fetch, ADMIN};
use serde_json::{json, Value};

fn storm(config: &mut rowcall_node::Config) {
    config.raft.snapshot_every = 5;
    config.raft.keep_after_snapshot = 0;
}

/// Every row a node lists, page by page.
async fn listing(cluster: &Cluster, id: u64) -> Vec<Value> {
    let mut rows = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/directory?limit=1000&cursor={c}"),
            None => "/api/directory?limit=1000".to_owned(),
        };
        let (status, _, page) = cluster.get(id, &path).await;
        assert_eq!(status, 200, "{page}");
        rows.extend(page["rows"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return rows,
        }
    }
}

async fn digest(cluster: &Cluster, id: u64) -> Value {
    let mut digest: Value = cluster
        .http
        .get(format!("{}/api/cluster/digest", cluster.url(id)))
        .header("x-terminal-key", ADMIN)
        .fetch()
        .await;
    digest.as_object_mut().unwrap().remove("index");
    digest
}

/// Writes on the leader until one succeeds (the leader may be moving), retrying under one
/// request id; returns the index.
async fn write(
    cluster: &Cluster,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
    request: &str,
) -> u64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let leader = cluster.leader().await;
        let mut request = cluster
            .http
            .request(method.clone(), format!("{}{path}", cluster.url(leader)))
            .header("x-terminal-key", ADMIN)
            .header("idempotency-key", request);
        if let Some(body) = &body {
            request = request.json(body);
        }
        let response = request.send().await.unwrap();
        if response.status().is_success() {
            return response.headers()["x-rowcall-index"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path}: {}",
            response.status()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn frequent_snapshots_and_purges_while_followers_restart_leave_every_node_identical() {
    let mut cluster = Cluster::start_with(3, 0, storm).await;
    let mut last = 0;
    let mut receipts = Vec::new();
    for round in 0..6u64 {
        let leader = cluster.leader().await;
        let down = cluster
            .ids()
            .into_iter()
            .filter(|&id| id != leader)
            .nth((round % 2) as usize)
            .unwrap();
        cluster.stop(down).await;
        for i in 0..25u64 {
            let key = format!("STORM_{:02}", (round * 7 + i) % 40);
            let body = json!({"key": key, "type": "static", "auth": "public", "category": "Storm",
                              "content": format!("# WHAT: storm row {key} round {round} write {i}\n")});
            let request = format!("put-{round}-{i}");
            last = write(
                &cluster,
                reqwest::Method::POST,
                "/api/directory",
                Some(body),
                &request,
            )
            .await;
            if i % 8 == 3 {
                let path = format!("/api/directory/{key}");
                let request = format!("delete-{round}-{i}");
                last = write(&cluster, reqwest::Method::DELETE, &path, None, &request).await;
            }
            if i % 10 == 0 {
                let leader = cluster.leader().await;
                let invoked: Value = cluster
                    .http
                    .post(format!("{}/api/dispatch", cluster.url(leader)))
                    .json(&json!({"key": "STORM_00"}))
                    .fetch()
                    .await;
                if let Some(id) = invoked["proof"]["invocation_id"].as_str() {
                    receipts.push(id.to_owned());
                }
            }
        }
        cluster.restart(down).await;
    }
    cluster.converge(last).await;

    let reference = cluster.ids()[0];
    let (expected_digest, expected_rows) = (
        digest(&cluster, reference).await,
        listing(&cluster, reference).await,
    );
    assert!(expected_rows.len() > 10, "{} rows", expected_rows.len());
    for id in cluster.ids() {
        let (_, _, status) = cluster.get(id, "/api/cluster").await;
        assert!(
            status["purged_index"].as_u64().unwrap_or(0) > 0,
            "node {id} purged: {status}"
        );
        eventually(
            Duration::from_secs(10),
            &format!("node {id} has the reference digest"),
            || {
                let cluster = &cluster;
                let expected = expected_digest.clone();
                async move { digest(cluster, id).await == expected }
            },
        )
        .await;
        assert_eq!(
            listing(&cluster, id).await,
            expected_rows,
            "node {id} lists the same rows"
        );
        for receipt in &receipts {
            let (status, _, confirmed) = cluster
                .get(id, &format!("/api/dispatch?confirm={receipt}"))
                .await;
            assert_eq!(status, 200, "node {id} confirms {receipt}: {confirmed}");
        }
    }
    cluster.shutdown().await;
}

fn bulky(config: &mut rowcall_node::Config) {
    config.raft.snapshot_every = 500;
    config.raft.keep_after_snapshot = 0;
    // Many chunks per snapshot, so the chunked transfer is what catches the node up.
    config.raft.snapshot_chunk_bytes = 64 * 1024;
    config.limits.rate.enabled = false;
}

/// A node that was down while thousands of receipts were recorded (and the log purged behind
/// snapshots) catches up by installing a multi-chunk snapshot file, and ends with the
/// leader's receipt log and directory; every receipt confirms on it. The leader sends the
/// file as it is at rest, compressed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_catches_up_by_a_streamed_snapshot_of_thousands_of_receipts() {
    let sent = catch_up_by_snapshot(false).await;
    assert!(sent.packed > 0 && sent.lines == 0, "{sent:?}");
}

/// A follower of an older build, which installs only plain snapshot files (its hello does
/// not say otherwise), is sent the file's lines and catches up as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_that_installs_only_plain_files_is_sent_the_lines() {
    let sent = catch_up_by_snapshot(true).await;
    assert!(sent.lines > 0 && sent.packed == 0, "{sent:?}");
}

/// Takes a node down while thousands of receipts are recorded, brings it back (as a build
/// that installs only plain snapshot files when `plain_only`), checks it caught up, and
/// returns the snapshot bytes the leader sent it.
async fn catch_up_by_snapshot(plain_only: bool) -> rowcall_node::raft::network::SnapshotBytes {
    use futures_util::StreamExt;
    const RECEIPTS: usize = 3_000;
    let mut cluster = Cluster::start_with(3, 0, bulky).await;
    let body = json!({"key": "BULK", "type": "static", "auth": "public", "category": "Bulk",
                      "content": format!("# WHAT: bulk row\n\n{}\n", "x".repeat(400))});
    let first = write(
        &cluster,
        reqwest::Method::POST,
        "/api/directory",
        Some(body),
        "bulk-row",
    )
    .await;
    let leader = cluster.leader().await;
    let behind = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    cluster.converge(first).await;
    cluster.stop(behind).await;

    let url = cluster.url(leader);
    let receipts: Vec<String> = futures_util::stream::iter(0..RECEIPTS)
        .map(|_| {
            let (http, url) = (cluster.http.clone(), url.clone());
            async move {
                let invoked: Value = http
                    .post(format!("{url}/api/dispatch"))
                    .json(&json!({"key": "BULK"}))
                    .fetch()
                    .await;
                invoked["proof"]["invocation_id"]
                    .as_str()
                    .unwrap_or_else(|| panic!("no receipt: {invoked}"))
                    .to_owned()
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let last = write(
        &cluster,
        reqwest::Method::POST,
        "/api/directory",
        Some(json!({"key": "AFTER", "type": "static", "auth": "public",
                                 "category": "Bulk", "content": "# WHAT: after\n"})),
        "after-row",
    )
    .await;
    // The log the node missed is gone: only a snapshot can catch it up.
    let (_, _, status) = cluster.get(leader, "/api/cluster").await;
    assert!(
        status["purged_index"].as_u64().unwrap_or(0) > first + RECEIPTS as u64 / 2,
        "leader purged: {status}"
    );

    let options = rowcall_node::StartOptions {
        plain_snapshots_only: plain_only,
        ..cluster.options()
    };
    cluster.restart_with(behind, options).await;
    cluster.converge(last).await;
    let expected = digest(&cluster, leader).await;
    assert!(
        expected["receipts"].as_u64().unwrap() >= RECEIPTS as u64,
        "{expected}"
    );
    eventually(
        Duration::from_secs(30),
        &format!("node {behind} has the leader's digest"),
        || {
            let cluster = &cluster;
            let expected = expected.clone();
            async move { digest(cluster, behind).await == expected }
        },
    )
    .await;
    let (_, _, status) = cluster.get(behind, "/api/cluster").await;
    assert!(
        status["snapshot_index"].as_u64().unwrap_or(0) > first,
        "{status}"
    );
    for receipt in receipts.iter().step_by(97) {
        let (code, _, confirmed) = cluster
            .get(behind, &format!("/api/dispatch?confirm={receipt}"))
            .await;
        assert_eq!(code, 200, "node {behind} confirms {receipt}: {confirmed}");
    }
    let sent = cluster.network(leader).snapshot_bytes_sent(behind);
    cluster.shutdown().await;
    sent
}

fn grows_with_the_state(config: &mut rowcall_node::Config) {
    config.raft.snapshot_every = 5;
    config.raft.keep_after_snapshot = 0;
    // The log must take 100 times the last snapshot's bytes: far more than this test writes.
    config.raft.snapshot_log_ratio = 100.0;
}

fn every_few_entries(config: &mut rowcall_node::Config) {
    config.raft.snapshot_every = 5;
    config.raft.keep_after_snapshot = 0;
    config.raft.snapshot_log_ratio = 0.0;
}

async fn snapshot_index(cluster: &Cluster) -> u64 {
    let (_, _, status) = cluster.get(1, "/api/cluster").await;
    status["snapshot_index"].as_u64().unwrap_or(0)
}

async fn insert_rows(cluster: &Cluster, from: u64, to: u64) -> u64 {
    let mut last = 0;
    for i in from..to {
        let body = json!({"key": format!("GROWS_{i:03}"), "type": "static", "auth": "public",
                          "category": "Grows", "content": format!("# WHAT: row {i}\n")});
        last = write(
            cluster,
            reqwest::Method::POST,
            "/api/directory",
            Some(body),
            &format!("grows-{i}"),
        )
        .await;
    }
    last
}

/// A snapshot is rebuilt once the log has grown by its share of the last snapshot's bytes,
/// not every `snapshot_every` entries whatever the state's size: with the share out of
/// reach, a node builds its first snapshot at the floor and no other by itself (while a
/// node on the entry count alone keeps building them), and one an operator asks for is
/// built at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn snapshots_wait_for_the_log_to_grow_by_its_share_of_the_state() {
    let growing = Cluster::start_with(1, 0, grows_with_the_state).await;
    let counting = Cluster::start_with(1, 0, every_few_entries).await;
    for cluster in [&growing, &counting] {
        insert_rows(cluster, 0, 10).await;
        eventually(Duration::from_secs(30), "the first snapshot", || async {
            snapshot_index(cluster).await >= 5
        })
        .await;
    }
    let first = snapshot_index(&growing).await;
    let counted = snapshot_index(&counting).await;
    let mut last = 0;
    for cluster in [&growing, &counting] {
        last = insert_rows(cluster, 10, 60).await;
    }
    // The node on the entry count builds again, up to its last writes; by then the other,
    // whose writes ended first, had as many checks.
    eventually(
        Duration::from_secs(30),
        "snapshots by the entry count",
        || async { snapshot_index(&counting).await > last - 5 },
    )
    .await;
    assert!(counted < last - 5);
    assert_eq!(
        snapshot_index(&growing).await,
        first,
        "no snapshot before the log has its share"
    );
    growing.snapshot_and_purge(1).await;
    eventually(
        Duration::from_secs(30),
        "the snapshot asked for",
        || async { snapshot_index(&growing).await > first },
    )
    .await;
    growing.shutdown().await;
    counting.shutdown().await;
}
