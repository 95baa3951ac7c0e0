"""Op-benchmark rigs (harness scope) and isolated-vs-e2e consistency (patch scope).

An isolated speedup is only evidence if the rig compared two different implementations, both correct
over several seeds with dtype-appropriate tolerance, on the shapes and dispatch path the server runs,
with fresh inputs every timed iteration and warm-up discarded.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict, Unpack

import numpy as np

from perfwarden.auditor.evidence import line_evidence
from perfwarden.auditor.findings import GateResult, finding
from perfwarden.auditor.gates.conditions import flatten
from perfwarden.formats.jsonl import LineRef, OpBenchLine, ProfileLine
from perfwarden.formats.op_names import canonical_op
from perfwarden.formats.records import Action, EvidenceRef, Finding, Severity

# rtol by dtype (torch.testing defaults, relaxed 10x for fused reductions), used when a row has none.
DEFAULT_RTOL = {"float32": 1e-4, "fp32": 1e-4, "float16": 1e-2, "fp16": 1e-2, "bfloat16": 5e-2, "bf16": 5e-2,
                "float64": 1e-7}
MIN_SEEDS = 3
"""Correctness must hold over at least this many distinct input seeds."""
PLAUSIBLE_SPEEDUP = 10.0
"""Speedups above this need extra proof (design §4)."""
SPEEDUP_TOLERANCE = 0.10
"""Claimed vs re-derived isolated speedup may differ by 10% before it is a mismatch."""

ProfileRows = list[tuple[LineRef, ProfileLine]]
"""``profile.jsonl``'s lines as the loader read them."""


def shape_key(shape: object) -> str:
    return "x".join(str(s) for s in shape) if isinstance(shape, list) else str(shape)


TimingPath = str
"""``call`` (``times_ms``: launched call by call, what an eager server pays) or ``graph`` (``graph_times_ms``:
replayed inside a CUDA graph, what a CUDA-graph server pays)."""


@dataclass
class Backend:
    name: str
    rows: list[tuple[LineRef, OpBenchLine]] = field(default_factory=list)

    @property
    def is_reference(self) -> bool:
        return any(r.is_reference for _, r in self.rows)

    def median_ms(self, shape: str, path: TimingPath = "call") -> float | None:
        times = [t for _, r in self.rows if shape_key(r.shape) == shape
                 for t in ((r.graph_times_ms if path == "graph" else r.times_ms) or [])]
        return float(np.median(times)) if times else None

    def shapes(self) -> set[str]:
        return {shape_key(r.shape) for _, r in self.rows}

    def digests(self) -> set[str]:
        return {r.impl_sha256 for _, r in self.rows if r.impl_sha256}

    def devices(self) -> set[str]:
        """Devices the rows ran on; rigs older than the GPU path wrote none and ran on the CPU."""
        return {device_kind(r.device) or "cpu" for _, r in self.rows}

    def timed_dispatch(self) -> set[str]:
        """Dispatch paths timed: each row's ``dispatch`` and, where it has graph figures, graph replay."""
        paths = {r.dispatch for _, r in self.rows if r.dispatch}
        if any(r.graph_times_ms for _, r in self.rows):
            paths.add("graph_replay")
        return paths


def group_backends(rows: list[tuple[LineRef, OpBenchLine]]) -> dict[str, Backend]:
    out: dict[str, Backend] = {}
    for ref, row in rows:
        out.setdefault(row.backend, Backend(row.backend)).rows.append((ref, row))
    return out


def device_kind(device: object) -> str | None:
    """``cuda:0`` -> ``cuda``; None when absent or not a string."""
    if not isinstance(device, str) or not device.strip():
        return None
    return device.strip().lower().split(":", 1)[0]


def served_dispatch(server_info: dict[str, object] | None) -> str | None:
    """Dispatch path the server runs: explicit ``dispatch`` key, else inferred from its knobs."""
    if not server_info:
        return None
    info = flatten(server_info)
    dispatch = info.get("dispatch")
    if isinstance(dispatch, str):
        return dispatch
    if any(info.get(k) in (True, "true", "1", 1) for k in ("torch_compile", "enable_torch_compile")):
        return "compiled"
    if "disable_cuda_graph" in info:
        return "eager" if info["disable_cuda_graph"] in (True, "true", 1) else "graph_replay"
    return "eager"


def served_device(server_info: dict[str, object] | None) -> str | None:
    """Device the server serves on, when its server_info says (``device``, as sglang and the embedded
    target report it)."""
    return device_kind(flatten(server_info).get("device")) if server_info else None


