//! `rowcall verify`: checks a receipt against the receipt log's transparency log without
//! trusting the node that answers. What the node sends is evidence; what this machine
//! pinned (voter keys, the log's origin, the last checkpoint it saw) is the trust.
//!
//! ```text
//!   claim (a receipt, or an id) ─┐
//!   SignedCheckpoint ────────────┼─► checkpoint: note = fields, signed by a majority of the pinned keys
//!   ConsistencyProof ────────────┤   history:    same size ⇒ same root; otherwise the smaller tree
//!     (when the state remembers  │               is a prefix of the larger (the state never goes back)
//!      another size)             │   leaf:       the receipt's canonical leaf, hashing to leaf_hash
//!   InclusionProof ──────────────┘   inclusion:  leaf_hash ─path─► the checkpoint's root
//!                                        │
//!                                        ▼
//!                                     Verdict ─► Witness::advance ─► state file (temp + rename)
//! ```
//!
//! Everything but the state file's I/O is pure: the CLI fetches, [`verify`] judges. What a
//! check needs from the network is said by [`Witness::consistency_needed`].

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use rowcall_proto::tlog::{self, Checkpoint, Hash, ReceiptLeaf, TlogError, VerifierKey};
use rowcall_proto::v1 as proto;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// Why a receipt did not verify (or could not be checked yet).
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// No co-signed checkpoint covers the receipt yet: the leader starts one about every
    /// second, so this passes on its own.
    #[error("{id} is not yet in a co-signed checkpoint: try again in a second")]
    NotYetCovered {
        /// The receipt id.
        id: String,
    },
    /// A field of the node's answer is not in the form the protocol gives it.
    #[error("the node's answer is malformed: {what}")]
    Malformed {
        /// Which field, and how.
        what: String,
    },
    /// The proof (or its leaf) is another receipt's.
    #[error("the proof is for {got}, not {want}")]
    OtherReceipt {
        /// The receipt asked about.
        want: String,
        /// The receipt the proof is for.
        got: String,
    },
    /// The receipt given is not the one the log holds: a field was edited.
    #[error("the receipt given for {id} differs from the leaf the log holds for it (edited?)")]
    ReceiptEdited {
        /// The receipt id.
        id: String,
    },
    /// The leaf the node sent does not hash to the leaf hash its path starts from.
    #[error("leaf {index} does not hash to the proof's leaf hash")]
    LeafHash {
        /// The leaf's index.
        index: u64,
    },
    /// The inclusion path does not lead from the leaf to the checkpoint's root.
    #[error("the inclusion proof of leaf {index} in the tree of size {size} fails: {reason}")]
    Inclusion {
        /// The leaf's index.
        index: u64,
        /// The tree size.
        size: u64,
        /// What failed.
        reason: TlogError,
    },
    /// The inclusion proof is against another tree than the checkpoint's.
    #[error("the proof is against the tree of size {proof_size}, the checkpoint is of size {checkpoint_size} or has another root")]
    OtherTree {
        /// The proof's tree size.
        proof_size: u64,
        /// The checkpoint's.
        checkpoint_size: u64,
    },
    /// The checkpoint's signed note is unreadable, or says other than the checkpoint's fields.
    #[error("the checkpoint's note does not hold: {reason}")]
    Note {
        /// What is wrong with it.
        reason: String,
    },
    /// A pinned key's signature on the checkpoint does not verify: someone changed the note.
    #[error("BAD SIGNATURE on the checkpoint of size {size}: {reason}")]
    BadSignature {
        /// The checkpoint's size.
        size: u64,
        /// Whose signature.
        reason: TlogError,
    },
    /// The pinned keys that signed are not a strict majority of them.
    #[error("the checkpoint of size {size} is signed by {signed} of {pinned} pinned voter keys: not a majority")]
    NotMajority {
        /// The checkpoint's size.
        size: u64,
        /// Pinned keys whose signature it carries.
        signed: usize,
        /// Pinned keys.
        pinned: usize,
    },
    /// No key to check signatures with.
    #[error("no voter keys pinned: pass --key VKEY or --keys FILE (from the operator), or --trust-node-keys to pin the node's on first use")]
    NoKeys,
    /// A key given is not a signed-note verifier key.
    #[error("{reason}")]
    BadKey {
        /// Why.
        reason: TlogError,
    },
    /// The checkpoint is of another log than the one pinned.
    #[error("the checkpoint is of the log {got:?}, not the pinned {pinned:?}")]
    OtherOrigin {
        /// The origin pinned in the state.
        pinned: String,
        /// The checkpoint's.
        got: String,
    },
    /// Two co-signed roots for one tree size: the log forked (or someone holds a majority of
    /// the voter keys and signs two histories).
    #[error("FORK: two roots for size {size}")]
    Fork {
        /// The tree size with two roots.
        size: u64,
    },
    /// The checkpoint is of another size than the one remembered, and no consistency proof
    /// between them was given.
    #[error("no consistency proof between the tree sizes {from} and {to}")]
    MissingConsistency {
        /// The smaller size.
        from: u64,
        /// The larger.
        to: u64,
    },
    /// The smaller of the new and the remembered checkpoint is not a prefix of the larger.
    #[error(
        "INCONSISTENT: the tree of size {from} is not a prefix of the tree of size {to}: {reason}"
    )]
    Inconsistent {
        /// The smaller size.
        from: u64,
        /// The larger.
        to: u64,
        /// What failed.
        reason: String,
    },
    /// The receipt given is not a receipt's JSON.
    #[error("not a receipt: {reason}")]
    Receipt {
        /// Why.
        reason: String,
    },
    /// The state file could not be read or written.
    #[error("state file {}", path.display())]
    StateIo {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The state file is not what `rowcall verify` writes.
    #[error("state file {} is corrupt: {reason} (move it away to start over)", path.display())]
    StateCorrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Another run wrote the state file while this one verified: writing over it could take
    /// it back to an older checkpoint.
    #[error("state file {} changed while verifying (another rowcall verify?): run again", path.display())]
    StateChanged {
        /// The file.
        path: PathBuf,
    },
}

/// A receipt as `rowcall receipts ID --json` prints it and `GET /api/receipts/{id}` answers
/// it: the fields its leaf commits to (any others are ignored).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Receipt {
    pub id: String,
    pub key: String,
    pub row_version: u64,
    pub caller: String,
    pub started_at: String,
    pub input_sha256: String,
    pub output_sha256: String,
    pub ok: bool,
    /// Absent or null when it succeeded.
    #[serde(default)]
    pub error: Option<String>,
}

impl Receipt {
    /// Reads a receipt's JSON.
    pub fn from_json(text: &str) -> Result<Self, VerifyError> {
        serde_json::from_str(text).map_err(|e| VerifyError::Receipt {
            reason: e.to_string(),
        })
    }

    /// Its canonical leaf, as the node logs it.
    pub fn leaf(&self) -> Vec<u8> {
        tlog::receipt_leaf(&ReceiptLeaf {
            id: &self.id,
            key: &self.key,
            row_version: self.row_version,
            caller: &self.caller,
            started_at: &self.started_at,
            input_sha256: &self.input_sha256,
            output_sha256: &self.output_sha256,
            ok: self.ok,
            error: self.error.as_deref(),
        })
    }
}

