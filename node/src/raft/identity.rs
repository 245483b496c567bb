//! Who a data folder is: the node id it was created for, its incarnation (a random id made
//! with the folder's Raft state, so lost state means a different incarnation), and the
//! cluster it founded or joined.
//!
//! The identity lives **in the database, beside the Raft vote** (`m/identity` in the log
//! tree), so the identity and the Raft state it vouches for are lost, kept and restored
//! together; `identity.json` beside the database is a copy for operators and for the
//! node id check. The database decides: a folder whose database lost its Raft state (the
//! `sled/` folder removed or emptied) while `identity.json` survived comes back as a *new*
//! incarnation, never as the member it was — that member acknowledged entries and cast
//! votes this folder no longer holds. The old incarnation stays in the membership until an
//! operator removes it, so the node cannot rejoin before then ([`crate::cluster`]), and its
//! peers refuse every message addressed to the old incarnation ([`crate::api::peer`]).
//! A folder restored whole from an older copy keeps a consistent (old) identity; that case
//! is caught by asking the peers what this node told them ([`crate::raft::standing`]).
//!
//! The incarnation and the cluster id go into the membership and into every Raft message
//! ([`crate::raft::network`]), so a node that lost its disk cannot pass for the member it
//! was, and nodes of two clusters cannot mix.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

use rand::Rng as _;
use rowcall_proto::raft::Sender;
use serde::{Deserialize, Serialize};

use super::NodeId;

/// The file that holds a copy of a data folder's identity.
pub const IDENTITY_FILE: &str = "identity.json";
/// The database tree and key that hold the identity, beside the Raft vote.
const DB_TREE: &str = "log";
const DB_KEY: &[u8] = b"m/identity";
/// The file that holds the seed of the folder's Ed25519 key, which signs checkpoints of the
/// receipt log (hex, readable by the node's user only).
pub const SIGNING_KEY_FILE: &str = "signing.key";

/// The data format this build reads and writes: the layout of the sled trees, the snapshot
/// files and this identity. Bumped with any change an older build would misread. A node
/// refuses a folder of a newer format (a downgrade would misread it) and records its own on
/// an older one once its stores have opened, having upgraded what they hold.
///
/// 2: the receipt log's Merkle tree (`x/` keys) and snapshot format 3. An older build would
/// apply receipts without their leaves, and the tree would no longer match the cluster's
/// when the folder came back to this build.
///
/// 3: the Raft log's entries on their own write-ahead log (`raft-log/`, [`crate::store::log`]).
/// An older build would find no entries in the database and take the node's log for empty
/// past its purge point, losing what it acknowledged.
///
/// 4: receipt bodies in segment files (`receipts/`, [`crate::store::segments`]), sled keeping
/// where each is. An older build would read those values as receipts and fail on them.
///
/// 5: the receipt log's subtree hashes in a file beside the receipts
/// (`receipts/tree.hashes`, [`crate::store::tree_file`]), each leaf's hash kept with its id
/// in sled. An older build would find no hashes in the database and fail every proof.
///
/// 6: snapshot files compressed at rest ([`crate::store::snapshot::packed`]), and a kept
/// receipt's leaf in its stored value instead of a key of its own. An older build would
/// send a compressed file's bytes to a follower as its lines, and the follower refuse them
/// at every try; it would read the new stored values as receipts and fail on them.
pub const DATA_FORMAT: u32 = 6;

/// The peer protocol this build speaks: the envelope and payloads of the Raft messages
/// between nodes. Builds one version apart interoperate, so a rolling upgrade moves one
/// version at a time; a message from a build further away is refused, saying so.
///
/// 2: openraft 0.10 (its messages read and write as 0.9's did, see `wire_compat`) and
/// appends streamed to each follower (`StreamAppend`); a leader of protocol 2 sends a
/// follower of protocol 1 its appends one at a time, as before.
pub const PEER_PROTOCOL: u32 = 2;

/// Whether a node speaking `ours` takes messages from one speaking `theirs` (0 is a build
/// from before versions: protocol 1).
pub fn protocols_talk(ours: u32, theirs: u32) -> bool {
    ours.abs_diff(theirs.max(1)) <= 1
}

/// The format of folders written before the format was recorded.
fn first_format() -> u32 {
    1
}

