//! Peer authentication on the node-to-node service: a peer must present a client
//! certificate the cluster's CA signed (rustls has verified the chain during the handshake;
//! this checks one was presented) and, when a cluster secret is configured, its proof. There
//! is no setting without a certificate: the cluster has its own CA from founding
//! ([`super::pki`]). The check is a tonic interceptor on the Raft service alone, so it runs
//! on the request's headers before any message is read, and a public API mounted on the same
//! listener can bring its own client credentials. That the certificate names the node id the
//! message claims is checked with the envelope ([`crate::api::peer`]).

use std::sync::Arc;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::{Request, Status};

/// The header that carries the cluster secret's proof.
pub const SECRET_HEADER: &str = "x-rowcall-cluster-auth";
/// Shortest cluster secret accepted.
pub const MIN_SECRET_LEN: usize = 32;

/// The cluster secret, kept as the token peers send (an HMAC of a fixed label under the
/// secret, so the secret itself never travels). Its `Debug` shows nothing.
#[derive(Clone)]
pub struct ClusterSecret {
    token: String,
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}

/// A cluster secret too short to be one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the cluster secret is {len} characters; it must be at least {MIN_SECRET_LEN} (e.g. `openssl rand -hex 32`)")]
pub struct WeakSecret {
    /// Its length.
    pub len: usize,
}

impl ClusterSecret {
    /// The secret `secret` (surrounding whitespace ignored, as read from a file).
    pub fn new(secret: &str) -> Result<Self, WeakSecret> {
        let secret = secret.trim();
        if secret.len() < MIN_SECRET_LEN {
            return Err(WeakSecret { len: secret.len() });
        }
        // HMAC takes a key of any length; this cannot fail.
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        mac.update(b"rowcall peer v1");
        Ok(Self {
            token: hex::encode(mac.finalize().into_bytes()),
        })
    }

    /// Adds the proof of the secret to an outgoing request.
    pub fn sign<T>(&self, request: &mut Request<T>) {
        if let Ok(value) = MetadataValue::try_from(self.token.as_str()) {
            request.metadata_mut().insert(SECRET_HEADER, value);
        }
    }

    /// Whether `shown` proves the secret (compared in constant time).
    fn accepts(&self, shown: &[u8]) -> bool {
        shown.ct_eq(self.token.as_bytes()).into()
    }
}

/// The interceptor in front of the Raft service.
#[derive(Debug, Clone, Default)]
pub struct PeerAuth {
    secret: Option<Arc<ClusterSecret>>,
}

impl PeerAuth {
    /// Requires a verified client certificate and `secret`'s proof, if any.
    pub fn new(secret: Option<Arc<ClusterSecret>>) -> Self {
        Self { secret }
    }

    fn refuse(reason: &'static str) -> Status {
        metrics::counter!(crate::metrics::PEER_REFUSALS_TOTAL, "reason" => "unauthenticated")
            .increment(1);
        Status::unauthenticated(reason)
    }
}

impl Interceptor for PeerAuth {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let certified = super::tls::PeerConnectInfo::of(&request)
            .and_then(|info| info.certs.as_ref())
            .is_some_and(|certs| !certs.is_empty());
        if !certified {
            return Err(Self::refuse(
                "peers must present a client certificate signed by the cluster's CA",
            ));
        }
        if let Some(secret) = &self.secret {
            let shown = request
                .metadata()
                .get(SECRET_HEADER)
                .map(|v| v.as_bytes())
                .unwrap_or_default();
            if !secret.accepts(shown) {
                return Err(Self::refuse("missing or wrong cluster secret"));
            }
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use tokio_rustls::rustls::pki_types::CertificateDer;

    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn only_the_secrets_proof_passes_and_short_secrets_are_refused() {
        let secret = Arc::new(ClusterSecret::new(SECRET).unwrap());
        let mut auth = PeerAuth::new(Some(secret.clone()));
        let mut signed = certified();
        secret.sign(&mut signed);
        assert!(auth.call(signed).is_ok());
        let err = auth.call(certified()).unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unauthenticated);
        let other = ClusterSecret::new(&SECRET.replace('0', "x")).unwrap();
        let mut wrong = certified();
        other.sign(&mut wrong);
        assert!(auth.call(wrong).is_err());
        assert!(!format!("{secret:?}").contains(&secret.token));

        assert_eq!(
            ClusterSecret::new("short").unwrap_err(),
            WeakSecret { len: 5 }
        );
    }

    /// A request as it arrives over a TLS connection whose client showed a certificate.
    fn certified() -> Request<()> {
        let mut request = Request::new(());
        request
            .extensions_mut()
            .insert(super::super::tls::PeerConnectInfo {
                remote_addr: None,
                certs: Some(Arc::new(vec![CertificateDer::from(vec![1, 2, 3])])),
                activity: None,
            });
        request
    }

    #[test]
    fn a_certificate_is_always_required() {
        let mut auth = PeerAuth::default();
        assert!(auth.call(certified()).is_ok());
        // Plaintext (no connection info with certificates), or TLS without a certificate.
        let err = auth.call(Request::new(())).unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unauthenticated);
        let mut bare = Request::new(());
        bare.extensions_mut()
            .insert(super::super::tls::PeerConnectInfo {
                remote_addr: None,
                certs: None,
                activity: None,
            });
        assert!(auth.call(bare).is_err());
    }
}
