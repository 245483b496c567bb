//! Installing a snapshot file: the applied state is replaced by the file's, read back line
//! by line and written to sled in batches, restartably.
//!
//! 1. The received file is fsynced, renamed into the snapshot folder and named current in
//!    the same synced sled batch as the `m/installing` marker. From here a restart finishes
//!    the install ([`resume`], at open) before anything reads the state.
//! 2. Request records are cleared, then the file is streamed: rows written, receipts
//!    merged in id order with the stored ones (a stored receipt the snapshot lacks was
//!    pruned in its history and is dropped; one it has stays where it is, since an id names
//!    one receipt across the log; a new one's body goes to the segment files), request
//!    records written, in batches of [`BATCH`] lines; then stored rows the snapshot lacks
//!    are removed, in batches too. Rows on disk are read only at open, which finishes the
//!    install first, so writing them as they come shows no reader a mix; and no batch holds
//!    sled's writers for long (one batch of a million rows held them, and with them the
//!    node's Raft log, for most of a minute).
//! 3. The segment files are synced; one last batch replaces the share state, sets the
//!    applied log id and membership, and removes the marker; it is synced. The catalogue
//!    is then built from the rows off the async threads, swapped in and published (a node
//!    that held rows holds two catalogues for that while). A start that finds the marker
//!    with bodies past the segments' end (a power loss during step 2) forgets those
//!    receipts' values, and the resumed install writes them again from the snapshot, which
//!    holds them: bodies written before the install were synced in step 1.
//!
//! Receipts shown before the install stay readable throughout, and the new ones are shown
//! only once the applied index is published. Re-running step 2 over a half-done one yields
//! the same state, which is what makes [`resume`] correct.

// openraft's storage error is large; see `store`.
#![allow(clippy::result_large_err)]

use std::convert::Infallible;

use sled::transaction::{ConflictableTransactionResult, TransactionError};

use openraft::{ErrorSubject, ErrorVerb};

use super::*;
use crate::store::snapshot::format::{read_through, Header, Line, Reader};
use crate::store::snapshot::packed;
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
        let started = std::time::Instant::now();
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
            read_through(packed::lines(file).map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
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

        let checked_s = started.elapsed().as_secs_f64();

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
        let segments = self.storage.segments().clone();
        let tree_file = self.storage.tree_file().clone();
        // The new catalogue is built off the async threads and without the catalogue's
        // lock, which asks keep taking meanwhile (from the rows as they were): a million
        // rows take tens of seconds to index, and a runtime or a lock held that long would
        // leave the node answering nothing, its leader's keepalive pings included.
        let fresh = self.catalogue.read().empty_like();
        let (fresh, row_count, stored_s) = tokio::task::spawn_blocking(move || {
            let rows = load(&tree, &segments, &tree_file, &folder, &named)?;
            let asked = super::asked_receipts(&tree, &segments, &[])?;
            let stored_s = started.elapsed().as_secs_f64();
            let row_count = rows.len();
            let mut fresh = fresh;
            fresh.fill(rows);
            for (key, words) in &asked {
                fresh.learn(key, words, 1);
            }
            Ok::<_, StorageError>((fresh, row_count, stored_s))
        })
        .await
        .map_err(|e| write_err(&e))??;
        let size = self.log().size().map_err(|e| write_err(&e))?;
        self.sync(subject).await?;

        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        {
            let mut catalogue = self.catalogue.write();
            catalogue.adopt(fresh);
            self.catalogue.publish_index(index);
        }
        self.log_published
            .store(size, std::sync::atomic::Ordering::Release);
        self.applied_tx.send_replace(index);
        if let Some(replaced) = replaced.filter(|r| r.file != current.file) {
            self.snapshots.remove(&replaced.file);
        }
        tracing::info!(
            index,
            rows = row_count,
            checked_s,
            stored_s,
            total_s = started.elapsed().as_secs_f64(),
            "installed a snapshot"
        );
        Ok(())
    }
}

/// Finishes an install a crash interrupted: loads the current snapshot again (at open).
pub(super) fn resume(
    tree: &sled::Tree,
    segments: &Segments,
    tree_file: &TreeFile,
    folder: &Folder,
) -> Result<(), StorageError> {
    let current = snapshot::current_name(tree)?.ok_or_else(|| {
        read_err(&snapshot::SnapshotError(
            "an install is marked under way but no snapshot is named current".into(),
        ))
    })?;
    tracing::info!(file = %current.file, "finishing a snapshot install a restart interrupted");
    load(tree, segments, tree_file, folder, &current).map(|_| ())
}

