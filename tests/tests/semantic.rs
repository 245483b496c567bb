//! The resolver with a model: a tiny BERT with random weights and real config, tokenizer
//! and safetensors files, built here, run through the whole path on real nodes — load,
//! embedding on insert, ask, a catch-up by snapshot, a restart — and the same rankings on
//! every node.

use crate::common;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use common::cluster::{eventually, Cluster};
use common::{Fetch, ADMIN};
use serde_json::{json, Value};

/// The tiny model, written once per test process.
fn tiny_model() -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let words = [
            "weather", "forecast", "rain", "invoice", "pay", "parcel", "track",
        ];
        rowcall_node::catalogue::embed::tiny::write(dir.path(), &words, 11).unwrap();
        dir
    })
    .path()
    .to_owned()
}

fn with_model(config: &mut rowcall_node::Config) {
    config.resolver.model = Some(tiny_model());
    config.raft.keep_after_snapshot = 0;
}

fn row(key: &str, what: &str) -> Value {
    json!({"key": key, "type": "static", "auth": "public", "category": "Everyday",
           "content": format!("# WHAT: {what}\n# RETURNS: a sample answer\n\n{{}}\n")})
}

const ROWS: [(&str, &str); 8] = [
    ("WEATHER_NOW", "Current weather and rain at a place"),
    (
        "WEATHER_FORECAST",
        "Forecast of the weather for the next days",
    ),
    ("PAY_INVOICE", "Pay an invoice from the company account"),
    ("INVOICE_LIST", "List the invoices of a customer"),
    ("PARCEL_TRACK", "Track a parcel on its way"),
    ("PARCEL_SEND", "Send a parcel to an address"),
    ("RAIN_ALERT", "Alert when rain is coming"),
    ("TRACK_RUN", "Track a run with its distance and pace"),
];

const ASKS: [&str; 5] = [
    "will it rain tomorrow",
    "pay what I owe",
    "where is my parcel",
    "zzqx wobble",
    "track",
];

/// Every candidate (key, score, why) of `ask` ranked `mode` on node `id`.
async fn ranking(cluster: &Cluster, id: u64, ask: &str, mode: &str) -> Vec<Value> {
    let (status, _, body) = cluster
        .get(
            id,
            &format!(
                "/api/dispatch?ask={}&mode={mode}&limit=10",
                ask.replace(' ', "+")
            ),
        )
        .await;
    assert!(status.is_success(), "{ask} ({mode}) on node {id}: {body}");
    body["candidates"].as_array().cloned().unwrap_or_default()
}

async fn resolver_status(cluster: &Cluster, id: u64) -> Value {
    cluster.get(id, "/api/cluster").await.2["resolver"].clone()
}

