"""A FIFO at the run's seal chain is refused, never waited on (``benchmarks/fuzz.py --rundir``).

``audit RUN --claim ...`` hung forever when ``evidence.jsonl`` was a FIFO: a plain ``open()`` blocks until
a writer appears. The one seal-id reader (``formats.jsonl.chain_seal_id``, for the auditor and the
harness) reads through ``formats/safe_read.py``.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Iterator

import pytest
from typer.testing import CliRunner

from perfwarden.auditor import manifest
from perfwarden.cli.main import app
from perfwarden.formats import jsonl
from perfwarden.orchestrator.runner import run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab


class Blocked(Exception):
    """The alarm fired: the reader waited on the FIFO."""


@contextlib.contextmanager
def alarm(seconds: int) -> Iterator[None]:
    """Interrupt a blocking open() (the test fails instead of hanging)."""
    def fire(signum, frame):
        raise Blocked(f"still blocked after {seconds}s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def fifo(path: Path) -> Path:
    if os.path.lexists(path):
        path.unlink()
    os.mkfifo(path)
    return path


def test_the_seal_id_reader_refuses_a_fifo(tmp_path):
    with alarm(5):
        assert jsonl.chain_seal_id(fifo(tmp_path / "evidence.jsonl")) is None


def test_manifest_hash_refuses_a_fifo(tmp_path):
    with alarm(5), pytest.raises(OSError, match="FIFO"):
        manifest._hash(fifo(tmp_path / "x.jsonl"))


def test_audit_of_a_run_whose_chain_is_a_fifo_answers(tmp_path):
    run = tmp_path / "run"
    run_graph(run, RunSettings(target="synthetic", levers=["max_batch_size=2"], kernels=False), SyntheticLab(),
              capture_logs=False)
    fifo(run / "evidence.jsonl")
    with alarm(60):
        result = CliRunner().invoke(app, ["audit", str(run), "--claim", str(run / "claims" / "002-patch.json"),
                                          "--save"])
    assert result.exit_code in (3, 20), result.output  # refused or FAIL: never PASS without its chain
    assert result.exception is None or isinstance(result.exception, SystemExit)
