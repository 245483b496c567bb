"""rowcall.tools against the real cluster: an ask's candidates become OpenAI and Anthropic
tools with the rows' JSON Schemas, and a model's tool call runs as an invocation."""

from __future__ import annotations

import json

from cluster import ADMIN_KEY, Cluster

import rowcall
from rowcall import tools


def test_candidates_become_tools_and_a_tool_call_runs(cluster: Cluster) -> None:
    with rowcall.Client(cluster.grpc_addrs(), credential=ADMIN_KEY) as client:
        offered = tools.tools_for(client, "encode a text as base64", limit=3)
        tool = next(t for t in offered if t.name == "BASE64_ENCODE")
        assert tool.openai()["function"]["parameters"]["required"] == ["text"]
        assert tool.anthropic()["input_schema"]["properties"]["text"]["type"] == "string"
        openai_call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "BASE64_ENCODE", "arguments": '{"text": "hi"}'},
        }
        ran = tools.run_call(client, openai_call)
        assert ran.ok and ran.receipt_id.startswith("inv_")
        assert client.confirm(ran.receipt_id).key == "BASE64_ENCODE"
        assert json.loads(ran.openai()["content"])["receipt"] == ran.receipt_id
        bad = tools.run_call(
            client,
            {"type": "tool_use", "id": "tu_1", "name": "BASE64_ENCODE", "input": {"text": 5}},
        )
        assert not bad.ok and "invalid_args" in (bad.error or "")
        assert bad.anthropic()["is_error"] is True
