//! Turns events, fault windows and the verdict into the report: per operation and per
//! second attempts, successes, errors by kind and latency percentiles; per fault the time
//! until each class recovered; availability per class; and the one-screen summary.
//!
//! Recovery of a class after a fault: from the injection to the start of the first
//! one-second stretch in which every attempt of that class succeeded, counted from the
//! first failure after the injection (0 when nothing failed before the next fault).
//!
//! A run passes only if the checker's verdict holds *and* the run is evidence: each class
//! succeeded for at least [`EVIDENCE_FLOOR`] of its operations (a run whose writes were all
//! refused loses nothing, and proves nothing), and the fault schedule ran as planned (every
//! planned fault injected in order, on the node it meant, and healed). The report passes
//! only if the baseline passes too.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::check::{Verdict, CHECKER};
use crate::faults::FaultWindow;
use crate::history::{Class, Event, FinalState, Op};
use crate::linearizability::{Judgement, Linearizability};
use crate::workload::{Hedges, Via};

/// Share of each class's operations that must have succeeded (acknowledged writes, receipts
/// given, reads answered) for a run to count as evidence. Low enough for the single-node
/// baseline, down for every fault window, and far above a run that did nothing.
pub const EVIDENCE_FLOOR: f64 = 0.25;

/// A stretch this long with at least [`GREEN_RATE`] successes counts as recovered.
const GREEN_US: u64 = 1_000_000;
/// Success rate of a recovered stretch.
const GREEN_RATE: f64 = 0.99;

/// Latency percentiles, in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Slowest.
    pub max_ms: f64,
}

impl Latency {
    /// Percentiles of latencies given in microseconds.
    pub fn of(mut us: Vec<u64>) -> Latency {
        if us.is_empty() {
            return Latency::default();
        }
        us.sort_unstable();
        let at = |p: f64| us[((us.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0;
        Latency {
            p50_ms: at(0.5),
            p99_ms: at(0.99),
            max_ms: at(1.0),
        }
    }
}

/// Operations and attempts, errors by kind and latency of a set of requests.
///
/// An operation is what a client asked for; it makes one attempt per node it tries (a
/// client library fails over to the next node on a transport error or a 5xx, up to three
/// nodes). Availability is per operation: answered within the SLO (`--slo-ms`, 1 s),
/// retries included. Sessions are open-loop: a tick that passed while a session still
/// waited for an answer is an operation made late (`blocked`, no attempt of its own),
/// available only if that wait succeeded within the SLO of the tick, so a stall weighs as
/// much as the requests it held up.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    /// Operations started.
    pub operations: u64,
    /// Operations answered within the SLO (on some attempt).
    pub operations_ok: u64,
    /// Requests sent (operations plus retries).
    pub attempts: u64,
    /// Requests answered as the protocol defines.
    pub successes: u64,
    /// Failed attempts by kind (`timeout`, `connect`, `http_503:no_quorum`, …).
    pub errors: BTreeMap<String, u64>,
    /// Operations made late because the session was still waiting for an earlier answer.
    pub blocked: u64,
    /// Answers marked `x-rowcall-stale: true`.
    pub stale: u64,
    /// Latency of operations, retries included (failed ones up to their failure).
    pub latency: Latency,
}

impl Stats {
    fn of<'a>(events: impl IntoIterator<Item = &'a Event>) -> Stats {
        let mut stats = Stats::default();
        let mut latencies = Vec::new();
        for e in events {
            if !e.blocked() {
                stats.attempts += 1;
            }
            if e.starts_operation() {
                stats.operations += 1;
                if e.operation_ok() {
                    stats.operations_ok += 1;
                }
                if !e.blocked() {
                    latencies.push(e.operation_latency_us());
                }
            }
            if e.stale {
                stats.stale += 1;
            }
            match &e.outcome {
                crate::history::Outcome::Ok(_) => stats.successes += 1,
                crate::history::Outcome::Failed { .. } if e.blocked() => {
                    stats.blocked += 1;
                }
                crate::history::Outcome::Failed { error, .. } => {
                    *stats.errors.entry(error.clone()).or_default() += 1;
                }
            }
        }
        stats.latency = Latency::of(latencies);
        stats
    }

    /// Successful operations over operations (1 when there were none).
    pub fn rate(&self) -> f64 {
        if self.operations == 0 {
            1.0
        } else {
            self.operations_ok as f64 / self.operations as f64
        }
    }

    /// Successful attempts over attempts, without failover (1 when there were none).
    pub fn attempt_rate(&self) -> f64 {
        if self.attempts == 0 {
            1.0
        } else {
            self.successes as f64 / self.attempts as f64
        }
    }
}

/// One second of the run.
#[derive(Debug, Clone, Serialize)]
pub struct Second {
    /// Seconds since the start.
    pub t: u64,
    /// Per class.
    pub classes: BTreeMap<&'static str, Stats>,
    /// Per operation.
    pub ops: BTreeMap<&'static str, Stats>,
}

/// Availability per class, as fractions.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Availability {
    /// Ask, contract, directory read, confirm.
    pub read: f64,
    /// Insert, update, delete.
    pub write: f64,
    /// Invocations.
    pub invoke: f64,
}

