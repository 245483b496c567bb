//! The Raft log's entries on a write-ahead log made for them (`raft-log`): appended records
//! in chunk files of a few megabytes, written and `fdatasync`ed by one worker thread that
//! batches whatever was handed to it meanwhile (group commit), and whole chunk files deleted
//! once every entry in them is purged. sled keeps the rest of the node's state
//! ([`super::log`] says what is where, and why).
//!
//! # What is durable when
//!
//! Appending only encodes the records into a buffer (readable at once); [`Wal::flush`] hands
//! the buffer to the worker, which writes it, runs one `fdatasync` for everything it
//! collected, and then calls each callback of the batch in the order they were handed over.
//! So a callback that reports success means: every record appended before its `flush` is on
//! stable storage. A failed write or sync ends the worker: that callback and every later
//! one report an error, and the node stops (openraft treats it as a storage failure).
//!
//! After a crash the last chunk may end in a torn record: `raft-log` cuts the file back to
//! its last whole record when the rest is short or zeros (never reported as done, since its
//! sync had not returned). Records are framed and checksummed by `raft-log`; the payload
//! here is the entry's JSON with a length prefix, so a short read is an `UnexpectedEof`,
//! which is what tells a torn tail from damage.

use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::storage::IOFlushed;

use raft_log::codeq::{Decode, Encode};
use raft_log::RaftLog;

use crate::raft::{CommittedLeaderId, LogId, TypeConfig};

/// The folder, inside the data folder, that holds the log's chunk files.
pub const DIR: &str = "raft-log";

/// A chunk is closed, and can be deleted once purged, at this size: it bounds what a
/// purge leaves on disk (the open chunk) and what the log holds in memory (the open
/// chunk's entries stay cached until it closes).
const CHUNK_BYTES: usize = 8 << 20;
/// Entries of closed chunks kept in memory for replication to slow followers.
const CACHE_BYTES: usize = 16 << 20;
const CACHE_ITEMS: usize = 20_000;
/// Read buffer when the chunks are replayed at start.
const READ_BUFFER_BYTES: usize = 1 << 20;

/// The log's record types.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WalTypes;

impl raft_log::Types for WalTypes {
    type LogId = WalLogId;
    type LogPayload = Payload;
    // The vote lives in sled, beside the identity it binds (see `super::log`).
    type Vote = ();
    type Callback = Flushed;
    /// The id that binds this log to the sled database it belongs to.
    type UserData = String;

    fn log_index(log_id: &WalLogId) -> u64 {
        log_id.0.index
    }

    fn payload_size(payload: &Payload) -> u64 {
        payload.0.len() as u64
    }
}

/// openraft's log id in the log's encoding: term, leader node and index, big-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct WalLogId(pub LogId);

impl Encode for WalLogId {
    fn encode<W: Write>(&self, mut w: W) -> Result<usize, io::Error> {
        w.write_all(&self.0.leader_id.term.to_be_bytes())?;
        w.write_all(&self.0.leader_id.node_id.to_be_bytes())?;
        w.write_all(&self.0.index.to_be_bytes())?;
        Ok(24)
    }
}

impl Decode for WalLogId {
    fn decode<R: Read>(mut r: R) -> Result<Self, io::Error> {
        let mut next = || {
            let mut bytes = [0u8; 8];
            r.read_exact(&mut bytes).map(|()| u64::from_be_bytes(bytes))
        };
        let (term, node_id, index) = (next()?, next()?, next()?);
        Ok(Self(LogId::new(CommittedLeaderId { term, node_id }, index)))
    }
}

/// One entry, as the JSON the sled log held (the same bytes an older build wrote).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload(pub Vec<u8>);

impl Encode for Payload {
    fn encode<W: Write>(&self, w: W) -> Result<usize, io::Error> {
        self.0.encode(w)
    }
}

impl Decode for Payload {
    fn decode<R: Read>(r: R) -> Result<Self, io::Error> {
        Vec::<u8>::decode(r).map(Self)
    }
}

/// What to do once a flush is durable (or failed), called on the log's worker thread: it
/// must not block.
pub enum Flushed {
    /// Tell openraft that the appended entries, up to index `upto`, are on disk, and record
    /// that in `durable`.
    Append {
        flushed: IOFlushed<TypeConfig>,
        upto: u64,
        durable: Arc<AtomicU64>,
    },
    /// Wake a task that awaits the flush.
    Wake(tokio::sync::oneshot::Sender<io::Result<()>>),
    /// Wake a thread that blocks on the flush (start-up, before any task runs on the log).
    Block(std::sync::mpsc::SyncSender<io::Result<()>>),
}

