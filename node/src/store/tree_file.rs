//! The receipt log's Merkle tree hashes in one flat file beside sled.
//!
//! The tree only ever grows by a leaf at its right edge, and each leaf completes the
//! subtrees it closes at once, so its hashes can simply be written one after the other: the
//! file is a run of 32-byte slots in the order the hashes come into being (leaf `L`, then
//! every complete subtree that `L` closes, lowest first). `2n − popcount(n)` slots hold the
//! tree of `n` leaves, and [`slot`] finds a subtree's slot by arithmetic, so a root or a
//! proof is O(log² n) reads and a leaf two writes on average, without a key in sled for
//! each hash (sled costs about 220 bytes a key whatever its value, twice that once its
//! pages are rewritten: see the performance chapter).
//!
//! # Recovery argument
//!
//! The file holds nothing that is not also in sled: each leaf's hash is stored with its
//! receipt id (`x/l/<leaf>`), and every other slot is a hash of two slots before it. So
//! the file is a cache that recovery can always complete, and the only question is which
//! of its slots to trust after a crash.
//! - A sync of the database ([`super::Durable::sync`]) fdatasyncs this file and then records
//!   in sled (`tlog/hashes_synced`, in the same flush) how many slots that sync covered. A
//!   durable marker therefore never claims a slot that was not durable first.
//! - At open, [`TreeFile::recover`] keeps the slots below the marker (and below the file's
//!   length and the tree's size) and cuts the rest off: a process crash leaves written
//!   slots, a power loss may leave a tail that is missing, zeros or stale. The state machine
//!   then computes the slots from there to the tree's size again from the leaf hashes in
//!   sled.
//! - The marker never stays above what the file holds: a cut below it lowers it first
//!   (durably, at open) or in the same sled order as what follows (an install's clear,
//!   which a crash repeats before anything reads the tree), and a sync records its count
//!   only if no cut happened while it ran.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rowcall_proto::tlog::Hash;

/// Bytes of one slot.
const SLOT: u64 = 32;

/// The key in sled's default tree of the slots the last sync made durable (big-endian u64).
const SYNCED: &[u8] = b"tlog/hashes_synced";

/// The file's name in the receipts folder.
pub const FILE_NAME: &str = "tree.hashes";

/// Slots the tree of `leaves` leaves fills.
pub fn slots(leaves: u64) -> u64 {
    2 * leaves - u64::from(leaves.count_ones())
}

/// The slot of the hash of complete subtree `index` at `level` (level 0: the leaves).
pub fn slot(level: u8, index: u64) -> u64 {
    // Its last leaf closes it; its hashes come after that leaf's, one a level.
    let last = ((index + 1) << level) - 1;
    slots(last) + u64::from(level)
}

