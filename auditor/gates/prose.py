"""Claims in prose: every number in a report traces to the re-derived value it claims to be.

Tracing is by meaning. Each number is read with its clause: its unit (``%``, ``x``,
``ms``/``s``, ``tok/s``, ``req/s``), the metric the clause names (throughput, TTFT, TPOT, ITL, e2e,
latency; median or p99), the leg it names (baseline/candidate or a leg's name) and what kind of value
it is (a delta, a rep spread, the noise band, a CI, a p-value, a level). It traces only to a value of
that kind, metric, leg and unit, printed at the report's precision -- never to an unrelated number
that happens to be in the run (a batching window of 12.5 ms does not back a "12.5%" rise).

Numbers that are not results are not checked: versions (``torch 2.13.0``, ``Python 3.11``), dates,
model sizes (``SmolLM2-135M``), counts of things (``40 items``, ``8 prompts``), small list numbers, and
goals (``our target was a 5% gain``). Numbers in a clause that calls them expected/projected/
illustrative are not measurements: presenting them in a results report is a FAIL.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from perfwarden.auditor.evidence import TextFile
from perfwarden.auditor.findings import Findings, GateResult
from perfwarden.formats.records import EvidenceRef

# ------------------------------------------------------------------------------ the values a run has


@dataclass(frozen=True)
class Traceable:
    """One re-derived value a report may quote, with what it is."""

    value: float
    kind: str
    """``level`` (a metric's value in a leg), ``delta`` (percent change), ``ratio`` (x-fold), ``spread``,
    ``band``, ``worst``, ``ci`` (percent), ``pvalue``, ``share`` (percent of profile time),
    ``quality`` (an eval score), ``count`` or ``config`` (a server_info number)."""
    metric: str | None = None
    """Metric (``rederive.METRICS`` key) the value belongs to, if any."""
    leg: str | None = None
    """Leg the value belongs to, for levels and spreads."""


# ------------------------------------------------------------------------------- reading the report

NUMBER = re.compile(
    r"(?<![\w.\-/])([-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?|[-+]?\d+(?:\.\d+)?)"
    r"(\s?(?:%|×|x\b|ms\b|s\b|tok/s|tokens/s|req/s|µs|us\b))?(?![\w.]*\d)(?![A-Za-z])")
SPECULATIVE = re.compile(r"\b(expected|expect|projected|estimated?|illustrative|hypothetical|would|could reach|"
                         r"anticipated|should (reach|give|yield)|for example|e\.g\.)\b", re.IGNORECASE)
_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
NON_RESULTS = [
    re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?Z?)?\b"),                  # ISO dates/times
    re.compile(rf"\b{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}\b", re.IGNORECASE),  # Nov 22, 2026
    re.compile(rf"\b\d{{1,2}}\s+{_MONTH}\s+\d{{4}}\b", re.IGNORECASE),                    # 22 Nov 2026
    re.compile(rf"\b{_MONTH}\s+\d{{4}}\b", re.IGNORECASE),                               # November 2026
    re.compile(r"\b\d+\.\d+\.\d+[\w.\-+]*\b|\bv\d+(?:\.\d+)*\b"),                          # 2.13.0, v2.1
    re.compile(r"\b(?:python|torch|pytorch|cuda|cudnn|sglang|vllm|transformers|triton|loadgen|mlperf|perfwarden|"
               r"numpy|rocm|gcc|ubuntu|debian|linux|kernel|driver|version|release|round|llama|qwen|smollm\d*)"
               r"[\s-]*v?\d+(?:\.\d+)*\b", re.IGNORECASE),                                   # Python 3.11
    re.compile(r"\b\d+(?:\.\d+)?\s*[KMBT]\b(?:[\s-]*param\w*)?"),                          # 135M, 7B
]
COUNT_NOUNS = re.compile(
    r"^\s*(?:[a-z\-]+\s+)?(items?|prompts?|questions?|requests?|reps?|repetitions?|runs?|samples?|legs?|seeds?|"
    r"threads?|cores?|cpus?|gpus?|layers?|heads?|words?|lines?|files?|modules?|steps?|iterations?|trials?|shapes?|"
    r"ops?|kernels?|users?|sequences?|batches|queries|examples?|shots?|servers?|nodes?|claims?|fixtures?|"
    r"parameters?|params?|times|days?|hours?|minutes?|weeks?|months?|years?)\b", re.IGNORECASE)
GOAL_BEFORE = re.compile(r"\b(target|goal|aim|objective)s?\b(?:\s+(?:for|of)\s+[\w\s]{0,30}?)?\s*(?:is|was|were|are|"
                         r"of|at|:|=)\s*(?:a|an|the|about|around|roughly|~)?\s*$", re.IGNORECASE)
GOAL_AFTER = re.compile(r"^\s*(?:\w+\s+)?(target|goal|aim|objective)s?\b", re.IGNORECASE)
CLAUSE_SPLIT = re.compile(r"[;:!?]|(?<!\d)\.(?!\d)|\.(?=\s|$)|,\s|\s[–—-]\s")
RANGE_JOIN = re.compile(r"^\s*(to|and|vs\.?|versus|-|–)(\s|$)", re.IGNORECASE)
"""Joins two numbers that share the second one's unit ("from 100.0 to 110.1 tok/s")."""
SMALL_COUNT = 16
"""Bare integers up to this (list numbers, rep counts) are not claims unless they carry a unit."""
CONTEXT_CHARS = 160
"""How far before/after a number its goal/count/range words are looked for (bounded: linear time)."""

FAMILIES: dict[str, re.Pattern[str]] = {
    "throughput": re.compile(r"throughput|tok/s|tokens/s|tokens per second|req/s|requests per second|\bqps\b", re.I),
    "ttft": re.compile(r"\bttft\b|time to first token|first[- ]token", re.I),
    "tpot": re.compile(r"\btpot\b|time per output token|per[- ]output[- ]token|decode time per token", re.I),
    "itl": re.compile(r"\bitl\b|inter[- ]token", re.I),
    "e2e": re.compile(r"\be2e\b|end[- ]to[- ]end|request latency", re.I),
    "latency": re.compile(r"latenc", re.I),
}
FAMILY_METRICS: dict[str, tuple[str, ...]] = {
    "throughput": ("output_throughput", "request_throughput", "total_throughput"),
    "ttft": ("median_ttft_ms", "p99_ttft_ms"),
    "tpot": ("median_tpot_ms", "p99_tpot_ms"),
    "itl": ("median_itl_ms", "p99_itl_ms"),
    "e2e": ("median_e2e_latency_ms", "p99_e2e_latency_ms"),
    "latency": ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "median_itl_ms", "p99_itl_ms",
                "median_e2e_latency_ms", "p99_e2e_latency_ms"),
}
STAT_WORDS: dict[str, re.Pattern[str]] = {
    "spread": re.compile(r"\bspread|\brange\b|\bvar(ied|iation)\b|\bcv\b", re.I),
    "band": re.compile(r"\bnoise\b|\bband\b", re.I),
    "worst": re.compile(r"\bworst\b", re.I),
    "ci": re.compile(r"\bci\b|\binterval\b|\bconfidence\b", re.I),
    "share": re.compile(r"\bshare\b|of (the )?(time|runtime|profile)|\bhot\b|\bprofile\b", re.I),
    "quality": re.compile(r"exact[- ]match|\baccuracy\b|\bquality\b|\bscore\b|perplexity", re.I),
}
P99 = re.compile(r"\bp99\b|99th|\btail\b", re.I)
MEDIAN = re.compile(r"\bmedian\b|\bp50\b|\btypical\b", re.I)
PVALUE = re.compile(r"\bp\s*(=|<|≤|<=)\s*$|p-value\s*(of|=|:)?\s*$", re.I)
BASELINE_WORDS = re.compile(r"\bbaseline\b|\breference\b|\bbefore\b|\bunpatched\b|\bfrom\s*$", re.I)
CANDIDATE_WORDS = re.compile(r"\bcandidate\b|\bafter\b|\bpatched\b|\bwith the (change|patch|override)\b|"
                             r"\bnew config", re.I)
