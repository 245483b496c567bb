//! The HTTP connection loop: hyper with a timer, so that a client that is slow to send its
//! request line and headers (slowloris) is disconnected after `header_read_timeout_ms`, at
//! most `max_connections` connections are open at once and at most
//! `max_connections_per_client` from one address (more are closed as they are accepted, so
//! the node's memory and file descriptors stay bounded and one address cannot take them
//! all), and a connection with no request in flight for `idle_timeout_ms` is closed.
//!
//! ```text
//!   accept ─ slot free, for this address too? ─ no ─► close
//!             │ yes
//!             ▼
//!   first bytes within the header timeout? ─ no ─► close
//!             │  "PRI * HTTP/2.0" ─► HTTP/2 (keepalive pings, stream and header-list caps)
//!             ▼  anything else
//!   HTTP/1.1 (header read timeout, at most 100 headers, bounded buffers)
//!             ▼
//!   the router, with the peer's address as `ConnectInfo` (for per-address quotas)
//!             ▼  no request in flight for idle_timeout_ms
//!   graceful close (HTTP/2: GOAWAY)
//! ```
//!
//! axum's own `serve` has no timer, and so no header timeout. On shutdown every connection
//! is asked to finish what it is doing (bounded by [`DRAIN`]); long-lived streams end on
//! the node's stop signal themselves. A request is in flight until its answer's body is
//! sent whole, so an open change feed or MCP stream keeps its connection.
//!
//! With HTTPS ([`super::tls`]) the TLS handshake comes first, bounded by the same header
//! timeout, and ALPN picks HTTP/2 or HTTP/1.1 instead of the preface.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower::ServiceExt as _;

use super::tls::{negotiated_h2, HttpsTls};
use crate::config::LimitsConfig;
use crate::service::quota::{client_address, ConnectionCaps, Full};

/// The HTTP/2 connection preface.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Longest wait for open connections to finish at shutdown.
const DRAIN: Duration = Duration::from_secs(10);
/// Request headers per request at most (HTTP/1.1); more get 431.
const MAX_HEADERS: usize = 100;
/// Bytes of request line and headers at most (HTTP/1.1 read buffer; HTTP/2 header list).
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Serves `router` on `listener` until `stop` turns true, over TLS if `tls` is given.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: &LimitsConfig,
    tls: Option<Arc<HttpsTls>>,
    mut stop: watch::Receiver<bool>,
) {
    let header_timeout = Duration::from_millis(limits.header_read_timeout_ms.max(1));
    let idle_timeout = Duration::from_millis(limits.idle_timeout_ms.max(1));
    let slots = ConnectionCaps::new(limits.max_connections, limits.max_connections_per_client);
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_headers(MAX_HEADERS)
        .max_buf_size(MAX_HEADER_BYTES.max(8192));
    let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    http2
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_secs(20))
        .keep_alive_timeout(Duration::from_secs(20))
        .max_concurrent_streams(256)
        .max_header_list_size(MAX_HEADER_BYTES as u32)
        .max_pending_accept_reset_streams(64)
        .max_local_error_reset_streams(256);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = crate::net::accept_http(&listener) => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accepting an HTTP connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = async { stop.wait_for(|s| *s).await.is_ok() } => break,
        };
        let slot = match slots.take(Some(client_address(peer.ip()))) {
            Ok(slot) => slot,
            Err(full) => {
                let reason = match full {
                    Full::Total { .. } => "total",
                    Full::PerKey { .. } => "per_client",
                };
                metrics::counter!(crate::metrics::CONNECTIONS_REFUSED_TOTAL, "reason" => reason)
                    .increment(1);
                drop(stream);
                continue;
            }
        };
        let activity = Arc::new(watch::channel(0usize).0);
        let service = in_flight(router.clone(), peer, activity.clone());
        let service = TowerToHyperService::new(service);
        let (http1, http2) = (http1.clone(), http2.clone());
        let acceptor = tls.as_ref().map(|tls| tls.acceptor());
        // Until it is served, a connection's handshake or sniff ends as the node stops, so
        // that nothing holding the node's state (and its database) outlives `shutdown`.
        let mut node_stop = stop.clone();
        let stopping = async move {
            let _ = node_stop.wait_for(|s| *s).await;
        };
        let ends = Ends {
            stop: stop.clone(),
            activity,
            idle: idle_timeout,
        };
        tokio::spawn(async move {
            let _slot = slot;
            let gauge = metrics::gauge!(crate::metrics::CONNECTIONS_OPEN);
            gauge.increment(1.0);
            match acceptor {
                Some(acceptor) => {
                    // A client that does not finish its handshake in time is a slowloris too.
                    let handshake = tokio::time::timeout(header_timeout, acceptor.accept(stream));
                    let stream = tokio::select! {
                        done = handshake => match done {
                            Ok(Ok(stream)) => Some(stream),
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                None
                            }
                            Err(_) => None,
                        },
                        () = stopping => None,
                    };
                    if let Some(stream) = stream {
                        if negotiated_h2(stream.get_ref().1.alpn_protocol()) {
                            let conn = http2.serve_connection(TokioIo::new(stream), service);
                            ends.drive(conn, |c| c.graceful_shutdown()).await;
                        } else {
                            let conn = http1.serve_connection(TokioIo::new(stream), service);
                            ends.drive(conn, |c| c.graceful_shutdown()).await;
                        }
                    }
                }
                None => match tokio::select! {
                    h2 = first_bytes_are_h2(&stream, header_timeout) => h2,
                    () = stopping => None,
                } {
                    None => {}
                    Some(true) => {
                        let conn = http2.serve_connection(TokioIo::new(stream), service);
                        ends.drive(conn, |c| c.graceful_shutdown()).await;
                    }
                    Some(false) => {
                        let conn = http1.serve_connection(TokioIo::new(stream), service);
                        ends.drive(conn, |c| c.graceful_shutdown()).await;
                    }
                },
            }
            gauge.decrement(1.0);
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, slots.drained()).await.is_err() {
        tracing::warn!("HTTP connections still open after the drain period; closing them");
    }
}

