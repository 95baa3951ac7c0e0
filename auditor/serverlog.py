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
``MAX_*`` constants below -- never the log's lines (a re-scan per gate took 341 s for
250 MB). A piece with many such lines is read one gate's concern at a time, each pattern run once over
the piece's text (``batch_lines.py``), not once per line: a flood of millions of look-alike lines costs
little beyond what the bounds keep. Gates consume the :class:`ServerLog` record.
"""

from __future__ import annotations

import ast
import codecs
import hashlib
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Callable, Iterable, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from perfwarden.auditor import registry
from perfwarden.auditor.batch_lines import (BatchLines, Lines, bigrams, confined, holding_literal, line_starts,
                                            present_literals)
from perfwarden.auditor.log_splitter import LongLine, Splitter
from perfwarden.auditor.rederive import flatten_json
from perfwarden.formats.records import EvidenceRef
from perfwarden.formats.strict_json import check_depth, loads
from perfwarden.formats.vllm_log import NON_DEFAULT_ARGS, parse_args, speculative_fields

CopySource = Literal["effective_config", "server_args", "vllm_args", "engaged", "model_loaded", "serving"]

MAX_LINE_CHARS = 256 * 1024
"""Longest log line parsed as a configuration (a real ServerArgs line is a few KB)."""
PRESENT = "<engaged>"
"""Value of a knob the log says engaged without saying its value (an op override): it only has to exist."""

_EFFECTIVE = re.compile(r"\beffective_config (\{.*)$")
_SERVER_ARGS = re.compile(r"\bserver_args=(ServerArgs\(.*\))\s*$")
_ENGAGED = re.compile(r"\bENGAGED (\w+)(?:=(\S+))?(?:\s+op=['\"]([^'\"]+)['\"])?")
_ENGAGED_KNOB = {"op_override": "op_overrides"}
_QUOTED = r"('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
_MODEL_LOADED = re.compile(rf"\bmodel loaded name={_QUOTED} dir={_QUOTED} digest=(\S+)")
_SERVING = re.compile(rf"\bserving model={_QUOTED}")
IDENTITY_LINES = ("model loaded name=", "serving model=")
"""What the embedded server logs of the model it loaded and serves (``harness/embedded_server.py``): the
model's name, directory and weights digest, copies of server_info's identity."""


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
        obj = loads(m.group(1), what="effective_config")
        if not isinstance(obj, dict):
            raise ValueError("effective_config is not a JSON object")
        return LogCopy(i, "effective_config", flatten_json(obj))
    m = _SERVER_ARGS.search(text)
    if m:
        return LogCopy(i, "server_args", flatten_json(_server_args(m.group(1))))
    m = NON_DEFAULT_ARGS.search(text)
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
    """The literal entries of vLLM's ``non-default args`` dict (``formats/vllm_log.py``, the parser the
    harness reads the same line with), ``speculative_config`` under server_info's names."""
    out = parse_args(expr)
    out.update(speculative_fields(out.pop("speculative_config", None)))
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
SignalKind = tuple[Family, str | None, bool]
"""(family, op, hit): what mechanism lines are counted and held by."""

# (family, pattern) -- each pattern means the mechanism *ran*, not merely that a flag was printed.
SIGNAL_PATTERNS: list[tuple[Family, re.Pattern[str]]] = [
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
    _guard(("engaged", "prompt_lookup"), ("engaged", "speculative")), _guard("prompt_lookup rid="),
    _guard("accept len:"), _guard("specdecoding metrics:"), _guard('"avg_spec_accept_length"'),
    _guard("speculative_algorithm="),
    _guard(("engaged", "response", "cache")), _guard(("response", "cache", "hit")), _guard('"response_cache_hits"'),
    _guard(("engaged", "op_override", "op=")), _guard(("override", "engaged")), _guard('"op_override_calls"'),
    _guard("op_override final calls"),
]
"""One guard per ``SIGNAL_PATTERNS`` entry, in order (a pattern added there needs its guard here). Each
holds every literal its pattern needs, so a line that names one mechanism runs that mechanism's pattern
only: a log of millions of distinct ``ENGAGED`` lines costs one pattern a line, not four."""
_ACCEPT_GUARD = _guard("prompt_lookup rid=", "accepted: ", "accept rate:")
_SIGNAL_ANCHORS = {0: ("engaged",), 6: ("engaged",), 7: ("response",), 9: ("engaged",), 10: ("override",)}
"""For each ``re.IGNORECASE`` entry of ``SIGNAL_PATTERNS``: the literals every match of it starts with."""
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
    if text.isascii():
        return text.encode("ascii").lower()
    return (text.translate(_FOLD_SPECIAL) if _FOLD_SPECIAL_RX.search(text) else text).encode("utf-8").lower()


