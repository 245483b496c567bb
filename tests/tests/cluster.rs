//! The cluster (DESIGN §3.1, §3.2, §7): several in-process nodes replicate through Raft over
//! gRPC behind a fault-injecting transport. Every node serves the whole protocol; a client
//! always reads its own writes; a leader loss, a lagging node, a minority partition and a
//! learner each behave as promised, and nothing acknowledged is lost.

use crate::common;
use rowcall_node::raft::WatchReceiver as _;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::cluster::{eventually, Cluster};
use common::{Fetch, ADMIN, INVOKE};
use serde_json::{json, Value};

fn row(key: &str, what: &str) -> Value {
    json!({"key": key, "type": "static", "auth": "public", "category": "Cluster",
           "content": format!("# WHAT: {what}\n\n{{\"key\":\"{key}\"}}\n")})
}

/// Inserts a row on a node, as a careful client does: a write whose outcome is unknown (504,
/// e.g. its leader died or this busy machine answered late) is retried with the same
/// `Idempotency-Key`, so it takes effect once and its answer is the first attempt's.
async fn insert(cluster: &Cluster, id: u64, row: &Value) -> reqwest::Response {
    insert_at(&cluster.http, &cluster.url(id), row).await
}

/// [`insert`] at the node serving `url` (for writers spawned as tasks).
async fn insert_at(http: &reqwest::Client, url: &str, row: &Value) -> reqwest::Response {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let key = format!(
        "cluster-test-{}-{}",
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let response = http
            .post(format!("{url}/api/directory"))
            .header("x-terminal-key", ADMIN)
            .header("idempotency-key", &key)
            .json(row)
            .send()
            .await
            .unwrap();
        if response.status() != 504 || tokio::time::Instant::now() >= deadline {
            return response;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn index_of(response: &reqwest::Response) -> u64 {
    response.headers()["x-rowcall-index"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// Writes until one succeeds (bounded), for the moments a new leader is being elected.
async fn insert_eventually(cluster: &Cluster, id: u64, row: &Value) -> u64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let response = insert(cluster, id, row).await;
        if response.status().is_success() {
            return index_of(&response);
        }
        assert!(
            [503, 504].contains(&response.status().as_u16()),
            "only unavailability and an unknown outcome are retried: {}",
            response.status()
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "no write succeeded on node {id}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_node_reads_its_own_writes_at_once() {
    let cluster = Cluster::start(3, 0).await;
    for i in 0..200u64 {
        let id = 1 + i % 3;
        let key = format!("RYW_{i:03}");
        let response = insert(
            &cluster,
            id,
            &row(&key, &format!("Read your writes probe {i}")),
        )
        .await;
        assert_eq!(response.status(), 201, "insert {i} on node {id}");
        let (status, _, got) = cluster.get(id, &format!("/api/directory/{key}")).await;
        assert_eq!(status, 200, "node {id} reads {key} right after writing it");
        assert_eq!(got["key"], key);
        let (_, _, asked) = cluster
            .get(id, &format!("/api/dispatch?ask=read+your+writes+probe+{i}"))
            .await;
        assert_eq!(
            asked["best"]["key"], key,
            "node {id} asks for {key}: {asked}"
        );
    }
    let last = cluster.applied(cluster.leader().await);
    cluster.converge(last).await;
    for id in cluster.ids() {
        let (_, _, counts) = cluster.get(id, "/api/directory/counts").await;
        assert_eq!(counts["rows_total"], 200, "node {id}");
    }
    cluster.shutdown().await;
}

/// Concurrent writes on a busy leader share Raft entries (one append, one replication round,
/// one sync per entry), and each writer is answered with its own write: its key, the version
/// its row got, and the row as it wrote it on every node. Two writes of one row never share
/// an entry, so each version names one content.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writes_share_entries_and_each_writer_gets_its_own_answer() {
    let cluster = Cluster::start(3, 0).await;
    let leader = cluster.leader().await;
    let follower = cluster.ids().into_iter().find(|id| *id != leader).unwrap();
    // A slow disk on the leader keeps its proposals in flight while the writes queue up.
    let app = &cluster.member(leader).handle.as_ref().unwrap().app;
    app.storage.slow_down(Duration::from_millis(30));
    let mut writers = tokio::task::JoinSet::new();
    for i in 0..50usize {
        // Two writers also write one shared row, each with its own content.
        let key = if i < 48 {
            format!("BATCH_{i:02}")
        } else {
            "BATCH_SHARED".to_owned()
        };
        let body = row(&key, &format!("Batched write number {i}"));
        let url = cluster.url(if i % 2 == 0 { leader } else { follower });
        let http = cluster.http.clone();
        writers.spawn(async move {
            let response = insert_at(&http, &url, &body).await;
            let status = response.status();
            let index = index_of(&response);
            let answer: Value = response.json().await.unwrap();
            (i, key, status, index, answer)
        });
    }
    let mut versions = std::collections::BTreeMap::new();
    let mut indexes = std::collections::BTreeSet::new();
    while let Some(written) = writers.join_next().await {
        let (i, key, status, index, answer) = written.unwrap();
        assert!(status.is_success(), "write {i}: {status} {answer}");
        assert_eq!(
            answer["key"], key,
            "write {i} was answered with another write"
        );
        // The version is the write's log index. The answer's index covers it: equal for a
        // first answer, later for a repeat that a 504 made `insert_at` send (the repeat gets
        // the first outcome, stamped with the index the node has applied by then).
        let version = answer["version"].as_u64().unwrap();
        assert!(version <= index, "write {i} at index {index}: {answer}");
        versions.insert(i, version);
        indexes.insert(version);
    }
    app.storage.slow_down(Duration::ZERO);
    assert!(
        indexes.len() < 50,
        "50 concurrent writes took {} entries: none shared one",
        indexes.len()
    );
    assert_ne!(
        versions[&48], versions[&49],
        "two writes of one row in one entry"
    );
    let last = cluster.applied(leader);
    cluster.converge(last).await;
    let shared_winner = if versions[&48] > versions[&49] {
        48
    } else {
        49
    };
    for id in cluster.ids() {
        for (i, version) in &versions {
            let key = if *i < 48 {
                format!("BATCH_{i:02}")
            } else {
                "BATCH_SHARED".to_owned()
            };
            let (status, _, got) = cluster.get(id, &format!("/api/directory/{key}")).await;
            assert_eq!(status, 200, "node {id} reads {key}");
            let expected = if *i < 48 { *i } else { shared_winner };
            let what = format!("Batched write number {expected}\n");
            assert!(
                got["content"].as_str().unwrap().contains(&what),
                "node {id}: {key} holds {got}"
            );
            if *i < 48 || *i == shared_winner {
                assert_eq!(got["version"], *version, "node {id}: {key}");
            }
        }
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_moving_between_nodes_keeps_reading_its_writes() {
    // A barrier bound that covers a re-election after the heal below (the cut-off reader
    // may have raised its term), so the waits that must succeed do on a loaded machine.
    let cluster = Cluster::start_with(3, 0, |config| config.limits.min_index_wait_ms = 5_000).await;
    let leader = cluster.leader().await;
    let writer = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    let reader = cluster
        .ids()
        .into_iter()
        .find(|&id| id != leader && id != writer)
        .unwrap();
    // The reader hears nothing from the leader, so it cannot apply the write below: it is
    // behind for certain, however loaded the machine (the leader and the writer still make
    // a quorum).
    cluster.faults.block(leader, reader);
    let response = insert(
        &cluster,
        writer,
        &row("MOVING_SESSION", "A row written on one node"),
    )
    .await;
    assert_eq!(response.status(), 201);
    let token = index_of(&response);
    assert!(cluster.applied(reader) < token, "the reader is behind");

    // Behind, the reader does not answer from its stale state: the barrier waits its bound,
    // then refuses (a read without the token would answer 404 here).
    let invoke = || {
        cluster
            .http
            .post(format!("{}/api/dispatch", cluster.url(reader)))
            .header("x-rowcall-min-index", token.to_string())
            .json(&json!({"key": "MOVING_SESSION"}))
            .send()
    };
    let read = || {
        cluster
            .http
            .get(format!(
                "{}/api/directory/MOVING_SESSION",
                cluster.url(reader)
            ))
            .header("x-rowcall-min-index", token.to_string())
            .send()
    };
    let contract_path = format!("/api/dispatch?key=MOVING_SESSION&min_index={token}");
    let (status, _, _) = cluster.get(reader, "/api/directory/MOVING_SESSION").await;
    assert_eq!(
        status, 404,
        "without the token the reader answers what it has"
    );
    // All three at once, so the test waits one bound, not three.
    let (read_barrier, invoke_barrier, (contract_barrier, _, _)) =
        tokio::join!(read(), invoke(), cluster.get(reader, &contract_path));
    assert_eq!(read_barrier.unwrap().status(), 503);
    assert_eq!(invoke_barrier.unwrap().status(), 503);
    assert_eq!(
        contract_barrier, 503,
        "the query parameter is a barrier too"
    );
    assert!(cluster.applied(reader) < token, "still behind");

    // Healed, the reader catches up (its leader retries the link after a backoff) and the
    // same requests answer; until then they keep saying `behind`, and a client retries them
    // as their Retry-After says.
    cluster.faults.heal();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let invoked: Value = loop {
        let answer = invoke().await.unwrap();
        let status = answer.status();
        let body: Value = answer.json().await.unwrap();
        if status == 200 {
            break body;
        }
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["error"]["code"], "behind", "{body}");
        assert!(tokio::time::Instant::now() < deadline, "never caught up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(invoked["result"], json!({"key": "MOVING_SESSION"}));
    let got = read().await.unwrap();
    assert_eq!(got.status(), 200, "the read waited for the token");
    assert!(index_of(&got) >= token);
    let got: Value = got.json().await.unwrap();
    assert_eq!(got["key"], "MOVING_SESSION");
    let (status, _, contract) = cluster.get(reader, &contract_path).await;
    assert_eq!(status, 200);
    assert_eq!(contract["key"], "MOVING_SESSION");
    // A linearizable read on a follower answers the committed row, not a stale view. While
    // an election runs (a loaded machine can stall a leader past its lease) there is no read
    // index to be had, and the node says to retry.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let (status, headers, got) = loop {
        let (status, headers, got) = cluster
            .get(
                reader,
                "/api/directory/MOVING_SESSION?consistency=linearizable",
            )
            .await;
        if status != 503
            || got["error"]["code"] != "no_read_index"
            || tokio::time::Instant::now() >= deadline
        {
            break (status, headers, got);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["key"], "MOVING_SESSION");
    assert!(!headers.contains_key("x-rowcall-stale"));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_survive_the_loss_of_the_leader_and_it_catches_up() {
    let mut cluster = Cluster::start(3, 0).await;
    let mut written = Vec::new();
    for i in 0..20 {
        let key = format!("BEFORE_{i:02}");
        let response = insert(
            &cluster,
            1 + i % 3,
            &row(&key, "written before the leader stopped"),
        )
        .await;
        assert_eq!(response.status(), 201);
        written.push(key);
    }
    let old_leader = cluster.leader().await;
    cluster.stop(old_leader).await;
    let survivors: Vec<u64> = cluster
        .ids()
        .into_iter()
        .filter(|&id| id != old_leader)
        .collect();
    let mut last = 0;
    for i in 0..20 {
        let key = format!("AFTER_{i:02}");
        last = insert_eventually(
            &cluster,
            survivors[i % 2],
            &row(&key, "written after the leader stopped"),
        )
        .await;
        written.push(key);
    }
    let new_leader = cluster.leader().await;
    assert_ne!(new_leader, old_leader);
    cluster.restart(old_leader).await;
    cluster.converge(last).await;
    for id in cluster.ids() {
        for key in &written {
            let (status, _, _) = cluster.get(id, &format!("/api/directory/{key}")).await;
            assert_eq!(status, 200, "node {id} has {key}");
        }
    }
    cluster.shutdown().await;
}

/// Long election timeouts, so that openraft's own timer cannot stand before the lease and
/// a whole timeout (8.1 s) have passed since the leader's last message.
fn slow_timer(config: &mut rowcall_node::Config) {
    config.raft.election_timeout_min_ms = 4_000;
    config.raft.election_timeout_max_ms = 4_100;
}

/// The earliest openraft's own timer could stand on [`slow_timer`]: lease + shortest timeout.
const TIMER_FLOOR: Duration = Duration::from_millis(4_100 + 4_000);

/// Waits until the nodes `ids` all name one leader other than `old`, and checks it took over
/// sooner after `fault` (what happened at `since`) than the election timer could; returns it.
async fn successor_before_timer(
    cluster: &Cluster,
    ids: &[u64],
    old: u64,
    (fault, since): (&str, std::time::Instant),
) -> u64 {
    let mut new = 0;
    eventually(
        Duration::from_secs(20),
        "the survivors elect a successor",
        || {
            let seen: Vec<Option<u64>> = ids
                .iter()
                .map(|&id| {
                    cluster
                        .member(id)
                        .handle
                        .as_ref()
                        .unwrap()
                        .app
                        .raft
                        .metrics()
                        .borrow_watched()
                        .current_leader
                })
                .collect();
            let agreed = seen[0].is_some_and(|l| l != old) && seen.iter().all(|s| *s == seen[0]);
            if agreed {
                new = seen[0].unwrap();
            }
            async move { agreed }
        },
    )
    .await;
    let took = since.elapsed();
    assert!(
        took < TIMER_FLOOR,
        "node {new} took over {took:?} after the {fault}, no sooner than the election timer"
    );
    new
}

/// A leader that crashed is replaced a lease after its last message: its followers find it
/// silent, ask it, get no answer and stand at once, long before their election timers
/// could, and the new leader takes writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crashed_leader_is_replaced_once_its_lease_has_passed_not_a_timeout_later() {
    let mut cluster = Cluster::start_with(3, 0, slow_timer).await;
    let old = cluster.leader().await;
    let survivors: Vec<u64> = cluster.ids().into_iter().filter(|&id| id != old).collect();
    let stopped = std::time::Instant::now();
    cluster.stop(old).await;
    successor_before_timer(&cluster, &survivors, old, ("crash", stopped)).await;
    let response = insert(
        &cluster,
        survivors[0],
        &row("AFTER_CRASH", "written after the crash"),
    )
    .await;
    assert_eq!(response.status(), 201);
    cluster.shutdown().await;
}

/// The same for a leader cut off from its followers (to them a pause and a partition look
/// alike); when the cut heals, the old leader follows the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cut_off_leader_is_replaced_once_its_lease_has_passed() {
    let cluster = Cluster::start_with(3, 0, slow_timer).await;
    let old = cluster.leader().await;
    let others: Vec<u64> = cluster.ids().into_iter().filter(|&id| id != old).collect();
    cluster.faults.isolate(old, &others);
    let cut = std::time::Instant::now();
    let new = successor_before_timer(&cluster, &others, old, ("cut", cut)).await;
    let response = insert(
        &cluster,
        others[0],
        &row("AFTER_CUT", "written after the cut"),
    )
    .await;
    assert_eq!(response.status(), 201);
    cluster.faults.heal();
    assert_eq!(
        cluster.leader().await,
        new,
        "the old leader follows the new one"
    );
    cluster.shutdown().await;
}

/// A leader whose followers' answers are all lost keeps sending heartbeats, so openraft's
/// timers never fire, but it can commit nothing: its followers read in those heartbeats that
/// its quorum is older than the lease, ask it, hear that it has none, and one of them stands;
/// the old leader's vote makes the majority. Writes go on through the new leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_whose_answers_are_lost_is_replaced_once_its_quorum_is_a_lease_old() {
    let cluster = Cluster::start_with(3, 0, slow_timer).await;
    let old = cluster.leader().await;
    let others: Vec<u64> = cluster.ids().into_iter().filter(|&id| id != old).collect();
    cluster.faults.lose_answers(old);
    let lost = std::time::Instant::now();
    let new = successor_before_timer(&cluster, &cluster.ids(), old, ("loss", lost)).await;
    assert!(others.contains(&new), "{new}");
    let response = insert(
        &cluster,
        others[0],
        &row("AFTER_LOSS", "written after the answers were lost"),
    )
    .await;
    assert_eq!(response.status(), 201);
    cluster.faults.heal();
    cluster.shutdown().await;
}

/// With five voters the old leader's vote and the candidate's own are not a majority, and
/// the three other followers still hear the leader, whose messages renew their openraft
/// leases. They vote for the candidate at once all the same: the leader told them its quorum
/// is older than the lease, so the lease protects nothing. Without that the first candidacy
/// was refused, the old leader stepped down for it and went quiet, and the cluster waited a
/// whole lease more for silence (1.2-1.4 s without writes in chaos `lost-answers` at 5
/// nodes on the default timers; here past the election timer).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_voters_replace_a_leader_whose_answers_are_lost_in_one_election() {
    let cluster = Cluster::start_with(5, 0, slow_timer).await;
    let old = cluster.leader().await;
    let raft = |id: u64| cluster.member(id).handle.as_ref().unwrap().app.raft.clone();
    let term = raft(old).metrics().borrow_watched().current_term;
    cluster.faults.lose_answers(old);
    let lost = std::time::Instant::now();
    let new = successor_before_timer(&cluster, &cluster.ids(), old, ("loss", lost)).await;
    let elected = raft(new).metrics().borrow_watched().current_term;
    assert_eq!(
        elected,
        term + 1,
        "node {new} won in term {elected}, not the first one after {term}"
    );
    cluster.faults.heal();
    let response = insert(
        &cluster,
        new,
        &row("AFTER_LOSS_OF_5", "written after the answers were lost"),
    )
    .await;
    assert_eq!(response.status(), 201);
    cluster.shutdown().await;
}

/// A voter that hears a leader backed by a quorum refuses a candidate of a later term, with
/// an equal log, for its lease: a node that stands on its own (a pause, a link of its own
/// gone bad) must not unseat a leader that still commits. Only a leader that said its
/// quorum is a lease old loses that protection (the test before).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_voter_that_hears_a_backed_leader_refuses_another_candidate() {
    use openraft::network::v2::RaftNetworkV2 as _;
    use openraft::network::RPCOption;
    use openraft::raft::VoteRequest;

    let cluster = Cluster::start_with(3, 0, slow_timer).await;
    let leader = cluster.leader().await;
    let index = insert_eventually(&cluster, leader, &row("BACKED", "a leader that commits")).await;
    cluster.converge(index).await;
    let followers = cluster.others(leader);
    let (asker, voter) = (followers[0], followers[1]);
    let asking = cluster.member(asker).handle.as_ref().unwrap().app.clone();
    let metrics = asking.raft.metrics().borrow_watched().clone();
    // Its log as long as any: after the convergence, the last entry is applied everywhere.
    let request = VoteRequest::new(
        rowcall_node::raft::Vote::new(metrics.current_term + 1, asker),
        metrics.last_applied,
    );
    let answer = cluster
        .peer(asker, voter)
        .await
        .vote(request, RPCOption::new(Duration::from_secs(2)))
        .await
        .expect("the voter answers");
    assert!(
        !answer.vote_granted,
        "node {voter} voted for {asker} while it heard a leader backed by a quorum"
    );
    cluster.shutdown().await;
}

/// A follower cut off from every other node stands with a pre-vote, which nobody it can
/// reach grants, so its term stays where it was however long it is cut off; back, it
/// follows the leader it had, and that leader is not unseated by a higher term (without
/// pre-votes it raised its term at each candidacy, and the leader stepped down when it
/// heard that term).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_cut_off_for_several_timeouts_comes_back_without_unseating_the_leader() {
    let cluster = Cluster::start_with(3, 0, slow_timer).await;
    let leader = cluster.leader().await;
    let cut = cluster.others(leader)[0];
    let raft = |id: u64| cluster.member(id).handle.as_ref().unwrap().app.raft.clone();
    let term = raft(leader).metrics().borrow_watched().current_term;
    cluster.faults.isolate(cut, &cluster.ids());
    // Past the lease, rowcall's early candidacy and openraft's own timer (slow_timer).
    let until = std::time::Instant::now() + TIMER_FLOOR + Duration::from_millis(1_500);
    while std::time::Instant::now() < until {
        let now = raft(cut).metrics().borrow_watched().current_term;
        assert_eq!(now, term, "node {cut} raised its term while cut off");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.faults.heal();
    eventually(
        Duration::from_secs(20),
        "the cut-off follower follows its leader again",
        || async { raft(cut).metrics().borrow_watched().current_leader == Some(leader) },
    )
    .await;
    let after = raft(leader).metrics().borrow_watched().clone();
    assert_eq!(
        after.current_leader,
        Some(leader),
        "the leader was unseated"
    );
    assert_eq!(after.current_term, term, "an election was held");
    insert_eventually(
        &cluster,
        cut,
        &row("AFTER_THE_CUT", "written after the heal"),
    )
    .await;
    cluster.shutdown().await;
}

/// The nodes among `ids` that take themselves for the leader now (read at once, not
/// awaited).
fn leading_now(cluster: &Cluster, ids: &[u64]) -> Vec<u64> {
    ids.iter()
        .copied()
        .filter(|&id| {
            let handle = cluster.member(id).handle.as_ref().expect("running");
            handle.app.raft.metrics().borrow_watched().current_leader == Some(id)
        })
        .collect()
}

/// In five nodes too a leader stopped as SIGTERM stops it hands leadership over before it
/// goes, sooner than the other followers' leases would let a candidate win (measured: 12 s
/// without the transfer, 0.3 to 4.1 s with it on a loaded machine): openraft's
/// leadership transfer tells every voter to stop honouring the old leader's lease, so the
/// successor needs no vote of the old leader (which, in five, is no majority anyway).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_five_nodes_a_stopping_leader_hands_over_before_the_followers_leases_end() {
    let mut cluster = Cluster::start_with(5, 0, |config| {
        slow_timer(config);
        config.raft.handover_timeout_ms = 20_000;
    })
    .await;
    let old = cluster.leader().await;
    let index = insert_eventually(&cluster, old, &row("BEFORE_HANDOVER", "five nodes")).await;
    cluster.converge(index).await;
    let survivors: Vec<u64> = cluster.ids().into_iter().filter(|&id| id != old).collect();
    let started = std::time::Instant::now();
    cluster.stop_gracefully(old).await;
    let took = started.elapsed();
    let leading = leading_now(&cluster, &survivors);
    assert_eq!(leading.len(), 1, "a survivor leads as the stop returns");
    // A candidate the followers' leases refuse wins only after those leases (4 s here) and
    // its own retry (another 4 s) have passed; a transfer needs neither.
    assert!(
        took < TIMER_FLOOR,
        "the handover took {took:?}, as long as the followers' leases and a retry"
    );
    let after =
        insert_eventually(&cluster, survivors[0], &row("AFTER_HANDOVER", "five nodes")).await;
    assert!(after > index);
    cluster.shutdown().await;
}

/// A follower stops at once while the leader streams appends to it: its gRPC server's
/// graceful shutdown does not wait on the leader's stream (which the leader never closes),
/// and the leader, having kept its quorum, goes on leading.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_stops_at_once_while_the_leader_streams_to_it() {
    let mut cluster = Cluster::start_with(3, 0, |config| config.raft.stream_appends = true).await;
    let leader = cluster.leader().await;
    let index = insert_eventually(&cluster, leader, &row("STREAMED", "before the stop")).await;
    cluster.converge(index).await;
    let follower = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    let network = cluster.network(leader);
    assert!(
        network.append_streams_opened(follower) > 0,
        "the leader streams to {follower}"
    );
    // Far below the 120 s a stream kept open would hold it (the gRPC request bound).
    tokio::time::timeout(Duration::from_secs(20), cluster.stop(follower))
        .await
        .expect("the follower stopped");
    let after = insert_eventually(&cluster, leader, &row("AFTER_THE_STOP", "still led")).await;
    assert!(after > index);
    assert_eq!(cluster.leader().await, leader);
    cluster.shutdown().await;
}

/// Heartbeats go to a follower as one call each: openraft hands each one over as a stream
/// of one request, and a gRPC stream opened for every heartbeat to every follower costs
/// more than the call (on a starved CPU, enough to delay the appends behind it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_leader_heartbeats_without_opening_a_stream_for_each() {
    let cluster = Cluster::start_with(3, 0, |config| config.raft.stream_appends = true).await;
    let leader = cluster.leader().await;
    let index = insert_eventually(&cluster, leader, &row("IDLE", "then heartbeats")).await;
    cluster.converge(index).await;
    let follower = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    let network = cluster.network(leader);
    let before = network.append_streams_opened(follower);
    assert!(before > 0, "the leader streams its appends to {follower}");
    // Thirty heartbeat intervals (100 ms in tests) with nothing to append.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let opened = network.append_streams_opened(follower) - before;
    assert!(
        opened <= 2,
        "{opened} streams opened to an idle follower in 30 heartbeat intervals"
    );
    cluster.shutdown().await;
}

