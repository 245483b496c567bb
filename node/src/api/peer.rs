//! The node-to-node gRPC service: votes, entries and snapshot chunks for the local Raft,
//! and rowcall's cluster calls (forwarded writes, joins, removals, read indexes, hello).
//!
//! Before a message reaches Raft its envelope is checked against this node's identity and
//! membership ([`Admission`]): it must come from this cluster, be addressed to this node's
//! incarnation, and — when the sender is a member — come from the incarnation the membership
//! admitted. A refusal is a `FailedPrecondition` status whose message says what to do.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rowcall_proto::raft::raft_service_server::RaftService;
use rowcall_proto::raft::RaftMessage;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::{Request, Response, Status};
use tracing::Instrument as _;

use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, StreamAppendError,
    TransferLeaderRequest, TransferLeaderResponse, VoteRequest,
};
use tokio::io::AsyncWriteExt as _;

use crate::app::{App, Proposal};
use crate::model::time::now_ms;
use crate::raft::calls::{Forwarded, JoinRequest, MembershipError, WriteError};
use crate::raft::identity::protocols_talk;
use crate::raft::network::{SnapshotChunk, SnapshotChunkReply};
use crate::raft::standing::Standing;
use crate::raft::{validate, NodeId, SnapshotMeta, TypeConfig, Vote, WatchReceiver as _};
use crate::store::snapshot::file::{Folder, SnapshotFile};
use crate::store::Snapshot;
use crate::trace::TraceId;

/// Serves the local node to its peers; cheap to clone (clones share everything).
#[derive(Clone)]
pub struct RaftGrpc {
    app: Arc<App>,
    /// The snapshot a leader is sending this node, piece by piece.
    inbound: Arc<tokio::sync::Mutex<Option<Inbound>>>,
    /// True once the node stops: open streams end, so the server's graceful shutdown
    /// does not wait on a leader that never closes its stream.
    stop: tokio::sync::watch::Receiver<bool>,
}

/// An append that arrived on a stream and is not answered yet: what its answer counts as
/// contact with the leader needs.
struct Arrival {
    vote: Vote,
    received: Instant,
    quorum_age_ms: Option<u64>,
}

/// A snapshot being received: whose, of what, into which file, and where the next piece
/// goes.
struct Inbound {
    vote: Vote,
    meta: SnapshotMeta,
    file: SnapshotFile,
    next: u64,
}

impl RaftGrpc {
    /// A service for `app`, serving streams until `stop` turns true.
    pub fn new(app: Arc<App>, stop: tokio::sync::watch::Receiver<bool>) -> Self {
        Self {
            app,
            inbound: Arc::new(tokio::sync::Mutex::new(None)),
            stop,
        }
    }

    /// Takes one piece of a leader's snapshot ([`SnapshotChunk`]): written into a file of
    /// this node's snapshot folder; the last one installs the snapshot through openraft.
    /// A piece that does not continue the snapshot being received is refused, and the
    /// leader sends the snapshot again from its start.
    async fn receive_chunk(&self, chunk: SnapshotChunk) -> SnapshotChunkReply {
        let ours = self.app.raft.metrics().borrow_watched().vote;
        if ours.partial_cmp(&chunk.vote) == Some(std::cmp::Ordering::Greater) {
            // A stale leader: our vote tells it so, and nothing is written.
            return Ok(SnapshotResponse::new(ours));
        }
        let fail = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
        let mut inbound = self.inbound.lock().await;
        if chunk.offset == 0 {
            let folder = Folder::open(&self.app.config.node.data.join("snapshots"))
                .map_err(|e| fail("open the snapshot folder", &e))?;
            let file = folder
                .receive_file()
                .await
                .map_err(|e| fail("make a file to receive the snapshot into", &e))?;
            *inbound = Some(Inbound {
                vote: chunk.vote,
                meta: chunk.meta.clone(),
                file,
                next: 0,
            });
        }
        let receiving = inbound
            .as_mut()
            .filter(|i| i.vote == chunk.vote && i.meta == chunk.meta && i.next == chunk.offset);
        let Some(receiving) = receiving else {
            return Err(format!(
                "node {} is not receiving a snapshot that the piece at offset {} continues",
                self.app.node_id, chunk.offset
            ));
        };
        receiving
            .file
            .write_all(&chunk.data)
            .await
            .map_err(|e| fail("write the snapshot", &e))?;
        receiving.next += chunk.data.len() as u64;
        if !chunk.done {
            return Ok(SnapshotResponse::new(chunk.vote));
        }
        let Some(Inbound { meta, mut file, .. }) = inbound.take() else {
            unreachable!("a snapshot is being received");
        };
        file.sync()
            .await
            .map_err(|e| fail("sync the received snapshot", &e))?;
        let snapshot = Snapshot {
            meta,
            snapshot: file,
        };
        self.app
            .raft
            .install_full_snapshot(chunk.vote, snapshot)
            .await
            .map_err(|e| fail("install the snapshot", &e))
    }
}

