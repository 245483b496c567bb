//! Connection caps of the gRPC listener: at most `limits.grpc.max_connections` open at once,
//! at most `limits.grpc.max_connections_per_client` from one address (IPv6: its /64), so
//! one address cannot take every connection (and with them every stream) of the node.
//! More are closed as they come in; what a connection carries is the tonic server's.
//!
//! ```text
//!   incoming (plain TCP, or peer TLS) ─► slot for this address? ─ no ─► closed
//!                                          │ yes: held until the connection is dropped
//!                                          ▼
//!                                        tonic (its ConnectInfo unchanged: peer
//!                                        certificates and addresses read as before)
//! ```
//!
//! [`per_client`] wraps whatever the listener yields, so the accept loop calls it on its
//! incoming stream and changes nothing else.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::{Stream, StreamExt as _};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::Connected;

use crate::config::GrpcLimits;
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
    incoming.filter_map(move |accepted| {
        let admitted = match accepted {
            Err(e) => Some(Err(e)),
            Ok(io) => admit(&caps, io).map(Ok),
        };
        std::future::ready(admitted)
    })
}

fn admit<IO: PeerAddr>(caps: &Arc<ConnectionCaps>, io: IO) -> Option<Capped<IO>> {
    // A socket that no longer knows its peer is gone already; it counts as one client.
    let address = io
        .peer()
        .map_or(IpAddr::from([0, 0, 0, 0]), |peer| client_address(peer.ip()));
    match caps.take(Some(address)) {
        Ok(slot) => Some(Capped { io, _slot: slot }),
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

/// A connection holding its slot until dropped; reads, writes and connection info are the
/// wrapped connection's.
pub struct Capped<IO> {
    io: IO,
    _slot: Slot<IpAddr>,
}

impl<IO: Connected> Connected for Capped<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Capped<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
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
