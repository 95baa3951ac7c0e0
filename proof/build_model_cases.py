"""Fixtures of the evidence model: coherent forgeries of a real sealed run, and near misses.

Every case edits a copy of ``seal-rec-clean`` (a real A/B on the embedded target, LoadGen Offline, sealed)
the way a forger who holds the run's key would -- every file changed consistently, then the seal chain
rebuilt over the edited bytes with the run's own key (a rigged harness seals what it writes), so only
the other records the edit did not move can tell. Each answer is in the CASES table below, written from
the evidence model's rules before the auditor was changed to meet it:

- **identity** (model, weights, tokenizer, generation defaults, engine, hardware) is equal across the
  legs wherever any file states it, and never the declared change: a model swap stated only in
  ``served_model_name``, only in the server log's ``model loaded``/``serving`` lines, or declared as the
  lever, is another experiment (FAIL);
- **no downgrade buys leniency**: one leg rewritten in a foreign writer's format, or stripped of a
  witness the other leg keeps, is never judged more kindly than the leg the harness wrote (FLAG or FAIL);
- **every measurement against each witness**: a rep's duration rescaled with LoadGen's rates moved to
  agree still disagrees with the records the forger left (the rep's own request timeline, LoadGen's
  wall time and its power window) (FAIL);
- **counters witness mechanisms**: a server whose configuration says a mechanism is off while its own
  counters show it ran misreports itself and hides a lever (FAIL);
- near misses: the same change in both legs, every file rewritten compact with its keys reordered (PASS).

    python -m perfwarden.proof.build_model_cases [--out proof/fixtures]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from perfwarden.formats.records import write_json_atomic
from perfwarden.verify.forgery_files import (edit_detail, edit_json, edit_lines, edit_summary, read_lines,
                                             rederive_aggregates, seal_again, write_lines)

FIXTURES = Path(__file__).resolve().parent / "fixtures"
BASE = "seal-rec-clean"
BASELINE, CANDIDATE = "base", "mbs4"
FROZEN = "2026-11-28"
OTHER_MODEL = "SmolLM2-360M-Instruct"
OTHER_DIGEST = "sha256:" + "5" * 64


# ------------------------------------------------------------------------------------- file edits


_lines = read_lines
_write_lines = write_lines
_edit_json = edit_json
_edit_lines = edit_lines
_detail_edit = edit_detail
_summary_edit = edit_summary


def _leg(run: Path, leg: str) -> Path:
    return run / "legs" / leg


def _server_info_everywhere(run: Path, leg: str, fn: Callable[[dict[str, Any]], None]) -> None:
    """Apply ``fn`` to the leg's server_info.json and to the server_info copy in each of its bench lines."""
    _edit_json(_leg(run, leg) / "server_info.json", fn)
    _edit_lines(_leg(run, leg) / "bench_runs.jsonl", lambda line: fn(line["server_info"]))


def _rederive(line: dict[str, Any], before: dict[str, Any] | None = None) -> None:
    rederive_aggregates(line, before or line)


# ------------------------------------------------------------------------------------------ cases


def served_name_swap(run: Path) -> None:
    """The candidate's server reports another model only in ``served_model_name`` (an identity field the
    conditions gate once held inert), in server_info.json and in every bench line's copy."""
    _server_info_everywhere(run, CANDIDATE, lambda info: info.update(served_model_name=OTHER_MODEL))


def log_model_swap(run: Path) -> None:
    """The candidate's server log says it loaded and serves another model with other weights; its
    server_info is untouched (the swap is stated only in the log's own lines)."""
    path = _leg(run, CANDIDATE) / "server.log"
    text = path.read_text("utf-8")
    text = re.sub(r"model loaded name='[^']*' dir='[^']*' digest=\S+",
                  f"model loaded name='{OTHER_MODEL}' dir='/models/{OTHER_MODEL}' digest={OTHER_DIGEST}", text)
    text = re.sub(r"serving model='[^']*'", f"serving model='{OTHER_MODEL}'", text)
    path.write_text(text, encoding="utf-8")


def declared_tokenizer_swap(run: Path) -> None:
    """The candidate runs another tokenizer everywhere it is stated, and the claim declares it as its lever:
    an identity is never the declared change."""
    _server_info_everywhere(run, CANDIDATE, lambda info: info.update(tokenizer="gpt2"))
    _edit_json(run / "claims" / "001-patch.json",
               lambda claim: claim["lever"].update(config_keys=["max_batch_size", "tokenizer"]))


def same_alias_both_legs(run: Path) -> None:
    """Near miss: both legs' servers answer to the same alias (``served_model_name``) everywhere."""
    for leg in (BASELINE, CANDIDATE):
        _server_info_everywhere(run, leg, lambda info: info.update(served_model_name="smol"))