/// Who may send a kind of message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admission {
    /// A node of this cluster, addressed to this incarnation (a join: the leader judges the
    /// joiner's incarnation itself, with a better message).
    Cluster,
    /// Raft traffic: as [`Admission::Cluster`], and a sender that is a member must be the
    /// incarnation admitted. Unknown senders pass (a new learner hears from the leader
    /// before it knows the membership).
    Raft,
    /// A member, as admitted (forwarded writes, removals, read indexes).
    Member,
}

/// Why a peer's message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerRefusal {
    /// The envelope does not say who sent it.
    #[error("the message does not name its sender")]
    Anonymous,
    /// This node has not founded or joined a cluster yet.
    #[error("node {me} has not joined a cluster yet")]
    NotJoined {
        /// This node.
        me: NodeId,
    },
    /// The sender belongs to another cluster.
    #[error("node {sender} belongs to cluster {theirs:?}; node {me} belongs to cluster {ours}")]
    OtherCluster {
        /// This node.
        me: NodeId,
        /// The sender.
        sender: NodeId,
        /// This node's cluster.
        ours: String,
        /// The sender's.
        theirs: String,
    },
    /// The message is for another node id (an address now used by another node).
    #[error("the message is for node {addressed}, but this is node {me}")]
    WrongNode {
        /// This node.
        me: NodeId,
        /// The node it was for.
        addressed: NodeId,
    },
    /// The message is for an older incarnation of this node: its data folder was replaced.
    #[error("node {me} runs on a new data folder (incarnation {ours}); the membership still records incarnation {addressed}. Its old data is gone: remove member {me} (DELETE /api/cluster/members/{me} with the admin key, on any member), then start it again with --join")]
    Replaced {
        /// This node.
        me: NodeId,
        /// Its incarnation.
        ours: String,
        /// The incarnation the sender expected.
        addressed: String,
    },
    /// The sender is a member, but another incarnation of it was admitted.
    #[error("node {sender} is a member as incarnation {admitted}, but this message comes from incarnation {theirs} (a new data folder): remove member {sender} first, then let it join again")]
    StaleSender {
        /// The sender.
        sender: NodeId,
        /// The incarnation in the membership.
        admitted: String,
        /// The sender's.
        theirs: String,
    },
    /// Only members may send this.
    #[error("node {sender} is not a member of this cluster")]
    NotMember {
        /// The sender.
        sender: NodeId,
    },
    /// The sender's certificate names another node than the one the message claims to be
    /// from (or the connection showed none).
    #[error("the message claims to come from node {claimed}, but the sender's certificate does not name node {claimed}: a peer speaks only for the node id its certificate names")]
    Impersonation {
        /// The node id the message claims.
        claimed: NodeId,
    },
    /// The sender's build speaks a peer protocol too far from this one's.
    #[error("node {sender} speaks peer protocol {theirs} and node {me} speaks {ours}: builds more than one protocol version apart cannot talk. Upgrade one version at a time (every node onto the next version before any goes further)")]
    Protocol {
        /// This node.
        me: NodeId,
        /// The sender.
        sender: NodeId,
        /// This node's protocol.
        ours: u32,
        /// The sender's.
        theirs: u32,
    },
}

