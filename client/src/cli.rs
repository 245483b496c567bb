//! The `rowcall` command line: one clap subcommand per operation, each a small function over
//! the gRPC [`Client`] (plus `import-mcp` over HTTP, which has no gRPC call). Output is text
//! for people, or JSON with `--json`; see [`crate::render`].
//!
//! Exit codes: 0 done, 1 failed (including a capability that ran and failed, and a receipt
//! that did not verify), 2 usage, 3 not found, 4 no node could answer, 5 not yet in a
//! co-signed checkpoint (`verify`: try again in a second).

use std::fmt::Write as _;
use std::io::{Read as _, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{CommandFactory as _, Parser, Subcommand};
use futures_util::StreamExt as _;
use rowcall_proto::tlog::VerifierKey;
use serde_json::{Map, Value};

use crate::client::Client;
use crate::error::Error;
use crate::node::{ImportReport, NodeClient};
use crate::quality::{parse_queries, Quality, Scorecard, RECALL_DEPTH};
use crate::render::{self, Style};
use crate::rows::{row_input, row_json};
use crate::verify::{self, Claim, Evidence, Receipt, VerifyError, Witness};

/// Misses printed by `eval` without `--misses`.
const MISSES_SHOWN: usize = 20;

/// Exit code: the thing asked for does not exist.
pub const EXIT_NOT_FOUND: u8 = 3;
/// Exit code: no node could answer.
pub const EXIT_UNAVAILABLE: u8 = 4;
/// Exit code: the receipt is not in a co-signed checkpoint yet (`verify`); it will be soon.
pub const EXIT_NOT_YET: u8 = 5;

/// rowcall: find, run and manage the capabilities of a rowcall cluster.
///
/// Exit codes: 0 done, 1 failed, 2 usage, 3 not found, 4 no node could answer, 5 not yet
/// in a co-signed checkpoint.
#[derive(Debug, Parser)]
#[command(
    name = "rowcall",
    version,
    about,
    long_about = None,
    after_help = "Exit codes: 0 done, 1 failed, 2 usage, 3 not found, 4 no node could answer, \
                  5 not yet in a co-signed checkpoint (verify: try again in a second)."
)]
pub struct Cli {
    /// gRPC addresses of cluster members, comma-separated (any members: the client finds
    /// the rest of the way).
    #[arg(
        long,
        global = true,
        env = "ROWCALL_NODES",
        value_delimiter = ',',
        default_value = "127.0.0.1:9090"
    )]
    pub nodes: Vec<String>,
    /// Reach the nodes over TLS, trusting this CA (PEM; with peer TLS on, the nodes'
    /// `--peer-ca` file). Addresses without a scheme then mean https, and so does the HTTP
    /// address `backup` and `import-mcp` find (trusting the same CA).
    #[arg(long, global = true, env = "ROWCALL_CA", value_name = "PEM_FILE")]
    pub ca: Option<PathBuf>,
    /// The name the nodes' certificates must carry, when not the host of each address.
    #[arg(long, global = true, env = "ROWCALL_TLS_DOMAIN", requires = "ca")]
    pub tls_domain: Option<String>,
    /// The credential sent with every call: the admin key (directory writes, receipts,
    /// membership, the cluster's full status), or an invoke key. Given on the command line
    /// it shows in the process list (`ps`) and shell history of everyone on the machine:
    /// prefer the environment, `ROWCALL_ADMIN_KEY`, e.g. read from a file kept mode 0600
    /// (`ROWCALL_ADMIN_KEY=$(cat ~/.rowcall/admin.key) rowcall …`).
    #[arg(long, global = true, env = "ROWCALL_ADMIN_KEY", hide_env_values = true)]
    pub admin_key: Option<String>,
    /// Print JSON (the HTTP protocol's shapes) instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// How long one command may take, retries included.
    #[arg(long, global = true, default_value = "15s", value_parser = humantime_duration)]
    pub timeout: Duration,
    #[command(subcommand)]
    pub command: Command,
}

fn humantime_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map_or((text, "s"), |at| text.split_at(at));
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 5s or 500ms"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!("{text:?} is not a duration like 5s or 500ms")),
    }
}

