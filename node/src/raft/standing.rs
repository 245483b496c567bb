//! Whether this node may take part in Raft: a node never votes, accepts appends or serves
//! reads with state it has lost.
//!
//! # What can go backwards, and who can tell
//!
//! Raft's safety rests on two promises each node keeps durably: the vote it cast in a term,
//! and the entries it acknowledged. A node whose data folder goes backwards breaks both
//! while looking perfectly healthy to itself:
//!
//! - **Raft state lost, identity kept** (`sled/` removed, `identity.json` left): caught
//!   locally. The identity lives in the same database as the vote, so the node comes back as
//!   a new incarnation ([`super::identity`]) that the cluster does not count until an
//!   operator re-admits it.
//! - **The whole folder restored from an older copy** (a volume snapshot, a machine backup):
//!   identity and Raft state agree with each other, both old. Only the peers know better:
//!   they remember what this incarnation told them. So every peer keeps, per member
//!   incarnation, a [`Witness`] of the highest term it saw that member state (in vote
//!   requests and answers, appends it sent as leader, append answers) and the highest index
//!   it saw it acknowledge at that term.
//!
//! # The check after a restart
//!
//! A node that restarts on Raft state (not a fresh folder, not the only member) starts
//! [`Standing::Verifying`]: elections off, and votes, appends and snapshots refused. It asks
//! every member what it saw of this incarnation (`Hello` answers carry it) and compares
//! with what its own store holds ([`Progress`]). It is [`Standing::Behind`] when a peer saw
//!
//! - a higher term than its stored vote (it forgot a vote, and could vote twice in a term),
//! - or, at the term of its stored vote, an acknowledged index past the end of its log (it
//!   forgot entries it acknowledged; at one term a leader only appends, so no legitimate
//!   truncation explains that — only a leader of a newer term, and so a newer vote, can
//!   truncate a follower's log).
//!
//! A behind node keeps refusing and says what to do: remove the member, then start the
//! node again on an empty folder with `--join`. It becomes [`Standing::Ok`] once every member
//! answered without contradiction, or once a majority of the voters (itself included) did
//! and [`Standing::Ok`]'s patience ran out — the members that stay silent are down, and a
//! down member remembers nothing to compare with anyway.
//!
//! # What this does not catch
//!
//! Witnesses live in memory: a peer that restarted since it last heard from this node has
//! nothing to say. If the only peers that saw a promise are down when an old copy comes back,
//! nobody alive can tell it from a crash-restart; the node then rejoins as what its store
//! holds. Keeping a node's folder from going backwards is the operator's side of the
//! contract (never restore one member from a copy; restore a *cluster* from a backup with
//! `--restore`); this check turns the common cases of breaking it into a refusal.

use std::collections::HashMap;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::NodeId;

/// How far a node's promises reach: the term of its vote, and the index it acknowledged (or,
/// for its own store, the end of its log) at that term.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// The term of the vote.
    pub term: u64,
    /// The highest index acknowledged at `term` (`None`: none).
    #[serde(default)]
    pub index: Option<u64>,
}

impl Progress {
    /// `self` raised by `other`: a higher term replaces both fields; at the same term the
    /// higher index counts.
    fn raise(&mut self, other: Progress) {
        if other.term > self.term {
            *self = other;
        } else if other.term == self.term {
            self.index = self.index.max(other.index);
        }
    }

    /// Why a store holding `self` cannot be the one that made the promises a peer saw as
    /// `seen`, if it cannot.
    pub fn contradicted_by(&self, seen: &Progress) -> Option<String> {
        if seen.term > self.term {
            return Some(format!(
                "a peer saw it at term {}, but its store holds a vote of term {} (a vote it cast is gone)",
                seen.term, self.term
            ));
        }
        if seen.term == self.term && seen.index > self.index {
            return Some(format!(
                "a peer saw it acknowledge index {} at term {}, but its log ends at {} (entries it acknowledged are gone)",
                seen.index.unwrap_or(0),
                seen.term,
                self.index.map_or_else(|| "nothing".into(), |i| i.to_string())
            ));
        }
        None
    }
}

