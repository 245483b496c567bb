//! Dispatch, the four calls of the protocol: ask (ranked candidates), contract (what one row
//! does and how to call it), invoke (run it: auth, arguments, receipt) and confirm (check a
//! receipt without a credential).

use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde_json::{json, Map, Value};
use utoipa::ToSchema;

use super::error::{run_error_parts, ErrorDetail, ErrorKind, ServiceError};
use super::quota::{Caller, Payer, Quota};
use super::view::Viewer;
use super::{identify, read_barrier, Freshness};
use crate::app::App;
use crate::auth::{Principal, Scope};
use crate::catalogue::resolver::Fusion;
use crate::catalogue::row::{Auth, Risk, Row};
use crate::dispatch::{self as run, share, InvokeInput, InvokeRefusal, Invoked, ProofStatus};
use crate::model::receipt::{valid_receipt_id, Confirmation};
use crate::model::share::{new_token_id, now_secs};

/// Candidates an ask returns unless told otherwise.
pub const DEFAULT_LIMIT: usize = 5;
/// Most candidates an ask returns.
pub const MAX_LIMIT: usize = 50;
/// The `why` of a candidate no word of the ask matched, found by its embedding.
pub const SIMILAR_MEANING: &str = "similar meaning";
/// Before a word of the ask that earlier asks leading to the row taught the resolver.
pub const LEARNED: &str = "learned: ";
/// The longest ask, in bytes: a request an agent writes fits with room to spare, and the
/// resolver's work stays bounded whatever arrives.
pub const MAX_ASK_BYTES: usize = 1024;

/// Whether row `row` may run by GET (a `run_now` link): only rows that change nothing, since
/// link unfurlers, prefetchers and `<img>` tags follow links without asking anyone.
pub fn runs_by_get(row: &Row) -> bool {
    row.risk == Risk::Read
}

/// One ranked candidate.
#[derive(Debug, Serialize, ToSchema)]
pub struct Candidate {
    /// The row's key.
    pub key: String,
    /// Its score (rounded to two decimals).
    pub score: f64,
    /// Its WHAT line.
    pub what: String,
    /// The query terms that matched, `learned: <word>` for a word earlier asks that led to
    /// this row taught the resolver, or "similar meaning" for a row found by its embedding
    /// alone.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub why: Vec<String>,
}

/// The best candidate, with what to do next.
#[derive(Debug, Serialize, ToSchema)]
pub struct Best {
    /// The row's key.
    pub key: String,
    /// Its score.
    pub score: f64,
    /// The address of its contract.
    pub contract: String,
    /// A link that runs it by GET: public rows, or with a share token for a caller who
    /// could run it anyway.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_now: Option<String>,
    /// One line saying how to run it.
    pub r#do: String,
}

/// The answer to an ask.
#[derive(Debug, Serialize, ToSchema)]
pub struct AskAnswer {
    /// The request as asked.
    pub ask: String,
    /// How many candidates follow.
    pub count: usize,
    /// The index this node had applied when it answered.
    pub index: u64,
    /// The first candidate, with what to do next.
    pub best: Option<Best>,
    /// Ranked candidates; weak matches are cut, not padded.
    pub candidates: Vec<Candidate>,
    /// Said when nothing matched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<&'static str>,
}

/// How an ask is ranked (`mode=` of `GET /api/dispatch?ask=`), for comparing the two
/// halves of the resolver side by side (`rowcall eval`). Agents leave it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ranking {
    /// Words and meaning when the node has a model, words alone otherwise.
    #[default]
    Auto,
    /// Words alone (BM25F).
    Lexical,
    /// Meaning alone (cosine of embeddings); needs a model.
    Dense,
    /// Words and meaning; needs a model.
    Fused,
}

impl std::str::FromStr for Ranking {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "" | "auto" => Ok(Self::Auto),
            "lexical" => Ok(Self::Lexical),
            "dense" => Ok(Self::Dense),
            "fused" => Ok(Self::Fused),
            other => Err(format!(
                "mode {other:?} is not one of: auto, lexical, dense, fused"
            )),
        }
    }
}

