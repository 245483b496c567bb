//! Faults and scenarios. A scenario is a list of fault kinds injected in turn on a fixed
//! period after a warm-up; each fault holds for a while and is healed before the next.
//! Scenarios combine with commas: `kill-leader,isolate-leader`.
//!
//! Some faults bring a node back on state it lost or on an older copy of it, or let a leader
//! run with a clock gone wrong (issue 29). Each strikes while writes are being acknowledged,
//! and records what the cluster did ([`Outcome`]): refused the node and re-admitted it after
//! the operator's steps, kept serving, or accepted it unsafely. The harness plays the
//! operator: it removes the member (`DELETE /api/cluster/members/<id>`) and rejoins the node
//! on a fresh folder.
//!
//! ```text
//!  0 ── warm-up ──┬── fault 1 ──heal──┬── fault 2 ──heal──┬ … ── cool-down ── end
//!                 └──── period ───────┘
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::cluster::{Admission, Cluster, SnapshotStorm};
use crate::error::ChaosError;
use crate::history::Class;
use crate::proxy::{Flow, LinkState};
use crate::workload::Progress;

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// SIGKILL the leader, restart it after the hold.
    KillLeader,
    /// SIGKILL a follower, restart it after the hold.
    KillFollower,
    /// SIGSTOP the leader for longer than the election timeout, then SIGCONT.
    PauseLeader,
    /// SIGSTOP a follower, then SIGCONT.
    PauseFollower,
    /// Cut every link to and from the leader.
    IsolateLeader,
    /// Split the cluster: a minority holding the leader (2 of 5, 1 of 3) and the rest.
    Split,
    /// The leader's outgoing links are cut; links towards it still work.
    OneWay,
    /// Every answer on the leader's outgoing links is lost (requests still arrive).
    LostAnswers,
    /// 40 ms ± 10 ms more on every link, each way.
    Slow,
    /// 5% of chunks on every link wait a retransmission timeout.
    Lossy,
    /// SIGTERM and restart each node in turn, waiting until it is ready.
    RollingRestart,
    /// A follower loses its disk: killed, removed, wiped, rejoined with `--join`.
    WipeRejoin,
    /// A follower loses its disk and comes back with `--join` under its old id without
    /// being removed first: it must be refused with advice, and nothing lost; then the safe
    /// procedure brings it back.
    WipeRejoinUnsafe,
    /// The leader and one follower are cut from the other three (5 nodes): once the
    /// majority has a new leader, both must mark reads stale and fail `/readyz`.
    MinorityStale,
    /// Every node snapshots every few entries and keeps no log behind it while followers
    /// are restarted, so they catch up by snapshot.
    SnapshotStorm,
    /// Issue 29 item 1: a minority of followers (A) is paused while the leader (L) and the
    /// other followers acknowledge writes; one of those (B) is killed and loses only its
    /// Raft state (`sled/`, keeping `identity.json` and the rest); L (and, above three nodes,
    /// the rest of B's side) is killed; A continues and B restarts with its own command. Then
    /// L comes back. B must be refused until the operator removes it, never vote with the
    /// log it lost.
    LoseRaftState,
    /// A follower loses its whole data folder and restarts with its own command: refused
    /// with advice, then removed and re-admitted.
    LoseFolder,
    /// A follower's folder is copied as a crash would leave it; writes go on; later it is
    /// killed, its folder replaced by the copy, and restarted with its own command. It must
    /// stay out (`standing: behind`) until removed and rejoined.
    RestoreOldCopy,
    /// Node 1, the founder, loses its folder and restarts with its own command: it must not
    /// found a second cluster, but ask to rejoin, be refused, and be re-admitted.
    FounderLosesFolder,
    /// The leader restarts with its wall clock [`CLOCK_JUMP_MS`] ahead and leads while
    /// receipt retention runs ([`RETENTION_CONFIG`]): it must drop no receipt younger than
    /// the retention age.
    LeaderClockJump,
}

impl FaultKind {
    /// Every kind, in `all` order.
    pub const ALL: [FaultKind; 20] = [
        Self::KillLeader,
        Self::KillFollower,
        Self::PauseLeader,
        Self::PauseFollower,
        Self::IsolateLeader,
        Self::Split,
        Self::OneWay,
        Self::LostAnswers,
        Self::Slow,
        Self::Lossy,
        Self::RollingRestart,
        Self::WipeRejoin,
        Self::WipeRejoinUnsafe,
        Self::MinorityStale,
        Self::SnapshotStorm,
        Self::LoseRaftState,
        Self::LoseFolder,
        Self::RestoreOldCopy,
        Self::FounderLosesFolder,
        Self::LeaderClockJump,
    ];

