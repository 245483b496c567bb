//! Node-to-node transport over tonic: one lazily connected, reused channel per peer address.
//!
//! Raft messages (vote, append, snapshot chunks) and rowcall's cluster calls (write
//! forwarding, join, remove, read index, hello) travel as serde JSON in a `RaftMessage`
//! envelope that names this node's cluster, id and incarnation, and the incarnation the
//! membership expects at the other end. A peer that cannot be reached, or that refuses us
//! (it runs on another data folder, or in another cluster), is reported to openraft as
//! `Unreachable`, so it backs off instead of flooding the log (20 ms after one failure,
//! doubling to 500 ms while they go on: `backoff_schedule`); a refusal is also logged as
//! a warning, at most every few seconds per peer. An optional [`Faults`] layer drops or
//! delays messages per directed link, for tests; successful replies feed [`Liveness`].

use crate::raft::WatchReceiver as _;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use openraft::base::{BoxFuture, BoxStream};
use openraft::error::{
    NetworkError, RPCError, RaftError, ReplicationClosed, StreamingError, Unreachable,
};
use openraft::network::{stream_append_sequential, Backoff, RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, StreamAppendError,
    StreamAppendResult, TransferLeaderRequest, TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{OptionalSend, RaftNetworkV2};
use rowcall_proto::raft::raft_service_client::RaftServiceClient;
use rowcall_proto::raft::RaftMessage;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::transport::{Channel, Endpoint};

use super::auth::ClusterSecret;
use super::calls::{Forwarded, Hello, JoinRequest, MembershipError, WriteError};
use super::early_election::EarlyElections;
use super::faults::{Faults, Verdict};
use super::identity::LocalIdentity;
use super::liveness::Liveness;
use super::standing::Witness;
use super::tls::{host_of, PeerTls};
use super::{NodeId, NodeInfo, Request, SnapshotMeta, StorageError, TypeConfig, Vote};
use crate::store::snapshot::file::SnapshotFile;
use crate::store::Snapshot;

/// Largest gRPC message between nodes (snapshot chunks, bulk writes).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Stands for "a node whose id we do not know yet" (a join target given by address).
pub const UNKNOWN_NODE: NodeId = 0;

/// The RPCs of the node-to-node service.
#[derive(Debug, Clone, Copy)]
enum Method {
    Vote,
    PreVote,
    AppendEntries,
    InstallSnapshot,
    Forward,
    Join,
    Remove,
    ReadIndex,
    Hello,
    TimeoutNow,
    TransferLeader,
    MoveLeader,
}

/// How long a peer found not to serve streamed appends (a build of peer protocol 1, during a
/// rolling upgrade) is sent appends one at a time before a stream is tried again.
const UNSTREAMED_FOR: Duration = Duration::from_secs(30);

/// How long a refusing peer stays quiet in the log after a warning about it.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// Where a message goes: a member as the membership records it, or just an address.
#[derive(Debug, Clone, Copy)]
pub struct Dest<'a> {
    /// The node id ([`UNKNOWN_NODE`] for an address only).
    pub id: NodeId,
    /// Its gRPC address.
    pub addr: &'a str,
    /// The incarnation the membership admitted (empty: not known).
    pub incarnation: &'a str,
}

impl<'a> Dest<'a> {
    /// Member `id`, reached as the membership says.
    pub fn member(id: NodeId, node: &'a NodeInfo) -> Self {
        Self {
            id,
            addr: &node.grpc_addr,
            incarnation: &node.incarnation,
        }
    }

    /// Whoever answers at `addr`.
    pub fn address(addr: &'a str) -> Self {
        Self {
            id: UNKNOWN_NODE,
            addr,
            incarnation: "",
        }
    }
}

/// A failure to deliver a message or to get its reply.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TransportError {
    /// The peer did not answer: down, partitioned, or the message was lost.
    #[error("peer {addr} unreachable: {reason}")]
    Unreachable {
        /// The peer's address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The peer refused us: another cluster, another incarnation than the one addressed,
    /// or missing credentials.
    #[error("peer {addr} refused the call: {reason}")]
    Refused {
        /// The peer's address.
        addr: String,
        /// Why, as the peer said.
        reason: String,
    },
    /// The peer does not serve the call: a build that predates it.
    #[error("peer {addr} does not serve the call (an older build): {reason}")]
    Unsupported {
        /// The peer's address.
        addr: String,
        /// Why, as the peer said.
        reason: String,
    },
    /// The peer answered with something this node cannot read.
    #[error("peer {addr}: {reason}")]
    Protocol {
        /// The peer's address.
        addr: String,
        /// Why.
        reason: String,
    },
}

/// The transport of one node: shared by every client openraft builds.
#[derive(Clone)]
pub struct Network {
    me: NodeId,
    identity: Arc<LocalIdentity>,
    channels: Arc<Mutex<HashMap<String, Channel>>>,
    routes: Arc<BTreeMap<String, String>>,
    faults: Option<Arc<Faults>>,
    liveness: Arc<Liveness>,
    refusals_logged: Arc<Mutex<HashMap<String, Instant>>>,
    /// The local Raft's metrics (for the voter set), once Raft is started.
    raft: Arc<OnceLock<super::Metrics>>,
    /// Peer TLS, if configured; channels are rebuilt when its files change.
    tls: Option<Arc<PeerTls>>,
    /// The TLS generation the cached channels were built with.
    tls_generation: Arc<Mutex<u64>>,
    /// The cluster secret sent with every message, if configured.
    secret: Option<Arc<ClusterSecret>>,
    /// What calls for an early candidacy, seen in answers to this node's vote requests.
    early_elections: EarlyElections,
    /// What each peer's incarnation promised this node (see [`super::standing`]).
    witness: Arc<Witness>,
    /// Peers found not to serve streamed appends (builds of peer protocol 1), and when.
    unstreamed: Arc<Mutex<HashMap<NodeId, Instant>>>,
    /// Streams of appends opened to each peer.
    streams_opened: Arc<Mutex<HashMap<NodeId, u64>>>,
    /// Snapshot bytes sent to each peer as leader.
    snapshots_sent: Arc<Mutex<HashMap<NodeId, SnapshotBytes>>>,
    /// Whether appends go on streams at all (`raft.stream_appends`).
    stream_appends: bool,
    /// Whether this node installs snapshot files sent as they are at rest (compressed),
    /// as its hello tells a leader; off only in tests playing an older build.
    packed_snapshots: bool,
}

