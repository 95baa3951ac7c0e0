"""Persisted record formats shared by the harness (writer) and the auditor (reader).

Everything here is a *format*: field names, units and versions. Nothing here computes a number the
auditor checks -- that stays in ``perfwarden.auditor`` so the auditor remains independent of
the code paths that produced the measurements (design §3).

Small, human-edited records (manifests, leg specs, claims, verdicts, quality evals) are versioned
pydantic models with a docstring per field. Large line-oriented files (``bench_runs.jsonl``,
``opbench.jsonl``, ``profile.jsonl``, ``outputs.jsonl``) are read by ``perfwarden.formats.jsonl``.
"""

from __future__ import annotations

import json
import os
import re
import types
import typing
from pathlib import Path
from collections.abc import Callable, Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from perfwarden.formats import safe_write
from perfwarden.formats.slo import GoodputBasis, GoodputSlo
from perfwarden.formats.verdict_parts import HeadlineReference, LegWitnesses  # noqa: F401 - re-exported

SCHEMA_VERSION = 1
"""Major version of the persisted record schemas written by this perfwarden. A record of a newer major
version is refused with a clear error (its fields may mean something else); an older one is migrated
forward by ``MIGRATIONS`` before validation."""

Migration = Callable[[str, dict[str, Any]], dict[str, Any]]
MIGRATIONS: dict[int, Migration] = {}
"""``MIGRATIONS[n](record_type, data)`` turns a version-``n`` record of ``record_type`` into version n+1.
Empty while version 1 is the only version ever written."""

LegRole = Literal["baseline", "candidate", "validation", "caching_audit", "aa", "reference"]
Scope = Literal["baseline", "profile", "harness", "patch", "bundle"]
VerdictScope = Literal["baseline", "profile", "harness", "patch", "bundle", "mlperf"]
"""What a verdict answers: a claim's scope, or ``mlperf`` (an MLPerf compliance pair, ``audit-mlperf``)."""
VerdictLabel = Literal["PASS", "FLAG", "FAIL"]
Seal = Literal["sealed", "unsealed"]
"""Whether a verdict's evidence carried a seal chain verified with the run's key."""
VerdictCorrectness = Literal["verified", "unverifiable", "failed", "not_applicable"]
"""What a verdict says of the candidate's outputs: checked and equivalent, not checkable, not equivalent,
or nothing to check."""


def shown_verdict(label: str, seal: str) -> str:
    """How every surface shows a verdict: ``PASS``, or ``PASS (unsealed)`` when its evidence carried no
    verified seal (an edit or deletion after writing could not have been detected). One place for it."""
    return label if seal == "sealed" else f"{label} (unsealed)"
Action = Literal[
    "pass",
    "flag",
    "downgrade_headline",
    "replace_headline_with_e2e",
    "remeasure",
    "redo_harness",
    "eject",
]
Severity = Literal["INFO", "FLAG", "FAIL"]
LeverClass = Literal["A", "B"]
MechanismName = Literal[
    "baseline", "kv_quantization", "kv_compression", "compressed_attention", "speculative_decoding"
]
SupportStatus = Literal["supported", "experimental", "unsupported"]
ParityKind = Literal["exact_text", "token_ids", "none"]


class SchemaVersionError(ValueError):
    """A record written by a newer (or unknown) schema than this perfwarden reads."""


