//! `rowcall-node`: parse flags, load configuration, run a node until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use rowcall_node::config::LogFormat;
use rowcall_node::telemetry::Telemetry;
use rowcall_node::Config;

/// A rowcall node. With an empty data folder and no peers it founds a one-node cluster with a
/// demo catalogue; given peers (--join) it joins their cluster; restarted on the same folder
/// it continues where it stopped.
#[derive(Debug, Parser)]
#[command(name = "rowcall-node", version, about)]
struct Flags {
    /// This node's id in the cluster [default: 1].
    #[arg(long)]
    id: Option<u64>,
    /// HTTP listen address [default: 127.0.0.1:8080].
    #[arg(long)]
    http: Option<SocketAddr>,
    /// gRPC listen address for Raft [default: 127.0.0.1:9090].
    #[arg(long)]
    grpc: Option<SocketAddr>,
    /// Data folder [default: ./rowcall-data].
    #[arg(long)]
    data: Option<PathBuf>,
    /// gRPC addresses of peers to join through (repeatable or comma-separated; a fresh node
    /// only, harmless on restart). A node given peers never founds a cluster by itself.
    #[arg(long, value_name = "GRPC_ADDR", value_delimiter = ',')]
    join: Vec<String>,
    /// Join as a learner: a read replica that never votes.
    #[arg(long, requires = "join")]
    learner: bool,
    /// Operator certificates for peers: the CA certificate (PEM), with --peer-cert and
    /// --peer-key. Without them peers talk mutual TLS with the cluster's own CA. A node's
    /// certificate must name node-<id>.peer.rowcall.
    #[arg(long, value_name = "FILE", requires_all = ["peer_cert", "peer_key"])]
    peer_ca: Option<PathBuf>,
    /// This node's certificate (PEM), signed by the cluster's CA.
    #[arg(long, value_name = "FILE", requires = "peer_ca")]
    peer_cert: Option<PathBuf>,
    /// This node's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "peer_ca")]
    peer_key: Option<PathBuf>,
    /// Serve HTTPS on the HTTP listener with this certificate chain (PEM); with --https-key.
    #[arg(long, value_name = "FILE", requires = "https_key")]
    https_cert: Option<PathBuf>,
    /// The private key (PEM) of --https-cert.
    #[arg(long, value_name = "FILE", requires = "https_cert")]
    https_key: Option<PathBuf>,
    /// A file holding the cluster secret (or ROWCALL_CLUSTER_SECRET): nodes that share it
    /// found one cluster together and join it without a join token.
    #[arg(long, value_name = "FILE")]
    cluster_secret_file: Option<PathBuf>,
    /// A file holding a join token from `rowcall cluster join-token` (or
    /// ROWCALL_JOIN_TOKEN): a fresh node joining with --join and without the cluster secret
    /// needs one.
    #[arg(long, value_name = "FILE")]
    join_token_file: Option<PathBuf>,
    /// No longer has an effect: peers always authenticate (kept so old commands still run).
    #[arg(long, hide = true)]
    insecure_peers: bool,
    /// Found a new cluster on a fresh data folder. With --join peers: only once every peer
    /// answers and none belongs to a cluster (else join theirs).
    #[arg(long)]
    bootstrap: bool,
    /// With --bootstrap, on a fresh data folder: found the new cluster from this backup
    /// (made by `rowcall backup FILE`), with a new cluster id.
    #[arg(long, value_name = "FILE", requires = "bootstrap")]
    restore: Option<PathBuf>,
    /// The gRPC address peers dial, if not the bound one (e.g. `rowcall-0.peers:9090`).
    #[arg(long, value_name = "HOST:PORT")]
    advertise_grpc: Option<String>,
    /// The HTTP address shown in cluster status, if not the bound one.
    #[arg(long, value_name = "HOST:PORT")]
    advertise_http: Option<String>,
    /// Dial a peer through another address: `PEER_GRPC=DIAL_ADDR` (repeatable), e.g. a
    /// local proxy.
    #[arg(long, value_name = "PEER=ADDR")]
    peer_route: Vec<String>,
    /// Do not load the demo catalogue into a new cluster.
    #[arg(long)]
    no_demo: bool,
    /// Log lines as `text` or `json` (`[log] format`, `ROWCALL_LOG_FORMAT`).
    #[arg(long, value_enum)]
    log_format: Option<LogFormat>,
    /// Export traces over OTLP/gRPC to this collector, `http://HOST:PORT`
    /// (`[tracing] otlp_endpoint`, `ROWCALL_OTLP_ENDPOINT`).
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// Before serving, rewrite the sled database with its live data alone, giving back the
    /// space deletes left (receipts retention pruned); needs room for the copy while it runs.
    #[arg(long)]
    defragment: bool,
    /// TOML configuration file (see deploy/rowcall.toml).
    #[arg(long)]
    config: Option<PathBuf>,
}

