//! Node assembly: read the data folder's identity, open storage, start Raft, serve HTTP and
//! gRPC, and bring a fresh node into a cluster (founding one, with the demo catalogue, or
//! joining its peers') until shut down.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use rowcall_proto::raft::raft_service_server::RaftServiceServer;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::service::interceptor::InterceptedService;

use crate::api::http::tls::HttpsTls;
use crate::api::peer::RaftGrpc;
use crate::api::{grpc, http};
use crate::app::App;
use crate::auth::{generate_key, Credentials};
use crate::catalogue::embed::{self, Embedder, Weights};
use crate::catalogue::semantic::{self, Semantic};
use crate::catalogue::{demo, SharedCatalogue};
use crate::cluster::enter::{enter, Entered, Plan};
use crate::cluster::peers;
use crate::config::Config;
use crate::dispatch::outbox::Outbox;
use crate::model::time::now_ms;
use crate::raft::auth::PeerAuth;
use crate::raft::faults::Faults;
use crate::raft::identity::LocalIdentity;
use crate::raft::liveness::Liveness;
use crate::raft::network::{Network, MAX_MESSAGE_BYTES};
use crate::raft::standing::{Progress, Standing};
use crate::raft::tls::incoming;
use crate::raft::{Command, NodeInfo};
use crate::store::Raft;
use crate::store::{Durable, LogStore, StateMachine};
use rowcall_proto::raft::peer_enrollment_server::PeerEnrollmentServer;

/// A running node: its bound addresses and the means to stop it.
pub struct NodeHandle {
    /// The shared node state (for in-process tests and tools).
    pub app: Arc<App>,
    /// Where HTTP listens (the real port when configured with port 0).
    pub http_addr: SocketAddr,
    /// Where gRPC listens.
    pub grpc_addr: SocketAddr,
    /// Whether the HTTP listener speaks HTTPS.
    pub https: bool,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl NodeHandle {
    /// `http://<http_addr>` (`https://` with HTTPS).
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.http_addr)
    }

    /// Stops the node the way an operator's SIGTERM does: a leader first hands leadership
    /// to a voter that is level with its log ([`crate::cluster::handover`]), so writes pause
    /// for a round trip rather than an election; then [`NodeHandle::halt`].
    pub async fn shutdown(self) {
        let raft = &self.app.config.raft;
        let bound = Duration::from_millis(raft.handover_timeout_ms);
        // Failures are logged there; the node stops either way.
        if let Ok(Some(_)) = self.app.hand_over_leadership(bound).await {
            // A follower that has not yet heard of the successor still forwards writes here:
            // for two heartbeats it is told who leads now, rather than finding a closed port.
            tokio::time::sleep(Duration::from_millis(2 * raft.heartbeat_ms)).await;
        }
        self.halt().await;
    }

    /// Stops serving and shuts Raft down at once, leadership and all (peers notice as they
    /// would a crash); storage is flushed.
    pub async fn halt(self) {
        let _ = self.shutdown.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        if let Err(e) = self.app.raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
    }

    /// Waits until the servers stop (they stop on shutdown or on a fatal error).
    pub async fn wait(&mut self) {
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
    }
}

/// Reads the admin key from the configuration, or from the data folder, or makes one and
/// stores it there (printed once so the operator can use it).
fn admin_key(config: &Config, data: &Path) -> anyhow::Result<String> {
    if let Some(key) = &config.auth.admin_key {
        return Ok(key.clone());
    }
    if let Some(file) = &config.auth.admin_key_file {
        let key = std::fs::read_to_string(file)
            .with_context(|| format!("reading admin_key_file {}", file.display()))?;
        return Ok(key.trim().to_owned());
    }
    let stored = data.join("admin.key");
    if let Ok(key) = std::fs::read_to_string(&stored) {
        return Ok(key.trim().to_owned());
    }
    let key = generate_key();
    write_private(&stored, &key)?;
    // Logs are copied to places a secret must not go: say where it is, not what it is.
    println!(
        "rowcall: generated an admin key and stored it in {} (readable by this user only)",
        stored.display()
    );
    Ok(key)
}

