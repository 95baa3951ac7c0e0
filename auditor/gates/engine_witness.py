"""Every rep on a real engine has a second witness: the engine's own counters. A pure gate over what
the loader read.

The harness samples vLLM's ``/metrics`` just before and just after each rep (``formats/vllm_metrics.py``,
``legs/<leg>/engine_metrics.jsonl``). The engine counted the rep's requests independently of
perfwarden's client, so the bench line must agree with the difference of the two samples:

- **counts, exactly** (``COUNT_TOLERANCE``): requests completed (``vllm:request_success_total``,
  finished ``stop``/``length``) = the line's successful requests; tokens generated
  (``vllm:generation_tokens_total``) = its output tokens; tokens prefilled (``vllm:prompt_tokens_total``) =
  its input tokens where the line has them; observations of the TTFT and end-to-end histograms = its
  successful requests. The server is idle between the samples except for the rep's own requests.
- **times, at most the client's** (``TIME_SLACK_REL``, ``TIME_SLACK_ABS_S``): the engine times a request
  from its arrival at the server's frontend to the moment the frontend processed its token, the client
  from its send to the moment the text reached it, so the engine's TTFT and end-to-end sums are at most
  the client's plus clock slack. A line whose times were shrunk (a faster candidate) breaks this: one
  of the two accounts is false.
- **times, at least the client's less its transport** (``TRANSPORT_SHARE`` of the client's sum, or
  ``TRANSPORT_ABS_S`` per request, whichever is larger). Beyond it the tokens reached the client later
  than the engine produced them, which an honest rep does when its frontend or client stalls: a real
  vLLM rep on 2 busy cores delivered three requests' first text 0.85 s after the engine counted it,
  its TTFT sum 53% over the engine's (another rep: 82%; docs/benchmarks.md). A stretched line (a
  handicapped baseline) looks the same, and nothing the engine counts tells them apart, so this is
  CLIENT_LAG (FLAG, re-measure): the rep is never banked on and a re-measure settles it.
- **the window**: the rep's recorded start and end lie between the two samples, so the samples
  witness this rep and not another.

Any other disagreement is EVIDENCE_CORRUPT (FAIL): one of the two accounts is false, and the bench line
is the one a producer can reach. A witness record that is not one (unknown field, wrong type, repeated
rep) is EVIDENCE_CORRUPT too; a rep of a harness-written vLLM leg without its record is EVIDENCE_MISSING
(FLAG, re-measure: a run killed between the line and its record leaves one). A leg whose server is not
vLLM, or a foreign file (``vllm bench serve`` results carry no counters), is listed as not checked.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from perfwarden.auditor.evidence import LegEvidence, RunLoader, TextFile, line_evidence
from perfwarden.auditor.findings import GateResult, finding
from perfwarden.auditor.rederive import RepMetrics
from perfwarden.formats import vllm_metrics
from perfwarden.formats.records import EvidenceRef, Finding

GATE = "engine_witness"
COUNT_TOLERANCE = 0
"""Counts must agree exactly: both sides count the same requests and tokens."""
TIME_SLACK_REL = 0.02
TIME_SLACK_ABS_S = 0.005
"""How much the engine's time sums may exceed the client's: clock and rounding slack, per request."""
TRANSPORT_SHARE = 0.25
TRANSPORT_ABS_S = 0.25
"""How much shorter than the client's the engine's time sums may be: the client's transport, parsing
and scheduling, at most a quarter of its own time or 250 ms per request, whichever is larger."""
WINDOW_SLACK_S = 0.5
"""Tolerance of the window check (the samples' clock and the line's are one clock, read separately)."""


def is_vllm_leg(leg: LegEvidence) -> bool:
    """Whether the leg's server reported itself as vLLM (its ``server_info.json``)."""
    return bool(leg.server_info and leg.server_info.get("vllm_version"))


def load_engine_witness(loader: RunLoader, leg: LegEvidence) -> TextFile | None:
    """The leg's witness file, read by the loader (the gate judges what it read); None where the leg is not
    vLLM's or the file is absent (the gate says which)."""
    if not is_vllm_leg(leg):
        return None
    return loader.text(loader.paths.leg_dir(leg.name) / vllm_metrics.WITNESS_FILE, False, "engine metrics witness")


def check_engine_witness(run: Path, tf: TextFile | None, leg: LegEvidence) -> GateResult[int]:
    """The leg's reps against the engine's counters (module docstring); ``tf``: load_engine_witness's.
    Its value: how many reps were held against a witness record (None: the leg's server is not vLLM)."""
    if not is_vllm_leg(leg):
        return GateResult()
    harness = [r for r in leg.reps if r.schema_version is not None]
    if not harness:
        return GateResult(not_checked=[f"engine counters of leg {leg.name!r}: its lines were not written by "
                                       "perfwarden's harness (a foreign file has no witness record)"], value=0)
    records, findings = _records(run, tf, leg.name)
    held = 0
    for rep in harness:
        got = records.get(rep.rep)
        if got is not None:
            held += 1
        if got is None:
            findings.append(finding(
                "EVIDENCE_MISSING", "FLAG", f"rep {rep.rep} of vLLM leg {leg.name!r} has no engine counters in "
                f"{vllm_metrics.WITNESS_FILE}: nothing but the client's line states its numbers; re-measure",
                evidence=[line_evidence(run, rep.ref)], action="remeasure", gate=GATE))
            continue
        findings += compare(run, rep, *got)
    return GateResult(findings=findings, value=held)


