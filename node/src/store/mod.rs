//! Durable storage on sled: the Raft log store, the state machine and its snapshots, the
//! memory of recent request ids, and the group-commit sync that makes all of them durable.
//!
//! One sled database per node with three trees: `log` (vote, committed, purged, entries),
//! `sm` (rows, receipts, the receipts-by-key index, share state, request ids, applied state,
//! which snapshot is current) and `outbox` (`dispatch::outbox`); snapshots themselves are
//! files in the node's `snapshots/` folder ([`snapshot`]). Logical tables are key prefixes
//! inside a tree, which keeps sled's tree count small. Nothing is acknowledged before
//! [`Durable::sync`] has returned for it: sled's flush followed by fdatasync/fsync of every
//! file and folder it changed (see [`durable`] for what sled leaves undone and why).

// openraft's trait methods return its `StorageError` (over 200 bytes); helpers that feed them
// return the same type rather than box and unbox it at every call.
#![allow(clippy::result_large_err)]

pub mod durable;
pub mod log;
pub mod requests;
pub mod snapshot;
pub mod state_machine;
pub mod wal;

use openraft::{AnyError, ErrorSubject, ErrorVerb};

use crate::raft::{StorageError, TypeConfig};

pub use self::durable::{Durable, SyncError};
pub use self::log::LogStore;
pub use self::state_machine::StateMachine;

/// The Raft handle of a rowcall node: openraft over this store's state machine.
pub type Raft = openraft::Raft<TypeConfig, StateMachine>;
/// A snapshot: its meta data and its file.
pub type Snapshot =
    openraft::type_config::alias::SnapshotOf<TypeConfig, self::snapshot::file::SnapshotFile>;

/// Wraps a storage failure for openraft.
pub(crate) fn io_error(
    subject: ErrorSubject<TypeConfig>,
    verb: ErrorVerb,
    source: &(impl std::error::Error + 'static),
) -> StorageError {
    StorageError::new(subject, verb, AnyError::new(source))
}

/// Big-endian index bytes, so sled's key order is the index order.
pub(crate) fn index_key(prefix: &[u8], index: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + 8);
    key.extend_from_slice(prefix);
    key.extend_from_slice(&index.to_be_bytes());
    key
}
