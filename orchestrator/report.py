"""RUN/report.md and RUN/report.json: what was banked, the search path, headlines per lever class, the
bundle against the true baseline, and the verdict trail.

Every number in the report is copied from a verdict (re-derived by the auditor), never from a producer.
A step's delta is against the configuration it was measured against (the best one before it); the
bundle's delta is the whole search against the true no-overlay baseline. Whether a verdict was accepted
is the decision recorded with it in the run state (``auditor/acceptance.py``), read here, never re-derived.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from perfwarden.agents import integrator, search
from perfwarden.agents.base import Proposal
from perfwarden.auditor import acceptance
from perfwarden.formats import safe_write
from perfwarden.formats.objective import RunObjective
from perfwarden.formats.records import LeverClass, shown_verdict, write_json_atomic
from perfwarden.formats.verdict_parts import LegWitnesses
from perfwarden.formats.verdict_summary import Acceptance, VerdictSummary
from perfwarden.harness.target_config import TargetConfig
from perfwarden.orchestrator.crashpoints import crash_point
from perfwarden.orchestrator.render import md_cell as md
from perfwarden.orchestrator.report_record import (AttackVerdict, FinalKnob, Headline, LLMUsage, ProposalTrail,
                                                   RedTeam, Refusal, ReportObjective, ReportRecord, SearchHistoryRow,
                                                   SearchStep)
from perfwarden.orchestrator.review import search_plot
from perfwarden.orchestrator.state import RunState

CLASS_TITLE = {"A": "kernel / implementation wins (class A)", "B": "orthogonal serving levers (class B)"}


def _change_text(change: dict[str, Any]) -> str:
    """A change as markdown text: every knob, value, op and implementation escaped (they come from the
    run's state)."""
    parts = []
    for key, value in change.items():
        if key == "op_overrides" and isinstance(value, dict):
            parts += [f"{md(op)} -> {md(impl)}" for op, impl in value.items()]
        else:
            parts.append(f"{md(key)}={md(repr(value))}")
    return ", ".join(parts) or "the true baseline"


def _codes(codes: Iterable[object]) -> str:
    return ", ".join(md(c) for c in codes) or "no code"


def _pct(value: object, digits: int = 2) -> str | None:
    """A re-derived delta as ``+1.23%``; None when the state holds no number there."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:+.{digits}f}%"
    return None


def _num(value: object) -> str:
    """A headline figure for the verdict trail (``-`` when there is none)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:+.2f}"
    return "-"


def search_path(proposals: list[Proposal], verdicts: list[VerdictSummary]) -> list[SearchStep]:
    """Each change tried, in order: what it changed, against which configuration, and how it ended."""
    out = []
    for i, p in enumerate(proposals, 1):
        own = [v for v in verdicts if v.proposal == p.id and v.scope == "patch"]
        last = own[-1] if own else None
        change = {"op_overrides": {p.op: p.chosen or (p.candidates[0] if p.candidates else "?")}} \
            if p.kind == "kernel" else p.config
        out.append(SearchStep(step=i, change=p.id, kind=p.kind, set=change, against=p.against, status=p.status,
                              audits=len(own), verdict=last.shown if last else None,
                              verdict_file=last.path if last else None,
                              headline_delta_pct=last.headline_rederived if last else None,
                              claimed_delta_pct=last.headline_claimed if last else None,
                              codes=sorted(last.codes()) if last else []))
    return out


