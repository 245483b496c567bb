//! Configuration: defaults, then an optional TOML file, then `ROWCALL_*` environment
//! variables, then command-line flags (DESIGN §7.1). One documented struct per subsystem.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Everything a node needs to start.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Identity, addresses and data folder.
    pub node: NodeConfig,
    /// Founding or joining a cluster.
    pub cluster: ClusterConfig,
    /// Credentials.
    pub auth: AuthConfig,
    /// Request limits.
    pub limits: LimitsConfig,
    /// Raft timing and snapshot policy.
    pub raft: RaftConfig,
    /// The http and mcp runners: timeouts, caps, the SSRF allow-list, per-row headers.
    pub runners: RunnersConfig,
    /// Share tokens (the `share=` of `run_now` links).
    pub share: ShareConfig,
    /// The MCP projection (`/api/mcp`).
    pub mcp: McpConfig,
    /// How writes reach the disk.
    pub storage: StorageConfig,
    /// How long receipts are kept.
    pub receipts: ReceiptsConfig,
    /// How the node writes its log (stderr).
    pub log: LogConfig,
    /// Traces exported to an OpenTelemetry collector.
    pub tracing: TracingConfig,
    /// The resolver's sentence-embedding model (none: lexical ranking only).
    pub resolver: ResolverConfig,
    /// Fault injection for tests and the chaos harness only; never set in production.
    pub testing: TestingConfig,
}

/// Knobs for tests and the chaos harness only. A node started with any of them set logs a
/// warning saying so.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TestingConfig {
    /// Shifts this node's wall clock by this many milliseconds (positive: fast), wherever
    /// the node reads the time of day ([`crate::model::time::now_ms`]): to play a node
    /// whose clock jumped. `ROWCALL_TEST_CLOCK_OFFSET_MS` sets it too.
    pub clock_offset_ms: i64,
}

/// The resolver's model (DESIGN §6). Without one, ask ranks by words alone (BM25F); with
/// one, by words and meaning: BM25F fused with the cosine of sentence embeddings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResolverConfig {
    /// Folder of a sentence-transformers model (all-MiniLM-L6-v2 or a BERT relative:
    /// `config.json`, `tokenizer.json`, `model.safetensors`); `deploy/fetch-model.sh` makes
    /// one. `ROWCALL_EMBED_MODEL` sets it too.
    pub model: Option<PathBuf>,
    /// How asks are embedded: `model` (the full forward pass, the default) or `static`
    /// (distilled token vectors: microseconds, less accurate). `ROWCALL_QUERY_EMBEDDING`.
    pub query_embedding: crate::catalogue::embed::QueryMode,
    /// How the model's linear layers hold their weights: `q8` (the default: quantized at
    /// load to 8-bit blocks, integer products; as good on the public sets and faster) or
    /// `f32` (as the folder has them). Set it alike on every node.
    /// `ROWCALL_EMBED_WEIGHTS`.
    pub weights: crate::catalogue::embed::Weights,
    /// Learn from use (on by default): an ask followed within two minutes, by the same
    /// caller, by an invocation of one of its candidates teaches the resolver the ask's
    /// words for that row, through the invocation's receipt. `ROWCALL_RESOLVER_LEARN=off`
    /// turns it off on a node (set it alike on every node, or they rank differently).
    pub learn: bool,
}

impl Default for ResolverConfig {
    fn default() -> Self {
        Self {
            model: None,
            query_embedding: Default::default(),
            weights: Default::default(),
            learn: true,
        }
    }
}

/// Traces (off by default). With an endpoint, the node exports the spans of the requests it
/// serves over OTLP/gRPC ([`crate::telemetry`]): a span whose caller sent a W3C
/// `traceparent` joins the caller's trace, and a write a follower forwards continues its
/// trace on the leader.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TracingConfig {
    /// The collector's OTLP/gRPC address, `http://HOST:PORT` (a collector or agent beside
    /// the node, usually port 4317). None: no traces are exported.
    pub otlp_endpoint: Option<String>,
}

/// The node's log on stderr. The level comes from `ROWCALL_LOG` (an `EnvFilter`, default
/// `info,openraft=warn,sled=warn`); every line written while a request is served names its
/// `request_id` ([`crate::trace`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `text` (for people) or `json` (one object per line, for log pipelines).
    pub format: LogFormat,
}

/// The shape of a log line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// Human-readable lines, coloured on a terminal.
    #[default]
    Text,
    /// One JSON object per line: time, level, target, message, fields, and the spans (the
    /// request's id among them).
    Json,
}

/// Receipt retention. Off by default: receipts are kept for good (DESIGN §2.2), and the log
/// grows with every invocation. With a rule set, the leader drops receipts that fall under
/// it, on every node at once (through Raft), every `prune_every_secs`. A dropped receipt no
/// longer confirms (`confirmed: false`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReceiptsConfig {
    /// Drop receipts older than this many days (0: no age rule).
    pub max_age_days: u64,
    /// The age rule in seconds, for tests and short chaos runs; when not 0 it replaces
    /// `max_age_days`. `ROWCALL_RECEIPTS_MAX_AGE_SECS` sets it too.
    pub max_age_secs: u64,
    /// Keep at most this many receipts per row key, newest first (0: no count rule).
    pub keep_per_key: u32,
    /// Seconds between two runs of the policy.
    pub prune_every_secs: u64,
    /// Receipts dropped by one log entry at most (a run writes as many entries as needed).
    pub prune_batch: u32,
    /// Milliseconds between two checkpoints of the receipt log the leader starts while it
    /// grows (0: only when asked, by POST /api/receipts/checkpoint).
    pub checkpoint_every_ms: u64,
}

impl Default for ReceiptsConfig {
    fn default() -> Self {
        Self {
            max_age_days: 0,
            max_age_secs: 0,
            keep_per_key: 0,
            prune_every_secs: 600,
            prune_batch: 5_000,
            checkpoint_every_ms: 1_000,
        }
    }
}

