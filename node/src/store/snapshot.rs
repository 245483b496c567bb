//! State machine snapshots: what one holds, how it is built beside later applies, where it
//! lives (a file in the node's snapshot folder, [`file`]) and how the current one is named.
//!
//! # Streamed, never whole in memory
//!
//! A snapshot is a file of one JSON value per line ([`format`]): the share state, the rows,
//! then every receipt and remembered request id, each streamed from a sled scan. A build
//! writes it through a small buffer; a leader sends it to a follower in chunks read from the
//! file (openraft's chunked `install_snapshot`, bounded by `raft.snapshot_chunk_bytes`); the
//! follower writes the chunks to a file and installs it by reading it back line by line,
//! writing receipts to sled in batches. Only the rows, which the catalogue holds in memory
//! anyway, are ever collected.
//!
//! # One current snapshot, never an older one
//!
//! A snapshot file is written under a temporary name, fsynced, renamed to its final name
//! and the folder fsynced; only then is it named current, by the sled value `s/file` (its
//! meta and file name), so a reader gets a consistent meta and file in one read, and a
//! crash before that leaves the previous snapshot current (the orphan file is removed at
//! the next start). A build runs concurrently with applies and with snapshot installs;
//! when it finishes it names its file current only if the current one is older (a
//! compare-and-swap loop), so a build that finishes after a newer snapshot was installed
//! never replaces it, and its file is removed. openraft ignores a built snapshot older than
//! the one it knows, so the builder returns it anyway. A replaced file is removed only once
//! the new name is durable (a reader streaming it keeps its open handle).
//!
//! # A consistent cut
//!
//! The builder gets what the state machine holds in memory at the cut (rows, share state,
//! the cut's log id and membership). Request records and receipt-log leaves are read from
//! sled at build time and filtered by index: both are append-only below the cut, so the
//! filter yields exactly the cut's set. A concurrent install can change them, but the
//! result is then older than the installed snapshot and is never named current.
//!
//! Receipts are read from sled too, but they are not append-only: a retention prune applied
//! after the cut can delete receipts of the cut before the build's scan reaches them, and a
//! follower installing such a snapshot and then applying the same prune would drop a
//! different set. So every build registers a [`Hold`] when it is made (under the state
//! machine's `&mut`, so no apply runs between the cut and the registration), and a prune
//! puts every receipt it deletes that a registered build's cut holds into that build's hold
//! *before* its batch is written. The build merges the hold into its scan, in id order:
//! before writing the receipt the scan yields at id `K` (and once more at the end), it
//! writes the held receipts with ids between the previous key and `K`. Why each receipt of
//! the cut is written exactly once: the scan yields ids in increasing order and yields
//! every key that stays present; if it yields `R`, the hold's copy of `R` is never written
//! (held ids are only written strictly between two scanned keys); if it skips `R`, then `R`
//! was deleted before the scan read the next key, so it was held before that read, and the
//! hold is consulted after it. The hold is in memory and only holds what prunes delete
//! during a build (at most `limit` receipts per prune entry).

// openraft's storage error is large; see `store`.
#![allow(clippy::result_large_err)]

pub mod file;
pub(crate) mod format;
pub mod packed;

use std::sync::Arc;

use openraft::{ErrorSubject, ErrorVerb};
use serde::{Deserialize, Serialize};

use self::file::{Folder, SnapshotFile};
use self::format::{Header, Writer, FORMAT};
use self::packed::Packer;
use super::Snapshot;
use super::{io_error, requests};
use crate::catalogue::row::Row;
use crate::model::receipt::Receipt;
use crate::model::share::ShareSecret;
use crate::raft::StorageError;

pub(crate) type Membership = crate::raft::StoredMembership;
pub(crate) type Meta = crate::raft::SnapshotMeta;

/// The current snapshot: its meta and the name of its file ([`Current`]).
pub(crate) const CURRENT: &[u8] = b"s/file";
/// The layout before snapshot files: meta and data framed into one value. Read once, at
/// open, to migrate.
const FRAMED: &[u8] = b"s/current";
/// The two keys of the layout before that, read once to migrate.
const OLD_META: &[u8] = b"s/meta";
const OLD_DATA: &[u8] = b"s/data";

