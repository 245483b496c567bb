//! The receipt log as a transparency log (DESIGN §10): one RFC 9162 Merkle tree over every
//! receipt in the order Raft applies them, and checkpoints of it co-signed by the voters.
//!
//! # Stored
//!
//! In the state machine's tree, written in the same atomic batch as the receipts they
//! commit to:
//! - `x/l/<leaf:be8>` → the leaf's hash and its receipt id (`0`, 32 bytes, the id);
//! - a receipt's leaf index by its id: in the receipt's own stored value while it is kept
//!   and was stored by apply, else `x/n/<id>` → leaf index (written when retention drops
//!   it, and for every leaf by an install or a rebuild; see `Stored`);
//! - `x/size`: the number of leaves;
//! - `x/checkpoint`: the latest checkpoint a majority of voters signed ([`Cosigned`]);
//! - `x/pending`: signatures of newer sizes still short of a majority.
//!
//! The hash of every complete subtree (level 0: the leaves) is in a flat file beside sled
//! ([`crate::store::tree_file`]), so a root or a proof at any size is O(log² n) reads and an
//! append O(1) amortised writes. Everything in it can be computed again from the leaf hashes
//! above, which is how it recovers from a crash ([`recover`]). A data folder of format 4 kept
//! those hashes in sled (`x/h/<level:u8><index:be8>`) and the ids alone under `x/l/`;
//! [`recover`] moves it to this layout once.
//!
//! Retention drops a receipt's body, never its leaf: hashes, ids and proofs stay.
//!
//! # Order
//!
//! The receipts one log entry appends (a batch holds several) become leaves in id order
//! once the entry is applied. That order is a function of the log alone, so every node
//! builds the same tree, and it is the order an older data folder's receipts are rebuilt in
//! ((index, id): see [`rebuild`]).
//!
//! # Co-signing
//!
//! A node signs the checkpoint (origin, size, root) of a tree size it has applied and
//! proposes the signature ([`Command::Cosign`]). Apply checks it on every node: the signer is
//! a member with that public key, the signature verifies, and the root is this tree's root at
//! that size — so a node that signs another tree is refused by all the others, loudly. Once
//! a majority of the voters signed one size, it is the cluster's checkpoint.

use rowcall_proto::tlog::{self, Checkpoint, Hash, VerifierKey};
use serde::Deserialize;

use super::*;
use crate::raft::NodeId;
use crate::store::checkpoint::{
    base64_decode, base64_encode, key_name, origin, Cosigned, LogHeader, NodeSignature, Pending,
};
use crate::store::tree_file::{self, TreeFile};

const SIZE: &[u8] = b"x/size";
const HASH: &[u8] = b"x/h/";
const LEAF_ID: &[u8] = b"x/l/";
const LEAF_OF: &[u8] = b"x/n/";
const CHECKPOINT: &[u8] = b"x/checkpoint";
const PENDING: &[u8] = b"x/pending";
/// Every key of the transparency log.
pub(super) const PREFIX: &[u8] = b"x/";
/// Keys written (or leaves staged) per sled batch when the log is rebuilt or cleared.
const WRITE_BATCH: usize = 500;

/// A format 4 folder's key of a subtree's hash (see the module documentation).
fn hash_key(level: u8, index: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(HASH.len() + 9);
    key.extend_from_slice(HASH);
    key.push(level);
    key.extend_from_slice(&index.to_be_bytes());
    key
}

fn leaf_id_key(index: u64) -> Vec<u8> {
    crate::store::index_key(LEAF_ID, index)
}

fn leaf_of_key(id: &str) -> Vec<u8> {
    [LEAF_OF, id.as_bytes()].concat()
}

/// The tag of an `x/l/` value that holds the leaf's hash before its id (no id starts with a
/// NUL; a format 4 value is the id alone).
const LEAF_TAG: u8 = 0;

/// An `x/l/` value: the tag, the leaf's hash, the receipt id.
fn leaf_value(hash: &Hash, id: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(1 + hash.len() + id.len());
    value.push(LEAF_TAG);
    value.extend_from_slice(hash);
    value.extend_from_slice(id);
    value
}

/// The hash and receipt id in an `x/l/` value; `None` for a format 4 value (the id alone).
fn decode_leaf(value: &[u8]) -> Option<(Hash, &[u8])> {
    let rest = value.strip_prefix(&[LEAF_TAG])?;
    let hash = rest.get(..32)?.try_into().ok()?;
    Some((hash, &rest[32..]))
}

/// Hashes of complete subtrees made in one batch, in slot order from `at`, before they are
/// written to the file.
struct NewSlots {
    at: u64,
    bytes: Vec<u8>,
}

