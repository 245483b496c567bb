//! Share tokens: a signed, expiring permission to invoke one `key`-auth row, carried in a
//! `run_now` link (`GET /api/dispatch?invoke=K&share=T`). Here as values: the signing
//! secret, minting and verifying, and why a token is refused; the cluster state a token is
//! checked against (the secret, the revocations) is read by [`crate::dispatch::share`].
//!
//! ```text
//! st2.<kid>.<id>.<KEY>.<expires_unix_s>.<sig>
//! kid = the first 8 hex digits of SHA-256(secret): which of the cluster's keys signed it
//! sig = base64url(HMAC-SHA256(secret, "st2\n<kid>\n<id>\n<KEY>\n<expires_unix_s>"))
//! ```
//!
//! Every field is URL-safe, so a token needs no escaping in a query. Tokens are stateless:
//! only a revocation is stored. The receipt of an invocation through a token names the
//! caller `share:<id>`. The cluster's keys ([`ShareKeys`]) rotate: the new key signs from
//! then on, and the one before it keeps verifying only if the rotation said so (a planned
//! rotation), otherwise its tokens are refused at once (a leaked key). Tokens of the first
//! format (`st1.<id>.<KEY>.<expires>.<sig>`, no key id) verify against either key.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::time::{format_ms, now_ms};

const VERSION: &str = "st2";
const VERSION_1: &str = "st1";

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
    /// A fresh random secret (decided by the proposer, never by apply).
    pub fn generate() -> Self {
        let bytes: [u8; 32] = rand::random();
        Self(hex::encode(bytes))
    }

    /// The key id: the first 8 hex digits of the secret's SHA-256 (it names the key in
    /// tokens without revealing anything usable about it).
    pub fn kid(&self) -> String {
        use sha2::Digest;
        hex::encode(&Sha256::digest(self.0.as_bytes())[..4])
    }

    fn mac(&self, signed: &str) -> Hmac<Sha256> {
        // HMAC takes a key of any length; this cannot fail.
        let mut mac = Hmac::<Sha256>::new_from_slice(self.0.as_bytes())
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        mac.update(signed.as_bytes());
        mac
    }

    /// A token for `key` with id `id`, valid until `expires` (Unix seconds).
    pub fn mint(&self, id: &str, key: &str, expires: u64) -> String {
        let kid = self.kid();
        let signed = format!("{VERSION}\n{kid}\n{id}\n{key}\n{expires}");
        let sig = URL_SAFE_NO_PAD.encode(self.mac(&signed).finalize().into_bytes());
        format!("{VERSION}.{kid}.{id}.{key}.{expires}.{sig}")
    }
}

/// The cluster's share keys: the current one signs, the previous one (kept by a planned
/// rotation) still verifies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareKeys {
    /// Signs new tokens, and verifies.
    pub current: ShareSecret,
    /// Verifies tokens it signed before the last rotation, if that rotation kept it.
    pub previous: Option<ShareSecret>,
}

impl ShareKeys {
    /// One key, nothing rotated yet.
    pub fn single(current: ShareSecret) -> Self {
        Self {
            current,
            previous: None,
        }
    }

    /// A token for `key`, signed with the current key.
    pub fn mint(&self, id: &str, key: &str, expires: u64) -> String {
        self.current.mint(id, key, expires)
    }

    fn keys(&self) -> impl Iterator<Item = &ShareSecret> {
        std::iter::once(&self.current).chain(self.previous.as_ref())
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
        let (kid, id, token_key, expires, sig) = match parts[..] {
            [VERSION, kid, id, token_key, expires, sig] => (Some(kid), id, token_key, expires, sig),
            [VERSION_1, id, token_key, expires, sig] => (None, id, token_key, expires, sig),
            _ => return Err(ShareRefusal::Malformed),
        };
        if !valid_token_id(id) {
            return Err(ShareRefusal::Malformed);
        }
        let expires_at: u64 = expires.parse().map_err(|_| ShareRefusal::Malformed)?;
        let sig = URL_SAFE_NO_PAD
            .decode(sig)
            .map_err(|_| ShareRefusal::Malformed)?;
        let (signed, candidates): (String, Vec<&ShareSecret>) = match kid {
            Some(kid) => {
                let key = self.keys().find(|k| k.kid() == kid).ok_or_else(|| {
                    ShareRefusal::RetiredKey {
                        kid: kid.to_owned(),
                    }
                })?;
                (
                    format!("{VERSION}\n{kid}\n{id}\n{token_key}\n{expires}"),
                    vec![key],
                )
            }
            None => (
                format!("{VERSION_1}\n{id}\n{token_key}\n{expires}"),
                self.keys().collect(),
            ),
        };
        // Constant-time comparison against each key the token may be signed with.
        if !candidates
            .iter()
            .any(|k| k.mac(&signed).verify_slice(&sig).is_ok())
        {
            return Err(ShareRefusal::Tampered);
        }
        let expires = expires_at;
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
    /// Signed with a key the cluster rotated out (or never had).
    #[error("the share token was signed with key {kid}, which this cluster no longer accepts")]
    RetiredKey {
        /// The key id in the token.
        kid: String,
    },
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
        let secret = ShareKeys::single(ShareSecret::generate());
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
        let secret = ShareKeys::single(ShareSecret::generate());
        let token = secret.mint("sh0123456789", "KEY", 2_000);
        let later = token.replace(".2000.", ".9999.");
        assert_eq!(
            secret.verify(&later, "KEY", 1_000, never),
            Err(ShareRefusal::Tampered)
        );
        let foreign = ShareSecret::generate();
        let other = foreign.mint("sh0123456789", "KEY", 2_000);
        assert_eq!(
            secret.verify(&other, "KEY", 1_000, never),
            Err(ShareRefusal::RetiredKey { kid: foreign.kid() })
        );
        // A foreign key under our key id is still only a bad signature.
        let forged = other.replace(&foreign.kid(), &secret.current.kid());
        assert_eq!(
            secret.verify(&forged, "KEY", 1_000, never),
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
        assert!(!format!("{secret:?}").contains(&secret.current.0));
    }

    #[test]
    fn a_rotation_retires_the_old_key_unless_it_was_kept() {
        let old = ShareSecret::generate();
        let new = ShareSecret::generate();
        let token = old.mint("sh0123456789", "KEY", 2_000);
        let kept = ShareKeys {
            current: new.clone(),
            previous: Some(old.clone()),
        };
        assert!(kept.verify(&token, "KEY", 1_000, never).is_ok());
        let fresh = kept.mint("sh0123456780", "KEY", 2_000);
        assert!(fresh.starts_with(&format!("st2.{}.", new.kid())), "{fresh}");
        let retired = ShareKeys::single(new);
        assert_eq!(
            retired.verify(&token, "KEY", 1_000, never),
            Err(ShareRefusal::RetiredKey { kid: old.kid() })
        );
        assert!(retired.verify(&fresh, "KEY", 1_000, never).is_ok());
    }
}
