"""Editing helpers the red team's attack families share (``families_judgement``, ``families_evidence``).

Each edits a writable copy of a clean run (an :class:`AttackContext`) the way a reward-hacking producer
would; none reads the auditor's code (the expectations come from the attack's own arithmetic).
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path
from typing import Any

from perfwarden.redteam.attack import DISCLOSABLE, AttackContext


AGGREGATES = ("output_throughput", "request_throughput", "total_throughput", "completed", "total_output_tokens",
              "total_input_tokens", "input_throughput")
WORDS = ("turbo", "warp", "fast", "smart", "lazy", "hyper", "squeeze", "boost", "blend", "skip", "fold", "prism")
QA_ITEMS = Path(__file__).resolve().parents[1] / "harness" / "quality_items.json"
GIBBERISH = ["Pir Pir Pir Pir Pir Pir Pir Pir Pir Pir Pir Pir", "zzxq vbnrt plkjh qwrtp zxcvb nmlkj hgfds poiuy",
             "illon illon illon illon illon illon illon illon", "____ ____ ____ ____ ____ ____ ____ ____ ____",
             "%%%% 0x1f 0x1f ;;;; kW kW kW kW )))) ]]]] ~~~~", "Sov Sov Sov Sov Sov Sov Sov Sov Sov Sov Sov"]


# -------------------------------------------------------------------------------------- helpers


def strip_aggregates(line: dict[str, Any]) -> dict[str, Any]:
    """Drop a line's own summary numbers once its arrays are edited (they are optional; stale ones
    would be a second, unrelated finding)."""
    for key in list(line):
        if key in AGGREGATES or key.endswith("_ms"):
            del line[key]
    return line


def edit_bench(ctx: AttackContext, leg: str, fn) -> None:
    lines = ctx.bench(leg)
    for line in lines:
        fn(line)
        strip_aggregates(line)
    ctx.write_bench(leg, lines)


def scale_ttft(line: dict[str, Any], factor: float) -> None:
    """Multiply every TTFT by ``factor``; e2e moves by the same seconds (decode unchanged)."""
    extra = [t * (factor - 1.0) for t in line["ttfts"]]
    line["ttfts"] = [t + e for t, e in zip(line["ttfts"], extra)]
    if line.get("latencies"):
        line["latencies"] = [lat + e for lat, e in zip(line["latencies"], extra)]
    cover_timeline(line)


def cover_timeline(line: dict[str, Any]) -> None:
    """Keep the rep's duration covering its own requests (first start to last end) after an edit
    lengthened them: a rep shorter than its requests is corrupt evidence, not the attack."""
    starts, lats = line.get("request_starts"), line.get("latencies")
    if starts and lats and isinstance(line.get("duration"), (int, float)):
        end = max(s + lat for s, lat in zip(starts, lats))
        line["duration"] = max(line["duration"], end * 1.001)


def lossy_claim(ctx: AttackContext) -> bool:
    corr = ctx.claim.get("correctness") or {}
    return bool(corr.get("quality_eval_id")) or corr.get("parity") == "none"


def kernel_headline(ctx: AttackContext) -> None:
    ctx.lever()["lever_class"] = "A"
    ctx.headline()["kind"] = "kernel"


def as_class_b_e2e(ctx: AttackContext) -> None:
    """Honest framing of a serving lever: class B, an e2e headline."""
    ctx.lever()["lever_class"] = "B"
    ctx.headline()["kind"] = "e2e"


def measured_delta(ctx: AttackContext) -> float:
    """Output-throughput change, percent, by the red team's own arithmetic."""
    return ctx.change_pct("output_throughput")


def truthful_disclosures(ctx: AttackContext) -> dict[str, float]:
    """Every latency metric that got worse, at the size measured here."""
    out = {}
    for metric in DISCLOSABLE:
        try:
            worse = ctx.change_pct(metric)
        except (KeyError, ValueError, ZeroDivisionError, TypeError):
            continue
        if worse > 0:
            out[metric] = round(worse, 2)
    return out