class Record(BaseModel):
    """Base for persisted records: unknown fields are kept (forward compatible), types are strict, and
    a record's ``schema_version`` is checked before anything else is read."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    @model_validator(mode="before")
    @classmethod
    def _check_schema_version(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "schema_version" not in cls.model_fields or "schema_version" not in data:
            return data
        return migrate(cls.__name__, data)


def unknown_fields(model: BaseModel, prefix: str = "") -> list[str]:
    """Dotted names of every field a record holds that its schema does not declare. Records keep unknown
    fields (forward compatible), so a reader that must be strict -- the auditor reading harness records
    and claims -- asks for them here."""
    out = [prefix + str(k) for k in (model.model_extra or {})]
    for name in type(model).model_fields:
        value = getattr(model, name)
        items = value if isinstance(value, list) else list(value.values()) if isinstance(value, dict) else [value]
        for item in items:
            if isinstance(item, BaseModel):
                out += unknown_fields(item, f"{prefix}{name}.")
    return out


def shadows(name: str, known: "Iterable[str]") -> bool:
    """Whether a key no schema declares passes for a declared one: a case variant of it, or a name with
    characters outside ASCII (a homoglyph: Cyrillic ``а`` for ``a``, a zero-width space). Two readers --
    a person, a lenient parser -- would take it for the field it imitates."""
    if not name.isascii():
        return True
    folded = name.casefold()
    return any(folded == k.casefold() and name != k for k in known)


def shadowing_fields(model: BaseModel, prefix: str = "", also: tuple[str, ...] = ()) -> list[str]:
    """Dotted names of the unknown fields of a record (at any depth) that imitate declared ones (or, at the
    top, the extra fields ``also`` names, which readers use too)."""
    known = (*type(model).model_fields, *also)
    out = [prefix + str(k) for k in (model.model_extra or {}) if k not in also and shadows(str(k), known)]
    for name in type(model).model_fields:
        value = getattr(model, name)
        items = value if isinstance(value, list) else list(value.values()) if isinstance(value, dict) else [value]
        for item in items:
            if isinstance(item, BaseModel):
                out += shadowing_fields(item, f"{prefix}{name}.")
    return out


def _json_kind(annotation: Any) -> tuple[str, Any]:
    """The JSON kind a field's annotation asks for (``bool``, ``int``, ``number``, ``str``, ``list``, ``dict``,
    ``model``, ``any``) and, for a list or a model, what it holds; ``None`` allowed is left to the model."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        kinds = {_json_kind(a) for a in args if a is not type(None)}
        return kinds.pop() if len(kinds) == 1 else ("any", None)
    if origin is typing.Literal:
        literal_types = {type(a) for a in args}
        return ("str", None) if literal_types == {str} else ("any", None)
    if origin is typing.Annotated:
        return _json_kind(args[0])
    if origin is list:
        return "list", (args[0] if args else Any)
    if origin is dict or annotation is dict:
        return "dict", None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "model", annotation
    return {bool: ("bool", None), int: ("int", None), float: ("number", None), str: ("str", None)}.get(
        annotation, ("any", None))


def _kind_ok(kind: str, value: Any) -> bool:
    if value is None or kind == "any":
        return True  # whether None is allowed is the model's own check
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":  # an integer written as a float (3.0) is the same number
        return not isinstance(value, bool) and (isinstance(value, int) or (isinstance(value, float) and value.is_integer()))
    if kind == "number":
        return not isinstance(value, bool) and isinstance(value, (int, float))
    if kind == "str":
        return isinstance(value, str)
    if kind == "list":
        return isinstance(value, list)
    return isinstance(value, dict)  # dict, model


def wrong_types(model: type[BaseModel], data: Any, prefix: str = "") -> list[str]:
    """Dotted names of the fields of ``data`` whose JSON type is not the one ``model`` declares. pydantic's
    lax mode would coerce them (``"0.5"`` to a float, ``1`` to ``True``); a strict reader refuses them
    while keeping an integer written as a float, which is the same number."""
    if not isinstance(data, dict):
        return []
    out = []
    for name, info in model.model_fields.items():
        if name not in data:
            continue
        value = data[name]
        kind, inner = _json_kind(info.annotation)
        if not _kind_ok(kind, value):
            out.append(prefix + name)
        elif kind == "model" and isinstance(value, dict):
            out += wrong_types(inner, value, f"{prefix}{name}.")
        elif kind == "list" and isinstance(value, list):
            sub, sub_inner = _json_kind(inner)
            for i, item in enumerate(value):
                if not _kind_ok(sub, item):
                    out.append(f"{prefix}{name}.{i}")
                elif sub == "model":
                    out += wrong_types(sub_inner, item, f"{prefix}{name}.{i}.")
    return out


def schema_major(value: Any) -> int:
    """``1``, ``"1"`` or ``"1.3"`` -> 1; anything else is not a schema version."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise SchemaVersionError(f"schema_version {value!r} is not a version number")
    try:
        return int(str(value).split(".", 1)[0])
    except ValueError:
        raise SchemaVersionError(f"schema_version {value!r} is not a version number") from None


def migrate(record_type: str, data: dict[str, Any], *, field: str = "schema_version", current: int = SCHEMA_VERSION,
            migrations: dict[int, Migration] = MIGRATIONS) -> dict[str, Any]:
    """Bring a record to version ``current`` (``data[field]``; by default the harness records'
    ``schema_version``): refuse a newer major version, migrate an older one step by step through
    ``migrations``. The one migration chain; ``report.json`` runs its own versions through it."""
    version = schema_major(data[field])
    if version > current:
        raise SchemaVersionError(f"{record_type} has {field} {data[field]!r}, newer than the "
                                 f"{current} this perfwarden reads: upgrade perfwarden to read it")
    if version < 0:
        raise SchemaVersionError(f"{record_type} has {field} {data[field]!r}: no such version")
    while version < current:
        step = migrations.get(version)
        if step is None:
            raise SchemaVersionError(f"{record_type} has {field} {version}, and this perfwarden has no "
                                     f"migration from it to {current}")
        data = {**step(record_type, dict(data)), field: version + 1}
        version += 1
    return {**data, field: current}


# --------------------------------------------------------------------------------------------- run


class RunManifest(Record):
    """``<run>/run.json``: identifies a run and the software that produced it."""

    schema_version: int = SCHEMA_VERSION
    """Version of this record's schema."""
    id: str
    """Run identifier, unique per run directory."""
    target: str
    """Serving target name, e.g. ``embedded`` or ``sglang``."""
    model: str
    """Model served, e.g. ``SmolLM2-135M-Instruct``."""
    seed: int = 0
    """Seed of the run's prompt sampling and load schedule."""
    versions: dict[str, str] = Field(default_factory=dict)
    """Package versions that matter for the measurement (torch, transformers, loadgen, perfwarden)."""
    git_commit: str | None = None
    """perfwarden's git commit when the run started, if known."""
    git_dirty: bool | None = None
    """Whether perfwarden's work tree had uncommitted changes."""
    started_at: str | None = None
    """ISO-8601 UTC start time."""


