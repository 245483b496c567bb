//! The receipt log's own time, read from the state alone, for the retention cut-off
//! ([`crate::dispatch::retention`] has the argument): for each voter, the newest start of a
//! receipt it served, among the newest [`SCAN`] receipts of the state as the entry being
//! applied sees it (stored, minus those dropped earlier in the batch, plus those staged).
//! The same entries make the same state on every node, however they are batched, so every
//! node computes the same time.

use std::collections::{BTreeMap, BTreeSet};

use super::{
    read_err, receipt_bytes, receipt_key, ReceiptReader, Segments, Stage, StateMachine,
    RECEIPT_BY_TIME,
};
use crate::model::time::parse_ms;
use crate::raft::{NodeId, StorageError};

/// Receipts looked at, newest first, at most: a voter with none among them counts as having
/// none (its time is 0), which only makes the cut-off older.
const SCAN: usize = 10_000;

/// Just the field this needs of a stored receipt.
#[derive(serde::Deserialize)]
struct ServedBy {
    served_by: NodeId,
}

impl StateMachine {
    /// The voters of the membership in force at the entry being applied.
    fn voters(&self, stage: &Stage) -> BTreeSet<NodeId> {
        stage
            .membership
            .as_ref()
            .unwrap_or(&self.membership)
            .membership()
            .voter_ids()
            .collect()
    }

    /// The receipt log's time at the entry being applied (see the module documentation and
    /// [`crate::dispatch::retention::log_time`]).
    pub(super) fn receipt_log_time(&self, stage: &Stage) -> Result<u64, StorageError> {
        log_time(
            &self.tree,
            self.storage.segments(),
            &self.voters(stage),
            Some(stage),
        )
    }
}

impl ReceiptReader {
    /// The receipt log's time as applied here, for `voters`: what a prune proposed now will
    /// see at least when it is applied (the time only grows with the log).
    pub fn log_time(&self, voters: &BTreeSet<NodeId>) -> Result<u64, StorageError> {
        log_time(&self.tree, &self.segments, voters, None)
    }
}

