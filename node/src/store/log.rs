//! The Raft log store: entries on a write-ahead log made for them ([`super::wal`]); the
//! vote, the commit index, the purge point and the log's binding in sled, beside the
//! identity they vouch for ([`crate::raft::identity`]).
//!
//! # Where each part lives, and why
//!
//! Entries are written once and deleted in bulk behind snapshots: in sled every one of them
//! left garbage that sled never gave back (about half of its footprint per invocation). On
//! the write-ahead log they are appended to chunk files of a few megabytes, synced in
//! batches, and a chunk is deleted whole once every entry in it is purged. The vote, the
//! commit index and the purge point are a few bytes rewritten now and then; they stay in
//! sled with the identity, so the identity and the vote are still lost, kept and restored
//! together.
//!
//! # The binding
//!
//! The log is made with a random id, kept in its own state and in sled (`m/wal`). At start
//! they must match. A log without a binding in sled (the database was lost, or the log's
//! creation did not finish) is removed and made anew; a database whose bound log is gone,
//! or is another log, has lost its Raft entries: its Raft state and applied state are
//! cleared, so the identity check sees a folder whose Raft state is gone and the node
//! comes back as a new incarnation, never as the member that acknowledged those entries.
//!
//! # Durability, and the order of the two stores
//!
//! - `append` hands the entries to the log and returns; openraft is told they are durable
//!   by the log's callback (`IOFlushed`), after the `fdatasync` that covers them (group
//!   commit: one sync for everything handed over meanwhile). openraft 0.10 relies on this
//!   split: a leader replicates entries as soon as `append` returns and counts its own
//!   copy towards the quorum only at the callback; a follower acknowledges an append only
//!   at the callback. So an entry is committed only once a majority has it on disk, the
//!   leader's own copy included, and the leader's sync overlaps the followers' instead of
//!   preceding them. The callback fires only after the sync returned; a failed write or
//!   sync reports an error to every later callback and openraft stops (`super::wal`). What
//!   a crash leaves of an unsynced tail was never acknowledged by this node; the torn last
//!   record is cut at the next open.
//! - `save_vote` returns once the vote is synced in sled.
//! - `save_committed` first waits until the log is durable up to the commit index, then
//!   syncs the index in sled: a restarted node re-applies from its log up to the saved
//!   index, so every entry up to it must be there.
//! - `truncate` returns once the log's truncation is synced.
//! - `purge` syncs the new purge point in sled first, then purges the log: the purge point
//!   in sled is never behind the log's, and a purge the log missed (a crash in between) is
//!   redone at start. openraft never reads at or below the purge point.
//! - The state machine (in sled) may be made durable ahead of the log on this node (it
//!   applies committed entries the log may not have synced yet); after a power loss
//!   openraft then counts the applied entries as its log (it purges up to them), which is
//!   right: they were committed, so every leader holds them.
//!
//! # Upgrades
//!
//! A folder whose entries are in sled (the layout before) has them copied into a new log
//! at start: written and synced into `raft-log.new`, renamed into place, bound in sled,
//! and only then removed from sled. A crash at any point leaves either the old layout (the
//! copy is made again) or the new one.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{ErrorSubject, ErrorVerb, OptionalSend};
use raft_log::api::raft_log_writer::RaftLogWriter as _;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::durable::Durable;
use super::io_error;
use super::wal::{self, Flushed, Payload, WalLogId};
use crate::config::SyncMode;
use crate::raft::{Entry, LogId, StorageError, TypeConfig, Vote};

const VOTE: &[u8] = b"m/vote";
const COMMITTED: &[u8] = b"m/committed";
const PURGED: &[u8] = b"m/purged";
/// The id of the write-ahead log that holds this database's entries.
pub const BINDING: &[u8] = b"m/wal";
/// Entries, in the layout before the write-ahead log (read once, to move them).
const ENTRY: &[u8] = b"e/";

