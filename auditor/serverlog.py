"""What a server log says about the conditions: the configuration the server applied, and the
mechanisms it reports engaged. One more copy of a leg's conditions, held against the others.

Formats read (any other line is ignored; a line that has the shape but does not parse is reported so
the verdict can say that copy was not checked -- never taken as agreement):

- perfwarden's embedded server (``harness/embedded_server.py``): ``... effective_config {json}``,
  logged once per start, and ``... ENGAGED <knob>[=<value>] ...`` when a mechanism engages
  (``ENGAGED prompt_lookup``, ``ENGAGED response_cache``, ``ENGAGED quantization=int8_dynamic``,
  ``ENGAGED torch_compile``, ``ENGAGED op_override op='rmsnorm'``);
- sglang: ``server_args=ServerArgs(key=value, ...)``, the launch line with each argument's Python
  repr (values that are not literals, e.g. enum reprs, are skipped);
- vLLM: ``non-default args: {...}``, the arguments it was launched with that differ from its defaults
  (a Python dict; enum reprs skipped), ``--speculative-config``'s fields under the names server_info
  gives them (``method`` -> ``speculative_method``).

Besides the conditions, every other thing a gate looks for in a server log is defined here too (the
mechanisms that ran, acceptance counts, crash lines, usage peaks, an op's engagement), because
:func:`scan_server_log` reads a log once for all of them: a 256 MiB log is streamed in 1 MiB pieces,
only the lines that hold a pattern's literals (its ``Guard``) are looked at, and what is kept is bounded by the
``MAX_*`` constants below -- never the log's lines (the gates used to re-scan them each, 341 s for
250 MB). Gates consume the :class:`ServerLog` record.
"""

from __future__ import annotations

import ast
import codecs
import hashlib
import math
import re
from dataclasses import dataclass, field
from itertools import compress, count, repeat
from typing import Any, Iterable, Literal, NamedTuple

from perfwarden.auditor import registry
from perfwarden.auditor.rederive import flatten_json
from perfwarden.harness.json_limits import check_depth, loads_bounded
from perfwarden.harness.records import EvidenceRef

CopySource = Literal["effective_config", "server_args", "vllm_args", "engaged", "model_loaded", "serving"]

MAX_LINE_CHARS = 256 * 1024
"""Longest log line parsed as a configuration (a real ServerArgs line is a few KB)."""
PRESENT = "<engaged>"
"""Value of a knob the log says engaged without saying its value (an op override): it only has to exist."""

_EFFECTIVE = re.compile(r"\beffective_config (\{.*)$")
_SERVER_ARGS = re.compile(r"\bserver_args=(ServerArgs\(.*\))\s*$")
_ENGAGED = re.compile(r"\bENGAGED (\w+)(?:=(\S+))?(?:\s+op=['\"]([^'\"]+)['\"])?")
_ENGAGED_KNOB = {"op_override": "op_overrides"}
_VLLM_ARGS = re.compile(r"\bnon-default args: (\{.*\})\s*$")
_QUOTED = r"('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
_MODEL_LOADED = re.compile(rf"\bmodel loaded name={_QUOTED} dir={_QUOTED} digest=(\S+)")
_SERVING = re.compile(rf"\bserving model={_QUOTED}")
IDENTITY_LINES = ("model loaded name=", "serving model=")
"""What the embedded server logs of the model it loaded and serves (``harness/embedded_server.py``): the
model's name, directory and weights digest, copies of server_info's identity."""
_ENUM_REPR = re.compile(r"<[A-Za-z_][\w.]*: [^<>]*>")
_VLLM_SPECULATIVE = {"method": "speculative_method", "num_speculative_tokens": "num_speculative_tokens",
                     "prompt_lookup_max": "prompt_lookup_max", "prompt_lookup_min": "prompt_lookup_min"}


@dataclass(frozen=True)
class LogCopy:
    """The conditions one log line states."""

    line: int
    """1-based line in server.log."""
    source: CopySource
    values: dict[str, Any] = field(default_factory=dict)
    """Flattened knob -> value (``PRESENT`` when only engagement is known)."""