impl Flags {
    /// Defaults, then the file, then `ROWCALL_*`, then flags.
    fn load(self) -> anyhow::Result<Config> {
        let mut config = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        config.apply_env(|name| std::env::var(name).ok())?;
        if let Some(id) = self.id {
            config.node.id = id;
        }
        if let Some(http) = self.http {
            config.node.http = http;
        }
        if let Some(grpc) = self.grpc {
            config.node.grpc = grpc;
        }
        if let Some(data) = self.data {
            config.node.data = data;
        }
        let join: Vec<String> = self.join.into_iter().filter(|p| !p.is_empty()).collect();
        if !join.is_empty() {
            config.cluster.join = join;
        }
        if self.learner {
            config.cluster.learner = true;
        }
        if self.bootstrap {
            config.cluster.bootstrap = true;
        }
        if let Some(backup) = self.restore {
            config.cluster.restore = Some(backup);
        }
        if let (Some(ca_file), Some(cert_file), Some(key_file)) =
            (self.peer_ca, self.peer_cert, self.peer_key)
        {
            config.cluster.tls = Some(rowcall_node::config::PeerTlsConfig {
                ca_file,
                cert_file,
                key_file,
                reload_secs: config.cluster.tls.as_ref().map_or(10, |t| t.reload_secs),
            });
        }
        if let (Some(cert_file), Some(key_file)) = (self.https_cert, self.https_key) {
            config.node.https = Some(rowcall_node::config::HttpsConfig {
                cert_file,
                key_file,
                reload_secs: config.node.https.as_ref().map_or(10, |t| t.reload_secs),
            });
        }
        if let Some(file) = self.cluster_secret_file {
            config.cluster.secret = None;
            config.cluster.secret_file = Some(file);
        }
        if let Some(file) = self.join_token_file {
            config.cluster.join_token = None;
            config.cluster.join_token_file = Some(file);
        }
        if self.insecure_peers {
            config.cluster.insecure_peers = true;
        }
        if let Some(addr) = self.advertise_grpc {
            config.node.advertise_grpc = Some(addr);
        }
        if let Some(addr) = self.advertise_http {
            config.node.advertise_http = Some(addr);
        }
        for route in self.peer_route {
            let (peer, via) = route
                .split_once('=')
                .ok_or_else(|| anyhow::anyhow!("--peer-route {route:?} is not PEER=ADDR"))?;
            config
                .node
                .peer_routes
                .insert(peer.to_owned(), via.to_owned());
        }
        if self.defragment {
            config.storage.defragment = true;
        }
        if self.no_demo {
            config.node.demo = false;
        }
        if let Some(format) = self.log_format {
            config.log.format = format;
        }
        if let Some(endpoint) = self.otlp_endpoint {
            config.tracing.otlp_endpoint = Some(endpoint);
        }
        Ok(config)
    }
}

fn main() -> anyhow::Result<()> {
    // Before any thread starts: the allocator's arenas are fixed when threads first meet.
    rowcall_node::allocator::limit_arenas();
    rowcall_node::allocator::trim_in_background();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let config = Flags::parse().load()?;
    let telemetry = Telemetry::install(&config.log, &config.tracing, config.node.id)?;
    let mut node = rowcall_node::start(config).await?;
    println!(
        "rowcall: serving HTTP on {}  (gRPC {})",
        node.url(),
        node.grpc_addr
    );
    tokio::select! {
        _ = shutdown_signal() => {
            tracing::info!("shutting down");
            node.shutdown().await;
        }
        _ = node.wait() => {}
    }
    telemetry.shutdown().await;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