TIME_UNITS = {"ms": 1.0, "s": 1000.0, "µs": 0.001, "us": 0.001}


@dataclass(frozen=True)
class Quoted:
    """A number in the report, with what its clause says it is."""

    token: str
    value: float
    unit: str
    families: tuple[str, ...]
    stat: str | None
    legs: tuple[str, ...]
    p99: bool
    median: bool
    pvalue: bool


RESULT_UNIT = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?\s?(?:%|×|x\b|tok/s|tokens/s|req/s)")
"""A number with a result's unit: checked even inside code, where identifiers and logs are not."""


def _code_span(m: re.Match[str]) -> str:
    """Inline code is an identifier or a command (not checked) unless it is a bare result (`25%`)."""
    inner = m.group(1).strip()
    return f" {inner} " if RESULT_UNIT.fullmatch(inner) else " "


def _prose_lines(tf: TextFile) -> Iterator[tuple[int, str, str]]:
    """Lines to read, with what is not prose removed. Inside fenced blocks (commands, logs) only numbers
    with a result's unit (%, x, tok/s, req/s) are kept: a result does not hide in a code block."""
    in_fence = False
    for i, line in enumerate(tf.lines, 1):
        if line.strip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            families = _families_only(line)
            kept = " ; ".join(f"{families} {m.group(0)}" for m in RESULT_UNIT.finditer(line))
            if kept:
                yield i, line, kept
            continue
        text = re.sub(r"`([^`]*)`", _code_span, line)
        text = re.sub(r"^\s*(#+|\d+\.|[-*])\s", " ", text)
        for rx in NON_RESULTS:
            text = rx.sub(" ", text)
        yield i, line, text