/// What ends a served connection: the node's stop, or no request in flight for `idle`.
/// Either closes it gracefully (what is in flight is answered first).
struct Ends {
    stop: watch::Receiver<bool>,
    /// Requests in flight on the connection.
    activity: Arc<watch::Sender<usize>>,
    idle: Duration,
}

impl Ends {
    async fn drive<C: Future>(mut self, conn: C, close: fn(Pin<&mut C>)) {
        let mut conn = std::pin::pin!(conn);
        let idle = idle_for(self.activity.subscribe(), self.idle);
        let mut idle = std::pin::pin!(idle);
        let mut closing = false;
        loop {
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = self.stop.wait_for(|s| *s), if !closing => {
                    closing = true;
                    close(conn.as_mut());
                }
                () = idle.as_mut(), if !closing => {
                    metrics::counter!(crate::metrics::CONNECTIONS_IDLE_CLOSED_TOTAL, "listener" => "http")
                        .increment(1);
                    closing = true;
                    close(conn.as_mut());
                }
            }
        }
    }
}

/// Returns once no request has been in flight for `idle`.
async fn idle_for(mut in_flight: watch::Receiver<usize>, idle: Duration) {
    loop {
        if in_flight.wait_for(|n| *n == 0).await.is_err() {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(idle) => return,
            // A request began (or ended) meanwhile: start over.
            changed = in_flight.changed() => if changed.is_err() { return },
        }
    }
}

/// The router for one connection from `peer`, counting its requests in flight in
/// `activity` until each answer's body is sent (or dropped).
fn in_flight(
    router: Router,
    peer: std::net::SocketAddr,
    activity: Arc<watch::Sender<usize>>,
) -> impl tower::Service<
    axum::http::Request<Incoming>,
    Response = axum::response::Response,
    Error = Infallible,
    Future = impl Future<Output = Result<axum::response::Response, Infallible>> + Send,
> + Clone {
    tower::service_fn(move |mut request: axum::http::Request<Incoming>| {
        let guard = InFlight::enter(activity.clone());
        request.extensions_mut().insert(ConnectInfo(peer));
        let answer = router.clone().oneshot(request.map(Body::new));
        async move {
            let response = answer.await?;
            Ok(response.map(|body| {
                Body::new(Counted {
                    body,
                    _guard: guard,
                })
            }))
        }
    })
}

/// One request in flight, counted until dropped.
struct InFlight(Arc<watch::Sender<usize>>);

impl InFlight {
    fn enter(activity: Arc<watch::Sender<usize>>) -> Self {
        activity.send_modify(|n| *n += 1);
        Self(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// An answer's body that keeps its request in flight until it is sent whole or dropped.
struct Counted {
    body: Body,
    _guard: InFlight,
}

impl hyper::body::Body for Counted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Whether the connection speaks HTTP/2 (its first bytes are the preface), decided as soon
/// as the bytes allow; `None` if the client sends nothing decisive within `within` or goes.
async fn first_bytes_are_h2(stream: &TcpStream, within: Duration) -> Option<bool> {
    let sniff = async {
        let mut buf = [0u8; H2_PREFACE.len()];
        loop {
            let n = match stream.peek(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => n,
            };
            if buf[..n] != H2_PREFACE[..n] {
                return Some(false);
            }
            if n == H2_PREFACE.len() {
                return Some(true);
            }
            // A prefix of the preface: wait for more (peek does not consume).
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(within, sniff).await.ok().flatten()
}