class KernelPatch(Record):
    """One op override in a leg's overlay (the kernel half of an overlay)."""

    op: str
    """Op replaced, e.g. ``rmsnorm``, ``rotary``, ``silu_mul``, ``attention``."""
    impl: str
    """Implementation name or path of the file that provides it."""
    sha256: str | None = None
    """Digest of the implementation file, when it is a file."""


class Overlay(Record):
    """What a leg changes relative to the target's defaults."""

    config: dict[str, Any] = Field(default_factory=dict)
    """Server knobs set for this leg (name -> value)."""
    kernel_patches: list[KernelPatch] = Field(default_factory=list)
    """Op overrides installed in this leg."""


class LegSpec(Record):
    """``<run>/legs/<leg>/leg.json``: what a leg is for and what it runs with."""

    schema_version: int = SCHEMA_VERSION
    """Version of this record's schema."""
    leg: str
    """Leg name; equals its directory name."""
    role: LegRole
    """Role of the leg in the experiment."""
    overlay: Overlay = Field(default_factory=Overlay)
    """Config diff and kernel patches relative to the target's defaults."""
    purpose: str = ""
    """One line saying why this leg was measured."""
    parent_leg: str | None = None
    """Leg this one was derived from (its baseline), if any."""
    status: Literal["ok", "failed"] = "ok"
    """``failed`` when the server never came up or the leg was aborted; see ``failure``."""
    failure: str | None = None
    """Why the leg failed, when it did."""
    workload: dict[str, Any] | None = None
    """The load every rep of this leg is measured with, under the bench line's own key names
    (``scenario``, ``dataset_name``, ``request_params``, ``loadgen.settings``); None when the harness
    did not record it. The auditor holds it against every rep's line and against the other leg."""


# ------------------------------------------------------------------------------------------ quality


class QualityEval(Record):
    """``<run>/quality/<eval>.json``: a completed quality evaluation of one leg."""

    schema_version: int = SCHEMA_VERSION
    """Version of this record's schema."""
    eval_id: str
    """Registered eval id (see the auditor's quality-eval registry)."""
    leg: str
    """Leg evaluated."""
    n: int
    """Number of items scored."""
    score: float
    """Score in [0, 1] (exact match rate) or the eval's registered unit."""
    ci_low: float | None = None
    """Lower bound of the 95% confidence interval of ``score``."""
    ci_high: float | None = None
    """Upper bound of the 95% confidence interval of ``score``."""
    baseline_score: float | None = None
    """Score of the true baseline on the same items, when measured."""
    baseline_leg: str | None = None
    """Leg that produced ``baseline_score``."""
    items_sha256: str | None = None
    """sha256 of the item set (or text) scored: two results compare only when they share it."""
    completed: bool = True
    """False when the eval was started but did not finish."""


QUALITY_ITEMS_FIELDS = ("items_sha256", "item_set_sha256", "text_sha256")
"""Where a quality record names the items it scored: the shared field first, then the harness's older
per-eval names (extra fields the auditor reads)."""


# -------------------------------------------------------------------------------------------- claim


