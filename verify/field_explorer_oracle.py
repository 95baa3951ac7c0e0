"""The field explorer's semantic oracle and its own arithmetic.

The oracle decides, from a run's files alone and with the red team's own arithmetic (never the auditor's
code), whether an edit changed something the auditor judges:

- the **headline**: the claim's metric, candidate vs baseline, median over reps of each rep's figure
  re-derived from its per-request arrays (``red_team.rep_metric``);
- the **conditions**: which non-inert knobs differ between the claim's legs (the union of every copy a
  leg states: ``server_info.json``, each bench line's ``server_info``, ``leg.json``'s overlay), whether a
  leg's copies disagree, and the timeline (reps of different legs overlapping, interleaved, before the run);
- the **load**: whether every rep of both legs ran one load (prompts, request parameters, concurrency,
  rate, scenario, LoadGen settings, request counts against ``issued``), and ``leg.json``'s ``workload``;
- the **evidence set**: which records exist (files, lines, reps) and how many requests each rep holds,
  whether LoadGen's own logs agree with the lines they witness, whether the legs' outputs agree (parity)
  and every quality eval's figures; for a harness claim the headline is the op bench's speedup.

Structural edits of a harness record (a field renamed, retyped, moved, or a repeated key) change the
evidence by definition: strict evidence says such a record is not the schema's any more.

Which keys are judged comes from the evidence model's *data* (``auditor/data/evidence_model.json``), read as
a specification (a key it calls bookkeeping or a measurement is one the auditor is allowed to ignore),
not from the gates.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from perfwarden.auditor.model.schema import evidence_model
from perfwarden.formats.records import QUALITY_ITEMS_FIELDS
from perfwarden.redteam.attack import rep_metric

HEADLINE_POINTS = 1.0
"""A headline delta that moved by more than this many percentage points (or changed sign) is a change."""
LOAD_FIELDS = ("prompt_ids", "request_params", "max_concurrency", "request_rate", "scenario", "dataset_name",
               "random_input_len", "random_output_len", "random_range_ratio", "sharegpt_output_len", "dataset_path")
def judged_key(key: str) -> bool:
    """Whether the auditor must hold a server_info key across copies and legs, read from the evidence model
    (``auditor/data/evidence_model.json``) as a specification: a condition, an identity, or a key the model
    does not know; never bookkeeping (proven inert), a measurement (the server's counters) or a field it
    does not judge."""
    found = evidence_model().role_of("server_info", key)
    return found is None or found.role in ("condition", "identity")


@dataclass(frozen=True)
class Judged:
    """What the auditor judges in one run, as the oracle sees it."""

    headline: float | None
    conditions: tuple
    load: tuple
    evidence: tuple

    def changed(self, other: "Judged") -> list[str]:
        """Which of the four parts differ (the headline by more than ``HEADLINE_POINTS`` or in sign)."""
        out = []
        a, b = self.headline, other.headline
        if (a is None) != (b is None) or (a is not None and b is not None and (
                abs(a - b) > HEADLINE_POINTS or (a > 0) != (b > 0))):
            out.append("headline")
        for name in ("conditions", "load", "evidence"):
            if getattr(self, name) != getattr(other, name):
                out.append(name)
        return out


# ------------------------------------------------------------------------------------- reading


_READ: dict[Path, list[Any]] = {}
"""Lines read during one :func:`judge_run` (each file parsed once per judgement)."""


def _lines(path: Path) -> list[Any]:
    """Every line of a JSONL file as JSON (a line that does not parse is kept as its text)."""
    if path in _READ:
        return _READ[path]
    out: list[Any] = _READ.setdefault(path, [])
    try:
        text = path.read_text("utf-8", errors="replace")
    except OSError:
        return out
    for raw in text.splitlines():
        if raw.strip():
            try:
                out.append(json.loads(raw))
            except ValueError:
                out.append(raw)
    return out


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text("utf-8", errors="replace"))
    except (OSError, ValueError):
        return None


def json_object(value: object) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one: a field an edit removed or retyped reads as
    holding nothing."""
    return value if isinstance(value, dict) else {}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def flat_keys(obj: Any, prefix: str = "", leaf: Callable[[Any], Any] = _canonical) -> dict[str, Any]:
    """Nested objects as dotted keys (an empty object is a leaf); each leaf through ``leaf`` (by default its
    canonical JSON, so values of any type compare)."""
    if not isinstance(obj, dict):
        return {}
    out: dict[str, Any] = {}
    for k, v in obj.items():
        if isinstance(v, dict) and v:
            out.update(flat_keys(v, f"{prefix}{k}.", leaf))
        else:
            out[f"{prefix}{k}"] = leaf(v)
    return out


def _judged_keys(flat: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in flat.items() if judged_key(k)}


# ------------------------------------------------------------------------------------ the parts


def headline(run: Path, base: str, cand: str, metric: str) -> float | None:
    """Candidate vs baseline change of ``metric`` in percent, re-derived here; None when not derivable."""
    try:
        medians = []
        for leg in (base, cand):
            lines = [x for x in _lines(run / "legs" / leg / "bench_runs.jsonl") if isinstance(x, dict)]
            values = [rep_metric(line, metric) for line in lines]
            if not values or not all(math.isfinite(v) for v in values):
                return None
            medians.append(float(np.median(values)))
        return (medians[1] / medians[0] - 1.0) * 100.0 if medians[0] else None
    except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError, AttributeError):
        return None


