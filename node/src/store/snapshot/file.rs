//! Snapshot files: the folder that holds them, the temporary files builds and receives write
//! to, and the file handle openraft reads chunks from and writes received chunks to.
//!
//! A snapshot file is named by this node (`snap-<index>-<random>.snap`), never after the
//! snapshot id a peer sent, so no peer chooses a path. A file is written under a `.part`
//! name, fsynced, renamed to its `.snap` name, and the folder fsynced: a `.snap` file is
//! always complete and durable. Which `.snap` file is current is recorded in sled (see
//! [`super`]); any other file in the folder at open is a leftover of a crash and is removed.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::packed::Unpack;

/// The start of every snapshot file's name.
const PREFIX: &str = "snap-";
/// The suffix of a complete snapshot file.
const DONE: &str = ".snap";
/// The suffix of a file a build is writing.
const BUILDING: &str = ".build.part";
/// The suffix of a file a receive is writing.
const RECEIVING: &str = ".recv.part";

/// A snapshot's bytes on disk: what a leader sends chunks from and a follower receives
/// chunks into. Reads give the snapshot's lines, unpacked if the file is compressed
/// ([`super::packed`]); writes (a receive) write the bytes as they come.
pub struct SnapshotFile {
    file: tokio::fs::File,
    path: PathBuf,
    unpack: Unpack,
}

impl std::fmt::Debug for SnapshotFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SnapshotFile {
    /// Opens the complete snapshot file at `path` for reading.
    pub(crate) async fn open(path: &Path) -> io::Result<Self> {
        Ok(Self::from_std(std::fs::File::open(path)?, path))
    }

    /// Reads the snapshot file `file`, opened at `path`, from where `file` stands.
    pub(crate) fn from_std(file: std::fs::File, path: &Path) -> Self {
        Self {
            file: tokio::fs::File::from_std(file),
            path: path.to_owned(),
            unpack: Unpack::default(),
        }
    }

    /// Reads give the file's bytes as they are at rest (compressed or not) instead of its
    /// lines: for a follower that installs packed files. Before anything was read.
    pub(crate) fn read_as_stored(mut self) -> Self {
        self.unpack = Unpack::stored();
        self
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes what is buffered and makes the file's data durable.
    pub(crate) async fn sync(&mut self) -> io::Result<()> {
        use tokio::io::AsyncWriteExt;
        self.file.flush().await?;
        self.file.sync_all().await
    }
}

impl AsyncRead for SnapshotFile {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.unpack.poll_read(&mut this.file, cx, buf)
    }
}

// Writes: plain delegation to the tokio file (which is `Unpin`).

impl AsyncWrite for SnapshotFile {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.file).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.file).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.file).poll_shutdown(cx)
    }
}

/// Bytes the newest complete snapshot file in the folder `dir` takes (0 if there is none):
/// names carry the index zero-padded, so the newest sorts last; files being written have
/// another suffix. Reads the folder only (no [`Folder::open`]).
pub fn newest_bytes(dir: &Path) -> io::Result<u64> {
    let mut newest: Option<(String, u64)> = None;
    for entry in std::fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name().to_string_lossy().into_owned();
        if !(name.starts_with(PREFIX) && name.ends_with(DONE)) {
            continue;
        }
        // A file replaced while the walk runs is skipped.
        let Ok(meta) = entry.metadata() else { continue };
        if newest.as_ref().is_none_or(|(n, _)| name > *n) {
            newest = Some((name, meta.len()));
        }
    }
    Ok(newest.map_or(0, |(_, bytes)| bytes))
}

