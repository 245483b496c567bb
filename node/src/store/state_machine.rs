//! The state machine on sled: rows, receipts, share state and remembered request ids, plus
//! the in-memory catalogue it publishes as entries are applied.
//!
//! # Apply
//!
//! Apply is deterministic (everything an entry needs, times and ids, is inside it) and
//! cannot be made to panic or fail by what an entry holds: a command that cannot be applied
//! as asked answers with a result that says so. One batch of entries is applied in three
//! steps:
//! 1. every change is staged: sled writes into one `sled::Batch`, catalogue changes into a
//!    list; later entries of the batch see earlier ones through the staged rows (for
//!    `if_version`), receipts and request ids;
//! 2. the batch, with the applied log id and membership, is written as one atomic sled batch;
//! 3. it is published: the catalogue changes and the applied index under one write lock,
//!    then the applied-index watch that read-your-writes waits on.
//!
//! Apply does not sync. What it applies is already durable in the log: openraft applies
//! only committed entries this node's log store has reported flushed, and the log store
//! reports an append only after [`super::durable`] has made it durable. The applied batch
//! rides along with the next sync of anything in the database (the next append, vote or
//! snapshot), so a sync per apply would buy nothing a crash can take away — and it would sit
//! on every write's path twice (the leader's apply before it answers, and the forwarding
//! follower's apply before it reads its own write).
//!
//! # Recovery argument
//!
//! - The applied state on disk is always the state after some whole batch: the sled batch
//!   is atomic and carries `m/applied`, and sled recovers a prefix of its writes in order.
//!   A crash (SIGKILL or power loss) may take back the last batches applied since the last
//!   sync; at start the state machine reports the log id it kept, and openraft re-applies
//!   the entries above it from the log (up to the saved commit index, and the rest once a
//!   leader says they are committed) before the node serves anything. An entry is thus
//!   applied exactly once into the state that survives, and nothing the node showed before
//!   the crash is missing after it.
//! - The log never loses an entry the applied state still needs: it is purged only behind a
//!   snapshot, and building one syncs (covering every batch applied up to its cut) before
//!   the snapshot is named current and openraft purges.
//! - A receipt's body is written to its segment file before the batch that points at it
//!   (see [`super::segments`] for what a crash or a power loss can leave, and how the start
//!   cuts off bodies no state points at and writes again, from the log, bodies a kept
//!   state points at but the disk lost).
//! - Nothing becomes visible before it is durable in the log (see above), and receipts,
//!   though read from sled, are shown only up to the published index.
//! - The index a reader is given is never behind what it was shown: the index is set under
//!   the same lock as the catalogue changes, and a reader that takes it under its read
//!   guard, or after reading, gets one at least as new as the rows it saw. So a session that
//!   passes it as `x-rowcall-min-index` to another node never sees an older version there,
//!   and a restarted node holds a session's read until it has re-applied up to its index.
//! - A snapshot install ([`install`]) replaces the whole state. It is not one sled batch
//!   (a snapshot's receipts need not fit in memory), so it is made restartable instead: the
//!   snapshot file is durable and named current, with a marker, before the state is
//!   touched; the marker goes in the last batch, with the applied log id. A start that
//!   finds the marker finishes the install from the file before anything reads the state.
//!   Receipts visible before the install stay visible throughout (unless the snapshot's
//!   history pruned them); new ones show once the install is published.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use futures_util::{Stream, TryStreamExt as _};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{ErrorSubject, ErrorVerb, OptionalSend};
use serde::Serialize;
use tokio::sync::watch;

use self::build::SnapshotBuilder;
use super::durable::Durable;
use super::requests::{self, Record};
use super::segments::{End, Place, Segments};
use super::snapshot::file::{Folder, SnapshotFile};
use super::snapshot::{self, Membership, Meta, Revocation};
use super::tree_file::TreeFile;
use super::{io_error, Snapshot};
use crate::catalogue::row::{Row, RowInput};
use crate::catalogue::SharedCatalogue;
use crate::model::alarm::StorageAlarm;
use crate::model::receipt::Receipt;
use crate::model::share::{ShareKeys, ShareSecret};
use crate::model::time::{parse_ms, Stamp};
use crate::raft::{
    Command, CommandResult, Entry, EntryPayload, LogId, PutOutcome, Request, RequestId,
    StorageError, StoredMembership, TypeConfig,
};

/// The sled tree of the state machine.
pub(crate) const TREE: &str = "sm";
const ROW: &[u8] = b"r/";
pub(crate) const RECEIPT: &[u8] = b"i/";
const RECEIPT_BY_KEY: &[u8] = b"k/";
const APPLIED: &[u8] = b"m/applied";
const MEMBERSHIP: &[u8] = b"m/membership";
const SHARE_SECRET: &[u8] = b"m/share_secret";
/// The share secret a planned rotation replaced, still verifying its tokens.
const SHARE_PREVIOUS: &[u8] = b"m/share_previous";
/// `t/<started_ms:be8><id>`: receipts in the order they started, for the age rule.
const RECEIPT_BY_TIME: &[u8] = b"t/";
/// The end of the receipt bodies' segment files as of the applied state.
const RECEIPTS_END: &[u8] = b"m/receipts_end";
/// Set once every stored receipt has its `t/` entry (built at open for older folders).
const TIME_INDEXED: &[u8] = b"m/receipts_time_indexed";
const SHARE_REVOKED: &[u8] = b"v/";
/// Present while a snapshot install is under way (see [`install`]).
const INSTALLING: &[u8] = b"m/installing";
/// `a/<node:be8>` → a member's storage alarm ([`crate::model::alarm`]).
pub(crate) const ALARM: &[u8] = b"a/";

fn row_key(key: &str) -> Vec<u8> {
    [ROW, key.as_bytes()].concat()
}

/// (row key, ask) of every stored receipt that carries its ask: what the resolver has
/// learned, rebuilt at open and after a snapshot install (see [`Change::Learn`]).
/// Receipts in `missing` (bodies a power loss took) are left out: they are learned when
/// their bodies are restored.
fn asked_receipts(
    tree: &sled::Tree,
    segments: &Segments,
    missing: &[(String, Stored)],
) -> Result<Vec<(String, String)>, StorageError> {
    let mut out = Vec::new();
    for item in tree.scan_prefix(RECEIPT) {
        let (_, value) = item.map_err(|e| read_err(&e))?;
        // Most receipts carry no ask: skip them without reading or parsing their bodies.
        let bytes = match Stored::decode(&value) {
            Some(stored) if !stored.asked || missing.iter().any(|m| m.1 == stored) => continue,
            Some(stored) => match segments.read(&stored.place).map_err(|e| read_err(&e))? {
                Some(bytes) => bytes,
                None => continue,
            },
            None if !value.windows(8).any(|w| w == b"\"asked\":") => continue,
            None => value.to_vec(),
        };
        if let Ok(receipt) = serde_json::from_slice::<Receipt>(&bytes) {
            if let Some(asked) = receipt.asked {
                out.push((receipt.key, asked));
            }
        }
    }
    Ok(out)
}

