//! The row: one capability of the directory (DESIGN §2.1), its input form and validation.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::model::time::Stamp;

/// Longest key, after the first character (`^[A-Z_][A-Z0-9_]{0,63}$`).
pub const MAX_KEY_LEN: usize = 64;
/// Longest category.
pub const MAX_CATEGORY_LEN: usize = 64;
/// Largest `content` (docstring plus payload).
pub const MAX_CONTENT_BYTES: usize = 64 * 1024;
/// Most pins one row may carry, and the longest pin.
pub const MAX_PINS: usize = 32;
const MAX_PIN_LEN: usize = 200;
/// Longest target (a URL with placeholders, or a builtin name).
const MAX_TARGET_LEN: usize = 2048;

/// How a row runs when invoked (DESIGN §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RowType {
    /// Calls an HTTP endpoint: target `"METHOD URL"` with `{arg}` placeholders.
    Http,
    /// Calls `tools/call` on an upstream MCP server: target `"URL#tool"`.
    Mcp,
    /// Answers with its payload.
    Static,
    /// Runs code inside the node: target is the builtin's name.
    Builtin,
}

impl RowType {
    /// The name used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Mcp => "mcp",
            Self::Static => "static",
            Self::Builtin => "builtin",
        }
    }
}

/// Who may invoke a row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Auth {
    /// Anyone, without a credential.
    Public,
    /// An invoke credential (or the admin key, or a share token) is needed.
    #[default]
    Key,
}

impl Auth {
    /// The name used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Public => "public",
            Self::Key => "key",
        }
    }
}

/// What invoking a row may do to the world; projected to MCP annotations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Risk {
    /// Reads only.
    #[default]
    Read,
    /// Changes something that can be changed back.
    Write,
    /// Changes something for good.
    Destructive,
}

impl Risk {
    /// The name used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Destructive => "destructive",
        }
    }
}

/// A stored row, as the directory serves it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Row {
    /// Unique key, `^[A-Z_][A-Z0-9_]{0,63}$`.
    pub key: String,
    /// The runner: `http`, `mcp`, `static` or `builtin`.
    #[serde(rename = "type")]
    pub kind: RowType,
    /// Per type: `"GET https://host/path?x={arg}"`, `"https://host/mcp#tool"`, empty, or a builtin name.
    pub target: String,
    /// Free text, at most 64 characters.
    pub category: String,
    /// `# FIELD: value` docstring lines, then the payload.
    pub content: String,
    /// JSON Schema of the arguments, enforced on invoke.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    // Boxed: a `Value` with ordered maps takes 80 bytes in place, and most rows have none.
    pub args_schema: Option<Box<Value>>,
    /// `public` or `key`.
    pub auth: Auth,
    /// `read`, `write` or `destructive`.
    pub risk: Risk,
    /// Disabled rows cannot be invoked and are never suggested.
    pub enabled: bool,
    /// Hidden rows are invocable but neither suggested nor projected.
    pub planner_visible: bool,
    /// Phrases for which this row is the canonical answer to an ask.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pins: Vec<String>,
    /// Rank below peers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub demote: bool,
    /// The Raft log index of the write that last changed this row.
    pub version: u64,
    /// When the row was first written (RFC 3339, UTC).
    #[schema(value_type = String)]
    pub created_at: Stamp,
    /// When the row was last written (RFC 3339, UTC).
    #[schema(value_type = String)]
    pub updated_at: Stamp,
}

impl Row {
    /// Approximate bytes the row holds in memory: itself and what its strings, schema and
    /// pins allocate, at their capacities (allocator overhead aside). For the memory gauges.
    pub fn heap_bytes(&self) -> usize {
        let strings: usize = [&self.key, &self.target, &self.category, &self.content]
            .iter()
            .map(|s| s.capacity())
            .sum::<usize>()
            + self.created_at.heap_bytes()
            + self.updated_at.heap_bytes();
        let pins = self.pins.capacity() * std::mem::size_of::<String>()
            + self.pins.iter().map(String::capacity).sum::<usize>();
        std::mem::size_of::<Row>()
            + strings
            + pins
            + self
                .args_schema
                .as_deref()
                .map_or(0, |v| value_bytes(v) + std::mem::size_of::<Value>())
    }

