"""MLPerf compliance corpora as backtest cases (``../shared/corpus/mlperf`` and ``mlperf-more``).

Each manifest case is audited blind (``auditor/mlperf.audit`` on its reference and compliance
directories), twice when the manifest names the test: with the test given (what a reviewer does: the
submission folder names it) and with the test detected from the logs. Its ``expected`` list is read only
afterwards. A case agrees when every audit's verdict is in ``expected`` (the official verdict, except
where the official script is demonstrably wrong). An exception inside the auditor is a ``crash``, which
agrees with nothing -- ``audit-mlperf`` promises ``"verdict": "error"`` for unreadable logs.

Layouts: cases live in ``<corpus>/cases/<id>/`` or directly in ``<corpus>/<id>/``; the manifest keys a
case by ``case_id`` or ``id``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfwarden.auditor import mlperf
from perfwarden.formats.safe_read import RECORD_BYTES, read_bytes
from perfwarden.formats.strict_json import loads
from perfwarden.verify.backtest import CaseResult


def _case_dirs(corpus: Path) -> dict[str, Path]:
    root = corpus / "cases" if (corpus / "cases").is_dir() else corpus
    return {p.name: p for p in sorted(root.iterdir()) if (p / "reference").is_dir() or (p / "compliance").is_dir()}


def _audit(case: Path, test: str | None) -> tuple[str, list[str], str]:
    try:
        verdict = mlperf.audit(case / "reference", case / "compliance", test)
    except mlperf.UnreadableLogs as unreadable:  # input error: what audit-mlperf reports as "verdict": "error"
        return "error", sorted({f.code for f in unreadable.findings}), unreadable.message
    except Exception as exc:  # noqa: BLE001 - a crash is scored, never raised
        return "crash", [], f"{type(exc).__name__}: {exc}"
    codes = sorted({f.code for f in verdict.findings if f.severity != "INFO"})
    return verdict.verdict, codes, verdict.mlperf.message if verdict.mlperf else ""


def code_problems(entry: dict[str, Any], codes: list[str]) -> list[str]:
    """A case may also name codes (at FLAG or FAIL) its verdict must and must not carry: the right
    verdict for the wrong reason does not agree (the project's own attack fixtures use this)."""
    problems = [f"missing code {c}" for c in entry.get("must_include", []) if c not in codes]
    return problems + [f"code {c} must not be raised" for c in entry.get("must_exclude", []) if c in codes]


def _corpus_manifest(corpus: Path) -> list[dict[str, Any]]:
    """The corpus's ``manifest.json``: its cases, read under the strict JSON rules."""
    entries = loads(read_bytes(corpus / "manifest.json", corpus, limit=RECORD_BYTES, what="corpus manifest"),
                    what="corpus manifest")
    return [entry for entry in entries if isinstance(entry, dict)] if isinstance(entries, list) else []


def _case_id(entry: dict[str, Any]) -> str:
    """The manifest's name of a case: ``case_id``, else ``id``. An entry naming neither is kept as ``"None"``
    (no case directory is named so): it is reported as a case whose directory is missing, never dropped."""
    return str(entry.get("case_id") or entry.get("id"))


def mlperf_results(corpus: Path, label: str | None = None) -> list[CaseResult]:
    """Score one corpus; ``label`` prefixes the case names (default: the corpus folder's name)."""
    corpus = Path(corpus)
    label = label or corpus.name
    dirs = _case_dirs(corpus)
    runs: list[tuple[str, str | None, tuple[str, list[str], str]]] = []
    manifest = {_case_id(c): c for c in _corpus_manifest(corpus)}
    for name, case in dirs.items():
        test = manifest[name].get("test") if name in manifest else None
        for given in ([test, None] if test else [None]):
            runs.append((name, given, _audit(case, given)))
    out = []
    for name, given, (verdict, codes, message) in runs:
        how = f"--test {given}" if given else "test detected"
        res = CaseResult(f"{label}/{name}", f"reference+compliance ({how})", verdict,
                         verdict.lower() if verdict in ("PASS", "FLAG", "FAIL") else verdict, codes, kind="mlperf")
        entry = manifest.get(name)
        if entry is None:
            res.problems.append("case not in manifest.json")
        else:
            expected = entry["expected"]
            res.expected_verdict = "|".join(expected)
            normalized = {e.lower() if e.lower() == "error" else e.upper() for e in expected}
            if verdict not in normalized:
                res.problems.append(f"verdict {verdict} not in expected {expected}" +
                                    (f" ({message[:200]})" if message else ""))
            res.problems += code_problems(entry, codes)
        out.append(res)
    for name in sorted(set(manifest) - set(dirs)):
        out.append(CaseResult(f"{label}/{name}", "reference+compliance", "missing", "missing", [], kind="mlperf",
                              problems=["case directory missing"]))
    return out
