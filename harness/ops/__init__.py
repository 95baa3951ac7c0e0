"""Op overrides: swap an op's implementation inside a loaded model (the kernel half of an overlay).

An override is named ``op=SPEC`` where SPEC is ``path/to/file.py:function`` (loaded from that file) or
``dotted.module:function`` (imported). Supported ops and the signature an override must have:

- ``rmsnorm``: ``fn(hidden_states, weight, eps) -> Tensor``; replaces ``forward`` of every ``*RMSNorm``
  module (61 in SmolLM2: 2 per layer + the final norm);
- ``silu_mul``: ``fn(gate, up) -> Tensor``; replaces ``forward`` of every gated MLP with
  ``down_proj(fn(gate_proj(x), up_proj(x)))`` (SiLU models only);
- ``rotary``: ``fn(q, k, cos, sin, unsqueeze_dim=1) -> (q, k)``; replaces ``apply_rotary_pos_emb`` in the
  attention module's source module (used by every attention layer).

Why engagement is counted: a patch that installs but never runs (wrong class name, a compiled graph
that captured the old code) must not pass as a kernel win. Every override is wrapped in a call counter;
the server logs how many modules were patched and how many calls actually happened (NOT_ENGAGED).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUPPORTED_OPS = ("rmsnorm", "silu_mul", "rotary")
"""Ops an override may replace."""


class OverrideError(ValueError):
    """An override spec that cannot be loaded or installed (a configuration error: fails the start)."""


@dataclass
class CallCounter:
    """Counts calls of one override (thread-safe; the scheduler thread is the only caller in practice)."""

    calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def bump(self) -> int:
        with self._lock:
            self.calls += 1
            return self.calls


@dataclass
class InstalledOverride:
    """One override installed into a model."""

    op: str
    spec: str
    """The spec as given (``file.py:fn`` or ``module:fn``)."""
    source: str
    """Resolved file path (or module name) the function came from."""
    sha256: str | None
    """sha256 of the source file, when it is a file."""
    modules_patched: int
    """How many modules (or module-level functions) now route through the override."""
    counter: CallCounter
    """Calls made through the override since installation."""
    restore: Callable[[], None] = field(repr=False, default=lambda: None)
    """Undo the patch (tests, and a server shutting down cleanly)."""

    def describe(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "spec": self.spec,
            "source": self.source,
            "sha256": self.sha256,
            "modules_patched": self.modules_patched,
            "calls": self.counter.calls,
        }


def parse_spec(spec: str) -> tuple[str, str]:
    """Split ``target:function``; the target is a file path when it ends in ``.py`` or contains a slash."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name or not name.isidentifier():
        raise OverrideError(f"override spec {spec!r} must look like 'path/to/file.py:function' or 'module:function'")
    return target, name


