//! The state every request handler shares, and the one write path into Raft: propose on
//! this node, or forward to the leader, then wait until this node has applied the entry.
//!
//! Every write carries a request id (the client's `Idempotency-Key`, or one made here); the
//! state machine answers a repeat with the first outcome, so a write whose outcome is
//! unknown (proposed, then no answer in time: [`WriteError::OutcomeUnknown`]) can be
//! retried safely, and is told apart from one that was never proposed
//! ([`WriteError::Unavailable`]).

use crate::raft::WatchReceiver as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::{ClientWriteError, RaftError};
use tokio::sync::watch;

use crate::auth::Credentials;
use crate::catalogue::SharedCatalogue;
use crate::config::Config;
use crate::dispatch::outbox::Outbox;
use crate::raft::batch::Batcher;
use crate::raft::calls::{Forwarded, WriteError};
use crate::raft::identity::LocalIdentity;
use crate::raft::liveness::Liveness;
use crate::raft::network::Network;
use crate::raft::{Command, CommandResult, NodeId, Request};
use crate::store::state_machine::ReceiptReader;
use crate::store::Durable;
use crate::store::Raft;

/// Shared node state.
pub struct App {
    /// This node's id.
    pub node_id: NodeId,
    /// Its data folder's identity: incarnation and cluster.
    pub identity: Arc<LocalIdentity>,
    /// The cluster's own CA (none with operator certificates): join tokens are minted with
    /// it and enrollment hands it to their holders ([`crate::cluster::peers`]).
    pub peer_ca: Option<Arc<crate::raft::pki::ClusterCa>>,
    /// The Raft handle.
    pub raft: Raft,
    /// Proposes through `raft`, grouping concurrent directory writes into one entry.
    pub batcher: Batcher,
    /// The applied directory in memory.
    pub catalogue: SharedCatalogue,
    /// Stored receipts.
    pub receipts: ReceiptReader,
    /// Receipts waiting for a quorum.
    pub outbox: Outbox,
    /// The applied index, as the state machine publishes it (after the catalogue shows it).
    pub applied: watch::Receiver<u64>,
    /// The node's storage (its sync is shared by every writer; tests may slow it down).
    pub storage: Durable,
    /// Who may do what.
    pub credentials: Credentials,
    /// The node-to-node transport.
    pub network: Network,
    /// When peers were last heard from.
    pub liveness: Arc<Liveness>,
    /// The configuration the node started with (secrets scrubbed: see `auth`).
    pub config: Arc<Config>,
    /// What each caller may spend: rate quotas and stream slots ([`crate::service::quota`]).
    pub spending: crate::service::quota::Spending,
    /// Invocations that may run at once (`limits.max_concurrent_invocations`).
    pub invocation_slots: Arc<tokio::sync::Semaphore>,
    /// True while this leader hands leadership over: proposals wait ([`crate::cluster::handover`]).
    pub handing_over: watch::Sender<bool>,
    /// When this node last became leader (at its current term), as its Raft metrics showed it.
    pub leading_since: std::sync::Mutex<Option<std::time::Instant>>,
    /// Writes on their way into raft here ([`App::propose`]); a handover waits for none.
    pub proposing: std::sync::atomic::AtomicUsize,
    /// Recent asks by caller, to tell which invocations they led to (clicks the resolver
    /// learns from).
    pub asks: crate::dispatch::clicks::RecentAsks,
    /// The members that rank asks otherwise than this node ([`crate::cluster::ranking`]).
    pub ranking_peers: crate::catalogue::setup::RankingPeers,
    /// Whether this node takes part in Raft ([`crate::raft::standing`]).
    pub standing: watch::Sender<crate::raft::standing::Standing>,
    /// Asks, invocations and writes over the last minutes, for the console's charts.
    pub activity: crate::activity::Activity,
    /// Set once the node's start is over (it founded its cluster and wrote the demo
    /// catalogue, joined one, or reopened its folder): until then it serves its peers but
    /// is not ready, so a first ask cannot arrive before the catalogue it was started with.
    pub started: std::sync::atomic::AtomicBool,
}

/// One write counted in [`App::proposing`] until dropped.
struct Proposing<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Proposing<'a> {
    fn enter(count: &'a std::sync::atomic::AtomicUsize) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Self(count)
    }
}

