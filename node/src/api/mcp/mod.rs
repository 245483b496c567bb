//! The MCP projection of the catalogue (DESIGN §5): Streamable HTTP (spec 2025-11-25, and
//! 2026-07-28 clients) on rmcp, mounted in the node's axum router.
//!
//! ```text
//!   POST/GET/DELETE /api/mcp[/compact]
//!     └─ authenticate (Bearer: an MCP token or the admin key; else 401 + WWW-Authenticate)
//!        └─ owner check: a session or stream of another credential is 404 (sessions.rs)
//!         └─ rmcp StreamableHttpService: Host / Origin (403) / MCP-Protocol-Version (400)
//!             ├─ Sessions (in memory; any node rebuilds a session it has not seen — sessions.rs)
//!             │    └─ Replay (event ids, Last-Event-ID resumption, bounded buffers — replay.rs)
//!             └─ Projection (one per session — handler.rs)
//!                  tools/list ── catalogue (key order, pages, opaque cursors — tools.rs)
//!                  tools/call ── service::dispatch::invoke_as (quota, auth, validation, receipt)
//!                  list_changed ◄── catalogue change feed ◄── state machine apply
//! ```
//!
//! **Rows mode** (`/api/mcp`): one tool per projected row. **Compact mode**
//! (`/api/mcp/compact`): `search`, `contract` and `invoke`, whose definitions never change.
//!
//! Stateless across nodes: sessions hold nothing but the id (see `sessions`), and every
//! node keeps the same catalogue, so any node answers any request of any session. A session's
//! GET stream gets `notifications/tools/list_changed` from the node serving it whenever that
//! node *applies* an entry that changes the projection — whichever node took the write.

mod cut;
mod handler;
mod replay;
mod session_id;
mod sessions;
mod test_tools;
pub mod tools;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures_util::StreamExt as _;
use rmcp::transport::common::http_header::{HEADER_LAST_EVENT_ID, HEADER_SESSION_ID};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tokio::sync::watch;

use self::handler::Projection;
use self::replay::{IdScanner, Replay};
use self::sessions::{RecognisedIds, SessionCaps, SessionRefusal, Sessions, OWNER};
use crate::api::presented_credential;
use crate::app::App;
use crate::auth::Scope;
use crate::config::Config;
use crate::service::quota::{Payer, Quota};
use crate::service::ServiceError;

/// Which projection an endpoint serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One tool per projected row.
    Rows,
    /// Search, contract, invoke.
    Compact,
}

/// Where the compact projection is served (the rows projection is at `/api/mcp`).
const COMPACT_PATH: &str = "/api/mcp/compact";

impl Mode {
    /// The mode of the endpoint at `path`.
    fn of_path(path: &str) -> Self {
        if path == COMPACT_PATH {
            Self::Compact
        } else {
            Self::Rows
        }
    }
}

/// The MCP routes. `stop` turns true when the node shuts down: open streams then end, so
/// that the HTTP server's graceful shutdown is not held up by idle SSE connections.
pub fn routes<S: Clone + Send + Sync + 'static>(
    app: &Arc<App>,
    mut stop: watch::Receiver<bool>,
) -> Router<S> {
    let base = server_config(&app.config);
    let cancel = base.cancellation_token.clone();
    tokio::spawn(async move {
        let _ = stop.wait_for(|stopped| *stopped).await;
        cancel.cancel();
    });
    let limits = &app.config.limits;
    let caps = Arc::new(SessionCaps::new(
        limits.max_mcp_sessions_per_token,
        limits.max_mcp_sessions,
        Duration::from_secs(app.config.mcp.session_idle_secs.max(1)),
    ));
    // One event store for both endpoints (stream ids are unique across them), shared with
    // the authentication layer, which checks and claims the streams' owners.
    let replay = Arc::new(Replay::default());
    Router::new()
        .route_service(
            "/api/mcp",
            service(app, Mode::Rows, base.clone(), replay.clone()),
        )
        .route_service(
            COMPACT_PATH,
            service(app, Mode::Compact, base, replay.clone()),
        )
        .route_layer(middleware::from_fn(end_session))
        .route_layer(middleware::from_fn_with_state(
            Guard {
                app: app.clone(),
                caps,
                replay,
            },
            authenticate,
        ))
}

fn service(
    app: &Arc<App>,
    mode: Mode,
    mut config: StreamableHttpServerConfig,
    replay: Arc<Replay>,
) -> StreamableHttpService<Projection, Sessions> {
    config.session_store = Some(Arc::new(RecognisedIds { mode }));
    let idle = Duration::from_secs(app.config.mcp.session_idle_secs.max(1));
    let app = app.clone();
    StreamableHttpService::new(
        move || Ok(Projection::new(app.clone(), mode)),
        Arc::new(Sessions::new(mode, idle, replay)),
        config,
    )
}

