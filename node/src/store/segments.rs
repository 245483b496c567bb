//! Receipt bodies in append-only segment files beside sled.
//!
//! sled keeps a value inside its B-tree pages, and every insert rewrites a page: under
//! invocation load sled held ~5 KB on disk per ~1.1 KB receipt and its keys (pages split
//! half full by keys that only grow, and old page versions until its segment cleaner runs;
//! see the performance chapter). A receipt is written once and only ever read or dropped
//! whole, so its body goes into a file that only grows, and sled keeps a 26-byte value
//! saying where it is ([`Place`]): the body costs its own bytes plus an 8-byte header.
//!
//! # Layout
//!
//! The folder holds files `<n:08x>.seg`, numbered from 1. Each is a run of records: the
//! body's length (u32, little-endian), its CRC-32 (u32, little-endian), the body. Only the
//! highest-numbered file, the active one, is written; it is closed (synced) and the next
//! one started once it holds [`SEGMENT_BYTES`]. A file is removed once no stored value
//! points into it and a sync has made that durable (retention drops receipts oldest first,
//! so whole files empty out in turn).
//!
//! # Recovery argument
//!
//! The state machine writes a batch's bodies here (`write`, into the page cache) before
//! the sled batch that points at them, and that batch records the new end of the active
//! file (`m/receipts_end`). A sync of the database ([`super::Durable::sync`]) syncs this
//! folder's written bytes before sled's flush. So:
//! - after a process crash, every place sled kept was written before it, so it is there;
//!   bytes past the recorded end belong to batches sled lost, which openraft applies again
//!   from its log, and [`Segments::recover`] cuts them off;
//! - after a power loss, sled may keep a batch its own buffer writes put on disk without a
//!   sync while the bodies it points at were not: recovery checks every record of the
//!   active file up to the recorded end by its CRC, keeps the valid prefix, and the state
//!   machine rewrites the bodies past it from the Raft log (an entry stays in the log until
//!   a snapshot covers it, and building one syncs this folder first). Closed files were
//!   synced when the next one started.
//! - a file is removed only after the sync that made the removal of its last place durable,
//!   so no state sled can come back to points into a removed file.

use std::collections::{BTreeSet, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{self, Read as _};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// Bytes a segment file grows to before the next one is started.
pub const SEGMENT_BYTES: u64 = 32 << 20;

/// A record's header: the body's length and CRC-32.
const HEADER: u64 = 8;

/// Closed files kept open for reads at most.
const READERS: usize = 16;

/// Where one body is: its file, the offset of its record, its length and CRC-32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// The segment file's number.
    pub segment: u32,
    /// Where the record (header, then body) starts.
    pub offset: u32,
    /// The body's length.
    pub len: u32,
    /// The body's CRC-32.
    pub crc: u32,
}

impl Place {
    /// Bytes of [`Place::encode`].
    pub const ENCODED: usize = 16;

    /// Big-endian segment, offset, length and CRC.
    pub fn encode(&self) -> [u8; Self::ENCODED] {
        let mut out = [0; Self::ENCODED];
        out[..4].copy_from_slice(&self.segment.to_be_bytes());
        out[4..8].copy_from_slice(&self.offset.to_be_bytes());
        out[8..12].copy_from_slice(&self.len.to_be_bytes());
        out[12..].copy_from_slice(&self.crc.to_be_bytes());
        out
    }

    /// The place [`Place::encode`] wrote, from the first [`Place::ENCODED`] bytes.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let word = |at: usize| -> Option<u32> {
            Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
        };
        Some(Self {
            segment: word(0)?,
            offset: word(4)?,
            len: word(8)?,
            crc: word(12)?,
        })
    }

    /// Where the record ends in its file.
    pub fn end(&self) -> u64 {
        u64::from(self.offset) + HEADER + u64::from(self.len)
    }
}

/// The end of the written records: the active file and its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct End {
    /// The active file's number.
    pub segment: u32,
    /// Its length in bytes.
    pub offset: u64,
}

