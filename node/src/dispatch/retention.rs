//! Receipt retention: on the leader, every `[receipts] prune_every_secs`, propose
//! [`Command::PruneReceipts`] with the configured rules until no receipt falls under them.
//! Every node applies the same entries, so all drop the same receipts; the cut-off time is
//! decided here, by the proposer, never by apply.

use std::time::Duration;

use tokio::sync::watch;

use crate::app::App;
use crate::config::ReceiptsConfig;
use crate::model::time::now_ms;
use crate::raft::{Command, CommandResult};

const DAY_MS: u64 = 24 * 3_600 * 1_000;

/// The prune command of one step of `policy` at `now_ms`, or `None` when no rule is set.
pub fn prune_command(policy: &ReceiptsConfig, now_ms: u64) -> Option<Command> {
    if policy.max_age_days == 0 && policy.keep_per_key == 0 {
        return None;
    }
    let before_ms = match policy.max_age_days {
        0 => 0,
        // At least 1 ms, so a policy of thousands of years still means "an age rule".
        days => now_ms.saturating_sub(days.saturating_mul(DAY_MS)).max(1),
    };
    Some(Command::PruneReceipts {
        before_ms,
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
        let Some(command) = prune_command(&app.config.receipts, now_ms()) else {
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

    #[test]
    fn no_rule_means_no_command_and_the_cut_off_is_the_proposers() {
        assert!(prune_command(&ReceiptsConfig::default(), 10 * DAY_MS).is_none());
        let policy = ReceiptsConfig {
            max_age_days: 2,
            keep_per_key: 0,
            ..ReceiptsConfig::default()
        };
        let Some(Command::PruneReceipts { before_ms, .. }) = prune_command(&policy, 10 * DAY_MS)
        else {
            panic!("a command")
        };
        assert_eq!(before_ms, 8 * DAY_MS);
        let ancient = ReceiptsConfig {
            max_age_days: u64::MAX,
            ..policy
        };
        assert!(matches!(
            prune_command(&ancient, 5),
            Some(Command::PruneReceipts { before_ms: 1, .. })
        ));
    }
}
