//! The public gRPC API's calls under their request id ([`crate::trace`]): taken from the
//! `x-request-id` or `traceparent` metadata, made otherwise, answered in `x-request-id`.
//! Raft's own RPCs pass through untouched (a heartbeat is no request of anyone's).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::http::{HeaderValue, Request, Response};
use tracing::Instrument as _;

use crate::trace::{self, TraceId};

/// The prefix of the public services' paths (`/rowcall.v1.Dispatch/Ask`, ...).
const PUBLIC: &str = "/rowcall.v1.";

/// Wraps the gRPC server's services in [`Traced`].
#[derive(Debug, Clone, Copy, Default)]
pub struct TraceLayer;

impl<S> tower::Layer<S> for TraceLayer {
    type Service = Traced<S>;

    fn layer(&self, inner: S) -> Traced<S> {
        Traced { inner }
    }
}

/// A service whose public calls run in their request's scope and span.
#[derive(Debug, Clone)]
pub struct Traced<S> {
    inner: S,
}

impl<S, B, R> tower::Service<Request<B>> for Traced<S>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<R>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if !request.uri().path().starts_with(PUBLIC) {
            return Box::pin(self.inner.call(request));
        }
        let header = |name| request.headers().get(name).map(HeaderValue::as_bytes);
        let id = TraceId::from_headers(header(trace::HEADER), header(trace::TRACEPARENT));
        let span = tracing::info_span!("grpc", request_id = %id, method = request.uri().path());
        crate::telemetry::adopt_caller(&span, request.headers());
        let call = self.inner.call(request);
        Box::pin(async move {
            let mut response = id.clone().scope(call).instrument(span).await?;
            if let Ok(value) = HeaderValue::from_str(id.as_str()) {
                response.headers_mut().insert(trace::HEADER, value);
            }
            Ok(response)
        })
    }
}