impl Availability {
    fn get(&self, class: Class) -> f64 {
        match class {
            Class::Read => self.read,
            Class::Write => self.write,
            Class::Invoke => self.invoke,
        }
    }
}

/// How one class fared after one fault.
#[derive(Debug, Clone, Serialize)]
pub struct Recovery {
    /// Milliseconds from injection until it recovered; `None` if it never did before the
    /// next fault (or the end).
    pub recovered_ms: Option<f64>,
    /// Failed operations between this fault and the next.
    pub failures: u64,
    /// Operations between this fault and the next.
    pub operations: u64,
    /// The longest an operation that started between this fault and the next took, retries
    /// included: how long a caller waited through the fault at worst (a leader change that
    /// clients ride through shows here, not in `recovered_ms`).
    pub longest_ms: f64,
}

/// A fault and the recovery of each class.
#[derive(Debug, Clone, Serialize)]
pub struct FaultReport {
    /// The fault.
    #[serde(flatten)]
    pub window: FaultWindow,
    /// Per class.
    pub recovery: BTreeMap<&'static str, Recovery>,
}

/// One run: the cluster, or the single-node baseline.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// Nodes.
    pub nodes: usize,
    /// Seconds of workload.
    pub duration_s: f64,
    /// Per class: operations that succeeded (with failover to other nodes).
    pub availability: Availability,
    /// Per class: single requests that succeeded (no failover).
    pub attempt_availability: Availability,
    /// Rows with an acknowledged write not on every node at the end.
    pub lost_writes: usize,
    /// Receipts given to clients not confirmed by every node at the end.
    pub lost_receipts: usize,
    /// Reads that did not show the session's own writes, plus reads answered below the
    /// `x-rowcall-min-index` they sent.
    pub ryw_violations: usize,
    /// Answers whose index went backwards for a session on one node.
    pub index_regressions: usize,
    /// Rows at the end that no write explains.
    pub phantom_rows: usize,
    /// The nodes' digests differ or never met.
    pub diverged: bool,
    /// Why the run does not count as evidence (empty when it does): too little succeeded to
    /// have tested anything, or the faults did not run as planned.
    pub evidence: Vec<String>,
    /// Every check held and the run is evidence.
    pub passed: bool,
    /// What failed, each named with the checker that found it: the harness's own
    /// (`rowcall-chaos check.rs`) or the outside linearizability checker.
    pub failed_checks: Vec<String>,
    /// The outside checker's verdict: every row's history through a linearizability tester
    /// nobody here wrote (`linearizability.rs`).
    pub linearizability: Linearizability,
    /// Per class totals.
    pub classes: BTreeMap<&'static str, Stats>,
    /// Per operation totals.
    pub operations: BTreeMap<&'static str, Stats>,
    /// Per fault.
    pub faults: Vec<FaultReport>,
    /// The checker's full verdict.
    pub checks: Verdict,
    /// The nodes at the end: settled or not, outbox left, digests.
    #[serde(rename = "final")]
    pub end: FinalSummary,
    /// Per second.
    pub per_second: Vec<Second>,
    /// The writes sent through the client library and what became of their hedges (`None`
    /// for sessions over plain HTTP, which do not hedge).
    pub hedges: Option<Hedges>,
    /// Terms begun while the workload ran (the highest term any node knew at the end less
    /// the highest at the start): each an election, won or not. `None` when no node
    /// answered at the start or the end.
    pub elections: Option<u64>,
}

/// The end state in brief.
#[derive(Debug, Clone, Serialize)]
pub struct FinalSummary {
    /// Outboxes drained and digests agreed within the bound.
    pub settled: bool,
    /// Receipts left in outboxes.
    pub outbox_left: u64,
    /// Per node: its digest.
    pub digests: BTreeMap<u64, Option<crate::history::Digest>>,
}

