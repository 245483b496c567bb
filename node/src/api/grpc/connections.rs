//! Connection caps of the gRPC listener: at most `limits.grpc.max_connections` open at once,
//! at most `limits.grpc.max_connections_per_client` from one address (IPv6: its /64), so
//! one address cannot take every connection (and with them every stream) of the node; and
//! a connection with no call in flight for `limits.grpc.idle_timeout_ms` is closed, so an
//! idle one (or one that never sends a request) does not hold its slot for ever.
//! More are closed as they come in; what a connection carries is the tonic server's.
//!
//! ```text
//!   incoming (plain TCP, or peer TLS) ─► slot for this address? ─ no ─► closed
//!                                          │ yes: held until the connection is dropped
//!                                          ▼
//!                                        tonic (its ConnectInfo carries the connection's
//!                                        Activity; peer certificates and addresses as before)
//!                                          │ every call, until its answer's body ends:
//!                                          ▼ in flight (InFlightLayer)
//!   no call in flight for idle_timeout_ms ─► the read side ends (EOF): hyper closes it
//! ```
//!
//! [`per_client`] wraps whatever the listener yields, so the accept loop calls it on its
//! incoming stream and changes nothing else. tonic serves each connection itself, so this
//! cannot ask hyper for a GOAWAY as the HTTP listener does: the connection is closed only
//! when no stream is open on it, and a client sees a closed idle connection, which every
//! gRPC client reconnects from on its next call. HTTP/2 keepalive pings do not count as
//! calls: a client that only answers pings is idle. Peers are never idle (heartbeats).

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{Request, Response};
use futures_util::{Stream, StreamExt as _};
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use tonic::transport::server::Connected;

use crate::config::GrpcLimits;
use crate::net::{Activity, InFlight};
use crate::raft::tls::PeerConnectInfo;
use crate::service::quota::{client_address, ConnectionCaps, Full, Slot};

/// A connection whose peer address is known before it is served.
pub trait PeerAddr {
    /// The remote address, if the socket still knows it.
    fn peer(&self) -> Option<SocketAddr>;
}

impl PeerAddr for TcpStream {
    fn peer(&self) -> Option<SocketAddr> {
        self.peer_addr().ok()
    }
}

impl PeerAddr for tokio_rustls::server::TlsStream<TcpStream> {
    fn peer(&self) -> Option<SocketAddr> {
        self.get_ref().0.peer_addr().ok()
    }
}

impl PeerAddr for crate::raft::tls::PeerStream {
    fn peer(&self) -> Option<SocketAddr> {
        match self {
            Self::Plain(tcp) => tcp.peer_addr().ok(),
            Self::Tls(tls) => tls.get_ref().0.peer_addr().ok(),
        }
    }
}

/// `incoming` with the listener's connection caps of `limits` applied.
pub fn per_client<I, IO, E>(
    incoming: I,
    limits: &GrpcLimits,
) -> impl Stream<Item = Result<Capped<IO>, E>>
where
    I: Stream<Item = Result<IO, E>>,
    IO: PeerAddr,
{
    let caps = ConnectionCaps::new(limits.max_connections, limits.max_connections_per_client);
    let idle = Duration::from_millis(limits.idle_timeout_ms.max(1));
    incoming.filter_map(move |accepted| {
        let admitted = match accepted {
            Err(e) => Some(Err(e)),
            Ok(io) => admit(&caps, io, idle).map(Ok),
        };
        std::future::ready(admitted)
    })
}

fn admit<IO: PeerAddr>(caps: &Arc<ConnectionCaps>, io: IO, idle: Duration) -> Option<Capped<IO>> {
    // A socket that no longer knows its peer is gone already; it counts as one client.
    let address = io
        .peer()
        .map_or(IpAddr::from([0, 0, 0, 0]), |peer| client_address(peer.ip()));
    match caps.take(Some(address)) {
        Ok(slot) => Some(Capped {
            io,
            _slot: slot,
            activity: Arc::new(Activity::new()),
            idle,
            check: Box::pin(tokio::time::sleep(idle)),
            ended: false,
        }),
        Err(full) => {
            let reason = match full {
                Full::Total { .. } => "total",
                Full::PerKey { .. } => "per_client",
            };
            metrics::counter!(crate::metrics::CONNECTIONS_REFUSED_TOTAL, "reason" => reason, "listener" => "grpc")
                .increment(1);
            None
        }
    }
}

