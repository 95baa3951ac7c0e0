"""Parity comes from what was served.

A parity dump (``outputs.jsonl``) is a separate set of requests; the texts the server returned during the
timed reps (``generated_texts`` keyed by ``prompt_ids`` in ``bench_runs.jsonl``) are what was measured.
Two checks, both on raw the harness wrote:

- **dump vs served, per leg**: where a dumped prompt was also served, the two greedy texts must agree.
  The bench sends ``ignore_eos`` and the dump does not, and the two may ask for different ``max_tokens``,
  so "agree" means one text is a prefix of the other (greedy decoding of one prompt is one sequence,
  cut at EOS or at the token limit). A dump that does not match what its server returned is not
  evidence of anything.
- **served vs served, across legs**: for a lossless change, the texts both legs' servers returned for
  the same prompt must be identical, with the batching allowance ``PARITY_MIN_IDENTICAL``.

Bench files without ``prompt_ids`` (plain sglang/vLLM output) cannot be joined: the check is reported
as not made, never as passed.
"""

from __future__ import annotations

from pathlib import Path

from perfwarden.auditor.evidence import (SERVED_TEXT_CHARS, LegEvidence, Served, line_evidence, served_digest,
                                         stood_in_digest)
from perfwarden.auditor.findings import GateResult, finding
from perfwarden.auditor.gates.correctness import PARITY_MIN_IDENTICAL


def consistent(a: str, b: str | bytes) -> bool:
    """Two greedy continuations of one prompt, cut at different points: one is a prefix of the other. A
    served text held only as its digest (past ``SERVED_TEXT_CHARS``) cannot be shown to agree: it does not,
    unless ``a`` stands for that same digest (a dump made from the served texts themselves)."""
    if isinstance(b, bytes):
        return stood_in_digest(a) == b
    return a.startswith(b) or b.startswith(a)


def same_text(a: str | bytes, b: str | bytes) -> bool:
    """Whether two legs' served texts are one text, whether each was held or only its digest."""
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return (served_digest(a) if isinstance(a, str) else a) == (served_digest(b) if isinstance(b, str) else b)


def _shown(text: str | bytes) -> str:
    return repr(text[:40]) if isinstance(text, str) else f"a text past the {SERVED_TEXT_CHARS:,}-character bound"


def check_dump_matches_served(run: Path, leg: LegEvidence, served: Served | None) -> GateResult[None]:
    """The leg's parity dump must say what its server returned where the prompts coincide."""
    if served is None or not leg.outputs:
        return GateResult(not_checked=[f"dump vs served ({leg.name}): " + (
            "the bench lines carry no prompt_ids" if served is None else "no parity dump")])
    pairs = [(ref, o) for ref, o in leg.outputs if str(o.prompt_id) in served.texts]
    if not pairs:
        return GateResult(not_checked=[f"dump vs served ({leg.name}): no dumped prompt was served"])
    bad = [(ref, o) for ref, o in pairs if not consistent(o.text, served.modal(str(o.prompt_id)))]
    agree = 1.0 - len(bad) / len(pairs)
    if agree >= PARITY_MIN_IDENTICAL:
        return GateResult()
    ref, o = bad[0]
    return GateResult(findings=[finding(
        "PARITY_MISMATCH", "FAIL", f"the parity dump of {leg.name!r} does not match what its server returned: "
        f"{len(bad)}/{len(pairs)} dumped prompts served other text (e.g. {o.prompt_id!r}: dumped "
        f"{o.text[:40]!r}, served {_shown(served.modal(str(o.prompt_id)))})", measured=round(agree, 4),
        threshold=PARITY_MIN_IDENTICAL,
        evidence=[line_evidence(run, ref), line_evidence(run, served.first_ref[str(o.prompt_id)])],
        action="eject", gate="served")])


def check_served_parity(run: Path, base: LegEvidence, cand: LegEvidence, base_served: Served | None,
                        cand_served: Served | None, lossy: bool, min_identical: float = PARITY_MIN_IDENTICAL
                        ) -> GateResult[float]:
    """For a lossless change the candidate's server must have returned the baseline's texts."""
    if (base_served is None) != (cand_served is None):
        missing, other = (base, cand) if base_served is None else (cand, base)
        if (cand_served or base_served or Served()).positional:
            # Neither leg names its prompts (one foreign file only by position): nothing to join, nothing
            # withheld. A leg stripped of its served texts has no parity dump either (check_parity fails it).
            return GateResult(not_checked=[f"served parity: the bench lines of {missing.name!r} carry no served "
                                           f"texts by prompt, those of {other.name!r} only by request position"])
        return GateResult(findings=[finding(
            "EVIDENCE_MISSING", "FLAG", f"the bench lines of {missing.name!r} name no prompt_ids while those of "
            f"{other.name!r} do: what {missing.name!r} served cannot be checked against its parity dump or the "
            "other leg", evidence=[line_evidence(run, missing.reps[0].ref)] if missing.reps else [],
            action="remeasure", gate="served")])
    if base_served is None or cand_served is None:
        return GateResult(not_checked=["served parity: the bench lines carry no prompt_ids, so served texts "
                                       "cannot be joined across legs"])
    common = sorted(set(base_served.texts) & set(cand_served.texts))
    if not common:
        return GateResult(not_checked=["served parity: the legs served no prompt in common"])
    differ = [pid for pid in common if not same_text(base_served.modal(pid), cand_served.modal(pid))]
    same = 1.0 - len(differ) / len(common)
    if not differ:
        return GateResult(value=same)
    ev = [line_evidence(run, base_served.first_ref[differ[0]]), line_evidence(run, cand_served.first_ref[differ[0]])]
    if lossy:
        return GateResult(findings=[finding(
            "PARITY_MISMATCH", "INFO", f"{len(differ)}/{len(common)} served prompts returned other text; expected "
            "for a lossy change, judged by its quality eval", measured=round(same, 4), evidence=ev, gate="served")],
            value=same)
    if same < min_identical:
        exact = " (an unclassified knob needs exact parity)" if min_identical >= 1.0 else ""
        return GateResult(findings=[finding(
            "PARITY_MISMATCH", "FAIL", f"only {len(common) - len(differ)}/{len(common)} prompts both legs served "
            f"returned the same text from the candidate as from the baseline{exact}", measured=round(same, 4),
            threshold=min_identical, evidence=ev, action="eject", gate="served")], value=same)
    return GateResult(findings=[finding(
        "PARITY_MISMATCH", "INFO", f"{len(differ)}/{len(common)} served prompts differ (within the "
        f"{min_identical:.0%} allowance)", measured=round(same, 4), threshold=min_identical, evidence=ev,
        gate="served")], value=same)
