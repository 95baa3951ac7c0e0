"""op-benchmarker: runs the harness's op benchmark and submits harness claims.

It picks the fastest candidate that its own rig says is correct and claims the speedup against the
reference. The harness audit re-derives all of it; on a FAIL the candidate is dropped and the next one
is tried (bounded).
"""

from __future__ import annotations

from pathlib import Path
from statistics import median

import msgspec

from perfwarden.agents.base import Proposal
from perfwarden.formats.jsonl import OpBenchLine, decode_line
from perfwarden.formats.records import Claim, Headline, IsolatedSpeedup, LegRefs


_OPBENCH_LINE = msgspec.json.Decoder(OpBenchLine)


def pick_winner(opbench: Path) -> tuple[str | None, float | None, str | None]:
    """(candidate backend, its speedup over the reference, reference backend) from the producer's
    own reading of its rig -- the auditor does not trust this reading. No winner when no correct
    candidate is faster than the reference."""
    rows = [decode_line(_OPBENCH_LINE, line) for line in Path(opbench).read_bytes().splitlines() if line]
    ref = next((r.backend for r in rows if r.is_reference), None)
    if ref is None:
        return None, None, None
    times: dict[str, list[float]] = {}
    bad: set[str] = set()
    for r in rows:
        if r.raised or r.correct is False:
            bad.add(r.backend)
        if r.times_ms:
            times.setdefault(r.backend, []).extend(r.times_ms)
    ref_t = median(times.get(ref, [float("nan")]))
    best = None
    for backend, ts in times.items():
        if backend == ref or backend in bad:
            continue
        speedup = ref_t / median(ts)
        if best is None or speedup > best[1]:
            best = (backend, speedup)
    if best is None or not best[1] > 1.0:  # a candidate slower than the reference is not worth an A/B
        return None, None, ref
    return best[0], best[1], ref


def harness_claim(proposal: Proposal, opbench_rel: str, winner: str, speedup: float, ref: str,
                  baseline_leg: str) -> Claim:
    if proposal.op is None:  # IsolatedSpeedup names the op measured; a proposal without one has no claim
        raise ValueError("an op-bench claim needs the proposal's op")
    return Claim(scope="harness", producer="op_benchmarker", op=proposal.op, opbench=opbench_rel,
                 legs=LegRefs(baseline=baseline_leg),
                 isolated_speedup=IsolatedSpeedup(value=round(speedup, 4), op=proposal.op, opbench=opbench_rel,
                                                  baseline_backend=ref, candidate_backend=winner),
                 headline=Headline(metric="op_time", value=round((speedup - 1) * 100, 2), kind="isolated"))
