"""Read what LoadGen itself recorded about one rep (its detail and summary logs), for the witnesses.

The loader (``evidence.RunLoader``) calls this once per rep whose folder exists; the gates judge the
result (``auditor/model/witnesses.py``). Each quantity is kept with the line that states it, so a finding
cites LoadGen's own line beside the bench line's. Quantities (LoadGen's definitions, results.cc):

- ``issued``: ``result_query_count`` x samples per query (the samples LoadGen issued);
- ``samples_per_second`` (detail ``result_samples_per_second``, summary ``Samples per second``):
  samples over the span from the first issue to the last completion;
- ``tokens_per_second`` (``result_tokens_per_second``, ``Tokens per second``): the tokens the client
  reported completing, over the same span;
- ``max_latency_s`` / ``min_latency_s`` / ``mean_latency_s`` (``result_max_latency_ns`` ...,
  ``Max latency (ns)`` ...): the longest, shortest and mean issue-to-completion of its samples;
- ``power``: ``power_begin`` / ``power_end``, the wall clock (ms) of the test's first issue and last
  completion; ``version``: ``loadgen_version``, the build (every real LoadGen log states it).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from perfwarden.auditor.stated import Stated
from perfwarden.formats.jsonl import LineRef
from perfwarden.formats.mlperf_log import (MlperfLogError, parse_number, read_detail, read_summary)
from perfwarden.formats.records import EvidenceRef
from perfwarden.formats.safe_read import exists

DETAIL = "mlperf_log_detail.txt"
SUMMARY = "mlperf_log_summary.txt"
_EXCERPT = 200

DETAIL_KEYS = {"samples_per_second": (("result_samples_per_second",), 1.0),
               "tokens_per_second": (("result_tokens_per_second", "result_completed_tokens_per_second"), 1.0),
               "max_latency_s": (("result_max_latency_ns",), 1e-9),
               "min_latency_s": (("result_min_latency_ns",), 1e-9),
               "mean_latency_s": (("result_mean_latency_ns",), 1e-9)}
"""Witness quantity -> (detail-log keys, Offline's then Server's; factor to the quantity's unit). Server's
``result_completed_samples_per_sec`` is not read: its span is not the rep's (it runs past the last
completion), while its tokens per second spans the requests as Offline's does."""
SUMMARY_KEYS = {"samples_per_second": (("Samples per second",), 1.0),
                "tokens_per_second": (("Tokens per second", "Completed tokens per second"), 1.0),
                "max_latency_s": (("Max latency (ns)",), 1e-9),
                "min_latency_s": (("Min latency (ns)",), 1e-9),
                "mean_latency_s": (("Mean latency (ns)",), 1e-9)}
POWER_FORMAT = "%m-%d-%Y %H:%M:%S.%f"
"""How LoadGen writes ``power_begin``/``power_end`` (its system clock, to the millisecond)."""


@dataclass
class LoadgenRep:
    """What LoadGen's own logs of one rep state (only what they state: a key absent is absent)."""

    issued: tuple[int, EvidenceRef] | None = None
    detail: dict[str, Stated] = field(default_factory=dict)
    summary: dict[str, Stated] = field(default_factory=dict)
    summary_resolution: dict[str, float] = field(default_factory=dict)
    """Half a unit of the last digit each summary figure is printed to (Server's rates: 2 decimals)."""
    detail_read: bool = False
    """A detail log was there and read."""
    scenario: str | None = None
    """The detail log's ``effective_scenario`` (what it must state depends on it)."""
    version: str | None = None
    """The detail log's ``loadgen_version``: a real LoadGen's log (it writes its build in every log)."""
    requested: dict[str, tuple[Any, EvidenceRef]] = field(default_factory=dict)
    """The settings the detail log says LoadGen was given (``requested_*``, first value), with their lines."""
    power: tuple[float, float, EvidenceRef] | None = None
    """``power_begin`` and ``power_end`` as unix times read as UTC (the begin may sit a time zone away from
    the rep's clock; the span does not), with the end's line."""
    digests: dict[Path, str] = field(default_factory=dict)
    """sha256 of each log read (the verdict's input digests)."""
    problems: list[str] = field(default_factory=list)
    """Logs that exist but could not be read, or lack the issued count."""


