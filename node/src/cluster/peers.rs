//! Where a node's peer credentials come from, decided once at start, and the enrollment
//! that hands a joiner the cluster's credential for a join token.
//!
//! ```text
//!   operator certificates ([cluster.tls]) ──────────────────► those (must name node-<id>)
//!   cluster secret ──► the CA it derives (same on every node) ─┐
//!   data folder's peer-ca.seed ──► that CA ────────────────────┼─► a certificate for this
//!   fresh, founding alone ──► a new CA, stored first ──────────┤   node, signed at start
//!   fresh, joining with a join token ──► Enroll at a member ───┘
//!   anything else ──► refuse to start, saying which of these to give
//! ```
//!
//! There is no way to start without a credential: the gRPC listener takes plaintext only
//! for the public API and for [`Enrollment`], and every Raft call needs a certificate of the
//! cluster's CA ([`crate::raft::auth`]) naming the node it speaks for ([`crate::api::peer`]).

use std::sync::Arc;
use std::time::Duration;

use rowcall_proto::raft::peer_enrollment_client::PeerEnrollmentClient;
use rowcall_proto::raft::peer_enrollment_server::PeerEnrollment;
use rowcall_proto::raft::{EnrollReply, EnrollRequest};
use tonic::transport::Endpoint;
use tonic::{Request, Response, Status};

use crate::app::App;
use crate::config::{Config, ConfigError};
use crate::model::time::now_ms;
use crate::raft::auth::{ClusterSecret, WeakSecret};
use crate::raft::pki::{names_node, node_name, ClusterCa, JoinToken, PkiError, Sealed, SEED_FILE};
use crate::raft::tls::{PeerTls, TlsError};
use crate::raft::NodeId;

/// How long a fresh node keeps trying to enroll before it gives up (a supervisor restarts
/// it), as long as it keeps trying to join.
const ENROLL_WITHIN: Duration = Duration::from_secs(120);
/// How long one member may take to answer.
const ENROLL_TIMEOUT: Duration = Duration::from_secs(5);

/// What a node shows its peers and checks them with.
#[derive(Debug, Clone)]
pub struct PeerCredentials {
    /// Its certificate and the root it checks peers' against.
    pub tls: Arc<PeerTls>,
    /// The cluster's own CA (none with operator certificates): what enrollment hands out and
    /// join tokens are minted with.
    pub ca: Option<Arc<ClusterCa>>,
    /// The cluster secret's proof, sent and required on every call, when configured.
    pub secret: Option<Arc<ClusterSecret>>,
}

/// What the node's store says about it, for choosing where its credentials come from.
#[derive(Debug, Clone, Copy)]
pub struct Situation {
    /// No Raft state: the node is about to found or join a cluster.
    pub fresh: bool,
    /// It is in a cluster whose only member it is (a one-node deployment).
    pub sole_member: bool,
}

