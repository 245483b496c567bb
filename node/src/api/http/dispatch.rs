//! `/api/dispatch`: ask, contract, invoke (POST, and GET for `run_now` links), confirm.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use utoipa::{IntoParams, ToSchema};

use super::error::{run_error_parts, ApiError};
use super::{base_url, principal, read_barrier, read_json, Http, ReadOptions, INDEX_HEADER};
use crate::app::App;
use crate::auth::{Principal, Scope};
use crate::catalogue::row::{Auth, Row};
use crate::dispatch::receipt::{valid_receipt_id, Confirmation};
use crate::dispatch::{self as run, share, InvokeInput, Invoked, ProofStatus};

const DEFAULT_LIMIT: usize = 5;
/// Most candidates an ask returns.
pub(crate) const MAX_LIMIT: usize = 50;

/// The four read operations of `GET /api/dispatch`; exactly one of `ask`, `key`, `invoke`
/// and `confirm` is given.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DispatchQuery {
    /// A plain-language request: ranked candidates.
    ask: Option<String>,
    /// A row key: its contract.
    key: Option<String>,
    /// A row key: run it now (public rows, or with `share`).
    invoke: Option<String>,
    /// With `invoke`: a share token scoped to that key (`key`-auth rows without a credential).
    share: Option<String>,
    /// A receipt id: check it without a credential.
    confirm: Option<String>,
    /// With `key`: `markdown` for a contract written for models.
    format: Option<String>,
    /// With `ask`: how many candidates at most (default 5, max 50).
    limit: Option<usize>,
    /// With `invoke`: arguments as a JSON object.
    args: Option<String>,
}

/// One ranked candidate.
#[derive(Debug, Serialize, ToSchema)]
pub struct Candidate {
    key: String,
    score: f64,
    what: String,
    /// The query terms that matched.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    why: Vec<String>,
}

/// The best candidate, with what to do next.
#[derive(Debug, Serialize, ToSchema)]
pub struct Best {
    key: String,
    score: f64,
    contract: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    run_now: Option<String>,
    r#do: String,
}

/// The answer to an ask.
#[derive(Debug, Serialize, ToSchema)]
pub struct AskAnswer {
    ask: String,
    count: usize,
    index: u64,
    best: Option<Best>,
    candidates: Vec<Candidate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hint: Option<&'static str>,
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
}

/// Ask, contract, run-now or confirm.
#[utoipa::path(get, path = "/api/dispatch", params(DispatchQuery, ReadOptions),
    responses((status = 200, description = "ranked candidates (ask), a contract (key), an invocation (invoke) or a confirmation (confirm)", body = AskAnswer),
              (status = 400, description = "not exactly one of ask, key, invoke, confirm"),
              (status = 404, description = "unknown key, or unknown receipt (`confirmed: false`)")))]
pub async fn get_dispatch(
    State(http): State<Http>,
    headers: HeaderMap,
    Query(query): Query<DispatchQuery>,
    Query(read): Query<ReadOptions>,
) -> Result<Response, ApiError> {
    let app = &http.app;
    let chosen = [&query.ask, &query.key, &query.invoke, &query.confirm]
        .iter()
        .filter(|v| v.is_some())
        .count();
    if chosen != 1 {
        return Err(ApiError::BadRequest {
            message: "give exactly one of ask, key, invoke, confirm".into(),
            hint: "GET /api/dispatch?ask=what+time+is+it",
        });
    }
    read_barrier(app, &headers, &read).await?;
    let base = base_url(app, &headers);
    if let Some(ask) = &query.ask {
        let limit = query.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
        let mut answer = answer_ask(app, &base, ask, limit);
        if let Some(best) = answer.best.as_mut() {
            share_run_now(app, &headers, &base, best).await;
        }
        return Ok(Json(answer).into_response());
    }
    if let Some(key) = &query.key {
        let row = find_row(app, key)?;
        return Ok(match query.format.as_deref() {
            Some("markdown") | Some("md") => (
                [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")],
                contract_markdown(&row, &base),
            )
                .into_response(),
            None | Some("json") => Json(contract_json(&row, &base)).into_response(),
            Some(other) => {
                return Err(ApiError::BadRequest {
                    message: format!("unknown format {other:?}"),
                    hint: "format=markdown or format=json",
                })
            }
        });
    }
    if let Some(key) = &query.invoke {
        let args = match &query.args {
            None => None,
            Some(text) => match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(map)) => Some(map),
                Ok(_) => return Err(ApiError::WrongShape("args must be a JSON object".into())),
                Err(e) => return Err(ApiError::MalformedJson(e.to_string())),
            },
        };
        let input = InvokeInput { args, body: None };
        return invoke_row(app, &headers, &base, key, input, query.share.as_deref()).await;
    }
    let id = query.confirm.as_deref().unwrap_or_default();
    confirm(app, id)
}

