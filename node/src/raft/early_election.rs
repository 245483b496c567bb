//! Standing for election early when a candidate with a shorter log stood first.
//!
//! openraft 0.9 draws each node's election timeout once, at start, and a follower stands
//! only after the old leader's lease and its own timeout have passed. When a leader dies
//! with writes in flight, the follower whose timer ends first may hold a shorter log than
//! another one, which refuses it. Two things then cost seconds:
//!
//! ```text
//!  term 4:  B (shorter log) stands and votes for itself; A refuses it (longer log)
//!           A stands when its own timer ends, in term 4 too; B refuses it (already voted)
//!  term 5:  one more election timeout later, A stands again and wins
//! ```
//!
//! and a candidate refused for its log sets a flag in openraft that adds twice the longest
//! timeout to its timer, cleared only by its next timer-driven candidacy. It outlives the
//! election that set it: at the next leader failure that node, though its log is now as
//! long as any, stands more than a second late, and the other one may be refused first
//! again. Chaos runs saw 2.2–3 s without a leader from these two.
//!
//! A node sees both coming, from the answers of one vote:
//! - **as a voter**, it refused a candidate because its own log is longer, while it has
//!   lost touch with its leader (the candidate was past the lease): it is the better
//!   candidate, so it stands without waiting for its timer;
//! - **as a candidate**, it was refused by a peer that voted for itself in the same term
//!   with a shorter log: that term cannot elect the peer with this node's vote, so this node
//!   stands again in the next term without waiting a whole timeout.
//!
//! The shorter-log node does neither (its refusals came from longer logs), so the two do not
//! collide again. Each waits one heartbeat interval and up to half of one more, at random,
//! first: in a cluster of five the other candidate may still win with the votes of others,
//! and a new leader's first message arrives within that time (across regions too, where the
//! heartbeat is raised with the round trips), so no leader just elected is unseated. Raft is
//! safe whenever an election is held; this only changes when.

use std::sync::Arc;
use std::time::Duration;

use openraft::raft::{VoteRequest, VoteResponse};
use rand::Rng;
use tokio::sync::watch;

use super::{NodeId, Raft};

/// Why this node stands early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    /// Its candidacy lost a term to a shorter-log peer's vote for itself.
    SplitVote,
    /// It refused a shorter-log candidate after losing touch with its leader.
    ShorterLogCandidate,
}

impl Reason {
    fn label(self) -> &'static str {
        match self {
            Self::SplitVote => "split_vote",
            Self::ShorterLogCandidate => "shorter_log_candidate",
        }
    }
}

/// Where the transport and the vote service report what calls for an early candidacy: the
/// term it concerns, per reason (a voter's refusal in term N is often followed by a split in
/// term N, which must still count). Cheap to clone.
#[derive(Clone)]
pub struct EarlyElections {
    split_vote: Arc<watch::Sender<u64>>,
    shorter_log_candidate: Arc<watch::Sender<u64>>,
}

impl Default for EarlyElections {
    fn default() -> Self {
        Self {
            split_vote: Arc::new(watch::channel(0).0),
            shorter_log_candidate: Arc::new(watch::channel(0).0),
        }
    }
}

impl EarlyElections {
    /// Looks at `peer`'s answer to this node's vote `request` (this node is the candidate).
    pub fn answered(
        &self,
        peer: NodeId,
        request: &VoteRequest<NodeId>,
        response: &VoteResponse<NodeId>,
    ) {
        if is_split_we_cannot_lose(peer, request, response) {
            note(&self.split_vote, request.vote.leader_id().term);
        }
    }

    /// Looks at this node's answer to a candidate's vote `request` (this node votes).
    pub fn refused(&self, request: &VoteRequest<NodeId>, response: &VoteResponse<NodeId>) {
        if is_refused_for_a_shorter_log(request, response) {
            note(&self.shorter_log_candidate, request.vote.leader_id().term);
        }
    }

    /// Stands for election after each report, once `settle` (the heartbeat interval) and a
    /// random part of half of it have passed, unless a leader has been heard from since or
    /// a later term has begun; until `stop` turns true. `leader_lost` says whether this
    /// node's last leader has been silent for longer than its lease.
    pub async fn run(
        &self,
        raft: Raft,
        settle: Duration,
        leader_lost: impl Fn() -> bool,
        may_campaign: impl Fn() -> bool,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut split_vote = self.split_vote.subscribe();
        let mut shorter_log_candidate = self.shorter_log_candidate.subscribe();
        loop {
            let (term, reason) = tokio::select! {
                changed = split_vote.changed() => match changed {
                    Ok(()) => (*split_vote.borrow_and_update(), Reason::SplitVote),
                    Err(_) => return,
                },
                changed = shorter_log_candidate.changed() => match changed {
                    Ok(()) => (*shorter_log_candidate.borrow_and_update(), Reason::ShorterLogCandidate),
                    Err(_) => return,
                },
                _ = stop.wait_for(|s| *s) => return,
            };
            let jitter = settle.mul_f64(rand::rng().random_range(0.0..0.5));
            tokio::time::sleep(settle + jitter).await;
            let (leader, current) = {
                let metrics = raft.metrics();
                let m = metrics.borrow();
                (m.current_leader, m.current_term)
            };
            // A candidate knows no leader; a voter still names the one that went silent.
            let leaderless = match leader {
                None => true,
                Some(_) => reason == Reason::ShorterLogCandidate && leader_lost(),
            };
            // A node still checking what it promised its peers stands for nothing.
            if !leaderless || current > term || !may_campaign() {
                continue;
            }
            tracing::info!(term, reason = reason.label(), "standing for election early");
            metrics::counter!(crate::metrics::EARLY_CAMPAIGNS_TOTAL, "reason" => reason.label())
                .increment(1);
            if let Err(e) = raft.trigger().elect().await {
                tracing::debug!(error = %e, "could not stand for election");
            }
        }
    }
}

