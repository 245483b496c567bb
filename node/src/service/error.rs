//! The service layer's one error: every failure a caller can see, with its kind (which each
//! front end maps to its own status: HTTP in `api::http::error`, gRPC in `api::grpc`), a
//! stable code and a hint. Code, message and hint are the same on every front end.

use serde::Serialize;
use serde_json::{json, Value};

use crate::catalogue::row::RowRuleError;
use crate::dispatch::import::ImportError;
use crate::dispatch::share::SecretError;
use crate::dispatch::{InvokeRefusal, RunError};
use crate::model::share::ShareRefusal;
use crate::raft::calls::{MembershipError, WriteError};

/// The class of a failure, which a front end turns into its status (the HTTP status is
/// named after each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// 400: the request's parameters or body are malformed.
    BadRequest,
    /// 401: no credential, or one that is not recognised.
    Unauthenticated,
    /// 403: the credential may not do this, or the row or destination is refused.
    PermissionDenied,
    /// 404: nothing there.
    NotFound,
    /// 405: not by this method (a GET link may not run a row that changes something).
    MethodNotAllowed,
    /// 408: the request did not arrive in time.
    RequestTimeout,
    /// 409: a version or membership precondition did not hold.
    Conflict,
    /// 413: the request is larger than the limit.
    TooLarge,
    /// 415: the body is not JSON.
    UnsupportedMediaType,
    /// 422: well-formed, but breaks a rule (row fields, argument schema).
    Invalid,
    /// 429: over the caller's rate limit; retry after the delay given.
    TooManyRequests,
    /// 500: the node failed.
    Internal,
    /// 507: a member's storage is short (its data folder past its quota, or its disk nearly
    /// full): writes that grow the store wait until space is freed.
    InsufficientStorage,
    /// 502: an upstream the node called failed.
    BadGateway,
    /// 503: the cluster (or this node) cannot serve it now; retry.
    Unavailable,
    /// 504: an upstream the node called did not answer in time.
    GatewayTimeout,
}

/// The error object of every failed answer: `{"code","message","hint"}`, plus each schema
/// violation for invalid arguments.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorDetail {
    /// Stable, machine-readable: `not_found`, `invalid_args`, `behind`, …
    pub code: &'static str,
    /// What went wrong, for people.
    pub message: String,
    /// How to fix it.
    pub hint: &'static str,
    /// For `outcome_unknown`: the request id to retry the write with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// For `invalid_args`: each violation of the row's `args_schema`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub violations: Vec<Violation>,
}

/// One way the arguments break the row's `args_schema`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Violation {
    /// JSON pointer into the arguments.
    pub pointer: String,
    /// What is wrong there.
    pub message: String,
}