/// Run a row.
#[utoipa::path(post, path = "/api/dispatch", request_body = InvokeBody,
    responses((status = 200, description = "`{ok, key, result, proof}`"),
              (status = 401, description = "the row needs an invoke key"),
              (status = 403, description = "the row is disabled"),
              (status = 404, description = "unknown key"),
              (status = 422, description = "arguments do not match the row's schema; nothing ran"),
              (status = 503, description = "the receipt could not be committed")))]
pub async fn post_invoke(
    State(http): State<Http>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let app = &http.app;
    let body: InvokeBody = read_json(&headers, body, app.config.limits.max_body_bytes).await?;
    // A session that just wrote the row runs the version it wrote, on any node.
    read_barrier(app, &headers, &ReadOptions::default()).await?;
    let base = base_url(app, &headers);
    let input = InvokeInput {
        args: body.args,
        body: body.body,
    };
    invoke_row(app, &headers, &base, &body.key, input, None).await
}

pub(crate) fn find_row(app: &App, key: &str) -> Result<Arc<Row>, ApiError> {
    app.catalogue
        .read()
        .get(key)
        .ok_or_else(|| ApiError::NotFound(format!("no row with key {key:?}")))
}

fn round(score: f32) -> f64 {
    (f64::from(score) * 100.0).round() / 100.0
}

pub(crate) fn answer_ask(app: &App, base: &str, ask: &str, limit: usize) -> AskAnswer {
    let started = Instant::now();
    let (hits, index) = {
        let catalogue = app.catalogue.read();
        (catalogue.ask(ask, limit), app.applied_index())
    };
    metrics::histogram!(crate::metrics::ASK_SECONDS).record(started.elapsed().as_secs_f64());
    let best = hits.first().map(|(hit, row)| {
        let key = &row.key;
        let run_now = (row.auth == Auth::Public)
            .then(|| format!("{base}/api/dispatch?invoke={key}"));
        let r#do = if run_now.is_some() {
            format!("GET run_now, or POST {{\"key\":\"{key}\"}} to /api/dispatch")
        } else {
            format!("POST {{\"key\":\"{key}\"}} to /api/dispatch with Authorization: Bearer <invoke key>")
        };
        Best {
            key: key.clone(),
            score: round(hit.score),
            contract: format!("{base}/api/dispatch?key={key}"),
            run_now,
            r#do,
        }
    });
    let candidates: Vec<Candidate> = hits
        .iter()
        .map(|(hit, row)| Candidate {
            key: row.key.clone(),
            score: round(hit.score),
            what: row.docs().what().to_owned(),
            why: hit.matched.clone(),
        })
        .collect();
    AskAnswer {
        ask: ask.to_owned(),
        count: candidates.len(),
        index,
        hint: candidates
            .is_empty()
            .then_some("nothing matched well; try other words, or browse GET /api/directory"),
        best,
        candidates,
    }
}

/// An example of arguments that satisfies `schema` (required properties, by type).
pub fn example_args(schema: &Value) -> Value {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return json!({});
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out = Map::new();
    for (name, prop) in props {
        if !required.contains(&name.as_str()) && !required.is_empty() {
            continue;
        }
        out.insert(name.clone(), example_value(prop));
    }
    Value::Object(out)
}

