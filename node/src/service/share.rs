//! Share tokens (admin key): mint one for a row, revoke one by id. A token lets anyone
//! holding it invoke one `key`-auth row until it expires.

use super::{Admin, Logged, ServiceError};
use crate::app::App;
use crate::dispatch::share::ensure_secret;
use crate::model::share::{new_token_id, now_secs, valid_token_id, ShareSecret};
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
    /// A link that runs the row with it (rows whose risk is `read`; the others run only by
    /// POST, with the token in the `x-rowcall-share` header).
    pub run_now: Option<String>,
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
    let row = super::dispatch::find_row(app, key)?;
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
        run_now: super::dispatch::runs_by_get(&row)
            .then(|| format!("{base}/api/dispatch?invoke={key}&share={token}")),
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
    admin: &Admin,
    request_id: RequestId,
    id: &str,
) -> Result<(String, Logged), ServiceError> {
    // A whole token names its id second (`st1.<id>.…`) or third (`st2.<kid>.<id>.…`).
    let id = match id.split('.').collect::<Vec<_>>()[..] {
        ["st1", token_id, ..] | ["st2", _, token_id, ..] => token_id.to_owned(),
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
        .submit(
            Request::with_id(request_id, command).by(&admin.principal().name),
            app.write_timeout(),
        )
        .await?;
    Ok((id, Logged::from(&written)))
}

/// What a rotation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotated {
    /// The id of the key that signs from now on (the `kid` in new tokens).
    pub kid: String,
    /// The id of the replaced key, if its tokens keep verifying.
    pub kept: Option<String>,
    /// Where the write is in the log.
    pub logged: Logged,
}

/// Replaces the cluster's share secret. Tokens of the replaced secret keep working only with
/// `keep_previous` (a planned rotation; they expire on their own); without it they are
/// refused on every node once it applied the rotation (a leaked secret). The secret before
/// the replaced one is dropped either way.
pub async fn rotate(
    app: &App,
    admin: &Admin,
    request_id: RequestId,
    keep_previous: bool,
) -> Result<Rotated, ServiceError> {
    let replaced = app
        .receipts
        .share_keys()
        .map_err(ServiceError::internal)?
        .map(|keys| keys.current.kid());
    let secret = ShareSecret::generate();
    let kid = secret.kid();
    let command = Command::RotateShareSecret {
        secret,
        keep_previous,
    };
    let written = app
        .submit(
            Request::with_id(request_id, command).by(&admin.principal().name),
            app.write_timeout(),
        )
        .await?;
    Ok(Rotated {
        kid,
        kept: replaced.filter(|_| keep_previous),
        logged: Logged::from(&written),
    })
}