    /// A written row as stored: `input` with the server's fields.
    pub fn stored(input: RowInput, version: u64, created_at: Stamp, updated_at: Stamp) -> Row {
        Row {
            key: input.key,
            kind: input.kind,
            target: input.target,
            category: input.category,
            content: input.content,
            args_schema: input.args_schema.map(Box::new),
            auth: input.auth,
            risk: input.risk,
            enabled: input.enabled,
            planner_visible: input.planner_visible,
            pins: input.pins,
            demote: input.demote,
            version,
            created_at,
            updated_at,
        }
    }

    /// Whether the row may be suggested by ask (the operator synonym table is configuration,
    /// never a capability).
    pub fn suggestible(&self) -> bool {
        self.enabled && self.planner_visible && self.key != super::SYNONYMS_KEY
    }

    /// Whether the row is a tool of the MCP projection: suggestible, and its arguments can be
    /// described as an MCP `inputSchema` (absent, or an object schema).
    pub fn mcp_projected(&self) -> bool {
        self.suggestible()
            && match &self.args_schema {
                None => true,
                Some(schema) => schema.get("type").and_then(Value::as_str) == Some("object"),
            }
    }

    /// The docstring fields of `content`, in order.
    pub fn docs(&self) -> Docstring<'_> {
        Docstring::parse(&self.content)
    }
}

/// A row as a client writes it: the server sets `version` and the timestamps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RowInput {
    /// Unique key, `^[A-Z_][A-Z0-9_]{0,63}$`.
    pub key: String,
    /// The runner: `http`, `mcp`, `static` or `builtin`.
    #[serde(rename = "type")]
    pub kind: RowType,
    /// Per type: `"GET https://host/path?x={arg}"`, `"https://host/mcp#tool"`, empty, or a builtin name.
    #[serde(default)]
    pub target: String,
    /// Free text, at most 64 characters.
    #[serde(default)]
    pub category: String,
    /// `# FIELD: value` docstring lines, then the payload; at most 64 KiB.
    #[serde(default)]
    pub content: String,
    /// JSON Schema of the arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub args_schema: Option<Value>,
    /// `public` or `key` (default `key`).
    #[serde(default)]
    pub auth: Auth,
    /// `read` (default), `write` or `destructive`.
    #[serde(default)]
    pub risk: Risk,
    /// Default true.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Default true.
    #[serde(default = "yes")]
    pub planner_visible: bool,
    /// Phrases for which this row is the canonical answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pins: Vec<String>,
    /// Rank below peers.
    #[serde(default)]
    pub demote: bool,
    /// Optimistic concurrency: the write applies only if the stored row has this version
    /// (0: only if the row does not exist). 409 otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub if_version: Option<u64>,
    /// Set by the server; accepted and ignored so that a row read back can be written again.
    #[serde(default, skip_serializing)]
    #[schema(ignore)]
    pub version: Option<u64>,
    /// Set by the server; accepted and ignored.
    #[serde(default, skip_serializing)]
    #[schema(ignore)]
    pub created_at: Option<String>,
    /// Set by the server; accepted and ignored.
    #[serde(default, skip_serializing)]
    #[schema(ignore)]
    pub updated_at: Option<String>,
}

fn yes() -> bool {
    true
}

