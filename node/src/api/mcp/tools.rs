//! Tool definitions of the two projections: one tool per projected row (rows mode), and the
//! fixed search / contract / invoke trio (compact mode), plus the opaque `tools/list` cursor.

use std::sync::{Arc, LazyLock};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{json, Value};

use crate::catalogue::row::{Risk, Row};

/// Longest tool description in rows mode: a WHAT line is one line, but nothing stops a row
/// from making it a page, and every client of the rows mode pays for every byte of it.
pub const MAX_DESCRIPTION: usize = 512;

/// Name of the compact search tool.
pub const SEARCH: &str = "search";
/// Name of the compact contract tool.
pub const CONTRACT: &str = "contract";
/// Name of the compact invoke tool.
pub const INVOKE: &str = "invoke";

/// The tool of one projected row: name = key, description = the WHAT line, input schema =
/// `args_schema` reduced to what a call needs (see [`call_schema`]; an empty object schema when
/// absent), annotations from risk.
///
/// This is the listing an agent loads into its context once per tool, so it carries what a
/// model needs to *choose* a tool and *call* it, and nothing else: the other docstring
/// fields (returns, examples, errors), argument descriptions and troubleshooting are in the
/// contract (`GET /api/dispatch?key=K`, or the compact mode's `contract` tool).
pub fn row_tool(row: &Row) -> Tool {
    let input_schema = match row.args_schema.as_deref() {
        Some(Value::Object(schema)) => call_schema(schema),
        _ => object(json!({ "type": "object", "properties": {} })),
    };
    Tool::new(row.key.clone(), description(row), Arc::new(input_schema))
        .with_annotations(annotations(row.risk))
}

