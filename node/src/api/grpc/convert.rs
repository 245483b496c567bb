//! Conversions between the service layer's answers and `rowcall.v1` messages, one `From`
//! per type, so that no handler builds a message field by field.

use std::sync::Arc;

use rowcall_proto::json;
use rowcall_proto::v1;
use serde_json::{Map, Value};

use crate::catalogue::embed::{ModelInfo, QueryMode};
use crate::catalogue::feed::ChangeOp;
use crate::catalogue::row::Row;
use crate::catalogue::Counts;
use crate::cluster::ranking::RankingSetup;
use crate::model::receipt::{Confirmation, Receipt};
use crate::raft::PutOutcome;
use crate::service::cluster::{Member, ResolverStatus, Status};
use crate::service::dispatch::{AskAnswer, Best, Candidate, Invocation, Proof};
use crate::service::feed::FeedEvent;
use crate::service::view::{Sight, Viewer};
use crate::service::ErrorDetail;

/// A JSON schema or argument object as a `Struct`; anything but an object has no `Struct`
/// form (the node never stores a non-object schema for a projected row).
fn object(value: Value) -> Option<rowcall_proto::prost_types::Struct> {
    match value {
        Value::Object(map) => Some(json::to_struct(map)),
        _ => None,
    }
}

impl From<&Row> for v1::Row {
    fn from(row: &Row) -> Self {
        Self {
            key: row.key.clone(),
            r#type: row.kind.as_str().to_owned(),
            target: row.target.clone(),
            category: row.category.clone(),
            content: row.content.clone(),
            args_schema: row.args_schema.as_deref().cloned().and_then(object),
            auth: row.auth.as_str().to_owned(),
            risk: row.risk.as_str().to_owned(),
            enabled: row.enabled,
            planner_visible: row.planner_visible,
            pins: row.pins.clone(),
            demote: row.demote,
            version: row.version,
            created_at: row.created_at.to_string(),
            updated_at: row.updated_at.to_string(),
        }
    }
}

