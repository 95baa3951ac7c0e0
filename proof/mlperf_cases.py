"""The shared MLPerf compliance corpus as backtest cases.

Each manifest case is audited blind (``agents/auditor/mlperf.audit`` on its reference and compliance
directories); its ``expected`` list is read only afterwards. A case agrees when the verdict is in
``expected`` (the official verdict, except where the official script is demonstrably wrong).
"""

from __future__ import annotations

import json
from pathlib import Path

from perfwarden.agents.auditor import mlperf
from perfwarden.proof.backtest import CaseResult


def mlperf_results(corpus: Path) -> list[CaseResult]:
    corpus = Path(corpus)
    cases = sorted(p for p in (corpus / "cases").iterdir() if p.is_dir())
    audited = []
    for case in cases:
        result = mlperf.audit(case / "reference", case / "compliance")
        codes = sorted({f.code for f in result.findings if f.severity != "INFO"})
        audited.append(CaseResult(f"mlperf/{case.name}", "reference+compliance", result.verdict,
                                  result.verdict.lower() if result.verdict != "error" else "error", codes,
                                  kind="mlperf"))
    manifest = {c["case_id"]: c for c in json.loads((corpus / "manifest.json").read_text("utf-8"))}
    for res in audited:
        entry = manifest.get(res.fixture.split("/", 1)[1])
        if entry is None:
            res.problems.append("case not in manifest.json")
            continue
        expected = entry["expected"]
        res.expected_verdict = expected[0] if len(expected) == 1 else "|".join(expected)
        if res.verdict not in expected:
            res.problems.append(f"verdict {res.verdict} not in expected {expected}")
    return audited
