"""MLPerf compliance attack fixtures: doctored compliance runs, and near misses.

Each case copies a published (reference, compliance) pair whose official and expected verdict is PASS
and edits LoadGen settings of the compliance run the way a submitter would have to: every copy of a
setting at once (``effective_*`` and ``requested_*`` lines of the detail log, the summary's "Test
Parameters Used" line), so the logs stay consistent with each other and only the rule under test can
refuse them. Answers are in the ``CASES`` table, written from the rule before the auditor was tuned:

- apart from the test's own audit settings, every setting of the compliance run equals the reference
  run's (run length, sample counts, samples per query, issue machinery, seeds the test keeps); a
  difference is CONDITIONS_DIFFER at FAIL, naming the setting;
- the audit settings present are the test's own, at the values its ``audit.config`` sets: another
  test's audit setting, or one of the test's own that is missing, is MLPERF_AUDIT_SETTINGS at FAIL.

Near misses (PASS): a longer run than the reference's, TEST04's own ``min_query_count`` (its
``audit.config`` sets one per model), a different performance hint (expected latency), which only sizes
the run.

    python -m perfwarden.proof.build_mlperf_cases [--out proof/mlperf_fixtures]

The output is a corpus in the shared corpora's layout (``manifest.json`` + ``cases/<id>/``), scored by
``verify/mlperf_cases.py`` with and without ``--test``; ``must_include``/``must_exclude`` name the codes
(at FLAG or FAIL) the verdict must and must not carry.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from perfwarden.orchestrator.paths import shared_corpus
from perfwarden.orchestrator.synth import fixture_builder_main

REPO = Path(__file__).resolve().parents[1]
VENDORED = REPO / "tests" / "data" / "mlperf"
SHARED = shared_corpus() / "mlperf" / "cases"

T04_SS = "test04_r07_v41_singlestream_resnet50_lenovo"
T04_SERVER = "test04_r04_v41_server_resnet50_hpe"
T05_MS = "test05_r06_v41_multistream_retinanet_lenovo"
T04_MS = "test04_r11_v51_multistream_resnet50_lenovo"
T01_SS = "test01_r06_v41_singlestream_3d-unet-99_lenovo"


DELETE = "<delete the line>"
"""An edit value that removes the key's lines from the detail log instead of setting them."""


@dataclass(frozen=True)
class Edit:
    """One LoadGen setting set to ``value`` in every copy the compliance run states it in."""

    detail_keys: tuple[str, ...]
    value: object
    summary_key: str | None = None
    summary_text: str | None = None


@dataclass(frozen=True)
class Case:
    source: str
    test: str
    edits: tuple[Edit, ...]
    expected: tuple[str, ...]
    why: str
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    kind: str = "attack"
    frozen: str = "2026-11-26"


def setting(name: str, value: object, *, requested: str | None = None, summary: str | None = None,
            text: str | None = None) -> Edit:
    """``effective_<name>`` (and ``requested_<requested>`` when given) and the summary line."""
    keys = (f"effective_{name}",) + ((f"requested_{requested}",) if requested else ())
    if text is None and summary is not None:
        text = str(value).lower() if isinstance(value, bool) else str(value)
    return Edit(keys, value, summary, text)