fn example_value(prop: &Value) -> Value {
    if let Some(v) = prop
        .get("default")
        .or_else(|| prop.get("examples").and_then(|e| e.get(0)))
    {
        return v.clone();
    }
    if let Some(first) = prop.get("enum").and_then(|e| e.get(0)) {
        return first.clone();
    }
    let kind = match prop.get("type") {
        Some(Value::Array(types)) => types.iter().find_map(Value::as_str).unwrap_or("string"),
        Some(Value::String(t)) => t.as_str(),
        _ => "string",
    };
    match kind {
        "integer" => json!(prop.get("minimum").and_then(Value::as_i64).unwrap_or(1)),
        "number" => json!(prop.get("minimum").and_then(Value::as_f64).unwrap_or(1.0)),
        "boolean" => json!(true),
        "array" => json!([]),
        "object" => example_args(prop),
        "null" => Value::Null,
        _ => json!("example"),
    }
}

fn invoke_body_example(row: &Row) -> Value {
    match &row.args_schema {
        Some(schema) => json!({ "key": row.key, "args": example_args(schema) }),
        None => json!({ "key": row.key }),
    }
}

fn troubleshooting(row: &Row) -> Vec<Value> {
    let mut rows = vec![
        json!({"status": 404, "cause": "the key is unknown or was deleted", "fix": "ask again: GET /api/dispatch?ask=..."}),
        json!({"status": 422, "cause": "the arguments do not match args_schema; nothing ran", "fix": "compare with args_example; the error lists each violation by JSON pointer"}),
        json!({"status": 403, "cause": "the row is disabled", "fix": "an operator must enable it (POST /api/directory)"}),
        json!({"status": 503, "cause": "the cluster could not commit the receipt", "fix": "retry after Retry-After seconds"}),
    ];
    if row.auth == Auth::Key {
        rows.insert(0, json!({"status": 401, "cause": "no or unknown credential", "fix": "send Authorization: Bearer <invoke key>"}));
    }
    rows
}

pub(crate) fn contract_json(row: &Row, base: &str) -> Value {
    let docs = row.docs();
    let key = &row.key;
    let mut headers = json!({ "Content-Type": "application/json" });
    if row.auth == Auth::Key {
        headers["Authorization"] = json!("Bearer <invoke key>");
    }
    let mut contract = json!({
        "key": key,
        "what": docs.what(),
        "type": row.kind,
        "category": row.category,
        "auth": row.auth,
        "risk": row.risk,
        "enabled": row.enabled,
        "version": row.version,
        "updated_at": row.updated_at,
        "invoke": {
            "method": "POST",
            "url": format!("{base}/api/dispatch"),
            "headers": headers,
            "body": invoke_body_example(row),
        },
        "troubleshooting": troubleshooting(row),
        "ledger": format!("{base}/api/receipts?key={key}"),
        "repair": format!("{base}/api/directory/{key}"),
    });
    let fields: Map<String, Value> = docs
        .fields
        .iter()
        .filter(|(f, _)| *f != "WHAT")
        .map(|(f, v)| (f.to_ascii_lowercase(), json!(v)))
        .collect();
    if !fields.is_empty() {
        contract["docs"] = Value::Object(fields);
    }
    if let Some(schema) = &row.args_schema {
        contract["args_schema"] = schema.clone();
        contract["args_example"] = example_args(schema);
    }
    if row.auth == Auth::Public {
        contract["run_now"] = json!(format!("{base}/api/dispatch?invoke={key}"));
    }
    contract
}

