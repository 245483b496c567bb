//! Whether this node is in touch with a leader that still has its quorum. The basis of
//! `x-rowcall-stale`, of `/readyz`, and of failing writes fast.
//!
//! A leader counts, per voter, when it sent the latest message that voter accepted it for
//! (a granted vote, an accepted append or snapshot chunk); its quorum instant is the latest
//! time by which a majority had. It tells followers how old that instant is on every
//! append, and a follower counts contact only from the leader and term it currently follows
//! and only while the leader's quorum is recent. So a leader cut off with a minority keeps
//! its followers fresh for no longer than it is itself:
//!
//! ```text
//!  {L, F} | {A, B, C}     L's quorum instant stops at the split; F hears "quorum age 0.3 s,
//!                         0.5 s, ..." and turns stale once it passes `stale_after`
//! ```
//!
//! `stale_after` is openraft's leader lease (the longest election timeout): a voter refuses
//! to vote for anyone until that long after it last heard from its leader, so the majority
//! cannot have elected a new leader before the old leader's followers have turned stale.
//! Writes fail fast only after twice that ([`Liveness::cut_off_after`]): a write that is
//! tried needlessly is still safe (Raft decides), while one refused needlessly is lost
//! availability, and a loaded machine can stall a heartbeat for a good part of a lease.
//!
//! A leader also counts, per peer, the appends that went unanswered within their bound (see
//! `AppendInFlight` in [`super::network`]), which `/api/cluster` shows.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::NodeId;

/// The leader a follower last counted contact from.
#[derive(Debug, Clone, Copy)]
struct LeaderContact {
    leader: NodeId,
    term: u64,
    /// When the leader last had a quorum (on this node's clock).
    quorum_at: Instant,
}

/// Contact with the cluster, as this node sees it.
#[derive(Debug)]
pub struct Liveness {
    stale_after: Duration,
    /// Per voter: when this node (as leader) sent the latest message the voter accepted.
    acks: Mutex<HashMap<NodeId, Instant>>,
    leader: Mutex<Option<LeaderContact>>,
    /// Per peer: AppendEntries this node sent as leader that went unanswered within their
    /// time bound (openraft's heartbeat interval), since it started.
    unanswered: Mutex<BTreeMap<NodeId, u64>>,
}

impl Liveness {
    /// A tracker that calls contact older than `stale_after` lost.
    pub fn new(stale_after: Duration) -> Self {
        Self {
            stale_after,
            acks: Mutex::default(),
            leader: Mutex::default(),
            unanswered: Mutex::default(),
        }
    }

    /// `peer` accepted this node as leader in answer to a message sent at `sent`.
    pub fn acknowledged(&self, peer: NodeId, sent: Instant) {
        let mut acks = self.acks.lock().unwrap_or_else(|p| p.into_inner());
        let at = acks.entry(peer).or_insert(sent);
        // Answers may arrive out of order; keep the latest send time.
        *at = (*at).max(sent);
    }

    /// The latest instant by which a majority of `voters` had acknowledged this node
    /// (`me` acknowledges itself now), if a majority ever has.
    pub fn quorum_at(
        &self,
        me: NodeId,
        voters: impl IntoIterator<Item = NodeId>,
    ) -> Option<Instant> {
        let now = Instant::now();
        let acks = self.acks.lock().unwrap_or_else(|p| p.into_inner());
        let mut times: Vec<Option<Instant>> = voters
            .into_iter()
            .map(|v| {
                if v == me {
                    Some(now)
                } else {
                    acks.get(&v).copied()
                }
            })
            .collect();
        if times.is_empty() {
            return None;
        }
        // Newest first; the majority-th newest is when a majority last stood behind us.
        times.sort_unstable_by(|a, b| b.cmp(a));
        times[times.len() / 2]
    }

    /// How long ago a majority of `voters` last acknowledged this node, for its followers.
    pub fn quorum_age(
        &self,
        me: NodeId,
        voters: impl IntoIterator<Item = NodeId>,
    ) -> Option<Duration> {
        self.quorum_at(me, voters).map(|at| at.elapsed())
    }