/// Why the log could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// sled failed.
    #[error("the log's database: {0}")]
    Database(#[from] sled::Error),
    /// The write-ahead log failed.
    #[error("the Raft log in {path}: {source}")]
    Wal {
        /// Its folder.
        path: std::path::PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// An entry in sled's old layout does not read.
    #[error("an entry in the database's log does not read: {0}")]
    Entry(String),
    /// Making the database durable failed.
    #[error(transparent)]
    Sync(#[from] super::SyncError),
}

/// The log store; cheap to clone (clones share the sled tree and the log).
#[derive(Clone)]
pub struct LogStore {
    storage: Durable,
    tree: sled::Tree,
    wal: Arc<Mutex<wal::Log>>,
    /// Every entry up to this index is durable in the log.
    durable: Arc<AtomicU64>,
}

impl LogStore {
    /// Opens the node's log: its entries in the folder `dir`, the rest in `storage`.
    /// Settles the binding (and moves entries from the layout before) first; see the
    /// module's documentation. Blocking: it replays the log's chunks.
    pub async fn open(storage: &Durable, dir: &Path) -> Result<Self, OpenError> {
        let tree = storage.db().open_tree("log")?;
        let sync = storage.mode() == SyncMode::Fdatasync;
        let wal_err = |source| OpenError::Wal {
            path: dir.to_owned(),
            source,
        };
        let binding = tree
            .get(BINDING)?
            .map(|b| String::from_utf8_lossy(&b).into_owned());
        let mut log = None;
        if dir.exists() {
            let opened = wal::open(dir).map_err(wal_err)?;
            let theirs = opened.log_state().user_data.clone();
            match (&binding, theirs) {
                (Some(ours), Some(theirs)) if *ours == theirs => log = Some(opened),
                (Some(_), _) => {
                    drop(opened);
                    lost_entries(storage, dir, "is another log than the one it made").await?;
                }
                // Unbound: made for a database that is gone, or its making did not finish.
                (None, _) => {
                    drop(opened);
                    tracing::warn!(log = %dir.display(), "a Raft log this database did not bind is removed and made anew");
                    std::fs::remove_dir_all(dir).map_err(wal_err)?;
                }
            }
        } else if binding.is_some() {
            lost_entries(storage, dir, "is gone").await?;
        }
        let log = match log {
            Some(log) => log,
            None => create(storage, &tree, dir, sync).await?,
        };
        let store = Self {
            storage: storage.clone(),
            tree,
            wal: Arc::new(Mutex::new(log)),
            durable: Arc::new(AtomicU64::new(0)),
        };
        store.settle(dir).await?;
        Ok(store)
    }

    /// Finishes what a crash may have cut short: entries of the layout before still in
    /// sled, and a purge the log did not take.
    async fn settle(&self, dir: &Path) -> Result<(), OpenError> {
        let wal_err = |source| OpenError::Wal {
            path: dir.to_owned(),
            source,
        };
        let mut stale = sled::Batch::default();
        let mut any = false;
        for key in self.tree.scan_prefix(ENTRY).keys() {
            stale.remove(key?);
            any = true;
        }
        if any {
            self.tree.apply_batch(stale)?;
            self.storage.sync().await?;
        }
        let purged: Option<LogId> = self
            .read_meta(PURGED)
            .map_err(|e| OpenError::Entry(e.to_string()))?;
        let mut log = self.log();
        let behind = match (purged, log.log_state().purged()) {
            (Some(ours), Some(theirs)) => ours.index > theirs.0.index,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if let Some(purged) = purged.filter(|_| behind) {
            log.purge(WalLogId(purged)).map_err(wal_err)?;
        }
        // What the log replayed may have been written and not synced when the process
        // died (it is in the page cache, not yet on the disk): sync it before counting it
        // as durable. The purge above goes with it.
        wal::blocking_flush(&mut log, self.synced()).map_err(wal_err)?;
        let last = log.log_state().last().map_or(0, |l| l.0.index);
        self.durable.store(last, Ordering::SeqCst);
        Ok(())
    }

    fn log(&self) -> MutexGuard<'_, wal::Log> {
        // The log is only ever changed whole under the lock: a panic elsewhere leaves it
        // consistent.
        self.wal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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

    async fn sync(&self, subject: ErrorSubject<TypeConfig>) -> Result<(), StorageError> {
        self.storage
            .sync()
            .await
            .map_err(|e| io_error(subject, ErrorVerb::Write, &e))
    }

    /// Hands everything appended so far to the log's writer and waits until it is durable.
    async fn flush_log(&self, subject: ErrorSubject<TypeConfig>) -> Result<(), StorageError> {
        let fail = |e: std::io::Error| io_error(subject.clone(), ErrorVerb::Write, &e);
        let (sender, receiver) = tokio::sync::oneshot::channel();
        self.log()
            .flush(self.synced(), Some(Flushed::Wake(sender)))
            .map_err(fail)?;
        receiver
            .await
            .map_err(|_| fail(std::io::Error::other("the log's writer stopped")))?
            .map_err(fail)
    }

    fn synced(&self) -> bool {
        self.storage.mode() == SyncMode::Fdatasync
    }

    /// Writes `entries` and returns once they are durable (tests).
    #[cfg(test)]
    async fn append_durably(
        &self,
        entries: impl IntoIterator<Item = Entry>,
    ) -> Result<(), StorageError> {
        let records = encode(entries)?;
        self.put(&mut self.log(), records)
            .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Write, &e))?;
        self.flush_log(ErrorSubject::Logs).await
    }

    /// Writes `records` into `log` ([`put`]); what it cut is no longer durable.
    fn put(&self, log: &mut wal::Log, records: Vec<(WalLogId, Payload)>) -> std::io::Result<()> {
        if let Some(cut) = put(log, records)? {
            self.durable
                .fetch_min(cut.saturating_sub(1), Ordering::SeqCst);
        }
        Ok(())
    }

    /// Bytes the log's files take on disk.
    pub fn log_bytes(&self) -> u64 {
        self.log().on_disk_size()
    }
}

/// Readies `log` for `records`, and returns the index it truncated at, if it did.
///
/// Records at an index the log already holds replace it and everything after it, as writing
/// over them would: the truncation goes to the log first, in the same flush as the records.
/// (openraft truncates a conflicting tail itself before it appends; this keeps the store's
/// contract whole for any caller.) And the log counts from its purge point (or 0): a first
/// record further on gets the point just before it as its purge point, so the log can
/// later be truncated at its first record. That point is the log's own, never reported
/// as an entry ([`LogStore::get_log_state`] reads entries only above it).
fn prepare(
    log: &mut wal::Log,
    records: &mut Vec<(WalLogId, Payload)>,
) -> std::io::Result<Option<u64>> {
    // At or below the purge point an entry is in the snapshot already.
    if let Some(purged) = log.log_state().purged().map(|p| p.0.index) {
        records.retain(|(id, _)| id.0.index > purged);
    }
    let Some((first, _)) = records.first() else {
        return Ok(None);
    };
    let state = log.log_state();
    let held = state
        .last()
        .is_some_and(|last| last.0.index >= first.0.index);
    let unanchored = state.last().is_none() && state.purged().is_none() && first.0.index > 0;
    if held {
        log.truncate(first.0.index)?;
        return Ok(Some(first.0.index));
    }
    if unanchored {
        let before = LogId::new(first.0.leader_id, first.0.index - 1);
        log.purge(WalLogId(before))?;
    }
    Ok(None)
}

/// Writes `records` into `log` after readying it ([`prepare`]); returns the index it
/// truncated at, if it did. Not flushed.
fn put(log: &mut wal::Log, mut records: Vec<(WalLogId, Payload)>) -> std::io::Result<Option<u64>> {
    let cut = prepare(log, &mut records)?;
    if !records.is_empty() {
        log.append(records)?;
    }
    Ok(cut)
}

/// The entries as the log's records.
fn encode(
    entries: impl IntoIterator<Item = Entry>,
) -> Result<Vec<(WalLogId, Payload)>, StorageError> {
    entries
        .into_iter()
        .map(|entry| {
            let bytes = serde_json::to_vec(&entry)
                .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Write, &e))?;
            Ok((WalLogId(entry.log_id), Payload(bytes)))
        })
        .collect()
}

