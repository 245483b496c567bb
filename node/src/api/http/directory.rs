//! `/api/directory`: list (paged, with the field schema), get, upsert (one row or an atomic
//! array), delete, counts, over [`crate::service::directory`].

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use utoipa::IntoParams;

use super::{
    caller, credential, header_freshness, read_json, request_id, written_headers, Http, Peer,
    ReadOptions,
};
use crate::catalogue::row::{Row, RowInput};
use crate::catalogue::Counts;
use crate::service::admin_write;
use crate::service::directory::{self as service, field_schema, Put};
use crate::service::view::Viewer;
use crate::service::ServiceError;

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

/// One page of rows. Without the admin key, rows come without `target` and hidden rows are
/// left out.
#[utoipa::path(get, path = "/api/directory", params(ListQuery, ReadOptions),
    responses((status = 200, description = "`{rows, count, next_cursor, index, schema}`")))]
pub async fn list(
    State(http): State<Http>,
    headers: HeaderMap,
    Query(query): Query<ListQuery>,
    Query(read): Query<ReadOptions>,
) -> Result<Response, ServiceError> {
    let fresh = read.freshness(&headers)?;
    let viewer = Viewer::of(&http.app, credential(&headers));
    let page = service::list(
        &http.app,
        &viewer,
        &fresh,
        query.category.as_deref(),
        query.cursor.as_deref(),
        query.limit,
    )
    .await?;
    let rows: Vec<Value> = page.rows.iter().map(|r| page.sight.json(r)).collect();
    Ok(Json(json!({
        "rows": rows,
        "count": rows.len(),
        "next_cursor": page.next_cursor,
        "index": page.index,
        "schema": field_schema(),
    }))
    .into_response())
}

/// One row (without the admin key: no `target`, and a hidden row is 404).
#[utoipa::path(get, path = "/api/directory/{key}", params(("key" = String, Path, description = "row key"), ReadOptions),
    responses((status = 200, body = Row), (status = 404, description = "no such row")))]
pub async fn get_row(
    State(http): State<Http>,
    headers: HeaderMap,
    Path(key): Path<String>,
    Query(read): Query<ReadOptions>,
) -> Result<Json<Value>, ServiceError> {
    let fresh = read.freshness(&headers)?;
    let viewer = Viewer::of(&http.app, credential(&headers));
    let (row, sight) = service::get(&http.app, &viewer, &fresh, &key).await?;
    Ok(Json(sight.json(&row)))
}

/// The four counts.
#[utoipa::path(get, path = "/api/directory/counts", params(ReadOptions), responses((status = 200, body = Counts)))]
pub async fn counts(
    State(http): State<Http>,
    headers: HeaderMap,
    Query(read): Query<ReadOptions>,
) -> Result<Json<Counts>, ServiceError> {
    let fresh = read.freshness(&headers)?;
    Ok(Json(service::counts(&http.app, &fresh).await?))
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
              (status = 413, description = "body over the limit"), (status = 422, description = "a row broke a rule"),
              (status = 507, description = "a member is short of disk space (a storage alarm); nothing was written")))]
pub async fn upsert(
    State(http): State<Http>,
    peer: Peer,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ServiceError> {
    let app = &http.app;
    let admin = admin_write(app, caller(&headers, peer), "write the directory")?;
    let body: UpsertBody = read_json(&headers, body, app.config.limits.max_body_bytes).await?;
    let put = match body {
        UpsertBody::One(value) => Put::One(value),
        UpsertBody::Many(values) => Put::Many(values),
    };
    let written = service::put(app, &admin, request_id(&headers)?, put).await?;
    let outcomes = &written.outcomes;
    let response = if written.bulk {
        let created = outcomes.iter().filter(|o| o.created).count();
        (
            StatusCode::OK,
            Json(json!({
                "ok": true, "count": outcomes.len(), "created": created,
                "updated": outcomes.len() - created,
                "version": outcomes.first().map_or(written.logged.index, |o| o.version),
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
    Ok(written_headers(response, written.logged))
}

/// Delete a row (admin key). Its receipts stay.
#[utoipa::path(delete, path = "/api/directory/{key}", params(("key" = String, Path, description = "row key"), DeleteQuery),
    responses((status = 200, description = "`{ok: true, deleted: 1}`"), (status = 404, description = "no such row"),
              (status = 409, description = "if_version did not hold")))]
pub async fn delete_row(
    State(http): State<Http>,
    peer: Peer,
    headers: HeaderMap,
    Path(key): Path<String>,
    Query(query): Query<DeleteQuery>,
) -> Result<Response, ServiceError> {
    let app = &http.app;
    let admin = admin_write(app, caller(&headers, peer), "write the directory")?;
    let fresh = header_freshness(&headers)?;
    let id = request_id(&headers)?;
    let deleted = service::delete(app, &admin, &fresh, id, &key, query.if_version).await?;
    Ok(written_headers(
        Json(json!({ "ok": true, "deleted": deleted.deleted })).into_response(),
        deleted.logged,
    ))
}