impl NewSlots {
    fn starting_at(at: u64) -> Self {
        Self {
            at,
            bytes: Vec::new(),
        }
    }

    fn get(&self, slot: u64) -> Option<Hash> {
        let offset = usize::try_from(slot.checked_sub(self.at)?).ok()? * 32;
        self.bytes.get(offset..offset + 32)?.try_into().ok()
    }

    /// Appends the hash of `slot`, the next one.
    fn push(&mut self, slot: u64, hash: &Hash) {
        debug_assert_eq!(slot, self.at + self.bytes.len() as u64 / 32);
        self.bytes.extend_from_slice(hash);
    }

    /// Writes the slots to the file and starts after them.
    fn write(&mut self, file: &TreeFile) -> std::io::Result<()> {
        if !self.bytes.is_empty() {
            file.write(self.at, &self.bytes)?;
            self.at += self.bytes.len() as u64 / 32;
            self.bytes.clear();
        }
        Ok(())
    }
}

/// A member's verifier key, from what the membership records of it.
pub fn member_key(node: NodeId, info: &crate::raft::NodeInfo) -> Option<VerifierKey> {
    let public: [u8; 32] = base64_decode(&info.signing_key)?.try_into().ok()?;
    VerifierKey::new(&key_name(&info.cluster_id, node), public).ok()
}

/// The staged part of the log in one apply batch.
#[derive(Default)]
pub(super) struct LogStage {
    size: Option<u64>,
    /// Hashes of the leaves appended in the batch and the subtrees they closed.
    slots: Option<NewSlots>,
    /// Leaves of the entry being applied, appended (in id order) when it is done.
    entry: Vec<(String, Hash)>,
    /// The leaf of each receipt appended in the batch, by id, for its stored value
    /// ([`LogStage::take_leaf`]); what is left when the batch is written goes under `x/n/`.
    leaves: HashMap<String, u64>,
    checkpoint: Option<Option<Cosigned>>,
    pending: Option<Vec<Pending>>,
    dirty_signatures: bool,
}

impl LogStage {
    /// The log's size after the batch, if the batch appended to it.
    pub fn size(&self) -> Option<u64> {
        self.size
    }

    /// The leaf of receipt `id` if the batch appended it, for its stored value to hold.
    pub fn take_leaf(&mut self, id: &str) -> Option<u64> {
        self.leaves.remove(id)
    }

    /// Stages `x/n/` for the batch's leaves whose receipts are not stored with them (those a
    /// prune of the same batch dropped), after every stored one took its leaf.
    pub fn keep_untaken_leaves(&mut self, batch: &mut sled::Batch) {
        for (id, leaf) in self.leaves.drain() {
            keep_leaf_of(batch, &id, leaf);
        }
    }

    /// Writes the hashes the batch made to the file (before the batch goes to sled).
    pub fn write_hashes(&mut self, file: &TreeFile) -> Result<(), StorageError> {
        match &mut self.slots {
            Some(slots) => slots.write(file).map_err(|e| write_err(&e)),
            None => Ok(()),
        }
    }
}

/// Reads hashes of complete subtrees, from a stage and the file, or the file alone.
trait Hashes {
    fn stored(&self, level: u8, index: u64) -> Result<Hash, ProofError>;

    /// MTH of leaves `[lo, hi)`, for ranges RFC 9162's recursion reaches (`lo` a multiple of
    /// the largest power of two not above `hi - lo`).
    fn subtree(&self, lo: u64, hi: u64) -> Result<Hash, ProofError> {
        let n = hi - lo;
        if n.is_power_of_two() && lo.is_multiple_of(n) {
            return self.stored(n.trailing_zeros() as u8, lo >> n.trailing_zeros());
        }
        let k = tlog::split(n);
        Ok(tlog::node_hash(
            &self.subtree(lo, lo + k)?,
            &self.subtree(lo + k, hi)?,
        ))
    }

    fn root(&self, size: u64) -> Result<Hash, ProofError> {
        if size == 0 {
            return Ok(tlog::empty_root());
        }
        self.subtree(0, size)
    }

    /// PATH(m, D[lo:hi]).
    fn path(&self, m: u64, lo: u64, hi: u64, out: &mut Vec<Hash>) -> Result<(), ProofError> {
        let n = hi - lo;
        if n <= 1 {
            return Ok(());
        }
        let k = tlog::split(n);
        if m < k {
            self.path(m, lo, lo + k, out)?;
            out.push(self.subtree(lo + k, hi)?);
        } else {
            self.path(m - k, lo + k, hi, out)?;
            out.push(self.subtree(lo, lo + k)?);
        }
        Ok(())
    }