def load_function(spec: str, base_dir: Path | None = None) -> tuple[Callable[..., Any], str, str | None]:
    """Load the function a spec names; returns ``(fn, source, sha256 or None)``."""
    target, name = parse_spec(spec)
    digest: str | None
    if target.endswith(".py") or "/" in target:
        path = Path(target)
        if not path.is_absolute():
            path = (base_dir or Path.cwd()) / path
        if not path.is_file():
            raise OverrideError(f"override file {str(path)!r} (from spec {spec!r}) does not exist")
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        mod_name = f"perfwarden_override_{digest[:16]}"
        loader_spec = importlib.util.spec_from_file_location(mod_name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise OverrideError(f"cannot load override file {str(path)!r}")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[mod_name] = module
        try:
            loader_spec.loader.exec_module(module)
        except Exception as exc:
            raise OverrideError(f"override file {str(path)!r} failed to import: {type(exc).__name__}: {exc}") from exc
        source = str(path)
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise OverrideError(f"override module {target!r} (from spec {spec!r}) cannot be imported: {exc}") from exc
        source = target
        file = getattr(module, "__file__", None)
        digest = hashlib.sha256(Path(file).read_bytes()).hexdigest() if file else None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise OverrideError(f"override {spec!r}: {source!r} has no callable {name!r}")
    return fn, source, digest


def _counted(fn: Callable[..., Any], counter: CallCounter,
             on_first: Callable[[], None] | None) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if counter.bump() == 1 and on_first is not None:
            on_first()
        return fn(*args, **kwargs)

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


def _patch_rmsnorm(model: Any, fn: Callable[..., Any]) -> tuple[int, Callable[[], None]]:
    patched: list[Any] = []
    for module in model.modules():
        if type(module).__name__.endswith("RMSNorm") and hasattr(module, "weight"):
            eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
            if eps is None:
                continue

            def forward(hidden_states: Any, _m: Any = module, _eps: Any = eps) -> Any:
                return fn(hidden_states, _m.weight, _eps)

            module.forward = forward
            patched.append(module)

    def restore() -> None:
        for module in patched:
            module.__dict__.pop("forward", None)

    return len(patched), restore


def _patch_silu_mul(model: Any, fn: Callable[..., Any]) -> tuple[int, Callable[[], None]]:
    act = getattr(model.config, "hidden_act", None)
    if act not in ("silu", "swish"):
        raise OverrideError(f"op 'silu_mul' needs a SiLU model; this model's hidden_act is {act!r}")
    patched: list[Any] = []
    for module in model.modules():
        if all(hasattr(module, a) for a in ("gate_proj", "up_proj", "down_proj", "act_fn")):

            def forward(x: Any, _m: Any = module) -> Any:
                return _m.down_proj(fn(_m.gate_proj(x), _m.up_proj(x)))

            module.forward = forward
            patched.append(module)

    def restore() -> None:
        for module in patched:
            module.__dict__.pop("forward", None)

    return len(patched), restore


def _patch_rotary(model: Any, fn: Callable[..., Any]) -> tuple[int, Callable[[], None]]:
    attention = [m for m in model.modules() if type(m).__name__.endswith("Attention") and hasattr(m, "q_proj")]
    modules: dict[str, types.ModuleType] = {}
    for m in attention:
        mod = sys.modules[type(m).__module__]
        if not hasattr(mod, "apply_rotary_pos_emb"):
            raise OverrideError(f"op 'rotary': {mod.__name__!r} has no 'apply_rotary_pos_emb' to replace")
        modules[mod.__name__] = mod
    originals = {name: mod.apply_rotary_pos_emb for name, mod in modules.items()}
    for mod in modules.values():
        mod.apply_rotary_pos_emb = fn  # type: ignore[attr-defined]

    def restore() -> None:
        for name, mod in modules.items():
            mod.apply_rotary_pos_emb = originals[name]  # type: ignore[attr-defined]

    return len(attention), restore


_PATCHERS = {"rmsnorm": _patch_rmsnorm, "silu_mul": _patch_silu_mul, "rotary": _patch_rotary}


def install_override(
    model: Any,
    op: str,
    spec: str,
    base_dir: Path | None = None,
    on_first_call: Callable[[str], None] | None = None,
) -> InstalledOverride:
    """Load ``spec`` and route ``op`` in ``model`` through it; raises ``OverrideError`` when it cannot."""
    if op not in _PATCHERS:
        raise OverrideError(f"op {op!r} cannot be overridden; supported ops: {list(SUPPORTED_OPS)!r}")
    fn, source, digest = load_function(spec, base_dir)
    counter = CallCounter()
    wrapped = _counted(fn, counter, (lambda: on_first_call(op)) if on_first_call else None)
    count, restore = _PATCHERS[op](model, wrapped)
    if count == 0:
        restore()
        raise OverrideError(f"op {op!r}: no module of {type(model).__name__!r} matched; nothing to override")
    return InstalledOverride(op=op, spec=spec, source=source, sha256=digest, modules_patched=count,
                             counter=counter, restore=restore)


def patch_function(model: Any, op: str, fn: Callable[..., Any]) -> tuple[int, Callable[[], None]]:
    """Route ``op`` in ``model`` through an in-process callable (profiling wrappers, tests); returns
    ``(modules patched, restore)``. Overrides from files go through :func:`install_override`."""
    if op not in _PATCHERS:
        raise OverrideError(f"op {op!r} cannot be overridden; supported ops: {list(SUPPORTED_OPS)!r}")
    return _PATCHERS[op](model, fn)
