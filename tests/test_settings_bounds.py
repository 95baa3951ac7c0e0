"""Every numeric field of RunSettings has a sane upper bound (``benchmarks/fuzz.py --rundir``).

settings.json is read back on ``run --resume``, so it is input: ``reps`` of 2**63 made a resumed run
measure without end. Out of range is exit 3 naming the field. Each test failed before the bounds.
"""

from __future__ import annotations

import json
import signal

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from perfwarden.cli.main import app
from perfwarden.orchestrator.runner import run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab

TOO_BIG = {"budget_minutes": 1e9, "seed": 2**63, "reps": 2**63, "max_reps": 10**6, "rep_seconds": 1e9,
           "qps": 1e12, "offline_samples": 10**9, "max_tokens": 10**9, "max_baseline_remeasures": 10**6,
           "max_fix_attempts": 10**6, "max_harness_redos": 10**6, "max_proposals": 10**9,
           "recursion_limit": 2**63, "max_red_team_attacks": 10**9, "llm_timeout_s": 1e9,
           "llm_max_retries": 10**6, "llm_max_tokens": 10**9, "study_batch": 10**6, "study_startup": 10**6}
TOO_SMALL = {"budget_minutes": 0, "seed": -1, "reps": 0, "max_reps": 0, "rep_seconds": 0, "qps": 0,
             "offline_samples": 0, "max_tokens": 0, "max_baseline_remeasures": -1, "max_fix_attempts": -1,
             "max_harness_redos": -1, "max_proposals": -1, "recursion_limit": 0, "max_red_team_attacks": -1,
             "llm_timeout_s": 0, "llm_max_retries": -1, "llm_max_tokens": 0, "study_batch": 0, "study_startup": 0}


def test_every_numeric_field_is_bounded():
    numeric = {name for name, f in RunSettings.model_fields.items()
               if any(t in str(f.annotation) for t in ("int", "float"))}
    assert numeric == set(TOO_BIG) == set(TOO_SMALL)  # a new numeric field needs its bound (and a row here)
    unbounded = [name for name in sorted(numeric) if not any(
        getattr(m, "le", None) is not None or getattr(m, "lt", None) is not None
        for m in RunSettings.model_fields[name].metadata)]
    assert unbounded == []


@pytest.mark.parametrize("field, value", [*TOO_BIG.items(), *TOO_SMALL.items(), ("budget_minutes", float("nan")),
                                          ("qps", float("inf"))])
def test_out_of_range_is_refused_naming_the_field(field, value):
    with pytest.raises(ValidationError) as caught:
        RunSettings(**{field: value})
    assert caught.value.errors()[0]["loc"] == (field,)


def test_defaults_are_in_range():
    RunSettings()


def _stuck(signum, frame):
    raise TimeoutError("the resume was still measuring after 60 s")


def test_resuming_a_run_whose_settings_hold_huge_reps_is_exit_3(tmp_path):
    run = tmp_path / "run"
    try:
        run_graph(run, RunSettings(target="synthetic", levers=["max_batch_size=2"], kernels=False),
                  SyntheticLab(crash_after=6), capture_logs=False)
    except KeyboardInterrupt:
        pass
    settings = json.loads((run / "settings.json").read_text())
    (run / "settings.json").write_text(json.dumps({**settings, "reps": 2**63}))
    signal.signal(signal.SIGALRM, _stuck)
    signal.alarm(60)  # before the bounds, the resume measured 2**63 reps: fail instead of hanging
    try:
        result = CliRunner().invoke(app, ["run", "--resume", str(run), "--target", "synthetic"])
    finally:
        signal.alarm(0)
    assert result.exit_code == 3, result.output
    assert "'reps'" in " ".join(result.output.split())


def test_baseline_remeasures_is_an_option_of_run_and_bounded(tmp_path):
    run = tmp_path / "run"
    done = CliRunner().invoke(app, ["run", "--target", "synthetic", "--out", str(run), "--levers", "max_batch_size=2",
                                    "--no-kernels", "--baseline-remeasures", "0"])
    assert done.exit_code == 0, done.output
    assert json.loads((run / "settings.json").read_text())["max_baseline_remeasures"] == 0
    refused = CliRunner().invoke(app, ["run", "--target", "synthetic", "--out", str(tmp_path / "bad"),
                                       "--baseline-remeasures", "-1"])
    assert refused.exit_code == 3 and "max_baseline_remeasures" in " ".join(refused.output.split())


def test_samples_and_max_tokens_are_options_of_run_and_bounded(tmp_path):
    run = tmp_path / "run"
    done = CliRunner().invoke(app, ["run", "--target", "synthetic", "--out", str(run), "--levers", "max_batch_size=2",
                                    "--no-kernels", "--samples", "3", "--max-tokens", "5"])
    assert done.exit_code == 0, done.output
    settings = json.loads((run / "settings.json").read_text())
    assert (settings["offline_samples"], settings["max_tokens"]) == (3, 5)
    for option, field in (("--samples", "offline_samples"), ("--max-tokens", "max_tokens")):
        refused = CliRunner().invoke(app, ["run", "--target", "synthetic", "--out", str(tmp_path / field), option, "0"])
        assert refused.exit_code == 3 and field in " ".join(refused.output.split()), refused.output
        assert not (tmp_path / field).exists()  # refused before the run directory was made