/// Creates the data folder readable by this user only (it holds the admin key, receipts and
/// the share secret); an existing folder open to others is tightened, with a warning.
fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        builder.mode(0o700);
        builder
            .create(dir)
            .with_context(|| format!("creating data folder {}", dir.display()))?;
        let mode = std::fs::metadata(dir)?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(folder = %dir.display(), mode = format!("{mode:o}"), "data folder was open to others; setting it to 700");
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    #[cfg(not(unix))]
    builder
        .create(dir)
        .with_context(|| format!("creating data folder {}", dir.display()))?;
    Ok(())
}

fn write_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(contents.as_bytes())?;
    file.sync_all()?;
    Ok(())
}

/// The gRPC server with its limits: requests in flight per connection, HTTP/2 streams, a
/// deadline per request, and keepalive pings that drop a peer that stopped answering.
fn grpc_server(limits: &crate::config::GrpcLimits) -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .concurrency_limit_per_connection(limits.concurrency_per_connection.max(1))
        .max_concurrent_streams(limits.max_concurrent_streams.max(1))
        .timeout(Duration::from_millis(limits.request_timeout_ms.max(1)))
        .http2_keepalive_interval(Some(Duration::from_millis(
            limits.keepalive_interval_ms.max(1),
        )))
        .http2_keepalive_timeout(Some(Duration::from_millis(
            limits.keepalive_timeout_ms.max(1),
        )))
        .tcp_keepalive(Some(Duration::from_secs(60)))
}

fn raft_config(config: &Config) -> anyhow::Result<openraft::Config> {
    let r = &config.raft;
    // A chunk travels as JSON numbers (up to four bytes per byte) inside one peer message.
    let most = crate::raft::network::MAX_MESSAGE_BYTES as u64 / 4;
    anyhow::ensure!(
        (1..=most).contains(&r.snapshot_chunk_bytes),
        "raft.snapshot_chunk_bytes must be 1 to {most}, not {}",
        r.snapshot_chunk_bytes
    );
    anyhow::ensure!(
        r.snapshot_log_ratio.is_finite() && (0.0..=100.0).contains(&r.snapshot_log_ratio),
        "raft.snapshot_log_ratio must be 0 to 100, not {}",
        r.snapshot_log_ratio
    );
    // openraft bounds every AppendEntries RPC by the heartbeat interval, so the interval must
    // leave room for a follower to decode and fsync a full batch; elections wait longer.
    let raft = openraft::Config {
        cluster_name: "rowcall".into(),
        heartbeat_interval: r.heartbeat_ms,
        election_timeout_min: r.election_timeout_min_ms,
        election_timeout_max: r.election_timeout_max_ms,
        install_snapshot_timeout: 10_000,
        snapshot_max_chunk_size: r.snapshot_chunk_bytes,
        // `cluster::snapshots` decides when, by the entries and the bytes since the last one.
        snapshot_policy: openraft::SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: r.keep_after_snapshot,
        purge_batch_size: 32,
        enable_pre_vote: Some(r.pre_vote),
        ..Default::default()
    };
    Ok(raft.validate()?)
}

/// What an embedding (a test, a tool) adds to a node beyond its configuration.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// Fault injection shared by the nodes of an in-process cluster.
    pub faults: Option<Arc<Faults>>,
    /// Run as a build whose data format is this instead of
    /// [`crate::raft::identity::DATA_FORMAT`]: a test build with a bumped format, for
    /// rolling upgrades and the refusal of a downgrade.
    pub data_format: Option<u32>,
    /// Speak this peer protocol instead of [`crate::raft::identity::PEER_PROTOCOL`] (a test
    /// build's bumped version).
    pub peer_protocol: Option<u32>,
    /// Install only plain snapshot files, as a build from before packed transfers (a test
    /// of a leader sending such a follower its snapshots).
    pub plain_snapshots_only: bool,
}