class LegRefs(Record):
    """Which legs a claim rests on."""

    baseline: str | None = None
    """The true baseline leg (no overlay) or the reference leg."""
    candidate: str | None = None
    """The leg with the change."""
    validation: str | None = None
    """A validation leg re-measuring the candidate against the true baseline (bundle)."""
    caching_audit: str | None = None
    """A TEST04-style leg: one prompt repeated, with the candidate's config."""
    caching_control: str | None = None
    """The control for ``caching_audit``: distinct prompts of the same length, same config. Without it
    the candidate leg is the control, which also differs in prompt lengths (padding, prefill)."""
    aa: list[str] = Field(default_factory=list)
    """Same-session A/A legs (the baseline config re-measured) that calibrate the noise band."""
    concurrent: bool = False
    """The legs were measured at the same time on purpose (e.g. on separate machines or GPUs that share
    nothing). Otherwise reps of different legs must not overlap in time (they would contend)."""


class DeclaredLever(Record):
    """The change a producer says it made."""

    name: str
    """Short name of the change, e.g. ``rmsnorm_fused`` or ``max_batch_size=8``."""
    lever_class: LeverClass
    """``A`` = kernel/implementation; ``B`` = orthogonal serving lever (spec decode, TP, memory
    fraction, quantization, batching, caching)."""
    config_keys: list[str] = Field(default_factory=list)
    """``server_info`` keys the change is expected to alter."""
    kernel_ops: list[str] = Field(default_factory=list)
    """Ops whose implementation the change replaces."""
    components: list[str] = Field(default_factory=list)
    """For bundles: names of the accepted changes combined (lever decomposition)."""


class Headline(Record):
    """The headline number a producer wants to bank."""

    metric: str = "output_throughput"
    """Metric, e.g. ``output_throughput`` (tok/s), ``median_ttft_ms``."""
    value: float | None = None
    """Claimed relative change in percent (e.g. ``66.93``), or None if only the direction is claimed."""
    kind: Literal["e2e", "isolated", "kernel"] = "e2e"
    """What the headline is presented as: an end-to-end win, an isolated op speedup, a kernel win."""
    disclosed_regressions: dict[str, float] = Field(default_factory=dict)
    """Latency metrics the producer states got worse, with the regression it states (percent). A
    disclosed trade-off is not hidden: the auditor checks the stated size instead of flagging it."""
    slo: GoodputSlo | None = None
    """The SLO a goodput headline (``request_goodput``) is measured at; the auditor holds it against the
    one the evidence records."""


class IsolatedSpeedup(Record):
    """An op-level speedup the producer cites, with the op benchmark it comes from."""

    value: float
    """Claimed speedup factor (e.g. ``3.03``)."""
    op: str
    """Op benchmarked."""
    opbench: str | None = None
    """Path of the ``opbench.jsonl`` inside the run directory."""
    baseline_backend: str | None = None
    """Backend the producer says it compared against."""
    candidate_backend: str | None = None
    """Backend the producer says won."""
    op_time_fraction: float | None = None
    """Fraction of e2e time the producer says this op takes (for an Amdahl bound)."""


class Correctness(Record):
    """How the producer says correctness was established."""

    parity: ParityKind = "exact_text"
    """Parity kind checked between baseline and candidate greedy outputs."""
    quality_eval_id: str | None = None
    """Registered quality eval that was completed for this change (lossy mechanisms)."""


class Mechanism(Record):
    """The serving mechanism the change uses (ISB1 vocabulary)."""

    name: MechanismName = "baseline"
    """Mechanism class."""
    variant: str | None = None
    """Variant, e.g. ``int8_dynamic``, ``prompt_lookup``, ``NEXTN``."""
    support: SupportStatus = "supported"
    """Support status the producer claims."""
    draft_model_id: str | None = None
    """Speculative decoding: draft model or method id."""
    acceptance_rate: float | None = None
    """Speculative decoding: acceptance rate the producer measured."""


class ProvidedBaseline(Record):
    """A baseline number supplied from elsewhere (earlier session, a dashboard)."""

    metric: str = "output_throughput"
    """Metric the number is for."""
    value: float
    """The number."""
    source: str = ""
    """Where it comes from."""


class Claim(Record):
    """``<run>/claims/<seq>-<scope>.json``: what a producer wants banked."""

    schema_version: int = SCHEMA_VERSION
    """Version of this record's schema."""
    seq: int = 0
    """Sequence number in the run; verdict files reuse it."""
    scope: Scope
    """Audit scope (design §4)."""
    producer: str = "unknown"
    """Producer agent that submitted the claim."""
    legs: LegRefs = Field(default_factory=LegRefs)
    """Legs the claim rests on."""
    lever: DeclaredLever | None = None
    """The declared change (patch/bundle)."""
    headline: Headline = Field(default_factory=Headline)
    """Headline to bank."""
    isolated_speedup: IsolatedSpeedup | None = None
    """Isolated op speedup cited, if any (harness/patch)."""
    correctness: Correctness = Field(default_factory=Correctness)
    """Correctness basis."""
    mechanism: Mechanism = Field(default_factory=Mechanism)
    """Mechanism and its support status."""
    provided_baseline: ProvidedBaseline | None = None
    """Previously provided baseline to check drift against (baseline scope)."""
    op: str | None = None
    """Profile/harness scope: the op routed for optimization or benchmarked."""
    opbench: str | None = None
    """Harness scope: path of the op benchmark file inside the run directory."""
    report: str | None = None
    """Path of a prose report (markdown) inside the run directory whose numbers must trace."""
    reported: dict[str, Any] = Field(default_factory=dict)
    """Numbers the producer computed. Cross-checked only, never used. Known keys:
    ``legs.<leg>.<metric>.median``, ``delta_pct``, ``conditions.<key>.<leg>``."""


