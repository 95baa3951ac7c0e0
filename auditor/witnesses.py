"""What a verdict held each leg's reps against: the second witnesses, as typed data (``LegWitnesses``).

A bench line is one writer's account of a rep. The gates hold it against other writers' accounts of the
same requests -- LoadGen's logs (``model/witnesses.py``), the server's counters on the line or the
engine's ``/metrics`` samples (``gates/engine_witness.py``) -- and read the rep's CPU window for
contention; the seal chain says whether any of it could have been edited since. This module counts, per
leg, the reps each witness covered, so a report can say what was checked, and lists under not-checked
only the reps no server-side witness covered (a rep held against vLLM's /metrics is not one "with no
server counters").
"""

from __future__ import annotations

from perfwarden.auditor.evidence import LegEvidence
from perfwarden.auditor.gates.engine_witness import is_vllm_leg
from perfwarden.formats.verdict_parts import LegWitnesses


def leg_witnesses(leg: LegEvidence, engine_held: int | None, sealed: bool) -> LegWitnesses:
    """The witnesses of one leg. ``engine_held``: reps the engine-witness gate held against a record
    (None when it did not run to the end: a vLLM leg then counts none)."""
    engine = engine_held if engine_held is not None else (0 if is_vllm_leg(leg) else None)
    return LegWitnesses(
        leg=leg.name, reps=len(leg.reps),
        loadgen_logs=sum(1 for r in leg.reps if r.rep in leg.loadgen),
        server_counters=sum(1 for r in leg.reps if r.server_counters is not None),
        engine_counters=engine,
        cpu_window=sum(1 for r in leg.reps if isinstance(r.contention, dict) and "window" in r.contention),
        sealed=sealed)


def unwitnessed_note(w: LegWitnesses) -> str | None:
    """The not-checked line for reps that no server-side account covered, else None."""
    missing = w.reps - w.server_counters - (w.engine_counters or 0)
    if missing <= 0:
        return None
    engine = " and no engine /metrics record" if w.engine_counters is not None else ""
    return (f"second witness of leg {w.leg!r}: {missing} rep(s) carry no server counters (server_counters) from "
            f"before and after the rep{engine}")
