"""Turn one rep's per-request records into one ``bench_runs.jsonl`` line, and append it idempotently.

The line is what ``python -m sglang.bench_serving --output-file … --output-details`` writes (same
keys, same units: aggregates in **milliseconds**, per-request ``ttfts``/``itls`` in **seconds**,
throughputs per second of ``duration``), so perfwarden's own files and real sglang files audit the
same way. Aggregation follows sglang's ``calculate_metrics``:

- a request is successful when its error string is empty; ``completed`` counts successes only;
- ``output_lens`` is 0 for a failed request (as sglang writes it), ``input_lens`` is every request's;
- ``total_input_tokens``/``total_output_tokens`` and the throughputs are over successful requests;
- TPOT per request is ``(e2e - ttft) / (output_len - 1)`` for successes with more than one token;
- ITL aggregates pool every gap of every successful request;
- ``p99`` is numpy's linear-interpolation percentile.

Where sglang would report ``np.mean([] or 0)`` (a silent zero) this module writes ``null``: empty data
is evidence the auditor must see (design §8), never a number.

This is the *producer* side. The auditor re-derives every number from the per-request arrays with its
own code (``perfwarden.auditor``); nothing here imports it.

perfwarden's additions to the sglang line: ``schema_version``, ``leg``, ``rep``, ``started_at`` and
``ended_at`` (unix times of rep start and end: reps of different legs must not overlap),
``request_starts`` (s since rep start), ``latencies`` (per-request e2e, s),
``contention`` ({"start": sample, "end": sample}, see ``perfwarden.harness.contention``), and
per-request provenance: ``issue_delays`` (s between LoadGen issuing a query and the request being
sent), ``input_lens_source`` (``usage`` | ``estimate``), ``output_lens_source`` (``usage`` |
``stream_chunks``), ``finish_reasons``, ``prompt_ids``, plus ``scenario``, ``issued`` (samples LoadGen
issued: one per-request entry each), ``request_params`` (the request body without the prompt: output
budget, sampling parameters) and ``loadgen`` (settings and log folder) when the LoadGen client wrote
the line, and ``server_counters`` ({"before": …, "after": …}: the server's own running totals,
``internal_states[0]`` of ``/server_info``, read just before and just after the rep; null when the
server reports none) -- a second witness of the line's counts. sglang's ``input_throughput`` is kept too.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec
import numpy as np

from perfwarden.formats import safe_write, seal
from perfwarden.formats.jsonl import DECODE_ERRORS, LineIssue, iter_raw_lines

BENCH_LINE_VERSION = 3
"""The bench line's own version (``schema_version`` of a line). 3 adds the rep's CPU window
(``contention.window``), required wherever both samples were taken; 2 added ``ended_at`` and
``server_counters`` and made both required (the auditor holds a line without them as evidence removed);
1 had neither."""

InputLenSource = Literal["usage", "estimate"]
OutputLenSource = Literal["usage", "stream_chunks"]


@dataclass
class RequestRecord:
    """What the client measured for one request (one LoadGen query sample). Times in seconds."""

    index: int
    """Order in which the request was issued within the rep (0-based)."""
    sample_index: int
    """LoadGen's QSL sample index, i.e. the position of the prompt in the rep's prompt list."""
    prompt_id: str
    """Stable prompt id (``perfwarden.harness.prompts``)."""
    issued_s: float
    """When LoadGen issued the query, seconds since rep start."""
    start_s: float
    """When the HTTP request was sent, seconds since rep start (later than ``issued_s`` when a
    concurrency limit made it wait)."""
    ttft_s: float | None = None
    """Time from send to the first streamed text chunk; None when no text arrived."""
    itls_s: list[float] = field(default_factory=list)
    """Gaps between consecutive streamed text chunks."""
    latency_s: float | None = None
    """Send to end of stream (``[DONE]``) or to the failure; None only if the request never ran."""
    output_tokens: int = 0
    """Output token count: ``usage.completion_tokens`` when the server sent it, else text chunks."""
    output_tokens_source: OutputLenSource = "stream_chunks"
    """Where ``output_tokens`` comes from."""
    stream_chunks: int = 0
    """Number of streamed chunks that carried text."""
    input_tokens: int = 0
    """Prompt length: ``usage.prompt_tokens`` when the server sent it, else an estimate."""
    input_tokens_source: InputLenSource = "estimate"
    """Where ``input_tokens`` comes from."""
    text: str = ""
    """Generated text (what arrived before a failure, for failed requests)."""
    finish_reason: str | None = None
    """``finish_reason`` of the last choice chunk (``length``, ``stop``, ...), if any."""
    error: str = ""
    """Empty on success; otherwise what went wrong (HTTP status, timeout, disconnect, bad SSE)."""

    @property
    def ok(self) -> bool:
        return not self.error


# ------------------------------------------------------------------------------------- aggregates


def _stats_ms(values_s: Sequence[float], prefix: str) -> dict[str, float | None]:
    """mean/median/p99 of second-valued samples, in ms, as sglang names them; null when empty."""
    if not values_s:
        return {f"mean_{prefix}_ms": None, f"median_{prefix}_ms": None, f"p99_{prefix}_ms": None}
    arr = np.asarray(values_s, dtype=float) * 1000.0
    return {f"mean_{prefix}_ms": float(np.mean(arr)), f"median_{prefix}_ms": float(np.median(arr)),
            f"p99_{prefix}_ms": float(np.percentile(arr, 99))}


def aggregate(records: Sequence[RequestRecord], duration_s: float) -> dict[str, Any]:
    """sglang's ``calculate_metrics`` over one rep (see the module docstring for the rules)."""
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ValueError(f"duration_s={duration_s!r} must be a positive finite number")
    ok = [r for r in records if r.ok]
    ttfts, itls, tpots, e2es = [], [], [], []
    for r in ok:
        if r.ttft_s is None or r.latency_s is None:
            raise ValueError(f"request {r.index!r} has no error but no ttft/latency: a client bug")
        ttfts.append(r.ttft_s)
        e2es.append(r.latency_s)
        itls.extend(r.itls_s)
        if r.output_tokens > 1:
            tpots.append((r.latency_s - r.ttft_s) / (r.output_tokens - 1))
    total_in = sum(r.input_tokens for r in ok)
    total_out = sum(r.output_tokens for r in ok)
    out: dict[str, Any] = {
        "duration": duration_s,
        "completed": len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / duration_s,
        "input_throughput": total_in / duration_s,
        "output_throughput": total_out / duration_s,
        "total_throughput": (total_in + total_out) / duration_s,
    }
    out.update(_stats_ms(ttfts, "ttft"))
    out.update(_stats_ms(tpots, "tpot"))
    out.update(_stats_ms(itls, "itl"))
    out.update(_stats_ms(e2es, "e2e_latency"))
    return out


