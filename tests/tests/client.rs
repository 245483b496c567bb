//! The Rust client against an in-process 3-node cluster over the public gRPC API: every call
//! works; a write sent to a follower lands; a session that moves between nodes reads its own
//! writes; the client rides through a leader kill and a node being down without the caller
//! seeing an error; a watch resumes on another node after its node stops, with no change
//! missed or repeated. Hedged reads answer past a node that never answers; a node cut off
//! from the leader refuses an index it cannot reach at once (`behind`), and the client moves
//! on to another node. A write is hedged past a silent node like a read (its attempts share
//! one idempotency key); an invocation, never hedged, goes to a node just seen alive.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::cluster::{eventually, Cluster};
use common::ADMIN;
use futures_util::StreamExt as _;
use rowcall_client::proto::watch_event::Event;
use rowcall_client::{row_input, Attempted, Client, Error};
use serde_json::{json, Value};

fn row(key: &str, what: &str) -> Value {
    json!({"key": key, "type": "static", "auth": "public", "category": "Client",
           "content": format!("# WHAT: {what}\n\n{{\"key\":\"{key}\"}}\n")})
}

fn grpc(cluster: &Cluster, id: u64) -> String {
    format!("http://{}", cluster.member(id).grpc)
}

/// A client of the given nodes, in that order, with the admin key.
fn client(cluster: &Cluster, ids: &[u64]) -> Client {
    Client::builder()
        .nodes(ids.iter().map(|&id| grpc(cluster, id)))
        .credential(ADMIN)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_client_call_works_against_a_cluster() {
    let cluster = Cluster::start(3, 1).await;
    let client = client(&cluster, &[1, 2, 3]);

    let one = client
        .put(row_input(row("CLIENT_ONE", "Greet the client test")).unwrap())
        .await
        .unwrap();
    assert!(one.rows[0].created && !one.replayed);
    assert_eq!(client.session_index(), one.index);
    let many = client
        .put_many(vec![
            row_input(row("CLIENT_TWO", "Second row of the bulk write")).unwrap(),
            row_input(row("CLIENT_THREE", "Third row of the bulk write")).unwrap(),
        ])
        .await
        .unwrap();
    assert_eq!(many.rows.len(), 2);
    assert!(many.rows.iter().all(|o| o.version == many.index));

    let got = client.get("CLIENT_TWO").await.unwrap();
    assert_eq!((got.key.as_str(), got.version), ("CLIENT_TWO", many.index));
    let first = client.list(Some("client"), "", 2).await.unwrap();
    assert_eq!(first.rows.len(), 2);
    let rest = client
        .list(Some("client"), &first.next_cursor, 2)
        .await
        .unwrap();
    let keys: Vec<&str> = first
        .rows
        .iter()
        .chain(&rest.rows)
        .map(|r| r.key.as_str())
        .collect();
    assert_eq!(keys, ["CLIENT_ONE", "CLIENT_THREE", "CLIENT_TWO"]);
    assert!(rest.next_cursor.is_empty());
    assert_eq!(client.counts().await.unwrap().rows_total, 3);

    let asked = client.ask("greet the client test", 3).await.unwrap();
    assert_eq!(asked.best.as_ref().unwrap().key, "CLIENT_ONE");
    let contract = client.contract("CLIENT_ONE").await.unwrap();
    assert_eq!(contract["invoke"]["body"], json!({"key": "CLIENT_ONE"}));
    let markdown = client.contract_markdown("CLIENT_ONE").await.unwrap();
    assert!(markdown.starts_with("# CLIENT_ONE"), "{markdown}");

    let ran = client.invoke("CLIENT_ONE", None).await.unwrap();
    assert!(ran.ok);
    assert_eq!(ran.result, Some(json!({"key": "CLIENT_ONE"})));
    assert_eq!(ran.proof.status, "committed");
    let id = ran.proof.invocation_id.clone();
    let confirmed = client.confirm(&id).await.unwrap();
    assert!(confirmed.confirmed && confirmed.ok);
    assert_eq!(confirmed.index, ran.proof.index);
    let receipt = client.receipt(&id).await.unwrap();
    assert_eq!(
        (receipt.key.as_str(), receipt.caller.as_str()),
        ("CLIENT_ONE", "admin")
    );
    let receipts = client.receipts("CLIENT_ONE", 0).await.unwrap();
    assert_eq!(receipts.receipts.len(), 1);

    let deleted = client.delete("CLIENT_THREE", None).await.unwrap();
    assert_eq!(deleted.deleted, 1);
    let gone = client.get("CLIENT_THREE").await.unwrap_err();
    assert!(gone.is_not_found(), "{gone}");
    assert!(client
        .confirm("inv_0000000000")
        .await
        .unwrap_err()
        .is_not_found());

    let status = client.status().await.unwrap();
    assert_eq!(status.members.len(), 4);
    assert!(status.members.iter().any(|m| m.id == 4 && !m.voter));
    client.snapshot().await.unwrap();
    client.promote(4).await.unwrap();
    eventually(Duration::from_secs(20), "node 4 votes", || {
        let client = client.clone();
        async move {
            let status = client.status().await.unwrap();
            status.members.iter().any(|m| m.id == 4 && m.voter)
        }
    })
    .await;
    client.remove(4).await.unwrap();
    eventually(Duration::from_secs(20), "node 4 is out", || {
        let client = client.clone();
        async move {
            !client
                .status()
                .await
                .unwrap()
                .members
                .iter()
                .any(|m| m.id == 4)
        }
    })
    .await;
    let member = cluster.member(4);
    client
        .add_learner(4, &member.grpc.to_string(), &member.http.to_string())
        .await
        .unwrap();
    let status = client.status().await.unwrap();
    assert!(
        status.members.iter().any(|m| m.id == 4 && !m.voter),
        "{status:?}"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_sent_to_a_follower_lands_and_a_moving_session_reads_it() {
    let cluster = Cluster::start(3, 0).await;
    let leader = cluster.leader().await;
    let followers = cluster.others(leader);
    // Replication to the second follower is slow: without the session's index it would
    // answer from before the write.
    cluster
        .faults
        .delay(leader, followers[1], Duration::from_millis(60));
    let mut index = 0;
    for i in 0..12 {
        // Every step a new client on another node, carrying the session's index.
        let writer = followers[i % 2];
        let reader = followers[(i + 1) % 2];
        let on_writer = Client::builder()
            .node(grpc(&cluster, writer))
            .credential(ADMIN)
            .session_index(index)
            .build()
            .unwrap();
        let key = format!("MOVING_{i:02}");
        let written = on_writer
            .put(row_input(row(&key, "A row written through a follower")).unwrap())
            .await
            .unwrap();
        assert!(written.rows[0].created);
        index = on_writer.session_index();
        let on_reader = Client::builder()
            .node(grpc(&cluster, reader))
            .session_index(index)
            .hedge_after(None)
            .build()
            .unwrap();
        let read = on_reader.get(&key).await.unwrap();
        // The version is the write's log index; the answer's index covers it (later when a
        // hedged attempt was answered as a replay of the first).
        let version = written.rows[0].version;
        assert!(written.index >= version, "step {i}: {written:?}");
        assert_eq!(read.version, version, "step {i}: node {reader} reads it");
        let asked = on_reader
            .ask("a row written through a follower", 50)
            .await
            .unwrap();
        assert!(
            asked.candidates.iter().any(|c| c.key == key),
            "step {i}: ask finds it"
        );
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_client_rides_through_a_leader_kill_and_a_node_down() {
    let mut cluster = Cluster::start(3, 0).await;
    let client = client(&cluster, &[1, 2, 3]);
    client
        .put(row_input(row("RIDE_ECHO", "Answer through faults")).unwrap())
        .await
        .unwrap();
    let mut written = Vec::new();
    let mut step = 0;
    // Each phase runs the same mixed workload; the caller must never see an error.
    let mut work = |client: Client, phase: &'static str| {
        let keys: Vec<String> = (0..8)
            .map(|_| {
                step += 1;
                format!("RIDE_{step:03}")
            })
            .collect();
        async move {
            for key in &keys {
                let put = client
                    .put(row_input(row(key, "Ride through faults")).unwrap())
                    .await;
                assert!(put.is_ok(), "{phase}: put {key}: {put:?}");
                let got = client.get(key).await;
                assert!(got.is_ok(), "{phase}: get {key}: {got:?}");
                let ran = client.invoke("RIDE_ECHO", None).await;
                assert!(ran.as_ref().is_ok_and(|r| r.ok), "{phase}: invoke: {ran:?}");
                let asked = client.ask("answer through faults", 3).await;
                assert!(asked.is_ok(), "{phase}: ask: {asked:?}");
            }
            keys
        }
    };
    written.extend(work(client.clone(), "healthy").await);
    let leader = cluster.leader().await;
    cluster.stop(leader).await;
    written.extend(work(client.clone(), "leader killed").await);
    cluster.restart(leader).await;
    let down = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    cluster.stop(down).await;
    written.extend(work(client.clone(), "one node down").await);
    cluster.restart(down).await;
    // Nothing acknowledged was lost: every node has every row.
    let index = client.session_index();
    for id in cluster.ids() {
        let on_node = Client::builder()
            .node(grpc(&cluster, id))
            .session_index(index)
            .build()
            .unwrap();
        for key in &written {
            assert!(on_node.get(key).await.is_ok(), "{key} on node {id}");
        }
    }
    cluster.shutdown().await;
}

/// The next event of a watch, which must be a change: its index and key.
async fn next_change(events: &mut rowcall_client::Watch) -> (u64, String) {
    let event = tokio::time::timeout(Duration::from_secs(20), events.next())
        .await
        .expect("an event in time")
        .expect("the watch goes on")
        .expect("no error");
    match event.event {
        Some(Event::Change(change)) => (event.index, change.key),
        other => panic!("unexpected event {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watch_resumes_on_another_node_after_its_node_stops() {
    let mut cluster = Cluster::start(3, 0).await;
    let leader = cluster.leader().await;
    let watched = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    let others: Vec<u64> = cluster
        .ids()
        .into_iter()
        .filter(|&id| id != watched)
        .collect();
    let writer = client(&cluster, &others);
    let start = writer
        .put(row_input(row("WATCH_START", "Before the watch")).unwrap())
        .await
        .unwrap()
        .index;
    // The watch reads from `watched` first.
    let watcher = client(&cluster, &[watched, others[0], others[1]]);
    let mut events = watcher.watch(Some(start));
    let mut seen: Vec<(u64, String)> = Vec::new();
    writer
        .put(row_input(row("WATCH_A", "First")).unwrap())
        .await
        .unwrap();
    let bulk: Vec<_> = ["WATCH_B", "WATCH_C", "WATCH_D"]
        .iter()
        .map(|k| row_input(row(k, "Bulk")).unwrap())
        .collect();
    let bulk_index = writer.put_many(bulk).await.unwrap().index;
    seen.push(next_change(&mut events).await);
    seen.push(next_change(&mut events).await);
    // Stop the watched node in the middle of the bulk write's events.
    assert_eq!(seen.last().unwrap(), &(bulk_index, "WATCH_B".to_owned()));
    cluster.stop(watched).await;
    writer
        .put(row_input(row("WATCH_E", "After the stop")).unwrap())
        .await
        .unwrap();
    for _ in 0..3 {
        seen.push(next_change(&mut events).await);
    }
    let keys: Vec<&str> = seen.iter().map(|(_, k)| k.as_str()).collect();
    assert_eq!(
        keys,
        ["WATCH_A", "WATCH_B", "WATCH_C", "WATCH_D", "WATCH_E"]
    );
    assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0), "{seen:?}");
    cluster.restart(watched).await;
    cluster.shutdown().await;
}

/// Every attempt the client reports, kept for the test to read.
fn recorder() -> (
    std::sync::Arc<std::sync::Mutex<Vec<Attempted>>>,
    impl Fn(&Attempted) + Send + Sync + 'static,
) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    (seen, move |a: &Attempted| {
        sink.lock().unwrap().push(a.clone())
    })
}

/// Asserts that the attempts recorded were one, on node 1 of `cluster` (any other was
/// cancelled by the answer, not reported).
fn only_attempt_on(cluster: &Cluster, attempts: &std::sync::Mutex<Vec<Attempted>>, why: &str) {
    let attempts = attempts.lock().unwrap().clone();
    let nodes: Vec<&str> = attempts.iter().map(|a| a.node.as_str()).collect();
    let live = cluster.member(1).grpc.to_string();
    assert_eq!(nodes, [live.as_str()], "{why}: {attempts:?}");
}

/// A one-node cluster holding the row `key`, and a paused node: a listener that accepts
/// connections and never answers. Returns the cluster, the write's index, the listener (keep
/// it while the test runs) and its address.
async fn live_and_silent(key: &str) -> (Cluster, u64, std::net::TcpListener, String) {
    let cluster = Cluster::start(1, 0).await;
    let written = client(&cluster, &[1])
        .put(row_input(row(key, "Answered by the live node")).unwrap())
        .await
        .unwrap();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_at = silent.local_addr().unwrap().to_string();
    (cluster, written.index, silent, silent_at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_is_hedged_past_a_node_that_never_answers() {
    let (cluster, index, silent, silent_at) = live_and_silent("HEDGE_ME").await;
    let (attempts, observer) = recorder();
    // Without the hedge the read waits on the silent node until its connection's keep-alive
    // gives up, and then tries the live one: two attempts.
    let hedged = Client::builder()
        .nodes([format!("http://{silent_at}"), grpc(&cluster, 1)])
        .read_timeout(Duration::from_secs(20))
        .deadline(Duration::from_secs(20))
        .hedge_after(Some(Duration::from_millis(50)))
        .session_index(index)
        .on_attempt(observer)
        .build()
        .unwrap();
    let row = hedged.get("HEDGE_ME").await.unwrap();
    assert_eq!(row.version, index);
    let attempts = attempts.lock().unwrap().clone();
    // The answer came from the live node, under the session's min-index; the silent node's
    // attempt was cancelled, not reported as an answer or a failure.
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0].node, cluster.member(1).grpc.to_string());
    assert_eq!(attempts[0].min_index, index);
    assert!(attempts[0].failure.is_none(), "{attempts:?}");
    assert!(attempts[0].index >= Some(index), "{attempts:?}");
    drop(silent);
    cluster.shutdown().await;
}

/// Cuts a follower off until it marks itself stale, then writes row `key` through the
/// leader; returns (leader, the cut node, the write's answer). The cut is left in place.
async fn write_past_a_cut(
    cluster: &Cluster,
    key: &str,
) -> (u64, u64, rowcall_client::proto::PutRowsResponse) {
    let leader = cluster.leader().await;
    let ids = cluster.ids();
    let cut = ids.iter().copied().find(|&i| i != leader).unwrap();
    cluster.faults.isolate(cut, &ids);
    eventually(
        Duration::from_secs(30),
        "the cut-off node marks itself stale",
        || {
            let stale = cluster.member(cut).handle.as_ref().unwrap().app.is_stale();
            async move { stale }
        },
    )
    .await;
    let written = client(cluster, &[leader])
        .put(row_input(row(key, "Written while a node is cut off")).unwrap())
        .await
        .unwrap();
    (leader, cut, written)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cut_off_node_says_behind_at_once_over_grpc_and_the_client_moves_on() {
    // A node waits this long for a min-index it has not applied: far beyond the clients'
    // timeouts, so an answer that comes at all came without the wait.
    let cluster = Cluster::start_with(3, 0, |config| {
        config.limits.min_index_wait_ms = 120_000;
    })
    .await;
    let (leader, cut, written) = write_past_a_cut(&cluster, "PAST_THE_CUT").await;
    let other = cluster
        .ids()
        .into_iter()
        .find(|&i| i != leader && i != cut)
        .unwrap();

    // Alone, the cut-off node refuses the session's index with `behind`, not by timing out.
    let (attempts, observer) = recorder();
    let alone = Client::builder()
        .node(grpc(&cluster, cut))
        .read_timeout(Duration::from_secs(10))
        .deadline(Duration::from_secs(10))
        .hedge_after(None)
        .session_index(written.index)
        .on_attempt(observer)
        .build()
        .unwrap();
    let refused = alone.get("PAST_THE_CUT").await.unwrap_err();
    assert!(refused.is_unavailable(), "{refused}");
    let first = attempts.lock().unwrap()[0].clone();
    let why = first.failure.expect("refused");
    assert_eq!(why.code, "behind", "{why}");

    // With another node listed (no hedging), the client moves on to it and answers.
    let (attempts, observer) = recorder();
    let moving = Client::builder()
        .nodes([grpc(&cluster, cut), grpc(&cluster, other)])
        .read_timeout(Duration::from_secs(10))
        .deadline(Duration::from_secs(10))
        .hedge_after(None)
        .session_index(written.index)
        .on_attempt(observer)
        .build()
        .unwrap();
    let row = moving.get("PAST_THE_CUT").await.unwrap();
    assert_eq!(row.version, written.index);
    let attempts = attempts.lock().unwrap().clone();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(
        attempts[0].failure.as_ref().map(|r| r.code.as_str()),
        Some("behind")
    );
    assert_eq!(attempts[1].node, cluster.member(other).grpc.to_string());
    assert!(attempts[1].failure.is_none());
    cluster.faults.heal();
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_back_from_a_cut_waits_for_its_leader_instead_of_saying_behind() {
    let cluster = Cluster::start_with(3, 0, |config| {
        config.limits.min_index_wait_ms = 20_000;
    })
    .await;
    let (_, cut, written) = write_past_a_cut(&cluster, "BACK_FROM_THE_CUT").await;

    // Healed, the node is still stale and behind until its leader's next message: the read
    // that reaches it then waits for that message and the write, as a node only behind does.
    cluster.faults.heal();
    let (attempts, observer) = recorder();
    let alone = Client::builder()
        .node(grpc(&cluster, cut))
        .read_timeout(Duration::from_secs(10))
        .deadline(Duration::from_secs(10))
        .hedge_after(None)
        .session_index(written.index)
        .on_attempt(observer)
        .build()
        .unwrap();
    let row = alone.get("BACK_FROM_THE_CUT").await.unwrap();
    assert_eq!(row.version, written.index);
    let attempts = attempts.lock().unwrap().clone();
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert!(attempts[0].failure.is_none(), "{attempts:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_that_left_a_call_unanswered_is_tried_last_by_the_next() {
    let (cluster, index, silent, silent_at) = live_and_silent("TRY_LAST").await;
    let (attempts, observer) = recorder();
    // No hedge, and a read timeout beyond the deadline: a read that starts on the silent
    // node fails.
    let session = Client::builder()
        .nodes([format!("http://{silent_at}"), grpc(&cluster, 1)])
        .read_timeout(Duration::from_secs(20))
        .invoke_timeout(Duration::from_millis(300))
        .deadline(Duration::from_secs(20))
        .hedge_after(None)
        .session_index(index)
        .on_attempt(observer)
        .build()
        .unwrap();
    // The invocation goes to the first node listed, which never answers: it may have run
    // there, so it is not retried.
    let unanswered = session.invoke("TRY_LAST", None).await.unwrap_err();
    assert!(
        matches!(unanswered, rowcall_client::Error::Unknown { .. }),
        "{unanswered}"
    );
    let row = session.get("TRY_LAST").await.unwrap();
    assert_eq!(row.version, index);
    let attempts = attempts.lock().unwrap().clone();
    let nodes: Vec<&str> = attempts.iter().map(|a| a.node.as_str()).collect();
    let live = cluster.member(1).grpc.to_string();
    assert_eq!(nodes, [silent_at.as_str(), live.as_str()], "{attempts:?}");
    drop(silent);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_is_hedged_past_a_node_that_never_answers() {
    let (cluster, index, silent, silent_at) = live_and_silent("BEFORE_THE_HEDGE").await;
    let (attempts, observer) = recorder();
    // No leader hint yet: the write starts on the silent node, listed first. Without the
    // hedge it waits there for the whole write timeout (far beyond the test's patience).
    let session = Client::builder()
        .nodes([format!("http://{silent_at}"), grpc(&cluster, 1)])
        .credential(ADMIN)
        .write_timeout(Duration::from_secs(60))
        .deadline(Duration::from_secs(60))
        .write_hedge_after(Some(Duration::from_millis(50)))
        .session_index(index)
        .on_attempt(observer)
        .build()
        .unwrap();
    let written = session
        .put(row_input(row("HEDGED_WRITE", "Written past a silent node")).unwrap())
        .await
        .unwrap();
    let attempts = attempts.lock().unwrap().clone();
    // The live node answered; the silent node's attempt was cancelled, not reported.
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0].node, cluster.member(1).grpc.to_string());
    assert!(attempts[0].failure.is_none(), "{attempts:?}");
    assert!(written.rows[0].created && !written.replayed);
    let row = session.get("HEDGED_WRITE").await.unwrap();
    assert_eq!(row.version, written.index);
    drop(silent);
    cluster.shutdown().await;
}

/// A session that has seen its writes answered hedges a write stuck on a leader cut off
/// from its quorum within a few of those write times, not after the configured longest
/// wait: the follower it goes to carries it to the leader's successor, and the stuck
/// attempt is dropped unanswered. With a fixed delay (here 60 s) the stuck attempt would
/// fail first, when its node gives up on the quorum (outcome unknown, after 3 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_stuck_on_a_cut_off_leader_is_hedged_after_a_few_recent_write_times() {
    let cluster = Cluster::start(3, 0).await;
    let (attempts, observer) = recorder();
    let leader = cluster.leader().await;
    let others = cluster.others(leader);
    let session = Client::builder()
        .nodes([
            grpc(&cluster, leader),
            grpc(&cluster, others[0]),
            grpc(&cluster, others[1]),
        ])
        .credential(ADMIN)
        .write_timeout(Duration::from_secs(60))
        .deadline(Duration::from_secs(60))
        .write_hedge_after(Some(Duration::from_secs(60)))
        .on_attempt(observer)
        .build()
        .unwrap();
    for i in 0..16 {
        let key = format!("LEARNT_{i:02}");
        session
            .put(row_input(row(&key, "A write answered in its usual time")).unwrap())
            .await
            .unwrap();
    }
    attempts.lock().unwrap().clear();
    let before = session.write_stats();
    assert_eq!(
        (before.writes, before.hedged, before.hedges_won),
        (16, 0, 0),
        "healthy writes need no hedge"
    );
    cluster.faults.isolate(leader, &others);
    let written = session
        .put(row_input(row("PAST_THE_CUT", "Written while the leader was cut off")).unwrap())
        .await
        .unwrap();
    let attempts = attempts.lock().unwrap().clone();
    // The row was created once. The answer may say "replayed": the node the hedge went to
    // carries it to the new leader, and when that leader, busy taking office, answers later
    // than the node waits, the node sends it again with the same id and is told the first
    // outcome (seen on a loaded 2-core machine).
    assert!(written.rows[0].created, "{written:?}");
    assert_eq!(
        attempts.len(),
        1,
        "only the hedge was answered: {attempts:?}"
    );
    assert_ne!(
        attempts[0].node,
        cluster.member(leader).grpc.to_string(),
        "{attempts:?}"
    );
    assert!(attempts[0].failure.is_none(), "{attempts:?}");
    let after = session.write_stats();
    assert_eq!(
        (after.writes, after.hedged, after.hedges_won),
        (17, 1, 1),
        "the stuck write was hedged, and the hedge answered it"
    );
    cluster.faults.heal();
    let stored = session.get("PAST_THE_CUT").await.unwrap();
    assert_eq!(stored.version, written.rows[0].version, "{written:?}");
    cluster.shutdown().await;
}

/// A write whose first node and first hedge both hang (a leader cut off with a follower,
/// which forwards the hedge to that same leader) is hedged once more, to a third node,
/// while both still hang: with two attempts at most out at once it waited for one of them
/// to fail (here: never, until the deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_goes_to_a_third_node_while_two_attempts_hang() {
    let (cluster, _, silent, silent_at) = live_and_silent("THIRD_NODE_SEED").await;
    let also_silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let also_silent_at = also_silent.local_addr().unwrap().to_string();
    let (attempts, observer) = recorder();
    let session = Client::builder()
        .nodes([
            format!("http://{silent_at}"),
            format!("http://{also_silent_at}"),
            grpc(&cluster, 1),
        ])
        .credential(ADMIN)
        .write_timeout(Duration::from_secs(20))
        .deadline(Duration::from_secs(20))
        .write_hedge_after(Some(Duration::from_millis(50)))
        .on_attempt(observer)
        .build()
        .unwrap();
    let written = session
        .put(row_input(row("THIRD_NODE", "Written past two silent nodes")).unwrap())
        .await
        .unwrap();
    assert!(written.rows[0].created, "{written:?}");
    let attempts = attempts.lock().unwrap().clone();
    // The silent nodes' attempts were cancelled when the third answered: not reported.
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0].node, cluster.member(1).grpc.to_string());
    let stats = session.write_stats();
    assert_eq!((stats.writes, stats.hedged, stats.hedges_won), (1, 1, 1));
    drop((silent, also_silent));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_invocation_goes_past_a_node_that_never_answers_to_one_seen_alive() {
    let (cluster, index, silent, silent_at) = live_and_silent("INVOKED_ALIVE").await;
    let (attempts, observer) = recorder();
    // The silent node is listed first and the invocation may not be retried once sent: a
    // probe that goes unanswered within the hedge delay sends it to the live node instead.
    let session = Client::builder()
        .nodes([format!("http://{silent_at}"), grpc(&cluster, 1)])
        .credential(ADMIN)
        .invoke_timeout(Duration::from_secs(60))
        .deadline(Duration::from_secs(60))
        .hedge_after(Some(Duration::from_millis(50)))
        .session_index(index)
        .on_attempt(observer)
        .build()
        .unwrap();
    let ran = session.invoke("INVOKED_ALIVE", None).await.unwrap();
    assert!(ran.ok, "{ran:?}");
    assert_eq!(ran.key, "INVOKED_ALIVE");
    only_attempt_on(&cluster, &attempts, "one attempt, on the live node");
    // Its receipt is there to confirm.
    let confirmed = session.confirm(&ran.proof.invocation_id).await.unwrap();
    assert_eq!(confirmed.key, "INVOKED_ALIVE");
    drop(silent);
    cluster.shutdown().await;
}

/// A TCP forwarder to `to` that can be frozen: it then passes no more bytes and keeps its
/// sockets open, as a paused process does. Threads, as long as the test runs.
fn freezable(to: std::net::SocketAddr) -> (String, Arc<AtomicBool>) {
    use std::io::{Read as _, Write as _};
    let frozen = Arc::new(AtomicBool::new(false));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let flag = frozen.clone();
    std::thread::spawn(move || {
        for inbound in listener.incoming().flatten() {
            let Ok(outbound) = std::net::TcpStream::connect(to) else {
                continue;
            };
            let ends = [
                (inbound.try_clone().unwrap(), outbound.try_clone().unwrap()),
                (outbound, inbound),
            ];
            for (mut from, mut into) in ends {
                let frozen = flag.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16 * 1024];
                    while let Ok(n @ 1..) = from.read(&mut buf) {
                        while frozen.load(Ordering::SeqCst) {
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        if into.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        }
    });
    (addr, frozen)
}

/// An invocation of a row that changes nothing may be sent to two nodes at once. A node
/// that answered a moment ago and then froze (a paused process) holds any other invocation
/// until its timeout; one of a row the session learnt is read-only (from its contract) is
/// sent as `repeatable` and hedged past it like a read.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_only_rows_invocation_is_hedged_past_a_node_that_froze() {
    let cluster = Cluster::start(1, 0).await;
    let written = client(&cluster, &[1])
        .put(row_input(row("HEDGED_RUN", "Runs wherever it is sent")).unwrap())
        .await
        .unwrap();
    let (frozen_at, frozen) = freezable(cluster.member(1).grpc);
    let (attempts, observer) = recorder();
    // The node behind the forwarder is listed first; a node heard from within the hedge
    // delay counts as alive for an invocation that cannot be hedged.
    let session = Client::builder()
        .nodes([format!("http://{frozen_at}"), grpc(&cluster, 1)])
        .credential(ADMIN)
        .invoke_timeout(Duration::from_secs(60))
        .deadline(Duration::from_secs(60))
        .hedge_after(Some(Duration::from_secs(1)))
        .session_index(written.index)
        .on_attempt(observer)
        .build()
        .unwrap();
    let contract = session.contract("HEDGED_RUN").await.unwrap();
    assert_eq!(contract["risk"], "read", "{contract}");
    frozen.store(true, Ordering::SeqCst);
    attempts.lock().unwrap().clear();

    let ran = session.invoke("HEDGED_RUN", None).await.unwrap();
    assert!(ran.ok && ran.repeatable, "{ran:?}");
    only_attempt_on(
        &cluster,
        &attempts,
        "answered by the hedge; the frozen attempt cancelled",
    );
    let confirmed = session.confirm(&ran.proof.invocation_id).await.unwrap();
    assert_eq!(confirmed.key, "HEDGED_RUN");
    // Thawed, so the node's shutdown need not wait out the held connection.
    frozen.store(false, Ordering::SeqCst);
    drop(session);
    cluster.shutdown().await;
}

/// An invocation that cannot be sent twice waits on its node only while the node answers
/// something: one that froze with the call on it (here a forwarder that stops passing
/// bytes, as a paused process does) fails a cheap read too, and the call ends as unknown
/// after about a second instead of the invocation timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_invocation_on_a_node_that_froze_ends_as_unknown_without_waiting_out_its_timeout() {
    let cluster = Cluster::start(1, 0).await;
    let mut risky = row("FROZEN_RUN", "Changes something wherever it runs");
    risky["risk"] = json!("write");
    let written = client(&cluster, &[1])
        .put(row_input(risky).unwrap())
        .await
        .unwrap();
    let (frozen_at, frozen) = freezable(cluster.member(1).grpc);
    let session = Client::builder()
        .nodes([format!("http://{frozen_at}")])
        .credential(ADMIN)
        .invoke_timeout(Duration::from_secs(120))
        .deadline(Duration::from_secs(120))
        .hedge_after(Some(Duration::from_secs(1)))
        .session_index(written.index)
        .build()
        .unwrap();
    let contract = session.contract("FROZEN_RUN").await.unwrap();
    assert_eq!(contract["risk"], "write", "{contract}");
    frozen.store(true, Ordering::SeqCst);

    let error = session.invoke("FROZEN_RUN", None).await.unwrap_err();
    let Error::Unknown { last, .. } = &error else {
        panic!("expected an unknown outcome, got {error:?}");
    };
    assert_eq!(last.code, "node_silent", "{error}");
    frozen.store(false, Ordering::SeqCst);
    drop(session);
    cluster.shutdown().await;
}

/// A session learns from the answers which rows change nothing and sends their next
/// invocations as `repeatable`. When such a row has since become one that changes
/// something, the node refuses the call before it runs (409 over HTTP, FAILED_PRECONDITION
/// over gRPC, `not_repeatable`, no receipt), and the client sends it once, plainly.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_row_that_changes_something_never_runs_as_repeatable() {
    let cluster = Cluster::start(1, 0).await;
    let (attempts, observer) = recorder();
    let session = Client::builder()
        .nodes([grpc(&cluster, 1)])
        .credential(ADMIN)
        .on_attempt(observer)
        .build()
        .unwrap();
    session
        .put(row_input(row("TURNS_RISKY", "Reads at first")).unwrap())
        .await
        .unwrap();
    let first = session.invoke("TURNS_RISKY", None).await.unwrap();
    assert!(first.repeatable, "a read-only row: {first:?}");

    let mut risky = row("TURNS_RISKY", "Changes something now");
    risky["risk"] = json!("write");
    session.put(row_input(risky).unwrap()).await.unwrap();
    let url = cluster.member(1).url();
    let http = reqwest::Client::new();
    let receipts = |limit| session.receipts("TURNS_RISKY", limit);
    let before = receipts(50).await.unwrap().receipts.len();
    let refused = http
        .post(format!("{url}/api/dispatch"))
        .header("x-terminal-key", ADMIN)
        .json(&json!({"key": "TURNS_RISKY", "repeatable": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 409);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "not_repeatable", "{body}");
    assert_eq!(
        receipts(50).await.unwrap().receipts.len(),
        before,
        "nothing ran"
    );

    attempts.lock().unwrap().clear();
    let second = session.invoke("TURNS_RISKY", None).await.unwrap();
    assert!(second.ok && !second.repeatable, "{second:?}");
    let codes: Vec<String> = attempts
        .lock()
        .unwrap()
        .iter()
        .map(|a| a.failure.as_ref().map_or("ok".into(), |f| f.code.clone()))
        .collect();
    assert_eq!(
        codes,
        ["not_repeatable", "ok"],
        "sent as repeatable (learnt), refused before it ran, then sent once"
    );
    assert_eq!(
        receipts(50).await.unwrap().receipts.len(),
        before + 1,
        "it ran once"
    );
    cluster.shutdown().await;
}

/// Nodes whose gRPC listener serves TLS (peer TLS on) are reached by a client that trusts
/// their CA, and by no client that does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_reaches_tls_nodes_through_their_ca_and_only_so() {
    let cluster = Cluster::start_secured(3).await;
    let ca = cluster.ca.as_ref().unwrap().ca_pem();
    let addresses: Vec<String> = (1..=3)
        .map(|id| cluster.member(id).grpc.to_string())
        .collect();
    let trusting = Client::builder()
        .nodes(&addresses)
        .credential(ADMIN)
        .tls_ca(&ca)
        .build()
        .unwrap();
    let put = trusting
        .put(row_input(row("OVER_TLS", "A row written over TLS")).unwrap())
        .await
        .unwrap();
    let got = trusting.get("OVER_TLS").await.unwrap();
    assert_eq!(got.version, put.rows[0].version);
    let asked = trusting.ask("a row written over tls", 3).await.unwrap();
    assert_eq!(asked.best.unwrap().key, "OVER_TLS");

    // Plain gRPC, or TLS trusting another CA: nothing is answered.
    let other = common::tls::TestCa::new(&cluster.dir.path().join("other"), "other");
    let plain: Vec<String> = addresses.iter().map(|a| format!("http://{a}")).collect();
    let strangers = [
        Client::builder().nodes(&plain),
        Client::builder().nodes(&addresses).tls_ca(other.ca_pem()),
    ];
    for stranger in strangers {
        let stranger = stranger
            .credential(ADMIN)
            .deadline(Duration::from_secs(3))
            .build()
            .unwrap();
        let refused = stranger.get("OVER_TLS").await;
        assert!(refused.is_err(), "{refused:?}");
    }
    // A CA with an address that says plain http is a mistake, said at once.
    let mixed = Client::builder().nodes(&plain).tls_ca(&ca).build();
    assert!(mixed.is_err());
}