/// A revoked share token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Revocation {
    pub id: String,
    pub at_ms: u64,
}

/// What a snapshot of the layouts before snapshot files holds: the whole applied state as
/// one JSON value. Read only to migrate such a snapshot into a file.
#[derive(Serialize, Deserialize)]
pub(crate) struct OldBody {
    pub rows: Vec<Row>,
    pub receipts: Vec<Receipt>,
    #[serde(default)]
    pub share_secret: Option<ShareSecret>,
    #[serde(default)]
    pub revoked: Vec<Revocation>,
    #[serde(default)]
    pub share_previous: Option<ShareSecret>,
    #[serde(default)]
    pub requests: Vec<requests::Record>,
}

/// The share state a snapshot carries.
#[derive(Debug, Clone, Default)]
pub(crate) struct ShareState {
    pub secret: Option<ShareSecret>,
    pub previous: Option<ShareSecret>,
    pub revoked: Vec<Revocation>,
}

/// The current snapshot as `s/file` names it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Current {
    pub meta: Meta,
    /// Its file in the snapshot folder.
    pub file: String,
}

/// A snapshot failure whose source cannot be carried as is.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct SnapshotError(pub String);

pub(crate) fn fail(verb: ErrorVerb) -> impl Fn(&dyn std::fmt::Display) -> StorageError {
    move |e| {
        io_error(
            ErrorSubject::Snapshot(None),
            verb,
            &SnapshotError(e.to_string()),
        )
    }
}

/// The current snapshot's meta and file name, if there is one.
pub(crate) fn current_name(tree: &sled::Tree) -> Result<Option<Current>, StorageError> {
    let fail = fail(ErrorVerb::Read);
    match tree.get(CURRENT).map_err(|e| fail(&e))? {
        Some(bytes) => Ok(Some(serde_json::from_slice(&bytes).map_err(|e| fail(&e))?)),
        None => Ok(None),
    }
}

/// The current snapshot, its file opened for reading.
pub(crate) async fn current(
    tree: &sled::Tree,
    folder: &Folder,
) -> Result<Option<Snapshot>, StorageError> {
    loop {
        let Some(named) = current_name(tree)? else {
            return Ok(None);
        };
        match SnapshotFile::open(&folder.path(&named.file)).await {
            Ok(file) => {
                return Ok(Some(Snapshot {
                    meta: named.meta,
                    snapshot: file,
                }))
            }
            // A newer snapshot replaced it (and removed its file) since we read the name.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let now = current_name(tree)?;
                if now.is_some_and(|n| n.file != named.file) {
                    continue;
                }
                return Err(fail(ErrorVerb::Read)(&e));
            }
            Err(e) => return Err(fail(ErrorVerb::Read)(&e)),
        }
    }
}

/// Moves a snapshot stored in sled by an older version (one framed value, or the two keys
/// before that) into a snapshot file, at open. The file is complete and durable before the
/// sled batch that names it and drops the old keys, so a crash in between leaves the old
/// value to migrate again (and an orphan file to remove).
pub(crate) fn migrate(tree: &sled::Tree, folder: &Folder) -> Result<(), StorageError> {
    let read_fail = fail(ErrorVerb::Read);
    let read = |key| tree.get(key).map_err(|e| read_fail(&e));
    let (meta, data): (Meta, sled::IVec) = match (read(FRAMED)?, read(OLD_META)?, read(OLD_DATA)?) {
        (Some(framed), _, _) => {
            let (meta, data) = unframe(&framed)?;
            (meta, data.into())
        }
        (None, Some(meta), Some(data)) => (
            serde_json::from_slice(&meta).map_err(|e| read_fail(&e))?,
            data,
        ),
        _ => return Ok(()),
    };
    let name = write_old(folder, meta.last_log_id.map_or(0, |l| l.index), &data)?;
    let current = Current { meta, file: name };
    let mut batch = sled::Batch::default();
    batch.insert(CURRENT, encode(&current)?);
    batch.remove(FRAMED);
    batch.remove(OLD_META);
    batch.remove(OLD_DATA);
    tree.apply_batch(batch)
        .map_err(|e| fail(ErrorVerb::Write)(&e))?;
    tracing::info!(file = %current.file, "moved the stored snapshot into a snapshot file");
    Ok(())
}

