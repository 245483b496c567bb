//! [`Client`]: rowcall's public gRPC API (`rowcall.v1`) over several nodes, riding through
//! their failures.
//!
//! ```text
//!   call ──► order the nodes ─► attempt on one (deadline per attempt) ──► answer ─► note index, leader
//!              reads:  the node that answered last, then the others; a second node is
//!                      asked too when the first is slow (hedge), the first answer wins
//!              writes: the leader the nodes named, then the others; hedged after a few
//!                      times the session's recent write latency (at most 250 ms), every
//!                      attempt under one idempotency-key, so the cluster applies it once
//!                      and an attempt that lands second gets the first's outcome
//!              invocations: as reads, without the hedge (one attempt that may have run ends it:
//!                      the runner runs before its receipt commits, so no id can stop a second
//!                      run); sent first to a node that answered within the hedge delay, or
//!                      answered a probe within it. A row the nodes said changes nothing
//!                      (risk: read, from its contract or an earlier run) is sent as
//!                      `repeatable` and hedged like a read: the node refuses that for any
//!                      other row before it runs, and the client then sends it once;
//!                      a node that stops answering while such a call is on it (not even a
//!                      cheap read within `silence_limit`) ends the call as unknown at once
//!            ◄─ a node-level failure (unreachable, paused, behind, no quorum): next node at
//!               once; after every node failed, back off (exponential, full jitter) and go round
//!               again until the call's deadline
//!            ◄─ an answer (not found, invalid, refused): returned as it is
//! ```
//!
//! A node that failed an attempt without an answer (unreachable, silent, outrun by a hedge,
//! or saying it is behind) is *suspect* for [`SUSPECT_FOR`]: every call tries it after the
//! others, the leader hint included, so a paused or cut-off node costs a session one slow
//! attempt rather than one per call. An answer from it clears it.
//!
//! A client is one session: it remembers the highest index any answer carried and sends it
//! as `x-rowcall-min-index` on every call, so whichever node answers has applied everything
//! the session saw (read-your-writes, monotonic reads). Clones share the session.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures_util::future::{Fuse, FusedFuture as _, FutureExt as _};
use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt as _;
use rand::Rng as _;
use rowcall_proto::json;
use rowcall_proto::v1::cluster_client::ClusterClient;
use rowcall_proto::v1::directory_client::DirectoryClient;
use rowcall_proto::v1::dispatch_client::DispatchClient;
use rowcall_proto::v1::receipts_client::ReceiptsClient;
use rowcall_proto::v1::transparency_client::TransparencyClient;
use rowcall_proto::v1::{self as proto, contract_response};
use serde_json::{Map, Value};
use tokio::time::Instant;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Request, Response, Status};

use crate::error::{Error, Rejection};
use crate::hedge::WriteLatencies;

/// Request metadata: wait until this index is applied.
pub const MIN_INDEX: &str = "x-rowcall-min-index";
/// Response metadata: the node's applied index, or a write's index.
pub const INDEX: &str = "x-rowcall-index";
/// Response metadata: the node answered while cut off from the leader.
pub const STALE: &str = "x-rowcall-stale";
/// Response metadata: the leader the node knows, `ID=GRPC_ADDR`.
pub const LEADER: &str = "x-rowcall-leader";
/// Request metadata: names a write, so a retry is answered with its first outcome.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// How long a node that failed an attempt is tried after the others.
pub const SUSPECT_FOR: Duration = Duration::from_secs(2);

/// rowcall's codes that mean "this node cannot serve it now; another may": the call did not
/// take effect, so any call may go to the next node.
const NODE_LEVEL: &[&str] = &[
    "behind",
    "no_quorum",
    "no_leader",
    "shutting_down",
    "storage_failed",
    "no_read_index",
    "share_unchecked",
];

/// One attempt of a call on one node, as [`ClientBuilder::on_attempt`] reports it: where it
/// went, what the session sent, and what came back. Attempts a hedge cancelled (its
/// other attempt answered first) are not reported: they showed the caller nothing.
#[derive(Debug, Clone)]
pub struct Attempted {
    /// The node's `host:port`.
    pub node: String,
    /// When the attempt was sent.
    pub sent: std::time::Instant,
    /// How long it took to end (answered, refused, or given up).
    pub elapsed: Duration,
    /// The session index it carried as `x-rowcall-min-index` (0: none).
    pub min_index: u64,
    /// The index the node stamped on its answer or error (`x-rowcall-index`).
    pub index: Option<u64>,
    /// The node said it answered while cut off from the leader (`x-rowcall-stale`).
    pub stale: bool,
    /// `None` when the node answered; else its error, or the transport's, or the timeout.
    pub failure: Option<Rejection>,
}

/// What [`ClientBuilder::on_attempt`] calls for every attempt.
#[derive(Clone)]
struct Observer(Arc<dyn Fn(&Attempted) + Send + Sync>);

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

/// How a client retries and waits. Every field has a default that suits a cluster on one
/// network; see [`ClientBuilder`].
#[derive(Debug, Clone)]
struct Options {
    credential: Option<String>,
    connect_timeout: Duration,
    read_timeout: Duration,
    write_timeout: Duration,
    invoke_timeout: Duration,
    deadline: Duration,
    hedge_after: Option<Duration>,
    write_hedge_after: Option<Duration>,
    silence_limit: Option<Duration>,
    backoff: Duration,
    backoff_max: Duration,
    observer: Option<Observer>,
    tls: Option<Tls>,
}

/// How nodes are reached over TLS: the CA their certificates are checked against, and the
/// name to check them for when it is not the host in the address.
#[derive(Debug, Clone)]
struct Tls {
    ca: Certificate,
    domain: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            credential: None,
            connect_timeout: Duration::from_millis(500),
            read_timeout: Duration::from_secs(1),
            // A node gives a write 5 s to commit before it says the outcome is unknown.
            write_timeout: Duration::from_secs(6),
            // Runners may take 10 s, the receipt's commit 0.5 s more, before the outbox.
            invoke_timeout: Duration::from_secs(15),
            deadline: Duration::from_secs(15),
            hedge_after: Some(Duration::from_millis(150)),
            // A write commits through a quorum and a disk flush: several times a read's
            // time. Still well inside an election, so a paused leader costs no more than one.
            write_hedge_after: Some(Duration::from_millis(250)),
            // A running node answers a counts read in milliseconds, even while it runs a
            // slow invocation: one that leaves it unanswered this long is stopped.
            silence_limit: Some(Duration::from_millis(500)),
            backoff: Duration::from_millis(50),
            backoff_max: Duration::from_secs(1),
            observer: None,
            tls: None,
        }
    }
}

/// Builds a [`Client`]: the nodes, the credential and the timeouts.
///
/// ```no_run
/// use std::time::Duration;
///
/// let client = rowcall_client::Client::builder()
///     .nodes(["http://127.0.0.1:9081", "http://127.0.0.1:9082"])
///     .credential("my-admin-key")
///     .read_timeout(Duration::from_millis(500))
///     .hedge_after(Some(Duration::from_millis(100)))
///     .build()?;
/// # Ok::<(), rowcall_client::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct ClientBuilder {
    nodes: Vec<String>,
    options: Options,
    session: u64,
}

impl ClientBuilder {
    /// Adds a node's gRPC address (`http://host:port`, or `host:port`).
    ///
    /// ```
    /// let builder = rowcall_client::Client::builder().node("127.0.0.1:9090");
    /// # let _ = builder;
    /// ```
    pub fn node(mut self, address: impl Into<String>) -> Self {
        self.nodes.push(address.into());
        self
    }

