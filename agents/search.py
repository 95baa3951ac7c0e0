"""The config-tuner's search as an Optuna study.

The target's config model is the search space: each knob searched takes its allowed values (the true
baseline's value included), an ordinal knob as a rung index so the sampler can exploit the order. What
is searched by default is decided by lever class and losslessness (:func:`default_knobs`): every
lossless knob the model marks for the default search, plus lossless speculative decoding (n-gram
prompt lookup, SGLang's NGRAM), which changes no output under greedy decoding. Caches and lossy knobs
are searched only when named (``--levers``).

Each trial is one A/B step: the current best banked configuration (baseline leg) against the trial's
configuration (candidate leg), so the patch claim declares exactly the knobs the trial changes. The
auditor's verdict is the trial's feasibility: only a PASS banks the trial as the new best; any other
verdict is told to the study as infeasible, so the sampler learns where the surface lies without ever
treating a refused win as a result. A trial's value is the configuration's objective metric (throughput,
goodput or a tail latency: the run's sealed objective) as a factor of the true baseline: the best's factor
times the auditor's re-derived delta of the step; the study maximizes it, or minimizes it for a latency.

The study lives in the run's SQLite (``checkpoints.sqlite``, beside the LangGraph checkpoint) and is
replayed idempotently on resume: a trial asked but never recorded in the checkpoint (a crash between
the two) is handed out again instead of asking a new one, a trial already told is not told twice, and
each ask seeds its sampler from (run seed, trial number), so a resumed run draws what the uninterrupted
run drew. Coordinate descent (``config_tuner.next_step``) stays as the ``coordinate`` sampler: its
steps are enqueued into the same study, so both leave the same history for the report and the plot.
``random`` (uniform draws) and ``grid`` (every grid point once, in a seeded order, enqueued the same way)
are the baselines a model-based search has to beat (benchmarks/search_quality.py).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.trial import TrialState

from perfwarden.agents.base import BankedChange, Proposal
from perfwarden.formats.verdict_summary import VerdictSummary
from perfwarden.harness import run_lock
from perfwarden.harness.target_config import TargetConfig

STUDY_NAME = "perfwarden-config-search"
SamplerName = Literal["tpe", "random", "grid", "coordinate"]
"""``tpe`` models the surface (the default); ``random`` draws uniformly and ``grid`` visits every grid point
once in a seeded random order (baselines a model-based search must beat: benchmarks/search_quality.py);
``coordinate`` is one knob at a time from the best."""
MAX_ASKS = 64
"""Asks per pick before the search counts as converged: a sampler that keeps drawing configurations
already measured against the current best has nothing new to say."""
FEASIBLE, INFEASIBLE = 0.0, 1.0
CONSTRAINT_KEY = "audit"
"""The trial's one constraint: 0 when the auditor passed and the step was banked, 1 otherwise."""
FACTOR_ATTR = "against_factor"

optuna.logging.set_verbosity(optuna.logging.WARNING)


# ------------------------------------------------------------------------------------------- space


def default_knobs(model: type[TargetConfig]) -> list[str]:
    """Knobs searched when none are named: lossless ones the model marks for the default search, and
    lossless speculative decoding (it changes no greedy output; its draft is documented)."""
    out = []
    for name, spec in model.specs().items():
        if not spec.lossless or not model.allowed_values(name):
            continue
        if spec.default_search or spec.mechanism == "speculative_decoding":
            out.append(name)
    return out


