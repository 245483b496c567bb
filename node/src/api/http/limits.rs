//! Request limits of the HTTP front end, as one tower layer in front of every route:
//!
//! ```text
//!   request ─► query: UTF-8 once percent-decoded (400)
//!           ─► body: declared size ≤ max_body_bytes (413), whole body within
//!              body_read_timeout_ms (408), read here so no handler waits on a slow client
//!           ─► the route
//! ```
//!
//! What a caller may spend (rate quotas, stream slots) is not decided here but by the
//! service layer ([`crate::service::quota`]) on the parsed operation, the same for every
//! front end. Header-read time, connection counts and HTTP/2 settings are the connection
//! loop's (`serve`).

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::Http;
use crate::config::LimitsConfig;
use crate::service::ServiceError;

/// The layer: queries that decode, bodies read within their limits.
pub async fn limit(State(http): State<Http>, request: Request, next: Next) -> Response {
    let limits = &http.app.config.limits;
    if let Some(query) = request.uri().query() {
        if !decodes_to_utf8(query) {
            // Decoded lossily, such a query would be answered as if it said something else.
            return ServiceError::BadRequest {
                message: "the query string is not UTF-8 once percent-decoded".into(),
                hint: "percent-encode the UTF-8 bytes of each parameter",
            }
            .into_response();
        }
    }
    let request = match read_body(limits, request).await {
        Ok(request) => request,
        Err(e) => return e.into_response(),
    };
    next.run(request).await
}

/// Whether a query string is UTF-8 once its `%XX` escapes are decoded (a `%` not followed
/// by two hex digits stays as it is, as form decoding leaves it).
fn decodes_to_utf8(query: &str) -> bool {
    let bytes = query.as_bytes();
    if !bytes.contains(&b'%') {
        return true;
    }
    let hex = |b: u8| char::from(b).to_digit(16);
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escape = (bytes[i] == b'%')
            .then(|| Some((hex(*bytes.get(i + 1)?)?, hex(*bytes.get(i + 2)?)?)))
            .flatten();
        match escape {
            Some((high, low)) => {
                decoded.push((high * 16 + low) as u8);
                i += 3;
            }
            None => {
                decoded.push(bytes[i]);
                i += 1;
            }
        }
    }
    std::str::from_utf8(&decoded).is_ok()
}

/// Reads a request's body whole, within the size limit and the body read timeout, so a slow
/// or oversized body is answered here (408, 413) and never ties up a handler.
async fn read_body(limits: &LimitsConfig, request: Request) -> Result<Request, ServiceError> {
    let headers = request.headers();
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let chunked = headers.contains_key(header::TRANSFER_ENCODING);
    let limit = limits.max_body_bytes;
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(ServiceError::TooLarge { limit });
    }
    if declared.unwrap_or(0) == 0 && !chunked {
        return Ok(request);
    }
    let (parts, body) = request.into_parts();
    let ms = limits.body_read_timeout_ms;
    let bytes = tokio::time::timeout(Duration::from_millis(ms), axum::body::to_bytes(body, limit))
        .await
        .map_err(|_| ServiceError::BodyTimeout { ms })?
        .map_err(|_| ServiceError::TooLarge { limit })?;
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_must_decode_to_utf8() {
        assert!(decodes_to_utf8("ask=what+time"));
        assert!(decodes_to_utf8("ask=caf%C3%A9&x=100%"));
        assert!(decodes_to_utf8("ask=%zz%4"));
        assert!(!decodes_to_utf8("ask=%FF%FE%FD"));
        assert!(!decodes_to_utf8("ask=caf%C3"));
    }
}
