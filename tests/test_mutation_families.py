"""Every mutation family, applied to every clean fixture, gets the answer its definition gives.

The answers live in ``redteam/mutations.py`` (each mutation's verdict, action and codes), fixed before
the auditor ran; the auditor is scored on them exactly as ``perfwarden backtest`` scores a fixture.
A fake win built by any family on any clean fixture must not PASS, and the clean fixtures themselves
must still PASS.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from perfwarden.redteam.mutations import (CLEAN_FIXTURES, COMMITTED, MUTATIONS, SEAL_MUTATIONS, SEALED_COMMITTED,
                                          mutate)
from perfwarden.verify.backtest import score_fixture

FIXTURES = Path(__file__).resolve().parents[1] / "proof" / "fixtures"


@pytest.mark.parametrize("clean", CLEAN_FIXTURES)
def test_clean_fixture_passes(clean):
    results = score_fixture(FIXTURES / clean)
    assert [r.verdict for r in results] == ["PASS"], [r.problems for r in results]


@pytest.mark.slow
@pytest.mark.parametrize("clean", CLEAN_FIXTURES)
def test_every_family_on_every_clean_fixture(clean, tmp_path):
    wrong = []
    for mutation in MUTATIONS:
        fixture = mutate(FIXTURES / clean, tmp_path, mutation)
        for result in score_fixture(fixture):
            if not result.agrees:
                wrong.append(f"{mutation.name}: {result.verdict}/{result.action} {result.codes} -> {result.problems}")
            if mutation.verdict != "PASS":
                assert result.verdict != "PASS", f"{clean} + {mutation.name} PASSed"
    assert not wrong, "\n".join(wrong)


def test_every_family_is_committed_for_one_clean_fixture():
    """proof/fixtures/mutated holds every family applied to at least one clean fixture (so that
    ``perfwarden backtest`` alone exercises each rule), and nothing stale."""
    families = {m.family for m in MUTATIONS}
    committed_all = [name for name, fams in COMMITTED.items() if fams is None]
    assert committed_all and families
    expected = {f"{clean}--{m.name}" for clean, fams in COMMITTED.items() for m in MUTATIONS
                if fams is None or m.family in fams}
    # every seal attack that applies, on each sealed clean fixture (the seal mutations are not applied
    # to unsealed fixtures: there every edit is unseen by design)
    from perfwarden.formats.records import Claim

    for clean in SEALED_COMMITTED:
        run = FIXTURES / clean / "run"
        claim = Claim.model_validate_json(next((run / "claims").glob("*-patch.json")).read_text())
        expected |= {f"{clean}--{m.name}" for m in SEAL_MUTATIONS if m.applies(run, claim)}
    present = {p.name for p in (FIXTURES / "mutated").iterdir() if p.is_dir()}
    assert present == expected
