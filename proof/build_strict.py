"""Hand-built fixtures for strict evidence and overlapping legs.

Each case is the light A/B run of ``build_integrity`` (5 interleaved reps per leg, a real +10% win of a
declared knob) with one record written so that two readers could see two things -- a repeated key, a
field its schema does not have, a field of the wrong type, a LoadGen folder named but absent -- or
with the legs' reps overlapping in time, or a near miss that must still PASS (an integer written where
a float goes, keys reordered, sglang's own extra fields in a foreign file, chunked streaming, adjacent
reps, legs declared concurrent). Every answer is in the CASES table below, written
before the auditor was changed to decide them; rebuilding never changes an answer.

    python -m perfwarden.proof.build_strict [--out proof/fixtures]
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

from perfwarden.formats.records import write_json_atomic
from perfwarden.orchestrator.synth import BASE_TPUT, CAND_TPUT, fixture_builder_main, write_case_table
from perfwarden.proof.build_integrity import (QUIET, RUN_T0, edit_lines, foreign, harness_ab, harness_reps, light,
                                              ab)

STEP_S = 10.0
"""Seconds between the starts of consecutive rep slots (a rep here lasts ~1.3 s)."""


# ------------------------------------------------------------------------------------- building


def timed(line: dict, start: float, end: float | None = None) -> dict:
    """Give a rep its recorded start and end (unix seconds); the end defaults to start + duration."""
    line["started_at"] = start
    line["ended_at"] = end if end is not None else start + line["duration"]
    return line


def scheduled(base_starts: list[float], cand_starts: list[float], base_ends: list[float] | None = None,
              cand_ends: list[float] | None = None) -> tuple[list[dict], list[dict]]:
    base = light("base", (BASE_TPUT * 2)[:len(base_starts)], 0)
    cand = light("cand", (CAND_TPUT * 2)[:len(cand_starts)], 1)
    base = [timed(x, s, base_ends[i] if base_ends else None) for i, (x, s) in enumerate(zip(base, base_starts))]
    cand = [timed(x, s, cand_ends[i] if cand_ends else None) for i, (x, s) in enumerate(zip(cand, cand_starts))]
    return base, cand


def interleaved(n_base: int = 5, n_cand: int = 5, cand_shift: float = STEP_S / 2) -> tuple[list[dict], list[dict]]:
    return scheduled([RUN_T0 + 100 + STEP_S * k for k in range(n_base)],
                     [RUN_T0 + 100 + STEP_S * k + cand_shift for k in range(n_cand)])


def edit_text(run: Path, leg: str, fn: Callable[[str], str], name: str = "bench_runs.jsonl") -> None:
    """Rewrite each line of a leg's JSONL file as text (for what ``json.dumps`` cannot write)."""
    path = run / "legs" / leg / name
    lines = [t for t in path.read_text().splitlines() if t.strip()]
    path.write_text("".join(fn(t) + "\n" for t in lines))


def repeat_first(key: str, value: Any) -> Callable[[str], str]:
    """Insert ``"key": value`` as the object's first member (the line keeps its own ``key`` later)."""
    return lambda text: "{" + json.dumps(key) + ": " + json.dumps(value) + ", " + text[1:]


def faster_duration(text: str) -> str:
    """A repeated ``duration``: the line's own, then 20% shorter (a last-value reader sees +25%)."""
    line = json.loads(text)
    return text[:-1] + ', "duration": ' + json.dumps(line["duration"] * 0.8) + "}"


def with_fields(**fields: Any) -> Callable[[dict], dict]:
    return lambda line: {**line, **fields}


def leg_json_text(run: Path, leg: str, fn: Callable[[str], str]) -> None:
    path = run / "legs" / leg / "leg.json"
    path.write_text(fn(path.read_text()))


# ------------------------------------------------------------------------------------- the cases


def _dup_bench_harness(run: Path) -> None:
    harness_ab(run)
    edit_text(run, "cand", faster_duration)


def _dup_bench_foreign(run: Path) -> None:
    ab(run)
    for leg in ("base", "cand"):
        edit_lines(run, leg, foreign)
    edit_text(run, "cand", faster_duration)


def _dup_nested_server_info(run: Path) -> None:
    ab(run)
    edit_lines(run, "cand", with_fields(server_info={"max_batch_size": 8}))
    edit_text(run, "cand", lambda t: t.replace('"server_info": {"max_batch_size": 8}',
                                                '"server_info": {"max_batch_size": 4, "max_batch_size": 8}'))


def _dup_server_info_json(run: Path) -> None:
    ab(run)
    path = run / "legs" / "cand" / "server_info.json"
    text = path.read_text()
    path.write_text(text.replace('"max_batch_size": 8', '"max_batch_size": 4,\n  "max_batch_size": 8', 1))


def _dup_leg_json_status(run: Path) -> None:
    ab(run)
    leg_json_text(run, "cand", lambda t: t.replace('"status": "ok"', '"status": "failed",\n  "status": "ok"', 1))


