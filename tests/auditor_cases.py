"""Hand-built run directories for auditor tests: one clean A/B run plus small edits per fault.

The builder lives in ``perfwarden.orchestrator.synth`` (the proof corpus uses it too). Each test changes one
thing and states the verdict the design demands.
"""

from __future__ import annotations

from pathlib import Path

from perfwarden.auditor.audit import audit_path
from perfwarden.formats.records import Verdict
from perfwarden.orchestrator.synth import BASE_INFO, BASE_TPUT, CAND_TPUT, build_ab_run, reps  # noqa: F401

build = build_ab_run


def audit(run: Path, claim: Path) -> Verdict:
    return audit_path(run, claim)


def codes(verdict: Verdict, severity: str | None = None) -> set[str]:
    return {f.code for f in verdict.findings if f.severity != "INFO" and (severity is None or f.severity == severity)}
