//! `/api/directory`: list (paged, with the field schema), get, upsert (one row or an atomic
//! array), delete, counts.

use std::collections::HashSet;
use std::sync::OnceLock;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use utoipa::IntoParams;

use super::error::ApiError;
use super::{read_barrier, read_json, request_id, require, written_headers, Http, ReadOptions};
use crate::auth::Scope;
use crate::catalogue::row::{Row, RowInput, RowRuleError};
use crate::catalogue::Counts;
use crate::dispatch::builtins::BUILTINS;
use crate::raft::{Command, CommandResult, Request};
use crate::store::state_machine::now_ms;

const PAGE_DEFAULT: usize = 100;
const PAGE_MAX: usize = 1_000;

/// Paging and filtering of `GET /api/directory`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only rows of this category (case-insensitive).
    category: Option<String>,
    /// The `next_cursor` of the previous page.
    cursor: Option<String>,
    /// Rows per page (default 100, max 1000).
    limit: Option<usize>,
}

/// Optimistic concurrency for deletes.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeleteQuery {
    /// Delete only if the stored version is this.
    if_version: Option<u64>,
}

/// The field schema embedded in listings, so a client learns the row's shape from the data.
fn field_schema() -> &'static Value {
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

/// One page of rows.
#[utoipa::path(get, path = "/api/directory", params(ListQuery, ReadOptions),
    responses((status = 200, description = "`{rows, count, next_cursor, index, schema}`")))]
pub async fn list(
    State(http): State<Http>,
    headers: HeaderMap,
    Query(query): Query<ListQuery>,
    Query(read): Query<ReadOptions>,
) -> Result<Response, ApiError> {
    let app = &http.app;
    read_barrier(app, &headers, &read).await?;
    let limit = query.limit.unwrap_or(PAGE_DEFAULT).clamp(1, PAGE_MAX);
    let (rows, next) =
        app.catalogue
            .read()
            .page(query.category.as_deref(), query.cursor.as_deref(), limit);
    let rows: Vec<&Row> = rows.iter().map(AsRef::as_ref).collect();
    Ok(Json(json!({
        "rows": rows,
        "count": rows.len(),
        "next_cursor": next,
        "index": app.applied_index(),
        "schema": field_schema(),
    }))
    .into_response())
}

/// One row.
#[utoipa::path(get, path = "/api/directory/{key}", params(("key" = String, Path, description = "row key"), ReadOptions),
    responses((status = 200, body = Row), (status = 404, description = "no such row")))]
pub async fn get_row(
    State(http): State<Http>,
    headers: HeaderMap,
    Path(key): Path<String>,
    Query(read): Query<ReadOptions>,
) -> Result<Json<Row>, ApiError> {
    let app = &http.app;
    read_barrier(app, &headers, &read).await?;
    let row = app
        .catalogue
        .read()
        .get(&key)
        .ok_or_else(|| ApiError::NotFound(format!("no row with key {key:?}")))?;
    Ok(Json((*row).clone()))
}

/// The four counts.
#[utoipa::path(get, path = "/api/directory/counts", params(ReadOptions), responses((status = 200, body = Counts)))]
pub async fn counts(
    State(http): State<Http>,
    headers: HeaderMap,
    Query(read): Query<ReadOptions>,
) -> Result<Json<Counts>, ApiError> {
    read_barrier(&http.app, &headers, &read).await?;
    Ok(Json(http.app.catalogue.read().counts()))
}

/// A row, or an array of rows written atomically.
#[derive(Deserialize)]
#[serde(untagged)]
enum UpsertBody {
    Many(Vec<Value>),
    One(Value),
}

/// Insert or replace rows (admin key). One object: 201 created / 200 updated. An array: one
/// atomic write.
#[utoipa::path(post, path = "/api/directory", request_body = RowInput,
    responses((status = 201, description = "created: `{ok, key, version, updated_at}`"),
              (status = 200, description = "updated, or a bulk write: `{ok, count, created, updated, version}`"),
              (status = 401, description = "no admin key"), (status = 409, description = "if_version did not hold"),
              (status = 413, description = "body over the limit"), (status = 422, description = "a row broke a rule")))]
