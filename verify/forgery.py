"""The coherent-forgery explorer: forgeries made from the evidence model, not one edit at a time.

A forger who holds the run's key does not change one field: it moves a measurement together with the
records that witness it, states a changed condition everywhere it can, moves whole records between legs,
or rewrites a leg in a lighter format, then seals the result again. Each family below builds such
forgeries of a clean sealed base from what the model says (the witness relations, each field's role and
the places a leg states it, the witnesses a leg carries), and the oracle (``forgery_oracle``, which reads
the model, never the gates) says whether the forgery leaves something out of step -- then it must not
PASS -- or moved everything the model names (consistent: not audited, only counted):

- **witnesses**: a rep's clock (its duration) rescaled by a factor with every subset of the groups of records
  that witness it (the per-request times, LoadGen's wall time, the contention samples' clock, LoadGen's
  detail and summary logs), in one rep or several of one leg; the rep's output tokens cut with every subset
  of theirs (LoadGen's token rate in each log, the server's running totals);
- **statements**: a condition or an identity of one leg changed at every place the leg states it, and at
  every place but one (``server_info.json``, each bench line's copy, the server log's lines, ``leg.json``);
- **records**: a rep duplicated in its leg or into the other, moved to the other leg, a middle rep dropped;
- **downgrades**: one leg in a foreign writer's format or another harness version, one leg stripped of a
  witness, both legs stripped of a field the harness always writes, one leg's entries cut from the seal.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from perfwarden.verify import forgery_oracle as oracle
from perfwarden.verify.forgery_files import (Line, detail_values, edit_detail, edit_json, edit_lines, edit_summary,
                                             read_lines, rederive_aggregates)
from perfwarden.verify.forgery_oracle import Expected

Edit = Callable[[Path], None]


@dataclass(frozen=True)
class Forgery:
    """One forgery of a base: what it edits, which record types it writes, and what the model expects."""

    family: str
    name: str
    records: tuple[str, ...]
    expected: Expected
    edit: Edit
    unsealed: tuple[str, ...] = ()
    """Paths (prefixes, relative to the run) the forger leaves out of the seal chain it writes."""


@dataclass
class BaseView:
    """A clean sealed base as the families read it (once)."""

    run: Path
    claim: dict[str, Any]
    legs: tuple[str, str]
    lines: dict[str, list[Line]] = field(default_factory=dict)
    info: dict[str, dict[str, Any]] = field(default_factory=dict)
    log: dict[str, str] = field(default_factory=dict)

    @property
    def declared(self) -> frozenset[str]:
        lever = self.claim.get("lever") or {}
        return frozenset(lever.get("config_keys") or [])


def view(run: Path, claim: dict[str, Any]) -> BaseView:
    legs = claim["legs"]
    out = BaseView(run, claim, (legs["baseline"], legs["candidate"]))
    for leg in out.legs:
        out.lines[leg] = read_lines(run / "legs" / leg / "bench_runs.jsonl")
        out.info[leg] = json.loads((run / "legs" / leg / "server_info.json").read_text("utf-8"))
        log = run / "legs" / leg / "server.log"
        out.log[leg] = log.read_text("utf-8") if log.is_file() else ""
    return out


def _bench(run: Path, leg: str) -> Path:
    return run / "legs" / leg / "bench_runs.jsonl"


def _folder(run: Path, line: Line) -> Path | None:
    lg = line.get("loadgen")
    return run / lg["dir"] if isinstance(lg, dict) and isinstance(lg.get("dir"), str) else None


def moved_subsets(present: frozenset[str]) -> Iterator[frozenset[str]]:
    """Every subset of the witness groups a base carries (the ones a forgery moves), smallest first."""
    for k in range(len(present) + 1):
        yield from map(frozenset, itertools.combinations(sorted(present), k))


GROUP_RECORDS = {"detail": "loadgen_detail", "summary": "loadgen_summary", "counters": "server_counters",
                 "samples": "contention_sample", "window": "cpu_window"}
"""The record type each witness group's records are (the bench line's own groups are the bench line)."""


def records_moved(moved: frozenset[str]) -> tuple[str, ...]:
    """The record types a witness forgery writes: the bench line, and each moved group's records."""
    return ("bench_line", *sorted(GROUP_RECORDS[g] for g in moved if g in GROUP_RECORDS))