impl Network {
    /// The transport of the node `identity` describes, recording peer contact in `liveness`.
    pub fn new(
        identity: Arc<LocalIdentity>,
        faults: Option<Arc<Faults>>,
        liveness: Arc<Liveness>,
    ) -> Self {
        Self {
            me: identity.get().node_id,
            identity,
            channels: Arc::default(),
            routes: Arc::default(),
            faults,
            liveness,
            refusals_logged: Arc::default(),
            raft: Arc::default(),
            tls: None,
            tls_generation: Arc::default(),
            secret: None,
            early_elections: EarlyElections::default(),
            witness: Arc::default(),
            unstreamed: Arc::default(),
            streams_opened: Arc::default(),
            snapshots_sent: Arc::default(),
            stream_appends: false,
            packed_snapshots: true,
        }
    }

    /// Installs only plain snapshot files, as a build from before packed transfers did
    /// (a test's stand-in for such a follower): its hello says so, and leaders send it the
    /// snapshot's lines.
    pub fn with_plain_snapshots_only(mut self) -> Self {
        self.packed_snapshots = false;
        self
    }

    /// Whether this node installs snapshot files sent compressed (its hello says).
    pub fn installs_packed_snapshots(&self) -> bool {
        self.packed_snapshots
    }

    /// Sends followers their appends on streams (`raft.stream_appends`).
    pub fn with_stream_appends(mut self, on: bool) -> Self {
        self.stream_appends = on;
        self
    }

    /// Whether `peer` was found, lately, to be a build of peer protocol 1 (it served no
    /// stream): it has no leadership transfer either.
    pub fn is_older_build(&self, peer: NodeId) -> bool {
        let unstreamed = self.unstreamed.lock().unwrap_or_else(|p| p.into_inner());
        unstreamed
            .get(&peer)
            .is_some_and(|at| at.elapsed() < UNSTREAMED_FOR)
    }

    /// Whether this node, as leader, sends `peer` its appends on a stream: when
    /// `raft.stream_appends` is on, unless this node runs as a build of peer protocol 1 (a
    /// test's), or the peer was found not to serve
    /// streams and has not answered as a newer build since, within [`UNSTREAMED_FOR`].
    pub fn streams_to(&self, peer: NodeId) -> bool {
        self.stream_appends && self.identity.protocol() >= 2 && !self.is_older_build(peer)
    }

    /// How many streams of appends this node opened to `peer` as leader.
    pub fn append_streams_opened(&self, peer: NodeId) -> u64 {
        let opened = self
            .streams_opened
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        opened.get(&peer).copied().unwrap_or(0)
    }

    /// Snapshot bytes this node sent `peer` as leader, in each form.
    pub fn snapshot_bytes_sent(&self, peer: NodeId) -> SnapshotBytes {
        let sent = self
            .snapshots_sent
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        sent.get(&peer).copied().unwrap_or_default()
    }

    /// What each peer's incarnation promised this node.
    pub fn witness(&self) -> &Witness {
        &self.witness
    }

    /// What calls for an early candidacy (see [`super::early_election`]).
    pub fn early_elections(&self) -> &EarlyElections {
        &self.early_elections
    }

    /// Authenticates to peers with `tls` (a client certificate) and `secret`.
    pub fn with_peer_auth(
        mut self,
        tls: Option<Arc<PeerTls>>,
        secret: Option<Arc<ClusterSecret>>,
    ) -> Self {
        self.tls = tls;
        self.secret = secret;
        self
    }

    /// Gives the transport the Raft it serves (created after the transport), so a leader
    /// can tell followers how recent its quorum is.
    pub fn attach(&self, raft: &crate::store::Raft) {
        let _ = self.raft.set(raft.metrics());
    }

    /// How long ago a quorum of voters last acknowledged this node as leader.
    fn quorum_age(&self) -> Option<Duration> {
        let metrics = self.raft.get()?.borrow_watched();
        let voters = metrics.membership_config.membership().voter_ids();
        self.liveness.quorum_age(self.me, voters)
    }

    /// Dials the peers in `routes` (peer address → address to dial) through other addresses.
    pub fn with_routes(mut self, routes: BTreeMap<String, String>) -> Self {
        self.routes = Arc::new(routes);
        self
    }

    /// This node's identity.
    pub fn identity(&self) -> &Arc<LocalIdentity> {
        &self.identity
    }

    /// The envelope of `payload` from this node to `to`.
    fn envelope(&self, payload: Vec<u8>, to: Dest<'_>) -> RaftMessage {
        RaftMessage {
            payload,
            from: Some(self.identity.sender()),
            to_node: to.id,
            to_incarnation: to.incarnation.to_owned(),
            leader_quorum_age_ms: None,
        }
    }

    /// Logs a peer's refusal as a warning, at most once per [`REFUSAL_LOG_EVERY`] per peer:
    /// openraft retries every heartbeat, and the operator needs the message, not a flood.
    fn log_refusal(&self, to: Dest<'_>, reason: &str) {
        let mut logged = self
            .refusals_logged
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let due = logged
            .get(to.addr)
            .is_none_or(|at| now.duration_since(*at) >= REFUSAL_LOG_EVERY);
        if due {
            logged.insert(to.addr.to_owned(), now);
            tracing::warn!(
                peer = to.id,
                addr = to.addr,
                reason,
                "a peer refused this node's message"
            );
        }
    }

    /// The fault layer, if any.
    pub fn faults(&self) -> Option<&Arc<Faults>> {
        self.faults.as_ref()
    }

    /// The name the certificate of the peer `to` must carry: its node id when the
    /// membership says which node it is; when only an address is known (a join, a survey),
    /// any member of the cluster (operator certificates: the address's host, as before).
    fn expected_name(&self, tls: &PeerTls, to: Dest<'_>) -> String {
        match (to.id, tls.from_files()) {
            (UNKNOWN_NODE, true) => host_of(to.addr).to_owned(),
            (UNKNOWN_NODE, false) => super::pki::PEER_NAME.to_owned(),
            (id, _) => super::pki::node_name(id),
        }
    }

