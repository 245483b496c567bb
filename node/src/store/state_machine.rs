//! The state machine on sled: rows, receipts, applied state and the current snapshot, plus
//! the in-memory catalogue it keeps current as entries are applied.
//!
//! Apply is deterministic: everything an entry needs (times, ids) is inside it. Each batch of
//! entries is written in one sled batch and flushed before `apply` returns, so the applied
//! state survives a crash on its own and a restart never re-applies into a half-written state.

use std::collections::HashMap;
use std::io::Cursor;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{EntryPayload, ErrorSubject, ErrorVerb, OptionalSend, StoredMembership};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::io_error;
use crate::catalogue::row::{Row, RowInput};
use crate::catalogue::SharedCatalogue;
use crate::dispatch::receipt::Receipt;
use crate::dispatch::share::ShareSecret;
use crate::raft::{
    Command, CommandResult, Entry, LogId, NodeId, NodeInfo, PutOutcome, StorageError, TypeConfig,
};

const ROW: &[u8] = b"r/";
const RECEIPT: &[u8] = b"i/";
const RECEIPT_BY_KEY: &[u8] = b"k/";
const APPLIED: &[u8] = b"m/applied";
const MEMBERSHIP: &[u8] = b"m/membership";
const SNAPSHOT_META: &[u8] = b"s/meta";
const SNAPSHOT_DATA: &[u8] = b"s/data";
const SHARE_SECRET: &[u8] = b"m/share_secret";
const SHARE_REVOKED: &[u8] = b"v/";

type Membership = StoredMembership<NodeId, NodeInfo>;
type Meta = SnapshotMeta<NodeId, NodeInfo>;

/// RFC 3339 (UTC, milliseconds) of a time decided by a proposer.
pub fn format_ms(at_ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(at_ms)).to_string()
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn row_key(key: &str) -> Vec<u8> {
    [ROW, key.as_bytes()].concat()
}

fn receipt_key(id: &str) -> Vec<u8> {
    [RECEIPT, id.as_bytes()].concat()
}

/// `k/<KEY>/<index:be8><id>`: receipts of one row in log order.
fn receipt_by_key(key: &str, index: u64, id: &str) -> Vec<u8> {
    [
        RECEIPT_BY_KEY,
        key.as_bytes(),
        b"/",
        &index.to_be_bytes(),
        id.as_bytes(),
    ]
    .concat()
}

fn revoked_key(id: &str) -> Vec<u8> {
    [SHARE_REVOKED, id.as_bytes()].concat()
}

/// A revoked share token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Revocation {
    id: String,
    at_ms: u64,
}

/// What a snapshot holds: the whole applied state.
#[derive(Serialize, Deserialize)]
struct SnapshotBody {
    rows: Vec<Row>,
    receipts: Vec<Receipt>,
    /// The share-token secret (absent in snapshots older than share tokens).
    #[serde(default)]
    share_secret: Option<ShareSecret>,
    /// Revoked share tokens.
    #[serde(default)]
    revoked: Vec<Revocation>,
}

/// The state machine; one per node.
pub struct StateMachine {
    db: sled::Db,
    tree: sled::Tree,
    catalogue: SharedCatalogue,
    applied_tx: Arc<watch::Sender<u64>>,
    last_applied: Option<LogId>,
    membership: Membership,
}

/// Read access to what the state machine stores but does not keep in memory.
#[derive(Clone)]
pub struct ReceiptReader {
    tree: sled::Tree,
}

