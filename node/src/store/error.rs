//! What storage reports when it cannot open the database or make writes durable: shared by
//! the sync ([`super::durable`]) and the rewrites it may run first ([`super::compression`]),
//! below both.

use std::path::PathBuf;

/// A failure to open the database or to make writes durable.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SyncError {
    /// sled failed (opening, or flushing its log).
    #[error("sled: {0}")]
    Sled(String),
    /// A file system call failed on `path`.
    #[error("{call} {path}: {reason}")]
    Io {
        /// The call (`fsync`, `fdatasync`, `open`, `read_dir`, `stat`).
        call: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The OS error.
        reason: String,
    },
    /// An earlier sync failed; nothing written since can be proven durable.
    #[error("an earlier sync failed, so storage is unusable until restart: {0}")]
    Poisoned(String),
}

impl From<sled::Error> for SyncError {
    fn from(e: sled::Error) -> Self {
        Self::Sled(e.to_string())
    }
}
