//! `rowcall-bench tls`: what HTTPS on the HTTP listener costs. Two one-node clusters of the
//! same binary run side by side, one serving plain HTTP and one HTTPS (a certificate made for
//! the run); ask and invoke load goes to each in turn, interleaved over rounds, so that a busy
//! moment of a shared machine falls on both alike, and the table gives HTTPS over plain as
//! ratios from one run.
//!
//! Clients are closed loops, one keep-alive HTTP/1.1 connection each (HTTP/1.1 on both sides,
//! so that the only difference is TLS); a connection's handshake happens in the warm-up.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};

use crate::bench::{answered, bench_client, closed_loop, machine, Sample};
use crate::cluster::{free_ports, test_certificates, ADMIN_KEY};
use crate::error::ChaosError;
use crate::report::Latency;

/// How long a node may take to become ready.
const READY_WITHIN: Duration = Duration::from_secs(30);
/// What the ask load asks (the demo catalogue answers it with `NOW`).
const ASK: &str = "current time in utc";

/// How to run `tls`.
#[derive(Debug, Clone)]
pub struct TlsOptions {
    /// The rowcall-node binary.
    pub node_bin: PathBuf,
    /// Data folders, logs, certificates and `tls.json` go under here.
    pub out: PathBuf,
    /// Concurrent clients, one measurement each.
    pub clients: Vec<usize>,
    /// Length of one measurement.
    pub cell: Duration,
    /// Rounds: every (operation, clients, scheme) measurement runs once per round.
    pub rounds: usize,
}

/// The two operations measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Operation {
    /// `GET /api/dispatch?ask=…`: a search, no write.
    Ask,
    /// `POST /api/dispatch` of `NOW`: runs the row and commits a receipt.
    Invoke,
}

impl Operation {
    fn name(self) -> &'static str {
        match self {
            Operation::Ask => "ask",
            Operation::Invoke => "invoke",
        }
    }
}

/// The figures of one scheme at one (operation, clients) pair, over every round.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    /// Answered requests per second.
    pub per_s: f64,
    /// Latency of answered requests.
    pub latency: Latency,
    /// Answered requests.
    pub ok: u64,
    /// Requests refused or failed (not in the latency figures).
    pub errors: u64,
}

/// One line of the table: plain and HTTPS beside each other.
#[derive(Debug, Clone, Serialize)]
pub struct TlsRow {
    /// The operation.
    pub operation: Operation,
    /// Concurrent clients.
    pub clients: usize,
    /// Over plain HTTP.
    pub http: Figures,
    /// Over HTTPS.
    pub https: Figures,
    /// HTTPS requests/s over plain requests/s (below 1: TLS costs throughput).
    pub throughput_ratio: f64,
    /// HTTPS p50 over plain p50 (above 1: TLS costs latency).
    pub p50_ratio: f64,
    /// HTTPS p99 over plain p99.
    pub p99_ratio: f64,
}

/// Everything a `tls` run measured.
#[derive(Debug, Serialize)]
pub struct TlsReport {
    /// Where it ran.
    pub machine: Value,
    /// How it ran.
    pub settings: Value,
    /// One row per operation and clients.
    pub rows: Vec<TlsRow>,
}