    /// SUBPROOF(m, D[lo:hi], whole).
    fn subproof(
        &self,
        m: u64,
        lo: u64,
        hi: u64,
        whole: bool,
        out: &mut Vec<Hash>,
    ) -> Result<(), ProofError> {
        let n = hi - lo;
        if m == n {
            if !whole {
                out.push(self.subtree(lo, hi)?);
            }
            return Ok(());
        }
        let k = tlog::split(n);
        if m <= k {
            self.subproof(m, lo, lo + k, whole, out)?;
            out.push(self.subtree(lo + k, hi)?);
        } else {
            self.subproof(m - k, lo + k, hi, false, out)?;
            out.push(self.subtree(lo, lo + k)?);
        }
        Ok(())
    }
}

/// Why a proof could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ProofError {
    /// sled failed.
    #[error("storage: {0}")]
    Sled(#[from] sled::Error),
    /// A hash the tree needs is not stored (a damaged store).
    #[error("the hash of subtree {level}/{index} is missing from the store")]
    Missing { level: u8, index: u64 },
    /// The hash file could not be read.
    #[error("the tree hash file: {0}")]
    File(#[from] std::io::Error),
    /// A stored value does not decode.
    #[error("a stored value of the receipt log does not decode: {0}")]
    Decode(String),
}

struct FileHashes<'a>(&'a TreeFile);

impl Hashes for FileHashes<'_> {
    fn stored(&self, level: u8, index: u64) -> Result<Hash, ProofError> {
        self.0
            .read(tree_file::slot(level, index))?
            .ok_or(ProofError::Missing { level, index })
    }
}

/// The file's hashes with those made but not yet written.
struct StagedHashes<'a> {
    file: &'a TreeFile,
    new: Option<&'a NewSlots>,
}

impl Hashes for StagedHashes<'_> {
    fn stored(&self, level: u8, index: u64) -> Result<Hash, ProofError> {
        let staged = self
            .new
            .and_then(|new| new.get(tree_file::slot(level, index)));
        match staged {
            Some(hash) => Ok(hash),
            None => FileHashes(self.file).stored(level, index),
        }
    }
}

fn proof_err(e: &ProofError) -> StorageError {
    io_error(
        ErrorSubject::StateMachine,
        ErrorVerb::Read,
        &crate::store::snapshot::SnapshotError(e.to_string()),
    )
}

/// A big-endian `u64` stored under (or in) the key named `what`.
fn be_u64(bytes: &[u8], what: &str) -> Result<u64, ProofError> {
    bytes
        .try_into()
        .map(u64::from_be_bytes)
        .map_err(|_| ProofError::Decode(what.into()))
}

/// Stages `x/n/<id>` → `leaf`: where the leaf of a receipt whose stored value does not hold
/// it is found (see `Stored`).
pub(super) fn keep_leaf_of(batch: &mut sled::Batch, id: &str, leaf: u64) {
    batch.insert(leaf_of_key(id), &leaf.to_be_bytes()[..]);
}

/// The leaf index in an `x/l/<leaf>` key.
fn leaf_index(key: &[u8]) -> Result<u64, ProofError> {
    be_u64(&key[LEAF_ID.len()..], "x/l key")
}

/// Leaves stored (0 before the first).
pub(super) fn read_size(tree: &sled::Tree) -> Result<u64, ProofError> {
    match tree.get(SIZE)? {
        Some(bytes) => be_u64(&bytes, "x/size"),
        None => Ok(0),
    }
}

fn read_json<T: for<'de> Deserialize<'de>>(
    tree: &sled::Tree,
    key: &[u8],
) -> Result<Option<T>, ProofError> {
    match tree.get(key)? {
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| ProofError::Decode(e.to_string())),
        None => Ok(None),
    }
}

/// The leaf of a receipt.
pub fn receipt_leaf(receipt: &Receipt) -> Vec<u8> {
    tlog::receipt_leaf(&tlog::ReceiptLeaf {
        id: &receipt.id,
        key: &receipt.key,
        row_version: receipt.row_version,
        caller: &receipt.caller,
        started_at: &receipt.started_at,
        input_sha256: &receipt.input_sha256,
        output_sha256: &receipt.output_sha256,
        ok: receipt.ok,
        error: receipt.error.as_deref(),
    })
}