    /// The client for the peer `to` (dialled through its route, if any), on a channel kept
    /// per address and expected name; the peer's certificate must carry that name.
    fn client(&self, to: Dest<'_>) -> Result<RaftServiceClient<Channel>, TransportError> {
        let addr = to.addr;
        let dial = self.routes.get(addr).map_or(addr, String::as_str);
        let bad = |reason: String| TransportError::Protocol {
            addr: addr.to_owned(),
            reason,
        };
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tls) = &self.tls {
            // Renewed certificates: drop the channels built with the old ones.
            let mut built_with = self
                .tls_generation
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if *built_with != tls.generation() {
                channels.clear();
                *built_with = tls.generation();
            }
        }
        let name = self.tls.as_ref().map(|tls| self.expected_name(tls, to));
        let key = format!("{dial}#{}", name.as_deref().unwrap_or(""));
        let channel = match channels.get(&key) {
            Some(channel) => channel.clone(),
            None => {
                let scheme = if self.tls.is_some() { "https" } else { "http" };
                let mut endpoint = Endpoint::from_shared(format!("{scheme}://{dial}"))
                    .map_err(|e| bad(format!("bad address: {e}")))?;
                if let (Some(tls), Some(name)) = (&self.tls, &name) {
                    endpoint = endpoint
                        .tls_config(tls.client(name))
                        .map_err(|e| bad(format!("peer TLS: {e}")))?;
                }
                let channel = endpoint
                    .connect_timeout(Duration::from_millis(500))
                    .tcp_nodelay(true)
                    .http2_keep_alive_interval(Duration::from_secs(10))
                    .connect_lazy();
                channels.insert(key, channel.clone());
                channel
            }
        };
        Ok(RaftServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    async fn pass(
        &self,
        from: NodeId,
        to: NodeId,
        addr: &str,
        leg: &str,
    ) -> Result<(), TransportError> {
        let Some(faults) = &self.faults else {
            return Ok(());
        };
        if to == UNKNOWN_NODE {
            return Ok(());
        }
        match faults.verdict(from, to) {
            Verdict::Drop => Err(TransportError::Unreachable {
                addr: addr.to_owned(),
                reason: format!("{leg} lost by fault injection"),
            }),
            Verdict::Deliver(delay) => {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                Ok(())
            }
        }
    }

    /// Sends one request to `to` and decodes its reply.
    async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        to: Dest<'_>,
        method: Method,
        request: &Req,
        timeout: Duration,
    ) -> Result<Resp, TransportError> {
        self.call_as_leader(to, method, request, timeout, None)
            .await
    }