def _dup_outputs(run: Path) -> None:
    ab(run)
    edit_text(run, "cand", repeat_first("text", "an answer no reader of the first value saw"), "outputs.jsonl")


def _unknown_bench_field(run: Path, **fields: Any) -> None:
    harness_ab(run)
    edit_lines(run, "cand", with_fields(**fields))


def _mixed_foreign_line(run: Path) -> None:
    """The candidate's last rep line rewritten as a foreign writer's: no schema_version, no contention
    sample, no start time, sglang's extra fields -- in a file the harness wrote."""
    harness_ab(run)
    edit_lines(run, "cand", lambda line: {**foreign(line), **SGLANG_EXTRAS} if line["rep"] == 4 else line)


def _unknown_leg_json(run: Path) -> None:
    ab(run)
    spec = json.loads((run / "legs" / "cand" / "leg.json").read_text())
    spec["overlay"]["warmup_reps_dropped"] = 2
    write_json_atomic(run / "legs" / "cand" / "leg.json", spec)


def _loadgen_dir_missing(run: Path) -> None:
    """Both legs name their LoadGen folders; the baseline's exist, the candidate's were removed."""
    harness_ab(run)
    shutil.rmtree(run / "legs" / "cand" / "loadgen")


def _int_as_float(run: Path) -> None:
    base, cand = interleaved()
    for line in base + cand:
        line["started_at"], line["ended_at"] = int(line["started_at"]), int(line["ended_at"]) + 1
        line["ttfts"] = [float(t) for t in line["ttfts"]]
    ab(run, base_reps=base, cand_reps=cand)


def _keys_reordered(run: Path) -> None:
    harness_ab(run)
    for leg in ("base", "cand"):
        edit_lines(run, leg, lambda line: dict(sorted(line.items(), reverse=True)))


SGLANG_EXTRAS = {"tag": None, "total_input_text_tokens": 1024, "total_input_vision_tokens": 0,
                 "total_output_tokens_retokenized": 128, "std_ttft_ms": 3.1, "p90_ttft_ms": 104.0,
                 "p95_ttft_ms": 105.0, "std_e2e_latency_ms": 9.0, "concurrency": 1.2,
                 "max_output_tokens_per_s": 130.0, "max_concurrent_requests": 8}


def _foreign_extras(run: Path) -> None:
    ab(run)
    for leg in ("base", "cand"):
        edit_lines(run, leg, lambda line: {**foreign(line), **SGLANG_EXTRAS})


def _chunked(run: Path) -> None:
    ab(run, base_reps=light("base", BASE_TPUT, 0, itl_chunk=4), cand_reps=light("cand", CAND_TPUT, 1, itl_chunk=4))


def _overlap(run: Path, shift: float) -> None:
    base, cand = interleaved(cand_shift=shift)
    ab(run, base_reps=base, cand_reps=cand)


def _adjacent(run: Path) -> None:
    """Each rep starts exactly when the one before it (of the other leg) ended."""
    base_s, cand_s, t = [], [], RUN_T0 + 100
    base, cand = interleaved()
    for b, c in zip(base, cand):
        base_s.append(t)
        t += b["duration"]
        cand_s.append(t)
        t += c["duration"]
    base, cand = scheduled(base_s, cand_s)
    ab(run, base_reps=base, cand_reps=cand)


def _same_leg_overlap(run: Path) -> None:
    """Baseline reps 0 and 1 overlap each other (one leg, one server); no rep of the other leg does."""
    starts = [RUN_T0 + 100, RUN_T0 + 100.5] + [RUN_T0 + 100 + STEP_S * k for k in range(2, 5)]
    base, cand = scheduled(starts, [RUN_T0 + 100 + STEP_S * k + STEP_S / 2 for k in range(5)])
    ab(run, base_reps=base, cand_reps=cand)


def _declared_concurrent(run: Path) -> None:
    base, cand = interleaved(cand_shift=0.3)
    ab(run, base_reps=base, cand_reps=cand, claim={"legs": {"baseline": "base", "candidate": "cand",
                                                            "concurrent": True}})