/// A follower whose disk is slower than the heartbeat keeps its stream of appends: an
/// answer late by a slow sync (or a TCP retransmission) is waited for, not taken for a
/// broken stream that sends every append in flight again on a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_slower_than_the_heartbeat_keeps_its_stream() {
    let cluster = Cluster::start_with(3, 0, |config| config.raft.stream_appends = true).await;
    let leader = cluster.leader().await;
    let index = insert_eventually(&cluster, leader, &row("BEFORE_SLOW", "fast disks")).await;
    cluster.converge(index).await;
    let slow = cluster.others(leader)[0];
    let network = cluster.network(leader);
    let before = network.append_streams_opened(slow);
    // Three heartbeats (100 ms in tests) per sync on that follower.
    let storage = &cluster.member(slow).handle.as_ref().unwrap().app.storage;
    storage.slow_down(Duration::from_millis(300));
    let mut last = index;
    for i in 0..5 {
        last = insert_eventually(
            &cluster,
            leader,
            &row(&format!("SLOW_{i}"), "one slow disk"),
        )
        .await;
    }
    cluster.converge(last).await;
    storage.slow_down(Duration::ZERO);
    let opened = network.append_streams_opened(slow) - before;
    assert!(
        opened <= 2,
        "{opened} streams opened to a follower whose syncs take three heartbeats"
    );
    cluster.shutdown().await;
}

