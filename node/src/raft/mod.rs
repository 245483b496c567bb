//! Raft wiring: the type configuration, the commands the log carries, and their results.
//!
//! Every change to the replicated state is a [`Command`] in a log entry. Everything that is
//! not a pure function of the log (ids, timestamps, the receipt's hashes) is decided by the
//! node that proposes the command, so applying it is deterministic on every node.

pub mod auth;
pub mod batch;
pub mod calls;
pub mod early_election;
pub mod faults;
pub mod identity;
pub mod liveness;
pub mod network;
pub mod pki;
pub mod standing;
pub mod tls;
pub mod validate;
#[cfg(test)]
mod wire_compat;

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::catalogue::row::RowInput;
use crate::model::receipt::Receipt;
use crate::model::share::ShareSecret;
use crate::trace::TraceId;

/// A node's id in the cluster.
pub type NodeId = u64;

/// A member of the cluster as the membership records it: how to reach it, and which
/// incarnation of it (which data folder) was admitted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// The gRPC address other nodes use for Raft (`host:port`).
    pub grpc_addr: String,
    /// The HTTP address clients use (`host:port`).
    pub http_addr: String,
    /// The cluster it belongs to.
    #[serde(default)]
    pub cluster_id: String,
    /// The incarnation of its data folder. Messages to it carry this, and a node running on
    /// another folder refuses them.
    #[serde(default)]
    pub incarnation: String,
    /// The Ed25519 public key (base64) it signs receipt-log checkpoints with, made with its
    /// data folder.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub signing_key: String,
}

impl fmt::Display for NodeInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "grpc={} http={} incarnation={}",
            self.grpc_addr, self.http_addr, self.incarnation
        )
    }
}

openraft::declare_raft_types!(
    /// rowcall's Raft types: commands in, results out, nodes addressed by [`NodeInfo`]. Terms,
    /// leader ids (one leader per term and node: openraft's "advanced" leader id, as in 0.9)
    /// and votes keep openraft's defaults, whose serde form is the one 0.9 wrote.
    pub TypeConfig:
        D = Request,
        R = CommandResult,
        NodeId = NodeId,
        Node = NodeInfo,
        AsyncRuntime = openraft::TokioRuntime,
        ErrorSource = openraft::AnyError,
);

/// A stored or replicated log entry.
pub type Entry = openraft::type_config::alias::EntryOf<TypeConfig>;
/// A log id.
pub type LogId = openraft::type_config::alias::LogIdOf<TypeConfig>;
/// The leader id a log id names (term and node).
pub type CommittedLeaderId = openraft::type_config::alias::CommittedLeaderIdOf<TypeConfig>;
/// A leader id (term and node) as a vote holds it.
pub type LeaderId = openraft::type_config::alias::LeaderIdOf<TypeConfig>;
/// A node's vote: the leader it voted for, and whether a quorum granted it.
pub type Vote = openraft::type_config::alias::VoteOf<TypeConfig>;
/// A membership: the voter sets of a (joint) configuration and every member's address.
pub type Membership = openraft::Membership<NodeId, NodeInfo>;
/// A membership and the log id of the entry that carried it.
pub type StoredMembership = openraft::type_config::alias::StoredMembershipOf<TypeConfig>;
/// What a snapshot is of: its last log id and membership.
pub type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<TypeConfig>;
/// What an entry carries.
pub type EntryPayload = openraft::type_config::alias::EntryPayloadOf<TypeConfig>;
/// The log id of the entry at `index` proposed by leader `node_id` in `term`.
pub fn log_id(term: u64, node_id: NodeId, index: u64) -> LogId {
    LogId::new(CommittedLeaderId { term, node_id }, index)
}

/// A watch on openraft's metrics of this node (read with [`WatchReceiver`]'s
/// `borrow_watched` and `changed`).
pub type Metrics =
    openraft::type_config::alias::WatchReceiverOf<TypeConfig, openraft::RaftMetrics<TypeConfig>>;
