//! Credentials: the admin key, named invoke keys and MCP tokens, compared in constant time.
//!
//! Secrets are kept only as SHA-256 digests; a presented credential is hashed once and
//! compared against every digest with `subtle`, so neither its content nor its length leaks
//! through timing.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

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
}

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

impl Credentials {
    /// Builds the set from the admin key and the named credentials.
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
    }
}