CASES: dict[str, Case] = {
    # ---- settings other than the test's audit settings must equal the reference's
    "mlf-t05-min-duration-short": Case(
        T05_MS, "TEST05",
        (setting("min_duration_ms", 60000, requested="min_duration_ms", summary="min_duration (ms)"),
         setting("target_duration_ms", 60000)),
        ("FAIL",), "TEST05 changes only the RNG seeds; a compliance run of 60 s against a 600 s reference is a "
        "shorter, weaker measurement (less time to heat up, wider early-stopping bounds) under other conditions.",
        include=("CONDITIONS_DIFFER",)),
    "mlf-t04-ms-samples-per-query": Case(
        T04_MS, "TEST04",
        (setting("samples_per_query", 4, requested="multi_stream_samples_per_query", summary="samples_per_query"),),
        ("FAIL",), "MultiStream queries of 4 samples instead of the reference's 8: half the work per query, so the "
        "per-query latency TEST04 compares is not the same measurement.", include=("CONDITIONS_DIFFER",)),
    "mlf-t01-sample-count-smaller": Case(
        T01_SS, "TEST01",
        (setting("performance_sample_count", 8, requested="performance_sample_count_override",
                 summary="performance_sample_count"),),
        ("FAIL",), "TEST01 logs accuracy; it does not change the loaded sample set. A smaller set than the "
        "reference's fits in caches the reference's did not.", include=("CONDITIONS_DIFFER",)),
    "mlf-t04-server-coalesce": Case(
        T04_SERVER, "TEST04", (Edit(("requested_server_coalesce_queries",), False),),
        ("FAIL",), "Coalescing overdue Server queries changes how the load is issued (batches of late queries); "
        "the reference coalesced, the compliance run does not.", include=("CONDITIONS_DIFFER",)),
    "mlf-t01-max-async": Case(
        T01_SS, "TEST01", (setting("max_async_queries", 2, summary="max_async_queries"),),
        ("FAIL",), "Two queries in flight in SingleStream is another scenario in all but name: it overlaps the "
        "latency the score is taken from.", include=("CONDITIONS_DIFFER",)),
    "mlf-t05-min-duration-only-in-summary": Case(
        T05_MS, "TEST05",
        (Edit(("effective_min_duration_ms", "requested_min_duration_ms", "effective_target_duration_ms"), DELETE),
         Edit((), None, "min_duration (ms)", "60000")),
        ("FAIL",), "The shortened run's detail lines are deleted and only the summary states min_duration 60000 "
        "against the reference's 600000: the summary is the second witness of the settings, and a setting "
        "LoadGen prints in every run of this build that one log lacks cannot be shown equal.",
        include=("CONDITIONS_DIFFER",)),
    # ---- the audit settings present are the test's own
    "mlf-t04-foreign-accuracy-seed": Case(
        T04_SS, "TEST04",
        (setting("accuracy_log_rng_seed", 720381539243781796, requested="accuracy_log_rng_seed",
                 summary="accuracy_log_rng_seed"),),
        ("FAIL",), "accuracy_log_rng_seed is TEST01's audit setting; a TEST04 run carrying it was not started with "
        "TEST04's audit.config alone.", include=("MLPERF_AUDIT_SETTINGS",)),
    "mlf-t04-same-index-other": Case(
        T04_SS, "TEST04",
        (setting("performance_issue_same_index", 0, requested="performance_issue_same_index",
                 summary="performance_issue_same_index"),),
        ("FAIL",), "TEST04's audit.config repeats sample index 3 in every scenario; repeating a sample of the "
        "submitter's choosing lets it pick a slow one, which hides a cache in a one-sided test.",
        include=("MLPERF_AUDIT_SETTINGS",)),
    "mlf-t01-rng-seed-missing": Case(
        T01_SS, "TEST01",
        (setting("accuracy_log_rng_seed", 0, requested="accuracy_log_rng_seed", summary="accuracy_log_rng_seed"),),
        ("FAIL",), "TEST01's audit.config sets accuracy_log_rng_seed (which samples are logged); a run without it "
        "was not started with the test's audit.config.", include=("MLPERF_AUDIT_SETTINGS",)),
    "mlf-t01-qsl-seed-changed": Case(
        T01_SS, "TEST01",
        (setting("qsl_rng_seed", 12345, requested="qsl_rng_seed", summary="qsl_rng_seed"),),
        ("FAIL",), "TEST01 keeps LoadGen's seeds; another qsl_rng_seed is TEST05's audit setting in a TEST01 run "
        "(a different sample order than the reference's).", include=("MLPERF_AUDIT_SETTINGS",)),
    "mlf-t05-one-seed-changed": Case(
        T05_MS, "TEST05",
        tuple(setting(s, v, requested=s, summary=s) for s, v in (
            ("qsl_rng_seed", 3066443479025735752), ("sample_index_rng_seed", 10688027786191513374))),
        ("FAIL",), "TEST05 changes all three RNG seeds; here only schedule_rng_seed differs from the reference "
        "(the sample order and the loaded subset are the reference's): two of the test's audit settings are "
        "missing.", include=("MLPERF_AUDIT_SETTINGS",)),
    "mlf-t01-rng-seed-other": Case(
        T01_SS, "TEST01",
        (setting("accuracy_log_rng_seed", 12345, requested="accuracy_log_rng_seed", summary="accuracy_log_rng_seed"),),
        ("FAIL",), "Every TEST01 audit.config, of every model and round, sets accuracy_log_rng_seed to "
        "720381539243781796: another seed picks which samples are logged for the accuracy check, so a submitter "
        "who chose it chose the samples checked.", include=("MLPERF_AUDIT_SETTINGS",), frozen="2026-11-28"),
    "mlf-t01-sampling-target-weakened": Case(
        T01_SS, "TEST01",
        (setting("accuracy_log_sampling_target", 1, requested="accuracy_log_sampling_target",
                 summary="accuracy_log_sampling_target"),),
        ("FAIL",), "TEST01's audit.config sets how many samples are logged for the accuracy check (50 to 4096 per "
        "model); one sample checks almost nothing: the test's own setting weakened.", include=("MLPERF_AUDIT_SETTINGS",),
        frozen="2026-11-28"),
    # ---- near misses: PASS
    "mlf-t05-min-duration-longer": Case(
        T05_MS, "TEST05",
        (setting("min_duration_ms", 900000, requested="min_duration_ms", summary="min_duration (ms)"),
         setting("target_duration_ms", 900000)),
        ("PASS",), "A longer compliance run than the reference's is a stronger measurement of the same load "
        "(MLCommons published such a TEST01 run: test01_r12).", exclude=("CONDITIONS_DIFFER",), kind="near_miss"),
    "mlf-t04-own-min-query-count": Case(
        T04_SS, "TEST04",
        (setting("min_query_count", 500, requested="min_query_count", summary="min_query_count"),
         setting("min_sample_count", 500)),
        ("PASS",), "min_query_count is one of TEST04's own audit settings (its audit.config sets it per model).",
        exclude=("CONDITIONS_DIFFER", "MLPERF_AUDIT_SETTINGS"), kind="near_miss"),
    "mlf-t05-expected-latency-hint": Case(
        T05_MS, "TEST05",
        (Edit(("requested_multi_stream_expected_latency_ns",), 500000),
         setting("target_qps", 2000, summary="target_qps")),
        ("PASS",), "The expected latency is a performance hint that sizes the run (LoadGen derives target_qps "
        "from it); the score is measured, not set by it.", exclude=("CONDITIONS_DIFFER",), kind="near_miss"),
}


