"""When a write is hedged: the same delays as the Rust client's for the same recent write
times (the cases of ``client/src/hedge.rs``'s own tests)."""

from __future__ import annotations

import pytest

from rowcall._core import WriteLatencies

CEILING = 0.5


def ms(n: float) -> float:
    return n / 1000


def test_a_new_session_waits_the_ceiling_until_it_has_seen_enough_writes() -> None:
    latencies = WriteLatencies()
    assert latencies.hedge_after(CEILING) == CEILING
    for _ in range(WriteLatencies.MIN_SAMPLES - 1):
        latencies.record(ms(10))
    assert latencies.hedge_after(CEILING) == CEILING
    latencies.record(ms(10))
    assert latencies.hedge_after(CEILING) == pytest.approx(ms(30))


def test_the_delay_follows_the_slow_tail_of_recent_writes_within_floor_and_ceiling() -> None:
    latencies = WriteLatencies()
    # 90 of 100 writes at 4 ms, the rest at 20 ms: p90 of the last 64 is 20 ms.
    for i in range(100):
        latencies.record(ms(20) if i % 10 == 9 else ms(4))
    assert latencies.hedge_after(CEILING) == pytest.approx(ms(60))
    for _ in range(WriteLatencies.WINDOW):  # fast writes: never below the floor
        latencies.record(ms(0.5))
    assert latencies.hedge_after(CEILING) == pytest.approx(ms(25))
    for _ in range(WriteLatencies.WINDOW):  # slow writes everywhere: never above the ceiling
        latencies.record(ms(400))
    assert latencies.hedge_after(CEILING) == CEILING
    assert latencies.hedge_after(ms(10)) == ms(10)  # a ceiling under the floor wins


def test_only_the_latest_writes_count() -> None:
    latencies = WriteLatencies()
    for _ in range(WriteLatencies.WINDOW):
        latencies.record(ms(100))
    for _ in range(WriteLatencies.WINDOW):
        latencies.record(ms(10))
    assert latencies.hedge_after(CEILING) == pytest.approx(ms(30))
