//! The Raft log store on sled: entries, vote, committed and purged log ids.
//!
//! `append` reports completion to openraft only after the entries are durable, and
//! `save_vote`, `truncate` and `purge` return only once their change is (NOTES: openraft's
//! durability contract); durable means [`Durable::sync`] returned, which concurrent appends
//! and applies share.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{ErrorSubject, ErrorVerb, OptionalSend, Vote};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::durable::Durable;
use super::{index_key, io_error};
use crate::raft::{Entry, LogId, NodeId, StorageError, TypeConfig};

const VOTE: &[u8] = b"m/vote";
const COMMITTED: &[u8] = b"m/committed";
const PURGED: &[u8] = b"m/purged";
const ENTRY: &[u8] = b"e/";

/// The log store; cheap to clone (clones share the sled tree).
#[derive(Clone)]
pub struct LogStore {
    storage: Durable,
    tree: sled::Tree,
}

impl LogStore {
    /// Opens the log tree of the node's database.
    pub fn open(storage: &Durable) -> Result<Self, sled::Error> {
        Ok(Self {
            storage: storage.clone(),
            tree: storage.db().open_tree("log")?,
        })
    }

    fn read_meta<T: DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, StorageError> {
        let fail = |e: &(dyn std::error::Error + 'static)| {
            io_error(
                ErrorSubject::Store,
                ErrorVerb::Read,
                &StoreError(e.to_string()),
            )
        };
        match self.tree.get(key).map_err(|e| fail(&e))? {
            Some(bytes) => Ok(Some(serde_json::from_slice(&bytes).map_err(|e| fail(&e))?)),
            None => Ok(None),
        }
    }

    fn write_meta<T: Serialize>(&self, key: &[u8], value: &T) -> Result<(), StorageError> {
        let bytes = serde_json::to_vec(value)
            .map_err(|e| io_error(ErrorSubject::Store, ErrorVerb::Write, &e))?;
        self.tree
            .insert(key, bytes)
            .map_err(|e| io_error(ErrorSubject::Store, ErrorVerb::Write, &e))?;
        Ok(())
    }

    async fn sync(&self, subject: ErrorSubject<NodeId>) -> Result<(), StorageError> {
        self.storage
            .sync()
            .await
            .map_err(|e| io_error(subject, ErrorVerb::Write, &e))
    }

    fn last_entry_id(&self) -> Result<Option<LogId>, StorageError> {
        let last = self
            .tree
            .scan_prefix(ENTRY)
            .next_back()
            .transpose()
            .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Read, &e))?;
        match last {
            Some((_, bytes)) => {
                let entry: Entry = serde_json::from_slice(&bytes)
                    .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Read, &e))?;
                Ok(Some(entry.log_id))
            }
            None => Ok(None),
        }
    }

    /// Removes the entries with index in `range`, in one batch.
    fn remove_range(&self, from: u64, to_inclusive: u64) -> Result<(), StorageError> {
        let mut batch = sled::Batch::default();
        for item in self
            .tree
            .range(index_key(ENTRY, from)..=index_key(ENTRY, to_inclusive))
        {
            let (key, _) = item.map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Delete, &e))?;
            batch.remove(key);
        }
        self.tree
            .apply_batch(batch)
            .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Delete, &e))
    }
}

impl LogStore {
    /// Writes `entries` in one batch and returns once they are durable; they are readable
    /// as soon as the batch is written.
    async fn append_durably(
        &self,
        entries: impl IntoIterator<Item = Entry>,
    ) -> Result<(), StorageError> {
        let mut batch = sled::Batch::default();
        for entry in entries {
            let bytes = serde_json::to_vec(&entry)
                .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Write, &e))?;
            batch.insert(index_key(ENTRY, entry.log_id.index), bytes);
        }
        self.tree
            .apply_batch(batch)
            .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Write, &e))?;
        self.sync(ErrorSubject::Logs).await
    }
}