def compact_reordered(run: Path) -> None:
    """Near miss: every JSON file of both legs rewritten compact with its keys reversed; nothing else."""
    for leg in (BASELINE, CANDIDATE):
        for name in ("server_info.json", "leg.json"):
            path = _leg(run, leg) / name
            obj = json.loads(path.read_text("utf-8"))
            path.write_text(json.dumps(dict(reversed(list(obj.items()))), separators=(",", ":")), encoding="utf-8")
        path = _leg(run, leg) / "bench_runs.jsonl"
        _write_lines(path, [dict(reversed(list(x.items()))) for x in _lines(path)], compact=True)


def foreign_leg(run: Path) -> None:
    """The candidate's lines rewritten in a foreign bench tool's format (``schema_version`` and every field
    only the harness writes dropped), beside a baseline the harness wrote: a downgraded leg is checked less."""
    harness_only = ("schema_version", "leg", "rep", "started_at", "request_starts", "latencies", "contention",
                    "issue_delays", "input_lens_source", "output_lens_source", "finish_reasons", "prompt_ids",
                    "request_params", "loadgen", "scenario", "issued")
    def downgrade(line: dict[str, Any]) -> None:
        for key in harness_only:
            line.pop(key, None)

    _edit_lines(_leg(run, CANDIDATE) / "bench_runs.jsonl", downgrade)
    shutil.rmtree(_leg(run, CANDIDATE) / "loadgen")


def loadgen_witness_stripped(run: Path) -> None:
    """The candidate's LoadGen logs removed and every line's reference to them dropped (its settings
    kept): one leg without the witness the other keeps."""
    def strip(line: dict[str, Any]) -> None:
        line["loadgen"].pop("dir")
        line["loadgen"].pop("wall_s")
    _edit_lines(_leg(run, CANDIDATE) / "bench_runs.jsonl", strip)
    shutil.rmtree(_leg(run, CANDIDATE) / "loadgen")


def _stretch(run: Path, leg: str, factor: float, wall: bool) -> None:
    """Every rep of ``leg`` made ``factor`` times longer in its duration (aggregates re-derived) and in
    LoadGen's rates (detail and summary), so LoadGen's span agrees; ``wall``: LoadGen's wall time too."""
    def line_fn(line: dict[str, Any]) -> None:
        line["duration"] *= factor
        if wall:
            line["loadgen"]["wall_s"] *= factor
        _rederive(line)
    _edit_lines(_leg(run, leg) / "bench_runs.jsonl", line_fn)
    rates = ("result_samples_per_second", "result_tokens_per_second")
    for folder in sorted((_leg(run, leg) / "loadgen").iterdir()):
        _detail_edit(folder / "mlperf_log_detail.txt",
                     lambda k, v: round(v / factor, 6) if k in rates else v)
        _summary_edit(folder / "mlperf_log_summary.txt",
                      lambda k, v: f"{float(v) / factor:.6g}" if k in ("Samples per second", "Tokens per second")
                      else v)


def duration_rescaled(run: Path) -> None:
    """The baseline made 10% slower: its duration and LoadGen's rates rescaled together (the held-out
    Offline forgery); the request timeline, LoadGen's wall time and its power window are left."""
    _stretch(run, BASELINE, 1.1, wall=False)


def duration_and_wall_rescaled(run: Path) -> None:
    """As duration_rescaled, LoadGen's wall time moved too; the request timeline and power window are left."""
    _stretch(run, BASELINE, 1.1, wall=True)


def _counters(run: Path, leg: str, **grown: int | float | dict[str, int]) -> None:
    """The leg's server reports, after every rep, counters of a mechanism its configuration says is off."""
    def fn(line: dict[str, Any]) -> None:
        state = line["server_info"]["internal_states"][0]
        for key, value in grown.items():
            state[key] = value if not isinstance(value, int) or isinstance(value, bool) else value * (line["rep"] + 1)
    _edit_lines(_leg(run, leg) / "bench_runs.jsonl", fn)


def spec_counters_config_off(run: Path) -> None:
    """The candidate's server says prompt_lookup is off while its counters show draft tokens verified."""
    _counters(run, CANDIDATE, spec_verify_steps=40, spec_drafted=160, spec_accepted=90, spec_produced=130,
              avg_spec_accept_length=3.25)


def cache_counters_config_off(run: Path) -> None:
    """The candidate's server says response_cache is off while its counters show cache hits."""
    _counters(run, CANDIDATE, response_cache_hits=6, response_cache_entries=8)