/// Records `term` in `seen` when it is newer than the last one recorded there.
fn note(seen: &watch::Sender<u64>, term: u64) {
    seen.send_if_modified(|last| {
        let newer = *last < term;
        *last = term.max(*last);
        newer
    });
}

/// Whether `peer` refused `request` because it voted for itself in the same term, holding
/// a shorter log than the one `request` offers: a candidacy this node will never back.
fn is_split_we_cannot_lose(
    peer: NodeId,
    request: &VoteRequest<NodeId>,
    response: &VoteResponse<NodeId>,
) -> bool {
    let ours = request.vote.leader_id();
    let theirs = response.vote.leader_id();
    !response.vote_granted
        && theirs.term == ours.term
        && theirs.voted_for() == Some(peer)
        && response.last_log_id < request.last_log_id
}

/// Whether this node refused `request` holding a longer log than the candidate, from a
/// term before the candidate's. Its leader's lease may have refused it too (the lease is
/// checked first): [`EarlyElections::run`] stands only once that leader has gone silent.
fn is_refused_for_a_shorter_log(
    request: &VoteRequest<NodeId>,
    response: &VoteResponse<NodeId>,
) -> bool {
    !response.vote_granted
        && request.vote.leader_id().term > response.vote.leader_id().term
        && request.last_log_id < response.last_log_id
}

#[cfg(test)]
mod tests {
    use openraft::testing::log_id;
    use openraft::Vote;

    use super::*;

    fn request(term: u64, candidate: NodeId, last_index: u64) -> VoteRequest<NodeId> {
        VoteRequest::new(Vote::new(term, candidate), Some(log_id(1, 1, last_index)))
    }

    fn answer(term: u64, voted_for: NodeId, granted: bool, last: u64) -> VoteResponse<NodeId> {
        VoteResponse::new(
            Vote::new(term, voted_for),
            Some(log_id(1, 1, last)),
            granted,
        )
    }

    #[test]
    fn a_peer_that_voted_for_itself_in_our_term_with_less_log_is_a_split_we_cannot_lose() {
        assert!(is_split_we_cannot_lose(
            3,
            &request(2, 2, 10),
            &answer(2, 3, false, 9)
        ));
    }

    #[test]
    fn other_refusals_of_our_candidacy_wait_out_the_election_timeout() {
        let ours = request(2, 2, 10);
        // The peer's log is as long as ours or longer: it may win; we may not.
        assert!(!is_split_we_cannot_lose(3, &ours, &answer(2, 3, false, 10)));
        assert!(!is_split_we_cannot_lose(3, &ours, &answer(2, 3, false, 11)));
        // It voted for a third node, which may hold the longest log of all.
        assert!(!is_split_we_cannot_lose(3, &ours, &answer(2, 1, false, 9)));
        // It is in a later term, or still follows the old leader (its lease).
        assert!(!is_split_we_cannot_lose(3, &ours, &answer(3, 3, false, 9)));
        assert!(!is_split_we_cannot_lose(3, &ours, &answer(1, 1, false, 9)));
        // Granted.
        assert!(!is_split_we_cannot_lose(3, &ours, &answer(2, 2, true, 9)));
    }

    #[test]
    fn a_candidate_refused_for_its_shorter_log_calls_for_the_voter_to_stand() {
        // Node 1 follows the leader of term 3 and has more of the log than candidate 2.
        assert!(is_refused_for_a_shorter_log(
            &request(4, 2, 9),
            &answer(3, 1, false, 10)
        ));
    }

    #[test]
    fn other_refusals_by_this_voter_leave_its_timer_alone() {
        // The candidate's log is as long as ours: refused for the lease, not the log.
        assert!(!is_refused_for_a_shorter_log(
            &request(4, 2, 10),
            &answer(3, 1, false, 10)
        ));
        // Our vote is already in the candidate's term or later (we stood, or voted).
        assert!(!is_refused_for_a_shorter_log(
            &request(4, 2, 9),
            &answer(4, 1, false, 10)
        ));
        assert!(!is_refused_for_a_shorter_log(
            &request(4, 2, 9),
            &answer(5, 3, false, 10)
        ));
        // Granted.
        assert!(!is_refused_for_a_shorter_log(
            &request(4, 2, 10),
            &answer(4, 2, true, 10)
        ));
    }

    #[tokio::test]
    async fn each_term_is_reported_once_per_reason_and_never_an_older_one() {
        let early = EarlyElections::default();
        let mut split = early.split_vote.subscribe();
        let mut refused = early.shorter_log_candidate.subscribe();
        // This node refused a shorter-logged candidate of term 4, stood in term 4 itself,
        // and lost that term to the candidate's vote for itself: both count.
        early.refused(&request(4, 2, 9), &answer(3, 1, false, 10));
        early.answered(2, &request(4, 1, 10), &answer(4, 2, false, 9));
        assert_eq!(*refused.borrow_and_update(), 4);
        assert_eq!(*split.borrow_and_update(), 4);
        // The same term again, or an older one, is not news.
        early.answered(2, &request(4, 1, 10), &answer(4, 2, false, 9));
        early.refused(&request(3, 2, 9), &answer(2, 1, false, 10));
        assert!(!split.has_changed().unwrap());
        assert!(!refused.has_changed().unwrap());
        early.refused(&request(5, 2, 9), &answer(4, 1, false, 10));
        assert!(refused.has_changed().unwrap());
        assert_eq!(*refused.borrow_and_update(), 5);
    }
}
