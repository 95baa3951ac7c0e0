"""config-tuner: proposes server knob changes (coordinate search over the target's knobs).

Its search space deliberately includes levers that must not be banked blindly -- the response cache,
int8 quantization, prompt-lookup decoding -- because that is what optimizing agents do; the auditor is
what stops them. Its *beliefs* about each knob (lever class, mechanism) are its own and can be wrong,
as producers' beliefs are: it believes prompt-lookup decoding is a decoding-kernel speedup. The auditor
judges the class from the diff and the raw (``accept_length``), never from this table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perfwarden.agents.base import FixDecision, Proposal

# knob, value, believed class, headline kind, mechanism, why. Ordered: most promising first.
DEFAULT_SPACE: list[tuple[str, Any, str, str, str, str]] = [
    ("max_batch_size", 4, "B", "e2e", "baseline", "batch concurrent decodes: more tokens per forward pass"),
    ("attn_implementation", "eager", "A", "e2e", "baseline", "plain matmul attention beats SDPA dispatch at tiny shapes"),
    ("response_cache", True, "B", "e2e", "baseline", "serve repeated requests from memory"),
    ("prompt_lookup", True, "A", "kernel", "baseline", "faster decoding kernel path via n-gram lookup"),
    ("quantization", "int8_dynamic", "B", "e2e", "baseline", "int8 matmuls are cheaper on CPU"),
]
# Levers searched only when named (--levers): a batching window only shows its cost (TTFT) under
# Poisson arrivals, i.e. with the Server scenario.
EXTRA_SPACE: list[tuple[str, Any, str, str, str, str]] = [
    ("batch_wait_ms", 40, "B", "e2e", "baseline", "wait to fill batches"),
]


def propose(base_config: dict[str, Any], allowed: list[str] | None, max_proposals: int,
            reps: int) -> list[Proposal]:
    """Deterministic brain: one proposal per knob value that differs from the baseline."""
    out: list[Proposal] = []
    space = DEFAULT_SPACE + [e for e in EXTRA_SPACE if allowed is not None and e[0] in allowed]
    for knob, value, cls, kind, mech, why in space:
        name = f"{knob}={value}"
        if allowed is not None and knob not in allowed and name not in allowed:
            continue
        if base_config.get(knob) == value:
            continue
        config = {knob: value}
        if knob == "batch_wait_ms":
            config["max_batch_size"] = 4  # a window only matters when batches can fill
        out.append(Proposal(id=f"cfg-{knob}", kind="config", producer="config_tuner", config=config,
                            believed_class=cls, headline_kind=kind, mechanism=mech, reps=reps, rationale=why))
    return out[:max_proposals]


def fix(proposal: Proposal, verdict: dict[str, Any], max_reps: int) -> FixDecision:
    """Deterministic answer to a verdict: re-measure, add evidence, reclassify, or give up."""
    return shared_fix(proposal, verdict, max_reps)


def reclassify(proposal: Proposal, verdict: dict[str, Any], run: Path) -> Proposal:
    """Accept the auditor's lever class; for speculative decoding, document the draft method and the
    acceptance the producer itself measured (mean accept_length of its candidate reps)."""
    update: dict[str, Any] = {"believed_class": "B", "headline_kind": "e2e"}
    if any("speculative" in f["message"] for f in verdict.get("findings", [])) and proposal.legs:
        bench = Path(run) / "legs" / proposal.legs[1] / "bench_runs.jsonl"
        accepts = [json.loads(line).get("accept_length") for line in bench.read_text().splitlines() if line.strip()]
        accepts = [a for a in accepts if isinstance(a, (int, float))]
        update.update(mechanism="speculative_decoding", mechanism_variant=next(iter(proposal.config), None),
                      draft_model_id="prompt_lookup" if "prompt_lookup" in proposal.config else "unknown",
                      acceptance_rate=round(sum(accepts) / len(accepts), 4) if accepts else None)
    return proposal.model_copy(update=update)


def disclose(proposal: Proposal, verdict: dict[str, Any], run: Path) -> Proposal:
    """State the latency regressions the auditor saw, sized from the producer's own reading of its
    legs (the harness's per-rep aggregates), never copied from the auditor's numbers."""
    metrics = sorted({f["measured"]["metric"] for f in verdict.get("findings", [])
                      if f["code"] == "HIDDEN_LATENCY_REGRESSION" and isinstance(f.get("measured"), dict)})
    stated: dict[str, float] = {}
    base, cand = (Path(run) / "legs" / leg / "bench_runs.jsonl" for leg in proposal.legs or ())
    for metric in metrics:
        b, c = _own_median(base, metric), _own_median(cand, metric)
        if b and c:
            stated[metric] = round((c / b - 1.0) * 100.0, 1)
    return proposal.model_copy(update={"disclosed_regressions": stated})


def _own_median(bench: Path, metric: str) -> float | None:
    values = sorted(v for v in (json.loads(line).get(metric) for line in bench.read_text().splitlines() if line.strip())
                    if isinstance(v, (int, float)))
    return values[len(values) // 2] if values else None


DROP_CODES = {
    "CACHING_SUSPECTED": "the change is a cache, not a speedup",
    "SERVER_CRASH": "the change crashed the server",
    "PARITY_MISMATCH": "the change alters outputs",
    "QUALITY_REGRESSION": "the change lowers quality",
    "OUTPUT_LENGTH_SHIFT": "the change alters output lengths",
    "NOT_ENGAGED": "the change never engaged",
    "NONCOHERENT_REFERENCE": "the reference is gibberish",
}


def shared_fix(proposal: Proposal, verdict: dict[str, Any], max_reps: int) -> FixDecision:
    """The fix policy both config and kernel producers use (one place)."""
    codes = {f["code"]: f for f in verdict.get("findings", []) if f["severity"] != "INFO"}
    for code, why in DROP_CODES.items():
        if code in codes:
            return FixDecision(action="drop", reason=f"{code}: {why}")
    if "QUALITY_EVAL_MISSING" in codes and proposal.quality_eval_id is None:
        return FixDecision(action="run_quality_eval", reason="lossy change: run the registered quality eval")
    if "HIDDEN_LATENCY_REGRESSION" in codes and not proposal.disclosed_regressions:
        return FixDecision(action="disclose", reason="a latency trade-off: state it in the claim, with its size")
    if "ORTHOGONAL_LEVER" in codes:
        return FixDecision(action="reclassify", reason="the auditor detected a class-B lever; headline it as one",
                           believed_class="B", headline_kind="e2e")
    if verdict.get("action") == "remeasure" and proposal.reps < max_reps:
        return FixDecision(action="remeasure", reason=f"{sorted(codes)}: re-measure with {max_reps} reps")
    if "CONDITIONS_DIFFER" in codes and proposal.attempts <= 1:
        return FixDecision(action="remeasure", reason="restore conditions: re-measure both legs fresh")
    return FixDecision(action="drop", reason=f"{sorted(codes) or verdict.get('verdict')}: cannot be fixed")
