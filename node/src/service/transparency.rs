//! The receipt log as a transparency log, for anyone (no credential): the latest checkpoint
//! a majority of voters co-signed, inclusion proofs of receipts and consistency proofs
//! between tree sizes against it, and the leaves for mirrors. Asking for a checkpoint now
//! takes the admin key. See [`crate::store::state_machine::transparency`] for the tree and
//! [`crate::cluster::cosign`] for who signs when.

use std::time::Duration;

use super::{read_barrier, Admin, Freshness, ServiceError};
use crate::app::App;
use crate::model::receipt::valid_receipt_id;
pub use crate::model::transparency::{
    ConsistencyProof, InclusionProof, Leaf, Leaves, SignedCheckpoint,
};
use crate::store::checkpoint::Cosigned;
use crate::store::state_machine::transparency::{self as log, LogReader};
use rowcall_proto::tlog::{self, Hash};

/// Leaves in one answer at most.
pub const LEAVES_MAX: u64 = 1_000;
/// How long a request for a checkpoint waits for a majority to co-sign it.
pub const CHECKPOINT_WAIT: Duration = Duration::from_secs(10);

fn b64(hash: &Hash) -> String {
    tlog::encode_hash(hash)
}

fn reader(app: &App) -> LogReader {
    app.receipts.log()
}

/// The verifier keys of the members this node knows.
fn member_keys(app: &App) -> Vec<String> {
    let membership = app.membership();
    membership
        .nodes()
        .filter_map(|(id, info)| log::member_key(*id, info))
        .map(|k| k.to_string())
        .collect()
}

fn signed(app: &App, checkpoint: &Cosigned) -> SignedCheckpoint {
    SignedCheckpoint {
        origin: checkpoint.origin.clone(),
        size: checkpoint.size,
        root: checkpoint.root.clone(),
        note: checkpoint.note(),
        signers: checkpoint.signatures.iter().map(|s| s.node).collect(),
        voters: checkpoint.voters.clone(),
        keys: member_keys(app),
    }
}

fn latest(app: &App) -> Result<Option<Cosigned>, ServiceError> {
    reader(app).checkpoint().map_err(ServiceError::internal)
}

fn no_checkpoint() -> ServiceError {
    ServiceError::NotCheckpointed(
        "no checkpoint has been co-signed yet (the log is empty, or a majority of voters has \
         not signed one)"
            .into(),
    )
}

/// The latest co-signed checkpoint; 409 before the first.
pub async fn checkpoint(
    app: &App,
    freshness: &Freshness,
) -> Result<SignedCheckpoint, ServiceError> {
    read_barrier(app, freshness).await?;
    let checkpoint = latest(app)?.ok_or_else(no_checkpoint)?;
    Ok(signed(app, &checkpoint))
}

/// The inclusion proof of receipt `id` in the tree of `size` leaves (default: the latest
/// co-signed checkpoint's).
pub async fn prove(
    app: &App,
    freshness: &Freshness,
    id: &str,
    size: Option<u64>,
) -> Result<InclusionProof, ServiceError> {
    read_barrier(app, freshness).await?;
    let log = reader(app);
    let unknown = || ServiceError::NotFound(format!("no receipt {id:?} in the log"));
    if !valid_receipt_id(id) {
        return Err(unknown());
    }
    let index = log
        .leaf_of(id)
        .map_err(ServiceError::internal)?
        .ok_or_else(unknown)?;
    let checkpoint = latest(app)?;
    let (size, checkpoint) = match size {
        Some(size) => {
            let at = checkpoint.filter(|c| c.size == size);
            (size, at)
        }
        None => {
            let checkpoint = checkpoint.ok_or_else(no_checkpoint)?;
            (checkpoint.size, Some(checkpoint))
        }
    };
    let stored = log.size().map_err(ServiceError::internal)?;
    if size > stored {
        return Err(ServiceError::BadRequest {
            message: format!("the log has {stored} leaves, not {size}"),
            hint: "ask for a size at most the latest checkpoint's (GET /api/receipts/checkpoint)",
        });
    }
    if index >= size {
        return Err(ServiceError::NotCheckpointed(format!(
            "receipt {id} is leaf {index}, beyond the tree of {size} leaves"
        )));
    }
    let receipt = app.receipts.get(id).map_err(ServiceError::internal)?;
    let leaf_hash = log.leaf_hash(index).map_err(ServiceError::internal)?;
    let path = log.inclusion(index, size).map_err(ServiceError::internal)?;
    let root = log.root(size).map_err(ServiceError::internal)?;
    Ok(InclusionProof {
        id: id.to_owned(),
        leaf_index: index,
        leaf: receipt
            .as_ref()
            .map(|r| String::from_utf8_lossy(&log::receipt_leaf(r)).into_owned()),
        leaf_hash: b64(&leaf_hash),
        tree_size: size,
        root: b64(&root),
        path: path.iter().map(b64).collect(),
        body_dropped: receipt.is_none(),
        checkpoint: checkpoint.map(|c| signed(app, &c)),
    })
}

