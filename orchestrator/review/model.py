"""Load what a review shows: a run's verdict trail, the claims they answer, the legs' conditions.

Everything read here is untrusted (verdicts and claims are files anyone could have edited), so paths
named inside them are resolved strictly inside the run directory, and unreadable primary input (a
verdict file, or a claim that must be audited now) raises ``ReviewError`` for the CLI to turn into a
clear message and exit 3. Auxiliary input (a claim next to a saved verdict, ``report.json``, a leg's
``server_info.json``) that cannot be read becomes a visible note instead, so one bad side file never
hides the whole trail.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any, Iterator, NamedTuple

from pydantic import ValidationError

from perfwarden.agents.base import BankedChange
from perfwarden.auditor import acceptance, banking
from perfwarden.formats.jsonl import LineIssue, iter_raw_lines
from perfwarden.formats.objective import OBJECTIVE_FILE, RunObjective
from perfwarden.formats.records import Claim, RunManifest, Verdict, shown_verdict
from perfwarden.formats.safe_read import (MESSAGE_CHARS, RECORD_BYTES, VERDICT_BYTES, check_regular, exists,
                                          long_string, read_bytes)
from perfwarden.formats.strict_json import StrictJsonError, loads
from perfwarden.formats.verdict_summary import Acceptance
from perfwarden.orchestrator.report_record import FinalKnob, ReportError, ReportRecord, read_report

AUDITED_NOW = "(audited now, not saved)"
"""``VerdictEntry.path`` of a verdict the review produced itself because the run had none saved."""

KEEP = 500
"""Verdicts a review holds whole (every one of a trail up to this long). A longer trail is streamed: its
counts, gate table and banked results cover every verdict, and only the ``KEEP`` most severe ones
(every FAIL, then FLAG, then PASS; earliest first) are held for the detailed views, which say how many
were left out. Memory stays flat in the number of verdicts (20,000 took 1.5 GB held whole), and the
HTML page holds at most ``KEEP`` verdict cards (about 30 KB each)."""


class ReviewError(ValueError):
    """The input cannot be reviewed (missing run, unreadable verdict); the CLI exits 3."""


@dataclass
class VerdictEntry:
    """One verdict of the trail, with the claim it answers when that claim is readable."""

    verdict: Verdict
    path: str
    """Verdict file relative to the run directory, or ``AUDITED_NOW``."""
    claim: Claim | None = None
    claim_note: str | None = None
    """Why ``claim`` is None (missing or unreadable claim file)."""

    @property
    def key(self) -> str:
        """``<seq>-<scope>``: the name verdict and claim files share, used to pair and to anchor."""
        return f"{self.verdict.claim_seq:03d}-{self.verdict.scope}"

    @property
    def lever_class(self) -> str | None:
        """The auditor's detected class wins over the declared one: a downgraded headline banks the
        change under its true class."""
        return self.verdict.lever_detected or self.verdict.lever_declared

    @property
    def lever_name(self) -> str | None:
        return self.claim.lever.name if self.claim is not None and self.claim.lever is not None else None

    @property
    def headline_metric(self) -> str:
        return self.claim.headline.metric if self.claim is not None else "output_throughput"

    def role_legs(self) -> dict[str, str]:
        """role -> leg for the legs the verdict measured (baseline first), from the claim when it is
        readable, else by the auditor's insertion order (it loads the baseline first)."""
        measured = list(self.verdict.legs)
        roles: dict[str, str] = {}
        if self.claim is not None:
            refs = self.claim.legs
            for role, leg in (("baseline", refs.baseline), ("candidate", refs.candidate),
                              ("validation", refs.validation), ("caching_audit", refs.caching_audit)):
                if leg:
                    roles[role] = leg
            for i, leg in enumerate(refs.aa):
                roles[f"aa{i + 1}"] = leg
        elif measured:
            roles["baseline"] = measured[0]
            if len(measured) > 1:
                roles["candidate"] = measured[1]
        return roles

    def baseline_leg(self) -> str | None:
        return self.role_legs().get("baseline")


