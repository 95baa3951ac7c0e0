"""A test hook that kills the process at a named instant, to prove that ``run --resume`` always ends.

``PERFWARDEN_CRASH_AT=point[#n][,point[#n]…]`` SIGKILLs the process the n-th time (default: first)
execution reaches ``crash_point(point)``. Unset, ``crash_point`` is one dictionary lookup. Points:

- ``before_settings``: the run is created, its settings.json not written yet;
- ``settings_written``: the run directory and settings.json exist, no checkpoint file yet;
- ``checkpointer_opened``: the checkpoint file was just created, no checkpoint written in it yet;
- ``before:<node>`` / ``after:<node>``: a graph node is about to run / has run and written its files,
  but its checkpoint is not saved yet (so resume runs it again);
- ``report_json_written``: report.json is written, report.md not yet;
- ``rep_torn``: the simulated target has written half a bench_runs line (a torn tail) and dies;
- ``rep_unsealed``: the simulated target has written a whole bench_runs line but not its seal entry, and dies.

SIGKILL, not an exception: nothing gets to clean up, as with a power cut or the OOM killer.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

ENV = "PERFWARDEN_CRASH_AT"
_reached: Counter[str] = Counter()


def armed(point: str) -> bool:
    """Whether reaching ``point`` now must kill the process (counts the visit)."""
    spec = os.environ.get(ENV)
    if not spec:
        return False
    _reached[point] += 1
    for item in spec.split(","):
        name, _, nth = item.strip().partition("#")
        if name == point and _reached[point] == int(nth or 1):
            return True
    return False


def crash_point(point: str) -> None:
    """SIGKILL this process when ``PERFWARDEN_CRASH_AT`` names this visit of ``point``."""
    if armed(point):
        kill_now()


def kill_now() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
