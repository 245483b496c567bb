//! Durable sync for sled: what makes an acknowledged write survive a power loss, as a group
//! commit shared by every writer of the node's one sled database.
//!
//! # What sled 0.34 leaves undone
//!
//! sled keeps its data folder as: `db` (the log-structured segments), `conf` (written once,
//! never synced), `blobs/<lsn>` (one file per value too large to inline: over 128 KiB with
//! the default 512 KiB segments, written with `write_all` and never synced), and
//! `snap.<lsn>` (its page-table snapshot, written to `snap.<lsn>.generating`, synced, then
//! renamed without syncing the folder). Its `flush` writes the log buffers and ends in
//! `sync_file_range(WAIT_BEFORE|WRITE|WAIT_AFTER)` on `db`: that pushes the pages to the
//! device but neither flushes the device's volatile cache nor persists the file's size and
//! other metadata, so a power loss can take back a flushed write.
//!
//! # What a sync does here
//!
//! In this order, all in one blocking job:
//! 1. `fsync` every blob file not synced before *with its present length* (see below), then
//!    the `blobs/` folder when its entries changed: a log record must never be durable while
//!    the blob it points to is not;
//! 2. sled's `flush` (writes every reserved log buffer);
//! 3. `fdatasync` of `db`: its data and size are on stable storage;
//! 4. `fsync` of the data folder when its entries changed (sled's snapshot renames).
//!
//! `conf`, `db`, the existing blobs and both folders (and the data folder's parent) are
//! synced once when the database is opened, so files written by an earlier process that
//! died before syncing them are covered too.
//!
//! # A blob counts as synced only with its final contents
//!
//! sled's `write_blob` creates the file (`create_new`) and then writes it with three
//! `write_all` calls (checksum, kind byte, data) from the writer's own thread, before the
//! writer's `insert` returns. A sync run for another writer can list the folder between the
//! creation and the last write and fsync a half-written file. Remembering the file as
//! synced by name would let the blob's own writer, whose sync comes later, skip it: its
//! write would be acknowledged with the tail of the blob only in the page cache.
//!
//! So each blob is remembered with the length it had when it was fsynced, read with
//! `fstat` on the opened file *before* the `fsync`, and a later sync fsyncs it again when
//! its length differs. Why that is enough: sled only ever appends to a blob (every call
//! extends it), so its length grows with each write and stops once the writer is done; the
//! writer takes its ticket after its `insert` returned, so the sync that covers the ticket
//! starts after the last write and sees the final length. If the remembered length equals
//! it, the `fstat` that read it came after the last write, so the `fsync` that followed
//! covered every byte; if not, the file is fsynced now, after the last write. A blob is
//! never rewritten in place (its name is a log sequence number sled does not reuse), so
//! nothing else can change a file of the same length. The cost is one `stat` per blob per
//! sync, next to the folder listing each sync already does.
//!
//! # Group commit
//!
//! Every caller first writes into sled, then calls [`Durable::sync`], which takes a ticket
//! (a number issued in write order). One sync runs at a time; the caller that runs it reads
//! the highest ticket issued *before* it started and, once the sync returns, marks every
//! ticket up to that one durable. A caller that gets the lock after its ticket was covered
//! returns at once. So one sync covers every write issued before it started, and concurrent
//! writers (the Raft log, the state machine, the outbox) share one `fdatasync`.
//!
//! # A failed sync is final
//!
//! After an `fsync` error Linux may drop the dirty pages and report success next time
//! ("fsyncgate"), so a retried sync proves nothing. The first failure poisons this handle:
//! every later sync fails, openraft stops the node, and a restart recovers from what is on
//! disk.
//!
//! # What remains
//!
//! A write issued *while* a sync runs may get its blob written after step 1 and its log
//! record written by step 2's flush; it is not acknowledged (its own sync comes later), but
//! a power loss in between leaves sled a log record whose blob is missing. sled 0.34 offers
//! no hook to close that window; the Raft log re-delivers the entry, but sled may refuse to
//! open such a folder, which the node then reports at start.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::error::SyncError;
use super::segments::Segments;
use super::tree_file::{self, TreeFile};
use crate::config::SyncMode;

