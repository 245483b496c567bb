//! The http runner: a row's target `"METHOD URL"` with `{arg}` placeholders becomes one
//! upstream request, through the SSRF guard, with the operator's headers, a timeout, a
//! response cap and redirects followed by hand (each hop checked again).
//!
//! ```text
//! prepare (before anything runs)        call (the runner)
//!  fill {arg} in the URL, URL-encoded     resolve host ─ guard ─ pinned client ─ send
//!  body: caller's body, or the payload    3xx? ── next hop (guard again, limit) ──┘
//!  template with {arg} filled             read body up to the cap ─ status ─ result
//! ```
//!
//! Placeholders in a body template: in a JSON template, `"{arg}"` standing alone becomes the
//! argument's JSON value (numbers stay numbers) and `{arg}` inside a string is JSON-escaped;
//! in any other template the argument's text is inserted as it is.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, LOCATION};
use reqwest::{Method, Url};
use serde_json::{json, Map, Value};

use super::ssrf::{self, AllowList};
use super::{InvokeInput, Ran, RunError};
use crate::catalogue::row::Row;
use crate::config::RunnersConfig;

/// Characters of an upstream error body quoted in the failure message.
const EXCERPT_CHARS: usize = 300;
/// Clients kept for reuse (one per host and checked address set); cleared when full.
const CLIENT_CACHE_MAX: usize = 256;

/// A request ready to go: nothing left to fill.
#[derive(Debug, Clone)]
pub struct Prepared {
    method: Method,
    url: String,
    body: Option<Body>,
    /// Whether the caller's arguments chose the scheme, host or port: then the operator's
    /// configured headers (secrets) must not go with it.
    destination_from_args: bool,
}

/// Whether the scheme, host or port of URL template `template` holds a `{placeholder}`.
fn destination_from_args(template: &str) -> bool {
    let (scheme, rest) = template.split_once("://").unwrap_or(("", template));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    scheme.contains('{') || authority.contains('{')
}

#[derive(Debug, Clone)]
struct Body {
    text: String,
    content_type: &'static str,
}

/// Fills the row's target and body from the arguments. Every missing argument is a
/// violation `(JSON pointer, message)`: the invocation is refused and nothing is sent.
pub fn prepare(row: &Row, input: &InvokeInput) -> Result<Prepared, Vec<(String, String)>> {
    let target = row.target.trim();
    let (method, template) = target.split_once(' ').unwrap_or(("GET", target));
    let method = Method::from_bytes(method.as_bytes()).unwrap_or(Method::GET);
    let args = input.args.clone().unwrap_or_default();
    let mut missing = Vec::new();
    let url = fill(template.trim(), &args, &mut missing, Fill::Url);
    let takes_body = method != Method::GET && method != Method::HEAD;
    let body = match &input.body {
        Some(_) if !takes_body => {
            return Err(vec![(
                "/body".into(),
                format!("a {method} row takes no body; pass args"),
            )]);
        }
        Some(text) => Some(Body {
            content_type: if serde_json::from_str::<Value>(text).is_ok() {
                "application/json"
            } else {
                "text/plain; charset=utf-8"
            },
            text: text.clone(),
        }),
        None => {
            let docs = row.docs();
            let template = docs.payload.trim();
            (takes_body && !template.is_empty()).then(|| fill_body(template, &args, &mut missing))
        }
    };
    if !missing.is_empty() {
        missing.sort();
        missing.dedup();
        return Err(missing
            .into_iter()
            .map(|name| {
                let message = format!("missing: the row's {{{name}}} placeholder needs it");
                (format!("/{name}"), message)
            })
            .collect());
    }
    Ok(Prepared {
        method,
        url,
        body,
        destination_from_args: destination_from_args(template.trim()),
    })
}

fn fill_body(template: &str, args: &Map<String, Value>, missing: &mut Vec<String>) -> Body {
    let json = template.starts_with('{') || template.starts_with('[');
    let mode = if json { Fill::Json } else { Fill::Text };
    Body {
        text: fill(template, args, missing, mode),
        content_type: if json {
            "application/json"
        } else {
            "text/plain; charset=utf-8"
        },
    }
}

