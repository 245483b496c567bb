"""An agent loop that asks rowcall for the right tools each turn instead of loading all of
them: the user's message is the ask, its candidates become the model's tools, and the
model's tool calls run as invocations whose receipts go back with the results.

    ROWCALL_NODES=127.0.0.1:9081 ANTHROPIC_API_KEY=... python agent_loop.py "what time is it"

Uses the Anthropic Messages API over plain HTTP (no SDK needed). With --dry-run it prints
the tools it would offer and runs nothing on a model.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from typing import Any

import rowcall
from rowcall import tools

MODEL = os.environ.get("ANTHROPIC_MODEL", "claude-sonnet-4-5")


def messages(body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        "https://api.anthropic.com/v1/messages",
        data=json.dumps(body).encode(),
        headers={
            "x-api-key": os.environ["ANTHROPIC_API_KEY"],
            "content-type": "application/json",
            "anthropic-version": "2023-06-01",
        },
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        result: dict[str, Any] = json.load(answer)
        return result


def main(question: str, dry_run: bool) -> None:
    with rowcall.Client() as client:
        conversation: list[dict[str, Any]] = [{"role": "user", "content": question}]
        for _turn in range(5):
            # Each turn: the tools for what is being asked now, not the whole catalogue.
            last = conversation[-1]["content"]
            offered = tools.tools_for(client, last if isinstance(last, str) else question)
            if dry_run:
                print(json.dumps([t.anthropic() for t in offered], indent=2))
                return
            reply = messages(
                {
                    "model": MODEL,
                    "max_tokens": 1024,
                    "messages": conversation,
                    "tools": [t.anthropic() for t in offered],
                }
            )
            conversation.append({"role": "assistant", "content": reply["content"]})
            calls = [b for b in reply["content"] if b.get("type") == "tool_use"]
            if not calls:
                print("".join(b.get("text", "") for b in reply["content"]))
                return
            results = [tools.run_call(client, call) for call in calls]
            for r in results:
                print(f"ran {r.name}: receipt {r.receipt_id}", file=sys.stderr)
            conversation.append({"role": "user", "content": [r.anthropic() for r in results]})


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--dry-run"]
    main(" ".join(args) or "what time is it", "--dry-run" in sys.argv)