    /// [`Network::call`], telling a follower how long ago a quorum last acknowledged this
    /// node as leader.
    async fn call_as_leader<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        to: Dest<'_>,
        method: Method,
        request: &Req,
        timeout: Duration,
        quorum_age: Option<Duration>,
    ) -> Result<Resp, TransportError> {
        let addr = to.addr;
        let protocol = |reason: String| TransportError::Protocol {
            addr: addr.to_owned(),
            reason,
        };
        let payload = serde_json::to_vec(request).map_err(|e| protocol(e.to_string()))?;
        self.pass(self.me, to.id, addr, "request").await?;
        let mut client = self.client(to)?;
        let mut envelope = self.envelope(payload, to);
        envelope.leader_quorum_age_ms = quorum_age.map(|age| age.as_millis() as u64);
        let mut request = tonic::Request::new(envelope);
        request.set_timeout(timeout);
        if let Some(secret) = &self.secret {
            secret.sign(&mut request);
        }
        let sent = async {
            match method {
                Method::Vote => client.vote(request).await,
                Method::PreVote => client.pre_vote(request).await,
                Method::AppendEntries => client.append_entries(request).await,
                Method::InstallSnapshot => client.install_snapshot(request).await,
                Method::Forward => client.forward(request).await,
                Method::Join => client.join(request).await,
                Method::Remove => client.remove(request).await,
                Method::ReadIndex => client.read_index(request).await,
                Method::Hello => client.hello(request).await,
                Method::TimeoutNow => client.timeout_now(request).await,
                Method::TransferLeader => client.transfer_leader(request).await,
                Method::MoveLeader => client.move_leader(request).await,
            }
        };
        // `grpc-timeout` bounds the call only once a connection is up; the connect timeout
        // only the TCP connect. A peer whose listener is bound but not yet served (it is
        // itself starting, and asking us) would hold the TLS or HTTP/2 handshake, and this
        // call, for ever: the caller's bound covers the whole call.
        let reply =
            tokio::time::timeout(timeout, sent)
                .await
                .map_err(|_| TransportError::Unreachable {
                    addr: addr.to_owned(),
                    reason: format!("no answer within {} ms", timeout.as_millis()),
                })?;
        let reply = reply.map_err(|status| self.status_error(to, &status))?;
        self.pass(to.id, self.me, addr, "reply").await?;
        let reply = reply.into_inner();
        // A peer found to lack streams that now answers as a newer build was upgraded.
        if reply.from.as_ref().is_some_and(|from| from.protocol >= 2) {
            self.unstreamed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&to.id);
        }
        if self
            .faults
            .as_ref()
            .is_some_and(|f| f.answers_lost(self.me))
        {
            return Err(TransportError::Unreachable {
                addr: addr.to_owned(),
                reason: "reply lost by fault injection after it was handled".into(),
            });
        }
        serde_json::from_slice(&reply.payload).map_err(|e| protocol(e.to_string()))
    }

    /// What a peer's error status means for the caller: the peer is out of reach for now,
    /// it refused this node (logged), or it broke the protocol.
    fn status_error(&self, to: Dest<'_>, status: &tonic::Status) -> TransportError {
        let addr = to.addr.to_owned();
        let reason = status.message().to_owned();
        match status.code() {
            tonic::Code::Unavailable
            | tonic::Code::Cancelled
            | tonic::Code::DeadlineExceeded
            | tonic::Code::Unknown => TransportError::Unreachable { addr, reason },
            tonic::Code::FailedPrecondition
            | tonic::Code::PermissionDenied
            | tonic::Code::Unauthenticated => {
                self.log_refusal(to, &reason);
                TransportError::Refused { addr, reason }
            }
            tonic::Code::Unimplemented => TransportError::Unsupported { addr, reason },
            _ => TransportError::Protocol {
                addr,
                reason: status.to_string(),
            },
        }
    }

    /// Asks whoever answers at `addr` who it is and whether it belongs to a cluster.
    pub async fn hello(&self, addr: &str, timeout: Duration) -> Result<Hello, TransportError> {
        self.call(Dest::address(addr), Method::Hello, &(), timeout)
            .await
    }

    /// Asks member `id` who it is, as the membership says it is reached (the certificate
    /// checked for its id, the test transport's faults applied).
    pub async fn hello_member(
        &self,
        id: NodeId,
        node: &NodeInfo,
        timeout: Duration,
    ) -> Result<Hello, TransportError> {
        self.call(Dest::member(id, node), Method::Hello, &(), timeout)
            .await
    }

    /// Forwards a write to the leader; the leader answers once it has applied it. Without
    /// an answer the outcome is unknown: the request may have reached the leader.
    pub async fn forward(
        &self,
        leader: NodeId,
        node: &NodeInfo,
        request: &Request,
        timeout: Duration,
    ) -> Result<Forwarded, WriteError> {
        let reply: Result<Result<Forwarded, WriteError>, TransportError> = self
            .call(
                Dest::member(leader, node),
                Method::Forward,
                request,
                timeout,
            )
            .await;
        match reply {
            Ok(result) => result,
            Err(e) => Err(match &request.request_id {
                Some(request_id) => WriteError::OutcomeUnknown {
                    request_id: request_id.clone(),
                    reason: format!("no answer from the leader: {e}"),
                },
                None => WriteError::Unavailable {
                    reason: e.to_string(),
                },
            }),
        }
    }

    /// A cluster call whose answer is itself a membership outcome; one the transport could
    /// not deliver or answer is `Unavailable`.
    async fn member_call<Req: Serialize, T: DeserializeOwned>(
        &self,
        to: Dest<'_>,
        method: Method,
        request: &Req,
        timeout: Duration,
    ) -> Result<T, MembershipError> {
        let reply: Result<Result<T, MembershipError>, _> =
            self.call(to, method, request, timeout).await;
        reply.unwrap_or_else(|e| {
            Err(MembershipError::Unavailable {
                reason: e.to_string(),
            })
        })
    }

    /// Asks the member `to` to add a node. A refusal of the message itself (another
    /// cluster, wrong credentials) is final, like a refusal of the join.
    pub async fn join(
        &self,
        to: Dest<'_>,
        request: &JoinRequest,
        timeout: Duration,
    ) -> Result<(), MembershipError> {
        let reply: Result<Result<(), MembershipError>, _> =
            self.call(to, Method::Join, request, timeout).await;
        reply.unwrap_or_else(|e| match e {
            TransportError::Refused { .. } => Err(MembershipError::Rejected {
                reason: e.to_string(),
            }),
            _ => Err(MembershipError::Unavailable {
                reason: e.to_string(),
            }),
        })
    }

    /// Asks the leader to take `id` out of the cluster.
    pub async fn remove(
        &self,
        leader: NodeId,
        node: &NodeInfo,
        id: NodeId,
        timeout: Duration,
    ) -> Result<(), MembershipError> {
        self.member_call(Dest::member(leader, node), Method::Remove, &id, timeout)
            .await
    }

    /// Asks the leader for an index that a linearizable read must wait for.
    pub async fn read_index(
        &self,
        leader: NodeId,
        node: &NodeInfo,
        timeout: Duration,
    ) -> Result<u64, MembershipError> {
        self.member_call(Dest::member(leader, node), Method::ReadIndex, &(), timeout)
            .await
    }

    /// Asks the leader to move leadership to voter `to` (or the voter furthest along).
    pub async fn move_leader(
        &self,
        leader: NodeId,
        node: &NodeInfo,
        to: Option<NodeId>,
        timeout: Duration,
    ) -> Result<NodeId, MembershipError> {
        self.member_call(Dest::member(leader, node), Method::MoveLeader, &to, timeout)
            .await
    }

    /// Asks the voter `to`, caught up with this leader, to stand for election at once.
    pub async fn timeout_now(
        &self,
        to: NodeId,
        node: &NodeInfo,
        timeout: Duration,
    ) -> Result<(), MembershipError> {
        self.member_call(Dest::member(to, node), Method::TimeoutNow, &(), timeout)
            .await
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &NodeInfo) -> Peer {
        Peer {
            network: self.clone(),
            target,
            node: node.clone(),
        }
    }
}

/// openraft's client of one peer.
pub struct Peer {
    network: Network,
    target: NodeId,
    node: NodeInfo,
}

/// One piece of a snapshot on its way to a follower: the snapshot's file is sent in pieces
/// of at most `raft.snapshot_chunk_bytes`, in order, the last one `done`. The follower
/// writes them into a file of its own and installs the snapshot when the last one arrives
/// (`crate::api::peer`). The fields are those of openraft 0.9's chunked install request.
#[derive(Debug, Serialize, serde::Deserialize)]
pub struct SnapshotChunk {
    /// The sender's vote: a leader's.
    pub vote: Vote,
    /// What the snapshot is of.
    pub meta: SnapshotMeta,
    /// Where in the file this piece goes.
    pub offset: u64,
    /// The piece.
    pub data: Vec<u8>,
    /// Whether it is the last piece.
    pub done: bool,
}

/// What a follower answers to a snapshot's piece: its vote (a higher one tells the sender
/// it is no longer leader), or why it could not take the piece.
pub type SnapshotChunkReply = Result<SnapshotResponse<TypeConfig>, String>;

