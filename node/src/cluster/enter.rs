//! How a node on a fresh data folder becomes part of a cluster.
//!
//! Founding a cluster is explicit: `--bootstrap` (`[cluster] bootstrap = true`). A node told
//! of no peers at all founds a one-node cluster too, which is the embedded default
//! (`rowcall-node` with no flags). A node told about peers (`--join`) never founds one by
//! itself: it asks each peer who it is (`Hello`), learns the cluster id from one that belongs
//! to a cluster, and asks it to be admitted.
//!
//! `--bootstrap` together with `--join` is for deployments that start every node the same
//! way (a StatefulSet): the node founds only once every listed peer answers and none belongs
//! to a cluster, and defers to a peer with a lower id that is also waiting to found. If a
//! peer already belongs to a cluster, the node joins it instead — so a node that lost its
//! data folder asks to rejoin (and is refused until its old self is removed) rather than
//! founding a second cluster that would take writes and lose them.

use crate::raft::WatchReceiver as _;
use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::app::App;
use crate::config::ClusterConfig;
use crate::raft::calls::{JoinRequest, MembershipError};
use crate::raft::identity::{new_cluster_id, IdentityError};
use crate::raft::network::Dest;
use crate::raft::standing::Progress;
use crate::raft::NodeInfo;

/// How long a fresh node keeps trying to join (or waits for its peers before founding)
/// before it gives up; a supervisor restarts it.
const ENTER_WITHIN: Duration = Duration::from_secs(120);
/// How long one peer may take to answer `Hello` or a join.
const HELLO_TIMEOUT: Duration = Duration::from_secs(2);
const JOIN_TIMEOUT: Duration = Duration::from_secs(60);

/// What a fresh node does, from its configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Found a one-node cluster at once.
    Found,
    /// Join through any of these members.
    Join(Vec<String>),
    /// Found once every one of these peers answers and none belongs to a cluster; join the
    /// cluster one of them belongs to otherwise.
    FoundWithPeers(Vec<String>),
}

impl Plan {
    /// The plan `config` describes.
    pub fn of(config: &ClusterConfig) -> Plan {
        match (config.bootstrap, config.join.is_empty()) {
            (_, true) => Plan::Found,
            (false, false) => Plan::Join(config.join.clone()),
            (true, false) => Plan::FoundWithPeers(config.join.clone()),
        }
    }
}

/// How the node entered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entered {
    /// It founded a new cluster.
    Founded,
    /// It joined an existing one.
    Joined,
}