def _source(name: str) -> Path:
    for root in (VENDORED, SHARED):
        if (root / name / "compliance").is_dir():
            return root / name
    raise SystemExit(f"source case {name!r} is neither in {VENDORED} nor in {SHARED}")


def edit_detail(path: Path, edits: tuple[Edit, ...]) -> None:
    """Set every ``:::MLLOG`` line of each key to the edit's value (a key no line has is an error)."""
    lines = path.read_text("utf-8").splitlines(keepends=True)
    for edit in edits:
        for key in edit.detail_keys:
            hits = 0
            for i, line in enumerate(lines):
                if not line.startswith(":::MLLOG "):
                    continue
                obj = json.loads(line[len(":::MLLOG "):])
                if obj.get("key") == key:
                    obj["value"] = edit.value
                    lines[i] = "" if edit.value == DELETE else ":::MLLOG " + json.dumps(obj) + "\n"
                    hits += 1
            if not hits:
                raise SystemExit(f"{path}: no {key!r} line to edit")
    path.write_text("".join(lines), "utf-8")


def edit_summary(path: Path, edits: tuple[Edit, ...]) -> None:
    lines = path.read_text("utf-8").splitlines(keepends=True)
    for edit in edits:
        if edit.summary_key is None:
            continue
        for i, line in enumerate(lines):
            head, sep, _ = line.partition(":")
            if sep and head.strip() == edit.summary_key:
                lines[i] = f"{head}: {edit.summary_text}\n"
                break
        else:
            raise SystemExit(f"{path}: no summary line {edit.summary_key!r}")
    path.write_text("".join(lines), "utf-8")


def build_all(out: Path) -> list[str]:
    cases_dir = out / "cases"
    manifest = []
    for name, case in CASES.items():
        dst = cases_dir / name
        if dst.exists():
            shutil.rmtree(dst)
        src = _source(case.source)
        for run in ("reference", "compliance"):
            (dst / run).mkdir(parents=True)
            for log in ("mlperf_log_summary.txt", "mlperf_log_detail.txt"):
                shutil.copyfile(src / run / log, dst / run / log)
        edit_detail(dst / "compliance" / "mlperf_log_detail.txt", case.edits)
        edit_summary(dst / "compliance" / "mlperf_log_summary.txt", case.edits)
        manifest.append({"case_id": name, "test": case.test, "kind": case.kind, "source_case": case.source,
                         "mutation": [{"keys": list(e.detail_keys), "summary": e.summary_key, "value": e.value}
                                      for e in case.edits],
                         "expected": list(case.expected), "expected_reason": case.why,
                         "must_include": list(case.include), "must_exclude": list(case.exclude),
                         "frozen": case.frozen})
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", "utf-8")
    return list(CASES)


def main() -> None:
    fixture_builder_main(__doc__, build_all, Path(__file__).parent / "mlperf_fixtures")


if __name__ == "__main__":
    main()
