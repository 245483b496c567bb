//! The index a read is stamped with never runs behind what it shows (issue 10, item 4). One
//! node's disk is slow (its syncs are slowed through the storage test hook) while rows are
//! rewritten on the leader; a session reads each row there, then reads it on a lagging node
//! with the first answer's `x-rowcall-index` as `x-rowcall-min-index`. Every answer's index
//! must be at least the version it shows, and no row version may go backwards along the
//! session, which sends the highest index it was shown with every read.

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::cluster::Cluster;
use common::ADMIN;
use serde_json::{json, Value};

const KEYS: usize = 4;

fn key(i: usize) -> String {
    format!("FRESH_{i}")
}

/// GET one row with an optional min-index: (version shown, index stamped), or None while
/// the node answers 404 (not written yet) or 503 (still behind).
async fn read(
    http: &reqwest::Client,
    url: &str,
    key: &str,
    min: Option<u64>,
) -> Option<(u64, u64)> {
    let mut request = http.get(format!("{url}/api/directory/{key}"));
    if let Some(min) = min {
        request = request.header("x-rowcall-min-index", min);
    }
    let response = request.send().await.unwrap();
    if response.status() != 200 {
        return None;
    }
    let index: u64 = response.headers()["x-rowcall-index"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let row: Value = response.json().await.unwrap();
    Some((row["version"].as_u64().unwrap(), index))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_index_is_never_behind_what_it_shows_even_on_a_slow_disk() {
    let cluster = Cluster::start(3, 0).await;
    let leader = cluster.leader().await;
    let followers = cluster.others(leader);
    let (slow, lagging) = (followers[0], followers[1]);
    // Every row exists everywhere before the disk turns slow.
    let mut seeded = 0;
    for i in 0..KEYS {
        let body = json!({"key": key(i), "type": "static", "content": "# WHAT: seed\n"});
        let response = cluster
            .http
            .post(format!("{}/api/directory", cluster.url(leader)))
            .header("x-terminal-key", ADMIN)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
        seeded = response.headers()["x-rowcall-index"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
    }
    cluster.converge(seeded).await;
    // Slow, but each sync well within the AppendEntries timeout (the heartbeat, 100 ms here),
    // so the node keeps up.
    cluster
        .member(slow)
        .handle
        .as_ref()
        .unwrap()
        .app
        .storage
        .slow_down(Duration::from_millis(15));
    // The lagging node hears everything from the leader late (but within the AppendEntries
    // timeout, so it does hear it).
    cluster
        .faults
        .delay(leader, lagging, Duration::from_millis(60));

    let writing = Arc::new(AtomicBool::new(true));
    let writer = {
        let (http, url, writing) = (cluster.http.clone(), cluster.url(leader), writing.clone());
        tokio::spawn(async move {
            let mut n = 0usize;
            while writing.load(Ordering::SeqCst) {
                let body = json!({"key": key(n % KEYS), "type": "static",
                                  "content": format!("# WHAT: rewrite {n}\n")});
                let response = http
                    .post(format!("{url}/api/directory"))
                    .header("x-terminal-key", ADMIN)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                assert!(response.status().is_success(), "write {n}");
                n += 1;
            }
            n
        })
    };

    let http = cluster.http.clone();
    let mut newest: HashMap<String, u64> = HashMap::new();
    let mut checked = 0;
    let mut session: Option<u64> = None;
    for round in 0..2_000 {
        if checked == 60 {
            break;
        }
        let key = key(round % KEYS);
        // The session carries the highest index it was shown, as the client library does:
        // monotonic reads across nodes hold for reads that send it, not for bare reads.
        let Some((shown, index)) = read(&http, &cluster.url(slow), &key, session).await else {
            continue;
        };
        assert!(
            index >= shown,
            "{key}: version {shown} shown at index {index}"
        );
        let seen = newest.entry(key.clone()).or_default();
        assert!(shown >= *seen, "{key}: version {shown} after {seen}");
        *seen = shown;
        session = session.max(Some(index));
        let Some((there, index)) = read(&http, &cluster.url(lagging), &key, Some(index)).await
        else {
            continue;
        };
        assert!(
            index >= there,
            "{key}: version {there} shown at index {index}"
        );
        session = session.max(Some(index));
        assert!(
            there >= shown,
            "{key}: node {lagging} at min-index {index} shows version {there}, older than {shown}"
        );
        *seen = there;
        checked += 1;
    }
    writing.store(false, Ordering::SeqCst);
    let writes = writer.await.unwrap();

    assert!(
        checked > 50,
        "{checked} reads compared across nodes ({writes} writes)"
    );
    cluster.shutdown().await;
}
