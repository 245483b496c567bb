//! What a caller may spend, attacked (issue 30): each attack that walked around a limit or
//! let one address starve the node, and what it meets now. Every quota is the service
//! layer's, keyed on the parsed operation, so no spelling of a request (HEAD, a
//! percent-encoded parameter name) and no other front end (gRPC, MCP) spends a different
//! quota or none; streams and connections are capped per client under the node's caps.
//! Each test asserts the refusal and that nothing ran past it (receipts do not grow).
//! Quotas here are a minute's worth at most: refills take longer than any test runs.

use crate::common;

use std::net::IpAddr;
use std::time::Duration;

use common::{start_with, Fetch, TestNode, ADMIN};
use reqwest::StatusCode;
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ServiceExt};
use rowcall_proto::v1::directory_client::DirectoryClient;
use rowcall_proto::v1::dispatch_client::DispatchClient;
use rowcall_proto::v1::{watch_event, InvokeRequest, WatchRequest};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A failure bound: how long a test waits for what must happen, never a timing assertion.
const WITHIN: Duration = Duration::from_secs(30);
/// The other client, on another loopback address (Linux routes all of 127/8 to `lo`).
const OTHER: [u8; 4] = [127, 0, 0, 2];
const MCP_TOKEN: &str = "mcp-token-0123456789abcdef0123456789";

async fn receipts_of(node: &TestNode, key: &str) -> usize {
    let answer = node
        .http
        .get(format!("{}/api/receipts?key={key}&limit=1000", node.url))
        .bearer_auth(ADMIN)
        .fetch()
        .await;
    answer["receipts"].as_array().map_or(0, Vec::len)
}