/// What the authentication layer needs.
#[derive(Clone)]
struct Guard {
    app: Arc<App>,
    caps: Arc<SessionCaps>,
    replay: Arc<Replay>,
}

/// rmcp's answer to a session it does not hold, given also for one another credential
/// holds: a caller learns nothing of other credentials' sessions and streams.
fn no_session() -> Response {
    (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response()
}

/// Whether the request names a session, or a stream to resume, that is not `owner`'s.
fn foreign(request: &Request, session: Option<&str>, owner: &str, replay: &Replay) -> bool {
    if session
        .and_then(session_id::owner)
        .is_some_and(|o| o != owner)
    {
        return true;
    }
    request
        .headers()
        .get(HEADER_LAST_EVENT_ID)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|last| !replay.resumable_by(last.trim(), owner))
}

/// An SSE response whose event ids are claimed for `owner` as they go out (see `replay`).
fn claiming(response: Response, owner: String, replay: Arc<Replay>) -> Response {
    let sse = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/event-stream"));
    if !sse {
        return response;
    }
    let (parts, body) = response.into_parts();
    let mut scanner = IdScanner::default();
    let body = body.into_data_stream().map(move |chunk| {
        if let Ok(bytes) = &chunk {
            scanner.feed(bytes, |id| replay.claim(id, &owner));
        }
        chunk
    });
    Response::from_parts(parts, Body::from_stream(body))
}

/// rmcp's transport settings from the node's configuration.
fn server_config(config: &Config) -> StreamableHttpServerConfig {
    StreamableHttpServerConfig::default()
        // Sessions exist for 2025-11-25 clients (their GET stream hangs off one);
        // 2026-07-28 requests are served statelessly whatever this says.
        .with_legacy_session_mode(true)
        .with_json_response(true)
        .with_allowed_hosts(allowed_hosts(config))
        .with_allowed_origins(allowed_origins(config))
        .enforce_origin_validation()
        .with_max_request_body_bytes(config.limits.max_body_bytes)
}

/// See [`crate::config::McpConfig::allowed_hosts`]; an empty list lets rmcp accept any.
fn allowed_hosts(config: &Config) -> Vec<String> {
    let configured = &config.mcp.allowed_hosts;
    if configured.iter().any(|h| h == "*") {
        return Vec::new();
    }
    if !configured.is_empty() {
        return configured.clone();
    }
    let listen = config.node.http.ip();
    if listen.is_unspecified() {
        tracing::warn!(
            "MCP accepts any Host header: the node listens on {listen}; set mcp.allowed_hosts \
             (ROWCALL_MCP_ALLOWED_HOSTS) to the names clients use"
        );
        return Vec::new();
    }
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    hosts.push(listen.to_string());
    for url in [&config.node.public_url, &config.node.advertise_http]
        .into_iter()
        .flatten()
    {
        let url = if url.contains("://") {
            url.clone()
        } else {
            format!("http://{url}")
        };
        if let Some(host) = url
            .parse::<Uri>()
            .ok()
            .and_then(|u| u.host().map(str::to_owned))
        {
            hosts.push(host);
        }
    }
    hosts.dedup();
    hosts
}

/// See [`crate::config::McpConfig::allowed_origins`].
fn allowed_origins(config: &Config) -> Vec<String> {
    if !config.mcp.allowed_origins.is_empty() {
        return config.mcp.allowed_origins.clone();
    }
    let mut origins: Vec<String> = ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .flat_map(|host| [format!("http://{host}:*"), format!("https://{host}:*")])
        .collect();
    if let Some(uri) = config
        .node
        .public_url
        .as_deref()
        .and_then(|u| u.parse::<Uri>().ok())
    {
        if let (Some(scheme), Some(host)) = (uri.scheme_str(), uri.host()) {
            let port = uri
                .port_u16()
                .unwrap_or(if scheme == "https" { 443 } else { 80 });
            origins.push(format!("{scheme}://{host}:{port}"));
        }
    }
    origins
}

