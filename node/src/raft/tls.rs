//! Mutual TLS between nodes (rustls). The cluster's CA, this node's certificate and its key
//! come from PEM files and are read again when the files change, so certificates can be
//! renewed without a restart: new connections use the new ones, and the transport's
//! channels are rebuilt.
//!
//! The server asks every client for a certificate and verifies any it gets against the CA;
//! a certificate from another CA fails the handshake. A client without one may finish the
//! handshake (a public API on the same listener can bring its own credentials), and the
//! Raft service's interceptor ([`super::auth`]) then refuses it.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use futures_util::Stream;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::rustls::crypto::aws_lc_rs;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use crate::config::PeerTlsConfig;

/// How long a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why TLS files (the peers' or the HTTP listener's) could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A file holds no usable PEM block of the kind needed.
    #[error("{path} holds no {what} in PEM form")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What was looked for.
        what: &'static str,
    },
    /// rustls refused the certificates or key.
    #[error("{reason}")]
    Config {
        /// What rustls said.
        reason: String,
    },
}

/// The files as last loaded.
struct Loaded {
    /// Modification time and length of each file, to notice changes.
    stamp: Vec<Option<(SystemTime, u64)>>,
    server: Arc<ServerConfig>,
    ca: Vec<u8>,
    cert: Vec<u8>,
    key: Vec<u8>,
    /// Bumped on every reload.
    generation: u64,
}

/// This node's peer TLS material, reloadable.
pub struct PeerTls {
    files: PeerTlsConfig,
    current: RwLock<Arc<Loaded>>,
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerTls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

fn paths(files: &PeerTlsConfig) -> [&Path; 3] {
    [&files.ca_file, &files.cert_file, &files.key_file]
}

fn stamp(files: &PeerTlsConfig) -> Vec<Option<(SystemTime, u64)>> {
    stamp_of(&paths(files))
}

/// Modification time and length of each file, to notice that one changed.
pub(crate) fn stamp_of(paths: &[&Path]) -> Vec<Option<(SystemTime, u64)>> {
    paths
        .iter()
        .map(|p| {
            let meta = std::fs::metadata(p).ok()?;
            Some((meta.modified().ok()?, meta.len()))
        })
        .collect()
}

pub(crate) fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

pub(crate) fn certificates(
    pem: &[u8],
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|_| TlsError::Pem {
            path: path.to_owned(),
            what: "certificate",
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_owned(),
            what: "certificate",
        });
    }
    Ok(certs)
}

pub(crate) fn private_key(pem: &[u8], path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|_| TlsError::Pem {
        path: path.to_owned(),
        what: "private key",
    })
}

fn build(files: &PeerTlsConfig, generation: u64) -> Result<Loaded, TlsError> {
    let stamp = stamp(files);
    let ca = read(&files.ca_file)?;
    let cert = read(&files.cert_file)?;
    let key = read(&files.key_file)?;
    let mut roots = RootCertStore::empty();
    for root in certificates(&ca, &files.ca_file)? {
        roots.add(root).map_err(|e| TlsError::Config {
            reason: format!("CA {}: {e}", files.ca_file.display()),
        })?;
    }
    let chain = certificates(&cert, &files.cert_file)?;
    let private = private_key(&key, &files.key_file)?;
    let provider = Arc::new(aws_lc_rs::default_provider());
    let config_error = |e: tokio_rustls::rustls::Error| TlsError::Config {
        reason: e.to_string(),
    };
    // Ask every client for a certificate and verify any against the CA; one without may
    // finish the handshake, and the Raft service refuses it (see the module docs).
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| TlsError::Config {
            reason: e.to_string(),
        })?;
    let mut server = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&tokio_rustls::rustls::version::TLS13])
        .map_err(config_error)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, private)
        .map_err(config_error)?;
    server.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Loaded {
        stamp,
        server: Arc::new(server),
        ca,
        cert,
        key,
        generation,
    })
}

impl PeerTls {
    /// Reads the files.
    pub fn load(files: &PeerTlsConfig) -> Result<Self, TlsError> {
        let loaded = build(files, 0)?;
        Ok(Self {
            files: files.clone(),
            current: RwLock::new(Arc::new(loaded)),
        })
    }

    fn current(&self) -> Arc<Loaded> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// How often to look for changed files.
    pub fn reload_every(&self) -> Duration {
        Duration::from_secs(self.files.reload_secs.max(1))
    }

    /// Bumped each time the files are read again.
    pub fn generation(&self) -> u64 {
        self.current().generation
    }

    /// The client side for a peer reached as `domain` (the host in its address; its
    /// certificate must name it).
    pub fn client(&self, domain: &str) -> ClientTlsConfig {
        let loaded = self.current();
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&loaded.ca))
            .identity(Identity::from_pem(&loaded.cert, &loaded.key))
            .domain_name(domain)
    }

    /// Reads the files again if they changed. Returns whether it did; on an error the old
    /// material stays in use.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let current = self.current();
        if stamp(&self.files) == current.stamp {
            return Ok(false);
        }
        let loaded = build(&self.files, current.generation + 1)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(loaded);
        Ok(true)
    }
}

/// The TLS connections `listener` accepts, handshaken with the material current at each
/// accept. Handshakes run concurrently and a failed one is logged and dropped; the accept
/// loop ends when the server drops the stream.
pub fn incoming(
    listener: TcpListener,
    tls: Arc<PeerTls>,
) -> impl Stream<Item = Result<TlsStream<TcpStream>, io::Error>> {
    let (tx, rx) = mpsc::channel::<TlsStream<TcpStream>>(64);
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::warn!(error = %e, "accepting a peer connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                // The server stopped: release the port.
                _ = tx.closed() => return,
            };
            crate::net::no_delay(&tcp);
            let acceptor = TlsAcceptor::from(tls.current().server.clone());
            let tx = tx.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send(stream).await;
                    }
                    Ok(Err(e)) => tracing::warn!(%peer, error = %e, "peer TLS handshake failed"),
                    Err(_) => tracing::warn!(%peer, "peer TLS handshake timed out"),
                }
            });
        }
    });
    futures_util::stream::unfold(rx, |mut rx| async move {
        let stream = rx.recv().await?;
        Some((Ok(stream), rx))
    })
}

/// The host of a `host:port` address (brackets of an IPv6 literal removed), which a peer's
/// certificate must name.
pub fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_is_what_a_certificate_must_name() {
        assert_eq!(host_of("127.0.0.1:9090"), "127.0.0.1");
        assert_eq!(host_of("[::1]:9090"), "::1");
        assert_eq!(
            host_of("rowcall-0.rowcall-peers:9090"),
            "rowcall-0.rowcall-peers"
        );
    }
}