/// A leader stopped as SIGTERM stops it hands leadership to a voter level with its log
/// before it goes: when its shutdown returns, a survivor already leads (without the handover
/// the survivors would still be waiting out the old leader's lease, then an election), and
/// every write sent through the survivors meanwhile lands once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_stopped_gracefully_hands_leadership_over_before_it_goes() {
    // A generous bound: on a busy machine a handover takes longer, and one that gives up
    // leaves the cluster to an election (what this test tells apart).
    let mut cluster =
        Cluster::start_with(3, 0, |config| config.raft.handover_timeout_ms = 20_000).await;
    let old = cluster.leader().await;
    let survivors: Vec<u64> = cluster.ids().into_iter().filter(|&id| id != old).collect();
    let stopped = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = survivors
        .iter()
        .map(|&id| {
            let (http, url, stopped) = (cluster.http.clone(), cluster.url(id), stopped.clone());
            tokio::spawn(async move {
                let mut keys = Vec::new();
                // Writes before, during and after the stop; ten more once it returned.
                let mut after = 0;
                while after < 10 {
                    let key = format!("HANDOVER_{id}_{:03}", keys.len());
                    // Retried with its key while the cluster cannot take it (503), as by any
                    // careful client; what counts is that it lands, once.
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
                    let response = loop {
                        let body = row(&key, "written across a handover");
                        let response = insert_at(&http, &url, &body).await;
                        if response.status() != 503 || tokio::time::Instant::now() > deadline {
                            break response;
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    };
                    assert_eq!(response.status(), 201, "{key} through node {id}");
                    keys.push(key);
                    if stopped.load(Ordering::Relaxed) {
                        after += 1;
                    }
                }
                keys
            })
        })
        .collect();
    eventually(Duration::from_secs(20), "writes under way", || {
        let applied = cluster.applied(old);
        async move { applied > 10 }
    })
    .await;
    cluster.stop_gracefully(old).await;
    stopped.store(true, Ordering::Relaxed);
    // Read at once, not awaited: the handover made the successor before the stop returned.
    let leading = leading_now(&cluster, &survivors);
    assert_eq!(
        leading.len(),
        1,
        "a survivor leads as the old leader's stop returns"
    );
    let mut written = Vec::new();
    for writer in writers {
        written.extend(writer.await.expect("writer"));
    }
    let last = cluster.applied(leading[0]);
    cluster.converge(last).await;
    for &id in &survivors {
        for key in &written {
            let (status, _, _) = cluster.get(id, &format!("/api/directory/{key}")).await;
            assert_eq!(status, 200, "node {id} has {key}");
        }
    }
    cluster.shutdown().await;
}

