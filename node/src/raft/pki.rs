//! The cluster's own certificate authority: peers authenticate from the moment a cluster is
//! founded, with nothing to configure and no setting to forget.
//!
//! ```text
//!   seed (32 bytes) ─► Ed25519 CA key ─► CA certificate: fixed name, serial and validity, and
//!     │                                  Ed25519 signs deterministically, so every holder of
//!     │                                  the seed has the same CA
//!     │                    └─► at each start a node signs its own certificate, naming
//!     │                        node-<id>.peer.rowcall (who it is) and peer.rowcall (a member)
//!     └─► join key ─► join tokens rcj1_<expiry>_<nonce>_<secret>, checked by any holder
//!                      without a table: the secret is the join key's HMAC of the rest
//! ```
//!
//! Where a node's seed comes from ([`crate::cluster::peers`]): the cluster secret if one is configured
//! (every node given the secret derives the same CA, which is how several nodes started
//! together found one cluster, and how a cluster of an older build is upgraded in one
//! step), else its data folder: generated when it founds, received when it joins with a
//! join token ([`enroll`](ClusterCa::seal_for)).
//!
//! Every member holds the seed, so a member can mint a certificate for any id: what the CA
//! keeps out is everyone who is not a member, and what the id check keeps out is a member
//! that speaks for another (a misconfigured one, or a copied folder).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use aws_lc_rs::signature::Ed25519KeyPair;
use hmac::{Hmac, Mac};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SerialNumber, PKCS_ED25519,
};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer, ServerName};

use super::NodeId;

/// The name every member's certificate carries: a client that dials an address without
/// knowing which node answers (a join, a survey) checks only that a member answers.
pub const PEER_NAME: &str = "peer.rowcall";
/// The data folder's copy of the seed, when no cluster secret derives it.
pub const SEED_FILE: &str = "peer-ca.seed";
/// How join tokens begin.
const TOKEN_PREFIX: &str = "rcj1";

/// The name a certificate for node `id` carries, and a client dialling node `id` checks.
pub fn node_name(id: NodeId) -> String {
    format!("node-{id}.{PEER_NAME}")
}

/// Why the cluster's CA could not be made, read or stored.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// The seed file could not be read or written.
    #[error("cannot use {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The seed file holds something else.
    #[error("{path} does not hold a cluster CA seed (64 hex digits)")]
    BadSeed {
        /// The file.
        path: PathBuf,
    },
    /// rcgen or the key library refused.
    #[error("making a peer certificate: {0}")]
    Certificate(String),
}

/// Why a join token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not shaped like one.
    #[error("not a join token: they look like rcj1_…, minted with `rowcall cluster join-token`")]
    Malformed,
    /// Past its expiry.
    #[error("the join token expired; mint a new one with `rowcall cluster join-token`")]
    Expired,
    /// Its proof does not check out: another cluster's token, or a forged one.
    #[error("the join token was not minted by this cluster (or the proof of it is wrong)")]
    Unknown,
}

fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    // HMAC takes a key of any length.
    let mut mac = Hmac::<Sha256>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    for part in parts {
        // Length-prefixed, so no two lists of parts read alike.
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    // The system's random source failing is not something a node can run through.
    aws_lc_rs::rand::fill(&mut bytes).unwrap_or_else(|_| panic!("the system random source failed"));
    bytes
}

/// The CA's fixed parameters: with the seed's key they give the same certificate anywhere.
fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, "rowcall cluster CA");
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.serial_number = Some(SerialNumber::from(1u64));
    params
}

fn ed25519(seed: &[u8; 32]) -> Result<KeyPair, PkiError> {
    let bad = |e: String| PkiError::Certificate(e);
    let pair = Ed25519KeyPair::from_seed_unchecked(seed).map_err(|e| bad(e.to_string()))?;
    let pkcs8 = pair.to_pkcs8().map_err(|e| bad(e.to_string()))?;
    KeyPair::from_pkcs8_der_and_sign_algo(&PrivatePkcs8KeyDer::from(pkcs8.as_ref()), &PKCS_ED25519)
        .map_err(|e| bad(e.to_string()))
}

/// A node's peer certificate and key, PEM.
#[derive(Clone)]
pub struct NodeCertificate {
    /// The certificate, signed by the cluster's CA.
    pub cert_pem: String,
    /// Its private key (PKCS#8).
    pub key_pem: String,
}

impl std::fmt::Debug for NodeCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeCertificate(..)")
    }
}