def _copies(run: Path, leg: str) -> list[dict[str, Any]]:
    """Every copy of a leg's conditions, flattened, judged keys only."""
    copies = [_judged_keys(flat_keys(_json(run / "legs" / leg / "server_info.json")))]
    for line in _lines(run / "legs" / leg / "bench_runs.jsonl"):
        if isinstance(line, dict) and isinstance(line.get("server_info"), dict):
            copies.append(_judged_keys(flat_keys(line["server_info"])))
    spec = _json(run / "legs" / leg / "leg.json")
    overlay = spec.get("overlay") if isinstance(spec, dict) else None
    config = overlay.get("config") if isinstance(overlay, dict) else None
    if isinstance(config, dict):
        copies.append(_judged_keys(flat_keys(config)))
    return copies


def _union(copies: list[dict[str, Any]]) -> dict[str, set]:
    out: dict[str, set] = {}
    for copy in copies:
        for k, v in copy.items():
            out.setdefault(k, set()).add(v)
    return out


def _timeline(run: Path, legs: list[str]) -> tuple:
    """Whether reps of different legs overlap, whether the legs interleave, whether a rep starts before the
    run (60 s slack, as docs/auditing.md states)."""
    windows: dict[str, list[tuple[float, float | None]]] = {}
    for leg in legs:
        for line in _lines(run / "legs" / leg / "bench_runs.jsonl"):
            if isinstance(line, dict) and isinstance(line.get("started_at"), (int, float)):
                end = line.get("ended_at") if isinstance(line.get("ended_at"), (int, float)) else None
                windows.setdefault(leg, []).append((float(line["started_at"]), end))
    overlap = any(s1 < (e2 or s2) and s2 < (e1 or s1)
                  for i, a in enumerate(legs) for b in legs[i + 1:]
                  for s1, e1 in windows.get(a, []) for s2, e2 in windows.get(b, []) if e1 and e2)
    starts = [sorted(s for s, _ in windows.get(leg, [])) for leg in legs]
    blocks = len(starts) == 2 and all(starts) and (max(starts[0]) < min(starts[1]) or max(starts[1]) < min(starts[0]))
    manifest = _json(run / "run.json")
    began = manifest.get("started_at") if isinstance(manifest, dict) else None
    early = None
    if isinstance(began, str):
        try:
            t0 = datetime.fromisoformat(began.replace("Z", "+00:00")).timestamp()
            early = any(s < t0 - 60 for leg in legs for s, _ in windows.get(leg, []))
        except ValueError:
            early = None
    return overlap, blocks, early


CONTENTION_FIGURES = ("ncpu", "ncpu_available", "cpu_quota_cores", "cpu_busy_pct", "loadavg", "loadavg_1m", "busy")


def _contention(run: Path, legs: list[str]) -> tuple:
    """Per rep, the JSON type of every figure its contention samples state (a figure renamed, dropped or
    retyped changes whether the machine can be shown quiet)."""
    out = []
    for leg in legs:
        for line in _lines(run / "legs" / leg / "bench_runs.jsonl"):
            con = line.get("contention") if isinstance(line, dict) else None
            samples = [con.get(k) for k in ("start", "end") if k in con] or [con] if isinstance(con, dict) else [con]
            out.append(tuple(tuple((k, type(s.get(k)).__name__) for k in CONTENTION_FIGURES if k in s)
                             if isinstance(s, dict) else type(s).__name__ for s in samples))
    return tuple(out)


def conditions(run: Path, legs: list[str], declared: frozenset[str]) -> tuple:
    per_leg = {leg: _union(_copies(run, leg)) for leg in legs}
    disagree = frozenset((leg, k) for leg, u in per_leg.items() for k, vs in u.items() if len(vs) > 1)
    keys = set().union(*(set(u) for u in per_leg.values())) if per_leg else set()
    differ = frozenset(k for k in keys if len({frozenset(u.get(k, {"<absent>"})) for u in per_leg.values()}) > 1
                       and k not in declared and k.split(".")[0] not in declared)
    return differ, disagree, _timeline(run, legs), _contention(run, legs)