/// A stored receipt's sled value (`i/<id>`) when its body is in a segment file
/// ([`super::segments`]): a tag byte, where the body is, the index of the entry that
/// appended it (to write the body again from the Raft log, see [`StateMachine::missing`]),
/// whether it carries an ask, and (tag 2) its leaf in the receipt log. Folders written
/// before segments keep the receipt's JSON as the value, which starts with `{`, never with
/// a tag; all are read alike.
///
/// A receipt's leaf is found by its id ([`transparency::LogReader::leaf_of`]) here while the
/// receipt is kept, and under `x/n/<id>` once retention dropped it (the drop writes that
/// key) or when it was stored without one (tag 1: installed from a snapshot, or stored
/// before data format 6; an install and the log's rebuild write `x/n/` for every leaf).
/// One key a receipt fewer than an `x/n/` key for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stored {
    place: Place,
    index: u64,
    asked: bool,
    leaf: Option<u64>,
}

impl Stored {
    const TAG: u8 = 1;
    const TAG_WITH_LEAF: u8 = 2;
    const ENCODED: usize = 1 + Place::ENCODED + 8 + 1;

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::ENCODED + 8);
        out.push(match self.leaf {
            Some(_) => Self::TAG_WITH_LEAF,
            None => Self::TAG,
        });
        out.extend_from_slice(&self.place.encode());
        out.extend_from_slice(&self.index.to_be_bytes());
        out.push(u8::from(self.asked));
        if let Some(leaf) = self.leaf {
            out.extend_from_slice(&leaf.to_be_bytes());
        }
        out
    }

    /// The stored place, or `None` for a value that holds the receipt itself.
    fn decode(value: &[u8]) -> Option<Self> {
        let with_leaf = match (value.first(), value.len()) {
            (Some(&Self::TAG), Self::ENCODED) => false,
            (Some(&Self::TAG_WITH_LEAF), len) if len == Self::ENCODED + 8 => true,
            _ => return None,
        };
        let place = Place::decode(&value[1..])?;
        let at = 1 + Place::ENCODED;
        let leaf = match with_leaf {
            true => Some(u64::from_be_bytes(value[Self::ENCODED..].try_into().ok()?)),
            false => None,
        };
        Some(Self {
            place,
            index: u64::from_be_bytes(value[at..at + 8].try_into().ok()?),
            asked: value[at + 8] != 0,
            leaf,
        })
    }
}

/// The receipt's JSON behind a stored value: the value itself, or the body it points at
/// (`None` when that body's file was removed: the receipt was pruned under the reader).
pub(crate) fn receipt_bytes(segments: &Segments, value: &[u8]) -> std::io::Result<Option<Vec<u8>>> {
    body(segments, value, Stored::decode(value))
}

/// [`receipt_bytes`] for a value already decoded as `stored`.
fn body(
    segments: &Segments,
    value: &[u8],
    stored: Option<Stored>,
) -> std::io::Result<Option<Vec<u8>>> {
    match stored {
        Some(stored) => segments.read(&stored.place),
        None => Ok(Some(value.to_vec())),
    }
}

/// A receipt as stored: decoded, its JSON as stored, where its body is (`None` for a
/// receipt kept inline) and its leaf when its value holds it.
struct Found {
    receipt: Receipt,
    bytes: Vec<u8>,
    place: Option<Place>,
    leaf: Option<u64>,
}

/// The stored receipt behind the value `value`.
fn found(segments: &Segments, value: &[u8]) -> Result<Option<Found>, StorageError> {
    let stored = Stored::decode(value);
    let Some(bytes) = body(segments, value, stored).map_err(|e| read_err(&e))? else {
        return Ok(None);
    };
    let receipt = serde_json::from_slice(&bytes).map_err(|e| read_err(&e))?;
    Ok(Some(Found {
        receipt,
        bytes,
        place: stored.map(|s| s.place),
        leaf: stored.and_then(|s| s.leaf),
    }))
}

/// The stored receipt `id`.
fn read_receipt(
    tree: &sled::Tree,
    segments: &Segments,
    id: &str,
) -> Result<Option<Found>, StorageError> {
    match tree.get(receipt_key(id)).map_err(|e| read_err(&e))? {
        Some(value) => found(segments, &value),
        None => Ok(None),
    }
}

/// Writes the bodies of `receipts` to the segment files and stages their sled values (each
/// with its leaf in the receipt log, when given) and the segments' new end, before `batch`
/// is applied (see [`super::segments`]).
fn store_receipts(
    segments: &Segments,
    batch: &mut sled::Batch,
    receipts: &[(&Receipt, Option<u64>)],
) -> Result<(), StorageError> {
    if receipts.is_empty() {
        return Ok(());
    }
    let bodies = receipts
        .iter()
        .map(|(r, _)| encode(*r))
        .collect::<Result<Vec<_>, _>>()?;
    let places = segments
        .append(&bodies)
        .map_err(|e| io_error(ErrorSubject::StateMachine, ErrorVerb::Write, &e))?;
    for ((receipt, leaf), place) in receipts.iter().zip(places) {
        let stored = Stored {
            place,
            index: receipt.index,
            asked: receipt.asked.is_some(),
            leaf: *leaf,
        };
        batch.insert(receipt_key(&receipt.id), stored.encode());
    }
    batch.insert(RECEIPTS_END, &segments.end().encode()[..]);
    Ok(())
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

fn receipt_by_time(receipt: &Receipt) -> Vec<u8> {
    let started = parse_ms(&receipt.started_at).unwrap_or(0);
    [
        RECEIPT_BY_TIME,
        &started.to_be_bytes(),
        receipt.id.as_bytes(),
    ]
    .concat()
}

/// Stages a receipt's two indexes; its value goes in with its body ([`store_receipts`]).
fn stage_receipt(batch: &mut sled::Batch, receipt: &Receipt) {
    batch.insert(
        receipt_by_key(&receipt.key, receipt.index, &receipt.id),
        &[] as &[u8],
    );
    batch.insert(receipt_by_time(receipt), &[] as &[u8]);
}

/// Stages the removal of a stored receipt and its indexes: the one way a receipt leaves the
/// state (retention), so whatever must outlive a dropped receipt is kept here. Its body's
/// place, if it has one, joins `released`, handed to [`Segments::release`] once the batch
/// is applied.
fn drop_receipt(
    batch: &mut sled::Batch,
    receipt: &Receipt,
    place: Option<Place>,
    leaf: Option<u64>,
    released: &mut Vec<Place>,
) {
    batch.remove(receipt_by_key(&receipt.key, receipt.index, &receipt.id));
    batch.remove(receipt_by_time(receipt));
    batch.remove(receipt_key(&receipt.id));
    // Its leaf stays in the log, found by its id from now on under `x/n/`.
    if let Some(leaf) = leaf {
        transparency::keep_leaf_of(batch, &receipt.id, leaf);
    }
    released.extend(place);
}

/// The keys of a tree scan and of a sorted list merged in scan order (descending when the
/// scan runs backwards); the list's keys are not in the tree.
fn merge_keys(
    tree: impl Iterator<Item = sled::Result<sled::IVec>>,
    staged: Vec<Vec<u8>>,
    descending: bool,
) -> impl Iterator<Item = sled::Result<Vec<u8>>> {
    let mut tree = tree.peekable();
    let mut staged: std::collections::VecDeque<Vec<u8>> = staged.into();
    std::iter::from_fn(move || {
        let next_staged = if descending {
            staged.back()
        } else {
            staged.front()
        };
        let take_staged = match (tree.peek(), next_staged) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(Err(_)), Some(_)) => false,
            (Some(Ok(key)), Some(candidate)) => (candidate.as_slice() < key.as_ref()) != descending,
        };
        if take_staged {
            if descending {
                staged.pop_back().map(Ok)
            } else {
                staged.pop_front().map(Ok)
            }
        } else {
            tree.next().map(|key| key.map(|k| k.to_vec()))
        }
    })
}

