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
//!
//! ## What the bound is, and what it is counted from
//!
//! Write `Q` for the leader's quorum instant: a majority accepted messages the leader sent at
//! or after `Q`. Each of those voters took its message at or after `Q` and, from the moment
//! it handled it, refuses every vote and stands for no election for a lease (openraft 0.9:
//! `handle_vote_req` and the election timer both count from that moment). Any new leader
//! needs a vote from one of them, so **no other leader exists before `Q + lease`**.
//!
//! A follower cannot read `Q`: clocks are not shared. The leader sends `A = S - Q`, the
//! quorum's age when it sent the message at `S` (its clock), and the follower counts
//! `Q' = R - A`, where `R` is when the message *arrived* (the follower's clock, taken before
//! the message is decoded or handed to Raft). Then `Q' - Q = R - S`, the message's time in
//! transit, and the follower is fresh until `Q' + lease = Q + lease + (R - S)`: it may
//! overlap a successor by that transit and by no more. Everything after the arrival is on
//! the follower's own side and is counted against it: the append, the vote save, their
//! fdatasyncs, a stalled disk. (Counting from when the handling *ended* instead, as this
//! node once did, stretched freshness by the whole stall: a follower whose disk froze for
//! seconds on one append read fresh for a lease after it thawed, while the majority had
//! long elected someone else.) Transit cannot be measured one way, so it is neither
//! subtracted nor known: on a healthy link it is the network's one-way delay (well under a
//! millisecond on a LAN), and a link that holds messages for `d` stretches freshness by `d`.
//! Within one leader and term the newest `Q'` counts, since messages finish handling in any
//! order. Closing the transit gap too would take a time the follower itself sent (a lease
//! counted from the follower's own request, as in lease-based reads): a change to the peer
//! protocol, not made here.
//!
//! Writes fail fast only after twice the lease ([`Liveness::cut_off_after`]): a write that is
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
    /// When the latest message of this leader and term arrived, whatever its quorum age:
    /// from then on, openraft's lease keeps this node from voting for another candidate.
    heard_at: Instant,
}

