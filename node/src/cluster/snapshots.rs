//! When a node builds a snapshot, and so how long its log grows between two.
//!
//! A snapshot holds the whole state: every row and every receipt kept. Built every fixed
//! number of entries, as openraft's own policy does, its cost grows with the state while
//! the interval does not: a node holding 150,000 receipts wrote a 100 MiB snapshot every
//! 5,000 invocations, 33 of them in 90 seconds, and at a million receipts it would do
//! nothing else. So the interval grows with the state. A node builds a snapshot once both
//! hold:
//! - at least `[raft] snapshot_every` entries were applied since its last snapshot;
//! - its log's files take at least `[raft] snapshot_log_ratio` × the last snapshot's bytes.
//!
//! A snapshot then writes about `1 / ratio` bytes per byte the log took since the last one,
//! whatever the state's size, and the log stays within `ratio` × the snapshot. (A little
//! less: the log's files also hold the entries kept behind the last snapshot for lagging
//! followers, and its open chunk keeps what it holds until it is deleted whole.) While the
//! state is small, that open chunk of up to 8 MiB is already its share, so the floor alone
//! decides, as before.
//!
//! Each node stretches the byte rule by its own random share, up to a quarter, drawn anew
//! after every snapshot: the members of a cluster apply the same entries and would
//! otherwise build their large snapshots at the same index, all at once (a herd that cost a
//! 3-node cluster two elections at a million rows).
//!
//! A snapshot asked for by an operator (`POST /api/cluster/snapshot`) or a backup is built
//! whatever this rule says.

use std::path::Path;
use std::time::{Duration, Instant};

use rand::Rng as _;
use tokio::sync::watch;

use crate::app::App;
use crate::raft::WatchReceiver as _;

/// How often a node looks at its applied index and, past the floor, at its files.
const CHECK_EVERY: Duration = Duration::from_millis(500);

/// How long a node waits for a snapshot it asked for before asking again (a build that
/// failed is retried; one under way ignores the repeat).
const ASK_AGAIN_AFTER: Duration = Duration::from_secs(60);

/// The largest share by which a node stretches the byte rule.
const MOST_SPREAD: f64 = 0.25;

/// When to build a snapshot (`[raft] snapshot_every`, `snapshot_log_ratio`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// Entries applied since the last snapshot, at least.
    pub every: u64,
    /// The log's bytes on disk, at least this many times the last snapshot's (0: the floor
    /// alone decides).
    pub log_ratio: f64,
}

/// What a node sees of its state when it decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Seen {
    /// Index of the last applied entry.
    pub applied: u64,
    /// Index of the last entry in its current snapshot (none yet: `None`).
    pub snapshot: Option<u64>,
    /// Bytes its log's files take.
    pub log_bytes: u64,
    /// Bytes its current snapshot takes.
    pub snapshot_bytes: u64,
}

impl Policy {
    /// Whether the floor is reached: only then are the files worth measuring.
    pub fn floor_reached(&self, applied: u64, snapshot: Option<u64>) -> bool {
        let since = match snapshot {
            Some(at) => applied.saturating_sub(at),
            // Entries start at index 1 (0 is the initial membership).
            None => applied,
        };
        since >= self.every.max(1)
    }

    /// Whether a snapshot is due, with the byte rule stretched by `spread` (0 to
    /// [`MOST_SPREAD`]).
    pub fn due(&self, seen: &Seen, spread: f64) -> bool {
        if !self.floor_reached(seen.applied, seen.snapshot) {
            return false;
        }
        let wanted = self.log_ratio * (1.0 + spread) * seen.snapshot_bytes as f64;
        seen.log_bytes as f64 >= wanted
    }
}

/// Measures what the byte rule needs: the log's files and the newest snapshot's.
fn measure(data: &Path) -> std::io::Result<(u64, u64)> {
    let log = super::space::folder_bytes(&data.join(crate::store::wal::DIR))?;
    let snapshot = crate::store::snapshot::file::newest_bytes(&data.join("snapshots"))?;
    Ok((log, snapshot))
}

