//! The state machine's memory of recent request ids: what makes a retried write
//! exactly-once. A command whose request id was applied before (within the window) is not
//! applied again; its entry answers with the first outcome.
//!
//! # Determinism
//!
//! Which ids count as remembered is a pure function of the log: a record made at index `i`
//! is remembered by the entries `i + 1 ..= i + WINDOW` and by no later one. Physical removal
//! is separate and lazy (the snapshot builder collects records that no state at or after
//! its cut can see), so a record a lookup might need is never missing, and a stale one left
//! on disk is ignored by the window check.
//!
//! # Layout
//!
//! `q/<scope>\0<index:be8>` → the record (an id may be reused after its window; each use
//! keeps its own record, so a snapshot cut between two uses still finds the first), and
//! `qi/<index:be8><scope>` → nothing: the records in index order, for collection and for
//! snapshots.
//!
//! # Scoped per caller
//!
//! Idempotency keys are chosen by clients, so one caller's key must never replay another
//! caller's outcome. A request carries the name of the credential that sent it
//! ([`crate::raft::Request::caller`]), and its record is kept under `<scope>` = `\0`, the
//! name's length (4 bytes, big-endian), the name, then the id. Entries written before
//! requests carried a caller have none: their scope is the bare id (the layout before), and
//! so their records read as they always did. A request with a caller whose scope has no
//! record falls back to a record of the bare id: such a record can only come from an entry
//! proposed before callers were carried, so a retry that spans an upgrade is still
//! recognised, and a cluster applying the log with old and new versions side by side
//! decides alike. Ids are visible ASCII, so a bare id never starts with `\0`, and the length
//! prefix keeps two scopes from running into each other.

// openraft's storage error is large; see `store`.
#![allow(clippy::result_large_err)]

use serde::{Deserialize, Serialize};

use super::io_error;
use crate::raft::{CommandResult, RequestId, StorageError};
use openraft::{ErrorSubject, ErrorVerb};

/// How many log entries after its first use a request id is recognised as a repeat. A client
/// retrying an unknown outcome does so within seconds; at thousands of writes per second
/// this still spans them, and it bounds the table to this many records (plus those waiting
/// for the next snapshot to collect them).
pub const WINDOW: u64 = 20_000;

const RECORD: &[u8] = b"q/";
const BY_INDEX: &[u8] = b"qi/";

/// What the first attempt of a request did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The request id.
    pub id: RequestId,
    /// The credential that sent it (absent in records of entries without a caller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    /// The index of the entry that applied it.
    pub index: u64,
    /// [`crate::raft::Command::fingerprint`] of its command.
    pub fingerprint: String,
    /// Its outcome.
    pub result: CommandResult,
}

impl Record {
    /// Whether the entry at `index` still recognises this record.
    pub fn remembered_at(&self, index: u64) -> bool {
        index > self.index && index - self.index <= WINDOW
    }
}

/// The scope of `id` sent by `caller` (see "Scoped per caller").
fn scope(caller: Option<&str>, id: &RequestId) -> Vec<u8> {
    match caller {
        None => id.as_str().as_bytes().to_vec(),
        Some(caller) => {
            let len = u32::try_from(caller.len()).unwrap_or(u32::MAX);
            [
                &[0u8][..],
                &len.to_be_bytes(),
                caller.as_bytes(),
                id.as_str().as_bytes(),
            ]
            .concat()
        }
    }
}

fn record_prefix(scope: &[u8]) -> Vec<u8> {
    [RECORD, scope, b"\0"].concat()
}

fn record_key(scope: &[u8], index: u64) -> Vec<u8> {
    [record_prefix(scope).as_slice(), &index.to_be_bytes()].concat()
}

fn by_index_key(index: u64, scope: &[u8]) -> Vec<u8> {
    [BY_INDEX, &index.to_be_bytes(), scope].concat()
}

