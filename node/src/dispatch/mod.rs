//! Invocation: check the caller and the arguments, run the row, record the receipt through
//! Raft, and answer with the result and the proof.

pub mod builtins;
pub mod clicks;
pub mod http;
pub mod import;
pub mod mcp;
pub mod outbox;
pub mod redeliver;
pub mod retention;
pub mod share;
pub mod ssrf;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::app::App;
use crate::catalogue::row::{Row, RowType};
use crate::model::receipt::{cap_text, new_receipt_id, sha256_hex, Receipt};
use crate::model::time::{format_ms, now_ms};
use crate::raft::{Command, CommandResult};
use crate::trace::TraceId;

/// What the caller sent to run a row.
#[derive(Debug, Clone, Default)]
pub struct InvokeInput {
    /// Named arguments.
    pub args: Option<Map<String, Value>>,
    /// A raw body (for rows whose payload is a body template).
    pub body: Option<String>,
    /// The caller may send this same call to another node at once (a hedge): only a row
    /// that changes nothing (`risk: read`) runs, others are refused before they run.
    pub repeatable: bool,
}

impl InvokeInput {
    /// The input as stored and hashed in the receipt: the args object as JSON, or the body.
    fn canonical(&self) -> String {
        match (&self.args, &self.body) {
            (Some(args), None) => Value::Object(args.clone()).to_string(),
            (None, Some(body)) => body.clone(),
            (Some(args), Some(body)) => serde_json::json!({"args": args, "body": body}).to_string(),
            (None, None) => "{}".into(),
        }
    }

    /// Arguments for runners that take named ones: the args, with `body` offered as `text`.
    fn named(&self) -> Map<String, Value> {
        let mut args = self.args.clone().unwrap_or_default();
        if let Some(body) = &self.body {
            args.entry("text")
                .or_insert_with(|| Value::String(body.clone()));
        }
        args
    }
}

/// Why a row did not run, or ran and failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The arguments do not suit the runner.
    #[error("{0}")]
    BadArgs(String),
    /// The row names a builtin this node does not have.
    #[error("unknown builtin {0:?}")]
    UnknownBuiltin(String),
    /// The SSRF guard refused the destination (or a redirect's); nothing was sent there.
    #[error("destination refused: {0}")]
    Refused(#[from] ssrf::Refusal),
    /// The upstream did not finish answering in time.
    #[error("the upstream did not answer within {ms} ms")]
    Timeout {
        /// The limit.
        ms: u64,
    },
    /// The upstream could not be reached, or the exchange broke off.
    #[error("the upstream could not be reached: {0}")]
    Unreachable(String),
    /// The upstream answered with a status other than 2xx.
    #[error("the upstream answered {status}: {excerpt}")]
    UpstreamStatus {
        /// Its HTTP status.
        status: u16,
        /// The start of its body.
        excerpt: String,
    },
    /// The upstream's answer is over the response cap.
    #[error("the upstream's answer is larger than {limit} bytes")]
    TooLarge {
        /// The cap.
        limit: usize,
    },
    /// The upstream redirected more often than allowed.
    #[error("the upstream redirected more than {limit} times")]
    TooManyRedirects {
        /// The limit.
        limit: usize,
    },
    /// The upstream MCP tool answered with `isError: true`.
    #[error("the upstream tool reported an error: {0}")]
    ToolError(String),
    /// The upstream MCP server failed the request or broke the protocol.
    #[error("the upstream MCP server failed: {0}")]
    Protocol(String),
    /// The row's target does not make a valid request.
    #[error("the row's target does not make a valid request: {0}")]
    BadTarget(String),
    /// The node's runner configuration is unusable (e.g. a header's secret is missing).
    #[error("runner configuration: {0}")]
    Config(String),
}

/// What a runner did: its outcome, and for runners that reach out, what they called and
/// what the upstream answered (both recorded in the receipt).
#[derive(Debug)]
pub struct Ran {
    /// The result, or why it failed.
    pub outcome: Result<Value, RunError>,
    /// What was called, without secrets.
    pub called: Option<String>,
    /// The upstream's status.
    pub upstream_status: Option<String>,
}

