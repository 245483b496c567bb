//! Leadership handover: a leader that is about to stop hands leadership to a voter whose log
//! it has brought level with its own, so that the cluster takes writes again within a round
//! trip instead of after an election timeout (Raft's leadership transfer, thesis §3.10).
//!
//! 1. the leader holds new proposals (they wait in [`App::propose`], then go to the new
//!    leader) and lets those already under way reach raft;
//! 2. it picks the voter with the highest matched index and waits until that index reaches
//!    its own last log index;
//! 3. it starts openraft's leadership transfer to that voter (`TransferLeader` to every
//!    voter): each voter stops honouring this leader's lease, and the target stands with a
//!    vote request marked as a transfer, which voters grant despite a lease (openraft 0.10
//!    refuses other vote requests while a leader's lease holds, the leader's own included).
//!    A target of an older build (peer protocol 1) is asked with `TimeoutNow` instead, to
//!    `trigger().elect(false)`, and wins once the leases allow.
//!
//! A handover that cannot finish in its bound (no voter catches up, the vote is refused)
//! changes nothing: the node stops, and the cluster elects a leader the usual way.

use crate::raft::WatchReceiver as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::app::App;
use crate::raft::calls::MembershipError;
use crate::raft::{NodeId, TypeConfig};

/// Why a handover did not happen.
#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    /// No other voter to hand over to (a one-voter cluster).
    #[error("no other voter")]
    NoVoter,
    /// The node asked to take over is not a voter of this cluster.
    #[error("node {target} is not a voter")]
    NotVoter {
        /// The node asked for.
        target: NodeId,
    },
    /// This node does not lead (leadership moved while the call was under way).
    #[error("this node does not lead")]
    NotLeader,
    /// Writes proposed before the handover began did not finish in time.
    #[error("writes under way did not finish in time")]
    Busy,
    /// The chosen voter's log did not reach the leader's in time.
    #[error("node {target} did not catch up in time (matched {matched:?} of {last})")]
    Behind {
        /// The voter.
        target: NodeId,
        /// Its matched log index.
        matched: Option<u64>,
        /// The leader's last log index.
        last: u64,
    },
    /// The voter did not stand, or did not win, in time.
    #[error("node {target} did not take over: {reason}")]
    NotTaken {
        /// The voter.
        target: NodeId,
        /// What happened.
        reason: String,
    },
}

impl App {
    /// On the leader: hands leadership to the voter furthest along, within `bound`. Returns
    /// the new leader, or `Ok(None)` when there is nothing to do: this node does not lead,
    /// it is the only voter, or `bound` is zero.
    pub async fn hand_over_leadership(
        &self,
        bound: Duration,
    ) -> Result<Option<NodeId>, HandoverError> {
        if bound.is_zero() || !self.is_leader() {
            return Ok(None);
        }
        let alone = self.membership().voter_ids().all(|v| v == self.node_id);
        if alone {
            return Ok(None);
        }
        self.hand_over(None, bound).await.map(Some)
    }

    /// On the leader: hands leadership to voter `to` (an operator's move, as etcd's
    /// `move-leader`), or to the voter furthest along when `to` is `None`, within `bound`.
    /// Returns the leader afterwards; `to` being this node already is no change.
    pub async fn move_leadership(
        &self,
        to: Option<NodeId>,
        bound: Duration,
    ) -> Result<NodeId, HandoverError> {
        if !self.is_leader() {
            return Err(HandoverError::NotLeader);
        }
        if to == Some(self.node_id) {
            return Ok(self.node_id);
        }
        let membership = self.membership();
        match to {
            Some(to) if !membership.voter_ids().any(|v| v == to) => {
                Err(HandoverError::NotVoter { target: to })
            }
            None if membership.voter_ids().all(|v| v == self.node_id) => {
                Err(HandoverError::NoVoter)
            }
            _ => self.hand_over(to, bound).await,
        }
    }

