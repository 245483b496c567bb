//! `rowcall.v1.Cluster`: status, membership and snapshots, over
//! [`crate::service::cluster`].

use rowcall_proto::v1::cluster_server::Cluster;
use rowcall_proto::v1::{
    AddLearnerRequest, MembershipResponse, PromoteRequest, RemoveRequest, SnapshotRequest,
    SnapshotResponse, StatusRequest, StatusResponse,
};
use tonic::{Request, Response, Status};

use super::Api;
use crate::service::cluster::{self as service, AddMember};
use crate::service::Admin;

const MEMBERSHIP: &str = "change the membership";

#[tonic::async_trait]
impl Cluster for Api {
    async fn status(
        &self,
        request: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        let viewer = self.viewer(&request);
        let status = service::status(&self.app, &viewer);
        self.answer(viewer, async { Ok(self.reply(status.into(), None)) })
            .await
    }

    async fn add_learner(
        &self,
        request: Request<AddLearnerRequest>,
    ) -> Result<Response<MembershipResponse>, Status> {
        self.answer(self.viewer(&request), async {
            let admin = Admin::check(&self.app, Self::credential(&request), MEMBERSHIP)?;
            let AddLearnerRequest {
                id,
                grpc_addr,
                http_addr,
            } = request.into_inner();
            let add = AddMember {
                id,
                grpc_addr,
                http_addr,
                learner: true,
            };
            service::add_member(&self.app, &admin, add).await?;
            Ok(self.reply(MembershipResponse { id }, None))
        })
        .await
    }

    async fn promote(
        &self,
        request: Request<PromoteRequest>,
    ) -> Result<Response<MembershipResponse>, Status> {
        self.answer(self.viewer(&request), async {
            let admin = Admin::check(&self.app, Self::credential(&request), MEMBERSHIP)?;
            let id = request.get_ref().id;
            service::promote(&self.app, &admin, id).await?;
            Ok(self.reply(MembershipResponse { id }, None))
        })
        .await
    }

    async fn remove(
        &self,
        request: Request<RemoveRequest>,
    ) -> Result<Response<MembershipResponse>, Status> {
        self.answer(self.viewer(&request), async {
            let admin = Admin::check(&self.app, Self::credential(&request), MEMBERSHIP)?;
            let id = request.get_ref().id;
            service::remove_member(&self.app, &admin, id).await?;
            Ok(self.reply(MembershipResponse { id }, None))
        })
        .await
    }

    async fn snapshot(
        &self,
        request: Request<SnapshotRequest>,
    ) -> Result<Response<SnapshotResponse>, Status> {
        self.answer(self.viewer(&request), async {
            let admin = Admin::check(&self.app, Self::credential(&request), "trigger snapshots")?;
            service::snapshot(&self.app, &admin).await?;
            Ok(self.reply(SnapshotResponse {}, None))
        })
        .await
    }
}