impl From<Result<Value, RunError>> for Ran {
    fn from(outcome: Result<Value, RunError>) -> Self {
        Self {
            outcome,
            called: None,
            upstream_status: None,
        }
    }
}

/// What an invocation will run, decided (and its arguments checked) before anything runs.
enum Plan {
    /// A static or builtin row: runs in the node.
    Local,
    /// An http row's filled request.
    Http(http::Prepared),
    /// An mcp row's tools/call with these arguments.
    Mcp(Map<String, Value>),
}

/// Why an invocation was refused before anything ran.
#[derive(Debug, thiserror::Error)]
pub enum InvokeRefusal {
    /// The row is disabled.
    #[error("row {0} is disabled")]
    Disabled(String),
    /// The arguments do not satisfy the row's `args_schema`.
    #[error("arguments do not match the schema of {key}")]
    InvalidArgs {
        /// The row.
        key: String,
        /// Each violation: `(JSON pointer, message)`.
        violations: Vec<(String, String)>,
    },
    /// A call that may also run on another node ([`InvokeInput::repeatable`]) for a row that
    /// changes something.
    #[error("row {key} has risk {risk}: it runs at most once per call, so it cannot be sent to two nodes at once")]
    NotRepeatable {
        /// The row.
        key: String,
        /// Its risk.
        risk: &'static str,
    },
    /// The row ran, but its receipt could be neither committed nor kept in the outbox.
    #[error("the invocation ran but its receipt could not be stored: {0}")]
    NotRecorded(String),
}

/// A finished invocation (successful or failed), with its recorded receipt.
#[derive(Debug)]
pub struct Invoked {
    /// The receipt as recorded (its `index` is set).
    pub receipt: Receipt,
    /// The runner's result, or `None` if it failed.
    pub result: Option<Value>,
    /// The runner's failure.
    pub error: Option<RunError>,
    /// Whether the receipt is committed or waits in the outbox.
    pub status: ProofStatus,
}

/// Where a receipt stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProofStatus {
    /// Committed through Raft: every node can confirm it.
    Committed,
    /// Durable in this node's outbox; replicated when the cluster heals.
    Pending,
}

impl ProofStatus {
    /// The name used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Committed => "committed",
            Self::Pending => "pending",
        }
    }
}

/// Checks, runs and records one invocation of `row` by `caller`.
pub async fn invoke(
    app: &App,
    row: Arc<Row>,
    input: InvokeInput,
    caller: String,
) -> Result<Invoked, InvokeRefusal> {
    if !row.enabled {
        return Err(InvokeRefusal::Disabled(row.key.clone()));
    }
    if let Some(schema) = &row.args_schema {
        let instance = Value::Object(input.named_for_schema());
        let violations = schema_violations(schema, &instance);
        if !violations.is_empty() {
            return Err(InvokeRefusal::InvalidArgs {
                key: row.key.clone(),
                violations,
            });
        }
    }
    let plan = match row.kind {
        RowType::Static | RowType::Builtin => Plan::Local,
        RowType::Http => Plan::Http(http::prepare(&row, &input).map_err(|violations| {
            InvokeRefusal::InvalidArgs {
                key: row.key.clone(),
                violations,
            }
        })?),
        RowType::Mcp => Plan::Mcp(input.args.clone().unwrap_or_default()),
    };

    let started_ms = now_ms();
    let clock = Instant::now();
    let Ran {
        outcome,
        called,
        upstream_status,
    } = run(app, &row, &input, plan).await;
    let duration_ms = clock.elapsed().as_millis() as u64;
    metrics::counter!(crate::metrics::INVOCATIONS_TOTAL,
        "type" => row.kind.as_str(), "ok" => if outcome.is_ok() { "true" } else { "false" })
    .increment(1);
    app.activity.invocation();

    let input_text = input.canonical();
    let output_text = match &outcome {
        Ok(value) => value.to_string(),
        Err(e) => serde_json::json!({ "error": e.to_string() }).to_string(),
    };
    let cap = app.config.limits.receipt_store_bytes;
    let (stored_input, input_truncated) = cap_text(&input_text, cap);
    let (stored_output, output_truncated) = cap_text(&output_text, cap);
    let caller_name = caller.clone();
    let mut receipt = Receipt {
        id: new_receipt_id(),
        key: row.key.clone(),
        row_version: row.version,
        caller,
        input_sha256: sha256_hex(input_text.as_bytes()),
        output_sha256: sha256_hex(output_text.as_bytes()),
        ok: outcome.is_ok(),
        error: outcome.as_ref().err().map(ToString::to_string),
        started_at: format_ms(started_ms),
        duration_ms,
        served_by: app.node_id,
        request_id: TraceId::current().map(|id| id.to_string()),
        called,
        upstream_status,
        asked: app
            .config
            .resolver
            .learn
            .then(|| app.asks.led_to(&caller_name, &row.key))
            .flatten(),
        input: stored_input,
        output: stored_output,
        input_truncated,
        output_truncated,
        store_cap_bytes: u32::try_from(cap).unwrap_or(u32::MAX),
        index: 0,
    };
    let status = record(app, &mut receipt).await?;
    let (result, error) = match outcome {
        Ok(value) => (Some(value), None),
        Err(e) => (None, Some(e)),
    };
    Ok(Invoked {
        receipt,
        result,
        error,
        status,
    })
}