/// Lets through requests bearing an MCP token (or the admin key), recording who they are
/// for the receipts; answers 401 with `WWW-Authenticate: Bearer` before rmcp sees anything
/// else, and 403 to a credential of another scope (an invoke key). A request that would
/// open a session on this node needs room under the session caps (see `sessions`). A request
/// naming a session or a stream to resume that another credential owns is 404, as for one
/// that does not exist, before anything else happens.
async fn authenticate(
    State(Guard { app, caps, replay }): State<Guard>,
    mut request: Request,
    next: Next,
) -> Response {
    let principal = presented_credential(request.headers())
        .filter(|token| !token.is_empty())
        .and_then(|token| app.credentials.identify(token));
    match principal {
        Some(principal) if principal.allows(Scope::Mcp) => {
            let session = request
                .headers()
                .get(HEADER_SESSION_ID)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let owner = principal.owner_tag();
            if foreign(&request, session.as_deref(), &owner, &replay) {
                return no_session();
            }
            let holder = principal.name.clone();
            let now = std::time::Instant::now();
            let closing = request.method() == axum::http::Method::DELETE;
            if request.method() == Method::POST {
                // Every JSON-RPC message spends an ask; a tools/call that runs a row spends an
                // invocation too, in the service's invoke path.
                let payer = Payer::of_principal(Some(&principal), None);
                if let Err(refused) = app.spending.spend(Quota::Ask, &payer) {
                    return refused.into_response();
                }
            }
            if !closing {
                if let Err(refusal) = caps.admit(&holder, session.as_deref(), now) {
                    let error = match refusal {
                        SessionRefusal::PerToken { limit } => ServiceError::TooManySessions {
                            name: holder,
                            limit,
                        },
                        SessionRefusal::Total { limit } => ServiceError::Busy {
                            what: "MCP sessions",
                            limit,
                        },
                    };
                    return error.into_response();
                }
            }
            request.extensions_mut().insert(principal);
            // A session created for this request is minted with its owner (see `sessions`).
            let response = OWNER.scope(owner.clone(), next.run(request)).await;
            let response = claiming(response, owner, replay);
            match (&session, response.headers().get(HEADER_SESSION_ID)) {
                // Closed, or an id rmcp did not accept: it holds no session here.
                (Some(id), _) if closing || response.status() == StatusCode::NOT_FOUND => {
                    caps.closed(id)
                }
                (None, Some(created)) => {
                    if let Ok(id) = created.to_str() {
                        caps.opened(&holder, id, now);
                    }
                }
                _ => {}
            }
            response
        }
        Some(principal) => refuse(
            StatusCode::FORBIDDEN,
            "Bearer realm=\"rowcall\", error=\"insufficient_scope\"",
            format!("credential {:?} may not use MCP", principal.name),
        ),
        None => refuse(
            StatusCode::UNAUTHORIZED,
            "Bearer realm=\"rowcall\"",
            "an MCP token is required: send Authorization: Bearer <token>".to_owned(),
        ),
    }
}

/// A session's DELETE: rmcp answers 202 Accepted, where clients expect 200 or 204 (the
/// Python SDK logs "Session termination failed: 202"); the session is closed by then, so the
/// answer is 204. An id this endpoint never issues is 404, as for any other request.
async fn end_session(request: Request, next: Next) -> Response {
    if request.method() != Method::DELETE {
        return next.run(request).await;
    }
    let mode = Mode::of_path(request.uri().path());
    let foreign = request
        .headers()
        .get(HEADER_SESSION_ID)
        .and_then(|id| id.to_str().ok())
        .is_some_and(|id| !session_id::well_formed(mode, id));
    if foreign {
        return no_session();
    }
    let mut response = next.run(request).await;
    if response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}

fn refuse(status: StatusCode, challenge: &'static str, message: String) -> Response {
    let code = if status == StatusCode::FORBIDDEN {
        "forbidden"
    } else {
        "unauthorized"
    };
    let body = json!({"ok": false, "error": {"code": code, "message": message,
        "hint": "MCP tokens come from ROWCALL_MCP_TOKENS (name=secret,…); the admin key also works"}});
    let mut response = (status, axum::Json(body)).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_default_to_loopback_and_the_listen_address() {
        let mut config = Config::default();
        config.node.http = "10.1.2.3:8080".parse().unwrap();
        config.node.public_url = Some("https://rowcall.example.com".into());
        let hosts = allowed_hosts(&config);
        for host in ["localhost", "127.0.0.1", "10.1.2.3", "rowcall.example.com"] {
            assert!(hosts.iter().any(|h| h == host), "{host} in {hosts:?}");
        }
        assert!(allowed_origins(&config).contains(&"https://rowcall.example.com:443".to_owned()));
        config.node.http = "0.0.0.0:8080".parse().unwrap();
        assert!(allowed_hosts(&config).is_empty(), "unspecified: any host");
        config.mcp.allowed_hosts = vec!["mcp.example.com".into()];
        assert_eq!(allowed_hosts(&config), ["mcp.example.com"]);
    }
}