/// Appends leaf `hash` as leaf `index` to `new`, given `file` and `new` for its left
/// siblings: the leaf and every complete subtree it completes, in slot order.
fn append_hashes(
    file: &TreeFile,
    new: &mut NewSlots,
    index: u64,
    hash: Hash,
) -> Result<(), ProofError> {
    new.push(tree_file::slot(0, index), &hash);
    let (mut level, mut at, mut current) = (0u8, index, hash);
    while at & 1 == 1 {
        let left = StagedHashes {
            file,
            new: Some(&*new),
        }
        .stored(level, at - 1)?;
        current = tlog::node_hash(&left, &current);
        level += 1;
        at >>= 1;
        new.push(tree_file::slot(level, at), &current);
    }
    Ok(())
}

impl StateMachine {
    fn log_size(&self, stage: &mut Stage) -> Result<u64, StorageError> {
        if let Some(size) = stage.log.size {
            return Ok(size);
        }
        let size = read_size(&self.tree).map_err(|e| proof_err(&e))?;
        stage.log.size = Some(size);
        Ok(size)
    }

    /// Notes a receipt applied in the entry under way; it becomes a leaf when the entry is
    /// done ([`Self::finish_entry`]).
    pub(super) fn stage_leaf(&self, receipt: &Receipt, stage: &mut Stage) {
        let hash = tlog::leaf_hash(&receipt_leaf(receipt));
        stage.log.entry.push((receipt.id.clone(), hash));
    }

    /// Appends the leaves of the entry just applied, in id order.
    pub(super) fn finish_entry(&self, stage: &mut Stage) -> Result<(), StorageError> {
        if stage.log.entry.is_empty() {
            return Ok(());
        }
        let mut leaves = std::mem::take(&mut stage.log.entry);
        leaves.sort_by(|a, b| a.0.cmp(&b.0));
        let mut size = self.log_size(stage)?;
        let file = self.storage.tree_file();
        for (id, hash) in leaves {
            let Stage { batch, log, .. } = &mut *stage;
            let new = log
                .slots
                .get_or_insert_with(|| NewSlots::starting_at(tree_file::slots(size)));
            append_hashes(file, new, size, hash).map_err(|e| proof_err(&e))?;
            batch.insert(leaf_id_key(size), leaf_value(&hash, id.as_bytes()));
            log.leaves.insert(id, size);
            size += 1;
        }
        stage.log.size = Some(size);
        stage.batch.insert(SIZE, &size.to_be_bytes()[..]);
        Ok(())
    }

    fn checkpoint_staged(&self, stage: &mut Stage) -> Result<Option<Cosigned>, StorageError> {
        if stage.log.checkpoint.is_none() {
            let stored = read_json(&self.tree, CHECKPOINT).map_err(|e| proof_err(&e))?;
            stage.log.checkpoint = Some(stored);
        }
        Ok(stage.log.checkpoint.clone().flatten())
    }

    fn pending_staged(&self, stage: &mut Stage) -> Result<Vec<Pending>, StorageError> {
        if stage.log.pending.is_none() {
            let stored = read_json(&self.tree, PENDING).map_err(|e| proof_err(&e))?;
            stage.log.pending = Some(stored.unwrap_or_default());
        }
        Ok(stage.log.pending.clone().unwrap_or_default())
    }

