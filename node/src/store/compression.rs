//! Whether sled compresses its pages, and rewriting a database when the node opens it: once
//! to turn one written the other way into one written this way, or on the operator's word
//! (`rowcall-node --defragment`) to give back the space sled keeps after deletes.
//!
//! sled 0.34 compresses each page with zstd when it is opened with `use_compression`; it
//! records the choice in its `conf` file and refuses to open the folder with the other
//! value. Compressed, a node's database takes about half the disk under invocation load
//! (receipts, request ids and their indexes are JSON and hex: see the performance chapter),
//! for some CPU on every page it writes.
//!
//! A node whose `[storage] compression` differs from its database's copies the database,
//! tree by tree, into a new folder opened the configured way, checks that both hold the
//! same keys and values (sled's checksum over every tree), makes the copy durable, and puts
//! it in the old one's place. It needs room on the disk for the copy while it runs.
//!
//! sled reuses the space of deleted and rewritten pages but never gives it back, so a
//! database whose receipts retention pruned keeps its size. The same copy holds only the
//! live data: `--defragment` (or a file named [`DEFRAGMENT_MARKER`] in the data folder) makes
//! it at start whatever the setting (as etcd's `defrag`, one member at a time; here while
//! the node is down, for the seconds the copy takes).
//!
//! # Recovery argument
//!
//! With the database at `sled`, the steps are:
//! 1. copy into `sled.converting` (removed first if a crash left one), flush, compare
//!    checksums, drop both handles, fsync every file and folder of the copy;
//! 2. rename `sled` to `sled.converted-from`, fsync the parent folder;
//! 3. rename `sled.converting` to `sled`, fsync the parent folder;
//! 4. remove `sled.converted-from`.
//!
//! Before opening, [`finish_interrupted`] looks at what a crash left:
//! - `sled.converted-from` without `sled`: the crash came between 2 and 3; the copy was
//!   complete and durable before 2 began, so step 3 is redone (and if the copy is missing,
//!   the old folder goes back to its name and the conversion starts over).
//! - `sled.converted-from` beside `sled`: the crash came between 3 and 4; step 4 is redone.
//! - `sled.converting` alone: the crash came during 1; the copy is removed and the
//!   conversion starts over from the untouched database.
//!
//! At every point one complete database is under one of the names, and the node opens the
//! one in place only once no step is left half done. The check and the steps run under a
//! lock on `sled.lock` beside the database, so a second process started on the same folder
//! meanwhile never takes the first one's copy for a leftover.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::error::SyncError;

/// A file in the data folder that asks the next start to defragment, as `--defragment` does;
/// the node removes it once the rewrite is done.
pub const DEFRAGMENT_MARKER: &str = "defragment";

/// Bytes of keys and values a copy applies to the new database in one batch.
const COPY_BATCH_BYTES: usize = 4 << 20;

/// The compression a sled folder was written with: `None` for a folder sled has not
/// written yet (no `conf`, or one too short to hold settings, which sled itself ignores).
pub fn written_with(dir: &Path) -> io::Result<Option<bool>> {
    let conf = match std::fs::read(dir.join("conf")) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if conf.len() <= 8 {
        return Ok(None);
    }
    let text = String::from_utf8_lossy(&conf);
    let value = text
        .lines()
        .find_map(|line| line.strip_prefix("use_compression: "))
        .map(str::trim);
    match value {
        Some("true") => Ok(Some(true)),
        Some("false") => Ok(Some(false)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: no use_compression setting sled can read",
                dir.join("conf").display()
            ),
        )),
    }
}

/// Opens a stopped node's sled folder as it was written (compressed or not), for tools
/// and tests that read a data folder directly.
pub fn open_as_written(dir: &Path) -> Result<sled::Db, SyncError> {
    let compression = written_with(dir)
        .map_err(|e| io_failure("read", &dir.join("conf"), e))?
        .unwrap_or(false);
    Ok(sled::Config::new()
        .path(dir)
        .use_compression(compression)
        .open()?)
}