/// What is to be proved in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// That the log holds a receipt with this id.
    Id(String),
    /// That the log holds exactly this receipt.
    Receipt(Receipt),
}

impl Claim {
    /// The receipt id.
    pub fn id(&self) -> &str {
        match self {
            Self::Id(id) => id,
            Self::Receipt(r) => &r.id,
        }
    }
}

/// Where the voter keys checked against came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeysFrom {
    /// `--key` / `--keys`: the operator's word (they replace the pinned ones).
    Given,
    /// The state file, pinned by an earlier run.
    Pinned,
    /// The node's `keys`, with `--trust-node-keys` and nothing pinned: trust on first use.
    Node,
}

/// The voter keys a checkpoint must carry a majority of signatures of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    pub keys: Vec<VerifierKey>,
    pub from: KeysFrom,
}

/// Keys from text: one verifier key per line; blank lines and `#` comments are skipped.
pub fn parse_keys(text: &str) -> Result<Vec<VerifierKey>, VerifyError> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| VerifierKey::parse(l).map_err(|reason| VerifyError::BadKey { reason }))
        .collect()
}

/// The keys to check against: those `given`, else those the witness pinned, else (with
/// `--trust-node-keys`, `node` is the checkpoint it answered) the node's keys of the voters
/// of that checkpoint — a learner's key would raise the majority needed without a vote
/// behind it. Pinned keys win over the node's: a node cannot swap them.
pub fn choose_keys(
    given: Vec<VerifierKey>,
    witness: &Witness,
    node: Option<&proto::SignedCheckpoint>,
) -> Result<Keys, VerifyError> {
    if !given.is_empty() {
        return Ok(Keys {
            keys: dedup(given),
            from: KeysFrom::Given,
        });
    }
    if !witness.keys.is_empty() {
        return Ok(Keys {
            keys: witness.keys.clone(),
            from: KeysFrom::Pinned,
        });
    }
    let Some(checkpoint) = node else {
        return Err(VerifyError::NoKeys);
    };
    // Node keys are named "<origin>/node<ID>".
    let voters: Vec<String> = checkpoint
        .voters
        .iter()
        .map(|id| format!("{}/node{id}", checkpoint.origin))
        .collect();
    let mut keys = Vec::new();
    for text in &checkpoint.keys {
        let key = VerifierKey::parse(text).map_err(|reason| VerifyError::Malformed {
            what: format!("the node's keys: {reason}"),
        })?;
        if voters.contains(&key.name) {
            keys.push(key);
        }
    }
    if keys.is_empty() {
        return Err(VerifyError::NoKeys);
    }
    Ok(Keys {
        keys: dedup(keys),
        from: KeysFrom::Node,
    })
}

/// `keys` without repeats: a key listed twice would need two signatures of one node.
fn dedup(keys: Vec<VerifierKey>) -> Vec<VerifierKey> {
    let mut once: Vec<VerifierKey> = Vec::with_capacity(keys.len());
    for key in keys {
        if !once.contains(&key) {
            once.push(key);
        }
    }
    once
}

/// A checkpoint this machine verified, with its signed note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub checkpoint: Checkpoint,
    pub note: String,
}

/// What a verifier remembers between runs: the voter keys it pinned and the largest
/// checkpoint it verified (whose origin is the log it pinned).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Witness {
    pub keys: Vec<VerifierKey>,
    pub seen: Option<Seen>,
}

/// The state file's form.
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
struct StateFile {
    #[serde(default)]
    keys: Vec<String>,
    #[serde(default)]
    checkpoint: Option<SeenFile>,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct SeenFile {
    origin: String,
    size: u64,
    /// Standard base64, as in the note.
    root: String,
    note: String,
}

impl Witness {
    /// The log pinned: the origin of the checkpoint remembered.
    pub fn origin(&self) -> Option<&str> {
        self.seen.as_ref().map(|s| s.checkpoint.origin.as_str())
    }

    /// The consistency proof `(from, to)` a checkpoint of `size` needs to be checked against
    /// the one remembered, smaller size first; `None` when none is needed (nothing
    /// remembered, the same size, or an empty tree, which is a prefix of any).
    pub fn consistency_needed(&self, size: u64) -> Option<(u64, u64)> {
        let old = self.seen.as_ref()?.checkpoint.size;
        let (from, to) = (old.min(size), old.max(size));
        (from != to && from != 0).then_some((from, to))
    }

    /// The state after `verdict`: its keys pinned, and its checkpoint remembered unless a
    /// larger one already is (the state never goes back to a smaller tree).
    pub fn advance(&self, verdict: &Verdict, keys: &Keys) -> Self {
        let seen = match &self.seen {
            Some(old) if old.checkpoint.size > verdict.checkpoint.size => old.clone(),
            _ => Seen {
                checkpoint: verdict.checkpoint.clone(),
                note: verdict.note.clone(),
            },
        };
        Self {
            keys: keys.keys.clone(),
            seen: Some(seen),
        }
    }

    /// The state's JSON: `{"keys": [vkey…], "checkpoint": {"origin", "size", "root", "note"}}`.
    pub fn to_json(&self) -> String {
        let file = StateFile {
            keys: self.keys.iter().map(ToString::to_string).collect(),
            checkpoint: self.seen.as_ref().map(|s| SeenFile {
                origin: s.checkpoint.origin.clone(),
                size: s.checkpoint.size,
                root: tlog::encode_hash(&s.checkpoint.root),
                note: s.note.clone(),
            }),
        };
        serde_json::to_string_pretty(&file).unwrap_or_default() + "\n"
    }

    /// Reads the state's JSON, checking that the note says what the checkpoint fields do.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let file: StateFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let keys = file
            .keys
            .iter()
            .map(|k| VerifierKey::parse(k).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        let seen = match file.checkpoint {
            None => None,
            Some(s) => {
                let checkpoint = Checkpoint {
                    origin: s.origin,
                    size: s.size,
                    root: tlog::decode_hash(&s.root).map_err(|e| e.to_string())?,
                };
                let (body, _) = tlog::open_note(&s.note).map_err(|e| e.to_string())?;
                if Checkpoint::parse(&body).map_err(|e| e.to_string())? != checkpoint {
                    return Err("the checkpoint's note says another size or root".into());
                }
                Some(Seen {
                    checkpoint,
                    note: s.note,
                })
            }
        };
        Ok(Self { keys, seen })
    }

    /// The state in `path`; a missing file is a first use (nothing pinned).
    pub fn load(path: &Path) -> Result<Self, VerifyError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::from_json(&text).map_err(|reason| VerifyError::StateCorrupt {
                path: path.to_owned(),
                reason,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(source) => Err(VerifyError::StateIo {
                path: path.to_owned(),
                source,
            }),
        }
    }