    /// Applies node `node`'s signature of the checkpoint at `size` with `root` (see the
    /// module documentation).
    pub(super) fn cosign(
        &self,
        node: NodeId,
        size: u64,
        root: &str,
        signature: &str,
        stage: &mut Stage,
    ) -> Result<CommandResult, StorageError> {
        let refuse = |reason: String| {
            tracing::warn!(node, size, %reason, "a checkpoint signature was refused");
            Ok(CommandResult::CosignRefused { reason })
        };
        let leaves = self.log_size(stage)?;
        if size == 0 || size > leaves {
            return refuse(format!(
                "tree size {size} is not one this log had (it has {leaves} leaves)"
            ));
        }
        let ours = StagedHashes {
            file: self.storage.tree_file(),
            new: stage.log.slots.as_ref(),
        }
        .root(size)
        .map_err(|e| proof_err(&e))?;
        if tlog::encode_hash(&ours) != root {
            return refuse(format!(
                "node {node} signed root {root} for tree size {size}, but this log's root there is {}",
                tlog::encode_hash(&ours)
            ));
        }
        let membership = stage
            .membership
            .as_ref()
            .unwrap_or(&self.membership)
            .clone();
        let Some(info) = membership.membership().get_node(&node) else {
            return refuse(format!("node {node} is not a member"));
        };
        let Some(key) = member_key(node, info) else {
            return refuse(format!("node {node} has no signing key in the membership"));
        };
        let origin = origin(&info.cluster_id);
        let body = Checkpoint {
            origin: origin.clone(),
            size,
            root: ours,
        }
        .body();
        let Some(raw) = base64_decode(signature).filter(|s| key.verifies(body.as_bytes(), s))
        else {
            return refuse(format!("node {node}'s signature does not verify"));
        };
        let signed = NodeSignature {
            node,
            key: key.to_string(),
            signature: base64_encode(&raw),
        };
        let latest = self.checkpoint_staged(stage)?;
        let latest_size = latest.as_ref().map_or(0, |c| c.size);
        if size < latest_size {
            return Ok(CommandResult::Cosigned {
                size,
                checkpoint: false,
            });
        }
        if let Some(mut latest) = latest.filter(|c| c.size == size) {
            // A late signer of the current checkpoint: one more signature on it.
            if !latest.signatures.iter().any(|s| s.node == node) {
                latest.signatures.push(signed);
                latest.signatures.sort_by_key(|s| s.node);
                stage.log.checkpoint = Some(Some(latest));
                stage.log.dirty_signatures = true;
            }
            return Ok(CommandResult::Cosigned {
                size,
                checkpoint: true,
            });
        }
        let mut pending = self.pending_staged(stage)?;
        pending.retain(|p| p.size > latest_size);
        if !pending
            .iter()
            .any(|p| p.size == size && p.signature.node == node)
        {
            pending.push(Pending {
                size,
                root: root.to_owned(),
                signature: signed,
            });
        }
        let voters: Vec<NodeId> = membership.membership().voter_ids().collect();
        let votes = pending
            .iter()
            .filter(|p| p.size == size && voters.contains(&p.signature.node))
            .count();
        let reached = votes * 2 > voters.len();
        if reached {
            let mut signatures: Vec<NodeSignature> = pending
                .iter()
                .filter(|p| p.size == size)
                .map(|p| p.signature.clone())
                .collect();
            signatures.sort_by_key(|s| s.node);
            pending.retain(|p| p.size > size);
            stage.log.checkpoint = Some(Some(Cosigned {
                origin,
                size,
                root: root.to_owned(),
                voters,
                signatures,
            }));
        }
        stage.log.pending = Some(pending);
        stage.log.dirty_signatures = true;
        Ok(CommandResult::Cosigned {
            size,
            checkpoint: reached,
        })
    }

    /// Stages the checkpoint and pending signatures if the batch changed them.
    pub(super) fn finish_log(&self, stage: &mut Stage) -> Result<(), StorageError> {
        if !stage.log.dirty_signatures {
            return Ok(());
        }
        if let Some(Some(checkpoint)) = &stage.log.checkpoint {
            stage.batch.insert(CHECKPOINT, encode(checkpoint)?);
        }
        if let Some(pending) = &stage.log.pending {
            stage.batch.insert(PENDING, encode(pending)?);
        }
        Ok(())
    }
}

/// What a snapshot needs of the log at the cut, read when the builder is made.
pub(super) fn snapshot_header(tree: &sled::Tree, file: &TreeFile) -> Result<LogHeader, String> {
    let size = read_size(tree).map_err(|e| e.to_string())?;
    let root = FileHashes(file).root(size).map_err(|e| e.to_string())?;
    Ok(LogHeader {
        size,
        root: tlog::encode_hash(&root),
        checkpoint: read_json(tree, CHECKPOINT).map_err(|e| e.to_string())?,
        pending: read_json(tree, PENDING)
            .map_err(|e| e.to_string())?
            .unwrap_or_default(),
    })
}

/// The leaves below `size` in order, with their ids, for a snapshot.
pub(crate) fn each_leaf(
    tree: &sled::Tree,
    size: u64,
    mut f: impl FnMut(u64, &str, &Hash) -> Result<(), StorageError>,
) -> Result<(), StorageError> {
    for item in tree.scan_prefix(LEAF_ID) {
        let (key, value) = item.map_err(|e| read_err(&e))?;
        let index = leaf_index(&key).map_err(|e| proof_err(&e))?;
        if index >= size {
            break;
        }
        let (hash, id) = decode_leaf(&value)
            .ok_or_else(|| proof_err(&ProofError::Decode(format!("x/l value of leaf {index}"))))?;
        f(index, &String::from_utf8_lossy(id), &hash)?;
    }
    Ok(())
}

