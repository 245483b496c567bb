//! An in-process cluster on loopback port 0: every node its own data folder, all sharing one
//! fault-injecting transport so tests can partition, delay and heal links.
//!
//! A secured cluster ([`Cluster::start_secured`], or any cluster when the environment sets
//! `ROWCALL_TEST_PEER_TLS=1`) has its peers talk mutual TLS with certificates from a test CA
//! and show the cluster secret [`CLUSTER_SECRET`]: `.ci/run` runs the cluster tests both
//! ways.

use rowcall_node::raft::WatchReceiver as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rowcall_node::raft::faults::Faults;
use rowcall_node::{Config, NodeHandle, StartOptions};
use serde_json::Value;

use super::tls::TestCa;
use super::{ADMIN, INVOKE};

/// The cluster secret of secured test clusters.
pub const CLUSTER_SECRET: &str = "test-cluster-secret-0123456789abcdef";

/// One member: its handle while running, and the addresses it keeps across restarts.
pub struct Member {
    pub id: u64,
    pub handle: Option<NodeHandle>,
    pub http: SocketAddr,
    pub grpc: SocketAddr,
}

impl Member {
    pub fn url(&self) -> String {
        format!("http://{}", self.http)
    }
}

/// A running cluster.
pub struct Cluster {
    pub members: Vec<Member>,
    pub faults: Arc<Faults>,
    pub dir: tempfile::TempDir,
    pub http: reqwest::Client,
    voters: u64,
    tweak: fn(&mut Config),
    /// The CA of a secured cluster.
    pub ca: Option<TestCa>,
    /// The join token node 1 minted for the others (a cluster without the secret).
    pub join_token: Option<String>,
}