/// A row to write as the JSON object the service checks: only the fields the caller set,
/// so defaults and every rule apply exactly as to a row posted over HTTP.
pub fn row_input(input: v1::RowInput) -> Value {
    let mut row = Map::new();
    row.insert("key".into(), Value::String(input.key));
    row.insert("type".into(), Value::String(input.r#type));
    let texts = [
        ("target", input.target),
        ("category", input.category),
        ("content", input.content),
        ("auth", input.auth),
        ("risk", input.risk),
    ];
    for (field, value) in texts {
        if let Some(value) = value {
            row.insert(field.into(), Value::String(value));
        }
    }
    if let Some(schema) = input.args_schema {
        row.insert(
            "args_schema".into(),
            Value::Object(json::from_struct(schema)),
        );
    }
    let flags = [
        ("enabled", input.enabled),
        ("planner_visible", input.planner_visible),
        ("demote", input.demote),
    ];
    for (field, value) in flags {
        if let Some(value) = value {
            row.insert(field.into(), Value::Bool(value));
        }
    }
    if !input.pins.is_empty() {
        row.insert("pins".into(), input.pins.into());
    }
    if let Some(version) = input.if_version {
        row.insert("if_version".into(), version.into());
    }
    Value::Object(row)
}

impl From<Receipt> for v1::Receipt {
    fn from(r: Receipt) -> Self {
        Self {
            id: r.id,
            key: r.key,
            row_version: r.row_version,
            caller: r.caller,
            input_sha256: r.input_sha256,
            output_sha256: r.output_sha256,
            ok: r.ok,
            error: r.error,
            started_at: r.started_at,
            duration_ms: r.duration_ms,
            served_by: r.served_by,
            request_id: r.request_id,
            asked: r.asked,
            called: r.called,
            upstream_status: r.upstream_status,
            input: r.input,
            output: r.output,
            input_truncated: r.input_truncated,
            output_truncated: r.output_truncated,
            store_cap_bytes: r.store_cap_bytes,
            index: r.index,
        }
    }
}

impl From<Counts> for v1::Counts {
    fn from(c: Counts) -> Self {
        Self {
            rows_total: c.rows_total,
            enabled: c.enabled,
            planner_visible: c.planner_visible,
            mcp_projected: c.mcp_projected,
        }
    }
}

impl From<Confirmation> for v1::ConfirmResponse {
    fn from(c: Confirmation) -> Self {
        Self {
            confirmed: c.confirmed,
            id: c.id,
            key: c.key,
            at: c.at,
            ok: c.ok,
            input_sha256: c.input_sha256,
            output_sha256: c.output_sha256,
            index: c.index,
            status: c.status.unwrap_or_default(),
            proof: c.proof.map(Into::into),
        }
    }
}

impl From<Best> for v1::Best {
    fn from(b: Best) -> Self {
        Self {
            key: b.key,
            score: b.score,
            contract: b.contract,
            run_now: b.run_now.unwrap_or_default(),
            r#do: b.r#do,
        }
    }
}

impl From<Candidate> for v1::Candidate {
    fn from(c: Candidate) -> Self {
        Self {
            key: c.key,
            score: c.score,
            what: c.what,
            why: c.why,
        }
    }
}

impl From<AskAnswer> for v1::AskResponse {
    fn from(a: AskAnswer) -> Self {
        Self {
            ask: a.ask,
            count: u32::try_from(a.count).unwrap_or(u32::MAX),
            index: a.index,
            best: a.best.map(Into::into),
            candidates: a.candidates.into_iter().map(Into::into).collect(),
            hint: a.hint.unwrap_or_default().to_owned(),
        }
    }
}

impl From<ErrorDetail> for v1::ErrorDetail {
    fn from(e: ErrorDetail) -> Self {
        Self {
            code: e.code.to_owned(),
            message: e.message,
            hint: e.hint.to_owned(),
            request_id: e.request_id.unwrap_or_default(),
            violations: e
                .violations
                .into_iter()
                .map(|v| v1::Violation {
                    pointer: v.pointer,
                    message: v.message,
                })
                .collect(),
        }
    }
}

impl From<Proof> for v1::Proof {
    fn from(p: Proof) -> Self {
        Self {
            invocation_id: p.invocation_id,
            index: p.index,
            status: p.status.to_owned(),
            receipt: p.receipt,
            confirm: p.confirm,
            public_receipt: p.public_receipt,
        }
    }
}

impl From<Invocation> for v1::InvokeResponse {
    fn from(invocation: Invocation) -> Self {
        let a = invocation.answer;
        Self {
            ok: a.ok,
            key: a.key,
            result: a.result.map(json::to_value),
            error: a.error.map(Into::into),
            proof: Some(a.proof.into()),
            repeatable: invocation.repeatable,
        }
    }
}

impl From<&PutOutcome> for v1::PutOutcome {
    fn from(o: &PutOutcome) -> Self {
        Self {
            key: o.key.clone(),
            version: o.version,
            created: o.created,
            updated_at: o.updated_at.clone(),
        }
    }
}

impl From<Member> for v1::Member {
    fn from(m: Member) -> Self {
        Self {
            id: m.id,
            // Empty where the node does not say (to callers who may not know addresses).
            grpc_addr: m.grpc_addr.unwrap_or_default(),
            http_addr: m.http_addr.unwrap_or_default(),
            voter: m.voter,
            leader: m.leader,
            incarnation: m.incarnation,
        }
    }
}

impl From<Status> for v1::StatusResponse {
    fn from(s: Status) -> Self {
        Self {
            node_id: s.node_id,
            role: s.role.to_owned(),
            leader: s.leader,
            term: s.term,
            last_applied: s.last_applied,
            last_log_index: s.last_log_index,
            snapshot_index: s.snapshot_index,
            purged_index: s.purged_index,
            stale: s.stale,
            members: s.members.into_iter().map(Into::into).collect(),
            follower_lag: s.follower_lag.into_iter().collect(),
            unanswered_appends: s.unanswered_appends.into_iter().collect(),
            standing: s.standing.to_owned(),
            standing_reason: s.standing_reason,
            outbox: s.outbox as u64,
            resolver: Some(s.resolver.into()),
            cluster_id: s.cluster_id,
            incarnation: s.incarnation,
        }
    }
}

impl From<ResolverStatus> for v1::ResolverStatus {
    fn from(r: ResolverStatus) -> Self {
        Self {
            mode: r.mode.to_owned(),
            model: r.model.map(Into::into),
            rows_embedded: r.rows_embedded as u64,
            rows_waiting: r.rows_waiting as u64,
            rows_computed: r.rows_computed,
            learn: r.learn,
            members_ranking_otherwise: r
                .members_ranking_otherwise
                .into_iter()
                .map(|(id, setup)| (id, setup.into()))
                .collect(),
        }
    }
}

impl From<RankingSetup> for v1::RankingSetup {
    fn from(r: RankingSetup) -> Self {
        Self {
            mode: r.mode,
            model: r.model,
            query: r.query.map(|q| query_mode(q).to_owned()),
            learn: r.learn,
            weights: r.weights.map(|w| w.as_str().to_owned()),
            revision: r.revision,
        }
    }
}

fn query_mode(mode: QueryMode) -> &'static str {
    match mode {
        QueryMode::Model => "model",
        QueryMode::Static => "static",
    }
}

impl From<ModelInfo> for v1::EmbeddingModel {
    fn from(m: ModelInfo) -> Self {
        Self {
            name: m.name,
            fingerprint: m.fingerprint,
            dimensions: u32::try_from(m.dimensions).unwrap_or(u32::MAX),
            query: query_mode(m.query).to_owned(),
            weights: m.weights.as_str().to_owned(),
        }
    }
}

/// A feed event as a message, its row as `viewer` sees it (a row it may not see is left
/// out, as over HTTP).
pub fn watch_event(event: FeedEvent, viewer: &Viewer) -> v1::WatchEvent {
    let index = event.index();
    let event = match event {
        FeedEvent::Change { change, row } => {
            v1::watch_event::Event::Change(v1::Change {
                op: match change.op {
                    ChangeOp::Put => "put",
                    ChangeOp::Delete => "delete",
                    // The feed turns these into resets; kept total for safety.
                    ChangeOp::Reset => "reset",
                }
                .to_owned(),
                key: change.key,
                projection: change.projection,
                row: row
                    .as_deref()
                    .and_then(|r| Some(row_seen(r, viewer.row(r)?))),
            })
        }
        FeedEvent::Reset { .. } => v1::watch_event::Event::Reset(v1::Reset {}),
    };
    v1::WatchEvent {
        index,
        event: Some(event),
    }
}

/// A row as a message, as much of it as the caller sees (without `target`: an empty one).
pub fn row_seen(row: &Row, sight: Sight) -> v1::Row {
    let mut message = v1::Row::from(row);
    if sight == Sight::WithoutTarget {
        message.target.clear();
    }
    message
}

/// Rows of a page as messages, as much of each as the caller sees.
pub fn rows(rows: &[Arc<Row>], sight: Sight) -> Vec<v1::Row> {
    rows.iter().map(|row| row_seen(row, sight)).collect()
}
