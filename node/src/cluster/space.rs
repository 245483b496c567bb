//! Disk space: a quota on the data folder and a reserve of free disk, as etcd's `NOSPACE`
//! alarm.
//!
//! Every node measures its own data folder (the bytes its files take on disk) and the free
//! space of the disk under it every `[storage] check_space_every_ms`. When the folder holds
//! more than `quota_bytes`, or the disk has less than `min_free_bytes` free, the node raises
//! a storage alarm **through Raft** ([`Command::Alarm`]), so every node knows of it; it
//! clears its alarm the same way once it is back under both bounds with a margin (so a
//! folder hovering at its quota does not raise and clear with every write).
//!
//! While any member holds an alarm, every node refuses what would grow the store — row
//! writes, imports and invocations (an invocation writes a receipt) — with 507
//! (`RESOURCE_EXHAUSTED` over gRPC), naming the member and the way out. Everything that
//! reads keeps working (asks, contracts, listings, receipts, confirms), and so does what
//! frees space or keeps the cluster running: deletes, receipt retention, membership
//! changes, snapshots, share revocations, checkpoint signatures and the alarms themselves.
//! The alarm is cluster-wide because the store is: a write one node accepts is appended on
//! every member, the full one too.
//!
//! The reserve is what keeps a node off a full disk: writes stop while there is still room
//! for the alarm's own entry, the snapshots and the log purge that free space. A disk that
//! fills faster than one check (another program writing) can still run out; then sled's
//! writes fail, Raft stops on that node (writes answer 503 `storage_failed`, `/readyz` 503),
//! and nothing acknowledged is lost (an acknowledged write was synced before it was
//! acknowledged): restarted once there is room, the node has all of it
//! (`tests/tests/disk_space.rs`).

use std::path::Path;
use std::time::Duration;

use tokio::sync::watch;

use crate::app::App;
use crate::model::alarm::StorageAlarm;
use crate::model::time::now_ms;
use crate::raft::Command;
use crate::service::ServiceError;

/// What a node measured of its storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Bytes the data folder's files take on disk.
    pub used_bytes: u64,
    /// Bytes free on the disk under it (for an unprivileged process).
    pub free_bytes: u64,
}

/// The bounds a node keeps (`[storage]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// `quota_bytes` (0: none).
    pub quota_bytes: u64,
    /// `min_free_bytes`.
    pub min_free_bytes: u64,
}

/// What the node does with its alarm after a measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Raise one: a bound is crossed and the node holds none.
    Raise,
    /// Clear its own: it is back under both bounds with the margin.
    Clear,
    /// Nothing changes.
    Keep,
}

impl Bounds {
    /// Whether `usage` crosses a bound.
    pub fn crossed(&self, usage: Usage) -> bool {
        (self.quota_bytes > 0 && usage.used_bytes > self.quota_bytes)
            || usage.free_bytes < self.min_free_bytes
    }

    /// Whether `usage` is under both bounds by the margin an alarm is cleared at: the
    /// folder at most 95% of its quota, the disk with a quarter more free than its reserve.
    pub fn clear_of(&self, usage: Usage) -> bool {
        let quota_clear =
            self.quota_bytes == 0 || usage.used_bytes <= self.quota_bytes - self.quota_bytes / 20;
        let free_clear = usage.free_bytes >= self.min_free_bytes + self.min_free_bytes / 4;
        quota_clear && free_clear
    }

    /// What to do after measuring `usage`, given whether the node holds an alarm now.
    pub fn decide(&self, usage: Usage, holding: bool) -> Decision {
        match holding {
            false if self.crossed(usage) => Decision::Raise,
            true if self.clear_of(usage) => Decision::Clear,
            _ => Decision::Keep,
        }
    }

    /// The alarm that `usage` raises on `node`.
    pub fn alarm(&self, node: u64, usage: Usage) -> StorageAlarm {
        StorageAlarm {
            node,
            raised_at_ms: now_ms(),
            used_bytes: usage.used_bytes,
            quota_bytes: self.quota_bytes,
            free_bytes: usage.free_bytes,
            min_free_bytes: self.min_free_bytes,
        }
    }
}

/// Measures `folder`: the blocks its files take (walked, without following links) and the
/// free space of its disk.
pub fn measure(folder: &Path) -> std::io::Result<Usage> {
    Ok(Usage {
        used_bytes: folder_bytes(folder)?,
        free_bytes: fs2::available_space(folder)?,
    })
}

/// Bytes on disk of the files under `folder`. A file that goes while the walk runs (a
/// snapshot replaced, a temporary file renamed) is skipped.
pub(crate) fn folder_bytes(folder: &Path) -> std::io::Result<u64> {
    let mut total = 0u64;
    let mut pending = vec![folder.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir != folder => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let Ok(entry) = entry else { continue };
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                pending.push(entry.path());
            } else {
                total = total.saturating_add(on_disk(&meta));
            }
        }
    }
    Ok(total)
}

#[cfg(unix)]
fn on_disk(meta: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    meta.blocks().saturating_mul(512)
}

#[cfg(not(unix))]
fn on_disk(meta: &std::fs::Metadata) -> u64 {
    meta.len()
}

/// The alarms of current members (an alarm of a node since removed counts no longer).
pub fn alarms(app: &App) -> Result<Vec<StorageAlarm>, ServiceError> {
    let alarms = app.receipts.alarms().map_err(ServiceError::internal)?;
    if alarms.is_empty() {
        return Ok(alarms);
    }
    let membership = app.membership();
    Ok(alarms
        .into_iter()
        .filter(|a| membership.get_node(&a.node).is_some())
        .collect())
}

