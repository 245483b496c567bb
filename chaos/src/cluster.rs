//! Real `rowcall-node` processes on loopback: start, SIGKILL, SIGSTOP/SIGCONT, SIGTERM,
//! restart, wipe and rejoin, lose or restore part of a data folder; and the link proxies
//! between them. Every child is killed when the [`Cluster`] is dropped (also on error, panic
//! or Ctrl-C).
//!
//! Ports are chosen up front (bind port 0, note it, release it) because a node keeps its
//! addresses across restarts and every other node must know them to route through proxies.
//!
//! Every node is started, and started again, with one command of its own, as a service
//! manager would: the [`StartForm`] the documentation recommends (every voter
//! `--bootstrap --join <the other initial voters>`), so a scenario that restarts a node on a
//! lost or older folder tests the command an operator really runs.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::error::ChaosError;
use crate::proxy::{Link, LinkState};

/// The admin key every node of a run is started with.
pub const ADMIN_KEY: &str = "chaos-admin-key-0123456789abcdef0123";
/// Rows every session may invoke.
pub const SHARED_ROWS: usize = 4;
/// How long a node may take to become ready.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// Snapshot settings that make every node snapshot every few entries (by the entry count
/// alone: `ROWCALL_SNAPSHOT_LOG_RATIO=0`) and purge its log at once, so a follower that
/// misses entries must catch up by snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotStorm {
    /// `ROWCALL_SNAPSHOT_EVERY`.
    pub every: u64,
    /// `ROWCALL_KEEP_AFTER_SNAPSHOT`.
    pub keep: u64,
}

/// How a node that came back on a lost, wiped or older data folder was received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// It exited, and its log names the removal that has to come first.
    RefusedWithAdvice,
    /// It exited without saying how to proceed.
    RefusedSilently,
    /// It keeps running but stays out: `GET /api/cluster` says `"standing": "behind"`, and
    /// `/readyz` fails.
    KeptOut {
        /// Its `standing_reason`.
        reason: String,
    },
    /// It became ready: the cluster let it in as what it was.
    Accepted,
    /// Neither within the time allowed.
    Undecided,
}

impl Admission {
    /// What the node did, in a few words, for the report.
    pub fn describe(&self, id: u64) -> String {
        match self {
            Self::RefusedWithAdvice => {
                format!("node {id} exited, its log naming DELETE /api/cluster/members/{id}")
            }
            Self::RefusedSilently => {
                format!("node {id} exited without naming the removal it needs")
            }
            Self::KeptOut { reason } => {
                format!("node {id} kept running but stayed out (standing behind: {reason})")
            }
            Self::Accepted => format!("node {id} was let in as itself"),
            Self::Undecided => format!("node {id} was neither refused nor let in"),
        }
    }
}

/// How nodes are started, and started again (every start of a node uses the same command).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum StartForm {
    /// Every voter `--bootstrap --join <the other initial voters>` (the lowest id founds once
    /// every peer answers, the others join it; a node that lost its folder finds its peers in
    /// a cluster and asks to rejoin); learners `--join <node 1> --learner`. The form the
    /// README recommends.
    #[default]
    Peers,
    /// Node 1 `--bootstrap` alone, the others `--join <node 1>`: the form before issue 29,
    /// kept to show what it does when the founder loses its folder.
    FounderAlone,
}

impl StartForm {
    /// Its name in flags and reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Peers => "peers",
            Self::FounderAlone => "founder-alone",
        }
    }
}

/// What a cluster is started with besides its [`ClusterOptions`].
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// Nodes that join as learners (read replicas that never vote), never node 1.
    pub learners: Vec<u64>,
    /// How nodes are started.
    pub form: StartForm,
    /// A TOML configuration every node is started with (`--config`), e.g. receipt retention.
    pub config: Option<String>,
}

/// Which command starts a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Launch {
    /// Its own command (see [`StartForm`]).
    Original,
    /// On a fresh folder, re-admitted through a live member after the old one was removed: its
    /// own command when that names peers to join through, else `--join <via>`.
    Rejoin(SocketAddr),
}

/// The folder inside a node's data folder that holds its Raft log, vote and state machine.
pub const RAFT_STATE_DIR: &str = "sled";

/// The name of a shared row.
pub fn shared_row(i: usize) -> String {
    format!("CHAOS_SHARED_{i}")
}

/// How to start a cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// The node binary.
    pub bin: PathBuf,
    /// Nodes.
    pub nodes: usize,
    /// Data folders and logs go under here.
    pub root: PathBuf,
    /// Put a proxy on every directed link (always, for clusters of more than one node).
    pub proxies: bool,
    /// `ROWCALL_SNAPSHOT_EVERY`.
    pub snapshot_every: u64,
    /// Seed for the proxies' jitter and loss.
    pub seed: u64,
    /// Peers talk mutual TLS with certificates made for this run, and show a cluster secret.
    pub tls: bool,
}

/// The cluster secret every node of a run holds.
const CLUSTER_SECRET: &str = "chaos-cluster-secret-0123456789abcdef";

/// A CA, one certificate (with its key) for 127.0.0.1, and one per node naming its id, as
/// PEM files.
#[derive(Debug, Clone)]
pub struct TestCertificates {
    /// The CA's certificate.
    pub ca: PathBuf,
    /// The certificate, for server and client authentication.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// Per node id: its peer certificate (127.0.0.1 and `node-<id>.peer.rowcall`, the name a
    /// peer certificate must carry) and key.
    pub nodes: std::collections::BTreeMap<u64, (PathBuf, PathBuf)>,
}

/// Makes a CA, one certificate for 127.0.0.1 (every node listens there) and a peer
/// certificate for each of nodes 1..=`nodes` under `dir` with rcgen. Test material only: it
/// lives in the run's output folder.
pub fn test_certificates(dir: &Path, nodes: u64) -> Result<TestCertificates, ChaosError> {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa,
        KeyPair, KeyUsagePurpose,
    };
    let setup = |e: rcgen::Error| ChaosError::Setup {
        what: "TLS certificates".into(),
        detail: e.to_string(),
    };
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(setup)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let issuer =
        CertifiedIssuer::self_signed(ca, KeyPair::generate().map_err(setup)?).map_err(setup)?;
    let issue = |names: Vec<String>| {
        let mut node = CertificateParams::new(names).map_err(setup)?;
        node.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().map_err(setup)?;
        let cert = node.signed_by(&key, &issuer).map_err(setup)?;
        Ok::<_, ChaosError>((cert.pem(), key.serialize_pem()))
    };
    let (cert, key) = issue(vec!["127.0.0.1".to_owned()])?;
    std::fs::create_dir_all(dir)
        .map_err(|e| ChaosError::io(format!("create {}", dir.display()), e))?;
    let write = |file: &str, pem: String| {
        let path = dir.join(file);
        std::fs::write(&path, pem)
            .map_err(|e| ChaosError::io(format!("write {}", path.display()), e))?;
        Ok::<_, ChaosError>(path)
    };
    let mut peers = std::collections::BTreeMap::new();
    for id in 1..=nodes {
        let (cert, key) = issue(vec![
            "127.0.0.1".to_owned(),
            format!("node-{id}.peer.rowcall"),
        ])?;
        let files = (
            write(&format!("node-{id}.crt"), cert)?,
            write(&format!("node-{id}.key"), key)?,
        );
        peers.insert(id, files);
    }
    Ok(TestCertificates {
        ca: write("ca.crt", issuer.pem())?,
        cert: write("node.crt", cert)?,
        key: write("node.key", key)?,
        nodes: peers,
    })
}