/// What a follower knows of its leader's latest message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contact {
    /// When it arrived.
    pub heard: Instant,
    /// When the leader last had a quorum, by what it said (never after `heard`).
    pub backed: Instant,
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

    /// A message from the leader `leader` of `term` arrived at `received`, saying a quorum
    /// had acknowledged it `quorum_age` before it was sent. Counted from the arrival, never
    /// from when this node finished handling the message (see the module documentation).
    pub fn leader_contacted(
        &self,
        leader: NodeId,
        term: u64,
        received: Instant,
        quorum_age: Duration,
    ) {
        let Some(quorum_at) = received.checked_sub(quorum_age) else {
            return;
        };
        let mut contact = self.leader.lock().unwrap_or_else(|p| p.into_inner());
        match contact.as_mut() {
            // A late message from an older term must not displace the current leader's contact.
            Some(c) if c.term > term => {}
            // Messages of one leader are handled concurrently and finish in any order: one
            // that arrived earlier, handled last, must not make the contact older.
            Some(c) if c.term == term && c.leader == leader => {
                c.quorum_at = c.quorum_at.max(quorum_at);
                c.heard_at = c.heard_at.max(received);
            }
            _ => {
                *contact = Some(LeaderContact {
                    leader,
                    term,
                    quorum_at,
                    heard_at: received,
                })
            }
        }
    }

    /// When the latest message of `leader`, followed at `term`, arrived here.
    pub fn leader_heard_at(&self, leader: NodeId, term: u64) -> Option<Instant> {
        self.leader_contact(leader, term).map(|c| c.heard)
    }

    /// When the latest message of `leader`, followed at `term`, arrived here, and when that
    /// leader last had a quorum, as it told us.
    pub fn leader_contact(&self, leader: NodeId, term: u64) -> Option<Contact> {
        let contact = *self.leader.lock().unwrap_or_else(|p| p.into_inner());
        contact
            .filter(|c| c.leader == leader && c.term == term)
            .map(|c| Contact {
                heard: c.heard_at,
                backed: c.quorum_at,
            })
    }

    /// When `leader`, followed at `term`, last had a quorum, as it told us. Contact from any
    /// other leader or term does not count.
    pub fn leader_quorum_at(&self, leader: NodeId, term: u64) -> Option<Instant> {
        let contact = *self.leader.lock().unwrap_or_else(|p| p.into_inner());
        contact
            .filter(|c| c.leader == leader && c.term == term)
            .map(|c| c.quorum_at)
    }

    /// When the leader this node last followed, whoever it was and at whatever term, last had
    /// a quorum, as it told us: how recently this node was in touch with the cluster while an
    /// election leaves it following no one.
    pub fn last_leader_quorum_at(&self) -> Option<Instant> {
        let contact = *self.leader.lock().unwrap_or_else(|p| p.into_inner());
        contact.map(|c| c.quorum_at)
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
        let now = Instant::now();
        liveness.leader_contacted(1, 7, now, Duration::from_millis(100));
        assert!(age(liveness.leader_quorum_at(1, 7)).unwrap() >= Duration::from_millis(100));
        assert_eq!(liveness.leader_quorum_at(1, 8), None, "another term");
        assert_eq!(liveness.leader_quorum_at(2, 7), None, "another leader");
        // A straggler from an older term does not replace the newer contact.
        liveness.leader_contacted(2, 8, now, Duration::ZERO);
        liveness.leader_contacted(1, 7, now, Duration::ZERO);
        assert_eq!(liveness.leader_quorum_at(2, 8), Some(now));
    }

    #[test]
    fn the_last_leaders_quorum_counts_whatever_leader_and_term_followed_it() {
        let liveness = Liveness::new(Duration::from_secs(5));
        assert_eq!(
            liveness.last_leader_quorum_at(),
            None,
            "never followed anyone"
        );
        let now = Instant::now();
        liveness.leader_contacted(1, 7, now, Duration::from_millis(100));
        let backed = now - Duration::from_millis(100);
        assert_eq!(liveness.last_leader_quorum_at(), Some(backed));
        // Term 8 started (a vote granted, a candidate): no leader of it has spoken yet, and
        // the last contact is still term 7's.
        assert_eq!(liveness.leader_quorum_at(1, 8), None);
        assert_eq!(liveness.last_leader_quorum_at(), Some(backed));
        liveness.leader_contacted(2, 8, now, Duration::ZERO);
        assert_eq!(liveness.last_leader_quorum_at(), Some(now));
    }

    #[test]
    fn a_leader_is_heard_at_its_latest_message_even_one_with_an_old_quorum() {
        let liveness = Liveness::new(Duration::from_secs(5));
        let now = Instant::now();
        let earlier = now - Duration::from_secs(3);
        liveness.leader_contacted(1, 7, earlier, Duration::ZERO);
        // A later message whose quorum is older than the contact already counted.
        liveness.leader_contacted(1, 7, now, Duration::from_secs(10));
        assert_eq!(liveness.leader_heard_at(1, 7), Some(now));
        assert_eq!(liveness.leader_quorum_at(1, 7), Some(earlier));
        // Handled out of order: the earlier arrival does not take the time back.
        liveness.leader_contacted(1, 7, earlier, Duration::ZERO);
        assert_eq!(liveness.leader_heard_at(1, 7), Some(now));
        assert_eq!(liveness.leader_heard_at(1, 8), None, "another term");
        assert_eq!(liveness.leader_heard_at(2, 7), None, "another leader");
        // A new term starts over.
        liveness.leader_contacted(2, 8, earlier, Duration::ZERO);
        assert_eq!(liveness.leader_heard_at(2, 8), Some(earlier));
    }

    #[test]
    fn contact_counts_from_the_arrival_and_the_newest_quorum_of_a_term_wins() {
        let liveness = Liveness::new(Duration::from_secs(5));
        let now = Instant::now();
        // A message that arrived 10 s ago (its handling stalled since) saying "quorum now".
        let arrived = now - Duration::from_secs(10);
        liveness.leader_contacted(1, 7, arrived, Duration::ZERO);
        assert_eq!(liveness.leader_quorum_at(1, 7), Some(arrived));
        // A later message of the same leader whose quorum had already gone stale.
        liveness.leader_contacted(1, 7, now, Duration::from_secs(10));
        assert_eq!(
            liveness.leader_quorum_at(1, 7),
            Some(arrived),
            "the newest stays"
        );
        // One that arrived later, handled first, then an earlier one finishing last.
        liveness.leader_contacted(1, 7, now, Duration::ZERO);
        liveness.leader_contacted(1, 7, arrived, Duration::ZERO);
        assert_eq!(liveness.leader_quorum_at(1, 7), Some(now));
        // A new term starts over, even from an older quorum instant.
        liveness.leader_contacted(2, 8, arrived, Duration::from_secs(1));
        assert_eq!(
            liveness.leader_quorum_at(2, 8),
            Some(arrived - Duration::from_secs(1))
        );
    }
}
