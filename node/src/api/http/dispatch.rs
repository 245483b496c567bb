//! `/api/dispatch`: ask, contract, invoke (POST, and GET for `run_now` links), confirm, over
//! [`crate::service::dispatch`].

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use utoipa::openapi::schema::{AnyOfBuilder, ObjectBuilder, Schema, Type};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{IntoParams, PartialSchema, ToSchema};

use super::error::status;
use super::{
    caller, header_freshness, no_store, read_json, share_token, Http, Peer, ReadOptions,
    INDEX_HEADER,
};
use crate::api::base_url;
use crate::dispatch::InvokeInput;
use crate::model::receipt::Confirmation;
use crate::service::dispatch::{self as service, AskAnswer, Contract, Invocation};
use crate::service::view::Viewer;
use crate::service::ServiceError;

/// The four read operations of `GET /api/dispatch`; exactly one of `ask`, `key`, `invoke`
/// and `confirm` is given.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DispatchQuery {
    /// A plain-language request: ranked candidates.
    ask: Option<String>,
    /// A row key: its contract.
    key: Option<String>,
    /// A row key: run it now (public rows, or with `share`). Only `risk: read` rows run by
    /// GET; the others answer 405 and run only by POST.
    invoke: Option<String>,
    /// With `invoke`: a share token scoped to that key (`key`-auth rows without a credential);
    /// with `key`: it lets its holder read that hidden row's contract. The header
    /// `x-rowcall-share` does the same and keeps the token out of logs of URLs.
    share: Option<String>,
    /// A receipt id: check it without a credential.
    confirm: Option<String>,
    /// With `key`: `markdown` for a contract written for models.
    format: Option<String>,
    /// With `ask`: how many candidates at most (default 5, max 50).
    limit: Option<usize>,
    /// With `ask`: `lexical`, `dense` or `fused` to rank by one half of the resolver or
    /// both (the default: both when the node has a model, words otherwise).
    mode: Option<String>,
    /// With `invoke`: arguments as a JSON object.
    args: Option<String>,
}

/// The body of `POST /api/dispatch`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InvokeBody {
    /// The row to run.
    key: String,
    /// Named arguments.
    #[serde(default)]
    args: Option<Map<String, Value>>,
    /// A raw body, for rows that take one.
    #[serde(default)]
    body: Option<String>,
    /// The caller may send this same call to another node at once (a hedge): only a row
    /// that changes nothing (`risk: read`) runs; any other is refused with 409
    /// `not_repeatable` before it runs. Each attempt that runs leaves its own receipt.
    #[serde(default)]
    repeatable: bool,
}

/// What `GET /api/dispatch` answers with 200: one of four shapes, by the parameter given.
/// Documented as `anyOf`, because a contract is an open object (its fields follow the row).
pub struct DispatchAnswer;

impl PartialSchema for DispatchAnswer {
    fn schema() -> RefOr<Schema> {
        let object = |description: &str, required: &[&str]| {
            let mut object = ObjectBuilder::new()
                .schema_type(Type::Object)
                .description(Some(description));
            for field in required {
                object = object.required(*field);
            }
            object.build()
        };
        AnyOfBuilder::new()
            .description(Some(
                "`ask`: ranked candidates; `key`: the row's contract; `invoke`: the invocation; \
                 `confirm`: the confirmation",
            ))
            .item(Ref::from_schema_name(AskAnswer::name()))
            .item(object(
                "The row's contract (`key`): its fields, how to invoke it, its troubleshooting.",
                &["key", "invoke"],
            ))
            .item(object(
                "An invocation (`invoke`): `{ok, key, result | error, proof}`.",
                &["ok", "key", "proof"],
            ))
            .item(Ref::from_schema_name(Confirmation::name()))
            .into()
    }
}

impl ToSchema for DispatchAnswer {}

/// Ask, contract, run-now or confirm.
#[utoipa::path(get, path = "/api/dispatch", params(DispatchQuery, ReadOptions),
    responses((status = 200, description = "ranked candidates (ask), a contract (key), an invocation (invoke) or a confirmation (confirm)",
               content((DispatchAnswer = "application/json"), (String = "text/markdown"))),
              (status = 400, description = "not exactly one of ask, key, invoke, confirm"),
              (status = 405, description = "invoke of a row whose risk is write or destructive: POST only; nothing ran"),
              (status = 429, description = "over the rate limit; see Retry-After"),
              (status = 404, description = "unknown key (or a hidden row's contract, without a credential for it), or unknown receipt (`confirmed: false`)")))]
