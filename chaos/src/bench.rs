//! `rowcall-bench writes`: insert throughput and latency of rowcall beside a 3-member etcd on
//! the same machine, through the same client (HTTP/1.1 + JSON, one connection per client,
//! each client sending its next write when the previous one is answered), with the load on
//! a follower, every system's runs interleaved so that a busy moment of a shared machine
//! falls on all of them alike.
//!
//! rowcall: `POST /api/directory` inserting a new row whose content is `value_bytes` long;
//! etcd: `POST /v3/kv/put` (its JSON gateway) of a new key with a value of the same size.
//! Both sync to disk before answering (rowcall's default `fdatasync`, etcd's WAL fsync).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use serde::Serialize;
use serde_json::{json, Value};

use crate::cluster::{Cluster, ClusterOptions, ADMIN_KEY};
use crate::error::ChaosError;
use crate::etcd::Etcd;
use crate::report::Latency;

/// How to run `writes`.
#[derive(Debug, Clone)]
pub struct WritesOptions {
    /// The rowcall-node binary.
    pub node_bin: PathBuf,
    /// Another rowcall-node binary measured beside it on 3 nodes (e.g. a build of main), so
    /// that a change's effect is a ratio from one run.
    pub baseline_bin: Option<PathBuf>,
    /// The etcd binary, or why etcd is not measured (rowcall is then measured alone).
    pub etcd: Result<PathBuf, String>,
    /// Data folders, logs and `writes.json` go under here.
    pub out: PathBuf,
    /// Concurrent clients, one measurement each.
    pub clients: Vec<usize>,
    /// Length of one measurement.
    pub cell: Duration,
    /// Rounds: every (system, clients) measurement runs once per round, interleaved.
    pub rounds: usize,
    /// Size of each written value (rowcall: the row's content).
    pub value_bytes: usize,
}

/// One system under load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Kind {
    Rowcall,
    Etcd,
}

/// Where a system takes its load.
struct Target {
    name: String,
    kind: Kind,
    url: String,
    /// rowcall: the leader's URL, whose sync counter tells how many writes share a sync.
    leader: Option<String>,
}

/// The figures of one (system, clients) pair, over every round.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The system, e.g. `rowcall 3 nodes`.
    pub system: String,
    /// Concurrent clients.
    pub clients: usize,
    /// Acknowledged writes per second.
    pub writes_per_s: f64,
    /// Latency of acknowledged writes.
    pub latency: Latency,
    /// Acknowledged writes.
    pub ok: u64,
    /// Writes refused or failed (not in the latency figures).
    pub errors: u64,
    /// Seconds measured.
    pub seconds: f64,
    /// writes/s over etcd's at the same clients (when etcd ran).
    pub throughput_vs_etcd: Option<f64>,
    /// p50 over etcd's p50 at the same clients (below 1 is faster).
    pub p50_vs_etcd: Option<f64>,
    /// rowcall: storage syncs (fdatasync rounds) on the leader per acknowledged write.
    pub leader_syncs_per_write: Option<f64>,
}

/// Everything a `writes` run measured.
#[derive(Debug, Serialize)]
pub struct WritesReport {
    /// Where it ran.
    pub machine: Value,
    /// How it ran.
    pub settings: Value,
    /// Why etcd was not measured, if it was not.
    pub etcd_skipped: Option<String>,
    /// One row per system and clients.
    pub rows: Vec<Row>,
}

/// Raw figures of one measurement (or of several, added up).
#[derive(Default)]
pub(crate) struct Sample {
    /// Latency of every answered request, in microseconds.
    pub latencies_us: Vec<u64>,
    /// Requests refused or failed.
    pub errors: u64,
    /// Seconds measured.
    pub seconds: f64,
    /// Syncs the leader ran meanwhile (rowcall writes).
    pub leader_syncs: Option<f64>,
}

impl Sample {
    /// Adds `other`'s requests and time to this one's.
    pub fn add(&mut self, other: Sample) {
        self.latencies_us.extend(other.latencies_us);
        self.errors += other.errors;
        self.seconds += other.seconds;
        if let Some(syncs) = other.leader_syncs {
            *self.leader_syncs.get_or_insert(0.0) += syncs;
        }
    }