pub use openraft::async_runtime::watch::WatchReceiver;
/// Storage errors as the store builds them (openraft's trait methods take them as
/// `io::Error`, which they convert into).
pub type StorageError = openraft::StorageError<TypeConfig>;

/// The id of one write request: the client's `Idempotency-Key`, or one the node makes. The
/// state machine remembers recent ids and answers a repeat with the first outcome, so a
/// client may retry a write whose outcome it does not know.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RequestId(String);

/// Why a client's `Idempotency-Key` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an Idempotency-Key is 1 to {max} visible ASCII characters (no spaces)", max = RequestId::MAX_LEN)]
pub struct BadRequestId;

impl RequestId {
    /// Longest id a client may send.
    pub const MAX_LEN: usize = 128;

    /// A client's key, checked: 1 to 128 visible ASCII characters.
    pub fn parse(key: &str) -> Result<Self, BadRequestId> {
        let visible = key.bytes().all(|b| b.is_ascii_graphic());
        if key.is_empty() || key.len() > Self::MAX_LEN || !visible {
            return Err(BadRequestId);
        }
        Ok(Self(key.to_owned()))
    }

    /// A fresh id made by the node: `rq_` and 20 base36 characters (about 103 bits).
    pub fn generate() -> Self {
        use rand::Rng;
        const ALPHABET: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
        let mut rng = rand::rng();
        let mut id = String::with_capacity(23);
        id.push_str("rq_");
        for _ in 0..20 {
            id.push(ALPHABET[rng.random_range(0..36)] as char);
        }
        Self(id)
    }

    /// The id as sent on the wire.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a log entry carries: a command and the id of the request that proposed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The request id (absent only in entries written before request ids existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<RequestId>,
    /// The name of the credential that sent it: the request id is recognised only for the
    /// same caller ([`crate::store::requests`]). Absent for node-made requests and in
    /// entries written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    /// The change.
    #[serde(flatten)]
    pub command: Command,
    /// The id of the client request it serves, for the logs ([`crate::trace`]): carried to
    /// the leader with a forwarded write, never into the log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceId>,
    /// The W3C trace context (`traceparent`, `tracestate`) of the span that proposed it, so
    /// that the leader's span of a forwarded write continues its trace
    /// ([`crate::telemetry`]); empty unless traces are exported, never in the log.
    #[serde(default, skip_serializing_if = "HashMap::is_empty")]
    pub trace_context: HashMap<String, String>,
}

impl Request {
    /// `command` under a fresh node-made id.
    pub fn new(command: Command) -> Self {
        Self::with_id(RequestId::generate(), command)
    }

    /// `command` under the client's id.
    pub fn with_id(id: RequestId, command: Command) -> Self {
        Self {
            request_id: Some(id),
            caller: None,
            command,
            trace: TraceId::current(),
            trace_context: crate::telemetry::forward_context(),
        }
    }
}

impl Request {
    /// The same request, sent by the credential named `caller`: its id is scoped to it.
    pub fn by(mut self, caller: &str) -> Self {
        self.caller = Some(caller.to_owned());
        self
    }
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.request_id {
            Some(id) => write!(f, "{} [{id}]", self.command),
            None => write!(f, "{}", self.command),
        }
    }
}

