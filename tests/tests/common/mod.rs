//! Shared helpers: an in-process node on port 0 with its own data folder.

pub mod cluster;
pub mod tls;

use serde_json::Value;

/// Sends a request and decodes its JSON answer, panicking with context on failure.
pub trait Fetch {
    /// The answer's JSON body.
    fn fetch(self) -> impl std::future::Future<Output = Value> + Send;
}

impl Fetch for reqwest::RequestBuilder {
    async fn fetch(self) -> Value {
        let response = self.send().await.expect("request sent");
        response.json().await.expect("a JSON answer")
    }
}

/// What one in-process `rowcall` run printed and how it ended.
pub struct Run {
    pub code: u8,
    pub out: String,
    pub err: String,
}

impl Run {
    /// Its output as JSON (of a `--json` run).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.out).unwrap_or_else(|e| panic!("{e}: {}", self.out))
    }
}

/// Runs the `rowcall` command line in process with `argv` (`rowcall` first), plain style.
pub async fn rowcall_cli(argv: Vec<&str>) -> Run {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = rowcall_client::cli::execute(
        argv,
        &mut out,
        &mut err,
        rowcall_client::render::Style::plain(),
    )
    .await;
    Run {
        code,
        out: String::from_utf8(out).unwrap(),
        err: String::from_utf8(err).unwrap(),
    }
}

/// The Prometheus text a node at `url` serves on `/metrics`.
pub async fn metrics_text(http: &reqwest::Client, url: &str) -> String {
    let response = http.get(format!("{url}/metrics")).send().await.unwrap();
    response.text().await.unwrap()
}

use std::net::SocketAddr;

use rowcall_node::{Config, NodeHandle};

/// The admin key of test nodes.
pub const ADMIN: &str = "test-admin-key-0123456789abcdef0123";
/// An invoke credential named `ci`.
pub const INVOKE: &str = "test-invoke-key-0123456789abcdef012";

/// A running node and the folder that holds its data.
pub struct TestNode {
    pub handle: NodeHandle,
    pub url: String,
    /// Held for its `Drop`: the folder goes when the node does.
    _dir: tempfile::TempDir,
    pub http: reqwest::Client,
}

/// Starts a node on `config`'s data folder once the node that ran on it last has let go of
/// its database: a stopped node's last tasks may hold it for a moment, and that alone is
/// waited out (up to 10 s).
pub async fn start_once_unlocked(
    config: Config,
    options: rowcall_node::StartOptions,
) -> anyhow::Result<NodeHandle> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        // A start that never returns is a failure of this test, not a hang of the run.
        let started = tokio::time::timeout(
            std::time::Duration::from_secs(120),
            rowcall_node::start_with(config.clone(), options.clone()),
        )
        .await
        .unwrap_or_else(|_| Err(anyhow::anyhow!("the node did not start within 120 s")));
        match started {
            Err(e)
                if format!("{e:#}").contains("could not acquire lock")
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await
            }
            started => return started,
        }
    }
}

/// Starts a one-node cluster on loopback port 0.
pub async fn start(demo: bool) -> TestNode {
    start_with(demo, |_| {}).await
}

/// Starts a one-node cluster on loopback port 0 with a configuration tweak.
pub async fn start_with(demo: bool, tweak: impl FnOnce(&mut Config)) -> TestNode {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    let any_port: SocketAddr = "127.0.0.1:0".parse().unwrap();
    config.node.http = any_port;
    config.node.grpc = any_port;
    config.node.data = dir.path().to_owned();
    config.node.demo = demo;
    config.auth.admin_key = Some(ADMIN.into());
    config.auth.invoke_keys.insert("ci".into(), INVOKE.into());
    // Whatever the free space of the machine running the tests: the disk-space tests set
    // their own bounds.
    config.storage.min_free_bytes = 0;
    tweak(&mut config);
    let handle = rowcall_node::start(config).await.expect("node starts");
    let url = handle.url();
    if !demo {
        // Readiness without sleeps: the fresh cluster has elected itself once a write works.
        handle
            .app
            .raft
            .wait(Some(std::time::Duration::from_secs(10)))
            .current_leader(1, "elected")
            .await
            .expect("leader");
    }
    TestNode {
        handle,
        url,
        _dir: dir,
        http: reqwest::Client::new(),
    }
}