/// Writes the one-JSON-value body of a snapshot made by an older version as a snapshot
/// file, returning its name. Such a body was held in memory whole by its maker already.
fn write_old(folder: &Folder, index: u64, data: &[u8]) -> Result<String, StorageError> {
    let body: OldBody = serde_json::from_slice(data).map_err(|e| fail(ErrorVerb::Read)(&e))?;
    let header = Header {
        format: FORMAT,
        share_secret: body.share_secret,
        share_previous: body.share_previous,
        revoked: body.revoked,
        // Rebuilt from the receipts when installed.
        log: None,
        // Older than alarms.
        alarms: Vec::new(),
    };
    write_file(folder, index, |out| {
        let write = || -> Result<_, format::FormatError> {
            let mut writer = Writer::new(out, &header)?;
            for row in &body.rows {
                writer.row(row)?;
            }
            // The file's receipts are in id order, as a build writes them.
            let mut receipts: Vec<&Receipt> = body.receipts.iter().collect();
            receipts.sort_by(|a, b| a.id.cmp(&b.id));
            for receipt in receipts {
                writer.receipt(receipt)?;
            }
            for record in &body.requests {
                writer.request(record)?;
            }
            writer.finish()
        };
        write().map_err(|e| fail(ErrorVerb::Write)(&e))
    })
}

/// A snapshot file `name` received from a leader of an older version (one JSON value, not
/// lines) is rewritten in this version's format; returns the name of the file to install.
pub(crate) fn upgrade_received(
    folder: &Folder,
    name: String,
    index: u64,
) -> Result<String, StorageError> {
    use std::io::Read;
    let fail = fail(ErrorVerb::Read);
    let path = folder.path(&name);
    let mut start = Vec::new();
    let file = std::fs::File::open(&path).map_err(|e| fail(&e))?;
    file.take(9).read_to_end(&mut start).map_err(|e| fail(&e))?;
    if start == b"{\"header\"" || packed::is_packed(&start) {
        return Ok(name);
    }
    let data = std::fs::read(&path).map_err(|e| fail(&e))?;
    let upgraded = write_old(folder, index, &data)?;
    folder.remove(&name);
    tracing::info!(file = %upgraded, "rewrote a snapshot from an older version in this format");
    Ok(upgraded)
}

/// Splits the framed value of the one-value layout: the meta's length (8 bytes,
/// big-endian), the meta as JSON, then the data.
fn unframe(bytes: &[u8]) -> Result<(Meta, &[u8]), StorageError> {
    let bad = || fail(ErrorVerb::Read)(&"the stored snapshot is cut short");
    let (len, rest) = bytes.split_at_checked(8).ok_or_else(bad)?;
    let len = u64::from_be_bytes(len.try_into().map_err(|_| bad())?);
    let len = usize::try_from(len).map_err(|_| bad())?;
    let (meta, data) = rest.split_at_checked(len).ok_or_else(bad)?;
    let meta = serde_json::from_slice(meta).map_err(|e| fail(ErrorVerb::Read)(&e))?;
    Ok((meta, data))
}

fn encode(value: &impl Serialize) -> Result<Vec<u8>, StorageError> {
    serde_json::to_vec(value).map_err(|e| fail(ErrorVerb::Write)(&e))
}

/// Names `current` the current snapshot unless the named one is at least as new. Returns
/// `None` if it was not named, else the file it replaced (if any).
pub(crate) fn name_unless_older(
    tree: &sled::Tree,
    current: &Current,
) -> Result<Option<Option<String>>, StorageError> {
    let encoded = encode(current)?;
    loop {
        let stored = tree.get(CURRENT).map_err(|e| fail(ErrorVerb::Read)(&e))?;
        let mut replaced = None;
        if let Some(bytes) = &stored {
            let named: Current =
                serde_json::from_slice(bytes).map_err(|e| fail(ErrorVerb::Read)(&e))?;
            if named.meta.last_log_id >= current.meta.last_log_id {
                return Ok(None);
            }
            replaced = Some(named.file);
        }
        // Swap only if nobody named another snapshot since we looked.
        let swapped = tree
            .compare_and_swap(CURRENT, stored, Some(encoded.as_slice()))
            .map_err(|e| fail(ErrorVerb::Write)(&e))?;
        if swapped.is_ok() {
            return Ok(Some(replaced));
        }
    }
}

