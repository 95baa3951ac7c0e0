"""What a red-team attack is: the answer it expects, the run copy it edits, and the family registry.

The attack families (``families_judgement``, ``families_evidence``) and the engine (``red_team``) both
import this module; it imports neither, so the families register without an import cycle.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from perfwarden.formats import safe_write
from perfwarden.formats.records import VerdictLabel, write_json_atomic

AttackKind = Literal["fake_win", "fail_worthy", "honest"]


# ---------------------------------------------------------------------------------- what to expect


@dataclass(frozen=True)
class Expectation:
    """What the auditor must answer to an attack, from the attack's own definition."""

    kind: AttackKind
    verdicts: tuple[VerdictLabel, ...]
    """Allowed verdicts."""
    any_of: tuple[tuple[str, ...], ...] = ()
    """Code groups: from each, at least one must be raised at FLAG or FAIL."""
    why: str = ""
    """One line: the attack and why the answer is right."""

    @staticmethod
    def fail(*codes: str, why: str) -> "Expectation":
        return Expectation("fail_worthy", ("FAIL",), (codes,) if codes else (), why)

    @staticmethod
    def refuse(*codes: str, why: str) -> "Expectation":
        """Must not be banked as-is: FLAG or FAIL."""
        return Expectation("fake_win", ("FLAG", "FAIL"), (codes,) if codes else (), why)

    @staticmethod
    def honest(why: str) -> "Expectation":
        return Expectation("honest", ("PASS",), (), why)


def combine(parts: list[Expectation]) -> Expectation | None:
    """Two faults at once: the stricter verdict set, and any one of all their codes (one fault may mask
    another's code, never its severity). Honest parts cannot be combined with faults."""
    faults = [p for p in parts if p.kind != "honest"]
    if len(faults) != len(parts) or not faults:
        return None
    allowed = set(faults[0].verdicts)
    for p in faults[1:]:
        allowed &= set(p.verdicts)
    if not allowed:
        return None
    codes = tuple(sorted({c for p in faults for g in p.any_of for c in g}))
    kind: AttackKind = "fail_worthy" if allowed == {"FAIL"} else "fake_win"
    return Expectation(kind, tuple(v for v in ("PASS", "FLAG", "FAIL") if v in allowed), (codes,) if codes else (),
                       " + ".join(p.why for p in faults))


# ------------------------------------------------------------------------------- the attacked run


class AttackContext:
    """A writable copy of a clean run and its (honest) claim, with small editing helpers."""

    def __init__(self, run: Path, claim: dict[str, Any]):
        self.run = Path(run)
        self.claim = claim
        self.base_leg: str = claim["legs"]["baseline"]
        self.cand_leg: str = claim["legs"]["candidate"]

    # ---- files
    def path(self, rel: str) -> Path:
        path = (self.run / rel).resolve()
        if not path.is_relative_to(self.run.resolve()):
            raise ValueError(f"path {rel!r} leaves the run directory")
        return path

    def leg_path(self, leg: str, name: str) -> Path:
        return self.run / "legs" / leg / name

    def bench(self, leg: str) -> list[dict[str, Any]]:
        path = self.leg_path(leg, "bench_runs.jsonl")
        return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]

    def write_bench(self, leg: str, lines: list[dict[str, Any]]) -> None:
        self.leg_path(leg, "bench_runs.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), "utf-8")

    def target(self) -> str | None:
        """The serving target run.json names (None when it names none)."""
        try:
            target = json.loads((self.run / "run.json").read_text("utf-8")).get("target")
        except (OSError, ValueError, AttributeError):
            return None
        return target if isinstance(target, str) else None

    def info(self, leg: str) -> dict[str, Any]:
        return json.loads(self.leg_path(leg, "server_info.json").read_text("utf-8"))

    def write_info(self, leg: str, info: dict[str, Any]) -> None:
        """Rewrite the leg's conditions in every copy the attacker controls -- server_info.json, the
        server_info in each bench line, the overlay in leg.json -- so the attack is not caught merely
        for leaving copies that disagree (the auditor's misreport check is attacked separately). A bench
        line's copy takes only the keys the attack changed: the rest of it (the server's running totals
        after that rep) is the line's own, and the same totals in every line would say no rep ran."""
        info_path = self.leg_path(leg, "server_info.json")
        old = self.info(leg) if info_path.is_file() else {}
        changed = {k: v for k, v in info.items() if k not in old or old[k] != v}
        dropped = set(old) - set(info)
        write_json_atomic(info_path, info)
        bench = self.leg_path(leg, "bench_runs.jsonl")
        if bench.is_file():
            lines = self.bench(leg)
            if any(isinstance(line.get("server_info"), dict) for line in lines):
                for line in lines:
                    if isinstance(line.get("server_info"), dict):
                        line["server_info"] = {k: v for k, v in {**line["server_info"], **changed}.items()
                                               if k not in dropped}
                self.write_bench(leg, lines)
        spec_path = self.leg_path(leg, "leg.json")
        if spec_path.is_file():
            spec = json.loads(spec_path.read_text("utf-8"))
            config = (spec.get("overlay") or {}).get("config") or {}
            if any(k in info and info[k] != v for k, v in config.items()):
                spec["overlay"]["config"] = {k: info.get(k, v) for k, v in config.items()}
                spec_path.write_text(json.dumps(spec, indent=2), encoding="utf-8")
        log = self.leg_path(leg, "server.log")
        if log.is_file():
            log.write_text("".join(_with_effective_config(line, info)
                                   for line in log.read_text("utf-8").splitlines(keepends=True)), encoding="utf-8")

    def set_overlay(self, leg: str, config: dict[str, Any], kernel_patches: list[dict[str, Any]]) -> None:
        """Rewrite what leg.json says the leg changes (an attack that re-presents the change)."""
        spec_path = self.leg_path(leg, "leg.json")
        if spec_path.is_file():
            spec = json.loads(spec_path.read_text("utf-8"))
            spec["overlay"] = {"config": config, "kernel_patches": kernel_patches}
            spec_path.write_text(json.dumps(spec, indent=2), encoding="utf-8")

    def append_log(self, leg: str, lines: Iterable[str]) -> None:
        with open(self.leg_path(leg, "server.log"), "a", encoding="utf-8") as fh:
            fh.write("".join(f"{line}\n" for line in lines))

    def outputs(self, leg: str) -> list[dict[str, Any]] | None:
        path = self.leg_path(leg, "outputs.jsonl")
        if not path.is_file():
            return None
        return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]

    def write_outputs(self, leg: str, rows: list[dict[str, Any]]) -> None:
        self.leg_path(leg, "outputs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")

    def write_text(self, rel: str, text: str) -> None:
        """An attack's edit, inside the attacked copy of the run only (``..`` or a link is refused)."""
        safe_write.write_text(self.path(rel), text, self.run)

    # ---- the claim
    def lever(self) -> dict[str, Any]:
        self.claim.setdefault("lever", {"name": "change", "lever_class": "B"})
        return self.claim["lever"]

    def declare(self, *keys: str) -> None:
        lever = self.lever()
        lever["config_keys"] = list(dict.fromkeys([*lever.get("config_keys", []), *keys]))

    def headline(self) -> dict[str, Any]:
        return self.claim.setdefault("headline", {"metric": "output_throughput"})

    # ---- the red team's own arithmetic on raw lines (never the auditor's)
    def measure(self, leg: str, metric: str) -> float:
        """Median over reps of one metric, computed here from the per-request arrays."""
        return float(np.median([rep_metric(line, metric) for line in self.bench(leg)]))

    def change_pct(self, metric: str) -> float:
        """Candidate vs baseline, percent (positive = the number grew)."""
        return (self.measure(self.cand_leg, metric) / self.measure(self.base_leg, metric) - 1.0) * 100.0