/// The log of a database that kept its vote lost its entries (`why`): clear the Raft state
/// and the applied state, so the node starts as a new incarnation (see the module's
/// documentation), and remove what is left of the log.
async fn lost_entries(storage: &Durable, dir: &Path, why: &str) -> Result<(), OpenError> {
    tracing::error!(
        log = %dir.display(),
        "the Raft log this database was bound to {why}: the entries this node acknowledged \
         are lost, so its Raft state is cleared and it starts as a new incarnation, to be \
         re-admitted (remove it on any member, then start it with --join)"
    );
    for tree in ["log", crate::store::state_machine::TREE] {
        storage.db().open_tree(tree)?.clear()?;
    }
    storage.sync().await?;
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|source| OpenError::Wal {
            path: dir.to_owned(),
            source,
        })?;
    }
    Ok(())
}

/// Makes the log for this database, with the entries sled holds in the layout before (none
/// on a new folder), and binds it.
async fn create(
    storage: &Durable,
    tree: &sled::Tree,
    dir: &Path,
    sync: bool,
) -> Result<wal::Log, OpenError> {
    let wal_err = |path: &Path| {
        let path = path.to_owned();
        move |source| OpenError::Wal { path, source }
    };
    let binding = {
        use rand::Rng as _;
        let bits: u64 = rand::rng().random();
        format!("w{bits:016x}")
    };
    let making = dir.with_extension("new");
    if making.exists() {
        std::fs::remove_dir_all(&making).map_err(wal_err(&making))?;
    }
    let mut log = wal::create(&making, &binding, sync).map_err(wal_err(&making))?;
    // The log counts from the purge point, as the entries in sled do.
    if let Some(bytes) = tree.get(PURGED)? {
        let purged: LogId =
            serde_json::from_slice(&bytes).map_err(|e| OpenError::Entry(e.to_string()))?;
        log.purge(WalLogId(purged)).map_err(wal_err(&making))?;
    }
    let mut moved = 0usize;
    let mut batch = Vec::new();
    for item in tree.scan_prefix(ENTRY) {
        let (_, bytes) = item?;
        let entry: Entry =
            serde_json::from_slice(&bytes).map_err(|e| OpenError::Entry(e.to_string()))?;
        batch.push((WalLogId(entry.log_id), Payload(bytes.to_vec())));
        if batch.len() == 1024 {
            moved += batch.len();
            put(&mut log, std::mem::take(&mut batch)).map_err(wal_err(&making))?;
        }
    }
    moved += batch.len();
    put(&mut log, batch).map_err(wal_err(&making))?;
    wal::blocking_flush(&mut log, sync).map_err(wal_err(&making))?;
    drop(log);
    std::fs::rename(&making, dir).map_err(wal_err(dir))?;
    if let Some(parent) = dir.parent() {
        wal::sync_dir(parent).map_err(wal_err(parent))?;
    }
    tree.insert(BINDING, binding.as_bytes())?;
    storage.sync().await?;
    if moved > 0 {
        tracing::info!(entries = moved, log = %dir.display(), "moved the Raft log's entries from the database to its own log");
    }
    wal::open(dir).map_err(wal_err(dir))
}