    /// Adds several nodes' gRPC addresses.
    ///
    /// ```
    /// let builder = rowcall_client::Client::builder().nodes(["a:9090", "b:9090"]);
    /// # let _ = builder;
    /// ```
    pub fn nodes<I, S>(mut self, addresses: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.nodes.extend(addresses.into_iter().map(Into::into));
        self
    }

    /// The credential sent on every call (`authorization: Bearer …`): the admin key, an
    /// invoke key, or nothing for public reads and public rows.
    ///
    /// ```
    /// let builder = rowcall_client::Client::builder().credential("secret");
    /// # let _ = builder;
    /// ```
    pub fn credential(mut self, key: impl Into<String>) -> Self {
        self.options.credential = Some(key.into());
        self
    }

    /// Reaches the nodes over TLS, trusting `ca_pem` (PEM; the CA of the nodes' gRPC
    /// certificates — with peer TLS on, the `--peer-ca` file) and no other root. Addresses
    /// without a scheme then mean `https://`. A node's certificate must name the host its
    /// address gives, unless [`ClientBuilder::tls_domain`] names another.
    ///
    /// ```no_run
    /// let ca = std::fs::read("/etc/rowcall/tls/ca.crt")?;
    /// let client = rowcall_client::Client::builder()
    ///     .nodes(["10.0.0.1:9090", "10.0.0.2:9090"])
    ///     .tls_ca(ca)
    ///     .build()?;
    /// # let _ = client;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn tls_ca(mut self, ca_pem: impl AsRef<[u8]>) -> Self {
        let domain = self.options.tls.take().and_then(|tls| tls.domain);
        self.options.tls = Some(Tls {
            ca: Certificate::from_pem(ca_pem),
            domain,
        });
        self
    }

    /// The name the nodes' certificates are checked for, instead of each address's host
    /// (for nodes dialled by IP whose certificates name them otherwise). Needs
    /// [`ClientBuilder::tls_ca`].
    ///
    /// ```
    /// let builder = rowcall_client::Client::builder()
    ///     .tls_ca(b"-----BEGIN CERTIFICATE-----...")
    ///     .tls_domain("rowcall.internal");
    /// # let _ = builder;
    /// ```
    pub fn tls_domain(mut self, name: impl Into<String>) -> Self {
        if let Some(tls) = &mut self.options.tls {
            tls.domain = Some(name.into());
        }
        self
    }

    /// How long to wait for a TCP connection to a node (default 500 ms).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let builder = rowcall_client::Client::builder().connect_timeout(Duration::from_secs(1));
    /// # let _ = builder;
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.options.connect_timeout = timeout;
        self
    }

    /// How long one node may take to answer a read before the next is tried (default 1 s).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let builder = rowcall_client::Client::builder().read_timeout(Duration::from_millis(300));
    /// # let _ = builder;
    /// ```
    pub fn read_timeout(mut self, timeout: Duration) -> Self {
        self.options.read_timeout = timeout;
        self
    }

    /// How long one node may take to answer a write (default 6 s, beyond the node's own 5 s
    /// commit timeout).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let builder = rowcall_client::Client::builder().write_timeout(Duration::from_secs(3));
    /// # let _ = builder;
    /// ```
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.options.write_timeout = timeout;
        self
    }

    /// How long an invocation may take (default 15 s: the runner's timeout and the
    /// receipt's).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let builder = rowcall_client::Client::builder().invoke_timeout(Duration::from_secs(30));
    /// # let _ = builder;
    /// ```
    pub fn invoke_timeout(mut self, timeout: Duration) -> Self {
        self.options.invoke_timeout = timeout;
        self
    }

    /// How long one call may take in all, retries included (default 15 s).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let builder = rowcall_client::Client::builder().deadline(Duration::from_secs(5));
    /// # let _ = builder;
    /// ```
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.options.deadline = deadline;
        self
    }

    /// After how long without an answer a read is also sent to a second node, the first
    /// answer winning (default 150 ms; `None`: never). Invocations are hedged only for rows
    /// that change nothing (`risk: read`, see [`Client::invoke`]): a runner runs before its
    /// receipt commits, so a second attempt would run any other row again.
    ///
    /// ```
    /// let builder = rowcall_client::Client::builder().hedge_after(None);
    /// # let _ = builder;
    /// ```
    pub fn hedge_after(mut self, delay: Option<Duration>) -> Self {
        self.options.hedge_after = delay;
        self
    }

    /// The longest a write waits for an answer before it is also sent to another node,
    /// the first answer winning (default 250 ms; `None`: never); up to three attempts are
    /// out at once, each a delay after the one before. Sooner once the session has seen
    /// four writes answered: three times the 90th percentile of its latest 64, at least
    /// 25 ms, so a write stuck on a paused or cut-off leader is sent on within a few normal
    /// write times. The default lets a new session's write, stuck behind a leader cut off
    /// with a follower, reach the majority's side (two hedges) within about the time the
    /// majority takes to elect a successor. Every attempt carries the write's one
    /// idempotency key, so the cluster applies it once however many attempts land, and a
    /// later one is answered with the first one's outcome, while a follower carries it to
    /// the leader's successor.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let builder =
    ///     rowcall_client::Client::builder().write_hedge_after(Some(Duration::from_millis(300)));
    /// # let _ = builder;
    /// ```
    pub fn write_hedge_after(mut self, delay: Option<Duration>) -> Self {
        self.options.write_hedge_after = delay;
        self
    }

    /// How long an invocation that cannot be sent twice may wait on a node that has stopped
    /// answering (default 500 ms; `None`: until the invocation timeout). Once the call has
    /// been out this long, the node is asked a cheap read; when that is not answered within
    /// the same time either, the node is stopped or cut off (a slow runner does not stop
    /// it answering), and the call ends with [`Error::Unknown`]: the invocation may have
    /// run, and its receipt is there when the node is back. A paused node thus costs the
    /// caller about a second, not the whole invocation timeout.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let builder = rowcall_client::Client::builder().silence_limit(Some(Duration::from_secs(2)));
    /// # let _ = builder;
    /// ```
    pub fn silence_limit(mut self, limit: Option<Duration>) -> Self {
        self.options.silence_limit = limit;
        self
    }

    /// Calls `observer` after every attempt on a node, with where it went and how it ended:
    /// for logs, metrics, or a test harness that records what each node answered. It runs on
    /// the calling task; keep it short.
    ///
    /// ```
    /// let builder = rowcall_client::Client::builder()
    ///     .on_attempt(|a| eprintln!("{} in {:?}: {:?}", a.node, a.elapsed, a.failure));
    /// # let _ = builder;
    /// ```
    pub fn on_attempt(mut self, observer: impl Fn(&Attempted) + Send + Sync + 'static) -> Self {
        self.options.observer = Some(Observer(Arc::new(observer)));
        self
    }

    /// Starts the session at `index` instead of 0: a session carried over from elsewhere
    /// (another process, a web request that saw this index) keeps reading its writes.
    ///
    /// ```no_run
    /// let client = rowcall_client::Client::builder().node("a:9090").session_index(812).build()?;
    /// assert_eq!(client.session_index(), 812);
    /// # Ok::<(), rowcall_client::Error>(())
    /// ```
    pub fn session_index(mut self, index: u64) -> Self {
        self.session = index;
        self
    }

    /// The client. Connections open lazily, on first use, so a node that is down when the
    /// client is built costs nothing until it is needed. Build it inside a Tokio runtime:
    /// each node's channel starts its worker there (outside one, building panics; the
    /// examples are therefore compiled, not run).
    ///
    /// ```no_run
    /// let client = rowcall_client::Client::builder().node("127.0.0.1:9090").build()?;
    /// # let _ = client;
    /// # Ok::<(), rowcall_client::Error>(())
    /// ```
    pub fn build(self) -> Result<Client, Error> {
        if self.nodes.is_empty() {
            return Err(Error::NoNodes);
        }
        let nodes = self
            .nodes
            .iter()
            .map(|address| Node::new(address, &self.options))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Client {
            inner: Arc::new(Inner {
                nodes: RwLock::new(nodes),
                preferred: AtomicUsize::new(0),
                leader: Mutex::new(None),
                suspects: Mutex::default(),
                heard: Mutex::default(),
                read_only: Mutex::default(),
                seen: AtomicU64::new(self.session),
                write_latencies: WriteLatencies::default(),
                write_counts: WriteCounts::default(),
                options: self.options,
            }),
        })
    }
}

