"""Which logical op a profile row measures: the naming a profile's rows (``formats/jsonl.py``
``ProfileLine``) are read by, one definition for the producer that routes the hot op and the auditor that
re-derives the routed op's rank. Each ranks the ops on its own (``harness/profile_ops.py``,
``auditor/gates/profile.py``): a producer that picked the hot op with the auditor's own arithmetic would
hand the auditor its own answer to check.
"""

from __future__ import annotations

import re

from perfwarden.formats.jsonl import ProfileLine

_FRAGMENT_SUFFIX = re.compile(r"(_\d+|<.*>|\(.*\)|_kernel|_fwd|_impl|::\w+)$")


def canonical_op(row: ProfileLine) -> str:
    """Logical op of a profile row: its ``op`` field, else its kernel name without fragment suffixes
    (``rmsnorm_kernel_0``, ``rmsnorm_kernel<float>`` and ``rmsnorm`` are one op)."""
    if row.op:
        return row.op.strip().lower()
    name = row.name.strip().lower()
    while True:
        stripped = _FRAGMENT_SUFFIX.sub("", name)
        if stripped == name or not stripped:
            return name
        name = stripped
