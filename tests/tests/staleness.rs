//! Stale marking that cannot be fooled (issue 10, item 6). Five nodes split {L, F} | {A, B, C}:
//! the majority elects a new leader, while L — cut off from its quorum — keeps sending F
//! heartbeats. What must hold: F does not take those for leader contact; it marks its reads
//! stale and fails `/readyz`, and so does L; cut off for longer, F refuses writes at once.
//! Healed, both are fresh again. And (issue 29, item 5) a follower counts contact from when
//! the leader's message arrived, so a stall on its own side cannot make it read fresh.

use crate::common;
use rowcall_node::raft::WatchReceiver as _;

use std::time::Duration;

use common::cluster::{eventually, Cluster};
use common::ADMIN;
use serde_json::json;

fn leader_seen_by(cluster: &Cluster, id: u64) -> Option<u64> {
    let handle = cluster.member(id).handle.as_ref().expect("running");
    handle.app.raft.metrics().borrow_watched().current_leader
}

fn stale(cluster: &Cluster, id: u64) -> bool {
    cluster
        .member(id)
        .handle
        .as_ref()
        .expect("running")
        .app
        .is_stale()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_of_a_deposed_leader_turns_stale_once_the_majority_elects_another() {
    let cluster = Cluster::start(5, 0).await;
    let written = cluster
        .http
        .post(format!("{}/api/directory", cluster.url(1)))
        .header("x-terminal-key", ADMIN)
        .json(
            &json!({"key": "BEFORE_SPLIT", "type": "static", "auth": "public",
                      "content": "# WHAT: written before the split\n\n{}\n"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(written.status(), 201);
    let leader = cluster.leader().await;
    let ids = cluster.ids();
    let follower = ids.iter().copied().find(|&i| i != leader).unwrap();
    let majority: Vec<u64> = ids
        .iter()
        .copied()
        .filter(|&i| i != leader && i != follower)
        .collect();
    let last = cluster.applied(leader);
    cluster.converge(last).await;
    assert!(!stale(&cluster, follower), "fresh before the split");

    cluster.faults.partition(&[leader, follower], &majority);
    eventually(
        Duration::from_secs(30),
        "the majority elects a leader of its own",
        || {
            let seen: Vec<Option<u64>> = majority
                .iter()
                .map(|&m| leader_seen_by(&cluster, m))
                .collect();
            let agreed = seen[0].is_some_and(|l| majority.contains(&l))
                && seen.iter().all(|s| *s == seen[0]);
            async move { agreed }
        },
    )
    .await;
    // F may by now have stood against the old leader, whose heartbeats tell it that it has
    // no quorum (early_election: leader_unbacked); either way F must read stale.
    eventually(
        Duration::from_secs(10),
        "the deposed leader's follower marks itself stale",
        || {
            let done = stale(&cluster, follower) && stale(&cluster, leader);
            async move { done }
        },
    )
    .await;

    let (status, headers, body) = cluster.get(follower, "/api/directory/BEFORE_SPLIT").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(headers["x-rowcall-stale"], "true");
    let (status, _, ready) = cluster.get(follower, "/readyz").await;
    assert_eq!(status, 503, "{ready}");
    assert_eq!(ready["stale"], true);
    eventually(Duration::from_secs(10), "F counts itself cut off", || {
        let cut_off = cluster
            .member(follower)
            .handle
            .as_ref()
            .unwrap()
            .app
            .is_cut_off();
        async move { cut_off }
    })
    .await;
    let refused = cluster
        .http
        .post(format!("{}/api/directory", cluster.url(follower)))
        .header("x-terminal-key", ADMIN)
        .json(&json!({"key": "ON_THE_MINORITY", "type": "static", "content": ""}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);

    cluster.faults.heal();
    eventually(Duration::from_secs(20), "both are fresh again", || {
        let done = !stale(&cluster, follower) && !stale(&cluster, leader);
        async move { done }
    })
    .await;
    // Ready once it also knows the leader and has applied what it knows is committed.
    eventually(
        Duration::from_secs(20),
        "the follower is ready again",
        || async { cluster.get(follower, "/readyz").await.0 == 200 },
    )
    .await;
    cluster.shutdown().await;
}

/// Issue 29, item 5: leader contact counts from when the leader's message arrived, not from
/// when this node finished handling it. Three nodes; F is cut off while leadership moves to
/// C, so the first message F takes from C makes it save C's new vote, and F's disk stalls
/// that save for three leases. The message says C's quorum is brand new, but it is more than
/// a lease old by the time F answers it: F must read as stale then, not as freshly in touch
/// for another lease. (The message is handed to F's Raft service directly, as a peer whose
/// call has no deadline would deliver it: openraft cancels its own calls after a heartbeat
/// interval, which hides the stall only as long as that interval stays short.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_whose_disk_stalls_on_a_leaders_message_counts_contact_from_its_arrival() {
    use rowcall_node::api::peer::RaftGrpc;
    use rowcall_proto::raft::raft_service_server::RaftService;
    use rowcall_proto::raft::RaftMessage;

    let cluster = Cluster::start(3, 0).await;
    let old = cluster.leader().await;
    let ids = cluster.ids();
    let follower = ids.iter().copied().find(|&i| i != old).unwrap();
    let app = |id: u64| &cluster.member(id).handle.as_ref().expect("running").app;
    cluster.converge(cluster.applied(old)).await;

    cluster.faults.isolate(follower, &ids);
    let successor = app(old)
        .hand_over_leadership(Duration::from_secs(20))
        .await
        .expect("a handover")
        .expect("a successor");
    assert_ne!(successor, follower, "F is cut off");
    eventually(Duration::from_secs(10), "the successor leads", || {
        let leads = leader_seen_by(&cluster, successor) == Some(successor);
        async move { leads }
    })
    .await;

    // What C would send F next: its vote, nothing new, and F's own last entry (which C has,
    // all of it committed) as the point to continue from.
    let (vote, last) = {
        let c = app(successor).raft.metrics().borrow_watched().vote;
        let f = app(follower).raft.metrics().borrow_watched().last_applied;
        (json!(c), json!(f))
    };
    let append = json!({"vote": vote, "prev_log_id": last, "leader_commit": last, "entries": []});
    let message = RaftMessage {
        payload: serde_json::to_vec(&append).unwrap(),
        from: Some(app(successor).identity.sender()),
        to_node: follower,
        to_incarnation: app(follower).identity.get().incarnation,
        leader_quorum_age_ms: Some(0),
    };
    let lease = app(follower).liveness.stale_after();
    app(follower).storage.slow_down(lease * 3);
    let service = RaftGrpc::new(app(follower).clone(), tokio::sync::watch::channel(false).1);
    let answer = service
        .append_entries(cluster.as_from_peer(successor, message))
        .await
        .expect("F answers");
    app(follower).storage.slow_down(Duration::ZERO);
    let answer: serde_json::Value = serde_json::from_slice(&answer.into_inner().payload).unwrap();
    assert_eq!(answer, json!({"Ok": "Success"}), "F takes C for its leader");
    // The contact F counts with C, which `x-rowcall-stale` and `/readyz` are decided by
    // while F follows C. (F soon campaigns itself: its election timer, too, runs from when
    // the message arrived, so it is already past due.)
    let term = vote["leader_id"]["term"].as_u64().unwrap();
    let quorum_at = app(follower)
        .liveness
        .leader_quorum_at(successor, term)
        .expect("F counted contact with C");
    assert!(
        quorum_at.elapsed() > lease,
        "C's message reached F more than a lease ago, and nothing since: F's contact with C \
         is older than the lease, so F reads as stale"
    );
    cluster.faults.heal();
    cluster.shutdown().await;
}
