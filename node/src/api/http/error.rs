//! Service errors on the HTTP wire, in one place: the status of each kind, the JSON body
//! `{"ok":false,"error":{"code","message","hint"}}`, and `Retry-After` when a retry may succeed.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::service::{ErrorKind, ServiceError};

/// The HTTP status of a kind of failure.
pub fn status(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
        ErrorKind::Unauthenticated => StatusCode::UNAUTHORIZED,
        ErrorKind::PermissionDenied => StatusCode::FORBIDDEN,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        ErrorKind::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
        ErrorKind::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ErrorKind::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorKind::BadGateway => StatusCode::BAD_GATEWAY,
        ErrorKind::InsufficientStorage => StatusCode::INSUFFICIENT_STORAGE,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::GatewayTimeout => StatusCode::GATEWAY_TIMEOUT,
    }
}

impl IntoResponse for ServiceError {
    fn into_response(self) -> Response {
        let status = status(self.kind());
        let retry = self.retry_after_secs();
        let mut response = (status, axum::Json(self.body())).into_response();
        if let Some(secs) = retry {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if matches!(self, ServiceError::PostOnly { .. }) {
            // RFC 9110: a 405 names the methods that would work.
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST"));
        }
        response
    }
}