/// A sealed seed on its way to a joiner: the AES-GCM nonce and the ciphertext with its tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// The 12-byte nonce.
    pub nonce: Vec<u8>,
    /// The seed, encrypted and authenticated.
    pub ciphertext: Vec<u8>,
}

/// The cluster's certificate authority. `Debug` shows nothing of the seed.
pub struct ClusterCa {
    seed: [u8; 32],
    key: KeyPair,
    params: CertificateParams,
    cert_pem: String,
}

impl std::fmt::Debug for ClusterCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterCa(..)")
    }
}

impl ClusterCa {
    /// The CA of `seed`.
    pub fn from_seed(seed: [u8; 32]) -> Result<Self, PkiError> {
        let key = ed25519(&seed)?;
        let params = ca_params();
        let cert = params
            .self_signed(&key)
            .map_err(|e| PkiError::Certificate(e.to_string()))?;
        Ok(Self {
            seed,
            key,
            params,
            cert_pem: cert.pem(),
        })
    }

    /// A new CA, for a node founding a cluster without a cluster secret.
    pub fn generate() -> Result<Self, PkiError> {
        Self::from_seed(random())
    }

    /// The CA every holder of the cluster secret derives.
    pub fn from_secret(secret: &str) -> Result<Self, PkiError> {
        Self::from_seed(mac(secret.trim().as_bytes(), &[b"rowcall cluster CA v1"]))
    }

    /// The seed kept in `folder`, if there is one.
    pub fn load(folder: &Path) -> Result<Option<Self>, PkiError> {
        let path = folder.join(SEED_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(PkiError::Io { path, source }),
        };
        let seed = hex::decode(text.trim())
            .ok()
            .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
            .ok_or(PkiError::BadSeed { path })?;
        Self::from_seed(seed).map(Some)
    }

    /// Keeps the seed in `folder` (mode 0600, synced with its folder) before the node uses
    /// it: a node that founded or joined with it must find it again after a crash.
    pub fn store(&self, folder: &Path) -> Result<(), PkiError> {
        let path = folder.join(SEED_FILE);
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| PkiError::Io { path, source }
        };
        let tmp = path.with_extension("tmp");
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut file = options.open(&tmp).map_err(io(&tmp))?;
        file.write_all(hex::encode(self.seed).as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(io(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
        std::fs::File::open(folder)
            .and_then(|f| f.sync_all())
            .map_err(io(folder))
    }

    /// The CA certificate, PEM: the root peers check each other's certificates against.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A fresh key and a certificate for node `id`, for both ends of a peer connection.
    pub fn issue(&self, id: NodeId) -> Result<NodeCertificate, PkiError> {
        let bad = |e: rcgen::Error| PkiError::Certificate(e.to_string());
        let mut params =
            CertificateParams::new(vec![node_name(id), PEER_NAME.to_owned()]).map_err(bad)?;
        params
            .distinguished_name
            .push(DnType::CommonName, format!("rowcall node {id}"));
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate_for(&PKCS_ED25519).map_err(bad)?;
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer).map_err(bad)?;
        Ok(NodeCertificate {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    fn join_key(&self) -> [u8; 32] {
        mac(&self.seed, &[b"rowcall join key v1"])
    }

    /// A join token valid until `expires_ms` (Unix milliseconds).
    pub fn mint_token(&self, expires_ms: u64) -> String {
        let id = format!("{TOKEN_PREFIX}_{expires_ms}_{}", hex::encode(random::<8>()));
        let secret = mac(&self.join_key(), &[id.as_bytes()]);
        format!("{id}_{}", hex::encode(secret))
    }

    /// The secret of the token whose public part is `id`, if this CA minted it and it has
    /// not expired at `now_ms`.
    fn token_secret(&self, id: &str, now_ms: u64) -> Result<[u8; 32], TokenError> {
        let expires = parse_token_id(id)?;
        if now_ms > expires {
            return Err(TokenError::Expired);
        }
        Ok(mac(&self.join_key(), &[id.as_bytes()]))
    }

    /// Checks a joiner's proof (`request_proof`) for the token `id`, and seals the seed for
    /// it: only the token's holder can derive the key, so the reply may cross a plaintext
    /// connection.
    pub fn seal_for(
        &self,
        id: &str,
        node: NodeId,
        nonce: &[u8],
        proof: &[u8],
        cluster_id: &str,
        now_ms: u64,
    ) -> Result<Sealed, TokenError> {
        let secret = self.token_secret(id, now_ms)?;
        let expected = request_proof(&secret, id, node, nonce);
        if !bool::from(expected.as_slice().ct_eq(proof)) {
            return Err(TokenError::Unknown);
        }
        let seal_nonce = random::<12>();
        let mut sealed = self.seed.to_vec();
        sealing_key(&secret, nonce)
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(seal_nonce),
                Aad::from(associated(cluster_id, node)),
                &mut sealed,
            )
            .map_err(|_| TokenError::Unknown)?;
        Ok(Sealed {
            nonce: seal_nonce.to_vec(),
            ciphertext: sealed,
        })
    }
}

fn parse_token_id(id: &str) -> Result<u64, TokenError> {
    let mut parts = id.split('_');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(TOKEN_PREFIX), Some(expires), Some(nonce), None)
            if nonce.len() == 16 && nonce.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            expires.parse().map_err(|_| TokenError::Malformed)
        }
        _ => Err(TokenError::Malformed),
    }
}

