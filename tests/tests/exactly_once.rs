//! Exactly-once writes and honest outcomes (issue 10, item 5). A write carries a request id
//! (`Idempotency-Key`, or one the node makes); a repeat is answered with the first outcome
//! and applied once. A write whose answer is lost is 504 `outcome_unknown` with the request
//! id, not 503; a retry with that id gets the first outcome (not a 409 from its own
//! `if_version`). A write committed but not yet applied on the node that took it is answered
//! as committed, with its index. Two attempts of one write that both land (a client's hedge)
//! apply once and share its outcome, a delete included; a follower whose leader stopped
//! keeps a write for the successor rather than answer 504 at once.

use crate::common;

use std::time::Duration;

use common::cluster::{eventually, Cluster};
use common::ADMIN;
use serde_json::{json, Value};

fn row(key: &str, what: &str) -> Value {
    json!({"key": key, "type": "static", "auth": "public", "category": "Once",
           "content": format!("# WHAT: {what}\n")})
}

async fn post(
    http: &reqwest::Client,
    url: &str,
    body: &Value,
    key: Option<&str>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut request = http
        .post(format!("{url}/api/directory"))
        .header("x-terminal-key", ADMIN)
        .json(body);
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (
        status,
        headers,
        response.json().await.unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_idempotency_key_gets_the_first_outcome_and_a_reused_one_is_refused() {
    let node = common::start(false).await;
    let http = &node.http;
    let mut first = row("ONCE_ONLY", "Written once");
    first["if_version"] = json!(0);
    let (status, headers, body) = post(http, &node.url, &first, Some("key-1")).await;
    assert_eq!(status, 201, "{body}");
    let version = body["version"].as_u64().unwrap();
    assert!(headers.get("idempotent-replayed").is_none());

    let (status, headers, again) = post(http, &node.url, &first, Some("key-1")).await;
    assert_eq!(
        status, 201,
        "the retry is answered as the first attempt was: {again}"
    );
    assert_eq!(again["version"], version);
    assert_eq!(again["updated_at"], body["updated_at"]);
    assert_eq!(headers["idempotent-replayed"], "true");
    let stored: Value = http
        .get(format!("{}/api/directory/ONCE_ONLY", node.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stored["version"], version, "applied once");

    // The same key for another request, and a malformed key.
    let (status, _, reused) = post(http, &node.url, &row("OTHER", "x"), Some("key-1")).await;
    assert_eq!(status, 422, "{reused}");
    assert_eq!(reused["error"]["code"], "idempotency_key_reused");
    let (status, _, bad) = post(http, &node.url, &row("OTHER", "x"), Some("has space")).await;
    assert_eq!(status, 400, "{bad}");
    // Without a key the if_version retry conflicts, as it must.
    let (status, _, _) = post(http, &node.url, &first, None).await;
    assert_eq!(status, 409);
    node.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forwarded_write_whose_answer_is_lost_is_504_and_its_retry_gets_the_first_outcome() {
    let cluster = Cluster::start(3, 0).await;
    let leader = cluster.leader().await;
    let follower = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    let http = reqwest::Client::new();
    let mut body = row("LOST_ANSWER", "Committed, answer lost");
    body["if_version"] = json!(0);

    // The leader's answers to the follower are lost; its requests still arrive.
    cluster.faults.block(leader, follower);
    let (status, headers, lost) = post(&http, &cluster.url(follower), &body, Some("lost-1")).await;
    cluster.faults.heal();
    assert_eq!(status, 504, "{lost}");
    assert_eq!(lost["error"]["code"], "outcome_unknown");
    assert_eq!(lost["error"]["request_id"], "lost-1");
    assert!(headers.contains_key("retry-after"));

    // It did commit: the leader has it.
    let (_, _, stored) = cluster.get(leader, "/api/directory/LOST_ANSWER").await;
    let version = stored["version"].as_u64().expect("committed on the leader");

    // The retry (once the follower hears from the leader again) gets the first outcome.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let retried = loop {
        let (status, _, answer) = post(&http, &cluster.url(follower), &body, Some("lost-1")).await;
        if status != 503 || tokio::time::Instant::now() > deadline {
            break (status, answer);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(retried.0, 201, "{}", retried.1);
    assert_eq!(retried.1["version"], version, "the first attempt's version");
    cluster.converge(version).await;
    for id in cluster.ids() {
        let (_, _, got) = cluster.get(id, "/api/directory/LOST_ANSWER").await;
        assert_eq!(got["version"], version, "node {id}: applied once");
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_committed_but_not_applied_here_is_answered_as_committed() {
    let cluster = Cluster::start(3, 0).await;
    let leader = cluster.leader().await;
    let slow = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    let storage = cluster
        .member(slow)
        .handle
        .as_ref()
        .unwrap()
        .app
        .storage
        .clone();
    // Every sync on this node now outlasts the write timeout (3 s in these clusters): the
    // leader and the third node commit the write, this node applies it much later.
    storage.slow_down(Duration::from_secs(4));
    let http = reqwest::Client::new();
    // A write through the leader first: it commits with the third node, and this node's Raft
    // core is stuck syncing it. The write below still goes straight to the leader (this node
    // knows it) instead of waiting on its own core and giving up as cut off.
    let (status, _, body) = post(
        &http,
        &cluster.url(leader),
        &row("STALLS_THE_SLOW_ONE", "Synced late there"),
        None,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, headers, body) = post(
        &http,
        &cluster.url(slow),
        &row("SLOW_HERE", "Applied late"),
        None,
    )
    .await;
    assert_eq!(status, 201, "committed, so not 503: {body}");
    let index: u64 = headers["x-rowcall-index"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(body["version"], index);
    assert!(
        cluster.applied(slow) < index,
        "the answer came before this node applied it"
    );
    storage.slow_down(Duration::ZERO);
    // Its index is what a session waits for, here as anywhere.
    let url = format!("{}/api/directory/SLOW_HERE", cluster.url(slow));
    eventually(
        Duration::from_secs(30),
        "the slow node serves the write at its index",
        || {
            let request = http.get(&url).header("x-rowcall-min-index", index).send();
            async move {
                match request.await {
                    Ok(r) if r.status() == 200 => {
                        r.json::<Value>().await.is_ok_and(|v| v["version"] == index)
                    }
                    _ => false,
                }
            }
        },
    )
    .await;
    cluster.shutdown().await;
}

/// Deletes `key` on the node at `url` under the idempotency key `id`: the status, the
/// answer's index and its body.
async fn delete(http: &reqwest::Client, url: &str, key: &str, id: &str) -> (u16, u64, Value) {
    let response = http
        .delete(format!("{url}/api/directory/{key}"))
        .header("x-terminal-key", ADMIN)
        .header("idempotency-key", id)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let index = response
        .headers()
        .get("x-rowcall-index")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0);
    (status, index, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_attempts_of_one_write_through_two_nodes_apply_once_and_share_its_outcome() {
    // What a client's hedged write does when both attempts land: one through the leader,
    // one through a follower, at once, under one idempotency key.
    let cluster = Cluster::start(3, 0).await;
    let leader = cluster.leader().await;
    let follower = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    let http = reqwest::Client::new();
    let mut body = row("HEDGED_TWICE", "Sent to two nodes at once");
    body["if_version"] = json!(0);
    let (to_leader, to_follower) = (cluster.url(leader), cluster.url(follower));
    let (first, second) = tokio::join!(
        post(&http, &to_leader, &body, Some("hedged-1")),
        post(&http, &to_follower, &body, Some("hedged-1")),
    );
    assert_eq!(first.0, 201, "{}", first.2);
    assert_eq!(
        second.0, 201,
        "not a 409 from its own if_version: {}",
        second.2
    );
    let version = first.2["version"].as_u64().unwrap();
    assert_eq!(
        second.2["version"], version,
        "one outcome for both attempts"
    );
    cluster.converge(version).await;
    for id in cluster.ids() {
        let (_, _, got) = cluster.get(id, "/api/directory/HEDGED_TWICE").await;
        assert_eq!(got["version"], version, "node {id}: applied once");
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delete_repeated_through_another_node_gets_its_first_outcome_not_404() {
    // A hedged or retried delete reaches a node that has already applied the first attempt:
    // the row is gone there, and the answer is still the first attempt's.
    let cluster = Cluster::start(3, 0).await;
    let leader = cluster.leader().await;
    let follower = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    let http = reqwest::Client::new();
    let (status, _, put) = post(&http, &cluster.url(leader), &row("GONE_ONCE", "x"), None).await;
    assert_eq!(status, 201, "{put}");
    let (status, index, first) = delete(&http, &cluster.url(leader), "GONE_ONCE", "del-1").await;
    assert_eq!((status, &first["deleted"]), (200, &json!(1)), "{first}");
    // The follower has applied the delete: the row is gone there too.
    cluster.converge(index).await;
    let (status, _, again) = delete(&http, &cluster.url(follower), "GONE_ONCE", "del-1").await;
    assert_eq!(status, 200, "the first outcome, not 404: {again}");
    assert_eq!(again["deleted"], 1);
    // A new delete of the absent row is 404, as ever.
    let (status, _, fresh) = delete(&http, &cluster.url(follower), "GONE_ONCE", "del-2").await;
    assert_eq!(status, 404, "{fresh}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_holds_a_write_whose_leader_stopped_for_the_successor() {
    // The follower still names the stopped leader, and its forward fails at once. It keeps
    // the write (its request id makes a resend safe) until a successor leads, instead of
    // answering 504 outcome_unknown at once.
    let mut cluster = Cluster::start(3, 0).await;
    let leader = cluster.leader().await;
    let follower = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    let http = reqwest::Client::new();
    cluster.stop(leader).await;
    let (status, _, body) = post(
        &http,
        &cluster.url(follower),
        &row("AFTER_THE_LEADER", "Written while the leader is replaced"),
        Some("successor-1"),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let version = body["version"].as_u64().unwrap();
    let (_, _, got) = cluster
        .get(follower, "/api/directory/AFTER_THE_LEADER")
        .await;
    assert_eq!(got["version"], version);
    cluster.restart(leader).await;
    cluster.shutdown().await;
}