/// A sled failure whose source cannot be carried as is.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct StoreError(String);

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, std::io::Error> {
        let start = match range.start_bound() {
            Bound::Included(i) => *i,
            Bound::Excluded(i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(i) => i.saturating_add(1),
            Bound::Excluded(i) => *i,
            Bound::Unbounded => u64::MAX,
        };
        let log = self.log();
        log.read(start, end)
            .map(|item| {
                let (_, Payload(bytes)) =
                    item.map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Read, &e))?;
                serde_json::from_slice(&bytes)
                    .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Read, &e))
            })
            .collect::<Result<_, StorageError>>()
            .map_err(Into::into)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, std::io::Error> {
        Ok(self.read_meta(VOTE)?)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, std::io::Error> {
        let last_purged_log_id: Option<LogId> = self.read_meta(PURGED)?;
        let in_log = {
            let log = self.log();
            let state = log.log_state();
            state
                .last()
                .filter(|last| Some(*last) > state.purged())
                .map(|l| l.0)
        };
        // A snapshot may be ahead of the log: the purge point then is the last log id.
        let last_log_id = in_log.max(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), std::io::Error> {
        self.write_meta(VOTE, vote)?;
        Ok(self.sync(ErrorSubject::Vote).await?)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), std::io::Error> {
        // Durable before openraft applies up to it: apply does not sync (see the state
        // machine's "Apply"), so after a power loss the node re-applies from the log up to
        // the saved commit index before it serves anything. Were this value older than
        // what was applied and shown, a restarted node cut off from the leader would serve
        // reads older than those it served before the loss. The entries up to it must be
        // durable in the log first: they are what is re-applied.
        if let Some(committed) = committed {
            if committed.index > self.durable.load(Ordering::SeqCst) {
                self.flush_log(ErrorSubject::Logs).await?;
                self.durable.fetch_max(committed.index, Ordering::SeqCst);
            }
        }
        self.write_meta(COMMITTED, &committed)?;
        Ok(self.sync(ErrorSubject::Store).await?)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, std::io::Error> {
        Ok(self.read_meta::<Option<LogId>>(COMMITTED)?.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), std::io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let records = encode(entries)?;
        let Some(upto) = records.last().map(|(id, _)| id.0.index) else {
            callback.io_completed(Ok(()));
            return Ok(());
        };
        let sync = self.synced();
        let mut log = self.log();
        self.put(&mut log, records)?;
        // Readable now; durable when the writer calls back, after the fdatasync that
        // covers them (and whatever else was handed over meanwhile).
        log.flush(
            sync,
            Some(Flushed::Append {
                flushed: callback,
                upto,
                durable: self.durable.clone(),
            }),
        )
    }

    async fn truncate_after(&mut self, last: Option<LogId>) -> Result<(), std::io::Error> {
        // Everything after `last` goes; with no `last`, everything does.
        let from = last.map_or(0, |l| l.index + 1);
        let holds = self
            .log()
            .log_state()
            .last()
            .is_some_and(|held| held.0.index >= from);
        if !holds {
            return Ok(());
        }
        self.log().truncate(from)?;
        // Entries from here on are gone; those appended again are durable only when
        // their own flush says so.
        self.durable
            .fetch_min(from.saturating_sub(1), Ordering::SeqCst);
        Ok(self.flush_log(ErrorSubject::Logs).await?)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), std::io::Error> {
        // The purge point in sled first (see the module's documentation), then the log;
        // the log's flush deletes the chunk files nothing unpurged is left in.
        self.write_meta(PURGED, &log_id)?;
        self.sync(ErrorSubject::Logs).await?;
        self.log()
            .purge(WalLogId(log_id))
            .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Delete, &e))?;
        Ok(self.flush_log(ErrorSubject::Logs).await?)
    }
}

