"""Op-benchmark rigs (harness scope) and isolated-vs-e2e consistency (patch scope).

An isolated speedup is only evidence if the rig compared two different implementations, both correct
over several seeds with dtype-appropriate tolerance, on the shapes and dispatch path the server runs,
with fresh inputs every timed iteration and warm-up discarded.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from perfwarden.agents.auditor.evidence import line_evidence
from perfwarden.agents.auditor.findings import Findings
from perfwarden.agents.auditor.gates.conditions import flatten
from perfwarden.harness.jsonl import LineRef, OpBenchLine, ProfileLine

# rtol by dtype (torch.testing defaults, relaxed 10x for fused reductions), used when a row has none.
DEFAULT_RTOL = {"float32": 1e-4, "fp32": 1e-4, "float16": 1e-2, "fp16": 1e-2, "bfloat16": 5e-2, "bf16": 5e-2,
                "float64": 1e-7}
MIN_SEEDS = 3
"""Correctness must hold over at least this many distinct input seeds."""
PLAUSIBLE_SPEEDUP = 10.0
"""Speedups above this need extra proof (design §4)."""
SPEEDUP_TOLERANCE = 0.10
"""Claimed vs re-derived isolated speedup may differ by 10% before it is a mismatch."""


def shape_key(shape) -> str:
    return "x".join(str(s) for s in shape) if isinstance(shape, list) else str(shape)


@dataclass
class Backend:
    name: str
    rows: list[tuple[LineRef, OpBenchLine]] = field(default_factory=list)

    @property
    def is_reference(self) -> bool:
        return any(r.is_reference for _, r in self.rows)

    def median_ms(self, shape: str) -> float | None:
        times = [t for _, r in self.rows if shape_key(r.shape) == shape and r.times_ms for t in r.times_ms]
        return float(np.median(times)) if times else None

    def shapes(self) -> set[str]:
        return {shape_key(r.shape) for _, r in self.rows}

    def digests(self) -> set[str]:
        return {r.impl_sha256 for _, r in self.rows if r.impl_sha256}


def group_backends(rows: list[tuple[LineRef, OpBenchLine]]) -> dict[str, Backend]:
    out: dict[str, Backend] = {}
    for ref, row in rows:
        out.setdefault(row.backend, Backend(row.backend)).rows.append((ref, row))
    return out


def served_dispatch(server_info: dict | None) -> str | None:
    """Dispatch path the server runs: explicit ``dispatch`` key, else inferred from its knobs."""
    if not server_info:
        return None
    info = flatten(server_info)
    if isinstance(info.get("dispatch"), str):
        return info["dispatch"]
    if any(info.get(k) in (True, "true", "1", 1) for k in ("torch_compile", "enable_torch_compile")):
        return "compiled"
    if "disable_cuda_graph" in info:
        return "eager" if info["disable_cuda_graph"] in (True, "true", 1) else "graph_replay"
    return "eager"


def served_shapes(profile_rows: list[tuple[LineRef, ProfileLine]] | None, op: str) -> set[str] | None:
    if not profile_rows:
        return None
    shapes: set[str] = set()
    for _, row in profile_rows:
        if canonical_op(row) == op.lower():
            for shape in row.shapes or []:
                shapes.add(shape_key(shape))
    return shapes or None


@dataclass
class RigResult:
    speedup: float | None = None
    reference: str | None = None
    candidate: str | None = None
    per_shape: dict[str, float] = field(default_factory=dict)


def audit_rig(run: Path, rows: list[tuple[LineRef, OpBenchLine]], claimed_ref: str | None, claimed_cand: str | None,
              server_info: dict | None, profile_rows, op: str, findings: Findings, severity: str = "FAIL",
              action: str = "redo_harness") -> RigResult:
    """Every harness gate over one op benchmark; returns the re-derived speedup."""
    backends = group_backends(rows)
    result = RigResult()
    refs = [b for b in backends.values() if b.is_reference]
    ref = backends.get(claimed_ref) if claimed_ref else (refs[0] if refs else None)
    cand = backends.get(claimed_cand) if claimed_cand else None
    if cand is None:
        others = [b for b in backends.values() if b is not ref]
        cand = min(others, key=lambda b: np.median([b.median_ms(s) or np.inf for s in b.shapes()]), default=None)
    if ref is None or cand is None:
        findings.add("EVIDENCE_MISSING", severity, f"op bench of {op!r} lacks a reference or candidate backend "
                     f"(backends: {sorted(backends)!r})", gate="harness")
        return result
    result.reference, result.candidate = ref.name, cand.name
    first = [line_evidence(run, cand.rows[0][0])]

    # Self comparison: same backend name, same implementation digest, or a reference that is not one.
    same_digest = ref.digests() & cand.digests()
    if ref.name == cand.name or same_digest or (claimed_ref and claimed_ref == claimed_cand):
        findings.add("HARNESS_SELF_COMPARE", severity, f"the rig compares {cand.name!r} against "
                     f"{ref.name!r}, the same implementation" + (" (same source digest)" if same_digest else ""),
                     measured=[ref.name, cand.name], threshold="different implementations", evidence=first,
                     action=action, gate="harness")
    elif refs and ref.name not in {b.name for b in refs}:
        findings.add("HARNESS_SELF_COMPARE", severity, f"the claimed baseline {ref.name!r} is not the rig's reference "
                     f"implementation {refs[0].name!r}", evidence=first, action=action, gate="harness")

    # Correctness over seeds, with dtype-aware tolerance.
    for backend in (cand,):
        seeds = {r.seed for _, r in backend.rows if r.seed is not None}
        for ref_line, row in backend.rows:
            rtol = row.rtol if row.rtol is not None else DEFAULT_RTOL.get((row.dtype or "float32").lower(), 1e-4)
            bad = row.raised or row.correct is False or (row.max_rel_err is not None and row.max_rel_err > rtol)
            if row.correct is None and row.max_rel_err is None and not row.raised:
                findings.add("HARNESS_INCORRECT", severity, f"{backend.name!r} shape {shape_key(row.shape)}: no "
                             "correctness result recorded", evidence=[line_evidence(run, ref_line)], action=action,
                             gate="harness")
                break
            if bad:
                findings.add("HARNESS_INCORRECT", severity, f"{backend.name!r} shape {shape_key(row.shape)} seed "
                             f"{row.seed}: " + (f"raised {row.raised!r}" if row.raised else
                                                f"max_rel_err {row.max_rel_err!r} > rtol {rtol!r}"),
                             measured=row.max_rel_err, threshold=rtol, evidence=[line_evidence(run, ref_line)],
                             action=action, gate="harness")
                break
        if len(seeds) < MIN_SEEDS:
            findings.add("HARNESS_INCORRECT", severity, f"{backend.name!r} was checked on {len(seeds)} input seed(s); "
                         f"need >= {MIN_SEEDS}", measured=len(seeds), threshold=MIN_SEEDS, evidence=first,
                         action=action, gate="harness")
        stale = [(lr, r) for lr, r in backend.rows + ref.rows if r.fresh_inputs is False or r.warmup_discarded == 0]
        if stale:
            lr, r = stale[0]
            findings.add("HARNESS_INCORRECT", severity, f"{r.backend!r} timed " + (
                "the same inputs every iteration (cache-warm)" if r.fresh_inputs is False else
                "without discarding warm-up"), evidence=[line_evidence(run, lr)], action=action, gate="harness")

    # Dispatch path and shapes must be what the server runs.
    dispatch = served_dispatch(server_info)
    timed_dispatch = {r.dispatch for _, r in cand.rows if r.dispatch}
    if dispatch and timed_dispatch and timed_dispatch != {dispatch}:
        findings.add("HARNESS_DISPATCH_MISMATCH", severity, f"the rig timed {sorted(timed_dispatch)!r}, the server "
                     f"runs {dispatch!r}", measured=sorted(timed_dispatch), threshold=dispatch, evidence=first,
                     action=action, gate="harness")
    served = served_shapes(profile_rows, op)
    benched = cand.shapes()
    if served is not None:
        unserved = sorted(benched - served)
        if unserved and not (benched & served):
            findings.add("HARNESS_UNSERVED_SHAPES", severity, f"benchmarked shapes {unserved!r} are not among the "
                         f"served shapes {sorted(served)!r}", measured=unserved, threshold=sorted(served),
                         evidence=first, action=action, gate="harness")
        elif unserved:
            findings.add("HARNESS_UNSERVED_SHAPES", "FLAG", f"some benchmarked shapes are not served: {unserved!r}",
                         measured=unserved, threshold=sorted(served), evidence=first, action="flag", gate="harness")

    # Re-derived speedup over measured shapes (Triton on CPU is recorded unmeasured, never as a number).
    for shape in sorted(benched & ref.shapes()):
        rt, ct = ref.median_ms(shape), cand.median_ms(shape)
        if rt and ct:
            result.per_shape[shape] = rt / ct
    if result.per_shape:
        result.speedup = float(np.exp(np.mean(np.log(list(result.per_shape.values())))))
        if result.speedup > PLAUSIBLE_SPEEDUP:
            findings.add("IMPLAUSIBLE_SPEEDUP", "FLAG", f"re-derived isolated speedup {result.speedup:.2f}x exceeds "
                         f"{PLAUSIBLE_SPEEDUP}x without extra proof", measured=round(result.speedup, 3),
                         threshold=PLAUSIBLE_SPEEDUP, evidence=first, action="redo_harness", gate="harness")
    elif any(r.measured is False for _, r in cand.rows):
        findings.add("EVIDENCE_MISSING", severity, f"{cand.name!r} timing was not measured on this device; no speedup "
                     "can be derived", evidence=first, action=action, gate="harness")
    return result


def amdahl_bound_pct(speedup: float, fraction: float) -> float:
    """Largest e2e improvement (percent) an op taking ``fraction`` of time can give at ``speedup``."""
    return (1.0 / ((1.0 - fraction) + fraction / speedup) - 1.0) * 100.0


def op_fraction(profile_rows, op: str) -> float | None:
    if not profile_rows:
        return None
    total = sum(r.self_time_us for _, r in profile_rows)
    if total <= 0:
        return None
    mine = sum(r.self_time_us for _, r in profile_rows if canonical_op(r) == op.lower())
    return mine / total


_FRAGMENT_SUFFIX = re.compile(r"(_\d+|<.*>|\(.*\)|_kernel|_fwd|_impl|::\w+)$")


def canonical_op(row: ProfileLine) -> str:
    """Logical op of a profile row: its ``op`` field, else its kernel name without fragment suffixes
    (``rmsnorm_kernel_0``, ``rmsnorm_kernel<float>`` and ``rmsnorm`` are one op)."""
    if row.op:
        return row.op.strip().lower()
    name = row.name.strip().lower()
    while True:
        stripped = _FRAGMENT_SUFFIX.sub("", name)
        if stripped == name or not stripped:
            return name
        name = stripped


def merged_op_times(rows: list[tuple[LineRef, ProfileLine]]) -> dict[str, float]:
    """Merge fragmented kernels (one op under many kernel names) before ranking."""
    merged: dict[str, float] = defaultdict(float)
    for _, row in rows:
        merged[canonical_op(row)] += row.self_time_us
    return dict(merged)
