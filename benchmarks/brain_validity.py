"""How often the LLM brains' answers are usable, with and without structured output.

Every brain and the auditor persona ask through ``harness/llm_client.py``; this script asks each of them a fixed,
bounded set of questions built from a real (synthetic-target) run, once with ``response_format`` (the
pydantic model's strict JSON schema) and once without, and prints side by side per brain:

- **schema-valid**: the client got an object its pydantic model validates (no retry: ``max_retries=0``);
- **accepted**: the answer also passes the deterministic checks the run applies to it -- the config-tuner's
  step is an allowed, unmeasured value (the brain did not fall back), the integrator's decision was used,
  its stated figure is within the auditor's REPORTED_MISMATCH tolerance of the producer's own reading,
  the kernel module parses and defines the function, the persona's codes are all in the catalog.

Endpoints: the embedded SmolLM2 server (started here from this checkout, unsandboxed, on 127.0.0.1), and
any OpenAI-compatible endpoint given with ``--url`` (vLLM -- started by ``--target vllm`` or by hand as
docs/engines.md describes --, SGLang, a hosted API; ``--model`` names the model). The run is bounded:
``--prompts`` questions per brain (default 1, at most 3) x 5 brains x 2 modes,
each answer at most ``--max-tokens`` tokens, raised as in a run to what a schema's longest answer needs
(``ANSWER_TOKENS``: the kernel-extractor's ``KernelCode``).

Usage::

    python benchmarks/brain_validity.py                                  # the embedded server
    python benchmarks/brain_validity.py --url http://127.0.0.1:8000/v1 --model SmolLM2-135M-Instruct --no-embedded
"""

from __future__ import annotations

import argparse
import ast
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from perfwarden.agents import config_tuner, integrator, own_figures
from perfwarden.agents.brains import Brains, KernelCode
from perfwarden.auditor.gates.measurement import HEADLINE_TOLERANCE_PTS
from perfwarden.auditor.persona import apply_persona
from perfwarden.formats.records import Verdict
from perfwarden.harness.llm_client import LLMClient
from perfwarden.harness.target_config import EmbeddedConfig
from perfwarden.orchestrator import graph
from perfwarden.orchestrator.persona_model import persona_model
from perfwarden.orchestrator.runner import run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab

BRAINS = ("config_tuner", "integrator_fix", "integrator_figure", "kernel_extractor", "persona")
MAX_PROMPTS = 3


@dataclass
class Tally:
    asks: int = 0
    valid: int = 0
    accepted: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)


@dataclass
class Material:
    """What the questions are built from: a finished synthetic run's state and files."""

    run: Path
    state: dict


def material(root: Path) -> Material:
    """A deterministic synthetic run (seconds): its proposals, verdicts and legs feed every question."""
    run = root / "run"
    state = run_graph(run, RunSettings(target="synthetic"), SyntheticLab())
    return Material(run=run, state=state)