/// How writes reach the disk, and how much memory the database may keep for its cache.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// `fdatasync` (the default): nothing is acknowledged before an fdatasync/fsync of every
    /// file it wrote has returned, so acknowledged writes survive a power loss.
    /// `sled-flush`: sled's own flush only (`sync_file_range` on Linux), which survives a
    /// crash of the process but not of the machine: for measuring what durability costs,
    /// never for data you keep.
    pub sync: SyncMode,
    /// Megabytes of sled's page cache (`ROWCALL_STORAGE_CACHE_MB`). sled's own default is
    /// 1 GiB, and resident memory follows the cache as it fills, never giving it back: the
    /// default here suits a small VM. Reads past the cache go to the page cache of the OS.
    pub cache_mb: u64,
    /// Whether sled compresses its pages (zstd; `ROWCALL_STORAGE_COMPRESSION`, off by
    /// default): about half the disk per invocation, for about 0.6x the invocations per
    /// second where the CPU is the bound (measured in the performance chapter). A database
    /// written the other way is converted once when the node starts, which needs room for a
    /// copy of it ([`crate::store::compression`]).
    pub compression: bool,
    /// Rewrite the database with its live data alone when the node starts
    /// (`rowcall-node --defragment`; not a file setting): gives back the space sled keeps
    /// after deletes, such as receipts retention pruned.
    #[serde(skip)]
    pub defragment: bool,
    /// Bytes the data folder may hold (`ROWCALL_STORAGE_QUOTA_BYTES`; 0: no quota). Past it
    /// the node raises a storage alarm through Raft, and while any member holds one every
    /// node refuses row writes and invocations (507), serving reads, asks, confirms, deletes
    /// and retention ([`crate::cluster::space`]). As etcd's, it is a bound well below the
    /// disk, not the disk: the default suits a small VM's disk.
    pub quota_bytes: u64,
    /// Bytes that must stay free on the disk that holds the data folder
    /// (`ROWCALL_STORAGE_MIN_FREE_BYTES`): below it the node raises the same alarm, whatever
    /// its quota, so it is refusing before the disk is full rather than after.
    pub min_free_bytes: u64,
    /// How often the node measures its folder and disk, in ms.
    pub check_space_every_ms: u64,
}

/// Megabytes of sled cache when the configuration names none.
pub const DEFAULT_CACHE_MB: u64 = 64;
/// The data folder's quota when the configuration names none: 8 GiB, etcd's suggested
/// largest.
pub const DEFAULT_QUOTA_BYTES: u64 = 8 << 30;
/// Free bytes a disk keeps when the configuration names none.
pub const DEFAULT_MIN_FREE_BYTES: u64 = 256 << 20;

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            sync: SyncMode::default(),
            cache_mb: DEFAULT_CACHE_MB,
            compression: false,
            defragment: false,
            quota_bytes: DEFAULT_QUOTA_BYTES,
            min_free_bytes: DEFAULT_MIN_FREE_BYTES,
            check_space_every_ms: 5_000,
        }
    }
}

impl StorageConfig {
    /// The cache size in bytes, as sled takes it: at least one megabyte (`cache_mb = 0`
    /// would leave sled nothing to hold the pages it is writing).
    pub fn cache_bytes(&self) -> u64 {
        self.cache_mb.max(1).saturating_mul(1024 * 1024)
    }
}

/// How a write is made durable before it is acknowledged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyncMode {
    /// sled's flush, then fdatasync/fsync of every file and folder it changed.
    #[default]
    Fdatasync,
    /// sled's flush alone: not durable across a power loss.
    SledFlush,
}

/// Identity, addresses and data folder of one node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// This node's id in the cluster (unique, non-zero).
    pub id: u64,
    /// HTTP listen address (port 0 picks a free port).
    pub http: SocketAddr,
    /// gRPC listen address for Raft between nodes.
    pub grpc: SocketAddr,
    /// Data folder: sled database, generated admin key.
    pub data: PathBuf,
    /// Base URL put in links (`contract`, `run_now`, receipts); default `http://<Host header>`.
    pub public_url: Option<String>,
    /// Load the demo catalogue when this node founds a cluster.
    pub demo: bool,
    /// The gRPC address peers should dial (`host:port`, a DNS name allowed), when it differs
    /// from the bind address (e.g. binding 0.0.0.0 in a container). Default: the bound address.
    pub advertise_grpc: Option<String>,
    /// The HTTP address shown to clients in cluster status, likewise.
    pub advertise_http: Option<String>,
    /// Dial some peers through another address: peer gRPC address → address to dial (a local
    /// proxy or sidecar, e.g. the chaos harness's fault proxies).
    pub peer_routes: BTreeMap<String, String>,
    /// Serve HTTPS instead of plain HTTP on the HTTP listener (`[node.https]`).
    pub https: Option<HttpsConfig>,
}

/// HTTPS on the HTTP listener: this node's certificate and key as PEM files (read again when
/// they change, so certificates can be renewed without a restart). Clients need no
/// certificate; they authenticate with keys as over plain HTTP.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpsConfig {
    /// The certificate chain clients verify (naming the host they dial).
    pub cert_file: PathBuf,
    /// Its private key.
    pub key_file: PathBuf,
    /// How often to look for changed files, in seconds.
    #[serde(default = "reload_secs")]
    pub reload_secs: u64,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            id: 1,
            http: SocketAddr::from(([127, 0, 0, 1], 8080)),
            grpc: SocketAddr::from(([127, 0, 0, 1], 9090)),
            data: PathBuf::from("./rowcall-data"),
            public_url: None,
            demo: true,
            advertise_grpc: None,
            advertise_http: None,
            peer_routes: BTreeMap::new(),
            https: None,
        }
    }
}

