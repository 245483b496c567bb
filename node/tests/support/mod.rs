//! Real `rowcall-node` processes for tests that need a process boundary (SIGKILL).

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The admin key of test processes.
pub const ADMIN: &str = "process-admin-key-0123456789abcdef01";

/// A running node process; killed when dropped so a failed assertion leaves nothing behind.
pub struct Process {
    pub child: Child,
    /// `http://host:port`.
    pub url: String,
    /// The bound HTTP address.
    pub http: String,
    /// The bound gRPC address.
    pub grpc: String,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Process {
    /// Kills the process with SIGKILL: no shutdown, no flush.
    pub fn kill(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }
}

/// The arguments of cluster member `id` on loopback ports picked by the system, joining
/// through `join` when given.
pub fn member_args(id: u64, join: Option<&str>) -> Vec<String> {
    let mut args: Vec<String> = ["--id", &id.to_string(), "--http", "127.0.0.1:0"]
        .into_iter()
        .chain(["--grpc", "127.0.0.1:0"])
        .map(str::to_owned)
        .collect();
    if let Some(join) = join {
        args.extend(["--join".to_owned(), join.to_owned()]);
    }
    args
}

/// Starts the binary with `args` and returns once it printed where it serves.
pub fn spawn(args: &[&str], data: &Path, config: Option<&Path>) -> Process {
    spawn_under(&[], args, data, config)
}

/// [`spawn`] under a wrapper program (`wrapper[0]` with its arguments, then the binary), e.g.
/// a tracer; the wrapper must pass the binary's stdout through.
pub fn spawn_under(wrapper: &[&str], args: &[&str], data: &Path, config: Option<&Path>) -> Process {
    spawn_logged(wrapper, args, data, config, "warn", None)
}

/// [`spawn_under`] with the log filter `log` (`ROWCALL_LOG`), its log (stderr) written to
/// the file `log_to` when given.
pub fn spawn_logged(
    wrapper: &[&str],
    args: &[&str],
    data: &Path,
    config: Option<&Path>,
    log: &str,
    log_to: Option<&Path>,
) -> Process {
    let binary = env!("CARGO_BIN_EXE_rowcall-node");
    let mut command = match wrapper.split_first() {
        Some((program, wrapper_args)) => {
            let mut command = Command::new(program);
            command.args(wrapper_args).arg(binary);
            command
        }
        None => Command::new(binary),
    };
    command.args(args).arg("--data").arg(data);
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    let mut child = command
        .env("ROWCALL_ADMIN_KEY", ADMIN)
        // One secret for every node these tests start: the cluster's CA, so nodes founding
        // or joining need nothing else.
        .env(
            "ROWCALL_CLUSTER_SECRET",
            "process-test-cluster-secret-0123456789abcdef",
        )
        .env("ROWCALL_LOG", log)
        .stdout(Stdio::piped())
        .stderr(match log_to {
            Some(path) => Stdio::from(std::fs::File::create(path).expect("create the log file")),
            None => Stdio::null(),
        })
        .spawn()
        .expect("spawn rowcall-node");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    // "rowcall: serving HTTP on http://ADDR  (gRPC ADDR)"
    let (http, grpc) = loop {
        let line = lines
            .next()
            .expect("the node printed its address before exiting")
            .expect("read stdout");
        if let Some(rest) = line.strip_prefix("rowcall: serving HTTP on http://") {
            let mut words = rest.split_whitespace();
            let http = words.next().unwrap().to_owned();
            let grpc = words.nth(1).unwrap().trim_end_matches(')').to_owned();
            break (http, grpc);
        }
    };
    // Keep draining stdout so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Process {
        child,
        url: format!("http://{http}"),
        http,
        grpc,
    }
}

/// GETs `url` and decodes its JSON answer, panicking with context on failure.
pub async fn get_json(http: &reqwest::Client, url: &str) -> serde_json::Value {
    let response = http.get(url).send().await.expect("request sent");
    response.json().await.expect("a JSON answer")
}

/// Invokes row `key` on the node at `url` (no credential: public rows); the status and the
/// JSON answer, or `None` when no answer came (the node is down or went down meanwhile).
pub async fn invoke(
    http: &reqwest::Client,
    url: &str,
    key: &str,
) -> Option<(reqwest::StatusCode, serde_json::Value)> {
    let response = http
        .post(format!("{url}/api/dispatch"))
        .json(&serde_json::json!({ "key": key }))
        .send()
        .await
        .ok()?;
    let status = response.status();
    Some((status, response.json().await.ok()?))
}

/// Polls `/readyz` until it answers 200.
pub async fn wait_ready(http: &reqwest::Client, url: &str) {
    for _ in 0..400 {
        if let Ok(r) = http.get(format!("{url}/readyz")).send().await {
            if r.status() == 200 {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("node at {url} never became ready");
}
