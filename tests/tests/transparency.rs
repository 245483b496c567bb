//! The receipt log as a transparency log (DESIGN §10), on real clusters: every node builds
//! the same Merkle tree through a leader kill in the middle of a burst of invocations and
//! through a catch-up by snapshot; the cluster's checkpoint carries a majority of the voters'
//! signatures, every node proves every receipt against it, and a receipt edited in a node's
//! store no longer verifies.

use crate::common;

use std::time::Duration;

use common::cluster::Cluster;
use common::{Fetch, ADMIN};
use rowcall_proto::tlog::{self, Checkpoint, VerifierKey};
use serde_json::{json, Value};

fn quick_checkpoints(config: &mut rowcall_node::Config) {
    config.receipts.checkpoint_every_ms = 200;
    config.raft.keep_after_snapshot = 0;
}

fn hash(value: &Value) -> tlog::Hash {
    tlog::decode_hash(value.as_str().expect("a base64 hash")).unwrap()
}

/// Writes a public static row through whichever node leads, and waits until every running
/// node has it.
async fn put_row(cluster: &Cluster, key: &str) {
    let body = json!({"key": key, "type": "static", "auth": "public", "category": "Log",
                      "content": format!("# WHAT: the row {key}\n")});
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let index = loop {
        let leader = cluster.leader().await;
        let answer = cluster
            .http
            .post(format!("{}/api/directory", cluster.url(leader)))
            .header("x-terminal-key", ADMIN)
            .json(&body)
            .send()
            .await;
        if let Some(answer) = answer.as_ref().ok().filter(|a| a.status().is_success()) {
            break answer.headers()["x-rowcall-index"]
                .to_str()
                .unwrap()
                .parse::<u64>()
                .unwrap();
        }
        assert!(tokio::time::Instant::now() < deadline, "{answer:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    cluster.converge(index).await;
}

/// One invocation on node `id`; its receipt id when it was recorded.
async fn invoke(cluster: &Cluster, id: u64, key: &str) -> Option<String> {
    let answer = cluster
        .http
        .post(format!("{}/api/dispatch", cluster.url(id)))
        .json(&json!({"key": key}))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    let body: Value = answer.json().await.ok()?;
    body["proof"]["invocation_id"].as_str().map(str::to_owned)
}

/// The checkpoint node `id` serves, once it covers at least `size` leaves.
async fn checkpoint_covering(cluster: &Cluster, id: u64, size: u64) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (status, _, body) = cluster.get(id, "/api/receipts/checkpoint").await;
        if status == 200 && body["size"].as_u64().unwrap_or(0) >= size {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node {id} serves no checkpoint of {size} leaves: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Checks a checkpoint as a verifier would with `keys` pinned: its note is signed by a
/// strict majority of them and says what the JSON says. Returns (size, root).
fn verify_checkpoint(checkpoint: &Value, keys: &[VerifierKey]) -> (u64, tlog::Hash) {
    let note = checkpoint["note"].as_str().unwrap();
    let (body, signers) = tlog::verified_signers(note, keys).unwrap();
    assert!(
        signers.len() * 2 > keys.len(),
        "signed by {} of {} keys: {note}",
        signers.len(),
        keys.len()
    );
    let parsed = Checkpoint::parse(&body).unwrap();
    assert_eq!(parsed.size, checkpoint["size"].as_u64().unwrap());
    assert_eq!(parsed.root, hash(&checkpoint["root"]));
    (parsed.size, parsed.root)
}

/// The members' verifier keys, as node `id` lists them.
async fn keys(cluster: &Cluster, id: u64) -> Vec<VerifierKey> {
    let checkpoint = checkpoint_covering(cluster, id, 1).await;
    checkpoint["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| VerifierKey::parse(k.as_str().unwrap()).unwrap())
        .collect()
}

/// Checks receipt `receipt`'s proof from node `id` against the tree of `size` with `root`.
async fn verify_receipt(cluster: &Cluster, id: u64, receipt: &str, size: u64, root: &tlog::Hash) {
    let (status, _, proof) = cluster
        .get(id, &format!("/api/receipts/proof?id={receipt}&size={size}"))
        .await;
    assert_eq!(status, 200, "node {id} proves {receipt}: {proof}");
    let leaf = proof["leaf"].as_str().unwrap();
    let leaf_hash = tlog::leaf_hash(leaf.as_bytes());
    assert_eq!(leaf_hash, hash(&proof["leaf_hash"]), "{proof}");
    let leaf_json: Value = serde_json::from_str(leaf).unwrap();
    assert_eq!(leaf_json["id"], receipt);
    let path: Vec<tlog::Hash> = proof["path"].as_array().unwrap().iter().map(hash).collect();
    tlog::verify_inclusion(
        proof["leaf_index"].as_u64().unwrap(),
        size,
        &leaf_hash,
        &path,
        root,
    )
    .unwrap_or_else(|e| panic!("node {id}, receipt {receipt}: {e}"));
}

/// Every running node's (leaves, root) from its digest, once all agree.
async fn agreed_roots(cluster: &Cluster) -> (u64, String) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let roots: Vec<(u64, String)> = cluster
            .digests()
            .await
            .iter()
            .map(|d| {
                let root = d["log_root"].as_str().unwrap_or_default().to_owned();
                (d["log_leaves"].as_u64().unwrap_or(0), root)
            })
            .collect();
        if roots.windows(2).all(|w| w[0] == w[1]) {
            return roots[0].clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the nodes' trees differ: {roots:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_tree_on_every_node_through_a_leader_kill_and_a_snapshot_catch_up() {
    let mut cluster = Cluster::start_with(3, 0, quick_checkpoints).await;
    put_row(&cluster, "LOGGED").await;
    // No checkpoint before the first receipt; one comes with it.
    let (status, _, none) = cluster.get(1, "/api/receipts/checkpoint").await;
    assert_eq!(status, 409, "{none}");
    let leader = cluster.leader().await;
    let caller = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    let mut receipts = Vec::new();
    receipts.extend(invoke(&cluster, caller, "LOGGED").await);
    let pinned = keys(&cluster, caller).await;
    assert_eq!(pinned.len(), 3, "three members, three keys");

    // A burst through a follower, the leader killed in its middle and brought back.
    for i in 0..40 {
        if i == 15 {
            cluster.stop(leader).await;
        }
        if i == 30 {
            cluster.restart(leader).await;
        }
        receipts.extend(invoke(&cluster, caller, "LOGGED").await);
    }
    assert!(receipts.len() >= 30, "{} receipts recorded", receipts.len());
    let (leaves, root) = agreed_roots(&cluster).await;
    assert!(leaves >= receipts.len() as u64, "{leaves} leaves");

    // The cluster's checkpoint, the same on every node, and every receipt proven by each.
    let mut first = None;
    for id in cluster.ids() {
        let checkpoint = checkpoint_covering(&cluster, id, leaves).await;
        let (size, checkpoint_root) = verify_checkpoint(&checkpoint, &pinned);
        assert_eq!(
            (size, tlog::encode_hash(&checkpoint_root)),
            (leaves, root.clone())
        );
        first.get_or_insert((size, checkpoint_root));
    }
    let (old_size, old_root) = first.unwrap();
    for id in cluster.ids() {
        for receipt in &receipts {
            verify_receipt(&cluster, id, receipt, old_size, &old_root).await;
        }
    }

    // A follower misses receipts and a snapshot purges the log behind them: it catches up
    // by installing the snapshot, and proves the same tree.
    let leader = cluster.leader().await;
    let behind = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    cluster.stop(behind).await;
    let mut later = Vec::new();
    for _ in 0..10 {
        later.extend(invoke(&cluster, leader, "LOGGED").await);
    }
    cluster.snapshot_and_purge(leader).await;
    cluster.restart(behind).await;
    let (leaves, root) = agreed_roots(&cluster).await;
    assert!(leaves >= old_size + later.len() as u64);
    let checkpoint = checkpoint_covering(&cluster, behind, leaves).await;
    let (size, new_root) = verify_checkpoint(&checkpoint, &pinned);
    assert_eq!(tlog::encode_hash(&new_root), root);
    // The new tree extends the old one, as the node that installed the snapshot proves.
    let (status, _, consistency) = cluster
        .get(
            behind,
            &format!("/api/receipts/consistency?from={old_size}&to={size}"),
        )
        .await;
    assert_eq!(status, 200, "{consistency}");
    let path: Vec<tlog::Hash> = consistency["path"]
        .as_array()
        .unwrap()
        .iter()
        .map(hash)
        .collect();
    tlog::verify_consistency(old_size, size, &old_root, &new_root, &path).unwrap();
    for receipt in receipts.iter().chain(&later) {
        verify_receipt(&cluster, behind, receipt, size, &new_root).await;
    }
    cluster.shutdown().await;
}

/// Runs `rowcall --nodes <node id's gRPC address> ARGS…` in process (no credential).
async fn rowcall(cluster: &Cluster, id: u64, args: &[&str]) -> common::Run {
    let grpc = format!("http://{}", cluster.member(id).grpc);
    let mut argv = vec!["rowcall", "--nodes", &grpc];
    argv.extend_from_slice(args);
    common::rowcall_cli(argv).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rowcall_verify_proves_a_receipt_and_an_edit_in_a_nodes_store_fails_it_loudly() {
    let mut cluster = Cluster::start_with(3, 0, quick_checkpoints).await;
    put_row(&cluster, "LOGGED").await;
    let mut receipts = Vec::new();
    for id in cluster.ids() {
        receipts.extend(invoke(&cluster, id, "LOGGED").await);
    }
    let receipt = receipts[1].clone();
    let state = cluster.dir.path().join("verify-state.json");
    let state = state.to_str().unwrap();

    // First use: the voters' keys are pinned from the node; the receipt is proven once a
    // co-signed checkpoint covers it (exit 5 until then).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let proven = loop {
        let run = rowcall(
            &cluster,
            1,
            &["verify", &receipt, "--trust-node-keys", "--state", state],
        )
        .await;
        if run.code != 5 || tokio::time::Instant::now() > deadline {
            break run;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(proven.code, 0, "{}{}", proven.out, proven.err);
    assert!(
        proven.out.starts_with(&format!("verified {receipt}")),
        "{}",
        proven.out
    );
    // `confirm` now says where in the log it is.
    let confirmed = rowcall(&cluster, 2, &["confirm", &receipt]).await;
    assert_eq!(confirmed.code, 0, "{}{}", confirmed.out, confirmed.err);
    assert!(
        confirmed.out.contains("in the receipt log: leaf"),
        "{}",
        confirmed.out
    );

    // The receipt as stored, which `--receipt` proves field by field.
    let stored = cluster
        .http
        .get(format!("{}/api/receipts/{receipt}", cluster.url(3)))
        .header("x-terminal-key", ADMIN)
        .fetch()
        .await;
    let file = cluster.dir.path().join("receipt.json");
    std::fs::write(&file, stored.to_string()).unwrap();
    let file = file.to_str().unwrap();
    let run = rowcall(
        &cluster,
        3,
        &["verify", "--receipt", file, "--state", state],
    )
    .await;
    assert_eq!(run.code, 0, "{}{}", run.out, run.err);

    // Node 3's store is edited while it is down: the receipt's output hash changed.
    cluster.stop(3).await;
    {
        let data = cluster.member_config(3).node.data.join("sled");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let db = loop {
            match rowcall_node::store::compression::open_as_written(&data) {
                Ok(db) => break db,
                Err(e) if std::time::Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("opening node 3's store: {e}"),
            }
        };
        let tree = db.open_tree("sm").unwrap();
        let key = format!("i/{receipt}");
        // The stored value says where the body is in node 3's segment files; the edit is
        // stored inline instead, as folders written before segments keep receipts.
        let value = tree.get(&key).unwrap().unwrap();
        let mut edited: Value = serde_json::from_slice(&value).unwrap_or_else(|_| stored.clone());
        edited["output_sha256"] = json!("0".repeat(64));
        // A stored value of tag 2 ends with the receipt's leaf; an inline receipt holds none,
        // so its leaf goes under `x/n/` beside it, as in those older folders.
        if value.first() == Some(&2) {
            let leaf = &value[value.len() - 8..];
            tree.insert(format!("x/n/{receipt}"), leaf).unwrap();
        }
        tree.insert(key, serde_json::to_vec(&edited).unwrap())
            .unwrap();
        db.flush().unwrap();
    }
    cluster.restart(3).await;

    // Asked of the edited node, both checks fail, saying why: the receipt given no longer
    // matches the leaf it serves, and the leaf it serves no longer hashes to the tree's.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let (by_receipt, by_id) = loop {
        let by_receipt = rowcall(
            &cluster,
            3,
            &["verify", "--receipt", file, "--state", state],
        )
        .await;
        let by_id = rowcall(&cluster, 3, &["verify", &receipt, "--state", state]).await;
        let settled = by_receipt.code != 5 && by_id.code != 5;
        if settled || tokio::time::Instant::now() > deadline {
            break (by_receipt, by_id);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(by_receipt.code, 1, "{}{}", by_receipt.out, by_receipt.err);
    assert!(
        by_receipt.err.contains("differs from the leaf")
            || by_receipt
                .err
                .contains("does not hash to the proof's leaf hash"),
        "{}",
        by_receipt.err
    );
    assert_eq!(by_id.code, 1, "{}{}", by_id.out, by_id.err);
    assert!(
        by_id.err.contains("does not hash to the proof's leaf hash"),
        "{}",
        by_id.err
    );
    // The untouched nodes still prove it.
    let run = rowcall(
        &cluster,
        2,
        &["verify", "--receipt", file, "--state", state],
    )
    .await;
    assert_eq!(run.code, 0, "{}{}", run.out, run.err);
    cluster.shutdown().await;
}