    /// Writes this state to `path` in place of `loaded` (what this run read from it): to a
    /// temporary file beside it, flushed, then renamed over it, so a reader sees the old
    /// state or the new, never half of one. Refuses when the file no longer holds `loaded`:
    /// a concurrent run saved a checkpoint this one has not checked against. (A run saving
    /// between that check and the rename is not caught; verifications are seconds apart.)
    pub fn save(&self, path: &Path, loaded: &Self) -> Result<(), VerifyError> {
        let now = Self::load(path)?;
        if now == *self {
            return Ok(());
        }
        if now != *loaded {
            return Err(VerifyError::StateChanged {
                path: path.to_owned(),
            });
        }
        let io = |source| VerifyError::StateIo {
            path: path.to_owned(),
            source,
        };
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(io)?;
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let temp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        let written = std::fs::File::create(&temp).and_then(|mut f| {
            f.write_all(self.to_json().as_bytes())?;
            f.sync_all()
        });
        if let Err(e) = written.and_then(|()| std::fs::rename(&temp, path)) {
            let _ = std::fs::remove_file(&temp);
            return Err(io(e));
        }
        Ok(())
    }
}

/// Where the state is kept by default: `$XDG_STATE_HOME/rowcall/verify.json`, else
/// `~/.local/state/rowcall/verify.json`; `None` without a home.
pub fn default_state_path() -> Option<PathBuf> {
    let xdg = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        // The XDG spec ignores a relative path.
        .filter(|p| p.is_absolute());
    let base = xdg.or_else(|| {
        let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
        Some(PathBuf::from(home).join(".local").join("state"))
    })?;
    Some(base.join("rowcall").join("verify.json"))
}

/// What the nodes answered: the checkpoint, the receipt's proof against it, and the
/// consistency proof [`Witness::consistency_needed`] asked for, if any.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evidence {
    pub checkpoint: proto::SignedCheckpoint,
    pub proof: proto::InclusionProof,
    pub consistency: Option<proto::ConsistencyProof>,
}

/// How the leaf was bound to the claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeafCheck {
    /// The receipt given encodes to the leaf (or, its body dropped, to the leaf hash).
    Receipt,
    /// The leaf the node sent names the id and hashes to the leaf hash.
    Id,
    /// Retention dropped the body and only an id was given: the leaf hash is in the log,
    /// but that it is this id's rests on the node's word.
    HashOnly,
}

/// How the checkpoint relates to the one the state remembered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum History {
    /// Nothing was remembered: this one is pinned now.
    First,
    /// The same tree.
    Same,
    /// It extends the remembered tree of this size.
    Extends { size: u64 },
    /// It is a prefix of the larger remembered tree of this size (a node behind).
    Behind { size: u64 },
}

/// What was proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub id: String,
    pub leaf: LeafCheck,
    pub body_dropped: bool,
    pub leaf_index: u64,
    /// The co-signed checkpoint the leaf is in.
    pub checkpoint: Checkpoint,
    pub note: String,
    /// The names of the pinned keys that signed it.
    pub signers: Vec<String>,
    /// How many keys were pinned.
    pub pinned: usize,
    pub keys_from: KeysFrom,
    pub history: History,
}

impl fmt::Display for Verdict {
    /// One line: what was proved.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self { id, checkpoint, .. } = self;
        write!(f, "verified {id}: ")?;
        if self.leaf == LeafCheck::Receipt {
            write!(f, "the receipt given is ")?;
        }
        write!(f, "leaf {} of {}", self.leaf_index, checkpoint.size)?;
        match (self.leaf, self.body_dropped) {
            (LeafCheck::HashOnly, _) => write!(
                f,
                " (body dropped by retention: its hash is proved, that it is {id}'s is the node's word)"
            )?,
            (_, true) => write!(f, " (body dropped by retention)")?,
            _ => {}
        }
        write!(
            f,
            " in the checkpoint co-signed by {} of {} pinned voters ({}), ",
            self.signers.len(),
            self.pinned,
            checkpoint.origin
        )?;
        match self.history {
            History::First => write!(f, "the first checkpoint seen (remembered from now on)")?,
            History::Same => write!(f, "the same checkpoint as seen before")?,
            History::Extends { size } => {
                write!(
                    f,
                    "consistent with the checkpoint of size {size} seen before"
                )?;
            }
            History::Behind { size } => write!(
                f,
                "a prefix of the larger checkpoint of size {size} seen before (kept)"
            )?,
        }
        if self.keys_from == KeysFrom::Node {
            write!(
                f,
                "; voter keys taken from the node on first use and pinned"
            )?;
        }
        Ok(())
    }
}

impl Verdict {
    /// The verdict as JSON (`--json`).
    pub fn to_json(&self) -> Value {
        let leaf = match self.leaf {
            LeafCheck::Receipt => "receipt",
            LeafCheck::Id => "id",
            LeafCheck::HashOnly => "hash_only",
        };
        let keys_from = match self.keys_from {
            KeysFrom::Given => "given",
            KeysFrom::Pinned => "pinned",
            KeysFrom::Node => "node",
        };
        let before = match self.history {
            History::First => json!({"relation": "first"}),
            History::Same => json!({"relation": "same", "size": self.checkpoint.size}),
            History::Extends { size } => json!({"relation": "extends", "size": size}),
            History::Behind { size } => json!({"relation": "behind", "size": size}),
        };
        json!({
            "verified": true,
            "id": self.id,
            "leaf": leaf,
            "body_dropped": self.body_dropped,
            "leaf_index": self.leaf_index,
            "origin": self.checkpoint.origin,
            "tree_size": self.checkpoint.size,
            "root": tlog::encode_hash(&self.checkpoint.root),
            "signers": self.signers,
            "pinned": self.pinned,
            "keys_from": keys_from,
            "before": before,
            "line": self.to_string(),
        })
    }
}

/// Checks `claim` against `evidence`, trusting only `keys` and what `witness` remembers:
/// the checkpoint (its note, a majority of the keys, the pinned origin), its history
/// against the checkpoint remembered, the leaf, and the leaf's inclusion in the checkpoint.
pub fn verify(
    claim: &Claim,
    evidence: &Evidence,
    witness: &Witness,
    keys: &Keys,
) -> Result<Verdict, VerifyError> {
    let (checkpoint, signers) = check_checkpoint(&evidence.checkpoint, witness, keys)?;
    let history = check_history(witness, &checkpoint, evidence.consistency.as_ref())?;
    let proof = &evidence.proof;
    let leaf = check_leaf(claim, proof)?;
    if proof.tree_size != checkpoint.size || proof.root != checkpoint.root {
        return Err(VerifyError::OtherTree {
            proof_size: proof.tree_size,
            checkpoint_size: checkpoint.size,
        });
    }
    let path = hashes("an inclusion path hash", &proof.path)?;
    let leaf_hash = hash("the leaf hash", &proof.leaf_hash)?;
    tlog::verify_inclusion(
        proof.leaf_index,
        checkpoint.size,
        &leaf_hash,
        &path,
        &checkpoint.root,
    )
    .map_err(|reason| VerifyError::Inclusion {
        index: proof.leaf_index,
        size: checkpoint.size,
        reason,
    })?;
    Ok(Verdict {
        id: claim.id().to_owned(),
        leaf,
        body_dropped: proof.body_dropped,
        leaf_index: proof.leaf_index,
        checkpoint,
        note: evidence.checkpoint.note.clone(),
        signers,
        pinned: keys.keys.len(),
        keys_from: keys.from,
        history,
    })
}

