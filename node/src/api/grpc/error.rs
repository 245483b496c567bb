//! Service errors on the gRPC wire, in one place: the status code of each kind, and the
//! HTTP protocol's code and hint in the status details as standard messages
//! (`google.rpc.ErrorInfo`, `BadRequest`, `RetryInfo`), so any gRPC client can read them.

use std::collections::HashMap;
use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, FieldViolation, StatusExt};

use crate::service::{ErrorKind, ServiceError};

/// `ErrorInfo.domain` of every rowcall error.
pub const DOMAIN: &str = "rowcall";

/// The gRPC code of a kind of failure (the HTTP status each kind is named after maps to the
/// code gRPC's own HTTP mapping gives it).
pub fn code(kind: ErrorKind) -> Code {
    match kind {
        ErrorKind::BadRequest | ErrorKind::UnsupportedMediaType | ErrorKind::Invalid => {
            Code::InvalidArgument
        }
        ErrorKind::Unauthenticated => Code::Unauthenticated,
        ErrorKind::PermissionDenied => Code::PermissionDenied,
        ErrorKind::NotFound => Code::NotFound,
        ErrorKind::Conflict => Code::FailedPrecondition,
        ErrorKind::TooLarge | ErrorKind::TooManyRequests | ErrorKind::InsufficientStorage => {
            Code::ResourceExhausted
        }
        ErrorKind::MethodNotAllowed => Code::Unimplemented,
        ErrorKind::RequestTimeout => Code::DeadlineExceeded,
        ErrorKind::Internal => Code::Internal,
        ErrorKind::BadGateway | ErrorKind::Unavailable => Code::Unavailable,
        ErrorKind::GatewayTimeout => Code::DeadlineExceeded,
    }
}

impl From<ServiceError> for Status {
    fn from(error: ServiceError) -> Self {
        let kind = error.kind();
        let retryable = error.retryable();
        let detail = error.detail();
        let mut metadata = HashMap::from([("hint".to_owned(), detail.hint.to_owned())]);
        if let Some(request_id) = detail.request_id {
            metadata.insert("request_id".to_owned(), request_id);
        }
        let mut details = ErrorDetails::new();
        details.set_error_info(detail.code, DOMAIN, metadata);
        if !detail.violations.is_empty() {
            let violations: Vec<FieldViolation> = detail
                .violations
                .into_iter()
                .map(|v| FieldViolation::new(v.pointer, v.message))
                .collect();
            details.set_bad_request(violations);
        }
        if retryable {
            // HTTP's Retry-After: 1.
            details.set_retry_info(Some(Duration::from_secs(1)));
        }
        Status::with_error_details(code(kind), detail.message, details)
    }
}
