//! `rowcall-bench`: performance measurements of a real rowcall cluster beside etcd on the
//! same machine (`writes`), and of the public gRPC API beside HTTP on one node (`api`),
//! every figure of a table from one run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use rowcall_chaos::bench::{self, WritesOptions};
use rowcall_chaos::bench_api::{self, ApiOptions};
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
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let run = async {
        match Flags::parse().command {
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
            writes => bench::writes(&writes_options(writes)?).await.map(drop)?,
        }
        Ok(())
    };
    // Ctrl-C drops the run, and with it every node and etcd process.
    tokio::select! {
        result = run => result?,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("\ninterrupted: stopping every process");
            return Ok(ExitCode::from(130));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The `writes` flags as options, checked.
fn writes_options(flags: Bench) -> anyhow::Result<WritesOptions> {
    let Bench::Writes {
        out,
        clients,
        seconds,
        rounds,
        value_bytes,
        node_bin,
        baseline_bin,
        etcd,
        no_etcd,
    } = flags
    else {
        anyhow::bail!("not the writes benchmark");
    };
    anyhow::ensure!(
        seconds > 0.0 && rounds > 0 && clients.iter().all(|c| *c > 0),
        "--seconds, --rounds and every --clients count must be positive"
    );
    Ok(WritesOptions {
        node_bin: node_binary(node_bin.as_deref())?,
        baseline_bin: baseline_bin.map(|b| node_binary(Some(&b))).transpose()?,
        etcd: match etcd {
            _ if no_etcd => Err("--no-etcd".to_owned()),
            Some(path) if path.is_file() => Ok(path),
            Some(path) => anyhow::bail!("--etcd {}: no such file", path.display()),
            None => rowcall_chaos::etcd::on_path().ok_or_else(|| {
                "no `etcd` on the PATH (Debian: apt-get install etcd-server; or pass --etcd PATH)"
                    .to_owned()
            }),
        },
        out,
        clients,
        cell: Duration::from_secs_f64(seconds),
        rounds,
        value_bytes,
    })
}