/// How a node on a fresh data folder becomes part of a cluster (a node with state ignores
/// that part: its data folder says which cluster it belongs to), and how peers
/// authenticate each other.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// Found a new cluster. Alone, at once; with `join` peers, only once every peer answers
    /// and none belongs to a cluster (the lowest id of several founding nodes goes first);
    /// if one does, the node joins that cluster instead.
    pub bootstrap: bool,
    /// gRPC addresses of peers to join through (any one admits the node). A node given
    /// peers never founds a cluster unless `bootstrap` is set; a node given none founds a
    /// one-node cluster (the embedded default).
    pub join: Vec<String>,
    /// Join as a learner: a read replica that never votes.
    pub learner: bool,
    /// Operator-supplied certificates for mutual TLS between nodes. Without them peers still
    /// talk mutual TLS, with certificates from the cluster's own CA (`raft::pki`). Each
    /// node's certificate must name `node-<id>.peer.rowcall` (deploy/tls/make-certs.sh adds
    /// it): a peer speaks only for the node id its certificate names.
    pub tls: Option<PeerTlsConfig>,
    /// The cluster secret (at least 32 characters; the same on every node).
    /// `ROWCALL_CLUSTER_SECRET` sets it too. Every node that holds it derives the same
    /// cluster CA, so nodes started together (`bootstrap` with `join`) found one cluster and
    /// join it with nothing else; peers also show its proof on every call.
    pub secret: Option<String>,
    /// A file holding the cluster secret.
    pub secret_file: Option<PathBuf>,
    /// A join token from `rowcall cluster join-token` (`ROWCALL_JOIN_TOKEN`): how a node
    /// without the cluster secret receives the cluster's credential when it first joins.
    pub join_token: Option<String>,
    /// A file holding the join token.
    pub join_token_file: Option<PathBuf>,
    /// No longer has an effect (peers always authenticate); accepted so old configurations
    /// still load, with a warning.
    pub insecure_peers: bool,
    /// Found the new cluster (`bootstrap`, no `join`) from this backup (`rowcall backup
    /// FILE`): the state at the backup's index, a new cluster id, this node its only member.
    /// Only on a fresh data folder; ignored (with a log line) on one already in a cluster.
    pub restore: Option<PathBuf>,
}

impl std::fmt::Debug for ClusterConfig {
    // Never print the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("bootstrap", &self.bootstrap)
            .field("join", &self.join)
            .field("learner", &self.learner)
            .field("tls", &self.tls)
            .field("secret", &self.secret.as_ref().map(|_| ".."))
            .field("secret_file", &self.secret_file)
            .field("join_token", &self.join_token.as_ref().map(|_| ".."))
            .field("join_token_file", &self.join_token_file)
            .field("insecure_peers", &self.insecure_peers)
            .field("restore", &self.restore)
            .finish()
    }
}

impl ClusterConfig {
    /// The join token, from the setting or its file.
    pub fn read_join_token(&self) -> Result<Option<String>, ConfigError> {
        if let Some(token) = &self.join_token {
            return Ok(Some(token.trim().to_owned()));
        }
        let Some(path) = &self.join_token_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })?;
        Ok(Some(text.trim().to_owned()))
    }

    /// The cluster secret, from the setting or its file.
    pub fn read_secret(&self) -> Result<Option<String>, ConfigError> {
        if let Some(secret) = &self.secret {
            return Ok(Some(secret.clone()));
        }
        let Some(path) = &self.secret_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })?;
        Ok(Some(text.trim().to_owned()))
    }
}

/// Mutual TLS between nodes: PEM files, read again when they change (so certificates can be
/// renewed without a restart).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerTlsConfig {
    /// The cluster's CA certificate: peers must present a certificate it signed.
    pub ca_file: PathBuf,
    /// This node's certificate (chain), signed by the CA, naming the host peers dial.
    pub cert_file: PathBuf,
    /// This node's private key.
    pub key_file: PathBuf,
    /// How often to look for changed files, in seconds.
    #[serde(default = "reload_secs")]
    pub reload_secs: u64,
}

fn reload_secs() -> u64 {
    10
}

/// Credentials. Secrets may also come from files (`admin_key_file`). Every secret must have
/// at least 32 characters; a node refuses to start with a shorter one. `Debug` shows names,
/// never secrets, and the node scrubs these fields once it has their digests.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// The admin key: directory writes, forensic receipts, and everything else.
    pub admin_key: Option<String>,
    /// A file holding the admin key.
    pub admin_key_file: Option<PathBuf>,
    /// Named invoke credentials: name → secret.
    pub invoke_keys: BTreeMap<String, String>,
    /// Named MCP bearer tokens: name → secret.
    pub mcp_tokens: BTreeMap<String, String>,
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redacted = |set: bool| if set { "<redacted>" } else { "<none>" };
        f.debug_struct("AuthConfig")
            .field("admin_key", &redacted(self.admin_key.is_some()))
            .field("admin_key_file", &self.admin_key_file)
            .field("invoke_keys", &self.invoke_keys.keys().collect::<Vec<_>>())
            .field("mcp_tokens", &self.mcp_tokens.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl AuthConfig {
    /// Forgets every secret value, keeping the names (done once their digests are made).
    pub fn scrub(&mut self) {
        self.admin_key = None;
        for secret in self
            .invoke_keys
            .values_mut()
            .chain(self.mcp_tokens.values_mut())
        {
            *secret = String::new();
        }
    }
}

/// Request limits.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Largest request body; larger ones get 413 before they are read.
    pub max_body_bytes: usize,
    /// Cap on the input and the output stored in a receipt.
    pub receipt_store_bytes: usize,
    /// How long a write may wait for a quorum before 503.
    pub write_timeout_ms: u64,
    /// How long an invocation's receipt may wait for a quorum before it goes to the outbox
    /// and the invocation is answered with a pending proof. Well under a second, so a run
    /// that finished is answered within its caller's budget while a leader is replaced.
    pub receipt_timeout_ms: u64,
    /// How long a read with `min_index` may wait for this node to catch up before 503.
    pub min_index_wait_ms: u64,
    /// How long a client may take to send a request's headers (and how long an idle
    /// keep-alive connection is kept); slower connections are closed (slowloris).
    pub header_read_timeout_ms: u64,
    /// How long a client may take to send a whole request body; slower ones get 408.
    pub body_read_timeout_ms: u64,
    /// Open HTTP connections at most; more are closed as soon as they are accepted.
    pub max_connections: usize,
    /// Open HTTP connections one client address (IPv6: its /64) may hold, within
    /// `max_connections`; more from it are closed as soon as they are accepted, so one
    /// address cannot take every slot (slow headers, idle connections).
    pub max_connections_per_client: usize,
    /// An HTTP connection with no request in flight for this long is closed (HTTP/2 with
    /// GOAWAY), so idle connections do not hold slots; an open stream is not idle.
    pub idle_timeout_ms: u64,
    /// Invocations running at once on this node (the http and mcp runners hold upstream
    /// connections); more get 503 with `Retry-After` rather than queueing.
    pub max_concurrent_invocations: usize,
    /// Open change-feed streams (`GET /api/directory/changes` and gRPC `Watch` together) at
    /// most; more get 503.
    pub max_feed_subscribers: usize,
    /// Change-feed streams one client (a credential, else an address) may hold open, within
    /// `max_feed_subscribers`; more get 429. The admin key meets only the node's cap.
    pub max_feed_subscribers_per_client: usize,
    /// Changes a change-feed subscriber is replayed at most; one further behind is told to
    /// read the directory again (`reset`).
    pub max_feed_replay: usize,
    /// MCP sessions one credential may hold open on this node.
    pub max_mcp_sessions_per_token: usize,
    /// MCP sessions open on this node at most.
    pub max_mcp_sessions: usize,
    /// Rate limits per credential and per client address.
    pub rate: RateConfig,
    /// Limits of the gRPC listener (Raft between nodes).
    pub grpc: GrpcLimits,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 8 * 1024 * 1024,
            receipt_store_bytes: 16 * 1024,
            write_timeout_ms: 5_000,
            receipt_timeout_ms: 500,
            min_index_wait_ms: 2_000,
            header_read_timeout_ms: 15_000,
            body_read_timeout_ms: 30_000,
            max_connections: 8_192,
            max_connections_per_client: 1_024,
            idle_timeout_ms: 30_000,
            max_concurrent_invocations: 256,
            max_feed_subscribers: 1_024,
            max_feed_subscribers_per_client: 64,
            max_feed_replay: 1_024,
            max_mcp_sessions_per_token: 64,
            max_mcp_sessions: 4_096,
            rate: RateConfig::default(),
            grpc: GrpcLimits::default(),
        }
    }
}

