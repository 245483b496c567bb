//! `rowcall-bench regions`: what a cluster spread over three regions gives the people in
//! each of them. Five nodes on loopback, every peer link through the harness's proxies with
//! the one-way delay between the two nodes' regions (15 ms between `a` and `b`, 40 ms
//! between `a` and `c`, 75 ms between `b` and `c` by default; none inside a region):
//!
//! | node | region | role |
//! |---|---|---|
//! | 1 | a | voter (founds the cluster, so it leads at the start) |
//! | 2 | b | voter |
//! | 3 | b | voter |
//! | 4 | a | learner |
//! | 5 | c | learner |
//!
//! Voters sit in two regions, `b` holding the majority; `a` and `c` have read replicas.
//! Clients are local to their node (no delay between a client and the node it calls), as
//! an application would call the rowcall of its own region. Measured, one client at a time:
//! - the **ask** latency on every node (a search of the local copy: no peer is involved);
//! - the **write** latency through every node (a follower forwards to the leader, which
//!   needs a majority, and the node answers once it has applied the write itself);
//! - **the leader's region cut off** (every link between it and the other regions holds its
//!   bytes): one writer in each other region keeps writing; the figure is the longest time
//!   without an acknowledged write from the cut on. The cut lasts until every writer has had
//!   writes acknowledged again, or `cut_at_most`. Meanwhile one client per region asks its
//!   own node, the cut-off region included (an ask reads the local copy). Then the links
//!   heal and the cut-off leader catches up; the time until it has applied the last write is
//!   reported too.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::bench::{answered, bench_client, closed_loop, machine, publish};
use crate::bench_reads::{self, ask_text, catalogue_row, load_rowcall, Read, Workload};
use crate::cluster::{control_client, Cluster, ClusterOptions, ADMIN_KEY};
use crate::error::ChaosError;
use crate::proxy::{Flow, LinkState};
use crate::report::Latency;
use crate::rng::Rng;

/// The three regions, in the order of their delays.
const REGIONS: [&str; 3] = ["a", "b", "c"];

/// Where each node is and whether it votes, by id - 1.
const LAYOUT: [(&str, bool); 5] = [
    ("a", true),
    ("b", true),
    ("b", true),
    ("a", false),
    ("c", false),
];

/// The learners of [`LAYOUT`].
const LEARNERS: [u64; 2] = [4, 5];

/// How long writers run before the cut, and after the heal.
const AROUND_THE_CUT: Duration = Duration::from_secs(1);

/// How long the cut-off leader may take to catch up before the bench stops waiting.
const CATCH_UP_AT_MOST: Duration = Duration::from_secs(60);

/// How to run `regions`.
#[derive(Debug, Clone)]
pub struct RegionsOptions {
    /// The rowcall-node binary.
    pub node_bin: PathBuf,
    /// Data folders, logs and `regions.json` go under here.
    pub out: PathBuf,
    /// How long asks, and writes, run on each node.
    pub cell: Duration,
    /// One-way delays between regions a–b, a–c and b–c.
    pub delays_ms: [u32; 3],
    /// The cut ends at this length even if writes never came back.
    pub cut_at_most: Duration,
    /// Rows in the catalogue before measuring.
    pub rows: usize,
}

/// One node's figures.
#[derive(Debug, Clone, Serialize)]
pub struct NodeRow {
    /// The node.
    pub node: u64,
    /// Its region.
    pub region: &'static str,
    /// `leader`, `follower` or `learner`, as the node said after it was measured.
    pub role: String,
    /// Ask latency, one local client.
    pub ask: Latency,
    /// Asks answered per second.
    pub asks_per_s: f64,
    /// Write latency through this node, one local client.
    pub write: Latency,
    /// Writes acknowledged per second.
    pub writes_per_s: f64,
    /// Asks and writes that failed.
    pub errors: u64,
}

/// What one writer saw while the leader's region was cut off.
#[derive(Debug, Clone, Serialize)]
pub struct CutWriter {
    /// The node it wrote through.
    pub node: u64,
    /// Its region.
    pub region: &'static str,
    /// The longest time without an acknowledged write from the cut to the heal, seconds.
    pub unavailable_s: f64,
    /// Whether writes were acknowledged again before the heal.
    pub resumed: bool,
    /// Writes acknowledged between the cut and the heal.
    pub acknowledged_during_cut: usize,
    /// Writes that failed meanwhile (an error answer or a timeout).
    pub failed: u64,
}

