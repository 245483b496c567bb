//! Cluster status, health, readiness, metrics, membership and the snapshot trigger, over
//! [`crate::service::cluster`].

use crate::raft::WatchReceiver as _;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::{caller, credential, read_json, Http, Peer, ReadOptions};
use crate::service::admin_write;
use crate::service::cluster::{self as service, Status};
use crate::service::view::Viewer;
use crate::service::{Admin, ServiceError};

/// This node, the leader, the term, the indexes and every member (the cluster id,
/// incarnations and member addresses only with the admin key).
#[utoipa::path(get, path = "/api/cluster", responses((status = 200, description = "cluster status")))]
pub async fn status(State(http): State<Http>, headers: HeaderMap) -> Json<Status> {
    let viewer = Viewer::of(&http.app, credential(&headers));
    Json(service::status(&http.app, &viewer))
}

/// What this node did over the last ten minutes, per five seconds: asks, invocations and
/// replicated writes (rows, receipts) with their latency (no credential, like `/metrics`). The console charts it.
#[utoipa::path(get, path = "/api/cluster/activity",
    responses((status = 200, body = crate::activity::History)))]
pub async fn activity(State(http): State<Http>) -> Json<crate::activity::History> {
    Json(http.app.activity.history())
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

/// Where leadership should go.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveLeader {
    /// The voter to lead; absent: the voter furthest along.
    #[serde(default)]
    to: Option<u64>,
}

/// Adds a member (admin key); any node hands the change to the leader. Idempotent.
#[utoipa::path(post, path = "/api/cluster/members", request_body = AddMember,
    responses((status = 200, description = "member added (or already there)"), (status = 409, description = "refused"), (status = 503, description = "no leader or quorum")))]
pub async fn add_member(
    State(http): State<Http>,
    peer: Peer,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ServiceError> {
    let app = &http.app;
    let admin = admin_write(app, caller(&headers, peer), "change the membership")?;
    let add: AddMember = read_json(&headers, body, 64 * 1024).await?;
    let id = add.id;
    let add = service::AddMember {
        id,
        grpc_addr: add.grpc_addr,
        http_addr: add.http_addr,
        learner: add.learner,
    };
    service::add_member(app, &admin, add).await?;
    Ok(Json(json!({ "ok": true, "id": id })).into_response())
}

/// Moves leadership (admin key): `{"to": 2}` to a named voter, `{}` to the voter furthest
/// along. Any node hands the request to the leader; writes pause for the handover.
#[utoipa::path(post, path = "/api/cluster/leader", request_body = MoveLeader,
    responses((status = 200, description = "`{ok, leader}`: the leader now"), (status = 401, description = "no admin key"), (status = 409, description = "not a voter"), (status = 503, description = "no leader, or the named voter did not take over in time")))]
pub async fn move_leader(
    State(http): State<Http>,
    peer: Peer,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ServiceError> {
    let admin = admin_write(&http.app, caller(&headers, peer), "move the leader")?;
    let moved: MoveLeader = read_json(&headers, body, 1024).await?;
    let leader = service::move_leader(&http.app, &admin, moved.to).await?;
    Ok(Json(json!({ "ok": true, "leader": leader })).into_response())
}

/// Removes a voter or a learner (admin key); any node hands the change to the leader.
#[utoipa::path(delete, path = "/api/cluster/members/{id}", params(("id" = u64, Path, description = "node id")),
    responses((status = 200, description = "member removed"), (status = 409, description = "not a member, or refused"), (status = 503, description = "no leader or quorum")))]
pub async fn remove_member(
    State(http): State<Http>,
    peer: Peer,
    headers: HeaderMap,
    Path(id): Path<u64>,
) -> Result<Response, ServiceError> {
    let admin = admin_write(&http.app, caller(&headers, peer), "change the membership")?;
    service::remove_member(&http.app, &admin, id).await?;
    Ok(Json(json!({ "ok": true, "removed": id })).into_response())
}

/// Digests of this node's directory and receipt log at its applied index (admin key), so an
/// operator or the chaos harness can check that nodes converged.
#[utoipa::path(get, path = "/api/cluster/digest", params(ReadOptions), responses((status = 200, description = "`{index, rows, rows_sha256, receipts, receipts_sha256}`"), (status = 401, description = "no admin key")))]
pub async fn digest(
    State(http): State<Http>,
    headers: HeaderMap,
    Query(read): Query<ReadOptions>,
) -> Result<Json<service::Digest>, ServiceError> {
    let admin = Admin::check(&http.app, credential(&headers), "read cluster digests")?;
    let fresh = read.freshness(&headers)?;
    Ok(Json(service::digest(&http.app, &admin, &fresh).await?))
}

/// A consistent backup of the node's applied state (admin key): a header line naming the
/// index and log id it was cut at, then the snapshot's lines. `rowcall backup FILE` saves
/// it; `rowcall-node --restore FILE --bootstrap` founds a new cluster from it.
#[utoipa::path(get, path = "/api/cluster/backup", responses(
    (status = 200, description = "the backup (`application/x-ndjson`), with headers `x-rowcall-backup-index` and `x-rowcall-backup-sha256` (of the whole body)"),
    (status = 401, description = "no admin key"),
    (status = 503, description = "no snapshot could be built in time")))]
