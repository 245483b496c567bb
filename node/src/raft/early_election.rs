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
//!
//! ## A leader that went silent
//!
//! The timer itself is the larger cost when a leader is killed, paused or cut off: a
//! follower stands only after the lease *and* its own timeout (0.9–1.2 s on the defaults),
//! though every voter that heard the leader's last message stops refusing candidates once
//! the lease alone has passed. [`EarlyElections::watch_silence`] stands then:
//!
//! ```text
//!   leader's last message ──── lease ────┬─ rank × ½ heartbeat + rand(¼) ─► ask the leader
//!                                        │                                   no answer: stand
//!   openraft's own timer: ─── lease ─────┴───── election timeout ──────────► stand
//! ```
//!
//! Unless the leader, asked directly (a `Hello`, bounded by one heartbeat), answers that it
//! still leads with a quorum younger than the lease: then only this node has stopped hearing
//! it (its own link, a stall here), and standing would unseat a leader the others follow.
//! A leader that answers without such a quorum (its own messages lost on the way out) is
//! stood against as a silent one is. Followers stand in the order of their ids, half a
//! heartbeat apart, so two of them do not split a term between them; a first one with the
//! shorter log is refused, and the rules above bring the better one in at once. Half a
//! heartbeat is not always enough for the first one's election to reach the next follower,
//! so the leader's answer also says its term: one newer than the term the asker follows it
//! in means it has voted for a follower that stood first, and the asker stands aside
//! (standing a term higher would unseat that follower's win before its first message
//! arrived, and leave the cluster to a whole election timeout).
//!
//! With pre-votes on (`raft.pre_vote`), a candidacy against a silent leader begins with
//! one instead of the question: every voter that still hears a leader backed by a quorum
//! refuses it, and so does that leader, which is what the question asked of the leader
//! alone, and a leader cut off from here would hold the question for a heartbeat. A
//! pre-vote raises no term, so a node cut off with its leader from the majority stands
//! in vain without raising one, and it is made again each heartbeat while the leader
//! stays silent.

use crate::raft::WatchReceiver as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::raft::{VoteRequest, VoteResponse};
use rand::Rng;
use tokio::sync::watch;

use super::calls::Hello;
use super::liveness::Contact;
use super::{NodeId, TypeConfig};
use crate::store::Raft;

/// Why this node stands early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    /// Its candidacy lost a term to a shorter-log peer's vote for itself.
    SplitVote,
    /// It refused a shorter-log candidate after losing touch with its leader.
    ShorterLogCandidate,
    /// Its leader has been silent for a lease and does not answer when asked.
    LeaderSilent,
    /// Its leader's messages still arrive, but it has had no quorum for a lease and says so
    /// when asked: its followers' answers are lost on the way back.
    LeaderUnbacked,
}

impl Reason {
    fn label(self) -> &'static str {
        match self {
            Self::SplitVote => "split_vote",
            Self::ShorterLogCandidate => "shorter_log_candidate",
            Self::LeaderSilent => "leader_silent",
            Self::LeaderUnbacked => "leader_unbacked",
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
        request: &VoteRequest<TypeConfig>,
        response: &VoteResponse<TypeConfig>,
    ) {
        if is_split_we_cannot_lose(peer, request, response) {
            note(&self.split_vote, request.vote.leader_id.term);
        }
    }

    /// Looks at this node's answer to a candidate's vote `request` (this node votes).
    pub fn refused(&self, request: &VoteRequest<TypeConfig>, response: &VoteResponse<TypeConfig>) {
        if is_refused_for_a_shorter_log(request, response) {
            note(&self.shorter_log_candidate, request.vote.leader_id.term);
        }
    }

    /// Stands for election after each report, once `settle` (the heartbeat interval) and a
    /// random part of half of it have passed, unless a leader has been heard from since or
    /// a later term has begun; with a pre-vote first when `pre_vote` is set; until `stop`
    /// turns true. `leader_lost` says whether this node's last leader has been silent for
    /// longer than its lease.
    pub async fn run(
        &self,
        raft: Raft,
        settle: Duration,
        pre_vote: bool,
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
                let m = metrics.borrow_watched();
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
            if let Err(e) = raft.trigger().elect(pre_vote).await {
                tracing::debug!(error = %e, "could not stand for election");
            }
        }
    }
}

