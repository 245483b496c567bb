//! The public gRPC API (`rowcall.v1`, `proto/rowcall/v1/api.proto`) on tonic: `Dispatch`,
//! `Directory` (with `Watch`), `Receipts` and `Cluster`, each a thin adapter over
//! [`crate::service`], plus server reflection and the standard health service. Served on the
//! node's gRPC listener beside the Raft-internal service, as separate tonic services, so that
//! what guards the peers' service never touches clients and the other way round.
//!
//! ```text
//!   request metadata ── authorization / x-terminal-key ──► credential
//!                    ── x-rowcall-min-index, -consistency ► service::Freshness
//!                    ── idempotency-key ─────────────────► RequestId (writes)
//!   message ── convert.rs ──► service::<op>(…) ──► answer ── convert.rs ──► message
//!                                   └─ ServiceError ── error.rs ──► Status (code, ErrorInfo)
//!   response metadata ◄── x-rowcall-index, x-rowcall-stale, x-rowcall-leader, idempotent-replayed
//! ```

mod cluster;
mod connections;
mod convert;
mod directory;
mod dispatch;
pub mod error;
mod receipts;
pub mod trace;
mod transparency;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rowcall_proto::v1::cluster_server::ClusterServer;
use rowcall_proto::v1::directory_server::DirectoryServer;
use rowcall_proto::v1::dispatch_server::DispatchServer;
use rowcall_proto::v1::receipts_server::ReceiptsServer;
use rowcall_proto::v1::transparency_server::TransparencyServer;
use tokio::sync::watch;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::service::Routes;
use tonic::{Request, Response, Status};
use tonic_health::ServingStatus;

pub use self::connections::{per_client, InFlightLayer};
use crate::app::App;
use crate::raft::{BadRequestId, RequestId};
use crate::service::quota::Caller;
use crate::service::view::Viewer;
use crate::service::{Freshness, Logged, ServiceError};

/// Response metadata: the applied index, or a write's index.
pub const INDEX: &str = "x-rowcall-index";
/// Request metadata: wait until this index is applied before reading.
pub const MIN_INDEX: &str = "x-rowcall-min-index";
/// Request metadata: `linearizable` to confirm a read with the leader first.
pub const CONSISTENCY: &str = "x-rowcall-consistency";
/// Request metadata: names a write so that a retry is answered with its first outcome.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// Response metadata: the write answered is a repeat of an earlier attempt.
pub const REPLAYED: &str = "idempotent-replayed";
/// Response metadata: answered while this node is cut off from the leader.
pub const STALE: &str = "x-rowcall-stale";
/// Response metadata: the leader this node knows, `ID=GRPC_ADDR` (admin key only).
pub const LEADER: &str = "x-rowcall-leader";

/// What every public service shares.
#[derive(Clone)]
struct Api {
    app: Arc<App>,
    /// Base of the HTTP links in answers (contract, receipt, run_now).
    base: Arc<str>,
    /// Turns true when the node shuts down: open watch streams end.
    stop: watch::Receiver<bool>,
}

impl Api {
    /// The credential the request presents, if any (`authorization: Bearer`, or
    /// `x-terminal-key`), as over HTTP.
    fn credential<T>(request: &Request<T>) -> Option<&str> {
        crate::api::presented_credential(request.metadata().as_ref())
    }

    /// The client's address, when its connection has one.
    fn peer<T>(request: &Request<T>) -> Option<std::net::IpAddr> {
        // The listener's own connection info (`raft::tls::incoming`), else tonic's.
        crate::raft::tls::PeerConnectInfo::of(request)
            .and_then(|info| info.remote_addr)
            .or_else(|| request.remote_addr())
            .map(|addr| addr.ip())
    }

