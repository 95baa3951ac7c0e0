"""``perfwarden measure``: record one leg on a target (server up, reps under LoadGen, parity dump, down)."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Literal, TypeGuard, get_args

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from perfwarden.cli.lock import hold_or_exit
from perfwarden.formats.records import LegRole, Overlay, RunDir, RunManifest, write_json_atomic
from perfwarden.formats.safe_write import RefusedWrite
from perfwarden.formats.seal import SealError
from perfwarden.formats.strict_json import StrictJsonError, loads
from perfwarden.harness.labs.lab import LegPlan, PromptSet, check_leg_writes
from perfwarden.harness.target_config import TARGET_CONFIGS, ConfigError, TargetConfig, parse_set_args
from perfwarden.orchestrator.exit_codes import ExitCode
from perfwarden.orchestrator.render import print_error, printable, safe_text
from perfwarden.orchestrator.simlab import SyntheticLab


def measure(
    out: Path = typer.Option(..., "--out", help="Run directory (created if missing)."),
    leg: str = typer.Option(..., "--leg", help="Leg name (its directory under legs/)."),
    role: str = typer.Option("baseline", "--role", help="baseline, candidate, validation, caching_audit, aa."),
    target: str = typer.Option("embedded", "--target", help="Serving target: embedded, sglang (GPU host; "
                               "needs --model), vllm (its own environment: --vllm-python) or synthetic "
                               "(simulated reps)."),
    model: str = typer.Option(None, "--model", help="sglang, vllm: directory of the weights to serve (vllm: "
                              "default the converted SmolLM2)."),
    sglang_python: str = typer.Option(None, "--sglang-python", help="sglang: the python of SGLang's own "
                                      "environment (default: $PERFWARDEN_SGLANG_PYTHON, else this python)."),
    vllm_python: str = typer.Option(None, "--vllm-python", help="vllm: the python of vLLM's own environment "
                                    "(default: $PERFWARDEN_VLLM_PYTHON, else this python)."),
    set_: list[str] = typer.Option([], "--set", help="Server knob, key=value (repeatable)."),
    reps: int = typer.Option(3, "--reps", min=1, max=50, help="Timed repetitions (LoadGen tests)."),
    duration: float = typer.Option(5.0, "--duration", min=0.5, help="Seconds of LoadGen schedule per rep."),
    scenario: str = typer.Option("server", "--scenario", help="server (Poisson arrivals) or offline."),
    qps: float = typer.Option(4.0, "--qps", min=0.01, help="Target QPS (server scenario)."),
    max_tokens: int = typer.Option(24, "--max-tokens", min=1, help="Output tokens per request."),
    prompts: str = typer.Option("varied", "--prompts", help="varied or repeat (one prompt, TEST04-style)."),
) -> None:
    """Start the target with this config, record the leg's raw evidence, and stop it."""
    err = Console(stderr=True, soft_wrap=True, highlight=False)
    if target not in ("embedded", "sglang", "vllm", "synthetic"):
        print_error(err, f"unknown target {target!r} (embedded, sglang, vllm, synthetic)")
        raise typer.Exit(ExitCode.USAGE)
    if ((target in ("embedded", "synthetic") and model) or (target != "sglang" and sglang_python)
            or (target != "vllm" and vllm_python)):
        print_error(err, f"--model and --sglang-python are sglang options (--model and --vllm-python vllm "
                         f"options); target {target!r} serves its own model")
        raise typer.Exit(ExitCode.USAGE)
    try:  # the leg names a folder under legs/: one path component, and nothing there is a link
        check_leg_writes(out, [leg])
    except OSError as exc:
        print_error(err, f"cannot record leg {leg!r} in {str(out)!r}: {exc}")
        raise typer.Exit(ExitCode.INVALID) from None
    config_model = TARGET_CONFIGS.get(target, SyntheticLab.config_model)
    if scenario not in ("server", "offline") or not _is_cli_prompts(prompts):
        print_error(err, "--scenario must be server|offline and --prompts varied|repeat")
        raise typer.Exit(ExitCode.USAGE)
    if not _is_role(role):
        print_error(err, f"--role must be one of {'|'.join(get_args(LegRole))}")
        raise typer.Exit(ExitCode.USAGE)
    try:
        raw = parse_set_args(set_)
        validated = config_model.validate_knobs(dict(raw))  # every knob, before anything starts
        config = {key: getattr(validated, key) for key in raw}
    except (ConfigError, ValueError) as exc:
        print_error(err, f"bad --set: {exc}")
        raise typer.Exit(ExitCode.INVALID) from None
    lab_kw: dict = dict(qps=qps, rep_seconds=duration, max_tokens=max_tokens,
                        scenario="Server" if scenario == "server" else "Offline")
    lab_class = _engine_lab(err, target, model, sglang_python, vllm_python, lab_kw)
    full = validated
    with ExitStack() as held:
        hold_or_exit(held, err, out, create=True)  # from before the first write to the end (design §2)
        _measure_leg(err, out, leg, role, lab_class, lab_kw, full, config, reps, prompts, target)


