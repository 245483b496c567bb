//! The MCP importer: one row per tool of an upstream server's `tools/list` (all pages),
//! written in one atomic bulk write, so wrapping someone else's MCP server is one command
//! (`rowcall import-mcp URL`, backed by `POST /api/directory/import-mcp`).
//!
//! A tool's row: key from its name (prefix, upper-case, other characters `_`, a hash suffix
//! when names collide or are too long), `type: mcp`, `target: URL#tool`, WHAT from its
//! description, `args_schema` from its `inputSchema`, `risk` from its annotations
//! (`readOnlyHint` → read; `destructiveHint: false` → write; otherwise destructive, the
//! spec's default), `auth: key`.
//!
//! Re-running the import compares with the rows whose target is `URL#…`:
//! - a tool with no row is **added**;
//! - a tool whose row differs (docs, schema, risk, category, or disabled) is **changed**; the
//!   row keeps its key and the operator's own settings (auth, pins, demote, visibility);
//! - a row whose tool is gone is **removed**: disabled, not deleted, so its key, receipts and
//!   any operator edits survive, and it comes back as changed if the tool returns.
//!
//! Every written row carries `if_version`, so a concurrent edit makes the import fail with a
//! conflict instead of overwriting it.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::Tool;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

use super::builtins::BUILTINS;
use super::mcp::Upstream;
use super::RunError;
use crate::app::App;
use crate::catalogue::row::{check_schema, Auth, Risk, Row, RowInput, RowType, MAX_KEY_LEN};
use crate::model::time::now_ms;
use crate::raft::calls::WriteError;
use crate::raft::{Command, CommandResult};

/// Characters of a tool description kept in the WHAT line.
const WHAT_CHARS: usize = 300;
/// Longest accepted prefix.
const PREFIX_MAX: usize = 32;

/// `POST /api/directory/import-mcp`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportRequest {
    /// The upstream server's Streamable HTTP endpoint.
    pub url: String,
    /// Put before every new key (`gh` → `GH_SEARCH_ISSUES`).
    #[serde(default)]
    pub prefix: Option<String>,
    /// Category of the rows (default: the server's name).
    #[serde(default)]
    pub category: Option<String>,
}