/// The node's snapshot folder.
#[derive(Debug, Clone)]
pub struct Folder {
    dir: PathBuf,
    /// Test hook: the next file written stops before its rename, as a crash there would.
    #[cfg(test)]
    pub(crate) crash_before_rename: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Test hook: the next install stops after its first batch, as a crash there would.
    #[cfg(test)]
    pub(crate) crash_mid_install: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// A file being written; becomes a snapshot file by [`Folder::publish`].
pub(crate) struct Temp {
    pub path: PathBuf,
    /// The snapshot file name it gets.
    pub name: String,
    pub file: std::fs::File,
}

impl Folder {
    /// Opens (or creates, private to the owner) the folder `dir`.
    pub fn open(dir: &Path) -> io::Result<Self> {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            builder.mode(0o700);
        }
        builder.create(dir)?;
        // The folder's own entry, in case it was just created.
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            fsync(parent)?;
        }
        Ok(Self {
            dir: dir.to_owned(),
            #[cfg(test)]
            crash_before_rename: Default::default(),
            #[cfg(test)]
            crash_mid_install: Default::default(),
        })
    }

    /// Removes every file but `keep`: leftovers of builds, receives and installs that a
    /// crash interrupted, and snapshots that a crash kept from being removed once replaced.
    /// Only at open, when no build or receive runs.
    pub fn remove_all_but(&self, keep: Option<&str>) -> io::Result<usize> {
        let mut removed = 0;
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            if keep.is_some_and(|k| entry.file_name() == k) {
                continue;
            }
            std::fs::remove_file(entry.path())?;
            removed += 1;
        }
        Ok(removed)
    }

    /// The path of the snapshot file `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A fresh snapshot file name for a snapshot whose last index is `index`.
    pub fn name(index: u64) -> String {
        format!("{PREFIX}{index:020}-{:016x}{DONE}", rand::random::<u64>())
    }

    /// A new, empty file for a build to write.
    pub(crate) fn build_file(&self, index: u64) -> io::Result<Temp> {
        let name = Self::name(index);
        let path = self.dir.join(format!("{name}{BUILDING}"));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        Ok(Temp { path, name, file })
    }

    /// A new, empty file to receive a snapshot into. openraft receives one snapshot at a
    /// time, so an earlier unfinished receive (its leader moved on) is removed first.
    pub async fn receive_file(&self) -> io::Result<SnapshotFile> {
        let dir = self.dir.clone();
        let path = tokio::task::spawn_blocking(move || -> io::Result<PathBuf> {
            for entry in std::fs::read_dir(&dir)? {
                let entry = entry?;
                if entry.file_name().to_string_lossy().ends_with(RECEIVING) {
                    std::fs::remove_file(entry.path())?;
                }
            }
            Ok(dir.join(format!("{}{RECEIVING}", Self::name(0))))
        })
        .await
        .map_err(io::Error::other)??;
        let file = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .await?;
        Ok(SnapshotFile {
            file,
            path,
            unpack: Unpack::default(),
        })
    }

    /// Makes the complete, fsynced file at `from` the snapshot file `name` (a rename, then
    /// an fsync of the folder so the rename survives a crash).
    pub fn publish(&self, from: &Path, name: &str) -> io::Result<()> {
        std::fs::rename(from, self.path(name))?;
        fsync(&self.dir)
    }

    /// Makes the complete, fsynced snapshot file at `from` one of this folder's snapshot
    /// files for a snapshot at `index`, and returns its name: a receive file is renamed; any
    /// other file (a snapshot handed over in-process) is copied.
    pub fn adopt(&self, from: &Path, index: u64) -> io::Result<String> {
        let received = from.parent() == Some(self.dir.as_path())
            && from.to_string_lossy().ends_with(RECEIVING);
        if received {
            let name = Self::name(index);
            self.publish(from, &name)?;
            return Ok(name);
        }
        let mut temp = self.build_file(index)?;
        io::copy(&mut std::fs::File::open(from)?, &mut temp.file)?;
        temp.file.sync_all()?;
        self.publish(&temp.path, &temp.name)?;
        Ok(temp.name)
    }

    /// Removes the snapshot file `name` (one a newer snapshot replaced). A reader that has
    /// it open keeps reading it.
    pub fn remove(&self, name: &str) {
        if let Err(e) = std::fs::remove_file(self.path(name)) {
            // Left for the next start to remove; not worth failing the snapshot for.
            tracing::warn!(file = name, error = %e, "could not remove a replaced snapshot");
        }
    }
}

fn fsync(path: &Path) -> io::Result<()> {
    std::fs::File::open(path)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_complete_snapshot_file_is_measured() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(newest_bytes(dir.path()).unwrap(), 0);
        let write = |name: &str, bytes: usize| {
            std::fs::write(dir.path().join(name), vec![7u8; bytes]).unwrap();
        };
        write("snap-00000000000000000900-aa.snap", 10);
        write("snap-00000000000000001000-bb.snap", 20);
        // Being built or received: not a snapshot yet.
        write("snap-00000000000000002000-cc.snap.build.part", 40);
        write("snap-00000000000000003000-dd.recv.part", 80);
        write("other", 160);
        assert_eq!(newest_bytes(dir.path()).unwrap(), 20);
    }
}
