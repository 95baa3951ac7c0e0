"""``perfwarden run``: the autonomous optimization run, shown as it happens, with a resumable checkpoint.

The terminal shows each verdict as it lands (claim, verdict, the headline the auditor re-derived, the
finding codes; a step's audits folded into one line once the step is over), a progress bar while reps are measured, and the budget left. Output of the in-process
lab work (torch's profiler, weight loading, LoadGen) goes to RUN/logs/lab.log, not to the terminal.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from perfwarden.agents.config_tuner import parse_levers
from perfwarden.auditor.claim_file import ClaimError
from perfwarden.formats.objective import OBJECTIVES
from perfwarden.formats.safe_write import RefusedWrite
from perfwarden.formats.seal import SealError
from perfwarden.formats.slo import SloError, parse_slo
from perfwarden.harness import run_lock
from perfwarden.harness.target_config import TARGET_CONFIGS, ConfigError, SGLangConfig, parse_set_args
from perfwarden.orchestrator.exit_codes import ExitCode, disk_full, no_space_message
from perfwarden.orchestrator.lab_spec import lab_for
from perfwarden.orchestrator.render import VERDICT_STYLE, print_error, safe_text
from perfwarden.orchestrator.settings import RunSettings, settings_error
from perfwarden.orchestrator.step_lines import StepLine, StepLines

if TYPE_CHECKING:  # the run's machinery is imported only when a run starts (other commands stay fast)
    from perfwarden.formats.records import Claim
    from perfwarden.formats.verdict_summary import VerdictSummary
    from perfwarden.harness.labs.lab import LegPlan
    from perfwarden.orchestrator.state import RunState


def make_lab(settings: RunSettings, on_rep=None, engine_python: str | None = None):
    """The target's lab; ``engine_python`` (from ``check_engine``, never from the run): the interpreter of
    the sglang or vllm target's own environment."""
    return lab_for(settings, on_rep=on_rep, engine_python=engine_python)


def make_attacker(settings: RunSettings):
    """The red-team producer (redteam/red_team.py), when ``--red-team`` asks for it."""
    if not settings.red_team:
        return None
    # lazy: langgraph (the orchestrator extra): only when a run starts
    from perfwarden.orchestrator.runner import RunUsageError

    try:
        from perfwarden.redteam import red_team  # lazy: optional: a missing extra is a usage error, below
    except ImportError as exc:
        raise RunUsageError(f"--red-team needs the red-team producer (perfwarden.redteam.red_team): {exc}") from None
    return red_team.make_producer(settings)


def budget_text(remaining_s: float) -> str:
    """The one way the budget left is shown (progress bar, measuring line, verdict line)."""
    return f"budget {remaining_s / 60:.1f} min left" if remaining_s > 0 else "budget spent"