def _rep_subsets(n: int) -> list[tuple[int, ...]]:
    """Every non-empty set of a leg's rep indices (lines), smallest first."""
    return [c for k in range(1, n + 1) for c in itertools.combinations(range(n), k)]


# ------------------------------------------------------------------------------------- witnesses: time

TIME_RELATIONS: dict[str, tuple[str, ...]] = {
    "arrays": ("duration_is_last_end", "timeline_within_duration", "loadgen_min_latency", "loadgen_mean_latency",
               "loadgen_max_latency"),
    "wall": ("duration_within_loadgen_wall",),
    "samples": ("duration_within_samples",),
    "window": ("duration_within_cpu_window",),
    "detail": ("loadgen_span_within_duration", "loadgen_span_after_first_start", "loadgen_power_window",
               "loadgen_latency_bounds"),
    "summary": ("summary_is_detail",),
}
"""The groups of records that witness a rep's clock, each named by the model relations binding it."""
TIME_FACTORS = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.4, 1.5, 1.75, 2.0)
INEQUALITY_MARGIN = 0.05
"""A duration moved past an at-most witness by less than this (relative) is too near the tolerance to call."""
_AT_MOST = {"wall": lambda line: line["loadgen"].get("wall_s"),
            "samples": lambda line: line["contention"]["end"]["t"] - line["contention"]["start"]["t"],
            "window": lambda line: line["contention"]["window"]["wall_s"]}
"""Groups whose relation is one-sided (the duration at most the witness): only a duration pushed past them is
out of step."""


def _time_groups(run: Path, line: Line) -> frozenset[str]:
    """The witness groups of a rep's clock this line's records carry."""
    raw = line.get("contention")
    con: dict[str, Any] = raw if isinstance(raw, dict) else {}
    folder = _folder(run, line)
    have = {"arrays": line.get("request_starts") is not None and line.get("latencies") is not None,
            "wall": isinstance(line.get("loadgen"), dict) and "wall_s" in line["loadgen"],
            "samples": all(isinstance(con.get(k), dict) and "t" in con[k] for k in ("start", "end")),
            "window": isinstance(con.get("window"), dict),
            "detail": folder is not None and (folder / "mlperf_log_detail.txt").is_file(),
            "summary": folder is not None and (folder / "mlperf_log_summary.txt").is_file()}
    return frozenset(g for g, present in have.items() if present)


def _time_left(line: Line, present: frozenset[str], moved: frozenset[str], factor: float) -> frozenset[str] | None:
    """The unmoved groups out of step when the line's duration is scaled by ``factor`` (None: too near a
    one-sided witness's tolerance to call)."""
    left = set()
    for group in present - moved:
        if group not in _AT_MOST:
            left.add(group)
            continue
        bound, new = _AT_MOST[group](line), line["duration"] * factor
        if new > bound * (1 + INEQUALITY_MARGIN):
            left.add(group)
        elif new > bound * (1 - INEQUALITY_MARGIN):
            return None
    return frozenset(left)


def _scale_clock(run: Path, leg: str, index: int, factor: float, moved: frozenset[str]) -> None:
    """Rep ``index`` of ``leg`` with its duration (aggregates re-derived) and the moved groups scaled."""
    lines = read_lines(_bench(run, leg))
    line = lines[index]
    before = json.loads(json.dumps(line))
    line["duration"] *= factor
    if "arrays" in moved:
        for key in ("request_starts", "latencies", "ttfts", "issue_delays"):
            if isinstance(line.get(key), list):
                line[key] = [x * factor for x in line[key]]
        line["itls"] = [[g * factor for g in gaps] for gaps in line.get("itls") or []]
    if "wall" in moved:
        line["loadgen"]["wall_s"] *= factor
        if "ended_at" in line:
            line["ended_at"] = line["started_at"] + line["loadgen"]["wall_s"]
    con = line.get("contention") or {}
    if "samples" in moved:
        con["end"]["t"] = con["start"]["t"] + (con["end"]["t"] - con["start"]["t"]) * factor
    if "window" in moved:
        con["window"]["wall_s"] *= factor
    rederive_aggregates(line, before)
    _write_bench(run, leg, lines)
    folder = _folder(run, line)
    if folder is not None and "detail" in moved:
        edit_detail(folder / "mlperf_log_detail.txt", lambda k, v: _detail_time(k, v, factor))
    if folder is not None and "summary" in moved:
        edit_summary(folder / "mlperf_log_summary.txt", lambda k, v: _summary_time(k, v, factor))


