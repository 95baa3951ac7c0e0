"""The auditor node: deterministic gates always; the LLM persona on top when one is configured.

The persona (skills/patch_auditor/skill.md) sees the deterministic findings, the re-derived numbers and
raw excerpts fenced as untrusted data. Its findings can only add or escalate: a deterministic FLAG/FAIL
is never lowered, and no text in the data can turn a FAIL into a PASS. An unavailable LLM or garbage
output marks the verdict degraded and the run goes on.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal, Protocol, TypeVar

from pydantic import BaseModel, Field, JsonValue

from perfwarden.auditor.codes import CATALOG
from perfwarden.auditor.findings import Findings, choose_action, verdict_label
from perfwarden.formats.records import EvidenceRef, Finding, Verdict
from perfwarden.formats.safe_read import TEXT_BYTES, open_regular
from perfwarden.skills import fence, load_skill, render_prompt

EXCERPT_LINES = 40
"""Raw lines shown to the persona per file (the tail of server logs, the first outputs)."""
EXCERPT_LINE_CHARS = 240
EXCERPT_CHARS = 3000
"""Characters of raw excerpts in one prompt, shared by the files shown (the newest log lines, the first
outputs kept): with the skill, the code catalog and the verdict, the prompt stays inside a small local
model's context (SmolLM2's 8,192 tokens, answer included; measured by benchmarks/brain_validity.py: a
27k-character prompt, 8,429 tokens, is refused without this bound)."""
NOT_CHECKED_SHOWN = 12
"""Entries of the verdict's not-checked list shown to the persona (the count of the rest is said)."""
EVIDENCE_FILE_CHARS = 200
"""Characters of a file name the persona's evidence keeps (its schema asks for 60; validation does not
enforce a schema-only bound, and an answer of 2 MiB must not become a 2 MiB name in the verdict)."""
EXCERPT_BYTES = 512 << 10
"""Bytes read per file for those lines: the end of a server log, the start of the outputs (a log at its
256 MiB bound is read once, by the audit, not a second time whole for 40 lines)."""


class PersonaUnanswered(Exception):
    """The persona's model gave no usable answer (unreachable, out of time or budget, or not the schema
    however often it was asked): the verdict is marked degraded and the run goes on."""


Answer = TypeVar("Answer", bound=BaseModel)


class PersonaModel(Protocol):
    """The one thing the persona asks of a model: an object matching ``schema``, or ``PersonaUnanswered``.
    The caller builds it around its own LLM client (``orchestrator/persona_model.py``), so the auditor runs
    no producer code to reach a model."""

    def complete_json(self, system: str, user: str, schema: type[Answer]) -> Answer: ...


# Bounds below are the schema's only (``json_schema_extra``): structured output stops a model's loop at
# them; validation is unchanged, and codes outside the catalog are still ignored by ``apply_persona``. The
# bounds keep the longest answer (about 700 characters) inside a small model's answer budget: with four
# findings of 160 characters SmolLM2 was cut at 384 tokens in both modes (benchmarks/brain_validity.py).


class PersonaEvidence(BaseModel):
    file: str = Field(json_schema_extra={"maxLength": 60})
    line: int | None = None


# pydantic types a schema's extra values as JsonValue, and a list[str] is no list[JsonValue] (lists are invariant).
_CATALOG_CODES: list[JsonValue] = [code for code in sorted(CATALOG)]


class PersonaFinding(BaseModel):
    code: str = Field(json_schema_extra={"enum": _CATALOG_CODES})
    severity: Literal["FLAG", "FAIL"]
    message: str = Field(json_schema_extra={"maxLength": 100})
    evidence: list[PersonaEvidence] = Field(default_factory=list, json_schema_extra={"maxItems": 1})


class PersonaAnswer(BaseModel):
    findings: list[PersonaFinding] = Field(default_factory=list, json_schema_extra={"maxItems": 2})
    notes: str = Field("", json_schema_extra={"maxLength": 100})


def raw_excerpts(run: Path, verdict: Verdict) -> str:
    """Tails of server logs and first outputs of the legs the verdict covers (all untrusted)."""
    shown: list[tuple[str, list[str]]] = []
    for leg in sorted(verdict.legs):
        for name in ("server.log", "outputs.jsonl"):
            path = Path(run) / "legs" / leg / name
            try:  # a link out of the run (a secret) must never reach the LLM; a FIFO must not block
                data, cut = _read_end(path, run, f"legs/{leg}/{name}", tail=name == "server.log")
            except OSError:
                continue
            lines = data.decode("utf-8", "replace").splitlines()
            if cut:  # the window starts (tail) or ends (head) inside a line: that partial line is not shown
                lines = lines[1:] if name == "server.log" else lines[:-1]
            chosen = lines[-EXCERPT_LINES:] if name == "server.log" else lines[:EXCERPT_LINES]
            shown.append((f"legs/{leg}/{name}", chosen))
    budget = EXCERPT_CHARS // max(len(shown), 1)
    parts = [f"--- {what} ---\n" + "\n".join(within(lines, budget, newest_last=what.endswith("server.log")))
             for what, lines in shown]
    return fence("\n".join(parts)) or "(none)"