/// Refuses, with 507, what would grow the store while a member holds a storage alarm.
pub fn refuse_growth(app: &App) -> Result<(), ServiceError> {
    match alarms(app)?.into_iter().next() {
        Some(alarm) => Err(ServiceError::NoSpace(Box::new(alarm))),
        None => Ok(()),
    }
}

/// Measures this node's storage every `[storage] check_space_every_ms`, publishes it as
/// metrics and raises or clears its alarm, until `stop`.
pub async fn run(app: &App, mut stop: watch::Receiver<bool>) {
    let storage = &app.config.storage;
    let every = Duration::from_millis(storage.check_space_every_ms.max(100));
    let bounds = Bounds {
        quota_bytes: storage.quota_bytes,
        min_free_bytes: storage.min_free_bytes,
    };
    let node = app.node_id.to_string();
    metrics::gauge!(crate::metrics::STORAGE_QUOTA_BYTES, "node" => node.clone())
        .set(bounds.quota_bytes as f64);
    loop {
        let folder = app.config.node.data.clone();
        let measured = tokio::task::spawn_blocking(move || measure(&folder)).await;
        match measured {
            Ok(Ok(usage)) => {
                metrics::gauge!(crate::metrics::STORAGE_USED_BYTES, "node" => node.clone())
                    .set(usage.used_bytes as f64);
                metrics::gauge!(crate::metrics::STORAGE_FREE_BYTES, "node" => node.clone())
                    .set(usage.free_bytes as f64);
                if let Err(e) = keep_alarm(app, bounds, usage).await {
                    tracing::warn!(error = %e, "could not change this node's storage alarm; trying again at the next check");
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "could not measure the data folder"),
            Err(e) => tracing::warn!(error = %e, "the data folder measurement failed"),
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Raises or clears this node's alarm as `usage` requires.
async fn keep_alarm(app: &App, bounds: Bounds, usage: Usage) -> Result<(), ServiceError> {
    let holding = app
        .receipts
        .alarms()
        .map_err(ServiceError::internal)?
        .iter()
        .any(|a| a.node == app.node_id);
    let alarm = match bounds.decide(usage, holding) {
        Decision::Keep => return Ok(()),
        Decision::Raise => Some(bounds.alarm(app.node_id, usage)),
        Decision::Clear => None,
    };
    // Only a member writes, and only while it takes part: a node outside the cluster has
    // nothing to refuse for.
    if app.membership().get_node(&app.node_id).is_none() || !app.takes_part() {
        return Ok(());
    }
    match &alarm {
        Some(alarm) => tracing::error!(
            used_bytes = usage.used_bytes,
            free_bytes = usage.free_bytes,
            "{}: raising a storage alarm; the cluster refuses row writes and invocations until it clears",
            alarm.describe()
        ),
        None => tracing::info!(
            used_bytes = usage.used_bytes,
            free_bytes = usage.free_bytes,
            "this node's storage is under its bounds again: clearing its alarm"
        ),
    }
    app.write(Command::Alarm {
        node: app.node_id,
        alarm,
    })
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn bounds() -> Bounds {
        Bounds {
            quota_bytes: 1000 * MIB,
            min_free_bytes: 100 * MIB,
        }
    }

    fn usage(used_mib: u64, free_mib: u64) -> Usage {
        Usage {
            used_bytes: used_mib * MIB,
            free_bytes: free_mib * MIB,
        }
    }

    #[test]
    fn an_alarm_is_raised_past_the_quota_or_under_the_reserve_and_cleared_with_a_margin() {
        let b = bounds();
        assert_eq!(
            b.decide(usage(1000, 500), false),
            Decision::Keep,
            "at the quota"
        );
        assert_eq!(b.decide(usage(1001, 500), false), Decision::Raise);
        assert_eq!(
            b.decide(usage(10, 99), false),
            Decision::Raise,
            "disk nearly full"
        );
        assert_eq!(b.decide(usage(10, 100), false), Decision::Keep);
        // Held: kept until under 95% of the quota and a quarter above the reserve.
        assert_eq!(b.decide(usage(990, 500), true), Decision::Keep);
        assert_eq!(b.decide(usage(950, 500), true), Decision::Clear);
        assert_eq!(b.decide(usage(10, 124), true), Decision::Keep);
        assert_eq!(b.decide(usage(10, 125), true), Decision::Clear);
        // Crossing again while held changes nothing.
        assert_eq!(b.decide(usage(2000, 1), true), Decision::Keep);
    }

    #[test]
    fn a_quota_of_zero_bounds_only_the_free_space() {
        let b = Bounds {
            quota_bytes: 0,
            ..bounds()
        };
        assert_eq!(b.decide(usage(u64::MAX / MIB, 500), false), Decision::Keep);
        assert_eq!(b.decide(usage(u64::MAX / MIB, 500), true), Decision::Clear);
        assert_eq!(b.decide(usage(0, 1), false), Decision::Raise);
    }

    #[test]
    fn the_folder_is_measured_by_what_its_files_take_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let empty = measure(dir.path()).unwrap();
        std::fs::create_dir(dir.path().join("sled")).unwrap();
        std::fs::write(
            dir.path().join("sled").join("db"),
            vec![7u8; 3 * MIB as usize],
        )
        .unwrap();
        std::fs::write(dir.path().join("identity.json"), b"{}").unwrap();
        let full = measure(dir.path()).unwrap();
        let grown = full.used_bytes - empty.used_bytes;
        assert!(
            (3 * MIB..3 * MIB + 64 * 1024).contains(&grown),
            "a 3 MiB file and a small one in a subfolder: {grown} bytes"
        );
        assert!(full.free_bytes > 0);
        assert!(measure(&dir.path().join("missing")).is_err());
    }
}