/// Where the receipt bodies of the database in `dir` are kept: `receipts` beside it (the
/// node's data folder holds `sled` and `receipts`).
pub fn segments_dir(dir: &Path) -> PathBuf {
    dir.parent()
        .map_or_else(|| PathBuf::from("receipts"), |p| p.join("receipts"))
}

/// Opens sled's database in `dir`, waiting a few seconds for its lock
/// ([`super::wait_for_lock`]), as the Raft log's open does for its own, after rewriting it
/// when it was written with the other compression or `defragment` is set
/// ([`super::compression`]). Blocking.
fn open_sled(dir: &Path, config: &crate::config::StorageConfig) -> Result<sled::Db, SyncError> {
    let (cache_bytes, compression) = (config.cache_bytes(), config.compression);
    super::compression::rewrite_if_needed(dir, compression, config.defragment)?;
    let locked = super::sled_locked;
    let opened = super::wait_for_lock(
        || {
            sled::Config::new()
                .path(dir)
                .cache_capacity(cache_bytes)
                // Durability comes from explicit syncs; the background flusher only adds I/O.
                .flush_every_ms(None)
                .mode(sled::Mode::LowSpace)
                .use_compression(compression)
                .open()
        },
        locked,
    );
    opened.map_err(|e| match locked(&e) {
        true => SyncError::Sled(format!(
            "{e}: another process (or node) has this data folder's database open"
        )),
        false => e.into(),
    })
}

fn io_err<'a>(call: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> SyncError + 'a {
    move |e| SyncError::Io {
        call,
        path: path.to_owned(),
        reason: e.to_string(),
    }
}

/// The node's sled database with the means to make its writes durable; cheap to clone.
#[derive(Clone)]
pub struct Durable {
    inner: Arc<Inner>,
}

struct Inner {
    db: sled::Db,
    /// Receipt bodies beside the database ([`super::segments`]), synced before sled's flush.
    segments: Segments,
    /// The receipt log's tree hashes beside the database ([`super::tree_file`]), synced
    /// (and their count recorded) before sled's flush.
    tree_file: TreeFile,
    dir: PathBuf,
    /// `db`, opened a second time: fdatasync reaches the same inode as sled's own handle.
    db_file: File,
    mode: SyncMode,
    /// Tickets handed out so far (one per `sync` call).
    issued: AtomicU64,
    /// Every ticket up to this one is durable.
    synced: AtomicU64,
    /// Sync rounds run.
    rounds: AtomicU64,
    /// One sync at a time, and the folder entries already synced.
    gate: tokio::sync::Mutex<Synced>,
    poisoned: OnceLock<String>,
    /// Test hook: extra time every sync takes (milliseconds).
    delay_ms: AtomicU64,
    /// Blob files fsynced so far (each fsync counts, a re-sync too).
    blob_syncs: AtomicU64,
}

/// Folder entries whose creation is already durable.
#[derive(Default)]
struct Synced {
    /// Blob files fsynced, with the length each had when it was (see "A blob counts as
    /// synced only with its final contents").
    blobs: HashMap<OsString, u64>,
    top: HashSet<OsString>,
}

impl Durable {
    /// Opens (or creates) the sled database in `dir` and makes what is already there durable,
    /// with the default cache and compression ([`crate::config::StorageConfig`]).
    pub fn open(dir: &Path, mode: SyncMode) -> Result<Self, SyncError> {
        let config = crate::config::StorageConfig {
            sync: mode,
            ..Default::default()
        };
        Self::open_configured(dir, &config)
    }