/// Why a node has no peer credentials; each says what to give it.
#[derive(Debug, thiserror::Error)]
pub enum PeersError {
    /// Operator certificate files unusable.
    #[error("peer TLS: {0}")]
    Tls(#[from] TlsError),
    /// The cluster's CA could not be made, read or kept.
    #[error(transparent)]
    Pki(#[from] PkiError),
    /// The cluster secret is too weak.
    #[error(transparent)]
    Secret(#[from] WeakSecret),
    /// A setting's file could not be read.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The operator's certificate does not name this node.
    #[error("node {id}'s peer certificate does not name {name}: a peer speaks only for the node id its certificate names. Add the DNS name {name} to its subject alternative names (deploy/tls/make-certs.sh does), or leave out --peer-ca/--peer-cert/--peer-key to use the cluster's own CA")]
    Unnamed {
        /// This node.
        id: NodeId,
        /// The name missing.
        name: String,
    },
    /// The folder's CA and the secret's differ.
    #[error("the data folder's cluster CA ({SEED_FILE}) is not the one the cluster secret derives: this node was admitted with a join token to a cluster with another CA, or the secret changed. Start it with the secret its cluster uses, or without one")]
    SeedMismatch,
    /// A fresh node that is to join has nothing to authenticate with.
    #[error("node {id} is to join a cluster (--join) but holds no credential for its peers. Give it a join token (run `rowcall cluster join-token` against any member, then start this node with ROWCALL_JOIN_TOKEN or --join-token-file), or the cluster secret every member was started with (ROWCALL_CLUSTER_SECRET or --cluster-secret-file; nodes started together to found a cluster need it)")]
    NoCredential {
        /// This node.
        id: NodeId,
    },
    /// A member of a cluster of an older build, which ran without peer credentials.
    #[error("this data folder belongs to a cluster of several nodes that ran without peer credentials (a build from before peers always authenticated). Upgrade in one step: stop every node, then start each again with the same cluster secret (ROWCALL_CLUSTER_SECRET or --cluster-secret-file; make one with `openssl rand -hex 32`)")]
    Upgrade,
    /// Enrollment with the join token failed.
    #[error("enrolling with the join token through {addr} failed: {reason}")]
    Enroll {
        /// The member(s) asked.
        addr: String,
        /// Why.
        reason: String,
    },
}

/// This node's peer credentials, by the rules of the module docs.
pub async fn resolve(config: &Config, situation: Situation) -> Result<PeerCredentials, PeersError> {
    let cluster = &config.cluster;
    let id = config.node.id;
    let data = &config.node.data;
    let secret_text = cluster.read_secret()?;
    let secret = match &secret_text {
        Some(text) => Some(Arc::new(ClusterSecret::new(text)?)),
        None => None,
    };
    if cluster.insecure_peers {
        tracing::warn!("--insecure-peers (insecure_peers) no longer has an effect: peers always authenticate with certificates");
    }
    if let Some(files) = &cluster.tls {
        let tls = PeerTls::load(files)?;
        if !tls
            .own_certificate()
            .is_some_and(|own| names_node(&own, id))
        {
            return Err(PeersError::Unnamed {
                id,
                name: node_name(id),
            });
        }
        return Ok(PeerCredentials {
            tls: Arc::new(tls),
            ca: None,
            secret,
        });
    }
    let stored = ClusterCa::load(data)?;
    let ca = match (&secret_text, stored) {
        (Some(text), stored) => {
            let derived = ClusterCa::from_secret(text)?;
            if stored.is_some_and(|stored| stored.cert_pem() != derived.cert_pem()) {
                return Err(PeersError::SeedMismatch);
            }
            derived
        }
        (None, Some(stored)) => stored,
        (None, None) => {
            let token = cluster.read_join_token()?;
            let joining = !cluster.join.is_empty();
            let ca = match token {
                Some(token) if situation.fresh && joining => enroll(config, &token).await?,
                _ if situation.fresh && joining => return Err(PeersError::NoCredential { id }),
                // Founding alone, or a one-node cluster of an older build: nobody else
                // needs to agree on its CA.
                _ if situation.fresh || situation.sole_member => {
                    if !situation.fresh {
                        tracing::info!("this one-node cluster had no peer credentials (an older build): made its CA");
                    }
                    ClusterCa::generate()?
                }
                _ => return Err(PeersError::Upgrade),
            };
            // Kept before the node founds or joins with it.
            ca.store(data)?;
            ca
        }
    };
    let tls = PeerTls::of_cluster(&ca, id)?;
    Ok(PeerCredentials {
        tls: Arc::new(tls),
        ca: Some(Arc::new(ca)),
        secret,
    })
}

/// Why one enrollment attempt failed.
enum Attempt {
    /// Worth trying again (the member is down, or has no cluster yet).
    Retry(String),
    /// The token itself was refused, or the reply is forged: trying again cannot help.
    Fatal(String),
}

/// Gets the cluster's CA for `token` from any of the members the node is to join through,
/// trying until [`ENROLL_WITHIN`].
async fn enroll(config: &Config, token: &str) -> Result<ClusterCa, PeersError> {
    let join = &config.cluster.join;
    let everyone = join.join(",");
    let token = JoinToken::parse(token).map_err(|e| PeersError::Enroll {
        addr: everyone.clone(),
        reason: e.to_string(),
    })?;
    let deadline = tokio::time::Instant::now() + ENROLL_WITHIN;
    let mut last = String::from("no member answered");
    loop {
        for addr in join {
            let dial = config.node.peer_routes.get(addr).unwrap_or(addr);
            match enroll_at(dial, &token, config.node.id).await {
                Ok(ca) => {
                    tracing::info!(through = %addr, "received the cluster's credential with the join token");
                    return Ok(ca);
                }
                Err(Attempt::Fatal(reason)) => {
                    return Err(PeersError::Enroll {
                        addr: addr.clone(),
                        reason,
                    })
                }
                Err(Attempt::Retry(reason)) => {
                    tracing::debug!(through = %addr, %reason, "enrollment attempt failed");
                    last = format!("{addr}: {reason}");
                }
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(PeersError::Enroll {
                addr: everyone,
                reason: last,
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One enrollment attempt at `addr`, bounded as a whole: a peer whose listener is bound but
/// not yet served must not hold a starting node for ever.
async fn enroll_at(addr: &str, token: &JoinToken, node: NodeId) -> Result<ClusterCa, Attempt> {
    tokio::time::timeout(ENROLL_TIMEOUT, enroll_once(addr, token, node))
        .await
        .unwrap_or_else(|_| {
            Err(Attempt::Retry(format!(
                "no answer within {} s",
                ENROLL_TIMEOUT.as_secs()
            )))
        })
}

async fn enroll_once(addr: &str, token: &JoinToken, node: NodeId) -> Result<ClusterCa, Attempt> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| Attempt::Fatal(format!("bad address: {e}")))?
        .connect_timeout(ENROLL_TIMEOUT)
        .timeout(ENROLL_TIMEOUT);
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| Attempt::Retry(e.to_string()))?;
    let proof = token.prove(node);
    let reply = PeerEnrollmentClient::new(channel)
        .enroll(EnrollRequest {
            token_id: proof.token_id.clone(),
            node_id: node,
            nonce: proof.nonce.clone(),
            proof: proof.proof.clone(),
        })
        .await
        .map_err(|status| match status.code() {
            tonic::Code::PermissionDenied | tonic::Code::InvalidArgument => {
                Attempt::Fatal(status.message().to_owned())
            }
            _ => Attempt::Retry(status.message().to_owned()),
        })?
        .into_inner();
    let sealed = Sealed {
        nonce: reply.seal_nonce,
        ciphertext: reply.sealed_seed,
    };
    token
        .open(&proof, node, &reply.cluster_id, &sealed)
        .ok_or_else(|| {
            Attempt::Fatal(
                "the reply was not sealed under this token: whoever answered does not hold the \
                 cluster's CA"
                    .into(),
            )
        })
}

/// The enrollment service: hands the cluster's CA to the holder of a join token.
pub struct Enrollment {
    app: Arc<App>,
}

impl Enrollment {
    /// Enrollment into `app`'s cluster.
    pub fn new(app: Arc<App>) -> Self {
        Self { app }
    }
}

fn refuse(status: Status) -> Status {
    metrics::counter!(crate::metrics::PEER_REFUSALS_TOTAL, "reason" => "join_token").increment(1);
    status
}

#[tonic::async_trait]
impl PeerEnrollment for Enrollment {
    async fn enroll(
        &self,
        request: Request<EnrollRequest>,
    ) -> Result<Response<EnrollReply>, Status> {
        let Some(ca) = &self.app.peer_ca else {
            return Err(refuse(Status::failed_precondition(
                "this cluster uses operator certificates: a new node needs its own certificate \
                 from the operator's CA, not a join token",
            )));
        };
        let Some(cluster_id) = self.app.identity.cluster_id() else {
            return Err(Status::unavailable(format!(
                "node {} has not founded or joined a cluster yet",
                self.app.node_id
            )));
        };
        let asked = request.into_inner();
        if asked.nonce.len() != 16 || asked.proof.len() != 32 || asked.node_id == 0 {
            return Err(refuse(Status::invalid_argument(
                "an enrollment needs a node id, a 16-byte nonce and a 32-byte proof",
            )));
        }
        let sealed = ca
            .seal_for(
                &asked.token_id,
                asked.node_id,
                &asked.nonce,
                &asked.proof,
                &cluster_id,
                now_ms(),
            )
            .map_err(|e| {
                tracing::warn!(node = asked.node_id, reason = %e, "refused an enrollment");
                refuse(Status::permission_denied(e.to_string()))
            })?;
        tracing::info!(
            node = asked.node_id,
            "handed the cluster's credential to a joiner with a join token"
        );
        Ok(Response::new(EnrollReply {
            cluster_id,
            seal_nonce: sealed.nonce,
            sealed_seed: sealed.ciphertext,
        }))
    }
}