/// Requests per minute of each limited kind. A client may spend a whole minute's quota at
/// once (the burst), then gets 429 with `Retry-After` until its quota refills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateQuota {
    /// Asks (`GET /api/dispatch?ask=`) and MCP requests.
    pub ask_per_minute: u32,
    /// Invocations (`POST /api/dispatch`, `GET ?invoke=`).
    pub invoke_per_minute: u32,
    /// Writes: directory, share tokens, membership, imports.
    pub write_per_minute: u32,
}

impl Default for RateQuota {
    fn default() -> Self {
        Self::ANONYMOUS
    }
}

impl RateQuota {
    /// The default quota of one client address without a credential.
    pub const ANONYMOUS: Self = Self {
        ask_per_minute: 1_200,
        invoke_per_minute: 600,
        write_per_minute: 600,
    };
    /// The default quota of one invoke key or MCP token (the admin key is not limited).
    pub const CREDENTIAL: Self = Self {
        ask_per_minute: 6_000,
        invoke_per_minute: 3_000,
        write_per_minute: 1_200,
    };
}

/// Rate limits: on by default, at values a person or an agent never reaches but a flood
/// does. Requests with the admin key are not limited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateConfig {
    /// Whether limits apply (`ROWCALL_RATE_LIMIT=off` turns them off, e.g. for load tests).
    pub enabled: bool,
    /// Per client address (IPv6 by its /64) for requests without a recognised credential.
    pub per_address: RateQuota,
    /// Per invoke key or MCP token.
    pub per_credential: RateQuota,
    /// Clients tracked at most; past it, clients not yet tracked get 429 until old entries
    /// expire (memory stays bounded under a flood from many addresses).
    pub max_tracked: usize,
}

impl Default for RateConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            per_address: RateQuota::ANONYMOUS,
            per_credential: RateQuota::CREDENTIAL,
            max_tracked: 100_000,
        }
    }
}

/// Limits of the gRPC listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GrpcLimits {
    /// Requests in flight per connection at most.
    pub concurrency_per_connection: usize,
    /// HTTP/2 streams per connection at most.
    pub max_concurrent_streams: u32,
    /// Longest a request may take (a join waits for its catch-up, so this is long).
    pub request_timeout_ms: u64,
    /// HTTP/2 keepalive pings every this many milliseconds; a peer that does not answer
    /// within `keepalive_timeout_ms` is disconnected.
    pub keepalive_interval_ms: u64,
    /// See `keepalive_interval_ms`.
    pub keepalive_timeout_ms: u64,
    /// Open connections at most (clients and peers); more are closed as they are accepted.
    pub max_connections: usize,
    /// Open connections one client address (IPv6: its /64) may hold, within
    /// `max_connections`. Peers on one host share it: keep it well above what a node opens
    /// to another (a few channels).
    pub max_connections_per_client: usize,
    /// A connection with no call in flight for this long is closed (an open stream is in
    /// flight), so idle connections, and ones that never send a request, do not hold slots.
    /// Clients reconnect on their next call; peers are never idle (heartbeats).
    pub idle_timeout_ms: u64,
}

impl Default for GrpcLimits {
    fn default() -> Self {
        Self {
            concurrency_per_connection: 256,
            max_concurrent_streams: 512,
            request_timeout_ms: 120_000,
            keepalive_interval_ms: 10_000,
            keepalive_timeout_ms: 20_000,
            max_connections: 8_192,
            max_connections_per_client: 1_024,
            idle_timeout_ms: 120_000,
        }
    }
}

