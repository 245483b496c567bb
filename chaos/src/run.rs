//! One chaos run: the cluster under the scenario, then the single-node baseline on the same
//! schedule, then the checks, the report, the chart and the summary. `all` runs every
//! single-fault scenario in turn.

use std::io::{IsTerminal, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use crate::check::check;
use crate::cluster::{node_binary, Cluster, ClusterOptions, Setup, StartForm};
use crate::error::ChaosError;
use crate::faults::{self, FaultWindow, Scenario, Schedule};
use crate::history::{Event, FinalState};
use crate::report::{run_report, Plan, Report};
use crate::settle;
use crate::workload::{self, Hedges, Progress, Target, Via, WorkloadOptions};

/// Everything a run needs.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// A scenario name, a comma-separated combination, or `all`.
    pub scenario: String,
    /// Cluster size.
    pub nodes: usize,
    /// Seconds of workload (each of the cluster run and the baseline).
    pub duration: Duration,
    /// Where everything goes.
    pub out: PathBuf,
    /// The node binary, if not next to this executable.
    pub node_bin: Option<PathBuf>,
    /// Seed of the workload and the proxies.
    pub seed: u64,
    /// Client sessions.
    pub sessions: u32,
    /// Operations per second, all sessions together.
    pub rate: f64,
    /// One fault per this many seconds.
    pub period: Duration,
    /// Also run the single-node baseline.
    pub baseline: bool,
    /// `ROWCALL_SNAPSHOT_EVERY` for the nodes (small, so snapshots happen during a run).
    pub snapshot_every: u64,
    /// An operation counts as available when answered within this.
    pub slo: Duration,
    /// Peers authenticate each other (mutual TLS and a cluster secret).
    pub tls: bool,
    /// How the sessions reach the nodes.
    pub via: Via,
    /// How nodes are started (and started again).
    pub start_form: StartForm,
}