def override_counters_config_off(run: Path) -> None:
    """The candidate's server reports no op override while its counters show one called."""
    _counters(run, CANDIDATE, op_override_calls={"rmsnorm": 4096})


def version_one_leg(run: Path) -> None:
    """The candidate's lines relabelled as a later harness version (its end stamp written, the server's
    counters null): the legs were measured by two versions of the harness."""
    def fn(line: dict[str, Any]) -> None:
        line.update(schema_version=2, ended_at=line["started_at"] + line["loadgen"]["wall_s"], server_counters=None)
    _edit_lines(_leg(run, CANDIDATE) / "bench_runs.jsonl", fn)


def outputs_one_leg(run: Path) -> None:
    """The candidate's parity dump removed: one leg without the outputs the other keeps."""
    (_leg(run, CANDIDATE) / "outputs.jsonl").unlink()


def prompt_ids_one_leg(run: Path) -> None:
    """The candidate's lines lose the prompt each request served (``prompt_ids``): the served-parity witness
    of one leg stripped."""
    _edit_lines(_leg(run, CANDIDATE) / "bench_runs.jsonl", lambda line: line.pop("prompt_ids"))


def prompt_ids_both_legs(run: Path) -> None:
    """Both legs' lines lose the prompt each request served: a field the harness writes on every line of a
    rep LoadGen scheduled, removed everywhere at once."""
    for leg in (BASELINE, CANDIDATE):
        _edit_lines(_leg(run, leg) / "bench_runs.jsonl", lambda line: line.pop("prompt_ids"))


def _fewer_tokens(line: dict[str, Any], factor: float) -> None:
    """Every request's output tokens scaled down, its gaps merged so it has no more gaps than tokens."""
    before = json.loads(json.dumps(line))
    lens = [max(1, int(n * factor)) if n else n for n in line["output_lens"]]
    line["itls"] = [gaps[:max(n - 2, 0)] + [sum(gaps[max(n - 2, 0):])] if n > 1 and len(gaps) > n - 1 else gaps
                    for gaps, n in zip(line["itls"], lens)]
    line["output_lens"] = lens
    _rederive(line, before)


def tokens_with_loadgen(run: Path) -> None:
    """Both legs' output tokens cut by one (16 to 15: the last two gaps merged, aggregates re-derived) with
    LoadGen's tokens per second (detail and summary) moved to agree; the servers' own running totals after
    each rep are left."""
    for leg in (BASELINE, CANDIDATE):
        _edit_lines(_leg(run, leg) / "bench_runs.jsonl", lambda line: _fewer_tokens(line, 0.9375))
        for folder in sorted((_leg(run, leg) / "loadgen").iterdir()):
            _detail_edit(folder / "mlperf_log_detail.txt",
                         lambda k, v: round(v * 0.9375, 6) if k == "result_tokens_per_second" else v)
            _summary_edit(folder / "mlperf_log_summary.txt",
                          lambda k, v: f"{float(v) * 0.9375:.6g}" if k == "Tokens per second" else v)


QUALITY_BASE = "jdg-eval-comparable"


def _quality(run: Path, leg: str, **fields: Any) -> None:
    edit_json(run / "quality" / f"pw-qa-exact-v1@{leg}.json", lambda obj: obj.update(fields))


def quality_other_conditions(run: Path) -> None:
    """Both legs' quality records state the eval's conditions, as the harness's evals write them, and the
    candidate's was sampled at another temperature with another prompt template."""
    shared = {"prompt_template": "Question: {question}\nAnswer:", "few_shot": [], "max_tokens": 32, "method": "exact_match",
              "model": "SmolLM2-135M-Instruct"}
    _quality(run, "base", **shared, temperature=0)
    _quality(run, "cand", **{**shared, "prompt_template": "Q: {question}\nA (one word):"}, temperature=0.7)


def quality_same_conditions(run: Path) -> None:
    """Near miss: both legs' quality records state the same conditions (and their own endpoints)."""
    shared = {"prompt_template": "Question: {question}\nAnswer:", "few_shot": [], "max_tokens": 32, "method": "exact_match",
              "model": "SmolLM2-135M-Instruct", "temperature": 0}
    _quality(run, "base", **shared, endpoint="http://127.0.0.1:8101/v1")
    _quality(run, "cand", **shared, endpoint="http://127.0.0.1:8102/v1")


FOREIGN_PAIR = "int-foreign-sglang-pair"


def _foreign(run: Path, leg: str, **fields: Any) -> None:
    _edit_lines(_leg(run, leg) / "bench_runs.jsonl", lambda line: line.update(fields))