/// The timing a silence watch works with.
#[derive(Debug, Clone, Copy)]
pub struct SilenceTiming {
    /// The leader's heartbeat interval.
    pub heartbeat: Duration,
    /// openraft's leader lease (the longest election timeout): how long after a leader's
    /// latest message a voter refuses every other candidate.
    pub lease: Duration,
    /// Whether a candidacy begins with a pre-vote (`raft.pre_vote`): a follower cut off
    /// with its leader from the majority then stands without raising its term.
    pub pre_vote: bool,
}

impl SilenceTiming {
    /// How long after its leader's latest message `me` stands: the lease, which every voter
    /// that heard the same message waits out too, then half a heartbeat per voter ranked
    /// before it (so that two followers do not split one term between them) and up to a
    /// quarter of one at random.
    fn stand_after(self, me: NodeId, leader: NodeId, voters: &[NodeId], random: f64) -> Duration {
        let rank = voters.iter().filter(|&&v| v != leader && v < me).count();
        let step = self.heartbeat / 2;
        self.lease + step * rank as u32 + (self.heartbeat / 4).mul_f64(random.clamp(0.0, 1.0))
    }

    /// Whether a candidacy for `reason` begins with a pre-vote: against a silent leader
    /// when pre-votes are on (a node cut off with its leader from the majority then raises
    /// no term), never against an unbacked one. This node still hears that leader, so its
    /// own lease holds and a pre-vote would not even be sent; the candidacy must raise the
    /// term to take the old leader's vote, which makes the majority in three.
    fn pre_votes(self, reason: Reason) -> bool {
        self.pre_vote && reason == Reason::LeaderSilent
    }

    /// Why a follower with `contact` stands `now`, if it does, `after` being its
    /// [`Self::stand_after`]:
    /// - the leader has been silent that long ([`Reason::LeaderSilent`]); every voter that
    ///   heard the same last message has stopped refusing candidates by then;
    /// - or its messages still arrive (the latest within two heartbeats) but the quorum they
    ///   say it last had is that old ([`Reason::LeaderUnbacked`]): it cannot commit, and its
    ///   own vote is free (openraft 0.9's leader counts its lease from its election only),
    ///   so in a cluster of three the two make a majority at once. Counting from the quorum
    ///   instant of a leader that went quiet instead would stand up to a heartbeat before
    ///   the other voters' leases end, and lose that term.
    fn stands(self, contact: Contact, now: Instant, after: Duration) -> Option<Reason> {
        let since = |at: Instant| now.saturating_duration_since(at);
        if since(contact.heard) >= after {
            Some(Reason::LeaderSilent)
        } else if since(contact.heard) < self.heartbeat * 2 && since(contact.backed) >= after {
            Some(Reason::LeaderUnbacked)
        } else {
            None
        }
    }
}