fn sibling(dir: &Path, suffix: &str) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_owned();
    name.push(suffix);
    dir.with_file_name(name)
}

fn converting(dir: &Path) -> PathBuf {
    sibling(dir, ".converting")
}

fn converted_from(dir: &Path) -> PathBuf {
    sibling(dir, ".converted-from")
}

fn io_failure(call: &'static str, path: &Path, e: io::Error) -> SyncError {
    SyncError::Io {
        call,
        path: path.to_owned(),
        reason: e.to_string(),
    }
}

/// Completes or undoes a conversion a crash cut short (see the recovery argument). Blocking.
pub fn finish_interrupted(dir: &Path) -> Result<(), SyncError> {
    let (copy, old) = (converting(dir), converted_from(dir));
    if old.exists() {
        if dir.exists() {
            tracing::info!(folder = %old.display(), "removing the database a finished conversion replaced");
            return remove_dir(&old);
        }
        let back = if copy.exists() { &copy } else { &old };
        tracing::warn!(
            from = %back.display(),
            "a conversion of the database was cut short between its renames; completing it"
        );
        rename(back, dir)?;
        if back == &copy {
            remove_dir(&old)?;
        }
        return Ok(());
    }
    if copy.exists() {
        tracing::warn!(folder = %copy.display(), "removing the copy of a conversion cut short");
        remove_dir(&copy)?;
    }
    Ok(())
}

/// Rewrites the database in `dir` with `compression` if it was written the other way, or
/// whenever `defragment` is set (see the module documentation); does nothing to a folder
/// sled has not written yet. Blocking.
pub fn rewrite_if_needed(dir: &Path, compression: bool, defragment: bool) -> Result<(), SyncError> {
    // Held until the rewrite is done: a second process started on the same folder meanwhile
    // must not take this one's copy for a leftover and remove it, or rename its own
    // half-made copy into place.
    let _lock = lock_rewrites(dir)?;
    finish_interrupted(dir)?;
    let written = written_with(dir).map_err(|e| io_failure("read", &dir.join("conf"), e))?;
    match written {
        Some(was) if was != compression || defragment => rewrite(dir, was, compression),
        _ => Ok(()),
    }
}

/// Takes the lock on rewrites of the database in `dir` (`<dir>.lock` beside it), waiting a
/// few seconds for it as for sled's own ([`super::wait_for_lock`]).
fn lock_rewrites(dir: &Path) -> Result<File, SyncError> {
    let path = sibling(dir, ".lock");
    let folder = parent(&path);
    std::fs::create_dir_all(folder).map_err(|e| io_failure("create_dir_all", folder, e))?;
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| io_failure("open", &path, e))?;
    super::wait_for_lock(
        || file.try_lock(),
        |e| matches!(e, std::fs::TryLockError::WouldBlock),
    )
    .map_err(|e| match e {
        std::fs::TryLockError::WouldBlock => SyncError::Sled(format!(
            "{}: another process is rewriting or opening this data folder's database",
            path.display()
        )),
        std::fs::TryLockError::Error(e) => io_failure("flock", &path, e),
    })?;
    Ok(file)
}

