//! What rowcall's own cluster calls carry between nodes (write forwarding, join, remove, read
//! index, hello) and how they fail. Both ends of the transport and the node above them share these.

use serde::{Deserialize, Serialize};

use super::{CommandResult, NodeId, NodeInfo, RequestId};

/// Why a write did not take effect, or may not have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum WriteError {
    /// Not committed: no quorum or no leader, and nothing was proposed. Try again later.
    #[error("the cluster cannot take writes now: {reason}")]
    Unavailable {
        /// Why.
        reason: String,
    },
    /// Proposed, but no answer came in time: it may commit yet, or may never. Retrying with
    /// the same request id is safe (a repeat is answered with the first outcome).
    #[error("the outcome of request {request_id} is unknown: {reason}")]
    OutcomeUnknown {
        /// The request id to retry with.
        request_id: RequestId,
        /// What was waited for.
        reason: String,
    },
    /// The leader refused a forwarded write that would not have passed the checks of the
    /// HTTP protocol (or names a time too far from the leader's clock).
    #[error("the leader refused the write: {reason}")]
    Refused {
        /// Which rule it broke.
        reason: String,
    },
    /// The node asked to apply a forwarded write does not lead.
    #[error("this node does not lead (leader: {leader:?})")]
    NotLeader {
        /// The leader, if known.
        leader: Option<NodeId>,
    },
    /// Too large for one Raft entry; nothing was proposed.
    #[error("the write is {bytes} bytes, over the limit of {limit} bytes for one write (raft.max_entry_bytes)")]
    TooLarge {
        /// Its size as an entry.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// Raft stopped: the node is shutting down or storage failed (then the text starts
    /// with [`STORAGE_FAILED`]).
    #[error("raft stopped: {0}")]
    Fatal(String),
}

/// How the text of [`WriteError::Fatal`] starts when Raft stopped because storage failed
/// (a full disk, a failing one) rather than for a shutdown.
pub const STORAGE_FAILED: &str = "storage failed";

impl WriteError {
    /// Whether Raft stopped because this node's storage failed.
    pub fn storage_failed(&self) -> bool {
        matches!(self, Self::Fatal(detail) if detail.starts_with(STORAGE_FAILED))
    }
}

/// A write a follower forwarded, as the leader applied it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Forwarded {
    /// What applying it did.
    pub result: CommandResult,
    /// Its log index.
    pub index: u64,
}

/// What a node says about itself when asked (`Hello`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Its id.
    pub node_id: NodeId,
    /// Its incarnation.
    pub incarnation: String,
    /// Its cluster, once it founded or joined one.
    pub cluster_id: Option<String>,
    /// Whether it holds a membership (it is, or was, a member of a running cluster).
    pub member: bool,
    /// The leader it knows of.
    pub leader: Option<NodeId>,
    /// Whether it is waiting to found a cluster (started with `--bootstrap` and peers).
    pub founding: bool,
    /// Its checkpoint-signing public key, base64.
    #[serde(default)]
    pub signing_key: String,
    /// How it ranks asks (none from a version that does not say).
    #[serde(default)]
    pub ranking: Option<crate::catalogue::setup::RankingSetup>,
    /// What it saw the asking node's incarnation promise (see [`super::standing`]); none when
    /// it saw nothing, or the asker did not say who it is.
    #[serde(default)]
    pub seen_you: Option<super::standing::Progress>,
    /// Its wall clock when it answered, ms since the epoch (0 from a version that does not
    /// say), so members can check their clocks ([`crate::model::time`]).
    #[serde(default)]
    pub wall_ms: u64,
    /// As leader: how long ago a majority of voters last acknowledged it, ms (none when it
    /// does not lead, never had a majority, or is of a version that does not say). A
    /// follower that stopped hearing it asks, to tell a healthy leader from one cut off.
    #[serde(default)]
    pub quorum_age_ms: Option<u64>,
    /// Its current term: the one it last voted in (0 from a version that does not say). A
    /// follower about to stand against it learns from a newer one that another follower
    /// already stood, or won.
    #[serde(default)]
    pub term: u64,
    /// Whether it installs a snapshot file sent as it is at rest, zstd-compressed (false
    /// from a version that does not say: it is sent the file's lines).
    #[serde(default)]
    pub packed_snapshots: bool,
}

/// A node asking to become a member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinRequest {
    /// Its id.
    pub id: NodeId,
    /// How to reach it.
    pub node: NodeInfo,
    /// Join as a learner (a read replica that never votes).
    pub learner: bool,
    /// What the joining node's store holds (its vote's term, the end of its log), so a
    /// leader that saw this incarnation promise more refuses it; none from older builds.
    #[serde(default)]
    pub progress: Option<super::standing::Progress>,
}

/// Why a membership change or a read index failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum MembershipError {
    /// No leader could be reached, or no quorum.
    #[error("cluster unavailable: {reason}")]
    Unavailable {
        /// Why.
        reason: String,
    },
    /// The leader refused the change.
    #[error("refused: {reason}")]
    Rejected {
        /// Why.
        reason: String,
    },
    /// The node asked is not the leader (it moved while the call was under way).
    #[error("not the leader (leader: {leader:?})")]
    NotLeader {
        /// The leader, if known.
        leader: Option<NodeId>,
    },
}