/// Ranked candidates for `ask` (at most `limit`, default 5, at most 50), after the read
/// barrier. A caller holding an invoke or admin credential gets a `run_now` link with a share
/// token on a `key`-auth best candidate.
pub async fn ask(
    app: &App,
    freshness: &Freshness,
    caller: Caller<'_>,
    base: &str,
    ask: &str,
    limit: Option<usize>,
    ranking: Ranking,
) -> Result<AskAnswer, ServiceError> {
    app.spending
        .spend(Quota::Ask, &caller.payer(&app.credentials))?;
    let credential = caller.credential;
    read_barrier(app, freshness).await?;
    let limit = limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    let mut answer = rank(app, base, ask, limit, ranking).await?;
    if app.config.resolver.learn && ranking == Ranking::Auto {
        // The caller as an invocation will name it: a credential's name, else `public`.
        let caller = match identify(app, credential) {
            Ok(Some(principal)) => principal.name,
            _ => "public".to_owned(),
        };
        app.asks.asked(
            &caller,
            ask,
            answer.candidates.iter().map(|c| c.key.as_str()),
        );
    }
    if let Some(best) = answer.best.as_mut() {
        share_run_now(app, credential, base, best).await;
    }
    Ok(answer)
}

/// The row `key`, or 404.
pub fn find_row(app: &App, key: &str) -> Result<Arc<Row>, ServiceError> {
    app.catalogue.read().get(key).ok_or_else(|| no_row(key))
}

/// The row `key` if `viewer` may read its contract, else the same 404 as for no row.
pub fn readable_row(app: &App, viewer: &Viewer, key: &str) -> Result<Arc<Row>, ServiceError> {
    let row = find_row(app, key)?;
    if viewer.contract(&row) {
        Ok(row)
    } else {
        Err(no_row(key))
    }
}

/// The 404 of a row that is not there, or that the caller may not know is.
pub fn no_row(key: &str) -> ServiceError {
    ServiceError::NotFound(format!("no row with key {key:?}"))
}

fn round(score: f32) -> f64 {
    (f64::from(score) * 100.0).round() / 100.0
}

/// The vector of `ask` under the node's model, computed off the async threads; `None`
/// without a model or for [`Ranking::Lexical`]. A model that fails on one ask (it should
/// not) leaves that ask to the words, with an error in the log.
async fn ask_vector(
    app: &App,
    ask: &str,
    ranking: Ranking,
) -> Result<Option<Arc<[f32]>>, ServiceError> {
    let semantic = app.catalogue.read().semantic().cloned();
    let Some(semantic) = semantic else {
        return match ranking {
            Ranking::Dense | Ranking::Fused => Err(ServiceError::BadRequest {
                message: format!(
                    "mode {} needs a model, and this node ranks by words alone",
                    if ranking == Ranking::Dense {
                        "dense"
                    } else {
                        "fused"
                    }
                ),
                hint:
                    "configure [resolver] model (see GET /api/cluster, resolver), or leave mode out",
            }),
            _ => Ok(None),
        };
    };
    if ranking == Ranking::Lexical {
        return Ok(None);
    }
    let started = Instant::now();
    let embedded = semantic.embed_ask(ask).await;
    metrics::histogram!(crate::metrics::QUERY_EMBED_SECONDS)
        .record(started.elapsed().as_secs_f64());
    match embedded {
        Ok(v) => Ok(Some(v)),
        Err(error) => {
            tracing::error!(%error, "embedding an ask failed; ranking it by words alone");
            Ok(None)
        }
    }
}

/// Ranks the catalogue for `ask`: the answer without a read barrier or share links (the MCP
/// search tool's). An ask longer than [`MAX_ASK_BYTES`] is refused.
pub async fn rank(
    app: &App,
    base: &str,
    ask: &str,
    limit: usize,
    ranking: Ranking,
) -> Result<AskAnswer, ServiceError> {
    if ask.len() > MAX_ASK_BYTES {
        return Err(ServiceError::BadRequest {
            message: format!(
                "the ask is {} bytes long; at most {MAX_ASK_BYTES}",
                ask.len()
            ),
            hint: "say what you need in a sentence or two",
        });
    }
    let vector = ask_vector(app, ask, ranking).await?;
    let started = Instant::now();
    let dense_only = Fusion::dense_only();
    let fusion = (ranking == Ranking::Dense).then_some(&dense_only);
    let (hits, index) = {
        let catalogue = app.catalogue.read();
        (
            catalogue.ask_fused(ask, vector.as_deref(), limit, fusion),
            app.applied_index(),
        )
    };
    metrics::histogram!(crate::metrics::ASK_SECONDS).record(started.elapsed().as_secs_f64());
    app.activity.ask();
    let best = hits.first().map(|(hit, row)| {
        let key = &row.key;
        let run_now = (row.auth == Auth::Public && runs_by_get(row))
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
            why: if hit.similar {
                vec![SIMILAR_MEANING.to_owned()]
            } else {
                hit.matched
                    .iter()
                    .cloned()
                    .chain(hit.learned.iter().map(|w| format!("{LEARNED}{w}")))
                    .collect()
            },
        })
        .collect();
    Ok(AskAnswer {
        ask: ask.to_owned(),
        count: candidates.len(),
        index,
        hint: candidates
            .is_empty()
            .then_some("nothing matched well; try other words, or browse GET /api/directory"),
        best,
        candidates,
    })
}

