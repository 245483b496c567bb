//! Node identity (issue 10, item 1): every cluster has a cluster id, every data folder an
//! incarnation, and both travel in the membership and in every Raft message. What must hold:
//! a voter that lost its disk and comes back under its old id can neither vote with its
//! empty log nor be admitted again until its old self is removed, so nothing committed is
//! lost; a node told about peers never founds a cluster of its own; and a node of another
//! cluster is refused.

use crate::common;
use rowcall_node::raft::WatchReceiver as _;

use std::time::Duration;

use common::cluster::{eventually, Cluster};
use common::ADMIN;
use rowcall_proto::raft::raft_service_client::RaftServiceClient;
use rowcall_proto::raft::{RaftMessage, Sender};
use serde_json::{json, Value};

fn row(key: &str) -> Value {
    json!({"key": key, "type": "static", "auth": "public",
           "content": format!("# WHAT: identity probe {key}\n\n{{}}\n")})
}

async fn insert(cluster: &Cluster, id: u64, key: &str) -> reqwest::Response {
    cluster
        .http
        .post(format!("{}/api/directory", cluster.url(id)))
        .header("x-terminal-key", ADMIN)
        .json(&row(key))
        .send()
        .await
        .unwrap()
}

async fn remove_member(cluster: &Cluster, on: u64, gone: u64) -> reqwest::StatusCode {
    cluster
        .http
        .delete(format!("{}/api/cluster/members/{gone}", cluster.url(on)))
        .header("x-terminal-key", ADMIN)
        .send()
        .await
        .unwrap()
        .status()
}

/// Member `id` as a `GET /api/cluster` answer lists it.
fn member_of(status: &Value, id: u64) -> Value {
    status["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == id)
        .unwrap()
        .clone()
}

fn term(cluster: &Cluster, id: u64) -> u64 {
    let handle = cluster.member(id).handle.as_ref().expect("running");
    handle.app.raft.metrics().borrow_watched().current_term
}

/// A raw client of node `id`'s Raft service, for messages no real peer would send, with a
/// certificate of the cluster naming node `as_node`.
async fn raft_client(
    cluster: &Cluster,
    id: u64,
    as_node: u64,
) -> RaftServiceClient<tonic::transport::Channel> {
    RaftServiceClient::new(cluster.peer_channel(id, as_node).await)
}

fn leads(cluster: &Cluster, id: u64) -> bool {
    let handle = cluster.member(id).handle.as_ref().expect("running");
    handle.app.raft.metrics().borrow_watched().current_leader == Some(id)
}

/// The scenario a Jepsen reader finds: X is committed on {L, A} while B lags; A loses its
/// disk and comes back under its old id while L is cut off. If A granted B its vote (an
/// empty log loses no comparison), B would lead without X and X would be gone for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wiped_voter_cannot_elect_a_leader_that_lacks_committed_writes() {
    a_voter_that_lost_its_state_cannot_elect_a_leader_that_lacks_committed_writes(|c, id| {
        c.wipe(id)
    })
    .await;
}

/// Issue 29, item 1: the same, when only the Raft state is lost (the `sled/` folder removed,
/// `identity.json` kept). Before, the node came back as its old incarnation, granted the
/// lagging node its vote with an empty log, and the committed write was gone ("the node
/// without the committed write was elected with the wiped node's vote").
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_voter_that_lost_only_its_raft_state_cannot_elect_a_leader_that_lacks_committed_writes() {
    a_voter_that_lost_its_state_cannot_elect_a_leader_that_lacks_committed_writes(|c, id| {
        let data = c.member_config(id).node.data;
        std::fs::remove_dir_all(data.join("sled")).unwrap();
        assert!(data.join("identity.json").exists());
    })
    .await;
}