/// A failed operation, answered as `{"ok":false,"error":{"code","message","hint"}}`.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
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
    /// A linearizable read could not get a read index from the leader. The reason (which
    /// names peers' addresses when one was unreachable) goes to the log only: anyone may
    /// ask for a linearizable read, and member addresses are the admin's to know
    /// (`view::Viewer::status`).
    #[error("no linearizable read index: the leader or a quorum did not confirm one in time")]
    NoReadIndex(String),
    /// This node's data folder went back behind what it promised its peers: it serves
    /// nothing from it until re-admitted (the message says what to do).
    #[error("{0}")]
    StateBehind(String),
    /// A membership change failed.
    #[error(transparent)]
    Membership(#[from] MembershipError),
    /// A share token was refused (the message is the reason).
    #[error(transparent)]
    Share(#[from] ShareRefusal),
    /// An MCP import failed.
    #[error(transparent)]
    Import(ImportError),
    /// A row that changes something was asked to run by GET (a link, an `<img>`, an
    /// unfurler); it runs only by POST.
    #[error("{key} is a {risk} row: it runs only by POST /api/dispatch, never by a GET link")]
    PostOnly {
        /// The row.
        key: String,
        /// Its risk.
        risk: &'static str,
    },
    /// The caller is over its rate limit.
    #[error("too many {what} requests from {subject}; retry in {retry_after_secs} s")]
    RateLimited {
        /// Which quota (`ask`, `invoke`, `write`).
        what: &'static str,
        /// Whose (`this address`, `credential "ci"`).
        subject: String,
        /// Seconds until the quota allows one more.
        retry_after_secs: u64,
    },
    /// This node is at a concurrency limit (invocations, change-feed streams, MCP sessions).
    #[error("this node is serving as many {what} as it allows ({limit}); retry shortly")]
    Busy {
        /// What is at its limit.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// One credential holds as many MCP sessions as it may.
    #[error("credential {name:?} holds {limit} MCP sessions on this node, its limit")]
    TooManySessions {
        /// The credential.
        name: String,
        /// The limit.
        limit: usize,
    },
    /// One client holds as many change-feed or Watch streams as it may.
    #[error("{subject} holds {limit} change-feed streams on this node, its limit")]
    TooManyStreams {
        /// Whose (`this address`, `credential "ci"`).
        subject: String,
        /// The limit.
        limit: usize,
    },
    /// The request body did not arrive within the body read timeout.
    #[error("the request body did not arrive within {ms} ms")]
    BodyTimeout {
        /// The limit.
        ms: u64,
    },
    /// A receipt, or a tree size, that no co-signed checkpoint covers yet.
    #[error("{0}")]
    NotCheckpointed(String),
    /// A checkpoint was asked for, and a majority of voters did not sign one in time.
    #[error("no checkpoint was co-signed within {secs} s")]
    CheckpointTimeout {
        /// How long it waited.
        secs: u64,
    },
    /// A member holds a storage alarm ([`crate::cluster::space`]): nothing that grows the
    /// store is taken until it clears.
    #[error("{}: the cluster takes no row writes or invocations until it has room again (reads, asks, confirms and deletes still work)", .0.describe())]
    NoSpace(Box<crate::model::alarm::StorageAlarm>),
    /// Something failed inside the node; details go to the log only.
    #[error("internal error")]
    Internal(String),
}

impl From<ImportError> for ServiceError {
    fn from(e: ImportError) -> Self {
        match e {
            ImportError::Write(write) => Self::Write(write),
            other => Self::Import(other),
        }
    }
}

impl From<SecretError> for ServiceError {
    fn from(e: SecretError) -> Self {
        match e {
            SecretError::Write(write) => Self::Write(write),
            other => Self::internal(other),
        }
    }
}

/// Kind and code of a failed invocation (or an import's upstream failure): the upstream's
/// failures are 502 (504 for a timeout), the SSRF guard's refusal 403, the node's own 500.
pub fn run_error_parts(e: &RunError) -> (ErrorKind, &'static str) {
    use ErrorKind as S;
    match e {
        RunError::BadArgs(_) => (S::Invalid, "invalid_args"),
        RunError::UnknownBuiltin(_) => (S::Internal, "runner_failed"),
        RunError::Config(_) => (S::Internal, "runner_misconfigured"),
        RunError::Refused(_) => (S::PermissionDenied, "destination_refused"),
        RunError::Timeout { .. } => (S::GatewayTimeout, "upstream_timeout"),
        RunError::Unreachable(_) => (S::BadGateway, "upstream_unreachable"),
        RunError::UpstreamStatus { .. } => (S::BadGateway, "upstream_error"),
        RunError::TooLarge { .. } => (S::BadGateway, "upstream_too_large"),
        RunError::TooManyRedirects { .. } => (S::BadGateway, "too_many_redirects"),
        RunError::ToolError(_) => (S::BadGateway, "upstream_tool_error"),
        RunError::Protocol(_) => (S::BadGateway, "upstream_protocol_error"),
        RunError::BadTarget(_) => (S::BadGateway, "bad_target"),
    }
}

impl ServiceError {
    /// An internal failure: logged when answered, answered as a generic 500.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        Self::Internal(detail.to_string())
    }

    /// The class of this failure.
    pub fn kind(&self) -> ErrorKind {
        self.parts().0
    }

    /// Whether retrying may succeed, after a short wait (HTTP says `Retry-After`): the
    /// cluster or this node cannot serve it now, a write's outcome is unknown, or the caller
    /// is over a limit that refills.
    pub fn retryable(&self) -> bool {
        self.retry_after_secs().is_some()
    }

    /// Seconds a caller should wait before retrying, when a retry may succeed.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            Self::RateLimited {
                retry_after_secs, ..
            } => Some((*retry_after_secs).max(1)),
            Self::TooManySessions { .. } | Self::TooManyStreams { .. } => Some(1),
            Self::Write(WriteError::OutcomeUnknown { .. }) => Some(1),
            _ if self.kind() == ErrorKind::Unavailable => Some(1),
            _ => None,
        }
    }

    fn parts(&self) -> (ErrorKind, &'static str, &'static str) {
        use ErrorKind as S;
        match self {
            Self::MalformedJson(_) => (S::BadRequest, "malformed_json", "send a well-formed JSON body"),
            Self::WrongShape(_) => (S::Invalid, "invalid_body", "see /api/openapi.json for the body's shape"),
            Self::BadRequest { hint, .. } => (S::BadRequest, "bad_request", hint),
            Self::UnsupportedMediaType(_) => (S::UnsupportedMediaType, "unsupported_media_type", "send Content-Type: application/json"),
            Self::Unauthorized { .. } => (S::Unauthenticated, "unauthorized", "the admin key is printed at first start, or set ROWCALL_ADMIN_KEY; invoke keys come from ROWCALL_INVOKE_KEYS"),
            Self::Forbidden { .. } => (S::PermissionDenied, "forbidden", "use a credential with the needed scope (directory writes need the admin key)"),
            Self::NotFound(_) => (S::NotFound, "not_found", "ask GET /api/dispatch?ask=<what you need> to find a key"),
            Self::Conflict { .. } => (S::Conflict, "version_conflict", "read the row again and retry with its current version as if_version"),
            Self::TooLarge { .. } => (S::TooLarge, "body_too_large", "split a bulk write into smaller arrays"),
            Self::Rule(_) | Self::BulkRule { .. } => (S::Invalid, "invalid_row", "fix the field named in the message; GET /api/directory shows the field schema"),
            Self::Invoke(InvokeRefusal::Disabled(_)) => (S::PermissionDenied, "row_disabled", "an operator must enable the row before it can run"),
            Self::Invoke(InvokeRefusal::InvalidArgs { .. }) => (S::Invalid, "invalid_args", "GET /api/dispatch?key=<KEY> shows the schema and an example"),
            Self::Invoke(InvokeRefusal::NotRepeatable { .. }) => (S::Conflict, "not_repeatable", "send the call without repeatable, to one node at a time"),
            Self::Invoke(InvokeRefusal::NotRecorded(_)) => (S::Unavailable, "receipt_not_stored", "the node's storage failed; retry on another node"),
            Self::Write(WriteError::Unavailable { .. }) => (S::Unavailable, "no_quorum", "the cluster has no quorum right now; retry after the Retry-After delay"),
            Self::Write(WriteError::NotLeader { .. }) => (S::Unavailable, "no_leader", "the cluster is electing a leader; retry shortly"),
            Self::Write(WriteError::Refused { .. }) => (S::Invalid, "refused_by_leader", "the leader checks every forwarded write again: fix what the message names (a node clock far off, or nodes of different versions)"),
            Self::Write(WriteError::TooLarge { .. }) => (S::TooLarge, "write_too_large", "split the array into writes of fewer rows (each is atomic on its own), or raise raft.max_entry_bytes with care: an entry must replicate within one heartbeat"),
            Self::Write(WriteError::OutcomeUnknown { .. }) => (S::GatewayTimeout, "outcome_unknown", "the write may or may not have taken effect: retry it with the header Idempotency-Key set to request_id, and a repeat is answered with the first attempt's outcome"),
            Self::RequestIdReused { .. } => (S::Invalid, "idempotency_key_reused", "use a fresh Idempotency-Key for each distinct write, the same one only for retries of it"),
            Self::Write(e @ WriteError::Fatal(_)) if e.storage_failed() => (S::Unavailable, "storage_failed", "use another node; an operator frees space or replaces the disk (the node's log names the error), then restarts the node: what it acknowledged was synced and is kept"),
            Self::Write(WriteError::Fatal(_)) => (S::Unavailable, "shutting_down", "this node is stopping; use another node"),
            Self::NoReadIndex(_) => (S::Unavailable, "no_read_index", "the leader or a quorum is unreachable; retry, or read without consistency=linearizable"),
            Self::Membership(MembershipError::Rejected { .. }) => (S::Conflict, "membership_rejected", "see GET /api/cluster for the current members"),
            Self::Membership(_) => (S::Unavailable, "no_quorum", "the cluster has no leader or quorum right now; retry"),
            Self::Behind { .. } => (S::Unavailable, "behind", "retry, or ask a node that has caught up"),
            Self::StateBehind(_) => (S::Unavailable, "state_behind", "ask another node; an operator must re-admit this one (the message says how)"),
            Self::Share(ShareRefusal::Unchecked(_)) => (S::Unavailable, "share_unchecked", "the node could not read its revocation list; retry"),
            Self::Share(ShareRefusal::Stale) => (S::Unavailable, "share_unchecked", "this node is cut off from the leader, so it may not know of a revocation; retry on another node"),
            Self::Share(_) => (S::Unauthenticated, "share_token_refused", "ask for a new link (an ask with an invoke key), or send Authorization: Bearer <invoke key>"),
            Self::Import(ImportError::Invalid(_)) => (S::Invalid, "invalid_body", "send {\"url\": \"https://host/mcp\", \"prefix\": \"P\", \"category\": \"C\"}"),
            Self::Import(ImportError::Upstream(e)) => {
                let (status, code) = run_error_parts(e);
                (status, code, "check the URL, the allow-list (ROWCALL_HTTP_ALLOW), and that the server speaks MCP over Streamable HTTP")
            }
            Self::Import(ImportError::KeyTaken { .. }) => (S::Conflict, "key_taken", "import with a prefix so the keys do not collide"),
            Self::Import(ImportError::Changed { .. }) => (S::Conflict, "version_conflict", "run the import again"),
            Self::Import(ImportError::Write(_)) => (S::Unavailable, "no_quorum", "the cluster has no quorum right now; retry after the Retry-After delay"),
            Self::PostOnly { .. } => (S::MethodNotAllowed, "post_only", "POST {\"key\": \"<KEY>\"} to /api/dispatch with a credential; GET links run only risk: read rows"),
            Self::RateLimited { .. } => (S::TooManyRequests, "rate_limited", "wait Retry-After seconds; an invoke key has a larger quota than an address"),
            Self::Busy { .. } => (S::Unavailable, "busy", "retry after the Retry-After delay, or use another node"),
            Self::TooManySessions { .. } => (S::TooManyRequests, "too_many_sessions", "close sessions you no longer use (DELETE /api/mcp with the session id), or wait until idle ones expire"),
            Self::TooManyStreams { .. } => (S::TooManyRequests, "too_many_streams", "close streams you no longer read; one client may hold only its share of this node's streams"),
            Self::BodyTimeout { .. } => (S::RequestTimeout, "body_timeout", "send the whole body promptly"),
            Self::NoSpace(_) => (S::InsufficientStorage, "no_space", "an operator frees space on the member named: shorter receipt retention ([receipts] max_age_days, keep_per_key) or deleted rows, then a snapshot to compact the log (POST /api/cluster/snapshot); or a bigger disk and a higher [storage] quota_bytes. Writes resume by themselves once it is under its bounds"),
            Self::NotCheckpointed(_) => (S::Conflict, "not_yet_checkpointed", "the cluster co-signs a checkpoint about every second while receipts arrive: retry shortly (or POST /api/receipts/checkpoint with the admin key)"),
            Self::CheckpointTimeout { .. } => (S::Unavailable, "no_checkpoint", "a majority of voters must be reachable to co-sign; retry after the Retry-After delay"),
            Self::Internal(_) => (S::Internal, "internal", "retry; if it persists, the node's log has the details"),
        }
    }
}