impl ReceiptReader {
    /// One receipt by id.
    pub fn get(&self, id: &str) -> Result<Option<Receipt>, ReadError> {
        match self.tree.get(receipt_key(id))? {
            Some(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
            None => Ok(None),
        }
    }

    /// The receipts of one row, newest first, at most `limit`.
    pub fn by_key(&self, key: &str, limit: usize) -> Result<Vec<Receipt>, ReadError> {
        let prefix = [RECEIPT_BY_KEY, key.as_bytes(), b"/"].concat();
        let mut out = Vec::new();
        for item in self.tree.scan_prefix(&prefix).rev().take(limit) {
            let (k, _) = item?;
            let id = std::str::from_utf8(&k[prefix.len() + 8..]).unwrap_or_default();
            if let Some(receipt) = self.get(id)? {
                out.push(receipt);
            }
        }
        Ok(out)
    }

    /// How many receipts are stored.
    pub fn count(&self) -> usize {
        self.tree.scan_prefix(RECEIPT).count()
    }

    /// The cluster's share-token secret, once one was applied.
    pub fn share_secret(&self) -> Result<Option<ShareSecret>, ReadError> {
        match self.tree.get(SHARE_SECRET)? {
            Some(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
            None => Ok(None),
        }
    }

    /// Whether the share token `id` was revoked.
    pub fn share_revoked(&self, id: &str) -> Result<bool, ReadError> {
        Ok(self.tree.contains_key(revoked_key(id))?)
    }

    /// How many receipts are stored and a SHA-256 over all of them in id order, for
    /// comparing nodes' receipt logs (a full scan: an operator's tool, not a hot path).
    pub fn digest(&self) -> Result<(usize, String), ReadError> {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        let mut count = 0;
        for item in self.tree.scan_prefix(RECEIPT) {
            let (_, bytes) = item?;
            hasher.update(&bytes);
            hasher.update(b"\n");
            count += 1;
        }
        Ok((count, hex::encode(hasher.finalize())))
    }
}

/// A failure reading stored receipts.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// sled failed.
    #[error("storage: {0}")]
    Sled(#[from] sled::Error),
    /// A stored value did not decode.
    #[error("stored value does not decode: {0}")]
    Decode(#[from] serde_json::Error),
}

impl StateMachine {
    /// Opens the state machine tree of `db` and loads the catalogue from it.
    pub fn open(db: &sled::Db, catalogue: SharedCatalogue) -> Result<Self, StorageError> {
        let tree = db
            .open_tree("sm")
            .map_err(|e| io_error(ErrorSubject::StateMachine, ErrorVerb::Read, &e))?;
        let read = |key: &[u8]| -> Result<Option<sled::IVec>, StorageError> {
            tree.get(key)
                .map_err(|e| io_error(ErrorSubject::StateMachine, ErrorVerb::Read, &e))
        };
        let decode_err =
            |e: serde_json::Error| io_error(ErrorSubject::StateMachine, ErrorVerb::Read, &e);
        let last_applied: Option<LogId> = match read(APPLIED)? {
            Some(b) => serde_json::from_slice(&b).map_err(decode_err)?,
            None => None,
        };
        let membership: Membership = match read(MEMBERSHIP)? {
            Some(b) => serde_json::from_slice(&b).map_err(decode_err)?,
            None => Membership::default(),
        };
        let mut rows = Vec::new();
        for item in tree.scan_prefix(ROW) {
            let (_, bytes) =
                item.map_err(|e| io_error(ErrorSubject::StateMachine, ErrorVerb::Read, &e))?;
            rows.push(serde_json::from_slice::<Row>(&bytes).map_err(decode_err)?);
        }
        catalogue.write().replace_all(rows);
        let applied_index = last_applied.map_or(0, |l| l.index);
        Ok(Self {
            db: db.clone(),
            tree,
            catalogue,
            applied_tx: Arc::new(watch::Sender::new(applied_index)),
            last_applied,
            membership,
        })
    }

    /// A watch of the applied index, for read-your-writes waits.
    pub fn applied_index(&self) -> watch::Receiver<u64> {
        self.applied_tx.subscribe()
    }

    /// A reader for receipts.
    pub fn receipts(&self) -> ReceiptReader {
        ReceiptReader {
            tree: self.tree.clone(),
        }
    }

    /// Applies one command at `index`, adding its writes to `batch`. `receipts_in_batch`
    /// tracks receipt ids written earlier in the same batch (not yet visible in sled), and
    /// `secret_in_batch` whether a share secret was.
    fn apply_command(
        &self,
        command: Command,
        index: u64,
        batch: &mut sled::Batch,
        receipts_in_batch: &mut HashMap<String, u64>,
        secret_in_batch: &mut bool,
    ) -> Result<CommandResult, StorageError> {
        let encode_err =
            |e: serde_json::Error| io_error(ErrorSubject::StateMachine, ErrorVerb::Write, &e);
        match command {
            Command::PutRows { at_ms, rows } => {
                let mut catalogue = self.catalogue.write();
                for input in &rows {
                    if let Some(expected) = input.if_version {
                        let actual = catalogue.get(&input.key).map(|r| r.version);
                        let holds = match actual {
                            None => expected == 0,
                            Some(v) => v == expected,
                        };
                        if !holds {
                            return Ok(CommandResult::Conflict {
                                key: input.key.clone(),
                                expected,
                                actual,
                            });
                        }
                    }
                }
                let at = format_ms(at_ms);
                let mut outcomes = Vec::with_capacity(rows.len());
                for input in rows {
                    let existing = catalogue.get(&input.key);
                    let row = stored_row(input, index, &at, existing.as_deref());
                    batch.insert(
                        row_key(&row.key),
                        serde_json::to_vec(&row).map_err(encode_err)?,
                    );
                    outcomes.push(PutOutcome {
                        key: row.key.clone(),
                        version: index,
                        created: existing.is_none(),
                        updated_at: at.clone(),
                    });
                    catalogue.put(row);
                }
                Ok(CommandResult::Put { rows: outcomes })
            }
            Command::DeleteRow { key, if_version } => {
                let mut catalogue = self.catalogue.write();
                let actual = catalogue.get(&key).map(|r| r.version);
                if let Some(expected) = if_version {
                    if actual != Some(expected) {
                        return Ok(CommandResult::Conflict {
                            key,
                            expected,
                            actual,
                        });
                    }
                }
                let deleted = u32::from(catalogue.remove_at(&key, index).is_some());
                batch.remove(row_key(&key));
                Ok(CommandResult::Deleted { deleted })
            }
            Command::AppendReceipt { mut receipt } => {
                // Idempotent by id: an outbox may deliver the same receipt twice.
                if let Some(index) = receipts_in_batch.get(&receipt.id) {
                    return Ok(CommandResult::ReceiptAppended {
                        id: receipt.id,
                        index: *index,
                    });
                }
                let stored = self
                    .tree
                    .get(receipt_key(&receipt.id))
                    .map_err(|e| io_error(ErrorSubject::StateMachine, ErrorVerb::Read, &e))?;
                if let Some(bytes) = stored {
                    let existing: Receipt = serde_json::from_slice(&bytes)
                        .map_err(|e| io_error(ErrorSubject::StateMachine, ErrorVerb::Read, &e))?;
                    return Ok(CommandResult::ReceiptAppended {
                        id: existing.id,
                        index: existing.index,
                    });
                }
                receipt.index = index;
                batch.insert(
                    receipt_by_key(&receipt.key, index, &receipt.id),
                    &[] as &[u8],
                );
                batch.insert(
                    receipt_key(&receipt.id),
                    serde_json::to_vec(&receipt).map_err(encode_err)?,
                );
                receipts_in_batch.insert(receipt.id.clone(), index);
                Ok(CommandResult::ReceiptAppended {
                    id: receipt.id,
                    index,
                })
            }
            Command::SetShareSecret { secret } => {
                // The first secret wins; a later proposal (a race between two nodes minting
                // their first token) is a no-op. Two in one batch: the first one wins too.
                let stored = self
                    .tree
                    .contains_key(SHARE_SECRET)
                    .map_err(|e| io_error(ErrorSubject::StateMachine, ErrorVerb::Read, &e))?;
                if !stored && !*secret_in_batch {
                    batch.insert(
                        SHARE_SECRET,
                        serde_json::to_vec(&secret).map_err(encode_err)?,
                    );
                    *secret_in_batch = true;
                }
                Ok(CommandResult::Applied)
            }
            Command::RevokeShare { id, at_ms } => {
                let revocation = Revocation { id, at_ms };
                batch.insert(
                    revoked_key(&revocation.id),
                    serde_json::to_vec(&revocation).map_err(encode_err)?,
                );
                Ok(CommandResult::Applied)
            }
        }
    }

    async fn flush(&self) -> Result<(), StorageError> {
        self.db
            .flush_async()
            .await
            .map_err(|e| io_error(ErrorSubject::StateMachine, ErrorVerb::Write, &e))?;
        Ok(())
    }
}

/// The stored form of a written row: server fields from the entry and the previous version.
fn stored_row(input: RowInput, index: u64, at: &str, existing: Option<&Row>) -> Row {
    Row {
        created_at: existing.map_or_else(|| at.to_owned(), |r| r.created_at.clone()),
        updated_at: at.to_owned(),
        version: index,
        key: input.key,
        kind: input.kind,
        target: input.target,
        category: input.category,
        content: input.content,
        args_schema: input.args_schema,
        auth: input.auth,
        risk: input.risk,
        enabled: input.enabled,
        planner_visible: input.planner_visible,
        pins: input.pins,
        demote: input.demote,
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, Membership), StorageError> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<CommandResult>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let encode_err =
            |e: serde_json::Error| io_error(ErrorSubject::StateMachine, ErrorVerb::Write, &e);
        let mut batch = sled::Batch::default();
        let mut receipts_in_batch = HashMap::new();
        let mut secret_in_batch = false;
        let mut results = Vec::new();
        for entry in entries {
            self.last_applied = Some(entry.log_id);
            let result = match entry.payload {
                EntryPayload::Blank => CommandResult::Applied,
                EntryPayload::Membership(membership) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), membership);
                    batch.insert(
                        MEMBERSHIP,
                        serde_json::to_vec(&self.membership).map_err(encode_err)?,
                    );
                    CommandResult::Applied
                }
                EntryPayload::Normal(command) => self.apply_command(
                    command,
                    entry.log_id.index,
                    &mut batch,
                    &mut receipts_in_batch,
                    &mut secret_in_batch,
                )?,
            };
            results.push(result);
        }
        if let Some(last) = self.last_applied {
            batch.insert(APPLIED, serde_json::to_vec(&last).map_err(encode_err)?);
        }
        self.tree
            .apply_batch(batch)
            .map_err(|e| io_error(ErrorSubject::StateMachine, ErrorVerb::Write, &e))?;
        self.flush().await?;
        if let Some(last) = self.last_applied {
            self.applied_tx.send_replace(last.index);
        }
        Ok(results)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        // Capture a consistent cut now: building runs concurrently with later applies.
        // Receipts are append-only and carry their index, so the builder filters them by it.
        // The share state is small and read now; a read error surfaces when building.
        let share = read_share_state(&self.tree);
        SnapshotBuilder {
            share,
            db: self.db.clone(),
            tree: self.tree.clone(),
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            rows: self.catalogue.read().all_rows(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &Meta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let read_err = |e: serde_json::Error| {
            io_error(
                ErrorSubject::Snapshot(Some(meta.signature())),
                ErrorVerb::Read,
                &e,
            )
        };
        let write_err = |e: &(dyn std::error::Error + 'static)| {
            io_error(
                ErrorSubject::Snapshot(Some(meta.signature())),
                ErrorVerb::Write,
                &SnapshotError(e.to_string()),
            )
        };
        let body: SnapshotBody = serde_json::from_slice(&data).map_err(read_err)?;

        // Replace the whole applied state in one batch.
        let mut batch = sled::Batch::default();
        batch.remove(SHARE_SECRET);
        for prefix in [ROW, RECEIPT, RECEIPT_BY_KEY, SHARE_REVOKED] {
            for item in self.tree.scan_prefix(prefix) {
                let (key, _) = item.map_err(|e| write_err(&e))?;
                batch.remove(key);
            }
        }
        for row in &body.rows {
            batch.insert(
                row_key(&row.key),
                serde_json::to_vec(row).map_err(|e| write_err(&e))?,
            );
        }
        for receipt in &body.receipts {
            batch.insert(
                receipt_key(&receipt.id),
                serde_json::to_vec(receipt).map_err(|e| write_err(&e))?,
            );
            batch.insert(
                receipt_by_key(&receipt.key, receipt.index, &receipt.id),
                &[] as &[u8],
            );
        }
        if let Some(secret) = &body.share_secret {
            batch.insert(
                SHARE_SECRET,
                serde_json::to_vec(secret).map_err(|e| write_err(&e))?,
            );
        }
        for revocation in &body.revoked {
            batch.insert(
                revoked_key(&revocation.id),
                serde_json::to_vec(revocation).map_err(|e| write_err(&e))?,
            );
        }
        batch.insert(
            APPLIED,
            serde_json::to_vec(&meta.last_log_id).map_err(|e| write_err(&e))?,
        );
        batch.insert(
            MEMBERSHIP,
            serde_json::to_vec(&meta.last_membership).map_err(|e| write_err(&e))?,
        );
        batch.insert(
            SNAPSHOT_META,
            serde_json::to_vec(meta).map_err(|e| write_err(&e))?,
        );
        batch.insert(SNAPSHOT_DATA, data);
        self.tree.apply_batch(batch).map_err(|e| write_err(&e))?;
        self.flush().await?;

        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.catalogue.write().replace_all(body.rows);
        self.applied_tx
            .send_replace(meta.last_log_id.map_or(0, |l| l.index));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let read = |key: &[u8]| {
            self.tree
                .get(key)
                .map_err(|e| io_error(ErrorSubject::Snapshot(None), ErrorVerb::Read, &e))
        };
        let (Some(meta), Some(data)) = (read(SNAPSHOT_META)?, read(SNAPSHOT_DATA)?) else {
            return Ok(None);
        };
        let meta: Meta = serde_json::from_slice(&meta)
            .map_err(|e| io_error(ErrorSubject::Snapshot(None), ErrorVerb::Read, &e))?;
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data.to_vec())),
        }))
    }
}

