//! The client's errors: what a node answered (with the protocol's code and hint), or why no
//! node could answer.

use std::fmt;

use tonic::{Code, Status};
use tonic_types::StatusExt as _;

/// `ErrorInfo.domain` of rowcall's errors.
const DOMAIN: &str = "rowcall";

/// A failed call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A node answered with an error: the request was wrong, not allowed, or refers to
    /// something that is not there. Retrying it unchanged gives the same answer.
    #[error("{0}")]
    Rejected(Box<Rejection>),
    /// No node gave an answer within the deadline (each was unreachable, behind, without a
    /// quorum, or slow); the last failure says why.
    #[error("no node answered after {attempts} attempts: {last}")]
    Unavailable {
        /// How many attempts were made.
        attempts: u32,
        /// The last failure.
        last: Box<Rejection>,
    },
    /// A call that must not run twice (an invocation, a removal) reached a node and then no
    /// answer came: it may or may not have taken effect, so it was not retried.
    #[error("no answer from {node}, and the call may have taken effect: {last}")]
    Unknown {
        /// The node it was sent to.
        node: String,
        /// What was seen.
        last: Box<Rejection>,
    },
    /// A node address is not a valid URI.
    #[error("invalid node address {address:?}: {reason}")]
    Address {
        /// The address given.
        address: String,
        /// Why it is not usable.
        reason: String,
    },
    /// [`crate::Client::connect`] was given no node.
    #[error("no node addresses given")]
    NoNodes,
    /// A request argument cannot be sent (e.g. JSON that is not an object where one is
    /// needed).
    #[error("{0}")]
    Argument(String),
}

impl Error {
    /// The protocol's error code (`not_found`, `invalid_row`, `behind`, …) when a node gave
    /// one.
    pub fn code(&self) -> Option<&str> {
        self.rejection().map(|r| r.code.as_str())
    }

    /// The node's answer behind this error, if any.
    pub fn rejection(&self) -> Option<&Rejection> {
        match self {
            Self::Rejected(r) => Some(r.as_ref()),
            Self::Unavailable { last, .. } | Self::Unknown { last, .. } => Some(last),
            _ => None,
        }
    }

    /// Whether the thing asked for does not exist (`NOT_FOUND`).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Rejected(r) if r.status == Code::NotFound)
    }

    /// Whether no node could serve the call (the cluster or the network is down).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable { .. } | Self::Unknown { .. })
    }
}

/// A node's error answer: the gRPC status and rowcall's code, message and hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The gRPC status code.
    pub status: Code,
    /// rowcall's code, as over HTTP (empty when the status did not come from rowcall, e.g.
    /// a connection failure).
    pub code: String,
    /// What went wrong.
    pub message: String,
    /// How to fix it.
    pub hint: String,
    /// For `outcome_unknown`: the request id a retry must carry.
    pub request_id: Option<String>,
    /// For `invalid_args`: `(JSON pointer, message)` per violation.
    pub violations: Vec<(String, String)>,
}

impl Rejection {
    /// Reads rowcall's error details out of a status.
    pub fn from_status(status: &Status) -> Self {
        let details = status.get_error_details();
        let info = details.error_info().filter(|i| i.domain == DOMAIN);
        let meta = |key: &str| info.and_then(|i| i.metadata.get(key)).cloned();
        Self {
            status: status.code(),
            code: info.map(|i| i.reason.clone()).unwrap_or_default(),
            message: status.message().to_owned(),
            hint: meta("hint").unwrap_or_default(),
            request_id: meta("request_id"),
            violations: details
                .bad_request()
                .map(|b| {
                    b.field_violations
                        .iter()
                        .map(|v| (v.field.clone(), v.description.clone()))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// Whether this came from rowcall (it carries a code), rather than from the transport.
    pub fn from_rowcall(&self) -> bool {
        !self.code.is_empty()
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.code.is_empty() {
            write!(f, "{:?}: {}", self.status, self.message)?;
        } else {
            write!(f, "{} ({})", self.message, self.code)?;
        }
        for (pointer, message) in &self.violations {
            write!(f, "; {pointer}: {message}")?;
        }
        if !self.hint.is_empty() {
            write!(f, "; hint: {}", self.hint)?;
        }
        Ok(())
    }
}