def parse_server_log(lines: list[str]) -> tuple[list[LogCopy], list[str]]:
    """Every configuration/engagement line of a log, and a note per line that looked like one but
    could not be read."""
    copies: list[LogCopy] = []
    problems: list[str] = []
    for i, text in enumerate(lines, 1):
        if ("effective_config" not in text and "ServerArgs(" not in text and "ENGAGED" not in text
                and "non-default args" not in text and not any(k in text for k in IDENTITY_LINES)):
            continue
        copy, problem = _condition_line(i, text)
        problems += [problem] if problem is not None else []
        copies += [copy] if copy is not None else []
    return copies, problems


def _parse_line(i: int, text: str) -> LogCopy | None:
    m = _EFFECTIVE.search(text)
    if m:
        obj = loads_bounded(m.group(1), what="effective_config")
        if not isinstance(obj, dict):
            raise ValueError("effective_config is not a JSON object")
        return LogCopy(i, "effective_config", flatten_json(obj))
    m = _SERVER_ARGS.search(text)
    if m:
        return LogCopy(i, "server_args", flatten_json(_server_args(m.group(1))))
    m = _VLLM_ARGS.search(text)
    if m:
        return LogCopy(i, "vllm_args", flatten_json(_vllm_args(m.group(1))))
    m = _MODEL_LOADED.search(text)
    if m:
        name, folder = (ast.literal_eval(g) for g in m.group(1, 2))
        return LogCopy(i, "model_loaded", {"model": name, "model_path": folder, "weights_digest": m.group(3)})
    m = _SERVING.search(text)
    if m:
        return LogCopy(i, "serving", {"model": ast.literal_eval(m.group(1))})
    m = _ENGAGED.search(text)
    if m:
        knob, value, op = m.group(1), m.group(2), m.group(3)
        knob = _ENGAGED_KNOB.get(knob, knob)
        if op:
            return LogCopy(i, "engaged", {f"{knob}.{op}": PRESENT})
        return LogCopy(i, "engaged", {knob: _scalar(value) if value is not None else True})
    return None


def _server_args(expr: str) -> dict[str, Any]:
    """Keyword arguments of ``ServerArgs(...)`` whose values are Python literals."""
    check_depth(expr.replace("(", "[").replace(")", "]"), what="ServerArgs")
    node = ast.parse(expr, mode="eval").body
    if not isinstance(node, ast.Call):
        raise ValueError("not a call")
    out: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            continue
        try:
            out[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, SyntaxError, TypeError):
            continue  # an enum or object repr: not a literal, nothing to compare
    return out


def _vllm_args(expr: str) -> dict[str, Any]:
    """The literal entries of vLLM's ``non-default args`` dict (an enum's repr is not Python: skipped)."""
    check_depth(expr, what="vLLM non-default args")
    node = ast.parse(_ENUM_REPR.sub("_not_a_literal_", expr), mode="eval").body
    if not isinstance(node, ast.Dict):
        raise ValueError("not a dict")
    out: dict[str, Any] = {}
    for key, value in zip(node.keys, node.values):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            continue
        try:
            out[key.value] = ast.literal_eval(value)
        except (ValueError, SyntaxError, TypeError):
            continue
    spec = out.pop("speculative_config", None)
    if isinstance(spec, dict):
        out.update({_VLLM_SPECULATIVE[k]: v for k, v in spec.items() if k in _VLLM_SPECULATIVE})
    return out