/// Why a fresh node could not found or join a cluster.
#[derive(Debug, thiserror::Error)]
pub enum EnterError {
    /// The cluster refused the join (another cluster, or the id is a member on another data
    /// folder); the reason says what to do.
    #[error("joining through {target} was refused: {reason}")]
    Refused {
        /// The peer asked.
        target: String,
        /// Why.
        reason: String,
    },
    /// No peer admitted the node in time.
    #[error("could not join the cluster within {}s: {last}", ENTER_WITHIN.as_secs())]
    NotJoined {
        /// The last thing that went wrong.
        last: String,
    },
    /// Founding waited in vain for every peer to answer.
    #[error("not founding a cluster: peers {waiting:?} did not answer within {}s, and a node founds only when every peer it was given answers and none belongs to a cluster", ENTER_WITHIN.as_secs())]
    PeersSilent {
        /// Peers that never answered.
        waiting: Vec<String>,
    },
    /// The identity file could not be updated.
    #[error("data folder identity: {0}")]
    Identity(#[from] IdentityError),
    /// Raft refused to initialise.
    #[error("initialising the cluster: {0}")]
    Initialise(String),
    /// The folder began joining a cluster and was never admitted: it must not found one.
    #[error("node {id} began joining cluster {cluster} and was not admitted, so it does not found a cluster of its own: start it with --join <any member of cluster {cluster}> (or on an empty data folder to found a new cluster)")]
    Unadmitted {
        /// This node.
        id: crate::raft::NodeId,
        /// The cluster it asked to join.
        cluster: String,
    },
    /// The folder's Raft state is gone but its identity survived: the node was a member and
    /// must rejoin its cluster, never found one.
    #[error("node {id} was a member of cluster {cluster} (incarnation {incarnation}) but its Raft state is gone, so it comes back as a new incarnation that must be re-admitted, and it must not found a cluster of its own. Remove the old member (DELETE /api/cluster/members/{id} with the admin key, on any member of cluster {cluster}), then start this node with --join <any member>")]
    LostState {
        /// This node.
        id: crate::raft::NodeId,
        /// The cluster it belonged to.
        cluster: String,
        /// The incarnation it was.
        incarnation: String,
    },
}

/// Brings a node on a fresh data folder into a cluster, by `plan`. `me` says how to reach
/// this node; its cluster id and incarnation are filled in here.
pub async fn enter(
    app: &App,
    plan: &Plan,
    me: &NodeInfo,
    learner: bool,
) -> Result<Entered, EnterError> {
    if let Some(lost) = app.identity.lost() {
        // Whatever the start command says, such a node may only rejoin its own cluster.
        let peers = match plan {
            Plan::Found => &[][..],
            Plan::Join(peers) | Plan::FoundWithPeers(peers) => peers.as_slice(),
        };
        if peers.is_empty() {
            return Err(EnterError::LostState {
                id: app.node_id,
                cluster: lost.cluster_id.clone(),
                incarnation: lost.incarnation.clone(),
            });
        }
        return join(app, peers, me, learner)
            .await
            .map(|()| Entered::Joined);
    }
    match plan {
        Plan::Found => found(app, me).await.map(|()| Entered::Founded),
        Plan::Join(peers) => join(app, peers, me, learner)
            .await
            .map(|()| Entered::Joined),
        Plan::FoundWithPeers(peers) => found_with_peers(app, peers, me, learner).await,
    }
}

/// Founds a one-node cluster with a new cluster id. The id is recorded in the identity only
/// once Raft holds the founding membership (which carries it too, so a crash in between
/// loses nothing: the start adopts it from there), so a stored cluster id on a folder
/// without Raft state always means an unfinished *join*, never a founding.
async fn found(app: &App, me: &NodeInfo) -> Result<(), EnterError> {
    if let Some(cluster) = app.identity.cluster_id() {
        return Err(EnterError::Unadmitted {
            id: app.node_id,
            cluster,
        });
    }
    let cluster_id = new_cluster_id();
    let me = NodeInfo {
        cluster_id: cluster_id.clone(),
        incarnation: app.identity.incarnation(),
        ..me.clone()
    };
    app.raft
        .initialize(BTreeMap::from([(app.node_id, me)]))
        .await
        .map_err(|e| EnterError::Initialise(e.to_string()))?;
    app.identity.set_cluster(&cluster_id, false)?;
    tracing::info!(id = app.node_id, cluster = %cluster_id, "founded a new one-node cluster");
    Ok(())
}

/// What one round of asking the peers found.
#[derive(Debug, Default)]
struct Survey {
    /// A peer that belongs to a cluster, and that cluster.
    member: Option<(String, String)>,
    /// Peers that did not answer.
    silent: Vec<String>,
    /// A peer with a lower id that is also waiting to found.
    defer_to: Option<String>,
}

async fn survey(app: &App, peers: &[String]) -> Survey {
    let mut survey = Survey::default();
    for peer in peers {
        match app.network.hello(peer, HELLO_TIMEOUT).await {
            Ok(hello) => match hello.cluster_id {
                Some(cluster) if hello.member => {
                    survey.member.get_or_insert((peer.clone(), cluster));
                }
                // Founded a moment ago and not yet a member of its own membership, or
                // joined and not yet admitted: not a cluster to join through yet, and no
                // reason to found another either. Waited for as a silent peer is.
                Some(_) => survey.silent.push(peer.clone()),
                None if hello.node_id < app.node_id && hello.founding => {
                    survey.defer_to.get_or_insert(peer.clone());
                }
                None => {}
            },
            Err(e) => {
                tracing::debug!(peer, error = %e, "peer did not answer hello");
                survey.silent.push(peer.clone());
            }
        }
    }
    survey
}

/// Asks the peers until one that belongs to a cluster admits this node.
async fn join(app: &App, peers: &[String], me: &NodeInfo, learner: bool) -> Result<(), EnterError> {
    let deadline = Instant::now() + ENTER_WITHIN;
    let mut delay = Duration::from_millis(100);
    loop {
        let survey = survey(app, peers).await;
        let last = match survey.member {
            Some((target, cluster)) => {
                match join_through(app, &target, &cluster, me, learner).await {
                    Ok(()) => return Ok(()),
                    Err(MembershipError::Rejected { reason }) => {
                        return Err(EnterError::Refused { target, reason })
                    }
                    Err(e) => format!("{target}: {e}"),
                }
            }
            None => format!("no peer of {peers:?} belongs to a cluster yet"),
        };
        if Instant::now() >= deadline {
            return Err(EnterError::NotJoined { last });
        }
        tracing::info!(reason = %last, "not admitted yet; retrying");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}

/// Takes the cluster id `cluster` (this node has no Raft state yet, so an id stored by an
/// earlier, unfinished join may be replaced) and asks `target` to admit this node.
async fn join_through(
    app: &App,
    target: &str,
    cluster: &str,
    me: &NodeInfo,
    learner: bool,
) -> Result<(), MembershipError> {
    if let Some(lost) = app.identity.lost() {
        if lost.cluster_id != cluster {
            return Err(MembershipError::Rejected {
                reason: format!(
                    "this node belonged to cluster {}, and {target} belongs to cluster {cluster}",
                    lost.cluster_id
                ),
            });
        }
    }
    app.identity
        .set_cluster(cluster, true)
        .map_err(|e| MembershipError::Unavailable {
            reason: e.to_string(),
        })?;
    let request = JoinRequest {
        id: app.node_id,
        node: NodeInfo {
            cluster_id: cluster.to_owned(),
            incarnation: app.identity.incarnation(),
            ..me.clone()
        },
        learner,
        progress: Some(held(app)),
    };
    app.network
        .join(Dest::address(target), &request, JOIN_TIMEOUT)
        .await?;
    tracing::info!(target, cluster, learner, "joined the cluster");
    Ok(())
}

/// What this node's Raft state holds now: its vote's term and the end of its log.
fn held(app: &App) -> Progress {
    let metrics = app.raft.metrics();
    let metrics = metrics.borrow_watched();
    Progress {
        term: metrics.vote.leader_id.term,
        index: metrics.last_log_index,
    }
}

/// Founds once every peer answers and none belongs to a cluster (and no peer with a lower
/// id is waiting to found); joins a peer's cluster as soon as one belongs to one.
async fn found_with_peers(
    app: &App,
    peers: &[String],
    me: &NodeInfo,
    learner: bool,
) -> Result<Entered, EnterError> {
    app.identity.set_founding(true);
    let deadline = Instant::now() + ENTER_WITHIN;
    let result = loop {
        let survey = survey(app, peers).await;
        if survey.member.is_some() {
            app.identity.set_founding(false);
            break join(app, peers, me, learner)
                .await
                .map(|()| Entered::Joined);
        }
        if survey.silent.is_empty() && survey.defer_to.is_none() {
            break found(app, me).await.map(|()| Entered::Founded);
        }
        if Instant::now() >= deadline {
            break Err(EnterError::PeersSilent {
                waiting: survey.silent,
            });
        }
        match &survey.defer_to {
            Some(peer) => tracing::info!(
                peer,
                "a peer with a lower id founds the cluster; waiting to join it"
            ),
            None => {
                tracing::info!(waiting = ?survey.silent, "waiting for every peer to answer before founding")
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    app.identity.set_founding(false);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_node_told_of_no_peers_founds_on_its_own() {
        let mut config = ClusterConfig::default();
        assert_eq!(Plan::of(&config), Plan::Found);
        config.bootstrap = true;
        assert_eq!(Plan::of(&config), Plan::Found);
        config.join = vec!["10.0.0.1:9090".into()];
        assert_eq!(
            Plan::of(&config),
            Plan::FoundWithPeers(vec!["10.0.0.1:9090".into()])
        );
        config.bootstrap = false;
        assert_eq!(Plan::of(&config), Plan::Join(vec!["10.0.0.1:9090".into()]));
    }
}
