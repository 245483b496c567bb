//! HTTPS on the HTTP listener (rustls). The certificate chain and key come from PEM files
//! and are read again when they change, so a renewed certificate is used by new connections
//! without a restart. ALPN offers HTTP/2 and HTTP/1.1; clients show no certificate (they
//! authenticate with keys, as over plain HTTP). TLS 1.2 and 1.3, rustls's safe defaults.

use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use tokio_rustls::rustls::crypto::aws_lc_rs;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

use crate::config::HttpsConfig;
use crate::raft::tls::{certificates, private_key, read, stamp_of, TlsError};

/// ALPN protocol ids, most preferred first.
const ALPN_H2: &[u8] = b"h2";
const ALPN_HTTP1: &[u8] = b"http/1.1";

/// The files as last loaded.
struct Loaded {
    stamp: Vec<Option<(SystemTime, u64)>>,
    acceptor: TlsAcceptor,
}

/// The HTTP listener's TLS material, reloadable.
pub struct HttpsTls {
    files: HttpsConfig,
    current: RwLock<Arc<Loaded>>,
}

impl std::fmt::Debug for HttpsTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpsTls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

fn paths(files: &HttpsConfig) -> [&Path; 2] {
    [&files.cert_file, &files.key_file]
}

fn build(files: &HttpsConfig) -> Result<Loaded, TlsError> {
    let stamp = stamp_of(&paths(files));
    let chain = certificates(&read(&files.cert_file)?, &files.cert_file)?;
    let key = private_key(&read(&files.key_file)?, &files.key_file)?;
    let config_error = |e: tokio_rustls::rustls::Error| TlsError::Config {
        reason: e.to_string(),
    };
    let mut server = ServerConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(config_error)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(config_error)?;
    server.alpn_protocols = vec![ALPN_H2.to_vec(), ALPN_HTTP1.to_vec()];
    Ok(Loaded {
        stamp,
        acceptor: TlsAcceptor::from(Arc::new(server)),
    })
}

impl HttpsTls {
    /// Reads the files.
    pub fn load(files: &HttpsConfig) -> Result<Self, TlsError> {
        Ok(Self {
            files: files.clone(),
            current: RwLock::new(Arc::new(build(files)?)),
        })
    }

    /// Handshakes with the material current now.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .acceptor
            .clone()
    }

    /// How often to look for changed files.
    pub fn reload_every(&self) -> Duration {
        Duration::from_secs(self.files.reload_secs.max(1))
    }

    /// Reads the files again if they changed. Returns whether it did; on an error the old
    /// material stays in use.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let stamp = stamp_of(&paths(&self.files));
        if stamp == self.current.read().unwrap_or_else(|p| p.into_inner()).stamp {
            return Ok(false);
        }
        let loaded = build(&self.files)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(loaded);
        Ok(true)
    }
}

/// Whether a handshake chose HTTP/2.
pub fn negotiated_h2(alpn: Option<&[u8]>) -> bool {
    alpn == Some(ALPN_H2)
}