def _scalar(text: str) -> Any:
    """``int8_dynamic`` -> str, ``4`` -> int, ``true`` -> bool (how ENGAGED lines write values)."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text.strip("'\"")



# ------------------------------------------------------------------------------ what gates look for

RESPONSE_CACHE_HIT = re.compile(r"response[ _-]?cache[^\n]*\bhit\b", re.IGNORECASE)
NOT_ENGAGED_RX = re.compile(r"not engaged|engaged\s*[=:]\s*(0|false|no)\b|\b0 calls\b", re.IGNORECASE)
_ENGAGED_WORD = re.compile(r"\bengaged\b", re.IGNORECASE)

Family = Literal["spec_decode", "response_cache", "kernel_override"]

# (family, pattern) -- each pattern means the mechanism *ran*, not merely that a flag was printed.
SIGNAL_PATTERNS: list[tuple[Family, re.Pattern]] = [
    ("spec_decode", re.compile(r"\bENGAGED\s+(prompt_lookup|speculative\w*)", re.IGNORECASE)),
    ("spec_decode", re.compile(r"\bprompt_lookup rid=\S+ verify_steps=\d+")),
    ("spec_decode", re.compile(r"\baccept len:\s*[0-9.]+")),                       # sglang decode log
    ("spec_decode", re.compile(r"SpecDecoding metrics:")),                         # vLLM
    ("spec_decode", re.compile(r'"avg_spec_accept_length":\s*[0-9.]+')),           # internal_states, non-null
    ("spec_decode", re.compile(r"speculative_algorithm=['\"](?!None)\w+")),        # sglang ServerArgs print
    ("response_cache", re.compile(r"\bENGAGED\s+response[ _-]?cache", re.IGNORECASE)),
    ("response_cache", RESPONSE_CACHE_HIT),
    ("response_cache", re.compile(r'"response_cache_hits":\s*[1-9]')),
    ("kernel_override", re.compile(r"\bENGAGED\s+op_override\s+op=['\"]?(\w+)", re.IGNORECASE)),
    ("kernel_override", re.compile(r"\boverride\s+['\"]?(\w+)['\"]?\s+engaged\b", re.IGNORECASE)),
    ("kernel_override", re.compile(r'"op_override_calls":\s*\{\s*"(\w+)":\s*[1-9]')),
    ("kernel_override", re.compile(r"op_override final calls \{\s*'(\w+)':\s*[1-9]")),
]

# Acceptance counts in logs: (accepted, drafted) per line, or a rate per line.
_EMBEDDED_COUNTS = re.compile(r"prompt_lookup rid=\S+ verify_steps=\d+ drafted=(\d+) accepted=(\d+)")
_VLLM_COUNTS = re.compile(r"Accepted: (\d+) tokens, Drafted: (\d+) tokens")
_SGLANG_RATE = re.compile(r"\baccept rate:\s*([0-9.]+)")

FATAL_PATTERNS = re.compile(
    r"(Segmentation fault|core dumped|\bKilled\b|out of memory|illegal memory access|server (crashed|died|exited)|"
    r"fatal error|\bFATAL\b|SIGABRT|SIGSEGV|Worker .{0,256}? died|scheduler crash|exited with (code|status) -?[1-9])",
    re.IGNORECASE)
"""Log lines that mean the server process itself went down. (``Worker .{0,256}? died``, not ``Worker .*
died``: the unbounded gap made a line of repeated "Worker " quadratic, 3.6 s for 112 KB.)"""
ERROR_PATTERNS = re.compile(r"(Traceback \(most recent call last\)|RuntimeError:|CUDA error)")
"""Log lines that are a crash only when the leg also died (a server may log a failed request and live)."""

Guard = tuple[frozenset[bytes], ...]
"""Literals a line must hold (case folded: ``fold``) for a pattern to be worth running on it: all of
one set, for any set. Lines that hold no guard of any pattern are counted and skipped unread."""


def _guard(*alternatives: str | tuple[str, ...]) -> Guard:
    return tuple(frozenset(n.encode("utf-8") for n in ((a,) if isinstance(a, str) else a)) for a in alternatives)


_NOT_ENGAGED_GUARD = _guard("engaged", "0 calls")
_CONDITION_GUARD = _guard("effective_config", "serverargs(", "engaged", "non-default args", *IDENTITY_LINES)
SIGNAL_GUARDS: list[Guard] = [
    _guard("engaged"), _guard("prompt_lookup rid="), _guard("accept len:"), _guard("specdecoding metrics:"),
    _guard('"avg_spec_accept_length"'), _guard("speculative_algorithm="),
    _guard("engaged"), _guard(("response", "cache", "hit")), _guard('"response_cache_hits"'),
    _guard("engaged"), _guard("engaged"), _guard('"op_override_calls"'), _guard("op_override final calls"),
]
"""One guard per ``SIGNAL_PATTERNS`` entry, in order (a pattern added there needs its guard here)."""
_ACCEPT_GUARD = _guard("prompt_lookup rid=", "accepted: ", "accept rate:")
_FATAL_GUARD = _guard("segmentation fault", "core dumped", "killed", "out of memory", "illegal memory access",
                      "server crashed", "server died", "server exited", "fatal", "sigabrt", "sigsegv",
                      ("worker", "died"), "scheduler crash", "exited with")
_ERROR_GUARD = _guard("traceback (most recent call last)", "runtimeerror:", "cuda error")
_STREAMED_DONE = re.compile(rb"\brequest done rid=\S+ endpoint=\S+ stream=true\b")
"""``harness/embedded_http.py``'s line for a finished streamed request, on folded text (counted per batch in C)."""
_START = re.compile(rb"^=== perfwarden \S+ start ", re.MULTILINE)
"""``harness/targets.py``'s header line as it starts a server, on folded text."""
_FOLD_SPECIAL = {0x130: "i", 0x131: "i", 0x17F: "s", 0x212A: "k"}
"""The only letters a case-insensitive ``re`` pattern matches to an ASCII letter besides A-Z (dotted and
dotless i, long s, Kelvin sign): folded first, so a guard never hides a match."""
_FOLD_SPECIAL_RX = re.compile("[\u0130\u0131\u017f\u212a]")