/// What this node saw its peers promise, per peer incarnation (in memory).
#[derive(Debug, Default)]
pub struct Witness {
    seen: Mutex<HashMap<NodeId, (String, Progress)>>,
    /// Per joining incarnation, what had been seen of it when its last join request
    /// seemed to contradict it ([`Witness::judge_join`]).
    doubted: Mutex<HashMap<NodeId, (String, Progress)>>,
}

/// What a leader makes of the progress a member's incarnation reports as it (re)joins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinJudgement {
    /// Nothing seen contradicts it.
    Holds,
    /// What was seen goes further than the report, but the report may simply predate
    /// acknowledgements it sent while its request was on the way: ask again.
    Doubtful,
    /// A report made after this node's earlier doubt still falls short of what had been
    /// seen by then: its store went backwards. Why.
    Behind(String),
}

impl Witness {
    /// Records that `peer`, as `incarnation`, stated a vote of term `term`.
    pub fn saw_term(&self, peer: NodeId, incarnation: &str, term: u64) {
        self.saw(peer, incarnation, Progress { term, index: None });
    }

    /// Records that `peer`, as `incarnation`, acknowledged `index` at `term`.
    pub fn saw_ack(&self, peer: NodeId, incarnation: &str, term: u64, index: u64) {
        self.saw(
            peer,
            incarnation,
            Progress {
                term,
                index: Some(index),
            },
        );
    }

    fn saw(&self, peer: NodeId, incarnation: &str, progress: Progress) {
        if incarnation.is_empty() {
            return;
        }
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        match seen.get_mut(&peer) {
            Some((known, at)) if known == incarnation => at.raise(progress),
            // A new incarnation replaces the old one's record.
            _ => {
                seen.insert(peer, (incarnation.to_owned(), progress));
            }
        }
    }

    /// Judges `holds`, what `peer` as `incarnation` says its store holds as it asks to
    /// join (a join retried while the cluster was still adding it, or a node back on an
    /// older copy of its folder). A joiner still taking entries acknowledges them while its
    /// request is on the way, so a report short of what was seen is only doubtful at first:
    /// what was seen then is kept, and the joiner asked to report again. Its next report is
    /// made after that, so it must reach everything kept — unless its store went backwards.
    pub fn judge_join(&self, peer: NodeId, incarnation: &str, holds: Progress) -> JoinJudgement {
        let mut doubted = self.doubted.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, kept)) = doubted.get(&peer).filter(|(known, _)| known == incarnation) {
            if let Some(contradiction) = holds.contradicted_by(kept) {
                return JoinJudgement::Behind(contradiction);
            }
        }
        match self.of(peer, incarnation) {
            Some(seen) if holds.contradicted_by(&seen).is_some() => {
                doubted.insert(peer, (incarnation.to_owned(), seen));
                JoinJudgement::Doubtful
            }
            _ => {
                doubted.remove(&peer);
                JoinJudgement::Holds
            }
        }
    }

    /// What was seen of `peer` as `incarnation`.
    pub fn of(&self, peer: NodeId, incarnation: &str) -> Option<Progress> {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.get(&peer)
            .filter(|(known, _)| known == incarnation)
            .map(|(_, at)| *at)
    }
}

/// Whether this node takes part in Raft.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// It does: its state is what it promised.
    Ok,
    /// Restarted on Raft state: asking its peers what it promised them before it takes part.
    Verifying,
    /// Its state is older than what it promised its peers: it stays out until re-admitted.
    Behind {
        /// What contradicted it, and what to do.
        reason: String,
    },
}

impl Standing {
    /// The name `GET /api/cluster` shows.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Verifying => "verifying",
            Self::Behind { .. } => "behind",
        }
    }

    /// Why it is not [`Standing::Ok`], for an operator.
    pub fn reason(&self) -> Option<String> {
        match self {
            Self::Ok => None,
            Self::Verifying => Some(
                "restarted: asking the members what this node promised them before it votes, \
                 accepts entries or serves reads"
                    .into(),
            ),
            Self::Behind { reason } => Some(reason.clone()),
        }
    }
}

