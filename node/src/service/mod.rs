//! The operations every front end serves, transport-neutral: ask, contract, invoke and
//! confirm; directory reads, writes and the change feed; receipts; share tokens; the MCP
//! importer; cluster status and membership. Each is a plain function over the node
//! ([`App`]) taking typed requests and returning a typed answer or the one
//! [`ServiceError`]; what each caller may see of an answer is decided in one place
//! ([`view::Viewer`]).
//!
//! ```text
//!   HTTP (api::http) ─┐   wire format ⇄ typed request / answer,
//!   MCP  (api::mcp)  ─┼─► ServiceError ⇄ status, in one place per front end
//!   gRPC (api::grpc) ─┘
//!                     ▼
//!   service::{dispatch, directory, feed, receipts, share, import, cluster}
//!     ├─ authorize (credential → Principal, Admin) and wait for freshness (min index)
//!     ├─ view (credential → Viewer: what of rows, contracts, cluster, failures it sees)
//!     └─► catalogue (reads) · app::App::write (Raft) · dispatch::invoke (runners, receipt)
//! ```
//!
//! Front ends only translate: what an operation checks, in which order, and what it answers
//! is decided here, so every front end gives the same answer to the same request.

pub mod cluster;
pub mod directory;
pub mod dispatch;
pub mod error;
pub mod feed;
pub mod import;
pub mod quota;
pub mod receipts;
pub mod share;
pub mod transparency;
pub mod view;

use std::time::Duration;

pub use self::error::{ErrorDetail, ErrorKind, ServiceError};
use crate::app::{App, Written};
use crate::auth::{Principal, Scope};

/// The principal behind `credential`: `Ok(None)` when none was presented (or an empty one),
/// 401 when one was presented but is not recognised.
pub fn identify(app: &App, credential: Option<&str>) -> Result<Option<Principal>, ServiceError> {
    match credential {
        None | Some("") => Ok(None),
        Some(token) => {
            app.credentials
                .identify(token)
                .map(Some)
                .ok_or(ServiceError::Unauthorized {
                    needed: "a valid credential",
                })
        }
    }
}

/// Requires a credential allowing `scope`; `action` names the call in the 403.
pub fn require(
    app: &App,
    credential: Option<&str>,
    scope: Scope,
    action: &'static str,
) -> Result<Principal, ServiceError> {
    let needed = match scope {
        Scope::Admin => "the admin key",
        Scope::Invoke => "an invoke key",
        Scope::Mcp => "an MCP token",
    };
    let principal = identify(app, credential)?.ok_or(ServiceError::Unauthorized { needed })?;
    if principal.allows(scope) {
        Ok(principal)
    } else {
        Err(ServiceError::Forbidden {
            name: principal.name,
            action,
        })
    }
}

/// Proof that the caller presented the admin key: the operations that change the directory,
/// the membership or share tokens, or read forensic data, take one, so no front end can
/// reach them without the check.
#[derive(Debug, Clone)]
pub struct Admin(Principal);

impl Admin {
    /// Checks that `credential` is the admin key; `action` names the call in the 403.
    pub fn check(
        app: &App,
        credential: Option<&str>,
        action: &'static str,
    ) -> Result<Self, ServiceError> {
        require(app, credential, Scope::Admin, action).map(Self)
    }

    /// Who it is.
    pub fn principal(&self) -> &Principal {
        &self.0
    }
}

/// The admin check of a write: a caller that is not the operator spends its write quota
/// first, so guessing at the admin key (or flooding writes that get 401) is rate-limited.
pub fn admin_write(
    app: &App,
    caller: quota::Caller<'_>,
    action: &'static str,
) -> Result<Admin, ServiceError> {
    app.spending
        .spend(quota::Quota::Write, &caller.payer(&app.credentials))?;
    Admin::check(app, caller.credential, action)
}

/// How fresh a read must be: the read-your-writes contract of DESIGN §3.1.
#[derive(Debug, Clone, Default)]
pub struct Freshness {
    /// Wait (bounded) until this node has applied this index.
    pub min_index: Option<u64>,
    /// `linearizable`: confirm with the leader and a quorum first (read index); `default`,
    /// `any` or nothing: answer from what this node has.
    pub consistency: Option<String>,
}

