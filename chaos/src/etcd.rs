//! A 3-member etcd on loopback for the benchmark, from the system's `etcd` binary (Debian's
//! `etcd-server`): started with fresh data folders, killed when the [`Etcd`] is dropped.
//! Its v3 JSON gateway (`/v3/kv/put`) is the HTTP/JSON client class rowcall is measured in.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cluster::{control_client, free_ports};
use crate::error::ChaosError;

/// How long the members may take to elect a leader and answer.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// A running etcd cluster.
#[derive(Debug)]
pub struct Etcd {
    /// Client URLs, by member.
    pub urls: Vec<String>,
    /// `etcd --version`, first line.
    pub version: String,
    children: Vec<Child>,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `etcd` on the PATH, if there is one.
pub fn on_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("etcd"))
        .find(|p| p.is_file())
}

impl Etcd {
    /// Starts `members` members of one cluster under `root` and waits until every member
    /// answers with a leader.
    pub async fn start(bin: &Path, members: usize, root: &Path) -> Result<Etcd, ChaosError> {
        let version = Command::new(bin)
            .arg("--version")
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_owned()
            })
            .map_err(|e| ChaosError::io(format!("run {} --version", bin.display()), e))?;
        let ports: Vec<SocketAddr> = free_ports(2 * members)?
            .into_iter()
            .map(|port| SocketAddr::from(([127, 0, 0, 1], port)))
            .collect();
        let name = |i: usize| format!("e{}", i + 1);
        let peer = |i: usize| format!("http://{}", ports[2 * i + 1]);
        let initial = (0..members)
            .map(|i| format!("{}={}", name(i), peer(i)))
            .collect::<Vec<_>>()
            .join(",");
        let mut etcd = Etcd {
            urls: (0..members)
                .map(|i| format!("http://{}", ports[2 * i]))
                .collect(),
            version,
            children: Vec::new(),
        };
        for i in 0..members {
            let dir = root.join(name(i));
            std::fs::create_dir_all(&dir)
                .map_err(|e| ChaosError::io(format!("create {}", dir.display()), e))?;
            let log_path = dir.join("etcd.log");
            let log = File::create(&log_path)
                .map_err(|e| ChaosError::io(format!("create {}", log_path.display()), e))?;
            let err = log
                .try_clone()
                .map_err(|e| ChaosError::io("clone log handle", e))?;
            let url = &etcd.urls[i];
            let child = Command::new(bin)
                .arg("--name")
                .arg(name(i))
                .arg("--data-dir")
                .arg(crate::cluster::fresh(dir.join("data"))?)
                .args(["--listen-client-urls", url, "--advertise-client-urls", url])
                .args(["--listen-peer-urls", &peer(i)])
                .args(["--initial-advertise-peer-urls", &peer(i)])
                .args(["--initial-cluster", &initial])
                .args(["--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", "rowcall-bench"])
                .stdin(Stdio::null())
                .stdout(Stdio::from(log))
                .stderr(Stdio::from(err))
                .spawn()
                .map_err(|source| ChaosError::Process {
                    action: "start etcd member",
                    id: i as u64 + 1,
                    source,
                })?;
            etcd.children.push(child);
        }
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            let mut ready = 0;
            for url in &etcd.urls {
                if status(url).await.is_some_and(|s| s.leader.is_some()) {
                    ready += 1;
                }
            }
            if ready == members {
                return Ok(etcd);
            }
            if Instant::now() > deadline {
                return Err(ChaosError::Setup {
                    what: "etcd".into(),
                    detail: format!(
                        "{ready} of {members} members answered with a leader within {} s; logs under {}",
                        READY_WITHIN.as_secs(),
                        root.display()
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The client URL of a member that is not the leader (the first member if none is known).
    pub async fn follower(&self) -> String {
        for url in &self.urls {
            if let Some(status) = status(url).await {
                if status.leader.is_some() && status.leader != Some(status.member) {
                    return url.clone();
                }
            }
        }
        self.urls[0].clone()
    }
}

/// What a member says of itself.
struct Status {
    member: String,
    leader: Option<String>,
}

/// `POST /v3/maintenance/status` through the JSON gateway (ids are strings there).
async fn status(url: &str) -> Option<Status> {
    let answer: Value = control_client()
        .post(format!("{url}/v3/maintenance/status"))
        .json(&json!({}))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    let leader = answer["leader"]
        .as_str()
        .filter(|l| *l != "0")
        .map(str::to_owned);
    Some(Status {
        member: answer["header"]["member_id"].as_str()?.to_owned(),
        leader,
    })
}