impl EarlyElections {
    /// Stands for election once this node's leader has been silent, or without a quorum,
    /// for [`SilenceTiming::stand_after`] ([`SilenceTiming::stands`]): a leader that was
    /// killed, paused or cut off, or whose followers' answers are lost, is replaced a lease
    /// after its last message or quorum, instead of a lease and a whole election timeout
    /// after it (or never, while its heartbeats keep arriving). Against a silent leader
    /// with pre-votes on, the pre-vote decides, repeated each heartbeat while the leader
    /// stays silent; otherwise the leader is asked first (`stand_aside`, with the leader and
    /// term: [`stand_aside`]), and one that answers it still leads, or that it has voted in a
    /// newer term since, is left alone (openraft's own timer, or the follower that stood
    /// first, decides), as is one this node already stood against. Learners and nodes
    /// that may not campaign stand for nothing. Until `stop` turns true.
    pub async fn watch_silence<P, Fut>(
        raft: Raft,
        timing: SilenceTiming,
        contact: impl Fn(NodeId, u64) -> Option<Contact>,
        stand_aside: P,
        may_campaign: impl Fn() -> bool,
        mut stop: watch::Receiver<bool>,
    ) where
        P: Fn(NodeId, u64) -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let tick = (timing.heartbeat / 2).max(Duration::from_millis(5));
        // The leader and term this node last stood against, when, and whether with a
        // pre-vote. A candidacy that raises the term is made once against them. One that
        // began with a pre-vote is made again each heartbeat while they stay: a pre-vote
        // raises nothing, and a first one may be refused for a lease that has not quite
        // ended, this node's own or a voter's (openraft starts a lease when it has handled
        // the leader's message, a little after the message arrived here), while openraft's
        // own timer would try again only a whole election timeout later.
        let mut stood: Option<(NodeId, u64, Instant, bool)> = None;
        let mut probed: Option<(NodeId, u64, Instant)> = None;
        let random = rand::rng().random_range(0.0..1.0);
        loop {
            tokio::select! {
                () = tokio::time::sleep(tick) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            let (me, leader, term, voters) = {
                let metrics = raft.metrics();
                let m = metrics.borrow_watched();
                let voters: Vec<NodeId> = m.membership_config.membership().voter_ids().collect();
                (m.id, m.current_leader, m.current_term, voters)
            };
            let Some(leader) = leader.filter(|&l| l != me) else {
                continue;
            };
            let again = match stood {
                Some((l, t, at, pre_voted)) if (l, t) == (leader, term) => {
                    if !pre_voted || at.elapsed() < timing.heartbeat {
                        continue;
                    }
                    true
                }
                _ => false,
            };
            if !voters.contains(&me) {
                continue;
            }
            let Some(seen) = contact(leader, term) else {
                continue;
            };
            let after = timing.stand_after(me, leader, &voters, random);
            let Some(first) = timing.stands(seen, Instant::now(), after) else {
                continue;
            };
            // Asked once a heartbeat at most: a leader that answers it still leads would
            // otherwise be asked every tick.
            if probed.is_some_and(|(l, t, at)| {
                (l, t) == (leader, term) && at.elapsed() < timing.heartbeat
            }) || !may_campaign()
            {
                continue;
            }
            probed = Some((leader, term, Instant::now()));
            // A pre-vote puts the question to every voter at once (one that still hears a
            // leader backed by a quorum refuses, and so does that leader), so the leader is
            // not asked first: a leader cut off from here would hold the question a
            // heartbeat.
            if !timing.pre_votes(first) && stand_aside(leader, term).await {
                continue;
            }
            // Still the same leader and term, and still silent or unbacked after the
            // question: a leader heard from again meanwhile, or whose quorum came back, stays.
            let unchanged = {
                let metrics = raft.metrics();
                let m = metrics.borrow_watched();
                m.current_leader == Some(leader) && m.current_term == term
            };
            let reason =
                contact(leader, term).and_then(|c| timing.stands(c, Instant::now(), after));
            let (true, Some(reason)) = (unchanged, reason) else {
                continue;
            };
            let pre_vote = timing.pre_votes(reason);
            stood = Some((leader, term, Instant::now(), pre_vote));
            metrics::counter!(crate::metrics::EARLY_CAMPAIGNS_TOTAL, "reason" => reason.label())
                .increment(1);
            if again {
                tracing::debug!(term, leader, reason = reason.label(), "standing again");
            } else {
                tracing::info!(
                    term,
                    leader,
                    silent_ms = seen.heard.elapsed().as_millis() as u64,
                    unbacked_ms = seen.backed.elapsed().as_millis() as u64,
                    reason = reason.label(),
                    "standing for election early"
                );
            }
            if let Err(e) = raft.trigger().elect(pre_vote).await {
                tracing::debug!(error = %e, "could not stand for election");
            }
        }
    }
}

/// What a follower that stopped hearing its leader got when it asked the leader directly.
#[derive(Debug)]
pub enum Answer<'a> {
    /// Nothing within the bound: down, paused, or cut off from here.
    Silent,
    /// It refused the question or answered something unreadable: it runs, but says nothing
    /// of how it stands.
    Refused,
    /// It said who it is.
    Hello(&'a Hello),
}

