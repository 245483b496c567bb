//! Who signs the receipt log's checkpoints, and when.
//!
//! - The **leader** starts one: every `[receipts] checkpoint_every_ms` while the tree grew
//!   past the latest co-signed checkpoint, it signs the tree size it has applied.
//! - **Every other member** follows: once it has applied another node's signature of a size
//!   above the latest checkpoint, it signs that same size (its own tree has it: the signature
//!   entry comes after the leaves in the log). So the nodes sign one size, not each its own,
//!   and a majority is reached in one round.
//! - An operator (or a test) asks for one now: [`crate::service::transparency`].
//!
//! A signature is a Raft write ([`Command::Cosign`]); apply checks it on every node.

use std::time::{Duration, Instant};

use rowcall_proto::tlog::{self, Checkpoint};
use tokio::sync::watch;

use crate::app::App;
use crate::raft::{Command, CommandResult};
use crate::service::ServiceError;
use crate::store::state_machine::transparency as log;

/// Least time between two looks at the log (applies can come thousands a second).
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// Signs the checkpoint of the first `size` leaves of this node's log and proposes the
/// signature.
pub async fn sign(app: &App, size: u64) -> Result<(), ServiceError> {
    let key = app.identity.signing_key().ok_or_else(|| {
        ServiceError::internal("this node belongs to no cluster yet: it has no key name")
    })?;
    if !all_members_sign(app) {
        return Err(ServiceError::NotCheckpointed(
            "a member has no signing key yet (it runs an older version, or the leader has not \
             recorded its key): checkpoints are signed once every member can"
                .into(),
        ));
    }
    let cluster = app.identity.cluster_id().unwrap_or_default();
    let root = app
        .receipts
        .log()
        .root(size)
        .map_err(ServiceError::internal)?;
    let body = Checkpoint {
        origin: crate::store::checkpoint::origin(&cluster),
        size,
        root,
    }
    .body();
    let signature = key.sign(body.as_bytes());
    use base64::Engine as _;
    let command = Command::Cosign {
        node: app.node_id,
        size,
        root: tlog::encode_hash(&root),
        signature: base64::engine::general_purpose::STANDARD.encode(signature),
    };
    let written = app.write(command).await?;
    match written.result {
        CommandResult::Cosigned { checkpoint, .. } => {
            metrics::counter!(crate::metrics::CHECKPOINT_SIGNATURES_TOTAL).increment(1);
            tracing::debug!(size, checkpoint, "signed the receipt log's checkpoint");
            Ok(())
        }
        CommandResult::CosignRefused { reason } => Err(ServiceError::internal(format!(
            "the cluster refused this node's checkpoint signature: {reason}"
        ))),
        other => Err(ServiceError::internal(format!(
            "unexpected result of a checkpoint signature: {other:?}"
        ))),
    }
}

/// Whether every member has a signing key in the membership. A member without one runs a
/// version from before signed checkpoints (or was admitted by one, and the leader has not
/// recorded its key yet): it could not apply a signature entry, so none is proposed.
pub fn all_members_sign(app: &App) -> bool {
    app.membership()
        .nodes()
        .all(|(_, info)| !info.signing_key.is_empty())
}

/// What this node should sign now, if anything: a size others signed that it has not, or
/// (as leader, when `start` allows) the tree as it has it.
fn due(app: &App, start: bool) -> Result<Option<u64>, log::ProofError> {
    if !all_members_sign(app) {
        return Ok(None);
    }
    let reader = app.receipts.log();
    let latest = reader.checkpoint()?.map_or(0, |c| c.size);
    let pending = reader.pending()?;
    let size = reader.size()?;
    metrics::gauge!(crate::metrics::RECEIPT_LOG_LEAVES).set(size as f64);
    metrics::gauge!(crate::metrics::CHECKPOINT_LEAVES).set(latest as f64);
    let me = app.node_id;
    let signed_by_me = |size| {
        pending
            .iter()
            .any(|p| p.size == size && p.signature.node == me)
    };
    let follow = pending
        .iter()
        .filter(|p| p.size > latest && !signed_by_me(p.size))
        .map(|p| p.size)
        .max();
    if follow.is_some() {
        return Ok(follow);
    }
    if start && app.leader() == Some(me) && size > latest && !signed_by_me(size) {
        return Ok(Some(size));
    }
    Ok(None)
}

/// Signs what is due until `stop` turns true (see the module documentation).
pub async fn run(app: &App, mut stop: watch::Receiver<bool>) {
    let every = Duration::from_millis(app.config.receipts.checkpoint_every_ms);
    let periodic = !every.is_zero();
    let mut applied = app.applied.clone();
    let mut started = Instant::now();
    let mut keys_checked = Instant::now();
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            changed = applied.changed() => if changed.is_err() { return },
            // Wakes the leader when its interval is up even if nothing is applied.
            _ = tokio::time::sleep(every.max(LOOK_EVERY)) => {}
        }
        tokio::time::sleep(LOOK_EVERY).await;
        let start = periodic && started.elapsed() >= every;
        // Once an interval: `started` only moves when a checkpoint is started, so while the
        // log is idle `start` holds at every look.
        if periodic && keys_checked.elapsed() >= every {
            keys_checked = Instant::now();
            if let Err(e) = app.record_signing_keys().await {
                tracing::info!(error = %e, "members' signing keys not recorded yet");
            }
        }
        let size = match due(app, start) {
            Ok(Some(size)) => size,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the receipt log to co-sign it");
                continue;
            }
        };
        if start {
            started = Instant::now();
        }
        if let Err(e) = sign(app, size).await {
            tracing::info!(error = %e, size, "checkpoint signature postponed");
            // Not again at once: the cluster may be without a quorum, or refuse it.
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = tokio::time::sleep(every.max(Duration::from_secs(1))) => {}
            }
        }
    }
}
