//! Rows between JSON (files, `--json` output, the HTTP protocol's shape) and the gRPC
//! messages.

use rowcall_proto::json;
use rowcall_proto::v1::{Row, RowInput};
use serde_json::{json, Map, Value};

use crate::error::Error;

/// A JSON row (as `GET /api/directory/{key}` answers it, or as written by hand) as a
/// [`RowInput`]. Fields the server sets (`version`, `created_at`, `updated_at`) are ignored,
/// so a row read back can be written again; any other unknown field is an error.
///
/// ```
/// let row = serde_json::json!({"key": "HELLO", "type": "static", "content": "# WHAT: hi\n\nhi"});
/// let input = rowcall_client::row_input(row)?;
/// assert_eq!(input.key, "HELLO");
/// assert_eq!(input.enabled, None); // the node's default applies
/// # Ok::<(), rowcall_client::Error>(())
/// ```
pub fn row_input(row: Value) -> Result<RowInput, Error> {
    let Value::Object(mut fields) = row else {
        return Err(Error::Argument(format!(
            "a row is a JSON object, not {row}"
        )));
    };
    let mut take = |name: &str| fields.remove(name);
    let text = |value: Option<Value>, name: &str| -> Result<Option<String>, Error> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(Error::Argument(format!(
                "{name} must be a string, not {other}"
            ))),
        }
    };
    let flag = |value: Option<Value>, name: &str| -> Result<Option<bool>, Error> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(other) => Err(Error::Argument(format!(
                "{name} must be true or false, not {other}"
            ))),
        }
    };
    let input = RowInput {
        key: text(take("key"), "key")?.unwrap_or_default(),
        r#type: text(take("type"), "type")?.unwrap_or_default(),
        target: text(take("target"), "target")?,
        category: text(take("category"), "category")?,
        content: text(take("content"), "content")?,
        args_schema: match take("args_schema") {
            None | Some(Value::Null) => None,
            Some(Value::Object(schema)) => Some(json::to_struct(schema)),
            Some(other) => {
                return Err(Error::Argument(format!(
                    "args_schema must be an object, not {other}"
                )))
            }
        },
        auth: text(take("auth"), "auth")?,
        risk: text(take("risk"), "risk")?,
        enabled: flag(take("enabled"), "enabled")?,
        planner_visible: flag(take("planner_visible"), "planner_visible")?,
        pins: match take("pins") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .into_iter()
                .map(|p| text(Some(p), "pins[]").map(Option::unwrap_or_default))
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(Error::Argument(format!("pins must be a list, not {other}")))
            }
        },
        demote: flag(take("demote"), "demote")?,
        if_version: match take("if_version") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().ok_or_else(|| {
                Error::Argument(format!("if_version must be a whole number, not {v}"))
            })?),
        },
    };
    for ignored in ["version", "created_at", "updated_at"] {
        fields.remove(ignored);
    }
    if let Some(unknown) = fields.keys().next() {
        return Err(Error::Argument(format!(
            "unknown field {unknown:?} in row {:?}",
            input.key
        )));
    }
    Ok(input)
}

/// A row as JSON, in the shape the HTTP protocol uses.
///
/// ```
/// let row = rowcall_client::proto::Row { key: "HELLO".into(), r#type: "static".into(), ..Default::default() };
/// assert_eq!(rowcall_client::row_json(&row)["type"], "static");
/// ```
pub fn row_json(row: &Row) -> Value {
    let mut out = json!({
        "key": row.key,
        "type": row.r#type,
        "target": row.target,
        "category": row.category,
        "content": row.content,
    });
    if let (Some(schema), Value::Object(map)) = (&row.args_schema, &mut out) {
        map.insert(
            "args_schema".into(),
            Value::Object(json::from_struct(schema.clone())),
        );
    }
    let rest: Map<String, Value> = [
        ("auth", json!(row.auth)),
        ("risk", json!(row.risk)),
        ("enabled", json!(row.enabled)),
        ("planner_visible", json!(row.planner_visible)),
        ("pins", json!(row.pins)),
        ("demote", json!(row.demote)),
        ("version", json!(row.version)),
        ("created_at", json!(row.created_at)),
        ("updated_at", json!(row.updated_at)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    if let Value::Object(map) = &mut out {
        map.extend(rest);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_read_back_writes_again_and_junk_is_named() {
        let row = json!({"key": "K", "type": "static", "args_schema": {"type": "object", "minimum": 3},
                         "pins": ["p"], "version": 9, "updated_at": "x", "enabled": false});
        let input = row_input(row).unwrap();
        assert_eq!(input.enabled, Some(false));
        assert_eq!(input.pins, ["p"]);
        let schema = Value::Object(json::from_struct(input.args_schema.unwrap()));
        assert_eq!(schema.to_string(), r#"{"minimum":3,"type":"object"}"#);
        let e = row_input(json!({"key": "K", "type": "static", "colour": 1})).unwrap_err();
        assert!(e.to_string().contains("unknown field \"colour\""), "{e}");
        let e = row_input(json!({"key": "K", "enabled": "yes"})).unwrap_err();
        assert!(
            e.to_string().contains("enabled must be true or false"),
            "{e}"
        );
    }
}
