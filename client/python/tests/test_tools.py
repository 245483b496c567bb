"""rowcall.tools against the real cluster: an ask's candidates become OpenAI and Anthropic
tools with the rows' JSON Schemas, a model's tool call runs as an invocation with its
receipt, a node's refusal comes back as a failed result the model can read, and an
invocation whose answer was lost is raised (it may have run), never shown as a failure."""

from __future__ import annotations

import asyncio
import json

import pytest
from cluster import ADMIN_KEY, Cluster
from proxy import LossyProxy

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
        assert ran.ok and ran.result == {"base64": "aGk="} and ran.receipt_id.startswith("inv_")
        assert client.confirm(ran.receipt_id).key == "BASE64_ENCODE"
        assert ran.openai()["tool_call_id"] == "call_1"
        assert json.loads(ran.openai()["content"])["receipt"] == ran.receipt_id
        bad = tools.run_call(
            client,
            {"type": "tool_use", "id": "tu_1", "name": "BASE64_ENCODE", "input": {"text": 5}},
        )
        assert not bad.ok and "invalid_args" in (bad.error or "")
        assert bad.anthropic()["is_error"] is True and bad.anthropic()["tool_use_id"] == "tu_1"


def test_async_tools_and_a_lost_answer_is_raised_not_shown_to_the_model(
    cluster: Cluster,
) -> None:
    async def offered_and_refused() -> tuple[list[str], tools.ToolResult]:
        async with rowcall.AsyncClient(cluster.grpc_addrs(), credential=ADMIN_KEY) as client:
            offered = await tools.tools_for_async(client, "encode a text as base64", limit=3)
            unknown = {"type": "tool_use", "id": "tu_2", "name": "PY_NO_SUCH_TOOL", "input": {}}
            return [t.name for t in offered], await tools.run_call_async(client, unknown)

    names, refused = asyncio.run(offered_and_refused())
    assert "BASE64_ENCODE" in names
    assert not refused.ok and "not_found" in (refused.error or "")

    leader = cluster.node(cluster.leader())
    proxy = LossyProxy(("127.0.0.1", leader.grpc))
    try:
        with rowcall.Client([proxy.address], credential=ADMIN_KEY) as client:
            client.status()
            proxy.drop_answers = True
            call = {"type": "tool_use", "id": "tu_3", "name": "ECHO", "input": {"n": 1}}
            with pytest.raises(rowcall.OutcomeUnknown):
                tools.run_call(client, call)
    finally:
        proxy.close()
