//! The check a node runs after restarting on Raft state, before it votes, takes entries or
//! stands for election: it asks every member what it saw this node promise, and compares
//! with what its own store holds (the argument is in [`crate::raft::standing`]).

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::ranking::hello_members;
use crate::app::App;
use crate::raft::calls::Hello;
use crate::raft::standing::{behind_reason, Progress, Standing};
use crate::raft::NodeId;

/// How long one member may take to answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(1);
/// Between rounds of asking the members that have not answered.
const ROUND_EVERY: Duration = Duration::from_millis(200);

/// How long a node waits for every member before a majority of the voters is enough: long
/// enough for a live peer to answer several times, short enough that a member that is down
/// does not keep the cluster from electing a leader for long.
fn patience(app: &App) -> Duration {
    Duration::from_millis(app.config.raft.election_timeout_max_ms * 4).max(Duration::from_secs(2))
}

/// Decides this node's standing after a restart on a store holding `mine`, then turns
/// elections on when it may take part. `first` are the answers the start already had
/// ([`super::ranking::check_clock`]); the members missing from it are asked in rounds. Ends
/// early when `stop` is set.
pub async fn run(
    app: &App,
    mine: Progress,
    first: Vec<(NodeId, Hello)>,
    mut stop: watch::Receiver<bool>,
) {
    let started = Instant::now();
    let mut answered: BTreeSet<NodeId> = BTreeSet::new();
    let mut answers = first;
    let standing = loop {
        let ours = app.identity.cluster_id();
        for (peer, hello) in answers.drain(..) {
            if hello.cluster_id != ours {
                continue;
            }
            answered.insert(peer);
            if let Some(contradiction) = hello.seen_you.and_then(|seen| mine.contradicted_by(&seen))
            {
                break_behind(app, peer, &contradiction);
                return;
            }
        }
        let membership = app.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let silent: Vec<NodeId> = membership
            .nodes()
            .map(|(id, _)| *id)
            .filter(|id| *id != app.node_id && !answered.contains(id))
            .collect();
        if silent.is_empty() {
            break Standing::Ok;
        }
        let heard = voters
            .iter()
            .filter(|v| **v == app.node_id || answered.contains(v))
            .count();
        if heard * 2 > voters.len() && started.elapsed() >= patience(app) {
            tracing::warn!(
                ?silent,
                "restarted: members {silent:?} did not answer; a majority of the voters did and \
                 saw nothing this node no longer holds, so it takes part again"
            );
            break Standing::Ok;
        }
        tokio::select! {
            _ = tokio::time::sleep(ROUND_EVERY) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        answers = hello_members(app, silent, ASK_TIMEOUT).await;
    };
    tracing::info!(
        asked = answered.len(),
        ms = started.elapsed().as_millis() as u64,
        "restarted: no member saw this node promise more than its store holds; taking part"
    );
    app.standing.send_replace(standing);
    app.raft.runtime_config().elect(true);
}

/// Keeps the node out for good (until an operator re-admits it), saying why.
fn break_behind(app: &App, peer: NodeId, contradiction: &str) {
    let reason = behind_reason(app.node_id, peer, contradiction);
    tracing::error!("{reason}");
    metrics::counter!(crate::metrics::PEER_REFUSALS_TOTAL, "reason" => "state_behind").increment(1);
    app.standing.send_replace(Standing::Behind { reason });
}
