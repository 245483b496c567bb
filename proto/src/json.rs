//! JSON in protobuf: `google.protobuf.Struct` / `Value` to and from `serde_json`, for the
//! fields of the public API that carry JSON (arguments, results, schemas, contracts).
//!
//! Protobuf numbers are doubles. A whole number that a double holds exactly comes back as a
//! JSON integer (`3`, not `3.0`), so a schema or an argument survives the round trip as the
//! caller wrote it; integers beyond 2^53 cannot travel exactly, as in JavaScript.

use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Value};
use serde_json::{Map, Number};

/// Largest integer a double holds exactly.
const EXACT: f64 = 9_007_199_254_740_992.0;

/// A JSON object as a `Struct`.
pub fn to_struct(map: Map<String, serde_json::Value>) -> Struct {
    Struct {
        fields: map.into_iter().map(|(k, v)| (k, to_value(v))).collect(),
    }
}

/// A JSON value as a protobuf `Value`.
pub fn to_value(value: serde_json::Value) -> Value {
    let kind = match value {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN)),
        serde_json::Value::String(s) => Kind::StringValue(s),
        serde_json::Value::Array(items) => Kind::ListValue(ListValue {
            values: items.into_iter().map(to_value).collect(),
        }),
        serde_json::Value::Object(map) => Kind::StructValue(to_struct(map)),
    };
    Value { kind: Some(kind) }
}

/// A `Struct` as a JSON object.
pub fn from_struct(s: Struct) -> Map<String, serde_json::Value> {
    s.fields
        .into_iter()
        .map(|(k, v)| (k, from_value(v)))
        .collect()
}

/// A protobuf `Value` as JSON (an unset value is `null`).
pub fn from_value(value: Value) -> serde_json::Value {
    match value.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::BoolValue(b)) => serde_json::Value::Bool(b),
        Some(Kind::NumberValue(n)) => number(n),
        Some(Kind::StringValue(s)) => serde_json::Value::String(s),
        Some(Kind::ListValue(list)) => {
            serde_json::Value::Array(list.values.into_iter().map(from_value).collect())
        }
        Some(Kind::StructValue(s)) => serde_json::Value::Object(from_struct(s)),
    }
}

fn number(n: f64) -> serde_json::Value {
    if n.fract() == 0.0 && n.abs() <= EXACT {
        // Exact by the check above: the cast loses nothing.
        return serde_json::Value::Number(Number::from(n as i64));
    }
    // NaN and infinities have no JSON form.
    Number::from_f64(n).map_or(serde_json::Value::Null, serde_json::Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_survives_the_round_trip_with_whole_numbers_whole() {
        let original = json!({"a": 3, "b": -2.5, "c": [true, null, "x", {"d": 1_000_000_000_000_000_i64}], "e": {}});
        let serde_json::Value::Object(map) = original.clone() else {
            unreachable!()
        };
        let back = serde_json::Value::Object(from_struct(to_struct(map)));
        assert_eq!(back, original);
        assert_eq!(back.to_string(), original.to_string());
        assert_eq!(from_value(to_value(json!(0.1))), json!(0.1));
    }
}