/// The refusal a behind node gives: what contradicted it and what to do.
pub fn behind_reason(me: NodeId, peer: NodeId, contradiction: &str) -> String {
    format!(
        "node {me}'s data folder is older than what it promised its peers: node {peer} says \
         {contradiction}. It was restored from an older copy (or lost writes on its disk), so \
         it must not vote or serve. Remove it (DELETE /api/cluster/members/{me} with the admin \
         key, on any member), then start it on an empty data folder with --join <any member>"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(term: u64, index: Option<u64>) -> Progress {
        Progress { term, index }
    }

    /// A joiner that acknowledged entries while its report was on the way is asked again,
    /// and admitted once its new report reaches what had been seen; one whose store went
    /// backwards is refused on its second report, which still falls short.
    #[test]
    fn a_report_short_of_what_was_seen_is_doubted_once_then_refused_if_it_stays_short() {
        let witness = Witness::default();
        witness.saw_ack(3, "inc-a", 1, 8);
        let short = at(1, Some(7));
        assert_eq!(
            witness.judge_join(3, "inc-a", short),
            JoinJudgement::Doubtful
        );
        // It took more meanwhile (seen: 10), but its new report reaches the 8 kept.
        witness.saw_ack(3, "inc-a", 1, 10);
        assert_eq!(
            witness.judge_join(3, "inc-a", at(1, Some(9))),
            JoinJudgement::Doubtful
        );
        assert_eq!(
            witness.judge_join(3, "inc-a", at(1, Some(10))),
            JoinJudgement::Holds
        );

        // An old copy: the same short report twice.
        let witness = Witness::default();
        witness.saw_ack(3, "inc-a", 1, 8);
        assert_eq!(
            witness.judge_join(3, "inc-a", short),
            JoinJudgement::Doubtful
        );
        let second = witness.judge_join(3, "inc-a", short);
        assert!(
            matches!(&second, JoinJudgement::Behind(why) if why.contains("acknowledge index 8")),
            "{second:?}"
        );
        // Another incarnation of the same id is judged on its own.
        assert_eq!(witness.judge_join(3, "inc-b", short), JoinJudgement::Holds);
    }

    #[test]
    fn a_store_behind_a_promise_is_caught_and_a_legitimate_one_is_not() {
        // Forgot a vote.
        assert!(at(4, Some(90)).contradicted_by(&at(5, None)).is_some());
        // Forgot entries acknowledged at its own term.
        assert!(at(5, Some(90)).contradicted_by(&at(5, Some(100))).is_some());
        assert!(at(5, None).contradicted_by(&at(5, Some(1))).is_some());
        // Truncated by a newer leader after acknowledging: the newer vote explains it.
        assert!(at(6, Some(95)).contradicted_by(&at(5, Some(100))).is_none());
        // Exactly what it promised, or more.
        assert!(at(5, Some(100))
            .contradicted_by(&at(5, Some(100)))
            .is_none());
        assert!(at(5, Some(120))
            .contradicted_by(&at(5, Some(100)))
            .is_none());
        assert!(at(5, None).contradicted_by(&at(5, None)).is_none());
    }

    #[test]
    fn a_witness_keeps_the_highest_promise_of_each_incarnation() {
        let witness = Witness::default();
        witness.saw_ack(2, "i1", 3, 7);
        witness.saw_ack(2, "i1", 3, 10);
        witness.saw_ack(2, "i1", 3, 8);
        assert_eq!(witness.of(2, "i1"), Some(at(3, Some(10))));
        witness.saw_ack(2, "i1", 2, 50);
        assert_eq!(
            witness.of(2, "i1"),
            Some(at(3, Some(10))),
            "an older term's acknowledgement raises nothing"
        );
        witness.saw_term(2, "i1", 4);
        assert_eq!(witness.of(2, "i1"), Some(at(4, None)));
        witness.saw_term(2, "i1", 3);
        assert_eq!(witness.of(2, "i1"), Some(at(4, None)));
        assert_eq!(witness.of(2, "i2"), None, "another incarnation");
        witness.saw_term(2, "i2", 1);
        assert_eq!(witness.of(2, "i2"), Some(at(1, None)));
        assert_eq!(witness.of(2, "i1"), None, "replaced by the new incarnation");
        witness.saw_term(5, "", 9);
        assert_eq!(
            witness.of(5, ""),
            None,
            "no incarnation, nothing to remember"
        );
    }
}
