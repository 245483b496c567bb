//! What the command line prints: each answer as JSON (for scripts, `--json`; the shapes of
//! the HTTP protocol) and as text for people (aligned tables; colour only on a terminal,
//! and never with `NO_COLOR` set).

use std::fmt::Write as _;
use std::io::IsTerminal as _;

use rowcall_proto::json;
use rowcall_proto::v1::{self as proto, watch_event};
use serde_json::{json, Value};

use crate::client::Invocation;
use crate::rows::row_json;

/// How to print: colours or not.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    colour: bool,
}

impl Style {
    /// Colours when stdout is a terminal and `NO_COLOR` is not set.
    pub fn detect() -> Self {
        let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Self { colour }
    }

    /// No colours (for output captured by a program).
    pub fn plain() -> Self {
        Self { colour: false }
    }

    fn paint(self, code: &str, text: &str) -> String {
        if self.colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    fn bold(self, text: &str) -> String {
        self.paint("1", text)
    }

    fn good(self, text: &str) -> String {
        self.paint("32", text)
    }

    fn bad(self, text: &str) -> String {
        self.paint("31", text)
    }

    fn dim(self, text: &str) -> String {
        self.paint("2", text)
    }
}

/// Rows of cells as aligned columns (the last column is not padded), with a bold header.
pub fn table(style: Style, header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>, out: &mut String| {
        let last = cells.len().saturating_sub(1);
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i == last {
                text.push_str(cell);
            } else {
                let pad = widths[i].saturating_sub(cell.chars().count());
                text.push_str(cell);
                text.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    let mut out = String::new();
    let head: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    let mut head_line = String::new();
    line(head, &mut head_line);
    out.push_str(&style.bold(head_line.trim_end()));
    out.push('\n');
    for row in rows {
        line(row.clone(), &mut out);
    }
    out
}

/// An ask's answer as the HTTP protocol shapes it.
pub fn ask_json(a: &proto::AskResponse) -> Value {
    let mut out = json!({
        "ask": a.ask, "count": a.count, "index": a.index,
        "best": a.best.as_ref().map(|b| {
            let mut best = json!({"key": b.key, "score": b.score, "contract": b.contract});
            if !b.run_now.is_empty() {
                best["run_now"] = json!(b.run_now);
            }
            best["do"] = json!(b.r#do);
            best
        }),
        "candidates": a.candidates.iter().map(|c| {
            let mut candidate = json!({"key": c.key, "score": c.score, "what": c.what});
            if !c.why.is_empty() {
                candidate["why"] = json!(c.why);
            }
            candidate
        }).collect::<Vec<_>>(),
    });
    if !a.hint.is_empty() {
        out["hint"] = json!(a.hint);
    }
    out
}

/// An ask's answer for people: the candidates ranked, then what to do with the best.
pub fn ask_text(style: Style, a: &proto::AskResponse) -> String {
    if a.candidates.is_empty() {
        let hint = if a.hint.is_empty() { "" } else { &a.hint };
        return format!("no candidates for {:?}. {hint}\n", a.ask);
    }
    let rows: Vec<Vec<String>> = a
        .candidates
        .iter()
        .enumerate()
        .map(|(rank, c)| {
            vec![
                format!("{}", rank + 1),
                c.key.clone(),
                format!("{:.2}", c.score),
                c.what.clone(),
            ]
        })
        .collect();
    let mut out = table(style, &["#", "KEY", "SCORE", "WHAT"], &rows);
    if let Some(best) = &a.best {
        let _ = writeln!(out, "\n{}", style.dim(&best.r#do));
    }
    out
}

/// An invocation as the HTTP protocol shapes it.
pub fn invocation_json(i: &Invocation) -> Value {
    let p = &i.proof;
    let mut proof = json!({"invocation_id": p.invocation_id});
    if let Some(index) = p.index {
        proof["index"] = json!(index);
    }
    proof["status"] = json!(p.status);
    proof["receipt"] = json!(p.receipt);
    proof["confirm"] = json!(p.confirm);
    proof["public_receipt"] = json!(p.public_receipt);
    let mut out = json!({"ok": i.ok, "key": i.key});
    match &i.error {
        None => out["result"] = i.result.clone().unwrap_or(Value::Null),
        Some(e) => out["error"] = json!({"code": e.code, "message": e.message, "hint": e.hint}),
    }
    out["proof"] = proof;
    out
}

/// An invocation for people: the result (or the failure), then the receipt.
pub fn invocation_text(style: Style, i: &Invocation) -> String {
    let mut out = String::new();
    match (&i.error, &i.result) {
        (Some(e), _) => {
            let _ = writeln!(out, "{} {} ({})", style.bad("failed:"), e.message, e.code);
            if !e.hint.is_empty() {
                let _ = writeln!(out, "hint: {}", e.hint);
            }
        }
        (None, Some(Value::String(text))) => {
            let _ = writeln!(out, "{text}");
        }
        (None, Some(value)) => {
            let _ = writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(value).unwrap_or_default()
            );
        }
        (None, None) => {}
    }
    let status = if i.proof.status == "committed" {
        style.good(&i.proof.status)
    } else {
        style.dim(&i.proof.status)
    };
    let _ = writeln!(
        out,
        "{}",
        style.dim(&format!(
            "receipt {} ({status}): {}",
            i.proof.invocation_id, i.proof.confirm
        ))
    );
    out
}

/// A confirmation as the HTTP protocol shapes it.
pub fn confirm_json(c: &proto::ConfirmResponse) -> Value {
    let mut out = json!({"confirmed": c.confirmed, "id": c.id, "key": c.key, "at": c.at,
        "ok": c.ok, "input_sha256": c.input_sha256, "output_sha256": c.output_sha256});
    if let Some(index) = c.index {
        out["index"] = json!(index);
    }
    if !c.status.is_empty() {
        out["status"] = json!(c.status);
    }
    if let Some(p) = &c.proof {
        out["proof"] = json!({"leaf_index": p.leaf_index, "tree_size": p.tree_size,
            "signers": p.checkpoint.as_ref().map(|c| c.signers.clone()).unwrap_or_default()});
    }
    out
}

/// A confirmation for people.
pub fn confirm_text(style: Style, c: &proto::ConfirmResponse) -> String {
    let outcome = if c.ok {
        style.good("succeeded")
    } else {
        style.bad("failed")
    };
    let place = match (c.index, c.status.as_str()) {
        (Some(index), _) => format!("at index {index}"),
        (None, status) => status.to_owned(),
    };
    let logged = match &c.proof {
        Some(p) => format!(
            "in the receipt log: leaf {} of {} (check it without trusting this node: rowcall verify {})\n",
            p.leaf_index, p.tree_size, c.id
        ),
        None => String::new(),
    };
    format!(
        "confirmed: {} {} at {} ({place})\ninput  sha256 {}\noutput sha256 {}\n{logged}",
        c.key, outcome, c.at, c.input_sha256, c.output_sha256
    )
}

/// A row for people: its fields, then its content.
pub fn row_text(style: Style, row: &proto::Row) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} (version {})", style.bold(&row.key), row.version);
    let fields = [
        ("type", row.r#type.clone()),
        ("target", row.target.clone()),
        ("category", row.category.clone()),
        ("auth", row.auth.clone()),
        ("risk", row.risk.clone()),
        ("enabled", row.enabled.to_string()),
        ("planner_visible", row.planner_visible.to_string()),
        ("pins", row.pins.join(", ")),
        ("demote", row.demote.to_string()),
        ("updated_at", row.updated_at.clone()),
    ];
    for (name, value) in fields.iter().filter(|(_, v)| !v.is_empty()) {
        let _ = writeln!(out, "  {name:<16}{value}");
    }
    if let Some(schema) = &row.args_schema {
        let schema = Value::Object(json::from_struct(schema.clone()));
        let _ = writeln!(out, "  {:<16}{schema}", "args_schema");
    }
    let _ = writeln!(out, "\n{}", row.content.trim_end());
    out
}

/// A page of rows as JSON.
pub fn page_json(page: &proto::ListRowsResponse) -> Value {
    json!({
        "rows": page.rows.iter().map(row_json).collect::<Vec<_>>(),
        "count": page.rows.len(),
        "next_cursor": (!page.next_cursor.is_empty()).then_some(&page.next_cursor),
        "index": page.index,
    })
}

/// Rows for people: one line each.
pub fn rows_text(style: Style, rows: &[proto::Row]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let what = r
                .content
                .lines()
                .find_map(|l| l.trim().strip_prefix("# WHAT:"))
                .unwrap_or("")
                .trim();
            let state = if r.enabled { "" } else { "disabled" };
            vec![
                r.key.clone(),
                r.r#type.clone(),
                r.auth.clone(),
                r.version.to_string(),
                state.to_owned(),
                what.to_owned(),
            ]
        })
        .collect();
    table(
        style,
        &["KEY", "TYPE", "AUTH", "VERSION", "STATE", "WHAT"],
        &cells,
    )
}

/// A put's answer as JSON.
pub fn put_json(p: &proto::PutRowsResponse) -> Value {
    json!({
        "ok": true,
        "rows": p.rows.iter().map(|o| json!({"key": o.key, "version": o.version,
            "created": o.created, "updated_at": o.updated_at})).collect::<Vec<_>>(),
        "index": p.index,
        "replayed": p.replayed,
    })
}

/// A put's answer for people: one line per row.
pub fn put_text(style: Style, p: &proto::PutRowsResponse) -> String {
    let mut out = String::new();
    for o in &p.rows {
        let what = if o.created {
            style.good("created")
        } else {
            "updated".to_owned()
        };
        let _ = writeln!(out, "{what} {} (version {})", o.key, o.version);
    }
    if p.replayed {
        let _ = writeln!(
            out,
            "{}",
            style.dim("(a retry: the first attempt's outcome)")
        );
    }
    out
}

/// The counts as JSON.
pub fn counts_json(c: &proto::Counts) -> Value {
    json!({"rows_total": c.rows_total, "enabled": c.enabled,
           "planner_visible": c.planner_visible, "mcp_projected": c.mcp_projected})
}

/// The counts for people.
pub fn counts_text(style: Style, c: &proto::Counts) -> String {
    let rows = vec![
        vec!["rows_total".into(), c.rows_total.to_string()],
        vec!["enabled".into(), c.enabled.to_string()],
        vec!["planner_visible".into(), c.planner_visible.to_string()],
        vec!["mcp_projected".into(), c.mcp_projected.to_string()],
    ];
    table(style, &["COUNT", "ROWS"], &rows)
}

/// A change event as one JSON line.
pub fn event_json(e: &proto::WatchEvent) -> Value {
    match &e.event {
        Some(watch_event::Event::Change(c)) => {
            let mut out =
                json!({"index": e.index, "op": c.op, "key": c.key, "projection": c.projection});
            if let Some(row) = &c.row {
                out["row"] = row_json(row);
            }
            out
        }
        Some(watch_event::Event::Reset(_)) | None => json!({"index": e.index, "op": "reset"}),
    }
}

/// A change event for people.
pub fn event_text(style: Style, e: &proto::WatchEvent) -> String {
    match &e.event {
        Some(watch_event::Event::Change(c)) => {
            let op = if c.op == "delete" {
                style.bad(&c.op)
            } else {
                style.good(&c.op)
            };
            format!("{:>8}  {op:<6}  {}\n", e.index, c.key)
        }
        _ => format!(
            "{:>8}  {}  (changes missed: list again)\n",
            e.index,
            style.bold("reset")
        ),
    }
}

/// A receipt as JSON (the forensic view).
pub fn receipt_json(r: &proto::Receipt) -> Value {
    json!({"id": r.id, "key": r.key, "row_version": r.row_version, "caller": r.caller,
        "input_sha256": r.input_sha256, "output_sha256": r.output_sha256, "ok": r.ok,
        "error": r.error, "started_at": r.started_at, "duration_ms": r.duration_ms,
        "served_by": r.served_by, "called": r.called, "upstream_status": r.upstream_status,
        "input": r.input, "output": r.output, "input_truncated": r.input_truncated,
        "output_truncated": r.output_truncated, "store_cap_bytes": r.store_cap_bytes,
        "index": r.index})
}

/// Receipts for people: one line each.
pub fn receipts_text(style: Style, receipts: &[proto::Receipt]) -> String {
    let rows: Vec<Vec<String>> = receipts
        .iter()
        .map(|r| {
            let ok = if r.ok {
                style.good("ok")
            } else {
                style.bad("failed")
            };
            vec![
                r.id.clone(),
                r.key.clone(),
                r.started_at.clone(),
                format!("{} ms", r.duration_ms),
                ok,
                r.caller.clone(),
            ]
        })
        .collect();
    table(
        style,
        &["ID", "KEY", "AT", "TOOK", "OUTCOME", "CALLER"],
        &rows,
    )
}

/// The cluster status as JSON.
pub fn status_json(s: &proto::StatusResponse) -> Value {
    json!({
        "node_id": s.node_id, "role": s.role, "leader": s.leader, "term": s.term,
        "last_applied": s.last_applied, "last_log_index": s.last_log_index,
        "snapshot_index": s.snapshot_index, "purged_index": s.purged_index, "stale": s.stale,
        "cluster_id": s.cluster_id, "incarnation": s.incarnation,
        "members": s.members.iter().map(|m| json!({"id": m.id, "grpc_addr": m.grpc_addr,
            "http_addr": m.http_addr, "incarnation": m.incarnation, "voter": m.voter,
            "leader": m.leader})).collect::<Vec<_>>(),
        "follower_lag": s.follower_lag.iter().map(|(id, lag)| (id.to_string(), json!(lag)))
            .collect::<serde_json::Map<_, _>>(),
        "unanswered_appends": s.unanswered_appends.iter().map(|(id, n)| (id.to_string(), json!(n)))
            .collect::<serde_json::Map<_, _>>(),
        "outbox": s.outbox,
        "standing": s.standing, "standing_reason": s.standing_reason,
        "members_ranking_otherwise": s.resolver.iter()
            .flat_map(|r| &r.members_ranking_otherwise)
            .map(|(id, setup)| (id.to_string(), json!({"mode": setup.mode, "model": setup.model,
                "query": setup.query, "learn": setup.learn})))
            .collect::<serde_json::Map<_, _>>(),
    })
}

/// How a node ranks, as its `RankingSetup` says.
fn ranking_text(setup: &proto::RankingSetup) -> String {
    let model = match (&setup.model, setup.query.as_deref()) {
        (Some(model), Some("static")) => format!("model {model} with static query vectors"),
        (Some(model), _) => format!("model {model}"),
        (None, _) => "words only".to_owned(),
    };
    // A build before revisions were told ranked by revision 1.
    let revision = match &setup.model {
        Some(_) => format!(", ranking revision {}", setup.revision.unwrap_or(1)),
        None => String::new(),
    };
    let learn = if setup.learn { "on" } else { "off" };
    format!("{model}{revision}, learning from use {learn}")
}

/// The cluster status for people: this node, then the members.
pub fn status_text(style: Style, s: &proto::StatusResponse) -> String {
    let mut out = format!(
        "node {} is {}, term {}, applied {}{}\n\n",
        s.node_id,
        style.bold(&s.role),
        s.term,
        s.last_applied,
        if s.stale {
            style.bad(" (stale: cut off from the leader)")
        } else {
            String::new()
        }
    );
    if let Some(reason) = &s.standing_reason {
        out.push_str(&style.bad(&format!("{}: {reason}", s.standing)));
        out.push_str("\n\n");
    }
    // Told only to the admin key, as are the member addresses and incarnations below.
    if let (Some(cluster), Some(incarnation)) = (&s.cluster_id, &s.incarnation) {
        out.push_str(&format!("cluster {cluster}, incarnation {incarnation}\n\n"));
    }
    let rows: Vec<Vec<String>> = s
        .members
        .iter()
        .map(|m| {
            let role = match (m.leader, m.voter) {
                (true, _) => style.good("leader"),
                (false, true) => "voter".to_owned(),
                (false, false) => "learner".to_owned(),
            };
            let count = |counts: &std::collections::HashMap<u64, u64>| {
                counts.get(&m.id).map_or_else(String::new, u64::to_string)
            };
            vec![
                m.id.to_string(),
                role,
                m.grpc_addr.clone(),
                m.http_addr.clone(),
                m.incarnation.clone().unwrap_or_default(),
                count(&s.follower_lag),
                count(&s.unanswered_appends),
            ]
        })
        .collect();
    out.push_str(&table(
        style,
        &[
            "ID",
            "ROLE",
            "GRPC",
            "HTTP",
            "INCARNATION",
            "LAG",
            "UNANSWERED",
        ],
        &rows,
    ));
    let otherwise = s.resolver.iter().flat_map(|r| &r.members_ranking_otherwise);
    let mut otherwise: Vec<_> = otherwise.collect();
    otherwise.sort_by_key(|(id, _)| **id);
    for (id, setup) in otherwise {
        out.push_str(&style.bad(&format!(
            "\nnode {id} ranks asks otherwise than node {}: {}",
            s.node_id,
            ranking_text(setup)
        )));
    }
    if out.ends_with(|c| c != '\n') {
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_plain_style_has_no_escapes() {
        let text = table(
            Style::plain(),
            &["KEY", "WHAT"],
            &[
                vec!["A".into(), "first".into()],
                vec!["LONGER".into(), "second".into()],
            ],
        );
        assert_eq!(text, "KEY     WHAT\nA       first\nLONGER  second\n");
        assert!(Style { colour: true }.bold("x").contains('\x1b'));
    }
}