/// A snapshot failure whose source cannot be carried as is.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct SnapshotError(String);

type ShareState = Result<(Option<ShareSecret>, Vec<Revocation>), String>;

fn read_share_state(tree: &sled::Tree) -> ShareState {
    let secret = match tree.get(SHARE_SECRET).map_err(|e| e.to_string())? {
        Some(bytes) => Some(serde_json::from_slice(&bytes).map_err(|e| e.to_string())?),
        None => None,
    };
    let mut revoked = Vec::new();
    for item in tree.scan_prefix(SHARE_REVOKED) {
        let (_, bytes) = item.map_err(|e| e.to_string())?;
        revoked.push(serde_json::from_slice(&bytes).map_err(|e| e.to_string())?);
    }
    Ok((secret, revoked))
}

/// Builds a snapshot of the state captured when it was made.
pub struct SnapshotBuilder {
    share: ShareState,
    db: sled::Db,
    tree: sled::Tree,
    last_applied: Option<LogId>,
    membership: Membership,
    rows: Vec<Arc<Row>>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let fail = |e: &(dyn std::error::Error + 'static)| {
            io_error(
                ErrorSubject::Snapshot(None),
                ErrorVerb::Write,
                &SnapshotError(e.to_string()),
            )
        };
        let upto = self.last_applied.map_or(0, |l| l.index);
        let mut receipts = Vec::new();
        for item in self.tree.scan_prefix(RECEIPT) {
            let (_, bytes) = item.map_err(|e| fail(&e))?;
            let receipt: Receipt = serde_json::from_slice(&bytes).map_err(|e| fail(&e))?;
            if receipt.index <= upto {
                receipts.push(receipt);
            }
        }
        let (share_secret, revoked) = self.share.clone().map_err(|e| fail(&SnapshotError(e)))?;
        let body = SnapshotBody {
            rows: self.rows.iter().map(|r| (**r).clone()).collect(),
            receipts,
            share_secret,
            revoked,
        };
        let data = serde_json::to_vec(&body).map_err(|e| fail(&e))?;
        let snapshot_id = match self.last_applied {
            Some(l) => format!("{}-{}-{}", l.leader_id.term, l.index, now_ms()),
            None => format!("0-0-{}", now_ms()),
        };
        let meta = Meta {
            last_log_id: self.last_applied,
            last_membership: self.membership.clone(),
            snapshot_id,
        };
        let mut batch = sled::Batch::default();
        batch.insert(
            SNAPSHOT_META,
            serde_json::to_vec(&meta).map_err(|e| fail(&e))?,
        );
        batch.insert(SNAPSHOT_DATA, data.as_slice());
        self.tree.apply_batch(batch).map_err(|e| fail(&e))?;
        self.db.flush_async().await.map_err(|e| fail(&e))?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

#[cfg(test)]
mod share_tests {
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;
    use crate::dispatch::share::ShareSecret;

