//! Installing a snapshot file: the applied state is replaced by the file's, read back line
//! by line and written to sled in batches, restartably.
//!
//! 1. The received file is fsynced, renamed into the snapshot folder and named current in
//!    the same synced sled batch as the `m/installing` marker. From here a restart finishes
//!    the install ([`resume`], at open) before anything reads the state.
//! 2. Request records are cleared, then the file is streamed: receipts are merged in id
//!    order with the stored ones (a stored receipt the snapshot lacks was pruned in its
//!    history and is dropped; one it has is rewritten as is, since an id names one receipt
//!    across the log), request records written, in batches of [`BATCH`] lines. Rows and the
//!    share state are kept for the end (the catalogue holds rows in memory anyway).
//! 3. One last batch replaces the rows and the share state, sets the applied log id and
//!    membership, and removes the marker; it is synced, then published.
//!
//! Receipts shown before the install stay readable throughout, and the new ones are shown
//! only once the applied index is published. Re-running step 2 over a half-done one yields
//! the same state, which is what makes [`resume`] correct.

// openraft's storage error is large; see `store`.
#![allow(clippy::result_large_err)]

use std::convert::Infallible;
use std::io::BufReader;

use sled::transaction::{ConflictableTransactionResult, TransactionError};

use openraft::{ErrorSubject, ErrorVerb};

use super::*;
use crate::store::snapshot::format::{read_through, Header, Line, Reader};
use crate::store::snapshot::Current;

/// Lines of a snapshot file written to sled per batch. sled holds memory in proportion to a
/// batch's keys, and the receipt log's leaves bring four or five small keys each: in
/// `tests/snapshot_memory.rs` (20,000 receipts and their leaves, a 32 MB file) the install's
/// resident peak was 592 MB with batches of 10,000 lines, 281 MB with 1,000, 137 MB with 250
/// and 65 MB with 100.
const BATCH: usize = 100;

impl StateMachine {
    /// Replaces the applied state by the snapshot in `data` (see the module documentation).
    pub(super) async fn install(
        &mut self,
        meta: &Meta,
        mut data: SnapshotFile,
    ) -> Result<(), StorageError> {
        let subject = ErrorSubject::Snapshot(Some(meta.signature()));
        let write_err = |e: &dyn std::fmt::Display| {
            io_error(
                subject.clone(),
                ErrorVerb::Write,
                &snapshot::SnapshotError(e.to_string()),
            )
        };
        data.sync().await.map_err(|e| write_err(&e))?;
        let from = data.path().to_owned();
        drop(data);
        let index = meta.last_log_id.map_or(0, |l| l.index);
        let folder = self.snapshots.clone();
        let file = tokio::task::spawn_blocking(move || {
            let name = folder
                .adopt(&from, index)
                .map_err(|e| snapshot::fail(ErrorVerb::Write)(&e))?;
            // A leader of an older version sends its one-value format (a rolling upgrade).
            snapshot::upgrade_received(&folder, name, index)
        })
        .await
        .map_err(|e| write_err(&e))??;
        // Read through before anything is replaced: a damaged file named current with the
        // marker would fail the install again at every start, and the node never start.
        let (folder, name) = (self.snapshots.clone(), file.clone());
        let checked = tokio::task::spawn_blocking(move || -> Result<(), String> {
            let file = std::fs::File::open(folder.path(&name)).map_err(|e| e.to_string())?;
            read_through(BufReader::new(file)).map_err(|e| e.to_string())?;
            Ok(())
        })
        .await
        .map_err(|e| write_err(&e))?;
        if let Err(reason) = checked {
            self.snapshots.remove(&file);
            return Err(write_err(&format!(
                "the snapshot received for index {index} is damaged ({reason}); nothing was \
                 replaced, and the leader will send it again"
            )));
        }

        // Named current with the marker, durably, before the state is touched. One
        // transaction, so the file it replaces is exactly the one named before (a build
        // that named its own in between has that one removed here, not left behind).
        let current = Current {
            meta: meta.clone(),
            file,
        };
        let encoded = encode(&current)?;
        let replaced = self
            .tree
            .transaction(|tx| -> ConflictableTransactionResult<_, Infallible> {
                let replaced = tx.get(snapshot::CURRENT)?;
                tx.insert(snapshot::CURRENT, encoded.as_slice())?;
                tx.insert(INSTALLING, &[] as &[u8])?;
                Ok(replaced)
            })
            .map_err(|e: TransactionError<Infallible>| write_err(&e))?;
        let replaced: Option<Current> = match replaced {
            Some(bytes) => Some(serde_json::from_slice(&bytes).map_err(|e| write_err(&e))?),
            None => None,
        };
        self.sync(subject.clone()).await?;

        let (tree, folder, named) = (self.tree.clone(), self.snapshots.clone(), current.clone());
        let (rows, asked) = tokio::task::spawn_blocking(move || {
            Ok::<_, StorageError>((load(&tree, &folder, &named)?, super::asked_receipts(&tree)?))
        })
        .await
        .map_err(|e| write_err(&e))??;
        let size = self.log().size().map_err(|e| write_err(&e))?;
        self.sync(subject).await?;

        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        {
            let mut catalogue = self.catalogue.write();
            catalogue.replace_all(rows);
            for (key, words) in &asked {
                catalogue.learn(key, words, 1);
            }
            self.catalogue.publish_index(index);
        }
        self.log_published
            .store(size, std::sync::atomic::Ordering::Release);
        self.applied_tx.send_replace(index);
        if let Some(replaced) = replaced.filter(|r| r.file != current.file) {
            self.snapshots.remove(&replaced.file);
        }
        Ok(())
    }
}