/// Starts a node: binds its listeners, opens storage, starts Raft, and brings a node on a
/// fresh data folder into a cluster ([`crate::cluster::enter`]). Returns once the node
/// serves and belongs to a cluster; on failure everything it started is stopped again.
pub async fn start(config: Config) -> anyhow::Result<NodeHandle> {
    start_with(config, StartOptions::default()).await
}

/// [`start`] with embedding options.
pub async fn start_with(mut config: Config, options: StartOptions) -> anyhow::Result<NodeHandle> {
    anyhow::ensure!(config.node.id != 0, "--id must be a positive number");
    // Process-wide, so set only when asked: in-process test clusters share the clock.
    if config.testing.clock_offset_ms != 0 {
        crate::model::time::set_test_offset(config.testing.clock_offset_ms);
        tracing::warn!(
            offset_ms = config.testing.clock_offset_ms,
            "test clock offset in force: this node's wall clock is shifted (for tests and the \
             chaos harness only, never in production)"
        );
    }
    create_private_dir(&config.node.data)?;
    let admin = admin_key(&config, &config.node.data)?;
    // From here on only digests of the secrets exist in the node.
    let credentials = Credentials::from_config(&admin, &mut config.auth)?;
    drop(admin);
    let config = Arc::new(config);
    let node = &config.node;

    let https = match &node.https {
        Some(files) => Some(Arc::new(HttpsTls::load(files).context("HTTPS")?)),
        None => None,
    };

    let http_listener = TcpListener::bind(node.http)
        .await
        .with_context(|| format!("binding HTTP on {}", node.http))?;
    let grpc_listener = TcpListener::bind(node.grpc)
        .await
        .with_context(|| format!("binding gRPC on {}", node.grpc))?;
    let http_addr = http_listener.local_addr()?;
    let grpc_addr = grpc_listener.local_addr()?;

    let database = node.data.join("sled");
    let format = options
        .data_format
        .unwrap_or(crate::raft::identity::DATA_FORMAT);
    // `--defragment`, or the marker file an operator who cannot change the command line
    // (a Kubernetes pod's spec is shared by every member) leaves in the data folder.
    let marker = node.data.join(crate::store::compression::DEFRAGMENT_MARKER);
    let storage_config = crate::config::StorageConfig {
        defragment: config.storage.defragment || marker.exists(),
        ..config.storage.clone()
    };
    let storage = Durable::open_configured(&database, &storage_config)
        .context("opening the sled database")?;
    if marker.exists() {
        // Removed once the rewrite is done: a crash during it leaves the marker, and the
        // next start rewrites again.
        std::fs::remove_file(&marker)
            .with_context(|| format!("removing {} after defragmenting", marker.display()))?;
    }
    // The log first: it settles whether this database still has the entries it was bound
    // to, and clears its Raft state when not, before the identity reads it.
    let mut log = LogStore::open(&storage, &node.data.join(crate::store::wal::DIR)).await?;
    // The identity is kept beside the Raft state, in the same database (`raft::identity`).
    let identity = Arc::new(
        LocalIdentity::open_as(&node.data, storage.db(), node.id, format)?.speaking(
            options
                .peer_protocol
                .unwrap_or(crate::raft::identity::PEER_PROTOCOL),
        ),
    );
    let outbox = Outbox::open(&storage)?;
    let catalogue = SharedCatalogue::default();
    let semantic = load_model(&config, &storage).await?;
    if let Some(semantic) = &semantic {
        catalogue.write().set_semantic(semantic.clone());
    }
    catalogue.write().set_learning(config.resolver.learn);
    let mut state_machine =
        StateMachine::open(&storage, &node.data.join("snapshots"), catalogue.clone())?;
    restore_receipt_bodies(&mut state_machine, &mut log).await?;
    let me = NodeInfo {
        grpc_addr: node
            .advertise_grpc
            .clone()
            .unwrap_or_else(|| grpc_addr.to_string()),
        http_addr: node
            .advertise_http
            .clone()
            .unwrap_or_else(|| http_addr.to_string()),
        signing_key: identity.signing_public(),
        // Filled in when the node founds or joins.
        ..NodeInfo::default()
    };
    if let Some(backup) = &config.cluster.restore {
        restore(
            &config,
            backup,
            &identity,
            &me,
            &mut state_machine,
            &mut log,
        )
        .await?;
    }
    // The stores upgraded what an older build left (see `snapshot::migrate`).
    identity.record_format(format)?;
    let applied = state_machine.applied_index();
    let receipts = state_machine.receipts();
    // openraft's leader lease is the longest election timeout: no new leader can be elected
    // sooner than that after the old one lost its quorum, so contact is stale after it.
    let liveness = Arc::new(Liveness::new(Duration::from_millis(
        config.raft.election_timeout_max_ms,
    )));
    // What this store promised its peers, as far as it knows: a node restarting on Raft
    // state takes no part (no elections, votes or entries) until its peers confirm they saw
    // no more than that (`cluster::verify`).
    let held = held_progress(&mut log).await?;
    let situation = peers::Situation {
        fresh: held == Progress::default(),
        sole_member: sole_member(&mut state_machine, node.id).await?,
    };
    let credentials_of_peers = peers::resolve(&config, situation).await?;
    let tls = credentials_of_peers.tls.clone();
    let secret = credentials_of_peers.secret.clone();
    let network = Network::new(identity.clone(), options.faults, liveness.clone())
        .with_routes(node.peer_routes.clone())
        .with_peer_auth(Some(tls.clone()), secret.clone())
        .with_stream_appends(config.raft.stream_appends);
    let network = if options.plain_snapshots_only {
        network.with_plain_snapshots_only()
    } else {
        network
    };
    let restarted = held != Progress::default();
    let mut raft_config = raft_config(&config)?;
    raft_config.enable_elect = !restarted;
    let raft = Raft::new(
        node.id,
        Arc::new(raft_config),
        network.clone(),
        log,
        state_machine,
    )
    .await
    .context("starting raft")?;
    network.attach(&raft);

    let app = Arc::new(App {
        node_id: node.id,
        identity,
        peer_ca: credentials_of_peers.ca.clone(),
        raft: raft.clone(),
        batcher: crate::raft::batch::Batcher::start(raft.clone(), config.raft.max_entry_bytes),
        catalogue,
        receipts,
        outbox,
        applied,
        storage,
        credentials,
        network,
        liveness,
        spending: crate::service::quota::Spending::new(&config.limits),
        invocation_slots: Arc::new(tokio::sync::Semaphore::new(
            config.limits.max_concurrent_invocations.max(1),
        )),
        handing_over: watch::channel(false).0,
        leading_since: std::sync::Mutex::new(None),
        proposing: std::sync::atomic::AtomicUsize::new(0),
        asks: Default::default(),
        ranking_peers: Default::default(),
        activity: Default::default(),
        started: Default::default(),
        standing: watch::channel(if restarted {
            Standing::Verifying
        } else {
            Standing::Ok
        })
        .0,
        config: config.clone(),
    });

    let fresh = !raft.is_initialized().await?;
    if !fresh && app.identity.cluster_id().is_none() {
        // Founded, and stopped before the identity recorded it: the membership says which.
        let founded = app
            .membership()
            .get_node(&node.id)
            .map(|me| me.cluster_id.clone())
            .filter(|id| !id.is_empty());
        if let Some(cluster_id) = founded {
            app.identity.set_cluster(&cluster_id, false)?;
        }
    }
    let plan = Plan::of(&config.cluster);
    if fresh && matches!(plan, Plan::FoundWithPeers(_)) {
        // Said before the listener opens: a peer with a higher id asking in the moment
        // between our listener opening and our first survey would otherwise find us fresh
        // and not founding, and found a second cluster beside ours.
        app.identity.set_founding(true);
    }

    // A restarted member checks its clock with the others' before it stamps anything; the
    // same answers are the first round of its restart check (`cluster::verify`).
    let first_answers = if fresh {
        Vec::new()
    } else {
        crate::cluster::ranking::check_clock(&app, Duration::from_millis(500)).await
    };

    let (shutdown, _) = watch::channel(false);
    let mut tasks = Vec::new();
    let metrics = crate::metrics::install();
    let router = http::router(app.clone(), metrics, shutdown.subscribe());
    let stop = shutdown.subscribe();
    let limits = config.limits.clone();
    let https_serving = https.clone();
    tasks.push(tokio::spawn(async move {
        http::serve::serve(http_listener, router, &limits, https_serving, stop).await;
    }));
    let mut stop = shutdown.subscribe();
    let service = raft_service(app.clone(), PeerAuth::new(secret), shutdown.subscribe());
    // The public API beside Raft, its links pointing at this node's HTTP address. Peer TLS
    // does not ask public clients for a certificate; the Raft service's interceptor does.
    let base = crate::service::base_url(&app, Some(&me.http_addr));
    let public = grpc::routes(app.clone(), base, shutdown.subscribe())?;
    let grpc_limits = config.limits.grpc.clone();
    let router = grpc_server(&config.limits.grpc)
        .layer(grpc::trace::TraceLayer)
        .layer(grpc::InFlightLayer)
        .add_routes(public)
        .add_service(service)
        .add_service(PeerEnrollmentServer::new(peers::Enrollment::new(
            app.clone(),
        )));
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    // The cluster's own certificates: plaintext connections beside TLS ones, for public
    // API clients and enrollment (the Raft service refuses them). Operator certificates:
    // TLS only, as the operator configured.
    let plaintext = !tls.from_files();
    let peer_tls = tls.clone();
    tasks.push(tokio::spawn(async move {
        let connections =
            grpc::per_client(incoming(grpc_listener, peer_tls, plaintext), &grpc_limits);
        if let Err(e) = router
            .serve_with_incoming_shutdown(connections, stopped)
            .await
        {
            tracing::error!(error = %e, "gRPC server stopped");
        }
    }));
    if tls.from_files() {
        let every = tls.reload_every();
        let reload = move || tls.reload();
        tasks.push(tokio::spawn(reload_tls(
            "peer TLS",
            every,
            reload,
            shutdown.subscribe(),
        )));
    }
    if let Some(tls) = https.clone() {
        let every = tls.reload_every();
        let reload = move || tls.reload();
        tasks.push(tokio::spawn(reload_tls(
            "HTTPS",
            every,
            reload,
            shutdown.subscribe(),
        )));
    }

    let early = app.network.early_elections().clone();
    let (raft, watched, stop) = (app.raft.clone(), app.clone(), shutdown.subscribe());
    let settle = Duration::from_millis(config.raft.heartbeat_ms);
    let pre_vote = config.raft.pre_vote;
    tasks.push(tokio::spawn(async move {
        let taking_part = watched.clone();
        early
            .run(
                raft,
                settle,
                pre_vote,
                move || watched.is_stale(),
                move || taking_part.takes_part(),
                stop,
            )
            .await
    }));
    let (raft, watched, stop) = (app.raft.clone(), app.clone(), shutdown.subscribe());
    let timing = crate::raft::early_election::SilenceTiming {
        heartbeat: Duration::from_millis(config.raft.heartbeat_ms),
        lease: Duration::from_millis(config.raft.election_timeout_max_ms),
        pre_vote: config.raft.pre_vote,
    };
    tasks.push(tokio::spawn(async move {
        let (heard, asked, taking_part) = (watched.clone(), watched.clone(), watched);
        crate::raft::early_election::EarlyElections::watch_silence(
            raft,
            timing,
            move |leader, term| heard.liveness.leader_contact(leader, term),
            move |leader, term| {
                let app = asked.clone();
                async move {
                    let Some(node) = app.membership().get_node(&leader).cloned() else {
                        return true;
                    };
                    use crate::raft::early_election::{stand_aside, Answer};
                    use crate::raft::network::TransportError;
                    let answer = app
                        .network
                        .hello_member(leader, &node, timing.heartbeat)
                        .await;
                    let answer = match &answer {
                        Ok(hello) => Answer::Hello(hello),
                        Err(TransportError::Unreachable { .. }) => Answer::Silent,
                        Err(_) => Answer::Refused,
                    };
                    stand_aside(answer, leader, term, timing.lease)
                }
            },
            move || taking_part.takes_part(),
            stop,
        )
        .await
    }));
    tasks.push(tokio::spawn(crate::cluster::handover::watch_leadership(
        app.clone(),
        shutdown.subscribe(),
    )));
    if restarted {
        let (verifier, stop) = (app.clone(), shutdown.subscribe());
        tasks.push(tokio::spawn(async move {
            crate::cluster::verify::run(&verifier, held, first_answers, stop).await;
        }));
    }
    let stop = shutdown.subscribe();
    let cosigner = app.clone();
    tasks.push(tokio::spawn(async move {
        crate::cluster::cosign::run(&cosigner, stop).await;
    }));
    let stop = shutdown.subscribe();
    let asker = app.clone();
    tasks.push(tokio::spawn(async move {
        crate::cluster::ranking::run(&asker, stop).await;
    }));
    let stop = shutdown.subscribe();
    let measurer = app.clone();
    tasks.push(tokio::spawn(async move {
        crate::cluster::space::run(&measurer, stop).await;
    }));
    let stop = shutdown.subscribe();
    let snapshotter = app.clone();
    tasks.push(tokio::spawn(async move {
        crate::cluster::snapshots::run(&snapshotter, stop).await;
    }));
    let stop = shutdown.subscribe();
    let pruner = app.clone();
    tasks.push(tokio::spawn(async move {
        crate::dispatch::retention::run(&pruner, stop).await;
    }));
    if let Some(semantic) = semantic {
        let mut stop = shutdown.subscribe();
        let catalogue = app.catalogue.clone();
        tasks.push(tokio::spawn(async move {
            tokio::select! {
                _ = semantic.run(catalogue) => {}
                _ = stop.wait_for(|s| *s) => {}
            }
        }));
    }
    let mut stop = shutdown.subscribe();
    let drainer = app.clone();
    tasks.push(tokio::spawn(async move {
        tokio::select! {
            _ = crate::dispatch::redeliver::drain(&drainer) => {}
            _ = stop.wait_for(|s| *s) => {}
        }
    }));

    let handle = NodeHandle {
        app,
        http_addr,
        grpc_addr,
        https: https.is_some(),
        shutdown,
        tasks,
    };
    let cluster = &config.cluster;
    if fresh {
        // Peers must be able to reach this node while it joins (hello, replication), so it
        // serves first. On failure, stop what was started before reporting it.
        let entered = enter(&handle.app, &plan, &me, cluster.learner).await;
        let ready = match entered {
            Ok(Entered::Founded) if node.demo => load_demo(&handle.app).await,
            Ok(_) => Ok(()),
            Err(e) => Err(e.into()),
        };
        if let Err(e) = ready {
            handle.shutdown().await;
            return Err(e);
        }
    } else if (cluster.bootstrap || !cluster.join.is_empty()) && cluster.restore.is_none() {
        tracing::info!("already a member; --join and --bootstrap ignored (the data folder says which cluster this node belongs to)");
    }
    handle
        .app
        .started
        .store(true, std::sync::atomic::Ordering::SeqCst);
    tracing::info!(id = node.id, http = %http_addr, grpc = %grpc_addr, "rowcall node serving");
    Ok(handle)
}