/// Whether `answer`, from the leader `leader` this node follows at `term`, says to leave the
/// election to others: that leader still leads, backed by a quorum within `lease`; or it has
/// voted in a newer term since, so another follower stood first (and may have won already,
/// its first message not here yet). Standing then would split that term or, one term
/// higher, unseat the winner. A silent leader, or one that leads no more or has no such
/// quorum while still at `term`, is stood against; a refusal leaves the decision to
/// openraft's timer.
pub fn stand_aside(answer: Answer<'_>, leader: NodeId, term: u64, lease: Duration) -> bool {
    match answer {
        Answer::Silent => false,
        Answer::Refused => true,
        Answer::Hello(hello) if hello.node_id != leader => false,
        Answer::Hello(hello) => {
            let backed = hello.leader == Some(leader)
                && hello
                    .quorum_age_ms
                    .is_some_and(|age| u128::from(age) < lease.as_millis());
            backed || hello.term > term
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
    request: &VoteRequest<TypeConfig>,
    response: &VoteResponse<TypeConfig>,
) -> bool {
    let ours = &request.vote.leader_id;
    let theirs = &response.vote.leader_id;
    !response.vote_granted
        && theirs.term == ours.term
        && theirs.node_id == peer
        && response.last_log_id < request.last_log_id
}

/// Whether this node refused `request` holding a longer log than the candidate, from a
/// term before the candidate's. Its leader's lease may have refused it too (the lease is
/// checked first): [`EarlyElections::run`] stands only once that leader has gone silent.
fn is_refused_for_a_shorter_log(
    request: &VoteRequest<TypeConfig>,
    response: &VoteResponse<TypeConfig>,
) -> bool {
    !response.vote_granted
        && request.vote.leader_id.term > response.vote.leader_id.term
        && request.last_log_id < response.last_log_id
}

#[cfg(test)]
mod tests {
    use crate::raft::log_id;
    use openraft::Vote;

    use super::*;

    fn request(term: u64, candidate: NodeId, last_index: u64) -> VoteRequest<TypeConfig> {
        VoteRequest::new(Vote::new(term, candidate), Some(log_id(1, 1, last_index)))
    }

    fn answer(term: u64, voted_for: NodeId, granted: bool, last: u64) -> VoteResponse<TypeConfig> {
        VoteResponse::new(
            Vote::new(term, voted_for),
            Some(log_id(1, 1, last)),
            granted,
        )
    }

    #[test]
    fn a_silent_leaders_followers_stand_a_lease_after_it_in_the_order_of_their_ids() {
        let timing = SilenceTiming {
            heartbeat: Duration::from_millis(100),
            lease: Duration::from_millis(600),
            pre_vote: true,
        };
        let voters = [1, 2, 3, 4, 5];
        let ms = |d: Duration| d.as_millis();
        // Leader 2: the others rank 1, 3, 4, 5; half a heartbeat apart.
        assert_eq!(ms(timing.stand_after(1, 2, &voters, 0.0)), 600);
        assert_eq!(ms(timing.stand_after(3, 2, &voters, 0.0)), 650);
        assert_eq!(ms(timing.stand_after(5, 2, &voters, 0.0)), 750);
        // The random part stays within a quarter heartbeat, below the next rank's start.
        assert_eq!(ms(timing.stand_after(3, 2, &voters, 1.0)), 675);
        assert_eq!(ms(timing.stand_after(3, 2, &voters, 7.0)), 675, "clamped");
        assert!(timing.stand_after(3, 2, &voters, 0.99) < timing.stand_after(4, 2, &voters, 0.0));
    }

    #[test]
    fn only_a_candidacy_against_a_silent_leader_begins_with_a_pre_vote() {
        let mut timing = SilenceTiming {
            heartbeat: Duration::from_millis(100),
            lease: Duration::from_millis(600),
            pre_vote: true,
        };
        assert!(timing.pre_votes(Reason::LeaderSilent));
        assert!(!timing.pre_votes(Reason::LeaderUnbacked));
        timing.pre_vote = false;
        assert!(!timing.pre_votes(Reason::LeaderSilent));
    }

    #[test]
    fn a_follower_stands_against_a_silent_leader_or_one_whose_heartbeats_say_it_has_no_quorum() {
        let timing = SilenceTiming {
            heartbeat: Duration::from_millis(100),
            lease: Duration::from_millis(600),
            pre_vote: true,
        };
        let after = Duration::from_millis(600);
        let now = Instant::now() + Duration::from_secs(10);
        let ago = |ms: u64| now - Duration::from_millis(ms);
        let stands = |heard, backed| {
            timing.stands(
                Contact {
                    heard: ago(heard),
                    backed: ago(backed),
                },
                now,
                after,
            )
        };
        // A healthy leader: heard a heartbeat ago, its quorum about as recent.
        assert_eq!(stands(50, 120), None);
        // Silent for the whole wait, whatever it last said of its quorum.
        assert_eq!(stands(600, 650), Some(Reason::LeaderSilent));
        assert_eq!(stands(599, 650), None, "not yet");
        // Still heard, but with no quorum for the whole wait: answers are lost on the way.
        assert_eq!(stands(30, 600), Some(Reason::LeaderUnbacked));
        assert_eq!(stands(30, 599), None, "its quorum is young enough");
        // Gone quiet two heartbeats ago: its quorum instant is older than its last message,
        // so the other voters' leases (counted from that message) have not ended: wait for
        // silence.
        assert_eq!(stands(200, 700), None);
        assert_eq!(stands(199, 700), Some(Reason::LeaderUnbacked));
    }

    fn hello(node_id: NodeId, leader: Option<NodeId>, quorum_age_ms: Option<u64>) -> Hello {
        hello_at(node_id, leader, quorum_age_ms, 7)
    }

    fn hello_at(
        node_id: NodeId,
        leader: Option<NodeId>,
        quorum_age_ms: Option<u64>,
        term: u64,
    ) -> Hello {
        Hello {
            node_id,
            incarnation: "i".into(),
            cluster_id: Some("c".into()),
            member: true,
            leader,
            founding: false,
            signing_key: String::new(),
            ranking: None,
            seen_you: None,
            wall_ms: 0,
            quorum_age_ms,
            term,
            packed_snapshots: true,
        }
    }

    #[test]
    fn a_leader_is_stood_against_unless_it_answers_that_a_quorum_still_backs_it() {
        fn leads(answer: Answer<'_>) -> bool {
            stand_aside(answer, 1, 7, Duration::from_millis(600))
        }
        assert!(!leads(Answer::Silent), "no answer");
        assert!(leads(Answer::Refused), "it runs: the timer decides");
        assert!(leads(Answer::Hello(&hello(1, Some(1), Some(100)))));
        assert!(leads(Answer::Hello(&hello(1, Some(1), Some(599)))));
        // Its own messages are lost on the way out: no quorum for a lease.
        assert!(!leads(Answer::Hello(&hello(1, Some(1), Some(600)))));
        assert!(
            !leads(Answer::Hello(&hello(1, Some(1), None))),
            "never had a quorum, or an older build"
        );
        assert!(
            !leads(Answer::Hello(&hello(1, Some(3), Some(10)))),
            "it follows another now"
        );
        assert!(
            !leads(Answer::Hello(&hello(1, None, Some(10)))),
            "it leads no more"
        );
        assert!(
            !leads(Answer::Hello(&hello(2, Some(2), Some(10)))),
            "someone else answered"
        );
    }

    #[test]
    fn a_leader_that_voted_in_a_newer_term_leaves_the_election_to_whoever_stood_first() {
        let aside =
            |hello: &Hello| stand_aside(Answer::Hello(hello), 1, 7, Duration::from_millis(600));
        // Unbacked, and it voted for a candidate in term 8: that candidate may win, or has.
        assert!(aside(&hello_at(1, None, None, 8)), "an election under way");
        assert!(
            aside(&hello_at(1, Some(3), None, 8)),
            "won, not heard of here yet"
        );
        // Unbacked at the term this node follows it in (or an older build's 0): stand.
        assert!(!aside(&hello_at(1, Some(1), Some(600), 7)));
        assert!(!aside(&hello_at(1, None, None, 7)));
        assert!(
            !aside(&hello_at(1, None, None, 0)),
            "a build that does not say"
        );
        // A newer term from a node that is not the leader asked says nothing of it.
        assert!(!aside(&hello_at(2, None, None, 8)));
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