/// Polls `check` every 20 ms until it holds or `within` passes.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Cluster {
    /// The configuration of node `id` on these addresses.
    pub fn config(&self, id: u64, http: SocketAddr, grpc: SocketAddr) -> Config {
        let mut config = Config::default();
        config.node.id = id;
        config.node.http = http;
        config.node.grpc = grpc;
        config.node.data = self.dir.path().join(format!("node-{id}"));
        config.node.demo = false;
        config.auth.admin_key = Some(ADMIN.into());
        config.auth.invoke_keys.insert("ci".into(), INVOKE.into());
        // Short timeouts keep fault tests quick; the election timeout stays well above the
        // heartbeat so a loaded CI machine does not flap leaders.
        config.raft.heartbeat_ms = 100;
        config.raft.election_timeout_min_ms = 400;
        config.raft.election_timeout_max_ms = 800;
        config.limits.write_timeout_ms = 3_000;
        config.limits.receipt_timeout_ms = 1_000;
        // Whatever the free space of the machine running the tests: the disk-space tests set
        // their own bounds.
        config.storage.min_free_bytes = 0;
        // As a deployment would: node 1 founds the cluster, the others join through it (and
        // on a restart with their data both are ignored).
        match self.members.first() {
            Some(first) if id != first.id => config.cluster.join = vec![first.grpc.to_string()],
            _ => config.cluster.bootstrap = true,
        }
        config.cluster.learner = id > self.voters;
        if let Some(ca) = &self.ca {
            config.cluster.tls = Some(ca.node(&format!("node-{id}")));
            config.cluster.secret = Some(CLUSTER_SECRET.into());
        } else {
            // As an operator would: the joiners bring a join token node 1 minted.
            config.cluster.join_token = self.join_token.clone();
        }
        (self.tweak)(&mut config);
        config
    }

    /// Starts `voters` voters and `learners` learners; node 1 initialises, the others join it.
    pub async fn start(voters: u64, learners: u64) -> Self {
        Self::start_with(voters, learners, |_| {}).await
    }

    /// [`Cluster::start`] with a configuration tweak applied to every node.
    pub async fn start_with(voters: u64, learners: u64, tweak: fn(&mut Config)) -> Self {
        let secured = std::env::var_os("ROWCALL_TEST_PEER_TLS").is_some_and(|v| v == "1");
        Self::start_as(voters, learners, tweak, secured).await
    }

    /// `voters` voters whose peers authenticate each other (mutual TLS and the secret).
    pub async fn start_secured(voters: u64) -> Self {
        Self::start_as(voters, 0, |_| {}, true).await
    }

    async fn start_as(voters: u64, learners: u64, tweak: fn(&mut Config), secured: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ca = secured.then(|| TestCa::new(&dir.path().join("tls"), "cluster"));
        let mut cluster = Cluster {
            members: Vec::new(),
            faults: Arc::new(Faults::default()),
            dir,
            http: reqwest::Client::new(),
            voters,
            tweak,
            ca,
            join_token: None,
        };
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        for id in 1..=voters + learners {
            let config = cluster.config(id, any, any);
            let handle = rowcall_node::start_with(config, cluster.options())
                .await
                .expect("node starts");
            if id == 1 {
                handle
                    .app
                    .raft
                    .wait(Some(Duration::from_secs(10)))
                    .current_leader(1, "node 1 leads the new cluster")
                    .await
                    .unwrap();
                cluster.join_token = handle.app.peer_ca.as_ref().map(|ca| {
                    let day = rowcall_node::model::time::now_ms() + 24 * 3600 * 1000;
                    ca.mint_token(day)
                });
            }
            cluster.members.push(Member {
                id,
                http: handle.http_addr,
                grpc: handle.grpc_addr,
                handle: Some(handle),
            });
        }
        // A join returns once the leader committed the new member, not once every member
        // applied it: a test that cuts a node off at once would find it still a learner in
        // its own view (it never campaigns). Tests start from a cluster every member knows.
        let index = cluster.applied(1);
        cluster.converge(index).await;
        cluster
    }

    /// The cluster's own CA (a cluster without operator certificates), as a running member
    /// holds it, else as node 1's data folder keeps it.
    pub fn peer_ca(&self) -> std::sync::Arc<rowcall_node::raft::pki::ClusterCa> {
        self.members
            .iter()
            .find_map(|m| m.handle.as_ref()?.app.peer_ca.clone())
            .unwrap_or_else(|| {
                let data = self.member_config(1).node.data;
                let ca = rowcall_node::raft::pki::ClusterCa::load(&data).unwrap();
                std::sync::Arc::new(ca.expect("node 1 keeps the cluster's CA"))
            })
    }

    /// A raw peer channel to node `to`, showing a certificate of this cluster's CA that
    /// names node `as_node`, as that member's would: for messages no real peer would send.
    pub async fn peer_channel(&self, to: u64, as_node: u64) -> tonic::transport::Channel {
        use rowcall_node::raft::pki::node_name;
        use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
        let (ca_pem, cert, key) = match &self.ca {
            Some(ca) => {
                let (cert, key) = ca.issue(&format!("node-{as_node}"));
                (ca.ca_pem(), cert, key)
            }
            None => {
                let ca = self.peer_ca();
                let mine = ca.issue(as_node).unwrap();
                (ca.cert_pem().to_owned(), mine.cert_pem, mine.key_pem)
            }
        };
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(ca_pem))
            .identity(Identity::from_pem(cert, key))
            .domain_name(node_name(to));
        Endpoint::from_shared(format!("https://{}", self.member(to).grpc))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    /// `message` as it arrives from member `from` over a verified connection, for calling a
    /// node's Raft service in process.
    pub fn as_from_peer<T>(&self, from: u64, message: T) -> tonic::Request<T> {
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        let cert = self.peer_ca().issue(from).unwrap();
        let der = tokio_rustls::rustls::pki_types::CertificateDer::from_pem_slice(
            cert.cert_pem.as_bytes(),
        )
        .unwrap();
        let mut request = tonic::Request::new(message);
        request
            .extensions_mut()
            .insert(rowcall_node::raft::tls::PeerConnectInfo {
                remote_addr: None,
                certs: Some(std::sync::Arc::new(vec![der])),
                activity: None,
            });
        request
    }

    /// Running member `id`'s node-to-node transport (streams opened, peers' builds).
    pub fn network(&self, id: u64) -> rowcall_node::raft::network::Network {
        let handle = self.member(id).handle.as_ref().expect("running");
        handle.app.network.clone()
    }

    /// Running member `from`'s client for member `to`: Raft calls made through it go over
    /// the real peer protocol, in `from`'s name, as that node's own would.
    pub async fn peer(&self, from: u64, to: u64) -> rowcall_node::raft::network::Peer {
        use openraft::network::RaftNetworkFactory as _;
        let app = &self.member(from).handle.as_ref().expect("running").app;
        let node = app.membership().get_node(&to).cloned().expect("a member");
        app.network.clone().new_client(to, &node).await
    }

    pub fn member(&self, id: u64) -> &Member {
        &self.members[(id - 1) as usize]
    }

    pub fn url(&self, id: u64) -> String {
        self.member(id).url()
    }

    pub fn ids(&self) -> Vec<u64> {
        self.members.iter().map(|m| m.id).collect()
    }

    /// The member ids other than `id` (ascending): a leader's followers, say.
    pub fn others(&self, id: u64) -> Vec<u64> {
        self.ids()
            .into_iter()
            .filter(|&other| other != id)
            .collect()
    }

    /// The leader as the running nodes see it, once they agree.
    pub async fn leader(&self) -> u64 {
        let mut leader = 0;
        eventually(
            Duration::from_secs(15),
            "the running nodes agree on a leader",
            || {
                let seen: Vec<Option<u64>> = self
                    .members
                    .iter()
                    .filter_map(|m| m.handle.as_ref())
                    .map(|h| h.app.raft.metrics().borrow_watched().current_leader)
                    .collect();
                let first = seen.first().copied().flatten();
                let agreed = first.is_some()
                    && seen.iter().all(|s| *s == first)
                    && self.member(first.unwrap()).handle.is_some();
                if agreed {
                    leader = first.unwrap();
                }
                async move { agreed }
            },
        )
        .await;
        leader
    }

    /// Stops a node at once, as peers see a crash (its data folder stays): a leader hands
    /// nothing over.
    pub async fn stop(&mut self, id: u64) {
        self.take(id).halt().await;
    }

    /// Stops a node as SIGTERM does: a leader hands leadership over first.
    pub async fn stop_gracefully(&mut self, id: u64) {
        self.take(id).shutdown().await;
    }

    fn take(&mut self, id: u64) -> NodeHandle {
        self.members[(id - 1) as usize]
            .handle
            .take()
            .expect("running")
    }

    /// Restarts a stopped node on its old addresses and data folder.
    pub async fn restart(&mut self, id: u64) {
        self.restart_with(id, self.options()).await;
    }

    /// [`Cluster::restart`] with other start options (e.g. another build's data format).
    pub async fn restart_with(&mut self, id: u64, options: StartOptions) {
        let handle = match self.start_member(id, options).await {
            Ok(handle) => handle,
            Err(e) => panic!("node {id} restarts: {e:#}"),
        };
        self.members[(id - 1) as usize].handle = Some(handle);
    }

    /// Starts stopped node `id` on its addresses and folder, and says how that went (the
    /// caller keeps the handle). A stopped node's last tasks may hold its database for a
    /// moment: that alone is waited out.
    pub async fn start_member(&self, id: u64, options: StartOptions) -> anyhow::Result<NodeHandle> {
        super::start_once_unlocked(self.member_config(id), options).await
    }

    /// The configuration node `id` restarts with (its addresses, folder and peers).
    pub fn member_config(&self, id: u64) -> Config {
        let member = self.member(id);
        self.config(id, member.http, member.grpc)
    }

    /// What every node of this cluster starts with (the shared fault layer).
    pub fn options(&self) -> StartOptions {
        StartOptions {
            faults: Some(self.faults.clone()),
            data_format: None,
            peer_protocol: None,
            plain_snapshots_only: false,
        }
    }

    /// Deletes a stopped node's data folder: it lost its disk.
    pub fn wipe(&self, id: u64) {
        assert!(self.member(id).handle.is_none(), "stop node {id} first");
        let data = self.member_config(id).node.data;
        std::fs::remove_dir_all(&data).unwrap();
    }

    /// The applied index of a running node.
    pub fn applied(&self, id: u64) -> u64 {
        self.member(id)
            .handle
            .as_ref()
            .expect("running")
            .app
            .applied_index()
    }

    /// Waits until every running node has applied `index`.
    pub async fn converge(&self, index: u64) {
        for member in self.members.iter().filter(|m| m.handle.is_some()) {
            let id = member.id;
            // Bounded generously: catching up by snapshot on a busy 2-core machine is slow.
            eventually(
                Duration::from_secs(60),
                &format!("node {id} applies index {index}"),
                || {
                    let done = self.applied(id) >= index;
                    async move { done }
                },
            )
            .await;
        }
    }

    /// Has the leader `leader` take a snapshot, and waits until it purged the log behind it
    /// (a follower behind that point must then catch up by installing the snapshot).
    /// openraft purges in batches of 32 entries, so at least that many must be applied.
    pub async fn snapshot_and_purge(&self, leader: u64) {
        let answer = self
            .http
            .post(format!("{}/api/cluster/snapshot", self.url(leader)))
            .header("x-terminal-key", ADMIN)
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{answer:?}");
        eventually(
            Duration::from_secs(30),
            "the leader purged its log",
            || async {
                let (_, _, status) = self.get(leader, "/api/cluster").await;
                status["purged_index"].as_u64().unwrap_or(0) > 0
            },
        )
        .await;
    }

    /// GET a JSON document from a node.
    /// Every running node's digest of its directory and receipts (`/api/cluster/digest`).
    pub async fn digests(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for id in self.ids() {
            let digest = self
                .http
                .get(format!("{}/api/cluster/digest", self.url(id)))
                .header("x-terminal-key", ADMIN)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            out.push(digest);
        }
        out
    }

    pub async fn get(
        &self,
        id: u64,
        path: &str,
    ) -> (reqwest::StatusCode, reqwest::header::HeaderMap, Value) {
        self.get_with(id, path, None).await
    }

    /// [`Cluster::get`] with the admin key: what only it is told (the cluster id, member
    /// incarnations and addresses of `/api/cluster`, targets, hidden rows).
    pub async fn admin_get(
        &self,
        id: u64,
        path: &str,
    ) -> (reqwest::StatusCode, reqwest::header::HeaderMap, Value) {
        self.get_with(id, path, Some(super::ADMIN)).await
    }

    async fn get_with(
        &self,
        id: u64,
        path: &str,
        credential: Option<&str>,
    ) -> (reqwest::StatusCode, reqwest::header::HeaderMap, Value) {
        let mut request = self.http.get(format!("{}{path}", self.url(id)));
        if let Some(credential) = credential {
            request = request.bearer_auth(credential);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.json().await.unwrap_or(Value::Null);
        (status, headers, body)
    }

    pub async fn shutdown(mut self) {
        for member in &mut self.members {
            if let Some(handle) = member.handle.take() {
                handle.halt().await;
            }
        }
    }
}
