//! Share tokens (admin key): mint one for a row, revoke one by id. A token lets anyone
//! holding it invoke one `key`-auth row until it expires.

use super::{Admin, Logged, ServiceError};
use crate::app::App;
use crate::dispatch::share::ensure_secret;
use crate::model::share::{new_token_id, now_secs, valid_token_id};
use crate::model::time::{format_ms, now_ms};
use crate::raft::{Command, Request, RequestId};

/// A minted token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Minted {
    /// The token itself.
    pub token: String,
    /// Its id, to revoke it by.
    pub id: String,
    /// The row it may invoke.
    pub key: String,
    /// When it expires (RFC 3339).
    pub expires_at: String,
    /// A link that runs the row with it.
    pub run_now: String,
}

/// Mints a token for row `key`, valid for `ttl_secs` (default and maximum from the `[share]`
/// configuration); the first token of a cluster makes its secret, which needs a quorum.
pub async fn mint(
    app: &App,
    _admin: &Admin,
    base: &str,
    key: &str,
    ttl_secs: Option<u64>,
) -> Result<Minted, ServiceError> {
    if app.catalogue.read().get(key).is_none() {
        return Err(ServiceError::NotFound(format!("no row with key {key:?}")));
    }
    let limits = &app.config.share;
    let ttl = ttl_secs.unwrap_or(limits.default_ttl_secs);
    if ttl == 0 || ttl > limits.max_ttl_secs {
        return Err(ServiceError::WrongShape(format!(
            "ttl_secs must be 1 to {}",
            limits.max_ttl_secs
        )));
    }
    let secret = ensure_secret(app).await?;
    let id = new_token_id();
    let expires = now_secs() + ttl;
    let token = secret.mint(&id, key, expires);
    Ok(Minted {
        run_now: format!("{base}/api/dispatch?invoke={key}&share={token}"),
        token,
        id,
        key: key.to_owned(),
        expires_at: format_ms(expires * 1000),
    })
}

/// Revokes a token by id, or by the whole token; returns the id and where the write is.
/// Every node refuses the token once it has applied the revocation.
pub async fn revoke(
    app: &App,
    _admin: &Admin,
    request_id: RequestId,
    id: &str,
) -> Result<(String, Logged), ServiceError> {
    // A whole token `st1.<id>.…` names its id second.
    let id = match id.split('.').collect::<Vec<_>>()[..] {
        ["st1", token_id, ..] => token_id.to_owned(),
        _ => id.to_owned(),
    };
    if !valid_token_id(&id) {
        return Err(ServiceError::BadRequest {
            message: format!("{id:?} is not a share token id"),
            hint: "the id is the `id` of POST /api/share (sh + 10 characters), or send the whole token",
        });
    }
    let command = Command::RevokeShare {
        id: id.clone(),
        at_ms: now_ms(),
    };
    let written = app
        .submit(Request::with_id(request_id, command), app.write_timeout())
        .await?;
    Ok((id, Logged::from(&written)))
}