/// A 32-byte hash from the wire.
fn hash(what: &str, bytes: &[u8]) -> Result<Hash, VerifyError> {
    bytes.try_into().map_err(|_| VerifyError::Malformed {
        what: format!("{what} is {} bytes, not 32", bytes.len()),
    })
}

fn hashes(what: &str, list: &[Vec<u8>]) -> Result<Vec<Hash>, VerifyError> {
    list.iter().map(|h| hash(what, h)).collect()
}

/// The checkpoint as its note says it, and the names of the pinned keys that signed it:
/// the note must say what the fields say, be of the pinned log, and carry valid signatures
/// of a strict majority of the keys.
fn check_checkpoint(
    signed: &proto::SignedCheckpoint,
    witness: &Witness,
    keys: &Keys,
) -> Result<(Checkpoint, Vec<String>), VerifyError> {
    let claimed = Checkpoint {
        origin: signed.origin.clone(),
        size: signed.size,
        root: hash("the checkpoint's root", &signed.root)?,
    };
    if let Some(pinned) = witness.origin() {
        if pinned != claimed.origin {
            return Err(VerifyError::OtherOrigin {
                pinned: pinned.to_owned(),
                got: claimed.origin,
            });
        }
    }
    if keys.keys.is_empty() {
        return Err(VerifyError::NoKeys);
    }
    let (body, signers) =
        tlog::verified_signers(&signed.note, &keys.keys).map_err(|reason| match reason {
            TlogError::Signature(_) => VerifyError::BadSignature {
                size: signed.size,
                reason,
            },
            other => VerifyError::Note {
                reason: other.to_string(),
            },
        })?;
    let read = Checkpoint::parse(&body).map_err(|e| VerifyError::Note {
        reason: e.to_string(),
    })?;
    if read != claimed {
        return Err(VerifyError::Note {
            reason: format!(
                "it signs {} size {} root {}, the answer says {} size {} root {}",
                read.origin,
                read.size,
                tlog::encode_hash(&read.root),
                claimed.origin,
                claimed.size,
                tlog::encode_hash(&claimed.root)
            ),
        });
    }
    // A strict majority: two disjoint sets of signers cannot both have one.
    if signers.len() * 2 <= keys.keys.len() {
        return Err(VerifyError::NotMajority {
            size: read.size,
            signed: signers.len(),
            pinned: keys.keys.len(),
        });
    }
    Ok((read, signers.iter().map(|k| k.name.clone()).collect()))
}

/// How `new` relates to the checkpoint `witness` remembers: the same size must have the
/// same root, and the smaller tree must be a prefix of the larger by `consistency`.
fn check_history(
    witness: &Witness,
    new: &Checkpoint,
    consistency: Option<&proto::ConsistencyProof>,
) -> Result<History, VerifyError> {
    let Some(seen) = &witness.seen else {
        return Ok(History::First);
    };
    let old = &seen.checkpoint;
    if old.size == new.size {
        return if old.root == new.root {
            Ok(History::Same)
        } else {
            Err(VerifyError::Fork { size: new.size })
        };
    }
    let (small, large) = if old.size < new.size {
        (old, new)
    } else {
        (new, old)
    };
    let path = match consistency {
        Some(p) if p.from == small.size && p.to == large.size => {
            hashes("a consistency path hash", &p.path)?
        }
        Some(p) => {
            return Err(VerifyError::Malformed {
                what: format!(
                    "a consistency proof from {} to {} where {} to {} was asked",
                    p.from, p.to, small.size, large.size
                ),
            })
        }
        None if small.size == 0 => Vec::new(),
        None => {
            return Err(VerifyError::MissingConsistency {
                from: small.size,
                to: large.size,
            })
        }
    };
    if let Err(e) =
        tlog::verify_consistency(small.size, large.size, &small.root, &large.root, &path)
    {
        // When the path holds from the root the node gives for the smaller size, and that
        // root is not the co-signed one, the larger co-signed tree grew from another tree.
        let theirs = consistency.and_then(|p| hash("", &p.from_root).ok());
        if let Some(theirs) = theirs.filter(|r| *r != small.root) {
            if tlog::verify_consistency(small.size, large.size, &theirs, &large.root, &path).is_ok()
            {
                return Err(VerifyError::Fork { size: small.size });
            }
        }
        return Err(VerifyError::Inconsistent {
            from: small.size,
            to: large.size,
            reason: e.to_string(),
        });
    }
    Ok(if old.size < new.size {
        History::Extends { size: old.size }
    } else {
        History::Behind { size: old.size }
    })
}

