"""Alternative implementations of the overridable ops, for op benchmarks and the auditor's negative tests.

Each file defines one function with the override signature of its op (see ``perfwarden.harness.ops``),
so every entry can be benchmarked (``path.py:function``) *and* installed into the embedded server as an
override. ``CATALOG`` says what each one is, so that a test or a producer can tell a real alternative
from a deliberately broken one:

- ``alternative``: a different, correct implementation (may or may not be faster);
- ``slow``: correct but deliberately slow (a rig must rank it last);
- ``wrong``: subtly incorrect (a rig's correctness check must flag it);
- ``self_copy``: the reference copied under another name (a rig comparing it with the reference compares
  the reference with itself; its source digest equals the reference's);
- ``triton``: a hand-written Triton kernel for SmolLM2-135M's served shapes; timed on a GPU, and on a CPU
  only checked under ``TRITON_INTERPRET=1`` (recorded as not measured).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Kind = Literal["alternative", "slow", "wrong", "self_copy", "triton"]

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Alternative:
    """One catalogued implementation."""

    op: str
    file: str
    function: str
    kind: Kind
    note: str

    @property
    def path(self) -> Path:
        return HERE / self.file

    @property
    def spec(self) -> str:
        """``path.py:function`` as op benchmarks and overrides take it."""
        return f"{self.path}:{self.function}"


CATALOG: tuple[Alternative, ...] = (
    Alternative("rmsnorm", "rmsnorm_vecnorm.py", "rmsnorm", "alternative",
                "sum of squares via linalg.vector_norm, rsqrt and scaling in place (fewer temporaries)"),
    Alternative("rmsnorm", "rmsnorm_eps_outside.py", "rmsnorm", "wrong",
                "x / (sqrt(mean(x^2)) + eps): eps outside the square root; wrong for small-RMS rows"),
    Alternative("rmsnorm", "rmsnorm_rowloop.py", "rmsnorm", "slow",
                "normalizes one row at a time in a Python loop"),
    Alternative("rmsnorm", "rmsnorm_selfcopy.py", "rmsnorm", "self_copy",
                "the reference's code under a new docstring"),
    Alternative("silu_mul", "silu_mul_sigmoid.py", "silu_mul", "alternative",
                "gate * sigmoid(gate) * up written out, the product accumulated in place"),
    Alternative("rotary", "rotary_complex.py", "rotary", "alternative",
                "rotation as a complex multiplication of (x1 + i x2) by (cos + i sin), in float32"),
    Alternative("rmsnorm", "rmsnorm_triton.py", "rmsnorm", "triton",
                "one Triton program per row: sum of squares, rsqrt and both scalings fused"),
    Alternative("silu_mul", "silu_mul_triton.py", "silu_mul", "triton",
                "one elementwise Triton kernel, computed in float32 and rounded once"),
    Alternative("rotary", "rotary_triton.py", "rotary", "triton",
                "q and k rotated in one Triton launch, strided inputs read in place"),
)


def for_op(op: str, kinds: tuple[Kind, ...] = ("alternative", "slow", "wrong", "self_copy", "triton")) -> list[Alternative]:
    """Catalogued implementations of ``op`` of the given kinds, in catalogue order."""
    return [a for a in CATALOG if a.op == op and a.kind in kinds]