def _write_bench(run: Path, leg: str, lines: list[Line]) -> None:
    _bench(run, leg).write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")


def _detail_time(key: str, value: Any, factor: float) -> Any:
    if key in ("result_samples_per_second", "result_tokens_per_second"):
        return round(value / factor, 6)
    if key.startswith("result_") and key.endswith("_latency_ns"):
        return int(value * factor)
    return value  # power_end moves in _power_span


SUMMARY_LATENCIES = re.compile(r"^(Min|Max|Mean|[0-9.]+ percentile) latency \(ns\)$")
"""The summary's latency figures (not the test parameters it prints: ``ttft_latency (ns)`` is a setting)."""


def _summary_time(key: str, value: str, factor: float) -> str:
    if key in ("Samples per second", "Tokens per second"):
        return f"{float(value) / factor:.6g}"
    if SUMMARY_LATENCIES.match(key):
        return str(int(int(value) * factor))
    return value


def time_forgeries(base: BaseView) -> Iterator[Forgery]:
    run = base.run
    for leg in base.legs:
        lines = base.lines[leg]
        present = _time_groups(run, lines[0])
        for reps, factor in itertools.product(_rep_subsets(len(lines)), TIME_FACTORS):
            for moved in moved_subsets(present):
                left_per_rep = [_time_left(lines[i], present, moved, factor) for i in reps]
                if any(x is None for x in left_per_rep):
                    continue
                left = frozenset().union(*left_per_rep)  # type: ignore[arg-type]
                expected = oracle.witnesses_left(present, present - left, TIME_RELATIONS)
                name = f"time:{leg}:reps={','.join(map(str, reps))}:x{factor}:moved={'+'.join(sorted(moved))}"
                yield Forgery("witnesses", name, records_moved(moved), expected, _time_edit(leg, reps, factor, moved))


def _time_edit(leg: str, reps: tuple[int, ...], factor: float, moved: frozenset[str]) -> Edit:
    def edit(run: Path) -> None:
        for i in reps:
            _scale_clock(run, leg, i, factor, moved)
            if "detail" in moved:
                _power_span(run, leg, i, factor)
    return edit


POWER_FORMAT = "%m-%d-%Y %H:%M:%S.%f"


def _power_span(run: Path, leg: str, index: int, factor: float) -> None:
    """LoadGen's power window stretched by ``factor`` from its begin (ms stamps, as LoadGen writes them)."""
    folder = _folder(run, read_lines(_bench(run, leg))[index])
    if folder is None:
        return
    detail = folder / "mlperf_log_detail.txt"
    stamps = detail_values(detail)
    if not isinstance(stamps.get("power_begin"), str) or not isinstance(stamps.get("power_end"), str):
        return
    begin, end = (datetime.strptime(stamps[k], POWER_FORMAT) for k in ("power_begin", "power_end"))
    new_end = (begin + timedelta(seconds=(end - begin).total_seconds() * factor)).strftime(POWER_FORMAT)[:-3]
    edit_detail(detail, lambda k, v: new_end if k == "power_end" else v)


# ------------------------------------------------------------------------------------ witnesses: tokens

TOKEN_RELATIONS: dict[str, tuple[str, ...]] = {
    "detail": ("loadgen_tokens_per_sample",),
    "summary": ("summary_is_detail",),
    "counters": ("counters_between_reps",),
}
TOKEN_FACTORS = (0.5, 0.6, 0.7, 0.75, 0.8, 0.875, 0.9375)