    /// Contact older than this marks reads stale.
    pub fn stale_after(&self) -> Duration {
        self.stale_after
    }

    /// Contact older than this makes writes fail at once.
    pub fn cut_off_after(&self) -> Duration {
        self.stale_after * 2
    }

    /// The leader `leader` of `term` reached us, saying a quorum acknowledged it
    /// `quorum_age` ago.
    pub fn leader_contacted(&self, leader: NodeId, term: u64, quorum_age: Duration) {
        let Some(quorum_at) = Instant::now().checked_sub(quorum_age) else {
            return;
        };
        let mut contact = self.leader.lock().unwrap_or_else(|p| p.into_inner());
        // A late message from an older term must not displace the current leader's contact.
        if contact.is_some_and(|c| c.term > term) {
            return;
        }
        *contact = Some(LeaderContact {
            leader,
            term,
            quorum_at,
        });
    }

    /// When `leader`, followed at `term`, last had a quorum, as it told us. Contact from any
    /// other leader or term does not count.
    pub fn leader_quorum_at(&self, leader: NodeId, term: u64) -> Option<Instant> {
        let contact = *self.leader.lock().unwrap_or_else(|p| p.into_inner());
        contact
            .filter(|c| c.leader == leader && c.term == term)
            .map(|c| c.quorum_at)
    }

    /// An AppendEntries to `peer` went unanswered within its time bound; the count so far.
    pub fn append_unanswered(&self, peer: NodeId) -> u64 {
        let mut unanswered = self.unanswered.lock().unwrap_or_else(|p| p.into_inner());
        let count = unanswered.entry(peer).or_default();
        *count += 1;
        *count
    }

    /// Per peer, the AppendEntries that went unanswered within their time bound.
    pub fn unanswered_appends(&self) -> BTreeMap<NodeId, u64> {
        self.unanswered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quorum_instant_is_when_a_majority_last_acknowledged() {
        let liveness = Liveness::new(Duration::from_secs(60));
        let long_ago = Instant::now() - Duration::from_secs(30);
        let lately = Instant::now() - Duration::from_secs(1);
        // Five voters: only F (2) answers lately, A (3) long ago, B and C never.
        liveness.acknowledged(2, lately);
        liveness.acknowledged(3, long_ago);
        let at = liveness.quorum_at(1, [1, 2, 3, 4, 5]).unwrap();
        assert_eq!(at, long_ago, "the third newest of five");
        assert_eq!(liveness.quorum_at(1, [1, 2, 4, 5, 6]), None);
        // Three voters: self and F are a majority.
        assert_eq!(liveness.quorum_at(1, [1, 2, 3]), Some(lately));
        // Out-of-order answers keep the newest.
        liveness.acknowledged(2, long_ago);
        assert_eq!(liveness.quorum_at(1, [1, 2, 3]), Some(lately));
    }

    #[test]
    fn only_the_followed_leader_and_term_with_a_recent_quorum_count() {
        let liveness = Liveness::new(Duration::from_secs(5));
        let age = |at: Option<Instant>| at.map(|at| at.elapsed());
        liveness.leader_contacted(1, 7, Duration::from_millis(100));
        assert!(age(liveness.leader_quorum_at(1, 7)).unwrap() >= Duration::from_millis(100));
        assert_eq!(liveness.leader_quorum_at(1, 8), None, "another term");
        assert_eq!(liveness.leader_quorum_at(2, 7), None, "another leader");
        // A leader whose quorum is long gone keeps talking: its quorum instant says so.
        liveness.leader_contacted(1, 7, Duration::from_secs(10));
        assert!(age(liveness.leader_quorum_at(1, 7)).unwrap() > liveness.stale_after());
        // A straggler from an older term does not replace the newer contact.
        liveness.leader_contacted(2, 8, Duration::ZERO);
        liveness.leader_contacted(1, 7, Duration::ZERO);
        assert!(liveness.leader_quorum_at(2, 8).is_some());
    }
}