pub async fn upsert(
    State(http): State<Http>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let app = &http.app;
    require(app, &headers, Scope::Admin, "write the directory")?;
    let body: UpsertBody = read_json(&headers, body, app.config.limits.max_body_bytes).await?;
    let (rows, bulk) = match body {
        UpsertBody::One(value) => (vec![parse_row(value, None)?], false),
        UpsertBody::Many(values) => {
            if values.is_empty() {
                return Err(ApiError::WrongShape("the array of rows is empty".into()));
            }
            let rows = values
                .into_iter()
                .enumerate()
                .map(|(i, v)| parse_row(v, Some(i)))
                .collect::<Result<Vec<_>, _>>()?;
            (rows, true)
        }
    };
    let mut seen = HashSet::new();
    for (position, row) in rows.iter().enumerate() {
        row.validate(&BUILTINS)
            .map_err(|source| rule(source, bulk.then_some(position)))?;
        if !seen.insert(row.key.as_str()) {
            return Err(ApiError::Rule(RowRuleError::DuplicateKey {
                key: row.key.clone(),
            }));
        }
    }
    let command = Command::PutRows {
        at_ms: now_ms(),
        rows,
    };
    let written = app
        .submit(
            Request::with_id(request_id(&headers)?, command),
            app.write_timeout(),
        )
        .await?;
    let outcomes = match &written.result {
        CommandResult::Put { rows } => rows.clone(),
        other => return Err(conflict_or_internal(other.clone())),
    };
    let index = written.index;
    let response = if bulk {
        let created = outcomes.iter().filter(|o| o.created).count();
        (
            StatusCode::OK,
            Json(json!({
                "ok": true, "count": outcomes.len(), "created": created,
                "updated": outcomes.len() - created,
                "version": outcomes.first().map_or(index, |o| o.version),
                "updated_at": outcomes.first().map(|o| o.updated_at.clone()),
            })),
        )
            .into_response()
    } else {
        let outcome = &outcomes[0];
        let status = if outcome.created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        (
            status,
            Json(json!({ "ok": true, "key": outcome.key, "version": outcome.version, "updated_at": outcome.updated_at })),
        )
            .into_response()
    };
    Ok(written_headers(response, &written))
}

fn parse_row(value: Value, position: Option<usize>) -> Result<RowInput, ApiError> {
    serde_json::from_value(value).map_err(|e| match position {
        Some(i) => ApiError::WrongShape(format!("row {i} of the bulk write: {e}")),
        None => ApiError::WrongShape(e.to_string()),
    })
}

fn rule(source: RowRuleError, position: Option<usize>) -> ApiError {
    match position {
        Some(position) => ApiError::BulkRule { position, source },
        None => ApiError::Rule(source),
    }
}

fn conflict_or_internal(result: CommandResult) -> ApiError {
    match result {
        CommandResult::RequestIdReused { request_id, index } => ApiError::RequestIdReused {
            request_id: request_id.to_string(),
            index,
        },
        CommandResult::Conflict {
            key,
            expected,
            actual,
        } => ApiError::Conflict {
            key,
            expected,
            actual: actual.map_or_else(|| "none".to_owned(), |v| v.to_string()),
        },
        other => ApiError::internal(format!("unexpected apply result {other:?}")),
    }
}

/// Delete a row (admin key). Its receipts stay.
#[utoipa::path(delete, path = "/api/directory/{key}", params(("key" = String, Path, description = "row key"), DeleteQuery),
    responses((status = 200, description = "`{ok: true, deleted: 1}`"), (status = 404, description = "no such row"),
              (status = 409, description = "if_version did not hold")))]
pub async fn delete_row(
    State(http): State<Http>,
    headers: HeaderMap,
    Path(key): Path<String>,
    Query(query): Query<DeleteQuery>,
) -> Result<Response, ApiError> {
    let app = &http.app;
    require(app, &headers, Scope::Admin, "write the directory")?;
    // The existence check reads this node's copy: let it catch up with the caller first.
    read_barrier(app, &headers, &ReadOptions::default()).await?;
    if app.catalogue.read().get(&key).is_none() {
        return Err(ApiError::NotFound(format!("no row with key {key:?}")));
    }
    let command = Command::DeleteRow {
        key: key.clone(),
        if_version: query.if_version,
    };
    let written = app
        .submit(
            Request::with_id(request_id(&headers)?, command),
            app.write_timeout(),
        )
        .await?;
    match &written.result {
        CommandResult::Deleted { deleted: 0 } => {
            Err(ApiError::NotFound(format!("no row with key {key:?}")))
        }
        CommandResult::Deleted { deleted } => Ok(written_headers(
            Json(json!({ "ok": true, "deleted": deleted })).into_response(),
            &written,
        )),
        other => Err(conflict_or_internal(other.clone())),
    }
}