def is_banked(entry: VerdictEntry) -> bool:
    """Whether the verdict banks its change, by the auditor's one banking rule (``auditor/banking.py``)."""
    v = entry.verdict
    return banking.banks(v.verdict, banking.verdict_actions(v), v.seal, v.scope)


def banked_headline(entry: VerdictEntry) -> str:
    """The number that may be banked: the re-derived one (never the producer's)."""
    v, metric = entry.verdict, entry.headline_metric
    if v.headline_rederived is not None:
        return f"{metric} {v.headline_rederived:+.2f}% (re-derived)"
    base = entry.baseline_leg()
    stats = v.legs.get(base, {}).get(metric) if base else None
    if stats is not None:  # a baseline banks its level, not a delta
        return f"{metric} median {stats.median:.6g} over {stats.n} reps (re-derived)"
    return "no re-derived headline"


def decided_text(decision: Acceptance | None) -> str:
    """A recorded decision in a few words: ``accepted (noise_only)``; ``-`` when none is recorded."""
    if decision is None:
        return "-"
    return f"{'accepted' if decision.accepted else 'not accepted'} ({decision.basis})"


class TrailRow(NamedTuple):
    """One verdict of the trail as the summaries need it (a few hundred bytes, whatever the verdict)."""

    seq: int
    path: str
    key: str
    scope: str
    claim: str
    lever_name: str | None
    lever_class: str | None
    verdict: str
    action: str
    banked: bool
    headline: str
    seal: str = "unsealed"
    decision: Acceptance | None = None
    """The run's acceptance decision on this verdict, as report.json records it (None: no report, or one
    of a version that recorded none)."""

    @property
    def shown(self) -> str:
        """The verdict as every surface shows it (``PASS (unsealed)``)."""
        return shown_verdict(self.verdict, self.seal)

    @property
    def decided(self) -> str:
        """The run's decision in a few words (``-`` when none is recorded)."""
        return decided_text(self.decision)


_SEVERITY_RANK = {"FAIL": 0, "FLAG": 1}


@dataclass
class TrailSummary:
    """Counts over every verdict of a trail, gathered one verdict at a time."""

    rows: list[TrailRow] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    codes: set[str] = field(default_factory=set)
    scopes: set[str] = field(default_factory=set)
    gates: dict[tuple[str, str], tuple[tuple, Counter]] = field(default_factory=dict)
    """(gate, scope) -> (where first seen in seq order, severity counts)."""
    decisions: dict[str, Acceptance] = field(default_factory=dict)
    """Verdict file -> the run's decision on it, from report.json (read, never re-derived)."""
    disagreements: list[str] = field(default_factory=list)
    """Recorded decisions that accept a verdict whose own file the acceptance rule refuses."""

    @property
    def total(self) -> int:
        return len(self.rows)

    def add(self, entry: VerdictEntry) -> None:
        v = entry.verdict
        decision = self.decisions.get(entry.path)
        self.rows.append(TrailRow(v.claim_seq, entry.path, entry.key, v.scope, v.claim, entry.lever_name,
                                  entry.lever_class, v.verdict, v.action, is_banked(entry), banked_headline(entry),
                                  v.seal, decision))
        kinder = acceptance.kinder_than_rule(v, decision) if decision is not None else None
        if kinder is not None and len(self.disagreements) < KEEP:
            self.disagreements.append(f"report.json's decision on {entry.path!r} is not the auditor's: {kinder}")
        self.counts[v.verdict] += 1
        self.scopes.add(v.scope)
        for i, f in enumerate(v.findings):
            self.codes.add(f.code)
            where = (v.claim_seq, entry.path, i)
            first, counts = self.gates.get((f.gate or "-", v.scope), (where, Counter()))
            counts[f.severity] += 1
            self.gates[(f.gate or "-", v.scope)] = (min(first, where), counts)

    def finish(self) -> TrailSummary:
        self.rows.sort(key=lambda r: (r.seq, r.path))
        return self

    def gate_rows(self) -> list[tuple[str, str, Counter]]:
        """(gate, scope, severity counts) for every gate that raised a finding, in first-seen order."""
        return [(gate, scope, c) for (gate, scope), (_, c) in sorted(self.gates.items(), key=lambda kv: kv[1][0])]

    @classmethod
    def of(cls, entries: list[VerdictEntry]) -> TrailSummary:
        out = cls()
        for entry in entries:
            out.add(entry)
        return out.finish()


