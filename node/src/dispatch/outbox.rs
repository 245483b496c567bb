//! The durable local outbox: receipts of invocations that ran while this node could not
//! reach a quorum. They are durable before the caller is answered, confirmed locally as
//! `pending`, and proposed again until the cluster commits them (appends are idempotent by
//! receipt id, so a receipt that did commit before a timeout is not recorded twice).
//!
//! A receipt leaves the outbox only once this node has applied its entry, so a confirm that
//! looks in the outbox first and in the log second never finds it in neither.
//!
//! A receipt whose id another receipt took in the log (a collision of random ids) is kept
//! under a fresh id, and the outbox remembers the rename (`~renamed/<old id>` → new id): the
//! caller was given the old id with its pending proof, and a confirm of it on this node must
//! find the caller's receipt, never the other one that holds the id in the log. Renames are
//! kept for good (they are as rare as id collisions, and tiny). Receipt ids start with
//! `inv_`, so the two kinds of key never meet.

use crate::model::receipt::{new_receipt_id, Receipt};
use crate::store::{Durable, SyncError};

/// Receipts waiting to be replicated.
#[derive(Clone)]
pub struct Outbox {
    storage: Durable,
    tree: sled::Tree,
}

/// A failure of the outbox's storage.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    /// sled failed.
    #[error("outbox storage: {0}")]
    Sled(#[from] sled::Error),
    /// The write could not be made durable.
    #[error("outbox storage: {0}")]
    Sync(#[from] SyncError),
    /// A stored receipt does not decode.
    #[error("outbox entry does not decode: {0}")]
    Decode(#[from] serde_json::Error),
}

impl Outbox {
    /// Opens the outbox tree of the node's database.
    pub fn open(storage: &Durable) -> Result<Self, sled::Error> {
        Ok(Self {
            storage: storage.clone(),
            tree: storage.db().open_tree("outbox")?,
        })
    }

    /// Stores a receipt durably.
    pub async fn put(&self, receipt: &Receipt) -> Result<(), OutboxError> {
        self.tree
            .insert(receipt.id.as_bytes(), serde_json::to_vec(receipt)?)?;
        self.storage.sync().await?;
        Ok(())
    }

    /// One pending receipt.
    pub fn get(&self, id: &str) -> Result<Option<Receipt>, OutboxError> {
        match self.tree.get(id.as_bytes())? {
            Some(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
            None => Ok(None),
        }
    }

    /// Every pending receipt, oldest id order.
    pub fn pending(&self) -> Result<Vec<Receipt>, OutboxError> {
        self.tree
            .scan_prefix(RECEIPT_IDS)
            .map(|item| {
                let (_, bytes) = item?;
                Ok(serde_json::from_slice(&bytes)?)
            })
            .collect()
    }

    /// How many receipts wait.
    pub fn len(&self) -> usize {
        self.tree.scan_prefix(RECEIPT_IDS).count()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.tree.scan_prefix(RECEIPT_IDS).next().is_none()
    }

    /// The id a receipt of this outbox now has, if it was renamed from `id`.
    pub fn renamed(&self, id: &str) -> Result<Option<String>, OutboxError> {
        Ok(self
            .tree
            .get(renamed_key(id))?
            .map(|new| String::from_utf8_lossy(&new).into_owned()))
    }

    /// Drops a receipt the cluster has committed and this node has applied.
    pub async fn remove(&self, id: &str) -> Result<(), OutboxError> {
        self.tree.remove(id.as_bytes())?;
        self.storage.sync().await?;
        Ok(())
    }

    /// Keeps `receipt` under a fresh id in place of `old` (whose id another receipt took), in
    /// one atomic change with the record of the rename, and returns the new id.
    pub(crate) async fn rename(
        &self,
        old: &str,
        mut receipt: Receipt,
    ) -> Result<String, OutboxError> {
        receipt.id = new_receipt_id();
        let mut batch = sled::Batch::default();
        batch.remove(old.as_bytes());
        batch.insert(receipt.id.as_bytes(), serde_json::to_vec(&receipt)?);
        // Whatever the client was first given (a receipt renamed twice points at the last).
        let first = self.renamed_from(old)?.unwrap_or_else(|| old.to_owned());
        batch.insert(renamed_key(&first), receipt.id.as_bytes());
        if first != old {
            batch.insert(renamed_key(old), receipt.id.as_bytes());
        }
        self.tree.apply_batch(batch)?;
        self.storage.sync().await?;
        Ok(receipt.id)
    }
}

/// Keys of pending receipts (every receipt id starts so).
const RECEIPT_IDS: &[u8] = b"inv_";
/// `~renamed/<old id>` → the new id of a renamed receipt.
const RENAMED: &[u8] = b"~renamed/";

fn renamed_key(id: &str) -> Vec<u8> {
    [RENAMED, id.as_bytes()].concat()
}

impl Outbox {
    /// The old id `id` was renamed from, if it was (one rename back).
    fn renamed_from(&self, id: &str) -> Result<Option<String>, OutboxError> {
        for item in self.tree.scan_prefix(RENAMED) {
            let (key, new) = item?;
            if new.as_ref() == id.as_bytes() {
                let old = key.get(RENAMED.len()..).unwrap_or_default();
                return Ok(Some(String::from_utf8_lossy(old).into_owned()));
            }
        }
        Ok(None)
    }
}