/// Flags for node `id`'s peer TLS with `files`.
fn peer_tls_flags(files: &TestCertificates, id: u64) -> Vec<String> {
    let (cert, key) = files
        .nodes
        .get(&id)
        .map_or((&files.cert, &files.key), |(cert, key)| (cert, key));
    [
        ("--peer-ca", &files.ca),
        ("--peer-cert", cert),
        ("--peer-key", key),
    ]
    .into_iter()
    .flat_map(|(flag, path)| [flag.to_owned(), path.display().to_string()])
    .collect()
}

/// One node: its addresses, folders and process.
#[derive(Debug)]
pub struct Node {
    /// Its id (1-based).
    pub id: u64,
    /// HTTP address.
    pub http: SocketAddr,
    /// gRPC address.
    pub grpc: SocketAddr,
    /// Data folder.
    pub data: PathBuf,
    /// Log file (stdout and stderr of every incarnation, appended).
    pub log: PathBuf,
    child: Option<Child>,
    paused: bool,
}

impl Node {
    /// Its process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.http)
    }

    /// Whether the process is running (possibly paused).
    pub fn is_up(&self) -> bool {
        self.child.is_some()
    }

    /// Whether it is stopped with SIGSTOP.
    pub fn is_paused(&self) -> bool {
        self.paused
    }
}

/// A running cluster.
#[derive(Debug)]
pub struct Cluster {
    bin: PathBuf,
    snapshot_every: u64,
    /// When set, nodes (re)started from now on snapshot this often.
    storm: Option<SnapshotStorm>,
    /// How long a (re)started node may take to be ready ([`READY_WITHIN`] unless set): a
    /// node joining a large catalogue is ready once a snapshot of all of it arrived.
    ready_within: Duration,
    /// The run's certificates, for a `--tls` run: each node gets its own peer certificate.
    peer_tls: Option<TestCertificates>,
    /// The CA of the nodes' gRPC certificates in a `--tls` run (PEM), for clients.
    pub ca: Option<Vec<u8>>,
    /// The nodes, index = id - 1.
    pub nodes: Vec<Node>,
    /// The proxies, one per directed link.
    pub links: Vec<Link>,
    /// Per node: bumped when its data folder is wiped.
    pub incarnations: Arc<Vec<AtomicU32>>,
    /// Nodes that join as learners (read replicas that never vote).
    learners: Vec<u64>,
    /// How nodes are started.
    form: StartForm,
    /// The configuration file every node is started with, if any.
    config_file: Option<PathBuf>,
    /// Per node: environment variables it is started with from now on (a test clock offset).
    env: BTreeMap<u64, Vec<(String, String)>>,
    http: reqwest::Client,
    started: Instant,
}

/// The first sample of `name` (any labels, never a longer name) in a Prometheus text
/// exposition.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            return None;
        }
        rest.rsplit(' ').next()?.trim().parse().ok()
    })
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                // SIGKILL also ends a SIGSTOPped process.
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Free loopback ports, distinct from each other, below the range the kernel gives outgoing
/// connections: a node restarted on its ports must find them free, and while it is down an
/// outgoing connection (a proxy's, a session's) could otherwise be given one of them (seen:
/// a restart failing with "address already in use"). Ports the kernel picks when that range
/// cannot be read or nothing below it is free.
pub fn free_ports(n: usize) -> Result<Vec<u16>, ChaosError> {
    let below = ephemeral_floor().unwrap_or(32_768);
    let floor = 10_000u16.min(below / 2);
    let span = u32::from(below - floor);
    // Where to start looking: differs between runs, so that runs side by side rarely meet.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let start = (nanos ^ std::process::id().wrapping_mul(7919)) % span.max(1);
    let mut held = Vec::with_capacity(n);
    for step in 0..span {
        if held.len() == n {
            break;
        }
        let port = floor + ((start + step) % span) as u16;
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            held.push(listener);
        }
    }
    while held.len() < n {
        held.push(
            TcpListener::bind("127.0.0.1:0").map_err(|e| ChaosError::io("pick free ports", e))?,
        );
    }
    held.iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ChaosError::io("pick free ports", e))
}

/// The lowest port the kernel gives outgoing connections (Linux).
fn ephemeral_floor() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

/// `path`, removed first if an earlier run left it: the data folder of a node (or an etcd
/// member) the launcher is about to start for a new cluster.
pub fn fresh(path: PathBuf) -> Result<PathBuf, ChaosError> {
    match std::fs::remove_dir_all(&path) {
        Ok(()) => Ok(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(path),
        Err(e) => Err(ChaosError::io(
            format!("remove the earlier run's {}", path.display()),
            e,
        )),
    }
}

/// A short-timeout client for control requests (status, readiness, membership).
pub fn control_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_millis(500))
        .timeout(Duration::from_secs(3))
        .build()
        .expect("a plain HTTP client builds")
}

