//! `rowcall-bench`: performance measurements of a real rowcall cluster beside etcd on the
//! same machine, and of its protocols beside each other, every figure of a table from one
//! run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use rowcall_chaos::bench::{self, WritesOptions};
use rowcall_chaos::bench_api::{self, ApiOptions};
use rowcall_chaos::bench_loop::{self, LoopOptions};
use rowcall_chaos::bench_reads::{self, ReadsOptions};
use rowcall_chaos::bench_regions::{self, RegionsOptions};
use rowcall_chaos::bench_scale::{self, ScaleOptions, Words};
use rowcall_chaos::bench_soak::{self, SoakOptions};
use rowcall_chaos::bench_tls::{self, TlsOptions};
use rowcall_chaos::cluster::node_binary;

/// Measures rowcall (release builds give the real figures: `cargo build --release -p
/// rowcall-node -p rowcall-chaos`) and prints a table; the JSON goes to `--out`.
#[derive(Debug, Parser)]
#[command(name = "rowcall-bench", version, about)]
struct Flags {
    #[command(subcommand)]
    command: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// Inserts per second and latency at each client count, on 3 nodes and 1 node (load on
    /// a follower), beside a 3-member etcd from the system's `etcd` (Debian: etcd-server)
    /// through its JSON gateway; skipped with a message when etcd is not installed.
    Writes {
        /// Output folder: writes.json, data folders and logs.
        #[arg(long)]
        out: PathBuf,
        /// Concurrent clients, comma-separated: one figure each.
        #[arg(long, value_delimiter = ',', default_values_t = [1, 16, 64])]
        clients: Vec<usize>,
        /// Seconds per measurement.
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Interleaved rounds; each figure sums its system's measurements over the rounds.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Bytes per written value.
        #[arg(long, default_value_t = 256)]
        value_bytes: usize,
        /// The rowcall-node binary [default: next to this executable].
        #[arg(long)]
        node_bin: Option<PathBuf>,
        /// Another rowcall-node binary measured beside it on 3 nodes (before/after ratios).
        #[arg(long)]
        baseline_bin: Option<PathBuf>,
        /// The etcd binary [default: `etcd` on the PATH].
        #[arg(long)]
        etcd: Option<PathBuf>,
        /// Do not measure etcd even if it is installed.
        #[arg(long)]
        no_etcd: bool,
    },
    /// Ask, contract and row get on a follower of 3 nodes, beside etcd's serializable get on
    /// a follower of a 3-member etcd holding the same catalogue.
    Reads {
        /// Output folder: reads.json, data folders and logs.
        #[arg(long)]
        out: PathBuf,
        /// Concurrent clients, comma-separated: one figure each.
        #[arg(long, value_delimiter = ',', default_values_t = [1, 64])]
        clients: Vec<usize>,
        /// Seconds per measurement.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Interleaved rounds; each figure sums its read's measurements over the rounds.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Rows in the catalogue (made from a fixed vocabulary; the same on both systems).
        #[arg(long, default_value_t = 2_000)]
        rows: usize,
        /// A real catalogue instead: JSON lines, each a row as `POST /api/directory` takes it.
        #[arg(long)]
        catalogue: Option<PathBuf>,
        /// Real requests to ask instead of vocabulary words: JSON lines with the request
        /// in `q` (the format of `rowcall eval`).
        #[arg(long)]
        asks: Option<PathBuf>,
        /// The rowcall-node binary [default: next to this executable].
        #[arg(long)]
        node_bin: Option<PathBuf>,
        /// The etcd binary [default: `etcd` on the PATH].
        #[arg(long)]
        etcd: Option<PathBuf>,
        /// Do not measure etcd even if it is installed.
        #[arg(long)]
        no_etcd: bool,
    },
    /// The four-step loop (ask, contract, invoke, confirm) of one agent on one node and on a
    /// follower of 3 nodes: latency and bytes of each step and of the whole loop.
    Loop {
        /// Output folder: loop.json, data folders and logs.
        #[arg(long)]
        out: PathBuf,
        /// Seconds of loops per system and round.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Interleaved rounds.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Other rows in the catalogue, so that the ask ranks a real one.
        #[arg(long, default_value_t = 2_000)]
        rows: usize,
        /// The rowcall-node binary [default: next to this executable].
        #[arg(long)]
        node_bin: Option<PathBuf>,
    },
    /// Catalogues of growing size, a fresh 3-node cluster each: bulk load time, ask p50/p99 on
    /// a follower, resident memory per node, snapshot size, and the time a wiped follower
    /// takes to catch up by snapshot.
    Scale {
        /// Output folder: scale.json, data folders and logs.
        #[arg(long)]
        out: PathBuf,
        /// Catalogue sizes, comma-separated: one cluster each.
        #[arg(long, value_delimiter = ',', default_values_t = [5_000, 50_000, 200_000])]
        sizes: Vec<usize>,
        /// Seconds of asks per size.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// How the rows' words are drawn: `zipf` as real catalogues' (a vocabulary growing
        /// with the text, Zipf frequencies, asks of one row's words), or `uniform` from 50
        /// words (each in ~45% of the rows: the worst case for an index).
        #[arg(long, value_enum, default_value_t = Words::Zipf)]
        words: Words,
        /// The rowcall-node binary [default: next to this executable].
        #[arg(long)]
        node_bin: Option<PathBuf>,
    },
    /// Disk and memory under a long load: rows inserted, then minutes of mixed load
    /// (invocations mostly) on 3 nodes, each node's data folder and resident memory sampled
    /// as it runs: bytes per row and per invocation, and the slope of memory once warm.
    Soak {
        /// Output folder: soak.json, soak.svg, data folders and logs.
        #[arg(long)]
        out: PathBuf,
        /// Minutes of mixed load.
        #[arg(long, default_value_t = 5.0)]
        minutes: f64,
        /// Rows inserted before it.
        #[arg(long, default_value_t = 2_000)]
        rows: usize,
        /// Concurrent clients.
        #[arg(long, default_value_t = 16)]
        clients: usize,
        /// Seconds between samples.
        #[arg(long, default_value_t = 10.0)]
        sample_every: f64,
        /// Entries between snapshots, at least (the node's `[raft] snapshot_every`; its
        /// default unless given). A large value leaves snapshots out, to see what they cost.
        #[arg(long, default_value_t = 5_000)]
        snapshot_every: u64,
        /// The rowcall-node binary [default: next to this executable].
        #[arg(long)]
        node_bin: Option<PathBuf>,
    },
    /// Five nodes in three simulated regions (one-way delays through the harness's proxies;
    /// voters in regions a and b, learners in a and c): ask and write latency in each
    /// region, and how long writes are unavailable when the leader's region is cut off.
    Regions {
        /// Output folder: regions.json, data folders and logs.
        #[arg(long)]
        out: PathBuf,
        /// Seconds of asks, and of writes, on each node.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// One-way delays between regions a–b, a–c and b–c, in milliseconds.
        #[arg(long, value_delimiter = ',', default_values_t = [15, 40, 75])]
        delays_ms: Vec<u32>,
        /// The cut of the leader's region ends after this long even if writes never came
        /// back (they cannot when that region holds the majority of the voters).
        #[arg(long, default_value_t = 30.0)]
        cut_at_most: f64,
        /// Rows in the catalogue before measuring.
        #[arg(long, default_value_t = 1_000)]
        rows: usize,
        /// The rowcall-node binary [default: next to this executable].
        #[arg(long)]
        node_bin: Option<PathBuf>,
    },
    /// Ask and invoke latency (p50, p99) over gRPC through the rowcall-client library beside
    /// HTTP, on the same node, one client each, rounds interleaved.
    Api {
        /// Output folder: api.json, the node's data folder and log.
        #[arg(long)]
        out: PathBuf,
        /// Requests per operation and protocol in each round.
        #[arg(long, default_value_t = 2000)]
        requests: usize,
        /// Interleaved rounds; each figure pools its measurements over the rounds.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Rows seeded before measuring (each ask looks for one of them).
        #[arg(long, default_value_t = 200)]
        rows: usize,
        /// The rowcall-node binary [default: next to this executable].
        #[arg(long)]
        node_bin: Option<PathBuf>,
    },
    /// Ask and invoke over HTTPS beside plain HTTP: two one-node clusters of the same binary,
    /// measured in turn, with HTTPS over plain as ratios.
    Tls {
        /// Output folder: tls.json, certificates, data folders and logs.
        #[arg(long)]
        out: PathBuf,
        /// Concurrent clients, comma-separated: one figure each.
        #[arg(long, value_delimiter = ',', default_values_t = [1, 16])]
        clients: Vec<usize>,
        /// Seconds per measurement.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Interleaved rounds; each figure sums its scheme's measurements over the rounds.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// The rowcall-node binary [default: next to this executable].
        #[arg(long)]
        node_bin: Option<PathBuf>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let run = async {
        match Flags::parse().command {
            Bench::Writes {
                out,
                clients,
                seconds,
                rounds,
                value_bytes,
                node_bin,
                baseline_bin,
                etcd,
                no_etcd,
            } => {
                check(seconds, rounds, &clients)?;
                let options = WritesOptions {
                    node_bin: node_binary(node_bin.as_deref())?,
                    baseline_bin: baseline_bin.map(|b| node_binary(Some(&b))).transpose()?,
                    etcd: etcd_binary(etcd, no_etcd)?,
                    out,
                    clients,
                    cell: Duration::from_secs_f64(seconds),
                    rounds,
                    value_bytes,
                };
                bench::writes(&options).await?;
            }
            Bench::Reads {
                out,
                clients,
                seconds,
                rounds,
                rows,
                catalogue,
                asks,
                node_bin,
                etcd,
                no_etcd,
            } => {
                check(seconds, rounds, &clients)?;
                anyhow::ensure!(rows > 0, "--rows must be positive");
                let options = ReadsOptions {
                    node_bin: node_binary(node_bin.as_deref())?,
                    etcd: etcd_binary(etcd, no_etcd)?,
                    out,
                    clients,
                    cell: Duration::from_secs_f64(seconds),
                    rounds,
                    rows,
                    catalogue,
                    asks,
                };
                bench_reads::reads(&options).await?;
            }
            Bench::Loop {
                out,
                seconds,
                rounds,
                rows,
                node_bin,
            } => {
                check(seconds, rounds, &[1])?;
                let options = LoopOptions {
                    node_bin: node_binary(node_bin.as_deref())?,
                    out,
                    cell: Duration::from_secs_f64(seconds),
                    rounds,
                    rows,
                };
                bench_loop::four_step_loop(&options).await?;
            }
            Bench::Scale {
                out,
                sizes,
                seconds,
                words,
                node_bin,
            } => {
                check(seconds, 1, &sizes)?;
                let options = ScaleOptions {
                    node_bin: node_binary(node_bin.as_deref())?,
                    out,
                    sizes,
                    cell: Duration::from_secs_f64(seconds),
                    words,
                };
                bench_scale::scale(&options).await?;
            }
            Bench::Soak {
                out,
                minutes,
                rows,
                clients,
                sample_every,
                snapshot_every,
                node_bin,
            } => {
                check(minutes * 60.0, 1, &[clients, rows])?;
                anyhow::ensure!(snapshot_every > 0, "--snapshot-every must be positive");
                check(sample_every, 1, &[1])?;
                let options = SoakOptions {
                    node_bin: node_binary(node_bin.as_deref())?,
                    out,
                    mixed: Duration::from_secs_f64(minutes * 60.0),
                    rows,
                    clients,
                    sample_every: Duration::from_secs_f64(sample_every),
                    snapshot_every,
                };
                bench_soak::soak(&options).await?;
            }
            Bench::Regions {
                out,
                seconds,
                delays_ms,
                cut_at_most,
                rows,
                node_bin,
            } => {
                check(seconds, 1, &[1])?;
                anyhow::ensure!(rows > 0, "--rows must be positive");
                let [ab, ac, bc] = delays_ms[..] else {
                    anyhow::bail!("--delays-ms takes three delays: a-b,a-c,b-c");
                };
                let cut_at_most = Duration::try_from_secs_f64(cut_at_most)
                    .ok()
                    .filter(|d| !d.is_zero())
                    .ok_or_else(|| {
                        anyhow::anyhow!("--cut-at-most must be a positive number of seconds")
                    })?;
                let options = RegionsOptions {
                    node_bin: node_binary(node_bin.as_deref())?,
                    out,
                    cell: Duration::from_secs_f64(seconds),
                    delays_ms: [ab, ac, bc],
                    cut_at_most,
                    rows,
                };
                bench_regions::regions(&options).await?;
            }
            Bench::Tls {
                out,
                clients,
                seconds,
                rounds,
                node_bin,
            } => {
                check(seconds, rounds, &clients)?;
                let options = TlsOptions {
                    node_bin: node_binary(node_bin.as_deref())?,
                    out,
                    clients,
                    cell: Duration::from_secs_f64(seconds),
                    rounds,
                };
                bench_tls::tls(&options).await?;
            }
            Bench::Api {
                out,
                requests,
                rounds,
                rows,
                node_bin,
            } => {
                anyhow::ensure!(
                    requests > 0 && rounds > 0,
                    "--requests and --rounds must be positive"
                );
                let options = ApiOptions {
                    node_bin: node_binary(node_bin.as_deref())?,
                    out,
                    requests,
                    rounds,
                    rows,
                };
                bench_api::api(&options).await?;
            }
        }
        anyhow::Ok(())
    };
    // Ctrl-C drops the run, and with it every node and etcd process.
    tokio::select! {
        result = run => { result?; }
        _ = tokio::signal::ctrl_c() => {
            eprintln!("\ninterrupted: stopping every process");
            return Ok(ExitCode::from(130));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The sizes every bench shares must be positive.
fn check(seconds: f64, rounds: usize, clients: &[usize]) -> anyhow::Result<()> {
    anyhow::ensure!(
        seconds > 0.0 && seconds.is_finite() && rounds > 0 && clients.iter().all(|c| *c > 0),
        "--seconds (a finite number), --rounds and every count (--clients, --sizes) must be positive"
    );
    Ok(())
}

/// The etcd to measure beside rowcall, or why there is none (then rowcall is measured
/// alone); an `--etcd` path that does not exist is an error.
fn etcd_binary(given: Option<PathBuf>, no_etcd: bool) -> anyhow::Result<Result<PathBuf, String>> {
    Ok(match given {
        _ if no_etcd => Err("--no-etcd".to_owned()),
        Some(path) if path.is_file() => Ok(path),
        Some(path) => anyhow::bail!("--etcd {}: no such file", path.display()),
        None => rowcall_chaos::etcd::on_path().ok_or_else(|| {
            "no `etcd` on the PATH (Debian: apt-get install etcd-server; or pass --etcd PATH)"
                .to_owned()
        }),
    })
}
