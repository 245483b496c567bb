//! A second election at once after a split vote the better candidate cannot lose.
//!
//! openraft 0.9 draws each node's election timeout once, at start, and a candidate that is
//! refused waits a whole timeout before it tries the next term. When a leader dies with
//! writes in flight, the follower whose timeout ends first may hold a shorter log than the
//! other one:
//!
//! ```text
//!  term 2:  B (shorter log) campaigns, votes for itself; A refuses it (A's log is longer)
//!           A campaigns in term 2 too; B refuses it (B already voted in term 2)
//!  term 3:  one more election timeout later, A campaigns again and wins
//! ```
//!
//! That extra timeout is what made a leader kill cost 2.2–2.7 s of writes in some chaos
//! runs, against about 1 s otherwise. A sees it coming: its vote was refused by a peer that
//! voted for itself in the same term with a shorter log than A's, so that peer's candidacy
//! cannot get A's vote. A then tries the next term at once, if no leader has appeared in
//! the meantime. B does not (its refusal came from a longer log), so the two do not collide
//! again. Raft is safe whenever an election is held; this only changes when.

use std::sync::Arc;
use std::time::Duration;

use openraft::raft::{VoteRequest, VoteResponse};
use rand::Rng;
use tokio::sync::watch;

use super::{NodeId, Raft};

/// Where the transport reports a term this node lost to a split vote; cheap to clone.
#[derive(Clone)]
pub struct SplitVotes {
    lost: Arc<watch::Sender<u64>>,
}

impl Default for SplitVotes {
    fn default() -> Self {
        Self {
            lost: Arc::new(watch::channel(0).0),
        }
    }
}

impl SplitVotes {
    /// Looks at `peer`'s answer to this node's vote `request`, and notes the term when it
    /// shows a split vote this node should not wait out.
    pub fn observe(
        &self,
        peer: NodeId,
        request: &VoteRequest<NodeId>,
        response: &VoteResponse<NodeId>,
    ) {
        if !is_split_we_cannot_lose(peer, request, response) {
            return;
        }
        let term = request.vote.leader_id().term;
        self.lost.send_if_modified(|lost| {
            let newer = *lost < term;
            *lost = term.max(*lost);
            newer
        });
    }

    /// Campaigns again at once after each split vote reported, until `stop` turns true.
    pub async fn run(&self, raft: Raft, mut stop: watch::Receiver<bool>) {
        let mut lost = self.lost.subscribe();
        loop {
            tokio::select! {
                changed = lost.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                _ = stop.wait_for(|s| *s) => return,
            }
            let term = *lost.borrow_and_update();
            // The other answers of this round may still be on their way: one of them may be
            // the vote that elects this node after all.
            let settle = Duration::from_millis(rand::rng().random_range(10..40));
            tokio::time::sleep(settle).await;
            let (leader, current) = {
                let metrics = raft.metrics();
                let m = metrics.borrow();
                (m.current_leader, m.current_term)
            };
            if leader.is_some() || current > term {
                continue;
            }
            tracing::info!(
                term,
                "split vote with a shorter log; campaigning again at once"
            );
            metrics::counter!(crate::metrics::SPLIT_VOTE_CAMPAIGNS_TOTAL).increment(1);
            if let Err(e) = raft.trigger().elect().await {
                tracing::debug!(error = %e, "could not campaign again");
            }
        }
    }
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
    fn other_refusals_wait_out_the_election_timeout() {
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

    #[tokio::test]
    async fn each_lost_term_is_reported_once_and_never_an_older_one() {
        let votes = SplitVotes::default();
        let mut lost = votes.lost.subscribe();
        votes.observe(3, &request(4, 2, 10), &answer(4, 3, false, 9));
        assert!(lost.has_changed().unwrap());
        assert_eq!(*lost.borrow_and_update(), 4);
        votes.observe(3, &request(4, 2, 10), &answer(4, 3, false, 9));
        votes.observe(3, &request(3, 2, 10), &answer(3, 3, false, 9));
        assert!(!lost.has_changed().unwrap());
        assert_eq!(*lost.borrow(), 4);
    }
}
