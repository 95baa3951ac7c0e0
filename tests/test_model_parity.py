"""No downgrade buys leniency (issue 27 §3): the legs of one comparison share one writer, one version, the
identities their records state and every witness; a leg stripped of one is refused, never checked less."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec
import pytest

from perfwarden.auditor.evidence import RunLoader
from perfwarden.auditor.model import parity
from perfwarden.auditor.model.schema import evidence_model
from perfwarden.formats.jsonl import FOREIGN_STATED, BenchRunLine, ForeignBenchRunLine

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "proof" / "fixtures" / "seal-rec-clean" / "run"


def test_a_foreign_line_is_read_for_exactly_the_fields_the_model_judges():
    model = evidence_model().record("bench_line")
    judged = {name for name, g in model.entries(foreign=True) if g.role in ("identity", "condition")}
    measured = {name for name, g in model.entries(foreign=True) if g.role == "measurement"}
    added = {f.name for f in msgspec.structs.fields(ForeignBenchRunLine)} - \
        {f.name for f in msgspec.structs.fields(BenchRunLine)}
    assert judged == set(FOREIGN_STATED)  # what says which run it was is held across the legs
    assert added == judged | measured  # and every field read beyond the schema has a role that is judged


def _legs(tmp_path: Path, edit_cand=None, drop: tuple[str, ...] = ()) -> tuple[Path, object, object]:
    run = tmp_path / "run"
    shutil.copytree(RECORDED, run)
    path = run / "legs" / "mbs4" / "bench_runs.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    for line in lines:
        for key in drop:
            line.pop(key, None)
        if edit_cand:
            edit_cand(line)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    loader = RunLoader(run)
    return run, loader.leg("base", need_outputs=True), loader.leg("mbs4", need_outputs=True)


def _found(run, base, cand, sealed=False) -> list[tuple[str, str]]:
    return [(f.code, f.severity) for f in parity.check_parity(run, base, cand, sealed).findings]


def test_a_recording_holds_one_writer_and_every_witness_in_both_legs(tmp_path):
    assert _found(*_legs(tmp_path), sealed=True) == []


@pytest.mark.parametrize("edit", [
    lambda line: line.update(schema_version=2, ended_at=line["started_at"] + line["loadgen"]["wall_s"],
                             server_counters=None),
    lambda line: line["contention"]["start"].update(ncpu=64),
    lambda line: line.update(backend="sglang")])
def test_another_writer_or_identity_in_one_leg_is_another_experiment(tmp_path, edit):
    assert ("CONDITIONS_DIFFER", "FAIL") in _found(*_legs(tmp_path, edit))


@pytest.mark.parametrize("drop", [("issue_delays",), ("prompt_ids",), ("contention",)])
def test_a_witness_stripped_from_one_leg_is_missing_evidence(tmp_path, drop):
    run, base, cand = _legs(tmp_path, drop=drop)
    found = parity.check_parity(run, base, cand).findings
    assert [(f.code, f.severity, f.action) for f in found] == [("EVIDENCE_MISSING", "FLAG", "remeasure")]
    assert found[0].message.startswith("leg 'mbs4' lacks")


def test_the_server_logs_witnesses_are_held_where_the_run_is_sealed(tmp_path):
    run, base, cand = _legs(tmp_path)
    log = run / "legs" / "mbs4" / "server.log"
    log.write_text("".join(x for x in log.read_text().splitlines(keepends=True) if "effective_config" not in x))
    cand = RunLoader(run).leg("mbs4", need_outputs=True)
    assert _found(run, base, cand, sealed=False) == []
    assert _found(run, base, cand, sealed=True) == [("EVIDENCE_MISSING", "FLAG")]
