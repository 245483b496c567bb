//! Runners that reach the world (issue 5), against upstreams the tests start on loopback:
//! - http rows fill `{arg}` placeholders (URL-encoded) and body templates, send the
//!   operator's configured headers, and record what they called and the upstream's status;
//! - an upstream 500, a timeout and an oversized answer are failed invocations (502/504)
//!   whose receipts say so;
//! - the SSRF guard refuses loopback (v4, v6, by name), link-local/metadata and private
//!   destinations unless allowed, and a redirect that leaves the allow-list — before any
//!   connection is made (the test servers count what reaches them);
//! - rows with `args_schema` refuse missing, extra and mistyped arguments with 422 and
//!   every violation, and nothing reaches the upstream;
//! - share tokens: valid, expired, for another key, tampered and revoked (401 with the
//!   reason), and the ask's `run_now` link carries one for a credentialed asker;
//! - an MCP server (rmcp, Streamable HTTP) is imported through the command-line client's
//!   library, its tools are askable and invocable, and a re-import reports the difference.
//!
//! Only loopback addresses are ever contacted; refusals of 10.x and 169.254.x happen before
//! connecting, by construction of the guard.

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use common::{start_with, TestNode, ADMIN, INVOKE};
use rowcall_node::config::HeaderSource;
use serde_json::{json, Value};

/// A plain HTTP upstream on loopback that counts every request it receives.
struct Upstream {
    base: String,
    port: u16,
    hits: Arc<AtomicUsize>,
}

#[derive(Clone)]
struct UpstreamState {
    hits: Arc<AtomicUsize>,
    escape_to: Option<String>,
}

async fn count(State(state): State<UpstreamState>, request: Request, next: Next) -> Response {
    state.hits.fetch_add(1, Ordering::SeqCst);
    next.run(request).await
}