class TerminalWatcher:
    """The run as a person watches it: one line per step (its audits folded, ``orchestrator/step_lines.py``)
    and per other verdict, a progress bar per measurement.

    The budget left comes from the run itself (``RunContext.remaining_s``, counted from the run's start
    in its checkpoint, across resumes), handed over at every node: the terminal never counts its own."""

    def __init__(self, console: Console, started: float):
        self.console = console
        self.started = started
        self.deadline: float | None = None
        """Clock time the run's budget runs out, as the run last said (``node``)."""
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("[dim]{task.fields[budget]}"),
                                 console=console, transient=True, redirect_stdout=False, redirect_stderr=False)
        self.task: TaskID | None = None
        """The progress bar of the measurement under way (None between measurements)."""
        self.steps = StepLines()
        """A step's audits are folded into one line, printed when the step is over."""
        self.remaining_s = 0.0

    def _budget(self) -> str:
        return budget_text(self.deadline - time.time()) if self.deadline is not None else "budget -"

    def node(self, name: str, detail: str, remaining_s: float) -> None:
        self.deadline = time.time() + remaining_s
        self.remaining_s = remaining_s
        for line in self.steps.node(name):
            self._print_verdict(line)
        if name in ("baseline", "profile", "op_benchmarker", "bundle", "quality_eval", "red_team"):
            self.console.print(safe_text((f"{time.time() - self.started:6.0f}s ", "dim"), (name, "cyan"),
                                             f" {detail}" if detail else ""))

    def measuring(self, legs: list[LegPlan], reps: int) -> None:
        self._stop()
        names = ", ".join(p.leg for p in legs)
        if not self.console.is_terminal:  # a log file or a pipe: one line, no bar
            self.console.print(safe_text((f"{time.time() - self.started:6.0f}s ", "dim"),
                                             f"measuring {names} x{reps} reps ({self._budget()})"))
            return
        self.progress.start()
        self.task = self.progress.add_task(f"measuring {names}", total=reps * len(legs), budget=self._budget())

    def rep(self, leg: str, rep: int, status: str) -> None:
        if self.task is not None:
            self.progress.update(self.task, advance=1, description=f"{leg}: rep {rep} {status}",
                                 budget=self._budget())

    def verdict(self, summary: VerdictSummary, claim: Claim, remaining_s: float) -> None:
        self._stop()
        self.remaining_s = remaining_s
        for line in self.steps.verdict(summary, summary.lever or claim.op or summary.scope):
            self._print_verdict(line)

    def _print_verdict(self, line: StepLine) -> None:
        """One line per step: its last verdict, and how many audits the step took when more than one."""
        self._stop()
        summary, what = line.verdict, line.what
        head = ""
        if summary.headline_rederived is not None:
            head = (f"{summary.headline_rederived:.2f}x op time" if summary.scope == "harness"
                    else f"{summary.headline_rederived:+.2f}% {summary.headline_metric or ''}".rstrip())
            if summary.headline_note:  # the conservative figure: against same-config legs, not the cited baseline
                head += " (vs same-config legs: the baseline was handicapped)"
        codes = ", ".join(sorted(summary.codes())) or "-"
        self.console.print(safe_text(
            (f"{time.time() - self.started:6.0f}s ", "dim"), (f"[{summary.seq:03d}] ", "dim"),
            (f"{summary.scope:<8}", "bold"), f" {what}  ", (summary.shown, VERDICT_STYLE[summary.verdict]),
            f" {summary.action}", f"  {head}" if head else "", ("  codes: ", "dim"), codes,
            (f"  [{line.audits} audits]" if line.audits > 1 else "", "dim"),
            (f"  ({budget_text(self.remaining_s)})", "dim")))

    def _stop(self) -> None:
        if self.task is not None:
            self.progress.remove_task(self.task)
            self.task = None
            self.progress.stop()


def _terminal() -> Console:
    """A console on its own copy of stderr: lab output redirected away from fd 2 cannot reach it, and
    the display is never redirected into the lab's log."""
    try:
        if sys.stderr.fileno() != 2:  # stderr already redirected in-process (a test runner): use it as is
            raise OSError("stderr is not fd 2")
        return Console(file=os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8", errors="replace"),
                       stderr=True, soft_wrap=True, highlight=False)
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        return Console(stderr=True, soft_wrap=True, highlight=False)


ENGINE_TARGETS = ("sglang", "vllm")
"""Targets served by an engine from its own environment: ``--model`` and the interpreter flag apply."""


def check_engine(settings: RunSettings, engine_python: str | None, resume: Path | None) -> tuple[RunSettings, str]:
    """An SGLang or vLLM run's model path and interpreter, checked before anything runs (``EngineEnvError``
    otherwise): the settings with kernels off (perfwarden has no profiler or op overrides inside either
    engine) and the resolved interpreter. The interpreter comes from the person running perfwarden, never
    from the run: a resume is told it again (the flag or the environment variable) or refused. On a resume,
    the weights the run's settings name may not lie inside the run (its author's files)."""
    from perfwarden.harness import sglang_target, vllm_target

    engine = vllm_target if settings.target == "vllm" else sglang_target
    flag = "--vllm-python" if settings.target == "vllm" else "--sglang-python"
    error = vllm_target.VLLMEnvError if settings.target == "vllm" else sglang_target.SGLangEnvError
    if resume is not None and not engine_python and not os.environ.get(engine.PYTHON_ENV):
        label = "vLLM" if settings.target == "vllm" else "SGLang"
        raise error(f"this run serves {label}: name the {label} interpreter to resume it with, "
                    f"{flag} PY or {engine.PYTHON_ENV} (a run's files never name a program to run)")
    if resume is not None and settings.target == "vllm" and not settings.model:
        raise error("the run's settings name no model; a vllm run records the weights it serves")
    find = vllm_target.find_vllm_python if settings.target == "vllm" else sglang_target.find_sglang_python
    if resume is None:  # the interpreter first: the vllm target's default model is converted on a first run
        python, _version = find(engine_python)
        return settings.model_copy(update={"model": engine.check_model_path(settings.model), "kernels": False}), python
    model = engine.check_model_path(settings.model)  # a resume names its model: nothing to convert
    inside = Path(os.path.realpath(resume))
    draft = (SGLangConfig.of(settings.base_config).speculative_draft_model_path if settings.target == "sglang"
             else None)  # vLLM's speculative decoding here is n-gram: no draft weights
    for what, path in (("model", model), ("speculative_draft_model_path", draft)):
        if path and Path(os.path.realpath(path)).is_relative_to(inside):
            raise error(f"the run's settings name weights inside the run ({what}={str(path)!r}); "
                        "a run's own files are never loaded as a model")
    python, _version = find(engine_python)  # only once the run's weights are known not to be its own files
    return settings.model_copy(update={"model": model, "kernels": False}), python