/// What the log store holds: the term of its vote and the end of its log (purged entries
/// included). A fresh store holds the default.
async fn held_progress(log: &mut LogStore) -> anyhow::Result<Progress> {
    use openraft::storage::{RaftLogReader, RaftLogStorage};
    let vote = log.read_vote().await?;
    let state = log.get_log_state().await?;
    Ok(Progress {
        term: vote.map_or(0, |v| v.leader_id.term),
        index: state.last_log_id.map(|id| id.index),
    })
}

/// Founds a new cluster from a backup, on a fresh data folder and before Raft starts (see
/// `cluster::backup`); a folder already in a cluster keeps its state, and says so.
async fn restore(
    config: &Config,
    backup: &std::path::Path,
    identity: &LocalIdentity,
    me: &NodeInfo,
    state_machine: &mut StateMachine,
    log: &mut LogStore,
) -> anyhow::Result<()> {
    use openraft::storage::RaftStateMachine;
    let (applied, _) = state_machine.applied_state().await?;
    if applied.is_some() || identity.cluster_id().is_some() {
        tracing::warn!(backup = %backup.display(), "the data folder already belongs to a cluster: --restore ignored");
        return Ok(());
    }
    anyhow::ensure!(
        config.cluster.bootstrap && config.cluster.join.is_empty(),
        "--restore founds a new cluster: give it with --bootstrap and without --join (other \
         nodes join the restored one afterwards)"
    );
    let cluster_id = crate::raft::identity::new_cluster_id();
    let me = NodeInfo {
        cluster_id: cluster_id.clone(),
        incarnation: identity.incarnation(),
        ..me.clone()
    };
    let header = crate::cluster::backup::restore(backup, config.node.id, me, state_machine, log)
        .await
        .with_context(|| format!("restoring {}", backup.display()))?;
    // Only now: a restore that failed leaves the folder fresh, so starting again with the
    // same flags tries the restore again instead of founding an empty cluster.
    identity.set_cluster(&cluster_id, false)?;
    tracing::info!(
        backup = %backup.display(),
        index = header.index(),
        from_cluster = %header.cluster_id,
        cluster = %cluster_id,
        "founded a new cluster from a backup"
    );
    Ok(())
}