impl Drop for Proposing<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A write that took effect (or, for a repeated request id, took effect before).
#[derive(Debug)]
pub struct Written {
    /// What applying it did (for a repeat: what the first attempt did).
    pub result: CommandResult,
    /// Its log index: the index to wait for before reading it (for a repeat, the index of
    /// the entry that answered it, which is after the first attempt's).
    pub index: u64,
    /// Whether this node has applied it. A write that committed but was not applied here
    /// within the deadline is still answered as committed, with its index.
    pub applied_here: bool,
    /// The index of the first attempt, when this was a repeat of a remembered request id.
    pub replayed: Option<u64>,
}

impl App {
    /// Whether this node takes part in Raft now ([`crate::raft::standing`]).
    pub fn standing(&self) -> crate::raft::standing::Standing {
        self.standing.borrow().clone()
    }

    /// Whether this node may vote, take entries and stand for election.
    pub fn takes_part(&self) -> bool {
        matches!(*self.standing.borrow(), crate::raft::standing::Standing::Ok)
    }

    /// The index this node has applied and shows (see [`SharedCatalogue::index`]).
    pub fn applied_index(&self) -> u64 {
        self.catalogue.index()
    }

    /// The leader this node knows of.
    pub fn leader(&self) -> Option<NodeId> {
        self.raft.metrics().borrow_watched().current_leader
    }

    /// How long a write may wait for its outcome (`limits.write_timeout_ms`).
    pub fn write_timeout(&self) -> Duration {
        Duration::from_millis(self.config.limits.write_timeout_ms)
    }

    /// Proposes `command` under a fresh request id (here or through the leader) and returns
    /// once it is committed, and applied here unless that takes longer than the deadline.
    pub async fn write(&self, command: Command) -> Result<Written, WriteError> {
        self.submit(Request::new(command), self.write_timeout())
            .await
    }

    /// [`App::write`] with its own deadline.
    pub async fn write_within(
        &self,
        command: Command,
        timeout: Duration,
    ) -> Result<Written, WriteError> {
        self.submit(Request::new(command), timeout).await
    }

    /// [`App::write`] of a request that carries its id (a client's `Idempotency-Key`).
    pub async fn submit(&self, request: Request, timeout: Duration) -> Result<Written, WriteError> {
        let name = request.command.name();
        let started = Instant::now();
        let outcome = self.route_write(request, started + timeout).await;
        let took = started.elapsed();
        metrics::histogram!(crate::metrics::WRITE_SECONDS, "op" => name).record(took.as_secs_f64());
        if outcome.is_ok() {
            self.activity.write(took);
        }
        outcome
    }