/// What drives a run's faults.
enum Faults<'a> {
    /// A scenario's schedule, on a cluster.
    Schedule(&'a [faults::FaultKind], Schedule),
    /// The cluster run's windows, replayed as kill/restart of the single node.
    Replay(&'a [FaultWindow]),
}

/// Runs what `options` asks; returns whether every check held.
pub async fn run(options: &RunOptions) -> Result<bool, ChaosError> {
    let bin = node_binary(options.node_bin.as_deref())?;
    std::fs::create_dir_all(&options.out)
        .map_err(|e| ChaosError::io(format!("create {}", options.out.display()), e))?;
    if options.scenario != "all" {
        let scenario = Scenario::parse(&options.scenario)?;
        let report = run_one(options, &bin, &scenario, &options.out).await?;
        return Ok(report.passed());
    }
    let mut rows = Vec::new();
    let mut passed = true;
    for scenario in Scenario::all() {
        if scenario.min_nodes() > options.nodes {
            // Not a failure (the cluster is too small for it), but on the record.
            let why = format!("needs {} nodes", scenario.min_nodes());
            eprintln!("skipping {}: {why}", scenario.name);
            rows.push(json!({ "scenario": scenario.name, "skipped": why }));
            continue;
        }
        let out = options.out.join(&scenario.name);
        // One scenario that cannot run (a node that never started) does not stop the rest.
        let report = match run_one(options, &bin, &scenario, &out).await {
            Ok(report) => report,
            Err(e) => {
                eprintln!("{}: could not run: {e}", scenario.name);
                passed = false;
                rows.push(
                    json!({ "scenario": scenario.name, "error": e.to_string(), "passed": false }),
                );
                continue;
            }
        };
        passed &= report.passed();
        let did: Vec<_> = report
            .cluster
            .faults
            .iter()
            .filter_map(|f| f.window.outcome.as_ref())
            .collect();
        rows.push(json!({
            "scenario": scenario.name,
            "cluster_did": did,
            "nodes": report.cluster.nodes,
            "duration_s": report.cluster.duration_s,
            "availability": report.cluster.availability,
            "baseline_availability": report.baseline.as_ref().map(|b| b.availability),
            "recovery_ms": report.cluster.faults.iter().map(|f| json!({
                "fault": f.window.name,
                "write": f.recovery["write"].recovered_ms,
                "read": f.recovery["read"].recovered_ms,
                "invoke": f.recovery["invoke"].recovered_ms,
            })).collect::<Vec<_>>(),
            "lost_writes": report.cluster.lost_writes,
            "lost_receipts": report.cluster.lost_receipts,
            "ryw_violations": report.cluster.ryw_violations,
            "index_regressions": report.cluster.index_regressions,
            "phantom_rows": report.cluster.phantom_rows,
            "duplicate_applies": report.cluster.checks.duplicate_applies,
            "diverged": report.cluster.diverged,
            "elections": report.cluster.elections,
            "hedges": report.cluster.hedges,
            "linearizability": report.cluster.linearizability.verdict,
            "evidence": report.cluster.evidence,
            "baseline_passed": report.baseline.as_ref().map(|b| b.passed),
            "passed": report.passed(),
        }));
    }
    let path = options.out.join("all.json");
    write(
        &path,
        serde_json::to_vec_pretty(&json!({ "scenarios": rows }))?,
    )?;
    println!("{}", all_table(&rows));
    eprintln!("all scenarios: {}", path.display());
    Ok(passed)
}

/// The `all` run in one table: per scenario, whether it passed, what was lost, and what
/// the cluster did (for the scenarios that bring a node back on lost or older state).
pub fn all_table(rows: &[serde_json::Value]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<22} {:<6} {:>8} {:>8} {:>8} {:>6} {:>8} {:>5} {:>8} {:>9}  what the cluster did",
        "scenario",
        "passed",
        "read",
        "write",
        "invoke",
        "lost w",
        "lost rcp",
        "twice",
        "diverged",
        "elections"
    );
    for row in rows {
        let name = row["scenario"].as_str().unwrap_or("?");
        if let Some(why) = row["skipped"].as_str() {
            let _ = writeln!(s, "{name:<22} skipped ({why})");
            continue;
        }
        if let Some(error) = row["error"].as_str() {
            let _ = writeln!(s, "{name:<22} FAIL   could not run: {error}");
            continue;
        }
        let did = row["cluster_did"]
            .as_array()
            .map(|outcomes| {
                outcomes
                    .iter()
                    .map(|o| {
                        format!(
                            "{}: {}",
                            o["did"].as_str().unwrap_or("?"),
                            o["detail"].as_str().unwrap_or("")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(" | ")
            })
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| "-".into());
        // Availability within the SLO, per class, as a percentage.
        let percent = |class: &str| {
            row["availability"][class]
                .as_f64()
                .map_or_else(|| "-".into(), |a| format!("{:.1}%", a * 100.0))
        };
        let _ = writeln!(
            s,
            "{name:<22} {:<6} {:>8} {:>8} {:>8} {:>6} {:>8} {:>5} {:>8} {:>9}  {did}",
            if row["passed"] == true {
                "pass"
            } else {
                "FAIL"
            },
            percent("read"),
            percent("write"),
            percent("invoke"),
            row["lost_writes"],
            row["lost_receipts"],
            row["duplicate_applies"],
            row["diverged"],
            row["elections"],
        );
    }
    s
}

fn write(path: &Path, bytes: impl AsRef<[u8]>) -> Result<(), ChaosError> {
    std::fs::write(path, bytes).map_err(|e| ChaosError::io(format!("write {}", path.display()), e))
}

fn write_history(path: &Path, events: &[Event]) -> Result<(), ChaosError> {
    let mut out = Vec::new();
    for e in events {
        serde_json::to_writer(&mut out, e)?;
        out.push(b'\n');
    }
    write(path, out)
}

/// The schedule for a run of `duration`: a warm-up, then one fault per `period`, with a
/// cool-down at the end so the last recovery can be seen.
pub fn schedule(duration: Duration, period: Duration) -> Schedule {
    Schedule {
        warmup: Duration::from_secs(5).min(duration / 6),
        period,
        cooldown: Duration::from_secs(8).min(duration / 4),
        duration,
    }
}

async fn run_one(
    options: &RunOptions,
    bin: &Path,
    scenario: &Scenario,
    out: &Path,
) -> Result<Report, ChaosError> {
    if scenario.min_nodes() > options.nodes {
        return Err(ChaosError::TooFewNodes {
            scenario: scenario.name.clone(),
            needed: scenario.min_nodes(),
            nodes: options.nodes,
        });
    }
    std::fs::create_dir_all(out)
        .map_err(|e| ChaosError::io(format!("create {}", out.display()), e))?;
    let workload = WorkloadOptions {
        via: options.via,
        sessions: options.sessions,
        rate: options.rate,
        duration: options.duration,
        seed: options.seed,
        slo: options.slo,
    };
    let cluster_options = ClusterOptions {
        bin: bin.to_path_buf(),
        nodes: options.nodes,
        root: out.join("cluster"),
        proxies: true,
        snapshot_every: options.snapshot_every,
        seed: options.seed,
        tls: options.tls,
    };
    eprintln!(
        "== {}: {} nodes{} started {}, {} s, {} sessions at {} ops/s via {} (logs under {})",
        scenario.name,
        options.nodes,
        if options.tls { " (peer mTLS)" } else { "" },
        options.start_form.name(),
        options.duration.as_secs(),
        options.sessions,
        options.rate,
        options.via.name(),
        cluster_options.root.display()
    );
    let schedule = schedule(options.duration, options.period);
    let planned = schedule.planned(&scenario.faults);
    let faults = Faults::Schedule(&scenario.faults, schedule);
    // Settings a fault needs for the whole run (receipt retention for a clock jump).
    let config: Vec<&str> = scenario
        .faults
        .iter()
        .filter_map(|k| k.config())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let setup = Setup {
        form: options.start_form,
        config: (!config.is_empty()).then(|| config.concat()),
        ..Setup::default()
    };
    let Driven {
        events,
        windows,
        end,
        heal_problems,
        hedges,
        elections,
    } = drive(&cluster_options, &setup, &workload, faults, "cluster").await?;
    write_history(&out.join("history.jsonl"), &events)?;
    write(&out.join("final.json"), serde_json::to_vec(&end)?)?;
    let verdict = check(&events, &end);
    let duration_s = options.duration.as_secs_f64();
    let plan = Plan {
        faults: planned.iter().map(|k| k.name().to_owned()).collect(),
        heal_problems,
    };
    let mut cluster = run_report(
        options.nodes,
        duration_s,
        &events,
        &windows,
        &plan,
        verdict,
        &end,
    );
    cluster.hedges = (options.via == Via::Client).then_some(hedges);
    cluster.elections = elections;

    let baseline = if options.baseline {
        let single = ClusterOptions {
            nodes: 1,
            root: out.join("baseline"),
            proxies: false,
            ..cluster_options.clone()
        };
        eprintln!(
            "== {} baseline: one node, killed and restarted on the same schedule",
            scenario.name
        );
        let Driven {
            events,
            windows: replayed,
            end,
            heal_problems,
            ..
        } = drive(
            &single,
            &setup,
            &workload,
            Faults::Replay(&windows),
            "baseline",
        )
        .await?;
        write_history(&out.join("baseline-history.jsonl"), &events)?;
        write(&out.join("baseline-final.json"), serde_json::to_vec(&end)?)?;
        let verdict = check(&events, &end);
        // The baseline replays every window the cluster run had, as a kill and restart.
        let plan = Plan {
            faults: windows
                .iter()
                .map(|w| faults::replay_name(&w.name))
                .collect(),
            heal_problems,
        };
        Some(run_report(
            1, duration_s, &events, &replayed, &plan, verdict, &end,
        ))
    } else {
        None
    };
    let report = Report::new(
        scenario.name.clone(),
        options.seed,
        options.sessions,
        options.rate,
        options.slo.as_millis() as u64,
        cluster,
        baseline,
    )
    .via(options.via);
    write(
        &out.join("report.json"),
        serde_json::to_vec_pretty(&report)?,
    )?;
    let title = format!(
        "rowcall-chaos {}: {} nodes, {} s",
        scenario.name,
        options.nodes,
        options.duration.as_secs()
    );
    write(
        &out.join("chart.svg"),
        crate::svg::chart(&title, &report.cluster, report.baseline.as_ref()),
    )?;
    let summary = report.summary();
    write(&out.join("summary.txt"), &summary)?;
    println!("{summary}");
    println!(
        "report: {}  chart: {}",
        out.join("report.json").display(),
        out.join("chart.svg").display()
    );
    Ok(report)
}

/// What one run of the workload and its faults left.
struct Driven {
    events: Vec<Event>,
    windows: Vec<FaultWindow>,
    end: FinalState,
    /// What went wrong healing everything before the end state was collected.
    heal_problems: Vec<String>,
    /// What became of the sessions' writes' hedges.
    hedges: Hedges,
    /// Terms begun while the workload ran.
    elections: Option<u64>,
}

/// Starts a cluster, runs the workload and the faults together with a progress line,
/// settles, collects the end state, and stops every node.
async fn drive(
    cluster_options: &ClusterOptions,
    setup: &Setup,
    workload: &WorkloadOptions,
    plan: Faults<'_>,
    label: &str,
) -> Result<Driven, ChaosError> {
    let mut cluster = Cluster::start_with(cluster_options, setup).await?;
    // What each node's log holds before the run: a panic logged after it fails the run.
    let marks = cluster.log_marks();
    let term_before = cluster.highest_term().await;
    let progress = Arc::new(Progress::default());
    let epoch = Instant::now();
    let target = Target {
        urls: cluster.urls(),
        grpc: cluster.grpc_addrs(),
        ca: cluster.ca.clone(),
        ids: cluster.ids(),
        incarnations: cluster.incarnations.clone(),
        epoch,
        progress: progress.clone(),
    };
    let ids_urls: Vec<(u64, String)> = cluster.ids().into_iter().zip(cluster.urls()).collect();
    let (events, windows) = {
        let faults = async {
            match plan {
                Faults::Schedule(kinds, schedule) => {
                    faults::run(&mut cluster, kinds, schedule, epoch, &progress).await
                }
                Faults::Replay(windows) => {
                    faults::replay_on_single(&mut cluster, windows, epoch).await
                }
            }
        };
        let work = async { tokio::join!(workload::run(workload, target), faults) };
        tokio::pin!(work);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let terminal = std::io::stderr().is_terminal();
        loop {
            tokio::select! {
                done = &mut work => break done,
                _ = tick.tick() => progress_line(label, epoch, workload.duration, &progress, terminal),
            }
        }
    };
    if std::io::stderr().is_terminal() {
        eprintln!();
    }
    // The schedule healed everything; make sure before judging (a failure fails the run).
    let mut heal_problems = cluster.heal_all().await;
    let elections = term_before
        .zip(cluster.highest_term().await)
        .map(|(before, after)| after.saturating_sub(before));
    // One cluster at the end: a node that founded another (after losing its folder) took
    // writes the others never saw.
    let ids = cluster.cluster_ids().await;
    let distinct: std::collections::BTreeSet<_> = ids.values().collect();
    if distinct.len() > 1 {
        let ids = ids
            .iter()
            .map(|(id, c)| format!("node {id}: {}", c.as_deref().unwrap_or("none")))
            .collect::<Vec<_>>()
            .join(", ");
        heal_problems.push(ChaosError::ClusterIdsDiffer { ids }.to_string());
    }
    // No input ever panics a node (DESIGN §3); a Raft core that panicked leaves its process
    // up and serving HTTP, so only its log tells.
    for (id, message) in cluster.panicked_since(&marks) {
        heal_problems.push(format!("node {id} panicked during the run: {message}"));
    }
    for problem in &heal_problems {
        eprintln!("heal: {problem}");
    }
    eprintln!("{label}: settling and collecting the end state");
    let end = settle::collect(&ids_urls, &events).await;
    drop(cluster);
    Ok(Driven {
        events,
        windows,
        end,
        heal_problems,
        hedges: progress.hedges(),
        elections,
    })
}

fn progress_line(
    label: &str,
    epoch: Instant,
    duration: Duration,
    progress: &Progress,
    terminal: bool,
) {
    let t = epoch.elapsed().as_secs();
    if !terminal && t % 5 != 0 {
        return;
    }
    let [read, write, invoke] = progress.snapshot();
    let pct = |(a, ok): (u64, u64)| {
        if a == 0 {
            100.0
        } else {
            ok as f64 * 100.0 / a as f64
        }
    };
    let line = format!(
        "[{label} {t:>3}/{}s] ops {:>6}  read {:>6.2}%  write {:>6.2}%  invoke {:>6.2}%",
        duration.as_secs(),
        read.0 + write.0 + invoke.0,
        pct(read),
        pct(write),
        pct(invoke)
    );
    let mut err = std::io::stderr();
    if terminal {
        let _ = write!(err, "\r{line}");
    } else {
        let _ = writeln!(err, "{line}");
    }
    let _ = err.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_all_table_says_what_the_cluster_did_per_scenario() {
        let rows = [
            json!({"scenario": "kill-leader", "passed": true, "lost_writes": 0,
                   "lost_receipts": 0, "duplicate_applies": 0, "diverged": false,
                   "elections": 2, "cluster_did": [],
                   "availability": {"read": 1.0, "write": 0.9871, "invoke": 1.0}}),
            json!({"scenario": "lose-folder", "passed": true, "lost_writes": 0,
                   "lost_receipts": 0, "diverged": false,
                   "cluster_did": [{"did": "refused-readmitted", "detail": "node 3 exited"}]}),
            json!({"scenario": "lose-raft-state", "passed": false, "lost_writes": 1,
                   "lost_receipts": 8, "diverged": true,
                   "cluster_did": [{"did": "accepted-unsafely", "detail": "node 3 let in"}]}),
            json!({"scenario": "minority-stale", "skipped": "needs 5 nodes"}),
        ];
        let table = all_table(&rows);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].ends_with("what the cluster did"), "{table}");
        assert!(
            lines[1].starts_with("kill-leader") && lines[1].ends_with(" -"),
            "{table}"
        );
        let cells: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "kill-leader",
                "pass",
                "100.0%",
                "98.7%",
                "100.0%",
                "0",
                "0",
                "0",
                "false",
                "2",
                "-"
            ],
            "{table}"
        );
        assert!(
            lines[2].contains("pass") && lines[2].ends_with("refused-readmitted: node 3 exited"),
            "{table}"
        );
        assert!(
            lines[3].contains("FAIL") && lines[3].contains("accepted-unsafely"),
            "{table}"
        );
        assert!(lines[4].contains("skipped (needs 5 nodes)"), "{table}");
    }
}
