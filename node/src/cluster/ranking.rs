//! Whether every member ranks asks as this node does.
//!
//! Rows and receipts are replicated, but each node ranks with its own resolver settings: the
//! model (by fingerprint), how it embeds queries, and whether it learns from use. Members set
//! up alike rank every ask identically (DESIGN §6); a member set up otherwise — a model
//! folder replaced on one machine, `learn = false` on one node — answers the same ask with
//! another ranking, and nothing else would show it: every answer is well formed.
//!
//! So every node asks each member how it ranks (its [`Hello`](crate::raft::calls::Hello)
//! says), once every [`EVERY`], soon again after a member did not answer, and at once when
//! the membership changes; and it says which members rank otherwise in `/api/cluster`
//! (`resolver.members_ranking_otherwise`), the gRPC status, the gauge
//! `rowcall_resolver_members_ranking_otherwise` and a warning in its log. Members of a
//! version that does not say how it ranks are left out: that is unknown, not different.
//! The same answers carry the members' clocks, which check this node's
//! ([`crate::model::time`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::app::App;
pub use crate::catalogue::setup::{RankingPeers, RankingSetup};
use crate::raft::calls::Hello;
use crate::raft::NodeId;

/// How often every member is asked while all answer.
pub const EVERY: Duration = Duration::from_secs(30);
/// How soon a member that did not answer is asked again.
const RETRY: Duration = Duration::from_secs(2);
/// How often the membership is looked at for new members.
const LOOK: Duration = Duration::from_millis(500);
/// How long one member may take to answer.
const HELLO_TIMEOUT: Duration = Duration::from_secs(2);

impl RankingSetup {
    /// This node's setup.
    pub fn of(app: &App) -> Self {
        let model = app
            .catalogue
            .read()
            .semantic()
            .map(|s| s.embedder().info().clone());
        Self {
            mode: if model.is_some() { "hybrid" } else { "lexical" }.to_owned(),
            query: model.as_ref().map(|m| m.query),
            weights: model.as_ref().map(|m| m.weights),
            revision: model
                .as_ref()
                .map(|_| crate::catalogue::resolver::HYBRID_REVISION),
            model: model.map(|m| m.fingerprint),
            learn: app.config.resolver.learn,
        }
    }
}

/// What one round of asking found.
struct Round {
    /// Members that answered or kept their last known setup, ranking otherwise.
    otherwise: BTreeMap<NodeId, RankingSetup>,
    /// Whether every member answered.
    complete: bool,
}

/// Asks every other member how it ranks. A member that does not answer keeps what it said
/// last.
async fn ask_members(
    app: &App,
    mine: &RankingSetup,
    members: &BTreeSet<NodeId>,
    before: &BTreeMap<NodeId, RankingSetup>,
) -> Round {
    let membership = app.membership();
    let mut round = Round {
        otherwise: BTreeMap::new(),
        complete: true,
    };
    for &id in members {
        let Some(node) = membership.get_node(&id) else {
            continue;
        };
        match ask_member(app, id, &node.grpc_addr, HELLO_TIMEOUT).await {
            Some(hello) => {
                if let Some(theirs) = hello.ranking.filter(|theirs| theirs != mine) {
                    round.otherwise.insert(id, theirs);
                }
            }
            None => {
                round.complete = false;
                if let Some(last) = before.get(&id) {
                    round.otherwise.insert(id, last.clone());
                }
            }
        }
    }
    round
}

/// Asks member `id` at `addr` who it is (within `timeout`); an answer from that member
/// also checks this node's clock against the member's ([`crate::model::time`]).
pub async fn ask_member(app: &App, id: NodeId, addr: &str, timeout: Duration) -> Option<Hello> {
    let sent_ms = crate::model::time::raw_now_ms();
    let hello = app.network.hello(addr, timeout).await.ok()?;
    if hello.node_id != id {
        return None;
    }
    let received_ms = crate::model::time::raw_now_ms();
    crate::model::time::observe_peer(id, sent_ms, hello.wall_ms, received_ms);
    Some(hello)
}

/// Asks every other member once, all at once, each within `timeout`: before a restarted
/// node serves anything, so that it never stamps by a clock that jumped while it was down
/// ([`crate::model::time`]). Returns the answers, which are also the first round of the
/// restart check ([`super::verify`]); members that do not answer are left to later rounds.
pub async fn check_clock(app: &App, timeout: Duration) -> Vec<(NodeId, Hello)> {
    hello_members(app, other_members(app), timeout).await
}