def _cut_tokens(line: Line, factor: float) -> int:
    """Every request's output tokens scaled down (gaps merged so none has more gaps than tokens); the tokens
    removed."""
    before = json.loads(json.dumps(line))
    lens = [max(1, int(n * factor)) if n else n for n in line["output_lens"]]
    line["itls"] = [gaps[:max(n - 2, 0)] + [sum(gaps[max(n - 2, 0):])] if n > 1 and len(gaps) > n - 1 else gaps
                    for gaps, n in zip(line.get("itls") or [[] for _ in lens], lens)]
    removed = sum(line["output_lens"]) - sum(lens)
    line["output_lens"] = lens
    rederive_aggregates(line, before)
    return removed


def _token_groups(run: Path, lines: list[Line], reps: tuple[int, ...]) -> frozenset[str]:
    folder = _folder(run, lines[reps[0]])
    have = {"detail": folder is not None and (folder / "mlperf_log_detail.txt").is_file(),
            "summary": folder is not None and (folder / "mlperf_log_summary.txt").is_file(),
            "counters": any(i > 0 for i in reps) and all(
                isinstance((x.get("server_info") or {}).get("internal_states"), list) for x in lines)}
    return frozenset(g for g, present in have.items() if present)


def token_forgeries(base: BaseView) -> Iterator[Forgery]:
    run = base.run
    choices = [(leg,) for leg in base.legs] + [tuple(base.legs)]
    n = min(len(base.lines[leg]) for leg in base.legs)
    for legs, reps, factor in itertools.product(choices, _rep_subsets(n), TOKEN_FACTORS):
        present = frozenset.intersection(*(_token_groups(run, base.lines[leg], reps) for leg in legs))
        for moved in moved_subsets(present):
            expected = oracle.witnesses_left(present, moved, TOKEN_RELATIONS)
            name = f"tokens:{'+'.join(legs)}:reps={','.join(map(str, reps))}:x{factor}:moved={'+'.join(sorted(moved))}"
            yield Forgery("witnesses", name, records_moved(moved), expected, _token_edit(legs, reps, factor, moved))


def _token_edit(legs: tuple[str, ...], reps: tuple[int, ...], factor: float, moved: frozenset[str]) -> Edit:
    def edit(run: Path) -> None:
        for leg in legs:
            lines = read_lines(_bench(run, leg))
            removed_so_far = 0
            for i, line in enumerate(lines):
                if i in reps:
                    removed = _cut_tokens(line, factor)
                    removed_so_far += removed
                    _token_logs(run, line, moved, sum(line["output_lens"]) / (sum(line["output_lens"]) + removed))
                if "counters" in moved and removed_so_far:
                    state = line["server_info"]["internal_states"][0]
                    state["tokens_generated"] -= removed_so_far
            _write_bench(run, leg, lines)
    return edit


def _token_logs(run: Path, line: Line, moved: frozenset[str], ratio: float) -> None:
    folder = _folder(run, line)
    if folder is None:
        return
    if "detail" in moved:
        edit_detail(folder / "mlperf_log_detail.txt",
                    lambda k, v: round(v * ratio, 6) if k == "result_tokens_per_second" else v)
    if "summary" in moved:
        edit_summary(folder / "mlperf_log_summary.txt",
                     lambda k, v: f"{float(v) * ratio:.6g}" if k == "Tokens per second" else v)


FAMILIES: tuple[Callable[[BaseView], Iterator[Forgery]], ...] = (time_forgeries, token_forgeries)
"""Every family, in the order the explorer plans them (more are added in ``forgery_more``)."""


def plan(base: BaseView, extra: tuple[Callable[[BaseView], Iterator[Forgery]], ...] = (), seed: int = 0) -> list[Forgery]:
    """Every forgery of ``base``, distinct by name, in a seeded order that mixes the families, so any prefix
    of it (a budget) samples every family alike."""
    seen: set[str] = set()
    out = []
    for family in (*FAMILIES, *extra):
        for forgery in family(base):
            if forgery.name not in seen:
                seen.add(forgery.name)
                out.append(forgery)
    random.Random(f"forge:{seed}:{base.run.parent.name}").shuffle(out)
    return out


def apply(pristine: Path, work: Path, forgery: Forgery) -> None:
    """``work`` made a fresh copy of ``pristine`` with ``forgery`` applied (the seal is the runner's)."""
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(pristine, work)
    forgery.edit(work)


__all__ = ["BaseView", "Forgery", "apply", "plan", "view", "edit_json", "edit_lines"]