/// Records `receipt` through Raft and sets its index; without a quorum it waits in the
/// durable outbox and the proof is pending. A receipt id another receipt already holds (a
/// collision of random ids) is replaced by a fresh one before the caller sees it.
async fn record(app: &App, receipt: &mut Receipt) -> Result<ProofStatus, InvokeRefusal> {
    let timeout = Duration::from_millis(app.config.limits.receipt_timeout_ms);
    for _ in 0..3 {
        let command = Command::AppendReceipt {
            receipt: Box::new(receipt.clone()),
        };
        match app.write_within(command, timeout).await {
            Ok(written) => match written.result {
                CommandResult::ReceiptIdTaken { .. } => {
                    receipt.id = new_receipt_id();
                    continue;
                }
                CommandResult::ReceiptAppended { index, .. } => {
                    if !written.applied_here {
                        // Committed, not applied here yet: give this node the read wait to
                        // catch up, so the answer's index is one it can serve.
                        let wait = Duration::from_millis(app.config.limits.min_index_wait_ms);
                        app.wait_applied(written.index, wait).await;
                    }
                    receipt.index = index;
                    return Ok(ProofStatus::Committed);
                }
                other => {
                    return Err(InvokeRefusal::NotRecorded(format!(
                        "unexpected result {other:?}"
                    )))
                }
            },
            Err(e) => {
                tracing::warn!(id = %receipt.id, error = %e, "receipt kept in the outbox until the cluster heals");
                app.outbox
                    .put(receipt)
                    .await
                    .map_err(|e| InvokeRefusal::NotRecorded(e.to_string()))?;
                return Ok(ProofStatus::Pending);
            }
        }
    }
    Err(InvokeRefusal::NotRecorded(
        "three fresh receipt ids were all taken".into(),
    ))
}

/// Where the receipt `id` stands on this node: in the outbox (pending) or in the log
/// (committed). The outbox is read first: a receipt leaves it only after this node applied
/// it, so one that is in neither place at its turn of the check never existed here.
pub fn find_receipt(
    app: &App,
    id: &str,
) -> Result<Option<(Receipt, ProofStatus)>, ReceiptLookupError> {
    find_in(&app.outbox, id, |id| Ok(app.receipts.get(id)?))
}