def fold(text: str) -> bytes:
    """``text`` as UTF-8 with ASCII letters lower-cased, the way guards compare it (bytes: ``str.lower``
    of non-ASCII text allocates 12 bytes a character; line breaks are untouched, so lines stay aligned)."""
    return (text.translate(_FOLD_SPECIAL) if _FOLD_SPECIAL_RX.search(text) else text).encode("utf-8").lower()


def _holds(present: frozenset[bytes], guard: Guard) -> bool:
    return any(need <= present for need in guard)


MAX_COPIES = 1000
"""Configuration lines held as copies of the conditions (a server states them once per start); later
ones are counted as not checked."""
MAX_COPY_CHARS = 16 << 20
"""Characters of configuration lines held in all (a 64 KiB effective_config parses to thousands of keys)."""
MAX_PROBLEMS = 100
"""Unreadable configuration lines described one by one; the rest are counted in one note."""
MAX_SIGNALS = 100
"""Mechanism lines held per (family, op, hit) kind; all are counted."""
MAX_SIGNAL_KINDS = 100
"""Distinct (family, op, hit) kinds held; lines of further kinds are counted in a note."""
_EXCERPT = 200
_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
"""What ``str.splitlines`` breaks at (``\r\n`` is one break): line numbers are the ones the gates
always cited."""
_BREAK = re.compile(f"[{re.escape(_LINE_BREAKS)}]")


@dataclass(frozen=True)
class LogSignal:
    """One raw sign that a mechanism ran in a leg."""

    family: Family
    line: int
    text: str
    detail: str | None = None
    """The op a kernel-override line names, when it names one."""
    hit: bool = False
    """A response-cache line that reports a hit."""


@dataclass(frozen=True)
class LongLine:
    """The first line over the per-line bound: the log is not read past it."""

    line: int
    chars: int
    sha256: str
    excerpt: str