impl End {
    /// Bytes of [`End::encode`].
    pub const ENCODED: usize = 12;

    /// Big-endian segment and offset.
    pub fn encode(&self) -> [u8; Self::ENCODED] {
        let mut out = [0; Self::ENCODED];
        out[..4].copy_from_slice(&self.segment.to_be_bytes());
        out[4..].copy_from_slice(&self.offset.to_be_bytes());
        out
    }

    /// The end [`End::encode`] wrote.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        Some(Self {
            segment: u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?),
            offset: u64::from_be_bytes(bytes.get(4..12)?.try_into().ok()?),
        })
    }
}

/// The segment files of one database; cheap to clone.
#[derive(Clone)]
pub struct Segments {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    dir: PathBuf,
    /// Whether syncs reach the disk (`fdatasync`), or only the page cache.
    sync: bool,
    segment_bytes: u64,
    /// The files there are.
    files: BTreeSet<u32>,
    /// The active file, open for appends (and reads).
    writer: Option<(u32, Arc<File>)>,
    /// Closed files open for reads, the most recently used last: at most [`READERS`], so
    /// a node with years of receipts holds a few descriptors, not one per file.
    readers: Vec<(u32, Arc<File>)>,
    /// The file appends go to, and its length; set by [`Segments::recover`].
    active: Option<End>,
    /// Places stored per file.
    live: HashMap<u32, u64>,
    /// Written since the last sync.
    dirty: bool,
    /// A file was created since the last sync of the folder.
    dir_dirty: bool,
    /// Files no place points into any more, removed after the next sync.
    freed: Vec<u32>,
}

fn file_name(segment: u32) -> String {
    format!("{segment:08x}.seg")
}

fn parse_name(name: &str) -> Option<u32> {
    let hex = name.strip_suffix(".seg")?;
    (hex.len() == 8)
        .then(|| u32::from_str_radix(hex, 16).ok())
        .flatten()
}

fn damaged(place: &Place, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "the receipt body in {} at offset {} is damaged ({what})",
            file_name(place.segment),
            place.offset
        ),
    )
}

