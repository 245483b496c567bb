//! Faults and scenarios. A scenario is a list of fault kinds injected in turn on a fixed
//! period after a warm-up; each fault holds for a while and is healed before the next.
//! Scenarios combine with commas: `kill-leader,isolate-leader`.
//!
//! ```text
//!  0 ── warm-up ──┬── fault 1 ──heal──┬── fault 2 ──heal──┬ … ── cool-down ── end
//!                 └──── period ───────┘
//! ```

use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::cluster::{Cluster, SnapshotStorm, UnsafeRejoin};
use crate::error::ChaosError;
use crate::proxy::{Flow, LinkState};

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
}

impl FaultKind {
    /// Every kind, in `all` order.
    pub const ALL: [FaultKind; 15] = [
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
            Self::Slow | Self::Lossy => Duration::from_secs(5),
            Self::RollingRestart
            | Self::WipeRejoin
            | Self::WipeRejoinUnsafe
            | Self::SnapshotStorm => Duration::ZERO,
        }
    }

    /// Nodes it needs.
    pub fn min_nodes(self) -> usize {
        match self {
            Self::KillLeader
            | Self::PauseLeader
            | Self::Slow
            | Self::Lossy
            | Self::RollingRestart => 1,
            Self::WipeRejoin | Self::WipeRejoinUnsafe | Self::SnapshotStorm => 3,
            Self::MinorityStale => 5,
            _ => 2,
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
    /// what it planned, and the report says so.
    pub fn planned(&self, kinds: &[FaultKind]) -> Vec<FaultKind> {
        let last_start = self.duration.saturating_sub(self.cooldown);
        let mut planned = Vec::new();
        let mut next = self.warmup;
        // Bounded: the period is at least a second (flags) and the duration finite.
        while !kinds.is_empty() && next <= last_start && !self.period.is_zero() {
            planned.push(kinds[planned.len() % kinds.len()]);
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
}

/// Runs the schedule of `faults` against `cluster` until the run ends. Returns what
/// happened. Everything is healed at the end.
pub async fn run(
    cluster: &mut Cluster,
    faults: &[FaultKind],
    schedule: Schedule,
    epoch: Instant,
) -> Vec<FaultWindow> {
    let mut windows = Vec::new();
    let last_start = schedule.duration.saturating_sub(schedule.cooldown);
    let mut next = schedule.warmup;
    for kind in schedule.planned(faults) {
        if next > last_start {
            break;
        }
        tokio::time::sleep_until(epoch + next).await;
        let window = inject(cluster, kind, epoch).await;
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

/// Injects one fault, holds it, heals it.
pub async fn inject(cluster: &mut Cluster, kind: FaultKind, epoch: Instant) -> FaultWindow {
    let mut problems = Vec::new();
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
            note(match cluster.wipe_and_rejoin_unsafely(id).await {
                Ok(UnsafeRejoin::RefusedWithAdvice) => Ok(()),
                Ok(UnsafeRejoin::Accepted) => Err(ChaosError::UnsafeRejoinAccepted { id }),
                Ok(UnsafeRejoin::RefusedSilently) => {
                    Err(unclear("exited without naming the removal it needs"))
                }
                Ok(UnsafeRejoin::Undecided) => Err(unclear("was neither refused nor let in")),
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
    }
    FaultWindow {
        name: kind.name().to_owned(),
        targets,
        injected_s,
        healed_s: since(epoch),
        problems,
    }
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
    }
}