/// The operations.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Ranked candidates for a plain-language request.
    Ask {
        /// The request, e.g. `rowcall ask what time is it`.
        #[arg(required = true, num_args = 1..)]
        words: Vec<String>,
        /// How many candidates at most (the node caps it at 50).
        #[arg(long, default_value_t = 5)]
        limit: u32,
    },
    /// A row's contract: what it does and how to call it.
    Contract {
        /// The row's key.
        key: String,
        /// Markdown, written for models, instead of JSON.
        #[arg(long)]
        markdown: bool,
    },
    /// Run a row. Arguments come from `--arg name=value` (a JSON value, else a string) or
    /// `--args '{"name": …}'`.
    Invoke {
        /// The row's key.
        key: String,
        /// One argument; repeat for more.
        #[arg(long = "arg", value_name = "NAME=VALUE")]
        arg: Vec<String>,
        /// All arguments as a JSON object (merged under `--arg`).
        #[arg(long, value_name = "JSON")]
        args: Option<String>,
        /// A raw body, for rows that take one.
        #[arg(long)]
        body: Option<String>,
        /// A share token standing in for an invoke key.
        #[arg(long)]
        share: Option<String>,
    },
    /// Check a receipt (no credential needed).
    Confirm {
        /// The receipt id, `inv_…`.
        id: String,
    },
    /// Prove a receipt is in the cluster's transparency log without trusting the node that
    /// answers: its leaf, its inclusion path, a checkpoint co-signed by a majority of the
    /// voter keys you pinned, and that the log only grew since the last checkpoint seen
    /// (remembered in the state file). No credential needed. Exit code 5: not in a
    /// co-signed checkpoint yet, try again in a second; 1: a check failed.
    Verify(VerifyArgs),
    /// One row.
    Get {
        /// The row's key.
        key: String,
    },
    /// List rows in key order.
    Ls {
        /// Only rows of this category.
        #[arg(long)]
        category: Option<String>,
        /// Rows per page.
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Start after this cursor (a page's `next_cursor`).
        #[arg(long, default_value = "")]
        cursor: String,
        /// Every page, not just the first.
        #[arg(long)]
        all: bool,
    },
    /// Insert or replace rows from a JSON file (or stdin): one object, or an array written
    /// atomically (admin key).
    Put {
        /// The file; `-` or nothing reads stdin.
        file: Option<PathBuf>,
        /// Write many rows in writes of at most this many rows, each atomic on its own
        /// (one write is at most the cluster's `raft.max_entry_bytes`, 512 KiB by default).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        batch: Option<u64>,
    },
    /// Delete a row; its receipts stay (admin key).
    Rm {
        /// The row's key.
        key: String,
        /// Only if the stored version is this.
        #[arg(long)]
        if_version: Option<u64>,
    },
    /// The four counts of the directory.
    Counts,
    /// Follow the directory's changes (until interrupted, or `--count` events).
    Watch {
        /// Replay the changes after this index first.
        #[arg(long)]
        since: Option<u64>,
        /// Stop after this many events.
        #[arg(long)]
        count: Option<usize>,
    },
    /// A row's receipts (a key), or one receipt (an `inv_…` id) (admin key).
    Receipts {
        /// A row key, or a receipt id.
        key_or_id: String,
        /// Most receipts of a row.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// The cluster: status and membership.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Save a consistent backup of the cluster's state (admin key): rows, receipts, share
    /// state, as applied at one index. `rowcall-node --restore FILE --bootstrap` founds a
    /// new cluster from it.
    Backup {
        /// Where to save it (written beside it first, then renamed: never half a backup).
        file: PathBuf,
        /// The node's HTTP address (default: the HTTP address the cluster lists for the node
        /// that answers, `https://` with `--ca`).
        #[arg(long)]
        http: Option<String>,
    },
    /// Resolver quality on a query set: top-1, recall@5 and MRR, and the misses.
    /// On a node with a resolver model, the lexical, dense and fused rankings are scored
    /// side by side; the misses listed are the fused ranking's (the one agents get).
    Eval {
        /// JSON lines of `{"q": "...", "gold": ["KEY", ...]}`.
        queries: PathBuf,
        /// Candidates asked for per query; MRR is computed to this depth.
        #[arg(long, default_value_t = 10)]
        limit: u32,
        /// Print every miss (otherwise the first 20).
        #[arg(long)]
        misses: bool,
    },
    /// Wrap an MCP server: one row per tool of its tools/list (run again to sync; tools that
    /// are gone are disabled). The node does the import, so the URL is as the node sees it.
    ImportMcp {
        /// The server's Streamable HTTP endpoint, e.g. `https://host/mcp`.
        url: String,
        /// Put before every new key (`gh` → `GH_SEARCH_ISSUES`).
        #[arg(long)]
        prefix: Option<String>,
        /// Category of the rows (default: the server's name).
        #[arg(long)]
        category: Option<String>,
        /// The node's HTTP address (default: the HTTP address the cluster lists for the node
        /// that answers).
        #[arg(long)]
        http: Option<String>,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff).
    Man,
}

/// What `verify` proves, and against which keys and state.
#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("what").required(true).multiple(true).args(["id", "receipt"]))]
pub struct VerifyArgs {
    /// The receipt id, `inv_…` (proves the log holds a receipt of this id).
    pub id: Option<String>,
    /// The receipt's JSON (as `rowcall receipts ID --json` prints it; `-` for stdin):
    /// proves the log holds exactly this receipt.
    #[arg(long, value_name = "FILE")]
    pub receipt: Option<PathBuf>,
    /// A voter's signed-note verifier key (`rowcall/<cluster>/node<ID>+…`), from the
    /// operator; repeat for each voter. Replaces the keys pinned in the state.
    #[arg(long = "key", value_name = "VKEY")]
    pub key: Vec<String>,
    /// A file of voter keys, one per line (`#` comments allowed), as `--key`.
    #[arg(long, value_name = "FILE")]
    pub keys: Option<PathBuf>,
    /// With no key pinned or given, take the voters' keys the node lists and pin them
    /// (trust on first use: later runs check against them, whatever a node says).
    #[arg(long)]
    pub trust_node_keys: bool,
    /// The state file: pinned keys and the last checkpoint seen (default
    /// `$XDG_STATE_HOME/rowcall/verify.json`, else `~/.local/state/rowcall/verify.json`).
    #[arg(long, env = "ROWCALL_VERIFY_STATE", value_name = "FILE")]
    pub state: Option<PathBuf>,
}

/// Cluster subcommands.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// This node's view: role, leader, term, indexes, members.
    Status,
    /// Add a node as a learner (a read replica).
    AddLearner {
        /// Its id.
        id: u64,
        /// Its gRPC address, host:port.
        grpc_addr: String,
        /// Its HTTP address, host:port.
        http_addr: String,
    },
    /// Make a learner a voter.
    Promote {
        /// Its id.
        id: u64,
    },
    /// Take a member out.
    Remove {
        /// Its id.
        id: u64,
    },
    /// Move leadership to a voter (before maintenance of the leader's host), or to the voter
    /// furthest along when none is named; writes pause for the handover.
    MoveLeader {
        /// The voter to lead.
        id: Option<u64>,
    },
    /// Build a snapshot now and purge the log behind it.
    Snapshot,
    /// Mint a join token: start a new node with it (ROWCALL_JOIN_TOKEN or
    /// --join-token-file) and --join to give it the cluster's peer credential. Anyone who
    /// holds it can add a node until it expires: hand it over as a secret.
    JoinToken {
        /// How long it stays valid, in seconds (60 to 604800).
        #[arg(long, default_value_t = 3600)]
        ttl: u64,
    },
}

