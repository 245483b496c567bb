//! Request limits of the HTTP front end, as one tower layer in front of every route:
//!
//! ```text
//!   request ─► body: declared size ≤ max_body_bytes (413), whole body within
//!              body_read_timeout_ms (408), read here so no handler waits on a slow client
//!           ─► rate: which quota (ask / invoke / write) and whose (credential, else address);
//!              over it: 429 with Retry-After                      ─► the route
//! ```
//!
//! Rates use GCRA, one timestamp per (quota, client): a client may spend a minute's quota at
//! once, then one request per `60 s / quota`. The table of clients is bounded
//! (`max_tracked`); expired entries are swept when it is full, and a new client that finds
//! it still full is refused, so a flood from many addresses costs bounded memory. The admin
//! key is never limited: it is the operator.
//!
//! Header-read time, connection counts and HTTP/2 settings are the connection loop's
//! (`serve`); runner concurrency is the service layer's (every front end shares it).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::Http;
use crate::auth::Scope;
use crate::config::{LimitsConfig, RateConfig, RateQuota};
use crate::service::ServiceError;

/// Which quota a request spends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Quota {
    /// Asks and MCP requests.
    Ask,
    /// Invocations.
    Invoke,
    /// Writes.
    Write,
}

impl Quota {
    fn name(self) -> &'static str {
        match self {
            Self::Ask => "ask",
            Self::Invoke => "invoke",
            Self::Write => "write",
        }
    }

    fn per_minute(self, quota: &RateQuota) -> u32 {
        match self {
            Self::Ask => quota.ask_per_minute,
            Self::Invoke => quota.invoke_per_minute,
            Self::Write => quota.write_per_minute,
        }
    }

    /// The quota of a request, from its method, path and query; `None` for requests that
    /// are not limited (contracts, confirmations, directory reads, health, metrics).
    pub fn of(method: &Method, path: &str, query: Option<&str>) -> Option<Self> {
        let has = |name: &str| {
            query.is_some_and(|q| {
                q.split('&')
                    .any(|pair| pair.split('=').next() == Some(name))
            })
        };
        let writes = |prefix: &str| path == prefix || path.starts_with(&format!("{prefix}/"));
        match (method, path) {
            (&Method::POST, "/api/dispatch") => Some(Self::Invoke),
            (&Method::GET, "/api/dispatch") if has("invoke") => Some(Self::Invoke),
            (&Method::GET, "/api/dispatch") if has("ask") => Some(Self::Ask),
            (&Method::POST, "/api/mcp" | "/api/mcp/compact") => Some(Self::Ask),
            (&Method::GET | &Method::HEAD | &Method::OPTIONS, _) => None,
            _ if ["/api/directory", "/api/share", "/api/cluster"]
                .iter()
                .any(|p| writes(p)) =>
            {
                Some(Self::Write)
            }
            _ => None,
        }
    }
}

/// Whose quota: a credential's, or a client address's (IPv6 by its /64: one host holds a
/// whole /64).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Client {
    Credential(String),
    Address(IpAddr),
}

impl Client {
    fn address(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self::Address(IpAddr::V4(v4)),
                None => {
                    let net = u128::from(v6) & (u128::MAX << 64);
                    Self::Address(IpAddr::V6(Ipv6Addr::from(net)))
                }
            },
            v4 => Self::Address(v4),
        }
    }

    fn describe(&self) -> String {
        match self {
            Self::Credential(name) => format!("credential {name:?}"),
            Self::Address(_) => "this address".to_owned(),
        }
    }
}

/// The rate limiter: the GCRA "theoretical arrival time" of each (quota, client).
pub struct RateLimiter {
    config: RateConfig,
    table: Mutex<HashMap<(Quota, Client), Instant>>,
}

impl RateLimiter {
    /// A limiter for `config` (`None` when limits are off).
    pub fn new(config: &RateConfig) -> Option<Self> {
        config.enabled.then(|| Self {
            config: config.clone(),
            table: Mutex::new(HashMap::new()),
        })
    }

    /// Spends one request of `quota` for `client` at `now`: `Err(seconds to wait)` when over.
    fn spend(&self, quota: Quota, client: Client, now: Instant) -> Result<(), u64> {
        let limits = match client {
            Client::Credential(_) => &self.config.per_credential,
            Client::Address(_) => &self.config.per_address,
        };
        let per_minute = quota.per_minute(limits);
        if per_minute == 0 {
            return Err(60);
        }
        let interval = Duration::from_secs(60) / per_minute;
        // A whole minute's quota may be spent at once.
        let tolerance = interval * (per_minute - 1);
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        if table.len() >= self.config.max_tracked && !table.contains_key(&(quota, client.clone())) {
            // An entry whose time has passed is a full bucket: forgetting it changes nothing.
            table.retain(|_, tat| *tat > now);
            if table.len() >= self.config.max_tracked {
                return Err(1);
            }
        }
        let tat = table.entry((quota, client)).or_insert(now);
        let start = (*tat).max(now);
        let wait = start.saturating_duration_since(now);
        if wait > tolerance {
            let retry = wait - tolerance;
            return Err(retry.as_secs() + u64::from(retry.subsec_nanos() > 0));
        }
        *tat = start + interval;
        Ok(())
    }