    /// Answered requests.
    pub fn ok(&self) -> u64 {
        self.latencies_us.len() as u64
    }

    /// Answered requests per second.
    pub fn per_s(&self) -> f64 {
        self.ok() as f64 / self.seconds.max(1e-9)
    }
}

/// A client with one keep-alive HTTP/1.1 connection: a bench gives each of its closed-loop
/// clients its own. `ca` is trusted alone for HTTPS when given.
pub(crate) fn bench_client(
    ca: Option<&reqwest::Certificate>,
) -> Result<reqwest::Client, ChaosError> {
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .pool_max_idle_per_host(1)
        .timeout(Duration::from_secs(10));
    if let Some(ca) = ca {
        builder = builder.tls_certs_only([ca.clone()]);
    }
    builder.build().map_err(|e| ChaosError::Setup {
        what: "an HTTP client".into(),
        detail: e.to_string(),
    })
}

/// Runs one closed-loop client per entry of `clients` for `length`: each sends its next
/// request once the previous one is answered. `request(client, n)` sends a client's `n`th
/// request and says whether it was answered (read whole, a success status).
pub(crate) async fn closed_loop<F, Fut>(
    clients: Vec<reqwest::Client>,
    length: Duration,
    request: F,
) -> Sample
where
    F: Fn(reqwest::Client, usize, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let started = Instant::now();
    let deadline = started + length;
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(c, client)| {
            let request = request.clone();
            tokio::spawn(async move {
                let mut sample = Sample::default();
                let mut n = 0u64;
                while Instant::now() < deadline {
                    n += 1;
                    let sent = Instant::now();
                    if request(client.clone(), c, n).await {
                        sample.latencies_us.push(sent.elapsed().as_micros() as u64);
                    } else {
                        sample.errors += 1;
                    }
                }
                sample
            })
        })
        .collect();
    let mut sample = Sample::default();
    for task in tasks {
        if let Ok(part) = task.await {
            sample.add(part);
        }
    }
    sample.seconds = started.elapsed().as_secs_f64();
    sample
}

/// Whether `request` was answered with a success status and its whole body read: a
/// client has its answer only once it has the reply.
pub(crate) async fn answered(request: reqwest::RequestBuilder) -> bool {
    match request.send().await {
        Ok(r) if r.status().is_success() => r.bytes().await.is_ok(),
        _ => false,
    }
}

