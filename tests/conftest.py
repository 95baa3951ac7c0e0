"""Shared test setup.

Every test gets its own seal key store (``PERFWARDEN_KEY_DIR``): runs recorded in tests are sealed
(``perfwarden.harness.seal``) and their keys must never land in the user's real key store.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_key_store(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PERFWARDEN_KEY_DIR", str(tmp_path_factory.mktemp("keys")))


TIER_MARKERS = ("integration", "e2e")
"""Markers that put a test in the slow tier: ``pytest -m "not slow"`` (the developer's fast tier)
leaves them out; ``python -m pytest`` runs every tier."""


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.get_closest_marker(name) for name in TIER_MARKERS) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