#[cfg(test)]
mod tests {
    use crate::raft::log_id;
    use crate::raft::EntryPayload;

    use super::*;
    use crate::config::SyncMode;
    use crate::store::index_key;

    fn blank(index: u64) -> Entry {
        Entry {
            log_id: log_id(1, 1, index),
            payload: EntryPayload::Blank,
        }
    }

    /// An entry of about `bytes` bytes.
    fn sized(index: u64, bytes: usize) -> Entry {
        let request = crate::raft::Request::new(crate::raft::Command::DeleteRow {
            key: "K".repeat(bytes),
            if_version: None,
        });
        Entry {
            log_id: log_id(1, 1, index),
            payload: EntryPayload::Normal(request),
        }
    }

    struct Folder {
        dir: tempfile::TempDir,
    }

    impl Folder {
        fn new() -> Self {
            Self {
                dir: tempfile::tempdir().unwrap(),
            }
        }

        fn storage(&self) -> Durable {
            Durable::open(&self.dir.path().join("sled"), SyncMode::Fdatasync).unwrap()
        }

        fn wal(&self) -> std::path::PathBuf {
            self.dir.path().join(wal::DIR)
        }

        async fn open(&self, storage: &Durable) -> LogStore {
            LogStore::open(storage, &self.wal()).await.unwrap()
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

    async fn indexes(store: &mut LogStore, range: std::ops::Range<u64>) -> Vec<u64> {
        let read = store.try_get_log_entries(range).await.unwrap();
        read.iter().map(|e| e.log_id.index).collect()
    }

    #[tokio::test]
    async fn the_log_state_is_right_after_purges_and_a_restart() {
        let folder = Folder::new();
        let storage = folder.storage();
        let mut store = folder.open(&storage).await;
        append(&mut store, 1..=10).await;
        store.purge(log_id(1, 1, 4)).await.unwrap();
        assert_eq!(last(&mut store).await, (Some(4), Some(10)));
        assert_eq!(
            indexes(&mut store, 0..20).await,
            (5..=10).collect::<Vec<_>>()
        );
        // Purged up to the last entry: the last log id is the purged one.
        store.purge(log_id(1, 1, 10)).await.unwrap();
        assert_eq!(last(&mut store).await, (Some(10), Some(10)));
        // A snapshot ahead of the log purges past its end; the log goes on after it.
        store.purge(log_id(2, 1, 25)).await.unwrap();
        assert_eq!(last(&mut store).await, (Some(25), Some(25)));
        let later = |i| Entry {
            log_id: log_id(2, 1, i),
            payload: EntryPayload::Blank,
        };
        store.append_durably((26..=27).map(later)).await.unwrap();
        assert_eq!(last(&mut store).await, (Some(25), Some(27)));
        assert_eq!(indexes(&mut store, 20..30).await, [26, 27]);
        // A conflicting tail is cut, and the log goes on from there.
        store.truncate_after(Some(log_id(1, 1, 26))).await.unwrap();
        assert_eq!(last(&mut store).await, (Some(25), Some(26)));
        drop(store);
        let mut reopened = folder.open(&storage).await;
        assert_eq!(last(&mut reopened).await, (Some(25), Some(26)));
        assert_eq!(indexes(&mut reopened, 0..100).await, [26]);
        reopened.append_durably((27..=28).map(later)).await.unwrap();
        assert_eq!(indexes(&mut reopened, 0..100).await, [26, 27, 28]);
    }

    #[tokio::test]
    async fn a_saved_commit_index_is_durable_when_saving_returns() {
        let folder = Folder::new();
        let storage = folder.storage();
        let mut store = folder.open(&storage).await;
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

    #[tokio::test]
    async fn purged_entries_give_their_disk_back() {
        let folder = Folder::new();
        let storage = folder.storage();
        let mut store = folder.open(&storage).await;
        // About 40 MiB of entries: five chunks and more.
        for start in (1..=4000u64).step_by(500) {
            store
                .append_durably((start..start + 500).map(|i| sized(i, 10_000)))
                .await
                .unwrap();
        }
        let full = store.log_bytes();
        assert!(full > 30 << 20, "{full}");
        store.purge(log_id(1, 1, 3990)).await.unwrap();
        let kept = store.log_bytes();
        // What is left is the chunk still being written and the one before it at most.
        assert!(
            kept < 20 << 20,
            "{full} bytes before the purge, {kept} after"
        );
        let files = std::fs::read_dir(folder.wal()).unwrap().count();
        drop(store);
        let mut reopened = folder.open(&storage).await;
        assert_eq!(
            indexes(&mut reopened, 0..5000).await,
            (3991..=4000).collect::<Vec<_>>()
        );
        assert!(std::fs::read_dir(folder.wal()).unwrap().count() <= files);
    }

    /// A folder of the layout before: vote, commit index, purge point and entries in sled.
    fn write_old_layout(storage: &Durable) {
        let tree = storage.db().open_tree("log").unwrap();
        tree.insert(VOTE, serde_json::to_vec(&Vote::new(3, 1)).unwrap())
            .unwrap();
        tree.insert(PURGED, serde_json::to_vec(&log_id(1, 1, 4)).unwrap())
            .unwrap();
        tree.insert(
            COMMITTED,
            serde_json::to_vec(&Some(log_id(1, 1, 6))).unwrap(),
        )
        .unwrap();
        for i in 5..=8 {
            tree.insert(index_key(ENTRY, i), serde_json::to_vec(&blank(i)).unwrap())
                .unwrap();
        }
        storage.db().flush().unwrap();
    }

    #[tokio::test]
    async fn a_folder_of_the_layout_before_has_its_entries_moved_into_the_log() {
        let folder = Folder::new();
        let storage = folder.storage();
        write_old_layout(&storage);
        let mut store = folder.open(&storage).await;
        assert_eq!(last(&mut store).await, (Some(4), Some(8)));
        assert_eq!(indexes(&mut store, 0..100).await, [5, 6, 7, 8]);
        assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new(3, 1)));
        assert_eq!(
            store.read_committed().await.unwrap().map(|l| l.index),
            Some(6)
        );
        let tree = storage.db().open_tree("log").unwrap();
        assert_eq!(tree.scan_prefix(ENTRY).count(), 0, "the entries left sled");
        assert!(tree.get(BINDING).unwrap().is_some());
        append(&mut store, 9..=9).await;
        drop(store);
        let mut reopened = folder.open(&storage).await;
        assert_eq!(indexes(&mut reopened, 0..100).await, [5, 6, 7, 8, 9]);
    }