_CLAIMS_CACHED = 256
"""Claims remembered while a trail is read (verdicts that answer the same claim file read it once)."""


class _Kept:
    """Heap item: the heap's top is the verdict dropped first (least severe, latest)."""

    __slots__ = ("rank", "entry")

    def __init__(self, entry: VerdictEntry):
        v = entry.verdict
        self.rank, self.entry = (_SEVERITY_RANK.get(v.verdict, 2), v.claim_seq, entry.path), entry

    def __lt__(self, other: _Kept) -> bool:
        return self.rank > other.rank


@dataclass
class RunReview:
    """Everything one review renders, loaded once."""

    root: Path
    entries: list[VerdictEntry]
    """The verdicts held whole, in seq order: all of them, or the ``KEEP`` most severe of a longer trail."""
    manifest: RunManifest | None = None
    objective: RunObjective | None = None
    """What the run optimized, as it sealed it (``objective.json``; None: the run recorded none)."""
    audited_now: bool = False
    """True when the run had no saved verdicts and its claims were audited for this review."""
    report_banked: list[BankedChange] | None = None
    """``report.json``'s ``banked`` list, when the run has a report."""
    report_final: list[FinalKnob] | None = None
    """``report.json``'s final configuration: the knobs that differ from the true baseline."""
    notes: list[str] = field(default_factory=list)
    """Problems with auxiliary input, shown to the reader (never silently dropped)."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """Orchestrator step records from ``events.jsonl`` (node, duration, error), when present."""
    label: str = ""
    """How the input was named on the command line (for titles and comparisons)."""
    summary: TrailSummary = field(init=False)
    """Counts over the whole trail: ``whole_trail`` when given, else over ``entries``."""
    whole_trail: InitVar[TrailSummary | None] = None
    """The counts a loader gathered while it streamed a trail longer than ``entries``."""

    def __post_init__(self, whole_trail: TrailSummary | None) -> None:
        self.summary = whole_trail if whole_trail is not None else TrailSummary.of(self.entries)

    @property
    def omitted(self) -> int:
        """Verdicts of the trail left out of ``entries``."""
        return self.summary.total - len(self.entries)

    def all_entries(self) -> Iterator[VerdictEntry]:
        """Every verdict of the trail in seq order: the held ones as they are, the others read again
        one at a time (exports list every verdict; memory stays flat)."""
        if not self.omitted:
            yield from self.entries
            return
        held = {e.path: e for e in self.entries}
        claims: dict[str, tuple[Claim | None, str | None]] = {}
        for row in self.summary.rows:
            entry = held.get(row.path)
            if entry is None:
                verdict = read_verdict(self.root / row.path, self.root)
                entry = VerdictEntry(verdict, row.path, *_cached_claim(self.root, verdict.claim, claims))
            yield entry

    def decided(self, entry: VerdictEntry) -> str:
        """The run's recorded decision on a verdict, in a few words (``-``: the run recorded none)."""
        return decided_text(self.summary.decisions.get(entry.path))

    @property
    def run_id(self) -> str:
        return self.manifest.id if self.manifest is not None else self.root.name


def inside(root: Path, rel: str | None) -> Path | None:
    """``root / rel`` when it stays inside ``root``; None for absent or escaping paths (a verdict or
    claim is untrusted and must not make the review read ``/etc/passwd``)."""
    if not rel:
        return None
    try:
        base = root.resolve()
        path = (base / rel).resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    return path if path.is_relative_to(base) else None