/// [`find_receipt`] over `outbox` and a `log` reader. A receipt this outbox renamed (its id
/// was taken in the log by another receipt) is found under its new id: the log's receipt
/// under the old id is someone else's, and is never the answer for it.
fn find_in(
    outbox: &outbox::Outbox,
    id: &str,
    log: impl Fn(&str) -> Lookup,
) -> Result<Option<(Receipt, ProofStatus)>, ReceiptLookupError> {
    // The rename is one atomic change (the old id out, the new one and the rename in), so
    // an outbox that no longer holds `id` already records where it went.
    if let Some(found) = outbox.get(id)? {
        return Ok(Some((found, ProofStatus::Pending)));
    }
    match outbox.renamed(id)? {
        Some(new) => look_up(|| Ok(outbox.get(&new)?), || log(&new)),
        None => Ok(log(id)?.map(|receipt| (receipt, ProofStatus::Committed))),
    }
}

type Lookup = Result<Option<Receipt>, ReceiptLookupError>;

/// [`find_receipt`]'s order, over any outbox and log.
fn look_up(
    outbox: impl FnOnce() -> Lookup,
    log: impl FnOnce() -> Lookup,
) -> Result<Option<(Receipt, ProofStatus)>, ReceiptLookupError> {
    if let Some(receipt) = outbox()? {
        return Ok(Some((receipt, ProofStatus::Pending)));
    }
    Ok(log()?.map(|receipt| (receipt, ProofStatus::Committed)))
}

