//! What a caller may spend, decided here for every front end (HTTP, gRPC, MCP):
//!
//! ```text
//!   request ─► its parsed operation (service level: an ask, an invocation, a write, a feed
//!              or Watch subscription), never the raw query text or the HTTP method
//!           ─► Payer: the admin key (the operator, never limited), else the credential,
//!              else the client's address (IPv6 by its /64)
//!           ─► rate: GCRA per (quota, payer)            over: 429 rate_limited, Retry-After
//!           ─► streams: per payer, under the node's cap  over: 429 too_many_streams / 503
//!   connection ─► ConnectionCaps: per address, under the listener's cap; over: closed
//! ```
//!
//! Rates use GCRA, one timestamp per (quota, payer): a payer may spend a minute's quota at
//! once, then one request per `60 s / quota`. The table is bounded (`max_tracked`): expired
//! entries are swept when it is full, and a payer not yet tracked that finds it still full
//! is refused, so a flood from many addresses costs bounded memory.
//!
//! Because the operation is the parsed one, `HEAD /api/dispatch?%69nvoke=K` is an
//! invocation like `POST`, and a gRPC `Invoke` or an MCP `tools/call` spends the same
//! quota as an HTTP one. MCP sessions are capped per credential by `api::mcp::sessions`
//! (every MCP request carries a credential).

use std::collections::HashMap;
use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::ServiceError;
use crate::auth::{Credentials, Principal, Scope};
use crate::config::{LimitsConfig, RateConfig, RateQuota};

/// Which rate quota an operation spends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Quota {
    /// Asks, and MCP requests.
    Ask,
    /// Invocations, over any front end.
    Invoke,
    /// Writes: directory, share tokens, membership, imports, checkpoints.
    Write,
}

impl Quota {
    /// Its name in answers and metrics.
    pub fn name(self) -> &'static str {
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
}

/// Where a request comes from, as its front end saw it: the credential it presented and
/// the client's address.
#[derive(Debug, Clone, Copy, Default)]
pub struct Caller<'a> {
    /// `Authorization: Bearer` or `x-terminal-key` (gRPC: the same metadata), if any.
    pub credential: Option<&'a str>,
    /// The client's address, when the connection has one.
    pub peer: Option<IpAddr>,
}

impl Caller<'_> {
    /// Who pays for the request.
    pub fn payer(&self, credentials: &Credentials) -> Payer {
        Payer::of(credentials, self.credential, self.peer)
    }
}

/// Who pays for a request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Payer {
    /// The admin key: the operator, never rate-limited.
    Operator,
    /// A recognised invoke key or MCP token, by name.
    Credential(String),
    /// No recognised credential: the client's address (see [`client_address`]).
    Address(IpAddr),
}

impl Payer {
    /// The payer of a request presenting `credential` from `peer`. An unknown credential
    /// pays as its address (the request is then refused with 401 anyway); a request whose
    /// address is unknown pays with every other such request.
    pub fn of(credentials: &Credentials, credential: Option<&str>, peer: Option<IpAddr>) -> Self {
        let principal = credential
            .filter(|c| !c.is_empty())
            .and_then(|c| credentials.identify(c));
        Self::of_principal(principal.as_ref(), peer)
    }

    /// The payer of a request by `principal` (`None`: no credential) from `peer`.
    pub fn of_principal(principal: Option<&Principal>, peer: Option<IpAddr>) -> Self {
        match principal {
            Some(p) if p.allows(Scope::Admin) => Self::Operator,
            Some(p) => Self::Credential(p.name.clone()),
            None => Self::Address(client_address(peer.unwrap_or(IpAddr::from([0, 0, 0, 0])))),
        }
    }

    fn describe(&self) -> String {
        match self {
            Self::Operator => "the operator".to_owned(),
            Self::Credential(name) => format!("credential {name:?}"),
            Self::Address(_) => "this address".to_owned(),
        }
    }
}

/// The client an address stands for: an IPv4-mapped IPv6 address is its IPv4 address, and
/// other IPv6 addresses count by their /64 (one host is given a whole /64).
pub fn client_address(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & (u128::MAX << 64))),
        },
        v4 => v4,
    }
}

/// The rate limiter: the GCRA "theoretical arrival time" of each (quota, payer).
struct RateLimiter {
    config: RateConfig,
    table: Mutex<HashMap<(Quota, Payer), Instant>>,
}

impl RateLimiter {
    fn new(config: &RateConfig) -> Option<Self> {
        config.enabled.then(|| Self {
            config: config.clone(),
            table: Mutex::new(HashMap::new()),
        })
    }