/// A rule a row input broke; becomes a 422 whose message states the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RowRuleError {
    /// The key does not match `^[A-Z_][A-Z0-9_]{0,63}$`.
    #[error("key {key:?} must match ^[A-Z_][A-Z0-9_]{{0,63}}$ (upper-case letters, digits and _, not starting with a digit, at most 64 characters)")]
    Key {
        /// The key as given.
        key: String,
    },
    /// A field is longer than its limit.
    #[error("{field} of {key} is {len} bytes; the limit is {limit}")]
    TooLong {
        /// The row.
        key: String,
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The target does not fit the row's type.
    #[error("target of {key} ({kind}): {reason}")]
    Target {
        /// The row.
        key: String,
        /// The row's type.
        kind: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// `args_schema` is not a valid JSON Schema.
    #[error("args_schema of {key} is not a valid JSON Schema: {reason}")]
    ArgsSchema {
        /// The row.
        key: String,
        /// What the schema validator said.
        reason: String,
    },
    /// A pin is empty, too long, or there are too many.
    #[error("pins of {key}: {reason}")]
    Pins {
        /// The row.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// The same key appears twice in one bulk write.
    #[error("key {key} appears more than once in one bulk write")]
    DuplicateKey {
        /// The repeated key.
        key: String,
    },
}

/// Whether `key` matches `^[A-Z_][A-Z0-9_]{0,63}$`.
pub fn valid_key(key: &str) -> bool {
    let bytes = key.as_bytes();
    match bytes.first() {
        Some(first) if first.is_ascii_uppercase() || *first == b'_' => {}
        _ => return false,
    }
    bytes.len() <= MAX_KEY_LEN
        && bytes
            .iter()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_')
}

/// Every builtin a row may name as its target.
pub const BUILTINS: [&str; 10] = [
    "now",
    "echo",
    "counts",
    "sha256",
    "base64_encode",
    "base64_decode",
    "uuid",
    "random_int",
    "word_count",
    "node_status",
];

/// Checks the rows of one write (one, or a bulk write) as DESIGN §2.1 says: every row's
/// rules, and no key twice. The error names the position of the row that broke one.
pub fn validate_rows(rows: &[RowInput], builtins: &[&str]) -> Result<(), (usize, RowRuleError)> {
    let mut seen = std::collections::HashSet::new();
    for (position, row) in rows.iter().enumerate() {
        row.validate(builtins).map_err(|e| (position, e))?;
        if !seen.insert(row.key.as_str()) {
            let key = row.key.clone();
            return Err((position, RowRuleError::DuplicateKey { key }));
        }
    }
    Ok(())
}

impl RowInput {
    /// Checks every rule of DESIGN §2.1 that can be checked without the stored state.
    pub fn validate(&self, builtins: &[&str]) -> Result<(), RowRuleError> {
        let key = &self.key;
        if !valid_key(key) {
            return Err(RowRuleError::Key { key: key.clone() });
        }
        let too_long = |field, len, limit| RowRuleError::TooLong {
            key: key.clone(),
            field,
            len,
            limit,
        };
        if self.category.len() > MAX_CATEGORY_LEN {
            return Err(too_long("category", self.category.len(), MAX_CATEGORY_LEN));
        }
        if self.content.len() > MAX_CONTENT_BYTES {
            return Err(too_long("content", self.content.len(), MAX_CONTENT_BYTES));
        }
        if self.target.len() > MAX_TARGET_LEN {
            return Err(too_long("target", self.target.len(), MAX_TARGET_LEN));
        }
        self.validate_target(builtins)?;
        if self.pins.len() > MAX_PINS {
            return Err(RowRuleError::Pins {
                key: key.clone(),
                reason: format!("{} pins; at most {MAX_PINS}", self.pins.len()),
            });
        }
        if let Some(pin) = self
            .pins
            .iter()
            .find(|p| p.trim().is_empty() || p.len() > MAX_PIN_LEN)
        {
            return Err(RowRuleError::Pins {
                key: key.clone(),
                reason: format!("pin {pin:?} must be 1 to {MAX_PIN_LEN} bytes and not blank"),
            });
        }
        if let Some(schema) = &self.args_schema {
            check_schema(schema).map_err(|reason| RowRuleError::ArgsSchema {
                key: key.clone(),
                reason,
            })?;
        }
        Ok(())
    }

    fn validate_target(&self, builtins: &[&str]) -> Result<(), RowRuleError> {
        let fail = |reason: String| RowRuleError::Target {
            key: self.key.clone(),
            kind: self.kind.as_str(),
            reason,
        };
        let target = self.target.trim();
        match self.kind {
            RowType::Static => Ok(()),
            RowType::Builtin => {
                if builtins.contains(&target) {
                    Ok(())
                } else {
                    Err(fail(format!(
                        "unknown builtin {target:?}; known: {}",
                        builtins.join(", ")
                    )))
                }
            }
            RowType::Http => {
                let (method, url) = target.split_once(' ').ok_or_else(|| {
                    fail("must be \"METHOD URL\", e.g. \"GET https://host/path?q={q}\"".into())
                })?;
                const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];
                if !METHODS.contains(&method) {
                    return Err(fail(format!(
                        "method {method:?} must be one of {}",
                        METHODS.join(", ")
                    )));
                }
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(fail(format!(
                        "URL {url:?} must start with http:// or https://"
                    )));
                }
                Ok(())
            }
            RowType::Mcp => {
                let (url, tool) = target.split_once('#').ok_or_else(|| {
                    fail("must be \"URL#tool\", e.g. \"https://host/mcp#search\"".into())
                })?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(fail(format!(
                        "URL {url:?} must start with http:// or https://"
                    )));
                }
                if tool.is_empty() {
                    return Err(fail("the tool name after # is empty".into()));
                }
                Ok(())
            }
        }
    }
}