/// One node: its address and a reused channel (HTTP/2, multiplexed, reconnecting).
#[derive(Debug, Clone)]
struct Node {
    /// `host:port`, as leader hints name it.
    authority: String,
    channel: Channel,
}

impl Node {
    fn new(address: &str, options: &Options) -> Result<Self, Error> {
        let uri = if address.contains("://") {
            address.to_owned()
        } else if options.tls.is_some() {
            format!("https://{address}")
        } else {
            format!("http://{address}")
        };
        let invalid = |reason: String| Error::Address {
            address: address.to_owned(),
            reason,
        };
        let mut endpoint = Endpoint::from_shared(uri).map_err(|e| invalid(e.to_string()))?;
        let authority = endpoint
            .uri()
            .authority()
            .map(|a| a.as_str().to_owned())
            .ok_or_else(|| invalid("no host:port".into()))?;
        match (&options.tls, endpoint.uri().scheme_str()) {
            (Some(tls), Some("https")) => {
                let mut config = ClientTlsConfig::new().ca_certificate(tls.ca.clone());
                if let Some(domain) = &tls.domain {
                    config = config.domain_name(domain);
                }
                endpoint = endpoint
                    .tls_config(config)
                    .map_err(|e| invalid(e.to_string()))?;
            }
            (None, Some("https")) => {
                return Err(invalid(
                    "https needs the nodes' CA: ClientBuilder::tls_ca (the CLI's --ca)".into(),
                ))
            }
            (Some(_), _) => {
                return Err(invalid(
                    "a client with a TLS CA reaches nodes only over https".into(),
                ))
            }
            (None, _) => {}
        }
        let channel = endpoint
            .connect_timeout(options.connect_timeout)
            .tcp_nodelay(true)
            // Find a dead connection (a paused or partitioned node) without waiting for TCP.
            .http2_keep_alive_interval(Duration::from_secs(1))
            .keep_alive_timeout(Duration::from_secs(2))
            .keep_alive_while_idle(true)
            .connect_lazy();
        Ok(Self { authority, channel })
    }
}

/// A session with a rowcall cluster over gRPC: every call of the public API, retried across
/// the nodes as far as that is safe. Cloning is cheap and shares the session.
///
/// ```no_run
/// # async fn demo() -> Result<(), rowcall_client::Error> {
/// let client = rowcall_client::Client::connect(["http://127.0.0.1:9081", "http://127.0.0.1:9082"])?;
/// let answer = client.ask("what time is it", 3).await?;
/// if let Some(best) = answer.best {
///     let ran = client.invoke(&best.key, None).await?;
///     println!("{} -> {:?}", best.key, ran.result);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    nodes: RwLock<Vec<Node>>,
    /// The node that answered last: reads go there first.
    preferred: AtomicUsize,
    /// The leader's `host:port`, from the nodes' hints: writes go there first.
    leader: Mutex<Option<String>>,
    /// Nodes (by position) that failed an attempt, and until when they are tried last.
    suspects: Mutex<HashMap<usize, Instant>>,
    /// When each node (by position) last answered this session.
    heard: Mutex<HashMap<usize, Instant>>,
    /// Rows the nodes said change nothing (`risk: read`): their invocations are hedged.
    read_only: Mutex<HashSet<String>>,
    /// The highest index any answer carried: sent as the min index of every call.
    seen: AtomicU64,
    /// How long this session's latest writes took to be answered: when to hedge one.
    write_latencies: WriteLatencies,
    /// What became of this session's writes' hedges.
    write_counts: WriteCounts,
    options: Options,
}

/// Counters behind [`Client::write_stats`].
#[derive(Debug, Default)]
struct WriteCounts {
    writes: AtomicU64,
    hedged: AtomicU64,
    hedges_won: AtomicU64,
}

/// What became of a session's writes (directory, membership and share-token writes that
/// carry an idempotency key) since it began: [`Client::write_stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Writes called.
    pub writes: u64,
    /// Writes sent to one more node while an attempt was still out: not answered within the
    /// hedge delay, or going round the nodes again during an election.
    pub hedged: u64,
    /// Hedged writes whose outcome (an answer or a refusal) came from an attempt a hedge
    /// sent, not from the one it was sent beside.
    pub hedges_won: u64,
}

/// Most attempts of one write out at once: the first, and a hedge after each hedge delay
/// while none answers. Two were not enough when a leader is cut off with a follower: the
/// hedge reached that follower, which forwarded it to the same leader, and the write waited
/// for the leader to step down; a third reaches the majority's side, whose node carries it
/// to the successor as soon as one is elected.
const WRITE_ATTEMPTS_IN_FLIGHT: usize = 3;

/// Most rows a session remembers as read-only (their invocations hedged).
const MAX_READ_ONLY_KNOWN: usize = 10_000;

/// How a call may be retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Changes nothing: retried on any node, hedged.
    Read,
    /// A write the nodes deduplicate by its idempotency key: retried and hedged with the same
    /// key, even when its outcome is unknown.
    Write,
    /// A cluster change that converges however often it is made (add a learner, promote,
    /// snapshot) but is not deduplicated: retried like a write, never hedged (two at once
    /// could refuse each other).
    Converges,
    /// Must not happen twice (an invocation, a removal): retried only when it surely did
    /// not reach a node, or a node refused it before doing anything.
    Once,
    /// An invocation of a row that changes nothing, sent as `repeatable` (the node refuses
    /// it for any other row before it runs): retried and hedged like a read; each attempt
    /// that runs leaves its own receipt.
    Repeatable,
}

/// What one attempt on one node came to.
enum Attempt<T> {
    Answered(Response<T>),
    /// An answer to return as it is.
    Rejected(Rejection),
    /// The node could not serve it; another may.
    Retry(Rejection),
    /// The call may have taken effect; not retried.
    Unknown(Rejection),
}

/// A finished invocation, with its JSON result decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    /// Whether the capability succeeded (a failed run is an answer too: it has a receipt).
    pub ok: bool,
    /// The row that ran.
    pub key: String,
    /// What it returned, when `ok`.
    pub result: Option<Value>,
    /// Why it failed, when not `ok`.
    pub error: Option<proto::ErrorDetail>,
    /// The receipt.
    pub proof: proto::Proof,
    /// The row changes nothing (`risk: read`): this session hedges its later invocations.
    pub repeatable: bool,
}

impl From<proto::InvokeResponse> for Invocation {
    fn from(r: proto::InvokeResponse) -> Self {
        Self {
            ok: r.ok,
            key: r.key,
            result: r.result.map(json::from_value),
            error: r.error,
            proof: r.proof.unwrap_or_default(),
            repeatable: r.repeatable,
        }
    }
}