/// The Raft service as peers reach it: every call passes `auth` (the cluster secret and,
/// with TLS, a client certificate) before its message is read. Mountable beside other
/// services on the same listener, which bring their own credentials.
pub fn raft_service(
    app: Arc<App>,
    auth: PeerAuth,
    stop: watch::Receiver<bool>,
) -> InterceptedService<RaftServiceServer<RaftGrpc>, PeerAuth> {
    let service = RaftServiceServer::new(RaftGrpc::new(app, stop))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    InterceptedService::new(service, auth)
}

/// Whether this node's state machine says it is the only member of its cluster.
async fn sole_member(
    state_machine: &mut StateMachine,
    me: crate::raft::NodeId,
) -> anyhow::Result<bool> {
    use openraft::storage::RaftStateMachine;
    let (_, membership) = state_machine.applied_state().await?;
    let nodes: Vec<crate::raft::NodeId> = membership.nodes().map(|(id, _)| *id).collect();
    Ok(nodes == [me])
}

/// Reads TLS files (`what`: peer TLS or HTTPS) again whenever they change, until `stop`.
async fn reload_tls(
    what: &'static str,
    every: Duration,
    reload: impl Fn() -> Result<bool, crate::raft::tls::TlsError>,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        match reload() {
            Ok(true) => tracing::info!("{what} files changed: reloaded"),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(error = %e, "{what} files changed but cannot be used; keeping the previous ones")
            }
        }
    }
}