/// What an import did.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ImportReport {
    /// The upstream.
    pub url: String,
    /// Its name, from its initialize answer.
    pub server: Option<String>,
    /// How many tools it lists.
    pub tools: usize,
    /// Keys of new rows.
    pub added: Vec<String>,
    /// Keys of rows updated.
    pub changed: Vec<String>,
    /// Keys of rows whose tool is gone (now disabled).
    pub removed: Vec<String>,
    /// How many rows were already up to date.
    pub unchanged: usize,
    /// The log index of the write (none when nothing changed).
    pub version: Option<u64>,
    /// Tools imported with less than they offered (e.g. an unusable inputSchema).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Why an import did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The request is not usable.
    #[error("{0}")]
    Invalid(String),
    /// The upstream could not be listed.
    #[error("listing the upstream's tools failed: {0}")]
    Upstream(#[from] RunError),
    /// A new tool's key is held by a row that is not from this server.
    #[error("key {key} is already used by a row with target {target:?}; use --prefix")]
    KeyTaken {
        /// The key.
        key: String,
        /// The existing row's target.
        target: String,
    },
    /// A row changed while the import ran.
    #[error("row {key} changed during the import; run it again")]
    Changed {
        /// The row.
        key: String,
    },
    /// The bulk write failed.
    #[error(transparent)]
    Write(#[from] WriteError),
}

/// Lists the upstream's tools and writes the rows (one bulk write).
pub async fn import(app: &App, request: ImportRequest) -> Result<ImportReport, ImportError> {
    let url = request.url.trim().trim_end_matches('#').to_owned();
    let parsed =
        reqwest::Url::parse(&url).map_err(|e| ImportError::Invalid(format!("url {url:?}: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || url.contains('#') {
        return Err(ImportError::Invalid(format!(
            "url {url:?} must be http(s) without a #fragment"
        )));
    }
    let prefix = request.prefix.unwrap_or_default();
    if prefix.len() > PREFIX_MAX
        || !prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return Err(ImportError::Invalid(format!(
            "prefix {prefix:?} must be at most {PREFIX_MAX} letters, digits or _"
        )));
    }
    let config = &app.config.runners;
    let list = async {
        let upstream = Upstream::connect(config, &parsed, Default::default()).await?;
        let tools = upstream.list_tools().await;
        let server = upstream.server_name();
        upstream.close();
        Ok::<_, RunError>((tools?, server))
    };
    let (tools, server) = tokio::time::timeout(Duration::from_millis(config.timeout_ms), list)
        .await
        .map_err(|_| RunError::Timeout {
            ms: config.timeout_ms,
        })??;
    let existing = app.catalogue.read().all_rows();
    let category = request
        .category
        .or_else(|| server.clone())
        .unwrap_or_default();
    let planned = plan(&url, &tools, &prefix, &category, &existing)?;
    let mut report = ImportReport {
        url,
        server,
        tools: tools.len(),
        added: planned.added,
        changed: planned.changed,
        removed: planned.removed,
        unchanged: planned.unchanged,
        version: None,
        warnings: planned.warnings,
    };
    if planned.rows.is_empty() {
        return Ok(report);
    }
    for row in &planned.rows {
        row.validate(&BUILTINS)
            .map_err(|e| ImportError::Invalid(e.to_string()))?;
    }
    let written = app
        .write(Command::PutRows {
            at_ms: now_ms(),
            rows: planned.rows,
        })
        .await?;
    match written.result {
        CommandResult::Put { .. } => {}
        CommandResult::Conflict { key, .. } => return Err(ImportError::Changed { key }),
        other => {
            return Err(ImportError::Invalid(format!(
                "unexpected apply result {other:?}"
            )))
        }
    }
    report.version = Some(written.index);
    Ok(report)
}

/// The rows to write and the report, from the tools and the current directory.
#[derive(Debug, Default)]
pub struct Planned {
    /// Rows to write, each with `if_version`.
    pub rows: Vec<RowInput>,
    /// New keys.
    pub added: Vec<String>,
    /// Updated keys.
    pub changed: Vec<String>,
    /// Disabled keys.
    pub removed: Vec<String>,
    /// Rows already up to date.
    pub unchanged: usize,
    /// Notes on tools imported with less than they offered.
    pub warnings: Vec<String>,
}

/// Plans an import of `tools` from `url` over the `existing` rows.
pub fn plan(
    url: &str,
    tools: &[Tool],
    prefix: &str,
    category: &str,
    existing: &[Arc<Row>],
) -> Result<Planned, ImportError> {
    let mut planned = Planned::default();
    let target_of = |name: &str| format!("{url}#{name}");
    let from_here: BTreeMap<&str, &Arc<Row>> = existing
        .iter()
        .filter(|r| {
            r.kind == RowType::Mcp
                && r.target
                    .strip_prefix(url)
                    .is_some_and(|t| t.starts_with('#'))
        })
        .map(|r| (r.target.as_str(), r))
        .collect();
    let by_key: BTreeMap<&str, &Arc<Row>> = existing.iter().map(|r| (r.key.as_str(), r)).collect();
    let keys = tool_keys(prefix, tools);
    let category: String = category.chars().take(64).collect();
    let mut listed = HashSet::new();
    for (tool, new_key) in tools.iter().zip(keys) {
        let target = target_of(&tool.name);
        listed.insert(target.clone());
        let (args_schema, warning) = schema_of(tool);
        planned.warnings.extend(warning);
        let mut input = RowInput {
            key: new_key,
            kind: RowType::Mcp,
            target: target.clone(),
            category: category.clone(),
            content: content_of(tool),
            args_schema,
            auth: Auth::Key,
            risk: risk_of(tool),
            enabled: true,
            planner_visible: true,
            pins: Vec::new(),
            demote: false,
            if_version: Some(0),
            version: None,
            created_at: None,
            updated_at: None,
        };
        match from_here.get(target.as_str()) {
            Some(row) => {
                // Keep the row's key and the operator's settings.
                input.key = row.key.clone();
                input.auth = row.auth;
                input.planner_visible = row.planner_visible;
                input.pins = row.pins.clone();
                input.demote = row.demote;
                input.if_version = Some(row.version);
                if same(&input, row) {
                    planned.unchanged += 1;
                    continue;
                }
                planned.changed.push(input.key.clone());
            }
            None => {
                if let Some(taken) = by_key.get(input.key.as_str()) {
                    return Err(ImportError::KeyTaken {
                        key: input.key,
                        target: taken.target.clone(),
                    });
                }
                planned.added.push(input.key.clone());
            }
        }
        planned.rows.push(input);
    }
    for (target, row) in from_here {
        if listed.contains(target) || !row.enabled {
            continue;
        }
        let mut input = input_of(row);
        input.enabled = false;
        planned.removed.push(row.key.clone());
        planned.rows.push(input);
    }
    Ok(planned)
}

fn same(input: &RowInput, row: &Row) -> bool {
    input.kind == row.kind
        && input.target == row.target
        && input.category == row.category
        && input.content == row.content
        && input.args_schema.as_ref() == row.args_schema.as_deref()
        && input.risk == row.risk
        && input.enabled == row.enabled
}

/// A stored row as a conditional write of itself.
fn input_of(row: &Row) -> RowInput {
    RowInput {
        key: row.key.clone(),
        kind: row.kind,
        target: row.target.clone(),
        category: row.category.clone(),
        content: row.content.clone(),
        args_schema: row.args_schema.as_deref().cloned(),
        auth: row.auth,
        risk: row.risk,
        enabled: row.enabled,
        planner_visible: row.planner_visible,
        pins: row.pins.clone(),
        demote: row.demote,
        if_version: Some(row.version),
        version: None,
        created_at: None,
        updated_at: None,
    }
}

/// Keys for `tools`, in order: `tool_key`, with a hash suffix for every name whose key
/// collides with another's.
fn tool_keys(prefix: &str, tools: &[Tool]) -> Vec<String> {
    let plain: Vec<String> = tools.iter().map(|t| tool_key(prefix, &t.name)).collect();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for key in &plain {
        *counts.entry(key).or_default() += 1;
    }
    plain
        .iter()
        .zip(tools)
        .map(|(key, tool)| {
            if counts[key.as_str()] > 1 {
                hashed(key, &tool.name)
            } else {
                key.clone()
            }
        })
        .collect()
}

/// The key of a tool: `PREFIX_NAME` upper-cased, other characters `_`, a leading `_` before
/// a digit, and a hash suffix when longer than 64.
pub fn tool_key(prefix: &str, name: &str) -> String {
    let upper = |text: &str| -> String {
        text.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                }
            })
            .collect()
    };
    let mut key = upper(prefix);
    if !key.is_empty() && !key.ends_with('_') {
        key.push('_');
    }
    key.push_str(&upper(name));
    if key.starts_with(|c: char| c.is_ascii_digit()) || key.is_empty() {
        key.insert(0, '_');
    }
    if key.len() > MAX_KEY_LEN {
        return hashed(&key, name);
    }
    key
}

