//! The HTTP protocol of DESIGN §3 on axum: dispatch (ask, contract, invoke, confirm), the
//! directory, receipts, cluster status, health and metrics, and the OpenAPI description.
//! Handlers only translate: query, headers and body to a [`crate::service`] call, its answer
//! to JSON, its error to a status (`error.rs`).
//!
//! Every answer carries `x-rowcall-index`: the write's index for writes, otherwise the index
//! this node had applied when it answered.

mod changes;
mod cluster;
pub mod console;
mod directory;
mod dispatch;
pub mod error;
mod import;
pub mod limits;
mod openapi;
mod receipts;
pub mod serve;
mod share;
pub mod tls;
mod transparency;

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse as _, Response};
use axum::routing::{delete, get, post};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tracing::Instrument as _;

use crate::app::App;
use crate::raft::{BadRequestId, RequestId};
use crate::service::{Freshness, Logged, ServiceError};
use crate::trace::{self, TraceId};

/// Header carrying the applied (or written) index.
pub const INDEX_HEADER: &str = "x-rowcall-index";
/// Header marking an answer served while this node is cut off from the leader.
pub const STALE_HEADER: &str = "x-rowcall-stale";
/// Header asking a read to wait until this node applied an index.
pub const MIN_INDEX_HEADER: &str = "x-rowcall-min-index";
/// Header naming a write request, so a retry is answered with the first outcome.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// Header on a write answered with the outcome of an earlier attempt of the same request.
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";
/// Header carrying a share token (instead of `share=` in the URL, where logs keep it).
pub const SHARE_HEADER: &str = "x-rowcall-share";

/// The share token in the `x-rowcall-share` header, if any.
fn share_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(SHARE_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// Marks an answer that carries a share token as never to be stored by a cache or browser.
fn no_store(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-store, private"),
    );
    response
}

/// The request id of a write: the client's `Idempotency-Key`, or a fresh one.
fn request_id(headers: &HeaderMap) -> Result<RequestId, ServiceError> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(RequestId::generate());
    };
    value
        .to_str()
        .ok()
        .and_then(|key| RequestId::parse(key).ok())
        .ok_or_else(|| ServiceError::BadRequest {
            message: BadRequestId.to_string(),
            hint: "send a fresh UUID as Idempotency-Key, and the same one on every retry of one write",
        })
}

/// Stamps a write's answer: its index, and whether it replays an earlier attempt.
fn written_headers(mut response: Response, logged: Logged) -> Response {
    let headers = response.headers_mut();
    headers.insert(INDEX_HEADER, HeaderValue::from(logged.index));
    if logged.replayed.is_some() {
        headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    response
}

/// State of the HTTP layer.
#[derive(Clone)]
pub struct Http {
    /// The node.
    pub app: Arc<App>,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
    /// Turns true when the node shuts down: long-lived streams end.
    pub stop: watch::Receiver<bool>,
}

/// The client's address, as the connection loop recorded it (`ConnectInfo`); `None` when
/// the router is served without one. What a caller may spend is keyed on it when no
/// credential is presented ([`crate::service::quota::Payer`]).
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub Option<std::net::IpAddr>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        let info = parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>();
        Ok(Self(info.map(|c| c.0.ip())))
    }
}