impl Freshness {
    /// Only after this node applied `min_index`, if given.
    pub fn at_least(min_index: Option<u64>) -> Self {
        Self {
            min_index,
            consistency: None,
        }
    }

    /// The index a caller sent in `field` (a header or metadata entry) as a barrier.
    pub fn parse_min_index(field: &str, value: &str) -> Result<u64, ServiceError> {
        value
            .trim()
            .parse::<u64>()
            .map_err(|_| ServiceError::BadRequest {
                message: format!("{field} must be a whole number, not {value:?}"),
                hint: "send back the x-rowcall-index of an earlier answer",
            })
    }
}

/// Waits, bounded, until this node may answer a read as the caller asks: after it applied
/// `min_index` (read-your-writes across nodes), and for `consistency=linearizable` after it
/// applied the leader's quorum-confirmed read index. `behind` (503) when it has not in time,
/// or within a lease when it is cut off from the leader and so cannot catch up.
pub async fn read_barrier(app: &App, freshness: &Freshness) -> Result<(), ServiceError> {
    let wait = Duration::from_millis(app.config.limits.min_index_wait_ms);
    match freshness.consistency.as_deref() {
        None | Some("default") | Some("any") => {}
        Some("linearizable") => {
            app.linearizable_index(wait)
                .await
                .map_err(|e| ServiceError::NoReadIndex(e.to_string()))?;
        }
        Some(other) => {
            return Err(ServiceError::BadRequest {
                message: format!("unknown consistency {other:?}"),
                hint: "consistency=linearizable, or leave it out",
            })
        }
    }
    let Some(wanted) = freshness.min_index else {
        return Ok(());
    };
    // Cut off from the leader, this node cannot catch up: say so after at most one lease
    // (not the whole wait), so the caller tries another node soon. The lease, not at once:
    // a node just resumed from a pause, or back from a short partition, is stale until its
    // leader's next heartbeat arrives, and then catches up like any node behind. Before the
    // check below: a leader cut off from its quorum would wait the whole bound for it to
    // confirm the end of the log.
    if wanted > app.applied_index()
        && !app
            .regains_contact(wait.min(app.liveness.stale_after()))
            .await
    {
        return Err(ServiceError::Behind {
            wanted,
            applied: app.applied_index(),
        });
    }
    if app.never_issued(wanted, wait).await {
        // Waiting cannot help: no write has that index yet, so the caller made it up.
        return Err(ServiceError::BadRequest {
            message: format!("min_index {wanted} is past the end of the log"),
            hint: "send the x-rowcall-index of an answer this cluster gave",
        });
    }
    if app.wait_applied(wanted, wait).await {
        Ok(())
    } else {
        Err(ServiceError::Behind {
            wanted,
            applied: app.applied_index(),
        })
    }
}

/// Where a write is in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Logged {
    /// The index to wait for before reading the write (front ends send it back as the
    /// answer's index).
    pub index: u64,
    /// When the write repeated a request id the cluster remembers: the index of the first
    /// attempt, whose outcome this is.
    pub replayed: Option<u64>,
}

impl From<&Written> for Logged {
    fn from(written: &Written) -> Self {
        Self {
            index: written.index,
            replayed: written.replayed,
        }
    }
}

/// Base URL for links in answers (contracts, `run_now`, receipts): the configured public
/// URL, else the HTTP host the caller addressed (its `Host` header), else this node's HTTP
/// address as configured; `https://` when the listener speaks HTTPS.
pub fn base_url(app: &App, host: Option<&str>) -> String {
    if let Some(url) = &app.config.node.public_url {
        return url.trim_end_matches('/').to_owned();
    }
    let host = host
        .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()))
        .map_or_else(|| app.config.node.http.to_string(), str::to_owned);
    let scheme = if app.config.node.https.is_some() {
        "https"
    } else {
        "http"
    };
    format!("{scheme}://{host}")
}