/// `key` cut to leave room for `_` and 6 hex characters of SHA-256(name).
fn hashed(key: &str, name: &str) -> String {
    let digest = hex::encode(Sha256::digest(name.as_bytes()));
    let base: String = key.chars().take(MAX_KEY_LEN - 7).collect();
    format!("{base}_{}", digest[..6].to_ascii_uppercase())
}

/// The row's content: a WHAT line from the description (or title, or name), and the full
/// description as the payload when it says more than the WHAT line.
fn content_of(tool: &Tool) -> String {
    let description = tool.description.as_deref().unwrap_or("").trim();
    let source = if description.is_empty() {
        tool.title.as_deref().unwrap_or(&tool.name)
    } else {
        description
    };
    let flat = source.split_whitespace().collect::<Vec<_>>().join(" ");
    let what: String = flat.chars().take(WHAT_CHARS).collect();
    let mut content = format!("# WHAT: {what}\n");
    if !description.is_empty() && description != what {
        content.push('\n');
        content.push_str(description);
        content.push('\n');
    }
    content
}

fn risk_of(tool: &Tool) -> Risk {
    let annotations = tool.annotations.as_ref();
    if annotations.and_then(|a| a.read_only_hint) == Some(true) {
        Risk::Read
    } else if annotations.and_then(|a| a.destructive_hint) == Some(false) {
        Risk::Write
    } else {
        Risk::Destructive
    }
}