/// Finishes an install a crash interrupted: loads the current snapshot again (at open).
pub(super) fn resume(tree: &sled::Tree, folder: &Folder) -> Result<(), StorageError> {
    let current = snapshot::current_name(tree)?.ok_or_else(|| {
        read_err(&snapshot::SnapshotError(
            "an install is marked under way but no snapshot is named current".into(),
        ))
    })?;
    tracing::info!(file = %current.file, "finishing a snapshot install a restart interrupted");
    load(tree, folder, &current).map(|_| ())
}

/// Steps 2 and 3: replaces the state in `tree` by the snapshot `current`'s, returning its
/// rows.
fn load(tree: &sled::Tree, folder: &Folder, current: &Current) -> Result<Vec<Row>, StorageError> {
    let subject = ErrorSubject::Snapshot(Some(current.meta.signature()));
    let read_fail = |e: &dyn std::fmt::Display| {
        io_error(
            subject.clone(),
            ErrorVerb::Read,
            &snapshot::SnapshotError(e.to_string()),
        )
    };
    let write = |batch: sled::Batch| {
        tree.apply_batch(batch)
            .map_err(|e| io_error(subject.clone(), ErrorVerb::Write, &e))
    };
    let file = std::fs::File::open(folder.path(&current.file)).map_err(|e| read_fail(&e))?;
    let (header, mut reader) = Reader::new(BufReader::new(file)).map_err(|e| read_fail(&e))?;

    let mut cleared = sled::Batch::default();
    requests::clear(tree, &mut cleared)?;
    write(cleared)?;
    let mut log = transparency::LogLoader::clear(tree)?;

    let mut stored = Stored::new(tree);
    let mut rows = Vec::new();
    let (mut batch, mut lines) = (sled::Batch::default(), 0);
    // The reader hands out receipts in id order, as the merge with the stored ones needs.
    while let Some(line) = reader.next().map_err(|e| read_fail(&e))? {
        match line {
            Line::Row(row) => rows.push(row),
            Line::Receipt(receipt) => {
                stored.merge(&mut batch, &receipt)?;
                stage_receipt(&mut batch, &receipt)?;
            }
            Line::Request(record) => requests::remember(&mut batch, &record)?,
            Line::Leaf(leaf) => {
                let hash = hex::decode(&leaf.hash)
                    .ok()
                    .and_then(|h| <[u8; 32]>::try_from(h).ok())
                    .ok_or_else(|| read_fail(&format!("leaf {} has no hash", leaf.index)))?;
                log.leaf(&mut batch, leaf.index, &leaf.id, hash)
                    .map_err(|e| read_fail(&e))?;
            }
            // The reader hands out neither.
            Line::Header(_) | Line::End(_) => {}
        }
        lines += 1;
        if lines % BATCH == 0 {
            write(std::mem::take(&mut batch))?;
            #[cfg(test)]
            if folder
                .crash_mid_install
                .swap(false, std::sync::atomic::Ordering::Relaxed)
            {
                return Err(read_fail(&"test: crashed in the middle of an install"));
            }
        }
    }
    stored.drop_rest(&mut batch)?;
    if let Some(header) = &header.log {
        log.finish(&mut batch, header).map_err(|e| read_fail(&e))?;
    }
    write(batch)?;
    write(last_batch(tree, &header, &rows, current)?)?;
    if header.log.is_none() {
        // A format 2 snapshot (an older leader's): the log is rebuilt from its receipts.
        transparency::rebuild(tree)?;
    }
    Ok(rows)
}