def _check_options(err: Console, target: str, model: str | None, sglang_python: str | None,
                   resume: Path | None, vllm_python: str | None = None) -> None:
    """Options that contradict each other are a usage error (exit 2) before anything is read."""
    problem = None
    if target not in ("embedded", "sglang", "vllm", "synthetic"):
        problem = f"unknown target {target!r} (embedded, sglang, vllm, synthetic)"
    elif resume is None and target not in ENGINE_TARGETS and (model or sglang_python or vllm_python):
        problem = (f"--model and --sglang-python are sglang options (--model and --vllm-python vllm options); "
                   f"target {target!r} serves its own model")
    elif resume is None and ((target == "vllm" and sglang_python) or (target == "sglang" and vllm_python)):
        problem = f"--sglang-python is the sglang target's option, --vllm-python the vllm target's (target {target!r})"
    elif resume is not None and model:
        problem = "--model: a resumed run serves the model it started with"
    elif sglang_python and vllm_python:
        problem = "give either --sglang-python or --vllm-python"
    if problem:
        print_error(err, problem)
        raise typer.Exit(ExitCode.USAGE)


def _new_settings(err: Console, settings_kw: dict, set_: list[str]) -> RunSettings:
    """The settings a new run starts with, from its options and ``--set`` knobs; exit 3 when invalid."""
    from pydantic import ValidationError

    try:
        if set_:
            raw = parse_set_args(set_)
            validated = TARGET_CONFIGS.get(settings_kw["target"], TARGET_CONFIGS["embedded"]).validate_knobs(dict(raw))
            settings_kw = {**settings_kw, "base_config": {key: getattr(validated, key) for key in raw}}
    except (ConfigError, ValueError) as exc:
        print_error(err, f"bad --set: {exc}")
        raise typer.Exit(ExitCode.INVALID) from None
    try:
        return RunSettings(**settings_kw)
    except ValidationError as exc:
        print_error(err, settings_error(exc, "the run's settings are invalid"))
        raise typer.Exit(ExitCode.INVALID) from None


def _objective_options(err: Console, objective: str | None, slo: str | None) -> dict[str, Any]:
    """``--objective`` and ``--slo`` as settings fields: an unknown objective is a usage error (exit 2), an SLO
    that does not parse bad input (exit 3); whether the two go together the settings decide."""
    out: dict[str, Any] = {}
    if objective is not None:
        if objective not in OBJECTIVES:
            print_error(err, f"unknown objective {objective!r} ({', '.join(OBJECTIVES)})")
            raise typer.Exit(ExitCode.USAGE)
        out["objective"] = objective
    if slo is not None:
        try:
            out["slo"] = parse_slo(slo)
        except SloError as exc:
            print_error(err, f"bad --slo: {exc}")
            raise typer.Exit(ExitCode.INVALID) from None
    return out


def _resumed_settings(err: Console, resume: Path, asked: dict[str, Any]) -> RunSettings:
    """The settings the resumed run started with (exit 3 when unreadable), its objective held against what
    was asked (``_check_resumed_objective``)."""
    from perfwarden.orchestrator.runner import RunUsageError, read_settings  # lazy: langgraph

    try:
        settings = read_settings(resume)
    except RunUsageError as exc:
        print_error(err, exc)
        raise typer.Exit(ExitCode.INVALID) from None
    _check_resumed_objective(err, settings, asked)
    return settings