fn contract_markdown(row: &Row, base: &str) -> String {
    let docs = row.docs();
    let key = &row.key;
    let mut md = String::new();
    let _ = writeln!(md, "# {key}\n\n{}\n", docs.what());
    let _ = writeln!(
        md,
        "- type: {} · category: {} · auth: {} · risk: {} · version: {}{}",
        row.kind,
        if row.category.is_empty() {
            "-"
        } else {
            &row.category
        },
        row.auth.as_str(),
        row.risk.as_str(),
        row.version,
        if row.enabled { "" } else { " · DISABLED" },
    );
    for (field, value) in docs.fields.iter().filter(|(f, _)| *f != "WHAT") {
        let _ = writeln!(md, "- {}: {value}", field.to_ascii_lowercase());
    }
    let _ = writeln!(
        md,
        "\n## Invoke\n\n`POST {base}/api/dispatch`{}\n",
        if row.auth == Auth::Key {
            " with `Authorization: Bearer <invoke key>`"
        } else {
            ""
        }
    );
    let _ = writeln!(md, "```json\n{}\n```", invoke_body_example(row));
    if row.auth == Auth::Public {
        let _ = writeln!(md, "\nOr run now: `GET {base}/api/dispatch?invoke={key}`");
    }
    if let Some(schema) = &row.args_schema {
        let _ = writeln!(md, "\n## Arguments (JSON Schema)\n\n```json\n{schema}\n```");
    }
    let _ = writeln!(
        md,
        "\n## Troubleshooting\n\n| status | cause | fix |\n|---|---|---|"
    );
    for t in troubleshooting(row) {
        let _ = writeln!(
            md,
            "| {} | {} | {} |",
            t["status"],
            t["cause"].as_str().unwrap_or(""),
            t["fix"].as_str().unwrap_or("")
        );
    }
    let _ = writeln!(
        md,
        "\nLedger: {base}/api/receipts?key={key} · Repair: {base}/api/directory/{key}"
    );
    md
}

async fn invoke_row(
    app: &App,
    headers: &HeaderMap,
    base: &str,
    key: &str,
    input: InvokeInput,
    share: Option<&str>,
) -> Result<Response, ApiError> {
    // A share token stands in for an invoke key, for its one row; a bad one is a 401 with
    // the reason even where no credential is needed.
    let caller = match share {
        Some(token) => {
            let grant = share::verify_for(app, token, key)?;
            Some(Principal {
                name: format!("share:{}", grant.id),
                scope: Scope::Invoke,
            })
        }
        None => principal(app, headers)?,
    };
    let invocation = invoke_key(app, caller, Scope::Invoke, base, key, input).await?;
    let mut response = (invocation.status, Json(invocation.body)).into_response();
    if let Some(index) = invocation.committed_index {
        response
            .headers_mut()
            .insert(INDEX_HEADER, HeaderValue::from(index));
    }
    Ok(response)
}

/// Gives a `key`-auth best candidate a `run_now` link with a share token when the asker
/// presented an admin or invoke credential (so could run it anyway). Without a quorum to
/// create the cluster's first secret, the link is left out.
async fn share_run_now(app: &App, headers: &HeaderMap, base: &str, best: &mut Best) {
    let allowed = principal(app, headers)
        .ok()
        .flatten()
        .is_some_and(|p| p.allows(Scope::Invoke));
    let key_auth = app
        .catalogue
        .read()
        .get(&best.key)
        .is_some_and(|row| row.auth == Auth::Key);
    if best.run_now.is_some() || !allowed || !key_auth {
        return;
    }
    let secret = match share::ensure_secret(app).await {
        Ok(secret) => secret,
        Err(e) => {
            tracing::warn!(error = %e, "no share secret; run_now left out");
            return;
        }
    };
    let expires = share::now_secs() + app.config.share.link_ttl_secs;
    let token = secret.mint(&share::new_token_id(), &best.key, expires);
    let key = &best.key;
    best.run_now = Some(format!("{base}/api/dispatch?invoke={key}&share={token}"));
    best.r#do = format!(
        "GET run_now (its share token expires at {}), or POST {{\"key\":\"{key}\"}} to /api/dispatch with Authorization: Bearer <invoke key>",
        crate::store::state_machine::format_ms(expires * 1000)
    );
}

/// A finished invocation as it is answered: over HTTP as status and body, over MCP as a
/// tool result (`isError` when `ok` is false).
#[derive(Debug)]
pub(crate) struct Invocation {
    /// 200, or the status of the runner's failure.
    pub status: StatusCode,
    /// `{ok, key, result | error, proof}`.
    pub body: Value,
    /// The receipt's log index when it is committed (not while it waits in the outbox).
    pub committed_index: Option<u64>,
}