async fn rate_limited(response: reqwest::Response) -> Value {
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(response.headers().contains_key("retry-after"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    body
}

/// An HTTP client whose connections come from `from`.
fn client_from(from: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::from(from))
        .build()
        .unwrap()
}

async fn grpc(node: &TestNode) -> tonic::transport::Channel {
    tonic::transport::Channel::from_shared(format!("http://{}", node.handle.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

#[tokio::test]
async fn head_and_percent_encoded_invokes_spend_the_invoke_quota() {
    let node = start_with(true, |c| c.limits.rate.per_address.invoke_per_minute = 1).await;
    let dispatch = format!("{}/api/dispatch", node.url);
    let ran = node
        .http
        .post(&dispatch)
        .json(&json!({"key": "TIME_NOW"}))
        .send()
        .await
        .unwrap();
    assert_eq!(ran.status(), StatusCode::OK);
    // The quota is spent: every spelling of an invocation is refused, and none runs.
    let head = node
        .http
        .head(format!("{dispatch}?invoke=TIME_NOW"))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), StatusCode::TOO_MANY_REQUESTS, "HEAD ran");
    rate_limited(
        node.http
            .get(format!("{dispatch}?%69nvoke=TIME_NOW"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    rate_limited(
        node.http
            .post(&dispatch)
            .json(&json!({"key": "TIME_NOW"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        receipts_of(&node, "TIME_NOW").await,
        1,
        "only the first ran"
    );
}

#[tokio::test]
async fn a_percent_encoded_ask_spends_the_ask_quota() {
    let node = start_with(true, |c| c.limits.rate.per_address.ask_per_minute = 1).await;
    let ask = |query: &str| {
        node.http
            .get(format!("{}/api/dispatch?{query}", node.url))
            .send()
    };
    let first = ask("ask=what+time+is+it").await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let body = rate_limited(ask("%61sk=what+time+is+it").await.unwrap()).await;
    assert!(
        body["error"]["message"].as_str().unwrap().contains("ask"),
        "{body}"
    );
    rate_limited(ask("ask=what+time+is+it").await.unwrap()).await;
}

#[tokio::test]
async fn grpc_invocations_spend_the_same_quota_as_http() {
    let node = start_with(true, |c| c.limits.rate.per_address.invoke_per_minute = 1).await;
    let mut dispatch = DispatchClient::new(grpc(&node).await);
    let invoke = || InvokeRequest {
        key: "TIME_NOW".into(),
        ..Default::default()
    };
    dispatch.invoke(invoke()).await.expect("the first runs");
    for _ in 0..20 {
        let refused = dispatch.invoke(invoke()).await.unwrap_err();
        assert_eq!(
            refused.code(),
            tonic::Code::ResourceExhausted,
            "{refused:?}"
        );
    }
    // One quota for the address over both front ends.
    rate_limited(
        node.http
            .post(format!("{}/api/dispatch", node.url))
            .json(&json!({"key": "TIME_NOW"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        receipts_of(&node, "TIME_NOW").await,
        1,
        "only the first ran"
    );
}

#[derive(Clone, Default)]
struct Quiet;

impl ClientHandler for Quiet {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default()
    }
}

#[tokio::test]
async fn mcp_tool_calls_spend_the_invoke_quota() {
    let node = start_with(true, |c| {
        c.auth.mcp_tokens.insert("agent".into(), MCP_TOKEN.into());
        c.limits.rate.per_credential.invoke_per_minute = 1;
    })
    .await;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("{}/api/mcp", node.url))
            .auth_header(MCP_TOKEN),
    );
    let client = Quiet.serve(transport).await.expect("initialize");
    let ran = client
        .call_tool(CallToolRequestParams::new("TIME_NOW"))
        .await
        .unwrap();
    assert_eq!(ran.is_error, Some(false));
    let refused = client
        .call_tool(CallToolRequestParams::new("TIME_NOW"))
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true));
    let body = refused.structured_content.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    // Listing tools is no invocation: the session still works.
    client.list_tools(None).await.expect("tools/list");
    assert_eq!(
        receipts_of(&node, "TIME_NOW").await,
        1,
        "only the first ran"
    );
    let _ = client.cancel().await;
}

#[tokio::test]
async fn one_address_cannot_take_every_feed_and_watch_slot() {
    let node = start_with(true, |c| {
        c.limits.max_feed_subscribers = 4;
        c.limits.max_feed_subscribers_per_client = 2;
    })
    .await;
    let changes = format!("{}/api/directory/changes", node.url);
    let mine = client_from([127, 0, 0, 1]);
    let mut held = Vec::new();
    for _ in 0..2 {
        let feed = mine.get(&changes).send().await.unwrap();
        assert_eq!(feed.status(), StatusCode::OK);
        held.push(feed);
    }
    // Its share is taken: another feed, or a gRPC Watch, from the same address is refused.
    let third = mine.get(&changes).send().await.unwrap();
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = third.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_streams", "{body}");
    let mut directory = DirectoryClient::new(grpc(&node).await);
    let watch = directory.watch(WatchRequest::default()).await.unwrap_err();
    assert_eq!(watch.code(), tonic::Code::ResourceExhausted, "{watch:?}");
    // Another client still subscribes, over either front end.
    let other = client_from(OTHER).get(&changes).send().await.unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{}", node.handle.grpc_addr))
            .unwrap()
            .local_address(Some(IpAddr::from(OTHER)))
            .connect()
            .await
            .unwrap();
    let mut theirs = DirectoryClient::new(channel);
    let _stream = theirs
        .watch(WatchRequest::default())
        .await
        .expect("another client watches");
    // A closed feed gives its slot back.
    held.pop();
    common::cluster::eventually(WITHIN, "the closed feed's slot is free", || async {
        mine.get(&changes).send().await.unwrap().status() == StatusCode::OK
    })
    .await;
}

#[tokio::test]
async fn a_partial_header_flood_from_one_address_leaves_others_answered() {
    let node = start_with(true, |c| {
        c.limits.max_connections = 64;
        c.limits.max_connections_per_client = 16;
        // Long enough that the flood's sockets hang for the whole test.
        c.limits.header_read_timeout_ms = 120_000;
    })
    .await;
    let addr = node.handle.http_addr;
    let mut flood = Vec::new();
    for _ in 0..200 {
        let mut socket = TcpStream::connect(addr).await.unwrap();
        // A refused socket may be closed before the write lands: that is the point.
        let _ = socket
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await;
        flood.push(socket);
    }
    // Another address is answered, on a new connection.
    let health = client_from(OTHER)
        .get(format!("{}/healthz", node.url))
        .send()
        .await
        .expect("another address is answered");
    assert_eq!(health.status(), StatusCode::OK);
    // The flooding address gets no more connections: the next one is closed unread.
    let mut more = TcpStream::connect(addr).await.unwrap();
    let _ = more
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(WITHIN, more.read_to_end(&mut answer)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "a connection past the address's share was served: {:?}",
        String::from_utf8_lossy(&answer)
    );
    drop(flood);
}

/// Reads one HTTP/2 frame: (type, flags, payload); `None` at EOF.
async fn frame(socket: &mut TcpStream) -> Option<(u8, u8, Vec<u8>)> {
    let mut head = [0u8; 9];
    socket.read_exact(&mut head).await.ok()?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut payload = vec![0u8; len];
    socket.read_exact(&mut payload).await.ok()?;
    Some((head[3], head[4], payload))
}

/// Opens HTTP/2 on `socket` (the client preface and empty SETTINGS), then behaves as a live
/// client that sends nothing: acknowledges SETTINGS and answers every PING. Returns
/// whether the server sent GOAWAY, once it closes the connection.
async fn idle_http2_client(socket: &mut TcpStream) -> bool {
    socket
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    let mut goaway = false;
    while let Some((kind, flags, payload)) = frame(socket).await {
        match (kind, flags & 1) {
            // SETTINGS: acknowledged.
            (4, 0) => socket
                .write_all(b"\x00\x00\x00\x04\x01\x00\x00\x00\x00")
                .await
                .unwrap(),
            // PING: answered.
            (6, 0) => {
                let mut ack = vec![0, 0, 8, 6, 1, 0, 0, 0, 0];
                ack.extend_from_slice(&payload);
                socket.write_all(&ack).await.unwrap();
            }
            (7, _) => goaway = true,
            _ => {}
        }
    }
    goaway
}

#[tokio::test]
async fn an_idle_http2_connection_is_closed() {
    let node = start_with(true, |c| c.limits.idle_timeout_ms = 300).await;
    let mut socket = TcpStream::connect(node.handle.http_addr).await.unwrap();
    let closed = tokio::time::timeout(WITHIN, idle_http2_client(&mut socket)).await;
    assert!(closed.is_ok(), "an idle HTTP/2 connection was left open");
    assert!(closed.unwrap(), "closed without GOAWAY");
    // The node still serves new connections.
    let health = reqwest::get(format!("{}/healthz", node.url)).await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
}

#[tokio::test]
async fn an_idle_grpc_connection_is_closed_and_an_open_watch_keeps_its_own() {
    let node = start_with(true, |c| c.limits.grpc.idle_timeout_ms = 300).await;
    // A connection that speaks HTTP/2 and answers pings but never makes a call. (The
    // keepalive pings it answers would keep it open for ever; the sniff of the first byte
    // closes only one that sends nothing at all.)
    let mut socket = TcpStream::connect(node.handle.grpc_addr).await.unwrap();
    let closed = tokio::time::timeout(WITHIN, idle_http2_client(&mut socket)).await;
    assert!(closed.is_ok(), "an idle gRPC connection was left open");
    // A connection with an open Watch stream is not idle: it outlives many idle periods
    // and still delivers the next change.
    let mut directory = DirectoryClient::new(grpc(&node).await);
    let mut watch = directory
        .watch(WatchRequest::default())
        .await
        .expect("watch opens")
        .into_inner();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let row = json!({"key": "IDLE_PROBE", "type": "http", "auth": "public",
        "target": "GET https://internal.example/probe",
        "content": "# WHAT: Probe of an idle connection\n"});
    let put = node
        .http
        .post(format!("{}/api/directory", node.url))
        .bearer_auth(ADMIN)
        .json(&row)
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success(), "{}", put.status());
    let event = tokio::time::timeout(WITHIN, async {
        loop {
            let event = watch.message().await.expect("the watch stream stays open");
            let event = event.expect("the watch stream did not end");
            if let Some(watch_event::Event::Change(change)) = event.event {
                if change.key == "IDLE_PROBE" {
                    return change;
                }
            }
        }
    })
    .await
    .expect("the change arrives on the open watch");
    assert!(event.row.is_some(), "{event:?}");
    // Once the stream is closed, its connection is idle, and a new call still works: the
    // client reconnects.
    drop(watch);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let mut dispatch = DispatchClient::new(grpc(&node).await);
    let answer = dispatch
        .invoke(InvokeRequest {
            key: "TIME_NOW".into(),
            ..Default::default()
        })
        .await;
    assert!(answer.is_ok(), "{answer:?}");
}

#[tokio::test]
async fn the_admin_key_is_not_rate_limited() {
    let node = start_with(true, |c| {
        c.limits.rate.per_address.invoke_per_minute = 1;
        c.limits.rate.per_credential.invoke_per_minute = 1;
    })
    .await;
    for _ in 0..5 {
        let ran = node
            .http
            .post(format!("{}/api/dispatch", node.url))
            .bearer_auth(ADMIN)
            .json(&json!({"key": "TIME_NOW"}))
            .send()
            .await
            .unwrap();
        assert_eq!(ran.status(), StatusCode::OK);
    }
    assert_eq!(receipts_of(&node, "TIME_NOW").await, 5);
}