impl Client {
    /// A client for these nodes (gRPC addresses of any members), with default timeouts and
    /// no credential. Nothing is contacted yet.
    ///
    /// ```no_run
    /// let client = rowcall_client::Client::connect(["http://a:9090", "http://b:9090"])?;
    /// # let _ = client;
    /// # Ok::<(), rowcall_client::Error>(())
    /// ```
    pub fn connect<I, S>(nodes: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::builder().nodes(nodes).build()
    }

    /// A builder for nodes, credential and timeouts.
    ///
    /// ```no_run
    /// let client = rowcall_client::Client::builder().node("a:9090").credential("k").build()?;
    /// # let _ = client;
    /// # Ok::<(), rowcall_client::Error>(())
    /// ```
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// The highest index this session has seen: every call waits until the node answering
    /// it has applied this much.
    ///
    /// ```no_run
    /// let client = rowcall_client::Client::connect(["a:9090"])?;
    /// assert_eq!(client.session_index(), 0);
    /// # Ok::<(), rowcall_client::Error>(())
    /// ```
    pub fn session_index(&self) -> u64 {
        self.inner.seen.load(Ordering::Relaxed)
    }

    /// What became of this session's writes and their hedges so far.
    pub fn write_stats(&self) -> WriteStats {
        let counts = &self.inner.write_counts;
        WriteStats {
            writes: counts.writes.load(Ordering::Relaxed),
            hedged: counts.hedged.load(Ordering::Relaxed),
            hedges_won: counts.hedges_won.load(Ordering::Relaxed),
        }
    }

    /// The same cluster and credential in a new session (its own index).
    ///
    /// ```no_run
    /// let client = rowcall_client::Client::connect(["a:9090"])?;
    /// let other = client.new_session();
    /// assert_eq!(other.session_index(), 0);
    /// # Ok::<(), rowcall_client::Error>(())
    /// ```
    pub fn new_session(&self) -> Self {
        let nodes = self.nodes();
        Self {
            inner: Arc::new(Inner {
                nodes: RwLock::new(nodes),
                preferred: AtomicUsize::new(self.inner.preferred.load(Ordering::Relaxed)),
                leader: Mutex::new(self.leader()),
                suspects: Mutex::default(),
                heard: Mutex::default(),
                read_only: Mutex::new(self.read_only()),
                seen: AtomicU64::new(0),
                write_latencies: WriteLatencies::default(),
                write_counts: WriteCounts::default(),
                options: self.inner.options.clone(),
            }),
        }
    }

    /// Moves reads off the node that answered last (its stream just broke).
    pub(crate) fn rotate(&self) {
        self.inner.preferred.fetch_add(1, Ordering::Relaxed);
    }