/// Removes every key under `prefix`, in batches of [`WRITE_BATCH`] (sled holds memory in
/// proportion to a batch's keys).
fn remove_prefix(tree: &sled::Tree, prefix: &[u8]) -> Result<(), StorageError> {
    let mut batch = sled::Batch::default();
    for (n, item) in tree.scan_prefix(prefix).enumerate() {
        let (key, _) = item.map_err(|e| read_err(&e))?;
        batch.remove(key);
        if n % WRITE_BATCH == WRITE_BATCH - 1 {
            tree.apply_batch(std::mem::take(&mut batch))
                .map_err(|e| write_err(&e))?;
        }
    }
    tree.apply_batch(batch).map_err(|e| write_err(&e))
}

/// Slots a loader holds before it writes them to the file.
const LOADER_SLOTS: usize = 4096;

/// Writes the log from a snapshot's leaves, in order, in batches; the frontier of complete
/// subtrees is kept in memory, so nothing is read back.
pub struct LogLoader {
    size: u64,
    /// Hashes of the complete subtrees on the right edge, largest first, with their level.
    frontier: Vec<(u8, Hash)>,
    file: TreeFile,
    new: NewSlots,
}

impl LogLoader {
    /// Removes the whole log from `tree` and `file`, to be rewritten from leaf 0.
    pub fn clear(tree: &sled::Tree, file: &TreeFile) -> Result<Self, StorageError> {
        file.clear().map_err(|e| write_err(&e))?;
        remove_prefix(tree, PREFIX)?;
        Ok(Self {
            size: 0,
            frontier: Vec::new(),
            file: file.clone(),
            new: NewSlots::starting_at(0),
        })
    }

