"""The SGLang lab: ``ServerLab`` over ``python -m sglang.launch_server`` from SGLang's own environment.

What differs from the embedded lab, and why:

- one server at a time (``servers_at_once = False``): each SGLang server takes ``mem_fraction_static``
  of the *whole* GPU for weights and KV pool, so a baseline and a candidate server cannot share one GPU.
  Each rep starts its leg's server and stops it after the rep, keeping the reps interleaved (A B, B A, …)
  and every rep on a server started the same way; the price is one server start per rep.
- no kernel path: perfwarden has no profiler or op overrides inside SGLang, so a run on this target
  runs with ``--no-kernels`` (the CLI says so) and ``profile``/``opbench`` refuse with a ``LabError``.
- quality evals (lossy knobs: ``kv_cache_dtype``, ``quantization``, ``dtype``) run through the same
  OpenAI-compatible endpoint on servers started with each leg's config (``ServerLab.quality``).
"""

from __future__ import annotations

from perfwarden.harness.labs.server_lab import EngineLab
from perfwarden.harness.sglang_target import SglangTarget
from perfwarden.harness.target_config import SGLangConfig


class SGLangLab(EngineLab):
    """Lab protocol over SGLang (GPU hosts; CI drives it with a stand-in server)."""

    config_model = SGLangConfig
    servers_at_once = False
    engine_name = "SGLang"
    target_type = SglangTarget