impl PeerRefusal {
    /// A short name for metrics.
    fn reason(&self) -> &'static str {
        match self {
            Self::Anonymous => "anonymous",
            Self::NotJoined { .. } => "not_joined",
            Self::OtherCluster { .. } => "other_cluster",
            Self::WrongNode { .. } => "wrong_node",
            Self::Replaced { .. } => "replaced",
            Self::StaleSender { .. } => "stale_sender",
            Self::NotMember { .. } => "not_member",
            Self::Protocol { .. } => "protocol",
            Self::Impersonation { .. } => "impersonation",
        }
    }
}

impl From<PeerRefusal> for Status {
    fn from(refusal: PeerRefusal) -> Self {
        metrics::counter!(crate::metrics::PEER_REFUSALS_TOTAL, "reason" => refusal.reason())
            .increment(1);
        Status::failed_precondition(refusal.to_string())
    }
}

impl RaftGrpc {
    /// Opens `request`: its sender's certificate must name the node the envelope claims, and
    /// the envelope must pass `admission`; refusals are logged (rate-limited by the sender's
    /// backoff) so the operator of this node sees them too.
    fn admit(
        &self,
        request: Request<RaftMessage>,
        admission: Admission,
    ) -> Result<RaftMessage, PeerRefusal> {
        let certificate = certificate_of(&request);
        let message = request.into_inner();
        let result = speaks_for(certificate.as_ref(), &message)
            .and_then(|()| self.check(&message, admission));
        if let Err(refusal) = &result {
            tracing::debug!(%refusal, "refused a peer's message");
        }
        result.map(|()| message)
    }

    fn check(&self, message: &RaftMessage, admission: Admission) -> Result<(), PeerRefusal> {
        let me = self.app.identity.get();
        let from = message.from.as_ref().ok_or(PeerRefusal::Anonymous)?;
        let ours = self.app.identity.protocol();
        if !protocols_talk(ours, from.protocol) {
            return Err(PeerRefusal::Protocol {
                me: me.node_id,
                sender: from.node_id,
                ours,
                theirs: from.protocol.max(1),
            });
        }
        let ours = me
            .cluster_id
            .ok_or(PeerRefusal::NotJoined { me: me.node_id })?;
        if from.cluster_id != ours {
            return Err(PeerRefusal::OtherCluster {
                me: me.node_id,
                sender: from.node_id,
                ours,
                theirs: from.cluster_id.clone(),
            });
        }
        if message.to_node != 0 && message.to_node != me.node_id {
            return Err(PeerRefusal::WrongNode {
                me: me.node_id,
                addressed: message.to_node,
            });
        }
        if !message.to_incarnation.is_empty() && message.to_incarnation != me.incarnation {
            return Err(PeerRefusal::Replaced {
                me: me.node_id,
                ours: me.incarnation,
                addressed: message.to_incarnation.clone(),
            });
        }
        if admission == Admission::Cluster {
            return Ok(());
        }
        let membership = self.app.membership();
        match membership.get_node(&from.node_id) {
            // Memberships from before incarnations record none: nothing to compare.
            Some(admitted)
                if !admitted.incarnation.is_empty() && admitted.incarnation != from.incarnation =>
            {
                Err(PeerRefusal::StaleSender {
                    sender: from.node_id,
                    admitted: admitted.incarnation.clone(),
                    theirs: from.incarnation.clone(),
                })
            }
            Some(_) => Ok(()),
            None if admission == Admission::Member => Err(PeerRefusal::NotMember {
                sender: from.node_id,
            }),
            None => Ok(()),
        }
    }

