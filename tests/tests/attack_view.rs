//! An attacker reading what it should not (issue 30): what a caller without the admin key
//! may see is ONE list ([`MAY_SEE`]), checked on every transport — HTTP, gRPC through
//! `rowcall_proto`'s generated clients, and MCP (`tools/list`, and the compact `search` and
//! `contract` tools). What must hold: a hidden row (`planner_visible: false`) is neither
//! listed, read, suggested nor projected, and its contract goes only to a credential that may
//! run it; no row's `target` (which may carry a `?token=`), no cluster id, no incarnation
//! and no member address reaches anyone but the admin, by answer, change feed or leader
//! hint; a share-token holder is not told why an upstream failed. And MCP sessions belong to
//! the credential that opened them: another credential can neither resume their streams by
//! event id nor end them (404, as for a session that does not exist), and nothing changes.
//! Every attack leaves the directory as it was.

use crate::common;

use std::time::Duration;

use common::cluster::Cluster;
use common::{start_with, Fetch, TestNode, ADMIN, INVOKE};
use futures_util::StreamExt as _;
use reqwest::StatusCode;
use rowcall_proto::v1::cluster_client::ClusterClient;
use rowcall_proto::v1::directory_client::DirectoryClient;
use rowcall_proto::v1::dispatch_client::DispatchClient;
use rowcall_proto::v1::{
    watch_event, AskRequest, ContractRequest, GetRowRequest, ListRowsRequest, StatusRequest,
    WatchRequest,
};
use serde_json::{json, Value};
use tonic::transport::Channel;

/// A row anyone may find; its target carries a secret all the same.
const VISIBLE: &str = "ATTACK_VISIBLE";
/// A hidden row: invocable by key, never suggested, listed or projected.
const HIDDEN: &str = "ATTACK_HIDDEN";
/// Secrets in the rows' targets: only the admin may ever see them.
const VISIBLE_SECRET: &str = "visible-target-secret";
const HIDDEN_SECRET: &str = "hidden-target-secret";
/// An ask that finds the visible row (and would find the hidden one, were it suggestible).
const ASK: &str = "zebra quartz lookup";
/// Two MCP credentials.
const TOKEN_A: &str = "attack-mcp-token-a-0123456789abcdef01";
const TOKEN_B: &str = "attack-mcp-token-b-0123456789abcdef01";
/// How long one awaited event may take.
const WITHIN: Duration = Duration::from_secs(10);

/// Who looks (never the admin key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    /// No credential at all.
    Stranger,
    /// A share token for the hidden row (HTTP only: the other transports take none).
    Share,
    /// A credential that may run key-auth rows there: an invoke key (HTTP, gRPC), an MCP
    /// token (MCP).
    Holder,
}