    /// Spends one request of `quota` for `payer` at `now`: `Err(seconds to wait)` when over.
    fn spend(&self, quota: Quota, payer: &Payer, now: Instant) -> Result<(), u64> {
        let limits = match payer {
            Payer::Operator => return Ok(()),
            Payer::Credential(_) => &self.config.per_credential,
            Payer::Address(_) => &self.config.per_address,
        };
        let per_minute = quota.per_minute(limits);
        if per_minute == 0 {
            return Err(60);
        }
        let interval = Duration::from_secs(60) / per_minute;
        // A whole minute's quota may be spent at once.
        let tolerance = interval * (per_minute - 1);
        let key = (quota, payer.clone());
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        if table.len() >= self.config.max_tracked && !table.contains_key(&key) {
            // An entry whose time has passed is a full bucket: forgetting it changes nothing.
            table.retain(|_, tat| *tat > now);
            if table.len() >= self.config.max_tracked {
                return Err(1);
            }
        }
        let tat = table.entry(key).or_insert(now);
        let start = (*tat).max(now);
        let wait = start.saturating_duration_since(now);
        if wait > tolerance {
            let retry = wait - tolerance;
            return Err(retry.as_secs() + u64::from(retry.subsec_nanos() > 0));
        }
        *tat = start + interval;
        Ok(())
    }

    fn tracked(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// Why [`Caps::take`] refused a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// All `limit` slots are held.
    Total {
        /// The cap.
        limit: usize,
    },
    /// The key holds `limit` slots already.
    PerKey {
        /// The cap.
        limit: usize,
    },
}

/// Counted slots: at most `total` held at once, at most `per_key` by any one key, so that
/// one client cannot take what all clients share.
#[derive(Debug)]
pub struct Caps<K: Hash + Eq> {
    total: usize,
    per_key: usize,
    held: Mutex<Held<K>>,
    released: tokio::sync::Notify,
}

#[derive(Debug)]
struct Held<K> {
    all: usize,
    by_key: HashMap<K, usize>,
}

/// One slot of [`Caps`], given back when dropped.
#[derive(Debug)]
pub struct Slot<K: Hash + Eq + Clone> {
    caps: Arc<Caps<K>>,
    key: Option<K>,
}

impl<K: Hash + Eq + Clone> Caps<K> {
    /// `total` slots, `per_key` of them at most for one key.
    pub fn new(total: usize, per_key: usize) -> Arc<Self> {
        Arc::new(Self {
            total: total.max(1),
            per_key: per_key.max(1),
            held: Mutex::new(Held {
                all: 0,
                by_key: HashMap::new(),
            }),
            released: tokio::sync::Notify::new(),
        })
    }

    /// A slot for `key` (`None`: one that only the total cap applies to, the operator's).
    pub fn take(self: &Arc<Self>, key: Option<K>) -> Result<Slot<K>, Full> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.all >= self.total {
            return Err(Full::Total { limit: self.total });
        }
        if let Some(key) = &key {
            let mine = held.by_key.entry(key.clone()).or_insert(0);
            if *mine >= self.per_key {
                return Err(Full::PerKey {
                    limit: self.per_key,
                });
            }
            *mine += 1;
        }
        held.all += 1;
        Ok(Slot {
            caps: self.clone(),
            key,
        })
    }

    /// Slots held now.
    pub fn held(&self) -> usize {
        self.held.lock().unwrap_or_else(PoisonError::into_inner).all
    }

    /// Returns once no slot is held.
    pub async fn drained(&self) {
        loop {
            let released = self.released.notified();
            if self.held() == 0 {
                return;
            }
            released.await;
        }
    }
}

impl<K: Hash + Eq + Clone> Drop for Slot<K> {
    fn drop(&mut self) {
        let mut held = self
            .caps
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        held.all = held.all.saturating_sub(1);
        if let Some(key) = &self.key {
            if let Some(mine) = held.by_key.get_mut(key) {
                *mine = mine.saturating_sub(1);
                if *mine == 0 {
                    held.by_key.remove(key);
                }
            }
        }
        drop(held);
        self.caps.released.notify_waiters();
    }
}

/// Connection slots of one listener, per client address ([`client_address`]).
pub type ConnectionCaps = Caps<IpAddr>;

/// A change-feed (HTTP) or Watch (gRPC) stream's slot, held as long as the stream is open.
pub type StreamSlot = Slot<Payer>;

/// The node's spending policy: rate quotas and stream slots, shared by every front end.
pub struct Spending {
    rates: Option<RateLimiter>,
    streams: Arc<Caps<Payer>>,
}

impl Spending {
    /// The policy of `limits`.
    pub fn new(limits: &LimitsConfig) -> Self {
        Self {
            rates: RateLimiter::new(&limits.rate),
            streams: Caps::new(
                limits.max_feed_subscribers,
                limits.max_feed_subscribers_per_client,
            ),
        }
    }