# ------------------------------------------------------------------------------------------ verdict


class EvidenceRef(Record):
    """Points at one raw line that supports a finding."""

    file: str
    """Path relative to the run directory."""
    line: int | None = None
    """1-based line number; None when the finding is about the whole file (e.g. it is missing)."""
    sha256: str | None = None
    """sha256 of the line's bytes (without the newline), so a reviewer can prove what was read."""
    excerpt: str | None = None
    """Up to 200 characters of the line, for humans."""


class Finding(Record):
    """One rule's outcome."""

    code: str
    """Stable finding code (design §3); answer keys refer to these."""
    severity: Severity
    """INFO does not change the verdict; FLAG and FAIL do."""
    message: str
    """One line for humans."""
    gate: str = ""
    """Gate that produced it."""
    measured: Any = None
    """Measured value (re-derived from raw)."""
    threshold: Any = None
    """Threshold the value was compared to."""
    evidence: list[EvidenceRef] = Field(default_factory=list)
    """Raw lines that support the finding."""
    action: Action | None = None
    """Action this finding asks for, if it asks for one."""
    source: Literal["deterministic", "llm"] = "deterministic"
    """Who raised it: the deterministic gates or the LLM persona."""
    omitted: int | None = None
    """Set on a summary finding: this many more findings of the same gate and code were raised but not
    listed (findings are bounded per gate and code); its severity and action are theirs, the worst."""


class MetricStats(Record):
    """Re-derived statistics of one metric over one leg's reps (the rep is the unit)."""

    n: int
    """Number of reps with a value."""
    values: list[float]
    """Per-rep values, in rep order."""
    median: float
    """Median over reps."""
    min: float
    """Minimum over reps."""
    max: float
    """Maximum over reps."""
    spread_pct: float | None
    """(max - min) / median, in percent; None when the median is 0 (a goodput no rep met the SLO in): a
    spread relative to nothing is no number."""
    ci_low: float | None = None
    """Lower bound of a 95% CI of the median (None with fewer than 3 reps)."""
    ci_high: float | None = None
    """Upper bound of a 95% CI of the median."""


class Comparison(Record):
    """Re-derived comparison of one metric between baseline and candidate legs."""

    metric: str
    """Metric compared."""
    higher_is_better: bool
    """Direction of improvement."""
    delta_pct: float
    """(candidate median / baseline median - 1) * 100."""
    p_value: float | None
    """One-sided Welch t-test p on log values, rep level (None with < 2 reps per leg)."""
    noise_band_pct: float
    """Noise band used, in percent."""
    noise_band_source: str
    """``aa_reps`` (calibrated from same-session A/A reps) or ``default``."""
    worst_candidate_vs_best_baseline_pct: float
    """Worst candidate rep vs best baseline rep, in percent (positive = still better)."""
    ratio_ci_low: float | None = None
    """Lower bound of a bootstrap 95% CI of the median ratio."""
    ratio_ci_high: float | None = None
    """Upper bound of a bootstrap 95% CI of the median ratio."""
    significant: bool = False
    """True when the delta is outside the noise band and p < alpha, in the better direction."""