def questions(m: Material, n: int) -> dict[str, list[Callable[[Brains, LLMClient], bool]]]:
    """Per brain, ``n`` questions; each asks once and returns whether the deterministic checks accept it."""
    proposals, verdicts = m.state["proposals"], m.state["verdicts"]
    space = config_tuner.parse_levers(EmbeddedConfig, None)
    base = SyntheticLab().base_config().model_dump()
    patches = [(v, next(p for p in proposals if p.id == v.proposal)) for v in verdicts if v.scope == "patch"]
    refused = [(v, p) for v, p in patches if v.verdict != "PASS"] or patches

    def config_q(i: int):
        def ask(brains: Brains, client: LLMClient) -> bool:
            tried = config_tuner.tried_steps(proposals[:i], m.state["banked"][:i])
            best = integrator.final_changes(m.state["banked"][:i])
            brains.next_config_step(EmbeddedConfig, space, base, best, tried)
            return not brains.fallbacks
        return ask

    def fix_q(i: int):
        v, p = refused[i % len(refused)]

        def ask(brains: Brains, client: LLMClient) -> bool:
            brains.fix(p, v, 7)
            return not brains.fallbacks
        return ask

    def figure_q(i: int):
        v, p = patches[i % len(patches)]
        reading = own_figures.read_ab(m.run, p.legs)

        def ask(brains: Brains, client: LLMClient) -> bool:
            stated, by = brains.state_figure(p.model_copy(update={"figure_by": "brain"}), reading)
            return by == "llm" and abs(stated - reading.delta_pct) <= max(HEADLINE_TOLERANCE_PTS,
                                                                          0.1 * abs(reading.delta_pct))
        return ask

    def kernel_q(i: int):
        op = ("rmsnorm", "silu_mul", "rotary")[i % 3]

        def ask(brains: Brains, client: LLMClient) -> bool:
            spec = brains.write_kernel(m.run, op, 0.2, [[1, 576]], graph._reference_source(op), op, 100 + i)
            if spec is None:
                return False
            try:
                tree = ast.parse(Path(spec.rsplit(":", 1)[0]).read_text())
            except SyntaxError:
                return False
            return any(isinstance(node, ast.FunctionDef) and node.name == op for node in tree.body)
        return ask

    def persona_q(i: int):
        v = [x for x in verdicts if x.scope in ("patch", "bundle")][i]
        claim = (m.run / v.claim).read_text()
        verdict = Verdict.model_validate_json((m.run / v.path).read_text())

        def ask(brains: Brains, client: LLMClient) -> bool:
            out = apply_persona(m.run, claim, verdict, persona_model(client))
            brains.notes.extend(out.degraded_reasons[len(verdict.degraded_reasons):])  # why, in the table
            return not out.degraded and not (out.model_extra or {}).get("persona_ignored")
        return ask

    makers = {"config_tuner": config_q, "integrator_fix": fix_q, "integrator_figure": figure_q,
              "kernel_extractor": kernel_q, "persona": persona_q}
    return {brain: [make(i) for i in range(n)] for brain, make in makers.items()}


def measure(base_url: str, model: str, m: Material, n: int, structured: bool, max_tokens: int,
            timeout_s: float, chosen: list[str]) -> dict[str, Tally]:
    """Ask every chosen brain's questions once against one endpoint, in one mode."""
    out: dict[str, Tally] = {}
    for brain, asks in questions(m, n).items():
        if brain not in chosen:
            continue
        tally = out[brain] = Tally()
        for ask in asks:
            client = LLMClient(model=model, base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY"),
                               timeout_s=timeout_s, max_retries=0, max_tokens=max_tokens, structured=structured)
            brains = Brains(llm=client)
            started = time.monotonic()
            accepted = ask(brains, client)
            tally.seconds += time.monotonic() - started
            tally.asks += 1
            u = client.usage
            tally.valid += int(u.calls > 0 and u.failures == 0 and u.unavailable == 0)
            tally.accepted += int(accepted and u.failures == 0 and u.unavailable == 0)
            tally.errors += [note[:160] for note in brains.notes]
            print(f"  {brain:18} structured={structured!s:5} valid={u.failures == 0 and u.unavailable == 0} "
                  f"accepted={accepted} {time.monotonic() - started:.0f}s", flush=True)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EmbeddedEndpoint:
    """The embedded server from this checkout, as a plain child process on 127.0.0.1."""

    def __init__(self, log: Path, threads: int):
        self.port = free_port()
        self.log = log
        self.threads = threads

    def __enter__(self) -> str:
        args = [sys.executable, "-m", "perfwarden.harness.embedded_server", "--host", "127.0.0.1",
                "--port", str(self.port), "--set", f"threads={self.threads}", "--set", "max_seq_len=8192",
                "--set", "default_max_tokens=256"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self.log.open("wb"))
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the embedded server exited {self.proc.returncode}; see {self.log}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    return f"http://127.0.0.1:{self.port}/v1"
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise SystemExit("the embedded server did not answer /health within 600 s")

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def pct(k: int, n: int) -> str:
    return f"{k}/{n} ({100.0 * k / n:.0f}%)" if n else "-"