/// Runs the command line of this process: parses it, runs the command, prints, and says
/// the exit code.
pub async fn main() -> ExitCode {
    let style = Style::detect();
    let code = execute(
        std::env::args_os(),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
        style,
    )
    .await;
    ExitCode::from(code)
}

/// Runs one command line (`args` starts with the program's name), writing the answer to
/// `out` and errors to `err`; returns the exit code (0 done, 1 failed, 2 usage, 3 not found,
/// 4 unavailable).
pub async fn execute<I, T>(args: I, out: &mut dyn Write, err: &mut dyn Write, style: Style) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are successes written to the output.
            let text = e.render().to_string();
            if e.use_stderr() {
                let _ = write!(err, "{text}");
            } else {
                let _ = write!(out, "{text}");
            }
            return u8::try_from(e.exit_code()).unwrap_or(2);
        }
    };
    let mut printer = Out {
        w: out,
        json: cli.json,
        style,
    };
    match run(cli, &mut printer).await {
        Ok(code) => code,
        Err(error) => {
            let _ = writeln!(err, "rowcall: {error:#}");
            exit_code(&error)
        }
    }
}

/// The exit code of a failure: 3 not found, 4 unavailable, 5 not yet in a checkpoint, else 1.
pub fn exit_code(error: &anyhow::Error) -> u8 {
    if let Some(VerifyError::NotYetCovered { .. }) = error.downcast_ref::<VerifyError>() {
        return EXIT_NOT_YET;
    }
    match error.downcast_ref::<Error>() {
        Some(e) if e.is_not_found() => EXIT_NOT_FOUND,
        Some(e) if e.is_unavailable() => EXIT_UNAVAILABLE,
        _ => 1,
    }
}

/// Where answers go, and in which form.
pub struct Out<'a> {
    w: &'a mut dyn Write,
    json: bool,
    style: Style,
}

impl Out<'_> {
    /// Prints `value` as JSON (pretty) or `text`. A closed pipe (`| head`) is not an error
    /// worth a message.
    fn emit(&mut self, value: impl FnOnce() -> Value, text: impl FnOnce() -> String) {
        let _ = if self.json {
            writeln!(
                self.w,
                "{}",
                serde_json::to_string_pretty(&value()).unwrap_or_default()
            )
        } else {
            write!(self.w, "{}", text())
        };
    }

    /// Prints one line of a stream now (a pipe sees it at once).
    fn line(&mut self, value: impl FnOnce() -> Value, text: impl FnOnce() -> String) {
        let line = if self.json {
            value().to_string() + "\n"
        } else {
            text()
        };
        let _ = self.w.write_all(line.as_bytes());
        let _ = self.w.flush();
    }
}