    /// Counts a leader's accepted message, which arrived at `received`, as contact: only
    /// from an established leader that says how recent its quorum is (the term and leader
    /// are checked when read, against the leader this node then follows). Counted from its
    /// arrival, not from now: handling it (a vote save, an append, their syncs) may have
    /// taken long, and the leader's quorum aged meanwhile ([`crate::raft::liveness`]).
    fn leader_contacted(
        &self,
        vote: crate::raft::Vote,
        received: Instant,
        quorum_age_ms: Option<u64>,
    ) {
        if let (true, Some(age)) = (vote.committed, quorum_age_ms) {
            self.app.liveness.leader_contacted(
                vote.leader_id.node_id,
                vote.leader_id.term,
                received,
                Duration::from_millis(age),
            );
        }
    }

    /// Refuses Raft traffic (votes, appends, snapshots) while this node does not take part:
    /// restarted and still checking with its peers, or found behind what it promised them
    /// ([`crate::raft::standing`]). The sender backs off as from an unreachable peer.
    fn taking_part(&self) -> Result<(), Status> {
        match self.app.standing() {
            Standing::Ok => Ok(()),
            Standing::Verifying => Err(Status::unavailable(format!(
                "node {} restarted and is checking with its peers what it promised them",
                self.app.node_id
            ))),
            Standing::Behind { reason } => Err(Status::failed_precondition(reason)),
        }
    }

    /// Refuses a call that peer protocol 2 added, as a build of protocol 1 (a test's
    /// speaking it too) did: `Unimplemented`, which the caller takes for an older build.
    fn serves_protocol_2(&self, what: &str) -> Result<(), Status> {
        if self.app.identity.protocol() < 2 {
            return Err(Status::unimplemented(format!(
                "{what} need peer protocol 2"
            )));
        }
        Ok(())
    }

    /// Admits a vote or pre-vote request as Raft traffic from the candidate it names.
    fn open_vote(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<(RaftMessage, VoteRequest<TypeConfig>), Status> {
        self.taking_part()?;
        let message = self.admit(request, Admission::Raft)?;
        let vote: VoteRequest<TypeConfig> = decode(&message)?;
        payload_from_sender(&message, vote.vote.leader_id.node_id)?;
        Ok((message, vote))
    }

    /// Records the term a sender stated in a message: a candidate saved its vote for
    /// itself, a leader holds its vote, before either sends.
    fn witness_sender(&self, message: &RaftMessage, term: u64) {
        if let Some(from) = &message.from {
            self.app
                .network
                .witness()
                .saw_term(from.node_id, &from.incarnation, term);
        }
    }

    /// Admits `request` and decodes its payload.
    fn open<T: DeserializeOwned>(
        &self,
        request: Request<RaftMessage>,
        admission: Admission,
    ) -> Result<T, Status> {
        let message = self.admit(request, admission)?;
        decode(&message)
    }
}

/// The certificate the connection of `request` showed, if any.
fn certificate_of<T>(
    request: &Request<T>,
) -> Option<tokio_rustls::rustls::pki_types::CertificateDer<'static>> {
    crate::raft::tls::PeerConnectInfo::of(request)
        .and_then(|info| info.certs.as_ref())
        .and_then(|certs| certs.first().cloned())
}

/// Whether the certificate the connection showed names the node `message` claims to come
/// from. The interceptor ([`crate::raft::auth`]) already refused a connection without one.
fn speaks_for(
    certificate: Option<&tokio_rustls::rustls::pki_types::CertificateDer<'static>>,
    message: &RaftMessage,
) -> Result<(), PeerRefusal> {
    let from = message.from.as_ref().ok_or(PeerRefusal::Anonymous)?;
    match certificate {
        Some(der) if crate::raft::pki::names_node(der, from.node_id) => Ok(()),
        _ => Err(PeerRefusal::Impersonation {
            claimed: from.node_id,
        }),
    }
}

