//! After the workload: wait (bounded) until every node has drained its outbox and reached
//! the same applied index, then collect each node's rows, confirmations and digest.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::cluster::{control_client, ADMIN_KEY};
use crate::history::{
    token_of_what, what_of_content, Digest, Event, FinalNode, FinalState, Outcome, Seen, Stored,
};

/// Longest wait for outboxes to drain and indexes to meet.
const SETTLE_WITHIN: Duration = Duration::from_secs(60);
/// Concurrent confirm requests per node.
const CONFIRM_CONCURRENCY: usize = 16;

async fn get_json(http: &reqwest::Client, url: String, min_index: u64) -> Option<Value> {
    let mut request = http.get(url).header("x-terminal-key", ADMIN_KEY);
    if min_index > 0 {
        request = request.header("x-rowcall-min-index", min_index);
    }
    let response = request.send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    response.json().await.ok()
}

fn digest_of(v: &Value) -> Option<Digest> {
    Some(Digest {
        index: v["index"].as_u64()?,
        rows: v["rows"].as_u64()?,
        rows_sha256: v["rows_sha256"].as_str()?.to_owned(),
        receipts: v["receipts"].as_u64()?,
        receipts_sha256: v["receipts_sha256"].as_str()?.to_owned(),
        log_leaves: v["log_leaves"].as_u64().unwrap_or_default(),
        log_root: v["log_root"].as_str().unwrap_or_default().to_owned(),
    })
}

/// Waits until outboxes are empty and digests agree (or the bound passes); returns the
/// last digests, whether it settled, and the receipts left in outboxes.
async fn converge(
    http: &reqwest::Client,
    urls: &[(u64, String)],
) -> (Vec<Option<Digest>>, bool, u64) {
    let deadline = Instant::now() + SETTLE_WITHIN;
    loop {
        let mut outbox = 0;
        let mut digests = Vec::new();
        for (_, url) in urls {
            let status = get_json(http, format!("{url}/api/cluster"), 0).await;
            outbox += status
                .as_ref()
                .and_then(|s| s["outbox"].as_u64())
                .unwrap_or(u64::MAX / 64);
            let digest = get_json(http, format!("{url}/api/cluster/digest"), 0)
                .await
                .as_ref()
                .and_then(digest_of);
            digests.push(digest);
        }
        let agreed =
            digests.iter().all(|d| d.is_some()) && digests.windows(2).all(|w| w[0] == w[1]);
        if (outbox == 0 && agreed) || Instant::now() >= deadline {
            return (digests, outbox == 0 && agreed, outbox);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Every row on the node (paged), as key → token (or the WHAT line if not ours).
async fn rows(
    http: &reqwest::Client,
    url: &str,
    min_index: u64,
) -> Option<BTreeMap<String, Stored>> {
    let mut out = BTreeMap::new();
    let mut cursor: Option<String> = None;
    // Bounded: at most 10,000 pages of 1,000.
    for _ in 0..10_000 {
        let mut page = format!("{url}/api/directory?limit=1000");
        if let Some(c) = &cursor {
            page.push_str(&format!("&cursor={c}"));
        }
        let v = get_json(http, page, min_index).await?;
        for row in v["rows"].as_array()? {
            let key = row["key"].as_str()?.to_owned();
            let what = row["content"]
                .as_str()
                .and_then(what_of_content)
                .unwrap_or("");
            let token = token_of_what(what).unwrap_or_else(|| what.to_owned());
            let version = row["version"].as_u64().unwrap_or(0);
            out.insert(key, Stored { token, version });
        }
        match v["next_cursor"].as_str() {
            Some(c) if !c.is_empty() => cursor = Some(c.to_owned()),
            _ => return Some(out),
        }
    }
    Some(out)
}

/// Which of `ids` the node confirms.
async fn confirmed(
    http: &reqwest::Client,
    url: &str,
    ids: &[String],
    min_index: u64,
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for chunk in ids.chunks(CONFIRM_CONCURRENCY) {
        let asks: Vec<_> = chunk
            .iter()
            .map(|id| {
                let http = http.clone();
                let url = format!("{url}/api/dispatch?confirm={id}");
                let id = id.clone();
                tokio::spawn(async move {
                    // One retry: a transport hiccup is not a lost receipt.
                    for _ in 0..2 {
                        if let Some(v) = get_json(&http, url.clone(), min_index).await {
                            return (v["confirmed"].as_bool() == Some(true)).then_some(id);
                        }
                    }
                    None
                })
            })
            .collect();
        for ask in asks {
            if let Ok(Some(id)) = ask.await {
                out.insert(id);
            }
        }
    }
    out
}

/// Settles the cluster and collects every node's final state. `urls` are `(id, url)`.
pub async fn collect(urls: &[(u64, String)], history: &[Event]) -> FinalState {
    let http = control_client();
    let (digests, settled, outbox_left) = converge(&http, urls).await;
    let top = digests.iter().flatten().map(|d| d.index).max().unwrap_or(0);
    let receipts: Vec<String> = history
        .iter()
        .filter_map(|e| match &e.outcome {
            Outcome::Ok(Seen::Receipt { id, .. }) => Some(id.clone()),
            _ => None,
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut nodes = Vec::new();
    for ((id, url), digest) in urls.iter().zip(digests) {
        let rows = rows(&http, url, top).await;
        let confirmed = confirmed(&http, url, &receipts, top).await;
        nodes.push(FinalNode {
            id: *id,
            reachable: rows.is_some(),
            rows: rows.unwrap_or_default(),
            confirmed,
            digest,
        });
    }
    FinalState {
        nodes,
        settled,
        outbox_left,
    }
}
