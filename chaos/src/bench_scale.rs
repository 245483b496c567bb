//! `rowcall-bench scale`: how rowcall grows with its catalogue. For each size, a fresh
//! 3-node cluster is loaded in bulk writes, then measured: ask p50/p99 on a follower, each
//! node's resident memory, the snapshot's size on disk, and how long a wiped follower takes
//! to catch up — removed, restarted empty, rejoined, and holding every row again, which it
//! can only get by snapshot, because the nodes keep no log behind a snapshot.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};

use crate::bench::machine;
use crate::bench_reads::{catalogue_row, load, load_rowcall, Read, Workload};
use crate::cluster::{control_client, Cluster, ClusterOptions, SnapshotStorm, ADMIN_KEY};
use crate::error::ChaosError;
use crate::report::Latency;
use crate::rng::Rng;
use crate::vocabulary;

/// How long a snapshot or a catch-up may take before the bench gives up on it.
const WAIT_AT_MOST: Duration = Duration::from_secs(300);

/// How to run `scale`.
#[derive(Debug, Clone)]
pub struct ScaleOptions {
    /// The rowcall-node binary.
    pub node_bin: PathBuf,
    /// Data folders, logs and `scale.json` go under here.
    pub out: PathBuf,
    /// Catalogue sizes, one cluster each.
    pub sizes: Vec<usize>,
    /// How long asks run on the follower (one client) per size.
    pub cell: Duration,
    /// How the synthetic rows' words are drawn.
    pub words: Words,
}

/// How the synthetic catalogue's words are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Words {
    /// As real catalogues' are: a vocabulary that grows with the text, frequencies by
    /// Zipf's law, asks made of one row's words ([`crate::vocabulary`]).
    Zipf,
    /// Uniformly from 50 words, asks of three of them: each word in ~45% of the rows, the
    /// worst case for an index (the figures before 2026-12-07 were measured so).
    Uniform,
}

/// Asks prepared per size: enough that none repeats within a measurement at one client.
const ASKS: usize = 20_000;

/// The figures of one catalogue size.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleRow {
    /// Rows loaded.
    pub rows: usize,
    /// Seconds from the first bulk write to a follower having applied the last.
    pub load_s: f64,
    /// Ask latency on a follower, one client.
    pub ask: Latency,
    /// Asks answered per second at one client.
    pub asks_per_s: f64,
    /// Resident memory of each node after the load, MiB.
    pub rss_mib: Vec<f64>,
    /// The leader's snapshot files on disk after a snapshot of the whole catalogue, bytes.
    pub snapshot_bytes: Option<u64>,
    /// A backup taken from a follower (`rowcall backup`): seconds from the request until the
    /// file is checked and in place, snapshot build included.
    pub backup_s: f64,
    /// Its size, bytes.
    pub backup_bytes: u64,
    /// Seconds from wiping a follower to it holding every row again.
    pub catch_up_s: Option<f64>,
    /// Where the follower's resident memory goes, bytes per row.
    pub memory: Option<MemoryPerRow>,
}

/// A node's resident memory per row, split into what it counts itself (its gauges) and the
/// rest: the store's page cache, the Raft log, allocator slack, buffers.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryPerRow {
    /// Resident memory.
    pub resident: f64,
    /// The resolver's index (`rowcall_resolver_index_bytes`).
    pub index: f64,
    /// The rows held in memory (`rowcall_catalogue_rows_bytes`).
    pub rows: f64,
    /// Resident memory neither counts.
    pub other: f64,
}

/// Node `id`'s memory per row of `rows`.
async fn memory_per_row(cluster: &Cluster, id: u64, rows: usize) -> Option<MemoryPerRow> {
    let resident = rss_mib(cluster.node(id).pid()?)? * 1048576.0;
    let index = cluster.metric(id, "rowcall_resolver_index_bytes").await?;
    let held = cluster.metric(id, "rowcall_catalogue_rows_bytes").await?;
    let per = |b: f64| b / rows.max(1) as f64;
    Some(MemoryPerRow {
        resident: per(resident),
        index: per(index),
        rows: per(held),
        other: per(resident - index - held),
    })
}

/// Everything a `scale` run measured.
#[derive(Debug, Serialize)]
pub struct ScaleReport {
    /// Where it ran.
    pub machine: Value,
    /// How it ran.
    pub settings: Value,
    /// One row per catalogue size.
    pub rows: Vec<ScaleRow>,
}

