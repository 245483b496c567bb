//! The directory: list (paged), get, counts, put (one row, or many written atomically) and
//! delete. Writes need the admin key ([`Admin`]) and a quorum, and carry a request id (a
//! client's idempotency key), so a retried write is answered with its first outcome.

use std::sync::{Arc, OnceLock};

use serde_json::{json, Value};

use super::view::{Sight, Viewer};
use super::{read_barrier, Admin, Freshness, Logged, ServiceError};
use crate::app::App;
use crate::catalogue::row::{validate_rows, Row, RowInput, RowRuleError};
use crate::catalogue::semantic::embed_views;
use crate::catalogue::Counts;
use crate::dispatch::builtins::BUILTINS;
use crate::model::time::now_ms;
use crate::raft::{Command, CommandResult, PutOutcome, Request, RequestId};

/// Rows per page unless told otherwise.
pub const PAGE_DEFAULT: usize = 100;
/// Most rows per page.
pub const PAGE_MAX: usize = 1_000;

/// The field schema embedded in listings, so a client learns the row's shape from the data.
pub fn field_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        json!({
            "key": "string, ^[A-Z_][A-Z0-9_]{0,63}$, unique",
            "type": "http | mcp | static | builtin",
            "target": "http: \"METHOD URL\" with {arg} placeholders; mcp: \"URL#tool\"; static: empty; builtin: its name",
            "category": "string, at most 64 characters",
            "content": "leading '# FIELD: value' lines (WHAT, ARGS, RETURNS, EXAMPLE, AUTH, RISK, ERRORS, SEE) then the payload; at most 64 KiB",
            "args_schema": "optional JSON Schema of the arguments, enforced on invoke",
            "auth": "public | key (default key)",
            "risk": "read | write | destructive (default read)",
            "enabled": "boolean, default true",
            "planner_visible": "boolean, default true",
            "pins": "phrases for which this row is the canonical answer",
            "demote": "boolean: rank below peers",
            "version": "set by the server: the Raft log index of the last write; send if_version to write conditionally",
            "created_at": "set by the server",
            "updated_at": "set by the server",
        })
    })
}

/// One page of rows, in key order, as a viewer may see them.
#[derive(Debug, Clone)]
pub struct Page {
    /// The rows the viewer may see (hidden ones left out, unless it is the admin).
    pub rows: Vec<Arc<Row>>,
    /// How much of each row it sees.
    pub sight: Sight,
    /// Where the next page starts, if there is one.
    pub next_cursor: Option<String>,
    /// The index this node had applied when it answered.
    pub index: u64,
}

/// A page of at most `limit` rows (default 100, at most 1000) after `cursor`, only of
/// `category` (case-insensitive) if given, of those `viewer` may see.
pub async fn list(
    app: &App,
    viewer: &Viewer,
    freshness: &Freshness,
    category: Option<&str>,
    cursor: Option<&str>,
    limit: Option<usize>,
) -> Result<Page, ServiceError> {
    read_barrier(app, freshness).await?;
    let limit = limit.unwrap_or(PAGE_DEFAULT).clamp(1, PAGE_MAX);
    let (rows, next_cursor) = app.catalogue.read().page(category, cursor, limit);
    let rows = rows
        .into_iter()
        .filter(|r| viewer.row(r).is_some())
        .collect();
    Ok(Page {
        rows,
        sight: if viewer.is_admin() {
            Sight::Whole
        } else {
            Sight::WithoutTarget
        },
        next_cursor,
        index: app.applied_index(),
    })
}

/// One row, and how much of it `viewer` sees; 404 for a row it may not see at all (as for
/// a row that is not there).
pub async fn get(
    app: &App,
    viewer: &Viewer,
    freshness: &Freshness,
    key: &str,
) -> Result<(Arc<Row>, Sight), ServiceError> {
    read_barrier(app, freshness).await?;
    let row = super::dispatch::find_row(app, key)?;
    match viewer.row(&row) {
        Some(sight) => Ok((row, sight)),
        None => Err(super::dispatch::no_row(key)),
    }
}

/// The four counts of DESIGN §2.3.
pub async fn counts(app: &App, freshness: &Freshness) -> Result<Counts, ServiceError> {
    read_barrier(app, freshness).await?;
    Ok(app.catalogue.read().counts())
}

/// A write of one row, or of many at once.
#[derive(Debug, Clone)]
pub enum Put {
    /// One row (as JSON, checked here).
    One(Value),
    /// Rows written atomically: all or none.
    Many(Vec<Value>),
}

/// What a put did.
#[derive(Debug, Clone)]
pub struct PutAnswer {
    /// One outcome per row, in the order given (each row's new version is the write's
    /// first index, also for a replay).
    pub outcomes: Vec<PutOutcome>,
    /// Where the write is in the log.
    pub logged: Logged,
    /// Whether it was a bulk write ([`Put::Many`]).
    pub bulk: bool,
}