/// The full router. `stop` turns true when the node shuts down.
pub fn router(app: Arc<App>, metrics: PrometheusHandle, stop: watch::Receiver<bool>) -> Router {
    let mcp = crate::api::mcp::routes(&app, stop.clone());
    let state = Http { app, metrics, stop };
    Router::new()
        .route(
            "/api/dispatch",
            get(dispatch::get_dispatch).post(dispatch::post_invoke),
        )
        .route(
            "/api/directory",
            get(directory::list).post(directory::upsert),
        )
        .route("/api/directory/counts", get(directory::counts))
        .route("/api/directory/import-mcp", post(import::import_mcp))
        .route("/api/share", post(share::mint))
        .route("/api/share/rotate", post(share::rotate))
        .route("/api/share/{id}", delete(share::revoke))
        .route("/api/directory/changes", get(changes::changes))
        .route(
            "/api/directory/{key}",
            get(directory::get_row).delete(directory::delete_row),
        )
        .route("/api/receipts", get(receipts::by_key))
        .route(
            "/api/receipts/checkpoint",
            get(transparency::checkpoint).post(transparency::request_checkpoint),
        )
        .route("/api/receipts/proof", get(transparency::prove))
        .route("/api/receipts/consistency", get(transparency::consistency))
        .route("/api/receipts/leaves", get(transparency::leaves))
        .route("/api/receipts/{id}", get(receipts::by_id))
        .route("/receipt/{id}", get(receipts::public_page))
        .route("/api/cluster", get(cluster::status))
        .route("/api/cluster/activity", get(cluster::activity))
        .route("/api/cluster/snapshot", post(cluster::snapshot))
        .route("/api/cluster/digest", get(cluster::digest))
        .route("/api/cluster/backup", get(cluster::backup))
        .route("/api/cluster/members", post(cluster::add_member))
        .route("/api/cluster/join-token", post(cluster::join_token))
        .route("/api/cluster/members/{id}", delete(cluster::remove_member))
        .route("/api/cluster/leader", post(cluster::move_leader))
        .route("/api/openapi.json", get(openapi::document))
        .route("/metrics", get(cluster::metrics))
        .route("/healthz", get(cluster::healthz))
        .route("/console", get(console::page))
        .route("/console/console.js", get(console::script))
        .route("/console/console.css", get(console::style))
        .route("/readyz", get(cluster::readyz))
        .merge(mcp)
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), limits::limit))
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .with_state(state)
}

async fn not_found() -> ServiceError {
    ServiceError::NotFound("no such endpoint; GET /api/openapi.json lists them".into())
}

/// What a node whose folder went back behind its promises answers instead of serving
/// (`raft::standing`): everything but its health, readiness, metrics, cluster view and the
/// console that shows it, which an operator needs to see why.
fn refused_while_behind(app: &App, route: &str) -> Option<ServiceError> {
    let crate::raft::standing::Standing::Behind { reason } = app.standing() else {
        return None;
    };
    let operator = ["/healthz", "/readyz", "/metrics"].contains(&route)
        || route.starts_with("/api/cluster")
        || route.starts_with("/console");
    (!operator).then_some(ServiceError::StateBehind(reason))
}

/// Serves the request under its id ([`crate::trace`]), records request metrics, and stamps
/// `x-request-id` and `x-rowcall-index` on the answer.
async fn observe(State(http): State<Http>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = method_label(request.method());
    let id = {
        let header = |name| request.headers().get(name).map(HeaderValue::as_bytes);
        TraceId::from_headers(header(trace::HEADER), header(trace::TRACEPARENT))
    };
    let span = tracing::info_span!("http", request_id = %id, method, route);
    crate::telemetry::adopt_caller(&span, request.headers());
    let mut response = match refused_while_behind(&http.app, &route) {
        Some(refusal) => refusal.into_response(),
        None => {
            id.clone()
                .scope(next.run(request))
                .instrument(span.clone())
                .await
        }
    };
    if let Ok(value) = HeaderValue::from_str(id.as_str()) {
        response.headers_mut().insert(trace::HEADER, value);
    }
    if !route.starts_with("/api/mcp") && is_plain_rejection(&response) {
        response = json_rejection(response).await;
    }
    if http.app.is_stale() {
        // Served from what this node has, while it cannot reach the leader or a quorum.
        response
            .headers_mut()
            .insert(STALE_HEADER, HeaderValue::from_static("true"));
    }
    if !response.headers().contains_key(INDEX_HEADER) {
        let index = http.app.applied_index();
        response
            .headers_mut()
            .insert(INDEX_HEADER, HeaderValue::from(index));
    }
    let status = response.status().as_u16().to_string();
    metrics::counter!(crate::metrics::HTTP_REQUESTS_TOTAL,
        "route" => route.clone(), "method" => method, "status" => status)
    .increment(1);
    let elapsed = started.elapsed();
    span.in_scope(|| {
        tracing::debug!(
            status = response.status().as_u16(),
            ms = elapsed.as_millis() as u64,
            "answered"
        );
    });
    metrics::histogram!(crate::metrics::HTTP_REQUEST_SECONDS, "route" => route)
        .record(elapsed.as_secs_f64());
    response
}