    /// Where the request comes from: what it spends is keyed on it
    /// ([`crate::service::quota`]).
    fn caller<T>(request: &Request<T>) -> Caller<'_> {
        Caller {
            credential: Self::credential(request),
            peer: Self::peer(request),
        }
    }

    /// The freshness a read asks for in its metadata.
    fn freshness<T>(request: &Request<T>) -> Result<Freshness, ServiceError> {
        let metadata = request.metadata();
        let min_index = text(metadata, MIN_INDEX)
            .map(|v| Freshness::parse_min_index(MIN_INDEX, v))
            .transpose()?;
        Ok(Freshness {
            min_index,
            consistency: text(metadata, CONSISTENCY).map(str::to_owned),
        })
    }

    /// The request id of a write: the client's `idempotency-key`, or a fresh one.
    fn request_id<T>(request: &Request<T>) -> Result<RequestId, ServiceError> {
        let Some(value) = request.metadata().get(IDEMPOTENCY_KEY) else {
            return Ok(RequestId::generate());
        };
        value
            .to_str()
            .ok()
            .and_then(|key| RequestId::parse(key).ok())
            .ok_or_else(|| ServiceError::BadRequest {
                message: BadRequestId.to_string(),
                hint: "send a fresh UUID as idempotency-key, and the same one on every retry of one write",
            })
    }

    /// Who the request's credential shows the caller to be, for what it may see.
    fn viewer<T>(&self, request: &Request<T>) -> Viewer {
        Viewer::of(&self.app, Self::credential(request))
    }

    /// Runs a handler's body, its failure answered as a status for `viewer` (see
    /// [`Api::fail`]).
    async fn answer<T>(
        &self,
        viewer: Viewer,
        work: impl Future<Output = Result<Response<T>, ServiceError>>,
    ) -> Result<Response<T>, Status> {
        work.await.map_err(|e| self.fail(e, &viewer))
    }

    /// A read's answer, stamped with the applied index (or `index`) and staleness.
    fn reply<T>(&self, message: T, index: Option<u64>) -> Response<T> {
        let mut response = Response::new(message);
        self.stamp(response.metadata_mut(), index);
        response
    }

    /// A write's answer: its index, whether it replays an earlier attempt, and the leader.
    fn written<T>(&self, message: T, logged: Logged) -> Response<T> {
        let mut response = self.reply(message, Some(logged.index));
        if logged.replayed.is_some() {
            response
                .metadata_mut()
                .insert(REPLAYED, MetadataValue::from_static("true"));
        }
        // Only writes answer here, and they need the admin key.
        self.leader_hint(response.metadata_mut(), &Viewer::Admin);
        response
    }

    /// A failure as a status, with the same metadata as an answer, and the leader when a
    /// leader could have done better (no quorum, a write's unknown outcome, …) and `viewer`
    /// may know where it is.
    fn fail(&self, error: ServiceError, viewer: &Viewer) -> Status {
        let retryable = error.retryable();
        let mut status = Status::from(error);
        self.stamp(status.metadata_mut(), None);
        if retryable {
            self.leader_hint(status.metadata_mut(), viewer);
        }
        status
    }

    fn stamp(&self, metadata: &mut MetadataMap, index: Option<u64>) {
        let index = index.unwrap_or_else(|| self.app.applied_index());
        metadata.insert(INDEX, MetadataValue::from(index));
        if self.app.is_stale() {
            metadata.insert(STALE, MetadataValue::from_static("true"));
        }
    }

    /// `ID=GRPC_ADDR` of the leader, which the client crate sends writes to; an address,
    /// so only for a viewer who may see addresses (the admin key: writes need it anyway).
    fn leader_hint(&self, metadata: &mut MetadataMap, viewer: &Viewer) {
        if !viewer.addresses() {
            return;
        }
        let Some((id, node)) = self.app.leader_node() else {
            return;
        };
        if let Ok(value) = format!("{id}={}", node.grpc_addr).parse() {
            metadata.insert(LEADER, value);
        }
    }
}

/// A metadata value as text, if it is text.
fn text<'a>(metadata: &'a MetadataMap, key: &str) -> Option<&'a str> {
    metadata.get(key).and_then(|v| v.to_str().ok())
}

/// The public services, reflection and health, to serve beside the Raft service. `base` is
/// the HTTP base URL links in answers point at; `stop` turns true when the node shuts down.
pub fn routes(app: Arc<App>, base: String, stop: watch::Receiver<bool>) -> anyhow::Result<Routes> {
    let limit = app.config.limits.max_body_bytes;
    let api = Api {
        app: app.clone(),
        base: base.into(),
        stop: stop.clone(),
    };
    // Reflection in both versions: v1, and v1alpha, which Python's grpcio-reflection and
    // older grpcurl releases still speak.
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(rowcall_proto::v1::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection().build_v1()?;
    let reflection_v1alpha = reflection().build_v1alpha()?;
    let (reporter, health) = tonic_health::server::health_reporter();
    tokio::spawn(report_health(app, reporter, stop));
    Ok(
        Routes::new(DispatchServer::new(api.clone()).max_decoding_message_size(limit))
            .add_service(DirectoryServer::new(api.clone()).max_decoding_message_size(limit))
            .add_service(ReceiptsServer::new(api.clone()))
            .add_service(TransparencyServer::new(api.clone()))
            .add_service(ClusterServer::new(api))
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(health),
    )
}

/// Keeps the health service current: each public service is SERVING while the process
/// runs; the server as a whole (the empty service name) is SERVING while the node is ready
/// (a reachable leader, everything it knows committed applied), as `/readyz` says.
async fn report_health(
    app: Arc<App>,
    reporter: tonic_health::server::HealthReporter,
    mut stop: watch::Receiver<bool>,
) {
    reporter.set_serving::<DispatchServer<Api>>().await;
    reporter.set_serving::<DirectoryServer<Api>>().await;
    reporter.set_serving::<ReceiptsServer<Api>>().await;
    reporter.set_serving::<TransparencyServer<Api>>().await;
    reporter.set_serving::<ClusterServer<Api>>().await;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
        let ready = crate::service::cluster::readiness(&app).await.ready;
        if last != Some(ready) {
            let status = if ready {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            reporter.set_service_status("", status).await;
            last = Some(ready);
        }
    }
}