    async fn route_write(
        &self,
        request: Request,
        deadline: Instant,
    ) -> Result<Written, WriteError> {
        if self.is_cut_off() {
            return Err(WriteError::Unavailable {
                reason: "this node cannot reach a quorum".into(),
            });
        }
        let bytes = self.entry_bytes(&request)?;
        // Set once a forward went unanswered: the write may have reached a leader, so from
        // then on every way of giving up says its outcome is unknown, never "not proposed".
        let mut unanswered: Option<WriteError> = None;
        let give_up = |e: WriteError, unanswered: Option<WriteError>| match (e, unanswered) {
            (WriteError::Unavailable { .. }, Some(unknown)) => unknown,
            (e, _) => e,
        };
        // A leader change, or a leader gone until its successor is elected, moves the write
        // a few times at most; the deadline bounds the waits in between.
        let mut hint = None;
        for _ in 0..5 {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                break;
            }
            // A deposed leader's hint names its successor before this node has heard of it.
            // A follower that knows its leader sends the write straight there: its own Raft
            // core would only answer "forward", and may be busy syncing its log meanwhile.
            let known_leader = self.leader().filter(|&leader| leader != self.node_id);
            let forward_to = match hint.take().or(known_leader) {
                Some(leader) => leader,
                None => match self.propose_sized(request.clone(), bytes, remaining).await {
                    Ok(Forwarded { result, index }) => {
                        return Ok(self.applied_here(result, index, deadline).await)
                    }
                    Err(Proposal::Forward(Some(leader))) => leader,
                    Err(Proposal::Forward(None)) => {
                        self.await_leader(remaining).await;
                        continue;
                    }
                    Err(Proposal::Failed(e)) => return Err(give_up(e, unanswered)),
                },
            };
            let node = self.membership().get_node(&forward_to).cloned();
            let Some(node) = node else {
                self.await_leader(remaining).await;
                continue;
            };
            // A healthy leader answers in milliseconds. One that has not answered within its
            // lease is being replaced: stop waiting for it, and send the write (same request
            // id) to its successor below, instead of holding it for the whole write timeout.
            let attempt = remaining.min(Duration::from_millis(
                self.config.raft.election_timeout_max_ms,
            ));
            // Nor past the election of its successor: a paused leader holds the connection
            // open and answers nothing, while the cluster has already moved on.
            let term = self.raft.metrics().borrow_watched().current_term;
            let forwarded = tokio::select! {
                biased;
                forwarded = self.network.forward(forward_to, &node, &request, attempt) => forwarded,
                () = self.successor_elected(forward_to, term, attempt) => {
                    Err(match &request.request_id {
                        Some(request_id) => WriteError::OutcomeUnknown {
                            request_id: request_id.clone(),
                            reason: format!("node {forward_to} was replaced as leader while the write was on its way"),
                        },
                        None => WriteError::Unavailable {
                            reason: "the leader was replaced".into(),
                        },
                    })
                }
            };
            match forwarded {
                Ok(Forwarded { result, index }) => {
                    return Ok(self.applied_here(result, index, deadline).await)
                }
                Err(WriteError::NotLeader { leader: Some(next) })
                    if next != forward_to && next != self.node_id =>
                {
                    hint = Some(next)
                }
                Err(WriteError::NotLeader { .. }) => self.await_leader(remaining).await,
                // No answer: the leader may be gone (killed, paused, cut off). The request
                // keeps its id, so sending it again (to a successor, or to this leader once
                // it answers) gets the first outcome and never applies it twice. Hold it for
                // a successor instead of answering "unknown" and leaving the retry to the
                // client, which would only find the same dead leader behind every follower.
                Err(unknown @ WriteError::OutcomeUnknown { .. }) => {
                    unanswered = Some(unknown);
                    let wait = deadline.saturating_duration_since(Instant::now()).min(
                        Duration::from_millis(self.config.raft.election_timeout_max_ms),
                    );
                    self.await_successor(forward_to, wait).await;
                }
                Err(e) => return Err(give_up(e, unanswered)),
            }
        }
        Err(give_up(
            WriteError::Unavailable {
                reason: "the leader kept changing".into(),
            },
            unanswered,
        ))
    }

    /// Proposes on this node; answers for the leader when a follower forwards a write.
    pub async fn propose(
        &self,
        request: Request,
        timeout: Duration,
    ) -> Result<Forwarded, Proposal> {
        let bytes = self.entry_bytes(&request).map_err(Proposal::Failed)?;
        self.propose_sized(request, bytes, timeout).await
    }

    /// [`App::propose`] for a request whose entry is `bytes` long, within the limit.
    async fn propose_sized(
        &self,
        mut request: Request,
        bytes: usize,
        timeout: Duration,
    ) -> Result<Forwarded, Proposal> {
        // The request's trace id is for the logs of the nodes it passes, not for the log.
        request.trace = None;
        request.trace_context.clear();
        // No time in the log later than the majority of clocks allow (model::time).
        crate::raft::validate::hold_times(
            &mut request.command,
            crate::model::time::latest_stamp_ms(),
        );
        // A leader handing over takes no new entry (the successor must be level with its
        // log to win the vote); the write waits, then goes to whoever leads. Counted before
        // the flag is read, so a handover that set the flag and then sees no write counted
        // knows that none will reach raft until it ends.
        let _proposing = loop {
            let counted = Proposing::enter(&self.proposing);
            if !*self.handing_over.borrow() {
                break counted;
            }
            drop(counted);
            self.hold_while_handing_over(timeout).await;
            if *self.handing_over.borrow() {
                // Held for the whole timeout: raft answers (here, or "forward to ...").
                break Proposing::enter(&self.proposing);
            }
        };
        let request_id = request.request_id.clone();
        let outcome = self
            .while_connected(timeout, self.batcher.client_write(request, bytes))
            .await;
        match outcome {
            // Handed to Raft and then given up on: it may still commit.
            Err(reason) => Err(Proposal::Failed(match request_id {
                Some(request_id) => WriteError::OutcomeUnknown { request_id, reason },
                None => WriteError::Unavailable { reason },
            })),
            Ok(Ok(response)) => Ok(Forwarded {
                result: response.data,
                index: response.log_id.index,
            }),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward)))) => {
                Err(Proposal::Forward(forward.leader_id))
            }
            // Its leader lost the term with the entry in its log: a new leader may hold and
            // commit it, or not.
            Ok(Err(RaftError::APIError(ClientWriteError::LogEntryDiscarded(forward)))) => {
                let reason = format!(
                    "leadership moved (to {:?}) before the write was known to commit",
                    forward.leader_id
                );
                Err(Proposal::Failed(match request_id {
                    Some(request_id) => WriteError::OutcomeUnknown { request_id, reason },
                    None => WriteError::Unavailable { reason },
                }))
            }
            Ok(Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e)))) => {
                Err(Proposal::Failed(WriteError::Fatal(e.to_string())))
            }
            Ok(Err(RaftError::APIError(ClientWriteError::PreconditionFailed(e)))) => {
                Err(Proposal::Failed(WriteError::Fatal(e.to_string())))
            }
            Ok(Err(RaftError::Fatal(fatal))) => {
                let detail = match fatal {
                    openraft::error::Fatal::StorageError(e) => {
                        format!("{}: {e}", crate::raft::calls::STORAGE_FAILED)
                    }
                    other => other.to_string(),
                };
                Err(Proposal::Failed(WriteError::Fatal(detail)))
            }
        }
    }

    /// The size of `request`'s entry (its command's: the trace fields are not logged), or its
    /// refusal before it is proposed or forwarded: an
    /// entry too large to replicate within one AppendEntries bound would time out on every
    /// follower and cost the leader its term.
    fn entry_bytes(&self, request: &Request) -> Result<usize, WriteError> {
        let bytes = request.command.entry_bytes();
        let limit = self.config.raft.max_entry_bytes;
        if bytes > limit {
            return Err(WriteError::TooLarge { bytes, limit });
        }
        Ok(bytes)
    }

    /// Awaits `work` for at most `timeout`, giving up early once this node is cut off from
    /// the leader or its quorum: a leader that lost its followers never commits, and its
    /// clients are better served by a fast answer than by the whole timeout.
    async fn while_connected<T>(
        &self,
        timeout: Duration,
        work: impl std::future::Future<Output = T>,
    ) -> Result<T, String> {
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(work, deadline);
        let mut check = tokio::time::interval(Duration::from_millis(50));
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // Work that is done wins over a check that would give up on it.
            tokio::select! {
                biased;
                done = &mut work => return Ok(done),
                _ = &mut deadline => {
                    return Err(format!("not committed within {} ms", timeout.as_millis()))
                }
                _ = check.tick() => {
                    if self.is_cut_off() {
                        return Err("this node lost contact with the leader or its quorum".into());
                    }
                }
            }
        }
    }

    /// A committed write as answered here: waits (until the deadline, at least briefly) for
    /// this node to apply it, and unwraps a replayed outcome.
    async fn applied_here(&self, result: CommandResult, index: u64, deadline: Instant) -> Written {
        let remaining = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(100));
        let applied_here = self.wait_applied(index, remaining).await;
        let (result, replayed) = match result {
            CommandResult::Replayed { index, first } => {
                metrics::counter!(crate::metrics::WRITES_REPLAYED_TOTAL).increment(1);
                (*first, Some(index))
            }
            other => (other, None),
        };
        Written {
            result,
            index,
            applied_here,
            replayed,
        }
    }

    async fn await_leader(&self, within: Duration) {
        let within = within.min(Duration::from_millis(500));
        let _ = self
            .raft
            .wait(Some(within))
            .metrics(|m| m.current_leader.is_some(), "a leader is known")
            .await;
        tokio::time::sleep(Duration::from_millis(20).min(within)).await;
    }

    /// Resolves once a leader other than `leader` is elected in a term after `term`, within
    /// `within`; never otherwise.
    async fn successor_elected(&self, leader: NodeId, term: u64, within: Duration) {
        let elected = self
            .raft
            .wait(Some(within))
            .metrics(
                |m| m.current_term > term && m.current_leader.is_some_and(|l| l != leader),
                "a successor leads",
            )
            .await;
        if elected.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Waits, at most `within`, for a leader other than `failed`, or for `failed` to lead
    /// again at a newer term.
    async fn await_successor(&self, failed: NodeId, within: Duration) {
        let term = self.raft.metrics().borrow_watched().current_term;
        let wait = self.raft.wait(Some(within));
        // Not cut short when this node feels cut off: with its leader gone it is, until the
        // successor's first message (a node cut off when the write arrived refused it then).
        let _ = wait
            .metrics(
                |m| {
                    m.current_leader
                        .is_some_and(|l| l != failed || m.current_term > term)
                },
                "a successor leads",
            )
            .await;
    }

    /// Waits until this node has applied `index`, at most `timeout`. Returns whether it has.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> bool {
        let mut applied = self.applied.clone();
        let reached = tokio::time::timeout(timeout, applied.wait_for(|a| *a >= index)).await;
        matches!(reached, Ok(Ok(_)))
    }
}

/// Why a local proposal did not commit.
#[derive(Debug)]
pub enum Proposal {
    /// Another node leads (or none is known yet).
    Forward(Option<NodeId>),
    /// The write failed.
    Failed(WriteError),
}