/// Waits until every running node has a vector for each of `rows` rows, then checks that
/// all of them rank every ask the same way, in both rankings that use the model.
async fn same_rankings_everywhere(cluster: &Cluster, rows: u64) {
    for id in cluster.ids() {
        eventually(
            Duration::from_secs(30),
            "every row embedded",
            || async move { resolver_status(cluster, id).await["rows_embedded"] == json!(rows) },
        )
        .await;
    }
    for ask in ASKS {
        for mode in ["dense", "fused"] {
            let first = ranking(cluster, 1, ask, mode).await;
            assert!(!first.is_empty(), "{ask} ({mode}) found nothing");
            for id in cluster.ids().into_iter().skip(1) {
                assert_eq!(
                    ranking(cluster, id, ask, mode).await,
                    first,
                    "{ask} ({mode}): node {id} ranks differently from node 1"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_node_embeds_the_rows_and_ranks_alike_through_a_snapshot_catch_up_and_a_restart() {
    let mut cluster = Cluster::start_with(3, 0, with_model).await;
    let leader = cluster.leader().await;
    let follower = cluster.ids().into_iter().find(|&id| id != leader).unwrap();

    let status = resolver_status(&cluster, follower).await;
    assert_eq!(status["mode"], "hybrid", "{status}");
    assert_eq!(status["model"]["dimensions"], 32, "{status}");

    // Written through a follower: once the write is answered, that node has the rows'
    // vectors (it embedded them before proposing), so they are askable by meaning there.
    let body: Vec<Value> = ROWS.iter().map(|(k, w)| row(k, w)).collect();
    let answer = cluster
        .http
        .post(format!("{}/api/directory", cluster.url(follower)))
        .header("x-terminal-key", ADMIN)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_success(), "{answer:?}");
    for (key, _) in ROWS {
        let contract = cluster
            .http
            .get(format!("{}/api/dispatch?key={key}", cluster.url(follower)))
            .fetch()
            .await;
        assert_eq!(
            contract["resolver"],
            json!({"mode": "hybrid", "model": tiny_model().file_name().unwrap().to_string_lossy(), "embedded": true}),
            "{key}"
        );
    }
    // A text a row was embedded from is closest to that row.
    let own = ranking(
        &cluster,
        follower,
        "parcel send. Send a parcel to an address",
        "dense",
    )
    .await;
    assert_eq!(own[0]["key"], "PARCEL_SEND", "{own:?}");
    same_rankings_everywhere(&cluster, ROWS.len() as u64).await;

    // A follower misses writes and a snapshot purges the log behind them (the leader purges
    // in batches of 32 entries, so 36 writes): it installs the snapshot, embeds the rows it
    // had not seen, and ranks as the others do.
    let leader = cluster.leader().await;
    let behind = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    cluster.stop(behind).await;
    let topics = ["rain", "invoice", "parcel", "weather"];
    let more: Vec<(String, String)> = (0..36)
        .map(|i| {
            let topic = topics[i % topics.len()];
            (
                format!("EXTRA_{i}"),
                format!("Report number {i} about the {topic}"),
            )
        })
        .collect();
    for (key, what) in &more {
        let answer = cluster
            .http
            .post(format!("{}/api/directory", cluster.url(leader)))
            .header("x-terminal-key", ADMIN)
            .json(&row(key, what))
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{answer:?}");
    }
    cluster.snapshot_and_purge(leader).await;
    cluster.restart(behind).await;
    let total = (ROWS.len() + more.len()) as u64;
    same_rankings_everywhere(&cluster, total).await;

    // A restart reads the vectors back from the node's database: every row is embedded and
    // none ran through the model again.
    cluster.stop(follower).await;
    cluster.restart(follower).await;
    let status = resolver_status(&cluster, follower).await;
    assert_eq!(status["rows_embedded"], json!(total), "{status}");
    assert_eq!(status["rows_computed"], 0, "{status}");
    same_rankings_everywhere(&cluster, total).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meaning_finds_what_no_word_matches_and_says_so_and_a_node_without_a_model_says_why_not() {
    let node = common::start_with(false, with_model).await;
    let answer = node
        .http
        .post(format!("{}/api/directory", node.url))
        .header("x-terminal-key", ADMIN)
        .json(&row("PARCEL_TRACK", "Track a parcel on its way"))
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_success());
    let ask = |mode: &'static str| {
        node.http
            .get(format!("{}/api/dispatch?ask=zzqx+wobble{mode}", node.url))
            .fetch()
    };
    let lexical = ask("&mode=lexical").await;
    assert_eq!(lexical["count"], 0, "{lexical}");
    let fused = ask("").await;
    assert_eq!(fused["candidates"][0]["key"], "PARCEL_TRACK", "{fused}");
    assert_eq!(
        fused["candidates"][0]["why"],
        json!(["similar meaning"]),
        "{fused}"
    );
    let words = node
        .http
        .get(format!("{}/api/dispatch?ask=track+parcel", node.url))
        .fetch()
        .await;
    assert_eq!(
        words["candidates"][0]["why"],
        json!(["track", "parcel"]),
        "{words}"
    );
    let bad = node
        .http
        .get(format!(
            "{}/api/dispatch?ask=parcel&mode=sideways",
            node.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    // gRPC's Cluster.Status says what /api/cluster says.
    let http = node
        .http
        .get(format!("{}/api/cluster", node.url))
        .fetch()
        .await;
    let grpc = grpc_status(&node).await;
    let resolver = grpc.resolver.expect("a resolver block");
    assert_eq!(resolver.mode, "hybrid");
    assert_eq!(resolver.rows_embedded, 1);
    let model = resolver.model.expect("the model");
    assert_eq!(
        model.fingerprint, http["resolver"]["model"]["fingerprint"],
        "{http}"
    );
    assert_eq!(model.name, http["resolver"]["model"]["name"], "{http}");
    assert_eq!(
        model.dimensions as u64, http["resolver"]["model"]["dimensions"],
        "{http}"
    );
    assert_eq!(model.query, "model");

    let plain = common::start(false).await;
    let status = plain
        .http
        .get(format!("{}/api/cluster", plain.url))
        .fetch()
        .await;
    assert_eq!(status["resolver"]["mode"], "lexical", "{status}");
    let resolver = grpc_status(&plain)
        .await
        .resolver
        .expect("a resolver block");
    assert_eq!((resolver.mode.as_str(), resolver.model), ("lexical", None));
    let refused = plain
        .http
        .get(format!("{}/api/dispatch?ask=parcel&mode=dense", plain.url))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert!(body.to_string().contains("needs a model"), "{body}");
}

/// A node's gRPC `Cluster.Status`.
async fn grpc_status(node: &common::TestNode) -> rowcall_client::proto::StatusResponse {
    rowcall_client::Client::builder()
        .nodes([format!("http://{}", node.handle.grpc_addr)])
        .build()
        .unwrap()
        .status()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_node_named_an_unusable_model_refuses_to_start_and_says_which_file() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    rowcall_node::catalogue::embed::tiny::write(&model, &[], 1).unwrap();
    std::fs::remove_file(model.join("tokenizer.json")).unwrap();
    let mut config = rowcall_node::Config::default();
    config.node.http = "127.0.0.1:0".parse().unwrap();
    config.node.grpc = "127.0.0.1:0".parse().unwrap();
    config.node.data = dir.path().join("data");
    config.node.demo = false;
    config.auth.admin_key = Some(ADMIN.into());
    config.resolver.model = Some(model);
    let err = rowcall_node::start(config).await.err().expect("refused");
    assert!(format!("{err:#}").contains("tokenizer.json"), "{err:#}");
}

/// Asks `ask` on node `id` as the invoke credential `ci`.
async fn ask_as_ci(cluster: &Cluster, id: u64, ask: &str) -> Value {
    cluster
        .http
        .get(format!("{}/api/dispatch", cluster.url(id)))
        .query(&[("ask", ask)])
        .bearer_auth(common::INVOKE)
        .fetch()
        .await
}

/// The candidates of `ask` on node `id` (no credential) as (key, why).
async fn whys(cluster: &Cluster, id: u64, ask: &str) -> Vec<(String, Value)> {
    let (_, _, body) = cluster
        .get(id, &format!("/api/dispatch?ask={}", ask.replace(' ', "+")))
        .await;
    body["candidates"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|c| {
            (
                c["key"].as_str().unwrap_or_default().to_owned(),
                c["why"].clone(),
            )
        })
        .collect()
}

/// Waits until node `id` answers "glamour" with the row it learned the word for.
async fn knows_glamour(cluster: &Cluster, id: u64, what: &str) {
    eventually(Duration::from_secs(20), what, || async {
        whys(cluster, id, "glamour").await
            == [("PARCEL_TRACK".to_owned(), json!(["learned: glamour"]))]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ask_that_led_to_an_invocation_teaches_every_node_its_words_through_the_receipt() {
    let mut cluster = Cluster::start(3, 0).await;
    let leader = cluster.leader().await;
    let node = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    let rows = vec![
        row("PARCEL_TRACK", "Track a parcel on its way"),
        row("BEAUTY_SHOP", "Buy beauty products"),
    ];
    // Written through the node that runs them, which answers once it has applied them.
    let answer = cluster
        .http
        .post(format!("{}/api/directory", cluster.url(node)))
        .header("x-terminal-key", ADMIN)
        .json(&rows)
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_success());
    for id in cluster.ids() {
        assert!(whys(&cluster, id, "glamour").await.is_empty());
    }

    // An invocation with no ask before it teaches nothing.
    // Runs the row on `node` as `ci` and reads back its receipt (admin).
    let invoke = || async {
        let ran = cluster
            .http
            .post(format!("{}/api/dispatch", cluster.url(node)))
            .bearer_auth(common::INVOKE)
            .json(&json!({"key": "PARCEL_TRACK"}))
            .fetch()
            .await;
        let id = ran["proof"]["invocation_id"]
            .as_str()
            .unwrap_or_else(|| panic!("a receipt: {ran}"));
        let receipt = cluster
            .http
            .get(format!("{}/api/receipts/{id}", cluster.url(node)))
            .header("x-terminal-key", ADMIN)
            .fetch()
            .await;
        assert_eq!(receipt["id"], id, "{receipt}");
        receipt
    };
    let receipt = invoke().await;
    assert!(
        receipt.get("asked").is_none() || receipt["asked"].is_null(),
        "{receipt}"
    );

    // The same caller asks in its own words, is offered the row, and runs it.
    let asked = ask_as_ci(&cluster, node, "track my glamour box parcel").await;
    assert_eq!(asked["candidates"][0]["key"], "PARCEL_TRACK", "{asked}");
    let receipt = invoke().await;
    assert_eq!(receipt["asked"], "track my glamour box parcel", "{receipt}");
    // The forensic gRPC view shows it too.
    let forensic = rowcall_client::Client::builder()
        .nodes([format!("http://{}", cluster.member(node).grpc)])
        .credential(ADMIN)
        .build()
        .unwrap()
        .receipt(receipt["id"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(
        forensic.asked.as_deref(),
        Some("track my glamour box parcel")
    );

    // Every node learns the words from the replicated receipt, and says so in `why`.
    for id in cluster.ids() {
        knows_glamour(&cluster, id, "the receipt taught every node").await;
    }
    // A restart rebuilds what was learned from the stored receipts.
    cluster.stop(node).await;
    cluster.restart(node).await;
    knows_glamour(&cluster, node, "the restarted node still knows").await;
    cluster.shutdown().await;
}

/// A second tiny model: the same files, other weights (another fingerprint).
fn other_tiny_model() -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let words = ["weather", "invoice", "parcel"];
        rowcall_node::catalogue::embed::tiny::write(dir.path(), &words, 12).unwrap();
        dir
    })
    .path()
    .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_node_names_the_member_that_ranks_otherwise_and_what_it_runs() {
    // Node 3's model folder holds other weights, and it learns nothing from use.
    let cluster = Cluster::start_with(3, 0, |config| {
        with_model(config);
        if config.node.id == 3 {
            config.resolver.model = Some(other_tiny_model());
            config.resolver.learn = false;
        }
    })
    .await;
    let fingerprint = |status: Value| status["model"]["fingerprint"].clone();
    let ours = fingerprint(resolver_status(&cluster, 1).await);
    let theirs = fingerprint(resolver_status(&cluster, 3).await);
    assert_ne!(ours, theirs);
    let otherwise = |id: u64| {
        let cluster = &cluster;
        async move { resolver_status(cluster, id).await["members_ranking_otherwise"].clone() }
    };
    for id in cluster.ids() {
        eventually(
            Duration::from_secs(20),
            "every node has asked every member how it ranks",
            || async move {
                otherwise(id)
                    .await
                    .as_object()
                    .is_some_and(|m| !m.is_empty())
            },
        )
        .await;
    }
    let node3 = json!({"mode": "hybrid", "model": theirs, "query": "model", "learn": false, "weights": "q8", "revision": 2});
    for id in [1, 2] {
        assert_eq!(otherwise(id).await, json!({"3": node3}), "node {id}");
    }
    let rest = json!({"mode": "hybrid", "model": ours, "query": "model", "learn": true, "weights": "q8", "revision": 2});
    assert_eq!(otherwise(3).await, json!({"1": rest, "2": rest}));
    assert_eq!(resolver_status(&cluster, 3).await["learn"], false);

    // The gRPC status, the command line and the metrics say it too.
    let grpc = rowcall_client::Client::builder()
        .nodes([format!("http://{}", cluster.member(1).grpc)])
        .build()
        .unwrap()
        .status()
        .await
        .unwrap()
        .resolver
        .expect("a resolver block");
    let named = &grpc.members_ranking_otherwise[&3];
    assert_eq!(
        (named.model.as_deref(), named.learn, named.revision),
        (theirs.as_str(), false, Some(2))
    );
    let grpc_addr = format!("http://{}", cluster.member(1).grpc);
    let run =
        common::rowcall_cli(vec!["rowcall", "--nodes", &grpc_addr, "cluster", "status"]).await;
    assert_eq!(run.code, 0, "{}", run.err);
    let line = format!(
        "node 3 ranks asks otherwise than node 1: model {}, ranking revision 2, learning from use off",
        theirs.as_str().unwrap()
    );
    assert!(run.out.contains(&line), "{}", run.out);
    let metrics = common::metrics_text(&cluster.http, &cluster.url(3)).await;
    assert!(
        metrics.lines().any(
            |l| l.starts_with("rowcall_resolver_members_ranking_otherwise{") && l.ends_with(" 2")
        ),
        "{metrics}"
    );
    cluster.shutdown().await;
}