def print_table(name: str, with_schema: dict[str, Tally], without: dict[str, Tally]) -> None:
    print(f"\n{name}")
    print(f"{'brain':18} | {'schema-valid (structured)':>25} | {'accepted (structured)':>22} | "
          f"{'schema-valid (free)':>20} | {'accepted (free)':>16} | s/ask (str./free)")
    total = {k: Tally() for k in ("s", "f")}
    for brain in (b for b in BRAINS if b in with_schema):
        s, f = with_schema[brain], without[brain]
        for key, t in (("s", s), ("f", f)):
            total[key].asks += t.asks
            total[key].valid += t.valid
            total[key].accepted += t.accepted
            total[key].seconds += t.seconds
        print(f"{brain:18} | {pct(s.valid, s.asks):>25} | {pct(s.accepted, s.asks):>22} | {pct(f.valid, f.asks):>20} | "
              f"{pct(f.accepted, f.asks):>16} | {s.seconds / max(s.asks, 1):.0f} / {f.seconds / max(f.asks, 1):.0f}")
    s, f = total["s"], total["f"]
    print(f"{'all':18} | {pct(s.valid, s.asks):>25} | {pct(s.accepted, s.asks):>22} | {pct(f.valid, f.asks):>20} | "
          f"{pct(f.accepted, f.asks):>16} | {s.seconds / max(s.asks, 1):.0f} / {f.seconds / max(f.asks, 1):.0f}")
    for brain in (b for b in BRAINS if b in with_schema):
        for mode, t in (("structured", with_schema[brain]), ("free", without[brain])):
            if t.errors:
                print(f"  {brain} ({mode}): {t.errors[0]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", action="append", default=[], help="an OpenAI-compatible endpoint (.../v1); repeatable")
    parser.add_argument("--model", default="SmolLM2-135M-Instruct", help="the model name sent to --url endpoints")
    parser.add_argument("--no-embedded", action="store_true", help="do not start the embedded server")
    parser.add_argument("--prompts", type=int, default=1, help=f"questions per brain (1..{MAX_PROMPTS})")
    parser.add_argument("--max-tokens", type=int, default=384)
    parser.add_argument("--threads", type=int, default=2, help="the embedded server's threads")
    parser.add_argument("--brains", default=",".join(BRAINS), help=f"which brains to ask (comma-separated: {', '.join(BRAINS)})")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per ask")
    args = parser.parse_args(argv)
    if not 1 <= args.prompts <= MAX_PROMPTS or args.max_tokens < 1:
        print(f"--prompts must be 1..{MAX_PROMPTS} and the token caps positive", file=sys.stderr)
        return 3
    chosen = [b for b in args.brains.split(",") if b]
    if not chosen or set(chosen) - set(BRAINS):
        print(f"--brains names {sorted(set(chosen) - set(BRAINS)) or 'nothing'}; known: {', '.join(BRAINS)}", file=sys.stderr)
        return 3
    if args.no_embedded and not args.url:
        print("nothing to measure: give --url or leave the embedded server on", file=sys.stderr)
        return 3
    with tempfile.TemporaryDirectory(prefix="brain-validity-") as tmp:
        m = material(Path(tmp))
        started = time.monotonic()
        if not args.no_embedded:
            with EmbeddedEndpoint(Path(tmp) / "server.log", args.threads) as url:
                print(f"embedded server {url} (this checkout)", flush=True)
                rows = [measure(url, "SmolLM2-135M-Instruct", m, args.prompts, mode, args.max_tokens,
                                args.timeout, chosen) for mode in (True, False)]
            print_table("embedded (SmolLM2-135M-Instruct, CPU)", *rows)
        for url in args.url:
            print(f"endpoint {url} model {args.model!r}", flush=True)
            rows = [measure(url, args.model, m, args.prompts, mode, args.max_tokens,
                            args.timeout, chosen) for mode in (True, False)]
            print_table(f"{url} ({args.model})", *rows)
    print(f"\n{args.prompts} question(s) per brain x {len(chosen)} brains x 2 modes per endpoint; max_tokens "
          f"{args.max_tokens} (kernel-extractor {KernelCode.ANSWER_TOKENS}); {time.monotonic() - started:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
