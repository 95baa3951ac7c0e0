"""Op benchmarks: correctness over seeds, then timing with fresh inputs, one raw line per (backend, shape, trial).

``run_opbench`` benchmarks a reference implementation of one op (``rmsnorm``, ``silu_mul``, ``rotary``)
against candidate implementations (``path.py:function`` or ``module:function``, the override contract
of ``perfwarden.harness.ops``) on the shapes the server serves and on the device it serves on, and
writes ``<run>/opbench/<op>/opbench.jsonl`` (``perfwarden.formats.jsonl.OpBenchLine``) and ``rig.json``,
which the auditor's harness gates re-derive everything from.

How a rig earns the auditor's trust (design §4 "harness"):

- **correctness first**, on the device: every backend (the reference too) is run on the same inputs
  for each input seed (>= 3) and each shape; its output is compared with the reference computed *in
  the trusted parent* on the same device, with dtype-aware tolerances (``inputs.TOLERANCES``,
  ``correctness.compare``). Inputs include small-RMS rows, where eps bugs show;
- **fresh inputs**: each timed trial draws its own distinct input sets from the run's secret and feeds
  each one exactly once; warm-up is discarded; trials are interleaved across backends (trial-major, order
  rotated per trial) so drift hits every backend alike. On a GPU the L2 cache is flushed before every
  timed call;
- **the parent's clock** (``guard``, ``phases``): the figure of a trial is taken outside the candidate's
  process (CPU time of its whole sandbox read from ``/proc``, or the parent's wall time of the request);
  answers are tied to requests by a nonce; every timed call's output is checked after the run; inputs
  the op must not modify are checked unmodified; shapes drawn from the secret are checked too; a call
  faster than the rig's memory roofline, or a candidate that reaches the reference, is refused
  (``refused`` on its rows). One figure per trial: ``times_ms`` (call by call, what an eager server
  pays) and on a GPU ``graph_times_ms`` (graph replay: the kernel itself);
- **threads pinned** and the dispatch path recorded (``eager``, or ``compiled``);
- **self-comparison detectable**: ``impl_sha256`` is a static digest of the implementation's code
  (``digest``); a copy or re-export of the reference gets the reference's digest;
- **Triton**: a candidate whose file imports ``triton`` is timed like any other on a GPU; on the CPU it
  is checked under ``TRITON_INTERPRET=1`` on small shapes only and recorded ``measured: false`` with
  ``times_ms: null`` -- never as a number. Without triton installed its rows say
  ``raised: "triton not installed"`` and ``correct: null``.

Candidate code is untrusted: every backend runs in its own worker (``worker``) inside the one sandbox
(``perfwarden.harness.sandbox``: bubblewrap namespaces, read-only view, one writable directory, no
network, empty environment, CPU/wall/memory limits). Without it the benchmark refuses to run. A
candidate that hangs, crashes, exhausts a limit or raises is recorded on its rows (``raised``) and the
benchmark goes on.

Modules: ``inputs`` (shapes, seeded inputs, tolerances, which inputs an op may modify), ``digest`` (specs,
code digests, reaching the reference), ``correctness`` (output comparison), ``guard`` (what keeps the
verdict out of the candidate's reach), ``phases`` (correctness, timing and roofline, in the parent),
``timing`` (the device interface: flush, graphs; ``time_trial`` is the in-process timer, kept for the
device benchmarks, never the op bench's verdict), ``worker`` (inside the sandbox), ``backend`` (a
backend and the parent's client of its worker), ``runner`` (the benchmark), ``rig`` (device description),
``summary``, ``cli``.
"""

from perfwarden.harness.opbench.correctness import Check, compare
from perfwarden.harness.opbench.digest import impl_digest, parse_spec, spec_file, uses_triton
from perfwarden.harness.opbench.inputs import (OPS, SMOLLM2_RMS_EPS, SMOLLM2_ROPE_THETA, TOLERANCES, OpBenchError,
                                               check_seed, make_inputs, timing_seed)
from perfwarden.harness.opbench.runner import (REFERENCE_BACKEND, REFERENCE_MODULE, TRITON_INTERPRET_MAX_NUMEL,
                                               TRITON_MISSING, alternatives_for, run_opbench, run_opbench_for_lab)
from perfwarden.harness.opbench.summary import summarize

__all__ = [
    "OPS", "REFERENCE_BACKEND", "REFERENCE_MODULE", "SMOLLM2_RMS_EPS", "SMOLLM2_ROPE_THETA", "TOLERANCES",
    "TRITON_INTERPRET_MAX_NUMEL", "TRITON_MISSING", "Check", "OpBenchError", "alternatives_for", "check_seed",
    "compare", "impl_digest", "make_inputs", "parse_spec", "run_opbench", "run_opbench_for_lab", "spec_file",
    "summarize", "timing_seed", "uses_triton",
]