/// Sends `signal` (e.g. `STOP`) to `pid` with the system's `kill`: no unsafe code needed.
fn signal(pid: u32, signal: &str, id: u64) -> Result<(), ChaosError> {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .map_err(|source| ChaosError::Process {
            action: "signal",
            id,
            source,
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(ChaosError::Process {
            action: "signal",
            id,
            source: std::io::Error::other(format!("kill -{signal} {pid}: {status}")),
        })
    }
}

impl Cluster {
    /// Starts `options.nodes` nodes in the [`StartForm`] the README recommends, then writes
    /// the shared rows. Returns once every node is ready and a member.
    pub async fn start(options: &ClusterOptions) -> Result<Cluster, ChaosError> {
        Self::start_with(options, &Setup::default()).await
    }

    /// [`Cluster::start`], with the nodes in `learners` (never node 1, which founds the
    /// cluster) joining as learners, here and whenever they rejoin.
    pub async fn start_with_learners(
        options: &ClusterOptions,
        learners: &[u64],
    ) -> Result<Cluster, ChaosError> {
        let setup = Setup {
            learners: learners.to_vec(),
            ..Setup::default()
        };
        Self::start_with(options, &setup).await
    }

    /// [`Cluster::start`] as `setup` says: learners, start form, configuration file.
    pub async fn start_with(
        options: &ClusterOptions,
        setup: &Setup,
    ) -> Result<Cluster, ChaosError> {
        let learners = &setup.learners[..];
        if learners.contains(&1) {
            return Err(ChaosError::setup(
                "the cluster",
                "node 1 founds the cluster, so it cannot be a learner",
            ));
        }
        if !options.bin.is_file() {
            return Err(ChaosError::NodeBinaryMissing {
                path: options.bin.clone(),
            });
        }
        let n = options.nodes;
        let ports = free_ports(2 * n)?;
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let id = i as u64 + 1;
            let dir = options.root.join(format!("n{id}"));
            std::fs::create_dir_all(&dir)
                .map_err(|e| ChaosError::io(format!("create {}", dir.display()), e))?;
            // A data folder left by an earlier run in the same output folder belongs to
            // another cluster: this node would not join the new one.
            let data = fresh(dir.join("data"))?;
            nodes.push(Node {
                id,
                http: SocketAddr::from(([127, 0, 0, 1], ports[2 * i])),
                grpc: SocketAddr::from(([127, 0, 0, 1], ports[2 * i + 1])),
                data,
                log: dir.join("node.log"),
                child: None,
                paused: false,
            });
        }
        let mut links = Vec::new();
        if options.proxies && n > 1 {
            for from in &nodes {
                for to in &nodes {
                    if from.id != to.id {
                        links.push(Link::bind(from.id, to.id, to.grpc, options.seed).await?);
                    }
                }
            }
        }
        let certificates = if options.tls {
            Some(test_certificates(&options.root.join("tls"), n as u64)?)
        } else {
            None
        };
        let ca = match &certificates {
            Some(files) => Some(
                std::fs::read(&files.ca)
                    .map_err(|e| ChaosError::io(format!("read {}", files.ca.display()), e))?,
            ),
            None => None,
        };
        let config_file = match &setup.config {
            Some(toml) => {
                std::fs::create_dir_all(&options.root)
                    .map_err(|e| ChaosError::io(format!("create {}", options.root.display()), e))?;
                let path = options.root.join("rowcall.toml");
                std::fs::write(&path, toml)
                    .map_err(|e| ChaosError::io(format!("write {}", path.display()), e))?;
                Some(path)
            }
            None => None,
        };
        let mut cluster = Cluster {
            bin: options.bin.clone(),
            snapshot_every: options.snapshot_every,
            storm: None,
            ready_within: READY_WITHIN,
            peer_tls: certificates.clone(),
            ca,
            incarnations: Arc::new((0..n).map(|_| AtomicU32::new(0)).collect()),
            nodes,
            links,
            learners: learners.to_vec(),
            form: setup.form,
            config_file,
            env: BTreeMap::new(),
            http: control_client(),
            started: Instant::now(),
        };
        match setup.form {
            // Every node at once: the founder waits until every peer answers.
            StartForm::Peers => {
                for id in cluster.ids() {
                    cluster.spawn(id, Launch::Original)?;
                }
            }
            StartForm::FounderAlone => {
                cluster.spawn(1, Launch::Original)?;
                cluster.wait_ready(1).await?;
            }
        }
        // One at a time, each until every member sees it (a node whose concurrent join was
        // refused exits, and is started again).
        for id in cluster.ids() {
            cluster.join(id, Launch::Original).await?;
        }
        let members = cluster.members(1).await.map_or(0, |m| m.len());
        if members != n {
            return Err(ChaosError::Membership {
                found: members,
                expected: n,
            });
        }
        cluster.write_shared_rows().await?;
        Ok(cluster)
    }

    /// The node with this id.
    pub fn node(&self, id: u64) -> &Node {
        &self.nodes[(id - 1) as usize]
    }

    fn node_mut(&mut self, id: u64) -> &mut Node {
        &mut self.nodes[(id - 1) as usize]
    }

    /// Every node's base URL, by index.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Node::url).collect()
    }

    /// Every node's gRPC address (`host:port`: the public API beside Raft), by index.
    pub fn grpc_addrs(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.grpc.to_string()).collect()
    }

    /// Node ids.
    pub fn ids(&self) -> Vec<u64> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    fn log_line(&self, id: u64, line: &str) {
        let path = &self.node(id).log;
        if let Ok(mut file) = OpenOptions::new().create(true).append(true).open(path) {
            let _ = writeln!(
                file,
                "=== chaos {:.3}s: {line}",
                self.started.elapsed().as_secs_f64()
            );
        }
    }

    /// The flags that say how node `id` enters a cluster when started by `launch`.
    fn entry_flags(&self, id: u64, launch: Launch) -> Vec<String> {
        let nodes: Vec<(u64, SocketAddr)> = self.nodes.iter().map(|n| (n.id, n.grpc)).collect();
        entry_flags(self.form, &nodes, &self.learners, id, launch)
    }

    /// Starts node `id`'s process with its own command, on whatever its data folder holds:
    /// what a service manager does after a crash or a reboot.
    pub fn launch(&mut self, id: u64) -> Result<(), ChaosError> {
        self.spawn(id, Launch::Original)
    }

    /// Starts node `id`'s process by `launch`.
    fn spawn(&mut self, id: u64, launch: Launch) -> Result<(), ChaosError> {
        let entry = self.entry_flags(id, launch);
        self.log_line(id, &format!("start {}", entry.join(" ")));
        let routes: Vec<String> = self
            .links
            .iter()
            .filter(|l| l.from == id)
            .map(|l| format!("{}={}", self.node(l.to).grpc, l.addr))
            .collect();
        let node = self.node(id);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .map_err(|e| ChaosError::io(format!("open {}", node.log.display()), e))?;
        let err = log
            .try_clone()
            .map_err(|e| ChaosError::io("clone log handle", e))?;
        let mut command = Command::new(&self.bin);
        command
            .arg("--id")
            .arg(id.to_string())
            .arg("--http")
            .arg(node.http.to_string())
            .arg("--grpc")
            .arg(node.grpc.to_string())
            .arg("--data")
            .arg(&node.data)
            .arg("--no-demo")
            .args(&entry);
        if let Some(file) = &self.config_file {
            command.arg("--config").arg(file);
        }
        for (name, value) in self.env.get(&id).into_iter().flatten() {
            command.env(name, value);
        }
        for route in routes {
            command.arg("--peer-route").arg(route);
        }
        if let Some(files) = &self.peer_tls {
            command.args(peer_tls_flags(files, id));
        }
        // Every node holds the cluster secret, as the README's multi-node start does: it
        // gives them their common CA, so nodes started together found one cluster and a
        // node that lost its folder rejoins with its original command.
        command.env("ROWCALL_CLUSTER_SECRET", CLUSTER_SECRET);
        let (every, keep) = match self.storm {
            Some(storm) => (storm.every, Some(storm.keep)),
            None => (self.snapshot_every, None),
        };
        if let Some(keep) = keep {
            // By the entry count alone, however large the state has grown.
            command
                .env("ROWCALL_KEEP_AFTER_SNAPSHOT", keep.to_string())
                .env("ROWCALL_SNAPSHOT_LOG_RATIO", "0");
        }
        command
            .env("ROWCALL_ADMIN_KEY", ADMIN_KEY)
            // The workload is a load test: quotas would measure themselves, not availability.
            .env("ROWCALL_RATE_LIMIT", "off")
            .env("ROWCALL_SNAPSHOT_EVERY", every.to_string())
            .env(
                "ROWCALL_LOG",
                std::env::var("ROWCALL_LOG")
                    .unwrap_or_else(|_| "info,openraft=warn,sled=warn".into()),
            )
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err));
        let child = command.spawn().map_err(|source| ChaosError::Process {
            action: "start",
            id,
            source,
        })?;
        let node = self.node_mut(id);
        node.child = Some(child);
        node.paused = false;
        Ok(())
    }

    /// Polls `/readyz` until node `id` answers 200 (a leader is known and reachable and it
    /// has applied what it knows committed), and checks that the answer came from node `id`
    /// (not from another process that took the port). Fails if the process exits.
    pub async fn wait_ready(&mut self, id: u64) -> Result<(), ChaosError> {
        let url = self.node(id).url();
        let deadline = Instant::now() + self.ready_within;
        while Instant::now() < deadline {
            self.check_alive(id)?;
            if self.is_ready(id).await && self.node_id_at(&url).await == Some(id) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(ChaosError::NotReady {
            id,
            waited_s: self.ready_within.as_secs(),
            log: self.node(id).log.clone(),
        })
    }

    /// Fails if node `id`'s process has exited (and forgets it).
    fn check_alive(&mut self, id: u64) -> Result<(), ChaosError> {
        if let Some(child) = self.node_mut(id).child.as_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                self.node_mut(id).child = None;
                return Err(ChaosError::Exited {
                    id,
                    status: status.to_string(),
                    log: self.node(id).log.clone(),
                });
            }
        }
        Ok(())
    }

    async fn node_id_at(&self, url: &str) -> Option<u64> {
        let status: Value = self
            .http
            .get(format!("{url}/api/cluster"))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        status["node_id"].as_u64()
    }

    /// SIGKILL: no shutdown, no flush.
    pub fn kill(&mut self, id: u64) {
        self.log_line(id, "SIGKILL");
        let node = self.node_mut(id);
        if let Some(mut child) = node.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        node.paused = false;
    }

    /// SIGTERM, then wait (bounded) for a clean exit; SIGKILL if it does not come.
    pub async fn terminate(&mut self, id: u64) -> Result<(), ChaosError> {
        self.log_line(id, "SIGTERM");
        let Some(pid) = self.node(id).child.as_ref().map(Child::id) else {
            return Ok(());
        };
        if self.node(id).paused {
            self.resume(id)?;
        }
        signal(pid, "TERM", id)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let exited = self
                .node_mut(id)
                .child
                .as_mut()
                .is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))));
            if exited {
                self.node_mut(id).child = None;
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.kill(id);
        Ok(())
    }

    /// SIGSTOP: the process freezes, its sockets stay open.
    pub fn pause(&mut self, id: u64) -> Result<(), ChaosError> {
        self.log_line(id, "SIGSTOP");
        if let Some(pid) = self.node(id).child.as_ref().map(Child::id) {
            signal(pid, "STOP", id)?;
            self.node_mut(id).paused = true;
        }
        Ok(())
    }

    /// SIGCONT.
    pub fn resume(&mut self, id: u64) -> Result<(), ChaosError> {
        self.log_line(id, "SIGCONT");
        if let Some(pid) = self.node(id).child.as_ref().map(Child::id) {
            signal(pid, "CONT", id)?;
        }
        self.node_mut(id).paused = false;
        Ok(())
    }

    /// Starts a stopped node on its data folder (with its own command) and waits until it
    /// is ready.
    pub async fn restart(&mut self, id: u64) -> Result<(), ChaosError> {
        if self.node(id).child.is_none() {
            self.spawn(id, Launch::Original)?;
        }
        self.wait_ready(id).await
    }

    /// Nodes started from now on use `storm`'s snapshot settings (running ones keep theirs
    /// until restarted).
    pub fn set_snapshot_storm(&mut self, storm: SnapshotStorm) {
        self.storm = Some(storm);
    }

    /// Nodes (re)started from now on may take `within` to be ready.
    pub fn set_ready_within(&mut self, within: Duration) {
        self.ready_within = within;
    }

    /// Node `id` is started from now on with the environment variable `name` set to
    /// `value` (`None`: no longer set). Running processes keep theirs until restarted.
    pub fn set_env(&mut self, id: u64, name: &str, value: Option<String>) {
        let vars = self.env.entry(id).or_default();
        vars.retain(|(n, _)| n != name);
        if let Some(value) = value {
            vars.push((name.to_owned(), value));
        }
    }

    /// The history's incarnation of node `id` starts over: its data went backwards, so the
    /// indexes it answers with may too.
    fn new_incarnation(&self, id: u64) {
        self.incarnations[(id - 1) as usize].fetch_add(1, Ordering::SeqCst);
    }

    /// Kills node `id` and wipes its data folder (its incarnation is gone).
    pub fn kill_and_wipe(&mut self, id: u64) -> Result<(), ChaosError> {
        self.kill(id);
        let data = self.node(id).data.clone();
        self.log_line(id, "wipe data folder");
        remove_dir(&data)?;
        self.new_incarnation(id);
        Ok(())
    }

    /// Node `id`, stopped, loses its Raft state only: the [`RAFT_STATE_DIR`] folder is
    /// removed, and everything else in its data folder (`identity.json`, `signing.key`,
    /// snapshots) is kept, as after a lost volume that held only the database.
    pub fn lose_raft_state(&mut self, id: u64) -> Result<(), ChaosError> {
        let raft = self.node(id).data.join(RAFT_STATE_DIR);
        self.log_line(id, &format!("remove {}", raft.display()));
        remove_dir(&raft)?;
        self.new_incarnation(id);
        Ok(())
    }

    /// A copy of node `id`'s data folder as a crash at this moment would leave it: the
    /// process is frozen (SIGSTOP) while the folder is copied to `to`, then continues.
    pub fn copy_folder(&mut self, id: u64, to: &Path) -> Result<(), ChaosError> {
        let data = self.node(id).data.clone();
        self.log_line(id, &format!("copy data folder to {}", to.display()));
        remove_dir(to)?;
        self.pause(id)?;
        let copied = copy_dir(&data, to);
        // Continue it whatever the copy did.
        self.resume(id)?;
        copied
    }

    /// Kills node `id` and puts `copy` (from [`Cluster::copy_folder`]) in place of its data
    /// folder, as a restore from a backup or a volume snapshot would. The node is left
    /// stopped.
    pub fn restore_folder(&mut self, id: u64, copy: &Path) -> Result<(), ChaosError> {
        self.kill(id);
        let data = self.node(id).data.clone();
        self.log_line(id, &format!("restore data folder from {}", copy.display()));
        remove_dir(&data)?;
        copy_dir(copy, &data)?;
        self.new_incarnation(id);
        Ok(())
    }

    /// The unsafe procedure an operator (or a StatefulSet) might follow: node `id` is
    /// killed, wiped and started again under its old id, its old self never removed: with
    /// `--join <a live member>`, or (`original`) with its own command. Waits (bounded) to
    /// see whether the cluster refused it; the node is left as it is (running if let in).
    pub async fn wipe_and_rejoin_unsafely(
        &mut self,
        id: u64,
        original: bool,
    ) -> Result<Admission, ChaosError> {
        self.kill_and_wipe(id)?;
        let launch = if original {
            Launch::Original
        } else {
            let Some(via) = self.live_member_other_than(id).map(|n| n.grpc) else {
                return Ok(Admission::Undecided);
            };
            Launch::Rejoin(via)
        };
        let logged_before = self.logged(id);
        self.spawn(id, launch)?;
        Ok(self.admission(id, logged_before, READY_WITHIN).await)
    }

    /// A running node other than `id`, not paused.
    fn live_member_other_than(&self, id: u64) -> Option<&Node> {
        self.nodes
            .iter()
            .find(|n| n.id != id && n.is_up() && !n.paused)
    }

    /// Every node's log length now ([`Cluster::logged`]), to see later what each logged since.
    pub fn log_marks(&self) -> BTreeMap<u64, u64> {
        self.ids()
            .into_iter()
            .map(|id| (id, self.logged(id)))
            .collect()
    }

    /// Nodes whose log shows a panic after `marks`, each with the panic's message (a Raft
    /// core that panics leaves the process serving HTTP, never ready).
    pub fn panicked_since(&self, marks: &BTreeMap<u64, u64>) -> Vec<(u64, String)> {
        let mut out = Vec::new();
        for (&id, &mark) in marks {
            let log = std::fs::read(&self.node(id).log).unwrap_or_default();
            let since =
                String::from_utf8_lossy(log.get(mark as usize..).unwrap_or(&[])).into_owned();
            let mut lines = since.lines();
            if lines.any(|l| l.contains("panicked at")) {
                let message = lines.next().unwrap_or("").trim().to_owned();
                out.push((id, message));
            }
        }
        out
    }

    /// How many bytes node `id`'s log holds now: what a start logs after this counts.
    pub fn logged(&self, id: u64) -> u64 {
        std::fs::metadata(&self.node(id).log).map_or(0, |m| m.len())
    }

    /// Watches node `id`, just started on a lost, wiped or older folder, for up to `within`:
    /// until it exits (with or without advice in what it logged after `logged_before`), is
    /// kept out (`standing: behind`), or becomes ready as itself. A node still `verifying`
    /// its standing is not decided yet. The node is left as it is.
    pub async fn admission(&mut self, id: u64, logged_before: u64, within: Duration) -> Admission {
        let deadline = Instant::now() + within;
        loop {
            if self.check_alive(id).is_err() {
                // Only what this start logged counts.
                let log = std::fs::read(&self.node(id).log).unwrap_or_default();
                let said =
                    String::from_utf8_lossy(log.get(logged_before as usize..).unwrap_or(&[]))
                        .contains(&format!("DELETE /api/cluster/members/{id}"));
                return if said {
                    Admission::RefusedWithAdvice
                } else {
                    Admission::RefusedSilently
                };
            }
            let status = self.status(id).await;
            let standing = status
                .as_ref()
                .and_then(|s| s["standing"].as_str().map(str::to_owned));
            match standing.as_deref() {
                Some("behind") if !self.is_ready(id).await => {
                    let reason = status
                        .as_ref()
                        .and_then(|s| s["standing_reason"].as_str())
                        .unwrap_or("no reason given")
                        .to_owned();
                    return Admission::KeptOut { reason };
                }
                // Still checking with its peers: wait for the verdict.
                Some("verifying") => {}
                _ => {
                    let itself = status.and_then(|s| s["node_id"].as_u64()) == Some(id);
                    if itself && self.is_ready(id).await {
                        return Admission::Accepted;
                    }
                }
            }
            if Instant::now() >= deadline {
                return Admission::Undecided;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Node `id` loses its disk: killed, removed from the membership, its data folder
    /// wiped, then started fresh (with `--join`) and waited for until it is a member again.
    pub async fn wipe_and_rejoin(&mut self, id: u64) -> Result<(), ChaosError> {
        self.kill(id);
        let Some((other_url, via)) = self.live_member_other_than(id).map(|n| (n.url(), n.grpc))
        else {
            return Ok(());
        };
        // Remove it (retry while the cluster elects or reconfigures).
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let removed = self
                .http
                .delete(format!("{other_url}/api/cluster/members/{id}"))
                .header("x-terminal-key", ADMIN_KEY)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success() || r.status() == 409);
            let still = self
                .member_ids(&other_url)
                .await
                .is_none_or(|ids| ids.contains(&id));
            if removed && !still {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.kill_and_wipe(id)?;
        self.join(id, Launch::Rejoin(via)).await
    }

    /// Starts node `id` fresh by `launch` (unless it runs), and waits until it is ready and
    /// a voter (or a learner, if it is one) in the membership every other member sees. A
    /// join refused because another membership change is still under way makes the node
    /// exit; it is retried on a clean folder.
    async fn join(&mut self, id: u64, launch: Launch) -> Result<(), ChaosError> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.join_once(id, launch).await {
                Ok(()) => return Ok(()),
                Err(ChaosError::Exited { .. }) if attempts < 5 => {
                    let data = self.node(id).data.clone();
                    let _ = std::fs::remove_dir_all(&data);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn join_once(&mut self, id: u64, launch: Launch) -> Result<(), ChaosError> {
        if self.node(id).child.is_none() {
            self.spawn(id, launch)?;
        }
        self.wait_ready(id).await?;
        // The next membership change may start only when this one is committed everywhere.
        let deadline = Instant::now() + self.ready_within;
        while Instant::now() < deadline {
            self.check_alive(id)?;
            let mut settled = true;
            let learner = self.learners.contains(&id);
            for node in self.nodes.iter().filter(|n| n.is_up() && !n.paused) {
                let known = self.member_list(&node.url(), !learner).await;
                settled &= known.is_some_and(|v| v.contains(&id));
            }
            if settled {
                // A node whose join was refused after all exits shortly after.
                tokio::time::sleep(Duration::from_millis(300)).await;
                return self.check_alive(id);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(ChaosError::NotReady {
            id,
            waited_s: self.ready_within.as_secs(),
            log: self.node(id).log.clone(),
        })
    }

    /// Member ids as node at `url` sees them.
    async fn member_ids(&self, url: &str) -> Option<Vec<u64>> {
        self.member_list(url, false).await
    }

    /// Ids of the members (only voters, with `voters_only`) the node at `url` knows.
    async fn member_list(&self, url: &str, voters_only: bool) -> Option<Vec<u64>> {
        let status: Value = self
            .http
            .get(format!("{url}/api/cluster"))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        Some(
            status["members"]
                .as_array()?
                .iter()
                .filter(|m| !voters_only || m["voter"].as_bool() == Some(true))
                .filter_map(|m| m["id"].as_u64())
                .collect(),
        )
    }

    /// Node `id`'s `/api/cluster` answer (short timeout).
    pub async fn status(&self, id: u64) -> Option<Value> {
        let node = self.node(id);
        if !node.is_up() || node.paused {
            return None;
        }
        self.http
            .get(format!("{}/api/cluster", node.url()))
            .header("x-terminal-key", ADMIN_KEY)
            .timeout(Duration::from_millis(800))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()
    }

    /// The highest term any running node knows (`None`: none answered).
    pub async fn highest_term(&self) -> Option<u64> {
        let mut highest = None;
        for id in self.ids() {
            if let Some(term) = self.status(id).await.and_then(|s| s["term"].as_u64()) {
                highest = highest.max(Some(term));
            }
        }
        highest
    }

    /// Whether node `id` answers `/readyz` with 200.
    pub async fn is_ready(&self, id: u64) -> bool {
        self.http
            .get(format!("{}/readyz", self.node(id).url()))
            .timeout(Duration::from_millis(800))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    }

    /// Members as node `id` sees them.
    pub async fn members(&self, id: u64) -> Option<Vec<u64>> {
        self.member_ids(&self.node(id).url()).await
    }

    /// The leader most running, unpaused nodes name (asked in parallel, short timeouts).
    pub async fn leader(&self) -> Option<u64> {
        let asks = self
            .nodes
            .iter()
            .filter(|n| n.is_up() && !n.paused)
            .map(|n| {
                let http = self.http.clone();
                let url = format!("{}/api/cluster", n.url());
                async move {
                    let r = http
                        .get(url)
                        .timeout(Duration::from_millis(800))
                        .send()
                        .await
                        .ok()?;
                    let v: Value = r.json().await.ok()?;
                    if v["stale"].as_bool() == Some(true) {
                        return None;
                    }
                    v["leader"].as_u64()
                }
            });
        let mut votes: std::collections::BTreeMap<u64, usize> = Default::default();
        for handle in asks.map(tokio::spawn).collect::<Vec<_>>() {
            if let Ok(Some(leader)) = handle.await {
                *votes.entry(leader).or_default() += 1;
            }
        }
        votes.into_iter().max_by_key(|(_, n)| *n).map(|(id, _)| id)
    }

    /// Waits (bounded) for a leader to be known.
    pub async fn await_leader(&self, within: Duration) -> Option<u64> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(leader) = self.leader().await {
                return Some(leader);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Nodes whose process exited by itself since the harness last looked (they are then
    /// known as stopped, and healing starts them again).
    pub fn exited(&mut self) -> Vec<u64> {
        self.ids()
            .into_iter()
            .filter(|&id| self.check_alive(id).is_err())
            .collect()
    }

    /// The value of the counter or gauge `name` (its first sample, whatever its labels) on
    /// node `id`'s `/metrics`; 0 when the node has not reported it yet, `None` when it did
    /// not answer.
    pub async fn metric(&self, id: u64, name: &str) -> Option<f64> {
        let text = self
            .http
            .get(format!("{}/metrics", self.node(id).url()))
            .header("x-terminal-key", ADMIN_KEY)
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        Some(sample(&text, name).unwrap_or(0.0))
    }

    /// Node `id`'s convergence digest (`/api/cluster/digest`: applied index, row and receipt
    /// counts and hashes).
    pub async fn digest(&self, id: u64) -> Option<Value> {
        self.http
            .get(format!("{}/api/cluster/digest", self.node(id).url()))
            .header("x-terminal-key", ADMIN_KEY)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()
    }

    /// Every row's `updated_at` on node `id`, parsed (rows whose stamp does not parse are
    /// left out); `None` when it did not answer.
    pub async fn updated_at(&self, id: u64) -> Option<Vec<(String, std::time::SystemTime)>> {
        let url = self.node(id).url();
        let mut out = Vec::new();
        let mut cursor = String::new();
        // Bounded: at most 1,000 pages of 1,000 rows.
        for _ in 0..1_000 {
            let page: Value = self
                .http
                .get(format!("{url}/api/directory?limit=1000&cursor={cursor}"))
                .header("x-terminal-key", ADMIN_KEY)
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            for row in page["rows"].as_array()? {
                let stamp = row["updated_at"]
                    .as_str()
                    .map(humantime::parse_rfc3339_weak);
                if let (Some(key), Some(Ok(at))) = (row["key"].as_str(), stamp) {
                    out.push((key.to_owned(), at));
                }
            }
            match page["next_cursor"].as_str() {
                Some(next) if !next.is_empty() => cursor = next.to_owned(),
                _ => break,
            }
        }
        Some(out)
    }

    /// The cluster id each running, unpaused node reports (`None`: no answer, or in none).
    pub async fn cluster_ids(&self) -> BTreeMap<u64, Option<String>> {
        let mut ids = BTreeMap::new();
        for id in self.ids() {
            if self.node(id).is_up() && !self.node(id).paused {
                let cluster = self
                    .status(id)
                    .await
                    .and_then(|s| s["cluster_id"].as_str().map(str::to_owned));
                ids.insert(id, cluster);
            }
        }
        ids
    }

    /// Makes node `target` the leader: as an operator does, by asking the leader to hand
    /// leadership over (`POST /api/cluster/leader`). Should that fail (the target behind, a
    /// node that predates the call), by force: once the target's log is level with the
    /// leader's (a voter refuses a candidate with less log), the other nodes' outgoing links
    /// are cut, so none of them can stand for election while all still answer the target;
    /// the leader is killed, the target wins the election, the links heal and the old
    /// leader starts again. A few tries.
    pub async fn make_leader(&mut self, target: u64) -> Result<(), ChaosError> {
        const TRIES: usize = 3;
        for _ in 0..TRIES {
            let Some(leader) = self.await_leader(Duration::from_secs(5)).await else {
                continue;
            };
            if leader == target || self.move_leader(leader, target).await {
                return Ok(());
            }
            self.await_level(target, leader, Duration::from_secs(5))
                .await;
            self.set_links(|from, _| (from != target).then(LinkState::blackhole));
            self.kill(leader);
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                let leads = self
                    .status(target)
                    .await
                    .is_some_and(|s| s["role"].as_str() == Some("leader"));
                if leads {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            self.heal_links();
            self.restart(leader).await?;
        }
        match self.await_leader(Duration::from_secs(5)).await {
            Some(leader) if leader == target => Ok(()),
            found => Err(ChaosError::NotMadeLeader {
                id: target,
                tries: TRIES,
                leader: found,
            }),
        }
    }

    /// Asks node `via` to move leadership to `target`; whether `target` leads after.
    async fn move_leader(&self, via: u64, target: u64) -> bool {
        let moved = self
            .http
            .post(format!("{}/api/cluster/leader", self.node(via).url()))
            .header("x-terminal-key", ADMIN_KEY)
            .json(&serde_json::json!({ "to": target }))
            .timeout(Duration::from_secs(8))
            .send()
            .await;
        match moved {
            Ok(r) if r.status().is_success() => {
                let body: Option<Value> = r.json().await.ok();
                body.is_some_and(|b| b["leader"].as_u64() == Some(target))
            }
            _ => false,
        }
    }

    /// Waits (bounded) until node `target` takes part and its log reaches the end the
    /// leader's had when asked; gives up quietly (the election then decides).
    async fn await_level(&self, target: u64, leader: u64, within: Duration) {
        let index = |s: &Value| s["last_log_index"].as_u64().unwrap_or(0);
        let Some(end) = self.status(leader).await.map(|s| index(&s)) else {
            return;
        };
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            let level = self
                .status(target)
                .await
                .is_some_and(|s| s["standing"].as_str() == Some("ok") && index(&s) >= end);
            if level {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sets every link for which `state` answers.
    pub fn set_links(&self, mut state: impl FnMut(u64, u64) -> Option<LinkState>) {
        for link in &self.links {
            if let Some(s) = state(link.from, link.to) {
                link.set(s);
            }
        }
    }

    /// Every link passes again.
    pub fn heal_links(&self) {
        self.set_links(|_, _| Some(LinkState::pass()));
    }

    /// Heals everything: links pass, paused nodes continue, stopped nodes start.
    pub async fn heal_all(&mut self) -> Vec<String> {
        self.heal_links();
        let mut problems = Vec::new();
        for id in self.ids() {
            if self.node(id).paused {
                if let Err(e) = self.resume(id) {
                    problems.push(e.to_string());
                }
            }
            if !self.node(id).is_up() {
                if let Err(e) = self.restart(id).await {
                    problems.push(e.to_string());
                }
            }
        }
        problems
    }

    /// Writes the rows every session invokes, retrying until the cluster takes them.
    async fn write_shared_rows(&self) -> Result<(), ChaosError> {
        let url = self.nodes[0].url();
        for i in 0..SHARED_ROWS {
            let key = shared_row(i);
            let row = json!({"key": key, "type": "static", "auth": "public", "category": "chaos",
                "content": format!("# WHAT: chaos shared row {i}\n\n{{\"shared\":{i}}}\n")});
            let mut detail = String::new();
            let mut done = false;
            for _ in 0..50 {
                match self
                    .http
                    .post(format!("{url}/api/directory"))
                    .header("x-terminal-key", ADMIN_KEY)
                    .json(&row)
                    .send()
                    .await
                {
                    Ok(r) if r.status().is_success() => {
                        done = true;
                        break;
                    }
                    Ok(r) => detail = format!("HTTP {}", r.status()),
                    Err(e) => detail = e.to_string(),
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if !done {
                return Err(ChaosError::Setup { what: key, detail });
            }
        }
        Ok(())
    }
}

/// The flags that say how node `id` of `nodes` (id, gRPC address) enters a cluster when
/// started by `launch`, in `form`.
fn entry_flags(
    form: StartForm,
    nodes: &[(u64, SocketAddr)],
    learners: &[u64],
    id: u64,
    launch: Launch,
) -> Vec<String> {
    let learner = learners.contains(&id);
    let joins = |peers: Vec<SocketAddr>| {
        let list: Vec<String> = peers.iter().map(SocketAddr::to_string).collect();
        let mut flags = vec!["--join".to_owned(), list.join(",")];
        if learner {
            flags.push("--learner".to_owned());
        }
        flags
    };
    let Some(&(_, node1)) = nodes.first() else {
        return Vec::new();
    };
    match (form, launch) {
        // The same command on every start: it names every other initial voter, so a node
        // on a fresh folder finds its peers' cluster (or founds it with them, once).
        (StartForm::Peers, _) if !learner => {
            let voters: Vec<SocketAddr> = nodes
                .iter()
                .filter(|(other, _)| *other != id && !learners.contains(other))
                .map(|&(_, grpc)| grpc)
                .collect();
            let mut flags = vec!["--bootstrap".to_owned()];
            if !voters.is_empty() {
                flags.extend(joins(voters));
            }
            flags
        }
        (StartForm::FounderAlone, Launch::Original) if id == 1 => vec!["--bootstrap".to_owned()],
        (_, Launch::Original) => joins(vec![node1]),
        (_, Launch::Rejoin(via)) => joins(vec![via]),
    }
}

/// Removes `path` and everything under it; nothing to do if it is not there.
fn remove_dir(path: &Path) -> Result<(), ChaosError> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ChaosError::io(format!("remove {}", path.display()), e)),
    }
}

/// Copies the folder `from` to `to` (which must not exist), files and sub-folders, keeping
/// the permissions (a data folder is readable by its user only).
fn copy_dir(from: &Path, to: &Path) -> Result<(), ChaosError> {
    let io = |what: &str, path: &Path| {
        let what = format!("{what} {}", path.display());
        move |e| ChaosError::io(what, e)
    };
    std::fs::create_dir_all(to).map_err(io("create", to))?;
    let permissions = std::fs::metadata(from)
        .map_err(io("read", from))?
        .permissions();
    std::fs::set_permissions(to, permissions).map_err(io("set permissions of", to))?;
    for entry in std::fs::read_dir(from).map_err(io("list", from))? {
        let entry = entry.map_err(io("list", from))?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type().map_err(io("read", &source))?.is_dir() {
            copy_dir(&source, &target)?;
        } else {
            std::fs::copy(&source, &target).map_err(io("copy", &source))?;
        }
    }
    Ok(())
}

/// The node binary next to this executable (`target/<profile>/rowcall-node`), or `given`.
pub fn node_binary(given: Option<&Path>) -> Result<PathBuf, ChaosError> {
    let path = match given {
        Some(path) => path.to_path_buf(),
        None => {
            let exe =
                std::env::current_exe().map_err(|e| ChaosError::io("find own executable", e))?;
            let dir = exe.parent().unwrap_or(Path::new("."));
            let name = format!("rowcall-node{}", std::env::consts::EXE_SUFFIX);
            // Tests run from target/<profile>/deps: look one folder up too.
            let here = dir.join(&name);
            if here.is_file() {
                here
            } else {
                dir.parent().map_or(here.clone(), |p| p.join(&name))
            }
        }
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(ChaosError::NodeBinaryMissing { path })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_read_with_or_without_labels_and_never_by_a_longer_name() {
        let text = "# HELP rowcall_resolver_index_bytes Approximate heap bytes.\n\
                    rowcall_resolver_index_bytes_total 5\n\
                    rowcall_resolver_index_bytes{node=\"2\"} 1.5e6\n\
                    rowcall_catalogue_rows_bytes 42\n";
        assert_eq!(sample(text, "rowcall_resolver_index_bytes"), Some(1.5e6));
        assert_eq!(sample(text, "rowcall_catalogue_rows_bytes"), Some(42.0));
        assert_eq!(sample(text, "rowcall_missing"), None);
    }

    #[test]
    fn every_start_of_a_node_uses_the_command_of_its_start_form() {
        let addr = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
        let nodes = [
            (1, addr(9081)),
            (2, addr(9082)),
            (3, addr(9083)),
            (4, addr(9084)),
        ];
        let learners = [4];
        let flags = |form, id, launch| entry_flags(form, &nodes, &learners, id, launch).join(" ");
        // Peers: every voter names every other initial voter, on any start.
        let peers = StartForm::Peers;
        assert_eq!(
            flags(peers, 1, Launch::Original),
            "--bootstrap --join 127.0.0.1:9082,127.0.0.1:9083"
        );
        assert_eq!(
            flags(peers, 3, Launch::Original),
            "--bootstrap --join 127.0.0.1:9081,127.0.0.1:9082"
        );
        assert_eq!(
            flags(peers, 1, Launch::Rejoin(addr(9082))),
            flags(peers, 1, Launch::Original)
        );
        assert_eq!(
            flags(peers, 4, Launch::Original),
            "--join 127.0.0.1:9081 --learner"
        );
        assert_eq!(
            flags(peers, 4, Launch::Rejoin(addr(9083))),
            "--join 127.0.0.1:9083 --learner"
        );
        // One node alone: founds, no peers.
        assert_eq!(
            entry_flags(peers, &nodes[..1], &[], 1, Launch::Original),
            ["--bootstrap"]
        );
        // Founder alone: the older form.
        let alone = StartForm::FounderAlone;
        assert_eq!(flags(alone, 1, Launch::Original), "--bootstrap");
        assert_eq!(flags(alone, 2, Launch::Original), "--join 127.0.0.1:9081");
        assert_eq!(
            flags(alone, 1, Launch::Rejoin(addr(9083))),
            "--join 127.0.0.1:9083"
        );
    }

    #[test]
    fn a_copied_folder_holds_every_file_and_a_restore_replaces_the_folder() {
        let root = std::env::temp_dir().join(format!("rowcall-chaos-copy-{}", std::process::id()));
        let data = root.join("data");
        std::fs::create_dir_all(data.join("sled/blobs")).unwrap();
        std::fs::write(data.join("identity.json"), "{}").unwrap();
        std::fs::write(data.join("sled/db"), "old").unwrap();
        std::fs::write(data.join("sled/blobs/1"), "blob").unwrap();
        let copy = root.join("data-copy");
        copy_dir(&data, &copy).unwrap();
        std::fs::write(data.join("sled/db"), "new").unwrap();
        remove_dir(&data).unwrap();
        copy_dir(&copy, &data).unwrap();
        assert_eq!(
            std::fs::read_to_string(data.join("sled/db")).unwrap(),
            "old"
        );
        assert_eq!(
            std::fs::read_to_string(data.join("sled/blobs/1")).unwrap(),
            "blob"
        );
        assert!(data.join("identity.json").is_file());
        remove_dir(&root).unwrap();
        remove_dir(&root).unwrap();
    }

    /// A stand-in node: a process that stays up (`sleep`) and an HTTP listener answering
    /// `/api/cluster` with `status` and `/readyz` with `ready`.
    async fn stand_in(status: Value, ready: u16) -> Cluster {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let status = status.clone();
                tokio::spawn(async move {
                    let mut request = vec![0; 4096];
                    let n = socket.read(&mut request).await.unwrap_or(0);
                    let request = String::from_utf8_lossy(&request[..n]);
                    let (code, body) = if request.starts_with("GET /readyz") {
                        (ready, String::new())
                    } else {
                        (200, status.to_string())
                    };
                    let answer = format!(
                        "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(answer.as_bytes()).await;
                });
            }
        });
        let root = std::env::temp_dir().join(format!("rowcall-chaos-stand-in-{}", http.port()));
        let child = Command::new("sleep").arg("30").spawn().unwrap();
        Cluster {
            bin: PathBuf::from("sleep"),
            snapshot_every: 0,
            storm: None,
            ready_within: READY_WITHIN,
            peer_tls: None,
            ca: None,
            nodes: vec![Node {
                id: 1,
                http,
                grpc: http,
                data: root.join("data"),
                log: root.join("node.log"),
                child: Some(child),
                paused: false,
            }],
            links: Vec::new(),
            incarnations: Arc::new(vec![AtomicU32::new(0)]),
            learners: Vec::new(),
            form: StartForm::Peers,
            config_file: None,
            env: BTreeMap::new(),
            http: control_client(),
            started: Instant::now(),
        }
    }

    #[tokio::test]
    async fn a_node_that_stays_up_behind_is_kept_out_and_a_ready_one_let_in() {
        let within = Duration::from_secs(5);
        // The lead's contract: standing behind, with a reason, and /readyz failing.
        let mut behind = stand_in(
            json!({"node_id": 1, "standing": "behind", "standing_reason": "older than it told its peers"}),
            503,
        )
        .await;
        assert_eq!(
            behind.admission(1, 0, within).await,
            Admission::KeptOut {
                reason: "older than it told its peers".into()
            }
        );
        // Ready as itself (today's node code has no standing at all).
        let mut accepted = stand_in(json!({"node_id": 1}), 200).await;
        assert_eq!(accepted.admission(1, 0, within).await, Admission::Accepted);
        let mut ok = stand_in(json!({"node_id": 1, "standing": "ok"}), 200).await;
        assert_eq!(ok.admission(1, 0, within).await, Admission::Accepted);
        // Still verifying (even if it said ready), or ready as another node: not decided.
        let short = Duration::from_millis(300);
        let mut verifying = stand_in(json!({"node_id": 1, "standing": "verifying"}), 200).await;
        assert_eq!(verifying.admission(1, 0, short).await, Admission::Undecided);
        let mut other = stand_in(json!({"node_id": 2}), 200).await;
        assert_eq!(other.admission(1, 0, short).await, Admission::Undecided);
        // A node that exited, its log naming the removal it needs.
        let mut exited = stand_in(json!({"node_id": 1}), 503).await;
        std::fs::create_dir_all(exited.node(1).log.parent().unwrap()).unwrap();
        std::fs::write(&exited.node(1).log, "old\n").unwrap();
        let mark = exited.logged(1);
        std::fs::write(
            &exited.node(1).log,
            "old\nrefused: remove the old member first: DELETE /api/cluster/members/1\n",
        )
        .unwrap();
        exited.kill(1);
        // kill() forgets the child; a real exit is noticed by check_alive: start one that ends.
        exited.nodes[0].child = Some(Command::new("true").spawn().unwrap());
        assert_eq!(
            exited.admission(1, mark, within).await,
            Admission::RefusedWithAdvice
        );
        exited.nodes[0].child = Some(Command::new("true").spawn().unwrap());
        let end = exited.logged(1);
        assert_eq!(
            exited.admission(1, end, within).await,
            Admission::RefusedSilently
        );
        let _ = std::fs::remove_dir_all(exited.node(1).log.parent().unwrap());
    }

    #[test]
    fn node_ports_are_distinct_and_below_the_outgoing_range() {
        let ports = free_ports(6).unwrap();
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), 6, "{ports:?}");
        if let Some(floor) = ephemeral_floor() {
            assert!(ports.iter().all(|&p| p < floor), "{ports:?} below {floor}");
        }
        for port in ports {
            TcpListener::bind(("127.0.0.1", port)).expect("free");
        }
    }
}