def _records(run: Path, tf: TextFile | None, leg: str
             ) -> tuple[dict[int, tuple[vllm_metrics.WitnessRecord, EvidenceRef]], list[Finding]]:
    """rep -> (record, its evidence); a line that is not a record, or a second record of one rep, is a finding."""
    out: dict[int, tuple[vllm_metrics.WitnessRecord, EvidenceRef]] = {}
    findings: list[Finding] = []
    if tf is None:
        return out, findings
    for i, text in enumerate(tf.lines, 1):
        if not text.strip():
            continue
        ref = EvidenceRef(file=str(tf.path.relative_to(run)), line=i, excerpt=text[:120])
        problem = None
        try:
            record = vllm_metrics.decode_record(text.encode("utf-8"))
            if record.leg != leg:
                raise ValueError(f"it names leg {record.leg!r}")
        except (ValueError, msgspec.DecodeError) as exc:
            problem = f"line {i} is not a witness record of leg {leg!r}: {exc}"
        else:
            if record.rep in out:
                problem = f"rep {record.rep} has a second witness record at line {i}"
            else:
                out[record.rep] = (record, ref)
        if problem:
            findings.append(finding("EVIDENCE_CORRUPT", "FAIL", f"{vllm_metrics.WITNESS_FILE}: {problem}",
                                    evidence=[ref], action="eject", gate=GATE))
    return out, findings


def disagreements(rep: RepMetrics, record: vllm_metrics.WitnessRecord) -> list[tuple[str, float, float]]:
    """(what, the engine's figure, the line's figure) for every quantity outside its tolerance."""
    d = vllm_metrics.delta(record)
    n = float(rep.n_ok)
    counts = [("requests completed", d.get("vllm:request_success_total"), n),
              ("output tokens", d.get("vllm:generation_tokens_total"), rep.metrics.get("total_output_tokens", 0.0)),
              ("TTFT observations", d.get("vllm:time_to_first_token_seconds_count"), n),
              ("end-to-end observations", d.get("vllm:e2e_request_latency_seconds_count"), n)]
    if "total_input_tokens" in rep.metrics:
        counts.append(("input tokens", d.get("vllm:prompt_tokens_total"), rep.metrics["total_input_tokens"]))
    out = [(what, float("nan") if eng is None else eng, line) for what, eng, line in counts
           if eng is None or abs(eng - line) > COUNT_TOLERANCE]
    for what, eng, line in _time_sums(rep, d):
        if eng is None or eng > line * (1 + TIME_SLACK_REL) + n * TIME_SLACK_ABS_S:
            out.append((what, float("nan") if eng is None else eng, line))
    return out


def lags(rep: RepMetrics, record: vllm_metrics.WitnessRecord) -> list[tuple[str, float, float]]:
    """(what, the engine's figure, the line's figure) for every time sum the client's exceeds by more than
    its transport (module docstring: a late delivery or a stretched line)."""
    n = float(rep.n_ok)
    return [(what, eng, line) for what, eng, line in _time_sums(rep, vllm_metrics.delta(record))
            if eng is not None and eng < line - max(line * TRANSPORT_SHARE, n * TRANSPORT_ABS_S)]


def _time_sums(rep: RepMetrics, d: dict[str, float]) -> list[tuple[str, float | None, float]]:
    """(what, the engine's sum or None, the line's sum) for each time both accounts can state."""
    out = []
    for what, series, key in (("TTFT sum (s)", "vllm:time_to_first_token_seconds_sum", "ttft_s"),
                              ("end-to-end latency sum (s)", "vllm:e2e_request_latency_seconds_sum", "e2e_s")):
        line = rep.sums.get(key)
        if line is not None:
            out.append((what, d.get(series), line))
    return out


def compare(run: Path, rep: RepMetrics, record: vllm_metrics.WitnessRecord, ref: EvidenceRef) -> list[Finding]:
    """Findings for one rep against its witness record."""
    problems = [f"{what}: engine {eng:.6g}, line {line:.6g}" for what, eng, line in disagreements(rep, record)]
    if rep.started_at is not None and rep.ended_at is not None and not (
            record.before_at - WINDOW_SLACK_S <= rep.started_at and rep.ended_at <= record.after_at + WINDOW_SLACK_S):
        problems.append(f"the rep ran {rep.started_at:.3f}..{rep.ended_at:.3f}, outside the samples' window "
                        f"{record.before_at:.3f}..{record.after_at:.3f}")
    late = [f"{what}: engine {eng:.6g}, line {line:.6g}" for what, eng, line in lags(rep, record)]
    threshold = {"count_tolerance": COUNT_TOLERANCE, "time_slack_rel": TIME_SLACK_REL,
                 "time_slack_abs_s": TIME_SLACK_ABS_S, "transport_share": TRANSPORT_SHARE,
                 "transport_abs_s": TRANSPORT_ABS_S}
    evidence = [line_evidence(run, rep.ref), ref]
    out = []
    if problems:
        out.append(finding(
            "EVIDENCE_CORRUPT", "FAIL", f"rep {rep.rep} of leg {rep.leg!r} disagrees with the engine's own "
            f"counters ({record.source}): " + "; ".join(problems),
            measured={"disagreements": problems}, threshold=threshold, evidence=evidence, action="eject", gate=GATE))
    if late:
        out.append(finding(
            "CLIENT_LAG", "FLAG", f"rep {rep.rep} of leg {rep.leg!r}: the client's times exceed the engine's "
            f"({record.source}) by more than its transport: " + "; ".join(late) + ". Its tokens reached the client "
            "late (a stalled frontend or client) or its line was stretched, which the engine's counters cannot "
            "tell apart; re-measure", measured={"lags": late}, threshold=threshold, evidence=evidence,
            action="remeasure", gate=GATE))
    return out
