"""JSON in protobuf (``google.protobuf.Struct`` / ``Value``) and rows between JSON and the
gRPC messages, as the Rust client converts them (``rowcall_proto::json``, ``rows.rs``).

A whole number that a double holds exactly comes back as an ``int`` (``3``, not ``3.0``), so
a schema or an argument survives the round trip as the caller wrote it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, cast

from google.protobuf import struct_pb2

from .errors import ArgumentError
from .v1 import types_pb2

#: Largest integer a double holds exactly.
_EXACT = 2.0**53

JsonObject = dict[str, Any]


def to_value(value: Any) -> struct_pb2.Value:
    """A JSON value as a protobuf ``Value``; anything JSON cannot hold is an ArgumentError."""
    out = struct_pb2.Value()
    if value is None:
        out.null_value = struct_pb2.NULL_VALUE
    elif isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int | float):
        out.number_value = float(value)
    elif isinstance(value, str):
        out.string_value = value
    elif isinstance(value, list | tuple):
        out.list_value.values.extend(to_value(v) for v in value)
    elif isinstance(value, Mapping):
        out.struct_value.CopyFrom(to_struct(value))
    else:
        raise ArgumentError(f"{type(value).__name__} is not JSON: {value!r}")
    return out


def to_struct(mapping: Mapping[str, Any]) -> struct_pb2.Struct:
    """A JSON object as a ``Struct``."""
    out = struct_pb2.Struct()
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise ArgumentError(f"a JSON object's keys are strings, not {key!r}")
        out.fields[key].CopyFrom(to_value(value))
    return out


def from_value(value: struct_pb2.Value) -> Any:
    """A protobuf ``Value`` as JSON (an unset value is ``None``)."""
    kind = value.WhichOneof("kind")
    if kind == "bool_value":
        return value.bool_value
    if kind == "number_value":
        n = value.number_value
        if math.isfinite(n) and n.is_integer() and abs(n) <= _EXACT:
            return int(n)
        return n if math.isfinite(n) else None
    if kind == "string_value":
        return value.string_value
    if kind == "list_value":
        return [from_value(v) for v in value.list_value.values]
    if kind == "struct_value":
        return from_struct(value.struct_value)
    return None


def from_struct(struct: struct_pb2.Struct) -> JsonObject:
    """A ``Struct`` as a JSON object."""
    return {key: from_value(value) for key, value in struct.fields.items()}


def _text(row: dict[str, Any], name: str) -> str | None:
    value = row.pop(name, None)
    if value is None or isinstance(value, str):
        return value
    raise ArgumentError(f"{name} must be a string, not {value!r}")


def _flag(row: dict[str, Any], name: str) -> bool | None:
    value = row.pop(name, None)
    if value is None or isinstance(value, bool):
        return value
    raise ArgumentError(f"{name} must be true or false, not {value!r}")


def row_input(row: Mapping[str, Any] | types_pb2.RowInput) -> types_pb2.RowInput:
    """A JSON row (as ``GET /api/directory/{key}`` answers it, or written by hand) as a
    ``RowInput``. Fields the server sets (``version``, ``created_at``, ``updated_at``) are
    ignored, so a row read back can be written again; any other unknown field is an error.
    A ``RowInput`` is passed through."""
    if isinstance(row, types_pb2.RowInput):
        return row
    if not isinstance(row, Mapping):
        raise ArgumentError(f"a row is a JSON object, not {row!r}")
    fields = dict(row)
    out = types_pb2.RowInput(key=_text(fields, "key") or "", type=_text(fields, "type") or "")
    for name in ("target", "category", "content", "auth", "risk"):
        text = _text(fields, name)
        if text is not None:
            setattr(out, name, text)
    for name in ("enabled", "planner_visible", "demote"):
        flag = _flag(fields, name)
        if flag is not None:
            setattr(out, name, flag)
    schema = fields.pop("args_schema", None)
    if schema is not None:
        if not isinstance(schema, Mapping):
            raise ArgumentError(f"args_schema must be an object, not {schema!r}")
        out.args_schema.CopyFrom(to_struct(schema))
    pins = fields.pop("pins", None)
    if pins is not None:
        if not isinstance(pins, list) or not all(isinstance(p, str) for p in pins):
            raise ArgumentError(f"pins must be a list of strings, not {pins!r}")
        out.pins.extend(cast(list[str], pins))
    if_version = fields.pop("if_version", None)
    if if_version is not None:
        if isinstance(if_version, bool) or not isinstance(if_version, int) or if_version < 0:
            raise ArgumentError(f"if_version must be a whole number, not {if_version!r}")
        out.if_version = if_version
    for ignored in ("version", "created_at", "updated_at"):
        fields.pop(ignored, None)
    if fields:
        unknown = next(iter(fields))
        raise ArgumentError(f"unknown field {unknown!r} in row {out.key!r}")
    return out


def row_json(row: types_pb2.Row) -> JsonObject:
    """A row as JSON, in the shape the HTTP protocol uses."""
    out: JsonObject = {
        "key": row.key,
        "type": row.type,
        "target": row.target,
        "category": row.category,
        "content": row.content,
    }
    if row.HasField("args_schema"):
        out["args_schema"] = from_struct(row.args_schema)
    out.update(
        auth=row.auth,
        risk=row.risk,
        enabled=row.enabled,
        planner_visible=row.planner_visible,
        pins=list(row.pins),
        demote=row.demote,
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
    return out