/// A batch of the install with the receipts whose bodies it writes and the places it
/// releases.
struct Batch<'a> {
    tree: &'a sled::Tree,
    segments: &'a Segments,
    subject: ErrorSubject<TypeConfig>,
    batch: sled::Batch,
    receipts: Vec<Receipt>,
    released: Vec<Place>,
}

impl Batch<'_> {
    /// Writes the bodies, then the batch, then releases what it dropped.
    fn write(&mut self) -> Result<(), StorageError> {
        // Without their leaves: the install writes `x/n/` for every leaf of the snapshot.
        let receipts: Vec<(&Receipt, Option<u64>)> =
            self.receipts.iter().map(|r| (r, None)).collect();
        store_receipts(self.segments, &mut self.batch, &receipts)?;
        self.tree
            .apply_batch(std::mem::take(&mut self.batch))
            .map_err(|e| io_error(self.subject.clone(), ErrorVerb::Write, &e))?;
        self.receipts.clear();
        self.segments.release(&std::mem::take(&mut self.released));
        Ok(())
    }
}

/// Steps 2 and 3: replaces the state in `tree` by the snapshot `current`'s, returning its
/// rows.
fn load(
    tree: &sled::Tree,
    segments: &Segments,
    tree_file: &TreeFile,
    folder: &Folder,
    current: &Current,
) -> Result<Vec<Row>, StorageError> {
    let subject = ErrorSubject::Snapshot(Some(current.meta.signature()));
    let read_fail = |e: &dyn std::fmt::Display| {
        io_error(
            subject.clone(),
            ErrorVerb::Read,
            &snapshot::SnapshotError(e.to_string()),
        )
    };
    let file = std::fs::File::open(folder.path(&current.file)).map_err(|e| read_fail(&e))?;
    let lines = packed::lines(file).map_err(|e| read_fail(&e))?;
    let (header, mut reader) = Reader::new(lines).map_err(|e| read_fail(&e))?;

    let mut out = Batch {
        tree,
        segments,
        subject: subject.clone(),
        batch: sled::Batch::default(),
        receipts: Vec::new(),
        released: Vec::new(),
    };
    requests::clear(tree, &mut out.batch)?;
    out.write()?;
    let mut log = transparency::LogLoader::clear(tree, tree_file)?;

    let mut stored = Kept::new(tree);
    let mut rows = Vec::new();
    let mut lines = 0;
    // The reader hands out receipts in id order, as the merge with the stored ones needs.
    while let Some(line) = reader.next().map_err(|e| read_fail(&e))? {
        match line {
            Line::Row(row) => {
                out.batch.insert(row_key(&row.key), encode(&row)?);
                rows.push(row);
            }
            Line::Receipt(receipt) => {
                if !stored.merge(&mut out, &receipt)? {
                    stage_receipt(&mut out.batch, &receipt);
                    out.receipts.push(receipt);
                }
            }
            Line::Request(record) => requests::remember(&mut out.batch, &record)?,
            Line::Leaf(leaf) => {
                let hash = hex::decode(&leaf.hash)
                    .ok()
                    .and_then(|h| <[u8; 32]>::try_from(h).ok())
                    .ok_or_else(|| read_fail(&format!("leaf {} has no hash", leaf.index)))?;
                log.leaf(&mut out.batch, leaf.index, &leaf.id, hash)
                    .map_err(|e| read_fail(&e))?;
            }
            // The reader hands out neither.
            Line::Header(_) | Line::End(_) => {}
        }
        lines += 1;
        if lines % BATCH == 0 {
            out.write()?;
            #[cfg(test)]
            if folder
                .crash_mid_install
                .swap(false, std::sync::atomic::Ordering::Relaxed)
            {
                return Err(read_fail(&"test: crashed in the middle of an install"));
            }
        }
    }
    stored.drop_rest(&mut out)?;
    drop_rows_not_in(&mut out, &rows)?;
    if let Some(header) = &header.log {
        log.finish(&mut out.batch, header)
            .map_err(|e| read_fail(&e))?;
    }
    out.write()?;
    // The receipts' bodies are durable before the batch that ends the install: once the
    // marker is gone a body that a power loss took could only be written again from the
    // log, which need not hold the entries a snapshot brought.
    segments
        .sync_files()
        .map_err(|e| io_error(subject.clone(), ErrorVerb::Write, &e))?;
    out.batch = last_batch(tree, &header, current)?;
    out.write()?;
    if header.log.is_none() {
        // A format 2 snapshot (an older leader's): the log is rebuilt from its receipts.
        transparency::rebuild(tree, segments, tree_file)?;
    }
    Ok(rows)
}

