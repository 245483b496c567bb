//! A request's id follows it through the cluster (issue 16): three real processes log JSON;
//! an invocation sent to a follower with an `x-request-id` is answered with that id, its
//! receipt (a write the follower forwards to the leader) keeps it, and the logs of both the
//! follower and the leader name it. A request without one gets an id made for it, the same
//! in the answer and in the receipt.

mod support;

use std::path::Path;

use serde_json::{json, Value};
use support::{get_json, member_args, spawn_logged, wait_ready, Process, ADMIN};

/// Log lines (JSON objects) of one node that name `id` as their request's id.
fn lines_naming(log: &Path, id: &str) -> Vec<Value> {
    std::fs::read_to_string(log)
        .expect("the node's log")
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .filter(|line| {
            line["spans"]
                .as_array()
                .is_some_and(|spans| spans.iter().any(|s| s["request_id"] == id))
        })
        .collect()
}

/// The full receipt behind an invocation's proof (admin key).
async fn receipt(http: &reqwest::Client, invoked: &Value) -> Value {
    let url = invoked["proof"]["receipt"]
        .as_str()
        .expect("a receipt link");
    let response = http
        .get(url)
        .header("x-terminal-key", ADMIN)
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), 200, "{url}");
    response.json().await.expect("JSON")
}

async fn invoke(http: &reqwest::Client, url: &str, request_id: Option<&str>) -> (String, Value) {
    let mut request = http
        .post(format!("{url}/api/dispatch"))
        .json(&json!({"key": "TIME_NOW"}));
    if let Some(id) = request_id {
        request = request.header("x-request-id", id);
    }
    let response = request.send().await.expect("answered");
    assert_eq!(response.status(), 200);
    let id = response.headers()["x-request-id"]
        .to_str()
        .expect("ASCII")
        .to_owned();
    (id, response.json().await.expect("JSON"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_writes_request_id_is_in_both_logs_in_the_answer_and_in_the_receipt() {
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let node = |id: u64, join: Option<&str>| -> (Process, std::path::PathBuf) {
        let log = dir.path().join(format!("node-{id}.log"));
        let mut args = member_args(id, join);
        args.extend(["--log-format".to_owned(), "json".to_owned()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let data = dir.path().join(format!("data-{id}"));
        let process = spawn_logged(
            &[],
            &args,
            &data,
            None,
            "info,rowcall_node=debug",
            Some(&log),
        );
        (process, log)
    };
    let (first, first_log) = node(1, None);
    wait_ready(&http, &first.url).await;
    let mut nodes = vec![(first.url.clone(), first_log)];
    let mut processes = vec![first];
    for id in 2..=3 {
        let (process, log) = node(id, Some(&processes[0].grpc));
        wait_ready(&http, &process.url).await;
        nodes.push((process.url.clone(), log));
        processes.push(process);
    }
    // The write must go through a follower: if leadership moves while the invocation is on
    // its way (a loaded machine, just after the cluster formed), the node it reached may
    // have led by then and forwarded nothing; try again with another id (bounded).
    let mut tried = 0;
    let (request_id, follower_log, leader_log, invoked) = loop {
        tried += 1;
        assert!(tried <= 5, "leadership kept moving while the test invoked");
        let status = get_json(&http, &format!("{}/api/cluster", nodes[0].0)).await;
        let (Some(leader), Some(term)) = (status["leader"].as_u64(), status["term"].as_u64())
        else {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            continue;
        };
        let (leader_url, leader_log) = &nodes[leader as usize - 1];
        let (follower_url, follower_log) = nodes
            .iter()
            .find(|(url, _)| url != leader_url)
            .expect("a follower");
        let request_id = format!("checkout-7f3a-{tried}");
        let (answered, invoked) = invoke(&http, follower_url, Some(&request_id)).await;
        assert_eq!(answered, request_id);
        let after = get_json(&http, &format!("{follower_url}/api/cluster")).await;
        if after["leader"].as_u64() == Some(leader) && after["term"].as_u64() == Some(term) {
            break (
                request_id,
                follower_log.clone(),
                leader_log.clone(),
                invoked,
            );
        }
    };
    let kept = receipt(&http, &invoked).await;
    assert_eq!(kept["request_id"], request_id.as_str(), "{kept}");
    assert!(
        !lines_naming(&follower_log, &request_id).is_empty(),
        "the follower's log names the request"
    );
    let forwarded = lines_naming(&leader_log, &request_id);
    assert!(
        forwarded.iter().any(|l| l["spans"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "forwarded")),
        "the leader's log names the request its receipt was forwarded for: {forwarded:?}"
    );

    // No id given: one is made, and it is the same in the answer and in the receipt.
    let (made, invoked) = invoke(&http, &nodes[0].0, None).await;
    assert_eq!(made.len(), 32, "{made}");
    let kept = receipt(&http, &invoked).await;
    assert_eq!(kept["request_id"], made.as_str(), "{kept}");
}