/// What `identity.json` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    /// The node id the folder was created for.
    pub node_id: NodeId,
    /// Random, made with the folder, never reused.
    pub incarnation: String,
    /// The cluster this folder founded or joined (none yet on a fresh folder).
    pub cluster_id: Option<String>,
    /// The data format of the folder ([`DATA_FORMAT`] of the newest build that opened it).
    #[serde(default = "first_format")]
    pub format: u32,
}

/// Why the identity could not be read or kept.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// Reading or writing the file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The database failed while the identity was read or written.
    #[error("reading or writing the identity in the database: {0}")]
    Database(String),
    /// The file does not decode.
    #[error("{path} is damaged: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What the decoder said.
        reason: String,
    },
    /// The folder belongs to another node id.
    #[error("data folder {folder} belongs to node {stored}, not node {given}: start it with --id {stored}, or give node {given} its own folder")]
    WrongNode {
        /// The data folder.
        folder: PathBuf,
        /// The id it was created for.
        stored: NodeId,
        /// The id this process was started with.
        given: NodeId,
    },
    /// A database without an identity: made by a rowcall from before node identities.
    #[error("data folder {folder} holds a database but no {IDENTITY_FILE}: it was made by an older rowcall. Start this node on a fresh folder and let it join (after removing the old member), or restore the folder from a backup made with {IDENTITY_FILE}")]
    Unidentified {
        /// The data folder.
        folder: PathBuf,
    },
    /// The folder was written by a newer build than this one.
    #[error("data folder {folder} has data format {found}, written by a newer rowcall; this build reads formats up to {supported}. Run the newer build (or a later one) on it; to go back to this version, found a new cluster from a backup (rowcall backup FILE, then rowcall-node --restore FILE --bootstrap on a fresh folder)")]
    Newer {
        /// The data folder.
        folder: PathBuf,
        /// Its format.
        found: u32,
        /// The newest format this build reads.
        supported: u32,
    },
    /// The folder already belongs to a cluster that has started on it.
    #[error("this node belongs to cluster {ours}, not {theirs}")]
    OtherCluster {
        /// The cluster the folder belongs to.
        ours: String,
        /// The cluster it was asked to take.
        theirs: String,
    },
}

/// A random id: `prefix` and 16 hex characters (64 bits).
fn random_id(prefix: &str) -> String {
    let bits: u64 = rand::rng().random();
    format!("{prefix}{bits:016x}")
}

/// A new cluster id, made when a cluster is founded.
pub fn new_cluster_id() -> String {
    let hi: u64 = rand::rng().random();
    format!("{}{hi:016x}", random_id("c"))
}

/// What a folder's identity said when its Raft state turned out to be gone: the member it
/// was, which the cluster still counts until an operator removes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostState {
    /// The incarnation the folder had.
    pub incarnation: String,
    /// The cluster it belonged to.
    pub cluster_id: String,
}

/// The identity of the data folder this node runs on; the cluster id is filled in once, when
/// the node founds or joins a cluster.
#[derive(Debug)]
pub struct LocalIdentity {
    path: PathBuf,
    /// Where the identity is kept in the database.
    tree: sled::Tree,
    current: RwLock<Identity>,
    /// Set when this start found the Raft state gone under a surviving identity.
    lost: Option<LostState>,
    /// Waiting to found a cluster (not stored: told to peers that ask, so that of several
    /// nodes started with `--bootstrap` only the lowest id founds).
    founding: AtomicBool,
    /// The peer protocol this node speaks ([`PEER_PROTOCOL`] but in test builds).
    protocol: u32,
    /// The seed of the folder's checkpoint-signing key.
    signing_seed: [u8; 32],
}

impl LocalIdentity {
    /// Reads the identity of the folder `data` whose database is `db`, or creates one for
    /// `node_id` when the folder is new (see the module documentation for which copy wins).
    pub fn open(data: &Path, db: &sled::Db, node_id: NodeId) -> Result<Self, IdentityError> {
        Self::open_as(data, db, node_id, DATA_FORMAT)
    }

