//! Who a data folder is: the node id it was created for, its incarnation (a random id made
//! with the folder, so a wiped folder is a different incarnation), and the cluster it founded
//! or joined. Kept in `identity.json` beside the database, written atomically and synced.
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

/// The file that holds a data folder's identity.
pub const IDENTITY_FILE: &str = "identity.json";
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
pub const DATA_FORMAT: u32 = 2;

/// The peer protocol this build speaks: the envelope and payloads of the Raft messages
/// between nodes. Builds one version apart interoperate, so a rolling upgrade moves one
/// version at a time; a message from a build further away is refused, saying so.
pub const PEER_PROTOCOL: u32 = 1;

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

/// The identity of the data folder this node runs on; the cluster id is filled in once, when
/// the node founds or joins a cluster.
#[derive(Debug)]
pub struct LocalIdentity {
    path: PathBuf,
    current: RwLock<Identity>,
    /// Waiting to found a cluster (not stored: told to peers that ask, so that of several
    /// nodes started with `--bootstrap` only the lowest id founds).
    founding: AtomicBool,
    /// The peer protocol this node speaks ([`PEER_PROTOCOL`] but in test builds).
    protocol: u32,
    /// The seed of the folder's checkpoint-signing key.
    signing_seed: [u8; 32],
}

impl LocalIdentity {
    /// Reads the identity of `data`, or creates one for `node_id` when the folder is new.
    /// `database` is the database folder inside it: a database without an identity is
    /// refused rather than given a new incarnation that would pass for the old member.
    pub fn open(data: &Path, database: &Path, node_id: NodeId) -> Result<Self, IdentityError> {
        Self::open_as(data, database, node_id, DATA_FORMAT)
    }

    /// [`LocalIdentity::open`] by a build whose data format is `format`: a folder of a newer
    /// format is refused.
    pub fn open_as(
        data: &Path,
        database: &Path,
        node_id: NodeId,
        format: u32,
    ) -> Result<Self, IdentityError> {
        let path = data.join(IDENTITY_FILE);
        let identity = match std::fs::read(&path) {
            Ok(bytes) => {
                let identity: Identity =
                    serde_json::from_slice(&bytes).map_err(|e| IdentityError::Corrupt {
                        path: path.clone(),
                        reason: e.to_string(),
                    })?;
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
                identity
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if database.exists() {
                    return Err(IdentityError::Unidentified {
                        folder: data.to_owned(),
                    });
                }
                let identity = Identity {
                    node_id,
                    incarnation: random_id("i"),
                    cluster_id: None,
                    format,
                };
                write_synced(&path, &identity)?;
                tracing::info!(incarnation = %identity.incarnation, "new data folder: created its identity");
                identity
            }
            Err(source) => return Err(IdentityError::Io { path, source }),
        };
        let signing_seed = signing_seed(&data.join(SIGNING_KEY_FILE))?;
        Ok(Self {
            path,
            current: RwLock::new(identity),
            founding: AtomicBool::new(false),
            protocol: PEER_PROTOCOL,
            signing_seed,
        })
    }

    /// The key this node signs receipt-log checkpoints with, named for its cluster; `None`
    /// before it founded or joined one.
    pub fn signing_key(&self) -> Option<rowcall_proto::tlog::SigningKey> {
        let identity = self.get();
        let name = crate::store::state_machine::transparency::key_name(
            identity.cluster_id.as_deref()?,
            identity.node_id,
        );
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
        write_synced(&self.path, &next)?;
        *current = next;
        Ok(())
    }
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

    #[test]
    fn a_folder_keeps_its_incarnation_and_a_wiped_one_gets_a_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("sled");
        let first = LocalIdentity::open(dir.path(), &db, 2).unwrap();
        first.set_cluster("c1", false).unwrap();
        let again = LocalIdentity::open(dir.path(), &db, 2).unwrap();
        assert_eq!(again.get(), first.get());
        assert_eq!(again.cluster_id().as_deref(), Some("c1"));

        std::fs::remove_file(dir.path().join(IDENTITY_FILE)).unwrap();
        let wiped = LocalIdentity::open(dir.path(), &db, 2).unwrap();
        assert_ne!(wiped.incarnation(), first.incarnation());
        assert_eq!(wiped.cluster_id(), None);
    }

    #[test]
    fn a_folder_refuses_another_node_id_a_database_without_identity_and_a_second_cluster() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("sled");
        let identity = LocalIdentity::open(dir.path(), &db, 1).unwrap();
        let err = LocalIdentity::open(dir.path(), &db, 3).unwrap_err();
        assert!(err.to_string().contains("belongs to node 1"), "{err}");

        identity.set_cluster("c1", false).unwrap();
        let err = identity.set_cluster("c2", false).unwrap_err();
        assert!(matches!(err, IdentityError::OtherCluster { .. }), "{err}");
        identity.set_cluster("c2", true).unwrap();
        assert_eq!(identity.cluster_id().as_deref(), Some("c2"));

        let other = tempfile::tempdir().unwrap();
        std::fs::create_dir(other.path().join("sled")).unwrap();
        let err = LocalIdentity::open(other.path(), &other.path().join("sled"), 1).unwrap_err();
        assert!(matches!(err, IdentityError::Unidentified { .. }), "{err}");
    }

    #[test]
    fn a_folder_from_before_formats_reads_as_the_first_and_is_upgraded_never_lowered() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("sled");
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
