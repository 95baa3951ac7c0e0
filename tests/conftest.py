"""Shared test setup.

Every test gets its own seal key store (``PERFWARDEN_KEY_DIR``): runs recorded in tests are sealed
(``perfwarden.formats.seal``) and their keys must never land in the user's real key store.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from embedded_alone_run import AloneRun


@pytest.fixture(autouse=True)
def _private_key_store(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PERFWARDEN_KEY_DIR", str(tmp_path_factory.mktemp("keys")))


@pytest.fixture(scope="session")
def embedded_alone(tmp_path_factory: pytest.TempPathFactory) -> AloneRun:
    """The real embedded run the quiet tests check (``embedded_alone_run``), made at most once a session.
    Session-scoped fixtures are set up before module-scoped ones, so it runs before any test's own servers
    or cluster start."""
    from embedded_alone_run import run_alone  # the auditor's contention rule: imported by the tests that run it

    return run_alone(Path(tmp_path_factory.mktemp("embedded-alone")))


TIER_MARKERS = ("integration", "e2e", "quiet")
"""Markers that put a test in the slow tier: ``pytest -m "not slow"`` (the developer's fast tier)
leaves them out; ``python -m pytest`` and ``scripts/test.sh`` run every tier. ``quiet`` tests judge
real timings: ``scripts/test.sh`` runs them alone, after every other test."""


HEAVIEST_FIRST = ("e2e", "integration", "slow")
"""Files holding a test with these markers run first, in this order: xdist hands out files in collection
order, so the long ones start at once instead of ending the run on one busy worker (longest first)."""


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.get_closest_marker(name) for name in TIER_MARKERS) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
    rank: dict[object, int] = {}  # a file's rank: that of its heaviest test
    for item in items:
        mine = next((i for i, name in enumerate(HEAVIEST_FIRST) if item.get_closest_marker(name)), len(HEAVIEST_FIRST))
        rank[item.path] = min(mine, rank.get(item.path, mine))
    # stable: a file's tests stay together and in their order (its module fixtures are set up once)
    items.sort(key=lambda item: rank[item.path])
