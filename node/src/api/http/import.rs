//! `POST /api/directory/import-mcp`: wrap an upstream MCP server, one row per tool (admin
//! key), over [`crate::service::import`].

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::{caller, read_json, Http, Peer, INDEX_HEADER};
use crate::dispatch::import::{self, ImportRequest};
use crate::service::admin_write;
use crate::service::ServiceError;

/// Import (or re-import) an upstream MCP server's tools as rows (admin key).
#[utoipa::path(post, path = "/api/directory/import-mcp", request_body = ImportRequest,
    responses((status = 200, description = "`{ok, url, server, tools, added, changed, removed, unchanged, version}`", body = import::ImportReport),
              (status = 401, description = "no admin key"),
              (status = 403, description = "the SSRF guard refused the URL"),
              (status = 409, description = "a key is taken by another row, or a row changed meanwhile"),
              (status = 502, description = "the upstream failed"), (status = 504, description = "the upstream timed out")))]
pub async fn import_mcp(
    State(http): State<Http>,
    peer: Peer,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ServiceError> {
    let app = &http.app;
    let admin = admin_write(app, caller(&headers, peer), "import MCP tools")?;
    let request: ImportRequest =
        read_json(&headers, body, app.config.limits.max_body_bytes).await?;
    let report = crate::service::import::import_mcp(app, &admin, request).await?;
    let version = report.version;
    let mut body = json!({ "ok": true });
    if let (Some(map), Value::Object(fields)) = (
        body.as_object_mut(),
        serde_json::to_value(&report).map_err(ServiceError::internal)?,
    ) {
        map.extend(fields);
    }
    let mut response = Json(body).into_response();
    if let Some(index) = version {
        response
            .headers_mut()
            .insert(INDEX_HEADER, HeaderValue::from(index));
    }
    Ok(response)
}
