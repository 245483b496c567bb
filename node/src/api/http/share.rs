//! `/api/share`: mint and revoke share tokens (admin key), over [`crate::service::share`]. A
//! token lets anyone holding it invoke one `key`-auth row until it expires
//! (`GET /api/dispatch?invoke=K&share=T`).

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;

use super::{caller, no_store, read_json, request_id, written_headers, Http, Peer};
use crate::api::base_url;
use crate::service::admin_write;
use crate::service::share as service;
use crate::service::ServiceError;

/// The body of `POST /api/share`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MintBody {
    /// The row the token may invoke.
    key: String,
    /// Lifetime in seconds (default and maximum from the `[share]` configuration).
    #[serde(default)]
    ttl_secs: Option<u64>,
}

/// Mint a share token for one row (admin key).
#[utoipa::path(post, path = "/api/share", request_body = MintBody,
    responses((status = 200, description = "`{ok, token, id, key, expires_at, run_now}`"),
              (status = 401, description = "no admin key"), (status = 404, description = "unknown key"),
              (status = 422, description = "ttl_secs out of range")))]
pub async fn mint(
    State(http): State<Http>,
    peer: Peer,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ServiceError> {
    let app = &http.app;
    let admin = admin_write(app, caller(&headers, peer), "mint share tokens")?;
    let body: MintBody = read_json(&headers, body, app.config.limits.max_body_bytes).await?;
    let base = base_url(app, &headers);
    let minted = service::mint(app, &admin, &base, &body.key, body.ttl_secs).await?;
    Ok(no_store(
        Json(json!({
            "ok": true,
            "token": minted.token,
            "id": minted.id,
            "key": minted.key,
            "expires_at": minted.expires_at,
            "run_now": minted.run_now,
            "header": super::SHARE_HEADER,
        }))
        .into_response(),
    ))
}

/// The body of `POST /api/share/rotate`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateBody {
    /// Keep accepting tokens signed with the replaced secret until they expire (a planned
    /// rotation). Default false: they are refused at once (a leaked secret).
    #[serde(default)]
    keep_previous: bool,
}

/// Rotate the cluster's share-token secret (admin key): new tokens are signed with a new key;
/// tokens of the replaced key stop working unless `keep_previous` (the key before that stops
/// either way).
#[utoipa::path(post, path = "/api/share/rotate", request_body = RotateBody,
    responses((status = 200, description = "`{ok, kid, kept}`"), (status = 401, description = "no admin key"),
              (status = 503, description = "no quorum")))]
pub async fn rotate(
    State(http): State<Http>,
    peer: Peer,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ServiceError> {
    let app = &http.app;
    let admin = admin_write(app, caller(&headers, peer), "rotate the share secret")?;
    let body: RotateBody = read_json(&headers, body, 4096).await?;
    let rotated = service::rotate(app, &admin, request_id(&headers)?, body.keep_previous).await?;
    let response =
        Json(json!({ "ok": true, "kid": rotated.kid, "kept": rotated.kept })).into_response();
    Ok(written_headers(response, rotated.logged))
}

/// Revoke a share token by id (or give the whole token) (admin key). Revocations replicate
/// through Raft; every node refuses the token once it has applied this write.
#[utoipa::path(delete, path = "/api/share/{id}", params(("id" = String, Path, description = "token id (`sh…`) or the token")),
    responses((status = 200, description = "`{ok, revoked}`"), (status = 401, description = "no admin key"),
              (status = 400, description = "not a token id")))]
pub async fn revoke(
    State(http): State<Http>,
    peer: Peer,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ServiceError> {
    let app = &http.app;
    let admin = admin_write(app, caller(&headers, peer), "revoke share tokens")?;
    let (id, logged) = service::revoke(app, &admin, request_id(&headers)?, &id).await?;
    let response = Json(json!({ "ok": true, "revoked": id })).into_response();
    Ok(written_headers(response, logged))
}