pub(crate) fn alarm_key(node: u64) -> Vec<u8> {
    [ALARM, &node.to_be_bytes()[..]].concat()
}

/// Every storage alarm held, in node order.
pub(crate) fn read_alarms(tree: &sled::Tree) -> Result<Vec<StorageAlarm>, String> {
    tree.scan_prefix(ALARM)
        .map(|item| {
            let (_, bytes) = item.map_err(|e| e.to_string())?;
            serde_json::from_slice(&bytes).map_err(|e| e.to_string())
        })
        .collect()
}

fn revoked_key(id: &str) -> Vec<u8> {
    [SHARE_REVOKED, id.as_bytes()].concat()
}

fn encode(value: &impl Serialize) -> Result<Vec<u8>, StorageError> {
    serde_json::to_vec(value)
        .map_err(|e| io_error(ErrorSubject::StateMachine, ErrorVerb::Write, &e))
}

fn read_err(e: &(impl std::error::Error + 'static)) -> StorageError {
    io_error(ErrorSubject::StateMachine, ErrorVerb::Read, e)
}

fn write_err(e: &(impl std::error::Error + 'static)) -> StorageError {
    io_error(ErrorSubject::StateMachine, ErrorVerb::Write, e)
}

/// The state machine; one per node.
pub struct StateMachine {
    storage: Durable,
    tree: sled::Tree,
    snapshots: Folder,
    catalogue: SharedCatalogue,
    applied_tx: Arc<watch::Sender<u64>>,
    last_applied: Option<LogId>,
    membership: Membership,
    /// Leaves of the receipt log as of the published index.
    log_published: Arc<std::sync::atomic::AtomicU64>,
    /// Snapshot builds under way, holding the receipts pruned since their cut.
    holds: snapshot::Holds,
    /// Receipts whose bodies are missing at open, until restored from the log.
    missing: Vec<(String, Stored)>,
}

/// Read access to what the state machine stores but does not keep in memory. Receipts are
/// shown once their index is published (applied and durable), like the catalogue.
#[derive(Clone)]
pub struct ReceiptReader {
    tree: sled::Tree,
    segments: Segments,
    tree_file: TreeFile,
    applied: watch::Receiver<u64>,
    log_published: Arc<std::sync::atomic::AtomicU64>,
}

impl ReceiptReader {
    fn published(&self, receipt: Receipt) -> Option<Receipt> {
        (receipt.index <= *self.applied.borrow()).then_some(receipt)
    }

    /// One receipt by id.
    pub fn get(&self, id: &str) -> Result<Option<Receipt>, ReadError> {
        let Some(value) = self.tree.get(receipt_key(id))? else {
            return Ok(None);
        };
        match receipt_bytes(&self.segments, &value)? {
            Some(bytes) => Ok(self.published(serde_json::from_slice(&bytes)?)),
            None => Ok(None),
        }
    }

    /// The receipts of one row, newest first, at most `limit`.
    pub fn by_key(&self, key: &str, limit: usize) -> Result<Vec<Receipt>, ReadError> {
        let prefix = [RECEIPT_BY_KEY, key.as_bytes(), b"/"].concat();
        let mut out = Vec::new();
        for item in self.tree.scan_prefix(&prefix).rev() {
            if out.len() >= limit {
                break;
            }
            let (k, _) = item?;
            let id = k
                .get(prefix.len() + 8..)
                .and_then(|id| std::str::from_utf8(id).ok())
                .unwrap_or_default();
            if let Some(receipt) = self.get(id)? {
                out.push(receipt);
            }
        }
        Ok(out)
    }

    /// The receipt log: its tree, checkpoints and proofs.
    pub fn log(&self) -> transparency::LogReader {
        transparency::LogReader::new(
            self.tree.clone(),
            self.tree_file.clone(),
            self.log_published.clone(),
        )
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

    /// The cluster's share keys (the current secret, and the one a planned rotation kept).
    pub fn share_keys(&self) -> Result<Option<ShareKeys>, ReadError> {
        let Some(current) = self.share_secret()? else {
            return Ok(None);
        };
        let previous = match self.tree.get(SHARE_PREVIOUS)? {
            Some(bytes) => Some(serde_json::from_slice(&bytes)?),
            None => None,
        };
        Ok(Some(ShareKeys { current, previous }))
    }

    /// The storage alarms members hold, in node order.
    pub fn alarms(&self) -> Result<Vec<StorageAlarm>, ReadError> {
        let mut alarms = Vec::new();
        for item in self.tree.scan_prefix(ALARM) {
            let (_, bytes) = item?;
            alarms.push(serde_json::from_slice(&bytes)?);
        }
        Ok(alarms)
    }

    /// Whether the share token `id` was revoked.
    pub fn share_revoked(&self, id: &str) -> Result<bool, ReadError> {
        Ok(self.tree.contains_key(revoked_key(id))?)
    }

    /// How many receipts are published and a SHA-256 over all of them in id order, for
    /// comparing nodes' receipt logs (a full scan: an operator's tool, not a hot path).
    pub fn digest(&self) -> Result<(usize, String), ReadError> {
        use sha2::{Digest, Sha256};
        let upto = *self.applied.borrow();
        let mut hasher = Sha256::new();
        let mut count = 0;
        for item in self.tree.scan_prefix(RECEIPT) {
            let (_, value) = item?;
            let Some(bytes) = receipt_bytes(&self.segments, &value)? else {
                continue;
            };
            let receipt: Receipt = serde_json::from_slice(&bytes)?;
            if receipt.index > upto {
                continue;
            }
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
    /// A receipt body could not be read from its segment file.
    #[error("receipt segments: {0}")]
    Segment(#[from] std::io::Error),
}

/// A catalogue change, published once its batch is durable.
enum Change {
    Put(Arc<Row>),
    Delete {
        key: String,
        index: u64,
    },
    /// A receipt that carries its ask was stored (1) or pruned (-1): the resolver learns or
    /// forgets the ask's words for the row.
    Learn {
        key: String,
        asked: String,
        delta: i32,
    },
}

/// What one apply batch changes, staged until it is durable.
#[derive(Default)]
struct Stage {
    batch: sled::Batch,
    /// The latest staged value of each row written in the batch (`None`: deleted).
    rows: HashMap<String, Option<Arc<Row>>>,
    changes: Vec<Change>,
    /// Receipts written earlier in the batch (not yet in sled).
    receipts: HashMap<String, Receipt>,
    /// The share secret written earlier in the batch, if any.
    secret: Option<ShareSecret>,
    /// Request ids applied earlier in the batch, by caller.
    requests: HashMap<(Option<String>, RequestId), Record>,
    /// Receipts dropped earlier in the batch (still in the tree until it is written).
    dropped: std::collections::HashSet<String>,
    /// Where the bodies of the receipts dropped in the batch are, released once it is
    /// applied.
    released: Vec<Place>,
    /// The receipt log's leaves and signatures staged in the batch.
    log: transparency::LogStage,
    /// A membership applied earlier in the batch.
    membership: Option<Membership>,
}

impl Stage {
    /// The row as the entry being applied sees it: staged in this batch, else published.
    fn row(&self, catalogue: &SharedCatalogue, key: &str) -> Option<Arc<Row>> {
        match self.rows.get(key) {
            Some(staged) => staged.clone(),
            None => catalogue.read().get(key),
        }
    }
}

/// Whether two receipts are the same invocation (the one stored has its index set).
fn same_receipt(stored: &Receipt, proposed: &Receipt) -> bool {
    let unindexed = |r: &Receipt| Receipt {
        index: 0,
        ..r.clone()
    };
    unindexed(stored) == unindexed(proposed)
}

/// The snapshots of the state machine stored in a database, for readers beside Raft (a
/// backup): which one is current, its file opened.
pub struct SnapshotReader {
    tree: sled::Tree,
    folder: Folder,
}

impl SnapshotReader {
    /// The snapshots of the state machine in `storage`, with their files in `snapshots`.
    pub fn open(storage: &Durable, snapshots: &Path) -> Result<Self, StorageError> {
        Ok(Self {
            tree: storage.db().open_tree(TREE).map_err(|e| read_err(&e))?,
            folder: Folder::open(snapshots).map_err(|e| read_err(&e))?,
        })
    }

    /// The current snapshot, if there is one.
    pub async fn current(&self) -> Result<Option<Snapshot>, StorageError> {
        snapshot::current(&self.tree, &self.folder).await
    }
}

impl StateMachine {
    /// Opens the state machine tree and the snapshot folder `snapshots` (finishing an
    /// install a crash interrupted, moving an older layout's snapshot into a file, removing
    /// leftover files) and publishes the stored state to the catalogue.
    pub fn open(
        storage: &Durable,
        snapshots: &Path,
        catalogue: SharedCatalogue,
    ) -> Result<Self, StorageError> {
        let tree = storage.db().open_tree(TREE).map_err(|e| read_err(&e))?;
        let folder = Folder::open(snapshots).map_err(|e| read_err(&e))?;
        snapshot::migrate(&tree, &folder)?;
        let segments = storage.segments();
        let mut missing = recover_segments(&tree, segments)?;
        if tree.contains_key(INSTALLING).map_err(|e| read_err(&e))? {
            // The install replaces every receipt: one whose body is missing is taken from
            // the snapshot if it holds it, and dropped otherwise.
            forget(&tree, segments, &missing)?;
            missing.clear();
            install::resume(&tree, segments, storage.tree_file(), &folder)?;
        }
        let current = snapshot::current_name(&tree)?;
        let removed = folder
            .remove_all_but(current.as_ref().map(|c| c.file.as_str()))
            .map_err(|e| read_err(&e))?;
        if removed > 0 {
            tracing::info!(removed, "removed snapshot files a crash left behind");
        }
        index_receipt_times(&tree, segments)?;
        if !transparency::has_log(&tree)? {
            let leaves = transparency::rebuild(&tree, segments, storage.tree_file())?;
            tracing::info!(
                leaves,
                "built the receipt log's Merkle tree from the stored receipts"
            );
        }
        let computed = transparency::recover(&tree, storage.tree_file())?;
        if computed > 0 {
            tracing::info!(
                leaves = computed,
                "computed the receipt log's newest hashes again from the stored leaves"
            );
        }
        let read = |key: &[u8]| tree.get(key).map_err(|e| read_err(&e));
        let last_applied: Option<LogId> = match read(APPLIED)? {
            Some(b) => serde_json::from_slice(&b).map_err(|e| read_err(&e))?,
            None => None,
        };
        let membership: Membership = match read(MEMBERSHIP)? {
            Some(b) => serde_json::from_slice(&b).map_err(|e| read_err(&e))?,
            None => Membership::default(),
        };
        let mut rows = Vec::new();
        for item in tree.scan_prefix(ROW) {
            let (key, bytes) = item.map_err(|e| read_err(&e))?;
            match serde_json::from_slice::<Row>(&bytes) {
                Ok(row) => rows.push(row),
                // Re-publishing at start runs on every node: a stored row that no longer
                // decodes (written by another version, or damaged) must not stop every node
                // from starting. It stays stored (a later write of the key replaces it) and
                // the operator hears of it.
                Err(error) => {
                    let key = String::from_utf8_lossy(key.get(ROW.len()..).unwrap_or_default());
                    tracing::error!(%key, %error, "a stored row does not decode; it is not published");
                    metrics::counter!(crate::metrics::ROWS_UNPUBLISHABLE_TOTAL).increment(1);
                }
            }
        }
        let applied_index = last_applied.map_or(0, |l| l.index);
        let log_published = Arc::new(std::sync::atomic::AtomicU64::new(
            transparency::read_size(&tree).map_err(|e| read_err(&e))?,
        ));
        if !missing.is_empty() {
            tracing::warn!(
                receipts = missing.len(),
                "receipt bodies past the end of their segment file (a power loss); they are \
                 written again from the Raft log before the node serves"
            );
        }
        let asked = asked_receipts(&tree, segments, &missing)?;
        {
            let mut published = catalogue.write();
            published.replace_all(rows);
            for (key, words) in &asked {
                published.learn(key, words, 1);
            }
            catalogue.publish_index(applied_index);
        }
        Ok(Self {
            storage: storage.clone(),
            tree,
            snapshots: folder,
            catalogue,
            applied_tx: Arc::new(watch::Sender::new(applied_index)),
            last_applied,
            membership,
            log_published,
            holds: snapshot::Holds::default(),
            missing,
        })
    }

    /// The indexes of the Raft log entries that appended receipts whose bodies a power loss
    /// took (see [`super::segments`], "Recovery argument"): [`StateMachine::restore_bodies`]
    /// must write them again from those entries before the node serves.
    pub fn missing_bodies(&self) -> Vec<u64> {
        let mut indexes: Vec<u64> = self.missing.iter().map(|m| m.1.index).collect();
        indexes.sort_unstable();
        indexes.dedup();
        indexes
    }

    /// Writes the missing receipt bodies again from `entries`, the Raft log's entries at
    /// [`StateMachine::missing_bodies`]' indexes: each receipt as the entry proposed it, with
    /// its index set as apply set it, checked against the length and checksum its stored
    /// value kept. Fails, naming the receipt, when an entry is not given or does not hold
    /// it.
    pub async fn restore_bodies(&mut self, entries: &[Entry]) -> Result<(), StorageError> {
        let by_index: HashMap<u64, &Entry> = entries.iter().map(|e| (e.log_id.index, e)).collect();
        let mut restored = Vec::new();
        for (id, stored) in &self.missing {
            let lost = |why: &str| {
                read_err(&snapshot::SnapshotError(format!(
                    "receipt {id}'s body was lost with a power loss and cannot be written again: \
                     {why}; restore this member from its peers (wipe its data folder and \
                     rejoin it, see the runbooks)"
                )))
            };
            let entry = by_index
                .get(&stored.index)
                .ok_or_else(|| lost(&format!("the log no longer holds entry {}", stored.index)))?;
            let EntryPayload::Normal(request) = &entry.payload else {
                return Err(lost(&format!("entry {} is not a request", stored.index)));
            };
            let mut receipt = proposed_receipt(&request.command, id)
                .ok_or_else(|| lost(&format!("entry {} does not hold it", stored.index)))?;
            receipt.index = stored.index;
            let bytes = encode(&receipt)?;
            if bytes.len() != stored.place.len as usize
                || crc32fast::hash(&bytes) != stored.place.crc
            {
                return Err(lost(&format!(
                    "entry {} holds it with other bytes than were stored",
                    stored.index
                )));
            }
            restored.push((receipt, *stored));
        }
        restored.sort_by(|a, b| (a.0.index, &a.0.id).cmp(&(b.0.index, &b.0.id)));
        let receipts: Vec<(&Receipt, Option<u64>)> = restored
            .iter()
            .map(|(r, stored)| (r, stored.leaf))
            .collect();
        let mut batch = sled::Batch::default();
        store_receipts(self.storage.segments(), &mut batch, &receipts)?;
        self.tree
            .apply_batch(batch)
            .map_err(|e| io_error(ErrorSubject::StateMachine, ErrorVerb::Write, &e))?;
        let lost: Vec<Place> = restored.iter().map(|(_, stored)| stored.place).collect();
        self.storage.segments().release(&lost);
        self.sync(ErrorSubject::StateMachine).await?;
        {
            let mut catalogue = self.catalogue.write();
            for (receipt, _) in &restored {
                if let Some(asked) = &receipt.asked {
                    catalogue.learn(&receipt.key, asked, 1);
                }
            }
        }
        tracing::info!(
            receipts = restored.len(),
            "receipt bodies written again from the Raft log"
        );
        self.missing.clear();
        Ok(())
    }

    /// A watch of the applied index, for read-your-writes waits. It moves after the
    /// catalogue shows the index, so a waiter woken by it reads what it waited for.
    pub fn applied_index(&self) -> watch::Receiver<u64> {
        self.applied_tx.subscribe()
    }

    /// A reader for the receipt log's tree, checkpoints and proofs.
    pub fn log(&self) -> transparency::LogReader {
        transparency::LogReader::new(
            self.tree.clone(),
            self.storage.tree_file().clone(),
            self.log_published.clone(),
        )
    }

    /// A reader for receipts.
    pub fn receipts(&self) -> ReceiptReader {
        ReceiptReader {
            tree: self.tree.clone(),
            segments: self.storage.segments().clone(),
            tree_file: self.storage.tree_file().clone(),
            applied: self.applied_tx.subscribe(),
            log_published: self.log_published.clone(),
        }
    }

    /// Applies one request at `index`: a repeat of a remembered request id answers with the
    /// first outcome; anything else is applied and remembered under its id.
    fn apply_request(
        &self,
        request: Request,
        index: u64,
        stage: &mut Stage,
    ) -> Result<CommandResult, StorageError> {
        let Request {
            request_id,
            caller,
            command,
            ..
        } = request;
        let Some(id) = request_id else {
            return self.apply_command(command, index, stage);
        };
        let fingerprint = command.fingerprint();
        let scoped = (caller.clone(), id.clone());
        // A caller's key that has no record of its own may have one from before callers
        // were carried (see `requests`, "Scoped per caller"): staged ones too.
        let unscoped = (None, id.clone());
        let staged = stage.requests.get(&scoped).or_else(|| {
            caller
                .is_some()
                .then(|| stage.requests.get(&unscoped))
                .flatten()
        });
        // A record staged at this same index is an earlier write of the same batched entry
        // (the batcher groups writes from many clients, and a retry can meet its first
        // attempt in one batch): it is a repeat too, though the window counts from the next
        // entry. A stored record at this index is never one: an entry is applied once.
        let (earlier, same_entry) = match staged {
            Some(record) => (Some(record.clone()), record.index == index),
            None => (requests::latest(&self.tree, caller.as_deref(), &id)?, false),
        };
        if let Some(first) = earlier.filter(|r| same_entry || r.remembered_at(index)) {
            return Ok(if first.fingerprint == fingerprint {
                CommandResult::Replayed {
                    index: first.index,
                    first: Box::new(first.result),
                }
            } else {
                CommandResult::RequestIdReused {
                    request_id: id,
                    index: first.index,
                }
            });
        }
        let result = self.apply_command(command, index, stage)?;
        let record = Record {
            id,
            caller,
            index,
            fingerprint,
            result: result.clone(),
        };
        requests::remember(&mut stage.batch, &record)?;
        stage.requests.insert(scoped, record);
        Ok(result)
    }

    /// Applies one command at `index`, staging its writes.
    fn apply_command(
        &self,
        command: Command,
        index: u64,
        stage: &mut Stage,
    ) -> Result<CommandResult, StorageError> {
        match command {
            // Each write as if in its own entry at this index; the batcher put no two
            // writes of one row together, so every version still names one content.
            Command::Batch { requests } => {
                let results = requests
                    .into_iter()
                    .map(|request| self.apply_request(request, index, stage))
                    .collect::<Result<_, _>>()?;
                Ok(CommandResult::Batch { results })
            }
            Command::PutRows { at_ms, rows } => {
                // All or nothing: every if_version is checked before anything is staged.
                for input in &rows {
                    if let Some(expected) = input.if_version {
                        let actual = stage.row(&self.catalogue, &input.key).map(|r| r.version);
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
                let mut outcomes = Vec::with_capacity(rows.len());
                for input in rows {
                    let existing = stage.row(&self.catalogue, &input.key);
                    let row = Arc::new(stored_row(input, index, at_ms, existing.as_deref()));
                    stage.batch.insert(row_key(&row.key), encode(&*row)?);
                    outcomes.push(PutOutcome {
                        key: row.key.clone(),
                        version: index,
                        created: existing.is_none(),
                        updated_at: row.updated_at.to_string(),
                    });
                    stage.rows.insert(row.key.clone(), Some(row.clone()));
                    stage.changes.push(Change::Put(row));
                }
                Ok(CommandResult::Put { rows: outcomes })
            }
            Command::DeleteRow { key, if_version } => {
                let actual = stage.row(&self.catalogue, &key).map(|r| r.version);
                if let Some(expected) = if_version {
                    if actual != Some(expected) {
                        return Ok(CommandResult::Conflict {
                            key,
                            expected,
                            actual,
                        });
                    }
                }
                stage.batch.remove(row_key(&key));
                if actual.is_some() {
                    stage.rows.insert(key.clone(), None);
                    stage.changes.push(Change::Delete { key, index });
                }
                Ok(CommandResult::Deleted {
                    deleted: u32::from(actual.is_some()),
                })
            }
            Command::AppendReceipt { receipt } => {
                let mut receipt = *receipt;
                let earlier = match stage.receipts.get(&receipt.id) {
                    Some(staged) => Some(staged.clone()),
                    None => read_receipt(&self.tree, self.storage.segments(), &receipt.id)?
                        .map(|found| found.receipt),
                };
                if let Some(existing) = earlier {
                    // The same receipt again (an outbox delivers at least once) is a no-op; a
                    // different one under a taken id is refused, never silently dropped.
                    return Ok(if same_receipt(&existing, &receipt) {
                        CommandResult::ReceiptAppended {
                            id: existing.id,
                            index: existing.index,
                        }
                    } else {
                        CommandResult::ReceiptIdTaken { id: receipt.id }
                    });
                }
                receipt.index = index;
                stage_receipt(&mut stage.batch, &receipt);
                self.stage_leaf(&receipt, stage);
                if let Some(asked) = &receipt.asked {
                    stage.changes.push(Change::Learn {
                        key: receipt.key.clone(),
                        asked: asked.clone(),
                        delta: 1,
                    });
                }
                let id = receipt.id.clone();
                stage.receipts.insert(id.clone(), receipt);
                Ok(CommandResult::ReceiptAppended { id, index })
            }
            Command::SetShareSecret { secret } => {
                // The first secret wins; a later proposal (a race between two nodes minting
                // their first token) is a no-op. Two in one batch: the first one wins too.
                let stored = self
                    .tree
                    .contains_key(SHARE_SECRET)
                    .map_err(|e| read_err(&e))?;
                if !stored && stage.secret.is_none() {
                    stage.batch.insert(SHARE_SECRET, encode(&secret)?);
                    stage.secret = Some(secret);
                }
                Ok(CommandResult::Applied)
            }
            Command::RotateShareSecret {
                secret,
                keep_previous,
            } => {
                let replaced = match stage.secret.clone() {
                    Some(staged) => Some(staged),
                    None => match self.tree.get(SHARE_SECRET).map_err(|e| read_err(&e))? {
                        Some(bytes) => serde_json::from_slice(&bytes).ok(),
                        None => None,
                    },
                };
                match replaced.filter(|_| keep_previous) {
                    Some(previous) => stage.batch.insert(SHARE_PREVIOUS, encode(&previous)?),
                    None => stage.batch.remove(SHARE_PREVIOUS),
                }
                stage.batch.insert(SHARE_SECRET, encode(&secret)?);
                stage.secret = Some(secret);
                Ok(CommandResult::Applied)
            }
            Command::PruneReceipts {
                before_ms,
                max_age_ms,
                keep_per_key,
                limit,
            } => {
                // Never past the log's own time less the age, whatever the proposer's clock
                // said (entries of proposers that do not send the age keep their cut-off).
                let before_ms = match max_age_ms {
                    0 => before_ms,
                    age => crate::model::retention::cut_off(
                        before_ms,
                        age,
                        self.receipt_log_time(stage)?,
                    ),
                };
                self.prune(before_ms, keep_per_key, limit, stage)
            }
            Command::Cosign {
                node,
                size,
                root,
                signature,
            } => self.cosign(node, size, &root, &signature, stage),
            Command::Alarm { node, alarm } => {
                match alarm {
                    // The key is the member's, whatever the body says.
                    Some(alarm) => stage
                        .batch
                        .insert(alarm_key(node), encode(&StorageAlarm { node, ..alarm })?),
                    None => stage.batch.remove(alarm_key(node)),
                }
                Ok(CommandResult::Applied)
            }
            Command::RevokeShare { id, at_ms } => {
                let revocation = Revocation { id, at_ms };
                stage
                    .batch
                    .insert(revoked_key(&revocation.id), encode(&revocation)?);
                Ok(CommandResult::Applied)
            }
        }
    }

    /// Stages the removal of receipts under the retention policy (see
    /// [`Command::PruneReceipts`]): first by age, oldest first, then each key's surplus,
    /// oldest first; at most `limit`. Receipts staged in this batch are never candidates:
    /// they are not in the tree yet.
    fn prune(
        &self,
        before_ms: u64,
        keep_per_key: u32,
        limit: u32,
        stage: &mut Stage,
    ) -> Result<CommandResult, StorageError> {
        let mut doomed: Vec<String> = Vec::new();
        let mut more = false;
        // Receipts appended earlier in this apply batch are not in the tree yet: merged into
        // both scans in key order, so a prune drops the same receipts however the entries
        // before it were batched (a node applying them one by one finds them in the tree).
        let staged = |index: fn(&Receipt) -> Vec<u8>| {
            let mut keys: Vec<Vec<u8>> = stage
                .receipts
                .values()
                .filter(|r| !stage.dropped.contains(&r.id))
                .map(index)
                .collect();
            keys.sort();
            keys
        };
        if before_ms > 0 {
            let tree = self.tree.scan_prefix(RECEIPT_BY_TIME).keys();
            for key in merge_keys(tree, staged(receipt_by_time), false) {
                let key = key.map_err(|e| read_err(&e))?;
                let rest = &key[RECEIPT_BY_TIME.len()..];
                let Some((started, id)) = rest.split_at_checked(8) else {
                    continue;
                };
                let started = u64::from_be_bytes(started.try_into().unwrap_or([0; 8]));
                if started >= before_ms {
                    break;
                }
                let id = String::from_utf8_lossy(id).into_owned();
                if stage.dropped.contains(&id) {
                    continue;
                }
                if doomed.len() == limit as usize {
                    more = true;
                    break;
                }
                doomed.push(id);
            }
        }
        if keep_per_key > 0 && !more {
            // Newest first within each key: skip the first `keep_per_key` of every key.
            let (mut group, mut seen): (Vec<u8>, u32) = (Vec::new(), 0);
            let tree = self.tree.scan_prefix(RECEIPT_BY_KEY).keys().rev();
            let by_key = |r: &Receipt| receipt_by_key(&r.key, r.index, &r.id);
            for key in merge_keys(tree, staged(by_key), true) {
                let key = key.map_err(|e| read_err(&e))?;
                // `k/<KEY>/<index:be8><id>`: row keys hold no '/', the index bytes may.
                let entry = &key[RECEIPT_BY_KEY.len()..];
                let Some(slash) = entry.iter().position(|b| *b == b'/') else {
                    continue;
                };
                let (name, rest) = entry.split_at(slash);
                if name != group.as_slice() {
                    group = name.to_vec();
                    seen = 0;
                }
                let id = String::from_utf8_lossy(rest.get(1 + 8..).unwrap_or_default());
                if stage.dropped.contains(id.as_ref()) {
                    continue;
                }
                seen += 1;
                if seen <= keep_per_key || doomed.iter().any(|d| *d == id) {
                    continue;
                }
                if doomed.len() == limit as usize {
                    more = true;
                    break;
                }
                doomed.push(id.into_owned());
            }
        }
        let mut dropped = 0;
        for id in &doomed {
            // One appended in this batch has its leaf staged, not stored: the batch writes
            // it under `x/n/` when no stored value takes it (`keep_untaken_leaves`).
            let Found {
                receipt,
                bytes,
                place,
                leaf,
            } = match stage.receipts.remove(id) {
                Some(receipt) => Found {
                    bytes: encode(&receipt)?,
                    receipt,
                    place: None,
                    leaf: None,
                },
                None => match read_receipt(&self.tree, self.storage.segments(), id)? {
                    Some(found) => found,
                    None => continue,
                },
            };
            // Before the batch that deletes it is written: a build whose cut holds it may
            // not have read it yet (see `snapshot`, "A consistent cut").
            self.holds.hold(&receipt.id, receipt.index, &bytes);
            drop_receipt(&mut stage.batch, &receipt, place, leaf, &mut stage.released);
            if let Some(asked) = &receipt.asked {
                stage.changes.push(Change::Learn {
                    key: receipt.key.clone(),
                    asked: asked.clone(),
                    delta: -1,
                });
            }
            stage.dropped.insert(receipt.id);
            dropped += 1;
        }
        Ok(CommandResult::Pruned { dropped, more })
    }

    /// Shows a durable batch: its catalogue changes and its index under one write lock (so
    /// no reader sees one without the other), then the watch.
    fn publish(&self, changes: Vec<Change>, index: u64, log_size: u64) {
        {
            let mut catalogue = self.catalogue.write();
            for change in changes {
                match change {
                    Change::Put(row) => catalogue.put(Arc::unwrap_or_clone(row)),
                    Change::Delete { key, index } => {
                        catalogue.remove_at(&key, index);
                    }
                    Change::Learn { key, asked, delta } => catalogue.learn(&key, &asked, delta),
                }
            }
            self.catalogue.publish_index(index);
        }
        self.log_published
            .store(log_size, std::sync::atomic::Ordering::Release);
        self.applied_tx.send_replace(index);
    }

    async fn sync(&self, subject: ErrorSubject<TypeConfig>) -> Result<(), StorageError> {
        self.storage
            .sync()
            .await
            .map_err(|e| io_error(subject, ErrorVerb::Write, &e))
    }
}

/// The stored form of a written row: server fields from the entry and the previous version.
/// `updated_at` never goes back: a proposer whose clock is behind the last writer's gets the
/// last writer's time.
fn stored_row(input: RowInput, index: u64, at_ms: u64, existing: Option<&Row>) -> Row {
    let previous = existing.and_then(|r| r.updated_at.ms()).unwrap_or(0);
    let at = Stamp::from_ms(at_ms.max(previous));
    let created_at = existing.map_or_else(|| at.clone(), |r| r.created_at.clone());
    Row::stored(input, index, created_at, at)
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotData = SnapshotFile;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, Membership), std::io::Error> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<Strm>(&mut self, entries: Strm) -> Result<(), std::io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, std::io::Error>>
            + Unpin
            + OptionalSend,
    {
        // One batch for all openraft hands over at once; each proposer is answered after
        // the batch is published, so an answered write is visible on this node.
        let (entries, responders): (Vec<_>, Vec<_>) =
            entries.try_collect::<Vec<_>>().await?.into_iter().unzip();
        let results = self.apply_entries(entries).await?;
        for (responder, result) in responders.into_iter().zip(results) {
            if let Some(responder) = responder {
                responder.send(result);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.snapshot_builder()
    }

    async fn install_snapshot(
        &mut self,
        meta: &Meta,
        snapshot: SnapshotFile,
    ) -> Result<(), std::io::Error> {
        Ok(self.install(meta, snapshot).await?)
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, std::io::Error> {
        Ok(snapshot::current(&self.tree, &self.snapshots).await?)
    }
}

impl StateMachine {
    /// Applies `entries` as one batch: one sled batch, published at once; returns each
    /// entry's result, in order.
    pub async fn apply_entries(
        &mut self,
        entries: impl IntoIterator<Item = Entry>,
    ) -> Result<Vec<CommandResult>, StorageError> {
        let mut stage = Stage::default();
        let mut results = Vec::new();
        let mut last = None;
        let mut membership = None;
        for entry in entries {
            last = Some(entry.log_id);
            let result = match entry.payload {
                EntryPayload::Blank => CommandResult::Applied,
                EntryPayload::Membership(m) => {
                    let stored = StoredMembership::new(Some(entry.log_id), m);
                    stage.batch.insert(MEMBERSHIP, encode(&stored)?);
                    stage.membership = Some(stored.clone());
                    membership = Some(stored);
                    CommandResult::Applied
                }
                EntryPayload::Normal(request) => {
                    self.apply_request(request, entry.log_id.index, &mut stage)?
                }
            };
            self.finish_entry(&mut stage)?;
            results.push(result);
        }
        let Some(last) = last else {
            return Ok(results);
        };
        self.finish_log(&mut stage)?;
        stage.batch.insert(APPLIED, encode(&last)?);
        let log_size = match stage.log.size() {
            Some(size) => size,
            None => self
                .log_published
                .load(std::sync::atomic::Ordering::Acquire),
        };
        // The batch's receipts, bodies first (in log order), then their values in the batch.
        let mut receipts: Vec<(&Receipt, Option<u64>)> = stage
            .receipts
            .values()
            .map(|r| (r, stage.log.take_leaf(&r.id)))
            .collect();
        receipts.sort_by(|a, b| (a.0.index, &a.0.id).cmp(&(b.0.index, &b.0.id)));
        store_receipts(self.storage.segments(), &mut stage.batch, &receipts)?;
        stage.log.keep_untaken_leaves(&mut stage.batch);
        stage.log.write_hashes(self.storage.tree_file())?;
        let Stage {
            batch,
            changes,
            released,
            ..
        } = stage;
        self.tree
            .apply_batch(batch)
            .map_err(|e| io_error(ErrorSubject::StateMachine, ErrorVerb::Write, &e))?;
        self.storage.segments().release(&released);
        // No sync: the entries are durable in the log (see "Apply" above).
        self.last_applied = Some(last);
        if let Some(membership) = membership {
            self.membership = membership;
        }
        self.publish(changes, last.index, log_size);
        Ok(results)
    }

    /// A new file in the snapshot folder to receive a snapshot into (a leader's, or a
    /// backup's), for [`RaftStateMachine::install_snapshot`]. Any earlier file left
    /// unfinished is removed.
    pub async fn receive_file(&self) -> Result<SnapshotFile, StorageError> {
        self.snapshots
            .receive_file()
            .await
            .map_err(|e| snapshot::fail(ErrorVerb::Write)(&e))
    }

    fn snapshot_builder(&self) -> SnapshotBuilder {
        // Capture what is in memory now: building runs concurrently with later applies
        // (see `snapshot` for why the rest may be read later).
        SnapshotBuilder {
            storage: self.storage.clone(),
            tree: self.tree.clone(),
            folder: self.snapshots.clone(),
            share: read_share_state(&self.tree),
            alarms: read_alarms(&self.tree),
            log: transparency::snapshot_header(&self.tree, self.storage.tree_file()),
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            rows: self.catalogue.read().all_rows(),
            // Registered while apply cannot run (`&mut self`): every prune after the cut
            // holds what it deletes for this build.
            hold: self
                .holds
                .register(self.last_applied.map_or(0, |l| l.index)),
        }
    }
}

fn read_share_state(tree: &sled::Tree) -> Result<snapshot::ShareState, String> {
    let read = |key: &[u8]| -> Result<Option<ShareSecret>, String> {
        match tree.get(key).map_err(|e| e.to_string())? {
            Some(bytes) => Ok(Some(
                serde_json::from_slice(&bytes).map_err(|e| e.to_string())?,
            )),
            None => Ok(None),
        }
    };
    let (secret, previous) = (read(SHARE_SECRET)?, read(SHARE_PREVIOUS)?);
    let mut revoked = Vec::new();
    for item in tree.scan_prefix(SHARE_REVOKED) {
        let (_, bytes) = item.map_err(|e| e.to_string())?;
        revoked.push(serde_json::from_slice(&bytes).map_err(|e| e.to_string())?);
    }
    Ok(snapshot::ShareState {
        secret,
        previous,
        revoked,
    })
}

/// Brings the segment files in line with the applied state ([`Segments::recover`]) and
/// returns the stored receipts whose bodies are not there (see [`super::segments`],
/// "Recovery argument").
fn recover_segments(
    tree: &sled::Tree,
    segments: &Segments,
) -> Result<Vec<(String, Stored)>, StorageError> {
    let end = match tree.get(RECEIPTS_END).map_err(|e| read_err(&e))? {
        Some(bytes) => Some(End::decode(&bytes).ok_or_else(|| {
            read_err(&snapshot::SnapshotError(
                "the stored end of the receipt segments does not decode".into(),
            ))
        })?),
        None => None,
    };
    let mut live: HashMap<u32, u64> = HashMap::new();
    for item in tree.scan_prefix(RECEIPT) {
        let (_, value) = item.map_err(|e| read_err(&e))?;
        if let Some(stored) = Stored::decode(&value) {
            *live.entry(stored.place.segment).or_default() += 1;
        }
    }
    if end.is_none() && !live.is_empty() {
        // Never: the end goes in every batch that stores a place. Removing the files
        // would lose every body, so the node stops and says so.
        return Err(read_err(&snapshot::SnapshotError(
            "stored receipts point into segment files but no end of them is recorded".into(),
        )));
    }
    let recovered = segments.recover(end, live).map_err(|e| read_err(&e))?;
    let Some(end) = end.filter(|end| recovered.offset < end.offset) else {
        return Ok(Vec::new());
    };
    let mut missing = Vec::new();
    for item in tree.scan_prefix(RECEIPT) {
        let (key, value) = item.map_err(|e| read_err(&e))?;
        let Some(stored) = Stored::decode(&value) else {
            continue;
        };
        if stored.place.segment == end.segment && stored.place.end() > recovered.offset {
            let id = String::from_utf8_lossy(&key[RECEIPT.len()..]).into_owned();
            missing.push((id, stored));
        }
    }
    Ok(missing)
}

/// Removes the stored values of receipts whose bodies are missing (their indexes stay, and
/// the install that follows drops or replaces them with the rest).
fn forget(
    tree: &sled::Tree,
    segments: &Segments,
    missing: &[(String, Stored)],
) -> Result<(), StorageError> {
    if missing.is_empty() {
        return Ok(());
    }
    let mut batch = sled::Batch::default();
    for (id, _) in missing {
        batch.remove(receipt_key(id));
    }
    tree.apply_batch(batch).map_err(|e| read_err(&e))?;
    let places: Vec<Place> = missing.iter().map(|m| m.1.place).collect();
    segments.release(&places);
    Ok(())
}

/// The receipt `id` as `command` proposed it, if it did.
fn proposed_receipt(command: &Command, id: &str) -> Option<Receipt> {
    match command {
        Command::AppendReceipt { receipt } if receipt.id == id => Some((**receipt).clone()),
        Command::Batch { requests } => requests
            .iter()
            .find_map(|request| proposed_receipt(&request.command, id)),
        _ => None,
    }
}

/// Gives every stored receipt its `t/` entry, once, in a data folder written before the age
/// index existed (so the age rule sees old receipts too).
fn index_receipt_times(tree: &sled::Tree, segments: &Segments) -> Result<(), StorageError> {
    if tree.contains_key(TIME_INDEXED).map_err(|e| read_err(&e))? {
        return Ok(());
    }
    let mut batch = sled::Batch::default();
    for item in tree.scan_prefix(RECEIPT) {
        let (_, value) = item.map_err(|e| read_err(&e))?;
        if let Some(found) = found(segments, &value)? {
            batch.insert(receipt_by_time(&found.receipt), &[] as &[u8]);
        }
    }
    batch.insert(TIME_INDEXED, &[] as &[u8]);
    tree.apply_batch(batch).map_err(|e| read_err(&e))
}

mod build;
mod clock;
mod install;
#[cfg(test)]
mod tests;
pub mod transparency;
