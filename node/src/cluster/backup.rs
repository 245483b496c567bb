//! Backups: a consistent copy of the applied state, taken from any node, and a new cluster
//! founded from one.
//!
//! A backup is the node's current snapshot file (DESIGN's state at one log index: the rows,
//! the share state, every receipt and remembered request id — see `store::snapshot`)
//! behind one header line that names the index and log id it was cut at:
//!
//! ```text
//! {"backup":{"format":1,"log_id":{…,"index":N},"cluster_id":…,"node_id":…,"taken_at_ms":…}}
//! {"header":{"format":2,…}}       the snapshot file, line for line
//! …
//! {"end":{"rows":…,"receipts":…,"requests":…}}
//! ```
//!
//! [`take`] asks Raft for a snapshot covering everything the node had applied when asked,
//! and hands back its file (an open handle: a newer snapshot replacing it meanwhile does not
//! cut the copy short) with the SHA-256 of the whole backup. [`restore`] installs a backup
//! into a fresh data folder before Raft starts, as a snapshot received from a leader would
//! be, with this node alone in the membership and a new cluster id: the node then elects
//! itself and carries on from the backup's index, and other nodes join it as usual. The
//! snapshot's closing line carries its counts, so a file cut short is refused.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::time::Duration;

use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{Membership, StoredMembership, Vote};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use crate::app::App;
use crate::model::time::now_ms;
use crate::raft::{LogId, NodeId, NodeInfo, StorageError};
use crate::store::snapshot::file::SnapshotFile;
use crate::store::snapshot::format::{read_through, FormatError};
use crate::store::snapshot::packed;
use crate::store::state_machine::SnapshotReader;
use crate::store::{LogStore, StateMachine};

/// The backup format this node writes and restores.
pub const FORMAT: u32 = 1;

/// How long [`take`] waits for a snapshot that covers what the node had applied.
const BUILD_WITHIN: Duration = Duration::from_secs(120);
/// How often [`take`] looks for that snapshot (and asks Raft again to build one).
const POLL: Duration = Duration::from_millis(200);

/// What the first line of a backup says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// The backup format ([`FORMAT`]).
    pub format: u32,
    /// The log id of the last entry the state includes.
    pub log_id: LogId,
    /// The cluster it was taken from.
    pub cluster_id: String,
    /// The node that took it.
    pub node_id: NodeId,
    /// When, in milliseconds since the epoch.
    pub taken_at_ms: u64,
}

impl Header {
    /// The index of the last entry the state includes.
    pub fn index(&self) -> u64 {
        self.log_id.index
    }
}

#[derive(Serialize, Deserialize)]
enum Line {
    #[serde(rename = "backup")]
    Backup(Header),
}

/// A backup ready to be sent: its header line, then the snapshot file.
#[derive(Debug)]
pub struct Backup {
    /// What it holds.
    pub header: Header,
    /// The header line, newline included.
    pub header_line: Vec<u8>,
    /// The snapshot file, at its start: reads give its lines.
    pub file: SnapshotFile,
    /// Bytes in all (header line and file).
    pub len: u64,
    /// SHA-256 of all of them, hex.
    pub sha256: String,
}