/// Builds this node's snapshots as [`Policy`] says, until `stop`.
pub async fn run(app: &App, mut stop: watch::Receiver<bool>) {
    let raft = &app.config.raft;
    let policy = Policy {
        every: raft.snapshot_every,
        log_ratio: raft.snapshot_log_ratio,
    };
    let data = app.config.node.data.clone();
    let metrics = app.raft.metrics();
    let mut spread_for: Option<Option<u64>> = None;
    let mut spread = 0.0;
    let mut asked: Option<(Option<u64>, Instant)> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(CHECK_EVERY) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let (applied, snapshot) = {
            let m = metrics.borrow_watched();
            (
                m.last_applied.as_ref().map_or(0, |l| l.index),
                m.snapshot.as_ref().map(|l| l.index),
            )
        };
        if spread_for != Some(snapshot) {
            spread = rand::rng().random_range(0.0..MOST_SPREAD);
            spread_for = Some(snapshot);
        }
        // One request per snapshot, until it is built (or the request is old).
        if asked.is_some_and(|(at, when)| at == snapshot && when.elapsed() < ASK_AGAIN_AFTER) {
            continue;
        }
        if !policy.floor_reached(applied, snapshot) {
            continue;
        }
        let folder = data.clone();
        let (log_bytes, snapshot_bytes) = match tokio::task::spawn_blocking(move || {
            measure(&folder)
        })
        .await
        {
            Ok(Ok(measured)) => measured,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not measure the log and the snapshot; building a snapshot by the entry count alone");
                (u64::MAX, 0)
            }
            Err(e) => {
                tracing::warn!(error = %e, "the log and snapshot measurement failed");
                continue;
            }
        };
        let seen = Seen {
            applied,
            snapshot,
            log_bytes,
            snapshot_bytes,
        };
        if !policy.due(&seen, spread) {
            continue;
        }
        tracing::debug!(
            applied,
            log_bytes,
            snapshot_bytes,
            "asking for a snapshot: the log has grown past its share of the last one"
        );
        match app.raft.trigger().snapshot().await {
            Ok(()) => asked = Some((snapshot, Instant::now())),
            Err(e) => tracing::warn!(error = %e, "could not ask Raft for a snapshot"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: Policy = Policy {
        every: 100,
        log_ratio: 0.5,
    };

    fn seen(applied: u64, snapshot: Option<u64>, log_bytes: u64, snapshot_bytes: u64) -> Seen {
        Seen {
            applied,
            snapshot,
            log_bytes,
            snapshot_bytes,
        }
    }

    #[test]
    fn a_snapshot_waits_for_the_floor_of_entries() {
        assert!(!POLICY.due(&seen(99, None, 1 << 30, 0), 0.0));
        assert!(POLICY.due(&seen(100, None, 1 << 30, 0), 0.0));
        assert!(!POLICY.due(&seen(1_099, Some(1_000), 1 << 30, 0), 0.0));
        assert!(POLICY.due(&seen(1_100, Some(1_000), 1 << 30, 0), 0.0));
        // An install from a leader can move the snapshot past the applied index for a while.
        assert!(!POLICY.due(&seen(900, Some(1_000), 1 << 30, 0), 0.0));
    }

    #[test]
    fn a_large_snapshot_waits_until_the_log_has_its_share() {
        let mib = 1 << 20;
        assert!(!POLICY.due(&seen(50_000, Some(1_000), 49 * mib, 100 * mib), 0.0));
        assert!(POLICY.due(&seen(50_000, Some(1_000), 50 * mib, 100 * mib), 0.0));
        // The spread stretches the byte rule...
        assert!(!POLICY.due(&seen(50_000, Some(1_000), 50 * mib, 100 * mib), 0.2));
        assert!(POLICY.due(&seen(50_000, Some(1_000), 60 * mib, 100 * mib), 0.2));
        // ...and never the floor.
        assert!(!POLICY.due(&seen(1_050, Some(1_000), 1 << 40, 100 * mib), 0.2));
    }

    #[test]
    fn a_ratio_of_zero_leaves_the_floor_alone() {
        let floor_only = Policy {
            every: 100,
            log_ratio: 0.0,
        };
        assert!(floor_only.due(&seen(1_100, Some(1_000), 0, 1 << 40), MOST_SPREAD));
        assert!(!floor_only.due(&seen(1_099, Some(1_000), 0, 0), 0.0));
    }

    #[test]
    fn the_log_is_measured_by_its_files_and_the_snapshot_by_its_newest() {
        let data = tempfile::tempdir().unwrap();
        let (log, snapshots) = (
            data.path().join(crate::store::wal::DIR),
            data.path().join("snapshots"),
        );
        std::fs::create_dir_all(&log).unwrap();
        std::fs::create_dir_all(&snapshots).unwrap();
        std::fs::write(log.join("r-1.wal"), vec![1u8; 20_000]).unwrap();
        std::fs::write(log.join("r-2.wal"), vec![1u8; 30_000]).unwrap();
        std::fs::write(
            snapshots.join("snap-00000000000000000007-ab.snap"),
            [2u8; 700],
        )
        .unwrap();
        let (log_bytes, snapshot_bytes) = measure(data.path()).unwrap();
        // Blocks on disk: at least the files' lengths, at most a block more each.
        assert!(
            (50_000..50_000 + 2 * 65_536).contains(&log_bytes),
            "{log_bytes}"
        );
        assert_eq!(snapshot_bytes, 700);
    }
}