/// Checks that `schema` is a valid JSON Schema (against its draft's meta-schema) that the
/// validator can compile; the error names what is wrong.
pub fn check_schema(schema: &Value) -> Result<(), String> {
    if !(schema.is_object() || schema.is_boolean()) {
        return Err("a schema must be a JSON object (or true/false)".into());
    }
    jsonschema::meta::validate(schema).map_err(|e| e.to_string())?;
    jsonschema::validator_for(schema).map_err(|e| e.to_string())?;
    Ok(())
}

/// The docstring fields that lead a row's content.
pub const DOC_FIELDS: [&str; 8] = [
    "WHAT", "ARGS", "RETURNS", "EXAMPLE", "AUTH", "RISK", "ERRORS", "SEE",
];

/// The `# FIELD: value` lines that lead `content`, and the payload after them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Docstring<'a> {
    /// `(FIELD, value)` in order of appearance; FIELD upper-cased.
    pub fields: Vec<(&'static str, &'a str)>,
    /// Everything after the docstring lines, with one leading blank line removed.
    pub payload: &'a str,
}

impl<'a> Docstring<'a> {
    /// Splits `content` into docstring fields and payload. The first line that is not a
    /// `# FIELD: value` line of a known field ends the docstring.
    pub fn parse(content: &'a str) -> Self {
        let mut fields = Vec::new();
        let mut rest = content;
        while !rest.is_empty() {
            let (line, after) = match rest.find('\n') {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (rest, ""),
            };
            match parse_doc_line(line) {
                Some(field) => fields.push(field),
                None => break,
            }
            rest = after;
        }
        let payload = rest
            .strip_prefix("\r\n")
            .or_else(|| rest.strip_prefix('\n'))
            .unwrap_or(rest);
        Self { fields, payload }
    }

    /// The first value of `field`, if present.
    pub fn get(&self, field: &str) -> Option<&'a str> {
        self.fields
            .iter()
            .find(|(f, _)| *f == field)
            .map(|(_, v)| *v)
    }

    /// The WHAT line, or "" when the row has none.
    pub fn what(&self) -> &'a str {
        self.get("WHAT").unwrap_or("")
    }
}

fn parse_doc_line(line: &str) -> Option<(&'static str, &str)> {
    let body = line.trim_end_matches('\r').strip_prefix('#')?.trim_start();
    let (name, value) = body.split_once(':')?;
    let name = name.trim();
    let field = DOC_FIELDS.iter().find(|f| f.eq_ignore_ascii_case(name))?;
    Some((field, value.trim()))
}

#[cfg(test)]
impl Row {
    /// A public, enabled, visible row of `kind` for tests; adjust the rest with struct update
    /// syntax.
    pub(crate) fn fixture(key: &str, kind: RowType, content: &str) -> Row {
        Row {
            key: key.into(),
            kind,
            target: String::new(),
            category: String::new(),
            content: content.into(),
            args_schema: None,
            auth: Auth::Public,
            risk: Risk::Read,
            enabled: true,
            planner_visible: true,
            pins: Vec::new(),
            demote: false,
            version: 1,
            created_at: Stamp::from(""),
            updated_at: Stamp::from(""),
        }
    }
}