/// Removes, in batches, every stored row the snapshot's `rows` lack (the rows it has were
/// written as it was read).
fn drop_rows_not_in(out: &mut Batch<'_>, rows: &[Row]) -> Result<(), StorageError> {
    let keep: std::collections::HashSet<&str> = rows.iter().map(|r| r.key.as_str()).collect();
    let mut dropped = 0;
    for item in out.tree.scan_prefix(ROW) {
        let (key, _) = item.map_err(|e| read_err(&e))?;
        let row = std::str::from_utf8(&key[ROW.len()..]).unwrap_or_default();
        if !keep.contains(row) {
            out.batch.remove(key);
            dropped += 1;
            if dropped % BATCH == 0 {
                out.write()?;
            }
        }
    }
    Ok(())
}

/// Step 3's batch: the share state replaced, the applied state set, the marker gone.
fn last_batch(
    tree: &sled::Tree,
    header: &Header,
    current: &Current,
) -> Result<sled::Batch, StorageError> {
    let mut batch = sled::Batch::default();
    batch.remove(SHARE_SECRET);
    batch.remove(SHARE_PREVIOUS);
    for prefix in [SHARE_REVOKED, ALARM] {
        for item in tree.scan_prefix(prefix) {
            let (key, _) = item.map_err(|e| read_err(&e))?;
            batch.remove(key);
        }
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
struct Kept {
    scan: std::iter::Peekable<sled::Iter>,
}

impl Kept {
    fn new(tree: &sled::Tree) -> Self {
        Self {
            scan: tree.scan_prefix(RECEIPT).peekable(),
        }
    }

    /// Stages the removal of the stored receipts up to the snapshot's `next` that the
    /// snapshot does not hold (and of a stored receipt under `next`'s id that differs from
    /// it, which the snapshot's then replaces). Returns whether `next` is stored as it is,
    /// so it is kept and not written again.
    fn merge(&mut self, out: &mut Batch<'_>, next: &Receipt) -> Result<bool, StorageError> {
        let next_key = receipt_key(&next.id);
        while let Some(item) = self.scan.peek() {
            let key = match item {
                Ok((key, _)) => key.clone(),
                Err(e) => return Err(read_err(e)),
            };
            if *key > *next_key {
                return Ok(false);
            }
            let Some(Ok((_, value))) = self.scan.next() else {
                continue;
            };
            if *key == *next_key && same(&value, next)? {
                return Ok(true);
            }
            drop_value(out, &value)?;
        }
        Ok(false)
    }

    /// Stages the removal of the stored receipts after the snapshot's last.
    fn drop_rest(&mut self, out: &mut Batch<'_>) -> Result<(), StorageError> {
        for item in self.scan.by_ref() {
            let (_, value) = item.map_err(|e| read_err(&e))?;
            drop_value(out, &value)?;
        }
        Ok(())
    }
}

/// Whether the stored value `value` is the receipt `next`: by the length and checksum of
/// its body (and the index) when it is in a segment, without reading it.
fn same(value: &[u8], next: &Receipt) -> Result<bool, StorageError> {
    Ok(match Stored::decode(value) {
        Some(stored) => {
            let bytes = encode(next)?;
            stored.index == next.index
                && stored.place.len as usize == bytes.len()
                && stored.place.crc == crc32fast::hash(&bytes)
        }
        None => serde_json::from_slice::<Receipt>(value).map_err(|e| read_err(&e))? == *next,
    })
}

fn drop_value(out: &mut Batch<'_>, value: &[u8]) -> Result<(), StorageError> {
    if let Some(found) = found(out.segments, value)? {
        drop_receipt(
            &mut out.batch,
            &found.receipt,
            found.place,
            // The log is replaced by the snapshot's, every leaf under `x/n/`.
            None,
            &mut out.released,
        );
    }
    Ok(())
}