/// A connection holding its slot until dropped, and ending its read side once no call has
/// been in flight for `idle`; writes and connection info are the wrapped connection's.
pub struct Capped<IO> {
    io: IO,
    _slot: Slot<IpAddr>,
    activity: Arc<Activity>,
    idle: Duration,
    /// When to look at `activity` next.
    check: Pin<Box<Sleep>>,
    /// The idle timeout fired: every read from now on is EOF.
    ended: bool,
}

impl<IO> Capped<IO> {
    /// Whether the idle timeout has ended the connection; otherwise arms `check` (with
    /// `cx`'s waker) for the next moment it could.
    fn idle_ended(&mut self, cx: &mut Context<'_>) -> bool {
        while self.check.as_mut().poll(cx).is_ready() {
            match self.activity.idle_at(self.idle) {
                Some(at) if at <= Instant::now() => {
                    metrics::counter!(crate::metrics::CONNECTIONS_IDLE_CLOSED_TOTAL, "listener" => "grpc")
                        .increment(1);
                    self.ended = true;
                    return true;
                }
                Some(at) => self.check.as_mut().reset(at),
                // A call is in flight: look again an idle period later.
                None => self.check.as_mut().reset(Instant::now() + self.idle),
            }
        }
        false
    }
}

impl<IO: Connected<ConnectInfo = PeerConnectInfo>> Connected for Capped<IO> {
    type ConnectInfo = PeerConnectInfo;

    fn connect_info(&self) -> PeerConnectInfo {
        PeerConnectInfo {
            activity: Some(self.activity.clone()),
            ..self.io.connect_info()
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Capped<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(Ok(()));
        }
        // Bytes the client sent are always read; only a connection with nothing to read
        // can be idle.
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Pending if this.idle_ended(cx) => Poll::Ready(Ok(())),
            polled => polled,
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Capped<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// Counts every call on the gRPC server as in flight on its connection until its answer's
/// body ends, for the idle timeout of [`per_client`].
#[derive(Debug, Clone, Copy, Default)]
pub struct InFlightLayer;

impl<S> tower::Layer<S> for InFlightLayer {
    type Service = Counting<S>;

    fn layer(&self, inner: S) -> Counting<S> {
        Counting { inner }
    }
}

/// A service whose calls are counted in flight on their connection.
#[derive(Debug, Clone)]
pub struct Counting<S> {
    inner: S,
}

impl<S, B, R> tower::Service<Request<B>> for Counting<S>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = Response<Counted<R>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let guard = request
            .extensions()
            .get::<PeerConnectInfo>()
            .and_then(|info| info.activity.as_ref())
            .map(Activity::enter);
        let call = self.inner.call(request);
        Box::pin(async move {
            let response = call.await?;
            Ok(response.map(|body| Counted {
                body,
                _guard: guard,
            }))
        })
    }
}

/// An answer's body that keeps its call in flight until it ends or is dropped (a stream is
/// in flight while it is open).
pub struct Counted<B> {
    body: B,
    _guard: Option<InFlight>,
}

impl<B: Body + Unpin> Body for Counted<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_address_gets_its_share_and_the_slot_comes_back_on_close() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = GrpcLimits {
            max_connections: 8,
            max_connections_per_client: 2,
            ..GrpcLimits::default()
        };
        let incoming = tokio_stream_of(listener);
        let mut capped = std::pin::pin!(per_client(incoming, &limits));
        let mut clients = Vec::new();
        for _ in 0..3 {
            clients.push(TcpStream::connect(addr).await.unwrap());
        }
        // From 127.0.0.2, another client: admitted although 127.0.0.1 is at its share.
        let other = tokio::net::TcpSocket::new_v4().unwrap();
        other.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let other = other.connect(addr).await.unwrap();
        let first = capped.next().await.unwrap().unwrap();
        let _second = capped.next().await.unwrap().unwrap();
        // The third from 127.0.0.1 is closed, so the next admitted is 127.0.0.2's.
        let fourth = capped.next().await.unwrap().unwrap();
        assert_eq!(
            fourth.io.peer_addr().unwrap(),
            other.local_addr().unwrap(),
            "the third connection from one address was admitted"
        );
        drop(first);
        let again = TcpStream::connect(addr).await.unwrap();
        let admitted = capped.next().await.unwrap().unwrap();
        assert_eq!(
            admitted.io.peer_addr().unwrap(),
            again.local_addr().unwrap()
        );
    }

    fn tokio_stream_of(
        listener: tokio::net::TcpListener,
    ) -> impl Stream<Item = io::Result<TcpStream>> {
        futures_util::stream::unfold(listener, |listener| async move {
            let accepted = listener.accept().await.map(|(tcp, _)| tcp);
            Some((accepted, listener))
        })
    }
}