/// The same, when only the Raft log's entries are lost (the `raft-log/` folder removed, the
/// database with its vote and identity kept). Kept as it was, the vote would let the node
/// come back as its old incarnation with an empty log, as above; the log's binding clears
/// the database's Raft state instead, and the node is a new incarnation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_voter_that_lost_only_its_log_cannot_elect_a_leader_that_lacks_committed_writes() {
    a_voter_that_lost_its_state_cannot_elect_a_leader_that_lacks_committed_writes(|c, id| {
        let data = c.member_config(id).node.data;
        std::fs::remove_dir_all(data.join("raft-log")).unwrap();
        assert!(data.join("sled").exists() && data.join("identity.json").exists());
    })
    .await;
}

async fn a_voter_that_lost_its_state_cannot_elect_a_leader_that_lacks_committed_writes(
    lose: fn(&Cluster, u64),
) {
    // Without pre-votes, so that the lagging node's real vote requests reach the node that
    // lost its state (a pre-vote that node refuses would stop them first, and the test
    // would check less); it campaigns by raising its term, which the test counts.
    let mut cluster = Cluster::start_with(3, 0, |config| config.raft.pre_vote = false).await;
    let leader = cluster.leader().await;
    let others = cluster.others(leader);
    let (wiped, lagging) = (others[0], others[1]);

    cluster.faults.isolate(lagging, &cluster.ids());
    let written = insert(&cluster, leader, "COMMITTED_ON_TWO").await;
    assert_eq!(written.status(), 201, "committed by the leader and {wiped}");

    cluster.stop(wiped).await;
    lose(&cluster, wiped);
    cluster.faults.heal();
    cluster.faults.isolate(leader, &cluster.ids());
    // The wiped node starts on its old id and addresses and asks the lagging node to let it
    // in. That node cannot reach the leader, so the join waits, and the wiped node serves
    // meanwhile: exactly when the lagging node campaigns for its vote.
    let mut config = cluster.member_config(wiped);
    config.cluster.join = vec![cluster.member(lagging).grpc.to_string()];
    let options = cluster.options();
    let rejoining = tokio::spawn(rowcall_node::start_with(config, options));

    let from = term(&cluster, lagging);
    // Three campaigns take a few seconds; the bound is for a CI machine running many
    // clusters at once on two cores (30 s was once not enough there).
    eventually(
        Duration::from_secs(90),
        "the lagging node campaigns three times",
        || {
            let elections = term(&cluster, lagging).saturating_sub(from);
            assert!(
                !leads(&cluster, lagging),
                "the node without the committed write was elected with the wiped node's vote"
            );
            async move { elections >= 3 }
        },
    )
    .await;

    // Healed, the node that has the write leads again; the wiped node is admitted only once
    // its old self is removed, and then catches up like a new member. Its waiting join
    // reaches the leader as soon as the cluster heals: admitted when the removal came
    // first, refused as a member on a new data folder when it did not (the refusal is
    // final), and then admitted when started again.
    cluster.faults.heal();
    let leader = cluster.leader().await;
    assert_ne!(leader, wiped);
    eventually(Duration::from_secs(20), "the old member is removed", || {
        let request = remove_member(&cluster, leader, wiped);
        async move { request.await == 200 }
    })
    .await;
    match rejoining.await.unwrap() {
        Ok(handle) => cluster.members[(wiped - 1) as usize].handle = Some(handle),
        Err(refused) => {
            let message = format!("{refused:#}");
            assert!(message.contains("already a member"), "{message}");
            let mut config = cluster.member_config(wiped);
            config.cluster.join = vec![cluster.member(leader).grpc.to_string()];
            let handle = rowcall_node::start_with(config, cluster.options())
                .await
                .expect("admitted once its old self is removed");
            cluster.members[(wiped - 1) as usize].handle = Some(handle);
        }
    }
    let last = cluster.applied(leader);
    cluster.converge(last).await;
    for id in cluster.ids() {
        let (status, _, _) = cluster.get(id, "/api/directory/COMMITTED_ON_TWO").await;
        assert_eq!(status, 200, "node {id} has the committed write");
    }
    cluster.shutdown().await;
}