/// The WHAT line (or, for a row without one, its first docstring field, else its category,
/// else its key: MCP clients reject a tool without a description), cut at
/// [`MAX_DESCRIPTION`] bytes on a character boundary.
fn description(row: &Row) -> String {
    let docs = row.docs();
    let mut text = [docs.what(), docs.fields.first().map_or("", |(_, v)| *v)]
        .into_iter()
        .chain([row.category.as_str(), row.key.as_str()])
        .map(str::trim)
        .find(|text| !text.is_empty())
        .unwrap_or_default()
        .to_owned();
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

/// JSON Schema keywords that only annotate (they never change which arguments are valid);
/// `default` stays, since it tells a model what leaving an argument out means.
const ANNOTATION_KEYWORDS: [&str; 5] = ["description", "title", "examples", "example", "$comment"];
/// Keywords whose value is a map of names to subschemas.
const SCHEMA_MAPS: [&str; 5] = [
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];
/// Keywords whose value is a subschema or a list of them.
const SUBSCHEMAS: [&str; 15] = [
    "items",
    "prefixItems",
    "additionalItems",
    "additionalProperties",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "allOf",
    "anyOf",
    "oneOf",
];

/// `schema` without its annotation keywords, at every depth: argument names, types,
/// `required`, enums, formats, bounds and nesting all stay, so a client validates and a
/// model fills arguments exactly as before, with the prose left to the contract. Property
/// *names* are never touched (a property may be called `description`).
pub fn call_schema(schema: &JsonObject) -> JsonObject {
    schema
        .iter()
        .filter(|(keyword, _)| !ANNOTATION_KEYWORDS.contains(&keyword.as_str()))
        .map(|(keyword, value)| {
            let value = match value {
                Value::Object(map) if SCHEMA_MAPS.contains(&keyword.as_str()) => Value::Object(
                    map.iter()
                        .map(|(name, sub)| (name.clone(), subschema(sub)))
                        .collect(),
                ),
                _ if SUBSCHEMAS.contains(&keyword.as_str()) => subschema(value),
                _ => value.clone(),
            };
            (keyword.clone(), value)
        })
        .collect()
}

/// A subschema, or a list of them, reduced by [`call_schema`]; anything else (a boolean
/// schema) as it is.
fn subschema(value: &Value) -> Value {
    match value {
        Value::Object(schema) => Value::Object(call_schema(schema)),
        Value::Array(list) => Value::Array(list.iter().map(subschema).collect()),
        other => other.clone(),
    }
}

/// The hints that differ from the spec's defaults (not read-only, destructive, not
/// idempotent, open world), plus `destructiveHint` said outright for destructive rows so that
/// no client has to remember the default. `destructiveHint` and `idempotentHint` mean nothing
/// on a read-only tool. `openWorldHint` is left at its default (open), which over-states
/// static and builtin rows in the safe direction: saying "closed" would cost every such row
/// 22 bytes in every listing, for a hint clients hardly act on.
fn annotations(risk: Risk) -> ToolAnnotations {
    match risk {
        Risk::Read => ToolAnnotations::new().read_only(true),
        Risk::Write => ToolAnnotations::new().destructive(false),
        Risk::Destructive => ToolAnnotations::new().destructive(true),
    }
}

pub(super) fn object(value: Value) -> JsonObject {
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
            .with_annotations(annotations(Risk::Read)),
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
            .with_annotations(annotations(Risk::Read)),
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
            .with_annotations(annotations(Risk::Destructive)),
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
    use crate::catalogue::row::RowType;

    fn row(content: &str, risk: Risk, schema: Option<Value>) -> Row {
        Row {
            args_schema: schema.map(Box::new),
            risk,
            ..Row::fixture("SOME_ROW", RowType::Static, content)
        }
    }

    #[test]
    fn a_row_becomes_a_tool_of_its_what_line_and_argument_shapes() {
        let schema = json!({"type": "object",
            "properties": {"q": {"type": "string", "description": "What to look up", "title": "Query"},
                           "description": {"type": "string", "examples": ["a property named description"]}},
            "required": ["q"]});
        let tool = row_tool(&row(
            "# WHAT: Look things up\n# RETURNS: a list\n# EXAMPLE: {\"q\": \"x\"}\n\npayload",
            Risk::Destructive,
            Some(schema),
        ));
        let wire = serde_json::to_value(&tool).unwrap();
        assert_eq!(wire["name"], "SOME_ROW");
        assert_eq!(wire["description"], "Look things up");
        assert_eq!(
            wire["inputSchema"],
            json!({"type": "object",
                   "properties": {"q": {"type": "string"}, "description": {"type": "string"}},
                   "required": ["q"]})
        );
        assert_eq!(wire["annotations"], json!({"destructiveHint": true}));
        let bare = serde_json::to_value(row_tool(&row("# WHAT: x\n", Risk::Read, None))).unwrap();
        assert_eq!(
            bare["inputSchema"],
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(bare["annotations"], json!({"readOnlyHint": true}));
        let write = serde_json::to_value(row_tool(&row("# WHAT: x\n", Risk::Write, None))).unwrap();
        assert_eq!(write["annotations"], json!({"destructiveHint": false}));
    }

    #[test]
    fn call_schemas_keep_every_constraint_at_every_depth() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object", "title": "T", "$comment": "c",
            "properties": {
                "tags": {"type": "array", "description": "d", "minItems": 1,
                         "items": {"type": "string", "enum": ["a", "b"], "description": "d"}},
                "at": {"anyOf": [{"type": "string", "format": "date", "title": "t"}, {"type": "null"}],
                       "default": null},
                "geo": {"$ref": "#/$defs/point"}
            },
            "$defs": {"point": {"type": "object", "description": "d",
                                "properties": {"lat": {"type": "number", "minimum": -90, "description": "d"}},
                                "additionalProperties": false}},
            "additionalProperties": {"type": "integer", "description": "d"}
        });
        let reduced = call_schema(schema.as_object().unwrap());
        assert_eq!(
            Value::Object(reduced),
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "tags": {"type": "array", "minItems": 1, "items": {"type": "string", "enum": ["a", "b"]}},
                    "at": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}], "default": null},
                    "geo": {"$ref": "#/$defs/point"}
                },
                "$defs": {"point": {"type": "object",
                                    "properties": {"lat": {"type": "number", "minimum": -90}},
                                    "additionalProperties": false}},
                "additionalProperties": {"type": "integer"}
            })
        );
    }

    #[test]
    fn descriptions_fall_back_and_are_bounded_on_a_character_boundary() {
        let long = format!("# WHAT: ünïcode {}\n", "é".repeat(2000));
        let text = row_tool(&row(&long, Risk::Read, None)).description.unwrap();
        assert!(text.len() <= MAX_DESCRIPTION, "{}", text.len());
        assert!(text.starts_with("ünïcode é") && text.ends_with('…'));
        // No WHAT line: the first docstring field; no docstring: the category, then the key.
        let returns = row_tool(&row("# RETURNS: a number\n", Risk::Read, None));
        assert_eq!(returns.description.as_deref(), Some("a number"));
        let bare = Row {
            category: String::new(),
            ..row("just a payload", Risk::Read, None)
        };
        assert_eq!(row_tool(&bare).description.as_deref(), Some("SOME_ROW"));
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
