//! The node's listening sockets as it serves them: every accepted connection, HTTP and gRPC,
//! has TCP_NODELAY set.
//!
//! Without it Nagle's algorithm holds a small write (an AppendEntries, a forwarded write, an
//! HTTP answer) until the peer acknowledges the previous one, and the peer delays that
//! acknowledgement by up to 40 ms: a request/answer exchange on an idle loopback then takes
//! tens of milliseconds instead of a fraction of one. Outbound peer channels set the option
//! on their own endpoints (`raft::network`); peer TLS sets it before the handshake
//! (`raft::tls::incoming`) through [`no_delay`].

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tonic::transport::server::TcpIncoming;

/// Sets TCP_NODELAY on an accepted connection. A socket that refuses it still works, only
/// slower, so the refusal is logged rather than dropping the connection.
pub fn no_delay(tcp: &TcpStream) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "setting TCP_NODELAY on an accepted connection");
    }
}

/// The next connection on the HTTP listener (`api::http::serve`'s accept loop).
pub async fn accept_http(listener: &TcpListener) -> std::io::Result<(TcpStream, SocketAddr)> {
    let (tcp, peer) = listener.accept().await?;
    no_delay(&tcp);
    Ok((tcp, peer))
}

/// The plain (no peer TLS) gRPC listener. tonic's `Server::tcp_nodelay` only reaches
/// listeners tonic binds itself, not one passed in, so the option goes on the incoming.
pub fn grpc(listener: TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener).with_nodelay(Some(true))
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt as _;

    use super::*;

    async fn bound() -> (TcpListener, SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        (listener, addr)
    }

    #[tokio::test]
    async fn the_http_listener_accepts_connections_with_nodelay() {
        let (listener, addr) = bound().await;
        let client = TcpStream::connect(addr).await.unwrap();
        let (accepted, peer) = accept_http(&listener).await.unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        assert!(
            accepted.nodelay().unwrap(),
            "HTTP connection without TCP_NODELAY"
        );
    }

    #[tokio::test]
    async fn the_grpc_listener_accepts_connections_with_nodelay() {
        let (listener, addr) = bound().await;
        let mut incoming = grpc(listener);
        let client = TcpStream::connect(addr).await.unwrap();
        let accepted = incoming.next().await.unwrap().unwrap();
        assert_eq!(accepted.peer_addr().unwrap(), client.local_addr().unwrap());
        assert!(
            accepted.nodelay().unwrap(),
            "gRPC connection without TCP_NODELAY"
        );
    }
}

/// The calls in flight on one connection, and since when it has had none.
#[derive(Debug)]
pub struct Activity {
    opened: Instant,
    in_flight: AtomicUsize,
    /// When the last call ended (or the connection opened), in ms after `opened`.
    quiet_since_ms: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Self {
        Self {
            opened: Instant::now(),
            in_flight: AtomicUsize::new(0),
            quiet_since_ms: AtomicU64::new(0),
        }
    }

    /// One call begins; it is in flight until the guard is dropped.
    pub(crate) fn enter(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }

    /// When the connection counts as idle for `idle`, if no call is in flight now.
    pub(crate) fn idle_at(&self, idle: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let quiet = Duration::from_millis(self.quiet_since_ms.load(Ordering::Acquire));
        Some(self.opened + quiet + idle)
    }
}

/// One call in flight on its connection, counted until dropped.
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        // Quiet from now on, unless another call is in flight (then this is overwritten
        // when the last one ends, and `idle_at` ignores it meanwhile).
        let now = self.0.opened.elapsed().as_millis() as u64;
        self.0.quiet_since_ms.fetch_max(now, Ordering::AcqRel);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}