/// Raft timing and snapshot policy.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RaftConfig {
    /// Leader heartbeat interval; openraft also uses it as the timeout of one AppendEntries
    /// RPC, so it must cover a follower decoding and flushing a full batch.
    pub heartbeat_ms: u64,
    /// Election timeout, lower bound. A follower that saw a committed leader also waits out
    /// the leader's lease (the upper bound) first, so failover takes about lease + timeout.
    pub election_timeout_min_ms: u64,
    /// Election timeout, upper bound.
    pub election_timeout_max_ms: u64,
    /// Build a snapshot (and purge the log) after this many entries since the last one, at
    /// least ([`crate::cluster::snapshots`]).
    pub snapshot_every: u64,
    /// ...and once the log's files take this many times the last snapshot's bytes, so a
    /// large state is not rewritten every `snapshot_every` entries (0: the entry count
    /// alone decides, as before). A snapshot then writes about `1 / ratio` bytes per byte
    /// of log; the log stays within about `ratio` × the snapshot.
    pub snapshot_log_ratio: f64,
    /// Entries kept in the log behind a snapshot, for lagging followers.
    pub keep_after_snapshot: u64,
    /// Bytes of a snapshot file sent to a follower per message (the largest buffer either
    /// side holds for it). A chunk travels JSON-encoded, up to about four bytes per byte, so
    /// it may not exceed a quarter of the peer message limit (16 MiB).
    pub snapshot_chunk_bytes: u64,
    /// Largest write, as one Raft entry (a bulk write, or writes the leader batches
    /// together): an entry must reach the followers within one AppendEntries bound (the
    /// heartbeat), so a larger bulk write gets 413 and asks to be split.
    pub max_entry_bytes: usize,
    /// How long a leader that is stopping (SIGTERM) may take to hand leadership over to a
    /// voter level with its log; writes wait meanwhile. A handover that does not finish in
    /// time changes nothing: the cluster elects, as it does with 0 (no handover).
    pub handover_timeout_ms: u64,
    /// Send each follower its appends on one gRPC stream, several in flight (openraft's
    /// pipelined replication), instead of one at a time: a write then waits for one round
    /// trip to the followers, not for the append before it as well (across regions about
    /// half the write latency; see Performance). Heartbeats go one call each either way.
    /// On by default; `ROWCALL_STREAM_APPENDS=off` sends appends one at a time.
    pub stream_appends: bool,
    /// Ask the voters whether they would elect this node before raising its term (Raft's
    /// pre-vote), for openraft's own timer and rowcall's early candidacies alike: a node
    /// cut off from a majority, or paused and resumed, then stands without raising its
    /// term, so when it is back its term does not unseat the leader the others elected.
    /// `ROWCALL_PRE_VOTE=off` turns it off.
    pub pre_vote: bool,
}

impl Default for RaftConfig {
    fn default() -> Self {
        Self {
            heartbeat_ms: 120,
            election_timeout_min_ms: 300,
            election_timeout_max_ms: 600,
            snapshot_every: 5_000,
            snapshot_log_ratio: 0.5,
            keep_after_snapshot: 1_000,
            snapshot_chunk_bytes: 1024 * 1024,
            max_entry_bytes: 512 * 1024,
            handover_timeout_ms: 2_000,
            stream_appends: true,
            pre_vote: true,
        }
    }
}

/// The MCP projection: who may reach it from where, and how it pages.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// `Host` values (`name` or `name:port`) the MCP endpoints accept, against DNS
    /// rebinding. Empty (the default): loopback names, the HTTP listen address's host, and
    /// the host of `public_url`; a node listening on an unspecified address (0.0.0.0, ::)
    /// then accepts any `Host`, since its names are not known. `["*"]` accepts any.
    pub allowed_hosts: Vec<String>,
    /// Browser `Origin`s allowed (`scheme://host[:port|:*]`); a request carrying any other
    /// `Origin` gets 403. Requests without `Origin` (non-browser clients) pass. Default:
    /// loopback origins on any port, and the origin of `public_url`.
    pub allowed_origins: Vec<String>,
    /// Tools per `tools/list` page in rows mode.
    pub page_size: usize,
    /// Seconds an idle MCP session is kept in a node's memory; any node restores it on
    /// demand afterwards.
    pub session_idle_secs: u64,
    /// Serve the official MCP conformance suite's test tools (`test_reconnection`) beside
    /// the catalogue, for `tests/interop/conformance.sh`. Off by default; never turn it on for
    /// a catalogue agents use. `ROWCALL_MCP_TEST_TOOLS=1` turns it on.
    pub test_tools: bool,
}

impl Default for McpConfig {
    fn default() -> Self {
        Self {
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            page_size: 100,
            session_idle_secs: 300,
            test_tools: false,
        }
    }
}

/// The http and mcp runners (DESIGN §4). Secrets for upstreams live here (or in the files and
/// variables named here), never in rows.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunnersConfig {
    /// How long one invocation may take upstream (all redirects and the body included).
    pub timeout_ms: u64,
    /// Largest upstream answer read; a larger one fails the invocation.
    pub max_response_bytes: usize,
    /// Redirects followed at most (each hop passes the SSRF guard again).
    pub max_redirects: usize,
    /// Destinations allowed despite the SSRF guard: CIDRs (`10.0.0.0/8`) or `host:port`.
    /// `ROWCALL_HTTP_ALLOW` (comma-separated) adds to it.
    pub allow: Vec<String>,
    /// Headers sent with a row's upstream calls: row key → header name → value. A value is
    /// a literal string, or a table `{ env = "VAR" }` / `{ file = "/path" }` with an optional
    /// `prefix` (e.g. `"Bearer "`), read at each call so secrets can rotate.
    pub headers: BTreeMap<String, BTreeMap<String, HeaderSource>>,
}

impl Default for RunnersConfig {
    fn default() -> Self {
        Self {
            timeout_ms: 10_000,
            max_response_bytes: 1024 * 1024,
            max_redirects: 5,
            allow: Vec::new(),
            headers: BTreeMap::new(),
        }
    }
}

/// Where a configured header value comes from.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum HeaderSource {
    /// A literal value (not a secret: it is in the configuration file).
    Literal(String),
    /// A secret read from the environment or a file at each call.
    Secret {
        /// An environment variable holding the value.
        #[serde(default)]
        env: Option<String>,
        /// A file holding the value (trailing newline trimmed).
        #[serde(default)]
        file: Option<PathBuf>,
        /// Put before the value, e.g. `"Bearer "`.
        #[serde(default)]
        prefix: Option<String>,
    },
}

impl std::fmt::Debug for HeaderSource {
    // Never print a literal value: operators put tokens there despite the advice.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Literal(_) => f.write_str("Literal(..)"),
            Self::Secret { env, file, .. } => f
                .debug_struct("Secret")
                .field("env", env)
                .field("file", file)
                .finish_non_exhaustive(),
        }
    }
}