/// What one asker saw while the leader's region was cut off.
#[derive(Debug, Clone, Serialize)]
pub struct CutAsker {
    /// The node it asked.
    pub node: u64,
    /// Its region.
    pub region: &'static str,
    /// Whether that region was the one cut off.
    pub cut_off: bool,
    /// Asks answered between the cut and the heal.
    pub answered: usize,
    /// Asks that failed meanwhile.
    pub failed: usize,
}

/// The cut of the leader's region.
#[derive(Debug, Clone, Serialize)]
pub struct CutReport {
    /// The region cut off.
    pub region: &'static str,
    /// The leader before the cut.
    pub leader_before: u64,
    /// The leader the other regions had when the cut healed, if any.
    pub leader_during: Option<u64>,
    /// How long the cut lasted, seconds.
    pub cut_s: f64,
    /// One writer per other region.
    pub writers: Vec<CutWriter>,
    /// One asker per region.
    pub askers: Vec<CutAsker>,
    /// After the heal: seconds until the cut-off leader had applied the last write.
    pub catch_up_s: Option<f64>,
}

/// Everything a `regions` run measured.
#[derive(Debug, Serialize)]
pub struct RegionsReport {
    /// Where it ran.
    pub machine: Value,
    /// How it ran: the layout and the delays.
    pub settings: Value,
    /// One row per node.
    pub nodes: Vec<NodeRow>,
    /// The leader's region cut off.
    pub cut: CutReport,
}

/// The region of node `id`.
fn region(id: u64) -> &'static str {
    LAYOUT[(id - 1) as usize].0
}

/// The one-way delay between two regions.
fn delay_ms(from: &str, to: &str, delays: [u32; 3]) -> u32 {
    match (from.min(to), from.max(to)) {
        (x, y) if x == y => 0,
        ("a", "b") => delays[0],
        ("a", "c") => delays[1],
        _ => delays[2],
    }
}

