//! Durable storage on sled: the Raft log store and the state machine.
//!
//! One sled database per node with two trees: `log` (vote, committed, purged, entries) and
//! `sm` (rows, receipts, the receipts-by-key index, applied state, the current snapshot).
//! Logical tables are key prefixes inside a tree, which keeps sled's tree count small.
//! Nothing is acknowledged before `flush` has returned.

// openraft's trait methods return its `StorageError` (over 200 bytes); helpers that feed them
// return the same type rather than box and unbox it at every call.
#![allow(clippy::result_large_err)]

pub mod log;
pub mod state_machine;

use std::path::Path;

use openraft::{AnyError, ErrorSubject, ErrorVerb, StorageIOError};

use crate::raft::{NodeId, StorageError};

pub use self::log::LogStore;
pub use self::state_machine::StateMachine;

/// Opens (or creates) the node's sled database in `dir`.
pub fn open_db(dir: &Path) -> Result<sled::Db, sled::Error> {
    sled::Config::new()
        .path(dir)
        // Durability comes from explicit flushes; the background flusher only adds I/O.
        .flush_every_ms(None)
        .mode(sled::Mode::LowSpace)
        .open()
}

/// Wraps a storage failure for openraft.
pub(crate) fn io_error(
    subject: ErrorSubject<NodeId>,
    verb: ErrorVerb,
    source: &(impl std::error::Error + 'static),
) -> StorageError {
    StorageIOError::new(subject, verb, AnyError::new(source)).into()
}

/// Big-endian index bytes, so sled's key order is the index order.
pub(crate) fn index_key(prefix: &[u8], index: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + 8);
    key.extend_from_slice(prefix);
    key.extend_from_slice(&index.to_be_bytes());
    key
}
