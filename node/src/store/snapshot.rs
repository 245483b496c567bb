//! State machine snapshots: what one holds, how it is built beside later applies, and how
//! the current one is stored as one value.
//!
//! # One atomic value, never an older one
//!
//! The current snapshot's meta and data are framed into one sled value (`s/current`), so a
//! reader gets a consistent pair in one read. A build runs concurrently with applies and
//! with snapshot installs; when it finishes it stores its snapshot only if the stored one
//! is older (a compare-and-swap loop), so a build that finishes after a newer snapshot was
//! installed never replaces it. openraft ignores a built snapshot older than the one it
//! knows, so the builder returns it anyway.
//!
//! # A consistent cut
//!
//! The builder gets what the state machine holds in memory at the cut (rows, share state,
//! the cut's log id and membership). Receipts and request records are read from sled at
//! build time and filtered by index: both are append-only below the cut, so the filter
//! yields exactly the cut's set. A concurrent install can change them, but the result is
//! then older than the installed snapshot and is never stored.

// openraft's storage error is large; see `store`.
#![allow(clippy::result_large_err)]

use std::io::Cursor;
use std::sync::Arc;

use openraft::storage::{RaftSnapshotBuilder, Snapshot, SnapshotMeta};
use openraft::{ErrorSubject, ErrorVerb, StoredMembership};
use serde::{Deserialize, Serialize};

use super::durable::Durable;
use super::{io_error, requests};
use crate::catalogue::row::Row;
use crate::model::receipt::Receipt;
use crate::model::share::ShareSecret;
use crate::model::time::now_ms;
use crate::raft::{LogId, NodeId, NodeInfo, StorageError, TypeConfig};

pub(crate) type Membership = StoredMembership<NodeId, NodeInfo>;
pub(crate) type Meta = SnapshotMeta<NodeId, NodeInfo>;

/// The current snapshot: meta and data framed into one value.
pub(crate) const CURRENT: &[u8] = b"s/current";
/// The two keys of the old layout, read once to migrate.
const OLD_META: &[u8] = b"s/meta";
const OLD_DATA: &[u8] = b"s/data";

/// A revoked share token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Revocation {
    pub id: String,
    pub at_ms: u64,
}

/// What a snapshot holds: the whole applied state.
#[derive(Serialize, Deserialize)]
pub(crate) struct SnapshotBody {
    pub rows: Vec<Row>,
    pub receipts: Vec<Receipt>,
    /// The share-token secret (absent in snapshots older than share tokens).
    #[serde(default)]
    pub share_secret: Option<ShareSecret>,
    /// Revoked share tokens.
    #[serde(default)]
    pub revoked: Vec<Revocation>,
    /// The share secret a planned rotation replaced (absent before rotations existed).
    #[serde(default)]
    pub share_previous: Option<ShareSecret>,
    /// The request ids the cut remembers (absent in snapshots older than request ids).
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

/// A snapshot failure whose source cannot be carried as is.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct SnapshotError(pub String);

fn fail(verb: ErrorVerb) -> impl Fn(&dyn std::fmt::Display) -> StorageError {
    move |e| {
        io_error(
            ErrorSubject::Snapshot(None),
            verb,
            &SnapshotError(e.to_string()),
        )
    }
}

/// `meta` and `data` as one stored value: the meta's length (8 bytes, big-endian), the meta
/// as JSON, then the data.
pub(crate) fn frame(meta: &Meta, data: &[u8]) -> Result<Vec<u8>, StorageError> {
    let meta = serde_json::to_vec(meta).map_err(|e| fail(ErrorVerb::Write)(&e))?;
    let mut out = Vec::with_capacity(8 + meta.len() + data.len());
    out.extend_from_slice(&(meta.len() as u64).to_be_bytes());
    out.extend_from_slice(&meta);
    out.extend_from_slice(data);
    Ok(out)
}

fn unframe(bytes: &[u8]) -> Result<(Meta, &[u8]), StorageError> {
    let bad = || fail(ErrorVerb::Read)(&"the stored snapshot is cut short");
    let (len, rest) = bytes.split_at_checked(8).ok_or_else(bad)?;
    let len = u64::from_be_bytes(len.try_into().map_err(|_| bad())?);
    let len = usize::try_from(len).map_err(|_| bad())?;
    let (meta, data) = rest.split_at_checked(len).ok_or_else(bad)?;
    let meta = serde_json::from_slice(meta).map_err(|e| fail(ErrorVerb::Read)(&e))?;
    Ok((meta, data))
}

/// The current snapshot, in one read.
pub(crate) fn current(tree: &sled::Tree) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
    let Some(bytes) = tree.get(CURRENT).map_err(|e| fail(ErrorVerb::Read)(&e))? else {
        return Ok(None);
    };
    let (meta, data) = unframe(&bytes)?;
    Ok(Some(Snapshot {
        meta,
        snapshot: Box::new(Cursor::new(data.to_vec())),
    }))
}

