//! The two pure rules of receipt retention that every node applies alike: the receipt log's
//! time and a prune's cut-off (`dispatch::retention` has the argument for them). Voters are
//! named by their node ids.

use std::collections::{BTreeMap, BTreeSet};

/// The receipt log's time: given each voter's newest receipt start (`newest`; a voter
/// without one counts as 0), the latest time a majority of `voters` have reached.
pub fn log_time(voters: &BTreeSet<u64>, newest: &BTreeMap<u64, u64>) -> u64 {
    let mut times: Vec<u64> = voters
        .iter()
        .map(|v| newest.get(v).copied().unwrap_or(0))
        .collect();
    // Newest first: the (n/2 + 1)-th newest is reached by n/2 + 1 voters, a majority.
    times.sort_unstable_by(|a, b| b.cmp(a));
    times.get(times.len() / 2).copied().unwrap_or(0)
}

/// The cut-off a prune may use: the proposer's `before_ms`, but no later than the log's
/// time `log_ms` less the age `max_age_ms` (0 when the log is younger than the age: no
/// receipt is old enough).
pub fn cut_off(before_ms: u64, max_age_ms: u64, log_ms: u64) -> u64 {
    before_ms.min(log_ms.saturating_sub(max_age_ms))
}
