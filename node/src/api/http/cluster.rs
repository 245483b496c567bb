//! Cluster status, health, readiness, metrics, and the snapshot trigger.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use openraft::ServerState;
use serde_json::json;

use super::error::ApiError;
use super::{read_json, require, Http};
use crate::auth::Scope;

fn role(state: ServerState) -> &'static str {
    match state {
        ServerState::Leader => "leader",
        ServerState::Follower => "follower",
        ServerState::Candidate => "candidate",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    }
}

/// This node, the leader, the term, the indexes and every member.
#[utoipa::path(get, path = "/api/cluster", responses((status = 200, description = "cluster status")))]
pub async fn status(State(http): State<Http>) -> Json<serde_json::Value> {
    let app = &http.app;
    let metrics = app.raft.metrics().borrow().clone();
    let membership = metrics.membership_config.membership();
    let voters: Vec<u64> = membership.voter_ids().collect();
    let members: Vec<_> = membership
        .nodes()
        .map(|(id, node)| {
            json!({
                "id": id,
                "grpc_addr": node.grpc_addr,
                "http_addr": node.http_addr,
                "incarnation": node.incarnation,
                "voter": voters.contains(id),
                "leader": metrics.current_leader == Some(*id),
            })
        })
        .collect();
    let learners: Vec<u64> = membership.learner_ids().collect();
    // Only the leader knows how far each follower has replicated.
    let last_log = metrics.last_log_index.unwrap_or(0);
    let lag: serde_json::Map<String, serde_json::Value> = metrics
        .replication
        .as_ref()
        .map(|replication| {
            replication
                .iter()
                .filter(|(id, _)| **id != app.node_id)
                .map(|(id, matched)| {
                    let matched = matched.map_or(0, |m| m.index);
                    (id.to_string(), json!(last_log.saturating_sub(matched)))
                })
                .collect()
        })
        .unwrap_or_default();
    let identity = app.identity.get();
    Json(json!({
        "node_id": app.node_id,
        "cluster_id": identity.cluster_id,
        "incarnation": identity.incarnation,
        "role": role(metrics.state),
        "leader": metrics.current_leader,
        "term": metrics.current_term,
        "last_applied": app.applied_index(),
        "last_log_index": metrics.last_log_index,
        "snapshot_index": metrics.snapshot.map(|s| s.index),
        "purged_index": metrics.purged.map(|p| p.index),
        "stale": app.is_stale(),
        "members": members,
        "learners": learners,
        "follower_lag": lag,
        "outbox": app.outbox.len(),
    }))
}

/// A node to add.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddMember {
    /// The new node's id.
    id: u64,
    /// Its gRPC address (`host:port`).
    grpc_addr: String,
    /// Its HTTP address (`host:port`).
    http_addr: String,
    /// Add it as a learner (read replica) instead of a voter.
    #[serde(default)]
    learner: bool,
}

/// Adds a member (admin key); any node hands the change to the leader. Idempotent. The node
/// at `grpc_addr` is asked who it is and admitted as the incarnation that answers; it must
/// already belong to this cluster (started with `--join`), so this promotes a learner.
#[utoipa::path(post, path = "/api/cluster/members", request_body = AddMember,
    responses((status = 200, description = "member added (or already there)"), (status = 409, description = "refused"), (status = 503, description = "no leader or quorum")))]
pub async fn add_member(
    State(http): State<Http>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let app = &http.app;
    require(app, &headers, Scope::Admin, "change the membership")?;
    let add: AddMember = read_json(&headers, body, 64 * 1024).await?;
    if add.id == 0 {
        return Err(ApiError::WrongShape("id must be a positive number".into()));
    }
    app.add_member(add.id, &add.grpc_addr, &add.http_addr, add.learner)
        .await?;
    Ok(Json(json!({ "ok": true, "id": add.id })).into_response())
}

/// Removes a voter or a learner (admin key); any node hands the change to the leader.
#[utoipa::path(delete, path = "/api/cluster/members/{id}", params(("id" = u64, Path, description = "node id")),
    responses((status = 200, description = "member removed"), (status = 409, description = "not a member, or refused"), (status = 503, description = "no leader or quorum")))]
pub async fn remove_member(
    State(http): State<Http>,
    headers: HeaderMap,
    Path(id): Path<u64>,
) -> Result<Response, ApiError> {
    require(&http.app, &headers, Scope::Admin, "change the membership")?;
    http.app.remove_member(id).await?;
    Ok(Json(json!({ "ok": true, "removed": id })).into_response())
}