/// A one-node cluster in a child process, killed when dropped.
struct Server {
    url: String,
    child: Child,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts `bin` as a one-node cluster with its demo catalogue under `dir`, serving HTTPS
    /// with `https` (certificate, key) when given, and waits until it is ready.
    async fn start(
        bin: &Path,
        dir: &Path,
        https: Option<(&Path, &Path)>,
        client: &reqwest::Client,
    ) -> Result<Server, ChaosError> {
        if !bin.is_file() {
            return Err(ChaosError::NodeBinaryMissing {
                path: bin.to_owned(),
            });
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| ChaosError::io(format!("create {}", dir.display()), e))?;
        let ports = free_ports(2)?;
        let http = SocketAddr::from(([127, 0, 0, 1], ports[0]));
        let log = dir.join("node.log");
        let out = File::create(&log)
            .map_err(|e| ChaosError::io(format!("create {}", log.display()), e))?;
        let err = out
            .try_clone()
            .map_err(|e| ChaosError::io("clone log handle", e))?;
        let mut command = Command::new(bin);
        command
            .args(["--id", "1", "--http", &http.to_string(), "--grpc"])
            .arg(SocketAddr::from(([127, 0, 0, 1], ports[1])).to_string())
            .arg("--data")
            .arg(crate::cluster::fresh(dir.join("data"))?);
        if let Some((cert, key)) = https {
            command.arg("--https-cert").arg(cert);
            command.arg("--https-key").arg(key);
        }
        let child = command
            .env("ROWCALL_ADMIN_KEY", ADMIN_KEY)
            // A load test from one address: quotas would measure themselves.
            .env("ROWCALL_RATE_LIMIT", "off")
            .env("ROWCALL_LOG", "warn")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .map_err(|source| ChaosError::Process {
                action: "start",
                id: 1,
                source,
            })?;
        let scheme = if https.is_some() { "https" } else { "http" };
        let mut server = Server {
            url: format!("{scheme}://{http}"),
            child,
            log,
        };
        server.wait_ready(client).await?;
        Ok(server)
    }

    async fn wait_ready(&mut self, client: &reqwest::Client) -> Result<(), ChaosError> {
        let deadline = Instant::now() + READY_WITHIN;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(ChaosError::Exited {
                    id: 1,
                    status: status.to_string(),
                    log: self.log.clone(),
                });
            }
            let ready = client.get(format!("{}/readyz", self.url)).send().await;
            if ready.is_ok_and(|r| r.status().is_success()) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(ChaosError::NotReady {
            id: 1,
            waited_s: READY_WITHIN.as_secs(),
            log: self.log.clone(),
        })
    }
}

impl Figures {
    fn of(sample: Sample) -> Figures {
        Figures {
            per_s: sample.per_s(),
            ok: sample.ok(),
            errors: sample.errors,
            latency: Latency::of(sample.latencies_us),
        }
    }
}

/// `clients` closed-loop clients sending `operation` to `url` for `length`.
async fn load(
    ca: &reqwest::Certificate,
    url: &str,
    operation: Operation,
    clients: usize,
    length: Duration,
) -> Result<Sample, ChaosError> {
    let connections = (0..clients)
        .map(|_| bench_client(Some(ca)))
        .collect::<Result<Vec<_>, _>>()?;
    let url = Arc::<str>::from(url);
    Ok(closed_loop(connections, length, move |http, _, _| {
        answered(match operation {
            Operation::Ask => http
                .get(format!("{url}/api/dispatch"))
                .query(&[("ask", ASK)]),
            Operation::Invoke => http
                .post(format!("{url}/api/dispatch"))
                .json(&json!({"key": "NOW"})),
        })
    })
    .await)
}