    async fn hand_over(
        &self,
        to: Option<NodeId>,
        bound: Duration,
    ) -> Result<NodeId, HandoverError> {
        let started = Instant::now();
        let deadline = started + bound;
        // openraft's leader refuses any vote within its lease (election_timeout_max) of its
        // own election, the successor's included: a leader that young waits it out first,
        // still taking writes.
        let lease = Duration::from_millis(self.config.raft.election_timeout_max_ms + 20);
        let since = *self.leading_since.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(since) = since {
            tokio::time::sleep_until((since + lease).min(deadline).into()).await;
        }
        self.handing_over.send_replace(true);
        let outcome = self.transfer(to, deadline).await;
        // Held writes go on: to the new leader, or to raft here if the handover failed.
        self.handing_over.send_replace(false);
        match &outcome {
            Ok(leader) => tracing::info!(
                to = leader,
                ms = started.elapsed().as_millis() as u64,
                "handed leadership over"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "leadership handover failed; this node still leads")
            }
        }
        outcome
    }

    async fn transfer(
        &self,
        to: Option<NodeId>,
        deadline: Instant,
    ) -> Result<NodeId, HandoverError> {
        // Writes that were on their way into raft when proposals stopped go in first: an
        // entry appended after the successor is level would cost it the old leader's vote.
        while self.proposing.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            if Instant::now() >= deadline {
                return Err(HandoverError::Busy);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut metrics = self.raft.metrics();
        // The voter asked for, else the one with the highest matched index: the first to be
        // level with this log.
        let target = match to {
            Some(to) => to,
            None => {
                let m = metrics.borrow_watched();
                m.membership_config
                    .membership()
                    .voter_ids()
                    .filter(|&v| v != self.node_id)
                    .max_by_key(|&v| matched_index(&m, v))
                    .ok_or(HandoverError::NoVoter)?
            }
        };
        // Level: no proposal is taken from here on, so the last log index only moves for
        // entries already on their way into the log.
        loop {
            let (matched, last) = {
                let m = metrics.borrow_and_update();
                (matched_index(&m, target), m.last_log_index.unwrap_or(0))
            };
            if matched.is_some_and(|i| i >= last) {
                break;
            }
            let changed = tokio::time::timeout_at(deadline.into(), metrics.changed()).await;
            if !matches!(changed, Ok(Ok(()))) {
                return Err(HandoverError::Behind {
                    target,
                    matched,
                    last,
                });
            }
        }
        let node = self
            .membership()
            .get_node(&target)
            .cloned()
            .ok_or_else(|| HandoverError::NotTaken {
                target,
                reason: "not in the membership any more".into(),
            })?;
        let remaining = deadline.saturating_duration_since(Instant::now());
        if !self.network.is_older_build(target) {
            // openraft's transfer: every voter stops honouring this leader's lease, and the
            // target stands with a vote they grant despite it.
            self.raft
                .trigger()
                .transfer_leader(target)
                .await
                .map_err(|e| HandoverError::NotTaken {
                    target,
                    reason: e.to_string(),
                })?;
        } else {
            // A voter of an older build (peer protocol 1) has no transfer: it stands when
            // asked, and wins once the voters' leases allow.
            self.network
                .timeout_now(target, &node, remaining)
                .await
                .map_err(|e| HandoverError::NotTaken {
                    target,
                    reason: e.to_string(),
                })?;
        }
        // Done once this node follows someone else: it has seen the new leader's first
        // message, so the new leader holds a quorum.
        let remaining = deadline.saturating_duration_since(Instant::now());
        let me = self.node_id;
        self.raft
            .wait(Some(remaining))
            .metrics(
                |m| m.current_leader.is_some_and(|l| l != me),
                "another node leads",
            )
            .await
            .map_err(|e| HandoverError::NotTaken {
                target,
                reason: e.to_string(),
            })?
            .current_leader
            .ok_or(HandoverError::NotTaken {
                target,
                reason: "no leader".into(),
            })
    }

    /// On a voter the leader asks to take over: stands for election at once. Only the
    /// leader this node follows may ask, so no other member can depose a healthy leader.
    pub async fn stand_for_election(&self, asked_by: NodeId) -> Result<(), MembershipError> {
        let (leader, voter) = {
            let m = self.raft.metrics();
            let m = m.borrow_watched();
            let voter = m
                .membership_config
                .membership()
                .voter_ids()
                .any(|v| v == self.node_id);
            (m.current_leader, voter)
        };
        if leader != Some(asked_by) {
            return Err(MembershipError::Rejected {
                reason: format!("node {asked_by} is not the leader this node follows ({leader:?})"),
            });
        }
        if !voter {
            return Err(MembershipError::Rejected {
                reason: "this node is not a voter".into(),
            });
        }
        if let Some(reason) = self.standing().reason() {
            return Err(MembershipError::Rejected { reason });
        }
        tracing::info!(
            leader = asked_by,
            "the leader hands over: standing for election"
        );
        self.raft
            .trigger()
            .elect(false)
            .await
            .map_err(|e| MembershipError::Unavailable {
                reason: e.to_string(),
            })
    }

    /// While a handover is under way, waits until it ends (at most `timeout`).
    pub(crate) async fn hold_while_handing_over(&self, timeout: Duration) {
        let mut handing_over = self.handing_over.subscribe();
        let _ = tokio::time::timeout(timeout, handing_over.wait_for(|h| !*h)).await;
    }
}

/// The last log index the leader knows `voter` holds (none before it has replicated).
fn matched_index(metrics: &openraft::RaftMetrics<TypeConfig>, voter: NodeId) -> Option<u64> {
    let replication = metrics.replication.as_ref()?;
    replication.get(&voter)?.as_ref().map(|log_id| log_id.index)
}

/// Follows this node's Raft metrics: counts each new leader it sees
/// (`rowcall_raft_leader_changes_seen_total`; a gap without a leader is not a change, the
/// same leader back after one is not a new one) and notes when this node starts leading.
pub async fn watch_leadership(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    let mut metrics = app.raft.metrics();
    let node = app.node_id.to_string();
    let counter = metrics::counter!(crate::metrics::LEADER_CHANGES_TOTAL, "node" => node);
    // Registered at zero, so that `increase()` over it works from the first scrape.
    counter.increment(0);
    let (mut last, mut led_term) = (None, None);
    loop {
        let (leader, term) = {
            let m = metrics.borrow_and_update();
            (m.current_leader, m.current_term)
        };
        if leader.is_some() && leader != last {
            counter.increment(1);
            last = leader;
        }
        let leading = (leader == Some(app.node_id)).then_some(term);
        if leading != led_term {
            led_term = leading;
            let mut since = app.leading_since.lock().unwrap_or_else(|e| e.into_inner());
            *since = leading.map(|_| Instant::now());
        }
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}
