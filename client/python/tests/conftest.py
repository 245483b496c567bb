"""Fixtures: one 3-node cluster of the real rowcall-node for the session (tests that kill a
node start it again before they end), and helpers."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from cluster import ADMIN_KEY, Cluster


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    c = Cluster(n=3).start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="session")
def admin_key() -> str:
    return ADMIN_KEY
