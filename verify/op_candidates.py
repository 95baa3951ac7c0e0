"""The op-level exploit catalogue as the red team's op-bench candidates.

Every file of ``proof/op_exploits`` (each named after the public catalogue entry it comes from) and every
shipped honest alternative is benchmarked by the op bench (``redteam/op_catalogue.run``, in its sandbox). An
exploit the op bench does not refuse, or an honest alternative it refuses, is a success of the red team.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from perfwarden.redteam import op_catalogue


def op_bench_candidates(run_dir: Path | None = None) -> dict[str, Any]:
    """Run the catalogue through the op bench; the report the red team's JSON carries under ``op_catalogue``."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pw-redteam-ops-") as tmp:
        rows = op_catalogue.run(Path(run_dir) if run_dir else Path(tmp))
    exploits = [r for r in rows if r.kind == "exploit"]
    honest = [r for r in rows if r.kind == "honest"]
    successes = [{"candidate": r.name, "op": r.op, "kind": r.kind, "catalogue": r.catalogue,
                  "why": "an exploit the op bench timed as a candidate" if r.kind == "exploit" else
                  f"an honest alternative refused: {r.why}"}
                 for r in rows if (r.kind == "exploit") != r.refused]
    return {"candidates": len(rows), "exploits": len(exploits), "refused": sum(r.refused for r in exploits),
            "honest": len(honest), "honest_refused": sum(r.refused for r in honest),
            "required_refused": op_catalogue.REQUIRED_REFUSED, "successes": len(successes),
            "success_list": successes, "seconds": round(time.perf_counter() - started, 1),
            "rows": [asdict(r) for r in rows]}