/// Moves a snapshot stored under the old two keys into the one-value layout (at open).
pub(crate) fn migrate(tree: &sled::Tree) -> Result<(), StorageError> {
    let read = |key| tree.get(key).map_err(|e| fail(ErrorVerb::Read)(&e));
    if let (Some(meta), Some(data)) = (read(OLD_META)?, read(OLD_DATA)?) {
        let meta: Meta = serde_json::from_slice(&meta).map_err(|e| fail(ErrorVerb::Read)(&e))?;
        let mut batch = sled::Batch::default();
        batch.insert(CURRENT, frame(&meta, &data)?);
        batch.remove(OLD_META);
        batch.remove(OLD_DATA);
        tree.apply_batch(batch)
            .map_err(|e| fail(ErrorVerb::Write)(&e))?;
    }
    Ok(())
}

/// Stores `meta`/`data` as the current snapshot unless the stored one is at least as new.
/// Returns whether it was stored.
pub(crate) fn store_unless_older(
    tree: &sled::Tree,
    meta: &Meta,
    data: &[u8],
) -> Result<bool, StorageError> {
    let framed = frame(meta, data)?;
    loop {
        let stored = tree.get(CURRENT).map_err(|e| fail(ErrorVerb::Read)(&e))?;
        if let Some(bytes) = &stored {
            let (current, _) = unframe(bytes)?;
            if current.last_log_id >= meta.last_log_id {
                return Ok(false);
            }
        }
        // Swap only if nobody stored another snapshot since we looked.
        let swapped = tree
            .compare_and_swap(CURRENT, stored, Some(framed.as_slice()))
            .map_err(|e| fail(ErrorVerb::Write)(&e))?;
        if swapped.is_ok() {
            return Ok(true);
        }
    }
}

/// Builds a snapshot of the state captured when it was made.
pub struct SnapshotBuilder {
    pub(crate) storage: Durable,
    pub(crate) tree: sled::Tree,
    pub(crate) share: Result<ShareState, String>,
    pub(crate) last_applied: Option<LogId>,
    pub(crate) membership: Membership,
    pub(crate) rows: Vec<Arc<Row>>,
}

impl SnapshotBuilder {
    fn body(&self, upto: u64) -> Result<SnapshotBody, StorageError> {
        let fail = fail(ErrorVerb::Write);
        let mut receipts = Vec::new();
        for item in self.tree.scan_prefix(super::state_machine::RECEIPT) {
            let (_, bytes) = item.map_err(|e| fail(&e))?;
            let receipt: Receipt = serde_json::from_slice(&bytes).map_err(|e| fail(&e))?;
            if receipt.index <= upto {
                receipts.push(receipt);
            }
        }
        let share = self.share.clone().map_err(|e| fail(&e))?;
        Ok(SnapshotBody {
            rows: self.rows.iter().map(|r| (**r).clone()).collect(),
            receipts,
            share_secret: share.secret,
            revoked: share.revoked,
            share_previous: share.previous,
            requests: requests::in_window(&self.tree, upto)?,
        })
    }
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let upto = self.last_applied.map_or(0, |l| l.index);
        let body = self.body(upto)?;
        let data = serde_json::to_vec(&body).map_err(|e| fail(ErrorVerb::Write)(&e))?;
        let snapshot_id = match self.last_applied {
            Some(l) => format!("{}-{}-{}", l.leader_id.term, l.index, now_ms()),
            None => format!("0-0-{}", now_ms()),
        };
        let meta = Meta {
            last_log_id: self.last_applied,
            last_membership: self.membership.clone(),
            snapshot_id,
        };
        if store_unless_older(&self.tree, &meta, &data)? {
            self.storage
                .sync()
                .await
                .map_err(|e| fail(ErrorVerb::Write)(&e))?;
        }
        // Request records that no state from this cut on remembers. Their removal needs no
        // sync: the applied state never goes back below this cut, and the window check
        // ignores a record that comes back after a crash.
        let collected = requests::collect(&self.tree, upto)?;
        tracing::debug!(upto, collected, "snapshot built");
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}