/// A change to the replicated state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Command {
    /// Insert or replace rows, atomically: if any `if_version` does not hold, none is written.
    PutRows {
        /// Milliseconds since the epoch, decided by the proposer.
        at_ms: u64,
        /// The validated rows.
        rows: Vec<RowInput>,
    },
    /// Delete one row.
    DeleteRow {
        /// The row.
        key: String,
        /// Delete only if the stored version is this.
        if_version: Option<u64>,
    },
    /// Record an invocation. Receipts are never changed or removed.
    AppendReceipt {
        /// The receipt, complete but for its index.
        receipt: Box<Receipt>,
    },
    /// Set the cluster's share-token secret, unless one is set already (the first applied
    /// wins, so every node signs and verifies with the same one).
    SetShareSecret {
        /// The secret, generated by the proposer.
        secret: ShareSecret,
    },
    /// Revoke a share token by id. Revocations are kept for good.
    RevokeShare {
        /// The token id.
        id: String,
        /// When, decided by the proposer.
        at_ms: u64,
    },
    /// Replace the cluster's share-token secret: `secret` signs from now on; the one it
    /// replaces keeps verifying only with `keep_previous` (the one before that never does).
    RotateShareSecret {
        /// The new secret, generated by the proposer.
        secret: ShareSecret,
        /// Keep verifying tokens of the replaced secret (a planned rotation); without it they
        /// are refused at once (a leaked secret).
        keep_previous: bool,
    },
    /// Apply the receipt retention policy: drop receipts that started before `before_ms`
    /// (0: no age rule) and, of each row, all but the newest `keep_per_key` (0: no count
    /// rule), at most `limit` of them (the proposer repeats while more remain).
    PruneReceipts {
        /// Receipts that started before this (ms since the epoch) go; decided by the proposer,
        /// and held by apply to the log's own time less `max_age_ms` when that is set
        /// ([`crate::dispatch::retention`]).
        before_ms: u64,
        /// The age rule the cut-off came from (0: none, or a proposer that did not send it).
        #[serde(default)]
        max_age_ms: u64,
        /// Receipts kept per row key, newest first.
        keep_per_key: u32,
        /// Receipts dropped by this entry at most.
        limit: u32,
    },
    /// Node `node`'s signature of the receipt log's checkpoint at `size` leaves with `root`
    /// (base64): counted toward a co-signed checkpoint once apply has checked it against the
    /// node's key in the membership and against the tree ([`crate::store::state_machine::transparency`]).
    Cosign {
        /// The signer (a node forwards only its own signatures).
        node: NodeId,
        /// The tree size signed.
        size: u64,
        /// The root signed, base64.
        root: String,
        /// The Ed25519 signature of the checkpoint's text, base64.
        signature: String,
    },
    /// Raise (`alarm`) or clear (`None`) member `node`'s storage alarm: while any member holds
    /// one, every node refuses row writes and invocations ([`crate::cluster::space`]).
    Alarm {
        /// The member (a node proposes only its own).
        node: NodeId,
        /// What it measured, or `None` to clear it.
        alarm: Option<crate::model::alarm::StorageAlarm>,
    },
    /// Directory writes of several clients in one entry, applied in order as if each had
    /// its own entry at this index (each under its own request id), so concurrent writes
    /// share one log append, one replication round and one sync ([`batch`]). Only a
    /// leader's batcher makes these; no two of its writes touch the same row.
    Batch {
        /// The writes, each a `PutRows` or `DeleteRow`.
        requests: Vec<Request>,
    },
}

impl Command {
    /// Its size as a Raft entry's payload (entries travel and are stored as JSON).
    pub fn entry_bytes(&self) -> usize {
        serde_json::to_vec(self).map_or(usize::MAX, |bytes| bytes.len())
    }