pub async fn get_dispatch(
    State(http): State<Http>,
    peer: Peer,
    headers: HeaderMap,
    Query(query): Query<DispatchQuery>,
    Query(read): Query<ReadOptions>,
) -> Result<Response, ServiceError> {
    let app = &http.app;
    let chosen = [&query.ask, &query.key, &query.invoke, &query.confirm]
        .iter()
        .filter(|v| v.is_some())
        .count();
    if chosen != 1 {
        return Err(ServiceError::BadRequest {
            message: "give exactly one of ask, key, invoke, confirm".into(),
            hint: "GET /api/dispatch?ask=what+time+is+it",
        });
    }
    let fresh = read.freshness(&headers)?;
    let base = base_url(app, &headers);
    if let Some(ask) = &query.ask {
        let ranking = query
            .mode
            .as_deref()
            .unwrap_or_default()
            .parse()
            .map_err(|message| ServiceError::BadRequest {
                message,
                hint: "leave mode out unless comparing rankings",
            })?;
        let caller = caller(&headers, peer);
        let answer = service::ask(app, &fresh, caller, &base, ask, query.limit, ranking).await?;
        let carries_token = answer.carries_token();
        let response = Json(answer).into_response();
        return Ok(if carries_token {
            no_store(response)
        } else {
            response
        });
    }
    if let Some(key) = &query.key {
        let share = share_token(&headers).or(query.share.as_deref());
        let viewer = Viewer::for_row(app, super::credential(&headers), share, key);
        let format = query.format.as_deref();
        return Ok(
            match service::contract(app, &fresh, &viewer, &base, key, format).await? {
                Contract::Markdown(text) => (
                    [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")],
                    text,
                )
                    .into_response(),
                Contract::Json(contract) => Json(contract).into_response(),
            },
        );
    }
    if let Some(key) = &query.invoke {
        // A link runs nothing that changes anything: checked before the arguments, the
        // credential or the token, and before anything runs or a receipt is written.
        let row = service::find_row(app, key)?;
        if !service::runs_by_get(&row) {
            return Err(ServiceError::PostOnly {
                key: row.key.clone(),
                risk: row.risk.as_str(),
            });
        }
        let args = match &query.args {
            None => None,
            Some(text) => match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(map)) => Some(map),
                Ok(_) => {
                    return Err(ServiceError::WrongShape(
                        "args must be a JSON object".into(),
                    ))
                }
                Err(e) => return Err(ServiceError::MalformedJson(e.to_string())),
            },
        };
        let input = InvokeInput {
            args,
            ..InvokeInput::default()
        };
        let share = share_token(&headers).or(query.share.as_deref());
        let caller = caller(&headers, peer);
        let invocation = service::invoke(app, &fresh, caller, share, &base, key, input).await?;
        return Ok(invoked(invocation));
    }
    let id = query.confirm.as_deref().unwrap_or_default();
    Ok(match service::confirm(app, &fresh, id).await? {
        Some(confirmation) => Json(confirmation).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({ "confirmed": false, "id": id })),
        )
            .into_response(),
    })
}

/// Run a row. A share token for the row may stand in for an invoke key, in the header
/// `x-rowcall-share`.
#[utoipa::path(post, path = "/api/dispatch", request_body = InvokeBody,
    responses((status = 200, description = "`{ok, key, result, proof}`"),
              (status = 401, description = "the row needs an invoke key"),
              (status = 403, description = "the row is disabled"),
              (status = 404, description = "unknown key"),
              (status = 409, description = "`repeatable` for a row that changes something; nothing ran"),
              (status = 422, description = "arguments do not match the row's schema; nothing ran"),
              (status = 503, description = "the receipt could not be committed"),
              (status = 507, description = "a member is short of disk space (a storage alarm); nothing ran")))]
pub async fn post_invoke(
    State(http): State<Http>,
    peer: Peer,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ServiceError> {
    let app = &http.app;
    let body: InvokeBody = read_json(&headers, body, app.config.limits.max_body_bytes).await?;
    let fresh = header_freshness(&headers)?;
    let base = base_url(app, &headers);
    let input = InvokeInput {
        args: body.args,
        body: body.body,
        repeatable: body.repeatable,
    };
    let invocation = service::invoke(
        app,
        &fresh,
        caller(&headers, peer),
        share_token(&headers),
        &base,
        &body.key,
        input,
    )
    .await?;
    Ok(invoked(invocation))
}

/// An invocation's answer: 200, or the status of the runner's failure; a committed receipt's
/// index in `x-rowcall-index`.
fn invoked(invocation: Invocation) -> Response {
    let code = invocation.failure.map_or(StatusCode::OK, status);
    let mut response = (code, Json(invocation.answer)).into_response();
    if let Some(index) = invocation.committed_index {
        response
            .headers_mut()
            .insert(INDEX_HEADER, HeaderValue::from(index));
    }
    response
}
