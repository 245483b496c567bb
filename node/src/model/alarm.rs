//! A storage alarm: a member's data folder outgrew its quota, or its disk is nearly full.
//! Raised and cleared through Raft by the member it concerns ([`crate::cluster::space`]),
//! so every node refuses what would grow the store while any member holds one, as etcd's
//! `NOSPACE` alarm does: reads, asks, confirms, deletes and retention keep working.

use serde::{Deserialize, Serialize};

/// Why a member raised its alarm, and what it measured then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageAlarm {
    /// The member whose storage is short.
    pub node: u64,
    /// When it raised the alarm, ms since the epoch (its own clock).
    pub raised_at_ms: u64,
    /// Bytes its data folder held.
    pub used_bytes: u64,
    /// Its `[storage] quota_bytes` (0: no quota).
    pub quota_bytes: u64,
    /// Bytes free on the disk that holds the folder.
    pub free_bytes: u64,
    /// Its `[storage] min_free_bytes`.
    pub min_free_bytes: u64,
}

impl StorageAlarm {
    /// Whether the folder is over its quota (the other reason is a nearly full disk).
    pub fn over_quota(&self) -> bool {
        self.quota_bytes > 0 && self.used_bytes > self.quota_bytes
    }

    /// What is short, for people: "node 2's data folder holds 9.1 GiB of its 8.0 GiB quota".
    pub fn describe(&self) -> String {
        if self.over_quota() {
            format!(
                "node {}'s data folder holds {} of its {} quota",
                self.node,
                gib(self.used_bytes),
                gib(self.quota_bytes)
            )
        } else {
            format!(
                "node {}'s disk has {} free, under its {} reserve",
                self.node,
                gib(self.free_bytes),
                gib(self.min_free_bytes)
            )
        }
    }
}

/// Bytes as GiB with one decimal, or MiB below one GiB.
fn gib(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let mib = bytes as f64 / MIB;
    if mib >= 1024.0 {
        format!("{:.1} GiB", mib / 1024.0)
    } else {
        format!("{mib:.1} MiB")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alarm(used: u64, quota: u64, free: u64) -> StorageAlarm {
        StorageAlarm {
            node: 2,
            raised_at_ms: 0,
            used_bytes: used,
            quota_bytes: quota,
            free_bytes: free,
            min_free_bytes: 256 << 20,
        }
    }

    #[test]
    fn an_alarm_names_the_node_and_what_is_short() {
        assert_eq!(
            alarm(9 << 30, 8 << 30, 100 << 30).describe(),
            "node 2's data folder holds 9.0 GiB of its 8.0 GiB quota"
        );
        assert_eq!(
            alarm(1 << 30, 8 << 30, 100 << 20).describe(),
            "node 2's disk has 100.0 MiB free, under its 256.0 MiB reserve"
        );
        assert!(!alarm(9 << 30, 0, 100 << 20).over_quota(), "0 is no quota");
        assert!(
            !alarm(8 << 30, 8 << 30, 100 << 20).over_quota(),
            "at the quota is not past it"
        );
        assert!(alarm((8 << 30) + 1, 8 << 30, 100 << 20).over_quota());
    }
}