/// Why a backup could not be taken or restored.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// No snapshot covering the applied state was built in time.
    #[error("no snapshot covering index {index} was built within {}s", BUILD_WITHIN.as_secs())]
    NotBuilt {
        /// The index it had to cover.
        index: u64,
    },
    /// The file is not a backup this node can restore.
    #[error("{0}")]
    Invalid(String),
    /// Reading or writing failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// The store refused the state.
    #[error("installing the backup: {0}")]
    Store(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BackupError {
    let what = what.into();
    move |source| BackupError::Io { what, source }
}

/// Takes a backup of everything this node had applied when called: asks Raft for a
/// snapshot and waits until the current one covers that index.
pub async fn take(app: &App) -> Result<Backup, BackupError> {
    let index = app.applied_index();
    let store = |e: StorageError| BackupError::Store(e.to_string());
    let snapshots = SnapshotReader::open(&app.storage, &app.config.node.data.join("snapshots"))
        .map_err(store)?;
    let deadline = Instant::now() + BUILD_WITHIN;
    let snapshot = loop {
        if let Some(current) = snapshots.current().await.map_err(store)? {
            if current.meta.last_log_id.is_some_and(|l| l.index >= index) {
                break current;
            }
        }
        if Instant::now() >= deadline {
            return Err(BackupError::NotBuilt { index });
        }
        // A trigger while a build runs is ignored; asked again until one covers `index`.
        let _ = app.raft.trigger().snapshot().await;
        tokio::time::sleep(POLL).await;
    };
    let Some(log_id) = snapshot.meta.last_log_id else {
        return Err(BackupError::NotBuilt { index });
    };
    let header = Header {
        format: FORMAT,
        log_id,
        cluster_id: app.identity.cluster_id().unwrap_or_default(),
        node_id: app.node_id,
        taken_at_ms: now_ms(),
    };
    let mut header_line = serde_json::to_vec(&Line::Backup(header.clone()))
        .map_err(|e| BackupError::Invalid(e.to_string()))?;
    header_line.push(b'\n');
    let path = snapshot.snapshot.path().to_owned();
    // Opened before the snapshot handle goes: a newer snapshot may remove the name, never
    // the open file.
    let file = std::fs::File::open(&path).map_err(io(format!("open {}", path.display())))?;
    drop(snapshot);
    let prefix = header_line.clone();
    tokio::task::spawn_blocking(move || {
        // Measured and hashed as sent: the snapshot's lines, unpacked if the file is
        // compressed at rest.
        let mut hash = Sha256::new();
        hash.update(&prefix);
        let mut len = prefix.len() as u64;
        let mut lines = packed::lines(file.try_clone().map_err(io("open the snapshot"))?)
            .map_err(io("read the snapshot"))?;
        loop {
            let buffer = lines.fill_buf().map_err(io("read the snapshot"))?;
            if buffer.is_empty() {
                break;
            }
            hash.update(buffer);
            len += buffer.len() as u64;
            let n = buffer.len();
            lines.consume(n);
        }
        drop(lines);
        let mut file = file;
        file.seek(SeekFrom::Start(0))
            .map_err(io("rewind the snapshot"))?;
        Ok(Backup {
            header,
            header_line: prefix,
            file: SnapshotFile::from_std(file, &path),
            len,
            sha256: hex::encode(hash.finalize()),
        })
    })
    .await
    .map_err(|e| BackupError::Store(e.to_string()))?
}

/// Installs the backup at `path` into this node's fresh store, before Raft starts: the state
/// at the backup's index, with `me` (its cluster id and incarnation filled in) the only
/// member. Returns the backup's header.
pub async fn restore(
    path: &Path,
    node_id: NodeId,
    me: NodeInfo,
    state_machine: &mut StateMachine,
    log: &mut LogStore,
) -> Result<Header, BackupError> {
    let (header, body) = read_header(path)?;
    // The install reads the file through too before it replaces anything; this says what
    // is wrong in an operator's terms, before anything is received.
    check_snapshot(path, read_header(path)?.1)?;
    let mut received = state_machine
        .receive_file()
        .await
        .map_err(|e| BackupError::Store(e.to_string()))?;
    // The snapshot lines, as a leader would have sent them.
    let mut body = body;
    let mut buffer = vec![0; 64 * 1024];
    loop {
        let n = body
            .read(&mut buffer)
            .map_err(io(format!("read {}", path.display())))?;
        if n == 0 {
            break;
        }
        received
            .write_all(&buffer[..n])
            .await
            .map_err(io("write the snapshot"))?;
    }
    let membership = Membership::new(
        vec![BTreeSet::from([node_id])],
        BTreeMap::from([(node_id, me)]),
    )
    .map_err(|e| BackupError::Store(e.to_string()))?;
    let meta = openraft::SnapshotMeta {
        last_log_id: Some(header.log_id),
        last_membership: StoredMembership::new(Some(header.log_id), membership),
    };
    state_machine
        .install_snapshot(&meta, received)
        .await
        .map_err(|e| BackupError::Store(e.to_string()))?;
    // Raft starts past the backup's term, so the entries it appends after the backup's
    // index carry a later one; the vote is not committed, so the node elects itself.
    log.save_vote(&Vote::new(header.log_id.leader_id.term, node_id))
        .await
        .map_err(|e| BackupError::Store(e.to_string()))?;
    Ok(header)
}

/// Reads the snapshot lines of a backup through to their closing line, whose counts must
/// match what came before.
fn check_snapshot(path: &Path, body: BufReader<std::fs::File>) -> Result<(), BackupError> {
    let damaged = |e: FormatError| {
        BackupError::Invalid(format!(
            "{} is damaged or cut short: {e}; take the backup again",
            path.display()
        ))
    };
    read_through(body).map_err(damaged)?;
    Ok(())
}

/// Reads and checks the header line; returns it and the file positioned after it.
fn read_header(path: &Path) -> Result<(Header, BufReader<std::fs::File>), BackupError> {
    let file = std::fs::File::open(path).map_err(io(format!("open {}", path.display())))?;
    let mut reader = BufReader::new(file);
    let mut first = String::new();
    // A header line is a few hundred bytes; a file whose first line is not is no backup.
    (&mut reader)
        .take(64 * 1024)
        .read_line(&mut first)
        .map_err(io(format!("read {}", path.display())))?;
    let not_backup = |why: String| {
        BackupError::Invalid(format!(
            "{} is not a rowcall backup: {why} (make one with `rowcall backup FILE`)",
            path.display()
        ))
    };
    let Line::Backup(header) =
        serde_json::from_str(first.trim_end()).map_err(|e| not_backup(e.to_string()))?;
    if header.format != FORMAT {
        return Err(not_backup(format!(
            "backup format {} (this build restores format {FORMAT})",
            header.format
        )));
    }
    Ok((header, reader))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_a_backup_is_refused_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.jsonl");
        std::fs::write(&path, "{\"key\":\"A\"}\n").unwrap();
        let refused = read_header(&path).unwrap_err().to_string();
        assert!(refused.contains("is not a rowcall backup"), "{refused}");
        assert!(refused.contains("rowcall backup FILE"), "{refused}");
    }

    #[test]
    fn a_backup_cut_short_is_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.backup");
        let header = serde_json::json!({"backup": {"format": FORMAT,
            "log_id": {"leader_id": {"term": 3, "node_id": 1}, "index": 9},
            "cluster_id": "c", "node_id": 1, "taken_at_ms": 0}});
        let snapshot = "{\"header\":{\"format\":2,\"share_secret\":null,\"share_previous\":null,\"revoked\":[]}}\n";
        std::fs::write(&path, format!("{header}\n{snapshot}")).unwrap();
        let (_, body) = read_header(&path).unwrap();
        let refused = check_snapshot(&path, body).unwrap_err().to_string();
        assert!(refused.contains("damaged or cut short"), "{refused}");
        let whole = format!(
            "{header}\n{snapshot}{{\"end\":{{\"rows\":0,\"receipts\":0,\"requests\":0}}}}\n"
        );
        std::fs::write(&path, whole).unwrap();
        let (_, body) = read_header(&path).unwrap();
        check_snapshot(&path, body).unwrap();
    }

    #[test]
    fn a_newer_backup_format_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("backup");
        let header = serde_json::json!({"backup": {"format": FORMAT + 1,
            "log_id": {"leader_id": {"term": 3, "node_id": 1}, "index": 9},
            "cluster_id": "c", "node_id": 1, "taken_at_ms": 0}});
        std::fs::write(&path, format!("{header}\n")).unwrap();
        let refused = read_header(&path).unwrap_err().to_string();
        assert!(refused.contains("backup format 2"), "{refused}");
    }
}