/// Digests of this node's directory and receipt log at its applied index (admin key), so an
/// operator or the chaos harness can check that nodes converged.
#[utoipa::path(get, path = "/api/cluster/digest", responses((status = 200, description = "`{index, rows, rows_sha256, receipts, receipts_sha256}`"), (status = 401, description = "no admin key")))]
pub async fn digest(State(http): State<Http>, headers: HeaderMap) -> Result<Response, ApiError> {
    let app = &http.app;
    require(app, &headers, Scope::Admin, "read cluster digests")?;
    let (index, rows, rows_sha256) = {
        let catalogue = app.catalogue.read();
        (app.applied_index(), catalogue.len(), catalogue.digest())
    };
    let (receipts, receipts_sha256) = app.receipts.digest().map_err(ApiError::internal)?;
    Ok(Json(json!({
        "index": index,
        "rows": rows,
        "rows_sha256": rows_sha256,
        "receipts": receipts,
        "receipts_sha256": receipts_sha256,
    }))
    .into_response())
}

/// Builds a snapshot now and purges the log behind it (admin key).
#[utoipa::path(post, path = "/api/cluster/snapshot", responses((status = 202, description = "snapshot started"), (status = 401, description = "no admin key")))]
pub async fn snapshot(State(http): State<Http>, headers: HeaderMap) -> Result<Response, ApiError> {
    require(&http.app, &headers, Scope::Admin, "trigger snapshots")?;
    http.app
        .raft
        .trigger()
        .snapshot()
        .await
        .map_err(|e| ApiError::internal(format!("snapshot trigger: {e}")))?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "ok": true, "snapshot": "started" })),
    )
        .into_response())
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "alive")))]
pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "ok": true }))
}

/// Readiness: a leader is known and reachable, and this node has applied every entry it
/// knows to be committed.
async fn ready(app: &crate::app::App) -> (bool, serde_json::Value) {
    let leader = app.leader();
    let applied = app.applied_index();
    let committed = app
        .raft
        .with_raft_state(|state| state.committed.map_or(0, |c| c.index))
        .await
        .unwrap_or(u64::MAX);
    let stale = app.is_stale();
    let ready = leader.is_some() && !stale && applied >= committed;
    (
        ready,
        json!({ "ready": ready, "leader": leader, "stale": stale, "applied": applied, "committed": committed }),
    )
}

/// Readiness for load balancers: 200 when ready, 503 otherwise.
#[utoipa::path(get, path = "/readyz", responses((status = 200, description = "ready"), (status = 503, description = "not ready")))]
pub async fn readyz(State(http): State<Http>) -> Response {
    let (ready, body) = ready(&http.app).await;
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

/// Prometheus text exposition.
#[utoipa::path(get, path = "/metrics", responses((status = 200, description = "Prometheus text format")))]
pub async fn metrics(State(http): State<Http>) -> Response {
    let app = &http.app;
    let counts = app.catalogue.read().counts();
    let index_bytes = app.catalogue.read().index_bytes();
    let node = app.node_id.to_string();
    for (name, value) in [
        ("rows_total", counts.rows_total),
        ("enabled", counts.enabled),
        ("planner_visible", counts.planner_visible),
        ("mcp_projected", counts.mcp_projected),
    ] {
        metrics::gauge!(crate::metrics::DIRECTORY_ROWS, "count" => name, "node" => node.clone())
            .set(value as f64);
    }
    let raft = app.raft.metrics().borrow().clone();
    metrics::gauge!(crate::metrics::APPLIED_INDEX, "node" => node.clone())
        .set(app.applied_index() as f64);
    metrics::gauge!(crate::metrics::RAFT_TERM, "node" => node.clone())
        .set(raft.current_term as f64);
    metrics::gauge!(crate::metrics::RAFT_IS_LEADER, "node" => node.clone()).set(
        if raft.current_leader == Some(app.node_id) {
            1.0
        } else {
            0.0
        },
    );
    metrics::gauge!(crate::metrics::RESOLVER_INDEX_BYTES, "node" => node.clone())
        .set(index_bytes as f64);
    let (is_ready, _) = ready(app).await;
    metrics::gauge!(crate::metrics::READY, "node" => node.clone()).set(if is_ready {
        1.0
    } else {
        0.0
    });
    metrics::gauge!(crate::metrics::STALE, "node" => node.clone()).set(if app.is_stale() {
        1.0
    } else {
        0.0
    });
    metrics::gauge!(crate::metrics::OUTBOX_RECEIPTS, "node" => node).set(app.outbox.len() as f64);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        http.metrics.render(),
    )
        .into_response()
}