EFFECTIVE_CONFIG = "effective_config "


def _with_effective_config(line: str, info: dict[str, Any]) -> str:
    """A server.log line with its ``effective_config {…}`` copy of the knobs updated from ``info``
    (only knobs the line already lists; other lines unchanged)."""
    at = line.find(EFFECTIVE_CONFIG)
    if at < 0:
        return line
    try:
        config = json.loads(line[at + len(EFFECTIVE_CONFIG):])
    except ValueError:
        return line
    if not isinstance(config, dict):
        return line
    config = {k: info.get(k, v) for k, v in config.items()}
    end = "\n" if line.endswith("\n") else ""
    return line[: at + len(EFFECTIVE_CONFIG)] + json.dumps(config, sort_keys=True) + end


def rep_metric(line: dict[str, Any], metric: str) -> float:
    """One rep's metric from its per-request arrays: throughput per second of ``duration``; TTFT, e2e
    in ms (median or p99 over successful requests); ITL over all gaps."""
    ok = [i for i, e in enumerate(line["errors"]) if not e]
    if metric == "output_throughput":
        return sum(line["output_lens"][i] for i in ok) / line["duration"]
    ttft = np.array([line["ttfts"][i] for i in ok]) * 1000.0
    if line.get("latencies"):
        e2e = np.array([line["latencies"][i] for i in ok]) * 1000.0
    else:
        e2e = ttft + np.array([sum(line["itls"][i]) for i in ok]) * 1000.0
    out_lens = np.array([line["output_lens"][i] for i in ok])
    values = {"ttft": ttft, "e2e_latency": e2e,
              "tpot": (e2e - ttft)[out_lens > 1] / (out_lens[out_lens > 1] - 1),
              "itl": np.concatenate([np.asarray(line["itls"][i], dtype=float) for i in ok]) * 1000.0}
    stat, name = metric.split("_", 1)
    arr = values[name.removesuffix("_ms")]
    return float(np.median(arr) if stat == "median" else np.percentile(arr, 99))


# ------------------------------------------------------------------------------ families registry

FamilyFn = Callable[[AttackContext, random.Random], "Expectation | None"]


@dataclass(frozen=True)
class Family:
    """One attack family: a rule it attacks and how to apply it."""

    name: str
    rule: str
    """Which rule or property it attacks (``judgement: truthful disclosure``, ``evidence: conditions`` …)."""
    apply: FamilyFn
    combinable: bool = True
    touches: frozenset[str] = frozenset()
    """Parts of the attack's premise it rewrites (``lever``, ``headline``, ``delta`` -- the headline's
    measured change): two families that rewrite the same part change each other's premise (a
    kernel-only claim that another family gives a config knob is no longer kernel-only; a "no real
    delta" attack that another gives a real TTFT win has a real delta), so they are never combined."""


FAMILIES: dict[str, Family] = {}


def family(name: str, rule: str, combinable: bool = True,
           touches: Iterable[str] = ()) -> Callable[[FamilyFn], FamilyFn]:
    """Register an attack family (a function that edits an :class:`AttackContext` and returns what the
    auditor must answer, or None when the family does not apply to this base)."""
    def register(fn: FamilyFn) -> FamilyFn:
        if name in FAMILIES:
            raise ValueError(f"attack family {name!r} registered twice")
        FAMILIES[name] = Family(name, rule, fn, combinable, frozenset(touches))
        return fn
    return register


DISCLOSABLE = ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "median_itl_ms", "p99_itl_ms",
               "median_e2e_latency_ms", "p99_e2e_latency_ms")