/// Runs the `writes` benchmark: starts every system, measures, prints the table and
/// writes `writes.json` under `options.out`.
pub async fn writes(options: &WritesOptions) -> Result<WritesReport, ChaosError> {
    std::fs::create_dir_all(&options.out)
        .map_err(|e| ChaosError::io(format!("create {}", options.out.display()), e))?;
    let machine = machine();
    // Every system stays up for the whole run, so measurements can interleave.
    let mut clusters = Vec::new();
    let mut targets = Vec::new();
    let mut systems = vec![("rowcall 3 nodes", &options.node_bin, 3)];
    if let Some(baseline) = &options.baseline_bin {
        systems.push(("baseline 3 nodes", baseline, 3));
    }
    systems.push(("rowcall 1 node", &options.node_bin, 1));
    for (name, bin, nodes) in systems {
        let cluster = Cluster::start(&ClusterOptions {
            bin: bin.clone(),
            nodes,
            root: options.out.join(name.replace(' ', "-")),
            proxies: false,
            snapshot_every: 5_000,
            seed: 1,
            tls: false,
        })
        .await?;
        let leader = cluster.await_leader(Duration::from_secs(10)).await;
        let on = cluster
            .ids()
            .into_iter()
            .find(|id| Some(*id) != leader || nodes == 1)
            .unwrap_or(1);
        targets.push(Target {
            name: name.to_owned(),
            kind: Kind::Rowcall,
            url: cluster.node(on).url(),
            leader: Some(cluster.node(leader.unwrap_or(on)).url()),
        });
        clusters.push(cluster);
    }
    let mut etcd_skipped = None;
    let mut etcd_cluster = None;
    let mut etcd_version = None;
    match &options.etcd {
        Ok(bin) => {
            let etcd = Etcd::start(bin, 3, &options.out.join("etcd-3-members")).await?;
            targets.push(Target {
                name: "etcd 3 members".into(),
                kind: Kind::Etcd,
                url: etcd.follower().await,
                leader: None,
            });
            etcd_version = Some(etcd.version.clone());
            etcd_cluster = Some(etcd);
        }
        Err(why) => {
            println!("etcd skipped: {why}; measuring rowcall alone");
            etcd_skipped = Some(why.clone());
        }
    }

    let value = "v".repeat(options.value_bytes);
    // Warm every system up once (connections, caches, the first snapshot of a fresh log).
    for target in &targets {
        let warm = options.cell.min(Duration::from_secs(1));
        load(target, 4, warm, &value, "W").await?;
    }
    let mut samples: Vec<Vec<Sample>> = (0..targets.len())
        .map(|_| options.clients.iter().map(|_| Sample::default()).collect())
        .collect();
    for round in 0..options.rounds {
        for (c, &clients) in options.clients.iter().enumerate() {
            for (t, target) in targets.iter().enumerate() {
                let tag = format!("R{round}C{clients}");
                let sample = load(target, clients, options.cell, &value, &tag).await?;
                samples[t][c].add(sample);
                eprintln!(
                    "round {}/{}: {} at {clients} clients done",
                    round + 1,
                    options.rounds,
                    target.name
                );
            }
        }
    }
    drop(etcd_cluster);
    drop(clusters);

    let mut rows = Vec::new();
    for (t, target) in targets.iter().enumerate() {
        for (c, &clients) in options.clients.iter().enumerate() {
            let sample = std::mem::take(&mut samples[t][c]);
            let ok = sample.latencies_us.len() as u64;
            rows.push(Row {
                system: target.name.clone(),
                clients,
                writes_per_s: ok as f64 / sample.seconds.max(1e-9),
                latency: Latency::of(sample.latencies_us),
                ok,
                errors: sample.errors,
                seconds: sample.seconds,
                throughput_vs_etcd: None,
                p50_vs_etcd: None,
                leader_syncs_per_write: sample.leader_syncs.map(|s| s / ok.max(1) as f64),
            });
        }
    }
    let etcd_rows: Vec<Row> = rows
        .iter()
        .filter(|r| {
            targets
                .iter()
                .any(|t| t.name == r.system && t.kind == Kind::Etcd)
        })
        .cloned()
        .collect();
    for row in &mut rows {
        if let Some(etcd) = etcd_rows.iter().find(|e| e.clients == row.clients) {
            row.throughput_vs_etcd = Some(row.writes_per_s / etcd.writes_per_s.max(1e-9));
            row.p50_vs_etcd = Some(row.latency.p50_ms / etcd.latency.p50_ms.max(1e-9));
        }
    }
    rows.sort_by_key(|r| r.clients);
    let report = WritesReport {
        machine,
        settings: json!({
            "clients": options.clients,
            "seconds_per_measurement": options.cell.as_secs_f64(),
            "rounds": options.rounds,
            "value_bytes": options.value_bytes,
            "load_on": "a follower (rowcall 1 node: the node)",
            "client": "HTTP/1.1 JSON, one connection per client, closed loop",
            "rowcall_sync": "fdatasync (the default)",
            "node_bin": options.node_bin.display().to_string(),
            "baseline_bin": options.baseline_bin.as_ref().map(|p| p.display().to_string()),
            "etcd": etcd_version,
        }),
        etcd_skipped,
        rows,
    };
    publish(&options.out.join("writes.json"), &report, &table(&report))?;
    Ok(report)
}