/// Runs one command; the exit code when it did not fail outright (1 for a capability that
/// ran and failed).
async fn run(cli: Cli, out: &mut Out<'_>) -> anyhow::Result<u8> {
    let style = out.style;
    let command = match cli.command {
        Command::Completions { shell } => {
            let mut command = Cli::command();
            clap_complete::generate(shell, &mut command, "rowcall", &mut out.w);
            return Ok(0);
        }
        Command::Man => {
            clap_mangen::Man::new(Cli::command()).render(&mut out.w)?;
            return Ok(0);
        }
        command => command,
    };
    let mut builder = Client::builder().nodes(&cli.nodes).deadline(cli.timeout);
    if let Some(key) = &cli.admin_key {
        builder = builder.credential(key);
    }
    let ca = cli
        .ca
        .as_ref()
        .map(|path| std::fs::read(path).with_context(|| format!("reading --ca {}", path.display())))
        .transpose()?;
    if let Some(pem) = &ca {
        builder = builder.tls_ca(pem.clone());
    }
    if let Some(domain) = &cli.tls_domain {
        builder = builder.tls_domain(domain);
    }
    let client = builder.build()?;
    match command {
        Command::Ask { words, limit } => {
            let answer = client.ask(&words.join(" "), limit).await?;
            out.emit(
                || render::ask_json(&answer),
                || render::ask_text(style, &answer),
            );
        }
        Command::Contract { key, markdown } => {
            if markdown {
                let text = client.contract_markdown(&key).await?;
                out.emit(|| Value::String(text.clone()), || text.clone());
            } else {
                let contract = client.contract(&key).await?;
                let text = serde_json::to_string_pretty(&contract)? + "\n";
                out.emit(|| contract.clone(), || text);
            }
        }
        Command::Invoke {
            key,
            arg,
            args,
            body,
            share,
        } => {
            let args = invoke_args(&arg, args.as_deref())?;
            let request = crate::proto::InvokeRequest {
                key,
                args: args.map(rowcall_proto::json::to_struct),
                body,
                share,
                repeatable: false,
            };
            let ran = client.invoke_with(request).await?;
            out.emit(
                || render::invocation_json(&ran),
                || render::invocation_text(style, &ran),
            );
            if !ran.ok {
                return Ok(1);
            }
        }
        Command::Confirm { id } => {
            let confirmed = client.confirm(&id).await?;
            out.emit(
                || render::confirm_json(&confirmed),
                || render::confirm_text(style, &confirmed),
            );
        }
        Command::Verify(args) => verify_receipt(&client, out, args).await?,
        Command::Get { key } => {
            let row = client.get(&key).await?;
            out.emit(|| row_json(&row), || render::row_text(style, &row));
        }
        Command::Ls {
            category,
            limit,
            cursor,
            all,
        } => ls(&client, out, category.as_deref(), limit, cursor, all).await?,
        Command::Put { file, batch } => {
            let rows = read_rows(file.as_ref())?;
            let written = match (rows, batch) {
                (Rows::One(row), _) => client.put(*row).await?,
                (Rows::Many(rows), None) => client.put_many(rows).await?,
                (Rows::Many(rows), Some(batch)) => {
                    // Each write is atomic; a failure stops at the first write it hits, and
                    // the writes before it stay.
                    let mut written = crate::proto::PutRowsResponse::default();
                    for chunk in rows.chunks(usize::try_from(batch).unwrap_or(usize::MAX)) {
                        let part = client.put_many(chunk.to_vec()).await?;
                        written.rows.extend(part.rows);
                        written.index = written.index.max(part.index);
                    }
                    written
                }
            };
            out.emit(
                || render::put_json(&written),
                || render::put_text(style, &written),
            );
        }
        Command::Rm { key, if_version } => {
            let deleted = client.delete(&key, if_version).await?;
            out.emit(
                || serde_json::json!({"ok": true, "deleted": deleted.deleted, "index": deleted.index}),
                || format!("deleted {key} (index {})\n", deleted.index),
            );
        }
        Command::Counts => {
            let counts = client.counts().await?;
            out.emit(
                || render::counts_json(&counts),
                || render::counts_text(style, &counts),
            );
        }
        Command::Watch { since, count } => {
            let mut events = client.watch(since);
            let mut seen = 0;
            while count.is_none_or(|n| seen < n) {
                let Some(event) = events.next().await else {
                    break;
                };
                let event = event?;
                out.line(
                    || render::event_json(&event),
                    || render::event_text(style, &event),
                );
                seen += 1;
            }
        }
        Command::Receipts { key_or_id, limit } => {
            if looks_like_receipt_id(&key_or_id) {
                let receipt = client.receipt(&key_or_id).await?;
                out.emit(
                    || render::receipt_json(&receipt),
                    || render::receipts_text(style, std::slice::from_ref(&receipt)),
                );
            } else {
                let list = client.receipts(&key_or_id, limit).await?;
                out.emit(
                    || serde_json::json!({"key": list.key, "count": list.receipts.len(),
                        "receipts": list.receipts.iter().map(render::receipt_json).collect::<Vec<_>>()}),
                    || render::receipts_text(style, &list.receipts),
                );
            }
        }
        Command::Cluster(command) => cluster(&client, out, command).await?,
        Command::Eval {
            queries,
            limit,
            misses,
        } => eval(&client, out, &cli.nodes.join(","), &queries, limit, misses).await?,
        Command::ImportMcp {
            url,
            prefix,
            category,
            http,
        } => {
            let http = match http {
                Some(http) => http,
                None => http_address(&client, ca.is_some()).await?,
            };
            let node = NodeClient::trusting(&http, ca.as_deref())?;
            let admin_key = cli.admin_key.as_deref().unwrap_or_default();
            let report = node
                .import_mcp(&url, prefix.as_deref(), category.as_deref(), admin_key)
                .await?;
            out.emit(|| report.raw.clone(), || import_summary(&url, &report));
        }
        Command::Backup { file, http } => {
            let http = match http {
                Some(http) => http,
                None => http_address(&client, ca.is_some()).await?,
            };
            let admin_key = cli.admin_key.as_deref().unwrap_or_default();
            let node = NodeClient::trusting(&http, ca.as_deref())?;
            let saved = node.backup(admin_key, &file).await?;
            out.emit(
                || {
                    serde_json::json!({"ok": true, "file": file, "index": saved.index,
                                       "bytes": saved.bytes, "sha256": saved.sha256})
                },
                || {
                    format!(
                        "backup of index {} saved to {} ({} bytes, sha256 {})\n",
                        saved.index,
                        file.display(),
                        saved.bytes,
                        saved.sha256
                    )
                },
            );
        }
        Command::Completions { .. } | Command::Man => {}
    }
    Ok(0)
}

