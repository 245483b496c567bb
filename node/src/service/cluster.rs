//! The cluster as operators see it: status, readiness, convergence digests, membership
//! changes and snapshots. Any node answers; membership changes go to the leader.

use crate::raft::WatchReceiver as _;
use std::collections::BTreeMap;

use openraft::ServerState;
use serde::Serialize;

use super::view::Viewer;
use super::{read_barrier, Admin, Freshness, ServiceError};
use crate::app::App;
use crate::catalogue::embed::ModelInfo;
use crate::cluster::backup::{Backup, BackupError};
use crate::cluster::ranking::RankingSetup;
use crate::raft::calls::{JoinRequest, MembershipError};
use crate::raft::NodeId;

/// A member of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Member {
    /// Its id.
    pub id: NodeId,
    /// Its gRPC address (Raft and the public gRPC API); admin key only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc_addr: Option<String>,
    /// Its HTTP address; admin key only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_addr: Option<String>,
    /// The incarnation (data folder) the membership admitted; admin key only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<String>,
    /// Whether it votes (else a learner).
    pub voter: bool,
    /// Whether it leads, as this node knows.
    pub leader: bool,
}

/// This node's view of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Status {
    /// This node.
    pub node_id: NodeId,
    /// The cluster it belongs to (none before it founded or joined one); admin key only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    /// Its data folder's incarnation; admin key only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<String>,
    /// `leader`, `follower`, `candidate`, `learner` or `shutdown`.
    pub role: &'static str,
    /// The leader, if known.
    pub leader: Option<NodeId>,
    /// The current term.
    pub term: u64,
    /// The index this node has applied.
    pub last_applied: u64,
    /// The last index in its log.
    pub last_log_index: Option<u64>,
    /// The index of its last snapshot.
    pub snapshot_index: Option<u64>,
    /// The index up to which its log is purged.
    pub purged_index: Option<u64>,
    /// Whether it is cut off from the leader or a quorum (answers are then stale).
    pub stale: bool,
    /// Whether it takes part in Raft: `ok`; `verifying` (restarted, asking its peers what it
    /// promised them); `behind` (its folder is older than what it promised: it stays out
    /// until re-admitted). See `raft::standing`.
    pub standing: &'static str,
    /// Why it is not `ok`, and what to do.
    pub standing_reason: Option<String>,
    /// Every member, voters and learners.
    pub members: Vec<Member>,
    /// The learners' ids.
    pub learners: Vec<NodeId>,
    /// On the leader: how many entries each other member is behind.
    pub follower_lag: BTreeMap<NodeId, u64>,
    /// AppendEntries this node sent as leader, since it started, that each member left
    /// unanswered within the heartbeat interval: a member down or cut off, or one whose round
    /// trip is longer than `raft.heartbeat_ms`. Members with none are left out.
    pub unanswered_appends: BTreeMap<NodeId, u64>,
    /// Receipts in this node's outbox, waiting for a quorum.
    pub outbox: usize,
    /// How this node ranks asks.
    pub resolver: ResolverStatus,
}

/// How a node ranks asks (DESIGN §6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResolverStatus {
    /// `lexical` (words: BM25F) or `hybrid` (words and meaning: BM25F fused with the cosine
    /// of sentence embeddings).
    pub mode: &'static str,
    /// The model, in hybrid mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelInfo>,
    /// Askable rows that have their vector on this node.
    pub rows_embedded: usize,
    /// Rows waiting for the model (askable by their words meanwhile).
    pub rows_waiting: usize,
    /// Row texts this node ran through the model since it started (vectors it computed
    /// before are read back from its database).
    pub rows_computed: u64,
    /// Whether asks that led to invocations boost their rows (`[resolver] learn`).
    pub learn: bool,
    /// Members that rank asks otherwise than this node (another model, query embedding or
    /// `learn` setting), as they last said: the same ask gets another ranking there. Empty
    /// when every member that answered ranks alike.
    pub members_ranking_otherwise: BTreeMap<NodeId, RankingSetup>,
}

/// This node's [`ResolverStatus`].
pub fn resolver_status(app: &App) -> ResolverStatus {
    let catalogue = app.catalogue.read();
    let semantic = catalogue.semantic();
    ResolverStatus {
        mode: if semantic.is_some() {
            "hybrid"
        } else {
            "lexical"
        },
        model: semantic.map(|s| s.embedder().info().clone()),
        rows_embedded: catalogue.embedded(),
        rows_waiting: semantic.map_or(0, |s| s.waiting()),
        rows_computed: semantic.map_or(0, |s| s.computed()),
        learn: app.config.resolver.learn,
        members_ranking_otherwise: app.ranking_peers.otherwise(),
    }
}