def served_shapes(profile_rows: ProfileRows | None, op: str) -> set[str] | None:
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
    timing_path: TimingPath = "call"
    """Which figure the speedup was derived from: the one of the dispatch path the server runs."""


def geomean_speedup(ref: Backend, cand: Backend, shapes: set[str], path: TimingPath) -> dict[str, float]:
    """Per shape: reference median / candidate median on one timing path (shapes lacking it are left out)."""
    out: dict[str, float] = {}
    for shape in sorted(shapes):
        rt, ct = ref.median_ms(shape, path), cand.median_ms(shape, path)
        if rt and ct:
            out[shape] = rt / ct
    return out


def _geomean(values: Iterable[float]) -> float:
    return float(np.exp(np.mean(np.log(list(values)))))


class _FindingDetails(TypedDict, total=False):
    """What a rig finding may carry beyond its code and message (``finding``'s keywords). ``action`` left
    out takes the rig's; given, even as None, it is the finding's own."""

    measured: object
    threshold: object
    evidence: list[EvidenceRef]
    action: Action | None


@dataclass
class _Rig:
    """One rig audit in progress: where its findings go and at what severity they count."""

    run: Path
    severity: Severity
    action: Action
    out: list[Finding] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)

    def add(self, code: str, message: str, severity: Severity | None = None, **kw: Unpack[_FindingDetails]) -> None:
        kw.setdefault("action", self.action)
        self.out.append(finding(code, severity or self.severity, message, gate="harness", **kw))


def _pick(backends: dict[str, Backend], claimed_ref: str | None, claimed_cand: str | None
          ) -> tuple[Backend | None, Backend | None, list[Backend]]:
    """The claimed (else the rig's) reference, the claimed (else fastest other) candidate, the rig's references."""
    refs = [b for b in backends.values() if b.is_reference]
    ref = backends.get(claimed_ref) if claimed_ref else (refs[0] if refs else None)
    cand = backends.get(claimed_cand) if claimed_cand else None
    if cand is None:
        others = [b for b in backends.values() if b is not ref]
        cand = min(others, key=lambda b: np.median([b.median_ms(s) or np.inf for s in b.shapes()]), default=None)
    return ref, cand, refs


def _check_self_compare(r: _Rig, ref: Backend, cand: Backend, refs: list[Backend], claimed_ref: str | None,
                        claimed_cand: str | None, first: list[EvidenceRef]) -> None:
    """Same backend name, same implementation digest, or a claimed reference that is not the rig's."""
    same_digest = ref.digests() & cand.digests()
    if ref.name == cand.name or same_digest or (claimed_ref and claimed_ref == claimed_cand):
        r.add("HARNESS_SELF_COMPARE", f"the rig compares {cand.name!r} against {ref.name!r}, the same implementation"
              + (" (same source digest)" if same_digest else ""), measured=[ref.name, cand.name],
              threshold="different implementations", evidence=first)
    elif refs and ref.name not in {b.name for b in refs}:
        r.add("HARNESS_SELF_COMPARE", f"the claimed baseline {ref.name!r} is not the rig's reference "
              f"implementation {refs[0].name!r}", evidence=first)