def _families_only(line: str) -> str:
    """The metric words of a code line (so a result in it is read as what it claims to be)."""
    return " ".join(m.group(0) for rx in FAMILIES.values() for m in rx.finditer(line))


def _decimals(token: str) -> int:
    return len(token.split(".", 1)[1]) if "." in token else 0


REL_TOLERANCE = 0.005
"""Integers print rounded: a large integer also traces within this relative tolerance (1,677 vs 1677.476)."""


def traces(token: str, value: float, pool: list[float]) -> bool:
    """``value`` printed as ``token`` agrees with some pool value at the printed precision. ``pool`` is
    sorted: only the values within the widest tolerance are compared (a report with 100,000 numbers
    against thousands of values stays a fraction of a second)."""
    if not math.isfinite(value):  # a 400-digit number is a claim no measurement gives
        return False
    d = _decimals(token)
    tol = 0.5 * 10 ** (-d) + 1e-9
    rel = REL_TOLERANCE if d == 0 and abs(value) >= 100 else 0.0
    # |p - v| <= rel*|p| implies |p - v| <= rel*|v| / (1 - rel): a window that holds every candidate.
    window = max(tol, rel * abs(value) / (1 - rel) + 1e-9)
    lo, hi = bisect_left(pool, value - window), bisect_right(pool, value + window)
    return any(abs(p - value) <= max(tol, rel * abs(p)) for p in pool[lo:hi])


def _families(text: str) -> tuple[str, ...]:
    found = tuple(name for name, rx in FAMILIES.items() if rx.search(text))
    if "latency" in found and len(found) > 1:
        found = tuple(f for f in found if f != "latency")  # "TTFT latency" is TTFT
    return found


def _legs(text: str, baseline: str | None, candidate: str | None, leg_names: Iterable[str]) -> tuple[str, ...]:
    named = {n for n in leg_names if len(n) >= 3 and re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text)}
    if BASELINE_WORDS.search(text) and baseline:
        named.add(baseline)
    if CANDIDATE_WORDS.search(text) and candidate:
        named.add(candidate)
    return tuple(sorted(named))


