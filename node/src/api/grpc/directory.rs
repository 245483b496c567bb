//! `rowcall.v1.Directory`: get, list, put, put many, delete, counts and the change feed, over
//! [`crate::service::directory`] and [`crate::service::feed`].

use std::pin::Pin;

use futures_util::{Stream, StreamExt as _};
use rowcall_proto::v1::directory_server::Directory;
use rowcall_proto::v1::{
    Counts, CountsRequest, DeleteRowRequest, DeleteRowResponse, GetRowRequest, ListRowsRequest,
    ListRowsResponse, PutManyRequest, PutRowRequest, PutRowsResponse, Row, WatchEvent,
    WatchRequest,
};
use tonic::{Request, Response, Status};

use super::convert::{row_input, row_seen, rows, watch_event};
use super::Api;
use crate::service::directory::{self as service, Put, PutAnswer};
use crate::service::feed;
use crate::service::{admin_write, ServiceError};

const WRITE: &str = "write the directory";

/// A put's answer as a message.
fn put_response(answer: &PutAnswer) -> PutRowsResponse {
    PutRowsResponse {
        rows: answer.outcomes.iter().map(Into::into).collect(),
        index: answer.logged.index,
        replayed: answer.logged.replayed.is_some(),
    }
}

#[tonic::async_trait]
impl Directory for Api {
    async fn get(&self, request: Request<GetRowRequest>) -> Result<Response<Row>, Status> {
        self.answer(self.viewer(&request), async {
            let fresh = Self::freshness(&request)?;
            let viewer = self.viewer(&request);
            let key = &request.get_ref().key;
            let (row, sight) = service::get(&self.app, &viewer, &fresh, key).await?;
            Ok(self.reply(row_seen(&row, sight), None))
        })
        .await
    }

    async fn list(
        &self,
        request: Request<ListRowsRequest>,
    ) -> Result<Response<ListRowsResponse>, Status> {
        self.answer(self.viewer(&request), async {
            let fresh = Self::freshness(&request)?;
            let ListRowsRequest {
                category,
                cursor,
                limit,
            } = request.get_ref();
            let category = Some(category.as_str()).filter(|c| !c.is_empty());
            let cursor = Some(cursor.as_str()).filter(|c| !c.is_empty());
            let limit = (*limit > 0).then_some(*limit as usize);
            let viewer = self.viewer(&request);
            let page = service::list(&self.app, &viewer, &fresh, category, cursor, limit).await?;
            let answer = ListRowsResponse {
                rows: rows(&page.rows, page.sight),
                next_cursor: page.next_cursor.unwrap_or_default(),
                index: page.index,
            };
            Ok(self.reply(answer, Some(page.index)))
        })
        .await
    }

    async fn put(
        &self,
        request: Request<PutRowRequest>,
    ) -> Result<Response<PutRowsResponse>, Status> {
        self.answer(self.viewer(&request), async {
            let admin = admin_write(&self.app, Self::caller(&request), WRITE)?;
            let id = Self::request_id(&request)?;
            let Some(row) = request.into_inner().row else {
                return Err(ServiceError::WrongShape("row is required".into()));
            };
            let answer = service::put(&self.app, &admin, id, Put::One(row_input(row))).await?;
            Ok(self.written(put_response(&answer), answer.logged))
        })
        .await
    }

    async fn put_many(
        &self,
        request: Request<PutManyRequest>,
    ) -> Result<Response<PutRowsResponse>, Status> {
        self.answer(self.viewer(&request), async {
            let admin = admin_write(&self.app, Self::caller(&request), WRITE)?;
            let id = Self::request_id(&request)?;
            let rows = request.into_inner().rows.into_iter().map(row_input);
            let put = Put::Many(rows.collect());
            let answer = service::put(&self.app, &admin, id, put).await?;
            Ok(self.written(put_response(&answer), answer.logged))
        })
        .await
    }

    async fn delete(
        &self,
        request: Request<DeleteRowRequest>,
    ) -> Result<Response<DeleteRowResponse>, Status> {
        self.answer(self.viewer(&request), async {
            let admin = admin_write(&self.app, Self::caller(&request), WRITE)?;
            let fresh = Self::freshness(&request)?;
            let id = Self::request_id(&request)?;
            let DeleteRowRequest { key, if_version } = request.get_ref();
            let deleted = service::delete(&self.app, &admin, &fresh, id, key, *if_version).await?;
            let answer = DeleteRowResponse {
                deleted: deleted.deleted,
                index: deleted.logged.index,
                replayed: deleted.logged.replayed.is_some(),
            };
            Ok(self.written(answer, deleted.logged))
        })
        .await
    }

    async fn counts(&self, request: Request<CountsRequest>) -> Result<Response<Counts>, Status> {
        self.answer(self.viewer(&request), async {
            let fresh = Self::freshness(&request)?;
            let counts = service::counts(&self.app, &fresh).await?;
            Ok(self.reply(counts.into(), None))
        })
        .await
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchEvent, Status>> + Send>>;

    async fn watch(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let payer = Self::caller(&request).payer(&self.app.credentials);
        let viewer = self.viewer(&request);
        let slot = feed::subscribe(&self.app, &payer).map_err(|e| self.fail(e, &viewer))?;
        let since = request.get_ref().since;
        let events = feed::follow(
            self.app.clone(),
            viewer.clone(),
            slot,
            since,
            self.stop.clone(),
        )
        .map(move |event| Ok(watch_event(event, &viewer)));
        Ok(self.reply(Box::pin(events) as Self::WatchStream, None))
    }
}
