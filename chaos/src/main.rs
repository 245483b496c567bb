//! `rowcall-chaos`: parse flags, run the scenario, exit non-zero when a check failed.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use rowcall_chaos::cluster::StartForm;
use rowcall_chaos::workload::Via;
use rowcall_chaos::RunOptions;

/// Starts a real rowcall cluster, drives a workload against every node while faults are
/// injected on a schedule, checks that nothing was lost, and reports availability.
#[derive(Debug, Parser)]
#[command(name = "rowcall-chaos", version, about)]
struct Flags {
    /// Scenario: kill-leader, kill-follower, pause-leader, pause-follower, isolate-leader,
    /// split, one-way, lost-answers, slow, lossy, rolling-restart, wipe-rejoin,
    /// wipe-rejoin-unsafe, minority-stale (5 nodes), snapshot-storm, lose-raft-state,
    /// lose-folder, restore-old-copy, founder-loses-folder, leader-clock-jump, ci; a
    /// comma-separated combination; or all.
    #[arg(long)]
    scenario: String,
    /// Cluster size.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Seconds of workload (the baseline runs as long again).
    #[arg(long)]
    duration: u64,
    /// Output folder: report.json, chart.svg, summary.txt, histories, node logs and data.
    #[arg(long)]
    out: PathBuf,
    /// The rowcall-node binary [default: next to this executable].
    #[arg(long)]
    node_bin: Option<PathBuf>,
    /// Seed of the workload's choices and the proxies' jitter and loss.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Concurrent client sessions.
    #[arg(long, default_value_t = 24)]
    sessions: u32,
    /// Operations per second, all sessions together.
    #[arg(long, default_value_t = 120.0)]
    rate: f64,
    /// Seconds between fault injections.
    #[arg(long, default_value_t = 10)]
    period: u64,
    /// Skip the single-node baseline.
    #[arg(long)]
    no_baseline: bool,
    /// Entries between snapshots on the nodes (ROWCALL_SNAPSHOT_EVERY).
    #[arg(long, default_value_t = 1000)]
    snapshot_every: u64,
    /// An operation counts as available when answered within this many milliseconds
    /// (failover retries included).
    #[arg(long, default_value_t = 1000)]
    slo_ms: u64,
    /// Peers talk mutual TLS (certificates made for the run) and show a cluster secret; the
    /// client library reaches the gRPC listeners over TLS too, trusting the run's CA.
    #[arg(long)]
    tls: bool,
    /// How sessions reach the nodes: the rowcall-client library over gRPC (hedged reads,
    /// failover, leader hints), or raw HTTP with the harness's own failover.
    #[arg(long, value_enum, default_value_t = Via::Client)]
    via: Via,
    /// How every node is started, and started again: `peers` (every voter `--bootstrap
    /// --join <the other voters>`, as the README recommends) or `founder-alone` (node 1
    /// `--bootstrap` alone, the others `--join <node 1>`: the older form, to show what it
    /// does when the founder loses its folder).
    #[arg(long, value_enum, default_value_t = StartForm::Peers)]
    start_form: StartForm,
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let flags = Flags::parse();
    let options = RunOptions {
        scenario: flags.scenario,
        nodes: flags.nodes,
        duration: Duration::from_secs(flags.duration),
        out: flags.out,
        node_bin: flags.node_bin,
        seed: flags.seed,
        sessions: flags.sessions.max(1),
        rate: flags.rate,
        period: Duration::from_secs(flags.period.max(1)),
        baseline: !flags.no_baseline,
        snapshot_every: flags.snapshot_every,
        slo: Duration::from_millis(flags.slo_ms.max(1)),
        tls: flags.tls,
        via: flags.via,
        start_form: flags.start_form,
    };
    // Ctrl-C drops the run, and with it every node process (the cluster's Drop kills them).
    let passed = tokio::select! {
        result = rowcall_chaos::run(&options) => result?,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("\ninterrupted: stopping every node");
            return Ok(ExitCode::from(130));
        }
    };
    Ok(if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