    /// How many clients are tracked (for tests).
    pub fn tracked(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// The layer: bodies read within their limits, then rates.
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
    if let Some(limiter) = &http.limiter {
        let quota = Quota::of(
            request.method(),
            request.uri().path(),
            request.uri().query(),
        );
        if let Some(quota) = quota {
            let client = match super::credential(request.headers())
                .filter(|c| !c.is_empty())
                .and_then(|c| http.app.credentials.identify(c))
            {
                Some(principal) if principal.allows(Scope::Admin) => None,
                Some(principal) => Some(Client::Credential(principal.name)),
                // No or an unknown credential: the address pays (an unknown one then gets 401).
                None => {
                    let peer = request
                        .extensions()
                        .get::<ConnectInfo<SocketAddr>>()
                        .map_or(IpAddr::from([0, 0, 0, 0]), |c| c.0.ip());
                    Some(Client::address(peer))
                }
            };
            if let Some(client) = client {
                let subject = client.describe();
                if let Err(retry_after_secs) = limiter.spend(quota, client, Instant::now()) {
                    metrics::counter!(crate::metrics::RATE_LIMITED_TOTAL, "quota" => quota.name())
                        .increment(1);
                    return ServiceError::RateLimited {
                        what: quota.name(),
                        subject,
                        retry_after_secs,
                    }
                    .into_response();
                }
            }
        }
    }
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
    fn quotas_follow_the_operation() {
        let of = |m: Method, p: &str, q: Option<&str>| Quota::of(&m, p, q);
        assert_eq!(
            of(Method::GET, "/api/dispatch", Some("ask=time")),
            Some(Quota::Ask)
        );
        assert_eq!(
            of(Method::GET, "/api/dispatch", Some("x=1&invoke=K")),
            Some(Quota::Invoke)
        );
        assert_eq!(of(Method::POST, "/api/dispatch", None), Some(Quota::Invoke));
        assert_eq!(of(Method::GET, "/api/dispatch", Some("key=K")), None);
        assert_eq!(of(Method::GET, "/api/dispatch", Some("asked=1")), None);
        assert_eq!(of(Method::POST, "/api/directory", None), Some(Quota::Write));
        assert_eq!(
            of(Method::DELETE, "/api/directory/K", None),
            Some(Quota::Write)
        );
        assert_eq!(of(Method::GET, "/api/directory", None), None);
        assert_eq!(of(Method::POST, "/api/directoryx", None), None);
        assert_eq!(of(Method::POST, "/api/mcp", None), Some(Quota::Ask));
    }

    #[test]
    fn queries_must_decode_to_utf8() {
        assert!(decodes_to_utf8("ask=what+time"));
        assert!(decodes_to_utf8("ask=caf%C3%A9&x=100%"));
        assert!(decodes_to_utf8("ask=%zz%4"));
        assert!(!decodes_to_utf8("ask=%FF%FE%FD"));
        assert!(!decodes_to_utf8("ask=caf%C3"));
    }

    #[test]
    fn a_minute_of_quota_then_one_per_interval_and_others_unaffected() {
        let config = RateConfig {
            per_address: RateQuota {
                ask_per_minute: 60,
                invoke_per_minute: 3,
                write_per_minute: 0,
            },
            ..RateConfig::default()
        };
        let limiter = RateLimiter::new(&config).unwrap();
        let now = Instant::now();
        let me = || Client::address("10.0.0.1".parse().unwrap());
        for _ in 0..3 {
            limiter.spend(Quota::Invoke, me(), now).unwrap();
        }
        let wait = limiter.spend(Quota::Invoke, me(), now).unwrap_err();
        assert_eq!(wait, 20, "one more every 20 s");
        assert!(limiter
            .spend(Quota::Invoke, me(), now + Duration::from_secs(20))
            .is_ok());
        // Another quota, another address and a credential each have their own.
        assert!(limiter.spend(Quota::Ask, me(), now).is_ok());
        let other = Client::address("10.0.0.2".parse().unwrap());
        assert!(limiter.spend(Quota::Invoke, other, now).is_ok());
        let ci = Client::Credential("ci".into());
        assert!(limiter.spend(Quota::Invoke, ci, now).is_ok());
        // A quota of zero refuses everything.
        assert!(limiter.spend(Quota::Write, me(), now).is_err());
        // One host's IPv6 /64 is one client.
        let a = Client::address("2001:db8::1".parse().unwrap());
        let b = Client::address("2001:db8::ffff:1".parse().unwrap());
        assert_eq!(a, b);
    }

    #[test]
    fn the_table_is_bounded_and_expired_entries_make_room() {
        let config = RateConfig {
            max_tracked: 2,
            ..RateConfig::default()
        };
        let limiter = RateLimiter::new(&config).unwrap();
        let now = Instant::now();
        let client = |i: u8| Client::address(IpAddr::from([10, 0, 0, i]));
        limiter.spend(Quota::Ask, client(1), now).unwrap();
        limiter.spend(Quota::Ask, client(2), now).unwrap();
        assert!(limiter.spend(Quota::Ask, client(3), now).is_err());
        assert_eq!(limiter.tracked(), 2);
        // A minute later both entries have expired: room again.
        let later = now + Duration::from_secs(61);
        assert!(limiter.spend(Quota::Ask, client(3), later).is_ok());
        assert_eq!(limiter.tracked(), 1);
    }
}