/// Writes a snapshot file for a snapshot at `index` through `body` (compressed,
/// [`packed`]), makes it complete and durable under its final name, and returns that name.
pub(crate) fn write_file(
    folder: &Folder,
    index: u64,
    body: impl FnOnce(Packer) -> Result<Packer, StorageError>,
) -> Result<String, StorageError> {
    let fail = fail(ErrorVerb::Write);
    let temp = folder.build_file(index).map_err(|e| fail(&e))?;
    let out = body(Packer::new(temp.file).map_err(|e| fail(&e))?)?;
    let file = out.finish().map_err(|e| fail(&e))?;
    file.sync_all().map_err(|e| fail(&e))?;
    #[cfg(test)]
    if folder
        .crash_before_rename
        .swap(false, std::sync::atomic::Ordering::Relaxed)
    {
        return Err(fail(&"test: crashed before the rename"));
    }
    folder
        .publish(&temp.path, &temp.name)
        .map_err(|e| fail(&e))?;
    Ok(temp.name)
}

/// The builds under way, each with its [`Hold`]; shared by the state machine (whose prunes
/// fill them) and its builders.
#[derive(Clone, Default)]
pub(crate) struct Holds {
    builds: Arc<std::sync::Mutex<Vec<Arc<Hold>>>>,
}

/// Receipts of one build's cut that prunes deleted after it: id -> stored bytes.
#[derive(Debug, Default)]
pub(crate) struct Hold {
    /// The build's cut: only receipts at or below it belong to its snapshot.
    cut: u64,
    receipts: std::sync::Mutex<std::collections::BTreeMap<Vec<u8>, Vec<u8>>>,
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Holds {
    /// Registers a build cut at `cut`; it is unregistered when the returned value drops.
    pub(crate) fn register(&self, cut: u64) -> Registered {
        let hold = Arc::new(Hold {
            cut,
            ..Hold::default()
        });
        lock(&self.builds).push(hold.clone());
        Registered {
            holds: self.clone(),
            hold,
        }
    }

    /// A prune is about to delete receipt `id` (at `index`, stored as `bytes`): every build
    /// whose cut holds it keeps a copy.
    pub(crate) fn hold(&self, id: &str, index: u64, bytes: &[u8]) {
        for hold in lock(&self.builds).iter().filter(|h| index <= h.cut) {
            lock(&hold.receipts).insert(id.as_bytes().to_vec(), bytes.to_vec());
        }
    }
}

impl Hold {
    /// Takes the held receipts with ids strictly between `after` and `before` (unbounded
    /// when `None`), in id order, and forgets every held id up to `before`: the scan has
    /// passed them.
    pub(crate) fn take_between(&self, after: Option<&[u8]>, before: Option<&[u8]>) -> Vec<Vec<u8>> {
        let mut held = lock(&self.receipts);
        let rest = match before {
            Some(before) => {
                let mut rest = held.split_off(before);
                // `before` itself is the receipt the scan just read: written from there.
                rest.remove(before);
                rest
            }
            None => std::collections::BTreeMap::new(),
        };
        let passed = std::mem::replace(&mut *held, rest);
        passed
            .into_iter()
            .filter(|(id, _)| after.is_none_or(|after| id.as_slice() > after))
            .map(|(_, bytes)| bytes)
            .collect()
    }
}

/// A build's registration in [`Holds`]; dropping it unregisters the build.
pub(crate) struct Registered {
    holds: Holds,
    pub(crate) hold: Arc<Hold>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.holds.builds).retain(|h| !Arc::ptr_eq(h, &self.hold));
    }
}
