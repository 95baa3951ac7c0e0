"""Shared test setup.

Every test gets its own seal key store (``PERFWARDEN_KEY_DIR``): runs recorded in tests are sealed
(``perfwarden.harness.seal``) and their keys must never land in the user's real key store.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_key_store(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PERFWARDEN_KEY_DIR", str(tmp_path_factory.mktemp("keys")))