/// Whether `text` has the shape of a receipt id (`inv_` and 10 base36 characters).
fn looks_like_receipt_id(text: &str) -> bool {
    text.strip_prefix("inv_")
        .is_some_and(|rest| rest.len() == 10 && rest.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// Arguments of `invoke`: `--args` JSON, then each `--arg name=value` over it (the value as
/// JSON when it parses, else as a string).
fn invoke_args(
    pairs: &[String],
    object: Option<&str>,
) -> anyhow::Result<Option<Map<String, Value>>> {
    let mut args = match object {
        None => None,
        Some(text) => match serde_json::from_str::<Value>(text).context("--args is not JSON")? {
            Value::Object(map) => Some(map),
            other => anyhow::bail!("--args must be a JSON object, not {other}"),
        },
    };
    for pair in pairs {
        let (name, value) = pair
            .split_once('=')
            .with_context(|| format!("--arg {pair:?} is not NAME=VALUE"))?;
        let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_owned()));
        args.get_or_insert_with(Map::new)
            .insert(name.to_owned(), value);
    }
    Ok(args)
}

/// One row or many.
enum Rows {
    One(Box<crate::proto::RowInput>),
    Many(Vec<crate::proto::RowInput>),
}

/// Rows from a JSON file or stdin: an object is one row, an array an atomic bulk write.
fn read_rows(file: Option<&PathBuf>) -> anyhow::Result<Rows> {
    let text = read_input(file.map_or(Path::new("-"), PathBuf::as_path))?;
    match serde_json::from_str::<Value>(&text).context("the rows are not JSON")? {
        Value::Array(items) => Ok(Rows::Many(
            items.into_iter().map(row_input).collect::<Result<_, _>>()?,
        )),
        row => Ok(Rows::One(Box::new(row_input(row)?))),
    }
}

async fn ls(
    client: &Client,
    out: &mut Out<'_>,
    category: Option<&str>,
    limit: u32,
    mut cursor: String,
    all: bool,
) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    let mut last = loop {
        let page = client.list(category, &cursor, limit).await?;
        let done = !all || page.next_cursor.is_empty();
        cursor = page.next_cursor.clone();
        if done {
            break page;
        }
        rows.extend(page.rows);
    };
    rows.append(&mut last.rows);
    last.rows = rows;
    let style = out.style;
    out.emit(
        || render::page_json(&last),
        || {
            let mut text = render::rows_text(style, &last.rows);
            if !last.next_cursor.is_empty() {
                let _ = writeln!(text, "more: --cursor {} (or --all)", last.next_cursor);
            }
            text
        },
    );
    Ok(())
}

