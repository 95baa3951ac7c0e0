"""A run optimizes the objective it sealed at its start (design §2, §4 "Objectives"): every step's headline
states it, goodput is judged at the sealed SLO and no other, a latency objective wins by going down, the
study follows its direction, a resume keeps it, and the report and the review say what it was. On the
synthetic target (orchestrator/simlab.py: TTFT 80 ms x each knob's TTFT effect, throughput 100 tok/s x its
throughput effect); the real targets keep their own end-to-end runs (test_embedded_run_e2e, test_vllm_e2e).
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import msgspec
import numpy as np
import optuna
import pytest
from typer.testing import CliRunner

from perfwarden.agents import own_figures, search
from perfwarden.auditor.audit import audit_path, load_claim
from perfwarden.auditor.goodput import good_requests
from perfwarden.cli.main import app
from perfwarden.formats.jsonl import BenchRunLine
from perfwarden.formats.objective import RunObjective
from perfwarden.formats.seal import find_key_file
from perfwarden.formats.slo import GoodputSlo, parse_slo
from perfwarden.orchestrator.exit_codes import ExitCode
from perfwarden.orchestrator.review.model import load_review
from perfwarden.orchestrator.runner import RunUsageError, run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab
from perfwarden.orchestrator.synth import make_rep

SLO = parse_slo("ttft_ms=150,tpot_ms=50")
"""Met by every request at the synthetic baseline's 80 ms TTFT; by none at batch_wait_ms's 2.5x (200 ms)."""
LEVERS = ["max_batch_size=2", "batch_wait_ms"]


def settings(**kw) -> RunSettings:
    return RunSettings(target="synthetic", kernels=False, **kw)


@pytest.fixture(scope="module")
def goodput_run(tmp_path_factory) -> tuple[Path, dict]:
    run = tmp_path_factory.mktemp("goodput") / "run"
    return run, run_graph(run, settings(levers=LEVERS, objective="goodput", slo=SLO), SyntheticLab())


def audit(run: Path, claim: Path):
    return audit_path(run, claim, claim_root=run, key=find_key_file(run))


def patch_claim(run: Path, state: dict, name: str) -> Path:
    verdict = next(v for v in state["verdicts"] if v.scope == "patch" and v.lever == name)
    return run / verdict.claim


def forged(run: Path, claim: Path, tmp_path: Path, **headline) -> Path:
    """The claim with its headline fields replaced, written beside the run's claims."""
    data = json.loads(claim.read_text())
    data["headline"].update(headline)
    out = run / "claims" / f"forged-{len(list((run / 'claims').iterdir()))}.json"
    out.write_text(json.dumps(data))
    return out


def codes(verdict, severity: str = "FAIL") -> set[str]:
    return {f.code for f in verdict.findings if f.severity == severity}


# ------------------------------------------------------------------------------------------ the run


def test_goodput_run_banks_what_meets_the_slo_and_refuses_what_breaks_it(goodput_run, tmp_path):
    run, state = goodput_run
    assert [b.name for b in state["banked"]] == ["cfg-max_batch_size=2"]
    assert state["banked"][0].headline_rederived_pct > 20
    refused = {r.name: r.reason for r in state["rejected"]}
    assert "cfg-batch_wait_ms=5.0" in refused
    for v in state["verdicts"]:
        if v.scope in ("patch", "bundle"):
            headline = json.loads((run / v.claim).read_text())["headline"]
            assert (headline["metric"], headline["slo"]) == ("request_goodput", SLO.model_dump())
    sealed = [json.loads(line) for line in (run / "evidence.jsonl").read_text().splitlines()]
    assert any(e.get("file") == "objective.json" for e in sealed)  # sealed before the first leg
    assert RunObjective.model_validate_json((run / "objective.json").read_text()).slo == SLO
    # the same levers under the throughput objective bank the TTFT trade-off goodput refuses
    thr = run_graph(tmp_path / "throughput", settings(levers=LEVERS), SyntheticLab())
    assert "cfg-batch_wait_ms=5.0" in [b.name for b in thr["banked"]]


def test_a_goodput_of_zero_is_judged_not_missing_evidence(goodput_run, tmp_path):
    run, state = goodput_run
    loser = next(v for v in state["verdicts"] if v.lever == "cfg-batch_wait_ms=5.0")
    assert loser.verdict == "FAIL" and "DELTA_REGRESSION" in loser.codes() and "EVIDENCE_MISSING" not in loser.codes()
    # a baseline no request of which meets the SLO: any gain over it is unjudgeable as a ratio
    lab = SyntheticLab(effects={"batch_wait_ms": {"tput": 1.0, "ttft": 0.5}})
    strict = run_graph(tmp_path / "strict", settings(levers=["batch_wait_ms"], objective="goodput",
                                                     slo=parse_slo("ttft_ms=70")), lab)
    verdict = next(v for v in strict["verdicts"] if v.scope == "patch")
    assert verdict.verdict == "FAIL" and "DELTA_NOT_SIGNIFICANT" in verdict.codes()
    assert "EVIDENCE_MISSING" not in verdict.codes() and strict["banked"] == []