/// Refuses a Raft message whose payload speaks for another node than its sender: a vote
/// asked, entries or a snapshot sent, in another node's name.
fn payload_from_sender(message: &RaftMessage, leader: NodeId) -> Result<(), PeerRefusal> {
    let sender = message.from.as_ref().map_or(0, |f| f.node_id);
    if leader == sender {
        Ok(())
    } else {
        Err(PeerRefusal::Impersonation { claimed: leader })
    }
}

fn decode<T: DeserializeOwned>(message: &RaftMessage) -> Result<T, Status> {
    serde_json::from_slice(&message.payload)
        .map_err(|e| Status::invalid_argument(format!("payload does not decode: {e}")))
}

impl RaftGrpc {
    /// A reply carrying `value`, signed with this node's identity like every message.
    fn encode<T: Serialize>(&self, value: &T) -> Result<Response<RaftMessage>, Status> {
        self.message(value).map(Response::new)
    }

    /// A message carrying `value`, signed with this node's identity.
    fn message<T: Serialize>(&self, value: &T) -> Result<RaftMessage, Status> {
        let payload = serde_json::to_vec(value).map_err(|e| Status::internal(e.to_string()))?;
        Ok(RaftMessage {
            payload,
            from: Some(self.app.identity.sender()),
            ..RaftMessage::default()
        })
    }

    /// Admits one append, alone or on a stream: this node takes part, the connection's
    /// certificate names the sender, the envelope passes, and the entries are sent in the
    /// sender's own name.
    fn open_append(
        &self,
        message: &RaftMessage,
        certificate: Option<&tokio_rustls::rustls::pki_types::CertificateDer<'static>>,
    ) -> Result<AppendEntriesRequest<TypeConfig>, Status> {
        self.taking_part()?;
        speaks_for(certificate, message)
            .and_then(|()| self.check(message, Admission::Raft))
            .inspect_err(|refusal| tracing::debug!(%refusal, "refused a peer's append"))?;
        let append: AppendEntriesRequest<TypeConfig> = decode(message)?;
        payload_from_sender(message, append.vote.leader_id.node_id)?;
        self.witness_sender(message, append.vote.leader_id.term);
        Ok(append)
    }
}

/// The answers to a stream of appends, in order.
type AppendAnswers = futures_util::stream::BoxStream<'static, Result<RaftMessage, Status>>;

#[tonic::async_trait]
impl RaftService for RaftGrpc {
    type StreamAppendStream = AppendAnswers;

