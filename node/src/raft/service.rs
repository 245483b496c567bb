//! The Raft gRPC service: receives votes, entries and snapshot chunks for the local Raft,
//! and writes forwarded by followers.

use rowcall_proto::raft::raft_service_server::RaftService;
use rowcall_proto::raft::RaftMessage;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::{Request, Response, Status};

use super::{Command, Raft};

/// Serves the local Raft to peers.
pub struct RaftGrpc {
    raft: Raft,
}

impl RaftGrpc {
    /// A service for `raft`.
    pub fn new(raft: Raft) -> Self {
        Self { raft }
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
        let result = self.raft.vote(decode(request)?).await;
        encode(&result)
    }

    async fn append_entries(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let result = self.raft.append_entries(decode(request)?).await;
        encode(&result)
    }

    async fn install_snapshot(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let result = self.raft.install_snapshot(decode(request)?).await;
        encode(&result)
    }

    async fn forward(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let command: Command = decode(request)?;
        let result = self.raft.client_write(command).await;
        encode(&result)
    }
}