fn rewrite(dir: &Path, was: bool, compression: bool) -> Result<(), SyncError> {
    let started = Instant::now();
    let before = folder_bytes(dir);
    let what = if was == compression {
        "defragmenting"
    } else {
        "converting"
    };
    tracing::info!(
        folder = %dir.display(),
        compression,
        bytes = before,
        "{what} the database (written with compression = {was}): a copy of its live data \
         replaces it, which needs room for the copy while it runs"
    );
    let copy = converting(dir);
    let copied = copy_database(dir, was, &copy, compression)
        .and_then(|copied| sync_tree(&copy).map(|()| copied))
        .map_err(|e| {
            // Whatever failed (a full disk, most likely), the database in place is untouched.
            let _ = std::fs::remove_dir_all(&copy);
            SyncError::Sled(format!(
                "{what} the database (compression = {compression}) failed, and it was \
                 left as it was: {e}. Start with compression = {was} \
                 (ROWCALL_STORAGE_COMPRESSION) and without --defragment (or the `{DEFRAGMENT_MARKER}` \
                 file in the data folder), or make room for a copy of it"
            ))
        })?;
    let old = converted_from(dir);
    rename(dir, &old)?;
    rename(&copy, dir)?;
    remove_dir(&old)?;
    tracing::info!(
        keys = copied,
        bytes_before = before,
        bytes_after = folder_bytes(dir),
        seconds = started.elapsed().as_secs_f64(),
        compression,
        "database rewritten"
    );
    Ok(())
}

/// Bytes of the files under `dir` (0 where it cannot be read: for the log only).
fn folder_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => folder_bytes(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Copies every tree of the database in `from` into a new one in `to` and checks that both
/// hold the same; returns the number of keys copied.
fn copy_database(from: &Path, was: bool, to: &Path, compression: bool) -> Result<u64, SyncError> {
    let old = super::wait_for_lock(
        || sled::Config::new().path(from).use_compression(was).open(),
        |e| matches!(e, sled::Error::Io(e) if e.to_string().contains("could not acquire lock")),
    )?;
    let new = sled::Config::new()
        .path(to)
        .use_compression(compression)
        .flush_every_ms(None)
        .open()?;
    let mut copied = 0u64;
    for name in old.tree_names() {
        let (source, target) = (old.open_tree(&name)?, new.open_tree(&name)?);
        let mut batch = sled::Batch::default();
        let mut batch_bytes = 0usize;
        for item in source.iter() {
            let (key, value) = item?;
            batch_bytes += key.len() + value.len();
            batch.insert(key, value);
            copied += 1;
            if batch_bytes >= COPY_BATCH_BYTES {
                target.apply_batch(std::mem::take(&mut batch))?;
                batch_bytes = 0;
            }
        }
        target.apply_batch(batch)?;
    }
    new.flush()?;
    let (before, after) = (old.checksum()?, new.checksum()?);
    if before != after {
        return Err(SyncError::Sled(format!(
            "the converted copy of the database differs from it (checksum {after:08x}, \
             expected {before:08x}); the database was left as it was"
        )));
    }
    Ok(copied)
}

/// fsyncs every file and folder under `dir`, and `dir` itself.
fn sync_tree(dir: &Path) -> Result<(), SyncError> {
    let entries = std::fs::read_dir(dir).map_err(|e| io_failure("read_dir", dir, e))?;
    for entry in entries {
        let path = entry.map_err(|e| io_failure("read_dir", dir, e))?.path();
        if path.is_dir() {
            sync_tree(&path)?;
        } else {
            fsync(&path)?;
        }
    }
    fsync(dir)
}

fn fsync(path: &Path) -> Result<(), SyncError> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| io_failure("fsync", path, e))
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// Renames `from` to `to` and makes the rename durable.
fn rename(from: &Path, to: &Path) -> Result<(), SyncError> {
    std::fs::rename(from, to).map_err(|e| io_failure("rename", from, e))?;
    fsync(parent(to))
}