def resolve_input(path: Path) -> tuple[Path, Path | None]:
    """(run directory, single verdict file or None) for a run directory or a verdict JSON file.

    A verdict file inside ``<run>/verdicts/`` keeps its run, so its evidence lines can be re-read."""
    path = Path(path)
    if path.is_dir():
        return path, None
    try:
        check_regular(path, None, "verdict")  # stat only: a FIFO or a device is refused, never opened
    except OSError as exc:
        raise ReviewError(f"{str(path)!r} is neither a run directory nor a verdict file ({exc})") from None
    root = path.parent.parent if path.parent.name == "verdicts" else path.parent
    return root, path


def read_verdict(path: Path, root: Path | None = None) -> Verdict:
    """Parse one verdict file (a regular file inside ``root`` when found in a run, at most
    ``VERDICT_BYTES``, no string over ``MESSAGE_CHARS``); any problem is a ``ReviewError`` naming it."""
    try:
        raw = read_bytes(path, root, limit=VERDICT_BYTES, what="verdict")
        obj = loads(raw, what=f"verdict {str(path)!r}")
    except OSError as exc:
        raise ReviewError(f"cannot read verdict {str(path)!r}: {exc}") from None
    except StrictJsonError as exc:
        raise ReviewError(str(exc)) from None
    # A review reads thousands of verdicts: the walk for long strings is skipped when it cannot find
    # one (no string is longer in characters than the whole file is in bytes).
    too_long = long_string(obj, MESSAGE_CHARS) if len(raw) > MESSAGE_CHARS else None
    if too_long is not None:
        raise ReviewError(f"verdict {str(path)!r}: the string at {too_long[0]!r} is {too_long[1]:,} characters, "
                          f"over the {MESSAGE_CHARS:,}-character bound for one field")
    try:
        return Verdict.model_validate(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(map(str, err["loc"])) or "the top level"
        raise ReviewError(f"verdict {str(path)!r} is invalid: {err['msg']} at {where!r}") from None


def read_claim(root: Path, rel: str) -> tuple[Claim | None, str | None]:
    """(claim, None) or (None, why not): a claim beside a saved verdict is context, not the input."""
    # lazy: scipy: a review reads saved verdicts without the auditor
    from perfwarden.auditor.audit import ClaimError, load_claim

    path = inside(root, rel)
    if path is None:
        return None, f"claim {rel!r} is outside the run directory; not read"
    if not exists(path):
        return None, f"claim {rel!r} is missing"
    try:
        return load_claim(path, root)[0], None
    except ClaimError as exc:
        return None, str(exc)


def _seq_order(entry: VerdictEntry) -> tuple[int, str]:
    return entry.verdict.claim_seq, entry.path


def _cached_claim(root: Path, rel: str, cache: dict[str, tuple[Claim | None, str | None]]
                  ) -> tuple[Claim | None, str | None]:
    """``read_claim`` once per claim file while a trail is read (at most ``_CLAIMS_CACHED`` remembered)."""
    if rel not in cache:
        if len(cache) >= _CLAIMS_CACHED:
            cache.clear()
        cache[rel] = read_claim(root, rel)
    return cache[rel]


def load_saved_verdicts(root: Path, keep: int | None = None, decisions: dict[str, Acceptance] | None = None
                        ) -> tuple[list[VerdictEntry], TrailSummary]:
    """Every ``verdicts/*.json`` (hidden temp files of atomic writes are skipped), read one at a time:
    the summary of all of them, and the ``keep`` (default ``KEEP``) most severe held whole, in seq order.
    ``decisions``: the run's recorded decision per verdict file (report.json), shown and checked per row."""
    keep = KEEP if keep is None else keep
    vdir = root / "verdicts"
    summary = TrailSummary(decisions=dict(decisions or {}))
    if not vdir.is_dir():
        return [], summary
    heap: list[_Kept] = []
    claims: dict[str, tuple[Claim | None, str | None]] = {}
    for path in sorted(p for p in vdir.glob("*.json") if not p.name.startswith(".")):
        verdict = read_verdict(path, root)
        claim, note = _cached_claim(root, verdict.claim, claims)
        entry = VerdictEntry(verdict, str(path.relative_to(root)), claim, note)
        summary.add(entry)
        heapq.heappush(heap, _Kept(entry))
        if len(heap) > keep:
            heapq.heappop(heap)
        del verdict, claim, entry
    return sorted((k.entry for k in heap), key=_seq_order), summary.finish()


def audit_claims_now(root: Path) -> list[VerdictEntry]:
    """Audit every ``claims/*.json`` of a run that has no saved verdict (nothing is written)."""
    # lazy: scipy: a review reads saved verdicts without the auditor
    from perfwarden.auditor.audit import ClaimError, audit_path

    entries = []
    for path in sorted(p for p in (root / "claims").glob("*.json") if not p.name.startswith(".")):
        try:
            verdict = audit_path(root, path, claim_root=root)
        except ClaimError as exc:
            raise ReviewError(str(exc)) from None
        claim, note = read_claim(root, verdict.claim)
        entries.append(VerdictEntry(verdict, AUDITED_NOW, claim, note))
    return sorted(entries, key=_seq_order)


def unanswered_claims(root: Path, rows: list[TrailRow]) -> list[str]:
    """Notes for claims that have no verdict yet (a trail with a gap must say so, not hide it)."""
    answered = {r.claim for r in rows}
    claims = sorted(p for p in (root / "claims").glob("*.json") if not p.name.startswith(".")) \
        if (root / "claims").is_dir() else []
    return [f"claim {str(p.relative_to(root))!r} has no verdict yet" for p in claims
            if str(p.relative_to(root)) not in answered]


def read_manifest(root: Path, notes: list[str]) -> RunManifest | None:
    path = root / "run.json"
    if not exists(path):
        return None
    try:
        return RunManifest.model_validate(loads(read_bytes(path, root, limit=RECORD_BYTES, what="run.json"),
                                                what="run.json"))
    except (OSError, StrictJsonError) as exc:
        notes.append(f"run.json is unreadable ({exc}); the run is named by its directory")
    except ValidationError as exc:
        notes.append(f"run.json is unreadable ({type(exc).__name__}); the run is named by its directory")
    return None


def read_objective(root: Path, notes: list[str]) -> RunObjective | None:
    """``objective.json``: what the run optimized and its goodput SLO (None when absent or unreadable, which
    the notes say: a review never guesses an SLO)."""
    path = root / OBJECTIVE_FILE
    if not exists(path):
        return None
    try:
        return RunObjective.model_validate_json(read_bytes(path, root, limit=RECORD_BYTES, what=OBJECTIVE_FILE))
    except OSError as exc:
        notes.append(f"{OBJECTIVE_FILE} is unreadable ({exc}); the run's objective is not shown")
    except (UnicodeDecodeError, ValidationError) as exc:
        notes.append(f"{OBJECTIVE_FILE} is not a run objective ({type(exc).__name__}); the run's objective is not shown")
    return None


def read_run_report(root: Path) -> ReportRecord | None:
    """``report.json`` (the typed, versioned ``ReportRecord``; an older report is migrated); None when the run
    has no report. A report that is not one this perfwarden reads (a newer version, a malformed one) is a
    ``ReviewError`` (exit 3): what the run says it banked is never guessed from whatever keys a file has."""
    path = root / "report.json"
    if not exists(path):
        return None
    try:
        return read_report(path, root)
    except ReportError as exc:
        raise ReviewError(str(exc)) from None


def recorded_decisions(report: ReportRecord | None) -> dict[str, Acceptance]:
    """Verdict file -> the run's decision on it, as report.json records it (a report of version 4 or
    older recorded none)."""
    if report is None:
        return {}
    summaries = [*report.verdicts, *([report.bundle] if report.bundle is not None else [])]
    return {v.path: v.acceptance for v in summaries if v.acceptance is not None}


def read_events(root: Path, notes: list[str], limit: int = 2000) -> list[dict[str, Any]]:
    """Orchestrator step records; the timeline shows at most ``limit`` of them (a long run's steps
    would otherwise dominate the page)."""
    path = root / "events.jsonl"
    if not exists(path):
        return []
    events: list[dict[str, Any]] = []
    bad = 0
    issues: list[LineIssue] = []
    try:
        for _, raw in iter_raw_lines(path, issues, root=root):
            if len(events) >= limit:
                notes.append(f"events.jsonl: only the first {limit} steps are shown")
                break
            try:
                obj = loads(raw, what="an events.jsonl line")
            except StrictJsonError:
                bad += 1
                continue
            if isinstance(obj, dict):
                events.append(obj)
            else:
                bad += 1
    except OSError as exc:
        notes.append(f"events.jsonl is unreadable: {exc}")
    bad += sum(issue.kind == "corrupt" for issue in issues)  # lines over the size bound
    if bad:
        notes.append(f"events.jsonl: {bad} line(s) are not JSON and are not shown")
    return events


def load_review(path: Path, audit_if_needed: bool = True) -> RunReview:
    """Load a run directory (all its verdicts) or one verdict file for review.

    A run with no saved verdict has its claims audited now, and the review says so."""
    root, single = resolve_input(Path(path))
    notes: list[str] = []
    audited_now = False
    summary = None
    report = read_run_report(root)
    decisions = recorded_decisions(report)
    if single is not None:
        verdict = read_verdict(single)  # named on the command line: any regular file, wherever it is
        claim, note = read_claim(root, verdict.claim)
        try:
            rel = str(single.resolve().relative_to(root.resolve()))
        except ValueError:
            rel = str(single)
        entries = [VerdictEntry(verdict, rel, claim, note)]
    else:
        entries, summary = load_saved_verdicts(root, decisions=decisions)
        if not entries and audit_if_needed and (root / "claims").is_dir():
            entries = audit_claims_now(root)
            summary, audited_now = TrailSummary.of(entries), bool(entries)
        if not entries:
            raise ReviewError(f"nothing to review in {str(root)!r}: no verdicts/*.json and no claims/*.json")
        notes += unanswered_claims(root, summary.rows)
        if summary.total > len(entries):
            notes.append(f"{summary.total:,} verdicts: the {len(entries):,} most severe (FAIL, then FLAG, then PASS; "
                         f"earliest first) are shown in detail and {summary.total - len(entries):,} are left out of "
                         f"the detail; the counts, gate table and banked results cover all {summary.total:,}")
    if summary is None:
        summary = TrailSummary(decisions=decisions)
        for entry in entries:
            summary.add(entry)
        summary.finish()
    notes += summary.disagreements
    return RunReview(root=root, entries=entries, manifest=read_manifest(root, notes),
                     objective=read_objective(root, notes), audited_now=audited_now,
                     report_banked=report.banked if report else None,
                     report_final=report.final_configuration if report else None, notes=notes,
                     events=read_events(root, notes), label=str(path), whole_trail=summary)


def read_server_info(root: Path, leg: str) -> tuple[dict[str, Any] | None, str | None]:
    """A leg's full ``server_info.json`` (what the server itself reported), or why it is absent."""
    path = inside(root, f"legs/{leg}/server_info.json")
    if path is None:
        return None, f"leg {leg!r} is outside the run directory"
    if not exists(path):
        return None, f"legs/{leg}/server_info.json is missing"
    try:
        obj = loads(read_bytes(path, root, limit=RECORD_BYTES, what=f"legs/{leg}/server_info.json"),
                    what=f"legs/{leg}/server_info.json")
    except (OSError, StrictJsonError) as exc:
        return None, f"legs/{leg}/server_info.json is unreadable: {exc}"
    if not isinstance(obj, dict):
        return None, f"legs/{leg}/server_info.json is not a JSON object"
    return obj, None