def accept_length_from_server_info(server_info: Mapping[str, Any] | None) -> float | None:
    """The speculative-decoding accept length a server reports about itself, as sglang's
    bench_serving reads it (``internal_states[0].avg_spec_accept_length``), or a top-level
    ``avg_spec_accept_length``/``accept_length``. None when the server reports none: a client cannot
    observe acceptance through the OpenAI API, and inventing it would hide (or fake) spec decoding.
    """
    if not server_info:
        return None
    states = server_info.get("internal_states")
    candidates = []
    if isinstance(states, list) and states and isinstance(states[0], Mapping):
        candidates.append(states[0].get("avg_spec_accept_length"))
    candidates += [server_info.get("avg_spec_accept_length"), server_info.get("accept_length")]
    for value in candidates:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def build_bench_line(records: Sequence[RequestRecord], *, leg: str, rep: int, started_at: float,
                     duration_s: float, request_rate: float | str, max_concurrency: int | None,
                     backend: str, dataset_name: str, server_info: dict[str, Any] | None = None,
                     accept_length: float | None = None, contention: dict[str, Any] | None = None,
                     extra: Mapping[str, Any] | None = None, ended_at: float | None = None,
                     server_counters: dict[str, Any] | None = None) -> dict[str, Any]:
    """One ``bench_runs.jsonl`` line (a dict ready for ``append_jsonl``).

    ``request_rate`` is the Server scenario's target QPS, or ``"inf"`` for Offline (sglang writes
    ``inf`` for "all at once"; JSON has no infinity). ``accept_length`` defaults to what
    ``server_info`` reports (:func:`accept_length_from_server_info`). Per-request arrays are in issue
    order; a failed request keeps its partial ``ttfts``/``itls``/text (evidence of how far it got)
    but has ``output_lens`` 0 and a ``ttfts`` entry of 0.0 when no token arrived, as sglang writes.
    """
    if isinstance(request_rate, float) and not math.isfinite(request_rate):
        request_rate = "inf"
    ordered = sorted(records, key=lambda r: (r.issued_s, r.index))
    if accept_length is None:
        accept_length = accept_length_from_server_info(server_info)
    line: dict[str, Any] = {
        "schema_version": BENCH_LINE_VERSION,
        "leg": leg,
        "rep": rep,
        "started_at": started_at,
        **({"ended_at": ended_at} if ended_at is not None else {}),
        "backend": backend,
        "dataset_name": dataset_name,
        "request_rate": request_rate,
        "max_concurrency": max_concurrency,
        "server_info": server_info,
    }
    line.update(aggregate(ordered, duration_s))
    line["accept_length"] = accept_length
    line.update({
        "input_lens": [r.input_tokens for r in ordered],
        "output_lens": [r.output_tokens if r.ok else 0 for r in ordered],
        "ttfts": [r.ttft_s if r.ttft_s is not None else 0.0 for r in ordered],
        "itls": [list(r.itls_s) for r in ordered],
        "generated_texts": [r.text for r in ordered],
        "errors": [r.error for r in ordered],
        "request_starts": [r.start_s for r in ordered],
        "latencies": [r.latency_s if r.latency_s is not None else 0.0 for r in ordered],
        "issue_delays": [r.start_s - r.issued_s for r in ordered],
        "input_lens_source": [r.input_tokens_source for r in ordered],
        "output_lens_source": [r.output_tokens_source for r in ordered],
        "finish_reasons": [r.finish_reason for r in ordered],
        "prompt_ids": [r.prompt_id for r in ordered],
        "contention": contention,
        "server_counters": server_counters,
    })
    if extra:
        clash = set(extra) & set(line)
        if clash:
            raise ValueError(f"extra fields {sorted(clash)!r} would overwrite bench line fields")
        line.update(extra)
    return line


