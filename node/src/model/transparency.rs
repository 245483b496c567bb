//! The receipt log's public views: a co-signed checkpoint and the proofs against it, as
//! every front end answers them (hashes in standard base64).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A checkpoint with the signatures of a majority of the voters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SignedCheckpoint {
    /// `rowcall/<cluster id>`.
    pub origin: String,
    /// Leaves in the tree.
    pub size: u64,
    /// The root hash, base64.
    pub root: String,
    /// The C2SP signed note: the checkpoint's three lines, a blank line, a signature line
    /// per signer.
    pub note: String,
    /// The nodes that signed.
    pub signers: Vec<u64>,
    /// The voters when it was co-signed.
    pub voters: Vec<u64>,
    /// The verifier keys of the current members as this node knows them (pin them rather
    /// than trust the node you verify).
    pub keys: Vec<String>,
}

/// A receipt's leaf and its inclusion path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct InclusionProof {
    /// The receipt id.
    pub id: String,
    /// Its leaf's index.
    pub leaf_index: u64,
    /// The leaf (the receipt's canonical encoding); absent when retention dropped its body.
    pub leaf: Option<String>,
    /// The leaf hash, base64.
    pub leaf_hash: String,
    /// The tree the path leads into.
    pub tree_size: u64,
    /// Its root, base64.
    pub root: String,
    /// RFC 9162 inclusion path, base64, from the leaf up.
    pub path: Vec<String>,
    /// Whether retention dropped the receipt's body (its leaf hash and proof stay).
    pub body_dropped: bool,
    /// The co-signed checkpoint of `tree_size`, when the proof is against the latest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<SignedCheckpoint>,
}

/// The proof that one tree is a prefix of a larger one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ConsistencyProof {
    pub from: u64,
    pub to: u64,
    /// Both roots, base64.
    pub from_root: String,
    pub to_root: String,
    /// RFC 9162 consistency path, base64.
    pub path: Vec<String>,
}

/// One leaf.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Leaf {
    pub index: u64,
    /// The receipt it records.
    pub id: String,
    /// Its hash, base64.
    pub hash: String,
}

/// Leaves in a range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Leaves {
    /// The size of the latest co-signed checkpoint: leaves are served up to it.
    pub tree_size: u64,
    pub leaves: Vec<Leaf>,
}
