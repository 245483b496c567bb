//! Peers authenticate each other (issues 11 and 30): on a cluster with mutual TLS and a
//! cluster secret, a raw gRPC client that lacks either — no certificate, no secret, or a
//! certificate from another CA — gets nothing through Forward, Join, Remove, Vote,
//! AppendEntries or InstallSnapshot, and the directory and receipts stay exactly as they
//! were. On a cluster started with the defaults (no flags about peers) the same holds, on
//! loopback too: the cluster has its own CA from founding. A member speaks only for the node
//! id its certificate names; a fresh node without a credential, or with a forged or expired
//! join token, gets nothing; a cluster of an older build is upgraded by one secret. And the
//! leader checks a forwarded write as the HTTP rules would, even from an authenticated member.

use crate::common;
use rowcall_node::raft::WatchReceiver as _;

use common::cluster::{Cluster, CLUSTER_SECRET};
use common::tls::TestCa;
use common::ADMIN;
use rowcall_node::catalogue::row::RowInput;
use rowcall_node::raft::auth::ClusterSecret;
use rowcall_node::raft::{Command, Request};
use rowcall_proto::raft::raft_service_client::RaftServiceClient;
use rowcall_proto::raft::{RaftMessage, Sender};
use serde_json::{json, Value};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// A gRPC channel to node `id` (TLS when `tls` is given); `None` if it cannot connect.
async fn channel(cluster: &Cluster, id: u64, tls: Option<ClientTlsConfig>) -> Option<Channel> {
    let grpc = cluster.member(id).grpc;
    let endpoint = match tls {
        Some(tls) => Endpoint::from_shared(format!("https://{grpc}"))
            .unwrap()
            .tls_config(tls)
            .unwrap(),
        None => Endpoint::from_shared(format!("http://{grpc}")).unwrap(),
    };
    endpoint.connect().await.ok()
}

