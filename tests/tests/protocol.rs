//! The HTTP protocol of one node (DESIGN §3): the four-step loop ask → contract → invoke →
//! confirm returns the documented shapes; a row is askable and readable in the very next
//! request after its write; a deleted row's receipts still confirm; the four counts move
//! with the rows.

use crate::common;

use common::{start, Fetch, ADMIN, INVOKE};
use rowcall_node::model::time::{now_ms, parse_ms};
use serde_json::{json, Value};

#[tokio::test]
async fn the_four_step_loop_returns_the_documented_shapes() {
    let node = start(true).await;
    let http = &node.http;

    // 1. ask
    let ask: Value = http
        .get(format!("{}/api/dispatch", node.url))
        .query(&[("ask", "what time is it")])
        .fetch()
        .await;
    assert_eq!(ask["ask"], "what time is it");
    assert_eq!(ask["best"]["key"], "TIME_NOW");
    let candidates = ask["candidates"].as_array().unwrap();
    assert_eq!(ask["count"].as_u64().unwrap() as usize, candidates.len());
    assert_eq!(candidates[0]["key"], "TIME_NOW", "{ask}");
    assert!(
        candidates
            .iter()
            .all(|c| !c["key"].as_str().unwrap().contains("ISSUE")),
        "{ask}"
    );
    assert!(ask["index"].as_u64().unwrap() > 0);
    let contract_url = ask["best"]["contract"].as_str().unwrap().to_owned();
    let run_now = ask["best"]["run_now"].as_str().unwrap().to_owned();
    assert!(ask["best"]["do"].as_str().unwrap().contains("POST"));

    // 2. contract, as JSON and as markdown
    let contract: Value = http.get(&contract_url).fetch().await;
    assert_eq!(contract["key"], "TIME_NOW");
    assert_eq!(contract["invoke"]["body"], json!({"key": "TIME_NOW"}));
    assert!(contract["ledger"]
        .as_str()
        .unwrap()
        .ends_with("/api/receipts?key=TIME_NOW"));
    assert!(contract["repair"]
        .as_str()
        .unwrap()
        .ends_with("/api/directory/TIME_NOW"));
    assert!(!contract["troubleshooting"].as_array().unwrap().is_empty());
    let markdown = http
        .get(format!("{contract_url}&format=markdown"))
        .send()
        .await
        .unwrap();
    assert!(markdown.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/markdown"));
    let markdown = markdown.text().await.unwrap();
    assert!(markdown.contains("# TIME_NOW") && markdown.contains("| status | cause | fix |"));

    // 3. invoke by POST
    let invoked = http
        .post(format!("{}/api/dispatch", node.url))
        .json(&json!({"key": "TIME_NOW"}))
        .send()
        .await
        .unwrap();
    assert_eq!(invoked.status(), 200);
    let index_header: u64 = invoked.headers()["x-rowcall-index"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let invoked: Value = invoked.json().await.unwrap();
    assert_eq!(invoked["ok"], true);
    assert_eq!(invoked["key"], "TIME_NOW");
    assert_eq!(invoked["result"]["zone"], "UTC");
    let proof = &invoked["proof"];
    let id = proof["invocation_id"].as_str().unwrap();
    assert!(id.starts_with("inv_") && id.len() == 14);
    assert_eq!(proof["index"].as_u64().unwrap(), index_header);

    // 4. confirm, without a credential
    let confirmed: Value = http.get(proof["confirm"].as_str().unwrap()).fetch().await;
    assert_eq!(confirmed["confirmed"], true);
    assert_eq!(confirmed["key"], "TIME_NOW");
    assert_eq!(confirmed["ok"], true);
    assert_eq!(confirmed["output_sha256"].as_str().unwrap().len(), 64);

    // run_now works by GET for a public row
    let by_get: Value = http.get(&run_now).fetch().await;
    assert_eq!(by_get["ok"], true);

    // the public brochure and the forensic receipt
    let page = http
        .get(proof["public_receipt"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains(id));
    let forensic = http
        .get(proof["receipt"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(forensic.status(), 401);
    let forensic: Value = http
        .get(proof["receipt"].as_str().unwrap())
        .bearer_auth(ADMIN)
        .fetch()
        .await;
    assert_eq!(forensic["caller"], "public");
    assert_eq!(forensic["served_by"], 1);
    assert!(forensic["output"].as_str().unwrap().contains("UTC"));

    node.handle.shutdown().await;
}

#[tokio::test]
async fn unknown_receipts_do_not_confirm() {
    let node = start(false).await;
    for id in ["inv_0000000000", "nonsense", ""] {
        let response = node
            .http
            .get(format!("{}/api/dispatch", node.url))
            .query(&[("confirm", id)])
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "{id}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["confirmed"], false);
    }
    node.handle.shutdown().await;
}

#[tokio::test]
async fn a_write_is_visible_in_the_next_request_and_receipts_outlive_the_row() {
    let node = start(false).await;
    let http = &node.http;
    let row = json!({
        "key": "PARCEL_TRACKING", "type": "static", "category": "Logistics", "auth": "public",
        "content": "# WHAT: Track a parcel shipment by its tracking number\n\n{\"status\":\"in transit\"}\n"
    });
    let created = http
        .post(format!("{}/api/directory", node.url))
        .header("x-terminal-key", ADMIN)
        .json(&row)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let written_index: u64 = created.headers()["x-rowcall-index"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let created: Value = created.json().await.unwrap();
    assert_eq!(created["key"], "PARCEL_TRACKING");
    assert_eq!(created["version"].as_u64().unwrap(), written_index);

    let got: Value = http
        .get(format!("{}/api/directory/PARCEL_TRACKING", node.url))
        .fetch()
        .await;
    assert_eq!(got["version"].as_u64().unwrap(), written_index);
    assert_eq!(got["created_at"], got["updated_at"]);
    let asked: Value = http
        .get(format!("{}/api/dispatch?ask=track+my+parcel", node.url))
        .fetch()
        .await;
    assert_eq!(asked["best"]["key"], "PARCEL_TRACKING", "{asked}");

    // Updating answers 200, keeps created_at and moves updated_at and version on. The
    // node shares this process's clock: once it reads past created_at, an update that
    // wrongly restamped created_at could not go unseen.
    let created_at = got["created_at"].as_str().unwrap().to_owned();
    let created_ms = parse_ms(&created_at).expect("created_at is RFC 3339");
    while now_ms() <= created_ms {
        tokio::task::yield_now().await;
    }
    let updated = http
        .post(format!("{}/api/directory", node.url))
        .bearer_auth(ADMIN)
        .json(&row)
        .send()
        .await
        .unwrap();
    assert_eq!(updated.status(), 200);
    let after: Value = http
        .get(format!("{}/api/directory/PARCEL_TRACKING", node.url))
        .fetch()
        .await;
    assert_eq!(after["created_at"], created_at, "{after}");
    assert!(
        after["updated_at"].as_str().unwrap() > created_at.as_str(),
        "{after}"
    );
    assert!(
        after["version"].as_u64().unwrap() > written_index,
        "{after}"
    );

    let invoked: Value = http
        .post(format!("{}/api/dispatch", node.url))
        .json(&json!({"key": "PARCEL_TRACKING"}))
        .fetch()
        .await;
    assert_eq!(invoked["result"]["status"], "in transit");
    let confirm_url = invoked["proof"]["confirm"].as_str().unwrap().to_owned();

    let deleted = http
        .delete(format!("{}/api/directory/PARCEL_TRACKING", node.url))
        .header("x-terminal-key", ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    assert_eq!(
        deleted.json::<Value>().await.unwrap(),
        json!({"ok": true, "deleted": 1})
    );
    let gone = http
        .get(format!("{}/api/directory/PARCEL_TRACKING", node.url))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
    let asked: Value = http
        .get(format!("{}/api/dispatch?ask=track+my+parcel", node.url))
        .fetch()
        .await;
    assert_eq!(asked["count"], 0, "{asked}");

    let confirmed: Value = http.get(&confirm_url).fetch().await;
    assert_eq!(confirmed["confirmed"], true);
    assert_eq!(confirmed["key"], "PARCEL_TRACKING");
    let ledger: Value = http
        .get(format!("{}/api/receipts?key=PARCEL_TRACKING", node.url))
        .bearer_auth(ADMIN)
        .fetch()
        .await;
    assert_eq!(ledger["count"], 1);
    node.handle.shutdown().await;
}

#[tokio::test]
async fn the_four_counts_follow_their_predicates() {
    let node = start(false).await;
    let rows = json!([
        {"key": "A_VISIBLE", "type": "static"},
        {"key": "B_HIDDEN", "type": "static", "planner_visible": false},
        {"key": "C_DISABLED", "type": "static", "enabled": false},
        {"key": "D_SCALAR_ARGS", "type": "static", "args_schema": {"type": "string"}},
    ]);
    let bulk = node
        .http
        .post(format!("{}/api/directory", node.url))
        .bearer_auth(ADMIN)
        .json(&rows)
        .send()
        .await
        .unwrap();
    assert_eq!(bulk.status(), 200);
    let bulk: Value = bulk.json().await.unwrap();
    assert_eq!(
        (bulk["count"].as_u64(), bulk["created"].as_u64()),
        (Some(4), Some(4))
    );
    let counts: Value = node
        .http
        .get(format!("{}/api/directory/counts", node.url))
        .fetch()
        .await;
    assert_eq!(
        counts,
        json!({"rows_total": 4, "enabled": 3, "planner_visible": 2, "mcp_projected": 1})
    );
    let metrics = node
        .http
        .get(format!("{}/metrics", node.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("rowcall_directory_rows"), "{metrics}");
    node.handle.shutdown().await;
}

#[tokio::test]
async fn listing_pages_through_every_row_with_the_field_schema() {
    let node = start(true).await;
    // Every row, page by page, as the holder of `credential` sees them.
    let list_all = |credential: Option<&'static str>| {
        let node = &node;
        async move {
            let mut rows: Vec<Value> = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let mut request = node
                    .http
                    .get(format!("{}/api/directory", node.url))
                    .query(&[("limit", "7")]);
                if let Some(c) = &cursor {
                    request = request.query(&[("cursor", c)]);
                }
                if let Some(key) = credential {
                    request = request.bearer_auth(key);
                }
                let page: Value = request.fetch().await;
                assert!(page["schema"]["key"].is_string());
                rows.extend(page["rows"].as_array().unwrap().iter().cloned());
                match page["next_cursor"].as_str() {
                    Some(next) => cursor = Some(next.to_owned()),
                    None => break rows,
                }
            }
        }
    };
    let key_of = |r: &Value| r["key"].as_str().unwrap().to_owned();
    let admin_rows = list_all(Some(ADMIN)).await;
    let keys: Vec<String> = admin_rows.iter().map(key_of).collect();
    let counts: Value = node
        .http
        .get(format!("{}/api/directory/counts", node.url))
        .fetch()
        .await;
    assert_eq!(keys.len() as u64, counts["rows_total"].as_u64().unwrap());
    let mut sorted = keys.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, keys, "pages are in key order without repeats");

    // Strangers page through the same rows less the hidden ones, and see no targets.
    let public_rows = list_all(None).await;
    let hidden: Vec<String> = admin_rows
        .iter()
        .filter(|r| r["planner_visible"] == false)
        .map(key_of)
        .collect();
    assert!(!hidden.is_empty(), "the demo catalogue has a hidden row");
    let public_keys: Vec<String> = public_rows.iter().map(key_of).collect();
    let expected: Vec<String> = keys.into_iter().filter(|k| !hidden.contains(k)).collect();
    assert_eq!(public_keys, expected);
    assert!(public_rows.iter().all(|r| r.get("target").is_none()));
    assert!(admin_rows.iter().any(|r| r.get("target").is_some()));

    let time_rows: Value = node
        .http
        .get(format!("{}/api/directory?category=time", node.url))
        .fetch()
        .await;
    let time_rows = time_rows["rows"].as_array().unwrap();
    assert!(!time_rows.is_empty(), "the demo catalogue has Time rows");
    assert!(time_rows.iter().all(|r| r["category"] == "Time"));
    node.handle.shutdown().await;
}

#[tokio::test]
async fn key_auth_rows_need_an_invoke_credential_and_record_its_name() {
    let node = start(true).await;
    let url = format!("{}/api/dispatch", node.url);
    let body = json!({"key": "ONCALL_CONTACT"});
    let anonymous = node.http.post(&url).json(&body).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let wrong = node
        .http
        .post(&url)
        .bearer_auth("not-a-key")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let ok = node
        .http
        .post(&url)
        .bearer_auth(INVOKE)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let ok: Value = ok.json().await.unwrap();
    let receipt: Value = node
        .http
        .get(ok["proof"]["receipt"].as_str().unwrap())
        .bearer_auth(ADMIN)
        .fetch()
        .await;
    assert_eq!(receipt["caller"], "ci");
    // An invoke key may not write the directory.
    let write = node
        .http
        .post(format!("{}/api/directory", node.url))
        .bearer_auth(INVOKE)
        .json(&json!({"key": "X", "type": "static"}))
        .send()
        .await
        .unwrap();
    assert_eq!(write.status(), 403);
    // Hidden rows are invocable by key, never suggested.
    let hidden = node
        .http
        .post(&url)
        .bearer_auth(INVOKE)
        .json(&json!({"key": "INTERNAL_DEBUG_ECHO", "args": {"a": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(hidden.status(), 200);
    let asked: Value = node
        .http
        .get(&url)
        .query(&[("ask", "internal debugging echo")])
        .fetch()
        .await;
    // The ask works and finds the visible echo row, so the hidden one's absence means
    // something.
    let keys: Vec<&str> = asked["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["key"].as_str().unwrap())
        .collect();
    assert!(keys.contains(&"ECHO"), "{asked}");
    assert!(!keys.contains(&"INTERNAL_DEBUG_ECHO"), "{asked}");
    node.handle.shutdown().await;
}

#[tokio::test]
async fn the_openapi_document_describes_every_route() {
    let node = start(false).await;
    let doc: Value = node
        .http
        .get(format!("{}/api/openapi.json", node.url))
        .fetch()
        .await;
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for path in [
        "/api/dispatch",
        "/api/directory",
        "/api/directory/{key}",
        "/api/directory/counts",
        "/api/directory/changes",
        "/api/directory/import-mcp",
        "/api/share",
        "/api/receipts",
        "/api/receipts/{id}",
        "/receipt/{id}",
        "/api/cluster",
        "/api/cluster/digest",
        "/api/cluster/members",
        "/api/cluster/members/{id}",
        "/api/cluster/snapshot",
        "/healthz",
        "/readyz",
        "/metrics",
    ] {
        assert!(doc["paths"].get(path).is_some(), "missing {path}");
    }
    let cluster: Value = node
        .http
        .get(format!("{}/api/cluster", node.url))
        .fetch()
        .await;
    assert_eq!(cluster["role"], "leader");
    assert_eq!(cluster["leader"], 1);
    assert_eq!(cluster["members"].as_array().unwrap().len(), 1);
    // Ready once the fresh cluster has applied what it committed: poll, as a load balancer does.
    let mut ready = false;
    for _ in 0..100 {
        let answer = node
            .http
            .get(format!("{}/readyz", node.url))
            .send()
            .await
            .unwrap();
        if answer.status() == 200 {
            ready = true;
            break;
        }
        assert_eq!(answer.status(), 503);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(ready, "/readyz never became ready");
    node.handle.shutdown().await;
}

/// Every answer names its request (`x-request-id`), over HTTP and gRPC: the caller's id
/// when it is printable ASCII of at most 128 bytes, else the trace id of its W3C
/// `traceparent`, else one the node made; an id a log line could not hold is replaced.
#[tokio::test]
async fn every_answer_names_its_request_id_over_http_and_grpc() {
    let node = start(true).await;
    let ask = |headers: &[(&str, &str)]| {
        let mut request = node.http.get(format!("{}/api/dispatch?ask=time", node.url));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200);
            response.headers()["x-request-id"]
                .to_str()
                .unwrap()
                .to_owned()
        }
    };
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    assert_eq!(ask(&[("x-request-id", "order-17")]).await, "order-17");
    assert_eq!(
        ask(&[("traceparent", parent)]).await,
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    let made = ask(&[]).await;
    assert_eq!(made.len(), 32);
    assert_ne!(made, ask(&[]).await, "each request its own id");
    let replaced = ask(&[("x-request-id", "with space")]).await;
    assert_ne!(replaced, "with space");

    let channel =
        tonic::transport::Channel::from_shared(format!("http://{}", node.handle.grpc_addr))
            .unwrap()
            .connect()
            .await
            .unwrap();
    let mut dispatch = rowcall_proto::v1::dispatch_client::DispatchClient::new(channel);
    let mut request = tonic::Request::new(rowcall_proto::v1::AskRequest {
        ask: "time".into(),
        ..Default::default()
    });
    request
        .metadata_mut()
        .insert("x-request-id", "grpc-order-18".parse().unwrap());
    let response = dispatch.ask(request).await.unwrap();
    assert_eq!(
        response.metadata().get("x-request-id").unwrap(),
        "grpc-order-18"
    );
}
