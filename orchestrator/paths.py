"""Where shipped data lives, in one place (works from a source checkout and an installed package)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def default_fixture_roots() -> list[Path]:
    """The shipped proof fixtures (package data of perfwarden.proof, beside this package in a checkout
    and in an install alike): located, never imported -- the running system imports nothing of proof/."""
    return [REPO_ROOT / "proof" / "fixtures"]


def shared_corpus() -> Path:
    """``shared/corpus`` beside the checkout or beside one of its parents (a git worktree sits a level deeper
    than the checkout it was made from); ``../shared/corpus`` when none exists."""
    for parent in REPO_ROOT.parents:
        if (parent / "shared" / "corpus").is_dir():
            return parent / "shared" / "corpus"
    return REPO_ROOT.parent / "shared" / "corpus"
