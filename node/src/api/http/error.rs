//! HTTP errors: every failure a client can see, mapped to status and JSON in one place.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::app::WriteError;
use crate::catalogue::row::RowRuleError;
use crate::dispatch::import::ImportError;
use crate::dispatch::share::ShareRefusal;
use crate::dispatch::{InvokeRefusal, RunError};

/// An error answered as `{"ok":false,"error":{"code","message","hint"}}`.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body is not well-formed JSON.
    #[error("malformed JSON: {0}")]
    MalformedJson(String),
    /// The JSON is well-formed but does not have the expected shape.
    #[error("{0}")]
    WrongShape(String),
    /// The request's parameters are wrong.
    #[error("{message}")]
    BadRequest {
        /// What is wrong.
        message: String,
        /// How to fix it.
        hint: &'static str,
    },
    /// The body is not JSON.
    #[error("content type must be application/json, not {0:?}")]
    UnsupportedMediaType(String),
    /// No credential, or one that is not recognised.
    #[error("{needed} required: send it as Authorization: Bearer <key> (or x-terminal-key)")]
    Unauthorized {
        /// Which credential the call needs.
        needed: &'static str,
    },
    /// A recognised credential that does not allow the call.
    #[error("credential {name:?} may not {action}")]
    Forbidden {
        /// The credential's name.
        name: String,
        /// What it tried.
        action: &'static str,
    },
    /// Nothing at that address.
    #[error("{0}")]
    NotFound(String),
    /// An `if_version` did not hold.
    #[error("version conflict on {key}: expected {expected}, stored {actual}")]
    Conflict {
        /// The row.
        key: String,
        /// The expected version.
        expected: u64,
        /// The stored version, or "none".
        actual: String,
    },
    /// The body is larger than the limit.
    #[error("request body is larger than {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// A row broke a rule of DESIGN §2.1.
    #[error(transparent)]
    Rule(#[from] RowRuleError),
    /// An element of a bulk write broke a rule.
    #[error("row {position} of the bulk write: {source}")]
    BulkRule {
        /// 0-based position in the array.
        position: usize,
        /// The rule.
        source: RowRuleError,
    },
    /// The invocation was refused before anything ran.
    #[error(transparent)]
    Invoke(#[from] InvokeRefusal),
    /// The cluster cannot take the write now, or its outcome is unknown.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// An `Idempotency-Key` already named a different request.
    #[error("Idempotency-Key {request_id} was used for a different request (at index {index})")]
    RequestIdReused {
        /// The key.
        request_id: String,
        /// The index of the request that used it first.
        index: u64,
    },
    /// This node has not applied the index the client asked for.
    #[error("this node has applied index {applied}, not yet {wanted}")]
    Behind {
        /// The index asked for.
        wanted: u64,
        /// The index applied.
        applied: u64,
    },
    /// A linearizable read could not get a read index from the leader.
    #[error("no linearizable read index: {0}")]
    NoReadIndex(String),
    /// A membership change failed.
    #[error(transparent)]
    Membership(#[from] crate::cluster::MembershipError),
    /// A share token was refused (the message is the reason).
    #[error(transparent)]
    Share(#[from] ShareRefusal),
    /// An MCP import failed.
    #[error(transparent)]
    Import(ImportError),
    /// Something failed inside the node; details go to the log only.
    #[error("internal error")]
    Internal(String),
}

impl From<ImportError> for ApiError {
    fn from(e: ImportError) -> Self {
        match e {
            ImportError::Write(write) => Self::Write(write),
            other => Self::Import(other),
        }
    }
}

/// Status and code of a failed invocation (or an import's upstream failure): the upstream's
/// failures are 502 (504 for a timeout), the SSRF guard's refusal 403, the node's own 500.
pub fn run_error_parts(e: &RunError) -> (StatusCode, &'static str) {
    use StatusCode as S;
    match e {
        RunError::BadArgs(_) => (S::UNPROCESSABLE_ENTITY, "invalid_args"),
        RunError::UnknownBuiltin(_) => (S::INTERNAL_SERVER_ERROR, "runner_failed"),
        RunError::Config(_) => (S::INTERNAL_SERVER_ERROR, "runner_misconfigured"),
        RunError::Refused(_) => (S::FORBIDDEN, "destination_refused"),
        RunError::Timeout { .. } => (S::GATEWAY_TIMEOUT, "upstream_timeout"),
        RunError::Unreachable(_) => (S::BAD_GATEWAY, "upstream_unreachable"),
        RunError::UpstreamStatus { .. } => (S::BAD_GATEWAY, "upstream_error"),
        RunError::TooLarge { .. } => (S::BAD_GATEWAY, "upstream_too_large"),
        RunError::TooManyRedirects { .. } => (S::BAD_GATEWAY, "too_many_redirects"),
        RunError::ToolError(_) => (S::BAD_GATEWAY, "upstream_tool_error"),
        RunError::Protocol(_) => (S::BAD_GATEWAY, "upstream_protocol_error"),
        RunError::BadTarget(_) => (S::BAD_GATEWAY, "bad_target"),
    }
}

impl ApiError {
    /// An internal failure: logged here, answered as a generic 500.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        Self::Internal(detail.to_string())
    }

    fn parts(&self) -> (StatusCode, &'static str, &'static str) {
        use StatusCode as S;
        match self {
            Self::MalformedJson(_) => (S::BAD_REQUEST, "malformed_json", "send a well-formed JSON body"),
            Self::WrongShape(_) => (S::UNPROCESSABLE_ENTITY, "invalid_body", "see /api/openapi.json for the body's shape"),
            Self::BadRequest { hint, .. } => (S::BAD_REQUEST, "bad_request", hint),
            Self::UnsupportedMediaType(_) => (S::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", "send Content-Type: application/json"),
            Self::Unauthorized { .. } => (S::UNAUTHORIZED, "unauthorized", "the admin key is printed at first start, or set ROWCALL_ADMIN_KEY; invoke keys come from ROWCALL_INVOKE_KEYS"),
            Self::Forbidden { .. } => (S::FORBIDDEN, "forbidden", "use a credential with the needed scope (directory writes need the admin key)"),
            Self::NotFound(_) => (S::NOT_FOUND, "not_found", "ask GET /api/dispatch?ask=<what you need> to find a key"),
            Self::Conflict { .. } => (S::CONFLICT, "version_conflict", "read the row again and retry with its current version as if_version"),
            Self::TooLarge { .. } => (S::PAYLOAD_TOO_LARGE, "body_too_large", "split a bulk write into smaller arrays"),
            Self::Rule(_) | Self::BulkRule { .. } => (S::UNPROCESSABLE_ENTITY, "invalid_row", "fix the field named in the message; GET /api/directory shows the field schema"),
            Self::Invoke(InvokeRefusal::Disabled(_)) => (S::FORBIDDEN, "row_disabled", "an operator must enable the row before it can run"),
            Self::Invoke(InvokeRefusal::InvalidArgs { .. }) => (S::UNPROCESSABLE_ENTITY, "invalid_args", "GET /api/dispatch?key=<KEY> shows the schema and an example"),
            Self::Invoke(InvokeRefusal::NotRecorded(_)) => (S::SERVICE_UNAVAILABLE, "receipt_not_stored", "the node's storage failed; retry on another node"),
            Self::Write(WriteError::Unavailable { .. }) => (S::SERVICE_UNAVAILABLE, "no_quorum", "the cluster has no quorum right now; retry after the Retry-After delay"),
            Self::Write(WriteError::NotLeader { .. }) => (S::SERVICE_UNAVAILABLE, "no_leader", "the cluster is electing a leader; retry shortly"),
            Self::Write(WriteError::OutcomeUnknown { .. }) => (S::GATEWAY_TIMEOUT, "outcome_unknown", "the write may or may not have taken effect: retry it with the header Idempotency-Key set to request_id, and a repeat is answered with the first attempt's outcome"),
            Self::RequestIdReused { .. } => (S::UNPROCESSABLE_ENTITY, "idempotency_key_reused", "use a fresh Idempotency-Key for each distinct write, the same one only for retries of it"),
            Self::Write(WriteError::Fatal(_)) => (S::SERVICE_UNAVAILABLE, "shutting_down", "this node is stopping; use another node"),
            Self::NoReadIndex(_) => (S::SERVICE_UNAVAILABLE, "no_read_index", "the leader or a quorum is unreachable; retry, or read without consistency=linearizable"),
            Self::Membership(crate::cluster::MembershipError::Rejected { .. }) => (S::CONFLICT, "membership_rejected", "see GET /api/cluster for the current members"),
            Self::Membership(_) => (S::SERVICE_UNAVAILABLE, "no_quorum", "the cluster has no leader or quorum right now; retry"),
            Self::Behind { .. } => (S::SERVICE_UNAVAILABLE, "behind", "retry, or ask a node that has caught up"),
            Self::Share(ShareRefusal::Unchecked(_)) => (S::SERVICE_UNAVAILABLE, "share_unchecked", "the node could not read its revocation list; retry"),
            Self::Share(ShareRefusal::Stale) => (S::SERVICE_UNAVAILABLE, "share_unchecked", "this node is cut off from the leader, so it may not know of a revocation; retry on another node"),
            Self::Share(_) => (S::UNAUTHORIZED, "share_token_refused", "ask for a new link (an ask with an invoke key), or send Authorization: Bearer <invoke key>"),
            Self::Import(ImportError::Invalid(_)) => (S::UNPROCESSABLE_ENTITY, "invalid_body", "send {\"url\": \"https://host/mcp\", \"prefix\": \"P\", \"category\": \"C\"}"),
            Self::Import(ImportError::Upstream(e)) => {
                let (status, code) = run_error_parts(e);
                (status, code, "check the URL, the allow-list (ROWCALL_HTTP_ALLOW), and that the server speaks MCP over Streamable HTTP")
            }
            Self::Import(ImportError::KeyTaken { .. }) => (S::CONFLICT, "key_taken", "import with a prefix so the keys do not collide"),
            Self::Import(ImportError::Changed { .. }) => (S::CONFLICT, "version_conflict", "run the import again"),
            Self::Import(ImportError::Write(_)) => (S::SERVICE_UNAVAILABLE, "no_quorum", "the cluster has no quorum right now; retry after the Retry-After delay"),
            Self::Internal(_) => (S::INTERNAL_SERVER_ERROR, "internal", "retry; if it persists, the node's log has the details"),
        }
    }
}

impl ApiError {
    /// The status and the JSON body `{"ok":false,"error":{…}}` this error is answered with
    /// (also the `structuredContent` of a failed MCP tool call).
    pub fn wire(&self) -> (StatusCode, serde_json::Value) {
        let (status, code, hint) = self.parts();
        let message = match self {
            Self::Internal(detail) => {
                tracing::error!(%detail, "internal error answered as 500");
                "internal error".to_owned()
            }
            Self::Write(WriteError::Fatal(detail)) => {
                tracing::warn!(%detail, "write refused: raft stopped");
                "this node is shutting down".to_owned()
            }
            other => other.to_string(),
        };
        let mut error = json!({ "code": code, "message": message, "hint": hint });
        if let Self::Write(WriteError::OutcomeUnknown { request_id, .. }) = self {
            error["request_id"] = json!(request_id);
        }
        if let Self::Invoke(InvokeRefusal::InvalidArgs { violations, .. }) = self {
            error["violations"] = violations
                .iter()
                .map(|(pointer, message)| json!({ "pointer": pointer, "message": message }))
                .collect();
        }
        (status, json!({ "ok": false, "error": error }))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let unknown = matches!(self, Self::Write(WriteError::OutcomeUnknown { .. }));
        let (status, body) = self.wire();
        let mut response = (status, axum::Json(body)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE || unknown {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