/// Runs row `key` for the holder of `caller`, the one invocation path of HTTP and MCP:
/// the same auth rule, argument validation and receipt. `scope` is the credential that
/// lets its holder run `auth: key` rows on the calling interface (invoke keys over HTTP,
/// MCP tokens over MCP); the admin key always does.
pub(crate) async fn invoke_key(
    app: &App,
    caller: Option<Principal>,
    scope: Scope,
    base: &str,
    key: &str,
    input: InvokeInput,
) -> Result<Invocation, ApiError> {
    let row = find_row(app, key)?;
    let caller = match (row.auth, caller) {
        (_, Some(p)) if p.allows(scope) => p.name,
        (Auth::Public, _) => "public".to_owned(),
        (Auth::Key, None) => {
            return Err(ApiError::Unauthorized {
                needed: "an invoke key",
            })
        }
        (Auth::Key, Some(p)) => {
            return Err(ApiError::Forbidden {
                name: p.name,
                action: "invoke key-auth rows",
            })
        }
    };
    let invoked = run::invoke(app, row, input, caller).await?;
    Ok(invocation(key, base, invoked))
}

fn invocation(key: &str, base: &str, invoked: Invoked) -> Invocation {
    let Invoked {
        receipt,
        result,
        error,
        status: proof_status,
    } = invoked;
    let id = &receipt.id;
    let mut proof = json!({
        "invocation_id": id,
        "index": receipt.index,
        "status": proof_status.as_str(),
        "receipt": format!("{base}/api/receipts/{id}"),
        "confirm": format!("{base}/api/dispatch?confirm={id}"),
        "public_receipt": format!("{base}/receipt/{id}"),
    });
    if proof_status == ProofStatus::Pending {
        // Not in the log yet: no index; it confirms on this node now, everywhere after healing.
        if let Some(map) = proof.as_object_mut() {
            map.remove("index");
        }
    }
    let (status, body) = match error {
        None => (
            StatusCode::OK,
            json!({ "ok": true, "key": key, "result": result, "proof": proof }),
        ),
        Some(e) => {
            let (status, code) = run_error_parts(&e);
            (
                status,
                json!({ "ok": false, "key": key,
                        "error": { "code": code, "message": e.to_string(), "hint": "the receipt records this failure; see the contract for the arguments" },
                        "proof": proof }),
            )
        }
    };
    Invocation {
        status,
        body,
        committed_index: (proof_status == ProofStatus::Committed).then_some(receipt.index),
    }
}

fn confirm(app: &App, id: &str) -> Result<Response, ApiError> {
    let unknown = || {
        (
            StatusCode::NOT_FOUND,
            Json(json!({ "confirmed": false, "id": id })),
        )
            .into_response()
    };
    if !valid_receipt_id(id) {
        return Ok(unknown());
    }
    match run::find_receipt(app, id).map_err(ApiError::internal)? {
        Some((receipt, ProofStatus::Committed)) => {
            Ok(Json(Confirmation::from(&receipt)).into_response())
        }
        // Ran here while the cluster had no quorum: durable in this node's outbox.
        Some((receipt, ProofStatus::Pending)) => {
            let mut confirmation =
                serde_json::to_value(Confirmation::from(&receipt)).map_err(ApiError::internal)?;
            confirmation["status"] = json!("pending");
            if let Some(map) = confirmation.as_object_mut() {
                map.remove("index");
            }
            Ok(Json(confirmation).into_response())
        }
        None => Ok(unknown()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_args_satisfy_their_schema() {
        let schema = json!({"type": "object", "properties": {
            "name": {"type": "string"}, "count": {"type": "integer", "minimum": 3},
            "mode": {"enum": ["fast", "slow"]}, "tags": {"type": "array"}, "opt": {"type": "boolean"}},
            "required": ["name", "count", "mode", "tags"]});
        let example = example_args(&schema);
        assert!(
            run::schema_violations(&schema, &example).is_empty(),
            "{example}"
        );
        assert!(example.get("opt").is_none());
    }
}