/// An operator moves leadership before maintenance (`POST /api/cluster/leader`, as etcd's
/// `move-leader`): asked on any node, the named voter leads when the call returns, what was
/// acknowledged before is still there and writes go on. A node that is not a voter is
/// refused (409) and so is a caller without the admin key (401), and nothing moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_moves_leadership_to_a_named_voter_from_any_node() {
    let cluster = Cluster::start(3, 0).await;
    let old = cluster.leader().await;
    let followers: Vec<u64> = cluster.ids().into_iter().filter(|&id| id != old).collect();
    let (target, asked_on) = (followers[0], followers[1]);
    let before = insert(
        &cluster,
        old,
        &row("BEFORE_MOVE", "written before the move"),
    )
    .await;
    assert_eq!(before.status(), 201);
    let move_to = |to: Value, key: Option<&'static str>| {
        let request = cluster
            .http
            .post(format!("{}/api/cluster/leader", cluster.url(asked_on)))
            .json(&to);
        async move {
            let request = match key {
                Some(key) => request.bearer_auth(key),
                None => request,
            };
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let (status, _) = move_to(json!({"to": target}), None).await;
    assert_eq!(status, 401, "no admin key");
    let (status, body) = move_to(json!({"to": 9}), Some(ADMIN)).await;
    assert_eq!(status, 409, "node 9 is not a voter: {body}");
    assert_eq!(cluster.leader().await, old, "a refused move moves nothing");
    let (status, body) = move_to(json!({"to": target}), Some(ADMIN)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["leader"], target, "{body}");
    // Read at once: the call returns once the target has taken over.
    let handle = cluster.member(target).handle.as_ref().expect("running");
    assert_eq!(
        handle.app.raft.metrics().borrow_watched().current_leader,
        Some(target),
        "node {target} leads as the call returns"
    );
    let after = insert_eventually(&cluster, asked_on, &row("AFTER_MOVE", "written after")).await;
    cluster.converge(after).await;
    for id in cluster.ids() {
        for key in ["BEFORE_MOVE", "AFTER_MOVE"] {
            let (status, _, _) = cluster.get(id, &format!("/api/directory/{key}")).await;
            assert_eq!(status, 200, "node {id} has {key}");
        }
    }
    // Moving to the leader it already is changes nothing.
    let (status, body) = move_to(json!({"to": target}), Some(ADMIN)).await;
    assert_eq!((status, &body["leader"]), (200, &json!(target)), "{body}");
    cluster.shutdown().await;
}