fn role(state: ServerState) -> &'static str {
    match state {
        ServerState::Leader => "leader",
        ServerState::Follower => "follower",
        ServerState::Candidate => "candidate",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    }
}

/// This node, the leader, the term, the indexes and every member, as `viewer` may see them
/// (see [`Viewer::status`]).
pub fn status(app: &App, viewer: &Viewer) -> Status {
    let metrics = app.raft.metrics().borrow_watched().clone();
    let membership = metrics.membership_config.membership();
    let voters: Vec<u64> = membership.voter_ids().collect();
    let members = membership
        .nodes()
        .map(|(id, node)| Member {
            id: *id,
            grpc_addr: Some(node.grpc_addr.clone()),
            http_addr: Some(node.http_addr.clone()),
            incarnation: Some(node.incarnation.clone()),
            voter: voters.contains(id),
            leader: metrics.current_leader == Some(*id),
        })
        .collect();
    // Only the leader knows how far each follower has replicated.
    let last_log = metrics.last_log_index.unwrap_or(0);
    let follower_lag = metrics
        .replication
        .as_ref()
        .map(|replication| {
            replication
                .iter()
                .filter(|(id, _)| **id != app.node_id)
                .map(|(id, matched)| {
                    let matched = matched.map_or(0, |m| m.index);
                    (*id, last_log.saturating_sub(matched))
                })
                .collect()
        })
        .unwrap_or_default();
    let identity = app.identity.get();
    let standing = app.standing();
    let status = Status {
        node_id: app.node_id,
        cluster_id: identity.cluster_id,
        incarnation: Some(identity.incarnation),
        role: role(metrics.state),
        leader: metrics.current_leader,
        term: metrics.current_term,
        last_applied: app.applied_index(),
        last_log_index: metrics.last_log_index,
        snapshot_index: metrics.snapshot.map(|s| s.index),
        purged_index: metrics.purged.map(|p| p.index),
        stale: app.is_stale(),
        standing: standing.name(),
        standing_reason: standing.reason(),
        members,
        learners: membership.learner_ids().collect(),
        follower_lag,
        unanswered_appends: app.liveness.unanswered_appends(),
        outbox: app.outbox.len(),
        resolver: resolver_status(app),
    };
    seen_by(viewer, status)
}

/// The cluster's status as `viewer` sees it: without the admin key, no cluster id, no
/// incarnations and no member addresses — the fields a forged peer envelope needs (and the
/// Raft port is for peers only). Node ids, roles, leader, term, indexes and standing stay: a
/// client needs them to pick a node.
fn seen_by(viewer: &Viewer, mut status: Status) -> Status {
    if viewer.is_admin() {
        return status;
    }
    status.cluster_id = None;
    status.incarnation = None;
    for member in &mut status.members {
        member.grpc_addr = None;
        member.http_addr = None;
        member.incarnation = None;
    }
    status
}

/// Whether this node should get traffic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Readiness {
    /// The node's start is over, Raft runs here, a leader is known and reachable, and this
    /// node applied all it knows is committed.
    pub ready: bool,
    /// The node is still starting (founding its cluster and writing the demo catalogue, or
    /// joining one): it answers its peers but is not ready yet.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub starting: bool,
    /// The leader, if known.
    pub leader: Option<NodeId>,
    /// Whether it is cut off from the leader or a quorum.
    pub stale: bool,
    /// The index it applied.
    pub applied: u64,
    /// The commit index it knows.
    pub committed: u64,
    /// Members' storage alarms: while there is one, the node stays ready (it serves reads,
    /// asks and confirms) but refuses row writes and invocations ([`crate::cluster::space`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub storage_alarms: Vec<StorageAlarmView>,
}

/// A storage alarm as `/readyz` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StorageAlarmView {
    /// What is short, for people.
    pub message: String,
    /// The member short of space and what it measured.
    #[serde(flatten)]
    pub alarm: crate::model::alarm::StorageAlarm,
}