    /// [`Durable::open`] as `[storage]` says: its sync mode, a page cache of at most
    /// `cache_mb`, and its compression (a database written the other way is converted first,
    /// and any is rewritten with its live data alone when `defragment` is set).
    pub fn open_configured(
        dir: &Path,
        config: &crate::config::StorageConfig,
    ) -> Result<Self, SyncError> {
        let mode = config.sync;
        let db = open_sled(dir, config)?;
        let db_path = dir.join("db");
        let db_file = File::open(&db_path).map_err(io_err("open", &db_path))?;
        let segments_dir = segments_dir(dir);
        let segments = Segments::open(&segments_dir, mode == SyncMode::Fdatasync)
            .map_err(io_err("open", &segments_dir))?;
        let tree_path = segments_dir.join(tree_file::FILE_NAME);
        let tree_file = TreeFile::open(&tree_path, db.clone(), mode == SyncMode::Fdatasync)
            .map_err(io_err("open", &tree_path))?;
        let mut inner = Inner {
            db,
            segments,
            tree_file,
            dir: dir.to_owned(),
            db_file,
            mode,
            issued: AtomicU64::new(0),
            synced: AtomicU64::new(0),
            rounds: AtomicU64::new(0),
            gate: tokio::sync::Mutex::new(Synced::default()),
            poisoned: OnceLock::new(),
            delay_ms: AtomicU64::new(0),
            blob_syncs: AtomicU64::new(0),
        };
        if mode == SyncMode::Fdatasync {
            let mut synced = Synced::default();
            inner.sync_at_open(&mut synced)?;
            *inner.gate.get_mut() = synced;
        }
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// How writes are made durable.
    pub fn mode(&self) -> SyncMode {
        self.inner.mode
    }

    /// The sled database.
    pub fn db(&self) -> &sled::Db {
        &self.inner.db
    }

    /// The receipt bodies' segment files beside the database.
    pub fn segments(&self) -> &Segments {
        &self.inner.segments
    }

    /// The receipt log's tree hash file beside the database.
    pub fn tree_file(&self) -> &TreeFile {
        &self.inner.tree_file
    }

    /// Returns once every write this caller made to the database before calling is durable
    /// (see the module documentation for what that takes and how calls share a sync).
    pub async fn sync(&self) -> Result<(), SyncError> {
        let inner = &self.inner;
        let ticket = inner.issued.fetch_add(1, Ordering::AcqRel) + 1;
        metrics::counter!(crate::metrics::STORE_SYNC_REQUESTS_TOTAL).increment(1);
        let mut synced = inner.gate.lock().await;
        if inner.synced.load(Ordering::Acquire) >= ticket {
            // A sync that started after our write finished while we queued.
            return Ok(());
        }
        if let Some(reason) = inner.poisoned.get() {
            return Err(SyncError::Poisoned(reason.clone()));
        }
        // Every ticket issued up to now belongs to a write that is already in sled.
        let covers = inner.issued.load(Ordering::Acquire);
        let started = Instant::now();
        let job = self.inner.clone();
        let mut entries = std::mem::take(&mut *synced);
        let outcome = tokio::task::spawn_blocking(move || {
            let outcome = job.sync_now(&mut entries);
            (outcome, entries)
        })
        .await;
        let outcome = match outcome {
            Ok((outcome, entries)) => {
                *synced = entries;
                outcome
            }
            Err(e) => Err(SyncError::Sled(format!("the sync task failed: {e}"))),
        };
        let delay = inner.delay_ms.load(Ordering::Relaxed);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        match outcome {
            Ok(()) => {
                inner.synced.store(covers, Ordering::Release);
                inner.rounds.fetch_add(1, Ordering::Relaxed);
                metrics::counter!(crate::metrics::STORE_SYNCS_TOTAL).increment(1);
                metrics::histogram!(crate::metrics::STORE_SYNC_SECONDS)
                    .record(started.elapsed().as_secs_f64());
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "sync failed; storage refuses further writes");
                let _ = inner.poisoned.set(e.to_string());
                Err(e)
            }
        }
    }

    /// Sync rounds run so far (each one shared by every write issued before it started).
    pub fn rounds(&self) -> u64 {
        self.inner.rounds.load(Ordering::Relaxed)
    }

    /// Test hook: makes every sync take `delay` longer (zero restores), as a slow disk would.
    pub fn slow_down(&self, delay: Duration) {
        self.inner
            .delay_ms
            .store(delay.as_millis() as u64, Ordering::Relaxed);
    }
}

impl Inner {
    fn blobs_dir(&self) -> PathBuf {
        self.dir.join("blobs")
    }

