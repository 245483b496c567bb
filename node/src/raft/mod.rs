//! Raft wiring: the type configuration, the commands the log carries, and their results.
//!
//! Every change to the replicated state is a [`Command`] in a log entry. Everything that is
//! not a pure function of the log (ids, timestamps, the receipt's hashes) is decided by the
//! node that proposes the command, so applying it is deterministic on every node.

pub mod faults;
pub mod network;
pub mod service;

use std::fmt;
use std::io::Cursor;

use serde::{Deserialize, Serialize};

use crate::catalogue::row::RowInput;
use crate::dispatch::receipt::Receipt;

/// A node's id in the cluster.
pub type NodeId = u64;

/// How to reach a member of the cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// The gRPC address other nodes use for Raft (`host:port`).
    pub grpc_addr: String,
    /// The HTTP address clients use (`host:port`).
    pub http_addr: String,
}

impl fmt::Display for NodeInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "grpc={} http={}", self.grpc_addr, self.http_addr)
    }
}

openraft::declare_raft_types!(
    /// rowcall's Raft types: commands in, results out, nodes addressed by [`NodeInfo`].
    pub TypeConfig:
        D = Command,
        R = CommandResult,
        NodeId = NodeId,
        Node = NodeInfo,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// The Raft handle of a rowcall node.
pub type Raft = openraft::Raft<TypeConfig>;
/// A stored or replicated log entry.
pub type Entry = openraft::Entry<TypeConfig>;
/// A log id.
pub type LogId = openraft::LogId<NodeId>;
/// Storage errors as openraft wants them.
pub type StorageError = openraft::StorageError<NodeId>;

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
}

impl Command {
    /// A short name for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Self::PutRows { .. } => "put_rows",
            Self::DeleteRow { .. } => "delete_row",
            Self::AppendReceipt { .. } => "append_receipt",
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PutRows { rows, .. } => write!(f, "put_rows({})", rows.len()),
            Self::DeleteRow { key, .. } => write!(f, "delete_row({key})"),
            Self::AppendReceipt { receipt } => write!(f, "append_receipt({})", receipt.id),
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
}