/// Step 3's batch: rows and share state replaced, the applied state set, the marker gone.
fn last_batch(
    tree: &sled::Tree,
    header: &Header,
    rows: &[Row],
    current: &Current,
) -> Result<sled::Batch, StorageError> {
    let mut batch = sled::Batch::default();
    batch.remove(SHARE_SECRET);
    batch.remove(SHARE_PREVIOUS);
    for prefix in [ROW, SHARE_REVOKED, ALARM] {
        for item in tree.scan_prefix(prefix) {
            let (key, _) = item.map_err(|e| read_err(&e))?;
            batch.remove(key);
        }
    }
    for row in rows {
        batch.insert(row_key(&row.key), encode(row)?);
    }
    if let Some(secret) = &header.share_secret {
        batch.insert(SHARE_SECRET, encode(secret)?);
    }
    if let Some(previous) = &header.share_previous {
        batch.insert(SHARE_PREVIOUS, encode(previous)?);
    }
    for revocation in &header.revoked {
        batch.insert(revoked_key(&revocation.id), encode(revocation)?);
    }
    for alarm in &header.alarms {
        batch.insert(alarm_key(alarm.node), encode(alarm)?);
    }
    batch.insert(APPLIED, encode(&current.meta.last_log_id)?);
    batch.insert(MEMBERSHIP, encode(&current.meta.last_membership)?);
    batch.remove(INSTALLING);
    Ok(batch)
}

/// The stored receipts, walked in id order beside the snapshot's.
struct Stored {
    scan: std::iter::Peekable<sled::Iter>,
}

impl Stored {
    fn new(tree: &sled::Tree) -> Self {
        Self {
            scan: tree.scan_prefix(RECEIPT).peekable(),
        }
    }

    /// Stages the removal of the stored receipts up to the snapshot's `next` that the
    /// snapshot does not hold (and of a stored receipt under `next`'s id that differs from
    /// it, which the snapshot's then replaces).
    fn merge(&mut self, batch: &mut sled::Batch, next: &Receipt) -> Result<(), StorageError> {
        let next_key = receipt_key(&next.id);
        while let Some(item) = self.scan.peek() {
            let key = match item {
                Ok((key, _)) => key.clone(),
                Err(e) => return Err(read_err(e)),
            };
            if *key > *next_key {
                return Ok(());
            }
            let Some(Ok((_, bytes))) = self.scan.next() else {
                continue;
            };
            let stored: Receipt = serde_json::from_slice(&bytes).map_err(|e| read_err(&e))?;
            if *key < *next_key || stored != *next {
                drop_receipt(batch, &stored);
            }
        }
        Ok(())
    }

    /// Stages the removal of the stored receipts after the snapshot's last.
    fn drop_rest(&mut self, batch: &mut sled::Batch) -> Result<(), StorageError> {
        for item in self.scan.by_ref() {
            let (_, bytes) = item.map_err(|e| read_err(&e))?;
            let stored: Receipt = serde_json::from_slice(&bytes).map_err(|e| read_err(&e))?;
            drop_receipt(batch, &stored);
        }
        Ok(())
    }
}
