//! Bad input: every malformed or unauthorised request gets its status and a JSON error
//! `{"ok":false,"error":{"code","message","hint"}}`, nothing is written or run, and the node
//! keeps serving.

use crate::common;

use common::{start_with, Fetch, TestNode, ADMIN};
use reqwest::{RequestBuilder, StatusCode};
use serde_json::{json, Value};

const LIMIT: usize = 64 * 1024;

async fn node() -> TestNode {
    start_with(true, |config| config.limits.max_body_bytes = LIMIT).await
}

/// Sends the request, checks status and error shape, and checks the node still answers.
async fn expect_error(
    node: &TestNode,
    request: RequestBuilder,
    status: StatusCode,
    code: &str,
) -> Value {
    let response = request.send().await.unwrap();
    let actual = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(actual, status, "{body}");
    assert_eq!(body["ok"], false, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(
        body["error"]["hint"]
            .as_str()
            .is_some_and(|h| !h.is_empty()),
        "{body}"
    );
    let health = node
        .http
        .get(format!("{}/healthz", node.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    body
}

async fn counts(node: &TestNode) -> Value {
    node.http
        .get(format!("{}/api/directory/counts", node.url))
        .fetch()
        .await
}

#[tokio::test]
async fn directory_writes_refuse_bad_input_and_write_nothing() {
    let node = node().await;
    let dir = format!("{}/api/directory", node.url);
    let before = counts(&node).await;
    let post = || node.http.post(&dir).header("x-terminal-key", ADMIN);

    expect_error(
        &node,
        post()
            .header("content-type", "application/json")
            .body("{\"key\": "),
        StatusCode::BAD_REQUEST,
        "malformed_json",
    )
    .await;
    expect_error(
        &node,
        post().header("content-type", "text/plain").body("{}"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    )
    .await;
    expect_error(
        &node,
        post().body("{}"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    )
    .await;
    let bad_key = expect_error(
        &node,
        post().json(&json!({"key": "lower-case", "type": "static"})),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_row",
    )
    .await;
    assert!(bad_key["error"]["message"]
        .as_str()
        .unwrap()
        .contains("^[A-Z_][A-Z0-9_]{0,63}$"));
    expect_error(
        &node,
        post().json(&json!({"key": "X", "type": "teleport"})),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_body",
    )
    .await;
    expect_error(
        &node,
        node.http
            .post(&dir)
            .json(&json!({"key": "X", "type": "static"})),
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
    expect_error(
        &node,
        node.http
            .post(&dir)
            .header("x-terminal-key", "wrong")
            .json(&json!({"key": "X", "type": "static"})),
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
    let huge = json!({"key": "HUGE", "type": "static", "content": "x".repeat(LIMIT * 2)});
    expect_error(
        &node,
        post().json(&huge),
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
    )
    .await;
    let long_content =
        json!({"key": "LONG", "type": "static", "content": "x".repeat(64 * 1024 + 1)});
    let big_node = start_with(false, |_| {}).await;
    expect_error(
        &big_node,
        big_node
            .http
            .post(format!("{}/api/directory", big_node.url))
            .bearer_auth(ADMIN)
            .json(&long_content),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_row",
    )
    .await;
    big_node.handle.shutdown().await;
    let schema = expect_error(&node, post().json(&json!({"key": "BAD_SCHEMA", "type": "static", "args_schema": {"type": "object", "properties": {"a": {"type": 12}}}})), StatusCode::UNPROCESSABLE_ENTITY, "invalid_row").await;
    assert!(schema["error"]["message"]
        .as_str()
        .unwrap()
        .contains("args_schema"));
    // A bulk write with one bad row writes none of them.
    let bulk = json!([{"key": "GOOD_ONE", "type": "static"}, {"key": "bad", "type": "static"}]);
    let bulk = expect_error(
        &node,
        post().json(&bulk),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_row",
    )
    .await;
    assert!(bulk["error"]["message"].as_str().unwrap().contains("row 1"));
    let dupes = json!([{"key": "TWICE", "type": "static"}, {"key": "TWICE", "type": "static"}]);
    expect_error(
        &node,
        post().json(&dupes),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_row",
    )
    .await;
    expect_error(
        &node,
        post().json(&json!([])),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_body",
    )
    .await;
    expect_error(
        &node,
        post().json(&json!({"key": "X", "type": "builtin", "target": "rm_rf"})),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_row",
    )
    .await;

    assert_eq!(counts(&node).await, before, "nothing was written");
    node.handle.shutdown().await;
}

#[tokio::test]
async fn if_version_guards_writes_and_deletes() {
    let node = node().await;
    let dir = format!("{}/api/directory", node.url);
    // An admin reads the whole row (anonymous readers do not see its target).
    let current: Value = node
        .http
        .get(format!("{dir}/ECHO"))
        .bearer_auth(ADMIN)
        .fetch()
        .await;
    let version = current["version"].as_u64().unwrap();
    let mut row = current.clone();
    row["if_version"] = json!(version + 1000);
    let conflict = expect_error(
        &node,
        node.http.post(&dir).bearer_auth(ADMIN).json(&row),
        StatusCode::CONFLICT,
        "version_conflict",
    )
    .await;
    assert!(conflict["error"]["message"]
        .as_str()
        .unwrap()
        .contains(&version.to_string()));
    // if_version 0 means "create only".
    row["if_version"] = json!(0);
    expect_error(
        &node,
        node.http.post(&dir).bearer_auth(ADMIN).json(&row),
        StatusCode::CONFLICT,
        "version_conflict",
    )
    .await;
    expect_error(
        &node,
        node.http
            .delete(format!("{dir}/ECHO?if_version=1"))
            .bearer_auth(ADMIN),
        StatusCode::CONFLICT,
        "version_conflict",
    )
    .await;
    // The right version goes through.
    row["if_version"] = json!(version);
    let ok = node
        .http
        .post(&dir)
        .bearer_auth(ADMIN)
        .json(&row)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let unchanged: Value = node.http.get(format!("{dir}/ECHO")).fetch().await;
    assert!(unchanged["version"].as_u64().unwrap() > version);
    assert_eq!(unchanged["created_at"], current["created_at"]);
    node.handle.shutdown().await;
}

#[tokio::test]
async fn invocations_refuse_bad_input_before_anything_runs() {
    let node = node().await;
    let url = format!("{}/api/dispatch", node.url);
    expect_error(
        &node,
        node.http.post(&url).json(&json!({"key": "NO_SUCH_ROW"})),
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    expect_error(
        &node,
        node.http.get(format!("{url}?key=NO_SUCH_ROW")),
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    expect_error(
        &node,
        node.http
            .post(&url)
            .header("content-type", "application/json")
            .body("not json"),
        StatusCode::BAD_REQUEST,
        "malformed_json",
    )
    .await;
    expect_error(
        &node,
        node.http
            .post(&url)
            .json(&json!({"key": "ECHO", "args": [1, 2]})),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_body",
    )
    .await;
    expect_error(
        &node,
        node.http.get(&url),
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    expect_error(
        &node,
        node.http.get(format!("{url}?ask=x&key=ECHO")),
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;

    // Arguments that break the schema: 422 with every violation, and no receipt.
    let invalid = expect_error(
        &node,
        node.http
            .post(&url)
            .json(&json!({"key": "SHA256_HASH", "args": {"text": 5, "extra": true}})),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_args",
    )
    .await;
    let violations = invalid["error"]["violations"].as_array().unwrap();
    assert!(violations.len() >= 2, "{invalid}");
    assert!(
        violations.iter().any(|v| v["pointer"] == "/text"),
        "{invalid}"
    );
    expect_error(
        &node,
        node.http.post(&url).json(&json!({"key": "SHA256_HASH"})),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_args",
    )
    .await;
    let ledger: Value = node
        .http
        .get(format!("{}/api/receipts?key=SHA256_HASH", node.url))
        .bearer_auth(ADMIN)
        .fetch()
        .await;
    assert_eq!(ledger["count"], 0, "nothing ran, nothing was recorded");

    // A disabled row cannot run.
    let mut row: Value = node
        .http
        .get(format!("{}/api/directory/ECHO", node.url))
        .bearer_auth(ADMIN)
        .fetch()
        .await;
    row["enabled"] = json!(false);
    let disabled = node
        .http
        .post(format!("{}/api/directory", node.url))
        .bearer_auth(ADMIN)
        .json(&row)
        .send()
        .await
        .unwrap();
    assert_eq!(disabled.status(), 200);
    expect_error(
        &node,
        node.http.post(&url).json(&json!({"key": "ECHO"})),
        StatusCode::FORBIDDEN,
        "row_disabled",
    )
    .await;
    expect_error(
        &node,
        node.http.get(format!("{url}?invoke=ECHO")),
        StatusCode::FORBIDDEN,
        "row_disabled",
    )
    .await;
    node.handle.shutdown().await;
}

/// A min-index past the end of the leader's log was never issued by this cluster: waiting
/// cannot help, so the answer is 400 at once (a follower that is only behind waits; see
/// cluster.rs), and an index the cluster did issue answers.
#[tokio::test]
async fn reads_for_an_index_never_issued_answer_400() {
    let node = start_with(false, |config| config.limits.min_index_wait_ms = 50).await;
    let counts = format!("{}/api/directory/counts", node.url);
    let refused = expect_error(
        &node,
        node.http
            .get(&counts)
            .header("x-rowcall-min-index", "999999"),
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("999999"),
        "{refused}"
    );
    let answered = node.http.get(&counts).send().await.unwrap();
    let applied: u64 = answered.headers()["x-rowcall-index"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let caught_up = node
        .http
        .get(format!("{counts}?min_index={applied}"))
        .send()
        .await
        .unwrap();
    assert_eq!(caught_up.status(), 200);
    node.handle.shutdown().await;
}

/// What a failed gRPC call said: its status code, and rowcall's code, message and hint.
fn grpc_error(error: rowcall_client::Error) -> (tonic::Code, String, String, String) {
    let rejection = error.rejection().cloned().expect("a node's answer");
    (
        rejection.status,
        rejection.code,
        rejection.message,
        rejection.hint,
    )
}

/// The HTTP error body's code, message and hint.
fn http_error(body: &Value) -> (String, String, String) {
    let text = |field: &str| body["error"][field].as_str().unwrap_or_default().to_owned();
    (text("code"), text("message"), text("hint"))
}

#[tokio::test]
async fn bad_input_over_grpc_gets_the_answers_http_gives() {
    use rowcall_client::{row_input, Client};
    let node = node().await;
    let grpc = format!("http://{}", node.handle.grpc_addr);
    let client = |key: Option<&str>| {
        let builder = Client::builder().node(&grpc).hedge_after(None);
        match key {
            Some(key) => builder.credential(key),
            None => builder,
        }
        .build()
        .unwrap()
    };
    let admin = client(Some(ADMIN));
    let post_row = |key: Option<&str>, row: &Value| {
        let request = node
            .http
            .post(format!("{}/api/directory", node.url))
            .json(row);
        match key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    };

    // An invalid key: the same rule, word for word.
    let bad_key = json!({"key": "lower-case", "type": "static", "content": "# WHAT: x\n"});
    let over_http = expect_error(
        &node,
        post_row(Some(ADMIN), &bad_key),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_row",
    )
    .await;
    let over_grpc = admin.put(row_input(bad_key).unwrap()).await.unwrap_err();
    let (status, code, message, hint) = grpc_error(over_grpc);
    assert_eq!(status, tonic::Code::InvalidArgument);
    assert_eq!((code, message, hint), http_error(&over_http));

    // Missing and wrong credentials.
    let good = json!({"key": "PARITY_ROW", "type": "static", "auth": "public",
                      "args_schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
                      "content": "# WHAT: parity\n\n1"});
    for key in [None, Some("not-a-key")] {
        let over_http = expect_error(
            &node,
            post_row(key, &good),
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        )
        .await;
        let over_grpc = client(key)
            .put(row_input(good.clone()).unwrap())
            .await
            .unwrap_err();
        let (status, code, message, hint) = grpc_error(over_grpc);
        assert_eq!(status, tonic::Code::Unauthenticated, "{key:?}");
        assert_eq!((code, message, hint), http_error(&over_http), "{key:?}");
    }
    // A credential that may not write the directory.
    let over_http = expect_error(
        &node,
        post_row(Some(common::INVOKE), &good),
        StatusCode::FORBIDDEN,
        "forbidden",
    )
    .await;
    let over_grpc = client(Some(common::INVOKE))
        .put(row_input(good.clone()).unwrap())
        .await
        .unwrap_err();
    let (status, code, message, hint) = grpc_error(over_grpc);
    assert_eq!(status, tonic::Code::PermissionDenied);
    assert_eq!((code, message, hint), http_error(&over_http));

    // Arguments that break the row's schema: refused before anything runs, each violation named.
    admin.put(row_input(good).unwrap()).await.unwrap();
    let over_http = expect_error(
        &node,
        node.http
            .post(format!("{}/api/dispatch", node.url))
            .json(&json!({"key": "PARITY_ROW", "args": {"n": "three"}})),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_args",
    )
    .await;
    let args = json!({"n": "three"}).as_object().cloned();
    let over_grpc = admin.invoke("PARITY_ROW", args).await.unwrap_err();
    let rejection = over_grpc.rejection().cloned().unwrap();
    assert_eq!(rejection.status, tonic::Code::InvalidArgument);
    assert_eq!(
        (
            rejection.code.clone(),
            rejection.message.clone(),
            rejection.hint.clone()
        ),
        http_error(&over_http)
    );
    let http_violations: Vec<(String, String)> = over_http["error"]["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["pointer"].as_str().unwrap().to_owned(),
                v["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(rejection.violations, http_violations);
    assert!(!rejection.violations.is_empty());

    // An unknown row, read and invoked.
    let over_http = expect_error(
        &node,
        node.http
            .get(format!("{}/api/directory/NO_SUCH_ROW", node.url)),
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    let (status, code, message, hint) = grpc_error(admin.get("NO_SUCH_ROW").await.unwrap_err());
    assert_eq!(status, tonic::Code::NotFound);
    assert_eq!((code, message, hint), http_error(&over_http));
    let (status, code, ..) = grpc_error(admin.invoke("NO_SUCH_ROW", None).await.unwrap_err());
    assert_eq!(
        (status, code.as_str()),
        (tonic::Code::NotFound, "not_found")
    );
}

#[tokio::test]
async fn a_write_too_large_for_one_raft_entry_gets_413_and_writes_nothing() {
    use rowcall_client::{row_input, Client};
    const ENTRY: usize = 16 * 1024;
    let node = start_with(false, |config| config.raft.max_entry_bytes = ENTRY).await;
    let row = |i: usize| {
        json!({"key": format!("BULK_{i}"), "type": "static", "auth": "public",
               "content": format!("# WHAT: bulk row {i}\n\n{}", "x".repeat(200))})
    };
    let before = counts(&node).await;

    // Over the limit: refused whole, before anything is proposed, with a hint to split.
    let too_many: Vec<Value> = (0..200).map(row).collect();
    let refused = expect_error(
        &node,
        node.http
            .post(format!("{}/api/directory", node.url))
            .bearer_auth(ADMIN)
            .json(&too_many),
        StatusCode::PAYLOAD_TOO_LARGE,
        "write_too_large",
    )
    .await;
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&ENTRY.to_string()),
        "{refused}"
    );
    assert_eq!(counts(&node).await, before);

    // The same over gRPC: the code a client retries never (resource exhausted), nothing written.
    let grpc = format!("http://{}", node.handle.grpc_addr);
    let admin = Client::builder()
        .node(&grpc)
        .credential(ADMIN)
        .build()
        .unwrap();
    let rows = too_many
        .iter()
        .map(|r| row_input(r.clone()).unwrap())
        .collect();
    let status = grpc_error(admin.put_many(rows).await.unwrap_err()).0;
    assert_eq!(status, tonic::Code::ResourceExhausted);
    assert_eq!(counts(&node).await, before);

    // Split into writes under the limit, the same rows go in.
    for chunk in too_many.chunks(40) {
        let written: Value = node
            .http
            .post(format!("{}/api/directory", node.url))
            .bearer_auth(ADMIN)
            .json(&chunk)
            .fetch()
            .await;
        assert_eq!(written["count"], chunk.len(), "{written}");
    }
    assert_eq!(
        counts(&node).await["rows_total"].as_u64().unwrap(),
        before["rows_total"].as_u64().unwrap() + 200
    );
}
