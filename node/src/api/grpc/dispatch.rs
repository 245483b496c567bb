//! `rowcall.v1.Dispatch`: ask, contract, invoke, confirm, over [`crate::service::dispatch`].

use rowcall_proto::json;
use rowcall_proto::v1::contract_response::Contract as Form;
use rowcall_proto::v1::dispatch_server::Dispatch;
use rowcall_proto::v1::{
    AskRequest, AskResponse, ConfirmRequest, ConfirmResponse, ContractRequest, ContractResponse,
    InvokeRequest, InvokeResponse,
};
use serde_json::Value;
use tonic::{Request, Response, Status};

use super::Api;
use crate::dispatch::InvokeInput;
use crate::service::dispatch::{self as service, Contract};
use crate::service::quota::Caller;
use crate::service::ServiceError;

/// A count of zero means "the default", as proto3 cannot tell unset from zero.
fn limit(n: u32) -> Option<usize> {
    (n > 0).then_some(n as usize)
}

#[tonic::async_trait]
impl Dispatch for Api {
    async fn ask(&self, request: Request<AskRequest>) -> Result<Response<AskResponse>, Status> {
        self.answer(self.viewer(&request), async {
            let fresh = Self::freshness(&request)?;
            let caller = Self::caller(&request);
            let ask = &request.get_ref().ask;
            let limit = limit(request.get_ref().limit);
            let ranking =
                request
                    .get_ref()
                    .mode
                    .parse()
                    .map_err(|message| ServiceError::BadRequest {
                        message,
                        hint: "leave mode empty unless comparing rankings",
                    })?;
            let answer =
                service::ask(&self.app, &fresh, caller, &self.base, ask, limit, ranking).await?;
            Ok(self.reply(answer.into(), None))
        })
        .await
    }

    async fn contract(
        &self,
        request: Request<ContractRequest>,
    ) -> Result<Response<ContractResponse>, Status> {
        self.answer(self.viewer(&request), async {
            let fresh = Self::freshness(&request)?;
            let viewer = self.viewer(&request);
            let ContractRequest { key, format } = request.get_ref();
            let format = Some(format.as_str()).filter(|f| !f.is_empty());
            let contract =
                service::contract(&self.app, &fresh, &viewer, &self.base, key, format).await?;
            let contract = match contract {
                Contract::Markdown(text) => Form::Markdown(text),
                Contract::Json(Value::Object(map)) => Form::Json(json::to_struct(map)),
                Contract::Json(other) => {
                    return Err(ServiceError::internal(format!(
                        "a contract that is not an object: {other}"
                    )));
                }
            };
            let answer = ContractResponse {
                contract: Some(contract),
            };
            Ok(self.reply(answer, None))
        })
        .await
    }

    async fn invoke(
        &self,
        request: Request<InvokeRequest>,
    ) -> Result<Response<InvokeResponse>, Status> {
        self.answer(self.viewer(&request), async {
            let fresh = Self::freshness(&request)?;
            let credential = Self::credential(&request).map(str::to_owned);
            let peer = Self::peer(&request);
            let InvokeRequest {
                key,
                args,
                body,
                share,
                repeatable,
            } = request.into_inner();
            let input = InvokeInput {
                args: args.map(json::from_struct),
                body,
                repeatable,
            };
            let caller = Caller {
                credential: credential.as_deref(),
                peer,
            };
            let invocation = service::invoke(
                &self.app,
                &fresh,
                caller,
                share.as_deref(),
                &self.base,
                &key,
                input,
            )
            .await?;
            let index = invocation.committed_index;
            Ok(self.reply(invocation.into(), index))
        })
        .await
    }

    async fn confirm(
        &self,
        request: Request<ConfirmRequest>,
    ) -> Result<Response<ConfirmResponse>, Status> {
        self.answer(self.viewer(&request), async {
            let fresh = Self::freshness(&request)?;
            let id = &request.get_ref().id;
            match service::confirm(&self.app, &fresh, id).await? {
                Some(confirmation) => Ok(self.reply(confirmation.into(), None)),
                None => Err(ServiceError::NotFound(format!("no receipt {id:?}"))),
            }
        })
        .await
    }
}