def read_numbers(text: str, baseline: str | None, candidate: str | None,
                 leg_names: Iterable[str]) -> list[tuple[Quoted | None, str]]:
    """Every number of a prose line with its meaning; ``(None, why)`` for one that is not a result."""
    out: list[tuple[Quoted | None, str]] = []
    for clause in CLAUSE_SPLIT.split(text):
        matches = list(NUMBER.finditer(clause))
        if not matches:
            continue
        units = [(m.group(2) or "").strip() for m in matches]
        next_unit = [""] * len(matches)  # the unit of the next number that has one (ranges share it)
        for k in range(len(matches) - 2, -1, -1):
            next_unit[k] = units[k + 1] or next_unit[k + 1]
        # What the clause says is read once per clause; what surrounds one number is read in a bounded
        # window, so a hostile line of 100,000 numbers costs linear time, not quadratic.
        families = _families(clause)
        stat = next((name for name, rx in STAT_WORDS.items() if rx.search(clause)), None)
        p99, median = bool(P99.search(clause)), bool(MEDIAN.search(clause))
        for k, m in enumerate(matches):
            token = m.group(1).replace(",", "")
            value = float(token)
            unit = units[k]
            before = clause[max(0, m.start() - CONTEXT_CHARS):m.start()]
            after = clause[m.end():m.end() + CONTEXT_CHARS]
            if not unit:  # "from 100.0 to 110.1 tok/s": the first number shares the second's unit
                unit = next_unit[k]
                between = clause[m.end():min(matches[k + 1].start(), m.end() + CONTEXT_CHARS)] \
                    if k + 1 < len(matches) else ""
                if unit and not RANGE_JOIN.match(between):
                    unit = ""
            if GOAL_BEFORE.search(before) or GOAL_AFTER.match(after):
                out.append((None, "a goal, not a result"))
                continue
            if not units[k] and COUNT_NOUNS.match(after):
                out.append((None, "a count of things"))
                continue
            if not unit and value.is_integer() and abs(value) <= SMALL_COUNT:
                out.append((None, "a small count"))
                continue
            if not unit and value.is_integer() and 1900 <= value <= 2100 and not families:
                out.append((None, "a year"))
                continue
            window = clause[max(0, m.start() - 80):m.start()]
            out.append((Quoted(token=m.group(1), value=value, unit=unit, families=families, stat=stat,
                               legs=_legs(window or clause[:CONTEXT_CHARS], baseline, candidate, leg_names),
                               p99=p99, median=median, pvalue=bool(PVALUE.search(before[-12:]))), clause))
    return out


# ---------------------------------------------------------------------------------------- matching


def _metrics_for(q: Quoted, headline_metric: str) -> set[str]:
    families = q.families or ()
    if q.unit in ("tok/s", "tokens/s"):
        families = ("throughput",)
        metrics = {"output_throughput", "total_throughput"}
    elif q.unit == "req/s":
        metrics = {"request_throughput"}
    else:
        metrics = {m for f in families for m in FAMILY_METRICS[f]}
    if not metrics:
        metrics = {headline_metric}
    if q.p99 and not q.median:
        metrics = {m for m in metrics if not m.startswith("median_")} or metrics
    elif q.median and not q.p99:
        metrics = {m for m in metrics if not m.startswith("p99_")} or metrics
    return metrics


def candidates(q: Quoted, pool: list[Traceable], headline_metric: str) -> list[float]:
    """The pool values this number may be: same kind, metric, leg and unit."""
    if q.pvalue:
        return [t.value for t in pool if t.kind == "pvalue"]
    metrics = _metrics_for(q, headline_metric)
    legs = set(q.legs)

    def pick(kinds: set[str], by_metric: bool = True, by_leg: bool = False) -> list[Traceable]:
        return [t for t in pool if t.kind in kinds and (not by_metric or t.metric in metrics)
                and (not by_leg or not legs or t.leg in legs)]

    if q.unit == "%":
        if q.stat == "share":
            return [t.value * 100.0 for t in pool if t.kind == "share"]
        if q.stat == "quality":
            return [t.value * 100.0 for t in pool if t.kind == "quality"]
        if q.stat in ("spread", "band", "worst", "ci"):
            return [t.value for t in pick({q.stat}, by_leg=q.stat == "spread")]
        out = []
        for t in pick({"delta"}):
            out += [t.value, abs(t.value)]
        return out
    if q.unit in ("x", "×"):
        return [t.value for t in pool if t.kind == "ratio" and (t.metric is None or t.metric in metrics)]
    if q.unit in TIME_UNITS:
        scale = TIME_UNITS[q.unit]
        time_metrics = metrics if q.families and "throughput" not in q.families else set(FAMILY_METRICS["latency"])
        out = [t.value / scale for t in pool if t.kind == "level" and t.metric in time_metrics
               and (not legs or t.leg in legs)]
        if q.unit == "s":
            out += [t.value for t in pool if t.kind == "duration" and (not legs or t.leg in legs)]
        return out
    if q.unit in ("tok/s", "tokens/s", "req/s") or q.families:
        if q.stat == "quality":
            return [t.value for t in pool if t.kind == "quality"]
        return [t.value for t in pick({"level"}, by_leg=True)]
    if q.stat == "quality":
        return [t.value for t in pool if t.kind == "quality"]
    return [t.value for t in pool if t.kind in ("count", "config", "ratio", "quality")]