    /// A short name for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Self::PutRows { .. } => "put_rows",
            Self::DeleteRow { .. } => "delete_row",
            Self::AppendReceipt { .. } => "append_receipt",
            Self::SetShareSecret { .. } => "set_share_secret",
            Self::RevokeShare { .. } => "revoke_share",
            Self::RotateShareSecret { .. } => "rotate_share_secret",
            Self::PruneReceipts { .. } => "prune_receipts",
            Self::Cosign { .. } => "cosign",
            Self::Alarm { .. } => "alarm",
            Self::Batch { .. } => "batch",
        }
    }

    /// A digest of what the client asked for, leaving out what the proposing node decided
    /// (its clock): a retry of the same request through another node has the same one, and
    /// a different request sent under a reused id does not.
    pub fn fingerprint(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut intent = self.clone();
        match &mut intent {
            Self::PutRows { at_ms, .. } | Self::RevokeShare { at_ms, .. } => *at_ms = 0,
            Self::DeleteRow { .. }
            | Self::AppendReceipt { .. }
            | Self::SetShareSecret { .. }
            | Self::RotateShareSecret { .. }
            | Self::PruneReceipts { .. }
            | Self::Cosign { .. }
            | Self::Alarm { .. }
            | Self::Batch { .. } => {}
        }
        // Serialising plain data into memory cannot fail; an empty digest would only make
        // every such command look alike, never panic.
        let bytes = serde_json::to_vec(&intent).unwrap_or_default();
        hex::encode(&Sha256::digest(&bytes)[..16])
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PutRows { rows, .. } => write!(f, "put_rows({})", rows.len()),
            Self::DeleteRow { key, .. } => write!(f, "delete_row({key})"),
            Self::AppendReceipt { receipt } => write!(f, "append_receipt({})", receipt.id),
            Self::SetShareSecret { .. } => write!(f, "set_share_secret"),
            Self::RevokeShare { id, .. } => write!(f, "revoke_share({id})"),
            Self::RotateShareSecret { keep_previous, .. } => {
                write!(f, "rotate_share_secret(keep_previous={keep_previous})")
            }
            Self::PruneReceipts { .. } => write!(f, "prune_receipts"),
            Self::Cosign { node, size, .. } => write!(f, "cosign(node {node}, size {size})"),
            Self::Alarm { node, alarm } => {
                let what = if alarm.is_some() { "raise" } else { "clear" };
                write!(f, "alarm({what}, node {node})")
            }
            Self::Batch { requests } => write!(f, "batch({})", requests.len()),
        }
    }
}

/// What one row write did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutOutcome {
    /// The row.
    pub key: String,
    /// Its new version (the entry's log index).
    pub version: u64,
    /// True if the row did not exist before.
    pub created: bool,
    /// Its new `updated_at`.
    pub updated_at: String,
}

/// The result of applying one entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum CommandResult {
    /// A blank or membership entry.
    #[default]
    Applied,
    /// Rows were written.
    Put {
        /// One outcome per row, in the order given.
        rows: Vec<PutOutcome>,
    },
    /// A row was deleted (`deleted` is 0 if it did not exist).
    Deleted {
        /// How many rows went.
        deleted: u32,
    },
    /// An `if_version` did not hold; nothing was written.
    Conflict {
        /// The row.
        key: String,
        /// The version the writer expected.
        expected: u64,
        /// The stored version (`None`: no such row).
        actual: Option<u64>,
    },
    /// A receipt was recorded (or was already there: appends are idempotent by id).
    ReceiptAppended {
        /// The receipt's id.
        id: String,
        /// The index that recorded it.
        index: u64,
    },
    /// Another receipt is recorded under this id; nothing was written (the proposer picks a
    /// new id and proposes again, so neither receipt is lost).
    ReceiptIdTaken {
        /// The id.
        id: String,
    },
    /// The request id was seen before: nothing was applied again, and this is what the first
    /// attempt did.
    Replayed {
        /// The index of the first attempt.
        index: u64,
        /// Its outcome.
        first: Box<CommandResult>,
    },
    /// Receipts were dropped by the retention policy.
    Pruned {
        /// How many.
        dropped: u32,
        /// Whether more receipts fall under the policy (the proposer goes on).
        more: bool,
    },
    /// The request id was used before for a different request; nothing was applied.
    RequestIdReused {
        /// The id.
        request_id: RequestId,
        /// The index of the request that used it first.
        index: u64,
    },
    /// A checkpoint signature was counted.
    Cosigned {
        /// The tree size signed.
        size: u64,
        /// Whether that size has (now) a majority of the voters' signatures.
        checkpoint: bool,
    },
    /// A checkpoint signature was refused: not a member's, not verifying, or over a root
    /// this log does not have.
    CosignRefused {
        /// Why.
        reason: String,
    },
    /// The results of a [`Command::Batch`], one per write, in its order.
    Batch {
        /// The results.
        results: Vec<CommandResult>,
    },
}
