//! Stale marking that cannot be fooled (issue 10, item 6). Five nodes split {L, F} | {A, B, C}:
//! the majority elects a new leader, while L — cut off from its quorum — keeps sending F
//! heartbeats. What must hold: F does not take those for leader contact; it marks its reads
//! stale and fails `/readyz`, and so does L; cut off for longer, F refuses writes at once.
//! Healed, both are fresh again.

use crate::common;

use std::time::Duration;

use common::cluster::{eventually, Cluster};
use common::ADMIN;
use serde_json::json;

fn leader_seen_by(cluster: &Cluster, id: u64) -> Option<u64> {
    let handle = cluster.member(id).handle.as_ref().expect("running");
    handle.app.raft.metrics().borrow().current_leader
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
    // The old leader still counts itself leader and still reaches F.
    assert_eq!(leader_seen_by(&cluster, follower), Some(leader));
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
    let (status, _, _) = cluster.get(follower, "/readyz").await;
    assert_eq!(status, 200);
    cluster.shutdown().await;
}