/// Something a caller might learn about a row.
#[derive(Debug, Clone, Copy)]
enum Thing {
    /// It is in the listing (`GET /api/directory`, `List`, rows-mode `tools/list`).
    Listed(&'static str),
    /// It can be read by key (`GET /api/directory/{key}`, `Get`).
    Read(&'static str),
    /// An ask offers it (`?ask=`, `Ask`, the compact `search` tool).
    Suggested(&'static str),
    /// Its contract is given (`?key=`, `Contract`, the compact `contract` tool).
    Contract(&'static str),
}

impl Thing {
    /// The row it is about.
    fn key(self) -> &'static str {
        match self {
            Self::Listed(key) | Self::Read(key) | Self::Suggested(key) | Self::Contract(key) => key,
        }
    }
}

/// What a caller without the admin key may see: (thing, stranger, share token for
/// [`HIDDEN`], credential holder). The same list holds on every transport.
const MAY_SEE: &[(Thing, bool, bool, bool)] = &[
    (Thing::Listed(VISIBLE), true, true, true),
    (Thing::Listed(HIDDEN), false, false, false),
    (Thing::Read(VISIBLE), true, true, true),
    (Thing::Read(HIDDEN), false, false, false),
    (Thing::Suggested(VISIBLE), true, true, true),
    (Thing::Suggested(HIDDEN), false, false, false),
    (Thing::Contract(VISIBLE), true, true, true),
    (Thing::Contract(HIDDEN), false, true, true),
];

fn may_see(who: Who, stranger: bool, share: bool, holder: bool) -> bool {
    match who {
        Who::Stranger => stranger,
        Who::Share => share,
        Who::Holder => holder,
    }
}

fn rows() -> Value {
    json!([
        {"key": VISIBLE, "type": "http", "auth": "public", "category": "attack",
         "target": format!("GET https://internal.example/v?token={VISIBLE_SECRET}"),
         "content": "# WHAT: Zebra quartz lookup of the visible kind\n"},
        {"key": HIDDEN, "type": "http", "auth": "key", "category": "attack",
         "planner_visible": false,
         "target": format!("GET https://internal.example/h?token={HIDDEN_SECRET}"),
         "content": "# WHAT: Zebra quartz lookup of the hidden kind\n"},
    ])
}

async fn node() -> TestNode {
    let node = start_with(false, |config| {
        config
            .auth
            .mcp_tokens
            .insert("agent-a".into(), TOKEN_A.into());
        config
            .auth
            .mcp_tokens
            .insert("agent-b".into(), TOKEN_B.into());
        config.mcp.test_tools = true;
    })
    .await;
    let written = node
        .http
        .post(format!("{}/api/directory", node.url))
        .bearer_auth(ADMIN)
        .json(&rows())
        .send()
        .await
        .unwrap();
    assert_eq!(written.status(), 200);
    node
}

/// What only the admin may learn of this node: the targets' secrets, the cluster id, the
/// incarnation, the gRPC address.
fn secrets(node: &TestNode) -> Vec<String> {
    let identity = node.handle.app.identity.get();
    let mut secrets = vec![
        VISIBLE_SECRET.to_owned(),
        HIDDEN_SECRET.to_owned(),
        identity.incarnation,
        node.handle.grpc_addr.to_string(),
    ];
    secrets.extend(identity.cluster_id);
    secrets
}

/// The directory as the admin's digest has it: an attack must leave it as it was.
async fn digest(node: &TestNode) -> Value {
    let digest = node
        .http
        .get(format!("{}/api/cluster/digest", node.url))
        .bearer_auth(ADMIN)
        .fetch()
        .await;
    json!([digest["rows_sha256"], digest["receipts"]])
}

/// A share token for [`HIDDEN`].
async fn share_token(node: &TestNode) -> String {
    let minted = node
        .http
        .post(format!("{}/api/share", node.url))
        .bearer_auth(ADMIN)
        .json(&json!({"key": HIDDEN}))
        .fetch()
        .await;
    minted["token"].as_str().expect("a token").to_owned()
}

/// What one transport answered one caller: per thing, whether it was given, and every
/// byte it was sent.
#[derive(Default)]
struct Seen {
    given: Vec<(String, bool)>,
    text: String,
}

impl Seen {
    fn note(&mut self, thing: Thing, given: bool, text: impl AsRef<str>) {
        self.given.push((format!("{thing:?}"), given));
        self.text.push_str(text.as_ref());
        self.text.push('\n');
    }

    /// Checks the answers against [`MAY_SEE`] and that no secret was in any of them.
    fn check(&self, transport: &str, who: Who, secrets: &[String]) {
        for (thing, stranger, share, holder) in MAY_SEE {
            let name = format!("{thing:?}");
            let Some((_, given)) = self.given.iter().find(|(t, _)| *t == name) else {
                continue; // the transport has no such call
            };
            let expected = may_see(who, *stranger, *share, *holder);
            let key = thing.key();
            assert_eq!(*given, expected, "{transport}, {who:?}: {name} ({key})");
        }
        for secret in secrets {
            assert!(
                !self.text.contains(secret.as_str()),
                "{transport}, {who:?} was sent {secret:?}:\n{}",
                self.text
            );
        }
    }
}

// ---------------------------------------------------------------------------------- HTTP

async fn over_http(node: &TestNode, who: Who, share: &str) -> Seen {
    let get = |path: String| {
        let request = node.http.get(format!("{}{path}", node.url));
        match who {
            Who::Stranger => request,
            Who::Share => request.header("x-rowcall-share", share),
            Who::Holder => request.bearer_auth(INVOKE),
        }
    };
    let mut seen = Seen::default();
    let listing = get("/api/directory".into()).fetch().await;
    for key in [VISIBLE, HIDDEN] {
        let listed = listing["rows"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["key"] == key);
        seen.note(Thing::Listed(key), listed, listing.to_string());
        let read = get(format!("/api/directory/{key}")).send().await.unwrap();
        let status = read.status();
        seen.note(Thing::Read(key), status == 200, read.text().await.unwrap());
        let contract = get(format!("/api/dispatch?key={key}"))
            .send()
            .await
            .unwrap();
        let status = contract.status();
        let text = contract.text().await.unwrap();
        assert!(status == 200 || status == 404, "{status} {text}");
        seen.note(Thing::Contract(key), status == 200, text);
        let markdown = get(format!("/api/dispatch?key={key}&format=markdown")).send();
        seen.text
            .push_str(&markdown.await.unwrap().text().await.unwrap());
    }
    let asked = get(format!("/api/dispatch?ask={ASK}")).fetch().await;
    for key in [VISIBLE, HIDDEN] {
        let offered = asked["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["key"] == key);
        seen.note(Thing::Suggested(key), offered, asked.to_string());
    }
    let cluster = get("/api/cluster".into()).fetch().await;
    assert_stranger_cluster(&cluster);
    seen.text.push_str(&cluster.to_string());
    seen
}

/// The cluster as a caller without the admin key sees it: ids, roles, leader, term,
/// indexes, standing — no cluster id, incarnation or address.
fn assert_stranger_cluster(cluster: &Value) {
    for field in [
        "node_id",
        "role",
        "leader",
        "term",
        "last_applied",
        "standing",
    ] {
        assert!(cluster.get(field).is_some(), "{field} missing: {cluster}");
    }
    for field in ["cluster_id", "incarnation"] {
        assert!(cluster.get(field).is_none(), "{field} told: {cluster}");
    }
    for member in cluster["members"].as_array().unwrap() {
        assert!(
            member["id"].is_u64() && member["voter"].is_boolean(),
            "{member}"
        );
        for field in ["grpc_addr", "http_addr", "incarnation"] {
            assert!(member.get(field).is_none(), "{field} told: {member}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_a_caller_without_the_admin_key_sees_only_what_the_list_allows() {
    let node = node().await;
    let share = share_token(&node).await;
    let before = digest(&node).await;
    for who in [Who::Stranger, Who::Share, Who::Holder] {
        over_http(&node, who, &share)
            .await
            .check("HTTP", who, &secrets(&node));
    }
    // A share token for one row opens no other row's contract.
    let other = node
        .http
        .get(format!("{}/api/dispatch?key={VISIBLE}", node.url))
        .header("x-rowcall-share", &share)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 200, "a visible row's contract is public");
    assert_eq!(
        digest(&node).await,
        before,
        "an attack changed the directory"
    );

    // The admin still sees everything.
    let admin = node
        .http
        .get(format!("{}/api/cluster", node.url))
        .bearer_auth(ADMIN)
        .fetch()
        .await;
    assert!(admin["cluster_id"].is_string(), "{admin}");
    assert!(admin["incarnation"].is_string(), "{admin}");
    assert!(admin["members"][0]["incarnation"].is_string(), "{admin}");
    let row = node
        .http
        .get(format!("{}/api/directory/{HIDDEN}", node.url))
        .bearer_auth(ADMIN)
        .fetch()
        .await;
    assert!(row["target"].as_str().unwrap().contains(HIDDEN_SECRET));
    node.handle.shutdown().await;
}

// ---------------------------------------------------------------------------------- gRPC

fn grpc_request<T>(message: T, who: Who) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if who == Who::Holder {
        let bearer = format!("Bearer {INVOKE}").parse().unwrap();
        request.metadata_mut().insert("authorization", bearer);
    }
    request
}

async fn channel(node: &TestNode) -> Channel {
    Channel::from_shared(format!("http://{}", node.handle.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

async fn over_grpc(node: &TestNode, who: Who) -> Seen {
    let channel = channel(node).await;
    let mut directory = DirectoryClient::new(channel.clone());
    let mut dispatch = DispatchClient::new(channel.clone());
    let mut seen = Seen::default();
    let listing = directory
        .list(grpc_request(ListRowsRequest::default(), who))
        .await
        .unwrap()
        .into_inner();
    for key in [VISIBLE, HIDDEN] {
        let listed = listing.rows.iter().any(|r| r.key == key);
        seen.note(Thing::Listed(key), listed, format!("{listing:?}"));
        let read = directory
            .get(grpc_request(GetRowRequest { key: key.into() }, who))
            .await;
        seen.note(Thing::Read(key), read.is_ok(), format!("{read:?}"));
        for format in ["", "markdown"] {
            let request = ContractRequest {
                key: key.into(),
                format: format.into(),
            };
            let contract = dispatch.contract(grpc_request(request, who)).await;
            if let Err(status) = &contract {
                assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
            }
            if format.is_empty() {
                seen.note(
                    Thing::Contract(key),
                    contract.is_ok(),
                    format!("{contract:?}"),
                );
            } else {
                seen.text.push_str(&format!("{contract:?}"));
            }
        }
    }
    let ask = AskRequest {
        ask: ASK.into(),
        ..AskRequest::default()
    };
    let asked = dispatch
        .ask(grpc_request(ask, who))
        .await
        .unwrap()
        .into_inner();
    for key in [VISIBLE, HIDDEN] {
        let offered = asked.candidates.iter().any(|c| c.key == key);
        seen.note(Thing::Suggested(key), offered, format!("{asked:?}"));
    }
    let status = ClusterClient::new(channel)
        .status(grpc_request(StatusRequest {}, who))
        .await
        .unwrap();
    seen.text.push_str(&format!("{status:?}"));
    let status = status.into_inner();
    assert_eq!(status.cluster_id, None);
    assert_eq!(status.incarnation, None);
    assert!(status.leader.is_some() && status.term > 0, "{status:?}");
    for member in &status.members {
        assert!(member.grpc_addr.is_empty() && member.http_addr.is_empty());
        assert_eq!(member.incarnation, None);
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_grpc_a_caller_without_the_admin_key_sees_only_what_the_list_allows() {
    let node = node().await;
    let before = digest(&node).await;
    for who in [Who::Stranger, Who::Holder] {
        over_grpc(&node, who)
            .await
            .check("gRPC", who, &secrets(&node));
    }
    assert_eq!(
        digest(&node).await,
        before,
        "an attack changed the directory"
    );

    // The admin key is told the cluster id, incarnations and addresses.
    let mut request = tonic::Request::new(StatusRequest {});
    let bearer = format!("Bearer {ADMIN}").parse().unwrap();
    request.metadata_mut().insert("authorization", bearer);
    let status = ClusterClient::new(channel(&node).await)
        .status(request)
        .await
        .unwrap()
        .into_inner();
    assert!(status.cluster_id.is_some() && status.incarnation.is_some());
    assert_eq!(
        status.members[0].grpc_addr,
        node.handle.grpc_addr.to_string()
    );
    node.handle.shutdown().await;
}

/// Both change feeds, followed by a stranger while the admin rewrites both rows and then
/// hides the visible one: the stranger's feed never names the hidden row (not even its
/// key), shows the visible row without its target, and tells it of the row it saw being
/// hidden as a delete. The admin's own feed names them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_following_the_change_feed_sees_no_hidden_row_and_no_target() {
    let node = node().await;
    let since = node.handle.app.applied_index();
    let watch = |credential: Option<&'static str>| {
        let channel = channel(&node);
        async move {
            let mut request = tonic::Request::new(WatchRequest { since: Some(since) });
            if let Some(key) = credential {
                request
                    .metadata_mut()
                    .insert("authorization", format!("Bearer {key}").parse().unwrap());
            }
            DirectoryClient::new(channel.await)
                .watch(request)
                .await
                .unwrap()
                .into_inner()
        }
    };
    let mut grpc = watch(None).await;
    let mut admin = watch(Some(ADMIN)).await;
    let mut sse = node
        .http
        .get(format!("{}/api/directory/changes?since={since}", node.url))
        .send()
        .await
        .unwrap();
    let write = |body: Value| {
        node.http
            .post(format!("{}/api/directory", node.url))
            .bearer_auth(ADMIN)
            .json(&body)
            .send()
    };
    assert_eq!(write(rows()).await.unwrap().status(), 200);
    let mut hidden_now = rows()[0].clone();
    hidden_now["planner_visible"] = json!(false);
    assert_eq!(write(hidden_now).await.unwrap().status(), 200);

    // The first `count` changes a gRPC feed shows: (op, key, row given).
    async fn changes(
        stream: &mut tonic::Streaming<rowcall_proto::v1::WatchEvent>,
        count: usize,
    ) -> Vec<(String, String, bool)> {
        let mut seen = Vec::new();
        while seen.len() < count {
            let event = tokio::time::timeout(WITHIN, stream.next())
                .await
                .expect("a change in time")
                .unwrap()
                .unwrap();
            if let Some(watch_event::Event::Change(change)) = event.event {
                seen.push((change.op, change.key, change.row.is_some()));
            }
        }
        seen
    }
    let stranger = changes(&mut grpc, 2).await;
    assert_eq!(
        stranger,
        [
            ("put".to_owned(), VISIBLE.to_owned(), true),
            ("delete".to_owned(), VISIBLE.to_owned(), false),
        ],
        "the stranger's Watch"
    );
    let mut everything = changes(&mut admin, 3).await;
    everything.sort();
    assert_eq!(
        everything,
        [
            ("put".to_owned(), HIDDEN.to_owned(), true),
            ("put".to_owned(), VISIBLE.to_owned(), true),
            ("put".to_owned(), VISIBLE.to_owned(), true),
        ],
        "the admin's Watch"
    );

    let mut text = String::new();
    while !text.contains("\"op\":\"delete\"") {
        let chunk = tokio::time::timeout(WITHIN, sse.chunk())
            .await
            .expect("a change in time")
            .unwrap()
            .expect("the feed goes on");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(!text.contains(HIDDEN), "the hidden row's key in {text}");
    for event in text.split("\n\n").filter(|e| e.contains("event: change")) {
        let data = event.lines().find_map(|l| l.strip_prefix("data:")).unwrap();
        let change: Value = serde_json::from_str(data.trim()).unwrap();
        assert_eq!(change["key"], VISIBLE, "{change}");
        if change["op"] == "put" {
            assert!(change["row"].get("target").is_none(), "{change}");
        } else {
            assert!(change.get("row").is_none(), "{change}");
        }
    }
    for secret in secrets(&node) {
        assert!(!text.contains(&secret), "{secret:?} in {text}");
    }
    node.handle.shutdown().await;
}

/// The leader hint on a retryable gRPC failure names the leader's address: told to the
/// admin key (the Rust client sends writes there), to nobody else.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_leader_hint_names_an_address_to_the_admin_only() {
    let mut cluster = Cluster::start_with(3, 0, |config| {
        config.limits.min_index_wait_ms = 300;
    })
    .await;
    let leader = cluster.leader().await;
    for id in cluster.ids() {
        if id != leader {
            cluster.stop(id).await;
        }
    }
    let channel = Channel::from_shared(format!("http://{}", cluster.member(leader).grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut dispatch = DispatchClient::new(channel);
    // Without a quorum a linearizable read fails, retryably.
    let ask = |credential: Option<&str>| {
        let mut request = tonic::Request::new(AskRequest {
            ask: "anything".into(),
            ..AskRequest::default()
        });
        let metadata = request.metadata_mut();
        metadata.insert("x-rowcall-consistency", "linearizable".parse().unwrap());
        if let Some(credential) = credential {
            let bearer = format!("Bearer {credential}").parse().unwrap();
            metadata.insert("authorization", bearer);
        }
        request
    };
    for credential in [None, Some(INVOKE)] {
        let status = dispatch.ask(ask(credential)).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        assert!(
            status.metadata().get("x-rowcall-leader").is_none(),
            "{credential:?} was told {:?}",
            status.metadata().get("x-rowcall-leader")
        );
        let grpc = cluster.member(leader).grpc.to_string();
        assert!(!status.message().contains(&grpc), "{status:?}");
    }
    let status = dispatch.ask(ask(Some(ADMIN))).await.unwrap_err();
    let hint = status.metadata().get("x-rowcall-leader").expect("a hint");
    assert_eq!(
        hint.to_str().unwrap(),
        format!("{leader}={}", cluster.member(leader).grpc)
    );
    cluster.shutdown().await;
}

// ----------------------------------------------------------------------------------- MCP

/// A 2025-11-25 session of one credential, driven over raw HTTP.
struct Session<'a> {
    node: &'a TestNode,
    path: &'static str,
    token: &'static str,
    id: String,
}

impl<'a> Session<'a> {
    async fn open(node: &'a TestNode, path: &'static str, token: &'static str) -> Self {
        let mut session = Self {
            node,
            path,
            token,
            id: String::new(),
        };
        let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "attacker", "version": "0"}}});
        let response = session.post(initialize).await;
        assert_eq!(response.status(), 200);
        session.id = response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        assert!(session.post(initialized).await.status().is_success());
        session
    }

    fn url(&self) -> String {
        format!("{}{}", self.node.url, self.path)
    }

    fn request(&self, method: reqwest::Method) -> reqwest::RequestBuilder {
        let request = self
            .node
            .http
            .request(method, self.url())
            .bearer_auth(self.token)
            .header("mcp-protocol-version", "2025-11-25");
        if self.id.is_empty() {
            request
        } else {
            request.header("mcp-session-id", &self.id)
        }
    }

    async fn post(&self, body: Value) -> reqwest::Response {
        self.request(reqwest::Method::POST)
            .header("accept", "application/json, text/event-stream")
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// The JSON-RPC answer to `body`, whether it comes as JSON or on an SSE stream.
    async fn call(&self, body: Value) -> Value {
        let response = self.post(body).await;
        assert_eq!(response.status(), 200);
        let text = tokio::time::timeout(WITHIN, response.text())
            .await
            .expect("an answer in time")
            .unwrap();
        if let Ok(value) = serde_json::from_str::<Value>(&text) {
            return value;
        }
        events(&text)
            .into_iter()
            .find_map(|(_, message)| message.filter(|m| m.get("id").is_some()))
            .unwrap_or_else(|| panic!("no answer in {text}"))
    }

    /// Resumes a stream after `last_event_id` on this session's GET.
    async fn resume(&self, last_event_id: &str) -> reqwest::Response {
        self.request(reqwest::Method::GET)
            .header("accept", "text/event-stream")
            .header("last-event-id", last_event_id)
            .send()
            .await
            .unwrap()
    }

    async fn tool(&self, name: &str, arguments: Value) -> Value {
        let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}});
        self.call(call).await
    }
}

/// The events of an SSE body: (id, JSON-RPC message).
fn events(text: &str) -> Vec<(Option<String>, Option<Value>)> {
    text.split("\n\n")
        .map(|event| {
            let mut id = None;
            let mut data = None;
            for line in event.lines() {
                if let Some(value) = line.strip_prefix("id:") {
                    id = Some(value.trim().to_owned());
                } else if let Some(value) = line.strip_prefix("data:") {
                    data = serde_json::from_str(value.trim()).ok();
                }
            }
            (id, data)
        })
        .collect()
}

async fn over_mcp(node: &TestNode) -> Seen {
    let mut seen = Seen::default();
    let rows = Session::open(node, "/api/mcp", TOKEN_A).await;
    let listed = rows
        .call(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .await;
    for key in [VISIBLE, HIDDEN] {
        let tools = listed["result"]["tools"].as_array().expect("tools");
        let projected = tools.iter().any(|t| t["name"] == key);
        seen.note(Thing::Listed(key), projected, listed.to_string());
    }
    let compact = Session::open(node, "/api/mcp/compact", TOKEN_A).await;
    let searched = compact.tool("search", json!({"query": ASK})).await;
    let answer = &searched["result"]["structuredContent"];
    for key in [VISIBLE, HIDDEN] {
        let offered = answer["candidates"]
            .as_array()
            .expect("candidates")
            .iter()
            .any(|c| c["key"] == key);
        seen.note(Thing::Suggested(key), offered, searched.to_string());
        let contract = compact.tool("contract", json!({"key": key})).await;
        let given = contract["result"]["isError"] != true;
        seen.note(Thing::Contract(key), given, contract.to_string());
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_mcp_a_token_holder_sees_only_what_the_list_allows() {
    let node = node().await;
    let before = digest(&node).await;
    // A stranger is not let in at all.
    let anonymous = node
        .http
        .post(format!("{}/api/mcp", node.url))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    over_mcp(&node)
        .await
        .check("MCP", Who::Holder, &secrets(&node));
    assert_eq!(
        digest(&node).await,
        before,
        "an attack changed the directory"
    );
    node.handle.shutdown().await;
}

/// B resumes A's stream by its event id, on B's own session and without one: 404, and A
/// still gets its answer, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_credential_cannot_resume_a_session_stream_by_event_id() {
    let node = node().await;
    let a = Session::open(&node, "/api/mcp", TOKEN_A).await;
    let b = Session::open(&node, "/api/mcp", TOKEN_B).await;

    // A's call whose POST stream the server ends before answering (SEP-1699): the answer
    // waits in the event store for A's reconnection.
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "test_reconnection", "arguments": {}}});
    let response = a.post(call).await;
    let text = tokio::time::timeout(WITHIN, response.text())
        .await
        .unwrap()
        .unwrap();
    let resume_from = events(&text)
        .into_iter()
        .filter_map(|(id, _)| id)
        .next_back()
        .expect("the POST stream gave an event id");

    let stolen = b.resume(&resume_from).await;
    assert_eq!(
        stolen.status(),
        StatusCode::NOT_FOUND,
        "B resumed A's stream"
    );
    let sessionless = node
        .http
        .get(format!("{}/api/mcp", node.url))
        .bearer_auth(TOKEN_B)
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("last-event-id", &resume_from)
        .send()
        .await
        .unwrap();
    assert_eq!(sessionless.status(), StatusCode::NOT_FOUND);
    // A's session GET stream, named from B's session: 404 too.
    let foreign_common = b.resume(&format!("{}:common/0", a.id)).await;
    assert_eq!(foreign_common.status(), StatusCode::NOT_FOUND);

    // A resumes and gets its answer, once.
    let resumed = a.resume(&resume_from).await;
    assert_eq!(resumed.status(), 200);
    let text = tokio::time::timeout(WITHIN, resumed.text())
        .await
        .unwrap()
        .unwrap();
    let answers: Vec<Value> = events(&text).into_iter().filter_map(|(_, m)| m).collect();
    assert_eq!(answers.len(), 1, "{text}");
    assert_eq!(answers[0]["id"], 7, "{text}");
    node.handle.shutdown().await;
}

/// B names A's session: ending it, or calling in it, is 404, and A's session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_credential_cannot_end_or_use_a_session() {
    let node = node().await;
    let a = Session::open(&node, "/api/mcp", TOKEN_A).await;
    let hijack = Session {
        node: &node,
        path: "/api/mcp",
        token: TOKEN_B,
        id: a.id.clone(),
    };
    let ended = hijack
        .request(reqwest::Method::DELETE)
        .send()
        .await
        .unwrap();
    assert_eq!(ended.status(), StatusCode::NOT_FOUND, "B ended A's session");
    let list = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"});
    let used = hijack.post(list.clone()).await;
    assert_eq!(used.status(), StatusCode::NOT_FOUND, "B used A's session");

    // Nothing changed for A: its session answers, and A may end it.
    let listed = a.call(list).await;
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    let ended = a.request(reqwest::Method::DELETE).send().await.unwrap();
    assert_eq!(ended.status(), StatusCode::NO_CONTENT);
    node.handle.shutdown().await;
}

// ------------------------------------------------------------------------- error detail

/// A share-token holder runs a row whose upstream the node refuses: told that it failed,
/// not why (the resolved address); the invoke key's holder is told; the receipt keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_token_holder_is_not_told_why_an_upstream_failed() {
    let node = node().await;
    let row = json!({"key": "ATTACK_UPSTREAM", "type": "http", "auth": "key",
        "target": "GET http://127.0.0.1:9/private", "content": "# WHAT: refused upstream\n"});
    let written = node
        .http
        .post(format!("{}/api/directory", node.url))
        .bearer_auth(ADMIN)
        .json(&row)
        .send()
        .await
        .unwrap();
    assert_eq!(written.status(), 201);
    let minted = node
        .http
        .post(format!("{}/api/share", node.url))
        .bearer_auth(ADMIN)
        .json(&json!({"key": "ATTACK_UPSTREAM"}))
        .fetch()
        .await;
    let token = minted["token"].as_str().unwrap();
    let invoke = || {
        node.http
            .post(format!("{}/api/dispatch", node.url))
            .json(&json!({"key": "ATTACK_UPSTREAM"}))
    };
    let shared = invoke().header("x-rowcall-share", token).fetch().await;
    assert_eq!(shared["ok"], false, "{shared}");
    let message = shared["error"]["message"].as_str().unwrap();
    assert!(!message.contains("127.0.0.1"), "{shared}");
    let named = invoke().bearer_auth(INVOKE).fetch().await;
    let message = named["error"]["message"].as_str().unwrap();
    assert!(message.contains("127.0.0.1"), "{named}");
    let receipt = node
        .http
        .get(shared["proof"]["receipt"].as_str().unwrap())
        .bearer_auth(ADMIN)
        .fetch()
        .await;
    assert!(
        receipt["error"].as_str().unwrap().contains("127.0.0.1"),
        "{receipt}"
    );
    node.handle.shutdown().await;
}
