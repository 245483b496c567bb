//! `/api/share`: mint and revoke share tokens (admin key). A token lets anyone holding it
//! invoke one `key`-auth row until it expires (`GET /api/dispatch?invoke=K&share=T`).

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;

use super::error::ApiError;
use super::{base_url, read_json, request_id, require, written_headers, Http};
use crate::auth::Scope;
use crate::dispatch::share::{self, SecretError};
use crate::raft::{Command, Request};
use crate::store::state_machine::{format_ms, now_ms};

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

impl From<SecretError> for ApiError {
    fn from(e: SecretError) -> Self {
        match e {
            SecretError::Write(write) => Self::Write(write),
            other => Self::internal(other),
        }
    }
}

/// Mint a share token for one row (admin key).
#[utoipa::path(post, path = "/api/share", request_body = MintBody,
    responses((status = 200, description = "`{ok, token, id, key, expires_at, run_now}`"),
              (status = 401, description = "no admin key"), (status = 404, description = "unknown key"),
              (status = 422, description = "ttl_secs out of range")))]
pub async fn mint(
    State(http): State<Http>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let app = &http.app;
    require(app, &headers, Scope::Admin, "mint share tokens")?;
    let body: MintBody = read_json(&headers, body, app.config.limits.max_body_bytes).await?;
    if app.catalogue.read().get(&body.key).is_none() {
        return Err(ApiError::NotFound(format!(
            "no row with key {:?}",
            body.key
        )));
    }
    let limits = &app.config.share;
    let ttl = body.ttl_secs.unwrap_or(limits.default_ttl_secs);
    if ttl == 0 || ttl > limits.max_ttl_secs {
        return Err(ApiError::WrongShape(format!(
            "ttl_secs must be 1 to {}",
            limits.max_ttl_secs
        )));
    }
    let secret = share::ensure_secret(app).await?;
    let id = share::new_token_id();
    let expires = share::now_secs() + ttl;
    let token = secret.mint(&id, &body.key, expires);
    let base = base_url(app, &headers);
    Ok(Json(json!({
        "ok": true,
        "token": token,
        "id": id,
        "key": body.key,
        "expires_at": format_ms(expires * 1000),
        "run_now": format!("{base}/api/dispatch?invoke={}&share={token}", body.key),
    }))
    .into_response())
}

/// Revoke a share token by id (or give the whole token) (admin key). Revocations replicate
/// through Raft; every node refuses the token once it has applied this write.
#[utoipa::path(delete, path = "/api/share/{id}", params(("id" = String, Path, description = "token id (`sh…`) or the token")),
    responses((status = 200, description = "`{ok, revoked}`"), (status = 401, description = "no admin key"),
              (status = 400, description = "not a token id")))]
pub async fn revoke(
    State(http): State<Http>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let app = &http.app;
    require(app, &headers, Scope::Admin, "revoke share tokens")?;
    // A whole token `st1.<id>.…` names its id second.
    let id = match id.split('.').collect::<Vec<_>>()[..] {
        ["st1", token_id, ..] => token_id.to_owned(),
        _ => id,
    };
    if !share::valid_token_id(&id) {
        return Err(ApiError::BadRequest {
            message: format!("{id:?} is not a share token id"),
            hint: "the id is the `id` of POST /api/share (sh + 10 characters), or send the whole token",
        });
    }
    let command = Command::RevokeShare {
        id: id.clone(),
        at_ms: now_ms(),
    };
    let written = app
        .submit(
            Request::with_id(request_id(&headers)?, command),
            app.write_timeout(),
        )
        .await?;
    let response = Json(json!({ "ok": true, "revoked": id })).into_response();
    Ok(written_headers(response, &written))
}