def _llm_client(settings: RunSettings) -> Any:
    """The LLM client of ``--llm`` (None without one)."""
    if not settings.llm_model:
        return None
    from perfwarden.harness.llm_client import LLMClient  # lazy: openai: only with --llm

    return LLMClient(model=settings.llm_model, timeout_s=settings.llm_timeout_s,
                     max_retries=settings.llm_max_retries, max_tokens=settings.llm_max_tokens)


def _check_resumed_objective(err: Console, settings: RunSettings, asked: dict[str, Any]) -> None:
    """A resumed run optimizes what it started with: an ``--objective`` or ``--slo`` naming anything else is
    refused (exit 3), since the steps already banked were judged at the objective the run sealed."""
    for field in ("objective", "slo"):
        if field in asked and asked[field] != getattr(settings, field):
            print_error(err, f"the run optimizes {settings.run_objective().describe()}, fixed when it started; "
                             f"--{field} cannot change it on --resume (start a new run)")
            raise typer.Exit(ExitCode.INVALID)


def _engine_interpreter(err: Console, settings: RunSettings, engine_python: str | None,
                        resume: Path | None) -> tuple[RunSettings, str | None]:
    """``check_engine`` for an sglang or vllm run (exit 3 with its message; ``engine_python`` is whichever
    interpreter flag was given); other targets take no interpreter."""
    from perfwarden.harness.targets import EngineEnvError

    if settings.target not in ENGINE_TARGETS:
        if engine_python:
            print_error(err, f"--sglang-python and --vllm-python are engine options; the run in {str(resume)!r} "
                             f"serves {settings.target!r}")
            raise typer.Exit(ExitCode.USAGE)
        return settings, None
    try:
        kernels_asked = settings.kernels
        settings, python = check_engine(settings, engine_python, resume)
    except EngineEnvError as exc:
        print_error(err, exc)
        raise typer.Exit(ExitCode.INVALID) from None
    if kernels_asked:
        err.print(safe_text(("note", "yellow"), f": the {settings.target} target has no profiler or op overrides in "
                            "perfwarden, so this run tunes server arguments only (--no-kernels)"))
    return settings, python


def _print_outcome(state: RunState, run_dir: Path | str, started: float, metric: str) -> None:
    """What the run banked and refused, the bundle, and where the report is (stdout); ``metric``: the run's
    objective, which every step's headline states."""
    console = Console(soft_wrap=True, highlight=False)
    console.print(safe_text(f"run directory: {run_dir}"))
    for b in state.get("banked", []):
        delta = b.headline_rederived_pct
        console.print(safe_text(("banked", "green"), f" class {b.lever_class} {b.name}: "
                                    + (f"{delta:+.2f}% {metric}" if delta is not None else "")
                                    + f" ({b.verdict})"))
    for r in state.get("rejected", []):
        console.print(safe_text(("refused", "red"), f" {r.name}: {r.reason} ({r.verdict or '-'})"))
    from perfwarden.orchestrator.report import SEARCH_STOPS  # the run's machinery: loaded only once a run ran

    from perfwarden.agents.kernel_extractor import NO_KERNEL_PATH

    cold = next((note for note in state.get("notes", []) if note.startswith("profile:") and NO_KERNEL_PATH in note),
                None)
    if cold is not None:  # the profile found nothing worth a kernel: say so, or the kernel path just never shows
        console.print(safe_text(("profile", "yellow"), cold.removeprefix("profile")))
    stop = next((note for note in state.get("notes", []) if SEARCH_STOPS in note), None)
    if stop is not None:  # why the search ended before the producers ran out of changes
        console.print(safe_text(("search stopped", "yellow"), f": {stop}"))
    bundle = next((v for v in reversed(state.get("verdicts", [])) if v.scope == "bundle"), None)
    if bundle is not None and bundle.headline_rederived is not None:
        console.print(safe_text(("bundle", "bold"), f" vs the true baseline: {bundle.verdict} "
                                    f"{bundle.headline_rederived:+.2f}% {metric}"))
    console.print(safe_text(f"report: {Path(run_dir) / 'report.md'}  ({time.time() - started:.0f}s)"))


