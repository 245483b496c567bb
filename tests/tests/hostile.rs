//! A hostile network and hostile input against one node (issue 11, "must hold"): slow
//! headers, floods from one address, made-up methods, GET links to rows that change things,
//! oversized and malformed requests. Each is answered with its status, nothing it should not
//! write is written, the node keeps answering, and memory stays bounded (the test process's
//! RSS, which holds the in-process node, is measured).

use crate::common;

use std::time::{Duration, Instant};

use common::{start_with, Fetch, TestNode, ADMIN, INVOKE};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Resident memory of this process, in bytes (Linux).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// How much RSS may grow while a test throws its inputs at a node.
const RSS_BOUND: u64 = 256 * 1024 * 1024;

async fn put(node: &TestNode, row: Value) {
    let response = node
        .http
        .post(format!("{}/api/directory", node.url))
        .header("x-terminal-key", ADMIN)
        .json(&row)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
}

async fn healthy(node: &TestNode) {
    // A new connection: a pooled one may have been closed as idle by the node meanwhile
    // (an idle keep-alive connection gets the header timeout too), and a request racing
    // that close fails on the client's side without saying anything about the node.
    let health = reqwest::get(format!("{}/healthz", node.url))
        .await
        .expect("the node answers");
    assert_eq!(health.status(), 200);
}