    /// Stages leaf `index` with `id` and `hash`; leaves come in order from 0.
    pub fn leaf(
        &mut self,
        batch: &mut sled::Batch,
        index: u64,
        id: &str,
        hash: Hash,
    ) -> Result<(), String> {
        if index != self.size {
            return Err(format!("leaf {index} where leaf {} was due", self.size));
        }
        batch.insert(leaf_id_key(index), leaf_value(&hash, id.as_bytes()));
        batch.insert(leaf_of_key(id), &index.to_be_bytes()[..]);
        self.new.push(tree_file::slot(0, index), &hash);
        let (mut level, mut at, mut current) = (0u8, index, hash);
        while at & 1 == 1 {
            let Some((_, left)) = self.frontier.pop() else {
                return Err("the frontier ran out".into());
            };
            current = tlog::node_hash(&left, &current);
            level += 1;
            at >>= 1;
            self.new.push(tree_file::slot(level, at), &current);
        }
        self.frontier.push((level, current));
        self.size += 1;
        if self.new.bytes.len() >= LOADER_SLOTS * 32 {
            self.new.write(&self.file).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Leaves staged so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The root of the leaves staged so far.
    pub fn root(&self) -> Hash {
        self.frontier
            .iter()
            .rev()
            .map(|(_, h)| *h)
            .reduce(|right, left| tlog::node_hash(&left, &right))
            .unwrap_or_else(tlog::empty_root)
    }

    /// Stages the size and the signatures and writes the last hashes; checks the root the
    /// snapshot claims.
    pub fn finish(mut self, batch: &mut sled::Batch, header: &LogHeader) -> Result<(), String> {
        self.new.write(&self.file).map_err(|e| e.to_string())?;
        if self.size != header.size {
            return Err(format!(
                "the snapshot holds {} leaves but says {}",
                self.size, header.size
            ));
        }
        let root = self.root();
        if tlog::encode_hash(&root) != header.root {
            return Err(format!(
                "the snapshot's leaves lead to root {}, not the {} it names",
                tlog::encode_hash(&root),
                header.root
            ));
        }
        batch.insert(SIZE, &self.size.to_be_bytes()[..]);
        if let Some(checkpoint) = &header.checkpoint {
            batch.insert(
                CHECKPOINT,
                serde_json::to_vec(checkpoint).map_err(|e| e.to_string())?,
            );
        }
        batch.insert(
            PENDING,
            serde_json::to_vec(&header.pending).map_err(|e| e.to_string())?,
        );
        Ok(())
    }
}

/// Builds the log from the stored receipts in (index, id) order, in a folder (or from a
/// snapshot) written before the log existed. Receipts retention dropped before then are not
/// in it.
pub(super) fn rebuild(
    tree: &sled::Tree,
    segments: &Segments,
    file: &TreeFile,
) -> Result<u64, StorageError> {
    let mut receipts: Vec<(u64, String, Hash)> = Vec::new();
    for item in tree.scan_prefix(RECEIPT) {
        let (_, value) = item.map_err(|e| read_err(&e))?;
        let Some(super::Found { receipt, .. }) = super::found(segments, &value)? else {
            continue;
        };
        let hash = tlog::leaf_hash(&receipt_leaf(&receipt));
        receipts.push((receipt.index, receipt.id, hash));
    }
    receipts.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let mut loader = LogLoader::clear(tree, file)?;
    let mut batch = sled::Batch::default();
    for (index, (_, id, hash)) in receipts.iter().enumerate() {
        loader
            .leaf(&mut batch, index as u64, id, *hash)
            .map_err(|e| read_err(&snapshot::SnapshotError(e)))?;
        // Two keys a leaf.
        if index % (WRITE_BATCH / 2) == WRITE_BATCH / 2 - 1 {
            tree.apply_batch(std::mem::take(&mut batch))
                .map_err(|e| read_err(&e))?;
        }
    }
    let (size, root) = (loader.size(), loader.root());
    loader
        .finish(
            &mut batch,
            &LogHeader {
                size,
                root: tlog::encode_hash(&root),
                ..LogHeader::default()
            },
        )
        .map_err(|e| read_err(&snapshot::SnapshotError(e)))?;
    tree.apply_batch(batch).map_err(|e| read_err(&e))?;
    Ok(size)
}

/// Brings the hash file in line with the leaves in `tree` at open ([`crate::store::tree_file`],
/// "Recovery argument"), first moving a format 4 folder's hashes out of sled ([`migrate`]).
/// Returns how many leaves' hashes were computed again.
pub(super) fn recover(tree: &sled::Tree, file: &TreeFile) -> Result<u64, StorageError> {
    migrate(tree)?;
    let size = read_size(tree).map_err(|e| proof_err(&e))?;
    let kept = file.recover(size).map_err(|e| read_err(&e))?;
    let mut new = NewSlots::starting_at(tree_file::slots(kept));
    let mut next = kept;
    for item in tree.range(leaf_id_key(kept)..leaf_id_key(size)) {
        let (key, value) = item.map_err(|e| read_err(&e))?;
        let index = leaf_index(&key).map_err(|e| proof_err(&e))?;
        let hash = decode_leaf(&value)
            .filter(|_| index == next)
            .map(|(hash, _)| hash)
            .ok_or_else(|| proof_err(&ProofError::Decode(format!("x/l value of leaf {next}"))))?;
        append_hashes(file, &mut new, index, hash).map_err(|e| proof_err(&e))?;
        if new.bytes.len() >= LOADER_SLOTS * 32 {
            new.write(file).map_err(|e| write_err(&e))?;
        }
        next += 1;
    }
    if next != size {
        return Err(proof_err(&ProofError::Decode(format!(
            "the log has {size} leaves but x/l ends at {next}"
        ))));
    }
    new.write(file).map_err(|e| write_err(&e))?;
    Ok(size - kept)
}

/// Moves a format 4 folder's subtree hashes out of sled: each leaf's hash into its `x/l/`
/// value, then every `x/h/` key removed, each step in batches. A crash in either step is
/// safe to repeat: a value that holds its hash keeps it, and the hash file is computed from
/// the values ([`recover`]).
fn migrate(tree: &sled::Tree) -> Result<(), StorageError> {
    if tree.scan_prefix(HASH).next().is_none() {
        return Ok(());
    }
    let (mut batch, mut leaves) = (sled::Batch::default(), 0u64);
    for item in tree.scan_prefix(LEAF_ID) {
        let (key, value) = item.map_err(|e| read_err(&e))?;
        if decode_leaf(&value).is_some() {
            continue;
        }
        let index = leaf_index(&key).map_err(|e| proof_err(&e))?;
        let hash = SledHashes(tree)
            .stored(0, index)
            .map_err(|e| proof_err(&e))?;
        batch.insert(key, leaf_value(&hash, &value));
        leaves += 1;
        if leaves % WRITE_BATCH as u64 == 0 {
            tree.apply_batch(std::mem::take(&mut batch))
                .map_err(|e| write_err(&e))?;
        }
    }
    tree.apply_batch(batch).map_err(|e| write_err(&e))?;
    remove_prefix(tree, HASH)?;
    tracing::info!(
        leaves,
        "moved the receipt log's hashes out of the database into their own file"
    );
    Ok(())
}

/// A format 4 folder's hashes, in sled.
struct SledHashes<'a>(&'a sled::Tree);

impl Hashes for SledHashes<'_> {
    fn stored(&self, level: u8, index: u64) -> Result<Hash, ProofError> {
        let bytes = self
            .0
            .get(hash_key(level, index))?
            .ok_or(ProofError::Missing { level, index })?;
        bytes
            .as_ref()
            .try_into()
            .map_err(|_| ProofError::Decode(format!("hash {level}/{index}")))
    }
}

