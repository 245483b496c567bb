//! `rowcall-bench soak`: how a node's disk and memory grow under a long load. A fresh 3-node
//! cluster first takes a batch of row inserts, then minutes of mixed load (invocations
//! mostly, asks, a few inserts) from several clients spread over the nodes; every few
//! seconds each node's data folder (blocks on disk, as `du` counts them) and resident memory
//! are sampled. It reports what a row and an invocation cost on disk, with and without a
//! snapshot and log purge at the end, and the slope of each node's memory once warm: a
//! node that runs for months needs it near zero.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};

use crate::bench::machine;
use crate::bench_scale::rss_bytes;
use crate::cluster::{control_client, Cluster, ClusterOptions, ADMIN_KEY};
use crate::error::ChaosError;

/// How to run `soak`.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    /// The rowcall-node binary.
    pub node_bin: PathBuf,
    /// Data folders, logs, `soak.json` and `soak.svg` go under here.
    pub out: PathBuf,
    /// How long the mixed load runs.
    pub mixed: Duration,
    /// Rows inserted before it.
    pub rows: usize,
    /// Concurrent clients.
    pub clients: usize,
    /// How often each node is sampled.
    pub sample_every: Duration,
    /// Entries between snapshots, at least (`[raft] snapshot_every`).
    pub snapshot_every: u64,
}

/// One node at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Seconds since the load began.
    pub at_s: f64,
    /// Invocations acknowledged so far (the whole cluster).
    pub invocations: u64,
    /// Bytes the data folder of each node takes on disk.
    pub disk_bytes: Vec<u64>,
    /// Resident memory of each node, bytes.
    pub rss_bytes: Vec<u64>,
}

/// What the run found, per node.
#[derive(Debug, Clone, Serialize)]
pub struct NodeFigures {
    pub id: u64,
    /// Disk bytes per inserted row (the insert phase).
    pub disk_per_row: f64,
    /// Disk bytes per invocation (the mixed phase).
    pub disk_per_invocation: f64,
    /// The same after a snapshot and log purge at the end.
    pub disk_per_invocation_after_purge: Option<f64>,
    /// Resident memory at the end, MiB.
    pub rss_end_mib: f64,
    /// Slope of resident memory over the second half of the mixed phase, MiB per minute.
    pub rss_slope_mib_per_min: f64,
}

/// Everything a `soak` run measured.
#[derive(Debug, Serialize)]
pub struct SoakReport {
    pub machine: Value,
    pub settings: Value,
    /// Rows inserted, and invocations, asks and inserts of the mixed phase.
    pub counts: Value,
    /// Invocations acknowledged per second in the mixed phase.
    pub invocations_per_s: f64,
    pub nodes: Vec<NodeFigures>,
    pub samples: Vec<Sample>,
}

/// Bytes the files under `dir` take on disk (allocated blocks, as `du` counts them).
pub fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|entry| match entry.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&entry.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// The least-squares slope of `ys` over `xs` (0 with fewer than two points).
pub fn slope(xs: &[f64], ys: &[f64]) -> f64 {
    let n = xs.len().min(ys.len());
    if n < 2 {
        return 0.0;
    }
    let (mx, my) = (
        xs[..n].iter().sum::<f64>() / n as f64,
        ys[..n].iter().sum::<f64>() / n as f64,
    );
    let (mut num, mut den) = (0.0, 0.0);
    for i in 0..n {
        num += (xs[i] - mx) * (ys[i] - my);
        den += (xs[i] - mx) * (xs[i] - mx);
    }
    if den == 0.0 {
        0.0
    } else {
        num / den
    }
}

/// The row the mixed load invokes: a static answer, so an invocation costs its receipt and
/// nothing outside the cluster.
const INVOKED: &str = "SOAK_NOW";

/// Counts of what the clients did.
#[derive(Default)]
struct Counts {
    invocations: AtomicU64,
    asks: AtomicU64,
    inserts: AtomicU64,
    failed: AtomicU64,
}

/// One insert of row `key` on `url`.
async fn insert(http: &reqwest::Client, url: &str, key: &str) -> bool {
    let row = json!({
        "key": key,
        "type": "static",
        "category": "soak",
        "content": format!("# WHAT: soak row {key}, a static answer\n# RISK: read\nthe answer of {key}"),
        "auth": "public",
    });
    http.post(format!("{url}/api/directory"))
        .header("x-terminal-key", ADMIN_KEY)
        .json(&row)
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}

