"""Where shipped data lives, in one place (works from a source checkout and an installed package)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def default_fixture_roots() -> list[Path]:
    """The shipped proof fixtures (package data of perfwarden.proof)."""
    import perfwarden.proof

    return [Path(perfwarden.proof.__file__).resolve().parent / "fixtures"]


def shared_corpus() -> Path:
    """``../shared/corpus`` beside the checkout (present in CI and on developer machines)."""
    return REPO_ROOT.parent / "shared" / "corpus"
