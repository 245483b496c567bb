//! `/console`: the operator console, served from the binary itself (the page, its script
//! and its style are compiled in; nothing is fetched from elsewhere). The page holds no
//! data: its script reads and writes through the same public API and policy as any other
//! client, with the key the operator typed kept in the tab's session storage and sent as
//! `Authorization: Bearer`. No cookie is set or read, so a request another site makes from
//! the operator's browser carries no credential: there is nothing for it to forge (CSRF).
//!
//! Every answer carries a strict Content-Security-Policy (scripts and styles from this
//! origin only, no inline code, API calls to this origin only, never framed), and the
//! usual `nosniff`, `DENY` framing and `no-referrer` headers.

use axum::http::{header, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};

/// The page.
pub const PAGE: &str = include_str!("console/index.html");
/// Its script.
pub const SCRIPT: &str = include_str!("console/console.js");
/// Its style.
pub const STYLE: &str = include_str!("console/console.css");

/// The Content-Security-Policy of every console answer.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; \
    frame-ancestors 'none'";

/// The console's headers on `body` of `content_type`.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    let headers: [(HeaderName, HeaderValue); 6] = [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
    ];
    (headers, body).into_response()
}

/// `GET /console`: the page (the login form until a key is given).
pub async fn page() -> Response {
    asset("text/html; charset=utf-8", PAGE)
}

/// `GET /console/console.js`.
pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /console/console.css`.
pub async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}
