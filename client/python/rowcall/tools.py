"""Tools for agent frameworks: an ask's candidates and their contracts as tool definitions
for function-calling APIs (OpenAI and Anthropic formats, JSON Schema from ``args_schema``),
and a model's tool call run as an invocation that returns the result and the receipt.

::

  ask ─► candidates ─► contract(key) ─► {name, description, JSON Schema} ─► the model
  the model's tool call ─► invoke(name, args) ─► ToolResult(result, receipt id) ─► the model
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .aio import AsyncClient
from .errors import ArgumentError, Rejected
from .sync import Client

#: The schema of a row without ``args_schema``: any object.
_ANY_OBJECT: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class Tool:
    """One row as a tool: its key (the tool's name), what it does, its argument schema."""

    name: str
    description: str
    parameters: dict[str, Any]

    @classmethod
    def of(cls, contract: Mapping[str, Any]) -> Tool:
        schema = contract.get("args_schema")
        what = str(contract.get("what") or contract["key"])
        description = f"{what} (risk: {contract.get('risk', '?')})"
        return cls(str(contract["key"]), description, dict(schema) if schema else _ANY_OBJECT)

    def openai(self) -> dict[str, Any]:
        """The OpenAI Chat Completions / Responses ``tools`` entry."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def anthropic(self) -> dict[str, Any]:
        """The Anthropic Messages API ``tools`` entry."""
        return {"name": self.name, "description": self.description, "input_schema": self.parameters}


@dataclass(frozen=True)
class ToolResult:
    """A tool call run as an invocation."""

    call_id: str
    name: str
    ok: bool
    result: Any
    error: str | None
    receipt_id: str

    def content(self) -> str:
        """What the model reads: the result (or the error) and the receipt id."""
        body = {"ok": self.ok, "result": self.result, "receipt": self.receipt_id}
        if self.error:
            body["error"] = self.error
        return json.dumps(body)

    def openai(self) -> dict[str, Any]:
        """The ``tool`` message answering an OpenAI tool call."""
        return {"role": "tool", "tool_call_id": self.call_id, "content": self.content()}

    def anthropic(self) -> dict[str, Any]:
        """The ``tool_result`` block answering an Anthropic ``tool_use`` block."""
        return {
            "type": "tool_result",
            "tool_use_id": self.call_id,
            "content": self.content(),
            "is_error": not self.ok,
        }


def parse_call(call: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """``(call id, tool name, arguments)`` of an OpenAI tool call
    (``{"id", "function": {"name", "arguments": "<json>"}}``) or an Anthropic ``tool_use``
    block (``{"type": "tool_use", "id", "name", "input"}``)."""
    if "function" in call:
        function = call["function"]
        raw = function.get("arguments") or "{}"
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError as e:
            raise ArgumentError(f"the tool call's arguments are not JSON: {e}") from e
        name, call_id = function.get("name"), call.get("id", "")
    elif call.get("type") == "tool_use":
        name, call_id, args = call.get("name"), call.get("id", ""), call.get("input") or {}
    else:
        raise ArgumentError("not an OpenAI tool call nor an Anthropic tool_use block")
    if not isinstance(name, str) or not isinstance(args, dict):
        raise ArgumentError("a tool call needs a name and an object of arguments")
    return str(call_id), name, args


def _result(call_id: str, name: str, ran: Any) -> ToolResult:
    error = f"{ran.error.code}: {ran.error.message}" if ran.error is not None else None
    return ToolResult(call_id, name, ran.ok, ran.result, error, ran.receipt_id)


def _refused(call_id: str, name: str, refusal: Rejected) -> ToolResult:
    # A node's refusal (bad arguments, an unknown key, no permission) is the model's to
    # read and fix. Anything else (Unavailable, OutcomeUnknown: the call may have run) is
    # the program's to handle, so it is raised, never shown to the model as a failure.
    return ToolResult(call_id, name, False, None, str(refusal), "")


def tools_for(client: Client, ask: str, limit: int = 5) -> list[Tool]:
    """The tools for a request: the ask's candidates with their contracts."""
    answer = client.ask(ask, limit)
    return [Tool.of(client.contract(c.key)) for c in answer.candidates]


def run_call(client: Client, call: Mapping[str, Any]) -> ToolResult:
    """Runs a model's tool call as an invocation. A refusal (bad arguments, unknown key) is
    returned as a failed result the model can read, not raised; OutcomeUnknown is raised."""
    call_id, name, args = parse_call(call)
    try:
        return _result(call_id, name, client.invoke(name, args))
    except Rejected as e:
        return _refused(call_id, name, e)


async def tools_for_async(client: AsyncClient, ask: str, limit: int = 5) -> list[Tool]:
    """As :func:`tools_for`, for :class:`rowcall.AsyncClient`."""
    answer = await client.ask(ask, limit)
    return [Tool.of(await client.contract(c.key)) for c in answer.candidates]


async def run_call_async(client: AsyncClient, call: Mapping[str, Any]) -> ToolResult:
    """As :func:`run_call`, for :class:`rowcall.AsyncClient`."""
    call_id, name, args = parse_call(call)
    try:
        return _result(call_id, name, await client.invoke(name, args))
    except Rejected as e:
        return _refused(call_id, name, e)