/// A receipt could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReceiptLookupError {
    /// The outbox failed.
    #[error(transparent)]
    Outbox(#[from] outbox::OutboxError),
    /// The log's receipts failed.
    #[error(transparent)]
    Log(#[from] crate::store::state_machine::ReadError),
}

impl InvokeInput {
    /// The instance checked against `args_schema`: the named args only (a raw body is not
    /// an argument).
    fn named_for_schema(&self) -> Map<String, Value> {
        self.args.clone().unwrap_or_default()
    }
}

/// Every way `instance` breaks `schema`, as `(JSON pointer, message)`.
pub fn schema_violations(schema: &Value, instance: &Value) -> Vec<(String, String)> {
    match jsonschema::validator_for(schema) {
        Ok(validator) => validator
            .iter_errors(instance)
            .map(|e| {
                let pointer = e.instance_path().to_string();
                let pointer = if pointer.is_empty() {
                    "/".to_owned()
                } else {
                    pointer
                };
                (pointer, e.to_string())
            })
            .collect(),
        // Schemas are checked on write; one that no longer compiles refuses everything.
        Err(e) => vec![(
            "/".into(),
            format!("the row's args_schema does not compile: {e}"),
        )],
    }
}

async fn run(app: &App, row: &Row, input: &InvokeInput, plan: Plan) -> Ran {
    let runners = &app.config.runners;
    match (plan, row.kind) {
        (Plan::Http(prepared), _) => http::call(runners, &row.key, prepared).await,
        (Plan::Mcp(args), _) => mcp::call(runners, &row.key, &row.target, args).await,
        (Plan::Local, RowType::Builtin) => {
            let ctx = builtins::Context {
                counts: app.catalogue.read().counts(),
                node_id: app.node_id,
                applied_index: app.applied_index(),
                leader: app.leader(),
            };
            builtins::run(row.target.trim(), &input.named(), &ctx).into()
        }
        (Plan::Local, _) => Ok(static_payload(row)).into(),
    }
}

/// A static row's answer: its payload, as JSON when it parses as JSON.
pub fn static_payload(row: &Row) -> Value {
    let payload = row.docs().payload.trim();
    serde_json::from_str(payload).unwrap_or_else(|_| Value::String(payload.to_owned()))
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    fn receipt(id: &str) -> Receipt {
        Receipt {
            key: "K".into(),
            duration_ms: 0,
            input: String::new(),
            output: String::new(),
            store_cap_bytes: 0,
            ..Receipt::sample(id)
        }
    }

    #[test]
    fn the_lookup_reads_the_outbox_before_the_log() {
        // Where the receipt is: in the outbox until the drain moves it to the log. The move
        // happens right after whichever place the lookup reads first, the worst moment.
        let place = RefCell::new("outbox");
        let read = |here: &'static str| -> Lookup {
            let found = (*place.borrow() == here).then(|| receipt("inv_0000000001"));
            *place.borrow_mut() = "log";
            Ok(found)
        };
        let found = look_up(|| read("outbox"), || read("log")).unwrap();
        assert!(
            matches!(found, Some((_, ProofStatus::Pending))),
            "read as pending, not as unknown: {found:?}"
        );
        // Once moved: committed.
        let found = look_up(|| read("outbox"), || read("log")).unwrap();
        assert!(
            matches!(found, Some((_, ProofStatus::Committed))),
            "{found:?}"
        );
    }

    async fn outbox(dir: &std::path::Path) -> outbox::Outbox {
        let storage =
            crate::store::Durable::open(&dir.join("db"), crate::config::SyncMode::Fdatasync)
                .unwrap();
        outbox::Outbox::open(&storage).unwrap()
    }

    fn written(result: CommandResult, applied_here: bool) -> crate::app::Written {
        crate::app::Written {
            result,
            index: 9,
            applied_here,
            replayed: None,
        }
    }

    #[tokio::test]
    async fn a_pending_receipt_never_reads_unconfirmed_while_it_moves_to_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = outbox(dir.path()).await;
        let mine = receipt("inv_0000000001");
        outbox.put(&mine).await.unwrap();
        // Committed at index 9 but not applied here yet: this node's log does not show it.
        let applied = std::cell::Cell::new(false);
        let log =
            |id: &str| -> Lookup { Ok((applied.get() && id == mine.id).then(|| mine.clone())) };
        let appended = CommandResult::ReceiptAppended {
            id: mine.id.clone(),
            index: 9,
        };
        let kept =
            redeliver::settle(&outbox, mine.clone(), &written(appended.clone(), false)).await;
        let found = find_in(&outbox, &mine.id, log).unwrap();
        assert!(
            matches!(found, Some((_, ProofStatus::Pending))),
            "read as pending, not as unknown: {found:?}"
        );
        assert!(kept.is_err(), "not settled before it is applied here");
        // Applied here: it leaves the outbox and reads as committed.
        applied.set(true);
        redeliver::settle(&outbox, mine.clone(), &written(appended, true))
            .await
            .unwrap();
        let found = find_in(&outbox, &mine.id, log).unwrap();
        assert!(
            matches!(found, Some((_, ProofStatus::Committed))),
            "{found:?}"
        );
        assert!(outbox.is_empty());
    }

    #[tokio::test]
    async fn a_renamed_outbox_receipt_is_found_under_the_id_its_caller_was_given() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = outbox(dir.path()).await;
        let given = "inv_0000000001";
        let mine = Receipt {
            output: "mine".into(),
            ..receipt(given)
        };
        // Another receipt took the id in the log while ours waited.
        let other = Receipt {
            output: "other".into(),
            ..receipt(given)
        };
        outbox.put(&mine).await.unwrap();
        let taken = CommandResult::ReceiptIdTaken { id: given.into() };
        redeliver::settle(&outbox, mine.clone(), &written(taken, true))
            .await
            .unwrap();
        let new = outbox.renamed(given).unwrap().expect("the rename is kept");
        let renamed = outbox.get(&new).unwrap().unwrap();
        let log = |id: &str| -> Lookup {
            Ok(if id == given {
                Some(other.clone())
            } else if id == new {
                Some(renamed.clone())
            } else {
                None
            })
        };
        let found = find_in(&outbox, given, log).unwrap();
        assert!(
            matches!(&found, Some((r, ProofStatus::Pending)) if r.output == "mine"),
            "the caller's receipt, pending, never the other one: {found:?}"
        );
        // Delivered under its new id and applied here: still the caller's receipt.
        let appended = CommandResult::ReceiptAppended {
            id: new.clone(),
            index: 9,
        };
        redeliver::settle(&outbox, renamed.clone(), &written(appended, true))
            .await
            .unwrap();
        let found = find_in(&outbox, given, log).unwrap();
        assert!(
            matches!(&found, Some((r, ProofStatus::Committed)) if r.output == "mine" && r.id == new),
            "{found:?}"
        );
        assert!(outbox.is_empty(), "a kept rename is not a pending receipt");
    }
}