/// A sled failure whose source cannot be carried as is.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct StoreError(String);

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let start = match range.start_bound() {
            Bound::Included(i) => *i,
            Bound::Excluded(i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(i) => Bound::Included(index_key(ENTRY, *i)),
            Bound::Excluded(i) => Bound::Excluded(index_key(ENTRY, *i)),
            Bound::Unbounded => Bound::Included(index_key(ENTRY, u64::MAX)),
        };
        self.tree
            .range((Bound::Included(index_key(ENTRY, start)), end))
            .map(|item| {
                let (_, bytes) =
                    item.map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Read, &e))?;
                serde_json::from_slice(&bytes)
                    .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Read, &e))
            })
            .collect()
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged_log_id: Option<LogId> = self.read_meta(PURGED)?;
        let last_log_id = self.last_entry_id()?.or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        self.write_meta(VOTE, vote)?;
        self.sync(ErrorSubject::Vote).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        self.read_meta(VOTE)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        // Durable before openraft applies up to it: apply does not sync (see the state
        // machine's "Apply"), so after a power loss the node re-applies from the log up to
        // the saved commit index before it serves anything. Were this value older than
        // what was applied and shown, a restarted node cut off from the leader would serve
        // reads older than those it served before the loss. The sync is shared with the
        // appends of the same moment (group commit).
        self.write_meta(COMMITTED, &committed)?;
        self.sync(ErrorSubject::Store).await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.read_meta::<Option<LogId>>(COMMITTED)?.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let outcome = self.append_durably(entries).await;
        let reported = match &outcome {
            Ok(()) => Ok(()),
            Err(e) => Err(std::io::Error::other(e.to_string())),
        };
        callback.log_io_completed(reported);
        outcome
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.remove_range(log_id.index, u64::MAX)?;
        self.sync(ErrorSubject::Logs).await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        // Record the purge point first: if we crash half-way, the log state stays coherent.
        self.write_meta(PURGED, &log_id)?;
        self.remove_range(0, log_id.index)?;
        self.sync(ErrorSubject::Logs).await
    }
}

#[cfg(test)]
mod tests {
    use openraft::testing::log_id;
    use openraft::{EntryPayload, RaftLogId};

    use super::*;
    use crate::config::SyncMode;

    fn blank(index: u64) -> Entry {
        Entry {
            log_id: log_id(1, 1, index),
            payload: EntryPayload::Blank,
        }
    }

    async fn append(store: &mut LogStore, range: std::ops::RangeInclusive<u64>) {
        store.append_durably(range.map(blank)).await.unwrap();
    }

    async fn last(store: &mut LogStore) -> (Option<u64>, Option<u64>) {
        let state = store.get_log_state().await.unwrap();
        (
            state.last_purged_log_id.map(|l| l.index),
            state.last_log_id.map(|l| l.index),
        )
    }

    #[tokio::test]
    async fn the_log_state_is_right_after_purges_and_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Durable::open(dir.path(), SyncMode::Fdatasync).unwrap();
        let mut store = LogStore::open(&storage).unwrap();
        append(&mut store, 1..=10).await;
        store.purge(log_id(1, 1, 4)).await.unwrap();
        assert_eq!(last(&mut store).await, (Some(4), Some(10)));
        // Purged up to the last entry: the last log id is the purged one.
        store.purge(log_id(1, 1, 10)).await.unwrap();
        assert_eq!(last(&mut store).await, (Some(10), Some(10)));
        // A snapshot ahead of the log purges past its end.
        store.purge(log_id(2, 1, 25)).await.unwrap();
        assert_eq!(last(&mut store).await, (Some(25), Some(25)));
        append(&mut store, 26..=27).await;
        assert_eq!(last(&mut store).await, (Some(25), Some(27)));
        let read = store.try_get_log_entries(20..30).await.unwrap();
        let indexes: Vec<u64> = read.iter().map(|e| e.get_log_id().index).collect();
        assert_eq!(indexes, [26, 27]);
        drop(store);
        let mut reopened = LogStore::open(&storage).unwrap();
        assert_eq!(last(&mut reopened).await, (Some(25), Some(27)));
    }

    #[tokio::test]
    async fn a_saved_commit_index_is_durable_when_saving_returns() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Durable::open(dir.path(), SyncMode::Fdatasync).unwrap();
        let mut store = LogStore::open(&storage).unwrap();
        append(&mut store, 1..=3).await;
        let rounds = storage.rounds();
        store.save_committed(Some(log_id(1, 1, 3))).await.unwrap();
        assert!(
            storage.rounds() > rounds,
            "a sync ran after the commit index was written, before saving returned"
        );
        assert_eq!(
            store.read_committed().await.unwrap().map(|l| l.index),
            Some(3)
        );
    }
}