fn class_stats(events: &[Event]) -> BTreeMap<&'static str, Stats> {
    Class::ALL
        .iter()
        .map(|c| {
            (
                c.name(),
                Stats::of(events.iter().filter(|e| e.op.class() == *c)),
            )
        })
        .collect()
}

fn op_stats(events: &[Event]) -> BTreeMap<&'static str, Stats> {
    Op::NAMES
        .iter()
        .map(|name| {
            (
                *name,
                Stats::of(events.iter().filter(|e| e.op.name() == *name)),
            )
        })
        .collect()
}

/// Recovery of `class` in the window `[from_us, to_us)`.
pub fn recovery(events: &[Event], class: Class, from_us: u64, to_us: u64) -> Recovery {
    let mut window: Vec<&Event> = events
        .iter()
        .filter(|e| {
            // A stretch that starts before the next fault may run on past it.
            e.starts_operation()
                && e.op.class() == class
                && e.start_us >= from_us
                && e.start_us < to_us + GREEN_US
        })
        .collect();
    window.sort_by_key(|e| e.start_us);
    let inside = |e: &&&Event| e.start_us < to_us;
    let failures = window
        .iter()
        .filter(inside)
        .filter(|e| !e.operation_ok())
        .count() as u64;
    let attempts = window.iter().filter(inside).count() as u64;
    let longest_ms = window
        .iter()
        .filter(inside)
        .map(|e| e.operation_latency_us())
        .max()
        .unwrap_or(0) as f64
        / 1000.0;
    let Some(first_failure) = window
        .iter()
        .position(|e| e.start_us < to_us && !e.operation_ok())
    else {
        return Recovery {
            recovered_ms: Some(0.0),
            failures,
            operations: attempts,
            longest_ms,
        };
    };
    let recovered = (first_failure..window.len())
        .filter(|&i| window[i].operation_ok())
        .find(|&i| {
            let stretch_end = window[i].start_us + GREEN_US;
            let stretch: Vec<&&Event> = window[i..]
                .iter()
                .take_while(|e| e.start_us < stretch_end)
                .collect();
            let ok = stretch.iter().filter(|e| e.operation_ok()).count();
            ok as f64 >= GREEN_RATE * stretch.len() as f64
        })
        .map(|i| window[i].start_us.saturating_sub(from_us) as f64 / 1000.0);
    Recovery {
        recovered_ms: recovered,
        failures,
        operations: attempts,
        longest_ms,
    }
}

/// What a run set out to do, to judge whether it did it.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The faults the schedule planned, by window name, in order.
    pub faults: Vec<String>,
    /// What went wrong healing everything at the end, if anything.
    pub heal_problems: Vec<String>,
}

/// Operations that must have succeeded out of `operations` (at least one).
fn floor(operations: u64) -> u64 {
    ((operations as f64 * EVIDENCE_FLOOR).ceil() as u64).max(1)
}

/// Why a run is not evidence, whatever the checker found (empty when it is).
pub fn evidence(
    verdict: &Verdict,
    classes: &BTreeMap<&'static str, Stats>,
    windows: &[FaultWindow],
    plan: &Plan,
) -> Vec<String> {
    let mut problems = Vec::new();
    let successes = [
        (
            "write",
            verdict.acknowledged_writes as u64,
            "acknowledged writes",
        ),
        ("invoke", verdict.receipts_given as u64, "receipts given"),
        ("read", classes["read"].successes, "reads answered"),
    ];
    for (class, done, what) in successes {
        let operations = classes[class].operations;
        if done < floor(operations) {
            problems.push(format!(
                "{done} {what} of {operations} {class} operations: below the floor of {} ({:.0}%)",
                floor(operations),
                EVIDENCE_FLOOR * 100.0
            ));
        }
    }
    let ran: Vec<&str> = windows.iter().map(|w| w.name.as_str()).collect();
    if ran != plan.faults {
        problems.push(format!("faults planned {:?} but run {ran:?}", plan.faults));
    }
    for w in windows {
        if w.targets.is_empty() {
            problems.push(format!("{} at {:.1}s hit no node", w.name, w.injected_s));
        }
        if !w.problems.is_empty() {
            problems.push(format!(
                "{} at {:.1}s on nodes {:?}: {}",
                w.name,
                w.injected_s,
                w.targets,
                w.problems.join("; ")
            ));
        }
    }
    problems.extend(
        plan.heal_problems
            .iter()
            .map(|p| format!("healing at the end: {p}")),
    );
    problems
}