Meaning = tuple[bool, str, str | None, tuple[str, ...], tuple[str, ...], tuple[str, ...]]
"""(p-value, unit, statistic, legs, families, metrics): what a quoted number's candidates depend on."""


def _meaning(q: Quoted, headline_metric: str) -> Meaning:
    """What ``candidates`` depends on: numbers with the same meaning share one sorted candidate list."""
    return (q.pvalue, q.unit, q.stat, q.legs, q.families, tuple(sorted(_metrics_for(q, headline_metric))))


def check_report(run: Path, report: TextFile, pool: list[Traceable], headline_metric: str,
                 baseline: str | None, candidate: str | None, leg_names: Iterable[str]) -> GateResult[int]:
    """UNTRACED_CLAIM for every result number that is not the value it claims to be, and for numbers
    presented as expected/projected in a results report. ``value`` is how many numbers were checked.

    Pure: findings are collected in a local, bounded ``Findings`` (at most ``MAX_LISTED`` listed per code,
    the rest counted in one summary), each line's evidence is hashed once, and numbers of one meaning
    share one sorted candidate list, so a hostile report with 100,000 numbers costs seconds, not minutes."""
    out = Findings()
    evidence: dict[int, list[EvidenceRef]] = {}
    omitted_cited = False

    def cite(line_no: int) -> list[EvidenceRef]:
        nonlocal omitted_cited
        if out.full("prose", "UNTRACED_CLAIM"):
            if omitted_cited:
                return []  # only counted: the summary cites the first omitted finding's line
            omitted_cited = True
        if line_no not in evidence:
            evidence[line_no] = [report.evidence(run, line_no)]
        return evidence[line_no]

    by_meaning: dict[Meaning, list[float]] = {}
    checked = 0
    leg_names = list(leg_names)
    for line_no, _raw, text in _prose_lines(report):
        flagged: set[str] = set()
        speculative_in: dict[str, re.Match[str] | None] = {}
        for quoted, clause in read_numbers(text, baseline, candidate, leg_names):
            if quoted is None:
                continue
            checked += 1
            if clause not in speculative_in:  # once per clause, however many numbers it holds
                speculative_in[clause] = SPECULATIVE.search(clause)
            speculative = speculative_in[clause]
            token = quoted.token[:40]
            shown = f"{token}{(' ' + quoted.unit) if quoted.unit and quoted.unit not in '%x×' else quoted.unit}"
            if speculative:
                if clause in flagged:  # one finding per speculative clause
                    continue
                flagged.add(clause)
                out.add("UNTRACED_CLAIM", "FAIL", f"line {line_no}: {shown} is presented in a results report but "
                        f"called {speculative.group(0)!r}: not a measurement", measured=shown,
                        threshold="measured values only", evidence=cite(line_no), action="eject", gate="prose")
                continue
            key = _meaning(quoted, headline_metric)
            if key not in by_meaning:
                by_meaning[key] = sorted(v for v in candidates(quoted, pool, headline_metric) if math.isfinite(v))
            pool_values = by_meaning[key]
            if not traces(quoted.token.replace(",", ""), quoted.value, pool_values):
                what = ", ".join(filter(None, [
                    "/".join(quoted.families) or None, quoted.stat, "/".join(quoted.legs) or None,
                    {"%": "percent", "x": "ratio", "×": "ratio"}.get(quoted.unit, quoted.unit or "bare number")]))
                out.add("UNTRACED_CLAIM", "FAIL", f"line {line_no}: {shown} ({what}) traces to no re-derived value "
                        "of that kind", measured=shown, threshold=f"{len(pool_values)} re-derived value(s) of that "
                        "kind at the printed precision", evidence=cite(line_no), action="eject", gate="prose")
    return GateResult(findings=out.items, value=checked)


def finite(values: Iterable[float | None]) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