/// The nodes' heartbeat: `ROWCALL_HEARTBEAT_MS` from the environment they inherit, else
/// the node's default.
fn heartbeat_ms() -> u64 {
    std::env::var("ROWCALL_HEARTBEAT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120)
}

/// What to say when the longest round trip between regions is not below the heartbeat:
/// openraft 0.9 gives up on an AppendEntries after one heartbeat, so appends across that
/// link go unanswered (the member still receives them; the leader never hears back).
fn heartbeat_warning(delays: [u32; 3], heartbeat_ms: u64) -> Option<String> {
    let (pair, one_way) = [("a–b", delays[0]), ("a–c", delays[1]), ("b–c", delays[2])]
        .into_iter()
        .max_by_key(|(_, d)| *d)?;
    let round_trip = 2 * u64::from(one_way);
    (round_trip >= heartbeat_ms).then(|| {
        format!(
            "note: the {pair} round trip ({round_trip} ms) is not below the nodes' heartbeat \
             ({heartbeat_ms} ms), and an AppendEntries is given up after one heartbeat: \
             appends across that link go unanswered. Across regions, set ROWCALL_HEARTBEAT_MS \
             (raft.heartbeat_ms) above the longest round trip, and the election timeouts to \
             3–6 times it."
        )
    })
}

/// Every link with its regions' delay, both ways.
fn shape(cluster: &Cluster, delays: [u32; 3]) {
    cluster.set_links(|from, to| {
        let flow = Flow {
            delay_ms: delay_ms(region(from), region(to), delays),
            ..Flow::default()
        };
        Some(LinkState::shaped(flow))
    });
}

/// Runs the `regions` benchmark: starts the cluster, measures, prints the tables and writes
/// `regions.json` under `options.out`.
pub async fn regions(options: &RegionsOptions) -> Result<RegionsReport, ChaosError> {
    std::fs::create_dir_all(&options.out)
        .map_err(|e| ChaosError::io(format!("create {}", options.out.display()), e))?;
    let machine = machine();
    let heartbeat_ms = heartbeat_ms();
    let warning = heartbeat_warning(options.delays_ms, heartbeat_ms);
    if let Some(warning) = &warning {
        eprintln!("{warning}");
    }
    let cluster = Cluster::start_with_learners(
        &ClusterOptions {
            bin: options.node_bin.clone(),
            nodes: LAYOUT.len(),
            root: options.out.join("rowcall-5-nodes"),
            proxies: true,
            snapshot_every: 5_000,
            seed: 1,
            tls: false,
        },
        &LEARNERS,
    )
    .await?;
    let leader = cluster
        .await_leader(Duration::from_secs(10))
        .await
        .ok_or_else(|| ChaosError::setup("the cluster", "no leader within 10 s"))?;
    let mut rng = Rng::new(7);
    let rows: Vec<Value> = (0..options.rows)
        .map(|i| catalogue_row(i, &mut rng))
        .collect();
    // The farthest replica has them all before anything is measured.
    load_rowcall(&cluster, leader, 5, &rows).await?;
    let workload = Workload::new(&rows, None);
    shape(&cluster, options.delays_ms);
    // Let the replication streams run once at their new delays.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut nodes = Vec::new();
    for id in cluster.ids() {
        let url = cluster.node(id).url();
        let asks = bench_reads::load(&url, Read::Ask, &workload, 1, options.cell).await?;
        let writes = write_load(&url, &format!("N{id}"), options.cell).await?;
        eprintln!("node {id} (region {}) measured", region(id));
        nodes.push(NodeRow {
            node: id,
            region: region(id),
            role: role(&cluster, id).await,
            asks_per_s: asks.per_s(),
            writes_per_s: writes.per_s(),
            errors: asks.errors + writes.errors,
            ask: Latency::of(asks.latencies_us),
            write: Latency::of(writes.latencies_us),
        });
    }

    // Leadership may have moved while the nodes were measured.
    let leader = cluster
        .await_leader(Duration::from_secs(10))
        .await
        .unwrap_or(leader);
    let cut = cut_leader_region(&cluster, leader, options).await?;
    eprintln!("cut of region {} measured", cut.region);
    drop(cluster);

    let report = RegionsReport {
        machine,
        settings: json!({
            "layout": LAYOUT.iter().enumerate().map(|(i, (region, voter))| json!({
                "node": i + 1,
                "region": region,
                "voter": voter,
            })).collect::<Vec<_>>(),
            "one_way_delay_ms": {
                "a-b": options.delays_ms[0],
                "a-c": options.delays_ms[1],
                "b-c": options.delays_ms[2],
            },
            "heartbeat_ms": heartbeat_ms,
            "heartbeat_warning": warning,
            "seconds_per_measurement": options.cell.as_secs_f64(),
            "cut_at_most_s": options.cut_at_most.as_secs_f64(),
            "rows": options.rows,
            "client": "HTTP/1.1 JSON, one connection, closed loop, local to its node",
            "node_bin": options.node_bin.display().to_string(),
        }),
        nodes,
        cut,
    };
    publish(&options.out.join("regions.json"), &report, &table(&report))?;
    Ok(report)
}

/// Node `id`'s Raft role as it says itself.
async fn role(cluster: &Cluster, id: u64) -> String {
    let status = cluster.status(id).await.unwrap_or_default();
    status["role"].as_str().unwrap_or("unknown").to_owned()
}

/// One closed-loop client inserting new rows through `url` for `length`.
async fn write_load(
    url: &str,
    tag: &str,
    length: Duration,
) -> Result<crate::bench::Sample, ChaosError> {
    let url: Arc<str> = Arc::from(url);
    let tag: Arc<str> = Arc::from(tag);
    Ok(
        closed_loop(vec![bench_client(None)?], length, move |http, _, n| {
            answered(write(&http, &url, &format!("REGIONS_{tag}_{n}")))
        })
        .await,
    )
}

/// An insert of one small row.
fn write(http: &reqwest::Client, url: &str, key: &str) -> reqwest::RequestBuilder {
    http.post(format!("{url}/api/directory"))
        .header("x-terminal-key", ADMIN_KEY)
        .json(&json!({"key": key, "type": "static", "auth": "public",
                      "category": "regions", "content": "# WHAT: a row written across regions\n"}))
}

/// What one client saw, in order: when each answer came (since the epoch) and what it
/// acknowledged: `Some(index)` for a write (`Some(0)` for an ask), `None` for a failure.
type Outcomes = Arc<Mutex<Vec<(Duration, Option<u64>)>>>;

/// The outcomes recorded so far.
fn seen(outcomes: &Outcomes) -> std::sync::MutexGuard<'_, Vec<(Duration, Option<u64>)>> {
    outcomes.lock().unwrap_or_else(|p| p.into_inner())
}

