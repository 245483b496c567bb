//! Builtin runners: small capabilities implemented inside the node.

use base64::Engine;
use rand::Rng;
use serde_json::{json, Map, Value};

use super::RunError;
use crate::catalogue::Counts;
use crate::model::time::{format_ms, now_ms};

pub use crate::catalogue::row::BUILTINS;

/// What a builtin may read of the node.
pub struct Context {
    /// The four counts of the directory.
    pub counts: Counts,
    /// This node's id.
    pub node_id: u64,
    /// The node's applied index.
    pub applied_index: u64,
    /// The leader this node knows of.
    pub leader: Option<u64>,
}

/// Runs builtin `name` on `args` (an object; `body` is offered as `text` when absent).
pub fn run(name: &str, args: &Map<String, Value>, ctx: &Context) -> Result<Value, RunError> {
    match name {
        "now" => {
            let ms = now_ms();
            let utc = format_ms(ms);
            let (date, time) = utc.split_once('T').unwrap_or((&utc, ""));
            Ok(json!({
                "utc": utc,
                "date": date,
                "time": time.trim_end_matches('Z'),
                "zone": "UTC",
                "unix_ms": ms,
            }))
        }
        "echo" => Ok(json!({ "echo": Value::Object(args.clone()) })),
        "counts" => Ok(serde_json::to_value(ctx.counts).unwrap_or(Value::Null)),
        "sha256" => {
            let text = text_arg(args, "text")?;
            Ok(json!({ "sha256": crate::model::receipt::sha256_hex(text.as_bytes()) }))
        }
        "base64_encode" => {
            let text = text_arg(args, "text")?;
            Ok(json!({ "base64": base64::engine::general_purpose::STANDARD.encode(text) }))
        }
        "base64_decode" => {
            let data = text_arg(args, "data")?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .map_err(|e| RunError::BadArgs(format!("data is not base64: {e}")))?;
            match String::from_utf8(bytes) {
                Ok(text) => Ok(json!({ "text": text })),
                Err(e) => Ok(json!({ "hex": hex::encode(e.into_bytes()) })),
            }
        }
        "uuid" => {
            let mut bytes: [u8; 16] = rand::rng().random();
            bytes[6] = (bytes[6] & 0x0f) | 0x40;
            bytes[8] = (bytes[8] & 0x3f) | 0x80;
            let h = hex::encode(bytes);
            Ok(
                json!({ "uuid": format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..]) }),
            )
        }
        "random_int" => {
            let min = int_arg(args, "min")?.unwrap_or(1);
            let max = int_arg(args, "max")?.unwrap_or(100);
            if min > max {
                return Err(RunError::BadArgs(format!(
                    "min ({min}) is greater than max ({max})"
                )));
            }
            Ok(json!({ "value": rand::rng().random_range(min..=max), "min": min, "max": max }))
        }
        "word_count" => {
            let text = text_arg(args, "text")?;
            Ok(json!({
                "words": text.split_whitespace().count(),
                "chars": text.chars().count(),
                "lines": text.lines().count(),
                "bytes": text.len(),
            }))
        }
        "node_status" => Ok(json!({
            "node_id": ctx.node_id,
            "applied_index": ctx.applied_index,
            "leader": ctx.leader,
            "rows_total": ctx.counts.rows_total,
        })),
        other => Err(RunError::UnknownBuiltin(other.to_owned())),
    }
}

fn text_arg<'a>(args: &'a Map<String, Value>, name: &str) -> Result<&'a str, RunError> {
    match args.get(name) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(RunError::BadArgs(format!(
            "{name} must be a string, not {other}"
        ))),
        None => Err(RunError::BadArgs(format!(
            "missing argument {name:?} (a string)"
        ))),
    }
}

fn int_arg(args: &Map<String, Value>, name: &str) -> Result<Option<i64>, RunError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| RunError::BadArgs(format!("{name} must be an integer, not {v}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> Context {
        Context {
            counts: Counts::default(),
            node_id: 1,
            applied_index: 7,
            leader: Some(1),
        }
    }

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn now_reports_utc() {
        let out = run("now", &Map::new(), &ctx()).unwrap();
        assert_eq!(out["zone"], "UTC");
        assert!(out["utc"].as_str().unwrap().ends_with('Z'));
    }

    #[test]
    fn base64_round_trips() {
        let enc = run("base64_encode", &args(json!({"text": "héllo"})), &ctx()).unwrap();
        let dec = run(
            "base64_decode",
            &args(json!({"data": enc["base64"]})),
            &ctx(),
        )
        .unwrap();
        assert_eq!(dec["text"], "héllo");
        assert!(run("base64_decode", &args(json!({"data": "%%%"})), &ctx()).is_err());
    }

    #[test]
    fn bad_arguments_are_errors_not_panics() {
        assert!(run("sha256", &Map::new(), &ctx()).is_err());
        assert!(run("sha256", &args(json!({"text": 5})), &ctx()).is_err());
        assert!(run("random_int", &args(json!({"min": 5, "max": 1})), &ctx()).is_err());
        assert!(run(
            "random_int",
            &args(json!({"min": i64::MIN, "max": i64::MAX})),
            &ctx()
        )
        .is_ok());
        assert!(run("nope", &Map::new(), &ctx()).is_err());
    }
}