impl fmt::Display for RowType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a JSON value allocates: strings at capacity, arrays' slots, and each object entry's
/// key, value and index slot (an insertion-ordered map: a hash, the entry, an index).
fn value_bytes(value: &Value) -> usize {
    use std::mem::size_of;
    match value {
        Value::String(s) => s.capacity(),
        Value::Array(items) => {
            items.capacity() * size_of::<Value>() + items.iter().map(value_bytes).sum::<usize>()
        }
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| {
                size_of::<(u64, String, Value)>()
                    + size_of::<usize>()
                    + k.capacity()
                    + value_bytes(v)
            })
            .sum(),
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(key: &str) -> RowInput {
        serde_json::from_value(serde_json::json!({"key": key, "type": "static"})).unwrap()
    }

    #[test]
    fn keys_follow_the_rule() {
        for good in ["A", "_", "TIME_NOW", "A1_B2", &"A".repeat(64)] {
            assert!(valid_key(good), "{good}");
        }
        for bad in ["", "a", "1A", "TIME-NOW", "TIME NOW", "ÄB", &"A".repeat(65)] {
            assert!(!valid_key(bad), "{bad}");
        }
        let err = input("lower").validate(&[]).unwrap_err();
        assert!(err.to_string().contains("^[A-Z_][A-Z0-9_]{0,63}$"), "{err}");
    }

    #[test]
    fn defaults_are_key_auth_read_enabled_visible() {
        let row = input("X");
        assert_eq!(row.auth, Auth::Key);
        assert_eq!(row.risk, Risk::Read);
        assert!(row.enabled && row.planner_visible && !row.demote);
    }

    #[test]
    fn unknown_fields_are_refused_but_server_fields_are_ignored() {
        let typo = serde_json::from_value::<RowInput>(
            serde_json::json!({"key": "X", "type": "static", "catgory": "x"}),
        );
        assert!(typo.unwrap_err().to_string().contains("catgory"));
        let round_trip = serde_json::from_value::<RowInput>(serde_json::json!({
            "key": "X", "type": "static", "version": 3,
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"
        }));
        assert!(round_trip.is_ok());
    }

    #[test]
    fn targets_are_checked_per_type() {
        let mut row = input("X");
        row.kind = RowType::Http;
        row.target = "https://example.com".into();
        assert!(matches!(
            row.validate(&[]),
            Err(RowRuleError::Target { .. })
        ));
        row.target = "GET https://example.com/q?x={x}".into();
        assert!(row.validate(&[]).is_ok());
        row.kind = RowType::Mcp;
        row.target = "https://example.com/mcp#search".into();
        assert!(row.validate(&[]).is_ok());
        row.target = "https://example.com/mcp".into();
        assert!(row.validate(&[]).is_err());
        row.kind = RowType::Builtin;
        row.target = "now".into();
        assert!(row.validate(&["now"]).is_ok());
        assert!(row.validate(&["echo"]).is_err());
    }

    #[test]
    fn invalid_schemas_are_refused() {
        let mut row = input("X");
        row.args_schema =
            Some(serde_json::json!({"type": "object", "properties": {"a": {"type": "strung"}}}));
        assert!(matches!(
            row.validate(&[]),
            Err(RowRuleError::ArgsSchema { .. })
        ));
        row.args_schema = Some(serde_json::json!([1, 2]));
        assert!(matches!(
            row.validate(&[]),
            Err(RowRuleError::ArgsSchema { .. })
        ));
        row.args_schema = Some(
            serde_json::json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}),
        );
        assert!(row.validate(&[]).is_ok());
    }

    #[test]
    fn content_over_64_kib_is_refused() {
        let mut row = input("X");
        row.content = "x".repeat(MAX_CONTENT_BYTES + 1);
        assert!(matches!(
            row.validate(&[]),
            Err(RowRuleError::TooLong {
                field: "content",
                ..
            })
        ));
    }

    #[test]
    fn docstring_splits_fields_from_payload() {
        let doc = Docstring::parse(
            "# WHAT: Current time\n# args: none\n\n{\"a\":1}\n# WHAT: not a doc\n",
        );
        assert_eq!(doc.what(), "Current time");
        assert_eq!(doc.get("ARGS"), Some("none"));
        assert_eq!(doc.payload, "{\"a\":1}\n# WHAT: not a doc\n");
        let bare = Docstring::parse("just a payload");
        assert_eq!(bare.what(), "");
        assert_eq!(bare.payload, "just a payload");
    }
}
