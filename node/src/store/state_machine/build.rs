//! Building a snapshot of the state machine: what it holds at the cut, and its trees scanned
//! into a snapshot file (the file, its format and the cut's rules: [`crate::store::snapshot`]).

// openraft's storage error is large; see `store`.
#![allow(clippy::result_large_err)]

use std::io::Write;
use std::sync::Arc;

use openraft::storage::RaftSnapshotBuilder;
use openraft::ErrorVerb;

use crate::catalogue::row::Row;
use crate::model::receipt::Receipt;
use crate::raft::{LogId, StorageError, TypeConfig};
use crate::store::durable::Durable;
use crate::store::snapshot::file::{Folder, SnapshotFile};
use crate::store::snapshot::format::{self, Header, Writer, FORMAT};
use crate::store::snapshot::{
    fail, name_unless_older, write_file, Current, Hold, Membership, Meta, Registered, ShareState,
};
use crate::store::{requests, Snapshot};

/// Builds a snapshot of the state captured when it was made.
pub struct SnapshotBuilder {
    pub(crate) storage: Durable,
    pub(crate) tree: sled::Tree,
    pub(crate) folder: Folder,
    pub(crate) share: Result<ShareState, String>,
    /// The members' storage alarms at the cut.
    pub(crate) alarms: Result<Vec<crate::model::alarm::StorageAlarm>, String>,
    pub(crate) last_applied: Option<LogId>,
    pub(crate) membership: Membership,
    pub(crate) rows: Vec<Arc<Row>>,
    /// The receipt log's size, root and signatures at the cut.
    pub(crate) log: Result<crate::store::checkpoint::LogHeader, String>,
    /// The receipts of the cut pruned since it, registered for as long as this builder lives.
    pub(crate) hold: Registered,
}

/// Streams the state at `upto` into `out`: header, rows, then receipts (merged with those
/// `hold` kept from prunes since the cut) and request records straight from sled scans,
/// one at a time.
pub(crate) fn write_body<W: Write>(
    out: W,
    tree: &sled::Tree,
    segments: &crate::store::segments::Segments,
    header: &Header,
    rows: &[Arc<Row>],
    upto: u64,
    hold: &Hold,
) -> Result<W, StorageError> {
    let fail = fail(ErrorVerb::Write);
    let mut writer = Writer::new(out, header).map_err(|e| fail(&e))?;
    for row in rows {
        writer.row(row).map_err(|e| fail(&e))?;
    }
    let prefix = super::RECEIPT;
    let mut passed: Option<Vec<u8>> = None;
    for item in tree.scan_prefix(prefix) {
        let (key, value) = item.map_err(|e| fail(&e))?;
        let id = key.get(prefix.len()..).unwrap_or_default();
        let Some(bytes) = super::receipt_bytes(segments, &value).map_err(|e| fail(&e))? else {
            // Its body's file was removed after the scan read the value: pruned since, and
            // held if the cut has it; not yielded, so the hold is consulted for it below.
            continue;
        };
        // Consulted after the read that yielded `id` (see "A consistent cut").
        for held in hold.take_between(passed.as_deref(), Some(id)) {
            writer.receipt_json(&held).map_err(|e| fail(&e))?;
        }
        let receipt: Receipt = serde_json::from_slice(&bytes).map_err(|e| fail(&e))?;
        if receipt.index <= upto {
            // Stored as compact JSON: one line, copied as is.
            writer.receipt_json(&bytes).map_err(|e| fail(&e))?;
        }
        passed = Some(id.to_vec());
    }
    for held in hold.take_between(passed.as_deref(), None) {
        writer.receipt_json(&held).map_err(|e| fail(&e))?;
    }
    requests::each_in_window(tree, upto, |record| {
        writer.request(&record).map_err(|e| fail(&e))
    })?;
    if let Some(log) = &header.log {
        // Leaves are append-only: those below the cut's size are the cut's.
        super::transparency::each_leaf(tree, log.size, |index, id, hash| {
            let line = format::LeafLine {
                index,
                id: id.to_owned(),
                hash: hex::encode(hash),
            };
            writer.leaf(&line).map_err(|e| fail(&e))
        })?;
    }
    writer.finish().map_err(|e| fail(&e))
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = SnapshotFile;

    async fn build_snapshot(&mut self) -> Result<Snapshot, std::io::Error> {
        Ok(self.build().await?)
    }
}

impl SnapshotBuilder {
    /// Writes the snapshot's file and makes it the current snapshot, unless a newer one was
    /// installed meanwhile.
    async fn build(&mut self) -> Result<Snapshot, StorageError> {
        let upto = self.last_applied.map_or(0, |l| l.index);
        let share = self.share.clone().map_err(|e| fail(ErrorVerb::Write)(&e))?;
        let header = Header {
            format: FORMAT,
            share_secret: share.secret,
            share_previous: share.previous,
            revoked: share.revoked,
            log: Some(self.log.clone().map_err(|e| fail(ErrorVerb::Write)(&e))?),
            alarms: self
                .alarms
                .clone()
                .map_err(|e| fail(ErrorVerb::Write)(&e))?,
        };
        // Scans and file writes block: off the async workers.
        let (tree, folder, rows) = (self.tree.clone(), self.folder.clone(), self.rows.clone());
        let (hold, segments) = (self.hold.hold.clone(), self.storage.segments().clone());
        let name = tokio::task::spawn_blocking(move || {
            write_file(&folder, upto, |out| {
                write_body(out, &tree, &segments, &header, &rows, upto, &hold)
            })
        })
        .await
        .map_err(|e| fail(ErrorVerb::Write)(&e))??;
        let current = Current {
            meta: Meta {
                last_log_id: self.last_applied,
                last_membership: self.membership.clone(),
            },
            file: name,
        };
        // Opened before it can be removed: the handle reads it whatever happens next.
        let data = SnapshotFile::open(&self.folder.path(&current.file))
            .await
            .map_err(|e| fail(ErrorVerb::Read)(&e))?;
        match name_unless_older(&self.tree, &current)? {
            Some(replaced) => {
                self.storage
                    .sync()
                    .await
                    .map_err(|e| fail(ErrorVerb::Write)(&e))?;
                if let Some(replaced) = replaced {
                    self.folder.remove(&replaced);
                }
            }
            // A newer snapshot was installed while this one was built.
            None => self.folder.remove(&current.file),
        }
        // Request records that no state from this cut on remembers. Their removal needs no
        // sync: the applied state never goes back below this cut, and the window check
        // ignores a record that comes back after a crash.
        let collected = requests::collect(&self.tree, upto)?;
        tracing::debug!(upto, collected, file = %current.file, "snapshot built");
        Ok(Snapshot {
            meta: current.meta,
            snapshot: data,
        })
    }
}