/// A message that looks like it comes from member `from` of the cluster `status` describes.
fn message(status: &Value, from: u64, payload: &Value) -> RaftMessage {
    let member = status["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == from)
        .cloned()
        .unwrap_or_default();
    RaftMessage {
        payload: serde_json::to_vec(payload).unwrap(),
        from: Some(Sender {
            cluster_id: status["cluster_id"].as_str().unwrap().to_owned(),
            node_id: from,
            incarnation: member["incarnation"].as_str().unwrap_or("").to_owned(),
            ..Sender::default()
        }),
        to_node: 0,
        to_incarnation: String::new(),
        leader_quorum_age_ms: None,
    }
}

fn put_far_in_the_future() -> Value {
    let row: RowInput =
        serde_json::from_value(json!({"key": "PLANTED", "type": "static", "auth": "public"}))
            .unwrap();
    // Past year 9999: once committed, every node would have to apply it.
    let request = Request::new(Command::PutRows {
        at_ms: 300_000_000_000_000,
        rows: vec![row],
    });
    serde_json::to_value(request).unwrap()
}

/// Calls all six peer RPCs; returns each one's name and gRPC status code.
async fn every_peer_call(
    channel: Channel,
    status: &Value,
    from: u64,
    secret: Option<&ClusterSecret>,
) -> Vec<(&'static str, tonic::Code)> {
    let mut client = RaftServiceClient::new(channel);
    let vote = json!({"vote": {"leader_id": {"term": 99, "node_id": from}, "committed": false},
                      "last_log_id": null});
    let append = json!({"vote": {"leader_id": {"term": 99, "node_id": from}, "committed": true},
                        "prev_log_id": null, "entries": [], "leader_commit": null});
    let join = json!({"id": 9, "node": {"grpc_addr": "127.0.0.1:1", "http_addr": "127.0.0.1:2",
                      "cluster_id": status["cluster_id"], "incarnation": "i-intruder"},
                      "learner": false});
    let request = |payload: &Value| {
        let mut request = tonic::Request::new(message(status, from, payload));
        if let Some(secret) = secret {
            secret.sign(&mut request);
        }
        request
    };
    let code = |r: Result<tonic::Response<RaftMessage>, tonic::Status>| match r {
        Ok(_) => tonic::Code::Ok,
        Err(status) => status.code(),
    };
    vec![
        (
            "Forward(PutRows)",
            code(client.forward(request(&put_far_in_the_future())).await),
        ),
        ("Join", code(client.join(request(&join)).await)),
        ("Remove", code(client.remove(request(&json!(1))).await)),
        ("Vote", code(client.vote(request(&vote)).await)),
        (
            "AppendEntries",
            code(client.append_entries(request(&append)).await),
        ),
        (
            "InstallSnapshot",
            code(client.install_snapshot(request(&append)).await),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_caller_without_peer_credentials_gets_nothing_through_and_changes_nothing() {
    let cluster = Cluster::start_secured(3).await;
    let written = cluster
        .http
        .post(format!("{}/api/directory", cluster.url(1)))
        .header("x-terminal-key", ADMIN)
        .json(&json!({"key": "REAL_ROW", "type": "static", "auth": "public", "content": "# WHAT: real\n\n{}\n"}))
        .send()
        .await
        .unwrap();
    assert_eq!(written.status(), 201, "the secured cluster works");
    let leader = cluster.leader().await;
    cluster.converge(cluster.applied(leader)).await;
    let before = cluster.digests().await;
    let (_, _, status) = cluster.admin_get(leader, "/api/cluster").await;
    let ca = cluster.ca.as_ref().unwrap();
    let trusting = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca.ca_pem()))
        .domain_name("127.0.0.1");
    let secret = ClusterSecret::new(CLUSTER_SECRET).unwrap();
    let wrong = ClusterSecret::new(&CLUSTER_SECRET.replace('0', "1")).unwrap();
    let (cert, key) = ca.issue("intruder-with-a-certificate");
    let with_certificate = trusting.clone().identity(Identity::from_pem(cert, key));

    // No certificate, no secret; a certificate but no secret; a certificate and another
    // cluster's secret; the secret but no certificate.
    let attempts = [
        ("no credentials", trusting.clone(), None),
        ("certificate only", with_certificate.clone(), None),
        ("certificate, wrong secret", with_certificate, Some(&wrong)),
        ("secret only", trusting, Some(&secret)),
    ];
    for (what, tls, secret) in attempts {
        for target in cluster.ids() {
            let channel = channel(&cluster, target, Some(tls.clone()))
                .await
                .expect("the TLS handshake itself is allowed");
            for (call, code) in every_peer_call(channel, &status, leader, secret).await {
                assert_eq!(
                    code,
                    tonic::Code::Unauthenticated,
                    "{what}: {call} on node {target}"
                );
            }
        }
    }
    // Without TLS at all, no call is even answered.
    if let Some(plain) = channel(&cluster, leader, None).await {
        for (call, code) in every_peer_call(plain, &status, leader, Some(&secret)).await {
            assert_ne!(code, tonic::Code::Ok, "plaintext {call}");
        }
    }
    assert_eq!(
        cluster.digests().await,
        before,
        "nothing reached any state machine"
    );
    let (_, _, after) = cluster.admin_get(leader, "/api/cluster").await;
    assert_eq!(after["members"], status["members"]);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_peer_with_a_certificate_from_another_ca_cannot_join() {
    let cluster = Cluster::start_secured(3).await;
    let leader = cluster.leader().await;
    let (_, _, status) = cluster.admin_get(leader, "/api/cluster").await;
    let other = TestCa::new(&cluster.dir.path().join("other"), "other");
    let (cert, key) = other.issue("stranger");
    let ca = cluster.ca.as_ref().unwrap();
    // It trusts the cluster's CA and knows the secret; only its certificate is foreign.
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca.ca_pem()))
        .identity(Identity::from_pem(cert, key))
        .domain_name("127.0.0.1");
    let secret = ClusterSecret::new(CLUSTER_SECRET).unwrap();
    if let Some(channel) = channel(&cluster, leader, Some(tls)).await {
        for (call, code) in every_peer_call(channel, &status, leader, Some(&secret)).await {
            assert_ne!(code, tonic::Code::Ok, "{call} with a foreign certificate");
        }
    }
    let (_, _, after) = cluster.admin_get(leader, "/api/cluster").await;
    assert_eq!(after["members"], status["members"], "nobody joined");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_leader_refuses_forwarded_writes_the_http_rules_refuse() {
    let cluster = Cluster::start(3, 0).await;
    let leader = cluster.leader().await;
    let member = cluster.ids().into_iter().find(|&i| i != leader).unwrap();
    cluster.converge(cluster.applied(leader)).await;
    let (_, _, status) = cluster.admin_get(leader, "/api/cluster").await;
    let before = cluster.digests().await;
    let mut client = RaftServiceClient::new(cluster.peer_channel(leader, member).await);

    let reply = client
        .forward(message(&status, member, &put_far_in_the_future()))
        .await
        .expect("a member may forward")
        .into_inner();
    let reply: Value = serde_json::from_slice(&reply.payload).unwrap();
    assert!(reply["Err"]["Refused"]["reason"].is_string(), "{reply}");

    // A receipt its sender did not serve is a forgery.
    let receipt = json!({"id": "inv_0123456789", "key": "ANY", "row_version": 1,
        "caller": "public", "input_sha256": "a".repeat(64), "output_sha256": "b".repeat(64),
        "ok": true, "started_at": "2026-01-01T00:00:00.000Z", "duration_ms": 1,
        "served_by": leader, "input": "{}", "output": "{}", "store_cap_bytes": 16384});
    let forged = json!({"request_id": "rq_forged", "op": "append_receipt", "receipt": receipt});
    let reply = client
        .forward(message(&status, member, &forged))
        .await
        .unwrap()
        .into_inner();
    let reply: Value = serde_json::from_slice(&reply.payload).unwrap();
    assert!(
        reply["Err"]["Refused"]["reason"]
            .as_str()
            .unwrap()
            .contains("served by"),
        "{reply}"
    );

    // Only members may forward at all.
    let stranger = client
        .forward(message(&status, 42, &put_far_in_the_future()))
        .await
        .unwrap_err();
    assert_eq!(stranger.code(), tonic::Code::FailedPrecondition);
    assert_eq!(cluster.digests().await, before);
    cluster.shutdown().await;
}

/// Issue 30, attack 1: on the defaults, any local process could forge a member's messages
/// from what `GET /api/cluster` showed. Here it even knows everything the admin sees, and the
/// cluster's CA certificate (which is not secret), and still gets nothing through.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_the_defaults_a_local_process_gets_nothing_through_the_peer_port() {
    let cluster = Cluster::start(3, 0).await;
    let leader = cluster.leader().await;
    cluster.converge(cluster.applied(leader)).await;
    let before = cluster.digests().await;
    let status: Value = cluster
        .http
        .get(format!("{}/api/cluster", cluster.url(leader)))
        .header("x-terminal-key", ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let member = cluster.ids().into_iter().find(|&i| i != leader).unwrap();
    let trusting = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(cluster.peer_ca().cert_pem()))
        .domain_name("peer.rowcall");
    let stranger = TestCa::new(&cluster.dir.path().join("stranger"), "stranger");
    let (cert, key) = stranger.issue(&format!("node-{member}"));
    let foreign = trusting.clone().identity(Identity::from_pem(cert, key));
    for target in cluster.ids() {
        for (what, tls) in [
            ("plaintext", None),
            ("TLS without a certificate", Some(trusting.clone())),
            ("a certificate of another CA", Some(foreign.clone())),
        ] {
            let Some(channel) = channel(&cluster, target, tls).await else {
                continue; // a refused handshake is a refusal too
            };
            for (call, code) in every_peer_call(channel, &status, member, None).await {
                // A foreign certificate fails the handshake itself (a transport error);
                // the others are answered, with a refusal.
                if tls_refuses_handshake(what) {
                    assert_ne!(code, tonic::Code::Ok, "{what}: {call} on node {target}");
                } else {
                    assert_eq!(
                        code,
                        tonic::Code::Unauthenticated,
                        "{what}: {call} on node {target}"
                    );
                }
            }
        }
    }
    assert_eq!(
        cluster.digests().await,
        before,
        "nothing reached any state machine"
    );
    let (_, _, after) = cluster.get(leader, "/api/cluster").await;
    let ids = |status: &Value| -> Vec<Value> {
        let members = status["members"].as_array().cloned().unwrap_or_default();
        members.iter().map(|m| m["id"].clone()).collect()
    };
    assert_eq!(ids(&after), ids(&status), "nobody joined or left");
    cluster.shutdown().await;
}

fn tls_refuses_handshake(what: &str) -> bool {
    what == "a certificate of another CA"
}

/// Issue 30, attack 1: with TLS on, a peer holding a valid certificate could claim any node
/// id (`--from-id 3`). Now each message's sender, and the node a vote or an append speaks
/// for, must be the node its certificate names.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_peer_speaks_only_for_the_node_its_certificate_names() {
    let cluster = Cluster::start(3, 0).await;
    let leader = cluster.leader().await;
    cluster.converge(cluster.applied(leader)).await;
    let before = cluster.digests().await;
    let status: Value = cluster
        .http
        .get(format!("{}/api/cluster", cluster.url(leader)))
        .header("x-terminal-key", ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let term = || {
        let handle = cluster.member(leader).handle.as_ref().expect("running");
        handle.app.raft.metrics().borrow_watched().current_term
    };
    let term_before = term();
    let mut others = cluster.ids().into_iter().filter(|&i| i != leader);
    let (member, victim) = (others.next().unwrap(), others.next().unwrap());
    // Node `member`'s certificate, messages that say they come from `victim`.
    let mut client = RaftServiceClient::new(cluster.peer_channel(leader, member).await);
    let forged = client
        .forward(message(&status, victim, &put_far_in_the_future()))
        .await
        .unwrap_err();
    assert_eq!(forged.code(), tonic::Code::FailedPrecondition, "{forged}");
    assert!(
        forged.message().contains("certificate does not name node"),
        "{forged}"
    );
    for (call, code) in every_peer_call(
        cluster.peer_channel(leader, member).await,
        &status,
        victim,
        None,
    )
    .await
    {
        assert_eq!(
            code,
            tonic::Code::FailedPrecondition,
            "{call} as node {victim}"
        );
    }
    // Its own id in the envelope, another's in the vote it asks for.
    let vote = json!({"vote": {"leader_id": {"term": 999, "node_id": victim}, "committed": false},
                      "last_log_id": null});
    let refused = client
        .vote(message(&status, member, &vote))
        .await
        .unwrap_err();
    assert!(
        refused.message().contains("does not name node"),
        "{refused}"
    );
    // Its own name passes the check (the leader then judges the write itself).
    let hello = client.hello(message(&status, member, &json!(null))).await;
    assert!(hello.is_ok(), "a member may speak for itself: {hello:?}");
    assert_eq!(term(), term_before, "no election was forced");
    assert_eq!(
        cluster.digests().await,
        before,
        "nothing reached any state machine"
    );
    cluster.shutdown().await;
}

/// A fresh node told to join, without the cluster secret or a join token, refuses to start
/// and says what to give it; a forged or expired token gets nothing from the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn joining_needs_a_join_token_this_cluster_minted_and_that_has_not_expired() {
    let cluster = Cluster::start(1, 0).await;
    let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    let fresh = |token: Option<String>| {
        let mut config = cluster.config(2, any, any);
        config.cluster.join_token = token;
        config
    };
    let started = |config| async { rowcall_node::start_with(config, cluster.options()).await };

    let without = started(fresh(None))
        .await
        .err()
        .expect("no credential, no start");
    assert!(
        format!("{without:#}").contains("rowcall cluster join-token"),
        "{without:#}"
    );

    let real = cluster.join_token.clone().unwrap();
    let (public, _) = real.rsplit_once('_').unwrap();
    let forged = format!("{public}_{}", "ab".repeat(32));
    let refused = started(fresh(Some(forged)))
        .await
        .err()
        .expect("a forged token");
    assert!(
        format!("{refused:#}").contains("not minted by this cluster"),
        "{refused:#}"
    );

    let expired = cluster
        .peer_ca()
        .mint_token(rowcall_node::model::time::now_ms() - 1);
    let refused = started(fresh(Some(expired)))
        .await
        .err()
        .expect("an expired token");
    assert!(format!("{refused:#}").contains("expired"), "{refused:#}");

    let (_, _, status) = cluster.get(1, "/api/cluster").await;
    assert_eq!(
        status["members"].as_array().unwrap().len(),
        1,
        "nobody joined"
    );
    // And the real one works.
    let joined = started(fresh(Some(real)))
        .await
        .expect("a minted token admits");
    assert!(joined.app.identity.cluster_id().is_some());
    joined.halt().await;
    cluster.shutdown().await;
}