    /// Spends one `quota` request of `payer`: 429 with the wait when it is over.
    pub fn spend(&self, quota: Quota, payer: &Payer) -> Result<(), ServiceError> {
        let Some(rates) = &self.rates else {
            return Ok(());
        };
        rates
            .spend(quota, payer, Instant::now())
            .map_err(|retry_after_secs| {
                metrics::counter!(crate::metrics::RATE_LIMITED_TOTAL, "quota" => quota.name())
                    .increment(1);
                ServiceError::RateLimited {
                    what: quota.name(),
                    subject: payer.describe(),
                    retry_after_secs,
                }
            })
    }

    /// A slot for one more feed or Watch stream of `payer`: 429 when the payer holds its
    /// share, 503 when the node holds all it allows. The operator only meets the latter.
    pub fn open_stream(&self, payer: &Payer) -> Result<StreamSlot, ServiceError> {
        let key = (*payer != Payer::Operator).then(|| payer.clone());
        self.streams.take(key).map_err(|full| {
            metrics::counter!(crate::metrics::BUSY_TOTAL, "what" => "feed").increment(1);
            match full {
                Full::Total { limit } => ServiceError::Busy {
                    what: "change-feed streams",
                    limit,
                },
                Full::PerKey { limit } => ServiceError::TooManyStreams {
                    subject: payer.describe(),
                    limit,
                },
            }
        })
    }

    /// (quota, payer) pairs the rate table tracks now (for tests).
    pub fn tracked(&self) -> usize {
        self.rates.as_ref().map_or(0, RateLimiter::tracked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(text: &str) -> Payer {
        Payer::of_principal(None, Some(text.parse().unwrap()))
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
        let me = address("10.0.0.1");
        for _ in 0..3 {
            limiter.spend(Quota::Invoke, &me, now).unwrap();
        }
        let wait = limiter.spend(Quota::Invoke, &me, now).unwrap_err();
        assert_eq!(wait, 20, "one more every 20 s");
        assert!(limiter
            .spend(Quota::Invoke, &me, now + Duration::from_secs(20))
            .is_ok());
        // Another quota, another address and a credential each have their own.
        assert!(limiter.spend(Quota::Ask, &me, now).is_ok());
        assert!(limiter
            .spend(Quota::Invoke, &address("10.0.0.2"), now)
            .is_ok());
        let ci = Payer::Credential("ci".into());
        assert!(limiter.spend(Quota::Invoke, &ci, now).is_ok());
        // A quota of zero refuses everything; the operator is never limited.
        assert!(limiter.spend(Quota::Write, &me, now).is_err());
        for _ in 0..1_000 {
            assert!(limiter.spend(Quota::Write, &Payer::Operator, now).is_ok());
        }
    }

    #[test]
    fn one_host_is_one_payer() {
        assert_eq!(address("2001:db8::1"), address("2001:db8::ffff:1"));
        assert_ne!(address("2001:db8::1"), address("2001:db8:0:1::1"));
        assert_eq!(address("::ffff:10.0.0.1"), address("10.0.0.1"));
        let admin = Principal {
            name: "admin".into(),
            scope: Scope::Admin,
        };
        assert_eq!(Payer::of_principal(Some(&admin), None), Payer::Operator);
        let ci = Principal {
            name: "ci".into(),
            scope: Scope::Invoke,
        };
        assert_eq!(
            Payer::of_principal(Some(&ci), Some("10.0.0.1".parse().unwrap())),
            Payer::Credential("ci".into())
        );
    }

    #[test]
    fn the_table_is_bounded_and_expired_entries_make_room() {
        let config = RateConfig {
            max_tracked: 2,
            ..RateConfig::default()
        };
        let limiter = RateLimiter::new(&config).unwrap();
        let now = Instant::now();
        let client = |i: u8| Payer::of_principal(None, Some(IpAddr::from([10, 0, 0, i])));
        limiter.spend(Quota::Ask, &client(1), now).unwrap();
        limiter.spend(Quota::Ask, &client(2), now).unwrap();
        assert!(limiter.spend(Quota::Ask, &client(3), now).is_err());
        assert_eq!(limiter.tracked(), 2);
        // A minute later both entries have expired: room again.
        let later = now + Duration::from_secs(61);
        assert!(limiter.spend(Quota::Ask, &client(3), later).is_ok());
        assert_eq!(limiter.tracked(), 1);
    }

    #[test]
    fn one_key_holds_its_share_and_slots_come_back_when_dropped() {
        let caps = Caps::new(3, 2);
        let a = caps.take(Some('a')).unwrap();
        let _a2 = caps.take(Some('a')).unwrap();
        assert_eq!(caps.take(Some('a')).unwrap_err(), Full::PerKey { limit: 2 });
        let _b = caps.take(Some('b')).unwrap();
        assert_eq!(caps.take(None).unwrap_err(), Full::Total { limit: 3 });
        drop(a);
        assert_eq!(caps.held(), 2);
        let _a3 = caps.take(Some('a')).unwrap();
        assert_eq!(caps.take(Some('c')).unwrap_err(), Full::Total { limit: 3 });
    }
}
