"""vLLM's own counters as a second witness of every rep.

A bench line is perfwarden's client's account of a rep. vLLM keeps its own account on ``/metrics``
(Prometheus text): requests finished, tokens generated and prefilled, and histograms of TTFT,
inter-token latency and end-to-end latency. The harness samples those series
(``harness/vllm_target.py`` ``sample_metrics``) just before and just after each rep (the server is idle
then: nothing else sends it requests) and appends both samples, sealed, to
``legs/<leg>/engine_metrics.jsonl``; the auditor's gate (``auditor/gates/
engine_witness.py``) holds the bench line against the difference. A bench line edited, forged or
copied from another rep disagrees with what the engine counted.

This module is the one parser of that text and the one definition of the record; it imports nothing
heavy and opens no connection, so the auditor reads the record with it without importing any producer code.
"""

from __future__ import annotations

import math
import re
from typing import Any

import msgspec

from perfwarden.formats.strict_json import decode_typed

WITNESS_FILE = "engine_metrics.jsonl"
"""File of a leg's witness records, beside its ``bench_runs.jsonl``."""
SCHEMA_VERSION = 1
MAX_METRICS_BYTES = 16 << 20
"""Largest ``/metrics`` answer read (vLLM's is ~100 KB with about 370 series)."""

# Series summed over their labels (every engine and finish reason): vLLM 0.32's names. The histograms
# are read as their ``_count`` and ``_sum``.
COUNTERS = ("vllm:request_success_total", "vllm:generation_tokens_total", "vllm:prompt_tokens_total")
HISTOGRAMS = ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
              "vllm:e2e_request_latency_seconds", "vllm:request_generation_tokens")
WITNESS_SERIES = (*COUNTERS, *(f"{h}_{part}" for h in HISTOGRAMS for part in ("count", "sum")))
"""Every series a witness record holds."""

SUCCESS_REASONS = ("stop", "length")
"""``finished_reason`` labels of ``vllm:request_success_total`` that are completed requests (vLLM also
counts ``abort``, ``error`` and ``repetition`` there; a bench line's ``completed`` counts neither)."""

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)(?:\s+\S+)?\s*$")


class MetricsError(ValueError):
    """A ``/metrics`` text that cannot serve as a witness (too big, or a series missing)."""


class WitnessRecord(msgspec.Struct, forbid_unknown_fields=True):
    """One rep's engine counters, before and after (one line of ``engine_metrics.jsonl``)."""

    schema_version: int
    leg: str
    rep: int
    source: str
    """Where the samples came from (``vllm /metrics`` and the engine's version)."""
    before: dict[str, float]
    after: dict[str, float]
    before_at: float
    """Unix time of the sample taken before the rep."""
    after_at: float


def parse_metrics(text: str, wanted: tuple[str, ...] = WITNESS_SERIES) -> dict[str, float]:
    """``wanted`` series of a Prometheus text, each summed over its label sets. A wanted series the
    text does not hold is left out (the caller decides whether that is an error)."""
    if len(text) > MAX_METRICS_BYTES:
        raise MetricsError(f"/metrics answer of {len(text)} characters is over the {MAX_METRICS_BYTES} bound")
    keep = set(wanted)
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        m = _SAMPLE.match(line)
        if m is None or m.group(1) not in keep:
            continue
        if m.group(1) == "vllm:request_success_total" and not re.search(
                r'finished_reason="(%s)"' % "|".join(SUCCESS_REASONS), m.group(2) or ""):
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if math.isfinite(value):
            out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out


def labels_of(text: str, series: str) -> dict[str, str]:
    """The labels of the first sample of ``series`` (vLLM's ``*_info`` gauges carry configuration as
    labels: ``vllm:cache_config_info{block_size="128",enable_prefix_caching="True",...} 1.0``)."""
    for line in text.splitlines():
        if line.startswith(series + "{"):
            m = _SAMPLE.match(line)
            if m and m.group(2):
                return dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2)))
    return {}


def delta(record: WitnessRecord) -> dict[str, float]:
    """What the engine counted during the rep: after minus before, per series both hold."""
    return {k: record.after[k] - record.before[k] for k in record.after if k in record.before}


_RECORD = msgspec.json.Decoder(WitnessRecord)


def decode_record(line: bytes) -> WitnessRecord:
    """One line of ``engine_metrics.jsonl`` under the strict JSON rules (``StrictJsonError``, msgspec's
    ``ValidationError``/``DecodeError`` when it is not one)."""
    return decode_typed(_RECORD, line)


def record_dict(record: WitnessRecord) -> dict[str, Any]:
    """The record as the JSON object written (one line of ``engine_metrics.jsonl``)."""
    built = msgspec.to_builtins(record)
    if not isinstance(built, dict):  # a Struct always becomes an object: anything else is our own bug
        raise TypeError(f"a witness record encoded as {type(built).__name__}, not an object")
    return built
