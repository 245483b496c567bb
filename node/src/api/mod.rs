//! The node's public front ends, each a thin adapter over [`crate::service`]: `http` serves
//! the whole protocol of DESIGN §3; `mcp` the MCP projection of §5, mounted in the same
//! router; `grpc` the public gRPC API (`rowcall.v1`) on the gRPC listener. The helpers here
//! read what they all take from HTTP headers (gRPC metadata is HTTP/2 headers).

pub mod grpc;
pub mod http;
pub mod mcp;
pub mod peer;

use axum::http::{header, HeaderMap};

use crate::app::App;

/// The credential presented in `Authorization: Bearer` or `x-terminal-key`, if any.
pub(crate) fn presented_credential(headers: &HeaderMap) -> Option<&str> {
    if let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let value = value.trim();
        let token = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))
            .unwrap_or(value);
        return Some(token.trim());
    }
    headers
        .get("x-terminal-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// Base URL for links in answers: the configured public URL, else the request's Host.
pub(crate) fn base_url(app: &App, headers: &HeaderMap) -> String {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    crate::service::base_url(app, host)
}
