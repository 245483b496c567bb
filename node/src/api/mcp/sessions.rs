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

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::Stream;
use rmcp::model::{
    ClientJsonRpcMessage, InitializeRequestParams, ProtocolVersion, ServerJsonRpcMessage,
};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{
    EventStore, RestoreOutcome, ServerSseMessage, SessionId, SessionManager, SessionState,
    SessionStore, SessionStoreError,
};

use super::replay::Replay;
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
}

fn prefix(mode: Mode) -> &'static str {
    match mode {
        Mode::Rows => "rowcall-rows-",
        Mode::Compact => "rowcall-compact-",
    }
}

fn mint(mode: Mode) -> SessionId {
    let bytes: [u8; 16] = rand::random();
    format!("{}{}", prefix(mode), hex::encode(bytes)).into()
}

/// Whether `id` is a session id this mode's endpoint issues.
pub fn well_formed(mode: Mode, id: &str) -> bool {
    id.strip_prefix(prefix(mode)).is_some_and(|rest| {
        rest.len() == 32
            && rest
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// rmcp's in-memory sessions, with ids minted by rowcall and resumable streams.
pub struct Sessions {
    mode: Mode,
    inner: LocalSessionManager,
    replay: Arc<Replay>,
}

impl Sessions {
    /// Sessions of one endpoint, dropped from memory after `idle` without a request.
    pub fn new(mode: Mode, idle: std::time::Duration) -> Self {
        let replay = Arc::new(Replay::default());
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
        let id = mint(self.mode);
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
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_stream(id, message).await?)
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
    fn ids_are_recognised_by_their_own_mode_only() {
        let id = mint(Mode::Rows);
        assert!(well_formed(Mode::Rows, &id));
        assert!(!well_formed(Mode::Compact, &id));
        assert!(well_formed(Mode::Compact, &mint(Mode::Compact)));
        assert!(!well_formed(Mode::Rows, "rowcall-rows-XYZ"));
        assert!(!well_formed(Mode::Rows, "0f9c3b1e-uuid"));
    }
}
