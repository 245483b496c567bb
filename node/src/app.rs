//! The state every request handler shares, and the one write path into Raft: propose on
//! this node, or forward to the leader, then wait until this node has applied the entry.

use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::{ClientWriteError, RaftError};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::auth::Credentials;
use crate::catalogue::SharedCatalogue;
use crate::cluster::identity::LocalIdentity;
use crate::cluster::liveness::Liveness;
use crate::cluster::Forwarded;
use crate::config::Config;
use crate::dispatch::outbox::Outbox;
use crate::raft::network::Network;
use crate::raft::{Command, CommandResult, NodeId, Raft};
use crate::store::state_machine::ReceiptReader;

/// Shared node state.
pub struct App {
    /// This node's id.
    pub node_id: NodeId,
    /// Its data folder's identity: incarnation and cluster.
    pub identity: Arc<LocalIdentity>,
    /// The Raft handle.
    pub raft: Raft,
    /// The applied directory in memory.
    pub catalogue: SharedCatalogue,
    /// Stored receipts.
    pub receipts: ReceiptReader,
    /// Receipts waiting for a quorum.
    pub outbox: Outbox,
    /// The applied index, as the state machine publishes it.
    pub applied: watch::Receiver<u64>,
    /// Who may do what.
    pub credentials: Credentials,
    /// The node-to-node transport.
    pub network: Network,
    /// When peers were last heard from.
    pub liveness: Arc<Liveness>,
    /// The configuration the node started with.
    pub config: Arc<Config>,
}

/// A write that took effect.
#[derive(Debug)]
pub struct Written {
    /// What applying it did.
    pub result: CommandResult,
    /// Its log index; this node has applied it.
    pub index: u64,
}

/// Why a write did not take effect (or is not yet visible here).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum WriteError {
    /// No quorum, no leader, or no answer in time: try again later.
    #[error("the cluster cannot take writes now: {reason}")]
    Unavailable {
        /// Why.
        reason: String,
    },
    /// The node asked to apply a forwarded write does not lead.
    #[error("this node does not lead (leader: {leader:?})")]
    NotLeader {
        /// The leader, if known.
        leader: Option<NodeId>,
    },
    /// The write committed at `index`, but this node did not apply it in time.
    #[error("committed at index {index}, not yet applied on this node")]
    NotApplied {
        /// The write's index.
        index: u64,
    },
    /// Raft stopped: the node is shutting down or storage failed.
    #[error("raft stopped: {0}")]
    Fatal(String),
}

impl App {
    /// The index this node has applied.
    pub fn applied_index(&self) -> u64 {
        *self.applied.borrow()
    }

    /// The leader this node knows of.
    pub fn leader(&self) -> Option<NodeId> {
        self.raft.metrics().borrow().current_leader
    }

    fn write_timeout(&self) -> Duration {
        Duration::from_millis(self.config.limits.write_timeout_ms)
    }

    /// Proposes `command` (here or through the leader) and returns once it is committed and
    /// applied on this node.
    pub async fn write(&self, command: Command) -> Result<Written, WriteError> {
        self.write_within(command, self.write_timeout()).await
    }

    /// [`App::write`] with its own deadline.
    pub async fn write_within(
        &self,
        command: Command,
        timeout: Duration,
    ) -> Result<Written, WriteError> {
        let name = command.name();
        let started = Instant::now();
        let outcome = self.route_write(command, started + timeout).await;
        metrics::histogram!(crate::metrics::WRITE_SECONDS, "op" => name)
            .record(started.elapsed().as_secs_f64());
        outcome
    }

