//! The receipt log's checkpoints and proofs over HTTP (no credential, but to ask for a
//! checkpoint now), over [`crate::service::transparency`].

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::Json;
use serde::Deserialize;
use utoipa::IntoParams;

use super::{caller, Http, Peer, ReadOptions};
use crate::service::admin_write;
use crate::service::transparency::{
    self as service, ConsistencyProof, InclusionProof, Leaves, SignedCheckpoint,
};
use crate::service::ServiceError;

/// Which receipt, against which tree.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ProveQuery {
    /// The receipt id (`inv_…`).
    id: String,
    /// The tree size to prove against (default: the latest co-signed checkpoint's).
    size: Option<u64>,
}

/// Between which tree sizes.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ConsistencyQuery {
    /// The older size (one you hold a checkpoint of).
    from: u64,
    /// The newer size (default: the latest co-signed checkpoint's).
    to: Option<u64>,
}

/// Which leaves.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LeavesQuery {
    /// The first leaf.
    start: u64,
    /// One past the last (at most 1000 after start; never past the latest checkpoint).
    end: Option<u64>,
}

/// The latest checkpoint of the receipt log a majority of voters co-signed (no credential).
#[utoipa::path(get, path = "/api/receipts/checkpoint", params(ReadOptions),
    responses((status = 200, body = SignedCheckpoint),
              (status = 409, description = "no checkpoint co-signed yet (`not_yet_checkpointed`)")))]
pub async fn checkpoint(
    State(http): State<Http>,
    headers: HeaderMap,
    Query(read): Query<ReadOptions>,
) -> Result<Json<SignedCheckpoint>, ServiceError> {
    let fresh = read.freshness(&headers)?;
    Ok(Json(service::checkpoint(&http.app, &fresh).await?))
}

/// Has the cluster co-sign the receipt log as it is now (admin key); answers once a majority
/// of voters signed it.
#[utoipa::path(post, path = "/api/receipts/checkpoint",
    responses((status = 200, body = SignedCheckpoint),
              (status = 401, description = "no admin key"),
              (status = 409, description = "the log is empty"),
              (status = 503, description = "no majority signed within 10 s")))]
pub async fn request_checkpoint(
    State(http): State<Http>,
    peer: Peer,
    headers: HeaderMap,
) -> Result<Json<SignedCheckpoint>, ServiceError> {
    let app = &http.app;
    let admin = admin_write(app, caller(&headers, peer), "ask for a checkpoint")?;
    Ok(Json(service::request_checkpoint(app, &admin).await?))
}

/// A receipt's leaf and its inclusion proof (no credential).
#[utoipa::path(get, path = "/api/receipts/proof", params(ProveQuery, ReadOptions),
    responses((status = 200, body = InclusionProof),
              (status = 400, description = "a size beyond the log"),
              (status = 404, description = "unknown receipt"),
              (status = 409, description = "no co-signed checkpoint covers it yet")))]
pub async fn prove(
    State(http): State<Http>,
    headers: HeaderMap,
    Query(query): Query<ProveQuery>,
    Query(read): Query<ReadOptions>,
) -> Result<Json<InclusionProof>, ServiceError> {
    let fresh = read.freshness(&headers)?;
    Ok(Json(
        service::prove(&http.app, &fresh, &query.id, query.size).await?,
    ))
}

/// The consistency proof between two tree sizes (no credential).
#[utoipa::path(get, path = "/api/receipts/consistency", params(ConsistencyQuery, ReadOptions),
    responses((status = 200, body = ConsistencyProof),
              (status = 400, description = "not from ≤ to ≤ the log's size"),
              (status = 409, description = "no co-signed checkpoint yet (when `to` is not given)")))]
pub async fn consistency(
    State(http): State<Http>,
    headers: HeaderMap,
    Query(query): Query<ConsistencyQuery>,
    Query(read): Query<ReadOptions>,
) -> Result<Json<ConsistencyProof>, ServiceError> {
    let fresh = read.freshness(&headers)?;
    Ok(Json(
        service::consistency(&http.app, &fresh, query.from, query.to).await?,
    ))
}

/// Leaves of the receipt log, for mirrors and witnesses (no credential).
#[utoipa::path(get, path = "/api/receipts/leaves", params(LeavesQuery, ReadOptions),
    responses((status = 200, body = Leaves)))]
pub async fn leaves(
    State(http): State<Http>,
    headers: HeaderMap,
    Query(query): Query<LeavesQuery>,
    Query(read): Query<ReadOptions>,
) -> Result<Json<Leaves>, ServiceError> {
    let fresh = read.freshness(&headers)?;
    Ok(Json(
        service::leaves(&http.app, &fresh, query.start, query.end).await?,
    ))
}