/// A client of the mixed phase: until `until`, on the nodes at `urls` in turn, 1 insert and
/// 4 asks in every 50 calls, invocations otherwise.
async fn client(
    http: reqwest::Client,
    urls: Vec<String>,
    me: usize,
    until: Instant,
    counts: Arc<Counts>,
) {
    let mut n = 0usize;
    while Instant::now() < until {
        let url = &urls[(me + n) % urls.len()];
        let ok = match n % 50 {
            0 => {
                let done = insert(&http, url, &format!("SOAK_MIXED_{me}_{n}")).await;
                counts.inserts.fetch_add(u64::from(done), Ordering::Relaxed);
                done
            }
            1..=4 => {
                let done = http
                    .get(format!("{url}/api/dispatch"))
                    .query(&[("ask", "what time is it now")])
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
                counts.asks.fetch_add(u64::from(done), Ordering::Relaxed);
                done
            }
            _ => {
                let done = http
                    .post(format!("{url}/api/dispatch"))
                    .json(&json!({"key": INVOKED}))
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
                counts
                    .invocations
                    .fetch_add(u64::from(done), Ordering::Relaxed);
                done
            }
        };
        if !ok {
            counts.failed.fetch_add(1, Ordering::Relaxed);
            // A node that refuses (restarting, electing) is not asked again at once.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        n += 1;
    }
}

fn sample(cluster: &Cluster, started: Instant, counts: &Counts) -> Sample {
    let ids = cluster.ids();
    Sample {
        at_s: started.elapsed().as_secs_f64(),
        invocations: counts.invocations.load(Ordering::Relaxed),
        disk_bytes: ids
            .iter()
            .map(|&id| disk_bytes(&cluster.node(id).data))
            .collect(),
        rss_bytes: ids
            .iter()
            .map(|&id| cluster.node(id).pid().and_then(rss_bytes).unwrap_or(0))
            .collect(),
    }
}

/// Asks every node for a snapshot (which purges its log) and waits until each reports one at
/// the index it had applied, or `within` passes.
async fn snapshot_everywhere(cluster: &Cluster, within: Duration) {
    let deadline = Instant::now() + within;
    for id in cluster.ids() {
        let index = |s: Option<Value>, f: &str| s.and_then(|s| s[f].as_u64());
        let Some(applied) = index(cluster.status(id).await, "last_applied") else {
            continue;
        };
        let _ = control_client()
            .post(format!("{}/api/cluster/snapshot", cluster.node(id).url()))
            .header("x-terminal-key", ADMIN_KEY)
            .send()
            .await;
        while Instant::now() < deadline
            && index(cluster.status(id).await, "snapshot_index").is_none_or(|i| i < applied)
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Runs the `soak` benchmark; prints the table and writes `soak.json` and `soak.svg` under
/// `options.out`.
pub async fn soak(options: &SoakOptions) -> Result<SoakReport, ChaosError> {
    std::fs::create_dir_all(&options.out)
        .map_err(|e| ChaosError::io(format!("create {}", options.out.display()), e))?;
    let machine = machine();
    let cluster = Cluster::start(&ClusterOptions {
        bin: options.node_bin.clone(),
        nodes: 3,
        root: options.out.join("cluster"),
        proxies: false,
        snapshot_every: options.snapshot_every,
        seed: 1,
        tls: false,
    })
    .await?;
    cluster
        .await_leader(Duration::from_secs(10))
        .await
        .ok_or_else(|| ChaosError::setup("the soak cluster", "no leader within 10 s"))?;
    let urls: Vec<String> = cluster
        .ids()
        .iter()
        .map(|&id| cluster.node(id).url())
        .collect();
    let http = control_client();
    if !insert(&http, &urls[0], INVOKED).await {
        return Err(ChaosError::setup(
            "the soak cluster",
            format!("could not write {INVOKED}"),
        ));
    }
    let counts = Arc::new(Counts::default());
    let started = Instant::now();
    let mut samples = vec![sample(&cluster, started, &counts)];

    // Rows first, alone: what a row costs.
    let per_client = options.rows.div_ceil(options.clients);
    let inserters: Vec<_> = (0..options.clients)
        .map(|c| {
            let (http, urls) = (http.clone(), urls.clone());
            tokio::spawn(async move {
                let mut done = 0u64;
                for i in (c * per_client)..((c + 1) * per_client) {
                    let url = &urls[i % urls.len()];
                    done += u64::from(insert(&http, url, &format!("SOAK_ROW_{i}")).await);
                }
                done
            })
        })
        .collect();
    let mut rows = 0u64;
    for inserter in inserters {
        rows += inserter.await.unwrap_or(0);
    }
    let after_rows = sample(&cluster, started, &counts);
    samples.push(after_rows.clone());

    // Then the mixed load, sampled as it runs.
    let mixed_from = Instant::now();
    let until = mixed_from + options.mixed;
    let clients: Vec<_> = (0..options.clients)
        .map(|c| tokio::spawn(client(http.clone(), urls.clone(), c, until, counts.clone())))
        .collect();
    while Instant::now() < until {
        tokio::time::sleep(options.sample_every.min(until - Instant::now())).await;
        let s = sample(&cluster, started, &counts);
        eprintln!(
            "[soak {:>5.0}s] invocations {:>8}  disk MiB {:?}  RSS MiB {:?}",
            s.at_s,
            s.invocations,
            s.disk_bytes.iter().map(|b| b >> 20).collect::<Vec<_>>(),
            s.rss_bytes.iter().map(|b| b >> 20).collect::<Vec<_>>(),
        );
        samples.push(s);
    }
    for c in clients {
        let _ = c.await;
    }
    let mixed_s = mixed_from.elapsed().as_secs_f64();
    let end = sample(&cluster, started, &counts);
    snapshot_everywhere(&cluster, Duration::from_secs(120)).await;
    let purged = sample(&cluster, started, &counts);

    let invocations = end.invocations.max(1) as f64;
    let half = after_rows.at_s + mixed_s / 2.0;
    let warm: Vec<&Sample> = samples.iter().filter(|s| s.at_s >= half).collect();
    let nodes = cluster
        .ids()
        .iter()
        .enumerate()
        .map(|(i, &id)| {
            let grown = |to: &Sample| to.disk_bytes[i] as f64 - after_rows.disk_bytes[i] as f64;
            let xs: Vec<f64> = warm.iter().map(|s| s.at_s / 60.0).collect();
            let ys: Vec<f64> = warm
                .iter()
                .map(|s| s.rss_bytes[i] as f64 / 1048576.0)
                .collect();
            NodeFigures {
                id,
                disk_per_row: (after_rows.disk_bytes[i] as f64 - samples[0].disk_bytes[i] as f64)
                    / rows.max(1) as f64,
                disk_per_invocation: grown(&end) / invocations,
                disk_per_invocation_after_purge: (purged.disk_bytes[i] > 0)
                    .then(|| grown(&purged) / invocations),
                rss_end_mib: end.rss_bytes[i] as f64 / 1048576.0,
                rss_slope_mib_per_min: slope(&xs, &ys),
            }
        })
        .collect();
    samples.push(purged);
    let report = SoakReport {
        machine,
        settings: json!({
            "rows": options.rows,
            "mixed_seconds": options.mixed.as_secs_f64(),
            "clients": options.clients,
            "sample_every_seconds": options.sample_every.as_secs_f64(),
            "snapshot_every": options.snapshot_every,
            "mix": "of every 50 calls per client: 1 insert, 4 asks, 45 invocations of a static row; nodes in turn",
            "disk": "blocks of every file under each node's data folder",
            "node_bin": options.node_bin.display().to_string(),
        }),
        counts: json!({
            "rows": rows,
            "invocations": end.invocations,
            "asks": counts.asks.load(Ordering::Relaxed),
            "inserts": counts.inserts.load(Ordering::Relaxed),
            "failed": counts.failed.load(Ordering::Relaxed),
        }),
        invocations_per_s: end.invocations as f64 / mixed_s.max(1e-9),
        nodes,
        samples,
    };
    let chart = chart(&report);
    std::fs::write(options.out.join("soak.svg"), chart)
        .map_err(|e| ChaosError::io("write soak.svg", e))?;
    crate::bench::publish(&options.out.join("soak.json"), &report, &table(&report))?;
    Ok(report)
}

/// The report as a Markdown table, machine details on top.
pub fn table(report: &SoakReport) -> String {
    let mut out = crate::bench::machine_line("soak", &report.machine);
    out.push_str(&format!(
        "3 nodes; {} rows inserted, then {} s of mixed load from {} clients: {} invocations \
         ({:.0}/s), {} asks, {} inserts, {} failed calls\n\n",
        report.counts["rows"],
        report.settings["mixed_seconds"],
        report.settings["clients"],
        report.counts["invocations"],
        report.invocations_per_s,
        report.counts["asks"],
        report.counts["inserts"],
        report.counts["failed"],
    ));
    out.push_str(
        "| node | disk B per row | disk B per invocation | after snapshot and purge \
         | RSS MiB at end | RSS slope once warm, MiB/min |\n\
         |---:|---:|---:|---:|---:|---:|\n",
    );
    for n in &report.nodes {
        out.push_str(&format!(
            "| {} | {:.0} | {:.0} | {} | {:.0} | {:+.2} |\n",
            n.id,
            n.disk_per_row,
            n.disk_per_invocation,
            n.disk_per_invocation_after_purge
                .map_or("–".into(), |b| format!("{b:.0}")),
            n.rss_end_mib,
            n.rss_slope_mib_per_min,
        ));
    }
    out
}

/// Disk and resident memory of each node over the run, two panels, as SVG.
pub fn chart(report: &SoakReport) -> String {
    const COLOURS: [&str; 5] = ["#1f6feb", "#2da44e", "#cf222e", "#8250df", "#bf8700"];
    let (w, h, pad) = (720.0, 220.0, 40.0);
    let end = report.samples.last().map_or(1.0, |s| s.at_s.max(1.0));
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {w} {}\" font-family=\"sans-serif\" font-size=\"12\">\n",
        2.0 * h + 40.0
    );
    /// One node's figure in a sample.
    type Figure = fn(&Sample, usize) -> f64;
    let panels: [(&str, Figure); 2] = [
        ("data folder on disk, MiB", |s, i| {
            s.disk_bytes[i] as f64 / 1048576.0
        }),
        ("resident memory, MiB", |s, i| {
            s.rss_bytes[i] as f64 / 1048576.0
        }),
    ];
    for (p, (title, value)) in panels.iter().enumerate() {
        let top = p as f64 * (h + 20.0) + 20.0;
        let max = report
            .samples
            .iter()
            .flat_map(|s| (0..s.disk_bytes.len()).map(move |i| (s, i)))
            .map(|(s, i)| value(s, i))
            .fold(1.0_f64, f64::max);
        svg.push_str(&format!(
            "<text x=\"{pad}\" y=\"{}\">{title} (max {max:.0}); seconds 0 to {end:.0}</text>\n",
            top - 4.0
        ));
        svg.push_str(&format!(
            "<rect x=\"{pad}\" y=\"{top}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>\n",
            w - 2.0 * pad,
            h - 20.0
        ));
        let nodes = report.samples.first().map_or(0, |s| s.disk_bytes.len());
        for i in 0..nodes {
            let points: Vec<String> = report
                .samples
                .iter()
                .map(|s| {
                    let x = pad + (s.at_s / end) * (w - 2.0 * pad);
                    let y = top + (h - 20.0) * (1.0 - value(s, i) / max);
                    format!("{x:.1},{y:.1}")
                })
                .collect();
            svg.push_str(&format!(
                "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"><title>node {}</title></polyline>\n",
                COLOURS[i % COLOURS.len()],
                points.join(" "),
                i + 1
            ));
        }
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slope_of_a_line_is_its_rise_per_step_and_a_flat_one_is_zero() {
        let xs = [0.0, 1.0, 2.0, 3.0];
        assert!((slope(&xs, &[10.0, 12.0, 14.0, 16.0]) - 2.0).abs() < 1e-12);
        assert!(slope(&xs, &[5.0, 5.0, 5.0, 5.0]).abs() < 1e-12);
        // Noise around a level: a small slope either way, not the spread.
        assert!(slope(&xs, &[5.0, 6.0, 5.0, 6.0]).abs() < 0.5);
        assert_eq!(slope(&[1.0], &[3.0]), 0.0);
    }

    #[test]
    fn disk_bytes_count_every_file_below_a_folder() {
        let dir = std::env::temp_dir().join(format!("rowcall-soak-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::write(dir.join("x"), vec![1u8; 10_000]).unwrap();
        std::fs::write(dir.join("a/b/y"), vec![1u8; 100_000]).unwrap();
        let counted = disk_bytes(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(counted >= 110_000, "{counted}");
        assert!(counted < 110_000 + 64 * 1024, "{counted}");
        assert_eq!(disk_bytes(&dir.join("missing")), 0);
    }
}