impl AskAnswer {
    /// Whether the answer carries a share token (a `run_now` link with `share=`): such an
    /// answer must not be cached by anyone.
    pub fn carries_token(&self) -> bool {
        self.best
            .as_ref()
            .and_then(|b| b.run_now.as_deref())
            .is_some_and(|link| link.contains("&share="))
    }
}

/// A contract as answered: JSON for programs, Markdown for models.
#[derive(Debug, Clone)]
pub enum Contract {
    /// `format=json` (the default).
    Json(Value),
    /// `format=markdown`.
    Markdown(String),
}

/// The contract of row `key` in `format` (`json`, the default, or `markdown`), after the
/// read barrier; 404 to a `viewer` who may not read it (a hidden row's, to a stranger: see
/// [`Viewer::contract`]).
pub async fn contract(
    app: &App,
    freshness: &Freshness,
    viewer: &Viewer,
    base: &str,
    key: &str,
    format: Option<&str>,
) -> Result<Contract, ServiceError> {
    read_barrier(app, freshness).await?;
    let row = readable_row(app, viewer, key)?;
    match format {
        Some("markdown") | Some("md") => Ok(Contract::Markdown(contract_markdown(&row, base))),
        None | Some("json") => {
            let mut contract = contract_json(&row, base);
            contract["resolver"] = resolver_note(app, &row.key);
            Ok(Contract::Json(contract))
        }
        Some(other) => Err(ServiceError::BadRequest {
            message: format!("unknown format {other:?}"),
            hint: "format=markdown or format=json",
        }),
    }
}

