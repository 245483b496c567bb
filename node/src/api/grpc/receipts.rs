//! `rowcall.v1.Receipts`: the forensic view (admin key), over [`crate::service::receipts`].

use rowcall_proto::v1::receipts_server::Receipts;
use rowcall_proto::v1::{
    GetReceiptRequest, ListReceiptsRequest, ListReceiptsResponse, Receipt as ReceiptMessage,
};
use tonic::{Request, Response, Status};

use super::Api;
use crate::service::receipts as service;
use crate::service::Admin;

#[tonic::async_trait]
impl Receipts for Api {
    async fn get(
        &self,
        request: Request<GetReceiptRequest>,
    ) -> Result<Response<ReceiptMessage>, Status> {
        self.answer(self.viewer(&request), async {
            let admin = Admin::check(
                &self.app,
                Self::credential(&request),
                "read forensic receipts",
            )?;
            let fresh = Self::freshness(&request)?;
            let receipt = service::get(&self.app, &admin, &fresh, &request.get_ref().id).await?;
            Ok(self.reply(receipt.into(), None))
        })
        .await
    }

    async fn list_by_key(
        &self,
        request: Request<ListReceiptsRequest>,
    ) -> Result<Response<ListReceiptsResponse>, Status> {
        self.answer(self.viewer(&request), async {
            let admin = Admin::check(
                &self.app,
                Self::credential(&request),
                "read forensic receipts",
            )?;
            let fresh = Self::freshness(&request)?;
            let ListReceiptsRequest { key, limit } = request.get_ref();
            let limit = (*limit > 0).then_some(*limit as usize);
            let receipts = service::by_key(&self.app, &admin, &fresh, key, limit).await?;
            let answer = ListReceiptsResponse {
                key: key.clone(),
                receipts: receipts.into_iter().map(Into::into).collect(),
            };
            Ok(self.reply(answer, None))
        })
        .await
    }
}
