//! Durable storage on sled: the Raft log store, the state machine and its snapshots, the
//! memory of recent request ids, and the group-commit sync that makes all of them durable.
//!
//! One sled database per node with three trees: `log` (vote, committed, purged, entries),
//! `sm` (rows, receipts, the receipts-by-key index, share state, request ids, applied state,
//! which snapshot is current) and `outbox` (`dispatch::outbox`); snapshots themselves are
//! files in the node's `snapshots/` folder ([`snapshot`]). Logical tables are key prefixes
//! inside a tree, which keeps sled's tree count small. Receipt bodies are not in sled: they
//! go into append-only files in the data folder's `receipts/` ([`segments`]), and sled keeps
//! where each one is. Nothing is acknowledged before
//! [`Durable::sync`] has returned for it: sled's flush followed by fdatasync/fsync of every
//! file and folder it changed (see [`durable`] for what sled leaves undone and why). sled may
//! compress its pages (`[storage] compression`); a database written the other way is
//! converted when the node opens it ([`compression`]).

// openraft's trait methods return its `StorageError` (over 200 bytes); helpers that feed them
// return the same type rather than box and unbox it at every call.
#![allow(clippy::result_large_err)]

pub mod checkpoint;
pub mod compression;
pub mod durable;
pub mod error;
pub mod log;
pub mod requests;
pub mod segments;
pub mod snapshot;
pub mod state_machine;
pub mod tree_file;
pub mod wal;

use openraft::{AnyError, ErrorSubject, ErrorVerb};

use crate::raft::{StorageError, TypeConfig};

pub use self::durable::Durable;
pub use self::error::SyncError;
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

/// How long [`wait_for_lock`] waits for a store's lock, and how often it tries.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(50);

/// Whether sled's open failed on the database's lock (sled reports it as an I/O error of
/// its own wording), for [`wait_for_lock`].
pub(crate) fn sled_locked(e: &sled::Error) -> bool {
    matches!(e, sled::Error::Io(e) if e.to_string().contains("could not acquire lock"))
}

/// Runs `open` until it succeeds or fails for another reason than `locked`, for a few
/// seconds at most: a node restarted within one process (tests, a node that leaves and
/// rejoins) may find a store's lock still held for a moment by its previous run, whose last
/// handles are being dropped. The error after the wait is `open`'s last. Blocking.
pub(crate) fn wait_for_lock<T, E>(
    mut open: impl FnMut() -> Result<T, E>,
    locked: impl Fn(&E) -> bool,
) -> Result<T, E> {
    let mut waited = std::time::Duration::ZERO;
    loop {
        match open() {
            Err(e) if locked(&e) && waited < LOCK_WAIT => {
                std::thread::sleep(LOCK_RETRY);
                waited += LOCK_RETRY;
            }
            done => return done,
        }
    }
}

/// Opens the sled database `config` describes as the node does, waiting out the lock a
/// previous handle in this process may still hold for a moment ([`wait_for_lock`]): for
/// tests that close a database and open it again.
#[cfg(test)]
pub(crate) fn reopen_sled(config: &sled::Config) -> sled::Db {
    wait_for_lock(|| config.open(), sled_locked).expect("sled opens")
}
