//! The node-to-node gRPC service: votes, entries and snapshot chunks for the local Raft,
//! and rowcall's cluster calls (forwarded writes, joins, removals, read indexes).

use std::sync::Arc;
use std::time::Duration;

use rowcall_proto::raft::raft_service_server::RaftService;
use rowcall_proto::raft::RaftMessage;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::{Request, Response, Status};

use super::calls::{Forwarded, JoinRequest, MembershipError, WriteError};
use super::NodeId;
use crate::app::{App, Proposal};

/// Serves the local node to its peers.
pub struct RaftGrpc {
    app: Arc<App>,
}

impl RaftGrpc {
    /// A service for `app`.
    pub fn new(app: Arc<App>) -> Self {
        Self { app }
    }
}

fn decode<T: DeserializeOwned>(request: Request<RaftMessage>) -> Result<T, Status> {
    serde_json::from_slice(&request.into_inner().payload)
        .map_err(|e| Status::invalid_argument(format!("payload does not decode: {e}")))
}

fn encode<T: Serialize>(value: &T) -> Result<Response<RaftMessage>, Status> {
    let payload = serde_json::to_vec(value).map_err(|e| Status::internal(e.to_string()))?;
    Ok(Response::new(RaftMessage { payload }))
}

#[tonic::async_trait]
impl RaftService for RaftGrpc {
    async fn vote(&self, request: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let result = self.app.raft.vote(decode(request)?).await;
        encode(&result)
    }

    async fn append_entries(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let result = self.app.raft.append_entries(decode(request)?).await;
        if result.is_ok() {
            self.app.liveness.leader_contacted();
        }
        encode(&result)
    }

    async fn install_snapshot(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let result = self.app.raft.install_snapshot(decode(request)?).await;
        if result.is_ok() {
            self.app.liveness.leader_contacted();
        }
        encode(&result)
    }

    async fn forward(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let request: super::Request = decode(request)?;
        let timeout = Duration::from_millis(self.app.config.limits.write_timeout_ms);
        let result: Result<Forwarded, WriteError> = if self.app.is_stale() {
            Err(WriteError::Unavailable {
                reason: "the leader cannot reach a quorum".into(),
            })
        } else {
            match self.app.propose(request, timeout).await {
                Ok(forwarded) => Ok(forwarded),
                Err(Proposal::Forward(leader)) => Err(WriteError::NotLeader { leader }),
                Err(Proposal::Failed(e)) => Err(e),
            }
        };
        encode(&result)
    }

    async fn join(&self, request: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let join: JoinRequest = decode(request)?;
        let result = self.app.join(join).await;
        encode(&result)
    }

    async fn remove(&self, request: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let id: NodeId = decode(request)?;
        let result = self.app.remove_member(id).await;
        encode(&result)
    }

    async fn read_index(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let () = decode(request)?;
        let timeout = Duration::from_millis(self.app.config.limits.min_index_wait_ms);
        let result: Result<u64, MembershipError> = self.app.leader_read_index(timeout).await;
        encode(&result)
    }
}
