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

use super::pki::ClusterCa;
use super::NodeId;
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

/// This node's peer TLS material: the operator's files (reloadable), or the cluster's own
/// CA and the certificate this node signed for itself at start ([`super::pki`]).
pub struct PeerTls {
    files: Option<PeerTlsConfig>,
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
    let paths = [
        files.ca_file.as_path(),
        files.cert_file.as_path(),
        files.key_file.as_path(),
    ];
    build_from(ca, cert, key, paths, stamp, generation)
}

fn build_from(
    ca: Vec<u8>,
    cert: Vec<u8>,
    key: Vec<u8>,
    [ca_path, cert_path, key_path]: [&Path; 3],
    stamp: Vec<Option<(SystemTime, u64)>>,
    generation: u64,
) -> Result<Loaded, TlsError> {
    let mut roots = RootCertStore::empty();
    for root in certificates(&ca, ca_path)? {
        roots.add(root).map_err(|e| TlsError::Config {
            reason: format!("CA {}: {e}", ca_path.display()),
        })?;
    }
    let chain = certificates(&cert, cert_path)?;
    let private = private_key(&key, key_path)?;
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
            files: Some(files.clone()),
            current: RwLock::new(Arc::new(loaded)),
        })
    }

    /// The cluster's own CA and a certificate it signed for this node just now.
    pub fn of_cluster(ca: &ClusterCa, node: NodeId) -> Result<Self, TlsError> {
        let mine = ca.issue(node).map_err(|e| TlsError::Config {
            reason: e.to_string(),
        })?;
        let memory = Path::new("(the cluster's CA, in memory)");
        let loaded = build_from(
            ca.cert_pem().as_bytes().to_vec(),
            mine.cert_pem.into_bytes(),
            mine.key_pem.into_bytes(),
            [memory; 3],
            Vec::new(),
            0,
        )?;
        Ok(Self {
            files: None,
            current: RwLock::new(Arc::new(loaded)),
        })
    }

    /// Whether the certificates are the operator's (files) rather than the cluster's own.
    pub fn from_files(&self) -> bool {
        self.files.is_some()
    }

    /// This node's certificate, DER.
    pub fn own_certificate(&self) -> Option<CertificateDer<'static>> {
        let loaded = self.current();
        CertificateDer::pem_slice_iter(&loaded.cert).next()?.ok()
    }

    fn current(&self) -> Arc<Loaded> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// How often to look for changed files.
    pub fn reload_every(&self) -> Duration {
        let secs = self.files.as_ref().map_or(3600, |files| files.reload_secs);
        Duration::from_secs(secs.max(1))
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
        let Some(files) = &self.files else {
            return Ok(false);
        };
        let current = self.current();
        if stamp(files) == current.stamp {
            return Ok(false);
        }
        let loaded = build(files, current.generation + 1)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(loaded);
        Ok(true)
    }
}

/// One connection on the gRPC listener: TLS, or plaintext where the listener also takes
/// plaintext (public API clients and enrollment; the Raft service refuses a caller without
/// a verified certificate, [`super::auth`]).
pub enum PeerStream {
    /// No TLS.
    Plain(TcpStream),
    /// A finished TLS handshake.
    Tls(Box<TlsStream<TcpStream>>),
}

/// What a gRPC request knows about its connection (a request extension).
#[derive(Debug, Clone)]
pub struct PeerConnectInfo {
    /// The client's address.
    pub remote_addr: Option<std::net::SocketAddr>,
    /// The client certificate chain the handshake verified against the CA, if any.
    pub certs: Option<Arc<Vec<CertificateDer<'static>>>>,
    /// The calls in flight on the connection, for its idle timeout (set by the listener's
    /// connection caps, [`crate::api::grpc::per_client`]).
    pub activity: Option<Arc<crate::net::Activity>>,
}

impl PeerConnectInfo {
    /// The connection info of `request`, if it came through [`incoming`].
    pub fn of<T>(request: &tonic::Request<T>) -> Option<&Self> {
        request.extensions().get::<Self>()
    }
}

impl tonic::transport::server::Connected for PeerStream {
    type ConnectInfo = PeerConnectInfo;

    fn connect_info(&self) -> PeerConnectInfo {
        match self {
            Self::Plain(tcp) => PeerConnectInfo {
                remote_addr: tcp.peer_addr().ok(),
                certs: None,
                activity: None,
            },
            Self::Tls(tls) => {
                let (tcp, session) = tls.get_ref();
                PeerConnectInfo {
                    remote_addr: tcp.peer_addr().ok(),
                    certs: session
                        .peer_certificates()
                        .map(|certs| Arc::new(certs.to_vec())),
                    activity: None,
                }
            }
        }
    }
}

impl tokio::io::AsyncRead for PeerStream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for PeerStream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => std::pin::Pin::new(s).poll_flush(cx),
            Self::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> std::task::Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => std::pin::Pin::new(s).poll_write_vectored(cx, bufs),
            Self::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain(s) => s.is_write_vectored(),
            Self::Tls(s) => s.is_write_vectored(),
        }
    }
}

/// The first byte of a TLS connection: a handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// Whether the client on `tcp` opens with a TLS handshake; `None` if it sent nothing in
/// time or hung up.
async fn opens_with_tls(tcp: &TcpStream) -> Option<bool> {
    let mut first = [0u8; 1];
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, tcp.peek(&mut first)).await {
        Ok(Ok(1)) => Some(first[0] == TLS_HANDSHAKE),
        _ => None,
    }
}

/// The connections `listener` accepts: TLS handshaken with the material current at each
/// accept and, with `plaintext`, plaintext connections beside them (told apart by their
/// first byte). Handshakes run concurrently and a failed one is logged and dropped; the
/// accept loop ends when the server drops the stream.
pub fn incoming(
    listener: TcpListener,
    tls: Arc<PeerTls>,
    plaintext: bool,
) -> impl Stream<Item = Result<PeerStream, io::Error>> {
    let (tx, rx) = mpsc::channel::<PeerStream>(64);
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
                if plaintext {
                    match opens_with_tls(&tcp).await {
                        Some(true) => {}
                        Some(false) => {
                            let _ = tx.send(PeerStream::Plain(tcp)).await;
                            return;
                        }
                        None => return,
                    }
                }
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send(PeerStream::Tls(Box::new(stream))).await;
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