def test_a_tail_latency_objective_banks_what_lowers_it_and_the_study_minimizes(tmp_path):
    lab = SyntheticLab(effects={"max_batch_size": {"tput": 1.5}, "batch_wait_ms": {"tput": 1.0, "ttft": 0.6}})
    run = tmp_path / "run"
    state = run_graph(run, settings(levers=LEVERS, objective="ttft_p99", sampler="tpe", study_startup=1,
                                    max_proposals=3), lab)
    banked = {b.name: b for b in state["banked"]}
    assert banked and all("batch_wait_ms" in b.config for b in banked.values()), banked  # what lowers TTFT
    assert all(b.headline_rederived_pct < -30 for b in banked.values())  # lower is the win
    tried = [p for p in state["proposals"] if set(p.config) == {"max_batch_size"}]
    assert all(p.status != "banked" for p in tried)  # a throughput win alone is no TTFT win
    study = optuna.load_study(study_name=search.STUDY_NAME, storage=search.storage_url(run))
    assert study.direction == optuna.study.StudyDirection.MINIMIZE
    report = json.loads((run / "report.json").read_text())
    assert report["objective"] == {"objective": "ttft_p99", "metric": "p99_ttft_ms", "higher_is_better": False,
                                   "slo": None}


# ------------------------------------------------------------------------------------------ the auditor


def test_goodput_is_judged_at_the_sealed_slo_and_no_other(goodput_run, tmp_path):
    run, state = goodput_run
    honest = patch_claim(run, state, "cfg-max_batch_size=2")
    verdict = audit(run, honest)
    assert verdict.verdict == "PASS" and verdict.goodput.source == "sealed" and verdict.goodput.slo == SLO
    looser = {"ttft_ms": 1000.0, "tpot_ms": 50.0}
    for slo in (looser, None):  # another SLO, or none stated
        v = audit(run, forged(run, honest, tmp_path, slo=slo))
        assert v.verdict == "FAIL" and "CONDITIONS_MISREPORTED" in codes(v), slo
    v = audit(run, forged(run, honest, tmp_path, metric="output_throughput", slo=None))
    assert "CONDITIONS_MISREPORTED" in codes(v, "FLAG") and v.verdict != "PASS"  # not the run's objective


def test_a_coherent_forgery_of_the_slo_is_tampering(goodput_run, tmp_path):
    """The claim and objective.json both moved to a looser SLO, every witness at once: the seal refuses it,
    and so it does when objective.json is removed instead."""
    src, state = goodput_run
    run = tmp_path / "run"
    shutil.copytree(src, run)
    claim = forged(run, run / patch_claim(src, state, "cfg-max_batch_size=2").relative_to(src), tmp_path,
                   slo={"ttft_ms": 1000.0, "tpot_ms": 50.0})
    (run / "objective.json").write_text(json.dumps({"schema_version": 1, "objective": "goodput",
                                                    "slo": {"ttft_ms": 1000.0, "tpot_ms": 50.0}}))
    key = find_key_file(src)
    moved = audit_path(run, claim, claim_root=run, key=key)
    assert moved.verdict == "FAIL" and "EVIDENCE_TAMPERED" in codes(moved)
    (run / "objective.json").unlink()
    gone = audit_path(run, claim, claim_root=run, key=key)
    assert gone.verdict == "FAIL" and codes(gone) & {"EVIDENCE_TAMPERED", "EVIDENCE_MISSING"}


def test_a_goodput_figure_of_a_run_that_sealed_no_slo_is_refused(tmp_path):
    run = tmp_path / "run"
    state = run_graph(run, settings(levers=["max_batch_size=2"]), SyntheticLab())
    claim = patch_claim(run, state, "cfg-max_batch_size=2")
    v = audit(run, forged(run, claim, tmp_path, metric="request_goodput", slo=SLO.model_dump()))
    assert v.verdict == "FAIL" and "EVIDENCE_MISSING" in codes(v)
    assert any("sets no SLO" in f.message for f in v.findings)