/// Writes the demo catalogue once the new cluster has elected itself.
async fn load_demo(app: &App) -> anyhow::Result<()> {
    app.raft
        .wait(Some(Duration::from_secs(10)))
        .current_leader(app.node_id, "one-node cluster elects itself")
        .await
        .context("waiting for the new cluster to elect its leader")?;
    let rows = demo::rows();
    let count = rows.len();
    app.write(Command::PutRows {
        at_ms: now_ms(),
        rows,
    })
    .await
    .context("writing the demo catalogue")?;
    tracing::info!(rows = count, "loaded the demo catalogue");
    Ok(())
}

/// Loads the resolver's model, if the configuration names one. A folder that is named but
/// unusable stops the node: an operator who asked for meaning-aware ranking must not get
/// words-only ranking without noticing.
async fn load_model(config: &Config, storage: &Durable) -> anyhow::Result<Option<Arc<Semantic>>> {
    let Some(dir) = config.resolver.model.clone() else {
        return Ok(None);
    };
    let mode = config.resolver.query_embedding;
    let weights = config.resolver.weights;
    let started = std::time::Instant::now();
    let shown = dir.display().to_string();
    let embedder = tokio::task::spawn_blocking(move || Embedder::load_with(&dir, mode, weights))
        .await
        .context("loading the resolver's model")?
        .with_context(|| format!("loading the resolver's model from {shown}"))?;
    let info = embedder.info().clone();
    let kernel = match info.weights {
        Weights::Q8 => embed::int8_kernel(),
        Weights::F32 => "f32",
    };
    tracing::info!(
        model = %info.name,
        fingerprint = %info.fingerprint,
        dimensions = info.dimensions,
        query = ?info.query,
        weights = info.weights.as_str(),
        kernel,
        seconds = started.elapsed().as_secs_f32(),
        "resolver model loaded: asks rank by words and meaning"
    );
    if kernel == "portable" {
        tracing::warn!(
            "q8 weights run on portable code on this CPU (no AVX2): f32 weights may be \
             faster here; compare them (the ranking chapter, \"The AVX2 kernel\") and set \
             [resolver] weights alike on every node"
        );
    }
    let tree = storage
        .db()
        .open_tree(semantic::TREE)
        .context("opening the row vectors")?;
    Ok(Some(Semantic::new(Arc::new(embedder), Some(tree))))
}

