//! Cluster behaviour beyond Raft itself: whether this node can reach a quorum (from
//! [`crate::raft::liveness`]), how a fresh node founds or joins a cluster ([`enter`]),
//! joining and removing members, and linearizable read indexes.
//!
//! Any member accepts a join or a removal and hands it to the leader, so an operator or a
//! starting node never needs to know who leads. The leader admits a node as the incarnation
//! it asked with; the same id on another data folder is refused until the old member is
//! removed, so a node that lost its disk never comes back with a vote it no longer backs.

pub mod backup;
pub mod cosign;
pub mod enter;
pub mod handover;
pub mod peers;
pub mod ranking;
pub mod snapshots;
pub mod space;
pub mod verify;

use crate::raft::WatchReceiver as _;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::ChangeMembers;

use self::handover::HandoverError;
use crate::app::App;
use crate::raft::calls::{Hello, JoinRequest, MembershipError};
use crate::raft::network::Dest;
use crate::raft::standing::JoinJudgement;
use crate::raft::{NodeId, NodeInfo, TypeConfig};

fn membership_error(e: RaftError<TypeConfig, ClientWriteError<TypeConfig>>) -> MembershipError {
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
        // The leader lost its term with the change in its log: it may still commit.
        RaftError::APIError(ClientWriteError::LogEntryDiscarded(e)) => {
            MembershipError::Unavailable {
                reason: e.to_string(),
            }
        }
        // Another change came in between the two steps of this one (e.g. two joins at
        // once: the second step finds a newer membership than the first left): try again.
        RaftError::APIError(ClientWriteError::PreconditionFailed(e)) => {
            MembershipError::Unavailable {
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

/// How long a leader may take to move leadership on an operator's request: the wait out of
/// a young leader's lease, the successor catching up, and its election.
const MOVE_LEADER_BOUND: Duration = Duration::from_secs(5);

/// Room on top of [`MOVE_LEADER_BOUND`] for a request forwarded to the leader.
const MOVE_LEADER_SLACK: Duration = Duration::from_secs(1);

impl App {
    /// How long ago this node was last in touch with a leader that had its quorum: as the
    /// leader, since a quorum of voters last acknowledged it; as a follower or learner, since
    /// a message of the leader it follows at the current term last arrived (not since this
    /// node finished handling it), plus how old that leader's quorum then was
    /// ([`crate::raft::liveness`]). `None`: no leader, or never.
    fn contact_age(&self) -> Option<Duration> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        let at = match metrics.current_leader? {
            leader if leader == self.node_id => {
                let voters = metrics.membership_config.membership().voter_ids();
                self.liveness.quorum_at(self.node_id, voters)
            }
            leader => self.liveness.leader_quorum_at(leader, metrics.current_term),
        };
        at.map(|at| at.elapsed())
    }

    /// Whether this node's reads are stale (`x-rowcall-stale`, `/readyz` failing): its
    /// contact with a leader backed by a quorum is older than the leader lease, so another
    /// leader may already have been elected elsewhere.
    pub fn is_stale(&self) -> bool {
        !self.takes_part()
            || self
                .contact_age()
                .is_none_or(|age| age > self.liveness.stale_after())
    }

    /// Whether the leader this node follows (another node) told it, in its latest message,
    /// of a quorum older than the leader lease is now: that leader cannot commit, and no
    /// other leader can have been elected on its quorum's lease any more, so this node's
    /// lease no longer protects anything and it may vote at once (Raft's safety never rests
    /// on the lease; the vote service asks, `api::peer`).
    ///
    /// Why: a leader whose followers' answers are lost keeps sending, so every follower's
    /// openraft lease is renewed by messages from a leader that cannot commit. A follower
    /// that stands against it (`early_election`, reason `leader_unbacked`) gets the old
    /// leader's vote and its own, a majority of three but not of five, where the others
    /// refused it for their leases until those ran out: 1.2–1.4 s without writes in chaos
    /// `lost-answers` at 5 nodes instead of 0.7–0.8 s.
    ///
    /// The lease's other duty holds: a voter votes early only once `R - A + lease` has
    /// passed (`A` the quorum age the leader sent, `R` when it arrived here), which is
    /// `Q + lease` plus the message's transit, `Q` being the leader's quorum instant, so no
    /// new leader exists before `Q + lease`, the bound the followers' freshness rests on
    /// ([`crate::raft::liveness`]).
    pub fn leader_unbacked_for_a_lease(&self) -> bool {
        self.leader().is_some_and(|leader| leader != self.node_id)
            && self
                .contact_age()
                .is_some_and(|age| age >= self.liveness.stale_after())
    }

    /// Waits, at most `bound`, for this node's reads to stop being stale; whether they did.
    /// A node resumed from a pause or back from a short partition hears its leader within a
    /// heartbeat, but until then its contact is as old as the gap.
    pub async fn regains_contact(&self, bound: Duration) -> bool {
        const POLL: Duration = Duration::from_millis(5);
        let until = tokio::time::Instant::now() + bound;
        loop {
            if !self.is_stale() {
                return true;
            }
            if tokio::time::Instant::now() >= until {
                return false;
            }
            tokio::time::sleep_until(until.min(tokio::time::Instant::now() + POLL)).await;
        }
    }

    /// How long ago this node was last in touch with any leader that had its quorum, itself
    /// included, at any term: what [`App::contact_age`] cannot say while an election is on and
    /// this node follows no one (a candidate, or a voter waiting for the winner to speak), or
    /// follows a leader it has not yet counted a message of.
    fn last_contact_age(&self) -> Option<Duration> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        let voters = metrics.membership_config.membership().voter_ids();
        let led = self.liveness.quorum_at(self.node_id, voters);
        let followed = self.liveness.last_leader_quorum_at();
        led.max(followed).map(|at| at.elapsed())
    }

    /// Whether this node is cut off for long enough that writes fail at once rather than
    /// wait for a quorum they will not get. An election is no cut: a node that lost its
    /// leader a moment ago holds a write for the successor (which may be itself) until it has
    /// been out of touch as long as a cut takes.
    pub fn is_cut_off(&self) -> bool {
        !self.takes_part()
            || self
                .contact_age()
                .or_else(|| self.last_contact_age())
                .is_none_or(|age| age > self.liveness.cut_off_after())
    }

    /// The leader and how to reach it, if known.
    pub fn leader_node(&self) -> Option<(NodeId, NodeInfo)> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        let leader = metrics.current_leader?;
        let node = metrics
            .membership_config
            .membership()
            .get_node(&leader)?
            .clone();
        Some((leader, node))
    }

    fn is_leader(&self) -> bool {
        self.raft.metrics().borrow_watched().current_leader == Some(self.node_id)
    }

    /// Who this node is, for a peer that asks.
    pub fn hello(&self) -> Hello {
        self.hello_to(None)
    }

    /// Who this node is, for the peer `asker` (its id and incarnation, as its message says):
    /// with what this node saw that incarnation promise.
    pub fn hello_to(&self, asker: Option<(NodeId, &str)>) -> Hello {
        let identity = self.identity.get();
        let (member, leader, quorum_age, term) = {
            let metrics = self.raft.metrics();
            let metrics = metrics.borrow_watched();
            let membership = metrics.membership_config.membership();
            let member = membership.nodes().next().is_some();
            let quorum_age = (metrics.current_leader == Some(self.node_id))
                .then(|| {
                    self.liveness
                        .quorum_age(self.node_id, membership.voter_ids())
                })
                .flatten();
            (
                member,
                metrics.current_leader,
                quorum_age,
                metrics.current_term,
            )
        };
        Hello {
            node_id: identity.node_id,
            incarnation: identity.incarnation,
            cluster_id: identity.cluster_id,
            member,
            leader,
            founding: self.identity.founding(),
            signing_key: self.identity.signing_public(),
            ranking: Some(ranking::RankingSetup::of(self)),
            seen_you: asker
                .and_then(|(id, incarnation)| self.network.witness().of(id, incarnation)),
            wall_ms: crate::model::time::raw_now_ms(),
            quorum_age_ms: quorum_age.map(|age| age.as_millis() as u64),
            term,
            packed_snapshots: self.network.installs_packed_snapshots(),
        }
    }

    /// The membership this node knows (the latest, committed or not).
    pub fn membership(&self) -> openraft::Membership<NodeId, NodeInfo> {
        self.raft
            .metrics()
            .borrow_watched()
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

    /// On the leader: records in the membership the checkpoint-signing key of every member
    /// admitted without one (by a version before the receipt log was signed), as the member
    /// itself says it (same incarnation only). Returns how many were recorded.
    pub async fn record_signing_keys(&self) -> Result<usize, MembershipError> {
        if !self.is_leader() {
            return Ok(0);
        }
        let keyless: Vec<(NodeId, NodeInfo)> = self
            .membership()
            .nodes()
            .filter(|(_, info)| info.signing_key.is_empty())
            .map(|(id, info)| (*id, info.clone()))
            .collect();
        let mut updated = BTreeMap::new();
        for (id, info) in keyless {
            let hello = if id == self.node_id {
                self.hello()
            } else {
                match self
                    .network
                    .hello(&info.grpc_addr, Duration::from_secs(2))
                    .await
                {
                    Ok(hello) => hello,
                    Err(_) => continue,
                }
            };
            if hello.node_id == id
                && hello.incarnation == info.incarnation
                && !hello.signing_key.is_empty()
            {
                let signing_key = hello.signing_key;
                updated.insert(
                    id,
                    NodeInfo {
                        signing_key,
                        ..info
                    },
                );
            }
        }
        if updated.is_empty() {
            return Ok(0);
        }
        let count = updated.len();
        self.change_membership(ChangeMembers::SetNodes(updated))
            .await?;
        tracing::info!(
            count,
            "recorded the checkpoint-signing keys of members admitted without one"
        );
        Ok(count)
    }

    /// Adds a node as a learner, then (unless it asked to stay a learner) as a voter. Any
    /// member takes the request and hands it to the leader. Joining twice is harmless; the
    /// same id from another data folder (incarnation) is refused until the old member is
    /// removed.
    pub async fn join(&self, request: JoinRequest) -> Result<(), MembershipError> {
        if !self.is_leader() {
            let (leader, node) = self.known_leader()?;
            return self
                .network
                .join(Dest::member(leader, &node), &request, MEMBERSHIP_TIMEOUT)
                .await;
        }
        let ours = self.identity.cluster_id().unwrap_or_default();
        if request.node.cluster_id != ours {
            return Err(MembershipError::Rejected {
                reason: format!(
                    "node {} asked to join cluster {:?}, but this is cluster {ours}",
                    request.id, request.node.cluster_id
                ),
            });
        }
        let membership = self.membership();
        let is_voter = membership.voter_ids().any(|v| v == request.id);
        match membership.get_node(&request.id) {
            Some(existing) if existing.incarnation != request.node.incarnation => {
                return Err(MembershipError::Rejected {
                    reason: format!(
                        "node {id} is already a member, running on another data folder \
                         (incarnation {old}; this one is {new}). If that folder is lost, \
                         remove the old member first: DELETE /api/cluster/members/{id} with the \
                         admin key on any member; then start this node again with --join",
                        id = request.id,
                        old = existing.incarnation,
                        new = request.node.incarnation,
                    ),
                })
            }
            Some(existing) if *existing != request.node => {
                return Err(MembershipError::Rejected {
                    reason: format!(
                        "node {} is already a member at {existing}; remove it first",
                        request.id
                    ),
                })
            }
            // The same incarnation again: harmless when it holds all it promised (a join
            // retried after it went through); refused when this node saw it promise more
            // than it now holds (its folder went back: restored from an older copy).
            Some(_) => {
                match self.judge_join(&request) {
                    JoinJudgement::Holds => {}
                    JoinJudgement::Doubtful => {
                        return Err(MembershipError::Unavailable {
                            reason: "this node saw the joining node acknowledge more than it \
                                     reported: report again"
                                .into(),
                        })
                    }
                    JoinJudgement::Behind(contradiction) => {
                        return Err(MembershipError::Rejected {
                            reason: crate::raft::standing::behind_reason(
                                request.id,
                                self.node_id,
                                &contradiction,
                            ),
                        })
                    }
                }
                if is_voter || request.learner {
                    return Ok(());
                }
            }
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

    /// What this node makes of the progress a joining member's incarnation reports
    /// ([`crate::raft::standing::Witness::judge_join`]); a report from an older build, which
    /// says nothing, holds.
    fn judge_join(&self, request: &JoinRequest) -> JoinJudgement {
        let Some(holds) = request.progress else {
            return JoinJudgement::Holds;
        };
        self.network
            .witness()
            .judge_join(request.id, &request.node.incarnation, holds)
    }

    /// Adds the node running at `grpc_addr` (an operator's request): it is asked who it is,
    /// and admitted as the incarnation that answers. It must already belong to this cluster
    /// (started with `--join`); the useful case is promoting a learner to a voter.
    pub async fn add_member(
        &self,
        id: NodeId,
        grpc_addr: &str,
        http_addr: &str,
        learner: bool,
    ) -> Result<(), MembershipError> {
        let hello = self
            .network
            .hello(grpc_addr, Duration::from_secs(5))
            .await
            .map_err(|e| MembershipError::Unavailable {
                reason: e.to_string(),
            })?;
        if hello.node_id != id {
            return Err(MembershipError::Rejected {
                reason: format!(
                    "the node at {grpc_addr} is node {}, not {id}",
                    hello.node_id
                ),
            });
        }
        let ours = self.identity.cluster_id().unwrap_or_default();
        if hello.cluster_id.as_deref() != Some(ours.as_str()) {
            return Err(MembershipError::Rejected {
                reason: format!(
                    "node {id} does not belong to this cluster yet: start it with --join <any member>; it joins by itself"
                ),
            });
        }
        self.join(JoinRequest {
            id,
            node: NodeInfo {
                grpc_addr: grpc_addr.to_owned(),
                http_addr: http_addr.to_owned(),
                cluster_id: ours,
                incarnation: hello.incarnation,
                signing_key: hello.signing_key,
            },
            learner,
            progress: None,
        })
        .await
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

    /// Moves leadership to voter `to`, or to the voter furthest along when `to` is `None`
    /// (an operator's move before maintenance, as etcd's `move-leader`); any node hands the
    /// request to the leader. Returns the leader afterwards.
    pub async fn move_leader(&self, to: Option<NodeId>) -> Result<NodeId, MembershipError> {
        if !self.is_leader() {
            let (leader, node) = self.known_leader()?;
            return self
                .network
                .move_leader(leader, &node, to, MOVE_LEADER_BOUND + MOVE_LEADER_SLACK)
                .await;
        }
        self.move_leadership(to, MOVE_LEADER_BOUND)
            .await
            .map_err(|e| match e {
                HandoverError::NotVoter { .. } | HandoverError::NoVoter => {
                    MembershipError::Rejected {
                        reason: e.to_string(),
                    }
                }
                HandoverError::NotLeader => MembershipError::NotLeader {
                    leader: self.raft.metrics().borrow_watched().current_leader,
                },
                HandoverError::Busy
                | HandoverError::Behind { .. }
                | HandoverError::NotTaken { .. } => MembershipError::Unavailable {
                    reason: format!("leadership did not move: {e}"),
                },
            })
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

    /// Whether `index` was certainly never handed to any client: this node leads, a quorum
    /// confirmed it (so its log holds every committed entry, of any term), and its log ends
    /// before `index`. Only the leader can tell; elsewhere (or unconfirmed) it is `false`.
    pub async fn never_issued(&self, index: u64, timeout: Duration) -> bool {
        // The state machine runs ahead of openraft's published metrics: an index this node
        // applied (and may have answered with) is issued even before `last_log_index` says so.
        let past_end = || {
            let metrics = self.raft.metrics();
            let metrics = metrics.borrow_watched();
            metrics.current_leader == Some(self.node_id)
                && metrics.last_log_index.is_none_or(|last| index > last)
                && index > self.applied_index()
        };
        // Checked again after the quorum confirmed leadership: a deposed leader's log may be
        // shorter than the cluster's.
        past_end() && self.leader_read_index(timeout).await.is_ok() && past_end()
    }

    /// On the leader: the read index confirmed by a quorum.
    pub async fn leader_read_index(&self, timeout: Duration) -> Result<u64, MembershipError> {
        let read = tokio::time::timeout(
            timeout,
            self.raft.get_read_log_id(openraft::ReadPolicy::ReadIndex),
        )
        .await
        .map_err(|_| MembershipError::Unavailable {
            reason: "no quorum confirmed leadership in time".into(),
        })?;
        match read {
            Ok((read_log_id, _applied)) => Ok(read_log_id.log_id().index),
            Err(RaftError::APIError(e)) => Err(MembershipError::NotLeader {
                leader: match e {
                    openraft::error::LinearizableReadError::ForwardToLeader(f) => f.leader_id,
                    openraft::error::LinearizableReadError::QuorumNotEnough(_) => None,
                },
            }),
            Err(RaftError::Fatal(e)) => Err(MembershipError::Unavailable {
                reason: e.to_string(),
            }),
        }
    }
}
