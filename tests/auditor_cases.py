"""Hand-built run directories for auditor tests: one clean A/B run plus small edits per fault.

The clean run is a real 10% throughput win of a declared class-B knob, 5 interleaved reps per leg,
coherent identical outputs. Each test changes one thing and states the verdict the design demands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfwarden.agents.auditor.audit import audit_path
from perfwarden.harness.records import Verdict
from perfwarden.proof.synth import COHERENT_TEXTS, make_rep, write_claim, write_leg, write_manifest

BASE_INFO: dict[str, Any] = {
    "model": "SmolLM2-135M-Instruct", "weights_digest": "abc123", "dtype": "float32", "threads": 2,
    "max_batch_size": 4, "batch_wait_ms": 5, "attn_implementation": "sdpa", "torch_compile": False,
    "prompt_lookup": False, "quantization": "none", "response_cache": False, "op_overrides": {},
    "torch_version": "2.13.0", "port": 8100, "host": "127.0.0.1",
}
BASE_TPUT = [100.0, 101.2, 99.1, 100.6, 99.7]
CAND_TPUT = [110.3, 109.6, 111.0, 110.1, 109.2]


def reps(leg: str, values: list[float], offset: float, **kw) -> list[dict]:
    return [make_rep(leg, k, throughput=v, started_at=1_000.0 + 2 * k + offset, **kw) for k, v in enumerate(values)]


def build(run: Path, *, base_info: dict | None = None, cand_info: dict | None = None,
          base_reps: list[dict] | None = None, cand_reps: list[dict] | None = None,
          base_log: list[str] | None = None, cand_log: list[str] | None = None,
          base_outputs: list[str] | None = COHERENT_TEXTS, cand_outputs: list[str] | None = COHERENT_TEXTS,
          claim: dict | None = None, cand_status: str = "ok", extra_legs: dict | None = None) -> Path:
    """Write the A/B run with any part replaced; returns the claim path."""
    write_manifest(run)
    cand_default = {**BASE_INFO, "max_batch_size": 8, "port": 8101}
    write_leg(run, "base", "baseline", base_info or BASE_INFO, base_reps or reps("base", BASE_TPUT, 0),
              log_lines=base_log, outputs=base_outputs)
    write_leg(run, "cand", "candidate", cand_info or cand_default, cand_reps if cand_reps is not None else
              reps("cand", CAND_TPUT, 1), log_lines=cand_log, outputs=cand_outputs,
              overlay={"config": {"max_batch_size": 8}}, status=cand_status, parent="base")
    for name, (role, info, leg_reps) in (extra_legs or {}).items():
        write_leg(run, name, role, info, leg_reps)
    body = {"scope": "patch", "seq": 1, "producer": "config_tuner",
            "legs": {"baseline": "base", "candidate": "cand"},
            "lever": {"name": "max_batch_size=8", "lever_class": "B", "config_keys": ["max_batch_size"]},
            "headline": {"metric": "output_throughput", "value": 10.0, "kind": "e2e"}}
    body.update(claim or {})
    return write_claim(run, body)


def audit(run: Path, claim: Path) -> Verdict:
    return audit_path(run, claim)


def codes(verdict: Verdict, severity: str | None = None) -> set[str]:
    return {f.code for f in verdict.findings if f.severity != "INFO" and (severity is None or f.severity == severity)}
