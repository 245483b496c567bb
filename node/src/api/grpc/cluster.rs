//! `rowcall.v1.Cluster`: status, membership and snapshots, over
//! [`crate::service::cluster`].

use rowcall_proto::v1::cluster_server::Cluster;
use rowcall_proto::v1::{
    AddLearnerRequest, CreateJoinTokenRequest, JoinTokenResponse, MembershipResponse,
    MoveLeaderRequest, MoveLeaderResponse, PromoteRequest, RemoveRequest, SnapshotRequest,
    SnapshotResponse, StatusRequest, StatusResponse,
};
use tonic::{Request, Response, Status};

use super::Api;
use crate::service::admin_write;
use crate::service::cluster::{self as service, AddMember};

const MEMBERSHIP: &str = "change the membership";
const MOVE_LEADER: &str = "move the leader";

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
            let admin = admin_write(&self.app, Self::caller(&request), MEMBERSHIP)?;
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
            let admin = admin_write(&self.app, Self::caller(&request), MEMBERSHIP)?;
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
            let admin = admin_write(&self.app, Self::caller(&request), MEMBERSHIP)?;
            let id = request.get_ref().id;
            service::remove_member(&self.app, &admin, id).await?;
            Ok(self.reply(MembershipResponse { id }, None))
        })
        .await
    }

    async fn move_leader(
        &self,
        request: Request<MoveLeaderRequest>,
    ) -> Result<Response<MoveLeaderResponse>, Status> {
        self.answer(self.viewer(&request), async {
            let admin = admin_write(&self.app, Self::caller(&request), MOVE_LEADER)?;
            let leader = service::move_leader(&self.app, &admin, request.get_ref().to).await?;
            Ok(self.reply(MoveLeaderResponse { leader }, None))
        })
        .await
    }

    async fn snapshot(
        &self,
        request: Request<SnapshotRequest>,
    ) -> Result<Response<SnapshotResponse>, Status> {
        self.answer(self.viewer(&request), async {
            let admin = admin_write(&self.app, Self::caller(&request), "trigger snapshots")?;
            service::snapshot(&self.app, &admin).await?;
            Ok(self.reply(SnapshotResponse {}, None))
        })
        .await
    }

    async fn create_join_token(
        &self,
        request: Request<CreateJoinTokenRequest>,
    ) -> Result<Response<JoinTokenResponse>, Status> {
        self.answer(self.viewer(&request), async {
            let admin = crate::service::Admin::check(
                &self.app,
                Self::credential(&request),
                "mint join tokens",
            )?;
            let ttl = Some(request.get_ref().ttl_seconds);
            let minted = service::join_token(&self.app, &admin, ttl)?;
            Ok(self.reply(
                JoinTokenResponse {
                    token: minted.token,
                    expires_at: crate::model::time::format_ms(minted.expires_ms),
                },
                None,
            ))
        })
        .await
    }
}
