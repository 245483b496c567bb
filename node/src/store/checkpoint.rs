//! The log's co-signed checkpoints as the state machine keeps them and a snapshot carries
//! them ([`LogHeader`]): below both, so that neither reaches into the other for them. The
//! signing and checking are the state machine's ([`super::state_machine::transparency`]).

use rowcall_proto::tlog::{self, VerifierKey};
use serde::{Deserialize, Serialize};

use crate::raft::NodeId;

/// One node's signature of one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSignature {
    /// The signer.
    pub node: NodeId,
    /// Its signed-note verifier key when it signed.
    pub key: String,
    /// The Ed25519 signature, base64.
    pub signature: String,
}

impl NodeSignature {
    /// Its signature line in a note.
    pub fn note_line(&self) -> Option<tlog::NoteSignature> {
        let key = VerifierKey::parse(&self.key).ok()?;
        let signature = base64_decode(&self.signature)?;
        Some(tlog::NoteSignature {
            name: key.name.clone(),
            key_id: key.id(),
            signature,
        })
    }
}

/// A checkpoint with the signatures of a majority of the voters it had.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cosigned {
    /// `rowcall/<cluster id>`.
    pub origin: String,
    /// Leaves.
    pub size: u64,
    /// The root, base64.
    pub root: String,
    /// The voters when it reached a majority.
    pub voters: Vec<NodeId>,
    /// Its signatures, in node order (learners' too, though they do not count).
    pub signatures: Vec<NodeSignature>,
}

impl Cosigned {
    /// The checkpoint as a C2SP signed note.
    pub fn note(&self) -> String {
        let body = tlog::checkpoint_body(&self.origin, self.size, &self.root);
        let lines: Vec<_> = self
            .signatures
            .iter()
            .filter_map(NodeSignature::note_line)
            .collect();
        tlog::sign_note(&body, &lines)
    }
}

/// A signature of a size that has no majority yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub size: u64,
    pub root: String,
    pub signature: NodeSignature,
}

/// What a snapshot carries of the log besides its leaves.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogHeader {
    /// Leaves at the cut.
    pub size: u64,
    /// The root at the cut, base64 (checked by the node that installs it).
    pub root: String,
    pub checkpoint: Option<Cosigned>,
    pub pending: Vec<Pending>,
}

/// The log's origin line for a cluster.
pub fn origin(cluster_id: &str) -> String {
    format!("rowcall/{cluster_id}")
}

/// A member's signed-note key name.
pub fn key_name(cluster_id: &str, node: NodeId) -> String {
    format!("rowcall/{cluster_id}/node{node}")
}

pub(crate) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

pub(crate) fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