impl Peer {
    /// Sends one Raft message; messages a leader sends (appends, snapshot chunks) say how
    /// recent its quorum is. A Raft error the peer answers with (it is shutting down) counts
    /// as an unreachable peer.
    async fn raft_call<Req, Resp, E>(
        &mut self,
        method: Method,
        request: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<TypeConfig>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned + 'static,
    {
        let quorum_age = match method {
            Method::AppendEntries | Method::InstallSnapshot => self.network.quorum_age(),
            _ => None,
        };
        let reply: Result<Resp, E> = self
            .network
            .call_as_leader(
                Dest::member(self.target, &self.node),
                method,
                request,
                option.hard_ttl(),
                quorum_age,
            )
            .await
            .map_err(transport_to_rpc)?;
        reply.map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))
    }
}

/// A transport failure as openraft takes it.
fn transport_to_rpc(e: TransportError) -> RPCError<TypeConfig> {
    match e {
        // A peer that refuses us cannot be helped by retrying at once: back off.
        TransportError::Unreachable { .. } | TransportError::Refused { .. } => {
            RPCError::Unreachable(Unreachable::new(&e))
        }
        TransportError::Unsupported { .. } | TransportError::Protocol { .. } => {
            RPCError::Network(NetworkError::new(&e))
        }
    }
}

impl Peer {
    /// Records the term the peer's answer shows its vote at.
    fn witness_term(&self, term: u64) {
        self.network
            .witness
            .saw_term(self.target, &self.node.incarnation, term);
    }

    /// Records what an answer to an append shows the peer promised: its vote at the
    /// append's term at least, and, when it took entries, that it holds them durably
    /// (openraft answers an append only once its entries are flushed).
    fn witness_append(
        &self,
        rpc: &AppendEntriesRequest<TypeConfig>,
        response: &AppendEntriesResponse<TypeConfig>,
    ) {
        let term = rpc.vote.leader_id.term;
        match response {
            AppendEntriesResponse::Success => match rpc.entries.last() {
                Some(last) => self.network.witness.saw_ack(
                    self.target,
                    &self.node.incarnation,
                    term,
                    last.log_id.index,
                ),
                None => self.witness_term(term),
            },
            AppendEntriesResponse::PartialSuccess(_) | AppendEntriesResponse::Conflict => {
                self.witness_term(term)
            }
            AppendEntriesResponse::HigherVote(vote) => self.witness_term(vote.leader_id.term),
        }
    }

    /// Sends `snapshot` piece by piece (see [`SnapshotChunk`]).
    async fn send_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        option: &RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        use tokio::io::AsyncReadExt as _;
        let chunk_bytes = option.snapshot_chunk_size().unwrap_or(1 << 20).max(1);
        let Snapshot {
            meta,
            snapshot: file,
        } = snapshot;
        // A follower that installs packed files gets the file as it is at rest: several
        // times fewer bytes to send and write than its lines (a million rows: 87 MB, not
        // 554). One that does not say so, or does not answer, is sent the lines.
        let packed = self
            .network
            .hello_member(self.target, &self.node, option.hard_ttl())
            .await
            .is_ok_and(|hello| hello.packed_snapshots);
        let mut file = if packed { file.read_as_stored() } else { file };
        let mut offset = 0u64;
        let started = Instant::now();
        tracing::info!(
            target = self.target,
            index = ?meta.last_log_id.map(|l| l.index),
            packed,
            "sending a snapshot"
        );
        loop {
            let mut data = vec![0u8; chunk_bytes];
            let mut filled = 0;
            while filled < data.len() {
                let read = file.read(&mut data[filled..]).await.map_err(|e| {
                    StorageError::read_snapshot(Some(meta.signature()), openraft::AnyError::new(&e))
                })?;
                if read == 0 {
                    break;
                }
                filled += read;
            }
            data.truncate(filled);
            let done = filled < chunk_bytes;
            let len = data.len() as u64;
            let chunk = SnapshotChunk {
                vote,
                meta: meta.clone(),
                offset,
                data,
                done,
            };
            let sent = Instant::now();
            // The last piece is answered once the follower has installed the snapshot,
            // which takes it a minute or more at a million rows: bounded by
            // [`INSTALL_AT_MOST`], not by the bound of one piece, or the leader would send
            // the whole snapshot again while the follower still installs the first.
            let last_option;
            let option = if done {
                last_option = RPCOption::new(option.hard_ttl().max(INSTALL_AT_MOST));
                &last_option
            } else {
                option
            };
            let reply: SnapshotResponse<TypeConfig> = self
                .raft_call::<_, _, RemoteRefusal>(
                    Method::InstallSnapshot,
                    &SnapshotChunkEnvelope(&chunk),
                    option,
                )
                .await
                .inspect_err(|e| {
                    tracing::warn!(
                        target = self.target,
                        offset,
                        done,
                        seconds = started.elapsed().as_secs_f64(),
                        error = %e,
                        "sending a snapshot failed; it is sent again from the start"
                    );
                })
                .map_err(|e| match e {
                    RPCError::Network(e) => StreamingError::Network(e),
                    RPCError::Timeout(e) => StreamingError::Timeout(e),
                    RPCError::Unreachable(e) => StreamingError::Unreachable(e),
                    RPCError::RemoteError(e) => StreamingError::Unreachable(Unreachable::new(&e)),
                })?;
            self.witness_term(reply.vote.leader_id.term);
            if reply.vote != vote {
                // It holds a higher vote: this node is no longer its leader.
                return Ok(reply);
            }
            self.network.liveness.acknowledged(self.target, sent);
            self.network.count_snapshot_bytes(self.target, packed, len);
            if done {
                tracing::info!(
                    target = self.target,
                    bytes = offset + len,
                    seconds = started.elapsed().as_secs_f64(),
                    "sent a snapshot"
                );
                return Ok(reply);
            }
            offset += len;
        }
    }
}

/// Bytes of snapshot files sent to one peer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotBytes {
    /// Sent as the file is at rest (compressed).
    pub packed: u64,
    /// Sent as the file's lines, to a follower that installs only plain files.
    pub lines: u64,
}