def within(lines: list[str], budget: int, newest_last: bool) -> list[str]:
    """Lines (each cut to ``EXCERPT_LINE_CHARS``) that fit ``budget`` characters: a log's last ones, an
    output file's first ones."""
    out: list[str] = []
    used = 0
    for line in (reversed(lines) if newest_last else lines):
        line = line[:EXCERPT_LINE_CHARS]
        if used + len(line) + 1 > budget:
            break
        out.append(line)
        used += len(line) + 1
    return out[::-1] if newest_last else out


def _read_end(path: Path, run: Path, what: str, tail: bool) -> tuple[bytes, bool]:
    """The last (``tail``) or first ``EXCERPT_BYTES`` of a file under ``safe_read``'s rules, and whether
    the file holds more than that."""
    with open_regular(path, run, what, TEXT_BYTES) as handle:
        size = os.fstat(handle.fileno()).st_size
        if tail and size > EXCERPT_BYTES:
            handle.seek(size - EXCERPT_BYTES)
        return handle.read(EXCERPT_BYTES), size > EXCERPT_BYTES


def shortened(items: list[str], shown: int) -> list[str]:
    """The first ``shown`` items, and how many more there are."""
    return items[:shown] + ([f"... and {len(items) - shown} more"] if len(items) > shown else [])


def build_prompt(run: Path, claim_json: str, verdict: Verdict) -> str:
    findings = "\n".join(f"- {f.severity} {f.code}: {f.message}" for f in verdict.findings) or "- (none)"
    rederived = json.dumps({"legs": {leg: {m: round(s.median, 4) for m, s in ms.items()}
                                     for leg, ms in verdict.legs.items()},
                            "comparisons": [{"metric": c.metric, "delta_pct": round(c.delta_pct, 3),
                                             "p_value": c.p_value, "noise_band_pct": round(c.noise_band_pct, 3),
                                             "significant": c.significant} for c in verdict.comparisons],
                            "server_info_diff": verdict.server_info_diff, "lever_detected": verdict.lever_detected,
                            "not_checked": shortened(verdict.not_checked, NOT_CHECKED_SHOWN)}, indent=1, default=str)
    codes = "\n".join(f"- `{code}`: {text}" for code, text in CATALOG.items())
    return render_prompt(load_skill("patch_auditor"), codes=codes, scope=verdict.scope, claim_json=fence(claim_json),
                         verdict=verdict.verdict, action=verdict.action, findings=findings,
                         rederived=rederived, excerpts=raw_excerpts(run, verdict))


def apply_persona(run: Path, claim_json: str, verdict: Verdict, client: PersonaModel | None) -> Verdict:
    """Add the persona's findings (escalate only). Returns a new verdict; the input is not modified."""
    if client is None:
        return verdict
    prompt = build_prompt(run, claim_json, verdict)
    try:
        answer = client.complete_json("You are the patch-auditor. Follow the instructions in the user message.",
                                      prompt, PersonaAnswer)
    except PersonaUnanswered as exc:
        return verdict.model_copy(update={"degraded": True,
                                          "degraded_reasons": verdict.degraded_reasons + [f"LLM persona: {exc}"]})
    persona = Findings()  # at most MAX_LISTED per code, the rest one summary with their worst severity (design §3)
    ignored: list[str] = []
    for pf in answer.findings:
        if pf.code not in CATALOG:
            if len(ignored) < NOT_CHECKED_SHOWN:
                ignored.append(f"unknown code {pf.code[:60]!r}")
            continue
        persona.extend([Finding(code=pf.code, severity=pf.severity, message=pf.message[:300], gate="llm_persona",
                                source="llm", evidence=[EvidenceRef(file=e.file[:EVIDENCE_FILE_CHARS], line=e.line)
                                                        for e in pf.evidence[:3]])])
    added = persona.items
    findings = verdict.findings + added
    label = verdict_label(findings)
    action = choose_action(findings, label)
    disagreements = [f"persona raised {f.severity} {f.code}: {f.message}" for f in added
                     if f.severity != "INFO" and not any(d.code == f.code for d in verdict.findings)]
    extra = {"persona_notes": answer.notes[:2000], "persona_disagreements": disagreements,
             "persona_ignored": ignored}
    return verdict.model_copy(update={"findings": findings, "verdict": label, "action": action, **extra})