impl Segments {
    /// Opens the segment folder `dir` (created if missing). Nothing is written until
    /// [`Segments::recover`] has said where the stored state ends.
    pub fn open(dir: &Path, sync: bool) -> io::Result<Self> {
        if !dir.exists() {
            std::fs::create_dir_all(dir)?;
            if sync {
                if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                    File::open(parent)?.sync_all()?;
                }
            }
        }
        let mut files = BTreeSet::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if let Some(segment) = entry.file_name().to_str().and_then(parse_name) {
                files.insert(segment);
            }
        }
        Ok(Self {
            inner: Arc::new(Mutex::new(Inner {
                dir: dir.to_owned(),
                sync,
                segment_bytes: SEGMENT_BYTES,
                files,
                writer: None,
                readers: Vec::new(),
                active: None,
                live: HashMap::new(),
                dirty: false,
                dir_dirty: true,
                freed: Vec::new(),
            })),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the maps whole: every change is one insert
        // or remove.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Test hook: files start anew past `bytes` instead of [`SEGMENT_BYTES`].
    #[cfg(test)]
    pub(crate) fn set_segment_bytes(&self, bytes: u64) {
        self.lock().segment_bytes = bytes;
    }

    /// Brings the folder in line with the stored state, whose values point `live` places
    /// into each file and which recorded `end` as the end of the records (`None`: it has
    /// none). Removes files past the end and files nothing points into, cuts the active
    /// file back to its valid records up to the end, and returns the new end: places past
    /// it are missing (see "Recovery argument").
    pub fn recover(&self, end: Option<End>, live: HashMap<u32, u64>) -> io::Result<End> {
        let mut inner = self.lock();
        let active = end.map_or(1, |e| e.segment);
        let limit = end.map_or(0, |e| e.offset);
        let doomed: Vec<u32> = inner
            .files
            .iter()
            .copied()
            .filter(|n| end.is_none() || *n > active || (*n < active && !live.contains_key(n)))
            .collect();
        for segment in doomed {
            inner.forget(segment);
            std::fs::remove_file(inner.dir.join(file_name(segment)))?;
            inner.dir_dirty = true;
        }
        if inner.files.insert(active) {
            inner.dir_dirty = true;
        }
        let file = Arc::new(
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(inner.dir.join(file_name(active)))?,
        );
        inner.writer = Some((active, file.clone()));
        let valid = valid_prefix(&file, limit)?;
        if file.metadata()?.len() != valid {
            file.set_len(valid)?;
            if inner.sync {
                file.sync_all()?;
            }
        }
        let recovered = End {
            segment: active,
            offset: valid,
        };
        inner.active = Some(recovered);
        inner.live = live;
        Ok(recovered)
    }

    /// Appends `bodies` to the active file in one write and returns where each went. The
    /// bytes are in the page cache when this returns; the next sync makes them durable.
    pub fn append(&self, bodies: &[Vec<u8>]) -> io::Result<Vec<Place>> {
        let mut inner = self.lock();
        let mut places = Vec::with_capacity(bodies.len());
        let mut buffer = Vec::new();
        let Some(mut end) = inner.active else {
            return Err(io::Error::other(
                "receipt segments appended to before recovery",
            ));
        };
        for body in bodies {
            let len = u32::try_from(body.len())
                .map_err(|_| io::Error::other("a receipt body over 4 GiB"))?;
            let record = HEADER + u64::from(len);
            let start = end.offset + buffer.len() as u64;
            if start > 0 && start + record > inner.segment_bytes {
                let file = inner.active_file(end.segment)?;
                file.write_all_at(&buffer, end.offset)?;
                if inner.sync {
                    file.sync_data()?;
                }
                buffer.clear();
                end = inner.start(end.segment + 1)?;
            }
            let offset = end.offset + buffer.len() as u64;
            let crc = crc32fast::hash(body);
            buffer.extend_from_slice(&len.to_le_bytes());
            buffer.extend_from_slice(&crc.to_le_bytes());
            buffer.extend_from_slice(body);
            places.push(Place {
                segment: end.segment,
                offset: u32::try_from(offset)
                    .map_err(|_| io::Error::other("a segment file past 4 GiB"))?,
                len,
                crc,
            });
            *inner.live.entry(end.segment).or_default() += 1;
        }
        if !buffer.is_empty() {
            let file = inner.active_file(end.segment)?;
            file.write_all_at(&buffer, end.offset)?;
            end.offset += buffer.len() as u64;
            inner.dirty = true;
        }
        inner.active = Some(end);
        Ok(places)
    }

    /// The end of the written records.
    pub fn end(&self) -> End {
        self.lock().active.unwrap_or_default()
    }

    /// The body at `place`; `None` when its file was removed (every place in it was
    /// released, so a reader holding `place` raced with its removal).
    pub fn read(&self, place: &Place) -> io::Result<Option<Vec<u8>>> {
        let Some(file) = self.lock().reader(place.segment)? else {
            return Ok(None);
        };
        let mut record = vec![0; HEADER as usize + place.len as usize];
        file.read_exact_at(&mut record, u64::from(place.offset))
            .map_err(|e| damaged(place, &e.to_string()))?;
        let (header, body) = record.split_at(HEADER as usize);
        let (len, crc) = header.split_at(4);
        if len != place.len.to_le_bytes() || crc != place.crc.to_le_bytes() {
            return Err(damaged(place, "its header differs from the stored place"));
        }
        if crc32fast::hash(body) != place.crc {
            return Err(damaged(place, "checksum mismatch"));
        }
        Ok(Some(body.to_vec()))
    }

    /// Notes that nothing points at `places` any more (their values are gone from a batch
    /// sled has applied); a file left with none is removed after the next sync.
    pub fn release(&self, places: &[Place]) {
        let mut inner = self.lock();
        let active = inner.active.map(|e| e.segment);
        for place in places {
            let Some(count) = inner.live.get_mut(&place.segment) else {
                continue;
            };
            *count = count.saturating_sub(1);
            if *count == 0 {
                inner.live.remove(&place.segment);
                if Some(place.segment) != active {
                    inner.freed.push(place.segment);
                }
            }
        }
    }

    /// Makes every byte written so far durable (step one of a database sync) and returns
    /// the files to remove once the rest of that sync is done ([`Segments::remove`]).
    pub fn sync(&self) -> io::Result<Freed> {
        let freed = Freed(std::mem::take(&mut self.lock().freed));
        self.sync_files()?;
        Ok(freed)
    }

    /// Makes every byte written so far durable, removing nothing.
    pub fn sync_files(&self) -> io::Result<()> {
        let (file, dir, sync) = {
            let mut inner = self.lock();
            let file = match (inner.dirty, &inner.writer) {
                (true, Some((_, file))) => Some(file.clone()),
                _ => None,
            };
            inner.dirty = false;
            let dir = std::mem::take(&mut inner.dir_dirty).then(|| inner.dir.clone());
            (file, dir, inner.sync)
        };
        if sync {
            if let Some(file) = file {
                file.sync_data()?;
            }
            if let Some(dir) = dir {
                File::open(dir)?.sync_all()?;
            }
        }
        Ok(())
    }

    /// Removes the files a sync found empty, once that sync has made the state durable.
    pub fn remove(&self, freed: Freed) -> io::Result<()> {
        let mut inner = self.lock();
        for segment in freed.0 {
            // Filled again meanwhile cannot happen (only the active file takes appends, and
            // it is never freed), but a file still pointed into must never go.
            if inner.live.contains_key(&segment) || inner.active.map(|e| e.segment) == Some(segment)
            {
                continue;
            }
            if inner.forget(segment) {
                match std::fs::remove_file(inner.dir.join(file_name(segment))) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// Segment files and their bytes, for tests and tools.
    pub fn files(&self) -> Vec<(u32, u64)> {
        let inner = self.lock();
        inner
            .files
            .iter()
            .map(|n| {
                let len = std::fs::metadata(inner.dir.join(file_name(*n)));
                (*n, len.map_or(0, |m| m.len()))
            })
            .collect()
    }

    /// The segment folder.
    pub fn dir(&self) -> PathBuf {
        self.lock().dir.clone()
    }
}

/// Files a sync found empty: removed by [`Segments::remove`] once the sync is done.
#[must_use]
#[derive(Debug, Default)]
pub struct Freed(Vec<u32>);

impl Inner {
    fn active_file(&self, segment: u32) -> io::Result<Arc<File>> {
        match &self.writer {
            Some((n, file)) if *n == segment => Ok(file.clone()),
            _ => Err(io::Error::other("the active segment file is not open")),
        }
    }

    /// A handle to read file `segment`; `None` when there is no such file (removed).
    fn reader(&mut self, segment: u32) -> io::Result<Option<Arc<File>>> {
        if let Some((n, file)) = &self.writer {
            if *n == segment {
                return Ok(Some(file.clone()));
            }
        }
        if let Some(at) = self.readers.iter().position(|(n, _)| *n == segment) {
            let used = self.readers.remove(at);
            let file = used.1.clone();
            self.readers.push(used);
            return Ok(Some(file));
        }
        if !self.files.contains(&segment) {
            return Ok(None);
        }
        let file = match File::open(self.dir.join(file_name(segment))) {
            Ok(file) => Arc::new(file),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        if self.readers.len() == READERS {
            self.readers.remove(0);
        }
        self.readers.push((segment, file.clone()));
        Ok(Some(file))
    }

    /// Forgets file `segment` (about to be removed); returns whether there was one.
    fn forget(&mut self, segment: u32) -> bool {
        self.readers.retain(|(n, _)| *n != segment);
        if self.writer.as_ref().is_some_and(|(n, _)| *n == segment) {
            self.writer = None;
        }
        self.files.remove(&segment)
    }

    /// Starts file `segment` (the one before it was synced when it filled).
    fn start(&mut self, segment: u32) -> io::Result<End> {
        let path = self.dir.join(file_name(segment));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        self.files.insert(segment);
        self.writer = Some((segment, Arc::new(file)));
        self.dir_dirty = true;
        if let Some(previous) = self.active.map(|e| e.segment) {
            if !self.live.contains_key(&previous) {
                self.freed.push(previous);
            }
        }
        let end = End { segment, offset: 0 };
        self.active = Some(end);
        Ok(end)
    }
}

/// The length of the run of whole records with matching checksums at the start of `file`,
/// reading no further than `limit`.
fn valid_prefix(file: &File, limit: u64) -> io::Result<u64> {
    let limit = limit.min(file.metadata()?.len());
    let mut reader = io::BufReader::with_capacity(1 << 20, file);
    let mut at = 0u64;
    let mut header = [0u8; HEADER as usize];
    let mut body = Vec::new();
    while at + HEADER <= limit {
        reader.read_exact(&mut header)?;
        let len = u64::from(u32::from_le_bytes(
            header[..4].try_into().unwrap_or_default(),
        ));
        let crc = u32::from_le_bytes(header[4..].try_into().unwrap_or_default());
        if at + HEADER + len > limit {
            break;
        }
        body.resize(len as usize, 0);
        reader.read_exact(&mut body)?;
        if crc32fast::hash(&body) != crc {
            break;
        }
        at += HEADER + len;
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bodies(n: usize, size: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| format!("{i:0>size$}").into_bytes())
            .collect()
    }

    fn live(places: &[Place]) -> HashMap<u32, u64> {
        let mut live = HashMap::new();
        for p in places {
            *live.entry(p.segment).or_default() += 1;
        }
        live
    }

    #[test]
    fn bodies_read_back_from_where_they_were_put() {
        let dir = tempfile::tempdir().unwrap();
        let segments = Segments::open(&dir.path().join("receipts"), true).unwrap();
        assert_eq!(
            segments.recover(None, HashMap::new()).unwrap(),
            End {
                segment: 1,
                offset: 0
            }
        );
        let written = bodies(3, 100);
        let places = segments.append(&written).unwrap();
        for (place, body) in places.iter().zip(&written) {
            assert_eq!(
                segments.read(place).unwrap().as_deref(),
                Some(body.as_slice())
            );
            assert_eq!(Place::decode(&place.encode()), Some(*place));
        }
        assert_eq!(places[1].end(), u64::from(places[2].offset));
        assert_eq!(places[2].end(), 3 * 108);
        assert_eq!(
            segments.end(),
            End {
                segment: 1,
                offset: 3 * 108
            }
        );
        assert_eq!(End::decode(&segments.end().encode()), Some(segments.end()));
    }

    #[test]
    fn a_full_file_is_closed_and_the_next_one_started() {
        let dir = tempfile::tempdir().unwrap();
        let segments = Segments::open(dir.path(), true).unwrap();
        segments.recover(None, HashMap::new()).unwrap();
        segments.set_segment_bytes(1_000);
        let written = bodies(25, 92);
        let places = segments.append(&written).unwrap();
        // Ten records of 100 bytes fill a file, to the byte.
        assert_eq!(places.iter().map(|p| p.segment).max(), Some(3));
        assert_eq!(segments.files()[0], (1, 1_000));
        assert!(segments.files().iter().all(|(_, len)| *len <= 1_000));
        for (place, body) in places.iter().zip(&written) {
            assert_eq!(segments.read(place).unwrap().unwrap(), *body);
        }
    }

    #[test]
    fn more_files_than_read_handles_all_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let segments = Segments::open(dir.path(), false).unwrap();
        segments.recover(None, HashMap::new()).unwrap();
        segments.set_segment_bytes(100);
        let written = bodies(3 * READERS, 92);
        let places = segments.append(&written).unwrap();
        assert_eq!(segments.files().len(), 3 * READERS);
        for _ in 0..2 {
            for (place, body) in places.iter().zip(&written).rev() {
                assert_eq!(segments.read(place).unwrap().as_ref(), Some(body));
            }
        }
        assert!(segments.lock().readers.len() <= READERS);
        // Reopened, every file is found again without being held open.
        let end = segments.end();
        drop(segments);
        let segments = Segments::open(dir.path(), false).unwrap();
        segments.recover(Some(end), live(&places)).unwrap();
        assert_eq!(
            segments.read(&places[0]).unwrap().as_ref(),
            Some(&written[0])
        );
        // A file removed behind the store's back reads as gone, not as an error.
        std::fs::remove_file(dir.path().join(file_name(places[5].segment))).unwrap();
        assert_eq!(segments.read(&places[5]).unwrap(), None);
    }

    #[test]
    fn recovery_cuts_off_what_the_stored_state_never_pointed_at() {
        let dir = tempfile::tempdir().unwrap();
        let segments = Segments::open(dir.path(), true).unwrap();
        segments.recover(None, HashMap::new()).unwrap();
        let kept = segments.append(&bodies(2, 50)).unwrap();
        let end = segments.end();
        // A batch sled lost: its bodies were written, its end never recorded.
        segments.append(&bodies(2, 50)).unwrap();
        drop(segments);

        let segments = Segments::open(dir.path(), true).unwrap();
        assert_eq!(segments.recover(Some(end), live(&kept)).unwrap(), end);
        assert_eq!(segments.files(), vec![(1, end.offset)]);
        // The next append goes where the lost batch's went.
        let again = segments.append(&bodies(1, 50)).unwrap();
        assert_eq!(u64::from(again[0].offset), end.offset);
    }

    #[test]
    fn recovery_keeps_the_valid_records_of_a_torn_file_and_says_where_they_end() {
        let dir = tempfile::tempdir().unwrap();
        let segments = Segments::open(dir.path(), true).unwrap();
        segments.recover(None, HashMap::new()).unwrap();
        let places = segments.append(&bodies(4, 50)).unwrap();
        let end = segments.end();
        drop(segments);
        // A power loss kept the length but not the third record's bytes.
        let path = dir.path().join(file_name(1));
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&[0; 20], u64::from(places[2].offset) + 10)
            .unwrap();

        let segments = Segments::open(dir.path(), true).unwrap();
        let recovered = segments.recover(Some(end), live(&places)).unwrap();
        assert_eq!(u64::from(places[2].offset), recovered.offset);
        assert!(segments.read(&places[1]).unwrap().is_some());
        assert!(
            segments.read(&places[3]).is_err(),
            "a place past the end reads as an error"
        );

        // Shorter than the recorded end (the tail never reached the disk): the same.
        drop(segments);
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(u64::from(places[1].offset) + 30).unwrap();
        let segments = Segments::open(dir.path(), true).unwrap();
        let recovered = segments.recover(Some(end), live(&places)).unwrap();
        assert_eq!(u64::from(places[1].offset), recovered.offset);
    }

    #[test]
    fn a_file_nothing_points_into_is_removed_after_the_next_sync_and_never_before() {
        let dir = tempfile::tempdir().unwrap();
        let segments = Segments::open(dir.path(), true).unwrap();
        segments.recover(None, HashMap::new()).unwrap();
        segments.set_segment_bytes(500);
        let places = segments.append(&bodies(12, 92)).unwrap();
        let first: Vec<Place> = places.iter().filter(|p| p.segment == 1).copied().collect();
        assert_eq!(first.len(), 5);
        segments.release(&first[..4]);
        assert_eq!(segments.sync().unwrap().0, Vec::<u32>::new());
        segments.release(&first[4..]);
        // Released, but the sync that makes the release durable has not run.
        assert!(segments.files().iter().any(|(n, _)| *n == 1));
        assert!(segments.read(&first[0]).unwrap().is_some());
        let freed = segments.sync().unwrap();
        segments.remove(freed).unwrap();
        assert!(!segments.files().iter().any(|(n, _)| *n == 1));
        assert!(!dir.path().join(file_name(1)).exists());
        assert_eq!(segments.read(&first[0]).unwrap(), None);
        assert!(segments.read(&places[11]).unwrap().is_some());

        // A file someone else removed first is no error.
        let second: Vec<Place> = places.iter().filter(|p| p.segment == 2).copied().collect();
        segments.release(&second);
        let freed = segments.sync().unwrap();
        std::fs::remove_file(dir.path().join(file_name(2))).unwrap();
        segments.remove(freed).unwrap();
        assert!(!segments.files().iter().any(|(n, _)| *n == 2));

        // The active file is never removed, even with nothing in it.
        let last: Vec<Place> = places.iter().filter(|p| p.segment == 3).copied().collect();
        segments.release(&last);
        let freed = segments.sync().unwrap();
        segments.remove(freed).unwrap();
        assert!(segments.files().iter().any(|(n, _)| *n == 3));
        segments.append(&bodies(1, 10)).unwrap();
    }

    #[test]
    fn recovery_removes_files_past_the_end_and_files_nothing_points_into() {
        let dir = tempfile::tempdir().unwrap();
        let segments = Segments::open(dir.path(), true).unwrap();
        segments.recover(None, HashMap::new()).unwrap();
        segments.set_segment_bytes(500);
        let places = segments.append(&bodies(12, 92)).unwrap();
        let kept: Vec<Place> = places.iter().filter(|p| p.segment == 2).copied().collect();
        let end = End {
            segment: 2,
            offset: 500,
        };
        drop(segments);
        let segments = Segments::open(dir.path(), true).unwrap();
        segments.recover(Some(end), live(&kept)).unwrap();
        assert_eq!(segments.files(), vec![(2, 500)]);
        assert!(!dir.path().join(file_name(1)).exists());
        assert!(!dir.path().join(file_name(3)).exists());

        // A store with no end (a new database beside an old folder): nothing is kept.
        drop(segments);
        let segments = Segments::open(dir.path(), true).unwrap();
        segments.recover(None, HashMap::new()).unwrap();
        assert_eq!(segments.files(), vec![(1, 0)]);
    }

    #[test]
    fn recovery_keeps_every_file_a_place_points_into() {
        let dir = tempfile::tempdir().unwrap();
        let segments = Segments::open(dir.path(), true).unwrap();
        segments.recover(None, HashMap::new()).unwrap();
        segments.set_segment_bytes(500);
        let places = segments.append(&bodies(12, 92)).unwrap();
        let end = segments.end();
        drop(segments);
        let segments = Segments::open(dir.path(), true).unwrap();
        assert_eq!(segments.recover(Some(end), live(&places)).unwrap(), end);
        assert_eq!(segments.files().len(), 3);
        for place in &places {
            assert!(segments.read(place).unwrap().is_some());
        }
    }

    #[test]
    fn a_damaged_body_is_an_error_never_other_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let segments = Segments::open(dir.path(), true).unwrap();
        segments.recover(None, HashMap::new()).unwrap();
        let places = segments.append(&bodies(2, 50)).unwrap();
        let file = OpenOptions::new()
            .write(true)
            .open(dir.path().join(file_name(1)))
            .unwrap();
        file.write_all_at(b"x", u64::from(places[1].offset) + 20)
            .unwrap();
        let error = segments.read(&places[1]).unwrap_err();
        assert!(error.to_string().contains("checksum mismatch"), "{error}");
        let wrong = Place {
            len: 49,
            ..places[0]
        };
        assert!(segments.read(&wrong).is_err());
    }

    #[test]
    fn nothing_is_appended_before_recovery() {
        let dir = tempfile::tempdir().unwrap();
        let segments = Segments::open(dir.path(), true).unwrap();
        assert!(segments.append(&bodies(1, 10)).is_err());
    }
}