    /// Everything sled left on disk, once: an earlier process may have died before syncing.
    fn sync_at_open(&self, synced: &mut Synced) -> Result<(), SyncError> {
        let conf = self.dir.join("conf");
        fsync_path(&conf)?;
        self.sync_now(synced)?;
        fsync_path(&self.blobs_dir())?;
        fsync_path(&self.dir)?;
        // The data folder's own entry, in case it was just created.
        if let Some(parent) = self.dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            fsync_path(parent)?;
        }
        Ok(())
    }

    fn sync_now(&self, synced: &mut Synced) -> Result<(), SyncError> {
        // Receipt bodies first: a sled value that is durable must never point at a body
        // that is not ([`super::segments`], "Recovery argument").
        let segments_dir = self.segments.dir();
        let freed = self
            .segments
            .sync()
            .map_err(io_err("fdatasync", &segments_dir))?;
        // Then the tree hashes, whose count goes into the flush below.
        self.tree_file
            .sync()
            .map_err(io_err("fdatasync", &self.tree_file.path()))?;
        self.sync_database(synced)?;
        // The removals that emptied these files are durable now.
        self.segments
            .remove(freed)
            .map_err(io_err("remove", &segments_dir))
    }

    fn sync_database(&self, synced: &mut Synced) -> Result<(), SyncError> {
        if self.mode == SyncMode::SledFlush {
            self.db.flush()?;
            return Ok(());
        }
        let blobs = self.blobs_dir();
        if sync_blobs(&blobs, &mut synced.blobs, &self.blob_syncs)? {
            fsync_path(&blobs)?;
        }
        self.db.flush()?;
        let db_path = self.dir.join("db");
        self.db_file
            .sync_data()
            .map_err(io_err("fdatasync", &db_path))?;
        if new_entries(&self.dir, &mut synced.top)? {
            fsync_path(&self.dir)?;
        }
        Ok(())
    }
}

/// Lists the blob folder `dir` and fsyncs every blob not fsynced before at its present
/// length; `known` is updated to what is there now. Returns whether the folder's entries
/// changed since the last call, so the caller syncs the folder itself.
fn sync_blobs(
    dir: &Path,
    known: &mut HashMap<OsString, u64>,
    counter: &AtomicU64,
) -> Result<bool, SyncError> {
    let mut now = HashMap::with_capacity(known.len());
    let mut changed = false;
    for entry in std::fs::read_dir(dir).map_err(io_err("read_dir", dir))? {
        let entry = entry.map_err(io_err("read_dir", dir))?;
        let name = entry.file_name();
        let path = entry.path();
        let listed = match entry.metadata() {
            Ok(meta) => meta.len(),
            // Collected by sled between listing and reading: nothing to keep.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err("stat", &path)(e)),
        };
        if known.get(&name) == Some(&listed) {
            now.insert(name, listed);
            continue;
        }
        changed |= !known.contains_key(&name);
        match fsync_blob(&path) {
            Ok(synced_len) => {
                counter.fetch_add(1, Ordering::Relaxed);
                now.insert(name, synced_len);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err("fsync", &path)(e)),
        }
    }
    changed |= now.len() != known.len() || now.keys().any(|name| !known.contains_key(name));
    *known = now;
    Ok(changed)
}

/// `fsync`s a blob and returns the length it had *before* the call: every byte up to it is
/// durable (a writer's later appends may or may not be).
fn fsync_blob(path: &Path) -> io::Result<u64> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    file.sync_all()?;
    Ok(len)
}

/// Lists `dir`; returns whether its entries changed since the last call (`known` is
/// updated), so the caller syncs the folder. Entries that disappeared are forgotten.
fn new_entries(dir: &Path, known: &mut HashSet<OsString>) -> Result<bool, SyncError> {
    let mut now = HashSet::with_capacity(known.len());
    for entry in std::fs::read_dir(dir).map_err(io_err("read_dir", dir))? {
        let entry = entry.map_err(io_err("read_dir", dir))?;
        now.insert(entry.file_name());
    }
    let changed = now != *known;
    *known = now;
    Ok(changed)
}

/// `fsync` of a file or a folder by path.
fn fsync_path(path: &Path) -> Result<(), SyncError> {
    fsync(path).map_err(io_err("fsync", path))
}

