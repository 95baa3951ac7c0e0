"""Runs the review tests look at, and checks that they hold the verdicts those tests rely on.

``build_demo_run`` writes one run with four claims whose verdicts cover the review's cases: a PASS
baseline, a PASS class-B patch, a FLAG (class-B lever headlined as a kernel win: downgraded, still
banked) and a FAIL whose evidence line holds a ``<script>`` (a server that reports hostile text in its
server_info), plus a bundle claim whose lever decomposition names the patches. ``build_variant``
writes a second run of the same plan with a different candidate, for paired comparisons.
"""

from __future__ import annotations

import json
from pathlib import Path

from auditor_cases import BASE_INFO, BASE_TPUT, CAND_TPUT, reps

from perfwarden.auditor.audit import audit_path, write_verdict
from perfwarden.formats import seal
from perfwarden.orchestrator.synth import COHERENT_TEXTS, write_claim, write_leg, write_manifest

EVIL = "<script>window.__pwned=1</script>"
"""Hostile text a server (or generated output) could put into a file the auditor cites."""
CAND_INFO = {**BASE_INFO, "max_batch_size": 8, "port": 8101}
PATCH = {"producer": "config_tuner", "legs": {"baseline": "base", "candidate": "cand"},
         "headline": {"metric": "output_throughput", "value": 10.0, "kind": "e2e"}}


def demo_key(run: Path) -> Path:
    """The demo run's seal key: beside the run (never inside it), so any test can verify its seal."""
    return run.parent / f"{run.name}.seal.key"


def build_demo_run(run: Path, *, save: bool = True, cand_tput: list[float] | None = None,
                   run_id: str = "demo", sealed: bool = True) -> Path:
    """Write the demo run (and its verdicts when ``save``); returns the run directory. ``sealed``: written
    through the harness's seal like a recorded run (else an unsealed, imported-looking run)."""
    if sealed:
        seal.begin(run, key_file=demo_key(run))
    # target 'synthetic': the legs hold the fixture builder's server_info (top-level host/port), which the
    # embedded server never writes (auditor/data/target_keys.json)
    write_manifest(run, run_id=run_id, target="synthetic", model="SmolLM2-135M-Instruct")
    write_leg(run, "base", "baseline", BASE_INFO, reps("base", BASE_TPUT, 0), outputs=COHERENT_TEXTS)
    write_leg(run, "cand", "candidate", CAND_INFO, reps("cand", cand_tput or CAND_TPUT, 1), outputs=COHERENT_TEXTS,
              overlay={"config": {"max_batch_size": 8}}, parent="base")
    write_leg(run, "evil", "candidate", {**CAND_INFO, "attn_implementation": EVIL}, reps("evil", CAND_TPUT, 1),
              outputs=COHERENT_TEXTS, overlay={"config": {"max_batch_size": 8}}, parent="base")
    write_claim(run, {"scope": "baseline", "seq": 1, "legs": {"baseline": "base"}})
    write_claim(run, {**PATCH, "scope": "patch", "seq": 2,
                      "lever": {"name": "max_batch_size=8", "lever_class": "B", "config_keys": ["max_batch_size"]}})
    write_claim(run, {**PATCH, "scope": "patch", "seq": 3,
                      "lever": {"name": "fused_batching", "lever_class": "A", "config_keys": ["max_batch_size"]},
                      "headline": {"metric": "output_throughput", "value": 10.0, "kind": "kernel"}})
    write_claim(run, {**PATCH, "scope": "patch", "seq": 4, "legs": {"baseline": "base", "candidate": "evil"},
                      "lever": {"name": "mbs8_attn", "lever_class": "B", "config_keys": ["max_batch_size"]}})
    seal.forget(run)
    if save:
        save_verdicts(run)
    return run


def save_verdicts(run: Path) -> list[Path]:
    """Audit every claim in seq order, saving each verdict before the next (bundles read them)."""
    claims = sorted((run / "claims").glob("*.json"))
    return [write_verdict(run, audit_path(run, claim, key=_key(run))) for claim in claims]


def _key(run: Path) -> Path | None:
    return demo_key(run) if demo_key(run).is_file() else None


def add_bundle(run: Path) -> Path:
    """A bundle claim over the accepted patch, audited and saved (seq 5)."""
    claim = write_claim(run, {**PATCH, "scope": "bundle", "seq": 5,
                              "lever": {"name": "bundle", "lever_class": "B", "config_keys": ["max_batch_size"],
                                        "components": ["max_batch_size=8", "never_accepted"]}})
    return write_verdict(run, audit_path(run, claim, key=_key(run)))


def build_variant(run: Path) -> Path:
    """The same plan measured again with a slower candidate: the patch's win shrinks to noise."""
    return build_demo_run(run, cand_tput=[100.4, 99.8, 100.9, 100.2, 99.6], run_id="demo-rerun")


def verdict_labels(run: Path) -> dict[str, tuple[str, str]]:
    out = {}
    for path in sorted((run / "verdicts").glob("*.json")):
        v = json.loads(path.read_text())
        out[path.stem] = (v["verdict"], v["action"])
    return out


def test_demo_run_holds_the_verdicts_the_review_tests_rely_on(tmp_path):
    run = build_demo_run(tmp_path / "run")
    add_bundle(run)
    labels = verdict_labels(run)
    assert labels["001-baseline"] == ("PASS", "pass")
    assert labels["002-patch"] == ("PASS", "pass")
    assert labels["003-patch"] == ("FLAG", "downgrade_headline")
    assert labels["004-patch"][0] == "FAIL"
    assert labels["005-bundle"][0] == "FAIL"
    evil = json.loads((run / "verdicts" / "004-patch.json").read_text())
    excerpts = [e["excerpt"] for f in evil["findings"] for e in f["evidence"] if e.get("excerpt")]
    assert any(EVIL in x for x in excerpts), "the FAIL must cite the hostile line for the escaping tests"


def test_variant_run_changes_the_patch_verdict(tmp_path):
    run = build_variant(tmp_path / "run")
    labels = verdict_labels(run)
    assert labels["002-patch"][0] != "PASS"