impl Network {
    /// Counts `bytes` of a snapshot taken by `peer`, sent `packed` or as lines.
    fn count_snapshot_bytes(&self, peer: NodeId, packed: bool, bytes: u64) {
        let form = if packed { "packed" } else { "lines" };
        metrics::counter!(
            crate::metrics::SNAPSHOT_SENT_BYTES_TOTAL,
            "peer" => peer.to_string(),
            "form" => form,
        )
        .increment(bytes);
        let mut sent = self
            .snapshots_sent
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let counts = sent.entry(peer).or_default();
        if packed {
            counts.packed += bytes;
        } else {
            counts.lines += bytes;
        }
    }
}

/// How long a leader waits for a follower to install a snapshot once it has sent the last
/// piece. A follower that died or was cut off meanwhile is found sooner, by the
/// connection's keepalive pings (every 10 s, answered within 20 s); this bounds only one
/// that answers pings but never finishes.
const INSTALL_AT_MOST: Duration = Duration::from_secs(600);

/// The wire form of a [`SnapshotChunk`] (borrowed, so the piece is not copied to be sent).
#[derive(Serialize)]
#[serde(transparent)]
struct SnapshotChunkEnvelope<'a>(&'a SnapshotChunk);

/// Why a peer refused a piece of a snapshot, as it said.
#[derive(Debug, thiserror::Error, serde::Deserialize)]
#[error("{0}")]
#[serde(transparent)]
struct RemoteRefusal(String);

/// An append sent on a stream and not answered yet.
struct Sent {
    at: Instant,
    term: u64,
    /// The index of its last entry (none: a heartbeat).
    last: Option<u64>,
}

/// The appends of one stream not answered yet, oldest first; the follower answers in order.
#[derive(Default)]
struct InFlight {
    sent: Mutex<std::collections::VecDeque<Sent>>,
    /// Wakes a reader waiting with nothing in flight when an append is sent.
    more: tokio::sync::Notify,
}

impl InFlight {
    fn push(&self, sent: Sent) {
        self.sent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(sent);
        self.more.notify_one();
    }

    fn pop(&self) -> Option<Sent> {
        self.sent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
    }

    fn oldest(&self) -> Option<Instant> {
        let sent = self.sent.lock().unwrap_or_else(|p| p.into_inner());
        sent.front().map(|s| s.at)
    }
}

/// The least time a stream's oldest append may wait for its answer (and the stream for its
/// opening), whatever the heartbeat. A stream is one TCP flow: a lost segment holds back
/// everything behind it for a retransmission timeout (200 ms at least on Linux, doubling
/// when the retransmission is lost too) and then arrives. Bounded by the heartbeat interval
/// (openraft's `hard_ttl`, 120 ms by default), each such delay broke the stream: the appends
/// in flight were sent again on a new one after a backoff that grew with every break, and
/// under 5% loss writes waited up to 1.7 s. A follower that is really gone is still noticed
/// by its heartbeats, which go one call each at the heartbeat's bound.
///
/// 1 s: a few retransmissions, and a follower's slow syncs. An append that reaches a
/// follower during a sync waits for it and then for its own, so a disk whose syncs take
/// 300 ms left one append unanswered for 600 ms, and a floor of 400 ms broke its stream
/// (`cluster::a_follower_slower_than_the_heartbeat_keeps_its_stream`). What the floor
/// delays is only the resending of appends a follower did not answer; a follower that
/// stopped answering altogether is noticed by its heartbeats, and a leader that gets no
/// answers at all is replaced by the election whatever its streams do.
const STREAM_ANSWER_FLOOR: Duration = Duration::from_secs(1);

/// The answers of one follower's stream, read in order against what was sent.
struct Answers {
    inbound: tonic::Streaming<RaftMessage>,
    in_flight: Arc<InFlight>,
    peer: Peer,
    /// How long the oldest append in flight may wait for its answer.
    bound: Duration,
}

/// What an append stream yields to openraft.
type AppendAnswer = Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>;

impl Answers {
    /// The next answer; `None` once the follower ended the stream. An append unanswered
    /// within the bound ends it with an error (openraft opens a new one, from what the
    /// follower acknowledged), as a unary append's deadline did.
    async fn next(&mut self) -> Option<AppendAnswer> {
        let message = loop {
            let read = match self.in_flight.oldest() {
                Some(at) => {
                    let deadline = tokio::time::Instant::from_std(at + self.bound);
                    match tokio::time::timeout_at(deadline, self.inbound.message()).await {
                        Ok(read) => read,
                        Err(_) => {
                            note_unanswered(
                                &self.peer.network.liveness,
                                self.peer.target,
                                self.bound,
                            );
                            return Some(Err(self.unreachable(format!(
                                "no answer to a streamed append within {} ms",
                                self.bound.as_millis()
                            ))));
                        }
                    }
                }
                None => tokio::select! {
                    read = self.inbound.message() => read,
                    () = self.in_flight.more.notified() => continue,
                },
            };
            break read;
        };
        let network = &self.peer.network;
        let addr = self.peer.node.grpc_addr.clone();
        let message = match message {
            Ok(Some(message)) => message,
            Ok(None) => return None,
            Err(status) => {
                let dest = Dest::member(self.peer.target, &self.peer.node);
                return Some(Err(transport_to_rpc(network.status_error(dest, &status))));
            }
        };
        if let Err(e) = network
            .pass(self.peer.target, network.me, &addr, "reply")
            .await
        {
            return Some(Err(transport_to_rpc(e)));
        }
        if network
            .faults
            .as_ref()
            .is_some_and(|f| f.answers_lost(network.me))
        {
            return Some(Err(self.unreachable(
                "reply lost by fault injection after it was handled".into(),
            )));
        }
        let answer: Result<StreamAppendResult<TypeConfig>, String> =
            match serde_json::from_slice(&message.payload) {
                Ok(answer) => answer,
                Err(e) => {
                    let e = TransportError::Protocol {
                        addr,
                        reason: e.to_string(),
                    };
                    return Some(Err(RPCError::Network(NetworkError::new(&e))));
                }
            };
        let answer = match answer {
            Ok(answer) => answer,
            Err(remote) => return Some(Err(self.unreachable(remote))),
        };
        if let Some(sent) = self.in_flight.pop() {
            self.peer.witness_streamed(&sent, &answer);
        }
        Some(Ok(answer))
    }

