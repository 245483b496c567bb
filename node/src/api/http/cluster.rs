//! Cluster status, health, readiness, metrics, and the snapshot trigger.

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use openraft::ServerState;
use serde_json::json;

use super::error::ApiError;
use super::{require, Http};
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
                "voter": voters.contains(id),
                "leader": metrics.current_leader == Some(*id),
            })
        })
        .collect();
    let learners: Vec<u64> = membership.learner_ids().collect();
    Json(json!({
        "node_id": app.node_id,
        "role": role(metrics.state),
        "leader": metrics.current_leader,
        "term": metrics.current_term,
        "last_applied": app.applied_index(),
        "last_log_index": metrics.last_log_index,
        "snapshot_index": metrics.snapshot.map(|s| s.index),
        "purged_index": metrics.purged.map(|p| p.index),
        "members": members,
        "learners": learners,
    }))
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

/// Readiness: a leader is known and this node has applied every entry in its log that the
/// leader has committed as far as it knows.
#[utoipa::path(get, path = "/readyz", responses((status = 200, description = "ready"), (status = 503, description = "not ready")))]
pub async fn readyz(State(http): State<Http>) -> Response {
    let app = &http.app;
    let metrics = app.raft.metrics().borrow().clone();
    let applied = app.applied_index();
    let committed = app
        .raft
        .with_raft_state(|state| state.committed.map_or(0, |c| c.index))
        .await
        .unwrap_or(u64::MAX);
    let has_leader = metrics.current_leader.is_some();
    let ready = has_leader && applied >= committed;
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(json!({ "ready": ready, "leader": metrics.current_leader, "applied": applied })),
    )
        .into_response()
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
    metrics::gauge!(crate::metrics::RESOLVER_INDEX_BYTES, "node" => node).set(index_bytes as f64);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        http.metrics.render(),
    )
        .into_response()
}