/// How this node finds the row: by its words (`lexical`), or by words and meaning
/// (`hybrid`, with whether the row's vector is there yet).
fn resolver_note(app: &App, key: &str) -> Value {
    let catalogue = app.catalogue.read();
    match catalogue.semantic() {
        None => json!({ "mode": "lexical" }),
        Some(semantic) => json!({
            "mode": "hybrid",
            "model": semantic.embedder().info().name,
            "embedded": catalogue.has_vector(key),
        }),
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

/// The JSON contract of `row`, its links under `base`.
pub fn contract_json(row: &Row, base: &str) -> Value {
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
        contract["args_schema"] = (**schema).clone();
        contract["args_example"] = example_args(schema);
    }
    if row.auth == Auth::Public && runs_by_get(row) {
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
    if row.auth == Auth::Public && runs_by_get(row) {
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

/// Runs row `key` for whoever holds `credential` or the share token `share` (a share token
/// stands in for an invoke key, for its one row; a bad one is a 401 with the reason even
/// where no credential is needed). A session that just wrote the row runs the version it
/// wrote: the read barrier comes first.
pub async fn invoke(
    app: &App,
    freshness: &Freshness,
    caller: Caller<'_>,
    share: Option<&str>,
    base: &str,
    key: &str,
    input: InvokeInput,
) -> Result<Invocation, ServiceError> {
    // Before the share token is checked: guessing at tokens spends the quota too. A share
    // token is no credential of its own: its holder pays as its address.
    app.spending
        .spend(Quota::Invoke, &caller.payer(&app.credentials))?;
    let credential = caller.credential;
    read_barrier(app, freshness).await?;
    let (caller, viewer) = match share {
        Some(token) => {
            let grant = share::verify_for(app, token, key)?;
            let caller = Principal {
                name: format!("share:{}", grant.id),
                scope: Scope::Invoke,
            };
            let viewer = Viewer::Share {
                key: key.to_owned(),
            };
            (Some(caller), viewer)
        }
        None => {
            let caller = identify(app, credential)?;
            let viewer = Viewer::of_principal(caller.as_ref());
            (caller, viewer)
        }
    };
    run(app, caller, &viewer, Scope::Invoke, base, key, input).await
}

/// Gives a `key`-auth best candidate a `run_now` link with a share token when the asker
/// presented an admin or invoke credential (so could run it anyway). Without a quorum to
/// create the cluster's first secret, the link is left out.
async fn share_run_now(app: &App, credential: Option<&str>, base: &str, best: &mut Best) {
    let allowed = identify(app, credential)
        .ok()
        .flatten()
        .is_some_and(|p| p.allows(Scope::Invoke));
    // A link is followed by GET, which runs only rows that change nothing.
    let key_auth = app
        .catalogue
        .read()
        .get(&best.key)
        .is_some_and(|row| row.auth == Auth::Key && runs_by_get(&row));
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
    let expires = now_secs() + app.config.share.link_ttl_secs;
    let token = secret.mint(&new_token_id(), &best.key, expires);
    let key = &best.key;
    best.run_now = Some(format!("{base}/api/dispatch?invoke={key}&share={token}"));
    best.r#do = format!(
        "GET run_now (its share token expires at {}), or POST {{\"key\":\"{key}\"}} to /api/dispatch with Authorization: Bearer <invoke key>",
        crate::model::time::format_ms(expires * 1000)
    );
}

/// The proof of an invocation: where its receipt is and how to check it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Proof {
    /// The receipt id (`inv_…`).
    pub invocation_id: String,
    /// The receipt's log index; absent while it waits in the outbox.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
    /// `committed`, or `pending` (in this node's outbox until the cluster heals).
    pub status: &'static str,
    /// The forensic receipt (admin key).
    pub receipt: String,
    /// The keyless check.
    pub confirm: String,
    /// The public brochure page.
    pub public_receipt: String,
}

/// The answer to an invocation: `{ok, key, result | error, proof}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InvokeAnswer {
    /// Whether the row ran successfully.
    pub ok: bool,
    /// The row.
    pub key: String,
    /// What it returned (when `ok`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why it failed (when not `ok`); the receipt records the failure too.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
    /// The receipt.
    pub proof: Proof,
}

/// A finished invocation, successful or not: over HTTP a status and the answer, over MCP a
/// tool result (`isError` when it failed).
#[derive(Debug, Clone)]
pub struct Invocation {
    /// `{ok, key, result | error, proof}`.
    pub answer: InvokeAnswer,
    /// The class of the runner's failure, when it failed.
    pub failure: Option<ErrorKind>,
    /// The receipt's log index when it is committed (not while it waits in the outbox).
    pub committed_index: Option<u64>,
    /// The row changes nothing (`risk: read`): a caller may send its calls to two nodes at
    /// once ([`InvokeInput::repeatable`]).
    pub repeatable: bool,
}

/// Runs row `key` for the holder of `caller`, the one invocation path of every front end:
/// the same auth rule, argument validation and receipt. `scope` is the credential that lets
/// its holder run `auth: key` rows on the calling interface (invoke keys over HTTP and gRPC,
/// MCP tokens over MCP); the admin key always does.
///
/// The invocation spends the invoke quota of `caller` (of `peer` without one) first.
pub async fn invoke_as(
    app: &App,
    caller: Option<Principal>,
    peer: Option<IpAddr>,
    scope: Scope,
    base: &str,
    key: &str,
    input: InvokeInput,
) -> Result<Invocation, ServiceError> {
    app.spending
        .spend(Quota::Invoke, &Payer::of_principal(caller.as_ref(), peer))?;
    run_as(app, caller, scope, base, key, input).await
}

/// [`invoke_as`] once the quota is spent.
async fn run_as(
    app: &App,
    caller: Option<Principal>,
    scope: Scope,
    base: &str,
    key: &str,
    input: InvokeInput,
) -> Result<Invocation, ServiceError> {
    let viewer = Viewer::of_principal(caller.as_ref());
    run(app, caller, &viewer, scope, base, key, input).await
}

/// [`invoke_as`], its failure told as `viewer` may see it.
async fn run(
    app: &App,
    caller: Option<Principal>,
    viewer: &Viewer,
    scope: Scope,
    base: &str,
    key: &str,
    input: InvokeInput,
) -> Result<Invocation, ServiceError> {
    let row = find_row(app, key)?;
    if input.repeatable && !runs_by_get(&row) {
        return Err(InvokeRefusal::NotRepeatable {
            key: key.to_owned(),
            risk: row.risk.as_str(),
        }
        .into());
    }
    let repeatable = runs_by_get(&row);
    // Only a named credential is told why an upstream failed (see `Viewer::run_detail`);
    // anyone else's answer is generic and the details stay in the receipt and the log.
    let reveal = viewer.run_detail();
    let caller = match (row.auth, caller) {
        (_, Some(p)) if p.allows(scope) => p.name,
        (Auth::Public, _) => "public".to_owned(),
        (Auth::Key, None) => {
            return Err(ServiceError::Unauthorized {
                needed: "an invoke key",
            })
        }
        (Auth::Key, Some(p)) => {
            return Err(ServiceError::Forbidden {
                name: p.name,
                action: "invoke key-auth rows",
            })
        }
    };
    // Every invocation leaves a receipt: none runs while a member is short of space.
    crate::cluster::space::refuse_growth(app)?;
    // Runners hold upstream connections and memory: past the limit, answer at once rather
    // than queue (the caller retries, or another node serves it).
    let _slot = app.invocation_slots.try_acquire().map_err(|_| {
        metrics::counter!(crate::metrics::BUSY_TOTAL, "what" => "invocations").increment(1);
        ServiceError::Busy {
            what: "invocations",
            limit: app.config.limits.max_concurrent_invocations,
        }
    })?;
    let invoked = run::invoke(app, row, input, caller).await?;
    Ok(invocation(key, base, invoked, reveal, repeatable))
}

fn invocation(
    key: &str,
    base: &str,
    invoked: Invoked,
    reveal: bool,
    repeatable: bool,
) -> Invocation {
    let Invoked {
        receipt,
        result,
        error,
        status,
    } = invoked;
    let id = &receipt.id;
    // Not in the log yet when pending: no index; it confirms on this node now, everywhere
    // after healing.
    let committed_index = (status == ProofStatus::Committed).then_some(receipt.index);
    let proof = Proof {
        invocation_id: id.clone(),
        index: committed_index,
        status: status.as_str(),
        receipt: format!("{base}/api/receipts/{id}"),
        confirm: format!("{base}/api/dispatch?confirm={id}"),
        public_receipt: format!("{base}/receipt/{id}"),
    };
    let (failure, error) = match error {
        None => (None, None),
        Some(e) => {
            let (kind, code) = run_error_parts(&e);
            // Argument errors are about the caller's own input: always said.
            let message = if reveal || kind == ErrorKind::Invalid {
                e.to_string()
            } else {
                tracing::info!(key, receipt = %id, error = %e, "invocation failed (details withheld from the caller)");
                generic_run_message(kind).to_owned()
            };
            let detail = ErrorDetail {
                code,
                message,
                hint: "the receipt records this failure; see the contract for the arguments",
                request_id: None,
                violations: Vec::new(),
            };
            (Some(kind), Some(detail))
        }
    };
    Invocation {
        answer: InvokeAnswer {
            ok: failure.is_none(),
            key: key.to_owned(),
            result,
            error,
            proof,
        },
        failure,
        committed_index,
        repeatable,
    }
}

/// What a caller without a named credential is told of a failed invocation: the class of the failure, not
/// the upstream's answer or the addresses the node resolved.
fn generic_run_message(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::PermissionDenied => "the row's destination is not allowed",
        ErrorKind::GatewayTimeout => "the upstream did not answer in time",
        ErrorKind::BadGateway => "the upstream failed",
        _ => "the invocation failed",
    }
}