/// How a placeholder's value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fill {
    /// Percent-encoded text (URLs).
    Url,
    /// Text as it is.
    Text,
    /// JSON: `"{arg}"` alone becomes the value, `{arg}` in a string is escaped.
    Json,
}

/// Replaces each `{name}` (name: `[A-Za-z_][A-Za-z0-9_]*`) that names an argument; names
/// not in `args` are added to `missing`. Other braces stay as they are.
fn fill(
    template: &str,
    args: &Map<String, Value>,
    missing: &mut Vec<String>,
    mode: Fill,
) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let name_len = after
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .count();
        let name = &after[..name_len];
        let is_placeholder = after[name_len..].starts_with('}')
            && name
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
        if !is_placeholder {
            out.push_str(&rest[..=open]);
            rest = after;
            continue;
        }
        let end = open + name_len + 2;
        let Some(value) = args.get(name) else {
            missing.push(name.to_owned());
            out.push_str(&rest[..end]);
            rest = &rest[end..];
            continue;
        };
        let alone = rest[..open].ends_with('"') && rest[end..].starts_with('"');
        match mode {
            Fill::Json if alone => {
                out.push_str(&rest[..open - 1]);
                out.push_str(&value.to_string());
                rest = &rest[end + 1..];
                continue;
            }
            Fill::Json => {
                let escaped = Value::String(text_of(value)).to_string();
                out.push_str(&rest[..open]);
                out.push_str(&escaped[1..escaped.len() - 1]);
            }
            Fill::Url => {
                out.push_str(&rest[..open]);
                out.push_str(&encode_component(&text_of(value)));
            }
            Fill::Text => {
                out.push_str(&rest[..open]);
                out.push_str(&text_of(value));
            }
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// An argument as text: strings as they are, `null` empty, anything else as JSON.
fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn encode_component(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `url` without user name or password, for receipts and messages.
pub fn redacted(url: &Url) -> String {
    let mut url = url.clone();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.to_string()
}

/// The headers the operator configured for row `key`, read now (secrets included, marked
/// sensitive). An error names the header and the source, never a value.
pub fn configured_headers(config: &RunnersConfig, key: &str) -> Result<HeaderMap, RunError> {
    let mut headers = HeaderMap::new();
    let Some(sources) = config.headers.get(key) else {
        return Ok(headers);
    };
    for (name, source) in sources {
        let fail = |reason: String| RunError::Config(format!("header {name} of {key}: {reason}"));
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| fail("not a valid header name".into()))?;
        let mut value = HeaderValue::from_str(&source.resolve().map_err(fail)?)
            .map_err(|_| fail("the value is not a valid header value".into()))?;
        value.set_sensitive(true);
        headers.insert(header, value);
    }
    Ok(headers)
}

/// A client that connects `host` only to `addrs` (the addresses the guard checked) and
/// never follows redirects itself. Clients are reused per (host, addresses), so connections
/// to a stable upstream are pooled.
pub fn pinned_client(host: &str, addrs: &[SocketAddr]) -> Result<reqwest::Client, RunError> {
    type Cache = Mutex<HashMap<(String, Vec<SocketAddr>), reqwest::Client>>;
    static CLIENTS: OnceLock<Cache> = OnceLock::new();
    let mut sorted = addrs.to_vec();
    sorted.sort();
    let key = (host.to_ascii_lowercase(), sorted);
    let mut clients = CLIENTS
        .get_or_init(Cache::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(client) = clients.get(&key) {
        return Ok(client.clone());
    }
    if clients.len() >= CLIENT_CACHE_MAX {
        clients.clear();
    }
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .resolve_to_addrs(&key.0, &key.1)
        .user_agent(concat!("rowcall/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| RunError::Config(format!("building the HTTP client: {e}")))?;
    clients.insert(key, client.clone());
    Ok(client)
}

/// Resolves and checks `url`'s destination; returns the host and the addresses to use.
pub async fn guard(allow: &AllowList, url: &Url) -> Result<(String, Vec<SocketAddr>), RunError> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(RunError::BadTarget(format!(
            "scheme {:?} is not http or https",
            url.scheme()
        )));
    }
    let host = url
        .host_str()
        .ok_or_else(|| RunError::BadTarget("the URL has no host".into()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = url
        .port_or_known_default()
        .ok_or_else(|| RunError::BadTarget("the URL has no port".into()))?;
    let addrs = ssrf::resolve_checked(allow, &host, port).await?;
    Ok((host, addrs))
}

/// A transport failure with its causes (reqwest's own message is terse), without the URL.
pub fn describe(error: reqwest::Error) -> String {
    let error = error.without_url();
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Runs the prepared request for row `key`.
pub async fn call(config: &RunnersConfig, key: &str, prepared: Prepared) -> Ran {
    let mut called = String::new();
    let mut status = None;
    let limit = Duration::from_millis(config.timeout_ms);
    let outcome = match tokio::time::timeout(
        limit,
        exchange(config, key, prepared, &mut called, &mut status),
    )
    .await
    {
        Ok(outcome) => outcome,
        Err(_) => Err(RunError::Timeout {
            ms: config.timeout_ms,
        }),
    };
    Ran {
        outcome,
        called: Some(called),
        upstream_status: status,
    }
}

async fn exchange(
    config: &RunnersConfig,
    key: &str,
    prepared: Prepared,
    called: &mut String,
    status: &mut Option<String>,
) -> Result<Value, RunError> {
    let Prepared {
        mut method,
        url,
        mut body,
        destination_from_args,
    } = prepared;
    *called = format!("{method} {url}");
    let mut url = Url::parse(&url).map_err(|e| RunError::BadTarget(format!("{url:?}: {e}")))?;
    *called = format!("{method} {}", redacted(&url));
    let allow = AllowList::lenient(config.allow.iter().map(String::as_str));
    let headers = configured_headers(config, key)?;
    // The operator's headers are bound to the origin the row names: a row whose host comes
    // from the caller would let anyone send them to a host of their choosing.
    if destination_from_args && !headers.is_empty() {
        return Err(RunError::BadTarget(format!(
            "the row's host is filled from arguments, but headers are configured for {key}; \
             write the host into the target"
        )));
    }
    let origin = url.origin();
    let mut hops = 0;
    loop {
        let (host, addrs) = guard(&allow, &url).await?;
        let client = pinned_client(&host, &addrs)?;
        let mut request = client.request(method.clone(), url.clone());
        // The operator's headers (secrets) never follow a redirect to another origin.
        if url.origin() == origin {
            request = request.headers(headers.clone());
        }
        if let Some(body) = &body {
            request = request
                .header(CONTENT_TYPE, body.content_type)
                .body(body.text.clone());
        }
        let response = request
            .send()
            .await
            .map_err(|e| RunError::Unreachable(describe(e)))?;
        let code = response.status();
        *status = Some(code.as_u16().to_string());
        let location = response
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if let (true, Some(location)) = (code.is_redirection(), location) {
            if hops == config.max_redirects {
                return Err(RunError::TooManyRedirects {
                    limit: config.max_redirects,
                });
            }
            hops += 1;
            let next = url
                .join(&location)
                .map_err(|e| RunError::BadTarget(format!("redirect to {location:?}: {e}")))?;
            // 303 always, and 301/302 after a POST, continue as a GET without the body.
            if code.as_u16() == 303
                || (matches!(code.as_u16(), 301 | 302) && method == Method::POST)
            {
                method = Method::GET;
                body = None;
            }
            called.push_str(&format!(" -> {}", redacted(&next)));
            url = next;
            continue;
        }
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = read_capped(response, config.max_response_bytes).await?;
        if !code.is_success() {
            let text = String::from_utf8_lossy(&bytes);
            let excerpt: String = text.chars().take(EXCERPT_CHARS).collect();
            return Err(RunError::UpstreamStatus {
                status: code.as_u16(),
                excerpt,
            });
        }
        return Ok(json!({
            "status": code.as_u16(),
            "content_type": content_type,
            "body": decode(&bytes, content_type.as_deref()),
        }));
    }
}

/// Reads the body, failing as soon as it exceeds `cap` (a declared length over it fails
/// before anything is read).
async fn read_capped(mut response: reqwest::Response, cap: usize) -> Result<Vec<u8>, RunError> {
    if response
        .content_length()
        .is_some_and(|len| len > cap as u64)
    {
        return Err(RunError::TooLarge { limit: cap });
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| RunError::Unreachable(format!("reading the answer: {}", describe(e))))?
    {
        if bytes.len() + chunk.len() > cap {
            return Err(RunError::TooLarge { limit: cap });
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// The body as JSON when it says it is JSON and parses, otherwise as text.
fn decode(bytes: &[u8], content_type: Option<&str>) -> Value {
    let says_json = content_type.is_some_and(|ct| {
        let essence = ct.split(';').next().unwrap_or("").trim();
        essence.eq_ignore_ascii_case("application/json") || essence.ends_with("+json")
    });
    if says_json {
        if let Ok(value) = serde_json::from_slice(bytes) {
            return value;
        }
    }
    Value::String(String::from_utf8_lossy(bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::row::RowType;

    fn row(target: &str, content: &str) -> Row {
        Row {
            target: target.into(),
            ..Row::fixture("T", RowType::Http, content)
        }
    }

    fn args(value: Value) -> InvokeInput {
        InvokeInput {
            args: value.as_object().cloned(),
            ..InvokeInput::default()
        }
    }

    #[test]
    fn placeholders_are_url_encoded_and_missing_ones_listed() {
        let r = row("GET https://h.example/s?q={q}&n={n}&x={1x}{}{ y}", "");
        let p = prepare(&r, &args(json!({"q": "a b&c/é", "n": 3}))).unwrap();
        assert_eq!(
            p.url,
            "https://h.example/s?q=a%20b%26c%2F%C3%A9&n=3&x={1x}{}{ y}"
        );
        let err = prepare(&r, &args(json!({}))).unwrap_err();
        let pointers: Vec<&str> = err.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(pointers, ["/n", "/q"]);
    }

    #[test]
    fn json_body_templates_keep_types_and_escape_strings() {
        let r = row(
            "POST https://h.example/issues",
            "# WHAT: file an issue\n\n{\"title\": \"{title}\", \"count\": \"{n}\", \"note\": \"re: {title}!\"}",
        );
        let p = prepare(&r, &args(json!({"title": "say \"hi\"", "n": 2}))).unwrap();
        let body = p.body.unwrap();
        assert_eq!(body.content_type, "application/json");
        let parsed: Value = serde_json::from_str(&body.text).unwrap();
        assert_eq!(
            parsed,
            json!({"title": "say \"hi\"", "count": 2, "note": "re: say \"hi\"!"})
        );
    }

    #[test]
    fn a_caller_body_wins_and_get_rows_take_none() {
        let r = row("POST https://h.example/x", "# WHAT: x\n\ntemplate {a}");
        let input = InvokeInput {
            body: Some("raw text".into()),
            ..InvokeInput::default()
        };
        let p = prepare(&r, &input).unwrap();
        assert_eq!(p.body.unwrap().text, "raw text");
        let get = row("GET https://h.example/x", "");
        let err = prepare(&get, &input).unwrap_err();
        assert_eq!(err[0].0, "/body");
    }

    #[test]
    fn destinations_chosen_by_arguments_are_recognised() {
        for (template, chosen) in [
            ("https://api.example/v1/{path}?q={q}", false),
            ("https://{host}/v1", true),
            ("https://api.example{suffix}/v1", true),
            ("https://api.example:{port}/v1", true),
            ("{scheme}://api.example/v1", true),
            ("{url}", true),
            ("https://api.example#{frag}", false),
        ] {
            assert_eq!(destination_from_args(template), chosen, "{template}");
        }
    }

    #[test]
    fn receipts_never_show_credentials_in_urls() {
        let url = Url::parse("https://user:pw@h.example/p?q=1").unwrap();
        assert_eq!(redacted(&url), "https://h.example/p?q=1");
    }
}