/// The receipt log's time in `tree` as changed by `stage` (if any), for `voters`.
fn log_time(
    tree: &sled::Tree,
    segments: &Segments,
    voters: &BTreeSet<NodeId>,
    stage: Option<&Stage>,
) -> Result<u64, StorageError> {
    let mut newest: BTreeMap<NodeId, u64> = BTreeMap::new();
    let note = |newest: &mut BTreeMap<NodeId, u64>, node: NodeId, started: u64| {
        if voters.contains(&node) {
            let at = newest.entry(node).or_default();
            *at = (*at).max(started);
        }
    };
    // Staged receipts, newest first, merged with the stored ones as they are read.
    let mut staged: Vec<(u64, &str, NodeId)> = stage
        .iter()
        .flat_map(|stage| stage.receipts.values())
        .map(|r| {
            (
                parse_ms(&r.started_at).unwrap_or(0),
                r.id.as_str(),
                r.served_by,
            )
        })
        .collect();
    staged.sort_unstable_by(|a, b| b.cmp(a));
    let mut staged = staged.into_iter().peekable();
    let mut seen = 0;
    for item in tree.scan_prefix(RECEIPT_BY_TIME).rev() {
        if seen >= SCAN || newest.len() == voters.len() {
            break;
        }
        let (key, _) = item.map_err(|e| read_err(&e))?;
        let Some((started, id)) = key[RECEIPT_BY_TIME.len()..].split_at_checked(8) else {
            continue;
        };
        let started = u64::from_be_bytes(started.try_into().unwrap_or([0; 8]));
        let id = String::from_utf8_lossy(id);
        if stage.is_some_and(|stage| stage.dropped.contains(id.as_ref())) {
            continue;
        }
        // Staged receipts that sort after this stored one come first.
        while let Some(&(at, staged_id, node)) = staged.peek() {
            if (at, staged_id) <= (started, id.as_ref()) || seen >= SCAN {
                break;
            }
            note(&mut newest, node, at);
            seen += 1;
            staged.next();
        }
        if seen >= SCAN {
            break;
        }
        let Some(value) = tree.get(receipt_key(&id)).map_err(|e| read_err(&e))? else {
            continue;
        };
        let Some(bytes) = receipt_bytes(segments, &value).map_err(|e| read_err(&e))? else {
            continue;
        };
        if let Ok(receipt) = serde_json::from_slice::<ServedBy>(&bytes) {
            note(&mut newest, receipt.served_by, started);
        }
        seen += 1;
    }
    for (at, _, node) in staged.take(SCAN.saturating_sub(seen)) {
        note(&mut newest, node, at);
    }
    Ok(crate::model::retention::log_time(voters, &newest))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::{Durable, SharedCatalogue, StateMachine};
    use crate::config::SyncMode;
    use crate::model::receipt::Receipt;
    use crate::model::time::format_ms;
    use crate::raft::{
        log_id, Command, CommandResult, Entry, EntryPayload, NodeId, NodeInfo, Request,
    };

    const MINUTE: u64 = 60_000;
    const DAY: u64 = 24 * 60 * MINUTE;
    /// The real time of the test's story.
    const NOW: u64 = 10 * DAY;

    fn entry(index: u64, payload: EntryPayload) -> Entry {
        Entry {
            log_id: log_id(1, 1, index),
            payload,
        }
    }

    fn voters_1_to_3() -> EntryPayload {
        let nodes: BTreeMap<NodeId, NodeInfo> =
            (1..=3).map(|id| (id, NodeInfo::default())).collect();
        let voters = nodes.keys().copied().collect();
        EntryPayload::Membership(openraft::Membership::new(vec![voters], nodes).unwrap())
    }

    fn receipt(n: u64, served_by: NodeId, started_ms: u64) -> EntryPayload {
        EntryPayload::Normal(Request::new(Command::AppendReceipt {
            receipt: Box::new(Receipt {
                started_at: format_ms(started_ms),
                served_by,
                ..Receipt::sample(&format!("inv_{n:010}"))
            }),
        }))
    }

    /// The story: voters 2 and 3 served receipts over the last hour by true clocks; voter 1,
    /// the leader, had its clock jump a day ahead, served one receipt and proposes a prune
    /// with a ten-minute age rule by its clock.
    fn story() -> Vec<Entry> {
        let mut payloads = vec![voters_1_to_3()];
        for (n, minutes_ago) in [60, 30, 20, 5, 1].into_iter().enumerate() {
            let served_by = 2 + (n as u64 % 2);
            payloads.push(receipt(n as u64, served_by, NOW - minutes_ago * MINUTE));
        }
        payloads.push(receipt(99, 1, NOW + DAY));
        payloads.push(EntryPayload::Normal(Request::new(Command::PruneReceipts {
            before_ms: NOW + DAY - 10 * MINUTE,
            max_age_ms: 10 * MINUTE,
            keep_per_key: 0,
            limit: 100,
        })));
        payloads
            .into_iter()
            .zip(1..)
            .map(|(payload, index)| entry(index, payload))
            .collect()
    }

    fn machine(dir: &std::path::Path) -> StateMachine {
        let storage = Durable::open(&dir.join("sled"), SyncMode::Fdatasync).unwrap();
        StateMachine::open(&storage, &dir.join("snapshots"), SharedCatalogue::default()).unwrap()
    }

    fn kept(sm: &mut StateMachine) -> Vec<String> {
        let reader = sm.receipts();
        (0..5)
            .chain([99])
            .map(|n| format!("inv_{n:010}"))
            .filter(|id| reader.get(id).unwrap().is_some())
            .collect()
    }

    #[tokio::test]
    async fn a_leader_clock_a_day_ahead_drops_no_receipt_younger_than_the_age_by_the_logs_time() {
        let dir = tempfile::tempdir().unwrap();
        let mut sm = machine(&dir.path().join("batched"));
        // The receipts in one batch, the prune in the next (a prune does not consider
        // receipts staged in its own batch).
        let mut entries = story();
        let prune = entries.split_off(entries.len() - 1);
        sm.apply_entries(entries).await.unwrap();
        let results = sm.apply_entries(prune).await.unwrap();
        assert_eq!(
            results.last(),
            Some(&CommandResult::Pruned {
                dropped: 3,
                more: false
            }),
            "the receipts of 60, 30 and 20 minutes ago go: retention still works"
        );
        let kept_batched = kept(&mut sm);
        assert_eq!(
            kept_batched,
            ["inv_0000000003", "inv_0000000004", "inv_0000000099"],
            "those 5 and 1 minutes old by the log's time (and the fast one) stay"
        );
        // Entry by entry, as a follower may apply them: the same receipts go.
        let mut other = machine(&dir.path().join("one-by-one"));
        for entry in story() {
            other.apply_entries([entry]).await.unwrap();
        }
        assert_eq!(kept(&mut other), kept_batched);
    }
}
