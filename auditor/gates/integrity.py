"""Evidence cannot go missing or be edited unseen (the manifest and the seal chain). A pure gate.

A run the harness recorded carries its manifest and seal chain (``evidence.jsonl``, read and verified by
``auditor/manifest.py``). This gate decides, from that and from what is on disk now:

- **the seal holds** -- the chain links up and, with the key, every MAC verifies, it was made with
  this run's key and is as long as the harness left it (head beside the key); every file it lists
  still has the bytes it sealed. Anything else is ``EVIDENCE_TAMPERED`` (FAIL), citing the first
  broken link (chain line, or data file and line). A file the audit read as evidence that the chain
  never sealed was not written by the harness: tampered too.
- **nothing went missing** -- every listed file still exists; every leg the claim rests on has its
  ``leg.json``, ``server.log`` and ``bench_runs.jsonl``, every rep the harness sealed for it, and the
  contention sample the harness recorded with each rep. Else ``EVIDENCE_MISSING`` (FAIL).
- **a failed leg is never banked** -- a leg whose ``leg.json`` the harness ever sealed as failed stays
  failed, whatever its ``leg.json`` says now (``SERVER_CRASH``, FAIL).

Without a manifest (an imported sglang/vLLM file, a run recorded before sealing) the run is audited as
it is, its verdict's ``seal`` is ``unsealed`` (shown "PASS (unsealed)", never banked) and
``not_checked`` says why -- unless the key store or the operator holds
this run's key, in which case the chain was deleted (tampered). Without a key the chain cannot be
verified (the verdict says so), but the manifest's completeness checks still run.

A torn last line (chain or data) is what a killed writer leaves: the loader's ``EVIDENCE_CORRUPT`` FLAG
covers a data file's; a torn chain tail is reported the same way here. Neither is called tampering.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Literal

from perfwarden.auditor.findings import GateResult, finding
from perfwarden.auditor.manifest import ChainLink, FileState, KeyChoice, Manifest
from perfwarden.formats.records import EvidenceRef, Finding, Seal

GATE = "integrity"
CHAIN = "evidence.jsonl"
REQUIRED_LEG_FILES = ("leg.json", "server.log", "bench_runs.jsonl")
"""What every leg the harness recorded has (a leg that failed at start has no bench file: it is failed)."""
_LIST = 8


@dataclass(frozen=True)
class LegOnDisk:
    """A leg the claim rests on, as the auditor found it."""

    name: str
    directory: bool
    files: frozenset[str] = frozenset()
    """Which of ``REQUIRED_LEG_FILES`` exist."""
    reps: dict[int, bool] = field(default_factory=dict)
    """Usable reps the loader re-derived -> whether the rep line carries a contention sample."""


@dataclass(frozen=True)
class IntegrityEvidence:
    """Everything the gate decides from (gathered by ``audit._integrity``)."""

    key: KeyChoice
    manifest: Manifest | None
    files: dict[str, FileState]
    """Every file the manifest lists, as on disk now (``manifest.observe``)."""
    read: dict[str, str]
    """Files the audit read as harness evidence (relative path -> sha256); producer prose excluded."""
    legs: list[LegOnDisk]
    chain_error: str | None = None
    """The chain exists but could not be read at all."""


def _chain_ref(link: ChainLink | None) -> list[EvidenceRef]:
    if link is None:
        return [EvidenceRef(file=CHAIN)]
    return [EvidenceRef(file=CHAIN, line=link.line, sha256=link.sha256, excerpt=link.excerpt)]


def _fail(code: str, message: str, evidence: list[EvidenceRef], measured: object = None,
          threshold: object = None) -> Finding:
    return finding(code, "FAIL", message, measured=measured, threshold=threshold, evidence=evidence,
                   action="eject", gate=GATE)


def _names(items: list[str]) -> str:
    return ", ".join(repr(i) for i in items[:_LIST]) + (f", … ({len(items)} in all)" if len(items) > _LIST else "")


def check_integrity(ev: IntegrityEvidence) -> GateResult[Seal | Literal["unsealed"]]:
    m = ev.manifest
    if ev.chain_error is not None:
        return GateResult([_fail("EVIDENCE_MISSING", f"the seal chain cannot be read: {ev.chain_error}",
                                 [EvidenceRef(file=CHAIN)])])
    if m is None:
        if ev.key.bound:
            return GateResult([_fail("EVIDENCE_TAMPERED", f"this run was sealed (key from {ev.key.source}, seal "
                                     f"{ev.key.seal_id!r}) but its seal chain {CHAIN!r} is gone: the manifest was "
                                     "deleted, so nothing the run holds can be trusted", [EvidenceRef(file=CHAIN)],
                                     threshold="a sealed run keeps its chain")])
        return GateResult(value="unsealed", not_checked=[
            f"unsealed: no manifest ({CHAIN}) -- the files were not written through perfwarden's sealing harness (an "
            "imported bench file, or a run recorded before sealing); they are audited as they are, and evidence "
            "deleted or edited after writing cannot be detected"])
    findings: list[Finding] = []
    notes: list[str] = []
    findings += _seal(ev.key, m, notes)
    findings += _files(ev.files, m)
    findings += _unsealed_reads(ev.read, m)
    for leg in ev.legs:
        findings += _leg(leg, m, ev.files)
    return GateResult(findings, notes, seal_of(ev.key, m))


def seal_of(key: KeyChoice, m: Manifest) -> Seal:
    """``sealed`` only when a key verified every link of the chain; a chain read without a key proves
    nothing a forger could not write, so it is ``unsealed`` like no chain at all."""
    return "sealed" if key.key is not None and m.verified and m.broken is None else "unsealed"


def _seal(key: KeyChoice, m: Manifest, notes: list[str]) -> list[Finding]:
    out = []
    if key.key is None:
        notes.append(f"unsealed: the seal chain (seal {m.seal_id!r}) was not verified -- no key was given (--key) or "
                     "found in the key store" + (f" ({key.note})" if key.note else "") + "; the manifest's "
                     "completeness and the files' digests were checked against it, but a forged manifest cannot be "
                     "ruled out without the key")
    elif key.seal_id is not None and m.seal_id is not None and key.seal_id != m.seal_id:
        out.append(_fail("EVIDENCE_TAMPERED", f"the key ({key.source}) seals {key.seal_id!r} but the chain says it is "
                         f"{m.seal_id!r}: the chain was replaced (or the wrong key was given)", _chain_ref(None),
                         measured=m.seal_id, threshold=key.seal_id))
    if m.broken is not None:
        out.append(_fail("EVIDENCE_TAMPERED", f"the seal chain is broken: {m.broken.message}", _chain_ref(m.broken.link),
                         measured=m.broken.kind, threshold="every entry linked and verified"))
    if m.torn_tail is not None:
        out.append(finding("EVIDENCE_CORRUPT", "FLAG", f"the seal chain ends in an unfinished entry (line "
                           f"{m.torn_tail.line}): the harness was killed while sealing and the run was not resumed",
                           evidence=_chain_ref(m.torn_tail), action="remeasure", gate=GATE))
    return out


def _files(files: dict[str, FileState], m: Manifest) -> list[Finding]:
    out = []
    gone: dict[str, list[str]] = defaultdict(list)
    for rel, state in sorted(files.items()):
        sealed = m.files[rel]
        if not state.exists:
            gone[sealed.leg or ""].append(rel)
            continue
        if state.sha256 == sealed.sha256 and state.size == sealed.size:
            continue
        if state.torn_tail_only:
            continue  # sealed lines intact; the loader reports the torn fragment (EVIDENCE_CORRUPT, FLAG)
        d = state.difference
        evidence = _chain_ref(d.sealed.link if d is not None and d.sealed is not None else sealed.link)
        if d is not None and d.line is not None:
            evidence.insert(0, EvidenceRef(file=rel, line=d.line, sha256=d.line_sha256))
        else:
            evidence.insert(0, EvidenceRef(file=rel, sha256=state.sha256))
        message = d.message if d is not None else (
            f"{rel!r} is not the file the harness sealed (sha256 {str(state.sha256)[:12]}…, {state.size} bytes; sealed "
            f"{str(sealed.sha256)[:12]}…, {sealed.size} bytes)")
        out.append(_fail("EVIDENCE_TAMPERED", f"{message} (sealed at {CHAIN} line {sealed.link.line})", evidence,
                         measured=state.sha256, threshold=sealed.sha256))
    for leg, paths in sorted(gone.items()):
        where = f"leg {leg!r}" if leg else "the run"
        out.append(_fail("EVIDENCE_MISSING", f"{len(paths)} file(s) of {where} that the harness wrote and sealed are "
                         f"gone: {_names(paths)}", [EvidenceRef(file=p) for p in paths[:_LIST]],
                         measured=paths, threshold="every file the manifest lists"))
    return out


def _unsealed_reads(read: dict[str, str], m: Manifest) -> list[Finding]:
    stray = sorted(rel for rel in read if rel != CHAIN and (rel not in m.files or m.files[rel].gone))
    if not stray:
        return []
    return [_fail("EVIDENCE_TAMPERED", f"the audit read {len(stray)} evidence file(s) the harness never sealed in this "
                  f"sealed run: {_names(stray)} -- they were added after the harness wrote",
                  [EvidenceRef(file=rel, sha256=read[rel]) for rel in stray[:_LIST]], measured=stray,
                  threshold="every evidence file is in the manifest")]


def _leg(leg: LegOnDisk, m: Manifest, files: dict[str, FileState]) -> list[Finding]:
    out = []
    if leg.name not in m.legs:
        if leg.directory:
            out.append(_fail("EVIDENCE_TAMPERED", f"leg {leg.name!r} is not in the manifest: the harness never "
                             "recorded it in this run, so its files were put there afterwards",
                             [EvidenceRef(file=f"legs/{leg.name}")], threshold="a leg the harness recorded"))
        return out
    mark = m.failed_mark(leg.name)
    if mark is not None:
        out.append(_fail("SERVER_CRASH", f"the harness marked leg {leg.name!r} {mark.status!r} (sealed at {CHAIN} line "
                         f"{mark.link.line}): a failed leg is never banked, whatever its leg.json says now",
                         _chain_ref(mark.link), measured=mark.status, threshold="ok"))
    prefix = f"legs/{leg.name}/"
    reported = {rel for rel, state in files.items() if not state.exists}
    absent = [name for name in REQUIRED_LEG_FILES if name not in leg.files and prefix + name not in reported]
    if absent:
        out.append(_fail("EVIDENCE_MISSING", f"leg {leg.name!r} has no {_names(absent)}: the harness writes them for "
                         "every leg it records", [EvidenceRef(file=prefix + name) for name in absent],
                         measured=absent, threshold=list(REQUIRED_LEG_FILES)))
    bench = m.files.get(prefix + "bench_runs.jsonl")
    if bench is None or bench.whole or bench.gone or prefix + "bench_runs.jsonl" in reported:
        return out
    missing = [s for s in bench.lines if s.rep is not None and s.rep not in leg.reps]
    if missing:
        out.append(_fail("EVIDENCE_MISSING", f"leg {leg.name!r}: rep(s) {[s.rep for s in missing][:_LIST]!r} were sealed "
                         "by the harness but are not in its bench file (deleted, or no longer a usable line)",
                         _chain_ref(missing[0].link), measured=sorted(leg.reps),
                         threshold=[s.rep for s in bench.lines if s.rep is not None]))
    stripped = [s for s in bench.lines if s.contention and s.rep in leg.reps and not leg.reps[s.rep]]
    if stripped:
        out.append(_fail("EVIDENCE_MISSING", f"leg {leg.name!r}: rep(s) {[s.rep for s in stripped][:_LIST]!r} were sealed "
                         "with a contention sample that is gone from the bench line", _chain_ref(stripped[0].link),
                         measured=[s.rep for s in stripped], threshold="a contention sample per rep"))
    return out