    /// Its scenario name.
    pub fn name(self) -> &'static str {
        match self {
            Self::KillLeader => "kill-leader",
            Self::KillFollower => "kill-follower",
            Self::PauseLeader => "pause-leader",
            Self::PauseFollower => "pause-follower",
            Self::IsolateLeader => "isolate-leader",
            Self::Split => "split",
            Self::OneWay => "one-way",
            Self::LostAnswers => "lost-answers",
            Self::Slow => "slow",
            Self::Lossy => "lossy",
            Self::RollingRestart => "rolling-restart",
            Self::WipeRejoin => "wipe-rejoin",
            Self::WipeRejoinUnsafe => "wipe-rejoin-unsafe",
            Self::MinorityStale => "minority-stale",
            Self::SnapshotStorm => "snapshot-storm",
            Self::LoseRaftState => "lose-raft-state",
            Self::LoseFolder => "lose-folder",
            Self::RestoreOldCopy => "restore-old-copy",
            Self::FounderLosesFolder => "founder-loses-folder",
            Self::LeaderClockJump => "leader-clock-jump",
        }
    }

    /// How long the fault stays before it is healed (rolling restarts and wipes take as
    /// long as they take).
    pub fn hold(self) -> Duration {
        match self {
            Self::KillLeader | Self::KillFollower => Duration::from_secs(3),
            // Well above the 1.2 s upper election timeout.
            Self::PauseLeader | Self::PauseFollower => Duration::from_secs(3),
            Self::IsolateLeader
            | Self::Split
            | Self::OneWay
            | Self::LostAnswers
            | Self::MinorityStale => Duration::from_secs(4),
            // Several runs of a retention policy that runs every second.
            Self::Slow | Self::Lossy | Self::LeaderClockJump => Duration::from_secs(5),
            Self::RollingRestart
            | Self::WipeRejoin
            | Self::WipeRejoinUnsafe
            | Self::SnapshotStorm
            | Self::LoseRaftState
            | Self::LoseFolder
            | Self::RestoreOldCopy
            | Self::FounderLosesFolder => Duration::ZERO,
        }
    }

    /// Whether a run injects it again on later periods. Faults that bring a node back on
    /// lost or older state, or jump a clock, take most of a short run (a removal and a
    /// rejoin, or several retention runs): once per run.
    pub fn repeats(self) -> bool {
        !matches!(
            self,
            Self::LoseRaftState
                | Self::LoseFolder
                | Self::RestoreOldCopy
                | Self::FounderLosesFolder
                | Self::LeaderClockJump
        )
    }

    /// Nodes it needs.
    pub fn min_nodes(self) -> usize {
        match self {
            Self::KillLeader
            | Self::PauseLeader
            | Self::Slow
            | Self::Lossy
            | Self::RollingRestart => 1,
            Self::WipeRejoin
            | Self::WipeRejoinUnsafe
            | Self::SnapshotStorm
            | Self::LoseRaftState
            | Self::LoseFolder
            | Self::RestoreOldCopy
            | Self::FounderLosesFolder
            | Self::LeaderClockJump => 3,
            Self::MinorityStale => 5,
            _ => 2,
        }
    }
}

/// The test-only knob that shifts a node's wall clock (milliseconds, may be negative).
pub const CLOCK_OFFSET_ENV: &str = "ROWCALL_TEST_CLOCK_OFFSET_MS";
/// How far ahead the leader's clock jumps: three days, past the one-day retention age.
pub const CLOCK_JUMP_MS: u64 = 3 * 24 * 3_600 * 1_000;
/// Receipt retention for runs with [`FaultKind::LeaderClockJump`]: receipts older than a
/// day go, checked every second. Nothing in a run is a day old, so a leader that drops any
/// trusted a clock it should not have.
pub const RETENTION_CONFIG: &str = "[receipts]\nmax_age_days = 1\nprune_every_secs = 1\n";

impl FaultKind {
    /// The node configuration (TOML) a run with this fault needs, if any.
    pub fn config(self) -> Option<&'static str> {
        (self == Self::LeaderClockJump).then_some(RETENTION_CONFIG)
    }
}

/// What the cluster did about a node that came back on lost or older state, or a leader
/// with its clock gone wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reaction {
    /// Refused the node (it exited with advice, or stayed out) and re-admitted it as a new
    /// member after the operator removed the old one.
    RefusedReadmitted,
    /// Refused the node; the operator's steps did not bring it back.
    Refused,
    /// Kept serving and did not act on the bad input (a clock jump dropped nothing).
    StillServing,
    /// Let the node in as what it was, with what it had lost; or acted on a bad clock.
    AcceptedUnsafely,
    /// The node founded a cluster of its own.
    SecondCluster,
    /// Neither refused nor let in within the time allowed.
    Undecided,
}

impl Reaction {
    /// Its words in the report.
    pub fn name(self) -> &'static str {
        match self {
            Self::RefusedReadmitted => "refused, re-admitted",
            Self::Refused => "refused",
            Self::StillServing => "still serving",
            Self::AcceptedUnsafely => "accepted unsafely",
            Self::SecondCluster => "founded a second cluster",
            Self::Undecided => "undecided",
        }
    }
}

/// What the cluster did, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// In short.
    pub did: Reaction,
    /// The steps seen, in a sentence or two.
    pub detail: String,
}

impl Outcome {
    fn new(did: Reaction, detail: impl Into<String>) -> Self {
        Self {
            did,
            detail: detail.into(),
        }
    }
}

/// A named list of faults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    /// Its name (as given).
    pub name: String,
    /// Faults, injected in turn.
    pub faults: Vec<FaultKind>,
}

/// The `ci` scenario: a leader kill and restart, a partition and heal, a pause.
pub const CI: [FaultKind; 3] = [
    FaultKind::KillLeader,
    FaultKind::IsolateLeader,
    FaultKind::PauseLeader,
];

/// Names `--scenario` accepts (besides comma-separated combinations and `all`).
pub fn known() -> String {
    let mut names: Vec<&str> = FaultKind::ALL.iter().map(|k| k.name()).collect();
    names.push("ci");
    names.push("all");
    names.join(", ")
}

impl Scenario {
    /// Parses `kill-leader`, `ci`, or `kill-leader,split` (not `all`).
    pub fn parse(name: &str) -> Result<Scenario, ChaosError> {
        let mut faults = Vec::new();
        for part in name.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part == "ci" {
                faults.extend(CI);
                continue;
            }
            let kind = FaultKind::ALL
                .into_iter()
                .find(|k| k.name() == part)
                .ok_or_else(|| ChaosError::UnknownScenario {
                    name: part.to_owned(),
                    known: known(),
                })?;
            faults.push(kind);
        }
        if faults.is_empty() {
            return Err(ChaosError::UnknownScenario {
                name: name.to_owned(),
                known: known(),
            });
        }
        Ok(Scenario {
            name: name.to_owned(),
            faults,
        })
    }

    /// Every single-fault scenario, for `--scenario all`.
    pub fn all() -> Vec<Scenario> {
        FaultKind::ALL
            .into_iter()
            .map(|k| Scenario {
                name: k.name().to_owned(),
                faults: vec![k],
            })
            .collect()
    }

    /// Nodes it needs.
    pub fn min_nodes(&self) -> usize {
        self.faults.iter().map(|k| k.min_nodes()).max().unwrap_or(1)
    }
}