    fn unreachable(&self, reason: String) -> RPCError<TypeConfig> {
        let e = TransportError::Unreachable {
            addr: self.peer.node.grpc_addr.clone(),
            reason,
        };
        RPCError::Unreachable(Unreachable::new(&e))
    }
}

impl Peer {
    /// Opens a stream of appends to the follower (see [`RaftNetworkV2::stream_append`]).
    async fn open_stream<S>(
        &mut self,
        input: S,
        option: RPCOption,
    ) -> Result<BoxStream<'static, AppendAnswer>, RPCError<TypeConfig>>
    where
        S: futures_util::Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + Unpin + 'static,
    {
        use futures_util::StreamExt as _;
        let network = self.network.clone();
        let (target, node) = (self.target, self.node.clone());
        network
            .pass(network.me, target, &node.grpc_addr, "request")
            .await
            .map_err(transport_to_rpc)?;
        let mut client = network
            .client(Dest::member(target, &node))
            .map_err(transport_to_rpc)?;
        let in_flight = Arc::new(InFlight::default());
        let outbound = {
            let (network, node, in_flight) = (network.clone(), node.clone(), in_flight.clone());
            input
                .then(move |append| {
                    let (network, node, in_flight) =
                        (network.clone(), node.clone(), in_flight.clone());
                    async move {
                        // A message the fault layer drops breaks the stream, as a lost
                        // connection would.
                        network
                            .pass(network.me, target, &node.grpc_addr, "request")
                            .await
                            .ok()?;
                        let payload = serde_json::to_vec(&append).ok()?;
                        let mut envelope = network.envelope(payload, Dest::member(target, &node));
                        envelope.leader_quorum_age_ms =
                            network.quorum_age().map(|age| age.as_millis() as u64);
                        in_flight.push(Sent {
                            at: Instant::now(),
                            term: append.vote.leader_id.term,
                            last: append.entries.last().map(|e| e.log_id.index),
                        });
                        Some(envelope)
                    }
                })
                .take_while(|envelope| std::future::ready(envelope.is_some()))
                .filter_map(std::future::ready)
        };
        let mut request = tonic::Request::new(outbound);
        if let Some(secret) = &network.secret {
            secret.sign(&mut request);
        }
        let bound = option.hard_ttl().max(STREAM_ANSWER_FLOOR);
        let opened = tokio::time::timeout(bound, client.stream_append(request)).await;
        let dest = Dest::member(target, &node);
        let response = match opened {
            Err(_) => {
                return Err(transport_to_rpc(TransportError::Unreachable {
                    addr: node.grpc_addr.clone(),
                    reason: format!("no answer within {} ms", bound.as_millis()),
                }))
            }
            Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => {
                tracing::info!(
                    peer = target,
                    "node {target} does not take streamed appends (an older build): appends go to it one at a time"
                );
                network
                    .unstreamed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(target, Instant::now());
                return Err(transport_to_rpc(network.status_error(dest, &status)));
            }
            Ok(Err(status)) => return Err(transport_to_rpc(network.status_error(dest, &status))),
            Ok(Ok(response)) => response,
        };
        metrics::counter!(crate::metrics::APPEND_STREAMS_TOTAL, "peer" => target.to_string())
            .increment(1);
        *network
            .streams_opened
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(target)
            .or_default() += 1;
        let answers = Answers {
            inbound: response.into_inner(),
            in_flight,
            peer: Peer {
                network,
                target,
                node,
            },
            bound,
        };
        let answers = futures_util::stream::unfold(Some(answers), |answers| async move {
            let mut answers = answers?;
            match answers.next().await? {
                Ok(answer) => Some((Ok(answer), Some(answers))),
                // An error ends the stream.
                Err(e) => Some((Err(e), None)),
            }
        });
        Ok(Box::pin(answers))
    }

    /// Records what the answer to a streamed append shows, as [`Peer::witness_append`] does
    /// for one sent alone.
    fn witness_streamed(&self, sent: &Sent, answer: &StreamAppendResult<TypeConfig>) {
        match answer {
            Ok(_) => {
                match sent.last {
                    Some(last) => self.network.witness.saw_ack(
                        self.target,
                        &self.node.incarnation,
                        sent.term,
                        last,
                    ),
                    None => self.witness_term(sent.term),
                }
                self.network.liveness.acknowledged(self.target, sent.at);
            }
            Err(StreamAppendError::Conflict(_)) => {
                self.witness_term(sent.term);
                self.network.liveness.acknowledged(self.target, sent.at);
            }
            Err(StreamAppendError::HigherVote(vote)) => self.witness_term(vote.leader_id.term),
        }
    }
}

impl RaftNetworkV2<TypeConfig> for Peer {
    type SnapshotData = SnapshotFile;