/// Builds the report of one run.
pub fn run_report(
    nodes: usize,
    duration_s: f64,
    events: &[Event],
    windows: &[FaultWindow],
    plan: &Plan,
    verdict: Verdict,
    end: &FinalState,
) -> RunReport {
    // Linearizable reads are judged, not counted: availability is of what §3.2 promises.
    let all = events;
    let gated: Vec<Event> = events
        .iter()
        .filter(|e| e.op.counts_for_availability())
        .cloned()
        .collect();
    let events = gated.as_slice();
    let classes = class_stats(events);
    let evidence = evidence(&verdict, &classes, windows, plan);
    let availability = Availability {
        read: classes["read"].rate(),
        write: classes["write"].rate(),
        invoke: classes["invoke"].rate(),
    };
    let end_us = (duration_s * 1e6) as u64 + 10_000_000;
    let faults = windows
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let from = (w.injected_s * 1e6) as u64;
            let to = windows
                .get(i + 1)
                .map_or(end_us, |n| (n.injected_s * 1e6) as u64);
            FaultReport {
                window: w.clone(),
                recovery: Class::ALL
                    .iter()
                    .map(|c| (c.name(), recovery(events, *c, from, to)))
                    .collect(),
            }
        })
        .collect();
    let seconds = events
        .iter()
        .map(|e| e.start_us / 1_000_000)
        .max()
        .map_or(0, |s| s + 1);
    let mut buckets: Vec<Vec<Event>> = vec![Vec::new(); seconds as usize];
    for e in events {
        buckets[(e.start_us / 1_000_000) as usize].push(e.clone());
    }
    let per_second = buckets
        .iter()
        .enumerate()
        .map(|(t, b)| Second {
            t: t as u64,
            classes: class_stats(b),
            ops: op_stats(b),
        })
        .collect();
    let attempt_availability = Availability {
        read: classes["read"].attempt_rate(),
        write: classes["write"].attempt_rate(),
        invoke: classes["invoke"].attempt_rate(),
    };
    RunReport {
        nodes,
        duration_s,
        availability,
        attempt_availability,
        lost_writes: verdict.lost_writes,
        lost_receipts: verdict.lost_receipts,
        ryw_violations: verdict.ryw_violations + verdict.barrier_violations,
        index_regressions: verdict.index_regressions,
        phantom_rows: verdict.phantom_rows,
        diverged: verdict.diverged,
        passed: verdict.passed() && evidence.is_empty(),
        failed_checks: verdict.failures(),
        linearizability: verdict.linearizability.clone(),
        evidence,
        classes,
        operations: op_stats(all),
        faults,
        checks: verdict,
        end: FinalSummary {
            settled: end.settled,
            outbox_left: end.outbox_left,
            digests: end.nodes.iter().map(|n| (n.id, n.digest.clone())).collect(),
        },
        per_second,
        hedges: None,
        elections: None,
    }
}

/// The ratio the cluster buys, per class.
#[derive(Debug, Clone, Serialize)]
pub struct Gain {
    /// Cluster availability over baseline availability.
    pub availability_ratio: BTreeMap<&'static str, f64>,
    /// Baseline failure fraction over the cluster's (how many times fewer requests
    /// failed); the cluster's fraction is floored at one failed request.
    pub failure_ratio: BTreeMap<&'static str, f64>,
}

/// The whole report: the cluster run at the top level, the baseline beside it.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// Seed of the workload and the proxies.
    pub seed: u64,
    /// Client sessions.
    pub sessions: u32,
    /// Target operations per second (all sessions).
    pub rate: f64,
    /// An operation answered later than this counts as unavailable.
    pub slo_ms: u64,
    /// How sessions reached the nodes: `client` (the client library over gRPC) or `http`.
    pub via: &'static str,
    /// The cluster run.
    #[serde(flatten)]
    pub cluster: RunReport,
    /// The same workload and schedule against one node killed and restarted.
    pub baseline: Option<RunReport>,
    /// Cluster against baseline.
    pub gain: Option<Gain>,
}

impl Report {
    /// Assembles the report and the gain.
    pub fn new(
        scenario: String,
        seed: u64,
        sessions: u32,
        rate: f64,
        slo_ms: u64,
        cluster: RunReport,
        baseline: Option<RunReport>,
    ) -> Report {
        let gain = baseline.as_ref().map(|b| {
            let mut availability_ratio = BTreeMap::new();
            let mut failure_ratio = BTreeMap::new();
            for c in Class::ALL {
                let (ca, ba) = (cluster.availability.get(c), b.availability.get(c));
                availability_ratio.insert(c.name(), if ba > 0.0 { ca / ba } else { 0.0 });
                let attempts = cluster.classes[c.name()].operations.max(1) as f64;
                let cluster_failed = (1.0 - ca).max(1.0 / attempts);
                failure_ratio.insert(c.name(), (1.0 - ba) / cluster_failed);
            }
            Gain {
                availability_ratio,
                failure_ratio,
            }
        });
        Report {
            scenario,
            seed,
            sessions,
            rate,
            slo_ms,
            via: Via::default().name(),
            cluster,
            baseline,
            gain,
        }
    }

