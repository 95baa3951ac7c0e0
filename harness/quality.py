"""Quality probes for lossy changes: registered evals ``pw-qa-exact-v1`` and ``pw-ppl-v1``.

``pw-qa-exact-v1`` asks every item of the project-written set ``quality_items.json`` (40 short-answer
questions a 135M instruct model can partly solve) through any OpenAI-compatible endpoint
(``POST /v1/chat/completions``, greedy: ``temperature 0``), each after the same four few-shot
exchanges that teach the one-word answer format, and scores exact match after normalization
(``normalize``; a one-word gold answer also matches the first word of the response). The score comes
with a Wilson 95% interval. Bounded: every request has a timeout and the whole eval a deadline; a
request that fails (transport error, HTTP error, malformed body, deadline passed) is scored **wrong**
and counted in ``errors`` -- never dropped -- and with more than ``max_error_rate`` (10%) failed the
eval is written with ``completed: false`` (the auditor then does not accept it).

``pw-ppl-v1`` is the perplexity of the served model on the fixed project-written text
``quality_text.txt``: from the endpoint's prompt logprobs when it gives them (``/v1/completions`` with
``echo`` and ``logprobs``, as vLLM does), otherwise computed in-process with the leg's model. Lower is
better; ``n`` is the number of scored tokens.

Results are ``perfwarden.formats.records.QualityEval`` written to ``<run>/quality/<eval>@<leg>.json``
(``RunDir.quality(eval_id, leg)``), with the baseline's score copied in when the baseline result is
given. Extra fields (kept by the record) carry what a reviewer needs: per-item responses, the error
count, the item set digest (``items_sha256``, the field the auditor compares across legs), the prompt
template, the endpoint and model.
"""

from __future__ import annotations

import hashlib
import math
import re
import string
import time
import unicodedata
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from perfwarden.formats import seal
from perfwarden.formats.records import QualityEval, RunDir
from perfwarden.formats.safe_read import RECORD_BYTES, read_bytes
from perfwarden.formats.strict_json import loads
from perfwarden.harness.target_config import TargetConfig
from perfwarden.harness.targets import EmbeddedTarget

QA_EVAL_ID = "pw-qa-exact-v1"
PPL_EVAL_ID = "pw-ppl-v1"
HERE = Path(__file__).resolve().parent
ITEMS_PATH = HERE / "quality_items.json"
TEXT_PATH = HERE / "quality_text.txt"
Z_95 = 1.959963984540054
MAX_ERROR_RATE = 0.10
"""More failed requests than this fraction: the eval is not complete."""


class QualityError(RuntimeError):
    """The eval could not be run at all (bad item file, no way to get perplexity): our side's problem."""


# ------------------------------------------------------------------------------------------- items


@dataclass(frozen=True)
class QAItem:
    """One short-answer item."""

    id: str
    question: str
    answers: tuple[str, ...]
    category: str = ""


@dataclass(frozen=True)
class ItemSet:
    items: tuple[QAItem, ...]
    prompt_template: str
    version: int
    few_shot: tuple[tuple[str, str], ...]
    """(question, answer) exchanges sent before every item as earlier chat turns (the answer format)."""
    sha256: str
    """Digest of the item file's bytes: a baseline and a candidate must have used the same set."""

    def subset(self, n: int) -> "ItemSet":
        """The first ``n`` items (smoke runs); its digest differs from the full set's."""
        if not 0 < n <= len(self.items):
            raise ValueError(f"subset size {n!r} outside 1..{len(self.items)}")
        if n == len(self.items):
            return self
        return replace(self, items=self.items[:n],
                       sha256=hashlib.sha256(f"{self.sha256}:first-{n}".encode()).hexdigest())