async fn cluster(
    client: &Client,
    out: &mut Out<'_>,
    command: ClusterCommand,
) -> anyhow::Result<()> {
    let style = out.style;
    let (done, id) = match command {
        ClusterCommand::Status => {
            let status = client.status().await?;
            out.emit(
                || render::status_json(&status),
                || render::status_text(style, &status),
            );
            return Ok(());
        }
        ClusterCommand::AddLearner {
            id,
            grpc_addr,
            http_addr,
        } => {
            client.add_learner(id, &grpc_addr, &http_addr).await?;
            ("added as a learner", Some(id))
        }
        ClusterCommand::Promote { id } => {
            client.promote(id).await?;
            ("promoted to voter", Some(id))
        }
        ClusterCommand::Remove { id } => {
            client.remove(id).await?;
            ("removed", Some(id))
        }
        ClusterCommand::MoveLeader { id } => {
            let leader = client.move_leader(id).await?;
            ("leads", Some(leader))
        }
        ClusterCommand::Snapshot => {
            client.snapshot().await?;
            ("snapshot started", None)
        }
        ClusterCommand::JoinToken { ttl } => {
            let minted = client.join_token(ttl).await?;
            out.emit(
                || serde_json::json!({"ok": true, "token": minted.token, "expires_at": minted.expires_at}),
                // The token alone on stdout, so `$(rowcall cluster join-token)` captures it.
                || format!("{}\n", minted.token),
            );
            return Ok(());
        }
    };
    out.emit(
        || serde_json::json!({"ok": true, "id": id, "done": done}),
        || match id {
            Some(id) => format!("node {id} {done}\n"),
            None => format!("{done}\n"),
        },
    );
    Ok(())
}

/// `verify`: fetches the proof, its checkpoint and (when the state remembers another size)
/// a consistency proof, has [`verify::verify`] judge them, then remembers the checkpoint.
/// Prints one line saying what was proved.
async fn verify_receipt(
    client: &Client,
    out: &mut Out<'_>,
    args: VerifyArgs,
) -> anyhow::Result<()> {
    let receipt = match &args.receipt {
        Some(path) => Some(Receipt::from_json(&read_input(path)?)?),
        None => None,
    };
    let claim = match (args.id, receipt) {
        (Some(id), Some(r)) if id != r.id => {
            anyhow::bail!("the receipt given is {}, not {id}", r.id)
        }
        (_, Some(r)) => Claim::Receipt(r),
        (Some(id), None) => Claim::Id(id),
        (None, None) => anyhow::bail!("give a receipt id or --receipt FILE"),
    };
    let id = claim.id().to_owned();
    let path = args
        .state
        .or_else(verify::default_state_path)
        .context("no home directory for the state file: pass --state FILE")?;
    let witness = Witness::load(&path)?;
    let mut given = Vec::new();
    for text in &args.key {
        given.push(VerifierKey::parse(text).map_err(|reason| VerifyError::BadKey { reason })?);
    }
    if let Some(file) = &args.keys {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("reading --keys {}", file.display()))?;
        given.extend(verify::parse_keys(&text).with_context(|| format!("in {}", file.display()))?);
    }
    // Refused while no co-signed checkpoint covers the receipt (or before the first
    // checkpoint): the leader co-signs the tree about every second.
    let not_yet = |e: Error| match e {
        Error::Rejected(r) if r.status == tonic::Code::FailedPrecondition => {
            anyhow::Error::new(VerifyError::NotYetCovered { id: id.clone() })
        }
        e => anyhow::Error::new(e),
    };
    let mut proof = client.prove(&id, 0).await.map_err(not_yet)?;
    let checkpoint = match proof.checkpoint.take() {
        Some(checkpoint) => checkpoint,
        // Not sent with the proof: the latest co-signed one, and the proof against it.
        None => {
            let checkpoint = client.checkpoint().await.map_err(not_yet)?;
            if checkpoint.size != proof.tree_size {
                proof = client.prove(&id, checkpoint.size).await.map_err(not_yet)?;
            }
            checkpoint
        }
    };
    let keys = verify::choose_keys(given, &witness, args.trust_node_keys.then_some(&checkpoint))?;
    let consistency = match witness.consistency_needed(checkpoint.size) {
        Some((from, to)) => Some(client.consistency(from, to).await.with_context(|| {
            format!("fetching the consistency proof from tree size {from} to {to}")
        })?),
        None => None,
    };
    let evidence = Evidence {
        checkpoint,
        proof,
        consistency,
    };
    let verdict = verify::verify(&claim, &evidence, &witness, &keys)?;
    witness.advance(&verdict, &keys).save(&path, &witness)?;
    out.emit(|| verdict.to_json(), || format!("{verdict}\n"));
    Ok(())
}

/// A file's text, or stdin's for `-`.
fn read_input(path: &Path) -> anyhow::Result<String> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading stdin")?;
        return Ok(text);
    }
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// The answering node's HTTP address as the cluster lists it: `https://` when the nodes are
/// reached with a CA (a secured cluster serves HTTPS too), else `http://`.
async fn http_address(client: &Client, tls: bool) -> anyhow::Result<String> {
    let status = client.status().await?;
    let me = status
        .members
        .iter()
        .find(|m| m.id == status.node_id)
        .context("the answering node is not in its own member list; pass --http")?;
    if me.http_addr.is_empty() {
        anyhow::bail!("the nodes tell member addresses to the admin key only: pass --http");
    }
    let scheme = if tls { "https" } else { "http" };
    Ok(format!("{scheme}://{}", me.http_addr))
}