    /// [`LocalIdentity::open`] by a build whose data format is `format`: a folder of a newer
    /// format is refused.
    pub fn open_as(
        data: &Path,
        db: &sled::Db,
        node_id: NodeId,
        format: u32,
    ) -> Result<Self, IdentityError> {
        let path = data.join(IDENTITY_FILE);
        let database = |e: sled::Error| IdentityError::Database(e.to_string());
        let tree = db.open_tree(DB_TREE).map_err(database)?;
        let in_file = read_file(&path)?;
        let in_db = match tree.get(DB_KEY).map_err(database)? {
            Some(bytes) => Some(decode(&bytes, &path)?),
            None => None,
        };
        for found in in_db.iter().chain(in_file.iter()) {
            accept(found, data, node_id, format)?;
        }
        let mut lost = None;
        let identity = match (in_db, in_file) {
            (Some(stored), copy) => {
                if copy.as_ref() != Some(&stored) {
                    if let Some(copy) = copy.filter(|c| c.incarnation != stored.incarnation) {
                        tracing::warn!(file = %copy.incarnation, database = %stored.incarnation, "{IDENTITY_FILE} names another incarnation than the database; the database's stands");
                    }
                    write_synced(&path, &stored)?;
                }
                stored
            }
            // A database written before identities were kept in it: adopt the file's.
            (None, Some(copy)) if holds_raft_state(db).map_err(database)? => copy,
            (None, None) if holds_raft_state(db).map_err(database)? => {
                return Err(IdentityError::Unidentified {
                    folder: data.to_owned(),
                })
            }
            // The file survived a database that did not: whatever that incarnation promised
            // its peers is gone with it.
            (None, Some(copy)) if copy.cluster_id.is_some() => {
                let fresh = Identity {
                    incarnation: random_id("i"),
                    cluster_id: None,
                    ..copy.clone()
                };
                tracing::error!(
                    node = node_id,
                    old_incarnation = %copy.incarnation,
                    incarnation = %fresh.incarnation,
                    "this data folder's Raft state is gone but {IDENTITY_FILE} survived: the \
                     node starts as a new incarnation and must be re-admitted (remove member \
                     {node_id} on any member, then start it with --join)"
                );
                lost = Some(LostState {
                    incarnation: copy.incarnation,
                    cluster_id: copy.cluster_id.unwrap_or_default(),
                });
                fresh
            }
            // A fresh folder (or one whose first start never reached a cluster).
            (None, copy) => copy.unwrap_or_else(|| Identity {
                node_id,
                incarnation: random_id("i"),
                cluster_id: None,
                format,
            }),
        };
        store(&tree, &identity, &path)?;
        write_synced(&path, &identity)?;
        let signing_seed = signing_seed(&data.join(SIGNING_KEY_FILE))?;
        Ok(Self {
            path,
            tree,
            current: RwLock::new(identity),
            lost,
            founding: AtomicBool::new(false),
            protocol: PEER_PROTOCOL,
            signing_seed,
        })
    }

    /// The member this folder was before its Raft state was lost, when this start found it
    /// so: such a node must never found a cluster, only rejoin its own once re-admitted.
    pub fn lost(&self) -> Option<&LostState> {
        self.lost.as_ref()
    }

    /// The key this node signs receipt-log checkpoints with, named for its cluster; `None`
    /// before it founded or joined one.
    pub fn signing_key(&self) -> Option<rowcall_proto::tlog::SigningKey> {
        let identity = self.get();
        let name =
            crate::store::checkpoint::key_name(identity.cluster_id.as_deref()?, identity.node_id);
        rowcall_proto::tlog::SigningKey::from_seed(&name, &self.signing_seed).ok()
    }

    /// The public half of the signing key, base64, as the membership records it.
    pub fn signing_public(&self) -> String {
        use base64::Engine as _;
        let key = rowcall_proto::tlog::SigningKey::from_seed("key", &self.signing_seed);
        key.map(|k| base64::engine::general_purpose::STANDARD.encode(k.public()))
            .unwrap_or_default()
    }

    /// This identity, speaking peer protocol `protocol` (a test build's bumped version).
    pub fn speaking(self, protocol: u32) -> Self {
        Self { protocol, ..self }
    }

    /// The peer protocol this node speaks.
    pub fn protocol(&self) -> u32 {
        self.protocol
    }