def study_space(model: type[TargetConfig], knob_values: dict[str, tuple[Any, ...]],
                base: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """Knob -> every value a trial may give it: the searched values plus the true baseline's (a trial
    may leave a knob where the baseline has it). Ordinal knobs ascending."""
    space: dict[str, tuple[Any, ...]] = {}
    for knob, values in knob_values.items():
        merged = list(values)
        if base.get(knob) is not None and not any(repr(v) == repr(base[knob]) for v in merged):
            merged.append(base[knob])
        if model.spec(knob).ordered and all(isinstance(v, (int, float)) for v in merged):
            merged.sort()
        space[knob] = tuple(merged)
    return space


def distributions(model: type[TargetConfig], space: dict[str, tuple[Any, ...]]) -> dict[str, BaseDistribution]:
    """Optuna distributions: an ordinal knob as its rung index, any other as a categorical of reprs
    (Optuna's categoricals hold only None/bool/int/float/str)."""
    out: dict[str, BaseDistribution] = {}
    for knob, values in space.items():
        if model.spec(knob).ordered and len(values) > 1:
            out[knob] = IntDistribution(0, len(values) - 1)
        else:
            out[knob] = CategoricalDistribution([repr(v) for v in values])
    return out


def decode(model: type[TargetConfig], space: dict[str, tuple[Any, ...]], params: dict[str, Any]) -> dict[str, Any]:
    """A trial's params as knob values (a trial of the study has a param for every knob of its space)."""
    out: dict[str, Any] = {}
    for knob, values in space.items():
        raw = params[knob]
        if model.spec(knob).ordered and len(values) > 1:
            out[knob] = values[int(raw)]
        else:
            out[knob] = next(v for v in values if repr(v) == raw)
    return out


def encode(model: type[TargetConfig], space: dict[str, tuple[Any, ...]], config: dict[str, Any]) -> dict[str, Any]:
    """Knob values as a trial's params (for enqueuing a coordinate-descent step)."""
    out: dict[str, Any] = {}
    for knob, values in space.items():
        index = next(i for i, v in enumerate(values) if repr(v) == repr(config[knob]))
        out[knob] = index if model.spec(knob).ordered and len(values) > 1 else repr(values[index])
    return out


def current_values(space: dict[str, tuple[Any, ...]], base: dict[str, Any], best: dict[str, Any]) -> dict[str, Any]:
    """Every searched knob as the current best configuration has it."""
    return {knob: best.get(knob, base.get(knob)) for knob in space}


def change_from(config: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """The knobs a trial changes relative to the current best (its A/B's declared change)."""
    return {k: v for k, v in config.items() if repr(v) != repr(current.get(k))}


# ------------------------------------------------------------------------------------------- study


def storage_url(run: Path) -> str:
    """The run's SQLite: the same file as the LangGraph checkpoint (its own tables beside LangGraph's)."""
    return f"sqlite:///{Path(run) / 'checkpoints.sqlite'}"


def unvisited_grid_point(study: optuna.Study, dists: dict[str, BaseDistribution], seed: int,
                         number: int) -> dict[str, Any] | None:
    """A grid point no trial of the study has drawn yet, chosen by (run seed, trial number); None when every
    one has been. (Optuna's ``GridSampler`` stops the study when its grid is done, which its ask-and-tell
    interface answers with an error.)"""
    grid = grid_of(dists)
    visited = {repr(sorted(t.params.items())) for t in study.get_trials(deepcopy=False)}
    left = [point for point in (dict(zip(grid, values)) for values in itertools.product(*grid.values()))
            if repr(sorted(point.items())) not in visited]
    return random.Random(_sub_seed(seed, number)).choice(left) if left else None


def grid_of(dists: dict[str, BaseDistribution]) -> dict[str, list[Any]]:
    """Every value each param can take (the grid ``GridSampler`` walks)."""
    out: dict[str, list[Any]] = {}
    for name, dist in dists.items():
        if isinstance(dist, IntDistribution):
            out[name] = list(range(dist.low, dist.high + 1))
        else:
            out[name] = list(dist.choices)  # type: ignore[attr-defined]  # every other one is categorical
    return out


def _sub_seed(seed: int, number: int) -> int:
    digest = hashlib.sha256(f"{seed}:{number}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def make_sampler(name: SamplerName, seed: int, number: int, n_startup: int = 8) -> optuna.samplers.BaseSampler:
    """The sampler for trial ``number``: seeded by (run seed, trial number), so what it draws depends only on
    the stored history (a resumed run draws what the uninterrupted one did). ``coordinate`` and ``grid``
    trials are enqueued (:func:`unvisited_grid_point`); their sampler only fills params never left open."""
    sub_seed = _sub_seed(seed, number)
    if name != "tpe":
        return optuna.samplers.RandomSampler(seed=sub_seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # Constraints are read from each trial (``Trial.set_constraint``): the audit's feasibility.
        return optuna.samplers.TPESampler(seed=sub_seed, multivariate=True, n_startup_trials=n_startup)


def open_study(run: Path, url: str | None = None, higher_is_better: bool = True) -> optuna.Study:
    """The run's study (created on first use), in the direction its objective improves. In the run's SQLite
    only by the process holding the run's writer lock (design §2): two writers telling one study its trials
    corrupt it."""
    if url is None:
        run_lock.require(run, "the search study")
    return optuna.create_study(study_name=STUDY_NAME, storage=url or storage_url(run),
                               direction="maximize" if higher_is_better else "minimize", load_if_exists=True)


@dataclass(frozen=True)
class Asked:
    """A trial handed to the graph: its number and the knobs it changes against the best."""

    number: int
    config: dict[str, Any]
    change: dict[str, Any]


def best_factor(banked: list[BankedChange]) -> float:
    """The current best's objective metric as a factor of the true baseline: every banked config step's audited delta
    compounded (a kernel step's delta too: it was measured against the best before it)."""
    factor = 1.0
    for b in banked:
        if b.headline_rederived_pct is not None:
            factor *= 1.0 + b.headline_rederived_pct / 100.0
    return factor


def _trial_id(study: optuna.Study, number: int) -> int:
    return study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number)


def ask(study: optuna.Study, model: type[TargetConfig], space: dict[str, tuple[Any, ...]], current: dict[str, Any],
        factor: float, in_state: set[int], measured: dict[str, float | None], sampler: SamplerName, seed: int,
        coordinate_step: Callable[[], dict[str, Any] | None] | None = None, n_startup: int = 8) -> Asked | None:
    """The next trial to measure, or None when the search converged.

    ``in_state``: trial numbers the checkpoint already holds proposals for; a RUNNING trial outside it was
    asked before a crash and is handed out again. ``measured``: changes (``change_key``) already measured
    against the current best -> their value (None: no value); a draw of one of those, or of the best
    itself, is told at once and the sampler asked again (at most ``MAX_ASKS`` times)."""
    dists = distributions(model, space)
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if trial.number not in in_state and set(trial.params) == set(dists):
            config = decode(model, space, trial.params)
            return Asked(trial.number, config, change_from(config, current))
    for _ in range(MAX_ASKS):
        number = len(study.get_trials(deepcopy=False))
        if sampler == "coordinate":
            step = coordinate_step() if coordinate_step else None
            if step is None:
                return None
            study.enqueue_trial(encode(model, space, {**current, **step}), skip_if_exists=False)
        if sampler == "grid":
            point = unvisited_grid_point(study, dists, seed, number)
            if point is None:
                return None  # every configuration of the grid was measured
            study.enqueue_trial(point, skip_if_exists=False)
        study.sampler = make_sampler(sampler, seed, number, n_startup)
        drawn = study.ask(dists)
        study._storage.set_trial_user_attr(drawn._trial_id, FACTOR_ATTR, factor)
        config = decode(model, space, drawn.params)
        change = change_from(config, current)
        key = change_key(change)
        if change and key not in measured:
            return Asked(drawn.number, config, change)
        value = factor if not change else measured.get(key)
        _tell(study, drawn.number, value, FEASIBLE if not change else INFEASIBLE)
        if sampler == "coordinate":
            return None  # the policy proposed a step it already measured: it has converged
    return None


def change_key(change: dict[str, Any]) -> str:
    return repr(sorted(change.items()))


def _tell(study: optuna.Study, number: int, value: float | None, constraint: float) -> None:
    """Tell a finished trial once (a repeat after a crash is a no-op)."""
    trial = study._storage.get_trial(_trial_id(study, number))  # asked by this process: it exists
    if trial.state != TrialState.RUNNING:
        return
    optuna.trial.Trial(study, trial._trial_id).set_constraint(CONSTRAINT_KEY, constraint)
    if value is None or not math.isfinite(value):
        study.tell(number, state=TrialState.FAIL)
    else:
        study.tell(number, value)


def trial_outcome(p: Proposal, verdicts: list[VerdictSummary], factor: float) -> tuple[float | None, float]:
    """A finished proposal's (value, constraint): the audited delta applied to the factor of the best it was
    measured against; feasible only when the last patch verdict PASSed and the proposal was banked."""
    own = [v for v in verdicts if v.proposal == p.id and v.scope == "patch"]
    last = own[-1] if own else None
    if last is None:
        return None, INFEASIBLE
    delta = last.headline_rederived
    if delta is None and last.headline_claimed is not None and any(f.code == "DELTA_REGRESSION" for f in last.findings):
        # A regression the auditor found but could not size (a goodput of zero: every request outside the
        # SLO leaves no ratio to re-derive). The study is told the producer's own measured delta, never
        # banked: told as a failed trial it taught TPE nothing, and TPE kept drawing configurations that
        # break the SLO (search_quality.py --objective goodput: the same steps as random search, every seed).
        delta = last.headline_claimed
    if delta is None:
        return None, INFEASIBLE
    value = factor * (1.0 + delta / 100.0)
    return value, FEASIBLE if p.status == "banked" else INFEASIBLE


def tell_finished(study: optuna.Study, proposals: list[Proposal], verdicts: list[VerdictSummary]) -> int:
    """Tell the study every proposal with a trial that has finished (banked, rejected or skipped). Returns
    how many were told now."""
    told = 0
    for p in proposals:
        if p.trial is None or p.status not in ("banked", "rejected", "skipped"):
            continue
        try:
            trial = study._storage.get_trial(_trial_id(study, p.trial))
        except KeyError:  # a checkpoint naming a trial this study never asked (a copied or crafted run)
            continue
        if trial.state != TrialState.RUNNING:
            continue
        factor = float(trial.user_attrs.get(FACTOR_ATTR, 1.0))
        value, constraint = trial_outcome(p, verdicts, factor)
        _tell(study, p.trial, value, constraint)
        told += 1
    return told


def measured_against(proposals: list[Proposal], verdicts: list[VerdictSummary], best: dict[str, Any],
                     factor: float) -> dict[str, float | None]:
    """Changes already proposed against ``best`` (finished or in flight) -> their value if known."""
    out: dict[str, float | None] = {}
    for p in proposals:
        if p.kind == "config" and p.against == best:
            out[change_key(p.config)] = trial_outcome(p, verdicts, factor)[0]
    return out


# ----------------------------------------------------------------------------------------- history


@dataclass(frozen=True)
class HistoryRow:
    """One trial as the report shows it."""

    number: int
    value: float | None
    """The objective metric as a factor of the true baseline (None: no audited number)."""
    feasible: bool
    """The auditor passed it and it was banked."""
    best: float
    """The best banked factor after this trial."""


def history(proposals: list[Proposal], verdicts: list[VerdictSummary]) -> list[HistoryRow]:
    """Finished config steps in order, from the run's state (so both samplers, and a run whose study
    file was lost, plot the same way): a step's value is the factor of the configuration it was measured
    against times its audited delta; the best is the running factor of the banked configuration."""
    factors: dict[str, float] = {change_key({}): 1.0}
    rows: list[HistoryRow] = []
    best = 1.0
    for p in proposals:
        if p.kind != "config" or p.status not in ("banked", "rejected", "skipped"):
            continue
        factor = factors.get(change_key(p.against))
        value, constraint = trial_outcome(p, verdicts, factor) if factor is not None else (None, INFEASIBLE)
        feasible = False
        if value is not None and constraint <= 0.0:
            feasible, best = True, value
            factors[change_key({**p.against, **p.config})] = value
        rows.append(HistoryRow(len(rows), value, feasible, best))
    return rows