# name -> (builder, verdict, action, must_include, must_exclude, rationale)
CASES: dict[str, tuple[Callable[[Path], Any], str, str, list[str], list[str], str]] = {
    # -- 1. strict evidence: one record, one reading
    "strict-dup-bench-harness": (
        _dup_bench_harness, "FAIL", "eject", ["EVIDENCE_CORRUPT"], [],
        "Every candidate line (written by the harness: schema_version 1) repeats 'duration', the second 20% "
        "shorter: a reader keeping the first sees the measured rep, one keeping the last sees +25% throughput. "
        "A harness record with a repeated key is corrupt."),
    "strict-dup-bench-foreign": (
        _dup_bench_foreign, "FAIL", "eject", ["EVIDENCE_CORRUPT"], [],
        "A foreign (sglang bench_serving) file whose candidate lines repeat 'duration': foreign files may "
        "carry fields perfwarden does not know, but a repeated key has two values whichever one a parser keeps."),
    "strict-dup-nested-server-info": (
        _dup_nested_server_info, "FAIL", "eject", ["EVIDENCE_CORRUPT"], [],
        "The candidate lines' embedded server_info says max_batch_size 4 and then 8: the conditions copy has "
        "two readings."),
    "strict-dup-server-info-json": (
        _dup_server_info_json, "FAIL", "eject", ["EVIDENCE_CORRUPT"], [],
        "The candidate's server_info.json repeats max_batch_size (4, then 8): a reader keeping the first sees "
        "the baseline's conditions."),
    "strict-dup-leg-json-status": (
        _dup_leg_json_status, "FAIL", "eject", ["EVIDENCE_CORRUPT"], [],
        "The candidate's leg.json says status 'failed' and then 'ok': a failed leg dressed as a good one for a "
        "last-value reader."),
    "strict-dup-outputs": (
        _dup_outputs, "FAIL", "eject", ["EVIDENCE_CORRUPT"], [],
        "Every candidate parity line carries two 'text' values: parity would be decided on one of them."),
    "strict-unknown-bench-field": (
        lambda r: _unknown_bench_field(r, warmup_reps_excluded=2), "FAIL", "eject", ["EVIDENCE_CORRUPT"], [],
        "Harness-written candidate lines carry 'warmup_reps_excluded', a field the bench line's schema does "
        "not have: the harness never writes it, so someone else did."),
    "strict-unknown-bench-confusable": (
        lambda r: _unknown_bench_field(r, Duration=0.5), "FAIL", "eject", ["EVIDENCE_CORRUPT"], [],
        "Harness-written candidate lines carry 'Duration' beside 'duration' (a case variant a case-insensitive "
        "reader merges): not a field of the schema."),
    "strict-wrong-type": (
        lambda r: _unknown_bench_field(r, completed="8"), "FAIL", "eject", ["EVIDENCE_CORRUPT"], [],
        "Harness-written candidate lines give 'completed' as the string \"8\": a field of the wrong type."),
    "strict-mixed-foreign-line": (
        _mixed_foreign_line, "FAIL", "eject", ["EVIDENCE_CORRUPT"], [],
        "One candidate line of a harness-written bench file (the others carry schema_version 1) is written as "
        "a foreign file's: it would escape the harness schema, the contention sample and the rep clock. One "
        "file has one writer; a harness file with a foreign line is corrupt."),
    "strict-unknown-leg-json": (
        _unknown_leg_json, "FAIL", "eject", ["EVIDENCE_CORRUPT"], [],
        "The candidate's leg.json overlay carries 'warmup_reps_dropped', which no overlay has: a leg spec "
        "with a field its schema does not have."),
    "strict-loadgen-dir-missing": (
        _loadgen_dir_missing, "FAIL", "eject", ["EVIDENCE_MISSING"], [],
        "Every candidate line names its LoadGen folder (legs/cand/loadgen/rep-k) and none exists, while the "
        "baseline's do: evidence a record names was removed."),
    "strict-near-int-as-float": (
        _int_as_float, "PASS", "pass", [], QUIET,
        "Near miss: start and end times written as integers where the schema takes floats: the same number, "
        "not the wrong type."),
    "strict-near-keys-reordered": (
        _keys_reordered, "PASS", "pass", [], QUIET,
        "Near miss: every line's keys in reverse order. JSON objects are unordered; nothing repeats."),
    "strict-near-foreign-extras": (
        _foreign_extras, "PASS", "pass", [], QUIET,
        "Near miss: unsealed foreign sglang files with sglang's own fields perfwarden does not read (tag, "
        "std_*, p90_*, retokenized counts): listed as not checked, not corrupt."),
    "strict-near-chunked": (
        _chunked, "PASS", "pass", [], QUIET,
        "Near miss: chunked streaming (4 tokens per chunk, one ITL gap per chunk)."),
    # -- 4. reps of different legs do not overlap in time
    "strict-overlap-ab": (
        lambda r: _overlap(r, 0.4), "FLAG", "remeasure", ["CONTENDED_LEG"], [],
        "Every candidate rep started 0.4 s after a baseline rep of ~1.3 s: the two servers were measured at "
        "once and contended with each other, though the order still alternates."),
    "strict-near-adjacent": (
        _adjacent, "PASS", "pass", [], QUIET,
        "Near miss: each rep starts exactly when the other leg's rep before it ended: adjacent, not "
        "overlapping."),
    "strict-near-same-leg-overlap": (
        _same_leg_overlap, "PASS", "pass", [], QUIET,
        "Near miss: two baseline reps overlap each other; no rep of the candidate overlaps a baseline rep."),
    "strict-near-declared-concurrent": (
        _declared_concurrent, "PASS", "pass", [], QUIET,
        "Near miss: the reps overlap, and the claim declares its legs concurrent (legs.concurrent): the "
        "overlap is the design, stated, not hidden."),
}


def build_all(out: Path) -> list[str]:
    return write_case_table(out, CASES, frozen="2026-11-26", builder="proof/build_strict.py")


def main() -> None:
    fixture_builder_main(__doc__, build_all, Path(__file__).parent / "fixtures")


if __name__ == "__main__":
    main()