def fold_text(text: str) -> str:
    """``text`` lower-cased the way ``re.IGNORECASE`` compares it with an ASCII pattern, character for
    character (the four letters ``_FOLD_SPECIAL`` names first: ``str.lower`` alone would give ``İ`` two
    characters and leave the others): a pattern's :class:`_Anchored` twin matches here at the same
    positions where the pattern matches ``text``."""
    if text.isascii():
        return text.lower()
    return (text.translate(_FOLD_SPECIAL) if _FOLD_SPECIAL_RX.search(text) else text).lower()


class _Anchored:
    """An ``re.IGNORECASE`` pattern with an ASCII source, run on ``fold_text(line)``: its twin (the source
    lower-cased, matched case-sensitively) is tried only where a literal that every match starts with
    occurs (the search starts at the first). The same first match as ``pattern.search(line)``, without
    trying the pattern with case folding at every position of the line (a few microseconds a line: most of
    the cost of a log of millions of ``ENGAGED`` lines)."""

    def __init__(self, pattern: re.Pattern[str], anchors: tuple[str, ...]):
        if not pattern.flags & re.IGNORECASE or re.search(r"\\[A-Z]", pattern.pattern):
            raise ValueError(f"{pattern.pattern!r}: no twin (not IGNORECASE, or an upper-case escape)")
        self.twin = re.compile(pattern.pattern.lower(), pattern.flags & ~re.IGNORECASE)
        self.anchors = anchors

    def search(self, folded: str) -> re.Match[str] | None:
        # No match starts before the first anchor: the search begins there (``\b`` still sees the
        # character before it), and the timestamp and logger name in front are never tried.
        starts = [at for at in map(folded.find, self.anchors) if at >= 0]
        return self.twin.search(folded, min(starts)) if starts else None


_NOT_ENGAGED_FOLDED = _Anchored(NOT_ENGAGED_RX, ("not engaged", "engaged", "0 calls"))
_ENGAGED_SIGN = re.compile(r"engaged\s*[=:]")
"""The start every ``engaged = 0`` match of ``NOT_ENGAGED_RX`` has, on the folded line (a literal first:
``re`` finds it with a fast search, not a try at every position)."""


def refuses(folded: str) -> bool:
    """``NOT_ENGAGED_RX.search(line)``, decided on the folded line. Every match holds ``not engaged``,
    ``0 calls``, or ``engaged`` then blanks then ``=`` or ``:``: without one the line cannot match and
    the pattern is not run (an ``ENGAGED op_override op=...`` line, millions of times in a flood)."""
    if "not engaged" in folded or "0 calls" in folded or _ENGAGED_SIGN.search(folded):
        return _NOT_ENGAGED_FOLDED.search(folded) is not None
    return False


_ENGAGED_WORD_FOLDED = _Anchored(_ENGAGED_WORD, ("engaged",))
_SIGNALS_FOLDED: list[_Anchored | None] = [
    _Anchored(rx, _SIGNAL_ANCHORS[k]) if rx.flags & re.IGNORECASE else None for k, (_, rx) in enumerate(SIGNAL_PATTERNS)]


def _confined(pattern: re.Pattern[str]) -> re.Pattern[str]:
    out = confined(pattern)
    if out is None:  # every pattern a batch runs at once must have a form that stays in one line
        raise ValueError(f"{pattern.pattern!r} has no form confined to one line")
    return out