/// Readiness: a leader is known and reachable, and this node has applied every entry it
/// knows to be committed.
pub async fn readiness(app: &App) -> Readiness {
    let leader = app.leader();
    let applied = app.applied_index();
    let committed = app
        .raft
        .with_raft_state(|state| state.local_committed().map_or(0, |c| c.index))
        .await
        .unwrap_or(u64::MAX);
    let stale = app.is_stale();
    let storage_alarms = crate::cluster::space::alarms(app)
        .unwrap_or_default()
        .into_iter()
        .map(|alarm| StorageAlarmView {
            message: alarm.describe(),
            alarm,
        })
        .collect();
    // Raft stopped (its storage failed, or the node is stopping): nothing here is current.
    let running = app.raft.metrics().borrow_watched().running_state.is_ok();
    let starting = !app.started.load(std::sync::atomic::Ordering::SeqCst);
    Readiness {
        ready: !starting && running && leader.is_some() && !stale && applied >= committed,
        starting,
        leader,
        stale,
        applied,
        committed,
        storage_alarms,
    }
}

/// A node to add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddMember {
    /// The new node's id (positive).
    pub id: NodeId,
    /// Its gRPC address (`host:port`).
    pub grpc_addr: String,
    /// Its HTTP address (`host:port`).
    pub http_addr: String,
    /// Add it as a learner (read replica) instead of a voter.
    pub learner: bool,
}

/// Adds a member; any node hands the change to the leader. Adding a member twice is
/// harmless. The node at `grpc_addr` is asked who it is and admitted as the incarnation that
/// answers; it must already belong to this cluster (started with `--join`), so this
/// promotes a learner to a voter.
pub async fn add_member(app: &App, _admin: &Admin, add: AddMember) -> Result<(), ServiceError> {
    if add.id == 0 {
        return Err(ServiceError::WrongShape(
            "id must be a positive number".into(),
        ));
    }
    app.add_member(add.id, &add.grpc_addr, &add.http_addr, add.learner)
        .await?;
    Ok(())
}

/// Makes learner `id` a voter; any node hands the change to the leader. Promoting a voter
/// is harmless; an id that is not a member is refused.
pub async fn promote(app: &App, _admin: &Admin, id: NodeId) -> Result<(), ServiceError> {
    let node = app
        .raft
        .metrics()
        .borrow_watched()
        .membership_config
        .membership()
        .get_node(&id)
        .cloned();
    let Some(node) = node else {
        return Err(ServiceError::Membership(MembershipError::Rejected {
            reason: format!("node {id} is not a member; add it as a learner first"),
        }));
    };
    app.join(JoinRequest {
        id,
        node,
        learner: false,
        // A promotion of a member, not a node asking with its own store.
        progress: None,
    })
    .await?;
    Ok(())
}

/// Moves leadership to voter `to`, or to the voter furthest along; any node hands the
/// request to the leader. Returns the leader afterwards.
pub async fn move_leader(
    app: &App,
    _admin: &Admin,
    to: Option<NodeId>,
) -> Result<NodeId, ServiceError> {
    Ok(app.move_leader(to).await?)
}

/// Removes a voter or a learner; any node hands the change to the leader.
pub async fn remove_member(app: &App, _admin: &Admin, id: NodeId) -> Result<(), ServiceError> {
    Ok(app.remove_member(id).await?)
}

/// Digests of this node's directory and receipt log at its applied index, so an operator
/// (or the chaos harness) can check that nodes converged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Digest {
    /// The applied index the digests are at.
    pub index: u64,
    /// How many rows.
    pub rows: usize,
    /// SHA-256 over the rows in key order.
    pub rows_sha256: String,
    /// How many receipts.
    pub receipts: usize,
    /// SHA-256 over the receipts.
    pub receipts_sha256: String,
    /// Leaves in the receipt log's Merkle tree.
    pub log_leaves: u64,
    /// Its root (base64): equal on every node at an equal number of leaves.
    pub log_root: String,
}

/// The digests of this node's state, once it has applied what `freshness` asks for (so a
/// convergence check can name the index every node must have reached).
pub async fn digest(
    app: &App,
    _admin: &Admin,
    freshness: &Freshness,
) -> Result<Digest, ServiceError> {
    read_barrier(app, freshness).await?;
    let (index, rows, rows_sha256) = {
        let catalogue = app.catalogue.read();
        (app.applied_index(), catalogue.len(), catalogue.digest())
    };
    let (receipts, receipts_sha256) = app.receipts.digest().map_err(ServiceError::internal)?;
    let log = app.receipts.log();
    let log_leaves = log.published_size();
    let log_root = log.root(log_leaves).map_err(ServiceError::internal)?;
    Ok(Digest {
        index,
        rows,
        rows_sha256,
        receipts,
        receipts_sha256,
        log_leaves,
        log_root: rowcall_proto::tlog::encode_hash(&log_root),
    })
}

