//! Receipts: the forensic view (admin key) and the public brochure page, over
//! [`crate::service::receipts`].

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;
use utoipa::IntoParams;

use super::{credential, Http, ReadOptions};
use crate::model::receipt::Receipt;
use crate::service::receipts as service;
use crate::service::{Admin, ServiceError};

/// Which row's receipts.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ByKeyQuery {
    /// The row key.
    key: String,
    /// At most this many, newest first (default 50, max 1000).
    limit: Option<usize>,
}

/// One receipt with stored input and output (admin key).
#[utoipa::path(get, path = "/api/receipts/{id}", params(("id" = String, Path, description = "inv_…"), ReadOptions),
    responses((status = 200, body = Receipt), (status = 401, description = "no admin key"), (status = 404, description = "unknown id")))]
pub async fn by_id(
    State(http): State<Http>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(read): Query<ReadOptions>,
) -> Result<Json<Receipt>, ServiceError> {
    let app = &http.app;
    let admin = Admin::check(app, credential(&headers), "read forensic receipts")?;
    let fresh = read.freshness(&headers)?;
    Ok(Json(service::get(app, &admin, &fresh, &id).await?))
}

/// The receipts of one row, newest first (admin key). They outlive the row.
#[utoipa::path(get, path = "/api/receipts", params(ByKeyQuery, ReadOptions),
    responses((status = 200, description = "`{key, count, receipts}`"), (status = 401, description = "no admin key")))]
pub async fn by_key(
    State(http): State<Http>,
    headers: HeaderMap,
    Query(query): Query<ByKeyQuery>,
    Query(read): Query<ReadOptions>,
) -> Result<Response, ServiceError> {
    let app = &http.app;
    let admin = Admin::check(app, credential(&headers), "read forensic receipts")?;
    let fresh = read.freshness(&headers)?;
    let receipts = service::by_key(app, &admin, &fresh, &query.key, query.limit).await?;
    Ok(
        Json(json!({ "key": query.key, "count": receipts.len(), "receipts": receipts }))
            .into_response(),
    )
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The public brochure of a receipt: a small HTML page of its public fields.
#[utoipa::path(get, path = "/receipt/{id}", params(("id" = String, Path, description = "inv_…")),
    responses((status = 200, description = "HTML page"), (status = 404, description = "unknown id")))]
pub async fn public_page(
    State(http): State<Http>,
    Path(id): Path<String>,
) -> Result<Response, ServiceError> {
    let Some(r) = service::lookup(&http.app, &id)? else {
        let page = format!(
            "<!doctype html><meta charset=utf-8><title>Unknown receipt</title>\
             <h1>Unknown receipt</h1><p>No invocation <code>{}</code> is recorded here.</p>",
            escape(&id)
        );
        return Ok((StatusCode::NOT_FOUND, Html(page)).into_response());
    };
    let rows = [
        ("Invocation", r.id.clone()),
        ("Capability", r.key.clone()),
        (
            "Outcome",
            if r.ok {
                "succeeded".into()
            } else {
                "failed".into()
            },
        ),
        ("At", r.started_at.clone()),
        ("Duration", format!("{} ms", r.duration_ms)),
        ("Input SHA-256", r.input_sha256.clone()),
        ("Output SHA-256", r.output_sha256.clone()),
        ("Served by node", r.served_by.to_string()),
        ("Log index", r.index.to_string()),
    ];
    let mut table = String::new();
    for (name, value) in rows {
        table.push_str(&format!(
            "<tr><th>{name}</th><td><code>{}</code></td></tr>",
            escape(&value)
        ));
    }
    let proof = crate::service::transparency::prove(&http.app, &Default::default(), &r.id, None)
        .await
        .ok();
    let proven = match proof
        .as_ref()
        .and_then(|p| Some((p, p.checkpoint.as_ref()?)))
    {
        Some((p, c)) => format!(
            "<p>It is leaf {} of the {} in the cluster's receipt log, whose checkpoint ({}) \
             {} of {} voters signed (nodes {}). Anyone can check that without trusting this \
             node: <code>rowcall verify {}</code>, or the proof at \
             <a href=\"/api/receipts/proof?id={id}\">/api/receipts/proof?id={id}</a>.</p>",
            p.leaf_index,
            p.tree_size,
            escape(&c.origin),
            c.signers.iter().filter(|s| c.voters.contains(s)).count(),
            c.voters.len(),
            c.signers
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            escape(&r.id),
            id = escape(&r.id),
        ),
        None => "<p>No co-signed checkpoint of the receipt log covers it yet: the cluster \
                 signs one about every second; look again shortly.</p>"
            .to_owned(),
    };
    let page = format!(
        "<!doctype html><meta charset=utf-8><meta name=viewport content=\"width=device-width\">\
         <title>Receipt {id}</title>\
         <style>body{{font:15px system-ui,sans-serif;max-width:46em;margin:2em auto;padding:0 1em}}\
         th{{text-align:left;padding-right:1em;vertical-align:top}}td code{{word-break:break-all}}</style>\
         <h1>Receipt {id}</h1><table>{table}</table>{proven}\
         <p>Check it: <a href=\"/api/dispatch?confirm={id}\">/api/dispatch?confirm={id}</a></p>",
        id = escape(&r.id),
    );
    Ok(Html(page).into_response())
}