/// [`ask_member`] for each of `ids`, all at once; the answers of those that answered.
pub async fn hello_members(
    app: &App,
    ids: impl IntoIterator<Item = NodeId>,
    timeout: Duration,
) -> Vec<(NodeId, Hello)> {
    let membership = app.membership();
    let asks = ids.into_iter().filter_map(|id| {
        let addr = membership.get_node(&id)?.grpc_addr.clone();
        Some(async move { Some((id, ask_member(app, id, &addr, timeout).await?)) })
    });
    futures_util::future::join_all(asks)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// The other members, by id.
fn other_members(app: &App) -> BTreeSet<NodeId> {
    app.membership()
        .nodes()
        .map(|(id, _)| *id)
        .filter(|id| *id != app.node_id)
        .collect()
}

/// Keeps [`App::ranking_peers`] current until `stop` turns true (see the module
/// documentation).
pub async fn run(app: &App, mut stop: watch::Receiver<bool>) {
    let mut asked: Option<(Instant, BTreeSet<NodeId>, bool)> = None;
    loop {
        let members = other_members(app);
        let due = match &asked {
            None => true,
            Some((at, before, complete)) => {
                *before != members || at.elapsed() >= if *complete { EVERY } else { RETRY }
            }
        };
        if due {
            let mine = RankingSetup::of(app);
            let before = app.ranking_peers.otherwise();
            let round = ask_members(app, &mine, &members, &before).await;
            report(&mine, &before, &round.otherwise);
            app.ranking_peers.replace(round.otherwise);
            asked = Some((Instant::now(), members, round.complete));
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(LOOK) => {}
        }
    }
}

/// Logs each member that began or ceased to rank otherwise.
fn report(
    mine: &RankingSetup,
    before: &BTreeMap<NodeId, RankingSetup>,
    now: &BTreeMap<NodeId, RankingSetup>,
) {
    for (id, theirs) in now {
        if before.get(id) != Some(theirs) {
            tracing::warn!(
                member = id,
                theirs = %theirs,
                ours = %mine,
                "node {id} ranks asks otherwise than this node ({theirs}; here: {mine}): the \
                 same ask gets another ranking there. Give every node the same [resolver] \
                 model, weights, query_embedding and learn settings"
            );
        }
    }
    for id in before.keys().filter(|id| !now.contains_key(id)) {
        tracing::info!(member = id, "node {id} ranks asks as this node does again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::embed::{QueryMode, Weights};

    #[test]
    fn a_setup_reads_as_an_operator_would_write_it() {
        let lexical = RankingSetup {
            mode: "lexical".into(),
            model: None,
            query: None,
            learn: true,
            weights: None,
            revision: None,
        };
        assert_eq!(lexical.to_string(), "words only, learning from use on");
        let fast = RankingSetup {
            mode: "hybrid".into(),
            model: Some("0123456789abcdef".into()),
            query: Some(QueryMode::Static),
            learn: false,
            weights: Some(Weights::F32),
            revision: Some(2),
        };
        assert_eq!(
            fast.to_string(),
            "model 0123456789abcdef with static query vectors, ranking revision 2, learning from use off"
        );
        let q8 = RankingSetup {
            weights: Some(Weights::Q8),
            query: Some(QueryMode::Model),
            ..fast.clone()
        };
        assert_ne!(q8, fast, "weights take part in the comparison");
        assert_eq!(
            q8.to_string(),
            "model 0123456789abcdef, q8 weights, ranking revision 2, learning from use off"
        );
        let older = RankingSetup {
            revision: None,
            ..q8.clone()
        };
        assert_ne!(older, q8, "a build that ranks otherwise is told apart");
        assert!(older.to_string().contains("ranking revision 1"), "{older}");
    }

    #[test]
    fn a_hello_from_a_version_that_does_not_say_leaves_the_setup_unknown() {
        let old = r#"{"node_id":2,"incarnation":"i","cluster_id":null,"member":true,
                      "leader":1,"founding":false,"signing_key":""}"#;
        let hello: crate::raft::calls::Hello = serde_json::from_str(old).unwrap();
        assert_eq!(hello.ranking, None);
    }
}
