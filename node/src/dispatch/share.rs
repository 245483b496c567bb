//! Share tokens against the cluster's state: the one cluster-wide secret (made by the first
//! node that needs it and replicated through Raft, [`crate::raft::Command::SetShareSecret`];
//! the first one applied wins, so a token minted on one node verifies on every node) and the
//! revocations ([`crate::raft::Command::RevokeShare`], stored by token id). The token format
//! and its checks are in [`crate::model::share`].

use crate::app::App;
use crate::model::share::{now_secs, ShareGrant, ShareKeys, ShareRefusal, ShareSecret};
use crate::raft::calls::WriteError;
use crate::raft::Command;
use crate::store::state_machine::ReadError;

/// The cluster's keys, proposing a secret first if the cluster has none yet (the first
/// secret applied wins, so concurrent proposals from two nodes converge on one).
pub async fn ensure_secret(app: &App) -> Result<ShareKeys, SecretError> {
    if let Some(keys) = app.receipts.share_keys()? {
        return Ok(keys);
    }
    app.write(Command::SetShareSecret {
        secret: ShareSecret::generate(),
    })
    .await?;
    app.receipts.share_keys()?.ok_or(SecretError::Missing)
}

/// Why the share secret is not available.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// Reading the state failed.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// Proposing a secret failed (no quorum).
    #[error(transparent)]
    Write(#[from] WriteError),
    /// Written but not visible: cannot happen after a successful write.
    #[error("the share secret was written but is not applied here")]
    Missing,
}

/// Verifies `token` against the cluster's state for an invocation of `key` now.
pub fn verify_for(app: &App, token: &str, key: &str) -> Result<ShareGrant, ShareRefusal> {
    // Revocations replicate through Raft: a node cut off from the leader cannot know it
    // has them all, so it honours none of the tokens (credentials still work).
    if app.is_stale() {
        return Err(ShareRefusal::Stale);
    }
    let keys = app
        .receipts
        .share_keys()
        .map_err(|e| ShareRefusal::Unchecked(e.to_string()))?
        .ok_or(ShareRefusal::NoSecret)?;
    keys.verify(token, key, now_secs(), |id| app.receipts.share_revoked(id))
}
