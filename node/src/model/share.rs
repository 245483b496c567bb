//! Share tokens: a signed, expiring permission to invoke one `key`-auth row, carried in a
//! `run_now` link (`GET /api/dispatch?invoke=K&share=T`). Here as values: the signing
//! secret, minting and verifying, and why a token is refused; the cluster state a token is
//! checked against (the secret, the revocations) is read by [`crate::dispatch::share`].
//!
//! ```text
//! st1.<id>.<KEY>.<expires_unix_s>.<sig>
//! sig = base64url(HMAC-SHA256(cluster secret, "st1\n<id>\n<KEY>\n<expires_unix_s>"))
//! ```
//!
//! Every field is URL-safe, so a token needs no escaping in a query. Tokens are stateless:
//! only a revocation is stored. The receipt of an invocation through a token names the
//! caller `share:<id>`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::time::{format_ms, now_ms};

const VERSION: &str = "st1";

/// The cluster's share secret (hex of 32 random bytes). Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ShareSecret(String);

impl std::fmt::Debug for ShareSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ShareSecret(..)")
    }
}

impl ShareSecret {
    /// Whether it has the shape [`ShareSecret::generate`] gives (64 hex characters), so a
    /// leader can refuse a forwarded secret nobody here made.
    pub fn is_well_formed(&self) -> bool {
        self.0.len() == 64 && self.0.bytes().all(|b| b.is_ascii_hexdigit())
    }

    /// A fresh random secret (decided by the proposer, never by apply).
    pub fn generate() -> Self {
        let bytes: [u8; 32] = rand::random();
        Self(hex::encode(bytes))
    }

    fn mac(&self, id: &str, key: &str, expires: u64) -> Hmac<Sha256> {
        // HMAC takes a key of any length; this cannot fail.
        let mut mac = Hmac::<Sha256>::new_from_slice(self.0.as_bytes())
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        mac.update(format!("{VERSION}\n{id}\n{key}\n{expires}").as_bytes());
        mac
    }

    /// A token for `key` with id `id`, valid until `expires` (Unix seconds).
    pub fn mint(&self, id: &str, key: &str, expires: u64) -> String {
        let sig = URL_SAFE_NO_PAD.encode(self.mac(id, key, expires).finalize().into_bytes());
        format!("{VERSION}.{id}.{key}.{expires}.{sig}")
    }

    /// Checks `token` for an invocation of `key` at `now` (Unix seconds). `revoked` says
    /// whether a token id was revoked. Checks run in the order the reasons are listed in
    /// [`ShareRefusal`], so a forged token is called tampered, never expired.
    pub fn verify<E: std::fmt::Display>(
        &self,
        token: &str,
        key: &str,
        now: u64,
        revoked: impl FnOnce(&str) -> Result<bool, E>,
    ) -> Result<ShareGrant, ShareRefusal> {
        let parts: Vec<&str> = token.split('.').collect();
        let [version, id, token_key, expires, sig] = parts[..] else {
            return Err(ShareRefusal::Malformed);
        };
        if version != VERSION || !valid_token_id(id) {
            return Err(ShareRefusal::Malformed);
        }
        let expires: u64 = expires.parse().map_err(|_| ShareRefusal::Malformed)?;
        let sig = URL_SAFE_NO_PAD
            .decode(sig)
            .map_err(|_| ShareRefusal::Malformed)?;
        // Constant-time comparison.
        self.mac(id, token_key, expires)
            .verify_slice(&sig)
            .map_err(|_| ShareRefusal::Tampered)?;
        if revoked(id).map_err(|e| ShareRefusal::Unchecked(e.to_string()))? {
            return Err(ShareRefusal::Revoked { id: id.to_owned() });
        }
        if token_key != key {
            return Err(ShareRefusal::WrongKey {
                token_key: token_key.to_owned(),
                key: key.to_owned(),
            });
        }
        if now >= expires {
            return Err(ShareRefusal::Expired {
                at: format_ms(expires.saturating_mul(1000)),
            });
        }
        Ok(ShareGrant {
            id: id.to_owned(),
            expires,
        })
    }
}