def _load_of(line: dict[str, Any]) -> tuple:
    lens = line.get("input_lens")
    lens_key = json.dumps(sorted(lens) if isinstance(lens, list) and all(isinstance(x, int) for x in lens) else lens)
    loadgen = line.get("loadgen")
    settings = loadgen.get("settings") if isinstance(loadgen, dict) else None
    if isinstance(settings, dict):  # null and absent both mean "not set"
        settings = {k: v for k, v in settings.items() if v is not None}
    ids = line.get("prompt_ids")
    ids_key = json.dumps(sorted(map(str, ids)) if isinstance(ids, list) else ids)
    return (ids_key, lens_key, json.dumps(settings, sort_keys=True),
            *(json.dumps(line.get(k), sort_keys=True) for k in LOAD_FIELDS if k != "prompt_ids"))


def _short(line: dict[str, Any]) -> bool:
    """A rep holding fewer requests than LoadGen issued (requests removed)."""
    issued, errors = line.get("issued"), line.get("errors")
    return isinstance(issued, int) and isinstance(errors, list) and len(errors) < issued


def load(run: Path, legs: list[str]) -> tuple:
    loads, short, stated = set(), False, []
    for leg in legs:
        for line in _lines(run / "legs" / leg / "bench_runs.jsonl"):
            if isinstance(line, dict):
                loads.add(_load_of(line))
                short = short or _short(line)
        spec = _json(run / "legs" / leg / "leg.json")
        stated.append(json.dumps(spec.get("workload") if isinstance(spec, dict) else None, sort_keys=True))
    return len(loads) <= 1, short, len(set(stated)) <= 1


def evidence(run: Path, legs: list[str]) -> tuple:
    """Which records exist: files of the run, and per bench line of the claim's legs its request counts and
    whether it is the harness's (``schema_version`` set: a line without one is judged as a foreign file's).
    A field a line no longer holds is judged by what it feeds (headline, conditions, load, witnesses)."""
    files = tuple(sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file() and "claims" not in p.parts))
    reps: list[tuple[str, str] | tuple[str, bool, tuple[int, ...]]] = []
    for leg in legs:
        for line in _lines(run / "legs" / leg / "bench_runs.jsonl"):
            if not isinstance(line, dict):
                reps.append((leg, "unparsed"))
                continue
            counts = tuple(len(v) if isinstance(v, list) else -1 for v in (line.get(k) for k in (
                "errors", "ttfts", "output_lens", "input_lens", "itls", "latencies", "request_starts")))
            reps.append((leg, line.get("schema_version") is not None, counts))
    return files, tuple(sorted(reps, key=repr))


PARITY_ALLOWANCE = 0.25
"""The share of greedy outputs a lossless change may flip (float reassociation flips late near-ties): parity
changes when the prompts stop pairing up or more than this share differ."""
WITNESS_TOLERANCE = 0.05
"""Two witnesses of one quantity that differ by more than this (relative) disagree."""


def _mllog(path: Path) -> dict[str, Any]:
    """First value of every key of a LoadGen detail log (``:::MLLOG {json}`` lines)."""
    out: dict[str, Any] = {}
    try:
        text = path.read_text("utf-8", errors="replace")
    except OSError:
        return out
    for raw in text.splitlines():
        if raw.startswith(":::MLLOG "):
            try:
                rec = json.loads(raw[len(":::MLLOG "):])
            except ValueError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("key"), str):
                out.setdefault(rec["key"], rec.get("value"))
    return out