/// Inserts or replaces rows after checking every rule of DESIGN §2.1; a bulk write names
/// the position of the row that broke one.
pub async fn put(
    app: &App,
    admin: &Admin,
    request_id: RequestId,
    put: Put,
) -> Result<PutAnswer, ServiceError> {
    let (rows, bulk) = match put {
        Put::One(value) => (vec![parse_row(value, None)?], false),
        Put::Many(values) => {
            if values.is_empty() {
                return Err(ServiceError::WrongShape(
                    "the array of rows is empty".into(),
                ));
            }
            let rows = values
                .into_iter()
                .enumerate()
                .map(|(i, v)| parse_row(v, Some(i)))
                .collect::<Result<Vec<_>, _>>()?;
            (rows, true)
        }
    };
    validate_rows(&rows, &BUILTINS).map_err(|(position, source)| match source {
        RowRuleError::DuplicateKey { .. } => ServiceError::Rule(source),
        source => rule(source, bulk.then_some(position)),
    })?;
    crate::cluster::space::refuse_growth(app)?;
    embed_before_proposing(app, &rows).await;
    let command = Command::PutRows {
        at_ms: now_ms(),
        rows,
    };
    let written = app
        .submit(
            Request::with_id(request_id, command).by(&admin.principal().name),
            app.write_timeout(),
        )
        .await?;
    let logged = Logged::from(&written);
    match written.result {
        CommandResult::Put { rows } => Ok(PutAnswer {
            outcomes: rows,
            logged,
            bulk,
        }),
        other => Err(conflict_or_internal(other)),
    }
}

/// Rows a write embeds before it is proposed; a larger bulk write is embedded by the
/// background task after it applies (askable by its words at once, by meaning soon after).
const EMBED_BEFORE_PROPOSING: usize = 64;

/// With a model, embeds the rows before they are proposed, so that when this node applies
/// them their vectors are there and the write is askable by meaning as soon as it is
/// answered (see [`crate::catalogue::semantic`]). A failure only costs that guarantee.
async fn embed_before_proposing(app: &App, rows: &[RowInput]) {
    let semantic = app.catalogue.read().semantic().cloned();
    let Some(semantic) = semantic else {
        return;
    };
    if rows.len() > EMBED_BEFORE_PROPOSING {
        return;
    }
    let texts: Vec<String> = rows
        .iter()
        .flat_map(|r| embed_views(&r.key, &r.category, &r.content, r.args_schema.as_ref()))
        .collect();
    match tokio::task::spawn_blocking(move || semantic.prepare(&texts)).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::error!(%error, "embedding rows before proposing them failed"),
        Err(error) => tracing::error!(%error, "embedding rows before proposing them failed"),
    }
}

fn parse_row(value: Value, position: Option<usize>) -> Result<RowInput, ServiceError> {
    serde_json::from_value(value).map_err(|e| match position {
        Some(i) => ServiceError::WrongShape(format!("row {i} of the bulk write: {e}")),
        None => ServiceError::WrongShape(e.to_string()),
    })
}

fn rule(source: RowRuleError, position: Option<usize>) -> ServiceError {
    match position {
        Some(position) => ServiceError::BulkRule { position, source },
        None => ServiceError::Rule(source),
    }
}

fn conflict_or_internal(result: CommandResult) -> ServiceError {
    match result {
        CommandResult::RequestIdReused { request_id, index } => ServiceError::RequestIdReused {
            request_id: request_id.to_string(),
            index,
        },
        CommandResult::Conflict {
            key,
            expected,
            actual,
        } => ServiceError::Conflict {
            key,
            expected,
            actual: actual.map_or_else(|| "none".to_owned(), |v| v.to_string()),
        },
        other => ServiceError::internal(format!("unexpected apply result {other:?}")),
    }
}

/// What a delete did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deleted {
    /// How many rows went (1).
    pub deleted: u32,
    /// Where the write is in the log.
    pub logged: Logged,
}

/// Deletes row `key` (only if its version is `if_version`, when given). Its receipts stay.
/// 404 when there is no such row.
pub async fn delete(
    app: &App,
    admin: &Admin,
    freshness: &Freshness,
    request_id: RequestId,
    key: &str,
    if_version: Option<u64>,
) -> Result<Deleted, ServiceError> {
    // A session ahead of this node hears `behind` here, as from every call.
    read_barrier(app, freshness).await?;
    let missing = || ServiceError::NotFound(format!("no row with key {key:?}"));
    // Whether the row exists is decided where the delete applies, never from this node's
    // copy first: a retry (or a hedged second attempt) of a delete that already applied
    // finds the row gone here, and must still be answered with the first outcome (its
    // request id's), not 404.
    let command = Command::DeleteRow {
        key: key.to_owned(),
        if_version,
    };
    let written = app
        .submit(
            Request::with_id(request_id, command).by(&admin.principal().name),
            app.write_timeout(),
        )
        .await?;
    let logged = Logged::from(&written);
    match written.result {
        CommandResult::Deleted { deleted: 0 } => Err(missing()),
        CommandResult::Deleted { deleted } => Ok(Deleted { deleted, logged }),
        // `if_version` on a row that is not there: absent, as without it.
        CommandResult::Conflict { actual: None, .. } => Err(missing()),
        other => Err(conflict_or_internal(other)),
    }
}