fn request_proof(secret: &[u8; 32], id: &str, node: NodeId, nonce: &[u8]) -> [u8; 32] {
    mac(
        secret,
        &[
            b"rowcall enroll v1",
            id.as_bytes(),
            &node.to_be_bytes(),
            nonce,
        ],
    )
}

fn sealing_key(secret: &[u8; 32], nonce: &[u8]) -> LessSafeKey {
    let key = mac(secret, &[b"rowcall enroll seal v1", nonce]);
    // A 32-byte key is what AES-256-GCM takes.
    LessSafeKey::new(
        UnboundKey::new(&AES_256_GCM, &key).unwrap_or_else(|_| unreachable!("a 32-byte key")),
    )
}

fn associated(cluster_id: &str, node: NodeId) -> Vec<u8> {
    let mut aad = cluster_id.as_bytes().to_vec();
    aad.extend_from_slice(&node.to_be_bytes());
    aad
}

/// A join token as its holder uses it: the public part sent, the secret kept.
pub struct JoinToken {
    id: String,
    secret: [u8; 32],
}

impl std::fmt::Debug for JoinToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JoinToken({})", self.id)
    }
}

/// What a joiner sends to enroll.
#[derive(Debug, Clone)]
pub struct EnrollProof {
    /// The token's public part.
    pub token_id: String,
    /// 16 fresh random bytes.
    pub nonce: Vec<u8>,
    /// The proof of the token's secret over both.
    pub proof: Vec<u8>,
}

impl JoinToken {
    /// Reads a token as `rowcall cluster join-token` printed it.
    pub fn parse(token: &str) -> Result<Self, TokenError> {
        let token = token.trim();
        let (id, secret) = token.rsplit_once('_').ok_or(TokenError::Malformed)?;
        parse_token_id(id)?;
        let secret = hex::decode(secret)
            .ok()
            .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
            .ok_or(TokenError::Malformed)?;
        Ok(Self {
            id: id.to_owned(),
            secret,
        })
    }

    /// When it expires (Unix milliseconds).
    pub fn expires_ms(&self) -> u64 {
        parse_token_id(&self.id).unwrap_or(0)
    }

    /// A fresh proof that node `node` holds this token.
    pub fn prove(&self, node: NodeId) -> EnrollProof {
        let nonce = random::<16>().to_vec();
        let proof = request_proof(&self.secret, &self.id, node, &nonce).to_vec();
        EnrollProof {
            token_id: self.id.clone(),
            nonce,
            proof,
        }
    }

    /// Opens the seed a member sealed for `proof`; `None` if it was not sealed under this
    /// token (a forged or altered reply).
    pub fn open(
        &self,
        proof: &EnrollProof,
        node: NodeId,
        cluster_id: &str,
        sealed: &Sealed,
    ) -> Option<ClusterCa> {
        let nonce = <[u8; 12]>::try_from(sealed.nonce.as_slice()).ok()?;
        let mut buffer = sealed.ciphertext.clone();
        let plain = sealing_key(&self.secret, &proof.nonce)
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(associated(cluster_id, node)),
                &mut buffer,
            )
            .ok()?;
        let seed = <[u8; 32]>::try_from(&*plain).ok()?;
        ClusterCa::from_seed(seed).ok()
    }
}