async fn eval(
    client: &Client,
    out: &mut Out<'_>,
    nodes: &str,
    path: &PathBuf,
    limit: u32,
    all_misses: bool,
) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let queries = parse_queries(&text).with_context(|| format!("in {}", path.display()))?;
    anyhow::ensure!(!queries.is_empty(), "{} has no queries", path.display());
    if (limit as usize) < RECALL_DEPTH {
        eprintln!("note: --limit {limit} is below {RECALL_DEPTH}, so recall@{RECALL_DEPTH} only sees {limit} candidates");
    }
    // A node with a model ranks three ways; one without refuses `dense` on the first ask.
    let modes: &[&str] = match client.ask_ranked(&queries[0].q, limit, "dense").await {
        Ok(_) => &["lexical", "dense", "fused"],
        Err(Error::Rejected(_)) => &["lexical"],
        Err(e) => return Err(e).with_context(|| format!("asking {:?}", queries[0].q)),
    };
    let mut cards: Vec<Scorecard> = modes
        .iter()
        .map(|_| Scorecard::new(limit as usize))
        .collect();
    for query in &queries {
        for (mode, card) in modes.iter().zip(&mut cards) {
            let answer = client
                .ask_ranked(&query.q, limit, mode)
                .await
                .with_context(|| format!("asking {:?} ({mode})", query.q))?;
            let ranked: Vec<String> = answer.candidates.into_iter().map(|c| c.key).collect();
            card.add(query, &ranked);
        }
    }
    if modes.len() > 1 {
        let _ = out.w.write_all(side_by_side(modes, &cards).as_bytes());
    }
    // The misses are those of the ranking agents get (the last column).
    let card = cards
        .pop()
        .unwrap_or_else(|| Scorecard::new(limit as usize));
    let text = report(&card, nodes, all_misses.then_some(usize::MAX));
    let _ = out.w.write_all(text.as_bytes());
    Ok(())
}

/// What `import-mcp` prints: counts, then one line per added, changed and removed key.
pub fn import_summary(url: &str, report: &ImportReport) -> String {
    let mut out = String::new();
    let server = report.server.as_deref().unwrap_or("the server");
    let _ = writeln!(out, "{} tools from {server} at {url}", report.tools);
    let _ = writeln!(
        out,
        "{} added, {} changed, {} removed, {} unchanged{}",
        report.added.len(),
        report.changed.len(),
        report.removed.len(),
        report.unchanged,
        report.version.map_or_else(
            || " (nothing written)".to_owned(),
            |v| format!(" (index {v})")
        )
    );
    for (label, keys) in [
        ("added", &report.added),
        ("changed", &report.changed),
        ("removed", &report.removed),
    ] {
        for key in keys {
            let note = if label == "removed" {
                "  (disabled)"
            } else {
                ""
            };
            let _ = writeln!(out, "  {label:<8} {key}{note}");
        }
    }
    for warning in &report.warnings {
        let _ = writeln!(out, "  warning  {warning}");
    }
    out
}

/// The averages of each ranking in one table (`eval` on a node with a model).
pub fn side_by_side(modes: &[&str], cards: &[Scorecard]) -> String {
    let mut out = String::new();
    let _ = write!(out, "{:<10}", "");
    for mode in modes {
        let _ = write!(out, "{mode:>9}");
    }
    out.push('\n');
    let summaries: Vec<Quality> = cards.iter().map(Scorecard::summary).collect();
    let lines = [
        (
            "top-1",
            summaries.iter().map(|q| q.top1).collect::<Vec<_>>(),
        ),
        (
            "recall@5",
            summaries.iter().map(|q| q.recall_at_5).collect(),
        ),
        ("MRR", summaries.iter().map(|q| q.mrr).collect()),
    ];
    for (label, values) in lines {
        let _ = write!(out, "{label:<10}");
        for value in values {
            let _ = write!(out, "{value:>9.3}");
        }
        out.push('\n');
    }
    out.push('\n');
    out
}