def _check_correctness(r: _Rig, ref: Backend, cand: Backend, first: list[EvidenceRef]) -> None:
    """Correct over enough seeds with dtype-aware tolerance, fresh inputs, warm-up discarded, L2 flushed."""
    seeds = {row.seed for _, row in cand.rows if row.seed is not None}
    for ref_line, row in cand.rows:
        rtol = row.rtol if row.rtol is not None else DEFAULT_RTOL.get((row.dtype or "float32").lower(), 1e-4)
        bad = row.raised or row.correct is False or (row.max_rel_err is not None and row.max_rel_err > rtol)
        if row.correct is None and row.max_rel_err is None and not row.raised:
            r.add("HARNESS_INCORRECT", f"{cand.name!r} shape {shape_key(row.shape)}: no correctness result recorded",
                  evidence=[line_evidence(r.run, ref_line)])
            break
        if bad:
            r.add("HARNESS_INCORRECT", f"{cand.name!r} shape {shape_key(row.shape)} seed {row.seed}: "
                  + (f"raised {row.raised!r}" if row.raised else f"max_rel_err {row.max_rel_err!r} > rtol {rtol!r}"),
                  measured=row.max_rel_err, threshold=rtol, evidence=[line_evidence(r.run, ref_line)])
            break
    if len(seeds) < MIN_SEEDS:
        r.add("HARNESS_INCORRECT", f"{cand.name!r} was checked on {len(seeds)} input seed(s); need >= {MIN_SEEDS}",
              measured=len(seeds), threshold=MIN_SEEDS, evidence=first)
    stale = [(lr, row) for lr, row in cand.rows + ref.rows if row.fresh_inputs is False or row.warmup_discarded == 0]
    if stale:
        lr, row = stale[0]
        r.add("HARNESS_INCORRECT", f"{row.backend!r} timed " + (
            "the same inputs every iteration (cache-warm)" if row.fresh_inputs is False else
            "without discarding warm-up"), evidence=[line_evidence(r.run, lr)])
    warm_l2 = [(lr, row) for lr, row in cand.rows + ref.rows
               if device_kind(row.device) == "cuda" and row.l2_flushed is False]
    if warm_l2:
        lr, row = warm_l2[0]
        r.add("HARNESS_INCORRECT", f"{row.backend!r} was timed on the GPU without flushing the L2 cache between "
              "calls: its inputs stay cache-resident, a server's fresh activations do not", measured=False,
              threshold="l2_flushed true", evidence=[line_evidence(r.run, lr)])


def _check_served(r: _Rig, ref: Backend, cand: Backend, server_info: dict[str, object] | None,
                  profile_rows: ProfileRows | None, op: str, first: list[EvidenceRef]) -> TimingPath:
    """Device, dispatch path and shapes must be what the server runs; returns the timing path it pays."""
    device = served_device(server_info)
    rig_devices = ref.devices() | cand.devices()
    if device and rig_devices != {device}:
        r.add("HARNESS_DISPATCH_MISMATCH", f"the rig ran on {sorted(rig_devices)!r}, the server serves on {device!r}",
              measured=sorted(rig_devices), threshold=device, evidence=first)
    dispatch = served_dispatch(server_info)
    timed = cand.timed_dispatch()
    raised = next(((lr, row) for lr, row in cand.rows if row.graph_raised), None)
    if dispatch == "graph_replay" and raised is not None:
        lr, row = raised
        r.add("HARNESS_INCORRECT", f"{cand.name!r} could not be captured in a CUDA graph ({row.graph_raised!r}) and "
              "the server replays graphs: it would not run as served", measured=row.graph_raised,
              threshold="capturable", evidence=[line_evidence(r.run, lr)])
    elif dispatch and timed and dispatch not in timed:
        r.add("HARNESS_DISPATCH_MISMATCH", f"the rig timed {sorted(timed)!r}, the server runs {dispatch!r}",
              measured=sorted(timed), threshold=dispatch, evidence=first)
    served = served_shapes(profile_rows, op)
    benched = cand.shapes()
    if served is not None:
        unserved = sorted(benched - served)
        if unserved and not (benched & served):
            r.add("HARNESS_UNSERVED_SHAPES", f"benchmarked shapes {unserved!r} are not among the served shapes "
                  f"{sorted(served)!r}", measured=unserved, threshold=sorted(served), evidence=first)
        elif unserved:
            r.add("HARNESS_UNSERVED_SHAPES", f"some benchmarked shapes are not served: {unserved!r}", severity="FLAG",
                  measured=unserved, threshold=sorted(served), evidence=first, action="flag")
    return "graph" if dispatch == "graph_replay" else "call"