    /// Appends on one gRPC stream per follower, several in flight; to a peer that does not
    /// serve streams, one at a time.
    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> BoxFuture<'s, Result<BoxStream<'s, AppendAnswer>, RPCError<TypeConfig>>>
    where
        S: futures_util::Stream<Item = AppendEntriesRequest<TypeConfig>>
            + OptionalSend
            + Unpin
            + 'static,
    {
        // openraft's heartbeat worker sends each heartbeat as a stream of one request: a gRPC
        // stream opened and closed for it would cost more than the one call it carries (a
        // stream and a task on each side, every heartbeat to every follower).
        if input.size_hint().1 == Some(1) {
            return stream_append_sequential(self, input, option);
        }
        if !self.network.streams_to(self.target) {
            // One at a time until the peer answers as a build that takes streams: then
            // this session ends, and openraft's next one streams.
            use futures_util::StreamExt as _;
            let (network, peer) = (self.network.clone(), self.target);
            let counted = input
                .take_while(move |_| std::future::ready(!network.streams_to(peer)))
                .inspect(move |_| {
                    metrics::counter!(crate::metrics::APPENDS_UNSTREAMED_TOTAL, "peer" => peer.to_string())
                        .increment(1);
                });
            return stream_append_sequential(self, counted, option);
        }
        Box::pin(async move {
            let answers: BoxStream<'s, AppendAnswer> = self.open_stream(input, option).await?;
            Ok(answers)
        })
    }

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let sent = Instant::now();
        let mut in_flight = AppendInFlight {
            liveness: self.network.liveness.clone(),
            peer: self.target,
            sent,
            bound: option.hard_ttl(),
            answered: false,
        };
        let response = self
            .raft_call::<_, _, RaftError<TypeConfig>>(Method::AppendEntries, &rpc, &option)
            .await?;
        in_flight.answered = true;
        self.witness_append(&rpc, &response);
        // Anything but a higher vote means the follower still takes us for its leader.
        if !matches!(response, AppendEntriesResponse::HigherVote(_)) {
            self.network.liveness.acknowledged(self.target, sent);
        }
        Ok(response)
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl std::future::Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            sent = self.send_snapshot(vote, snapshot, &option) => sent,
        }
    }

    async fn transfer_leader(
        &mut self,
        request: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.raft_call::<_, _, RemoteRefusal>(Method::TransferLeader, &request, &option)
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let sent = Instant::now();
        let response: VoteResponse<TypeConfig> = self
            .raft_call::<_, _, RaftError<TypeConfig>>(Method::Vote, &rpc, &option)
            .await?;
        // Its vote is durable before it answers (granted or not).
        self.witness_term(response.vote.leader_id.term);
        self.network
            .early_elections
            .answered(self.target, &rpc, &response);
        // A granted vote backs the new leader from its first moment, before any append.
        if response.vote_granted {
            self.network.liveness.acknowledged(self.target, sent);
        }
        Ok(response)
    }

    /// Asks whether the peer would vote for this node in the next term, leaving its vote
    /// as it is. A peer that does not serve pre-votes (a build of peer protocol 1, during
    /// a rolling upgrade) counts as granting, as openraft's own fallback does, so the
    /// election goes on as it did before pre-votes; a peer that does not answer counts as
    /// refusing, or a node cut off from every peer would grant itself a majority.
    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let reply: Result<Result<VoteResponse<TypeConfig>, RaftError<TypeConfig>>, _> = self
            .network
            .call_as_leader(
                Dest::member(self.target, &self.node),
                Method::PreVote,
                &rpc,
                option.hard_ttl(),
                None,
            )
            .await;
        match reply {
            Ok(answer) => answer.map_err(|e| RPCError::Unreachable(Unreachable::new(&e))),
            Err(TransportError::Unsupported { .. }) => Ok(VoteResponse::new(rpc.vote, None, true)),
            Err(e) => Err(transport_to_rpc(e)),
        }
    }

    /// How long replication to this peer pauses after each failed call in a row (reset by
    /// the first success): [`backoff_schedule`].
    fn backoff(&self) -> Option<Backoff> {
        Some(Backoff::new(backoff_schedule()))
    }
}

/// The first pause after a failed call to a peer: about a lost packet's retransmission.
const BACKOFF_FIRST: Duration = Duration::from_millis(20);

/// The longest pause: a peer that is down is asked twice a second.
const BACKOFF_MAX: Duration = Duration::from_millis(500);

/// Pauses doubling from [`BACKOFF_FIRST`] to [`BACKOFF_MAX`]. A call that is merely late
/// (one lost packet on a lossy link, one answer slower than the heartbeat) costs a short
/// pause before openraft sends again, while a peer that stays down is soon asked only
/// twice a second, and logged as often. openraft's own default pauses 500 ms after every
/// failure: under 5% packet loss each follower then spent most of its time paused and
/// writes stalled for seconds (chaos `lossy`, 3 nodes: 90% of writes within 1 s).
fn backoff_schedule() -> impl Iterator<Item = Duration> + Send + 'static {
    std::iter::successors(Some(BACKOFF_FIRST), |pause| {
        Some((*pause * 2).min(BACKOFF_MAX))
    })
}

/// An AppendEntries on its way to `peer`. openraft gives up on one after a heartbeat
/// interval (it drops the call, or our own deadline of the same length ends it) and sends
/// the same entries again: a follower whose round trip is longer than the heartbeat then
/// receives every append and acknowledges none in time, and writes crawl. Ending after the
/// whole bound without an answer is counted per peer, exported, and logged with the remedy
/// (at the 1st, 2nd, 4th, 8th, ... time, so a lasting cause does not flood the log).
struct AppendInFlight {
    liveness: Arc<Liveness>,
    peer: NodeId,
    sent: Instant,
    bound: Duration,
    answered: bool,
}

impl Drop for AppendInFlight {
    fn drop(&mut self) {
        // A call cut short by a lost leadership or a refused connection is no timeout.
        let waited = self.sent.elapsed();
        if self.answered || waited < self.bound.mul_f64(0.9) {
            return;
        }
        note_unanswered(&self.liveness, self.peer, self.bound);
    }
}

/// Counts an append to `peer` that went unanswered within `bound`, and logs the remedy (at
/// the 1st, 2nd, 4th, 8th, ... time).
fn note_unanswered(liveness: &Liveness, peer: NodeId, bound: Duration) {
    let count = liveness.append_unanswered(peer);
    metrics::counter!(crate::metrics::APPENDS_UNANSWERED_TOTAL, "peer" => peer.to_string())
        .increment(1);
    if count.is_power_of_two() {
        tracing::warn!(
            peer,
            count,
            bound_ms = bound.as_millis() as u64,
            "an AppendEntries to node {peer} went unanswered within {} ms (the heartbeat \
             interval, or on a stream of appends at least {} ms) and is sent again: that \
             node is down or cut off, or the round trip to it is longer; then raise \
             raft.heartbeat_ms above the round trip (and the election timeouts with it)",
            bound.as_millis(),
            STREAM_ANSWER_FLOOR.as_millis()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed call pauses replication to that peer briefly, longer after each failure in
    /// a row, and never more than half a second.
    #[test]
    fn replication_to_a_failing_peer_pauses_briefly_then_up_to_half_a_second() {
        let pauses: Vec<u64> = backoff_schedule()
            .take(8)
            .map(|d| d.as_millis() as u64)
            .collect();
        assert_eq!(pauses, [20, 40, 80, 160, 320, 500, 500, 500]);
    }
}