/// The safe procedure works and the unsafe one fails loudly: a member that lost its disk is
/// refused with a message that says how to remove it, and joins once removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_on_a_new_data_folder_is_refused_until_its_old_self_is_removed() {
    let mut cluster = Cluster::start(3, 0).await;
    let written = insert(&cluster, 1, "BEFORE_THE_WIPE").await;
    assert_eq!(written.status(), 201);
    let leader = cluster.leader().await;
    let wiped = cluster.ids().into_iter().rfind(|&i| i != leader).unwrap();
    let (_, _, before) = cluster.admin_get(leader, "/api/cluster").await;

    cluster.stop(wiped).await;
    cluster.wipe(wiped);
    let refused = rowcall_node::start_with(cluster.member_config(wiped), cluster.options())
        .await
        .err()
        .expect("a wiped member is refused");
    let message = format!("{refused:#}");
    assert!(message.contains("already a member"), "{message}");
    assert!(
        message.contains(&format!("DELETE /api/cluster/members/{wiped}")),
        "{message}"
    );
    // Refused, it changed nothing: the same members, the same incarnations.
    let (_, _, after) = cluster.admin_get(leader, "/api/cluster").await;
    assert_eq!(before["members"], after["members"]);

    assert_eq!(remove_member(&cluster, leader, wiped).await, 200);
    cluster.restart(wiped).await;
    let last = cluster.applied(leader);
    cluster.converge(last).await;
    let (status, _, _) = cluster.get(wiped, "/api/directory/BEFORE_THE_WIPE").await;
    assert_eq!(status, 200);
    let (_, _, status) = cluster.admin_get(wiped, "/api/cluster").await;
    let member = member_of(&status, wiped);
    let old = member_of(&before, wiped);
    assert_eq!(member["incarnation"], status["incarnation"]);
    assert_ne!(member["incarnation"], old["incarnation"]);
    assert_eq!(status["cluster_id"], before["cluster_id"]);
    cluster.shutdown().await;
}