/// When faults happen.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// No faults before this.
    pub warmup: Duration,
    /// One fault starts every period.
    pub period: Duration,
    /// No fault starts after `duration - cooldown`.
    pub cooldown: Duration,
    /// The run's length.
    pub duration: Duration,
}

impl Schedule {
    /// The faults this schedule plans for `kinds`, in order: one at the end of the warm-up
    /// and one per period after it, none starting in the cool-down. A run that injects fewer
    /// (a heal that took so long that the next start fell into the cool-down) did not test
    /// what it planned, and the report says so. A kind that does not repeat
    /// ([`FaultKind::repeats`]) is planned once; its later turns go to the next kind.
    pub fn planned(&self, kinds: &[FaultKind]) -> Vec<FaultKind> {
        let last_start = self.duration.saturating_sub(self.cooldown);
        let mut planned: Vec<FaultKind> = Vec::new();
        let mut next = self.warmup;
        let mut turn = 0;
        // Bounded: the period is at least a second (flags) and the duration finite.
        while !kinds.is_empty() && next <= last_start && !self.period.is_zero() {
            let Some(skip) = (0..kinds.len()).find(|skip| {
                let kind = kinds[(turn + skip) % kinds.len()];
                kind.repeats() || !planned.contains(&kind)
            }) else {
                break;
            };
            planned.push(kinds[(turn + skip) % kinds.len()]);
            turn += skip + 1;
            next += self.period;
        }
        planned
    }
}

/// A fault as it happened.
#[derive(Debug, Clone, Serialize)]
pub struct FaultWindow {
    /// The fault kind's name (for the baseline: `kill-restart for <name>`).
    pub name: String,
    /// Nodes it hit.
    pub targets: Vec<u64>,
    /// Seconds since the start when it was injected.
    pub injected_s: f64,
    /// Seconds since the start when it was healed (the node was ready again, the links
    /// passed again).
    pub healed_s: f64,
    /// What went wrong while injecting or healing, if anything.
    pub problems: Vec<String>,
    /// What the cluster did, for faults that bring a node back on lost or older state or
    /// jump a leader's clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
}

/// Runs the schedule of `faults` against `cluster` until the run ends. Returns what
/// happened. Everything is healed at the end.
pub async fn run(
    cluster: &mut Cluster,
    faults: &[FaultKind],
    schedule: Schedule,
    epoch: Instant,
    progress: &Progress,
) -> Vec<FaultWindow> {
    let mut windows = Vec::new();
    let last_start = schedule.duration.saturating_sub(schedule.cooldown);
    let mut next = schedule.warmup;
    for kind in schedule.planned(faults) {
        if next > last_start {
            break;
        }
        tokio::time::sleep_until(epoch + next).await;
        let window = inject(cluster, kind, epoch, progress).await;
        let healed = Duration::from_secs_f64(window.healed_s);
        eprintln!(
            "\r{:>6.1}s  fault {} on nodes {:?}, healed at {:.1}s{}",
            window.injected_s,
            window.name,
            window.targets,
            window.healed_s,
            if window.problems.is_empty() {
                String::new()
            } else {
                format!(" ({})", window.problems.join("; "))
            }
        );
        if let Some(outcome) = &window.outcome {
            eprintln!(
                "        the cluster: {} ({})",
                outcome.did.name(),
                outcome.detail
            );
        }
        windows.push(window);
        // The next fault starts on the period, or 2 s after this one healed if later.
        next = (next + schedule.period).max(healed + Duration::from_secs(2));
    }
    cluster.heal_all().await;
    windows
}

fn since(epoch: Instant) -> f64 {
    (Instant::now() - epoch).as_secs_f64()
}

/// The leader; with none known within 3 s, node 1, and the error that says the fault
/// missed its intended target (the report then fails the run).
async fn leader_or_first(cluster: &Cluster) -> (u64, Result<(), ChaosError>) {
    const WITHIN: Duration = Duration::from_secs(3);
    match cluster.await_leader(WITHIN).await {
        Some(id) => (id, Ok(())),
        None => (
            1,
            Err(ChaosError::NoLeader {
                waited_s: WITHIN.as_secs(),
            }),
        ),
    }
}

/// A follower that is up; with none, the leader, and the error that says so.
async fn follower(cluster: &Cluster) -> (u64, Result<(), ChaosError>) {
    let (leader, found) = leader_or_first(cluster).await;
    let follower = cluster
        .ids()
        .into_iter()
        .rev()
        .find(|&id| id != leader && cluster.node(id).is_up());
    match (follower, found) {
        (Some(id), found) => (id, found),
        (None, Err(e)) => (leader, Err(e)),
        (None, Ok(())) => (leader, Err(ChaosError::NoFollower { leader })),
    }
}