impl HeaderSource {
    /// The value now; the error names the variable or file, never a value.
    pub fn resolve(&self) -> Result<String, String> {
        match self {
            Self::Literal(value) => Ok(value.clone()),
            Self::Secret { env, file, prefix } => {
                let value = match (env, file) {
                    (Some(var), _) => std::env::var(var)
                        .map_err(|_| format!("environment variable {var} is not set"))?,
                    (None, Some(path)) => std::fs::read_to_string(path)
                        .map_err(|e| format!("cannot read {}: {e}", path.display()))?
                        .trim_end_matches(['\r', '\n'])
                        .to_owned(),
                    (None, None) => return Err("a header source needs env or file".into()),
                };
                Ok(format!("{}{value}", prefix.as_deref().unwrap_or("")))
            }
        }
    }
}

/// Share tokens: HMAC-signed, expiring, one key each (the secret is the cluster's, in Raft).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShareConfig {
    /// Lifetime of the token put in an ask's `run_now` link for a credentialed asker.
    pub link_ttl_secs: u64,
    /// Default lifetime of a minted token (`POST /api/share` without `ttl_secs`).
    pub default_ttl_secs: u64,
    /// Longest lifetime a minted token may have.
    pub max_ttl_secs: u64,
}

impl Default for ShareConfig {
    fn default() -> Self {
        Self {
            link_ttl_secs: 900,
            default_ttl_secs: 3_600,
            max_ttl_secs: 30 * 24 * 3_600,
        }
    }
}

/// A configuration that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this struct.
    #[error("config file {path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        source: toml::de::Error,
    },
    /// An environment variable has a bad value.
    #[error("environment variable {name}: {reason}")]
    Env {
        /// The variable.
        name: &'static str,
        /// Why.
        reason: String,
    },
}

impl Config {
    /// Reads a TOML file over the defaults.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml(&text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source,
        })
    }

    /// Parses TOML over the defaults.
    pub fn from_toml(text: &str) -> Result<Self, toml::de::Error> {
        toml::from_str(text)
    }

    /// Applies `ROWCALL_*` variables read through `get` (the process environment in `main`).
    pub fn apply_env(&mut self, get: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        if let Some(key) = get("ROWCALL_ADMIN_KEY").filter(|k| !k.is_empty()) {
            self.auth.admin_key = Some(key);
        }
        if let Some(list) = get("ROWCALL_INVOKE_KEYS") {
            self.auth
                .invoke_keys
                .extend(parse_named_secrets("ROWCALL_INVOKE_KEYS", &list)?);
        }
        if let Some(list) = get("ROWCALL_MCP_TOKENS") {
            self.auth
                .mcp_tokens
                .extend(parse_named_secrets("ROWCALL_MCP_TOKENS", &list)?);
        }
        if let Some(list) = get("ROWCALL_MCP_ALLOWED_HOSTS") {
            self.mcp.allowed_hosts = split_list(&list);
        }
        if let Some(list) = get("ROWCALL_MCP_ALLOWED_ORIGINS") {
            self.mcp.allowed_origins = split_list(&list);
        }
        if let Some(on) = get("ROWCALL_MCP_TEST_TOOLS") {
            self.mcp.test_tools = parse_switch("ROWCALL_MCP_TEST_TOOLS", &on)?;
        }
        if let Some(secret) = get("ROWCALL_CLUSTER_SECRET").filter(|s| !s.is_empty()) {
            self.cluster.secret = Some(secret);
        }
        if let Some(token) = get("ROWCALL_JOIN_TOKEN").filter(|s| !s.is_empty()) {
            self.cluster.join_token = Some(token);
        }
        if let Some(routes) = get("ROWCALL_PEER_ROUTES") {
            self.node
                .peer_routes
                .extend(parse_named_secrets("ROWCALL_PEER_ROUTES", &routes)?);
        }
        if let Some(url) = get("ROWCALL_PUBLIC_URL").filter(|u| !u.is_empty()) {
            self.node.public_url = Some(url);
        }
        if let Some(list) = get("ROWCALL_HTTP_ALLOW") {
            let entries: Vec<&str> = list.split(',').map(str::trim).collect();
            crate::dispatch::ssrf::AllowList::parse(entries.iter().copied()).map_err(|reason| {
                ConfigError::Env {
                    name: "ROWCALL_HTTP_ALLOW",
                    reason,
                }
            })?;
            self.runners.allow.extend(
                entries
                    .into_iter()
                    .filter(|e| !e.is_empty())
                    .map(str::to_owned),
            );
        }
        if let Some(dir) = get("ROWCALL_EMBED_MODEL") {
            self.resolver.model = (!dir.trim().is_empty()).then(|| PathBuf::from(dir.trim()));
        }
        if let Some(on) = get("ROWCALL_STREAM_APPENDS") {
            self.raft.stream_appends = parse_switch("ROWCALL_STREAM_APPENDS", &on)?;
        }
        if let Some(on) = get("ROWCALL_PRE_VOTE") {
            self.raft.pre_vote = parse_switch("ROWCALL_PRE_VOTE", &on)?;
        }
        if let Some(on) = get("ROWCALL_RESOLVER_LEARN") {
            self.resolver.learn = parse_switch("ROWCALL_RESOLVER_LEARN", &on)?;
        }
        if let Some(mode) = get("ROWCALL_QUERY_EMBEDDING") {
            self.resolver.query_embedding =
                mode.trim().parse().map_err(|reason| ConfigError::Env {
                    name: "ROWCALL_QUERY_EMBEDDING",
                    reason,
                })?;
        }
        if let Some(weights) = get("ROWCALL_EMBED_WEIGHTS") {
            self.resolver.weights = weights.trim().parse().map_err(|reason| ConfigError::Env {
                name: "ROWCALL_EMBED_WEIGHTS",
                reason,
            })?;
        }
        if let Some(mode) = get("ROWCALL_STORAGE_SYNC") {
            self.storage.sync = match mode.trim() {
                "fdatasync" => SyncMode::Fdatasync,
                "sled-flush" => SyncMode::SledFlush,
                other => {
                    return Err(ConfigError::Env {
                        name: "ROWCALL_STORAGE_SYNC",
                        reason: format!("{other:?} is not fdatasync or sled-flush"),
                    })
                }
            };
        }
        if let Some(format) = get("ROWCALL_LOG_FORMAT") {
            self.log.format = match format.trim() {
                "text" => LogFormat::Text,
                "json" => LogFormat::Json,
                other => {
                    return Err(ConfigError::Env {
                        name: "ROWCALL_LOG_FORMAT",
                        reason: format!("{other:?} is not text or json"),
                    })
                }
            };
        }
        if let Some(endpoint) = get("ROWCALL_OTLP_ENDPOINT") {
            let endpoint = endpoint.trim();
            self.tracing.otlp_endpoint = (!endpoint.is_empty()).then(|| endpoint.to_owned());
        }
        if let Some(flag) = get("ROWCALL_RATE_LIMIT") {
            self.limits.rate.enabled = parse_switch("ROWCALL_RATE_LIMIT", &flag)?;
        }
        if let Some(value) = get("ROWCALL_TEST_CLOCK_OFFSET_MS") {
            self.testing.clock_offset_ms = value.trim().parse().map_err(|_| ConfigError::Env {
                name: "ROWCALL_TEST_CLOCK_OFFSET_MS",
                reason: format!("{value:?} is not a whole number of milliseconds"),
            })?;
        }
        if let Some(flag) = get("ROWCALL_STORAGE_COMPRESSION") {
            self.storage.compression = parse_switch("ROWCALL_STORAGE_COMPRESSION", &flag)?;
        }
        if let Some(value) = get("ROWCALL_SNAPSHOT_LOG_RATIO") {
            self.raft.snapshot_log_ratio = value.trim().parse().map_err(|_| ConfigError::Env {
                name: "ROWCALL_SNAPSHOT_LOG_RATIO",
                reason: format!("{value:?} is not a number"),
            })?;
        }
        let numbers: [(&'static str, &mut u64); 12] = [
            ("ROWCALL_STORAGE_CACHE_MB", &mut self.storage.cache_mb),
            ("ROWCALL_STORAGE_QUOTA_BYTES", &mut self.storage.quota_bytes),
            (
                "ROWCALL_STORAGE_MIN_FREE_BYTES",
                &mut self.storage.min_free_bytes,
            ),
            (
                "ROWCALL_RECEIPTS_MAX_AGE_SECS",
                &mut self.receipts.max_age_secs,
            ),
            (
                "ROWCALL_RECEIPTS_PRUNE_EVERY_SECS",
                &mut self.receipts.prune_every_secs,
            ),
            ("ROWCALL_SNAPSHOT_EVERY", &mut self.raft.snapshot_every),
            (
                "ROWCALL_SNAPSHOT_CHUNK_BYTES",
                &mut self.raft.snapshot_chunk_bytes,
            ),
            (
                "ROWCALL_KEEP_AFTER_SNAPSHOT",
                &mut self.raft.keep_after_snapshot,
            ),
            (
                "ROWCALL_HANDOVER_TIMEOUT_MS",
                &mut self.raft.handover_timeout_ms,
            ),
            ("ROWCALL_HEARTBEAT_MS", &mut self.raft.heartbeat_ms),
            (
                "ROWCALL_ELECTION_TIMEOUT_MIN_MS",
                &mut self.raft.election_timeout_min_ms,
            ),
            (
                "ROWCALL_ELECTION_TIMEOUT_MAX_MS",
                &mut self.raft.election_timeout_max_ms,
            ),
        ];
        for (name, field) in numbers {
            if let Some(value) = get(name) {
                *field = value.trim().parse().map_err(|_| ConfigError::Env {
                    name,
                    reason: format!("{value:?} is not a whole number"),
                })?;
            }
        }
        Ok(())
    }
}