def build_report(state: RunState, base_config: TargetConfig,
                 llm_usage: LLMUsage | None = None, objective: RunObjective | None = None) -> ReportRecord:
    base = base_config.model_dump()
    marks = integrator.superseded_by(state.get("banked", []), base)
    banked = [b.model_copy(update={"superseded_by": marks.get(b.name)}) for b in state.get("banked", [])]
    verdicts = acceptance.recorded_trail(state.get("verdicts", []))
    proposals: list[Proposal] = state.get("proposals", [])
    bundle = next((v for v in reversed(verdicts) if v.scope == "bundle"), None)
    headlines: dict[LeverClass, list[Headline]] = {"A": [], "B": []}
    notes = {v.path: v.headline_note for v in verdicts}
    for b in banked:
        headlines[b.lever_class].append(Headline(change=b.name, against=b.against,
                                                 headline_delta_pct=b.headline_rederived_pct,
                                                 verdict=b.verdict, disclosed_regressions=b.disclosed_regressions,
                                                 superseded_by=b.superseded_by, headline_note=notes.get(b.verdict)))
    final = integrator.net_changes(banked, base)
    specs = base_config.specs()
    knobs = [FinalKnob(knob=k, baseline=getattr(base_config, k) if k in specs else None, final=v,
                       lever_class=specs[k].lever_class if k in specs else None,
                       lossless=specs[k].lossless if k in specs else None) for k, v in final.items()]
    refused = [v for v in verdicts if v.scope == "patch" and _decision(v).basis != "pass"]
    attacks = [v for v in verdicts if v.producer == "red_team"]
    # An attack passed when the auditor passed it, sealed or not. A FLAG that keeps a change downgraded
    # (a config win relabelled as a kernel, banked as class B at its re-derived size) caught the lie.
    passed = [v.claim for v in attacks if v.verdict == "PASS"]
    return ReportRecord(
        run_dir=state.get("run_dir"), objective=ReportObjective.of(objective or RunObjective()), banked=list(banked), rejected=list(state.get("rejected", [])),
        headlines=headlines, search_path=search_path(proposals, verdicts),
        search_history=[SearchHistoryRow(**dataclasses.asdict(r)) for r in search.history(proposals, verdicts)],
        final_configuration=knobs, bundle=bundle,
        refused_or_reclassified=[Refusal(claim=v.claim, change=v.lever, verdict=v.shown, action=v.action,
                                         codes=sorted(v.codes())) for v in refused],
        red_team=RedTeam(attacks=len(attacks), passed=passed,
                         verdicts=[AttackVerdict(claim=v.claim, verdict=v.shown, codes=sorted(v.codes()))
                                   for v in attacks]) if attacks else None,
        verdicts=list(verdicts), proposals=[ProposalTrail(id=p.id, status=p.status, history=p.history) for p in proposals],
        llm=llm_usage,
        notes=list(state.get("notes", [])))


def _decision(v: VerdictSummary) -> Acceptance:
    """The decision recorded with a verdict (``build_report`` fills every one from the run's trail)."""
    if v.acceptance is None:
        raise ValueError(f"verdict {v.path!r} reached the report without its acceptance decision")
    return v.acceptance


def _baseline_lines(verdicts: list[dict[str, Any]]) -> list[str]:
    """What the run decided on its baselines, when the last one did not simply pass: read from the decision
    recorded with it (a dumped ``Acceptance``; anything else reads as not accepted)."""
    baselines = [v for v in verdicts if v["scope"] == "baseline"]
    if not baselines:
        return []
    last = baselines[-1]
    decision = last.get("acceptance") or {}
    accepted, basis = decision.get("accepted") is True, decision.get("basis")
    if accepted and basis == "pass":
        return []
    codes = sorted({f["code"] for f in last["findings"] if f["severity"] != "INFO"})
    what = f"(last: {md(last['verdict'])} {md(last['action'])}, {_codes(codes)})"
    n = len(baselines)
    if accepted and basis == "noise_only":
        return [f"**No baseline passed the audit after {n} measurement(s)** {what}: the machine is noisier than the "
                "documented limit. The search went on; each step is judged on its own interleaved legs, whose noise "
                "band these baselines widen.", ""]
    if accepted and basis == "performance_only":
        return [f"**The baseline was accepted for speed only** {what}: its correctness cannot be judged, so the "
                "search went on and nothing it banks is shown correct.", ""]
    if accepted:
        return [f"**The baseline was accepted ({md(basis)})** {what}: {md(decision.get('reason'))}.", ""]
    return [f"**The run stopped: no baseline passed the audit after {n} measurement(s)** {what}: "
            f"{md(decision.get('reason'))}. Nothing can be compared against an unreliable baseline; see the notes "
            "below.", ""]


SEARCH_STOPS = "the search stops here"
"""Ends every note that says why the search ended before the producers ran out of changes (the graph's
budget and proposal bounds): the report and the terminal show it where nothing was tried."""


def _nothing_banked(report: dict[str, Any]) -> str:
    """Why the Banked section is empty: refused changes, or none tried (and, when the search stopped early,
    why)."""
    if report["search_path"]:
        return "Nothing was banked: no change passed the auditor."
    stop = next((note for note in report["notes"] if SEARCH_STOPS in note), None)
    return "Nothing was banked: no change was tried" + (f" ({md(stop)})." if stop else ".")