/// Leaves whose slots all fit in the first `count` (the largest `n` with `slots(n) ≤
/// count`).
pub fn leaves_within(count: u64) -> u64 {
    // slots(n) is increasing and between n and 2n, so n is in [count / 2, count].
    let (mut lo, mut hi) = (count / 2, count);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if slots(mid) <= count {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// The tree hash file of one database; cheap to clone.
#[derive(Clone)]
pub struct TreeFile {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    path: PathBuf,
    file: Arc<File>,
    /// sled's default tree, where the synced count is recorded.
    db: sled::Db,
    /// Whether syncs reach the disk (`fdatasync`), or only the page cache.
    sync: bool,
    /// Slots written, all valid; `None` until [`TreeFile::recover`].
    written: Option<u64>,
    /// The synced count as sled holds it.
    marker: u64,
    /// Bumped by every cut, so a sync that raced one records nothing.
    generation: u64,
    dirty: bool,
}

impl TreeFile {
    /// Opens (or creates) the file `path` with the marker that `db` holds. Nothing is read,
    /// written or synced until [`TreeFile::recover`] has said what to keep.
    pub fn open(path: &Path, db: sled::Db, sync: bool) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let marker =
            match db.get(SYNCED).map_err(io::Error::other)? {
                Some(bytes) => u64::from_be_bytes(bytes.as_ref().try_into().map_err(|_| {
                    io::Error::new(io::ErrorKind::InvalidData, "tlog/hashes_synced")
                })?),
                None => 0,
            };
        Ok(Self {
            inner: Arc::new(Mutex::new(Inner {
                path: path.to_owned(),
                file: Arc::new(file),
                db,
                sync,
                written: None,
                marker,
                generation: 0,
                dirty: false,
            })),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every change under the lock is a plain assignment: a panic leaves it whole.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps the slots that are durable and belong to a tree of `leaves` leaves, cuts the
    /// rest off (see "Recovery argument"), and returns how many leaves' slots are kept:
    /// the caller writes the slots of the leaves from there to `leaves` again.
    pub fn recover(&self, leaves: u64) -> io::Result<u64> {
        let mut inner = self.lock();
        let on_disk = inner.file.metadata()?.len() / SLOT;
        let kept = leaves_within(inner.marker.min(on_disk).min(slots(leaves)));
        let keep = slots(kept);
        if keep < inner.marker {
            // Lowered durably before the cut, or a later power loss would trust slots that
            // are written again after it.
            inner.record(keep)?;
            inner.db.flush().map_err(io::Error::other)?;
        }
        inner.file.set_len(keep * SLOT)?;
        inner.generation += 1;
        inner.written = Some(keep);
        Ok(kept)
    }

    /// Empties the file, to write the tree again from leaf 0 (an install). The marker goes
    /// to 0 in sled first, so any state sled keeps from here on trusts nothing of it.
    pub fn clear(&self) -> io::Result<()> {
        let mut inner = self.lock();
        inner.record(0)?;
        inner.file.set_len(0)?;
        inner.generation += 1;
        inner.written = Some(0);
        inner.dirty = true;
        Ok(())
    }

    /// Writes `hashes` (whole slots) from slot `at`, which must not be past the written
    /// ones (the file has no holes). Slots already there are the same hashes (the tree is a
    /// function of the log), so writing over them changes nothing.
    pub fn write(&self, at: u64, hashes: &[u8]) -> io::Result<()> {
        let mut inner = self.lock();
        let Some(written) = inner.written else {
            return Err(io::Error::other(
                "the tree hash file was written to before recovery",
            ));
        };
        if at > written || !(hashes.len() as u64).is_multiple_of(SLOT) {
            return Err(io::Error::other(format!(
                "tree hashes written at slot {at} past the {written} there are"
            )));
        }
        inner.file.write_all_at(hashes, at * SLOT)?;
        inner.written = Some(written.max(at + hashes.len() as u64 / SLOT));
        inner.dirty = true;
        Ok(())
    }

    /// The hash in `slot`, if it is written.
    pub fn read(&self, slot: u64) -> io::Result<Option<Hash>> {
        let file = {
            let inner = self.lock();
            if slot >= inner.written.unwrap_or(0) {
                return Ok(None);
            }
            inner.file.clone()
        };
        let mut hash = [0; SLOT as usize];
        file.read_exact_at(&mut hash, slot * SLOT)?;
        Ok(Some(hash))
    }

    /// Slots written.
    pub fn written(&self) -> u64 {
        self.lock().written.unwrap_or(0)
    }

    /// Makes every slot written so far durable and records their count in sled (step one of
    /// a database sync, whose flush makes the record durable in turn).
    pub fn sync(&self) -> io::Result<()> {
        let Some(pending) = self.begin_sync() else {
            return Ok(());
        };
        if pending.dirty && pending.sync {
            pending.file.sync_data()?;
        }
        self.finish_sync(&pending)
    }

    /// What a sync is about to make durable; `None` before recovery (what the file holds
    /// is not known to be valid yet).
    fn begin_sync(&self) -> Option<PendingSync> {
        let mut inner = self.lock();
        let written = inner.written?;
        Some(PendingSync {
            file: inner.file.clone(),
            generation: inner.generation,
            written,
            dirty: std::mem::take(&mut inner.dirty),
            sync: inner.sync,
        })
    }

    /// Records the count a sync made durable, unless the file was cut meanwhile.
    fn finish_sync(&self, pending: &PendingSync) -> io::Result<()> {
        let mut inner = self.lock();
        if inner.generation == pending.generation && inner.marker != pending.written {
            inner.record(pending.written)?;
        }
        Ok(())
    }

    /// The file's path.
    pub fn path(&self) -> PathBuf {
        self.lock().path.clone()
    }
}

/// A sync under way: the file and the count it covers.
struct PendingSync {
    file: Arc<File>,
    generation: u64,
    written: u64,
    dirty: bool,
    sync: bool,
}

impl Inner {
    fn record(&mut self, count: u64) -> io::Result<()> {
        self.db
            .insert(SYNCED, &count.to_be_bytes())
            .map_err(io::Error::other)?;
        self.marker = count;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slots as a tree of `n` leaves creates them: each leaf, then what it closes.
    fn creation_order(n: u64) -> Vec<(u8, u64)> {
        let mut out = Vec::new();
        for leaf in 0..n {
            out.push((0, leaf));
            let (mut level, mut at) = (0, leaf);
            while at & 1 == 1 {
                level += 1;
                at >>= 1;
                out.push((level, at));
            }
        }
        out
    }

    #[test]
    fn every_subtree_has_the_slot_it_is_created_in() {
        let order = creation_order(300);
        for (n, (level, index)) in order.iter().enumerate() {
            assert_eq!(slot(*level, *index), n as u64, "subtree {level}/{index}");
        }
        for n in 0..=300 {
            assert_eq!(slots(n), creation_order(n).len() as u64, "{n} leaves");
        }
    }

    #[test]
    fn leaves_within_a_count_are_the_most_whose_slots_fit() {
        for count in 0..2_000u64 {
            let n = leaves_within(count);
            assert!(slots(n) <= count, "{count}: {n}");
            assert!(slots(n + 1) > count, "{count}: {n}");
        }
    }

    fn hash(n: u8) -> Hash {
        [n; 32]
    }

    fn open(dir: &Path) -> (TreeFile, sled::Db) {
        // The previous open's lock may still be held for a moment by sled's background
        // writes after its last handle dropped: waited for as the node's own open does.
        let db = crate::store::reopen_sled(
            &sled::Config::new()
                .path(dir.join("sled"))
                .flush_every_ms(None),
        );
        let file = TreeFile::open(&dir.join(FILE_NAME), db.clone(), false).unwrap();
        (file, db)
    }

    fn slots_bytes(from: u8, count: u8) -> Vec<u8> {
        (from..from + count).flat_map(hash).collect()
    }

    #[test]
    fn writes_read_back_and_slots_past_the_written_read_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let (file, _db) = open(dir.path());
        assert!(
            file.write(0, &slots_bytes(1, 1)).is_err(),
            "before recovery"
        );
        assert_eq!(file.recover(0).unwrap(), 0);
        file.write(0, &slots_bytes(1, 3)).unwrap();
        assert_eq!(file.read(2).unwrap(), Some(hash(3)));
        assert_eq!(file.read(3).unwrap(), None);
        assert!(file.write(4, &slots_bytes(9, 1)).is_err(), "a hole");
        assert!(file.write(3, &[0; 5]).is_err(), "half a slot");
        // Writing over slots changes nothing but what is written.
        file.write(1, &slots_bytes(2, 3)).unwrap();
        assert_eq!(file.written(), 4);
        assert_eq!(file.read(3).unwrap(), Some(hash(4)));
    }

    #[test]
    fn recovery_keeps_only_synced_slots_of_the_stored_tree() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (file, _db) = open(dir.path());
            file.recover(0).unwrap();
            // Leaves 0..3: slots 0..4.
            file.write(0, &slots_bytes(1, 4)).unwrap();
            file.sync().unwrap();
            // Leaf 3 and its two subtrees, written but never synced.
            file.write(4, &slots_bytes(5, 3)).unwrap();
        }
        let (file, _db) = open(dir.path());
        assert_eq!(file.recover(4).unwrap(), 3, "the synced leaves only");
        assert_eq!(file.written(), 4);
        assert_eq!(std::fs::metadata(file.path()).unwrap().len(), 4 * SLOT);
        assert_eq!(file.read(3).unwrap(), Some(hash(4)));
    }

    #[test]
    fn a_tree_smaller_than_the_marker_cuts_the_file_and_lowers_the_marker_first() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (file, _db) = open(dir.path());
            file.recover(0).unwrap();
            file.write(0, &slots_bytes(1, 7)).unwrap();
            file.sync().unwrap();
        }
        {
            // sled kept a tree of two leaves (three slots).
            let (file, _db) = open(dir.path());
            assert_eq!(file.recover(2).unwrap(), 2);
            assert_eq!(file.written(), 3);
            // Written again, but lost to a power loss before a sync: zeros.
            file.write(3, &[0; 4 * SLOT as usize]).unwrap();
        }
        let (file, _db) = open(dir.path());
        assert_eq!(
            file.recover(4).unwrap(),
            2,
            "the marker went down to 3 slots"
        );
    }

    #[test]
    fn a_file_shorter_than_the_marker_keeps_only_what_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (file, _db) = open(dir.path());
            file.recover(0).unwrap();
            file.write(0, &slots_bytes(1, 7)).unwrap();
            file.sync().unwrap();
        }
        // An older copy of the file (four slots: three leaves) under the newer database.
        let path = dir.path().join(FILE_NAME);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(4 * SLOT)
            .unwrap();
        let (file, _db) = open(dir.path());
        assert_eq!(file.recover(4).unwrap(), 3);
        assert_eq!(file.written(), 4);
        assert_eq!(file.read(4).unwrap(), None);
    }

    #[test]
    fn a_missing_file_or_marker_trusts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (file, _db) = open(dir.path());
            file.recover(0).unwrap();
            file.write(0, &slots_bytes(1, 4)).unwrap();
            file.sync().unwrap();
        }
        std::fs::remove_file(dir.path().join(FILE_NAME)).unwrap();
        {
            let (file, _db) = open(dir.path());
            assert_eq!(file.recover(3).unwrap(), 0);
        }
        let other = tempfile::tempdir().unwrap();
        std::fs::copy(dir.path().join(FILE_NAME), other.path().join(FILE_NAME)).unwrap();
        let (file, _db) = open(other.path());
        assert_eq!(file.recover(3).unwrap(), 0, "no marker in this database");
    }

    #[test]
    fn a_sync_that_raced_a_clear_records_nothing_and_a_clear_zeroes_the_marker() {
        let dir = tempfile::tempdir().unwrap();
        let (file, db) = open(dir.path());
        file.recover(0).unwrap();
        file.write(0, &slots_bytes(1, 4)).unwrap();
        file.sync().unwrap();
        assert_eq!(
            db.get(SYNCED).unwrap().unwrap().as_ref(),
            4u64.to_be_bytes()
        );
        file.clear().unwrap();
        assert_eq!(
            db.get(SYNCED).unwrap().unwrap().as_ref(),
            0u64.to_be_bytes()
        );
        assert_eq!(file.read(0).unwrap(), None);
        file.write(0, &slots_bytes(7, 2)).unwrap();
        // A sync that read the count (2) before another clear.
        let pending = file.begin_sync().unwrap();
        file.clear().unwrap();
        file.finish_sync(&pending).unwrap();
        assert_eq!(
            db.get(SYNCED).unwrap().unwrap().as_ref(),
            0u64.to_be_bytes()
        );
        // One that did not race.
        file.write(0, &slots_bytes(7, 1)).unwrap();
        let pending = file.begin_sync().unwrap();
        file.finish_sync(&pending).unwrap();
        assert_eq!(
            db.get(SYNCED).unwrap().unwrap().as_ref(),
            1u64.to_be_bytes()
        );
    }
}