/// A consistent backup of everything this node had applied when asked (see
/// `cluster::backup`).
pub async fn backup(app: &App, _admin: &Admin) -> Result<Backup, ServiceError> {
    crate::cluster::backup::take(app)
        .await
        .map_err(|e| match e {
            BackupError::NotBuilt { .. } => ServiceError::Busy {
                what: "snapshot builds",
                limit: 1,
            },
            other => ServiceError::internal(other),
        })
}

/// Builds a snapshot now (in the background) and purges the log behind it.
pub async fn snapshot(app: &App, _admin: &Admin) -> Result<(), ServiceError> {
    app.raft
        .trigger()
        .snapshot()
        .await
        .map_err(|e| ServiceError::internal(format!("snapshot trigger: {e}")))
}

/// The shortest and longest a join token may live, and how long one lives unless asked.
pub const JOIN_TOKEN_TTL_SECS: (u64, u64, u64) = (60, 7 * 24 * 3600, 3600);

/// A minted join token.
#[derive(Debug, Clone, Serialize)]
pub struct JoinToken {
    /// The token: a fresh node started with it and `--join` receives the cluster's peer
    /// credential from any member.
    pub token: String,
    /// When it expires (Unix milliseconds).
    pub expires_ms: u64,
}

/// Mints a join token valid for `ttl_secs` (default and bounds: [`JOIN_TOKEN_TTL_SECS`]).
pub fn join_token(
    app: &App,
    _admin: &Admin,
    ttl_secs: Option<u64>,
) -> Result<JoinToken, ServiceError> {
    let (shortest, longest, default) = JOIN_TOKEN_TTL_SECS;
    let ttl = ttl_secs.filter(|t| *t != 0).unwrap_or(default);
    if !(shortest..=longest).contains(&ttl) {
        return Err(ServiceError::BadRequest {
            message: format!("a join token lives {shortest} to {longest} seconds, not {ttl}"),
            hint: "leave ttl out for an hour",
        });
    }
    let Some(ca) = &app.peer_ca else {
        return Err(ServiceError::BadRequest {
            message: "this cluster uses operator certificates (--peer-ca): a new node needs its \
                      own certificate from the operator's CA, not a join token"
                .into(),
            hint: "issue the new node a certificate naming node-<id>.peer.rowcall (deploy/tls/make-certs.sh)",
        });
    };
    let expires_ms = crate::model::time::now_ms() + ttl * 1000;
    tracing::info!(ttl_secs = ttl, "minted a join token");
    Ok(JoinToken {
        token: ca.mint_token(expires_ms),
        expires_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strangers_see_no_cluster_id_incarnation_or_address() {
        let status = Status {
            node_id: 1,
            cluster_id: Some("c-1".into()),
            incarnation: Some("i-1".into()),
            role: "leader",
            leader: Some(1),
            term: 3,
            last_applied: 9,
            last_log_index: Some(9),
            snapshot_index: None,
            purged_index: None,
            stale: false,
            standing: "ok",
            standing_reason: None,
            members: vec![Member {
                id: 1,
                grpc_addr: Some("10.0.0.1:9090".into()),
                http_addr: Some("10.0.0.1:8080".into()),
                incarnation: Some("i-1".into()),
                voter: true,
                leader: true,
            }],
            learners: vec![],
            follower_lag: Default::default(),
            unanswered_appends: Default::default(),
            outbox: 0,
            resolver: ResolverStatus {
                mode: "lexical",
                model: None,
                rows_embedded: 0,
                rows_waiting: 0,
                rows_computed: 0,
                learn: false,
                members_ranking_otherwise: Default::default(),
            },
        };
        assert_eq!(seen_by(&Viewer::Admin, status.clone()), status);
        for viewer in &[
            Viewer::Anonymous,
            Viewer::Share {
                key: "HIDDEN".into(),
            },
            Viewer::Holder { name: "ci".into() },
        ] {
            let seen = serde_json::to_string(&seen_by(viewer, status.clone())).unwrap();
            for secret in ["c-1", "i-1", "10.0.0.1"] {
                assert!(!seen.contains(secret), "{viewer:?}: {seen}");
            }
            assert!(
                seen.contains("\"leader\":1") && seen.contains("\"term\":3"),
                "{seen}"
            );
            assert!(!viewer.addresses());
        }
    }
}