/// Answers with what it received: method, path, decoded query, body, and the API key header.
async fn echo(request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let query: BTreeMap<String, String> = parts
        .uri
        .query()
        .map(|q| {
            q.split('&')
                .filter_map(|pair| pair.split_once('='))
                .map(|(k, v)| (k.to_owned(), percent_decode(v)))
                .collect()
        })
        .unwrap_or_default();
    let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    axum::Json(json!({
        "method": parts.method.as_str(),
        "path": parts.uri.path(),
        "query": query,
        "body": text,
        "json": serde_json::from_str::<Value>(&text).ok(),
        "content_type": header("content-type"),
        "api_key": header("x-api-key"),
    }))
    .into_response()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
            out.push(u8::from_str_radix(hex, 16).unwrap());
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

impl Upstream {
    /// Starts the upstream; `/escape` redirects to `escape_to` when given.
    async fn start(escape_to: Option<String>) -> Self {
        let hits = Arc::new(AtomicUsize::new(0));
        let state = UpstreamState {
            hits: hits.clone(),
            escape_to,
        };
        let router = Router::new()
            .route("/echo", any(echo))
            .route("/echo/{*rest}", any(echo))
            .route(
                "/fail",
                get(|| async {
                    (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "boom: the database is on fire",
                    )
                }),
            )
            // Never answers: the node's timeout ends the call.
            .route("/slow", get(std::future::pending::<&'static str>))
            .route("/big", get(|| async { "x".repeat(2 << 20) }))
            .route(
                "/hop",
                get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/echo?hopped=yes")]) }),
            )
            .route(
                "/escape",
                get(|State(state): State<UpstreamState>| async move {
                    let to = state.escape_to.unwrap_or_default();
                    (StatusCode::FOUND, [(header::LOCATION, to)])
                }),
            )
            .layer(middleware::from_fn_with_state(state.clone(), count))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, router).await });
        Self {
            base: format!("http://127.0.0.1:{port}"),
            port,
            hits,
        }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// Writes `row` (admin key) and checks it was accepted.
async fn put(node: &TestNode, row: Value) {
    let response = node
        .http
        .post(format!("{}/api/directory", node.url))
        .bearer_auth(ADMIN)
        .json(&row)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert!(status.is_success(), "{row} -> {status} {body}");
}

/// Invokes `key` with `args` using the invoke key.
async fn invoke(node: &TestNode, key: &str, args: Value) -> (StatusCode, Value) {
    invoke_body(node, json!({ "key": key, "args": args })).await
}

async fn invoke_body(node: &TestNode, body: Value) -> (StatusCode, Value) {
    let response = node
        .http
        .post(format!("{}/api/dispatch", node.url))
        .bearer_auth(INVOKE)
        .json(&body)
        .send()
        .await
        .unwrap();
    (response.status(), response.json().await.unwrap())
}

/// The forensic receipt of an invocation answer.
async fn receipt_of(node: &TestNode, answer: &Value) -> Value {
    let id = answer["proof"]["invocation_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no proof in {answer}"));
    node.http
        .get(format!("{}/api/receipts/{id}", node.url))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn get_json(node: &TestNode, path: &str, bearer: Option<&str>) -> (StatusCode, Value) {
    let mut request = node.http.get(format!("{}{path}", node.url));
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    let response = request.send().await.unwrap();
    (response.status(), response.json().await.unwrap())
}

#[tokio::test]
async fn http_rows_fill_placeholders_and_body_templates() {
    let up = Upstream::start(None).await;
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), "s3cr3t-upstream-key\n").unwrap();
    let allow = format!("127.0.0.1:{}", up.port);
    let secret_path = secret.path().to_owned();
    let node = start_with(false, move |c| {
        c.runners.allow = vec![allow];
        c.runners.headers.insert(
            "ECHO_POST".into(),
            BTreeMap::from([(
                "X-Api-Key".into(),
                HeaderSource::Secret {
                    env: None,
                    file: Some(secret_path),
                    prefix: None,
                },
            )]),
        );
    })
    .await;

    put(
        &node,
        json!({"key": "ECHO_GET", "type": "http", "target": format!("GET {}/echo?q={{q}}&n={{n}}", up.base),
               "content": "# WHAT: echo a query"}),
    )
    .await;
    let (status, answer) = invoke(&node, "ECHO_GET", json!({"q": "a b&c/é", "n": 3})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let result = &answer["result"];
    assert_eq!(result["status"], 200);
    assert!(result["content_type"]
        .as_str()
        .unwrap()
        .starts_with("application/json"));
    assert_eq!(result["body"]["method"], "GET");
    assert_eq!(result["body"]["query"], json!({"q": "a b&c/é", "n": "3"}));
    let receipt = receipt_of(&node, &answer).await;
    assert_eq!(
        receipt["called"],
        format!("GET {}/echo?q=a%20b%26c%2F%C3%A9&n=3", up.base)
    );
    assert_eq!(receipt["upstream_status"], "200");
    assert_eq!(receipt["ok"], true);

    put(
        &node,
        json!({"key": "ECHO_POST", "type": "http", "target": format!("POST {}/echo/{{id}}", up.base),
               "content": "# WHAT: file a note\n\n{\"title\": \"{title}\", \"count\": \"{count}\", \"note\": \"re: {title}\"}"}),
    )
    .await;
    let (status, answer) = invoke(
        &node,
        "ECHO_POST",
        json!({"id": "n 1", "title": "say \"hi\"", "count": 2}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let seen = &answer["result"]["body"];
    assert_eq!(seen["method"], "POST");
    assert_eq!(seen["path"], "/echo/n%201");
    assert_eq!(
        seen["json"],
        json!({"title": "say \"hi\"", "count": 2, "note": "re: say \"hi\""})
    );
    assert_eq!(seen["content_type"], "application/json");
    // The configured header reached the upstream and is nowhere in the receipt.
    assert_eq!(seen["api_key"], "s3cr3t-upstream-key");
    let receipt = receipt_of(&node, &answer).await;
    assert_eq!(receipt["called"], format!("POST {}/echo/n%201", up.base));
    // (The output is what the upstream answered; this echo server reflects the header.)
    for field in ["called", "input", "caller"] {
        assert!(!receipt[field].to_string().contains("s3cr3t"), "{field}");
    }

    // The caller's body replaces the template.
    let (status, answer) = invoke_body(
        &node,
        json!({"key": "ECHO_POST", "args": {"id": "raw"}, "body": "plain words"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["result"]["body"]["body"], "plain words");
    assert!(answer["result"]["body"]["content_type"]
        .as_str()
        .unwrap()
        .starts_with("text/plain"));

    // A redirect inside the allow-list is followed and recorded.
    put(
        &node,
        json!({"key": "HOP", "type": "http", "target": format!("GET {}/hop", up.base)}),
    )
    .await;
    let (status, answer) = invoke(&node, "HOP", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["result"]["body"]["query"]["hopped"], "yes");
    let receipt = receipt_of(&node, &answer).await;
    assert_eq!(
        receipt["called"],
        format!("GET {0}/hop -> {0}/echo?hopped=yes", up.base)
    );
}

#[tokio::test]
async fn upstream_failures_are_failed_invocations_with_receipts() {
    let up = Upstream::start(None).await;
    let allow = format!("127.0.0.1:{}", up.port);
    let node = start_with(false, move |c| {
        c.runners.allow = vec![allow];
        c.runners.timeout_ms = 500;
        c.runners.max_response_bytes = 64 * 1024;
    })
    .await;
    for (key, path) in [("FAILS", "fail"), ("HANGS", "slow"), ("HUGE", "big")] {
        put(
            &node,
            json!({"key": key, "type": "http", "target": format!("GET {}/{path}", up.base)}),
        )
        .await;
    }

    let (status, answer) = invoke(&node, "FAILS", json!({})).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{answer}");
    assert_eq!(answer["ok"], false);
    assert_eq!(answer["error"]["code"], "upstream_error");
    assert!(answer["error"]["message"]
        .as_str()
        .unwrap()
        .contains("500: boom"));
    let receipt = receipt_of(&node, &answer).await;
    assert_eq!(receipt["ok"], false);
    assert_eq!(receipt["upstream_status"], "500");
    assert!(receipt["error"].as_str().unwrap().contains("answered 500"));

    let (status, answer) = invoke(&node, "HANGS", json!({})).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{answer}");
    assert_eq!(answer["error"]["code"], "upstream_timeout");
    let receipt = receipt_of(&node, &answer).await;
    assert_eq!(receipt["ok"], false);
    assert!(receipt["error"]
        .as_str()
        .unwrap()
        .contains("did not answer within 500 ms"));
    assert!(receipt.get("upstream_status").is_none(), "{receipt}");

    let (status, answer) = invoke(&node, "HUGE", json!({})).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{answer}");
    assert_eq!(answer["error"]["code"], "upstream_too_large");
    let receipt = receipt_of(&node, &answer).await;
    assert_eq!(receipt["ok"], false);
    assert_eq!(receipt["upstream_status"], "200");
    assert!(receipt["error"].as_str().unwrap().contains("65536 bytes"));
}

#[tokio::test]
async fn the_ssrf_guard_refuses_internal_destinations_before_connecting() {
    let up = Upstream::start(None).await;
    let node = start_with(false, |_| {}).await;
    let port = up.port;
    let targets = [
        (
            "LOOP_V4",
            format!("GET http://127.0.0.1:{port}/echo"),
            "loopback",
        ),
        (
            "LOOP_V6",
            format!("GET http://[::1]:{port}/echo"),
            "loopback",
        ),
        (
            "LOOP_NAME",
            format!("GET http://localhost:{port}/echo"),
            "loopback",
        ),
        (
            "METADATA",
            "GET http://169.254.169.254/latest/meta-data/".to_owned(),
            "link-local",
        ),
        ("PRIVATE", "GET http://10.0.0.1/admin".to_owned(), "private"),
    ];
    for (key, target, range) in &targets {
        put(&node, json!({"key": key, "type": "http", "target": target})).await;
        let (status, answer) = invoke(&node, key, json!({})).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{key}: {answer}");
        assert_eq!(answer["error"]["code"], "destination_refused", "{key}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(range), "{key}: {message}");
        let receipt = receipt_of(&node, &answer).await;
        assert_eq!(receipt["ok"], false);
        assert!(receipt["error"].as_str().unwrap().contains("refused"));
    }
    assert_eq!(up.hits(), 0, "nothing may reach a refused destination");
}

#[tokio::test]
async fn a_redirect_out_of_the_allow_list_is_refused() {
    let inner = Upstream::start(None).await;
    let outer = Upstream::start(Some(format!("{}/echo", inner.base))).await;
    let allow = format!("127.0.0.1:{}", outer.port);
    let node = start_with(false, move |c| c.runners.allow = vec![allow]).await;
    put(
        &node,
        json!({"key": "ESCAPE", "type": "http", "target": format!("GET {}/escape", outer.base)}),
    )
    .await;
    let (status, answer) = invoke(&node, "ESCAPE", json!({})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert_eq!(answer["error"]["code"], "destination_refused");
    let receipt = receipt_of(&node, &answer).await;
    assert_eq!(
        receipt["called"],
        format!("GET {}/escape -> {}/echo", outer.base, inner.base)
    );
    assert_eq!(receipt["upstream_status"], "302");
    assert_eq!(outer.hits(), 1);
    assert_eq!(inner.hits(), 0, "the redirect target was never contacted");
}

#[tokio::test]
async fn typed_arguments_are_refused_before_anything_runs() {
    let up = Upstream::start(None).await;
    let allow = format!("127.0.0.1:{}", up.port);
    let node = start_with(false, move |c| c.runners.allow = vec![allow]).await;
    put(
        &node,
        json!({"key": "TYPED", "type": "http", "target": format!("GET {}/echo?q={{q}}", up.base),
               "content": "# WHAT: typed search",
               "args_schema": {"type": "object", "additionalProperties": false, "required": ["q"],
                               "properties": {"q": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}}}}),
    )
    .await;
    put(
        &node,
        json!({"key": "UNTYPED", "type": "http", "target": format!("GET {}/echo?q={{q}}", up.base)}),
    )
    .await;

    for (args, pointer, words) in [
        (json!({}), "/", "\"q\" is a required property"),
        (json!({"q": "x", "extra": 1}), "/", "extra"),
        (json!({"q": 5}), "/q", "is not of type \"string\""),
        (
            json!({"q": "x", "limit": "ten"}),
            "/limit",
            "is not of type \"integer\"",
        ),
    ] {
        let (status, answer) = invoke(&node, "TYPED", args.clone()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{args}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid_args");
        let violations = answer["error"]["violations"].as_array().unwrap();
        assert!(
            violations
                .iter()
                .any(|v| v["pointer"] == pointer && v["message"].as_str().unwrap().contains(words)),
            "{args}: {answer}"
        );
        assert!(
            answer.get("proof").is_none(),
            "nothing ran, nothing to prove"
        );
    }
    // Several violations at once are all listed.
    let (_, answer) = invoke(&node, "TYPED", json!({"q": 1, "limit": 0})).await;
    assert_eq!(
        answer["error"]["violations"].as_array().unwrap().len(),
        2,
        "{answer}"
    );
    // A placeholder without its argument is refused the same way, schema or not.
    let (status, answer) = invoke(&node, "UNTYPED", json!({})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["error"]["violations"][0]["pointer"], "/q");

    assert_eq!(up.hits(), 0, "the upstream saw no request");
    let (_, receipts) = get_json(&node, "/api/receipts?key=TYPED", Some(ADMIN)).await;
    assert_eq!(
        receipts["receipts"].as_array().map_or(0, Vec::len),
        0,
        "{receipts}"
    );

    // The contract's example validates and runs.
    let (_, contract) = get_json(&node, "/api/dispatch?key=TYPED", None).await;
    assert_eq!(contract["args_schema"]["required"], json!(["q"]));
    let (status, answer) = invoke(&node, "TYPED", contract["args_example"].clone()).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(up.hits(), 1);
}

#[tokio::test]
async fn share_tokens_open_one_row_until_expired_or_revoked() {
    let node = start_with(false, |_| {}).await;
    put(
        &node,
        json!({"key": "SECRET_REPORT", "type": "static", "auth": "key",
               "content": "# WHAT: quarterly secret revenue report\n\n{\"total\": 42}"}),
    )
    .await;
    put(
        &node,
        json!({"key": "OTHER_REPORT", "type": "static", "auth": "key", "content": "# WHAT: other\n\n1"}),
    )
    .await;
    let mint = |bearer: &'static str| {
        node.http
            .post(format!("{}/api/share", node.url))
            .bearer_auth(bearer)
            .json(&json!({"key": "SECRET_REPORT", "ttl_secs": 600}))
            .send()
    };
    assert_eq!(mint(INVOKE).await.unwrap().status(), StatusCode::FORBIDDEN);
    let minted: Value = mint(ADMIN).await.unwrap().json().await.unwrap();
    let token = minted["token"].as_str().unwrap().to_owned();
    let id = minted["id"].as_str().unwrap().to_owned();
    let run_now = minted["run_now"].as_str().unwrap().to_owned();

    let refused = |status: StatusCode, answer: &Value, reason: &str| {
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{answer}");
        assert_eq!(answer["error"]["code"], "share_token_refused", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(reason), "{message} lacks {reason}");
    };
    let with_share = |key: &str, token: &str| format!("/api/dispatch?invoke={key}&share={token}");

    // Valid: runs, and the receipt names the token.
    let response = node.http.get(&run_now).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["result"]["total"], 42);
    let receipt = receipt_of(&node, &answer).await;
    assert_eq!(receipt["caller"], format!("share:{id}"));
    // Without it, the row needs a credential.
    let (status, _) = get_json(&node, "/api/dispatch?invoke=SECRET_REPORT", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // Another key.
    let (status, answer) = get_json(&node, &with_share("OTHER_REPORT", &token), None).await;
    refused(status, &answer, "is for SECRET_REPORT, not OTHER_REPORT");
    // Tampered: a later expiry under the old signature (st2.<kid>.<id>.<KEY>.<expires>.<sig>).
    let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
    let expires = parts.len() - 2;
    parts[expires] = (parts[expires].parse::<u64>().unwrap() + 86_400).to_string();
    let (status, answer) =
        get_json(&node, &with_share("SECRET_REPORT", &parts.join(".")), None).await;
    refused(status, &answer, "tampered");
    let (status, answer) =
        get_json(&node, &with_share("SECRET_REPORT", "st1.nonsense"), None).await;
    refused(status, &answer, "malformed");
    // Expired: signed with the cluster's secret, with an expiry in the past.
    let secret = node.handle.app.receipts.share_secret().unwrap().unwrap();
    let now = rowcall_node::model::share::now_secs();
    let expired = secret.mint("sh00000000ex", "SECRET_REPORT", now - 60);
    let (status, answer) = get_json(&node, &with_share("SECRET_REPORT", &expired), None).await;
    refused(status, &answer, "expired at");
    // Revoked.
    let response = node
        .http
        .delete(format!("{}/api/share/{id}", node.url))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let response = node.http.get(&run_now).send().await.unwrap();
    let status = response.status();
    refused(status, &response.json().await.unwrap(), "revoked");

    // The ask's run_now carries a fresh token for a credentialed asker only.
    let ask = "/api/dispatch?ask=quarterly+secret+revenue+report";
    let (_, anonymous) = get_json(&node, ask, None).await;
    assert_eq!(anonymous["best"]["key"], "SECRET_REPORT");
    assert!(anonymous["best"].get("run_now").is_none(), "{anonymous}");
    let (_, asked) = get_json(&node, ask, Some(INVOKE)).await;
    let link = asked["best"]["run_now"].as_str().unwrap();
    assert!(link.contains("&share=st2."), "{asked}");
    let response = node.http.get(link).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

mod mcp_upstream {
    //! A small MCP server for the import test: its tool set can change while it runs,
    //! `tools/list` pages one tool at a time, and it counts `tools/call` requests.

    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
        ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    };
    use rmcp::service::RequestContext;
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    use rmcp::{ErrorData, RoleServer, ServerHandler};
    use serde_json::{json, Value};

    #[derive(Clone)]
    pub struct Docs {
        pub tools: Arc<Mutex<Vec<Tool>>>,
        pub calls: Arc<AtomicUsize>,
    }

    pub fn tool(name: &str, description: &str, schema: Value, annotations: Value) -> Tool {
        serde_json::from_value(json!({
            "name": name, "description": description, "inputSchema": schema, "annotations": annotations,
        }))
        .unwrap()
    }

    impl ServerHandler for Docs {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
                .with_server_info(Implementation::new("docs-server", "1.0.0"))
        }

        async fn list_tools(
            &self,
            request: Option<PaginatedRequestParams>,
            _: RequestContext<RoleServer>,
        ) -> Result<ListToolsResult, ErrorData> {
            let tools = self.tools.lock().unwrap().clone();
            let at: usize = request
                .and_then(|r| r.cursor)
                .map_or(0, |c| c.parse().unwrap());
            let mut page =
                ListToolsResult::with_all_items(tools.get(at..=at).unwrap_or_default().to_vec());
            page.next_cursor = (at + 1 < tools.len()).then(|| (at + 1).to_string());
            Ok(page)
        }

        async fn call_tool(
            &self,
            request: CallToolRequestParams,
            _: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, ErrorData> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let args = request.arguments.unwrap_or_default();
            let result = match request.name.as_ref() {
                "add" => {
                    let sum = args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0);
                    CallToolResult::structured(json!({ "sum": sum }))
                }
                "delete_page" => {
                    CallToolResult::error(vec![ContentBlock::text("page is protected")])
                }
                other => CallToolResult::success(vec![ContentBlock::text(format!("{other} ran"))]),
            };
            Ok(result.into())
        }
    }

    /// Serves `docs` at `http://127.0.0.1:<port>/mcp`.
    pub async fn serve(docs: Docs) -> String {
        let service: StreamableHttpService<Docs, LocalSessionManager> = StreamableHttpService::new(
            move || Ok(docs.clone()),
            Default::default(),
            StreamableHttpServerConfig::default(),
        );
        let router = axum::Router::new().nest_service("/mcp", service);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        format!("http://{addr}/mcp")
    }
}

#[tokio::test]
async fn an_mcp_server_is_imported_invoked_and_reimported() {
    use mcp_upstream::{tool, Docs};

    let number = json!({"type": "number"});
    let add_schema =
        json!({"type": "object", "properties": {"a": number, "b": number}, "required": ["a", "b"]});
    let docs = Docs {
        tools: Arc::new(Mutex::new(vec![
            tool(
                "add",
                "Add two numbers and return their sum",
                add_schema.clone(),
                json!({"readOnlyHint": true}),
            ),
            tool(
                "search_docs",
                "Search the documentation",
                json!({"type": "object", "properties": {"q": {"type": "string"}}}),
                json!({"readOnlyHint": true}),
            ),
            tool(
                "delete_page",
                "Delete a wiki page",
                json!({"type": "object"}),
                json!({"destructiveHint": true}),
            ),
        ])),
        calls: Arc::new(AtomicUsize::new(0)),
    };
    let mcp_url = mcp_upstream::serve(docs.clone()).await;
    let port = mcp_url
        .split(':')
        .nth(2)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let node = start_with(false, move |c| {
        c.runners.allow = vec![format!("127.0.0.1:{port}")]
    })
    .await;
    let client = rowcall_client::node::NodeClient::new(&node.url).unwrap();

    // Import: one row per tool, across three pages of tools/list.
    let report = client
        .import_mcp(&mcp_url, Some("docs"), None, ADMIN)
        .await
        .unwrap();
    assert_eq!(report.server.as_deref(), Some("docs-server"));
    assert_eq!(report.tools, 3);
    assert_eq!(
        report.added,
        ["DOCS_ADD", "DOCS_SEARCH_DOCS", "DOCS_DELETE_PAGE"]
    );
    assert!(report.version.is_some());
    let (_, row) = get_json(&node, "/api/directory/DOCS_ADD", Some(ADMIN)).await;
    assert_eq!(row["type"], "mcp");
    assert_eq!(row["target"], format!("{mcp_url}#add"));
    assert_eq!(row["risk"], "read");
    assert_eq!(row["category"], "docs-server");
    assert_eq!(row["args_schema"], add_schema);
    let (_, row) = get_json(&node, "/api/directory/DOCS_DELETE_PAGE", None).await;
    assert_eq!(row["risk"], "destructive");

    // Ask finds it; invoke reaches the upstream and returns its structured result.
    let (_, ask) = get_json(&node, "/api/dispatch?ask=add+two+numbers", None).await;
    assert_eq!(ask["best"]["key"], "DOCS_ADD", "{ask}");
    let (status, answer) = invoke(&node, "DOCS_ADD", json!({"a": 2, "b": 3})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["result"]["structuredContent"]["sum"], 5.0);
    assert_eq!(docs.calls.load(Ordering::SeqCst), 1);
    let receipt = receipt_of(&node, &answer).await;
    assert_eq!(receipt["called"], format!("tools/call add at {mcp_url}"));
    assert_eq!(receipt["upstream_status"], "ok");

    // Wrong arguments never reach the upstream.
    let (status, answer) = invoke(&node, "DOCS_ADD", json!({"a": "two"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(docs.calls.load(Ordering::SeqCst), 1);

    // A tool error is a failed invocation that says so.
    let (status, answer) = invoke(&node, "DOCS_DELETE_PAGE", json!({})).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{answer}");
    assert_eq!(answer["error"]["code"], "upstream_tool_error");
    assert!(answer["error"]["message"]
        .as_str()
        .unwrap()
        .contains("page is protected"));
    assert_eq!(
        receipt_of(&node, &answer).await["upstream_status"],
        "is_error"
    );

    // The upstream changes: one tool goes, one changes, one comes.
    {
        let mut tools = docs.tools.lock().unwrap();
        tools.retain(|t| t.name != "delete_page");
        tools[0] = tool(
            "add",
            "Add two numbers (floating point)",
            add_schema.clone(),
            json!({"readOnlyHint": true}),
        );
        tools.push(tool(
            "list_pages",
            "List wiki pages",
            json!({"type": "object"}),
            json!({"readOnlyHint": true}),
        ));
    }
    let report = client
        .import_mcp(&mcp_url, Some("docs"), None, ADMIN)
        .await
        .unwrap();
    assert_eq!(report.added, ["DOCS_LIST_PAGES"]);
    assert_eq!(report.changed, ["DOCS_ADD"]);
    assert_eq!(report.removed, ["DOCS_DELETE_PAGE"]);
    assert_eq!(report.unchanged, 1);
    let (_, row) = get_json(&node, "/api/directory/DOCS_DELETE_PAGE", None).await;
    assert_eq!(row["enabled"], false);
    let (status, _) = invoke(&node, "DOCS_DELETE_PAGE", json!({})).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Nothing changed since: nothing is written.
    let report = client
        .import_mcp(&mcp_url, Some("docs"), None, ADMIN)
        .await
        .unwrap();
    assert!(report.added.is_empty() && report.changed.is_empty() && report.removed.is_empty());
    assert_eq!((report.unchanged, report.version), (3, None));
}