/// Whether the certificate `der` (one a handshake verified against the cluster's CA) names
/// node `id`.
pub fn names_node(der: &CertificateDer<'_>, id: NodeId) -> bool {
    let Ok(cert) = webpki::EndEntityCert::try_from(der) else {
        return false;
    };
    let Ok(name) = ServerName::try_from(node_name(id)) else {
        return false;
    };
    cert.verify_is_valid_for_subject_name(&name).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn der(pem: &str) -> CertificateDer<'static> {
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    #[test]
    fn the_same_secret_gives_the_same_ca_and_another_secret_another() {
        let a = ClusterCa::from_secret("a-cluster-secret-0123456789abcdef").unwrap();
        let again = ClusterCa::from_secret("a-cluster-secret-0123456789abcdef\n").unwrap();
        let other = ClusterCa::from_secret("b-cluster-secret-0123456789abcdef").unwrap();
        assert_eq!(a.cert_pem(), again.cert_pem());
        assert_ne!(a.cert_pem(), other.cert_pem());
        assert_ne!(
            ClusterCa::generate().unwrap().cert_pem(),
            ClusterCa::generate().unwrap().cert_pem()
        );
        assert_eq!(format!("{a:?}"), "ClusterCa(..)");
    }

    #[test]
    fn a_node_certificate_names_its_id_and_no_other() {
        let ca = ClusterCa::generate().unwrap();
        let cert = ca.issue(2).unwrap();
        assert!(names_node(&der(&cert.cert_pem), 2));
        assert!(!names_node(&der(&cert.cert_pem), 3));
        assert!(!names_node(&der(&cert.cert_pem), 22));
    }

    #[test]
    fn the_seed_survives_in_the_folder() {
        let dir = tempfile_dir();
        assert!(ClusterCa::load(&dir).unwrap().is_none());
        let ca = ClusterCa::generate().unwrap();
        ca.store(&dir).unwrap();
        let loaded = ClusterCa::load(&dir).unwrap().unwrap();
        assert_eq!(loaded.cert_pem(), ca.cert_pem());
        std::fs::write(dir.join(SEED_FILE), "not hex").unwrap();
        assert!(matches!(
            ClusterCa::load(&dir),
            Err(PkiError::BadSeed { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rowcall-pki-{}", hex::encode(random::<6>())));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_token_opens_the_seed_only_for_its_holder_and_only_before_it_expires() {
        let ca = ClusterCa::generate().unwrap();
        let token = ca.mint_token(10_000);
        let holder = JoinToken::parse(&token).unwrap();
        assert_eq!(holder.expires_ms(), 10_000);
        let proof = holder.prove(4);
        let sealed = ca
            .seal_for(&proof.token_id, 4, &proof.nonce, &proof.proof, "c1", 9_000)
            .unwrap();
        let opened = holder.open(&proof, 4, "c1", &sealed).unwrap();
        assert_eq!(opened.cert_pem(), ca.cert_pem());
        // The reply is bound to the cluster and node it was sealed for.
        assert!(holder.open(&proof, 4, "c2", &sealed).is_none());
        assert!(holder.open(&proof, 5, "c1", &sealed).is_none());
        let mut altered = sealed.clone();
        altered.ciphertext[0] ^= 1;
        assert!(holder.open(&proof, 4, "c1", &altered).is_none());

        // Expired, for another node id than proved, or minted by another CA: refused.
        assert_eq!(
            ca.seal_for(&proof.token_id, 4, &proof.nonce, &proof.proof, "c1", 10_001),
            Err(TokenError::Expired)
        );
        assert_eq!(
            ca.seal_for(&proof.token_id, 5, &proof.nonce, &proof.proof, "c1", 9_000),
            Err(TokenError::Unknown)
        );
        let stranger = ClusterCa::generate().unwrap();
        assert_eq!(
            stranger.seal_for(&proof.token_id, 4, &proof.nonce, &proof.proof, "c1", 9_000),
            Err(TokenError::Unknown)
        );
        // A token whose secret part was changed proves nothing.
        let (id, _) = token.rsplit_once('_').unwrap();
        let forged = JoinToken::parse(&format!("{id}_{}", "00".repeat(32))).unwrap();
        let proof = forged.prove(4);
        assert_eq!(
            ca.seal_for(&proof.token_id, 4, &proof.nonce, &proof.proof, "c1", 9_000),
            Err(TokenError::Unknown)
        );
        assert_eq!(
            JoinToken::parse("rcj1_x").unwrap_err(),
            TokenError::Malformed
        );
        assert_eq!(
            JoinToken::parse("hello").unwrap_err(),
            TokenError::Malformed
        );
    }
}
