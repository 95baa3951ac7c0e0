"""The command line loads without the run's machinery: every ``perfwarden`` command imports ``cli.main``,
which registers every subcommand, so anything a subcommand's module imports at its top is paid by a
refused ``audit``, a ``--help`` and each of the tests' command starts. The run's LLM client, graph,
study, engines and cluster load when a run starts, not before."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("openai", "langgraph", "optuna", "torch", "transformers", "ray")


def test_the_command_line_loads_without_the_runs_machinery():
    probe = f"import perfwarden.cli.main, sys; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", f"imported by perfwarden.cli.main: {done.stdout.strip()}"
