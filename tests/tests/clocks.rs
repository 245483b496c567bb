//! Clocks that jump (issue 29, item 6b). A member whose clock runs a day fast forwards a
//! write it stamped by that clock. What must hold: the write is taken (the writer is not at
//! fault), and the row's `updated_at` is not in the future: the leader holds every write's
//! time to where the majority of members' clocks stand, plus a small lead.
//! (Retention under a fast leader clock is covered next to apply, in
//! `store::state_machine::clock`; the chaos harness restarts a real leader with its clock
//! shifted through `ROWCALL_TEST_CLOCK_OFFSET_MS`.)

use crate::common;

use common::cluster::Cluster;
use rowcall_node::api::peer::RaftGrpc;
use rowcall_node::catalogue::row::RowInput;
use rowcall_node::model::time::{now_ms, parse_ms, CLOCK_LEAD_MS, MAX_SAMPLE_RTT_MS};
use rowcall_node::raft::{Command, Request};
use rowcall_proto::raft::raft_service_server::RaftService;
use rowcall_proto::raft::RaftMessage;
use serde_json::json;

const DAY_MS: u64 = 86_400_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_stamped_by_a_clock_a_day_fast_is_taken_and_not_dated_in_the_future() {
    let cluster = Cluster::start(3, 0).await;
    let leader = cluster.leader().await;
    let fast = cluster.ids().into_iter().find(|&i| i != leader).unwrap();
    let app = |id: u64| &cluster.member(id).handle.as_ref().expect("running").app;

    // What the fast member forwards for a client's write: the time is its clock's.
    let row: RowInput = serde_json::from_value(
        json!({"key": "FAST_CLOCK", "type": "static", "content": "# WHAT: stamped fast\n"}),
    )
    .unwrap();
    let request = Request::new(Command::PutRows {
        at_ms: now_ms() + DAY_MS,
        rows: vec![row],
    });
    let message = RaftMessage {
        payload: serde_json::to_vec(&request).unwrap(),
        from: Some(app(fast).identity.sender()),
        to_node: leader,
        to_incarnation: app(leader).identity.get().incarnation,
        leader_quorum_age_ms: None,
    };
    let answer = RaftGrpc::new(app(leader).clone(), tokio::sync::watch::channel(false).1)
        .forward(cluster.as_from_peer(fast, message))
        .await
        .expect("the leader answers");
    let answer: serde_json::Value = serde_json::from_slice(&answer.into_inner().payload).unwrap();
    assert!(answer.get("Ok").is_some(), "the write is taken: {answer}");
    let written_by = now_ms();

    let (status, _, body) = cluster.get(leader, "/api/directory/FAST_CLOCK").await;
    assert_eq!(status, 200, "{body}");
    let updated_at = parse_ms(body["row"]["updated_at"].as_str().unwrap_or_default())
        .or_else(|| parse_ms(body["updated_at"].as_str().unwrap_or_default()))
        .unwrap_or_else(|| panic!("a time: {body}"));
    // Every clock here is the same one: the majority's time is the leader's, known to
    // within half a sample's round trip.
    let latest = written_by + CLOCK_LEAD_MS as u64 + MAX_SAMPLE_RTT_MS / 2;
    assert!(
        updated_at <= latest,
        "updated_at {updated_at} is later than the cluster's clocks allow ({latest})"
    );
    cluster.shutdown().await;
}