/// Resident memory of process `pid`, bytes (Linux `/proc`).
pub(crate) fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Resident memory of process `pid`, MiB.
fn rss_mib(pid: u32) -> Option<f64> {
    rss_bytes(pid).map(|b| b as f64 / 1048576.0)
}

/// Bytes in the files of `dir` (not recursive); `None` when it has none.
fn bytes_in(dir: &Path) -> Option<u64> {
    let total: u64 = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok()?.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum();
    (total > 0).then_some(total)
}

/// Rows node `url` holds, as its counts say.
async fn rows_on(url: &str) -> Option<u64> {
    let counts: Value = control_client()
        .get(format!("{url}/api/directory/counts"))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    counts["rows_total"].as_u64()
}

/// Asks node `id` for a snapshot now and waits until its status reports a snapshot at the
/// index it had applied; then returns the size of its snapshot files in `dir` (`None` when
/// it keeps its snapshot elsewhere, or the snapshot never came).
async fn snapshot_size(cluster: &Cluster, id: u64, dir: &Path) -> Result<Option<u64>, ChaosError> {
    let index = |status: Option<Value>, field: &str| status.and_then(|s| s[field].as_u64());
    let Some(applied) = index(cluster.status(id).await, "last_applied") else {
        return Ok(None);
    };
    control_client()
        .post(format!("{}/api/cluster/snapshot", cluster.node(id).url()))
        .header("x-terminal-key", ADMIN_KEY)
        .send()
        .await
        .map_err(|e| ChaosError::Setup {
            what: "a snapshot".into(),
            detail: e.to_string(),
        })?;
    let deadline = Instant::now() + WAIT_AT_MOST;
    while Instant::now() < deadline {
        if index(cluster.status(id).await, "snapshot_index").is_some_and(|i| i >= applied) {
            return Ok(bytes_in(dir));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(None)
}

/// Measures one catalogue size on a fresh cluster.
async fn one_size(options: &ScaleOptions, rows: usize) -> Result<ScaleRow, ChaosError> {
    let (catalogue, asks) = match options.words {
        Words::Zipf => {
            let (catalogue, asks) = vocabulary::catalogue(rows, ASKS, rows as u64);
            (catalogue, Some(asks))
        }
        Words::Uniform => {
            let mut rng = Rng::new(rows as u64);
            let catalogue: Vec<Value> = (0..rows).map(|i| catalogue_row(i, &mut rng)).collect();
            (catalogue, None)
        }
    };
    let mut cluster = Cluster::start(&ClusterOptions {
        bin: options.node_bin.clone(),
        nodes: 3,
        root: options.out.join(format!("rows-{rows}")),
        proxies: false,
        snapshot_every: 5_000,
        seed: 1,
        tls: false,
    })
    .await?;
    // No log kept behind a snapshot, so a node that comes back empty needs one; the nodes
    // take the setting at their next start.
    cluster.set_snapshot_storm(SnapshotStorm {
        every: 5_000,
        keep: 0,
    });
    for id in cluster.ids() {
        cluster.terminate(id).await?;
        cluster.restart(id).await?;
    }
    let no_leader = || ChaosError::Setup {
        what: format!("the {rows}-row cluster"),
        detail: "no leader within 10 s".into(),
    };
    let leader = cluster
        .await_leader(Duration::from_secs(10))
        .await
        .ok_or_else(no_leader)?;
    let follower = cluster
        .ids()
        .into_iter()
        .find(|id| *id != leader)
        .ok_or_else(no_leader)?;

    let started = Instant::now();
    load_rowcall(&cluster, leader, follower, &catalogue).await?;
    let load_s = started.elapsed().as_secs_f64();
    let url = cluster.node(follower).url();
    let workload = Workload::new(&catalogue, asks);
    load(&url, Read::Ask, &workload, 1, Duration::from_millis(500)).await?;
    let asks = load(&url, Read::Ask, &workload, 1, options.cell).await?;
    let rss_mib = cluster
        .ids()
        .into_iter()
        .filter_map(|id| rss_mib(cluster.node(id).pid()?))
        .collect();
    let memory = memory_per_row(&cluster, follower, rows).await;

    let snapshots = cluster.node(leader).data.join("snapshots");
    let snapshot_bytes = snapshot_size(&cluster, leader, &snapshots).await?;
    let file = options.out.join(format!("scale-{rows}.backup"));
    let started = Instant::now();
    let backup = rowcall_client::node::NodeClient::new(&url)
        .map_err(|e| ChaosError::Setup {
            what: "a backup client".into(),
            detail: e.to_string(),
        })?
        .backup(ADMIN_KEY, &file)
        .await
        .map_err(|e| ChaosError::Setup {
            what: format!("a backup of {rows} rows"),
            detail: e.to_string(),
        })?;
    let backup_s = started.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&file);
    // Every row the follower held, the shared rows the cluster wrote at start included.
    let expected = rows_on(&url).await.unwrap_or(rows as u64);
    let wiped = Instant::now();
    cluster.set_ready_within(WAIT_AT_MOST);
    cluster.wipe_and_rejoin(follower).await?;
    let mut catch_up_s = None;
    while wiped.elapsed() < WAIT_AT_MOST {
        if rows_on(&url).await == Some(expected) {
            catch_up_s = Some(wiped.elapsed().as_secs_f64());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(ScaleRow {
        rows,
        load_s,
        asks_per_s: asks.per_s(),
        ask: Latency::of(asks.latencies_us),
        rss_mib,
        snapshot_bytes,
        backup_s,
        backup_bytes: backup.bytes,
        catch_up_s,
        memory,
    })
}

/// Runs the `scale` benchmark: one cluster per size, one after the other; prints the table
/// and writes `scale.json` under `options.out`.
pub async fn scale(options: &ScaleOptions) -> Result<ScaleReport, ChaosError> {
    std::fs::create_dir_all(&options.out)
        .map_err(|e| ChaosError::io(format!("create {}", options.out.display()), e))?;
    let machine = machine();
    let mut rows = Vec::new();
    for &size in &options.sizes {
        rows.push(one_size(options, size).await?);
        eprintln!("{size} rows done");
    }
    let report = ScaleReport {
        machine,
        settings: json!({
            "sizes": options.sizes,
            "ask_seconds": options.cell.as_secs_f64(),
            "load": "bulk writes of 100 rows to the leader, until a follower applied the last",
            "words": options.words,
            "asks": match options.words {
                Words::Zipf => "one client on a follower, three words of one row's summary each",
                Words::Uniform => "one client on a follower, three of the 50 words each",
            },
            "backup": "rowcall backup from a follower: request to the checked file in place, snapshot build included",
            "catch_up": "a follower wiped, removed, restarted empty and rejoined, until it holds every row; no log is kept behind snapshots",
            "node_bin": options.node_bin.display().to_string(),
        }),
        rows,
    };
    crate::bench::publish(&options.out.join("scale.json"), &report, &table(&report))?;
    Ok(report)
}

/// The report as a Markdown table, machine details on top.
pub fn table(report: &ScaleReport) -> String {
    let mut out = crate::bench::machine_line("scale", &report.machine);
    out.push_str(&format!(
        "3 nodes per size, words drawn {}, asks on a follower at one client for {} s\n\n",
        report.settings["words"].as_str().unwrap_or("uniform"),
        report.settings["ask_seconds"],
    ));
    out.push_str(
        "| rows | bulk load s | ask p50 ms | ask p99 ms | asks/s | RSS MiB per node \
         | snapshot MiB | backup s | backup MiB | catch-up s |\n\
         |---:|---:|---:|---:|---:|---|---:|---:|---:|---:|\n",
    );
    for row in &report.rows {
        let rss: Vec<String> = row.rss_mib.iter().map(|r| format!("{r:.0}")).collect();
        out.push_str(&format!(
            "| {} | {:.1} | {:.2} | {:.2} | {:.0} | {} | {} | {:.2} | {:.1} | {} |\n",
            row.rows,
            row.load_s,
            row.ask.p50_ms,
            row.ask.p99_ms,
            row.asks_per_s,
            rss.join(" / "),
            row.snapshot_bytes
                .map_or("–".into(), |b| format!("{:.1}", b as f64 / 1048576.0)),
            row.backup_s,
            row.backup_bytes as f64 / 1048576.0,
            row.catch_up_s.map_or("–".into(), |s| format!("{s:.1}")),
        ));
    }
    out.push_str(
        "\nWhere a follower's resident memory goes, bytes per row:\n\n\
         | rows | resident | resolver index | rows held | other (page cache, log, slack) |\n\
         |---:|---:|---:|---:|---:|\n",
    );
    for row in &report.rows {
        if let Some(m) = &row.memory {
            out.push_str(&format!(
                "| {} | {:.0} | {:.0} | {:.0} | {:.0} |\n",
                row.rows, m.resident, m.index, m.rows, m.other
            ));
        }
    }
    out
}