/// The text `eval` prints: the averages, then up to `shown` misses (default 20).
pub fn report(card: &Scorecard, node: &str, shown: Option<usize>) -> String {
    let Quality {
        queries,
        top1,
        recall_at_5,
        mrr,
        depth,
    } = card.summary();
    let mut out = String::new();
    let _ = writeln!(out, "node      {node}");
    let _ = writeln!(out, "queries   {queries}");
    let _ = writeln!(out, "top-1     {top1:.3}");
    let _ = writeln!(out, "recall@5  {recall_at_5:.3}");
    let _ = writeln!(out, "MRR@{depth:<4}  {mrr:.3}");
    let misses = card.misses();
    if misses.is_empty() {
        return out;
    }
    let shown = shown.unwrap_or(MISSES_SHOWN).min(misses.len());
    let _ = writeln!(out, "\nmisses ({shown} of {} shown):", misses.len());
    for miss in &misses[..shown] {
        let gold_at = match miss.gold_rank {
            Some(rank) => format!("at rank {rank}"),
            None => format!("not in the top {depth}"),
        };
        let _ = writeln!(out, "- {}", miss.q);
        let _ = writeln!(
            out,
            "    want {} ({gold_at}); first: {}",
            miss.gold.join(", "),
            miss.first.as_deref().unwrap_or("nothing")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quality::GoldQuery;

    #[test]
    fn report_lists_averages_and_misses() {
        let mut card = Scorecard::new(10);
        let query = |q: &str| GoldQuery {
            q: q.into(),
            gold: vec!["A".into()],
        };
        card.add(&query("hit"), &["A".into()]);
        card.add(&query("late"), &["B".into(), "A".into()]);
        card.add(&query("none"), &[]);
        let text = report(&card, "http://n", None);
        assert!(text.contains("top-1     0.333"), "{text}");
        assert!(text.contains("misses (2 of 2 shown)"), "{text}");
        assert!(text.contains("want A (at rank 2); first: B"), "{text}");
        assert!(
            text.contains("want A (not in the top 10); first: nothing"),
            "{text}"
        );
        let one = report(&card, "http://n", Some(1));
        assert!(
            one.contains("misses (1 of 2 shown)") && !one.contains("- none"),
            "{one}"
        );
    }

    #[test]
    fn import_summary_lists_the_difference() {
        let report = ImportReport {
            server: Some("docs".into()),
            tools: 2,
            added: vec!["NEW".into()],
            removed: vec!["OLD".into()],
            unchanged: 1,
            version: Some(9),
            ..ImportReport::default()
        };
        let text = import_summary("http://h/mcp", &report);
        assert!(
            text.contains("1 added, 0 changed, 1 removed, 1 unchanged (index 9)"),
            "{text}"
        );
        assert!(text.contains("removed  OLD  (disabled)"), "{text}");
    }

    #[test]
    fn command_line_parses() {
        let cli = Cli::try_parse_from([
            "rowcall",
            "eval",
            "q.jsonl",
            "--nodes",
            "http://x:1,http://y:2",
            "--misses",
        ])
        .unwrap();
        assert_eq!(cli.nodes, ["http://x:1", "http://y:2"]);
        assert!(matches!(
            cli.command,
            Command::Eval {
                limit: 10,
                misses: true,
                ..
            }
        ));
        let cli = Cli::try_parse_from([
            "rowcall",
            "import-mcp",
            "http://h/mcp",
            "--prefix",
            "gh",
            "--admin-key",
            "k",
        ])
        .unwrap();
        assert_eq!(cli.admin_key.as_deref(), Some("k"));
        assert!(matches!(
            cli.command,
            Command::ImportMcp { ref prefix, .. } if prefix.as_deref() == Some("gh")
        ));
        let cli = Cli::try_parse_from(["rowcall", "ask", "what", "time"]).unwrap();
        assert!(
            matches!(cli.command, Command::Ask { ref words, limit: 5, .. } if words.len() == 2)
        );
    }

    #[test]
    fn invoke_arguments_merge_flags_over_json() {
        let args = invoke_args(
            &["n=3".into(), "name=ada".into(), "tags=[1]".into()],
            Some(r#"{"n": 1, "keep": true}"#),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            Value::Object(args),
            serde_json::json!({"n": 3, "keep": true, "name": "ada", "tags": [1]})
        );
        assert!(invoke_args(&["novalue".into()], None).is_err());
        assert!(invoke_args(&[], Some("[1]")).is_err());
        assert_eq!(invoke_args(&[], None).unwrap(), None);
    }

    #[test]
    fn not_found_and_unavailable_have_their_exit_codes() {
        use crate::error::Rejection;
        let rejection = |status| Rejection {
            status,
            code: "x".into(),
            message: "m".into(),
            hint: String::new(),
            request_id: None,
            violations: Vec::new(),
        };
        let missing =
            anyhow::Error::new(Error::Rejected(Box::new(rejection(tonic::Code::NotFound))));
        assert_eq!(exit_code(&missing), EXIT_NOT_FOUND);
        let down = anyhow::Error::new(Error::Unavailable {
            attempts: 3,
            last: Box::new(rejection(tonic::Code::Unavailable)),
        });
        assert_eq!(exit_code(&down), EXIT_UNAVAILABLE);
        let refused = anyhow::Error::new(Error::Rejected(Box::new(rejection(
            tonic::Code::InvalidArgument,
        ))));
        assert_eq!(exit_code(&refused), 1);
    }
}