def test_the_producer_and_the_auditor_count_good_requests_alike_as_vllm_does():
    """Two implementations apart (agents/own_figures.rep_goodput, auditor/goodput.good_requests) and vLLM's
    loop transcribed (vllm/benchmarks/serve.py calculate_metrics): the same count on lines with one-token
    outputs (TPOT 0), failed requests, and values on the limit (a limit met exactly is good)."""
    rng = random.Random(3)
    for k in range(40):
        line = make_rep("leg", k, throughput=50.0, ttft_ms=100.0, tpot_ms=30.0, n_requests=12, output_len=8,
                        errors=k % 3, jitter=0.3)
        line["output_lens"][0] = 1
        line["latencies"][0] = line["ttfts"][0]
        slo = GoodputSlo(ttft_ms=rng.choice([90.0, 100.0, round(line["ttfts"][1] * 1000, 6)]),
                         tpot_ms=rng.choice([None, 30.0]), e2el_ms=rng.choice([None, 400.0]))
        decoded = msgspec.json.decode(json.dumps(line), type=BenchRunLine)
        ok = [i for i, e in enumerate(line["errors"]) if not e]
        vllm = 0
        for i in ok:
            tpot = (line["latencies"][i] - line["ttfts"][i]) / (line["output_lens"][i] - 1) \
                if line["output_lens"][i] > 1 else 0.0
            pairs = [(slo.ttft_ms, line["ttfts"][i]), (slo.tpot_ms, tpot), (slo.e2el_ms, line["latencies"][i])]
            vllm += all(limit / 1000 >= value for limit, value in pairs if limit is not None)
        audited = good_requests(*(np.asarray([line[a][i] for i in ok], dtype=float)
                                  for a in ("ttfts", "latencies", "output_lens")), slo)
        assert own_figures.rep_goodput(decoded, slo) == pytest.approx(vllm / line["duration"])
        assert audited == vllm


# ------------------------------------------------------------------------------------------ CLI, resume, report


@pytest.mark.parametrize("args,code,says", [
    (["--objective", "fastest"], ExitCode.USAGE, "unknown objective"),
    (["--objective", "goodput"], ExitCode.INVALID, "needs an SLO"),
    (["--objective", "goodput", "--slo", "ttft_ms=fast"], ExitCode.INVALID, "bad --slo"),
    (["--slo", "ttft_ms=500"], ExitCode.INVALID, "goodput objective only"),
])
def test_an_objective_that_cannot_be_run_is_refused_before_anything_starts(tmp_path, args, code, says):
    out = tmp_path / "run"
    done = CliRunner().invoke(app, ["run", "--target", "synthetic", "--out", str(out), *args])
    assert done.exit_code == code and says in done.output and not out.exists()


def test_a_resume_keeps_the_sealed_objective(goodput_run, tmp_path):
    src, _ = goodput_run
    run = tmp_path / "run"
    shutil.copytree(src, run)
    done = CliRunner().invoke(app, ["run", "--resume", str(run), "--objective", "ttft_p99"])
    assert done.exit_code == ExitCode.INVALID and "cannot change it on --resume" in done.output
    done = CliRunner().invoke(app, ["run", "--resume", str(run), "--slo", "ttft_ms=1000,tpot_ms=50"])
    assert done.exit_code == ExitCode.INVALID and "cannot change it on --resume" in done.output
    edited = json.loads((run / "settings.json").read_text())
    (run / "settings.json").write_text(json.dumps({**edited, "slo": {"ttft_ms": 1000.0, "tpot_ms": 50.0}}))
    with pytest.raises(RunUsageError, match="sealed the objective"):
        run_graph(run, settings(), SyntheticLab(), resume=True)
    (run / "settings.json").write_text(json.dumps(edited))
    assert run_graph(run, settings(), SyntheticLab(), resume=True)["stage"] == "done"  # unchanged: it resumes


def test_report_and_review_show_the_objective_and_its_slo(goodput_run):
    run, _ = goodput_run
    report = json.loads((run / "report.json").read_text())
    assert report["objective"] == {"objective": "goodput", "metric": "request_goodput", "higher_is_better": True,
                                   "slo": {"ttft_ms": 150.0, "tpot_ms": 50.0}}
    assert report["headlines"]["B"][0]["headline_delta_pct"] > 20
    text = (run / "report.md").read_text()
    assert "Objective: **goodput** (request_goodput, higher is better) at the SLO ttft <= 150 ms, tpot <= 50 ms" in text
    assert "cfg-max_batch_size=2: request_goodput +" in text
    review = load_review(run)
    assert review.objective is not None and review.objective.slo == SLO
    done = CliRunner().invoke(app, ["review", str(run)])
    assert done.exit_code == 0 and "objective: goodput (request_goodput" in done.output