/// An on/off environment variable: `on`, `true`, `1` or `off`, `false`, `0`.
fn parse_switch(name: &'static str, value: &str) -> Result<bool, ConfigError> {
    match value.trim() {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        other => Err(ConfigError::Env {
            name,
            reason: format!("{other:?} is not on or off"),
        }),
    }
}

/// Splits a comma-separated list, dropping empty items.
fn split_list(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Parses `name=value,name=value` (credentials, peer routes).
pub fn parse_named_secrets(
    variable: &'static str,
    list: &str,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out = BTreeMap::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, secret) = item.split_once('=').ok_or_else(|| ConfigError::Env {
            name: variable,
            reason: format!(
                "entry {:?} is not name=secret",
                item.split('=').next().unwrap_or("")
            ),
        })?;
        if name.trim().is_empty() || secret.is_empty() {
            return Err(ConfigError::Env {
                name: variable,
                reason: "an entry has an empty name or secret".into(),
            });
        }
        out.insert(name.trim().to_owned(), secret.to_owned());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_config_in_deploy_parses() {
        let text = include_str!("../../deploy/rowcall.toml");
        let config = Config::from_toml(text).unwrap();
        assert_eq!(config.node.id, 1);
        assert!(config.limits.max_body_bytes > 0);
        // The sample lists every limit at its default.
        let (sample, default) = (&config.limits, LimitsConfig::default());
        assert_eq!(
            serde_json::to_value(sample).unwrap(),
            serde_json::to_value(&default).unwrap()
        );
    }

    #[test]
    fn runner_settings_parse_with_secrets_by_reference() {
        let config = Config::from_toml(
            "[runners]\ntimeout_ms = 500\nallow = [\"10.0.0.0/8\"]\n\
             [runners.headers.GITHUB_ISSUES]\nAccept = \"application/json\"\n\
             Authorization = { env = \"ROWCALL_TEST_NO_SUCH_VAR\", prefix = \"Bearer \" }\n",
        )
        .unwrap();
        assert_eq!(config.runners.timeout_ms, 500);
        let headers = &config.runners.headers["GITHUB_ISSUES"];
        assert_eq!(headers["Accept"].resolve().unwrap(), "application/json");
        let err = headers["Authorization"].resolve().unwrap_err();
        assert!(err.contains("ROWCALL_TEST_NO_SUCH_VAR"), "{err}");
        assert!(!format!("{:?}", headers["Accept"]).contains("json"));

        let mut config = Config::default();
        config
            .apply_env(|name| {
                (name == "ROWCALL_HTTP_ALLOW").then(|| "127.0.0.1:8080, ::1/128".into())
            })
            .unwrap();
        assert_eq!(config.runners.allow, ["127.0.0.1:8080", "::1/128"]);
        let bad = Config::default()
            .apply_env(|name| (name == "ROWCALL_HTTP_ALLOW").then(|| "10.0.0.0/99".into()))
            .unwrap_err();
        assert!(bad.to_string().contains("ROWCALL_HTTP_ALLOW"), "{bad}");
    }

    #[test]
    fn founding_and_peers_come_from_the_cluster_section() {
        let config =
            Config::from_toml("[cluster]\nbootstrap = true\njoin = [\"a:9090\", \"b:9090\"]\n")
                .unwrap();
        assert!(config.cluster.bootstrap);
        assert_eq!(config.cluster.join, ["a:9090", "b:9090"]);
        assert!(!Config::default().cluster.bootstrap);
    }

    #[test]
    fn the_cache_size_comes_from_the_file_then_the_environment() {
        assert_eq!(Config::default().storage.cache_bytes(), 64 * 1024 * 1024);
        let mut config = Config::from_toml("[storage]\ncache_mb = 16\n").unwrap();
        assert_eq!(config.storage.cache_bytes(), 16 * 1024 * 1024);
        config
            .apply_env(|name| (name == "ROWCALL_STORAGE_CACHE_MB").then(|| "8".into()))
            .unwrap();
        assert_eq!(config.storage.cache_bytes(), 8 * 1024 * 1024);
        let zero = Config::from_toml("[storage]\ncache_mb = 0\n").unwrap();
        assert_eq!(
            zero.storage.cache_bytes(),
            1024 * 1024,
            "never an empty cache"
        );
        let bad = Config::default()
            .apply_env(|name| (name == "ROWCALL_STORAGE_CACHE_MB").then(|| "lots".into()))
            .unwrap_err();
        assert!(
            bad.to_string().contains("ROWCALL_STORAGE_CACHE_MB"),
            "{bad}"
        );
    }

    #[test]
    fn compression_is_off_unless_the_file_or_the_environment_turns_it_on() {
        assert!(!Config::default().storage.compression);
        let mut config = Config::from_toml("[storage]\ncompression = true\n").unwrap();
        assert!(config.storage.compression);
        config
            .apply_env(|name| (name == "ROWCALL_STORAGE_COMPRESSION").then(|| "off".into()))
            .unwrap();
        assert!(!config.storage.compression);
        let bad = Config::default()
            .apply_env(|name| (name == "ROWCALL_STORAGE_COMPRESSION").then(|| "zstd".into()))
            .unwrap_err();
        assert!(
            bad.to_string().contains("ROWCALL_STORAGE_COMPRESSION"),
            "{bad}"
        );
    }

    #[test]
    fn unknown_settings_are_refused() {
        assert!(Config::from_toml("[node]\nidd = 3\n").is_err());
    }

    #[test]
    fn environment_overrides_the_file() {
        let mut config = Config::from_toml("[auth]\nadmin_key = \"from-file\"\n").unwrap();
        config
            .apply_env(|name| match name {
                "ROWCALL_ADMIN_KEY" => Some("from-env".into()),
                "ROWCALL_INVOKE_KEYS" => Some("ci=s3cret, bot=other".into()),
                "ROWCALL_PEER_ROUTES" => Some("127.0.0.1:9082=127.0.0.1:19012".into()),
                _ => None,
            })
            .unwrap();
        assert_eq!(config.auth.admin_key.as_deref(), Some("from-env"));
        assert_eq!(config.node.peer_routes["127.0.0.1:9082"], "127.0.0.1:19012");
        assert_eq!(config.auth.invoke_keys["bot"], "other");
    }

    #[test]
    fn the_test_clock_offset_and_short_retention_come_from_the_file_or_the_environment() {
        let text = "[testing]\nclock_offset_ms = -5000\n[receipts]\nmax_age_secs = 90\n";
        let mut config = Config::from_toml(text).unwrap();
        assert_eq!(config.testing.clock_offset_ms, -5_000);
        assert_eq!(config.receipts.max_age_secs, 90);
        config
            .apply_env(|name| match name {
                "ROWCALL_TEST_CLOCK_OFFSET_MS" => Some("86400000".into()),
                "ROWCALL_RECEIPTS_MAX_AGE_SECS" => Some("300".into()),
                "ROWCALL_RECEIPTS_PRUNE_EVERY_SECS" => Some("5".into()),
                _ => None,
            })
            .unwrap();
        assert_eq!(config.testing.clock_offset_ms, 86_400_000);
        assert_eq!(config.receipts.max_age_secs, 300);
        assert_eq!(config.receipts.prune_every_secs, 5);
        let bad = Config::default().apply_env(|name| {
            (name == "ROWCALL_TEST_CLOCK_OFFSET_MS").then(|| "one day".to_owned())
        });
        assert!(bad
            .unwrap_err()
            .to_string()
            .contains("ROWCALL_TEST_CLOCK_OFFSET_MS"));
    }

    #[test]
    fn the_snapshot_log_ratio_comes_from_the_file_then_the_environment() {
        assert_eq!(Config::default().raft.snapshot_log_ratio, 0.5);
        let mut config = Config::from_toml("[raft]\nsnapshot_log_ratio = 2.5\n").unwrap();
        assert_eq!(config.raft.snapshot_log_ratio, 2.5);
        config
            .apply_env(|name| (name == "ROWCALL_SNAPSHOT_LOG_RATIO").then(|| " 0 ".to_owned()))
            .unwrap();
        assert_eq!(config.raft.snapshot_log_ratio, 0.0);
        let bad = Config::default()
            .apply_env(|name| (name == "ROWCALL_SNAPSHOT_LOG_RATIO").then(|| "half".to_owned()));
        assert!(bad
            .unwrap_err()
            .to_string()
            .contains("ROWCALL_SNAPSHOT_LOG_RATIO"));
    }

    #[test]
    fn malformed_secret_lists_are_errors_without_the_secret() {
        let err = parse_named_secrets("ROWCALL_INVOKE_KEYS", "justasecret").unwrap_err();
        assert!(err.to_string().contains("ROWCALL_INVOKE_KEYS"));
        let err = parse_named_secrets("ROWCALL_INVOKE_KEYS", "a=").unwrap_err();
        assert!(!err.to_string().contains("a="));
    }
}