/// Sends `request(client, n)` back to back until `stop`, recording each outcome.
async fn keep_sending<F, Fut>(
    epoch: Instant,
    outcomes: Outcomes,
    mut stop: watch::Receiver<bool>,
    request: F,
) -> Result<(), ChaosError>
where
    F: Fn(reqwest::Client, u64) -> Fut,
    Fut: std::future::Future<Output = Option<u64>>,
{
    let http = bench_client(None)?;
    let mut n = 0u64;
    while !*stop.borrow() {
        n += 1;
        let outcome = tokio::select! {
            outcome = request(http.clone(), n) => outcome,
            _ = stop.changed() => break,
        };
        seen(&outcomes).push((epoch.elapsed(), outcome));
        if outcome.is_none() {
            // A refused request comes back at once; do not spin on it.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(())
}

/// Writes a new row through `url`: its index once the whole answer is read.
async fn acknowledged_write(http: reqwest::Client, url: String, key: String) -> Option<u64> {
    let answer = write(&http, &url, &key).send().await.ok()?;
    if !answer.status().is_success() {
        return None;
    }
    let index = answer
        .headers()
        .get("x-rowcall-index")
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    answer.bytes().await.ok().and(index)
}

/// Cuts the leader's region off from the others while one writer per other region keeps
/// writing and one asker per region asks, heals it, and waits for the cut-off leader to
/// catch up.
async fn cut_leader_region(
    cluster: &Cluster,
    leader: u64,
    options: &RegionsOptions,
) -> Result<CutReport, ChaosError> {
    let cut_region = region(leader);
    // The first node of every region asks; of every other region, writes.
    let firsts: Vec<u64> = REGIONS
        .iter()
        .filter_map(|r| cluster.ids().into_iter().find(|id| region(*id) == *r))
        .collect();
    let writers: Vec<u64> = firsts
        .iter()
        .copied()
        .filter(|id| region(*id) != cut_region)
        .collect();
    let epoch = Instant::now();
    let (stop, stopped) = watch::channel(false);
    let mut tasks = Vec::new();
    let mut spawn = |id: u64, asks: bool| {
        let outcomes = Outcomes::default();
        let url = cluster.node(id).url();
        tasks.push(tokio::spawn(keep_sending(
            epoch,
            outcomes.clone(),
            stopped.clone(),
            move |http, n| {
                let url = url.clone();
                async move {
                    if asks {
                        let ask = http
                            .get(format!("{url}/api/dispatch"))
                            .query(&[("ask", ask_text(n))]);
                        answered(ask).await.then_some(0)
                    } else {
                        acknowledged_write(http, url, format!("REGIONS_CUT_N{id}_{n}")).await
                    }
                }
            },
        )));
        outcomes
    };
    let records: Vec<Outcomes> = writers.iter().map(|&id| spawn(id, false)).collect();
    let asked: Vec<Outcomes> = firsts.iter().map(|&id| spawn(id, true)).collect();
    tokio::time::sleep(AROUND_THE_CUT).await;

    let cut_at = epoch.elapsed();
    cluster.set_links(|from, to| {
        ((region(from) == cut_region) != (region(to) == cut_region)).then(LinkState::blackhole)
    });
    // Writes are back once each writer had two writes acknowledged after the cut; the cut
    // then lasts a second more, so the figures show them flowing again.
    let resumed = |writes: &Outcomes| {
        seen(writes)
            .iter()
            .filter(|(d, index)| index.is_some() && *d > cut_at)
            .count()
            >= 2
    };
    let deadline = Instant::now() + options.cut_at_most;
    while Instant::now() < deadline && !records.iter().all(resumed) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if records.iter().all(resumed) {
        tokio::time::sleep(AROUND_THE_CUT.min(deadline.saturating_duration_since(Instant::now())))
            .await;
    }
    let leader_during = cluster.leader().await.filter(|l| region(*l) != cut_region);
    let healed_at = epoch.elapsed();
    shape(cluster, options.delays_ms);
    tokio::time::sleep(AROUND_THE_CUT).await;
    let _ = stop.send(true);
    for task in tasks {
        task.await
            .map_err(|e| ChaosError::setup("a writer or asker", e))??;
    }

    let mut cut_writers = Vec::new();
    let mut last_index = 0;
    for (&id, writes) in writers.iter().zip(&records) {
        let writes = seen(writes);
        last_index = last_index.max(writes.iter().filter_map(|w| w.1).max().unwrap_or(0));
        let during: Vec<Duration> = writes
            .iter()
            .filter(|(d, index)| index.is_some() && *d > cut_at && *d <= healed_at)
            .map(|w| w.0)
            .collect();
        cut_writers.push(CutWriter {
            node: id,
            region: region(id),
            unavailable_s: longest_gap(&during, cut_at, healed_at).as_secs_f64(),
            resumed: !during.is_empty(),
            acknowledged_during_cut: during.len(),
            failed: writes.iter().filter(|w| w.1.is_none()).count() as u64,
        });
    }
    let askers = firsts
        .iter()
        .zip(&asked)
        .map(|(&id, asks)| {
            let asks = seen(asks);
            let during = || asks.iter().filter(|(d, _)| *d > cut_at && *d <= healed_at);
            CutAsker {
                node: id,
                region: region(id),
                cut_off: region(id) == cut_region,
                answered: during().filter(|a| a.1.is_some()).count(),
                failed: during().filter(|a| a.1.is_none()).count(),
            }
        })
        .collect();
    let catch_up_s = caught_up(cluster, leader, last_index, healed_at, epoch).await;
    Ok(CutReport {
        region: cut_region,
        leader_before: leader,
        leader_during,
        cut_s: (healed_at - cut_at).as_secs_f64(),
        writers: cut_writers,
        askers,
        catch_up_s,
    })
}

/// The longest stretch of `[from, to]` without an acknowledgement in `done` (sorted).
fn longest_gap(done: &[Duration], from: Duration, to: Duration) -> Duration {
    let mut longest = Duration::ZERO;
    let mut last = from;
    for &d in done.iter().chain(std::iter::once(&to)) {
        longest = longest.max(d.saturating_sub(last));
        last = last.max(d);
    }
    longest
}

/// Seconds from the heal until node `id` has applied `index`, or `None` if it did not
/// within [`CATCH_UP_AT_MOST`].
async fn caught_up(
    cluster: &Cluster,
    id: u64,
    index: u64,
    healed_at: Duration,
    epoch: Instant,
) -> Option<f64> {
    let http = control_client();
    let url = format!("{}/api/directory/counts", cluster.node(id).url());
    let deadline = Instant::now() + CATCH_UP_AT_MOST;
    while Instant::now() < deadline {
        let read = http
            .get(&url)
            .query(&[("min_index", index)])
            .timeout(Duration::from_secs(2))
            .send()
            .await;
        if read.is_ok_and(|r| r.status().is_success()) {
            return Some((epoch.elapsed() - healed_at).as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// The report as Markdown tables, machine details on top.
pub fn table(report: &RegionsReport) -> String {
    let mut out = crate::bench::machine_line("regions", &report.machine);
    let delays = &report.settings["one_way_delay_ms"];
    out.push_str(&format!(
        "5 nodes: voters 1 (a), 2 and 3 (b); learners 4 (a), 5 (c). One-way delays a–b {} ms, \
         a–c {} ms, b–c {} ms; heartbeat {} ms; {} rows; one local client, {} s per figure\n\n",
        delays["a-b"],
        delays["a-c"],
        delays["b-c"],
        report.settings["heartbeat_ms"],
        report.settings["rows"],
        report.settings["seconds_per_measurement"],
    ));
    if let Some(warning) = report.settings["heartbeat_warning"].as_str() {
        out.push_str(&format!("{warning}\n\n"));
    }
    out.push_str(
        "| region | node | role | ask p50 ms | ask p99 ms | asks/s | write p50 ms | write p99 ms \
         | writes/s | errors |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for row in &report.nodes {
        out.push_str(&format!(
            "| {} | {} | {} | {:.2} | {:.2} | {:.0} | {:.1} | {:.1} | {:.1} | {} |\n",
            row.region,
            row.node,
            row.role,
            row.ask.p50_ms,
            row.ask.p99_ms,
            row.asks_per_s,
            row.write.p50_ms,
            row.write.p99_ms,
            row.writes_per_s,
            row.errors,
        ));
    }
    let cut = &report.cut;
    out.push_str(&format!(
        "\nRegion {} (the leader, node {}) cut off for {:.1} s; leader elsewhere meanwhile: {}\n\n",
        cut.region,
        cut.leader_before,
        cut.cut_s,
        cut.leader_during.map_or("none".into(), |l| format!(
            "node {l} (region {})",
            region(l)
        )),
    ));
    out.push_str(
        "| writes through | node | writes unavailable s | resumed during the cut \
         | acknowledged during the cut | failed |\n|---|---:|---:|---|---:|---:|\n",
    );
    for w in &cut.writers {
        out.push_str(&format!(
            "| region {} | {} | {:.2} | {} | {} | {} |\n",
            w.region,
            w.node,
            w.unavailable_s,
            if w.resumed { "yes" } else { "no" },
            w.acknowledged_during_cut,
            w.failed,
        ));
    }
    out.push_str(
        "\n| asks through | node | cut off | answered during the cut | failed |\n\
         |---|---:|---|---:|---:|\n",
    );
    for a in &cut.askers {
        out.push_str(&format!(
            "| region {} | {} | {} | {} | {} |\n",
            a.region,
            a.node,
            if a.cut_off { "yes" } else { "no" },
            a.answered,
            a.failed,
        ));
    }
    out.push_str(&format!(
        "\nAfter the heal, node {} had applied the last write in {}\n",
        cut.leader_before,
        cut.catch_up_s
            .map_or("more than 60 s".into(), |s| format!("{s:.2} s")),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_are_symmetric_and_zero_inside_a_region() {
        let d = [15, 40, 75];
        assert_eq!(delay_ms("a", "a", d), 0);
        assert_eq!(delay_ms("a", "b", d), 15);
        assert_eq!(delay_ms("b", "a", d), 15);
        assert_eq!(delay_ms("c", "a", d), 40);
        assert_eq!(delay_ms("b", "c", d), 75);
        assert_eq!(delay_ms("c", "b", d), 75);
    }

    #[test]
    fn a_round_trip_at_or_above_the_heartbeat_is_warned_about() {
        // The defaults: b–c is 150 ms round trip, above the default 120 ms heartbeat.
        let warning = heartbeat_warning([15, 40, 75], 120).expect("a warning");
        assert!(warning.contains("b–c round trip (150 ms)"), "{warning}");
        assert!(warning.contains("ROWCALL_HEARTBEAT_MS"), "{warning}");
        // Exactly the heartbeat is already too long: the answer cannot beat the timeout.
        assert!(heartbeat_warning([60, 10, 20], 120).is_some());
        assert_eq!(heartbeat_warning([15, 40, 75], 250), None);
        assert_eq!(heartbeat_warning([5, 10, 20], 120), None);
    }

    #[test]
    fn the_longest_gap_counts_from_the_cut_and_to_the_heal() {
        let s = Duration::from_secs_f64;
        // Nothing acknowledged: the whole cut.
        assert_eq!(longest_gap(&[], s(1.0), s(5.0)), s(4.0));
        // Back after 1.5 s, then steady.
        assert_eq!(
            longest_gap(&[s(2.5), s(2.6), s(2.7)], s(1.0), s(3.0)),
            s(1.5)
        );
        // A stall at the end counts too.
        assert_eq!(longest_gap(&[s(1.1), s(1.2)], s(1.0), s(4.0)), s(2.8));
    }
}