/// The tool's inputSchema as `args_schema`, or none (with a warning) if it is not a usable
/// JSON Schema.
fn schema_of(tool: &Tool) -> (Option<Value>, Option<String>) {
    let schema = Value::Object((*tool.input_schema).clone());
    match check_schema(&schema) {
        Ok(()) => (Some(schema), None),
        Err(reason) => (
            None,
            Some(format!(
                "tool {}: inputSchema is not a usable JSON Schema ({reason}); imported without args_schema",
                tool.name
            )),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ToolAnnotations;
    use serde_json::json;

    fn tool(name: &str, description: &str) -> Tool {
        serde_json::from_value(json!({
            "name": name, "description": description,
            "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}
        }))
        .unwrap()
    }

    fn stored(input: &RowInput, version: u64) -> Arc<Row> {
        Arc::new(Row::stored(input.clone(), version, "".into(), "".into()))
    }

    #[test]
    fn keys_follow_the_key_rule() {
        assert_eq!(tool_key("gh", "search-issues"), "GH_SEARCH_ISSUES");
        assert_eq!(tool_key("", "2fa.check"), "_2FA_CHECK");
        let long = tool_key("", &"x".repeat(100));
        assert!(
            crate::catalogue::row::valid_key(&long) && long.len() == 64,
            "{long}"
        );
        let keys = tool_keys("", &[tool("a-b", ""), tool("a.b", ""), tool("c", "")]);
        assert_ne!(keys[0], keys[1]);
        assert_eq!(keys[2], "C");
        assert!(keys.iter().all(|k| crate::catalogue::row::valid_key(k)));
    }

    #[test]
    fn risk_follows_the_annotations_and_the_spec_defaults() {
        let mut t = tool("t", "");
        assert_eq!(risk_of(&t), Risk::Destructive);
        t.annotations = Some(ToolAnnotations::new().read_only(true));
        assert_eq!(risk_of(&t), Risk::Read);
        t.annotations = Some(ToolAnnotations::new().destructive(false));
        assert_eq!(risk_of(&t), Risk::Write);
    }

    #[test]
    fn a_second_import_reports_added_changed_and_removed() {
        let url = "http://127.0.0.1:9/mcp";
        let first = plan(
            url,
            &[tool("search", "Search"), tool("old", "Old")],
            "",
            "docs",
            &[],
        )
        .unwrap();
        assert_eq!(first.added, ["SEARCH", "OLD"]);
        let rows: Vec<Arc<Row>> = first.rows.iter().map(|r| stored(r, 5)).collect();
        let second = plan(
            url,
            &[tool("search", "Search better"), tool("new", "New")],
            "",
            "docs",
            &rows,
        )
        .unwrap();
        assert_eq!(second.added, ["NEW"]);
        assert_eq!(second.changed, ["SEARCH"]);
        assert_eq!(second.removed, ["OLD"]);
        let old = second.rows.iter().find(|r| r.key == "OLD").unwrap();
        assert!(!old.enabled && old.if_version == Some(5));
        let same = plan(
            url,
            &[tool("search", "Search"), tool("old", "Old")],
            "",
            "docs",
            &rows,
        )
        .unwrap();
        assert!(same.rows.is_empty() && same.unchanged == 2);
    }

    #[test]
    fn a_key_held_by_another_row_is_a_conflict() {
        let other = RowInput {
            target: "http://elsewhere/mcp#search".into(),
            ..plan("http://elsewhere/mcp", &[tool("search", "")], "", "", &[])
                .unwrap()
                .rows[0]
                .clone()
        };
        let err = plan(
            "http://h/mcp",
            &[tool("search", "")],
            "",
            "",
            &[stored(&other, 3)],
        )
        .unwrap_err();
        assert!(matches!(err, ImportError::KeyTaken { .. }), "{err}");
    }
}