/// The report as a Markdown table, machine details on top.
pub fn table(report: &WritesReport) -> String {
    let mut out = crate::bench::machine_line("writes", &report.machine);
    out.push_str(&format!(
        "{} B values, load on a follower, HTTP/JSON, {} s x {} interleaved rounds per figure\n\n",
        report.settings["value_bytes"],
        report.settings["seconds_per_measurement"],
        report.settings["rounds"],
    ));
    out.push_str("| clients | system | writes/s | p50 ms | p99 ms | errors | × etcd writes/s | × etcd p50 | leader syncs/write |\n");
    out.push_str("|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
    let ratio = |r: Option<f64>| r.map_or("–".to_owned(), |r| format!("{r:.2}"));
    for row in &report.rows {
        out.push_str(&format!(
            "| {} | {} | {:.0} | {:.1} | {:.1} | {} | {} | {} | {} |\n",
            row.clients,
            row.system,
            row.writes_per_s,
            row.latency.p50_ms,
            row.latency.p99_ms,
            row.errors,
            ratio(row.throughput_vs_etcd),
            ratio(row.p50_vs_etcd),
            ratio(row.leader_syncs_per_write),
        ));
    }
    if let Some(why) = &report.etcd_skipped {
        out.push_str(&format!("\netcd skipped: {why}\n"));
    }
    out
}

/// `clients` closed-loop clients writing new keys to `target` for `length`.
async fn load(
    target: &Target,
    clients: usize,
    length: Duration,
    value: &str,
    tag: &str,
) -> Result<Sample, ChaosError> {
    let syncs_before = match &target.leader {
        Some(leader) => leader_syncs(leader).await,
        None => None,
    };
    let connections = (0..clients)
        .map(|_| bench_client(None))
        .collect::<Result<Vec<_>, _>>()?;
    let (kind, url) = (target.kind, Arc::<str>::from(target.url.as_str()));
    let b64 = base64::engine::general_purpose::STANDARD;
    let value: Arc<str> = Arc::from(value);
    let etcd_value: Arc<str> = Arc::from(b64.encode(&*value));
    let tag: Arc<str> = Arc::from(tag);
    let mut sample = closed_loop(connections, length, move |http, client, n| {
        let key = format!("BENCH_{tag}_{client}_{n}");
        let request = match kind {
            Kind::Rowcall => http
                .post(format!("{url}/api/directory"))
                .header("x-terminal-key", ADMIN_KEY)
                .json(&json!({"key": key, "type": "static", "auth": "public",
                              "category": "bench", "content": &*value})),
            Kind::Etcd => http
                .post(format!("{url}/v3/kv/put"))
                .json(&json!({"key": b64.encode(&key), "value": &*etcd_value})),
        };
        answered(request)
    })
    .await;
    if let (Some(before), Some(leader)) = (syncs_before, &target.leader) {
        sample.leader_syncs = leader_syncs(leader).await.map(|after| after - before);
    }
    Ok(sample)
}

/// The node's `rowcall_store_syncs_total`, from its Prometheus metrics.
async fn leader_syncs(url: &str) -> Option<f64> {
    let text = crate::cluster::control_client()
        .get(format!("{url}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("rowcall_store_syncs_total "))
        .and_then(|v| v.trim().parse().ok())
}

/// Writes a bench's report as JSON to `path` and prints its table and where the JSON is.
pub(crate) fn publish(path: &Path, report: &impl Serialize, table: &str) -> Result<(), ChaosError> {
    let text = serde_json::to_string_pretty(report).unwrap_or_default();
    std::fs::write(path, text)
        .map_err(|e| ChaosError::io(format!("write {}", path.display()), e))?;
    println!("{table}");
    println!("JSON: {}", path.display());
    Ok(())
}

/// The first line of a bench's table: the bench, when and on what it ran.
pub(crate) fn machine_line(bench: &str, m: &Value) -> String {
    format!(
        "{bench}, {} UTC, {} ({} cores, {} GiB, kernel {}), load average at start {}\n",
        m["date_utc"].as_str().unwrap_or("?"),
        m["cpu"].as_str().unwrap_or("?"),
        m["cores"],
        m["memory_gib"],
        m["kernel"].as_str().unwrap_or("?"),
        m["load_average"].as_str().unwrap_or("?"),
    )
}

/// The machine a run is on, for the top of the report.
pub(crate) fn machine() -> Value {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let memory_kib: f64 = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    let loadavg = read("/proc/loadavg");
    let load_average = loadavg
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    json!({
        "date_utc": utc(secs),
        "cpu": cpu,
        "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "memory_gib": (memory_kib / 1024.0 / 1024.0).round(),
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
        "load_average": load_average,
    })
}

/// `YYYY-MM-DD HH:MM` of a Unix time (the civil-from-days algorithm).
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let (hour, minute) = ((secs % 86_400) / 3_600, (secs % 3_600) / 60);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00");
        assert_eq!(utc(1_796_060_000), "2026-11-30 17:33");
    }
}
