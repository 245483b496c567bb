//! Tool definitions of the two projections: one tool per projected row (rows mode), and the
//! fixed search / contract / invoke trio (compact mode), plus the opaque `tools/list` cursor.

use std::sync::{Arc, LazyLock};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{json, Value};

use crate::catalogue::row::{Risk, Row, RowType};

/// Longest tool description in rows mode: the WHAT line always fits; the other docstring
/// fields fill the rest, so one verbose row cannot bloat every client's prompt.
pub const MAX_DESCRIPTION: usize = 1024;

/// Name of the compact search tool.
pub const SEARCH: &str = "search";
/// Name of the compact contract tool.
pub const CONTRACT: &str = "contract";
/// Name of the compact invoke tool.
pub const INVOKE: &str = "invoke";

/// The tool of one projected row: name = key, description from the docstring, input
/// schema from `args_schema` (an empty object schema when absent), annotations from risk.
pub fn row_tool(row: &Row) -> Tool {
    let input_schema = match &row.args_schema {
        Some(Value::Object(schema)) => schema.clone(),
        _ => object(json!({ "type": "object", "properties": {} })),
    };
    Tool::new(row.key.clone(), description(row), Arc::new(input_schema)).with_annotations(
        annotations(row.risk, matches!(row.kind, RowType::Http | RowType::Mcp)),
    )
}

/// WHAT, then the other docstring fields as `Field: value` lines, cut at
/// [`MAX_DESCRIPTION`] bytes on a character boundary.
fn description(row: &Row) -> String {
    let docs = row.docs();
    let mut text = docs.what().to_owned();
    for (field, value) in docs.fields.iter().filter(|(f, _)| *f != "WHAT") {
        let mut label = field.to_ascii_lowercase();
        if let Some(first) = label.get_mut(0..1) {
            first.make_ascii_uppercase();
        }
        text.push('\n');
        text.push_str(&label);
        text.push_str(": ");
        text.push_str(value);
    }
    if text.len() > MAX_DESCRIPTION {
        let mut cut = MAX_DESCRIPTION - '…'.len_utf8();
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// All four hints set explicitly: the spec's defaults (not read-only, destructive, not
/// idempotent, open world) would describe every read as dangerous.
fn annotations(risk: Risk, open_world: bool) -> ToolAnnotations {
    let (read_only, destructive, idempotent) = match risk {
        Risk::Read => (true, false, true),
        Risk::Write => (false, false, false),
        Risk::Destructive => (false, true, false),
    };
    ToolAnnotations::new()
        .read_only(read_only)
        .destructive(destructive)
        .idempotent(idempotent)
        .open_world(open_world)
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

/// The compact projection: three tools whose definitions never depend on the catalogue.
pub fn compact_tools() -> &'static [Tool] {
    static TOOLS: LazyLock<Vec<Tool>> = LazyLock::new(|| {
        let key = json!({
            "type": "string",
            "pattern": "^[A-Z_][A-Z0-9_]{0,63}$",
            "description": "A capability key, as search returns it"
        });
        vec![
            Tool::new(
                SEARCH,
                "Find capabilities in the rowcall catalogue with a plain-language request. \
                 Returns ranked candidates (key, score, what) and the best one; read its \
                 contract, then invoke it.",
                Arc::new(object(json!({
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": "What you need, in plain words"},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "Most candidates to return (default 5)"}
                    },
                    "required": ["query"]
                }))),
            )
            .with_annotations(annotations(Risk::Read, false)),
            Tool::new(
                CONTRACT,
                "The contract of one capability: what it does, its arguments (JSON Schema and \
                 an example), auth, risk and troubleshooting.",
                Arc::new(object(json!({
                    "type": "object",
                    "properties": {"key": key},
                    "required": ["key"]
                }))),
            )
            .with_annotations(annotations(Risk::Read, false)),
            Tool::new(
                INVOKE,
                "Run one capability by key. Returns its result and a proof whose confirm \
                 address anyone can check. Check the contract's risk before running writes.",
                Arc::new(object(json!({
                    "type": "object",
                    "properties": {
                        "key": key,
                        "args": {"type": "object", "description": "Named arguments, as the contract's args_schema describes"},
                        "body": {"type": "string", "description": "A raw body, for capabilities that take one"}
                    },
                    "required": ["key"]
                }))),
            )
            // Any capability may run through it, so it claims nothing.
            .with_annotations(annotations(Risk::Destructive, true)),
        ]
    });
    &TOOLS
}

/// The opaque cursor of the page after `last_key`.
pub fn cursor_after(last_key: &str) -> String {
    URL_SAFE_NO_PAD.encode(last_key)
}

/// The key a cursor continues after, if the cursor is one this node could have issued.
pub fn parse_cursor(cursor: &str) -> Option<String> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    let key = String::from_utf8(bytes).ok()?;
    crate::catalogue::row::valid_key(&key).then_some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(content: &str, risk: Risk, schema: Option<Value>) -> Row {
        Row {
            args_schema: schema,
            risk,
            ..Row::fixture("SOME_ROW", RowType::Static, content)
        }
    }

    #[test]
    fn a_row_becomes_a_tool() {
        let schema = json!({"type": "object", "properties": {"q": {"type": "string"}}});
        let tool = row_tool(&row(
            "# WHAT: Look things up\n# RETURNS: a list\n\npayload",
            Risk::Destructive,
            Some(schema.clone()),
        ));
        let wire = serde_json::to_value(&tool).unwrap();
        assert_eq!(wire["name"], "SOME_ROW");
        assert_eq!(wire["description"], "Look things up\nReturns: a list");
        assert_eq!(wire["inputSchema"], schema);
        assert_eq!(
            wire["annotations"],
            json!({"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false, "openWorldHint": false})
        );
        let bare = serde_json::to_value(row_tool(&row("# WHAT: x\n", Risk::Read, None))).unwrap();
        assert_eq!(
            bare["inputSchema"],
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(bare["annotations"]["readOnlyHint"], true);
    }

    #[test]
    fn descriptions_are_bounded_on_a_character_boundary() {
        let long = format!("# WHAT: ünïcode\n# EXAMPLE: {}\n", "é".repeat(2000));
        let tool = row_tool(&row(&long, Risk::Read, None));
        let text = tool.description.unwrap();
        assert!(text.len() <= MAX_DESCRIPTION, "{}", text.len());
        assert!(text.starts_with("ünïcode\nExample: é") && text.ends_with('…'));
    }

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        assert_eq!(
            parse_cursor(&cursor_after("TIME_NOW")).as_deref(),
            Some("TIME_NOW")
        );
        assert_eq!(parse_cursor("not base64!"), None);
        assert_eq!(parse_cursor(&URL_SAFE_NO_PAD.encode("lower")), None);
    }
}