class MlperfCompliance(Record):
    """What an MLPerf compliance audit re-derived from the LoadGen logs (a ``mlperf`` verdict's numbers,
    as ``legs`` and ``comparisons`` are a patch verdict's)."""

    message: str = ""
    """One line for humans: why this verdict."""
    test: str | None = None
    """Compliance test audited (TEST01, TEST04, TEST05), or None when it could not be determined."""
    test_source: Literal["override", "detail", "summary"] | None = None
    """Where ``test`` comes from: ``--test``, or the compliance run's detail/summary log."""
    test_detected: str | None = None
    """Test detected from the compliance logs (even when overridden)."""
    scenario: str | None = None
    """Scenario of the reference run (``effective_scenario``)."""
    compliance_scenario: str | None = None
    """Scenario of the compliance run."""
    score_unit: str | None = None
    """``samples/s`` (Offline/Server) or ``ns`` (SingleStream/MultiStream latency)."""
    score_key: str | None = None
    """MLLOG key the scores come from."""
    reference_score: float | None = None
    """Reference score re-derived from the detail log."""
    compliance_score: float | None = None
    """Compliance score re-derived from the detail log."""
    summary_scores: dict[str, float | None] = Field(default_factory=dict)
    """The same scores as printed in the summary logs (cross-checked)."""
    ratio: float | None = None
    """compliance_score / reference_score in the raw unit."""
    threshold: float | None = None
    """Fraction of the pass band applied for FAIL."""
    intended_threshold: float | None = None
    """Fraction the official rule means to apply (TEST04 streams: FLAG band)."""
    bounds: dict[str, Any] | None = None
    """Pass band in the raw unit: low/high and whether they are inclusive."""
    rule: str | None = None
    """The pass rule applied, in words."""


class Verdict(Record):
    """``<run>/verdicts/<seq>-<scope>.json``: the auditor's answer to one claim (or, scope ``mlperf``, to
    one MLPerf compliance pair: ``audit-mlperf``)."""

    schema_version: int = SCHEMA_VERSION
    """Version of this record's schema."""
    scope: VerdictScope
    """Scope audited."""
    claim: str
    """Path of the claim answered, relative to the run directory (or as given; for ``mlperf`` the pair
    audited)."""
    claim_seq: int = 0
    """Sequence number of the claim."""
    verdict: VerdictLabel
    """PASS, FLAG or FAIL."""
    action: Action
    """What should happen to the claim: the most decisive of ``actions``."""
    actions: list[Action] = Field(default_factory=list)
    """Every action the findings that decide the label ask for, most decisive first (empty for a PASS, and
    in a verdict file without this field: its findings state them). Banking asks all of them."""
    findings: list[Finding] = Field(default_factory=list)
    """Every finding raised, INFO included."""
    legs: dict[str, dict[str, MetricStats]] = Field(default_factory=dict)
    """Per leg, per metric: re-derived statistics over reps."""
    comparisons: list[Comparison] = Field(default_factory=list)
    """Baseline vs candidate comparisons per metric."""
    headline_claimed: float | None = None
    """Headline delta the producer claimed (percent)."""
    headline_rederived: float | None = None
    """Headline delta re-derived from raw (percent): the figure that is banked and shown. Where the auditor
    re-derived it against a fairer reference as well (``headline_references``), the less favourable one."""
    headline_references: list[HeadlineReference] = Field(default_factory=list)
    """Every reference the headline was re-derived against, the claim's own baseline first; empty when
    that baseline is the only one."""
    headline_note: str | None = None
    """Why ``headline_rederived`` is not the delta against the claim's own baseline (None when it is)."""
    lever_declared: LeverClass | None = None
    """Lever class the producer declared."""
    lever_detected: LeverClass | None = None
    """Lever class the auditor detected from the diff and raw signals."""
    lever_signals: list[str] = Field(default_factory=list)
    """What the detection rests on."""
    server_info_diff: dict[str, list[Any]] = Field(default_factory=dict)
    """Keys whose values differ between baseline and candidate ``server_info``: [baseline, candidate]."""
    correctness: VerdictCorrectness = "not_applicable"
    """Correctness status."""
    not_checked: list[str] = Field(default_factory=list)
    """Checks that could not be made, with the reason (never reported as passed)."""
    witnesses: list[LegWitnesses] = Field(default_factory=list)
    """Per leg the claim cites: the second witnesses its reps were held against (what was checked)."""
    seal: Seal = "unsealed"
    """``sealed`` only when the run's seal chain exists and verified with its key; else ``unsealed`` (an
    imported file, a run recorded before sealing, no key): audited as it is, never banked, shown as
    ``PASS (unsealed)``. The default is the cautious one (a verdict file without this field)."""
    degraded: bool = False
    """The auditor itself could not run a part (tool failure, LLM unavailable)."""
    degraded_reasons: list[str] = Field(default_factory=list)
    """Why the verdict is degraded."""
    auditor_version: str = ""
    """Version of the auditor that wrote this verdict."""
    input_digests: dict[str, str] = Field(default_factory=dict)
    """sha256 of every input file read, keyed by path relative to the run directory."""
    digest: str = ""
    """sha256 over the claim and ``input_digests``: same files, same digest, same verdict."""
    mlperf: MlperfCompliance | None = None
    """Scope ``mlperf`` only: the test, scores, ratio and pass band re-derived from the LoadGen logs."""
    goodput: GoodputBasis | None = None
    """The SLO ``request_goodput`` was re-derived at and its source; None when no goodput was re-derived."""

    @model_serializer(mode="wrap")
    def _omit_absent_parts(self, handler: Any) -> Any:
        """A verdict without MLPerf scores or goodput carries neither field (its file reads as before)."""
        data = handler(self)
        if isinstance(data, dict):
            for name in ("mlperf", "goodput"):
                if getattr(self, name) is None:
                    data.pop(name, None)
        return data

    @property
    def shown(self) -> str:
        """The verdict as every surface shows it (``PASS (unsealed)``)."""
        return shown_verdict(self.verdict, self.seal)