/// Whether the folder has a log (or has no receipts to build one from).
pub(super) fn has_log(tree: &sled::Tree) -> Result<bool, StorageError> {
    Ok(tree.contains_key(SIZE).map_err(|e| read_err(&e))?
        || tree
            .scan_prefix(RECEIPT)
            .next()
            .transpose()
            .map_err(|e| read_err(&e))?
            .is_none())
}

/// Read access to the log for proofs. Proofs are made against sizes a checkpoint (or the
/// published tree) names; every hash below such a size is final.
#[derive(Clone)]
pub struct LogReader {
    tree: sled::Tree,
    file: TreeFile,
    published: Arc<std::sync::atomic::AtomicU64>,
}

/// A leaf: its index, receipt id and hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafEntry {
    pub index: u64,
    pub id: String,
    pub hash: Hash,
}

impl LogReader {
    pub(super) fn new(
        tree: sled::Tree,
        file: TreeFile,
        published: Arc<std::sync::atomic::AtomicU64>,
    ) -> Self {
        Self {
            tree,
            file,
            published,
        }
    }

    /// A reader of the log stored in `tree` and `file` outside a running state machine
    /// (tools and benchmarks): all of it counts as published.
    pub fn open(tree: sled::Tree, file: TreeFile) -> Result<Self, ProofError> {
        let size = read_size(&tree)?;
        Ok(Self::new(
            tree,
            file,
            Arc::new(std::sync::atomic::AtomicU64::new(size)),
        ))
    }

    /// Leaves as of the index this node has published (what its readers are shown).
    pub fn published_size(&self) -> u64 {
        self.published.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The latest checkpoint a majority of voters signed.
    pub fn checkpoint(&self) -> Result<Option<Cosigned>, ProofError> {
        read_json(&self.tree, CHECKPOINT)
    }

    /// Signatures still short of a majority.
    pub fn pending(&self) -> Result<Vec<Pending>, ProofError> {
        Ok(read_json(&self.tree, PENDING)?.unwrap_or_default())
    }

    /// Leaves stored (including those of a batch being published).
    pub fn size(&self) -> Result<u64, ProofError> {
        read_size(&self.tree)
    }

    /// The root at `size` (at most [`Self::size`]).
    pub fn root(&self, size: u64) -> Result<Hash, ProofError> {
        FileHashes(&self.file).root(size)
    }

    /// The leaf index of receipt `id`, if it has one: in its stored value while it is kept
    /// (see `Stored`), else under `x/n/`.
    pub fn leaf_of(&self, id: &str) -> Result<Option<u64>, ProofError> {
        let stored = self.tree.get(super::receipt_key(id))?;
        if let Some(leaf) = stored.and_then(|v| super::Stored::decode(&v)?.leaf) {
            return Ok(Some(leaf));
        }
        match self.tree.get(leaf_of_key(id))? {
            Some(bytes) => be_u64(&bytes, "x/n").map(Some),
            None => Ok(None),
        }
    }

    /// Leaf `index`'s hash.
    pub fn leaf_hash(&self, index: u64) -> Result<Hash, ProofError> {
        FileHashes(&self.file).stored(0, index)
    }

    /// The inclusion path of leaf `index` in the tree of `size` (`index < size`).
    pub fn inclusion(&self, index: u64, size: u64) -> Result<Vec<Hash>, ProofError> {
        let mut out = Vec::new();
        FileHashes(&self.file).path(index, 0, size, &mut out)?;
        Ok(out)
    }

    /// The consistency path from `from` to `to` leaves (`from ≤ to`).
    pub fn consistency(&self, from: u64, to: u64) -> Result<Vec<Hash>, ProofError> {
        let mut out = Vec::new();
        if from > 0 && from < to {
            FileHashes(&self.file).subproof(from, 0, to, true, &mut out)?;
        }
        Ok(out)
    }

    /// Leaves `[start, end)`.
    pub fn leaves(&self, start: u64, end: u64) -> Result<Vec<LeafEntry>, ProofError> {
        let mut out = Vec::new();
        for item in self.tree.range(leaf_id_key(start)..leaf_id_key(end)) {
            let (key, value) = item?;
            let index = leaf_index(&key)?;
            let (hash, id) = decode_leaf(&value)
                .ok_or_else(|| ProofError::Decode(format!("x/l value of leaf {index}")))?;
            out.push(LeafEntry {
                index,
                id: String::from_utf8_lossy(id).into_owned(),
                hash,
            });
        }
        Ok(out)
    }
}