fn remove_dir(dir: &Path) -> Result<(), SyncError> {
    std::fs::remove_dir_all(dir).map_err(|e| io_failure("remove_dir_all", dir, e))?;
    fsync(parent(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database with a few trees and a value large enough for sled to keep as a blob.
    fn fill(dir: &Path, compression: bool) -> u32 {
        let db =
            crate::store::reopen_sled(&sled::Config::new().path(dir).use_compression(compression));
        for tree in ["log", "sm", "outbox"] {
            let tree = db.open_tree(tree).unwrap();
            for i in 0..500u32 {
                tree.insert(
                    format!("k/{i:05}"),
                    format!("{{\"receipt\":{i}}}").as_bytes(),
                )
                .unwrap();
            }
        }
        db.insert("large", vec![7u8; 300 << 10]).unwrap();
        db.flush().unwrap();
        db.checksum().unwrap()
    }

    fn checksum(dir: &Path) -> u32 {
        open_as_written(dir).unwrap().checksum().unwrap()
    }

    #[test]
    fn a_database_is_converted_both_ways_with_every_key_kept() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("sled");
        let sum = fill(&dir, false);
        assert_eq!(written_with(&dir).unwrap(), Some(false));

        rewrite_if_needed(&dir, true, false).unwrap();
        assert_eq!(written_with(&dir).unwrap(), Some(true));
        assert_eq!(checksum(&dir), sum);
        // Opening it compressed is what the node does next.
        let db = crate::store::reopen_sled(&sled::Config::new().path(&dir).use_compression(true));
        assert_eq!(db.open_tree("sm").unwrap().len(), 500);
        drop(db);
        // Nothing of the conversion is left beside it but the (unlocked) lock file.
        let mut names: Vec<_> = std::fs::read_dir(root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["sled", "sled.lock"]);

        rewrite_if_needed(&dir, false, false).unwrap();
        assert_eq!(written_with(&dir).unwrap(), Some(false));
        assert_eq!(checksum(&dir), sum);
    }

    #[test]
    fn a_database_already_written_as_configured_is_left_alone() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("sled");
        fill(&dir, true);
        let db_file = std::fs::metadata(dir.join("db")).unwrap();
        rewrite_if_needed(&dir, true, false).unwrap();
        let after = std::fs::metadata(dir.join("db")).unwrap();
        assert_eq!(
            db_file.modified().unwrap(),
            after.modified().unwrap(),
            "the database was rewritten"
        );
        // A folder sled has not written yet is not a conversion either.
        let fresh = root.path().join("fresh");
        rewrite_if_needed(&fresh, true, false).unwrap();
        assert!(!fresh.exists());
    }

    #[test]
    fn a_conversion_cut_short_at_any_step_ends_with_the_whole_database() {
        // During the copy: the copy is dropped, the database in place is kept.
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("sled");
        let sum = fill(&dir, false);
        fill(&converting(&dir), true); // a partial copy, as far as anyone can tell
        rewrite_if_needed(&dir, true, false).unwrap();
        assert_eq!(
            (written_with(&dir).unwrap(), checksum(&dir)),
            (Some(true), sum)
        );
        assert!(!converting(&dir).exists());

        // Between the renames: the complete copy is put in place.
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("sled");
        let sum = fill(&dir, false);
        let copied = copy_database(&dir, false, &converting(&dir), true).unwrap();
        assert_eq!(copied, 3 * 500 + 1, "every key of every tree, counted");
        std::fs::rename(&dir, converted_from(&dir)).unwrap();
        finish_interrupted(&dir).unwrap();
        assert_eq!(
            (written_with(&dir).unwrap(), checksum(&dir)),
            (Some(true), sum)
        );
        assert!(!converted_from(&dir).exists() && !converting(&dir).exists());

        // Between the renames with no copy left (removed by hand): the old one goes back.
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("sled");
        let sum = fill(&dir, false);
        std::fs::rename(&dir, converted_from(&dir)).unwrap();
        finish_interrupted(&dir).unwrap();
        assert_eq!(
            (written_with(&dir).unwrap(), checksum(&dir)),
            (Some(false), sum)
        );

        // After both renames: the old one is removed.
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("sled");
        let sum = fill(&dir, true);
        fill(&converted_from(&dir), false);
        finish_interrupted(&dir).unwrap();
        assert!(!converted_from(&dir).exists());
        assert_eq!(checksum(&dir), sum);
    }

    #[test]
    fn defragmenting_keeps_every_key_and_gives_back_what_deletes_left() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("sled");
        {
            let db = crate::store::reopen_sled(&sled::Config::new().path(&dir));
            let tree = db.open_tree("sm").unwrap();
            // Receipts written and then pruned: sled keeps the space they took.
            for i in 0..20_000u32 {
                tree.insert(format!("i/{i:06}"), vec![b'r'; 600]).unwrap();
            }
            for i in 0..19_000u32 {
                tree.remove(format!("i/{i:06}")).unwrap();
            }
            db.flush().unwrap();
        }
        let (sum, before) = (checksum(&dir), folder_bytes(&dir));
        rewrite_if_needed(&dir, false, true).unwrap();
        let after = folder_bytes(&dir);
        assert_eq!(
            (written_with(&dir).unwrap(), checksum(&dir)),
            (Some(false), sum)
        );
        assert!(after * 2 < before, "{before} -> {after} bytes");
    }

    #[test]
    fn a_conversion_that_fails_leaves_the_database_as_it_was_and_says_how_out() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("sled");
        let sum = fill(&dir, false);
        // Another process holds the database: its copy cannot be made.
        let held = open_as_written(&dir).unwrap();
        let err = rewrite_if_needed(&dir, true, false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("converting the database")
                && err.contains("left as it was")
                && err.contains("Start with compression = false"),
            "{err}"
        );
        let err = rewrite_if_needed(&dir, false, true)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("defragmenting the database") && err.contains("without --defragment"),
            "{err}"
        );
        drop(held);
        assert!(!converting(&dir).exists() && !converted_from(&dir).exists());
        assert_eq!(
            (written_with(&dir).unwrap(), checksum(&dir)),
            (Some(false), sum)
        );
    }

    #[test]
    fn one_process_at_a_time_rewrites_a_database() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("sled");
        let sum = fill(&dir, false);
        // Another process is in the middle of converting it: its copy is not a leftover.
        let held = lock_rewrites(&dir).unwrap();
        fill(&converting(&dir), true);
        let err = rewrite_if_needed(&dir, false, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("another process"), "{err}");
        assert!(converting(&dir).exists(), "the other's copy was removed");
        drop(held);
        rewrite_if_needed(&dir, true, false).unwrap();
        assert_eq!(
            (written_with(&dir).unwrap(), checksum(&dir)),
            (Some(true), sum)
        );
    }

    #[test]
    fn a_rename_syncs_the_folder_it_happened_in() {
        assert_eq!(parent(Path::new("/data/sled")), Path::new("/data"));
        assert_eq!(parent(Path::new("sled")), Path::new("."));
    }

    #[test]
    fn a_folder_counts_the_files_of_its_folders() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("blobs")).unwrap();
        std::fs::write(root.path().join("db"), [0u8; 100]).unwrap();
        std::fs::write(root.path().join("blobs").join("7"), [0u8; 20_000]).unwrap();
        assert_eq!(folder_bytes(root.path()), 20_100);
    }

    #[test]
    fn settings_sled_cannot_read_are_an_error_not_a_guess() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(
            root.path().join("conf"),
            b"segment_size: 524288\nversion: 0.34\n",
        )
        .unwrap();
        let err = written_with(root.path()).unwrap_err();
        assert!(err.to_string().contains("use_compression"), "{err}");
        // Settings that cannot be read at all are not taken for a new folder either.
        std::fs::remove_file(root.path().join("conf")).unwrap();
        std::fs::create_dir(root.path().join("conf")).unwrap();
        assert!(written_with(root.path()).is_err());
        std::fs::remove_dir(root.path().join("conf")).unwrap();
        // Too short to hold settings: sled treats it as a new folder, and so does this.
        std::fs::write(root.path().join("conf"), b"x").unwrap();
        assert_eq!(written_with(root.path()).unwrap(), None);
    }
}