@dataclass
class ServerLog:
    """What one pass over a server log found for every gate: bounded, never the log's lines."""

    file: str
    """The log, relative to the run (for evidence)."""
    sha256: str = ""
    n_lines: int = 0
    cited: dict[int, tuple[str, str]] = field(default_factory=dict)
    """Line -> (sha256, excerpt) of every line a record below names."""
    copies: list[LogCopy] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Bounds reached while reading (what was counted but not kept)."""
    signals: list[LogSignal] = field(default_factory=list)
    signal_counts: dict[tuple[str, str | None, bool], int] = field(default_factory=dict)
    accepted: int = 0
    drafted: int = 0
    rate_partials: list[float] = field(default_factory=list)
    n_rates: int = 0
    rate_infinite: bool = False
    """A rate of hundreds of digits reads as infinity (the mean is then infinite, as numpy's was)."""
    acceptance_line: int | None = None
    acceptance_error: Exception | None = None
    """The first acceptance number that did not parse (the gate fails on it, as it always did)."""
    fatal: tuple[int, str] | None = None
    error: tuple[int, str] | None = None
    usage_peaks: dict[str, float | None] = field(default_factory=dict)
    engaged: dict[str, int | None] = field(default_factory=dict)
    refused: dict[str, int | None] = field(default_factory=dict)
    long_line: LongLine | None = None
    streamed_done: int = 0
    """Lines of perfwarden's embedded server's per-request record of a streamed request (``request done rid=...
    endpoint=... stream=True``, case folded): one per bench request it answered (the harness's bench requests
    stream; its quality requests and warm-up do not)."""
    starts: int = 0
    """Header lines the harness wrote as it started the server (``=== perfwarden <Target> start``): one per
    process that wrote to the log (the log is appended to)."""

    def evidence(self, run: Any, line_no: int | None) -> EvidenceRef:
        """Evidence for a line a gate found here (``run`` is unused: ``file`` is already relative)."""
        if line_no is None or not 1 <= line_no <= self.n_lines:
            return EvidenceRef(file=self.file, sha256=self.sha256)
        sha, excerpt = self.cited[line_no]
        return EvidenceRef(file=self.file, line=line_no, sha256=sha, excerpt=excerpt)

    def signal_count(self, family: str, hit: bool | None = None) -> int:
        return sum(n for (f, _, h), n in self.signal_counts.items() if f == family and (hit is None or h == hit))

    def acceptance_rate(self) -> tuple[float | None, int | None]:
        """Accepted / drafted draft tokens (embedded or vLLM counts, else the mean of sglang's rates),
        and the log line it starts at."""
        if self.acceptance_error is not None:
            raise self.acceptance_error
        if self.drafted > 0:
            return self.accepted / self.drafted, self.acceptance_line
        if self.n_rates:
            total = math.inf if self.rate_infinite else math.fsum(self.rate_partials)
            return total / self.n_rates, self.acceptance_line
        return None, None

    def crash_line(self, failed: bool) -> tuple[int, str] | None:
        """First fatal line, or first fatal-or-error line when the leg failed."""
        found = [x for x in (self.fatal, self.error if failed else None) if x is not None]
        return min(found) if found else None


def usage_patterns() -> tuple[str, ...]:
    """The registry's usage patterns (``derived`` knobs are judged inert from their peaks)."""
    rules = registry.levers().get("derived", {})
    return tuple(sorted({r["usage_pattern"] for r in rules.values() if isinstance(r.get("usage_pattern"), str)}))


def _literal_prefix(pattern: str) -> str:
    """The literal text every match of ``pattern`` starts with ('' when none can be told)."""
    if "|" in pattern:
        return ""
    out = ""
    for ch in pattern:
        if ch in ".^$*+?{}[]\\|()":
            if ch in "*?{" and out:
                out = out[:-1]  # the last literal is optional
            break
        out += ch
    return out


def _add_exact(partials: list[float], x: float) -> None:
    """Shewchuk's running sum: ``math.fsum(partials)`` stays the exact sum, in O(1) memory per magnitude."""
    i = 0
    for y in partials:
        if abs(x) < abs(y):
            x, y = y, x
        hi = x + y
        lo = y - (hi - x)
        if lo:
            partials[i] = lo
            i += 1
        x = hi
    partials[i:] = [x]


MAX_PLANS = 4096
"""Line shapes (sets of literals present) whose plan is remembered."""


class _Plan(NamedTuple):
    """What to run on a line, from the literals it holds."""

    condition: bool
    not_engaged: bool
    signals: tuple[int, ...]
    """Indices into ``SIGNAL_PATTERNS``, in order."""
    accept: bool
    fatal: bool
    error: bool
    usage: tuple[int, ...]
    engaged: bool


class _LineScan:
    """Every gate's per-line logic, in one place, fed the lines whose guards hold."""

    def __init__(self, log: ServerLog, ops: Iterable[str], usage: Iterable[str]):
        self.log = log
        self.ops = [(op, re.compile(rf"\b{re.escape(op)}\b", re.IGNORECASE), op.lower()) for op in dict.fromkeys(ops)]
        self.usage = [(p, re.compile(p), (frozenset({fold(_literal_prefix(p))}),)) for p in usage]
        self.every_line = not all(_literal_prefix(p) for p, _, _ in self.usage)
        guards = [_NOT_ENGAGED_GUARD, _CONDITION_GUARD, *SIGNAL_GUARDS, _ACCEPT_GUARD, _FATAL_GUARD, _ERROR_GUARD,
                  *(g for _, _, g in self.usage)]
        self.needs = sorted({need for guard in guards for need in guard}, key=sorted)
        """Every set of literals that makes a line worth reading."""
        self.needles = sorted({n for need in self.needs for n in need})
        self._plans: dict[frozenset[bytes], _Plan] = {}
        self.copies_over = self.problems_over = self.signals_over = self.copy_chars = 0
        log.usage_peaks = {p: None for p, _, _ in self.usage}
        log.engaged = {op: None for op, _, _ in self.ops}
        log.refused = dict(log.engaged)

    def cite(self, i: int, text: str) -> None:
        if i not in self.log.cited:
            self.log.cited[i] = (hashlib.sha256(text.encode("utf-8")).hexdigest(), text[:_EXCERPT])

    def lines(self, first: int, parts: list[str]) -> None:
        """Lines ``first``, ``first + 1``, ...: a literal absent from the whole batch rules its guards out
        at once; the others select lines with ``in`` run in C, and only those are read."""
        folded_text = fold("\n".join(parts))
        folded = folded_text.split(b"\n")
        if len(folded) != len(parts):  # cannot happen (folding keeps line breaks); never misalign
            folded = [fold(p) for p in parts]
        in_batch = frozenset(n for n in self.needles if n in folded_text)
        if b"request done" in folded_text:
            self.log.streamed_done += sum(1 for _ in _STREAMED_DONE.finditer(folded_text))
        if b"=== perfwarden" in folded_text:
            self.log.starts += sum(1 for _ in _START.finditer(folded_text))
        chosen: set[int] = set(range(len(parts))) if self.every_line else set()
        for need in self.needs:
            if len(chosen) == len(parts):
                break
            if need <= in_batch:
                chosen.update(compress(count(), map(bytes.__contains__, folded, repeat(max(need, key=len)))))
        for k in sorted(chosen):
            low = folded[k]
            self.line(first + k, parts[k], self.plan(frozenset(n for n in in_batch if n in low)))

    def plan(self, present: frozenset[bytes]) -> _Plan:
        """Which patterns a line holding exactly the literals ``present`` can match (memoized: a log
        repeats a handful of line shapes)."""
        plan = self._plans.get(present)
        if plan is None:
            plan = _Plan(_holds(present, _CONDITION_GUARD), _holds(present, _NOT_ENGAGED_GUARD),
                         tuple(k for k, g in enumerate(SIGNAL_GUARDS) if _holds(present, g)),
                         _holds(present, _ACCEPT_GUARD), _holds(present, _FATAL_GUARD), _holds(present, _ERROR_GUARD),
                         tuple(k for k, (_, _, g) in enumerate(self.usage) if self.every_line or _holds(present, g)),
                         b"engaged" in present)
            if len(self._plans) < MAX_PLANS:
                self._plans[present] = plan
        return plan

    def line(self, i: int, text: str, plan: _Plan) -> None:
        log = self.log
        if plan.condition and ("effective_config" in text or "ServerArgs(" in text or "ENGAGED" in text
                               or "non-default args" in text or any(k in text for k in IDENTITY_LINES)):
            self._condition(i, text)
        refused = plan.not_engaged and NOT_ENGAGED_RX.search(text) is not None
        if plan.signals and not refused:
            self._signal(i, text, plan.signals)
        if plan.accept:
            self._acceptance(i, text)
        if plan.fatal and log.fatal is None and FATAL_PATTERNS.search(text):
            log.fatal = (i, text.strip()[:160])
            self.cite(i, text)
        if plan.error and log.error is None and ERROR_PATTERNS.search(text):
            log.error = (i, text.strip()[:160])
            self.cite(i, text)
        for k in plan.usage:
            pattern, rx, _ = self.usage[k]
            m = rx.search(text)
            if m:
                try:
                    value = float(m.group(1))
                except ValueError:
                    continue
                peak = log.usage_peaks[pattern]
                log.usage_peaks[pattern] = value if peak is None else max(peak, value)
        if refused or plan.engaged:
            self._ops(i, text, refused)

    def _ops(self, i: int, text: str, refused: bool) -> None:
        log = self.log
        for op, rx, name in self.ops:
            if log.engaged[op] is None and not refused and rx.search(text) and _ENGAGED_WORD.search(text):
                log.engaged[op] = i
                self.cite(i, text)
            if log.refused[op] is None and refused and name in text.lower():
                log.refused[op] = i
                self.cite(i, text)

    def _condition(self, i: int, text: str) -> None:
        log = self.log
        if len(log.copies) >= MAX_COPIES or self.copy_chars >= MAX_COPY_CHARS:
            self.copies_over += 1  # past the bound nothing is parsed: a hostile log cannot make it slow
            return
        copy, problem = _condition_line(i, text)
        if problem is not None:
            if len(log.problems) < MAX_PROBLEMS:
                log.problems.append(problem)
            else:
                self.problems_over += 1
        if copy is None:
            return
        log.copies.append(copy)
        self.copy_chars += len(text)
        self.cite(i, text)

    def _signal(self, i: int, text: str, candidates: tuple[int, ...]) -> None:
        for k in candidates:
            family, rx = SIGNAL_PATTERNS[k]
            m = rx.search(text)
            if not m:
                continue
            detail = m.group(1).lower() if family == "kernel_override" and m.groups() else None
            shown = text.strip()[:200]
            hit = family == "response_cache" and RESPONSE_CACHE_HIT.search(shown) is not None
            kind = (family, detail, hit)
            counts = self.log.signal_counts
            if kind not in counts and len(counts) >= MAX_SIGNAL_KINDS:
                self.signals_over += 1
                return
            counts[kind] = counts.get(kind, 0) + 1
            if counts[kind] <= MAX_SIGNALS:
                self.log.signals.append(LogSignal(family, i, shown, detail, hit))
                self.cite(i, text)
            return

    def _acceptance(self, i: int, text: str) -> None:
        log = self.log
        try:
            m = _EMBEDDED_COUNTS.search(text)
            if m:
                log.drafted += int(m.group(1))
                log.accepted += int(m.group(2))
            elif m := _VLLM_COUNTS.search(text):
                log.accepted += int(m.group(1))
                log.drafted += int(m.group(2))
            elif m := _SGLANG_RATE.search(text):
                rate = float(m.group(1))
                if math.isfinite(rate):
                    _add_exact(log.rate_partials, rate)
                else:
                    log.rate_infinite = True
                log.n_rates += 1
            else:
                return
        except ValueError as exc:  # "1.2.3", or more digits than int() takes
            log.acceptance_error = log.acceptance_error or exc
            return
        if log.acceptance_line is None:
            log.acceptance_line = i
            self.cite(i, text)

    def finish(self) -> None:
        log = self.log
        if self.problems_over:
            log.problems.append(f"{self.problems_over} more configuration line(s) do not parse (only the first "
                                f"{MAX_PROBLEMS} are described)")
        if self.copies_over:
            log.problems.append(f"{self.copies_over} configuration line(s) after the first {len(log.copies)} are not "
                                f"read (over the bound of {MAX_COPIES} lines, {MAX_COPY_CHARS:,} characters)")
        if self.signals_over:
            log.notes.append(f"{self.signals_over} mechanism line(s) of kinds beyond the first {MAX_SIGNAL_KINDS} "
                             "are not held (over the bound)")


def _condition_line(i: int, text: str) -> tuple[LogCopy | None, str | None]:
    """The copy of the conditions one line states, or why that line could not be read."""
    if len(text) > MAX_LINE_CHARS:
        return None, f"line {i} is {len(text)} characters, longer than {MAX_LINE_CHARS}"
    try:
        return _parse_line(i, text), None
    except (ValueError, SyntaxError, RecursionError, MemoryError) as exc:
        return None, f"line {i} does not parse ({type(exc).__name__}: {str(exc)[:80]})"


class _Splitter:
    """Cuts decoded text, fed in pieces, into the lines ``str.splitlines`` gives for the whole text, and
    stops at the first line over ``bound`` characters (kept cut at the bound, as the gates always saw
    it), hashing that line whole without holding it."""

    def __init__(self, scan: _LineScan, bound: int):
        self.scan, self.bound = scan, bound
        self.carry = ""
        self.skip_lf = False
        self.line_no = 0
        self.long: tuple[int, str, Any, int] | None = None
        """(line, first ``bound`` characters, sha256 so far, characters so far) of an over-long line."""
        self.done = False

    def feed(self, text: str, final: bool = False) -> None:
        if self.done:
            return
        if self.long is not None:
            self._long_tail(text, final)
            return
        if self.skip_lf and text:
            self.skip_lf = False
            text = text[1:] if text[0] == "\n" else text
        text = self.carry + text if self.carry else text
        parts = text.splitlines()
        if text and text[-1] in _LINE_BREAKS:
            self.carry, self.skip_lf = "", text[-1] == "\r"
        elif parts and not final:
            self.carry = parts.pop()
        else:
            self.carry = ""
        if self.bound and parts and max(map(len, parts)) > self.bound:
            k = next(k for k, p in enumerate(parts) if len(p) > self.bound)
            self._emit(parts[:k])
            line = parts[k]
            self._long_start(line)
            self._long_end()
            return
        self._emit(parts)
        if self.bound and len(self.carry) > self.bound:
            self._long_start(self.carry)
            self.carry = ""
            if final:
                self._long_end()

    def _emit(self, parts: list[str]) -> None:
        self.scan.lines(self.line_no + 1, parts)
        self.line_no += len(parts)

    def _long_start(self, text: str) -> None:
        self.long = (self.line_no + 1, text[:self.bound], hashlib.sha256(text.encode("utf-8")), len(text))

    def _long_tail(self, text: str, final: bool) -> None:
        line, head, digest, chars = self.long
        m = _BREAK.search(text)
        piece = text if m is None else text[:m.start()]
        digest.update(piece.encode("utf-8"))
        self.long = (line, head, digest, chars + len(piece))
        if m is not None or final:
            self._long_end()

    def _long_end(self) -> None:
        line, head, digest, chars = self.long
        self.scan.log.long_line = LongLine(line, chars, digest.hexdigest(), head[:_EXCERPT])
        self.scan.lines(line, [head])
        self.line_no = line
        self.done = True


def scan_server_log(chunks: Iterable[bytes], file: str, ops: Iterable[str] = (), bound: int = 0) -> ServerLog:
    """Read a server log once, from its bytes in pieces, into the record every gate consumes. ``ops``:
    the kernel ops whose engagement a claim declares; ``bound``: the longest line read (0: none). The
    bytes are hashed whole; lines are decoded as one UTF-8 text would be (invalid bytes replaced)."""
    log = ServerLog(file)
    scan = _LineScan(log, ops, usage_patterns())
    splitter = _Splitter(scan, bound)
    digest = hashlib.sha256()
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    for piece in chunks:
        digest.update(piece)
        if not splitter.done:
            splitter.feed(decoder.decode(piece))
    splitter.feed(decoder.decode(b"", final=True), final=True)
    log.sha256 = digest.hexdigest()
    log.n_lines = splitter.line_no
    scan.finish()
    return log