/// Runs the `tls` benchmark: starts both nodes, measures, prints the table and writes
/// `tls.json` under `options.out`.
pub async fn tls(options: &TlsOptions) -> Result<TlsReport, ChaosError> {
    std::fs::create_dir_all(&options.out)
        .map_err(|e| ChaosError::io(format!("create {}", options.out.display()), e))?;
    let machine = machine();
    let files = test_certificates(&options.out.join("certificates"), 0)?;
    let ca_pem = std::fs::read(&files.ca)
        .map_err(|e| ChaosError::io(format!("read {}", files.ca.display()), e))?;
    let ca = reqwest::Certificate::from_pem(&ca_pem).map_err(|e| ChaosError::Setup {
        what: "the run's CA certificate".into(),
        detail: e.to_string(),
    })?;
    let control = bench_client(Some(&ca))?;
    let plain = Server::start(&options.node_bin, &options.out.join("http"), None, &control).await?;
    let https = Server::start(
        &options.node_bin,
        &options.out.join("https"),
        Some((&files.cert, &files.key)),
        &control,
    )
    .await?;
    let servers = [&plain, &https];

    let operations = [Operation::Ask, Operation::Invoke];
    // Warm both up once (the first receipts, the resolver's caches).
    for server in servers {
        for operation in operations {
            let warm = options.cell.min(Duration::from_secs(1));
            load(&ca, &server.url, operation, 2, warm).await?;
        }
    }
    // samples[operation][clients][scheme]
    let mut samples: Vec<Vec<[Sample; 2]>> = operations
        .iter()
        .map(|_| options.clients.iter().map(|_| Default::default()).collect())
        .collect();
    for round in 0..options.rounds {
        for (o, &operation) in operations.iter().enumerate() {
            for (c, &clients) in options.clients.iter().enumerate() {
                for (s, server) in servers.iter().enumerate() {
                    let sample = load(&ca, &server.url, operation, clients, options.cell).await?;
                    samples[o][c][s].add(sample);
                }
                eprintln!(
                    "round {}/{}: {} at {clients} clients done",
                    round + 1,
                    options.rounds,
                    operation.name()
                );
            }
        }
    }
    drop((plain, https));

    let mut rows = Vec::new();
    for (o, &operation) in operations.iter().enumerate() {
        for (c, &clients) in options.clients.iter().enumerate() {
            let [plain, tls] = std::mem::take(&mut samples[o][c]);
            let (http, https) = (Figures::of(plain), Figures::of(tls));
            let ratio = |a: f64, b: f64| a / b.max(1e-9);
            rows.push(TlsRow {
                operation,
                clients,
                throughput_ratio: ratio(https.per_s, http.per_s),
                p50_ratio: ratio(https.latency.p50_ms, http.latency.p50_ms),
                p99_ratio: ratio(https.latency.p99_ms, http.latency.p99_ms),
                http,
                https,
            });
        }
    }
    let report = TlsReport {
        machine,
        settings: json!({
            "clients": options.clients,
            "seconds_per_measurement": options.cell.as_secs_f64(),
            "rounds": options.rounds,
            "ask": ASK,
            "invoke": "POST /api/dispatch {\"key\": \"NOW\"} (a builtin row; commits a receipt)",
            "client": "HTTP/1.1, one keep-alive connection per client, closed loop",
            "https": "rustls, a certificate for 127.0.0.1 made for the run",
            "node_bin": options.node_bin.display().to_string(),
        }),
        rows,
    };
    crate::bench::publish(&options.out.join("tls.json"), &report, &table(&report))?;
    Ok(report)
}

/// The report as a Markdown table, machine details on top.
pub fn table(report: &TlsReport) -> String {
    let mut out = crate::bench::machine_line("tls", &report.machine);
    out.push_str(&format!(
        "one node each, HTTP/1.1 keep-alive, {} s x {} interleaved rounds per figure\n\n",
        report.settings["seconds_per_measurement"], report.settings["rounds"],
    ));
    out.push_str(
        "| operation | clients | HTTP req/s | p50 ms | p99 ms | HTTPS req/s | p50 ms | p99 ms \
         | errors | × req/s | × p50 | × p99 |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for row in &report.rows {
        out.push_str(&format!(
            "| {} | {} | {:.0} | {:.2} | {:.2} | {:.0} | {:.2} | {:.2} | {} | {:.2} | {:.2} | {:.2} |\n",
            row.operation.name(),
            row.clients,
            row.http.per_s,
            row.http.latency.p50_ms,
            row.http.latency.p99_ms,
            row.https.per_s,
            row.https.latency.p50_ms,
            row.https.latency.p99_ms,
            row.http.errors + row.https.errors,
            row.throughput_ratio,
            row.p50_ratio,
            row.p99_ratio,
        ));
    }
    out
}