/// Injects one fault, holds it, heals it. `progress` counts what the workload has had
/// acknowledged, so faults can strike while writes are.
pub async fn inject(
    cluster: &mut Cluster,
    kind: FaultKind,
    epoch: Instant,
    progress: &Progress,
) -> FaultWindow {
    let mut problems = Vec::new();
    let mut outcome = None;
    let mut note = |r: Result<(), ChaosError>| {
        if let Err(e) = r {
            problems.push(e.to_string());
        }
    };
    let hold = kind.hold();
    let (targets, injected_s);
    match kind {
        FaultKind::KillLeader | FaultKind::KillFollower => {
            let (id, found) = if kind == FaultKind::KillLeader {
                leader_or_first(cluster).await
            } else {
                follower(cluster).await
            };
            note(found);
            targets = vec![id];
            injected_s = since(epoch);
            cluster.kill(id);
            tokio::time::sleep(hold).await;
            note(cluster.restart(id).await);
        }
        FaultKind::PauseLeader | FaultKind::PauseFollower => {
            let (id, found) = if kind == FaultKind::PauseLeader {
                leader_or_first(cluster).await
            } else {
                follower(cluster).await
            };
            note(found);
            targets = vec![id];
            injected_s = since(epoch);
            note(cluster.pause(id));
            tokio::time::sleep(hold).await;
            note(cluster.resume(id));
        }
        FaultKind::IsolateLeader | FaultKind::Split => {
            let (leader, found) = leader_or_first(cluster).await;
            note(found);
            let minority_size = if kind == FaultKind::Split {
                (cluster.nodes.len() - 1) / 2
            } else {
                1
            }
            .max(1);
            let mut minority = vec![leader];
            minority.extend(
                cluster
                    .ids()
                    .into_iter()
                    .filter(|&id| id != leader)
                    .take(minority_size - 1),
            );
            targets = minority.clone();
            injected_s = since(epoch);
            cluster.set_links(|from, to| {
                (minority.contains(&from) != minority.contains(&to)).then(LinkState::blackhole)
            });
            tokio::time::sleep(hold).await;
            cluster.heal_links();
        }
        FaultKind::OneWay | FaultKind::LostAnswers => {
            let (leader, found) = leader_or_first(cluster).await;
            note(found);
            targets = vec![leader];
            injected_s = since(epoch);
            let state = if kind == FaultKind::OneWay {
                LinkState::blackhole()
            } else {
                LinkState {
                    responses: Flow::held(),
                    ..LinkState::pass()
                }
            };
            cluster.set_links(|from, _| (from == leader).then_some(state));
            tokio::time::sleep(hold).await;
            cluster.heal_links();
        }
        FaultKind::Slow | FaultKind::Lossy => {
            targets = cluster.ids();
            injected_s = since(epoch);
            let flow = if kind == FaultKind::Slow {
                Flow {
                    delay_ms: 40,
                    jitter_ms: 10,
                    ..Flow::default()
                }
            } else {
                Flow {
                    delay_ms: 2,
                    loss: 0.05,
                    ..Flow::default()
                }
            };
            cluster.set_links(|_, _| Some(LinkState::shaped(flow)));
            tokio::time::sleep(hold).await;
            cluster.heal_links();
        }
        FaultKind::RollingRestart => {
            targets = cluster.ids();
            injected_s = since(epoch);
            for id in cluster.ids() {
                note(cluster.terminate(id).await);
                note(cluster.restart(id).await);
            }
        }
        FaultKind::WipeRejoin => {
            let (id, found) = follower(cluster).await;
            note(found);
            targets = vec![id];
            injected_s = since(epoch);
            note(cluster.wipe_and_rejoin(id).await);
        }
        FaultKind::WipeRejoinUnsafe => {
            let (id, found) = follower(cluster).await;
            note(found);
            targets = vec![id];
            injected_s = since(epoch);
            let log = cluster.node(id).log.clone();
            let unclear = |what| ChaosError::UnsafeRejoinUnclear {
                id,
                what,
                log: log.clone(),
            };
            note(match cluster.wipe_and_rejoin_unsafely(id, false).await {
                Ok(Admission::RefusedWithAdvice) => Ok(()),
                Ok(Admission::Accepted) => Err(ChaosError::UnsafeRejoinAccepted { id }),
                Ok(Admission::RefusedSilently) => {
                    Err(unclear("exited without naming the removal it needs"))
                }
                Ok(Admission::KeptOut { .. }) => Err(unclear(
                    "stayed up, out, without naming the removal it needs",
                )),
                Ok(Admission::Undecided) => Err(unclear("was neither refused nor let in")),
                Err(e) => Err(e),
            });
            // Then what the refusal advised: remove the old member, join afresh.
            note(cluster.wipe_and_rejoin(id).await);
        }
        FaultKind::MinorityStale => {
            let (leader, found) = leader_or_first(cluster).await;
            note(found);
            let follower = cluster.ids().into_iter().find(|&id| id != leader);
            let minority: Vec<u64> = std::iter::once(leader).chain(follower).collect();
            targets = minority.clone();
            injected_s = since(epoch);
            cluster.set_links(|from, to| {
                (minority.contains(&from) != minority.contains(&to)).then(LinkState::blackhole)
            });
            let started = Instant::now();
            note(minority_goes_stale(cluster, &minority).await);
            // At least as long as a split, so the workload sees the stale side.
            tokio::time::sleep(hold.saturating_sub(started.elapsed())).await;
            cluster.heal_links();
        }
        FaultKind::SnapshotStorm => {
            targets = cluster.ids();
            injected_s = since(epoch);
            note(snapshot_storm(cluster).await);
        }
        FaultKind::LoseRaftState => {
            let (leader, found) = leader_or_first(cluster).await;
            note(found);
            let sides = LostStateSides::of(cluster, leader);
            targets = sides.targets();
            injected_s = since(epoch);
            outcome = Some(lose_raft_state(cluster, progress, &sides, &mut problems).await);
        }
        FaultKind::LoseFolder | FaultKind::FounderLosesFolder => {
            let id = if kind == FaultKind::FounderLosesFolder {
                1
            } else {
                let (id, found) = follower(cluster).await;
                note(found);
                id
            };
            targets = vec![id];
            injected_s = since(epoch);
            outcome = Some(lose_folder(cluster, progress, id, &mut problems).await);
        }
        FaultKind::RestoreOldCopy => {
            let (id, found) = follower(cluster).await;
            note(found);
            targets = vec![id];
            injected_s = since(epoch);
            outcome = Some(restore_old_copy(cluster, progress, id, &mut problems).await);
        }
        FaultKind::LeaderClockJump => {
            let (leader, found) = leader_or_first(cluster).await;
            note(found);
            targets = vec![leader];
            injected_s = since(epoch);
            outcome = Some(leader_clock_jump(cluster, progress, leader, hold, &mut problems).await);
        }
    }
    FaultWindow {
        name: kind.name().to_owned(),
        targets,
        injected_s,
        healed_s: since(epoch),
        problems,
        outcome,
    }
}