/// Writes again from the Raft log the receipt bodies a power loss took while sled kept
/// their values ([`crate::store::segments`], "Recovery argument"), before the node serves.
async fn restore_receipt_bodies(
    state_machine: &mut StateMachine,
    log: &mut LogStore,
) -> anyhow::Result<()> {
    use openraft::storage::RaftLogReader as _;
    let indexes = state_machine.missing_bodies();
    if indexes.is_empty() {
        return Ok(());
    }
    let mut entries = Vec::with_capacity(indexes.len());
    for index in indexes {
        entries.extend(
            log.try_get_log_entries(index..=index)
                .await
                .with_context(|| format!("reading entry {index} of the Raft log"))?,
        );
    }
    state_machine
        .restore_bodies(&entries)
        .await
        .context("restoring receipt bodies from the Raft log")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_log_ratio_that_is_not_a_share_is_refused() {
        let with = |ratio: f64| {
            let mut config = Config::default();
            config.raft.snapshot_log_ratio = ratio;
            raft_config(&config)
        };
        for fine in [0.0, 0.5, 100.0] {
            assert!(with(fine).is_ok(), "{fine}");
        }
        for bad in [-0.1, 100.5, f64::NAN, f64::INFINITY] {
            let err = with(bad).unwrap_err().to_string();
            assert!(err.contains("raft.snapshot_log_ratio"), "{bad}: {err}");
        }
        // rowcall decides when (`cluster::snapshots`), not openraft.
        assert_eq!(
            with(0.5).unwrap().snapshot_policy,
            openraft::SnapshotPolicy::Never
        );
    }
}
