"""Reproduce the coherence calibration: record real and random-weight greedy outputs, then score them.

Usage (from the repository root, ~1-2 minutes on 2 CPU cores)::

    python proof/calibration/coherence_calibration.py record   # regenerate coherence_samples.json
    python proof/calibration/coherence_calibration.py report   # score the recorded samples

``record`` runs the models and writes ``coherence_samples.json`` (texts + labels, no scores: the data
must not be produced by the function under test). ``report`` scores the recorded texts with
``perfwarden.auditor.coherence`` and prints the distributions and the threshold choice that
``coherence.md`` documents.

Groups recorded (``max_new_tokens`` = 48, greedy, the calibration's prompt set ``coherence_prompts.py``):

- ``real_chat``: SmolLM2-135M-Instruct, chat template (how the embedded target serves chat) -- positive;
- ``real_raw``: the real weights on the bare prompt text (completions), stopping at EOS;
- ``real_raw_ignore_eos``: the same with EOS suppressed (how ``bench_serving --ignore-eos`` runs);
- ``random_chat`` / ``random_raw``: same architecture and tokenizer, random weights (fixed seed) -- negative;
- ``random_tokens``: uniformly sampled token ids, decoded (fixed seed) -- negative;
- ``degenerate``: empty/whitespace strings and one token repeated -- negative.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from perfwarden.auditor.coherence import THRESHOLD, coherence_score

HERE = Path(__file__).resolve().parent
SAMPLES = HERE / "coherence_samples.json"
MAX_NEW_TOKENS = 48
RANDOM_TOKENS_SEED = 7
THREADS = 2

LABELS = {
    "real_chat": "real",
    "real_raw": "real",
    "real_raw_ignore_eos": "real",
    "random_chat": "random_weight",
    "random_raw": "random_weight",
    "random_tokens": "random_tokens",
    "degenerate": "degenerate",
}
POSITIVE_GROUPS = ("real_chat",)
"""Groups whose every judged text must score at or above the threshold."""
NEGATIVE_GROUPS = ("random_chat", "random_raw", "random_tokens", "degenerate")
"""Groups whose every judged text must score below the threshold."""


def _greedy(model, tok, prompts: list[str], chat: bool, ignore_eos: bool) -> list[dict[str, Any]]:
    import torch

    tok.padding_side = "left"
    if chat:
        texts = [
            tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
            for p in prompts
        ]
    else:
        texts = prompts
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    kwargs: dict[str, Any] = dict(max_new_tokens=MAX_NEW_TOKENS, do_sample=False, pad_token_id=tok.pad_token_id)
    if ignore_eos:
        kwargs["min_new_tokens"] = MAX_NEW_TOKENS
    with torch.inference_mode():
        out = model.generate(**enc, **kwargs)
    width = enc["input_ids"].shape[1]
    rows = []
    for row in out:
        ids = [int(t) for t in row[width:]]
        if tok.eos_token_id in ids and not ignore_eos:
            ids = ids[: ids.index(tok.eos_token_id)]
        rows.append({"token_ids": ids, "text": tok.decode(ids, skip_special_tokens=True)})
    return rows


def record() -> dict[str, Any]:
    """Run the models and return the samples document (texts + labels + provenance)."""
    import torch
    import transformers

    from perfwarden.harness import model as M
    from perfwarden.proof.calibration.coherence_prompts import PROMPTS

    torch.set_num_threads(THREADS)
    prompts = [p.text for p in PROMPTS]
    samples: list[dict[str, Any]] = []

    def add(group: str, prompt_id: str | None, row: dict[str, Any]) -> None:
        samples.append({"group": group, "label": LABELS[group], "prompt_id": prompt_id, **row})

    real, tok = M.load_model()
    for group, chat, ignore_eos in (("real_chat", True, False), ("real_raw", False, False),
                                    ("real_raw_ignore_eos", False, True)):
        for p, row in zip(PROMPTS, _greedy(real, tok, prompts, chat, ignore_eos), strict=True):
            add(group, p.id, row)
    del real
    rnd, _ = M.random_weight_model()
    for group, chat in (("random_chat", True), ("random_raw", False)):
        for p, row in zip(PROMPTS, _greedy(rnd, tok, prompts, chat, ignore_eos=False), strict=True):
            add(group, p.id, row)
    del rnd

    gen = torch.Generator().manual_seed(RANDOM_TOKENS_SEED)
    for i in range(16):
        ids = torch.randint(0, tok.vocab_size, (MAX_NEW_TOKENS,), generator=gen).tolist()
        add("random_tokens", f"rt{i:02d}", {"token_ids": ids, "text": tok.decode(ids, skip_special_tokens=True)})
    for piece in (" the", " Paris", "ing", ".", "\n", " I am", "!"):
        ids = tok.encode(piece, add_special_tokens=False) * (MAX_NEW_TOKENS // max(1, len(tok.encode(piece, add_special_tokens=False))))
        add("degenerate", None, {"token_ids": ids, "text": tok.decode(ids)})
    for text in ("", " ", "\n\n\n\n", "\r\n" * 24):
        add("degenerate", None, {"token_ids": tok.encode(text, add_special_tokens=False), "text": text})

    return {
        "description": "Greedy outputs recorded for the coherence calibration; scores are not stored here.",
        "model": M.MODEL_NAME,
        "weights_digest": M.weights_digest(),
        "random_weight_seed": M.RANDOM_WEIGHT_SEED,
        "random_tokens_seed": RANDOM_TOKENS_SEED,
        "max_new_tokens": MAX_NEW_TOKENS,
        "torch_threads": THREADS,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "labels": LABELS,
        "samples": samples,
    }


def load_samples(path: Path = SAMPLES) -> dict[str, Any]:
    """The recorded samples document."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _quantiles(xs: list[float]) -> str:
    if not xs:
        return "n=0"
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=4) if len(xs) >= 2 else [xs[0]] * 3
    return f"n={len(xs):2d} min={xs[0]:.3f} q1={q[0]:.3f} median={q[1]:.3f} q3={q[2]:.3f} max={xs[-1]:.3f}"