    /// Appends from the leader on one stream, several in flight (openraft's pipelined
    /// replication): each is admitted as one sent alone ([`RaftGrpc::open_append`]), handed
    /// to openraft in order, and answered in order once its entries are durable here. The
    /// first message refused ends the stream with its refusal, after the answers to those
    /// before it.
    async fn stream_append(
        &self,
        request: Request<tonic::Streaming<RaftMessage>>,
    ) -> Result<Response<AppendAnswers>, Status> {
        use futures_util::StreamExt as _;
        // Builds of peer protocol 1 had no streams (a test build speaking it serves none
        // either): the leader then sends its appends one at a time.
        self.serves_protocol_2("streamed appends")?;
        self.taking_part()?;
        let certificate = certificate_of(&request);
        let arrivals = Arc::new(std::sync::Mutex::new(std::collections::VecDeque::new()));
        let refusal = Arc::new(std::sync::Mutex::new(None::<Status>));
        let appends = futures_util::stream::unfold(
            (
                request.into_inner(),
                self.clone(),
                arrivals.clone(),
                refusal.clone(),
            ),
            move |(mut messages, this, arrivals, refusal)| {
                let certificate = certificate.clone();
                async move {
                    // The end of the leader's stream, or its connection, ends the appends.
                    let message = messages.message().await.ok().flatten()?;
                    match this.open_append(&message, certificate.as_ref()) {
                        Ok(append) => {
                            lock(&arrivals).push_back(Arrival {
                                vote: append.vote,
                                received: Instant::now(),
                                quorum_age_ms: message.leader_quorum_age_ms,
                            });
                            Some((append, (messages, this, arrivals, refusal)))
                        }
                        Err(status) => {
                            *lock(&refusal) = Some(status);
                            None
                        }
                    }
                }
            },
        );
        let this = self.clone();
        let stopping = || {
            let mut stop = self.stop.clone();
            async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
            }
        };
        // Both ends stop with the node: the answers, and the reading of appends (openraft's
        // task holds the request's body while it reads, and with it the HTTP/2 stream).
        let appends = appends.take_until(stopping());
        let answers = self
            .app
            .raft
            .stream_append(Box::pin(appends))
            .take_until(stopping())
            .map(move |answer| {
                let arrival = lock(&arrivals).pop_front();
                let answer = answer.map_err(|fatal| fatal.to_string());
                let contact = !matches!(answer, Ok(Err(StreamAppendError::HigherVote(_))) | Err(_));
                if let (true, Some(arrival)) = (contact, arrival) {
                    this.leader_contacted(arrival.vote, arrival.received, arrival.quorum_age_ms);
                }
                this.message(&answer)
            })
            .chain(futures_util::stream::iter(std::iter::from_fn(move || {
                lock(&refusal).take().map(Err)
            })));
        Ok(Response::new(answers.boxed()))
    }

    async fn vote(&self, request: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let (message, mut vote) = self.open_vote(request)?;
        self.witness_sender(&message, vote.vote.leader_id.term);
        if self.app.leader_unbacked_for_a_lease() {
            // openraft skips its lease check for a transfer the leader authorised; the
            // lease protects a leader that can still commit, which this one cannot.
            vote.leadership_transfer = true;
        }
        let result = self.app.raft.vote(vote.clone()).await;
        if let Ok(answer) = &result {
            self.app.network.early_elections().refused(&vote, answer);
        }
        self.encode(&result)
    }

    /// Whether this node would vote for the asker in the next term; its vote and term stay
    /// as they are, so nothing is witnessed or durable. A build of peer protocol 1 lacks
    /// it, which the asker takes as a grant.
    async fn pre_vote(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        self.serves_protocol_2("pre-votes")?;
        let (_, vote) = self.open_vote(request)?;
        let result = self.app.raft.pre_vote(vote).await;
        self.encode(&result)
    }

    async fn append_entries(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let received = Instant::now();
        let certificate = certificate_of(&request);
        let message = request.into_inner();
        let quorum_age = message.leader_quorum_age_ms;
        let append = self.open_append(&message, certificate.as_ref())?;
        let vote = append.vote;
        let result = self.app.raft.append_entries(append).await;
        if let Ok(response) = &result {
            if !matches!(response, AppendEntriesResponse::HigherVote(_)) {
                self.leader_contacted(vote, received, quorum_age);
            }
        }
        self.encode(&result)
    }

    async fn install_snapshot(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let received = Instant::now();
        self.taking_part()?;
        let message = self.admit(request, Admission::Raft)?;
        let quorum_age = message.leader_quorum_age_ms;
        let chunk: SnapshotChunk = decode(&message)?;
        payload_from_sender(&message, chunk.vote.leader_id.node_id)?;
        let vote = chunk.vote;
        let result = self.receive_chunk(chunk).await;
        if result.as_ref().is_ok_and(|r| r.vote == vote) {
            self.leader_contacted(vote, received, quorum_age);
        }
        self.encode(&result)
    }

    async fn forward(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let sender = request.get_ref().from.as_ref().map_or(0, |f| f.node_id);
        let request: crate::raft::Request = self.open(request, Admission::Member)?;
        let timeout = Duration::from_millis(self.app.config.limits.write_timeout_ms);
        let checked = validate::check_forwarded(&request, sender, now_ms());
        let result: Result<Forwarded, WriteError> = if let Err(refusal) = checked {
            tracing::warn!(sender, %refusal, "refused a forwarded write");
            Err(WriteError::Refused {
                reason: refusal.to_string(),
            })
        } else if self.app.is_cut_off() {
            Err(WriteError::Unavailable {
                reason: "the leader cannot reach a quorum".into(),
            })
        } else {
            // Served under the id the client's request had on the follower.
            let trace = request.trace.clone().unwrap_or_else(TraceId::generate);
            let span = tracing::info_span!("forwarded", request_id = %trace, from = sender);
            crate::telemetry::adopt_forwarded(&span, &request.trace_context);
            let proposed = trace
                .scope(self.app.propose(request, timeout))
                .instrument(span.clone())
                .await;
            span.in_scope(|| tracing::debug!(ok = proposed.is_ok(), "forwarded write proposed"));
            match proposed {
                Ok(forwarded) => Ok(forwarded),
                Err(Proposal::Forward(leader)) => Err(WriteError::NotLeader { leader }),
                Err(Proposal::Failed(e)) => Err(e),
            }
        };
        self.encode(&result)
    }

    async fn join(&self, request: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let message = self.admit(request, Admission::Cluster)?;
        let join: JoinRequest = decode(&message)?;
        // A node asks for itself; only a member passes on another node's request.
        let sender = message.from.as_ref().map_or(0, |f| f.node_id);
        if join.id != sender && self.app.membership().get_node(&sender).is_none() {
            return Err(PeerRefusal::Impersonation { claimed: join.id }.into());
        }
        let result = self.app.join(join).await;
        self.encode(&result)
    }

    async fn remove(&self, request: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let id: NodeId = self.open(request, Admission::Member)?;
        let result = self.app.remove_member(id).await;
        self.encode(&result)
    }

    async fn read_index(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let () = self.open(request, Admission::Member)?;
        let timeout = Duration::from_millis(self.app.config.limits.min_index_wait_ms);
        let result: Result<u64, MembershipError> = self.app.leader_read_index(timeout).await;
        self.encode(&result)
    }

    async fn timeout_now(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let sender = request.get_ref().from.as_ref().map_or(0, |f| f.node_id);
        let () = self.open(request, Admission::Member)?;
        let result = self.app.stand_for_election(sender).await;
        self.encode(&result)
    }

    /// openraft's leadership transfer from the leader this node follows: refused while this
    /// node does not take part ([`RaftGrpc::taking_part`]); openraft checks the rest (the
    /// sender's vote is the one this node holds, a target's log is level).
    async fn transfer_leader(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        self.serves_protocol_2("leadership transfers")?;
        self.taking_part()?;
        let transfer: TransferLeaderRequest<TypeConfig> = self.open(request, Admission::Member)?;
        let result: Result<TransferLeaderResponse<TypeConfig>, String> = self
            .app
            .raft
            .handle_transfer_leader(transfer)
            .await
            .map_err(|fatal| fatal.to_string());
        self.encode(&result)
    }

    async fn move_leader(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let to: Option<NodeId> = self.open(request, Admission::Member)?;
        let result = self.app.move_leader(to).await;
        self.encode(&result)
    }

    async fn hello(&self, request: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        // Any holder of a certificate of this cluster may ask who is here (a fresh node has
        // no cluster id yet); a node of this cluster that says who it is also hears what it
        // promised this node.
        let certificate = certificate_of(&request);
        let message = request.into_inner();
        speaks_for(certificate.as_ref(), &message)?;
        let () = decode(&message)?;
        let asker = message.from.as_ref().filter(|from| {
            self.app.identity.cluster_id().as_deref() == Some(from.cluster_id.as_str())
        });
        self.encode(
            &self
                .app
                .hello_to(asker.map(|from| (from.node_id, from.incarnation.as_str()))),
        )
    }
}

/// Locks `mutex`; what it guards is changed whole under the lock, so a panic elsewhere
/// leaves it consistent.
fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
