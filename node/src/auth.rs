//! Credentials: the admin key, named invoke keys and MCP tokens, compared in constant time.
//!
//! Secrets are kept only as SHA-256 digests (the configuration's copies are scrubbed once
//! the digests are made, [`Credentials::from_config`]); a presented credential is hashed once
//! and compared against every digest with `subtle`, so neither its content nor its length
//! leaks through timing. Secrets shorter than [`MIN_SECRET_CHARS`] are refused at start:
//! a guessable key on a network service is worse than none.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::AuthConfig;

/// The shortest secret a node accepts (the generated admin key has 64).
pub const MIN_SECRET_CHARS: usize = 32;

/// A configured secret that is too weak to use.
#[derive(Debug, thiserror::Error)]
#[error(
    "{what} is {len} characters long; secrets must have at least {MIN_SECRET_CHARS} \
     (make one with `openssl rand -hex 32`)"
)]
pub struct WeakSecret {
    /// Which secret (`the admin key`, `invoke key "ci"`), never its value.
    pub what: String,
    /// Its length in characters.
    pub len: usize,
}

/// Refuses a secret shorter than [`MIN_SECRET_CHARS`].
pub fn check_strength(what: impl FnOnce() -> String, secret: &str) -> Result<(), WeakSecret> {
    let len = secret.chars().count();
    if len < MIN_SECRET_CHARS {
        return Err(WeakSecret { what: what(), len });
    }
    Ok(())
}

/// What a credential lets its holder do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everything.
    Admin,
    /// Invoke `key`-auth rows.
    Invoke,
    /// Use the MCP projection.
    Mcp,
}

/// The holder of a recognised credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The credential's name (`admin` for the admin key); recorded in receipts.
    pub name: String,
    /// What it allows.
    pub scope: Scope,
}

impl Principal {
    /// Whether this principal may do what `needed` requires. The admin key is accepted
    /// wherever an invoke key or an MCP token is.
    pub fn allows(&self, needed: Scope) -> bool {
        self.scope == Scope::Admin || self.scope == needed
    }

    /// A short digest of who this is (scope and name, never the secret), to mark what the
    /// principal owns where anyone may see the mark: MCP session ids and their streams. It
    /// is not secret and need not be: an owner check compares the mark with the digest of
    /// the credential presented, which nobody can choose.
    pub fn owner_tag(&self) -> String {
        let scope = match self.scope {
            Scope::Admin => "admin",
            Scope::Invoke => "invoke",
            Scope::Mcp => "mcp",
        };
        let mut hasher = Sha256::new();
        for part in ["rowcall owner", scope, &self.name] {
            hasher.update(part.as_bytes());
            hasher.update([0]);
        }
        hex::encode(&hasher.finalize()[..OWNER_TAG_BYTES])
    }
}

/// Bytes of an owner tag ([`Principal::owner_tag`]): 16 hex characters.
pub const OWNER_TAG_BYTES: usize = 8;

struct Secret {
    name: String,
    scope: Scope,
    digest: [u8; 32],
}

/// The node's credentials.
pub struct Credentials {
    secrets: Vec<Secret>,
}

fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

impl std::fmt::Debug for Credentials {
    // Names and scopes only: digests are as good as a password to an offline guesser.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.secrets.iter().map(|s| (&s.name, s.scope)))
            .finish()
    }
}

impl Credentials {
    /// Builds the set from the admin key and the `[auth]` section, refusing weak secrets,
    /// then scrubs the section's secrets so that only digests outlive the start.
    pub fn from_config(admin_key: &str, auth: &mut AuthConfig) -> Result<Self, WeakSecret> {
        check_strength(|| "the admin key".into(), admin_key)?;
        for (kind, list) in [
            ("invoke key", &auth.invoke_keys),
            ("MCP token", &auth.mcp_tokens),
        ] {
            for (name, secret) in list {
                check_strength(|| format!("{kind} {name:?}"), secret)?;
            }
        }
        let credentials = Self::new(admin_key, &auth.invoke_keys, &auth.mcp_tokens);
        auth.scrub();
        Ok(credentials)
    }

