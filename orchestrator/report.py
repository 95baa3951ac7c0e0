"""RUN/report.md and RUN/report.json: what was banked, headlines per lever class, the verdict trail.

Every number in the report is copied from a verdict (re-derived by the auditor), never from a producer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfwarden.harness.records import write_json_atomic
from perfwarden.orchestrator.crashpoints import crash_point

CLASS_TITLE = {"A": "kernel / implementation wins (class A)", "B": "orthogonal serving levers (class B)"}


def build_report(state: dict[str, Any]) -> dict[str, Any]:
    banked = state.get("banked", [])
    verdicts = state.get("verdicts", [])
    bundle = next((v for v in reversed(verdicts) if v["scope"] == "bundle"), None)
    headlines: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    for b in banked:
        headlines[b["lever_class"]].append({"change": b["name"], "output_throughput_delta_pct": b["headline_rederived_pct"],
                                            "verdict": b["verdict"],
                                            "disclosed_regressions": b.get("disclosed_regressions") or {}})
    refused = [v for v in verdicts if v["scope"] == "patch" and v["verdict"] != "PASS"]
    return {
        "run_dir": state.get("run_dir"),
        "banked": banked,
        "rejected": state.get("rejected", []),
        "headlines": headlines,
        "bundle": bundle,
        "refused_or_reclassified": [{"claim": v["claim"], "verdict": v["verdict"], "action": v["action"],
                                     "codes": sorted({f["code"] for f in v["findings"] if f["severity"] != "INFO"})}
                                    for v in refused],
        "verdicts": verdicts,
        "proposals": [{"id": p["id"], "status": p["status"], "history": p["history"]} for p in state.get("proposals", [])],
        "notes": state.get("notes", []),
    }


def render_markdown(report: dict[str, Any]) -> str:
    lines = ["# perfwarden run report", "", f"Run: `{report['run_dir']}`", ""]
    baselines = [v for v in report["verdicts"] if v["scope"] == "baseline"]
    if baselines and all(v["verdict"] != "PASS" for v in baselines):
        lines += [f"**The run stopped: no baseline passed the audit after {len(baselines)} measurement(s)** "
                  f"(last: {baselines[-1]['verdict']} `{baselines[-1]['action']}`). Nothing can be compared "
                  "against an unreliable baseline.", ""]
    lines += ["## Banked", ""]
    if not report["banked"]:
        lines += ["Nothing was banked: no change passed the auditor.", ""]
    for cls in ("A", "B"):
        entries = report["headlines"][cls]
        lines += [f"### {CLASS_TITLE[cls]}", ""]
        if not entries:
            lines.append("- none")
        for e in entries:
            delta = e["output_throughput_delta_pct"]
            traded = ", ".join(f"{m} {v:+.1f}%" for m, v in e["disclosed_regressions"].items())
            lines.append((f"- `{e['change']}`: output throughput {delta:+.2f}% (re-derived; verdict `{e['verdict']}`)"
                          if delta is not None else f"- `{e['change']}` (verdict `{e['verdict']}`)")
                         + (f"; trade-off disclosed: {traded}" if traded else ""))
        lines.append("")
    if report["bundle"]:
        b = report["bundle"]
        delta = b.get("headline_rederived")
        lines += ["## Bundle against the true baseline", "",
                  f"Verdict **{b['verdict']}** (action `{b['action']}`)" + (
                      f", output throughput {delta:+.2f}%." if delta is not None else "."), ""]
    lines += ["## Refused or reclassified by the auditor", ""]
    if not report["refused_or_reclassified"]:
        lines.append("- none")
    for r in report["refused_or_reclassified"]:
        lines.append(f"- `{r['claim']}`: **{r['verdict']}** `{r['action']}` — {', '.join(r['codes']) or 'no code'}")
    lines += ["", "## Verdict trail", "", "| seq | scope | verdict | action | file |", "|---|---|---|---|---|"]
    for v in report["verdicts"]:
        lines.append(f"| {v['seq']} | {v['scope']} | {v['verdict']} | {v['action']} | `{v['path']}` |")
    lines += ["", "## What each producer tried", ""]
    for p in report["proposals"]:
        lines.append(f"- `{p['id']}` ({p['status']})")
        lines += [f"  - {h}" for h in p["history"]]
    if report["notes"]:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in report["notes"]]
    return "\n".join(lines) + "\n"


def write_report(run: Path, state: dict[str, Any]) -> dict[str, Any]:
    report = build_report(state)
    write_json_atomic(Path(run) / "report.json", report)
    crash_point("report_json_written")
    tmp = Path(run) / ".report.md.tmp"
    tmp.write_text(render_markdown(report), encoding="utf-8")
    tmp.replace(Path(run) / "report.md")
    return report