    fn nodes(&self) -> Vec<Node> {
        self.inner
            .nodes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn leader(&self) -> Option<String> {
        self.inner
            .leader
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Which nodes to try, in order: for writes the leader first (added if it was not
    /// listed), then from the node that answered last, round the list; suspects last.
    /// Invocations start where reads do: any node runs them, and the one that answered last
    /// is the likeliest to answer now.
    fn order(&self, write_like: bool) -> Vec<usize> {
        let leader = write_like.then(|| self.leader()).flatten();
        let leader_at = leader.and_then(|authority| self.node_at(&authority));
        let count = self
            .inner
            .nodes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .len();
        let start = self.inner.preferred.load(Ordering::Relaxed) % count.max(1);
        let mut order: Vec<usize> = leader_at.into_iter().collect();
        order.extend(
            (0..count)
                .map(|i| (start + i) % count)
                .filter(|i| Some(*i) != leader_at),
        );
        let now = Instant::now();
        let suspects = self
            .inner
            .suspects
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // A stable sort: the order above holds within the trusted nodes and the suspects.
        order.sort_by_key(|at| suspects.get(at).is_some_and(|until| *until > now));
        order
    }

    /// Tries `at` after the others for a while (it failed an attempt without answering).
    fn suspect(&self, at: usize) {
        let mut suspects = self
            .inner
            .suspects
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        suspects.insert(at, Instant::now() + SUSPECT_FOR);
    }

    /// `at` answered: it is trusted again.
    fn trust(&self, at: usize) {
        let mut suspects = self
            .inner
            .suspects
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        suspects.remove(&at);
        let mut heard = self.inner.heard.lock().unwrap_or_else(|p| p.into_inner());
        heard.insert(at, Instant::now());
    }

    /// Puts first in `order` the first node that has answered this session within `within`,
    /// or answers a probe (a counts read) within it; a node that does not is suspect. An
    /// invocation cannot be sent twice, so it is sent only to a node just seen alive: a
    /// paused node then costs it one probe, not the attempt's whole timeout. Leaves the
    /// order as it is when no node answers.
    async fn live_first(&self, order: &mut [usize], within: Duration) {
        for i in 0..order.len() {
            let at = order[i];
            let recent = {
                let heard = self.inner.heard.lock().unwrap_or_else(|p| p.into_inner());
                heard.get(&at).is_some_and(|t| t.elapsed() <= within)
            };
            if recent || self.answers_within(at, within).await {
                order[..=i].rotate_right(1);
                return;
            }
            self.suspect(at);
        }
    }

    /// Whether rowcall on `at` answers a cheap read within `within` (any answer it gives,
    /// a refusal included, shows it is running).
    async fn answers_within(&self, at: usize, within: Duration) -> bool {
        let Some((_, channel)) = self.channel(at) else {
            return false;
        };
        let request = self.request(proto::CountsRequest {}, None, within);
        let mut directory = DirectoryClient::new(channel);
        let probe = directory.counts(request);
        let alive = match tokio::time::timeout(within, probe).await {
            Ok(Ok(_)) => true,
            Ok(Err(status)) => Rejection::from_status(&status).from_rowcall(),
            Err(_) => false,
        };
        if alive {
            self.trust(at);
        }
        alive
    }

    /// The position of the node at `authority`, adding it if a hint named one not listed.
    fn node_at(&self, authority: &str) -> Option<usize> {
        let mut nodes = self.inner.nodes.write().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = nodes.iter().position(|n| n.authority == authority) {
            return Some(i);
        }
        let node = Node::new(authority, &self.inner.options).ok()?;
        nodes.push(node);
        Some(nodes.len() - 1)
    }

    fn channel(&self, at: usize) -> Option<(String, Channel)> {
        let nodes = self.inner.nodes.read().unwrap_or_else(|p| p.into_inner());
        nodes
            .get(at)
            .map(|n| (n.authority.clone(), n.channel.clone()))
    }

    /// Notes what an answer (or an error) says: the index seen, the leader.
    fn observe(&self, metadata: &MetadataMap) {
        let text = |key: &str| metadata.get(key).and_then(|v| v.to_str().ok());
        if let Some(index) = text(INDEX).and_then(|v| v.parse::<u64>().ok()) {
            self.inner.seen.fetch_max(index, Ordering::Relaxed);
        }
        if let Some((_, address)) = text(LEADER).and_then(|v| v.split_once('=')) {
            *self.inner.leader.lock().unwrap_or_else(|p| p.into_inner()) = Some(address.to_owned());
        }
    }

    fn attempt_timeout(&self, kind: Kind, write_like: bool) -> Duration {
        let options = &self.inner.options;
        match (kind, write_like) {
            (Kind::Read, _) => options.read_timeout,
            (_, true) => options.write_timeout,
            (_, false) => options.invoke_timeout,
        }
    }

    /// Makes one call: builds the request for each attempt (credential, session index,
    /// idempotency key, deadline), orders the nodes, hedges reads, retries what is safe to.
    async fn call<M, T, F, Fut>(
        &self,
        kind: Kind,
        write_like: bool,
        message: M,
        rpc: F,
    ) -> Result<Response<T>, Error>
    where
        M: Clone,
        F: Fn(Channel, Request<M>) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        let options = &self.inner.options;
        let deadline = Instant::now() + options.deadline;
        let per_attempt = self.attempt_timeout(kind, write_like);
        // One key for every attempt of a write: the cluster applies it at most once.
        let idempotency_key = matches!(kind, Kind::Write | Kind::Converges).then(new_request_id);
        let mut backoff = options.backoff;
        let mut attempts = 0u32;
        let mut last = None;
        let counts = (kind == Kind::Write).then_some(&self.inner.write_counts);
        if let Some(counts) = counts {
            counts.writes.fetch_add(1, Ordering::Relaxed);
        }
        // Nodes (by position) a hedge sent this call to, and whether one was sent at all.
        let mut hedged_to: Vec<usize> = Vec::new();
        let won = |at: usize, hedged_to: &[usize]| {
            if let Some(counts) = counts.filter(|_| hedged_to.contains(&at)) {
                counts.hedges_won.fetch_add(1, Ordering::Relaxed);
            }
        };
        loop {
            let mut order = self.order(write_like);
            if let (Kind::Once, Some(within)) = (kind, options.hedge_after) {
                self.live_first(&mut order, within).await;
            }
            let mut next = order.into_iter();
            let mut pending = FuturesUnordered::new();
            // Nodes whose attempt of this round is still out.
            let mut out = Vec::new();
            // A single-shot call's node, asked whether it still answers anything at all.
            let silence = options.silence_limit.filter(|_| kind == Kind::Once);
            let mut probe_at = silence.map(|limit| Instant::now() + limit);
            let mut probe = pin!(Fuse::terminated());
            let launch = |at: usize, pending: &mut FuturesUnordered<_>| {
                let Some((authority, channel)) = self.channel(at) else {
                    return;
                };
                let remaining = deadline.saturating_duration_since(Instant::now());
                let timeout = per_attempt.min(remaining);
                let request = self.request(message.clone(), idempotency_key.as_deref(), timeout);
                let min_index = min_index_of(request.metadata());
                let sent = rpc(channel, request);
                let started = std::time::Instant::now();
                pending.push(async move {
                    let outcome = tokio::time::timeout(timeout, sent).await;
                    (at, authority, (started, min_index), outcome)
                });
            };
            // When the latest attempt went out: the next hedge is due a hedge delay after it,
            // however many attempts ended meanwhile.
            let mut launched = Instant::now();
            if let Some(at) = next.next() {
                launch(at, &mut pending);
                out.push(at);
                attempts += 1;
            }
            while !pending.is_empty() {
                // A read or a write still unanswered after its hedge delay goes to one more
                // node (a paused leader holds a write as long as a read).
                let delay = match kind {
                    Kind::Read | Kind::Repeatable => options.hedge_after,
                    Kind::Write => options
                        .write_hedge_after
                        .map(|ceiling| self.inner.write_latencies.hedge_after(ceiling)),
                    Kind::Converges | Kind::Once => None,
                };
                let in_flight = if kind == Kind::Write {
                    WRITE_ATTEMPTS_IN_FLIGHT
                } else {
                    2
                };
                let hedge = match delay {
                    // Going round again waits as long as a new round would.
                    Some(delay) if pending.len() < in_flight && next.len() == 0 => {
                        delay.max(backoff)
                    }
                    Some(delay) if pending.len() < in_flight => delay,
                    _ => Duration::MAX,
                };
                let sleep = pin!(tokio::time::sleep_until(
                    launched + hedge.min(Duration::from_secs(3600))
                ));
                tokio::select! {
                    Some((at, authority, sent, outcome)) = pending.next() => {
                        self.report(&authority, sent, &outcome);
                        if kind == Kind::Write && matches!(outcome, Ok(Ok(_))) {
                            self.inner.write_latencies.record(sent.0.elapsed());
                        }
                        out.retain(|&o| o != at);
                        match self.judge(kind, outcome) {
                            Attempt::Answered(response) => {
                                self.trust(at);
                                won(at, &hedged_to);
                                // A hedge answered first: the node it outran was too slow.
                                for &slow in &out {
                                    self.suspect(slow);
                                }
                                if matches!(kind, Kind::Read | Kind::Once | Kind::Repeatable) {
                                    self.inner.preferred.store(at, Ordering::Relaxed);
                                }
                                return Ok(response);
                            }
                            Attempt::Rejected(rejection) => {
                                self.trust(at);
                                won(at, &hedged_to);
                                return Err(Error::Rejected(Box::new(rejection)));
                            }
                            Attempt::Unknown(rejection) => {
                                self.suspect(at);
                                return Err(Error::Unknown { node: authority, last: Box::new(rejection) })
                            }
                            Attempt::Retry(rejection) => {
                                self.suspect(at);
                                last = Some(rejection);
                                // Fast failover: the next node at once.
                                if pending.is_empty() && Instant::now() < deadline {
                                    if let Some(at) = next.next() {
                                        launch(at, &mut pending);
                                        launched = Instant::now();
                                        out.push(at);
                                        attempts += 1;
                                        probe_at = silence.map(|limit| Instant::now() + limit);
                                        probe.set(Fuse::terminated());
                                    }
                                }
                            }
                        }
                    }
                    _ = sleep, if hedge != Duration::MAX => {
                        // Every other node has had its turn this round (they refused at once:
                        // an election was under way) while one attempt hangs: go round them
                        // again, one per hedge delay, rather than wait on the hanging one.
                        let at = next.next().or_else(|| {
                            next = self.order(write_like)
                                .into_iter()
                                .filter(|at| !out.contains(at))
                                .collect::<Vec<_>>()
                                .into_iter();
                            backoff = (backoff * 2).min(options.backoff_max);
                            next.next()
                        });
                        // Due again a delay from now, whether or not one went out (every
                        // node busy with this call, or its deadline passed).
                        launched = Instant::now();
                        if let Some(at) = at.filter(|_| Instant::now() < deadline) {
                            launch(at, &mut pending);
                            out.push(at);
                            attempts += 1;
                            if let Some(counts) = counts.filter(|_| hedged_to.is_empty()) {
                                counts.hedged.fetch_add(1, Ordering::Relaxed);
                            }
                            hedged_to.push(at);
                        }
                    }
                    _ = tokio::time::sleep_until(probe_at.unwrap_or_else(Instant::now)),
                        if probe_at.is_some() && probe.is_terminated() && out.len() == 1 =>
                    {
                        if let Some(limit) = silence {
                            probe.set(self.answers_within(out[0], limit).fuse());
                        }
                    }
                    alive = &mut probe, if !probe.is_terminated() => {
                        let (Some(limit), &[at]) = (silence, out.as_slice()) else { continue };
                        if alive {
                            probe_at = Some(Instant::now() + limit);
                            continue;
                        }
                        self.suspect(at);
                        let node = self.channel(at).map(|(authority, _)| authority).unwrap_or_default();
                        return Err(Error::Unknown {
                            node,
                            last: Box::new(Rejection {
                                status: Code::Unavailable,
                                code: "node_silent".into(),
                                message: format!(
                                    "the node stopped answering while the call was on it (nothing within {} ms); it may have run",
                                    limit.as_millis()
                                ),
                                hint: "look for its receipt once the node is back".into(),
                                request_id: None,
                                violations: Vec::new(),
                            }),
                        });
                    }
                }
            }
            // Every node failed this round: back off, with full jitter, and go round again.
            let now = Instant::now();
            if now >= deadline {
                let last = last.unwrap_or_else(|| Rejection {
                    status: Code::DeadlineExceeded,
                    code: String::new(),
                    message: "the call's deadline passed".into(),
                    hint: String::new(),
                    request_id: None,
                    violations: Vec::new(),
                });
                return Err(Error::Unavailable {
                    attempts,
                    last: Box::new(last),
                });
            }
            let pause = rand::rng().random_range(Duration::ZERO..=backoff);
            tokio::time::sleep(pause.min(deadline - now)).await;
            backoff = (backoff * 2).min(options.backoff_max);
        }
    }

    /// Tells the observer, if any, how an attempt ended.
    fn report<T>(
        &self,
        node: &str,
        (sent, min_index): (std::time::Instant, u64),
        outcome: &Result<Result<Response<T>, Status>, tokio::time::error::Elapsed>,
    ) {
        let Some(Observer(observer)) = &self.inner.options.observer else {
            return;
        };
        let (metadata, failure) = match outcome {
            Ok(Ok(response)) => (Some(response.metadata()), None),
            Ok(Err(status)) => (
                Some(status.metadata()),
                Some(Rejection::from_status(status)),
            ),
            Err(_) => (None, Some(Rejection::from_status(&timed_out()))),
        };
        let text = |key: &str| metadata?.get(key)?.to_str().ok();
        observer(&Attempted {
            node: node.to_owned(),
            sent,
            elapsed: sent.elapsed(),
            min_index,
            index: text(INDEX).and_then(|v| v.parse().ok()),
            stale: text(STALE) == Some("true"),
            failure,
        });
    }

    /// A request with the session's metadata.
    fn request<M>(
        &self,
        message: M,
        idempotency_key: Option<&str>,
        timeout: Duration,
    ) -> Request<M> {
        let mut request = Request::new(message);
        request.set_timeout(timeout);
        let metadata = request.metadata_mut();
        if let Some(key) = &self.inner.options.credential {
            if let Ok(value) = format!("Bearer {key}").parse() {
                metadata.insert("authorization", value);
            }
        }
        let seen = self.session_index();
        if seen > 0 {
            metadata.insert(MIN_INDEX, MetadataValue::from(seen));
        }
        if let Some(key) = idempotency_key.and_then(|k| k.parse().ok()) {
            metadata.insert(IDEMPOTENCY_KEY, key);
        }
        request
    }

    /// What one attempt's outcome means for the call.
    fn judge<T>(
        &self,
        kind: Kind,
        outcome: Result<Result<Response<T>, Status>, tokio::time::error::Elapsed>,
    ) -> Attempt<T> {
        let status = match outcome {
            Ok(Ok(response)) => {
                self.observe(response.metadata());
                return Attempt::Answered(response);
            }
            Ok(Err(status)) => status,
            // No answer in time: a paused or partitioned node.
            Err(_) => timed_out(),
        };
        self.observe(status.metadata());
        let rejection = Rejection::from_status(&status);
        if rejection.from_rowcall() {
            let node_level = NODE_LEVEL.contains(&rejection.code.as_str());
            return match kind {
                _ if node_level => Attempt::Retry(rejection),
                Kind::Write | Kind::Converges if rejection.code == "outcome_unknown" => {
                    Attempt::Retry(rejection)
                }
                _ => Attempt::Rejected(rejection),
            };
        }
        // No answer from rowcall: the transport failed, or the attempt timed out.
        let never_sent = status.code() == Code::Unavailable
            && status.message().to_ascii_lowercase().contains("connect");
        match kind {
            Kind::Read | Kind::Write | Kind::Converges | Kind::Repeatable => {
                Attempt::Retry(rejection)
            }
            Kind::Once if never_sent => Attempt::Retry(rejection),
            Kind::Once => Attempt::Unknown(rejection),
        }
    }

    // ---- Dispatch ----

    /// Ranked candidates for a plain-language request (`limit` 0: the default, 5).
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// let answer = client.ask("convert currencies", 5).await?;
    /// for c in &answer.candidates {
    ///     println!("{} {:.2} {}", c.key, c.score, c.what);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn ask(&self, ask: &str, limit: u32) -> Result<proto::AskResponse, Error> {
        self.ask_ranked(ask, limit, "").await
    }

    /// As [`Client::ask`], ranked one way: `lexical`, `dense` or `fused` (empty: the
    /// node's default). For comparing the resolver's halves, as `rowcall eval` does.
    pub async fn ask_ranked(
        &self,
        ask: &str,
        limit: u32,
        mode: &str,
    ) -> Result<proto::AskResponse, Error> {
        let message = proto::AskRequest {
            ask: ask.to_owned(),
            limit,
            mode: mode.to_owned(),
        };
        let response = self
            .call(Kind::Read, false, message, |ch, r| async move {
                DispatchClient::new(ch).ask(r).await
            })
            .await?;
        Ok(response.into_inner())
    }

    /// A row's contract as JSON (what it does, how to call it, an example, auth, risk,
    /// troubleshooting).
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// let contract = client.contract("TIME_NOW").await?;
    /// println!("{}", contract["invoke"]["body"]);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn contract(&self, key: &str) -> Result<Value, Error> {
        match self.contract_in(key, "json").await? {
            contract_response::Contract::Json(s) => {
                let contract = json::from_struct(s);
                if let Some(risk) = contract.get("risk").and_then(Value::as_str) {
                    self.learn_risk(key, risk == "read");
                }
                Ok(Value::Object(contract))
            }
            contract_response::Contract::Markdown(text) => Ok(Value::String(text)),
        }
    }