    /// Builds the set from the admin key and the named credentials (no strength check:
    /// [`Credentials::from_config`] is the node's way in).
    pub fn new<'a>(
        admin_key: &str,
        invoke_keys: impl IntoIterator<Item = (&'a String, &'a String)>,
        mcp_tokens: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Self {
        let mut secrets = vec![Secret {
            name: "admin".into(),
            scope: Scope::Admin,
            digest: digest(admin_key),
        }];
        for (scope, list) in [
            (Scope::Invoke, invoke_keys.into_iter().collect::<Vec<_>>()),
            (Scope::Mcp, mcp_tokens.into_iter().collect()),
        ] {
            secrets.extend(list.into_iter().map(|(name, secret)| Secret {
                name: name.clone(),
                scope,
                digest: digest(secret),
            }));
        }
        Self { secrets }
    }

    /// The principal holding `presented`, if any. Every secret is compared, whatever matches.
    pub fn identify(&self, presented: &str) -> Option<Principal> {
        let presented = digest(presented);
        let mut found = None;
        for secret in &self.secrets {
            let equal: bool = secret.digest.ct_eq(&presented).into();
            if equal && found.is_none() {
                found = Some(Principal {
                    name: secret.name.clone(),
                    scope: secret.scope,
                });
            }
        }
        found
    }
}

/// A fresh random admin key (32 bytes, hex).
pub fn generate_key() -> String {
    let bytes: [u8; 32] = rand::random();
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn credentials_are_recognised_by_name_and_scope() {
        let invoke = BTreeMap::from([("ci".to_owned(), "inv-secret".to_owned())]);
        let mcp = BTreeMap::from([("claude".to_owned(), "mcp-secret".to_owned())]);
        let creds = Credentials::new("admin-secret", &invoke, &mcp);
        let admin = creds.identify("admin-secret").unwrap();
        assert!(admin.allows(Scope::Invoke) && admin.allows(Scope::Mcp));
        let ci = creds.identify("inv-secret").unwrap();
        assert_eq!(ci.name, "ci");
        assert!(ci.allows(Scope::Invoke) && !ci.allows(Scope::Admin) && !ci.allows(Scope::Mcp));
        assert!(creds.identify("mcp-secret").unwrap().allows(Scope::Mcp));
        assert!(creds.identify("admin-secre").is_none());
        assert!(creds.identify("").is_none());
        // Owners are told apart by name and scope, and the mark names neither outright.
        let agent = creds.identify("mcp-secret").unwrap();
        let tags = [admin.owner_tag(), ci.owner_tag(), agent.owner_tag()];
        assert!(tags
            .iter()
            .all(|t| t.len() == 2 * OWNER_TAG_BYTES && !t.contains("claude")));
        assert!(tags[0] != tags[1] && tags[1] != tags[2] && tags[0] != tags[2]);
        let same_name = Principal {
            name: "claude".into(),
            scope: Scope::Invoke,
        };
        assert_ne!(same_name.owner_tag(), agent.owner_tag());
        assert_eq!(
            agent.owner_tag(),
            creds.identify("mcp-secret").unwrap().owner_tag()
        );
    }

    #[test]
    fn weak_secrets_are_refused_by_name_and_strong_ones_scrubbed() {
        let strong = "s".repeat(MIN_SECRET_CHARS);
        let mut auth = AuthConfig::default();
        auth.invoke_keys.insert("ci".into(), "short".into());
        let err = Credentials::from_config(&strong, &mut auth).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("invoke key \"ci\"") && message.contains("32"),
            "{message}"
        );
        assert!(!message.contains("short"), "{message}");
        let err = Credentials::from_config("change-me", &mut AuthConfig::default()).unwrap_err();
        assert!(
            err.to_string().contains("the admin key is 9 characters"),
            "{err}"
        );

        let mut auth = AuthConfig {
            admin_key: Some(strong.clone()),
            ..AuthConfig::default()
        };
        auth.mcp_tokens.insert("agent".into(), "m".repeat(40));
        let creds = Credentials::from_config(&strong, &mut auth).unwrap();
        assert!(creds.identify(&"m".repeat(40)).is_some());
        let shown = format!("{auth:?} {creds:?}");
        assert!(
            !shown.contains(&strong) && !shown.contains("mmmm"),
            "{shown}"
        );
        assert_eq!(auth.admin_key, None);
        assert!(auth.mcp_tokens.values().all(String::is_empty));
    }
}