def audit_rig(run: Path, rows: list[tuple[LineRef, OpBenchLine]], claimed_ref: str | None, claimed_cand: str | None,
              server_info: dict[str, object] | None, profile_rows: ProfileRows | None, op: str,
              severity: Severity = "FAIL", action: Action = "redo_harness", claimed_speedup: float | None = None,
              rig: RigFigures | None = None) -> GateResult[RigResult]:
    """Every harness gate over one op benchmark; its value is the re-derived speedup on the timing path
    of the dispatch the server runs. ``rig``: what ``rig.json`` says about the rig's memory roofline
    (None: a rig that recorded none, judged by the fixed ceiling and said so)."""
    r = _Rig(run, severity, action)
    backends = group_backends(rows)
    result = RigResult()
    ref, cand, refs = _pick(backends, claimed_ref, claimed_cand)
    if ref is None or cand is None:
        r.add("EVIDENCE_MISSING", f"op bench of {op!r} lacks a reference or candidate backend "
              f"(backends: {sorted(backends)!r})", action=None)
        return GateResult(r.out, value=result)
    result.reference, result.candidate = ref.name, cand.name
    first = [line_evidence(run, cand.rows[0][0])]
    _check_self_compare(r, ref, cand, refs, claimed_ref, claimed_cand, first)
    _check_correctness(r, ref, cand, first)
    path = result.timing_path = _check_served(r, ref, cand, server_info, profile_rows, op, first)
    benched = cand.shapes()
    # Re-derived speedup on the served path (Triton on CPU is recorded unmeasured, never as a number).
    result.per_shape = geomean_speedup(ref, cand, benched & ref.shapes(), path)
    if result.per_shape:
        result.speedup = _geomean(result.per_shape.values())
        _check_plausible(r, ref, cand, result, rig or RigFigures(), first)
        other = geomean_speedup(ref, cand, benched & ref.shapes(), "call" if path == "graph" else "graph")
        if claimed_speedup is not None and other and _claims_other_path(claimed_speedup, result.speedup,
                                                                       _geomean(other.values())):
            r.add("HARNESS_DISPATCH_MISMATCH", f"the claimed {claimed_speedup:.3g}x is the "
                  f"{'CUDA-graph' if path == 'call' else 'call-by-call'} figure; the server runs "
                  f"{served_dispatch(server_info)!r}, where the rig measured {result.speedup:.3g}x",
                  measured=round(result.speedup, 4), threshold={"claimed": claimed_speedup, "served_path": path},
                  evidence=first)
    elif any(row.measured is False for _, row in cand.rows):
        r.add("EVIDENCE_MISSING", f"{cand.name!r} timing was not measured on this device; no speedup can be derived",
              evidence=first)
    else:
        figure = "graph_times_ms (the server replays CUDA graphs)" if path == "graph" else "times_ms"
        r.add("EVIDENCE_MISSING", f"no shape has {figure} for both {ref.name!r} and {cand.name!r}: no speedup can be "
              "derived", threshold=figure, evidence=first)
    return GateResult(r.out, r.not_checked, value=result)


# -------------------------------------------------------------------------------- the plausibility bound

ROOFLINE_MARGIN = 0.5
"""A candidate's median call may be at most this far under the rig's floor (the time its measured bandwidth
needs to move the op's bytes) before it is implausible. The floor is a best-of copy; a tuned kernel can
beat the library copy's bandwidth somewhat, never by 2x. The op bench refuses at the same margin."""
ITEMSIZE = {"float32": 4, "fp32": 4, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2, "float64": 8}


@dataclass(frozen=True)
class RigFigures:
    """``rig.json``'s memory roofline as the auditor reads it: per shape key, bytes moved per call and the
    rig's measured bandwidth (GB/s). ``recorded``: the rig wrote a roofline at all; ``required``: the run
    is one the harness sealed, so a missing figure fails closed instead of falling back."""

    per_shape: dict[str, tuple[object, object]] = field(default_factory=dict)
    recorded: bool = False
    required: bool = False
    dtype: str | None = None


def rig_figures(rig_json: dict[str, object] | None, required: bool) -> RigFigures:
    """Read ``rig.json``'s ``roofline`` (``{shape: {bytes_moved, bandwidth_gb_s, floor_ms}}``), values unjudged."""
    if not isinstance(rig_json, dict):  # the loader's object, or None where there is none
        return RigFigures(required=required)
    roof = rig_json.get("roofline")
    if not isinstance(roof, dict):
        return RigFigures(required=required)
    per_shape = {str(k): (v.get("bytes_moved"), v.get("bandwidth_gb_s")) for k, v in roof.items() if isinstance(v, dict)}
    dtype = rig_json.get("dtype")
    return RigFigures(per_shape, recorded=True, required=required, dtype=dtype if isinstance(dtype, str) else None)