    /// The same report, saying sessions reached the nodes `via`.
    pub fn via(self, via: Via) -> Self {
        Self {
            via: via.name(),
            ..self
        }
    }

    /// Every check of the cluster run held and it was evidence; the same of the baseline.
    pub fn passed(&self) -> bool {
        self.cluster.passed && self.baseline.as_ref().is_none_or(|b| b.passed)
    }

    /// The one-screen text summary.
    pub fn summary(&self) -> String {
        let c = &self.cluster;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "rowcall-chaos  scenario {}  nodes {}  {:.0} s  {} sessions via {} at {:.0} ops/s  SLO {} ms  seed {}",
            self.scenario, c.nodes, c.duration_s, self.sessions, self.via, self.rate, self.slo_ms, self.seed
        );
        let _ = writeln!(
            s,
            "{:<8} {:>26} {:>26}",
            "",
            format!("cluster ({} nodes)", c.nodes),
            "one node (baseline)"
        );
        let _ = writeln!(
            s,
            "availability: operations answered within the SLO, clients failing over to other nodes:"
        );
        for class in Class::ALL {
            let name = class.name();
            let cell = |r: &RunReport| {
                let st = &r.classes[name];
                format!(
                    "{:>8.3}% p99 {:>7.1} ms",
                    st.rate() * 100.0,
                    st.latency.p99_ms
                )
            };
            let base = self.baseline.as_ref().map_or("-".into(), cell);
            let _ = writeln!(s, "{:<8} {:>26} {:>26}", name, cell(c), base);
        }
        let _ = writeln!(
            s,
            "{:<8} {:>26}",
            "",
            format!(
                "per request: {:.2}/{:.2}/{:.2}%",
                c.attempt_availability.read * 100.0,
                c.attempt_availability.write * 100.0,
                c.attempt_availability.invoke * 100.0
            )
        );
        if let Some(gain) = &self.gain {
            let _ = writeln!(
                s,
                "gain     failed requests: read {:.1}x fewer, write {:.1}x, invoke {:.1}x",
                gain.failure_ratio["read"],
                gain.failure_ratio["write"],
                gain.failure_ratio["invoke"]
            );
        }
        if let Some(h) = &c.hedges {
            let _ = writeln!(
                s,
                "hedges   {} of {} writes hedged to another node; the hedge's answer won {} of them",
                h.hedged, h.writes, h.won
            );
        }
        if let Some(n) = c.elections {
            let _ = writeln!(s, "elections {n} terms begun during the run");
        }
        let _ = writeln!(
            s,
            "faults (recovery from injection, and the longest wait: write / read / invoke; what the cluster did):"
        );
        for f in &c.faults {
            let r = |k: &str| {
                let r = &f.recovery[k];
                let recovered = r
                    .recovered_ms
                    .map_or("never".into(), |ms| format!("{:.2}s", ms / 1000.0));
                format!("{recovered} ({:.2}s)", r.longest_ms / 1000.0)
            };
            let did = f.window.outcome.as_ref().map_or("-", |o| o.did.name());
            let _ = writeln!(
                s,
                "  {:>6.1}s {:<16} nodes {:<8} healed +{:<5.1}s  {} / {} / {}  {did}{}",
                f.window.injected_s,
                f.window.name,
                format!("{:?}", f.window.targets),
                f.window.healed_s - f.window.injected_s,
                r("write"),
                r("read"),
                r("invoke"),
                if f.window.problems.is_empty() {
                    String::new()
                } else {
                    format!("  ({})", f.window.problems.join("; "))
                }
            );
            if let Some(outcome) = &f.window.outcome {
                let _ = writeln!(s, "           {}", outcome.detail);
            }
        }
        checks_lines(&mut s, "cluster", c);
        if let Some(b) = &self.baseline {
            checks_lines(&mut s, "baseline", b);
        }
        let _ = writeln!(s, "{}", if self.passed() { "PASS" } else { "FAIL" });
        s
    }
}