    /// Who this node is, as every message it sends says.
    pub fn sender(&self) -> Sender {
        let identity = self.get();
        Sender {
            cluster_id: identity.cluster_id.unwrap_or_default(),
            node_id: identity.node_id,
            incarnation: identity.incarnation,
            protocol: self.protocol,
        }
    }

    /// Whether this node is waiting to found a cluster.
    pub fn founding(&self) -> bool {
        self.founding.load(Ordering::Relaxed)
    }

    /// Says whether this node is waiting to found a cluster.
    pub fn set_founding(&self, founding: bool) {
        self.founding.store(founding, Ordering::Relaxed);
    }

    /// The identity now.
    pub fn get(&self) -> Identity {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// This folder's incarnation.
    pub fn incarnation(&self) -> String {
        self.get().incarnation
    }

    /// The cluster this node belongs to, once it founded or joined one.
    pub fn cluster_id(&self) -> Option<String> {
        self.get().cluster_id
    }

    /// Records (durably) that the folder now has data format `format`, once the stores
    /// opened on it have upgraded what they hold; never lowers it.
    pub fn record_format(&self, format: u32) -> Result<(), IdentityError> {
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        if current.format >= format {
            return Ok(());
        }
        let next = Identity {
            format,
            ..current.clone()
        };
        store(&self.tree, &next, &self.path)?;
        write_synced(&self.path, &next)?;
        tracing::info!(from = current.format, to = format, "data folder upgraded");
        *current = next;
        Ok(())
    }

    /// Records (durably) that this folder belongs to `cluster_id`. `replace` allows taking
    /// another cluster id than the one stored, for a node that has no Raft state yet (a join
    /// that never completed); otherwise a different id is refused.
    pub fn set_cluster(&self, cluster_id: &str, replace: bool) -> Result<(), IdentityError> {
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        match &current.cluster_id {
            Some(ours) if ours == cluster_id => return Ok(()),
            Some(ours) if !replace => {
                return Err(IdentityError::OtherCluster {
                    ours: ours.clone(),
                    theirs: cluster_id.to_owned(),
                })
            }
            _ => {}
        }
        let next = Identity {
            cluster_id: Some(cluster_id.to_owned()),
            ..current.clone()
        };
        store(&self.tree, &next, &self.path)?;
        write_synced(&self.path, &next)?;
        *current = next;
        Ok(())
    }
}

/// The identity in `path`, if the file exists.
fn read_file(path: &Path) -> Result<Option<Identity>, IdentityError> {
    match std::fs::read(path) {
        Ok(bytes) => decode(&bytes, path).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(IdentityError::Io {
            path: path.to_owned(),
            source,
        }),
    }
}

fn decode(bytes: &[u8], path: &Path) -> Result<Identity, IdentityError> {
    serde_json::from_slice(bytes).map_err(|e| IdentityError::Corrupt {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

/// Refuses an identity of another node id or of a newer format.
fn accept(
    identity: &Identity,
    data: &Path,
    node_id: NodeId,
    format: u32,
) -> Result<(), IdentityError> {
    if identity.format > format {
        return Err(IdentityError::Newer {
            folder: data.to_owned(),
            found: identity.format,
            supported: format,
        });
    }
    if identity.node_id != node_id {
        return Err(IdentityError::WrongNode {
            folder: data.to_owned(),
            stored: identity.node_id,
            given: node_id,
        });
    }
    Ok(())
}

/// Whether the database holds any Raft state: a vote or log entries (the `log` tree, the
/// identity record aside) or applied state (the state machine's `sm` tree).
pub(crate) fn holds_raft_state(db: &sled::Db) -> Result<bool, sled::Error> {
    let log = db.open_tree(DB_TREE)?;
    for key in log.iter().keys() {
        // Neither the identity nor the binding of the log's entries is Raft state itself.
        let key = key?;
        if key.as_ref() != DB_KEY && key.as_ref() != crate::store::log::BINDING {
            return Ok(true);
        }
    }
    Ok(!db.open_tree(crate::store::state_machine::TREE)?.is_empty())
}

/// Writes `identity` into the database. Not synced on its own: the first sync of Raft state
/// covers it (sled writes in order), and a crash before then leaves a folder without Raft
/// state, which is safe to give a new incarnation.
fn store(tree: &sled::Tree, identity: &Identity, path: &Path) -> Result<(), IdentityError> {
    let bytes = serde_json::to_vec(identity).map_err(|e| IdentityError::Corrupt {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    tree.insert(DB_KEY, bytes)
        .map_err(|e| IdentityError::Database(e.to_string()))?;
    Ok(())
}

/// The signing key's seed stored at `path`, made (at random, durably) when there is none.
fn signing_seed(path: &Path) -> Result<[u8; 32], IdentityError> {
    match std::fs::read_to_string(path) {
        Ok(text) => hex::decode(text.trim())
            .ok()
            .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
            .ok_or_else(|| IdentityError::Corrupt {
                path: path.to_owned(),
                reason: "not 64 hex characters".into(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let seed: [u8; 32] = rand::rng().random();
            write_bytes_synced(path, hex::encode(seed).as_bytes())?;
            Ok(seed)
        }
        Err(source) => Err(IdentityError::Io {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Writes `identity` to `path` so that a crash leaves either the old file or the new one:
/// a synced temporary file renamed over it, then the folder synced.
fn write_synced(path: &Path, identity: &Identity) -> Result<(), IdentityError> {
    let bytes = serde_json::to_vec_pretty(identity).map_err(|e| IdentityError::Corrupt {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    write_bytes_synced(path, &bytes)
}

/// Writes `bytes` to `path` (mode 0600) through a synced temporary file and a synced folder.
fn write_bytes_synced(path: &Path, bytes: &[u8]) -> Result<(), IdentityError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| IdentityError::Io { path, source }
    };
    let tmp = path.with_extension("tmp");
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(&tmp).map_err(io(&tmp))?;
    file.write_all(bytes).map_err(io(&tmp))?;
    file.sync_all().map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))?;
    if let Some(folder) = path.parent() {
        File::open(folder)
            .and_then(|f| f.sync_all())
            .map_err(io(folder))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn database(dir: &Path) -> sled::Db {
        crate::store::reopen_sled(&sled::Config::new().path(dir.join("sled")))
    }

    /// Gives the database some Raft state (a vote), as a member's has.
    fn vote(db: &sled::Db) {
        db.open_tree("log").unwrap().insert("m/vote", "{}").unwrap();
    }

    #[test]
    fn a_folder_keeps_its_incarnation_and_a_wiped_one_gets_a_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let first = {
            let db = database(dir.path());
            let first = LocalIdentity::open(dir.path(), &db, 2).unwrap();
            first.set_cluster("c1", false).unwrap();
            vote(&db);
            let again = LocalIdentity::open(dir.path(), &db, 2).unwrap();
            assert_eq!(again.get(), first.get());
            assert_eq!(again.cluster_id().as_deref(), Some("c1"));
            assert_eq!(again.lost(), None);
            first.get()
        };

        std::fs::remove_dir_all(dir.path()).unwrap();
        std::fs::create_dir(dir.path()).unwrap();
        let db = database(dir.path());
        let wiped = LocalIdentity::open(dir.path(), &db, 2).unwrap();
        assert_ne!(wiped.incarnation(), first.incarnation);
        assert_eq!(wiped.cluster_id(), None);
    }

    /// Issue 29, item 1: only the database was lost (`sled/` removed), `identity.json` kept.
    /// Before, the node came back as its old incarnation and voted with an empty log.
    #[test]
    fn a_folder_whose_raft_state_is_gone_comes_back_as_a_new_incarnation() {
        let dir = tempfile::tempdir().unwrap();
        let old = {
            let db = database(dir.path());
            let identity = LocalIdentity::open(dir.path(), &db, 3).unwrap();
            identity.set_cluster("c1", false).unwrap();
            vote(&db);
            db.flush().unwrap();
            identity.get()
        };
        std::fs::remove_dir_all(dir.path().join("sled")).unwrap();

        let db = database(dir.path());
        let reborn = LocalIdentity::open(dir.path(), &db, 3).unwrap();
        assert_ne!(
            reborn.incarnation(),
            old.incarnation,
            "the old incarnation is gone"
        );
        assert_eq!(reborn.cluster_id(), None, "it must be admitted again");
        assert_eq!(
            reborn.lost(),
            Some(&LostState {
                incarnation: old.incarnation.clone(),
                cluster_id: "c1".into()
            })
        );
        // The file follows the database, and the next start keeps the new incarnation.
        let copy: Identity =
            serde_json::from_slice(&std::fs::read(dir.path().join(IDENTITY_FILE)).unwrap())
                .unwrap();
        assert_eq!(copy.incarnation, reborn.incarnation());
        drop(reborn);
        let again = LocalIdentity::open(dir.path(), &db, 3).unwrap();
        assert_eq!(again.incarnation(), copy.incarnation);
        assert_eq!(again.lost(), None);
    }

    /// The database decides: an `identity.json` swapped for another copy is overwritten,
    /// and one that is missing is written again.
    #[test]
    fn the_database_identity_stands_over_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let db = database(dir.path());
        let identity = LocalIdentity::open(dir.path(), &db, 1).unwrap();
        identity.set_cluster("c1", false).unwrap();
        vote(&db);
        let stored = identity.get();
        drop(identity);

        let other = Identity {
            incarnation: "iother".into(),
            ..stored.clone()
        };
        std::fs::write(
            dir.path().join(IDENTITY_FILE),
            serde_json::to_vec(&other).unwrap(),
        )
        .unwrap();
        assert_eq!(
            LocalIdentity::open(dir.path(), &db, 1).unwrap().get(),
            stored
        );
        std::fs::remove_file(dir.path().join(IDENTITY_FILE)).unwrap();
        assert_eq!(
            LocalIdentity::open(dir.path(), &db, 1).unwrap().get(),
            stored
        );
        assert!(dir.path().join(IDENTITY_FILE).exists());
    }

    /// A database written by a build that kept the identity only in the file adopts it.
    #[test]
    fn a_database_from_before_keeps_the_identity_of_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let db = database(dir.path());
        vote(&db);
        let old = r#"{"node_id": 1, "incarnation": "i1", "cluster_id": "c1", "format": 2}"#;
        std::fs::write(dir.path().join(IDENTITY_FILE), old).unwrap();
        let identity = LocalIdentity::open(dir.path(), &db, 1).unwrap();
        assert_eq!(identity.incarnation(), "i1");
        assert_eq!(identity.cluster_id().as_deref(), Some("c1"));
        assert_eq!(identity.lost(), None);
    }

    #[test]
    fn a_folder_refuses_another_node_id_a_database_without_identity_and_a_second_cluster() {
        let dir = tempfile::tempdir().unwrap();
        let db = database(dir.path());
        let identity = LocalIdentity::open(dir.path(), &db, 1).unwrap();
        let err = LocalIdentity::open(dir.path(), &db, 3).unwrap_err();
        assert!(err.to_string().contains("belongs to node 1"), "{err}");

        identity.set_cluster("c1", false).unwrap();
        let err = identity.set_cluster("c2", false).unwrap_err();
        assert!(matches!(err, IdentityError::OtherCluster { .. }), "{err}");
        identity.set_cluster("c2", true).unwrap();
        assert_eq!(identity.cluster_id().as_deref(), Some("c2"));

        let other = tempfile::tempdir().unwrap();
        let db = database(other.path());
        vote(&db);
        let err = LocalIdentity::open(other.path(), &db, 1).unwrap_err();
        assert!(matches!(err, IdentityError::Unidentified { .. }), "{err}");
    }

    #[test]
    fn a_folder_from_before_formats_reads_as_the_first_and_is_upgraded_never_lowered() {
        let dir = tempfile::tempdir().unwrap();
        let db = database(dir.path());
        vote(&db);
        let old = r#"{"node_id": 1, "incarnation": "i1", "cluster_id": "c1"}"#;
        std::fs::write(dir.path().join(IDENTITY_FILE), old).unwrap();
        let identity = LocalIdentity::open_as(dir.path(), &db, 1, 2).unwrap();
        assert_eq!(identity.get().format, 1);
        identity.record_format(2).unwrap();
        identity.record_format(1).unwrap();
        let again = LocalIdentity::open_as(dir.path(), &db, 1, 2).unwrap();
        assert_eq!(again.get().format, 2);
        let err = LocalIdentity::open_as(dir.path(), &db, 1, 1).unwrap_err();
        assert!(
            matches!(
                err,
                IdentityError::Newer {
                    found: 2,
                    supported: 1,
                    ..
                }
            ),
            "{err}"
        );
    }
}
