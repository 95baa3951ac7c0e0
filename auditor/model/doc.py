"""Render the evidence model for people: ``docs/evidence-model.md`` is this module's output.

``python -m perfwarden.auditor.model.doc > docs/evidence-model.md`` regenerates it;
``tests/test_evidence_model.py`` fails when the committed page is not what the model says.
"""

from __future__ import annotations

import sys

from perfwarden.auditor.model.schema import EvidenceModel, FieldGroup, evidence_model

_ROLE_ORDER = ("identity", "condition", "measurement", "bookkeeping", "not_judged")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _group_rows(groups: tuple[FieldGroup, ...], default_writer: str, foreign: bool) -> list[str]:
    rows = []
    for group in sorted(groups, key=lambda g: _ROLE_ORDER.index(g.role)):
        fields = ", ".join(f"`{f}`" for f in group.fields)
        why = group.why + (f" *Proof:* {group.proof}" if group.proof else "")
        writer = group.writer or ("foreign" if foreign else default_writer)
        rows.append(f"| {group.role} | {writer} | {_cell(fields)} | {_cell(why)} |")
    return rows


def render(model: EvidenceModel) -> str:
    """The model as markdown: roles, writers, each record type's fields, the witnesses, the mechanisms."""
    out = ["# The evidence model", "",
           "Generated from `auditor/data/evidence_model.json` by `python -m perfwarden.auditor.model.doc`; do not "
           "edit by hand. The auditor applies this model (`auditor/model/`); design §4 says what each scope checks "
           "with it.", "", _cell(model.doc), "", "## Roles", ""]
    out += [f"- **{role}**: {text}" for role, text in model.roles.items()]
    out += ["", "## Writers", ""]
    out += [f"- **{writer}**: {text}" for writer, text in model.writers.items()]
    out += ["", "## Record types", ""]
    for name, record in model.records.items():
        out += [f"### `{name}`", "", f"File: {record.file}. Written by {record.written_by} (writer: {record.writer}"
                + (f"; schema `{record.schema_}`" if record.schema_ else "") + ").", "",
                "| role | writer | fields | why |", "|---|---|---|---|"]
        out += _group_rows(record.groups, record.writer, False)
        if record.foreign:
            out += ["", "What a foreign writer of the same record adds:", "",
                    "| role | writer | fields | why |", "|---|---|---|---|"]
            out += _group_rows(record.foreign, record.writer, True)
        out.append("")
    out += ["## Witnesses", "", "Each measurement is held against every witness below (a required witness the run "
            "lacks is missing evidence).", "", "| id | measurement | witness | relation | writers | required | why |",
            "|---|---|---|---|---|---|---|"]
    for w in model.witnesses:
        out.append(f"| `{w.id}` | {_cell(w.measurement)} | {_cell(w.witness)} | {w.relation} | "
                   f"{', '.join(w.writers)} | {_cell(w.required)} | {_cell(w.why)} |")
    out += ["", "## Mechanisms and the counters that show them", "",
            "What a server reports of its configuration is held against what its own counters show: a mechanism "
            "its counters show while its configuration says it is off is a misreport, and an undeclared lever.", "",
            "| mechanism | configuration | off when | counters | why |", "|---|---|---|---|---|"]
    for name, mech in model.mechanisms.items():
        counters = ", ".join(f"`{c.record}.{c.field}` ({c.shows})" for c in mech.counters)
        off = ", ".join(repr(v) for v in mech.off)
        out.append(f"| {name} | {', '.join(f'`{c}`' for c in mech.config)} | {_cell(off)} | {counters} | "
                   f"{_cell(mech.why)} |")
    out += ["", "## What each MLPerf compliance test requires of its own audit settings", "",
            "| test | setting | met when | source |", "|---|---|---|---|"]
    for test, spec in model.compliance_tests.items():
        for required in spec.settings:
            ways = " or ".join(
                f"`{r.name}` " + ("other than the reference's" if r.differs_from_reference else
                                  f"= {r.equals!r}" if r.equals is not None else
                                  f">= {r.at_least:g}" if r.at_least is not None else f"> {r.above:g}")
                for r in required.any_of)
            out.append(f"| {test} | {_cell(required.any_of[0].name)} | {_cell(ways)} | {_cell(required.source)} |")
    out += ["", "## What reading finds", "", "The loader only reads: it states what it met, and this table makes "
            "each kind a finding (`auditor/gates/reading.py`).", "", "| kind | code | severity | why |",
            "|---|---|---|---|"]
    for kind, rule in model.reading.items():
        out.append(f"| `{kind}` | {rule.code} | {rule.severity}{' (' + rule.action + ')' if rule.action else ''} "
                   f"| {_cell(rule.why)} |")
    return "\n".join(out) + "\n"


def main() -> None:
    sys.stdout.write(render(evidence_model()))


if __name__ == "__main__":
    main()