/// The StatefulSet case: every pod starts with `--bootstrap` and its peers. The founder
/// loses its volume and restarts the same way: it must ask to rejoin (and be refused), not
/// found a second cluster that takes writes nobody will ever see again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_founder_that_lost_its_disk_does_not_found_again() {
    let mut cluster = Cluster::start(3, 0).await;
    let (_, _, before) = cluster.admin_get(2, "/api/cluster").await;
    let cluster_id = before["cluster_id"].as_str().unwrap().to_owned();
    cluster.stop(1).await;
    cluster.wipe(1);
    let mut config = cluster.member_config(1);
    config.cluster.bootstrap = true;
    config.cluster.join = vec![
        cluster.member(2).grpc.to_string(),
        cluster.member(3).grpc.to_string(),
    ];
    let refused = rowcall_node::start_with(config, cluster.options())
        .await
        .err()
        .expect("the wiped founder is refused rather than founding");
    assert!(
        format!("{refused:#}").contains("DELETE /api/cluster/members/1"),
        "{refused:#}"
    );
    // It took the cluster's id (to ask to join it), not a new one of its own.
    let identity: Value = serde_json::from_slice(
        &std::fs::read(cluster.member_config(1).node.data.join("identity.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(identity["cluster_id"], cluster_id.as_str());
    cluster.shutdown().await;
}

/// Of several nodes started alike with `--bootstrap` and each other as peers, one founds
/// and the others join it: one cluster, never two.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_started_alike_with_bootstrap_and_peers_form_one_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let ports: Vec<std::net::TcpListener> = (0..3)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let grpc: Vec<String> = ports
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect();
    drop(ports);
    let mut starting = Vec::new();
    for id in 1..=3u64 {
        let mut config = rowcall_node::Config::default();
        config.node.id = id;
        config.node.http = "127.0.0.1:0".parse().unwrap();
        config.node.grpc = grpc[(id - 1) as usize].parse().unwrap();
        config.node.data = dir.path().join(format!("n{id}"));
        config.node.demo = false;
        config.auth.admin_key = Some(ADMIN.into());
        config.cluster.bootstrap = true;
        // Nodes started together share the cluster secret: it gives them one CA.
        config.cluster.secret = Some(common::cluster::CLUSTER_SECRET.into());
        config.cluster.join = grpc
            .iter()
            .enumerate()
            .filter(|(i, _)| *i as u64 != id - 1)
            .map(|(_, a)| a.clone())
            .collect();
        starting.push(tokio::spawn(rowcall_node::start(config)));
    }
    let mut nodes = Vec::new();
    for start in starting {
        nodes.push(start.await.unwrap().expect("every node starts"));
    }
    let clusters: Vec<Option<String>> = nodes.iter().map(|n| n.app.identity.cluster_id()).collect();
    assert!(clusters[0].is_some());
    assert!(clusters.iter().all(|c| *c == clusters[0]), "{clusters:?}");
    eventually(Duration::from_secs(20), "three voters", || {
        let voters = nodes[0].app.membership().voter_ids().count();
        async move { voters == 3 }
    })
    .await;
    for node in nodes {
        node.shutdown().await;
    }
}

/// A message from another cluster, or addressed to another incarnation, is refused before
/// it reaches Raft, with a status that says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn messages_from_another_cluster_or_for_another_incarnation_are_refused() {
    let cluster = Cluster::start(3, 0).await;
    let leader = cluster.leader().await;
    let target = cluster.ids().into_iter().find(|&i| i != leader).unwrap();
    let (_, _, status) = cluster.admin_get(target, "/api/cluster").await;
    let ours = status["cluster_id"].as_str().unwrap().to_owned();
    let mut client = raft_client(&cluster, target, 9).await;
    let vote = json!({"vote": {"leader_id": {"term": 1_000, "node_id": 9}, "committed": false},
                      "last_log_id": null});
    let message = |cluster_id: &str, to_incarnation: &str| RaftMessage {
        payload: serde_json::to_vec(&vote).unwrap(),
        from: Some(Sender {
            cluster_id: cluster_id.to_owned(),
            node_id: 9,
            incarnation: "i-stranger".into(),
            ..Sender::default()
        }),
        to_node: target,
        to_incarnation: to_incarnation.to_owned(),
        leader_quorum_age_ms: None,
    };
    let refused = client
        .vote(message("c-another-cluster", ""))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(
        refused.message().contains("belongs to cluster"),
        "{refused}"
    );
    let refused = client
        .vote(message(&ours, "i-an-old-folder"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(refused.message().contains("new data folder"), "{refused}");
    // A build two peer protocol versions away.
    let mut far = message(&ours, "");
    far.from.as_mut().unwrap().protocol = rowcall_node::raft::identity::PEER_PROTOCOL + 2;
    let refused = client.vote(far).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(
        refused.message().contains("one version at a time"),
        "{refused}"
    );
    // None reached Raft: the term is unchanged (a vote request at term 1000 would raise it).
    assert!(term(&cluster, target) < 1_000);
    cluster.shutdown().await;
}

/// Only the leader a voter follows may ask it to stand for election at once (`TimeoutNow`,
/// the leadership handover): a message from another member, however authentic, is refused
/// and the leader keeps leading at the same term.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_leader_may_ask_a_voter_to_stand_for_election() {
    let cluster = Cluster::start(3, 0).await;
    let leader = cluster.leader().await;
    let mut followers = cluster.ids().into_iter().filter(|&i| i != leader);
    let (target, asker) = (followers.next().unwrap(), followers.next().unwrap());
    let (_, _, status) = cluster.admin_get(target, "/api/cluster").await;
    let incarnation = |id: u64| {
        status["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id)
            .and_then(|m| m["incarnation"].as_str())
            .unwrap()
            .to_owned()
    };
    let before = term(&cluster, target);
    let reply = raft_client(&cluster, target, asker)
        .await
        .timeout_now(RaftMessage {
            payload: b"null".to_vec(),
            from: Some(Sender {
                cluster_id: status["cluster_id"].as_str().unwrap().to_owned(),
                node_id: asker,
                incarnation: incarnation(asker),
                ..Sender::default()
            }),
            to_node: target,
            to_incarnation: incarnation(target),
            leader_quorum_age_ms: None,
        })
        .await
        .expect("a member's message is admitted")
        .into_inner();
    let answer: Value = serde_json::from_slice(&reply.payload).unwrap();
    let reason = answer["Err"]["Rejected"]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(reason.contains("not the leader"), "{answer}");
    assert_eq!(term(&cluster, target), before, "no election was started");
    assert!(leads(&cluster, leader));
    cluster.shutdown().await;
}

/// Writes `key` through whichever node answers, until one acknowledges it (leadership may
/// be moving while nodes restart).
async fn insert_somewhere(cluster: &Cluster, key: &str) {
    eventually(
        Duration::from_secs(30),
        &format!("{key} written"),
        || async {
            for member in cluster.members.iter().filter(|m| m.handle.is_some()) {
                if insert(cluster, member.id, key).await.status().is_success() {
                    return true;
                }
            }
            false
        },
    )
    .await;
}

/// A rolling upgrade onto a build with a newer data format and the next peer protocol, one
/// node at a time under writes, loses nothing; the upgraded folders record the new format, and the older build refuses
/// to start on one, saying what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_upgrade_loses_nothing_and_the_older_build_refuses_the_upgraded_folder() {
    use rowcall_node::raft::identity::{DATA_FORMAT, PEER_PROTOCOL};
    let mut cluster = Cluster::start(3, 0).await;
    // The next build: a newer data format, and the next peer protocol (which the older
    // nodes still talk to while the upgrade goes on).
    let newer = rowcall_node::StartOptions {
        data_format: Some(DATA_FORMAT + 1),
        peer_protocol: Some(PEER_PROTOCOL + 1),
        ..cluster.options()
    };
    let mut written = Vec::new();
    for id in 1..=3 {
        let key = format!("BEFORE_UPGRADING_{id}");
        insert_somewhere(&cluster, &key).await;
        written.push(key);
        cluster.stop(id).await;
        cluster.restart_with(id, newer.clone()).await;
        // As an operator would: the upgraded node catches up, talking with older ones,
        // before the next node goes.
        let key = format!("AFTER_UPGRADING_{id}");
        insert_somewhere(&cluster, &key).await;
        written.push(key);
        let leader = cluster.leader().await;
        cluster.converge(cluster.applied(leader)).await;
    }
    insert_somewhere(&cluster, "AFTER_THE_UPGRADE").await;
    written.push("AFTER_THE_UPGRADE".into());

    let leader = cluster.leader().await;
    let index = cluster.applied(leader);
    cluster.converge(index).await;
    let digests = cluster.digests().await;
    assert!(digests
        .windows(2)
        .all(|d| d[0]["rows_sha256"] == d[1]["rows_sha256"]));
    for id in cluster.ids() {
        for key in &written {
            let (status, _, _) = cluster.get(id, &format!("/api/directory/{key}")).await;
            assert_eq!(status, 200, "{key} on node {id}");
        }
        let identity: Value = serde_json::from_slice(
            &std::fs::read(cluster.member_config(id).node.data.join("identity.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(identity["format"], DATA_FORMAT + 1, "node {id}: {identity}");
    }

    // Back on the older build: refused, with the way out.
    cluster.stop(1).await;
    let refused = match cluster.start_member(1, cluster.options()).await {
        Ok(_) => panic!("the older build started on an upgraded folder"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        refused.contains("written by a newer rowcall") && refused.contains("--restore"),
        "{refused}"
    );
    cluster.shutdown().await;
}

/// From builds that send appends one at a time (peer protocol 1) onto builds that stream
/// them, one node at a time under writes: nothing is lost, a leader sends a follower of the
/// older build its appends one at a time, and once every node is upgraded the leader streams
/// to each follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_upgrade_onto_streamed_appends_loses_nothing_and_then_streams() {
    let mut cluster = Cluster::start_with(3, 0, |config| config.raft.stream_appends = true).await;
    let older = rowcall_node::StartOptions {
        peer_protocol: Some(1),
        ..cluster.options()
    };
    for id in 1..=3 {
        cluster.stop(id).await;
        cluster.restart_with(id, older.clone()).await;
    }
    let mut written = Vec::new();
    for n in 0..5 {
        let key = format!("ON_THE_OLDER_BUILD_{n}");
        insert_somewhere(&cluster, &key).await;
        written.push(key);
    }
    let network = |cluster: &Cluster, id: u64| {
        cluster
            .member(id)
            .handle
            .as_ref()
            .unwrap()
            .app
            .network
            .clone()
    };
    let leader = cluster.leader().await;
    for peer in cluster.ids().into_iter().filter(|&p| p != leader) {
        assert!(!network(&cluster, leader).streams_to(peer));
        assert_eq!(network(&cluster, leader).append_streams_opened(peer), 0);
    }

    for id in 1..=3 {
        cluster.stop(id).await;
        cluster.restart_with(id, cluster.options()).await;
        if id == 1 {
            // The one upgraded node leads the two of the older build: it sends them its
            // appends one at a time once it finds they serve no streams.
            eventually(Duration::from_secs(30), "node 1 leads", || async {
                let moved = cluster
                    .http
                    .post(format!("{}/api/cluster/leader", cluster.url(2)))
                    .bearer_auth(ADMIN)
                    .json(&serde_json::json!({"to": 1}))
                    .send()
                    .await;
                moved.is_ok_and(|r| r.status().is_success())
            })
            .await;
        }
        let key = format!("AFTER_UPGRADING_{id}");
        insert_somewhere(&cluster, &key).await;
        written.push(key);
        let leader = cluster.leader().await;
        cluster.converge(cluster.applied(leader)).await;
        if id == 1 && leader == 1 {
            assert!(!network(&cluster, 1).streams_to(2));
            assert!(!network(&cluster, 1).streams_to(3));
        }
    }

    eventually(
        Duration::from_secs(30),
        "the leader streams its appends to every follower",
        || async {
            insert_somewhere(&cluster, "WHILE_STREAMING").await;
            let leader = cluster.leader().await;
            cluster
                .ids()
                .into_iter()
                .filter(|&p| p != leader)
                .all(|peer| network(&cluster, leader).append_streams_opened(peer) > 0)
        },
    )
    .await;
    written.push("WHILE_STREAMING".into());
    let leader = cluster.leader().await;
    cluster.converge(cluster.applied(leader)).await;
    for id in cluster.ids() {
        for key in &written {
            let (status, _, _) = cluster.get(id, &format!("/api/directory/{key}")).await;
            assert_eq!(status, 200, "{key} on node {id}");
        }
    }
    cluster.shutdown().await;
}

/// Copies a stopped node's data folder (as a volume snapshot or a machine backup would).
fn copy_folder(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_folder(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Issue 29, item 1, the restore case: a voter's folder is replaced by an older copy of
/// itself, identity and all. It acknowledged a write after the copy was taken; back on the
/// copy it must not vote, take entries or serve reads (before, it rejoined as itself and
/// served the old state: no `standing` was ever `behind`), and the operator's remedy —
/// remove it, start it on an empty folder — brings it back with everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_voter_restored_from_an_older_copy_of_its_folder_stays_out_until_readmitted() {
    let mut cluster = Cluster::start(3, 0).await;
    let leader = cluster.leader().await;
    let others = cluster.others(leader);
    let (restored, other) = (others[0], others[1]);
    assert_eq!(
        insert(&cluster, leader, "BEFORE_THE_COPY").await.status(),
        201
    );
    cluster.converge(cluster.applied(leader)).await;

    let data = cluster.member_config(restored).node.data;
    let copy = data.with_extension("copy");
    cluster.stop(restored).await;
    copy_folder(&data, &copy);
    cluster.restart(restored).await;
    // Committed with the restored node's acknowledgement: the other follower is cut off.
    cluster.faults.isolate(other, &cluster.ids());
    eventually(
        Duration::from_secs(20),
        "a write committed by the leader and the node about to be restored",
        || {
            let written = insert(&cluster, leader, "AFTER_THE_COPY");
            async move { written.await.status() == 201 }
        },
    )
    .await;
    cluster.stop(restored).await;
    cluster.faults.heal();
    std::fs::remove_dir_all(&data).unwrap();
    std::fs::rename(&copy, &data).unwrap();
    cluster.restart(restored).await;

    let url = cluster.url(restored);
    eventually(
        Duration::from_secs(20),
        "the restored node finds itself behind",
        || {
            let status = cluster.admin_get(restored, "/api/cluster");
            async move { status.await.2["standing"] == "behind" }
        },
    )
    .await;
    let (_, _, status) = cluster.admin_get(restored, "/api/cluster").await;
    let reason = status["standing_reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        reason.contains(&format!("DELETE /api/cluster/members/{restored}")),
        "{reason}"
    );
    let ready = cluster
        .http
        .get(format!("{url}/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 503);
    let (code, _, body) = cluster
        .get(restored, "/api/directory/BEFORE_THE_COPY")
        .await;
    assert_eq!(code, 503, "{body}");
    assert_eq!(body["error"]["code"], "state_behind", "{body}");
    // It takes no part: the cluster keeps its leader, and a write still commits (with the
    // other follower, not with the restored node's stale acknowledgement).
    assert_eq!(
        insert(&cluster, leader, "WHILE_IT_IS_OUT").await.status(),
        201
    );

    assert_eq!(remove_member(&cluster, leader, restored).await, 200);
    cluster.stop(restored).await;
    cluster.wipe(restored);
    let mut config = cluster.member_config(restored);
    config.cluster.join = vec![cluster.member(leader).grpc.to_string()];
    let handle = rowcall_node::start_with(config, cluster.options())
        .await
        .expect("re-admitted on an empty folder");
    cluster.members[(restored - 1) as usize].handle = Some(handle);
    cluster.converge(cluster.applied(leader)).await;
    for key in ["BEFORE_THE_COPY", "AFTER_THE_COPY", "WHILE_IT_IS_OUT"] {
        for id in cluster.ids() {
            let (code, _, _) = cluster.get(id, &format!("/api/directory/{key}")).await;
            assert_eq!(code, 200, "node {id} has {key}");
        }
    }
    cluster.shutdown().await;
}

/// How a node's pre-vote to each kind of peer is counted: a node of the older build (peer
/// protocol 1, which lacks the call) as granting, so a cluster in the middle of an upgrade
/// elects as it did before pre-votes; a node of this build that hears its leader as refusing;
/// and a peer that cannot be reached as an error, never a grant (or a node cut off from
/// every peer would give itself a majority).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pre_vote_counts_an_older_build_as_granting_and_an_unreachable_peer_as_not() {
    use openraft::network::v2::RaftNetworkV2 as _;
    use openraft::network::RPCOption;
    use openraft::raft::VoteRequest;

    let mut cluster = Cluster::start(3, 0).await;
    let leader = cluster.leader().await;
    let followers = cluster.others(leader);
    let (asker, older) = (followers[0], followers[1]);
    cluster.stop(older).await;
    let options = rowcall_node::StartOptions {
        peer_protocol: Some(1),
        ..cluster.options()
    };
    cluster.restart_with(older, options).await;
    let asking = cluster.member(asker).handle.as_ref().unwrap().app.clone();
    let pre_vote = |to: u64| {
        let (asking, cluster) = (asking.clone(), &cluster);
        async move {
            let metrics = asking.raft.metrics().borrow_watched().clone();
            let request = VoteRequest::new(
                rowcall_node::raft::Vote::new(metrics.current_term + 1, asker),
                metrics.last_applied,
            );
            cluster
                .peer(asker, to)
                .await
                .pre_vote(request, RPCOption::new(Duration::from_secs(2)))
                .await
        }
    };

    let answer = pre_vote(older).await.expect("an older build answers");
    assert!(answer.vote_granted, "an older build counts as granting");
    let answer = pre_vote(leader).await.expect("the leader answers");
    assert!(!answer.vote_granted, "a leader backed by a quorum refuses");

    cluster.faults.isolate(asker, &cluster.ids());
    assert!(
        pre_vote(older).await.is_err(),
        "an unreachable peer is no grant"
    );
    cluster.faults.heal();
    cluster.shutdown().await;
}