/// Acknowledged operations a fault waits for before it strikes.
const ACKS: u64 = 5;
/// How long it waits for them.
const ACKS_WITHIN: Duration = Duration::from_secs(5);
/// How long A stays paused before B loses its state, at least: writes acknowledged in
/// that time reached only the leader and B's side.
const PAUSED_AT_LEAST: Duration = Duration::from_secs(1);
/// How long a node restarted on lost state is watched before the nodes that still hold
/// that state come back: long enough for the others to elect a leader without them
/// (an election times out within 1.2 s).
const UNSAFE_WITHIN: Duration = Duration::from_secs(4);
/// How long a node restarted on lost or older state has to be refused, kept out or let in.
const DECIDE_WITHIN: Duration = Duration::from_secs(30);

/// Operations of `class` acknowledged so far.
fn acknowledged(progress: &Progress, class: Class) -> u64 {
    progress.snapshot()[class as usize].1
}

/// Waits (bounded) until [`ACKS`] more operations of `class` than `from` were
/// acknowledged: the fault then strikes while they are, not in a lull.
async fn await_acks(progress: &Progress, class: Class, from: u64) -> Result<(), ChaosError> {
    let deadline = Instant::now() + ACKS_WITHIN;
    loop {
        let got = acknowledged(progress, class).saturating_sub(from);
        if got >= ACKS {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(ChaosError::TooFewAcknowledged {
                what: if class == Class::Invoke {
                    "receipts"
                } else {
                    "writes"
                },
                got,
                wanted: ACKS,
                waited_s: ACKS_WITHIN.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What the cluster did about node `id`, back on `state` (`an empty data folder`, …) and
/// received as `admission`; plays the operator when it was refused: removes the member,
/// wipes the folder, rejoins it and waits until it is a member again.
async fn readmit(
    cluster: &mut Cluster,
    id: u64,
    state: &'static str,
    admission: Admission,
    problems: &mut Vec<String>,
) -> Outcome {
    let seen = admission.describe(id);
    if admission == Admission::RefusedSilently {
        let log = cluster.node(id).log.clone();
        problems.push(
            ChaosError::UnsafeRejoinUnclear {
                id,
                what: "exited without naming the removal it needs",
                log,
            }
            .to_string(),
        );
    }
    match admission {
        Admission::Accepted => {
            problems.push(ChaosError::AcceptedUnsafely { id, state }.to_string());
            Outcome::new(
                Reaction::AcceptedUnsafely,
                format!("back on {state}, {seen}"),
            )
        }
        refused_or_undecided => {
            let undecided = refused_or_undecided == Admission::Undecided;
            if undecided {
                let log = cluster.node(id).log.clone();
                problems.push(
                    ChaosError::Undecided {
                        id,
                        waited_s: DECIDE_WITHIN.as_secs(),
                        log,
                    }
                    .to_string(),
                );
            }
            let (readmitted, steps) = match cluster.wipe_and_rejoin(id).await {
                Ok(()) => (
                    true,
                    format!("removed, wiped and rejoined: node {id} is a member again"),
                ),
                Err(e) => {
                    let said = format!("re-admission failed: {e}");
                    problems.push(e.to_string());
                    (false, said)
                }
            };
            let did = match (undecided, readmitted) {
                (true, _) => Reaction::Undecided,
                (false, true) => Reaction::RefusedReadmitted,
                (false, false) => Reaction::Refused,
            };
            Outcome::new(did, format!("back on {state}, {seen}; {steps}"))
        }
    }
}

/// Says which nodes exited by themselves, or logged a panic, since `marks` (a crash the
/// scenario provoked), as a problem and in the outcome's words.
fn crashed(
    cluster: &mut Cluster,
    marks: &BTreeMap<u64, u64>,
    outcome: &mut Outcome,
    problems: &mut Vec<String>,
) {
    let exited = cluster.exited();
    if !exited.is_empty() {
        outcome
            .detail
            .push_str(&format!("; nodes {exited:?} exited by themselves"));
        problems.push(format!(
            "nodes {exited:?} exited by themselves during the fault"
        ));
    }
    for (id, message) in cluster.panicked_since(marks) {
        outcome
            .detail
            .push_str(&format!("; node {id} panicked: {message}"));
        problems.push(format!("node {id} panicked during the fault: {message}"));
    }
}

/// The nodes of [`FaultKind::LoseRaftState`]: the leader, the followers paused while it
/// writes (A: a minority, with node 1 among them if it follows, so that the node losing its
/// state restarts with a `--join`), the follower that loses its Raft state (B), and the
/// others of the leader's side, stopped with it so that A and B are a quorum alone.
struct LostStateSides {
    leader: u64,
    paused: Vec<u64>,
    loser: u64,
    rest: Vec<u64>,
}

impl LostStateSides {
    fn of(cluster: &Cluster, leader: u64) -> Self {
        Self::split(&cluster.ids(), leader)
    }

    /// The sides of the nodes `ids` (ascending) led by `leader`.
    fn split(ids: &[u64], leader: u64) -> Self {
        let followers: Vec<u64> = ids.iter().copied().filter(|&id| id != leader).collect();
        let minority = ids.len().saturating_sub(1) / 2;
        let paused = followers[..minority.min(followers.len())].to_vec();
        let loser = followers.get(minority).copied().unwrap_or(leader);
        let rest = followers.iter().skip(minority + 1).copied().collect();
        Self {
            leader,
            paused,
            loser,
            rest,
        }
    }

    /// B first, then the leader, A, the rest.
    fn targets(&self) -> Vec<u64> {
        let mut targets = vec![self.loser, self.leader];
        targets.extend(&self.paused);
        targets.extend(&self.rest);
        targets
    }
}

/// [`FaultKind::LoseRaftState`], step by step (issue 29 item 1).
async fn lose_raft_state(
    cluster: &mut Cluster,
    progress: &Progress,
    sides: &LostStateSides,
    problems: &mut Vec<String>,
) -> Outcome {
    let marks = cluster.log_marks();
    let LostStateSides {
        leader,
        paused,
        loser,
        rest,
    } = sides;
    let (leader, loser) = (*leader, *loser);
    let mut note = |r: Result<(), ChaosError>| {
        if let Err(e) = r {
            problems.push(e.to_string());
        }
    };
    for &id in paused {
        note(cluster.pause(id));
    }
    // Writes acknowledged from now on are on the leader and B's side only; those under way
    // at the pause may have reached A, so wait a while beyond them too.
    let from = acknowledged(progress, Class::Write);
    tokio::time::sleep(PAUSED_AT_LEAST).await;
    note(await_acks(progress, Class::Write, from).await);
    cluster.kill(loser);
    note(cluster.lose_raft_state(loser));
    cluster.kill(leader);
    for &id in rest {
        cluster.kill(id);
    }
    for &id in paused {
        note(cluster.resume(id));
    }
    let logged = cluster.logged(loser);
    note(cluster.launch(loser));
    // The only nodes up are A and B: does B take part with the state it lost?
    let early = cluster.admission(loser, logged, UNSAFE_WITHIN).await;
    // The operator brings the leader (and its side) back.
    for id in std::iter::once(leader).chain(rest.iter().copied()) {
        note(cluster.restart(id).await);
    }
    let admission = match early {
        Admission::Undecided => cluster.admission(loser, logged, DECIDE_WITHIN).await,
        decided => decided,
    };
    let mut outcome = readmit(cluster, loser, "an empty Raft state", admission, problems).await;
    crashed(cluster, &marks, &mut outcome, problems);
    outcome
}

/// [`FaultKind::LoseFolder`] and [`FaultKind::FounderLosesFolder`]: node `id` loses its
/// whole folder while writes are acknowledged and restarts with its own command.
async fn lose_folder(
    cluster: &mut Cluster,
    progress: &Progress,
    id: u64,
    problems: &mut Vec<String>,
) -> Outcome {
    let marks = cluster.log_marks();
    let from = acknowledged(progress, Class::Write);
    if let Err(e) = await_acks(progress, Class::Write, from).await {
        problems.push(e.to_string());
    }
    let admission = match cluster.wipe_and_rejoin_unsafely(id, true).await {
        Ok(admission) => admission,
        Err(e) => {
            problems.push(e.to_string());
            Admission::Undecided
        }
    };
    if admission == Admission::Accepted {
        // Let in: as the member it was, or as the founder of a cluster of its own?
        let ids = cluster.cluster_ids().await;
        let theirs = ids.get(&id).cloned().flatten();
        let ours = ids
            .iter()
            .find(|(&other, cluster)| other != id && cluster.is_some())
            .and_then(|(_, cluster)| cluster.clone());
        if let (Some(theirs), Some(ours)) = (theirs, ours) {
            if theirs != ours {
                let detail = format!(
                    "back on an empty data folder, node {id} founded cluster {theirs} of its own and is ready in it; the others are in {ours}"
                );
                problems.push(ChaosError::SecondCluster { id, theirs, ours }.to_string());
                return Outcome::new(Reaction::SecondCluster, detail);
            }
        }
    }
    let mut outcome = readmit(cluster, id, "an empty data folder", admission, problems).await;
    crashed(cluster, &marks, &mut outcome, problems);
    outcome
}

/// Entries node `id` must apply after its folder is copied before the copy is old enough:
/// it has since acknowledged entries and votes the copy does not hold.
const AHEAD_OF_COPY: u64 = 20;

/// [`FaultKind::RestoreOldCopy`]: a crash-consistent copy of follower `id`'s folder, writes
/// that it acknowledges after the copy, then the copy in place of its folder.
async fn restore_old_copy(
    cluster: &mut Cluster,
    progress: &Progress,
    id: u64,
    problems: &mut Vec<String>,
) -> Outcome {
    let marks = cluster.log_marks();
    let applied = |status: Option<serde_json::Value>| {
        status.and_then(|s| s["last_applied"].as_u64()).unwrap_or(0)
    };
    let copy = cluster.node(id).data.with_file_name("data-copy");
    if let Err(e) = cluster.copy_folder(id, &copy) {
        problems.push(e.to_string());
        return Outcome::new(
            Reaction::Undecided,
            format!("no copy of node {id}'s folder: {e}"),
        );
    }
    let at_copy = applied(cluster.status(id).await);
    let from = acknowledged(progress, Class::Write);
    if let Err(e) = await_acks(progress, Class::Write, from).await {
        problems.push(e.to_string());
    }
    // Bounded: the workload writes tens of entries a second.
    let deadline = Instant::now() + ACKS_WITHIN;
    let mut now = at_copy;
    while now < at_copy + AHEAD_OF_COPY && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        now = applied(cluster.status(id).await);
    }
    if let Err(e) = cluster.restore_folder(id, &copy) {
        problems.push(e.to_string());
    }
    let logged = cluster.logged(id);
    if let Err(e) = cluster.launch(id) {
        problems.push(e.to_string());
    }
    let admission = cluster.admission(id, logged, DECIDE_WITHIN).await;
    let state = "a copy of its folder from before it applied the entries it has since acknowledged";
    let mut outcome = readmit(cluster, id, state, admission, problems).await;
    outcome.detail = format!(
        "copy at applied index {at_copy}, restored at {now}; {}",
        outcome.detail
    );
    crashed(cluster, &marks, &mut outcome, problems);
    outcome
}

/// How far past the real time a row's `updated_at` may be when the leader's clock runs
/// ahead: the time a write takes, plus what a leader that clamps stamps to the log's
/// newest time allows; a clock trusted as it is shows days.
const FUTURE_STAMP_ALLOWANCE: Duration = Duration::from_secs(5);

/// The counter of receipts retention dropped (node/src/metrics.rs).
const PRUNED_METRIC: &str = "rowcall_receipts_pruned_total";

/// [`FaultKind::LeaderClockJump`]: `leader` restarts with its clock [`CLOCK_JUMP_MS`] ahead,
/// is made the leader again and leads for `hold` while retention runs; then its clock is put
/// back. Any receipt dropped meanwhile was younger than the retention age.
async fn leader_clock_jump(
    cluster: &mut Cluster,
    progress: &Progress,
    leader: u64,
    hold: Duration,
    problems: &mut Vec<String>,
) -> Outcome {
    let marks = cluster.log_marks();
    let mut note = |r: Result<(), ChaosError>| {
        if let Err(e) = r {
            problems.push(e.to_string());
        }
    };
    let from = acknowledged(progress, Class::Invoke);
    note(await_acks(progress, Class::Invoke, from).await);
    cluster.set_env(leader, CLOCK_OFFSET_ENV, Some(CLOCK_JUMP_MS.to_string()));
    note(cluster.terminate(leader).await);
    note(cluster.restart(leader).await);
    note(cluster.make_leader(leader).await);
    let receipts = |digest: Option<serde_json::Value>| digest.and_then(|d| d["receipts"].as_u64());
    let pruned_before = cluster.metric(leader, PRUNED_METRIC).await.unwrap_or(0.0);
    let receipts_before = receipts(cluster.digest(leader).await);
    let [_, writes_before, invokes_before] = progress.snapshot().map(|(_, ok)| ok);
    tokio::time::sleep(hold).await;
    let [_, writes_after, invokes_after] = progress.snapshot().map(|(_, ok)| ok);
    let led = cluster
        .status(leader)
        .await
        .is_some_and(|s| s["role"].as_str() == Some("leader"));
    let pruned = cluster.metric(leader, PRUNED_METRIC).await.unwrap_or(0.0) - pruned_before;
    let receipts_after = receipts(cluster.digest(leader).await);
    // Rows stamped later than the real time (with room for the request and a clamp's
    // allowance): the leader's clock reached the catalogue.
    let real = std::time::SystemTime::now() + FUTURE_STAMP_ALLOWANCE;
    let ahead: Vec<String> = cluster
        .updated_at(leader)
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, at)| *at > real)
        .map(|(key, _)| key)
        .collect();
    // The counter says what retention dropped; fewer receipts than before says it too, for
    // a build that counts otherwise.
    let shrank = match (receipts_before, receipts_after) {
        (Some(before), Some(after)) => before.saturating_sub(after),
        _ => 0,
    };
    let dropped = (pruned.max(0.0) as u64).max(shrank);
    // Its clock back, for the rest of the run.
    cluster.set_env(leader, CLOCK_OFFSET_ENV, None);
    note(cluster.terminate(leader).await);
    note(cluster.restart(leader).await);
    let days = CLOCK_JUMP_MS as f64 / 86_400_000.0;
    let served = format!(
        "node {leader} {} for {:.0} s with its clock {days:.0} days ahead (retention: 1 day, every second), while {} writes and {} invocations were acknowledged",
        if led { "led" } else { "was made leader but did not keep leading" },
        hold.as_secs_f64(),
        writes_after - writes_before,
        invokes_after - invokes_before,
    );
    if !ahead.is_empty() {
        problems.push(
            ChaosError::StampedAhead {
                id: leader,
                rows: ahead.len(),
                example: ahead[0].clone(),
                allowance_s: FUTURE_STAMP_ALLOWANCE.as_secs(),
            }
            .to_string(),
        );
    }
    let stamps = if ahead.is_empty() {
        "no row stamped ahead of the real time".to_owned()
    } else {
        format!("{} rows stamped ahead of the real time", ahead.len())
    };
    let served = format!("{served}; {stamps}");
    let mut outcome = if dropped > 0 {
        problems.push(
            ChaosError::ClockJumpPruned {
                id: leader,
                offset_ms: CLOCK_JUMP_MS,
                dropped,
            }
            .to_string(),
        );
        Outcome::new(
            Reaction::AcceptedUnsafely,
            format!("{served}; it dropped {dropped} receipts by its clock"),
        )
    } else {
        Outcome::new(
            Reaction::StillServing,
            format!("{served}; it dropped no receipt"),
        )
    };
    crashed(cluster, &marks, &mut outcome, problems);
    outcome
}

/// How long the sides of a split get to elect a leader and to notice they lost theirs.
const STALE_WITHIN: Duration = Duration::from_secs(15);

/// Waits until the nodes outside `minority` follow a new leader, then until every node of
/// `minority` calls itself stale and fails `/readyz`.
async fn minority_goes_stale(cluster: &Cluster, minority: &[u64]) -> Result<(), ChaosError> {
    let majority: Vec<u64> = cluster
        .ids()
        .into_iter()
        .filter(|id| !minority.contains(id))
        .collect();
    let deadline = Instant::now() + STALE_WITHIN;
    loop {
        let mut led = false;
        for &id in &majority {
            let status = cluster.status(id).await;
            led |= status.is_some_and(|s| {
                s["leader"].as_u64().is_some_and(|l| majority.contains(&l)) && s["stale"] == false
            });
        }
        if led {
            break;
        }
        if Instant::now() >= deadline {
            return Err(ChaosError::MajorityLeaderless {
                waited_s: STALE_WITHIN.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deadline = Instant::now() + STALE_WITHIN;
    for &id in minority {
        loop {
            let stale = cluster.status(id).await.is_some_and(|s| s["stale"] == true);
            if stale && !cluster.is_ready(id).await {
                break;
            }
            if Instant::now() >= deadline {
                return Err(ChaosError::NotStale {
                    id,
                    waited_s: STALE_WITHIN.as_secs(),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// Snapshots every this many entries during a storm, keeping no log behind them.
const STORM: SnapshotStorm = SnapshotStorm { every: 5, keep: 0 };

/// Restarts every node with [`STORM`]'s settings (followers first, then the leader), then
/// kills each follower of the new leader for a while and restarts it: the leader has
/// purged what it missed, so it must catch up by snapshot. Fails if none had to.
async fn snapshot_storm(cluster: &mut Cluster) -> Result<(), ChaosError> {
    cluster.set_snapshot_storm(STORM);
    let (leader, found) = leader_or_first(cluster).await;
    found?;
    let order: Vec<u64> = cluster
        .ids()
        .into_iter()
        .filter(|&id| id != leader)
        .chain([leader])
        .collect();
    for id in order {
        cluster.terminate(id).await?;
        cluster.restart(id).await?;
    }
    let (leader, found) = leader_or_first(cluster).await;
    found?;
    let mut seen = Vec::new();
    for id in cluster.ids().into_iter().filter(|&id| id != leader) {
        let had = cluster
            .status(id)
            .await
            .and_then(|s| s["last_log_index"].as_u64())
            .unwrap_or(0);
        cluster.kill(id);
        // Long enough for the workload to write a few storms' worth of entries.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let purged = cluster
            .status(leader)
            .await
            .and_then(|s| s["purged_index"].as_u64())
            .unwrap_or(0);
        cluster.restart(id).await?;
        seen.push((id, had, purged));
    }
    if seen.iter().any(|&(_, had, purged)| purged > had) {
        return Ok(());
    }
    let detail = seen
        .iter()
        .map(|(id, had, purged)| {
            format!("node {id} had log to {had}, the leader's log was purged to {purged}")
        })
        .collect::<Vec<_>>()
        .join("; ");
    Err(ChaosError::NoSnapshotCatchUp { detail })
}

/// The name of the baseline's window replaying the cluster's window `name`.
pub fn replay_name(name: &str) -> String {
    format!("kill-restart for {name}")
}

/// The baseline: the single node is killed at each window's start and restarted at its
/// end, replaying the cluster run's windows (the seed's situation: one node, down while
/// anything is wrong).
pub async fn replay_on_single(
    cluster: &mut Cluster,
    windows: &[FaultWindow],
    epoch: Instant,
) -> Vec<FaultWindow> {
    let mut out = Vec::new();
    for w in windows {
        tokio::time::sleep_until(epoch + Duration::from_secs_f64(w.injected_s)).await;
        let injected_s = since(epoch);
        cluster.kill(1);
        tokio::time::sleep_until(epoch + Duration::from_secs_f64(w.healed_s)).await;
        let mut problems = Vec::new();
        if let Err(e) = cluster.restart(1).await {
            problems.push(e.to_string());
        }
        out.push(FaultWindow {
            name: replay_name(&w.name),
            targets: vec![1],
            injected_s,
            healed_s: since(epoch),
            problems,
            outcome: None,
        });
    }
    cluster.heal_all().await;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_parse_and_combine() {
        assert_eq!(Scenario::parse("ci").unwrap().faults, CI.to_vec());
        let s = Scenario::parse("kill-leader,split").unwrap();
        assert_eq!(s.faults, vec![FaultKind::KillLeader, FaultKind::Split]);
        assert_eq!(s.min_nodes(), 2);
        assert!(Scenario::parse("nope").is_err());
        assert!(Scenario::parse("").is_err());
        for s in Scenario::all() {
            assert_eq!(Scenario::parse(&s.name).unwrap(), s);
        }
    }

    #[test]
    fn the_disk_and_clock_scenarios_are_in_all_and_parse() {
        let names = [
            "lose-raft-state",
            "lose-folder",
            "restore-old-copy",
            "founder-loses-folder",
            "leader-clock-jump",
        ];
        let all: Vec<String> = Scenario::all().into_iter().map(|s| s.name).collect();
        for name in names {
            assert!(all.iter().any(|n| n == name), "{name} not in all: {all:?}");
            assert!(known().contains(name), "{name} not listed in {}", known());
            let scenario = Scenario::parse(name).unwrap();
            assert_eq!(scenario.faults.len(), 1);
            assert_eq!(scenario.faults[0].name(), name);
            assert_eq!(scenario.min_nodes(), 3, "{name}");
        }
        // Only the clock jump needs receipt retention for the run.
        let configs: Vec<_> = FaultKind::ALL.iter().filter_map(|k| k.config()).collect();
        assert_eq!(configs, [RETENTION_CONFIG]);
        assert_eq!(
            Scenario::parse("leader-clock-jump").unwrap().faults[0].config(),
            Some(RETENTION_CONFIG)
        );
    }

    #[test]
    fn the_lost_state_sides_leave_a_quorum_without_the_writes_leader() {
        // Three nodes led by 2: node 1 paused, node 3 loses its state; 1 and 3 are a quorum.
        let sides = LostStateSides::split(&[1, 2, 3], 2);
        assert_eq!((sides.paused.as_slice(), sides.loser), (&[1][..], 3));
        assert!(sides.rest.is_empty());
        assert_eq!(sides.targets(), [3, 2, 1]);
        // Five led by 1: 2 and 3 paused, 4 loses its state, 5 is stopped with the leader.
        let sides = LostStateSides::split(&[1, 2, 3, 4, 5], 1);
        assert_eq!(sides.paused, [2, 3]);
        assert_eq!((sides.loser, sides.rest.as_slice()), (4, &[5][..]));
        // A and B alone are a majority of the voters.
        assert!(sides.paused.len() + 1 > 5 / 2);
    }

    #[test]
    fn the_plan_has_one_fault_per_period_between_warm_up_and_cool_down() {
        // The CI run: 40 s, period 10 s: faults at 5, 15 and 25 s; 35 s is in the cool-down.
        let schedule = crate::run::schedule(Duration::from_secs(40), Duration::from_secs(10));
        assert_eq!(schedule.planned(&CI), CI.to_vec());
        // Kinds repeat in turn when there are more starts than kinds.
        let long = crate::run::schedule(Duration::from_secs(60), Duration::from_secs(10));
        assert_eq!(
            long.planned(&[FaultKind::Slow, FaultKind::Lossy]),
            [
                FaultKind::Slow,
                FaultKind::Lossy,
                FaultKind::Slow,
                FaultKind::Lossy,
                FaultKind::Slow
            ]
        );
        assert!(schedule.planned(&[]).is_empty());
        // A fault that takes most of a run is planned once; the others take its turns.
        let once = FaultKind::LoseFolder;
        assert_eq!(schedule.planned(&[once]), [once]);
        assert_eq!(
            long.planned(&[once, FaultKind::Slow]),
            [
                once,
                FaultKind::Slow,
                FaultKind::Slow,
                FaultKind::Slow,
                FaultKind::Slow
            ]
        );
        assert_eq!(
            long.planned(&[FaultKind::LeaderClockJump, once]),
            [FaultKind::LeaderClockJump, once]
        );
    }
}