    fn entry(index: u64, command: Command) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(command),
        }
    }

    fn machine(dir: &std::path::Path) -> StateMachine {
        let db = crate::store::open_db(dir).unwrap();
        StateMachine::open(&db, SharedCatalogue::default()).unwrap()
    }

    #[tokio::test]
    async fn the_first_share_secret_wins_and_travels_with_revocations_in_snapshots() {
        let dir = tempfile::tempdir().unwrap();
        let mut sm = machine(&dir.path().join("a"));
        let (first, second) = (ShareSecret::generate(), ShareSecret::generate());
        let set = |secret: &ShareSecret| Command::SetShareSecret {
            secret: secret.clone(),
        };
        // Two proposals in one batch and a third later: the first applied stays.
        sm.apply([entry(1, set(&first)), entry(2, set(&second))])
            .await
            .unwrap();
        sm.apply([
            entry(3, set(&second)),
            entry(
                4,
                Command::RevokeShare {
                    id: "sh0123456789".into(),
                    at_ms: 7,
                },
            ),
        ])
        .await
        .unwrap();
        let reader = sm.receipts();
        assert_eq!(reader.share_secret().unwrap(), Some(first.clone()));
        assert!(reader.share_revoked("sh0123456789").unwrap());
        assert!(!reader.share_revoked("sh9999999999").unwrap());

        let snapshot = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        let mut other = machine(&dir.path().join("b"));
        other
            .install_snapshot(&snapshot.meta, snapshot.snapshot)
            .await
            .unwrap();
        let reader = other.receipts();
        assert_eq!(reader.share_secret().unwrap(), Some(first));
        assert!(reader.share_revoked("sh0123456789").unwrap());
    }
}