    /// A row's contract in Markdown, written for models.
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// println!("{}", client.contract_markdown("TIME_NOW").await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn contract_markdown(&self, key: &str) -> Result<String, Error> {
        match self.contract_in(key, "markdown").await? {
            contract_response::Contract::Markdown(text) => Ok(text),
            contract_response::Contract::Json(s) => {
                Ok(Value::Object(json::from_struct(s)).to_string())
            }
        }
    }

    async fn contract_in(
        &self,
        key: &str,
        format: &str,
    ) -> Result<contract_response::Contract, Error> {
        let message = proto::ContractRequest {
            key: key.to_owned(),
            format: format.to_owned(),
        };
        let response = self
            .call(Kind::Read, false, message, |ch, r| async move {
                DispatchClient::new(ch).contract(r).await
            })
            .await?;
        response
            .into_inner()
            .contract
            .ok_or_else(|| Error::Argument("the node answered an empty contract".into()))
    }

    /// Runs a row with named arguments. An invocation may run the capability, so it is not
    /// retried once it may have reached a node, with one exception: a row the nodes said
    /// changes nothing (`risk: read`, learnt from its contract or an earlier invocation in
    /// this session) is sent as `repeatable` and hedged like a read, so a node that stopped
    /// answering costs the hedge delay rather than the invocation timeout.
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// let args = serde_json::json!({"text": "hello"});
    /// let ran = client.invoke("ECHO", args.as_object().cloned()).await?;
    /// assert!(ran.ok);
    /// println!("receipt {}", ran.proof.invocation_id);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn invoke(
        &self,
        key: &str,
        args: Option<Map<String, Value>>,
    ) -> Result<Invocation, Error> {
        self.invoke_with(proto::InvokeRequest {
            key: key.to_owned(),
            args: args.map(json::to_struct),
            body: None,
            share: None,
            repeatable: false,
        })
        .await
    }

    /// Runs a row as the request says (arguments, a raw body, a share token).
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// use rowcall_client::proto::InvokeRequest;
    /// let request = InvokeRequest { key: "ECHO".into(), body: Some("hi".into()), ..Default::default() };
    /// let ran = client.invoke_with(request).await?;
    /// # let _ = ran;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn invoke_with(
        &self,
        mut request: proto::InvokeRequest,
    ) -> Result<Invocation, Error> {
        let key = request.key.clone();
        request.repeatable |= self.is_read_only(&key);
        let kind = if request.repeatable {
            Kind::Repeatable
        } else {
            Kind::Once
        };
        let rpc = |ch, r| async move { DispatchClient::new(ch).invoke(r).await };
        let response = match self.call(kind, false, request.clone(), rpc).await {
            // The row changes something now: refused before it ran, so sent again once.
            Err(e) if kind == Kind::Repeatable && e.code() == Some("not_repeatable") => {
                self.learn_risk(&key, false);
                request.repeatable = false;
                self.call(Kind::Once, false, request, rpc).await?
            }
            other => other?,
        };
        let invocation = Invocation::from(response.into_inner());
        self.learn_risk(&key, invocation.repeatable);
        Ok(invocation)
    }

    /// Whether the nodes said row `key` changes nothing.
    fn is_read_only(&self, key: &str) -> bool {
        let read_only = self.inner.read_only.lock();
        read_only.unwrap_or_else(|p| p.into_inner()).contains(key)
    }

    /// Notes whether row `key` changes nothing, as a node said.
    fn learn_risk(&self, key: &str, read_only: bool) {
        let mut known = self
            .inner
            .read_only
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // Bounded: a session that runs rows of a huge catalogue hedges the first it learnt.
        if read_only && known.len() < MAX_READ_ONLY_KNOWN {
            known.insert(key.to_owned());
        } else if !read_only {
            known.remove(key);
        }
    }

    /// The rows this session knows change nothing.
    fn read_only(&self) -> HashSet<String> {
        let read_only = self.inner.read_only.lock();
        read_only.unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Checks a receipt without a credential; an unknown id is [`Error::is_not_found`].
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// let confirmed = client.confirm("inv_0123456789").await?;
    /// println!("{} ran at {}", confirmed.key, confirmed.at);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn confirm(&self, id: &str) -> Result<proto::ConfirmResponse, Error> {
        let message = proto::ConfirmRequest { id: id.to_owned() };
        let response = self
            .call(Kind::Read, false, message, |ch, r| async move {
                DispatchClient::new(ch).confirm(r).await
            })
            .await?;
        Ok(response.into_inner())
    }

    // ---- Directory ----

    /// One row.
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// let row = client.get("TIME_NOW").await?;
    /// println!("{} v{}", row.key, row.version);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn get(&self, key: &str) -> Result<proto::Row, Error> {
        let message = proto::GetRowRequest {
            key: key.to_owned(),
        };
        let response = self
            .call(Kind::Read, false, message, |ch, r| async move {
                DirectoryClient::new(ch).get(r).await
            })
            .await?;
        Ok(response.into_inner())
    }

    /// A page of rows in key order (`limit` 0: the default, 100); pass the answer's
    /// `next_cursor` for the next page.
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// let mut cursor = String::new();
    /// loop {
    ///     let page = client.list(None, &cursor, 0).await?;
    ///     for row in &page.rows {
    ///         println!("{}", row.key);
    ///     }
    ///     if page.next_cursor.is_empty() {
    ///         break;
    ///     }
    ///     cursor = page.next_cursor;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn list(
        &self,
        category: Option<&str>,
        cursor: &str,
        limit: u32,
    ) -> Result<proto::ListRowsResponse, Error> {
        let message = proto::ListRowsRequest {
            category: category.unwrap_or_default().to_owned(),
            cursor: cursor.to_owned(),
            limit,
        };
        let response = self
            .call(Kind::Read, false, message, |ch, r| async move {
                DirectoryClient::new(ch).list(r).await
            })
            .await?;
        Ok(response.into_inner())
    }

    /// Inserts or replaces one row (admin key). Retried safely: every attempt carries the
    /// same idempotency key, so the row is written once.
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// let row = serde_json::json!({"key": "HELLO", "type": "static", "auth": "public",
    ///                              "content": "# WHAT: Say hello\n\nhello"});
    /// let written = client.put(rowcall_client::row_input(row)?).await?;
    /// println!("HELLO is at version {}", written.rows[0].version);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn put(&self, row: proto::RowInput) -> Result<proto::PutRowsResponse, Error> {
        let message = proto::PutRowRequest { row: Some(row) };
        let response = self
            .call(Kind::Write, true, message, |ch, r| async move {
                DirectoryClient::new(ch).put(r).await
            })
            .await?;
        Ok(response.into_inner())
    }

    /// Inserts or replaces rows in one atomic write (admin key): all or none.
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client, rows: Vec<rowcall_client::proto::RowInput>) -> Result<(), rowcall_client::Error> {
    /// let written = client.put_many(rows).await?;
    /// println!("{} rows at index {}", written.rows.len(), written.index);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn put_many(
        &self,
        rows: Vec<proto::RowInput>,
    ) -> Result<proto::PutRowsResponse, Error> {
        let message = proto::PutManyRequest { rows };
        let response = self
            .call(Kind::Write, true, message, |ch, r| async move {
                DirectoryClient::new(ch).put_many(r).await
            })
            .await?;
        Ok(response.into_inner())
    }

    /// Deletes a row (admin key), only at `if_version` when given. Its receipts stay.
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// client.delete("HELLO", None).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn delete(
        &self,
        key: &str,
        if_version: Option<u64>,
    ) -> Result<proto::DeleteRowResponse, Error> {
        let message = proto::DeleteRowRequest {
            key: key.to_owned(),
            if_version,
        };
        let response = self
            .call(Kind::Write, true, message, |ch, r| async move {
                DirectoryClient::new(ch).delete(r).await
            })
            .await?;
        Ok(response.into_inner())
    }

    /// The four counts of the directory.
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// let counts = client.counts().await?;
    /// println!("{} rows, {} projected to MCP", counts.rows_total, counts.mcp_projected);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn counts(&self) -> Result<proto::Counts, Error> {
        let response = self
            .call(
                Kind::Read,
                false,
                proto::CountsRequest {},
                |ch, r| async move { DirectoryClient::new(ch).counts(r).await },
            )
            .await?;
        Ok(response.into_inner())
    }

    /// Opens one watch stream on one node (for [`crate::Watch`]): the request carries `since` and
    /// asks the node to have applied it first.
    pub(crate) async fn open_watch(
        &self,
        since: Option<u64>,
    ) -> Result<Response<tonic::Streaming<proto::WatchEvent>>, Error> {
        let message = proto::WatchRequest { since };
        self.call(Kind::Read, false, message, move |ch, mut r| {
            if let Some(since) = since {
                let seen = since.max(self.session_index());
                r.metadata_mut()
                    .insert(MIN_INDEX, MetadataValue::from(seen));
            }
            // A stream lives on: no per-request deadline.
            r.metadata_mut().remove("grpc-timeout");
            async move { DirectoryClient::new(ch).watch(r).await }
        })
        .await
    }

    // ---- Receipts ----

    /// One receipt with its stored input and output (admin key).
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// let receipt = client.receipt("inv_0123456789").await?;
    /// println!("{} by {}", receipt.key, receipt.caller);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn receipt(&self, id: &str) -> Result<proto::Receipt, Error> {
        let message = proto::GetReceiptRequest { id: id.to_owned() };
        let response = self
            .call(Kind::Read, false, message, |ch, r| async move {
                ReceiptsClient::new(ch).get(r).await
            })
            .await?;
        Ok(response.into_inner())
    }

    /// The receipts of one row, newest first (admin key; `limit` 0: the default, 50).
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// let receipts = client.receipts("TIME_NOW", 10).await?;
    /// println!("{} receipts", receipts.receipts.len());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn receipts(
        &self,
        key: &str,
        limit: u32,
    ) -> Result<proto::ListReceiptsResponse, Error> {
        let message = proto::ListReceiptsRequest {
            key: key.to_owned(),
            limit,
        };
        let response = self
            .call(Kind::Read, false, message, |ch, r| async move {
                ReceiptsClient::new(ch).list_by_key(r).await
            })
            .await?;
        Ok(response.into_inner())
    }

    // ---- Transparency ----

    /// The latest checkpoint of the receipt log that a majority of voters signed (no
    /// credential); refused with `FAILED_PRECONDITION` before the first. Check its note
    /// against voter keys you pinned, not the `keys` it lists: [`crate::verify`] does.
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// let checkpoint = client.checkpoint().await?;
    /// println!("{} has {} receipts", checkpoint.origin, checkpoint.size);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn checkpoint(&self) -> Result<proto::SignedCheckpoint, Error> {
        let response = self
            .call(
                Kind::Read,
                false,
                proto::CheckpointRequest {},
                |ch, r| async move { TransparencyClient::new(ch).checkpoint(r).await },
            )
            .await?;
        Ok(response.into_inner())
    }

    /// Receipt `id`'s leaf and its inclusion path into the tree of `size` leaves (0: the
    /// latest co-signed checkpoint's, which the answer then carries). A receipt that checkpoint
    /// does not cover yet is refused with `FAILED_PRECONDITION`: ask again a second later.
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// let proof = client.prove("inv_0123456789", 0).await?;
    /// println!("leaf {} of {}", proof.leaf_index, proof.tree_size);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn prove(&self, id: &str, size: u64) -> Result<proto::InclusionProof, Error> {
        let message = proto::ProveRequest {
            id: id.to_owned(),
            size,
        };
        let response = self
            .call(Kind::Read, false, message, |ch, r| async move {
                TransparencyClient::new(ch).prove(r).await
            })
            .await?;
        Ok(response.into_inner())
    }

    /// The proof that the tree of `from` leaves is a prefix of the tree of `to` leaves (0:
    /// the latest co-signed checkpoint's size).
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// let proof = client.consistency(97, 120).await?;
    /// println!("{} hashes", proof.path.len());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn consistency(&self, from: u64, to: u64) -> Result<proto::ConsistencyProof, Error> {
        let message = proto::ConsistencyRequest { from, to };
        let response = self
            .call(Kind::Read, false, message, |ch, r| async move {
                TransparencyClient::new(ch).consistency(r).await
            })
            .await?;
        Ok(response.into_inner())
    }

    /// The leaf hashes from `start` up to `end` (exclusive; 0: as many as the node gives, at
    /// most 1000), for mirrors and witnesses.
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// let page = client.leaves(0, 100).await?;
    /// for leaf in &page.leaves {
    ///     println!("{} {}", leaf.index, leaf.id);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn leaves(&self, start: u64, end: u64) -> Result<proto::LeavesResponse, Error> {
        let message = proto::LeavesRequest { start, end };
        let response = self
            .call(Kind::Read, false, message, |ch, r| async move {
                TransparencyClient::new(ch).leaves(r).await
            })
            .await?;
        Ok(response.into_inner())
    }

    // ---- Cluster ----

    /// One node's view of the cluster (the node that answers first).
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// let status = client.status().await?;
    /// println!("node {} is {}, leader {:?}", status.node_id, status.role, status.leader);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn status(&self) -> Result<proto::StatusResponse, Error> {
        let response = self
            .call(
                Kind::Read,
                false,
                proto::StatusRequest {},
                |ch, r| async move { ClusterClient::new(ch).status(r).await },
            )
            .await?;
        Ok(response.into_inner())
    }

    /// Adds a node as a learner (admin key); joining twice is harmless.
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// client.add_learner(4, "10.0.0.4:9090", "10.0.0.4:8080").await?;
    /// client.promote(4).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn add_learner(
        &self,
        id: u64,
        grpc_addr: &str,
        http_addr: &str,
    ) -> Result<(), Error> {
        let message = proto::AddLearnerRequest {
            id,
            grpc_addr: grpc_addr.to_owned(),
            http_addr: http_addr.to_owned(),
        };
        self.call(Kind::Converges, true, message, |ch, r| async move {
            ClusterClient::new(ch).add_learner(r).await
        })
        .await?;
        Ok(())
    }

    /// Makes a learner a voter (admin key); promoting a voter is harmless.
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// client.promote(4).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn promote(&self, id: u64) -> Result<(), Error> {
        let message = proto::PromoteRequest { id };
        self.call(Kind::Converges, true, message, |ch, r| async move {
            ClusterClient::new(ch).promote(r).await
        })
        .await?;
        Ok(())
    }

    /// Takes a voter or a learner out (admin key). Not retried once sent: a second removal
    /// would be refused ("not a member") after the first took effect.
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// client.remove(4).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn remove(&self, id: u64) -> Result<(), Error> {
        let message = proto::RemoveRequest { id };
        self.call(Kind::Once, true, message, |ch, r| async move {
            ClusterClient::new(ch).remove(r).await
        })
        .await?;
        Ok(())
    }

    /// Moves leadership to voter `to`, or to the voter furthest along when `None` (admin
    /// key), and returns the leader afterwards: before maintenance of the leader's host, as
    /// etcd's `move-leader`. A move to a named voter is retried (moving it again where it
    /// already is changes nothing); a move to whichever voter is not.
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// let leader = client.move_leader(Some(2)).await?;
    /// assert_eq!(leader, 2);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn move_leader(&self, to: Option<u64>) -> Result<u64, Error> {
        let kind = if to.is_some() {
            Kind::Converges
        } else {
            Kind::Once
        };
        let message = proto::MoveLeaderRequest { to };
        self.call(kind, true, message, |ch, r| async move {
            ClusterClient::new(ch).move_leader(r).await
        })
        .await
        .map(|r| r.into_inner().leader)
    }

    /// Mints a join token valid for `ttl_seconds` (admin key): a new node started with it
    /// and `--join` receives the cluster's peer credential. Minted once: never retried after
    /// it may have reached a node (each attempt would mint another).
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// let minted = client.join_token(3600).await?;
    /// println!("ROWCALL_JOIN_TOKEN={}", minted.token);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn join_token(&self, ttl_seconds: u64) -> Result<proto::JoinTokenResponse, Error> {
        let message = proto::CreateJoinTokenRequest { ttl_seconds };
        self.call(Kind::Once, true, message, |ch, r| async move {
            ClusterClient::new(ch).create_join_token(r).await
        })
        .await
        .map(tonic::Response::into_inner)
    }

    /// Has the node that answers build a snapshot now and purge its log (admin key).
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// client.snapshot().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn snapshot(&self) -> Result<(), Error> {
        self.call(
            Kind::Converges,
            true,
            proto::SnapshotRequest {},
            |ch, r| async move { ClusterClient::new(ch).snapshot(r).await },
        )
        .await?;
        Ok(())
    }
}

/// What an attempt that got no answer within its timeout came to.
fn timed_out() -> Status {
    Status::deadline_exceeded("no answer within the attempt's timeout")
}

/// The `x-rowcall-min-index` a request carries (0: none).
fn min_index_of(metadata: &MetadataMap) -> u64 {
    metadata
        .get(MIN_INDEX)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A fresh idempotency key: 128 random bits, hex.
fn new_request_id() -> String {
    let bits: u128 = rand::random();
    format!("{bits:032x}")
}