/// The `method` label of request metrics: the methods HTTP defines, or `other`, so that
/// made-up methods cannot add series.
fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    [
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::HEAD,
        Method::OPTIONS,
        Method::PATCH,
        Method::CONNECT,
        Method::TRACE,
    ]
    .iter()
    .find(|known| *known == method)
    .map_or("other", Method::as_str)
}

/// Whether `response` is a plain-text client error from axum itself (an extractor's
/// rejection, or a method the route does not have) rather than one of ours.
fn is_plain_rejection(response: &Response) -> bool {
    response.status().is_client_error()
        && response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_none_or(|ct| ct.starts_with("text/plain"))
}

/// Rewrites an axum rejection into rowcall's JSON error shape, keeping its status, so every
/// error a client sees has the same form.
async fn json_rejection(response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let message = String::from_utf8_lossy(&text).trim().to_owned();
    let (code, hint) = match parts.status.as_u16() {
        404 => ("not_found", "GET /api/openapi.json lists the endpoints"),
        405 => (
            "method_not_allowed",
            "GET /api/openapi.json lists each endpoint's methods",
        ),
        413 => ("body_too_large", "send a smaller body"),
        415 => (
            "unsupported_media_type",
            "send Content-Type: application/json",
        ),
        422 => ("invalid_body", "see /api/openapi.json for the body's shape"),
        _ => (
            "bad_request",
            "check the query parameters and path against /api/openapi.json",
        ),
    };
    let message = if message.is_empty() {
        parts
            .status
            .canonical_reason()
            .unwrap_or("bad request")
            .to_owned()
    } else {
        message
    };
    let body =
        serde_json::json!({"ok": false, "error": {"code": code, "message": message, "hint": hint}});
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(body.to_string()))
}

/// The credential the request presents, if any.
fn credential(headers: &HeaderMap) -> Option<&str> {
    crate::api::presented_credential(headers)
}

/// Where the request comes from: its credential and its client's address.
fn caller(headers: &HeaderMap, Peer(peer): Peer) -> crate::service::quota::Caller<'_> {
    crate::service::quota::Caller {
        credential: credential(headers),
        peer,
    }
}

/// Reads a JSON body: checks the content type, refuses a declared length over the limit
/// before reading anything, and stops reading at the limit.
async fn read_json<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<T, ServiceError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return Err(ServiceError::UnsupportedMediaType(content_type.to_owned()));
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(ServiceError::TooLarge { limit });
    }
    let bytes = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| ServiceError::TooLarge { limit })?;
    serde_json::from_slice(&bytes).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => ServiceError::WrongShape(e.to_string()),
        _ => ServiceError::MalformedJson(e.to_string()),
    })
}

/// How fresh a read must be.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReadOptions {
    /// Wait (bounded) until this node applied this index: send back an earlier answer's
    /// `x-rowcall-index` to keep reading your writes on any node. The header
    /// `x-rowcall-min-index` does the same.
    min_index: Option<u64>,
    /// `linearizable`: confirm with the leader and a quorum first (read index), then answer.
    consistency: Option<String>,
}

impl ReadOptions {
    /// The freshness a read asks for: the larger of `min_index` and the
    /// `x-rowcall-min-index` header, and the consistency.
    fn freshness(self, headers: &HeaderMap) -> Result<Freshness, ServiceError> {
        let from_header = headers
            .get(MIN_INDEX_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(|v| Freshness::parse_min_index(MIN_INDEX_HEADER, v))
            .transpose()?;
        Ok(Freshness {
            min_index: from_header.max(self.min_index),
            consistency: self.consistency,
        })
    }
}

/// The freshness of a request without read options in its query (writes and invocations):
/// only the `x-rowcall-min-index` header.
fn header_freshness(headers: &HeaderMap) -> Result<Freshness, ServiceError> {
    ReadOptions::default().freshness(headers)
}