def foreign_model_swap(run: Path) -> None:
    """Two foreign bench files (no harness fields) that name different models in ``model_id``."""
    _foreign(run, "base", model_id="/models/SmolLM2-135M-Instruct", tokenizer_id="/models/SmolLM2-135M-Instruct")
    _foreign(run, "cand", model_id=f"/models/{OTHER_MODEL}", tokenizer_id="/models/SmolLM2-135M-Instruct")


def foreign_same_model_statistics(run: Path) -> None:
    """Near miss: both foreign files name one model and carry the extra statistics such a tool writes.
    Each result also carries the ``date`` vllm bench serve always writes (the legs' reps interleaved)."""
    for offset, leg in ((0, "base"), (10, "cand")):
        _foreign(run, leg, model_id="/models/SmolLM2-135M-Instruct", std_ttft_ms=1.5, p95_ttft_ms=104.0,
                 max_output_tokens_per_s=130.0, total_output_tokens_retokenized=128)
        lines = read_lines(_leg(run, leg) / "bench_runs.jsonl")
        for k, line in enumerate(lines):
            seconds = offset + 20 * k
            line["date"] = f"20261127-12{seconds // 60:02d}{seconds % 60:02d}"
        write_lines(_leg(run, leg) / "bench_runs.jsonl", lines)


@dataclass(frozen=True)
class Case:
    build: Callable[[Path], None]
    verdict: str | list[str]
    why: str
    include: list[str] = field(default_factory=list)
    include_any: list[list[str]] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    action: str | list[str] | None = None
    base: str = BASE


REFUSED = ["FLAG", "FAIL"]
CASES: dict[str, Case] = {
    "model-identity-served-name-swap": Case(
        served_name_swap, "FAIL", "served_model_name is an identity (what model the server says it serves): the "
        "legs name different models, so they are two experiments", include=["CONDITIONS_DIFFER"], action="eject"),
    "model-identity-log-model-swap": Case(
        log_model_swap, "FAIL", "the candidate's own log says it loaded and served another model with other weights; "
        "identity is compared wherever any file states it", include_any=[["CONDITIONS_MISREPORTED",
                                                                          "CONDITIONS_DIFFER"]], action="eject"),
    "model-identity-declared-tokenizer": Case(
        declared_tokenizer_swap, "FAIL", "the tokenizer is an identity: declaring it as the lever does not make "
        "two tokenizers one experiment", include=["CONDITIONS_DIFFER"], action="eject"),
    "model-near-same-alias-both-legs": Case(
        same_alias_both_legs, "PASS", "the same alias in both legs: identities equal, nothing differs",
        exclude=["CONDITIONS_DIFFER", "CONDITIONS_MISREPORTED", "UNKNOWN_KNOB", "EVIDENCE_TAMPERED"]),
    "model-near-compact-reordered": Case(
        compact_reordered, "PASS", "the same records written compact with their keys reordered: nothing judged "
        "changed", exclude=["EVIDENCE_CORRUPT", "CONDITIONS_MISREPORTED", "CONDITIONS_DIFFER", "EVIDENCE_TAMPERED"]),
    "model-downgrade-foreign-leg": Case(
        foreign_leg, "FAIL", "the legs share one harness version and one kind of writer: a leg rewritten in a "
        "foreign format beside the harness's is not comparable", action="eject"),
    "model-downgrade-loadgen-stripped": Case(
        loadgen_witness_stripped, REFUSED, "the candidate lost the LoadGen witness the baseline keeps: never judged "
        "more kindly than the leg that has it", include=["EVIDENCE_MISSING"]),
    "model-witness-duration-rescaled": Case(
        duration_rescaled, "FAIL", "the baseline's duration and LoadGen's rates were rescaled together; the rep's "
        "request timeline, LoadGen's wall time and power window still say how long it ran",
        include=["EVIDENCE_CORRUPT"], action="eject"),
    "model-witness-duration-wall-rescaled": Case(
        duration_and_wall_rescaled, "FAIL", "as model-witness-duration-rescaled with LoadGen's wall time moved too: "
        "the request timeline and LoadGen's power window still disagree", include=["EVIDENCE_CORRUPT"],
        action="eject"),
    "model-counters-spec-config-off": Case(
        spec_counters_config_off, "FAIL", "the server's counters show speculative decoding ran while its "
        "configuration says it is off: a misreport and an undeclared lever",
        include_any=[["CONDITIONS_MISREPORTED", "CONDITIONS_DIFFER"]], action="eject"),
    "model-counters-cache-config-off": Case(
        cache_counters_config_off, "FAIL", "the server's counters show response-cache hits while its configuration "
        "says the cache is off", include_any=[["CONDITIONS_MISREPORTED", "CONDITIONS_DIFFER"]], action="eject"),
    "model-counters-override-config-off": Case(
        override_counters_config_off, "FAIL", "the server's counters show an op override called while its "
        "configuration reports none", include_any=[["CONDITIONS_MISREPORTED", "CONDITIONS_DIFFER"]],
        action="eject"),
    "model-downgrade-version-one-leg": Case(
        version_one_leg, "FAIL", "the legs share one harness version: a comparison of two versions' records is "
        "not one experiment", include=["CONDITIONS_DIFFER"], action="eject"),
    "model-downgrade-outputs-one-leg": Case(
        outputs_one_leg, REFUSED, "the candidate lost the parity dump the baseline keeps: one leg checked less is "
        "never judged more kindly", include=["EVIDENCE_MISSING"]),
    "model-downgrade-prompt-ids-one-leg": Case(
        prompt_ids_one_leg, REFUSED, "the candidate's lines lost the prompt ids the baseline's keep (the served-parity "
        "witness)", include=["EVIDENCE_MISSING"]),
    "model-downgrade-prompt-ids-both-legs": Case(
        prompt_ids_both_legs, REFUSED, "the harness writes prompt ids on every line of a rep LoadGen scheduled: "
        "their absence from both legs is evidence removed, not a lighter format", include=["EVIDENCE_MISSING"]),
    "model-witness-tokens-with-loadgen": Case(
        tokens_with_loadgen, "FAIL", "the legs' output tokens and LoadGen's token rate were rescaled together; "
        "the servers' own running totals after each rep still count every token they generated",
        include=["EVIDENCE_CORRUPT"], action="eject"),
    "model-quality-other-conditions": Case(
        quality_other_conditions, "FAIL", "the legs' quality results were taken under different conditions (another "
        "temperature and prompt template): the comparison a lossy change rests on compares nothing",
        include=["QUALITY_EVAL_MISSING"], base=QUALITY_BASE),
    "model-near-quality-same-conditions": Case(
        quality_same_conditions, "PASS", "the same eval conditions in both legs; each leg's eval reached its own "
        "server's address", exclude=["QUALITY_EVAL_MISSING", "EVIDENCE_CORRUPT"], base=QUALITY_BASE),
    "model-identity-foreign-model-id": Case(
        foreign_model_swap, "FAIL", "two foreign bench files naming different models are two experiments",
        include=["CONDITIONS_DIFFER"], action="eject", base=FOREIGN_PAIR),
    "model-near-foreign-statistics": Case(
        foreign_same_model_statistics, "PASS", "one model named in both foreign files, and the statistics such a "
        "tool writes beside its per-request arrays, which the model lists as not judged",
        exclude=["CONDITIONS_DIFFER", "EVIDENCE_CORRUPT", "EVIDENCE_MISSING", "UNKNOWN_KNOB"], base=FOREIGN_PAIR),
}