/// What a valid token grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareGrant {
    /// The token's id (the receipt's caller is `share:<id>`).
    pub id: String,
    /// Its expiry, Unix seconds.
    pub expires: u64,
}

/// Why a share token was refused (each a 401 whose message is the reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShareRefusal {
    /// Not of the form `st1.<id>.<KEY>.<expiry>.<sig>`.
    #[error("the share token is malformed (expected st1.<id>.<KEY>.<expiry>.<signature>)")]
    Malformed,
    /// The signature does not match: the token was altered or signed by someone else.
    #[error("the share token was tampered with: its signature does not match")]
    Tampered,
    /// An operator revoked it.
    #[error("the share token {id} was revoked")]
    Revoked {
        /// The token id.
        id: String,
    },
    /// It is scoped to another row.
    #[error("the share token is for {token_key}, not {key}")]
    WrongKey {
        /// The key in the token.
        token_key: String,
        /// The key invoked.
        key: String,
    },
    /// Its lifetime is over.
    #[error("the share token expired at {at}")]
    Expired {
        /// When (RFC 3339).
        at: String,
    },
    /// The cluster has never minted a token, so none can be valid.
    #[error("no share token has been minted by this cluster")]
    NoSecret,
    /// The revocation list could not be read; refused to be safe.
    #[error("the share token could not be checked")]
    Unchecked(String),
    /// This node is cut off from the leader, so its revocation list may be behind; refused
    /// to be safe.
    #[error("the share token cannot be checked here: this node is cut off from the leader and may not know every revocation")]
    Stale,
}

/// A fresh token id: `sh` and 10 base36 characters.
pub fn new_token_id() -> String {
    const ALPHABET: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let bytes: [u8; 10] = rand::random();
    let mut id = String::from("sh");
    id.extend(bytes.iter().map(|b| ALPHABET[usize::from(*b) % 36] as char));
    id
}

/// Whether `id` has the shape of a token id.
pub fn valid_token_id(id: &str) -> bool {
    id.strip_prefix("sh").is_some_and(|rest| {
        rest.len() == 10
            && rest
                .bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
    })
}

/// Seconds since the epoch, now.
pub fn now_secs() -> u64 {
    now_ms() / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never(_: &str) -> Result<bool, std::convert::Infallible> {
        Ok(false)
    }

    #[test]
    fn tokens_verify_until_they_expire_and_only_for_their_key() {
        let secret = ShareSecret::generate();
        let id = new_token_id();
        assert!(valid_token_id(&id), "{id}");
        let token = secret.mint(&id, "PAY_INVOICE", 2_000);
        let grant = secret.verify(&token, "PAY_INVOICE", 1_999, never).unwrap();
        assert_eq!(grant.id, id);
        assert!(matches!(
            secret.verify(&token, "PAY_INVOICE", 2_000, never),
            Err(ShareRefusal::Expired { .. })
        ));
        assert!(matches!(
            secret.verify(&token, "OTHER", 1_000, never),
            Err(ShareRefusal::WrongKey { .. })
        ));
        assert!(matches!(
            secret.verify(&token, "PAY_INVOICE", 1_000, |_| Ok::<_, String>(true)),
            Err(ShareRefusal::Revoked { .. })
        ));
    }

    #[test]
    fn altered_or_foreign_tokens_are_tampered_and_junk_is_malformed() {
        let secret = ShareSecret::generate();
        let token = secret.mint("sh0123456789", "KEY", 2_000);
        let later = token.replace(".2000.", ".9999.");
        assert_eq!(
            secret.verify(&later, "KEY", 1_000, never),
            Err(ShareRefusal::Tampered)
        );
        let other = ShareSecret::generate().mint("sh0123456789", "KEY", 2_000);
        assert_eq!(
            secret.verify(&other, "KEY", 1_000, never),
            Err(ShareRefusal::Tampered)
        );
        for junk in [
            "",
            "st1",
            "st1.a.b.c.d",
            "st2.sh0123456789.KEY.1.AAAA",
            "x.y.z",
        ] {
            assert_eq!(
                secret.verify(junk, "KEY", 1_000, never),
                Err(ShareRefusal::Malformed),
                "{junk}"
            );
        }
        assert!(!format!("{secret:?}").contains(&secret.0));
    }
}