/// The proof that the tree of `from` leaves is a prefix of the tree of `to` (default: the
/// latest co-signed checkpoint's size).
pub async fn consistency(
    app: &App,
    freshness: &Freshness,
    from: u64,
    to: Option<u64>,
) -> Result<ConsistencyProof, ServiceError> {
    read_barrier(app, freshness).await?;
    let log = reader(app);
    let to = match to {
        Some(to) => to,
        None => latest(app)?.ok_or_else(no_checkpoint)?.size,
    };
    let stored = log.size().map_err(ServiceError::internal)?;
    if from > to || to > stored {
        return Err(ServiceError::BadRequest {
            message: format!(
                "a consistency proof needs from ≤ to ≤ {stored} (the log's size), not {from} and {to}"
            ),
            hint: "give from as the size of a checkpoint you hold, to as a later one's",
        });
    }
    let path = log.consistency(from, to).map_err(ServiceError::internal)?;
    Ok(ConsistencyProof {
        from,
        to,
        from_root: b64(&log.root(from).map_err(ServiceError::internal)?),
        to_root: b64(&log.root(to).map_err(ServiceError::internal)?),
        path: path.iter().map(b64).collect(),
    })
}

/// Leaves `[start, end)` of the tree up to the latest co-signed checkpoint, at most
/// [`LEAVES_MAX`].
pub async fn leaves(
    app: &App,
    freshness: &Freshness,
    start: u64,
    end: Option<u64>,
) -> Result<Leaves, ServiceError> {
    read_barrier(app, freshness).await?;
    let size = latest(app)?.map_or(0, |c| c.size);
    let end = end
        .unwrap_or(u64::MAX)
        .min(start.saturating_add(LEAVES_MAX))
        .min(size);
    let leaves = if start < end {
        reader(app)
            .leaves(start, end)
            .map_err(ServiceError::internal)?
    } else {
        Vec::new()
    };
    Ok(Leaves {
        tree_size: size,
        leaves: leaves
            .into_iter()
            .map(|l| Leaf {
                index: l.index,
                id: l.id,
                hash: b64(&l.hash),
            })
            .collect(),
    })
}

/// Signs the tree as this node has applied it and waits (up to [`CHECKPOINT_WAIT`]) until a
/// majority of voters co-signed it or a later one.
pub async fn request_checkpoint(
    app: &App,
    _admin: &Admin,
) -> Result<SignedCheckpoint, ServiceError> {
    let size = reader(app).size().map_err(ServiceError::internal)?;
    if size == 0 {
        return Err(ServiceError::NotCheckpointed(
            "the receipt log is empty: there is nothing to sign yet".into(),
        ));
    }
    let covered = |app: &App| -> Result<Option<Cosigned>, ServiceError> {
        Ok(latest(app)?.filter(|c| c.size >= size))
    };
    if let Some(done) = covered(app)? {
        return Ok(signed(app, &done));
    }
    crate::cluster::cosign::sign(app, size).await?;
    let mut applied = app.applied.clone();
    let waited = tokio::time::timeout(CHECKPOINT_WAIT, async {
        loop {
            if let Some(done) = covered(app)? {
                return Ok::<_, ServiceError>(done);
            }
            if applied.changed().await.is_err() {
                return Err(ServiceError::internal("the state machine stopped"));
            }
        }
    })
    .await;
    match waited {
        Ok(done) => Ok(signed(app, &done?)),
        Err(_) => Err(ServiceError::CheckpointTimeout {
            secs: CHECKPOINT_WAIT.as_secs(),
        }),
    }
}