fn fsync(path: &Path) -> io::Result<()> {
    File::open(path)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_still_held_is_waited_for_and_then_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let first = Durable::open(&path, SyncMode::SledFlush).unwrap();
        // Held for good: the second open waits, then says why.
        let started = std::time::Instant::now();
        let refused = Durable::open(&path, SyncMode::SledFlush).err().unwrap();
        assert!(
            started.elapsed() >= super::super::LOCK_WAIT,
            "{:?}",
            started.elapsed()
        );
        assert!(
            refused
                .to_string()
                .contains("has this data folder's database open"),
            "{refused}"
        );
        // Let go while the second one waits: it opens.
        let releasing = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(first);
        });
        let second = Durable::open(&path, SyncMode::SledFlush);
        releasing.join().unwrap();
        second.unwrap();
        // Any other failure is reported as itself, without the wait.
        let file = dir.path().join("a-file");
        std::fs::write(&file, b"not a folder").unwrap();
        let failed = Durable::open(&file, SyncMode::SledFlush).err().unwrap();
        assert!(!failed.to_string().contains("database open"), "{failed}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_writers_share_syncs_and_every_write_is_covered() {
        let dir = tempfile::tempdir().unwrap();
        let durable = Durable::open(&dir.path().join("db"), SyncMode::Fdatasync).unwrap();
        // Each sync is slowed so that writers pile up behind the one running.
        durable.slow_down(Duration::from_millis(20));
        let tree = durable.db().open_tree("t").unwrap();
        let mut writers = tokio::task::JoinSet::new();
        for w in 0..32u32 {
            let (durable, tree) = (durable.clone(), tree.clone());
            writers.spawn(async move {
                for i in 0..4u32 {
                    tree.insert(format!("{w}/{i}"), &[0u8; 16]).unwrap();
                    durable.sync().await.unwrap();
                }
            });
        }
        while let Some(done) = writers.join_next().await {
            done.unwrap();
        }
        let inner = &durable.inner;
        assert_eq!(inner.issued.load(Ordering::SeqCst), 128);
        assert_eq!(
            inner.synced.load(Ordering::SeqCst),
            128,
            "the last sync covers every ticket"
        );
        // Writers that queue behind a running sync share the next one: with 32 writers and
        // one sync at a time, far fewer rounds than writes.
        let rounds = inner.rounds.load(Ordering::SeqCst);
        assert!(rounds <= 64, "{rounds} sync rounds for 128 writes");
    }

    /// sled creates a blob file and then writes it in several calls; a sync that runs in
    /// between (started for another writer) fsyncs the file half written. The blob's own
    /// write must still be synced with its final contents by the next sync.
    #[tokio::test]
    async fn a_blob_synced_while_sled_wrote_it_is_synced_again_with_its_final_contents() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let durable = Durable::open(&path, SyncMode::Fdatasync).unwrap();
        let before = durable.inner.blob_syncs.load(Ordering::SeqCst);
        // The first part of a blob, as sled's `write_blob` leaves it after its first call.
        let blob = path.join("blobs").join("123456789");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&blob)
            .unwrap();
        file.write_all(&[1, 2, 3, 4]).unwrap();
        // Another writer's sync runs now and sees the half-written file.
        durable.sync().await.unwrap();
        assert_eq!(durable.inner.blob_syncs.load(Ordering::SeqCst), before + 1);
        // sled finishes the blob; its writer then syncs.
        file.write_all(&[9u8; 64 * 1024]).unwrap();
        drop(file);
        durable.sync().await.unwrap();
        assert_eq!(
            durable.inner.blob_syncs.load(Ordering::SeqCst),
            before + 2,
            "the blob is fsynced again once its writer has finished it"
        );
        // A sync with nothing new fsyncs no blob again.
        durable.sync().await.unwrap();
        assert_eq!(durable.inner.blob_syncs.load(Ordering::SeqCst), before + 2);
    }

    #[tokio::test]
    async fn a_large_value_is_a_blob_file_and_gets_synced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let durable = Durable::open(&path, SyncMode::Fdatasync).unwrap();
        let tree = durable.db().open_tree("t").unwrap();
        // Bytes zstd cannot shrink: sled compresses a value before it decides on a blob.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let big: Vec<u8> = (0..300 * 1024)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        tree.insert("big", big).unwrap();
        durable.sync().await.unwrap();
        let blobs: Vec<_> = std::fs::read_dir(path.join("blobs")).unwrap().collect();
        assert!(!blobs.is_empty(), "sled put the value in a blob file");
        let synced = durable.inner.gate.lock().await;
        assert_eq!(
            synced.blobs.len(),
            blobs.len(),
            "every blob file is known as synced"
        );
    }
}
