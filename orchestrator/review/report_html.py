"""``perfwarden review --html``: one self-contained HTML file (inline CSS, JS and SVG; no fetch).

Safety: every value from a run (verdicts, claims, server_info, log excerpts, generated text) is
untrusted and goes through ``esc`` before it reaches the markup; none is ever placed inside the
script. Defence in depth: the page's Content-Security-Policy allows no network source at all
(``default-src 'none'``) and runs only the one inline script whose sha256 it names, so even markup
that slipped through escaping could neither execute nor fetch anything.

The filters are plain JS over ``data-*`` attributes written here: an element with ``data-fi`` is
shown when it passes every filter control whose attribute it carries.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import statistics
from typing import Any, Iterable

from perfwarden.auditor import banking
from perfwarden.auditor.rederive import METRICS
from perfwarden.formats.records import Verdict
from perfwarden.orchestrator.render import fmt_value
from perfwarden.orchestrator.review import search_plot
from perfwarden.orchestrator.review.compare import PLOT_METRICS, Comparison, Pair, metric_rows
from perfwarden.orchestrator.review.evidence import STATUS_TEXT, LineReader
from perfwarden.orchestrator.review.model import KEEP, RunReview, VerdictEntry, is_banked, read_server_info
from perfwarden.orchestrator.review.summary import LEVER_CLASSES, SEVERITIES, banked, fmt_pct, gates_of
from perfwarden.orchestrator.review.svg import Reference, Row, TimelineNode, esc, strip_plot, timeline

MAX_EVIDENCE_SHOWN = 8
"""Evidence lines quoted per finding (the rest are counted): keeps a pathological verdict small."""

CSS = """
:root{--pass:#2e7d32;--flag:#c77700;--fail:#c62828;--info:#8a8a8a;--ink:#1d232a;--mute:#5d6670;--line:#d8dde3}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--ink);margin:0;background:#f6f7f9}
header.top{background:#1d232a;color:#fff;padding:14px 22px}
header.top h1{font-size:19px;margin:0 0 4px}
header.top .sub{color:#c9d1d9;font-size:13px}
main{padding:14px 22px;max-width:1280px}
section.block{background:#fff;border:1px solid var(--line);border-radius:8px;padding:12px 16px;margin:0 0 14px}
h2{font-size:16px;margin:2px 0 10px}
h3{font-size:14px;margin:14px 0 6px;color:#333}
table{border-collapse:collapse;font-size:13px;margin:4px 0}
th,td{border-bottom:1px solid var(--line);padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f0f2f5;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
pre{white-space:pre-wrap;word-break:break-all;margin:4px 0;background:#f6f8fa;border:1px solid var(--line);
 border-radius:4px;padding:6px 8px}
.badge{display:inline-block;min-width:42px;text-align:center;border-radius:4px;padding:1px 6px;color:#fff;
 font-weight:700;font-size:12px}
.badge.PASS{background:var(--pass)}.badge.FLAG{background:var(--flag)}.badge.FAIL{background:var(--fail)}
.badge.INFO{background:var(--info)}.badge.other{background:#555}
.sev-FAIL{border-left:4px solid var(--fail)}.sev-FLAG{border-left:4px solid var(--flag)}
.sev-INFO{border-left:4px solid var(--info)}
.finding{padding:6px 10px;margin:8px 0;background:#fcfcfd}
.finding .msg{margin:2px 0 4px}
.kv{color:var(--mute)}
.evidence{margin:6px 0 6px 0}
.evidence .loc{font-weight:600}
.st-verified{color:var(--pass)}.st-changed{color:var(--fail);font-weight:700}.st-other{color:var(--mute)}
.note{color:#8a5a00;background:#fff6e0;border:1px solid #f1d28a;border-radius:4px;padding:4px 8px;margin:4px 0}
.problem{color:var(--fail);font-weight:600}
.card{scroll-margin-top:70px}
.card > summary{cursor:pointer;font-size:15px;padding:2px 0}
.card[open] > summary{margin-bottom:6px}
.grid{display:flex;flex-wrap:wrap;gap:10px 28px}
.plots{display:flex;flex-wrap:wrap;gap:8px}
svg.plot{background:#fff;border:1px solid var(--line);border-radius:4px}
svg .ptitle{font-size:12px;font-weight:600;fill:#333}
svg .rlabel,svg .tlabel,svg .psub{font-size:11px;fill:#444}
svg .band{fill:#7fa8d9;fill-opacity:.22}
svg .center{stroke:#1f5fa8;stroke-dasharray:4 3;stroke-width:1.2}
svg .reference{stroke:#b8461b;stroke-dasharray:1 3;stroke-width:2}
svg .band-ref{fill:#b8461b;fill-opacity:.12}
svg .median{stroke-width:3}
svg .axis,svg .tick{stroke:#888}
svg .dot{fill-opacity:.8}
svg.timeline{display:block}
svg .tl-label{font-size:12px;font-weight:600;fill:#222}
svg .tl-verdict{font-size:11px;fill:#333}
svg .tl-gtext{font-size:10px;fill:#fff}
.scroll{overflow-x:auto}
tr.differ td{background:#fff0f0}
tr.differ td.key{font-weight:700}
.mark{color:var(--fail);font-weight:700}
#filters{position:sticky;top:0;z-index:5;background:#fff;border-bottom:1px solid var(--line);padding:8px 22px;
 display:flex;flex-wrap:wrap;gap:6px 18px;align-items:center}
#filters label{white-space:nowrap}
#filters .count{color:var(--mute);margin-left:auto}
.filtered-out{display:none !important}
.tl-node.filtered-out{display:inline !important;opacity:.15}
.pair{border-top:1px solid var(--line);padding-top:4px;margin-top:10px}
.up{color:var(--pass)}.down{color:var(--fail)}
"""

SCRIPT = """
(function () {
  "use strict";
  var controls = Array.prototype.slice.call(document.querySelectorAll("[data-filter-attr]"));
  function wanted() {
    var tests = {};
    controls.forEach(function (c) {
      var attr = c.getAttribute("data-filter-attr");
      if (c.tagName === "SELECT") {
        if (c.value !== "") { tests[attr] = {any: c.value}; }
      } else {
        if (!tests[attr]) { tests[attr] = {set: []}; }
        if (c.checked) { tests[attr].set.push(c.value); }
      }
    });
    return tests;
  }
  function passes(el, tests) {
    for (var attr in tests) {
      var v = el.getAttribute("data-" + attr);
      if (v === null) { continue; }
      var t = tests[attr];
      if (t.set && t.set.indexOf(v) < 0) { return false; }
      if (t.any !== undefined && (" " + v + " ").indexOf(" " + t.any + " ") < 0) { return false; }
    }
    return true;
  }
  function apply() {
    var tests = wanted();
    var shown = 0, total = 0;
    document.querySelectorAll("[data-fi]").forEach(function (el) {
      var ok = passes(el, tests);
      el.classList.toggle("filtered-out", !ok);
      if (el.getAttribute("data-fi") === "card") { total += 1; if (ok) { shown += 1; } }
    });
    var code = tests.codes ? tests.codes.any : undefined;
    document.querySelectorAll(".finding[data-code]").forEach(function (el) {
      el.classList.toggle("filtered-out", code !== undefined && el.getAttribute("data-code") !== code);
    });
    var count = document.getElementById("f-count");
    if (count) { count.textContent = shown + " of " + total + " shown"; }
  }
  controls.forEach(function (c) { c.addEventListener("change", apply); });
  var reset = document.getElementById("f-reset");
  if (reset) {
    reset.addEventListener("click", function () {
      controls.forEach(function (c) { if (c.tagName === "SELECT") { c.value = ""; } else { c.checked = true; } });
      apply();
    });
  }
  apply();
})();
"""


def csp(script: str) -> str:
    """No source is allowed except the page itself: no fetch, no image, no font; only our script."""
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    return (f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; img-src data:; "
            "base-uri 'none'; form-action 'none'")


def page(title: str, body: str) -> str:
    """The whole document: CSP, inline CSS, body, then the one inline script."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{esc(csp(SCRIPT))}\">"
            "<meta name=\"referrer\" content=\"no-referrer\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body>{body}"
            f"<script>{SCRIPT}</script></body></html>\n")


# ------------------------------------------------------------------------------------------ bits


def badge(label: str, shown: str | None = None) -> str:
    """A coloured label; ``shown`` is the text when it says more than the label (``PASS (unsealed)``)."""
    cls = label if label in ("PASS", "FLAG", "FAIL", "INFO") else "other"
    return f'<span class="badge {cls}">{esc(shown or label)}</span>'


def table(headers: Iterable[str], rows: Iterable[Iterable[str]], attrs: str = "") -> str:
    """A table whose cells are already-escaped HTML fragments."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join(f"<tr>{''.join(cells)}</tr>" for cells in rows)
    return f"<table{attrs}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def td(value: object, num: bool = False, cls: str = "") -> str:
    classes = " ".join(c for c in ("num" if num else "", cls) if c)
    return f'<td class="{classes}">{esc(value)}</td>' if classes else f"<td>{esc(value)}</td>"


def data_attrs(**attrs: str) -> str:
    return "".join(f' data-{esc(k)}="{esc(v)}"' for k, v in attrs.items())


def entry_codes(entry: VerdictEntry) -> str:
    return " ".join(sorted({f.code for f in entry.verdict.findings}))


def filter_bar(checks: list[tuple[str, str, list[str]]], selects: list[tuple[str, str, list[str]]]) -> str:
    """Sticky filter controls: checkbox groups (attr, label, values) and selects (attr, label, values)."""
    parts = ['<nav id="filters" aria-label="filters">']
    for attr, label, values in checks:
        parts.append(f"<span>{esc(label)}:</span>")
        for value in values:
            parts.append(f'<label><input type="checkbox" checked data-filter-attr="{esc(attr)}" '
                         f'value="{esc(value)}" id="f-{esc(attr)}-{esc(value)}"> {esc(value)}</label>')
    for attr, label, values in selects:
        opts = "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in values)
        parts.append(f'<label>{esc(label)} <select data-filter-attr="{esc(attr)}" id="f-{esc(attr)}">'
                     f'<option value="">all</option>{opts}</select></label>')
    parts.append('<button type="button" id="f-reset">reset</button><span class="count" id="f-count"></span></nav>')
    return "".join(parts)


# -------------------------------------------------------------------------------------- evidence


def quote_html(reader: LineReader, ref) -> str:
    """One evidence line: file:line, the recorded sha256, whether the run still has that line, and
    the excerpt (re-read from the run when present)."""
    quote = reader.quote(ref)
    status_cls = {"verified": "st-verified", "changed": "st-changed"}.get(quote.status, "st-other")
    sha = f'sha256 <code>{esc(ref.sha256)}</code>' if ref.sha256 else "no sha256 recorded"
    excerpt = f"<pre>{esc(quote.excerpt)}</pre>" if quote.excerpt else ""
    return (f'<div class="evidence"><div><code class="loc">{esc(quote.location)}</code> · {sha} · '
            f'<span class="{status_cls}">{esc(STATUS_TEXT[quote.status])}</span></div>{excerpt}</div>')


def finding_html(finding, reader: LineReader) -> str:
    ev = "".join(quote_html(reader, ref) for ref in finding.evidence[:MAX_EVIDENCE_SHOWN])
    if len(finding.evidence) > MAX_EVIDENCE_SHOWN:
        ev += f'<div class="kv">… and {len(finding.evidence) - MAX_EVIDENCE_SHOWN} more evidence line(s)</div>'
    meta = [f"gate <code>{esc(finding.gate or '-')}</code>"]
    if finding.action:
        meta.append(f"asks <code>{esc(finding.action)}</code>")
    if finding.source != "deterministic":
        meta.append(f"raised by {esc(finding.source)}")
    mt = ""
    if finding.measured is not None or finding.threshold is not None:
        mt = (f'<div><span class="kv">measured</span> <code>{esc(fmt_value(finding.measured, 400))}</code> '
              f'<span class="kv">vs threshold</span> <code>{esc(fmt_value(finding.threshold, 400))}</code></div>')
    return (f'<div class="finding sev-{esc(finding.severity)}" data-code="{esc(finding.code)}">'
            f'<div>{badge(finding.severity)} <b>{esc(finding.code)}</b> '
            f'<span class="kv">{" · ".join(meta)}</span></div>'
            f'<div class="msg">{esc(finding.message)}</div>{mt}{ev}</div>')


# ----------------------------------------------------------------------------------------- plots


def _finite(values: Iterable[Any]) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]


PLOT_LEGEND = ('<p class="kv">Each dot is one rep; a bar marks each leg\'s median; the dashed line is the baseline '
               'median and the shaded area the noise band around it. Where the baseline was handicapped, the '
               'dotted line and its tinted band are the fairer reference (its same-config legs, a row of their '
               'own), against which the banked figure was re-derived. Exact figures are in the table below.</p>')


def rep_plots(entry: VerdictEntry, extra: list[tuple[str, VerdictEntry]] | None = None) -> str:
    """Throughput, TTFT and TPOT per leg: every rep a dot, each leg's median a bar, the noise band
    (from the comparison of that metric) shaded around the baseline median. ``extra`` adds the legs
    of other verdicts (a comparison) as more rows, labelled with their tag."""
    v = entry.verdict
    comps = {c.metric: c for c in v.comparisons}
    sources = [("", entry)] + list(extra or [])
    out = []
    for metric, title in PLOT_METRICS.items():
        rows = []
        for tag, src in sources:
            roles = src.role_legs()
            order = [leg for leg in roles.values() if leg in src.verdict.legs]
            order += [leg for leg in src.verdict.legs if leg not in order]
            role_of = {leg: role for role, leg in roles.items()}
            for leg in order:
                stats = src.verdict.legs[leg].get(metric)
                if stats is None:
                    continue
                label = f"{tag}{leg}" + (f" ({role_of[leg]})" if leg in role_of else "")
                rows.append(Row(label if len(label) <= 24 else label[:23] + "…", _finite(stats.values),
                                stats.median))
        if not rows:
            continue
        base_leg = entry.baseline_leg()
        base_stats = v.legs.get(base_leg, {}).get(metric) if base_leg else None
        center = base_stats.median if base_stats is not None else None
        comp = comps.get(metric)
        band = None
        subtitle = "no baseline/candidate comparison: no noise band"
        if comp is not None and center is not None and math.isfinite(comp.noise_band_pct):
            band = (center * (1 - comp.noise_band_pct / 100), center * (1 + comp.noise_band_pct / 100))
            subtitle = f"noise band ±{comp.noise_band_pct:.2f}% around the baseline median: {comp.noise_band_source}"
        reference, pooled = fairer_reference(v, metric, entry.headline_metric)
        if reference is not None:
            rows.append(Row("same-config legs (fairer ref.)", pooled, reference.level))
            subtitle = f"{subtitle}; dotted: {reference.label}"
        out.append(strip_plot(title, rows, band, center, subtitle=subtitle, reference=reference))
    return f'<div class="plots">{"".join(out)}</div>' if out else '<p class="kv">No per-rep statistics.</p>'


def fairer_reference(v: Verdict, metric: str, headline_metric: str) -> tuple[Reference | None, list[float]]:
    """The same-config legs' level on the headline metric and their reps, where the verdict re-derived its
    headline against them ((None, []) otherwise, or when the verdict holds no usable figure of it)."""
    ref = next((r for r in v.headline_references if r.reference == "same_config_legs"), None)
    values = _finite(ref.values) if ref is not None and metric == headline_metric else []
    if ref is None or not values:
        return None, []
    level = statistics.median(values)
    pct = ref.noise_band_pct if ref.noise_band_pct is not None and math.isfinite(ref.noise_band_pct) else None
    band = (level * (1 - pct / 100), level * (1 + pct / 100)) if pct is not None else None
    banked = "the banked figure" if ref.banked else "a less favourable figure was banked"
    return Reference(level, band, f"same-config legs {', '.join(ref.legs)} ({ref.delta_pct:+.2f}% against them: "
                                  f"{banked})"), values


def stats_table(entry: VerdictEntry) -> str:
    """Exact re-derived statistics (the plots may be downsampled; these numbers never are)."""
    rows = []
    for leg, metrics in entry.verdict.legs.items():
        for metric in PLOT_METRICS:
            s = metrics.get(metric)
            if s is None:
                continue
            ci = "-" if s.ci_low is None else f"{s.ci_low:.6g} .. {s.ci_high:.6g}"
            rows.append([td(leg), td(metric), td(s.n, True), td(f"{s.median:.6g}", True), td(f"{s.min:.6g}", True),
                         td(f"{s.max:.6g}", True),
                         td(f"{s.spread_pct:.2f}%" if s.spread_pct is not None else "-", True), td(ci, True)])
    if not rows:
        return ""
    return table(["leg", "metric", "reps", "median", "min", "max", "spread", "95% CI of median"], rows)


def comparisons_table(entry: VerdictEntry) -> str:
    comps = entry.verdict.comparisons
    if not comps:
        return ""
    rows = []
    for c in comps:
        ci = "-" if c.ratio_ci_low is None else f"{c.ratio_ci_low:.4g} .. {c.ratio_ci_high:.4g}"
        rows.append([td(c.metric), td(fmt_pct(c.delta_pct), True),
                     td("-" if c.p_value is None else f"{c.p_value:.3g}", True),
                     td(f"±{c.noise_band_pct:.2f}% ({c.noise_band_source})", True),
                     td(fmt_pct(c.worst_candidate_vs_best_baseline_pct), True), td(ci, True),
                     td("yes" if c.significant else "no")])
    return table(["metric", "delta", "p (rep level)", "noise band", "worst cand vs best base", "ratio 95% CI",
                  "real delta"], rows)


# ------------------------------------------------------------------------------------ conditions


def flatten(info: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted keys, as the auditor's conditions gate names them (so the verdict's diff keys match)."""
    # lazy: scipy: the auditor's gates, only for this cell
    from perfwarden.auditor.gates.conditions import flatten as auditor_flatten

    return auditor_flatten(info, prefix)


_ABSENT = object()
"""A key one leg's server_info lacks (distinct from a JSON null)."""


def _cell(value: Any) -> str:
    if value is _ABSENT:
        return "<absent>"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def conditions_html(entry: VerdictEntry, root) -> str:
    """The verdict's server_info diff, then the legs' full server_info side by side with every
    differing key highlighted (the diff is the auditor's; the full files are read now)."""
    v = entry.verdict
    parts = []
    if v.server_info_diff:
        rows = [[td(k, cls="key"), td(_cell(pair[0] if len(pair) > 0 else None)),
                 td(_cell(pair[1] if len(pair) > 1 else None))] for k, pair in v.server_info_diff.items()]
        parts.append("<h3>server_info diff (from the verdict)</h3>" + table(["key", "baseline", "candidate"], rows))
    roles = entry.role_legs()
    legs = [(role, leg) for role, leg in roles.items() if role in ("baseline", "candidate", "validation")]
    if not legs:
        return "".join(parts)
    infos, notes = [], []
    for role, leg in legs:
        info, note = read_server_info(root, leg)
        infos.append(flatten(info) if info is not None else None)
        if note:
            notes.append(note)
    keys = sorted({k for info in infos if info for k in info})
    rows_html = []
    for key in keys:
        values = [info.get(key, _ABSENT) if info is not None else _ABSENT for info in infos]
        present = [json.dumps(x, sort_keys=True, default=str) if x is not _ABSENT else "\0absent" for x in values]
        differ = len(set(present)) > 1
        mark = ' <span class="mark" title="in the verdict diff">Δ</span>' if key in v.server_info_diff else ""
        cells = f'<td class="key">{esc(key)}{mark}</td>' + "".join(td(_cell(x)) for x in values)
        rows_html.append(f'<tr class="{"differ" if differ else "same"}">{cells}</tr>')
    heads = "".join(f"<th>{esc(leg)} ({esc(role)})</th>" for role, leg in legs)
    parts.append(f"<h3>server_info of the legs (full files, differing keys highlighted)</h3>"
                 + "".join(f'<div class="note">{esc(n)}</div>' for n in notes)
                 + f'<div class="scroll"><table class="si"><thead><tr><th>key</th>{heads}</tr></thead>'
                 f'<tbody>{"".join(rows_html)}</tbody></table></div>')
    return "".join(parts)


def lever_html(entry: VerdictEntry, review: RunReview) -> str:
    """Declared vs detected lever, its signals, and for a bundle the decomposition: each component
    with the patch verdict that accepted it, and each differing server_info key attributed to the
    component whose declared keys cover it (an unattributed key is a confound)."""
    v, claim = entry.verdict, entry.claim
    lever = claim.lever if claim is not None else None
    if lever is None and not (v.lever_declared or v.lever_detected):
        return ""
    rows = [[td("declared"), td(f"{lever.name!r} class {lever.lever_class}" if lever else v.lever_declared or "-")],
            [td("detected"), td(v.lever_detected or "-")],
            [td("signals"), td("; ".join(v.lever_signals) or "-")]]
    if lever is not None:
        rows += [[td("config keys"), td(", ".join(lever.config_keys) or "-")],
                 [td("kernel ops"), td(", ".join(lever.kernel_ops) or "-")]]
    out = "<h3>lever</h3>" + table(["", ""], rows)
    if lever is None or not lever.components:
        return out
    by_name = {e.lever_name: e for e in review.entries if e.verdict.scope == "patch" and e.lever_name}
    comp_rows: list[list[str]] = []
    owner: dict[str, str] = {}
    for name in lever.components:
        src = by_name.get(name)
        if src is None:
            comp_rows.append([td(name), td("no patch verdict in this run", cls="problem"), td("-"), td("-")])
            continue
        keys = src.claim.lever.config_keys if src.claim and src.claim.lever else []
        for k in keys:
            owner.setdefault(k, name)
        state = "accepted" if is_banked(src) else "NOT accepted"
        shown = badge(src.verdict.verdict, src.verdict.shown)
        comp_rows.append([td(name), f"<td>{shown} {esc(src.verdict.action)} · {esc(state)}</td>",
                          td(src.key), td(", ".join(keys) or "-")])
    out += "<h3>lever decomposition (bundle components)</h3>" + table(
        ["component", "its patch verdict", "verdict", "config keys"], comp_rows)
    if v.server_info_diff:
        attr_rows = [[td(k), td(owner.get(k, "unattributed: no accepted component declares it"),
                                cls="" if k in owner else "problem")] for k in v.server_info_diff]
        out += "<h3>differences attributed to components</h3>" + table(["server_info key", "component"], attr_rows)
    return out


# ------------------------------------------------------------------------------------------ cards


def anchor(tag: str, index: int, entry: VerdictEntry) -> str:
    return f"{tag}v{index}-{entry.key}"


def verdict_body(entry: VerdictEntry, review: RunReview, reader: LineReader) -> str:
    """Everything about one verdict: facts, findings with quoted evidence, not-checked items, rep
    plots with exact statistics, comparisons, lever (and its decomposition) and conditions."""
    v = entry.verdict
    facts = [[td("verdict file"), td(entry.path)],
             [td("headline metric"), td(entry.headline_metric)],
             [td("headline claimed"), td(fmt_pct(v.headline_claimed))],
             [td("headline re-derived"), f"<td><b>{esc(fmt_pct(v.headline_rederived))}</b></td>"],
             *([[td("why that figure"), td(v.headline_note)]] if v.headline_note else []),
             *([[td("asks"), td(" + ".join(v.actions))]] if len(v.actions) > 1 else []),
             [td("correctness"), td(v.correctness)],
             [td("auditor"), td(f"{v.auditor_version or '-'} · digest {v.digest or '-'}")]]
    if entry.claim_note:
        facts.append([td("claim"), td(entry.claim_note, cls="problem")])
    if v.degraded:
        facts.append([td("degraded"), td("; ".join(v.degraded_reasons), cls="problem")])
    body = [table(["", ""], facts)]
    body.append("<h3>findings</h3>" + ("".join(finding_html(f, reader) for f in v.findings)
                                       or '<p class="kv">No finding.</p>'))
    if v.witnesses:
        body.append("<h3>what was checked: second witnesses per leg</h3>"
                    + table(["leg", "held against"], [[td(w.leg), td(" · ".join(w.held()))] for w in v.witnesses]))
    if v.not_checked:
        body.append("<h3>not checked (never counted as passed)</h3><ul>"
                    + "".join(f"<li>{esc(x)}</li>" for x in v.not_checked) + "</ul>")
    body.append("<h3>per-leg rep distributions</h3>" + PLOT_LEGEND + rep_plots(entry) + stats_table(entry))
    comps = comparisons_table(entry)
    if comps:
        body.append("<h3>baseline vs candidate (re-derived)</h3>" + comps)
    body.append(lever_html(entry, review))
    body.append(conditions_html(entry, review.root))
    return "".join(body)


def verdict_summary(entry: VerdictEntry) -> str:
    v = entry.verdict
    return (f"{badge(v.verdict, v.shown)} <b>{esc(entry.key)}</b> · action <code>{esc(v.action)}</code> · "
            f"<code>{esc(v.claim)}</code>")


def verdict_card(entry: VerdictEntry, review: RunReview, reader: LineReader, anchor_id: str) -> str:
    """A collapsible card (open unless PASS) that the filters show or hide."""
    v = entry.verdict
    attrs = data_attrs(fi="card", verdict=v.verdict, scope=v.scope, codes=entry_codes(entry))
    is_open = " open" if v.verdict != "PASS" else ""
    return (f'<details class="block card" id="{esc(anchor_id)}"{attrs}{is_open}><summary>{verdict_summary(entry)}'
            f'</summary>{verdict_body(entry, review, reader)}</details>')


# ------------------------------------------------------------------------------------------ review


def header_html(review: RunReview, title: str) -> str:
    m = review.manifest
    counts = review.summary.counts
    sub = [f"run <b>{esc(review.run_id)}</b>"]
    if m is not None:
        sub.append(f"model {esc(m.model)} · target {esc(m.target)}")
    if review.objective is not None:
        sub.append(f"objective {esc(review.objective.describe())}")
    sub.append(" · ".join(f"{counts[k]} {k}" for k in ("PASS", "FLAG", "FAIL") if counts[k]))
    return (f'<header class="top"><h1>{esc(title)}</h1><div class="sub">{" · ".join(sub)}</div>'
            f'<div class="sub"><code>{esc(review.root)}</code></div></header>')


def notes_html(review: RunReview) -> str:
    notes = []
    if review.audited_now:
        notes.append("This run has no saved verdict: its claims were audited now for this report and nothing "
                     "was written (perfwarden audit RUN --claim CLAIM --save keeps them).")
    notes += review.notes
    return "".join(f'<div class="note">{esc(n)}</div>' for n in notes)


def timeline_html(review: RunReview, tag: str) -> str:
    nodes = [TimelineNode(anchor(tag, i, e), e.key, e.verdict.verdict, gates_of(e),
                          {"data-fi": "tl", "data-verdict": e.verdict.verdict, "data-scope": e.verdict.scope,
                           "data-codes": entry_codes(e)})
             for i, e in enumerate(review.entries)]
    out = (f'<section class="block"><h2>timeline: verdicts in seq order, gates that raised findings below</h2>'
           f'<div class="scroll">{timeline(nodes)}</div>')
    if review.events:
        rows = []
        for i, ev in enumerate(review.events):
            dur = ev.get("duration", ev.get("duration_s"))
            err = ev.get("error")
            rows.append([td(i + 1, True), td(fmt_value(ev.get("node"), 60)),
                         td(fmt_value(dur, 20), True), td(fmt_value(err, 200), cls="problem" if err else "")])
        out += "<h3>orchestrator steps (events.jsonl)</h3>" + table(["#", "node", "duration", "error"], rows)
    return out + "</section>"


def trail_table(review: RunReview, tag: str) -> str:
    rows = []
    for i, e in enumerate(review.entries):
        v = e.verdict
        attrs = data_attrs(fi="row", verdict=v.verdict, scope=v.scope, codes=entry_codes(e))
        cells = (f'<td><a href="#{esc(anchor(tag, i, e))}">{esc(e.key)}</a></td>{td(v.scope)}'
                 f"<td>{badge(v.verdict, v.shown)}</td>{td(v.action)}{td(e.headline_metric)}"
                 f"{td(fmt_pct(v.headline_claimed), True)}{td(fmt_pct(v.headline_rederived), True)}"
                 f"{td(v.lever_declared or '-')}{td(v.lever_detected or '-')}"
                 f"{td(', '.join(sorted({f.code for f in v.findings if f.severity != 'INFO'})) or '-')}"
                 f"{td(review.decided(e))}")
        rows.append(f"<tr{attrs}>{cells}</tr>")
    heads = "".join(f"<th>{h}</th>" for h in ("claim", "scope", "verdict", "action", "metric", "claimed",
                                               "re-derived", "lever decl.", "lever det.", "codes", "run's decision"))
    return (f'<section class="block"><h2>verdict trail</h2><div class="scroll"><table><thead><tr>{heads}</tr>'
            f'</thead><tbody>{"".join(rows)}</tbody></table></div></section>')


def banked_html(review: RunReview) -> str:
    b = banked(review)
    rule = banking.rule_text()
    parts = [f'<section class="block"><h2>banked results by lever class</h2><p class="kv">source: '
             f'{esc(b.source if b.source != "verdicts" else "verdicts (" + rule + ")")}</p>']
    for cls, items in b.by_class().items():
        rows = [[td(it.label, cls="problem" if it.problem else ""),
                 f"<td>{badge(it.entry.verdict, it.entry.shown) if it.entry else '-'}</td>", td(it.headline),
                 td(it.standing or "in the final configuration"),
                 td(it.problem or "", cls="problem" if it.problem else "")] for it in items[:KEEP]]
        more = f'<p class="kv">… and {len(items) - KEEP:,} more</p>' if len(items) > KEEP else ""
        parts.append(f"<h3>{esc(LEVER_CLASSES.get(cls, str(cls)))}</h3>"
                     + (table(["claim", "verdict", "banked headline", "standing", "problem"], rows) + more if rows
                        else '<p class="kv">none</p>'))
    if review.report_final is not None:
        net = [[td(k.knob), td(repr(k.baseline)), td(repr(k.final))] for k in review.report_final]
        parts.append("<h3>final configuration: what differs from the true baseline</h3>"
                     + (table(["knob", "baseline", "final"], net) if net else '<p class="kv">the baseline</p>'))
    if b.unreported:
        more = f" … and {len(b.unreported) - KEEP:,} more" if len(b.unreported) > KEEP else ""
        parts.append('<p class="kv">bankable but not in report.json: '
                     + esc(", ".join(e.key for e in b.unreported[:KEEP]) + more) + "</p>")
    return "".join(parts) + "</section>"


def gates_html(review: RunReview) -> str:
    rows = [[td(g), td(s), *[td(c[sev] or "·", True) for sev in SEVERITIES]] for g, s, c in review.summary.gate_rows()]
    body = table(["gate", "scope", *SEVERITIES], rows) if rows else '<p class="kv">No gate raised a finding.</p>'
    return f'<section class="block"><h2>findings by gate and scope</h2>{body}</section>'


def review_sections(review: RunReview, tag: str = "") -> str:
    reader = LineReader(review.root)
    cards = "".join(verdict_card(e, review, reader, anchor(tag, i, e)) for i, e in enumerate(review.entries))
    return (notes_html(review) + timeline_html(review, tag) + trail_table(review, tag) + banked_html(review)
            + search_plot.history_html(review.root) + gates_html(review) + f'<div class="cards">{cards}</div>')


def review_filters(reviews: list[RunReview]) -> str:
    scopes = sorted({s for r in reviews for s in r.summary.scopes})
    codes = sorted({c for r in reviews for c in r.summary.codes})
    return filter_bar([("verdict", "verdict", ["PASS", "FLAG", "FAIL"])],
                      [("scope", "scope", scopes), ("codes", "finding code", codes)])


def render_review_html(review: RunReview) -> str:
    title = f"perfwarden review: {review.run_id}"
    body = header_html(review, title) + review_filters([review]) + f"<main>{review_sections(review)}</main>"
    return page(title, body)


# ----------------------------------------------------------------------------------------- compare


def _change_cell(value: float | None, higher_is_better: bool | None) -> str:
    if value is None:
        return td("-", True)
    good = value > 0 if higher_is_better else value < 0
    cls = "up" if good else "down" if value != 0 else ""
    return td(fmt_pct(value), True, cls)


def pair_html(pair: Pair, index: int) -> str:
    def side(e: VerdictEntry | None) -> str:
        if e is None:
            return '<span class="kv">absent</span>'
        return f"{badge(e.verdict.verdict, e.verdict.shown)} <code>{esc(e.verdict.action)}</code>"

    rows = [[td(r.role), td(r.metric), td(fmt_value(r.a, 14), True), td(fmt_value(r.b, 14), True),
             _change_cell(r.change, METRICS.get(r.metric))] for r in metric_rows(pair)]
    only_a, only_b, both = pair.codes()
    codes = table(["finding codes only in A", "only in B", "in both"],
                  [[td(", ".join(only_a) or "-"), td(", ".join(only_b) or "-"), td(", ".join(both) or "-")]])
    ha = pair.a.verdict.headline_rederived if pair.a else None
    hb = pair.b.verdict.headline_rederived if pair.b else None
    plots = ""
    if pair.a is not None and pair.b is not None:
        plots = rep_plots(_tagged(pair.a, "A:"), [("B:", pair.b)])
    return (f'<div class="pair" id="pair{index}"><h3>{esc(pair.key)} · A {side(pair.a)} → B {side(pair.b)}</h3>'
            f'<p>headline re-derived: A <b>{esc(fmt_pct(ha))}</b> → B <b>{esc(fmt_pct(hb))}</b></p>'
            + (table(["role", "metric", "A median", "B median", "B vs A"], rows) if rows else "")
            + codes + plots + "</div>")


def _tagged(entry: VerdictEntry, tag: str) -> VerdictEntry:
    """The entry with its legs renamed ``tag+leg`` so that paired plots label both runs' rows."""
    from dataclasses import replace

    v = entry.verdict.model_copy(update={"legs": {f"{tag}{k}": m for k, m in entry.verdict.legs.items()}})
    claim = entry.claim
    if claim is not None:
        legs = claim.legs.model_copy(update={
            "baseline": f"{tag}{claim.legs.baseline}" if claim.legs.baseline else None,
            "candidate": f"{tag}{claim.legs.candidate}" if claim.legs.candidate else None,
            "validation": f"{tag}{claim.legs.validation}" if claim.legs.validation else None,
            "caching_audit": f"{tag}{claim.legs.caching_audit}" if claim.legs.caching_audit else None,
            "aa": [f"{tag}{x}" for x in claim.legs.aa]})
        claim = claim.model_copy(update={"legs": legs})
    return replace(entry, verdict=v, claim=claim)


def comparison_section(comp: Comparison) -> str:
    pairs = "".join(pair_html(p, i) for i, p in enumerate(comp.pairs))
    return (f'<section class="block" id="comparison"><h2>paired comparison: A {esc(comp.a.run_id)} vs '
            f'B {esc(comp.b.run_id)}</h2><p class="kv">A: <code>{esc(comp.a.label)}</code><br>B: '
            f'<code>{esc(comp.b.label)}</code></p><p class="kv">Paired by claim (seq and scope); numbers are '
            f'the auditor\'s re-derived rep medians; B vs A is B relative to A (green = better).</p>{pairs}</section>')


def render_compare_html(comp: Comparison) -> str:
    title = f"perfwarden review: {comp.a.run_id} vs {comp.b.run_id}"
    body = (header_html(comp.a, title) + review_filters([comp.a, comp.b]) + "<main>" + comparison_section(comp)
            + f'<h2>run A: {esc(comp.a.run_id)}</h2>' + review_sections(comp.a, "a")
            + f'<h2>run B: {esc(comp.b.run_id)}</h2>' + review_sections(comp.b, "b") + "</main>")
    return page(title, body)