/// The summary's lines for one run's checks and evidence.
fn checks_lines(s: &mut String, label: &str, r: &RunReport) {
    let v = &r.checks;
    let _ = writeln!(
        s,
        "{label} checks by {CHECKER}: {} acknowledged writes ({} ambiguous), {} receipts ({} pending), {} nodes checked, settled {}: {}",
        v.acknowledged_writes,
        v.ambiguous_writes,
        v.receipts_given,
        v.pending_receipts_given,
        v.nodes_checked,
        v.settled,
        if v.harness_passed() { "pass" } else { "FAIL" }
    );
    let _ = writeln!(
        s,
        "  lost writes {}  lost receipts {}  RYW violations {}  index regressions {}  phantom rows {}  applied twice {}  history errors {}  unreachable nodes {:?}  diverged {}  | reported: late ambiguous writes {}, invoke ran an older row {}",
        r.lost_writes,
        r.lost_receipts,
        r.ryw_violations,
        r.index_regressions,
        r.phantom_rows,
        v.duplicate_applies,
        v.history_errors,
        v.unreachable_nodes,
        r.diverged,
        v.late_writes,
        v.invoke_stale
    );
    for (kind, examples) in &v.examples {
        for e in examples.iter().take(3) {
            let _ = writeln!(s, "    {kind}: {e}");
        }
    }
    let lin = &r.linearizability;
    let _ = writeln!(
        s,
        "{label} linearizability by {}: {} ({} rows, {} operations: {} session reads, {} linearizable reads, {} in flight; {} not linearizable, {} unchecked; {:.3} s, slowest row {:.3} s)",
        lin.checker,
        match lin.verdict {
            Judgement::Linearizable => "linearizable",
            Judgement::Violation => "VIOLATION",
            Judgement::Incomplete => "INCOMPLETE",
        },
        lin.keys,
        lin.operations,
        lin.reads,
        lin.linearizable_reads,
        lin.in_flight,
        lin.violating_keys,
        lin.unchecked_keys,
        lin.seconds,
        lin.slowest_key_seconds
    );
    for v in lin.violations.iter().take(3) {
        let _ = writeln!(s, "    not linearizable: {v}");
    }
    for u in lin.unchecked.iter().take(3) {
        let _ = writeln!(s, "    unchecked: {u}");
    }
    for problem in &r.evidence {
        let _ = writeln!(s, "  not evidence: {problem}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Operation, Outcome, Seen};

    fn write(start_ms: u64, ok: bool) -> Event {
        Event {
            session: 0,
            node: 1,
            incarnation: 0,
            op: Op::Delete { key: "K".into() },
            start_us: start_ms * 1000,
            latency_us: 1000,
            attempt: 0,
            operation: None,
            min_index: 0,
            index: None,
            stale: false,
            outcome: if ok {
                Outcome::Ok(Seen::Written)
            } else {
                Outcome::Failed {
                    error: "timeout".into(),
                    ambiguous: true,
                }
            },
        }
    }

    #[test]
    fn availability_counts_operations_with_failover_and_blocked_ticks() {
        // An operation that failed on one node and succeeded on the next is available; a
        // tick missed while blocked is an unavailable operation with no request.
        let mut failed = write(0, false);
        failed.operation = Some(Operation {
            ok: true,
            latency_us: 2500,
        });
        let mut retried = write(2, true);
        retried.attempt = 1;
        let mut blocked = write(1, false);
        blocked.operation = Some(Operation {
            ok: false,
            latency_us: 0,
        });
        blocked.outcome = Outcome::Failed {
            error: crate::history::BLOCKED.into(),
            ambiguous: false,
        };
        let stats = Stats::of(&[failed, retried, blocked, write(3, true)]);
        assert_eq!((stats.operations, stats.operations_ok), (3, 2));
        assert_eq!((stats.attempts, stats.successes, stats.blocked), (3, 2, 1));
        assert_eq!(stats.errors.get("timeout"), Some(&1));
        assert!((stats.rate() - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(stats.latency.max_ms, 2.5);
    }

    #[test]
    fn recovery_is_the_first_green_second_after_the_first_failure() {
        // Fault at 1000 ms; successes until 1200, failures 1200..2000, green from 2100.
        let mut events: Vec<Event> = (0..10).map(|i| write(1000 + i * 20, true)).collect();
        events.extend((0..8).map(|i| write(1200 + i * 100, false)));
        events.extend((0..30).map(|i| write(2100 + i * 50, true)));
        let r = recovery(&events, Class::Write, 1_000_000, 10_000_000);
        assert_eq!(r.recovered_ms, Some(1100.0));
        assert_eq!(r.failures, 8);
        assert_eq!(r.longest_ms, 1.0);
        // Nothing failed: recovered at once.
        let r = recovery(&events, Class::Write, 2_100_000, 10_000_000);
        assert_eq!(r.recovered_ms, Some(0.0));
        // A lone failure just before the next fault recovers with the next success.
        let mut events: Vec<Event> = (0..20).map(|i| write(1000 + i * 100, true)).collect();
        events.push(write(2990, false));
        events.extend((0..20).map(|i| write(3010 + i * 100, true)));
        let r = recovery(&events, Class::Write, 1_000_000, 3_000_000);
        assert_eq!(r.recovered_ms, Some(2010.0));
        assert_eq!(r.failures, 1);
        // Failing until the end: never.
        let events: Vec<Event> = (0..10).map(|i| write(1000 + i * 100, false)).collect();
        assert_eq!(
            recovery(&events, Class::Write, 1_000_000, 3_000_000).recovered_ms,
            None
        );
    }

    #[test]
    fn the_longest_wait_counts_an_operations_retries() {
        let mut events: Vec<Event> = (0..10).map(|i| write(1000 + i * 100, true)).collect();
        // Answered after 750 ms, on its third node.
        events[4].operation = Some(Operation {
            ok: true,
            latency_us: 750_000,
        });
        // After the window: not counted.
        let mut late = write(3500, true);
        late.latency_us = 2_000_000;
        events.push(late);
        let r = recovery(&events, Class::Write, 1_000_000, 3_000_000);
        assert_eq!(r.recovered_ms, Some(0.0));
        assert_eq!(r.longest_ms, 750.0);
    }

    /// `n` successful operations of each class, one every 10 ms.
    fn busy_run(n: u64) -> Vec<Event> {
        let ops = [
            (
                Op::Read { key: "K".into() },
                Seen::Row {
                    token: None,
                    version: None,
                },
            ),
            (
                Op::Invoke {
                    key: "K".into(),
                    own: false,
                },
                Seen::Receipt {
                    id: "inv_x".into(),
                    pending: false,
                    token: None,
                },
            ),
            (Op::Delete { key: "K".into() }, Seen::Written),
        ];
        (0..n * 3)
            .map(|i| {
                let (op, seen) = ops[(i % 3) as usize].clone();
                Event {
                    op,
                    outcome: Outcome::Ok(seen),
                    ..write(i * 10, true)
                }
            })
            .collect()
    }

    /// A verdict with nothing wrong and `writes` / `receipts` acknowledged.
    fn clean_verdict(writes: usize, receipts: usize) -> Verdict {
        Verdict {
            acknowledged_writes: writes,
            receipts_given: receipts,
            nodes_checked: 3,
            settled: true,
            ..Verdict::default()
        }
    }

    fn window(name: &str, targets: &[u64], problems: &[&str]) -> FaultWindow {
        FaultWindow {
            name: name.into(),
            targets: targets.to_vec(),
            injected_s: 5.0,
            healed_s: 8.0,
            problems: problems.iter().map(|p| p.to_string()).collect(),
            outcome: None,
        }
    }

    fn plan(faults: &[&str]) -> Plan {
        Plan {
            faults: faults.iter().map(|f| f.to_string()).collect(),
            heal_problems: Vec::new(),
        }
    }

    fn report(verdict: Verdict, windows: &[FaultWindow], plan: &Plan) -> RunReport {
        let events = busy_run(100);
        run_report(
            3,
            10.0,
            &events,
            windows,
            plan,
            verdict,
            &FinalState::default(),
        )
    }

    #[test]
    fn a_run_that_did_nothing_is_not_evidence() {
        let windows = [window("kill-leader", &[2], &[])];
        let plan = plan(&["kill-leader"]);
        // Positive control: enough of everything succeeded, the fault ran as planned.
        let good = report(clean_verdict(100, 100), &windows, &plan);
        assert!(
            good.passed && good.evidence.is_empty(),
            "{:?}",
            good.evidence
        );
        // Every write refused (a wrong admin key): nothing lost, nothing proven.
        let verdict = clean_verdict(0, 100);
        assert!(verdict.passed());
        let r = report(verdict, &windows, &plan);
        assert!(!r.passed);
        assert!(
            r.evidence[0].contains("0 acknowledged writes"),
            "{:?}",
            r.evidence
        );
        // Receipts below the floor (24 of 100 invocations) fail the same way.
        let r = report(clean_verdict(100, 24), &windows, &plan);
        assert!(!r.passed, "{:?}", r.evidence);
        assert!(report(clean_verdict(100, 25), &windows, &plan).passed);
        // No reads answered at all.
        let events: Vec<Event> = busy_run(100)
            .into_iter()
            .filter(|e| e.op.class() != Class::Read)
            .chain((0..100).map(|i| Event {
                op: Op::Read { key: "K".into() },
                ..write(i, false)
            }))
            .collect();
        let r = run_report(
            3,
            10.0,
            &events,
            &windows,
            &plan,
            clean_verdict(100, 100),
            &FinalState::default(),
        );
        assert!(!r.passed, "{:?}", r.evidence);
    }

    #[test]
    fn every_planned_fault_must_run_on_its_target_and_heal() {
        let plan = plan(&["kill-leader", "isolate-leader"]);
        let both = [
            window("kill-leader", &[1], &[]),
            window("isolate-leader", &[2], &[]),
        ];
        assert!(report(clean_verdict(100, 100), &both, &plan).passed);
        // The second fault never ran (its start fell into the cool-down).
        let r = report(clean_verdict(100, 100), &both[..1], &plan);
        assert!(!r.passed);
        assert!(r.evidence[0].contains("planned"), "{:?}", r.evidence);
        // No leader found, so node 1 was hit instead.
        let missed = [
            window("kill-leader", &[1], &["no leader known within 3 s"]),
            both[1].clone(),
        ];
        assert!(!report(clean_verdict(100, 100), &missed, &plan).passed);
        // A restart that failed.
        let failed = [
            both[0].clone(),
            window(
                "isolate-leader",
                &[2],
                &["node 2 was not ready within 30 s"],
            ),
        ];
        assert!(!report(clean_verdict(100, 100), &failed, &plan).passed);
        // A fault that hit nobody.
        let nobody = [both[0].clone(), window("isolate-leader", &[], &[])];
        assert!(!report(clean_verdict(100, 100), &nobody, &plan).passed);
        // Healing at the end failed.
        let mut unhealed = plan.clone();
        unhealed.heal_problems = vec!["node 3 exited unexpectedly".into()];
        assert!(!report(clean_verdict(100, 100), &both, &unhealed).passed);
    }

    #[test]
    fn the_report_names_which_checker_found_what() {
        let windows = [window("kill-leader", &[2], &[])];
        let plan = plan(&["kill-leader"]);
        let good = report(clean_verdict(100, 100), &windows, &plan);
        assert!(good.passed && good.failed_checks.is_empty());
        let summary = Report::new("ci".into(), 1, 4, 10.0, 1000, good, None).summary();
        assert!(
            summary.contains("checks by rowcall-chaos check.rs")
                && summary.contains("linearizability by consistency_model"),
            "{summary}"
        );
        // One row the outside checker cannot linearize, nothing the harness's checks see.
        let mut verdict = clean_verdict(100, 100);
        verdict.linearizability.verdict = Judgement::Violation;
        verdict.linearizability.violating_keys = 1;
        verdict.linearizability.violations = vec!["CH01_00001: no linearization".into()];
        let r = report(verdict, &windows, &plan);
        assert!(!r.passed && r.checks.harness_passed());
        assert_eq!(
            r.failed_checks,
            ["consistency_model 0.0.0 LinearizabilityTester: 1 rows not linearizable"]
        );
        let summary = Report::new("ci".into(), 1, 4, 10.0, 1000, r, None).summary();
        assert!(
            summary.contains("VIOLATION")
                && summary.contains("not linearizable: CH01_00001")
                && summary.contains("settled true: pass"),
            "{summary}"
        );
        assert!(summary.ends_with("FAIL\n"));
    }

    #[test]
    fn the_baseline_is_checked_too() {
        let windows = [window("kill-leader", &[2], &[])];
        let cluster = report(clean_verdict(100, 100), &windows, &plan(&["kill-leader"]));
        let baseline_windows = [window("kill-restart for kill-leader", &[1], &[])];
        let baseline_plan = plan(&["kill-restart for kill-leader"]);
        let good = report(clean_verdict(100, 100), &baseline_windows, &baseline_plan);
        let whole =
            |baseline| Report::new("ci".into(), 1, 4, 10.0, 1000, cluster.clone(), baseline);
        assert!(whole(None).passed());
        assert!(whole(Some(good.clone())).passed());
        let mut lost = clean_verdict(100, 100);
        lost.lost_writes = 1;
        let bad = report(lost, &baseline_windows, &baseline_plan);
        assert!(!whole(Some(bad)).passed());
        assert!(whole(Some(good)).summary().ends_with("PASS\n"));
    }
}