# ------------------------------------------------------------------------------------ idempotency


class _LegRep(msgspec.Struct):
    """Just the key of a bench line; decoding only this skips the large per-request arrays."""

    leg: str | None = None
    rep: int | None = None


def existing_reps(path: Path) -> set[tuple[str | None, int | None]]:
    """(leg, rep) keys of every complete, decodable line of ``path`` (empty if the file is absent).

    A torn tail or a corrupt line is not a rep that exists: it is not evidence, so a resumed run
    measures that rep again. Nor, in a sealed run, is a line past the sealed bytes (written, then the
    writer died before sealing it): the auditor would refuse it, so it is measured again too.
    """
    path = Path(path)
    if not path.exists():
        return set()
    sealed = seal.sealed_size(path)
    decoder = msgspec.json.Decoder(_LegRep)
    issues: list[LineIssue] = []
    keys = set()
    for ref, raw in iter_raw_lines(path, issues):
        if sealed is not None and ref.offset >= sealed:
            break
        try:
            key = decoder.decode(raw)
        except DECODE_ERRORS:  # a line that does not decode is not a rep that exists
            continue
        keys.add((key.leg, key.rep))
    return keys


def rep_exists(path: Path, leg: str, rep: int) -> bool:
    """Whether ``path`` already holds a complete (in a sealed run: sealed) line for (``leg``, ``rep``)."""
    return (leg, rep) in existing_reps(path)


def seal_torn_tail(path: Path) -> bytes:
    """If ``path`` ends without a newline (a writer crashed mid-line), move the partial bytes to
    ``<path>.torn`` and cut them off, so the next append starts a fresh line instead of merging into
    a corrupt one. Returns the bytes moved (empty when the file was clean or absent).

    The fragment is kept beside the file, never silently dropped; it was never a complete record.

    In a sealed run (``perfwarden.formats.seal``) everything after the last *sealed* line is cut the
    same way (kept in ``<path>.unsealed``, recorded in the chain): a line written just before a crash
    but never sealed is not evidence either, so the rep it holds is measured again.
    """
    path = Path(path)
    cut = seal.cut_unsealed_tail(path)
    if cut is not None:
        return cut
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return b""
    if size == 0:
        return b""
    with safe_write.open_update(path) as handle:
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return b""
        # Find the start of the torn line: one past the last newline.
        block = 1 << 16
        pos = size
        start = 0
        while pos > 0:
            read_from = max(0, pos - block)
            handle.seek(read_from)
            chunk = handle.read(pos - read_from)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                start = read_from + nl + 1
                break
            pos = read_from
        handle.seek(start)
        fragment = handle.read()
        with safe_write.open_append(path.with_name(path.name + ".torn")) as torn:
            torn.write(fragment + b"\n")
            torn.flush()
            os.fsync(torn.fileno())
        handle.truncate(start)
        handle.flush()
        os.fsync(handle.fileno())
    return fragment


def append_bench_line(path: Path, line: dict[str, Any]) -> bool:
    """Append ``line`` unless its (leg, rep) is already in ``path``; True when written.

    A resumed run calls this (or :func:`rep_exists` before measuring) so a rep is never duplicated.
    """
    leg, rep = line.get("leg"), line.get("rep")
    if not isinstance(leg, str) or not isinstance(rep, int):
        raise ValueError(f"bench line needs a str 'leg' and int 'rep', got {leg!r}, {rep!r}")
    seal_torn_tail(path)
    if rep_exists(path, leg, rep):
        return False
    seal.append_jsonl(path, line)  # sealed (leg, rep, contention) when the run has a chain
    return True


def reps_to_run(path: Path, leg: str, reps: Iterable[int]) -> list[int]:
    """The reps of ``reps`` that ``path`` does not hold yet, in the given order."""
    done = existing_reps(path)
    return [k for k in reps if (leg, k) not in done]