    async fn route_write(
        &self,
        command: Command,
        deadline: Instant,
    ) -> Result<Written, WriteError> {
        if self.is_cut_off() {
            return Err(WriteError::Unavailable {
                reason: "this node cannot reach a quorum".into(),
            });
        }
        // A leader change moves the write at most twice before we give up.
        for _ in 0..3 {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let forward_to = match self.propose(command.clone(), remaining).await {
                Ok(Forwarded { result, index }) => {
                    return self.applied_here(result, index, deadline).await
                }
                Err(Proposal::Forward(Some(leader))) => leader,
                Err(Proposal::Forward(None)) => {
                    self.await_leader(remaining).await;
                    continue;
                }
                Err(Proposal::Failed(e)) => return Err(e),
            };
            let node = self
                .leader_node()
                .filter(|(id, _)| *id == forward_to)
                .map(|(_, n)| n);
            let Some(node) = node else {
                self.await_leader(remaining).await;
                continue;
            };
            // A healthy leader answers in milliseconds. One that has not answered within its
            // lease is being replaced: fail now so the client retries (on this node or
            // another) once a successor leads, instead of holding the request for the
            // whole write timeout. Not retried here, since the attempt may yet commit.
            let attempt = remaining.min(Duration::from_millis(
                self.config.raft.election_timeout_max_ms,
            ));
            match self
                .network
                .forward(forward_to, &node, &command, attempt)
                .await
            {
                Ok(Forwarded { result, index }) => {
                    return self.applied_here(result, index, deadline).await
                }
                Err(WriteError::NotLeader { .. }) => self.await_leader(remaining).await,
                Err(e) => return Err(e),
            }
        }
        Err(WriteError::Unavailable {
            reason: "the leader kept changing".into(),
        })
    }

    /// Proposes on this node; answers for the leader when a follower forwards a write.
    pub async fn propose(
        &self,
        command: Command,
        timeout: Duration,
    ) -> Result<Forwarded, Proposal> {
        let outcome = self
            .while_connected(timeout, self.raft.client_write(command))
            .await;
        match outcome {
            Err(reason) => Err(Proposal::Failed(WriteError::Unavailable { reason })),
            Ok(Ok(response)) => Ok(Forwarded {
                result: response.data,
                index: response.log_id.index,
            }),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward)))) => {
                Err(Proposal::Forward(forward.leader_id))
            }
            Ok(Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e)))) => {
                Err(Proposal::Failed(WriteError::Fatal(e.to_string())))
            }
            Ok(Err(RaftError::Fatal(fatal))) => {
                Err(Proposal::Failed(WriteError::Fatal(fatal.to_string())))
            }
        }
    }

    /// Awaits `work` for at most `timeout`, giving up early once this node is cut off from
    /// the leader or its quorum: a leader that lost its followers never commits, and its
    /// clients are better served by a fast 503 than by the whole timeout.
    async fn while_connected<T>(
        &self,
        timeout: Duration,
        work: impl std::future::Future<Output = T>,
    ) -> Result<T, String> {
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(work, deadline);
        let mut check = tokio::time::interval(Duration::from_millis(50));
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                done = &mut work => return Ok(done),
                _ = &mut deadline => {
                    return Err(format!("not committed within {} ms", timeout.as_millis()))
                }
                _ = check.tick() => {
                    if self.is_cut_off() {
                        return Err("this node lost contact with the leader or its quorum".into());
                    }
                }
            }
        }
    }

    async fn applied_here(
        &self,
        result: CommandResult,
        index: u64,
        deadline: Instant,
    ) -> Result<Written, WriteError> {
        let remaining = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(100));
        if self.wait_applied(index, remaining).await {
            Ok(Written { result, index })
        } else {
            Err(WriteError::NotApplied { index })
        }
    }

    async fn await_leader(&self, within: Duration) {
        let within = within.min(Duration::from_millis(500));
        let _ = self
            .raft
            .wait(Some(within))
            .metrics(|m| m.current_leader.is_some(), "a leader is known")
            .await;
        tokio::time::sleep(Duration::from_millis(20).min(within)).await;
    }

    /// Waits until this node has applied `index`, at most `timeout`. Returns whether it has.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> bool {
        let mut applied = self.applied.clone();
        let reached = tokio::time::timeout(timeout, applied.wait_for(|a| *a >= index)).await;
        matches!(reached, Ok(Ok(_)))
    }
}

/// Why a local proposal did not commit.
#[derive(Debug)]
pub enum Proposal {
    /// Another node leads (or none is known yet).
    Forward(Option<NodeId>),
    /// The write failed.
    Failed(WriteError),
}