_SIGNALS_CONFINED = [(_confined(twin.twin), True) if twin is not None else (_confined(rx), False)
                     for twin, (_, rx) in zip(_SIGNALS_FOLDED, SIGNAL_PATTERNS)]
"""Each signal pattern as a batch runs it (on the folded text when it has a twin)."""
_CONDITION_WORDS = ("ENGAGED", "effective_config", "ServerArgs(", "non-default args", *IDENTITY_LINES)
"""The case-sensitive words a line must hold to be read as a configuration (both readings ask them:
one list, so a new configuration line is added to both)."""
_REFUSAL_SIGN = [_confined(re.compile(p)) for p in ("not engaged", "0 calls", _ENGAGED_SIGN.pattern)]
"""What :func:`refuses` asks of a folded line before it runs ``NOT_ENGAGED_RX``."""


def _aligned(found: tuple[Lines, list[re.Match[str]]], lines: Lines) -> tuple[Lines, list[re.Match[str]]]:
    """Which of ``lines`` (ascending; positions in it) ``found`` matched (the lines matched, ascending, and
    the first match in each), and those matches."""
    matched, matches = found
    if not len(matched):
        return np.zeros(0, dtype=np.int64), []
    at = np.minimum(np.searchsorted(matched, lines), len(matched) - 1)
    hit = np.flatnonzero(matched[at] == lines)
    return hit, [matches[a] for a in at[hit].tolist()]


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
        self.op_needles = [fold(op) if op.isascii() else b"" for op in dict.fromkeys(ops)]
        """Each op's name as ``fold`` writes it: a line without it can match neither of the op's patterns."""
        self.op_folded = [_Anchored(rx, (op.lower(),)) if op.isascii() else None for op, rx, _ in self.ops]
        self.usage = [(p, re.compile(p), (frozenset({fold(_literal_prefix(p))}),)) for p in usage]
        self.every_line = not all(_literal_prefix(p) for p, _, _ in self.usage)
        guards = [_NOT_ENGAGED_GUARD, _CONDITION_GUARD, *SIGNAL_GUARDS, _ACCEPT_GUARD, _FATAL_GUARD, _ERROR_GUARD,
                  *(g for _, _, g in self.usage)]
        self.needs = sorted({need for guard in guards for need in guard}, key=sorted)
        """Every set of literals that makes a line worth reading."""
        self.needles = sorted({n for need in self.needs for n in need})
        self.needle_pairs = [bigrams(n) for n in self.needles]
        if any(b"\n" in n for n in self.needles):  # holding_literal finds a literal within one line
            raise ValueError("a guard literal holds a line break")
        if len(self.needles) > 62:  # a line's literals are bits of one int64 (lines())
            raise ValueError(f"{len(self.needles)} guard literals: more than a line's 62-bit mask holds")
        self._plans: dict[frozenset[bytes], _Plan] = {}
        self.copies_over = self.problems_over = self.signals_over = self.copy_chars = 0
        log.usage_peaks = {p: None for p, _, _ in self.usage}
        log.engaged = {op: None for op, _, _ in self.ops}
        log.refused = dict(log.engaged)

    def cite(self, i: int, text: str) -> None:
        if i not in self.log.cited:
            self.log.cited[i] = (hashlib.sha256(text.encode("utf-8")).hexdigest(), text[:_EXCERPT])

    BULK_MIN = 64
    """Chosen lines from which a batch is read channel by channel, each hot pattern run once over the
    batch's text (fewer are read line by line: joining and indexing the batch costs more than they do)."""

    def lines(self, first: int, parts: list[str]) -> None:
        """Lines ``first``, ``first + 1``, ...: a literal absent from the whole batch rules its guards out
        at once; for the others, which lines hold which literals is found in C (one ``in`` per line and
        literal, packed into a bit mask per line), and only the lines that hold a guard are read, with
        the plan of their mask (a flood of millions of chosen lines costs no Python loop over literals)."""
        joined = "\n".join(parts)
        folded_text = fold(joined)
        folded = folded_text.split(b"\n")
        if len(folded) != len(parts):  # cannot happen (folding keeps line breaks); never misalign
            folded = [fold(p) for p in parts]
            folded_text = b"\n".join(folded)
        needles = present_literals(folded_text, self.needles, self.needle_pairs)
        masks = np.zeros(len(folded), dtype=np.int64)
        starts = line_starts(np.fromiter(map(len, folded), dtype=np.int64, count=len(folded)))
        for bit, needle in enumerate(needles):
            masks[holding_literal(folded_text, starts, needle)] |= 1 << bit
        wanted = np.zeros(len(folded), dtype=bool)
        if b"request done" in folded_text:
            self.log.streamed_done += sum(1 for _ in _STREAMED_DONE.finditer(folded_text))
        if b"=== perfwarden" in folded_text:
            self.log.starts += sum(1 for _ in _START.finditer(folded_text))
        for need in self.needs:
            if need <= set(needles):
                need_mask = sum(1 << needles.index(n) for n in need)
                wanted |= (masks & need_mask) == need_mask
        chosen = np.arange(len(parts)) if self.every_line else np.flatnonzero(wanted)
        shapes, shape_of = np.unique(masks[chosen], return_inverse=True)
        plans = [self.plan(frozenset(n for bit, n in enumerate(needles) if mask >> bit & 1))
                 for mask in shapes.tolist()]
        if len(chosen) < self.BULK_MIN:
            for k, shape in zip(chosen.tolist(), shape_of.tolist()):
                self.line(first + k, parts[k], plans[shape], folded[k])
            return
        self._bulk(first, BatchLines(parts, fold_text, joined), folded, chosen, shape_of, plans)

    def _bulk(self, first: int, batch: BatchLines, folded: list[bytes], chosen: Lines, shape_of: Lines,
              plans: list[_Plan]) -> None:
        """What :meth:`line` does to each chosen line (the plan of line ``chosen[n]`` is
        ``plans[shape_of[n]]``), done one channel at a time (each channel's state is its own, so only the
        order of lines within a channel matters, and it is kept): the literals that decide a channel are
        found once over the batch, and past a channel's bound a line only counts."""
        parts = batch.parts

        def having(flag: Callable[[_Plan], object]) -> npt.NDArray[np.bool_]:
            return np.array([bool(flag(p)) for p in plans], dtype=bool)[shape_of]

        self._bulk_conditions(first, batch, chosen[having(lambda p: p.condition)])
        maybe = np.intersect1d(chosen[having(lambda p: p.not_engaged)], batch.holding(_REFUSAL_SIGN, True))
        refused = np.array([j for j in maybe.tolist() if refuses(fold_text(parts[j]))], dtype=np.int64)
        is_refused = np.isin(chosen, refused)
        signalled = having(lambda p: p.signals) & ~is_refused
        self._bulk_signals(first, batch, chosen[signalled], shape_of[signalled], [p.signals for p in plans])
        for n in np.flatnonzero(having(lambda p: p.accept or p.fatal or p.error or p.usage)).tolist():
            self._others(first + int(chosen[n]), parts[int(chosen[n])], plans[int(shape_of[n])])
        self._bulk_ops(first, batch, folded, chosen[is_refused | having(lambda p: p.engaged)], refused)

    def _bulk_conditions(self, first: int, batch: BatchLines, lines: Lines) -> None:
        """:meth:`_condition` for each of ``lines`` that holds one of the words :meth:`line` asks for."""
        worded = np.zeros(len(batch.parts), dtype=bool)
        for word in _CONDITION_WORDS:
            worded |= holding_literal(batch.text, batch.starts, word)
        lines = lines[worded[lines]]
        for n, j in enumerate(lines.tolist()):
            if len(self.log.copies) >= MAX_COPIES or self.copy_chars >= MAX_COPY_CHARS:
                self.copies_over += len(lines) - n  # what _condition does to each line past the bound
                return
            self._condition(first + j, batch.parts[j])

    def _bulk_signals(self, first: int, batch: BatchLines, lines: Lines, shape_of: Lines,
                      candidates: list[tuple[int, ...]]) -> None:
        """Each line's first matching candidate (line ``lines[n]``'s are ``candidates[shape_of[n]]``, which
        ascend: the lowest index that matches), its kind told as :meth:`_signal` tells it, counted in line
        order (:meth:`_count_signals`)."""
        pending = np.ones(len(lines), dtype=bool)
        found: list[tuple[Lines, list[SignalKind]]] = []
        for k in sorted({k for ks in candidates for k in ks}):
            tried = np.flatnonzero(pending & np.array([k in ks for ks in candidates], dtype=bool)[shape_of])
            pattern, on_folded = _SIGNALS_CONFINED[k]
            at, matches = _aligned(batch.first_matches(pattern, on_folded), lines[tried])
            pending[tried[at]] = False
            found.append((lines[tried[at]], self._kinds(batch, k, lines[tried[at]], matches, on_folded)))
        if not found:
            return
        signalled = np.concatenate([f[0] for f in found])
        kinds = [kind for _, ks in found for kind in ks]
        if len(found) > 1:
            order = np.argsort(signalled, kind="stable")
            signalled, kinds = signalled[order], [kinds[n] for n in order.tolist()]
        self._count_signals(first, batch.parts, signalled, kinds)

    @staticmethod
    def _kinds(batch: BatchLines, k: int, lines: Lines, matches: list[re.Match[str]],
               on_folded: bool) -> list[SignalKind]:
        """The kind of each of ``lines``, matched by ``SIGNAL_PATTERNS[k]`` (``matches``: its first match in
        each, on the joined text or, ``on_folded``, its folded twin)."""
        family = SIGNAL_PATTERNS[k][0]
        if family == "kernel_override" and SIGNAL_PATTERNS[k][1].groups:
            # the op as the line writes it, lower-cased (an ASCII batch's folded text is exactly that)
            details: list[str | None] = (
                [m.group(1) for m in matches] if on_folded and batch.text.isascii()
                else [batch.text[m.start(1):m.end(1)].lower() for m in matches])
        else:
            details = [None] * len(matches)
        if family == "response_cache":
            hits = [RESPONSE_CACHE_HIT.search(batch.parts[j].strip()[:200]) is not None for j in lines.tolist()]
        else:
            hits = [False] * len(matches)
        return list(zip(repeat(family), details, hits))

    def _count_signals(self, first: int, parts: list[str], lines: Lines, kinds: list[SignalKind]) -> None:
        """:meth:`_count_signal` for each line in order, in C where the outcome is a count: new kinds are
        admitted in the order first seen while there is room, and only lines of a kind with held lines to
        spare are looked at one by one."""
        counts = self.log.signal_counts
        new = [kind for kind in dict.fromkeys(kinds) if kind not in counts]
        rejected = set(new[max(0, MAX_SIGNAL_KINDS - len(counts)):])
        in_batch = Counter(kinds)
        room = {kind: MAX_SIGNALS - counts.get(kind, 0) for kind in in_batch
                if kind not in rejected and counts.get(kind, 0) < MAX_SIGNALS}
        for kind, n in in_batch.items():
            if kind in rejected:
                self.signals_over += n
            else:
                counts[kind] = counts.get(kind, 0) + n
        if not room:
            return
        for n in np.flatnonzero(np.fromiter(map(room.__contains__, kinds), dtype=bool, count=len(kinds))).tolist():
            kind = kinds[n]
            if room[kind] > 0:
                room[kind] -= 1
                i, text = first + int(lines[n]), parts[int(lines[n])]
                self.log.signals.append(LogSignal(kind[0], i, text.strip()[:200], kind[1], kind[2]))
                self.cite(i, text)

    def _bulk_ops(self, first: int, batch: BatchLines, folded: list[bytes], lines: Lines, refused: Lines) -> None:
        """:meth:`_ops` for each op: its first engaged line and its first refused line, each read only up
        to the line that settles it (once both are known the op costs nothing)."""
        log, parts = self.log, batch.parts
        for (op, rx, name), needle, twin in zip(self.ops, self.op_needles, self.op_folded):
            if log.refused[op] is not None and log.engaged[op] is not None:
                continue
            candidates = [folded[j] for j in lines.tolist()]
            named_here = lines[np.fromiter(map(bytes.__contains__, candidates, repeat(needle)), dtype=bool,
                                           count=len(candidates))]
            for want_refused in (False, True):
                if (log.refused if want_refused else log.engaged)[op] is not None:
                    continue
                for j in named_here[np.isin(named_here, refused) == want_refused].tolist():
                    text = parts[j]
                    if want_refused:
                        hit = name in text.lower()
                    else:
                        folded_text = fold_text(text)
                        named = twin.search(folded_text) if twin is not None else rx.search(text)
                        hit = bool(named and _ENGAGED_WORD_FOLDED.search(folded_text))
                    if hit:
                        (log.refused if want_refused else log.engaged)[op] = first + j
                        self.cite(first + j, text)
                        break

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

    def line(self, i: int, text: str, plan: _Plan, folded: bytes) -> None:
        log = self.log
        if plan.condition and any(word in text for word in _CONDITION_WORDS):
            self._condition(i, text)
        folded_text = fold_text(text) if plan.not_engaged or plan.signals or plan.engaged else text
        refused = plan.not_engaged and refuses(folded_text)
        if plan.signals and not refused:
            self._signal(i, text, plan.signals, folded_text)
        self._others(i, text, plan)
        if refused or plan.engaged:
            self._ops(i, text, refused, folded, folded_text)

    def _others(self, i: int, text: str, plan: _Plan) -> None:
        """Acceptance counts, crash lines and usage peaks of one line."""
        log = self.log
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

    def _ops(self, i: int, text: str, refused: bool, folded: bytes, folded_text: str) -> None:
        log = self.log
        for (op, rx, name), needle, twin in zip(self.ops, self.op_needles, self.op_folded):
            if needle not in folded:
                continue
            named = twin.search(folded_text) if twin is not None else rx.search(text)
            if log.engaged[op] is None and not refused and named and _ENGAGED_WORD_FOLDED.search(folded_text):
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

    def _signal(self, i: int, text: str, candidates: tuple[int, ...], folded_text: str) -> None:
        for k in candidates:
            family, rx = SIGNAL_PATTERNS[k]
            twin = _SIGNALS_FOLDED[k]
            m = twin.search(folded_text) if twin is not None else rx.search(text)
            if not m:
                continue
            # the op as the line writes it (a twin matched the folded line at the same positions)
            detail = text[m.start(1):m.end(1)].lower() if family == "kernel_override" and m.re.groups else None
            hit = family == "response_cache" and RESPONSE_CACHE_HIT.search(text.strip()[:200]) is not None
            self._count_signal(i, text, family, detail, hit)
            return

    def _count_signal(self, i: int, text: str, family: Family, detail: str | None, hit: bool) -> None:
        kind = (family, detail, hit)
        counts = self.log.signal_counts
        seen = counts.get(kind)
        if seen is None and len(counts) >= MAX_SIGNAL_KINDS:
            self.signals_over += 1
            return
        counts[kind] = (seen or 0) + 1
        if counts[kind] <= MAX_SIGNALS:
            self.log.signals.append(LogSignal(family, i, text.strip()[:200], detail, hit))
            self.cite(i, text)

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


def scan_server_log(chunks: Iterable[bytes], file: str, ops: Iterable[str] = (), bound: int = 0) -> ServerLog:
    """Read a server log once, from its bytes in pieces, into the record every gate consumes. ``ops``:
    the kernel ops whose engagement a claim declares; ``bound``: the longest line read (0: none). The
    bytes are hashed whole; lines are decoded as one UTF-8 text would be (invalid bytes replaced)."""
    log = ServerLog(file)
    scan = _LineScan(log, ops, usage_patterns())
    splitter = Splitter(scan.lines, bound, _EXCERPT)
    digest = hashlib.sha256()
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    for piece in chunks:
        digest.update(piece)
        if not splitter.done:
            splitter.feed(decoder.decode(piece))
    splitter.feed(decoder.decode(b"", final=True), final=True)
    log.sha256 = digest.hexdigest()
    log.n_lines = splitter.line_no
    log.long_line = splitter.long_line
    scan.finish()
    return log
