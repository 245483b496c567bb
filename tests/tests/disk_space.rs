//! Disk space (issue 37): a member whose data folder outgrows `[storage] quota_bytes`, or
//! whose disk runs short of `min_free_bytes`, raises a storage alarm through Raft; while it
//! holds one every node refuses row writes, imports and invocations with 507 naming it and
//! keeps serving reads, asks, confirms and deletes; writes resume once it is back under.

use crate::common;

use std::time::Duration;

use common::cluster::{eventually, Cluster};
use common::{ADMIN, INVOKE};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Node checks often, so alarms come and go within a test's patience.
fn quick_checks(config: &mut rowcall_node::Config) {
    config.storage.check_space_every_ms = 100;
}

async fn put(cluster: &Cluster, node: u64, key: &str) -> (StatusCode, Value) {
    let answer = cluster
        .http
        .post(format!("{}/api/directory", cluster.url(node)))
        .header("x-terminal-key", ADMIN)
        .json(
            &json!({"key": key, "type": "builtin", "target": "echo", "auth": "public",
                      "content": format!("# WHAT: Echo for {key}\n")}),
        )
        .send()
        .await
        .unwrap();
    (answer.status(), answer.json().await.unwrap_or(Value::Null))
}

async fn invoke(cluster: &Cluster, node: u64, key: &str) -> (StatusCode, Value) {
    let answer = cluster
        .http
        .post(format!("{}/api/dispatch", cluster.url(node)))
        .bearer_auth(INVOKE)
        .json(&json!({"key": key, "args": {"said": "hello"}}))
        .send()
        .await
        .unwrap();
    (answer.status(), answer.json().await.unwrap_or(Value::Null))
}

/// Restarts stopped node `id` with its configuration changed by `change`.
async fn restart_changed(
    cluster: &mut Cluster,
    id: u64,
    change: impl FnOnce(&mut rowcall_node::Config),
) {
    let mut config = cluster.member_config(id);
    change(&mut config);
    let handle = common::start_once_unlocked(config, cluster.options())
        .await
        .unwrap_or_else(|e| panic!("node {id} restarts: {e:#}"));
    cluster.members[(id - 1) as usize].handle = Some(handle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_past_its_quota_stops_writes_and_invocations_on_every_node_until_it_is_under_again(
) {
    let mut cluster = Cluster::start_with(3, 0, quick_checks).await;
    assert_eq!(put(&cluster, 1, "ECHO").await.0, 201);
    assert_eq!(put(&cluster, 1, "DOOMED").await.0, 201);
    let (status, before) = invoke(&cluster, 2, "ECHO").await;
    assert_eq!(status, 200, "{before}");
    let receipt = before["proof"]["invocation_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Node 3 comes back with a quota its folder is far past.
    cluster.stop(3).await;
    restart_changed(&mut cluster, 3, |config| config.storage.quota_bytes = 1).await;
    eventually(
        Duration::from_secs(30),
        "node 1 refuses a row write with 507",
        || async { put(&cluster, 1, "REFUSED").await.0 == StatusCode::INSUFFICIENT_STORAGE },
    )
    .await;
    let (_, refused) = put(&cluster, 2, "REFUSED").await;
    assert_eq!(refused["error"]["code"], "no_space", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("node 3's data folder holds") && message.contains("quota"),
        "{message}"
    );
    assert!(
        refused["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("quota_bytes"),
        "{refused}"
    );
    let (status, invoked) = invoke(&cluster, 1, "ECHO").await;
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{invoked}");
    assert_eq!(invoked["error"]["code"], "no_space");

    // Reads, asks, confirms and deletes go on, and the node stays ready.
    let (status, _, row) = cluster.get(1, "/api/directory/ECHO").await;
    assert_eq!(status, 200, "{row}");
    let (status, _, asked) = cluster.get(2, "/api/dispatch?ask=echo").await;
    assert_eq!(status, 200, "{asked}");
    let (status, _, confirmed) = cluster
        .get(3, &format!("/api/dispatch?confirm={receipt}"))
        .await;
    assert_eq!(status, 200, "{confirmed}");
    assert_eq!(confirmed["confirmed"], true);
    let deleted = cluster
        .http
        .delete(format!("{}/api/directory/DOOMED", cluster.url(2)))
        .header("x-terminal-key", ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200, "deletes free space: they are taken");
    let (status, _, ready) = cluster.get(1, "/readyz").await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["storage_alarms"][0]["node"], 3, "{ready}");
    assert_eq!(ready["storage_alarms"][0]["quota_bytes"], 1, "{ready}");
    let metrics = common::metrics_text(&cluster.http, &cluster.url(1)).await;
    assert!(
        metrics.contains("rowcall_storage_alarms{node=\"1\"} 1"),
        "{metrics}"
    );

    // Given room (its quota raised), node 3 clears its alarm and writes resume everywhere.
    cluster.stop(3).await;
    restart_changed(&mut cluster, 3, |_| {}).await;
    eventually(
        Duration::from_secs(30),
        "node 1 takes row writes again",
        || async { put(&cluster, 1, "AFTER").await.0 == StatusCode::CREATED },
    )
    .await;
    let (status, invoked) = invoke(&cluster, 3, "ECHO").await;
    assert_eq!(status, 200, "{invoked}");
    let (_, _, ready) = cluster.get(2, "/readyz").await;
    assert!(ready.get("storage_alarms").is_none(), "{ready}");
    cluster.shutdown().await;
}
