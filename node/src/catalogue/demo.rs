//! The demo catalogue a fresh one-node cluster starts with: a few rows of every runner this
//! node has, so the four-step loop works out of the box.

use serde_json::json;

use super::row::RowInput;

/// The demo rows.
pub fn rows() -> Vec<RowInput> {
    let text_schema = |what: &str| {
        json!({"type": "object", "properties": {"text": {"type": "string", "description": what}},
               "required": ["text"], "additionalProperties": false})
    };
    let rows = vec![
        json!({"key": "TIME_NOW", "type": "builtin", "target": "now", "category": "Time",
               "content": "# WHAT: Current time, date and zone (UTC)\n# RETURNS: {utc, date, time, zone, unix_ms}\n# EXAMPLE: what time is it\n",
               "auth": "public", "risk": "read", "pins": ["what time is it", "current time"]}),
        json!({"key": "NOW", "type": "builtin", "target": "now", "category": "Time",
               "content": "# WHAT: Now as a Unix timestamp in milliseconds, with the UTC date\n# RETURNS: {utc, date, time, zone, unix_ms}\n",
               "auth": "public", "risk": "read"}),
        json!({"key": "ECHO", "type": "builtin", "target": "echo", "category": "Diagnostics",
               "content": "# WHAT: Echo back the arguments you send, to test a client\n# ARGS: any JSON object\n# RETURNS: {echo: the arguments}\n",
               "auth": "public", "risk": "read"}),
        json!({"key": "DIRECTORY_COUNTS", "type": "builtin", "target": "counts", "category": "Directory",
               "content": "# WHAT: How many capabilities the directory has: total, enabled, planner-visible, MCP-projected\n# RETURNS: {rows_total, enabled, planner_visible, mcp_projected}\n",
               "auth": "public", "risk": "read"}),
        json!({"key": "NODE_STATUS", "type": "builtin", "target": "node_status", "category": "Diagnostics",
               "content": "# WHAT: Which node answered, its applied Raft index and the leader it knows\n",
               "auth": "public", "risk": "read"}),
        json!({"key": "SHA256_HASH", "type": "builtin", "target": "sha256", "category": "Text",
               "content": "# WHAT: SHA-256 hash (checksum, digest) of a text, in hex\n# ARGS: text\n",
               "auth": "public", "risk": "read", "args_schema": text_schema("The text to hash")}),
        json!({"key": "BASE64_ENCODE", "type": "builtin", "target": "base64_encode", "category": "Text",
               "content": "# WHAT: Encode a text as base64\n# ARGS: text\n",
               "auth": "public", "risk": "read", "args_schema": text_schema("The text to encode")}),
        json!({"key": "BASE64_DECODE", "type": "builtin", "target": "base64_decode", "category": "Text",
               "content": "# WHAT: Decode base64 data back to text\n# ARGS: data\n",
               "auth": "public", "risk": "read",
               "args_schema": {"type": "object", "properties": {"data": {"type": "string", "description": "base64 data"}}, "required": ["data"]}}),
        json!({"key": "WORD_COUNT", "type": "builtin", "target": "word_count", "category": "Text",
               "content": "# WHAT: Count the words, characters and lines of a text\n# ARGS: text\n",
               "auth": "public", "risk": "read", "args_schema": text_schema("The text to count")}),
        json!({"key": "UUID_NEW", "type": "builtin", "target": "uuid", "category": "Identifiers",
               "content": "# WHAT: Generate a new random UUID (v4) identifier\n",
               "auth": "public", "risk": "read"}),
        json!({"key": "RANDOM_NUMBER", "type": "builtin", "target": "random_int", "category": "Identifiers",
               "content": "# WHAT: Pick a random whole number between min and max, like rolling a die\n# ARGS: min (default 1), max (default 100)\n",
               "auth": "public", "risk": "read",
               "args_schema": {"type": "object", "properties": {"min": {"type": "integer", "description": "lowest value"}, "max": {"type": "integer", "description": "highest value"}}}}),
        json!({"key": "HTTP_STATUS_CODES", "type": "static", "category": "Reference",
               "content": "# WHAT: Meaning of common HTTP status codes\n\n{\"200\":\"OK\",\"201\":\"Created\",\"204\":\"No Content\",\"301\":\"Moved Permanently\",\"304\":\"Not Modified\",\"400\":\"Bad Request\",\"401\":\"Unauthorized\",\"403\":\"Forbidden\",\"404\":\"Not Found\",\"409\":\"Conflict\",\"413\":\"Content Too Large\",\"422\":\"Unprocessable Content\",\"429\":\"Too Many Requests\",\"500\":\"Internal Server Error\",\"502\":\"Bad Gateway\",\"503\":\"Service Unavailable\"}\n",
               "auth": "public", "risk": "read"}),
        json!({"key": "TIMEZONE_OFFSETS", "type": "static", "category": "Time",
               "content": "# WHAT: UTC offsets of major time zones and cities\n\n{\"UTC\":\"+00:00\",\"London\":\"+00:00/+01:00\",\"Paris\":\"+01:00/+02:00\",\"New York\":\"-05:00/-04:00\",\"San Francisco\":\"-08:00/-07:00\",\"Tokyo\":\"+09:00\",\"Sydney\":\"+10:00/+11:00\",\"Mumbai\":\"+05:30\",\"Singapore\":\"+08:00\"}\n",
               "auth": "public", "risk": "read"}),
        json!({"key": "UNIT_CONVERSIONS", "type": "static", "category": "Reference",
               "content": "# WHAT: Conversion factors between metric and imperial units (length, weight, volume, temperature)\n\n{\"inch_cm\":2.54,\"mile_km\":1.609344,\"pound_kg\":0.45359237,\"gallon_us_l\":3.785411784,\"celsius_to_fahrenheit\":\"F = C * 9/5 + 32\"}\n",
               "auth": "public", "risk": "read"}),
        json!({"key": "ROWCALL_HOW_TO", "type": "static", "category": "Directory",
               "content": "# WHAT: How to use this catalogue: ask, contract, invoke, confirm\n\n1. GET /api/dispatch?ask=<what you need> ranks capabilities.\n2. GET /api/dispatch?key=<KEY> shows one contract.\n3. POST /api/dispatch {\"key\":\"<KEY>\",\"args\":{...}} runs it and returns a proof.\n4. GET /api/dispatch?confirm=<invocation_id> checks a receipt, no credential needed.\n",
               "auth": "public", "risk": "read"}),
        json!({"key": "ISSUE_REPORT_TEMPLATE", "type": "static", "category": "Support",
               "content": "# WHAT: Template for filing a bug report about a broken capability\n\n{\"title\":\"<capability key>: <what went wrong>\",\"steps\":[\"the exact request\",\"the receipt id\"],\"expected\":\"\",\"actual\":\"\"}\n",
               "auth": "public", "risk": "read"}),
        json!({"key": "ONCALL_CONTACT", "type": "static", "category": "Support",
               "content": "# WHAT: Who is on call for the platform this week and how to page them\n# AUTH: needs an invoke key\n\n{\"primary\":\"platform-oncall@example.com\",\"pager\":\"+1-555-0100\"}\n",
               "auth": "key", "risk": "read"}),
        json!({"key": "PURGE_CACHE_EXAMPLE", "type": "static", "category": "Operations",
               "content": "# WHAT: Example of a destructive capability: purge the CDN cache (demo answer only)\n# RISK: destructive\n\n{\"purged\":false,\"note\":\"demo row: shows how destructive rows are marked\"}\n",
               "auth": "key", "risk": "destructive"}),
        json!({"key": "LEGACY_CLOCK", "type": "builtin", "target": "now", "category": "Time",
               "content": "# WHAT: Old clock endpoint kept for compatibility; prefer TIME_NOW\n",
               "auth": "public", "risk": "read", "demote": true}),
        json!({"key": "INTERNAL_DEBUG_ECHO", "type": "builtin", "target": "echo", "category": "Diagnostics",
               "content": "# WHAT: Echo for internal debugging; hidden from ask but invocable by key\n",
               "auth": "key", "risk": "read", "planner_visible": false}),
    ];
    rows.into_iter()
        .map(|v| serde_json::from_value(v).expect("demo rows are valid RowInput"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::builtins::BUILTINS;

    #[test]
    fn demo_rows_pass_validation_and_cover_every_local_runner() {
        let rows = rows();
        assert!((15..=30).contains(&rows.len()));
        for row in &rows {
            row.validate(&BUILTINS).unwrap();
        }
        for key in ["TIME_NOW", "NOW"] {
            assert!(rows.iter().any(|r| r.key == key));
        }
        for builtin in ["now", "echo", "counts"] {
            assert!(rows.iter().any(|r| r.target == builtin));
        }
    }
}
