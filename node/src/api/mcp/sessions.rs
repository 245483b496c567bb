//! MCP sessions that any node can continue.
//!
//! The 2025-11-25 transport has sessions: `initialize` returns an `Mcp-Session-Id`, and the
//! client sends it on every later POST and on the GET stream. rowcall keeps nothing per
//! session that matters — every request carries its bearer token, and every answer comes
//! from the replicated catalogue — so a session id only has to be *recognisable*, not
//! stored: ids are minted as `rowcall-<mode>-<32 hex>`, and rmcp's session store (consulted
//! when a request names a session this node has not seen) accepts any well-formed id of its
//! endpoint's mode, so rmcp rebuilds the session in memory on the spot. A session may thus
//! move between nodes request by request, behind any load balancer, and survives restarts.
//! The rebuilt session replays `initialize` with default client parameters; nothing in
//! rowcall's answers depends on them.
//!
//! A session belongs to the credential that opened it. Its id ends in its owner's tag
//! ([`crate::auth::Principal::owner_tag`]: a digest of the credential's scope and name, never of its
//! secret), so every node can tell, without storing anything, whether a request naming a
//! session comes from its owner; one that does not is answered 404 as for an unknown session
//! (`authenticate` in the module above), and nothing happens to the session. The tag is
//! handed to `Sessions::create_session` through [`OWNER`], which the authentication layer
//! sets around the request (rmcp's `create_session` takes no arguments).
//!
//! Every session a node holds in memory costs it a worker task and buffers, and since any
//! well-formed id makes one, a node caps them ([`SessionCaps`]): per credential
//! (`limits.max_mcp_sessions_per_token`, 429) and in all (`limits.max_mcp_sessions`, 503).
//! A session counts from the request that creates it here (an `initialize`, or the first
//! request naming an id this node has not seen) until it is closed or idle for the idle
//! period, as rmcp's own session is.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::Stream;
use rmcp::model::{
    ClientJsonRpcMessage, GetExtensions, InitializeRequestParams, ProtocolVersion,
    ServerJsonRpcMessage,
};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{
    EventStore, RestoreOutcome, ServerSseMessage, SessionId, SessionManager, SessionState,
    SessionStore, SessionStoreError,
};

use super::cut::{Cuttable, StreamCut};
use super::replay::Replay;
use super::session_id::{mint, well_formed};
use super::Mode;

/// Why a session operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The in-memory session layer failed.
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
    /// A freshly minted id was already in use (128 random bits: never in practice).
    #[error("session id collision")]
    Collision,
    /// A session was to be created outside an authenticated request (no owner to give it).
    #[error("no owner for a new session: the request did not pass authentication")]
    NoOwner,
}

tokio::task_local! {
    /// The owner tag of the request being served: set by the authentication layer around
    /// each request, read when a session is created for it.
    pub static OWNER: String;
}

/// rmcp's in-memory sessions, with ids minted by rowcall and resumable streams.
pub struct Sessions {
    mode: Mode,
    inner: LocalSessionManager,
    replay: Arc<Replay>,
}

impl Sessions {
    /// Sessions of one endpoint, dropped from memory after `idle` without a request, their
    /// streams' events kept in `replay`.
    pub fn new(mode: Mode, idle: std::time::Duration, replay: Arc<Replay>) -> Self {
        let mut inner = LocalSessionManager::default().with_event_store(replay.clone());
        inner.session_config.keep_alive = Some(idle);
        Self {
            mode,
            inner,
            replay,
        }
    }
}

impl SessionManager for Sessions {
    type Error = SessionError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let owner = OWNER
            .try_with(String::clone)
            .map_err(|_| SessionError::NoOwner)?;
        let id = mint(self.mode, &owner);
        // A session "restored" under a fresh id is exactly a new session with that id.
        match self.inner.restore_session(id.clone()).await? {
            RestoreOutcome::Restored(transport) => Ok((id, transport)),
            _ => Err(SessionError::Collision),
        }
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.replay.forget_session(id);
        Ok(self.inner.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        mut message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        // The request's handler may end its own stream early (see `cut`).
        let cut = StreamCut::default();
        if let ClientJsonRpcMessage::Request(request) = &mut message {
            request.request.extensions_mut().insert(cut.clone());
        }
        let stream = self.inner.create_stream(id, message).await?;
        Ok(Cuttable::new(stream, cut))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.resume(id, last_event_id).await?)
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        Ok(self.inner.restore_session(id).await?)
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        Some(self.replay.clone())
    }
}