fn read_err(e: &(impl std::error::Error + 'static)) -> StorageError {
    io_error(ErrorSubject::StateMachine, ErrorVerb::Read, e)
}

/// The latest stored record of `id` sent by `caller`, whatever its age (the caller checks
/// the window); for a caller without one, the latest record of the bare id (see "Scoped
/// per caller").
pub fn latest(
    tree: &sled::Tree,
    caller: Option<&str>,
    id: &RequestId,
) -> Result<Option<Record>, StorageError> {
    let found = latest_in(tree, &scope(caller, id))?;
    match (found, caller) {
        (None, Some(_)) => latest_in(tree, &scope(None, id)),
        (found, _) => Ok(found),
    }
}

fn latest_in(tree: &sled::Tree, scope: &[u8]) -> Result<Option<Record>, StorageError> {
    match tree.scan_prefix(record_prefix(scope)).next_back() {
        None => Ok(None),
        Some(item) => {
            let (_, bytes) = item.map_err(|e| read_err(&e))?;
            Ok(Some(
                serde_json::from_slice(&bytes).map_err(|e| read_err(&e))?,
            ))
        }
    }
}

/// Adds `record` to `batch`.
pub fn remember(batch: &mut sled::Batch, record: &Record) -> Result<(), StorageError> {
    let bytes = serde_json::to_vec(record)
        .map_err(|e| io_error(ErrorSubject::StateMachine, ErrorVerb::Write, &e))?;
    let scope = scope(record.caller.as_deref(), &record.id);
    batch.insert(record_key(&scope, record.index), bytes);
    batch.insert(by_index_key(record.index, &scope), &[] as &[u8]);
    Ok(())
}

/// Calls `each` with every record a state at `upto` remembers (made at
/// `upto - WINDOW + 1 ..= upto`), in index order: what a snapshot cut at `upto` carries.
pub fn each_in_window(
    tree: &sled::Tree,
    upto: u64,
    mut each: impl FnMut(Record) -> Result<(), StorageError>,
) -> Result<(), StorageError> {
    let from = upto.saturating_sub(WINDOW).saturating_add(1);
    let start = [BY_INDEX, &from.to_be_bytes()].concat();
    let end = [BY_INDEX, &upto.saturating_add(1).to_be_bytes()].concat();
    for item in tree.range(start..end) {
        let (key, _) = item.map_err(|e| read_err(&e))?;
        let Some((index, scope)) = split_by_index(&key) else {
            continue;
        };
        if let Some(bytes) = tree
            .get(record_key(scope, index))
            .map_err(|e| read_err(&e))?
        {
            each(serde_json::from_slice(&bytes).map_err(|e| read_err(&e))?)?;
        }
    }
    Ok(())
}

/// Removes the records no state at or after `upto` remembers. Safe beside concurrent applies
/// (they only add records above `upto`).
pub fn collect(tree: &sled::Tree, upto: u64) -> Result<usize, StorageError> {
    let Some(last_dead) = upto.checked_sub(WINDOW) else {
        return Ok(0);
    };
    let end = [BY_INDEX, &last_dead.saturating_add(1).to_be_bytes()].concat();
    let mut batch = sled::Batch::default();
    let mut removed = 0;
    for item in tree.range(BY_INDEX.to_vec()..end) {
        let (key, _) = item.map_err(|e| read_err(&e))?;
        if let Some((index, scope)) = split_by_index(&key) {
            batch.remove(record_key(scope, index));
        }
        batch.remove(key);
        removed += 1;
    }
    tree.apply_batch(batch)
        .map_err(|e| io_error(ErrorSubject::StateMachine, ErrorVerb::Delete, &e))?;
    Ok(removed)
}

/// Adds to `batch` the removal of every record (a snapshot install replaces them all).
pub fn clear(tree: &sled::Tree, batch: &mut sled::Batch) -> Result<(), StorageError> {
    for prefix in [RECORD, BY_INDEX] {
        for item in tree.scan_prefix(prefix) {
            let (key, _) = item.map_err(|e| read_err(&e))?;
            batch.remove(key);
        }
    }
    Ok(())
}

fn split_by_index(key: &[u8]) -> Option<(u64, &[u8])> {
    let rest = key.strip_prefix(BY_INDEX)?;
    let (index, scope) = rest.split_at_checked(8)?;
    let index = u64::from_be_bytes(index.try_into().ok()?);
    Some((index, scope))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, index: u64) -> Record {
        Record {
            id: RequestId::parse(id).unwrap(),
            caller: None,
            index,
            fingerprint: "f".into(),
            result: CommandResult::Deleted { deleted: 1 },
        }
    }

    fn in_window(tree: &sled::Tree, upto: u64) -> Result<Vec<Record>, StorageError> {
        let mut out = Vec::new();
        each_in_window(tree, upto, |record| {
            out.push(record);
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn the_window_is_exact_and_collection_keeps_what_a_later_state_needs() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new()
            .temporary(true)
            .path(dir.path())
            .open()
            .unwrap();
        let tree = db.open_tree("sm").unwrap();
        let mut batch = sled::Batch::default();
        // "a" used at 10 and, after its window, reused at 10 + WINDOW + 5.
        for r in [
            record("a", 10),
            record("b", 20),
            record("a", 10 + WINDOW + 5),
        ] {
            remember(&mut batch, &r).unwrap();
        }
        tree.apply_batch(batch).unwrap();

        let a = RequestId::parse("a").unwrap();
        let first = record("a", 10);
        assert!(!first.remembered_at(10), "an entry does not repeat itself");
        assert!(first.remembered_at(11));
        assert!(first.remembered_at(10 + WINDOW));
        assert!(!first.remembered_at(10 + WINDOW + 1));
        assert_eq!(
            latest(&tree, None, &a).unwrap().unwrap().index,
            10 + WINDOW + 5
        );

        // A cut at 15 carries the first use of "a" although a later use exists.
        let cut: Vec<u64> = in_window(&tree, 15)
            .unwrap()
            .iter()
            .map(|r| r.index)
            .collect();
        assert_eq!(cut, [10]);
        // The entry after a cut at 19 + WINDOW still remembers index 20; after 20 + WINDOW
        // it does not.
        let cut: Vec<u64> = in_window(&tree, 19 + WINDOW)
            .unwrap()
            .iter()
            .map(|r| r.index)
            .collect();
        assert_eq!(cut, [20, 10 + WINDOW + 5]);
        let cut: Vec<u64> = in_window(&tree, 20 + WINDOW)
            .unwrap()
            .iter()
            .map(|r| r.index)
            .collect();
        assert_eq!(cut, [10 + WINDOW + 5]);

        // Collecting at 10 + WINDOW removes the record of index 10 only.
        assert_eq!(collect(&tree, 10 + WINDOW).unwrap(), 1);
        assert_eq!(collect(&tree, 10 + WINDOW).unwrap(), 0);
        let left: Vec<u64> = in_window(&tree, 19 + WINDOW)
            .unwrap()
            .iter()
            .map(|r| r.index)
            .collect();
        assert_eq!(left, [20, 10 + WINDOW + 5]);
    }
}