def _summary(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        text = path.read_text("utf-8", errors="replace")
    except OSError:
        return out
    for raw in text.splitlines():
        if ":" in raw and not raw.startswith("="):
            key, value = raw.split(":", 1)
            out.setdefault(key.strip().lstrip("*").strip(), value.strip())
    return out


def _num(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _near(a: float | None, b: float | None) -> bool | None:
    if a is None or b is None:
        return None
    return abs(a - b) <= WITNESS_TOLERANCE * max(abs(a), abs(b), 1e-12)


def witnesses(run: Path, legs: list[str]) -> tuple:
    """Per rep with LoadGen logs: whether LoadGen's own figures agree with the bench line (samples issued,
    completed rate, tokens per second, the longest latency) and the summary with the detail log."""
    out = []
    for leg in legs:
        for index, line in enumerate(_lines(run / "legs" / leg / "bench_runs.jsonl")):
            loadgen = line.get("loadgen") if isinstance(line, dict) else None
            folder = loadgen.get("dir") if isinstance(loadgen, dict) else None
            if not isinstance(folder, str) or ".." in folder:
                continue
            detail, summary = _mllog(run / folder / "mlperf_log_detail.txt"), _summary(run / folder / "mlperf_log_summary.txt")
            queries, per_query = _num(detail.get("result_query_count")), _num(
                detail.get("generated_samples_per_query") or detail.get("effective_samples_per_query"))
            errors, lats = line.get("errors"), line.get("latencies")
            duration = _num(line.get("duration"))
            n = len(errors) if isinstance(errors, list) else None
            issued = queries * per_query if queries is not None and per_query is not None else None
            rate = n / duration if n is not None and duration else None
            lens = line.get("output_lens")
            toks = float(sum(lens)) if isinstance(lens, list) and all(_num(x) is not None for x in lens) else None
            peak = max(lats) * 1e9 if isinstance(lats, list) and lats and all(isinstance(x, (int, float)) for x in lats) else None
            out.append((leg, index, _near(issued, n), _near(_num(detail.get("result_samples_per_second")), rate),
                        _near(_num(detail.get("result_tokens_per_second")), toks / duration if toks is not None and duration else None),
                        _near(_num(detail.get("result_max_latency_ns")), peak),
                        _near(_num(summary.get("Samples per second")), _num(detail.get("result_samples_per_second")))))
    return tuple(sorted(out, key=repr))


def correctness(run: Path, legs: list[str], parity_kind: Any = "exact_text") -> tuple:
    """Whether the legs' greedy outputs agree prompt by prompt (parity; not for a claim that declares none,
    a lossy change judged by its quality eval), and every quality eval's figures. Parity is None where it is
    not asked or holds: a claim whose waiver is dropped and whose outputs agree asks for more and gets it
    (found by the field explorer: a dropped ``parity: none`` counted as a change)."""
    outputs = []
    for leg in legs:
        rows = {}
        for row in _lines(run / "legs" / leg / "outputs.jsonl"):
            if isinstance(row, dict):
                rows[json.dumps(row.get("prompt_id"))] = json.dumps([row.get("text"), row.get("token_ids"), row.get("error")])
        outputs.append(rows)
    parity = None
    if parity_kind != "none" and len(outputs) == 2:
        shared = set(outputs[0]) & set(outputs[1])
        differ = sum(outputs[0][k] != outputs[1][k] for k in shared)
        parity = (set(outputs[0]) == set(outputs[1]), differ > PARITY_ALLOWANCE * max(1, len(shared)))
        if parity == (True, False):
            parity = None  # a parity that holds is a parity not asked: asking for it only makes the claim stricter
    quality = []
    for path in sorted((run / "quality").glob("*.json")) if (run / "quality").is_dir() else []:
        q = _json(path)
        if isinstance(q, dict):
            q = {"completed": True, **q}  # the record's default: absent is completed
            digest = next((q[k] for k in QUALITY_ITEMS_FIELDS if isinstance(q.get(k), str) and q[k]), None)
            # Scores are judged by the quality gate against its own tolerance, which the oracle does not model:
            # what it judges here is which eval, of which legs, on which items, finished.
            quality.append((*(json.dumps(q.get(k)) for k in ("eval_id", "leg", "n", "baseline_leg", "completed")),
                            digest))
        else:
            quality.append((path.name, "unparsed"))
    return parity, tuple(len(o) for o in outputs), tuple(quality)


def op_speedup(run: Path, claim: dict[str, Any]) -> float | None:
    """A harness claim's isolated speedup, re-derived here: the reference's median time over the
    candidate's, on the rows of the claimed backends (medians over every timed call)."""
    iso = json_object(claim.get("isolated_speedup"))
    rel = claim.get("opbench") or iso.get("opbench")
    if not isinstance(rel, str) or ".." in rel:
        return None
    rows = [r for r in _lines(run / rel) if isinstance(r, dict)]
    ref_name = iso.get("baseline_backend") or next((r.get("backend") for r in rows if r.get("is_reference")), None)
    cand_name = iso.get("candidate_backend")
    if not isinstance(ref_name, str) or not isinstance(cand_name, str):
        return None
    times = {name: [t for r in rows if r.get("backend") == name for t in (r.get("times_ms") or [])
                    if isinstance(t, (int, float))] for name in (ref_name, cand_name)}
    if not times.get(ref_name) or not times.get(cand_name):
        return None
    return float(np.median(times[ref_name]) / np.median(times[cand_name]))


def judge_run(run: Path, claim: dict[str, Any]) -> Judged:
    """The oracle's view of ``run`` under ``claim``."""
    _READ.clear()
    legs_ref = json_object(claim.get("legs"))
    base, cand = legs_ref.get("baseline"), legs_ref.get("candidate")
    legs = [x for x in (base, cand) if isinstance(x, str)]
    head = json_object(claim.get("headline"))
    named = head.get("metric")
    metric = named if isinstance(named, str) else "output_throughput"
    lever = json_object(claim.get("lever"))
    declared = frozenset(k for k in lever.get("config_keys", []) if isinstance(k, str)) \
        if isinstance(lever.get("config_keys"), list) else frozenset()
    if claim.get("scope") == "harness":
        speedup = op_speedup(run, claim)
        delta = (speedup - 1.0) * 100.0 if speedup is not None else None
    else:
        delta = headline(run, base, cand, metric) if base and cand else None
    return Judged(delta, conditions(run, legs, declared), load(run, legs),
                  (*evidence(run, legs), witnesses(run, legs),
                   correctness(run, legs, json_object(claim.get("correctness")).get("parity", "exact_text"))))


# ------------------------------------------------------------------ a record's own aggregates


def _ok(line: dict[str, Any]) -> list[int]:
    return [i for i, e in enumerate(line.get("errors") or []) if not e]


def _stats(values: np.ndarray, name: str) -> dict[str, float]:
    if values.size == 0:
        return {}
    return {f"mean_{name}_ms": float(np.mean(values)), f"median_{name}_ms": float(np.median(values)),
            f"p99_{name}_ms": float(np.percentile(values, 99))}


def derived(line: dict[str, Any]) -> dict[str, float]:
    """A bench line's own aggregates, computed here from its per-request arrays (sglang units: aggregates
    in ms, arrays in seconds, throughputs per second of ``duration``)."""
    ok = _ok(line)
    duration = line.get("duration")
    out: dict[str, float] = {"completed": len(ok)}
    ins = [line["input_lens"][i] for i in ok] if isinstance(line.get("input_lens"), list) else None
    outs = [line["output_lens"][i] for i in ok] if isinstance(line.get("output_lens"), list) else None
    if ins is not None:
        out["total_input_tokens"] = int(sum(ins))
    if outs is not None:
        out["total_output_tokens"] = int(sum(outs))
    if isinstance(duration, (int, float)) and duration > 0:
        out["request_throughput"] = len(ok) / duration
        if ins is not None:
            out["input_throughput"] = sum(ins) / duration
        if outs is not None:
            out["output_throughput"] = sum(outs) / duration
        if ins is not None and outs is not None:
            out["total_throughput"] = (sum(ins) + sum(outs)) / duration
    ttft = np.array([line["ttfts"][i] for i in ok], dtype=float) * 1000.0 if isinstance(line.get("ttfts"), list) else None
    if ttft is not None:
        out.update(_stats(ttft, "ttft"))
    if isinstance(line.get("latencies"), list):
        e2e = np.array([line["latencies"][i] for i in ok], dtype=float) * 1000.0
        out.update(_stats(e2e, "e2e_latency"))
        if ttft is not None and outs is not None:
            lens = np.array(outs, dtype=float)
            mask = lens > 1
            out.update(_stats((e2e - ttft)[mask] / (lens[mask] - 1), "tpot"))
    if isinstance(line.get("itls"), list):
        gaps = [g for i in ok for g in (line["itls"][i] or [])]
        out.update(_stats(np.array(gaps, dtype=float) * 1000.0, "itl"))
    return out


def rederivable(line: dict[str, Any]) -> frozenset[str]:
    """The aggregates this file's writer computes the way :func:`derived` does (checked on the unedited
    line, so an edit is re-derived only where the formula is the writer's own)."""
    try:
        mine = derived(line)
    except (TypeError, ValueError, IndexError, KeyError):
        return frozenset()
    return frozenset(k for k, v in mine.items() if isinstance(line.get(k), (int, float))
                     and not isinstance(line.get(k), bool) and math.isclose(float(line[k]), v, rel_tol=1e-6, abs_tol=1e-9))


def rederive(line: dict[str, Any], fields: frozenset[str]) -> dict[str, Any]:
    """``line`` with ``fields`` recomputed from its (edited) arrays; unchanged where they no longer derive."""
    try:
        mine = derived(line)
    except (TypeError, ValueError, IndexError, KeyError):
        return line
    out = dict(line)
    for k in fields:
        if k in mine and k in out:
            out[k] = int(mine[k]) if isinstance(line.get(k), int) else mine[k]
    return out