def render_markdown(report: dict[str, Any]) -> str:
    """report.md. Every string in it that came from the run (names, codes, paths, notes, knob values) goes
    through ``md`` (``render.md_cell``): the run's data cannot add a heading, link, HTML or control
    character to the report."""
    objective = report["objective"]
    metric = md(objective["metric"])
    lines = ["# perfwarden run report", "", f"Run: {md(report['run_dir'])}", "", _objective_line(objective), ""]
    lines += _baseline_lines(report["verdicts"])
    lines += ["## Banked", ""]
    if not report["banked"]:
        lines += [_nothing_banked(report), ""]
    for cls in ("A", "B"):
        lines += [f"### {CLASS_TITLE[cls]}", ""] + _banked_lines(report["headlines"][cls], metric) + [""]
    if report["bundle"]:
        b = report["bundle"]
        delta = _pct(b.get("headline_rederived"))
        stands = b.get("acceptance") or {}
        lines += ["## Bundle against the true baseline", "",
                  f"Verdict **{md(_shown(b))}** (action {md(b['action'])})" + (
                      f", {metric} {delta} for every banked change together." if delta else ".")
                  + (" The net change stands." if stands.get("accepted") is True else
                     f" **The net change does not stand**: {md(stands.get('reason'))}."), ""]
    if report["final_configuration"]:
        lines += ["Final configuration: what differs from the true baseline (a knob a later step set back to its "
                  "baseline value is not listed).", "", "| knob | baseline | final | class | lossless |", "|---|---|---|---|---|"]
        for k in report["final_configuration"]:
            lines.append(f"| {md(k['knob'])} | {md(repr(k['baseline']))} | {md(repr(k['final']))} | "
                         f"{md(k['lever_class'] or '-')} | {md(k['lossless'] if k['lossless'] is not None else '-')} |")
        lines.append("")
    lines += _search_lines(report["search_path"])
    svg = search_plot.history_svg(search_plot.clean_rows(report.get("search_history")))
    if svg:  # numbers only (search_plot draws nothing else): no text from the run reaches it
        lines += ["", "### Search history", "", svg]
    lines += ["", "## Refused or reclassified by the auditor", ""]
    if not report["refused_or_reclassified"]:
        lines.append("- none")
    for r in report["refused_or_reclassified"]:
        lines.append(f"- {md(r['claim'])}: **{md(r['verdict'])}** {md(r['action'])} — {_codes(r['codes'])}")
    if report["red_team"]:
        rt = report["red_team"]
        lines += ["", "## Red team", "",
                  f"{md(rt['attacks'])} attack claim(s); " + (
                      f"**{len(rt['passed'])} passed the auditor**: {', '.join(md(c) for c in rt['passed'])}"
                      if rt["passed"] else "every one was refused.")]
        lines += [f"- {md(v['claim'])}: {md(v['verdict'])} — {_codes(v['codes'])}" for v in rt["verdicts"]]
    lines += ["", "## Verdict trail", "",
              "The producer's claimed headline beside the auditor's re-derivation from raw (percent; a speedup "
              "factor for harness claims).", "",
              "| seq | scope | change | verdict | action | claimed | re-derived | run's decision | file |",
              "|---|---|---|---|---|---|---|---|---|"]
    for v in report["verdicts"]:
        lines.append(f"| {md(v['seq'])} | {md(v['scope'])} | {md(v['lever'] or '-')} | {md(_shown(v))} | "
                     f"{md(v['action'])} | {_num(v.get('headline_claimed'))} | {_num(v.get('headline_rederived'))} | "
                     f"{_decided(v.get('acceptance'))} | {md(v['path'])} |")
    lines += _witness_lines(report["verdicts"])
    fairer = [v for v in report["verdicts"] if v.get("headline_note")]
    if fairer:
        lines += ["", "Re-derived headlines that are not the delta against the claim's own baseline:", ""]
        lines += [f"- {md(v['seq'])} {md(v['lever'] or v['scope'])}: {md(v['headline_note'])}" for v in fairer]
    lines += ["", "## What each producer tried", ""]
    for p in report["proposals"]:
        lines.append(f"- {md(p['id'])} ({md(p['status'])})")
        lines += [f"  - {md(h)}" for h in p["history"]]
    if report["llm"]:
        u = report["llm"]
        lines += ["", "## LLM brains", "",
                  f"Model {md(u['model'])}: {md(u['calls'])} calls, {md(u['invalid_outputs'])} invalid outputs, "
                  f"{md(u['unavailable'])} unanswered asks; the deterministic policy answered instead "
                  f"{md(sum(u['fallbacks'].values()))} time(s)"
                  + (f" ({', '.join(f'{md(k)}: {md(n)}' for k, n in sorted(u['fallbacks'].items()))})."
                     if u["fallbacks"] else ".")]
    if report["notes"]:
        lines += ["", "## Notes", ""] + [f"- {md(n)}" for n in report["notes"]]
    return "\n".join(lines) + "\n"