def _settings_options(target: str, model: str | None, budget_minutes: float | None, levers: str | None,
                      no_kernels: bool, red_team: bool, reps: int | None, baseline_remeasures: int | None,
                      llm: str | None, sampler: str | None, study_batch: int | None, samples: int | None = None,
                      max_tokens: int | None = None) -> dict[str, Any]:
    """The settings the command line names (an option left out keeps the settings' default)."""
    named: dict[str, Any] = {"target": target, "model": model, "budget_minutes": budget_minutes, "reps": reps,
                             "offline_samples": samples, "max_tokens": max_tokens,
                             "max_baseline_remeasures": baseline_remeasures, "sampler": sampler,
                             "study_batch": study_batch, "llm_model": llm or None,
                             "kernels": False if no_kernels else None, "red_team": True if red_team else None}
    if levers is not None:
        named["levers"] = [x.strip() for x in levers.split(",") if x.strip()]
    return {key: value for key, value in named.items() if value is not None or key in ("target", "model")}


def run(
    target: str = typer.Option("embedded", "--target", help="embedded (real SmolLM2 on CPU), sglang (GPU host: "
                               "needs --model), vllm (its own environment: --vllm-python) or synthetic."),
    model: str = typer.Option(None, "--model", help="sglang, vllm: directory of the weights to serve (vllm: "
                              "default the converted SmolLM2)."),
    sglang_python: str = typer.Option(None, "--sglang-python", help="sglang: the python of SGLang's own "
                                      "environment (default: $PERFWARDEN_SGLANG_PYTHON, else this python; "
                                      "--resume needs one of the two: a run never names it)."),
    vllm_python: str = typer.Option(None, "--vllm-python", help="vllm: the python of vLLM's own environment "
                                    "(scripts/install_vllm.sh; default: $PERFWARDEN_VLLM_PYTHON, else this python; "
                                    "--resume needs one of the two)."),
    set_: list[str] = typer.Option([], "--set", help="Baseline knob, key=value (repeatable): the true baseline "
                                   "the search starts from (e.g. sglang's mem_fraction_static, tp_size)."),
    out: Path = typer.Option(None, "--out", help="Run directory (default: runs/<UTC timestamp>)."),
    resume: Path = typer.Option(None, "--resume", help="Continue the run in this directory after a crash."),
    budget_minutes: float = typer.Option(None, "--budget-minutes", help="Wall-clock budget (default 14)."),
    llm: str = typer.Option(None, "--llm", help="Model for the LLM brains and auditor persona "
                            "(OPENAI_BASE_URL, OPENAI_API_KEY)."),
    levers: str = typer.Option(None, "--levers", help="Comma-separated knobs to search, `knob` or `knob=value` "
                               "(default: the target's default search space)."),
    no_kernels: bool = typer.Option(False, "--no-kernels", help="Skip profile, op bench and kernel changes."),
    red_team: bool = typer.Option(False, "--red-team", help="Add the red-team producer; its claims must all be refused."),
    reps: int = typer.Option(None, "--reps", help="Reps per leg on a first measurement (default 3)."),
    samples: int = typer.Option(None, "--samples", help="Requests in one rep, all issued at once (LoadGen's "
                                "Offline scenario; default 8)."),
    max_tokens: int = typer.Option(None, "--max-tokens", help="Output tokens per request (default 16)."),
    baseline_remeasures: int = typer.Option(None, "--baseline-remeasures", help="Baseline re-measures after a "
                                            "FLAG/FAIL baseline audit (default 2; 0 on a machine known to be "
                                            "noisier than the limit: a noise-only FLAG lets the search go on)."),
    checkpointer: str = typer.Option(None, "--checkpointer", help="postgresql://… for shared deployments "
                                     "(default: SQLite inside the run directory)."),
    cluster: str = typer.Option(None, "--cluster", help="Ray address whose nodes measure A/B steps concurrently, "
                                "one step per node slot (`local` starts Ray here); default: this process."),
    study_batch: int = typer.Option(None, "--study-batch", help="Steps asked of the search at once (default: one "
                                    "per cluster slot with --cluster, else 1); without --cluster they are measured "
                                    "one after another, so a run gives the same steps with and without a cluster."),
    sampler: str = typer.Option(None, "--sampler", help="tpe (an Optuna study), random or grid (the same study "
                                "drawn uniformly or walking the grid: baselines) or coordinate (one knob at a time); "
                                "default: tpe over the default space, coordinate over named --levers."),
    objective: str = typer.Option(None, "--objective", help="What the search optimizes: throughput (default), "
                                  "goodput (requests/s meeting --slo), ttft_p99 or tpot_p99. Fixed for the run."),
    slo: str = typer.Option(None, "--slo", help="The goodput objective's SLO in ms, e.g. ttft_ms=500,tpot_ms=50 "
                            "(vLLM's ttft:500,tpot:50 reads too). Fixed for the run."),
) -> None:
    """Optimize the target; bank only what the auditor passes. Writes RUN/report.md and report.json."""
    err = _terminal()
    _check_options(err, target, model, sglang_python, resume, vllm_python)
    settings_kw = _settings_options(target, model, budget_minutes, levers, no_kernels, red_team, reps,
                                    baseline_remeasures, llm, sampler, study_batch, samples, max_tokens)
    asked = _objective_options(err, objective, slo)  # a resume's is the one it sealed: only compared with it
    settings = _new_settings(err, settings_kw if resume is not None else {**settings_kw, **asked}, set_)
    # lazy: langgraph (the orchestrator extra): only when a run starts
    from perfwarden.orchestrator.runner import RunUsageError, run_graph

    if resume is not None:  # a resumed run keeps the settings it started with
        settings = _resumed_settings(err, resume, asked)
    settings, python = _engine_interpreter(err, settings, sglang_python or vllm_python, resume)
    run_dir = resume or out or Path("runs") / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    client = _llm_client(settings)
    started = time.time()
    watcher = TerminalWatcher(err, started)
    err.print(safe_text(("perfwarden run", "bold"), f" target={settings.target} budget={settings.budget_minutes:g} min "
                            f"objective={settings.run_objective().describe()} run={run_dir}"))
    try:
        lab = make_lab(settings, on_rep=watcher.rep, engine_python=python)
        parse_levers(lab.config_model, settings.levers)  # a bad --levers is a clear error before anything runs
        state = run_graph(Path(run_dir), settings, lab, resume=resume is not None, llm=client,
                          checkpointer_url=checkpointer, watcher=watcher, attacker=make_attacker(settings),
                          cluster=cluster)
    except (RunUsageError, ConfigError, RefusedWrite, SealError, ClaimError,  # all: the run dir is bad input
            run_lock.RunBusy) as exc:  # or another command writes it (the message names it)
        watcher._stop()
        _stop_if_disk_full(err, exc, run_dir)
        print_error(err, exc)
        raise typer.Exit(ExitCode.INVALID) from None
    except KeyboardInterrupt:
        watcher._stop()
        err.print(safe_text("\n", ("interrupted", "yellow"), f": continue with `perfwarden run --resume {run_dir}`"))
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    except Exception as exc:  # a lab or internal failure: say what and how to continue, never a traceback
        watcher._stop()
        if os.environ.get("PERFWARDEN_DEBUG"):
            traceback.print_exc()
        _stop_if_disk_full(err, exc, run_dir)
        print_error(err, f"the run stopped on {type(exc).__name__}: {exc}; its checkpoint is kept: continue with "
                         f"`perfwarden run --resume {run_dir}` (PERFWARDEN_DEBUG=1 shows the traceback)")
        raise typer.Exit(ExitCode.NOT_OK) from None
    watcher._stop()
    _print_outcome(state, run_dir, started, settings.run_objective().metric)


def _stop_if_disk_full(err: Console, exc: BaseException, run_dir: Path | str) -> None:
    """Exit ``NO_SPACE`` naming the full disk when ``exc`` comes from one (Optuna words it "invalid data in
    the commit", SQLite "database or disk is full"): the checkpoint holds every finished step."""
    full = disk_full(exc)
    if full is not None:
        print_error(err, no_space_message(full, "running", f"free space, then `perfwarden run --resume {run_dir}` "
                                          "continues where it stopped"))
        raise typer.Exit(ExitCode.NO_SPACE) from None