def report(doc: dict[str, Any]) -> dict[str, Any]:
    """Score the recorded texts; return per-group distributions and the separation."""
    groups: dict[str, list[str]] = {}
    for s in doc["samples"]:
        groups.setdefault(s["group"], []).append(s["text"])
    summary: dict[str, Any] = {"threshold": THRESHOLD, "groups": {}}
    per_group_scores: dict[str, list[float]] = {}
    for group, texts in groups.items():
        result = coherence_score(texts)
        scores = [t.score for t in result.per_text if t.score is not None]
        per_group_scores[group] = scores
        summary["groups"][group] = {
            "label": LABELS[group],
            "n": len(texts),
            "n_judged": result.n_judged,
            "set_score": result.score,
            "set_is_coherent": result.is_coherent,
            "per_text": _quantiles(scores),
            "per_text_below_threshold": sum(1 for x in scores if x < THRESHOLD),
        }
    pos = [x for g in POSITIVE_GROUPS for x in per_group_scores.get(g, [])]
    neg = [x for g in NEGATIVE_GROUPS for x in per_group_scores.get(g, [])]
    summary["min_positive"] = min(pos)
    summary["max_negative"] = max(neg)
    summary["gap"] = min(pos) - max(neg)
    summary["midpoint"] = (min(pos) + max(neg)) / 2
    summary["margin_below_min_positive"] = min(pos) - THRESHOLD
    summary["margin_above_max_negative"] = THRESHOLD - max(neg)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["record", "report"])
    parser.add_argument("--samples", type=Path, default=SAMPLES)
    args = parser.parse_args(argv)
    if args.command == "record":
        doc = record()
        args.samples.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {len(doc['samples'])} samples to {str(args.samples)!r}")
    summary = report(load_samples(args.samples))
    for group, info in summary["groups"].items():
        print(f"{group:20s} label={info['label']:13s} set_score={info['set_score']!s:.5} "
              f"coherent={info['set_is_coherent']!s:5} judged={info['n_judged']:2d}/{info['n']:2d} "
              f"below={info['per_text_below_threshold']:2d}  {info['per_text']}")
    print(
        f"threshold={summary['threshold']} min_positive={summary['min_positive']:.3f} "
        f"max_negative={summary['max_negative']:.3f} gap={summary['gap']:.3f} "
        f"midpoint={summary['midpoint']:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
