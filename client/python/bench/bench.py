"""Calls/s and p50/p99 of ask, contract and invoke through rowcall.AsyncClient against the
raw generated stubs (grpc.aio, rowcall.v1.api_pb2_grpc) on the same node, at 1 and 16
concurrent callers.

    python bench/bench.py HOST:PORT [SECONDS_PER_CELL]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

import grpc.aio
from rowcall.v1 import api_pb2, api_pb2_grpc

import rowcall


async def measure(
    op: Callable[[], Awaitable[object]], callers: int, seconds: float
) -> tuple[float, float, float, int]:
    """Answered calls per second, p50 and p99 (ms) of the answered ones, and the number of
    failed calls (counted, not timed: a benchmark reports errors rather than stopping)."""
    latencies: list[float] = []
    failed = 0
    end = time.perf_counter() + seconds

    async def caller() -> None:
        nonlocal failed
        while time.perf_counter() < end:
            t = time.perf_counter()
            try:
                await op()
            except (rowcall.RowcallError, grpc.aio.AioRpcError) as e:
                failed += 1
                if failed == 1:
                    print(f"first failure: {e}", file=sys.stderr)
                continue
            latencies.append(time.perf_counter() - t)

    start = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    elapsed = time.perf_counter() - start
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return len(latencies) / elapsed, statistics.median(latencies) * 1000, p99 * 1000, failed


async def main(address: str, seconds: float) -> None:
    client = rowcall.AsyncClient([address])
    channel = grpc.aio.insecure_channel(address)
    stub = api_pb2_grpc.DispatchStub(channel)  # type: ignore[no-untyped-call]
    # The same credential both ways (ROWCALL_ADMIN_KEY): quotas per address are small.
    key = os.environ.get("ROWCALL_ADMIN_KEY", "")
    md = [("authorization", f"Bearer {key}")] if key else []
    ops: dict[str, tuple[Callable[[], Awaitable[object]], Callable[[], Awaitable[object]]]] = {
        "ask": (
            lambda: client.ask("what time is it"),
            lambda: stub.Ask(api_pb2.AskRequest(ask="what time is it"), timeout=5, metadata=md),
        ),
        "contract": (
            lambda: client.contract("TIME_NOW"),
            lambda: stub.Contract(api_pb2.ContractRequest(key="TIME_NOW"), timeout=5, metadata=md),
        ),
        "invoke": (
            lambda: client.invoke("ECHO"),
            lambda: stub.Invoke(api_pb2.InvokeRequest(key="ECHO"), timeout=5, metadata=md),
        ),
    }
    print(
        "| call | callers | client calls/s | client p50 ms | client p99 ms | client failed "
        "| raw calls/s | raw p50 ms | raw p99 ms | raw failed |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, (ours, raw) in ops.items():
        for callers in (1, 16):
            await measure(ours, callers, 0.3)
            a = await measure(ours, callers, seconds)
            await measure(raw, callers, 0.3)
            b = await measure(raw, callers, seconds)
            print(
                f"| {name} | {callers} | {a[0]:.0f} | {a[1]:.2f} | {a[2]:.2f} | {a[3]} "
                f"| {b[0]:.0f} | {b[1]:.2f} | {b[2]:.2f} | {b[3]} |"
            )
    await client.close()
    await channel.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 3.0))
