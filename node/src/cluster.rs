//! Cluster behaviour beyond Raft itself: whether this node can reach a quorum, joining and removing members, and linearizable read indexes.
//!
//! Any member accepts a join or a removal and hands it to the leader, so an operator or a
//! starting node never needs to know who leads.

use std::collections::BTreeSet;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::ChangeMembers;

use crate::app::App;
use crate::raft::calls::{JoinRequest, MembershipError};
use crate::raft::{NodeId, NodeInfo};

fn membership_error(e: RaftError<NodeId, ClientWriteError<NodeId, NodeInfo>>) -> MembershipError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => MembershipError::NotLeader {
            leader: f.leader_id,
        },
        // Another change (e.g. a concurrent join) is still being committed: try again.
        RaftError::APIError(ClientWriteError::ChangeMembershipError(
            openraft::error::ChangeMembershipError::InProgress(e),
        )) => MembershipError::Unavailable {
            reason: e.to_string(),
        },
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            MembershipError::Rejected {
                reason: e.to_string(),
            }
        }
        RaftError::Fatal(e) => MembershipError::Unavailable {
            reason: e.to_string(),
        },
    }
}

/// How long a membership change may take (a joining node may need a snapshot first).
const MEMBERSHIP_TIMEOUT: Duration = Duration::from_secs(60);

impl App {
    /// Whether this node is cut off: no leader, a leader we have not heard from lately, or
    /// (when leading) no quorum of voters answering. Reads are then marked stale and
    /// directory writes fail fast.
    pub fn is_stale(&self) -> bool {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        match metrics.current_leader {
            None => true,
            Some(leader) if leader == self.node_id => {
                let voters: Vec<NodeId> =
                    metrics.membership_config.membership().voter_ids().collect();
                if voters.len() <= 1 {
                    return false;
                }
                let answering = voters
                    .iter()
                    .filter(|&&v| v == self.node_id || self.liveness.peer_fresh(v))
                    .count();
                answering * 2 <= voters.len()
            }
            Some(_) => !self.liveness.leader_fresh(),
        }
    }

    /// The leader and how to reach it, if known.
    pub fn leader_node(&self) -> Option<(NodeId, NodeInfo)> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let leader = metrics.current_leader?;
        let node = metrics
            .membership_config
            .membership()
            .get_node(&leader)?
            .clone();
        Some((leader, node))
    }

    fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().current_leader == Some(self.node_id)
    }

    /// The membership this node knows.
    fn membership(&self) -> openraft::Membership<NodeId, NodeInfo> {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .clone()
    }

    /// The leader to hand a request to, or why there is none.
    fn known_leader(&self) -> Result<(NodeId, NodeInfo), MembershipError> {
        self.leader_node().ok_or(MembershipError::Unavailable {
            reason: "no leader known".into(),
        })
    }

    /// Commits a membership change on this node (the leader), bounded in time.
    async fn change_membership(
        &self,
        change: ChangeMembers<NodeId, NodeInfo>,
    ) -> Result<(), MembershipError> {
        tokio::time::timeout(
            MEMBERSHIP_TIMEOUT,
            self.raft.change_membership(change, false),
        )
        .await
        .map_err(|_| MembershipError::Unavailable {
            reason: "the membership change was not committed in time".into(),
        })?
        .map_err(membership_error)?;
        Ok(())
    }

    /// Adds a node as a learner, then (unless it asked to stay a learner) as a voter. Any
    /// member takes the request and hands it to the leader. Joining twice is harmless.
    pub async fn join(&self, request: JoinRequest) -> Result<(), MembershipError> {
        if !self.is_leader() {
            let (leader, node) = self.known_leader()?;
            return self
                .network
                .join(leader, &node.grpc_addr, &request, MEMBERSHIP_TIMEOUT)
                .await;
        }
        let membership = self.membership();
        let is_voter = membership.voter_ids().any(|v| v == request.id);
        match membership.get_node(&request.id) {
            Some(existing) if *existing != request.node => {
                return Err(MembershipError::Rejected {
                    reason: format!(
                        "node {} is already a member at {existing}; remove it first",
                        request.id
                    ),
                })
            }
            Some(_) if is_voter || request.learner => return Ok(()),
            Some(_) => {}
            None => {
                tokio::time::timeout(
                    MEMBERSHIP_TIMEOUT,
                    self.raft
                        .add_learner(request.id, request.node.clone(), true),
                )
                .await
                .map_err(|_| MembershipError::Unavailable {
                    reason: "the new node did not catch up in time".into(),
                })?
                .map_err(membership_error)?;
            }
        }
        if !request.learner {
            self.change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([request.id])))
                .await?;
        }
        tracing::info!(id = request.id, learner = request.learner, node = %request.node, "member joined");
        Ok(())
    }

    /// Takes a voter or a learner out of the cluster.
    pub async fn remove_member(&self, id: NodeId) -> Result<(), MembershipError> {
        if !self.is_leader() {
            let (leader, node) = self.known_leader()?;
            return self
                .network
                .remove(leader, &node, id, MEMBERSHIP_TIMEOUT)
                .await;
        }
        let membership = self.membership();
        let change = if membership.voter_ids().any(|v| v == id) {
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        } else if membership.get_node(&id).is_some() {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        } else {
            return Err(MembershipError::Rejected {
                reason: format!("node {id} is not a member"),
            });
        };
        self.change_membership(change).await?;
        tracing::info!(id, "member removed");
        Ok(())
    }

    /// The index a linearizable read must see: confirmed by the leader with a quorum
    /// (openraft's read-index path), then awaited on this node.
    pub async fn linearizable_index(&self, timeout: Duration) -> Result<u64, MembershipError> {
        let index = if self.is_leader() {
            self.leader_read_index(timeout).await?
        } else {
            let (leader, node) = self.known_leader()?;
            self.network.read_index(leader, &node, timeout).await?
        };
        if self.wait_applied(index, timeout).await {
            Ok(index)
        } else {
            Err(MembershipError::Unavailable {
                reason: format!("this node did not apply index {index} in time"),
            })
        }
    }

    /// On the leader: the read index confirmed by a quorum.
    pub async fn leader_read_index(&self, timeout: Duration) -> Result<u64, MembershipError> {
        let read = tokio::time::timeout(timeout, self.raft.get_read_log_id())
            .await
            .map_err(|_| MembershipError::Unavailable {
                reason: "no quorum confirmed leadership in time".into(),
            })?;
        match read {
            Ok((read_log_id, _applied)) => Ok(read_log_id.map_or(0, |l| l.index)),
            Err(RaftError::APIError(e)) => Err(MembershipError::NotLeader {
                leader: match e {
                    openraft::error::CheckIsLeaderError::ForwardToLeader(f) => f.leader_id,
                    openraft::error::CheckIsLeaderError::QuorumNotEnough(_) => None,
                },
            }),
            Err(RaftError::Fatal(e)) => Err(MembershipError::Unavailable {
                reason: e.to_string(),
            }),
        }
    }
}