fn small_snapshots(config: &mut rowcall_node::Config) {
    config.raft.snapshot_every = 50;
    config.raft.keep_after_snapshot = 0;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_that_missed_a_compacted_log_catches_up_by_snapshot() {
    let mut cluster = Cluster::start_with(3, 0, small_snapshots).await;
    let leader = cluster.leader().await;
    let behind = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    cluster.stop(behind).await;
    let mut last = 0;
    let mut receipts = Vec::new();
    for i in 0..150 {
        let response = insert(
            &cluster,
            leader,
            &row(&format!("SNAP_{i:03}"), "compacted away"),
        )
        .await;
        assert_eq!(response.status(), 201);
        last = index_of(&response);
        if i % 30 == 0 {
            let invoked: Value = cluster
                .http
                .post(format!("{}/api/dispatch", cluster.url(leader)))
                .json(&json!({"key": format!("SNAP_{i:03}")}))
                .fetch()
                .await;
            receipts.push(
                invoked["proof"]["invocation_id"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
        }
    }
    eventually(Duration::from_secs(10), "the leader purged its log", || {
        let purged = cluster
            .member(leader)
            .handle
            .as_ref()
            .unwrap()
            .app
            .raft
            .metrics()
            .borrow_watched()
            .purged;
        async move { purged.is_some_and(|p| p.index > 0) }
    })
    .await;
    cluster.restart(behind).await;
    cluster.converge(last).await;
    let (_, _, status) = cluster.get(behind, "/api/cluster").await;
    assert!(
        status["snapshot_index"].as_u64().is_some(),
        "it installed a snapshot: {status}"
    );
    let (_, _, counts) = cluster.get(behind, "/api/directory/counts").await;
    assert_eq!(counts["rows_total"], 150);
    for id in &receipts {
        let (status, _, confirmed) = cluster
            .get(behind, &format!("/api/dispatch?confirm={id}"))
            .await;
        assert_eq!(status, 200, "{confirmed}");
        assert_eq!(confirmed["confirmed"], true);
    }
    let (_, _, asked) = cluster
        .get(behind, "/api/dispatch?ask=compacted+away")
        .await;
    assert!(
        asked["count"].as_u64().unwrap() > 0,
        "its resolver index was rebuilt: {asked}"
    );
    cluster.shutdown().await;
}

/// A node that stood for election follows no one until the vote is decided. That is no cut
/// from the cluster: a write sent to it then is held for the winner (not refused at once),
/// until it has been out of touch as long as a cut takes (twice the lease); then writes are
/// refused at once, as on any node cut off.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_candidate_is_cut_off_only_once_its_last_leader_is_two_leases_old() {
    // No pre-vote: the lone survivor raises its term and names no leader while it stands.
    // A long lease, so that the check below has a second to spare on a busy machine.
    let mut cluster = Cluster::start_with(3, 0, |config| {
        config.raft.pre_vote = false;
        config.raft.election_timeout_min_ms = 1_500;
        config.raft.election_timeout_max_ms = 2_000;
    })
    .await;
    let leader = cluster.leader().await;
    let others = cluster.others(leader);
    let (alone, gone) = (others[0], others[1]);
    let app = cluster.member(alone).handle.as_ref().unwrap().app.clone();
    let term = app.raft.metrics().borrow_watched().current_term;
    cluster.stop(gone).await;
    cluster.stop(leader).await;
    let stopped = std::time::Instant::now();
    eventually(
        Duration::from_secs(20),
        "the survivor stands for election",
        || {
            let metrics = app.raft.metrics().borrow_watched().clone();
            let standing = metrics.current_term > term && metrics.current_leader.is_none();
            async move { standing }
        },
    )
    .await;
    let standing = stopped.elapsed();
    let cut = app.is_cut_off();
    assert!(
        standing >= Duration::from_secs(4) || !cut,
        "node {alone} stood {standing:?} after its leader stopped and counted itself cut off"
    );
    eventually(
        Duration::from_secs(20),
        "the survivor counts itself cut off",
        || {
            let cut = app.is_cut_off();
            async move { cut }
        },
    )
    .await;
    let refused = insert(&cluster, alone, &row("NOT_WRITTEN", "refused, cut off")).await;
    assert_eq!(refused.status(), 503);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_minority_partition_serves_stale_reads_refuses_writes_and_keeps_receipts() {
    let cluster = Cluster::start(3, 0).await;
    let seed = insert(
        &cluster,
        1,
        &row("PARTITION_ECHO", "Answer during a partition"),
    )
    .await;
    assert_eq!(seed.status(), 201);
    let leader = cluster.leader().await;
    // A share token minted before the partition (its secret replicates with it).
    let minted = cluster
        .http
        .post(format!("{}/api/share", cluster.url(leader)))
        .header("x-terminal-key", ADMIN)
        .json(&json!({"key": "PARTITION_ECHO"}))
        .send()
        .await
        .unwrap();
    let minted_index = index_of(&minted);
    let token = minted.json::<Value>().await.unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    cluster.converge(index_of(&seed).max(minted_index)).await;
    let cut = cluster.others(leader)[0];
    cluster.faults.isolate(cut, &cluster.ids());
    eventually(
        Duration::from_secs(10),
        "the cut-off node knows it is stale",
        || {
            let stale = cluster.member(cut).handle.as_ref().unwrap().app.is_stale();
            async move { stale }
        },
    )
    .await;

    let (status, headers, got) = cluster.get(cut, "/api/directory/PARTITION_ECHO").await;
    assert_eq!(status, 200);
    assert_eq!(got["key"], "PARTITION_ECHO");
    assert_eq!(headers["x-rowcall-stale"], "true");
    let (status, headers, _) = cluster
        .get(cut, "/api/dispatch?ask=answer+during+a+partition")
        .await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-rowcall-stale"], "true");

    let refused = insert(&cluster, cut, &row("NOT_WRITTEN", "refused without quorum")).await;
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    // A revocation may have happened on the other side: the token is refused here, not
    // honoured from a possibly outdated list; the majority still honours it.
    let shared = format!("/api/dispatch?invoke=PARTITION_ECHO&share={token}");
    let (status, _, answer) = cluster.get(cut, &shared).await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"]["code"], "share_unchecked");
    let (status, _, answer) = cluster.get(leader, &shared).await;
    assert_eq!(status, 200, "{answer}");

    let mut pending = Vec::new();
    for _ in 0..5 {
        let invoked: Value = cluster
            .http
            .post(format!("{}/api/dispatch", cluster.url(cut)))
            .json(&json!({"key": "PARTITION_ECHO"}))
            .fetch()
            .await;
        assert_eq!(invoked["ok"], true, "{invoked}");
        assert_eq!(invoked["proof"]["status"], "pending", "{invoked}");
        let id = invoked["proof"]["invocation_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let (status, _, confirmed) = cluster
            .get(cut, &format!("/api/dispatch?confirm={id}"))
            .await;
        assert_eq!(status, 200);
        assert_eq!(confirmed["status"], "pending");
        pending.push(id);
    }
    // The majority side keeps taking writes meanwhile.
    let majority = cluster.ids().into_iter().find(|&id| id != cut).unwrap();
    insert_eventually(
        &cluster,
        majority,
        &row("MAJORITY_WRITE", "written by the majority"),
    )
    .await;

    cluster.faults.heal();
    for id in &pending {
        for node in cluster.ids() {
            let path = format!("/api/dispatch?confirm={id}");
            eventually(
                Duration::from_secs(20),
                &format!("{id} confirms on node {node}"),
                || {
                    let request = cluster.get(node, &path);
                    async move {
                        let (status, _, body) = request.await;
                        status == 200 && body["confirmed"] == true && body.get("status").is_none()
                    }
                },
            )
            .await;
        }
    }
    // The healed node answers a linearizable read with the majority's write (it was not
    // there when the partition began), not with its own stale view.
    let (status, headers, got) = cluster
        .get(
            cut,
            "/api/directory/MAJORITY_WRITE?consistency=linearizable",
        )
        .await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["key"], "MAJORITY_WRITE");
    assert_eq!(
        got["content"],
        row("MAJORITY_WRITE", "written by the majority")["content"]
    );
    assert!(!headers.contains_key("x-rowcall-stale"));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_learner_serves_reads_never_votes_and_forwards_writes() {
    let cluster = Cluster::start(3, 1).await;
    let learner = 4;
    let (_, _, status) = cluster.get(learner, "/api/cluster").await;
    assert_eq!(status["role"], "learner");
    let leader = cluster.leader().await;
    let (_, _, status) = cluster.get(leader, "/api/cluster").await;
    assert_eq!(status["learners"], json!([learner]), "{status}");
    let voters: Vec<&Value> = status["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["voter"] == true)
        .collect();
    assert_eq!(voters.len(), 3);
    assert!(voters.iter().all(|m| m["id"] != learner));

    let response = insert(
        &cluster,
        learner,
        &row("FROM_THE_EDGE", "written through a learner"),
    )
    .await;
    assert_eq!(response.status(), 201);
    let (status, _, got) = cluster.get(learner, "/api/directory/FROM_THE_EDGE").await;
    assert_eq!(status, 200, "{got}");
    let invoked = cluster
        .http
        .post(format!("{}/api/dispatch", cluster.url(learner)))
        .bearer_auth(INVOKE)
        .json(&json!({"key": "FROM_THE_EDGE"}))
        .send()
        .await
        .unwrap();
    assert_eq!(invoked.status(), 200);
    let invoked: Value = invoked.json().await.unwrap();
    assert_eq!(invoked["proof"]["status"], "committed");

    // Losing the learner costs the voters nothing.
    cluster.faults.isolate(learner, &cluster.ids());
    let response = insert(
        &cluster,
        leader,
        &row("WITHOUT_THE_LEARNER", "the learner is cut off"),
    )
    .await;
    assert_eq!(response.status(), 201);
    cluster.faults.heal();
    cluster.converge(index_of(&response)).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn members_can_be_removed_and_the_rest_keeps_writing() {
    let mut cluster = Cluster::start(3, 0).await;
    let leader = cluster.leader().await;
    let gone = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    let asked_on = cluster
        .ids()
        .into_iter()
        .find(|&id| id != leader && id != gone)
        .unwrap();
    let removed = cluster
        .http
        .delete(format!(
            "{}/api/cluster/members/{gone}",
            cluster.url(asked_on)
        ))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(removed.status(), 200);
    cluster.stop(gone).await;
    let (_, _, status) = cluster.get(leader, "/api/cluster").await;
    assert_eq!(status["members"].as_array().unwrap().len(), 2, "{status}");
    // Two voters remain; both must answer, and they do.
    let response = insert(
        &cluster,
        asked_on,
        &row("AFTER_REMOVAL", "written by two voters"),
    )
    .await;
    assert_eq!(response.status(), 201);
    let again = cluster
        .http
        .delete(format!(
            "{}/api/cluster/members/{gone}",
            cluster.url(leader)
        ))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 409, "not a member any more");
    cluster.shutdown().await;
}

/// A follower that cannot answer an AppendEntries within the heartbeat interval (here its
/// disk: every sync takes a second; between regions, a round trip longer than the heartbeat)
/// makes openraft drop the append and send it again. The leader says so: per member in its
/// `/api/cluster` (`unanswered_appends`), so an operator sees which link needs a longer
/// `raft.heartbeat_ms`, while the writes commit with the other follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_leader_counts_appends_a_slow_follower_left_unanswered_within_the_heartbeat() {
    let cluster = Cluster::start(3, 0).await;
    let leader = cluster.leader().await;
    let followers: Vec<u64> = cluster
        .ids()
        .into_iter()
        .filter(|id| *id != leader)
        .collect();
    let (slow, healthy) = (followers[0], followers[1]);
    let storage = &cluster.member(slow).handle.as_ref().unwrap().app.storage;
    storage.slow_down(Duration::from_secs(1));
    for i in 0..3 {
        let response = insert(&cluster, leader, &row(&format!("UNANSWERED_{i}"), "Slow")).await;
        assert_eq!(
            response.status(),
            201,
            "committed with the healthy follower"
        );
    }
    let unanswered =
        |status: &Value, id: u64| status["unanswered_appends"][id.to_string()].as_u64();
    let url = format!("{}/api/cluster", cluster.url(leader));
    eventually(
        Duration::from_secs(10),
        "the leader counts the slow follower's unanswered appends",
        || {
            let request = cluster.http.get(&url).send();
            async move {
                let Ok(response) = request.await else {
                    return false;
                };
                let status: Value = response.json().await.unwrap_or(Value::Null);
                unanswered(&status, slow).is_some_and(|n| n >= 1)
            }
        },
    )
    .await;
    storage.slow_down(Duration::ZERO);
    let (_, _, status) = cluster.get(leader, "/api/cluster").await;
    assert!(
        unanswered(&status, slow) > unanswered(&status, healthy),
        "the healthy follower answers in time: {status}"
    );
    // The gRPC status says the same (over TLS when the peers use it: one listener).
    let grpc = cluster.member(leader).grpc;
    let client = match &cluster.ca {
        Some(ca) => rowcall_client::Client::builder()
            .nodes([grpc.to_string()])
            .tls_ca(ca.ca_pem()),
        None => rowcall_client::Client::builder().nodes([format!("http://{grpc}")]),
    }
    .credential(ADMIN)
    .build()
    .unwrap();
    let grpc_status = client.status().await.unwrap();
    assert!(
        grpc_status
            .unanswered_appends
            .get(&slow)
            .is_some_and(|n| *n >= 1),
        "{grpc_status:?}"
    );
    let last = cluster.applied(leader);
    cluster.converge(last).await;
    cluster.shutdown().await;
}
