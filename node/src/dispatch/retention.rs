//! Receipt retention: on the leader, every `[receipts] prune_every_secs`, propose
//! [`Command::PruneReceipts`] with the configured rules until no receipt falls under them.
//! Every node applies the same entries, so all drop the same receipts.
//!
//! ## Whose clock decides what is deleted
//!
//! Not one node's. A cut-off taken from the leader's wall clock alone let a leader whose
//! clock jumped a day ahead delete, on every node and for good, every receipt younger than
//! a day too many. So the age rule is measured against the **receipt log's own time**
//! ([`log_time`]): for each voter, the newest start of a receipt it served; of those, the
//! latest time that a majority of voters have reached (the lower median). Every receipt's
//! `started_at` is in the log, so apply computes it deterministically, from logged values
//! only, at the point of the entry it applies.
//!
//! A prune carries the age it came from (`max_age_ms`), and apply holds its cut-off to
//! [`cut_off`]: never later than the log's time less the age, whatever the proposer's clock
//! said. What that guarantees: a receipt is dropped by age only if a majority of voters
//! served receipts that started at least `max_age` after it. A minority of clocks, however
//! far ahead, moves nothing: their receipts are above the median. A majority of clocks
//! ahead by `J` (or a single voter's, in a one-voter cluster: there is no other clock)
//! drops receipts up to `J` early, as it would with any clock. When receipts stop coming,
//! the log's time stops too and receipts are kept longer, never shorter: retention errs
//! on the side of keeping. The leader proposes with the same bound (its own applied log
//! time), so apply holds nothing back in normal running, and a node of a version that
//! ignores `max_age_ms` applies the same cut-off.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::sync::watch;

use crate::app::App;
use crate::config::ReceiptsConfig;
use crate::model::time::now_ms;
use crate::raft::{Command, CommandResult, NodeId};

const DAY_MS: u64 = 24 * 3_600 * 1_000;

pub use crate::model::retention::{cut_off, log_time};

/// The age rule of `policy` in milliseconds (0: none).
pub fn max_age_ms(policy: &ReceiptsConfig) -> u64 {
    match policy.max_age_secs {
        0 => policy.max_age_days.saturating_mul(DAY_MS),
        secs => secs.saturating_mul(1_000),
    }
}

/// The prune command of one step of `policy` at `now_ms`, with the receipt log's time at
/// `log_ms`, or `None` when no rule is set.
pub fn prune_command(policy: &ReceiptsConfig, now_ms: u64, log_ms: u64) -> Option<Command> {
    let max_age_ms = max_age_ms(policy);
    if max_age_ms == 0 && policy.keep_per_key == 0 {
        return None;
    }
    let before_ms = match max_age_ms {
        0 => 0,
        // At least 1 ms, so a policy of thousands of years still means "an age rule".
        age => cut_off(now_ms.saturating_sub(age), age, log_ms).max(1),
    };
    Some(Command::PruneReceipts {
        before_ms,
        max_age_ms,
        keep_per_key: policy.keep_per_key,
        limit: policy.prune_batch.max(1),
    })
}

/// Applies the policy once, if this node leads: proposes prune entries until none is left
/// to drop. Returns how many receipts were dropped.
pub async fn run_once(app: &App) -> u64 {
    let mut total = 0;
    loop {
        if app.leader() != Some(app.node_id) {
            return total;
        }
        let voters: BTreeSet<NodeId> = app.membership().voter_ids().collect();
        let log_ms = match app.receipts.log_time(&voters) {
            Ok(at) => at,
            Err(e) => {
                tracing::warn!(error = %e, "receipt retention: cannot read the log's time");
                return total;
            }
        };
        let Some(command) = prune_command(&app.config.receipts, now_ms(), log_ms) else {
            return total;
        };
        match app.write(command).await {
            Ok(written) => match written.result {
                CommandResult::Pruned { dropped, more } => {
                    total += u64::from(dropped);
                    metrics::counter!(crate::metrics::RECEIPTS_PRUNED_TOTAL)
                        .increment(u64::from(dropped));
                    if !more {
                        return total;
                    }
                }
                other => {
                    tracing::warn!(result = ?other, "receipt retention: unexpected result");
                    return total;
                }
            },
            Err(e) => {
                tracing::info!(error = %e, "receipt retention postponed");
                return total;
            }
        }
    }
}

/// Runs the policy every `prune_every_secs` until `stop` turns true.
pub async fn run(app: &App, mut stop: watch::Receiver<bool>) {
    let every = Duration::from_secs(app.config.receipts.prune_every_secs.max(1));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let dropped = run_once(app).await;
        if dropped > 0 {
            tracing::info!(dropped, "receipt retention dropped receipts");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn no_rule_means_no_command_and_the_cut_off_is_the_proposers_within_the_logs_time() {
        assert!(prune_command(&ReceiptsConfig::default(), 10 * DAY_MS, 10 * DAY_MS).is_none());
        let policy = ReceiptsConfig {
            max_age_days: 2,
            keep_per_key: 0,
            ..ReceiptsConfig::default()
        };
        let Some(Command::PruneReceipts {
            before_ms,
            max_age_ms,
            ..
        }) = prune_command(&policy, 10 * DAY_MS, 10 * DAY_MS)
        else {
            panic!("a command")
        };
        assert_eq!((before_ms, max_age_ms), (8 * DAY_MS, 2 * DAY_MS));
        // The proposer's clock a year ahead of the log: the log's time decides.
        let Some(Command::PruneReceipts { before_ms, .. }) =
            prune_command(&policy, 375 * DAY_MS, 10 * DAY_MS)
        else {
            panic!("a command")
        };
        assert_eq!(before_ms, 8 * DAY_MS);
        let ancient = ReceiptsConfig {
            max_age_days: u64::MAX,
            ..policy.clone()
        };
        assert!(matches!(
            prune_command(&ancient, 5, 5),
            Some(Command::PruneReceipts { before_ms: 1, .. })
        ));
        let seconds = ReceiptsConfig {
            max_age_secs: 90,
            ..policy
        };
        assert_eq!(super::max_age_ms(&seconds), 90_000, "seconds win over days");
    }

    #[test]
    fn the_logs_time_is_what_a_majority_of_voters_reached() {
        let voters: BTreeSet<NodeId> = [1, 2, 3].into();
        let newest = |pairs: &[(NodeId, u64)]| pairs.iter().copied().collect::<BTreeMap<_, _>>();
        // One clock a day ahead moves nothing.
        assert_eq!(
            log_time(&voters, &newest(&[(1, 100 + DAY_MS), (2, 100), (3, 90)])),
            100
        );
        // A voter that served nothing counts as 0; a non-voter does not count.
        assert_eq!(log_time(&voters, &newest(&[(1, 500), (4, 900)])), 0);
        assert_eq!(log_time(&voters, &newest(&[(1, 500), (2, 400)])), 400);
        // Five voters: the third newest.
        let five: BTreeSet<NodeId> = [1, 2, 3, 4, 5].into();
        let times = newest(&[(1, 9), (2, 8), (3, 7), (4, 6), (5, 5)]);
        assert_eq!(log_time(&five, &times), 7);
        // One voter: its own clock, there is no other.
        assert_eq!(log_time(&[1].into(), &newest(&[(1, 42)])), 42);
        assert_eq!(log_time(&BTreeSet::new(), &BTreeMap::new()), 0);
        assert_eq!(cut_off(1_000, 100, 500), 400);
        assert_eq!(cut_off(300, 100, 500), 300);
        assert_eq!(cut_off(300, 600, 500), 0, "nothing is old enough yet");
    }
}