/// The public fields of receipt `id`, without a credential: committed receipts on every
/// node, and one still in this node's outbox (`status: pending`, no index). `None` for an
/// unknown id (or one that is not an id at all).
pub async fn confirm(
    app: &App,
    freshness: &Freshness,
    id: &str,
) -> Result<Option<Confirmation>, ServiceError> {
    read_barrier(app, freshness).await?;
    if !valid_receipt_id(id) {
        return Ok(None);
    }
    Ok(
        match run::find_receipt(app, id).map_err(ServiceError::internal)? {
            Some((receipt, ProofStatus::Committed)) => Some(Confirmation {
                proof: inclusion(app, &receipt.id).await,
                ..Confirmation::from(&receipt)
            }),
            // Ran here while the cluster had no quorum: durable in this node's outbox.
            Some((receipt, ProofStatus::Pending)) => Some(Confirmation {
                index: None,
                status: Some("pending".to_owned()),
                ..Confirmation::from(&receipt)
            }),
            None => None,
        },
    )
}

/// The receipt's inclusion proof against the latest co-signed checkpoint, when one covers
/// it (a confirmation answers without it otherwise: the receipt is committed all the same).
async fn inclusion(app: &App, id: &str) -> Option<super::transparency::InclusionProof> {
    match super::transparency::prove(app, &Freshness::default(), id, None).await {
        Ok(proof) => Some(proof),
        Err(ServiceError::NotCheckpointed(_) | ServiceError::NotFound(_)) => None,
        Err(e) => {
            tracing::warn!(error = %e, id, "no inclusion proof for a confirmation");
            None
        }
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