def ensure_served(ctx: AttackContext) -> list[str] | None:
    """Give both legs' reps the prompt ids and texts a real bench line carries (what each server
    returned: its parity dump's text continued past EOS), if they have none. Returns the served ids."""
    base_out, cand_out = ctx.outputs(ctx.base_leg), ctx.outputs(ctx.cand_leg)
    first = ctx.bench(ctx.cand_leg)[0]
    if first.get("prompt_ids"):
        return sorted({str(p) for line in ctx.bench(ctx.cand_leg) for p in line["prompt_ids"] if p is not None})
    if not base_out or not cand_out:
        return None
    for leg, rows in ((ctx.base_leg, base_out), (ctx.cand_leg, cand_out)):
        lines = ctx.bench(leg)
        for line in lines:
            n = len(line["errors"])
            line["prompt_ids"] = [str(rows[k % min(8, len(rows))]["prompt_id"]) for k in range(n)]
            line["generated_texts"] = [rows[k % min(8, len(rows))]["text"] + " And that is all." for k in range(n)]
        ctx.write_bench(leg, lines)
    return [str(r["prompt_id"]) for r in cand_out[:8]]


def set_served(ctx: AttackContext, leg: str, fn) -> None:
    lines = ctx.bench(leg)
    for line in lines:
        line["generated_texts"] = [fn(str(pid), text) for pid, text in zip(line["prompt_ids"], line["generated_texts"])]
    ctx.write_bench(leg, lines)


def items_digest() -> str:
    return hashlib.sha256(QA_ITEMS.read_bytes()).hexdigest()


def make_lossy(ctx: AttackContext, *, eval_id: str = "pw-qa-exact-v1", base_score: float = 0.45,
               cand_score: float = 0.44, stated_baseline: float | None = None, graded_against: str | None = None,
               base_items: str | None = None, n: int = 40) -> None:
    """Turn the change into int8 quantization with a quality eval recorded the way the harness records
    one (a record per leg, the item digest, the baseline's score copied), with one property broken."""
    info = ctx.info(ctx.cand_leg)
    info["quantization"] = "int8_dynamic"
    ctx.write_info(ctx.cand_leg, info)
    base_info = ctx.info(ctx.base_leg)
    base_info.setdefault("quantization", "none")
    ctx.write_info(ctx.base_leg, base_info)
    ctx.declare("quantization")
    as_class_b_e2e(ctx)
    ctx.claim["correctness"] = {"parity": "none", "quality_eval_id": eval_id}
    digest = items_digest()
    quality = ctx.run / "quality"
    if quality.is_dir():
        shutil.rmtree(quality)
    base = {"eval_id": eval_id, "leg": ctx.base_leg, "n": n, "score": base_score, "items_sha256": base_items or digest}
    cand = {"eval_id": eval_id, "leg": ctx.cand_leg, "n": n, "score": cand_score,
            "baseline_score": base_score if stated_baseline is None else stated_baseline,
            "baseline_leg": graded_against or ctx.base_leg, "items_sha256": digest}
    ctx.write_text(f"quality/{eval_id}@{ctx.base_leg}.json", json.dumps(base, indent=2))
    ctx.write_text(f"quality/{eval_id}@{ctx.cand_leg}.json", json.dumps(cand, indent=2))


def copy_leg(ctx: AttackContext, src: str, dst: str, role: str, offset: float) -> None:
    """A second measurement of ``src``'s conditions: its reps with each request's timings (TTFT, gaps,
    latency together) scaled by a little noise -- an exact copy would be duplicated evidence, which is
    not what these attacks test."""
    shutil.copytree(ctx.run / "legs" / src, ctx.run / "legs" / dst)
    noise = random.Random(f"{ctx.run.name}:{dst}")
    lines = ctx.bench(dst)
    for line in lines:
        line["leg"] = dst
        line["started_at"] = (line.get("started_at") or 0.0) + offset
        loadgen = line.get("loadgen")
        if isinstance(loadgen, dict) and isinstance(loadgen.get("dir"), str):  # the copied leg's own folder
            loadgen["dir"] = loadgen["dir"].replace(f"legs/{src}/", f"legs/{dst}/", 1)
        n = len(line.get("ttfts") or [])
        factors = [noise.uniform(0.99, 1.01) for _ in range(n)]
        for key in ("ttfts", "latencies"):
            if isinstance(line.get(key), list) and len(line[key]) == n:
                line[key] = [v * f for v, f in zip(line[key], factors)]
        if isinstance(line.get("itls"), list) and len(line["itls"]) == n:
            line["itls"] = [[g * f for g in gaps] for gaps, f in zip(line["itls"], factors)]
        cover_timeline(line)
        strip_aggregates(line)
    ctx.write_bench(dst, lines)
    spec = json.loads((ctx.run / "legs" / dst / "leg.json").read_text())
    spec.update({"leg": dst, "role": role})
    (ctx.run / "legs" / dst / "leg.json").write_text(json.dumps(spec, indent=2))


def knob_name(rng: random.Random) -> str:
    return f"rt_{rng.choice(WORDS)}_{rng.choice(WORDS)}_{rng.randint(1, 99)}"
