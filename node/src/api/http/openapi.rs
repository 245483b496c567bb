//! The OpenAPI 3 description of the HTTP protocol, generated from the handlers' annotations.

use axum::Json;
use utoipa::OpenApi;

use super::{changes, cluster, directory, dispatch, import, receipts, share, transparency};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "rowcall",
        description = "A replicated capability catalogue for AI agents: ask, contract, invoke, confirm."
    ),
    paths(
        dispatch::get_dispatch,
        dispatch::post_invoke,
        directory::list,
        directory::get_row,
        directory::upsert,
        directory::delete_row,
        directory::counts,
        changes::changes,
        import::import_mcp,
        share::mint,
        share::rotate,
        share::revoke,
        receipts::by_id,
        receipts::by_key,
        receipts::public_page,
        transparency::checkpoint,
        transparency::request_checkpoint,
        transparency::prove,
        transparency::consistency,
        transparency::leaves,
        cluster::status,
        cluster::activity,
        cluster::digest,
        cluster::backup,
        cluster::add_member,
        cluster::remove_member,
        cluster::move_leader,
        cluster::snapshot,
        cluster::join_token,
        cluster::healthz,
        cluster::readyz,
        cluster::metrics,
        document,
    ),
    components(schemas(
        crate::catalogue::row::Row,
        crate::catalogue::row::RowInput,
        crate::catalogue::Counts,
        crate::model::receipt::Receipt,
        crate::model::receipt::Confirmation,
        crate::model::transparency::SignedCheckpoint,
        crate::model::transparency::InclusionProof,
        crate::model::transparency::ConsistencyProof,
        crate::model::transparency::Leaves,
        crate::model::transparency::Leaf,
        crate::activity::History,
        crate::activity::Interval,
        crate::service::dispatch::AskAnswer,
        dispatch::InvokeBody,
        share::MintBody,
        share::RotateBody,
        crate::dispatch::import::ImportRequest,
        crate::dispatch::import::ImportReport,
        cluster::AddMember,
        cluster::MoveLeader,
    ))
)]
struct ApiDoc;

/// This document.
#[utoipa::path(get, path = "/api/openapi.json", responses((status = 200, description = "OpenAPI 3 document")))]
pub async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