def _answer(case: Case) -> dict[str, Any]:
    answer: dict[str, Any] = {"claim": "claims/001-patch.json", "verdict": case.verdict}
    if case.action is not None:
        answer["action"] = case.action
    if case.include:
        answer["must_include"] = case.include
    if case.include_any:
        answer["must_include_any"] = case.include_any
    if case.exclude:
        answer["must_exclude"] = case.exclude
    return answer


def build(name: str, case: Case, out: Path) -> Path:
    """``out/name``: the answer key first, then a copy of the case's base with its edits, sealed again (a
    sealed base)."""
    base = FIXTURES / case.base
    fixture = out / name
    if fixture.exists():
        shutil.rmtree(fixture)
    fixture.mkdir(parents=True)
    write_json_atomic(fixture / "answer_key.json", {
        "schema_version": 1, "frozen": FROZEN, "answers": [_answer(case)],
        "provenance": f"proof/build_model_cases.py: {(case.build.__doc__ or '').strip().splitlines()[0]} "
                      f"(a copy of {case.base}" + (", sealed again with its key)" if (base / "seal.key").is_file()
                                                   else ")"),
        "rationale": case.why})
    shutil.copytree(base / "run", fixture / "run", ignore=shutil.ignore_patterns("verdicts"))
    case.build(fixture / "run")
    if (base / "seal.key").is_file():
        for name_ in ("seal.key", "seal.head"):
            shutil.copyfile(base / name_, fixture / name_)
        seal_again(fixture / "run", fixture / "seal.key")
    return fixture


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=FIXTURES)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    for name, case in CASES.items():
        if args.only is None or name in args.only:
            print(build(name, case, args.out))


if __name__ == "__main__":
    main()