impl ServiceError {
    /// Code, message and hint (and violations) as every front end answers them. An internal
    /// failure's detail goes to the log here, never to the caller.
    pub fn detail(&self) -> ErrorDetail {
        let (_, code, hint) = self.parts();
        let message = match self {
            Self::Internal(detail) => {
                tracing::error!(%detail, "internal error answered as 500");
                "internal error".to_owned()
            }
            Self::NoReadIndex(reason) => {
                tracing::warn!(%reason, "linearizable read refused");
                self.to_string()
            }
            Self::Write(e @ WriteError::Fatal(detail)) if e.storage_failed() => {
                tracing::error!(%detail, "write refused: raft stopped because storage failed");
                "this node's storage failed (a full or failing disk): it takes no writes until it is restarted".to_owned()
            }
            Self::Write(WriteError::Fatal(detail)) => {
                tracing::warn!(%detail, "write refused: raft stopped");
                "this node is shutting down".to_owned()
            }
            other => other.to_string(),
        };
        let violations = match self {
            Self::Invoke(InvokeRefusal::InvalidArgs { violations, .. }) => violations
                .iter()
                .map(|(pointer, message)| Violation {
                    pointer: pointer.clone(),
                    message: message.clone(),
                })
                .collect(),
            _ => Vec::new(),
        };
        let request_id = match self {
            Self::Write(WriteError::OutcomeUnknown { request_id, .. }) => {
                Some(request_id.to_string())
            }
            _ => None,
        };
        ErrorDetail {
            code,
            message,
            hint,
            request_id,
            violations,
        }
    }

    /// The JSON body `{"ok":false,"error":{…}}` this error is answered with (over HTTP, and
    /// as the `structuredContent` of a failed MCP tool call).
    pub fn body(&self) -> Value {
        json!({ "ok": false, "error": self.detail() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_linearizable_read_names_no_peer_address() {
        let error = ServiceError::NoReadIndex("peer 10.1.2.3:9090 unreachable: refused".into());
        let detail = error.detail();
        assert_eq!(detail.code, "no_read_index");
        assert!(!detail.message.contains("10.1.2.3"), "{}", detail.message);
        assert!(error.retryable());
    }
}
