//! Raft transport over tonic: one lazily connected, reused channel per peer.
//!
//! Messages are openraft's serde types in a `RaftMessage` envelope. A peer that cannot be
//! reached is reported as `Unreachable`, so openraft backs off instead of flooding the log.

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

use super::{NodeId, NodeInfo, TypeConfig};

/// Largest gRPC message between nodes (snapshot chunks, bulk writes).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Builds one client per peer, sharing channels between clients of the same peer.
#[derive(Clone, Default)]
pub struct Network {
    channels: Arc<Mutex<HashMap<String, Channel>>>,
}

impl Network {
    /// The channel to `addr`, created lazily on first use and reused afterwards.
    pub fn channel(&self, addr: &str) -> Result<Channel, tonic::transport::Error> {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(channel) = channels.get(addr) {
            return Ok(channel.clone());
        }
        let channel = Endpoint::from_shared(format!("http://{addr}"))?
            .connect_timeout(Duration::from_millis(500))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(10))
            .connect_lazy();
        channels.insert(addr.to_owned(), channel.clone());
        Ok(channel)
    }

    /// A gRPC client of the Raft service at `addr`.
    pub fn client(
        &self,
        addr: &str,
    ) -> Result<RaftServiceClient<Channel>, tonic::transport::Error> {
        Ok(RaftServiceClient::new(self.channel(addr)?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &NodeInfo) -> Peer {
        Peer {
            target,
            node: node.clone(),
            client: self.client(&node.grpc_addr).map_err(|e| e.to_string()),
        }
    }
}

/// The connection to one peer.
pub struct Peer {
    target: NodeId,
    node: NodeInfo,
    client: Result<RaftServiceClient<Channel>, String>,
}

/// A failure of the transport itself (not of the remote Raft).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct TransportError(String);

impl Peer {
    async fn call<Req, Resp, E>(
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
        let client = match &self.client {
            Ok(client) => client.clone(),
            Err(e) => {
                return Err(RPCError::Unreachable(Unreachable::new(&TransportError(
                    e.clone(),
                ))))
            }
        };
        let payload =
            serde_json::to_vec(request).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let mut request = tonic::Request::new(RaftMessage { payload });
        request.set_timeout(option.hard_ttl());
        let mut client = client;
        let reply = match method {
            Method::Vote => client.vote(request).await,
            Method::AppendEntries => client.append_entries(request).await,
            Method::InstallSnapshot => client.install_snapshot(request).await,
        };
        let reply = reply.map_err(|status| match status.code() {
            tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::DeadlineExceeded => {
                RPCError::Unreachable(Unreachable::new(&TransportError(
                    status.message().to_owned(),
                )))
            }
            _ => RPCError::Network(NetworkError::new(&TransportError(status.to_string()))),
        })?;
        let result: Result<Resp, E> = serde_json::from_slice(&reply.into_inner().payload)
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| {
            RPCError::RemoteError(RemoteError::new_with_node(
                self.target,
                self.node.clone(),
                e,
            ))
        })
    }
}

enum Method {
    Vote,
    AppendEntries,
    InstallSnapshot,
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, NodeInfo, RaftError<NodeId>>> {
        self.call(Method::AppendEntries, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, NodeInfo, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(Method::InstallSnapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, NodeInfo, RaftError<NodeId>>> {
        self.call(Method::Vote, &rpc, &option).await
    }
}
