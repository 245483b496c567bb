//! The id a request carries through the logs of every node it touches: the caller's
//! `x-request-id`, else the trace id of its W3C `traceparent`, else one made here. Every log
//! line written while the request is served names it; the answer returns it in
//! `x-request-id`; a write forwarded to the leader carries it there; a receipt keeps it.
//!
//! It lives in a task-local for the request's task, as a tracing span does, so the layers
//! between the front end and the write path need not pass it along.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The header that carries it, both ways.
pub const HEADER: &str = "x-request-id";
/// The W3C trace-context header a request id may come from.
pub const TRACEPARENT: &str = "traceparent";
/// Longest id taken from a caller; longer ones are replaced by a made one.
const MAX_LEN: usize = 128;

tokio::task_local! {
    static CURRENT: TraceId;
}

/// A request's id in the logs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TraceId(String);

impl TraceId {
    /// From a request's headers: `x-request-id` when it is printable ASCII without spaces
    /// (at most 128 bytes), else the trace id of a valid `traceparent`, else a new id.
    pub fn from_headers(request_id: Option<&[u8]>, traceparent: Option<&[u8]>) -> Self {
        request_id
            .and_then(Self::parse)
            .or_else(|| traceparent.and_then(Self::from_traceparent))
            .unwrap_or_else(Self::generate)
    }

    /// A caller's id, if it is one a log line can hold as is.
    pub fn parse(raw: &[u8]) -> Option<Self> {
        let ok = !raw.is_empty() && raw.len() <= MAX_LEN && raw.iter().all(u8::is_ascii_graphic);
        // ASCII graphic bytes are UTF-8.
        ok.then(|| Self(String::from_utf8_lossy(raw).into_owned()))
    }

    /// The trace id of `version-traceid-parentid-flags` (W3C Trace Context): 32 lowercase
    /// hex digits, not all zero.
    fn from_traceparent(raw: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(raw).ok()?.trim();
        let mut parts = text.split('-');
        let (version, trace, parent, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex = |s: &str, n: usize| {
            s.len() == n
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        let valid = hex(version, 2)
            && version != "ff"
            && hex(trace, 32)
            && trace.bytes().any(|b| b != b'0')
            && hex(parent, 16)
            && hex(flags, 2);
        valid.then(|| Self(trace.to_owned()))
    }

    /// A new id: 16 random bytes in hex, the shape of a W3C trace id.
    pub fn generate() -> Self {
        let bytes: [u8; 16] = rand::random();
        Self(hex::encode(bytes))
    }

    /// The id of the request this task serves, if any.
    pub fn current() -> Option<Self> {
        CURRENT.try_with(Clone::clone).ok()
    }

    /// Runs `work` as part of the request with this id.
    pub async fn scope<F: std::future::Future>(self, work: F) -> F::Output {
        CURRENT.scope(self, work).await
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callers_id_wins_then_the_traceparent_then_a_new_one() {
        let parent = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let id = TraceId::from_headers(Some(b"req-42"), Some(parent));
        assert_eq!(id.as_str(), "req-42");
        let id = TraceId::from_headers(None, Some(parent));
        assert_eq!(id.as_str(), "4bf92f3577b34da6a3ce929d0e0e4736");
        let made = TraceId::from_headers(None, None);
        assert_eq!(made.as_str().len(), 32);
        assert_ne!(made, TraceId::from_headers(None, None));
    }

    #[test]
    fn ids_a_log_line_cannot_hold_as_is_are_replaced() {
        for bad in [
            &b""[..],
            b"two words",
            b"line\nbreak",
            &[b'a'; 129],
            "é".as_bytes(),
        ] {
            let id = TraceId::from_headers(Some(bad), None);
            assert_eq!(id.as_str().len(), 32, "{bad:?} replaced by a made id");
        }
        for bad in [
            &b"00-00000000000000000000000000000000-00f067aa0ba902b7-01"[..],
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-01",
        ] {
            let id = TraceId::from_headers(None, Some(bad));
            let text = String::from_utf8_lossy(bad);
            assert!(
                !text.contains(id.as_str()),
                "{text} gave {id}: a made id expected"
            );
        }
    }

    #[tokio::test]
    async fn the_id_is_current_inside_its_scope_only() {
        assert_eq!(TraceId::current(), None);
        let id = TraceId::parse(b"scoped").unwrap();
        let seen = id.clone().scope(async { TraceId::current() }).await;
        assert_eq!(seen, Some(id));
        assert_eq!(TraceId::current(), None);
    }
}