def _decided(decision: object) -> str:
    """A dumped ``Acceptance`` as the verdict trail shows it: ``accepted (<basis>): <reason>``."""
    if not isinstance(decision, dict):
        return "not recorded"
    said = "accepted" if decision.get("accepted") is True else "not accepted"
    return f"{said} ({md(decision.get('basis'))}): {md(decision.get('reason'))}"


def _shown(v: dict[str, Any]) -> str:
    """A dumped ``VerdictSummary``'s verdict as every surface shows it (``PASS (unsealed)``)."""
    return shown_verdict(v["verdict"], v.get("seal", "unsealed"))


def _objective_line(objective: dict[str, Any]) -> str:
    """What the run optimized, as it sealed it at its start."""
    slo = objective.get("slo")
    limits = ", ".join(f"{md(k.removesuffix('_ms'))} <= {md(f'{v:g}')} ms" for k, v in slo.items()) if slo else ""
    return (f"Objective: **{md(objective['objective'])}** ({md(objective['metric'])}, "
            f"{'higher' if objective['higher_is_better'] else 'lower'} is better)"
            + (f" at the SLO {limits}" if limits else "") + ", fixed when the run started (objective.json, sealed): "
            "every step's headline states it and the search optimizes it.")


def _banked_lines(entries: list[dict[str, Any]], metric: str) -> list[str]:
    if not entries:
        return ["- none"]
    out = []
    for e in entries:
        delta = _pct(e["headline_delta_pct"])
        traded = ", ".join(f"{md(m)} {_pct(v, 1) or md(v)}" for m, v in e["disclosed_regressions"].items())
        superseded, note = e.get("superseded_by"), e.get("headline_note")
        out.append((f"- {md(e['change'])}: {metric} {delta} against {_change_text(e['against'])} "
                    f"(re-derived; verdict {md(e['verdict'])})" if delta else
                    f"- {md(e['change'])} (verdict {md(e['verdict'])})") + (f"; trade-off disclosed: {traded}"
                                                                           if traded else "")
                   + (f"; **superseded by {md(superseded)}**: nothing it set is in the final configuration"
                      if superseded else "")
                   + (f"; the figure banked is the conservative one: {md(note)}" if note else ""))
    return out


def _witness_lines(verdicts: list[dict[str, Any]]) -> list[str]:
    """What each verdict held each leg's reps against (its second witnesses), one row per leg."""
    rows = [(v, w) for v in verdicts for w in v.get("witnesses") or []]
    if not rows:
        return []
    lines = ["", "### What each verdict checked", "",
             "Each leg's reps held against a second account of the same requests: LoadGen's logs, the server's "
             "own counters (the embedded engine's, or vLLM's /metrics), the rep's CPU window; sealed: read "
             "from a seal chain that verified with the run's key.", "",
             "| seq | leg | held against |", "|---|---|---|"]
    for v, w in rows:
        held = LegWitnesses.model_validate(w).held()
        lines.append(f"| {md(v['seq'])} | {md(w['leg'])} | {md(' · '.join(held))} |")
    return lines


def _search_lines(steps: list[dict[str, Any]]) -> list[str]:
    lines = ["## Search path", "",
             "Each step changes the best banked configuration so far (one knob under coordinate descent, the "
             "knobs a study trial drew under the default sampler) and is banked only when its patch claim "
             "passes; its delta is against that configuration.", "",
             "| # | change | measured against | status | verdict | Δ claimed | Δ re-derived | codes |",
             "|---|---|---|---|---|---|---|---|"]
    for s in steps:
        lines.append(f"| {md(s['step'])} | {md(s['change'])} | {_change_text(s['against'])} | {md(s['status'])} | "
                     f"{md(s['verdict'] or '-')} | {_pct(s.get('claimed_delta_pct')) or '-'} | "
                     f"{_pct(s['headline_delta_pct']) or '-'} | {md(', '.join(s['codes']) or '-')} |")
    if not steps:
        lines.append("| - | no change was tried | | | | | | |")
    return lines


def write_report(run: Path, state: RunState, base_config: TargetConfig,
                 llm_usage: LLMUsage | None = None, objective: RunObjective | None = None) -> dict[str, Any]:
    """Write report.json (the typed, versioned ``ReportRecord``) and report.md rendered from it."""
    report = build_report(state, base_config, llm_usage, objective).model_dump(mode="json")
    write_json_atomic(Path(run) / "report.json", report, run)
    crash_point("report_json_written")
    safe_write.write_text(Path(run) / "report.md", render_markdown(report), run)
    return report