pub async fn backup(
    State(http): State<Http>,
    headers: HeaderMap,
) -> Result<Response, ServiceError> {
    let admin = Admin::check(&http.app, credential(&headers), "take backups")?;
    let backup = service::backup(&http.app, &admin).await?;
    let head = futures_util::stream::once(std::future::ready(Ok::<_, std::io::Error>(
        axum::body::Bytes::from(backup.header_line),
    )));
    let file = backup.file;
    let rest = futures_util::stream::try_unfold(file, |mut file| async move {
        use tokio::io::AsyncReadExt as _;
        let mut chunk = vec![0; 64 * 1024];
        let n = file.read(&mut chunk).await?;
        chunk.truncate(n);
        Ok((n > 0).then(|| (axum::body::Bytes::from(chunk), file)))
    });
    let body = Body::from_stream(futures_util::StreamExt::chain(head, rest));
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson".to_owned()),
            (header::CONTENT_LENGTH, backup.len.to_string()),
            (header::CACHE_CONTROL, "no-store".to_owned()),
        ],
        [
            ("x-rowcall-backup-index", backup.header.index().to_string()),
            ("x-rowcall-backup-sha256", backup.sha256),
        ],
        body,
    )
        .into_response())
}

/// Builds a snapshot now and purges the log behind it (admin key).
#[utoipa::path(post, path = "/api/cluster/snapshot", responses((status = 202, description = "snapshot started"), (status = 401, description = "no admin key")))]
pub async fn snapshot(
    State(http): State<Http>,
    peer: Peer,
    headers: HeaderMap,
) -> Result<Response, ServiceError> {
    let admin = admin_write(&http.app, caller(&headers, peer), "trigger snapshots")?;
    service::snapshot(&http.app, &admin).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "ok": true, "snapshot": "started" })),
    )
        .into_response())
}

/// What `POST /api/cluster/join-token` takes.
#[derive(Debug, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JoinTokenBody {
    /// Seconds the token stays valid (60 to 604800; default 3600).
    pub ttl_seconds: Option<u64>,
}

/// Mints a join token (admin key): a fresh node started with it (`ROWCALL_JOIN_TOKEN`) and
/// `--join` receives the cluster's peer credential from any member.
#[utoipa::path(post, path = "/api/cluster/join-token", request_body(content = JoinTokenBody, description = "optional"), responses((status = 200, description = "the token and when it expires"), (status = 401, description = "no admin key")))]
pub async fn join_token(
    State(http): State<Http>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ServiceError> {
    let admin = Admin::check(&http.app, credential(&headers), "mint join tokens")?;
    let asked: JoinTokenBody = if body.iter().all(u8::is_ascii_whitespace) {
        JoinTokenBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| ServiceError::MalformedJson(e.to_string()))?
    };
    let minted = service::join_token(&http.app, &admin, asked.ttl_seconds)?;
    Ok(Json(json!({
        "ok": true,
        "token": minted.token,
        "expires_at": crate::model::time::format_ms(minted.expires_ms),
    }))
    .into_response())
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "alive")))]
pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "ok": true }))
}

/// Readiness for load balancers: 200 when ready, 503 otherwise.
#[utoipa::path(get, path = "/readyz", responses((status = 200, description = "ready"), (status = 503, description = "not ready")))]
pub async fn readyz(State(http): State<Http>) -> Response {
    let readiness = service::readiness(&http.app).await;
    let status = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(readiness)).into_response()
}

/// Prometheus text exposition.
#[utoipa::path(get, path = "/metrics", responses((status = 200, description = "Prometheus text format")))]
pub async fn metrics(State(http): State<Http>) -> Response {
    let app = &http.app;
    let counts = app.catalogue.read().counts();
    let (index_bytes, rows_bytes) = {
        let catalogue = app.catalogue.read();
        (catalogue.index_bytes(), catalogue.rows_bytes())
    };
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
    // Read at the scrape: an alarm applied a moment ago shows at once.
    if let Ok(alarms) = crate::cluster::space::alarms(app) {
        metrics::gauge!(crate::metrics::STORAGE_ALARMS, "node" => node.clone())
            .set(alarms.len() as f64);
    }
    let raft = app.raft.metrics().borrow_watched().clone();
    // Counted only when an append goes unanswered: the series of each member is made at 0
    // first, so that a rule's `rate()` sees it rise from there (and a healthy cluster has it).
    for (peer, _) in raft.membership_config.membership().nodes() {
        if *peer != app.node_id {
            metrics::counter!(crate::metrics::APPENDS_UNANSWERED_TOTAL, "peer" => peer.to_string())
                .increment(0);
        }
    }
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
    metrics::gauge!(crate::metrics::CATALOGUE_ROWS_BYTES, "node" => node.clone())
        .set(rows_bytes as f64);
    metrics::gauge!(crate::metrics::RANKING_OTHERWISE, "node" => node.clone())
        .set(app.ranking_peers.otherwise().len() as f64);
    let is_ready = service::readiness(app).await.ready;
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
    let behind = matches!(
        app.standing(),
        crate::raft::standing::Standing::Behind { .. }
    );
    metrics::gauge!(crate::metrics::STATE_BEHIND, "node" => node.clone()).set(if behind {
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