def _is_cli_prompts(value: str) -> TypeGuard[Literal["varied", "repeat"]]:
    """The prompt sets ``--prompts`` offers (``same_length`` is the run's own TEST04 control leg)."""
    return value in ("varied", "repeat")


def _is_role(value: str) -> TypeGuard[LegRole]:
    return value in get_args(LegRole)


def _measure_leg(err: Console, out: Path, leg: str, role: LegRole, lab_class: type, lab_kw: dict, full: TargetConfig,
                 config: dict, reps: int, prompts: PromptSet, target: str) -> None:
    """Record the leg (the run's writer lock held) and print its reps."""
    paths = RunDir(out)
    model_name = lab_kw.get("model_path", "SmolLM2-135M-Instruct")
    if not paths.manifest.is_file():
        write_json_atomic(paths.manifest, RunManifest(id=out.name, target=target, model=model_name), out)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=False) as progress:
        # The description is rendered as rich markup: every part of it is escaped, then made printable.
        task = progress.add_task(escape(printable(f"{leg}: starting")), total=reps)

        def on_rep(leg_name: str, rep: int, status: str) -> None:
            progress.update(task, advance=1, description=escape(printable(f"{leg_name}: rep {rep} {status}")))

        lab = lab_class(**lab_kw, on_rep=on_rep)
        try:
            status = lab.measure(out, [LegPlan(leg=leg, role=role, config=full, overlay=Overlay(config=config),
                                               prompts=prompts, purpose="perfwarden measure")], reps)
        except (RefusedWrite, SealError) as exc:  # a link or FIFO planted while the leg ran; a chain it cannot continue
            print_error(err, exc)
            raise typer.Exit(ExitCode.INVALID) from None
    result = status.get(leg, "failed")
    if result != "ok":
        err.print(safe_text((f"leg {leg!r} failed:", "red"), f" {result}"))
        err.print(safe_text(f"see {paths.server_log(leg)}"))
        raise typer.Exit(ExitCode.NOT_OK)
    out_console = Console(highlight=False)
    lines = [line for line in paths.bench_runs(leg).read_text("utf-8", "replace").splitlines() if line.strip()]
    out_console.print(safe_text(f"leg {leg!r}: {len(lines)} rep(s) in {paths.bench_runs(leg)}"))
    for line in lines:
        try:
            d = loads(line, what="a bench line")
        except StrictJsonError:
            out_console.print(safe_text("  (a line that is not JSON: the auditor will report it)"))
            continue
        if not isinstance(d, dict):
            continue
        out_console.print(safe_text(f"  rep {d.get('rep')}: {d.get('completed')} ok, output "
                                    f"{_num(d.get('output_throughput'))} tok/s, median TTFT "
                                    f"{_num(d.get('median_ttft_ms'))} ms"))


def _engine_lab(err: Console, target: str, model: str | None, sglang_python: str | None, vllm_python: str | None,
                lab_kw: dict) -> type:
    """The lab class of ``target``; for an engine target, its interpreter and model are checked first and
    added to ``lab_kw`` (exit 3 before anything is written: an environment without the engine)."""
    if target == "sglang":
        # lazy: httpx: only for an sglang target
        from perfwarden.harness.sglang_target import SGLangEnvError, check_model_path, find_sglang_python

        try:  # a missing model or an environment without sglang is exit 3
            lab_kw.update(model_path=check_model_path(model), python=find_sglang_python(sglang_python)[0])
        except SGLangEnvError as exc:
            print_error(err, exc)
            raise typer.Exit(ExitCode.INVALID) from None
        from perfwarden.harness.labs.sglang import SGLangLab  # lazy: httpx: only for an sglang target

        return SGLangLab
    if target == "vllm":
        from perfwarden.harness import vllm_target

        try:  # an environment without vllm is exit 3
            python = vllm_target.find_vllm_python(vllm_python)[0]  # before the model: that may convert weights
            lab_kw.update(model_path=vllm_target.check_model_path(model), python=python)
        except vllm_target.VLLMEnvError as exc:
            print_error(err, exc)
            raise typer.Exit(ExitCode.INVALID) from None
        from perfwarden.harness.labs.vllm import VLLMLab

        return VLLMLab
    if target == "synthetic":  # simulated reps with known effects (orchestrator/simlab.py): no server, no load
        lab_kw.clear()
        return SyntheticLab
    from perfwarden.harness.labs.embedded import EmbeddedLab  # lazy: httpx, the harness: only when measuring

    return EmbeddedLab


def _num(value: object) -> str:
    """A number as printed (one decimal), or '-' when the line holds none (never a silent zero)."""
    return f"{value:.1f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"