    #[tokio::test]
    async fn a_move_cut_short_before_the_binding_is_made_again() {
        let folder = Folder::new();
        let storage = folder.storage();
        write_old_layout(&storage);
        // A crash after the new log was renamed into place, before sled bound it.
        drop(wal::create(&folder.wal(), "w-unbound", true).unwrap());
        let mut store = folder.open(&storage).await;
        assert_eq!(indexes(&mut store, 0..100).await, [5, 6, 7, 8]);
        assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new(3, 1)));
    }

    #[tokio::test]
    async fn a_database_whose_log_is_gone_loses_its_raft_state_not_just_the_entries() {
        let folder = Folder::new();
        let storage = folder.storage();
        let mut store = folder.open(&storage).await;
        append(&mut store, 1..=5).await;
        store.save_vote(&Vote::new(2, 1)).await.unwrap();
        store.save_committed(Some(log_id(1, 1, 5))).await.unwrap();
        storage
            .db()
            .open_tree("sm")
            .unwrap()
            .insert("applied", "5")
            .unwrap();
        drop(store);
        std::fs::remove_dir_all(folder.wal()).unwrap();
        let mut store = folder.open(&storage).await;
        // Had the vote stayed, this node would vote and count as the member that
        // acknowledged entries it no longer holds.
        assert_eq!(store.read_vote().await.unwrap(), None);
        assert_eq!(store.read_committed().await.unwrap(), None);
        assert_eq!(last(&mut store).await, (None, None));
        assert!(storage.db().open_tree("sm").unwrap().is_empty());
        // ... and so the identity check sees a folder whose Raft state is gone.
        assert!(!crate::raft::identity::holds_raft_state(storage.db()).unwrap());
    }

    #[tokio::test]
    async fn a_log_left_by_a_lost_database_is_not_taken_for_this_ones() {
        let folder = Folder::new();
        {
            let storage = folder.storage();
            let mut store = folder.open(&storage).await;
            append(&mut store, 1..=5).await;
        }
        std::fs::remove_dir_all(folder.dir.path().join("sled")).unwrap();
        let storage = folder.storage();
        let mut store = folder.open(&storage).await;
        assert_eq!(last(&mut store).await, (None, None));
        assert_eq!(indexes(&mut store, 0..100).await, Vec::<u64>::new());
    }
}
