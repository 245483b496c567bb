//! Node-to-node transport over tonic: one lazily connected, reused channel per peer address.
//!
//! Raft messages (vote, append, snapshot chunks) and rowcall's cluster calls (write
//! forwarding, join, remove, read index) travel as serde JSON in a `RaftMessage` envelope.
//! A peer that cannot be reached is reported to openraft as `Unreachable`, so it backs off
//! instead of flooding the log. An optional [`Faults`] layer drops or delays messages per
//! directed link, for tests; successful replies feed [`Liveness`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use rowcall_proto::raft::raft_service_client::RaftServiceClient;
use rowcall_proto::raft::RaftMessage;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::transport::{Channel, Endpoint};

use super::calls::{Forwarded, JoinRequest, MembershipError, WriteError};
use super::faults::{Faults, Verdict};
use super::liveness::Liveness;
use super::{NodeId, NodeInfo, Request, TypeConfig};

/// Largest gRPC message between nodes (snapshot chunks, bulk writes).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Stands for "a node whose id we do not know yet" (a join target given by address).
pub const UNKNOWN_NODE: NodeId = 0;

/// The RPCs of the node-to-node service.
#[derive(Debug, Clone, Copy)]
enum Method {
    Vote,
    AppendEntries,
    InstallSnapshot,
    Forward,
    Join,
    Remove,
    ReadIndex,
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
    /// The peer answered with something this node cannot read, or refused the call.
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
    channels: Arc<Mutex<HashMap<String, Channel>>>,
    routes: Arc<std::collections::BTreeMap<String, String>>,
    faults: Option<Arc<Faults>>,
    liveness: Arc<Liveness>,
}

impl Network {
    /// The transport of node `me`, recording peer contact in `liveness`.
    pub fn new(me: NodeId, faults: Option<Arc<Faults>>, liveness: Arc<Liveness>) -> Self {
        Self {
            me,
            channels: Arc::default(),
            routes: Arc::default(),
            faults,
            liveness,
        }
    }

    /// Dials the peers in `routes` (peer address → address to dial) through other addresses.
    pub fn with_routes(mut self, routes: std::collections::BTreeMap<String, String>) -> Self {
        self.routes = Arc::new(routes);
        self
    }

    /// The fault layer, if any.
    pub fn faults(&self) -> Option<&Arc<Faults>> {
        self.faults.as_ref()
    }

    fn client(&self, addr: &str) -> Result<RaftServiceClient<Channel>, TransportError> {
        let addr = self.routes.get(addr).map_or(addr, String::as_str);
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        let channel = match channels.get(addr) {
            Some(channel) => channel.clone(),
            None => {
                let endpoint = Endpoint::from_shared(format!("http://{addr}")).map_err(|e| {
                    TransportError::Protocol {
                        addr: addr.to_owned(),
                        reason: format!("bad address: {e}"),
                    }
                })?;
                let channel = endpoint
                    .connect_timeout(Duration::from_millis(500))
                    .tcp_nodelay(true)
                    .http2_keep_alive_interval(Duration::from_secs(10))
                    .connect_lazy();
                channels.insert(addr.to_owned(), channel.clone());
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

    /// Sends one request to `target` at `addr` and decodes its reply.
    async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        target: NodeId,
        addr: &str,
        method: Method,
        request: &Req,
        timeout: Duration,
    ) -> Result<Resp, TransportError> {
        let protocol = |reason: String| TransportError::Protocol {
            addr: addr.to_owned(),
            reason,
        };
        let payload = serde_json::to_vec(request).map_err(|e| protocol(e.to_string()))?;
        self.pass(self.me, target, addr, "request").await?;
        let mut client = self.client(addr)?;
        let mut request = tonic::Request::new(RaftMessage { payload });
        request.set_timeout(timeout);
        let reply = match method {
            Method::Vote => client.vote(request).await,
            Method::AppendEntries => client.append_entries(request).await,
            Method::InstallSnapshot => client.install_snapshot(request).await,
            Method::Forward => client.forward(request).await,
            Method::Join => client.join(request).await,
            Method::Remove => client.remove(request).await,
            Method::ReadIndex => client.read_index(request).await,
        };
        let reply = reply.map_err(|status| match status.code() {
            tonic::Code::Unavailable
            | tonic::Code::Cancelled
            | tonic::Code::DeadlineExceeded
            | tonic::Code::Unknown => TransportError::Unreachable {
                addr: addr.to_owned(),
                reason: status.message().to_owned(),
            },
            _ => protocol(status.to_string()),
        })?;
        self.pass(target, self.me, addr, "reply").await?;
        if target != UNKNOWN_NODE {
            self.liveness.peer_answered(target);
        }
        serde_json::from_slice(&reply.into_inner().payload).map_err(|e| protocol(e.to_string()))
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
            .call(leader, &node.grpc_addr, Method::Forward, request, timeout)
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

    /// Asks the member at `addr` (id `target` if known) to add a node.
    pub async fn join(
        &self,
        target: NodeId,
        addr: &str,
        request: &JoinRequest,
        timeout: Duration,
    ) -> Result<(), MembershipError> {
        let reply: Result<Result<(), MembershipError>, _> = self
            .call(target, addr, Method::Join, request, timeout)
            .await;
        reply.unwrap_or_else(|e| {
            Err(MembershipError::Unavailable {
                reason: e.to_string(),
            })
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
        let reply: Result<Result<(), MembershipError>, _> = self
            .call(leader, &node.grpc_addr, Method::Remove, &id, timeout)
            .await;
        reply.unwrap_or_else(|e| {
            Err(MembershipError::Unavailable {
                reason: e.to_string(),
            })
        })
    }

    /// Asks the leader for an index that a linearizable read must wait for.
    pub async fn read_index(
        &self,
        leader: NodeId,
        node: &NodeInfo,
        timeout: Duration,
    ) -> Result<u64, MembershipError> {
        let reply: Result<Result<u64, MembershipError>, _> = self
            .call(leader, &node.grpc_addr, Method::ReadIndex, &(), timeout)
            .await;
        reply.unwrap_or_else(|e| {
            Err(MembershipError::Unavailable {
                reason: e.to_string(),
            })
        })
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

impl Peer {
    async fn raft_call<Req, Resp, E>(
        &mut self,
        method: Method,
        request: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, NodeInfo, E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let reply: Result<Resp, E> = self
            .network
            .call(
                self.target,
                &self.node.grpc_addr,
                method,
                request,
                option.hard_ttl(),
            )
            .await
            .map_err(|e| match e {
                TransportError::Unreachable { .. } => RPCError::Unreachable(Unreachable::new(&e)),
                TransportError::Protocol { .. } => RPCError::Network(NetworkError::new(&e)),
            })?;
        reply.map_err(|e| {
            RPCError::RemoteError(RemoteError::new_with_node(
                self.target,
                self.node.clone(),
                e,
            ))
        })
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, NodeInfo, RaftError<NodeId>>> {
        self.raft_call(Method::AppendEntries, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, NodeInfo, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.raft_call(Method::InstallSnapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, NodeInfo, RaftError<NodeId>>> {
        self.raft_call(Method::Vote, &rpc, &option).await
    }
}