async fn receipts_of(node: &TestNode, key: &str) -> Vec<Value> {
    let answer = node
        .http
        .get(format!("{}/api/receipts?key={key}&limit=1000", node.url))
        .bearer_auth(ADMIN)
        .fetch()
        .await;
    answer["receipts"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn slow_headers_are_cut_off_and_the_node_keeps_answering() {
    let node = start_with(true, |c| c.limits.header_read_timeout_ms = 1_000).await;
    let before = rss_bytes();
    let mut sockets = Vec::new();
    for _ in 0..2_000 {
        let mut socket = tokio::net::TcpStream::connect(node.handle.http_addr)
            .await
            .unwrap();
        socket
            .write_all(b"GET /api/dispatch?ask=time HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await
            .unwrap();
        sockets.push(socket);
    }
    // While they hang, real clients are served: from another address, since one address
    // holds at most `max_connections_per_client` of them (the rest are closed at once).
    let other = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let answer = other
        .get(format!("{}/api/dispatch?ask=what+time+is+it", node.url))
        .fetch()
        .await;
    assert_eq!(answer["best"]["key"], "TIME_NOW", "{answer}");
    // Every slow socket is closed by the node (EOF or reset); the bound only keeps a broken
    // node from hanging the test.
    let deadline = Instant::now() + Duration::from_secs(60);
    for socket in &mut sockets {
        let mut byte = [0u8; 512];
        let left = deadline.saturating_duration_since(Instant::now());
        let closed = loop {
            match tokio::time::timeout(left, socket.read(&mut byte)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break true,
                // A 408 may come first; the close follows.
                Ok(Ok(_)) => continue,
                Err(_) => break false,
            }
        };
        assert!(closed, "a socket with partial headers was left open");
    }
    drop(sockets);
    healthy(&node).await;
    let grown = rss_bytes().saturating_sub(before);
    assert!(grown < RSS_BOUND, "RSS grew by {grown} bytes");
}

#[tokio::test]
async fn a_flood_of_anonymous_invocations_gets_429_after_the_quota() {
    let quota = 60;
    let node = start_with(true, |c| {
        c.limits.rate.per_address.invoke_per_minute = quota
    })
    .await;
    let url = format!("{}/api/dispatch", node.url);
    let started = Instant::now();
    let (mut ok, mut limited) = (0u64, 0u64);
    for _ in 0..10_000 {
        let response = node
            .http
            .post(&url)
            .json(&json!({"key": "TIME_NOW"}))
            .send()
            .await
            .unwrap();
        match response.status() {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                let retry: u64 = response.headers()["retry-after"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!(retry >= 1);
                if limited == 0 {
                    let body: Value = response.json().await.unwrap();
                    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
                }
                limited += 1;
            }
            other => panic!("unexpected {other}"),
        }
    }
    // The quota, plus what refilled while the flood ran (one a second at 60 a minute).
    let refilled = started.elapsed().as_secs() + 1;
    assert!(ok >= quota as u64, "only {ok} allowed");
    assert!(
        ok <= quota as u64 + refilled,
        "{ok} allowed in {refilled} s"
    );
    assert_eq!(ok + limited, 10_000);
    // Only what ran left a receipt; an invoke key has its own quota.
    assert_eq!(receipts_of(&node, "TIME_NOW").await.len() as u64, ok);
    let keyed = node
        .http
        .post(&url)
        .bearer_auth(INVOKE)
        .json(&json!({"key": "TIME_NOW"}))
        .send()
        .await
        .unwrap();
    assert_eq!(keyed.status(), StatusCode::OK);
}

#[tokio::test]
async fn made_up_methods_add_no_metric_series() {
    let node = start_with(true, |_| {}).await;
    // The series a method outside HTTP's own could add (other tests of this process share
    // the recorder, so series of known methods may come and go meanwhile).
    const KNOWN: [&str; 9] = [
        "GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "CONNECT", "TRACE",
    ];
    let series = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("rowcall_http_requests_total{"))
            .map(|l| l.rsplit_once(' ').map_or(l, |(s, _)| s).to_owned())
            .filter(|s| !KNOWN.iter().any(|m| s.contains(&format!("method=\"{m}\""))))
            .collect()
    };
    let metrics = || async {
        node.http
            .get(format!("{}/metrics", node.url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    // One made-up method first, so its series (`other`) exists before the count.
    let send = |i: u32| {
        let method = Method::from_bytes(format!("X{i:04}M").as_bytes()).unwrap();
        node.http
            .request(method, format!("{}/api/dispatch", node.url))
            .send()
    };
    send(0).await.unwrap();
    let before = series(&metrics().await);
    for i in 1..1_000 {
        let response = send(i).await.unwrap();
        assert!(response.status().is_client_error(), "{}", response.status());
    }
    let after = series(&metrics().await);
    let added: Vec<&String> = after.iter().filter(|s| !before.contains(s)).collect();
    assert!(added.is_empty(), "new series: {added:?}");
    assert!(
        after.iter().all(|s| !s.contains("X0")),
        "a made-up method became a label"
    );
}

#[tokio::test]
async fn get_links_run_only_rows_that_change_nothing() {
    let node = start_with(true, |_| {}).await;
    put(
        &node,
        json!({"key": "DROP_ALL", "type": "static", "auth": "public", "risk": "destructive",
               "content": "# WHAT: drop every table\n\ndropped"}),
    )
    .await;
    let response = node
        .http
        .get(format!("{}/api/dispatch?invoke=DROP_ALL", node.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(response.headers()["allow"], "POST");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "post_only", "{body}");
    assert!(receipts_of(&node, "DROP_ALL").await.is_empty());
    // No link is offered for it, and POST runs it.
    let ask = node
        .http
        .get(format!("{}/api/dispatch?ask=drop+every+table", node.url))
        .fetch()
        .await;
    assert_eq!(ask["best"]["key"], "DROP_ALL", "{ask}");
    assert!(ask["best"].get("run_now").is_none(), "{ask}");
    let contract = node
        .http
        .get(format!("{}/api/dispatch?key=DROP_ALL", node.url))
        .fetch()
        .await;
    assert!(contract.get("run_now").is_none(), "{contract}");
    let run = node
        .http
        .post(format!("{}/api/dispatch", node.url))
        .json(&json!({"key": "DROP_ALL"}))
        .send()
        .await
        .unwrap();
    assert_eq!(run.status(), StatusCode::OK);
    assert_eq!(receipts_of(&node, "DROP_ALL").await.len(), 1);
}

#[tokio::test]
async fn hostile_inputs_are_each_answered_and_memory_stays_bounded() {
    let node = start_with(true, |_| {}).await;
    let before = rss_bytes();
    let dispatch = format!("{}/api/dispatch", node.url);
    let directory = format!("{}/api/directory", node.url);

    // 10 MB bodies: refused from the declared length, and when streamed without one.
    let big = vec![b'['; 10 * 1024 * 1024];
    for url in [&dispatch, &directory] {
        let r = node
            .http
            .post(url)
            .header("x-terminal-key", ADMIN)
            .header("content-type", "application/json")
            .body(big.clone())
            .send()
            .await;
        // The node may answer 413 and close before the whole body is sent.
        if let Ok(r) = r {
            assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
        }
    }
    // Bounded only so that a node that stops reading without answering fails the test.
    let upload = chunked_upload(&node, 10 * 1024 * 1024);
    let answer = tokio::time::timeout(Duration::from_secs(60), upload).await;
    assert_eq!(answer.as_deref(), Ok("413"));
    healthy(&node).await;

    // Deeply nested JSON, invalid UTF-8, in bodies and queries.
    // The nesting sits in `args` (any JSON), so that it reaches the parser's depth limit
    // rather than a type mismatch at the first bracket.
    let deep = format!(
        r#"{{"key": "TIME_NOW", "args": {{"a": {}{}}}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    for body in [deep.into_bytes(), vec![b'{', b'"', 0xff, 0xfe, b'"', b'}']] {
        let r = node
            .http
            .post(&dispatch)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    }
    let status = status_of(&node, format!("{dispatch}?ask=%FF%FE%FD")).await;
    assert!(status.is_client_error(), "{status}");

    // A header flood and one enormous header.
    let mut flood = node.http.get(format!("{dispatch}?ask=time"));
    for i in 0..500 {
        flood = flood.header(format!("x-flood-{i}"), "y");
    }
    let r = flood.send().await.unwrap();
    assert_eq!(r.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    let r = node
        .http
        .get(format!("{dispatch}?ask=time"))
        .header("x-big", "y".repeat(1024 * 1024))
        .send()
        .await;
    if let Ok(r) = r {
        assert!(r.status().is_client_error(), "{}", r.status());
    }

    // An ask of 100,000 terms (over a raw socket: no client library builds such a URL), and
    // asks at and past the 1 KiB cap.
    let terms = vec!["word"; 100_000].join("+");
    let head = format!("GET /api/dispatch?ask={terms} HTTP/1.1\r\nHost: x\r\n\r\n");
    let status = raw_status(&node, head.as_bytes()).await;
    assert!(status.starts_with('4'), "{status}");
    let at_cap = "a".repeat(1024);
    let status = status_of(&node, format!("{dispatch}?ask={at_cap}")).await;
    assert_eq!(status, StatusCode::OK);
    let past_cap = "a".repeat(1025);
    let status = status_of(&node, format!("{dispatch}?ask={past_cap}")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // A read-your-writes index no write ever had: the caller's error, not the node's lag.
    let status = status_of(&node, format!("{directory}?min_index=9223372036854775808")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // Keys and content at and past their limits.
    let key_at = "K".repeat(64);
    let key_past = "K".repeat(65);
    for (key, content_len, expected) in [
        (key_at.as_str(), 64 * 1024, StatusCode::CREATED),
        (key_past.as_str(), 1, StatusCode::UNPROCESSABLE_ENTITY),
        (
            "BIG_CONTENT",
            64 * 1024 + 1,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ] {
        let r = node
            .http
            .post(&directory)
            .header("x-terminal-key", ADMIN)
            .json(&json!({"key": key, "type": "static", "content": "x".repeat(content_len)}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), expected, "{key}");
    }
    // Arguments past a schema's limits, and a huge argument object.
    let huge_args: serde_json::Map<String, Value> =
        (0..50_000).map(|i| (format!("a{i}"), json!(i))).collect();
    let r = node
        .http
        .post(&dispatch)
        .json(&json!({"key": "TIME_NOW", "args": huge_args}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success() || r.status().is_client_error());

    healthy(&node).await;
    let grown = rss_bytes().saturating_sub(before);
    assert!(grown < RSS_BOUND, "RSS grew by {grown} bytes");
}

/// The status of a GET of `url`.
async fn status_of(node: &TestNode, url: String) -> StatusCode {
    node.http.get(url).send().await.unwrap().status()
}

/// Sends `request` as it is over a raw socket; the status code of the answer.
async fn raw_status(node: &TestNode, request: &[u8]) -> String {
    let mut socket = tokio::net::TcpStream::connect(node.handle.http_addr)
        .await
        .unwrap();
    // The node may answer and close before it has read all of it.
    let _ = socket.write_all(request).await;
    let mut answer = vec![0u8; 64];
    let n = socket.read(&mut answer).await.unwrap_or(0);
    let text = String::from_utf8_lossy(&answer[..n]);
    text.split(' ').nth(1).unwrap_or("no answer").to_owned()
}

/// POSTs `len` bytes with no declared length (chunked) over a raw socket, stopping when
/// the node stops reading; returns the status code of the answer.
async fn chunked_upload(node: &TestNode, len: usize) -> String {
    let mut socket = tokio::net::TcpStream::connect(node.handle.http_addr)
        .await
        .unwrap();
    let head = "POST /api/dispatch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                Transfer-Encoding: chunked\r\n\r\n";
    socket.write_all(head.as_bytes()).await.unwrap();
    let chunk = 64 * 1024;
    let frame = [
        format!("{chunk:x}\r\n").into_bytes(),
        vec![b'['; chunk],
        b"\r\n".to_vec(),
    ]
    .concat();
    for _ in 0..len / chunk {
        if socket.write_all(&frame).await.is_err() {
            break;
        }
    }
    let _ = socket.write_all(b"0\r\n\r\n").await;
    let mut answer = Vec::new();
    let _ = socket.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer);
    text.split(' ').nth(1).unwrap_or("no answer").to_owned()
}

#[tokio::test]
async fn strangers_see_no_targets_hidden_rows_or_peer_addresses() {
    let node = start_with(true, |_| {}).await;
    put(
        &node,
        json!({"key": "INTERNAL_ONLY", "type": "http", "target": "GET https://internal.example/x",
               "planner_visible": false, "auth": "key", "content": "# WHAT: internal thing\n"}),
    )
    .await;
    let anonymous = node
        .http
        .get(format!("{}/api/directory?limit=1000", node.url))
        .fetch()
        .await;
    let rows = anonymous["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    assert!(
        rows.iter().all(|r| r.get("target").is_none()),
        "{anonymous}"
    );
    assert!(rows.iter().all(|r| r["key"] != "INTERNAL_ONLY"));
    let hidden = node
        .http
        .get(format!("{}/api/directory/INTERNAL_ONLY", node.url))
        .send()
        .await
        .unwrap();
    assert_eq!(hidden.status(), StatusCode::NOT_FOUND);
    let admin = node
        .http
        .get(format!("{}/api/directory/INTERNAL_ONLY", node.url))
        .bearer_auth(ADMIN)
        .fetch()
        .await;
    assert_eq!(admin["target"], "GET https://internal.example/x");

    let cluster = node
        .http
        .get(format!("{}/api/cluster", node.url))
        .fetch()
        .await;
    let members = cluster["members"].as_array().unwrap();
    assert!(
        members.iter().all(|m| m.get("grpc_addr").is_none()),
        "{cluster}"
    );
    let cluster = node
        .http
        .get(format!("{}/api/cluster", node.url))
        .bearer_auth(ADMIN)
        .fetch()
        .await;
    assert!(cluster["members"][0]["grpc_addr"].is_string(), "{cluster}");

    // A failed upstream call tells a stranger only that it failed; the receipt has why.
    put(
        &node,
        json!({"key": "PRIVATE_UPSTREAM", "type": "http", "auth": "public",
               "target": "GET http://127.0.0.1:9/secret-path", "content": "# WHAT: x\n"}),
    )
    .await;
    let failed = node
        .http
        .post(format!("{}/api/dispatch", node.url))
        .json(&json!({"key": "PRIVATE_UPSTREAM"}))
        .fetch()
        .await;
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(!message.contains("127.0.0.1"), "{failed}");
    let receipts = receipts_of(&node, "PRIVATE_UPSTREAM").await;
    assert!(receipts[0]["error"].as_str().unwrap().contains("127.0.0.1"));
}

/// Mints a share token for `CLOSE_TICKET`; every answer carrying one must not be cached.
async fn mint(node: &TestNode) -> Value {
    let response = node
        .http
        .post(format!("{}/api/share", node.url))
        .bearer_auth(ADMIN)
        .json(&json!({"key": "CLOSE_TICKET"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["cache-control"], "no-store, private");
    response.json().await.unwrap()
}

/// Invokes `CLOSE_TICKET` with a share token in the header; the status of the answer.
async fn invoke(node: &TestNode, token: String) -> StatusCode {
    node.http
        .post(format!("{}/api/dispatch", node.url))
        .header("x-rowcall-share", token)
        .json(&json!({"key": "CLOSE_TICKET"}))
        .send()
        .await
        .unwrap()
        .status()
}

/// Rotates the share key, keeping the previous one or not.
async fn rotate(node: &TestNode, keep_previous: bool) -> Value {
    node.http
        .post(format!("{}/api/share/rotate", node.url))
        .bearer_auth(ADMIN)
        .json(&json!({"keep_previous": keep_previous}))
        .fetch()
        .await
}

#[tokio::test]
async fn share_tokens_travel_in_a_header_are_not_cached_and_rotate() {
    let node = start_with(true, |_| {}).await;
    put(
        &node,
        json!({"key": "CLOSE_TICKET", "type": "static", "auth": "key", "risk": "write",
               "content": "# WHAT: close a ticket\n\nclosed"}),
    )
    .await;
    let minted = mint(&node).await;
    // A write row: no GET link, the token goes in the header of a POST.
    assert!(minted["run_now"].is_null(), "{minted}");
    let token = minted["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("st2."), "{token}");
    assert_eq!(invoke(&node, token.clone()).await, StatusCode::OK);

    // A planned rotation keeps the old key; a second one (or an emergency one) retires it.
    let rotated = rotate(&node, true).await;
    assert_eq!(rotated["ok"], true, "{rotated}");
    assert_eq!(invoke(&node, token.clone()).await, StatusCode::OK);
    let fresh = mint(&node).await["token"].as_str().unwrap().to_owned();
    rotate(&node, false).await;
    assert_eq!(invoke(&node, token).await, StatusCode::UNAUTHORIZED);
    assert_eq!(invoke(&node, fresh).await, StatusCode::UNAUTHORIZED);
    assert_eq!(
        invoke(
            &node,
            mint(&node).await["token"].as_str().unwrap().to_owned()
        )
        .await,
        StatusCode::OK
    );

    // An ask whose answer carries a token is not to be cached.
    put(
        &node,
        json!({"key": "READ_TICKET", "type": "static", "auth": "key",
               "content": "# WHAT: read a ticket\n\nticket"}),
    )
    .await;
    let response = node
        .http
        .get(format!("{}/api/dispatch?ask=read+a+ticket", node.url))
        .bearer_auth(INVOKE)
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["cache-control"], "no-store, private");
    let ask: Value = response.json().await.unwrap();
    assert!(ask["best"]["run_now"]
        .as_str()
        .unwrap()
        .contains("&share=st2."));
}

#[tokio::test]
async fn weak_keys_are_refused_with_a_clear_message_and_the_data_folder_is_private() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = rowcall_node::Config::default();
    let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    config.node.http = any;
    config.node.grpc = any;
    config.node.data = dir.path().join("data");
    config.auth.admin_key = Some("change-me".into());
    let err = match rowcall_node::start(config.clone()).await {
        Ok(_) => panic!("a weak admin key was accepted"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("at least 32"), "{err}");
    assert!(!err.contains("change-me"), "{err}");

    config.auth.admin_key = None;
    let node = rowcall_node::start(config.clone()).await.unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&config.node.data)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    // The generated key works, and the node's configuration no longer holds it.
    let key = std::fs::read_to_string(config.node.data.join("admin.key")).unwrap();
    assert!(node.app.credentials.identify(key.trim()).is_some());
    assert!(!format!("{:?}", node.app.config).contains(key.trim()));
    node.shutdown().await;
}

#[tokio::test]
async fn receipts_beyond_the_retention_policy_are_dropped_on_every_run() {
    let node = start_with(true, |c| {
        c.receipts.keep_per_key = 2;
        c.receipts.prune_every_secs = 3_600;
    })
    .await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        let answer = node
            .http
            .post(format!("{}/api/dispatch", node.url))
            .json(&json!({"key": "TIME_NOW"}))
            .fetch()
            .await;
        ids.push(
            answer["proof"]["invocation_id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let dropped = rowcall_node::dispatch::retention::run_once(&node.handle.app).await;
    assert_eq!(dropped, 3);
    let kept: Vec<String> = receipts_of(&node, "TIME_NOW")
        .await
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kept, [ids[4].clone(), ids[3].clone()]);
    let confirm = node
        .http
        .get(format!("{}/api/dispatch?confirm={}", node.url, ids[0]))
        .send()
        .await
        .unwrap();
    assert_eq!(confirm.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        rowcall_node::dispatch::retention::run_once(&node.handle.app).await,
        0
    );
}

/// A connection that never sends a request does not keep the node (and its database) alive
/// past `shutdown`: the same data folder opens again at once.
#[tokio::test]
async fn a_silent_connection_does_not_outlive_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = rowcall_node::Config::default();
    let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    config.node.http = any;
    config.node.grpc = any;
    config.node.data = dir.path().join("data");
    config.auth.admin_key = Some(ADMIN.into());
    // Longer than the shutdown's drain period, so only the stop signal can end the wait.
    config.limits.header_read_timeout_ms = 60_000;
    let node = rowcall_node::start(config.clone()).await.unwrap();
    let silent = tokio::net::TcpStream::connect(node.http_addr)
        .await
        .unwrap();
    // Connections are accepted in order: once a later one is answered, the silent one is
    // open on the node's side.
    let health = reqwest::get(format!("{}/healthz", node.url()))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    node.shutdown().await;
    // Raft's last task may hold the database a moment after shutdown returns: that alone is
    // waited out, for far less than the 60 s the silent connection would hold it.
    let again = crate::common::start_once_unlocked(config, Default::default())
        .await
        .expect("the data folder opens again after shutdown");
    again.shutdown().await;
    drop(silent);
}