impl raft_log::Callback for Flushed {
    fn send(self, result: Result<(), io::Error>) {
        // A waiter that gave up (its task was cancelled) has nothing to be told.
        match self {
            Self::Append {
                flushed,
                upto,
                durable,
            } => {
                if result.is_ok() {
                    durable.fetch_max(upto, Ordering::SeqCst);
                }
                flushed.io_completed(result);
            }
            Self::Wake(sender) => {
                let _ = sender.send(result);
            }
            Self::Block(sender) => {
                let _ = std::sync::mpsc::SyncSender::send(&sender, result);
            }
        }
    }
}

/// The open log.
pub type Log = RaftLog<WalTypes>;

/// The log's configuration for the folder `dir`.
fn config(dir: &Path) -> raft_log::Config {
    let mut config = raft_log::Config::new(dir.display());
    config.log_cache_capacity = Some(CACHE_BYTES);
    config.log_cache_max_items = Some(CACHE_ITEMS);
    config.wal.chunk_max_size = Some(CHUNK_BYTES);
    config.wal.read_buffer_size = Some(READ_BUFFER_BYTES);
    // openraft 0.9 awaits each append's flush before it hands over the next: waiting for
    // more to batch would only add latency. Concurrent flushes are batched all the same.
    config.wal.flush_batch_wait = Some(Duration::ZERO);
    config
}

/// Opens the log in `dir` (which must exist). Blocking: it replays every chunk.
///
/// The log is locked while open. A node restarted within one process (tests, and a node
/// that leaves and rejoins) may find the lock still held for a moment by tasks of its
/// previous run that are ending; it waits for them, a few seconds at most.
pub fn open(dir: &Path) -> io::Result<Log> {
    let config = Arc::new(config(dir));
    let locked = |e: &io::Error| e.kind() == io::ErrorKind::WouldBlock;
    super::wait_for_lock(|| RaftLog::open(config.clone()), locked).map_err(|e| {
        if locked(&e) {
            io::Error::new(
                e.kind(),
                format!("{e}: another process (or node) has this data folder's log open"),
            )
        } else {
            e
        }
    })
}

/// Creates the folder `dir` and in it an empty log bound to `binding`, durably (the
/// folder's entry in its parent included). Blocking.
pub fn create(dir: &Path, binding: &str, sync: bool) -> io::Result<Log> {
    use raft_log::api::raft_log_writer::RaftLogWriter as _;
    std::fs::create_dir_all(dir)?;
    if let Some(parent) = dir.parent() {
        sync_dir(parent)?;
    }
    let mut log = open(dir)?;
    log.save_user_data(Some(binding.to_owned()))?;
    blocking_flush(&mut log, sync)?;
    Ok(log)
}

/// Flushes everything appended so far and waits until it is written (and with `sync`,
/// durable). Blocking: for start-up, never on a task.
pub fn blocking_flush(log: &mut Log, sync: bool) -> io::Result<()> {
    use raft_log::api::raft_log_writer::RaftLogWriter as _;
    let (sender, receiver) = std::sync::mpsc::sync_channel(1);
    log.flush(sync, Some(Flushed::Block(sender)))?;
    receiver
        .recv()
        .map_err(|_| io::Error::other("the log's writer stopped"))?
}

/// `fsync` of a folder: the entries made or removed in it are durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_still_open_for_a_moment_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let first = create(&dir.path().join(DIR), "w1", false).unwrap();
        let closing = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(first);
        });
        let second = open(&dir.path().join(DIR)).unwrap();
        assert_eq!(second.log_state().user_data.as_deref(), Some("w1"));
        closing.join().unwrap();
    }

    #[test]
    fn a_log_id_reads_back_and_a_short_one_is_a_torn_tail() {
        let id = WalLogId(LogId::new(
            CommittedLeaderId {
                term: 7,
                node_id: 3,
            },
            1_000_001,
        ));
        let mut bytes = Vec::new();
        assert_eq!(id.encode(&mut bytes).unwrap(), 24);
        assert_eq!(WalLogId::decode(&bytes[..]).unwrap(), id);
        let short = WalLogId::decode(&bytes[..23]).unwrap_err();
        assert_eq!(short.kind(), io::ErrorKind::UnexpectedEof);
        let payload = Payload(br#"{"log_id":1}"#.to_vec());
        let mut bytes = Vec::new();
        payload.encode(&mut bytes).unwrap();
        assert_eq!(Payload::decode(&bytes[..]).unwrap(), payload);
        let short = Payload::decode(&bytes[..bytes.len() - 1]).unwrap_err();
        assert_eq!(short.kind(), io::ErrorKind::UnexpectedEof);
    }
}