def _positive(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if np.isfinite(value) and value > 0 else None


def floor_ms(figures: RigFigures, shape: str) -> float | None:
    """The time this rig needs to move the op's bytes at ``shape`` (bytes / measured bandwidth), or None when
    the figure is absent, not a positive number, or fewer bytes than the shape's own input and output
    (a figure shrunk to admit a faster time is no floor)."""
    nbytes, bandwidth = (_positive(v) for v in figures.per_shape.get(shape, (None, None)))
    if nbytes is None or bandwidth is None:
        return None
    dims = [int(d) for d in shape.split("x") if d.isdigit()]
    least = 2 * int(np.prod(dims)) * ITEMSIZE.get((figures.dtype or "float32").lower(), 2) if dims else 0
    if nbytes < least:
        return None
    return nbytes / (bandwidth * 1e6)


def _check_plausible(r: _Rig, ref: Backend, cand: Backend, result: RigResult, figures: RigFigures,
                     first: list[EvidenceRef]) -> None:
    """A speedup is implausible when the candidate's time is under what the rig's measured bandwidth allows
    for the op's bytes. Where the rig recorded no roofline: the fixed ceiling, FLAG, and said so -- unless
    the harness sealed the run, which always records one (then an absent figure is itself a FLAG)."""
    if not figures.recorded and not figures.required:
        r.not_checked.append("isolated speedup plausibility: rig.json records no memory roofline (bytes moved, "
                             f"bandwidth); the fixed {PLAUSIBLE_SPEEDUP:g}x ceiling was used instead")
        if result.speedup is not None and result.speedup > PLAUSIBLE_SPEEDUP:
            r.add("IMPLAUSIBLE_SPEEDUP", f"re-derived isolated speedup {result.speedup:.2f}x exceeds "
                  f"{PLAUSIBLE_SPEEDUP}x without extra proof (the rig recorded no roofline)", severity="FLAG",
                  measured=round(result.speedup, 3), threshold=PLAUSIBLE_SPEEDUP, evidence=first, action="redo_harness")
        return
    path = result.timing_path
    missing: list[str] = []
    under: list[tuple[str, float, float, float | None]] = []
    for shape in sorted(result.per_shape):
        floor, mine = floor_ms(figures, shape), cand.median_ms(shape, path)
        if floor is None:
            missing.append(shape)
        elif mine is not None and mine < ROOFLINE_MARGIN * floor:
            under.append((shape, mine, floor, ref.median_ms(shape, path)))
    if missing:
        r.add("EVIDENCE_MISSING", f"rig.json gives no usable memory roofline (bytes moved and measured bandwidth) for "
              f"shape(s) {missing!r}: the speedup's plausibility cannot be bounded", severity="FLAG",
              measured=missing, threshold="bytes_moved and bandwidth_gb_s per benched shape", evidence=first,
              action="redo_harness")
    for shape, mine, floor, ref_ms in under[:3]:
        bound = ref_ms / (ROOFLINE_MARGIN * floor) if ref_ms else None
        r.add("IMPLAUSIBLE_SPEEDUP", f"{cand.name!r} at {shape}: {mine * 1e3:.3g} us per call, under "
              f"{ROOFLINE_MARGIN:g}x the {floor * 1e3:.3g} us this rig needs to move the op's bytes at its measured "
              f"bandwidth" + (f" (the most it allows is {bound:.3g}x)" if bound else ""), severity="FLAG",
              measured=round(mine, 6), threshold={"floor_ms": round(floor, 6), "margin": ROOFLINE_MARGIN,
                                                  "max_plausible_speedup": round(bound, 3) if bound else None},
              evidence=first, action="redo_harness")


def _claims_other_path(claimed: float, served: float, other: float) -> bool:
    """The claim matches the figure of the path the server does not run, and not the served one."""
    def near(a: float, b: float) -> bool:
        return abs(a - b) <= SPEEDUP_TOLERANCE * b
    return near(claimed, other) and not near(claimed, served)


def amdahl_bound_pct(speedup: float, fraction: float) -> float:
    """Largest e2e improvement (percent) an op taking ``fraction`` of time can give at ``speedup``."""
    return (1.0 / ((1.0 - fraction) + fraction / speedup) - 1.0) * 100.0


def op_fraction(profile_rows: ProfileRows | None, op: str) -> float | None:
    if not profile_rows:
        return None
    total = sum(r.self_time_us for _, r in profile_rows)
    if total <= 0:
        return None
    mine = sum(r.self_time_us for _, r in profile_rows if canonical_op(r) == op.lower())
    return mine / total


# ----------------------------------------------------------------------- what the rig says it timed

RIG_TIME_SLACK = 1.05
"""The lines' calls may add to at most this share of the rig's whole run (``duration_s``, a wall clock read
around everything the rig did, correctness and worker start-up included): clock rounding, nothing more."""


def _rig_iters(rig_json: dict[str, object]) -> int | None:
    iters = rig_json.get("iters")
    return iters if isinstance(iters, int) and not isinstance(iters, bool) and iters > 0 else None


def _rig_duration_ms(rig_json: dict[str, object]) -> float | None:
    d = rig_json.get("duration_s")
    if isinstance(d, bool) or not isinstance(d, (int, float)) or not np.isfinite(d) or d <= 0:
        return None
    return float(d) * 1e3


def _parent_clock(rig_json: dict[str, object], rows: list[tuple[LineRef, OpBenchLine]]) -> bool:
    """Whether the figures were taken by the parent's clock (one a trial): so where ``rig.json``'s ``timing``
    or ``timing_method``, or any line's ``timing_method``, says so. Any one witness decides, never the
    rig's silence: a rig stripped of its clock would otherwise take ``iters`` figures a line, and every
    line padded to that many would fit it."""
    timing = rig_json.get("timing")
    return ((isinstance(timing, dict) and timing.get("clock") == "parent")
            or rig_json.get("timing_method") == "parent_clock"
            or any(row.timing_method == "parent_clock" for _, row in rows))


def check_rig_samples(run: Path, rows: list[tuple[LineRef, OpBenchLine]], rig_json: dict[str, object] | None,
                      rig_file: str, required: bool) -> GateResult[None]:
    """Every measured line holds what its rig timed, and the rig's clock holds them all.

    ``rig.json`` states the calls per trial (``iters``). With the parent's clock (``_parent_clock``) a line
    holds one figure per trial, the per-call time of its ``iters`` calls; otherwise one figure per call,
    ``iters`` of them. A line with another count holds figures the rig never took (padding a candidate with
    fast calls moves its median). Every timed call ran inside the rig's run, so the
    lines' calls add to at most its ``duration_s`` (a reference stretched to slow it down breaks this). The
    graph figures are held to the same count; their replays are not summed (a replay's calls are not
    recorded per figure). A rig.json that states no calls per trial or no duration cannot witness its lines
    (the harness always states both): a FLAG; so is a sealed run without one. An unsealed bench with no
    rig.json at all (a hand-made or foreign bench) is listed as not checked."""
    if rig_json is None:
        why = "op bench figures against the rig's iterations and clock: no rig.json"
        if not required:
            return GateResult(not_checked=[why])
        return GateResult([finding("EVIDENCE_MISSING", "FLAG", f"{why} in a sealed run", action="redo_harness",
                                   gate="harness")])
    iters, duration_ms = _rig_iters(rig_json), _rig_duration_ms(rig_json)
    if iters is None or duration_ms is None:
        missing = " and ".join(n for n, v in (("iters", iters), ("duration_s", duration_ms)) if v is None)
        why = f"{rig_file} states no usable {missing}: nothing witnesses how many calls its lines' figures stand for"
        return GateResult([finding("EVIDENCE_MISSING", "FLAG", why, evidence=[EvidenceRef(file=rig_file)],
                                   action="redo_harness", gate="harness")])
    per_line, calls_per_figure = (1, iters) if _parent_clock(rig_json, rows) else (iters, 1)
    findings: list[Finding] = []
    total_ms = 0.0
    for ref, row in rows:
        counts = [(name, len(figs)) for name, figs in (("times_ms", row.times_ms), ("graph_times_ms", row.graph_times_ms))
                  if figs is not None and len(figs) != per_line]
        if counts:
            findings.append(finding(
                "EVIDENCE_CORRUPT", "FAIL", f"line {ref.line} ({row.backend!r}, shape {shape_key(row.shape)}, trial "
                f"{row.trial}) holds " + ", ".join(f"{n} {name}" for name, n in counts) + f" where {rig_file} "
                f"timed {iters} calls per trial ({per_line} figure{'s' if per_line != 1 else ''} a line): figures the "
                "rig never took", measured=dict(counts), threshold=per_line,
                evidence=[line_evidence(run, ref), EvidenceRef(file=rig_file)], action="eject", gate="harness"))
        total_ms += sum(row.times_ms or ()) * calls_per_figure
    if total_ms > duration_ms * RIG_TIME_SLACK:
        findings.append(finding(
            "EVIDENCE_CORRUPT", "FAIL", f"the op bench's timed calls add to {total_ms / 1e3:.4g} s, longer than "
            f"the rig's whole run ({duration_ms / 1e3:.4g} s in {rig_file}): its lines state time the rig never "
            "spent", measured=round(total_ms / 1e3, 6), threshold=round(duration_ms / 1e3 * RIG_TIME_SLACK, 6),
            evidence=[line_evidence(run, rows[0][0]), EvidenceRef(file=rig_file)], action="eject", gate="harness"))
    return GateResult(findings)
