"""Interop: rowcall's MCP projection driven by the official Python SDK (`mcp` from PyPI).

Usage: mcp_interop.py URL_NODE1 URL_NODE2 MCP_TOKEN ADMIN_KEY

Against a two-node cluster: lists every page of both modes, calls a tool, checks that its
receipt confirms over HTTP, and receives notifications/tools/list_changed on a session held
on node 1 after a row is inserted through node 2's HTTP API. Any failure exits non-zero.
"""

import asyncio
import json
import sys
import urllib.request
from contextlib import asynccontextmanager

from mcp import ClientSession

try:  # mcp >= 1.24: the transport takes a configured HTTP client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    @asynccontextmanager
    async def connect(url, token):
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
            async with streamable_http_client(url, http_client=http) as streams:
                yield streams[0], streams[1]

except ImportError:  # older releases
    from mcp.client.streamable_http import streamablehttp_client

    @asynccontextmanager
    async def connect(url, token):
        async with streamablehttp_client(url, headers={"Authorization": f"Bearer {token}"}) as streams:
            yield streams[0], streams[1]


WITHIN = 20  # seconds: a failure bound, not a timing claim


def check(condition, what):
    if not condition:
        raise SystemExit(f"FAIL: {what}")
    print(f"ok: {what}")


async def list_all(session):
    tools, cursor, pages = [], None, 0
    while True:
        if cursor is None:
            page = await session.list_tools()
        else:
            try:
                page = await session.list_tools(cursor=cursor)
            except TypeError:  # newer signature
                from mcp import types

                page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor))
        pages += 1
        tools.extend(page.tools)
        cursor = page.nextCursor if hasattr(page, "nextCursor") else page.next_cursor
        if not cursor:
            return tools, pages


def http_json(method, url, body=None, key=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("content-type", "application/json")
    if key:
        request.add_header("x-terminal-key", key)
    with urllib.request.urlopen(request, timeout=WITHIN) as response:
        return json.loads(response.read())


def structured(result):
    value = getattr(result, "structuredContent", None)
    if value is None:
        value = getattr(result, "structured_content", None)
    return value


def is_error(result):
    value = getattr(result, "isError", None)
    return getattr(result, "is_error", value)


async def main(url1, url2, token, admin):
    changed = asyncio.Event()

    async def on_message(message):
        method = getattr(getattr(message, "root", message), "method", None)
        if method == "notifications/tools/list_changed":
            changed.set()

    async with connect(f"{url1}/api/mcp", token) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            init = await session.initialize()
            version = getattr(init, "protocolVersion", None) or getattr(init, "protocol_version", None)
            check(version == "2025-11-25", f"rows mode initialised (protocol {version})")
            tools, pages = await list_all(session)
            names = [t.name for t in tools]
            check(pages > 1 and names == sorted(names), f"rows mode: {len(tools)} tools in {pages} page(s), key order")
            check("TIME_NOW" in names, "TIME_NOW is a tool")

            result = await session.call_tool("TIME_NOW", {})
            body = structured(result)
            check(not is_error(result) and body and body.get("ok") is True, "TIME_NOW ran")
            confirm = body["proof"]["confirm"]
            confirmed = http_json("GET", confirm)
            check(confirmed.get("confirmed") is True and confirmed.get("key") == "TIME_NOW", "its receipt confirms over HTTP")

            http_json("POST", f"{url2}/api/directory", {
                "key": "INTEROP_ROW", "type": "static", "auth": "public",
                "content": "# WHAT: A row inserted through node 2 during the interop run\n\n{}",
            }, key=admin)
            await asyncio.wait_for(changed.wait(), WITHIN)
            check(True, "list_changed arrived on node 1 after an insert through node 2")
            tools, _ = await list_all(session)
            check("INTEROP_ROW" in [t.name for t in tools], "the next tools/list shows the new row")

    async with connect(f"{url2}/api/mcp/compact", token) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools, pages = await list_all(session)
            check([t.name for t in tools] == ["search", "contract", "invoke"], "compact mode: search, contract, invoke")
            found = await session.call_tool("search", {"query": "what time is it"})
            check(structured(found)["best"]["key"] == "TIME_NOW", "compact search finds TIME_NOW")
            ran = await session.call_tool("invoke", {"key": "INTEROP_ROW"})
            check(not is_error(ran) and structured(ran)["ok"] is True, "compact invoke runs the new row on node 2")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    asyncio.run(main(*sys.argv[1:]))
    print("interop: all checks passed")