/// A cluster whose folders hold no peer credential (a build from before peers always
/// authenticated) refuses to start with the one step that upgrades it, and after that step —
/// every node restarted with the same cluster secret — serves its old rows and takes writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_of_an_older_build_is_upgraded_by_restarting_every_node_with_one_secret() {
    let mut cluster = Cluster::start(3, 0).await;
    let leader = cluster.leader().await;
    let put = |key: &'static str| json!({"key": key, "type": "static", "auth": "public", "content": "# WHAT: kept\n\n{}\n"});
    let http = cluster.http.clone();
    let insert = move |url: String, key: &'static str| {
        let http = http.clone();
        async move {
            http.post(format!("{url}/api/directory"))
                .header("x-terminal-key", ADMIN)
                .header("idempotency-key", format!("peer-auth-{key}"))
                .json(&put(key))
                .send()
                .await
                .unwrap()
        }
    };
    let written = insert(cluster.url(leader), "BEFORE_UPGRADE").await;
    assert_eq!(written.status(), 201);
    cluster.converge(cluster.applied(leader)).await;
    for id in cluster.ids() {
        cluster.stop(id).await;
        let data = cluster.member_config(id).node.data;
        std::fs::remove_file(data.join(rowcall_node::raft::pki::SEED_FILE)).unwrap();
    }
    let old = common::start_once_unlocked(cluster.member_config(1), cluster.options())
        .await
        .err()
        .expect("no credential, no start");
    assert!(
        format!("{old:#}").contains("Upgrade in one step"),
        "{old:#}"
    );

    let mut starting = Vec::new();
    for id in cluster.ids() {
        let mut config = cluster.member_config(id);
        config.cluster.secret = Some(CLUSTER_SECRET.into());
        starting.push(tokio::spawn(common::start_once_unlocked(
            config,
            cluster.options(),
        )));
    }
    for (i, start) in starting.into_iter().enumerate() {
        cluster.members[i].handle = Some(start.await.unwrap().expect("upgraded node starts"));
    }
    let leader = cluster.leader().await;
    let (status, _, _) = cluster.get(leader, "/api/directory/BEFORE_UPGRADE").await;
    assert_eq!(status, 200, "the old rows are there");
    // Every member restarted at once checks with the others what they saw of it before it
    // takes appends again (`raft::standing`): until then a write answers 503, or 504 when
    // it reached a leader whose followers were still checking, and a careful client retries
    // it with its key (answered with the first outcome if that one landed after all).
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let written = loop {
        let written = insert(cluster.url(leader), "AFTER_UPGRADE").await;
        let retry = matches!(written.status().as_u16(), 503 | 504);
        if !retry || tokio::time::Instant::now() > deadline {
            break written;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(written.status(), 201, "the upgraded cluster takes writes");
    cluster.shutdown().await;
}