def _evidence(rel: str, ref: LineRef) -> EvidenceRef:
    """The line's citation from what the reader took as it read it (no second open of the log)."""
    if ref.digest is not None and ref.head is not None:
        return EvidenceRef(file=rel, line=ref.line, sha256=ref.digest,
                           excerpt=ref.head[:_EXCERPT].decode("utf-8", "replace"))
    raw = ref.raw()
    return EvidenceRef(file=rel, line=ref.line, sha256=hashlib.sha256(raw).hexdigest(),
                       excerpt=raw[:_EXCERPT].decode("utf-8", "replace"))


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def read_rep_logs(run: Path, folder: Path, rel: str) -> LoadgenRep:
    """LoadGen's logs in ``folder`` (``rel``: its name relative to the run). Never raises on bad logs:
    an unreadable one is a problem listed (its cross-checks are then not made)."""
    out = LoadgenRep()
    detail_path, summary_path = folder / DETAIL, folder / SUMMARY
    if exists(detail_path):
        try:
            log = read_detail(detail_path, run)
        except MlperfLogError as exc:
            out.problems.append(f"{rel}/{DETAIL}: {exc}")
        else:
            out.digests[detail_path] = log.sha256
            _read_detail(out, log, f"{rel}/{DETAIL}")
    if exists(summary_path):
        try:
            summary = read_summary(summary_path, run)
        except MlperfLogError as exc:
            out.problems.append(f"{rel}/{SUMMARY}: {exc}")
        else:
            out.digests[summary_path] = summary.sha256
            for name, (keys, factor) in SUMMARY_KEYS.items():
                entry = next((e for e in map(summary.entry, keys) if e is not None), None)
                value = parse_number(entry.value) if entry is not None else None
                if entry is not None and value is not None:
                    out.summary[name] = Stated(f"LoadGen's summary ({entry.key})", value * factor,
                                               _evidence(f"{rel}/{SUMMARY}", entry.ref))
                    out.summary_resolution[name] = _half_unit(entry.value) * factor
    return out


def _half_unit(text: str) -> float:
    """Half a unit of the last printed digit of a number written as ``text`` (``7.39`` -> 0.005)."""
    mantissa = text.strip().lower().split("e")[0]
    decimals = len(mantissa.split(".", 1)[1]) if "." in mantissa else 0
    exponent = int(text.strip().lower().split("e")[1]) if "e" in text.lower() else 0
    return 0.5 * 10.0 ** (exponent - decimals)


def _read_detail(out: LoadgenRep, log: Any, rel: str) -> None:
    queries = log.record("result_query_count")
    per_query = log.record("generated_samples_per_query") or log.record("effective_samples_per_query")
    if queries is None or not _count(queries.value) or (per_query is not None and not _count(per_query.value)):
        out.problems.append(f"{rel}: no usable result_query_count/samples_per_query")
    else:
        issued = int(queries.value) * (int(per_query.value) if per_query is not None else 1)
        out.issued = (issued, _evidence(rel, queries.ref))
    out.detail_read = True
    scenario = log.record("effective_scenario")
    out.scenario = scenario.value if scenario is not None and isinstance(scenario.value, str) else None
    out.requested = {key: (record.value, _evidence(rel, record.ref)) for key, record in log.first.items()
                     if key.startswith("requested_")}
    version = log.record("loadgen_version")
    out.version = version.value if version is not None and isinstance(version.value, str) else None
    begin, end = log.record("power_begin"), log.record("power_end")
    if begin is not None and end is not None:
        stamps = [_power_time(r.value) for r in (begin, end)]
        if stamps[0] is None or stamps[1] is None:
            out.problems.append(f"{rel}: power_begin/power_end are not LoadGen's time stamps")
        else:
            out.power = (stamps[0], stamps[1], _evidence(rel, end.ref))
    for name, (keys, factor) in DETAIL_KEYS.items():
        record = next((r for r in map(log.record, keys) if r is not None), None)
        value = _number(record.value) if record is not None else None
        if record is not None:
            out.detail[name] = Stated(f"LoadGen's detail log ({record.key})", value * factor if value is not None
                                      else record.value, _evidence(rel, record.ref))


def _power_time(value: Any) -> float | None:
    """A LoadGen ``power_*`` stamp as a unix time read as UTC; None when it is not one."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value, POWER_FORMAT).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None
