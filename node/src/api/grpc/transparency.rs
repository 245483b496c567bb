//! `rowcall.v1.Transparency`: the receipt log's checkpoints and proofs, for anyone, over
//! [`crate::service::transparency`]. Hashes travel as raw bytes here (base64 over HTTP).

use rowcall_proto::tlog;
use rowcall_proto::v1::transparency_server::Transparency;
use rowcall_proto::v1::{
    CheckpointRequest, ConsistencyProof as ConsistencyMessage, ConsistencyRequest,
    InclusionProof as InclusionMessage, Leaf as LeafMessage, LeavesRequest, LeavesResponse,
    ProveRequest, SignedCheckpoint as CheckpointMessage,
};
use tonic::{Request, Response, Status};

use super::Api;
use crate::service::transparency::{self as service, InclusionProof, SignedCheckpoint};

/// A base64 hash this node wrote, as bytes (empty if it somehow is not one).
fn bytes(b64: &str) -> Vec<u8> {
    tlog::decode_hash(b64)
        .map(|h| h.to_vec())
        .unwrap_or_default()
}

impl From<SignedCheckpoint> for CheckpointMessage {
    fn from(c: SignedCheckpoint) -> Self {
        Self {
            origin: c.origin,
            size: c.size,
            root: bytes(&c.root),
            note: c.note,
            signers: c.signers,
            voters: c.voters,
            keys: c.keys,
        }
    }
}

impl From<InclusionProof> for InclusionMessage {
    fn from(p: InclusionProof) -> Self {
        Self {
            id: p.id,
            leaf_index: p.leaf_index,
            leaf: p.leaf.unwrap_or_default(),
            leaf_hash: bytes(&p.leaf_hash),
            tree_size: p.tree_size,
            root: bytes(&p.root),
            path: p.path.iter().map(|h| bytes(h)).collect(),
            body_dropped: p.body_dropped,
            checkpoint: p.checkpoint.map(Into::into),
        }
    }
}

#[tonic::async_trait]
impl Transparency for Api {
    async fn checkpoint(
        &self,
        request: Request<CheckpointRequest>,
    ) -> Result<Response<CheckpointMessage>, Status> {
        self.answer(self.viewer(&request), async {
            let fresh = Self::freshness(&request)?;
            let checkpoint = service::checkpoint(&self.app, &fresh).await?;
            Ok(self.reply(checkpoint.into(), None))
        })
        .await
    }

    async fn prove(
        &self,
        request: Request<ProveRequest>,
    ) -> Result<Response<InclusionMessage>, Status> {
        self.answer(self.viewer(&request), async {
            let fresh = Self::freshness(&request)?;
            let ProveRequest { id, size } = request.get_ref();
            let size = (*size > 0).then_some(*size);
            let proof = service::prove(&self.app, &fresh, id, size).await?;
            Ok(self.reply(proof.into(), None))
        })
        .await
    }

    async fn consistency(
        &self,
        request: Request<ConsistencyRequest>,
    ) -> Result<Response<ConsistencyMessage>, Status> {
        self.answer(self.viewer(&request), async {
            let fresh = Self::freshness(&request)?;
            let ConsistencyRequest { from, to } = *request.get_ref();
            let to = (to > 0).then_some(to);
            let proof = service::consistency(&self.app, &fresh, from, to).await?;
            let answer = ConsistencyMessage {
                from: proof.from,
                to: proof.to,
                from_root: bytes(&proof.from_root),
                to_root: bytes(&proof.to_root),
                path: proof.path.iter().map(|h| bytes(h)).collect(),
            };
            Ok(self.reply(answer, None))
        })
        .await
    }

    async fn leaves(
        &self,
        request: Request<LeavesRequest>,
    ) -> Result<Response<LeavesResponse>, Status> {
        self.answer(self.viewer(&request), async {
            let fresh = Self::freshness(&request)?;
            let LeavesRequest { start, end } = *request.get_ref();
            let end = (end > 0).then_some(end);
            let leaves = service::leaves(&self.app, &fresh, start, end).await?;
            let answer = LeavesResponse {
                tree_size: leaves.tree_size,
                leaves: leaves
                    .leaves
                    .into_iter()
                    .map(|l| LeafMessage {
                        index: l.index,
                        id: l.id,
                        hash: bytes(&l.hash),
                    })
                    .collect(),
            };
            Ok(self.reply(answer, None))
        })
        .await
    }
}
