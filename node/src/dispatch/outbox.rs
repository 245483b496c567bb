//! The durable local outbox: receipts of invocations that ran while this node could not
//! reach a quorum. They are flushed to disk before the caller is answered, confirmed locally
//! as `pending`, and proposed again until the cluster commits them (appends are idempotent
//! by id, so a receipt that did commit before a timeout is not recorded twice).

use super::receipt::Receipt;

/// Receipts waiting to be replicated.
#[derive(Clone)]
pub struct Outbox {
    db: sled::Db,
    tree: sled::Tree,
}

/// A failure of the outbox's storage.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    /// sled failed.
    #[error("outbox storage: {0}")]
    Sled(#[from] sled::Error),
    /// A stored receipt does not decode.
    #[error("outbox entry does not decode: {0}")]
    Decode(#[from] serde_json::Error),
}

impl Outbox {
    /// Opens the outbox tree of `db`.
    pub fn open(db: &sled::Db) -> Result<Self, sled::Error> {
        Ok(Self {
            db: db.clone(),
            tree: db.open_tree("outbox")?,
        })
    }

    /// Stores a receipt durably.
    pub async fn put(&self, receipt: &Receipt) -> Result<(), OutboxError> {
        self.tree
            .insert(receipt.id.as_bytes(), serde_json::to_vec(receipt)?)?;
        self.db.flush_async().await?;
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
            .iter()
            .map(|item| {
                let (_, bytes) = item?;
                Ok(serde_json::from_slice(&bytes)?)
            })
            .collect()
    }

    /// How many receipts wait.
    pub fn len(&self) -> usize {
        self.tree.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.tree.is_empty()
    }

    /// Drops a receipt the cluster has committed.
    pub async fn remove(&self, id: &str) -> Result<(), OutboxError> {
        self.tree.remove(id.as_bytes())?;
        self.db.flush_async().await?;
        Ok(())
    }
}