# ---------------------------------------------------------------------------------------------- seal

KEY_DIR_ENV = "PERFWARDEN_KEY_DIR"
"""Environment variable naming the key store (default ``~/.local/share/perfwarden/keys``)."""


def key_store_dir() -> Path:
    """Where per-run seal keys live: ``$PERFWARDEN_KEY_DIR``, else ``$XDG_DATA_HOME/perfwarden/keys``
    (``~/.local/share/perfwarden/keys``). Never inside a run directory: a key beside the evidence
    proves nothing."""
    configured = os.environ.get(KEY_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "perfwarden" / "keys"


SEAL_ID_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
"""A seal id: one file name in the key store (no separator, no leading dot or dash). A chain's first
entry names its seal id and the chain lies in the run directory, so the id is input: only an id of this
form is ever turned into a path (``key_store_path``), by the writer and the auditor alike."""
_SEAL_ID = re.compile(SEAL_ID_PATTERN)


def is_seal_id(value: object) -> bool:
    """Whether ``value`` is a seal id (``SEAL_ID_PATTERN``, the whole string)."""
    return isinstance(value, str) and _SEAL_ID.fullmatch(value) is not None


def key_store_path(seal_id: object) -> Path | None:
    """``<key store>/<seal_id>.key``, or None when ``seal_id`` is not a seal id (``"../run/evil"``
    would otherwise name a key inside the run it is meant to verify)."""
    return key_store_dir() / f"{seal_id}.key" if is_seal_id(seal_id) else None


class SealKey(Record):
    """``<key store>/<seal_id>.key`` (mode 0600): the secret a run's seal chain is keyed with.

    The harness creates it when it opens a run's chain and hands it only to the auditor; it is never
    written inside the run directory."""

    schema_version: int = SCHEMA_VERSION
    """Version of this record's schema."""
    seal_id: str = Field(pattern=f"^{SEAL_ID_PATTERN}$")
    """Identifier of the chain this key seals (also in the chain's first entry); unique per run."""
    run_dir: str
    """Absolute path of the run directory when the chain was opened (lets the auditor find the key of
    a run whose chain was deleted)."""
    key: str
    """The HMAC-SHA256 key, 64 hex digits (32 random bytes)."""
    created_at: str
    """ISO-8601 UTC time the key was made."""


class SealHead(Record):
    """``<key>.head`` beside the key: the last entry the harness sealed, kept outside the run directory
    so that cutting entries off the end of the chain is detectable."""

    schema_version: int = SCHEMA_VERSION
    """Version of this record's schema."""
    seal_id: str = Field(pattern=f"^{SEAL_ID_PATTERN}$")
    """Chain this head belongs to."""
    seq: int
    """Sequence number of the last entry written."""
    mac: str
    """MAC of that entry (64 hex digits)."""


# ------------------------------------------------------------------------------------------- writers


def write_json_atomic(path: Path, payload: Any, root: Path | str | None = None) -> None:
    """Write JSON so that readers see either the old file or the whole new one, never a torn file;
    inside ``root`` without following a link (``formats.safe_write``)."""
    safe_write.write_json(path, payload, root)


def jsonl_text(record: dict[str, Any]) -> str:
    """One JSONL line (compact, no NaN). Every object key must be a string: ``json.dumps`` turns ``1``
    and ``"1"`` (or ``True`` and ``"true"``) into one repeated key, and the auditor trusts that a line
    the harness sealed has none."""
    stack: list[Any] = [record]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            bad = next((k for k in item if not isinstance(k, str)), None)
            if bad is not None:
                raise TypeError(f"key {bad!r} is not a string: JSON would write it as one that may repeat another")
            stack.extend(v for v in item.values() if isinstance(v, (dict, list, tuple)))
        else:
            stack.extend(v for v in item if isinstance(v, (dict, list, tuple)))
    return json.dumps(record, allow_nan=False, separators=(",", ":")) + "\n"


EVIDENCE_FILE = "evidence.jsonl"
"""The seal chain and manifest at a sealed run's root (``RunDir.evidence``, ``perfwarden.formats.seal``)."""
EVIDENCE_DIRS = ("legs", "profile", "opbench", "quality")
"""Folders of a run that hold harness evidence."""
RUN_SEARCH_DEPTH = 6
"""How many folders up a file's run root (the folder holding ``evidence.jsonl``) is looked for."""


class SealedEvidenceWrite(RuntimeError):
    """A plain (unsealed) write aimed at a sealed run's evidence: it would make the run look tampered."""


def sealed_run_of(path: Path | str) -> Path | None:
    """The sealed run whose evidence ``path`` is (``evidence.jsonl`` itself, or a file under one of
    ``EVIDENCE_DIRS`` of the nearest folder holding ``evidence.jsonl``); None for anything else
    (``events.jsonl``, claims, a file outside any sealed run)."""
    absolute = Path(os.path.abspath(path))
    for parent in list(absolute.parents)[:RUN_SEARCH_DEPTH]:
        if (parent / EVIDENCE_FILE).is_file():
            rel = absolute.relative_to(parent).parts
            return parent if rel == (EVIDENCE_FILE,) or rel[0] in EVIDENCE_DIRS else None
    return None


def append_unsealed_jsonl(path: Path, record: dict[str, Any], root: Path | str | None = None) -> None:
    """Append one JSON line to a file that is not evidence (``events.jsonl``); the newline is written
    with the record so a crash leaves a torn tail that readers detect, never a line that silently merges
    with the next. Evidence goes through ``seal.append_jsonl``, the one evidence writer (it seals in a
    sealed run): an unsealed line in a sealed run's evidence reads as tampering, so it is refused here
    (``SealedEvidenceWrite``) before anything is written."""
    run = sealed_run_of(path)
    if run is not None:
        raise SealedEvidenceWrite(f"{str(path)!r} is evidence of the sealed run {str(run)!r}: append it with "
                                  "seal.append_jsonl, which seals it")
    safe_write.append_line(path, jsonl_text(record).encode("utf-8"), root)


class RunDir:
    """Paths of a run directory (design §2), in one place."""

    def __init__(self, root: Path | str):
        self.root = Path(root)

    @property
    def manifest(self) -> Path:
        return self.root / "run.json"

    @property
    def objective(self) -> Path:
        """``objective.json``: what the run optimizes and its goodput SLO, sealed at the run's start."""
        return self.root / "objective.json"

    def leg_dir(self, leg: str) -> Path:
        return self.root / "legs" / leg

    def leg_spec(self, leg: str) -> Path:
        return self.leg_dir(leg) / "leg.json"

    def server_info(self, leg: str) -> Path:
        return self.leg_dir(leg) / "server_info.json"

    def server_log(self, leg: str) -> Path:
        return self.leg_dir(leg) / "server.log"

    def bench_runs(self, leg: str) -> Path:
        return self.leg_dir(leg) / "bench_runs.jsonl"

    def loadgen_rep(self, leg: str, rep: int) -> Path:
        return self.leg_dir(leg) / "loadgen" / f"rep-{rep}"

    def outputs(self, leg: str) -> Path:
        return self.leg_dir(leg) / "outputs.jsonl"

    def opbench(self, op: str) -> Path:
        return self.root / "opbench" / op / "opbench.jsonl"

    @property
    def profile(self) -> Path:
        return self.root / "profile" / "profile.jsonl"

    def quality(self, eval_id: str, leg: str | None = None) -> Path:
        """``quality/<eval>@<leg>.json`` when a leg is named (several legs can run one eval), else
        ``quality/<eval>.json``."""
        return self.root / "quality" / (f"{eval_id}@{leg}.json" if leg else f"{eval_id}.json")

    def claim(self, seq: int, scope: str) -> Path:
        return self.root / "claims" / f"{seq:03d}-{scope}.json"

    def verdict(self, seq: int, scope: str) -> Path:
        return self.root / "verdicts" / f"{seq:03d}-{scope}.json"

    @property
    def events(self) -> Path:
        return self.root / "events.jsonl"

    @property
    def writer_lock(self) -> Path:
        """Locked (``flock``) by the one command writing the run (``perfwarden.harness.run_lock``)."""
        return self.root / "writer.lock"

    @property
    def writer_holder(self) -> Path:
        """Who holds ``writer.lock``: pid, host, command, start (``run_lock.LockHolder``)."""
        return self.root / "writer.json"

    @property
    def evidence(self) -> Path:
        """The seal chain and manifest of everything the harness wrote (``perfwarden.formats.seal``)."""
        return self.root / "evidence.jsonl"

    def legs(self) -> list[str]:
        base = self.root / "legs"
        return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