def load_items(path: Path | str | None = None) -> ItemSet:
    """Load and validate an item set (``quality_items.json`` by default)."""
    path = Path(path) if path is not None else ITEMS_PATH
    try:
        raw = read_bytes(path, limit=RECORD_BYTES, what="item set")
        data = loads(raw, what=f"item set {str(path)!r}")
        template = data["prompt_template"]
        few_shot = tuple((str(s["question"]), str(s["answer"])) for s in data.get("few_shot", []))
        items = tuple(QAItem(id=str(i["id"]), question=str(i["question"]),
                             answers=tuple(str(a) for a in i["answers"]), category=str(i.get("category", "")))
                      for i in data["items"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise QualityError(f"item set {str(path)!r} is malformed: {exc!r}") from exc
    if "{question}" not in template:
        raise QualityError(f"prompt_template of {str(path)!r} has no '{{question}}' placeholder")
    ids = [i.id for i in items]
    if not items or len(set(ids)) != len(ids) or any(not i.answers for i in items):
        raise QualityError(f"item set {str(path)!r} needs items with unique ids and at least one answer each")
    overlap = {q for q, _ in few_shot} & {i.question for i in items}
    if overlap:
        raise QualityError(f"few-shot examples {sorted(overlap)!r} are also items in {str(path)!r}")
    return ItemSet(items, template, int(data.get("version", 1)), few_shot, hashlib.sha256(raw).hexdigest())


def render_prompt(template: str, question: str) -> str:
    """Fill the template strictly: only ``{question}`` exists, anything else is an error."""
    return template.format_map(_Strict(question=question))


class _Strict(dict[str, str]):
    def __missing__(self, key: str) -> str:
        raise KeyError(f"prompt template variable {key!r} is not provided")


# ----------------------------------------------------------------------------------------- scoring

_PUNCT = set(string.punctuation) | {"\u2018", "\u2019", "\u201c", "\u201d", "\u2013", "\u2014", "\u2026", "\u00bf",
                                    "\u00a1"}
_ARTICLE = re.compile(r"^(the|a|an)\s+")


def normalize(text: str) -> str:
    """Lowercase; first non-empty line; punctuation removed; whitespace collapsed; leading article dropped.

    Markdown emphasis and quotes around the answer (``**Paris**``, ``"Paris."``) are punctuation here,
    so they do not cost a match.
    """
    text = unicodedata.normalize("NFKC", text or "")
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    line = "".join(" " if ch in _PUNCT else ch for ch in line.lower())
    line = " ".join(line.split())
    return _ARTICLE.sub("", line)


def is_match(response: str, answers: Sequence[str]) -> bool:
    """Exact match of the normalized response with a normalized gold answer; for a one-word gold answer
    the response's first word also counts (``"Paris is the capital."`` answers ``Paris``)."""
    resp = normalize(response)
    words = resp.split()
    for answer in answers:
        gold = normalize(answer)
        if not gold:
            continue
        if resp == gold or (len(gold.split()) == 1 and words and words[0] == gold):
            return True
    return False


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (95% by default)."""
    if n <= 0:
        raise ValueError(f"wilson_interval needs n > 0, got n={n!r}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes={successes!r} outside [0, n={n!r}]")
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    return max(0.0, center - half), min(1.0, center + half)


# ---------------------------------------------------------------------------------------- requests


def item_messages(items: ItemSet, question: str) -> list[dict[str, str]]:
    """The chat messages of one item: the few-shot exchanges, then the item's question."""
    messages: list[dict[str, str]] = []
    for q, a in items.few_shot:
        messages += [{"role": "user", "content": render_prompt(items.prompt_template, q)},
                     {"role": "assistant", "content": a}]
    messages.append({"role": "user", "content": render_prompt(items.prompt_template, question)})
    return messages


def chat_payload(model: str, messages: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
    """The request body sent for one item (greedy, non-streaming)."""
    return {"model": model, "messages": messages, "temperature": 0, "max_tokens": max_tokens, "stream": False}


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _chat(client: httpx.Client, url: str, payload: dict[str, Any], timeout_s: float) -> tuple[str | None, str | None]:
    """``(text, None)`` or ``(None, error)``: every failure becomes an error string, never an exception."""
    try:
        response = client.post(url, json=payload, timeout=timeout_s)
    except httpx.TimeoutException:
        return None, f"timeout after {timeout_s:g}s"
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"
    if response.status_code != 200:
        return None, f"HTTP {response.status_code}: {response.text[:200]}"
    try:
        body = response.json()
        content = body["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        return None, f"malformed response ({type(exc).__name__}): {response.text[:200]}"
    if content is None:
        content = ""
    if not isinstance(content, str):
        return None, f"malformed response: message.content is {type(content).__name__}"
    return content, None


def discover_model(client: httpx.Client, base_url: str, timeout_s: float) -> str:
    """The first model ``GET /v1/models`` lists (what the endpoint serves)."""
    try:
        response = client.get(f"{base_url}/v1/models", timeout=timeout_s)
        response.raise_for_status()
        return str(response.json()["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise QualityError(f"cannot list models at {base_url!r}: {exc!r}; pass model= explicitly") from exc


def _baseline(baseline: QualityEval | Path | str | None, eval_id: str, extra_check: dict[str, Any]
              ) -> QualityEval | None:
    if baseline is None:
        return None
    if not isinstance(baseline, QualityEval):
        baseline = QualityEval.model_validate(loads(read_bytes(baseline, limit=RECORD_BYTES, what="baseline result"),
                                                    what="baseline result"))
    if baseline.eval_id != eval_id:
        raise QualityError(f"baseline result is for eval {baseline.eval_id!r}, not {eval_id!r}")
    if not baseline.completed:
        raise QualityError(f"baseline result for leg {baseline.leg!r} is not completed; re-run it")
    extra = baseline.model_extra or {}
    for key, value in extra_check.items():
        if key in extra and extra[key] != value:
            raise QualityError(f"baseline {key} {extra[key]!r} differs from this run's {value!r}: the two "
                               "scores would not be comparable")
    return baseline


def evaluate_qa(
    base_url: str,
    leg: str,
    *,
    model: str | None = None,
    items: ItemSet | None = None,
    baseline: QualityEval | Path | str | None = None,
    timeout_s: float = 30.0,
    deadline_s: float = 900.0,
    max_tokens: int = 12,
    concurrency: int = 1,
    max_error_rate: float = MAX_ERROR_RATE,
    api_key: str | None = None,
    transport: httpx.BaseTransport | None = None,
) -> QualityEval:
    """Run ``pw-qa-exact-v1`` against ``base_url`` for ``leg``; returns the record (nothing written)."""
    items = items or load_items()
    base_url = base_url.rstrip("/")
    base = _baseline(baseline, QA_EVAL_ID, {"item_set_sha256": items.sha256})
    started = time.time()
    deadline = time.monotonic() + deadline_s
    url = f"{base_url}/v1/chat/completions"
    with httpx.Client(headers=_headers(api_key), transport=transport) as client:
        model = model or discover_model(client, base_url, timeout_s)

        def one(item: QAItem) -> dict[str, Any]:
            messages = item_messages(items, item.question)
            left = deadline - time.monotonic()
            text: str | None
            error: str | None
            if left <= 0:
                text, error = None, f"not sent: eval deadline of {deadline_s:g}s passed"
            else:
                text, error = _chat(client, url, chat_payload(model, messages, max_tokens), min(timeout_s, left))
            correct = error is None and is_match(text or "", item.answers)
            return {"id": item.id, "category": item.category, "answers": list(item.answers), "response": text,
                    "normalized": normalize(text) if text is not None else None, "correct": correct,
                    "error": error}

        with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            details = list(pool.map(one, items.items))
    n = len(details)
    right = sum(d["correct"] for d in details)
    errors = sum(d["error"] is not None for d in details)
    low, high = wilson_interval(right, n)
    return QualityEval(
        eval_id=QA_EVAL_ID, leg=leg, n=n, score=right / n, ci_low=low, ci_high=high,
        baseline_score=base.score if base else None, baseline_leg=base.leg if base else None,
        completed=errors <= max_error_rate * n,
        errors=errors, error_rate=errors / n, max_error_rate=max_error_rate, correct=right,
        model=model, endpoint=url, prompt_template=items.prompt_template, few_shot=[list(s) for s in items.few_shot],
        item_set_version=items.version, items_sha256=items.sha256,
        item_set_sha256=items.sha256, max_tokens=max_tokens, temperature=0, started_at=started,
        duration_s=round(time.time() - started, 3), items=details,
    )


def write_eval(run_dir: Path | str, result: QualityEval) -> Path:
    """Write ``result`` to ``<run>/quality/<eval>@<leg>.json`` atomically; returns the path."""
    path = RunDir(run_dir).quality(result.eval_id, result.leg)
    seal.write_json(path, result, run_dir)  # sealed when the run has a chain; never through a link
    return path


def run_qa_eval(run_dir: Path | str, leg: str, base_url: str, **kwargs: Any) -> Path:
    """``evaluate_qa`` + ``write_eval`` (keyword arguments as ``evaluate_qa``)."""
    return write_eval(run_dir, evaluate_qa(base_url, leg, **kwargs))


# -------------------------------------------------------------------------------------- perplexity


def load_text(path: Path | str | None = None) -> tuple[str, str]:
    """The fixed perplexity text and its sha256."""
    raw = (Path(path) if path is not None else TEXT_PATH).read_bytes()
    return raw.decode("utf-8").strip(), hashlib.sha256(raw).hexdigest()


def token_nlls_in_process(model: Any, tokenizer: Any, text: str) -> list[float]:
    """Negative log-likelihood (nats) of every token of ``text`` after the first, in one forward pass."""
    import torch

    ids = tokenizer(text, return_tensors="pt").input_ids
    max_len = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if max_len is not None and ids.shape[1] > max_len:
        raise QualityError(f"perplexity text has {ids.shape[1]} tokens; the model takes {max_len}")
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].to(torch.float32)
    logp = torch.log_softmax(logits, dim=-1)
    nll = -logp.gather(-1, ids[0, 1:, None])[:, 0]
    return [float(x) for x in nll]


def token_nlls_from_endpoint(base_url: str, model: str, text: str, timeout_s: float = 120.0,
                             api_key: str | None = None, transport: httpx.BaseTransport | None = None
                             ) -> tuple[list[float] | None, str | None]:
    """Prompt logprobs via ``/v1/completions`` with ``echo`` (vLLM-style); ``(None, why)`` when the
    endpoint does not give them."""
    payload = {"model": model, "prompt": text, "max_tokens": 1, "temperature": 0, "echo": True, "logprobs": 1}
    try:
        with httpx.Client(headers=_headers(api_key), transport=transport) as client:
            response = client.post(f"{base_url.rstrip('/')}/v1/completions", json=payload, timeout=timeout_s)
        if response.status_code != 200:
            return None, f"HTTP {response.status_code}: {response.text[:200]}"
        lp = response.json()["choices"][0]["logprobs"]["token_logprobs"]
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    # The first prompt token has no logprob; the last entry belongs to the generated token.
    values = [v for v in (lp or [])[1:-1] if v is not None]
    if len(values) < 2 or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
        return None, "no usable prompt logprobs in the response"
    return [-float(v) for v in values], None


def perplexity_stats(nlls: Sequence[float]) -> tuple[float, float, float]:
    """``(ppl, ci_low, ci_high)``: exp of the mean NLL and of its normal 95% interval (tokens are not
    independent, so the interval is indicative, not exact)."""
    n = len(nlls)
    if n < 2:
        raise ValueError(f"perplexity needs at least 2 scored tokens, got {n}")
    mean = sum(nlls) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in nlls) / (n - 1))
    half = Z_95 * sd / math.sqrt(n)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def evaluate_ppl(
    leg: str,
    *,
    model: Any = None,
    tokenizer: Any = None,
    base_url: str | None = None,
    model_name: str | None = None,
    text_path: Path | str | None = None,
    baseline: QualityEval | Path | str | None = None,
    timeout_s: float = 120.0,
    api_key: str | None = None,
    transport: httpx.BaseTransport | None = None,
) -> QualityEval:
    """``pw-ppl-v1`` for ``leg``: endpoint logprobs when ``base_url`` gives them, else in-process with
    ``model``/``tokenizer`` (which must be the leg's model: same dtype, quantization, overrides)."""
    text, text_sha = load_text(text_path)
    base = _baseline(baseline, PPL_EVAL_ID, {"text_sha256": text_sha})
    started = time.time()
    nlls: list[float] | None = None
    method, why_not_endpoint = None, None
    if base_url:
        name = model_name
        if name is None:
            with httpx.Client(headers=_headers(api_key), transport=transport) as client:
                name = discover_model(client, base_url.rstrip("/"), timeout_s)
        nlls, why_not_endpoint = token_nlls_from_endpoint(base_url, name, text, timeout_s, api_key, transport)
        method = "endpoint_logprobs" if nlls is not None else None
    if nlls is None:
        if model is None or tokenizer is None:
            raise QualityError("perplexity needs endpoint prompt logprobs or an in-process model and tokenizer"
                               + (f" (endpoint: {why_not_endpoint})" if why_not_endpoint else ""))
        nlls = token_nlls_in_process(model, tokenizer, text)
        method = "in_process"
    ppl, low, high = perplexity_stats(nlls)
    return QualityEval(
        eval_id=PPL_EVAL_ID, leg=leg, n=len(nlls), score=ppl, ci_low=low, ci_high=high,
        baseline_score=base.score if base else None, baseline_leg=base.leg if base else None, completed=True,
        method=method, endpoint_unavailable=why_not_endpoint, text_sha256=text_sha, items_sha256=text_sha,
        mean_nll=sum(nlls) / len(nlls), started_at=started, duration_s=round(time.time() - started, 3),
    )


def run_ppl_eval(run_dir: Path | str, leg: str, **kwargs: Any) -> Path:
    """``evaluate_ppl`` + ``write_eval``."""
    return write_eval(run_dir, evaluate_ppl(leg, **kwargs))


# ---------------------------------------------------------------------------------------------- lab


def run_quality_pair(run_dir: Path | str, leg: str, leg_config: TargetConfig, baseline_leg: str,
                     baseline_config: TargetConfig, *, items: ItemSet | None = None, timeout_s: float = 120.0,
                     concurrency: int = 2, start_timeout_s: float = 180.0,
                     make_target: Callable[[Path, TargetConfig], Any] | None = None) -> str:
    """Run ``pw-qa-exact-v1`` for ``baseline_leg`` then ``leg`` (each on its own server started with that
    leg's config), write both results, and return the eval id. ``make_target(server_dir, config)``
    builds the server (a ``ServerTarget``; default: the embedded target): the eval only needs its
    OpenAI-compatible endpoint, so any target's lab can run it.

    The servers log under ``<run>/quality/servers/<leg>/`` so a leg's own ``server.log`` stays the
    record of its measured reps. A completed baseline result already in the run for the same item set
    is reused (resume; several candidates against one baseline).
    """
    items = items or load_items()
    paths = RunDir(run_dir)
    if make_target is None:
        def make_target(server_dir: Path, config: TargetConfig) -> Any:
            return EmbeddedTarget(server_dir, config.model_dump(), start_timeout_s=start_timeout_s)

    def evaluate(name: str, config: TargetConfig, baseline: QualityEval | None) -> QualityEval:
        server_dir = Path(run_dir) / "quality" / "servers" / name
        with make_target(server_dir, config) as target:
            return evaluate_qa(target.base_url, name, items=items, baseline=baseline, timeout_s=timeout_s,
                               concurrency=concurrency)

    base: QualityEval | None = None
    existing = paths.quality(QA_EVAL_ID, baseline_leg)
    if existing.is_file():
        try:
            prior = QualityEval.model_validate(loads(read_bytes(existing, limit=RECORD_BYTES, what="quality eval"),
                                                     what="quality eval"))
        except (OSError, ValueError):
            prior = None
        if prior is not None and prior.completed and (prior.model_extra or {}).get("item_set_sha256") == items.sha256:
            base = prior
    if base is None:
        base = evaluate(baseline_leg, baseline_config, None)
        write_eval(run_dir, base)
    write_eval(run_dir, evaluate(leg, leg_config, base if base.completed else None))
    return QA_EVAL_ID