/// Binds the proof's leaf to the claim: the proof is for the id; a leaf sent hashes to the
/// leaf hash and is the receipt given (or names the id); a dropped body leaves the hash,
/// which a receipt given must still encode to.
fn check_leaf(claim: &Claim, proof: &proto::InclusionProof) -> Result<LeafCheck, VerifyError> {
    let id = claim.id();
    let other = |got: &str| VerifyError::OtherReceipt {
        want: id.to_owned(),
        got: got.to_owned(),
    };
    if proof.id != id {
        return Err(other(&proof.id));
    }
    let leaf_hash = hash("the leaf hash", &proof.leaf_hash)?;
    let edited = || VerifyError::ReceiptEdited { id: id.to_owned() };
    if proof.leaf.is_empty() {
        if !proof.body_dropped {
            return Err(VerifyError::Malformed {
                what: "no leaf, and retention did not drop its body".into(),
            });
        }
        return match claim {
            Claim::Receipt(r) if tlog::leaf_hash(&r.leaf()) == leaf_hash => Ok(LeafCheck::Receipt),
            Claim::Receipt(_) => Err(edited()),
            Claim::Id(_) => Ok(LeafCheck::HashOnly),
        };
    }
    if tlog::leaf_hash(proof.leaf.as_bytes()) != leaf_hash {
        return Err(VerifyError::LeafHash {
            index: proof.leaf_index,
        });
    }
    match claim {
        Claim::Receipt(r) if r.leaf() == proof.leaf.as_bytes() => Ok(LeafCheck::Receipt),
        Claim::Receipt(_) => Err(edited()),
        Claim::Id(_) => {
            let leaf: Value =
                serde_json::from_str(&proof.leaf).map_err(|e| VerifyError::Malformed {
                    what: format!("the leaf is not JSON: {e}"),
                })?;
            match leaf.get("id").and_then(Value::as_str) {
                Some(named) if named == id => Ok(LeafCheck::Id),
                named => Err(other(named.unwrap_or("no id"))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rowcall_proto::tlog::reference;
    use rowcall_proto::tlog::{NoteSignature, SigningKey};
    use tonic_types::StatusExt as _;

    const ORIGIN: &str = "rowcall/test";

    /// The voters' signing keys.
    fn voters() -> Vec<SigningKey> {
        (1..=3u8)
            .map(|i| SigningKey::from_seed(&format!("{ORIGIN}/node{i}"), &[i; 32]).unwrap())
            .collect()
    }

    fn pinned(signing: &[SigningKey]) -> Keys {
        Keys {
            keys: signing.iter().map(SigningKey::verifier).collect(),
            from: KeysFrom::Given,
        }
    }

    fn receipt(i: usize) -> Receipt {
        // Some failed, so leaves with an error are in the tree too.
        let failed = i % 5 == 3;
        Receipt {
            id: format!("inv_{i:010}"),
            key: "ECHO".into(),
            row_version: 3,
            caller: "public".into(),
            started_at: format!("2026-12-01T00:00:{:02}.000Z", i % 60),
            input_sha256: format!("{i:064x}"),
            output_sha256: "ab".repeat(32),
            ok: !failed,
            error: failed.then(|| "upstream_timeout".into()),
        }
    }

    /// A receipt log: its receipts, their leaves and leaf hashes.
    struct Log {
        receipts: Vec<Receipt>,
        hashes: Vec<Hash>,
    }

    impl Log {
        fn new(n: usize) -> Self {
            let receipts: Vec<Receipt> = (0..n).map(receipt).collect();
            let hashes = receipts
                .iter()
                .map(|r| tlog::leaf_hash(&r.leaf()))
                .collect();
            Self { receipts, hashes }
        }

        /// The same log with receipt `i` rewritten: the history a fork tells.
        fn forked_at(&self, i: usize) -> Self {
            let mut receipts = self.receipts.clone();
            receipts[i].caller = "someone-else".into();
            let hashes = receipts
                .iter()
                .map(|r| tlog::leaf_hash(&r.leaf()))
                .collect();
            Self { receipts, hashes }
        }

        fn root(&self, size: usize) -> Hash {
            reference::root(&self.hashes[..size])
        }

        /// The checkpoint of `size`, signed by `signers`.
        fn checkpoint(&self, size: usize, signers: &[&SigningKey]) -> proto::SignedCheckpoint {
            let body = Checkpoint {
                origin: ORIGIN.into(),
                size: size as u64,
                root: self.root(size),
            }
            .body();
            let signatures: Vec<NoteSignature> = signers
                .iter()
                .map(|k| NoteSignature {
                    name: k.name.clone(),
                    key_id: k.verifier().id(),
                    signature: k.sign(body.as_bytes()).to_vec(),
                })
                .collect();
            proto::SignedCheckpoint {
                origin: ORIGIN.into(),
                size: size as u64,
                root: self.root(size).to_vec(),
                note: tlog::sign_note(&body, &signatures),
                signers: (1..=signers.len() as u64).collect(),
                voters: vec![1, 2, 3],
                keys: voters().iter().map(|k| k.verifier().to_string()).collect(),
            }
        }

        /// Receipt `i`'s inclusion proof in the tree of `size`.
        fn prove(&self, i: usize, size: usize) -> proto::InclusionProof {
            proto::InclusionProof {
                id: self.receipts[i].id.clone(),
                leaf_index: i as u64,
                leaf: String::from_utf8(self.receipts[i].leaf()).unwrap(),
                leaf_hash: self.hashes[i].to_vec(),
                tree_size: size as u64,
                root: self.root(size).to_vec(),
                path: reference::inclusion(i, &self.hashes[..size])
                    .iter()
                    .map(|h| h.to_vec())
                    .collect(),
                body_dropped: false,
                checkpoint: None,
            }
        }

        fn consistency(&self, from: usize, to: usize) -> proto::ConsistencyProof {
            proto::ConsistencyProof {
                from: from as u64,
                to: to as u64,
                from_root: self.root(from).to_vec(),
                to_root: self.root(to).to_vec(),
                path: reference::consistency(from, &self.hashes[..to])
                    .iter()
                    .map(|h| h.to_vec())
                    .collect(),
            }
        }

        /// Receipt `i` proved in the checkpoint of `size` co-signed by every voter.
        fn evidence(&self, i: usize, size: usize) -> Evidence {
            let keys = voters();
            Evidence {
                checkpoint: self.checkpoint(size, &keys.iter().collect::<Vec<_>>()),
                proof: self.prove(i, size),
                consistency: None,
            }
        }

        /// A state that verified the checkpoint of `size`.
        fn witness(&self, size: usize) -> Witness {
            let keys = voters();
            let signed = self.checkpoint(size, &keys.iter().collect::<Vec<_>>());
            Witness {
                keys: pinned(&keys).keys,
                seen: Some(Seen {
                    checkpoint: Checkpoint {
                        origin: ORIGIN.into(),
                        size: size as u64,
                        root: self.root(size),
                    },
                    note: signed.note,
                }),
            }
        }
    }

    /// What `verify` refuses with (a verdict fails the test).
    fn refused(claim: &Claim, evidence: &Evidence, witness: &Witness, keys: &Keys) -> VerifyError {
        match verify(claim, evidence, witness, keys) {
            Ok(verdict) => panic!("verified: {verdict}"),
            Err(e) => e,
        }
    }

    #[test]
    fn a_good_proof_verifies_for_the_receipt_and_for_its_id() {
        let log = Log::new(120);
        let keys = pinned(&voters());
        let evidence = log.evidence(41, 120);
        let by_receipt = Claim::Receipt(log.receipts[41].clone());
        let verdict = verify(&by_receipt, &evidence, &Witness::default(), &keys).unwrap();
        assert_eq!(verdict.leaf, LeafCheck::Receipt);
        assert_eq!(
            (verdict.leaf_index, verdict.checkpoint.size),
            (41, 120),
            "{verdict}"
        );
        assert_eq!(verdict.signers.len(), 3);
        assert_eq!(verdict.history, History::First);
        let line = verdict.to_string();
        assert!(
            line.starts_with("verified inv_0000000041: the receipt given is leaf 41 of 120")
                && line.contains("co-signed by 3 of 3 pinned voters (rowcall/test)"),
            "{line}"
        );
        let by_id = Claim::Id("inv_0000000041".into());
        let verdict = verify(&by_id, &evidence, &Witness::default(), &keys).unwrap();
        assert_eq!(verdict.leaf, LeafCheck::Id);
        // Every leaf of a tree whose size is not a power of two, at its edges.
        for (i, size) in [(0, 1), (0, 120), (119, 120), (64, 65), (96, 97)] {
            let claim = Claim::Receipt(log.receipts[i].clone());
            verify(&claim, &log.evidence(i, size), &Witness::default(), &keys).unwrap();
        }
    }

    #[test]
    fn an_edited_receipt_or_leaf_fails() {
        let log = Log::new(120);
        let keys = pinned(&voters());
        let mut evidence = log.evidence(41, 120);
        let mut edited = log.receipts[41].clone();
        edited.ok = !edited.ok;
        let e = refused(
            &Claim::Receipt(edited.clone()),
            &evidence,
            &Witness::default(),
            &keys,
        );
        assert!(matches!(e, VerifyError::ReceiptEdited { .. }), "{e}");
        // With the body dropped, the receipt must still encode to the logged hash.
        evidence.proof.leaf.clear();
        evidence.proof.body_dropped = true;
        let e = refused(
            &Claim::Receipt(edited),
            &evidence,
            &Witness::default(),
            &keys,
        );
        assert!(matches!(e, VerifyError::ReceiptEdited { .. }), "{e}");
        let honest = Claim::Receipt(log.receipts[41].clone());
        let verdict = verify(&honest, &evidence, &Witness::default(), &keys).unwrap();
        assert!(verdict.body_dropped && verdict.leaf == LeafCheck::Receipt);
        // An id alone against a dropped body: reported, not refused.
        let by_id = Claim::Id("inv_0000000041".into());
        let verdict = verify(&by_id, &evidence, &Witness::default(), &keys).unwrap();
        assert_eq!(verdict.leaf, LeafCheck::HashOnly);
        assert!(verdict.to_string().contains("body dropped"), "{verdict}");
        // A node that edits the leaf text it sends, keeping the logged hash.
        let mut evidence = log.evidence(41, 120);
        evidence.proof.leaf = evidence.proof.leaf.replace("\"public\"", "\"admin\"");
        let e = refused(&by_id, &evidence, &Witness::default(), &keys);
        assert!(matches!(e, VerifyError::LeafHash { index: 41 }), "{e}");
        // A node that proves another receipt's leaf for the id.
        let mut evidence = log.evidence(40, 120);
        evidence.proof.id = "inv_0000000041".into();
        let e = refused(&by_id, &evidence, &Witness::default(), &keys);
        assert!(matches!(e, VerifyError::OtherReceipt { .. }), "{e}");

        // With the body dropped only the proof names the receipt: it must be the one asked.
        let mut evidence = log.evidence(41, 120);
        evidence.proof.leaf.clear();
        evidence.proof.body_dropped = true;
        let another = Claim::Id("inv_0000000040".into());
        let e = refused(&another, &evidence, &Witness::default(), &keys);
        assert!(matches!(e, VerifyError::OtherReceipt { .. }), "{e}");
    }

    #[test]
    fn a_changed_path_hash_fails() {
        let log = Log::new(120);
        let keys = pinned(&voters());
        let claim = Claim::Receipt(log.receipts[41].clone());
        for at in 0..log.prove(41, 120).path.len() {
            let mut evidence = log.evidence(41, 120);
            evidence.proof.path[at][7] ^= 1;
            let e = refused(&claim, &evidence, &Witness::default(), &keys);
            assert!(matches!(e, VerifyError::Inclusion { .. }), "{e}");
        }
        // A proof into another (smaller, honest) tree than the checkpoint's.
        let mut evidence = log.evidence(41, 120);
        evidence.proof = log.prove(41, 100);
        let e = refused(&claim, &evidence, &Witness::default(), &keys);
        assert!(matches!(e, VerifyError::OtherTree { .. }), "{e}");
    }

    #[test]
    fn a_checkpoint_needs_a_majority_of_the_pinned_keys() {
        let log = Log::new(120);
        let signing = voters();
        let keys = pinned(&signing);
        let claim = Claim::Id("inv_0000000041".into());
        let mut evidence = log.evidence(41, 120);
        evidence.checkpoint = log.checkpoint(120, &[&signing[0]]);
        let e = refused(&claim, &evidence, &Witness::default(), &keys);
        assert!(
            matches!(
                e,
                VerifyError::NotMajority {
                    signed: 1,
                    pinned: 3,
                    ..
                }
            ),
            "{e}"
        );
        // Signatures by keys not pinned do not count.
        let stranger = SigningKey::from_seed(&format!("{ORIGIN}/node9"), &[9; 32]).unwrap();
        evidence.checkpoint = log.checkpoint(120, &[&signing[0], &stranger]);
        let e = refused(&claim, &evidence, &Witness::default(), &keys);
        assert!(
            matches!(e, VerifyError::NotMajority { signed: 1, .. }),
            "{e}"
        );
        // Two of three is a majority.
        evidence.checkpoint = log.checkpoint(120, &[&signing[0], &signing[2]]);
        let verdict = verify(&claim, &evidence, &Witness::default(), &keys).unwrap();
        assert_eq!(verdict.signers.len(), 2);
        // A pinned key's signature over another body is loud, however many others signed.
        let mut forged = log.checkpoint(120, &[&signing[0], &signing[1]]);
        let other_body = Checkpoint::parse(&log.checkpoint(119, &[]).note)
            .unwrap()
            .body();
        let (_, sigs) = tlog::open_note(&forged.note).unwrap();
        let bad = NoteSignature {
            name: signing[2].name.clone(),
            key_id: signing[2].verifier().id(),
            signature: signing[2].sign(other_body.as_bytes()).to_vec(),
        };
        forged.note = tlog::sign_note(
            &Checkpoint::parse(&forged.note).unwrap().body(),
            &[sigs[0].clone(), sigs[1].clone(), bad],
        );
        evidence.checkpoint = forged;
        let e = refused(&claim, &evidence, &Witness::default(), &keys);
        assert!(matches!(e, VerifyError::BadSignature { .. }), "{e}");
        assert!(e.to_string().starts_with("BAD SIGNATURE"), "{e}");
        // A note that signs another tree than the answer's fields say.
        let mut lying = log.checkpoint(119, &[&signing[0], &signing[1], &signing[2]]);
        lying.size = 120;
        lying.root = log.root(120).to_vec();
        evidence.checkpoint = lying;
        let e = refused(&claim, &evidence, &Witness::default(), &keys);
        assert!(matches!(e, VerifyError::Note { .. }), "{e}");
    }

    #[test]
    fn the_same_size_with_another_root_is_a_fork() {
        let log = Log::new(120);
        let forked = log.forked_at(10);
        let keys = pinned(&voters());
        let claim = Claim::Id("inv_0000000041".into());
        let witness = forked.witness(120);
        let e = refused(&claim, &log.evidence(41, 120), &witness, &keys);
        assert!(matches!(e, VerifyError::Fork { size: 120 }), "{e}");
        assert_eq!(e.to_string(), "FORK: two roots for size 120");
        // The same tree seen again is fine.
        let verdict = verify(&claim, &log.evidence(41, 120), &log.witness(120), &keys).unwrap();
        assert_eq!(verdict.history, History::Same);
    }

    #[test]
    fn a_checkpoint_that_does_not_extend_the_remembered_one_is_caught() {
        let log = Log::new(120);
        let forked = log.forked_at(10);
        let keys = pinned(&voters());
        let claim = Claim::Id("inv_0000000041".into());
        // Remembered: size 97 of the honest log. Consistent growth passes.
        let witness = log.witness(97);
        assert_eq!(witness.consistency_needed(120), Some((97, 120)));
        let mut evidence = log.evidence(41, 120);
        evidence.consistency = Some(log.consistency(97, 120));
        let verdict = verify(&claim, &evidence, &witness, &keys).unwrap();
        assert_eq!(verdict.history, History::Extends { size: 97 });
        assert!(
            verdict
                .to_string()
                .ends_with("consistent with the checkpoint of size 97 seen before"),
            "{verdict}"
        );
        // Without the proof it cannot pass.
        evidence.consistency = None;
        let e = refused(&claim, &evidence, &witness, &keys);
        assert!(
            matches!(e, VerifyError::MissingConsistency { from: 97, to: 120 }),
            "{e}"
        );
        // Remembered: size 97 of another history. The node's own proof shows the new tree
        // grew from a different tree of size 97: a fork.
        let witness = forked.witness(97);
        evidence.consistency = Some(log.consistency(97, 120));
        let e = refused(&claim, &evidence, &witness, &keys);
        assert!(matches!(e, VerifyError::Fork { size: 97 }), "{e}");
        // A node that claims the remembered root in its proof: still no path.
        let mut lie = log.consistency(97, 120);
        lie.from_root = forked.root(97).to_vec();
        evidence.consistency = Some(lie);
        let e = refused(&claim, &evidence, &witness, &keys);
        assert!(
            matches!(
                e,
                VerifyError::Inconsistent {
                    from: 97,
                    to: 120,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn a_smaller_checkpoint_must_be_a_prefix_and_never_rolls_the_state_back() {
        let log = Log::new(120);
        let keys = pinned(&voters());
        let claim = Claim::Id("inv_0000000041".into());
        let witness = log.witness(120);
        // A node behind answers with size 97: checked against the 120 remembered.
        assert_eq!(witness.consistency_needed(97), Some((97, 120)));
        let mut evidence = log.evidence(41, 97);
        evidence.consistency = Some(log.consistency(97, 120));
        let verdict = verify(&claim, &evidence, &witness, &keys).unwrap();
        assert_eq!(verdict.history, History::Behind { size: 120 });
        let next = witness.advance(&verdict, &keys);
        assert_eq!(next.seen, witness.seen, "the state went back to size 97");
        // A smaller checkpoint of another history is caught too.
        let forked = log.forked_at(10);
        let mut evidence = forked.evidence(41, 97);
        evidence.consistency = Some(forked.consistency(97, 120));
        let e = refused(&claim, &evidence, &witness, &keys);
        assert!(matches!(e, VerifyError::Inconsistent { .. }), "{e}");
    }

    #[test]
    fn the_state_file_round_trips_and_is_not_rolled_back() {
        let dir = std::env::temp_dir().join(format!("rowcall-verify-{}", std::process::id()));
        let path = dir.join("state").join("verify.json");
        let _ = std::fs::remove_dir_all(&dir);
        let log = Log::new(120);
        let keys = pinned(&voters());
        let claim = Claim::Id("inv_0000000041".into());
        // First use: nothing pinned; the verdict pins keys and checkpoint.
        let first = Witness::load(&path).unwrap();
        assert_eq!(first, Witness::default());
        let verdict = verify(&claim, &log.evidence(41, 120), &first, &keys).unwrap();
        let saved = first.advance(&verdict, &keys);
        saved.save(&path, &first).unwrap();
        let read = Witness::load(&path).unwrap();
        assert_eq!(read, saved);
        assert_eq!(read.origin(), Some(ORIGIN));
        assert_eq!(read.keys, keys.keys);
        // The next run checks against it with the pinned keys.
        let pinned_keys = choose_keys(Vec::new(), &read, None).unwrap();
        assert_eq!(pinned_keys.from, KeysFrom::Pinned);
        let mut evidence = log.evidence(41, 97);
        evidence.consistency = Some(log.consistency(97, 120));
        let behind = verify(&claim, &evidence, &read, &pinned_keys).unwrap();
        read.advance(&behind, &pinned_keys)
            .save(&path, &read)
            .unwrap();
        let after = Witness::load(&path).unwrap();
        assert_eq!(after.seen.as_ref().map(|s| s.checkpoint.size), Some(120));
        // A run that loaded before another saved does not write over it.
        let stale = Witness::default();
        let result = stale.advance(&behind, &pinned_keys).save(&path, &stale);
        assert!(
            matches!(result, Err(VerifyError::StateChanged { .. })),
            "{result:?}"
        );
        assert_eq!(Witness::load(&path).unwrap(), after);
        // A hand-edited root is refused, not trusted.
        let text = std::fs::read_to_string(&path).unwrap();
        let root = tlog::encode_hash(&log.root(120));
        std::fs::write(
            &path,
            text.replacen(&root, &tlog::encode_hash(&log.root(97)), 1),
        )
        .unwrap();
        assert!(matches!(
            Witness::load(&path),
            Err(VerifyError::StateCorrupt { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn keys_come_from_the_operator_the_state_or_the_node_on_first_use_only() {
        let log = Log::new(120);
        let signing = voters();
        let checkpoint = log.checkpoint(120, &[&signing[0], &signing[1]]);
        assert!(matches!(
            choose_keys(Vec::new(), &Witness::default(), None),
            Err(VerifyError::NoKeys)
        ));
        // Trust on first use takes the voters' keys only.
        let mut with_learner = checkpoint.clone();
        let learner = SigningKey::from_seed(&format!("{ORIGIN}/node4"), &[4; 32]).unwrap();
        with_learner.keys.push(learner.verifier().to_string());
        let keys = choose_keys(Vec::new(), &Witness::default(), Some(&with_learner)).unwrap();
        assert_eq!(keys.from, KeysFrom::Node);
        assert_eq!(keys.keys, pinned(&signing).keys);
        // Pinned keys win over the node's.
        let witness = Witness {
            keys: vec![signing[0].verifier()],
            seen: None,
        };
        let keys = choose_keys(Vec::new(), &witness, Some(&with_learner)).unwrap();
        assert_eq!((keys.from, keys.keys.len()), (KeysFrom::Pinned, 1));
        // A key file: one per line, comments skipped, a key given twice counted once.
        let text = format!(
            "# the voters\n{}\n\n{}\n{}\n",
            signing[0].verifier(),
            signing[1].verifier(),
            signing[1].verifier()
        );
        let keys = choose_keys(parse_keys(&text).unwrap(), &witness, None).unwrap();
        assert_eq!((keys.from, keys.keys.len()), (KeysFrom::Given, 2));
        assert!(matches!(
            parse_keys("nonsense"),
            Err(VerifyError::BadKey { .. })
        ));
        // A checkpoint of another log than the pinned one is refused.
        let mut other = log.evidence(41, 120);
        other.checkpoint.origin = "rowcall/other".into();
        let witness = log.witness(120);
        let e = refused(
            &Claim::Id("inv_0000000041".into()),
            &other,
            &witness,
            &pinned(&signing),
        );
        assert!(matches!(e, VerifyError::OtherOrigin { .. }), "{e}");
    }

    /// A node that serves `log` as a transparency log whose latest co-signed checkpoint is
    /// of `size`, for `rowcall verify` end to end.
    struct FakeNode {
        log: Log,
        size: usize,
    }

    #[derive(Clone)]
    struct Fake(std::sync::Arc<std::sync::Mutex<FakeNode>>);

    #[tonic::async_trait]
    impl proto::transparency_server::Transparency for Fake {
        async fn checkpoint(
            &self,
            _: tonic::Request<proto::CheckpointRequest>,
        ) -> Result<tonic::Response<proto::SignedCheckpoint>, tonic::Status> {
            let node = self.0.lock().unwrap();
            let keys = voters();
            let all: Vec<&SigningKey> = keys.iter().collect();
            Ok(tonic::Response::new(node.log.checkpoint(node.size, &all)))
        }

        async fn prove(
            &self,
            request: tonic::Request<proto::ProveRequest>,
        ) -> Result<tonic::Response<proto::InclusionProof>, tonic::Status> {
            let node = self.0.lock().unwrap();
            let proto::ProveRequest { id, size } = request.into_inner();
            let Some(index) = node.log.receipts.iter().position(|r| r.id == id) else {
                return Err(tonic::Status::not_found(format!("no receipt {id:?}")));
            };
            let size = if size == 0 { node.size } else { size as usize };
            if index >= size {
                // As a node refuses it: with rowcall's code, so the client does not retry.
                let mut details = tonic_types::ErrorDetails::new();
                details.set_error_info(
                    "not_yet_checkpointed",
                    "rowcall",
                    std::collections::HashMap::new(),
                );
                return Err(tonic::Status::with_error_details(
                    tonic::Code::FailedPrecondition,
                    format!("receipt {id} is leaf {index}, beyond the tree of {size} leaves"),
                    details,
                ));
            }
            let mut proof = node.log.prove(index, size);
            if size == node.size {
                let keys = voters();
                let all: Vec<&SigningKey> = keys.iter().collect();
                proof.checkpoint = Some(node.log.checkpoint(size, &all));
            }
            Ok(tonic::Response::new(proof))
        }

        async fn consistency(
            &self,
            request: tonic::Request<proto::ConsistencyRequest>,
        ) -> Result<tonic::Response<proto::ConsistencyProof>, tonic::Status> {
            let node = self.0.lock().unwrap();
            let proto::ConsistencyRequest { from, to } = request.into_inner();
            let proof = node.log.consistency(from as usize, to as usize);
            Ok(tonic::Response::new(proof))
        }

        async fn leaves(
            &self,
            _: tonic::Request<proto::LeavesRequest>,
        ) -> Result<tonic::Response<proto::LeavesResponse>, tonic::Status> {
            Err(tonic::Status::unimplemented("not needed to verify"))
        }
    }

    /// Runs `rowcall --nodes ADDRESS ARGS…`: the exit code, stdout and stderr.
    async fn rowcall(address: &str, args: &[&str]) -> (u8, String, String) {
        let mut argv = vec!["rowcall", "--nodes", address, "--timeout", "5s"];
        argv.extend_from_slice(args);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code =
            crate::cli::execute(argv, &mut out, &mut err, crate::render::Style::plain()).await;
        let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
        (code, text(out), text(err))
    }

    #[tokio::test]
    async fn rowcall_verify_end_to_end_against_a_node() {
        let node = Fake(std::sync::Arc::new(std::sync::Mutex::new(FakeNode {
            log: Log::new(120),
            size: 97,
        })));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("http://{}", listener.local_addr().unwrap());
        let service = proto::transparency_server::TransparencyServer::new(node.clone());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        let dir = std::env::temp_dir().join(format!("rowcall-verify-cli-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let state = dir.join("verify.json");
        let state = state.to_str().unwrap();
        let id = "inv_0000000041";

        // Nothing pinned and no key given: refused.
        let (code, _, err) = rowcall(&address, &["verify", id, "--state", state]).await;
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("no voter keys pinned"), "{err}");
        // Trust on first use pins the node's voter keys and its checkpoint.
        let (code, out, err) = rowcall(
            &address,
            &["verify", id, "--state", state, "--trust-node-keys"],
        )
        .await;
        assert_eq!(code, 0, "{err}");
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(
            out.starts_with("verified inv_0000000041: leaf 41 of 97 in the checkpoint co-signed by 3 of 3 pinned voters (rowcall/test)"),
            "{out}"
        );
        // The log grows: checked consistent with the 97 remembered, with the pinned keys.
        node.0.lock().unwrap().size = 120;
        let file = dir.join("receipt.json");
        let r = receipt(41);
        let printed = json!({"id": r.id, "key": r.key, "row_version": r.row_version,
            "caller": r.caller, "input_sha256": r.input_sha256,
            "output_sha256": r.output_sha256, "ok": r.ok, "error": r.error,
            "started_at": r.started_at, "duration_ms": 3});
        std::fs::write(&file, printed.to_string()).unwrap();
        let file = file.to_str().unwrap();
        let (code, out, err) = rowcall(
            &address,
            &["verify", "--receipt", file, "--state", state, "--json"],
        )
        .await;
        assert_eq!(code, 0, "{err}");
        let verdict: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(verdict["leaf"], "receipt");
        assert_eq!(
            verdict["before"],
            json!({"relation": "extends", "size": 97})
        );
        let saved = Witness::load(Path::new(state)).unwrap();
        assert_eq!(saved.seen.map(|s| s.checkpoint.size), Some(120));
        // A receipt past the latest checkpoint: not yet, with its own exit code.
        node.0.lock().unwrap().size = 100;
        let (code, _, err) =
            rowcall(&address, &["verify", "inv_0000000110", "--state", state]).await;
        assert_eq!(code, crate::cli::EXIT_NOT_YET, "{err}");
        assert!(err.contains("try again in a second"), "{err}");
        // The node now serves another history of the same size: a fork, and the state keeps
        // the checkpoint it had.
        {
            let mut node = node.0.lock().unwrap();
            node.log = node.log.forked_at(10);
            node.size = 120;
        }
        let (code, _, err) = rowcall(&address, &["verify", id, "--state", state]).await;
        assert_eq!(code, 1, "{err}");
        assert_eq!(err.trim(), "rowcall: FORK: two roots for size 120");
        let kept = Witness::load(Path::new(state)).unwrap();
        let honest_root = Log::new(120).root(120);
        assert_eq!(kept.seen.map(|s| s.checkpoint.root), Some(honest_root));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_receipt_reads_from_the_json_rowcall_prints() {
        let r = receipt(3);
        let printed = json!({"id": r.id, "key": r.key, "row_version": r.row_version,
            "caller": r.caller, "input_sha256": r.input_sha256, "output_sha256": r.output_sha256,
            "ok": r.ok, "error": r.error, "started_at": r.started_at, "duration_ms": 12,
            "served_by": 2, "input": "{}", "output": "x", "index": 88});
        assert_eq!(Receipt::from_json(&printed.to_string()).unwrap(), r);
        let ok = receipt(1);
        let mut without_error = json!({"id": ok.id, "key": ok.key, "row_version": 3,
            "caller": ok.caller, "input_sha256": ok.input_sha256,
            "output_sha256": ok.output_sha256, "ok": true, "started_at": ok.started_at});
        assert_eq!(Receipt::from_json(&without_error.to_string()).unwrap(), ok);
        without_error["row_version"] = json!("3");
        assert!(Receipt::from_json(&without_error.to_string()).is_err());
    }
}