/// The sessions one node holds, by id: whose they are and when they were last used.
#[derive(Debug)]
pub struct SessionCaps {
    per_token: usize,
    total: usize,
    idle: Duration,
    open: Mutex<HashMap<String, (String, Instant)>>,
}

/// Why a request may not open another session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionRefusal {
    /// The credential holds `limit` sessions already.
    PerToken {
        /// The limit.
        limit: usize,
    },
    /// The node holds `limit` sessions already.
    Total {
        /// The limit.
        limit: usize,
    },
}

impl SessionCaps {
    /// Caps of `per_token` sessions per credential and `total` in all; a session unused for
    /// `idle` no longer counts.
    pub fn new(per_token: usize, total: usize, idle: Duration) -> Self {
        Self {
            per_token,
            total,
            idle,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// Admits a request of `holder` naming session `id` (`None`: it may create one). A known
    /// id is refreshed; an unknown one, or none, needs room under both caps.
    pub fn admit(
        &self,
        holder: &str,
        id: Option<&str>,
        now: Instant,
    ) -> Result<(), SessionRefusal> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, seen)) = id.and_then(|id| open.get_mut(id)) {
            *seen = now;
            return Ok(());
        }
        let idle = self.idle;
        open.retain(|_, (_, seen)| now.saturating_duration_since(*seen) < idle);
        if open.len() >= self.total {
            return Err(SessionRefusal::Total { limit: self.total });
        }
        if open.values().filter(|(h, _)| h == holder).count() >= self.per_token {
            return Err(SessionRefusal::PerToken {
                limit: self.per_token,
            });
        }
        if let Some(id) = id {
            open.insert(id.to_owned(), (holder.to_owned(), now));
        }
        Ok(())
    }

    /// Records a session created for `holder` (the id rmcp answered an `initialize` with).
    pub fn opened(&self, holder: &str, id: &str, now: Instant) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.insert(id.to_owned(), (holder.to_owned(), now));
    }

    /// Forgets a closed session.
    pub fn closed(&self, id: &str) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.remove(id);
    }
}

/// The "store" behind cross-node restore: it recognises ids instead of remembering them.
pub struct RecognisedIds {
    /// The endpoint's mode.
    pub mode: Mode,
}

type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, SessionStoreError>> + Send + 'a>>;

// rmcp declares this trait with `async_trait`; these are its desugared signatures.
impl SessionStore for RecognisedIds {
    fn load<'a, 'b, 'c>(&'a self, session_id: &'b str) -> StoreFuture<'c, Option<SessionState>>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let known = well_formed(self.mode, session_id);
        Box::pin(async move {
            Ok(known.then(|| {
                let mut params = InitializeRequestParams::default();
                params.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
                SessionState::new(params)
            }))
        })
    }

    fn store<'a, 'b, 'd, 'c>(&'a self, _: &'b str, _: &'d SessionState) -> StoreFuture<'c, ()>
    where
        'a: 'c,
        'b: 'c,
        'd: 'c,
        Self: 'c,
    {
        Box::pin(async { Ok(()) })
    }

    fn delete<'a, 'b, 'c>(&'a self, _: &'b str) -> StoreFuture<'c, ()>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_capped_per_token_and_in_all_until_idle_or_closed() {
        let caps = SessionCaps::new(2, 3, Duration::from_secs(60));
        let now = Instant::now();
        caps.admit("a", None, now).unwrap();
        caps.opened("a", "s1", now);
        caps.admit("a", Some("s2"), now).unwrap();
        assert_eq!(
            caps.admit("a", None, now),
            Err(SessionRefusal::PerToken { limit: 2 })
        );
        // Known sessions keep working; another token has room until the total is reached.
        caps.admit("a", Some("s1"), now).unwrap();
        caps.admit("b", Some("s3"), now).unwrap();
        assert_eq!(
            caps.admit("c", Some("s4"), now),
            Err(SessionRefusal::Total { limit: 3 })
        );
        caps.closed("s3");
        caps.admit("c", Some("s4"), now).unwrap();
        // Idle sessions stop counting.
        let later = now + Duration::from_secs(61);
        caps.admit("a", None, later).unwrap();
    }
}
