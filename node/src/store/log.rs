//! The Raft log store on sled: entries, vote, committed and purged log ids.
//!
//! `append` reports completion to openraft only after sled has flushed the entries, and
//! `save_vote` flushes before it returns (NOTES: openraft durability contract).

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{ErrorSubject, ErrorVerb, OptionalSend, Vote};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{index_key, io_error};
use crate::raft::{Entry, LogId, NodeId, StorageError, TypeConfig};

const VOTE: &[u8] = b"m/vote";
const COMMITTED: &[u8] = b"m/committed";
const PURGED: &[u8] = b"m/purged";
const ENTRY: &[u8] = b"e/";

/// The log store; cheap to clone (clones share the sled tree).
#[derive(Clone)]
pub struct LogStore {
    db: sled::Db,
    tree: sled::Tree,
}

impl LogStore {
    /// Opens the log tree of `db`.
    pub fn open(db: &sled::Db) -> Result<Self, sled::Error> {
        Ok(Self {
            db: db.clone(),
            tree: db.open_tree("log")?,
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

    async fn flush(&self, subject: ErrorSubject<NodeId>) -> Result<(), StorageError> {
        self.db
            .flush_async()
            .await
            .map_err(|e| io_error(subject, ErrorVerb::Write, &e))?;
        Ok(())
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
        self.flush(ErrorSubject::Vote).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        self.read_meta(VOTE)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        // Not flushed on its own: it rides along with the next flush, and a lost value only
        // means re-applying entries that are already applied.
        self.write_meta(COMMITTED, &committed)
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
        let mut batch = sled::Batch::default();
        for entry in entries {
            let bytes = serde_json::to_vec(&entry)
                .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Write, &e))?;
            batch.insert(index_key(ENTRY, entry.log_id.index), bytes);
        }
        self.tree
            .apply_batch(batch)
            .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Write, &e))?;
        // The entries are readable now; they are durable only after the flush.
        let flushed = self.db.flush_async().await;
        match flushed {
            Ok(_) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                let message = e.to_string();
                callback.log_io_completed(Err(std::io::Error::other(message)));
                Err(io_error(ErrorSubject::Logs, ErrorVerb::Write, &e))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.remove_range(log_id.index, u64::MAX)?;
        self.flush(ErrorSubject::Logs).await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        // Record the purge point first: if we crash half-way, the log state stays coherent.
        self.write_meta(PURGED, &log_id)?;
        self.remove_range(0, log_id.index)?;
        self.flush(ErrorSubject::Logs).await
    }
}
